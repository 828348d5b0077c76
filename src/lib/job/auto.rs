//! The default dirty-page tracker (`tracker = "auto"`): userfaultfd
//! write-protect resolved by the kernel itself (`uffd.rs`, asynchronous
//! mode, Linux 6.7) for each region it can take, the mprotect tracker
//! (`tracker.rs`) for the others.
//!
//! Why two: the kernel-resolved mode costs a minor fault per first write,
//! about a fifth of the mprotect tracker's signal and `mprotect` call
//! (docs/PERFORMANCE.md), splits no mapping and lets system calls write
//! into protected pages; but an older kernel or a sandbox (seccomp, gVisor)
//! may refuse userfaultfd, memory another userfaultfd of the process holds
//! cannot be registered again, and memory of huge pages (hugetlbfs) cannot
//! be protected page by page. Such a region, or every region there, goes to
//! the mprotect tracker, whose SIGSEGV handler is installed only
//! when a first region needs it. The thread-resolved userfaultfd mode is
//! never chosen here: its faults cost several times the mprotect tracker's.
//!
//! Which tracker holds a region is decided once, at `track`, and kept by
//! slot (the slot table is process-wide and shared by both), so every
//! later call for the region goes to the same one.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use super::tracker::{MprotectTracker, Range, Tracker};
use super::uffd::{UffdMode, UffdTracker};
use crate::error::Result;

/// userfaultfd where it takes a region, mprotect elsewhere.
#[derive(Debug)]
pub struct AutoTracker {
    uffd: Option<UffdTracker>,
    mprotect: OnceLock<MprotectTracker>,
    /// Slots of the regions the mprotect tracker holds.
    by_mprotect: Mutex<HashSet<usize>>,
}

impl AutoTracker {
    /// The tracker; userfaultfd's asynchronous mode is probed once here.
    pub fn new() -> AutoTracker {
        AutoTracker {
            uffd: UffdTracker::with_mode(UffdMode::Async).ok(),
            mprotect: OnceLock::new(),
            by_mprotect: Mutex::new(HashSet::new()),
        }
    }

    /// Whether the kernel-resolved userfaultfd mode is available to it.
    pub fn has_userfaultfd(&self) -> bool {
        self.uffd.is_some()
    }

    fn mprotect(&self) -> Result<&MprotectTracker> {
        if let Some(t) = self.mprotect.get() {
            return Ok(t);
        }
        let t = MprotectTracker::new()?;
        Ok(self.mprotect.get_or_init(|| t))
    }

    /// The tracker holding `r`.
    fn of(&self, r: Range) -> Result<&dyn Tracker> {
        match &self.uffd {
            Some(u) if self.by_userfaultfd(r) => Ok(u),
            _ => Ok(self.mprotect()?),
        }
    }

    /// Whether `r` is held by the userfaultfd tracker.
    pub fn by_userfaultfd(&self, r: Range) -> bool {
        self.uffd.is_some()
            && !self
                .by_mprotect
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&r.slot)
    }
}

impl Default for AutoTracker {
    fn default() -> Self {
        AutoTracker::new()
    }
}

impl Tracker for AutoTracker {
    fn name(&self) -> &'static str {
        "auto"
    }

    fn track(&self, r: Range) -> Result<Range> {
        if let Some(u) = &self.uffd
            && let Ok(r) = u.track(r)
        {
            return Ok(r);
        }
        let r = self.mprotect()?.track(r)?;
        self.by_mprotect
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(r.slot);
        Ok(r)
    }

    fn untrack(&self, r: Range) -> Result<()> {
        let t = self.of(r)?;
        let done = t.untrack(r);
        self.by_mprotect
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&r.slot);
        done
    }

    fn collect(&self, r: Range, out: &mut Vec<usize>) -> Result<()> {
        self.of(r)?.collect(r, out)
    }

    fn mark_dirty(&self, r: Range, first: usize, count: usize) -> Result<()> {
        self.of(r)?.mark_dirty(r, first, count)
    }

    fn faults(&self) -> u64 {
        self.uffd.as_ref().map_or(0, |u| u.faults()) + self.mprotect.get().map_or(0, |m| m.faults())
    }

    fn vma_protected(&self, r: Range) -> bool {
        !self.by_userfaultfd(r)
    }

    fn protect_again(&self, r: Range, pages: &[usize]) -> Result<()> {
        self.of(r)?.protect_again(r, pages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::tracker::{page_size, tests::exercise};

    /// Anonymous memory and file mappings go to userfaultfd where the
    /// kernel resolves its faults (its asynchronous mode takes every kind
    /// of memory); memory that another userfaultfd holds goes to mprotect,
    /// whose handler is installed only then. Each records exactly the
    /// pages written.
    #[test]
    fn each_region_goes_where_it_can_be_tracked() {
        let t = AutoTracker::new();
        exercise(&t);
        if !t.has_userfaultfd() {
            assert!(
                std::env::var_os("REX_REQUIRE_UFFD").is_none(),
                "asynchronous userfaultfd unavailable"
            );
            eprintln!("SKIPPED: asynchronous userfaultfd unavailable here");
            return;
        }
        assert!(t.mprotect.get().is_none(), "no handler for nothing");
        let ps = page_size();
        let check = |p: usize, uffd: bool| {
            let r = t.track(Range::new(p, 4)).unwrap();
            assert_eq!(t.by_userfaultfd(r), uffd);
            assert_eq!(t.vma_protected(r), !uffd);
            let mut out = Vec::new();
            t.collect(r, &mut out).unwrap();
            assert_eq!(out, vec![0, 1, 2, 3]);
            out.clear();
            // SAFETY: pages of the caller's mapping (protected: the kernel
            // or the handler resolves the fault).
            unsafe {
                std::ptr::write_volatile((p + 2 * ps) as *mut u8, 5);
                let _ = std::ptr::read_volatile((p + 3 * ps) as *const u8);
            }
            t.collect(r, &mut out).unwrap();
            assert_eq!(out, vec![2]);
            t.untrack(r).unwrap();
        };
        // A private file mapping.
        let p = crate::job::tracker::tests::file_map(4, 0);
        check(p, true);
        // SAFETY: ours, unmapped once, untracked.
        unsafe { crate::job::tracker::unmap_anonymous(p, 4 * ps) };
        // Memory another userfaultfd has registered.
        let other = UffdTracker::with_mode(UffdMode::Async).unwrap();
        let m = crate::job::tracker::tests::Map::new(4);
        let held = other.track(Range::new(m.0, 4)).unwrap();
        check(m.0, false);
        assert!(t.mprotect.get().is_some());
        other.untrack(held).unwrap();
    }
}
