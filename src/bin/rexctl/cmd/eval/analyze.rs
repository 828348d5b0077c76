//! `rexctl analyze`: the paper's motivation figures on a job's own L1
//! checkpoints, and what REX would make of them.

use std::path::PathBuf;

use rexctl::eval::analyze::{Analysis, AnalyzeOptions, PHASES, analyze_with_progress, write_svg};

use crate::cmd::config_args::Settings;
use crate::ui;
use rexctl::control::config::ConfigLayer;

/// Tell what REX will buy on your own checkpoints: the paper's motivation
/// figures (Sigdel & Tzeng, §2) computed on an L1 directory, with the
/// compression ratio rexctl's pipeline achieves on it and the controller's
/// L2 interval.
///
/// The directory is read as chains: a FULL checkpoint, pushed to L2 on its
/// own, then its incrementals in batches of B (the controller's [chi], or
/// --batch).
///
/// Fig. 1 (what coalescing saves): for the j-th incremental of a batch, the
/// share of its pages that an earlier incremental of the same batch also
/// carried; coalescing keeps only the last copy.
///
/// Fig. 2 (what page-aware deduplication saves): for batch sizes 2 and 4,
/// the share of the 32-byte patterns of every rewritten page (written by a
/// batch, live at the previous L2 checkpoint) found in the page's previous
/// L2 version; anywhere in the page (what the Deduplication Unit finds) and
/// at the same offset.
///
/// Fig. 3: each incremental's size over the full size at that checkpoint:
/// mean, standard deviation, min and max.
///
/// Prediction: the checkpoints are pushed with rexctl's real pipeline
/// (coalesce, deduplicate) into a scratch directory (hard links, removed
/// afterwards), and the compression ratio achieved is reported with
/// chi = f(IC, CR) from the interval table and [chi]. Without --batch, the
/// batch size is found the way the controller would: start from CR = 2,
/// push, recompute [chi] from the ratio achieved, repeat until it settles.
///
/// Run it on a capture directory before pushing from it: push-l2 deletes
/// the IC files it has pushed. --svg draws the figures as one chart.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The L1 directory holding the REX-IC files (default: the l1 setting:
    /// --l1, REX_L1 or rex.toml).
    #[arg(value_name = "L1DIR")]
    l1dir: Option<PathBuf>,
    /// Print the analysis as JSON.
    #[arg(long)]
    json: bool,
    /// Also draw the figures into FILE as an SVG chart.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Incrementals per L2 checkpoint for Fig. 1 and the prediction
    /// (default: the controller's [chi]).
    #[arg(long, value_name = "N", value_parser = crate::cmd::at_least_one)]
    batch: Option<u64>,
    /// Do not run the pipeline: assume a compression ratio of 2 (the
    /// controller's value before any L2 checkpoint) and write nothing.
    #[arg(long)]
    no_pipeline: bool,
    /// Scratch directory for the pipeline (default: a hidden directory in
    /// the L1 directory, where the IC files are hard links that cost no
    /// space, else the system's temporary directory). It is removed at the
    /// end.
    #[arg(long, value_name = "DIR")]
    work: Option<PathBuf>,
    #[command(flatten)]
    settings: ConfigLayer,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    // The pattern size of Fig. 2 and the pipeline is the setting's
    // (--pattern-size, REX_PATTERN_SIZE, rex.toml; default 32).
    let s = Settings::load(&a.settings)?;
    let l1dir = match &a.l1dir {
        Some(d) => d.clone(),
        None => s.l1()?,
    };
    // A directory that is not there is a mistyped name, exit 5 as for a
    // push (helper-72: exit 1).
    rexctl::l2::push::check_l1(&l1dir)?;
    if let Some(svg) = &a.svg {
        // A report: an existing chart is replaced, never another file, nor a
        // file of the directory analysed.
        crate::cmd::not_inside(svg, "--svg", &l1dir, "the L1 directory")?;
        crate::cmd::check_chart(svg)?;
    }
    let opts = AnalyzeOptions {
        batch: a.batch,
        pattern_size: s.layer.pattern_size.unwrap_or(32),
        pipeline: !a.no_pipeline,
        work: a.work.clone(),
        ..Default::default()
    };
    // Progress per phase (the pipeline is the long one).
    let pb = ui::progress(PHASES.len() as u64, PHASES[0]);
    let r = analyze_with_progress(&l1dir, &opts, &mut |i| {
        pb.set_position(i as u64);
        pb.set_message(PHASES[i]);
    });
    pb.finish_and_clear();
    let r = r?;
    if let Some(svg) = &a.svg {
        write_svg(&r, svg)?;
    }
    if a.json {
        ui::print_json(&r)?;
    } else {
        print_human(&r)?;
        if let Some(svg) = &a.svg {
            outln!("chart: {}", svg.display());
        }
    }
    Ok(0)
}

fn print_human(r: &Analysis) -> Result<(), ui::StdoutError> {
    outln!(
        "{}: {} checkpoint{} in {} chain{} ({}), {} live pages of {} bytes at the end",
        r.l1.display(),
        r.checkpoints,
        if r.checkpoints == 1 { "" } else { "s" },
        r.chains,
        if r.chains == 1 { "" } else { "s" },
        ui::bytes(r.bytes),
        r.last_live_pages,
        r.page_size
    );
    let f1 = &r.fig1;
    outln!(
        "\nFig. 1  pages of the j-th incremental already dirty earlier in its batch (B = {}, {}, {} batches)",
        f1.batch,
        if r.batch_source == "option" {
            "--batch"
        } else {
            "the controller's [chi]"
        },
        f1.batches
    );
    for p in f1.by_position.iter().filter(|p| p.j >= 2) {
        outln!(
            "        j = {:<2}  {:>6}   (min {}, max {}, {} batches)",
            p.j,
            ui::pct(p.mean),
            ui::pct(p.min),
            ui::pct(p.max),
            p.samples
        );
    }
    if f1.by_position.iter().all(|p| p.j < 2) {
        outln!("        (no batch has two incrementals)");
    }
    outln!(
        "        coalescing skips {} of {} page copies ({})",
        f1.pages_skipped,
        f1.pages_carried,
        ui::pct(f1.skipped_share)
    );
    outln!("\nFig. 2  32-byte patterns of rewritten pages repeated from the previous L2 version");
    for f in &r.fig2 {
        outln!(
            "        ICB = {}  {:>6} anywhere in the page, {} at the same offset  ({} pages over {} L2 checkpoints)",
            f.batch,
            ui::pct(f.share),
            ui::pct(f.same_offset_share),
            f.rewritten_pages,
            f.l2_checkpoints
        );
    }
    let f3 = &r.fig3;
    outln!(
        "\nFig. 3  incremental size / full size: mean {}, sd {} (variance sd/mean {}), min {}, max {}, {} incrementals",
        ui::pct(f3.mean),
        ui::pct(f3.stddev),
        ui::pct(f3.variation),
        ui::pct(f3.min),
        ui::pct(f3.max),
        f3.ratios.len()
    );
    let p = &r.predicted;
    outln!();
    if p.source == "pipeline" {
        outln!(
            "Pipeline  batches of {}: {} of IC files -> {} in L2 over {} generations (ratio {:.2}); the controller's compression ratio {:.2} (full {}, Δ {}); in {:.2} s",
            p.batch,
            ui::bytes(p.bytes_in),
            ui::bytes(p.bytes_out),
            p.generations,
            p.bytes_in as f64 / p.bytes_out.max(1) as f64,
            p.compression_ratio,
            p.full_compression_ratio
                .map_or("-".into(), |c| format!("{c:.2}")),
            p.delta_compression_ratio
                .map_or("-".into(), |c| format!("{c:.2}")),
            p.seconds
        );
    } else {
        outln!("Pipeline  not run (--no-pipeline): compression ratio assumed to be 2");
    }
    outln!(
        "Controller  IC {:.3}, CR {:.2}: chi = {:.2}, [chi] = {} L1 checkpoints per L2 checkpoint",
        p.ic,
        p.compression_ratio,
        p.chi,
        p.chi_int
    );
    Ok(())
}
