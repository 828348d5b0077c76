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
//! cannot yield a wrong image silently.
//!
//! Version 1's metadata block is byte for byte the REX-IC one (index, drop
//! ranges, page CRCs, `meta_crc`): 12 bytes per page. Version 2 codes the
//! page index as runs of consecutive pages (two LEB128 numbers a run), so a
//! page costs its CRC and a share of its run's bytes: about 4 bytes, not
//! 12. The CRCs stay raw because they are what makes a wrong page visible,
//! and they do not compress. Every page still costs 4 bytes of the file, so
//! a reader's allocations stay bounded by the file's length, as in the
//! first version.
//!
//! The index never holds a zero byte but the first page number's (starts
//! and lengths are at least 1 and shortest), so it never holds a block of
//! zeros that a sparse copy could turn into a hole, which readers refuse in
//! metadata (FORMAT.md §2.7).

use std::path::{Path, PathBuf};

use crate::durable;
use crate::error::{Error, Result};
use crate::format::ic::{DropRange, check_index, encode_meta, parse_drops, parse_meta};
use crate::format::pointer_coding::{push_leb, read_leb};

/// The 8-byte magic.
pub const MAGIC: [u8; 8] = *b"REXPT01\n";
/// Version of the layout written by default.
pub const VERSION: u32 = 2;
/// Versions this build reads and can write.
pub const VERSIONS: [u32; 2] = [1, 2];
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

    /// Encodes the file in the latest version.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_version(VERSION)
    }

    /// Encodes the file in `version` (one of [`VERSIONS`]).
    pub fn encode_version(&self, version: u32) -> Vec<u8> {
        assert!(VERSIONS.contains(&version), "P-Table version {version}");
        let mut b = vec![0u8; HEADER_LEN as usize];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&version.to_le_bytes());
        b[12..16].copy_from_slice(&self.page_size.to_le_bytes());
        b[16..24].copy_from_slice(&self.generation.to_le_bytes());
        let flags = if self.full { FLAG_FULL } else { 0 };
        b[24..28].copy_from_slice(&flags.to_le_bytes());
        b[28..32].copy_from_slice(&self.pattern_size.to_le_bytes());
        b[32..40].copy_from_slice(&(self.pages.len() as u64).to_le_bytes());
        b[40..48].copy_from_slice(&(self.drops.len() as u64).to_le_bytes());
        if version == 1 {
            let crc = crc32fast::hash(&b[0..56]);
            b[56..60].copy_from_slice(&crc.to_le_bytes());
            b.extend_from_slice(&encode_meta(&self.pages, &self.drops, &self.page_crcs));
            return b;
        }
        let index = code_index(&self.pages);
        b[48..56].copy_from_slice(&(index.len() as u64).to_le_bytes());
        let crc = crc32fast::hash(&b[0..56]);
        b[56..60].copy_from_slice(&crc.to_le_bytes());
        let meta_start = b.len();
        b.extend_from_slice(&index);
        for d in &self.drops {
            b.extend_from_slice(&d.first.to_le_bytes());
            b.extend_from_slice(&d.count.to_le_bytes());
        }
        for c in &self.page_crcs {
            b.extend_from_slice(&c.to_le_bytes());
        }
        let crc = crc32fast::hash(&b[meta_start..]);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Writes the file durably at `path` in `version` (one of
    /// [`VERSIONS`]); returns its length, CRC-32 and XXH3-64
    /// ([`digest`](crate::format::manifest::digest)).
    pub fn write(&self, path: &Path, version: u32) -> Result<(u64, u32, u64)> {
        check_index(&self.pages, &self.drops)
            .map_err(|e| Error::Invalid(format!("{}: refusing to write: {e}", path.display())))?;
        let b = self.encode_version(version);
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
        let version = super::check_prefix_versions(path, &h, &MAGIC, "a P-Table delta", &VERSIONS)?;
        let flags = le32(24);
        if flags & !FLAG_FULL != 0 {
            return Err(Error::corrupt(
                path,
                24,
                "flags",
                format!("unknown flag bits {:#x} set", flags & !FLAG_FULL),
            ));
        }
        let reserved: &[usize] = if version == 1 { &[48, 52, 60] } else { &[60] };
        for &off in reserved {
            if le32(off) != 0 {
                return Err(Error::corrupt(path, off as u64, "reserved", "must be 0"));
            }
        }
        let (page_size, pattern_size) = (le32(12), le32(28));
        check_sizes(page_size, pattern_size)
            .map_err(|(off, field, why)| Error::corrupt(path, off, field, why))?;
        let (pc, dc) = (le64(32), le64(40));
        // Version 1: 8 bytes per page number; version 2: the coded index,
        // 2 to 20 bytes per run of at least one page.
        let index_len = if version == 1 {
            pc.checked_mul(8)
        } else {
            Some(le64(48))
        };
        if let Some(il) = index_len.filter(|_| version == 2)
            && ((pc > 0 && il < 2) || pc.checked_mul(20).is_some_and(|m| il > m))
        {
            return Err(Error::corrupt(
                path,
                48,
                "index_len",
                format!(
                    "{il} bytes cannot code the runs of {pc} pages (2 to 20 bytes a run of at least one page)"
                ),
            ));
        }
        let meta_len = index_len
            .and_then(|i| pc.checked_mul(4).and_then(|c| c.checked_add(i)))
            .and_then(|x| dc.checked_mul(16).and_then(|y| x.checked_add(y)))
            .and_then(|x| x.checked_add(4));
        let Some(meta_len) = meta_len.filter(|&m| HEADER_LEN.checked_add(m) == Some(len)) else {
            let what = match index_len {
                Some(il) if version == 2 => format!(" and index_len {il}"),
                _ => String::new(),
            };
            let want = meta_len
                .and_then(|m| HEADER_LEN.checked_add(m))
                .map_or_else(|| "more than 2^64".to_string(), |w| w.to_string());
            return Err(Error::corrupt(
                path,
                32,
                "page_count",
                format!(
                    "page_count {pc}, drop_count {dc}{what} give a file of {want} bytes; it is {len}"
                ),
            ));
        };
        let meta = super::ic::read_meta_block(path, &file, HEADER_LEN + meta_len - 4)?;
        let (pages, drops, page_crcs) = if version == 1 {
            let (pages, drops, page_crcs, _) =
                parse_meta(path, crate::format::ic::MIN_PAGE_SIZE, pc, dc, 0, &meta)?;
            (pages, drops, page_crcs)
        } else {
            // index_len < the file's length, whose metadata is in memory.
            let index_len = index_len.expect("checked with the length") as usize;
            parse_meta_v2(path, pc as usize, index_len, &meta)?
        };
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

/// Codes a strictly ascending page index (version 2) as its maximal runs
/// of consecutive pages, each a pair of LEB128 numbers: where the run
/// starts (the first run: its first page; the others: its distance from
/// the end of the run before it, at least 1) and how many pages it holds
/// (at least 1).
fn code_index(pages: &[u64]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut end = 0u64; // one past the previous run's last page
    let mut i = 0;
    while i < pages.len() {
        let first = pages[i];
        let mut n = 1;
        while i + n < pages.len() && pages[i + n] == first + n as u64 {
            n += 1;
        }
        push_leb(&mut out, if i == 0 { first } else { first - end });
        push_leb(&mut out, n as u64);
        end = first.wrapping_add(n as u64);
        i += n;
    }
    out
}

/// Reads one LEB128 number of the coded index at `*at`; the error says
/// why, for a message that names the number's offset.
fn index_number(index: &[u8], at: &mut usize) -> std::result::Result<u64, &'static str> {
    let start = *at;
    read_leb(index, at).map_err(|_| {
        // Too long or too large if its first 10 bytes are all there;
        // else the index ends inside it.
        let rest = &index[start.min(index.len())..];
        if rest.len() < 10 && rest.iter().all(|b| b & 0x80 != 0) {
            "runs past the end of the coded index"
        } else {
            "does not fit in 64 bits (more than 10 bytes, or a 10th byte above 1)"
        }
    })
}

/// Parses a version 2 metadata block `meta` (file bytes 64 .. file end):
/// checks `meta_crc`, decodes the runs of `pc` pages from the first
/// `index_len` bytes (which they must fill exactly), then the drop ranges
/// and CRCs. The caller has checked that `meta` has the right length.
fn parse_meta_v2(
    path: &Path,
    pc: usize,
    index_len: usize,
    meta: &[u8],
) -> Result<(Vec<u64>, Vec<DropRange>, Vec<u32>)> {
    let crc_at = meta.len() - 4;
    let abs = |rel: usize| HEADER_LEN + rel as u64;
    let stored = u32::from_le_bytes(meta[crc_at..].try_into().expect("4 bytes"));
    let actual = crc32fast::hash(&meta[..crc_at]);
    if stored != actual {
        return Err(Error::corrupt(
            path,
            abs(crc_at),
            "meta_crc",
            format!(
                "stored {stored:#010x}, computed {actual:#010x} over the page index, drop ranges and page CRCs"
            ),
        ));
    }
    let index = &meta[..index_len];
    let bad = |at: usize, why: String| Error::corrupt(path, abs(at), "page index", why);
    // pc <= (file length) / 4: the file holds every page's CRC.
    let mut pages: Vec<u64> = Vec::with_capacity(pc);
    let mut at = 0usize;
    // One past the previous run's last page; `None` when that run ended
    // at page 2^64 - 1 (nothing can follow it).
    let mut end: Option<u64> = Some(0);
    let mut run = 0usize;
    while pages.len() < pc {
        let a_at = at;
        let a = index_number(index, &mut at)
            .map_err(|why| bad(a_at, format!("run {run}: its start {why}")))?;
        let Some(prev_end) = end else {
            return Err(bad(
                a_at,
                format!(
                    "run {run} follows run {}, which ends at page 2^64 - 1: the index must be strictly ascending",
                    run - 1
                ),
            ));
        };
        if run > 0 && a == 0 {
            return Err(bad(
                a_at,
                format!(
                    "run {run} starts at page {prev_end}, where run {} ends: runs are maximal, at least one page apart",
                    run - 1
                ),
            ));
        }
        let first = if run == 0 {
            Some(a)
        } else {
            prev_end.checked_add(a)
        };
        let Some(first) = first else {
            return Err(bad(
                a_at,
                format!("run {run} starts {a} pages after page {prev_end}, past 2^64 - 1"),
            ));
        };
        let n_at = at;
        let n = index_number(index, &mut at)
            .map_err(|why| bad(n_at, format!("run {run}: its length {why}")))?;
        let left = (pc - pages.len()) as u64;
        if n == 0 || n > left {
            return Err(bad(
                n_at,
                format!(
                    "run {run} holds {n} pages; 1 to {left} remain of the {pc} the header gives"
                ),
            ));
        }
        // The run's last page, first + n - 1, must exist.
        if first.checked_add(n - 1).is_none() {
            return Err(bad(
                n_at,
                format!("run {run} of {n} pages from page {first} passes page 2^64 - 1"),
            ));
        }
        pages.extend((0..n).map(|k| first + k));
        end = first.checked_add(n);
        run += 1;
    }
    if at != index_len {
        return Err(bad(
            at,
            format!(
                "the {run} runs of {pc} pages end at byte {} of the file, the {index_len}-byte coded index at {}",
                abs(at),
                abs(index_len)
            ),
        ));
    }
    let crcs_at = meta.len() - 4 - 4 * pc;
    let drops = parse_drops(path, &meta[index_len..crcs_at], abs(index_len), &pages)?;
    let crcs = meta[crcs_at..crc_at]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    Ok((pages, drops, crcs))
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
    if !pattern_size.is_power_of_two() || pattern_size < 16 {
        return Err((
            28,
            "pattern_size",
            format!("{pattern_size} is not a power of two of at least 16"),
        ));
    }
    if pattern_size > page_size {
        return Err((
            28,
            "pattern_size",
            format!("{pattern_size} is larger than the page size {page_size}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn delta(pages: Vec<u64>, drops: Vec<DropRange>) -> PTableDelta {
        PTableDelta {
            path: PathBuf::new(),
            generation: 3,
            page_size: 4096,
            pattern_size: 32,
            full: false,
            page_crcs: pages.iter().map(|&p| p as u32 ^ 0x5a5a_5a5a).collect(),
            pages,
            drops,
        }
    }

    fn read_back(t: &PTableDelta, version: u32) -> Result<PTableDelta> {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("g.ptab");
        t.write(&p, version)?;
        PTableDelta::read(&p).map(|r| PTableDelta {
            path: PathBuf::new(),
            ..r
        })
    }

    proptest! {
        /// Any strictly ascending index (runs, gaps, the ends of the u64
        /// range) reads back from both versions.
        #[test]
        fn both_versions_round_trip(
            set in prop::collection::btree_set(
                prop_oneof![0u64..300, any::<u64>(), (u64::MAX - 300)..=u64::MAX], 0..400),
        ) {
            let t = delta(set.into_iter().collect(), Vec::new());
            for version in VERSIONS {
                prop_assert_eq!(&read_back(&t, version).unwrap(), &t);
            }
            // No zero byte but the first page number's: nothing a copy
            // could turn into a hole.
            let index = code_index(&t.pages);
            prop_assert!(index.iter().skip(1).all(|&b| b != 0), "{:?}", index);
        }
    }

    #[test]
    fn a_run_of_pages_costs_its_crcs_and_a_few_bytes_in_version_2() {
        let drops = vec![DropRange {
            first: 5000,
            count: 7,
        }];
        let t = delta((100..1100).collect(), drops);
        assert_eq!(t.encode_version(1).len(), 64 + 1000 * 12 + 16 + 4);
        // One run: start 100 (1 byte), length 1000 (2 bytes).
        assert_eq!(t.encode_version(2).len(), 64 + 3 + 16 + 1000 * 4 + 4);
        assert_eq!(read_back(&t, 2).unwrap(), t);
    }

    /// Every byte of a version 2 file is covered by a CRC or must hold a
    /// fixed value: flipping any bit of any byte is refused.
    #[test]
    fn every_flipped_bit_of_a_version_2_file_is_refused() {
        let t = delta(
            vec![1, 2, 3, 70, 1 << 33],
            vec![DropRange {
                first: 10,
                count: 2,
            }],
        );
        let good = t.encode_version(2);
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("g.ptab");
        for i in 0..good.len() {
            for bit in 0..8 {
                let mut b = good.clone();
                b[i] ^= 1 << bit;
                std::fs::write(&p, &b).unwrap();
                assert!(
                    matches!(PTableDelta::read(&p), Err(Error::Corrupt { .. })),
                    "byte {i} bit {bit} passed"
                );
            }
        }
    }
}
