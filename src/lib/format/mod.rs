//! On-disk formats, each in its own module and specified in docs/FORMAT.md.
//!
//! Magic numbers and versions live here as constants that mirror the
//! specification; readers check every CRC and bound every offset before use.
//!
//! * [`ic`]: REX-IC, the L1 incremental checkpoint file (§2).
//! * [`chunked`]: the record container of RPS files and Pointer Files (§3.2).
//! * [`ptable`]: the P-Table delta of a generation (§3.3).
//! * [`manifest`]: the generation manifest (§3.4).
//! * [`xref`], [`job_manifest`]: the cross-rank references and job
//!   manifests of MPI jobs (§3.9).
//! * [`json_path`]: how paths are written in `--json` reports.

pub mod chunked;
pub mod ic;
pub mod job_manifest;
pub mod json_path;
pub mod manifest;
pub mod pointer_coding;
pub mod ptable;
pub mod region;
pub mod xref;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::error::{Error, IoContext, Result};

/// Every rexctl binary format starts with a 64-byte header: an 8-byte magic,
/// a `u32` version at 8, and a `u32` CRC-32 of bytes 0..56 at 56.
pub const HEADER_LEN: usize = 64;

/// Opens `path` for reading, refusing anything but a regular file (after
/// following symlinks): a FIFO would block the reader forever, a device or
/// a directory is never a checkpoint. The open itself does not block
/// (`O_NONBLOCK`, which has no effect on regular files).
pub fn open_regular(path: &Path) -> Result<File> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .ctx(path, "open")?;
    let ft = file.metadata().ctx(path, "stat")?.file_type();
    if !ft.is_file() {
        let what = if ft.is_dir() {
            "a directory"
        } else if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_socket() {
            "a socket"
        } else if ft.is_char_device() || ft.is_block_device() {
            "a device"
        } else {
            "not a regular file"
        };
        return Err(Error::corrupt(
            path,
            0,
            "file type",
            format!("{what}, not a regular file: checkpoint files are regular files"),
        ));
    }
    Ok(file)
}

/// Reads `len` bytes of `file` from `off` in bounded pieces, handing each to
/// `f`, without allocating more than one piece: the pass that checks a
/// CRC over a region whose size an untrusted header gave, before anything
/// is sized from it. Fails on a region that has a hole (a sparse file), as
/// no format's metadata may (docs/FORMAT.md §2.7): a few KiB of real bytes
/// must not make a reader walk terabytes of zeros.
pub(crate) fn stream_region(
    path: &Path,
    file: &File,
    off: u64,
    len: u64,
    field: &'static str,
    mut f: impl FnMut(&[u8]),
) -> Result<()> {
    use std::os::fd::AsRawFd;
    const PIECE: u64 = 1 << 20;
    if len == 0 {
        return Ok(());
    }
    // A file with at least as many bytes of storage as its length has real
    // bytes behind every offset read, which is what the hole check is for;
    // `SEEK_HOLE` is then skipped: on tmpfs it walks every page from `off`
    // to the end of the file (about 1 ms per 100 MB IC file, each time one
    // is opened).
    let stored = file
        .metadata()
        .map(|m| {
            use std::os::unix::fs::MetadataExt;
            m.blocks().saturating_mul(512) >= m.len()
        })
        .unwrap_or(false);
    // SAFETY: lseek on a descriptor `file` owns, which outlives the call;
    // it only moves the file offset, which positioned reads ignore.
    let hole = if stored {
        -1
    } else {
        unsafe { libc::lseek(file.as_raw_fd(), off as libc::off_t, libc::SEEK_HOLE) }
    };
    if hole >= 0 && (hole as u64) < off + len {
        return Err(Error::corrupt(
            path,
            hole as u64,
            field,
            format!(
                "the file is sparse inside its metadata (a hole at offset {hole}, metadata ends at {}): metadata is always written in full",
                off + len
            ),
        ));
    }
    let mut buf = vec![0u8; len.min(PIECE) as usize];
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(PIECE) as usize;
        file.read_exact_at(&mut buf[..n], off + done)
            .ctx(path, "read metadata")?;
        f(&buf[..n]);
        done += n as u64;
    }
    Ok(())
}

/// Reads a file's 64-byte header, after checking the file is long enough.
/// Returns the file's length and the header.
pub(crate) fn read_header(path: &Path, file: &File) -> Result<(u64, [u8; HEADER_LEN])> {
    let len = file.metadata().ctx(path, "stat")?.len();
    if len < HEADER_LEN as u64 {
        return Err(Error::corrupt(
            path,
            len,
            "header",
            format!("file is {len} bytes, shorter than the {HEADER_LEN}-byte header"),
        ));
    }
    let mut b = [0u8; HEADER_LEN];
    file.read_exact_at(&mut b, 0).ctx(path, "read header")?;
    Ok((len, b))
}

/// Checks the common prefix of a header, in the order every read procedure
/// of docs/FORMAT.md gives: magic (`what` names the format), then version
/// (before the CRC, so a future version may change the header), then
/// `header_crc`.
pub(crate) fn check_prefix(
    path: &Path,
    b: &[u8; HEADER_LEN],
    magic: &[u8; 8],
    what: &str,
    version: u32,
) -> Result<()> {
    check_prefix_versions(path, b, magic, what, &[version]).map(|_| ())
}

/// As [`check_prefix`], accepting any of `versions`; returns the version.
pub(crate) fn check_prefix_versions(
    path: &Path,
    b: &[u8; HEADER_LEN],
    magic: &[u8; 8],
    what: &str,
    versions: &[u32],
) -> Result<u32> {
    let found = check_magic_version(path, b, magic, what, versions)?;
    check_header_crc(path, b, 56)?;
    Ok(found)
}

/// The first two steps of every read procedure: the magic (`what` names
/// the format), then the version, which must be one of `versions` (checked
/// before the CRC, so a later version may move it). Returns the version.
pub(crate) fn check_magic_version(
    path: &Path,
    b: &[u8; HEADER_LEN],
    magic: &[u8; 8],
    what: &str,
    versions: &[u32],
) -> Result<u32> {
    if &b[0..8] != magic {
        return Err(Error::corrupt(
            path,
            0,
            "magic",
            format!(
                "expected {:?} ({what}), found {:?}",
                String::from_utf8_lossy(magic),
                String::from_utf8_lossy(&b[0..8])
            ),
        ));
    }
    let found = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
    if !versions.contains(&found) {
        let known = versions
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(" and ");
        return Err(Error::corrupt(
            path,
            8,
            "version",
            format!(
                "unsupported version {found} (this rexctl reads version{} {known})",
                if versions.len() > 1 { "s" } else { "" }
            ),
        ));
    }
    Ok(found)
}

/// Checks the `header_crc` stored at `at`: the CRC-32 of bytes `0..at`.
pub(crate) fn check_header_crc(path: &Path, b: &[u8; HEADER_LEN], at: usize) -> Result<()> {
    let stored = u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
    let actual = crc32fast::hash(&b[0..at]);
    if stored != actual {
        return Err(Error::corrupt(
            path,
            at as u64,
            "header_crc",
            format!("stored {stored:#010x}, computed {actual:#010x} over bytes 0..{at}"),
        ));
    }
    Ok(())
}

/// Drops the page table entries of bytes `from .. to` of `map`
/// (`MADV_DONTNEED`, widened to 64 KiB boundaries: a multiple of every
/// memory page size Linux uses), leaving the file's pages in the page
/// cache: they no longer count in the process's resident set until read
/// again, when they are mapped again with the same contents. Only a hint:
/// an error changes nothing and is ignored.
///
/// For readers of files mapped by [`ic::IcFile`] and
/// [`chunked::ChunkedFile`] that have moved past bytes (the push's
/// checkpoints, a chain's stored chunks once decoded): without it, a push
/// of 11 GB of checkpoints had 11.5 GB resident at its peak.
pub(crate) fn release_mapped(map: &memmap2::Mmap, from: u64, to: u64) {
    const STEP: u64 = 64 << 10;
    let from = from / STEP * STEP;
    let to = to.div_ceil(STEP).saturating_mul(STEP).min(map.len() as u64);
    if to <= from {
        return;
    }
    // SAFETY: every map passed here is a read-only MAP_SHARED map of a
    // file (memmap2's `Mmap::map`), never MAP_PRIVATE: MADV_DONTNEED only
    // drops its page table entries, the mapping stays valid, and a later
    // access faults the page cache's current bytes of the file in again.
    // The file's bytes change only through the file itself, never through
    // the map, and it is never truncated while mapped: published L1 and L2
    // files are not modified at all (replaced by rename), and a lazily
    // filled cache file (`ChunkedFile::open_lazy`) is written with
    // `pwrite` into the same page cache, holes included (a chunk re-fetched
    // after a failed check or a release is rewritten the same way). So
    // whatever range is released, including bytes another thread is
    // reading or a fill has not written yet, every read sees what it would
    // have seen without the release. (On a MAP_PRIVATE map that had been
    // written, the advice would discard the writes: never pass one.)
    let _ = unsafe {
        map.unchecked_advise_range(
            memmap2::UncheckedAdvice::DontNeed,
            from as usize,
            (to - from) as usize,
        )
    };
}
