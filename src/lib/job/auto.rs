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

    fn holder(&self, r: Range) -> &'static str {
        if self.by_userfaultfd(r) {
            "userfaultfd"
        } else {
            "mprotect"
        }
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
            let holder = if uffd { "userfaultfd" } else { "mprotect" };
            assert_eq!(t.holder(r), holder);
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

    /// What [`faults_of_the_job_s_own_protections_still_kill_it`] runs in
    /// a child process, case `case`: each ends in a fault the job's own
    /// protection causes, which must kill the process with SIGSEGV as it
    /// would without librex; a case that survives it returns normally
    /// (exit 0), a case that cannot run here exits 77.
    fn fault_child(case: &std::ffi::OsStr) {
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: setrlimit with a valid struct; no core file for the
        // crash this child is meant to die of.
        unsafe { libc::setrlimit(libc::RLIMIT_CORE, &no_core) };
        let ps = page_size();
        let m = crate::job::tracker::tests::Map::new(4);
        let page = (m.0 + ps) as *mut libc::c_void;
        let set = |prot| {
            // SAFETY: a page of our own mapping.
            assert_eq!(unsafe { libc::mprotect(page, ps, prot) }, 0);
        };
        let mut out = Vec::new();
        match case.to_str().unwrap() {
            // Memory userfaultfd holds, the mprotect tracker's handler
            // installed for another region: the job's read-only page.
            "userfaultfd-write-read-only" => {
                let t = AutoTracker::new();
                let Some(other) = crate::job::uffd::tests::async_or_skip() else {
                    std::process::exit(77);
                };
                let o = crate::job::tracker::tests::Map::new(1);
                let _held = other.track(Range::new(o.0, 1)).unwrap();
                let r0 = t.track(Range::new(o.0, 1)).unwrap();
                assert!(!t.by_userfaultfd(r0) && t.mprotect.get().is_some());
                let r = t.track(Range::new(m.0, 4)).unwrap();
                assert!(t.by_userfaultfd(r));
                t.collect(r, &mut out).unwrap();
                set(libc::PROT_READ);
                m.write(1, 1);
            }
            // The mprotect tracker's region, a page the job made
            // unreadable: a read of it (a write would be taken for the
            // tracker's own fault: documented).
            "mprotect-read-unreadable" => {
                if !cfg!(all(target_arch = "x86_64", target_os = "linux")) {
                    std::process::exit(77);
                }
                let t = MprotectTracker::new().unwrap();
                let r = t.track(Range::new(m.0, 4)).unwrap();
                t.collect(r, &mut out).unwrap();
                set(libc::PROT_NONE);
                // SAFETY: a page of our own mapping (unreadable: the point).
                let _ = unsafe { std::ptr::read_volatile(page as *const u8) };
            }
            // The control: a write the tracker protected is resolved.
            "mprotect-write" => {
                let t = MprotectTracker::new().unwrap();
                let r = t.track(Range::new(m.0, 4)).unwrap();
                t.collect(r, &mut out).unwrap();
                out.clear();
                m.write(1, 1);
                t.collect(r, &mut out).unwrap();
                assert_eq!(out, vec![1]);
            }
            other => panic!("unknown case {other}"),
        }
    }

    /// The mprotect tracker's SIGSEGV handler resolves only its own faults:
    /// a write to a page it protected. A write to memory the userfaultfd
    /// tracker holds (whose write faults never raise SIGSEGV) that the job
    /// made read-only, and a read of a registered page the job made
    /// unreadable, kill the job with SIGSEGV, as they would without
    /// librex; before, the handler write-enabled the page and the job went
    /// on. Each case runs in a child process (this test binary again).
    #[test]
    fn faults_of_the_job_s_own_protections_still_kill_it() {
        use std::os::unix::process::ExitStatusExt;
        // In the child: this test again, with the case to run.
        if let Some(case) = std::env::var_os("REX_FAULT_CHILD") {
            fault_child(&case);
            return;
        }
        let exe = std::env::current_exe().unwrap();
        for (case, dies) in [
            ("mprotect-write", false),
            ("mprotect-read-unreadable", true),
            ("userfaultfd-write-read-only", true),
        ] {
            let out = std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "job::auto::tests::faults_of_the_job_s_own_protections_still_kill_it",
                ])
                .args(["--nocapture", "--test-threads=1"])
                .env("REX_FAULT_CHILD", case)
                .output()
                .unwrap();
            let st = out.status;
            if st.code() == Some(77) {
                eprintln!("SKIPPED: {case} cannot run here");
                continue;
            }
            let err = String::from_utf8_lossy(&out.stderr);
            if dies {
                assert_eq!(st.signal(), Some(libc::SIGSEGV), "{case}: {st}\n{err}");
            } else {
                assert!(st.success(), "{case}: {st}\n{err}");
            }
        }
    }
}
