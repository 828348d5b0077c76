//! `rexctl verify`: check a chain end to end without writing an image.

use std::path::PathBuf;

use rexctl::l2::push::Job;
use rexctl::l2::restore::verify;

use crate::cmd::config_args::StoreArgs;
use crate::ui;

/// Check every generation end to end: manifests, file sizes and CRCs, every
/// chunk, and every live page rebuilt against its recorded CRC. With `--l1`,
/// also L1's copy of the chain and its pending checkpoints. Exits 3 when
/// anything is wrong. An object of a bucket (s3://BUCKET/PREFIX) is fetched
/// whole and checked against the size and CRC its manifest records; errors
/// name it by its s3:// URL.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The L2 location: a directory, file:///DIR or s3://BUCKET/PREFIX.
    #[arg(long, value_name = "URL")]
    l2: PathBuf,
    #[command(flatten)]
    store: StoreArgs,
    /// The L1 directory.
    #[arg(long)]
    l1: Option<PathBuf>,
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let l2 = a.store.open(&a.l2, false)?;
    let pb = ui::spinner("verifying");
    let (r, l2) = match &a.l1 {
        Some(l1) => {
            let job = Job::open(l1, l2)?;
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
