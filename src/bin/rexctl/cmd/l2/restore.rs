//! `rexctl restore`: rebuild the memory image from L2, or from L1 plus L2.

use std::path::PathBuf;

use rexctl::control::config::ConfigLayer;
use rexctl::l2::push::Job;
use rexctl::l2::restore::{
    RestoreOptions, RestoreReport, parse_page_ranges, restore_l1_l2, restore_l2,
};
use rexctl::store::StoreStats;
use serde::Serialize;

use crate::cmd::config_args::Settings;
use crate::ui;

/// Restore the memory image byte for byte.
///
/// With an L2 location alone, or `--l2-only` (after losing the node), from
/// the newest valid L2 generation. With an L1 directory too (`--l1`,
/// REX_L1 or rex.toml; after a transient fault), pages written since
/// the last L2 checkpoint come from L1's IC files and the rest from L1's copy
/// of the chain, each generation falling back to L2 when its L1 copy is
/// missing or damaged. The output is a FULL REX-IC
/// file, or a flat image with `--raw`; it is written under a temporary name
/// and appears only when complete and verified. With an L1 directory, the
/// restore waits while a push holds L1's lock (`push-l2`, `flush`, `gc`, a
/// librex job's push), and says so; pushes meanwhile are busy (exit 4).
/// From L2 alone nothing keeps a push out: a restore whose chain a push
/// pruned meanwhile (a complete coalescence made a newer one) starts again
/// on the new listing.
///
/// From a bucket (s3://BUCKET/PREFIX), objects are fetched into a cache
/// directory (removed afterwards) with several ranged GETs in flight; with
/// `--pages`, only the headers, chunk tables and P-Tables are fetched, and
/// each chunk of an RPS or Pointer File when a page first needs it. The
/// summary (and `l2_transfer` in the JSON) gives the bytes fetched.
///
/// A rank of an MPI job (`--rank R`, REX_RANK, or the launcher's
/// SLURM_PROCID and the like, on the location `push-l2 --collective` or
/// librex writes; with no rank named such a location is refused, exit 2)
/// restores its part of the newest job generation, with
/// the pages other ranks store read from their chains. With an L1
/// directory, rank R's is its subdirectory R, and its pending checkpoints
/// apply on top (those of a collective push that never committed too:
/// they are still in L1). Each rank restores its own newest state; a job
/// restarting all its ranks must restore the same seq on every rank
/// (librex's restart agrees on it): give every rank `--seq S`, S the
/// smallest of the seqs the ranks restore alone. On a single chain, a
/// rank named (--rank, REX_RANK, or the launcher's SLURM_PROCID and the
/// like) must be the one that pushed it: another rank's chain is refused
/// (exit 3); with no rank named, the chain restores whoever pushed it.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Output file; an existing file is replaced only with --force. For a
    /// rank of an MPI job, `{rank}` in it is replaced by the rank; when the
    /// rank comes from the launcher (every rank restoring), it must be there.
    #[arg(short, long, value_name = "FILE")]
    out: PathBuf,
    /// Replace the output file if it exists.
    #[arg(short, long)]
    force: bool,
    /// Restore from L2 alone, even when an L1 directory is configured
    /// (after losing the node that held it).
    #[arg(long)]
    l2_only: bool,
    /// Write a flat image (page p at offset (p - first) x page size; gaps
    /// read as zeros) instead of a REX-IC file. With --pages it spans the
    /// ranges from the lowest start to the highest end, holes included.
    #[arg(long)]
    raw: bool,
    /// Restore only these pages: inclusive ranges like `0x5000-0x50ff,42`
    /// (the output then carries only them and is not FULL); every range
    /// must select at least one page of the image (one that falls in a
    /// hole between its pages, or outside them, is an error, as a likely
    /// typo).
    #[arg(long, value_name = "LIST", value_parser = pages_arg)]
    pages: Option<Pages>,
    /// Restore only region ID of a job that checkpoints itself through
    /// librex (`rex_protect(ID, ...)`); with `--raw`, the output is exactly
    /// the region's bytes, as the job had them.
    #[arg(long, value_name = "ID", conflicts_with = "pages")]
    region: Option<u32>,
    /// Restore this generation instead of the newest. With an L1 directory
    /// the pending checkpoints go on top only when N is the newest
    /// generation (they continue it); an older one is restored alone (use
    /// --seq for the state at a checkpoint).
    #[arg(long, value_name = "N")]
    generation: Option<u64>,
    /// With --rank R, when the L2 location is an MPI job's (as `push-l2
    /// --collective` writes it: a chain per rank and the job manifests):
    /// restore this job generation of rank R instead of the newest (from
    /// L2 alone).
    #[arg(long, value_name = "J")]
    job_generation: Option<u64>,
    /// Restore the state at checkpoint seq S instead of the newest: the
    /// newest generation ending at or before S, plus the pending L1
    /// checkpoints up to S. Refused (exit 3) when that is not exactly the
    /// state at S: S is inside a generation that coalesced it, or its
    /// checkpoint is no longer in L1. Seqs do not order runs (a job
    /// restarted by hand counts from 0 again): a generation of an older run
    /// is passed over once a newer run's generation holds seqs from S or
    /// before (`--generation N` still restores it). The ranks of a job restarting from
    /// L1 give the same S (the smallest of their newest seqs).
    #[arg(long, value_name = "S", conflicts_with_all = ["generation", "job_generation", "fallback"])]
    seq: Option<u64>,
    /// Restore the newest valid state instead of failing: without the
    /// damaged pending checkpoints (a later FULL one restarts the state),
    /// from a pending FULL checkpoint when the generation is unreadable, else
    /// the newest older valid generation of the L1 directory's own run. Says
    /// what it left out and why on standard error. Only damaged or missing
    /// data is passed over: a file the store fails to send (an I/O error,
    /// an S3 error) fails the restore (exit 1). With --rank R on an MPI
    /// job's location, an older state is the rank's part of an older job
    /// generation; with --collective, a rank that falls back takes every
    /// rank back to the same seq.
    #[arg(long, conflicts_with = "job_generation")]
    fallback: bool,
    /// Restart a whole MPI job (run under `mpirun -np N rexctl restore
    /// --collective --l1 L1 --l2 JOB -o 'image-{rank}.rexic'`): every rank
    /// restores from L1/R plus L2 (from L2 alone when L1/R is gone: its node
    /// was lost) the seq a collective push would cut at, the newest at which
    /// every rank has a checkpoint of one life of the job (with --seq S: S;
    /// with --fallback, or when a rank cannot tell, the smallest of the
    /// ranks' newest seqs), and each image appears at `--out`, `{rank}`
    /// replaced by the rank, only once every rank has its image of that seq.
    /// Refused on every rank (exit 3) when no seq is one, or when one rank's
    /// state of that seq was taken before another rank's new run of it
    /// began: two lives of the job (seqs do not order runs); and when fewer
    /// processes than the job's ranks restore it (before its first job
    /// generation commits: than L1 holds ranks). When no rank finds its L1/R (a mistyped --l1?), refused on every
    /// rank (exit 5); after losing every node, give --l2-only. Needs a
    /// rexctl built with the cargo feature `mpi`.
    #[arg(long, conflicts_with_all = ["generation", "job_generation"])]
    collective: bool,
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    settings: ConfigLayer,
}

/// The job and rank to restore when the L2 location holds job generations
/// of an MPI job: the rank `--rank`, REX_RANK, rex.toml or the launcher
/// (SLURM_PROCID and the like, as every command reads it) names. With no
/// rank named, refused (exit 2) rather than rank 0 taken for the user: on
/// a login node, a lost rank's image is restored by naming it.
fn job_rank(s: &Settings) -> anyhow::Result<Option<(rexctl::store::JobRoot, u32)>> {
    let rank = rexctl::control::config::named_rank(&s.layer, |k| std::env::var(k).ok());
    // Unless a rank is named by hand (--rank, REX_RANK, rex.toml), a
    // location that cannot be read as a job's (no job name for a bucket,
    // credentials for the rank's prefix alone) is left to the single
    // chain's restore to report on, as before the launcher's rank counted.
    let (root, jobs) = match super::job_index(s) {
        Ok(Some(r)) => r,
        Ok(None) => return super::uncommitted_job_rank(s),
        Err(e) if s.layer.rank.is_some() => return Err(e),
        Err(_) => return Ok(None),
    };
    let Some(rank) = rank else {
        let ranks = jobs
            .manifests
            .values()
            .next_back()
            .map(|m| format!(" (ranks 0 to {})", m.ranks.saturating_sub(1)))
            .unwrap_or_default();
        return Err(crate::cmd::Usage(format!(
            "{} holds an MPI job's chains{ranks}: name the rank to restore (--rank R, REX_RANK, or the launcher's SLURM_PROCID and the like), or give --collective to restore every rank",
            s.l2()?.display()
        ))
        .into());
    };
    let r = rank.parse::<u32>().map_err(|_| {
        rexctl::Error::Invalid(format!(
            "rank {rank:?} (from --rank, REX_RANK, rex.toml or the launcher's SLURM_PROCID and the like): the ranks of an MPI job are numbers"
        ))
    })?;
    Ok(Some((root, r)))
}

/// Refuses an L1 directory that does not exist (a typo, or a lost node
/// whose restore should say `--l2-only`).
fn no_l1_dir(l1: &std::path::Path, s: &Settings) -> anyhow::Result<()> {
    if l1.is_dir() {
        return Ok(());
    }
    Err(rexctl::Error::Invalid(format!(
        "L1 directory {}: {} (--l1, REX_L1 or `l1` in {}{}): give --l2-only to restore from L2 alone",
        l1.display(),
        if l1.exists() {
            "not a directory"
        } else {
            "no such directory"
        },
        if s.sources.is_empty() {
            "rex.toml".to_string()
        } else {
            s.sources
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        },
        if s.layer.rank.is_some() {
            "; a rank's is its subdirectory R"
        } else {
            ""
        }
    ))
    .into())
}

/// The ranges of `--pages`.
#[derive(Clone, Debug)]
struct Pages(Vec<(u64, u64)>);

/// `--pages`, checked while parsing (a syntax error is a usage error).
fn pages_arg(text: &str) -> Result<Pages, String> {
    parse_page_ranges(text)
        .map(Pages)
        .map_err(|e| e.to_string())
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let s = Settings::load(&a.settings)?;
    let opts = RestoreOptions {
        generation: a.generation,
        fallback: a.fallback,
        pages: a.pages.clone().map(|p| p.0),
        raw: a.raw,
        region: a.region,
        threads: match s.layer.threads {
            Some(n) => rexctl::control::config::check_threads(n)?,
            None => 0,
        },
        xref_source: None,
        job_committed: None,
        seq: a.seq,
        pointer_file_budget: None,
        l1_locked: false,
        keep_existing: !a.force,
    };
    if a.collective {
        return collective(&a, &s, &opts);
    }
    // `--rank R` on an MPI job's location: rank R's part of a job
    // generation, from L2 alone.
    let job_rank = job_rank(&s)?;
    if job_rank.is_none() && a.job_generation.is_some() {
        return Err(rexctl::Error::Invalid(
            "--job-generation needs --rank R and the L2 location of an MPI job (one with job generations, written by `push-l2 --collective`)".into(),
        )
        .into());
    }
    if job_rank.is_some() && a.generation.is_some() {
        return Err(rexctl::Error::Invalid(
            "a rank of an MPI job restores a job generation: give --job-generation, not --generation".into(),
        )
        .into());
    }
    // A rank's image: `{rank}` in --out is its rank. Under a launcher every
    // rank restores, so a name without it would have every rank write the
    // same file (helper-100: the last rename won, exit 0 everywhere).
    let out = match (&job_rank, a.out.to_str()) {
        (Some((_, r)), Some(t)) if t.contains("{rank}") => {
            PathBuf::from(t.replace("{rank}", &r.to_string()))
        }
        (Some(_), _) if s.layer.rank.is_none() => {
            return Err(crate::cmd::Usage(format!(
                "--out {}: the rank comes from the launcher, so every rank restores: put {{rank}} in the name (it is replaced by the rank), or give --rank R to restore one rank",
                a.out.display()
            ))
            .into());
        }
        _ => a.out.clone(),
    };
    // L1 as set, unless --l2-only leaves it unread (an empty one is then
    // no error either).
    let set_l1 = if a.l2_only { None } else { s.opt_l1()? };
    // A rank's L1 directory is L1/R (as `push-l2 --collective` and librex
    // keep it); an older job generation is L2's alone.
    let l1 = match (&job_rank, &set_l1) {
        _ if a.l2_only => None,
        (Some(_), _) if a.job_generation.is_some() => None,
        (Some((_, rank)), Some(l1)) => Some(l1.join(rank.to_string())),
        (None, l1) => l1.clone(),
        (Some(_), None) => None,
    };
    crate::cmd::check_out(&out, a.force)?;
    // Never an output among L1's files, read or not.
    if let Some(l1) = s.layer.l1.as_ref().filter(|p| !p.as_os_str().is_empty()) {
        crate::cmd::not_inside(&out, "--out", l1, "the L1 directory")?;
    }
    if let Ok(rexctl::store::L2Location::Dir(d)) = rexctl::store::L2Location::parse(&s.l2()?) {
        crate::cmd::not_inside(&out, "--out", &d, "the L2 directory")?;
    }
    // An L2 directory no push has made yet reads as empty: with L1, its
    // checkpoints alone restore; without, "no valid generation under ...".
    let l2 = rexctl::store::open_l2_read(&s.l2()?, &s.store()?)?;
    // A rank named (--rank, REX_RANK, a launcher's variable) restores that
    // rank's chain, never another's (helper-72: two ranks given one L2
    // directory, rank 1 restored rank 0's image with exit 0).
    if job_rank.is_none()
        && let Some(rank) = rexctl::control::config::named_rank(&s.layer, |k| std::env::var(k).ok())
    {
        rexctl::l2::push::check_rank(
            l2.as_ref(),
            &rank,
            &format!("give rank {rank}'s own L2 location, or no rank to restore this chain"),
        )
        .map_err(|e| l2.public_error(e))?;
    }
    // A few pages need a few chunks: a bucket is read on demand.
    l2.read_on_demand(opts.pages.is_some() || opts.region.is_some());
    // The restore keeps pushes out of L1 while it reads it, and waits for
    // one that runs (the library takes the same shared lock again): say so.
    let _reading = read_lock(l1.as_deref())?;
    let pb = ui::spinner("restoring");
    let (report, stats) = match (&l1, job_rank) {
        (Some(l1), Some((root, rank))) => {
            no_l1_dir(l1, &s)?;
            let r =
                rexctl::l2::jobgen::restore_rank_l1(&root, rank, l1, &opts, &out).map(|(r, _)| r);
            (r.map_err(|e| l2.public_error(e)), l2.stats())
        }
        (None, Some((root, rank))) => {
            let r = rexctl::l2::jobgen::restore_rank(&root, rank, a.job_generation, &opts, &out)
                .map(|(r, _)| r);
            (r.map_err(|e| l2.public_error(e)), l2.stats())
        }
        (Some(l1), None) => {
            no_l1_dir(l1, &s)?;
            let job = Job::open_read(l1, l2)?;
            let r = restore_l1_l2(&job, &opts, &out);
            (r.map_err(|e| job.l2.public_error(e)), job.l2.stats())
        }
        (None, None) => {
            let r = restore_l2(l2.as_ref(), &opts, &out);
            (r.map_err(|e| l2.public_error(e)), l2.stats())
        }
    };
    pb.finish_and_clear();
    print_report(&a, &out, &report?, stats)?;
    Ok(0)
}

#[cfg(not(feature = "mpi"))]
fn collective(_: &Args, _: &Settings, _: &RestoreOptions) -> anyhow::Result<i32> {
    Err(rexctl::Error::Invalid(
        "--collective needs MPI: this rexctl was built without the cargo feature `mpi`".into(),
    )
    .into())
}

/// `restore --collective`: this process is one rank of `mpirun`.
#[cfg(feature = "mpi")]
fn collective(a: &Args, s: &Settings, opts: &RestoreOptions) -> anyhow::Result<i32> {
    use rexctl::l2::collective::{Comm, agree};
    let comm = rexctl::l2::mpi::MpiComm::init()?;
    let rank = comm.rank();
    let text = a.out.to_string_lossy();
    let out = PathBuf::from(text.replace("{rank}", &rank.to_string()));
    type Setup = (
        rexctl::store::JobRoot,
        Option<PathBuf>,
        Option<rexctl::l1::lock::SharedLock>,
    );
    let setup = (|| -> rexctl::Result<Setup> {
        if comm.size() > 1 && !text.contains("{rank}") {
            return Err(rexctl::Error::Invalid(format!(
                "--out {text}: every rank writes its own image; put {{rank}} in the name (it is replaced by the rank)"
            )));
        }
        crate::cmd::check_out(&out, a.force)?;
        let root = rexctl::store::JobRoot::new(s.l2()?, &s.store()?)?;
        let l1 = if a.l2_only { None } else { s.opt_l1()? };
        // Held through both of the rank's restores (its newest state, then
        // the job's common seq): a push between them could coalesce the
        // common seq away. Waiting for one says so (helper-62: it was
        // silent).
        let reading = read_lock(l1.as_ref().map(|l| l.join(rank.to_string())).as_deref())?;
        Ok((root, l1, reading))
    })();
    let (root, l1, reading) = match setup {
        Ok(r) => r,
        Err(e) => {
            // The other ranks fail with this error instead of waiting.
            let _ = agree(
                &comm,
                Err(rexctl::error::Failure::from(&e)),
                "starting the collective restore",
            );
            return Err(e.into());
        }
    };
    // Each rank says whether it found its L1 directory: when none did, the
    // `--l1` given names nothing of this job (a typo, another path), and
    // restoring from L2 alone would silently give an older state than the
    // pending checkpoints that are somewhere else (helper-66). Every node
    // lost is said with --l2-only, as for a single rank.
    let found = l1
        .as_ref()
        .is_some_and(|l| l.join(rank.to_string()).is_dir());
    let all = agree(
        &comm,
        Ok(vec![u8::from(found)]),
        "starting the collective restore",
    )?;
    if let Some(l1) = &l1
        && !all.iter().any(|b| b.first() == Some(&1))
    {
        return Err(rexctl::Error::Invalid(format!(
            "L1 directory {}: none of the job's {} ranks finds its subdirectory there ({}): give --l2-only to restore every rank from L2 alone (every node lost)",
            l1.display(),
            comm.size(),
            l1.join("R").display()
        ))
        .into());
    }
    let opts = RestoreOptions {
        l1_locked: reading.is_some(),
        ..opts.clone()
    };
    if let Some(l1) = &l1
        && !found
    {
        warnln!(
            "rank {rank}: {} is missing (a lost node): restoring from L2 alone",
            l1.join(rank.to_string()).display()
        );
    }
    let report = rexctl::l2::collective::restore_job(&comm, &root, l1.as_deref(), &opts, &out)?;
    drop(reading);
    print_report(a, &out, &report, None)?;
    Ok(0)
}

/// Takes the L1 directory `l1`'s lock shared, so that no push deletes
/// what the restore reads, waiting (and saying so) while one runs. `None`
/// without an L1 directory (or a lock: see `JobLock::shared`).
fn read_lock(l1: Option<&std::path::Path>) -> rexctl::Result<Option<rexctl::l1::lock::SharedLock>> {
    match l1 {
        Some(l1) if l1.is_dir() => rexctl::l1::lock::JobLock::shared(l1, |holder| {
            ui::warn(format_args!(
                "waiting for {holder} to let go of {} (a restore reads L1 between pushes)",
                l1.join(rexctl::l1::lock::LOCK_NAME).display()
            ))
        }),
        _ => Ok(None),
    }
}

fn print_report(
    a: &Args,
    out: &std::path::Path,
    report: &RestoreReport,
    stats: Option<StoreStats>,
) -> anyhow::Result<()> {
    if let Some(why) = &report.fell_back {
        warnln!("FALLBACK: {why}");
    }
    for note in &report.l2_fallbacks {
        warnln!("{note}");
    }
    if let Some(p) = report.outside_regions {
        warnln!(
            "page {p:#x} of the restored state (seq {}) lies outside its region table (a region shrank without its pages being dropped): the image is written without the table, every page kept",
            report.seq
        );
    }
    if a.json {
        ui::print_json(&Output {
            report,
            l2_transfer: stats,
        })?;
    } else {
        let secs = report.seconds.max(1e-9);
        outln!(
            "restored {} ({}) of seq {}{}{} to {} in {:.3}s ({:.0} MB/s){}",
            ui::count(report.pages, "page"),
            ui::bytes(report.bytes),
            report.seq,
            report
                .generation
                .map(|g| format!(" from generation {g}"))
                .unwrap_or_default(),
            if report.pages_from_l1_ics > 0 {
                format!(
                    " ({} from L1 checkpoints)",
                    ui::count(report.pages_from_l1_ics, "page")
                )
            } else {
                String::new()
            },
            out.display(),
            report.seconds,
            report.bytes as f64 / secs / 1e6,
            report
                .raw_first_page
                .map(|p| format!("; raw image starts at page {p:#x}"))
                .unwrap_or_default()
        );
        if let Some(s) = stats {
            outln!(
                "fetched {} from L2 in {} requests",
                ui::bytes(s.bytes_fetched),
                s.requests
            );
        }
    }
    Ok(())
}

/// The JSON output: the restore's report and, for a remote store, what
/// was fetched.
#[derive(Serialize)]
struct Output<'a> {
    #[serde(flatten)]
    report: &'a RestoreReport,
    /// Bytes fetched and requests sent to a remote L2 (absent for a
    /// directory).
    l2_transfer: Option<StoreStats>,
}
