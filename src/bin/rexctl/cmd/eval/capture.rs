//! `rexctl capture`: real L1 checkpoints of a live process.

use std::time::Duration;

use anyhow::bail;
use rexctl::eval::capture::programs::Program;
use rexctl::eval::capture::{
    AfterCapture, Capture, CaptureOptions, CheckpointReport, DirtyMode, Ended, RunOptions,
    RunReport, StopMethod, capture_command, interrupt_flag, run as run_capture,
};
use serde::Serialize;

use crate::cmd::config_args::Settings;
use crate::ui;
use rexctl::control::config::ConfigLayer;

/// Take real L1 checkpoints of a running program: try rexctl on your own
/// program before adopting it.
///
/// Every --interval seconds, rexctl stops the process, reads the present
/// pages of its writable private mappings (/proc/PID/maps, /proc/PID/pagemap,
/// process_vm_readv), resumes it, and writes the pages that changed since
/// the previous checkpoint as a REX-IC file into the L1 directory: the first
/// checkpoint FULL, the next ones incremental, with drop ranges for pages
/// that are gone. Page number = virtual address / page size. The result is
/// an L1 directory like a job's own, for `rexctl analyze`, `push-l2`,
/// `restore` and `flush`.
///
/// Start the program under rexctl (`-- CMD ARGS...`; rexctl waits for it to
/// exit after the last checkpoint) or attach to a running one (--pid). The
/// first checkpoint is taken one interval after the start.
///
/// The stop time (what the program pays) is measured from the stop to the
/// resume and reported per checkpoint and in total. The process is stopped
/// with PTRACE_SEIZE + PTRACE_INTERRUPT on every thread (invisible to its
/// parent, detached again right after the read), or with SIGSTOP/SIGCONT
/// (--stop signal, for a process a debugger already traces). While it is
/// stopped, pages are read with large vectored reads, hashed (XXH3) and the
/// changed ones copied to memory; the file is written after the process has
/// resumed. rexctl needs memory for the pages of one checkpoint (all of them
/// for the FULL one).
///
/// Dirty pages are found with the kernel's soft-dirty bits when it has them
/// (CONFIG_MEM_SOFT_DIRTY), else by comparing each page's hash with the
/// previous checkpoint's. The hashes are kept in L1/.capture-state, so a
/// capture restarted on the same process continues its chain; a capture of
/// another process (or a new `-- CMD`, or --full) starts a new chain with a
/// FULL checkpoint at the next seq.
///
/// If the program exits, the capture ends with the checkpoints taken so far
/// (exit status 0; 1 if it ended before the first one); a checkpoint it
/// interrupts is discarded, nothing partial is published and the chain
/// stays valid. Ctrl-C ends the capture after the
/// checkpoint in progress.
///
/// Only the process itself (all of its threads) is captured, not the
/// processes it starts, and only its private memory: shared mappings
/// (MAP_SHARED, System V shared memory) are left out. A program started
/// with `-- CMD` writes to the same terminal as rexctl; with --json,
/// redirect its output (`-- sh -c 'exec prog >prog.log'`).
///
/// Permissions: rexctl needs ptrace access to the process: the same user
/// with ptrace allowed (kernel.yama.ptrace_scope 0, or 1 for a program
/// rexctl starts itself), or CAP_SYS_PTRACE (root). The kernel must provide
/// /proc/PID/pagemap.
///
/// Try rexctl on your own program: take a dozen checkpoints, see what REX
/// would buy, push them to L2 and restore the image:
///
///     rexctl capture --l1 ckpt --interval 2 --count 12 -- ./my-simulation input.dat
///
///     rexctl analyze ckpt --svg ckpt.svg
///
///     rexctl push-l2 --l1 ckpt --l2 ./l2
///
///     rexctl restore --l2 ./l2 -o image.rexic
///
/// Or attach to a running process: rexctl capture --l1 ckpt --interval 5 --pid 4242
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Seconds between checkpoints (decimals allowed: 0.5).
    #[arg(long, value_name = "SECS")]
    interval: f64,
    /// Stop after N checkpoints (default: until the program exits or Ctrl-C).
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// Capture the running process PID.
    #[arg(
        long,
        value_name = "PID",
        conflicts_with = "command",
        required_unless_present_any = ["command", "workload"]
    )]
    pid: Option<u32>,
    /// Start one of rexctl's real-program workloads instead of CMD, and
    /// kill it after the last checkpoint (needs --count): python-array
    /// (python3 updating a 32 MiB array of doubles), xz (xz -9 compressing
    /// generated text), sqlite (sqlite3 updating an in-memory table). The
    /// real captures of `benches/compare.sh`.
    #[arg(
        long,
        value_name = "NAME",
        value_parser = ["python-array", "xz", "sqlite"],
        conflicts_with_all = ["pid", "command"],
        requires = "count"
    )]
    workload: Option<String>,
    /// How dirty pages are found: soft-dirty bits when the kernel has them
    /// (auto), page hashes (hash), or soft-dirty bits only (soft-dirty).
    #[arg(long, value_enum, default_value_t = DirtyMode::Auto)]
    dirty: DirtyMode,
    /// How the process is stopped at each checkpoint.
    #[arg(long, value_enum, default_value_t = StopMethod::Ptrace)]
    stop: StopMethod,
    /// Start a new chain with a FULL checkpoint even if this process's chain
    /// could be continued.
    #[arg(long)]
    full: bool,
    /// Give up a checkpoint when the process has not stopped after SECS.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    stop_timeout: f64,
    /// Print one JSON object at the end instead of a line per checkpoint.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    settings: ConfigLayer,
    /// The program to start and capture, after `--`.
    #[arg(last = true, value_name = "CMD", num_args = 1..)]
    command: Vec<String>,
}

#[derive(Serialize)]
struct Output<'a> {
    #[serde(flatten)]
    run: &'a RunReport,
    exit: Option<String>,
}

fn secs(name: &str, v: f64) -> anyhow::Result<Duration> {
    if !v.is_finite() || v <= 0.0 || v > rexctl::control::config::MAX_SECONDS {
        return Err(rexctl::Error::Invalid(format!(
            "--{name} {v}: must be a positive number of seconds, at most {:e}",
            rexctl::control::config::MAX_SECONDS
        ))
        .into());
    }
    Ok(Duration::from_secs_f64(v))
}

fn ms(s: f64) -> String {
    format!("{:.1} ms", s * 1e3)
}

fn line(c: &CheckpointReport) -> String {
    let what = if c.full {
        format!(
            "seq {} FULL: {} pages ({})",
            c.seq,
            c.pages,
            ui::bytes(c.data_bytes)
        )
    } else {
        let mut s = format!(
            "seq {}: {} pages ({}; {} new, {} changed)",
            c.seq,
            c.pages,
            ui::bytes(c.data_bytes),
            c.new_pages,
            c.changed_pages
        );
        if c.dropped_pages > 0 {
            s.push_str(&format!(
                ", {} dropped in {} range{}",
                c.dropped_pages,
                c.drop_ranges,
                if c.drop_ranges == 1 { "" } else { "s" }
            ));
        }
        s
    };
    let mut s = format!(
        "{what} of {} live; stopped {} (stop {}, pagemap {}, read+hash {}{}, resume {}; {} thread{})",
        c.live_pages,
        ms(c.stop.total_s),
        ms(c.stop.stop_s),
        ms(c.stop.pagemap_s),
        ms(c.stop.read_s),
        if c.scan_threads > 1 {
            format!(" by {} threads", c.scan_threads)
        } else {
            String::new()
        },
        ms(c.stop.resume_s),
        c.threads,
        if c.threads == 1 { "" } else { "s" }
    );
    if c.unreadable_pages > 0 {
        s.push_str(&format!(
            "; {} unreadable pages left out",
            c.unreadable_pages
        ));
    }
    s.push_str(&format!(
        "; wrote {} ({}) in {}",
        c.path
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        ui::bytes(c.file_bytes),
        ms(c.write_s)
    ));
    s
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let interval = secs("interval", a.interval)?;
    let stop_timeout = secs("stop-timeout", a.stop_timeout)?;
    if a.count == Some(0) {
        bail!(rexctl::Error::Invalid("--count must be at least 1".into()));
    }
    let copts = CaptureOptions {
        dirty: a.dirty,
        stop: a.stop,
        full: a.full,
        stop_timeout,
        // The `threads` setting: threads that read and hash pages while the
        // process is stopped (unset: up to 4, as the machine allows; one
        // for small processes).
        threads: match a.settings.threads {
            Some(n) => rexctl::control::config::check_threads(n)?,
            None => 0,
        },
    };
    let ropts = RunOptions {
        interval,
        count: a.count,
        full_copy: None,
        interrupt: Some(interrupt_flag()),
    };
    let l1 = Settings::load(&a.settings)?.l1()?;
    let human = !a.json;
    let count = a.count;
    let mut taken = 0u64;
    let mut on_checkpoint = |c: &CheckpointReport| {
        taken += 1;
        // A failing standard output ends nothing here: the checkpoints go
        // on, and the summary's write reports the error.
        if human {
            let _ = ui::out(format_args!("{}", line(c)));
            if count == Some(taken) && a.pid.is_none() && a.workload.is_none() {
                let _ = ui::out(format_args!(
                    "capture done; waiting for the program to exit (Ctrl-C to stop waiting)"
                ));
            }
        }
    };
    let (report, exit) = match a.pid {
        Some(pid) => {
            let mut cap = Capture::attach(pid, &l1, copts)?;
            if human {
                header(&cap, &a, &l1, interval)?;
            }
            (run_capture(&mut cap, &ropts, on_checkpoint)?, None)
        }
        None => {
            // A workload's inputs live in a scratch directory removed at
            // the end; the program runs well past the last checkpoint and
            // is killed then.
            let scratch = a
                .workload
                .as_ref()
                .map(|_| tempfile::tempdir())
                .transpose()?;
            let (mut cmd, after) = match (&a.workload, &scratch) {
                (Some(name), Some(scratch)) => {
                    let program = Program::ALL
                        .into_iter()
                        .find(|p| p.name() == name)
                        .expect("clap checked the name");
                    let n = count.expect("clap requires --count") as f64;
                    let seconds = interval.as_secs_f64() * (n + 2.0) + 30.0;
                    (
                        program.command(scratch.path(), seconds)?,
                        AfterCapture::Kill,
                    )
                }
                _ => {
                    let mut cmd = std::process::Command::new(&a.command[0]);
                    cmd.args(&a.command[1..]);
                    (cmd, AfterCapture::Wait)
                }
            };
            let on_attach = |cap: &Capture| {
                if human {
                    let _ = header(cap, &a, &l1, interval);
                }
            };
            let r = capture_command(
                &mut cmd,
                &l1,
                copts,
                &ropts,
                after,
                on_attach,
                &mut on_checkpoint,
            )?;
            (r.run, r.exit)
        }
    };
    // A program that ended before the first checkpoint left nothing to
    // restore: exit 1, as the man page says (helper-72: 0).
    let none = report.checkpoints.is_empty() && matches!(report.ended, Ended::Exited);
    let code = i32::from(none);
    if a.json {
        ui::print_json(&Output { run: &report, exit })?;
        if none {
            ui::error("the program exited before the first checkpoint: nothing was captured");
        }
        return Ok(code);
    }
    let n = report.checkpoints.len();
    let how = match report.ended {
        Ended::Count => "count reached".to_string(),
        Ended::Exited => format!(
            "the process exited after {n} checkpoint{}",
            if n == 1 { "" } else { "s" }
        ),
        Ended::Interrupted => "interrupted".to_string(),
    };
    if n == 0 {
        outln!("no checkpoint taken ({how})");
    } else {
        let s = &report.stop;
        outln!(
            "{n} checkpoint{} (seq {}..={}), {} written; stop time mean {}{}, max {}, total {}; {how}",
            if n == 1 { "" } else { "s" },
            report.checkpoints[0].seq,
            report.checkpoints[n - 1].seq,
            ui::bytes(report.bytes_written),
            ms(s.mean_s),
            s.incremental_mean_s
                .map(|m| format!(" ({} for incrementals)", ms(m)))
                .unwrap_or_default(),
            ms(s.max_s),
            ms(s.total_s)
        );
    }
    if let Some(e) = exit {
        match &a.workload {
            Some(w) => outln!("workload {w}: stopped after the capture ({e})"),
            None => outln!("program: {e}"),
        }
    }
    if none {
        ui::error("the program exited before the first checkpoint: nothing was captured");
    }
    Ok(code)
}

fn method(m: StopMethod) -> &'static str {
    match m {
        StopMethod::Ptrace => "ptrace",
        StopMethod::Signal => "SIGSTOP/SIGCONT",
    }
}

fn header(
    cap: &Capture,
    a: &Args,
    l1: &std::path::Path,
    interval: Duration,
) -> Result<(), ui::StdoutError> {
    let p = cap.process();
    outln!(
        "capturing pid {} ({}) into {} every {:?}{}; dirty pages by {}, stops by {}",
        p.pid,
        if p.command.is_empty() {
            "?"
        } else {
            &p.command
        },
        l1.display(),
        interval,
        a.count
            .map(|n| format!(", {n} checkpoints"))
            .unwrap_or_default(),
        cap.dirty_detection(),
        method(cap.stop_method())
    );
    outln!("{}", cap.start_note());
    Ok(())
}
