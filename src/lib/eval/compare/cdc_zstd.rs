//! CDC-zstd: a restic-like content-addressed store, what a user would set
//! up to keep many checkpoints small without REX. At each L2 checkpoint the
//! full image at the batch end (a FULL REX-IC file) is cut into
//! content-defined chunks with FastCDC (restic's sizes: 512 KiB minimum,
//! 1 MiB average, 8 MiB maximum, `fastcdc` crate), each chunk is named by
//! its 128-bit hash (XXH3-128; restic uses SHA-256), and the chunks the
//! store does not hold yet are compressed with zstd at level 3 (restic's
//! `auto`) into one pack file per checkpoint, with an index of the pack and
//! a snapshot (the image's chunk list). Unchanged regions of the image thus
//! cost nothing, however many checkpoints share them.
//!
//! The restore reads every index, then the newest snapshot's chunks in
//! order from their packs, decompresses each, checks its hash and writes
//! the image.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::durable::AtomicFile;
use crate::error::{Error, IoContext, Result};

use super::{Batch, Counterpart, l2_objects};

const PACK: &str = "pack-";
const INDEX: &str = "index-";
const SNAPSHOT: &str = "snapshot-";
/// restic's chunker sizes.
const MIN: u32 = 512 << 10;
const AVG: u32 = 1 << 20;
const MAX: u32 = 8 << 20;
/// restic's `auto` compression.
const LEVEL: i32 = 3;
/// Bytes per index entry: id (16), pack (8), offset (8), stored (4), raw (4).
const ENTRY: usize = 40;

/// Where a chunk is.
#[derive(Clone, Copy)]
struct Loc {
    pack: u64,
    offset: u64,
    stored: u32,
    raw: u32,
}

/// A content-defined-chunking store with zstd.
#[derive(Default)]
pub struct CdcZstd {
    /// Chunk ids the store holds (restic's index cache).
    known: HashSet<u128>,
}

fn read_index(path: &Path, into: &mut HashMap<u128, Loc>) -> Result<()> {
    let b = std::fs::read(path).ctx(path, "read")?;
    if b.len() % ENTRY != 0 {
        return Err(Error::corrupt(path, 0, "index", "not whole entries"));
    }
    for e in b.chunks_exact(ENTRY) {
        let id = u128::from_le_bytes(e[0..16].try_into().expect("16"));
        let le64 = |o: usize| u64::from_le_bytes(e[o..o + 8].try_into().expect("8"));
        let le32 = |o: usize| u32::from_le_bytes(e[o..o + 4].try_into().expect("4"));
        into.insert(
            id,
            Loc {
                pack: le64(16),
                offset: le64(24),
                stored: le32(32),
                raw: le32(36),
            },
        );
    }
    Ok(())
}

impl Counterpart for CdcZstd {
    fn name(&self) -> &'static str {
        "CDC-zstd"
    }

    fn needs_full_images(&self) -> bool {
        true
    }

    fn push(&mut self, batch: &Batch<'_>) -> Result<Option<String>> {
        let fc = batch
            .full_image
            .ok_or_else(|| Error::Invalid("CDC-zstd needs the full image".into()))?;
        let file = File::open(fc).ctx(fc, "open")?;
        // SAFETY: the harness wrote the full image and does not change it
        // while a counterpart reads it; the map is read-only.
        let data = unsafe { memmap2::Mmap::map(&file) }.ctx(fc, "mmap")?;
        let n = batch.number as u64;
        let pack_path = batch.l2.join(format!("{PACK}{n:06}"));
        let mut pack = AtomicFile::create(&pack_path)?;
        let mut index = Vec::new();
        let mut snapshot = Vec::new();
        let mut at = 0u64;
        let mut cctx = zstd::bulk::Compressor::new(LEVEL).ctx(&pack_path, "zstd")?;
        for c in fastcdc::v2020::FastCDC::new(&data, MIN, AVG, MAX) {
            let chunk = &data[c.offset..c.offset + c.length];
            let id = xxhash_rust::xxh3::xxh3_128(chunk);
            snapshot.extend_from_slice(&id.to_le_bytes());
            if !self.known.insert(id) {
                continue;
            }
            let z = cctx.compress(chunk).ctx(&pack_path, "zstd compress")?;
            pack.write_all(&z)?;
            index.extend_from_slice(&id.to_le_bytes());
            index.extend_from_slice(&n.to_le_bytes());
            index.extend_from_slice(&at.to_le_bytes());
            index.extend_from_slice(&(z.len() as u32).to_le_bytes());
            index.extend_from_slice(&(chunk.len() as u32).to_le_bytes());
            at += z.len() as u64;
        }
        pack.commit()?;
        crate::durable::write_file(batch.l2.join(format!("{INDEX}{n:06}")), &index)?;
        crate::durable::write_file(batch.l2.join(format!("{SNAPSHOT}{n:06}")), &snapshot)?;
        Ok(None)
    }

    fn restore_reads(&self, l2: &Path) -> Result<u64> {
        // Every index, the newest snapshot, and the packed chunks it names.
        let mut locs = HashMap::new();
        let mut n = 0;
        for p in l2_objects(l2, INDEX)? {
            n += std::fs::metadata(&p).ctx(&p, "stat")?.len();
            read_index(&p, &mut locs)?;
        }
        let snap = l2_objects(l2, SNAPSHOT)?.pop().expect("never empty");
        let ids = std::fs::read(&snap).ctx(&snap, "read")?;
        n += ids.len() as u64;
        for id in ids.chunks_exact(16) {
            let id = u128::from_le_bytes(id.try_into().expect("16"));
            n += locs.get(&id).map_or(0, |l| u64::from(l.stored));
        }
        Ok(n)
    }

    fn restore(&self, l2: &Path, out: &Path) -> Result<Option<String>> {
        let mut locs = HashMap::new();
        for p in l2_objects(l2, INDEX)? {
            read_index(&p, &mut locs)?;
        }
        let snap = l2_objects(l2, SNAPSHOT)?.pop().expect("never empty");
        let ids = std::fs::read(&snap).ctx(&snap, "read")?;
        let mut packs: HashMap<u64, File> = HashMap::new();
        let mut o = AtomicFile::create(out)?;
        let mut dctx = zstd::bulk::Decompressor::new().ctx(&snap, "zstd")?;
        let (mut z, mut raw) = (Vec::new(), Vec::new());
        for id in ids.chunks_exact(16) {
            let id = u128::from_le_bytes(id.try_into().expect("16"));
            let l = *locs
                .get(&id)
                .ok_or_else(|| Error::chain(&snap, format!("chunk {id:032x} is in no index")))?;
            let path = l2.join(format!("{PACK}{:06}", l.pack));
            let f = match packs.entry(l.pack) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(File::open(&path).ctx(&path, "open")?)
                }
            };
            z.resize(l.stored as usize, 0);
            f.read_exact_at(&mut z, l.offset).ctx(&path, "read")?;
            raw.resize(l.raw as usize, 0);
            let got = dctx
                .decompress_to_buffer(&z[..], &mut raw[..])
                .ctx(&path, "zstd decompress")?;
            if got != raw.len() || xxhash_rust::xxh3::xxh3_128(&raw) != id {
                return Err(Error::corrupt(
                    &path,
                    l.offset,
                    "chunk",
                    format!("chunk {id:032x} does not decode to its hash"),
                ));
            }
            o.write_all(&raw)?;
        }
        o.commit()?;
        Ok(None)
    }
}
