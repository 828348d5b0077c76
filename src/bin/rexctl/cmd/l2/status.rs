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
/// in L1/R, the ranks found in L1 and L2 (exit 3 when a rank of the job's
/// L2 has no L1/R, or L1/R's copy of a job manifest says one committed
/// that L2 lost).
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
            return uncommitted(&s, &root, &[rank], true, a.json);
        }
        if s.layer.rank.is_none()
            && let Some((root, ranks)) = super::uncommitted_job_ranks(&s)?
        {
            return uncommitted(&s, &root, &ranks, false, a.json);
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
    /// Its L1 directory, L1/R (`None`: missing, a lost node).
    l1: Option<std::path::PathBuf>,
    /// Its pending checkpoints, as a single chain's status shows them;
    /// its generations in L2 are left out (none committed).
    status: Option<Status>,
    /// What makes the rank's state unreadable.
    error: Option<String>,
}

/// `status` of the MPI job at `root` with no committed job generation (its
/// first collective push killed, or none run): each of `ranks`' pending
/// checkpoints in L1/R, its state until a push commits (`detail`: rank R
/// named, its whole single-chain view). Exits 3 when a rank has no L1/R
/// (nothing of it can be restored), its checkpoints are bad, or the job
/// manifest L1/R's copy says committed was lost.
fn uncommitted(
    s: &Settings,
    root: &rexctl::store::JobRoot,
    ranks: &[u32],
    detail: bool,
    json: bool,
) -> anyhow::Result<i32> {
    let jobs = rexctl::l2::jobgen::JobIndex::load(root.job_store(false)?.as_ref())?;
    let l1_root = s.opt_l1()?;
    let mut out = Vec::new();
    for &rank in ranks {
        let l1 = l1_root
            .as_ref()
            .map(|l| l.join(rank.to_string()))
            .filter(|d| d.is_dir());
        let mut r = UncommittedRank {
            rank,
            l1: l1.clone(),
            status: None,
            error: None,
        };
        match l1 {
            None => {
                r.error = Some(format!(
                    "no L1 directory {}: with no job generation committed, nothing of rank {rank} can be restored",
                    l1_root
                        .as_ref()
                        .map(|l| l.join(rank.to_string()).display().to_string())
                        .unwrap_or_else(|| "(no --l1 given)".into())
                ))
            }
            Some(l1) => {
                let job = Job::open_read(&l1, root.rank_store(rank, false)?)?;
                r.error = rexctl::l2::jobgen::lost_job_manifest_why(root, &job, rank, &jobs)?
                    .map(|(why, _)| why);
                // Job generation 0 never exists: no generation is committed.
                let st = rexctl::l2::status::status_committed(&job, Some(0))
                    .map_err(|e| job.l2.public_error(e))?;
                if r.error.is_none() {
                    r.error = st.pending_error.clone();
                }
                if detail && !json {
                    outln!(
                        "rank {rank} of the MPI job at {}: no job generation committed yet (its first collective push was killed, or none has run): its pending L1 checkpoints are its state",
                        root.describe()
                    );
                    print_human(&job, &st)?;
                }
                r.status = Some(st);
            }
        }
        out.push(r);
    }
    if json {
        if detail && let Some(st) = &out[0].status {
            ui::print_json(st)?;
        } else {
            ui::print_json(&serde_json::json!({
                "location": root.describe(),
                "job_generations": [],
                "ranks": &out,
            }))?;
        }
    } else if !detail {
        outln!(
            "MPI job at {}: no job generation committed yet (its first collective push was killed, or none has run); ranks found in L1 and L2: {} (the job's number of ranks is committed with its first job generation)",
            root.describe(),
            out.iter()
                .map(|r| r.rank.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
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
                _ => outln!("rank {}: {}", r.rank, ui::bad("NO L1")),
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
