//! Shared output helpers: JSON printing, byte formatting, progress bars that
//! stay quiet when standard error is not a terminal.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// Prints `value` as pretty JSON on standard output.
pub fn print_json<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Human byte count ("4.50 MiB").
pub fn bytes(n: u64) -> String {
    indicatif::HumanBytes(n).to_string()
}

/// A progress bar of `len` steps, hidden unless standard error is a terminal.
pub fn progress(len: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg:>12} [{bar:30}] {pos}/{len} {elapsed_precise}")
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

/// A share as a percentage with one decimal.
pub fn pct(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

/// A spinner with a message for work of unknown length, ticking on its own;
/// hidden unless standard error is a terminal. Clear it with
/// `finish_and_clear` before printing the result.
pub fn spinner(what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner();
    pb.set_style(
        ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("valid template"),
    );
    pb.set_message(what.to_string());
    pb.enable_steady_tick(std::time::Duration::from_millis(120));
    pb
}

/// Draws the progress of uploads on a bar that started as a spinner (see
/// [`spinner`]): the first upload turns it into a byte count with the
/// throughput; each further object adds its size. Hidden like the spinner
/// when standard error is not a terminal.
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
            // The rate and the ETA count from the first upload on.
            self.pb.reset();
            self.pb.set_length(bytes);
            self.pb.set_style(
                ProgressStyle::with_template(
                    "{msg:>24} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} {eta}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
        }
        self.pb.set_message(format!("uploading {name}"));
    }

    fn advance(&self, bytes: u64) {
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
