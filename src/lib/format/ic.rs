//! REX-IC versions 1 and 2: the L1 incremental checkpoint file (docs/FORMAT.md
//! §2; version 2 adds the extension area with the run's chain id, §2.11).
//!
//! This is an interchange format: files come from our own writers, from
//! kernel modules and from jobs' own libraries, so the reader trusts nothing.
//! Reading is split in two, because the Page Coalescer must never touch page
//! data:
//!
//! * [`IcMeta::read`] reads the 64-byte header and the metadata block (page
//!   index, drop ranges, page CRCs) with positioned reads, checks everything
//!   that can be checked without page data, and counts the bytes it read.
//! * [`IcFile::open`] adds a read-only memory map of the whole file, so page
//!   data (page-aligned in the file for this reason) is served without
//!   copies; every page handed out by [`IcFile::page`] is CRC-checked first.
//!
//! [`IcWriter`] writes a file in one pass with bounded memory: it reserves
//! the header and metadata block, streams the page data while computing the
//! page CRCs, then seeks back and fills the header and metadata in, all under
//! a temporary name published by rename.

use std::fs::File;
use std::io::SeekFrom;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::durable::AtomicFile;
use crate::error::{Error, IoContext, Result};
pub use crate::format::region::{EXT_REGIONS, Region, RegionTable};

/// The 8-byte magic at offset 0.
pub const MAGIC: [u8; 8] = *b"REXIC01\n";
/// The format version of a file without an extension area (byte for byte
/// the original layout).
pub const VERSION: u32 = 1;
/// The format version of a file with an extension area (chain id).
pub const VERSION_EXT: u32 = 2;
/// Largest extension area a reader accepts, bytes.
pub const MAX_EXT_LEN: u32 = 64 * 1024;
/// Extension record tag: the 16-byte chain id.
pub const EXT_CHAIN_ID: u32 = 1;
/// Extension record tags with this bit set may be skipped by readers that
/// do not know them; others must be understood.
pub const EXT_OPTIONAL: u32 = 1 << 31;
/// Extension record tag (optional): the 16-byte instance id of the process
/// that wrote the checkpoint.
pub const EXT_INSTANCE: u32 = EXT_OPTIONAL | 3;
/// Extension record tag (optional): the instance id of the writer of the
/// checkpoint an incremental continues (seq - 1), 16 bytes, all zero when
/// that checkpoint names no instance (docs/FORMAT.md §2.11.2).
pub const EXT_CONTINUES: u32 = EXT_OPTIONAL | 4;
/// Length of the fixed header.
pub const HEADER_LEN: u64 = 64;
/// Flag bit 0: the file holds every live page.
pub const FLAG_FULL: u32 = 1;
/// Smallest page size the format allows.
pub const MIN_PAGE_SIZE: u32 = 512;
/// Largest page size the format allows.
pub const MAX_PAGE_SIZE: u32 = 1 << 20;
/// File name extension of IC files in an L1 directory.
pub const EXTENSION: &str = "rexic";

/// A range of pages that no longer exist: `first .. first + count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct DropRange {
    /// First page number of the range.
    pub first: u64,
    /// Number of pages in the range (at least 1).
    pub count: u64,
}

impl DropRange {
    /// One past the last page of the range. Callers rely on ranges having
    /// been validated (no overflow).
    pub fn end(&self) -> u64 {
        self.first + self.count
    }
    /// Whether `page` lies in the range.
    pub fn contains(&self, page: u64) -> bool {
        page >= self.first && page - self.first < self.count
    }
}

/// Defines a 16-byte random identity: not all zero, written in text as 32
/// lowercase hexadecimal digits, byte 0 first.
macro_rules! random_id {
    ($(#[$doc:meta])* $name:ident, $what:literal, $salt:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub [u8; 16]);

        impl $name {
            /// A fresh random id (from the kernel's random source).
            pub fn random() -> Result<$name> {
                use std::io::Read;
                let mut b = [0u8; 16];
                let path = Path::new("/dev/urandom");
                File::open(path)
                    .and_then(|mut f| f.read_exact(&mut b))
                    .ctx(path, "read")?;
                if b == [0; 16] {
                    b[0] = 1; // all-zero is reserved (never valid in a file)
                }
                Ok($name(b))
            }

            /// A deterministic id derived from `seed` (the workload
            /// generator's, so that generated runs are reproducible and
            /// distinct per seed).
            pub fn from_seed(seed: u64) -> $name {
                let h = xxhash_rust::xxh3::xxh3_128(
                    &[$salt.as_slice(), &seed.to_le_bytes()].concat(),
                );
                let mut b = h.to_le_bytes();
                if b == [0; 16] {
                    b[0] = 1;
                }
                $name(b)
            }

            /// Parses 32 hex digits.
            pub fn parse(s: &str) -> Option<$name> {
                if s.len() != 32 || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
                    return None;
                }
                let mut b = [0u8; 16];
                for (i, v) in b.iter_mut().enumerate() {
                    *v = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
                }
                (b != [0; 16]).then_some($name(b))
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                for b in self.0 {
                    write!(f, "{b:02x}")?;
                }
                Ok(())
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self)
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.serialize_str(&self.to_string())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                $name::parse(&s).ok_or_else(|| {
                    serde::de::Error::custom(format!(
                        concat!("{:?} is not ", $what, " (32 hex digits, not all zero)"),
                        s
                    ))
                })
            }
        }
    };
}

random_id!(
    /// The identity of one run of a job: 16 random bytes minted with its FULL
    /// checkpoint and carried by every incremental that extends it, and by the
    /// L2 generations made from them. Checkpoints of another run (a job
    /// restarted in a fresh L1 at seq 0, two jobs on one L2) are thereby never
    /// taken for this run's, whatever their seq numbers.
    ChainId,
    "a chain id",
    b"rex chain "
);

random_id!(
    /// The identity of one process that writes checkpoints (a librex job
    /// from `rex_init` on, one `rexctl capture`): 16 random bytes, minted
    /// afresh at every start, restarts included. Two copies of a job that
    /// continue one run from the same restored state (a fork) write the same
    /// seqs with different instances, which tells their checkpoints apart
    /// whatever their clocks say (docs/FORMAT.md §2.11.2).
    InstanceId,
    "an instance id",
    b"rex instance "
);

/// What an extension area carries (docs/FORMAT.md §2.11, §2.12).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IcExt {
    /// The run's chain id (record 1).
    pub chain: Option<ChainId>,
    /// The region table of a checkpoint written by librex (record
    /// `0x8000_0002`).
    pub regions: Option<RegionTable>,
    /// The instance id of the process that wrote it (record `0x8000_0003`).
    pub instance: Option<InstanceId>,
    /// Whose checkpoint it continues (record `0x8000_0004`): `Some(w)`,
    /// with `w` the instance id of the writer of seq - 1 (`None`: that
    /// checkpoint names no instance); `None` when the file does not say.
    pub continues: Option<Option<InstanceId>>,
}

impl IcExt {
    /// An extension area with only a chain id.
    pub fn chain(chain: Option<ChainId>) -> IcExt {
        IcExt {
            chain,
            ..IcExt::default()
        }
    }

    /// The encoded area: the chain id record, then the region table record,
    /// then the instance id record.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Vec::new();
        let mut record = |tag: u32, value: &[u8]| {
            e.extend_from_slice(&tag.to_le_bytes());
            e.extend_from_slice(&(value.len() as u32).to_le_bytes());
            e.extend_from_slice(value);
            e.resize(e.len().div_ceil(8) * 8, 0);
        };
        if let Some(c) = self.chain {
            record(EXT_CHAIN_ID, &c.0);
        }
        if let Some(t) = &self.regions {
            record(EXT_REGIONS, &t.encode());
        }
        if let Some(i) = self.instance {
            record(EXT_INSTANCE, &i.0);
        }
        if let Some(c) = self.continues {
            record(EXT_CONTINUES, &c.map_or([0; 16], |i| i.0));
        }
        e
    }
}

/// The extension area of a file with one record, the chain id.
pub fn encode_ext(chain: Option<ChainId>) -> Vec<u8> {
    IcExt::chain(chain).encode()
}

/// Parses and checks an extension area (docs/FORMAT.md §2.11) that starts
/// at file offset `base`, of a file of `page_size`-byte pages; returns the
/// chain id, region table and instance id it carries.
pub(crate) fn parse_ext(path: &Path, base: u64, page_size: u32, ext: &[u8]) -> Result<IcExt> {
    let mut chain = None;
    let mut instance = None;
    let mut continues = None;
    let mut regions = None;
    let mut seen_regions = false;
    let mut at = 0usize;
    while at < ext.len() {
        let abs = base + at as u64;
        let bad = |why: String| Error::corrupt(path, abs, "extension", why);
        if ext.len() - at < 8 {
            return Err(bad(format!(
                "{} bytes left, too few for a record header",
                ext.len() - at
            )));
        }
        let tag = le32(ext, at);
        let len = le32(ext, at + 4) as usize;
        let padded = len.div_ceil(8) * 8;
        if padded > ext.len() - at - 8 {
            return Err(bad(format!(
                "record tag {tag} of {len} bytes overruns the {}-byte extension area",
                ext.len()
            )));
        }
        let value = &ext[at + 8..at + 8 + len];
        if ext[at + 8 + len..at + 8 + padded].iter().any(|&b| b != 0) {
            return Err(bad(format!("record tag {tag}: non-zero padding")));
        }
        // A 16-byte id record (chain id, instance id): at most one, not
        // all zeros.
        let id16 = |what: &str, seen: bool| -> Result<[u8; 16]> {
            if seen {
                return Err(bad(format!("a second {what}")));
            }
            let id: [u8; 16] = value
                .try_into()
                .map_err(|_| bad(format!("{what} of {len} bytes, expected 16")))?;
            if id == [0; 16] {
                return Err(bad(format!("{what} is all zeros")));
            }
            Ok(id)
        };
        match tag {
            EXT_CHAIN_ID => chain = Some(ChainId(id16("chain id", chain.is_some())?)),
            EXT_INSTANCE => {
                instance = Some(InstanceId(id16("instance id", instance.is_some())?));
            }
            EXT_CONTINUES => {
                if continues.is_some() {
                    return Err(bad("a second continued-instance record".into()));
                }
                let id: [u8; 16] = value.try_into().map_err(|_| {
                    bad(format!(
                        "continued-instance record of {len} bytes, expected 16"
                    ))
                })?;
                continues = Some((id != [0; 16]).then_some(InstanceId(id)));
            }
            EXT_REGIONS => {
                if seen_regions {
                    return Err(bad("a second region table".into()));
                }
                seen_regions = true;
                regions = RegionTable::decode(path, abs + 8, page_size, value)?;
            }
            t if t & EXT_OPTIONAL != 0 => {}
            t => {
                return Err(bad(format!(
                    "unknown record tag {t} (not optional: this rexctl cannot read the file)"
                )));
            }
        }
        at += 8 + padded;
    }
    Ok(IcExt {
        chain,
        regions,
        instance,
        continues,
    })
}

/// The fixed 64-byte header, decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct IcHeader {
    /// Page size in bytes: a power of two, 512 ..= 1 MiB.
    pub page_size: u32,
    /// Position of the checkpoint in the job's L1 sequence.
    pub seq: u64,
    /// Whether the file holds every live page (FULL).
    pub full: bool,
    /// Number of pages carried.
    pub page_count: u64,
    /// Number of drop ranges.
    pub drop_count: u64,
    /// Capture time, Unix nanoseconds.
    pub time_ns: u64,
    /// Length of the extension area (version 2; 0 in version 1, where the
    /// field at offset 28 is reserved).
    pub ext_len: u32,
}

/// Sizes derived from a header: where each block starts and how long the
/// file must be. Computed with checked arithmetic, so absurd counts fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct IcLayout {
    /// Offset of the drop ranges.
    pub drops_off: u64,
    /// Offset of the page CRCs.
    pub crcs_off: u64,
    /// Offset of the extension area (right after the page CRCs).
    pub ext_off: u64,
    /// Offset of `meta_crc`.
    pub meta_crc_off: u64,
    /// Offset of the page data (a multiple of the page size).
    pub data_off: u64,
    /// Exact length of the file.
    pub file_len: u64,
}

impl IcHeader {
    /// Encodes the header, CRC included.
    pub fn encode(&self) -> [u8; HEADER_LEN as usize] {
        let mut b = [0u8; HEADER_LEN as usize];
        b[0..8].copy_from_slice(&MAGIC);
        let version = if self.ext_len > 0 {
            VERSION_EXT
        } else {
            VERSION
        };
        b[8..12].copy_from_slice(&version.to_le_bytes());
        b[12..16].copy_from_slice(&self.page_size.to_le_bytes());
        b[16..24].copy_from_slice(&self.seq.to_le_bytes());
        let flags = if self.full { FLAG_FULL } else { 0 };
        b[24..28].copy_from_slice(&flags.to_le_bytes());
        b[28..32].copy_from_slice(&self.ext_len.to_le_bytes());
        b[32..40].copy_from_slice(&self.page_count.to_le_bytes());
        b[40..48].copy_from_slice(&self.drop_count.to_le_bytes());
        b[48..56].copy_from_slice(&self.time_ns.to_le_bytes());
        let crc = crc32fast::hash(&b[0..56]);
        b[56..60].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and checks a header read from `path`.
    pub fn decode(path: &Path, b: &[u8; HEADER_LEN as usize]) -> Result<IcHeader> {
        let version = super::check_prefix_versions(
            path,
            b,
            &MAGIC,
            "a REX-IC file",
            &[VERSION, VERSION_EXT],
        )?;
        let flags = le32(b, 24);
        if flags & !FLAG_FULL != 0 {
            return Err(Error::corrupt(
                path,
                24,
                "flags",
                format!("unknown flag bits {:#x} set", flags & !FLAG_FULL),
            ));
        }
        let ext_len = if version == VERSION_EXT {
            le32(b, 28)
        } else {
            0
        };
        if ext_len % 8 != 0 || ext_len > MAX_EXT_LEN {
            return Err(Error::corrupt(
                path,
                28,
                "ext_len",
                format!("{ext_len} is not a multiple of 8 in 0..={MAX_EXT_LEN}"),
            ));
        }
        let reserved: &[(usize, &str)] = if version == VERSION {
            &[(28, "reserved"), (60, "reserved")]
        } else {
            &[(60, "reserved")]
        };
        for &(off, name) in reserved {
            let v = le32(b, off);
            if v != 0 {
                return Err(Error::corrupt(
                    path,
                    off as u64,
                    name,
                    format!("must be 0, found {v:#x}"),
                ));
            }
        }
        let page_size = le32(b, 12);
        if !page_size.is_power_of_two() || !(MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&page_size) {
            return Err(Error::corrupt(
                path,
                12,
                "page_size",
                format!("{page_size} is not a power of two in {MIN_PAGE_SIZE}..={MAX_PAGE_SIZE}"),
            ));
        }
        Ok(IcHeader {
            page_size,
            seq: le64(b, 16),
            full: flags & FLAG_FULL != 0,
            page_count: le64(b, 32),
            drop_count: le64(b, 40),
            time_ns: le64(b, 48),
            ext_len,
        })
    }

    /// The file layout this header implies, or `None` when the counts are so
    /// large that an offset would overflow 64 bits.
    pub fn layout(&self) -> Option<IcLayout> {
        let pc = self.page_count;
        let dc = self.drop_count;
        let drops_off = HEADER_LEN.checked_add(pc.checked_mul(8)?)?;
        let crcs_off = drops_off.checked_add(dc.checked_mul(16)?)?;
        let ext_off = crcs_off.checked_add(pc.checked_mul(4)?)?;
        let meta_crc_off = ext_off.checked_add(u64::from(self.ext_len))?;
        let meta_end = meta_crc_off.checked_add(4)?;
        let ps = u64::from(self.page_size);
        let data_off = meta_end.checked_next_multiple_of(ps)?;
        let file_len = data_off.checked_add(pc.checked_mul(ps)?)?;
        Some(IcLayout {
            drops_off,
            crcs_off,
            ext_off,
            meta_crc_off,
            data_off,
            file_len,
        })
    }
}

fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

fn le64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

/// Header and metadata of an IC file: everything but the page data.
#[derive(Clone, Debug)]
pub struct IcMeta {
    /// The file this was read from.
    pub path: PathBuf,
    /// The decoded header.
    pub header: IcHeader,
    /// Derived offsets and length.
    pub layout: IcLayout,
    /// Carried page numbers, strictly ascending.
    pub pages: Vec<u64>,
    /// Drop ranges, ascending, non-overlapping, disjoint from `pages`.
    pub drops: Vec<DropRange>,
    /// CRC-32 of each carried page, in index order.
    pub page_crcs: Vec<u32>,
    /// The run this checkpoint belongs to (version 2); `None` in a version 1
    /// file, which is matched by seq alone, as before chain ids.
    pub chain_id: Option<ChainId>,
    /// The region table of a checkpoint written by librex (§2.12); every
    /// carried page then lies in one of its regions.
    pub regions: Option<RegionTable>,
    /// The process that wrote it (§2.11.2); `None` when the file does not
    /// say (older producers, version 1).
    pub instance: Option<InstanceId>,
    /// Whose checkpoint it continues ([`IcExt::continues`]).
    pub continues: Option<Option<InstanceId>>,
    /// Bytes read from the file to obtain this (header + metadata block).
    pub bytes_read: u64,
}

impl IcMeta {
    /// Reads and validates the header and metadata of `path`, without
    /// touching the page data.
    pub fn read(path: impl AsRef<Path>) -> Result<IcMeta> {
        let path = path.as_ref();
        let file = super::open_regular(path)?;
        Self::read_from(path, &file)
    }

    /// As [`IcMeta::read`], from an already open file.
    pub fn read_from(path: &Path, file: &File) -> Result<IcMeta> {
        let (actual_len, hb) = super::read_header(path, file)?;
        let header = IcHeader::decode(path, &hb)?;
        let layout = header.layout().ok_or_else(|| {
            // Name the field that overflows on its own, page_count first.
            let by_pages = IcHeader {
                drop_count: 0,
                ..header
            }
            .layout()
            .is_none();
            Error::corrupt(
                path,
                if by_pages { 32 } else { 40 },
                if by_pages { "page_count" } else { "drop_count" },
                format!(
                    "page_count {} and drop_count {} overflow a 64-bit file size",
                    header.page_count, header.drop_count
                ),
            )
        })?;
        if actual_len < layout.file_len {
            return Err(Error::corrupt(
                path,
                actual_len,
                "file length",
                format!(
                    "truncated: file is {actual_len} bytes, header (page_count {}, drop_count {}, page_size {}) needs {}",
                    header.page_count, header.drop_count, header.page_size, layout.file_len
                ),
            ));
        }
        if actual_len > layout.file_len {
            return Err(Error::corrupt(
                path,
                layout.file_len,
                "file length",
                format!(
                    "{} trailing bytes after the last page (file is {actual_len} bytes, expected {})",
                    actual_len - layout.file_len,
                    layout.file_len
                ),
            ));
        }
        let meta = read_meta_block(path, file, layout.meta_crc_off)?;
        let meta_len = meta.len();
        let parsed = parse_meta(
            path,
            header.page_size,
            header.page_count,
            header.drop_count,
            header.ext_len,
            &meta,
        )?;
        Ok(IcMeta {
            path: path.to_path_buf(),
            header,
            layout,
            pages: parsed.0,
            drops: parsed.1,
            page_crcs: parsed.2,
            chain_id: parsed.3.chain,
            regions: parsed.3.regions,
            instance: parsed.3.instance,
            continues: parsed.3.continues,
            bytes_read: HEADER_LEN + meta_len as u64,
        })
    }

    /// Number of pages carried.
    pub fn page_count(&self) -> usize {
        self.pages.len()
    }

    /// Page size in bytes.
    pub fn page_size(&self) -> usize {
        self.header.page_size as usize
    }

    /// Sequence number.
    pub fn seq(&self) -> u64 {
        self.header.seq
    }

    /// Whether the file is FULL.
    pub fn is_full(&self) -> bool {
        self.header.full
    }

    /// Bytes of page data carried.
    pub fn data_bytes(&self) -> u64 {
        self.layout.file_len - self.layout.data_off
    }
}

/// Reads the metadata block (file bytes 64 .. meta_crc_off + 4) of a file
/// whose length the caller has checked against the header. The length
/// check alone does not bound memory: a sparse file of a few KiB can claim
/// 2^28 pages. So the block is read in bounded pieces, refusing holes, and
/// memory grows only with the bytes actually read; the caller checks
/// `meta_crc` before using any of it. Shared with the P-Table file, which
/// carries the same block.
pub(crate) fn read_meta_block(path: &Path, file: &File, meta_crc_off: u64) -> Result<Vec<u8>> {
    let mut meta = Vec::new();
    super::stream_region(
        path,
        file,
        HEADER_LEN,
        meta_crc_off + 4 - HEADER_LEN,
        "page index",
        |b| meta.extend_from_slice(b),
    )?;
    Ok(meta)
}

/// A parsed metadata block: page index, drop ranges, page CRCs, chain id.
pub(crate) type ParsedMeta = (Vec<u64>, Vec<DropRange>, Vec<u32>, IcExt);

/// Parses and checks a metadata block `meta` (file bytes 64 ..
/// meta_crc_off + 4) of `pc` pages and `dc` drop ranges: `meta_crc`, index
/// order, drop ranges. Shared with the P-Table file, which carries the same
/// block. The caller has checked that `meta` has the right length.
pub(crate) fn parse_meta(
    path: &Path,
    page_size: u32,
    pc: u64,
    dc: u64,
    ext_len: u32,
    meta: &[u8],
) -> Result<ParsedMeta> {
    let l = IcHeader {
        page_size: MIN_PAGE_SIZE,
        seq: 0,
        full: false,
        page_count: pc,
        drop_count: dc,
        time_ns: 0,
        ext_len,
    }
    .layout()
    .expect("the caller checked the block fits in the file");
    let h = IcHeader {
        page_count: pc,
        drop_count: dc,
        ..Default::default()
    };
    let rel = |abs: u64| (abs - HEADER_LEN) as usize;
    let stored = le32(meta, rel(l.meta_crc_off));
    let actual = crc32fast::hash(&meta[..rel(l.meta_crc_off)]);
    if stored != actual {
        return Err(Error::corrupt(
            path,
            l.meta_crc_off,
            "meta_crc",
            format!(
                "stored {stored:#010x}, computed {actual:#010x} over the page index, drop ranges, page CRCs and extension area"
            ),
        ));
    }
    let pc = h.page_count as usize;
    let mut pages = Vec::with_capacity(pc);
    for i in 0..pc {
        let p = le64(meta, i * 8);
        if let Some(&prev) = pages.last()
            && p <= prev
        {
            return Err(Error::corrupt(
                path,
                HEADER_LEN + 8 * i as u64,
                "page index",
                format!(
                    "entry {i} is page {p}, not above the previous entry {prev}: the index must be strictly ascending"
                ),
            ));
        }
        pages.push(p);
    }
    let drops = parse_drops(
        path,
        &meta[rel(l.drops_off)..rel(l.crcs_off)],
        l.drops_off,
        &pages,
    )?;
    let mut crcs = Vec::with_capacity(pc);
    for i in 0..pc {
        crcs.push(le32(meta, rel(l.crcs_off) + i * 4));
    }
    let ext = parse_ext(
        path,
        l.ext_off,
        page_size,
        &meta[rel(l.ext_off)..rel(l.meta_crc_off)],
    )?;
    if let Some(t) = &ext.regions
        && let Err(p) = t.check_pages(&pages)
    {
        let i = pages.binary_search(&p).expect("a carried page");
        let (id, idx) = crate::format::region::split_page(p);
        return Err(Error::corrupt(
            path,
            HEADER_LEN + 8 * i as u64,
            "page index",
            format!(
                "entry {i} is page {p:#x} (region {id}, index {idx}), outside every region of the file's region table"
            ),
        ));
    }
    Ok((pages, drops, crcs, ext))
}

/// Parses and checks `bytes`, the drop ranges of a metadata block (16
/// bytes each) that start at file offset `abs_off`, against the block's
/// page index `pages` (§2.8 steps 11a to 11d). Shared by REX-IC and both
/// P-Table delta versions.
pub(crate) fn parse_drops(
    path: &Path,
    bytes: &[u8],
    abs_off: u64,
    pages: &[u64],
) -> Result<Vec<DropRange>> {
    let dc = bytes.len() / 16;
    let mut drops: Vec<DropRange> = Vec::with_capacity(dc);
    let mut cursor = 0usize; // into pages, for the disjointness check
    for i in 0..dc {
        let off = i * 16;
        let abs = abs_off + 16 * i as u64;
        let d = DropRange {
            first: le64(bytes, off),
            count: le64(bytes, off + 8),
        };
        if d.count == 0 {
            return Err(Error::corrupt(
                path,
                abs + 8,
                "drop ranges",
                format!("range {i} (first page {}) has count 0", d.first),
            ));
        }
        if d.first.checked_add(d.count).is_none() {
            return Err(Error::corrupt(
                path,
                abs,
                "drop ranges",
                format!(
                    "range {i} (first {}, count {}): first + count does not fit in 64 bits",
                    d.first, d.count
                ),
            ));
        }
        if let Some(prev) = drops.last()
            && d.first < prev.end()
        {
            return Err(Error::corrupt(
                path,
                abs,
                "drop ranges",
                format!(
                    "range {i} starts at page {} inside or before the previous range {}..{}: ranges must be ascending and non-overlapping",
                    d.first,
                    prev.first,
                    prev.end()
                ),
            ));
        }
        while cursor < pages.len() && pages[cursor] < d.first {
            cursor += 1;
        }
        if cursor < pages.len() && pages[cursor] < d.end() {
            return Err(Error::corrupt(
                path,
                abs,
                "drop ranges",
                format!(
                    "range {i} ({}..{}) contains page {}, which the file also carries",
                    d.first,
                    d.end(),
                    pages[cursor]
                ),
            ));
        }
        drops.push(d);
    }
    Ok(drops)
}

/// An IC file opened for reading page data through a memory map.
pub struct IcFile {
    meta: IcMeta,
    /// `map` listed for the CLI's SIGBUS report; dropped (unlisted) before
    /// `map` is unmapped.
    _mapped: crate::mapped::Registered,
    map: memmap2::Mmap,
}

impl std::fmt::Debug for IcFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IcFile").field("meta", &self.meta).finish()
    }
}

impl IcFile {
    /// Opens `path`, validates its header and metadata and maps it.
    pub fn open(path: impl AsRef<Path>) -> Result<IcFile> {
        let path = path.as_ref();
        let file = super::open_regular(path)?;
        let meta = IcMeta::read_from(path, &file)?;
        // SAFETY: mapping a file is only sound while nobody truncates or
        // rewrites it during the mapping's life. IC files are immutable once
        // published: every writer (rexctl's and the documented contract for
        // producers in docs/FORMAT.md) writes under a temporary name and
        // renames, and rexctl never modifies a published file in place;
        // replaced files are unlinked, which keeps the mapped inode alive. The
        // mapping is read-only, and its length is checked against the
        // validated layout below before any byte of it is used.
        let map = unsafe { memmap2::MmapOptions::new().map(&file) }.ctx(path, "mmap")?;
        if map.len() as u64 != meta.layout.file_len {
            return Err(Error::corrupt(
                path,
                map.len() as u64,
                "file length",
                format!(
                    "file changed while being opened: mapped {} bytes, expected {}",
                    map.len(),
                    meta.layout.file_len
                ),
            ));
        }
        Ok(IcFile {
            meta,
            _mapped: crate::mapped::register(path, &map),
            map,
        })
    }

    /// The file's header and metadata.
    pub fn meta(&self) -> &IcMeta {
        &self.meta
    }

    /// Consumes the file, returning its metadata.
    pub fn into_meta(self) -> IcMeta {
        self.meta
    }

    /// The path the file was opened from.
    pub fn path(&self) -> &Path {
        &self.meta.path
    }

    /// Byte offset of the page at index position `pp`.
    pub fn page_offset(&self, pp: usize) -> u64 {
        self.meta.layout.data_off + pp as u64 * u64::from(self.meta.header.page_size)
    }

    /// The bytes of the page at index position `pp`, CRC-checked.
    pub fn page(&self, pp: usize) -> Result<&[u8]> {
        let data = self.page_unverified(pp)?;
        let actual = crc32fast::hash(data);
        let stored = self.meta.page_crcs[pp];
        if actual != stored {
            return Err(Error::corrupt(
                &self.meta.path,
                self.page_offset(pp),
                "page data",
                format!(
                    "page {} (index {pp}) has CRC {actual:#010x}, the page CRCs say {stored:#010x}",
                    self.meta.pages[pp]
                ),
            ));
        }
        Ok(data)
    }

    /// The bytes of the page at index position `pp`, without the CRC check.
    /// For tools that show corrupt data; restores use [`IcFile::page`].
    pub fn page_unverified(&self, pp: usize) -> Result<&[u8]> {
        if pp >= self.meta.pages.len() {
            return Err(Error::Invalid(format!(
                "{}: page position {pp} out of range (file carries {} pages)",
                self.meta.path.display(),
                self.meta.pages.len()
            )));
        }
        let start = self.page_offset(pp) as usize;
        let end = start + self.meta.header.page_size as usize;
        Ok(&self.map[start..end])
    }

    /// The whole file as mapped (headers, metadata, pages), for copying it
    /// elsewhere byte for byte; its pages are checked by [`IcFile::page`].
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// `len` raw bytes at file offset `off` within the page data, if in
    /// bounds. For re-reading bytes already CRC-checked through
    /// [`IcFile::page`] (the deduplication unit's pattern resolver).
    pub fn raw(&self, off: u64, len: usize) -> Option<&[u8]> {
        let start = usize::try_from(off).ok()?;
        let end = start.checked_add(len)?;
        if (off < self.meta.layout.data_off) || end > self.map.len() {
            return None;
        }
        Some(&self.map[start..end])
    }

    /// Takes the mapped pages of bytes `from .. to` out of the process,
    /// leaving them in the page cache (`MADV_DONTNEED`, widened to 64 KiB
    /// boundaries): a reader that has moved past them keeps its resident
    /// set to what it still reads. A later read maps them again, with the
    /// same contents.
    pub fn release(&self, from: u64, to: u64) {
        super::release_mapped(&self.map, from, to);
    }

    /// Checks the padding and every page's CRC.
    pub fn verify(&self) -> Result<()> {
        self.verify_padding()?;
        for pp in 0..self.meta.pages.len() {
            self.page(pp)?;
        }
        Ok(())
    }

    /// Checks that the padding between metadata and data is zero.
    pub fn verify_padding(&self) -> Result<()> {
        let start = (self.meta.layout.meta_crc_off + 4) as usize;
        let end = self.meta.layout.data_off as usize;
        if let Some(i) = self.map[start..end].iter().position(|&b| b != 0) {
            return Err(Error::corrupt(
                &self.meta.path,
                (start + i) as u64,
                "padding",
                format!("padding must be zero, found {:#04x}", self.map[start + i]),
            ));
        }
        Ok(())
    }
}

/// Writes an IC file in one pass: pages are pushed in index order, with
/// bounded memory whatever the file size.
pub struct IcWriter {
    out: AtomicFile,
    header: IcHeader,
    ext: Vec<u8>,
    layout: IcLayout,
    pages: Vec<u64>,
    drops: Vec<DropRange>,
    crcs: Vec<u32>,
}

impl IcWriter {
    /// Makes [`finish`](Self::finish) fail, leaving what is there, if a
    /// file of the target name exists by then
    /// ([`AtomicFile::keep_existing`]).
    pub fn keep_existing(&mut self) {
        self.out.keep_existing();
    }

    /// Starts writing `path` for the given header fields, page index and
    /// drop ranges. The index and drops are checked against the format's
    /// rules first, so rexctl never writes a file it would refuse to read.
    pub fn create(
        path: impl AsRef<Path>,
        page_size: u32,
        seq: u64,
        full: bool,
        time_ns: u64,
        pages: Vec<u64>,
        drops: Vec<DropRange>,
    ) -> Result<IcWriter> {
        Self::create_in_chain(path, page_size, seq, full, time_ns, None, pages, drops)
    }

    /// As [`IcWriter::create_in_chain`], with the whole extension area
    /// (chain id and region table, §2.12).
    #[allow(clippy::too_many_arguments)]
    pub fn create_ext(
        path: impl AsRef<Path>,
        page_size: u32,
        seq: u64,
        full: bool,
        time_ns: u64,
        ext: &IcExt,
        pages: Vec<u64>,
        drops: Vec<DropRange>,
    ) -> Result<IcWriter> {
        let path = path.as_ref();
        if let Some(t) = &ext.regions {
            t.check(page_size).map_err(|e| {
                Error::Invalid(format!("{}: refusing to write: {e}", path.display()))
            })?;
            if let Err(p) = t.check_pages(&pages) {
                return Err(Error::Invalid(format!(
                    "{}: refusing to write: page {p:#x} lies outside every region",
                    path.display()
                )));
            }
        }
        Self::create_raw(
            path,
            page_size,
            seq,
            full,
            time_ns,
            ext.encode(),
            pages,
            drops,
        )
    }

    /// As [`IcWriter::create`], for a checkpoint of run `chain`: a version 2
    /// file whose extension area carries the chain id (version 1 without).
    #[allow(clippy::too_many_arguments)]
    pub fn create_in_chain(
        path: impl AsRef<Path>,
        page_size: u32,
        seq: u64,
        full: bool,
        time_ns: u64,
        chain: Option<ChainId>,
        pages: Vec<u64>,
        drops: Vec<DropRange>,
    ) -> Result<IcWriter> {
        let ext = encode_ext(chain);
        Self::create_raw(path, page_size, seq, full, time_ns, ext, pages, drops)
    }

    #[allow(clippy::too_many_arguments)]
    fn create_raw(
        path: impl AsRef<Path>,
        page_size: u32,
        seq: u64,
        full: bool,
        time_ns: u64,
        ext: Vec<u8>,
        pages: Vec<u64>,
        drops: Vec<DropRange>,
    ) -> Result<IcWriter> {
        let path = path.as_ref();
        if ext.len() > MAX_EXT_LEN as usize {
            return Err(Error::Invalid(format!(
                "{}: refusing to write: an extension area of {} bytes (at most {MAX_EXT_LEN}; too many regions)",
                path.display(),
                ext.len()
            )));
        }
        let header = IcHeader {
            page_size,
            seq,
            full,
            page_count: pages.len() as u64,
            drop_count: drops.len() as u64,
            time_ns,
            ext_len: ext.len() as u32,
        };
        if !page_size.is_power_of_two() || !(MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&page_size) {
            return Err(Error::Invalid(format!(
                "page size {page_size} is not a power of two in {MIN_PAGE_SIZE}..={MAX_PAGE_SIZE}"
            )));
        }
        check_index(&pages, &drops)
            .map_err(|e| Error::Invalid(format!("{}: refusing to write: {e}", path.display())))?;
        let layout = header
            .layout()
            .ok_or_else(|| Error::Invalid("page count too large".into()))?;
        let mut out = AtomicFile::create(path)?;
        // Reserve header + metadata + padding; filled in by `finish`.
        let zeros = vec![0u8; 64 * 1024];
        let mut left = layout.data_off;
        while left > 0 {
            let n = left.min(zeros.len() as u64) as usize;
            out.write_all(&zeros[..n])?;
            left -= n as u64;
        }
        Ok(IcWriter {
            out,
            header,
            ext,
            layout,
            crcs: Vec::with_capacity(pages.len()),
            pages,
            drops,
        })
    }

    /// Appends the next page's bytes (must be exactly one page).
    pub fn push_page(&mut self, data: &[u8]) -> Result<()> {
        if data.len() != self.header.page_size as usize {
            return Err(Error::Invalid(format!(
                "page of {} bytes pushed into a file of {}-byte pages",
                data.len(),
                self.header.page_size
            )));
        }
        if self.crcs.len() >= self.pages.len() {
            return Err(Error::Invalid(format!(
                "more pages pushed than the index holds ({})",
                self.pages.len()
            )));
        }
        self.crcs.push(crc32fast::hash(data));
        self.out.write_all(data)
    }

    /// Appends the next page whose CRC-32 the caller has just computed or
    /// checked (`crc == crc32fast::hash(data)`), saving a second pass.
    pub fn push_page_with_crc(&mut self, data: &[u8], crc: u32) -> Result<()> {
        debug_assert_eq!(crc, crc32fast::hash(data));
        if data.len() != self.header.page_size as usize || self.crcs.len() >= self.pages.len() {
            return self.push_page(data);
        }
        self.crcs.push(crc);
        self.out.write_all(data)
    }

    /// Writes every page at once on `threads` threads: page `k` of the
    /// index is made by `fill(k, buf)`, which returns its CRC-32 (see
    /// [`crate::durable::write_pages_parallel`]: at most once per page). No
    /// page may have been pushed before.
    pub fn write_pages_parallel(
        &mut self,
        threads: usize,
        fill: &(dyn Fn(usize, &mut [u8]) -> Result<u32> + Sync),
    ) -> Result<()> {
        if !self.crcs.is_empty() {
            return Err(Error::Invalid(
                "pages were pushed before the parallel write".into(),
            ));
        }
        let (ps, data_off) = (self.header.page_size as usize, self.layout.data_off);
        // Errors name the output asked for, not its temporary.
        let target = self.out.target().to_path_buf();
        let file = self.out.file()?;
        self.crcs = crate::durable::write_pages_parallel(
            file,
            &target,
            self.pages.len(),
            ps,
            threads,
            &|k| data_off + (k * ps) as u64,
            fill,
        )?;
        Ok(())
    }

    /// Writes header and metadata, then publishes the file durably.
    pub fn finish(mut self) -> Result<()> {
        if self.crcs.len() != self.pages.len() {
            return Err(Error::Invalid(format!(
                "{} pages pushed, the index holds {}",
                self.crcs.len(),
                self.pages.len()
            )));
        }
        let meta = encode_meta_ext(&self.pages, &self.drops, &self.crcs, &self.ext);
        debug_assert_eq!(HEADER_LEN + meta.len() as u64, self.layout.meta_crc_off + 4);
        self.out.seek_after_writing(SeekFrom::Start(0))?;
        self.out.write_all(&self.header.encode())?;
        self.out.write_all(&meta)?;
        self.out.commit()
    }
}

/// Encodes the metadata block: index, drops, page CRCs and `meta_crc`.
pub fn encode_meta(pages: &[u64], drops: &[DropRange], crcs: &[u32]) -> Vec<u8> {
    encode_meta_ext(pages, drops, crcs, &[])
}

/// Encodes the metadata block with an extension area `ext` (version 2).
pub fn encode_meta_ext(pages: &[u64], drops: &[DropRange], crcs: &[u32], ext: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(pages.len() * 12 + drops.len() * 16 + 4);
    for p in pages {
        m.extend_from_slice(&p.to_le_bytes());
    }
    for d in drops {
        m.extend_from_slice(&d.first.to_le_bytes());
        m.extend_from_slice(&d.count.to_le_bytes());
    }
    for c in crcs {
        m.extend_from_slice(&c.to_le_bytes());
    }
    m.extend_from_slice(ext);
    let crc = crc32fast::hash(&m);
    m.extend_from_slice(&crc.to_le_bytes());
    m
}

/// Checks an index and drop list against the format's rules.
pub fn check_index(pages: &[u64], drops: &[DropRange]) -> std::result::Result<(), String> {
    for w in pages.windows(2) {
        if w[1] <= w[0] {
            return Err(format!(
                "page index not strictly ascending at page {}",
                w[1]
            ));
        }
    }
    let mut cursor = 0;
    let mut prev_end: Option<u64> = None;
    for d in drops {
        if d.count == 0 {
            return Err(format!("drop range at page {} has count 0", d.first));
        }
        let end = d
            .first
            .checked_add(d.count)
            .ok_or_else(|| format!("drop range at page {} overflows", d.first))?;
        if let Some(pe) = prev_end
            && d.first < pe
        {
            return Err(format!(
                "drop range at page {} overlaps the previous one",
                d.first
            ));
        }
        while cursor < pages.len() && pages[cursor] < d.first {
            cursor += 1;
        }
        if cursor < pages.len() && pages[cursor] < end {
            return Err(format!(
                "drop range {}..{end} contains carried page {}",
                d.first, pages[cursor]
            ));
        }
        prev_end = Some(end);
    }
    Ok(())
}

/// Writes a whole IC file from in-memory pages (`pages[i].1` is one page).
pub fn write_ic(
    path: impl AsRef<Path>,
    page_size: u32,
    seq: u64,
    full: bool,
    time_ns: u64,
    pages: &[(u64, &[u8])],
    drops: &[DropRange],
) -> Result<()> {
    let index = pages.iter().map(|p| p.0).collect();
    let mut w = IcWriter::create(path, page_size, seq, full, time_ns, index, drops.to_vec())?;
    for (_, data) in pages {
        w.push_page(data)?;
    }
    w.finish()
}

/// The current time as Unix nanoseconds.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
