//! The collective push of an MPI job: cross-rank deduplication of whole
//! pages (Nicolae, IPDPS'13) and job generations (docs/FORMAT.md §3.9).
//!
//! Every rank pushes its own batch into its own chain, as a single-rank
//! push does ([`crate::l2::push::push_with`]), with four collective steps
//! (the [`Collective`] hooks, each one a few MPI collectives over the
//! job's communicator, [`Comm`]):
//!
//! 0. **Cut**: the ranks exchange the states each can stand at (its
//!    newest generation's seq and its pending checkpoints'), and none
//!    pushes past the newest seq that is one state of the job on every
//!    rank ([`Cut`]): a job generation stands at one seq on every rank,
//!    which is what a collective restore takes the job back to. A rank
//!    behind lost its node since the last push (it has nothing pending),
//!    or is still writing the checkpoint the others finished; the others
//!    keep their newer checkpoints in L1 for a later push.
//! 1. **Agree**: the ranks exchange what they propose; if one needs a
//!    complete coalescence, all take one (their chains stay aligned, so a
//!    reference never outlives the generation it names), and if none has
//!    work, nobody pushes.
//! 2. **Choose the shared pages**: every rank hashes the pages it is about
//!    to write (XXH3-128, zero pages left out: they cost nothing after the
//!    entropy stage) and contributes its distinct hashes to a table of at
//!    most `T` entries; a reduction with a merge operator ([`HashTable::merge`]:
//!    counts added, the `T` most frequent kept) builds, at rank 0, the most
//!    frequent hashes across ranks, which rank 0 broadcasts (the operator
//!    truncates, so it is not associative: a reduction plus a broadcast
//!    gives every rank the very same table, which an all-reduce does not
//!    promise). An all-gather of one bit per entry tells every rank who
//!    holds each hash; each entry with two holders or more gets an owner,
//!    the holder with the least to write so far (its own unique pages
//!    first), identically on every rank. Then the owners send the page's
//!    bytes to the other holders, in rounds of bounded size, and a holder
//!    references the owner's page only where the bytes are equal: a hash
//!    match is never trusted alone.
//! 3. **Commit**: once every rank's generation is durable in L1 and L2, the
//!    ranks all-gather their members and rank 0 writes the job manifest
//!    (the commit point of the job generation); each rank keeps a copy of
//!    it in L1 ([`crate::l2::jobgen::keep_job_manifest_copy`]: its word
//!    that the job generation committed, should L2 lose the job manifest,
//!    which the next push or restart puts back from it); only then does
//!    each rank delete its IC files. If any rank failed at any step, every rank
//!    returns an error ([`crate::error::PeerFailure`]) and nobody commits;
//!    the next collective push rolls the uncommitted generations back
//!    ([`crate::l2::jobgen::rollback`]) and pushes the same checkpoints again.
//!
//! The transport is the [`Comm`] trait: MPI in `crate::l2::mpi` (cargo
//! feature `mpi`), so that everything here builds and is read without MPI.

use std::collections::HashMap;
use std::time::Instant;

use serde::Serialize;

use crate::error::{Error, Failure, PeerFailure, Result};
use crate::format::job_manifest::{
    FORMAT as JOB_FORMAT, JobManifest, JobMember, job_manifest_name,
};
use crate::format::manifest::{Manifest, manifest_name};
use crate::format::xref::Xref;
use crate::l2::dedup::PlanPages;
use crate::l2::jobgen::{
    JobIndex, RollbackPlan, heal_job_manifest, keep_job_manifest_copy, rollback, rollback_plan,
};
use crate::l2::push::{
    Agreed, Collective, Cut, Job, Local, Proposal, PushOptions, PushReport, Stand, begin_writing,
    push_with,
};
use crate::store::{JobRoot, Store};

/// The transport of a collective push: the job's communicator.
pub trait Comm {
    /// This rank.
    fn rank(&self) -> u32;
    /// Ranks in the communicator.
    fn size(&self) -> u32;
    /// Every rank's `mine`, in rank order.
    fn all_gather(&self, mine: &[u8]) -> Vec<Vec<u8>>;
    /// Sends `send[r]` to rank `r`; returns what each rank sent this one,
    /// in rank order.
    fn all_to_all(&self, send: &[Vec<u8>]) -> Vec<Vec<u8>>;
    /// The merge ([`HashTable::merge`]) of every rank's `table` (all of the
    /// same capacity), the same on every rank.
    fn merge_all(&self, table: &HashTable) -> HashTable;
}

/// Bytes of one encoded [`HashEntry`].
pub const ENTRY_LEN: usize = 24;
/// Bytes of the header of an encoded [`HashTable`].
pub const TABLE_HEADER: usize = 8;

/// A page hash and how many ranks hold it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashEntry {
    /// XXH3-128 of the page.
    pub hash: u128,
    /// Ranks holding it (as far as the reduction could count).
    pub count: u32,
}

/// The table of the most frequent page hashes, ascending by hash, at most
/// `cap` entries. Encoded with a fixed size (a header and `cap` entries),
/// as one element of an MPI datatype, so the reduction never splits it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HashTable {
    /// The most entries kept (`T`).
    pub cap: usize,
    /// The entries, ascending by hash.
    pub entries: Vec<HashEntry>,
}

impl HashTable {
    /// Bytes of a table of capacity `cap`, encoded.
    pub fn encoded_len(cap: usize) -> usize {
        TABLE_HEADER + cap * ENTRY_LEN
    }

    /// Encodes into `out` ([`encoded_len`](Self::encoded_len) bytes).
    pub fn encode_into(&self, out: &mut [u8]) {
        out.fill(0);
        out[0..4].copy_from_slice(&(self.entries.len() as u32).to_le_bytes());
        out[4..8].copy_from_slice(&(self.cap as u32).to_le_bytes());
        for (e, b) in self
            .entries
            .iter()
            .zip(out[TABLE_HEADER..].chunks_exact_mut(ENTRY_LEN))
        {
            b[0..16].copy_from_slice(&e.hash.to_le_bytes());
            b[16..20].copy_from_slice(&e.count.to_le_bytes());
        }
    }

    /// Encodes into a new buffer.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; Self::encoded_len(self.cap)];
        self.encode_into(&mut b);
        b
    }

    /// Decodes `b`, bounding the entry count by its length.
    pub fn decode(b: &[u8]) -> Option<HashTable> {
        let n = u32::from_le_bytes(b.get(0..4)?.try_into().ok()?) as usize;
        let cap = u32::from_le_bytes(b.get(4..8)?.try_into().ok()?) as usize;
        if n > cap || b.len() < Self::encoded_len(cap) {
            return None;
        }
        let entries = b[TABLE_HEADER..TABLE_HEADER + n * ENTRY_LEN]
            .chunks_exact(ENTRY_LEN)
            .map(|e| HashEntry {
                hash: u128::from_le_bytes(e[0..16].try_into().expect("16")),
                count: u32::from_le_bytes(e[16..20].try_into().expect("4")),
            })
            .collect();
        Some(HashTable { cap, entries })
    }

    /// The merge operator: counts of equal hashes added, then the `cap`
    /// entries of highest count kept (ties: the lower hash), ascending by
    /// hash. Commutative; associative as long as nothing is cut.
    pub fn merge(&self, other: &HashTable) -> HashTable {
        let (a, b) = (&self.entries, &other.entries);
        let mut out = Vec::with_capacity(a.len() + b.len());
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            let take_a = j >= b.len() || (i < a.len() && a[i].hash <= b[j].hash);
            let take_b = i >= a.len() || (j < b.len() && b[j].hash <= a[i].hash);
            let e = match (take_a, take_b) {
                (true, true) => {
                    let e = HashEntry {
                        hash: a[i].hash,
                        count: a[i].count.saturating_add(b[j].count),
                    };
                    i += 1;
                    j += 1;
                    e
                }
                (true, false) => {
                    i += 1;
                    a[i - 1]
                }
                _ => {
                    j += 1;
                    b[j - 1]
                }
            };
            out.push(e);
        }
        let cap = self.cap.max(other.cap);
        if out.len() > cap {
            out.sort_unstable_by(|x, y| y.count.cmp(&x.count).then(x.hash.cmp(&y.hash)));
            out.truncate(cap);
            out.sort_unstable_by_key(|e| e.hash);
        }
        HashTable { cap, entries: out }
    }
}

/// What the collective steps found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CollectiveStats {
    /// The job generation written (0: none, no rank had anything to push).
    pub job_generation: u64,
    /// Ranks.
    pub ranks: u32,
    /// Hashes in the agreed table held by two ranks or more.
    pub shared_hashes: u64,
    /// This rank's pages written as references to another rank's page.
    pub xref_pages: u64,
    /// This rank's pages whose hash matched but whose bytes did not (stored
    /// here).
    pub mismatches: u64,
    /// Shared pages this rank stores for others.
    pub owned: u64,
    /// Bytes of pages this rank received to compare.
    pub exchanged_bytes: u64,
    /// Rounds of the exchange.
    pub rounds: u64,
    /// Seconds spent in the collective steps (hashing included).
    pub seconds: f64,
}

/// What a collective push did on this rank.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CollectiveReport {
    /// The rank's push.
    pub push: PushReport,
    /// The collective steps.
    pub collective: CollectiveStats,
    /// Generations of uncommitted job generations deleted first.
    pub rolled_back: Vec<String>,
    /// A job manifest put back first from this rank's copy in L1
    /// ([`heal_job_manifest`]).
    pub healed: Vec<String>,
}

/// Settings of a collective push.
#[derive(Clone, Debug)]
pub struct CollectiveOptions {
    /// The most entries of the table of shared hashes (`T`).
    pub table: usize,
    /// The most bytes of pages a rank receives per exchange round.
    pub round_bytes: usize,
}

impl Default for CollectiveOptions {
    fn default() -> Self {
        CollectiveOptions {
            table: 1 << 16,
            round_bytes: 64 << 20,
        }
    }
}

/// Runs a collective push of this rank's `job` (its L1 directory, and its
/// chain `root.rank_store(comm.rank())` as L2) with every other rank of
/// `comm`. Every rank calls it at the same time.
pub fn push_collective(
    job: &Job,
    root: &JobRoot,
    comm: &dyn Comm,
    opts: &PushOptions,
    copts: &CollectiveOptions,
    forced_reason: Option<String>,
) -> Result<CollectiveReport> {
    let t0 = Instant::now();
    let mut hooks = Hooks {
        comm,
        job,
        root,
        copts: copts.clone(),
        job_generation: 0,
        full: false,
        keep: opts.keep_chains_l2.max(1),
        stats: CollectiveStats {
            ranks: comm.size(),
            ..Default::default()
        },
        covered: Vec::new(),
    };
    let mut report = CollectiveReport::default();
    // The locks, then the job generations' state: what committed, and the
    // number of the next one. A failure here still takes part in the
    // agreement, which then fails everywhere.
    // First, under the locks, a job manifest lost or damaged in L2 since
    // its commit is put back from a rank's copy in L1, on every rank before
    // any rank reads the job manifests (an exchange: every rank's view is
    // then the same).
    let locked = begin_writing(job, "push-l2 --collective").and_then(|w| {
        let healed = heal_job_manifest(job, root.job_store(true)?.as_ref())?;
        Ok((w, healed))
    });
    let healed = agree(
        comm,
        locked.as_ref().map(|_| Vec::new()).map_err(Failure::from),
        HEAL_STAGE,
    );
    let start = locked.and_then(|(w, note)| {
        healed?;
        report.healed.extend(note);
        let jobs = JobIndex::load(root.job_store(true)?.as_ref())?;
        let committed = jobs.newest().map(|m| m.job_generation);
        // A job keeps its ranks: the pages of one rank may be stored by
        // any other, so a push by fewer ranks would prune (or a complete
        // coalescence rewrite) the generations an absent rank's chain
        // reads, and the absent rank could never be restored again
        // (helper-58: 3 ranks, then 2 with `--full` twice, then 3, lost
        // rank 2's checkpoints). Every rank reads the same job manifest,
        // so every rank refuses.
        if let Some(jm) = jobs.newest().filter(|m| m.ranks != comm.size()) {
            return Err(Error::chain(
                root.describe(),
                format!(
                    "job generation {} has {} ranks, this push {}: a job's ranks store each other's pages, so a job keeps its number of ranks (push a job of {} ranks under another job name or location)",
                    jm.job_generation,
                    jm.ranks,
                    comm.size(),
                    comm.size()
                ),
            ));
        }
        // The first push makes the job's number of ranks: an L1 directory
        // of the next rank means ranks are missing from this push (helper-72:
        // `push-l2 --collective` run without `mpirun` committed a job of one
        // rank; rank 1's checkpoints could then never be pushed).
        if committed.is_none()
            && jobs.invalid.is_empty()
            && let Some(l1_root) = job.l1.parent()
            && l1_root.join(comm.size().to_string()).is_dir()
        {
            return Err(Error::Invalid(format!(
                "{} holds the L1 directory of rank {}, and this push runs {} rank{}: run it with every rank of the job (`mpirun -np N`); a job keeps the ranks of its first push",
                l1_root.display(),
                comm.size(),
                comm.size(),
                if comm.size() == 1 { "" } else { "s" }
            )));
        }
        // A damaged job manifest is never taken for one that was not
        // written: rolling its generations back would lose checkpoints.
        if let Some((j, e)) = jobs.invalid.iter().find(|(j, _)| Some(*j) > committed) {
            return Err(Error::chain(
                root.describe(),
                format!(
                    "job generation {j}'s manifest is invalid ({}): refusing to push over it; run `rexctl verify --l2 {}`",
                    e.report(),
                    root.describe()
                ),
            ));
        }
        // Above every job manifest there is, valid or not: a number is
        // never reused.
        let max = jobs
            .manifests
            .keys()
            .chain(jobs.invalid.iter().map(|(j, _)| j))
            .copied()
            .max()
            .unwrap_or(0);
        let next = max.checked_add(1).ok_or_else(|| {
            Error::chain(
                root.describe(),
                format!("job generation numbers are exhausted (job generation {max} exists): give the job a new L2 location"),
            )
        })?;
        Ok((w, next, rollback_plan(job, committed)?))
    });
    // Every rank takes part in the agreement on what to roll back, also a
    // rank that failed above, whose own error is the one it returns (its
    // exit code: busy, a chain refused; helper-58: not the agreement's
    // word that some rank failed). The agreement is the first exchange of
    // the push, as for a rank that cannot even start (`fail_early`): when
    // it fails, it has failed on every rank, and no rank exchanges more.
    let agreed = agree_rollback(comm, start.as_ref().map(|s| &s.2).map_err(Failure::from));
    let (writer, next, plan) = start?;
    report.rolled_back = agreed?;
    hooks.job_generation = next;
    let _writer = writer;
    match rollback(job, &plan) {
        Ok(notes) => report.rolled_back.extend(notes),
        Err(e) => {
            // The other ranks are in the push's first exchange.
            let _ = hooks.cut(Err(Failure::from(&e)));
            return Err(e);
        }
    }
    report.push = push_with(job, opts, forced_reason, Some(&mut hooks))?;
    // Partner copies of what L2 now holds are not needed any more (librex
    // and `push-l2 --collective` alike): this rank's copies of rank S's
    // checkpoints up to the last seq of S's member of the job generation
    // just committed, which the commit's all-gather carried (a rank that
    // had nothing to push, its L1 lost say, covers nothing new).
    for (sender, last) in hooks.covered.iter().enumerate() {
        let Some(last) = *last else { continue };
        // A copy left behind is only disk: never a failed push.
        if let Err(e) = crate::l2::partners::prune(&job.l1, sender as u32, last) {
            report.push.recovered.push(format!(
                "partner copies of rank {sender} not pruned: {}",
                e.report()
            ));
        }
    }
    hooks.stats.seconds = t0.elapsed().as_secs_f64();
    if hooks.covered.is_empty() {
        // No rank had anything to push: no job generation was written.
        hooks.stats.job_generation = 0;
    }
    report.collective = hooks.stats;
    Ok(report)
}

/// Agrees whether every rank may roll back its generations of job
/// generations that never committed (`crate::l2::jobgen::rollback`), from
/// every rank's [`RollbackPlan`] (`Err`: this rank failed, and returns its
/// own error after the call). A rank whose L1 shows such a generation
/// committed (its job manifest lost since) refused to make a plan, and so
/// every rank refuses: no rank deletes a part of it, not even a rank whose
/// node was lost, which cannot tell by itself. Returns notes on this
/// rank's parts that no rank's L1 could tell about (every L1 directory
/// that held their checkpoints was lost, say all ranks on one node, with
/// L1 in memory): they are rolled back too, since no restore can take a
/// job generation without its job manifest; refusing would stop the job
/// for ever (helper-76). Every rank calls it once.
pub fn agree_rollback(comm: &dyn Comm, local: Local<&RollbackPlan>) -> Result<Vec<String>> {
    let stage = "agreeing on the unfinished job generations";
    let failed = local.as_ref().err().cloned();
    let all = agree(comm, local.map(RollbackPlan::encode), stage);
    if let Some(e) = failed {
        return Err(e.into_error(comm.rank(), stage));
    }
    let plans = all?
        .iter()
        .map(|b| RollbackPlan::decode(b))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| {
            Error::Invalid(format!("{stage}: a rank sent a message that is not a plan"))
        })?;
    let witnessed: std::collections::BTreeSet<u64> = plans
        .iter()
        .flat_map(|p| p.witnessed.iter().copied())
        .collect();
    let mine = &plans[comm.rank() as usize];
    Ok(mine
        .unknown
        .iter()
        .filter(|(_, j, _)| !witnessed.contains(j))
        .map(|(g, j, s)| {
            format!(
                "generation {g} of job generation {j} has no job manifest, and no rank's L1 directory holds its checkpoints (up to seq {s}) or shows that job generation unfinished (lost nodes): taken as unfinished, as a restore takes the job generation before it"
            )
        })
        .collect())
}

/// Every rank's `payload` if every rank succeeded; else the lowest failed
/// rank's error ([`PeerFailure`]), on every rank. The local error, if any,
/// is this rank's own and is returned by the caller first.
pub fn agree(comm: &dyn Comm, local: Local<Vec<u8>>, stage: &'static str) -> Result<Vec<Vec<u8>>> {
    payloads(comm.all_gather(&outcome(local)), stage)
}

/// Takes part in a collective push that this rank cannot even start
/// (its L1 directory or L2 store cannot be opened), so that the other ranks
/// fail with its error instead of waiting for it.
pub fn fail_early(comm: &dyn Comm, e: &Error) {
    // As many exchanges as a rank's start of [`push_collective`] makes.
    let _ = agree(comm, Err(Failure::from(e)), HEAL_STAGE);
    let _ = agree(comm, Err(Failure::from(e)), "starting the collective push");
}

/// The first exchange of a collective push and of a collective restart:
/// every rank has put back what [`heal_job_manifest`] could.
pub const HEAL_STAGE: &str = "opening the job and putting back a lost job manifest";

struct Hooks<'a> {
    comm: &'a dyn Comm,
    job: &'a Job,
    root: &'a JobRoot,
    copts: CollectiveOptions,
    job_generation: u64,
    full: bool,
    keep: usize,
    stats: CollectiveStats,
    /// Once the job generation is committed: each rank's last seq in it.
    covered: Vec<Option<u64>>,
}

/// A rank's message in an all-gather: `1` and the payload, or `0`, its
/// exit code (one byte) and its error.
fn outcome(local: Local<Vec<u8>>) -> Vec<u8> {
    match local {
        Ok(mut b) => {
            b.insert(0, 1);
            b
        }
        Err(e) => {
            let mut b = vec![0, u8::try_from(e.exit_code).unwrap_or(1)];
            b.extend_from_slice(e.reason.as_bytes());
            b
        }
    }
}

/// The payloads of every rank, or the lowest failed rank's error, with its
/// exit code.
fn payloads(all: Vec<Vec<u8>>, stage: &'static str) -> Result<Vec<Vec<u8>>> {
    use crate::error::exit;
    for (r, b) in all.iter().enumerate() {
        if b.first() != Some(&1) {
            // A code rexctl exits with, then the message. A rank of an
            // older rexctl sends the message alone (text, never a byte
            // 1-6), and an empty message is a failure of unknown kind.
            let (exit_code, text) = match b.get(1) {
                Some(&c) if (exit::FAILURE..=exit::MISMATCH).contains(&i32::from(c)) => {
                    (i32::from(c), &b[2..])
                }
                _ => (exit::FAILURE, b.get(1..).unwrap_or_default()),
            };
            return Err(PeerFailure {
                rank: r as u32,
                stage,
                reason: String::from_utf8_lossy(text).into_owned(),
                exit_code,
            }
            .into());
        }
    }
    Ok(all.into_iter().map(|mut b| b.split_off(1)).collect())
}

pub(crate) fn le64(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map(u64::from_le_bytes)
        .unwrap_or(0)
}

impl Hooks<'_> {
    fn gather(&self, local: Local<Vec<u8>>, stage: &'static str) -> Result<Vec<Vec<u8>>> {
        let failed = local.as_ref().err().cloned();
        let all = agree(self.comm, local, stage);
        match failed {
            // This rank's own error, which its caller reports instead.
            Some(e) => Err(e.into_error(self.comm.rank(), stage)),
            None => all,
        }
    }

    /// Chooses this rank's cross-rank references among `pages` (none when
    /// it writes nothing): the steps of the module doc.
    fn choose(
        &mut self,
        mine: Option<(u64, &PlanPages<'_>)>,
        failed: Option<Failure>,
    ) -> Result<Vec<Xref>> {
        let comm = self.comm;
        let (me, n) = (comm.rank() as usize, comm.size() as usize);
        // Hash every non-zero page.
        let mut buf = Vec::new();
        let mut hashes: Vec<(u128, usize)> = Vec::new();
        let mut page_size = 0u32;
        let mut local_err = None;
        if let Some((_, pages)) = mine {
            for i in 0..pages.len() {
                match pages.read(i, &mut buf) {
                    Ok((data, _)) => {
                        page_size = data.len() as u32;
                        if data.iter().any(|&b| b != 0) {
                            hashes.push((xxhash_rust::xxh3::xxh3_128(data), i));
                        }
                    }
                    Err(e) => {
                        local_err = Some(e);
                        break;
                    }
                }
            }
        }
        hashes.sort_unstable();
        // Distinct hashes; beyond T, the lowest (the same choice on every
        // rank, so that a page many ranks hold survives everywhere).
        let cap = self.copts.table;
        let mut contrib = HashTable {
            cap,
            entries: Vec::new(),
        };
        for &(h, _) in &hashes {
            if contrib.entries.len() == cap {
                break;
            }
            if contrib.entries.last().is_none_or(|e| e.hash != h) {
                contrib.entries.push(HashEntry { hash: h, count: 1 });
            }
        }
        let table = comm.merge_all(&contrib);
        let shared: Vec<u128> = table
            .entries
            .iter()
            .filter(|e| e.count >= 2)
            .map(|e| e.hash)
            .collect();
        // Which shared hashes this rank holds (a bit per entry), its page
        // size, its generation, and its pages outside the shared set.
        let mut bits = vec![0u8; shared.len().div_ceil(8)];
        let mut held: Vec<Vec<usize>> = vec![Vec::new(); shared.len()];
        let mut unique = 0u64;
        for &(h, i) in &hashes {
            match shared.binary_search(&h) {
                Ok(k) => {
                    bits[k / 8] |= 1 << (k % 8);
                    held[k].push(i);
                }
                Err(_) => unique += 1,
            }
        }
        let mut msg = Vec::new();
        msg.extend_from_slice(&u64::from(page_size).to_le_bytes());
        msg.extend_from_slice(&mine.map_or(0, |(g, _)| g).to_le_bytes());
        msg.extend_from_slice(&unique.to_le_bytes());
        msg.extend_from_slice(&bits);
        let local = match (&local_err, failed) {
            (Some(e), _) => Err(Failure::from(e)),
            (None, Some(e)) => Err(e),
            (None, None) => Ok(msg),
        };
        let all = self.gather(local, "choosing the shared pages");
        if let Some(e) = local_err {
            return Err(e);
        }
        let all = all?;
        let page_sizes: Vec<usize> = all.iter().map(|b| le64(b, 0) as usize).collect();
        let gens: Vec<u64> = all.iter().map(|b| le64(b, 8)).collect();
        let mut load: Vec<u64> = all.iter().map(|b| le64(b, 16)).collect();
        let holds = |r: usize, k: usize| {
            all[r]
                .get(24 + k / 8)
                .is_some_and(|b| b & (1 << (k % 8)) != 0)
        };
        // Owners, identically on every rank: the holder with the least to
        // write so far.
        let mut owner = vec![usize::MAX; shared.len()];
        for (k, o) in owner.iter_mut().enumerate() {
            let holders: Vec<usize> = (0..n).filter(|&r| holds(r, k)).collect();
            if holders.len() < 2 {
                continue;
            }
            let best = *holders
                .iter()
                .min_by_key(|&&r| (load[r], r))
                .expect("two holders");
            load[best] += 1;
            *o = best;
        }
        self.stats.shared_hashes = owner.iter().filter(|&&o| o != usize::MAX).count() as u64;
        self.stats.owned = owner.iter().filter(|&&o| o == me).count() as u64;
        // The exchange, in rounds of at most `round_bytes` received per
        // rank: owners send (page number, bytes) to the other holders; a
        // holder compares each of its pages of that hash with them.
        let largest = page_sizes.iter().copied().max().unwrap_or(0).max(1) + 8;
        let window = (self.copts.round_bytes / largest).max(1);
        let mut xrefs = Vec::new();
        let mut local_err = None;
        for lo in (0..shared.len()).step_by(window) {
            let hi = (lo + window).min(shared.len());
            let mut send: Vec<Vec<u8>> = vec![Vec::new(); n];
            for k in lo..hi {
                if owner[k] != me || local_err.is_some() {
                    continue;
                }
                let i = held[k][0];
                let (page, data) = match mine {
                    Some((_, pages)) => match pages.read(i, &mut buf) {
                        Ok((d, _)) => (pages.page(i), d),
                        Err(e) => {
                            local_err = Some(e);
                            continue;
                        }
                    },
                    None => continue,
                };
                for (r, out) in send.iter_mut().enumerate() {
                    if r != me && holds(r, k) {
                        out.extend_from_slice(&page.to_le_bytes());
                        out.extend_from_slice(data);
                    }
                }
            }
            let got = comm.all_to_all(&send);
            self.stats.rounds += 1;
            let mut at = vec![0usize; n];
            for k in lo..hi {
                let o = owner[k];
                if o == usize::MAX || o == me || !holds(me, k) {
                    continue;
                }
                let ps = page_sizes[o];
                let rec = got[o].get(at[o]..at[o] + 8 + ps);
                at[o] += 8 + ps;
                let Some(rec) = rec else {
                    // The owner failed to read its page: it reports that
                    // at the commit; store ours.
                    continue;
                };
                self.stats.exchanged_bytes += rec.len() as u64;
                let owner_page = le64(rec, 0);
                let Some((_, pages)) = mine else { continue };
                for &i in &held[k] {
                    match pages.read(i, &mut buf) {
                        Ok((d, _)) if d == &rec[8..] => xrefs.push(Xref {
                            page: pages.page(i),
                            owner_rank: o as u32,
                            owner_generation: gens[o],
                            owner_page,
                        }),
                        Ok(_) => self.stats.mismatches += 1,
                        Err(e) => {
                            local_err.get_or_insert(e);
                        }
                    }
                }
            }
        }
        // Whether every rank read its pages: a failure in the exchange
        // fails every rank here, before any of them writes.
        let done = match &local_err {
            Some(e) => Err(Failure::from(e)),
            None => Ok(Vec::new()),
        };
        let all = self.gather(done, "comparing the shared pages");
        if let Some(e) = local_err {
            return Err(e);
        }
        all?;
        xrefs.sort_unstable_by_key(|x| x.page);
        self.stats.xref_pages = xrefs.len() as u64;
        Ok(xrefs)
    }

    /// Rank 0's part of the commit: the job manifest, then the job
    /// manifests older than the chains kept.
    fn write_job_manifest(&self, members: Vec<JobMember>) -> Result<Vec<u8>> {
        let store = self.root.job_store(true)?;
        let jm = JobManifest {
            format: JOB_FORMAT,
            job_generation: self.job_generation,
            job: self.job.identity.as_ref().and_then(|i| i.job.clone()),
            ranks: self.comm.size(),
            members,
            full: self.full,
            created_ns: crate::format::ic::now_ns(),
            writer: format!("rexctl {}", env!("CARGO_PKG_VERSION")),
        };
        jm.check(std::path::Path::new(&job_manifest_name(
            self.job_generation,
        )))?;
        let bytes = jm.encode();
        store.put_bytes(&job_manifest_name(self.job_generation), &bytes)?;
        crate::l2::push::check_landed(
            store.as_ref(),
            &job_manifest_name(self.job_generation),
            &bytes,
        )?;
        if self.full {
            prune_job_manifests(store.as_ref(), self.keep)?;
        }
        Ok(bytes)
    }
}

/// Deletes the job manifests older than the `keep` newest full job
/// generations (their ranks' chains are pruned the same way).
fn prune_job_manifests(store: &dyn Store, keep: usize) -> Result<()> {
    let jobs = JobIndex::load(store)?;
    let fulls: Vec<u64> = jobs
        .manifests
        .values()
        .filter(|m| m.full)
        .map(|m| m.job_generation)
        .collect();
    if fulls.len() <= keep {
        return Ok(());
    }
    let cutoff = fulls[fulls.len() - keep];
    for j in jobs.manifests.keys().rev().filter(|&&j| j < cutoff) {
        store.delete(&job_manifest_name(*j))?;
    }
    Ok(())
}

impl Collective for Hooks<'_> {
    fn rank(&self) -> u32 {
        self.comm.rank()
    }

    fn cut(&mut self, local: Local<Vec<Stand>>) -> Result<Cut> {
        let msg = local.map(|v| {
            let mut b = Vec::with_capacity(v.len() * Stand::LEN);
            for s in v {
                s.encode_into(&mut b);
            }
            b
        });
        let all = self.gather(msg, "agreeing on the newest seq of every rank")?;
        let ranks = all
            .iter()
            .map(|b| {
                b.chunks_exact(Stand::LEN)
                    .filter_map(Stand::decode)
                    .collect()
            })
            .collect();
        Ok(Cut::agree(ranks))
    }

    fn agree(&mut self, local: Local<&Proposal>) -> Result<Agreed> {
        let msg = local.map(|p| {
            let mut b = vec![u8::from(p.has_work), u8::from(p.has_state)];
            b.extend_from_slice(&self.job_generation.to_le_bytes());
            b.extend_from_slice(p.full.as_deref().unwrap_or("").as_bytes());
            b
        });
        let all = self.gather(msg, "agreeing on the push")?;
        let mut agreed = Agreed::default();
        for (r, b) in all.iter().enumerate() {
            if b.get(1) != Some(&1) {
                return Err(PeerFailure {
                    rank: r as u32,
                    stage: "agreeing on the push",
                    reason: "it has no checkpoint (no generation and no pending checkpoint): every rank checkpoints before the first collective push".into(),
                    // No checkpoint where one is needed.
                    exit_code: crate::error::exit::DATA,
                }
                .into());
            }
            agreed.any_work |= b[0] == 1;
            self.job_generation = self.job_generation.max(le64(b, 2));
            let why = String::from_utf8_lossy(b.get(10..).unwrap_or_default());
            if agreed.full.is_none() && !why.is_empty() {
                agreed.full = Some(if r == self.comm.rank() as usize {
                    why.into_owned()
                } else {
                    format!("rank {r}: {why}")
                });
            }
        }
        self.full = agreed.full.is_some();
        self.stats.job_generation = self.job_generation;
        Ok(agreed)
    }

    fn xrefs(&mut self, local: Local<Option<(u64, &PlanPages<'_>)>>) -> Result<Vec<Xref>> {
        match local {
            Ok(mine) => self.choose(mine, None),
            // Take part in the collective steps with nothing, and fail them.
            Err(e) => self.choose(None, Some(e)),
        }
    }

    fn job_generation(&self) -> u64 {
        self.job_generation
    }

    fn xref_source(&self) -> std::sync::Arc<dyn crate::l2::chain::XrefSource> {
        crate::l2::jobgen::JobXrefs::new(self.root.clone())
    }

    fn commit(&mut self, local: Local<Option<&Manifest>>, newest: Option<&Manifest>) -> Result<()> {
        // This rank's member: its new generation, or its newest one, with
        // the CRC of the manifest bytes L2 holds.
        let member = local.and_then(|m| {
            let m = m.or(newest).ok_or_else(|| {
                Failure::new(crate::error::exit::FAILURE, "no generation to name")
            })?;
            let bytes = self
                .job
                .l2
                .read(&manifest_name(m.generation))
                .map_err(Failure::from)?;
            let mut b = Vec::new();
            b.extend_from_slice(&m.generation.to_le_bytes());
            b.extend_from_slice(&m.chain_base.to_le_bytes());
            b.extend_from_slice(&u64::from(crc32fast::hash(&bytes)).to_le_bytes());
            b.extend_from_slice(&m.last_seq.to_le_bytes());
            Ok(b)
        });
        let all = self.gather(member, "committing the job generation")?;
        let members: Vec<JobMember> = all
            .iter()
            .enumerate()
            .map(|(r, b)| JobMember {
                rank: r as u32,
                generation: le64(b, 0),
                chain_base: le64(b, 8),
                manifest_crc32: le64(b, 16) as u32,
            })
            .collect();
        let written = if self.comm.rank() == 0 {
            self.write_job_manifest(members).map_err(Failure::from)
        } else {
            Ok(Vec::new())
        };
        let written = self.gather(written, "writing the job manifest")?;
        // Committed. Each rank keeps the job manifest's bytes in its L1
        // before it deletes any checkpoint the job generation covers: its
        // word that the job generation committed, should L2's job manifest
        // be lost (docs/FORMAT.md §3.9.4 step 5).
        let kept = keep_job_manifest_copy(self.job, self.job_generation, &written[0])
            .map(|()| Vec::new())
            .map_err(Failure::from);
        self.gather(kept, "keeping the job manifest in L1")?;
        self.covered = all
            .iter()
            .map(|b| b.get(24..32).map(|_| le64(b, 24)))
            .collect();
        Ok(())
    }
}

/// A page-hash table from `(hash, count)` pairs, for tests and benches.
pub fn table_of(cap: usize, entries: &[(u128, u32)]) -> HashTable {
    let mut m: HashMap<u128, u32> = HashMap::new();
    for &(h, c) in entries {
        *m.entry(h).or_default() += c;
    }
    let mut entries: Vec<HashEntry> = m
        .into_iter()
        .map(|(hash, count)| HashEntry { hash, count })
        .collect();
    entries.sort_unstable_by_key(|e| e.hash);
    HashTable { cap, entries }
}

/// A whole job's restart from the command line (`mpirun rexctl restore
/// --collective`), on every rank: the ranks exchange their states (from
/// `l1_root/R` plus L2, or from L2 alone when that directory is gone: its
/// node was lost) and, when every rank can tell, each restores the seq a
/// collective push would cut at ([`Cut::agree`]); else each restores its
/// newest state, the ranks agree on the smallest seq restored, and a rank
/// ahead restores exactly that seq instead (`--seq`). Each publishes its
/// image at `out` only once every rank holds an image of that seq.
/// Until then the image is staged under a temporary name beside `out`, so
/// a failure on any rank leaves no output on any rank.
///
/// With `opts.fallback`, each rank's newest state is its newest valid one
/// ([`crate::l2::jobgen::restore_rank_l1`], [`crate::l2::jobgen::restore_rank`]): a rank that fell back to an
/// older job generation takes the job back there, every other rank
/// restoring its part of that job generation from L2.
pub fn restore_job(
    comm: &dyn Comm,
    root: &JobRoot,
    l1_root: Option<&std::path::Path>,
    opts: &crate::l2::restore::RestoreOptions,
    out: &std::path::Path,
) -> Result<crate::l2::restore::RestoreReport> {
    use crate::l2::jobgen::{job_generation_ending_at, restore_rank, restore_rank_l1};
    let rank = comm.rank();
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let staged = out.with_file_name(format!(".{name}.tmp-{}-job", std::process::id()));
    let _listed = crate::durable::RemovedOnSignal::new(&staged);
    let l1 = l1_root
        .map(|r| r.join(rank.to_string()))
        .filter(|d| d.is_dir());
    let restore = |o: &crate::l2::restore::RestoreOptions| match &l1 {
        Some(l1) => restore_rank_l1(root, rank, l1, o, &staged).map(|(r, _)| r),
        None => restore_rank(root, rank, None, o, &staged).map(|(r, _)| r),
    };
    let seq_of = |r: &Result<crate::l2::restore::RestoreReport>| -> Local<Vec<u8>> {
        r.as_ref()
            .map(|r| r.seq.to_le_bytes().to_vec())
            .map_err(Failure::from)
    };
    // As many processes as the job has ranks: with fewer, the ranks left
    // out would not hold the job back to their seq (helper-66: `-np 3` on a
    // job of 4 published a seq rank 3 never wrote). Every rank reads the
    // same job manifest, so all refuse alike.
    let ranks = || -> Result<()> {
        let jobs = crate::l2::jobgen::JobIndex::load(root.job_store(false)?.as_ref())?;
        match jobs.newest() {
            Some(jm) if jm.ranks != comm.size() => Err(Error::chain(
                root.describe(),
                format!(
                    "the job has {} ranks (job generation {}), and {} processes restore it: run as many as it has ranks",
                    jm.ranks,
                    jm.job_generation,
                    comm.size()
                ),
            )),
            Some(_) => Ok(()),
            // No job generation committed yet: the job's number of ranks
            // is not written anywhere, but L1 holding checkpoints of a
            // rank no process restores says it is larger (helper-109: `-np
            // 3` restored 3 of 4 ranks, exit 0).
            None => {
                let Some(d) = l1_root else { return Ok(()) };
                let beyond = std::fs::read_dir(d)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                    .filter(|&r| r >= comm.size())
                    .map(|r| (r, d.join(r.to_string())))
                    .filter(|(_, l1)| crate::l2::push::holds_checkpoints(l1).unwrap_or(false))
                    .min();
                match beyond {
                    Some((r, l1)) => Err(Error::chain(
                        root.describe(),
                        format!(
                            "no job generation committed yet, and L1 holds rank {r}'s checkpoints ({}); {} processes restore the job: run as many as it has ranks",
                            l1.display(),
                            comm.size()
                        ),
                    )),
                    None => Ok(()),
                }
            }
        }
    };
    // Every rank's states, as a push sees them (`jobgen::rank_stands`):
    // `None` when this rank cannot tell (an unreadable L1 file, L1's copy
    // of a member manifest, no committed job generation).
    let mine = crate::l2::jobgen::rank_stands(root, rank, l1.as_deref()).ok();
    let result = (|| {
        // The seq to restore, when every rank can tell: the newest at which
        // every rank stands in one life of the job, as a collective push
        // cuts (`Cut::agree`). A rank whose newest state is past it then
        // restores once, and a rank with a gap before a FULL checkpoint
        // (seq 2, then 4; the others at 3) is taken at 2, where the
        // smallest newest seq (3) was one it could not restore. A seq or
        // job generation given by hand is the target itself, and
        // `--fallback` takes each rank's newest state that restores.
        let cut = {
            let checked = ranks();
            let local = checked
                .as_ref()
                .map(|()| {
                    let mut b = vec![u8::from(mine.is_some())];
                    for s in mine.iter().flatten() {
                        s.encode_into(&mut b);
                    }
                    b
                })
                .map_err(Failure::from);
            let all = agree(comm, local, "agreeing on the job's newest common seq");
            // This rank's own error first, then another rank's.
            checked?;
            let all = all?;
            let told: Option<Vec<Vec<Stand>>> = all
                .iter()
                .map(|b| {
                    (b.first() == Some(&1)).then(|| {
                        b[1..]
                            .chunks_exact(Stand::LEN)
                            .filter_map(Stand::decode)
                            .collect()
                    })
                })
                .collect();
            match told {
                Some(v) if opts.seq.is_none() && opts.generation.is_none() && !opts.fallback => {
                    let cut = Cut::agree(v);
                    if cut.at.is_none() {
                        let why = cut.why_none();
                        return Err(Error::chain(
                            root.describe(),
                            format!(
                                "no seq is one state of the job on every rank{}; restore each rank by hand (--rank R, --seq, --job-generation), or let the job's checkpoints of one life catch up",
                                if why.is_empty() {
                                    why
                                } else {
                                    format!(": {why}")
                                }
                            ),
                        ));
                    }
                    cut.at
                }
                _ => None,
            }
        };
        // Only a rank whose newest state is past the cut names the seq: a
        // rank standing at it restores its newest, which `--seq` would
        // refuse when a run numbered again from 0 stands below its member
        // generation (helper-108: a job restarted by hand from seq 0, exit
        // 3 where the newest restored it).
        let past = cut.filter(|&c| {
            mine.as_ref()
                .and_then(|v| v.last())
                .is_some_and(|n| n.seq != c)
        });
        let first = restore(&crate::l2::restore::RestoreOptions {
            seq: past.or(opts.seq),
            ..opts.clone()
        });
        let all = agree(
            comm,
            seq_of(&first),
            if cut.is_some() {
                "restoring the job's newest common seq"
            } else {
                "restoring each rank's newest state"
            },
        );
        let first = first?;
        let target = all?
            .iter()
            .map(|b| le64(b, 0))
            .min()
            .expect("one rank at least");
        // No early return before the next agreement: the other ranks wait
        // in it.
        let report = if first.seq == target {
            Ok(first)
        } else {
            crate::durable::remove_file(&staged).and_then(|()| {
                let at = crate::l2::restore::RestoreOptions {
                    seq: Some(target),
                    fallback: false,
                    ..opts.clone()
                };
                match restore(&at) {
                    // `--fallback`: a rank fell back to an older job
                    // generation, whose state this rank restores from L2
                    // (its checkpoints after it are gone from L1).
                    Err(e) if opts.fallback && e.is_about_data() => {
                        match job_generation_ending_at(root, rank, target)? {
                            Some(j) => {
                                let at = crate::l2::restore::RestoreOptions {
                                    seq: None,
                                    ..at.clone()
                                };
                                restore_rank(root, rank, Some(j), &at, &staged).map(|(r, _)| r)
                            }
                            None => Err(e),
                        }
                    }
                    r => r,
                }
            })
        };
        // With the seq, this rank's state at it as a push sees it (its
        // capture time and run), when it can tell: seqs do not order runs,
        // and a rank whose state of that seq predates another rank's new
        // run of it is of another life of the job (helper-105: a rank
        // whose node was lost stood at the old run's seq 4, the others at
        // a run restarted by hand from 0, and the images mixed the two).
        let stand = mine.as_ref().and_then(|v| {
            let i = v.iter().position(|s| s.seq == target)?;
            Some((v[i], v.get(i + 1).map(|n| n.time_ns)))
        });
        let local = seq_of(&report).map(|mut b| {
            if let Some((s, next)) = stand {
                s.encode_into(&mut b);
                b.extend_from_slice(&next.unwrap_or(u64::MAX).to_le_bytes());
            }
            b
        });
        let all = agree(comm, local, "restoring the job's common seq");
        // This rank's own error first, then another rank's.
        let report = report?;
        let all = all?;
        for (r, b) in all.iter().enumerate() {
            if le64(b, 0) != target {
                return Err(Error::chain(
                    root.describe(),
                    format!(
                        "rank {r} restored seq {}, not the job's common seq {target}",
                        le64(b, 0)
                    ),
                ));
            }
        }
        // The ranks that could tell, all of them checked (helper-106: one
        // rank that could not switched the test off for every rank).
        let at: Vec<(usize, Stand, Option<u64>)> = all
            .iter()
            .enumerate()
            .filter(|(_, b)| b.len() >= 8 + Stand::LEN + 8)
            .filter_map(|(r, b)| {
                let s = Stand::decode(&b[8..]).filter(|s| s.seq == target)?;
                let next = le64(b, 8 + Stand::LEN);
                Some((r, s, Some(next).filter(|&n| n != u64::MAX)))
            })
            .collect();
        if let Some(why) = Cut::two_lives(&at) {
            return Err(Error::chain(
                root.describe(),
                format!(
                    "seq {target} is not one state of the job on every rank: {why}; restore each rank by hand (--rank R, --seq, --job-generation), or let the job's checkpoints of one life catch up"
                ),
            ));
        }
        std::fs::rename(&staged, out).map_err(|e| Error::io(out, "rename into place", e))?;
        let dir = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => std::path::Path::new("."),
        };
        crate::durable::fsync_dir(dir)?;
        Ok(report)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&staged);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_merge_adds_counts_and_keeps_the_most_frequent() {
        let a = table_of(3, &[(1, 1), (5, 1), (9, 1)]);
        let b = table_of(3, &[(5, 1), (7, 1), (9, 1)]);
        let m = a.merge(&b);
        // 5 and 9 twice; of the ones seen once, the lower hash stays.
        assert_eq!(
            m.entries
                .iter()
                .map(|e| (e.hash, e.count))
                .collect::<Vec<_>>(),
            vec![(1, 1), (5, 2), (9, 2)]
        );
        assert_eq!(HashTable::decode(&m.encode()), Some(m));
        // A header claiming more entries than its capacity is refused.
        let mut bad = a.encode();
        bad[0..4].copy_from_slice(&9u32.to_le_bytes());
        assert_eq!(HashTable::decode(&bad), None);
    }

    /// A failed rank's exit code travels with its message, so that every
    /// rank of the job exits with it (helper-60: peers exited 1 while the
    /// busy rank exited 4, and `mpirun` reported whichever ended first);
    /// the lowest failed rank's is the one reported.
    #[test]
    fn every_rank_learns_the_failed_ranks_exit_code() {
        use crate::error::exit;
        let busy = Error::Busy {
            path: "l1/2".into(),
            holder: "a test".into(),
        };
        let all = vec![
            outcome(Ok(vec![7])),
            outcome(Err(Failure::from(&busy))),
            outcome(Err(Failure::new(exit::DATA, "bad"))),
        ];
        let e = payloads(all, "a step").unwrap_err();
        assert_eq!(e.exit_code(), exit::BUSY);
        let Error::Peer(p) = &e else { panic!("{e:?}") };
        assert_eq!((p.rank, p.reason.as_str()), (1, busy.report().as_str()));
        // A message that carries nothing is a failure of unknown kind; an
        // older rank's message (no code) is that too, and kept whole.
        let e = payloads(vec![vec![1, 9], Vec::new()], "a step").unwrap_err();
        assert_eq!(e.exit_code(), exit::FAILURE);
        let e = payloads(vec![vec![1, 9], b"\0busy".to_vec()], "a step").unwrap_err();
        assert_eq!(e.exit_code(), exit::FAILURE);
        assert!(e.to_string().ends_with(": busy"), "{e}");
        // A rank's own failure, turned back into an error, keeps its code.
        assert_eq!(
            Failure::from(&busy).into_error(2, "a step").exit_code(),
            exit::BUSY
        );
        assert_eq!(
            payloads(
                vec![outcome(Ok(vec![7])), outcome(Ok(Vec::new()))],
                "a step"
            )
            .unwrap(),
            vec![vec![7], Vec::new()]
        );
    }

    proptest! {
        /// Without truncation the merge is the multiset union, in any
        /// order (commutative and associative).
        #[test]
        fn merging_without_a_cut_is_a_union(xs in proptest::collection::vec((0u128..50, 1u32..3), 0..40),
                                              ys in proptest::collection::vec((0u128..50, 1u32..3), 0..40),
                                              zs in proptest::collection::vec((0u128..50, 1u32..3), 0..40)) {
            let (a, b, c) = (table_of(200, &xs), table_of(200, &ys), table_of(200, &zs));
            let all: Vec<_> = xs.iter().chain(&ys).chain(&zs).copied().collect();
            prop_assert_eq!(a.merge(&b).merge(&c), table_of(200, &all));
            prop_assert_eq!(c.merge(&b).merge(&a), table_of(200, &all));
        }
    }
}
