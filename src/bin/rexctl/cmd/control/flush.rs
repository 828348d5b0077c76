//! `rexctl flush`: the cron entry point.

use std::sync::Arc;

use rexctl::control::config::{Config, ConfigLayer};
use rexctl::control::flush::{Decision, FlushReport, flush};
use rexctl::l2::push::{Job, JobIdentity};

use crate::cmd::config_args::Settings;
use crate::ui;

/// Push an L2 checkpoint if one is due: meant to run from cron or a systemd
/// timer every minute or so.
///
/// Takes the job's lock without waiting (a concurrent flush exits 4 and says
/// who holds it; a lock left by a dead process is free again), recovers from
/// any interrupted push, and asks the controller whether an L2 checkpoint is
/// due (at least [chi] pending L1 checkpoints, chi interpolated from the
/// interval table at the job's IC and CR; or the oldest pending checkpoint
/// too old, or too many pending bytes) and whether it must be a complete
/// coalescence (pointer space, chain length, bytes rule, cost rule). Logs one line per
/// run for cron and journald: RFC 3339 time, job, rank, decision (push,
/// wait, would-push, nothing-to-push), bytes uploaded, seconds, pending
/// checkpoints and the reason, as key=value pairs (a failed run:
/// decision=error, exit and error, beside the error on stderr); -v adds the controller's
/// inputs and the recovery notes (a progress bar on a terminal). Exit status
/// 0 when pushed or nothing was due. The L2 location may be a bucket
/// (s3://BUCKET/PREFIX), see rex.toml(5). systemd units and a crontab
/// example are in contrib/ (scripts/install installs them).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Explain the decision without acting.
    #[arg(short = 'n', long)]
    dry_run: bool,
    /// Print a JSON object instead of a line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    settings: ConfigLayer,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let cfg = Settings::load(&a.settings)?.config()?;
    let json = a.json;
    let r = run_with(a, &cfg);
    // A failed run logs its line too (decision=error), so that a cron or
    // journald log has one line per run (helper-73: only the error text).
    if let Err(e) = &r
        && !json
    {
        let code = e
            .downcast_ref::<rexctl::Error>()
            .map_or(rexctl::error::exit::FAILURE, |e| e.exit_code());
        let text = format!("{e:#}")
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', " ");
        outln!(
            "{} flush job={} rank={} decision=error exit={code} error=\"{text}\"",
            humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
            cfg.store.job.as_deref().unwrap_or("-"),
            cfg.store.rank
        );
    }
    r
}

fn run_with(a: Args, cfg: &Config) -> anyhow::Result<i32> {
    rexctl::l2::push::check_l1(&cfg.l1)?;
    // A dry run acts on nothing: it reads, as `plan` does.
    let job = if a.dry_run {
        Job::open_read(&cfg.l1, rexctl::store::open_l2_read(&cfg.l2, &cfg.store)?)?
    } else {
        Job::open(&cfg.l1, rexctl::store::open_l2(&cfg.l2, &cfg.store, true)?)?
    };
    let pb = ui::spinner("flush");
    let job = job
        .with_identity(JobIdentity {
            job: cfg.store.job.clone(),
            rank: cfg.store.rank.clone(),
        })
        .with_progress(Arc::new(ui::UploadBar::new(pb.clone())));
    let report = flush(&job, cfg, a.dry_run);
    pb.finish_and_clear();
    let report = report.map_err(|e| job.l2.public_error(e))?;
    if a.json {
        ui::print_json(&report)?;
    } else {
        outln!("{}", log_line(&report, cfg, std::time::SystemTime::now()));
        // The recovery notes lead `line`'s text (helper-73: printed here
        // as well, each note came twice).
        detailln!("{}", line(&report));
    }
    Ok(0)
}

/// The one line a run logs at info level, for cron and journald: RFC 3339
/// time, job, rank, decision, bytes uploaded, seconds, then the reason, as
/// `key=value` pairs (logfmt).
pub fn log_line(r: &FlushReport, cfg: &Config, now: std::time::SystemTime) -> String {
    let d = &r.decision;
    let pushed = r.push.as_ref().and_then(|p| p.manifest.as_ref());
    let decision = match (pushed, r.dry_run, d.due) {
        (Some(_), _, _) => "push",
        (None, true, true) => "would-push",
        (None, false, true) => "nothing-to-push",
        (None, _, false) => "wait",
    };
    let mut s = format!(
        "{} flush job={} rank={} decision={decision}",
        humantime::format_rfc3339_seconds(now),
        cfg.store.job.as_deref().unwrap_or("-"),
        cfg.store.rank
    );
    if let Some(m) = pushed {
        s.push_str(&format!(
            " generation={} kind={}",
            m.generation,
            if d.full { "full" } else { "delta" }
        ));
    } else if d.due {
        s.push_str(&format!(" kind={}", if d.full { "full" } else { "delta" }));
    }
    s.push_str(&format!(
        " bytes={} seconds={:.3} pending={}",
        pushed.map_or(0, |m| m.bytes_out),
        r.seconds,
        d.pending
    ));
    if !r.recovered.is_empty() {
        s.push_str(&format!(" recovered={}", r.recovered.len()));
    }
    s.push_str(&format!(" reason={:?}", d.reason));
    if let (Some(w), true) = (&d.full_reason, d.due) {
        s.push_str(&format!(" full_reason={w:?}"));
    }
    s
}

/// The inputs of a decision, as a short text.
pub fn inputs(d: &Decision) -> String {
    let mut s = format!(
        "IC {:.3}, CR {:.2}, chi {:.2}, [chi] {}, pending {}",
        d.ic, d.cr, d.chi, d.chi_int, d.pending
    );
    if let Some(r) = &d.rule {
        s.push_str(&format!(
            "; n {}, threshold {:.1} (Psi {:.3}s, C {:.3}s, delta {:.3}s, T {:.0}s, M {:.0}s, p {:.5})",
            d.n, r.threshold, r.psi, r.c, r.delta, r.t, r.m, r.p
        ));
    }
    if let Some(b) = &d.bytes_rule {
        s.push_str(&format!(
            "; predicted L2 bytes: full RPS {}, ΔRPS {} (margin {:.0} %)",
            crate::ui::bytes(b.full_bytes as u64),
            crate::ui::bytes(b.delta_bytes as u64),
            b.margin * 100.0
        ));
    }
    s
}

fn line(r: &FlushReport) -> String {
    let d = &r.decision;
    let mut prefix = String::new();
    for note in &r.recovered {
        prefix.push_str(&format!("recovered: {note}\n"));
    }
    let kind = if d.full {
        format!(
            "complete coalescence ({})",
            d.full_reason.as_deref().unwrap_or("")
        )
    } else {
        "ΔRPS".into()
    };
    match (&r.push, r.dry_run, d.due) {
        (Some(p), _, _) => {
            let Some(m) = &p.manifest else {
                return format!(
                    "{prefix}flush: due ({}) but nothing to push; {}",
                    d.reason,
                    inputs(d)
                );
            };
            format!(
                "{prefix}flush: pushed generation {} as {kind}: {}; {}; seq {}..={}, {} -> {} (ratio {:.2}), uploaded {} ({:.0} MB/s over {:.3}s of link time); {:.3}s in all",
                m.generation,
                d.reason,
                inputs(d),
                m.first_seq,
                m.last_seq,
                ui::bytes(m.bytes_in),
                ui::bytes(m.bytes_out),
                m.compression_ratio,
                ui::bytes(m.bytes_out),
                ui::mbps(m.bytes_out, m.timings.link_s),
                m.timings.link_s,
                r.seconds
            )
        }
        (None, true, true) => format!(
            "{prefix}flush --dry-run: would push a {kind}: {}; {}",
            d.reason,
            inputs(d)
        ),
        _ => format!(
            "{prefix}flush{}: nothing due: {}; {}",
            if r.dry_run { " --dry-run" } else { "" },
            d.reason,
            inputs(d)
        ),
    }
}
