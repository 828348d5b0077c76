//! The second dirty-page tracker: userfaultfd write-protect (Linux 5.13 and
//! later for private anonymous memory, 6.7 for every kind but huge pages;
//! `tracker = "userfaultfd"` in rex.toml, and `auto`'s first choice).
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
//! **Asynchronous mode** (Linux 6.7 and later, `UFFD_FEATURE_WP_ASYNC`,
//! taken where the kernel offers it): the kernel resolves each write fault
//! itself, by clearing the page's write-protect bit, with no thread, no
//! context switch and no signal; a write costs a minor fault. A checkpoint
//! then asks the kernel which pages lost the bit and protects them again in
//! the same walk (`PAGEMAP_SCAN` with `PM_SCAN_WP_MATCHING`, atomic per
//! page table), so a write that races the walk is either reported now or
//! faults again and is reported next time. Kernel writes (`read(2)` into a
//! protected page) are resolved the same way, so they need no `rex_dirty`.
//! Where the kernel lacks it, the fault thread below does the same work.
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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// What the fault thread reads (and writes once, `looping`, before any
/// region is protected).
struct Shared {
    fd: OwnedFd,
    ps: usize,
    wp_unpopulated: bool,
    /// The fault thread has entered its loop ([`UffdTracker::with_mode`]
    /// returns only then).
    looping: AtomicBool,
}

/// Who resolves a write fault on a protected page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UffdMode {
    /// The kernel, by itself (`UFFD_FEATURE_WP_ASYNC`, Linux 6.7); the
    /// written pages are read from the page tables at each checkpoint.
    Async,
    /// The library's fault thread, woken for each fault.
    Thread,
}

/// How the written pages are found.
enum Resolver {
    /// The page map, scanned (and protected again) at each collect.
    Async {
        pagemap: std::fs::File,
        /// Pages the collects found written: about one fault each, plus
        /// every page of a region at its first collect and the pages
        /// `mark_dirty` lifted.
        written: AtomicU64,
    },
    /// The fault thread, stopped by a byte on `wake`.
    Thread {
        wake: OwnedFd,
        thread: Option<JoinHandle<()>>,
    },
}

/// The userfaultfd write-protect tracker.
pub struct UffdTracker {
    shared: Arc<Shared>,
    resolver: Resolver,
}

impl std::fmt::Debug for UffdTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UffdTracker")
            .field("mode", &self.mode())
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

/// A userfaultfd with the write-protect API (asynchronous with `async_wp`,
/// which also requires `WP_UNPOPULATED`), or why not.
fn open_uffd(async_wp: bool) -> Result<(OwnedFd, bool)> {
    let base = (libc::O_CLOEXEC | libc::O_NONBLOCK) as libc::c_long;
    let mut last = None;
    // Kernel-mode faults too where allowed; else user mode only. With
    // WP_UNPOPULATED where the kernel has it; else without.
    for user_only in [false, true] {
        for unpopulated in [true, false] {
            if async_wp && !unpopulated {
                continue;
            }
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
            if async_wp {
                features |= u64::from(k::UFFD_FEATURE_WP_ASYNC);
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

/// Registers `len` bytes at `start` for write protection.
fn register(fd: &OwnedFd, start: usize, len: usize) -> std::io::Result<()> {
    let mut reg = k::uffdio_register {
        range: k::uffdio_range {
            start: start as u64,
            len: len as u64,
        },
        mode: u64::from(k::UFFDIO_REGISTER_MODE_WP),
        ioctls: 0,
    };
    // SAFETY: UFFDIO_REGISTER reads and writes one uffdio_register.
    if unsafe { libc::ioctl(fd.as_raw_fd(), kio::UFFDIO_REGISTER as _, &mut reg) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC`: protect the pages
/// reported, and refuse (EPERM) a range not registered in asynchronous
/// mode rather than report nothing for it.
const SCAN_AND_PROTECT: u64 = (k::PM_SCAN_WP_MATCHING | k::PM_SCAN_CHECK_WPASYNC) as u64;

/// Hands `f` the written pages of `start .. start + len`, as page regions,
/// each protected again as it is reported; `false` where the kernel lacks
/// or refuses the scan (a range not registered in asynchronous mode).
fn scan_written(
    pagemap: &std::fs::File,
    start: usize,
    len: usize,
    mut f: impl FnMut(usize, usize),
) -> Result<bool> {
    let written = u64::from(k::PAGE_IS_WRITTEN);
    let select = super::audit::Select {
        inverted: 0,
        mask: written,
        anyof: 0,
        returned: written,
    };
    super::audit::pagemap_scan(
        pagemap,
        start as u64,
        (start + len) as u64,
        SCAN_AND_PROTECT,
        select,
        |r| f(r.start as usize, r.end as usize),
    )
}

/// Whether a userfaultfd opened with `WP_ASYNC` works as that mode needs
/// here: on a page of its own, a write clears the protection without any
/// thread resolving it, the scan reports the page and protects it again,
/// and a second scan reports nothing. A kernel (or a sandbox: gVisor,
/// seccomp) that fails any step gets the fault thread instead.
fn async_works(fd: &OwnedFd, pagemap: &std::fs::File, ps: usize) -> Result<bool> {
    let page = super::tracker::map_anonymous(ps)?;
    let probe = || -> Result<bool> {
        if register(fd, page, ps).is_err() {
            return Ok(false);
        }
        let mut seen = Vec::new();
        let scan = |seen: &mut Vec<(usize, usize)>| {
            seen.clear();
            scan_written(pagemap, page, ps, |a, b| seen.push((a, b)))
        };
        // Never touched: protected by the first scan (a marker).
        if !scan(&mut seen)? {
            return Ok(false);
        }
        // SAFETY: our own fresh page, registered in asynchronous mode: the
        // kernel resolves the write fault itself.
        unsafe { std::ptr::write_volatile(page as *mut u8, 1) };
        if !scan(&mut seen)? || seen != [(page, page + ps)] {
            return Ok(false);
        }
        if !scan(&mut seen)? || !seen.is_empty() {
            return Ok(false);
        }
        // SAFETY: as above.
        unsafe { std::ptr::write_volatile(page as *mut u8, 2) };
        Ok(scan(&mut seen)? && seen == [(page, page + ps)])
    };
    let works = probe();
    // SAFETY: the probe's own page, unmapped once (which also ends its
    // registration); nothing else refers to it.
    unsafe { super::tracker::unmap_anonymous(page, ps) };
    works
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
    /// Opens a userfaultfd with write-protect support, in asynchronous
    /// mode where the kernel offers it and else with a thread that resolves
    /// its faults; fails where the kernel does not offer it (or forbids it:
    /// `vm.unprivileged_userfaultfd`), or where its page map does not show
    /// the protection (before Linux 5.13).
    pub fn new() -> Result<UffdTracker> {
        match UffdTracker::with_mode(UffdMode::Async) {
            Ok(t) => Ok(t),
            Err(_) => UffdTracker::with_mode(UffdMode::Thread),
        }
    }

    /// The tracker in `mode`, or why this kernel cannot give it.
    pub fn with_mode(mode: UffdMode) -> Result<UffdTracker> {
        let ps = page_size();
        if mode == UffdMode::Async {
            let (fd, wp_unpopulated) = open_uffd(true)?;
            let pagemap = std::fs::File::open(super::audit::PAGEMAP).map_err(|e| {
                Error::Invalid(format!("userfaultfd: {}: {e}", super::audit::PAGEMAP))
            })?;
            if !async_works(&fd, &pagemap, ps)? {
                return Err(Error::Invalid(
                    "userfaultfd: asynchronous write protection (PAGEMAP_SCAN with PM_SCAN_WP_MATCHING, Linux 6.7) does not work here".into(),
                ));
            }
            return Ok(UffdTracker {
                shared: Arc::new(Shared {
                    fd,
                    ps,
                    wp_unpopulated,
                    looping: AtomicBool::new(false),
                }),
                resolver: Resolver::Async {
                    pagemap,
                    written: AtomicU64::new(0),
                },
            });
        }
        let (fd, wp_unpopulated) = open_uffd(false)?;
        if !page_map_shows_protection(&fd, ps)? {
            return Err(Error::Invalid(
                "userfaultfd: this kernel's /proc/self/pagemap does not show the write-protect bit (Linux 5.13 and later do), without which every checkpoint would copy every page: use tracker = \"mprotect\"".into(),
            ));
        }
        let (rd, wr) = pipe()?;
        let (ready_rd, ready_wr) = pipe()?;
        let shared = Arc::new(Shared {
            fd,
            ps,
            wp_unpopulated,
            looping: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = super::spawn_quiet(
            std::thread::Builder::new().name("rex-uffd".into()),
            move || fault_loop(&s, rd, ready_wr),
        )
        .map_err(|e| Error::Invalid(format!("userfaultfd: start thread: {e}")))?;
        // Returns only once the thread runs its loop. Starting a thread
        // writes the heap on the new thread (the runtime's handle of it,
        // its thread-locals, a library's dynamic TLS block), after `spawn`
        // has returned here: a region protected meanwhile whose pages hold
        // those bytes would make the thread fault on its own watch and wait
        // for itself, with every writer of that page behind it.
        let mut b = [0u8; 1];
        loop {
            // SAFETY: reads at most one byte into `b`.
            let n = unsafe { libc::read(ready_rd.as_raw_fd(), b.as_mut_ptr().cast(), 1) };
            match n {
                1 => break,
                0 => {
                    return Err(Error::Invalid(
                        "userfaultfd: the fault thread ended before it started".into(),
                    ));
                }
                _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
                _ => return Err(os_err("wait for the fault thread")),
            }
        }
        Ok(UffdTracker {
            shared,
            resolver: Resolver::Thread {
                wake: wr,
                thread: Some(thread),
            },
        })
    }

    /// Who resolves the write faults.
    pub fn mode(&self) -> UffdMode {
        match self.resolver {
            Resolver::Async { .. } => UffdMode::Async,
            Resolver::Thread { .. } => UffdMode::Thread,
        }
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

/// A pipe, as (read end, write end), closed on exec.
fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut pipe = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(os_err("pipe"));
    }
    // SAFETY: both descriptors were just created and are owned here.
    Ok(unsafe { (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])) })
}

/// The fault thread: says on `ready` that it runs (no heap write after
/// that), then resolves write faults until a byte arrives on `wake`.
fn fault_loop(s: &Shared, wake: OwnedFd, ready: OwnedFd) {
    s.looping.store(true, Ordering::Release);
    // SAFETY: writes one byte from a local to our own pipe; closing it is
    // a system call, no heap write.
    unsafe { libc::write(ready.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
    drop(ready);
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
        let Resolver::Thread { wake, thread } = &mut self.resolver else {
            return;
        };
        // Its end writes the heap again (its result, its handles): the
        // owner untracks every region first (`Rex` does), so that no page
        // is protected any more when it does.
        // SAFETY: writes one byte from a local to our own pipe.
        unsafe { libc::write(wake.as_raw_fd(), [1u8].as_ptr() as *const libc::c_void, 1) };
        if let Some(t) = thread.take() {
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
        if let Err(e) = register(&self.shared.fd, r.start, len) {
            return Err(Error::Invalid(format!(
                "userfaultfd: UFFDIO_REGISTER {:#x}+{len} (private anonymous memory only, before Linux 6.7): {e}",
                r.start
            )));
        }
        // Undoing the registration leaves a first or last page that another
        // region shares registered for it (helper-70: a refused region
        // unregistered such a page, and every later checkpoint of the
        // other region failed). Marking it dirty there is harmless: at
        // worst one page more in its next checkpoint.
        let unregister = || {
            let end = r.start + len;
            let shared = |p: usize| mark_addr(p).is_some();
            let lo = if shared(r.start) {
                r.start + ps
            } else {
                r.start
            };
            let hi = if end - ps > r.start && shared(end - ps) {
                end - ps
            } else {
                end
            };
            if lo >= hi {
                return;
            }
            let mut range = k::uffdio_range {
                start: lo as u64,
                len: (hi - lo) as u64,
            };
            // SAFETY: UFFDIO_UNREGISTER reads one uffdio_range.
            unsafe {
                libc::ioctl(
                    self.shared.fd.as_raw_fd(),
                    kio::UFFDIO_UNREGISTER as _,
                    &mut range,
                )
            };
        };
        // Protection page by page must work at both ends: memory of larger
        // pages (hugetlbfs) refuses it, where the fault thread's first
        // write would wait for ever (helper-53) and a scan covering part
        // of a huge page leaves it out (helper-54). The probe keeps what
        // each end page says for a region sharing it: the thread mode
        // protects it (a write then faults, recorded in every slot that
        // covers the page), the kernel-resolved mode lifts the protection
        // (the page then reads as written at the next scan).
        let protect = self.mode() == UffdMode::Thread;
        for p in [r.start, r.start + len - ps] {
            if let Err(e) = self.shared.wp(p, ps, protect) {
                unregister();
                return Err(Error::Invalid(format!(
                    "userfaultfd: {:#x}+{len} cannot be write-protected page by page (huge pages?): {e}; use tracker = \"mprotect\" (or \"auto\", which does)",
                    r.start
                )));
            }
        }
        if !self.shared.wp_unpopulated {
            for p in 0..r.pages {
                // SAFETY: the range is the job's registered, readable
                // memory; a volatile read maps the page (the zero page when
                // never written) so the protection has an entry to live in.
                unsafe { std::ptr::read_volatile((r.start + p * ps) as *const u8) };
            }
        }
        slot_add(r, false).inspect_err(|_| unregister())
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
        let Resolver::Async {
            pagemap,
            written: count,
        } = &self.resolver
        else {
            let first = out.len();
            slot_take(r, out)?;
            return runs(&out[first..], |i, n| {
                self.shared.wp(r.start + i * ps, n * ps, true)
            });
        };
        // The pages the kernel let be written, protected again as they
        // are reported (those `mark_dirty` lifted the protection of too).
        let mut found = Vec::new();
        let scanned = scan_written(pagemap, r.start, r.pages * ps, |a, b| {
            found.extend((a - r.start) / ps..(b - r.start).div_ceil(ps));
        })
        .map_err(|e| Error::Invalid(format!("userfaultfd: {e}")))?;
        if !scanned {
            // Unlike the probe's page, this range is not (or no longer)
            // registered in asynchronous mode (PM_SCAN_CHECK_WPASYNC).
            return Err(Error::Invalid(format!(
                "userfaultfd: PAGEMAP_SCAN {:#x}+{}: refused (that memory is no longer registered: was a region's memory replaced, by mmap MAP_FIXED or mremap? unregister the region and register it again)",
                r.start,
                r.pages * ps
            )));
        }
        count.fetch_add(found.len() as u64, Ordering::Relaxed);
        // A first or last page may be shared with another region (two
        // unaligned regions on one page): this scan has just protected it
        // again, so the other region's scan would find it clean (helper-53:
        // its write was lost). Marked in every slot that covers it, as a
        // fault does under the other modes; this slot's mark is taken next.
        let edges = [Some(0), r.pages.checked_sub(1)];
        for k in edges.into_iter().flatten() {
            if found.binary_search(&k).is_ok() {
                mark_addr(r.start + k * ps);
            }
        }
        let first = out.len();
        slot_take(r, out)?;
        out.extend_from_slice(&found);
        out[first..].sort_unstable();
        let mut tail = out.split_off(first);
        tail.dedup();
        out.append(&mut tail);
        Ok(())
    }

    fn mark_dirty(&self, r: Range, first: usize, count: usize) -> Result<()> {
        let ps = self.shared.ps;
        let n = slot_mark(r, first, count)?;
        self.shared.wp(r.start + first * ps, n * ps, false)
    }

    /// In asynchronous mode the kernel counts no faults: the pages the
    /// collects found written stand for them (see `Resolver::Async`).
    fn faults(&self) -> u64 {
        match &self.resolver {
            Resolver::Async { written, .. } => written.load(Ordering::Relaxed),
            Resolver::Thread { .. } => FAULTS.load(Ordering::Relaxed),
        }
    }

    fn vma_protected(&self, _: Range) -> bool {
        false
    }

    fn protect_again(&self, r: Range, pages: &[usize]) -> Result<()> {
        // The checkpoint copied these pages, so each has a page table
        // entry (a discarded page reads as the zero page) to carry the bit.
        let ps = self.shared.ps;
        runs(pages, |i, n| self.shared.wp(r.start + i * ps, n * ps, true))
    }

    fn holder(&self, _: Range) -> &'static str {
        match self.mode() {
            UffdMode::Async => "userfaultfd",
            UffdMode::Thread => "userfaultfd-thread",
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The tracker in asynchronous mode, or `None` (reported as skipped)
    /// where the kernel lacks it, unless REX_REQUIRE_UFFD is set.
    pub(crate) fn async_or_skip() -> Option<UffdTracker> {
        match UffdTracker::with_mode(UffdMode::Async) {
            Ok(t) => Some(t),
            Err(e) if std::env::var_os("REX_REQUIRE_UFFD").is_none() => {
                eprintln!("SKIPPED: asynchronous userfaultfd unavailable here: {e}");
                None
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// The fault thread's tracker is returned only once its thread runs
    /// its loop, past the heap writes of a thread's start, which a region
    /// protected before them could hold (the thread would wait for itself).
    /// Without the wait, `spawn` returns before the new thread is scheduled
    /// and the flag is not set yet.
    #[test]
    fn the_fault_thread_runs_its_loop_before_its_tracker_is_returned() {
        for _ in 0..20 {
            match UffdTracker::with_mode(UffdMode::Thread) {
                Ok(t) => assert!(t.shared.looping.load(Ordering::Acquire)),
                Err(e) if std::env::var_os("REX_REQUIRE_UFFD").is_none() => {
                    eprintln!("SKIPPED: userfaultfd write-protect unavailable here: {e}");
                    return;
                }
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// Where the kernel offers write-protect userfaultfd (this project's CI
    /// does: Linux 6.x, root), the tracker behaves as the mprotect one, in
    /// both modes. A kernel without it is reported, not passed silently.
    #[test]
    fn userfaultfd_records_first_writes_and_forgets_them_at_collect() {
        for mode in [UffdMode::Async, UffdMode::Thread] {
            match UffdTracker::with_mode(mode) {
                Ok(t) => {
                    assert_eq!(t.mode(), mode);
                    let holder = match mode {
                        UffdMode::Async => "userfaultfd",
                        UffdMode::Thread => "userfaultfd-thread",
                    };
                    assert_eq!(t.holder(Range::new(0, 1)), holder);
                    crate::job::tracker::tests::exercise(&t)
                }
                Err(e) if std::env::var_os("REX_REQUIRE_UFFD").is_none() => {
                    eprintln!(
                        "SKIPPED: userfaultfd write-protect ({mode:?}) unavailable here: {e}"
                    );
                }
                Err(e) => panic!("{mode:?}: {e}"),
            }
        }
    }

    /// In asynchronous mode a kernel write (`read(2)` from a pipe into a
    /// protected page) needs no `rex_dirty`: it succeeds and the page is
    /// reported; pages never touched are not, and a collect of memory no
    /// longer registered fails instead of reporting nothing.
    #[test]
    fn asynchronous_mode_sees_kernel_writes_and_refuses_unregistered_memory() {
        let Some(t) = async_or_skip() else {
            return;
        };
        let ps = page_size();
        let pages = 64;
        let m = crate::job::tracker::map_anonymous(pages * ps).unwrap();
        let r = t.track(Range::new(m, pages)).unwrap();
        let mut out = Vec::new();
        t.collect(r, &mut out).unwrap();
        out.clear();
        let mut p = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array.
        assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        let msg = [7u8; 100];
        // SAFETY: writes 100 bytes of a local to our pipe, then reads them
        // into page 40 of our mapping (protected: the kernel resolves it).
        let got = unsafe {
            libc::write(p[1], msg.as_ptr().cast(), msg.len());
            libc::read(p[0], (m + 40 * ps + 10) as *mut libc::c_void, msg.len())
        };
        assert_eq!(got, 100, "{}", std::io::Error::last_os_error());
        // SAFETY: closes our own pipe; reads our mapping.
        unsafe {
            libc::close(p[0]);
            libc::close(p[1]);
            assert_eq!(*((m + 40 * ps + 109) as *const u8), 7);
        }
        t.collect(r, &mut out).unwrap();
        assert_eq!(out, vec![40]);
        out.clear();
        t.collect(r, &mut out).unwrap();
        assert!(out.is_empty(), "{out:?}");
        // The memory replaced behind the tracker's back: no longer
        // registered.
        // SAFETY: our own mapping, replaced by a fresh one at the same
        // place; nothing else refers to it.
        let again = unsafe {
            libc::mmap(
                m as *mut libc::c_void,
                pages * ps,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        assert_eq!(again as usize, m);
        let e = t.collect(r, &mut out).unwrap_err().to_string();
        assert!(e.contains("no longer registered"), "{e}");
        crate::job::tracker::slot_remove(r).unwrap();
        // SAFETY: our own mapping, unmapped once.
        unsafe { crate::job::tracker::unmap_anonymous(m, pages * ps) };
    }

    /// The probe sees the protection on this kernel (6.x): if it did not,
    /// every kernel would be refused.
    #[test]
    fn the_page_map_shows_the_protection_here() {
        match open_uffd(false) {
            Ok((fd, _)) => assert!(page_map_shows_protection(&fd, page_size()).unwrap()),
            Err(e) if std::env::var_os("REX_REQUIRE_UFFD").is_none() => {
                eprintln!("SKIPPED: userfaultfd write-protect unavailable here: {e}");
            }
            Err(e) => panic!("{e}"),
        }
    }
}
