//! `rexctl verify`: check a chain end to end without writing an image.

use std::path::PathBuf;

use rexctl::push::Job;
use rexctl::restore::verify;
use rexctl::store::DirStore;

use crate::ui;

/// Check every generation end to end: manifests, file sizes and CRCs, every
/// chunk, and every live page rebuilt against its recorded CRC. With `--l1`,
/// also L1's copy of the chain and its pending checkpoints. Exits 3 when
/// anything is wrong.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The L2 directory.
    #[arg(long)]
    l2: PathBuf,
    /// The L1 directory.
    #[arg(long)]
    l1: Option<PathBuf>,
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let l2 = DirStore::open(&a.l2)?;
    let job = a
        .l1
        .as_ref()
        .map(|l1| Job::open(l1, Box::new(l2.clone())))
        .transpose()?;
    let pb = ui::spinner("verifying");
    let r = verify(&l2, job.as_ref());
    pb.finish_and_clear();
    let r = r?;
    if a.json {
        ui::print_json(&r)?;
    } else {
        for g in &r.generations {
            match &g.error {
                None => println!("{} generation {}: ok", g.level, g.generation),
                Some(e) => println!("{} generation {}: BAD: {e}", g.level, g.generation),
            }
        }
        for e in r.invalid_manifests.iter().chain(&r.l1_errors) {
            println!("BAD: {e}");
        }
        println!(
            "{}: {} generations checked, {} pages rebuilt and checked",
            if r.ok() { "ok" } else { "FAILED" },
            r.generations.len(),
            r.pages_checked
        );
    }
    if !r.ok() {
        for g in r.generations.iter().filter_map(|g| g.error.as_ref()) {
            eprintln!("rexctl: {g}");
        }
        for e in r.invalid_manifests.iter().chain(&r.l1_errors) {
            eprintln!("rexctl: {e}");
        }
        return Ok(rexctl::error::exit::DATA);
    }
    Ok(0)
}
