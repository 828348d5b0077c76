//! Real L1 checkpoints of a live process (`rexctl capture`).
//!
//! A [`Capture`] is attached to one process and one L1 directory. Each
//! [`Capture::checkpoint`]:
//!
//! 1. stops every thread of the process ([`StopMethod`]);
//! 2. reads `/proc/PID/maps` and the pagemap of its writable private
//!    mappings, and the bytes of the live pages (present or swapped), with
//!    large vectored reads, in parallel on large processes;
//! 3. hashes every page (XXH3-64) and compares it with the previous
//!    checkpoint's hash, or, when the kernel tracks soft-dirty bits, reads
//!    only the pages written since the last checkpoint; the dirty pages are
//!    copied into a buffer while the process is stopped, so the checkpoint is
//!    exactly the memory at the stop;
//! 4. resumes the process: the **stop time**, what the job pays, ends here;
//! 5. writes the REX-IC file (the first FULL, then incrementals with the
//!    dirty pages and drop ranges for pages that are gone), published
//!    atomically, then the hash state (`L1/.capture-state`).
//!
//! Page number = virtual address / page size (the system's page size).
//!
//! **Chains and restarts.** The state file names the process it belongs to
//! (pid, start time, boot). A new capture continues the chain with an
//! incremental when the state belongs to the same process and its last seq
//! is the newest seq of the L1 directory (IC files, and the generations
//! already pushed from it); otherwise (another process, a new `-- CMD`, a
//! state behind the directory, `--full`) it starts a new chain with a FULL
//! checkpoint at the next seq, which the L1 rules allow after any seq.
//!
//! **A process that exits** before or during a checkpoint ends the capture:
//! the checkpoint in progress is discarded before anything is published
//! (the IC file is written only after the process was resumed alive), so the
//! chain stays valid, and [`Step::Exited`] says so.
//!
//! Two captures cannot write one L1 directory at once
//! (`L1/.capture.lock`). `rexctl push-l2` and `flush` may run beside a
//! capture: they only read and delete published IC files. A capture holds
//! the L1 directory's producer lock for its whole run, as a job
//! checkpointing itself through librex does, so that a push's recovery
//! leaves the temporary file of the checkpoint being written alone, and so
//! that a capture and a librex job never write one L1 directory.

mod memory;
mod process;
pub mod programs;
mod state;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

pub use memory::{Mapping, PagemapStats, ScanStats, parse_maps};
pub use process::{PERMISSION_HINT, StopMethod, permission_error};
pub use state::{CaptureState, ProcessIdentity, STATE_NAME};

use crate::durable;
use crate::error::{Error, IoContext, Result};
use crate::format::ic::{ChainId, IcExt, IcWriter, InstanceId, now_ns};
use crate::l1::lock::JobLock;
use memory::{
    Memory, ProcMemory, ScanOpts, ScanPart, drop_ranges, live_runs, scan_part, split_runs,
};
use process::{Fail, Stopped, proc_path};

/// Name of the lock file that keeps two captures out of one L1 directory.
pub const CAPTURE_LOCK: &str = ".capture.lock";

/// Present (durably) from just before a capture may reset the soft-dirty
/// bits until that checkpoint's state is saved: a capture that finds it
/// continues the chain without trusting the bits, which describe a stop
/// that was never published.
pub const CLEARING_NAME: &str = ".capture-clearing";

/// Scans smaller than this run on one thread.
const PARALLEL_MIN_BYTES: u64 = 16 << 20;

/// How dirty pages are found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum DirtyMode {
    /// Soft-dirty bits when the kernel tracks them, else hashes.
    #[default]
    Auto,
    /// Compare a hash of every page with the previous checkpoint's.
    Hash,
    /// The kernel's soft-dirty bits (`/proc/PID/clear_refs`, pagemap bit
    /// 55); fails on a kernel without CONFIG_MEM_SOFT_DIRTY.
    SoftDirty,
}

/// How a capture behaves.
#[derive(Clone, Debug)]
pub struct CaptureOptions {
    /// Dirty-page detection.
    pub dirty: DirtyMode,
    /// How the process is stopped.
    pub stop: StopMethod,
    /// Start a new chain with a FULL checkpoint even when the state would
    /// let the capture continue.
    pub full: bool,
    /// How long to wait for every thread to stop.
    pub stop_timeout: Duration,
    /// Threads reading and hashing (0: up to 4, as the machine allows).
    pub threads: usize,
}

impl Default for CaptureOptions {
    fn default() -> Self {
        CaptureOptions {
            dirty: DirtyMode::Auto,
            stop: StopMethod::Ptrace,
            full: false,
            stop_timeout: Duration::from_secs(10),
            threads: 0,
        }
    }
}

/// Where the time of a stop went, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct StopTimes {
    /// From the stop request to the process running again: what the job
    /// pays.
    pub total_s: f64,
    /// Until every thread was stopped.
    pub stop_s: f64,
    /// Reading `/proc/PID/maps` and the pagemap.
    pub pagemap_s: f64,
    /// Reading, hashing and copying page data.
    pub read_s: f64,
    /// Resuming (and, with soft-dirty, clearing the bits).
    pub resume_s: f64,
}

/// One checkpoint taken.
#[derive(Clone, Debug, Serialize)]
pub struct CheckpointReport {
    /// Its seq.
    pub seq: u64,
    /// Whether it is a FULL checkpoint (the start of a chain).
    pub full: bool,
    /// The IC file written.
    #[serde(serialize_with = "crate::format::json_path::path")]
    pub path: PathBuf,
    /// Capture time (the stop), Unix nanoseconds.
    pub time_ns: u64,
    /// Live pages of the process.
    pub live_pages: u64,
    /// Pages carried by the file.
    pub pages: u64,
    /// Bytes of page data carried (pages x page size).
    pub data_bytes: u64,
    /// Of them, pages the previous checkpoint did not have.
    pub new_pages: u64,
    /// Of them, pages whose bytes changed.
    pub changed_pages: u64,
    /// Pages gone since the previous checkpoint.
    pub dropped_pages: u64,
    /// Drop ranges in the file.
    pub drop_ranges: u64,
    /// Pages read from the process.
    pub read_pages: u64,
    /// Live pages that were swapped out (read back in).
    pub swapped_pages: u64,
    /// Pages that could not be read (left out).
    pub unreadable_pages: u64,
    /// Threads stopped.
    pub threads: usize,
    /// Threads used to read and hash.
    pub scan_threads: usize,
    /// Size of the IC file.
    pub file_bytes: u64,
    /// The stop.
    pub stop: StopTimes,
    /// Writing the IC file and the state after the process resumed.
    pub write_s: f64,
    /// `hash` or `soft-dirty`.
    pub dirty_detection: &'static str,
    /// `process_vm_readv` or `/proc/PID/mem`.
    pub reader: &'static str,
    /// The FULL copy written at the same stop, if one was asked for.
    #[serde(serialize_with = "crate::format::json_path::opt_path")]
    pub full_copy: Option<PathBuf>,
}

/// What one checkpoint request did.
#[derive(Clone, Debug)]
pub enum Step {
    /// A checkpoint was taken and published.
    Taken(Box<CheckpointReport>),
    /// The process exited before or during the checkpoint; nothing was
    /// published and the chain is unchanged.
    Exited,
}

/// A capture attached to one process and one L1 directory.
pub struct Capture {
    ident: ProcessIdentity,
    l1: PathBuf,
    page_size: u32,
    opts: CaptureOptions,
    soft_dirty: bool,
    soft_cleared: bool,
    prev: Vec<(u64, u64)>,
    next_seq: u64,
    next_full: bool,
    /// The run the checkpoints belong to; minted with each FULL one.
    chain_id: Option<ChainId>,
    /// This capture's instance id (§2.11.2), minted at its start: a
    /// capture that continues a chain is a new writer of it.
    instance: InstanceId,
    /// The writer of the checkpoint the next incremental continues, when
    /// known (§2.11.2).
    continues: Option<Option<InstanceId>>,
    start_note: String,
    bufs: Vec<Vec<u8>>,
    _lock: File,
    _producer: JobLock,
    after_stop: Option<Box<dyn FnMut(u32) + Send>>,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture")
            .field("process", &self.ident)
            .field("l1", &self.l1)
            .field("next_seq", &self.next_seq)
            .field("next_full", &self.next_full)
            .finish()
    }
}

/// The system page size.
pub fn system_page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as usize } else { 4096 }
}

/// Whether this kernel tracks soft-dirty bits: a page this process has just
/// written shows pagemap bit 55 only on a kernel with CONFIG_MEM_SOFT_DIRTY.
pub fn soft_dirty_supported() -> bool {
    let ps = system_page_size();
    let mut probe = vec![0u8; ps * 2];
    let base = probe.as_ptr() as usize;
    let off = base.next_multiple_of(ps) - base;
    probe[off] = 1;
    std::hint::black_box(&mut probe);
    let page = ((base + off) / ps) as u64;
    let Ok(pm) = File::open("/proc/self/pagemap") else {
        return false;
    };
    let mut e = [0u8; 8];
    use std::os::unix::fs::FileExt;
    let ok = pm.read_exact_at(&mut e, page * 8).is_ok();
    drop(probe);
    ok && u64::from_le_bytes(e) & (1 << 55) != 0
}

/// The newest seq an L1 directory knows: its IC files, and the generations
/// already pushed from it (`L1/rex`).
pub fn newest_seq(l1: &Path) -> Result<Option<u64>> {
    Ok(newest_checkpoint(l1)?.map(|n| n.0))
}

/// The newest seq an L1 directory knows, the run (chain id) it belongs
/// to and who wrote it: from its IC files, and the generations already
/// pushed from it.
pub fn newest_checkpoint(
    l1: &Path,
) -> Result<Option<(u64, Option<ChainId>, crate::format::manifest::Writer)>> {
    use crate::format::manifest::Writer;
    let mut newest = crate::l1::read_all(l1)?.last().map(|m| {
        (
            m.seq(),
            m.chain_id,
            m.instance.map_or(Writer::NoId, Writer::Id),
        )
    });
    let chain = l1.join(crate::l2::push::L1_CHAIN_DIR);
    if chain.is_dir() {
        let store = crate::store::DirStore::open(&chain)?;
        let index = crate::l2::chain::ChainIndex::load(&store)?;
        if let Some(m) = index.newest()
            && newest.is_none_or(|n| m.last_seq > n.0)
        {
            newest = Some((m.last_seq, m.chain_id, m.instance_at(m.last_seq)));
        }
    }
    Ok(newest)
}

fn lock_dir(l1: &Path) -> Result<File> {
    use std::io::{Read, Seek, SeekFrom, Write};
    use std::os::fd::AsRawFd;
    let path = l1.join(CAPTURE_LOCK);
    let mut file = crate::l1::lock::open_lock_file(&path, true)?;
    // SAFETY: flock on a descriptor owned by `file`, which outlives the
    // call; it has no memory-safety preconditions.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            return Err(Error::Busy {
                path,
                holder: format!(
                    "another capture writes this L1 directory ({})",
                    holder.trim()
                ),
            });
        }
        return Err(Error::io(&path, "flock", e));
    }
    let info = format!("rexctl capture, pid {}\n", std::process::id());
    file.set_len(0).ctx(&path, "truncate lock file")?;
    file.seek(SeekFrom::Start(0)).ctx(&path, "seek lock file")?;
    file.write_all(info.as_bytes())
        .ctx(&path, "write lock file")?;
    Ok(file)
}

fn exited_error(pid: u32) -> Error {
    Error::Process {
        pid,
        reason: "it exited before it could be captured".into(),
    }
}

impl Capture {
    /// Attaches to process `pid` for checkpoints into the L1 directory `l1`
    /// (created if missing). Checks access now, so that a permission problem
    /// is reported before any checkpoint, and decides where the chain
    /// continues (see the module documentation).
    pub fn attach(pid: u32, l1: impl AsRef<Path>, opts: CaptureOptions) -> Result<Capture> {
        let l1 = l1.as_ref().to_path_buf();
        let ident = process::identify(pid)?;
        match ProcMemory::open(pid) {
            Ok(_) => {}
            Err(Fail::Exited) => return Err(exited_error(pid)),
            Err(Fail::Err(e)) => return Err(e),
        }
        File::open(proc_path(pid, "pagemap")).map_err(|e| memory::pagemap_error(pid, "open", e))?;
        let ps = system_page_size();
        let page_size = u32::try_from(ps)
            .ok()
            .filter(|p| {
                (crate::format::ic::MIN_PAGE_SIZE..=crate::format::ic::MAX_PAGE_SIZE).contains(p)
            })
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "the system page size {ps} cannot be stored in REX-IC files"
                ))
            })?;
        let clear_refs_ok = || {
            std::fs::OpenOptions::new()
                .write(true)
                .open(proc_path(pid, "clear_refs"))
                .is_ok()
        };
        let soft_dirty = match opts.dirty {
            DirtyMode::Hash => false,
            DirtyMode::SoftDirty => {
                if !soft_dirty_supported() {
                    return Err(Error::Invalid(
                        "--dirty soft-dirty: this kernel does not track soft-dirty bits (it is built without CONFIG_MEM_SOFT_DIRTY); use --dirty hash".into(),
                    ));
                }
                if !clear_refs_ok() {
                    return Err(permission_error(
                        pid,
                        "open /proc/PID/clear_refs",
                        std::io::Error::from_raw_os_error(libc::EACCES),
                    ));
                }
                true
            }
            DirtyMode::Auto => soft_dirty_supported() && clear_refs_ok(),
        };
        if l1.exists() && !l1.is_dir() {
            return Err(Error::Invalid(format!(
                "L1 directory {}: not a directory",
                l1.display()
            )));
        }
        std::fs::create_dir_all(&l1).ctx(&l1, "create directory")?;
        let lock = lock_dir(&l1)?;
        let producer = JobLock::acquire_producer(&l1, "rexctl capture")?;
        // A crashed predecessor's half-written checkpoint (as librex does).
        crate::durable::remove_stale_temps(&l1)?;
        let newest_ck = newest_checkpoint(&l1)?;
        let newest = newest_ck.map(|n| n.0);
        let (state, state_note) = match CaptureState::load(&l1) {
            Ok(s) => (s, None),
            Err(e) => (
                None,
                Some(format!("ignoring a damaged capture state ({e})")),
            ),
        };
        let mut cap = Capture {
            ident,
            l1,
            page_size,
            opts,
            soft_dirty,
            soft_cleared: false,
            prev: Vec::new(),
            next_seq: newest.map_or(0, |s| s + 1),
            next_full: true,
            chain_id: None,
            instance: InstanceId::random()?,
            continues: None,
            start_note: String::new(),
            bufs: Vec::new(),
            _lock: lock,
            _producer: producer,
            after_stop: None,
        };
        let why_full = match &state {
            _ if cap.opts.full => "--full asks for a new chain".to_string(),
            None => state_note.unwrap_or_else(|| "no earlier capture in this directory".into()),
            Some(s) if !s.process.same_process(&cap.ident) => format!(
                "the earlier capture was of another process (pid {}: {})",
                s.process.pid, s.process.command
            ),
            Some(s) if s.page_size != page_size => {
                format!("the earlier capture used {}-byte pages", s.page_size)
            }
            Some(s) if Some(s.last_seq) != newest => format!(
                "the capture state (seq {}) is not the newest checkpoint of the directory ({})",
                s.last_seq,
                newest.map_or("none".into(), |n| format!("seq {n}"))
            ),
            Some(_) => String::new(),
        };
        match state {
            Some(s) if why_full.is_empty() => {
                cap.next_seq = s.last_seq + 1;
                cap.next_full = false;
                // Continue the run of the newest checkpoint (none for a
                // version 1 chain, which stays version 1).
                cap.chain_id = newest_ck.and_then(|n| n.1);
                cap.continues = newest_ck.and_then(|n| n.2.continued());
                cap.soft_cleared = s.flags & state::FLAG_SOFT_DIRTY_CLEARED != 0
                    && !cap.l1.join(CLEARING_NAME).exists();
                cap.start_note = format!(
                    "continuing the chain of this process after seq {} ({} live pages)",
                    s.last_seq,
                    s.entries.len()
                );
                cap.prev = s.entries;
            }
            s => {
                if let Some(s) = s {
                    cap.next_seq = cap.next_seq.max(s.last_seq + 1);
                }
                cap.start_note = format!(
                    "new chain from a FULL checkpoint at seq {}: {why_full}",
                    cap.next_seq
                );
            }
        }
        Ok(cap)
    }

    /// The process.
    pub fn process(&self) -> &ProcessIdentity {
        &self.ident
    }

    /// The L1 directory.
    pub fn l1(&self) -> &Path {
        &self.l1
    }

    /// Page size of the checkpoints.
    pub fn page_size(&self) -> u32 {
        self.page_size
    }

    /// Seq of the next checkpoint.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Whether the next checkpoint is FULL.
    pub fn next_is_full(&self) -> bool {
        self.next_full
    }

    /// Where the chain starts or continues, and why, in one sentence.
    pub fn start_note(&self) -> &str {
        &self.start_note
    }

    /// `soft-dirty` or `hash`.
    pub fn dirty_detection(&self) -> &'static str {
        if self.soft_dirty {
            "soft-dirty"
        } else {
            "hash"
        }
    }

    /// How the process is stopped.
    pub fn stop_method(&self) -> StopMethod {
        self.opts.stop
    }

    /// For tests: runs `hook(pid)` while the process is stopped, before its
    /// memory is read (to kill it mid-checkpoint, say).
    #[doc(hidden)]
    pub fn set_after_stop_hook(&mut self, hook: Box<dyn FnMut(u32) + Send>) {
        self.after_stop = Some(hook);
    }

    /// Takes one checkpoint now.
    pub fn checkpoint(&mut self) -> Result<Step> {
        self.take(None)
    }

    /// Takes one checkpoint now and, from the same stop, also writes a FULL
    /// copy of the whole image to `full` (for checking a chain against it).
    pub fn checkpoint_with_full_copy(&mut self, full: &Path) -> Result<Step> {
        self.take(Some(full))
    }

    fn take(&mut self, full_copy: Option<&Path>) -> Result<Step> {
        let pid = self.ident.pid;
        if !process::alive(&self.ident) {
            return Ok(Step::Exited);
        }
        if self.soft_dirty {
            // Durable before the bits are reset below: should this
            // checkpoint not be published, a later capture must not take
            // them as the changes since the saved state.
            durable::write_file(self.l1.join(CLEARING_NAME), b"")?;
        }
        let time_ns = now_ns();
        let t0 = Instant::now();
        let stopped = match Stopped::stop(pid, self.opts.stop, self.opts.stop_timeout) {
            Ok(s) => s,
            Err(Fail::Exited) => return Ok(Step::Exited),
            Err(Fail::Err(e)) => return Err(e),
        };
        let mut times = StopTimes {
            stop_s: t0.elapsed().as_secs_f64(),
            ..Default::default()
        };
        let threads = stopped.threads();
        if let Some(h) = self.after_stop.as_mut() {
            h(pid);
        }
        let scanned = self.read_stopped(full_copy.is_some(), &mut times);
        let t_resume = Instant::now();
        let mut clear_ok = false;
        if self.soft_dirty && scanned.is_ok() {
            // From here the bits describe this stop, which is not published
            // yet: until it is, they cannot be trusted.
            self.soft_cleared = false;
            clear_ok = std::fs::write(proc_path(pid, "clear_refs"), b"4").is_ok();
        }
        let resumed = stopped.resume();
        times.resume_s = t_resume.elapsed().as_secs_f64();
        times.total_s = t0.elapsed().as_secs_f64();
        let scanned = match (scanned, resumed) {
            (Err(Fail::Err(e)), _) => return Err(e),
            (Err(Fail::Exited), _) | (_, Err(Fail::Exited)) => return Ok(Step::Exited),
            (_, Err(Fail::Err(e))) => return Err(e),
            (Ok(s), Ok(())) => s,
        };
        if self.soft_dirty && !clear_ok {
            // The bits could not be reset: later checkpoints hash instead.
            self.soft_dirty = false;
        }
        // The command line as it is now (a program started through a shell
        // or a wrapper has exec'd since the attach).
        if let Ok(id) = process::identify(pid)
            && id.same_process(&self.ident)
        {
            self.ident.command = id.command;
        }
        let t_write = Instant::now();
        let mut report = self.publish(scanned, time_ns, full_copy, times, threads)?;
        self.soft_cleared = self.soft_dirty;
        report.write_s = t_write.elapsed().as_secs_f64();
        Ok(Step::Taken(Box::new(report)))
    }

    /// Everything done while the process is stopped.
    fn read_stopped(
        &mut self,
        keep_all: bool,
        times: &mut StopTimes,
    ) -> std::result::Result<Scanned, Fail> {
        let pid = self.ident.pid;
        let t = Instant::now();
        let maps = match std::fs::read_to_string(proc_path(pid, "maps")) {
            Ok(s) => parse_maps(&s),
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(libc::ESRCH) =>
            {
                return Err(Fail::Exited);
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) => {
                return Err(Fail::Err(permission_error(pid, "read /proc/PID/maps", e)));
            }
            Err(e) => return Err(Fail::Err(Error::io(proc_path(pid, "maps"), "read", e))),
        };
        if maps.is_empty() {
            // Only a process that has exited has no mapping at all.
            return Err(Fail::Exited);
        }
        let pagemap = match File::open(proc_path(pid, "pagemap")) {
            Ok(f) => f,
            Err(_) if !process::alive(&self.ident) => return Err(Fail::Exited),
            Err(e) => return Err(Fail::Err(memory::pagemap_error(pid, "open", e))),
        };
        let use_soft = self.soft_dirty && self.soft_cleared && !self.next_full;
        let mut runs = Vec::new();
        let mut pm_stats = PagemapStats::default();
        let ps = u64::from(self.page_size);
        live_runs(pid, &pagemap, &maps, ps, use_soft, &mut runs, &mut pm_stats)?;
        times.pagemap_s = t.elapsed().as_secs_f64();

        let t = Instant::now();
        let mem = ProcMemory::open(pid)?;
        let live: u64 = runs.iter().map(|r| r.count).sum();
        let threads = match self.opts.threads {
            0 if live * ps >= PARALLEL_MIN_BYTES => std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(4),
            0 => 1,
            n => n,
        };
        let (groups, bounds) = split_runs(&runs, threads);
        let prev = &self.prev;
        let mut slices = Vec::with_capacity(groups.len());
        let mut lo = 0;
        for b in &bounds {
            let hi = prev.partition_point(|e| e.0 < *b);
            slices.push(&prev[lo..hi]);
            lo = hi;
        }
        slices.push(&prev[lo..]);
        let opts = ScanOpts {
            page_size: ps as usize,
            use_soft_dirty: use_soft,
            keep_all,
        };
        let mut bufs = std::mem::take(&mut self.bufs);
        bufs.resize_with(groups.len().max(bufs.len()), Vec::new);
        let memref: &dyn Memory = &mem;
        let parts: Vec<std::result::Result<ScanPart, Fail>> = if groups.len() == 1 {
            vec![scan_part(
                memref,
                &groups[0],
                slices[0],
                opts,
                bufs.swap_remove(0),
            )]
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = groups
                    .iter()
                    .zip(&slices)
                    .zip(bufs.drain(..groups.len()))
                    .map(|((g, p), buf)| s.spawn(move || scan_part(memref, g, p, opts, buf)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| match h.join() {
                        Ok(r) => r,
                        Err(_) => Err(Fail::Err(Error::Invalid(
                            "a capture scan thread panicked".into(),
                        ))),
                    })
                    .collect()
            })
        };
        self.bufs = bufs;
        let parts = parts
            .into_iter()
            .collect::<std::result::Result<Vec<_>, _>>()?;
        times.read_s = t.elapsed().as_secs_f64();
        Ok(Scanned {
            parts,
            pagemap: pm_stats,
            scan_threads: groups.len(),
            reader: if mem.uses_vm_readv() {
                "process_vm_readv"
            } else {
                "/proc/PID/mem"
            },
        })
    }

    /// Writes the IC file (and the FULL copy), then the state.
    fn publish(
        &mut self,
        s: Scanned,
        time_ns: u64,
        full_copy: Option<&Path>,
        stop: StopTimes,
        threads: usize,
    ) -> Result<CheckpointReport> {
        let ps = self.page_size as usize;
        let seq = self.next_seq;
        let full = self.next_full;
        let mut pages = Vec::new();
        let mut stats = ScanStats::default();
        let mut gone = Vec::new();
        for p in &s.parts {
            pages.extend(
                p.carried
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| p.is_dirty(*i))
                    .map(|(_, pg)| *pg),
            );
            gone.extend_from_slice(&p.gone);
            stats.live += p.stats.live;
            stats.read += p.stats.read;
            stats.unreadable += p.stats.unreadable;
            stats.new += p.stats.new;
            stats.changed += p.stats.changed;
            stats.gone += p.stats.gone;
        }
        gone.sort_unstable();
        let drops = if full { Vec::new() } else { drop_ranges(&gone) };
        let path = self.l1.join(crate::l1::ic_file_name(seq));
        let (n_pages, n_drops) = (pages.len() as u64, drops.len() as u64);
        if full {
            self.chain_id = Some(ChainId::random()?);
        }
        // A version 1 chain (no chain id) stays version 1, without an
        // instance id either.
        let ext = IcExt {
            chain: self.chain_id,
            instance: self.chain_id.map(|_| self.instance),
            regions: None,
            continues: match self.chain_id {
                Some(_) if !full => self.continues,
                _ => None,
            },
        };
        let mut w = IcWriter::create_ext(
            &path,
            self.page_size,
            seq,
            full,
            time_ns,
            &ext,
            pages,
            drops,
        )?;
        for p in &s.parts {
            for i in 0..p.carried.len() {
                if p.is_dirty(i) {
                    w.push_page(p.page(i, ps))?;
                }
            }
        }
        w.finish()?;
        if let Some(fc) = full_copy {
            let all: Vec<u64> = s
                .parts
                .iter()
                .flat_map(|p| p.carried.iter().copied())
                .collect();
            let mut w = IcWriter::create(fc, self.page_size, seq, true, time_ns, all, Vec::new())?;
            for p in &s.parts {
                for i in 0..p.carried.len() {
                    w.push_page(p.page(i, ps))?;
                }
            }
            w.finish()?;
        }
        let file_bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        let mut entries = Vec::with_capacity(stats.live as usize);
        let mut bufs = Vec::with_capacity(s.parts.len());
        for p in s.parts {
            entries.extend_from_slice(&p.state);
            let mut data = p.data;
            // Keep the buffer for the next checkpoint, unless it is far
            // larger than what this one needed.
            let need = data.len();
            data.clear();
            if data.capacity() > 2 * need + (64 << 20) {
                data.shrink_to(need);
            }
            bufs.push(data);
        }
        self.bufs = bufs;
        let st = CaptureState {
            page_size: self.page_size,
            process: self.ident.clone(),
            flags: if self.soft_dirty {
                state::FLAG_SOFT_DIRTY_CLEARED
            } else {
                0
            },
            last_seq: seq,
            time_ns,
            entries,
        };
        st.save(&self.l1)?;
        // The saved state now matches the bits (a removal lost in a crash
        // only costs the next capture a hashed checkpoint).
        let _ = std::fs::remove_file(self.l1.join(CLEARING_NAME));
        self.prev = st.entries;
        self.next_seq = seq + 1;
        self.next_full = false;
        self.continues = Some(Some(self.instance));
        Ok(CheckpointReport {
            seq,
            full,
            path,
            time_ns,
            live_pages: stats.live,
            pages: n_pages,
            data_bytes: n_pages * u64::from(self.page_size),
            new_pages: stats.new,
            changed_pages: stats.changed,
            dropped_pages: if full { 0 } else { stats.gone },
            drop_ranges: n_drops,
            read_pages: stats.read,
            swapped_pages: s.pagemap.swapped,
            unreadable_pages: stats.unreadable,
            threads,
            scan_threads: s.scan_threads,
            file_bytes,
            stop,
            write_s: 0.0,
            dirty_detection: if self.soft_dirty {
                "soft-dirty"
            } else {
                "hash"
            },
            reader: s.reader,
            full_copy: full_copy.map(Path::to_path_buf),
        })
    }
}

struct Scanned {
    parts: Vec<ScanPart>,
    pagemap: PagemapStats,
    scan_threads: usize,
    reader: &'static str,
}

/// How a capture run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ended {
    /// The requested number of checkpoints was taken.
    Count,
    /// The process exited.
    Exited,
    /// Interrupted (SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM,
    /// SIGXCPU).
    Interrupted,
}

/// Summary statistics of the stop times, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct StopSummary {
    /// Mean stop.
    pub mean_s: f64,
    /// Shortest stop.
    pub min_s: f64,
    /// Longest stop.
    pub max_s: f64,
    /// All stops together.
    pub total_s: f64,
    /// Mean stop of the incremental checkpoints only.
    pub incremental_mean_s: Option<f64>,
}

/// What a capture run did.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    /// The process.
    pub process: ProcessIdentity,
    /// The L1 directory.
    #[serde(serialize_with = "crate::format::json_path::path")]
    pub l1: PathBuf,
    /// Page size.
    pub page_size: u32,
    /// `hash` or `soft-dirty`.
    pub dirty_detection: &'static str,
    /// How the process was stopped.
    pub stop_method: StopMethod,
    /// Where the chain started or continued.
    pub start: String,
    /// The checkpoints taken.
    pub checkpoints: Vec<CheckpointReport>,
    /// How the run ended.
    pub ended: Ended,
    /// Stop times.
    pub stop: StopSummary,
    /// Bytes of IC files written.
    pub bytes_written: u64,
}

impl RunReport {
    fn summarize(&mut self) {
        let stops: Vec<f64> = self.checkpoints.iter().map(|c| c.stop.total_s).collect();
        let inc: Vec<f64> = self
            .checkpoints
            .iter()
            .filter(|c| !c.full)
            .map(|c| c.stop.total_s)
            .collect();
        if !stops.is_empty() {
            let total: f64 = stops.iter().sum();
            self.stop = StopSummary {
                mean_s: total / stops.len() as f64,
                min_s: stops.iter().copied().fold(f64::INFINITY, f64::min),
                max_s: stops.iter().copied().fold(0.0, f64::max),
                total_s: total,
                incremental_mean_s: (!inc.is_empty())
                    .then(|| inc.iter().sum::<f64>() / inc.len() as f64),
            };
        }
        self.bytes_written = self.checkpoints.iter().map(|c| c.file_bytes).sum();
    }
}

/// How a capture run proceeds.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Time between checkpoints; the first is taken one interval after the
    /// start.
    pub interval: Duration,
    /// Stop after this many checkpoints (else: until the process exits or
    /// the run is interrupted).
    pub count: Option<u64>,
    /// Also write a FULL copy of the image at every stop to this file
    /// (replaced each time): for checking a chain against it.
    pub full_copy: Option<PathBuf>,
    /// Ends the run when set (see [`interrupt_flag`]).
    pub interrupt: Option<&'static AtomicBool>,
}

/// Takes checkpoints every `interval` until `count` is reached, the process
/// exits or the run is interrupted. `on_checkpoint` sees each checkpoint as
/// it is taken.
pub fn run(
    cap: &mut Capture,
    opts: &RunOptions,
    mut on_checkpoint: impl FnMut(&CheckpointReport),
) -> Result<RunReport> {
    if opts.interval.is_zero() {
        return Err(Error::Invalid("--interval must be above 0".into()));
    }
    let mut report = RunReport {
        process: cap.ident.clone(),
        l1: cap.l1.clone(),
        page_size: cap.page_size,
        dirty_detection: cap.dirty_detection(),
        stop_method: cap.opts.stop,
        start: cap.start_note.clone(),
        checkpoints: Vec::new(),
        ended: Ended::Count,
        stop: StopSummary::default(),
        bytes_written: 0,
    };
    let interrupted = || opts.interrupt.is_some_and(|f| f.load(Ordering::SeqCst));
    let start = Instant::now();
    let mut k: u32 = 0;
    loop {
        if opts
            .count
            .is_some_and(|c| report.checkpoints.len() as u64 >= c)
        {
            report.ended = Ended::Count;
            break;
        }
        k += 1;
        let due = start + opts.interval * k;
        let mut gone = false;
        while Instant::now() < due {
            if interrupted() {
                break;
            }
            if !process::alive(&cap.ident) {
                gone = true;
                break;
            }
            std::thread::sleep((due - Instant::now()).min(Duration::from_millis(10)));
        }
        if interrupted() {
            report.ended = Ended::Interrupted;
            break;
        }
        if gone {
            report.ended = Ended::Exited;
            break;
        }
        // A checkpoint that took longer than the interval: skip the missed
        // ticks rather than taking checkpoints back to back.
        while start + opts.interval * (k + 1) < Instant::now() {
            k += 1;
        }
        let step = match &opts.full_copy {
            Some(f) => cap.checkpoint_with_full_copy(f)?,
            None => cap.checkpoint()?,
        };
        match step {
            Step::Taken(c) => {
                on_checkpoint(&c);
                report.checkpoints.push(*c);
            }
            Step::Exited => {
                report.ended = Ended::Exited;
                break;
            }
        }
    }
    report.process = cap.ident.clone();
    report.summarize();
    Ok(report)
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// A flag set from now on by the signals that end other commands after
/// their temporary files are removed (SIGINT, SIGTERM, SIGHUP, SIGUSR1,
/// SIGUSR2, SIGALRM, SIGXCPU: rexctl(1)), for [`RunOptions::interrupt`]:
/// the run ends after the checkpoint in progress instead of the process
/// dying half way with its file half written (helper-95: SIGHUP and
/// SIGUSR1, which Slurm sends before a time limit, left a large temporary
/// checkpoint in L1). A signal ignored when the process started stays
/// ignored (`nohup`, a script's background job), as for the other
/// commands. (SIGXFSZ is not ignored here as in the other commands: an
/// ignored disposition survives exec, and the program a capture starts
/// would run with it.)
pub fn interrupt_flag() -> &'static AtomicBool {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for sig in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGALRM,
            libc::SIGXCPU,
        ] {
            if crate::durable::is_ignored(sig) {
                continue;
            }
            // SAFETY: `on_signal` only stores to an atomic, which is
            // async-signal-safe, and has the signature signal(2) expects.
            unsafe {
                libc::signal(
                    sig,
                    on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
                );
            }
        }
    });
    &INTERRUPTED
}

/// What to do with a program started by [`capture_command`] once the
/// capture ends before it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterCapture {
    /// Wait for it to exit (until interrupted).
    Wait,
    /// Kill it (SIGKILL) and collect it.
    Kill,
}

/// A command captured from start to end.
#[derive(Clone, Debug, Serialize)]
pub struct CommandReport {
    /// The capture.
    #[serde(flatten)]
    pub run: RunReport,
    /// How the program ended, when it did: `exit 0`, `signal 9`.
    pub exit: Option<String>,
}

/// Describes an exit status: `exit 0`, `signal 9`.
pub fn describe_exit(s: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => s.to_string(),
    }
}

/// Starts `cmd` and captures it into `l1` (see [`run`]); when the capture
/// ends before the program, `after` says whether to wait for it or kill it.
/// `on_attach` sees the capture before the first checkpoint. Workloads of
/// the tests and benches are captured this way.
pub fn capture_command(
    cmd: &mut Command,
    l1: &Path,
    copts: CaptureOptions,
    ropts: &RunOptions,
    after: AfterCapture,
    on_attach: impl FnOnce(&Capture),
    on_checkpoint: impl FnMut(&CheckpointReport),
) -> Result<CommandReport> {
    let program = PathBuf::from(cmd.get_program());
    let mut child = cmd
        .spawn()
        .map_err(|e| Error::io(&program, "start program", e))?;
    let result = Capture::attach(child.id(), l1, copts).and_then(|mut cap| {
        on_attach(&cap);
        run(&mut cap, ropts, on_checkpoint)
    });
    let done = |c: &mut std::process::Child| c.try_wait().ok().flatten();
    let mut status = done(&mut child);
    if status.is_none() {
        match (after, &result) {
            (AfterCapture::Wait, Ok(r)) if r.ended != Ended::Interrupted => {
                while status.is_none() && !ropts.interrupt.is_some_and(|f| f.load(Ordering::SeqCst))
                {
                    std::thread::sleep(Duration::from_millis(10));
                    status = match child.try_wait() {
                        Ok(s) => s,
                        Err(_) => break,
                    };
                }
            }
            // After an error the program is left running: it may be a long
            // job that must not be lost because a checkpoint failed.
            (AfterCapture::Wait, _) => {}
            (AfterCapture::Kill, _) => {
                let _ = child.kill();
                status = child.wait().ok();
            }
        }
    }
    let run = match (result, status) {
        // The program ended before the capture could attach to it.
        (Err(Error::Process { pid, .. }), Some(s)) => {
            return Err(Error::Process {
                pid,
                reason: format!(
                    "the program ended ({}) before its first checkpoint: nothing was captured",
                    describe_exit(s)
                ),
            });
        }
        (r, _) => r?,
    };
    Ok(CommandReport {
        run,
        exit: status.map(describe_exit),
    })
}
