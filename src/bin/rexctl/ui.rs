//! Output: what goes to standard output and how, for every command.
//!
//! * Every line goes through [`out`] (the `outln!` macro), which returns
//!   the write error instead of panicking as `println!` does: a full disk
//!   (`rexctl status >/dev/full`) is an error message and exit 1, a closed
//!   pipe (`| head -1`) ends the command quietly, as coreutils do.
//! * `-q` silences the human output (errors, warnings and `--json` output
//!   still print), `-v` adds details ([`verbose`]).
//! * Colour through anstream: `--color auto` colours only a terminal and
//!   honours `NO_COLOR` / `CLICOLOR_FORCE`; the escapes are stripped
//!   otherwise.
//! * Progress bars (indicatif) draw on standard error, only on a terminal,
//!   never with `-q` or `--no-progress`, and fit one line of 80 columns.

use std::fmt;
use std::io::{self, IsTerminal, Write};
use std::sync::OnceLock;

use anstyle::{AnsiColor, Style};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// How much to say, set once from the global flags.
#[derive(Clone, Copy, Debug, Default)]
pub struct Verbosity {
    /// `-q`: no human output.
    pub quiet: bool,
    /// `-v` count.
    pub verbose: u8,
    /// `--no-progress` (or `-q`).
    pub no_progress: bool,
}

static VERBOSITY: OnceLock<Verbosity> = OnceLock::new();

/// Sets the verbosity and the colour choice; called once by `main`.
pub fn init(v: Verbosity, color: anstream::ColorChoice) {
    let _ = VERBOSITY.set(v);
    color.write_global();
}

fn verbosity() -> Verbosity {
    VERBOSITY.get().copied().unwrap_or_default()
}

/// The `-v` count (0 without `-v`).
pub fn verbose() -> u8 {
    verbosity().verbose
}

/// A standard-output write error, kept apart so that `main` can end a
/// command whose reader went away quietly.
#[derive(Debug)]
pub struct StdoutError(pub io::Error);

impl fmt::Display for StdoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "standard output: {}", self.0)
    }
}

impl std::error::Error for StdoutError {}

/// Writes one line of human output (nothing with `-q`).
pub fn out(args: fmt::Arguments<'_>) -> Result<(), StdoutError> {
    if verbosity().quiet {
        return Ok(());
    }
    write_line(args)
}

/// Writes one line of detail: only with `-v`.
pub fn detail(args: fmt::Arguments<'_>) -> Result<(), StdoutError> {
    if verbose() == 0 {
        return Ok(());
    }
    out(args)
}

fn write_line(args: fmt::Arguments<'_>) -> Result<(), StdoutError> {
    let mut o = anstream::stdout().lock();
    o.write_fmt(args)
        .and_then(|()| o.write_all(b"\n"))
        .map_err(StdoutError)
}

/// Flushes standard output (its buffer's errors would otherwise be lost at
/// exit).
pub fn flush() -> Result<(), StdoutError> {
    anstream::stdout().lock().flush().map_err(StdoutError)
}

/// Prints a warning on standard error (`rexctl: warning: ...`); a failing
/// standard error is ignored, never a panic.
pub fn warn(args: fmt::Arguments<'_>) {
    let style = Style::new().fg_color(Some(AnsiColor::Yellow.into())).bold();
    let _ = writeln!(
        anstream::stderr().lock(),
        "rexctl: {style}warning{style:#}: {args}"
    );
}

/// Prints an error on standard error (`rexctl: error: ...`).
pub fn error(text: &str) {
    let style = Style::new().fg_color(Some(AnsiColor::Red.into())).bold();
    let _ = writeln!(
        anstream::stderr().lock(),
        "rexctl: {style}error{style:#}: {text}"
    );
}

/// Prints a line of human output; returns early from the enclosing
/// function with the write error.
macro_rules! outln {
    () => {
        $crate::ui::out(format_args!(""))?
    };
    ($($t:tt)*) => {
        $crate::ui::out(format_args!($($t)*))?
    };
}

/// Prints a line only with `-v`.
macro_rules! detailln {
    ($($t:tt)*) => {
        $crate::ui::detail(format_args!($($t)*))?
    };
}

/// Prints a warning on standard error.
macro_rules! warnln {
    ($($t:tt)*) => {
        $crate::ui::warn(format_args!($($t)*))
    };
}

/// `text` in green (a good verdict), when colour is on.
pub fn good(text: &str) -> String {
    paint(Style::new().fg_color(Some(AnsiColor::Green.into())), text)
}

/// `text` in bold red (a bad verdict), when colour is on.
pub fn bad(text: &str) -> String {
    paint(
        Style::new().fg_color(Some(AnsiColor::Red.into())).bold(),
        text,
    )
}

fn paint(style: Style, text: &str) -> String {
    format!("{style}{text}{style:#}")
}

/// Prints `value` as pretty JSON on standard output (also with `-q`).
pub fn print_json<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    write_line(format_args!("{text}"))?;
    Ok(())
}

/// Human byte count ("4.50 MiB").
pub fn bytes(n: u64) -> String {
    indicatif::HumanBytes(n).to_string()
}

/// Whether progress may be drawn: standard error is a terminal and
/// neither `-q` nor `--no-progress` was given.
fn progress_on() -> bool {
    let v = verbosity();
    !v.quiet && !v.no_progress && std::io::stderr().is_terminal()
}

/// The template of a bar of steps: at most 67 columns.
const STEPS: &str = "{msg:>12!} [{bar:30}] {pos:>6}/{len:6} {elapsed_precise}";
/// The template of a spinner: one line of the terminal's width.
const SPIN: &str = "{spinner} {wide_msg} {elapsed:>4}";
/// The template of an upload: the bar takes what the terminal's width
/// leaves (a bar of 18 at 80 columns).
const UPLOAD: &str =
    "{msg:22!} [{wide_bar}] {bytes:>10}/{total_bytes:10} {binary_bytes_per_sec:>11}";

/// A progress bar of `len` steps, hidden unless progress is on.
pub fn progress(len: u64, what: &str) -> ProgressBar {
    if !progress_on() {
        return ProgressBar::hidden();
    }
    steps_bar(ProgressBar::new(len), what)
}

fn steps_bar(pb: ProgressBar, what: &str) -> ProgressBar {
    pb.set_style(
        ProgressStyle::with_template(STEPS)
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}

/// A Unix-nanosecond time as RFC 3339 UTC.
pub fn time(ns: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// `n` and a noun, singular for 1: `count(1, "chain")` is "1 chain",
/// `count(2, "chain")` "2 chains".
pub fn count(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// A share as a percentage with one decimal.
pub fn pct(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

/// A spinner with a message for work of unknown length, ticking on its own;
/// hidden unless progress is on. Clear it with `finish_and_clear` before
/// printing the result.
pub fn spinner(what: &str) -> ProgressBar {
    if !progress_on() {
        return ProgressBar::hidden();
    }
    let pb = spin(ProgressBar::new_spinner(), what);
    pb.enable_steady_tick(std::time::Duration::from_millis(120));
    pb
}

fn spin(pb: ProgressBar, what: &str) -> ProgressBar {
    pb.set_style(ProgressStyle::with_template(SPIN).expect("valid template"));
    pb.set_message(what.to_string());
    pb
}

/// Draws the progress of uploads on a bar that started as a spinner (see
/// [`spinner`]): the first upload turns it into a byte count with the
/// throughput; each further object adds its size (a streamed one, whose
/// size is not known in advance, its bytes as they go). Hidden like the
/// spinner when progress is off.
pub struct UploadBar {
    pb: ProgressBar,
    started: std::sync::atomic::AtomicBool,
}

impl UploadBar {
    /// Wraps `pb`.
    pub fn new(pb: ProgressBar) -> UploadBar {
        UploadBar {
            pb,
            started: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl rexctl::store::Progress for UploadBar {
    fn start(&self, name: &str, bytes: u64) {
        if self
            .started
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            self.pb.inc_length(bytes);
        } else {
            // The rate counts from the first upload on.
            self.pb.reset();
            self.pb.set_length(bytes);
            self.pb.set_style(
                ProgressStyle::with_template(UPLOAD)
                    .expect("valid template")
                    .progress_chars("=> "),
            );
        }
        self.pb.set_message(format!("uploading {name}"));
    }

    fn advance(&self, bytes: u64) {
        // A streamed upload starts with no size: its bytes grow the total.
        let past = (self.pb.position() + bytes).saturating_sub(self.pb.length().unwrap_or(0));
        self.pb.inc_length(past);
        self.pb.inc(bytes);
    }
}

/// Throughput in MB/s of `bytes` over `seconds` (0 when no time passed).
pub fn mbps(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 / seconds / 1e6
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use indicatif::{ProgressDrawTarget, TermLike};
    use std::sync::{Arc, Mutex};

    /// A terminal of 80 columns that records what is drawn on it.
    #[derive(Debug, Clone, Default)]
    struct Term80(Arc<Mutex<Vec<String>>>);

    impl TermLike for Term80 {
        fn width(&self) -> u16 {
            80
        }
        fn move_cursor_up(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> io::Result<()> {
            self.0.lock().unwrap().push(s.to_string());
            Ok(())
        }
        fn write_str(&self, s: &str) -> io::Result<()> {
            self.0.lock().unwrap().push(s.to_string());
            Ok(())
        }
        fn clear_line(&self) -> io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
    }

    fn drawn(pb: &ProgressBar, term: &Term80) -> Vec<String> {
        pb.tick();
        let lines = term.0.lock().unwrap().clone();
        assert!(!lines.is_empty(), "nothing drawn");
        lines
    }

    fn assert_one_line_of_80(lines: &[String]) {
        for l in lines {
            assert!(!l.contains('\n'), "more than one line: {l:?}");
            let cols = anstream::adapter::strip_str(l).to_string().chars().count();
            assert!(cols <= 80, "{cols} columns: {l:?}");
        }
    }

    /// Every bar fits one line of 80 columns, whatever the names and
    /// sizes (a long object name, terabytes, a slow rate).
    #[test]
    fn progress_stays_on_one_line_at_80_columns() {
        let term = Term80::default();
        let target = || ProgressDrawTarget::term_like(Box::new(term.clone()));
        let pb = steps_bar(
            ProgressBar::with_draw_target(Some(123_456_789), target()),
            "generating a very long phase name",
        );
        pb.set_position(98_765_432);
        assert_one_line_of_80(&drawn(&pb, &term));

        term.0.lock().unwrap().clear();
        let pb = spin(
            ProgressBar::with_draw_target(None, target()),
            "coalescing, deduplicating and pushing the pending checkpoints of a job with a long name",
        );
        assert_one_line_of_80(&drawn(&pb, &term));

        term.0.lock().unwrap().clear();
        let up = UploadBar::new(ProgressBar::with_draw_target(None, target()));
        use rexctl::store::Progress;
        up.start(
            "g0000000000000012-0123456789abcdef0123456789abcdef.rps",
            5 << 40,
        );
        up.advance(3 << 40);
        assert_one_line_of_80(&drawn(&up.pb, &term));
    }
}
