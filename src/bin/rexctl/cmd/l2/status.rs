//! `rexctl status`: generations, chains, pending checkpoints.

use std::path::PathBuf;

use rexctl::format::manifest::GenKind;
use rexctl::l2::push::Job;
use rexctl::l2::status::status;

use crate::cmd::config_args::StoreArgs;
use crate::ui;

/// Show a job's state: L2 generations (kind, seqs, pages, sizes,
/// compression ratios), chains, and the L1 checkpoints waiting for the next
/// push.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The L1 directory.
    #[arg(long)]
    l1: PathBuf,
    /// The L2 location: a directory (created if missing), file:///DIR or
    /// s3://BUCKET/PREFIX.
    #[arg(long, value_name = "URL")]
    l2: PathBuf,
    #[command(flatten)]
    store: StoreArgs,
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let job = Job::open(&a.l1, a.store.open(&a.l2, true)?)?;
    let s = status(&job).map_err(|e| job.l2.public_error(e))?;
    if a.json {
        ui::print_json(&s)?;
        return Ok(0);
    }
    println!(
        "{:>6} {:>5} {:>5} {:>15} {:>8} {:>8} {:>11} {:>11} {:>7} {:>3}",
        "gen", "kind", "base", "seqs", "pages", "live", "in", "out", "ratio", "L1"
    );
    for g in &s.generations {
        println!(
            "{:>6} {:>5} {:>5} {:>15} {:>8} {:>8} {:>11} {:>11} {:>7.2} {:>3}",
            g.generation,
            match g.kind {
                GenKind::Full => "full",
                GenKind::Delta => "delta",
            },
            g.chain_base,
            format!("{}..={}", g.first_seq, g.last_seq),
            g.dirty_pages,
            g.live_pages,
            ui::bytes(g.bytes_in),
            ui::bytes(g.bytes_out),
            g.compression_ratio,
            if g.in_l1 { "yes" } else { "no" }
        );
    }
    println!(
        "{} chains in L2 {} ({}), newest chain {} generations long",
        s.chains,
        job.l2.describe(),
        ui::bytes(s.l2_bytes),
        s.newest_chain_length
    );
    match (&s.pending_error, s.pending_seqs) {
        (Some(e), _) => println!("pending L1 checkpoints: ERROR: {e}"),
        (None, Some((a, b))) => println!(
            "{} pending L1 checkpoints (seq {a}..={b}, {})",
            s.pending_ics,
            ui::bytes(s.pending_bytes)
        ),
        (None, None) => println!("no pending L1 checkpoint"),
    }
    if let (Some(t), Some(seq)) = (&s.regions, s.regions_seq) {
        println!(
            "{} regions at seq {seq} ({}, {} pages):",
            t.0.len(),
            ui::bytes(t.bytes()),
            t.pages()
        );
        for r in &t.0 {
            println!(
                "  region {:>5}  {:>11}  {:>8} pages  pages {:#x}..",
                r.id,
                ui::bytes(r.size),
                r.pages,
                r.first_page()
            );
        }
    }
    if let Some(h) = &s.producer {
        println!("a librex job checkpoints into this L1 directory: {h}");
    }
    for i in &s.invalid {
        println!("INVALID: {i}");
    }
    Ok(0)
}
