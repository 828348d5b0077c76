//! `rexctl gen`: write a generated workload into an L1 directory.

use std::path::PathBuf;

use rexctl::eval::workload;
use rexctl::l1::list_ic_files;

use crate::ui;

/// Generate a deterministic workload: a FULL checkpoint and a sequence of
/// incrementals (REX-IC files) that behave like a real application.
///
/// Profiles: balanced (default), small-inc, large-inc, incompressible,
/// churn, sparse-zero; `--list-profiles` describes them. The same profile and
/// seed always produce the same files.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Directory to write the REX-IC files into (created if missing; must hold
    /// no REX-IC file yet).
    #[arg(required_unless_present = "list_profiles")]
    outdir: Option<PathBuf>,
    /// Workload profile.
    #[arg(long, default_value = "balanced")]
    profile: String,
    /// Seed of the deterministic generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Override the profile's initial footprint, in pages.
    #[arg(long)]
    pages: Option<u64>,
    /// Override the number of incrementals after the FULL checkpoint.
    #[arg(long)]
    count: Option<u64>,
    /// Override the page size in bytes (a power of two, 512..=1048576).
    #[arg(long)]
    page_size: Option<u32>,
    /// Also write the final memory image as one FULL REX-IC file here (the
    /// ground truth for a restore); must lie outside OUTDIR.
    #[arg(long)]
    truth: Option<PathBuf>,
    /// Generate the checkpoints of N ranks of an MPI job, into OUTDIR/0/
    /// .. OUTDIR/N-1/ (the L1 layout of `push-l2 --collective`), with
    /// --truth a directory that gets each rank's final image as R.rexic.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    ranks: Option<u32>,
    /// With --ranks: the share of every rank's footprint that is the same
    /// on every rank (0 to 1; default 0.5).
    #[arg(long, value_name = "SHARE", requires = "ranks")]
    shared: Option<f64>,
    /// Replace the --truth file(s) if they exist.
    #[arg(short, long, requires = "truth")]
    force: bool,
    /// List the profiles and exit.
    #[arg(long)]
    list_profiles: bool,
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    if a.list_profiles {
        let all = workload::profiles();
        if a.json {
            ui::print_json(&all)?;
        } else {
            for p in all {
                outln!("{:<15} {}", p.name, p.description);
            }
        }
        return Ok(0);
    }
    let outdir = a.outdir.expect("clap requires OUTDIR");
    let mut profile = workload::profile(&a.profile)?;
    if let Some(p) = a.pages {
        profile.pages = p;
    }
    if let Some(c) = a.count {
        profile.checkpoints = c;
    }
    if let Some(s) = a.page_size {
        profile.page_size = s;
    }
    if outdir.exists() && !list_ic_files(&outdir)?.is_empty() {
        return Err(rexctl::Error::Invalid(format!(
            "{}: already holds REX-IC files; generate into an empty or new directory",
            outdir.display()
        ))
        .into());
    }
    // An MPI job's checkpoints go into OUTDIR/R: none may hold any yet
    // (helper-95: a second `gen --ranks` replaced rank 0's first
    // checkpoints with another run's and kept the rest).
    for r in 0..a.ranks.unwrap_or(0) {
        let d = outdir.join(r.to_string());
        if d.exists() && !list_ic_files(&d)?.is_empty() {
            return Err(rexctl::Error::Invalid(format!(
                "{}: already holds REX-IC files; generate into an empty or new directory",
                d.display()
            ))
            .into());
        }
    }
    if let Some(t) = &a.truth {
        // Inside OUTDIR, rank R's image would join a rank's checkpoints
        // (helper-95: `--truth OUTDIR/0` made rank 0's L1 unusable).
        if a.ranks.is_some() {
            crate::cmd::not_inside(&t.join("0.rexic"), "--truth", &outdir, "OUTDIR")?;
        }
        if a.ranks.is_none() && crate::cmd::lies_in(t, &outdir) {
            return Err(rexctl::Error::Invalid(format!(
                "--truth {} must lie outside {}, where it would join the checkpoints",
                t.display(),
                outdir.display()
            ))
            .into());
        }
        if a.ranks.is_none() {
            crate::cmd::check_out(t, a.force)?;
            // Checked before any checkpoint is written: a truth that cannot
            // be written left a full directory behind, which the corrected
            // command then refused (helper-46).
            let parent = match t.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => std::path::Path::new("."),
            };
            if !parent.is_dir() {
                return Err(rexctl::Error::Invalid(format!(
                    "--truth {}: {} is not a directory",
                    t.display(),
                    parent.display()
                ))
                .into());
            }
            // The file OUTDIR will be (helper-72: `gen d --truth d` wrote
            // the checkpoints into d, then failed on the truth), or a
            // directory the truth cannot be made in (a read-only one).
            if std::path::absolute(t).ok() == std::path::absolute(&outdir).ok() {
                return Err(rexctl::Error::Invalid(format!(
                    "--truth {} is OUTDIR itself: give the truth a file name outside it",
                    t.display()
                ))
                .into());
            }
            tempfile::Builder::new()
                .prefix(".rex-truth-")
                .tempfile_in(parent)
                .map_err(|e| {
                    rexctl::Error::io(parent, "make the --truth file in this directory", e)
                })?;
        } else if t.is_dir() {
            for r in 0..a.ranks.unwrap_or(0) {
                crate::cmd::check_out(&t.join(format!("{r}.rexic")), a.force)?;
            }
        } else if t.exists() {
            return Err(rexctl::Error::Invalid(format!(
                "--truth {}: with --ranks, the truth is a directory (it gets each rank's image as R.rexic), and this is a file",
                t.display()
            ))
            .into());
        }
    }
    let n = profile.checkpoints;
    let name = profile.name;
    if let Some(ranks) = a.ranks {
        let shared = a.shared.unwrap_or(0.5);
        let all =
            workload::generate_ranks(&outdir, profile, a.seed, ranks, shared, a.truth.as_deref())?;
        if a.json {
            ui::print_json(&all)?;
        } else {
            outln!(
                "generated {} ranks x {} checkpoints (1 FULL + {n} incremental) of profile {name}, seed {}, {:.0} % shared, in {}/0..{}: {}",
                ranks,
                n + 1,
                a.seed,
                shared * 100.0,
                outdir.display(),
                ranks - 1,
                ui::bytes(all.iter().map(|s| s.bytes).sum())
            );
        }
        return Ok(0);
    }
    let pb = ui::progress(n + 1, "generating");
    let summary = workload::generate(&outdir, profile, a.seed, a.truth.as_deref(), |_| pb.inc(1))?;
    pb.finish_and_clear();
    let bytes = summary.bytes;
    if a.json {
        ui::print_json(&summary)?;
    } else {
        outln!(
            "generated {} (1 FULL + {n} incremental) of profile {name}, seed {}, in {}: {}; final footprint {}{}",
            ui::count(summary.files.len() as u64, "checkpoint"),
            a.seed,
            outdir.display(),
            ui::bytes(bytes),
            ui::count(summary.final_pages, "page"),
            a.truth
                .as_ref()
                .map(|t| format!("; final image in {}", t.display()))
                .unwrap_or_default()
        );
    }
    Ok(0)
}
