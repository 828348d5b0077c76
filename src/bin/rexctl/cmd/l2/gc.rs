//! `rexctl gc`: remove the L2 objects no manifest references.

use std::time::Duration;

use rexctl::control::config::ConfigLayer;
use rexctl::l2::gc::{DEFAULT_GRACE, GcOptions, gc};

use crate::cmd::config_args::Settings;
use crate::ui;

/// Remove the L2 objects that no manifest references.
///
/// Those are data files left by pushes that crashed before their commit
/// point, or by interrupted prunes, and multipart uploads left unfinished
/// (their parts are billed but invisible). Only objects of the form
/// g<digits>.<anything> are considered; every manifest, every file a valid
/// manifest names, and every object of a generation whose manifest is
/// invalid (evidence) are kept.
///
/// An object is deleted only once it is older than the grace period (an
/// hour by default), which covers the uploads of pushes in progress on
/// other nodes that share the bucket: a push writes its manifest right
/// after its data files. An unfinished multipart upload is aborted once
/// its intent is older than the grace period; an upload still running
/// writes its intent again every 5 minutes, so a grace above that never
/// aborts one in progress. With an L1 directory (--l1, REX_L1 or rex.toml),
/// gc also takes the job's lock without waiting, and exits 4 while a push
/// holds it, and keeps every object of a generation whose manifest L1's
/// copy of the chain holds and L2 lacks (lost, or not yet listed by a
/// lagging store: the next push uploads it again). A manifest the store
/// fails to send fails gc (exit 1). A dry run (-n) writes nothing to L2,
/// not even a directory L2's lock file, so it also runs on a read-only L2.
///
/// On an MPI job's location (written by `push-l2 --collective` or librex),
/// every rank's chain of the newest job generation is collected in turn
/// (rank R's alone with --rank R; the job manifests are pruned by the
/// collective push itself), with the job's L1 directory under each rank's
/// L1/R lock (an --l1 under which no rank has its L1/R is refused, exit
/// 5). A rank that cannot be collected is said, the others are collected,
/// and the exit code is the first failure's.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Grace period: only objects at least this old are deleted, seconds.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_GRACE.as_secs_f64(), value_parser = seconds_arg)]
    grace: f64,
    /// Show what would be deleted; write nothing to L2.
    #[arg(short = 'n', long)]
    dry_run: bool,
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    settings: ConfigLayer,
}

/// A number of seconds, at least 0 (checked while parsing).
use rexctl::control::config::MAX_SECONDS;

fn seconds_arg(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=MAX_SECONDS).contains(&v) => Ok(v),
        _ => Err(format!(
            "{text:?} is not a number of seconds from 0 to {MAX_SECONDS:e}"
        )),
    }
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let opts = GcOptions {
        grace: Duration::from_secs_f64(a.grace),
        dry_run: a.dry_run,
    };
    let s = Settings::load(&a.settings)?;
    // An MPI job's location: every rank's chain of the newest job
    // generation, each under its own writer lock.
    // Rank R's alone with --rank R (helper-66: a directory's top level was
    // read as a plain chain). Each rank under its L1/R's lock when the
    // job's L1 directory is given. A rank that cannot be collected (its
    // chain missing, its lock held) is said and the others are collected:
    // the exit code is the first failure's.
    if let Some(root) = super::job_root(&s)? {
        let jobs = rexctl::l2::jobgen::JobIndex::load(root.job_store(false)?.as_ref())?;
        let job_ranks = jobs.newest().map_or(0, |m| m.ranks);
        let ranks: Vec<u32> = match super::job_rank(&s)? {
            Some(r) if r >= job_ranks => {
                return Err(rexctl::Error::Invalid(format!(
                    "--rank {r}: the job at {} has {job_ranks} ranks",
                    root.describe()
                ))
                .into());
            }
            Some(r) => vec![r],
            None => (0..job_ranks).collect(),
        };
        let l1 = s.opt_l1()?;
        // A mistyped --l1 (no rank's L1/R there) would collect with no
        // lock (helper-71): refused, as verify and status refuse it.
        if let Some(l) = &l1 {
            rexctl::l2::jobgen::check_l1_root(l, job_ranks)?;
        }
        let mut all = Vec::new();
        let mut code = 0;
        for rank in ranks {
            let dir = l1.as_ref().map(|l| l.join(rank.to_string()));
            let r = root.rank_store(rank, false).and_then(|store| {
                // The same on both backends (helper-71: a bucket's missing
                // prefix read as an empty chain).
                let index = rexctl::l2::chain::ChainIndex::load(store.as_ref())?;
                if index.manifests.is_empty() && index.invalid.is_empty() {
                    return Err(rexctl::Error::chain(
                        store.describe(),
                        format!(
                            "rank {rank}'s chain is missing (the newest job generation has {job_ranks} ranks)"
                        ),
                    ));
                }
                gc(store.as_ref(), dir.as_deref().filter(|d| d.is_dir()), &opts)
                    .map_err(|e| store.public_error(e))
            });
            match r {
                Ok(r) => {
                    if !a.json {
                        print_human(&r)?;
                    }
                    all.push(r);
                }
                Err(e) => {
                    ui::error(&format!("rank {rank}: {}", e.report()));
                    if code == 0 {
                        code = e.exit_code();
                    }
                }
            }
        }
        if a.json {
            ui::print_json(&all)?;
        }
        return Ok(code);
    }
    let store = s.open_l2(false)?;
    let pb = ui::spinner("collecting");
    let l1 = s.opt_l1()?;
    let r = gc(store.as_ref(), l1.as_deref(), &opts);
    pb.finish_and_clear();
    let r = r.map_err(|e| store.public_error(e))?;
    if a.json {
        ui::print_json(&r)?;
        return Ok(0);
    }
    print_human(&r)?;
    Ok(0)
}

fn print_human(r: &rexctl::l2::gc::GcReport) -> Result<(), ui::StdoutError> {
    let verb = if r.dry_run { "would delete" } else { "deleted" };
    for o in &r.deleted {
        outln!(
            "{verb} {} ({}, {})",
            o.name,
            ui::bytes(o.bytes),
            o.age_s
                .map(|s| format!("{s:.0} s old"))
                .unwrap_or_else(|| "age unknown".into())
        );
    }
    for o in &r.young {
        outln!(
            "kept {} (unreferenced, but younger than the grace period: {})",
            o.name,
            o.age_s
                .map(|s| format!("{s:.0} s old"))
                .unwrap_or_else(|| "age unknown".into())
        );
    }
    for o in &r.evidence {
        outln!(
            "kept {} (its generation's manifest is invalid: evidence)",
            o.name
        );
    }
    for n in &r.aborted_uploads {
        outln!("{n}");
    }
    outln!(
        "gc {}: {verb} {} ({}), kept {} referenced, {} young, {} evidence; grace {:.0} s",
        r.store,
        ui::count(r.deleted.len() as u64, "object"),
        ui::bytes(r.bytes_freed),
        r.referenced,
        r.young.len(),
        r.evidence.len(),
        r.grace_s
    );
    Ok(())
}
