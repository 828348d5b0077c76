//! Reading a stopped process's memory: which pages are live
//! (`/proc/PID/maps`, `/proc/PID/pagemap`), their bytes
//! (`process_vm_readv`, else `/proc/PID/mem`), and which of them changed
//! since the previous checkpoint (the scan).
//!
//! **Live pages.** The pages of the writable private mappings (`rw?p`, not
//! `[vvar*]` or `[vsyscall]`) that are present in memory (pagemap bit 63) or
//! swapped out (bit 62). A page that is neither has never been touched, or
//! was given back (`madvise(MADV_DONTNEED)`, `munmap`): it is not part of
//! the image. Reading a swapped page swaps it back in.
//!
//! **Reading.** Runs of consecutive live pages become `iovec`s; one
//! `process_vm_readv` call reads up to 1024 of them (`IOV_MAX`) into one
//! buffer, [`CHUNK_PAGES`] pages at a time. When a page cannot be read (a
//! device mapping, say), the read goes on past it through `/proc/PID/mem`,
//! and a page neither can read is treated as absent. When the kernel or a
//! seccomp filter refuses `process_vm_readv` altogether, everything is read
//! through `/proc/PID/mem`.
//!
//! **The scan** walks the live pages and the previous checkpoint's
//! `(page, hash)` table together, both in ascending page order. Each chunk
//! is read into the tail of the output buffer and hashed page by page
//! (XXH3-64); a page whose hash differs from the table's, or that is new, is
//! dirty and is moved down to the end of the kept data, so the buffer holds
//! only the dirty pages (plus one chunk) and nothing is copied twice. A page
//! of the table that is no longer live is dropped. With soft-dirty
//! information, pages whose soft-dirty bit is clear and that the table knows
//! are not read at all: they keep their hash.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::process::{Fail, permission_error, proc_path};
use crate::error::Error;
use crate::format::ic::DropRange;

/// Pages read per `process_vm_readv` round: 2 MiB of 4 KiB pages, small
/// enough that hashing finds them in the cache right after the copy.
pub const CHUNK_PAGES: usize = 512;
/// The kernel's limit on iovecs per call.
pub const IOV_MAX: usize = 1024;

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// `rwxp` / `rw-s` ...
    pub perms: [u8; 4],
    /// Path or pseudo-name (`[heap]`, `[stack]`), empty when anonymous.
    pub name: String,
}

impl Mapping {
    /// Whether a capture takes this mapping's pages: readable, writable and
    /// private, and not a kernel-provided page (`[vvar]`, `[vsyscall]`).
    pub fn captured(&self) -> bool {
        self.perms[0] == b'r'
            && self.perms[1] == b'w'
            && self.perms[3] == b'p'
            && !self.name.starts_with("[vvar")
            && self.name != "[vsyscall]"
            && self.end > self.start
    }
}

/// Parses `/proc/PID/maps`; lines that do not parse are skipped.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let mut it = line.split_ascii_whitespace();
            let (a, b) = it.next()?.split_once('-')?;
            let perms: [u8; 4] = it.next()?.as_bytes().try_into().ok()?;
            let _offset = it.next()?;
            let _dev = it.next()?;
            let _inode = it.next()?;
            let name = it.collect::<Vec<_>>().join(" ");
            Some(Mapping {
                start: u64::from_str_radix(a, 16).ok()?,
                end: u64::from_str_radix(b, 16).ok()?,
                perms,
                name,
            })
        })
        .collect()
}

/// A run of consecutive live pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// First page number.
    pub first: u64,
    /// Pages in the run (at least 1).
    pub count: u64,
    /// Whether the pages' soft-dirty bit is set (runs are split where it
    /// changes when soft-dirty information is wanted; else always true).
    pub soft_dirty: bool,
}

/// Counts from the pagemap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PagemapStats {
    /// Mappings captured.
    pub mappings: u64,
    /// Pages of those mappings (virtual size / page size).
    pub virtual_pages: u64,
    /// Live pages present in memory.
    pub present: u64,
    /// Live pages swapped out.
    pub swapped: u64,
    /// Live pages with the soft-dirty bit set.
    pub soft_dirty: u64,
}

const PM_PRESENT: u64 = 1 << 63;
const PM_SWAPPED: u64 = 1 << 62;
const PM_SOFT_DIRTY: u64 = 1 << 55;

/// The error for a pagemap that cannot be opened or read.
pub fn pagemap_error(pid: u32, op: &'static str, e: std::io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::ENOENT) => Error::Process {
            pid,
            reason: "this kernel has no /proc/PID/pagemap (it is built without CONFIG_PROC_PAGE_MONITOR); \
                     rexctl capture needs it to find the pages in memory"
                .into(),
        },
        Some(libc::EPERM | libc::EACCES) => Error::Process {
            pid,
            reason: format!(
                "{op} /proc/PID/pagemap: {e}: the kernel does not allow reading the page map of this process; {}",
                super::process::PERMISSION_HINT
            ),
        },
        _ => Error::io(proc_path(pid, "pagemap"), op, e),
    }
}

/// Appends the runs of live pages of `maps` (captured mappings only) to
/// `out`, in ascending page order, from the open `pagemap` of `pid`.
pub fn live_runs(
    pid: u32,
    pagemap: &File,
    maps: &[Mapping],
    page_size: u64,
    split_soft_dirty: bool,
    out: &mut Vec<Run>,
    stats: &mut PagemapStats,
) -> Result<(), Fail> {
    const ENTRIES: usize = 64 * 1024;
    let mut raw = vec![0u8; ENTRIES * 8];
    for m in maps.iter().filter(|m| m.captured()) {
        stats.mappings += 1;
        let first = m.start / page_size;
        let n = (m.end - m.start) / page_size;
        stats.virtual_pages += n;
        let mut done = 0u64;
        while done < n {
            let k = (n - done).min(ENTRIES as u64) as usize;
            let buf = &mut raw[..k * 8];
            if let Err(e) = pagemap.read_exact_at(buf, (first + done) * 8) {
                if !Path::new(&proc_path(pid, "")).exists()
                    || e.kind() == std::io::ErrorKind::UnexpectedEof
                {
                    return Err(Fail::Exited);
                }
                return Err(Fail::Err(pagemap_error(pid, "read", e)));
            }
            for (i, b) in buf.chunks_exact(8).enumerate() {
                let e = u64::from_le_bytes(b.try_into().expect("8 bytes"));
                if e & (PM_PRESENT | PM_SWAPPED) == 0 {
                    continue;
                }
                if e & PM_PRESENT != 0 {
                    stats.present += 1;
                } else {
                    stats.swapped += 1;
                }
                let soft = e & PM_SOFT_DIRTY != 0;
                if soft {
                    stats.soft_dirty += 1;
                }
                let soft = soft || !split_soft_dirty;
                let page = first + done + i as u64;
                match out.last_mut() {
                    Some(r) if r.first + r.count == page && r.soft_dirty == soft => r.count += 1,
                    _ => out.push(Run {
                        first: page,
                        count: 1,
                        soft_dirty: soft,
                    }),
                }
            }
            done += k as u64;
        }
    }
    Ok(())
}

/// Where page bytes come from: the process, or a fake in unit tests.
pub trait Memory: Sync {
    /// Reads each `(address, length)` of `iovs` into consecutive parts of
    /// `buf` (whose length is their sum). Pages that cannot be read are
    /// zero-filled and their page numbers pushed, ascending, into `bad`.
    fn read(
        &self,
        iovs: &[(u64, usize)],
        buf: &mut [u8],
        page_size: usize,
        bad: &mut Vec<u64>,
    ) -> Result<(), Fail>;
}

/// A live process's memory.
pub struct ProcMemory {
    pid: u32,
    mem: File,
    vm_readv: AtomicBool,
}

impl ProcMemory {
    /// Opens `/proc/PID/mem` (which checks ptrace access).
    pub fn open(pid: u32) -> Result<ProcMemory, Fail> {
        let path = proc_path(pid, "mem");
        let mem = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Fail::Exited),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) => {
                return Err(Fail::Err(permission_error(pid, "open /proc/PID/mem", e)));
            }
            Err(e) => return Err(Fail::Err(Error::io(path, "open", e))),
        };
        Ok(ProcMemory {
            pid,
            mem,
            vm_readv: AtomicBool::new(true),
        })
    }

    /// Whether reads go through `process_vm_readv` (else `/proc/PID/mem`).
    pub fn uses_vm_readv(&self) -> bool {
        self.vm_readv.load(Ordering::Relaxed)
    }

    /// One page through `/proc/PID/mem`; false when it cannot be read.
    fn pread_page(&self, addr: u64, out: &mut [u8]) -> bool {
        if self.mem.read_exact_at(out, addr).is_ok() {
            return true;
        }
        out.fill(0);
        false
    }

    fn read_mem(&self, iovs: &[(u64, usize)], buf: &mut [u8], ps: usize, bad: &mut Vec<u64>) {
        let mut pos = 0;
        for &(addr, len) in iovs {
            let dst = &mut buf[pos..pos + len];
            if self.mem.read_exact_at(dst, addr).is_err() {
                for (i, page) in dst.chunks_exact_mut(ps).enumerate() {
                    let a = addr + (i * ps) as u64;
                    if !self.pread_page(a, page) {
                        bad.push(a / ps as u64);
                    }
                }
            }
            pos += len;
        }
    }

    /// `Ok(false)`: `process_vm_readv` is not available; use the fallback.
    fn read_vm(
        &self,
        iovs: &[(u64, usize)],
        buf: &mut [u8],
        ps: usize,
        bad: &mut Vec<u64>,
    ) -> Result<bool, Fail> {
        let mut i = 0; // iovec index
        let mut off = 0; // bytes of iovs[i] already done
        let mut pos = 0; // bytes of buf already filled
        let mut remote: Vec<libc::iovec> = Vec::with_capacity(IOV_MAX.min(iovs.len()));
        while i < iovs.len() {
            remote.clear();
            let mut total = 0usize;
            for (k, &(addr, len)) in iovs[i..].iter().take(IOV_MAX).enumerate() {
                let skip = if k == 0 { off } else { 0 };
                remote.push(libc::iovec {
                    iov_base: (addr + skip as u64) as usize as *mut libc::c_void,
                    iov_len: len - skip,
                });
                total += len - skip;
            }
            let dst = &mut buf[pos..pos + total];
            let local = libc::iovec {
                iov_base: dst.as_mut_ptr().cast(),
                iov_len: dst.len(),
            };
            // SAFETY: `local` describes `dst`, a live, exclusively borrowed
            // slice of exactly `total` bytes, and the remote iovecs add up to
            // the same `total`, so the kernel writes only inside `dst`. The
            // remote addresses are read in the other process, never
            // dereferenced here. `remote` outlives the call.
            let n = unsafe {
                libc::process_vm_readv(
                    self.pid as libc::pid_t,
                    &local,
                    1,
                    remote.as_ptr(),
                    remote.len() as libc::c_ulong,
                    0,
                )
            };
            let n = if n < 0 {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::ESRCH) => return Err(Fail::Exited),
                    Some(libc::ENOSYS | libc::EPERM) if pos == 0 => return Ok(false),
                    Some(libc::EFAULT) => 0,
                    _ => {
                        return Err(Fail::Err(Error::io(
                            proc_path(self.pid, ""),
                            "process_vm_readv",
                            e,
                        )));
                    }
                }
            } else {
                n as usize
            };
            // Whole pages done; a partial transfer stops at a page that
            // failed, which is read (or given up) on its own.
            let mut done = n / ps * ps;
            let failed = done < total;
            if failed {
                let a = addr_at(iovs, i, off + done);
                let page = &mut buf[pos + done..pos + done + ps];
                if !self.pread_page(a, page) {
                    bad.push(a / ps as u64);
                }
                done += ps;
            }
            pos += done;
            // Advance (i, off) by `done` bytes.
            let mut left = done;
            while left > 0 {
                let room = iovs[i].1 - off;
                if left >= room {
                    left -= room;
                    i += 1;
                    off = 0;
                } else {
                    off += left;
                    left = 0;
                }
            }
        }
        Ok(true)
    }
}

fn addr_at(iovs: &[(u64, usize)], i: usize, mut off: usize) -> u64 {
    let mut i = i;
    while off >= iovs[i].1 {
        off -= iovs[i].1;
        i += 1;
    }
    iovs[i].0 + off as u64
}

impl Memory for ProcMemory {
    fn read(
        &self,
        iovs: &[(u64, usize)],
        buf: &mut [u8],
        ps: usize,
        bad: &mut Vec<u64>,
    ) -> Result<(), Fail> {
        if self.uses_vm_readv() {
            let mark = bad.len();
            if self.read_vm(iovs, buf, ps, bad)? {
                return Ok(());
            }
            bad.truncate(mark);
            self.vm_readv.store(false, Ordering::Relaxed);
        }
        self.read_mem(iovs, buf, ps, bad);
        Ok(())
    }
}

/// How a scan decides which pages to read.
#[derive(Clone, Copy, Debug)]
pub struct ScanOpts {
    /// Page size in bytes.
    pub page_size: usize,
    /// Trust the runs' soft-dirty flags: a known page whose flag is clear
    /// is not read and keeps its hash.
    pub use_soft_dirty: bool,
    /// Keep every live page's bytes (for a FULL copy), not only the dirty
    /// ones.
    pub keep_all: bool,
}

/// Counts of one scan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ScanStats {
    /// Live pages.
    pub live: u64,
    /// Pages read from the process.
    pub read: u64,
    /// Pages that could not be read (treated as absent).
    pub unreadable: u64,
    /// Dirty pages that the previous checkpoint did not have.
    pub new: u64,
    /// Dirty pages whose bytes changed.
    pub changed: u64,
    /// Pages of the previous checkpoint that are gone.
    pub gone: u64,
}

/// The result of scanning one range of pages.
#[derive(Debug, Default)]
pub struct ScanPart {
    /// `(page, hash)` of every live page, ascending.
    pub state: Vec<(u64, u64)>,
    /// Pages whose bytes are in `data`, ascending: the dirty ones, or all
    /// live ones with `keep_all`.
    pub carried: Vec<u64>,
    /// With `keep_all`: whether each carried page is dirty.
    pub dirty: Vec<bool>,
    /// The carried pages' bytes, in order.
    pub data: Vec<u8>,
    /// Pages of the previous checkpoint that are gone (ascending).
    pub gone: Vec<u64>,
    /// Counts.
    pub stats: ScanStats,
}

impl ScanPart {
    /// The bytes of the `i`-th carried page.
    pub fn page(&self, i: usize, ps: usize) -> &[u8] {
        &self.data[i * ps..(i + 1) * ps]
    }

    /// Whether the `i`-th carried page is dirty.
    pub fn is_dirty(&self, i: usize) -> bool {
        self.dirty.get(i).copied().unwrap_or(true)
    }
}

struct Item {
    page: u64,
    prev: Option<u64>,
    read: bool,
}

/// Scans the live pages `runs` against the previous table `prev` (both
/// restricted to the same page range), reading through `mem`. `buf` is a
/// reusable buffer; it becomes the part's `data`.
pub fn scan_part(
    mem: &dyn Memory,
    runs: &[Run],
    prev: &[(u64, u64)],
    opts: ScanOpts,
    buf: Vec<u8>,
) -> Result<ScanPart, Fail> {
    let ps = opts.page_size;
    let mut s = Scanner {
        mem,
        opts,
        out: ScanPart {
            data: buf,
            ..Default::default()
        },
        filled: 0,
        items: Vec::with_capacity(CHUNK_PAGES * 2),
        iovs: Vec::with_capacity(IOV_MAX),
        read_pages: 0,
        bad: Vec::new(),
    };
    let live: u64 = runs.iter().map(|r| r.count).sum();
    s.out.state.reserve(live as usize);
    s.out.stats.live = live;
    let mut c = 0;
    for run in runs {
        for page in run.first..run.first + run.count {
            while c < prev.len() && prev[c].0 < page {
                s.out.gone.push(prev[c].0);
                c += 1;
            }
            let prev_h = if c < prev.len() && prev[c].0 == page {
                c += 1;
                Some(prev[c - 1].1)
            } else {
                None
            };
            let read = opts.keep_all || !opts.use_soft_dirty || run.soft_dirty || prev_h.is_none();
            if read {
                let addr = page * ps as u64;
                match s.iovs.last_mut() {
                    Some(last) if last.0 + last.1 as u64 == addr => last.1 += ps,
                    _ => {
                        if s.iovs.len() == IOV_MAX {
                            s.flush()?;
                        }
                        s.iovs.push((addr, ps));
                    }
                }
                s.read_pages += 1;
            }
            s.items.push(Item {
                page,
                prev: prev_h,
                read,
            });
            if s.read_pages == CHUNK_PAGES || s.items.len() >= CHUNK_PAGES * 8 {
                s.flush()?;
            }
        }
    }
    s.flush()?;
    s.out.gone.extend(prev[c..].iter().map(|e| e.0));
    s.out.gone.sort_unstable();
    s.out.stats.gone = s.out.gone.len() as u64;
    let filled = s.filled;
    let mut out = s.out;
    out.data.truncate(filled);
    Ok(out)
}

struct Scanner<'a> {
    mem: &'a dyn Memory,
    opts: ScanOpts,
    out: ScanPart,
    /// Bytes of `out.data` holding kept pages; `out.data.len()` beyond it is
    /// scratch (already initialized, so it is zeroed only once).
    filled: usize,
    items: Vec<Item>,
    iovs: Vec<(u64, usize)>,
    read_pages: usize,
    bad: Vec<u64>,
}

impl Scanner<'_> {
    fn flush(&mut self) -> Result<(), Fail> {
        let ps = self.opts.page_size;
        let n = self.read_pages * ps;
        let start = self.filled;
        if self.out.data.len() < start + n {
            self.out.data.resize(start + n, 0);
        }
        self.bad.clear();
        if n > 0 {
            self.mem.read(
                &self.iovs,
                &mut self.out.data[start..start + n],
                ps,
                &mut self.bad,
            )?;
        }
        let (mut src, mut dst, mut b) = (start, start, 0);
        for it in self.items.drain(..) {
            if !it.read {
                self.out
                    .state
                    .push((it.page, it.prev.expect("unread pages are known")));
                continue;
            }
            let at = src;
            src += ps;
            self.out.stats.read += 1;
            while b < self.bad.len() && self.bad[b] < it.page {
                b += 1;
            }
            if b < self.bad.len() && self.bad[b] == it.page {
                self.out.stats.unreadable += 1;
                self.out.stats.live -= 1;
                if it.prev.is_some() {
                    self.out.gone.push(it.page);
                }
                continue;
            }
            let h = xxhash_rust::xxh3::xxh3_64(&self.out.data[at..at + ps]);
            let dirty = it.prev != Some(h);
            if dirty {
                if it.prev.is_some() {
                    self.out.stats.changed += 1;
                } else {
                    self.out.stats.new += 1;
                }
            }
            if dirty || self.opts.keep_all {
                if dst != at {
                    self.out.data.copy_within(at..at + ps, dst);
                }
                dst += ps;
                self.out.carried.push(it.page);
                if self.opts.keep_all {
                    self.out.dirty.push(dirty);
                }
            }
            self.out.state.push((it.page, h));
        }
        self.filled = dst;
        self.iovs.clear();
        self.read_pages = 0;
        Ok(())
    }
}

/// Ascending page numbers as drop ranges.
pub fn drop_ranges(pages: &[u64]) -> Vec<DropRange> {
    let mut out: Vec<DropRange> = Vec::new();
    for &p in pages {
        match out.last_mut() {
            Some(d) if d.first + d.count == p => d.count += 1,
            Some(d) if d.first + d.count > p => {} // duplicate
            _ => out.push(DropRange { first: p, count: 1 }),
        }
    }
    out
}

/// Splits `runs` (ascending) into at most `parts` groups of about equal
/// page counts, cutting runs where needed; returns the groups and the first
/// page of each group after the first (the range boundaries).
pub fn split_runs(runs: &[Run], parts: usize) -> (Vec<Vec<Run>>, Vec<u64>) {
    let total: u64 = runs.iter().map(|r| r.count).sum();
    let parts = parts.max(1);
    let per = total.div_ceil(parts as u64).max(1);
    let mut groups: Vec<Vec<Run>> = vec![Vec::new()];
    let mut bounds = Vec::new();
    let mut in_group = 0u64;
    for r in runs {
        let mut r = *r;
        while r.count > 0 {
            if in_group == per && groups.len() < parts {
                groups.push(Vec::new());
                bounds.push(r.first);
                in_group = 0;
            }
            let take = if groups.len() < parts {
                r.count.min(per - in_group)
            } else {
                r.count
            };
            groups
                .last_mut()
                .expect("one group")
                .push(Run { count: take, ..r });
            in_group += take;
            r.first += take;
            r.count -= take;
        }
    }
    (groups, bounds)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    const PS: usize = 512;

    /// Memory as a map from page number to bytes; pages in `unreadable`
    /// fail like a device mapping.
    struct Fake {
        pages: BTreeMap<u64, Vec<u8>>,
        unreadable: Vec<u64>,
    }

    impl Memory for Fake {
        fn read(
            &self,
            iovs: &[(u64, usize)],
            buf: &mut [u8],
            ps: usize,
            bad: &mut Vec<u64>,
        ) -> Result<(), Fail> {
            assert!(iovs.len() <= IOV_MAX);
            let mut pos = 0;
            for &(addr, len) in iovs {
                for k in 0..len / ps {
                    let p = addr / ps as u64 + k as u64;
                    let dst = &mut buf[pos..pos + ps];
                    match self.pages.get(&p) {
                        Some(d) if !self.unreadable.contains(&p) => dst.copy_from_slice(d),
                        _ => {
                            dst.fill(0);
                            bad.push(p);
                        }
                    }
                    pos += ps;
                }
            }
            assert_eq!(pos, buf.len());
            Ok(())
        }
    }

    fn page(tag: u64) -> Vec<u8> {
        (0..PS).map(|i| (tag as usize * 31 + i) as u8).collect()
    }

    fn runs_of(pages: &BTreeMap<u64, Vec<u8>>, soft: &[u64]) -> Vec<Run> {
        let mut out: Vec<Run> = Vec::new();
        for &p in pages.keys() {
            let sd = soft.contains(&p);
            match out.last_mut() {
                Some(r) if r.first + r.count == p && r.soft_dirty == sd => r.count += 1,
                _ => out.push(Run {
                    first: p,
                    count: 1,
                    soft_dirty: sd,
                }),
            }
        }
        out
    }

    fn opts(use_soft_dirty: bool, keep_all: bool) -> ScanOpts {
        ScanOpts {
            page_size: PS,
            use_soft_dirty,
            keep_all,
        }
    }

    #[test]
    fn maps_lines_parse_and_filter() {
        let text = "\
55d0c9e4a000-55d0c9e4c000 r--p 00000000 08:01 1234                       /usr/bin/cat
55d0c9e4c000-55d0c9e4e000 rw-p 00002000 08:01 1234                       /usr/bin/my prog
55d0cab00000-55d0cab21000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f0000001000 rw-s 00000000 00:05 77                         /dev/zero (deleted)
7ffd1000-7ffd3000 rw-p 00000000 00:00 0                                  [stack]
7ffd5000-7ffd7000 r--p 00000000 00:00 0                                  [vvar]
7ffd7000-7ffd8000 rw-p 00000000 00:00 0                                  [vvar_vclock]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
garbage line
7f00-7f10 rw-p 0 0:0 0
";
        let maps = parse_maps(text);
        assert_eq!(maps.len(), 9);
        assert_eq!(maps[1].name, "/usr/bin/my prog");
        let taken: Vec<&str> = maps
            .iter()
            .filter(|m| m.captured())
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(taken, ["/usr/bin/my prog", "[heap]", "[stack]", ""]);
    }

    #[test]
    fn the_scan_finds_new_changed_and_gone_pages() {
        let mut mem = Fake {
            pages: (10..20).chain(100..105).map(|p| (p, page(p))).collect(),
            unreadable: vec![],
        };
        let runs = runs_of(&mem.pages, &[]);
        let full = scan_part(&mem, &runs, &[], opts(false, false), Vec::new()).unwrap();
        assert_eq!(full.carried, (10..20).chain(100..105).collect::<Vec<_>>());
        assert_eq!(full.stats.new, 15);
        for (i, p) in full.carried.iter().enumerate() {
            assert_eq!(full.page(i, PS), &page(*p)[..]);
        }
        // Change 12 and 101, drop 15..17 and 104, add 200.
        mem.pages.insert(12, page(1012));
        mem.pages.insert(101, page(1101));
        for p in [15, 16, 104] {
            mem.pages.remove(&p);
        }
        mem.pages.insert(200, page(200));
        let runs = runs_of(&mem.pages, &[]);
        let inc = scan_part(&mem, &runs, &full.state, opts(false, false), full.data).unwrap();
        assert_eq!(inc.carried, vec![12, 101, 200]);
        assert_eq!(inc.page(0, PS), &page(1012)[..]);
        assert_eq!(inc.page(1, PS), &page(1101)[..]);
        assert_eq!(inc.page(2, PS), &page(200)[..]);
        assert_eq!(inc.gone, vec![15, 16, 104]);
        assert_eq!(
            drop_ranges(&inc.gone),
            vec![
                DropRange {
                    first: 15,
                    count: 2
                },
                DropRange {
                    first: 104,
                    count: 1
                }
            ]
        );
        assert_eq!(
            (inc.stats.changed, inc.stats.new, inc.stats.gone),
            (2, 1, 3)
        );
        assert_eq!(inc.state.len(), mem.pages.len());
        assert!(inc.state.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn keep_all_carries_every_page_and_marks_the_dirty_ones() {
        let mut mem = Fake {
            pages: (0..50).map(|p| (p, page(p))).collect(),
            unreadable: vec![],
        };
        let first = scan_part(
            &mem,
            &runs_of(&mem.pages, &[]),
            &[],
            opts(false, false),
            Vec::new(),
        )
        .unwrap();
        mem.pages.insert(7, page(707));
        let all = scan_part(
            &mem,
            &runs_of(&mem.pages, &[]),
            &first.state,
            opts(false, true),
            Vec::new(),
        )
        .unwrap();
        assert_eq!(all.carried.len(), 50);
        let dirty: Vec<u64> = (0..50).filter(|&i| all.is_dirty(i as usize)).collect();
        assert_eq!(dirty, vec![7]);
        assert_eq!(all.page(7, PS), &page(707)[..]);
        assert_eq!(all.page(8, PS), &page(8)[..]);
    }

    #[test]
    fn soft_dirty_skips_clean_known_pages_but_reads_new_ones() {
        let mut mem = Fake {
            pages: (0..20).map(|p| (p, page(p))).collect(),
            unreadable: vec![],
        };
        let first = scan_part(
            &mem,
            &runs_of(&mem.pages, &[]),
            &[],
            opts(true, false),
            Vec::new(),
        )
        .unwrap();
        // Page 3 is rewritten (soft-dirty), 4 is written with the same bytes
        // (soft-dirty, not changed), 30 is new without the bit (a restarted
        // capture), 5 changes without the bit (cannot happen with a kernel
        // that tracks soft-dirty; proves the bit is trusted).
        mem.pages.insert(3, page(303));
        mem.pages.insert(30, page(30));
        mem.pages.insert(5, page(505));
        let runs = runs_of(&mem.pages, &[3, 4]);
        let inc = scan_part(&mem, &runs, &first.state, opts(true, false), Vec::new()).unwrap();
        assert_eq!(inc.carried, vec![3, 30]);
        assert_eq!(inc.stats.read, 3);
        let h5 = inc.state.iter().find(|e| e.0 == 5).unwrap().1;
        assert_eq!(h5, first.state[5].1, "an unread page keeps its old hash");
    }

    #[test]
    fn unreadable_pages_are_absent() {
        let mut mem = Fake {
            pages: (0..10).map(|p| (p, page(p))).collect(),
            unreadable: vec![],
        };
        let first = scan_part(
            &mem,
            &runs_of(&mem.pages, &[]),
            &[],
            opts(false, false),
            Vec::new(),
        )
        .unwrap();
        mem.unreadable = vec![4];
        mem.pages.insert(5, page(55));
        let inc = scan_part(
            &mem,
            &runs_of(&mem.pages, &[]),
            &first.state,
            opts(false, false),
            Vec::new(),
        )
        .unwrap();
        assert_eq!(inc.carried, vec![5]);
        assert_eq!(inc.gone, vec![4]);
        assert_eq!(inc.stats.unreadable, 1);
        assert_eq!(inc.stats.live, 9);
        assert!(!inc.state.iter().any(|e| e.0 == 4));
    }

    #[test]
    fn big_scattered_scans_respect_the_iovec_limit() {
        // Every other page: one iovec per page, more than IOV_MAX per chunk.
        let mem = Fake {
            pages: (0..6000u64).map(|i| (i * 2, page(i))).collect(),
            unreadable: vec![],
        };
        let runs = runs_of(&mem.pages, &[]);
        let s = scan_part(&mem, &runs, &[], opts(false, false), Vec::new()).unwrap();
        assert_eq!(s.carried.len(), 6000);
        assert_eq!(s.page(5999, PS), &page(5999)[..]);
    }

    #[test]
    fn pagemap_errors_say_what_is_missing() {
        let e =
            pagemap_error(7, "open", std::io::Error::from_raw_os_error(libc::ENOENT)).to_string();
        assert!(
            e.starts_with("process 7: this kernel has no /proc/PID/pagemap"),
            "{e}"
        );
        assert!(e.contains("CONFIG_PROC_PAGE_MONITOR"), "{e}");
        let e =
            pagemap_error(7, "read", std::io::Error::from_raw_os_error(libc::EPERM)).to_string();
        assert!(
            e.contains("does not allow") && e.contains("CAP_SYS_PTRACE"),
            "{e}"
        );
    }

    #[test]
    fn split_runs_balances_and_cuts_runs() {
        let runs = vec![
            Run {
                first: 0,
                count: 10,
                soft_dirty: true,
            },
            Run {
                first: 100,
                count: 5,
                soft_dirty: false,
            },
            Run {
                first: 200,
                count: 1,
                soft_dirty: true,
            },
        ];
        let (g, b) = split_runs(&runs, 2);
        assert_eq!(g.len(), 2);
        assert_eq!(b, vec![8]);
        assert_eq!(
            g[0],
            vec![Run {
                first: 0,
                count: 8,
                soft_dirty: true
            }]
        );
        assert_eq!(
            g[1][0],
            Run {
                first: 8,
                count: 2,
                soft_dirty: true
            }
        );
        assert_eq!(g[1].iter().map(|r| r.count).sum::<u64>(), 8);
        let (g, b) = split_runs(&runs, 1);
        assert_eq!((g.len(), b.len()), (1, 0));
        let (g, _) = split_runs(&[], 3);
        assert_eq!(g.len(), 1);
    }
}
