//! `rexctl`: the command line of restore-express multi-level checkpointing.
//!
//! A thin layer: clap parses, each subcommand module calls the library and
//! prints (human text by default, JSON with `--json`), and [`exit_code`]
//! maps library errors to the exit codes documented in `rexctl(1)`.

mod cmd;
mod ui;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Restore-express multi-level checkpointing: coalesce, deduplicate, push
/// and restore incremental checkpoints.
#[derive(Parser, Debug)]
#[command(
    name = "rexctl",
    version,
    about,
    long_about = "rexctl coalesces batches of incremental memory checkpoints (REX-IC files in an L1 directory), \
deduplicates them page by page in fixed-size patterns, and keeps the result as a chain of compact L2 checkpoints \
from which the memory image is restored byte for byte.",
    after_long_help = cmd::man::EXIT_STATUS_HELP
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    #[command(name = "gen")]
    Gen(cmd::eval::generate::Args),
    Coalesce(cmd::l1::coalesce::Args),
    Inspect(cmd::l1::inspect::Args),
    #[command(name = "push-l2")]
    PushL2(cmd::l2::push::Args),
    Restore(cmd::l2::restore::Args),
    Verify(cmd::l2::verify::Args),
    Status(cmd::l2::status::Args),
    Flush(cmd::control::flush::Args),
    Plan(cmd::control::plan::Args),
    Gc(cmd::l2::gc::Args),
    Demo(cmd::eval::demo::Args),
    Capture(cmd::eval::capture::Args),
    Analyze(cmd::eval::analyze::Args),
    Compare(cmd::eval::compare::Args),
    #[command(hide = true)]
    Man(cmd::man::Args),
}

fn main() -> ExitCode {
    // SAFETY: restoring the default action of SIGPIPE before any thread is
    // started has no memory-safety preconditions. Rust ignores SIGPIPE, which
    // turns `rexctl status | head` into a panic on the next print; with the
    // default action the process ends quietly, as Unix tools do.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Gen(a) => cmd::eval::generate::run(a),
        Command::Coalesce(a) => cmd::l1::coalesce::run(a),
        Command::Inspect(a) => cmd::l1::inspect::run(a),
        Command::PushL2(a) => cmd::l2::push::run(a),
        Command::Restore(a) => cmd::l2::restore::run(a),
        Command::Verify(a) => cmd::l2::verify::run(a),
        Command::Status(a) => cmd::l2::status::run(a),
        Command::Flush(a) => cmd::control::flush::run(a),
        Command::Plan(a) => cmd::control::plan::run(a),
        Command::Gc(a) => cmd::l2::gc::run(a),
        Command::Demo(a) => cmd::eval::demo::run(a),
        Command::Capture(a) => cmd::eval::capture::run(a),
        Command::Analyze(a) => cmd::eval::analyze::run(a),
        Command::Compare(a) => cmd::eval::compare::run(a),
        Command::Man(a) => cmd::man::run(a),
    };
    match result {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            eprintln!("rexctl: {e:#}");
            ExitCode::from(exit_code(&e) as u8)
        }
    }
}

/// The exit code for an error: the library's classification when the error
/// (or its cause) is a library error, 1 otherwise.
fn exit_code(e: &anyhow::Error) -> i32 {
    e.chain()
        .find_map(|c| c.downcast_ref::<rexctl::Error>())
        .map(rexctl::Error::exit_code)
        .unwrap_or(rexctl::error::exit::FAILURE)
}
