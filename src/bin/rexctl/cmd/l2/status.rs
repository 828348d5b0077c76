//! `rexctl status`: generations, chains, pending checkpoints.

use rexctl::control::config::ConfigLayer;
use rexctl::format::manifest::GenKind;
use rexctl::l2::push::Job;
use rexctl::l2::status::{Status, status};

use crate::cmd::config_args::Settings;
use crate::ui;

/// Show a job's state: L2 generations (kind, seqs, pages, sizes,
/// compression ratios), chains, and the L1 checkpoints waiting for the next
/// push. Reads only: a directory L2 that does not exist yet shows no
/// generation. Exits 3 when a pending checkpoint's header or a manifest is
/// bad, or a file a manifest names is missing or of another size. It reads
/// manifests, listings and headers, not data (with one exception: when
/// L1's copy of the chain lies wholly above L2's newest generation and
/// holds none of its run, it reads the L2 objects named as that copy's
/// files, smallest first, to tell another job's copy from this job's):
/// `rexctl verify` checks every byte.
///
/// On an MPI job's location (written by `push-l2 --collective` or librex):
/// its job generations and each rank's generation in the newest, checked
/// against the manifest bytes the job generation committed, and with the
/// job's L1 directory each rank's pending checkpoints in L1/R (a missing
/// L1/R is reported: a lost node). With --rank R: rank R's chain and L1/R,
/// as a single job's. Before its first job generation commits (its first
/// collective push killed, or none run): each rank's pending checkpoints
/// in L1/R, for the ranks found (L1/R holding checkpoints, L2/R a rank's
/// chain in a directory L2); exit 3 when a rank has no L1/R (one in L2, or
/// below a rank found: its node lost), or L1/R's copy of a job manifest
/// says one committed that L2 lost; --rank R of no rank found is refused
/// (exit 5).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    settings: ConfigLayer,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let s = Settings::load(&a.settings)?;
    // An MPI job's location: its job generations and every rank's part;
    // with --rank R, rank R's chain and L1/R as a single job's.
    let mut l2 = None;
    let mut l1 = None;
    let mut member_error = None;
    let mut committed = None;
    if s.layer.l2.is_some()
        && let Some(root) = super::job_root(&s)?
    {
        let l1_root = s.opt_l1()?;
        let rank = super::job_rank(&s)?;
        // The job's view: every rank, or rank R whose L1/R is missing (a
        // lost node, said as the job's view says it: helper-71, exit 5).
        let Some(rank) = rank.filter(|r| {
            l1_root
                .as_ref()
                .is_some_and(|l| l.join(r.to_string()).is_dir())
        }) else {
            return super::run_job(&root, false, l1_root.as_deref(), rank, a.json, None);
        };
        // Its part of the newest job generation (an unknown rank is
        // refused here), and what is wrong with the job's manifests
        // (helper-71: a damaged newest one went unsaid with --rank).
        let st = rexctl::l2::jobgen::job_status(&root, false, None, Some(rank))?;
        let member = st.members.first();
        member_error = member
            .and_then(|m| m.error.clone())
            .into_iter()
            .chain(st.invalid.iter().cloned())
            .reduce(|a, b| format!("{a}; {b}"));
        committed = st.job_generations.last().copied();
        if !a.json {
            outln!(
                "rank {rank} of the MPI job at {}: {}",
                st.location,
                match (member.and_then(|m| m.generation), st.job_generations.last()) {
                    (Some(g), Some(j)) if member_error.is_none() => {
                        format!("generation {g} in job generation {j}")
                    }
                    _ => format!(
                        "{}: {}",
                        ui::bad("BAD"),
                        member_error
                            .as_deref()
                            .unwrap_or("no part in the newest job generation")
                    ),
                }
            );
        }
        l2 = Some(root.rank_store(rank, false)?);
        l1 = Some(s.l1()?.join(rank.to_string()));
    } else if s.layer.l2.is_some() {
        // An MPI job's location none of whose job generations committed
        // yet: its top holds no chain, and the single chain's view said
        // "0 chains, no pending L1 checkpoint" (exit 0) while L1/R held
        // every rank's checkpoints.
        if let Some((root, rank)) = super::uncommitted_job_rank(&s)? {
            return uncommitted_rank(&s, &root, rank, a.json);
        }
        if let Some(job) = super::uncommitted_job_ranks(&s)? {
            if let Some(r) = &s.layer.rank {
                // A rank below the highest found: the job's, its node lost.
                if let Ok(r) = r.parse::<u32>()
                    && job.ranks.last().is_some_and(|&h| r < h)
                {
                    return uncommitted_rank(&s, &job.root, r, a.json);
                }
                // helper-109: the single chain's view said "0 chains, no
                // pending L1 checkpoint" (exit 0) for a rank the job has
                // not.
                return Err(rexctl::Error::Invalid(format!(
                    "--rank {r}: not a rank of the MPI job at {} (ranks found: {})",
                    job.root.describe(),
                    list(&job.ranks)
                ))
                .into());
            }
            return uncommitted_job(&job, a.json);
        }
    }
    let l1 = match l1 {
        Some(l1) => l1,
        None => s.l1()?,
    };
    // A directory L2 that no push has made yet reads as empty: status never
    // creates anything.
    let l2 = match l2 {
        Some(l2) => l2,
        None => rexctl::store::open_l2_read(&s.l2()?, &s.store()?)?,
    };
    let job = Job::open_read(&l1, l2)?;
    let st = match committed {
        Some(_) => rexctl::l2::status::status_committed(&job, committed),
        None => status(&job),
    }
    .map_err(|e| job.l2.public_error(e))?;
    let bad = st.pending_error.is_some() || !st.invalid.is_empty() || member_error.is_some();
    if a.json {
        ui::print_json(&st)?;
    } else {
        print_human(&job, &st)?;
    }
    if bad {
        if let Some(e) = &st.pending_error {
            ui::error(&format!("pending L1 checkpoints: {e}"));
        }
        for i in st.invalid.iter().chain(&member_error) {
            ui::error(i);
        }
        return Ok(rexctl::error::exit::DATA);
    }
    Ok(0)
}

/// One rank of an MPI job with no committed job generation.
#[derive(serde::Serialize)]
struct UncommittedRank {
    rank: u32,
    /// Its L1 directory, L1/R (`None`: missing, or no L1 given).
    l1: Option<std::path::PathBuf>,
    /// Its pending checkpoints, as a single chain's status shows them;
    /// its generations in L2 are left out (none committed).
    status: Option<Status>,
    /// What makes the rank's state unreadable, or missing.
    error: Option<String>,
    /// A job generation committed (this rank's L1 copy of its job
    /// manifest says so) whose job manifest L2 lost.
    lost_job_manifest: bool,
}

/// Rank `rank`'s state when no job generation committed: its pending
/// checkpoints in `l1` (L1/R), unless L1/R's copy of a job manifest says one
/// committed that L2 lost (then the error says so, and no pending
/// checkpoint is counted against the wrong generation).
fn rank_state(
    root: &rexctl::store::JobRoot,
    jobs: &rexctl::l2::jobgen::JobIndex,
    rank: u32,
    l1: Option<std::path::PathBuf>,
) -> anyhow::Result<(UncommittedRank, Option<Job>)> {
    let mut r = UncommittedRank {
        rank,
        l1: l1.clone(),
        status: None,
        error: None,
        lost_job_manifest: false,
    };
    let Some(l1) = l1 else {
        return Ok((r, None));
    };
    let job = Job::open_read(&l1, root.rank_store(rank, false)?)?;
    if let Some((why, _)) = rexctl::l2::jobgen::lost_job_manifest_why(root, &job, rank, jobs)? {
        r.error = Some(why);
        r.lost_job_manifest = true;
        return Ok((r, Some(job)));
    }
    // Job generation 0 never exists: no generation is committed.
    let st =
        rexctl::l2::status::status_committed(&job, Some(0)).map_err(|e| job.l2.public_error(e))?;
    r.error = st.pending_error.clone();
    r.status = Some(st);
    Ok((r, Some(job)))
}

/// `status --rank R` of an MPI job with no committed job generation (its
/// first collective push killed, or none run): rank R's pending
/// checkpoints in L1/R, its state until a push commits, as a single
/// chain's view. Exits 3 when L1/R is missing (nothing of the rank can be
/// restored), its checkpoints are bad, or L1/R's copy of a job manifest
/// says one committed that L2 lost.
fn uncommitted_rank(
    s: &Settings,
    root: &rexctl::store::JobRoot,
    rank: u32,
    json: bool,
) -> anyhow::Result<i32> {
    let jobs = rexctl::l2::jobgen::JobIndex::load(root.job_store(false)?.as_ref())?;
    let Some(l1_root) = s.opt_l1()? else {
        return Err(rexctl::Error::Invalid(format!(
            "rank {rank} of the MPI job at {}: no job generation committed yet, so its state is its pending checkpoints in its L1 directory: give --l1",
            root.describe()
        ))
        .into());
    };
    let l1 = l1_root.join(rank.to_string());
    if !l1.is_dir() {
        return Err(rexctl::Error::chain(
            root.describe(),
            format!(
                "rank {rank} of the MPI job has no L1 directory {} and no job generation committed: nothing of it can be restored",
                l1.display()
            ),
        )
        .into());
    }
    let (r, job) = rank_state(root, &jobs, rank, Some(l1))?;
    let (Some(st), Some(job)) = (&r.status, &job) else {
        // A lost job manifest (the only state without a status here).
        return Err(rexctl::Error::chain(
            root.describe(),
            r.error.unwrap_or_else(|| "no state".into()),
        )
        .into());
    };
    if json {
        ui::print_json(st)?;
    } else {
        outln!(
            "rank {rank} of the MPI job at {}: no job generation committed yet (its first collective push was killed, or none has run): its pending L1 checkpoints are its state",
            root.describe()
        );
        print_human(job, st)?;
    }
    if let Some(e) = &st.pending_error {
        ui::error(&format!("pending L1 checkpoints: {e}"));
        return Ok(rexctl::error::exit::DATA);
    }
    Ok(0)
}

/// `status` of the MPI job `job` with no committed job generation: each
/// rank's pending checkpoints in L1/R. Exits 3 when a rank's state cannot
/// be restored (a rank with a chain in L2 and no L1/R, a gap in the ranks
/// found, bad checkpoints) or a job manifest was lost; with no L1 given,
/// only the ranks found.
fn uncommitted_job(job: &super::UncommittedJob, json: bool) -> anyhow::Result<i32> {
    let root = &job.root;
    let jobs = rexctl::l2::jobgen::JobIndex::load(root.job_store(false)?.as_ref())?;
    let mut out = Vec::new();
    // Ranks are numbered from 0: one missing below the highest found lost
    // its node (helper-109: ranks 0, 1, 3 were shown, exit 0, and the
    // collective restore failed).
    let highest = job.ranks.last().copied().unwrap_or(0);
    for rank in 0..=highest {
        let l1 = job
            .l1
            .as_ref()
            .map(|l| l.join(rank.to_string()))
            .filter(|d| d.is_dir());
        let (mut r, _) = rank_state(root, &jobs, rank, l1)?;
        if r.l1.is_none() && job.l1.is_some() {
            r.error = Some(format!(
                "no L1 directory {}{}: with no job generation committed, nothing of rank {rank} can be restored",
                job.l1
                    .as_ref()
                    .map(|l| l.join(rank.to_string()).display().to_string())
                    .unwrap_or_default(),
                if job.ranks.contains(&rank) {
                    ""
                } else {
                    " (no rank of that number was found, and ranks above it were: its node lost?)"
                }
            ));
        }
        out.push(r);
    }
    let lost = out.iter().any(|r| r.lost_job_manifest);
    if json {
        ui::print_json(&serde_json::json!({
            "location": root.describe(),
            "job_generations": [],
            "uncommitted": &out,
        }))?;
    } else {
        if lost {
            outln!(
                "MPI job at {}: {}: a job generation committed (the ranks' L1 copies of its job manifest say so, below), and L2 lost its job manifest; no rank can be restored until the next collective push or librex restart puts it back",
                root.describe(),
                ui::bad("JOB MANIFEST LOST")
            );
        } else {
            outln!(
                "MPI job at {}: no job generation committed yet (its first collective push was killed, or none has run); ranks found in L1{}: {} (the job's number of ranks is committed with its first job generation: a rank lost above these cannot be seen)",
                root.describe(),
                if job.listed_l2 { " and L2" } else { "" },
                list(&job.ranks)
            );
        }
        if job.l1.is_none() {
            outln!(
                "no L1 directory given (--l1): each rank's state is its pending checkpoints in L1/R"
            );
        }
        for r in &out {
            match (&r.l1, &r.status) {
                (Some(l1), Some(st)) => match st.pending_seqs {
                    Some((a, b)) => outln!(
                        "rank {} L1 {}: {} pending L1 checkpoints (seq {a}..={b}, {})",
                        r.rank,
                        l1.display(),
                        st.pending_ics,
                        ui::bytes(st.pending_bytes)
                    ),
                    None => outln!("rank {} L1 {}: no checkpoint pending", r.rank, l1.display()),
                },
                (Some(l1), None) => outln!(
                    "rank {} L1 {}: {}",
                    r.rank,
                    l1.display(),
                    if r.lost_job_manifest {
                        "holds a copy of the lost job manifest"
                    } else {
                        "BAD"
                    }
                ),
                (None, _) if job.l1.is_some() => outln!("rank {}: {}", r.rank, ui::bad("NO L1")),
                (None, _) => outln!("rank {}", r.rank),
            }
        }
    }
    let mut bad = false;
    for r in &out {
        if let Some(e) = &r.error {
            ui::error(&format!("rank {}: {e}", r.rank));
            bad = true;
        }
    }
    Ok(if bad { rexctl::error::exit::DATA } else { 0 })
}

/// `0, 1, 3`.
fn list(ranks: &[u32]) -> String {
    ranks
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn print_human(job: &Job, s: &Status) -> Result<(), ui::StdoutError> {
    outln!(
        "{:>6} {:>5} {:>5} {:>15} {:>8} {:>8} {:>11} {:>11} {:>7} {:>3}",
        "gen",
        "kind",
        "base",
        "seqs",
        "pages",
        "live",
        "in",
        "out",
        "ratio",
        "L1"
    );
    for g in &s.generations {
        outln!(
            "{:>6} {:>5} {:>5} {:>15} {:>8} {:>8} {:>11} {:>11} {:>7.2} {:>3}",
            g.generation,
            match g.kind {
                GenKind::Full => "full",
                GenKind::Delta => "delta",
            },
            g.chain_base,
            format!("{}..={}", g.first_seq, g.last_seq),
            g.dirty_pages,
            g.live_pages,
            ui::bytes(g.bytes_in),
            ui::bytes(g.bytes_out),
            g.compression_ratio,
            if g.in_l1 { "yes" } else { "no" }
        );
    }
    outln!(
        "{} in L2 {} ({}), newest chain {} long",
        ui::count(s.chains as u64, "chain"),
        job.l2.describe(),
        ui::bytes(s.l2_bytes),
        ui::count(s.newest_chain_length as u64, "generation")
    );
    for g in &s.l1_only {
        outln!(
            "{}: generation {} ({}, seqs {}..={}) is in L1's copy of the chain only: L2 lacks its manifest (lost, a push interrupted, or another L2 location); the next push uploads it; until then a restore from L2 alone gives an older state, or none",
            ui::bad("NOT IN L2"),
            g.generation,
            match g.kind {
                GenKind::Full => "full",
                GenKind::Delta => "delta",
            },
            g.first_seq,
            g.last_seq
        );
    }
    match (&s.pending_error, s.pending_seqs) {
        (Some(e), _) => outln!("pending L1 checkpoints: {}: {e}", ui::bad("ERROR")),
        (None, Some((a, b))) => outln!(
            "{} pending L1 checkpoints (seq {a}..={b}, {})",
            s.pending_ics,
            ui::bytes(s.pending_bytes)
        ),
        (None, None) => outln!("no pending L1 checkpoint"),
    }
    if let (Some(t), Some(seq)) = (&s.regions, s.regions_seq) {
        outln!(
            "{} at seq {seq} ({}, {}):",
            ui::count(t.0.len() as u64, "region"),
            ui::bytes(t.bytes()),
            ui::count(t.pages(), "page")
        );
        for r in &t.0 {
            outln!(
                "  region {:>5}  {:>11}  {:>8} pages  pages {:#x}..",
                r.id,
                ui::bytes(r.size),
                r.pages,
                r.first_page()
            );
        }
    }
    if !s.set_aside.is_empty() {
        outln!(
            "{} set aside by librex (left out by a restart that fell back, or unreadable when a new run started; kept for you, never read or deleted):",
            ui::count(s.set_aside.len() as u64, "L1 checkpoint")
        );
        for p in &s.set_aside {
            outln!("  {}", p.display());
        }
    }
    if let Some(h) = &s.producer {
        outln!("a live producer (librex job or capture) checkpoints into this L1 directory: {h}");
    }
    for i in &s.invalid {
        outln!("{}: {i}", ui::bad("INVALID"));
    }
    Ok(())
}
