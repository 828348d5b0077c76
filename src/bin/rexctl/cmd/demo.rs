//! `rexctl demo`: the main job end to end on a generated workload, with
//! local directories, checked against the ground truth.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use rexctl::coalesce::CList;
use rexctl::format::ic::IcFile;
use rexctl::image::compare_ic_files;
use rexctl::l1::L1Dir;
use rexctl::workload;

use crate::ui;

/// Run the whole pipeline on a generated workload and check the result:
/// generate an L1 chain, coalesce it, verify the coalesced file, and compare
/// it with the generator's ground truth, byte for byte.
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

fn demo(a: &Args, dir: &std::path::Path) -> anyhow::Result<i32> {
    let l1 = dir.join("l1");
    let truth = dir.join("truth.rexic");
    let coalesced = dir.join("coalesced.rexic");

    let t = Instant::now();
    let profile = workload::profile(&a.profile)?;
    let g = workload::generate(&l1, profile, a.seed, Some(&truth), |_| {})?;
    println!(
        "1. gen       {} checkpoints of profile {} (seed {}): {} in {} [{:.2?}]",
        g.files.len(),
        g.profile,
        g.seed,
        ui::bytes(g.bytes),
        l1.display(),
        t.elapsed()
    );

    let t = Instant::now();
    let chain = L1Dir::scan(&l1)?;
    let clist = CList::build(&chain.files)?;
    let s = clist.stats;
    println!(
        "2. coalesce  {} page copies -> {} distinct pages ({} skipped), read {} of headers and indexes [{:.2?}]",
        s.pages_carried,
        s.distinct_pages,
        ui::pct(s.skipped_share()),
        ui::bytes(s.meta_bytes_read),
        t.elapsed()
    );
    let t = Instant::now();
    clist.write_ic(&chain.files, &coalesced)?;
    let f = IcFile::open(&coalesced)?;
    f.verify()?;
    println!(
        "3. inspect   {}: seq {}, {}, {} pages, CRCs ok [{:.2?}]",
        coalesced.display(),
        f.meta().seq(),
        if f.meta().is_full() {
            "FULL"
        } else {
            "incremental"
        },
        f.meta().page_count(),
        t.elapsed()
    );
    let diff = compare_ic_files(&coalesced, &truth)?;
    if !diff.is_equal() {
        println!("4. compare   MISMATCH with the ground truth: {diff}");
        return Ok(rexctl::error::exit::MISMATCH);
    }
    println!("4. compare   coalesced image equals the ground truth, byte for byte: {diff}");
    Ok(0)
}
