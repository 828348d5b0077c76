//! Subcommands of the L2 side: `push-l2`, `restore`, `verify`, `status`, `gc`;
//! `status` and `verify` of an MPI job's location (`run_job`).

pub mod gc;
pub mod push;
pub mod replicate;
pub mod restore;
pub mod status;
pub mod verify;

use rexctl::l2::jobgen::{JobIndex, JobStatus, job_status};
use rexctl::store::JobRoot;

use crate::cmd::config_args::Settings;
use crate::ui;

/// The MPI job whose location `--l2` names (it holds job generations,
/// written by `push-l2 --collective`), if it is one.
pub fn job_root(s: &Settings) -> anyhow::Result<Option<JobRoot>> {
    Ok(job_index(s)?.map(|(root, _)| root))
}

/// [`job_root`] with the job's index of job generations (read once).
pub fn job_index(s: &Settings) -> anyhow::Result<Option<(JobRoot, JobIndex)>> {
    let root = JobRoot::new(s.l2()?, &s.store()?)?;
    let jobs = JobIndex::load(root.job_store(false)?.as_ref())?;
    Ok((!jobs.manifests.is_empty() || !jobs.invalid.is_empty()).then_some((root, jobs)))
}

/// The job and rank `--rank R` (REX_RANK, rex.toml: named by hand) names
/// on the location of an MPI job none of whose job generations committed
/// yet (its first collective push killed, or none run): no chain of its own
/// at the location itself, and rank R's chain in L2/R or its L1 directory
/// L1/R. Rank R then restores from L1/R, its uncommitted part in L2 left
/// out (helper-102: the single chain's restore read L1's top and said
/// "nothing to restore", exit 3, while L1/R held every checkpoint).
pub fn uncommitted_job_rank(s: &Settings) -> anyhow::Result<Option<(JobRoot, u32)>> {
    let Some(rank) = s.layer.rank.as_ref().and_then(|r| r.parse::<u32>().ok()) else {
        return Ok(None);
    };
    let Some((root, l1)) = uncommitted_job(s)? else {
        return Ok(None);
    };
    let in_l1 = l1
        .as_ref()
        .is_some_and(|l1| l1.join(rank.to_string()).is_dir());
    Ok((in_l1 || rank_chain(&root, rank)?).then_some((root, rank)))
}

/// The MPI job at the location `--l2` names when none of its job
/// generations committed yet (as [`uncommitted_job_rank`] finds one), with
/// its ranks: the numbered directories of its L1 directory that hold
/// checkpoints or a copy of a chain, and the numbered directories of a
/// directory L2 that hold a rank's chain (manifests of a job generation).
/// A bucket's ranks are not listed: only L1's are found there. `None` when
/// there is none, or the location holds a chain of its own.
pub fn uncommitted_job_ranks(s: &Settings) -> anyhow::Result<Option<UncommittedJob>> {
    let Some((root, l1)) = uncommitted_job(s)? else {
        return Ok(None);
    };
    let numbered = |d: &std::path::Path| -> Vec<u32> {
        std::fs::read_dir(d)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .collect()
    };
    let mut ranks = Vec::new();
    if let Some(l1) = &l1 {
        for r in numbered(l1) {
            let d = l1.join(r.to_string());
            if rexctl::l2::push::holds_checkpoints(&d)? {
                ranks.push(r);
            }
        }
    }
    let listed_l2 = match rexctl::store::L2Location::parse(&s.l2()?) {
        Ok(rexctl::store::L2Location::Dir(d)) => {
            for r in numbered(&d) {
                if rank_chain(&root, r)? {
                    ranks.push(r);
                }
            }
            true
        }
        _ => false,
    };
    ranks.sort_unstable();
    ranks.dedup();
    Ok((!ranks.is_empty()).then_some(UncommittedJob {
        root,
        l1,
        ranks,
        listed_l2,
    }))
}

/// An MPI job's location with no committed job generation, and the ranks
/// found ([`uncommitted_job_ranks`]).
pub struct UncommittedJob {
    pub root: JobRoot,
    /// The job's L1 directory, when given.
    pub l1: Option<std::path::PathBuf>,
    /// The ranks found, ascending.
    pub ranks: Vec<u32>,
    /// Whether L2's rank directories were listed too (a directory L2).
    pub listed_l2: bool,
}

/// The location's root and its L1 directory when neither holds a single
/// chain of its own (no generation outside a job generation where `--l2`
/// itself opens: L2's top, or in a bucket the rank's prefix; no checkpoint
/// or copy of the chain in L1 itself): it may be an MPI job's with nothing
/// committed. (helper-109: in a bucket, the location opens at the rank's
/// own prefix, whose generations of the killed first push read as a single
/// chain's.)
fn uncommitted_job(s: &Settings) -> anyhow::Result<Option<(JobRoot, Option<std::path::PathBuf>)>> {
    let at_top = rexctl::l2::chain::ChainIndex::load(
        rexctl::store::open_l2_read(&s.l2()?, &s.store()?)?.as_ref(),
    )?;
    if at_top
        .manifests
        .values()
        .any(|m| m.job_generation.is_none())
        || (at_top.manifests.is_empty() && !at_top.invalid.is_empty())
    {
        return Ok(None);
    }
    // An L1 directory of a single chain (checkpoints, or its copy of the
    // chain, at its top) is that chain's, whatever subdirectories it holds
    // (helper-104: an unrelated L1/0 was restored).
    let l1 = s.opt_l1()?;
    if let Some(l1) = l1.as_ref().filter(|d| d.is_dir())
        && rexctl::l2::push::holds_checkpoints(l1)?
    {
        return Ok(None);
    }
    let root = JobRoot::new(s.l2()?, &s.store()?)?;
    Ok(Some((root, l1)))
}

/// Whether rank `rank` has a chain of an MPI job in L2/R: a generation
/// of a job generation, or a manifest that cannot be read.
fn rank_chain(root: &JobRoot, rank: u32) -> anyhow::Result<bool> {
    let c = rexctl::l2::chain::ChainIndex::load(root.rank_store(rank, false)?.as_ref())?;
    Ok(c.manifests.values().any(|m| m.job_generation.is_some())
        || (c.manifests.is_empty() && !c.invalid.is_empty()))
}

/// The rank `--rank` (or REX_RANK) names, when the location is an MPI
/// job's: its ranks are numbers.
pub fn job_rank(s: &Settings) -> anyhow::Result<Option<u32>> {
    match &s.layer.rank {
        None => Ok(None),
        Some(r) => Ok(Some(r.parse::<u32>().map_err(|_| {
            rexctl::Error::Invalid(format!("--rank {r}: the ranks of an MPI job are numbers"))
        })?)),
    }
}

/// `status` or `verify` of an MPI job: its job generations and each rank's
/// part of the newest (rank `only` alone, with `--rank`), with `l1_root`
/// each rank's L1 directory too. Exits 3 when a rank's part is missing or
/// bad.
pub fn run_job(
    root: &JobRoot,
    verify: bool,
    l1_root: Option<&std::path::Path>,
    only: Option<u32>,
    json: bool,
    repair: Option<&rexctl::l2::repair::RepairReport>,
) -> anyhow::Result<i32> {
    let pb = ui::spinner(if verify { "verifying" } else { "reading" });
    let st = job_status(root, verify, l1_root, only);
    pb.finish_and_clear();
    let st: JobStatus = st?;
    if json {
        match repair {
            Some(r) => ui::print_json(&serde_json::json!({ "repair": r, "verify": &st }))?,
            None => ui::print_json(&st)?,
        }
    } else {
        outln!(
            "MPI job at {}: job generations {:?}, {} ranks in the newest",
            st.location,
            st.job_generations,
            st.ranks
        );
        for m in &st.members {
            let bad = m.verify.as_ref().map_or(0, |v| {
                v.generations.iter().filter(|g| g.error.is_some()).count()
            });
            let gens = m.verify.as_ref().map(|v| {
                format!(
                    "; {} generations verified, {} pages rebuilt{}",
                    v.generations.len(),
                    v.pages_checked,
                    if bad > 0 {
                        format!(", {bad} BAD")
                    } else {
                        String::new()
                    }
                )
            });
            match &m.error {
                // A rank with a generation that fails is not ok (helper-66:
                // "1 BAD: ok"); its generations are listed below.
                None => outln!(
                    "rank {}: generation {}{}: {}",
                    m.rank,
                    m.generation.map_or("-".into(), |g| g.to_string()),
                    gens.unwrap_or_default(),
                    // Nor one whose invalid manifests verify found
                    // (helper-89: "ok" above its out-of-order generation).
                    if bad > 0
                        || m.verify.as_ref().is_some_and(|v| !v.ok())
                        || m.l1.as_ref().is_some_and(|l| !l.errors.is_empty())
                    {
                        ui::bad("BAD")
                    } else {
                        ui::good("ok")
                    }
                ),
                Some(e) => outln!("rank {}: {}: {e}", m.rank, ui::bad("BAD")),
            }
            if let Some(v) = &m.verify {
                for g in v.generations.iter().filter(|g| g.error.is_some()) {
                    outln!(
                        "rank {} {} generation {}: {}: {}",
                        m.rank,
                        g.level,
                        g.generation,
                        ui::bad("BAD"),
                        g.error.as_deref().unwrap_or("")
                    );
                }
                for e in &v.invalid_manifests {
                    outln!("rank {}: {}: {e}", m.rank, ui::bad("BAD"));
                }
            }
            if let Some(l1) = &m.l1 {
                // What is pending, when it could be read (helper-69: "no
                // checkpoint pending" beside a pending file that failed).
                if !l1.missing && (l1.pending_seqs.is_some() || l1.errors.is_empty()) {
                    outln!(
                        "rank {} L1 {}: {}{}",
                        m.rank,
                        l1.dir.display(),
                        match l1.pending_seqs {
                            Some((a, b)) => format!(
                                "{} pending (seqs {a}..={b})",
                                ui::count(l1.pending_ics as u64, "checkpoint")
                            ),
                            None => "no checkpoint pending".into(),
                        },
                        if l1.set_aside.is_empty() {
                            String::new()
                        } else {
                            format!(", {} set aside", l1.set_aside.len())
                        }
                    );
                }
                for e in &l1.errors {
                    outln!("rank {} L1: {}: {e}", m.rank, ui::bad("BAD"));
                }
            }
        }
        for i in &st.invalid {
            outln!("{}: {i}", ui::bad("BAD"));
        }
    }
    if st.job_generations.is_empty() || !st.ok() {
        // Said on standard error too, which `-q` keeps (helper-71: a
        // failing job verify was silent under -q).
        let mut said = false;
        for m in &st.members {
            let gens = m
                .verify
                .iter()
                .flat_map(|v| v.generations.iter())
                .filter_map(|g| {
                    g.error
                        .as_ref()
                        .map(|e| format!("{} generation {}: {e}", g.level, g.generation))
                });
            let other = m
                .verify
                .iter()
                .flat_map(|v| v.invalid_manifests.iter().chain(&v.l1_errors))
                .cloned();
            let l1 = m.l1.iter().flat_map(|l| l.errors.iter()).cloned();
            for e in m.error.iter().cloned().chain(gens).chain(other).chain(l1) {
                ui::error(&format!("rank {}: {e}", m.rank));
                said = true;
            }
        }
        for i in &st.invalid {
            ui::error(i);
            said = true;
        }
        if !said {
            ui::error(&format!("{}: no job generation", st.location));
        }
        return Ok(rexctl::error::exit::DATA);
    }
    Ok(0)
}
