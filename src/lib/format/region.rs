//! Regions: the page numbering of checkpoints written by the in-process
//! library (librex), and the region table that names them (docs/FORMAT.md
//! §2.12).
//!
//! A job registers its memory as regions under stable ids (`rex_protect(id,
//! ptr, size)`), so a page is named by its region and its index in the
//! region, not by its virtual address: a restarted process, whose buffers
//! lie at other addresses, restores into its own buffers by id. The page
//! number of index `i` of region `id` is `id << 32 | i`; everything below
//! the formats (coalescing, deduplication, restore) keeps working on page
//! numbers and never needs to know.
//!
//! The region table (id, size in bytes, page count) travels in an optional
//! extension record of REX-IC version 2 (tag `0x8000_0002`, so an older
//! reader still restores the pages and only cannot show regions) and in the
//! manifests of L2 generations. It is what lets `rex_restart` refuse a
//! process whose regions differ from the checkpoint's, and `rexctl restore
//! --region ID --raw` write exactly one region's bytes.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Extension record tag of the region table (optional: bit 31 set).
pub const EXT_REGIONS: u32 = 0x8000_0002;
/// Version of the region table's layout.
pub const REGIONS_VERSION: u32 = 1;
/// Bytes of one region table entry.
pub const ENTRY_LEN: usize = 24;
/// Largest region id (ids are C `int`s, never negative).
pub const MAX_REGION_ID: u32 = i32::MAX as u32;
/// Most pages a region can have (its index is the low 32 bits).
pub const MAX_REGION_PAGES: u64 = 1 << 32;
/// Most regions a checkpoint's region table holds: the extension area (at
/// most [`crate::format::ic::MAX_EXT_LEN`] bytes) also carries librex's
/// chain id, instance id and continued-instance records (24 bytes each),
/// and the table's record adds 16 bytes of headers.
pub const MAX_REGIONS: usize = (crate::format::ic::MAX_EXT_LEN as usize - 3 * 24 - 16) / ENTRY_LEN;

/// The page number of index `index` of region `id`.
pub fn page_number(id: u32, index: u64) -> u64 {
    (u64::from(id) << 32) | index
}

/// The region id and index of page number `page`.
pub fn split_page(page: u64) -> (u32, u64) {
    ((page >> 32) as u32, page & 0xffff_ffff)
}

/// One registered region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    /// The id the job registered it under.
    pub id: u32,
    /// Size in bytes (the last page may be partly used).
    pub size: u64,
    /// Pages: `ceil(size / page_size)`.
    pub pages: u64,
}

impl Region {
    /// A region of `size` bytes in pages of `page_size` bytes.
    pub fn new(id: u32, size: u64, page_size: u32) -> Result<Region> {
        let pages = size.div_ceil(u64::from(page_size));
        let r = Region { id, size, pages };
        r.check(page_size).map_err(Error::Invalid)?;
        Ok(r)
    }

    /// The page numbers of the region: `first .. first + pages`.
    pub fn first_page(&self) -> u64 {
        page_number(self.id, 0)
    }

    fn check(&self, page_size: u32) -> std::result::Result<(), String> {
        if self.id > MAX_REGION_ID {
            return Err(format!(
                "region id {} is above the largest id {MAX_REGION_ID}",
                self.id
            ));
        }
        if self.size == 0 {
            return Err(format!("region {} has size 0", self.id));
        }
        if self.pages != self.size.div_ceil(u64::from(page_size)) {
            return Err(format!(
                "region {} of {} bytes has {} pages; {}-byte pages make {}",
                self.id,
                self.size,
                self.pages,
                page_size,
                self.size.div_ceil(u64::from(page_size))
            ));
        }
        if self.pages > MAX_REGION_PAGES {
            return Err(format!(
                "region {} has {} pages, more than the {MAX_REGION_PAGES} a region can have",
                self.id, self.pages
            ));
        }
        Ok(())
    }
}

/// The regions of a checkpoint, ascending by id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RegionTable(pub Vec<Region>);

impl RegionTable {
    /// The region with id `id`.
    pub fn get(&self, id: u32) -> Option<&Region> {
        self.0
            .binary_search_by_key(&id, |r| r.id)
            .ok()
            .map(|i| &self.0[i])
    }

    /// Total bytes of all regions.
    pub fn bytes(&self) -> u64 {
        self.0.iter().map(|r| r.size).sum()
    }

    /// Total pages of all regions.
    pub fn pages(&self) -> u64 {
        self.0.iter().map(|r| r.pages).sum()
    }

    /// Checks the table's own rules (ascending unique ids, consistent page
    /// counts) for pages of `page_size` bytes.
    pub fn check(&self, page_size: u32) -> std::result::Result<(), String> {
        for (i, r) in self.0.iter().enumerate() {
            r.check(page_size)?;
            if i > 0 && self.0[i - 1].id >= r.id {
                return Err(format!(
                    "region ids not strictly ascending: {} after {}",
                    r.id,
                    self.0[i - 1].id
                ));
            }
        }
        Ok(())
    }

    /// Checks that every page number of `pages` lies inside a region of
    /// the table; returns the first that does not.
    pub fn check_pages(&self, pages: &[u64]) -> std::result::Result<(), u64> {
        for &p in pages {
            let (id, i) = split_page(p);
            match self.get(id) {
                Some(r) if i < r.pages => {}
                _ => return Err(p),
            }
        }
        Ok(())
    }

    /// The record value: version, count, entries (docs/FORMAT.md §2.12).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(8 + self.0.len() * ENTRY_LEN);
        v.extend_from_slice(&REGIONS_VERSION.to_le_bytes());
        v.extend_from_slice(&(self.0.len() as u32).to_le_bytes());
        for r in &self.0 {
            v.extend_from_slice(&r.id.to_le_bytes());
            v.extend_from_slice(&0u32.to_le_bytes());
            v.extend_from_slice(&r.size.to_le_bytes());
            v.extend_from_slice(&r.pages.to_le_bytes());
        }
        v
    }

    /// Parses a record value that starts at file offset `at` of `path`
    /// (its CRC already checked); `Ok(None)` for a table version this
    /// rexctl does not know (the record is optional: skipped).
    pub fn decode(path: &Path, at: u64, page_size: u32, v: &[u8]) -> Result<Option<RegionTable>> {
        let bad =
            |off: usize, why: String| Error::corrupt(path, at + off as u64, "region table", why);
        if v.len() < 8 {
            return Err(bad(
                0,
                format!("{} bytes, too few for its version and count", v.len()),
            ));
        }
        let version = u32::from_le_bytes(v[0..4].try_into().expect("4 bytes"));
        if version != REGIONS_VERSION {
            return Ok(None);
        }
        let count = u32::from_le_bytes(v[4..8].try_into().expect("4 bytes")) as usize;
        if (v.len() - 8) / ENTRY_LEN != count || !(v.len() - 8).is_multiple_of(ENTRY_LEN) {
            return Err(bad(
                4,
                format!(
                    "count {count} needs {} bytes, the record has {}",
                    count.saturating_mul(ENTRY_LEN).saturating_add(8),
                    v.len()
                ),
            ));
        }
        let mut t = Vec::with_capacity(count);
        for i in 0..count {
            let o = 8 + i * ENTRY_LEN;
            let u32_at = |k: usize| u32::from_le_bytes(v[o + k..o + k + 4].try_into().expect("4"));
            let u64_at = |k: usize| u64::from_le_bytes(v[o + k..o + k + 8].try_into().expect("8"));
            if u32_at(4) != 0 {
                return Err(bad(o + 4, format!("entry {i}: reserved field is not zero")));
            }
            let r = Region {
                id: u32_at(0),
                size: u64_at(8),
                pages: u64_at(16),
            };
            r.check(page_size)
                .map_err(|why| bad(o, format!("entry {i}: {why}")))?;
            if let Some(prev) = t.last().map(|p: &Region| p.id)
                && r.id <= prev
            {
                return Err(bad(
                    o,
                    format!("entry {i}: id {} not above the previous id {prev}", r.id),
                ));
            }
            t.push(r);
        }
        Ok(Some(RegionTable(t)))
    }
}

impl std::fmt::Display for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "region {}: {} bytes, {} pages (pages {:#x}..)",
            self.id,
            self.size,
            self.pages,
            self.first_page()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_numbers_split_back() {
        let p = page_number(7, 12345);
        assert_eq!(p, (7u64 << 32) | 12345);
        assert_eq!(split_page(p), (7, 12345));
    }

    #[test]
    fn table_round_trips_and_checks() {
        let t = RegionTable(vec![
            Region::new(0, 24, 4096).unwrap(),
            Region::new(3, 3 * 4096 + 1, 4096).unwrap(),
        ]);
        assert_eq!(t.0[1].pages, 4);
        let v = t.encode();
        let back = RegionTable::decode(Path::new("x"), 0, 4096, &v)
            .unwrap()
            .unwrap();
        assert_eq!(back, t);
        assert_eq!(t.check_pages(&[page_number(3, 3)]), Ok(()));
        assert_eq!(t.check_pages(&[page_number(3, 4)]), Err(page_number(3, 4)));
        assert_eq!(t.check_pages(&[page_number(1, 0)]), Err(page_number(1, 0)));
        // A page count that does not follow from the size.
        let mut v2 = v.clone();
        v2[8 + 24 + 16] = 9;
        let e = RegionTable::decode(Path::new("x"), 100, 4096, &v2).unwrap_err();
        assert!(e.to_string().contains("has 9 pages"), "{e}");
        // Truncated.
        assert!(RegionTable::decode(Path::new("x"), 0, 4096, &v[..20]).is_err());
        // Unknown version: skipped.
        let mut v3 = v.clone();
        v3[0] = 2;
        assert_eq!(
            RegionTable::decode(Path::new("x"), 0, 4096, &v3).unwrap(),
            None
        );
        assert!(Region::new(1, 0, 4096).is_err());
        assert!(Region::new(u32::MAX, 1, 4096).is_err());
    }
}
