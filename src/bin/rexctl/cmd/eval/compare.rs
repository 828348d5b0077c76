//! `rexctl compare`: REX against the paper's counterparts on the user's own
//! L1 sequence. The library runs the comparison (`rexctl::eval::compare`); this
//! module parses, runs each stage in a child process of this same binary
//! to measure its peak memory, and prints.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use rexctl::error::exit;
use rexctl::eval::compare::{
    self, Executor, InProcess, Input, Measured, Options, Plan, PushOutcome, Report, RestoreOutcome,
    Status, Workspace, report,
};

use crate::ui;

/// Compare REX with the paper's counterparts on an L1 sequence: IC,
/// IC-bzip2, IC-Xdelta3, AIC, Libhash and zstd (paper §6.1, §6.4.2).
///
/// Every counterpart replays the same checkpoints at the same L2 checkpoint
/// boundaries (REX's runtime controller, or --batch), then restores the
/// newest state from its L2 data alone; each restore is checked byte for
/// byte against the truth (the L1 files applied in order). Prints, per
/// counterpart: L2 bytes, compression ratio, compression and decompression
/// rates, restore time and its ratio to REX's, and peak memory (each stage
/// runs in a child process that reports its peak resident set).
///
/// L1DIR is only read. The work happens in a temporary directory ($TMPDIR,
/// or --work-dir); put it on tmpfs to measure the algorithms rather than the
/// disk's fsync. Exits 6 when a restore differs from the truth, 1 when a
/// counterpart fails; counterparts not built (IC-Xdelta3 and AIC need the
/// cargo feature xdelta3) or hitting a documented limitation of their
/// library are reported, not failed.
///
/// REX runs with its default settings and the REX_* variables of the
/// environment (rex.toml is not read): it compresses chunks and restores on
/// every core unless REX_THREADS says otherwise (REX_THREADS=1 gives
/// single-core figures).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The L1 directory holding the REX-IC files (read only).
    #[arg(required_unless_present = "summarize")]
    l1dir: Option<PathBuf>,
    /// Fixed batches of N checkpoints per L2 checkpoint, instead of REX's
    /// runtime controller.
    #[arg(long, value_name = "N", value_parser = crate::cmd::at_least_one)]
    batch: Option<u64>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Also draw the comparison as bars (Figs. 10, 17, 18, 19) into FILE, SVG.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Run only these counterparts (comma-separated or repeated; REX always
    /// runs).
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    only: Vec<String>,
    /// Work directory (must be empty or absent; kept). Default: a new
    /// temporary directory, removed afterwards unless --keep.
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
    /// Keep the temporary work directory.
    #[arg(long)]
    keep: bool,
    /// Restore runs per counterpart; the fastest is reported.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = crate::cmd::at_least_one)]
    runs: u64,
    /// Runs of each counterpart's L2 checkpoints over the whole sequence; the
    /// fastest is reported (REX's controller decides in the first run, the
    /// others replay its decisions).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = crate::cmd::at_least_one)]
    push_runs: u64,
    /// Run every stage in this process (faster to start; peak memory is then
    /// not measured).
    #[arg(long)]
    in_process: bool,
    /// A label for the report (default: the L1 directory's name).
    #[arg(long)]
    label: Option<String>,
    /// Instead of comparing: read reports saved with --json and print their
    /// summary as markdown (tables, geometric means, targets).
    #[arg(long, value_name = "JSON", num_args = 1.., conflicts_with_all = ["l1dir", "batch", "json", "svg", "only"])]
    summarize: Vec<PathBuf>,
    /// With --summarize: write the summary between the lines
    /// `<!-- compare:begin -->` and `<!-- compare:end -->` of FILE
    /// (appending them when absent) instead of printing it.
    #[arg(long, value_name = "FILE", requires = "summarize")]
    update: Option<PathBuf>,
    /// With --summarize: the machine the reports were made on, one line.
    #[arg(long, value_name = "TEXT", requires = "summarize")]
    machine: Option<String>,
    /// With --summarize: the command that reproduces the reports.
    #[arg(long, value_name = "TEXT", requires = "summarize")]
    command: Option<String>,
    /// Internal: run one stage of one counterpart (--only) in this process
    /// and print its outcome as JSON.
    #[arg(long, hide = true, value_enum, requires = "work_dir")]
    stage: Option<Stage>,
    /// Internal: batch ends for --stage push.
    #[arg(long, hide = true)]
    boundaries: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Stage {
    Push,
    Restore,
    Baseline,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    if !a.summarize.is_empty() {
        return summarize(&a);
    }
    // clap does not check `requires = "summarize"` once L1DIR, which
    // conflicts with --summarize, is given (helper-95: they were ignored,
    // exit 0).
    for (set, flag) in [
        (a.update.is_some(), "--update"),
        (a.machine.is_some(), "--machine"),
        (a.command.is_some(), "--command"),
    ] {
        if set {
            return Err(crate::cmd::Usage(format!(
                "{flag} goes with --summarize (it shapes the summary of saved reports); a comparison of L1DIR does not take it"
            ))
            .into());
        }
    }
    let l1dir = a.l1dir.clone().expect("clap requires L1DIR");
    // A directory that is not there is a mistyped name, exit 5 as for a
    // push (helper-72: exit 1).
    rexctl::l2::push::check_l1(&l1dir)?;
    if let Some(stage) = a.stage {
        return child_stage(&a, stage, &l1dir);
    }
    if let Some(svg) = &a.svg {
        // A report: an existing chart is replaced, never another file, nor a
        // file of the directory compared (L1DIR is only read).
        crate::cmd::not_inside(svg, "--svg", &l1dir, "L1DIR")?;
        crate::cmd::check_chart(svg)?;
    }
    let input = Input::scan(&l1dir)?;
    let (root, temp) = match &a.work_dir {
        Some(d) => {
            // Usage errors (exit 5), as `demo --dir`'s.
            if d.exists() && !d.is_dir() {
                return Err(rexctl::Error::Invalid(format!(
                    "--work-dir {}: not a directory",
                    d.display()
                ))
                .into());
            }
            if d.exists()
                && std::fs::read_dir(d)
                    .with_context(|| format!("{}: list work directory", d.display()))?
                    .next()
                    .is_some()
            {
                return Err(rexctl::Error::Invalid(format!(
                    "--work-dir {}: not empty",
                    d.display()
                ))
                .into());
            }
            (d.clone(), None)
        }
        None => {
            let t = rexctl::durable::ScratchDir::new_in(&std::env::temp_dir(), "rexctl-compare-")
                .context("create a temporary work directory")?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    let ws = Workspace::new(&root)?;
    let label = a.label.clone().unwrap_or_else(|| {
        l1dir
            .canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| l1dir.display().to_string())
    });
    let opts = Options {
        batch: a.batch.map(|n| n as usize),
        only: a.only.clone(),
        label,
    };
    let pb = ui::spinner("comparing");
    let mut step = |s: &str| pb.set_message(s.to_string());
    let runs = a.runs as usize;
    let push_runs = a.push_runs as usize;
    let result = if a.in_process {
        let mut exec = InProcess {
            input: &input,
            ws: &ws,
            runs,
            push_runs,
        };
        compare::run(&input, &opts, &ws, &mut exec, &mut step)
    } else {
        let mut exec = Children {
            exe: std::env::current_exe().context("locate the rexctl executable")?,
            l1dir: &l1dir,
            ws: &ws,
            runs,
            push_runs,
        };
        compare::run(&input, &opts, &ws, &mut exec, &mut step)
    };
    pb.finish_and_clear();
    // A wrong restore is a bug: keep its evidence.
    let mismatch = result.as_ref().is_ok_and(Report::any_mismatch);
    let kept = match temp {
        Some(t) if a.keep || mismatch => Some(t.keep()),
        Some(t) => {
            drop(t);
            None
        }
        None => Some(root),
    };
    let report = result?;
    if let Some(svg) = &a.svg {
        compare::plot::write_svg(&report, svg)?;
    }
    if a.json {
        ui::print_json(&report)?;
    } else {
        print_human(&report)?;
        if let Some(svg) = &a.svg {
            outln!("bars drawn in {}", svg.display());
        }
    }
    if let Some(k) = &kept {
        warnln!("work directory kept: {}", k.display());
    }
    if report.any_mismatch() {
        ui::error(
            "MISMATCH: a counterpart's restore differs from the truth (a bug, not a data point)",
        );
        return Ok(exit::MISMATCH);
    }
    if !report.all_ok() {
        ui::error("a counterpart failed; see its note");
        return Ok(exit::FAILURE);
    }
    Ok(exit::OK)
}

fn summarize(a: &Args) -> anyhow::Result<i32> {
    let reports = a
        .summarize
        .iter()
        .map(|p| {
            let bytes = std::fs::read(p).with_context(|| format!("{}: read", p.display()))?;
            serde_json::from_slice::<Report>(&bytes)
                .with_context(|| format!("{}: not a `rexctl compare --json` report", p.display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let prov = report::Provenance {
        machine: a.machine.clone(),
        command: a.command.clone(),
    };
    let md = report::markdown(&reports, &prov);
    match &a.update {
        Some(f) => {
            report::update_file(f, &md)?;
            outln!("updated the compare section of {}", f.display());
        }
        None => outln!("{}", md.trim_end_matches('\n')),
    }
    Ok(exit::OK)
}

fn child_stage(a: &Args, stage: Stage, l1dir: &Path) -> anyhow::Result<i32> {
    let ws = Workspace::new(a.work_dir.as_ref().expect("clap requires --work-dir"))?;
    let name = match a.only.as_slice() {
        [n] => n.as_str(),
        _ if stage == Stage::Baseline => "",
        _ => bail!("--stage needs exactly one --only NAME"),
    };
    let outcome = match stage {
        Stage::Push => {
            let input = Input::scan(l1dir)?;
            let plan = match &a.boundaries {
                Some(b) => compare::parse_boundaries(b, input.files.len())?,
                None => Plan::Controller,
            };
            serde_json::to_value(compare::push_stage(
                name,
                &input,
                &plan,
                &ws,
                a.push_runs as usize,
            )?)?
        }
        Stage::Restore => {
            serde_json::to_value(compare::restore_stage(name, &ws, a.runs as usize)?)?
        }
        Stage::Baseline => {
            Input::scan(l1dir)?;
            serde_json::Value::Null
        }
    };
    ui::print_json(&StageOutput {
        outcome,
        peak_rss: peak_rss_self(),
    })?;
    Ok(exit::OK)
}

/// Runs each stage as `rexctl compare --stage ...` in a child process and
/// reads its peak resident set.
struct Children<'a> {
    exe: PathBuf,
    l1dir: &'a Path,
    ws: &'a Workspace,
    runs: usize,
    push_runs: usize,
}

impl Children<'_> {
    fn stage<T: serde::de::DeserializeOwned>(
        &self,
        stage: &str,
        name: Option<&str>,
        extra: &[String],
    ) -> rexctl::Result<Measured<T>> {
        let mut args: Vec<OsString> = vec![
            "compare".into(),
            self.l1dir.into(),
            "--stage".into(),
            stage.into(),
        ];
        args.extend(["--work-dir".into(), self.ws.root().into()]);
        if let Some(n) = name {
            args.extend(["--only".into(), n.into()]);
        }
        args.extend(extra.iter().map(OsString::from));
        let out = Command::new(&self.exe)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| rexctl::Error::io(&self.exe, "run", e))?;
        if !out.status.success() {
            let msg = String::from_utf8_lossy(&out.stderr);
            return Err(rexctl::Error::Invalid(format!(
                "`rexctl compare --stage {stage}` {} ({})",
                out.status
                    .code()
                    .map_or("was killed by a signal".to_string(), |c| format!(
                        "exited with {c}"
                    )),
                msg.trim().trim_start_matches("rexctl: ")
            )));
        }
        let o: StageOutput<T> = serde_json::from_slice(&out.stdout).map_err(|e| {
            rexctl::Error::Invalid(format!(
                "`rexctl compare --stage {stage}` printed bad JSON: {e}"
            ))
        })?;
        Ok(Measured {
            value: o.outcome,
            peak_rss: o.peak_rss,
        })
    }
}

impl Executor for Children<'_> {
    fn push(&mut self, name: &str, plan: &Plan) -> rexctl::Result<Measured<PushOutcome>> {
        let mut extra = vec!["--push-runs".to_string(), self.push_runs.to_string()];
        if let Some(b) = plan.to_arg() {
            extra.extend(["--boundaries".to_string(), b]);
        }
        self.stage("push", Some(name), &extra)
    }

    fn restore(&mut self, name: &str) -> rexctl::Result<Measured<RestoreOutcome>> {
        self.stage(
            "restore",
            Some(name),
            &["--runs".into(), self.runs.to_string()],
        )
    }

    fn baseline_rss(&mut self) -> rexctl::Result<Option<u64>> {
        Ok(self
            .stage::<serde_json::Value>("baseline", None, &[])?
            .peak_rss)
    }

    fn memory_method(&self) -> String {
        "peak resident set (VmHWM) of a child process per stage, one for a counterpart's L2 checkpoints \
         and one for its restores; mapped files count"
            .into()
    }
}

/// What a child stage prints: its outcome and its own peak resident set.
#[derive(serde::Serialize, serde::Deserialize)]
struct StageOutput<T> {
    outcome: T,
    peak_rss: Option<u64>,
}

/// This process's peak resident set in bytes: `VmHWM` of
/// `/proc/self/status`, the high-water mark of the address space since
/// `exec`. (`wait4`'s `ru_maxrss` would not do: a child started with
/// vfork inherits the parent's high-water mark at `exec`.)
fn peak_rss_self() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

fn print_human(r: &Report) -> Result<(), ui::StdoutError> {
    outln!(
        "rexctl compare: {} ({}): {} checkpoints (1 FULL + {} incremental), {}; newest image {} pages of {} bytes ({})",
        r.label,
        r.l1dir.display(),
        r.files,
        r.incrementals,
        ui::bytes(r.bytes_in),
        r.image_pages,
        r.page_size,
        ui::bytes(r.image_bytes)
    );
    outln!(
        "{} L2 checkpoints at {}: seq {}",
        r.batches.len(),
        if r.batching == "controller" {
            "the boundaries of REX's runtime controller".to_string()
        } else {
            format!(
                "fixed batches of {}",
                r.batching.trim_start_matches("fixed ")
            )
        },
        report::batches_text(r)
    );
    match r.rss_baseline {
        Some(b) => outln!(
            "peak memory: one child process per stage (a process that reads the L1 metadata only: {})",
            ui::bytes(b)
        ),
        None => outln!("peak memory: {}", r.memory),
    }
    outln!(
        "1 GbE model: each restore plus the time to read the L2 objects it reads at 125 MB/s, the paper's link (a model, not a measurement)"
    );
    if let Some(f) = r.output_floor_mbps {
        outln!(
            "writing the newest image from memory, with nothing to decode: {f:.0} MB/s (the floor of any restore)"
        );
    }
    outln!("");
    outln!(
        "{:<11} {:>11} {:>7} {:>13} {:>15} {:>10} {:>8} {:>12} {:>23}  check",
        "counterpart",
        "L2 bytes",
        "CR",
        "compress MB/s",
        "decompress MB/s",
        "restore",
        "vs REX",
        "1 GbE model",
        "peak RSS push/restore"
    );
    for row in &r.rows {
        if row.status == Status::NotBuilt || row.status == Status::Unsupported {
            outln!("{:<11} {}", row.name, row.note.as_deref().unwrap_or(""));
            continue;
        }
        let rss = match (row.peak_rss_push, row.peak_rss_restore) {
            (Some(p), Some(q)) => format!("{} / {}", ui::bytes(p), ui::bytes(q)),
            (Some(p), None) => format!("{} / -", ui::bytes(p)),
            _ => "-".into(),
        };
        outln!(
            "{:<11} {:>11} {:>7.2} {:>13.0} {:>15.0} {:>10} {:>8} {:>12} {:>23}  {}",
            row.name,
            ui::bytes(row.l2_bytes),
            row.compression_ratio,
            row.compress_mbps,
            row.decompress_mbps,
            if row.restore_s > 0.0 {
                report::secs(row.restore_s)
            } else {
                "-".into()
            },
            row.restore_vs_rex
                .map(|x| format!("{x:.2}x"))
                .unwrap_or_else(|| "-".into()),
            row.restore_1gbe_vs_rex
                .map(|x| format!("{x:.2}x"))
                .unwrap_or_else(|| "-".into()),
            rss,
            if row.ok {
                "ok".to_string()
            } else {
                format!("FAILED: {}", row.note.as_deref().unwrap_or(""))
            }
        );
    }
    for row in r.rows.iter().filter(|x| x.ok) {
        if let Some(n) = &row.note {
            outln!("{}: {n}", row.name);
        }
    }
    Ok(())
}
