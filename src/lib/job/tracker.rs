//! Dirty-page tracking for a job that checkpoints itself: which pages of
//! its registered memory were written since the previous checkpoint.
//!
//! [`Tracker`] is the interface; [`MprotectTracker`] is the REX paper's AIC
//! tracker (§3): after a checkpoint every tracked page is write-protected
//! with `mprotect(PROT_READ)`; the first write to a page raises SIGSEGV, the
//! handler records the page in a bitmap and write-enables it, and the write
//! is retried by the CPU. Later writes to the page cost nothing until the
//! next checkpoint protects it again. A second tracker, userfaultfd
//! write-protect, implements the same trait in `uffd.rs`.
//!
//! The pitfalls, and how they are handled:
//!
//! * **The handler is async-signal-safe.** It reads a fixed table of slots
//!   through atomics, sets bits with `fetch_or`, and calls `mprotect` (a
//!   system call). It never allocates, locks or prints. Slots are filled and
//!   emptied by ordinary code under a mutex; a slot's bitmap is freed only
//!   after no handler can still be reading it (a count of handlers in
//!   flight).
//! * **Faults that are not ours** (a real bug, another library's guard page,
//!   Rust's stack-overflow guard; a read of registered memory the job made
//!   unreadable, where the CPU tells reads from writes; any fault in memory
//!   the userfaultfd tracker holds, whose protection there is the job's own)
//!   go to the handler installed before ours:
//!   its `sa_sigaction` or `sa_handler` is called as the kernel would have
//!   called it: with its `sa_mask` and SIGSEGV blocked unless it asked for
//!   `SA_NODEFER` (which a handler leaving by `siglongjmp` relies on), on
//!   the alternate stack only if it asked for `SA_ONSTACK` (ours then
//!   runs there too), once only with `SA_RESETHAND`; a SIGSEGV sent by
//!   `kill` that it ignores is ignored. If it was the default,
//!   the default is restored and the faulting instruction re-runs, so the
//!   process dies of SIGSEGV with its core dump, as without rexctl.
//! * **A fault whose range went meanwhile.** A write that faulted while
//!   its page was protected may be handled after another thread's
//!   [`Tracker::untrack`] emptied the slot (a region's page shared with
//!   the heap, which the library's own threads write). `untrack` makes the
//!   pages writable before it empties the slot, and the handler retries a
//!   write fault outside every slot once per slot removal before passing
//!   it on: a page still protected faults again, and only then is the
//!   fault the job's.
//! * **Several threads** may write at once: two threads faulting on one page
//!   both set its bit and both write-enable it, which is idempotent. Taking
//!   a checkpoint needs the job's writers quiet (as with every checkpoint
//!   library): [`Tracker::collect`] must not race with writes.
//! * **Kernel writes.** A system call that writes into a write-protected
//!   page (`read(2)` into a buffer in a region) does not fault: it fails
//!   with `EFAULT`. The job declares such buffers first with `rex_dirty`
//!   ([`Tracker::mark_dirty`]), which records their pages and write-enables
//!   them until the next checkpoint.
//! * **`vm.max_map_count`.** Every write-enabled page inside a protected
//!   range splits the range's mapping (VMA) in up to three. A checkpoint
//!   re-protects the dirty pages, which merges them back, so the count
//!   stays at about twice the dirty runs. When `mprotect` still fails with
//!   `ENOMEM` (the map count is exhausted), the handler falls back to
//!   write-enabling the whole slot and marking all of it dirty: the next
//!   checkpoint then carries the whole region, which is correct, only
//!   larger.
//! * **Pages shared by two regions** (unaligned `rex_protect` of adjacent
//!   heap buffers): both slots cover the page and the handler marks it in
//!   both. Forgetting one region marks the shared pages dirty in the other
//!   before write-enabling them, so no write goes unseen.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use crate::error::{Error, Result};

/// A tracked range of whole pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// First byte (page-aligned).
    pub start: usize,
    /// Pages.
    pub pages: usize,
    /// The slot [`Tracker::track`] gave it (two small regions on one page
    /// have equal ranges but their own slots).
    pub slot: usize,
}

impl Range {
    /// A range not tracked yet.
    pub fn new(start: usize, pages: usize) -> Range {
        Range {
            start,
            pages,
            slot: usize::MAX,
        }
    }
}

/// A dirty-page tracker over page-aligned ranges of the process's memory.
pub trait Tracker: Send + Sync {
    /// The tracker's name in rex.toml (`tracker = "..."`).
    fn name(&self) -> &'static str;
    /// Starts tracking `r`: from now on, writes to it are recorded. All its
    /// pages start dirty (nothing of them is in a checkpoint yet). Returns
    /// the range with its slot, which the other calls take.
    fn track(&self, r: Range) -> Result<Range>;
    /// Stops tracking `r` (tracked before) and write-enables it.
    fn untrack(&self, r: Range) -> Result<()>;
    /// Appends to `out` the indexes (from `r.start`) of the pages of `r`
    /// written since the last collect (or since `track`), forgets them and
    /// write-protects them again. Callers make sure no thread writes `r`
    /// meanwhile.
    fn collect(&self, r: Range, out: &mut Vec<usize>) -> Result<()>;
    /// Records pages `first .. first + count` of `r` as written and
    /// write-enables them (for writes the tracker cannot see: the kernel's).
    fn mark_dirty(&self, r: Range, first: usize, count: usize) -> Result<()>;
    /// Write faults handled so far (under the kernel-resolved userfaultfd
    /// mode, the pages its collects found written).
    fn faults(&self) -> u64;
    /// Whether the clean pages of `r` are kept in read-only mappings, so
    /// that a page of a writable mapping after [`collect`](Self::collect)
    /// was write-enabled behind the tracker's back (see `audit.rs`).
    fn vma_protected(&self, r: Range) -> bool;
    /// Write-protects pages `pages` (indexes from `r.start`, ascending) of
    /// `r` again without recording them: pages a checkpoint found changed
    /// unseen (`audit.rs`) and has just copied, so that later writes to
    /// them are seen.
    fn protect_again(&self, r: Range, pages: &[usize]) -> Result<()>;
    /// The way `r` is watched, as rex.toml names trackers: this tracker's
    /// name, or for one that chooses per region (`auto`) the one it chose;
    /// `userfaultfd-thread` where the library's thread resolves the faults.
    fn holder(&self, r: Range) -> &'static str {
        let _ = r;
        self.name()
    }
}

/// The system's page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let ps = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if ps > 0 { ps as usize } else { 4096 }
}

/// `si_code` of a fault on a page whose protection forbids the access
/// (asm-generic/siginfo.h; the libc crate does not export it).
const SEGV_ACCERR: libc::c_int = 2;

/// Most ranges tracked at once (the handler scans a fixed table).
pub const MAX_SLOTS: usize = 4096;

struct Slot {
    start: AtomicUsize,
    end: AtomicUsize,
    bits: AtomicPtr<AtomicU64>,
    words: AtomicUsize,
    /// Whether its write faults come as SIGSEGV (the mprotect tracker's
    /// slots), so that the handler resolves them. A userfaultfd tracker's
    /// write faults never do: a SIGSEGV in its memory is the job's own.
    signal: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_SLOT: Slot = Slot {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    bits: AtomicPtr::new(std::ptr::null_mut()),
    words: AtomicUsize::new(0),
    signal: AtomicBool::new(false),
};

static SLOTS: [Slot; MAX_SLOTS] = [EMPTY_SLOT; MAX_SLOTS];
/// One past the highest slot ever used: the handler scans `0..HIGH`.
static HIGH: AtomicUsize = AtomicUsize::new(0);
/// Handlers running now (a bitmap is freed only when this is 0).
static IN_HANDLER: AtomicUsize = AtomicUsize::new(0);
static FAULTS: AtomicU64 = AtomicU64::new(0);
static PAGE: AtomicUsize = AtomicUsize::new(4096);
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Whether our SIGSEGV handler runs on a thread's alternate signal stack
/// (`SA_ONSTACK`; not when a handler installed before ours runs without).
static ON_STACK: AtomicBool = AtomicBool::new(false);

/// Bytes of the alternate signal stack given to a thread that registers a
/// region on its own stack ([`ensure_alt_stack`]).
const ALT_STACK_LEN: usize = 64 << 10;

/// The calling thread's stack, `(low, high)`.
fn thread_stack() -> Option<(usize, usize)> {
    // SAFETY: pthread_getattr_np fills the zeroed attribute object, which
    // is destroyed after pthread_attr_getstack read it; both only write
    // through the pointers given.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let rc = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        (rc == 0).then(|| (addr as usize, addr as usize + size))
    }
}

/// A region on the calling thread's own stack shares its first page with
/// the deeper frames: a write there faults with the stack pointer in a
/// write-protected page, where the kernel cannot push the signal frame,
/// and kills the process (helper-70: a C job with a region in `main`'s
/// frame, "a stack frame that outlives the checkpoints" as rex(3) allows,
/// died at its second checkpoint). Our handler runs with `SA_ONSTACK`, so
/// the thread gets an alternate signal stack of its own (64 KiB, kept for
/// the thread's life) when it has none; a Rust thread has one already.
fn ensure_alt_stack(r: Range) -> Result<()> {
    let end = r.start + r.pages * PAGE.load(Ordering::Relaxed);
    match thread_stack() {
        Some((lo, hi)) if r.start < hi && lo < end => {}
        _ => return Ok(()),
    }
    // SAFETY: sigaltstack only reads `new` and writes `old`, both valid;
    // the mapping given to it is ours, never unmapped (the thread may take
    // a signal on it at any time until it exits).
    unsafe {
        let mut old: libc::stack_t = std::mem::zeroed();
        if libc::sigaltstack(std::ptr::null(), &mut old) == 0
            && old.ss_flags & libc::SS_DISABLE == 0
        {
            return Ok(()); // the thread's own, or the one given before
        }
        if !ON_STACK.load(Ordering::Acquire) {
            return Err(Error::Invalid(format!(
                "mprotect: the region at {:#x} lies on this thread's stack, and the SIGSEGV handler installed before librex runs without SA_ONSTACK, so a write fault there could not be handled; register memory off the stack (rex_alloc, malloc), or use tracker = \"userfaultfd\"",
                r.start
            )));
        }
        let p = libc::mmap(
            std::ptr::null_mut(),
            ALT_STACK_LEN,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return Err(Error::Invalid(format!(
                "mprotect: cannot allocate an alternate signal stack for a region on this thread's stack: {}",
                std::io::Error::last_os_error()
            )));
        }
        let st = libc::stack_t {
            ss_sp: p,
            ss_flags: 0,
            ss_size: ALT_STACK_LEN,
        };
        if libc::sigaltstack(&st, std::ptr::null_mut()) != 0 {
            let e = std::io::Error::last_os_error();
            libc::munmap(p, ALT_STACK_LEN);
            return Err(Error::Invalid(format!(
                "mprotect: cannot install an alternate signal stack for a region on this thread's stack: {e}"
            )));
        }
    }
    Ok(())
}
/// The SIGSEGV action before ours, in one of two buffers: written before
/// ours is installed, into the buffer not current, since ours is installed
/// again after the last tracker gave that action back (`rex_finalize`,
/// then `rex_init`: the job may have installed its own handler between,
/// helper-101). [`OLD_INDEX`] says which buffer is current; a buffer is
/// rewritten only two installs later, long after any handler that read it
/// returned.
static mut OLD_ACTIONS: [std::mem::MaybeUninit<libc::sigaction>; 2] =
    [std::mem::MaybeUninit::uninit(); 2];
/// The current buffer of [`OLD_ACTIONS`].
static OLD_INDEX: AtomicUsize = AtomicUsize::new(0);
/// Slot removals so far, bumped before a slot is emptied: a write fault
/// outside every slot is retried once per removal (see [`handler`]).
static REMOVALS: AtomicU64 = AtomicU64::new(0);
/// Per thread (by thread id), the page whose write fault lay outside
/// every slot, with the removal count then (`page | removals << 44`): the
/// instruction is retried once, and a second fault of the same page by
/// the same thread with no removal between is the job's own. Per thread:
/// two threads faulting on one page each retry (helper-103: the second
/// found the first's key and passed the fault on); threads whose ids
/// share an entry only retry more. Without it, a fault on a page a concurrent
/// [`Tracker::untrack`] write-enabled after the fault went to the job's
/// handler, or with none reset SIGSEGV to the default and the next
/// tracked write killed the job (helper-101: a malloc'd region shares its
/// page with the heap, written by the library's own threads).
static RETRIED: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];
/// The action before ours had `SA_RESETHAND` and has run once: the kernel
/// would have reset it to the default, so it is not called again (ours
/// stays installed for the tracker's own faults).
static OLD_RESET: AtomicBool = AtomicBool::new(false);
/// Serializes slot changes (never taken by the handler).
static TABLE: Mutex<()> = Mutex::new(());

/// A fresh private anonymous mapping of `len` bytes (zeroed, page-aligned),
/// as the address of its first byte. Used for the trackers' bitmaps, the
/// memory of `rex_alloc`, and by tests and benches.
pub fn map_anonymous(len: usize) -> Result<usize> {
    // SAFETY: a fresh private anonymous mapping; no existing memory is
    // touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len.max(1),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Error::Invalid(format!(
            "cannot allocate {len} bytes (mmap): {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(p as usize)
}

/// Unmaps what [`map_anonymous`] mapped.
///
/// # Safety
/// `addr` and `len` are those of a mapping from [`map_anonymous`] that
/// nothing uses any more.
pub unsafe fn unmap_anonymous(addr: usize, len: usize) {
    // SAFETY: the caller's promise.
    unsafe { libc::munmap(addr as *mut libc::c_void, len.max(1)) };
}

/// A bitmap of `words` words in its own anonymous mapping: never in the
/// heap, whose pages may share a page with a job's unaligned region and be
/// write-protected themselves (the handler writing its own bitmap would
/// then fault inside the handler). Zero pages are valid AtomicU64s.
fn map_bits(words: usize) -> Result<*mut AtomicU64> {
    Ok(map_anonymous(words * 8)? as *mut AtomicU64)
}

fn find(r: Range) -> Option<usize> {
    let ps = PAGE.load(Ordering::Relaxed);
    let i = r.slot;
    (i < HIGH.load(Ordering::Acquire)
        && SLOTS[i].start.load(Ordering::Acquire) == r.start
        && SLOTS[i].end.load(Ordering::Acquire) == r.start + r.pages * ps)
        .then_some(i)
}

fn find_or_fail(r: Range) -> Result<usize> {
    find(r).ok_or_else(|| {
        Error::Invalid(format!(
            "range {:#x} of {} pages is not tracked",
            r.start, r.pages
        ))
    })
}

fn bits(i: usize) -> &'static [AtomicU64] {
    let p = SLOTS[i].bits.load(Ordering::Acquire);
    let n = SLOTS[i].words.load(Ordering::Acquire);
    // SAFETY: a slot's bitmap is a mapping of `words` words made by
    // `map_bits`, unmapped only by `slot_remove` under TABLE (which every
    // caller of this function holds) after the slot is emptied.
    unsafe { std::slice::from_raw_parts(p, n) }
}

/// Adds a slot for `r`, all pages dirty (nothing of them is checkpointed
/// yet). Shared by both trackers: `signal` when its write faults come as
/// SIGSEGV (the mprotect tracker's), for the handler to resolve.
pub(crate) fn slot_add(r: Range, signal: bool) -> Result<Range> {
    let _g = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    PAGE.store(page_size(), Ordering::Relaxed);
    let ps = PAGE.load(Ordering::Relaxed);
    let high = HIGH.load(Ordering::Acquire);
    let i = (0..high)
        .find(|&i| SLOTS[i].end.load(Ordering::Acquire) == 0)
        .or_else(|| (high < MAX_SLOTS).then_some(high))
        .ok_or_else(|| Error::Invalid(format!("more than {MAX_SLOTS} regions tracked at once")))?;
    let words = r.pages.div_ceil(64);
    let p = map_bits(words)?;
    for w in 0..words {
        // SAFETY: inside the fresh mapping of `words` words.
        unsafe { (*p.add(w)).store(!0, Ordering::Relaxed) };
    }
    SLOTS[i].words.store(words, Ordering::Release);
    SLOTS[i].bits.store(p, Ordering::Release);
    SLOTS[i].signal.store(signal, Ordering::Release);
    SLOTS[i].start.store(r.start, Ordering::Release);
    SLOTS[i]
        .end
        .store(r.start + r.pages * ps, Ordering::Release);
    if i == high {
        HIGH.store(high + 1, Ordering::Release);
    }
    Ok(Range { slot: i, ..r })
}

/// Removes the slot of `r`; pages it shares with other slots are marked
/// dirty there (they are about to become writable).
pub(crate) fn slot_remove(r: Range) -> Result<()> {
    let _g = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let ps = PAGE.load(Ordering::Relaxed);
    let i = find_or_fail(r)?;
    let (start, end) = (r.start, r.start + r.pages * ps);
    for (j, slot) in SLOTS.iter().enumerate().take(HIGH.load(Ordering::Acquire)) {
        let (s, e) = (
            slot.start.load(Ordering::Acquire),
            slot.end.load(Ordering::Acquire),
        );
        if j == i || e == 0 || e <= start || s >= end {
            continue;
        }
        let b = bits(j);
        let mut a = s.max(start);
        while a < e.min(end) {
            let k = (a - s) / ps;
            b[k / 64].fetch_or(1 << (k % 64), Ordering::SeqCst);
            a += ps;
        }
    }
    // Before the slot goes: a handler that finds no slot for its fault
    // then sees the new count (and retries the write).
    REMOVALS.fetch_add(1, Ordering::SeqCst);
    SLOTS[i].end.store(0, Ordering::SeqCst);
    SLOTS[i].start.store(0, Ordering::SeqCst);
    SLOTS[i].signal.store(false, Ordering::SeqCst);
    let p = SLOTS[i].bits.swap(std::ptr::null_mut(), Ordering::SeqCst);
    let words = SLOTS[i].words.swap(0, Ordering::SeqCst);
    // A handler that read the slot before it was emptied may still use the
    // bitmap: wait until none runs.
    while IN_HANDLER.load(Ordering::SeqCst) != 0 {
        std::thread::yield_now();
    }
    // SAFETY: the mapping made by `map_bits` for this slot, which no
    // handler or slot user can reach any more.
    unsafe { unmap_anonymous(p as usize, words * 8) };
    Ok(())
}

/// Takes (and clears) the dirty pages of `r`'s slot into `out`.
pub(crate) fn slot_take(r: Range, out: &mut Vec<usize>) -> Result<()> {
    let _g = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let b = bits(find_or_fail(r)?);
    for (w, word) in b.iter().enumerate() {
        let mut v = word.swap(0, Ordering::SeqCst);
        while v != 0 {
            let bit = v.trailing_zeros() as usize;
            v &= v - 1;
            let k = w * 64 + bit;
            if k < r.pages {
                out.push(k);
            }
        }
    }
    Ok(())
}

/// Marks pages `first .. first + count` of `r` dirty; returns the count
/// clamped to the range.
pub(crate) fn slot_mark(r: Range, first: usize, count: usize) -> Result<usize> {
    let _g = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let b = bits(find_or_fail(r)?);
    let end = first.saturating_add(count).min(r.pages);
    for k in first..end {
        b[k / 64].fetch_or(1 << (k % 64), Ordering::SeqCst);
    }
    Ok(end.saturating_sub(first))
}

/// Marks the page holding `addr` dirty in every slot that covers it,
/// without locks or allocation (callable from a signal handler, and from
/// the userfaultfd thread while a faulting thread holds any lock); returns
/// the range of the last slot that covers it.
pub(crate) fn mark_addr(addr: usize) -> Option<(usize, usize)> {
    IN_HANDLER.fetch_add(1, Ordering::SeqCst);
    // Orders the slot loads after the increment, which slot_remove's wait
    // relies on.
    std::sync::atomic::fence(Ordering::SeqCst);
    let ps = PAGE.load(Ordering::Relaxed);
    let page = addr & !(ps - 1);
    let mut hit = None;
    for slot in SLOTS.iter().take(HIGH.load(Ordering::Acquire)) {
        let start = slot.start.load(Ordering::Acquire);
        let end = slot.end.load(Ordering::Acquire);
        if end == 0 || addr < start || addr >= end {
            continue;
        }
        let p = slot.bits.load(Ordering::Acquire);
        let words = slot.words.load(Ordering::Acquire);
        let k = (page - start) / ps;
        if !p.is_null() && k / 64 < words {
            // SAFETY: the bitmap has `words` words and stays mapped while
            // IN_HANDLER is non-zero (slot_remove waits for it).
            unsafe { (*p.add(k / 64)).fetch_or(1 << (k % 64), Ordering::SeqCst) };
            hit = Some((start, end));
        }
    }
    IN_HANDLER.fetch_sub(1, Ordering::SeqCst);
    hit
}

/// Marks every page of every slot that overlaps `start .. end` dirty
/// (lock-free): that whole range is about to become writable.
fn mark_all(start: usize, end: usize) {
    IN_HANDLER.fetch_add(1, Ordering::SeqCst);
    std::sync::atomic::fence(Ordering::SeqCst);
    for slot in SLOTS.iter().take(HIGH.load(Ordering::Acquire)) {
        let (s, e) = (
            slot.start.load(Ordering::SeqCst),
            slot.end.load(Ordering::SeqCst),
        );
        if e == 0 || e <= start || s >= end {
            continue;
        }
        let p = slot.bits.load(Ordering::SeqCst);
        if p.is_null() {
            continue;
        }
        for w in 0..slot.words.load(Ordering::SeqCst) {
            // SAFETY: as in mark_addr.
            unsafe { (*p.add(w)).store(!0, Ordering::SeqCst) };
        }
    }
    IN_HANDLER.fetch_sub(1, Ordering::SeqCst);
}

/// Whether `addr` lies in a range the mprotect tracker protects: that
/// range (lock-free). Ranges of the userfaultfd tracker do not count: its
/// write faults never raise SIGSEGV.
fn covering(addr: usize) -> Option<(usize, usize)> {
    SLOTS
        .iter()
        .take(HIGH.load(Ordering::Acquire))
        .find_map(|slot| {
            // `end` before and after `start`: a slot is filled `start`
            // first and emptied `end` first, so a range read while it
            // changes (`start` 0 with the new `end`: every address below
            // it, helper-103) shows as an `end` that moved, and is skipped.
            let e = slot.end.load(Ordering::SeqCst);
            if e == 0 {
                return None;
            }
            let s = slot.start.load(Ordering::SeqCst);
            (slot.end.load(Ordering::SeqCst) == e
                && addr >= s
                && addr < e
                && slot.signal.load(Ordering::SeqCst))
            .then_some((s, e))
        })
}

/// Whether the fault `ctx` describes was a write, where the CPU says so
/// (x86-64: bit 1 of the page fault's error code); `true` elsewhere. The
/// mprotect tracker leaves pages readable, so a read fault is never its
/// own: a read of memory the job made unreadable goes on to the job's
/// handler or crashes, as it would without librex.
fn write_fault(ctx: *mut libc::c_void) -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        if ctx.is_null() {
            return true;
        }
        // SAFETY: the kernel passes a valid ucontext_t as the third
        // argument of an SA_SIGINFO handler; on x86-64 Linux its saved
        // registers hold the page fault's error code at REG_ERR.
        let err = unsafe {
            (*(ctx as *const libc::ucontext_t)).uc_mcontext.gregs[libc::REG_ERR as usize]
        };
        err & 2 != 0
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        let _ = ctx;
        true
    }
}

/// The mprotect + SIGSEGV tracker (the paper's AIC). The slot table and the
/// signal handler are process-wide.
#[derive(Debug)]
pub struct MprotectTracker {
    _private: (),
}

/// Mprotect trackers alive (changed under TABLE): the handler goes when
/// the last one does.
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// The SIGSEGV action now.
fn current_action() -> Result<libc::sigaction> {
    // SAFETY: a zeroed sigaction is a valid value; sigaction only writes
    // the current action into it.
    unsafe {
        let mut cur: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut cur) != 0 {
            return Err(Error::Invalid(format!(
                "cannot read the SIGSEGV action: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(cur)
    }
}

impl MprotectTracker {
    /// Installs the SIGSEGV handler (unless it is installed) and returns
    /// the tracker.
    pub fn new() -> Result<MprotectTracker> {
        let _g = TABLE.lock().unwrap_or_else(|e| e.into_inner());
        PAGE.store(page_size(), Ordering::Relaxed);
        let cur = current_action()?;
        let ours = cur.sa_sigaction == handler as *const () as usize;
        // Installed once, until the last tracker gives the action before
        // ours back. Not over a handler the job installed after ours while
        // a tracker lived: it may pass what it does not handle to ours
        // (crash reporters do), and ours passing it back would recurse
        // (helper-103). Nor is ours ever recorded as the action before
        // ours (a job that saved our action and put it back).
        if !INSTALLED.load(Ordering::Acquire) && ours {
            INSTALLED.store(true, Ordering::Release);
        } else if !INSTALLED.load(Ordering::Acquire) {
            // SAFETY: a zeroed sigaction is a valid value (no handler, empty
            // mask); sigemptyset initialises the mask. The buffer of
            // OLD_ACTIONS written is not the current one: no handler reads
            // it before OLD_INDEX points at it (published below, before
            // ours is installed), and the last one that read it returned
            // an install ago.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = handler as *const () as usize;
                sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
                libc::sigemptyset(&mut sa.sa_mask);
                let b = 1 - OLD_INDEX.load(Ordering::Acquire);
                let old = &raw mut OLD_ACTIONS[b];
                (*old).write(cur);
                // The previous handler runs inside ours: on the alternate
                // signal stack only if it asked for it (helper-56: one
                // without SA_ONSTACK overflowed a small one). With no
                // handler before, ours takes it where the thread has one.
                if cur.sa_sigaction != libc::SIG_DFL
                    && cur.sa_sigaction != libc::SIG_IGN
                    && cur.sa_flags & libc::SA_ONSTACK == 0
                {
                    sa.sa_flags &= !libc::SA_ONSTACK;
                }
                OLD_RESET.store(false, Ordering::SeqCst);
                OLD_INDEX.store(b, Ordering::Release);
                if libc::sigaction(libc::SIGSEGV, &sa, std::ptr::null_mut()) != 0 {
                    return Err(Error::Invalid(format!(
                        "cannot install the SIGSEGV handler: {}",
                        std::io::Error::last_os_error()
                    )));
                }
                ON_STACK.store(sa.sa_flags & libc::SA_ONSTACK != 0, Ordering::Release);
            }
            INSTALLED.store(true, Ordering::Release);
        }
        LIVE.fetch_add(1, Ordering::SeqCst);
        Ok(MprotectTracker { _private: () })
    }
}

impl Drop for MprotectTracker {
    /// The last tracker gives SIGSEGV back to the action before ours when
    /// no range is protected any more: a handler the job installs after
    /// `rex_finalize` then sees its true predecessor, and the next
    /// `rex_init` passes the job's faults on to it (helper-101: ours
    /// stayed, was not installed again over the job's, and the job's
    /// handler got the tracker's faults).
    fn drop(&mut self) {
        let _g = TABLE.lock().unwrap_or_else(|e| e.into_inner());
        if LIVE.fetch_sub(1, Ordering::SeqCst) != 1 || !INSTALLED.load(Ordering::Acquire) {
            return;
        }
        let protected = SLOTS
            .iter()
            .take(HIGH.load(Ordering::Acquire))
            .any(|s| s.end.load(Ordering::SeqCst) != 0 && s.signal.load(Ordering::SeqCst));
        let ours =
            current_action().is_ok_and(|cur| cur.sa_sigaction == handler as *const () as usize);
        if protected || !ours {
            return;
        }
        // SAFETY: OLD_ACTIONS[OLD_INDEX] was written when ours was
        // installed; sigaction only reads the action given. A handler of
        // ours still running keeps reading that buffer, which the next
        // install leaves alone (it writes the other).
        unsafe {
            let i = OLD_INDEX.load(Ordering::Acquire);
            let mut old = std::ptr::read(&raw const OLD_ACTIONS[i]).assume_init();
            if OLD_RESET.load(Ordering::SeqCst) {
                // It had SA_RESETHAND and ran: the kernel would have reset it.
                old = std::mem::zeroed();
                old.sa_sigaction = libc::SIG_DFL;
                libc::sigemptyset(&mut old.sa_mask);
            }
            if libc::sigaction(libc::SIGSEGV, &old, std::ptr::null_mut()) == 0 {
                INSTALLED.store(false, Ordering::Release);
            }
        }
    }
}

fn protect(start: usize, len: usize, prot: libc::c_int) -> Result<()> {
    // SAFETY: mprotect changes only the protection of pages the job
    // registered (tracked ranges lie inside its own mappings); it cannot
    // make memory unsound for Rust, only make writes fault, which the
    // handler resolves.
    let rc = unsafe { libc::mprotect(start as *mut libc::c_void, len, prot) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        let hint = if e.raw_os_error() == Some(libc::ENOMEM) {
            " (outside the process's mappings, or vm.max_map_count exhausted)"
        } else {
            ""
        };
        return Err(Error::Invalid(format!(
            "mprotect({start:#x}, {len}) failed: {e}{hint}"
        )));
    }
    Ok(())
}

/// Calls `f(first, n)` for each run of consecutive indexes in `idx`.
pub(crate) fn runs(idx: &[usize], mut f: impl FnMut(usize, usize) -> Result<()>) -> Result<()> {
    let mut k = 0;
    while k < idx.len() {
        let mut n = 1;
        while k + n < idx.len() && idx[k + n] == idx[k] + n {
            n += 1;
        }
        f(idx[k], n)?;
        k += n;
    }
    Ok(())
}

impl Tracker for MprotectTracker {
    fn name(&self) -> &'static str {
        "mprotect"
    }

    fn track(&self, r: Range) -> Result<Range> {
        ensure_alt_stack(r)?;
        slot_add(r, true)
    }

    fn untrack(&self, r: Range) -> Result<()> {
        // Write-enable first, then empty the slot: a write that faulted
        // while the range was protected and is handled after the slot went
        // finds the page writable when the handler retries it (helper-101).
        // The slot goes even when mprotect fails (the map count exhausted):
        // kept, it would claim faults of whatever the job maps there later
        // (helper-103).
        let enabled = protect(
            r.start,
            r.pages * PAGE.load(Ordering::Relaxed),
            libc::PROT_READ | libc::PROT_WRITE,
        );
        slot_remove(r)?;
        enabled
    }

    fn collect(&self, r: Range, out: &mut Vec<usize>) -> Result<()> {
        let ps = PAGE.load(Ordering::Relaxed);
        let first = out.len();
        slot_take(r, out)?;
        // Protect the dirty pages again, one mprotect per run of pages.
        runs(&out[first..], |k, n| {
            protect(r.start + k * ps, n * ps, libc::PROT_READ)
        })
    }

    fn mark_dirty(&self, r: Range, first: usize, count: usize) -> Result<()> {
        let ps = PAGE.load(Ordering::Relaxed);
        let n = slot_mark(r, first, count)?;
        protect(
            r.start + first * ps,
            n * ps,
            libc::PROT_READ | libc::PROT_WRITE,
        )
    }

    fn faults(&self) -> u64 {
        FAULTS.load(Ordering::Relaxed)
    }

    fn vma_protected(&self, _: Range) -> bool {
        true
    }

    fn protect_again(&self, r: Range, pages: &[usize]) -> Result<()> {
        let ps = PAGE.load(Ordering::Relaxed);
        runs(pages, |k, n| {
            protect(r.start + k * ps, n * ps, libc::PROT_READ)
        })
    }
}

/// The SIGSEGV handler. Async-signal-safe: atomics and `mprotect` only;
/// `errno` is saved and restored.
extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: __errno_location returns this thread's errno; reading and
    // restoring it is what async-signal-safe handlers do.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid siginfo_t for an SA_SIGINFO handler.
    let (addr, code) = unsafe { ((*info).si_addr() as usize, (*info).si_code) };
    let ps = PAGE.load(Ordering::Relaxed);
    // Only a write to a page we protected (SEGV_ACCERR) is ours; an
    // unmapped address inside a range (the job freed its region), a read of
    // a page the job made unreadable, or a fault in memory the userfaultfd
    // tracker holds (the job's own protection there) is the job's, and
    // crashes as it would without us.
    let accerr_write = code == SEGV_ACCERR && write_fault(ctx);
    let ours = if accerr_write { covering(addr) } else { None };
    if accerr_write && ours.is_none() {
        // No slot covers it now; one may have while the page was protected,
        // removed (and the page write-enabled) between the fault and here.
        // Retry the write once per removal: a page still protected faults
        // again with the same key, and only then is the fault the job's.
        // The count is read after `covering`, and bumped before a slot is
        // emptied, so a removal that emptied the slot is counted here.
        let page_no = (addr / ps) as u64;
        let key = (page_no & ((1 << 44) - 1)) | (REMOVALS.load(Ordering::SeqCst) << 44);
        // SAFETY: gettid has no preconditions (async-signal-safe).
        let tid = unsafe { libc::gettid() } as usize;
        let seen = &RETRIED[tid % RETRIED.len()];
        if seen.swap(key, Ordering::SeqCst) != key {
            // SAFETY: restoring this thread's errno.
            unsafe { *libc::__errno_location() = errno };
            return;
        }
    }
    if let Some((start, end)) = ours {
        FAULTS.fetch_add(1, Ordering::Relaxed);
        let page = addr & !(ps - 1);
        // Write-enable first, record second: a collect between the two then
        // leaves the page protected (it faults again) rather than writable
        // with its bit cleared.
        // SAFETY: mprotect is a system call, safe in a signal handler; the
        // page belongs to a tracked range.
        let rc = unsafe {
            libc::mprotect(
                page as *mut libc::c_void,
                ps,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        let ok = if rc == 0 {
            mark_addr(addr);
            true
        } else {
            // Out of mappings (vm.max_map_count): write-enable the whole
            // range (merging its mappings) and count all of it dirty, in
            // every slot it overlaps.
            // SAFETY: as above.
            let rc = unsafe {
                libc::mprotect(
                    start as *mut libc::c_void,
                    end - start,
                    libc::PROT_READ | libc::PROT_WRITE,
                )
            };
            mark_all(start, end);
            rc == 0
        };
        if ok {
            // SAFETY: restoring this thread's errno.
            unsafe { *libc::__errno_location() = errno };
            return;
        }
    }
    // Not ours: the previous handler's business.
    // SAFETY: OLD_ACTIONS[OLD_INDEX] was written before this handler was
    // installed (the index published after it) and is not written again
    // until two installs later; calling the previous handler with the
    // kernel's arguments and the mask the kernel would have set is what
    // the kernel would have done without us; the ucontext_t is the
    // kernel's (valid for an SA_SIGINFO handler); sigaction, the sigset
    // functions and sigprocmask are async-signal-safe.
    unsafe {
        let i = OLD_INDEX.load(Ordering::Acquire);
        let old = std::ptr::read(&raw const OLD_ACTIONS[i]).assume_init();
        let h = if OLD_RESET.load(Ordering::SeqCst) {
            libc::SIG_DFL
        } else {
            old.sa_sigaction
        };
        // Sent (kill, raise, sigqueue: si_code <= 0), not raised by a
        // fault: it does not come again when this handler returns
        // (helper-56: swallowed, or with SIG_IGN a later fault killed a
        // healthy job).
        let sent = (*info).si_code <= 0;
        if h == libc::SIG_IGN && sent {
            // SAFETY (as above): restoring this thread's errno.
            *libc::__errno_location() = errno;
        } else if h == libc::SIG_DFL || h == libc::SIG_IGN {
            // Restore the default and return: the instruction faults again
            // (a fault is never ignored) and the process dies of SIGSEGV,
            // with its core dump; a signal sent is sent again, pending
            // until this handler returns.
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigemptyset(&mut dfl.sa_mask);
            libc::sigaction(libc::SIGSEGV, &dfl, std::ptr::null_mut());
            if sent {
                libc::raise(libc::SIGSEGV);
            }
        } else {
            // The kernel resets a SA_RESETHAND action as it calls it: the
            // job's next fault of its own takes the default action.
            if old.sa_flags & libc::SA_RESETHAND != 0 {
                OLD_RESET.store(true, Ordering::SeqCst);
            }
            // The signal mask the kernel would have given that handler:
            // the interrupted code's, plus its `sa_mask`, plus SIGSEGV
            // unless it asked for SA_NODEFER. Ours blocks SIGSEGV while it
            // runs; a handler that leaves by `siglongjmp` without restoring
            // the mask (SA_NODEFER and `sigsetjmp(env, 0)`) would otherwise
            // leave SIGSEGV blocked, and its next fault would kill the job
            // (helper-55). A normal return restores the interrupted mask,
            // as always.
            let mut mask: libc::sigset_t = std::mem::zeroed();
            if ctx.is_null() {
                libc::sigemptyset(&mut mask);
            } else {
                mask = (*(ctx as *const libc::ucontext_t)).uc_sigmask;
            }
            // Every signal number Linux has (1..=64).
            for s in 1..65 {
                if libc::sigismember(&old.sa_mask, s) == 1 {
                    libc::sigaddset(&mut mask, s);
                }
            }
            if old.sa_flags & libc::SA_NODEFER == 0 {
                libc::sigaddset(&mut mask, libc::SIGSEGV);
            } else {
                libc::sigdelset(&mut mask, libc::SIGSEGV);
            }
            // The calling thread's mask (sigprocmask is per thread on Linux).
            libc::sigprocmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut());
            if old.sa_flags & libc::SA_SIGINFO != 0 {
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    std::mem::transmute(h);
                f(sig, info, ctx);
            } else {
                let f: extern "C" fn(libc::c_int) = std::mem::transmute(h);
                f(sig);
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A private, writable mapping of `pages` pages of a temporary file
    /// whose bytes are all `byte`, as its address; unmapped by the caller.
    pub(crate) fn file_map(pages: usize, byte: u8) -> usize {
        let len = pages * page_size();
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, &vec![byte; len]).unwrap();
        // SAFETY: a fresh private mapping of our own temporary file (the
        // mapping keeps the file alive once its descriptor is closed).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE,
                std::os::fd::AsRawFd::as_raw_fd(&f),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p as usize
    }

    /// An anonymous mapping of `pages` pages (freed on drop).
    pub(crate) struct Map(pub(crate) usize, usize);
    impl Map {
        pub(crate) fn new(pages: usize) -> Map {
            let len = pages * page_size();
            Map(map_anonymous(len).unwrap(), len)
        }
        pub(crate) fn write(&self, page: usize, v: u8) {
            // SAFETY: inside the mapping; volatile so the write happens.
            unsafe { std::ptr::write_volatile((self.0 + page * page_size() + 7) as *mut u8, v) }
        }
    }
    impl Drop for Map {
        fn drop(&mut self) {
            // SAFETY: our own mapping.
            unsafe { unmap_anonymous(self.0, self.1) };
        }
    }

    /// The behaviour every tracker must have (run on each).
    pub(crate) fn exercise(t: &dyn Tracker) {
        let m = Map::new(100);
        let r = t.track(Range::new(m.0, 100)).unwrap();
        let mut out = Vec::new();
        t.collect(r, &mut out).unwrap();
        assert_eq!(out, (0..100).collect::<Vec<_>>(), "all dirty at first");
        out.clear();
        let before = t.faults();
        for p in [3, 4, 99, 3, 50] {
            m.write(p, 1);
        }
        t.collect(r, &mut out).unwrap();
        assert_eq!(out, vec![3, 4, 50, 99]);
        // Counted at the fault, or (the kernel resolving them) at collect.
        assert_eq!(t.faults() - before, 4, "one fault per first write");
        out.clear();
        t.collect(r, &mut out).unwrap();
        assert!(out.is_empty());
        // Several threads writing at once.
        std::thread::scope(|sc| {
            for k in 0..4 {
                let m = &m;
                sc.spawn(move || {
                    for p in (k..60).step_by(4) {
                        m.write(p, 9);
                        m.write(p, 8);
                    }
                });
            }
        });
        t.collect(r, &mut out).unwrap();
        assert_eq!(out, (0..60).collect::<Vec<_>>());
        // A kernel write would fail on a protected page; declared, it works.
        t.mark_dirty(r, 10, 2).unwrap();
        m.write(10, 2);
        m.write(11, 2);
        out.clear();
        t.collect(r, &mut out).unwrap();
        assert_eq!(out, vec![10, 11]);
        t.untrack(r).unwrap();
        m.write(20, 1); // writable again, untracked
    }

    #[test]
    fn mprotect_records_first_writes_and_forgets_them_at_collect() {
        exercise(&MprotectTracker::new().unwrap());
    }
}
