//! `rexctl push-l2`: coalesce, deduplicate and publish the pending batch.

use std::sync::Arc;

use rexctl::control::config::ConfigLayer;
use rexctl::l2::push::{Job, JobIdentity, PushOptions, PushReport, push_l2};

use crate::cmd::config_args::Settings;
use crate::ui;

/// Coalesce the pending L1 checkpoints, deduplicate them page by page, and
/// publish a new L2 generation (it then replaces those checkpoints in L1).
///
/// The first push, a batch holding a FULL checkpoint, or `--full` makes a
/// complete coalescence (a fresh full RPS starting a new chain); otherwise
/// the generation is a ΔRPS on top of the newest one. A push first recovers
/// from any interrupted push. Exits 4 when another rexctl holds the job's
/// lock.
///
/// The L1 directory holds the REX-IC files (the chain's local copy is kept
/// in its `rex/` subdirectory). The L2 location is a directory (created if
/// missing; a relative one only when named with ./), file:///DIR, or
/// s3://BUCKET/PREFIX, where the job's objects go under PREFIX/JOB/RANK/
/// (the job named by --job, REX_JOB, rex.toml or the scheduler; endpoint,
/// region and credentials from rex.toml(5) or the AWS_* variables). Large objects go up as multipart uploads, a few parts at a
/// time, with a progress bar on a terminal; the summary line gives the bytes
/// uploaded and the throughput.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Force a complete coalescence: a fresh full RPS and a new chain.
    #[arg(long)]
    full: bool,
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    settings: ConfigLayer,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    // Every setting and the L1 directory are checked before L2 is created.
    let s = Settings::load(&a.settings)?;
    let store = s.store()?;
    let cfg = s.config()?;
    rexctl::l2::push::check_l1(&cfg.l1)?;
    let l2 = rexctl::store::open_l2(&cfg.l2, &store, true)?;
    let pb = ui::spinner("coalescing, deduplicating and pushing");
    let job = Job::open(&cfg.l1, l2)?
        .with_identity(JobIdentity {
            job: cfg.store.job.clone(),
            rank: cfg.store.rank.clone(),
        })
        .with_progress(Arc::new(ui::UploadBar::new(pb.clone())));
    let opts = PushOptions {
        pattern_size: cfg.pattern_size,
        full: a.full,
        keep_chains_l2: cfg.keep_chains_l2,
        keep_chains_l1: cfg.keep_chains_l1,
        hash: cfg.hash,
        format: cfg.write_format,
    };
    let report = push_l2(&job, &opts);
    pb.finish_and_clear();
    let report = report.map_err(|e| job.l2.public_error(e))?;
    if a.json {
        ui::print_json(&report)?;
    } else {
        print_human(&report)?;
    }
    Ok(0)
}

/// One summary line (plus recovery notes) for a push.
pub fn print_human(r: &PushReport) -> Result<(), ui::StdoutError> {
    for note in &r.recovered {
        outln!("recovered: {note}");
    }
    let Some(m) = &r.manifest else {
        outln!("nothing to push: no pending L1 checkpoint");
        return Ok(());
    };
    let d = r.dedup.as_ref().expect("dedup with manifest");
    let mbps = ui::mbps;
    outln!(
        "pushed generation {} ({}{}, seq {}..={}): {} pages ({} live), {} in -> {} out, ratio {:.2}; dedup {:.3}s ({:.0} MB/s), uploaded {} in {:.3}s ({:.0} MB/s); {} L1 checkpoints replaced{}",
        m.generation,
        match m.kind {
            rexctl::format::manifest::GenKind::Full => "full RPS",
            rexctl::format::manifest::GenKind::Delta => "ΔRPS",
        },
        r.full_reason
            .as_ref()
            .map(|w| format!(": {w}"))
            .unwrap_or_default(),
        m.first_seq,
        m.last_seq,
        m.dirty_pages,
        m.live_pages,
        ui::bytes(m.bytes_in),
        ui::bytes(m.bytes_out),
        m.compression_ratio,
        m.timings.dedup_s,
        mbps(d.bytes_in, m.timings.dedup_s),
        ui::bytes(m.bytes_out),
        m.timings.upload_s,
        mbps(m.bytes_out, m.timings.upload_s),
        r.deleted_ics,
        if r.pruned_l2.is_empty() {
            String::new()
        } else {
            format!("; pruned generations {:?} from L2", r.pruned_l2)
        }
    );
    Ok(())
}
