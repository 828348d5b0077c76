//! A restart into the job's own memory, with no image file between.
//!
//! `rex_restart_test` used to restore the newest state into an image file
//! staged in L1 (written, fsynced), and `rex_restart` then read it back,
//! checked every page again and copied it into the regions: the job's whole
//! footprint written to L1's disk and read again, and as much free space in
//! L1 as the footprint. A restart now restores twice from the checkpoints
//! themselves, with no file:
//!
//! 1. `rex_restart_test` rebuilds every page of the newest valid state
//!    (with the usual fallbacks) and checks it against its recorded CRC,
//!    keeping a digest of the page numbers and those CRCs, and the pages
//!    per region ([`Recorder`]; 16 bytes, not a copy of the page list): the
//!    regions are not touched, so a state that cannot be restored leaves
//!    them as they were.
//! 2. `rex_restart` restores again, with the same options (the same walk
//!    through the fallbacks reaches the same state), straight into the
//!    regions ([`IntoRegions`]). Before any byte of an attempt is written
//!    it checks that the state is the one verified: the seq,
//!    the run, the page size, and the digest of the page numbers and the
//!    CRCs the pages are checked against (from the P-Tables and IC files,
//!    known before any page is rebuilt); another state is refused, which
//!    to the walk is one more attempt that failed. A cron `flush` between
//!    the two calls may move pending checkpoints into a generation: the
//!    state at that seq is the same, with the same CRCs.
//!
//! What the first pass cannot rule out is a checkpoint file damaged between
//! the two calls (a page's bytes, not its recorded CRC): the second pass
//! then fails at that page, with the regions partly written (rex(3) says
//! so).
//!
//! An MPI rank still stages its image (the ranks agree on the seq to
//! restart from after each has restored its own).

use std::collections::BTreeMap;
use std::sync::Mutex;

use xxhash_rust::xxh3::Xxh3;

use crate::error::{Error, Result};
use crate::format::ic::ChainId;
use crate::format::region::split_page;
use crate::l2::restore::{PageSink, StateInfo};

/// The state the first pass verified, for the second: what identifies it
/// (a digest of its page numbers and their recorded CRCs), and its pages
/// per region, for the checks before any write.
#[derive(Debug)]
pub(crate) struct Verified {
    pub seq: u64,
    pub chain_id: Option<ChainId>,
    pub page_size: u32,
    /// Pages per region id.
    pub per_region: BTreeMap<u32, u64>,
    digest: u128,
}

/// XXH3-128 of the pages' numbers and recorded CRCs, in order: equal for
/// two restores that hand over the same pages with the same contents (as
/// far as their CRCs tell), whichever copies and generations they read.
fn digest(s: &StateInfo<'_>) -> u128 {
    let mut h = Xxh3::new();
    h.update(&(s.pages.len() as u64).to_le_bytes());
    for (&p, &c) in s.pages.iter().zip(s.crcs) {
        h.update(&p.to_le_bytes());
        h.update(&c.to_le_bytes());
    }
    h.digest128()
}

/// How many of `pages` each region id holds.
pub(crate) fn pages_per_region(pages: &[u64]) -> BTreeMap<u32, u64> {
    let mut n = BTreeMap::new();
    for &p in pages {
        *n.entry(split_page(p).0).or_default() += 1;
    }
    n
}

/// The first pass's sink: keeps what [`Verified`] holds, nothing of the
/// pages' bytes (each was checked against its CRC by the restore).
#[derive(Default)]
pub(crate) struct Recorder {
    /// The attempt under way (a restore may make several).
    state: Mutex<Option<Verified>>,
}

impl Recorder {
    /// What was recorded, once the restore succeeded.
    pub fn into_verified(self) -> Option<Verified> {
        self.state.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

impl PageSink for Recorder {
    fn begin(&self, s: &StateInfo<'_>) -> Result<()> {
        let v = Verified {
            seq: s.seq,
            chain_id: s.chain_id,
            page_size: s.page_size,
            per_region: pages_per_region(s.pages),
            digest: digest(s),
        };
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = Some(v);
        Ok(())
    }

    fn put(&self, _k: usize, _page: u64, _crc: u32, _data: &[u8]) -> Result<()> {
        Ok(())
    }
}

/// A region's memory, as the second pass writes it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Target {
    pub id: u32,
    pub ptr: usize,
    pub size: usize,
}

/// The second pass's sink: each page into its region, once `begin` has
/// found the state the one verified.
pub(crate) struct IntoRegions<'a> {
    pub verified: &'a Verified,
    /// The registered regions, in ascending id.
    pub regions: &'a [Target],
    /// Where errors point (the L1 directory).
    pub place: &'a std::path::Path,
}

impl IntoRegions<'_> {
    fn region(&self, id: u32) -> Option<&Target> {
        self.regions
            .binary_search_by_key(&id, |r| r.id)
            .ok()
            .map(|i| &self.regions[i])
    }

    fn changed(&self, what: String) -> Error {
        Error::chain(
            self.place,
            format!(
                "the state of seq {} changed between rex_restart_test and rex_restart: {what}",
                self.verified.seq
            ),
        )
    }
}

impl PageSink for IntoRegions<'_> {
    fn begin(&self, s: &StateInfo<'_>) -> Result<()> {
        let v = self.verified;
        if (s.seq, s.chain_id, s.page_size) != (v.seq, v.chain_id, v.page_size) {
            return Err(self.changed(format!(
                "now seq {} of {}, {}-byte pages",
                s.seq,
                crate::l1::run_name(s.chain_id),
                s.page_size
            )));
        }
        if digest(s) != v.digest {
            return Err(self.changed(format!(
                "its {} pages, or their recorded CRCs, are not those checked then",
                s.pages.len()
            )));
        }
        // Every page lies in a region of the right size (checked against
        // the region table before this pass): find them now, not per page.
        for &p in s.pages {
            let (id, i) = split_page(p);
            let ok = self
                .region(id)
                .is_some_and(|r| (i as usize).saturating_mul(s.page_size as usize) < r.size);
            if !ok {
                // Not a change: the state holds a page outside its own
                // region table (a producer that shrank a region without
                // dropping its pages), which no region can take.
                return Err(Error::chain(
                    self.place,
                    format!(
                        "page {p:#x} of the state of seq {} lies in no registered region",
                        self.verified.seq
                    ),
                ));
            }
        }
        Ok(())
    }

    fn put(&self, _k: usize, page: u64, _crc: u32, data: &[u8]) -> Result<()> {
        let (id, i) = split_page(page);
        let r = self.region(id).expect("begin found every page's region");
        let from = i as usize * data.len();
        let n = data.len().min(r.size - from);
        // SAFETY: the region's memory is the caller's, registered as
        // readable and writable for `size` bytes (`Rex::protect`'s
        // contract), not write-protected before the first checkpoint, and
        // `from + n <= size` (`begin` checked `from < size`). Pages are
        // distinct (a state's page numbers are), so no two `put`s, on any
        // threads, write the same bytes, and no Rust reference to the
        // region's memory is held meanwhile (the job is inside
        // `rex_restart`).
        let dst = unsafe { std::slice::from_raw_parts_mut((r.ptr + from) as *mut u8, n) };
        dst.copy_from_slice(&data[..n]);
        Ok(())
    }
}
