//! Where L2 checkpoints live: one small trait, [`Store`], and the embedded
//! default backend, [`DirStore`], a local or mounted directory.
//!
//! The chain code only ever sees a `Store`, so other backends (an object
//! store) slot in without touching it. The trait is shaped by what the
//! chain needs and what an object store can do: whole immutable objects put
//! atomically, listed, read, deleted; never modified in place. Objects are
//! read through [`Store::open_local`], which returns a local path to map:
//! the directory backend returns the file itself (restore reads straight from
//! the page cache), a remote backend would fetch into a local cache first.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::durable::{self, AtomicFile};
use crate::error::{Error, IoContext, Result};

/// Metadata of a stored object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Object name (a plain file name).
    pub name: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Last modification, if the backend knows it.
    pub modified: Option<std::time::SystemTime>,
}

/// A place that holds a job's L2 objects.
pub trait Store: Send + Sync {
    /// A human description ("directory /scratch/l2").
    fn describe(&self) -> String;
    /// Lists the objects (temporaries excluded).
    fn list(&self) -> Result<Vec<ObjectInfo>>;
    /// Stores `bytes` as `name`, atomically and durably.
    fn put_bytes(&self, name: &str, bytes: &[u8]) -> Result<()>;
    /// Copies the local file `src` to `name`, atomically and durably, and
    /// returns (bytes, CRC-32) of what was stored.
    fn put_file(&self, name: &str, src: &Path) -> Result<(u64, u32)>;
    /// Reads a whole (small) object.
    fn read(&self, name: &str) -> Result<Vec<u8>>;
    /// A local path holding the object's bytes, for memory mapping.
    fn open_local(&self, name: &str) -> Result<PathBuf>;
    /// Deletes an object; a missing one is not an error.
    fn delete(&self, name: &str) -> Result<()>;
    /// The local directory behind the store, if it is one (for removing
    /// crashed writers' temporaries under the job lock).
    fn local_root(&self) -> Option<PathBuf> {
        None
    }
}

/// A directory as a store: objects are files, put through [`AtomicFile`].
#[derive(Clone, Debug)]
pub struct DirStore {
    root: PathBuf,
}

impl DirStore {
    /// A store rooted at `root`, created if missing.
    pub fn create(root: impl AsRef<Path>) -> Result<DirStore> {
        let root = root.as_ref().to_path_buf();
        fs::create_dir_all(&root).ctx(&root, "create directory")?;
        Ok(DirStore { root })
    }

    /// A store rooted at an existing directory.
    pub fn open(root: impl AsRef<Path>) -> Result<DirStore> {
        let root = root.as_ref().to_path_buf();
        if !root.is_dir() {
            return Err(Error::io(
                &root,
                "open store",
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such directory"),
            ));
        }
        Ok(DirStore { root })
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, name: &str) -> Result<PathBuf> {
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(Error::Invalid(format!("{name:?} is not a plain object name")));
        }
        Ok(self.root.join(name))
    }
}

impl Store for DirStore {
    fn describe(&self) -> String {
        format!("directory {}", self.root.display())
    }

    fn list(&self) -> Result<Vec<ObjectInfo>> {
        let mut out = Vec::new();
        for e in fs::read_dir(&self.root).ctx(&self.root, "read directory")? {
            let e = e.ctx(&self.root, "read directory")?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let md = e.metadata().ctx(e.path(), "stat")?;
            if md.is_file() {
                out.push(ObjectInfo {
                    name,
                    bytes: md.len(),
                    modified: md.modified().ok(),
                });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn put_bytes(&self, name: &str, bytes: &[u8]) -> Result<()> {
        durable::write_file(self.path(name)?, bytes)
    }

    fn put_file(&self, name: &str, src: &Path) -> Result<(u64, u32)> {
        let mut input = fs::File::open(src).ctx(src, "open")?;
        let mut out = AtomicFile::create(self.path(name)?)?;
        let mut buf = vec![0u8; 1 << 20];
        let mut h = crc32fast::Hasher::new();
        let mut n = 0u64;
        loop {
            let k = input.read(&mut buf).ctx(src, "read")?;
            if k == 0 {
                break;
            }
            h.update(&buf[..k]);
            out.write_all(&buf[..k])?;
            n += k as u64;
        }
        out.commit()?;
        Ok((n, h.finalize()))
    }

    fn read(&self, name: &str) -> Result<Vec<u8>> {
        let p = self.path(name)?;
        fs::read(&p).ctx(&p, "read")
    }

    fn open_local(&self, name: &str) -> Result<PathBuf> {
        let p = self.path(name)?;
        if !p.is_file() {
            return Err(Error::io(
                &p,
                "open",
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such object"),
            ));
        }
        Ok(p)
    }

    fn delete(&self, name: &str) -> Result<()> {
        durable::remove_file(&self.path(name)?)
    }

    fn local_root(&self) -> Option<PathBuf> {
        Some(self.root.clone())
    }
}

/// CRC-32 and length of a local file, read in 1 MiB blocks.
pub fn file_crc(path: &Path) -> Result<(u64, u32)> {
    let mut f = fs::File::open(path).ctx(path, "open")?;
    let mut buf = vec![0u8; 1 << 20];
    let mut h = crc32fast::Hasher::new();
    let mut n = 0;
    loop {
        let k = f.read(&mut buf).ctx(path, "read")?;
        if k == 0 {
            return Ok((n, h.finalize()));
        }
        h.update(&buf[..k]);
        n += k as u64;
    }
}
