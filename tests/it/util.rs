//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rexctl::eval::image::compare_ic_files;
use rexctl::eval::workload::{Workload, profile};

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

// Workloads, images and directories shared by the fault and regression suites.

pub fn workload(name: &str, pages: u64, seed: u64) -> Workload {
    let mut p = profile(name).unwrap();
    p.pages = pages;
    Workload::new(p, seed).unwrap()
}

/// Takes checkpoints into `l1` until seq `last` is written, then writes the
/// true image at `last` into `truth/seq-<last>.rexic` and returns its path.
pub fn take_until(w: &mut Workload, l1: &Path, last: u64, truth: &Path) -> PathBuf {
    std::fs::create_dir_all(l1).unwrap();
    std::fs::create_dir_all(truth).unwrap();
    while w.next_seq() <= last {
        w.checkpoint(l1).unwrap();
    }
    let p = truth.join(format!("seq-{last}.rexic"));
    w.write_image(&p).unwrap();
    p
}

/// Recursive copy (files and directories only).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), &t).unwrap();
        }
    }
}

pub fn names_in(dir: &Path) -> Vec<String> {
    match std::fs::read_dir(dir) {
        Ok(rd) => {
            let mut v: Vec<String> = rd
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        }
        Err(_) => Vec::new(),
    }
}

pub fn same_image(a: &Path, b: &Path) -> bool {
    compare_ic_files(a, b).unwrap().is_equal()
}

pub fn assert_image(got: &Path, want: &Path, ctx: &str) {
    let d = compare_ic_files(got, want).unwrap();
    assert!(
        d.is_equal(),
        "{ctx}: restored image differs from {}: {d}",
        want.display()
    );
}

/// As `take_until`, with capture times `t0 + seq` seconds.
pub fn take_until_at(w: &mut Workload, l1: &Path, last: u64, truth: &Path, t0: u64) -> PathBuf {
    std::fs::create_dir_all(l1).unwrap();
    std::fs::create_dir_all(truth).unwrap();
    while w.next_seq() <= last {
        let c = w.step();
        w.write(&c, l1, t0 + c.seq * 1_000_000_000).unwrap();
    }
    let p = truth.join(format!("seq-{last}-{}.rexic", w.chain_id()));
    w.write_image(&p).unwrap();
    p
}

// Output and case helpers shared by the fault and regression suites.

pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

pub fn show(args: &[&str], out: &Output) -> String {
    format!(
        "rexctl {args:?}: status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs one case, turning a failed assertion into an entry of `failures`
/// (so one run reports every failing case, not just the first).
pub fn case(failures: &mut Vec<String>, f: impl FnOnce()) {
    if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into());
        failures.push(msg);
    }
}

pub fn assert_no_failures(failures: &[String], total: usize) {
    assert!(
        failures.is_empty(),
        "{} of {total} cases failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// Held by tests that load every core for a while (`mpirun -np 4` on the
/// CI's two cores) and by tests whose outcome depends on measured times
/// (the controller's cost rule reads push timings): they never overlap.
pub fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts `c` (its output discarded), waits until `ready()` holds, then
/// sends it `sig`. Returns how it ended and whether the signal was sent
/// (`false`: the command finished first). Two minutes without `ready`
/// fail the test.
pub fn signal_when(
    mut c: std::process::Command,
    ready: impl Fn() -> bool,
    sig: libc::c_int,
) -> (std::process::ExitStatus, bool) {
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let mut child = c
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return (st, false);
        }
        if ready() {
            break;
        }
        assert!(Instant::now() < deadline, "not ready in 2 minutes");
        std::thread::sleep(Duration::from_millis(1));
    }
    // SAFETY: kill(2) of our own child, which has not been waited for, so
    // its pid is not reused.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
    (child.wait().unwrap(), true)
}
