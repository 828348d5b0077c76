//! `rexctl demo`: the main job end to end on a generated workload, with
//! local directories, checked against the ground truth.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use rexctl::eval::image::{ImageDiff, compare_ic_files};
use rexctl::eval::workload::{self, Workload};
use rexctl::l2::push::{Job, PushOptions, push_l2};
use rexctl::l2::restore::{RestoreOptions, restore_l1_l2, restore_l2, verify};
use rexctl::store::DirStore;

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
    #[arg(long, default_value_t = 4)]
    batch: u64,
    /// Keep the temporary work directory.
    #[arg(long)]
    keep: bool,
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
        bail!("{}: work directory is not empty", dir.display());
    }
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("{}: create directory", dir.display()))?;
    let result = demo(&a, &dir);
    if remove {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        println!("work directory kept: {}", dir.display());
    }
    result
}

fn demo(a: &Args, dir: &Path) -> anyhow::Result<i32> {
    let l1 = dir.join("l1");
    let l2 = dir.join("l2");
    std::fs::create_dir_all(&l1).with_context(|| format!("{}: create directory", l1.display()))?;
    let profile = workload::profile(&a.profile)?;
    let (n, batch) = (profile.checkpoints, a.batch.max(1));
    println!(
        "rexctl demo: profile {} (seed {}), {} pages of {} bytes, 1 FULL + {n} incremental checkpoints, L2 push every {batch}",
        profile.name, a.seed, profile.pages, profile.page_size
    );
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
            println!(
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
            step += 1;
            pending = 0;
            let truth = dir.join(format!("truth-seq{}.rexic", m.last_seq));
            w.write_image(&truth)?;
            pushed_truth = Some(truth);
        }
    }
    let final_truth = dir.join("truth-final.rexic");
    w.write_image(&final_truth)?;
    println!(
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
    println!(
        "{step:>2}. restore   from L2 alone (lost node): generation {} = seq {}, {} pages [{:.2?}]: {}",
        r.generation.unwrap_or(0),
        r.seq,
        r.pages,
        t.elapsed(),
        verdict(&diff)
    );
    step += 1;
    let restored = dir.join("restored-l1l2.rexic");
    let t = Instant::now();
    let r = restore_l1_l2(&job, &RestoreOptions::default(), &restored)?;
    let diff = compare_ic_files(&restored, &final_truth)?;
    ok &= diff.is_equal();
    println!(
        "{step:>2}. restore   from L1 + L2 (transient fault): seq {}, {} pages, {} from L1 checkpoints [{:.2?}]: {}",
        r.seq,
        r.pages,
        r.pages_from_l1_ics,
        t.elapsed(),
        verdict(&diff)
    );
    step += 1;
    let v = verify(job.l2.as_ref(), Some(&job))?;
    ok &= v.ok();
    println!(
        "{step:>2}. verify    {} generations, {} pages rebuilt and checked: {}",
        v.generations.len(),
        v.pages_checked,
        if v.ok() { "ok" } else { "FAILED" }
    );
    if ok {
        println!("every restore equals the ground truth, byte for byte");
        Ok(0)
    } else {
        println!("MISMATCH: a restore differs from the ground truth");
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
