//! `push-l2`: coalesce the pending batch, deduplicate it, publish the new
//! generation in L1 and L2, and let it replace the batch's IC files.
//!
//! # Order of operations (what makes a crash harmless)
//!
//! 1. [`begin_writing`]: take the job lock and a directory L2's writer lock,
//!    refuse a second writer (another rank), then **recover** from any
//!    interrupted push (below).
//! 2. Coalesce the pending IC files: those the newest generation does not
//!    cover (its run, after its `last_seq`; or a newer run from its FULL
//!    checkpoint, `crate::l1::Covered`).
//! 3. Deduplicate into the L1 chain directory (`L1/rex/`): RPS, PF and
//!    P-Table, each written under a temporary name, fsynced, renamed.
//! 4. Upload those data files to L2 (same discipline), checking each
//!    upload's length and CRC against what the Deduplication Unit wrote.
//!    The RPS and the PF stream to L2 while they are written (upload
//!    threads beside the unit, [`crate::store::Store::put_stream`]), so the
//!    push waits only for the end of their uploads; an object whose stream
//!    stops is never published. The P-Table (and an MPI rank's cross-rank
//!    references), written at the end, go up after.
//! 5. For a Δ, check the parent's lineage in L2 ([`check_lineage`]: manifests
//!    and object sizes) and refuse to build on a broken one. Write the
//!    manifest to L1, then to L2. A generation exists once its manifest
//!    does; the L2 manifest is the commit point.
//! 6. Delete the IC files the generation covers, now that it is durable in
//!    both places; then prune chains beyond the retention counts, manifests
//!    first, only once the complete coalescence that supersedes them is
//!    durable in both places.
//!
//! **Recovery**, at the start of every push (and of `flush`): uploads an
//! interrupted push left unfinished in an object store are aborted (see
//! [`crate::store::S3Store`]); a generation valid in L1 but not in L2 (a
//! crash between the two manifests) is uploaded, unless L2 holds other files
//! under its names; L2's newest lineage is healed from L1's copy where a
//! manifest or file is missing there; a generation of L2's newest chain
//! missing in L1 is copied back (not when the L1 directory's checkpoints are
//! refused against that chain); files of a generation without a manifest are
//! deleted only where a crash can have left them (above the newest manifest
//! while the batch is still pending, below the oldest chain base), with the
//! temporaries; IC files the newest generation covers are deleted. Whatever
//! the crash, L1 + L2 restore either the old state (the IC files are still
//! there and the new generation does not exist) or the new one.
//!
//! The L2 store may be a directory or a bucket ([`crate::store::open_l2`]);
//! the order above is the same for both. In a bucket a manifest is never
//! overwritten: an invalid L2 manifest that recovery replaces with L1's
//! valid copy is deleted first.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::durable;
use crate::error::{Error, Failure, IoContext, Result};
use crate::format::chunked::WriteFormat;
use crate::format::ic::{ChainId, IcMeta};
use crate::format::manifest::{
    FileEntry, GenKind, MAX_SEQ_TIMES, Manifest, OtherRun, Role, Timings, manifest_name,
};
use crate::format::xref::Xref;
use crate::l1::coalesce::{CList, CoalesceStats};
use crate::l1::lock::JobLock;
use crate::l1::{Covered, L1Dir};
use crate::l2::chain::{ChainIndex, OpenChain, XrefSource};
use crate::l2::dedup::{DedupJob, DedupOutput, HashChoice, PlanPages, Upload, deduplicate};
use crate::l2::dedup_table::{Crc32Hasher, Xxh3Hasher};
use crate::store::{DirStore, NoProgress, Progress, Store};

/// Name of the L1 chain directory inside the L1 directory.
pub const L1_CHAIN_DIR: &str = "rex";

/// How to push.
#[derive(Clone, Debug)]
pub struct PushOptions {
    /// Pattern size for a new chain (an existing chain keeps its own unless
    /// a complete coalescence starts a new one).
    pub pattern_size: u32,
    /// Force a complete coalescence (fresh full RPS, new chain).
    pub full: bool,
    /// Chains kept in L2 (at least 1).
    pub keep_chains_l2: usize,
    /// Chains kept in L1 (at least 1).
    pub keep_chains_l1: usize,
    /// DeD-Table hash functions.
    pub hash: HashChoice,
    /// What the RPS and Pointer File are written as (version, zstd level,
    /// encoder threads).
    pub format: WriteFormat,
    /// Most memory the DeD-Table may take, bytes (`dedup_memory`).
    pub dedup_memory: u64,
    /// A complete coalescence is taken when the newest chain already holds
    /// this many generations (`max_chain_length`).
    pub max_chain_length: u64,
}

/// Default maximum chain length: a push past it is a complete coalescence.
pub const DEFAULT_MAX_CHAIN_LENGTH: u64 = 64;

impl Default for PushOptions {
    fn default() -> Self {
        PushOptions {
            pattern_size: 32,
            full: false,
            keep_chains_l2: 2,
            keep_chains_l1: 1,
            hash: HashChoice::default(),
            format: WriteFormat::default(),
            dedup_memory: crate::l2::dedup::DEFAULT_DEDUP_MEMORY,
            max_chain_length: DEFAULT_MAX_CHAIN_LENGTH,
        }
    }
}

/// A job's two storage levels.
pub struct Job {
    /// The L1 directory (IC files).
    pub l1: PathBuf,
    /// L1's local copy of the chain (`L1/rex/`).
    pub l1_chain: DirStore,
    /// The L2 store.
    pub l2: Box<dyn Store>,
    /// Receives the progress of uploads to L2 (none by default).
    pub progress: Option<Arc<dyn Progress>>,
    /// Who pushes: recorded in every manifest; a push onto an L2 whose
    /// newest generation another rank pushed is refused (`begin_writing`).
    pub identity: Option<JobIdentity>,
}

/// A job and rank, as named by the configuration or the scheduler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobIdentity {
    /// The job (none when neither the configuration nor a scheduler names
    /// it; a directory L2 then records no job).
    pub job: Option<String>,
    /// The rank within the job.
    pub rank: String,
}

/// Checks that the L1 directory exists: a setting that names no
/// directory is a configuration error (exit 5), named.
pub fn check_l1(l1: &Path) -> Result<()> {
    match std::fs::metadata(l1) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(Error::Invalid(format!(
            "L1 directory {}: not a directory",
            l1.display()
        ))),
        Err(e) => Err(Error::Invalid(format!(
            "L1 directory {}: {e}",
            l1.display()
        ))),
    }
}

/// Whether the L1 directory `l1` holds a job's state: checkpoints, or its
/// copy of the chain (an MPI rank's L1/R, or a single chain's L1 itself).
pub fn holds_checkpoints(l1: &Path) -> Result<bool> {
    Ok(!crate::l1::list_ic_files(l1)?.is_empty() || l1.join(L1_CHAIN_DIR).is_dir())
}

/// The L1 directory of `rank` of an MPI job, under `root`, which must
/// exist: a configuration error (exit 5) otherwise, on every rank of a
/// collective push. `ranks`: the job's number of ranks, when a job
/// generation committed it. A rank of the job whose L1/R is missing lost
/// its node: it is not made again here, since a librex restart takes a
/// rank whose L1/R holds neither checkpoints nor a chain for lost, and
/// recovers its checkpoints from its partners' copies; a push that made it
/// and copied the chain there gave those up (helper-108: the job restarted
/// from seq 0 where its partners held seq 4). Nor is a mistyped root with
/// no rank's directory (helper-108: every rank "healed", and a restore
/// then took L2's older state).
pub fn rank_l1(root: &Path, rank: u32, ranks: Option<u32>) -> Result<PathBuf> {
    check_l1(root)?;
    let dir = root.join(rank.to_string());
    match check_l1(&dir) {
        Err(_) if !dir.exists() && ranks.is_some_and(|n| rank < n) => Err(Error::Invalid(format!(
            "L1 directory {}: missing: rank {rank} of the job lost its node? A collective push needs every rank's L1 directory. Restart the job first (librex recovers a lost rank's checkpoints from its partners' copies), or make it again, empty, to push the other ranks back to rank {rank}'s newest seq in L2 (its partners' copies are then no longer used)",
            dir.display()
        ))),
        Err(e) => match ranks {
            Some(n) if rank >= n => Err(Error::Invalid(format!(
                "{e} (the job has {n} ranks: run as many processes as it has ranks)"
            ))),
            // Before the job's first job generation, its number of ranks
            // is written nowhere: more processes than ranks, or a node
            // lost before the first push, look alike.
            None if !dir.exists() => Err(Error::Invalid(format!(
                "L1 directory {}: missing, and no job generation committed the job's number of ranks yet: run as many processes as the job has ranks; if rank {rank} lost its node, restart the job first (librex recovers a lost rank's checkpoints from its partners' copies)",
                dir.display()
            ))),
            _ => Err(e),
        },
        Ok(()) => Ok(dir),
    }
}

impl Job {
    /// Opens a job: the L1 directory must exist; its chain directory is
    /// created if missing.
    pub fn open(l1: impl AsRef<Path>, l2: Box<dyn Store>) -> Result<Job> {
        let l1 = l1.as_ref().to_path_buf();
        check_l1(&l1)?;
        let l1_chain = DirStore::create(l1.join(L1_CHAIN_DIR))?;
        Ok(Job::with_chain(l1, l1_chain, l2))
    }

    fn with_chain(l1: PathBuf, l1_chain: DirStore, l2: Box<dyn Store>) -> Job {
        Job {
            l1,
            l1_chain,
            l2,
            progress: None,
            identity: None,
        }
    }

    /// Opens a job for reading (`status`, `restore`, `verify`, `plan`):
    /// as [`Job::open`], but a missing chain directory reads as empty and
    /// nothing is created. Only for reading: a push needs [`Job::open`].
    pub fn open_read(l1: impl AsRef<Path>, l2: Box<dyn Store>) -> Result<Job> {
        let l1 = l1.as_ref().to_path_buf();
        check_l1(&l1)?;
        let l1_chain = DirStore::open_or_empty(l1.join(L1_CHAIN_DIR));
        Ok(Job::with_chain(l1, l1_chain, l2))
    }

    /// Records `identity` in the manifests this job pushes, and refuses to
    /// push onto another rank's chain.
    pub fn with_identity(mut self, identity: JobIdentity) -> Job {
        self.identity = Some(identity);
        self
    }

    /// Reports the progress of uploads to L2 to `p`.
    pub fn with_progress(mut self, p: Arc<dyn Progress>) -> Job {
        self.progress = Some(p);
        self
    }

    fn progress(&self) -> &dyn Progress {
        self.progress.as_deref().unwrap_or(&NoProgress)
    }
}

/// What a push did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PushReport {
    /// Recovery actions taken before pushing.
    pub recovered: Vec<String>,
    /// The new generation's manifest, if one was pushed.
    pub manifest: Option<Manifest>,
    /// The batch's coalescing counts.
    pub coalesce: Option<CoalesceStats>,
    /// The Deduplication Unit's counts.
    pub dedup: Option<DedupOutput>,
    /// Why the push took a complete coalescence, if it did.
    pub full_reason: Option<String>,
    /// IC files deleted from L1 (replaced by a generation).
    pub deleted_ics: usize,
    /// Generations pruned by retention, per level.
    pub pruned_l1: Vec<u64>,
    /// Generations pruned from L2.
    pub pruned_l2: Vec<u64>,
    /// Pending checkpoints a collective push left in L1, and why: no seq
    /// after the cut is one state of the job on every rank ([`Cut`]; a job
    /// generation is one seq on every rank).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_back: Option<String>,
}

/// Runs `push-l2` on `job` under its lock.
pub fn push_l2(job: &Job, opts: &PushOptions) -> Result<PushReport> {
    let _writer = begin_writing(job, "push-l2")?;
    push_locked(job, opts, None)
}

/// What a writer of a job's two levels holds while it writes.
#[derive(Debug)]
pub struct Writer {
    _job: JobLock,
    _l2: Option<JobLock>,
}

/// A directory L2 that is the L1 directory `l1` (or its chain copy) is a
/// configuration error (exit 5; librex's `rex_init` says so at once).
pub fn check_l2_is_not_l1(l2: &dyn Store, l1: &Path) -> Result<()> {
    let Some(root) = l2.local_root() else {
        return Ok(());
    };
    let same = |a: &Path, b: &Path| {
        a.canonicalize()
            .ok()
            .is_some_and(|a| b.canonicalize().ok() == Some(a))
    };
    if same(&root, l1) || same(&root, &l1.join(L1_CHAIN_DIR)) {
        return Err(Error::Invalid(format!(
            "L2 {} is the L1 directory (or its chain copy): L2 must be another place",
            root.display()
        )));
    }
    Ok(())
}

/// Takes the writer lock of a directory L2 (`L2/.rex.lock`) without
/// waiting; `None` for an object store, or on a file system without flock
/// (Lustre mounted without `-o flock`, some NFS setups: there the job lock
/// and the two-writers check still hold). L2 equal to the L1 directory `l1`
/// (or its chain copy) is a configuration error.
pub fn lock_l2(l2: &dyn Store, l1: Option<&Path>, what: &str) -> Result<Option<JobLock>> {
    let Some(root) = l2.local_root() else {
        return Ok(None);
    };
    if let Some(l1) = l1 {
        check_l2_is_not_l1(l2, l1)?;
    }
    match JobLock::acquire(&root, what) {
        Ok(l) => Ok(Some(l)),
        Err(Error::Io { source, .. })
            if matches!(
                source.raw_os_error(),
                Some(libc::ENOSYS | libc::EOPNOTSUPP | libc::ENOLCK)
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Starts writing `job` (a push or `flush`), before recovery
/// touches anything: takes the job lock (L1), and the writer lock of a
/// directory L2 (`L2/.rex.lock`: the job lock is per L1 directory, so two
/// L1 directories pointed at one L2 would otherwise race for generation
/// numbers), both without waiting ([`Error::Busy`]); then refuses a rank
/// other than the one that pushed L2's newest generation. An object store
/// has no lock; there, manifests are create-only, so of two racing writers
/// one fails its commit.
pub fn begin_writing(job: &Job, what: &str) -> Result<Writer> {
    let job_lock = JobLock::acquire(&job.l1, what)?;
    let l2_lock = lock_l2(job.l2.as_ref(), Some(&job.l1), what)?;
    // One writer per chain, checked before recovery touches anything: two
    // ranks never share a chain. Another job (the same job restarted under
    // a new scheduler id) may only take over with a FULL checkpoint newer
    // than L2's chain, which the L1 scan enforces per run.
    if let Some(me) = &job.identity {
        check_rank(
            job.l2.as_ref(),
            &me.rank,
            "two writers on one L2 are refused (give each rank its own L2 location); the pending checkpoints are kept",
        )?;
    }
    Ok(Writer {
        _job: job_lock,
        _l2: l2_lock,
    })
}

/// Refuses `l2` when its newest generation was pushed by another rank than
/// `rank` (`then` ends the message): a push would make two writers of one
/// chain, a restore would give another rank's image (helper-72: with exit
/// 0, when two ranks were given one L2 location).
pub fn check_rank(l2: &dyn Store, rank: &str, then: &str) -> Result<()> {
    if let Some(n) = ChainIndex::load(l2)?.newest()
        && let Some(r) = &n.rank
        && r != rank
    {
        return Err(Error::chain(
            l2.describe(),
            format!(
                "L2's newest generation {} was pushed by rank {r}{}, this is rank {rank}: {then}",
                n.generation,
                n.job
                    .as_ref()
                    .map_or(String::new(), |j| format!(" of job {j}")),
            ),
        ));
    }
    Ok(())
}

/// Refuses a rank's chain of an MPI job (its newest generation, in L2 or
/// in L1's copy, belongs to a job generation) to a single-rank push.
fn refuse_job_chain(job: &Job) -> Result<()> {
    let newest = [
        ChainIndex::load(job.l2.as_ref())?,
        ChainIndex::load(&job.l1_chain)?,
    ]
    .into_iter()
    .filter_map(|i| i.newest().cloned())
    .max_by_key(|m| m.generation);
    match newest.and_then(|m| m.job_generation.map(|j| (m, j))) {
        Some((m, j)) => Err(Error::chain(
            job.l2.describe(),
            format!(
                "generation {} is {}'s part of job generation {j} of an MPI job: its chain is pushed by every rank together (`mpirun -np N rexctl push-l2 --collective`, or librex in the job), never alone; the pending checkpoints are kept",
                m.generation,
                m.rank
                    .as_ref()
                    .map_or("a rank".to_string(), |r| format!("rank {r}"))
            ),
        )),
        None => Ok(()),
    }
}

/// The chain state after recovery.
pub struct Recovered {
    /// The newest generation durable in both places.
    pub newest: Option<Manifest>,
    /// The L2 index.
    pub l2_index: ChainIndex,
    /// The L1 index.
    pub l1_index: ChainIndex,
}

/// Pushes with the lock already held. `forced_reason`, when given, makes
/// the push a complete coalescence for that reason (the controller's).
pub fn push_locked(
    job: &Job,
    opts: &PushOptions,
    forced_reason: Option<String>,
) -> Result<PushReport> {
    push_with(job, opts, forced_reason, None)
}

/// A rank's own outcome of a step, handed to a collective step: its error
/// as text and exit code, which the other ranks report and exit with.
pub type Local<T> = std::result::Result<T, Failure>;

/// What one rank proposes to the others before a collective push.
#[derive(Clone, Debug, Default)]
pub struct Proposal {
    /// Why this rank needs a complete coalescence, if it does.
    pub full: Option<String>,
    /// It has pending checkpoints (or must coalesce completely).
    pub has_work: bool,
    /// It has a generation or pending checkpoints: something to restore.
    pub has_state: bool,
}

/// What the ranks agreed on.
#[derive(Clone, Debug, Default)]
pub struct Agreed {
    /// Every rank takes a complete coalescence, for this reason (chains
    /// stay aligned, so a rank's cross-rank references never outlive the
    /// generations they name).
    pub full: Option<String>,
    /// Some rank has work: the push goes ahead on every rank.
    pub any_work: bool,
}

/// The collective side of a push (an MPI job's, `crate::l2::collective`).
///
/// Every method is a collective operation: every rank calls each one once
/// per push, in this order, whatever happened locally, until one returns
/// an error, which it then returns on every rank. An `Err` as the local
/// argument says this rank failed (its push returns its own error after
/// the call); an error from the method says some rank failed, so no rank
/// commits.
pub trait Collective {
    /// The rank, recorded in the manifest.
    fn rank(&self) -> u32;
    /// Agrees on the newest seq at which every rank stands in one state of
    /// the job, from this rank's [`stands`]: a job generation is one seq on
    /// every rank, so no rank pushes past it ([`Cut`]).
    fn cut(&mut self, local: Local<Vec<Stand>>) -> Result<Cut>;
    /// Agrees on the kind of generation and whether to push at all.
    fn agree(&mut self, local: Local<&Proposal>) -> Result<Agreed>;
    /// Chooses the cross-rank references among the pages this rank's
    /// generation `generation` writes (`Ok(None)`: this rank writes no
    /// generation this time); returns them ascending by page.
    fn xrefs(&mut self, local: Local<Option<(u64, &PlanPages<'_>)>>) -> Result<Vec<Xref>>;
    /// The job generation being written.
    fn job_generation(&self) -> u64;
    /// Where the pages of this rank's chain that other ranks store are read
    /// from (a complete coalescence rewrites them).
    fn xref_source(&self) -> Arc<dyn XrefSource>;
    /// Commits the job generation once every rank's manifest is durable in
    /// L1 and L2 (`Ok(None)`: this rank's member is its newest generation,
    /// `newest`).
    fn commit(&mut self, local: Local<Option<&Manifest>>, newest: Option<&Manifest>) -> Result<()>;
}

/// The state of a push before it deduplicates.
struct Prep {
    rec: Recovered,
    l1: L1Dir,
    clist: Option<CList>,
    chain: Option<OpenChain>,
    full_reason: Option<String>,
    coalesce_s: f64,
    /// Pending checkpoints were held back ([`hold_back`]): the rank has a
    /// state even with no generation and nothing to push now.
    held: bool,
}

/// Recovery and the pending checkpoints, with the seconds the scan took.
type Scanned = (Recovered, L1Dir, f64);

fn scan(
    job: &Job,
    opts: &PushOptions,
    collective: bool,
    report: &mut PushReport,
) -> Result<Scanned> {
    let rec = recover(job, opts, collective, report)?;
    let t0 = Instant::now();
    let l1 = L1Dir::scan_after(&job.l1, rec.newest.as_ref().map(Covered::from)).map_err(|e| {
        let newest = rec.newest.as_ref().map(|m| m.generation);
        invalid_above(e, newest, &[&rec.l2_index, &rec.l1_index])
    })?;
    Ok((rec, l1, t0.elapsed().as_secs_f64()))
}

/// An L1 chain error against the newest valid generation, `newest`, with
/// the invalid manifests of `indexes` numbered above it (L2's, L1's copy):
/// what the pending checkpoints likely continue (helper-111: "checkpoint
/// seq 2 missing: the L2 chain covers up to seq 1", while generation 2,
/// holding seqs 2..=3, had an invalid manifest in both places).
pub fn invalid_above(e: Error, newest: Option<u64>, indexes: &[&ChainIndex]) -> Error {
    let above: Vec<String> = indexes
        .iter()
        .flat_map(|i| i.invalid.iter())
        .filter(|(g, _)| Some(*g) > newest)
        .map(|(g, e)| format!("generation {g}: {e}"))
        .collect();
    match e {
        Error::Chain { path, reason } if !above.is_empty() => Error::Chain {
            path,
            reason: format!(
                "{reason}; the manifests numbered above the newest valid generation are invalid ({}): the checkpoints they held are in no valid generation (`restore --fallback` restores the newest valid one; a FULL checkpoint starts a new chain)",
                above.join("; ")
            ),
        },
        e => e,
    }
}

/// A state a rank of an MPI job can stand at exactly: its checkpoint
/// `seq`, written at `time_ns`, and the run it belongs to when that run
/// began among its pending checkpoints (a FULL checkpoint of another run
/// than the state before it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Stand {
    /// The checkpoint's seq.
    pub seq: u64,
    /// Its capture time.
    pub time_ns: u64,
    /// The capture time of the FULL checkpoint that began its run among
    /// the pending checkpoints; `None`: the run of the newest generation,
    /// or older.
    pub began: Option<u64>,
    /// This checkpoint begins its run (`began` is its own time).
    pub first: bool,
    /// Its run began at or below the seq of the rank's newest generation:
    /// the job's numbering started again (a job restarted by hand), so
    /// the generation is of an older life of the job.
    pub renumbered: bool,
}

impl Stand {
    /// The bytes of a collective exchange: seq, time, the run's beginning
    /// (`u64::MAX`: none) and the two flags, little-endian.
    pub const LEN: usize = 32;

    /// Appends [`Stand::LEN`] bytes.
    pub fn encode_into(&self, b: &mut Vec<u8>) {
        b.extend_from_slice(&self.seq.to_le_bytes());
        b.extend_from_slice(&self.time_ns.to_le_bytes());
        b.extend_from_slice(&self.began.unwrap_or(u64::MAX).to_le_bytes());
        let flags = u64::from(self.first) | (u64::from(self.renumbered) << 1);
        b.extend_from_slice(&flags.to_le_bytes());
    }

    /// Reads [`Stand::LEN`] bytes (`None`: fewer).
    pub fn decode(b: &[u8]) -> Option<Stand> {
        let word = |i: usize| {
            b.get(i * 8..i * 8 + 8)
                .and_then(|s| s.try_into().ok())
                .map(u64::from_le_bytes)
        };
        let flags = word(3)?;
        Some(Stand {
            seq: word(0)?,
            time_ns: word(1)?,
            began: word(2).filter(|&t| t != u64::MAX),
            first: flags & 1 != 0,
            renumbered: flags & 2 != 0,
        })
    }
}

/// The states a rank can stand at, ascending by seq: its newest
/// generation's (unless a pending checkpoint of a newer run is numbered at
/// or below it: a restore of that seq takes the newer run) and each of its
/// pending checkpoints'.
pub fn stands(newest: Option<&Manifest>, pending: &[IcMeta]) -> Vec<Stand> {
    let mut v = Vec::with_capacity(pending.len() + 1);
    let mut run = None;
    if let Some(m) = newest {
        run = Some(m.chain_id);
        if pending.first().is_none_or(|f| f.seq() > m.last_seq) {
            v.push(Stand {
                seq: m.last_seq,
                time_ns: m.time_ns,
                ..Stand::default()
            });
        }
    }
    let mut began = None;
    let mut renumbered = false;
    for f in pending {
        let first = f.is_full() && run != Some(f.chain_id);
        if first {
            began = Some(f.header.time_ns);
            renumbered = newest.is_some_and(|m| f.seq() <= m.last_seq);
        }
        run = Some(f.chain_id);
        v.push(Stand {
            seq: f.seq(),
            time_ns: f.header.time_ns,
            began,
            first,
            renumbered,
        });
    }
    v
}

/// What the ranks of a collective push agreed on before it: the newest seq
/// at which every rank stands in one state of the job (`at`), and every
/// rank's states, which say why a later seq is not one.
#[derive(Clone, Debug, Default)]
pub struct Cut {
    /// The newest common seq (`None`: there is none; no rank pushes).
    pub at: Option<u64>,
    /// Every rank's [`stands`].
    pub ranks: Vec<Vec<Stand>>,
}

impl Cut {
    /// The newest seq that is a state of the job on every rank.
    pub fn agree(ranks: Vec<Vec<Stand>>) -> Cut {
        let at = ranks.first().and_then(|first| {
            first
                .iter()
                .rev()
                .map(|s| s.seq)
                .find(|&s| Self::why_not_at(&ranks, s).is_none())
        });
        Cut { at, ranks }
    }

    /// Why seq `s` is not a state of the job (`None`: it is): the lowest
    /// rank with no checkpoint of that seq, or [`Cut::two_lives`].
    pub fn why_not_at(ranks: &[Vec<Stand>], s: u64) -> Option<String> {
        let mut at = Vec::with_capacity(ranks.len());
        for (r, stands) in ranks.iter().enumerate() {
            match stands.binary_search_by_key(&s, |x| x.seq) {
                Ok(i) => at.push((r, stands[i], stands.get(i + 1).map(|n| n.time_ns))),
                Err(_) => {
                    return Some(format!(
                        "rank {r} has no checkpoint of seq {s}{}",
                        match stands.last() {
                            Some(n) if n.seq < s => format!(" (its newest is seq {})", n.seq),
                            _ => String::new(),
                        }
                    ));
                }
            }
        }
        Self::two_lives(&at)
    }

    /// Whether the ranks' states of one seq, `(rank, state, capture time
    /// of the rank's next checkpoint)`, are of two lives of the job. Seqs
    /// do not order runs (a job restarted by hand counts from 0 again:
    /// helper-105, a rank whose node was lost stood at the old run's seq
    /// 4, the others at the new run's, and the job generation mixed them;
    /// helper-106, the same in a job's first push). In one life, every
    /// rank's checkpoint of a seq comes after every run of it began, and
    /// before every rank's next checkpoint:
    /// - a run begun before the seq: no rank's checkpoint of the seq is
    ///   older than its beginning;
    /// - a run that begins at the seq itself (its FULL checkpoint of a new
    ///   chain: `capture --full`, librex after a failed write, or every
    ///   rank's first) is taken beside the others', whichever clock read
    ///   first (helper-106: refused as another life), so it is held to the
    ///   others' next checkpoints only.
    ///
    /// Capture times come from each node's clock: nodes whose clocks differ
    /// by more than the time between two checkpoints can defeat the test
    /// either way.
    pub fn two_lives(at: &[(usize, Stand, Option<u64>)]) -> Option<String> {
        let s = at.first()?.1.seq;
        let another = |r: usize, q: usize, what: &str| {
            format!(
                "rank {r}'s {what} was taken before rank {q}'s run of seq {s} began: another life of the job"
            )
        };
        if let Some((q, began)) = at
            .iter()
            .filter_map(|(q, x, _)| x.began.filter(|_| !x.first).map(|b| (*q, b)))
            .max_by_key(|&(_, b)| b)
            && let Some((r, _, _)) = at.iter().find(|(_, x, _)| x.time_ns < began)
        {
            return Some(another(*r, q, &format!("checkpoint of seq {s}")));
        }
        for (q, x, _) in at.iter().filter(|(_, x, _)| x.first) {
            let began = x.began.unwrap_or(x.time_ns);
            if let Some((r, _, _)) = at.iter().find(|(_, _, n)| n.is_some_and(|n| n < began)) {
                return Some(another(*r, *q, &format!("checkpoint after seq {s}")));
            }
        }
        // A run numbered again from at or below the rank's own generation
        // began a new life: a rank still in a generation's run at that seq
        // is of the older one (helper-107: a lost node, the job restarted
        // by hand from seq 0, job generation 1 at seq 0).
        if let Some((q, _, _)) = at.iter().find(|(_, x, _)| x.renumbered)
            && let Some((r, _, _)) = at.iter().find(|(_, x, _)| x.began.is_none())
        {
            return Some(format!(
                "rank {q} numbers its checkpoints again from seq {s} or below, past its own generation, and rank {r}'s state of seq {s} is of the run before: another life of the job"
            ));
        }
        None
    }

    /// [`Cut::why_not_at`] for a report.
    pub fn why_not(&self, s: u64) -> String {
        Self::why_not_at(&self.ranks, s).unwrap_or_default()
    }

    /// Why no seq is a state of the job (when [`Cut::at`] is `None`): the
    /// newest seq every rank has a checkpoint of, whose states are of two
    /// lives ([`Cut::two_lives`]), else why the smallest of the ranks'
    /// newest seqs is not one. The first says what to do (helper-109: a
    /// lost node at the old life's seq 6, the others numbered again from
    /// 0 up to 3, read "rank 2 has no checkpoint of seq 3", which hid the
    /// two lives).
    pub fn why_none(&self) -> String {
        let everywhere = |s: u64| {
            self.ranks
                .iter()
                .all(|v| v.binary_search_by_key(&s, |x| x.seq).is_ok())
        };
        let lives = self
            .ranks
            .first()
            .into_iter()
            .flatten()
            .rev()
            .map(|x| x.seq)
            .filter(|&s| everywhere(s))
            .find_map(|s| Self::why_not_at(&self.ranks, s));
        let newest = || {
            let s = self
                .ranks
                .iter()
                .filter_map(|v| v.last())
                .map(|x| x.seq)
                .min()?;
            Self::why_not_at(&self.ranks, s)
        };
        lives.or_else(newest).unwrap_or_default()
    }
}

/// A collective push's pending checkpoints up to the cut, the newest seq
/// that is a state of the job on every rank ([`Cut`]); those after it stay
/// in L1 for a later push. A job generation stands at one seq on every
/// rank: a rank whose node was lost since the last push has nothing
/// pending, one may still be writing the checkpoint the others finished
/// (a push run from cron), and one may have a gap before a FULL
/// checkpoint. Pushing the others past it committed a job generation that
/// no collective restore could take (its ranks at different seqs).
fn hold_back(l1: &mut L1Dir, cut: &Cut, report: &mut PushReport) {
    let above = |s: u64| cut.at.is_none_or(|c| s > c);
    let held: Vec<u64> = l1
        .files
        .iter()
        .map(IcMeta::seq)
        .filter(|&s| above(s))
        .collect();
    let (Some(&a), Some(&b)) = (held.first(), held.last()) else {
        return;
    };
    l1.files.retain(|f| !above(f.seq()));
    if l1.files.is_empty() {
        // The FULL checkpoint that supersedes them is held back too: they
        // are deleted once it is pushed.
        l1.superseded.clear();
        l1.superseded_why = None;
    }
    report.held_back = Some(format!(
        "{} stay{} in L1, for a later push: {}; {} (a job generation stands at one seq on every rank)",
        if a == b {
            format!("checkpoint seq {a}")
        } else {
            format!("checkpoints seq {a}..={b}")
        },
        if a == b { "s" } else { "" },
        match cut.at {
            Some(_) => cut.why_not(a),
            None => cut.why_none(),
        },
        match cut.at {
            Some(c) => format!("seq {c} is the newest every rank stands at"),
            None => "no seq is one state of the job on every rank".into(),
        },
    ));
}

/// The batch and its C-List, the chain to extend, and this rank's reason
/// for a complete coalescence.
fn prepare(
    job: &Job,
    opts: &PushOptions,
    forced_reason: Option<String>,
    collective: bool,
    (rec, l1, scan_s): Scanned,
    report: &mut PushReport,
) -> Result<Prep> {
    let t0 = Instant::now();
    report.recovered.extend(l1.superseded_why.clone());
    let batch = &l1.files;
    let mut full_reason = forced_reason.or_else(|| opts.full.then(|| "--full".to_string()));
    let clist = if batch.is_empty() {
        None
    } else {
        Some(CList::build(batch)?)
    };
    let coalesce_s = scan_s + t0.elapsed().as_secs_f64();
    let chain = match &rec.newest {
        // A collective push may learn only later that it must coalesce
        // completely: it opens the chain in any case.
        Some(m) if clist.is_some() || full_reason.is_some() || collective => {
            match open_chain(job, &rec, m.generation, report) {
                Ok(c) => Some(c),
                // A batch from a FULL checkpoint on is the whole state: its
                // generation reads no page of the old chain, which may be
                // beyond repair (a librex restart that fell back past a
                // generation damaged in both copies wrote that FULL
                // checkpoint; helper-63: every push failed on it). Pushed
                // without it, said; its manifest then records no writers
                // of the old chain.
                Err(e) if !collective && clist.as_ref().is_some_and(|c| c.full) => {
                    report.recovered.push(format!(
                        "generation {}'s chain cannot be opened ({}); the batch holds a FULL checkpoint, which needs none of it: pushed as a new chain",
                        m.generation,
                        e.report()
                    ));
                    None
                }
                Err(e) => return Err(e),
            }
        }
        _ => None,
    };
    if let (Some(ch), Some(c)) = (&chain, &clist)
        && !c.full
        && c.page_size != ch.manifest().page_size
    {
        return Err(Error::chain(
            &job.l1,
            format!(
                "the pending checkpoints (seq {}..={}) have {}-byte pages, the L2 chain {}-byte pages: only a FULL checkpoint may change the page size",
                c.first_seq,
                c.last_seq,
                c.page_size,
                ch.manifest().page_size
            ),
        ));
    }
    if full_reason.is_none() {
        full_reason = match (&rec.newest, &clist) {
            (None, Some(_)) => Some("first generation".into()),
            (_, Some(c)) if c.full => Some("the batch holds a FULL checkpoint".into()),
            // As `flush` decides it, also for a push it did not decide
            // (helper-48: `push-l2 --max-chain-length 2` grew a chain of 6).
            (Some(m), Some(_)) => {
                let length = |i: &ChainIndex| i.chain(m.chain_base).count() as u64;
                let n = length(&rec.l2_index).max(length(&rec.l1_index));
                (n >= opts.max_chain_length).then(|| {
                    format!(
                        "the chain has {n} generations, max_chain_length is {}",
                        opts.max_chain_length
                    )
                })
            }
            _ => None,
        };
    }
    Ok(Prep {
        rec,
        l1,
        clist,
        chain,
        full_reason,
        coalesce_s,
        held: report.held_back.is_some(),
    })
}

impl Prep {
    fn proposal(&self) -> Proposal {
        // A rank whose checkpoints were all held back has a state, but no
        // generation to rewrite in a complete coalescence (helper-107: a
        // first push held back, then made full, reached no generation).
        let has_data = self.rec.newest.is_some() || self.clist.is_some();
        Proposal {
            full: self.full_reason.clone(),
            has_work: has_data && (self.clist.is_some() || self.full_reason.is_some()),
            has_state: has_data || self.held,
        }
    }
}

/// A push, collective when `coll` is given (see [`Collective`]).
pub fn push_with(
    job: &Job,
    opts: &PushOptions,
    forced_reason: Option<String>,
    mut coll: Option<&mut dyn Collective>,
) -> Result<PushReport> {
    let mut report = PushReport::default();
    let scanned = scan(job, opts, coll.is_some(), &mut report);
    let prep = match coll.as_deref_mut() {
        None => {
            let prep = prepare(job, opts, forced_reason, false, scanned?, &mut report)?;
            if !prep.proposal().has_work {
                return Ok(report);
            }
            prep
        }
        Some(c) => {
            let local = scanned
                .as_ref()
                .map(|(rec, l1, _)| stands(rec.newest.as_ref(), &l1.files));
            let cut = c.cut(local.map_err(Failure::from));
            // This rank's own error first, then another rank's.
            let (rec, mut l1, scan_s) = scanned?;
            let cut = cut?;
            hold_back(&mut l1, &cut, &mut report);
            let prep = prepare(
                job,
                opts,
                forced_reason,
                true,
                (rec, l1, scan_s),
                &mut report,
            );
            let proposal = prep.as_ref().map(Prep::proposal).map_err(Failure::from);
            let agreed = c.agree(proposal.as_ref().map_err(Clone::clone));
            let mut prep = prep?;
            let agreed = agreed?;
            if !agreed.any_work {
                return Ok(report);
            }
            if prep.full_reason.is_none()
                && let Some(why) = agreed.full
            {
                prep.full_reason = Some(why);
            }
            if let Some(ch) = &mut prep.chain {
                ch.set_xref_source(c.xref_source());
            }
            if !prep.proposal().has_work {
                // Nothing of this rank's changed: its member of the job
                // generation is its newest generation.
                c.xrefs(Ok(None))?;
                c.commit(Ok(None), prep.rec.newest.as_ref())?;
                return Ok(report);
            }
            prep
        }
    };
    let Prep {
        rec,
        l1,
        clist,
        mut chain,
        mut full_reason,
        coalesce_s,
        held: _,
    } = prep;
    let batch = &l1.files;
    let empty = empty_clist(chain.as_ref(), clist.as_ref());
    let clist_ref = clist.as_ref().unwrap_or(&empty);
    let generation = next_generation(job, &rec);
    // The batch's page size, even when it leaves no live page: a FULL
    // checkpoint may change it, and an empty FULL (or one whose pages the
    // batch dropped) starts the new page size all the same (helper-41: it
    // kept the chain's, and every later push failed). Without a batch
    // (`--full` alone) `empty` carries the chain's; a batch that is not
    // FULL has the chain's page size (`prepare` refuses any other).
    let page_size = clist_ref.page_size;
    // A new chain's patterns are at most its pages: a FULL checkpoint that
    // makes the pages smaller than the configured pattern size gets
    // patterns of a page (helper-41: every push failed until the setting
    // was changed).
    let pattern_size = match (&chain, &full_reason) {
        (Some(ch), None) => ch.manifest().pattern_size,
        _ => opts.pattern_size.min(page_size),
    };
    // Every deduplication of this push: the template, whose generation,
    // chain, kind and references each run sets.
    let template = DedupJob {
        generation: 0,
        page_size,
        pattern_size,
        batch,
        clist: clist_ref,
        chain: None,
        full: false,
        dir: job.l1_chain.root(),
        format: opts.format,
        table_memory: opts.dedup_memory,
        xrefs: &[],
        upload: Some(Upload {
            store: job.l2.as_ref(),
            progress: job.progress(),
        }),
    };
    // A collective push chooses the pages other ranks store, among the
    // pages this generation writes.
    let xrefs: Vec<Xref> = match coll.as_deref_mut() {
        None => Vec::new(),
        Some(c) => {
            let pages = generation.as_ref().ok().map(|&g| {
                let dj = DedupJob {
                    generation: g,
                    full: full_reason.is_some(),
                    chain: chain.as_ref(),
                    ..template
                };
                PlanPages::new(&dj).map(|p| (g, p))
            });
            let x = c.xrefs(match (&pages, &generation) {
                (Some(Ok((g, p))), _) => Ok(Some((*g, p))),
                (Some(Err(e)), _) | (None, Err(e)) => Err(Failure::from(e)),
                (None, Ok(_)) => unreachable!("pages are listed for every generation number"),
            });
            // This rank's own error first, then another rank's.
            if let Some(p) = pages {
                p?;
            }
            match generation {
                Err(e) => return Err(e),
                Ok(_) => x?,
            }
        }
    };
    let generation = generation?;
    // A bucket has no writer lock: another copy of the job may commit this
    // generation first, and its files are never replaced.
    let _fresh = FreshGeneration::new(job.l2.as_ref(), generation);
    let sealed = seal(
        job,
        &rec,
        &mut report,
        &mut chain,
        &mut full_reason,
        coalesce_s,
        generation,
        (page_size, pattern_size),
        &|full, chain| {
            let dj = DedupJob {
                generation,
                full,
                chain,
                xrefs: &xrefs,
                ..template
            };
            match opts.hash {
                HashChoice::Crc32 => deduplicate(&dj, Crc32Hasher::new()),
                HashChoice::Xxh3 => deduplicate(&dj, Xxh3Hasher::new()),
            }
        },
        batch,
        clist.as_ref(),
        coll.as_deref().map(|c| (c.rank(), c.job_generation())),
    );
    if let Some(c) = coll {
        let done = c.commit(
            sealed.as_ref().map(|(_, m)| Some(m)).map_err(Failure::from),
            rec.newest.as_ref(),
        );
        // This rank's own error first, then another rank's.
        if sealed.is_ok() {
            done?;
        }
    }
    let (out, manifest) = sealed?;
    let full = full_reason.is_some();

    // Durable in both places: the batch's IC files can go, and the files
    // its FULL checkpoint superseded.
    for m in l1.orphans.iter().chain(&l1.superseded).chain(batch.iter()) {
        durable::remove_file(&m.path)?;
        report.deleted_ics += 1;
    }
    report.coalesce = clist.as_ref().map(|c| c.stats);
    report.dedup = Some(out);
    report.full_reason = full_reason;
    report.manifest = Some(manifest);
    if full {
        prune(job, opts, &mut report)?;
    }
    Ok(report)
}

/// [`Store::writing_generation`] for the life of a push's upload of a new
/// generation.
struct FreshGeneration<'a>(&'a dyn Store);

impl<'a> FreshGeneration<'a> {
    fn new(store: &'a dyn Store, generation: u64) -> Self {
        store.writing_generation(Some(generation));
        FreshGeneration(store)
    }
}

impl Drop for FreshGeneration<'_> {
    fn drop(&mut self) {
        self.0.writing_generation(None);
    }
}

/// Deduplicates with `run` (retrying on a healed L1 copy, or as a complete
/// coalescence when a Δ would overflow the pattern space), uploads the data
/// files, and writes the manifest to L1, then to L2 (the commit point of a
/// single-rank push). `coll` is a collective push's rank and job generation.
#[allow(clippy::too_many_arguments)]
fn seal(
    job: &Job,
    rec: &Recovered,
    report: &mut PushReport,
    chain: &mut Option<OpenChain>,
    full_reason: &mut Option<String>,
    coalesce_s: f64,
    generation: u64,
    (page_size, pattern_size): (u32, u32),
    run: &dyn Fn(bool, Option<&OpenChain>) -> Result<DedupOutput>,
    batch: &[IcMeta],
    clist: Option<&CList>,
    coll: Option<(u32, u64)>,
) -> Result<(DedupOutput, Manifest)> {
    let mut attempt = run(full_reason.is_some(), chain.as_ref());
    // A chunk of L1's chain copy that fails its CRC only shows while the
    // Deduplication Unit reads it: heal L1 from L2 and run again.
    if let (Err(Error::Corrupt { path, .. }), Some(newest)) = (&attempt, &rec.newest)
        && path.starts_with(job.l1_chain.root())
    {
        let why = attempt
            .as_ref()
            .err()
            .map(Error::report)
            .unwrap_or_default();
        remove_generation_files(&job.l1_chain, generation)?;
        heal_l1(job, rec, newest.generation, report, &why)?;
        *chain = Some(OpenChain::open(
            job.l2.as_ref(),
            &rec.l2_index,
            newest.generation,
        )?);
        attempt = run(full_reason.is_some(), chain.as_ref());
    }
    let out = match attempt {
        // A collective push keeps the ranks' chains aligned: the next push
        // must be complete on every rank (`--full`).
        Err(Error::PatternSpaceFull(why)) if full_reason.is_none() && coll.is_none() => {
            remove_generation_files(&job.l1_chain, generation)?;
            *full_reason = Some(format!("pattern space full ({why})"));
            run(true, chain.as_ref())?
        }
        other => other?,
    };
    let full = full_reason.is_some();

    // Upload the data files the unit did not stream, checking what arrived.
    let t_up = Instant::now();
    for f in out.files.iter().filter(|f| !out.uploaded.contains(&f.name)) {
        let src = job.l1_chain.open_local(&f.name)?;
        let (bytes, crc) = job.l2.put_file(&f.name, &src, job.progress())?;
        if (bytes, crc) != (f.bytes, f.crc32) {
            return Err(Error::corrupt(
                &src,
                0,
                "upload",
                format!(
                    "{} bytes with CRC {crc:08x} reached {}, the Deduplication Unit wrote {} bytes with CRC {:08x}",
                    bytes,
                    job.l2.describe(),
                    f.bytes,
                    f.crc32
                ),
            ));
        }
    }
    let upload_s = out.upload_wait_s + t_up.elapsed().as_secs_f64();
    let link_s = out.upload_busy_s + t_up.elapsed().as_secs_f64();

    let bytes_in: u64 = batch.iter().map(|m| m.layout.file_len).sum();
    let bytes_out: u64 = out.files.iter().map(|f| f.bytes).sum();
    let (parent, chain_base) = match (&*chain, full) {
        (Some(ch), false) => (Some(ch.manifest().generation), ch.manifest().chain_base),
        _ => (None, generation),
    };
    let (first_seq, last_seq) = match (&*chain, clist, full) {
        (Some(ch), Some(c), false) => (c.first_seq, c.last_seq.max(ch.manifest().last_seq)),
        (Some(ch), Some(c), true) if !c.full => (ch.gens[0].manifest.first_seq, c.last_seq),
        (_, Some(c), _) => (c.first_seq, c.last_seq),
        (Some(ch), None, _) => (ch.gens[0].manifest.first_seq, ch.manifest().last_seq),
        (None, None, _) => unreachable!("nothing to push was handled above"),
    };
    let mut manifest = Manifest {
        format: crate::format::manifest::FORMAT,
        generation,
        parent,
        chain_base,
        kind: if full { GenKind::Full } else { GenKind::Delta },
        page_size,
        pattern_size,
        first_seq,
        last_seq,
        time_ns: batch
            .last()
            .map(|m| m.header.time_ns)
            .or_else(|| chain.as_ref().map(|c| c.manifest().time_ns))
            .unwrap_or(0),
        pattern_base: out.pattern_base,
        patterns: out.patterns,
        live_pages: out.live_pages,
        dirty_pages: out.dirty_pages,
        dropped_pages: out.dropped_pages,
        files: out.files.clone(),
        bytes_in,
        bytes_out,
        compression_ratio: if bytes_out > 0 {
            bytes_in as f64 / bytes_out as f64
        } else {
            0.0
        },
        timings: Timings {
            coalesce_s,
            dedup_s: out.seconds,
            upload_s,
            link_s,
        },
        created_ns: crate::format::ic::now_ns(),
        writer: format!("rexctl {}", env!("CARGO_PKG_VERSION")),
        chain_id: batch
            .last()
            .map(|m| m.chain_id)
            .unwrap_or_else(|| chain.as_ref().and_then(|c| c.manifest().chain_id)),
        job: job.identity.as_ref().and_then(|i| i.job.clone()),
        rank: match coll {
            Some((r, _)) => Some(r.to_string()),
            None => job.identity.as_ref().map(|i| i.rank.clone()),
        },
        regions: match batch.last() {
            Some(m) => m.regions.clone(),
            None => chain.as_ref().and_then(|c| c.manifest().regions.clone()),
        },
        job_generation: coll.map(|(_, j)| j),
        instances: Vec::new(),
        seq_times: Vec::new(),
        other_runs: Vec::new(),
    };
    manifest.other_runs = other_runs(manifest.chain_id, batch);
    manifest.seq_times = seq_times(
        chain.as_ref().map(|c| c.manifest()),
        manifest.chain_id,
        batch,
    );
    let batch_ids: Vec<_> = batch.iter().map(|m| (m.seq(), m.instance)).collect();
    manifest.instances = crate::format::manifest::extend_instances(
        chain.as_ref().map(|c| c.manifest()),
        manifest.chain_id,
        &batch_ids,
    );
    // Never commit a Δ on a broken L2 lineage: it would make every later
    // restore fail. The pending IC files are kept; recovery healed what L1's
    // copy could heal.
    if let Some(p) = parent
        && let Err(e) = check_lineage(job.l2.as_ref(), p)
    {
        return Err(Error::chain(
            job.l2.describe(),
            format!(
                "refusing to push generation {generation} on a broken L2 chain ({}); the pending checkpoints are kept: run `rexctl verify`",
                e.report()
            ),
        ));
    }
    let path = job.l1_chain.root().join(manifest_name(generation));
    manifest.check(&path)?;
    let bytes = manifest.encode();
    job.l1_chain.put_bytes(&manifest_name(generation), &bytes)?;
    job.l2.put_bytes(&manifest_name(generation), &bytes)?;
    check_landed(job.l2.as_ref(), &manifest_name(generation), &bytes)?;
    report.recovered.extend(reupload_missing(job, &manifest)?);
    Ok((out, manifest))
}

/// `(seq, time_ns)` of the checkpoints of run `chain` in `batch`, after
/// `parent`'s of the same run below the batch's seqs (the newest
/// [`MAX_SEQ_TIMES`]). The covered rule matches a
/// leftover checkpoint that names no instance against its seq's time here:
/// a clock that stepped back within the batch then cannot make a pushed
/// checkpoint look newer than its generation (helper-41: a push that died
/// before deleting its batch restored, and pushed again, an older state),
/// nor can a clock that jumped ahead make a fork's checkpoint look pushed
/// (helper-43: a bound by the latest time did).
fn seq_times(
    parent: Option<&Manifest>,
    chain: Option<ChainId>,
    batch: &[IcMeta],
) -> Vec<(u64, u64)> {
    let ours: Vec<(u64, u64)> = batch
        .iter()
        .filter(|m| m.chain_id == chain)
        .map(|m| (m.seq(), m.header.time_ns))
        .collect();
    // The run's earlier generations' too (helper-44: a fork below the
    // newest batch passed for pushed), those before the batch's seqs.
    let first = ours.first().map_or(u64::MAX, |&(q, _)| q);
    let mut t: Vec<(u64, u64)> = parent
        .filter(|p| p.chain_id == chain)
        .map(|p| {
            p.seq_times
                .iter()
                .copied()
                .filter(|&(q, _)| q < first)
                .collect()
        })
        .unwrap_or_default();
    t.extend(ours);
    let keep = t.len().saturating_sub(MAX_SEQ_TIMES);
    t.drain(..keep);
    t
}

/// The checkpoints of `batch` of runs other than `chain` (version 2 files:
/// a version 1 file names no run to tell apart), the newest
/// [`MAX_SEQ_TIMES`]: the manifest's `other_runs`.
fn other_runs(chain: Option<ChainId>, batch: &[IcMeta]) -> Vec<OtherRun> {
    let mut v: Vec<OtherRun> = batch
        .iter()
        .filter_map(|m| {
            let c = m.chain_id.filter(|&c| Some(c) != chain)?;
            Some(OtherRun {
                chain_id: c,
                seq: m.seq(),
                time_ns: m.header.time_ns,
                instance: m.instance,
            })
        })
        .collect();
    let keep = v.len().saturating_sub(MAX_SEQ_TIMES);
    v.drain(..keep);
    v
}

/// Reads a manifest back from L2 after its upload, before anything counts
/// on it (the batch deleted, the copy called recovered, the job generation
/// called committed): a store that acknowledges a PUT and keeps nothing, or
/// something else (helper-83: a server answering 200 to the manifest's PUT
/// had the push say "pushed", delete the batch, and leave a generation only
/// L1's copy held), fails the push instead, the pending checkpoints kept;
/// the next push's recovery uploads the generation again.
pub(crate) fn check_landed(store: &dyn Store, name: &str, bytes: &[u8]) -> Result<()> {
    let at = Path::new(&store.describe()).join(name);
    match store.read(name) {
        Ok(b) if b == bytes => Ok(()),
        Ok(b) => Err(Error::chain(
            &at,
            format!(
                "read back after its upload, L2 holds {} other bytes than the {} uploaded; the pending checkpoints are kept",
                b.len(),
                bytes.len()
            ),
        )),
        Err(e) if e.is_not_found() => Err(Error::io(
            &at,
            "read back",
            std::io::Error::other(
                "the store acknowledged the manifest's upload but does not hold it; the pending checkpoints are kept, and the next push uploads the generation again",
            ),
        )),
        Err(e) => Err(e),
    }
}

/// After the commit, before the pending checkpoints are deleted: checks
/// that L2 still holds every file of generation `m`, and uploads again from
/// L1's copy any that went missing; says so when it did. Recovery's
/// uploads of L1's generations commit through the same check.
///
/// `gc` on an object store takes no lock: it deletes the unreferenced
/// objects older than its grace period by age alone. A push stalled for
/// longer than that between its uploads and its manifest (a frozen VM, a
/// store's clock ahead of the node's) has its files collected; committing
/// then would leave a manifest whose files are gone while its checkpoints
/// are deleted from L1. Now that the manifest references them, `gc` keeps
/// them (it reads the generation's manifest again just before it deletes
/// each object, and keeps what the manifest names).
fn reupload_missing(job: &Job, m: &Manifest) -> Result<Option<String>> {
    let missing = |objects: &[crate::store::ObjectInfo]| -> Vec<&FileEntry> {
        m.files
            .iter()
            .filter(|f| {
                !objects
                    .iter()
                    .any(|o| o.name == f.name && o.bytes == f.bytes)
            })
            .collect()
    };
    let lost: Vec<FileEntry> = missing(&job.l2.list()?).into_iter().cloned().collect();
    if lost.is_empty() {
        return Ok(None);
    }
    let again = Manifest {
        files: lost.clone(),
        ..m.clone()
    };
    copy_generation(&job.l1_chain, job.l2.as_ref(), &again, &NoProgress, false)?;
    let still = missing(&job.l2.list()?);
    if let Some(f) = still.first() {
        return Err(Error::chain(
            job.l2.describe(),
            format!(
                "{} of generation {} went missing from L2 after its commit and could not be uploaded again; the pending checkpoints are kept",
                f.name, m.generation
            ),
        ));
    }
    Ok(Some(format!(
        "{} of generation {} went missing from L2 before its commit (a gc?): uploaded again from L1's copy",
        lost.iter()
            .map(|f| f.name.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        m.generation
    )))
}

fn empty_clist(chain: Option<&OpenChain>, clist: Option<&CList>) -> CList {
    let ps = clist
        .map(|c| c.page_size)
        .or_else(|| chain.map(|c| c.manifest().page_size))
        .unwrap_or(4096);
    CList {
        page_size: ps,
        first_seq: 0,
        last_seq: 0,
        full: false,
        entries: Vec::new(),
        drops: Vec::new(),
        stats: CoalesceStats::default(),
    }
}

/// Opens generation `g`'s chain from L1's copy; when that copy cannot be
/// opened, opens L2's and heals L1's from it. L2's is opened first: when
/// it cannot be either, the chain is broken in both places and its error
/// (a chain error, exit 3, for a missing or damaged file) is the push's,
/// not the failed copy's (helper-99: a file missing from both made the
/// push exit 1, as an I/O failure).
fn open_chain(job: &Job, rec: &Recovered, g: u64, report: &mut PushReport) -> Result<OpenChain> {
    match OpenChain::open(&job.l1_chain, &rec.l1_index, g) {
        Ok(c) => Ok(c),
        Err(e) => {
            let chain = OpenChain::open(job.l2.as_ref(), &rec.l2_index, g)?;
            heal_l1(job, rec, g, report, &e.report())?;
            Ok(chain)
        }
    }
}

/// Replaces L1's copy of generation `g`'s lineage with L2's (after L1's
/// turned out damaged), so later pushes and transient restores use L1 again.
fn heal_l1(job: &Job, rec: &Recovered, g: u64, report: &mut PushReport, why: &str) -> Result<()> {
    for m in rec.l2_index.lineage(g, job.l2.as_ref())? {
        copy_generation(job.l2.as_ref(), &job.l1_chain, &m, &NoProgress, true)?;
    }
    report.recovered.push(format!(
        "L1's copy of the chain was damaged ({why}); copied generation {g}'s lineage back from L2"
    ));
    Ok(())
}

/// The generation number after every one seen in either place, so the
/// number of a committed generation is never reused (an interrupted push's
/// number may be, once recovery has deleted its files).
fn next_generation(job: &Job, rec: &Recovered) -> Result<u64> {
    let mut max = rec.newest.as_ref().map(|m| m.generation).unwrap_or(0);
    for s in [&job.l1_chain as &dyn Store, job.l2.as_ref()] {
        for o in s.list()? {
            if let Some(g) = generation_of(&o.name) {
                max = max.max(g);
            }
        }
    }
    // Numbers only grow, so the last one ends the location: never a
    // wrap to 0, below every generation (helper-74: a chain whose newest
    // generation was 2^64 - 1 took a FULL push as generation 0, deleted
    // its checkpoint from L1, and every restore gave the older state).
    max.checked_add(1).ok_or_else(|| {
        Error::chain(
            job.l2.describe(),
            format!("generation numbers are exhausted (generation {max} exists): push to a new L2 location; the pending checkpoints are kept"),
        )
    })
}

pub use crate::format::manifest::generation_of;

fn remove_generation_files(store: &dyn Store, g: u64) -> Result<()> {
    for o in store.list()? {
        if generation_of(&o.name) == Some(g) {
            store.delete(&o.name)?;
        }
    }
    Ok(())
}

/// Brings L1 and L2 back to one consistent state after an interrupted push
/// (see the module doc). Call with the job lock held.
///
/// Unless `collective`, a chain whose newest generation is a rank's part of
/// an MPI job's job generation is refused before anything is changed: a
/// single-rank push (`push-l2`, `flush`) would complete or build on a
/// generation whose job generation may never have committed, and delete
/// the checkpoints the job's rollback needs.
pub fn recover(
    job: &Job,
    opts: &PushOptions,
    collective: bool,
    report: &mut PushReport,
) -> Result<Recovered> {
    if !collective {
        refuse_job_chain(job)?;
    }
    // A live producer (a job checkpointing itself through librex, or
    // `rexctl capture`) holds the producer lock and may be writing its next
    // IC file under a temporary name right now: its temporaries are not
    // stale, and it removes its own crashed predecessor's when it starts.
    // Held while the temporaries are removed, the lock keeps a producer
    // from starting in between.
    // (Any failure to take it counts as a live producer: the temporaries
    // stay. A producer starting meanwhile waits for it.)
    let producer = JobLock::for_recovery(&job.l1);
    let mut dirs = vec![job.l1_chain.root().to_path_buf()];
    if producer.is_some() {
        dirs.insert(0, job.l1.clone());
    }
    for dir in dirs {
        // In the L1 directory itself, a producer without the lock may be
        // writing a temporary named with its pid (FORMAT.md §2.7).
        let n = if dir == job.l1 {
            durable::remove_stale_temps_sparing_live(&dir)?
        } else {
            durable::remove_stale_temps(&dir)?
        };
        if n > 0 {
            report
                .recovered
                .push(format!("removed {n} temporary files in {}", dir.display()));
        }
    }
    // Partner copies are written by the producer (librex) or by `rexctl
    // replicate`, which runs between a job's checkpoints: with no
    // producer, a temporary there is a crashed replication's.
    if producer.is_some() {
        let n = crate::l2::partners::remove_stale_temps(&job.l1)?;
        if n > 0 {
            report.recovered.push(format!(
                "removed {n} temporary files in the partner directories of {}",
                job.l1.display()
            ));
        }
    }
    drop(producer);
    if let Some(root) = job.l2.local_root() {
        let n = durable::remove_stale_temps(&root)?;
        if n > 0 {
            report
                .recovered
                .push(format!("removed {n} temporary files in {}", root.display()));
        }
    }
    // Uploads an interrupted push left unfinished (their parts are billed).
    report.recovered.extend(job.l2.abort_stale_uploads(None)?);
    let mut l1_index = ChainIndex::load(&job.l1_chain)?;
    let mut l2_index = ChainIndex::load(job.l2.as_ref())?;
    let l2_newest = l2_index.newest().map(|m| m.generation);

    // One history in two places, or nothing is changed: L1's copy of the
    // chain and L2 holding different manifests under one number (the L1
    // directory of another job given with this L2, or the reverse) would
    // have recovery upload the other job's generations into L2, where a
    // restore takes them for this job's, and copy L2's over the other
    // job's L1 copy, its only copy of a generation its own L2 lacks
    // (`push-l2 --l1 OTHER/l1` uploaded the other job's generation).
    if let Some(differ) = two_histories(&l2_index, &l1_index) {
        return Err(Error::Chain {
            path: job.l1_chain.root().to_path_buf(),
            reason: format!(
                "{differ} differ between {} and L1's copy of the chain: two histories (the L1 directory of another job, or another job's L2?); nothing was changed",
                job.l2.describe(),
            ),
        });
    }

    // Nor an older state under a newer number, in either place or across
    // them: another job's older generation copied into L2, or an L2 holding
    // only another job's older chain, whose recovery copied it over this
    // job's L1 copy and pruned that (helper-87).
    if let Some((m, b)) = l2_index.out_of_order_with(&l1_index) {
        return Err(Error::Chain {
            path: job.l1_chain.root().to_path_buf(),
            reason: format!(
                "{} and L1's copy of the chain: {}; nothing was changed",
                job.l2.describe(),
                crate::l2::chain::out_of_order_text(m, b)
            ),
        });
    }

    // Generations L1 has and L2 lacks: a crash between the two manifests.
    let pending: Vec<Manifest> = l1_index
        .manifests
        .values()
        .filter(|m| Some(m.generation) > l2_newest)
        .cloned()
        .collect();
    // Nor another history altogether: L2 holds generations, and neither a
    // generation nor a file of L1's copy. A push writes a generation's data
    // files to L2 before either manifest, so L1's copy of this job's chain
    // shares at least those with L2 (its newest FULL generation whose L2
    // manifest was lost, helper-79) unless L2 lost them too; another job's
    // L1 copy, pruned to a FULL generation numbered above this job's newest,
    // shares nothing, and was uploaded as this job's newest state (and a
    // restore of this job gave the other's, exit 0).
    if !pending.is_empty() && !l2_index.manifests.is_empty() {
        let objects = job.l2.list()?;
        if !shares_with(&l1_index, &l2_index, job.l2.as_ref(), &objects)? {
            let gens = |i: &ChainIndex| {
                let g: Vec<String> = i.manifests.keys().map(u64::to_string).collect();
                g.join(", ")
            };
            return Err(Error::Chain {
                path: job.l1_chain.root().to_path_buf(),
                reason: format!(
                    "L1's copy of the chain (generations {}) shares no generation and no file with {} (generations {}): two histories (the L1 directory of another job, or another job's L2?); nothing was changed",
                    gens(&l1_index),
                    job.l2.describe(),
                    gens(&l2_index)
                ),
            });
        }
    }
    for m in pending {
        // Objects of that number already in L2 must be this generation's
        // (a crash between its uploads and its L2 manifest leaves exactly
        // its files): never overwrite another run's generation whose
        // manifest was lost.
        // Nor a generation of another history above L2's newest: an older
        // state under a newer number, or names L2 holds none of its files
        // under. (Not that L2's generations below it are in L1's copy too,
        // as `verify --repair` asks: retention prunes L1's copy to the
        // newest chain, and the newest FULL generation's L2 manifest, lost,
        // must still be put back from L1 (helper-79). Nor the job's name,
        // which a scheduler's job id changes at every resubmission.)
        if let Some(why) = foreign(job.l2.as_ref(), &l2_index, &m, None) {
            return Err(Error::Chain {
                path: job.l1_chain.root().to_path_buf(),
                reason: format!(
                    "L1's generation {} is not for {}: {why}; nothing was changed",
                    m.generation,
                    job.l2.describe()
                ),
            });
        }
        if let Some(why) = other_files_in_l2(job, &m)? {
            report.recovered.push(format!(
                "kept L1's generation {} out of {}: {why}",
                m.generation,
                job.l2.describe()
            ));
            continue;
        }
        let replace = l2_index.invalid.iter().any(|(g, _)| *g == m.generation);
        match upload_generation(job, &m, replace) {
            Ok(note) => {
                report.recovered.extend(note);
                report.recovered.push(format!(
                    "uploaded generation {} to {}{}",
                    m.generation,
                    job.l2.describe(),
                    if replace {
                        ", replacing its invalid manifest there"
                    } else {
                        ""
                    }
                ));
                l2_index.invalid.retain(|(g, _)| *g != m.generation);
                l2_index.manifests.insert(m.generation, m);
            }
            // Only a damaged L1 copy is dropped; an unreachable L2 is an
            // error to report (the next run tries again).
            Err(e @ Error::Corrupt { .. }) => {
                // L1's copy is damaged; its IC files are still in L1 (they are
                // deleted only after L2 has the generation): forget it.
                job.l1_chain.delete(&manifest_name(m.generation))?;
                remove_generation_files(&job.l1_chain, m.generation)?;
                l1_index.manifests.remove(&m.generation);
                report.recovered.push(format!(
                    "dropped generation {} from L1, its files are damaged ({e}); its batch will be pushed again",
                    m.generation
                ));
            }
            Err(e) => return Err(e),
        }
    }

    // L2's newest lineage must be whole (every manifest valid, every file
    // there with its recorded size): a lost or damaged older manifest is
    // healed from L1's copy, never built upon, and its files are kept.
    if let Some(n) = l2_index.newest().cloned() {
        heal_l2_lineage(job, &n, &mut l2_index, &l1_index, report)?;
    }

    // L2's newest chain must be in L1 too (L1 is where the next batch is
    // deduplicated and where a transient restore starts) — unless the L1
    // directory's pending checkpoints are refused against it (another run's
    // chain): then L1's copy of its own chain is all that is left of its
    // state, and neither copying back nor pruning may touch it.
    let newest = l2_index.newest().cloned();
    // One scan of the L1 directory against L2's newest generation serves
    // the steps below (whether L1 accepts that chain, whether a crashed
    // push's batch is still pending, which IC files are covered).
    let l1_scan = L1Dir::scan_after(&job.l1, newest.as_ref().map(Covered::from));
    let l1_accepts = l1_scan.is_ok();
    if let Some(n) = &newest
        && l1_accepts
        && let Ok(lineage) = l2_index.lineage(n.generation, job.l2.as_ref())
    {
        for m in lineage {
            let in_l1 = l1_index.get(m.generation) == Some(&m)
                && m.files.iter().all(|f| {
                    job.l1_chain
                        .open_local(&f.name)
                        .ok()
                        .and_then(|p| std::fs::metadata(p).ok())
                        .is_some_and(|md| md.len() == f.bytes)
                });
            if !in_l1 {
                match copy_generation(job.l2.as_ref(), &job.l1_chain, &m, &NoProgress, true) {
                    Ok(()) => {}
                    // L2's copy is damaged and L1 has none: the chain cannot
                    // be extended, but a batch from a FULL checkpoint on needs
                    // none of it (a librex restart that fell back past this
                    // generation wrote one; helper-76: every later push failed
                    // here and L2 never advanced). `prepare` decides, when it
                    // opens the chain; the generations after this one depend
                    // on it and are not copied either.
                    Err(e) if e.is_about_data() => {
                        report.recovered.push(format!(
                            "generation {} could not be copied from L2 back to L1: {}",
                            m.generation,
                            e.report()
                        ));
                        break;
                    }
                    Err(e) => return Err(e),
                }
                l1_index.manifests.insert(m.generation, m.clone());
                report.recovered.push(format!(
                    "copied generation {} from L2 back to L1",
                    m.generation
                ));
            }
        }
    }

    // Data files of generations that have no manifest at all, where only a
    // crash can have left them: above the store's newest valid manifest (a
    // crashed push; generation numbers only grow) or below its oldest chain
    // base (a crashed prune, which deletes manifests first). Files inside
    // the kept chains whose manifest is missing are a lost manifest, not a
    // crash: they are kept (healed above, or reported by `verify`), and so
    // are files whose manifest exists but is invalid.
    for (store, index, in_l2) in [
        (&job.l1_chain as &dyn Store, &l1_index, false),
        (job.l2.as_ref(), &l2_index, true),
    ] {
        let objects = store.list()?;
        let with_manifest: std::collections::BTreeSet<u64> = objects
            .iter()
            .filter_map(|o| crate::format::manifest::parse_manifest_name(&o.name))
            .collect();
        let newest_valid = index.newest();
        let oldest_base = index.manifests.values().map(|m| m.chain_base).min();
        // Above the newest generation, only while L1 still holds the batch
        // that such a push was pushing (IC files go only after a commit): a
        // committed generation whose manifest was lost everywhere looks the
        // same, but its batch is gone from L1, and its files are kept.
        let batch_pending = l1_scan.as_ref().is_ok_and(|l1| !l1.files.is_empty());
        // In L2, a generation L1's copy holds a manifest of is not this L1
        // directory's crash leftover (that would have been uploaded above):
        // its objects in L2 are another run's, whose manifest is missing.
        let crash_left = |g: u64| {
            if in_l2 && l1_index.get(g).is_some() {
                return false;
            }
            match (newest_valid, oldest_base) {
                (Some(n), Some(b)) => (g > n.generation && batch_pending) || g < b,
                _ => batch_pending,
            }
        };
        for o in &objects {
            if let Some(g) = generation_of(&o.name)
                && !with_manifest.contains(&g)
                && crash_left(g)
            {
                store.delete(&o.name)?;
                report.recovered.push(format!(
                    "deleted {} (no manifest: left by an interrupted push or prune) in {}",
                    o.name,
                    store.describe()
                ));
            }
        }
    }

    // IC files the newest generation already covers.
    if newest.is_some()
        && let Ok(l1) = &l1_scan
    {
        for m in &l1.orphans {
            durable::remove_file(&m.path)?;
            report.deleted_ics += 1;
        }
    }
    // Finish a prune a crash interrupted (a no-op otherwise): the newest
    // chain is whole in both places at this point.
    if let Some(n) = &newest
        && l1_accepts
        && l2_index.lineage(n.generation, job.l2.as_ref()).is_ok()
    {
        let mut pruned = PushReport::default();
        prune(job, opts, &mut pruned)?;
        for (level, gens) in [("L1", &pruned.pruned_l1), ("L2", &pruned.pruned_l2)] {
            if !gens.is_empty() {
                report.recovered.push(format!(
                    "finished pruning generations {gens:?} from {level}"
                ));
            }
        }
        l1_index = ChainIndex::load(&job.l1_chain)?;
        l2_index = ChainIndex::load(job.l2.as_ref())?;
    }
    Ok(Recovered {
        newest,
        l2_index,
        l1_index,
    })
}

/// Why L2 holds other files under generation `m`'s names than `m`'s own
/// (another size or CRC), if it does.
fn other_files_in_l2(job: &Job, m: &Manifest) -> Result<Option<String>> {
    let objects = job.l2.list()?;
    for f in &m.files {
        let Some(o) = objects.iter().find(|o| o.name == f.name) else {
            continue;
        };
        if o.bytes != f.bytes {
            return Ok(Some(format!(
                "L2 holds another {} ({} bytes, L1's copy has {}): the files of another generation of that number, whose manifest is missing",
                f.name, o.bytes, f.bytes
            )));
        }
        let local = job.l2.open_local(&f.name)?;
        let (_, crc) = crate::store::file_crc(&local)?;
        if crc != f.crc32 {
            return Ok(Some(format!(
                "L2 holds another {} (CRC {crc:08x}, L1's copy has {:08x}): the files of another generation of that number, whose manifest is missing",
                f.name, f.crc32
            )));
        }
        // A P-Table's CRC-32 depends on its length alone (see
        // `format::manifest`): its XXH3 tells two apart.
        if let (Some(got), Some(want)) = (f.xxh3_mismatch(&local)?, f.xxh3) {
            return Ok(Some(format!(
                "L2 holds another {} (XXH3 {got:016x}, L1's copy has {want:016x}): the files of another generation of that number, whose manifest is missing",
                f.name
            )));
        }
    }
    Ok(None)
}

/// Why file `f` of generation `m` in `store` is not what the manifest
/// records (missing, unreadable, another size, CRC or XXH3); `None` when
/// it is; an error when the server fails to send it.
pub(crate) fn unsound(
    store: &dyn Store,
    m: &Manifest,
    f: &crate::format::manifest::FileEntry,
) -> Result<Option<String>> {
    let r = store
        .open_local(&f.name)
        .and_then(|p| file_unsound(&p, m, f, "(damaged)"));
    match r {
        Ok(None) => Ok(None),
        Err(e) if e.is_not_found() => Ok(Some(format!(
            "{} is missing from {}",
            f.name,
            store.describe()
        ))),
        // An object the server fails to send (an S3 error after every
        // retry, access refused) is not known to be damaged: said as it is,
        // and nothing is written over it (helper-83: `verify --repair` put
        // L1's copy over intact objects a flaky server failed to send). A
        // local file that cannot be read is damaged: a new copy heals it.
        Err(e) if e.is_remote_failure() => Err(e),
        Ok(Some(e)) | Err(e) => Ok(Some(store.public_text(&e.report()))),
    }
}

/// Why generation `m` of the other place must not be written into
/// `to` (whose manifests are `to_index`), if it must not (helper-77:
/// repair given another job's L1 copied that job's FULL generation in as
/// the newest, and a restore gave its state with exit 0): its checkpoint
/// is older than the newest one `to` holds below it (an
/// older state under a newer number), or `to` holds files of its names of
/// which none is its (another generation's intact files, under a lost or
/// invalid manifest, which it would overwrite). With `from_index` (the
/// other place's manifests, when `m` is missing from `to` altogether), a
/// generation `to` holds below `m` must be there too, the same: a push
/// interrupted between its two manifests, or a manifest lost, leaves the
/// generations before it in both places, while another job's L1 holds
/// none of this job's; the checks above then compare with the newest such.
/// (`to`'s own generations the other place lacks are an interrupted push's,
/// helper-76.)
pub(crate) fn foreign(
    to: &dyn Store,
    to_index: &ChainIndex,
    m: &Manifest,
    from_index: Option<&ChainIndex>,
) -> Option<String> {
    let mut below = to_index
        .manifests
        .range(..m.generation)
        .filter(|(g, b)| from_index.is_none_or(|f| f.get(**g) == Some(*b)))
        .map(|(_, b)| b);
    let newest = below.next_back();
    if newest.is_none()
        && from_index.is_some()
        && to_index.manifests.range(..m.generation).next().is_some()
    {
        return Some(
            "none of the generations before it there is in the other place (the L1 or L2 of another job?)"
                .into(),
        );
    }
    if let Some(b) = newest
        && m.time_ns < b.time_ns
    {
        return Some(format!(
            "its checkpoint (seq {}) is older than generation {}'s there (seq {}): an older state under a newer number",
            m.last_seq, b.generation, b.last_seq
        ));
    }
    let held: Vec<bool> = m
        .files
        .iter()
        .filter(|f| to.open_local(&f.name).is_ok_and(|p| p.exists()))
        .map(|f| matches!(unsound(to, m, f), Ok(None)))
        .collect();
    if !held.is_empty() && !held.contains(&true) {
        return Some(
            "the files of its names there are none of its own (another generation's, under a lost or invalid manifest)"
                .into(),
        );
    }
    None
}

/// Whether L1's copy of the chain shares a generation (an equal manifest)
/// or a data file with L2 (`store`, listed as `objects`): a push writes a
/// generation's data files to L2 before either manifest, so this job's
/// copy shares at least those, while another job's shares nothing (the
/// recovery's test, §3.6.3 step 3, and a restore's). A file is shared when
/// L2's object of its name is the one its manifest records (size, CRC-32,
/// XXH3), not merely of its name: every job names generation N's files
/// alike, and another job's L1 copy was restored as this job's newest
/// state, exit 0, beside the files this job's interrupted push of that
/// number left (helper-90). Files of the right size are read, smallest
/// first, until one is this generation's; a P-Table or Xref file counts
/// only with the XXH3 newer manifests record.
pub(crate) fn shares_with(
    l1: &ChainIndex,
    l2: &ChainIndex,
    store: &dyn Store,
    objects: &[crate::store::ObjectInfo],
) -> Result<bool> {
    if l1
        .manifests
        .values()
        .any(|m| l2.get(m.generation) == Some(m))
    {
        return Ok(true);
    }
    let mut named: Vec<(&Manifest, &crate::format::manifest::FileEntry)> = l1
        .manifests
        .values()
        .flat_map(|m| m.files.iter().map(move |f| (m, f)))
        .filter(|(_, f)| {
            // A P-Table's or Xref file's CRC-32 follows from its length
            // alone: without its XXH3 (older manifests) it tells nothing.
            (f.xxh3.is_some() || matches!(f.role, Role::Rps | Role::Pf))
                && objects
                    .iter()
                    .any(|o| o.name == f.name && o.bytes == f.bytes)
        })
        .collect();
    named.sort_by_key(|(_, f)| f.bytes);
    for (m, f) in named {
        if unsound(store, m, f)?.is_none() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The generations under which the two places `a` and `b` hold different
/// valid manifests, as text ("generation 2", "generations 1, 2"), if any:
/// two histories (another job's L1 or L2, or another copy of the job),
/// between which nothing may be copied.
pub(crate) fn two_histories(a: &ChainIndex, b: &ChainIndex) -> Option<String> {
    let differ: Vec<String> = a
        .manifests
        .iter()
        .filter(|(g, m)| b.get(**g).is_some_and(|o| o != *m))
        .map(|(g, _)| g.to_string())
        .collect();
    (!differ.is_empty()).then(|| {
        format!(
            "generation{} {}",
            if differ.len() == 1 { "" } else { "s" },
            differ.join(", ")
        )
    })
}

/// Why generation `m` is not whole in `store`: its manifest is not the
/// valid `m` there, or a file is missing or has another size (`objects` is
/// the store's listing). `None` when whole.
fn not_whole(
    index: &ChainIndex,
    objects: &[crate::store::ObjectInfo],
    m: &Manifest,
) -> Option<String> {
    match index.get(m.generation) {
        None => {
            let why = index
                .invalid
                .iter()
                .find(|(g, _)| *g == m.generation)
                .map_or("its manifest is missing".to_string(), |(_, e)| {
                    format!("its manifest is invalid ({})", e.report())
                });
            return Some(why);
        }
        Some(x) if x != m => return Some("its manifest differs from L1's".into()),
        Some(_) => {}
    }
    m.files
        .iter()
        .find_map(|f| match objects.iter().find(|o| o.name == f.name) {
            None => Some(format!("{} is missing", f.name)),
            Some(o) if o.bytes != f.bytes => Some(format!(
                "{} has {} bytes, its manifest says {}",
                f.name, o.bytes, f.bytes
            )),
            Some(_) => None,
        })
}

/// Checks generation `g`'s lineage in `store` end to end, from manifests
/// and object sizes (not a re-read of the data): every manifest valid and
/// linked to its parent, every file present with its recorded size. The
/// check a push makes before it commits a Δ on that lineage.
pub fn check_lineage(store: &dyn Store, g: u64) -> Result<()> {
    let index = ChainIndex::load(store)?;
    let objects = store.list()?;
    for m in index.lineage(g, store)? {
        if let Some(why) = not_whole(&index, &objects, &m) {
            return Err(Error::chain(
                store.describe(),
                format!(
                    "generation {} of the chain is not whole: {why}",
                    m.generation
                ),
            ));
        }
    }
    Ok(())
}

/// Makes L2's newest lineage whole again from L1's copy where it is not: a
/// manifest lost or damaged in L2, or a file missing or cut short, while L1
/// holds the same generation whole. A valid L2 manifest that differs from
/// L1's is never replaced (that is another chain's, not damage). What
/// cannot be healed is left for the push's lineage check to refuse.
fn heal_l2_lineage(
    job: &Job,
    newest: &Manifest,
    l2_index: &mut ChainIndex,
    l1_index: &ChainIndex,
    report: &mut PushReport,
) -> Result<()> {
    if l1_index.get(newest.generation) != Some(newest) {
        return Ok(());
    }
    let Ok(lineage) = l1_index.lineage(newest.generation, &job.l1_chain) else {
        return Ok(());
    };
    let l2_objects = job.l2.list()?;
    let l1_objects = job.l1_chain.list()?;
    for m in lineage {
        let Some(why) = not_whole(l2_index, &l2_objects, &m) else {
            continue;
        };
        if l2_index.get(m.generation).is_some_and(|x| x != &m) {
            continue;
        }
        if not_whole(l1_index, &l1_objects, &m).is_some() {
            continue;
        }
        let replace = l2_objects
            .iter()
            .any(|o| o.name == manifest_name(m.generation));
        let note = upload_generation(job, &m, replace)?;
        report.recovered.extend(note);
        report.recovered.push(format!(
            "healed {}: generation {} was not whole there ({why}); uploaded L1's copy",
            job.l2.describe(),
            m.generation
        ));
        l2_index.invalid.retain(|(g, _)| *g != m.generation);
        l2_index.manifests.insert(m.generation, m);
    }
    Ok(())
}

/// Copies generation `m`'s data files from `from` to `to`, checking that
/// what arrived has the size and CRC its manifest records, then (with
/// `manifest`) publishes the manifest there: the one copy routine behind
/// uploads, recovery's copy back to L1 and healing L1 from L2.
pub(crate) fn copy_generation(
    from: &dyn Store,
    to: &dyn Store,
    m: &Manifest,
    progress: &dyn Progress,
    manifest: bool,
) -> Result<()> {
    for f in &m.files {
        copy_file(from, to, m, f, progress)?;
    }
    if manifest {
        to.put_bytes(&manifest_name(m.generation), &manifest_bytes(from, m)?)?;
    }
    Ok(())
}

/// Copies data file `f` of generation `m` from `from` to `to` (replacing
/// whatever `to` holds under its name), after checking that the source has
/// the size, CRC and XXH3 the manifest records, and checks what arrived.
pub(crate) fn copy_file(
    from: &dyn Store,
    to: &dyn Store,
    m: &Manifest,
    f: &FileEntry,
    progress: &dyn Progress,
) -> Result<()> {
    let src = from.open_local(&f.name)?;
    // The source is checked before anything is sent: a damaged copy must
    // never replace a missing file under a committed manifest.
    if let Some(e) = file_unsound(&src, m, f, &format!("(not copied to {})", to.describe()))? {
        return Err(e);
    }
    let sent = to.put_file(&f.name, &src, progress)?;
    if let Some(e) = unsound_error(
        &src,
        m,
        f,
        (sent.0, Some(sent.1)),
        &format!("reached {}", to.describe()),
    ) {
        return Err(e);
    }
    Ok(())
}

/// Why the local file `path` is not data file `f` of generation `m` (its
/// size, whole-file CRC-32, or XXH3 where the manifest records one, the
/// latter because a P-Table's CRC-32 follows from its length, see
/// `format::manifest`); `None` when it is. A file of another length is not
/// read. `what` ends the message ("(not copied to ...)").
pub(crate) fn file_unsound(
    path: &Path,
    m: &Manifest,
    f: &FileEntry,
    what: &str,
) -> Result<Option<Error>> {
    let got = crate::store::file_crc_if_len(path, f.bytes)?;
    if let Some(e) = unsound_error(path, m, f, got, what) {
        return Ok(Some(e));
    }
    if let Some(got) = f.xxh3_mismatch(path)? {
        return Ok(Some(Error::corrupt(
            path,
            0,
            "file",
            format!(
                "XXH3 {got:016x}, the manifest of generation {} says {:016x}: not this generation's file",
                m.generation,
                f.xxh3.unwrap_or_default()
            ),
        )));
    }
    Ok(None)
}

/// The error of a file of (bytes, CRC) `got` that is not `f`'s size and
/// CRC (`None` for the CRC: not read, another length).
fn unsound_error(
    path: &Path,
    m: &Manifest,
    f: &FileEntry,
    (bytes, crc): (u64, Option<u32>),
    what: &str,
) -> Option<Error> {
    if (bytes, crc) == (f.bytes, Some(f.crc32)) {
        return None;
    }
    let got = match crc {
        Some(crc) => format!("{bytes} bytes with CRC {crc:08x}"),
        None => format!("{bytes} bytes"),
    };
    Some(Error::corrupt(
        path,
        0,
        "file",
        format!(
            "{got} {what}, the manifest of generation {} says {} bytes with CRC {:08x}",
            m.generation, f.bytes, f.crc32
        ),
    ))
}

/// The bytes of generation `m`'s manifest in `from`, checked to be `m`, so
/// that a copy is byte for byte the original (re-encoding could differ in
/// the last digit of a float).
pub(crate) fn manifest_bytes(from: &dyn Store, m: &Manifest) -> Result<Vec<u8>> {
    let name = manifest_name(m.generation);
    let bytes = from.read(&name)?;
    let path = std::path::Path::new(&from.describe()).join(&name);
    if Manifest::decode(&path, &bytes)? != *m {
        return Err(Error::chain(
            from.describe(),
            format!("{name} changed while it was being copied"),
        ));
    }
    Ok(bytes)
}

/// Uploads generation `m` from L1 to L2, data files first. With
/// `replace_invalid`, L2 holds an invalid manifest of that generation: it is
/// no generation, and gives way to L1's valid copy (deleted first, because
/// stores never overwrite a manifest). Returns the note of
/// [`reupload_missing`] when a file had to be sent again after the commit.
pub(crate) fn upload_generation(
    job: &Job,
    m: &Manifest,
    replace_invalid: bool,
) -> Result<Option<String>> {
    copy_generation(&job.l1_chain, job.l2.as_ref(), m, job.progress(), false)?;
    let bytes = manifest_bytes(&job.l1_chain, m)?;
    if replace_invalid {
        job.l2.replace_bytes(&manifest_name(m.generation), &bytes)?;
    } else {
        job.l2.put_bytes(&manifest_name(m.generation), &bytes)?;
    }
    check_landed(job.l2.as_ref(), &manifest_name(m.generation), &bytes)?;
    // As after a push's own commit: a gc may have taken a file between its
    // upload and this manifest.
    reupload_missing(job, m)
}

/// Deletes chains beyond the retention counts, oldest first, manifests
/// before data files. Only runs after a complete coalescence is durable in
/// both places, so the newest chain is always whole.
fn prune(job: &Job, opts: &PushOptions, report: &mut PushReport) -> Result<()> {
    for (store, keep, pruned) in [
        (
            &job.l1_chain as &dyn Store,
            opts.keep_chains_l1.max(1),
            &mut report.pruned_l1,
        ),
        (
            job.l2.as_ref(),
            opts.keep_chains_l2.max(1),
            &mut report.pruned_l2,
        ),
    ] {
        let index = ChainIndex::load(store)?;
        let mut bases: Vec<u64> = index.manifests.values().map(|m| m.chain_base).collect();
        bases.sort_unstable();
        bases.dedup();
        if bases.len() <= keep {
            continue;
        }
        let cutoff = bases[bases.len() - keep];
        let doomed: Vec<u64> = index
            .manifests
            .keys()
            .copied()
            .filter(|&g| g < cutoff)
            .collect();
        // Newest first: a crash part way leaves each old chain a shorter
        // but whole prefix (every manifest still has its parent), which the
        // next recovery finishes pruning.
        for &g in doomed.iter().rev() {
            store.delete(&manifest_name(g))?;
        }
        for o in store.list()? {
            if let Some(g) = generation_of(&o.name)
                && g < cutoff
            {
                store.delete(&o.name)?;
            }
        }
        pruned.extend(doomed);
    }
    Ok(())
}

/// The L1 directory of a job must exist; used by commands that create it
/// on first use.
pub fn ensure_dir(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path).ctx(path, "create directory")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(seq, time, began)` as one rank's states (`began` 0: the run of
    /// its generation; equal to the time: the checkpoint begins its run).
    fn rank(v: &[(u64, u64, u64)]) -> Vec<Stand> {
        v.iter()
            .map(|&(seq, time_ns, began)| Stand {
                seq,
                time_ns,
                began: (began != 0).then_some(began),
                first: began != 0 && began == time_ns,
                renumbered: false,
            })
            .collect()
    }

    /// The cut is the newest seq every rank stands at, not the lowest of
    /// the ranks' newest seqs (helper-105: a rank with seq 2 and a FULL
    /// checkpoint of seq 4, the others 2 and 3: the cut 3 left it at 2).
    #[test]
    fn the_cut_is_a_seq_every_rank_stands_at() {
        let behind = rank(&[(1, 10, 0)]);
        let ahead = rank(&[(1, 10, 0), (2, 20, 0), (3, 30, 0)]);
        let gap = rank(&[(1, 10, 0), (2, 20, 0), (4, 40, 0)]);
        let cut = Cut::agree(vec![ahead.clone(), behind.clone(), ahead.clone()]);
        assert_eq!(cut.at, Some(1));
        assert_eq!(
            cut.why_not(2),
            "rank 1 has no checkpoint of seq 2 (its newest is seq 1)"
        );
        assert_eq!(Cut::agree(vec![ahead.clone(), gap.clone()]).at, Some(2));
        assert_eq!(Cut::agree(vec![gap.clone(), ahead.clone()]).at, Some(2));
        assert_eq!(Cut::agree(vec![ahead.clone(), ahead.clone()]).at, Some(3));
        assert_eq!(Cut::agree(vec![rank(&[(5, 1, 0)]), behind]).at, None);
        assert_eq!(Cut::agree(vec![ahead.clone(), Vec::new()]).at, None);
        assert_eq!(Cut::agree(Vec::new()).at, None);
    }

    /// A rank's checkpoint taken before another rank's new run of the same
    /// seq began is of another life of the job, whatever its number
    /// (helper-105: a job restarted by hand counted from 0 again, a rank
    /// whose node was lost stood at the old run's seq 4, and the job
    /// generation mixed the two runs). New runs begun on every rank at
    /// about the same time are one life, whichever began first.
    #[test]
    fn a_cut_never_mixes_two_lives_of_the_job() {
        let old = rank(&[(4, 100, 0)]);
        let new = rank(&[(0, 500, 500), (1, 600, 500), (4, 900, 500)]);
        let cut = Cut::agree(vec![new.clone(), old.clone()]);
        assert_eq!(cut.at, None);
        assert!(
            cut.why_not(4)
                .contains("rank 1's checkpoint of seq 4 was taken before rank 0's run"),
            "{}",
            cut.why_not(4)
        );
        // Taken after it: the same life (a rank that did not restart).
        let later = rank(&[(4, 950, 0)]);
        assert_eq!(Cut::agree(vec![new.clone(), later]).at, Some(4));
        // Both restarted, a little apart.
        let other = rank(&[(0, 490, 490), (1, 610, 490), (4, 905, 490)]);
        assert_eq!(Cut::agree(vec![new.clone(), other]).at, Some(4));
        // A job's first push, one rank's checkpoints of an older life
        // (helper-106: every state there began a run, and none was
        // compared), whose seq 0 came before the other's run began.
        let older = rank(&[(0, 100, 100), (1, 110, 100), (4, 140, 100)]);
        assert_eq!(Cut::agree(vec![older, new.clone()]).at, None);
        // A job's first push at its first checkpoint: runs begun on every
        // rank at about the same time.
        let first = |t: u64| rank(&[(0, t, t)]);
        assert_eq!(
            Cut::agree(vec![first(500), first(490), first(505)]).at,
            Some(0)
        );
        // A FULL checkpoint of a new chain at seq 3 on one rank, taken a
        // little after the others' seq 3 (helper-106: refused as another
        // life, and held back until seq 4).
        let on = rank(&[(2, 900, 0), (3, 1000, 0), (4, 1100, 0)]);
        let full = rank(&[(2, 901, 0), (3, 1005, 1005), (4, 1102, 1005)]);
        assert_eq!(Cut::agree(vec![on, full.clone()]).at, Some(4));
        let until_3 = rank(&[(2, 900, 0), (3, 1000, 0)]);
        assert_eq!(Cut::agree(vec![until_3, full]).at, Some(3));
        // A run numbered again from below the rank's own generation (the
        // job restarted by hand from seq 0), beside a rank still at its
        // generation of seq 0 (helper-107: no later checkpoint to tell).
        let mut again = first(500);
        again[0].renumbered = true;
        let cut = Cut::agree(vec![rank(&[(0, 100, 0)]), again.clone()]);
        assert_eq!(cut.at, None);
        assert!(
            cut.why_not(0).contains("numbers its checkpoints again"),
            "{}",
            cut.why_not(0)
        );
        // Every rank numbered again (a librex restart past a fallback).
        assert_eq!(Cut::agree(vec![again.clone(), again]).at, Some(0));
    }

    /// With no common seq, the reason names the two lives when the ranks
    /// share a seq whose states are of different lives (helper-109: a lost
    /// node at the old life's seq 6, the others numbered again from 0 to
    /// 3), and the smallest newest seq's gap otherwise.
    #[test]
    fn no_common_seq_names_two_lives_before_a_gap() {
        let old = rank(&[(0, 100, 0), (1, 110, 0), (2, 120, 0), (6, 160, 0)]);
        let new = rank(&[(0, 500, 500), (1, 600, 500), (2, 700, 500), (3, 800, 500)]);
        let cut = Cut::agree(vec![new.clone(), new.clone(), old]);
        assert_eq!(cut.at, None);
        let why = cut.why_none();
        assert!(
            why.contains("rank 2's checkpoint of seq 2 was taken before rank 1's run"),
            "{why}"
        );
        let gap = Cut::agree(vec![rank(&[(5, 1, 0)]), rank(&[(1, 10, 0)])]);
        assert_eq!(gap.why_none(), "rank 0 has no checkpoint of seq 1");
        assert_eq!(Cut::agree(Vec::new()).why_none(), "");
    }

    /// A rank's missing L1 directory is never made: a rank of the job is
    /// told how to recover it, a rank beyond the job's is told the job's
    /// number of ranks; both are configuration errors.
    #[test]
    fn a_missing_rank_l1_directory_is_refused_and_explained() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("l1");
        let config = crate::error::exit::CONFIG;
        assert_eq!(rank_l1(&root, 0, Some(4)).unwrap_err().exit_code(), config);
        std::fs::create_dir(&root).unwrap();
        let e = rank_l1(&root, 3, Some(4)).unwrap_err();
        assert_eq!(e.exit_code(), config, "{e}");
        assert!(e.to_string().contains("lost its node"), "{e}");
        let e = rank_l1(&root, 4, Some(4)).unwrap_err();
        assert!(e.to_string().contains("the job has 4 ranks"), "{e}");
        let e = rank_l1(&root, 3, None).unwrap_err();
        assert!(e.to_string().contains("/3: missing"), "{e}");
        assert!(e.to_string().contains("as many processes"), "{e}");
        assert_eq!(e.exit_code(), config, "{e}");
        assert!(!root.join("3").exists());
        std::fs::create_dir(root.join("3")).unwrap();
        assert_eq!(rank_l1(&root, 3, Some(4)).unwrap(), root.join("3"));
        std::fs::write(root.join("2"), b"").unwrap();
        let e = rank_l1(&root, 2, Some(4)).unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
    }

    /// A state goes through a collective exchange unchanged.
    #[test]
    fn a_stand_round_trips() {
        for s in [
            Stand::default(),
            Stand {
                seq: 7,
                time_ns: 1 << 60,
                began: Some(3),
                first: true,
                renumbered: true,
            },
            Stand {
                seq: u64::MAX - 1,
                time_ns: 0,
                began: Some(0),
                first: false,
                renumbered: false,
            },
        ] {
            let mut b = Vec::new();
            s.encode_into(&mut b);
            assert_eq!(b.len(), Stand::LEN);
            assert_eq!(Stand::decode(&b), Some(s));
        }
        assert_eq!(Stand::decode(&[0; Stand::LEN - 1]), None);
    }

    /// The number after 2^64 - 1 is no number: refused, never a wrap to 0
    /// below every generation (helper-74).
    #[test]
    fn generation_numbers_never_wrap() {
        let d = tempfile::tempdir().unwrap();
        let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
        std::fs::create_dir_all(&l1).unwrap();
        std::fs::create_dir_all(&l2).unwrap();
        let job = Job::open(&l1, Box::new(DirStore::open(&l2).unwrap())).unwrap();
        let rec = Recovered {
            newest: None,
            l2_index: ChainIndex::default(),
            l1_index: ChainIndex::default(),
        };
        std::fs::write(l2.join(format!("g{:08}.rps", u64::MAX - 1)), b"x").unwrap();
        assert_eq!(next_generation(&job, &rec).unwrap(), u64::MAX);
        std::fs::write(l2.join(format!("g{:08}.rps", u64::MAX)), b"x").unwrap();
        let e = next_generation(&job, &rec).unwrap_err();
        assert!(e.report().contains("exhausted"), "{}", e.report());
        assert_eq!(e.exit_code(), crate::error::exit::DATA);
    }
}
