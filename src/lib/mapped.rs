//! Where this process's file mappings lie, so that a SIGBUS handler can
//! name the file a fault is in ([`crate::durable::report_mapped_faults`]).
//!
//! The readers map the files they read (REX-IC files, RPS and Pointer
//! Files). A read through a mapping of a file that shrank after it was
//! opened (a producer that rewrote a checkpoint in place instead of under a
//! temporary name, against docs/FORMAT.md §2.7), or whose storage failed
//! (an I/O error of a parallel file system under the page cache), is not an
//! error a `read` could return: the kernel raises SIGBUS in the reading
//! thread, whose default action ends the process with "Bus error" and a
//! core dump, naming nothing. The CLI's handler looks the faulting address
//! up here and says which file and byte before it exits.
//!
//! The table is a fixed array of slots read and written with atomics only:
//! the handler may neither lock nor allocate. A mapping registers itself
//! for as long as it lives ([`Registered`]); when every slot is taken (more
//! files mapped at once than [`SLOTS`]) it goes unregistered, and a fault
//! in it keeps SIGBUS's default action, as does a fault in a mapping that
//! never registers (the handler cannot tell a file's fault from any other).
//! A mapping's owner declares its guard before the map, so that the slot
//! is cleared before the range is unmapped (and perhaps mapped again for
//! another file).

use std::path::Path;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// Mappings registered at once, at most: a push maps the batch's REX-IC
/// files and the chain's RPS and Pointer Files.
pub const SLOTS: usize = 8192;

/// A slot's `start` while it is free.
const FREE: usize = 0;
/// A slot's `start` while its owner fills or clears it (never a mapping's
/// address: mappings start on page boundaries).
const BUSY: usize = 1;

struct Slot {
    /// First byte of the mapping, or [`FREE`] or [`BUSY`]; stored last
    /// (release) when a slot is filled, first when it is cleared.
    start: AtomicUsize,
    len: AtomicUsize,
    /// The file's path (not NUL-terminated) and its length in bytes, owned
    /// by the [`Registered`] guard that filled the slot.
    path: AtomicPtr<u8>,
    path_len: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    start: AtomicUsize::new(FREE),
    len: AtomicUsize::new(0),
    path: AtomicPtr::new(std::ptr::null_mut()),
    path_len: AtomicUsize::new(0),
};

static TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];
/// Where the next search for a free slot starts.
static HINT: AtomicUsize = AtomicUsize::new(0);

/// A mapping listed in the table until dropped. Keep it beside the mapping
/// and drop it no earlier than the last read through the mapping.
pub struct Registered {
    slot: Option<usize>,
    /// The bytes the slot's `path` points at.
    _path: Box<[u8]>,
}

impl std::fmt::Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered")
            .field("slot", &self.slot)
            .finish()
    }
}

/// Lists the mapping `bytes` of the file at `path`.
pub fn register(path: &Path, bytes: &[u8]) -> Registered {
    use std::os::unix::ffi::OsStrExt;
    let mut name: Box<[u8]> = path.as_os_str().as_bytes().into();
    if bytes.is_empty() {
        return Registered {
            slot: None,
            _path: name,
        };
    }
    let from = HINT.fetch_add(1, Ordering::Relaxed);
    for k in 0..SLOTS {
        let i = (from + k) % SLOTS;
        let s = &TABLE[i];
        if s.start
            .compare_exchange(FREE, BUSY, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            s.path.store(name.as_mut_ptr(), Ordering::Relaxed);
            s.path_len.store(name.len(), Ordering::Relaxed);
            s.len.store(bytes.len(), Ordering::Relaxed);
            s.start.store(bytes.as_ptr() as usize, Ordering::Release);
            return Registered {
                slot: Some(i),
                _path: name,
            };
        }
    }
    Registered {
        slot: None,
        _path: name,
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            let s = &TABLE[i];
            s.start.store(BUSY, Ordering::Release);
            s.len.store(0, Ordering::Relaxed);
            s.path.store(std::ptr::null_mut(), Ordering::Relaxed);
            s.path_len.store(0, Ordering::Relaxed);
            s.start.store(FREE, Ordering::Release);
        }
    }
}

/// The registered mapping holding address `addr`: its file's path and the
/// byte of the file `addr` is (mappings here start at the file's first
/// byte). Only atomic loads: callable from a signal handler.
///
/// # Safety
///
/// The path is read through the slot's pointer, which stays valid only
/// while the mapping's [`Registered`] guard lives: the caller uses it only
/// while the mapping holding `addr` is certainly alive. A SIGBUS handler
/// for a fault at `addr` is such a caller: a thread is reading through
/// that mapping, so its owner (and the guard beside it) lives while the
/// fault is handled; a slot whose guard is dropped meanwhile holds another
/// range, which `addr` does not fall in.
pub(crate) unsafe fn find(addr: usize) -> Option<(&'static [u8], usize)> {
    for s in &TABLE {
        let start = s.start.load(Ordering::Acquire);
        if start == FREE || start == BUSY {
            continue;
        }
        let len = s.len.load(Ordering::Acquire);
        let off = addr.wrapping_sub(start);
        if off < len {
            let p = s.path.load(Ordering::Acquire);
            let n = s.path_len.load(Ordering::Acquire);
            // The slot freed and filled again while it was read: its
            // fields may mix two mappings; it is not the faulting one
            // (which lives), so skip it.
            if s.start.load(Ordering::Acquire) != start || p.is_null() {
                continue;
            }
            // SAFETY: `p` and `n` are the path bytes of the guard that
            // filled this slot (stored before `start`, which this load
            // acquired), and that guard outlives the caller's use of them
            // (this function's contract).
            return Some((unsafe { std::slice::from_raw_parts(p, n) }, off));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registered_range_is_found_until_its_guard_is_dropped() {
        let data = vec![7u8; 10000];
        let g = register(Path::new("/x/y.rps"), &data);
        let at = data.as_ptr() as usize;
        // SAFETY: `data` and `g` live across each lookup and its use.
        unsafe {
            assert_eq!(find(at + 4321), Some((&b"/x/y.rps"[..], 4321)));
            assert_eq!(find(at + 10000), None);
        }
        drop(g);
        // SAFETY: nothing is returned once the guard is dropped.
        assert_eq!(unsafe { find(at + 4321) }, None);
        // An empty mapping is not listed.
        let g = register(Path::new("/e"), &[]);
        assert!(g.slot.is_none());
    }
}
