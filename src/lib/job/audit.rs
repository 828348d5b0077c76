//! Changes to registered memory that no write fault reports, found at each
//! checkpoint from what the kernel says about the memory itself.
//!
//! Both trackers see a page change only when a thread of this process
//! writes it through its own mapping. Memory changes in other ways too, and
//! a checkpoint that missed them would restart the job into its previous
//! bytes without a word (helper-42):
//!
//! * **Protection changed by the job.** A job that calls `mprotect` on its
//!   own buffers (to debug, or a library's guard pages) write-enables pages
//!   the mprotect tracker had protected; later writes to them never fault.
//!   After the tracker re-protects its dirty pages, every page of a
//!   region must be read-only: any page in a writable mapping is taken as
//!   changed and protected again (mprotect tracker only; the userfaultfd
//!   tracker leaves the mappings writable and keeps its protection in the
//!   page tables).
//! * **Shared mappings** (`MAP_SHARED`: a file another process or `pwrite`
//!   changes, anonymous memory shared with a forked child): writes through
//!   the other mapping, or to the file, never fault here. Every page of a
//!   region in a shared mapping is taken as changed at every checkpoint:
//!   such a region is checkpointed whole each time, which is correct, only
//!   larger.
//! * **Discarded pages** (`madvise(MADV_DONTNEED)`, `MADV_FREE` then
//!   reclaimed, a new mapping placed over the old one): the page reads as
//!   zeros afterwards (or, in a private file mapping, the file's bytes)
//!   without any write. `/proc/self/pagemap` tells such a page from one the
//!   job wrote: a page the job wrote is present and mapped by this process
//!   alone; a discarded one is absent (neither present nor swapped out), or
//!   mapped to the shared zero page once something read it (present, not
//!   exclusive). Either way it now reads as zeros, so it changed only if
//!   the region's bytes on it were not all zero at the last checkpoint that
//!   copied it, which the job state keeps as one bit per page: an untouched
//!   page of a sparse region costs nothing. Pages of a private file mapping
//!   not written yet follow the file, which may change: they are taken as
//!   changed at every checkpoint. (Pages shared copy-on-write with a forked
//!   child are not exclusive either: they are taken until written again,
//!   which is only larger.)
//!
//! Not found: a write through `/proc/self/mem` (a debugger's poke), which
//! changes a present page without touching its protection. rex(3) says so.
//!
//! The cost is one read of `/proc/self/maps` per checkpoint and 8 bytes of
//! `/proc/self/pagemap` per registered page (docs/PERFORMANCE.md, librex).

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::tracker::Range;
use crate::error::{Error, Result};

/// One mapping of `/proc/self/maps`: `start .. end`, writable, shared,
/// backed by a file (an inode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Vma {
    start: usize,
    end: usize,
    writable: bool,
    shared: bool,
    file: bool,
}

/// The process's mappings, read once per checkpoint, and its page map.
pub(crate) struct Memory {
    vmas: Vec<Vma>,
    pagemap: File,
    ps: usize,
}

const MAPS: &str = "/proc/self/maps";
const PAGEMAP: &str = "/proc/self/pagemap";
/// Page map entry bits (Documentation/admin-guide/mm/pagemap.rst).
const PRESENT: u64 = 1 << 63;
const SWAPPED: u64 = 1 << 62;
const FILE_PAGE: u64 = 1 << 61;
const EXCLUSIVE: u64 = 1 << 56;

fn unreadable(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Invalid(format!(
        "{what}: {e}: librex reads it at each checkpoint to find changes to registered memory that no write fault reports (shared or discarded pages, protection changed by the job)"
    ))
}

impl Memory {
    /// Reads the mappings now.
    pub(crate) fn read(ps: usize) -> Result<Memory> {
        let text = std::fs::read_to_string(MAPS).map_err(|e| unreadable(MAPS, e))?;
        let vmas = parse_maps(&text)
            .ok_or_else(|| unreadable(MAPS, "a line that is not `start-end perms ...`"))?;
        let pagemap = File::open(PAGEMAP).map_err(|e| unreadable(PAGEMAP, e))?;
        Ok(Memory { vmas, pagemap, ps })
    }

    /// Appends to `out` the indexes (from `r.start`) of the pages of `r`
    /// that may have changed unseen (module doc), ascending; `vma_protected`:
    /// the tracker keeps clean pages in read-only mappings (mprotect);
    /// `was_zero(k)`: the region's bytes on page `k` were all zero at the
    /// last checkpoint that copied them.
    pub(crate) fn unseen(
        &self,
        r: Range,
        vma_protected: bool,
        was_zero: impl Fn(usize) -> bool,
        out: &mut Vec<usize>,
    ) -> Result<()> {
        let ps = self.ps;
        let (start, end) = (r.start, r.start + r.pages * ps);
        let first_vma = self.vmas.partition_point(|v| v.end <= start);
        let mut private = Vec::new();
        for v in self.vmas[first_vma..].iter().take_while(|v| v.start < end) {
            let (a, b) = (v.start.max(start), v.end.min(end));
            let pages = (a - start) / ps..(b - start).div_ceil(ps);
            if v.shared || (vma_protected && v.writable) {
                out.extend(pages);
            } else {
                private.push((pages, v.file));
            }
        }
        // Pages outside every mapping are left to the copy, which fails on
        // them as it always did.
        const BATCH: usize = 8192;
        let mut buf = vec![0u8; BATCH * 8];
        for (run, file) in private {
            let mut k = run.start;
            while k < run.end {
                let n = (run.end - k).min(BATCH);
                let at = ((start / ps + k) * 8) as u64;
                let got = &mut buf[..n * 8];
                self.pagemap
                    .read_exact_at(got, at)
                    .map_err(|e| unreadable(PAGEMAP, e))?;
                for (i, e) in got.chunks_exact(8).enumerate() {
                    let e = u64::from_ne_bytes(e.try_into().expect("8 bytes"));
                    let taken = if e & PRESENT != 0 {
                        // Not copied on write yet: the file's page.
                        e & FILE_PAGE != 0 || e & EXCLUSIVE == 0 && !was_zero(k + i)
                    } else if e & SWAPPED != 0 {
                        false
                    } else {
                        file || !was_zero(k + i)
                    };
                    if taken {
                        out.push(k + i);
                    }
                }
                k += n;
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(())
    }
}

/// Why `start .. end` (page-aligned) cannot be registered, if it cannot:
/// a page outside every mapping, or a read-only page outside `protected`
/// (the ranges of other regions, whose pages the mprotect tracker keeps
/// read-only). Checked at `rex_protect`, so that a bad address fails there
/// and not at the next checkpoint (helper-42), and read-only memory
/// (`.rodata`) is never made writable when its region is forgotten.
pub(crate) fn unregistrable(
    start: usize,
    end: usize,
    protected: &[(usize, usize)],
) -> Result<Option<String>> {
    let text = std::fs::read_to_string(MAPS).map_err(|e| unreadable(MAPS, e))?;
    let vmas = parse_maps(&text)
        .ok_or_else(|| unreadable(MAPS, "a line that is not `start-end perms ...`"))?;
    let mut at = start;
    for v in vmas.iter().filter(|v| v.end > start && v.start < end) {
        if v.start > at {
            return Ok(Some(format!("{at:#x}..{:#x} is not mapped", v.start)));
        }
        if !v.writable {
            let (a, b) = (v.start.max(start), v.end.min(end));
            let inside = protected.iter().any(|&(s, e)| s <= a && b <= e);
            if !inside {
                return Ok(Some(format!("{a:#x}..{b:#x} is read-only memory")));
            }
        }
        at = v.end;
    }
    Ok((at < end).then(|| format!("{at:#x}..{end:#x} is not mapped")))
}

/// The mappings of a `/proc/PID/maps` text, ascending; `None` when a line
/// does not parse.
fn parse_maps(text: &str) -> Option<Vec<Vma>> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut f = line.split_ascii_whitespace();
        let (range, perms) = (f.next()?, f.next()?);
        let inode = f.nth(2)?;
        let (a, b) = range.split_once('-')?;
        let p = perms.as_bytes();
        if p.len() < 4 {
            return None;
        }
        out.push(Vma {
            start: usize::from_str_radix(a, 16).ok()?,
            end: usize::from_str_radix(b, 16).ok()?,
            writable: p[1] == b'w',
            shared: p[3] == b's',
            file: inode != "0",
        });
    }
    out.sort_unstable_by_key(|v| v.start);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::tracker::{map_anonymous, page_size, unmap_anonymous};

    #[test]
    fn maps_lines_parse() {
        let t = "7f00-7f10 rw-p 00000000 00:00 0 \n\
                 7f10-7f30 r--s 00001000 08:01 42 /tmp/x\n\
                 ffff-10000 ---p 00000000 00:00 0   [vsyscall]\n";
        let v = parse_maps(t).unwrap();
        let vma = |start, end, writable, shared, file| Vma {
            start,
            end,
            writable,
            shared,
            file,
        };
        assert_eq!(
            v,
            vec![
                vma(0x7f00, 0x7f10, true, false, false),
                vma(0x7f10, 0x7f30, false, true, true),
                vma(0xffff, 0x10000, false, false, false),
            ]
        );
        assert_eq!(parse_maps("7f00 rw-p"), None);
    }

    /// A private page discarded, a page write-enabled behind the tracker's
    /// back, and nothing else: those two are reported.
    #[test]
    fn discarded_and_write_enabled_pages_are_reported() {
        let ps = page_size();
        let n = 8;
        let base = map_anonymous(n * ps).unwrap();
        // SAFETY: `base` is our own fresh mapping of `n` pages.
        unsafe {
            std::ptr::write_bytes(base as *mut u8, 1, n * ps);
            assert_eq!(
                libc::mprotect(base as *mut libc::c_void, n * ps, libc::PROT_READ),
                0
            );
            assert_eq!(
                libc::madvise(
                    (base + 2 * ps) as *mut libc::c_void,
                    ps,
                    libc::MADV_DONTNEED
                ),
                0
            );
            assert_eq!(
                libc::mprotect(
                    (base + 5 * ps) as *mut libc::c_void,
                    ps,
                    libc::PROT_READ | libc::PROT_WRITE
                ),
                0
            );
        }
        let r = Range::new(base, n);
        let unseen = |protected, was_zero: &dyn Fn(usize) -> bool| {
            let mut out = Vec::new();
            Memory::read(ps)
                .unwrap()
                .unseen(r, protected, was_zero, &mut out)
                .unwrap();
            out
        };
        assert_eq!(unseen(true, &|_| false), vec![2, 5]);
        assert_eq!(
            unseen(false, &|_| false),
            vec![2],
            "write-enabled pages count only under mprotect"
        );
        // Read since (the zero page is mapped there): still found.
        // SAFETY: a readable page of our mapping.
        assert_eq!(unsafe { *((base + 2 * ps) as *const u8) }, 0);
        assert_eq!(unseen(false, &|_| false), vec![2], "read since");
        // A page whose bytes were zero anyway did not change.
        assert_eq!(unseen(false, &|k| k == 2), Vec::<usize>::new());
        // SAFETY: ours, unmapped once.
        unsafe { unmap_anonymous(base, n * ps) };
    }

    /// Every page of a shared mapping is reported.
    #[test]
    fn shared_pages_are_always_reported() {
        let ps = page_size();
        // SAFETY: a fresh shared anonymous mapping of 3 pages.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                3 * ps,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let mut out = Vec::new();
        Memory::read(ps)
            .unwrap()
            .unseen(Range::new(p as usize, 3), false, |_| true, &mut out)
            .unwrap();
        assert_eq!(out, vec![0, 1, 2]);
        // SAFETY: ours, unmapped once.
        unsafe { libc::munmap(p, 3 * ps) };
    }
}
