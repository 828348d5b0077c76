//! The chunked record container shared by RPS files and Pointer Files
//! (docs/FORMAT.md §3.2).
//!
//! Both hold one array of fixed-size records (32-byte patterns, or 4-byte
//! pointers). The payload is covered by one CRC-32 per chunk (1 MiB by
//! default) rather than one per file, so that a page-aware restore of a few
//! pages verifies only the chunks it touches, while a full restore verifies
//! everything at memory speed. Chunks are verified lazily and remembered,
//! so no byte is trusted before its chunk's CRC has been checked.
//!
//! The writer streams records to a temporary file with bounded memory and
//! fills the header in last; the reader maps the file read-only after
//! checking header, length and the chunk table.

use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::durable::AtomicFile;
use crate::error::{Error, IoContext, Result};

/// Header length.
pub const HEADER_LEN: u64 = 64;
/// Version of the container layout.
pub const VERSION: u32 = 1;
/// Default chunk size.
pub const DEFAULT_CHUNK: u32 = 1 << 20;

/// Supplies the bytes of a chunked file opened before all of them were
/// there: a remote object materialized on demand, whose header and chunk
/// table were fetched and whose chunks are fetched on first use (see
/// [`ChunkedFile::open_lazy`]).
pub trait ChunkFill: Send + Sync {
    /// Writes bytes `offset .. offset + len` of the object into the file,
    /// in place. Called at most once per chunk, before the chunk's CRC is
    /// checked and before any byte of it is handed out.
    fn fill(&self, offset: u64, len: u64) -> Result<()>;
}

/// Where the chunk table of a chunked file starts, from its first
/// [`HEADER_LEN`] bytes: what a reader that fetches parts of a file needs
/// to fetch besides the header. `None` when the header is too short or
/// its counts overflow (the reader then reports the problem).
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
    let payload = le64(32)?.checked_mul(u64::from(le32(12)?))?;
    HEADER_LEN.checked_add(payload)
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

/// The decoded header of a chunked file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkedHeader {
    /// What the file is.
    pub kind: Kind,
    /// Bytes per record (pattern size for RPS, 4 for PF).
    pub record_size: u32,
    /// The L2 generation that wrote the file.
    pub generation: u64,
    /// Index of the first record in the chain's address space (RPS: the
    /// pointer of the first pattern; PF: 0).
    pub first_record: u64,
    /// Number of records.
    pub record_count: u64,
    /// Bytes per CRC chunk (a power of two, multiple of `record_size`).
    pub chunk_size: u32,
    /// Kind-specific: PF: pointers per page (alpha); RPS: 0.
    pub aux: u32,
}

impl ChunkedHeader {
    fn encode(&self) -> [u8; HEADER_LEN as usize] {
        let mut b = [0u8; HEADER_LEN as usize];
        b[0..8].copy_from_slice(&self.kind.magic());
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.record_size.to_le_bytes());
        b[16..24].copy_from_slice(&self.generation.to_le_bytes());
        b[24..32].copy_from_slice(&self.first_record.to_le_bytes());
        b[32..40].copy_from_slice(&self.record_count.to_le_bytes());
        b[40..44].copy_from_slice(&self.chunk_size.to_le_bytes());
        b[44..48].copy_from_slice(&self.aux.to_le_bytes());
        let crc = crc32fast::hash(&b[0..56]);
        b[56..60].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(path: &Path, kind: Kind, b: &[u8; HEADER_LEN as usize]) -> Result<Self> {
        let le32 = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4"));
        let le64 = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8"));
        super::check_prefix(path, b, &kind.magic(), kind.name(), VERSION)?;
        for (off, name) in [(48usize, "reserved"), (52, "reserved"), (60, "reserved")] {
            if le32(off) != 0 {
                return Err(Error::corrupt(path, off as u64, name, "must be 0"));
            }
        }
        let h = ChunkedHeader {
            kind,
            record_size: le32(12),
            generation: le64(16),
            first_record: le64(24),
            record_count: le64(32),
            chunk_size: le32(40),
            aux: le32(44),
        };
        if h.record_size == 0 || !h.record_size.is_power_of_two() || h.record_size > 1 << 20 {
            return Err(Error::corrupt(
                path,
                12,
                "record_size",
                format!("{} is not a power of two in 1..=1048576", h.record_size),
            ));
        }
        if !h.chunk_size.is_power_of_two() || h.chunk_size < h.record_size || h.chunk_size > 1 << 30
        {
            return Err(Error::corrupt(
                path,
                40,
                "chunk_size",
                format!(
                    "{} is not a power of two between the record size {} and 1 GiB",
                    h.chunk_size, h.record_size
                ),
            ));
        }
        Ok(h)
    }

    /// (payload length, chunk count, file length), or `None` on overflow.
    fn layout(&self) -> Option<(u64, u64, u64)> {
        let payload = self.record_count.checked_mul(u64::from(self.record_size))?;
        let chunks = payload.div_ceil(u64::from(self.chunk_size));
        let len = HEADER_LEN
            .checked_add(payload)?
            .checked_add(chunks.checked_mul(4)?)?
            .checked_add(4)?;
        Some((payload, chunks, len))
    }
}

/// A chunked file opened for reading: mapped, header and chunk table
/// checked, chunks verified on first use.
pub struct ChunkedFile {
    path: PathBuf,
    header: ChunkedHeader,
    map: memmap2::Mmap,
    payload_len: u64,
    /// `log2(chunk_size)` (the header checks it is a power of two).
    chunk_shift: u32,
    /// `log2(record_size)` (likewise).
    record_shift: u32,
    chunk_crcs: Vec<u32>,
    verified: Vec<AtomicBool>,
    /// For a file opened with [`ChunkedFile::open_lazy`]: what fills its
    /// chunks, and a lock that makes each chunk filled once.
    fill: Option<(Box<dyn ChunkFill>, Mutex<()>)>,
}

impl std::fmt::Debug for ChunkedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkedFile")
            .field("path", &self.path)
            .field("header", &self.header)
            .finish()
    }
}

impl ChunkedFile {
    /// Opens `path`, expecting a file of `kind`.
    pub fn open(path: impl AsRef<Path>, kind: Kind) -> Result<ChunkedFile> {
        let path = path.as_ref();
        let file = super::open_regular(path)?;
        let (actual, hb) = super::read_header(path, &file)?;
        let header = ChunkedHeader::decode(path, kind, &hb)?;
        let (payload_len, chunks, file_len) = header.layout().ok_or_else(|| {
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
                    "file is {actual} bytes, the header ({} records of {} bytes, chunks of {}) says {file_len}{}",
                    header.record_count,
                    header.record_size,
                    header.chunk_size,
                    if actual < file_len {
                        " (truncated)"
                    } else {
                        " (trailing bytes)"
                    }
                ),
            ));
        }
        let table_off = HEADER_LEN + payload_len;
        // The chunk count comes from the header and the length check does
        // not bound memory (a sparse file may claim any length): the table
        // is read in bounded pieces, refusing holes, so memory grows only
        // with the bytes actually read, and checked before use.
        let n = chunks as usize * 4;
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
                format!("stored {stored:#010x}, computed {actual_crc:#010x} over the chunk CRCs"),
            ));
        }
        let chunk_crcs = table[..n]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4")))
            .collect::<Vec<_>>();
        // SAFETY: the file is never modified in place once published: rexctl
        // writes every L2 file under a temporary name and renames it, and
        // deletes (unlinks) rather than rewrites, which keeps a mapped inode
        // intact. The one exception, a file opened with `open_lazy`, is a
        // private cache file whose chunks are written (by `fill`, under the
        // fill lock) only before they are verified, hence before any byte of
        // them is handed out; its length never changes. The map is
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
        let verified = (0..chunk_crcs.len())
            .map(|_| AtomicBool::new(false))
            .collect();
        Ok(ChunkedFile {
            path: path.to_path_buf(),
            header,
            map,
            payload_len,
            chunk_shift: header.chunk_size.trailing_zeros(),
            record_shift: header.record_size.trailing_zeros(),
            chunk_crcs,
            verified,
            fill: None,
        })
    }

    /// Opens `path`, expecting a file of `kind`, whose header and chunk
    /// table are in place but whose chunks may not be (a sparse file of the
    /// object's length): `fill` writes each chunk's bytes into the file the
    /// first time a reader needs them, then the chunk's CRC is checked as
    /// for any file. A `--pages` restore from an object store reads this
    /// way, fetching only the chunks it touches.
    pub fn open_lazy(
        path: impl AsRef<Path>,
        kind: Kind,
        fill: Box<dyn ChunkFill>,
    ) -> Result<ChunkedFile> {
        let mut f = Self::open(path, kind)?;
        f.fill = Some((fill, Mutex::new(())));
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
        let cs = u64::from(self.header.chunk_size);
        let start = i as u64 * cs;
        let end = (start + cs).min(self.payload_len);
        // A lazily filled file: bring the chunk in first, once, under the
        // lock (no byte of an unverified chunk has been handed out, so
        // writing it cannot change bytes a reader holds).
        let _filling = match &self.fill {
            Some((fill, lock)) => {
                let guard = lock.lock().unwrap_or_else(|e| e.into_inner());
                if self.verified[i].load(Ordering::Acquire) {
                    return Ok(());
                }
                fill.fill(HEADER_LEN + start, end - start)?;
                Some(guard)
            }
            None => None,
        };
        let data = &self.map[(HEADER_LEN + start) as usize..(HEADER_LEN + end) as usize];
        let actual = crc32fast::hash(data);
        if actual != self.chunk_crcs[i] {
            return Err(Error::corrupt(
                &self.path,
                HEADER_LEN + start,
                "chunk data",
                format!(
                    "chunk {i} (bytes {}..{}) has CRC {actual:#010x}, the chunk table says {:#010x}",
                    HEADER_LEN + start,
                    HEADER_LEN + end,
                    self.chunk_crcs[i]
                ),
            ));
        }
        self.verified[i].store(true, Ordering::Release);
        Ok(())
    }

    /// Verifies every chunk.
    pub fn verify_all(&self) -> Result<()> {
        (0..self.chunk_crcs.len()).try_for_each(|i| self.verify_chunk(i))
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
            for i in a >> self.chunk_shift..=(b - 1) >> self.chunk_shift {
                self.verify_chunk(i as usize)?;
            }
        }
        Ok(&self.map[(HEADER_LEN + a) as usize..(HEADER_LEN + b) as usize])
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
        let start = (HEADER_LEN + a) as usize;
        Ok(&self.map[start..start + (1usize << self.record_shift)])
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
        let start = (HEADER_LEN + a) as usize;
        self.map.get(start..start + (1usize << self.record_shift))
    }

    /// The whole payload, fully verified.
    pub fn payload(&self) -> Result<&[u8]> {
        self.records(0, self.header.record_count)
    }
}

/// Streams records into a new chunked file.
pub struct ChunkedWriter {
    out: AtomicFile,
    header: ChunkedHeader,
    crcs: Vec<u32>,
    hasher: crc32fast::Hasher,
    file_hasher: crc32fast::Hasher,
    in_chunk: u64,
    bytes: u64,
}

impl ChunkedWriter {
    /// Starts writing `path`. `record_count` in `header` is ignored (it is
    /// counted).
    pub fn create(path: impl AsRef<Path>, header: ChunkedHeader) -> Result<ChunkedWriter> {
        if !header.chunk_size.is_power_of_two() || header.chunk_size < header.record_size {
            return Err(Error::Invalid(format!(
                "chunk size {} must be a power of two no smaller than the record size {}",
                header.chunk_size, header.record_size
            )));
        }
        let mut out = AtomicFile::create(path)?;
        out.write_all(&[0u8; HEADER_LEN as usize])?;
        Ok(ChunkedWriter {
            out,
            header,
            crcs: Vec::new(),
            hasher: crc32fast::Hasher::new(),
            file_hasher: crc32fast::Hasher::new(),
            in_chunk: 0,
            bytes: 0,
        })
    }

    /// Appends whole records.
    ///
    /// Each byte is CRC'd once: the chunk CRC, and the whole-file CRC is
    /// obtained by combining the chunk CRCs (`crc32fast::Hasher::combine`,
    /// O(log n) per chunk) rather than by a second pass over the data.
    pub fn write(&mut self, mut data: &[u8]) -> Result<()> {
        debug_assert_eq!(data.len() % self.header.record_size as usize, 0);
        self.out.write_all(data)?;
        self.bytes += data.len() as u64;
        let cs = u64::from(self.header.chunk_size);
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

    /// Closes the current chunk: records its CRC and folds it into the
    /// whole-file CRC.
    fn end_chunk(&mut self) {
        let h = std::mem::replace(&mut self.hasher, crc32fast::Hasher::new());
        self.file_hasher.combine(&h);
        self.crcs.push(h.finalize());
        self.in_chunk = 0;
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.bytes / u64::from(self.header.record_size)
    }

    /// Writes the chunk table and header and publishes the file; returns its
    /// length and the CRC-32 of the whole file (for the manifest).
    pub fn finish(mut self) -> Result<(u64, u32)> {
        if self.in_chunk > 0 {
            self.end_chunk();
        }
        let mut table: Vec<u8> = self.crcs.iter().flat_map(|c| c.to_le_bytes()).collect();
        let tcrc = crc32fast::hash(&table);
        table.extend_from_slice(&tcrc.to_le_bytes());
        self.out.write_all(&table)?;
        self.file_hasher.update(&table);
        self.header.record_count = self.records();
        let hb = self.header.encode();
        let mut whole = crc32fast::Hasher::new();
        whole.update(&hb);
        whole.combine(&self.file_hasher);
        let temp = self.out.temp_path().to_path_buf();
        self.out.seek(SeekFrom::Start(0)).ctx(&temp, "seek")?;
        self.out.write_all(&hb)?;
        self.out.seek(SeekFrom::End(0)).ctx(&temp, "seek")?;
        let len = HEADER_LEN + self.bytes + table.len() as u64;
        self.out.commit()?;
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
            kind: Kind::Rps,
            record_size: 32,
            generation: 1,
            first_record: 0,
            record_count: 0,
            chunk_size: 1024,
            aux: 0,
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
}
