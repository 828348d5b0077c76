//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `rexctl` binary under test.
pub fn rexctl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rexctl"))
}

/// Runs `rexctl args...` and returns its output.
pub fn run(args: &[&str]) -> Output {
    rexctl().args(args).output().expect("run rexctl")
}

/// Runs `rexctl` and asserts success, returning standard output.
pub fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "rexctl {args:?} failed with {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// The repository's `fixtures/` directory.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Asserts that a run failed cleanly: the expected exit code, no panic, and
/// every `needle` in standard error. Returns standard error.
pub fn assert_clean_failure(out: &Output, code: i32, needles: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "exit code; stderr:\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "panic:\n{stderr}");
    for n in needles {
        assert!(stderr.contains(n), "stderr lacks {n:?}:\n{stderr}");
    }
    stderr
}
