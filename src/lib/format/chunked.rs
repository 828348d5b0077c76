//! The chunked record container shared by RPS files and Pointer Files
//! (docs/FORMAT.md §3.2).
//!
//! Both hold one array of fixed-size records (32-byte patterns, or 4-byte
//! pointers), the *payload*, cut into chunks (256 KiB by default). Each
//! chunk is checked and, in version 2, stored on its own: a page-aware
//! restore of a few pages reads, checks and decodes only the chunks it
//! touches, and a full restore decodes, on every core, the chunks its live
//! pages reference.
//!
//! * **Version 1** stores the payload as it is, with one CRC-32 per chunk.
//!   `rexctl` still reads it: chains written before version 2 restore, and
//!   a chain may mix both (a Δ of version 2 on a version 1 base).
//! * **Version 2** (the entropy stage) stores each chunk raw or as a zstd
//!   frame, whichever is smaller, after a transform: pointer coding for
//!   Pointer Files ([`super::pointer_coding`]), byte lanes for RPS chunks
//!   of fixed-width numbers when a sample says they pay ([`lanes`]). Its
//!   chunk table gives each
//!   chunk's stored length and codec, the CRC-32 of its stored bytes and the
//!   CRC-32 of its decoded bytes, so a flipped bit is caught before the
//!   decoder runs, and a decoder defect after it.
//!
//! Chunks are checked (and decoded) lazily and remembered, so no byte is
//! handed out before its chunk's CRCs have been checked. A version 1
//! payload is read in place from the read-only mapping of the file; a
//! version 2 payload is decoded into an anonymous mapping of the payload's
//! size, whose pages the kernel provides only as chunks are decoded, or,
//! for the RPS files of a restore, into buffers of a [`ChunkPool`] that a
//! chunk gives back after its last use
//! ([`ChunkedFile::release_chunk`]): a chain of deltas decodes several
//! times the image, and a restore then holds only what its remaining
//! pages need, in memory the kernel has already faulted in.
//!
//! The writer streams records with bounded memory: full chunks go to a
//! pool of encoder threads through a bounded queue and are written back in
//! order, so deduplication and compression run at once (the pipeline of
//! Liu et al.: the push takes as long as its slowest stage, not their sum).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::SeekFrom;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::pointer_coding::{self, State};
use crate::durable::{AtomicFile, Mirror};
use crate::error::{Error, IoContext, Result};

/// Header length.
pub const HEADER_LEN: u64 = 64;
/// The container version rexctl writes.
pub const VERSION: u32 = 2;
/// The container versions rexctl reads.
pub const VERSIONS: [u32; 2] = [1, 2];
/// Default chunk size (bytes of payload per chunk).
pub const DEFAULT_CHUNK: u32 = 1 << 18;
/// The largest chunk of version 2: it bounds what decoding one chunk
/// needs besides the chunk itself.
pub const MAX_CHUNK_V2: u32 = 1 << 24;
/// Default zstd level of the entropy stage (docs/PERFORMANCE.md, "Entropy
/// stage": the smallest L2 at a decode speed that keeps restore fast).
pub const DEFAULT_LEVEL: i32 = 3;
/// Default strongest level a writer uses where it pays (`zstd_level_max`,
/// [`Encoding`]; docs/PERFORMANCE.md, "A stronger level where it pays").
pub const DEFAULT_LEVEL_MAX: i32 = 9;
/// RPS chunks are chosen a level in groups of this many (8 MiB of
/// 256 KiB chunks), by a probe of the group's first chunk.
pub const PROBE_EVERY: u64 = 32;
/// A probe's stronger level pays when it makes the sample at least
/// 1/`PAYS_BELOW` (2 %) smaller: on samples, level 9 gains 0.6-1.5 % over
/// level 3 where whole chunks gain under 0.5 % (generated profiles), and
/// 2-13 % where they gain 3-14 % (captures of sqlite, xz, Python).
const PAYS_BELOW: usize = 50;
/// Bytes per chunk table entry, by version.
const ENTRY_V1: u64 = 4;
const ENTRY_V2: u64 = 16;

/// Supplies the bytes of a chunked file opened before all of them were
/// there: a remote object whose header and chunk table were fetched and
/// whose chunks are fetched on first use, or are arriving in order in the
/// background (see [`ChunkedFile::open_lazy`]).
pub trait ChunkFill: Send + Sync {
    /// Returns once bytes `offset .. offset + len` of the object are in
    /// the file, in place: written now, or waited for. Called at most once
    /// per chunk, before the chunk's CRC is checked and before any byte of
    /// it is handed out; bytes written elsewhere must be final once the
    /// call that covers them has returned.
    fn fill(&self, offset: u64, len: u64) -> Result<()>;
}

/// Where the chunk table of a chunked file starts, from its first
/// [`HEADER_LEN`] bytes: what a reader that fetches parts of a file needs
/// to fetch besides the header. `None` when the header is too short, of an
/// unknown version, or its counts overflow (the reader then reports the
/// problem).
pub fn table_offset(header: &[u8]) -> Option<u64> {
    let le32 = |o: usize| {
        header
            .get(o..o + 4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4")))
    };
    let le64 = |o: usize| {
        header
            .get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8")))
    };
    match le32(8)? {
        1 => HEADER_LEN.checked_add(le64(32)?.checked_mul(u64::from(le32(12)?))?),
        2 => HEADER_LEN.checked_add(le64(48)?),
        _ => None,
    }
}

/// Which kind of chunked file: its magic and what its records are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Reference Pattern Sequence: records are patterns.
    Rps,
    /// Pointer File: records are u32 pattern pointers, `aux` per page.
    Pf,
}

impl Kind {
    /// The 8-byte magic.
    pub fn magic(self) -> [u8; 8] {
        match self {
            Kind::Rps => *b"REXRPS1\n",
            Kind::Pf => *b"REXPF01\n",
        }
    }
    /// Name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Rps => "RPS file",
            Kind::Pf => "Pointer File",
        }
    }
}

/// The transform applied to each chunk before its codec (version 2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Coding {
    /// The records as they are.
    #[default]
    Records,
    /// Pointer coding (Pointer Files only).
    Pointers {
        /// Coding 2: also the previous version's pointers, as holes
        /// ([`pointer_coding::HOLE`]).
        prev: bool,
    },
}

/// How a chunk's stored bytes hold its (transformed) bytes (version 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// As they are.
    Raw,
    /// One or more zstd frames.
    Zstd,
    /// One or more zstd frames of the chunk's bytes transposed into byte
    /// lanes of this width (4 or 8; RPS chunks only): byte `i` of every
    /// `w`-byte word, for each `i` in turn (see [`lanes`]).
    ZstdLanes(usize),
}

impl Codec {
    /// The codec's number in the chunk table.
    pub fn id(self) -> u32 {
        match self {
            Codec::Raw => 0,
            Codec::Zstd => 1,
            Codec::ZstdLanes(4) => 2,
            Codec::ZstdLanes(w) => {
                debug_assert_eq!(w, 8, "lanes are 4 or 8 bytes wide");
                3
            }
        }
    }

    /// The codec numbered `id` in the chunk table, if there is one.
    pub fn from_id(id: u32) -> Option<Codec> {
        Some(match id {
            0 => Codec::Raw,
            1 => Codec::Zstd,
            2 => Codec::ZstdLanes(4),
            3 => Codec::ZstdLanes(8),
            _ => return None,
        })
    }
}

/// Byte lanes: the transform of codecs 2 and 3 (docs/FORMAT.md §3.2.5).
///
/// Memory is often arrays of fixed-width numbers (doubles, 32-bit indexes,
/// hash-chain positions) whose high bytes repeat and low bytes do not;
/// byte-interleaved, zstd's fast levels find few matches in them. Grouping
/// byte `i` of every `w`-byte word together (HDF5's and Blosc's shuffle
/// filter) puts the repeating bytes in long runs. A writer chooses, per
/// chunk, the width whose sample compresses best ([`pick`](lanes::pick)).
pub mod lanes {
    /// Widths a writer tries besides plain bytes.
    pub const WIDTHS: [usize; 2] = [4, 8];

    /// Transposes `src` (a multiple of `W` bytes) into `dst`: byte `i` of
    /// word `j` goes to `dst[i * n + j]`, `n` words. Tiles of 8 words, so
    /// that the inner moves have constant indexes.
    fn forward<const W: usize>(src: &[u8], dst: &mut [u8]) {
        let n = src.len() / W;
        let tiles = n / 8;
        for t in 0..tiles {
            let words = &src[t * 8 * W..(t + 1) * 8 * W];
            for i in 0..W {
                let lane: [u8; 8] = std::array::from_fn(|k| words[k * W + i]);
                dst[i * n + t * 8..i * n + t * 8 + 8].copy_from_slice(&lane);
            }
        }
        for j in tiles * 8..n {
            for i in 0..W {
                dst[i * n + j] = src[j * W + i];
            }
        }
    }

    /// The inverse of [`forward`].
    fn back<const W: usize>(src: &[u8], dst: &mut [u8]) {
        let n = dst.len() / W;
        let tiles = n / 8;
        for t in 0..tiles {
            let lanes: [[u8; 8]; W] = std::array::from_fn(|i| {
                src[i * n + t * 8..i * n + t * 8 + 8]
                    .try_into()
                    .expect("8 bytes")
            });
            let words = &mut dst[t * 8 * W..(t + 1) * 8 * W];
            for k in 0..8 {
                for i in 0..W {
                    words[k * W + i] = lanes[i][k];
                }
            }
        }
        for j in tiles * 8..n {
            for i in 0..W {
                dst[j * W + i] = src[i * n + j];
            }
        }
    }

    /// `src` in lanes of `w` bytes, into `dst` (same length, a multiple of
    /// `w`; `w` is 4 or 8).
    pub fn split(src: &[u8], w: usize, dst: &mut [u8]) {
        assert!(src.len() == dst.len() && src.len().is_multiple_of(w));
        match w {
            4 => forward::<4>(src, dst),
            _ => forward::<8>(src, dst),
        }
    }

    /// The bytes [`split`] made `src` from, into `dst`.
    pub fn join(src: &[u8], w: usize, dst: &mut [u8]) {
        assert!(src.len() == dst.len() && src.len().is_multiple_of(w));
        match w {
            4 => back::<4>(src, dst),
            _ => back::<8>(src, dst),
        }
    }

    /// Bytes of a chunk a writer compresses to choose its lanes.
    const SAMPLE: usize = 32 << 10;

    /// The lane width (1: plain bytes) under which a sample of `data`
    /// compresses smallest with `trial` (a fast level); a width must save 3 %
    /// over plain bytes to be chosen. The sample is four slices spread over
    /// the chunk, each a multiple of 8 bytes. `None` when the sample does not
    /// shrink by 1 % in any width: the chunk is stored raw without
    /// compressing it whole (random data, already-compressed buffers), which
    /// the entropy stage would only spend time on.
    pub fn pick(data: &[u8], trial: &mut zstd::bulk::Compressor<'static>) -> Option<usize> {
        choose(&sample(data), trial)
    }

    /// The sample of `data` in the lanes [`pick`] chooses for it, or `None`
    /// when the chunk would be stored raw: what a writer's probe
    /// compresses at two levels.
    pub fn picked_sample(
        data: &[u8],
        trial: &mut zstd::bulk::Compressor<'static>,
    ) -> Option<Vec<u8>> {
        let s = sample(data);
        match choose(&s, trial)? {
            1 => Some(s),
            w => {
                let mut t = vec![0u8; s.len()];
                split(&s, w, &mut t);
                Some(t)
            }
        }
    }

    /// Four slices spread over `data`, [`SAMPLE`] bytes in all, each a
    /// multiple of 8 bytes (all of `data` when it is that small).
    fn sample(data: &[u8]) -> Vec<u8> {
        if data.len() <= SAMPLE {
            data[..data.len() / 8 * 8].to_vec()
        } else {
            let piece = SAMPLE / 4;
            let step = (data.len() - piece) / 3 / 8 * 8;
            (0..4)
                .flat_map(|k| &data[k * step..k * step + piece])
                .copied()
                .collect()
        }
    }

    /// [`pick`] on a sample.
    fn choose(sample: &[u8], trial: &mut zstd::bulk::Compressor<'static>) -> Option<usize> {
        if sample.is_empty() {
            return Some(1);
        }
        let size = |b: &[u8], t: &mut zstd::bulk::Compressor<'static>| {
            t.compress(b).map_or(usize::MAX, |z| z.len())
        };
        let plain = size(sample, trial);
        let mut best = (plain - plain / 33, 1);
        let mut smallest = plain;
        let mut buf = vec![0u8; sample.len()];
        for w in WIDTHS {
            split(sample, w, &mut buf);
            let n = size(&buf, trial);
            smallest = smallest.min(n);
            if n < best.0 {
                best = (n, w);
            }
        }
        (smallest < sample.len() - sample.len() / 100).then_some(best.1)
    }
}

/// The decoded header of a chunked file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkedHeader {
    /// What the file is.
    pub kind: Kind,
    /// The container version (1 or 2).
    pub version: u32,
    /// Bytes per record (pattern size for RPS, 4 for PF).
    pub record_size: u32,
    /// The L2 generation that wrote the file.
    pub generation: u64,
    /// Index of the first record in the chain's address space (RPS: the
    /// pointer of the first pattern; PF: 0).
    pub first_record: u64,
    /// Number of records.
    pub record_count: u64,
    /// Bytes of payload per chunk (a power of two, multiple of
    /// `record_size`).
    pub chunk_size: u32,
    /// Kind-specific: PF: pointers per page (alpha); RPS: 0.
    pub aux: u32,
    /// Version 2: the chunk transform (always [`Coding::Records`] in
    /// version 1).
    pub coding: Coding,
}

impl ChunkedHeader {
    /// A version 2 header with no record yet, for [`ChunkedWriter`]:
    /// Pointer Files use pointer coding.
    pub fn new(
        kind: Kind,
        record_size: u32,
        generation: u64,
        first_record: u64,
        aux: u32,
    ) -> ChunkedHeader {
        ChunkedHeader {
            kind,
            version: VERSION,
            record_size,
            generation,
            first_record,
            record_count: 0,
            chunk_size: DEFAULT_CHUNK,
            aux,
            coding: match kind {
                Kind::Rps => Coding::Records,
                Kind::Pf => Coding::Pointers { prev: false },
            },
        }
    }

    /// The 64 header bytes; `stored_len` is version 2's length of the
    /// stored chunks.
    fn encode(&self, stored_len: u64) -> [u8; HEADER_LEN as usize] {
        let mut b = [0u8; HEADER_LEN as usize];
        b[0..8].copy_from_slice(&self.kind.magic());
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..16].copy_from_slice(&self.record_size.to_le_bytes());
        b[16..24].copy_from_slice(&self.generation.to_le_bytes());
        b[24..32].copy_from_slice(&self.first_record.to_le_bytes());
        b[32..40].copy_from_slice(&self.record_count.to_le_bytes());
        b[40..44].copy_from_slice(&self.chunk_size.to_le_bytes());
        b[44..48].copy_from_slice(&self.aux.to_le_bytes());
        if self.version == 1 {
            let crc = crc32fast::hash(&b[0..56]);
            b[56..60].copy_from_slice(&crc.to_le_bytes());
        } else {
            b[48..56].copy_from_slice(&stored_len.to_le_bytes());
            let coding: u32 = match self.coding {
                Coding::Records => 0,
                Coding::Pointers { prev: false } => 1,
                Coding::Pointers { prev: true } => 2,
            };
            b[56..60].copy_from_slice(&coding.to_le_bytes());
            let crc = crc32fast::hash(&b[0..60]);
            b[60..64].copy_from_slice(&crc.to_le_bytes());
        }
        b
    }

    /// Checks steps 1 to 6 of the read procedure; returns the header and
    /// the length of the stored chunks.
    fn decode(path: &Path, kind: Kind, b: &[u8; HEADER_LEN as usize]) -> Result<(Self, u64)> {
        let le32 = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4"));
        let le64 = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8"));
        let version = super::check_magic_version(path, b, &kind.magic(), kind.name(), &VERSIONS)?;
        let mut h = ChunkedHeader {
            kind,
            version,
            record_size: le32(12),
            generation: le64(16),
            first_record: le64(24),
            record_count: le64(32),
            chunk_size: le32(40),
            aux: le32(44),
            coding: Coding::Records,
        };
        let mut stored_len = 0;
        if version == 1 {
            super::check_header_crc(path, b, 56)?;
            for (off, name) in [(48usize, "reserved"), (52, "reserved"), (60, "reserved")] {
                if le32(off) != 0 {
                    return Err(Error::corrupt(path, off as u64, name, "must be 0"));
                }
            }
        } else {
            super::check_header_crc(path, b, 60)?;
            stored_len = le64(48);
            h.coding = match (le32(56), kind) {
                (0, _) => Coding::Records,
                (1, Kind::Pf) => Coding::Pointers { prev: false },
                (2, Kind::Pf) => Coding::Pointers { prev: true },
                (c, _) => {
                    return Err(Error::corrupt(
                        path,
                        56,
                        "coding",
                        format!(
                            "{c} is not a coding of {} (0: records{})",
                            kind.name(),
                            if kind == Kind::Pf {
                                ", 1: pointer coding"
                            } else {
                                ""
                            }
                        ),
                    ));
                }
            };
        }
        if h.record_size == 0 || !h.record_size.is_power_of_two() || h.record_size > 1 << 20 {
            return Err(Error::corrupt(
                path,
                12,
                "record_size",
                format!("{} is not a power of two in 1..=1048576", h.record_size),
            ));
        }
        let max_chunk = if version == 1 { 1 << 30 } else { MAX_CHUNK_V2 };
        if !h.chunk_size.is_power_of_two()
            || h.chunk_size < h.record_size
            || h.chunk_size > max_chunk
        {
            return Err(Error::corrupt(
                path,
                40,
                "chunk_size",
                format!(
                    "{} is not a power of two between the record size {} and {} MiB",
                    h.chunk_size,
                    h.record_size,
                    max_chunk >> 20
                ),
            ));
        }
        if version == 1 {
            stored_len = h.record_count.saturating_mul(u64::from(h.record_size));
        }
        Ok((h, stored_len))
    }

    /// (payload length, chunk count, chunk table offset, file length), or
    /// `None` on overflow.
    fn layout(&self, stored_len: u64) -> Option<(u64, u64, u64, u64)> {
        let payload = self.record_count.checked_mul(u64::from(self.record_size))?;
        let chunks = payload.div_ceil(u64::from(self.chunk_size));
        let entry = if self.version == 1 {
            ENTRY_V1
        } else {
            ENTRY_V2
        };
        let table_off = HEADER_LEN.checked_add(stored_len)?;
        let len = table_off
            .checked_add(chunks.checked_mul(entry)?)?
            .checked_add(4)?;
        Some((payload, chunks, table_off, len))
    }
}

/// One chunk: where its stored bytes are and what they must check to.
#[derive(Clone, Copy, Debug)]
struct Chunk {
    /// File offset of the stored bytes.
    off: u64,
    /// Stored length.
    len: u32,
    codec: Codec,
    stored_crc: u32,
    decoded_crc: u32,
}

/// The decoded payload of a version 2 file, written chunk by chunk under
/// the chunk's lock, before the chunk is marked verified; once per chunk,
/// or again after [`ChunkedFile::release_chunk`] gave the chunk's memory
/// back.
enum Decoded {
    /// One anonymous mapping of the payload's size, whose pages the kernel
    /// provides as chunks are decoded: payload byte `a` at `base + a`.
    Map {
        _map: memmap2::MmapMut,
        base: *mut u8,
    },
    /// One buffer of `size` (the chunk size) bytes per decoded chunk,
    /// taken from `pool` and given back to it when the chunk is released:
    /// chunk `i`'s bytes at `slots[i]` (null when not decoded). What a full
    /// restore uses ([`ChunkedFile::decode_into_pool`]), so that the memory
    /// of chunks it no longer needs holds the next ones instead of new
    /// pages the kernel must fault in and zero.
    Pooled {
        slots: Vec<std::sync::atomic::AtomicPtr<u8>>,
        size: usize,
        pool: Arc<ChunkPool>,
    },
}

/// Memory for decoded chunks that a restore reuses from one chunk to the
/// next (see [`ChunkedFile::decode_into_pool`]), shared by the files of a
/// chain. It carves buffers out of anonymous mappings of 8 MiB or more
/// (huge pages where the kernel offers them, as for a file's own mapping)
/// and owns them until it goes: a file keeps a pointer per decoded chunk,
/// and gives it back to the free list when the chunk is released.
#[derive(Default)]
pub struct ChunkPool {
    inner: Mutex<PoolInner>,
}

#[derive(Default)]
struct PoolInner {
    /// Every mapping made, kept until the pool goes.
    maps: Vec<memmap2::MmapMut>,
    /// Buffers given back: (size, start).
    free: Vec<(usize, *mut u8)>,
    /// What is left of the newest mapping: (start, bytes).
    rest: (usize, usize),
}

// SAFETY: the pointers point into `maps`, which the pool owns and never
// unmaps or moves before it is dropped; the pool only hands them out and
// takes them back under its lock, and a buffer is used by one chunk at a
// time (see `Decoded`).
unsafe impl Send for PoolInner {}

impl std::fmt::Debug for ChunkPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("ChunkPool")
            .field("mapped", &p.maps.iter().map(|m| m.len()).sum::<usize>())
            .field("free", &p.free.len())
            .finish()
    }
}

impl ChunkPool {
    /// Arena size: a few chunks per mapping, whole huge pages.
    const ARENA: usize = 8 << 20;

    /// A buffer of `size` bytes (a free one of that size, or new memory):
    /// its start. Fails only when the system gives no memory.
    fn take(&self, size: usize) -> std::io::Result<*mut u8> {
        let mut p = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = p.free.iter().rposition(|&(n, _)| n == size) {
            return Ok(p.free.swap_remove(i).1);
        }
        let size64 = size.next_multiple_of(64);
        if p.rest.1 < size64 {
            let len = Self::ARENA.max(size64);
            let mut m = memmap2::MmapOptions::new().len(len).map_anon()?;
            #[cfg(target_os = "linux")]
            let _ = m.advise(memmap2::Advice::HugePage);
            p.rest = (m.as_mut_ptr() as usize, len);
            p.maps.push(m);
        }
        let at = p.rest.0;
        p.rest = (at + size64, p.rest.1 - size64);
        Ok(at as *mut u8)
    }

    /// Gives back a buffer of `size` bytes that [`take`](Self::take) made.
    fn put(&self, size: usize, buf: *mut u8) {
        let mut p = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        p.free.push((size, buf));
    }
}

// SAFETY: `base` points into `_map`, which lives as long as the `Decoded`
// and never moves (a mapping's address is fixed), and a slot's buffer lies
// in the pool's mappings, which live as long as the pool (the file holds
// it) and never move either. Bytes are written
// through them only by `ChunkedFile::verify_chunk_slow`, holding the
// chunk's lock, into a chunk not marked verified, of which no reference is
// alive (none was handed out, or `release_chunk`'s caller vouched that none
// is left before the chunk was unmarked and its memory given back); they
// are read only through shared slices of chunks marked verified (Release
// after the write and the slot's store, Acquire before the read). So no
// byte is ever written while a reference to it exists, from any thread.
unsafe impl Send for Decoded {}
// SAFETY: as for `Send`.
unsafe impl Sync for Decoded {}

/// A chunked file opened for reading: mapped, header and chunk table
/// checked, chunks verified (and decoded) on first use.
pub struct ChunkedFile {
    path: PathBuf,
    header: ChunkedHeader,
    /// `map` listed for the CLI's SIGBUS report; dropped (unlisted) before
    /// `map` is unmapped.
    _mapped: crate::mapped::Registered,
    map: memmap2::Mmap,
    payload_len: u64,
    /// `log2(chunk_size)` (the header checks it is a power of two).
    chunk_shift: u32,
    /// `log2(record_size)` (likewise).
    record_shift: u32,
    chunks: Vec<Chunk>,
    verified: Vec<AtomicBool>,
    /// Chunks ever verified (a released chunk stays counted): what
    /// [`ChunkedFile::chunks_verified`] reports.
    ever: Vec<AtomicBool>,
    /// Version 2: the decoded payload (`None` for version 1, read in place,
    /// and for an empty payload).
    decoded: Option<Decoded>,
    /// One lock per chunk, for files whose chunks are written before they
    /// are verified (version 2, or a lazily filled file); empty otherwise.
    locks: Vec<Mutex<()>>,
    /// For a file opened with [`ChunkedFile::open_lazy`]: what fills its
    /// chunks.
    fill: Option<Box<dyn ChunkFill>>,
    /// The stored bytes of chunks decoded since their mapped pages were
    /// last given back ([`ChunkedFile::release_stored`]).
    released: Mutex<Decoding>,
}

/// Chunks decoded since the last [`ChunkedFile::release_stored`]: the span
/// of their stored bytes and how many bytes they hold.
struct Decoding {
    lo: u64,
    hi: u64,
    bytes: u64,
}

impl Default for Decoding {
    fn default() -> Self {
        Decoding {
            lo: u64::MAX,
            hi: 0,
            bytes: 0,
        }
    }
}

/// Stored bytes of decoded chunks given back at a time
/// ([`ChunkedFile::release_stored`]).
const RELEASE_STEP: u64 = 8 << 20;

impl std::fmt::Debug for ChunkedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkedFile")
            .field("path", &self.path)
            .field("header", &self.header)
            .finish()
    }
}

thread_local! {
    /// One zstd decompression context per thread, reused across chunks.
    static DCTX: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
    /// Scratch for a pointer-coded chunk's coded bytes.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Where [`ChunkedFile::check_chunk_at`] decodes a chunk it does not keep.
    static DISCARD: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Decompresses the zstd frames `src` into `dst` (at most its length, with
/// this thread's reused context); returns the bytes decoded.
fn unzstd_into(src: &[u8], dst: &mut [u8]) -> std::result::Result<usize, String> {
    DCTX.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_none() {
            *d = Some(zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?);
        }
        d.as_mut()
            .expect("made above")
            .decompress_to_buffer(src, dst)
            .map_err(|e| format!("zstd: {e}"))
    })
}

/// Decompresses the zstd frames `src` into exactly `dst`.
fn unzstd(src: &[u8], dst: &mut [u8]) -> std::result::Result<(), String> {
    let n = unzstd_into(src, dst)?;
    if n != dst.len() {
        return Err(format!(
            "zstd: decodes to {n} bytes, the chunk holds {}",
            dst.len()
        ));
    }
    Ok(())
}

impl ChunkedFile {
    /// Opens `path`, expecting a file of `kind`.
    pub fn open(path: impl AsRef<Path>, kind: Kind) -> Result<ChunkedFile> {
        let path = path.as_ref();
        let file = super::open_regular(path)?;
        let (actual, hb) = super::read_header(path, &file)?;
        let (header, stored_len) = ChunkedHeader::decode(path, kind, &hb)?;
        let (payload_len, chunks, table_off, file_len) =
            header.layout(stored_len).ok_or_else(|| {
                Error::corrupt(
                    path,
                    32,
                    "record_count",
                    format!(
                        "{} records overflow a 64-bit file size",
                        header.record_count
                    ),
                )
            })?;
        if actual != file_len {
            return Err(Error::corrupt(
                path,
                actual.min(file_len),
                "file length",
                format!(
                    "file is {actual} bytes, the header ({} records of {} bytes, chunks of {}{}) says {file_len}{}",
                    header.record_count,
                    header.record_size,
                    header.chunk_size,
                    if header.version == 1 {
                        String::new()
                    } else {
                        format!(", {stored_len} bytes stored")
                    },
                    if actual < file_len {
                        " (truncated)"
                    } else {
                        " (trailing bytes)"
                    }
                ),
            ));
        }
        // The chunk count comes from the header and the length check does
        // not bound memory (a sparse file may claim any length): the table
        // is read in bounded pieces, refusing holes, so memory grows only
        // with the bytes actually read, and checked before use.
        let entry = if header.version == 1 {
            ENTRY_V1
        } else {
            ENTRY_V2
        };
        let n = (chunks * entry) as usize;
        let mut table = Vec::new();
        super::stream_region(path, &file, table_off, n as u64 + 4, "chunk table", |b| {
            table.extend_from_slice(b)
        })?;
        let (stored, actual_crc) = (
            u32::from_le_bytes(table[n..n + 4].try_into().expect("4")),
            crc32fast::hash(&table[..n]),
        );
        if stored != actual_crc {
            return Err(Error::corrupt(
                path,
                table_off + n as u64,
                "table_crc",
                format!("stored {stored:#010x}, computed {actual_crc:#010x} over the chunk table"),
            ));
        }
        let cs = u64::from(header.chunk_size);
        let decoded_len = |i: u64| (payload_len - i * cs).min(cs);
        let chunk_list = if header.version == 1 {
            table[..n]
                .chunks_exact(4)
                .enumerate()
                .map(|(i, c)| {
                    let crc = u32::from_le_bytes(c.try_into().expect("4"));
                    Chunk {
                        off: HEADER_LEN + i as u64 * cs,
                        len: decoded_len(i as u64) as u32,
                        codec: Codec::Raw,
                        stored_crc: crc,
                        decoded_crc: crc,
                    }
                })
                .collect::<Vec<_>>()
        } else {
            Self::table_v2(
                path,
                &header,
                &table[..n],
                table_off,
                stored_len,
                decoded_len,
            )?
        };
        // SAFETY: the file is never modified in place once published: rexctl
        // writes every L2 file under a temporary name and renames it, and
        // deletes (unlinks) rather than rewrites, which keeps a mapped inode
        // intact. The one exception, a file opened with `open_lazy`, is a
        // private cache file whose bytes are written only before the chunks
        // holding them are verified, hence before any byte of them is handed
        // out: by `fill` under the chunk's lock, or by a store's background
        // fetch that writes each byte once, before the `fill` of any chunk
        // holding it returns. Its length never changes. The map is
        // read-only; its length is checked against the validated layout
        // before any byte is used, and every byte handed out lies in a chunk
        // whose CRC was checked first.
        let map = unsafe { memmap2::MmapOptions::new().map(&file) }.ctx(path, "mmap")?;
        if map.len() as u64 != file_len {
            return Err(Error::corrupt(
                path,
                map.len() as u64,
                "file length",
                "file changed while being opened",
            ));
        }
        let decoded = if header.version == 1 || payload_len == 0 {
            None
        } else {
            let len = usize::try_from(payload_len).map_err(|_| {
                Error::corrupt(
                    path,
                    32,
                    "record_count",
                    "the payload exceeds the address space",
                )
            })?;
            // Address space, not memory: pages come as chunks are decoded,
            // and with MAP_NORESERVE nothing is charged for the rest, so a
            // header claiming a huge payload (2^32 records of zstd frames
            // of zeros in 4.6 MB: helper-59) costs no more than the chunks
            // a reader decodes. Without it the kernel's overcommit
            // heuristic refused such a map outright. The price: a reader
            // that really decodes more than the machine's memory is stopped
            // by the OOM killer while decoding, not refused here (readers
            // that hold a chain's chunks, a restore and a push, decode into
            // a pool whose chunks are released after their last use).
            // (Under strict overcommit, mode 2, the flag is ignored and the
            // map fails as before: exit 1, naming the file.)
            let mut m = memmap2::MmapOptions::new()
                .len(len)
                .no_reserve_swap()
                .map_anon()
                .ctx(
                    path,
                    "map memory for the decoded payload (the header's record_count x record_size)",
                )?;
            // Huge pages where the kernel offers them: a restore decodes
            // hundreds of MiB into these maps, and 4 KiB faults (57 000 for
            // a 123 MiB image) cost more system time than the writes. Only
            // a hint: without it the map works the same.
            #[cfg(target_os = "linux")]
            let _ = m.advise(memmap2::Advice::HugePage);
            let base = m.as_mut_ptr();
            Some(Decoded::Map { _map: m, base })
        };
        let locks = if decoded.is_some() {
            (0..chunk_list.len()).map(|_| Mutex::new(())).collect()
        } else {
            Vec::new()
        };
        let verified = (0..chunk_list.len())
            .map(|_| AtomicBool::new(false))
            .collect();
        let ever = (0..chunk_list.len())
            .map(|_| AtomicBool::new(false))
            .collect();
        Ok(ChunkedFile {
            path: path.to_path_buf(),
            header,
            _mapped: crate::mapped::register(path, &map),
            map,
            payload_len,
            chunk_shift: header.chunk_size.trailing_zeros(),
            record_shift: header.record_size.trailing_zeros(),
            chunks: chunk_list,
            ever,
            verified,
            decoded,
            locks,
            fill: None,
            released: Mutex::default(),
        })
    }

    /// Parses and checks a version 2 chunk table (step 10 of §3.2.2).
    fn table_v2(
        path: &Path,
        header: &ChunkedHeader,
        table: &[u8],
        table_off: u64,
        stored_len: u64,
        decoded_len: impl Fn(u64) -> u64,
    ) -> Result<Vec<Chunk>> {
        let mut out = Vec::with_capacity(table.len() / ENTRY_V2 as usize);
        let mut off = HEADER_LEN;
        for (i, e) in table.chunks_exact(ENTRY_V2 as usize).enumerate() {
            let le = |o: usize| u32::from_le_bytes(e[o..o + 4].try_into().expect("4"));
            let at = table_off + i as u64 * ENTRY_V2;
            let (len, codec) = (le(0), le(4));
            let dlen = decoded_len(i as u64);
            let codec = match (Codec::from_id(codec), header.coding) {
                (Some(Codec::ZstdLanes(_)), Coding::Pointers { .. }) | (None, _) => {
                    return Err(Error::corrupt(
                        path,
                        at + 4,
                        "chunk table",
                        format!(
                            "chunk {i}: codec {codec} is not 0 (raw), 1 (zstd){}",
                            match header.coding {
                                Coding::Records => ", 2 or 3 (zstd in lanes of 4 or 8 bytes)",
                                Coding::Pointers { .. } => " (a Pointer File's codecs)",
                            }
                        ),
                    ));
                }
                (Some(c), _) => c,
            };
            // Raw records are stored exactly; anything else is bounded by
            // what the writer can produce (pointer coding: at most 6 bytes
            // per pointer, plus its state).
            let max = match (codec, header.coding) {
                (Codec::Raw, Coding::Records) => dlen..=dlen,
                (_, Coding::Pointers { .. }) => 1..=dlen / 4 * 6 + pointer_coding::STATE_LEN as u64,
                (_, Coding::Records) => 1..=dlen + 1024,
            };
            if !max.contains(&u64::from(len)) {
                return Err(Error::corrupt(
                    path,
                    at,
                    "chunk table",
                    format!(
                        "chunk {i}: stored length {len} is outside {}..={} for {dlen} bytes of payload",
                        max.start(),
                        max.end()
                    ),
                ));
            }
            out.push(Chunk {
                off,
                len,
                codec,
                stored_crc: le(8),
                decoded_crc: le(12),
            });
            off += u64::from(len);
        }
        if off - HEADER_LEN != stored_len {
            return Err(Error::corrupt(
                path,
                48,
                "stored_len",
                format!(
                    "{stored_len} bytes of stored chunks, the chunk table adds up to {}",
                    off - HEADER_LEN
                ),
            ));
        }
        Ok(out)
    }

    /// Opens `path`, expecting a file of `kind`, whose header and chunk
    /// table are in place but whose chunks may not be (a sparse file of the
    /// object's length): `fill` writes each chunk's stored bytes into the
    /// file the first time a reader needs them, then the chunk is checked
    /// (and decoded) as for any file. A `--pages` restore from an object
    /// store reads this way, fetching only the chunks it touches.
    pub fn open_lazy(
        path: impl AsRef<Path>,
        kind: Kind,
        fill: Box<dyn ChunkFill>,
    ) -> Result<ChunkedFile> {
        let mut f = Self::open(path, kind)?;
        if f.locks.is_empty() {
            f.locks = (0..f.chunks.len()).map(|_| Mutex::new(())).collect();
        }
        f.fill = Some(fill);
        Ok(f)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The header.
    pub fn header(&self) -> &ChunkedHeader {
        &self.header
    }

    /// Number of records.
    pub fn len(&self) -> u64 {
        self.header.record_count
    }

    /// Whether the file holds no record.
    pub fn is_empty(&self) -> bool {
        self.header.record_count == 0
    }

    /// File length in bytes.
    pub fn file_len(&self) -> u64 {
        self.map.len() as u64
    }

    /// Number of chunks.
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }

    /// Where chunk `i`'s stored bytes are: (file offset, length, codec).
    pub fn stored_chunk(&self, i: usize) -> Option<(u64, u32, Codec)> {
        self.chunks.get(i).map(|c| (c.off, c.len, c.codec))
    }

    /// Chunks verified (and decoded) so far, each once: what a `--pages`
    /// restore had to read. A chunk released
    /// ([`release_chunk`](Self::release_chunk)) still counts.
    pub fn chunks_verified(&self) -> usize {
        self.ever
            .iter()
            .filter(|v| v.load(Ordering::Relaxed))
            .count()
    }

    /// Gives chunk `i`'s decoded buffer back to its pool (a file decoding
    /// into a pool, [`decode_into_pool`](Self::decode_into_pool)) and marks
    /// the chunk not verified, so that a later read decodes (and checks) it
    /// again, into another buffer. What keeps a full restore's memory
    /// bounded by the chunks it still needs instead of every chunk it
    /// decoded (a chain of deltas decodes several times the image), and
    /// spares the kernel faulting in and zeroing new pages for each chunk.
    /// Nothing happens for a file that does not decode into a pool, or a
    /// chunk not verified.
    ///
    /// # Safety
    ///
    /// No slice of chunk `i`'s payload that this file handed out may be
    /// alive when this is called, nor be taken until it returns, on any
    /// thread: the caller knows every remaining use of the chunk (a full
    /// restore counts them, [`crate::l2::chain::ChunkUses`]).
    pub unsafe fn release_chunk(&self, i: usize) {
        let (Some(Decoded::Pooled { slots, size, pool }), Some(lock)) =
            (&self.decoded, self.locks.get(i))
        else {
            return;
        };
        let _guard = lock.lock().unwrap_or_else(|e| e.into_inner());
        if !self.verified[i].swap(false, Ordering::AcqRel) {
            return;
        }
        // No reference into the buffer is alive (the caller's contract) and
        // none can be taken (the chunk is unmarked, its lock held): the next
        // chunk may have it.
        let p = slots[i].swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !p.is_null() {
            pool.put(*size, p);
        }
    }

    /// Verifies (and decodes) chunk `k` if it is not yet, handing out no
    /// slice of it (what a read-ahead thread does before the chunk's reader
    /// needs it; a release on another thread takes the same lock). Nothing
    /// for a chunk past the end.
    pub fn warm_chunk(&self, k: usize) -> Result<()> {
        if k < self.chunks.len() {
            self.verify_chunk(k)?;
        }
        Ok(())
    }

    /// Whether chunks decode into a [`ChunkPool`] (and so may be released).
    pub fn pooled(&self) -> bool {
        matches!(self.decoded, Some(Decoded::Pooled { .. }))
    }

    /// Chunks verified and holding their decoded bytes now (released ones
    /// not counted): what a restore still keeps.
    pub fn chunks_held(&self) -> usize {
        self.verified
            .iter()
            .filter(|v| v.load(Ordering::Relaxed))
            .count()
    }

    /// Payload bytes `a..b`, all in verified chunks (callers check).
    #[inline]
    fn payload_slice(&self, a: usize, b: usize) -> &[u8] {
        assert!(a <= b && b as u64 <= self.payload_len);
        match &self.decoded {
            None => &self.map[HEADER_LEN as usize + a..HEADER_LEN as usize + b],
            // SAFETY: `a..b` lies within the decoded mapping (asserted
            // above against its length) and within chunks marked verified,
            // which are not written while they are (see `Decoded`).
            Some(Decoded::Map { base, .. }) => unsafe {
                std::slice::from_raw_parts(base.add(a), b - a)
            },
            Some(Decoded::Pooled { slots, .. }) => {
                if a == b {
                    return &[];
                }
                let i = a >> self.chunk_shift;
                let off = a - (i << self.chunk_shift);
                // One chunk's bytes (`records` refuses ranges across
                // chunks of a pooled file).
                assert!((b - 1) >> self.chunk_shift == i);
                let p = slots[i].load(Ordering::Acquire);
                assert!(!p.is_null());
                // SAFETY: chunk `i` is verified, so its slot holds its
                // buffer of `chunk_size` bytes (stored before the chunk was
                // marked, Release/Acquire), which stays until the chunk is
                // released, when no slice of it may be alive (see
                // `Decoded`); `off..off + (b - a)` lies in the chunk.
                unsafe { std::slice::from_raw_parts(p.add(off), b - a) }
            }
        }
    }

    #[inline]
    fn verify_chunk(&self, i: usize) -> Result<()> {
        if self.verified[i].load(Ordering::Acquire) {
            return Ok(());
        }
        self.verify_chunk_slow(i)
    }

    #[cold]
    #[inline(never)]
    fn verify_chunk_slow(&self, i: usize) -> Result<()> {
        // Chunks written before they are verified (decoded, or filled
        // lazily): once, under the chunk's lock. No byte of an unverified
        // chunk has been handed out, so writing it cannot change bytes a
        // reader holds.
        let _guard = match self.locks.get(i) {
            Some(lock) => {
                let guard = lock.lock().unwrap_or_else(|e| e.into_inner());
                if self.verified[i].load(Ordering::Acquire) {
                    return Ok(());
                }
                Some(guard)
            }
            None => None,
        };
        let stored = self.check_stored(i)?;
        match &self.decoded {
            None => {}
            Some(Decoded::Map { base, .. }) => {
                let (start, end) = self.chunk_range(i);
                // SAFETY: `start..end` is chunk `i` of the decoded mapping
                // (within its `payload_len` bytes); the chunk is not
                // verified and its lock is held, so no other thread writes
                // it and no reference to it exists (see `Decoded`).
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(base.add(start as usize), (end - start) as usize)
                };
                self.check_decoded(i, stored, dst)?;
            }
            Some(Decoded::Pooled { slots, size, pool }) => {
                let (start, end) = self.chunk_range(i);
                // The slot is empty: the chunk is not verified, and a
                // release empties the slot of a chunk it unmarks.
                let buf = pool
                    .take(*size)
                    .ctx(&self.path, "map memory for decoded chunks")?;
                // SAFETY: `buf` is a buffer of `size` >= `end - start`
                // bytes of the pool's mappings (zero-filled or written
                // before), which no slot and no reference holds: the pool
                // hands a buffer to one taker until it is given back.
                let dst = unsafe { std::slice::from_raw_parts_mut(buf, (end - start) as usize) };
                if let Err(e) = self.check_decoded(i, stored, dst) {
                    pool.put(*size, buf);
                    return Err(e);
                }
                slots[i].store(buf, Ordering::Release);
            }
        }
        if self.decoded.is_some() {
            self.release_stored(i);
        }
        self.ever[i].store(true, Ordering::Relaxed);
        self.verified[i].store(true, Ordering::Release);
        Ok(())
    }

    /// Payload bytes `start..end` of chunk `i`.
    fn chunk_range(&self, i: usize) -> (u64, u64) {
        let cs = u64::from(self.header.chunk_size);
        let start = i as u64 * cs;
        (start, (start + cs).min(self.payload_len))
    }

    /// The error of chunk `i`: names the file, the chunk and its stored
    /// bytes, then `what`.
    fn chunk_error(&self, i: usize, what: String) -> Error {
        let c = self.chunks[i];
        let end_off = c.off + u64::from(c.len);
        Error::corrupt(
            &self.path,
            c.off,
            "chunk data",
            format!("chunk {i} (bytes {}..{end_off}{what}", c.off),
        )
    }

    /// Brings chunk `i`'s stored bytes in (a lazily filled file) and checks
    /// their CRC; returns them.
    fn check_stored(&self, i: usize) -> Result<&[u8]> {
        let c = self.chunks[i];
        if let Some(fill) = &self.fill {
            fill.fill(c.off, u64::from(c.len))?;
        }
        let stored = &self.map[c.off as usize..(c.off + u64::from(c.len)) as usize];
        let actual = crc32fast::hash(stored);
        if actual != c.stored_crc {
            let how = match (self.header.version, c.codec) {
                (1, _) => "",
                (_, Codec::Raw) => ", stored raw",
                (_, Codec::Zstd) => ", stored by zstd",
                (_, Codec::ZstdLanes(_)) => ", stored by zstd in byte lanes",
            };
            return Err(self.chunk_error(
                i,
                format!(
                    "{how}) has CRC {actual:#010x}, the chunk table says {:#010x}",
                    c.stored_crc
                ),
            ));
        }
        Ok(stored)
    }

    /// Decodes chunk `i`'s `stored` bytes into `dst` (its payload length)
    /// and checks the CRC of what they decode to.
    fn check_decoded(&self, i: usize, stored: &[u8], dst: &mut [u8]) -> Result<()> {
        let c = self.chunks[i];
        self.decode_chunk(stored, c.codec, dst)
            .map_err(|why| self.chunk_error(i, format!(") does not decode: {why}")))?;
        let got = crc32fast::hash(dst);
        if got != c.decoded_crc {
            let (start, end) = self.chunk_range(i);
            return Err(self.chunk_error(
                i,
                format!(
                    ") decodes to payload bytes {start}..{end} with CRC {got:#010x}, the chunk table says {:#010x}",
                    c.decoded_crc
                ),
            ));
        }
        Ok(())
    }

    /// Checks chunk `i` as a reader's first use does, without keeping what
    /// it decodes to: the bytes go to a scratch buffer of this thread, the
    /// decoded mapping is not written, and the chunk stays unverified (a
    /// reader that needs it later decodes it then). `verify` checks the
    /// chunks no live page references this way, so that its memory follows
    /// what the live pages reference, not the payload's decoded size. A
    /// chunk verified before (and released since, or still held) is not
    /// checked again: a published file never changes.
    /// `false` when there is no such chunk.
    pub fn check_chunk_at(&self, i: usize) -> Result<bool> {
        if i >= self.chunks.len() {
            return Ok(false);
        }
        if self.ever[i].load(Ordering::Acquire) {
            return Ok(true);
        }
        if self.decoded.is_none() || self.verified[i].load(Ordering::Acquire) {
            // Nothing to decode: the check is the verification.
            return self.verify_chunk(i).map(|()| true);
        }
        let _guard = self
            .locks
            .get(i)
            .map(|l| l.lock().unwrap_or_else(|e| e.into_inner()));
        let stored = self.check_stored(i)?;
        let (start, end) = self.chunk_range(i);
        DISCARD.with(|d| {
            let mut d = d.borrow_mut();
            d.resize((end - start) as usize, 0);
            self.check_decoded(i, stored, &mut d)
        })?;
        self.release_stored(i);
        Ok(true)
    }

    /// After chunk `i` is decoded: its stored bytes are read again only if
    /// it is decoded again, so the mapped pages of the stored bytes of the
    /// chunks decoded lately are given back ([`super::release_mapped`])
    /// once [`RELEASE_STEP`] of them have accumulated: the span from the
    /// lowest to the highest (a chain of deltas stores several times the
    /// image; mapped, it all stayed resident: a restore of 196 608 pages
    /// peaked at 638 MiB, 462 of them the chain's stored chunks). In steps,
    /// not per chunk: each release is a system call that flushes the other
    /// threads' TLBs, which per chunk cost a restore 6 %. A chunk in a span
    /// decoded later maps its bytes again (the same bytes).
    fn release_stored(&self, i: usize) {
        let c = self.chunks[i];
        let span = {
            let mut r = self.released.lock().unwrap_or_else(|e| e.into_inner());
            r.lo = r.lo.min(c.off);
            r.hi = r.hi.max(c.off + u64::from(c.len));
            r.bytes += u64::from(c.len);
            (r.bytes >= RELEASE_STEP).then(|| std::mem::take(&mut *r))
        };
        if let Some(r) = span {
            super::release_mapped(&self.map, r.lo, r.hi);
        }
    }

    /// Decodes one chunk's stored bytes into `dst` (exactly).
    fn decode_chunk(
        &self,
        stored: &[u8],
        codec: Codec,
        dst: &mut [u8],
    ) -> std::result::Result<(), String> {
        match (self.header.coding, codec) {
            (Coding::Records, Codec::Raw) => {
                dst.copy_from_slice(stored);
                Ok(())
            }
            (Coding::Records, Codec::Zstd) => unzstd(stored, dst),
            (Coding::Records, Codec::ZstdLanes(w)) => SCRATCH.with(|s| {
                let mut s = s.borrow_mut();
                s.resize(dst.len(), 0);
                unzstd(stored, &mut s[..])?;
                if !dst.len().is_multiple_of(w) {
                    return Err(format!("{} bytes are not lanes of {w}", dst.len()));
                }
                lanes::join(&s[..], w, dst);
                Ok(())
            }),
            (Coding::Pointers { .. }, Codec::ZstdLanes(_)) => {
                Err("a Pointer File chunk in byte lanes".to_string())
            }
            (Coding::Pointers { prev }, Codec::Raw) => pointer_coding::decode(stored, dst, prev),
            (Coding::Pointers { prev }, Codec::Zstd) => SCRATCH.with(|s| {
                let mut s = s.borrow_mut();
                // The coded bytes are at most 6 per pointer plus the state
                // (what the chunk table allows a raw coded chunk).
                let max = dst.len() / 4 * 6 + pointer_coding::STATE_LEN;
                s.resize(max, 0);
                let n = unzstd_into(stored, &mut s[..])?;
                pointer_coding::decode(&s[..n], dst, prev)
                    .map_err(|e| format!("pointer coding: {e}"))
            }),
        }
    }

    /// Verifies (and decodes) every chunk.
    pub fn verify_all(&self) -> Result<()> {
        (0..self.chunks.len()).try_for_each(|i| self.verify_chunk(i))
    }

    /// Chunk `k`'s payload bytes, verified (and decoded) on first use: the
    /// unit a full restore reads lazily, so that chunks no live page
    /// references are never decoded. Errors like [`records`](Self::records)
    /// when there is no chunk `k`.
    #[inline]
    pub fn chunk_payload(&self, k: usize) -> Result<&[u8]> {
        if k >= self.chunks.len() {
            return self.records(self.header.record_count, 1);
        }
        self.verify_chunk(k)?;
        let start = (k as u64) << self.chunk_shift;
        let end = (start + u64::from(self.header.chunk_size)).min(self.payload_len);
        Ok(self.payload_slice(start as usize, end as usize))
    }

    /// log2 of the records per chunk: record `i` lies in chunk
    /// `i >> records_per_chunk_shift()`.
    pub fn records_per_chunk_shift(&self) -> u32 {
        self.chunk_shift - self.record_shift
    }

    /// The payload bytes of records `first .. first + count` (file-local
    /// indexes), CRC-checked. Errors if the range is out of bounds.
    pub fn records(&self, first: u64, count: u64) -> Result<&[u8]> {
        let rs = u64::from(self.header.record_size);
        let end = first
            .checked_add(count)
            .filter(|&e| e <= self.header.record_count);
        let Some(end) = end else {
            return Err(Error::corrupt(
                &self.path,
                HEADER_LEN,
                "records",
                format!(
                    "records {first}..{} requested, the file holds {}",
                    first.saturating_add(count),
                    self.header.record_count
                ),
            ));
        };
        let (a, b) = (first * rs, end * rs);
        if b > a {
            let (c0, c1) = (a >> self.chunk_shift, (b - 1) >> self.chunk_shift);
            if c1 > c0 && matches!(self.decoded, Some(Decoded::Pooled { .. })) {
                return Err(Error::Invalid(format!(
                    "{}: records {first}..{end} span chunks {c0}..={c1} of a file decoded chunk by chunk",
                    self.path.display()
                )));
            }
            for i in c0..=c1 {
                self.verify_chunk(i as usize)?;
            }
        }
        Ok(self.payload_slice(a as usize, b as usize))
    }

    /// The smallest chunk [`decode_into_pool`](Self::decode_into_pool)
    /// pools: smaller ones (which only another writer makes; `rexctl`
    /// writes 256 KiB) would cost a trip through the pool's lock per few
    /// patterns, and keep their file's own mapping.
    pub const MIN_POOLED_CHUNK: u32 = 64 << 10;

    /// Decodes chunks into buffers of `pool` from now on, one per chunk,
    /// which [`release_chunk`](Self::release_chunk) gives back for the
    /// next chunk to reuse: the mode of a restore's RPS files. Then
    /// [`records`](Self::records) refuses a range across chunks (single
    /// records and whole chunks are what a page rebuild reads). `false`,
    /// changing nothing, when the file has no decoded payload (version 1,
    /// read in place), chunks smaller than
    /// [`MIN_POOLED_CHUNK`](Self::MIN_POOLED_CHUNK), or has verified a
    /// chunk already.
    pub fn decode_into_pool(&mut self, pool: Arc<ChunkPool>) -> bool {
        if !matches!(self.decoded, Some(Decoded::Map { .. }))
            || self.header.chunk_size < Self::MIN_POOLED_CHUNK
            || self.ever.iter().any(|v| v.load(Ordering::Relaxed))
        {
            return false;
        }
        self.decoded = Some(Decoded::Pooled {
            slots: (0..self.chunks.len())
                .map(|_| std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            size: self.header.chunk_size as usize,
            pool,
        });
        true
    }

    /// The payload bytes of record `i` (file-local index), CRC-checked:
    /// [`records`](Self::records)`(i, 1)` for the hot paths that read one
    /// pattern at a time. A record never straddles a chunk (both sizes are
    /// powers of two and the chunk is no smaller).
    #[inline]
    pub fn record(&self, i: u64) -> Result<&[u8]> {
        if i >= self.header.record_count {
            return self.records(i, 1);
        }
        let a = i << self.record_shift;
        self.verify_chunk((a >> self.chunk_shift) as usize)?;
        let start = a as usize;
        Ok(self.payload_slice(start, start + (1usize << self.record_shift)))
    }

    /// Record `i` if it exists and its chunk has already been verified;
    /// `None` otherwise (then [`record`](Self::record) verifies it or says
    /// what is wrong). The hot path of [`record`](Self::record), without
    /// building a `Result`.
    #[inline]
    pub fn record_if_verified(&self, i: u64) -> Option<&[u8]> {
        if i >= self.header.record_count {
            return None;
        }
        let a = i << self.record_shift;
        if !self
            .verified
            .get((a >> self.chunk_shift) as usize)?
            .load(Ordering::Acquire)
        {
            return None;
        }
        let start = a as usize;
        Some(self.payload_slice(start, start + (1usize << self.record_shift)))
    }

    /// The whole payload, fully verified.
    pub fn payload(&self) -> Result<&[u8]> {
        self.records(0, self.header.record_count)
    }
}

/// Checks every chunk of `files` on `threads` threads, which take chunks
/// from a shared counter (large files and small ones spread evenly),
/// keeping nothing it decodes ([`ChunkedFile::check_chunk_at`]): chunks
/// already verified are skipped, the others checked and left unverified.
/// The first error found is returned.
pub fn check_all_parallel(files: &[&ChunkedFile], threads: usize) -> Result<()> {
    let total: usize = files.iter().map(|f| f.chunk_count()).sum();
    let threads = threads.clamp(1, total.max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let work = || -> Result<()> {
        loop {
            let mut k = next.fetch_add(1, Ordering::Relaxed);
            if k >= total || failed.load(Ordering::Relaxed) {
                return Ok(());
            }
            for f in files {
                if k < f.chunk_count() {
                    if let Err(e) = f.check_chunk_at(k) {
                        failed.store(true, Ordering::Relaxed);
                        return Err(e);
                    }
                    break;
                }
                k -= f.chunk_count();
            }
        }
    };
    if threads == 1 {
        return work();
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
        let mut result = work();
        for h in handles {
            let r = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            if result.is_ok() {
                result = r;
            }
        }
        result
    })
}

/// How a version 2 writer encodes chunks.
///
/// A stronger zstd level shrinks some memory by several percent (real
/// programs' heaps: 3-14 % at level 9 against level 3) and other memory
/// not at all (random data mixed with runs), while it costs 2-3 times the
/// compression time everywhere. So the writer measures, on the writing
/// thread, before a group of [`PROBE_EVERY`] RPS chunks goes to the
/// encoders: the lane trial's 32 KiB sample of the group's first chunk,
/// in the lanes it picks, is compressed at `level` and at `max_level`, and
/// the whole group gets `max_level` when that made the sample at least
/// 2 % smaller, else `level`. Pointer File chunks (coded pointers, a few
/// percent of the RPS's bytes) always get `max_level`. The choice depends
/// only on the bytes, never on timing: a file is the same byte for byte
/// whatever the number of threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Encoding {
    /// zstd level; 0 stores every chunk raw (no entropy stage).
    pub level: i32,
    /// The stronger level used where it pays; at or below `level`, or 0
    /// (raw, never stronger), or with `level` 0, every chunk gets `level`
    /// and nothing is probed.
    pub max_level: i32,
    /// Encoder threads (1: encode on the writing thread).
    pub threads: usize,
}

impl Default for Encoding {
    fn default() -> Self {
        Encoding {
            level: DEFAULT_LEVEL,
            max_level: DEFAULT_LEVEL_MAX,
            threads: 1,
        }
    }
}

impl Encoding {
    /// The levels a writer probes between, if it probes.
    fn probing(&self) -> Option<(i32, i32)> {
        (self.level != 0 && self.max_level != 0 && self.max_level > self.level)
            .then_some((self.level, self.max_level))
    }
}

/// What a push writes its RPS and Pointer File as: the container version,
/// the chunk size and, for version 2, the encoding (`level`, `threads` in
/// rex.toml(5)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct WriteFormat {
    /// Container version: 2, or 1 for readers older than the entropy stage.
    pub version: u32,
    /// Bytes of payload per chunk.
    pub chunk_size: u32,
    /// Version 2: how chunks are encoded.
    pub encoding: Encoding,
    /// P-Table delta version (FORMAT.md §3.3): 2, or 1 for readers older
    /// than its coded page index.
    pub ptable_version: u32,
    /// Version 2 Pointer Files in coding 2 (pointer coding with the
    /// previous version's pointers, FORMAT.md §3.2.6), or 1 for readers
    /// older than it.
    pub pf_prev: bool,
}

impl Default for WriteFormat {
    fn default() -> Self {
        WriteFormat {
            version: VERSION,
            chunk_size: DEFAULT_CHUNK,
            encoding: Encoding::default(),
            ptable_version: crate::format::ptable::VERSION,
            pf_prev: false,
        }
    }
}

/// The L2 format version `rexctl` writes by default (`l2_version`,
/// rex.toml(5)); FORMAT.md §3.7 maps each to the versions of the files.
pub const L2_VERSION: u32 = 3;

impl WriteFormat {
    /// The files' versions for L2 format `l2_version`: 1 (containers and
    /// P-Table deltas of version 1), 2 (version 2 containers: the entropy
    /// stage and pointer coding), 3 (also P-Table deltas of version 2: the
    /// coded page index) or 4 (also Pointer Files in coding 2: the previous
    /// version's pointers). `None` for any other.
    pub fn for_l2_version(l2_version: u32) -> Option<WriteFormat> {
        let (version, ptable_version, pf_prev) = match l2_version {
            1 => (1, 1, false),
            2 => (2, 1, false),
            3 => (2, 2, false),
            4 => (2, 2, true),
            _ => return None,
        };
        Some(WriteFormat {
            version,
            ptable_version,
            pf_prev,
            ..WriteFormat::default()
        })
    }

    /// The header a writer of `kind` starts with in this format.
    pub fn header(
        &self,
        kind: Kind,
        record_size: u32,
        generation: u64,
        first_record: u64,
        aux: u32,
    ) -> ChunkedHeader {
        let h = ChunkedHeader::new(kind, record_size, generation, first_record, aux);
        ChunkedHeader {
            version: self.version,
            // A chunk holds whole records: patterns larger than the chunk
            // size (up to the largest page, 1 MiB) get chunks of their size.
            chunk_size: self.chunk_size.max(record_size),
            coding: match (self.version, h.coding) {
                (1, _) => Coding::Records,
                (_, Coding::Pointers { .. }) => Coding::Pointers { prev: self.pf_prev },
                (_, c) => c,
            },
            ..h
        }
    }
}

/// A chunk encoded for storage.
struct Encoded {
    stored: Vec<u8>,
    codec: Codec,
    stored_crc: u32,
    decoded_crc: u32,
}

/// Encodes one chunk: the transform, then zstd when it makes the chunk
/// smaller.
fn encode_chunk(
    data: &[u8],
    coding: Coding,
    state: State,
    level: i32,
    cx: &mut Contexts,
) -> Result<Encoded> {
    let decoded_crc = crc32fast::hash(data);
    let coded = match coding {
        Coding::Records => None,
        Coding::Pointers { prev } => {
            let mut v = Vec::with_capacity(data.len() / 8 + 64);
            pointer_coding::encode(data, state, &mut v, prev);
            Some(v)
        }
    };
    let plain: &[u8] = coded.as_deref().unwrap_or(data);
    let mut best = None;
    if level != 0 {
        // Records (patterns) may compress better in byte lanes: a sample
        // at a fast level decides.
        let w = match coding {
            Coding::Records => lanes::pick(plain, cx.trial()?),
            Coding::Pointers { .. } => Some(1),
        };
        // `None`: the sample says the chunk will not shrink; it stays raw.
        let input = match w {
            None => None,
            Some(1) => Some((std::borrow::Cow::Borrowed(plain), Codec::Zstd)),
            Some(w) => {
                let mut t = vec![0u8; plain.len()];
                lanes::split(plain, w, &mut t);
                Some((std::borrow::Cow::Owned(t), Codec::ZstdLanes(w)))
            }
        };
        if let Some((input, codec)) = input {
            let z = cx.compress(level, &input)?;
            if z.len() < plain.len() {
                best = Some((z, codec));
            }
        }
    }
    let (stored, codec, stored_crc) = match best {
        Some((z, codec)) => {
            let crc = crc32fast::hash(&z);
            (z, codec, crc)
        }
        // Raw records are the decoded bytes: their CRC is already known.
        None => match coded {
            Some(c) => {
                let crc = crc32fast::hash(&c);
                (c, Codec::Raw, crc)
            }
            None => (data.to_vec(), Codec::Raw, decoded_crc),
        },
    };
    Ok(Encoded {
        stored_crc,
        stored,
        codec,
        decoded_crc,
    })
}

/// The zstd level of the sample that chooses a chunk's lanes.
const LANES_TRIAL_LEVEL: i32 = 1;

/// An encoder's reused zstd contexts: one per level it compresses chunks
/// at (at most two), and the fast one that tries lane widths on a sample.
#[derive(Default)]
struct Contexts {
    main: Vec<(i32, zstd::bulk::Compressor<'static>)>,
    trial: Option<zstd::bulk::Compressor<'static>>,
}

/// A zstd compression context at `level`.
fn compressor(level: i32) -> Result<zstd::bulk::Compressor<'static>> {
    zstd::bulk::Compressor::new(level)
        .map_err(|e| Error::Invalid(format!("zstd level {level}: {e}")))
}

impl Contexts {
    /// The lane trial's context (made on first use).
    fn trial(&mut self) -> Result<&mut zstd::bulk::Compressor<'static>> {
        if self.trial.is_none() {
            self.trial = Some(compressor(LANES_TRIAL_LEVEL)?);
        }
        Ok(self.trial.as_mut().expect("made above"))
    }

    /// `input` compressed at `level`, in a context kept for that level.
    fn compress(&mut self, level: i32, input: &[u8]) -> Result<Vec<u8>> {
        let i = match self.main.iter().position(|(l, _)| *l == level) {
            Some(i) => i,
            None => {
                self.main.push((level, compressor(level)?));
                self.main.len() - 1
            }
        };
        self.main[i]
            .1
            .compress(input)
            .map_err(|e| Error::Invalid(format!("zstd: {e}")))
    }

    /// A probe: the level, `base` or `strong`, for the group of records
    /// chunks that `data` starts. The lane trial's sample of `data`, in
    /// the lanes it picks, is compressed at both; `strong` is chosen when
    /// it makes the sample at least 2 % smaller. A sample the trial would
    /// store raw keeps `base`.
    fn probe(&mut self, data: &[u8], base: i32, strong: i32) -> Result<i32> {
        let Some(sample) = lanes::picked_sample(data, self.trial()?) else {
            return Ok(base);
        };
        let zb = self.compress(base, &sample)?.len();
        let zs = self.compress(strong, &sample)?.len();
        Ok(if zs <= zb - zb / PAYS_BELOW {
            strong
        } else {
            base
        })
    }
}

/// Chunks a writer may have sent to its encoders and not yet written, per
/// encoder thread (with 256 KiB chunks, 2 MiB per encoder), and chunks
/// queued for the encoders, per encoder. Chunks take unequal times (a
/// group at the stronger level, a chunk stored raw), and the writer must
/// write them in order: with two in flight per encoder, the unit waited
/// for the oldest chunk while the other encoders ran dry, and both cores
/// idled for a third of a push (`perf sched`: the unit thread slept 2.0 s
/// of a 3.7 s complete push of 196 608 pages). Eight per encoder (and a
/// writer queue of [`Sink::DEPTH`]) took 14 % off that push and 11 % off a
/// Δ push, for about 5 MB more resident memory (docs/PERFORMANCE.md,
/// *Deeper queues between the push's stages*).
const IN_FLIGHT: usize = 8;
const JOBS_QUEUED: usize = 4;

/// A job for the encoder threads.
struct Job {
    idx: u64,
    data: Vec<u8>,
    state: State,
    level: i32,
    reply: Sender<Reply>,
}

/// Encoder threads shared by a writer's chunks: a bounded queue in, a
/// channel back; the writer puts results back in order.
struct Pool {
    jobs: Option<SyncSender<Job>>,
    workers: Vec<JoinHandle<()>>,
}

impl Pool {
    fn new(threads: usize, coding: Coding) -> Result<Pool> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Job>(JOBS_QUEUED * threads);
        let rx = Arc::new(Mutex::new(rx));
        let mut workers = Vec::new();
        for n in 0..threads {
            let rx = Arc::clone(&rx);
            let w = std::thread::Builder::new()
                .name(format!("rex-encode-{n}"))
                .spawn(move || {
                    let mut cx = Contexts::default();
                    loop {
                        let job = {
                            let rx = rx.lock().unwrap_or_else(|e| e.into_inner());
                            rx.recv()
                        };
                        let Ok(job) = job else { return };
                        let r = encode_chunk(&job.data, coding, job.state, job.level, &mut cx);
                        // The writer may have gone (an error): nothing to do.
                        let _ = job.reply.send((job.idx, r));
                    }
                })
                .map_err(|e| Error::Invalid(format!("cannot start an encoder thread: {e}")))?;
            workers.push(w);
        }
        Ok(Pool {
            jobs: Some(tx),
            workers,
        })
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.jobs.take();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// A chunk's index and its encoding, from an encoder thread.
type Reply = (u64, Result<Encoded>);

/// Version 2 writer state.
struct V2 {
    enc: Encoding,
    /// The level of the current group of chunks (its probe's choice).
    group_level: i32,
    /// Chunks compressed at `enc.max_level`.
    strong: u64,
    /// The chunk being filled.
    cur: Vec<u8>,
    /// Chunk table entries written so far.
    table: Vec<u8>,
    stored: u64,
    /// Pointer coding state at the start of the next chunk.
    state: State,
    pool: Option<Pool>,
    replies: Option<(Sender<Reply>, Receiver<Reply>)>,
    sent: u64,
    written: u64,
    ready: BTreeMap<u64, Encoded>,
    cx: Contexts,
}

/// Where a writer's bytes go: written by the caller's thread, or, beside
/// encoder threads, by a writer thread of its own.
///
/// With encoders, the thread that appends records (a push's Deduplication
/// Unit) is the push's slowest stage; writing the encoded chunks into the
/// page cache was an eighth of its time (`perf`, a Δ push of 32768 pages on
/// tmpfs), work the other cores can take. The thread owns the file until
/// [`Sink::into_file`] joins it; its queue holds at most
/// [`Sink::DEPTH`] chunks. On an error it stops and drops the file, which
/// removes the temporary; the next send, or the join, reports the error.
enum Sink {
    Here(AtomicFile),
    Thread(WriterThread),
}

/// The writer thread of a [`Sink`] and the sending end of its queue.
struct WriterThread {
    tx: Option<SyncSender<Vec<u8>>>,
    handle: Option<JoinHandle<Result<AtomicFile>>>,
    target: PathBuf,
}

impl WriterThread {
    /// Ends the queue and joins the thread: the file with every byte sent
    /// written to it, or the error the thread stopped on.
    fn join(&mut self) -> Result<AtomicFile> {
        self.tx.take();
        match self.handle.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(Error::Invalid(format!(
                "{}: the writer thread panicked",
                self.target.display()
            ))),
            None => Err(Error::Invalid(format!(
                "{}: the writer thread stopped on an error reported before",
                self.target.display()
            ))),
        }
    }
}

impl Drop for WriterThread {
    /// A writer dropped unfinished (an error elsewhere): its thread ends
    /// and removes the temporary before the drop returns, as dropping an
    /// [`AtomicFile`] does.
    fn drop(&mut self) {
        if self.handle.is_some() {
            let _ = self.join();
        }
    }
}

impl Sink {
    /// Chunks queued for the writer thread at most (8 MiB of 256 KiB
    /// chunks). A short queue made the unit wait whenever the writer
    /// thread waited for a core: see [`IN_FLIGHT`].
    const DEPTH: usize = 32;

    /// `out`, written on a thread of its own.
    fn thread(out: AtomicFile) -> Result<Sink> {
        let target = out.target().to_path_buf();
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(Self::DEPTH);
        let handle = std::thread::Builder::new()
            .name("rex-write".into())
            .spawn(move || {
                let mut out = out;
                for b in rx {
                    out.write_all(&b)?;
                }
                Ok(out)
            })
            .map_err(|e| Error::Invalid(format!("cannot start a writer thread: {e}")))?;
        Ok(Sink::Thread(WriterThread {
            tx: Some(tx),
            handle: Some(handle),
            target,
        }))
    }

    fn target(&self) -> &Path {
        match self {
            Sink::Here(f) => f.target(),
            Sink::Thread(t) => &t.target,
        }
    }

    /// Appends `b`.
    fn write(&mut self, b: Cow<'_, [u8]>) -> Result<()> {
        match self {
            Sink::Here(f) => f.write_all(&b),
            Sink::Thread(t) => match t.tx.as_ref().map(|tx| tx.send(b.into_owned())) {
                Some(Ok(())) => Ok(()),
                // The thread stopped: its error says why. (It cannot end
                // well while the queue is open; if it did, the bytes it
                // did not take are an error too, never a short file.)
                _ => Err(match t.join() {
                    Err(e) => e,
                    Ok(_) => Error::Invalid(format!(
                        "{}: the writer thread ended before the file",
                        t.target.display()
                    )),
                }),
            },
        }
    }

    /// The file, with every byte sent written to it (the writer thread
    /// joined), to finish and commit; the thread's error if it stopped on
    /// one.
    fn into_file(self) -> Result<AtomicFile> {
        match self {
            Sink::Here(f) => Ok(f),
            Sink::Thread(mut t) => t.join(),
        }
    }
}

/// Streams records into a new chunked file.
pub struct ChunkedWriter {
    out: Sink,
    header: ChunkedHeader,
    /// Version 1: chunk CRCs and the running chunk's hasher.
    crcs: Vec<u32>,
    hasher: crc32fast::Hasher,
    in_chunk: u64,
    /// CRC of every byte after the header, as written.
    file_hasher: crc32fast::Hasher,
    /// Payload bytes written.
    bytes: u64,
    v2: Option<V2>,
    /// A copy of every byte written, streamed elsewhere (an L2 upload).
    mirror: Option<Mirror>,
}

/// Writes `b` to the file and to its mirror, if any.
fn emit(out: &mut Sink, mirror: &mut Option<Mirror>, b: Cow<'_, [u8]>) -> Result<()> {
    if let Some(m) = mirror {
        m.write(&b)?;
    }
    out.write(b)
}

impl ChunkedWriter {
    /// Starts writing `path` in the header's version, encoding version 2
    /// chunks with the default [`Encoding`]. `record_count` in `header` is
    /// ignored (it is counted).
    pub fn create(path: impl AsRef<Path>, header: ChunkedHeader) -> Result<ChunkedWriter> {
        Self::create_with(path, header, Encoding::default())
    }

    /// As [`create`](Self::create), with `enc` for version 2 chunks.
    pub fn create_with(
        path: impl AsRef<Path>,
        header: ChunkedHeader,
        enc: Encoding,
    ) -> Result<ChunkedWriter> {
        let max_chunk = if header.version == 1 {
            1 << 30
        } else {
            MAX_CHUNK_V2
        };
        if !header.chunk_size.is_power_of_two()
            || header.chunk_size < header.record_size
            || header.chunk_size > max_chunk
        {
            return Err(Error::Invalid(format!(
                "chunk size {} must be a power of two no smaller than the record size {} and at most {} MiB",
                header.chunk_size,
                header.record_size,
                max_chunk >> 20
            )));
        }
        if !VERSIONS.contains(&header.version)
            || (header.version == 1 && header.coding != Coding::Records)
            || (header.kind == Kind::Rps && header.coding != Coding::Records)
            || (matches!(header.coding, Coding::Pointers { .. }) && header.record_size != 4)
        {
            return Err(Error::Invalid(format!(
                "cannot write a {} of version {} with {:?}",
                header.kind.name(),
                header.version,
                header.coding
            )));
        }
        for level in [enc.level, enc.max_level] {
            if !(-7..=22).contains(&level) {
                return Err(Error::Invalid(format!(
                    "zstd level {level} is outside -7..=22"
                )));
            }
        }
        let mut out = AtomicFile::create(path)?;
        out.write_all(&[0u8; HEADER_LEN as usize])?;
        // Beside encoder threads, a writer thread of its own (`Sink`).
        let threads = enc.threads.max(1);
        let out = if header.version == 2 && threads > 1 {
            Sink::thread(out)?
        } else {
            Sink::Here(out)
        };
        let v2 = if header.version == 2 {
            let (pool, replies) = if threads > 1 {
                (
                    Some(Pool::new(threads, header.coding)?),
                    Some(std::sync::mpsc::channel()),
                )
            } else {
                (None, None)
            };
            Some(V2 {
                enc,
                group_level: enc.level,
                strong: 0,
                cur: Vec::with_capacity(header.chunk_size as usize),
                table: Vec::new(),
                stored: 0,
                state: State::default(),
                pool,
                replies,
                sent: 0,
                written: 0,
                ready: BTreeMap::new(),
                cx: Contexts::default(),
            })
        } else {
            None
        };
        Ok(ChunkedWriter {
            out,
            header,
            crcs: Vec::new(),
            hasher: crc32fast::Hasher::new(),
            in_chunk: 0,
            file_hasher: crc32fast::Hasher::new(),
            bytes: 0,
            v2,
            mirror: None,
        })
    }

    /// Streams a copy of the file, as it is written, through `m` (whose
    /// reader uploads it beside the writing; [`finish`](Self::finish) ends
    /// the stream with the header). Only before the first record.
    pub fn mirror(&mut self, mut m: Mirror) -> Result<()> {
        if self.bytes != 0 || self.mirror.is_some() {
            return Err(Error::Invalid(format!(
                "{}: a mirror must be set before the first record",
                self.out.target().display()
            )));
        }
        m.write(&[0u8; HEADER_LEN as usize])?;
        self.mirror = Some(m);
        Ok(())
    }

    /// Pointer coding: the pattern space's first new pointer of this
    /// generation (its `pattern_base`), from which new pointers count.
    pub fn set_next_new(&mut self, p: u32) {
        if let Some(v) = &mut self.v2 {
            v.state.next_new = p;
        }
    }

    /// Pointer coding: the zero pattern's pointer, once known (a hint:
    /// any value decodes correctly, this one makes zero patterns cheap).
    pub fn set_zero_hint(&mut self, p: u32) {
        if let Some(v) = &mut self.v2 {
            v.state.zero = p;
        }
    }

    /// Appends whole records.
    ///
    /// Version 1: each byte is CRC'd once: the chunk CRC, and the
    /// whole-file CRC is obtained by combining the chunk CRCs
    /// (`crc32fast::Hasher::combine`, O(log n) per chunk) rather than by a
    /// second pass over the data. Version 2: full chunks go to the
    /// encoders.
    pub fn write(&mut self, mut data: &[u8]) -> Result<()> {
        debug_assert_eq!(data.len() % self.header.record_size as usize, 0);
        self.bytes += data.len() as u64;
        let cs = self.header.chunk_size as usize;
        if self.v2.is_some() {
            while !data.is_empty() {
                let v = self.v2.as_mut().expect("checked");
                let n = (cs - v.cur.len()).min(data.len());
                v.cur.extend_from_slice(&data[..n]);
                data = &data[n..];
                if v.cur.len() == cs {
                    self.send_chunk()?;
                }
            }
            return Ok(());
        }
        emit(&mut self.out, &mut self.mirror, Cow::Borrowed(data))?;
        let cs = cs as u64;
        while !data.is_empty() {
            let n = ((cs - self.in_chunk) as usize).min(data.len());
            self.hasher.update(&data[..n]);
            self.in_chunk += n as u64;
            data = &data[n..];
            if self.in_chunk == cs {
                self.end_chunk();
            }
        }
        Ok(())
    }

    /// Version 2: hands the current chunk to an encoder (or encodes it
    /// here), then writes whatever is ready, in order.
    fn send_chunk(&mut self) -> Result<()> {
        let coding = self.header.coding;
        let cs = self.header.chunk_size as usize;
        let v = self.v2.as_mut().expect("version 2");
        let data = std::mem::replace(&mut v.cur, Vec::with_capacity(cs));
        let state = v.state;
        if let Coding::Pointers { prev } = coding {
            v.state = state.advance(&data, prev);
        }
        let idx = v.sent;
        v.sent += 1;
        let level = match (v.enc.probing(), coding) {
            (None, _) => v.enc.level,
            // Coded pointers are small: the stronger level costs little.
            (Some((_, strong)), Coding::Pointers { .. }) => strong,
            (Some((base, strong)), Coding::Records) => {
                if idx.is_multiple_of(PROBE_EVERY) {
                    v.group_level = v.cx.probe(&data, base, strong)?;
                }
                v.group_level
            }
        };
        if level == v.enc.max_level && level != v.enc.level {
            v.strong += 1;
        }
        match (&v.pool, &v.replies) {
            (Some(pool), Some((tx, _))) => {
                let job = Job {
                    idx,
                    data,
                    state,
                    level,
                    reply: tx.clone(),
                };
                pool.jobs
                    .as_ref()
                    .expect("open until drop")
                    .send(job)
                    .map_err(|_| Error::Invalid("the encoder threads stopped".into()))?;
            }
            _ => {
                let e = encode_chunk(&data, coding, state, level, &mut v.cx)?;
                v.ready.insert(idx, e);
            }
        }
        self.drain(false)
    }

    /// Writes the encoded chunks that are next in order; with `all`, waits
    /// for every chunk sent. Otherwise waits only while more chunks are in
    /// flight than [`IN_FLIGHT`] per encoder, which bounds the writer's
    /// memory.
    fn drain(&mut self, all: bool) -> Result<()> {
        loop {
            let v = self.v2.as_mut().expect("version 2");
            while let Some(e) = v.ready.remove(&v.written) {
                v.written += 1;
                let len = e.stored.len() as u32;
                v.table.extend_from_slice(&len.to_le_bytes());
                let codec = e.codec.id();
                v.table.extend_from_slice(&codec.to_le_bytes());
                v.table.extend_from_slice(&e.stored_crc.to_le_bytes());
                v.table.extend_from_slice(&e.decoded_crc.to_le_bytes());
                v.stored += u64::from(len);
                self.file_hasher
                    .combine(&crc32fast::Hasher::new_with_initial_len(
                        e.stored_crc,
                        u64::from(len),
                    ));
                emit(&mut self.out, &mut self.mirror, Cow::Owned(e.stored))?;
            }
            let v = self.v2.as_mut().expect("version 2");
            let in_flight = v.sent - v.written;
            let bound = v
                .pool
                .as_ref()
                .map_or(0, |p| (IN_FLIGHT * p.workers.len()) as u64);
            if in_flight == 0 || (!all && in_flight <= bound) {
                return Ok(());
            }
            let (_, rx) = v.replies.as_ref().expect("a pool has replies");
            let (idx, r) = rx
                .recv()
                .map_err(|_| Error::Invalid("the encoder threads stopped".into()))?;
            v.ready.insert(idx, r?);
        }
    }

    /// Closes the current chunk: records its CRC and folds it into the
    /// whole-file CRC.
    fn end_chunk(&mut self) {
        let h = std::mem::replace(&mut self.hasher, crc32fast::Hasher::new());
        self.file_hasher.combine(&h);
        self.crcs.push(h.finalize());
        self.in_chunk = 0;
    }

    /// Chunks given to the encoders at the stronger level (`max_level`)
    /// so far.
    pub fn strong_chunks(&self) -> u64 {
        self.v2.as_ref().map_or(0, |v| v.strong)
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.bytes / u64::from(self.header.record_size)
    }

    /// Writes the chunk table and header and publishes the file; returns its
    /// length and the CRC-32 of the whole file (for the manifest).
    pub fn finish(mut self) -> Result<(u64, u32)> {
        let (mut table, stored) = if self.v2.is_some() {
            if !self.v2.as_ref().expect("checked").cur.is_empty() {
                self.send_chunk()?;
            }
            self.drain(true)?;
            let v = self.v2.as_mut().expect("checked");
            (std::mem::take(&mut v.table), v.stored)
        } else {
            if self.in_chunk > 0 {
                self.end_chunk();
            }
            (
                self.crcs
                    .iter()
                    .flat_map(|c| c.to_le_bytes())
                    .collect::<Vec<u8>>(),
                self.bytes,
            )
        };
        let tcrc = crc32fast::hash(&table);
        table.extend_from_slice(&tcrc.to_le_bytes());
        let table_len = table.len() as u64;
        self.file_hasher.update(&table);
        emit(&mut self.out, &mut self.mirror, Cow::Owned(table))?;
        self.header.record_count = self.records();
        let hb = self.header.encode(stored);
        let mut whole = crc32fast::Hasher::new();
        whole.update(&hb);
        whole.combine(&self.file_hasher);
        let mut out = self.out.into_file()?;
        out.seek_after_writing(SeekFrom::Start(0))?;
        out.write_all(&hb)?;
        out.seek_after_writing(SeekFrom::End(0))?;
        let len = HEADER_LEN + stored + table_len;
        // The copy's end first: its reader publishes it while this file is
        // fsynced.
        if let Some(m) = self.mirror.take() {
            m.end(&hb)?;
        }
        out.commit()?;
        Ok((len, whole.finalize()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::AtomicU64;

    /// Fills a sparse copy from the complete file, counting the calls.
    struct CopyFill {
        from: PathBuf,
        to: File,
        calls: std::sync::Arc<AtomicU64>,
    }

    impl ChunkFill for CopyFill {
        fn fill(&self, offset: u64, len: u64) -> Result<()> {
            self.calls.fetch_add(1, Ordering::Relaxed);
            let mut b = vec![0u8; len as usize];
            File::open(&self.from)
                .unwrap()
                .read_exact_at(&mut b, offset)
                .unwrap();
            self.to.write_all_at(&b, offset).unwrap();
            Ok(())
        }
    }

    #[test]
    fn a_lazy_file_fills_only_the_chunks_it_reads_and_checks_them() {
        let d = tempfile::tempdir().unwrap();
        let full = d.path().join("g1.rps");
        let header = ChunkedHeader {
            version: 1,
            chunk_size: 1024,
            ..ChunkedHeader::new(Kind::Rps, 32, 1, 0, 0)
        };
        let mut w = ChunkedWriter::create(&full, header).unwrap();
        let data: Vec<u8> = (0..32 * 1000u32).map(|i| (i * 7 % 251) as u8).collect();
        w.write(&data).unwrap();
        let (len, _) = w.finish().unwrap();
        let bytes = std::fs::read(&full).unwrap();
        let table = table_offset(&bytes[..64]).unwrap();
        assert_eq!(table, 64 + 32 * 1000);

        let open_sparse = |name: &str, calls: &std::sync::Arc<AtomicU64>| {
            let p = d.path().join(name);
            let f = File::options()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&p)
                .unwrap();
            f.set_len(len).unwrap();
            f.write_all_at(&bytes[..64], 0).unwrap();
            f.write_all_at(&bytes[table as usize..], table).unwrap();
            let fill = CopyFill {
                from: full.clone(),
                to: f,
                calls: std::sync::Arc::clone(calls),
            };
            ChunkedFile::open_lazy(&p, Kind::Rps, Box::new(fill)).unwrap()
        };
        let calls = std::sync::Arc::new(AtomicU64::new(0));
        let lazy = open_sparse("lazy.rps", &calls);
        // Records 40..=41 lie in chunk 1 (bytes 1024..2048 of the payload).
        assert_eq!(lazy.records(40, 2).unwrap(), &data[40 * 32..42 * 32]);
        assert_eq!(lazy.record(33).unwrap(), &data[33 * 32..34 * 32]);
        assert_eq!(calls.load(Ordering::Relaxed), 1, "one chunk fetched, once");
        lazy.verify_all().unwrap();
        assert_eq!(calls.load(Ordering::Relaxed), 32, "every chunk, each once");
        assert_eq!(lazy.payload().unwrap(), &data[..]);

        // The source changes behind the reader's back: the chunk fails its
        // CRC when it is filled, and nothing of it is handed out.
        let mut bad = bytes.clone();
        bad[64 + 5 * 1024 + 3] ^= 1;
        std::fs::write(&full, &bad).unwrap();
        let lazy = open_sparse("lazy2.rps", &calls);
        assert!(lazy.record(0).is_ok());
        match lazy.record(5 * 32 + 1) {
            Err(Error::Corrupt { field, offset, .. }) => {
                assert_eq!((field, offset), ("chunk data", 64 + 5 * 1024));
            }
            other => panic!("expected a chunk CRC error, got {other:?}"),
        }
    }

    /// A chunk whose sample does not shrink is stored raw without being
    /// compressed whole; a compressible chunk beside it still is; both read
    /// back and check (the raw one's stored CRC is its decoded CRC).
    #[test]
    fn an_incompressible_chunk_is_stored_raw_and_reads_back() {
        let d = tempfile::tempdir().unwrap();
        use rand::{Rng, SeedableRng};
        let mut data = vec![0u8; 1 << 18];
        rand_chacha::ChaCha8Rng::seed_from_u64(5).fill_bytes(&mut data);
        data.extend(std::iter::repeat_n(3u8, 1 << 18));
        let fmt = WriteFormat::default();
        let p = write_v(d.path(), "g.rps", Kind::Rps, fmt, &data);
        let f = ChunkedFile::open(&p, Kind::Rps).unwrap();
        assert_eq!(f.chunk_count(), 2);
        assert_eq!(f.stored_chunk(0).unwrap().2, Codec::Raw);
        assert_ne!(f.stored_chunk(1).unwrap().2, Codec::Raw);
        f.verify_all().unwrap();
        assert_eq!(f.payload().unwrap(), &data[..]);
    }

    /// A file decoding into a pool reads what the file holds; a released
    /// chunk's buffer goes to the next chunk decoded, and a released chunk
    /// read again is decoded (and checked) again, the same bytes; only a
    /// file with nothing verified yet switches; ranges across chunks are
    /// refused, not misread.
    #[test]
    fn a_pooled_file_reuses_released_buffers_and_reads_the_same_bytes() {
        let d = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..4 * (1u32 << 18) + 4096)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 & 0x3f)
            .collect();
        let p = write_v(d.path(), "g.rps", Kind::Rps, WriteFormat::default(), &data);
        let mut plain = ChunkedFile::open(&p, Kind::Rps).unwrap();
        plain.record(0).unwrap();
        assert!(
            !plain.decode_into_pool(Arc::default()),
            "a chunk is verified"
        );
        assert_eq!(plain.records(8191, 2).unwrap(), &data[8191 * 32..8193 * 32]);
        let mut f = ChunkedFile::open(&p, Kind::Rps).unwrap();
        assert!(f.decode_into_pool(Arc::new(ChunkPool::default())));
        let cs = 1usize << 18;
        assert_eq!(f.chunk_count(), 5);
        let first = f.chunk_payload(0).unwrap().as_ptr();
        assert_eq!(f.chunk_payload(0).unwrap(), &data[..cs]);
        assert_eq!(f.chunk_payload(1).unwrap(), &data[cs..2 * cs]);
        assert_eq!(f.chunks_held(), 2);
        // SAFETY: no slice of chunk 0 is alive (the ones above are gone).
        unsafe { f.release_chunk(0) };
        assert_eq!((f.chunks_held(), f.chunks_verified()), (1, 2));
        let third = f.chunk_payload(2).unwrap();
        assert_eq!(third.as_ptr(), first, "the released buffer is reused");
        assert_eq!(third, &data[2 * cs..3 * cs]);
        assert_eq!(f.record(5).unwrap(), &data[5 * 32..6 * 32]);
        assert_eq!(f.chunk_payload(4).unwrap(), &data[4 * cs..]);
        // Releasing twice, or a chunk never decoded, does nothing.
        // SAFETY: no slice of chunks 0 and 3 is alive.
        unsafe {
            f.release_chunk(0);
            f.release_chunk(3);
        }
        assert_eq!(f.chunks_held(), 3);
        assert!(
            matches!(f.records(cs as u64 / 32 - 1, 2), Err(Error::Invalid(m)) if m.contains("span chunks"))
        );
        assert_eq!(f.records(cs as u64 / 32, 2).unwrap(), &data[cs..cs + 64]);
        for k in 0..5 {
            let want = &data[k * cs..((k + 1) * cs).min(data.len())];
            assert_eq!(f.chunk_payload(k).unwrap(), want, "chunk {k}");
            // SAFETY: the slice above is gone.
            unsafe { f.release_chunk(k) };
        }
        assert_eq!(f.chunks_held(), 0);
        // Small chunks keep their file's mapping (a trip through the
        // pool's lock per few patterns would cost more than it saves).
        let small = WriteFormat {
            chunk_size: ChunkedFile::MIN_POOLED_CHUNK / 2,
            ..WriteFormat::default()
        };
        let ps = write_v(d.path(), "small.rps", Kind::Rps, small, &data);
        let mut fs = ChunkedFile::open(&ps, Kind::Rps).unwrap();
        assert!(!fs.decode_into_pool(Arc::default()));
        assert_eq!(fs.payload().unwrap(), &data[..]);
        // A version 1 file has nothing decoded to pool.
        let v1 = WriteFormat::for_l2_version(1).unwrap();
        let p1 = write_v(d.path(), "v1.rps", Kind::Rps, v1, &data[..cs]);
        let mut f1 = ChunkedFile::open(&p1, Kind::Rps).unwrap();
        assert!(!f1.decode_into_pool(Arc::default()));
        assert_eq!(f1.payload().unwrap(), &data[..cs]);
    }

    /// Writes `data` as one file of `kind` in `fmt`, returns its path.
    fn write_v(d: &Path, name: &str, kind: Kind, fmt: WriteFormat, data: &[u8]) -> PathBuf {
        let p = d.join(name);
        let rs = if kind == Kind::Rps { 32 } else { 4 };
        let mut w =
            ChunkedWriter::create_with(&p, fmt.header(kind, rs, 1, 0, 128), fmt.encoding).unwrap();
        w.set_next_new(0);
        // In uneven pieces, as the Deduplication Unit flushes.
        for piece in data.chunks(rs as usize * 37) {
            w.write(piece).unwrap();
        }
        w.finish().unwrap();
        p
    }

    /// Pointers as the Deduplication Unit writes them: pages of new
    /// patterns, pages that keep their previous version's pointers with a
    /// few new ones, zero patterns.
    fn pointers(pages: u32) -> Vec<u8> {
        let mut next = 0u32;
        let mut out = Vec::new();
        for pg in 0..pages {
            for j in 0..128u32 {
                let p = match (pg % 3, j % 17) {
                    (0, _) | (1, 0) => {
                        next += 1;
                        next - 1
                    }
                    (2, 5) => 3,
                    _ => (pg * 128 + j) / 2,
                };
                out.extend_from_slice(&p.to_le_bytes());
            }
        }
        out
    }

    #[test]
    fn every_version_coding_and_thread_count_round_trips() {
        let d = tempfile::tempdir().unwrap();
        let text: Vec<u8> = (0..32 * 20000u32)
            .map(|i| {
                if i % 97 < 60 {
                    b'a' + (i % 7) as u8
                } else {
                    (i.wrapping_mul(2654435761u32) >> 24) as u8
                }
            })
            .collect();
        let ptrs = pointers(3000);
        for (version, level, max_level, threads) in [
            (1, 0, 9, 1),
            (2, 0, 9, 1),
            (2, 3, 0, 1),
            (2, 3, 9, 1),
            (2, 3, 9, 3),
            (2, 19, 0, 2),
        ] {
            let fmt = WriteFormat {
                version,
                chunk_size: 1 << 14,
                encoding: Encoding {
                    level,
                    max_level,
                    threads,
                },
                ..WriteFormat::default()
            };
            for (kind, data) in [(Kind::Rps, &text), (Kind::Pf, &ptrs)] {
                let p = write_v(
                    d.path(),
                    &format!("f{version}{level}{max_level}{threads}{kind:?}"),
                    kind,
                    fmt,
                    data,
                );
                let f = ChunkedFile::open(&p, kind).unwrap();
                assert_eq!(f.header().version, version);
                assert_eq!(
                    f.payload().unwrap(),
                    &data[..],
                    "{version} {level} {threads} {kind:?}"
                );
                if version == 2 && level > 0 {
                    assert!(
                        f.file_len() < data.len() as u64 / 2,
                        "{kind:?} at level {level}: {} bytes for {}",
                        f.file_len(),
                        data.len()
                    );
                }
            }
        }
        // Incompressible chunks are stored raw: within the table's bytes of
        // the payload.
        let noise: Vec<u8> = (0..32 * 4096u64)
            .map(|i| (i.wrapping_mul(0x9E3779B97F4A7C15) >> 56) as u8)
            .collect();
        let p = write_v(d.path(), "noise", Kind::Rps, WriteFormat::default(), &noise);
        let f = ChunkedFile::open(&p, Kind::Rps).unwrap();
        assert_eq!(f.payload().unwrap(), &noise[..]);
        assert!(f.file_len() <= noise.len() as u64 + 64 + 4 + 16 * f.chunk_count() as u64);
    }

    /// Writes `data` as an RPS file in `enc` (256 KiB chunks), returns the
    /// file's bytes and the chunks given the stronger level.
    fn write_rps_with(d: &Path, name: &str, enc: Encoding, data: &[u8]) -> (Vec<u8>, u64) {
        let fmt = WriteFormat {
            encoding: enc,
            ..WriteFormat::default()
        };
        let p = d.join(name);
        let mut w =
            ChunkedWriter::create_with(&p, fmt.header(Kind::Rps, 32, 1, 0, 0), enc).unwrap();
        for piece in data.chunks(32 * 1000) {
            w.write(piece).unwrap();
        }
        let strong = w.strong_chunks();
        w.finish().unwrap();
        let f = ChunkedFile::open(&p, Kind::Rps).unwrap();
        assert_eq!(f.payload().unwrap(), data, "{name}");
        (std::fs::read(&p).unwrap(), strong)
    }

    #[test]
    fn the_stronger_level_goes_where_a_probe_says_it_pays_whatever_the_threads() {
        let d = tempfile::tempdir().unwrap();
        // Text-like records (words of a small vocabulary in a pseudo-random
        // order: the stronger level's parser finds longer matches), and
        // random bytes between runs of one byte (where it finds nothing
        // more), 40 chunks of each: two groups, the second of 8 chunks.
        let words = [
            "page ",
            "pattern ",
            "pointer ",
            "restore ",
            "chain ",
            "delta ",
            "table ",
            "row-",
            "0042 ",
            "sqlite ",
            "blob ",
            "memory ",
            "the ",
            "of ",
            "a ",
            "checkpoint ",
        ];
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let size = 40 * (1 << 18);
        let mut text = Vec::with_capacity(size + 16);
        while text.len() < size {
            let r = rnd();
            text.extend_from_slice(words[(r % 16) as usize].as_bytes());
            if r >> 60 == 0 {
                text.extend_from_slice(&r.to_le_bytes()[..3]);
            }
        }
        text.truncate(size);
        let mut noise = Vec::with_capacity(size);
        while noise.len() < size {
            let r = rnd();
            if r % 4 == 0 {
                noise.extend(std::iter::repeat_n((r >> 8) as u8, 64));
            } else {
                noise.extend_from_slice(&r.to_le_bytes());
            }
        }
        noise.truncate(size);
        let enc = |level, max_level, threads| Encoding {
            level,
            max_level,
            threads,
        };
        // Text: every chunk at level 9, smaller than at level 3, and the
        // same bytes as a writer at level 9 alone, on any thread count.
        let (t1, s1) = write_rps_with(d.path(), "t1", enc(3, 9, 1), &text);
        let (t3, s3) = write_rps_with(d.path(), "t3", enc(3, 9, 3), &text);
        let (t9, s9) = write_rps_with(d.path(), "t9", enc(9, 9, 2), &text);
        let (t0, s0) = write_rps_with(d.path(), "t0", enc(3, 3, 2), &text);
        assert_eq!((s1, s3, s9, s0), (40, 40, 0, 0));
        assert!(
            t1 == t3 && t1 == t9,
            "the level 9 file, whatever the threads"
        );
        assert!(
            t1.len() < t0.len() - t0.len() / 50,
            "{} bytes at level 9, {} at 3",
            t1.len(),
            t0.len()
        );
        // Noise: the probe keeps level 3, and the file is level 3's.
        let (n1, s1) = write_rps_with(d.path(), "n1", enc(3, 9, 1), &noise);
        let (n2, s2) = write_rps_with(d.path(), "n2", enc(3, 9, 2), &noise);
        let (n0, _) = write_rps_with(d.path(), "n0", enc(3, 0, 1), &noise);
        assert_eq!((s1, s2), (0, 0));
        assert!(n1 == n2 && n1 == n0);
        // Text then noise: each group by its own probe.
        let both: Vec<u8> = [&text[..32 << 18], &noise[..8 << 18], &text[..8 << 18]].concat();
        let (b1, s1) = write_rps_with(d.path(), "b1", enc(3, 9, 1), &both);
        let (b2, s2) = write_rps_with(d.path(), "b2", enc(3, 9, 2), &both);
        assert_eq!((s1, s2), (32, 32));
        assert!(b1 == b2);
        // Raw chunks (level 0) probe nothing, and 0 is never the stronger
        // level of a negative one.
        let (_, s) = write_rps_with(d.path(), "r", enc(0, 9, 2), &text);
        assert_eq!(s, 0);
        let (fast, s) = write_rps_with(d.path(), "f", enc(-3, 0, 2), &text);
        assert_eq!(s, 0);
        assert!(fast.len() < text.len() * 9 / 10, "level -3 compresses");
    }

    #[test]
    fn arrays_of_numbers_are_stored_in_byte_lanes_and_round_trip() {
        let d = tempfile::tempdir().unwrap();
        // A simulation's doubles, 32-bit hash-chain positions, and text.
        let doubles: Vec<u8> = (0..64 * 1024u32)
            .flat_map(|i| (f64::from(i) * 0.5 + 1000.0).to_le_bytes())
            .collect();
        let positions: Vec<u8> = (0..128 * 1024u32)
            .flat_map(|i| (i.wrapping_mul(2654435761) % 8_000_000).to_le_bytes())
            .collect();
        let text: Vec<u8> = (0..512 * 1024u32)
            .map(|i| b"the quick brown fox "[(i % 20) as usize] ^ ((i / 4096) % 3) as u8)
            .collect();
        let fmt = WriteFormat {
            chunk_size: 1 << 16,
            ..WriteFormat::default()
        };
        let mut plain_sizes = Vec::new();
        for (name, data, in_lanes) in [
            ("doubles", &doubles, true),
            ("positions", &positions, true),
            ("text", &text, false),
        ] {
            let p = write_v(d.path(), name, Kind::Rps, fmt, data);
            let f = ChunkedFile::open(&p, Kind::Rps).unwrap();
            assert_eq!(f.payload().unwrap(), &data[..], "{name}");
            let codecs: Vec<Codec> = (0..f.chunk_count())
                .map(|i| f.stored_chunk(i).unwrap().2)
                .collect();
            assert!(
                codecs
                    .iter()
                    .all(|&c| matches!(c, Codec::ZstdLanes(_)) == in_lanes),
                "{name}: {codecs:?}"
            );
            // What plain zstd makes of the same chunks.
            let plain: usize = data
                .chunks(1 << 16)
                .map(|c| zstd::bulk::compress(c, DEFAULT_LEVEL).unwrap().len())
                .sum();
            plain_sizes.push((name, f.file_len(), plain));
        }
        for (name, ours, plain) in &plain_sizes[..2] {
            assert!(
                ours * 2 < *plain as u64,
                "{name}: {ours} bytes, plain zstd {plain}"
            );
        }
        // A flipped bit in a chunk stored in lanes: the chunk is named and
        // hands out nothing; the chunks around it still read.
        let p = d.path().join("doubles");
        let good = std::fs::read(&p).unwrap();
        let f = ChunkedFile::open(&p, Kind::Rps).unwrap();
        let (off, len, _) = f.stored_chunk(1).unwrap();
        drop(f);
        let mut bad = good.clone();
        bad[off as usize + len as usize / 2] ^= 0x10;
        std::fs::write(&p, &bad).unwrap();
        let f = ChunkedFile::open(&p, Kind::Rps).unwrap();
        let per_chunk = (1u64 << 16) / 32;
        assert_eq!(f.records(0, per_chunk).unwrap(), &doubles[..1 << 16]);
        let err = f.records(per_chunk, 1).unwrap_err().to_string();
        assert!(
            err.contains("chunk 1") && err.contains("stored by zstd in byte lanes"),
            "{err}"
        );
        assert_eq!(
            f.records(2 * per_chunk, 1).unwrap(),
            &doubles[2 << 16..(2 << 16) + 32]
        );
        // A Pointer File never holds lanes: codec 2 there is refused.
        let ptrs = pointers(500);
        let p = write_v(d.path(), "g.pf", Kind::Pf, fmt, &ptrs);
        let mut b = std::fs::read(&p).unwrap();
        let table = table_offset(&b[..64]).unwrap() as usize;
        b[table + 4] = 2;
        let n = b.len() - 4 - table;
        let crc = crc32fast::hash(&b[table..table + n]);
        let end = b.len();
        b[end - 4..].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&p, &b).unwrap();
        let err = ChunkedFile::open(&p, Kind::Pf).unwrap_err().to_string();
        assert!(err.contains("chunk 0: codec 2"), "{err}");
    }

    proptest::proptest! {
        #[test]
        fn lanes_join_what_they_split(
            words in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..300),
            w in proptest::sample::select(vec![4usize, 8]),
        ) {
            let src: Vec<u8> = words.iter().flat_map(|x| x.to_le_bytes()).collect();
            let mut mid = vec![0u8; src.len()];
            let mut back = vec![0u8; src.len()];
            lanes::split(&src, w, &mut mid);
            lanes::join(&mid, w, &mut back);
            proptest::prop_assert_eq!(back, src);
        }
    }

    #[test]
    fn a_flipped_bit_in_a_compressed_chunk_names_the_file_and_chunk() {
        let d = tempfile::tempdir().unwrap();
        let ptrs = pointers(2000);
        let fmt = WriteFormat {
            chunk_size: 1 << 14,
            ..WriteFormat::default()
        };
        let p = write_v(d.path(), "g.pf", Kind::Pf, fmt, &ptrs);
        let good = std::fs::read(&p).unwrap();
        let f = ChunkedFile::open(&p, Kind::Pf).unwrap();
        let n = f.chunk_count();
        assert!(n > 4);
        // The stored bytes of chunk 3.
        let (off, len) = (f.chunks[3].off as usize, f.chunks[3].len as usize);
        drop(f);
        for bit in [0, len * 4, len * 8 - 1] {
            let mut bad = good.clone();
            bad[off + bit / 8] ^= 1 << (bit % 8);
            std::fs::write(&p, &bad).unwrap();
            let f = ChunkedFile::open(&p, Kind::Pf).unwrap();
            // Chunks before it read; chunk 3 never hands out a byte.
            assert_eq!(f.records(0, 10).unwrap(), &ptrs[..40]);
            let first = (3 << 14) / 4;
            match f.records(first, 1) {
                Err(Error::Corrupt {
                    path,
                    offset,
                    field,
                    reason,
                }) => {
                    assert_eq!(
                        (path.as_path(), offset, field),
                        (p.as_path(), off as u64, "chunk data")
                    );
                    assert!(reason.contains("chunk 3"), "{reason}");
                }
                other => panic!("expected a chunk error, got {other:?}"),
            }
            assert!(f.payload().is_err());
        }
    }

    /// An RPS of 32 KiB of sevens in 4 KiB chunks; returns its path and
    /// payload.
    fn sevens(d: &Path) -> (PathBuf, Vec<u8>) {
        let data = vec![7u8; 32 * 1024];
        let fmt = WriteFormat {
            chunk_size: 1 << 12,
            ..WriteFormat::default()
        };
        (write_v(d, "g.rps", Kind::Rps, fmt, &data), data)
    }

    /// Flips a bit of chunk `i`'s decoded CRC in the chunk table of file
    /// bytes `b`, then recomputes the table's CRC.
    fn wrong_decoded_crc(b: &mut [u8], i: usize) {
        let table = table_offset(&b[..64]).unwrap() as usize;
        b[table + i * 16 + 12] ^= 0x40;
        let end = b.len();
        let crc = crc32fast::hash(&b[table..end - 4]);
        b[end - 4..].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn a_chunk_that_decodes_to_other_bytes_is_caught_by_its_decoded_crc() {
        // A writer defect (or a forged table) whose stored CRC matches but
        // whose decoded bytes differ: the second CRC catches it.
        let d = tempfile::tempdir().unwrap();
        let (p, _) = sevens(d.path());
        let mut b = std::fs::read(&p).unwrap();
        wrong_decoded_crc(&mut b, 2);
        std::fs::write(&p, &b).unwrap();
        let f = ChunkedFile::open(&p, Kind::Rps).unwrap();
        let err = f.payload().unwrap_err().to_string();
        assert!(
            err.contains("chunk 2") && err.contains("decodes to payload bytes 8192..12288"),
            "{err}"
        );
    }

    /// `check_chunk_at` (what `verify` runs on chunks no live page needs)
    /// checks both CRCs of a chunk but keeps nothing: the chunk stays
    /// unverified and its decoded bytes are not in the file's mapping; a
    /// flipped stored byte or a wrong decoded CRC is still an error naming
    /// the chunk.
    #[test]
    fn checking_a_chunk_keeps_nothing_and_still_finds_its_damage() {
        let d = tempfile::tempdir().unwrap();
        let (p, data) = sevens(d.path());
        let good = std::fs::read(&p).unwrap();
        let f = ChunkedFile::open(&p, Kind::Rps).unwrap();
        let n = f.chunk_count();
        assert_eq!(n, 8);
        for i in 0..n {
            assert!(f.check_chunk_at(i).unwrap());
        }
        assert!(!f.check_chunk_at(n).unwrap());
        assert_eq!(f.chunks_verified(), 0, "checking kept a chunk");
        // A reader still gets the bytes (decoded then).
        assert_eq!(f.payload().unwrap(), &data[..]);
        let off = f.chunks[5].off as usize;
        drop(f);

        // A flipped stored byte of chunk 5.
        let mut bad = good.clone();
        bad[off] ^= 1;
        std::fs::write(&p, &bad).unwrap();
        let f = ChunkedFile::open(&p, Kind::Rps).unwrap();
        let e = f.check_chunk_at(5).unwrap_err().to_string();
        assert!(e.contains("chunk 5") && e.contains("has CRC"), "{e}");

        // Chunk 2's decoded CRC wrong (the table's CRC recomputed).
        let mut bad = good.clone();
        wrong_decoded_crc(&mut bad, 2);
        std::fs::write(&p, &bad).unwrap();
        let f = ChunkedFile::open(&p, Kind::Rps).unwrap();
        let e = f.check_chunk_at(2).unwrap_err().to_string();
        assert!(e.contains("chunk 2") && e.contains("decodes to"), "{e}");
        assert_eq!(f.chunks_verified(), 0);
    }
}
