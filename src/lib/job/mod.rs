//! librex: a job that checkpoints itself into rexctl and restarts from it.
//!
//! This is the REX paper's L1 side (§3, §3.5, Fig. 8a) as an in-process
//! library: the job registers its memory as regions under stable ids
//! ([`Rex::protect`], [`Rex::alloc`]), and each [`Rex::checkpoint`] writes
//! one REX-IC file with the pages written since the previous one, found by
//! a dirty-page [`tracker`] (the paper's mprotect tracking, or userfaultfd
//! write-protect). A region registered with [`Rex::protect_whole`] is never
//! tracked and goes whole into every checkpoint: no tracker sees a device's
//! DMA into a buffer. The C API in [`capi`] (`rex.h`) is a thin layer over
//! [`Rex`].
//!
//! Where the time goes, and why:
//!
//! * **The job's stop** is only the copy of its dirty pages into a buffer
//!   (and re-protecting them). The file is written, fsynced and published by
//!   a background writer thread; the next checkpoint waits for it if it is
//!   still running, so at most one checkpoint's pages are in memory twice.
//! * **L2 work** runs on a second background thread: after each published
//!   checkpoint it runs the same [`flush`] as `rexctl flush` from cron (job
//!   lock, recovery, the runtime controller's decision, push when due), so
//!   the push overlaps the job's computation. `l2_thread = false` in
//!   rex.toml leaves it to cron.
//! * **Restart** ([`Rex::restart_test`], [`Rex::restart`]) is the restore of
//!   `rexctl restore --l1 --l2 --fallback` into a private image, then a copy
//!   of each page into the region that has its id: L1+L2 after a transient
//!   fault, L2 alone after a lost node.
//!
//! Runs and seq numbers: the first checkpoint is FULL with a fresh chain id.
//! A restarted job continues its run (next seq, same chain id) as a new
//! instance (a fresh instance id per process), so its later checkpoints
//! extend the chain it restored, and a second copy restarted from the same
//! state is told apart from it; when the restore had to
//! fall back past damaged checkpoints, it starts a new run with a FULL
//! checkpoint instead, so that no file of the abandoned tail is ever taken
//! for a continuation. A failed L1 write also makes the next checkpoint
//! FULL: its dirty pages were taken from the tracker but never stored.
//!
//! Only one process writes an L1 directory: the library holds the producer
//! lock (`L1/.rex.producer.lock`) from [`Rex::init`] to [`Rex::finalize`]
//! (or exit). Recovery by `rexctl flush` leaves a live producer's temporary
//! files alone; the library removes its dead predecessor's at init.

mod audit;
pub mod auto;
pub mod capi;
mod restart;
pub mod tracker;
pub mod uffd;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use serde::Serialize;

use crate::control::config::{Config, ConfigLayer, TrackerChoice};
use crate::control::flush::flush;
use crate::error::{Error, Failure, Result};
use crate::format::ic::{ChainId, DropRange, IcExt, IcFile, IcWriter, InstanceId, now_ns};
use crate::format::region::{Region, RegionTable, page_number, split_page};
use crate::l1::ic_file_name;
use crate::l1::lock::JobLock;
use crate::l2::chain::{ChainIndex, XrefSource};
use crate::l2::collective::{
    CollectiveOptions, Comm, HEAL_STAGE, agree, agree_rollback, fail_early, le64, push_collective,
};
use crate::l2::jobgen::{
    JobIndex, JobXrefs, heal_job_manifest, job_manifest_copy, rollback, rollback_plan,
};
use crate::l2::push::{Job, JobIdentity, begin_writing};
use crate::l2::restore::{Output, RestoreOptions, RestoreReport, restore_l1_l2, restore_l1_l2_to};
use crate::store::JobRoot;
use tracker::{MprotectTracker, Range, Tracker};

/// One registered region.
#[derive(Debug)]
struct RegionState {
    /// First byte.
    ptr: usize,
    /// Bytes.
    size: usize,
    /// The page-aligned range the tracker watches: every page that holds a
    /// byte of the region.
    range: Range,
    /// Memory from [`Rex::alloc`] (unmapped by [`Rex::unprotect`]).
    owned: bool,
    /// Carried whole by every checkpoint, never write-tracked
    /// ([`Rex::protect_whole`]): memory written where no tracker sees it.
    whole: bool,
    /// Registered since the last checkpoint: all its pages go into the next.
    fresh: bool,
    /// One bit per tracked page: the region's bytes on it were all zero at
    /// the last checkpoint that copied them (a page discarded since reads
    /// as zeros: it changed only if they were not; see `audit.rs`).
    zero: Vec<u64>,
}

impl RegionState {
    /// The range the tracker holds, or `None` for a region carried whole.
    fn tracked(&self) -> Option<Range> {
        (!self.whole).then_some(self.range)
    }

    /// The region's page count in checkpoints.
    fn pages(&self, ps: usize) -> usize {
        self.size.div_ceil(ps)
    }

    /// Region page `i` holds bytes `i*ps ..` of the region; with an
    /// unaligned start it straddles tracked pages `i` and `i + 1`.
    fn dirty_region_pages(&self, ps: usize, tracked: &[usize]) -> Vec<usize> {
        let off = self.ptr - self.range.start;
        let n = self.pages(ps);
        let mut out = Vec::with_capacity(tracked.len() * 2);
        for &k in tracked {
            // Tracked page k holds region bytes (k*ps - off) .. ((k+1)*ps - off).
            if off == 0 {
                if k < n {
                    out.push(k);
                }
            } else {
                if k >= 1 && k - 1 < n {
                    out.push(k - 1);
                }
                if k < n {
                    out.push(k);
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Whether the region's bytes on tracked page `k` are all zero now.
    fn tracked_page_is_zero(&self, ps: usize, k: usize) -> bool {
        let lo = self.ptr.max(self.range.start + k * ps);
        let hi = (self.ptr + self.size).min(self.range.start + (k + 1) * ps);
        if lo >= hi {
            return true;
        }
        // SAFETY: `lo .. hi` lies inside the registered region, readable
        // memory the job owns; read while its writers are quiet, as in
        // `copy_page`.
        let b = unsafe { std::slice::from_raw_parts(lo as *const u8, hi - lo) };
        b.iter().all(|&x| x == 0)
    }

    /// Records, for each tracked page of `pages`, whether the region's
    /// bytes on it are zero now (they were just copied).
    fn note_zero(&mut self, ps: usize, pages: impl Iterator<Item = usize>) {
        if self.zero.is_empty() {
            self.zero = vec![0; self.range.pages.div_ceil(64)];
        }
        for k in pages {
            let (w, b) = (k / 64, 1u64 << (k % 64));
            if self.tracked_page_is_zero(ps, k) {
                self.zero[w] |= b;
            } else {
                self.zero[w] &= !b;
            }
        }
    }

    /// Whether tracked page `k` was zero at the last checkpoint that
    /// copied it (`false` before any).
    fn was_zero(&self, k: usize) -> bool {
        self.zero
            .get(k / 64)
            .is_some_and(|w| w & (1 << (k % 64)) != 0)
    }

    /// Copies region page `i` into `buf` (zero-padded after the region's
    /// last byte).
    fn copy_page(&self, ps: usize, i: usize, buf: &mut [u8]) {
        let from = i * ps;
        let n = ps.min(self.size - from);
        // SAFETY: the job registered `ptr .. ptr + size` as readable memory
        // it owns for as long as the region is registered; `from + n <=
        // size`. Reads may race with nothing: checkpoints are taken while
        // the job's writers are quiet (the API's contract).
        let src = unsafe { std::slice::from_raw_parts((self.ptr + from) as *const u8, n) };
        buf[..n].copy_from_slice(src);
        buf[n..].fill(0);
    }
}

/// What [`Rex::checkpoint`] did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CheckpointReport {
    /// The checkpoint's seq.
    pub seq: u64,
    /// FULL (every page of every region) or incremental.
    pub full: bool,
    /// Pages in the checkpoint.
    pub pages: u64,
    /// Pages of regions forgotten since the previous checkpoint.
    pub dropped_pages: u64,
    /// Seconds the job was stopped (collecting and copying dirty pages).
    pub stop_s: f64,
}

/// What the background L2 thread shares with the job.
#[derive(Default)]
struct L2State {
    /// Checkpoints were published since the thread last looked.
    queued: bool,
    /// A flush is running.
    busy: bool,
    /// Stop after the queued work.
    stop: bool,
    /// The last failure, reported by [`Rex::checkpoint_wait`], until a
    /// later push commits a generation.
    error: Option<String>,
    /// L2 checkpoints pushed.
    pushes: u64,
}

struct L2Thread {
    shared: Arc<(Mutex<L2State>, Condvar)>,
    handle: Option<JoinHandle<()>>,
}

/// Spawns a thread of the library's own with the asynchronous signals
/// blocked ([`crate::durable::block_async_signals`]) from its creation, so
/// that no signal sent to the process lands on it before it could block
/// them itself; the threads it starts (a push's encoders and uploads)
/// inherit the mask.
pub(crate) fn spawn_quiet<F, T>(
    b: std::thread::Builder,
    f: F,
) -> std::io::Result<std::thread::JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let old = crate::durable::block_async_signals();
    let h = b.spawn(f);
    // SAFETY: `old` is the mask pthread_sigmask returned; this puts the
    // calling thread's own mask back (a signal that arrived meanwhile
    // stays pending for it, and is delivered now).
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    h
}

impl L2Thread {
    /// Starts the thread; a process that may start no more threads (a
    /// limit on processes, or on address space) gets an error, not a panic
    /// (helper-94).
    fn start(cfg: Config) -> Result<L2Thread> {
        let shared = Arc::new((Mutex::new(L2State::default()), Condvar::new()));
        let s = shared.clone();
        let l1 = cfg.l1.clone();
        let handle = spawn_quiet(
            std::thread::Builder::new().name("rex-l2".into()),
            move || l2_loop(cfg, s),
        )
        .map_err(|e| Error::io(&l1, "start the L2 thread", e))?;
        Ok(L2Thread {
            shared,
            handle: Some(handle),
        })
    }

    /// Waits until nothing is queued or running; returns and clears the last
    /// failure.
    fn wait_idle(&self) -> Option<String> {
        let (m, cv) = &*self.shared;
        let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
        while g.queued || g.busy {
            g = cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        g.error.take()
    }

    fn stop(&mut self) -> Option<String> {
        let err = self.wait_idle();
        {
            let (m, cv) = &*self.shared;
            m.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
            cv.notify_all();
        }
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        err
    }
}

fn l2_loop(cfg: Config, shared: Arc<(Mutex<L2State>, Condvar)>) {
    let (m, cv) = &*shared;
    loop {
        {
            let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
            while !g.queued && !g.stop {
                g = cv.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            if g.stop && !g.queued {
                return;
            }
            g.queued = false;
            g.busy = true;
        }
        // A panic in the push (`std::thread::scope` panics when it cannot
        // start an encoder thread: a limit on processes or on address
        // space) is the push's failure: the thread lived on marked busy
        // and `rex_checkpoint_wait` and `rex_finalize` waited for ever
        // (helper-94).
        let r = catching(|| open_job(&cfg, None).and_then(|job| flush(&job, &cfg, false)));
        let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
        g.busy = false;
        match r {
            Ok(rep) => {
                if rep.push.as_ref().is_some_and(|p| p.manifest.is_some()) {
                    g.pushes += 1;
                    // A push takes every checkpoint L1 holds, those a failed
                    // push left too: an earlier failure is no longer the
                    // job's state (helper-81: `rex_checkpoint_wait` said
                    // REX_EL2 35 checkpoints after L2 had space again, every
                    // checkpoint being in L2).
                    g.error = None;
                }
            }
            // Another flush (cron, an operator) holds the job lock: it does
            // the same work; the next checkpoint asks again.
            Err(Error::Busy { .. }) => {}
            Err(e) => g.error = Some(e.report()),
        }
        cv.notify_all();
    }
}

/// `f`, a panic in it returned as an error (the L2 thread's push).
fn catching<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let what = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        Err(Error::Invalid(format!(
            "the push to L2 failed: {what} (the next checkpoint tries again)"
        )))
    })
}

/// Refuses, on every rank alike, a job whose ranks were given different
/// `replicas` (each rank's payload of the "starting librex" agreement: the
/// value, 4 bytes little-endian), naming the value of each rank.
fn check_shared_settings(all: &[Vec<u8>], l1: &Path) -> Result<()> {
    let values: Vec<Option<u32>> = all
        .iter()
        .map(|b| Some(u32::from_le_bytes(b.get(..4)?.try_into().ok()?)))
        .collect();
    if values.windows(2).all(|w| w[0] == w[1]) {
        return Ok(());
    }
    let mut by_value: BTreeMap<Option<u32>, Vec<usize>> = BTreeMap::new();
    for (rank, v) in values.iter().enumerate() {
        by_value.entry(*v).or_default().push(rank);
    }
    let said: Vec<String> = by_value
        .iter()
        .map(|(v, ranks)| {
            let v = v.map_or("unreadable".to_string(), |v| v.to_string());
            let ranks: Vec<String> = ranks.iter().map(usize::to_string).collect();
            format!("{v} on rank {}", ranks.join(", "))
        })
        .collect();
    Err(Error::Invalid(format!(
        "L1 {}: the ranks were given different replicas ({}; REX_REPLICAS or `replicas` in rex.toml): every rank of a job must have the same, since the partner copies are exchanged by all ranks together",
        l1.display(),
        said.join("; ")
    )))
}

/// The job's two levels, as `rexctl flush` opens them.
fn open_job(cfg: &Config, mpi: Option<&(JobRoot, u32)>) -> Result<Job> {
    let l2 = match mpi {
        Some((root, rank)) => root.rank_store(*rank, true)?,
        None => crate::store::open_l2(&cfg.l2, &cfg.store, true)?,
    };
    crate::l2::push::check_l2_is_not_l1(l2.as_ref(), &cfg.l1)?;
    Ok(Job::open(&cfg.l1, l2)?.with_identity(JobIdentity {
        job: cfg.store.job.clone(),
        rank: cfg.store.rank.clone(),
    }))
}

/// A restored state waiting for [`Rex::restart`].
struct Restored {
    how: Staged,
    report: RestoreReport,
}

/// How a state found by [`Rex::restart_test`] reaches the regions.
enum Staged {
    /// Restored again, straight into the regions ([`restart`]).
    Verified(restart::Verified),
    /// From an image staged in L1 (an MPI rank's restart).
    Image(tempfile::TempDir),
}

/// A job checkpointing itself (the Rust API; the C API wraps one of these).
pub struct Rex {
    cfg: Config,
    tracker: Box<dyn Tracker>,
    ps: usize,
    regions: BTreeMap<u32, RegionState>,
    /// Seq of the newest checkpoint written (or restored).
    seq: Option<u64>,
    /// The run the next incremental continues.
    chain: Option<ChainId>,
    /// This process's instance id (§2.11.2), minted at `rex_init`: a job
    /// restarted from a restore continues the run as a new instance, so two
    /// copies restarted from one state never pass for each other.
    instance: InstanceId,
    /// The writer of the checkpoint the next incremental continues, when
    /// known (`Some(None)`: it names no instance): this process after its
    /// first checkpoint, the restored checkpoint's writer after a restart.
    /// Recorded in the file (§2.11.2), so that a fork's checkpoint whose
    /// own predecessor is missing never continues another copy's.
    continues: Option<Option<InstanceId>>,
    /// Region table of the newest checkpoint (drops are computed from it).
    prev_table: Option<RegionTable>,
    /// The next checkpoint must be FULL.
    need_full: bool,
    writer: Option<JoinHandle<Result<Vec<u8>>>>,
    /// The page buffer of the previous checkpoint, back from the writer:
    /// reused, so a checkpoint's copy does not pay fresh-memory page faults.
    spare: Vec<u8>,
    l2: Option<L2Thread>,
    restored: Option<Restored>,
    checkpoints: u64,
    /// In an MPI job: the job's location and this rank (see
    /// [`Rex::with_comm`]).
    job_root: Option<(JobRoot, u32)>,
    /// In an MPI job: its communicator.
    comm: Option<Box<dyn Comm + Send>>,
    /// Collective L2 pushes so far (MPI jobs).
    collective_pushes: u64,
    _producer: JobLock,
}

impl std::fmt::Debug for Rex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rex")
            .field("l1", &self.cfg.l1)
            .field("l2", &self.cfg.l2)
            .field("tracker", &self.tracker.name())
            .field("regions", &self.regions.len())
            .field("seq", &self.seq)
            .finish()
    }
}

impl Rex {
    /// Starts checkpointing with the configuration in `config` (a rex.toml),
    /// or, without one, the usual layers: `REX_*` variables, `./rex.toml`,
    /// `/etc/rex/rex.toml`.
    pub fn init(config: Option<&Path>) -> Result<Rex> {
        Self::with_config(Config::load(ConfigLayer::default(), config)?)
    }

    /// Starts checkpointing with a resolved configuration.
    pub fn with_config(cfg: Config) -> Result<Rex> {
        Self::build(cfg, None)
    }

    /// Starts checkpointing one rank of an MPI job, collectively with every
    /// rank of `comm` (each calls it): the rank's L1 directory is
    /// `l1/<rank>`, the L2 location is the job's (`crate::store::JobRoot`),
    /// checkpoints are numbered alike on every rank, and the L2 push runs
    /// inside [`Rex::checkpoint`], collectively (`crate::l2::collective`),
    /// when any rank's controller says one is due: there is no L2 thread.
    pub fn with_comm(mut cfg: Config, comm: Box<dyn Comm + Send>) -> Result<Rex> {
        let rank = comm.rank();
        cfg.l1 = cfg.l1.join(rank.to_string());
        cfg.l2_thread = false;
        cfg.store.rank = rank.to_string();
        let replicas = cfg.replicas;
        let built =
            JobRoot::new(&cfg.l2, &cfg.store).and_then(|root| Self::build(cfg, Some((root, rank))));
        // The settings every rank must share: the partner copies are a
        // collective exchange, which a rank with another `replicas` never
        // joins (helper-79: REX_REPLICAS=2 on one rank hung the job).
        let agreed = agree(
            comm.as_ref(),
            built
                .as_ref()
                .map(|_| replicas.to_le_bytes().to_vec())
                .map_err(Failure::from),
            "starting librex",
        );
        let mut rex = built?;
        let all = agreed?;
        check_shared_settings(&all, &rex.cfg.l1)?;
        rex.comm = Some(comm);
        Ok(rex)
    }

    /// Takes part in the agreement of [`Rex::with_comm`] for a rank that
    /// has no configuration to start with (a bad setting, an unreadable
    /// rex.toml), so the other ranks fail with its error instead of
    /// waiting for it (helper-62: one rank's bad `REX_COLLECTIVE_TABLE`
    /// left the others in `rex_init_comm` for ever). Returns `e`.
    pub fn refuse_start(comm: &dyn Comm, e: Error) -> Error {
        let _ = agree(comm, Err(Failure::from(&e)), "starting librex");
        e
    }

    fn build(cfg: Config, job_root: Option<(JobRoot, u32)>) -> Result<Rex> {
        std::fs::create_dir_all(&cfg.l1)
            .map_err(|e| Error::io(&cfg.l1, "create L1 directory", e))?;
        let producer = JobLock::acquire_producer(&cfg.l1, "librex job")?;
        // A dead predecessor's half-written checkpoint, and the image its
        // restart had staged.
        crate::durable::remove_stale_temps(&cfg.l1)?;
        remove_stale_restart_dirs(&cfg.l1)?;
        crate::l2::partners::remove_stale_temps(&cfg.l1)?;
        // The L2 location must work before the job relies on it.
        open_job(&cfg, job_root.as_ref())?;
        let tracker: Box<dyn Tracker> = match cfg.tracker {
            TrackerChoice::Auto => Box::new(auto::AutoTracker::new()),
            TrackerChoice::Mprotect => Box::new(MprotectTracker::new()?),
            TrackerChoice::Userfaultfd => Box::new(uffd::UffdTracker::new()?),
            TrackerChoice::UserfaultfdThread => {
                Box::new(uffd::UffdTracker::with_mode(uffd::UffdMode::Thread)?)
            }
        };
        let l2 = match cfg.l2_thread {
            true => Some(L2Thread::start(cfg.clone())?),
            false => None,
        };
        Ok(Rex {
            ps: tracker::page_size(),
            cfg,
            tracker,
            regions: BTreeMap::new(),
            seq: None,
            chain: None,
            instance: InstanceId::random()?,
            continues: None,
            prev_table: None,
            need_full: true,
            writer: None,
            spare: Vec::new(),
            l2,
            restored: None,
            checkpoints: 0,
            job_root,
            comm: None,
            collective_pushes: 0,
            _producer: producer,
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The tracker's name.
    pub fn tracker_name(&self) -> &'static str {
        self.tracker.name()
    }

    /// Write faults the tracker handled so far.
    pub fn faults(&self) -> u64 {
        self.tracker.faults()
    }

    /// How region `id` is watched: `userfaultfd` (the kernel resolving its
    /// write faults), `userfaultfd-thread`, `mprotect`, or `whole` (carried
    /// whole by every checkpoint, [`Rex::protect_whole`]); `None` when no
    /// region `id` is registered. Under `tracker = "auto"` it says which
    /// tracker took the region: a system call writing into it needs
    /// [`Rex::dirty`] first under `mprotect`.
    pub fn region_tracker(&self, id: u32) -> Option<&'static str> {
        let r = self.regions.get(&id)?;
        Some(match r.tracked() {
            None => "whole",
            Some(t) => self.tracker.holder(t),
        })
    }

    /// Registers `size` bytes at `ptr` as region `id`.
    ///
    /// # Safety
    /// `ptr .. ptr + size` must be memory the caller owns, readable and
    /// writable, that stays valid until [`Rex::unprotect`] of `id` (or the
    /// process's end), and that no other region overlaps. Its pages are
    /// write-protected between checkpoints: kernel writes into it need
    /// [`Rex::dirty`] first.
    pub unsafe fn protect(&mut self, id: u32, ptr: *mut u8, size: usize) -> Result<()> {
        self.protect_inner(id, ptr as usize, size, false, false)
    }

    /// Registers `size` bytes at `ptr` as region `id`, carried whole by
    /// every checkpoint and never write-protected: for memory that devices
    /// or the kernel write where no tracker sees it (RDMA, buffers
    /// registered with io_uring, GPU peer memory), or that changes wholesale
    /// between checkpoints anyway. Each L1 checkpoint then holds all its
    /// pages; the push's deduplication keeps those unchanged out of L2.
    ///
    /// # Safety
    /// As [`Rex::protect`], except that nothing is write-protected.
    pub unsafe fn protect_whole(&mut self, id: u32, ptr: *mut u8, size: usize) -> Result<()> {
        self.protect_inner(id, ptr as usize, size, false, true)
    }

    /// Whether a restart was tested (`rex_restart_test`) and not yet done
    /// or given up: no region may be registered meanwhile.
    pub fn restart_pending(&self) -> bool {
        self.restored.is_some()
    }

    fn protect_inner(
        &mut self,
        id: u32,
        ptr: usize,
        size: usize,
        owned: bool,
        whole: bool,
    ) -> Result<()> {
        if self.restored.is_some() {
            return Err(Error::Invalid(
                "a region cannot be registered between rex_restart_test and rex_restart".into(),
            ));
        }
        Region::new(id, size as u64, self.ps as u32)?;
        if ptr == 0 {
            return Err(Error::Invalid(format!("region {id}: null pointer")));
        }
        if self.regions.contains_key(&id) {
            return Err(Error::Invalid(format!(
                "region {id} is already registered (rex_unprotect it first)"
            )));
        }
        // Refused here, not at the next checkpoint, whose file could not
        // hold the table (helper-70: every checkpoint failed in the
        // background after the 2728th region).
        if self.regions.len() >= crate::format::region::MAX_REGIONS {
            return Err(Error::Invalid(format!(
                "region {id}: {} regions are registered, the most a checkpoint's region table holds",
                crate::format::region::MAX_REGIONS
            )));
        }
        let end = ptr
            .checked_add(size)
            .ok_or_else(|| Error::Invalid(format!("region {id}: wraps the address space")))?;
        if let Some((other, _)) = self
            .regions
            .iter()
            .find(|(_, r)| r.ptr < end && ptr < r.ptr + r.size)
        {
            return Err(Error::Invalid(format!(
                "region {id} ({ptr:#x}, {size} bytes) overlaps region {other}"
            )));
        }
        let start = ptr & !(self.ps - 1);
        let page_end = end.div_ceil(self.ps) * self.ps;
        // The ranges the tracker keeps read-only (none of a region carried
        // whole).
        let others: Vec<(usize, usize)> = self
            .regions
            .values()
            .filter_map(RegionState::tracked)
            .map(|t| (t.start, t.start + t.pages * self.ps))
            .collect();
        if let Some(why) = audit::unregistrable(start, page_end, &others)? {
            return Err(Error::Invalid(format!(
                "region {id} ({ptr:#x}, {size} bytes) is not tracked: {why} (a region must be writable memory of this process)"
            )));
        }
        let range = Range::new(start, (end - start).div_ceil(self.ps));
        let range = if whole {
            range
        } else {
            self.tracker.track(range)?
        };
        self.regions.insert(
            id,
            RegionState {
                ptr,
                size,
                range,
                owned,
                whole,
                fresh: true,
                zero: Vec::new(),
            },
        );
        Ok(())
    }

    /// Allocates `size` bytes of zeroed, page-aligned memory registered as
    /// region `id`; it stays valid until [`Rex::unprotect`] of `id`.
    pub fn alloc(&mut self, id: u32, size: usize) -> Result<*mut u8> {
        if size == 0 {
            return Err(Error::Invalid(format!("region {id} has size 0")));
        }
        let len = size
            .div_ceil(self.ps)
            .checked_mul(self.ps)
            .ok_or_else(|| Error::Invalid(format!("region {id}: cannot allocate {size} bytes")))?;
        let p =
            tracker::map_anonymous(len).map_err(|e| Error::Invalid(format!("region {id}: {e}")))?;
        if let Err(e) = self.protect_inner(id, p, size, true, false) {
            // SAFETY: the mapping made just above, not handed out.
            unsafe { tracker::unmap_anonymous(p, len) };
            return Err(e);
        }
        Ok(p as *mut u8)
    }

    /// Forgets region `id`: its pages are dropped by the next checkpoint,
    /// and memory from [`Rex::alloc`] is unmapped.
    pub fn unprotect(&mut self, id: u32) -> Result<()> {
        let Some(r) = self.regions.remove(&id) else {
            return Err(Error::Invalid(format!("region {id} is not registered")));
        };
        if let Some(t) = r.tracked() {
            self.tracker.untrack(t)?;
        }
        if r.owned {
            // SAFETY: the mapping `alloc` made for this region; the caller
            // gave it back by unprotecting it.
            unsafe { tracker::unmap_anonymous(r.ptr, r.size.div_ceil(self.ps) * self.ps) };
        }
        Ok(())
    }

    /// Declares that `ptr .. ptr + size` is about to be written by the
    /// kernel (`read(2)`, `recv(2)`): its pages are recorded as dirty and
    /// write-enabled until the next checkpoint.
    pub fn dirty(&mut self, ptr: *const u8, size: usize) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        // A range past the end of the address space is no buffer a system
        // call could write (helper-50: `rex_dirty(p, SIZE_MAX)` succeeded).
        let Some(b) = (ptr as usize).checked_add(size) else {
            return Err(Error::Invalid(format!(
                "{:#x} ({size} bytes) runs past the end of the address space",
                ptr as usize
            )));
        };
        let a = ptr as usize;
        let mut hit = false;
        for r in self.regions.values() {
            let (s, e) = (r.range.start, r.range.start + r.range.pages * self.ps);
            if a < e && s < b {
                let first = (a.max(s) - s) / self.ps;
                let last = (b.min(e) - 1 - s) / self.ps;
                // A region carried whole has nothing to mark.
                if let Some(t) = r.tracked() {
                    self.tracker.mark_dirty(t, first, last - first + 1)?;
                }
                hit = true;
            }
        }
        if !hit {
            return Err(Error::Invalid(format!(
                "{:#x} ({size} bytes) is in no registered region",
                ptr as usize
            )));
        }
        Ok(())
    }

    /// The current region table.
    pub fn region_table(&self) -> RegionTable {
        RegionTable(
            self.regions
                .iter()
                .map(|(&id, r)| Region {
                    id,
                    size: r.size as u64,
                    pages: r.pages(self.ps) as u64,
                })
                .collect(),
        )
    }

    /// Takes an L1 checkpoint (see the module doc): returns once the dirty
    /// pages are copied; the file is written in the background.
    pub fn checkpoint(&mut self) -> Result<CheckpointReport> {
        let started = Instant::now();
        // In an MPI job every failure below still takes part in the ranks'
        // agreements (which then fail on every rank), so no rank waits for
        // one that gave up.
        let pre = if self.regions.is_empty() {
            Err(Error::Invalid(
                "no region is registered: nothing to checkpoint".into(),
            ))
        } else {
            self.restored = None;
            // The previous file must be out before the next seq is written.
            self.join_writer()
        };
        let pre = match (pre, &self.comm) {
            (Err(e), None) => return Err(e),
            (pre, _) => pre,
        };
        let mut full = self.need_full || self.chain.is_none();
        let local_seq = pre.and_then(|()| match self.seq {
            Some(s) => Ok(s + 1),
            None => {
                // A fresh start: a new run above every file there is.
                self.set_aside_unreadable();
                self.newest_seq_anywhere().map(|n| n.map_or(0, |s| s + 1))
            }
        });
        // In an MPI job every rank numbers the checkpoint alike: the
        // highest proposal; a rank below it starts a new run there.
        let seq = match &self.comm {
            None => local_seq?,
            Some(c) => {
                let all = agree(
                    c.as_ref(),
                    local_seq
                        .as_ref()
                        .map(|s| s.to_le_bytes().to_vec())
                        .map_err(Failure::from),
                    "numbering the checkpoint",
                );
                let mine = local_seq?;
                let top = all?.iter().map(|b| le64(b, 0)).max().unwrap_or(mine);
                if top != mine {
                    full = true;
                }
                top
            }
        };
        let r = self.write_checkpoint(seq, full, started);
        if self.comm.is_some() {
            let l2 = self.collective_l2(r.as_ref().err().map(Error::report));
            let r = r?;
            l2?;
            return Ok(r);
        }
        r
    }

    /// The L1 checkpoint `seq` itself: the dirty pages (all of them when
    /// `full`) copied, the file handed to the writer thread.
    fn write_checkpoint(
        &mut self,
        seq: u64,
        full: bool,
        started: Instant,
    ) -> Result<CheckpointReport> {
        let ps = self.ps;
        // Until the writer has this checkpoint's pages, a failure leaves the
        // tracker's bits taken: the next checkpoint must carry everything.
        self.need_full = true;
        let table = self.region_table();
        let mut pages: Vec<u64> = Vec::new();
        let mut data: Vec<u8> = std::mem::take(&mut self.spare);
        data.clear();
        // Always collect: it re-protects the pages for the next interval.
        // Every region first, so that the mappings read next show no page
        // write-enabled by a fault (only those the job enabled itself).
        let mut collected = Vec::with_capacity(self.regions.len());
        for r in self.regions.values() {
            let mut tracked = Vec::new();
            if let Some(t) = r.tracked() {
                self.tracker.collect(t, &mut tracked)?;
            }
            collected.push(tracked);
        }
        let mut unseen = Vec::new();
        // Read after the writers stopped: what changed without a fault.
        let memory = audit::Memory::read(ps)?;
        for ((&id, r), mut tracked) in self.regions.iter_mut().zip(collected) {
            unseen.clear();
            match r.tracked() {
                Some(t) => memory.unseen(
                    t,
                    self.tracker.vma_protected(t),
                    |k| r.was_zero(k),
                    &mut unseen,
                )?,
                None => memory.readable(r.range)?,
            }
            tracked.extend_from_slice(&unseen);
            tracked.sort_unstable();
            tracked.dedup();
            let n = r.pages(ps);
            let all = full || r.fresh || r.whole;
            let which: Vec<usize> = if all {
                (0..n).collect()
            } else {
                r.dirty_region_pages(ps, &tracked)
            };
            // Never an abort for a region too large to copy: an error the
            // job can handle (REX_ENOMEM).
            data.try_reserve(which.len() * ps).map_err(|e| {
                Error::io(
                    &self.cfg.l1,
                    "copy the dirty pages",
                    std::io::Error::new(
                        std::io::ErrorKind::OutOfMemory,
                        format!("region {id}: {} bytes: {e}", which.len() * ps),
                    ),
                )
            })?;
            for i in which {
                let at = data.len();
                data.resize(at + ps, 0);
                r.copy_page(ps, i, &mut data[at..]);
                pages.push(page_number(id, i as u64));
            }
            if let Some(t) = r.tracked() {
                if all {
                    r.note_zero(ps, 0..r.range.pages);
                } else {
                    r.note_zero(ps, tracked.iter().copied());
                }
                // Copied: from now on their writes fault again.
                self.tracker.protect_again(t, &unseen)?;
            }
            r.fresh = false;
        }
        // Regions forgotten or shrunk since the previous checkpoint.
        let mut drops = Vec::new();
        if !full && let Some(prev) = &self.prev_table {
            for old in &prev.0 {
                let now = table.get(old.id).map_or(0, |r| r.pages);
                if now < old.pages {
                    drops.push(DropRange {
                        first: page_number(old.id, now),
                        count: old.pages - now,
                    });
                }
            }
        }
        let chain = if full {
            ChainId::random()?
        } else {
            self.chain.expect("an incremental continues a run")
        };
        let report = CheckpointReport {
            seq,
            full,
            pages: pages.len() as u64,
            dropped_pages: drops.iter().map(|d| d.count).sum(),
            stop_s: 0.0,
        };
        let path = self.cfg.l1.join(ic_file_name(seq));
        let ext = IcExt {
            chain: Some(chain),
            regions: Some(table.clone()),
            instance: Some(self.instance),
            continues: if full { None } else { self.continues },
        };
        let time_ns = now_ns();
        let l2 = self.l2.as_ref().map(|t| t.shared.clone());
        let ps32 = ps as u32;
        let writer = spawn_quiet(
            std::thread::Builder::new().name("rex-l1".into()),
            move || -> Result<Vec<u8>> {
                let written = (|| {
                    let mut w =
                        IcWriter::create_ext(&path, ps32, seq, full, time_ns, &ext, pages, drops)?;
                    for page in data.chunks_exact(ps32 as usize) {
                        w.push_page(page)?;
                    }
                    w.finish()
                })();
                // The L2 thread is asked after a failed write too: a full
                // L1 empties only through a push, and with no file written
                // no push was ever asked for (helper-94: every checkpoint
                // failed for as long as the job ran after L2 came back).
                if let Some(s) = l2 {
                    let (m, cv) = &*s;
                    m.lock().unwrap_or_else(|e| e.into_inner()).queued = true;
                    cv.notify_all();
                }
                written.map(|()| data)
            },
        )
        .map_err(|e| Error::Invalid(format!("cannot start the L1 writer thread: {e}")))?;
        self.writer = Some(writer);
        self.seq = Some(seq);
        self.chain = Some(chain);
        self.continues = Some(Some(self.instance));
        self.prev_table = Some(table);
        self.need_full = false;
        self.checkpoints += 1;
        Ok(CheckpointReport {
            stop_s: started.elapsed().as_secs_f64(),
            ..report
        })
    }

    /// An MPI job's L2 step after each checkpoint, on every rank (`failed`:
    /// this rank's checkpoint failed; it still takes part): the L1 file made
    /// durable, each rank's controller asked, and a collective
    /// push when any rank's says one is due (a complete coalescence on
    /// every rank when any rank's wants one). An L2 failure is reported as
    /// [`Error::Invalid`] prefixed with "L2:" (the L1 checkpoint is safe).
    fn collective_l2(&mut self, failed: Option<String>) -> Result<()> {
        let written = match failed {
            Some(e) => Err(Error::Invalid(e)),
            None => self.join_writer(),
        };
        // Partner copies of the new file (replicas = K > 1).
        if self.cfg.replicas > 1 {
            let comm = self.comm.as_deref().expect("an MPI job");
            let path = self
                .seq
                .map(|s| self.cfg.l1.join(ic_file_name(s)))
                .unwrap_or_default();
            let local = match &written {
                Ok(()) => Ok(path.as_path()),
                Err(e) => Err(Failure::from(e)),
            };
            crate::l2::partners::replicate(comm, &self.cfg.l1, local, self.cfg.replicas)
                .map_err(|e| Error::Invalid(format!("L2: partner copies: {}", e.report())))?;
        }
        let decision = written.and_then(|()| {
            let job = open_job(&self.cfg, self.job_root.as_ref())?;
            crate::control::flush::decide(&job, &self.cfg, now_ns())
        });
        let comm = self.comm.as_deref().expect("an MPI job");
        let local = decision
            .as_ref()
            .map(|d| {
                // Why this rank's push must coalesce completely (the
                // first rank that says so gives the collective's reason).
                let mut b = vec![u8::from(d.due), u8::from(d.full)];
                b.extend_from_slice(d.full_reason.as_deref().unwrap_or_default().as_bytes());
                b
            })
            .map_err(Failure::from);
        let all = agree(comm, local, "deciding the L2 checkpoint");
        decision?;
        let all = all?;
        if !all.iter().any(|b| b.first() == Some(&1)) {
            return Ok(());
        }
        let full_reason = all
            .iter()
            .enumerate()
            .find(|(_, b)| b.get(1) == Some(&1))
            .map(|(r, b)| format!("rank {r}: {}", String::from_utf8_lossy(&b[2..])));
        let (root, _) = self.job_root.as_ref().expect("an MPI job");
        let job = match open_job(&self.cfg, self.job_root.as_ref()) {
            Ok(j) => j,
            Err(e) => {
                fail_early(comm, &e);
                return Err(Error::Invalid(format!("L2: {}", e.report())));
            }
        };
        let opts = crate::control::flush::push_options(&self.cfg);
        let copts = CollectiveOptions {
            table: self.cfg.collective_table,
            ..CollectiveOptions::default()
        };
        // (It also prunes the partner copies of what L2 now holds.)
        push_collective(&job, root, comm, &opts, &copts, full_reason)
            .map_err(|e| Error::Invalid(format!("L2: {}", e.report())))?;
        self.collective_pushes += 1;
        Ok(())
    }

    /// Sets aside the L1 checkpoints the restart's fallback left out
    /// ([`crate::l1::set_aside`]), saying so in the report's note: the new
    /// run above them needs none of them, and one whose header cannot be
    /// read would stop every later push of this directory (helper-62:
    /// `rex_checkpoint_wait` failed for ever, L2 never advanced). A file
    /// that cannot be set aside is said too; the restart stands.
    ///
    /// Newest seq first: a restart killed part-way leaves only older files
    /// in place, none whose predecessor is gone (helper-67: killed after
    /// the first of two renames, a damaged seq 3 set aside, the next
    /// restart took its seq 4 on top of another copy of seq 3, an image no
    /// process had).
    fn set_aside_left_out(&self, report: &mut RestoreReport) {
        let mut said = Vec::new();
        let mut left = std::mem::take(&mut report.left_out);
        left.sort();
        left.dedup();
        newest_first(&mut left);
        for p in left {
            let ours = p.parent() == Some(self.cfg.l1.as_path())
                && p.extension()
                    .is_some_and(|e| e == crate::format::ic::EXTENSION);
            if !ours {
                continue;
            }
            match crate::l1::set_aside(&p) {
                Ok(to) => said.push(format!("{} set aside as {}", p.display(), to.display())),
                Err(e) => said.push(format!("{} not set aside: {}", p.display(), e.report())),
            }
        }
        if let (Some(note), false) = (&mut report.fell_back, said.is_empty()) {
            note.push_str(&format!("; {}", said.join("; ")));
        }
    }

    /// Sets aside the L1 checkpoints whose header cannot be read, when the
    /// job starts a new run without a restart (none was asked for, or
    /// nothing valid was left to restart from): the push can tell nothing
    /// of such a file, not even that the new run supersedes it, and would
    /// fail on it at every try (helper-63). Readable older files need no
    /// hand: the push passes over what the new run's FULL checkpoint
    /// supersedes. Said on standard error; a file that cannot be set aside
    /// is said too, and the checkpoint goes on.
    fn set_aside_unreadable(&self) {
        let Ok(files) = crate::l1::list_ic_files(&self.cfg.l1) else {
            return;
        };
        for p in files {
            let Err(e) = crate::format::ic::IcMeta::read(&p) else {
                continue;
            };
            match crate::l1::set_aside(&p) {
                Ok(to) => eprintln!(
                    "librex: WARNING: a new run starts; {} cannot be read ({}): set aside as {}",
                    p.display(),
                    e.report(),
                    to.display()
                ),
                Err(e2) => eprintln!(
                    "librex: WARNING: {} cannot be read ({}) nor set aside: {}",
                    p.display(),
                    e.report(),
                    e2.report()
                ),
            }
        }
    }

    /// The highest seq of any checkpoint in the L1 directory, its chain
    /// copy or L2: a job that starts afresh (no restart) numbers its FULL
    /// checkpoint above it, so it never replaces a file of the run before.
    fn newest_seq_anywhere(&self) -> Result<Option<u64>> {
        let job = open_job(&self.cfg, self.job_root.as_ref())?;
        let l1 = crate::l1::read_readable(&self.cfg.l1)
            .iter()
            .map(|m| m.seq())
            .max();
        let copy = ChainIndex::load(&job.l1_chain)?
            .newest()
            .map(|m| m.last_seq);
        let l2 = ChainIndex::load(job.l2.as_ref())?
            .newest()
            .map(|m| m.last_seq);
        // Files named like checkpoints but unreadable hold a seq too (in
        // their name): never write over them either.
        let named = crate::l1::list_ic_files(&self.cfg.l1)?
            .iter()
            .filter_map(|p| crate::l1::seq_of_file_name(p.file_name()?.to_str()?))
            .max();
        // And those set aside by an earlier restart: a new run's files
        // never take their seqs.
        let aside = crate::l1::list_set_aside(&self.cfg.l1)?
            .iter()
            .filter_map(|p| crate::l1::set_aside_seq(p))
            .max();
        Ok([l1, copy, l2, named, aside].into_iter().flatten().max())
    }

    fn join_writer(&mut self) -> Result<()> {
        let Some(h) = self.writer.take() else {
            return Ok(());
        };
        let r = h
            .join()
            .unwrap_or_else(|_| Err(Error::Invalid("the L1 writer thread panicked".into())));
        match r {
            Ok(buf) => {
                self.spare = buf;
                Ok(())
            }
            Err(e) => {
                // Its dirty pages left the tracker but never reached a
                // file: the next checkpoint carries everything, in a new run.
                self.need_full = true;
                Err(e)
            }
        }
    }

    /// Waits for all background work: the L1 write in flight and the L2
    /// push it may have started. An L2 failure is reported here (the L1
    /// checkpoints are safe) as [`Error::Invalid`] prefixed with "L2:".
    pub fn checkpoint_wait(&mut self) -> Result<()> {
        self.join_writer()?;
        if let Some(t) = &self.l2
            && let Some(e) = t.wait_idle()
        {
            return Err(Error::Invalid(format!("L2: {e}")));
        }
        Ok(())
    }

    /// L2 checkpoints pushed by the background thread so far.
    pub fn l2_pushes(&self) -> u64 {
        self.collective_pushes
            + self.l2.as_ref().map_or(0, |t| {
                t.shared.0.lock().unwrap_or_else(|e| e.into_inner()).pushes
            })
    }

    /// Whether the job can restart: the seq of the newest restorable state,
    /// or `None` when there is nothing to restart from (no L2 generation
    /// and no L1 checkpoint). The image is restored now, and kept for
    /// [`Rex::restart`].
    pub fn restart_test(&mut self) -> Result<Option<u64>> {
        if self.checkpoints > 0 {
            return Err(Error::Invalid(
                "rex_restart_test after a checkpoint: restart before the first checkpoint".into(),
            ));
        }
        if let Some(r) = &self.restored {
            return Ok(Some(r.report.seq));
        }
        if self.comm.is_some() {
            return self.restart_test_collective();
        }
        let job = open_job(&self.cfg, None)?;
        self.restore_local(&job, None, false, true)
    }

    /// Restores this process's newest valid state, kept for
    /// [`Rex::restart`]: with `direct`, checked page by page and nothing
    /// kept but the pages' numbers and CRCs (the restart restores it again,
    /// into the regions: [`restart`]), else into a private image staged in
    /// L1. `None` when there is nothing at all.
    /// `l1_locked`: the caller holds L1's job lock (see
    /// [`RestoreOptions::l1_locked`]); otherwise the restore waits while a
    /// push (a cron `flush`) holds it, and says so on standard error.
    fn restore_local(
        &mut self,
        job: &Job,
        xref_source: Option<Arc<dyn XrefSource>>,
        l1_locked: bool,
        direct: bool,
    ) -> Result<Option<u64>> {
        let _reading = if l1_locked {
            None
        } else {
            JobLock::shared(&job.l1, |holder| {
                eprintln!(
                    "librex: restart waits for {holder} to let go of {} (a restart reads L1 between pushes)",
                    job.l1.join(crate::l1::lock::LOCK_NAME).display()
                )
            })?
        };
        let l2_index = ChainIndex::load(job.l2.as_ref())?;
        let l1_index = ChainIndex::load(&job.l1_chain)?;
        let l1_files = crate::l1::list_ic_files(&job.l1)?;
        if l2_index.manifests.is_empty()
            && l2_index.invalid.is_empty()
            && l1_index.manifests.is_empty()
            && l1_files.is_empty()
        {
            return Ok(None);
        }
        let opts = RestoreOptions {
            fallback: true,
            xref_source,
            l1_locked,
            ..Default::default()
        };
        let (report, how) = if direct {
            let recorder = restart::Recorder::default();
            let report = restore_l1_l2_to(job, &opts, Output::Pages(&recorder))?;
            let verified = recorder
                .into_verified()
                .expect("a restore that succeeded handed its pages over");
            (report, Staged::Verified(verified))
        } else {
            let dir = tempfile::Builder::new()
                .prefix(RESTART_DIR_PREFIX)
                .tempdir_in(&self.cfg.l1)
                .map_err(|e| Error::io(&self.cfg.l1, "create restart directory", e))?;
            let report = restore_l1_l2(job, &opts, &dir.path().join("image.rexic"))?;
            (report, Staged::Image(dir))
        };
        let seq = report.seq;
        self.restored = Some(Restored { how, report });
        Ok(Some(seq))
    }

    /// [`Rex::restart_test`] of one rank of an MPI job, with every rank:
    /// the rank's generations of job generations that never committed are
    /// rolled back (their checkpoints are still in L1), its newest valid
    /// state is restored (pages other ranks store read from theirs), and the
    /// ranks agree on the newest checkpoint every one of them has: a rank
    /// ahead (a checkpoint the others did not finish, or whose node was
    /// lost) deletes its L1 checkpoints after it and restores that one.
    fn restart_test_collective(&mut self) -> Result<Option<u64>> {
        let (root, _) = self.job_root.clone().expect("an MPI job");
        let xrefs: Arc<dyn XrefSource> = JobXrefs::new(root.clone());
        // A rank whose L1 directory is empty (its node was lost) gets its
        // checkpoints back from the partners that hold copies.
        if self.cfg.replicas > 1 {
            let l1 = &self.cfg.l1;
            let lost = crate::l1::list_ic_files(l1)
                .and_then(|f| {
                    let chain = ChainIndex::load(&crate::store::DirStore::open_or_empty(
                        l1.join(crate::l2::push::L1_CHAIN_DIR),
                    ))?;
                    Ok(f.is_empty() && chain.manifests.is_empty())
                })
                .map_err(Failure::from);
            let comm = self.comm.as_deref().expect("an MPI job");
            let (_, skipped) = crate::l2::partners::recover(comm, l1, lost)?;
            for why in skipped {
                eprintln!("librex: left out {why}");
            }
        }
        let job = open_job(&self.cfg, self.job_root.as_ref());
        // A job manifest lost since its commit is put back first, on every
        // rank before any reads the job manifests (as a collective push
        // does).
        let locked = job.and_then(|job| {
            let w = begin_writing(&job, "librex restart")?;
            let healed = heal_job_manifest(&job, root.job_store(true)?.as_ref())?;
            Ok((job, w, healed))
        });
        let healed = agree(
            self.comm.as_deref().expect("an MPI job"),
            locked.as_ref().map(|_| Vec::new()).map_err(Failure::from),
            HEAL_STAGE,
        );
        let start = locked.and_then(|(job, w, note)| {
            healed?;
            if let Some(note) = note {
                eprintln!("librex: {note}");
            }
            let jobs = JobIndex::load(root.job_store(true)?.as_ref())?;
            let committed = jobs.newest().map(|m| m.job_generation);
            let plan = rollback_plan(&job, committed)?;
            // Any job manifest, an invalid one too, says a job generation
            // committed once: the job never starts afresh over it.
            // So does a rank's copy of a job manifest in L1 (L2 lost since).
            let ever = committed.is_some()
                || !jobs.invalid.is_empty()
                || job_manifest_copy(&job)?.is_some();
            Ok((job, w, plan, ever, committed.is_some()))
        });
        // Every rank takes part, also one that failed above.
        let agreed = agree_rollback(
            self.comm.as_deref().expect("an MPI job"),
            start.as_ref().map(|s| &s.2).map_err(Failure::from),
        );
        // Then each rank brings its chain in L2 back in order from L1's
        // copy, as a push's recovery does (a committed generation whose L2
        // manifest was lost is uploaded again), before any rank restores:
        // the other ranks read this rank's pages they reference from L2
        // (helper-79: rank 0's newest L2 manifest lost, the others fell
        // back to an older state, and rank 0 deleted its newest checkpoint).
        // Only under a job manifest in L2: an L2 without any (lost whole)
        // gets nothing uploaded, and the restart refuses below.
        let recovered = start.and_then(|(job, w, plan, ever, in_l2)| {
            for note in agreed? {
                eprintln!("librex: rolled back: {note}");
            }
            rollback(&job, &plan)?;
            // A recovery that fails (L2 out of reach, two histories) is
            // said, and the restore goes on as without it: the rank's own
            // chain is read from L1's copy, and a reference it cannot
            // follow stops the restart there.
            let mut report = crate::l2::push::PushReport::default();
            let opts = crate::control::flush::push_options(&self.cfg);
            if in_l2 && let Err(e) = crate::l2::push::recover(&job, &opts, true, &mut report) {
                eprintln!(
                    "librex: L2 not recovered before the restore: {}",
                    e.report()
                );
            }
            for note in report.recovered {
                eprintln!("librex: {note}");
            }
            Ok((job, w, ever))
        });
        let ready = agree(
            self.comm.as_deref().expect("an MPI job"),
            recovered
                .as_ref()
                .map(|_| Vec::new())
                .map_err(Failure::from),
            "recovering L2 before the restore",
        );
        let local = recovered.and_then(|(job, w, committed)| {
            ready?;
            let seq = self.restore_local(&job, Some(xrefs.clone()), true, false)?;
            drop(w);
            Ok((job, seq, committed))
        });
        let comm = self.comm.take().expect("an MPI job");
        let r = self.agree_restart(comm.as_ref(), local, &xrefs);
        self.comm = Some(comm);
        r
    }

    /// `local`: this rank's job, the seq of its newest valid state, and
    /// whether the job store holds a job manifest (valid or not).
    fn agree_restart(
        &mut self,
        comm: &dyn Comm,
        local: Result<(Job, Option<u64>, bool)>,
        xrefs: &Arc<dyn XrefSource>,
    ) -> Result<Option<u64>> {
        let msg = |seq: Option<u64>| {
            let mut b = vec![u8::from(seq.is_some())];
            b.extend_from_slice(&seq.unwrap_or(0).to_le_bytes());
            b
        };
        let all = agree(
            comm,
            local
                .as_ref()
                .map(|(_, s, committed)| {
                    let mut b = msg(*s);
                    b.push(u8::from(*committed));
                    b
                })
                .map_err(Failure::from),
            "finding the state to restart from",
        );
        let (job, mine, _) = local?;
        let all = all?;
        let seqs: Vec<Option<u64>> = all
            .iter()
            .map(|b| (b.first() == Some(&1)).then(|| le64(b, 1)))
            .collect();
        let committed = all.iter().any(|b| b.get(9) == Some(&1));
        if seqs.iter().all(Option::is_none) {
            if committed {
                // Never a fresh start over a job that committed a job
                // generation (helper-79: L2 wiped, every rank found
                // nothing, and the job started over with exit 0).
                return Err(Error::chain(
                    &self.cfg.l1,
                    "no rank has anything to restart from, but a job generation committed (a job manifest, valid or not, is in L2, or a rank keeps a copy of one in L1): its L2 state is lost or unreadable; refusing to start afresh over it".to_string(),
                ));
            }
            return Ok(None);
        }
        if !committed && seqs.contains(&None) {
            return self.start_afresh(comm, &job);
        }
        if let Some(r) = seqs.iter().position(Option::is_none) {
            self.restored = None;
            return Err(Error::chain(
                &self.cfg.l1,
                format!(
                    "rank {r} has nothing to restart from (no L1 checkpoint, no L2 generation) while other ranks do"
                ),
            ));
        }
        let target = seqs.iter().flatten().copied().min().expect("some");
        // The copies this rank holds of any rank's checkpoints after the
        // target are not the job's either: a lost rank recovered from them
        // later would find a dead run's checkpoints after the restarted
        // job's own of the same seqs' run.
        let partners = crate::l2::partners::remove_after(&self.cfg.l1, target);
        let redo = match mine {
            Some(s) if s > target => {
                // Checkpoints after the target are not the job's: some
                // rank does not have them.
                let mut removed = 0;
                for p in crate::l1::list_ic_files(&job.l1)? {
                    let seq = p
                        .file_name()
                        .and_then(|n| n.to_str())
                        .and_then(crate::l1::seq_of_file_name);
                    if seq.is_some_and(|q| q > target) {
                        crate::durable::remove_file(&p)?;
                        removed += 1;
                    }
                }
                self.restored = None;
                let again = self.restore_local(&job, Some(xrefs.clone()), false, false);
                Some((removed, again))
            }
            _ => None,
        };
        let local = match (&redo, &partners) {
            (_, Err(e)) | (Some((_, Err(e))), _) => Err(Failure::from(e)),
            (Some((_, Ok(s))), _) => Ok(msg(*s)),
            (None, _) => Ok(msg(mine)),
        };
        let all = agree(comm, local, "restoring the agreed checkpoint");
        partners?;
        if let Some((_, r)) = redo {
            r?;
        }
        for (r, b) in all?.iter().enumerate() {
            let s = (b.first() == Some(&1)).then(|| le64(b, 1));
            if s != Some(target) {
                self.restored = None;
                return Err(Error::chain(
                    &self.cfg.l1,
                    format!(
                        "rank {r} restores seq {s:?}, not the job's newest common checkpoint {target}"
                    ),
                ));
            }
        }
        Ok(Some(target))
    }

    /// A collective restart where some rank has nothing to restart from
    /// and no job generation ever committed, the job store holding no job
    /// manifest, valid or not (helper-78: a node lost during
    /// the job's first collective push, whose rollback emptied L2): there
    /// is no state every rank holds, and there never was a durable one, so
    /// the job starts afresh, as it did the first time. The ranks' L1
    /// checkpoints of that never-committed state are set aside (kept for
    /// the user, newest first, [`crate::l1::set_aside`]) and their partner
    /// copies deleted; the new run's first checkpoint is numbered above
    /// every set-aside seq, alike on every rank (the numbering agreement).
    /// Before, every restart failed for ever ("rank R has nothing to
    /// restart from while other ranks do"). Agreed: a rank that cannot set
    /// its files aside fails the restart on every rank.
    fn start_afresh(&mut self, comm: &dyn Comm, job: &Job) -> Result<Option<u64>> {
        self.restored = None;
        let local = (|| -> Result<usize> {
            let mut files = crate::l1::list_ic_files(&job.l1)?;
            newest_first(&mut files);
            for p in &files {
                let to = crate::l1::set_aside(p)?;
                eprintln!(
                    "librex: a rank has nothing to restart from and no job generation ever committed: the job starts afresh; {} set aside as {}",
                    p.display(),
                    to.display()
                );
            }
            crate::l2::partners::remove_all(&job.l1)?;
            Ok(files.len())
        })();
        agree(
            comm,
            local.as_ref().map(|_| Vec::new()).map_err(Failure::from),
            "starting afresh",
        )?;
        local?;
        Ok(None)
    }

    /// Fills the registered regions with the newest valid state (see
    /// [`Rex::restart_test`]); later checkpoints continue its run. The
    /// regions must be those of the checkpoint: the same ids and sizes.
    pub fn restart(&mut self) -> Result<RestoreReport> {
        if self.restored.is_none() && self.restart_test()?.is_none() {
            return Err(Error::chain(
                &self.cfg.l1,
                format!(
                    "nothing to restart from: no L2 generation in {} and no L1 checkpoint",
                    self.cfg.l2.display()
                ),
            ));
        }
        let restored = self.restored.take().expect("set above");
        let report = restored.report;
        let where_ = match &restored.how {
            Staged::Image(dir) => dir.path().join("image.rexic"),
            Staged::Verified(_) => self.cfg.l1.clone(),
        };
        let Some(table) = report.regions.clone() else {
            return Err(Error::chain(
                &where_,
                format!(
                    "the state of seq {} has no region table: it was not written by librex",
                    report.seq
                ),
            ));
        };
        let mine = self.region_table();
        check_regions(&table, &mine)?;
        let ps = self.ps;
        // The state's page size and its pages per region, checked before
        // any byte of a region is written.
        let image = match &restored.how {
            Staged::Image(_) => Some(IcFile::open(&where_)?),
            Staged::Verified(_) => None,
        };
        let (page_size, seen) = match (&restored.how, &image) {
            (Staged::Verified(v), _) => (v.page_size as usize, v.per_region.clone()),
            (_, Some(image)) => (
                image.meta().page_size(),
                restart::pages_per_region(&image.meta().pages),
            ),
            (Staged::Image(_), None) => unreachable!("opened above"),
        };
        if page_size != ps {
            return Err(Error::chain(
                &where_,
                format!("checkpoint pages are {page_size} bytes, this system's are {ps}"),
            ));
        }
        for r in &table.0 {
            let got = seen.get(&r.id).copied().unwrap_or(0);
            if got != r.pages {
                return Err(Error::chain(
                    &where_,
                    format!(
                        "region {}: the state of seq {} holds {got} of its {} pages",
                        r.id, report.seq, r.pages
                    ),
                ));
            }
        }
        match restored.how {
            Staged::Verified(v) => {
                // Restored again, into the regions (see `restart`), in
                // ascending id (the map's order).
                let targets: Vec<restart::Target> = self
                    .regions
                    .iter()
                    .map(|(&id, r)| restart::Target {
                        id,
                        ptr: r.ptr,
                        size: r.size,
                    })
                    .collect();
                let job = open_job(&self.cfg, None)?;
                // The options of the first pass: the same walk (its
                // fallbacks included) reaches the same state, and the sink
                // refuses any other before it writes (helper-52: pinned
                // by seq without the fallbacks, a state found past a
                // damaged header was never reached again).
                let opts = RestoreOptions {
                    fallback: true,
                    ..Default::default()
                };
                let sink = restart::IntoRegions {
                    verified: &v,
                    regions: &targets,
                    place: &self.cfg.l1,
                };
                restore_l1_l2_to(&job, &opts, Output::Pages(&sink))?;
            }
            Staged::Image(dir) => {
                let image = image.expect("opened above");
                // Every page is verified before any byte of a region is
                // written: a failing restart leaves the regions as they
                // were.
                image.verify()?;
                // And every page lands inside a registered region: the
                // image may carry pages outside its region table (a
                // producer that shrank a region without dropping its
                // pages: the image is then written without the table), and
                // a page past a region's end would be written past the
                // job's memory (helper-97).
                for &page in &image.meta().pages {
                    let (id, i) = split_page(page);
                    let inside = self
                        .regions
                        .get(&id)
                        .is_some_and(|r| (i as usize).checked_mul(ps).is_some_and(|f| f < r.size));
                    if !inside {
                        return Err(Error::chain(
                            &where_,
                            format!(
                                "page {page:#x} of the state of seq {} lies outside every registered region",
                                report.seq
                            ),
                        ));
                    }
                }
                for (pp, &page) in image.meta().pages.iter().enumerate() {
                    let (id, i) = split_page(page);
                    let r = &self.regions[&id]; // checked above
                    let data = image.page_unverified(pp)?; // verified above
                    let from = i as usize * ps;
                    let n = ps.min(r.size - from);
                    // SAFETY: the region's memory is the caller's, registered as
                    // writable for `size` bytes; `from < size` (checked above),
                    // so `from + n <= size`. It is not
                    // write-protected before the first checkpoint.
                    let dst =
                        unsafe { std::slice::from_raw_parts_mut((r.ptr + from) as *mut u8, n) };
                    dst.copy_from_slice(&data[..n]);
                }
                drop(image);
                drop(dir);
            }
        }
        // The restored state is checkpoint `seq`: nothing is dirty.
        let mut scratch = Vec::new();
        for r in self.regions.values_mut() {
            scratch.clear();
            if let Some(t) = r.tracked() {
                self.tracker.collect(t, &mut scratch)?;
            }
            r.fresh = false;
        }
        self.seq = Some(report.seq);
        self.chain = report.chain_id;
        self.continues = report.writer.continued();
        self.prev_table = Some(table);
        // Continue the run, unless the restore had to leave damaged
        // checkpoints behind: then a new run, so nothing of that tail is
        // ever taken for a continuation.
        self.need_full = report.fell_back.is_some() || report.chain_id.is_none();
        if self.need_full {
            // The new run's FULL checkpoint goes above every file there is:
            // the damaged ones left behind are evidence, never replaced.
            let newest = self.newest_seq_anywhere()?;
            self.seq = newest.max(Some(report.seq));
        }
        let mut report = report;
        if report.fell_back.is_some() {
            self.set_aside_left_out(&mut report);
        }
        // Nor does a run continue past a seq that a set-aside checkpoint
        // holds (an earlier restart's, killed before its first checkpoint):
        // put back by hand, it would be a second checkpoint of that seq.
        // (A directory that cannot be listed now has no say: the regions
        // are restored, and the next checkpoint says what is wrong.)
        let aside = crate::l1::list_set_aside(&self.cfg.l1)
            .unwrap_or_default()
            .iter()
            .filter_map(|p| crate::l1::set_aside_seq(p))
            .max();
        if !self.need_full && aside.is_some_and(|a| a > report.seq) {
            self.need_full = true;
            self.seq = self.newest_seq_anywhere()?.max(Some(report.seq));
        }
        Ok(report)
    }

    /// Waits for background work, stops the threads, stops tracking (the
    /// regions stay valid memory) and releases the L1 directory.
    pub fn finalize(mut self) -> Result<()> {
        let r = self.join_writer();
        let l2 = self.l2.as_mut().and_then(|t| t.stop());
        let ids: Vec<u32> = self.regions.keys().copied().collect();
        for id in ids {
            let reg = self.regions.remove(&id).expect("listed");
            if let Some(t) = reg.tracked() {
                self.tracker.untrack(t)?;
            }
        }
        r?;
        if let Some(e) = l2 {
            return Err(Error::Invalid(format!("L2: {e}")));
        }
        Ok(())
    }

    /// The L1 directory.
    pub fn l1(&self) -> &PathBuf {
        &self.cfg.l1
    }
}

impl Drop for Rex {
    fn drop(&mut self) {
        let _ = self.join_writer();
        if let Some(t) = self.l2.as_mut() {
            t.stop();
        }
        for r in self.regions.values() {
            if let Some(t) = r.tracked() {
                let _ = self.tracker.untrack(t);
            }
        }
    }
}

/// Prefix of the directory a restart stages its image in, inside L1.
const RESTART_DIR_PREFIX: &str = ".rex-restart-";

/// Removes the staging directories of restarts that died before they
/// finished (helper-42: each killed restart left a whole image in L1).
/// Orders checkpoint files newest first, by their header's seq, else
/// their name's: set aside in this order, a restart killed part-way leaves
/// only older files in place, none whose predecessor is gone (helper-67).
fn newest_first(files: &mut [std::path::PathBuf]) {
    let seq = |p: &std::path::PathBuf| {
        crate::format::ic::IcMeta::read(p)
            .ok()
            .map(|m| m.seq())
            .or_else(|| crate::l1::seq_of_file_name(p.file_name()?.to_str()?))
    };
    files.sort_by_cached_key(|p| std::cmp::Reverse(seq(p)));
}

/// Called with the producer lock held: no live process is using them.
fn remove_stale_restart_dirs(l1: &Path) -> Result<()> {
    let entries = std::fs::read_dir(l1).map_err(|e| Error::io(l1, "read directory", e))?;
    for e in entries {
        let e = e.map_err(|err| Error::io(l1, "read directory", err))?;
        if e.file_name()
            .to_string_lossy()
            .starts_with(RESTART_DIR_PREFIX)
        {
            let p = e.path();
            let r = if p.is_dir() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
            r.map_err(|err| Error::io(&p, "remove", err))?;
        }
    }
    Ok(())
}

/// Refuses a restart whose registered regions differ from the checkpoint's.
fn check_regions(ckpt: &RegionTable, mine: &RegionTable) -> Result<()> {
    for r in &ckpt.0 {
        match mine.get(r.id) {
            None => {
                return Err(Error::Invalid(format!(
                    "region {}: the checkpoint has it ({} bytes), this process did not register it",
                    r.id, r.size
                )));
            }
            Some(m) if m.size != r.size => {
                return Err(Error::Invalid(format!(
                    "region {}: registered with {} bytes, the checkpoint has {} bytes",
                    r.id, m.size, r.size
                )));
            }
            Some(_) => {}
        }
    }
    if let Some(m) = mine.0.iter().find(|m| ckpt.get(m.id).is_none()) {
        return Err(Error::Invalid(format!(
            "region {}: registered ({} bytes), but the checkpoint has no such region",
            m.id, m.size
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::config::ConfigLayer;

    /// Waits until the L2 thread is idle; its last failure, left in place.
    /// A push that panics (a thread it cannot start) is a failed push,
    /// not a dead L2 thread that `wait_idle` waits on for ever.
    #[test]
    fn a_panicking_push_is_a_failure() {
        let r: Result<()> = catching(|| panic!("failed to spawn thread"));
        let e = r.unwrap_err().to_string();
        assert!(e.contains("failed to spawn thread"), "{e}");
        assert_eq!(catching(|| Ok(3)).unwrap(), 3);
    }

    fn idle_error(t: &L2Thread) -> Option<String> {
        let (m, cv) = &*t.shared;
        let mut g = m.lock().unwrap();
        while g.queued || g.busy {
            g = cv.wait(g).unwrap();
        }
        g.error.clone()
    }

    fn queue(t: &L2Thread) {
        let (m, cv) = &*t.shared;
        m.lock().unwrap().queued = true;
        cv.notify_all();
    }

    #[test]
    fn a_push_that_commits_clears_an_earlier_push_s_failure() {
        let d = tempfile::tempdir().unwrap();
        let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
        std::fs::create_dir(&l1).unwrap();
        // L2 unusable: a file where its directory should be.
        std::fs::write(&l2, b"not a directory").unwrap();
        let mut w = IcWriter::create(
            l1.join("ckpt-00000000.rexic"),
            4096,
            0,
            true,
            1,
            vec![3],
            vec![],
        )
        .unwrap();
        w.push_page(&[7u8; 4096]).unwrap();
        w.finish().unwrap();
        let cfg = Config::resolve(
            ConfigLayer {
                l1: Some(l1.clone()),
                l2: Some(l2.clone()),
                max_pending_bytes: Some(1),
                ..ConfigLayer::default()
            },
            Vec::new(),
        )
        .unwrap();
        let mut t = L2Thread::start(cfg).unwrap();
        queue(&t);
        assert!(idle_error(&t).is_some(), "the push into a file succeeded");
        std::fs::remove_file(&l2).unwrap();
        std::fs::create_dir(&l2).unwrap();
        queue(&t);
        assert_eq!(
            t.wait_idle(),
            None,
            "an old failure outlived a push that took everything"
        );
        assert_eq!(t.shared.0.lock().unwrap().pushes, 1);
        assert!(crate::l1::list_ic_files(&l1).unwrap().is_empty());
        assert_eq!(t.stop(), None);
    }
}
