//! `rexctl verify`: check a chain end to end without writing an image.

use rexctl::control::config::ConfigLayer;
use rexctl::l2::push::Job;
use rexctl::l2::repair::RepairReport;
use rexctl::l2::restore::verify;

use crate::cmd::config_args::Settings;
use crate::ui;

/// Check every generation end to end: manifests, file sizes and CRCs, every
/// chunk, and every live page rebuilt against its recorded CRC. With an L1
/// directory (`--l1`, REX_L1 or rex.toml), also L1's copy of the chain and
/// its pending checkpoints, which it checks while no push runs (it waits
/// for one that holds L1's lock). Exits 3 when anything is wrong, and when there
/// is no generation to verify. An object of a bucket (s3://BUCKET/PREFIX) is fetched
/// whole and checked against the size and CRC its manifest records; errors
/// name it by its s3:// URL.
///
/// On an MPI job's location (written by `push-l2 --collective` or librex):
/// every rank's generations (rank R's alone with --rank R), the pages one
/// rank stores for another read from it, and with the job's L1 directory
/// each rank's L1/R as above (a missing L1/R is reported: a lost node);
/// exits 3 when any rank's part of the newest job generation, or its L1, is
/// missing or bad. A rank's chain alone (`--l2 JOB/R`) is refused (exit 3,
/// naming --rank): its generations count only once the job commits them.
///
/// With --repair (and L1), a file damaged in one of a generation's two
/// copies (L2 and L1's copy of the chain) is first rewritten from the other,
/// and a manifest invalid in one place replaced by the other's (the files
/// it names taken from either place, wherever they match it): bit rot in
/// L2 that no push reads would otherwise surface only when a lost node's
/// restore fails on it. Nothing is copied from a copy that does not match
/// its manifest; a file damaged in both copies is reported. Two places
/// whose manifests differ under one number, or whose generations do not
/// continue each other (another job's L1 or L2), get nothing copied between
/// them (exit 3). A replaced manifest is never absent in between. It then
/// verifies as above (exit 0 only when everything checks out afterwards),
/// under the job's writer locks (exit 4 beside a push). On an MPI job's
/// location, each rank's chain against its L1/R.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Check L2 alone, even when an L1 directory is configured.
    #[arg(long)]
    l2_only: bool,
    /// First rewrite a file damaged in one copy (L2 or L1's) from the
    /// other; needs L1.
    #[arg(long, conflicts_with = "l2_only")]
    repair: bool,
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    settings: ConfigLayer,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let s = Settings::load(&a.settings)?;
    // An MPI job's location: every rank's chains (rank R's alone with
    // --rank R), references read from the ranks that store them, and with
    // the job's L1 directory each rank's L1/R (helper-66: both backends
    // read the rank's chain with --rank, and L1 was never checked).
    let l1 = if a.l2_only { None } else { s.opt_l1()? };
    if a.repair && l1.is_none() {
        return Err(rexctl::Error::Invalid(
            "--repair rewrites a damaged copy from the other one: it needs the job's L1 directory (--l1, REX_L1 or rex.toml)".into(),
        )
        .into());
    }
    if let Some(root) = super::job_root(&s)? {
        let repaired = match (&l1, a.repair) {
            (Some(l1), true) => {
                let pb = ui::spinner("repairing");
                let r = rexctl::l2::repair::repair_job(&root, l1, super::job_rank(&s)?);
                pb.finish_and_clear();
                Some(r?)
            }
            _ => None,
        };
        if let Some(r) = &repaired {
            print_repair(r, a.json)?;
        }
        let code = super::run_job(
            &root,
            true,
            l1.as_deref(),
            super::job_rank(&s)?,
            a.json,
            repaired.as_ref(),
        )?;
        return Ok(match repaired {
            Some(r) if r.incomplete() && code == 0 => rexctl::error::exit::DATA,
            _ => code,
        });
    }
    let repaired = match (&l1, a.repair) {
        (Some(l1), true) => {
            let pb = ui::spinner("repairing");
            let l2 = rexctl::store::open_l2(&s.l2()?, &s.store()?, false)?;
            let r = Job::open(l1, l2).and_then(|job| {
                rexctl::l2::repair::repair(&job).map_err(|e| job.l2.public_error(e))
            });
            pb.finish_and_clear();
            let r = r?;
            print_repair(&r, a.json)?;
            Some(r)
        }
        _ => None,
    };
    // A directory that does not exist has nothing to verify (below). The
    // store is opened again after a repair: a bucket's cached copies of
    // what it replaced are not read again.
    let l2 = rexctl::store::open_l2_read(&s.l2()?, &s.store()?)?;
    let place = l2.describe();
    let pb = ui::spinner("verifying");
    let (r, l2) = match &l1 {
        Some(l1) => {
            let job = Job::open_read(l1, l2)?;
            (verify(job.l2.as_ref(), Some(&job)), job.l2)
        }
        None => (verify(l2.as_ref(), None), l2),
    };
    pb.finish_and_clear();
    let mut r = r.map_err(|e| l2.public_error(e))?;
    for g in &mut r.generations {
        g.error = g.error.as_deref().map(|e| l2.public_text(e));
    }
    for e in r.invalid_manifests.iter_mut().chain(r.l1_errors.iter_mut()) {
        *e = l2.public_text(e);
    }
    // Nothing to verify is not "ok": a job whose checkpoints are not where
    // the command looked must not pass a check.
    let nothing = r.generations.is_empty() && r.invalid_manifests.is_empty();
    if nothing {
        return Err(rexctl::Error::chain(&place, "nothing to verify: no generation here").into());
    }
    if a.json {
        match &repaired {
            Some(rep) => ui::print_json(&serde_json::json!({
                "repair": rep,
                "verify": &r,
            }))?,
            None => ui::print_json(&r)?,
        }
    } else {
        for g in &r.generations {
            match &g.error {
                None => outln!(
                    "{} generation {}: {}",
                    g.level,
                    g.generation,
                    ui::good("ok")
                ),
                Some(e) => outln!(
                    "{} generation {}: {}: {e}",
                    g.level,
                    g.generation,
                    ui::bad("BAD")
                ),
            }
        }
        for e in r.invalid_manifests.iter().chain(&r.l1_errors) {
            outln!("{}: {e}", ui::bad("BAD"));
        }
        {
            // Each place's copy counts once: "3 generations in L2 and
            // their 3 copies in L1", not "6 generations".
            let count = |level: &str| r.generations.iter().filter(|g| g.level == level).count();
            let (l2, l1) = (count("L2"), count("L1"));
            outln!(
                "{}: {l2} generation{} in L2{}, {} pages rebuilt and checked",
                if r.ok() {
                    ui::good("ok")
                } else {
                    ui::bad("FAILED")
                },
                if l2 == 1 { "" } else { "s" },
                if l1 > 0 {
                    format!(" and {l1} cop{} in L1", if l1 == 1 { "y" } else { "ies" })
                } else {
                    String::new()
                },
                r.pages_checked
            );
        }
    }
    if let Some(rep) = &repaired {
        for e in &rep.unrepairable {
            ui::error(e);
        }
    }
    if !r.ok() || repaired.as_ref().is_some_and(|r| r.incomplete()) {
        for g in r.generations.iter().filter_map(|g| g.error.as_ref()) {
            ui::error(g);
        }
        for e in r.invalid_manifests.iter().chain(&r.l1_errors) {
            ui::error(e);
        }
        return Ok(rexctl::error::exit::DATA);
    }
    Ok(0)
}

/// Says what `--repair` did (human output; the JSON goes with verify's).
pub(super) fn print_repair(r: &RepairReport, json: bool) -> anyhow::Result<()> {
    if json {
        return Ok(());
    }
    for line in &r.repaired {
        outln!("{}: {line}", ui::good("repaired"));
    }
    for line in &r.unrepairable {
        outln!("{}: {line}", ui::bad("NOT REPAIRED"));
    }
    Ok(())
}
