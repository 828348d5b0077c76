//! `rexctl demo`: the main job end to end on a generated workload, with
//! local directories, checked against the ground truth.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use rexctl::eval::image::{ImageDiff, compare_ic_files};
use rexctl::eval::workload::{self, Workload};
use rexctl::l2::push::{Job, PushOptions, push_l2};
use rexctl::l2::restore::{RestoreOptions, RestoreReport, restore_l1_l2, restore_l2, verify};
use rexctl::store::DirStore;

use serde::Serialize;

use crate::ui;

/// Run the whole pipeline on a generated workload and check the result:
/// take checkpoints into a local L1 directory, push them to a local L2
/// directory in batches (coalesce, deduplicate), restore from L2 alone and
/// from L1 plus L2, and compare both images with the generator's ground
/// truth, byte for byte. Exits 6 on any mismatch.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Work directory (default: a fresh temporary directory, removed
    /// afterwards unless --keep).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Workload profile (see `rexctl gen --list-profiles`).
    #[arg(long, default_value = "balanced")]
    profile: String,
    /// Generator seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Checkpoints per L2 push.
    #[arg(long, default_value_t = 4, value_parser = crate::cmd::at_least_one)]
    batch: u64,
    /// Keep the temporary work directory.
    #[arg(long)]
    keep: bool,
    /// Print one JSON object (every step and the verdict) instead of text.
    #[arg(long)]
    json: bool,
}

/// What the demo did, for `--json`.
#[derive(Serialize, Default)]
struct Report {
    profile: String,
    seed: u64,
    pages: u64,
    page_size: u32,
    checkpoints: u64,
    batch: u64,
    pushes: Vec<Push>,
    pending: u64,
    restores: Vec<Restore>,
    verify_ok: bool,
    generations_verified: usize,
    pages_verified: u64,
    /// Every restore equals the ground truth and verify passed.
    ok: bool,
    /// The work directory, when kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(serialize_with = "rexctl::format::json_path::opt_path")]
    kept: Option<PathBuf>,
}

#[derive(Serialize)]
struct Push {
    generation: u64,
    first_seq: u64,
    last_seq: u64,
    full: bool,
    bytes_in: u64,
    bytes_out: u64,
    compression_ratio: f64,
    seconds: f64,
}

#[derive(Serialize)]
struct Restore {
    from: &'static str,
    seq: u64,
    generation: Option<u64>,
    pages: u64,
    pages_from_l1_ics: u64,
    seconds: f64,
    equals_truth: bool,
}

impl Restore {
    fn of(from: &'static str, r: &RestoreReport, t: Instant, diff: &ImageDiff) -> Restore {
        Restore {
            from,
            seq: r.seq,
            generation: r.generation,
            pages: r.pages,
            pages_from_l1_ics: r.pages_from_l1_ics,
            seconds: t.elapsed().as_secs_f64(),
            equals_truth: diff.is_equal(),
        }
    }
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let (dir, remove) = match &a.dir {
        Some(d) => (d.clone(), false),
        None => (
            std::env::temp_dir().join(format!("rexctl-demo-{}", std::process::id())),
            !a.keep,
        ),
    };
    if dir.exists() && std::fs::read_dir(&dir)?.next().is_some() {
        return Err(rexctl::Error::Invalid(format!(
            "{}: work directory is not empty",
            dir.display()
        ))
        .into());
    }
    // Removed by an interrupt too, unless the user asked to keep it.
    let _listed = remove.then(|| rexctl::durable::RemovedOnSignal::new(&dir));
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("{}: create directory", dir.display()))?;
    let mut report = Report::default();
    let result = demo(&a, &dir, &mut report);
    if remove {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        report.kept = Some(dir.clone());
        if !a.json {
            outln!("work directory kept: {}", dir.display());
        }
    }
    let code = result?;
    if a.json {
        ui::print_json(&report)?;
    }
    Ok(code)
}

fn demo(a: &Args, dir: &Path, rep: &mut Report) -> anyhow::Result<i32> {
    // The human lines, or nothing with --json (the report says it all).
    macro_rules! say {
        ($($t:tt)*) => {
            if !a.json {
                outln!($($t)*);
            }
        };
    }
    let l1 = dir.join("l1");
    let l2 = dir.join("l2");
    std::fs::create_dir_all(&l1).with_context(|| format!("{}: create directory", l1.display()))?;
    let profile = workload::profile(&a.profile)?;
    let (n, batch) = (profile.checkpoints, a.batch);
    if batch > n {
        // The last checkpoint stays pending: no batch would ever be pushed,
        // and the restore from L2 alone would have nothing (helper-46).
        return Err(rexctl::Error::Invalid(format!(
            "--batch {batch}: profile {} takes 1 FULL + {n} incremental checkpoints, of which the last stays in L1: give at most {n}",
            profile.name
        ))
        .into());
    }
    say!(
        "rexctl demo: profile {} (seed {}), {} pages of {} bytes, 1 FULL + {n} incremental checkpoints, L2 push every {batch}",
        profile.name,
        a.seed,
        profile.pages,
        profile.page_size
    );
    rep.profile = profile.name.to_string();
    rep.seed = a.seed;
    rep.pages = profile.pages;
    rep.page_size = profile.page_size;
    rep.checkpoints = n + 1;
    rep.batch = batch;
    let mut w = Workload::new(profile, a.seed)?;
    let job = Job::open(&l1, Box::new(DirStore::create(&l2)?))?;
    let opts = PushOptions::default();
    let mut step = 1;
    let mut pushed_truth = None;
    let mut pending = 0;
    for seq in 0..=n {
        w.checkpoint(&l1)?;
        pending += 1;
        // Push full batches; the last checkpoint stays pending in L1.
        if pending == batch && seq < n {
            let t = Instant::now();
            let r = push_l2(&job, &opts)?;
            let m = r.manifest.as_ref().expect("a batch was pending");
            say!(
                "{step:>2}. push-l2   seq {}..={} -> generation {} ({}): {} in -> {} out, ratio {:.2} [{:.2?}]",
                m.first_seq,
                m.last_seq,
                m.generation,
                if m.parent.is_none() {
                    "full RPS"
                } else {
                    "ΔRPS"
                },
                ui::bytes(m.bytes_in),
                ui::bytes(m.bytes_out),
                m.compression_ratio,
                t.elapsed()
            );
            rep.pushes.push(Push {
                generation: m.generation,
                first_seq: m.first_seq,
                last_seq: m.last_seq,
                full: m.parent.is_none(),
                bytes_in: m.bytes_in,
                bytes_out: m.bytes_out,
                compression_ratio: m.compression_ratio,
                seconds: t.elapsed().as_secs_f64(),
            });
            step += 1;
            pending = 0;
            let truth = dir.join(format!("truth-seq{}.rexic", m.last_seq));
            w.write_image(&truth)?;
            pushed_truth = Some(truth);
        }
    }
    let final_truth = dir.join("truth-final.rexic");
    w.write_image(&final_truth)?;
    say!(
        "{step:>2}. pending   {pending} checkpoint{} stay{} in L1 (written since the last L2 checkpoint)",
        if pending == 1 { "" } else { "s" },
        if pending == 1 { "s" } else { "" }
    );
    step += 1;

    let mut ok = true;
    let restored = dir.join("restored-l2.rexic");
    let t = Instant::now();
    let r = restore_l2(job.l2.as_ref(), &RestoreOptions::default(), &restored)?;
    let truth = pushed_truth.expect("at least one push");
    let diff = compare_ic_files(&restored, &truth)?;
    ok &= diff.is_equal();
    say!(
        "{step:>2}. restore   from L2 alone (lost node): generation {} = seq {}, {} pages [{:.2?}]: {}",
        r.generation.unwrap_or(0),
        r.seq,
        r.pages,
        t.elapsed(),
        verdict(&diff)
    );
    rep.restores.push(Restore::of("l2", &r, t, &diff));
    step += 1;
    let restored = dir.join("restored-l1l2.rexic");
    let t = Instant::now();
    let r = restore_l1_l2(&job, &RestoreOptions::default(), &restored)?;
    let diff = compare_ic_files(&restored, &final_truth)?;
    ok &= diff.is_equal();
    say!(
        "{step:>2}. restore   from L1 + L2 (transient fault): seq {}, {} pages, {} from L1 checkpoints [{:.2?}]: {}",
        r.seq,
        r.pages,
        r.pages_from_l1_ics,
        t.elapsed(),
        verdict(&diff)
    );
    rep.restores.push(Restore::of("l1+l2", &r, t, &diff));
    step += 1;
    let v = verify(job.l2.as_ref(), Some(&job))?;
    ok &= v.ok();
    rep.verify_ok = v.ok();
    rep.generations_verified = v.generations.len();
    rep.pages_verified = v.pages_checked;
    rep.pending = pending;
    rep.ok = ok;
    say!(
        "{step:>2}. verify    {} generations, {} pages rebuilt and checked: {}",
        v.generations.len(),
        v.pages_checked,
        if v.ok() { "ok" } else { "FAILED" }
    );
    if ok {
        say!("every restore equals the ground truth, byte for byte");
        Ok(0)
    } else {
        say!("MISMATCH: a restore differs from the ground truth");
        ui::error("MISMATCH: a restore differs from the ground truth");
        Ok(rexctl::error::exit::MISMATCH)
    }
}

fn verdict(d: &ImageDiff) -> String {
    if d.is_equal() {
        "equals the ground truth".into()
    } else {
        format!("DIFFERS from the ground truth: {d}")
    }
}
