//! The P-Table delta of one L2 generation (docs/FORMAT.md §3.3).
//!
//! The paper's P-Table maps every live page to `PF*`, the index of its first
//! pointer in the Pointer File. rexctl ships it as a *delta* per generation,
//! so that L2 traffic per batch scales with the dirty pages, not with the
//! footprint: the pages this generation wrote (ascending; page *i*'s `alpha`
//! pointers are records `i*alpha ..` of the same generation's PF, so `PF*`
//! is implied by the position and costs no byte), the pages it dropped, and
//! a FULL flag when it starts a chain. The live P-Table of generation *g* is
//! the merge of the deltas from the chain's base to *g*, newest first, which
//! is the same layered merge the Page Coalescer does over IC files.
//!
//! Each delta also carries the CRC-32 of every page's original contents, so a
//! restore checks each rebuilt page end to end: a wrong pointer or pattern
//! cannot yield a wrong image silently. The metadata block is byte for byte
//! the REX-IC one (index, drop ranges, page CRCs, `meta_crc`).

use std::path::{Path, PathBuf};

use crate::durable;
use crate::error::{Error, Result};
use crate::format::ic::{DropRange, check_index, encode_meta, parse_meta};

/// The 8-byte magic.
pub const MAGIC: [u8; 8] = *b"REXPT01\n";
/// Version of the layout.
pub const VERSION: u32 = 1;
const HEADER_LEN: u64 = 64;
/// Flag bit 0: the generation starts a chain (the state before it is gone).
pub const FLAG_FULL: u32 = 1;

/// One generation's P-Table delta.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PTableDelta {
    /// Where it was read from (empty when built in memory).
    pub path: PathBuf,
    /// The generation.
    pub generation: u64,
    /// Page size.
    pub page_size: u32,
    /// Pattern size.
    pub pattern_size: u32,
    /// The generation starts a chain.
    pub full: bool,
    /// Pages written by the generation, ascending.
    pub pages: Vec<u64>,
    /// Pages dropped by the generation, disjoint from `pages`.
    pub drops: Vec<DropRange>,
    /// CRC-32 of each written page's contents.
    pub page_crcs: Vec<u32>,
}

impl PTableDelta {
    /// Pointers per page.
    pub fn alpha(&self) -> u64 {
        u64::from(self.page_size / self.pattern_size)
    }

    /// Encodes the file.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_LEN as usize];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.page_size.to_le_bytes());
        b[16..24].copy_from_slice(&self.generation.to_le_bytes());
        let flags = if self.full { FLAG_FULL } else { 0 };
        b[24..28].copy_from_slice(&flags.to_le_bytes());
        b[28..32].copy_from_slice(&self.pattern_size.to_le_bytes());
        b[32..40].copy_from_slice(&(self.pages.len() as u64).to_le_bytes());
        b[40..48].copy_from_slice(&(self.drops.len() as u64).to_le_bytes());
        let crc = crc32fast::hash(&b[0..56]);
        b[56..60].copy_from_slice(&crc.to_le_bytes());
        b.extend_from_slice(&encode_meta(&self.pages, &self.drops, &self.page_crcs));
        b
    }

    /// Writes the file durably at `path`; returns its length, CRC-32 and
    /// XXH3-64 ([`digest`](crate::format::manifest::digest)).
    pub fn write(&self, path: &Path) -> Result<(u64, u32, u64)> {
        check_index(&self.pages, &self.drops)
            .map_err(|e| Error::Invalid(format!("{}: refusing to write: {e}", path.display())))?;
        let b = self.encode();
        durable::write_file(path, &b)?;
        Ok(crate::format::manifest::digest(&b))
    }

    /// Reads and checks `path`.
    pub fn read(path: impl AsRef<Path>) -> Result<PTableDelta> {
        let path = path.as_ref();
        let file = super::open_regular(path)?;
        let (len, h) = super::read_header(path, &file)?;
        let le32 = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().expect("4"));
        let le64 = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().expect("8"));
        super::check_prefix(path, &h, &MAGIC, "a P-Table delta", VERSION)?;
        let flags = le32(24);
        if flags & !FLAG_FULL != 0 {
            return Err(Error::corrupt(
                path,
                24,
                "flags",
                format!("unknown flag bits {:#x} set", flags & !FLAG_FULL),
            ));
        }
        for off in [48usize, 52, 60] {
            if le32(off) != 0 {
                return Err(Error::corrupt(path, off as u64, "reserved", "must be 0"));
            }
        }
        let (page_size, pattern_size) = (le32(12), le32(28));
        check_sizes(page_size, pattern_size)
            .map_err(|(off, field, why)| Error::corrupt(path, off, field, why))?;
        let (pc, dc) = (le64(32), le64(40));
        let meta_len = pc
            .checked_mul(12)
            .and_then(|x| dc.checked_mul(16).and_then(|y| x.checked_add(y)))
            .and_then(|x| x.checked_add(4));
        let Some(meta_len) = meta_len.filter(|&m| HEADER_LEN.checked_add(m) == Some(len)) else {
            return Err(Error::corrupt(
                path,
                32,
                "page_count",
                format!("page_count {pc} and drop_count {dc} do not match the file length {len}"),
            ));
        };
        let meta = super::ic::read_meta_block(path, &file, HEADER_LEN + meta_len - 4)?;
        let (pages, drops, page_crcs, _) =
            parse_meta(path, crate::format::ic::MIN_PAGE_SIZE, pc, dc, 0, &meta)?;
        Ok(PTableDelta {
            path: path.to_path_buf(),
            generation: le64(16),
            page_size,
            pattern_size,
            full: flags & FLAG_FULL != 0,
            pages,
            drops,
            page_crcs,
        })
    }
}

/// Checks a page size and pattern size pair: both powers of two, the page
/// 512 B ..= 1 MiB, the pattern 16 B ..= one page. Returns (offset, field,
/// reason) for error reporting.
pub fn check_sizes(
    page_size: u32,
    pattern_size: u32,
) -> std::result::Result<(), (u64, &'static str, String)> {
    if !page_size.is_power_of_two() || !(512..=1 << 20).contains(&page_size) {
        return Err((
            12,
            "page_size",
            format!("{page_size} is not a power of two in 512..=1048576"),
        ));
    }
    if !pattern_size.is_power_of_two() || !(16..=page_size).contains(&pattern_size) {
        return Err((
            28,
            "pattern_size",
            format!(
                "{pattern_size} is not a power of two between 16 and the page size {page_size}"
            ),
        ));
    }
    Ok(())
}
