//! The second dirty-page tracker: userfaultfd write-protect (Linux 5.13 and
//! later, anonymous private memory; `tracker = "userfaultfd"` in rex.toml).
//!
//! The regions are registered with a userfaultfd in write-protect mode. A
//! checkpoint write-protects the dirty pages again (`UFFDIO_WRITEPROTECT`);
//! the first write to one blocks the writing thread and queues an event,
//! which a dedicated thread of the library reads: it records the page and
//! lifts the protection, which wakes the writer. Unlike the mprotect tracker
//! there is no signal handler (so nothing to chain to the job's own SIGSEGV
//! handler) and no VMA splitting (the protection lives in the page table
//! entries, so `vm.max_map_count` is not a concern). When the library may
//! handle kernel-mode faults (root, or CAP_SYS_PTRACE), a `read(2)` into a
//! protected page also works without `rex_dirty`; otherwise the fd is
//! created user-mode only and kernel writes fail with EFAULT as with
//! mprotect.
//!
//! Pages that were never touched have no page table entry to carry the
//! write-protect bit. Where the kernel has `UFFD_FEATURE_WP_UNPOPULATED`
//! (6.4 and later) it protects them anyway; elsewhere [`UffdTracker::track`]
//! reads every page once, which maps the shared zero page (no memory).
//!
//! Built on the kernel's ABI as `linux-raw-sys` spells it (constants and
//! struct layouts), not on the `userfaultfd` crate: that crate's `-sys`
//! part builds `bindgen` 0.69 (clang-sys 1), which cargo cannot link beside
//! the `bindgen` 0.52 (clang-sys 0.28) of the `xdelta3` counterparts.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use linux_raw_sys::general as k;
use linux_raw_sys::ioctl as kio;

use super::tracker::{
    Range, Tracker, mark_addr, page_size, runs, slot_add, slot_mark, slot_remove, slot_take,
};
use crate::error::{Error, Result};

const UFFD_API: u64 = 0xAA;
/// `UFFDIO_WRITEPROTECT_MODE_WP` (linux/userfaultfd.h; linux-raw-sys lacks
/// it).
const WRITEPROTECT_MODE_WP: u64 = 1;
/// `UFFDIO_WRITEPROTECT_MODE_DONTWAKE`.
const WRITEPROTECT_MODE_DONTWAKE: u64 = 2;

/// Write faults resolved (a static: the fault thread writes nothing that
/// could lie in a write-protected heap page, or it would wait on itself).
static FAULTS: AtomicU64 = AtomicU64::new(0);

/// What the fault thread reads (never writes).
struct Shared {
    fd: OwnedFd,
    ps: usize,
    wp_unpopulated: bool,
}

/// The userfaultfd write-protect tracker.
pub struct UffdTracker {
    shared: Arc<Shared>,
    wake: OwnedFd,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for UffdTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UffdTracker")
            .field("wp_unpopulated", &self.shared.wp_unpopulated)
            .finish()
    }
}

fn os_err(what: &str) -> Error {
    Error::Invalid(format!(
        "userfaultfd: {what}: {}",
        std::io::Error::last_os_error()
    ))
}

/// A userfaultfd with the write-protect API, or why not.
fn open_uffd() -> Result<(OwnedFd, bool)> {
    let base = (libc::O_CLOEXEC | libc::O_NONBLOCK) as libc::c_long;
    let mut last = None;
    // Kernel-mode faults too where allowed; else user mode only. With
    // WP_UNPOPULATED where the kernel has it; else without.
    for user_only in [false, true] {
        for unpopulated in [true, false] {
            let flags = if user_only {
                base | k::UFFD_USER_MODE_ONLY as libc::c_long
            } else {
                base
            };
            // SAFETY: the userfaultfd system call takes flags and returns a
            // new descriptor or -1; no memory is passed.
            let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
            if fd < 0 {
                last = Some(os_err("create"));
                continue;
            }
            // SAFETY: `fd` is a descriptor the kernel just gave us.
            let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
            let mut features = u64::from(k::UFFD_FEATURE_PAGEFAULT_FLAG_WP);
            if unpopulated {
                features |= u64::from(k::UFFD_FEATURE_WP_UNPOPULATED);
            }
            let mut api = k::uffdio_api {
                api: UFFD_API,
                features,
                ioctls: 0,
            };
            // SAFETY: UFFDIO_API reads and writes one uffdio_api, which
            // `api` is.
            let rc = unsafe { libc::ioctl(fd.as_raw_fd(), kio::UFFDIO_API as _, &mut api) };
            if rc == 0 {
                return Ok((fd, unpopulated));
            }
            last = Some(os_err("UFFDIO_API (write-protect)"));
        }
    }
    Err(last.expect("tried"))
}

/// Whether this kernel's page map shows userfaultfd's write-protect bit
/// (Linux 5.13), by protecting a page of its own and reading its entry.
/// Without it each checkpoint's audit (`audit.rs`) cannot tell a page
/// written unseen from a protected one and must take every present page:
/// as large as a full checkpoint each time (helper-44). A page map that
/// cannot be read is left for the checkpoints to report (`REX_EIO`).
fn page_map_shows_protection(fd: &OwnedFd, ps: usize) -> Result<bool> {
    use std::os::unix::fs::FileExt;
    let Ok(pagemap) = std::fs::File::open(super::audit::PAGEMAP) else {
        return Ok(true);
    };
    let page = super::tracker::map_anonymous(ps)?;
    let probe = || -> Result<bool> {
        // SAFETY: our own fresh, writable page.
        unsafe { std::ptr::write_volatile(page as *mut u8, 1) };
        let mut reg = k::uffdio_register {
            range: k::uffdio_range {
                start: page as u64,
                len: ps as u64,
            },
            mode: u64::from(k::UFFDIO_REGISTER_MODE_WP),
            ioctls: 0,
        };
        // SAFETY: UFFDIO_REGISTER reads and writes one uffdio_register.
        if unsafe { libc::ioctl(fd.as_raw_fd(), kio::UFFDIO_REGISTER as _, &mut reg) } != 0 {
            return Err(os_err("UFFDIO_REGISTER (probe)"));
        }
        let mut w = k::uffdio_writeprotect {
            range: reg.range,
            mode: WRITEPROTECT_MODE_WP,
        };
        // SAFETY: UFFDIO_WRITEPROTECT reads one uffdio_writeprotect.
        if unsafe { libc::ioctl(fd.as_raw_fd(), kio::UFFDIO_WRITEPROTECT as _, &mut w) } != 0 {
            return Err(os_err("UFFDIO_WRITEPROTECT (probe)"));
        }
        let mut e = [0u8; 8];
        if pagemap
            .read_exact_at(&mut e, (page / ps * 8) as u64)
            .is_err()
        {
            return Ok(true);
        }
        Ok(u64::from_ne_bytes(e) & super::audit::UFFD_WP != 0)
    };
    let shows = probe();
    // SAFETY: the probe's own page, unmapped once (which also ends its
    // registration); nothing else refers to it.
    unsafe { super::tracker::unmap_anonymous(page, ps) };
    shows
}

impl UffdTracker {
    /// Opens a userfaultfd with write-protect support and starts the
    /// thread that resolves its faults; fails where the kernel does not
    /// offer it (or forbids it: `vm.unprivileged_userfaultfd`), or where
    /// its page map does not show the protection (before Linux 5.13).
    pub fn new() -> Result<UffdTracker> {
        let (fd, wp_unpopulated) = open_uffd()?;
        if !page_map_shows_protection(&fd, page_size())? {
            return Err(Error::Invalid(
                "userfaultfd: this kernel's /proc/self/pagemap does not show the write-protect bit (Linux 5.13 and later do), without which every checkpoint would copy every page: use tracker = \"mprotect\"".into(),
            ));
        }
        let mut pipe = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array.
        if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(os_err("pipe"));
        }
        // SAFETY: both descriptors were just created and are owned here.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])) };
        let shared = Arc::new(Shared {
            fd,
            ps: page_size(),
            wp_unpopulated,
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("rex-uffd".into())
            .spawn(move || fault_loop(&s, rd))
            .map_err(|e| Error::Invalid(format!("userfaultfd: start thread: {e}")))?;
        Ok(UffdTracker {
            shared,
            wake: wr,
            thread: Some(thread),
        })
    }
}

impl Shared {
    fn wp(&self, start: usize, len: usize, protect: bool) -> Result<()> {
        let mut w = k::uffdio_writeprotect {
            range: k::uffdio_range {
                start: start as u64,
                len: len as u64,
            },
            mode: if protect {
                WRITEPROTECT_MODE_WP
            } else {
                0 // lift, and wake the threads waiting on it
            },
        };
        // SAFETY: UFFDIO_WRITEPROTECT reads one uffdio_writeprotect.
        let rc = unsafe { libc::ioctl(self.fd.as_raw_fd(), kio::UFFDIO_WRITEPROTECT as _, &mut w) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            let hint = if e.raw_os_error() == Some(libc::ENOENT) {
                " (that memory is no longer registered: was a region's memory replaced, by mmap MAP_FIXED or mremap? unregister the region and register it again)"
            } else {
                ""
            };
            return Err(Error::Invalid(format!(
                "userfaultfd: UFFDIO_WRITEPROTECT {start:#x}+{len}: {e}{hint}"
            )));
        }
        Ok(())
    }
}

fn fault_loop(s: &Shared, wake: OwnedFd) {
    let mut buf = [0u8; 32 * 64];
    loop {
        let mut fds = [
            libc::pollfd {
                fd: s.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: poll reads and writes the two pollfd entries.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if rc < 0 {
            continue; // EINTR
        }
        if fds[1].revents != 0 {
            return;
        }
        // SAFETY: reads at most `buf.len()` bytes into `buf`.
        let n = unsafe {
            libc::read(
                s.fd.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
            )
        };
        if n <= 0 {
            continue;
        }
        // struct uffd_msg (32 bytes): u8 event at 0; for a page fault, u64
        // flags at 8 and u64 address at 16.
        for m in buf[..n as usize].chunks_exact(32) {
            if u32::from(m[0]) != k::UFFD_EVENT_PAGEFAULT {
                continue;
            }
            let flags = u64::from_ne_bytes(m[8..16].try_into().expect("8 bytes"));
            let addr = u64::from_ne_bytes(m[16..24].try_into().expect("8 bytes")) as usize;
            if flags & u64::from(k::UFFD_PAGEFAULT_FLAG_WP) == 0 {
                continue;
            }
            let page = addr & !(s.ps - 1);
            // Lift the protection without waking, record the page, then
            // wake the writer: a collect between the first two leaves the
            // page protected (the writer faults again) rather than writable
            // with its bit cleared. Raw ioctls, results ignored, nothing
            // allocated: this thread must never write memory that may be
            // write-protected (it would wait for itself). A failure means
            // the range was unregistered meanwhile, which wakes the writer.
            let mut w = k::uffdio_writeprotect {
                range: k::uffdio_range {
                    start: page as u64,
                    len: s.ps as u64,
                },
                mode: WRITEPROTECT_MODE_DONTWAKE,
            };
            // SAFETY: UFFDIO_WRITEPROTECT reads one uffdio_writeprotect on
            // this thread's stack.
            unsafe { libc::ioctl(s.fd.as_raw_fd(), kio::UFFDIO_WRITEPROTECT as _, &mut w) };
            mark_addr(page);
            FAULTS.fetch_add(1, Ordering::Relaxed);
            let mut r = k::uffdio_range {
                start: page as u64,
                len: s.ps as u64,
            };
            // SAFETY: UFFDIO_WAKE reads one uffdio_range on this stack.
            unsafe { libc::ioctl(s.fd.as_raw_fd(), kio::UFFDIO_WAKE as _, &mut r) };
        }
    }
}

impl Drop for UffdTracker {
    fn drop(&mut self) {
        // SAFETY: writes one byte from a local to our own pipe.
        unsafe {
            libc::write(
                self.wake.as_raw_fd(),
                [1u8].as_ptr() as *const libc::c_void,
                1,
            )
        };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Tracker for UffdTracker {
    fn name(&self) -> &'static str {
        "userfaultfd"
    }

    fn track(&self, r: Range) -> Result<Range> {
        let ps = self.shared.ps;
        let len = r.pages * ps;
        let mut reg = k::uffdio_register {
            range: k::uffdio_range {
                start: r.start as u64,
                len: len as u64,
            },
            mode: u64::from(k::UFFDIO_REGISTER_MODE_WP),
            ioctls: 0,
        };
        // SAFETY: UFFDIO_REGISTER reads and writes one uffdio_register.
        let rc = unsafe {
            libc::ioctl(
                self.shared.fd.as_raw_fd(),
                kio::UFFDIO_REGISTER as _,
                &mut reg,
            )
        };
        if rc != 0 {
            return Err(os_err(&format!(
                "UFFDIO_REGISTER {:#x}+{len} (anonymous private memory only)",
                r.start
            )));
        }
        if !self.shared.wp_unpopulated {
            for p in 0..r.pages {
                // SAFETY: the range is the job's registered, readable
                // memory; a volatile read maps the page (the zero page when
                // never written) so the protection has an entry to live in.
                unsafe { std::ptr::read_volatile((r.start + p * ps) as *const u8) };
            }
        }
        slot_add(r)
    }

    fn untrack(&self, r: Range) -> Result<()> {
        let ps = self.shared.ps;
        slot_remove(r)?;
        let (start, end) = (r.start, r.start + r.pages * ps);
        // A first or last page shared with another region stays registered
        // for it (slot_remove marked it dirty there).
        let shared = |p: usize| mark_addr(p).is_some();
        let lo = if shared(start) { start + ps } else { start };
        let hi = if end - ps > start && shared(end - ps) {
            end - ps
        } else {
            end
        };
        self.shared.wp(start, end - start, false)?;
        if lo < hi {
            let mut range = k::uffdio_range {
                start: lo as u64,
                len: (hi - lo) as u64,
            };
            // SAFETY: UFFDIO_UNREGISTER reads one uffdio_range.
            let rc = unsafe {
                libc::ioctl(
                    self.shared.fd.as_raw_fd(),
                    kio::UFFDIO_UNREGISTER as _,
                    &mut range,
                )
            };
            if rc != 0 {
                return Err(os_err("UFFDIO_UNREGISTER"));
            }
        }
        Ok(())
    }

    fn collect(&self, r: Range, out: &mut Vec<usize>) -> Result<()> {
        let ps = self.shared.ps;
        let first = out.len();
        slot_take(r, out)?;
        runs(&out[first..], |i, n| {
            self.shared.wp(r.start + i * ps, n * ps, true)
        })
    }

    fn mark_dirty(&self, r: Range, first: usize, count: usize) -> Result<()> {
        let ps = self.shared.ps;
        let n = slot_mark(r, first, count)?;
        self.shared.wp(r.start + first * ps, n * ps, false)
    }

    fn faults(&self) -> u64 {
        FAULTS.load(Ordering::Relaxed)
    }

    fn vma_protected(&self) -> bool {
        false
    }

    fn protect_again(&self, r: Range, pages: &[usize]) -> Result<()> {
        // The checkpoint copied these pages, so each has a page table
        // entry (a discarded page reads as the zero page) to carry the bit.
        let ps = self.shared.ps;
        runs(pages, |i, n| self.shared.wp(r.start + i * ps, n * ps, true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the kernel offers write-protect userfaultfd (this project's CI
    /// does: Linux 6.x, root), the tracker behaves as the mprotect one. A
    /// kernel without it is reported, not passed silently.
    #[test]
    fn userfaultfd_records_first_writes_and_forgets_them_at_collect() {
        match UffdTracker::new() {
            Ok(t) => crate::job::tracker::tests::exercise(&t),
            Err(e) if std::env::var_os("REX_REQUIRE_UFFD").is_none() => {
                eprintln!("SKIPPED: userfaultfd write-protect unavailable here: {e}");
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// The probe sees the protection on this kernel (6.x): if it did not,
    /// every kernel would be refused.
    #[test]
    fn the_page_map_shows_the_protection_here() {
        match open_uffd() {
            Ok((fd, _)) => assert!(page_map_shows_protection(&fd, page_size()).unwrap()),
            Err(e) if std::env::var_os("REX_REQUIRE_UFFD").is_none() => {
                eprintln!("SKIPPED: userfaultfd write-protect unavailable here: {e}");
            }
            Err(e) => panic!("{e}"),
        }
    }
}
