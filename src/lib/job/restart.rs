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
//!    keeping only the page numbers and CRCs ([`Recorder`]): the regions
//!    are not touched, so a state that cannot be restored leaves them as
//!    they were.
//! 2. `rex_restart` restores exactly that state again (its seq, no
//!    fallback) straight into the regions ([`IntoRegions`]). Before any
//!    byte is written it checks that the same state comes out (the seq,
//!    the run, the page size and every page number), and each page is
//!    written only if its CRC is the one the first pass recorded. A cron
//!    `flush` between the two calls may move pending checkpoints into a
//!    generation: the state at that seq is the same, so is every page.
//!
//! What the first pass cannot rule out is a checkpoint file damaged between
//! the two calls: the second pass then fails at that page, with the
//! regions partly written (rex(3) says so).
//!
//! An MPI rank still stages its image (the ranks agree on the seq to
//! restart from after each has restored its own).

use std::sync::RwLock;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::{Error, Result};
use crate::format::ic::ChainId;
use crate::format::region::split_page;
use crate::l2::restore::{PageSink, StateInfo};

/// The state the first pass verified, for the second.
#[derive(Debug)]
pub(crate) struct Verified {
    pub seq: u64,
    pub chain_id: Option<ChainId>,
    pub page_size: u32,
    pub pages: Vec<u64>,
    pub crcs: Vec<u32>,
}

/// The first pass's sink: keeps what [`Verified`] holds and nothing of the
/// pages' bytes (each was checked against its CRC by the restore).
#[derive(Default)]
pub(crate) struct Recorder {
    /// The attempt under way (a restore may make several): its state, and
    /// the CRCs its threads store.
    state: RwLock<Option<(Verified, Vec<AtomicU32>)>>,
}

impl Recorder {
    /// What was recorded, once the restore succeeded.
    pub fn into_verified(self) -> Option<Verified> {
        let (mut v, crcs) = self.state.into_inner().unwrap_or_else(|e| e.into_inner())?;
        v.crcs = crcs.into_iter().map(AtomicU32::into_inner).collect();
        Some(v)
    }
}

impl PageSink for Recorder {
    fn begin(&self, s: &StateInfo<'_>) -> Result<()> {
        let v = Verified {
            seq: s.seq,
            chain_id: s.chain_id,
            page_size: s.page_size,
            pages: s.pages.to_vec(),
            crcs: Vec::new(),
        };
        let crcs = (0..s.pages.len()).map(|_| AtomicU32::new(0)).collect();
        *self.state.write().unwrap_or_else(|e| e.into_inner()) = Some((v, crcs));
        Ok(())
    }

    fn put(&self, k: usize, _page: u64, crc: u32, _data: &[u8]) -> Result<()> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let (_, crcs) = state.as_ref().expect("begin comes first");
        crcs[k].store(crc, Ordering::Relaxed);
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

/// The second pass's sink: each page into its region, once the state is
/// the one verified and the page's CRC is the one recorded.
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
        if s.pages != v.pages.as_slice() {
            return Err(self.changed(format!(
                "{} pages now, {} then, or other pages",
                s.pages.len(),
                v.pages.len()
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
                return Err(self.changed(format!("page {p:#x} lies in no registered region")));
            }
        }
        Ok(())
    }

    fn put(&self, k: usize, page: u64, crc: u32, data: &[u8]) -> Result<()> {
        if self.verified.crcs[k] != crc {
            return Err(self.changed(format!(
                "page {page:#x} has CRC {crc:#010x}, {:#010x} then",
                self.verified.crcs[k]
            )));
        }
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
