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
//!   reclaimed): the page reads as zeros afterwards (or, in a private file
//!   mapping, the file's bytes) without any write. `/proc/self/pagemap`
//!   tells such a page from one the job wrote: a page the job wrote is
//!   present and mapped by this process alone; a discarded one is absent
//!   (neither present nor swapped out), or mapped to the shared zero page
//!   once something read it. Either way it now reads as zeros, so it
//!   changed only if the region's bytes on it were not all zero at the last
//!   checkpoint that copied it, which the job state keeps as one bit per
//!   page: an untouched page of a sparse region costs nothing. Pages of a
//!   private file mapping not written yet follow the file, which may
//!   change: they are taken at every checkpoint. (Pages shared copy-on-write
//!   with a forked child are not exclusive either: the page-map path takes
//!   them until written again, which is only larger.)
//! * **Written without the userfaultfd tracker's protection.** That
//!   protection is a bit of each page table entry, and a discarded page
//!   comes back without it: a write then takes no fault (helper-43). After
//!   the tracker protected its dirty pages again, every page without the
//!   bit (present or swapped out) was written unseen: taken.
//!
//! Not found, and said so in rex(3): a write through `/proc/self/mem` (a
//! debugger's poke), which changes a present page without touching its
//! protection; and, under the mprotect tracker, memory the job write-enables,
//! writes and write-protects again between two checkpoints, or replaces by a
//! new read-only mapping (`mmap` `MAP_FIXED`, `mremap`): the protection the
//! tracker reads is the job's again by then. Under the userfaultfd tracker a
//! replaced mapping is no longer registered, and the checkpoint fails
//! (`REX_ETRACK`) rather than leave its writes out.
//!
//! The cost is one read of `/proc/self/maps` per checkpoint and a walk of
//! the registered pages' page table entries: by the `PAGEMAP_SCAN` ioctl
//! (Linux 6.7), which returns only the candidates, or else by reading 8
//! bytes of `/proc/self/pagemap` per page (docs/PERFORMANCE.md, librex).

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
    readable: bool,
    writable: bool,
    shared: bool,
    file: bool,
}

/// The process's mappings, asked about one range at a time, and its page
/// map.
pub(crate) struct Memory {
    maps: Maps,
    pagemap: File,
    ps: usize,
    /// Ask the kernel for the candidate pages of anonymous mappings
    /// (`PAGEMAP_SCAN`) rather than read every page's entry (tests turn it
    /// off to check the other path).
    scan: bool,
}

const MAPS: &str = "/proc/self/maps";
pub(crate) const PAGEMAP: &str = "/proc/self/pagemap";
/// Page map entry bits (Documentation/admin-guide/mm/pagemap.rst).
const PRESENT: u64 = 1 << 63;
const SWAPPED: u64 = 1 << 62;
const FILE_PAGE: u64 = 1 << 61;
const EXCLUSIVE: u64 = 1 << 56;
/// The entry carries userfaultfd's write-protect bit (Linux 5.13).
pub(crate) const UFFD_WP: u64 = 1 << 57;

fn unreadable(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Invalid(format!(
        "{what}: {e}: librex reads it at each checkpoint to find changes to registered memory that no write fault reports (shared or discarded pages, protection changed by the job)"
    ))
}

/// `/proc/self/maps`, asked for the mappings of a range by the
/// `PROCMAP_QUERY` ioctl (Linux 6.11), which costs a lookup per mapping
/// instead of the text of every mapping of the process (a job with many
/// regions registered each of them against the whole list: quadratic,
/// helper-43); read whole, once, where the kernel lacks it.
struct Maps {
    file: File,
    all: std::cell::OnceCell<Vec<Vma>>,
}

impl Maps {
    fn open() -> Result<Maps> {
        Ok(Maps {
            file: File::open(MAPS).map_err(|e| unreadable(MAPS, e))?,
            all: std::cell::OnceCell::new(),
        })
    }

    /// The mappings that meet `start .. end`, ascending.
    fn within(&self, start: usize, end: usize) -> Result<Vec<Vma>> {
        static UNSUPPORTED: std::sync::atomic::AtomicBool =
            std::sync::atomic::AtomicBool::new(false);
        if !UNSUPPORTED.load(std::sync::atomic::Ordering::Relaxed) {
            match self.query(start, end) {
                Ok(v) => return Ok(v),
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ENOTTY | libc::EINVAL | libc::EPERM | libc::ENOSYS)
                    ) =>
                {
                    UNSUPPORTED.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                Err(e) => return Err(unreadable(MAPS, format!("PROCMAP_QUERY: {e}"))),
            }
        }
        if self.all.get().is_none() {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut &self.file, &mut text)
                .map_err(|e| unreadable(MAPS, e))?;
            let v = parse_maps(&text)
                .ok_or_else(|| unreadable(MAPS, "a line that is not `start-end perms ...`"))?;
            let _ = self.all.set(v);
        }
        let all = self.all.get().expect("just set");
        let first = all.partition_point(|v| v.end <= start);
        Ok(all[first..]
            .iter()
            .take_while(|v| v.start < end)
            .copied()
            .collect())
    }

    fn query(&self, start: usize, end: usize) -> std::io::Result<Vec<Vma>> {
        use linux_raw_sys::general::procmap_query;
        /// `_IOWR('f', 17, struct procmap_query)` (linux/fs.h).
        const PROCMAP_QUERY: libc::c_ulong = 0xC068_6611;
        const COVERING_OR_NEXT_VMA: u64 = 16;
        const READABLE: u64 = 1;
        const WRITABLE: u64 = 2;
        const SHARED: u64 = 8;
        let mut out = Vec::new();
        let mut at = start as u64;
        while at < end as u64 {
            let mut q = procmap_query {
                size: std::mem::size_of::<procmap_query>() as u64,
                query_flags: COVERING_OR_NEXT_VMA,
                query_addr: at,
                vma_start: 0,
                vma_end: 0,
                vma_flags: 0,
                vma_page_size: 0,
                vma_offset: 0,
                inode: 0,
                dev_major: 0,
                dev_minor: 0,
                vma_name_size: 0,
                build_id_size: 0,
                vma_name_addr: 0,
                build_id_addr: 0,
            };
            // SAFETY: the ioctl reads and fills `q` (no name or build id
            // asked for: their sizes are 0); the fd is our own maps file.
            let rc = unsafe {
                libc::ioctl(
                    std::os::fd::AsRawFd::as_raw_fd(&self.file),
                    PROCMAP_QUERY,
                    &mut q as *mut procmap_query,
                )
            };
            if rc < 0 {
                let e = std::io::Error::last_os_error();
                // No mapping at or after `at`.
                if e.raw_os_error() == Some(libc::ENOENT) {
                    break;
                }
                return Err(e);
            }
            if q.vma_start >= end as u64 || q.vma_end <= at {
                break;
            }
            out.push(Vma {
                start: q.vma_start as usize,
                end: q.vma_end as usize,
                readable: q.vma_flags & READABLE != 0,
                writable: q.vma_flags & WRITABLE != 0,
                shared: q.vma_flags & SHARED != 0,
                file: q.inode != 0,
            });
            at = q.vma_end;
        }
        Ok(out)
    }
}

impl Memory {
    /// Opens the process's mappings and page map.
    pub(crate) fn read(ps: usize) -> Result<Memory> {
        let pagemap = File::open(PAGEMAP).map_err(|e| unreadable(PAGEMAP, e))?;
        Ok(Memory {
            maps: Maps::open()?,
            pagemap,
            ps,
            scan: true,
        })
    }

    /// Fails when a page of `r` lies in memory the job made unreadable
    /// (`PROT_NONE`), which the copy of a region carried whole would fault
    /// on; [`unseen`](Self::unseen) checks the same for a tracked region.
    pub(crate) fn readable(&self, r: Range) -> Result<()> {
        let (start, end) = (r.start, r.start + r.pages * self.ps);
        match self.maps.within(start, end)?.iter().find(|v| !v.readable) {
            Some(v) => Err(not_readable(v.start.max(start), v.end.min(end))),
            None => Ok(()),
        }
    }

    /// Appends to `out` the indexes (from `r.start`) of the pages of `r`
    /// that may have changed unseen (module doc), ascending; `vma_protected`:
    /// the tracker keeps clean pages in read-only mappings (mprotect);
    /// `was_zero(k)`: the region's bytes on page `k` were all zero at the
    /// last checkpoint that copied them; fails on memory the job made
    /// unreadable.
    pub(crate) fn unseen(
        &self,
        r: Range,
        vma_protected: bool,
        was_zero: impl Fn(usize) -> bool,
        out: &mut Vec<usize>,
    ) -> Result<()> {
        let ps = self.ps;
        let (start, end) = (r.start, r.start + r.pages * ps);
        let mut private = Vec::new();
        for v in self.maps.within(start, end)? {
            let (a, b) = (v.start.max(start), v.end.min(end));
            if !v.readable {
                // The job's own mprotect(PROT_NONE): the copy would fault
                // (helper-53: the userfaultfd trackers crashed the job).
                return Err(not_readable(a, b));
            }
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
        let mut buf = Vec::new();
        for (run, file) in private {
            if !file
                && self.scan
                && self.scan_anonymous(start, run.clone(), !vma_protected, &was_zero, out)?
            {
                continue;
            }
            buf.resize(BATCH * 8, 0);
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
                    // Without the userfaultfd tracker's bit: written unseen
                    // (helper-44: this path missed it).
                    let unprotected = !vma_protected && e & UFFD_WP == 0;
                    let taken = if e & PRESENT != 0 {
                        // Not copied on write yet: the file's page.
                        e & FILE_PAGE != 0 || e & EXCLUSIVE == 0 && !was_zero(k + i) || unprotected
                    } else if e & SWAPPED != 0 {
                        // In a file mapping, a discarded page the
                        // userfaultfd tracker had protected keeps the
                        // protection as a marker, shown as swapped
                        // (helper-54): it reads as the file's bytes now.
                        // (A copy-on-write page swapped out kept its
                        // bytes: taken anyway, only larger.)
                        unprotected || file
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

    /// The discarded pages of `run` (page indexes from `start`) of an
    /// anonymous private mapping, by the `PAGEMAP_SCAN` ioctl (Linux 6.7):
    /// the kernel reports only the pages neither present nor swapped, or
    /// mapped to the zero page, instead of 8 bytes for every page, which
    /// makes the audit several times cheaper on a mostly clean job
    /// (docs/PERFORMANCE.md). With `wp_ptes` (the userfaultfd tracker,
    /// whose protection is a bit of each page table entry) also every
    /// present page without that bit: after the tracker protected its dirty
    /// pages again, such a page was written without a fault (helper-43: a
    /// page discarded, then written, comes back without the bit). `false`
    /// where the kernel lacks the ioctl: the caller reads the page map
    /// instead.
    fn scan_anonymous(
        &self,
        start: usize,
        run: std::ops::Range<usize>,
        wp_ptes: bool,
        was_zero: &impl Fn(usize) -> bool,
        out: &mut Vec<usize>,
    ) -> Result<bool> {
        use linux_raw_sys::general::{
            PAGE_IS_PFNZERO, PAGE_IS_PRESENT, PAGE_IS_SWAPPED, PAGE_IS_WRITTEN,
        };
        static UNSUPPORTED: std::sync::atomic::AtomicBool =
            std::sync::atomic::AtomicBool::new(false);
        if UNSUPPORTED.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(false);
        }
        let ps = self.ps;
        let (from, end) = (
            (start + run.start * ps) as u64,
            (start + run.end * ps) as u64,
        );
        let (present, swapped, zero, written) = (
            u64::from(PAGE_IS_PRESENT),
            u64::from(PAGE_IS_SWAPPED),
            u64::from(PAGE_IS_PFNZERO),
            u64::from(PAGE_IS_WRITTEN),
        );
        let pages = |r: &linux_raw_sys::general::page_region| {
            (r.start as usize - start) / ps..(r.end as usize - start).div_ceil(ps)
        };
        // Not present (then swapped or not: told apart here), or the zero
        // page.
        let discarded = Select {
            inverted: present,
            mask: 0,
            anyof: present | zero,
            returned: present | swapped | zero,
        };
        let supported = pagemap_scan(&self.pagemap, from, end, 0, discarded, |r| {
            // A page swapped out keeps its bytes.
            if r.categories & swapped == 0 || r.categories & present != 0 {
                out.extend(pages(r).filter(|&k| !was_zero(k)));
            }
        })?;
        if !supported {
            UNSUPPORTED.store(true, std::sync::atomic::Ordering::Relaxed);
            return Ok(false);
        }
        if wp_ptes {
            // Present or swapped out since (helper-44).
            let unprotected = Select {
                inverted: 0,
                mask: written,
                anyof: present | swapped,
                returned: 0,
            };
            pagemap_scan(&self.pagemap, from, end, 0, unprotected, |r| {
                out.extend(pages(r))
            })?;
        }
        Ok(true)
    }
}

/// Runs `PAGEMAP_SCAN` (Linux 6.7) on `pagemap` (this process's page map)
/// over `from .. end` with the given category masks and `flags`
/// (`PM_SCAN_WP_MATCHING`: write-protect the selected pages as they are
/// reported), handing `f` each region of pages it selects; `false` when the
/// kernel lacks the ioctl or refuses it. The walk stops early when the
/// region vector fills (`walk_end`); the loop resumes from there, so a
/// write-protecting scan protects exactly what it reported.
pub(crate) fn pagemap_scan(
    pagemap: &File,
    mut from: u64,
    end: u64,
    flags: u64,
    Select {
        inverted,
        mask,
        anyof,
        returned,
    }: Select,
    mut f: impl FnMut(&linux_raw_sys::general::page_region),
) -> Result<bool> {
    use linux_raw_sys::general::{page_region, pm_scan_arg};
    /// `_IOWR('f', 16, struct pm_scan_arg)` (linux/fs.h).
    const PAGEMAP_SCAN: libc::c_ulong = 0xC060_6610;
    let mut regions = [page_region {
        start: 0,
        end: 0,
        categories: 0,
    }; 256];
    while from < end {
        let mut arg = pm_scan_arg {
            size: std::mem::size_of::<pm_scan_arg>() as u64,
            flags,
            start: from,
            end,
            walk_end: 0,
            vec: regions.as_mut_ptr() as u64,
            vec_len: regions.len() as u64,
            max_pages: 0,
            category_inverted: inverted,
            category_mask: mask,
            category_anyof_mask: anyof,
            return_mask: returned,
        };
        // SAFETY: the ioctl reads `arg` and writes at most `vec_len`
        // regions into `regions`, which outlives the call; the fd is this
        // process's page map, so the walk (and a write protection it
        // makes) concerns this process's memory only.
        let n = unsafe {
            libc::ioctl(
                std::os::fd::AsRawFd::as_raw_fd(pagemap),
                PAGEMAP_SCAN,
                &mut arg as *mut pm_scan_arg,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            // Not there, or refused (seccomp, gVisor): the caller falls
            // back.
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOTTY | libc::EINVAL | libc::EOPNOTSUPP | libc::EPERM | libc::ENOSYS)
            ) {
                return Ok(false);
            }
            return Err(unreadable(PAGEMAP, format!("PAGEMAP_SCAN: {e}")));
        }
        for r in &regions[..n as usize] {
            f(r);
        }
        if arg.walk_end <= from {
            return Err(unreadable(PAGEMAP, "PAGEMAP_SCAN made no progress"));
        }
        from = arg.walk_end;
    }
    Ok(true)
}

/// The pages a `PAGEMAP_SCAN` selects (its category masks): those whose
/// categories, with `inverted` flipped, have every bit of `mask` and, when
/// `anyof` is not 0, one of its bits; `returned`: the categories reported.
#[derive(Clone, Copy)]
pub(crate) struct Select {
    pub(crate) inverted: u64,
    pub(crate) mask: u64,
    pub(crate) anyof: u64,
    pub(crate) returned: u64,
}

/// The error of a checkpoint that meets registered memory the job made
/// unreadable, `a .. b`.
fn not_readable(a: usize, b: usize) -> Error {
    Error::Invalid(format!(
        "registered memory {a:#x}..{b:#x} is not readable (the job's mprotect PROT_NONE?): leave the protection of registered memory to the library, or unregister the region first"
    ))
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
    let vmas = Maps::open()?.within(start, end)?;
    // Other regions' ranges, merged: two neighbours' protected pages make
    // one read-only mapping, which a region between them may share
    // (helper-43).
    let mut merged: Vec<(usize, usize)> = protected.to_vec();
    merged.sort_unstable();
    merged.dedup();
    let mut joined: Vec<(usize, usize)> = Vec::with_capacity(merged.len());
    for (s, e) in merged {
        match joined.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => joined.push((s, e)),
        }
    }
    let mut at = start;
    for v in &vmas {
        if v.start > at {
            return Ok(Some(format!("{at:#x}..{:#x} is not mapped", v.start)));
        }
        if !v.writable {
            let (a, b) = (v.start.max(start), v.end.min(end));
            let inside = joined.iter().any(|&(s, e)| s <= a && b <= e);
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
            readable: p[0] == b'r',
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
            readable: start != 0xffff,
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

    /// `PROCMAP_QUERY` and the text of the maps file give the same
    /// mappings for a range (three here: a read-only page between two
    /// writable ones, and none past the end).
    #[test]
    fn queried_and_listed_mappings_agree() {
        let ps = page_size();
        let base = map_anonymous(4 * ps).unwrap();
        // SAFETY: our own mapping; the last page given back.
        unsafe {
            assert_eq!(
                libc::mprotect((base + ps) as *mut libc::c_void, ps, libc::PROT_READ),
                0
            );
            libc::munmap((base + 3 * ps) as *mut libc::c_void, ps);
        }
        let m = Maps::open().unwrap();
        // Clipped to the range: another test's mapping placed right below
        // may merge into the first one between the two reads.
        let (lo, hi) = (base, base + 4 * ps);
        let clip = |v: Vec<Vma>| -> Vec<Vma> {
            v.into_iter()
                .map(|v| Vma {
                    start: v.start.max(lo),
                    end: v.end.min(hi),
                    ..v
                })
                .collect()
        };
        let listed: Vec<Vma> = {
            let text = std::fs::read_to_string(MAPS).unwrap();
            parse_maps(&text)
                .unwrap()
                .into_iter()
                .filter(|v| v.end > base && v.start < base + 4 * ps)
                .collect()
        };
        let listed = clip(listed);
        assert_eq!(listed.len(), 3, "{listed:?}");
        match m.query(base, base + 4 * ps) {
            Ok(q) => assert_eq!(clip(q), listed),
            Err(e) => eprintln!("PROCMAP_QUERY unavailable here: {e}"),
        }
        assert_eq!(clip(m.within(base, base + 4 * ps).unwrap()), listed);
        // SAFETY: ours, the three pages left.
        unsafe { unmap_anonymous(base, 3 * ps) };
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
        // Under mprotect (`true`): by PAGEMAP_SCAN where the kernel has it,
        // and by reading the page map, alike. Without (`false`, the
        // userfaultfd tracker's view) only by the page map: PAGEMAP_SCAN
        // would also take every page lacking a userfaultfd protection this
        // mapping never had.
        let unseen = |protected, was_zero: &dyn Fn(usize) -> bool| {
            let mut read = Vec::new();
            let mut m = Memory::read(ps).unwrap();
            m.scan = false;
            m.unseen(r, protected, was_zero, &mut read).unwrap();
            if protected {
                let mut out = Vec::new();
                Memory::read(ps)
                    .unwrap()
                    .unseen(r, protected, was_zero, &mut out)
                    .unwrap();
                assert_eq!(out, read, "PAGEMAP_SCAN and the page map disagree");
            }
            read
        };
        assert_eq!(unseen(true, &|_| false), vec![2, 5]);
        // Under userfaultfd every page without its bit counts as written:
        // here none has it (this mapping is not registered).
        assert_eq!(unseen(false, &|_| false), (0..n).collect::<Vec<_>>());
        // Read since (the zero page is mapped there): still found.
        // SAFETY: a readable page of our mapping.
        assert_eq!(unsafe { *((base + 2 * ps) as *const u8) }, 0);
        assert_eq!(unseen(true, &|_| false), vec![2, 5], "read since");
        // A page whose bytes were zero anyway did not change.
        assert_eq!(unseen(true, &|k| k == 2), vec![5]);
        // SAFETY: ours, unmapped once.
        unsafe { unmap_anonymous(base, n * ps) };
    }

    /// Under the kernel-resolved userfaultfd mode, a written page of a
    /// private file mapping, protected again by a checkpoint and then
    /// discarded, reads as the file's bytes: the audit takes it, though its
    /// protection stays behind as a marker the page map shows as swapped
    /// (helper-54).
    #[test]
    fn a_discarded_page_of_a_file_mapping_under_userfaultfd_is_taken() {
        use crate::job::tracker::Tracker;
        let Some(t) = crate::job::uffd::tests::async_or_skip() else {
            return;
        };
        let ps = page_size();
        let base = crate::job::tracker::tests::file_map(4, 0x11);
        let r = t.track(Range::new(base, 4)).unwrap();
        let mut out = Vec::new();
        t.collect(r, &mut out).unwrap();
        // SAFETY: pages of our mapping (the kernel resolves the fault).
        unsafe { std::ptr::write_bytes((base + ps) as *mut u8, 0x22, ps) };
        out.clear();
        t.collect(r, &mut out).unwrap();
        assert_eq!(out, vec![1]);
        // SAFETY: one page of our own mapping; its bytes are ours to drop.
        let rc =
            unsafe { libc::madvise((base + ps) as *mut libc::c_void, ps, libc::MADV_DONTNEED) };
        assert_eq!(rc, 0);
        // SAFETY: a readable page of our mapping.
        assert_eq!(
            unsafe { *((base + ps) as *const u8) },
            0x11,
            "the file's byte"
        );
        // SAFETY: as above (the read made it present again).
        let rc =
            unsafe { libc::madvise((base + ps) as *mut libc::c_void, ps, libc::MADV_DONTNEED) };
        assert_eq!(rc, 0);
        out.clear();
        t.collect(r, &mut out).unwrap();
        let mut unseen = Vec::new();
        Memory::read(ps)
            .unwrap()
            .unseen(r, false, |_| false, &mut unseen)
            .unwrap();
        assert!(
            out.contains(&1) || unseen.contains(&1),
            "the discarded page is in neither: collect {out:?}, audit {unseen:?}"
        );
        t.untrack(r).unwrap();
        // SAFETY: ours, unmapped once, untracked.
        unsafe { crate::job::tracker::unmap_anonymous(base, 4 * ps) };
    }

    /// Under userfaultfd, a page discarded then written comes back without
    /// the tracker's protection and took no fault. Both ways of reading the
    /// page table, `PAGEMAP_SCAN` and the page map that kernels before 6.7
    /// fall back to, report it and the page written with a fault, and no
    /// other (helper-44: the page map path missed it, and the restart had
    /// the page's old bytes).
    #[test]
    fn pages_written_without_the_userfaultfd_protection_are_reported_both_ways() {
        use crate::job::tracker::{Tracker, tests::Map};
        use crate::job::uffd::{UffdMode, UffdTracker};
        for mode in [UffdMode::Thread, UffdMode::Async] {
            let t = match UffdTracker::with_mode(mode) {
                Ok(t) => t,
                Err(e) if std::env::var_os("REX_REQUIRE_UFFD").is_none() => {
                    eprintln!(
                        "SKIPPED: userfaultfd write-protect ({mode:?}) unavailable here: {e}"
                    );
                    continue;
                }
                Err(e) => panic!("{mode:?}: {e}"),
            };
            let (ps, n) = (page_size(), 8);
            let m = Map::new(n);
            for p in 0..n {
                m.write(p, 1);
            }
            let r = t.track(Range::new(m.0, n)).unwrap();
            let mut dirty = Vec::new();
            t.collect(r, &mut dirty).unwrap();
            // SAFETY: one page of our own mapping; its bytes are ours to drop.
            let rc = unsafe {
                libc::madvise((m.0 + 2 * ps) as *mut libc::c_void, ps, libc::MADV_DONTNEED)
            };
            assert_eq!(rc, 0);
            let before = t.faults();
            m.write(2, 7);
            if mode == UffdMode::Thread {
                assert_eq!(
                    t.faults(),
                    before,
                    "a discarded page is written without a fault"
                );
            }
            m.write(5, 7);
            let unseen = |scan| {
                let mut out = Vec::new();
                let mut mem = Memory::read(ps).unwrap();
                mem.scan = scan;
                mem.unseen(r, false, |_| false, &mut out).unwrap();
                out
            };
            assert_eq!(unseen(false), vec![2, 5], "{mode:?}: by the page map");
            assert_eq!(
                unseen(true),
                vec![2, 5],
                "{mode:?}: by PAGEMAP_SCAN (or the page map)"
            );
            if mode == UffdMode::Async {
                // The kernel's own record says the same.
                dirty.clear();
                t.collect(r, &mut dirty).unwrap();
                assert_eq!(dirty, vec![2, 5]);
            }
            t.untrack(r).unwrap();
        }
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
