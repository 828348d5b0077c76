//! Job generations of an MPI job (docs/FORMAT.md §3.9): reading them,
//! reading the pages one rank stores for another, and undoing a collective
//! push that did not commit.
//!
//! A collective push (`crate::l2::collective`) writes one ordinary
//! generation per rank, in the rank's own chain under the job's location
//! ([`JobRoot`]), some of whose pages are *cross-rank references* to a page
//! another rank's generation of the same push stores. Those generations are
//! usable only together: the job generation exists once its job manifest
//! does, which rank 0 writes after every rank's manifest is durable in L2.
//! So a restore of any rank starts from the newest valid job manifest, not
//! from the rank's newest generation (which may belong to a push another
//! rank never finished), and [`rollback`] deletes a rank's generations of
//! job generations that never committed, before its next push recovers,
//! once the ranks agreed on their [`RollbackPlan`]s: a rank whose node was
//! lost cannot tell an unfinished push from a lost job manifest by itself.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::format::job_manifest::{JobManifest, job_manifest_name, parse_job_manifest_name};
use crate::format::manifest::{Manifest, manifest_name, parse_manifest_name};
use crate::format::xref::Xref;
use crate::l2::chain::{ChainIndex, LivePage, OpenChain, XrefSource, read_manifest};
use crate::l2::push::Job;
use crate::l2::restore::{RestoreOptions, RestoreReport, VerifyReport, restore_l1_l2, restore_l2};
use crate::store::{JobRoot, Store};

/// The valid job manifests of a job.
#[derive(Debug, Default)]
pub struct JobIndex {
    /// Valid job manifests by job generation.
    pub manifests: BTreeMap<u64, JobManifest>,
    /// Job manifests that could not be read or are invalid, with the
    /// reason (one a remote server fails to send fails the load instead).
    pub invalid: Vec<(u64, Error)>,
}

impl JobIndex {
    /// Reads every job manifest in the job store.
    pub fn load(store: &dyn Store) -> Result<JobIndex> {
        let mut idx = JobIndex::default();
        for o in store.list()? {
            let Some(j) = parse_job_manifest_name(&o.name) else {
                continue;
            };
            match read_job_manifest(store, j) {
                Ok(m) => {
                    idx.manifests.insert(j, m);
                }
                // One the store fails to send says nothing of the job
                // generation (as for a rank's manifests, ChainIndex::load).
                Err(e) if e.is_remote_failure() => return Err(e),
                Err(e) => idx.invalid.push((j, e)),
            }
        }
        Ok(idx)
    }

    /// The newest valid job manifest.
    pub fn newest(&self) -> Option<&JobManifest> {
        self.manifests.values().next_back()
    }
}

/// Keeps a copy of job generation `j`'s manifest (`bytes`, as L2 holds
/// it) in the rank's copy of its chain (`L1/rex/`), in place of any other
/// copy: written once every rank knows the job manifest is durable in L2,
/// before the rank deletes the checkpoints the job generation covers. It is
/// the rank's word that the job generation committed when L2's job
/// manifest is lost later ([`heal_job_manifest`]; helper-78: a job
/// manifest lost after its commit, one rank killed before deleting its
/// checkpoints and another rank's node lost, read as an unfinished push,
/// and every rank rolled the committed job generation back, exit 0 with
/// the state before it).
pub fn keep_job_manifest_copy(job: &Job, j: u64, bytes: &[u8]) -> Result<()> {
    let name = job_manifest_name(j);
    job.l1_chain.replace_bytes(&name, bytes)?;
    for o in job.l1_chain.list()? {
        if parse_job_manifest_name(&o.name).is_some_and(|x| x != j) {
            job.l1_chain.delete(&o.name)?;
        }
    }
    Ok(())
}

/// The job generation whose job manifest this rank keeps a copy of in
/// L1 ([`keep_job_manifest_copy`]; by its name), if any: one committed.
pub fn job_manifest_copy(job: &Job) -> Result<Option<u64>> {
    Ok(job
        .l1_chain
        .list()?
        .iter()
        .filter_map(|o| parse_job_manifest_name(&o.name))
        .max())
}

/// The job generation whose manifest this rank's L1 holds a copy of
/// ([`keep_job_manifest_copy`]) while the job store (`jobs`) lacks it or
/// holds it invalid, and whether invalid: it committed (the copy is
/// written only after the commit), and its job manifest was lost or
/// damaged in L2 since. Never a job generation below the newest valid
/// one (older job manifests are pruned on purpose), never from a copy
/// that is invalid, and only while rank `rank`'s member of it is still in
/// its L2 chain with the manifest CRC the copy records (an L2 location
/// wiped since is not the job's any more).
fn lost_job_manifest(job: &Job, rank: u32, jobs: &JobIndex) -> Result<Option<(u64, bool)>> {
    let Some(j) = job_manifest_copy(job)? else {
        return Ok(None);
    };
    let Ok(copy) = read_job_manifest(&job.l1_chain, j) else {
        return Ok(None);
    };
    let invalid = jobs.invalid.iter().any(|(x, _)| *x == j);
    if jobs.manifests.contains_key(&j) || jobs.newest().is_some_and(|n| n.job_generation > j) {
        return Ok(None);
    }
    let Some(member) = copy.members.iter().find(|m| m.rank == rank) else {
        return Ok(None);
    };
    let in_l2 = job
        .l2
        .read(&manifest_name(member.generation))
        .is_ok_and(|b| crc32fast::hash(&b) == member.manifest_crc32);
    Ok(in_l2.then_some((j, invalid)))
}

/// What `lost_job_manifest` finds (a job generation committed whose job
/// manifest L2 lost or holds invalid), said for rank `rank` of the job at
/// `root` (`job`: its L1 directory and chain), and whether the job manifest
/// is invalid rather than missing.
pub fn lost_job_manifest_why(
    root: &JobRoot,
    job: &Job,
    rank: u32,
    jobs: &JobIndex,
) -> Result<Option<(String, bool)>> {
    Ok(lost_job_manifest(job, rank, jobs)?.map(|(j, invalid)| {
        (
            format!(
                "job generation {j} committed (rank {rank}'s copy of its job manifest in {} says so), and its job manifest is {} in {}: the next collective push or librex restart puts it back",
                job.l1_chain.describe(),
                if invalid { "invalid" } else { "missing" },
                root.describe()
            ),
            invalid,
        )
    }))
}

/// Puts back, from this rank's copy in L1, a job manifest that
/// `lost_job_manifest` finds lost or damaged in the job store. Returns
/// what was done. Called with the job's writer locks held, by every rank
/// before any reads the job manifests.
pub fn heal_job_manifest(job: &Job, job_store: &dyn Store) -> Result<Option<String>> {
    let Some(rank) = job
        .identity
        .as_ref()
        .and_then(|i| i.rank.parse::<u32>().ok())
    else {
        return Ok(None);
    };
    let jobs = JobIndex::load(job_store)?;
    let Some((j, invalid)) = lost_job_manifest(job, rank, &jobs)? else {
        return Ok(None);
    };
    let name = job_manifest_name(j);
    job_store.replace_bytes(&name, &job.l1_chain.read(&name)?)?;
    Ok(Some(format!(
        "job generation {j}'s manifest was {} in {}: put back from this rank's copy in {} (the job generation committed)",
        if invalid { "invalid" } else { "missing" },
        job_store.describe(),
        job.l1_chain.describe()
    )))
}

/// Reads and checks job generation `j`'s manifest.
pub fn read_job_manifest(store: &dyn Store, j: u64) -> Result<JobManifest> {
    let name = job_manifest_name(j);
    let path = Path::new(&store.describe()).join(&name);
    let bytes = match store.read(&name) {
        // No such job generation: a request for a checkpoint that is not
        // there (exit 3), not an I/O failure.
        Err(e) if e.is_not_found() => {
            return Err(Error::chain(
                &path,
                format!("there is no job generation {j}: {}", e.report()),
            ));
        }
        r => r?,
    };
    let m = JobManifest::decode(&path, &bytes)?;
    if m.job_generation != j {
        return Err(Error::corrupt(
            &path,
            0,
            "job_generation",
            format!(
                "job manifest says job generation {}, its name says {j}",
                m.job_generation
            ),
        ));
    }
    Ok(m)
}

/// Checks that rank `rank`'s store holds the generation job manifest `jm`
/// names, with the very manifest bytes that were committed.
pub fn check_member(store: &dyn Store, jm: &JobManifest, rank: u32) -> Result<u64> {
    let Some(member) = jm.member(rank) else {
        return Err(Error::chain(
            store.describe(),
            format!(
                "job generation {} has {} ranks: there is no rank {rank}",
                jm.job_generation, jm.ranks
            ),
        ));
    };
    let g = member.generation;
    let bytes = store.read(&manifest_name(g)).map_err(|e| {
        Error::chain(
            store.describe(),
            format!(
                "job generation {} needs rank {rank}'s generation {g}: {}",
                jm.job_generation,
                e.report()
            ),
        )
    })?;
    let crc = crc32fast::hash(&bytes);
    if crc != member.manifest_crc32 {
        return Err(Error::corrupt(
            Path::new(&store.describe()).join(manifest_name(g)),
            0,
            "manifest",
            format!(
                "rank {rank}'s manifest of generation {g} has CRC {crc:08x}, job generation {} committed {:08x}",
                jm.job_generation, member.manifest_crc32
            ),
        ));
    }
    read_manifest(store, g)?;
    // The rank's newest generation within the job generation: one that a
    // later generation of the rank belonging to it or an older one would
    // supersede was not this rank's part of it (a job manifest naming an
    // older generation, CRC and all: helper-60). Generation numbers grow
    // with job generations, and a rank writes one generation per job
    // generation, so no push leaves such a pair.
    // Only the manifests above `g` are read (usually none but the
    // uncommitted ones): a restore loads the rank's index itself, and on
    // a bucket each manifest is a GET.
    let newer = store
        .list()?
        .into_iter()
        .filter_map(|o| parse_manifest_name(&o.name).filter(|&n| n > g))
        .filter_map(|n| read_manifest(store, n).ok());
    if let Some(m) = newer
        .filter(|m| m.job_generation.is_some_and(|j| j <= jm.job_generation))
        .min_by_key(|m| m.generation)
    {
        return Err(Error::chain(
            store.describe(),
            format!(
                "job generation {} names rank {rank}'s generation {g}, but its generation {} of job generation {} is newer",
                jm.job_generation,
                m.generation,
                m.job_generation.unwrap_or(0)
            ),
        ));
    }
    Ok(g)
}

/// Reads the pages other ranks store, from their chains under the job's
/// location: each owner's chain is opened once per generation named (its
/// files checked against its manifest), and each page is rebuilt and
/// checked against the owner's own P-Table CRC.
#[derive(Debug)]
pub struct JobXrefs {
    root: JobRoot,
    /// (owner rank, owner generation) -> the owner's store and chain.
    open: Mutex<HashMap<(u32, u64), Arc<OwnerChain>>>,
}

struct OwnerChain {
    // Kept alive while the chain's files are mapped (a remote store's
    // cache).
    _store: Box<dyn Store>,
    chain: OpenChain,
}

impl std::fmt::Debug for OwnerChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnerChain")
            .field("store", &self._store.describe())
            .field("chain", &self.chain)
            .finish()
    }
}

impl JobXrefs {
    /// The pages of the job at `root`.
    pub fn new(root: JobRoot) -> Arc<JobXrefs> {
        Arc::new(JobXrefs {
            root,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// `text` with the local paths of the objects read so far (a bucket's
    /// cache) named as the store names them (`s3://...`).
    pub fn public_text(&self, text: &str) -> String {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.values()
            .fold(text.to_string(), |t, c| c._store.public_text(&t))
    }

    fn chain(&self, rank: u32, g: u64) -> Result<Arc<OwnerChain>> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = open.get(&(rank, g)) {
            return Ok(c.clone());
        }
        let store = self.root.rank_store(rank, false)?;
        let index = ChainIndex::load(store.as_ref())?;
        let chain = OpenChain::open(store.as_ref(), &index, g)?;
        let c = Arc::new(OwnerChain {
            _store: store,
            chain,
        });
        open.insert((rank, g), c.clone());
        Ok(c)
    }
}

impl XrefSource for JobXrefs {
    fn read(&self, x: &Xref, out: &mut [u8]) -> Result<()> {
        let oc = self.chain(x.owner_rank, x.owner_generation)?;
        let chain = &oc.chain;
        let layer = chain.gens.len() - 1;
        let g = &chain.gens[layer];
        let Ok(pos) = g.ptable.pages.binary_search(&x.owner_page) else {
            return Err(Error::chain(
                g.ptable.path.clone(),
                format!(
                    "rank {}'s generation {} does not write page {:#x}, which a cross-rank reference names",
                    x.owner_rank, x.owner_generation, x.owner_page
                ),
            ));
        };
        let lp = LivePage {
            page: x.owner_page,
            layer: layer as u32,
            pos: pos as u64,
        };
        // A stored page is never itself a reference: no chains of
        // references, no cycles.
        if chain.xref(lp).is_some() {
            return Err(Error::chain(
                g.ptable.path.clone(),
                format!(
                    "page {:#x} of rank {}'s generation {} is itself a cross-rank reference",
                    x.owner_page, x.owner_rank, x.owner_generation
                ),
            ));
        }
        if out.len() != chain.manifest().page_size as usize {
            return Err(Error::chain(
                g.ptable.path.clone(),
                format!(
                    "rank {}'s pages are {} bytes, the referring rank's {}",
                    x.owner_rank,
                    chain.manifest().page_size,
                    out.len()
                ),
            ));
        }
        chain.read_page(lp, out)
    }
}

/// The newest committed job generation (`None`: nothing committed yet).
/// A job manifest newer than it that cannot be read is refused, never
/// passed over: the job generation it was may have committed, and the
/// older one is then not the job's newest state (`--job-generation` names
/// an older one explicitly).
pub fn newest_committed(root: &JobRoot, jobs: &JobIndex) -> Result<Option<JobManifest>> {
    let newest = jobs.newest();
    let newer_bad = jobs
        .invalid
        .iter()
        .filter(|(j, _)| newest.is_none_or(|m| *j > m.job_generation))
        .max_by_key(|(j, _)| *j);
    if let Some((j, e)) = newer_bad {
        return Err(Error::chain(
            root.describe(),
            format!(
                "job generation {j}, the newest, is invalid: {}{}",
                e.report(),
                match newest {
                    Some(m) => format!(
                        "; give --job-generation {} to restore the one before it",
                        m.job_generation
                    ),
                    None => String::new(),
                }
            ),
        ));
    }
    Ok(newest.cloned())
}

/// The generation of rank `rank` that the newest job generation names,
/// checked against its committed manifest bytes, and that job generation.
pub fn newest_member(root: &JobRoot, rank: u32, store: &dyn Store) -> Result<(JobManifest, u64)> {
    let jobs = JobIndex::load(root.job_store(false)?.as_ref())?;
    let Some(jm) = newest_committed(root, &jobs)? else {
        return Err(Error::chain(root.describe(), "no complete job generation"));
    };
    let g = check_member(store, &jm, rank)?;
    Ok((jm, g))
}

/// The states rank `rank` can stand at ([`crate::l2::push::stands`]): its
/// part of the newest committed job generation, and its pending
/// checkpoints after it in `l1` (its L1/R; `None`: from L2 alone).
pub fn rank_stands(
    root: &JobRoot,
    rank: u32,
    l1: Option<&Path>,
) -> Result<Vec<crate::l2::push::Stand>> {
    let jobs = JobIndex::load(root.job_store(false)?.as_ref())?;
    let store = root.rank_store(rank, false)?;
    let member = match newest_committed(root, &jobs)? {
        Some(jm) => {
            let g = check_member(store.as_ref(), &jm, rank)?;
            Some(
                ChainIndex::load(store.as_ref())?
                    .get(g)
                    .cloned()
                    .ok_or_else(|| {
                        Error::chain(
                            store.describe(),
                            format!("generation {g} is not in the chain"),
                        )
                    })?,
            )
        }
        None => None,
    };
    let pending = match l1 {
        Some(d) => {
            crate::l1::L1Dir::scan_after(d, member.as_ref().map(crate::l1::Covered::from))?.files
        }
        None => Vec::new(),
    };
    Ok(crate::l2::push::stands(member.as_ref(), &pending))
}

/// Restores rank `rank` of the job at `root` from L2 alone: its generation
/// of the newest job generation (or of job generation `job_generation`),
/// its pages stored by other ranks read from theirs.
///
/// With `opts.fallback` and no `job_generation`: the newest committed job
/// generation whose part of this rank restores, each one that does not
/// (its data damaged or missing) said in the report; a store out of reach
/// is an error, never a reason to restore an older state.
///
/// The newest state (no `job_generation`) is taken again, up to 8 times,
/// when an attempt fails or falls back while the job manifests changed: a
/// collective push that committed a newer job generation and pruned the
/// one being read meanwhile, as [`restore_l2`] does for one chain.
pub fn restore_rank(
    root: &JobRoot,
    rank: u32,
    job_generation: Option<u64>,
    opts: &RestoreOptions,
    out: &Path,
) -> Result<(RestoreReport, u64)> {
    if job_generation.is_some() {
        return restore_rank_once(root, rank, job_generation, opts, out);
    }
    let jobs = root.job_store(false)?;
    let manifests = || -> Result<Vec<String>> {
        Ok(jobs
            .list()?
            .into_iter()
            .filter(|o| parse_job_manifest_name(&o.name).is_some())
            .map(|o| o.name)
            .collect())
    };
    let mut listed = manifests()?;
    for _ in 0..8 {
        let r = restore_rank_once(root, rank, None, opts, out);
        let retry = match &r {
            Err(_) => true,
            Ok((rep, _)) => rep.fell_back.is_some(),
        };
        if !retry {
            return r;
        }
        match manifests() {
            Ok(now) if now != listed => listed = now,
            _ => return r,
        }
    }
    restore_rank_once(root, rank, None, opts, out)
}

fn restore_rank_once(
    root: &JobRoot,
    rank: u32,
    job_generation: Option<u64>,
    opts: &RestoreOptions,
    out: &Path,
) -> Result<(RestoreReport, u64)> {
    if opts.fallback && job_generation.is_none() {
        return restore_rank_fallback(root, rank, opts, out);
    }
    let store = root.rank_store(rank, false)?;
    let (jm, g) = match job_generation {
        None => newest_member(root, rank, store.as_ref())?,
        Some(j) => {
            let jm = read_job_manifest(root.job_store(false)?.as_ref(), j)?;
            let g = check_member(store.as_ref(), &jm, rank)?;
            (jm, g)
        }
    };
    // `--seq S` from L2 alone: S must be the job generation's own state.
    if let Some(s) = opts.seq {
        let index = ChainIndex::load(store.as_ref())?;
        if let Some(m) = index.get(g).filter(|m| m.last_seq != s) {
            return Err(Error::chain(
                store.describe(),
                format!(
                    "checkpoint {s} is not rank {rank}'s state in job generation {} (generation {g}, seq {}..={}): from L2 alone a rank restores a job generation's state; give --l1 for its pending checkpoints",
                    jm.job_generation, m.first_seq, m.last_seq
                ),
            ));
        }
    }
    let opts = RestoreOptions {
        generation: Some(g),
        xref_source: Some(JobXrefs::new(root.clone())),
        ..opts.clone()
    };
    let r = restore_l2(store.as_ref(), &opts, out)?;
    Ok((r, jm.job_generation))
}

/// [`restore_rank`] with `--fallback`, from L2 alone: job generations
/// newest first.
fn restore_rank_fallback(
    root: &JobRoot,
    rank: u32,
    opts: &RestoreOptions,
    out: &Path,
) -> Result<(RestoreReport, u64)> {
    let jobs = JobIndex::load(root.job_store(false)?.as_ref())?;
    let opts = RestoreOptions {
        fallback: false,
        ..opts.clone()
    };
    let mut left_out = newer_invalid(&jobs);
    let mut first: Option<Error> = None;
    for jm in jobs.manifests.values().rev() {
        match restore_rank_once(root, rank, Some(jm.job_generation), &opts, out) {
            Ok((mut r, j)) => {
                if !left_out.is_empty() {
                    r.fell_back = Some(format!(
                        "restored job generation {j} (seq {}): {}",
                        r.seq,
                        left_out.join("; ")
                    ));
                }
                return Ok((r, j));
            }
            Err(e) if e.is_about_data() => {
                left_out.push(format!(
                    "job generation {} is unusable for rank {rank}: {}",
                    jm.job_generation,
                    e.report()
                ));
                first.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    Err(match first {
        Some(e) if left_out.len() > 1 => Error::chain(
            root.describe(),
            format!(
                "{} (--fallback: no job generation restores: {})",
                e.report(),
                left_out.join("; ")
            ),
        ),
        Some(e) => e,
        None => Error::chain(
            root.describe(),
            format!(
                "no complete job generation{}",
                if left_out.is_empty() {
                    String::new()
                } else {
                    format!(": {}", left_out.join("; "))
                }
            ),
        ),
    })
}

/// What `--fallback` says of the job manifests newer than the newest valid
/// one: each cannot be read (a job generation that may have committed).
fn newer_invalid(jobs: &JobIndex) -> Vec<String> {
    let newest = jobs.newest().map(|m| m.job_generation);
    jobs.invalid
        .iter()
        .filter(|(j, _)| newest.is_none_or(|n| *j > n))
        .map(|(j, e)| format!("job generation {j} is invalid: {}", e.report()))
        .collect()
}

/// The newest committed job generation in which rank `rank`'s generation
/// ends at checkpoint `seq`: where a rank restores the job's common state
/// when another rank fell back to an older job generation. Job manifests
/// and generations that cannot be read are passed over (the restore of
/// the one found checks everything it reads).
pub fn job_generation_ending_at(root: &JobRoot, rank: u32, seq: u64) -> Result<Option<u64>> {
    let jobs = JobIndex::load(root.job_store(false)?.as_ref())?;
    let store = root.rank_store(rank, false)?;
    let index = ChainIndex::load(store.as_ref())?;
    Ok(jobs
        .manifests
        .values()
        .rev()
        .find(|jm| {
            jm.member(rank)
                .and_then(|m| index.get(m.generation))
                .is_some_and(|m| m.last_seq == seq && m.job_generation == Some(jm.job_generation))
        })
        .map(|jm| jm.job_generation))
}

/// Restores rank `rank` of the job at `root` from its L1 directory `l1`
/// plus L2 (a transient fault: the node kept its L1): the rank's
/// generation of the newest job generation, from L2 or L1's copy, plus the
/// rank's checkpoints still pending in `l1` (those of a collective push
/// that never committed among them). Nothing is changed: the rank's
/// generations that never committed are left out, not rolled back (the
/// next push does that). Returns the report and the job generation the
/// state builds on (`None`: the pending checkpoints alone).
///
/// With `opts.fallback`, the rank's newest valid state instead of an
/// error, as a single chain's `--fallback` finds it (damaged pending
/// checkpoints left out, a pending FULL checkpoint, an older generation),
/// held to the job's: an older generation must be the rank's part of an
/// older committed job generation, which is then the one returned. A
/// newest job manifest that cannot be read is passed over, and so is a
/// member whose manifest cannot be read in either copy; the report says
/// so.
pub fn restore_rank_l1(
    root: &JobRoot,
    rank: u32,
    l1: &Path,
    opts: &RestoreOptions,
    out: &Path,
) -> Result<(RestoreReport, Option<u64>)> {
    let jobs = JobIndex::load(root.job_store(false)?.as_ref())?;
    let mut passed_over = Vec::new();
    let committed = match newest_committed(root, &jobs) {
        Err(e) if opts.fallback && e.is_about_data() => {
            passed_over.extend(newer_invalid(&jobs));
            jobs.newest().cloned()
        }
        r => r?,
    };
    let job = Job::open_read(l1, root.rank_store(rank, false)?)?;
    // A newer job generation committed, whose job manifest L2 lost (the
    // rank's L1 keeps a copy): the newest valid one is not the job's
    // newest state. Refused, or passed over with --fallback; a push or a
    // librex restart puts the job manifest back.
    if let Some((why, invalid)) = lost_job_manifest_why(root, &job, rank, &jobs)? {
        if !opts.fallback {
            return Err(Error::chain(root.describe(), why));
        }
        if !invalid {
            passed_over.push(why);
        }
    }
    // The member's manifest bytes are checked in L2, else in L1's copy
    // (each restores the generation, L2's copy first).
    let member = match committed
        .as_ref()
        .map(|jm| {
            check_member(job.l2.as_ref(), jm, rank)
                .or_else(|e| check_member(&job.l1_chain, jm, rank).map_err(|_| e))
        })
        .transpose()
    {
        Err(e) if opts.fallback && e.is_about_data() => {
            passed_over.push(format!(
                "rank {rank}'s part of job generation {} cannot be read: {}",
                committed.as_ref().map_or(0, |m| m.job_generation),
                e.report()
            ));
            None
        }
        r => r?,
    };
    // `--seq S` before the member: the job generation's state is newer than
    // S, and the rank's own chain has no older state to offer (L2 has it,
    // by an older job generation). Unless a pending run of another chain
    // begins at or below S: seqs do not order runs (a job restarted by hand
    // numbers from 0 again), and S is then that newer run's (helper-109:
    // no command restored a restarted job's common seq below its member).
    if let (Some(s), Some(g), Some(jm)) = (opts.seq, member, committed.as_ref()) {
        let index =
            ChainIndex::load(job.l2.as_ref())?.overlaid_with(&ChainIndex::load(&job.l1_chain)?);
        let newer_run = |m: &crate::format::manifest::Manifest| -> Result<bool> {
            Ok(
                crate::l1::L1Dir::scan_after(l1, Some(crate::l1::Covered::from(m)))?
                    .files
                    .iter()
                    .any(|f| f.is_full() && f.chain_id != m.chain_id && f.seq() <= s),
            )
        };
        if let Some(m) = index.get(g).filter(|m| m.last_seq > s)
            && !newer_run(m)?
        {
            return Err(Error::chain(
                job.l2.describe(),
                format!(
                    "checkpoint {s} is older than rank {rank}'s part of the newest job generation {} (generation {g}, seq {}..={}): restore an older job generation with --job-generation",
                    jm.job_generation, m.first_seq, m.last_seq
                ),
            ));
        }
    }
    let opts = RestoreOptions {
        generation: None,
        xref_source: Some(JobXrefs::new(root.clone())),
        job_committed: Some(committed.as_ref().map(|m| m.job_generation)),
        ..opts.clone()
    };
    let mut r = restore_l1_l2(&job, &opts, out)?;
    // A pending FULL checkpoint newer than the member is a newer state of
    // its own, from L1 alone: the rank's job restarted past a fallback and
    // started a new run (helper-63: every collective restore failed until
    // the next collective push). Of the member's run, its seq says so; of
    // another run, seqs do not order runs (a job restarted by hand counts
    // from 0 again: helper-89), and the restore took it over the member by
    // the run rules (§3.1.6: its FULL checkpoint is newer).
    let newer_full = r.generation.is_none()
        && r.pages == r.pages_from_l1_ics
        && member.is_some_and(|g| {
            ChainIndex::load(job.l2.as_ref())
                .ok()
                .and_then(|i| {
                    i.get(g).map(|m| {
                        m.last_seq < r.seq
                            || r.fell_back.is_none()
                                && r.chain_id.is_some()
                                && m.chain_id.is_some()
                                && r.chain_id != m.chain_id
                    })
                })
                .unwrap_or(false)
        });
    let builds_on = if r.generation == member || newer_full {
        committed.map(|m| m.job_generation)
    } else if let Some(j) = opts
        .fallback
        .then(|| fallen_back_to(&job, &jobs, rank, &r))
        .flatten()
    {
        // An older job generation's part, alone or with the pending
        // checkpoints the fallback found continuing it, or (`None`) a
        // pending FULL checkpoint.
        j
    } else {
        // Not reachable through pushes: a generation outside every job
        // generation would be it (a single-rank push onto a rank's chain,
        // which `push::recover` refuses).
        let _ = std::fs::remove_file(out);
        return Err(Error::chain(
            job.l2.describe(),
            format!(
                "rank {rank} restored generation {:?}, but its generation in the newest job generation is {member:?}",
                r.generation
            ),
        ));
    };
    if !passed_over.is_empty() {
        let inner = r.fell_back.take();
        r.fell_back = Some(format!(
            "{}{}",
            passed_over.join("; "),
            inner.map(|n| format!("; {n}")).unwrap_or_default()
        ));
    }
    Ok((r, builds_on))
}

/// Where a `--fallback` restore of a rank that did not reach its part of
/// the newest job generation stands: `Some(Some(j))`, the rank's part of
/// committed job generation `j` (its generation named by `j`'s job
/// manifest); `Some(None)`, the rank's pending checkpoints alone (a
/// FULL one restarts the state); `None`, neither: not the job's state.
fn fallen_back_to(job: &Job, jobs: &JobIndex, rank: u32, r: &RestoreReport) -> Option<Option<u64>> {
    let Some(g) = r.generation else {
        return (r.pages == r.pages_from_l1_ics).then_some(None);
    };
    let index = ChainIndex::load(job.l2.as_ref())
        .ok()?
        .overlaid_with(&ChainIndex::load(&job.l1_chain).ok()?);
    let j = index.get(g)?.job_generation?;
    let named = jobs.manifests.get(&j)?.member(rank)?.generation;
    (named == g).then_some(Some(j))
}

/// What a rank's L1 directory says of its generations of job generations
/// newer than the newest committed one: a collective push interrupted
/// before rank 0 wrote the job manifest, or one that committed and whose
/// job manifest was lost since. Made by [`rollback_plan`]; the ranks agree
/// on their plans (`crate::l2::collective::agree_rollback`) before any of
/// them runs [`rollback`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RollbackPlan {
    /// The newest committed job generation.
    pub committed: Option<u64>,
    /// Job generations this rank's L1 shows never committed: the
    /// checkpoints its generation of them holds are still pending (a
    /// collective push deletes them only once every rank knows the job
    /// manifest is written).
    pub witnessed: Vec<u64>,
    /// Generations `(generation, job generation, last seq)` whose
    /// checkpoints are gone from L1 while L1's copy of the chain lacks the
    /// generation too, which a commit would have left there (a push
    /// publishes L1's manifest before L2's): this rank's L1 was lost since
    /// (its node; or its copy was damaged), and it cannot tell whether they
    /// committed. Another rank's L1 may (helper-76: a node lost in the
    /// middle of a collective push was taken for a committed job generation
    /// whose job manifest was lost, and the job could never restart).
    pub unknown: Vec<(u64, u64, u64)>,
}

impl RollbackPlan {
    /// The plan as bytes, for the ranks' all-gather.
    pub fn encode(&self) -> Vec<u8> {
        let mut words = vec![
            self.committed.map_or(0, |c| c + 1),
            self.witnessed.len() as u64,
        ];
        words.extend(&self.witnessed);
        words.extend(self.unknown.iter().flat_map(|&(g, j, s)| [g, j, s]));
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// A plan from [`RollbackPlan::encode`]'s bytes (`None`: not such
    /// bytes).
    pub fn decode(b: &[u8]) -> Option<RollbackPlan> {
        if !b.len().is_multiple_of(8) {
            return None;
        }
        let words: Vec<u64> = b
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(std::array::from_fn(|i| c[i])))
            .collect();
        let (&c, rest) = words.split_first()?;
        let (&n, rest) = rest.split_first()?;
        let n = usize::try_from(n).ok().filter(|&n| n <= rest.len())?;
        let (witnessed, unknown) = rest.split_at(n);
        if !unknown.len().is_multiple_of(3) {
            return None;
        }
        Some(RollbackPlan {
            committed: c.checked_sub(1),
            witnessed: witnessed.to_vec(),
            unknown: unknown
                .chunks_exact(3)
                .map(|u| (u[0], u[1], u[2]))
                .collect(),
        })
    }
}

/// Whether `m` belongs to a job generation newer than `committed`.
fn uncommitted(m: &Manifest, committed: Option<u64>) -> bool {
    m.job_generation
        .is_some_and(|j| committed.is_none_or(|c| j > c))
}

/// What rank `job`'s L1 directory says of its generations of job
/// generations newer than `committed` ([`RollbackPlan`]). A generation
/// whose checkpoints are gone from L1 while L1's copy of the chain holds
/// it did commit (its IC files are deleted only after its job generation
/// commits), and its job manifest was lost since: refused, never rolled
/// back.
pub fn rollback_plan(job: &Job, committed: Option<u64>) -> Result<RollbackPlan> {
    // A job generation this rank saw commit (its copy of the job manifest)
    // is never rolled back here, whatever L2 lost since (helper-79: L2
    // wiped, a restart deleted every rank's L1 copy of the chain, and the
    // job started over with exit 0).
    let committed = committed.max(job_manifest_copy(job)?);
    let l2_index = ChainIndex::load(job.l2.as_ref())?;
    let l1_index = ChainIndex::load(&job.l1_chain)?;
    let kept_last = l2_index
        .manifests
        .values()
        .filter(|m| !uncommitted(m, committed))
        .map(|m| m.last_seq)
        .max();
    let pending: Vec<u64> = crate::l1::read_readable(&job.l1)
        .iter()
        .map(|f| f.seq())
        .collect();
    let mut plan = RollbackPlan {
        committed,
        ..RollbackPlan::default()
    };
    for m in l2_index
        .manifests
        .values()
        .filter(|m| uncommitted(m, committed))
    {
        // A generation of no new seqs (a complete coalescence of seqs an
        // older generation holds) tells nothing, and loses nothing.
        if kept_last.is_some_and(|k| m.last_seq <= k) {
            continue;
        }
        let j = m.job_generation.unwrap_or(0);
        if pending.contains(&m.last_seq) {
            plan.witnessed.push(j);
        } else if l1_index.get(m.generation) == Some(m) {
            return Err(Error::chain(
                job.l2.describe(),
                format!(
                    "generation {} of job generation {j} has no job manifest, but its checkpoints (up to seq {}) are gone from L1: it committed and its job manifest was lost; refusing to roll it back",
                    m.generation, m.last_seq
                ),
            ));
        } else {
            plan.unknown.push((m.generation, j, m.last_seq));
        }
    }
    Ok(plan)
}

/// Deletes rank `job`'s generations of job generations newer than the
/// plan's committed one (a collective push interrupted before rank 0
/// wrote the job manifest), from L2 first, then from L1's copy, manifests
/// before their files. Their IC files are still in L1 (a collective push
/// deletes them only after the job generation commits), or were lost with
/// the node while another rank's show the push unfinished, so the next
/// push pushes what is left again. Generations without a job generation
/// (single-rank pushes) are never touched. Call with the plans every rank
/// agreed on (`crate::l2::collective::agree_rollback`), under the writer
/// locks. Returns a note per generation deleted.
pub fn rollback(job: &Job, plan: &RollbackPlan) -> Result<Vec<String>> {
    let l2_index = ChainIndex::load(job.l2.as_ref())?;
    let l1_index = ChainIndex::load(&job.l1_chain)?;
    let mut notes = Vec::new();
    for (store, index, level) in [
        (job.l2.as_ref(), &l2_index, "L2"),
        (&job.l1_chain as &dyn Store, &l1_index, "L1"),
    ] {
        for m in index
            .manifests
            .values()
            .rev()
            .filter(|m| uncommitted(m, plan.committed))
        {
            store.delete(&manifest_name(m.generation))?;
            for f in &m.files {
                store.delete(&f.name)?;
            }
            notes.push(format!(
                "{level}: deleted generation {} of job generation {}, which never committed",
                m.generation,
                m.job_generation.unwrap_or(0)
            ));
        }
    }
    Ok(notes)
}

/// One rank's part of a job's status or verification.
#[derive(Clone, Debug, Serialize)]
pub struct RankCheck {
    /// The rank.
    pub rank: u32,
    /// Its generation in the newest job generation.
    pub generation: Option<u64>,
    /// What is wrong, if anything.
    pub error: Option<String>,
    /// Its verification (with `verify`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify: Option<VerifyReport>,
    /// Its L1 directory, when the job's was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub l1: Option<RankL1>,
}

/// A rank's L1 directory (`L1/R`), in a job's status or verification.
#[derive(Clone, Debug, Serialize)]
pub struct RankL1 {
    /// The directory.
    pub dir: std::path::PathBuf,
    /// It does not exist (a lost node, or a mistyped path).
    pub missing: bool,
    /// Checkpoints waiting there for the next push.
    pub pending_ics: usize,
    /// Their seqs.
    pub pending_seqs: Option<(u64, u64)>,
    /// Checkpoints librex set aside there.
    pub set_aside: Vec<std::path::PathBuf>,
    /// What is wrong with it: its pending checkpoints, its copy of the
    /// rank's chain (with `verify`: every finding).
    pub errors: Vec<String>,
}

/// A job's state: its job generations and each rank's part of the newest.
#[derive(Clone, Debug, Serialize)]
pub struct JobStatus {
    /// The job's location.
    pub location: String,
    /// Valid job generations, ascending.
    pub job_generations: Vec<u64>,
    /// Invalid job manifests, with the reason.
    pub invalid: Vec<String>,
    /// Ranks of the newest job generation.
    pub ranks: u32,
    /// Each rank of the newest job generation.
    pub members: Vec<RankCheck>,
}

/// The state of the job at `root`; with `verify`, every rank's chains are
/// checked end to end too (pages stored by other ranks read from theirs).
/// With the job's L1 directory `l1_root`, each rank's `l1_root/R` too (its
/// pending checkpoints; with `verify`, its copy of the rank's chain, as a
/// single chain's verify does). With `only`, rank `only` alone.
///
/// An `l1_root` under which no rank of the job has its directory names
/// nothing of this job (a mistyped path): refused, as a collective restore
/// refuses it.
pub fn job_status(
    root: &JobRoot,
    verify: bool,
    l1_root: Option<&Path>,
    only: Option<u32>,
) -> Result<JobStatus> {
    let jobs = JobIndex::load(root.job_store(false)?.as_ref())?;
    let mut st = JobStatus {
        location: root.describe(),
        job_generations: jobs.manifests.keys().copied().collect(),
        invalid: jobs
            .invalid
            .iter()
            .map(|(j, e)| format!("job generation {j}: {}", e.report()))
            .collect(),
        ranks: 0,
        members: Vec::new(),
    };
    let Some(jm) = jobs.newest() else {
        return Ok(st);
    };
    st.ranks = jm.ranks;
    let ranks: Vec<u32> = match only {
        Some(r) if r >= jm.ranks => {
            return Err(Error::Invalid(format!(
                "--rank {r}: the job at {} has {} ranks (job generation {})",
                root.describe(),
                jm.ranks,
                jm.job_generation
            )));
        }
        Some(r) => vec![r],
        None => (0..jm.ranks).collect(),
    };
    if let Some(l1) = l1_root {
        check_l1_root(l1, jm.ranks)?;
    }
    let job_xrefs = JobXrefs::new(root.clone());
    let xrefs: Arc<dyn XrefSource> = job_xrefs.clone();
    let committed = Some(jm.job_generation);
    for rank in ranks {
        let mut rc = RankCheck {
            rank,
            generation: None,
            error: None,
            verify: None,
            l1: None,
        };
        let dir = l1_root.map(|l| l.join(rank.to_string()));
        // Messages name a bucket's objects by their URLs, not by the
        // local cache paths they were read from (helper-71).
        let mut public: Vec<Box<dyn Store>> = Vec::new();
        let r = root.rank_store(rank, false).and_then(|store| {
            rc.generation = Some(check_member(store.as_ref(), jm, rank)?);
            let job = match &dir {
                Some(d) if d.is_dir() => Some(Job::open_read(d, root.rank_store(rank, false)?)?),
                _ => None,
            };
            let r = (|| {
                if verify {
                    rc.verify = Some(crate::l2::restore::verify_with(
                        store.as_ref(),
                        job.as_ref(),
                        Some(&xrefs),
                        committed,
                    )?);
                }
                if let Some(job) = &job {
                    rc.l1 = Some(rank_l1(job, committed, rc.verify.as_mut())?);
                }
                Ok(())
            })();
            public.push(store);
            public.extend(job.map(|j| j.l2));
            r
        });
        rc.error = r.err().map(|e| e.report());
        let name = |t: &str| {
            public
                .iter()
                .fold(job_xrefs.public_text(t), |t, s| s.public_text(&t))
        };
        for t in rc
            .error
            .iter_mut()
            .chain(rc.l1.iter_mut().flat_map(|l| l.errors.iter_mut()))
        {
            *t = name(t);
        }
        if let Some(v) = &mut rc.verify {
            for t in v
                .invalid_manifests
                .iter_mut()
                .chain(v.l1_errors.iter_mut())
                .chain(v.generations.iter_mut().filter_map(|g| g.error.as_mut()))
            {
                *t = name(t);
            }
        }
        if let Some(d) = dir
            && rc.l1.is_none()
            && !d.is_dir()
        {
            rc.l1 = Some(RankL1 {
                errors: vec![format!(
                    "{}: no such directory (a lost node? its restore reads L2 alone)",
                    d.display()
                )],
                dir: d,
                missing: true,
                pending_ics: 0,
                pending_seqs: None,
                set_aside: Vec::new(),
            });
        }
        st.members.push(rc);
    }
    Ok(st)
}

/// Refuses a job's L1 directory `l1` under which none of its `ranks` has
/// its subdirectory `l1/R`: a mistyped path, which would read as every
/// node lost (helper-66, helper-71).
pub fn check_l1_root(l1: &Path, ranks: u32) -> Result<()> {
    if (0..ranks).any(|r| l1.join(r.to_string()).is_dir()) {
        return Ok(());
    }
    Err(Error::Invalid(format!(
        "L1 directory {}: none of the job's {ranks} ranks has its subdirectory there ({}): a mistyped --l1? Leave it out (or give --l2-only) to read L2 alone",
        l1.display(),
        l1.join("R").display()
    )))
}

/// What a rank's L1 directory holds; the L1 findings of its verification
/// (`verified`) are moved into it.
fn rank_l1(
    job: &Job,
    committed: Option<u64>,
    verified: Option<&mut VerifyReport>,
) -> Result<RankL1> {
    let s = crate::l2::status::status_committed(job, committed)?;
    let mut errors: Vec<String> = s
        .invalid
        .iter()
        .filter(|e| e.starts_with("L1 "))
        .cloned()
        .collect();
    errors.extend(s.pending_error);
    if let Some(v) = verified {
        for e in std::mem::take(&mut v.l1_errors) {
            if !errors.contains(&e) {
                errors.push(e);
            }
        }
    }
    Ok(RankL1 {
        dir: job.l1.clone(),
        missing: false,
        pending_ics: s.pending_ics,
        pending_seqs: s.pending_seqs,
        set_aside: s.set_aside,
        errors,
    })
}

impl JobStatus {
    /// Whether every rank of the newest job generation is whole (and, if
    /// verified, every generation of every rank checked out).
    pub fn ok(&self) -> bool {
        self.invalid.is_empty()
            && self.members.iter().all(|m| {
                m.error.is_none()
                    && m.l1.as_ref().is_none_or(|l| l.errors.is_empty())
                    && m.verify.as_ref().is_none_or(|v| {
                        v.invalid_manifests.is_empty()
                            && v.l1_errors.is_empty()
                            && v.generations.iter().all(|g| g.error.is_none())
                    })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::RollbackPlan;

    #[test]
    fn a_rollback_plan_survives_its_all_gather_and_nothing_else_decodes() {
        for p in [
            RollbackPlan::default(),
            RollbackPlan {
                committed: Some(0),
                witnessed: vec![3, 4],
                unknown: vec![(9, 4, 21), (10, 5, u64::MAX)],
            },
            RollbackPlan {
                committed: Some(7),
                witnessed: Vec::new(),
                unknown: vec![(1, 2, 3)],
            },
        ] {
            let b = p.encode();
            assert_eq!(RollbackPlan::decode(&b), Some(p.clone()));
            // Cut anywhere but between whole entries, or one word too
            // many: not a plan.
            let n = p.witnessed.len();
            for cut in 0..b.len() {
                let words = cut / 8;
                let whole = cut % 8 == 0 && words >= 2 + n && (words - 2 - n) % 3 == 0;
                let got = RollbackPlan::decode(&b[..cut]);
                assert_eq!(got.is_some(), whole, "{p:?} cut at {cut}");
            }
            let mut more = b.clone();
            more.extend_from_slice(&1u64.to_le_bytes());
            assert_eq!(RollbackPlan::decode(&more), None);
        }
        // A count beyond the words there are.
        let mut b = RollbackPlan::default().encode();
        b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(RollbackPlan::decode(&b), None);
    }
}
