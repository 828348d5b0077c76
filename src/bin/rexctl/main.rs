//! `rexctl`: the command line of restore-express multi-level checkpointing.
//!
//! A thin layer: clap parses, each subcommand module calls the library and
//! prints (human text by default, JSON with `--json`), and [`exit_code`]
//! maps library errors to the exit codes documented in `rexctl(1)`.
//!
//! One rule for exit codes: 2 when the command line does not parse (clap's
//! own check of every option and `REX_*` variable, which names the
//! option); 5 when it parses but the settings cannot be used (a
//! configuration file missing or invalid, a value out of range, an unusable
//! L2 location, no job name for a bucket, an output that exists, pages
//! outside the image). With `--json`, a failure also prints a JSON error
//! object on standard output.

#[macro_use]
mod ui;
mod cmd;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

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
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// Options every subcommand takes, before or after its name.
#[derive(clap::Args, Debug)]
#[command(next_help_heading = "Global options")]
struct Global {
    /// Configuration file, instead of ./rex.toml, ~/.config/rex/rex.toml
    /// and /etc/rex/rex.toml (see rex.toml(5)).
    #[arg(
        short = 'c',
        long,
        env = "REX_CONFIG",
        value_name = "FILE",
        global = true
    )]
    config: Option<PathBuf>,
    /// Print nothing but errors, warnings and --json output.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    /// Print details (flush: the controller's inputs and recovery notes).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Draw no progress bar (there is none when standard error is not a
    /// terminal).
    #[arg(long, global = true)]
    no_progress: bool,
    /// Colour the output: auto (on a terminal, unless NO_COLOR is set),
    /// always or never.
    #[arg(long, value_name = "WHEN", global = true, value_enum, default_value_t = Color::Auto)]
    color: Color,
}

/// When to colour the output.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Color {
    Auto,
    Always,
    Never,
}

#[derive(Subcommand, Debug)]
enum Command {
    #[command(name = "gen", after_long_help = cmd::examples::GEN)]
    Gen(cmd::eval::generate::Args),
    #[command(after_long_help = cmd::examples::COALESCE)]
    Coalesce(cmd::l1::coalesce::Args),
    #[command(after_long_help = cmd::examples::INSPECT)]
    Inspect(cmd::l1::inspect::Args),
    #[command(name = "push-l2", after_long_help = cmd::examples::PUSH_L2)]
    PushL2(cmd::l2::push::Args),
    #[command(after_long_help = cmd::examples::REPLICATE)]
    Replicate(cmd::l2::replicate::Args),
    #[command(after_long_help = cmd::examples::RESTORE)]
    Restore(cmd::l2::restore::Args),
    #[command(after_long_help = cmd::examples::VERIFY)]
    Verify(cmd::l2::verify::Args),
    #[command(after_long_help = cmd::examples::STATUS)]
    Status(cmd::l2::status::Args),
    #[command(after_long_help = cmd::examples::FLUSH)]
    Flush(cmd::control::flush::Args),
    #[command(after_long_help = cmd::examples::PLAN)]
    Plan(cmd::control::plan::Args),
    #[command(after_long_help = cmd::examples::GC)]
    Gc(cmd::l2::gc::Args),
    #[command(after_long_help = cmd::examples::DEMO)]
    Demo(cmd::eval::demo::Args),
    #[command(after_long_help = cmd::examples::CAPTURE)]
    Capture(cmd::eval::capture::Args),
    #[command(after_long_help = cmd::examples::ANALYZE)]
    Analyze(cmd::eval::analyze::Args),
    #[cfg(feature = "counterparts")]
    #[command(after_long_help = cmd::examples::COMPARE)]
    Compare(cmd::eval::compare::Args),
    #[command(after_long_help = cmd::examples::COMPLETIONS)]
    Completions(cmd::completions::Args),
    #[command(hide = true)]
    Man(cmd::man::Args),
}

fn main() -> ExitCode {
    // SAFETY: restoring the default action of SIGPIPE before any thread is
    // started has no memory-safety preconditions. Rust ignores SIGPIPE;
    // with the default action, `rexctl inspect --index F | head` ends
    // quietly when head has read enough, as Unix tools do. (The S3 threads
    // block SIGPIPE; a write error EPIPE is also ended quietly, below.)
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // An empty REX_* variable counts as unset (`REX_L2= rexctl ...`), as
    // for every setting read from the environment.
    for (k, v) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("REX_") && v.is_empty() {
            // SAFETY: no other thread exists yet, so nothing reads the
            // environment concurrently.
            unsafe { std::env::remove_var(k) };
        }
    }
    let argv: Vec<OsString> = std::env::args_os().collect();
    // Before the `--` that starts a captured program's arguments.
    let own = argv.iter().take_while(|a| *a != "--");
    let json = own.clone().any(|a| a == "--json");
    let color = match own
        .clone()
        .zip(own.clone().skip(1))
        .filter_map(|(a, b)| {
            let a = a.to_str()?;
            a.strip_prefix("--color=")
                .or((a == "--color").then(|| b.to_str()).flatten())
        })
        .last()
    {
        Some("always") => clap::ColorChoice::Always,
        Some("never") => clap::ColorChoice::Never,
        _ => clap::ColorChoice::Auto,
    };
    let parsed = Cli::command()
        .color(color)
        .try_get_matches_from(&argv)
        .and_then(|mut m| {
            let _ = cmd::config_args::FROM_ENV.set(from_env(&m));
            Cli::from_arg_matches_mut(&mut m)
        });
    let cli = match parsed {
        Ok(c) => c,
        Err(mut e) => {
            use clap::error::ErrorKind;
            if let Some(tip) = env_value_tip(&e, own.clone()) {
                e.insert(
                    clap::error::ContextKind::Suggested,
                    clap::error::ContextValue::StyledStrs(vec![tip.into()]),
                );
            }
            let usage = !matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            );
            if json && usage {
                let text = e.render().to_string();
                let message = text
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
                    .collect::<Vec<_>>()
                    .join(" ");
                print_json_error(
                    message.trim_start_matches("error: "),
                    rexctl::error::exit::USAGE,
                );
            }
            // clap prints help on standard output and errors on standard
            // error; a failing write (`--help >/dev/full`) is an error too.
            use std::io::Write;
            if let Err(w) = e.print().and_then(|()| std::io::stdout().flush()) {
                ui::error(&format!("standard output: {w}"));
                return ExitCode::from(rexctl::error::exit::FAILURE as u8);
            }
            return ExitCode::from(e.exit_code() as u8);
        }
    };
    ui::init(
        ui::Verbosity {
            quiet: cli.global.quiet,
            verbose: cli.global.verbose,
            no_progress: cli.global.no_progress || cli.global.quiet,
        },
        match cli.global.color {
            Color::Auto => anstream::ColorChoice::Auto,
            Color::Always => anstream::ColorChoice::Always,
            Color::Never => anstream::ColorChoice::Never,
        },
    );
    // A configuration file named for any command must be there and parse,
    // even for a command that reads no setting (`-c` is global).
    if let Some(c) = &cli.global.config
        && let Err(e) = rexctl::control::config::ConfigLayer::from_file(c)
    {
        ui::error(&e.to_string());
        if json {
            print_json_error(&e.to_string(), e.exit_code());
        }
        return ExitCode::from(e.exit_code() as u8);
    }
    let _ = cmd::config_args::CONFIG_FILE.set(cli.global.config.clone());
    // An interrupted command leaves no temporary file behind (durable.rs).
    // `capture` takes those signals itself, to end after the
    // checkpoint in progress.
    if !matches!(cli.command, Command::Capture(_))
        && let Err(e) = rexctl::durable::remove_temps_on_signal()
    {
        ui::error(&format!("cannot watch for signals: {e}"));
        return ExitCode::from(rexctl::error::exit::FAILURE as u8);
    }
    // A mapped file that shrinks or fails under a read is named, not a
    // "Bus error" (format/mapped.rs).
    if let Err(e) = rexctl::durable::report_mapped_faults() {
        ui::error(&format!("cannot watch for faults in mapped files: {e}"));
        return ExitCode::from(rexctl::error::exit::FAILURE as u8);
    }
    let result = run(cli.command).and_then(|code| {
        ui::flush()?;
        Ok(code)
    });
    match result {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            if let Some(out) = e.chain().find_map(|c| c.downcast_ref::<ui::StdoutError>())
                && out.0.kind() == std::io::ErrorKind::BrokenPipe
            {
                // The reader went away (`| head -1`): end quietly, with the
                // status a shell shows for a process that SIGPIPE ended.
                return ExitCode::from(128 + libc::SIGPIPE as u8);
            }
            let code = exit_code(&e);
            ui::error(&format!("{e:#}"));
            if json {
                print_json_error(&format!("{e:#}"), code);
            }
            ExitCode::from(code as u8)
        }
    }
}

fn run(command: Command) -> anyhow::Result<i32> {
    match command {
        Command::Gen(a) => cmd::eval::generate::run(a),
        Command::Coalesce(a) => cmd::l1::coalesce::run(a),
        Command::Inspect(a) => cmd::l1::inspect::run(a),
        Command::PushL2(a) => cmd::l2::push::run(a),
        Command::Replicate(a) => cmd::l2::replicate::run(a),
        Command::Restore(a) => cmd::l2::restore::run(a),
        Command::Verify(a) => cmd::l2::verify::run(a),
        Command::Status(a) => cmd::l2::status::run(a),
        Command::Flush(a) => cmd::control::flush::run(a),
        Command::Plan(a) => cmd::control::plan::run(a),
        Command::Gc(a) => cmd::l2::gc::run(a),
        Command::Demo(a) => cmd::eval::demo::run(a),
        Command::Capture(a) => cmd::eval::capture::run(a),
        Command::Analyze(a) => cmd::eval::analyze::run(a),
        #[cfg(feature = "counterparts")]
        Command::Compare(a) => cmd::eval::compare::run(a),
        Command::Completions(a) => cmd::completions::run(a),
        Command::Man(a) => cmd::man::run(a),
    }
}

/// The JSON error object a `--json` failure prints on standard output:
/// The ids of the arguments of the invoked (sub)command whose value clap
/// took from their environment variable: the settings a value error must
/// say were set by a variable, not by a flag.
fn from_env(m: &clap::ArgMatches) -> Vec<String> {
    let mut out = Vec::new();
    let mut m = m;
    loop {
        out.extend(
            m.ids()
                .filter(|id| {
                    m.value_source(id.as_str()) == Some(clap::parser::ValueSource::EnvVariable)
                })
                .map(|id| id.to_string()),
        );
        match m.subcommand() {
            Some((_, sub)) => m = sub,
            None => return out,
        }
    }
}

/// For a value clap refused that came from a `REX_*` variable rather than
/// the command line: a tip naming the variable (clap's message names only
/// the flag, which the user may never have typed).
fn env_value_tip<'a>(
    e: &clap::Error,
    own: impl Iterator<Item = &'a OsString> + Clone,
) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        e.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return None;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let long = arg.strip_prefix("--")?.split([' ', '=']).next()?;
    let typed = own.clone().any(|a| {
        a.to_str().is_some_and(|a| {
            a.strip_prefix("--")
                .is_some_and(|a| a == long || a.starts_with(&format!("{long}=")))
        })
    });
    if typed {
        return None;
    }
    fn find_env(c: &clap::Command, long: &str) -> Option<String> {
        c.get_arguments()
            .filter(|a| a.get_long() == Some(long))
            .find_map(|a| a.get_env().map(|v| v.to_string_lossy().into_owned()))
            .or_else(|| c.get_subcommands().find_map(|s| find_env(s, long)))
    }
    let var = find_env(&Cli::command(), long)?;
    std::env::var_os(&var)?;
    Some(format!(
        "the value comes from the variable {var}, not the command line: fix or unset {var}"
    ))
}

/// `{"error": {"message", "exit_code", "class"}}`.
fn print_json_error(message: &str, code: i32) {
    let value = serde_json::json!({
        "error": {
            "message": message,
            "exit_code": code,
            "class": rexctl::error::exit::class(code),
        }
    });
    let _ = ui::print_json(&value);
}

/// The exit code for an error: the library's classification when the error
/// (or its cause) is a library error, 1 otherwise.
fn exit_code(e: &anyhow::Error) -> i32 {
    if e.chain().any(|c| c.is::<cmd::Usage>()) {
        return rexctl::error::exit::USAGE;
    }
    e.chain()
        .find_map(|c| c.downcast_ref::<rexctl::Error>())
        .map(rexctl::Error::exit_code)
        .unwrap_or(rexctl::error::exit::FAILURE)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// clap's own consistency checks of every subcommand (unique names,
    /// valid defaults), which otherwise only run when a command is built.
    #[test]
    fn command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
