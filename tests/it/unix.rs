//! rexctl behaves like the Unix tools its users know: every everyday
//! mistake is refused with a clear message and the documented exit code
//! (one test per mistake), reading commands create nothing, standard output
//! failures are messages (never panics), every `--json` prints JSON on
//! success and on failure, settings come from flags, `REX_*` variables and
//! configuration files alike, and the shipped completions, systemd units
//! and crontab line work with the real binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::util::{assert_clean_failure, assert_image, names_in, ok, rexctl, run, s, workload};

/// A job with one pushed generation and one pending checkpoint, in `dir`.
struct Job {
    dir: tempfile::TempDir,
}

impl Job {
    fn new() -> Job {
        let dir = tempfile::tempdir().unwrap();
        let l1 = dir.path().join("l1");
        std::fs::create_dir_all(&l1).unwrap();
        let mut w = workload("balanced", 64, 3);
        for _ in 0..3 {
            w.checkpoint(&l1).unwrap();
        }
        let j = Job { dir };
        let out = j.cmd(&["push-l2"]).output().unwrap();
        assert_ok(&out);
        w.checkpoint(&l1).unwrap();
        j
    }

    fn l1(&self) -> PathBuf {
        self.dir.path().join("l1")
    }

    fn l2(&self) -> PathBuf {
        self.dir.path().join("l2")
    }

    /// `rexctl ARGS` with the job's L1 and L2 in REX_L1 and REX_L2, from
    /// the job's directory, with no scheduler or S3 variables inherited.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = clean(rexctl());
        c.current_dir(self.dir.path())
            .env("REX_L1", self.l1())
            .env("REX_L2", self.l2())
            .args(args);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }
}

/// `c` without the variables that would change what the tests see.
fn clean(mut c: Command) -> Command {
    for (k, _) in std::env::vars() {
        if k.starts_with("REX_")
            || k.starts_with("AWS_")
            || k.starts_with("SLURM_")
            || k.starts_with("PBS_")
            || k.starts_with("LSB_")
            || k.starts_with("FLUX_")
            || k.starts_with("PMI")
            || k.starts_with("OMPI_")
            || k == "XDG_CONFIG_HOME"
            || k == "NO_COLOR"
            || k == "CLICOLOR_FORCE"
        {
            c.env_remove(k);
        }
    }
    c
}

/// Asserts that a run succeeded, showing its standard error if not.
fn assert_ok(o: &Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Every file under `dir`, recursively, relative to it.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn an_s3_url_with_a_typo_is_refused_and_l1_is_untouched() {
    let j = Job::new();
    let before = tree(j.dir.path());
    for l2 in [
        "s3:/bucket/x",
        "s3:bucket/x",
        "file:/scratch/l2",
        "S3:/bucket",
    ] {
        let out = j.run(&["push-l2", "--l2", l2]);
        assert_clean_failure(&out, 5, &[l2, "looks like a URL with a typo"]);
    }
    assert_eq!(tree(j.dir.path()), before, "nothing created or deleted");
}

#[test]
fn a_relative_l2_directory_is_created_only_with_dot_slash() {
    let j = Job::new();
    let out = j.run(&["push-l2", "--l2", "fresh-l2"]);
    assert_clean_failure(&out, 5, &["fresh-l2", "./fresh-l2"]);
    assert!(!j.dir.path().join("fresh-l2").exists());
    // Explicit ./ creates it; an existing relative directory is accepted.
    let out = j.run(&["push-l2", "--l2", "./fresh-l2"]);
    assert_ok(&out);
    assert!(j.dir.path().join("fresh-l2").is_dir());
    let out = j.run(&["status", "--l2", "l2"]);
    assert_ok(&out);
}

#[test]
fn a_bucket_without_a_job_name_is_refused() {
    let j = Job::new();
    let before = tree(j.dir.path());
    for cmd in [
        &["push-l2"][..],
        &["status"],
        &["verify"],
        &["restore", "-o", "x"],
    ] {
        let mut args = cmd.to_vec();
        args.extend(["--l2", "s3://ckpt-bucket/site"]);
        let out = j.run(&args);
        assert_clean_failure(&out, 5, &["no job name", "REX_JOB", "SLURM_JOB_ID"]);
    }
    assert_eq!(tree(j.dir.path()), before);
    // A scheduler's job id names it: the command goes on to the endpoint
    // (here a closed port, so it fails there, not for the job name).
    let out = j
        .cmd(&["status", "--l2", "s3://ckpt-bucket/site"])
        .env("PBS_JOBID", "123.pbs")
        .env("REX_S3_ENDPOINT", "http://127.0.0.1:9")
        .env("REX_S3_ALLOW_HTTP", "true")
        .env("REX_S3_MAX_RETRIES", "0")
        .env("REX_S3_ACCESS_KEY_ID", "k")
        .env("REX_S3_SECRET_ACCESS_KEY", "s")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        !err.contains("no job name") && !err.contains("panicked"),
        "{err}"
    );
}

#[test]
fn restore_never_replaces_a_file_without_force() {
    let j = Job::new();
    let out_file = j.dir.path().join("image.rexic");
    std::fs::write(&out_file, b"precious").unwrap();
    let out = j.run(&["restore", "-o", s(&out_file)]);
    assert_clean_failure(&out, 5, &["image.rexic", "exists", "--force"]);
    assert_eq!(std::fs::read(&out_file).unwrap(), b"precious");
    let out = j.run(&["restore", "-o", s(&out_file), "--force"]);
    assert_ok(&out);
    assert_ne!(std::fs::read(&out_file).unwrap(), b"precious");
    let out = j.run(&["restore", "-f", "-o", s(&out_file), "--l2-only"]);
    assert_ok(&out);
}

#[test]
fn restore_of_pages_outside_the_image_is_an_error() {
    let j = Job::new();
    let o = j.dir.path().join("o.rexic");
    for pages in ["0-3", "0xffffffffff000-0xffffffffff0ff"] {
        let out = j.run(&["restore", "-o", s(&o), "--pages", pages]);
        assert_clean_failure(&out, 5, &["--pages", "outside the image"]);
        assert!(!o.exists(), "no output for {pages}");
    }
    // A malformed list is a command-line error (2), as clap's own.
    let out = j.run(&["restore", "-o", s(&o), "--pages", "9-3"]);
    assert_clean_failure(&out, 2, &["--pages"]);
    let out = j.run(&["restore", "-o", s(&o), "--pagez", "1"]);
    assert_clean_failure(&out, 2, &["--pagez"]);
}

#[test]
fn reading_commands_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let l1 = dir.path().join("l1");
    std::fs::create_dir(&l1).unwrap();
    let mut w = workload("balanced", 32, 1);
    w.checkpoint(&l1).unwrap();
    let before = tree(dir.path());
    let base = |args: &[&str]| {
        let mut c = clean(rexctl());
        c.current_dir(dir.path())
            .args(args)
            .args(["--l1", "l1", "--l2", "./l2"]);
        c.output().unwrap()
    };
    // No L2 yet: status and plan show it empty; verify has nothing.
    let out = base(&["status"]);
    assert_ok(&out);
    assert!(stdout(&out).contains("not made yet"), "{}", stdout(&out));
    assert!(stdout(&out).contains("1 pending"), "{}", stdout(&out));
    let out = base(&["plan"]);
    assert_ok(&out);
    let out = base(&["verify"]);
    assert_clean_failure(&out, 3, &["nothing to verify", "./l2"]);
    let out = base(&["restore", "-o", "x.rexic"]);
    assert!(out.status.success(), "L1 alone restores");
    std::fs::remove_file(dir.path().join("x.rexic")).unwrap();
    // But for the job lock (empty) it holds shared while it reads L1, so
    // that a first push cannot delete what it is reading.
    let lock = l1.join(rexctl::l1::lock::LOCK_NAME);
    assert_eq!(std::fs::read(&lock).unwrap(), b"", "the lock file");
    std::fs::remove_file(&lock).unwrap();
    assert_eq!(tree(dir.path()), before, "nothing created");
    // From L2 alone, the error names the place searched.
    let out = base(&["restore", "--l2-only", "-o", "x.rexic"]);
    assert_clean_failure(&out, 3, &["no valid generation", "directory ./l2"]);
    // An empty L2 directory: nothing to verify either.
    std::fs::create_dir(dir.path().join("l2")).unwrap();
    let out = base(&["verify", "--l2-only"]);
    assert_clean_failure(&out, 3, &["nothing to verify", "directory ./l2"]);
    let out = base(&["restore", "--l2-only", "-o", "x.rexic"]);
    assert_clean_failure(&out, 3, &["no valid generation", "directory ./l2"]);
    assert!(!dir.path().join("x.rexic").exists());
}

#[test]
fn a_missing_config_file_is_a_configuration_error() {
    let j = Job::new();
    for args in [
        &["status", "--config", "nope.toml"][..],
        &["flush", "-c", "nope.toml"],
        &["restore", "-o", "x", "-c", "nope.toml"],
    ] {
        let out = j.run(args);
        assert_clean_failure(&out, 5, &["nope.toml"]);
    }
    let out = j
        .cmd(&["plan"])
        .env("REX_CONFIG", "nope.toml")
        .output()
        .unwrap();
    assert_clean_failure(&out, 5, &["nope.toml"]);
    // A REX_* variable that does not parse is a usage error, named.
    let out = j.cmd(&["plan"]).env("REX_MTBF", "soon").output().unwrap();
    assert_clean_failure(&out, 2, &["soon", "--mtbf"]);
}

#[test]
fn every_command_reads_flags_variables_and_files_alike() {
    let j = Job::new();
    let status = |c: &mut Command| {
        let out = c.output().unwrap();
        assert_ok(&out);
        stdout(&out)
    };
    // REX_L1/REX_L2 (Job::cmd sets them) for every job command.
    for args in [&["status"][..], &["verify"], &["plan"], &["gc", "-n"]] {
        status(&mut j.cmd(args));
    }
    // A configuration file named with --config, after or before the
    // subcommand, and REX_CONFIG.
    let cfg = j.dir.path().join("job.toml");
    std::fs::write(
        &cfg,
        format!(
            "l1 = {:?}\nl2 = {:?}\nkeep_chains_l2 = 3\n",
            s(&j.l1()),
            s(&j.l2())
        ),
    )
    .unwrap();
    let bare = || {
        let mut c = clean(rexctl());
        c.current_dir(j.dir.path());
        c
    };
    let a = status(bare().args(["status", "--config", s(&cfg)]));
    let b = status(bare().args(["-c", s(&cfg), "status"]));
    let c = status(bare().arg("status").env("REX_CONFIG", &cfg));
    assert_eq!((&a, &a), (&b, &c));
    // The user's file under XDG_CONFIG_HOME.
    let xdg = j.dir.path().join("xdg");
    std::fs::create_dir_all(xdg.join("rex")).unwrap();
    std::fs::copy(&cfg, xdg.join("rex/rex.toml")).unwrap();
    assert_eq!(status(bare().arg("status").env("XDG_CONFIG_HOME", &xdg)), a);
    // Flags beat variables beat files.
    let out = bare()
        .args(["status", "-c", s(&cfg), "--l2", "./elsewhere"])
        .env("REX_L2", "./also-elsewhere")
        .output()
        .unwrap();
    assert!(
        stdout(&out).contains("./elsewhere (not made yet)"),
        "{}",
        stdout(&out)
    );
    // One name per setting: the flag and the variable of keep_chains_l2.
    for c in [
        bare()
            .args(["plan", "-c", s(&cfg), "--keep-chains-l2", "4", "--json"])
            .output()
            .unwrap(),
        bare()
            .args(["plan", "-c", s(&cfg), "--json"])
            .env("REX_KEEP_CHAINS_L2", "4")
            .output()
            .unwrap(),
    ] {
        assert_ok(&c);
    }
}

/// The commands of a job, each with the arguments that make it succeed
/// (with the job's REX_L1 and REX_L2), and with arguments that make it
/// fail.
fn json_commands(j: &Job) -> Vec<(Vec<String>, Vec<String>)> {
    let ic = names_in(&j.l1())
        .into_iter()
        .find(|n| n.ends_with(".rexic"))
        .expect("a pending checkpoint");
    let ic = s(&j.l1().join(ic)).to_string();
    let o = s(&j.dir.path().join("out.rexic")).to_string();
    let v = |a: &[&str]| a.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let mut cmds = vec![
        (v(&["status"]), v(&["status", "--l1", "/nonexistent"])),
        (v(&["verify"]), v(&["verify", "--l2", "/nonexistent"])),
        (v(&["plan"]), v(&["plan", "--mtbf", "-1"])),
        (v(&["gc", "-n"]), v(&["gc", "--l2", "s3:/typo"])),
        (v(&["inspect", &ic]), v(&["inspect", "/nonexistent.rexic"])),
        (
            v(&["restore", "-f", "-o", &o]),
            v(&["restore", "-o", &o, "--pages", "0-1"]),
        ),
        (v(&["flush", "-n"]), v(&["flush", "--l2", "s3:/typo"])),
        (
            v(&[
                "gen",
                s(&j.dir.path().join("g")),
                "--pages",
                "16",
                "--count",
                "2",
            ]),
            v(&["gen", s(&j.l1())]),
        ),
        (
            v(&["gen", "--list-profiles"]),
            v(&["gen", "x", "--profile", "nope"]),
        ),
        (v(&["coalesce", "g"]), v(&["coalesce", "/nonexistent"])),
        (
            v(&["analyze", "g", "--no-pipeline"]),
            v(&["analyze", "/nonexistent"]),
        ),
        (v(&["demo"]), v(&["demo", "--profile", "nope"])),
        (
            v(&[
                "capture",
                "--interval",
                "0.2",
                "--count",
                "1",
                "--",
                "sleep",
                "3",
            ]),
            v(&["capture", "--interval", "0.2", "--pid", "999999999"]),
        ),
        // The push last: it leaves nothing pending.
        (v(&["push-l2"]), v(&["push-l2", "--l2", "s3:/typo"])),
    ];
    if cfg!(feature = "counterparts") {
        let wl = s(&j.dir.path().join("g")).to_string();
        cmds.insert(
            cmds.len() - 1,
            (
                v(&["compare", &wl, "--only", "rex,ic", "--runs", "1"]),
                v(&["compare", "/nonexistent"]),
            ),
        );
    }
    cmds
}

#[test]
fn every_json_command_prints_json_on_success_and_on_failure() {
    let j = Job::new();
    for (good, bad) in json_commands(&j) {
        let name = good[0].clone();
        // --json right after the subcommand (before capture's `--`).
        let with_json = |a: &[String]| {
            let mut v = vec![a[0].clone(), "--json".to_string()];
            v.extend(a[1..].iter().cloned());
            v
        };
        let out = j.cmd(&[]).args(with_json(&good)).output().unwrap();
        assert!(
            out.status.success(),
            "{good:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{good:?}: not JSON ({e}): {}", stdout(&out)));
        assert!(v.get("error").is_none(), "{good:?}: {v}");
        let out = j.cmd(&[]).args(with_json(&bad)).output().unwrap();
        assert!(!out.status.success(), "{bad:?} succeeded");
        let code = out.status.code().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{bad:?}: {err}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{bad:?}: not JSON ({e}): {}", stdout(&out)));
        // A failure is an error object, or (inspect, verify, status) the
        // report with what was wrong in it.
        if let Some(e) = v.get("error").filter(|e| e.is_object()) {
            assert_eq!(e["exit_code"], code, "{bad:?}: {v}");
            assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
            assert!(e["class"].is_string(), "{v}");
        } else {
            assert!(
                ["inspect", "verify", "status"].contains(&name.as_str()),
                "{bad:?}: no error object: {v}"
            );
        }
    }
    // A command line that does not parse.
    let out = j.run(&["status", "--json", "--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["class"], "usage", "{v}");
}

/// Runs `sh -c SCRIPT` and returns its output.
fn sh(j: &Job, script: &str) -> Output {
    clean(Command::new("sh"))
        .current_dir(j.dir.path())
        .env("REX_L1", j.l1())
        .env("REX_L2", j.l2())
        .env("B", env!("CARGO_BIN_EXE_rexctl"))
        .args(["-c", script])
        .output()
        .unwrap()
}

#[test]
fn a_closed_pipe_or_a_full_disk_is_never_a_panic() {
    let j = Job::new();
    let out = j.run(&["gen", "g", "--pages", "16", "--count", "2"]);
    assert!(out.status.success());
    let ic = names_in(&j.l1())
        .into_iter()
        .find(|n| n.ends_with(".rexic"))
        .unwrap();
    let commands = [
        "status".to_string(),
        "status --json".into(),
        "verify".into(),
        "plan".into(),
        format!("inspect --index l1/{ic}"),
        "coalesce --json g".into(),
        "gen --list-profiles".into(),
        "completions bash".into(),
        "flush -n -v".into(),
        "demo".into(),
    ];
    for c in &commands {
        // A reader that goes away: quiet, status 0 or SIGPIPE's 141.
        let out = sh(
            &j,
            &format!("\"$B\" {c} | head -1 >/dev/null; echo \"${{PIPESTATUS:-x}}\""),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.trim().is_empty(), "{c} | head -1: {err}");
        // A full disk: a message and exit 1.
        let out = sh(&j, &format!("\"$B\" {c} >/dev/full"));
        assert_clean_failure(&out, 1, &["standard output", "No space left on device"]);
    }
}

#[test]
fn quiet_verbose_and_color() {
    let j = Job::new();
    let out = j.run(&["status", "-q"]);
    assert!(
        out.status.success() && out.stdout.is_empty(),
        "{}",
        stdout(&out)
    );
    let out = j.run(&["verify", "--quiet"]);
    assert!(out.status.success() && out.stdout.is_empty());
    // -q keeps --json output.
    let out = j.run(&["status", "-q", "--json"]);
    serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap();
    // Colour only when asked for (or on a terminal); never with NO_COLOR.
    let esc = |o: &Output| o.stdout.contains(&0x1b);
    assert!(!esc(&j.run(&["verify"])), "piped: no colour");
    assert!(esc(&j.run(&["verify", "--color", "always"])));
    assert!(esc(&j.run(&["--color=always", "verify"])));
    assert!(!esc(&j.run(&["verify", "--color", "never"])));
    let out = j.run(&["-q", "-v", "status"]);
    assert_clean_failure(&out, 2, &["--quiet"]);
    let out = j.run(&["status", "--no-progress"]);
    assert!(out.status.success());
}

#[test]
fn flush_logs_one_timestamped_line_and_details_with_verbose() {
    let j = Job::new();
    let out = j.cmd(&["flush", "--job", "job42"]).output().unwrap();
    assert_ok(&out);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let l = lines[0];
    // RFC 3339 time, then the fields in a fixed order.
    let (time, rest) = l.split_once(' ').unwrap();
    assert!(
        time.len() == 20 && time.ends_with('Z') && &time[10..11] == "T",
        "{time}"
    );
    humantime::parse_rfc3339(time).unwrap();
    assert!(rest.starts_with("flush job=job42 rank=0 decision="), "{l}");
    for key in [" bytes=", " seconds=", " reason="] {
        assert!(l.contains(key), "{key} in {l}");
    }
    let out = j.run(&["flush", "-v", "--dry-run"]);
    let text = stdout(&out);
    assert!(text.lines().count() >= 2, "{text}");
    assert!(text.lines().next().unwrap().contains("decision="), "{text}");
    assert!(text.contains("IC "), "details: {text}");
}

#[test]
fn bash_completion_completes_subcommands() {
    let j = Job::new();
    let script = j.dir.path().join("rexctl.bash");
    let out = j.run(&["completions", "bash"]);
    assert!(out.status.success());
    std::fs::write(&script, &out.stdout).unwrap();
    let probe = |words: &str| {
        let out = Command::new("bash")
            .args([
                "--norc",
                "-c",
                &format!(
                    "source {}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); COMP_LINE=\"{words}\"; COMP_POINT=${{#COMP_LINE}}; _rexctl rexctl \"${{COMP_WORDS[-1]}}\" \"${{COMP_WORDS[-2]}}\"; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
                    s(&script)
                ),
            ])
            .output()
            .unwrap();
        assert_ok(&out);
        stdout(&out)
    };
    let got = probe("rexctl pu");
    assert_eq!(got.trim(), "push-l2", "{got}");
    let got = probe("rexctl re");
    assert!(got.lines().any(|l| l == "restore"), "{got}");
    let got = probe("rexctl restore --l2-");
    assert!(got.lines().any(|l| l == "--l2-only"), "{got}");
    for sh in ["zsh", "fish"] {
        let out = j.run(&["completions", sh]);
        assert!(out.status.success() && !out.stdout.is_empty(), "{sh}");
    }
}

#[test]
fn shipped_systemd_units_and_crontab_run_flush() {
    let j = Job::new();
    let root = j.dir.path().join("root");
    let out = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install"))
        .env("DESTDIR", &root)
        .env("PREFIX", "/usr")
        .env("REXCTL", env!("CARGO_BIN_EXE_rexctl"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_ok(&out);
    for f in [
        "usr/bin/rexctl",
        "usr/lib/systemd/system/rex-flush@.service",
        "usr/lib/systemd/system/rex-flush@.timer",
        "usr/share/doc/rexctl/crontab.example",
        "usr/share/man/man1/rexctl-flush.1",
        "usr/share/man/man5/rex.toml.5",
        "usr/share/bash-completion/completions/rexctl",
    ] {
        assert!(root.join(f).is_file(), "{f} installed");
    }
    let unit =
        std::fs::read_to_string(root.join("usr/lib/systemd/system/rex-flush@.service")).unwrap();
    let timer =
        std::fs::read_to_string(root.join("usr/lib/systemd/system/rex-flush@.timer")).unwrap();
    assert!(timer.contains("OnUnitInactiveSec=") && timer.contains("WantedBy=timers.target"));
    // The unit's command, for instance "job42", run with the real binary
    // and a configuration where /etc/rex/job42.toml would be.
    let cfg = j.dir.path().join("job42.toml");
    std::fs::write(
        &cfg,
        format!(
            "l1 = {:?}\nl2 = {:?}\njob = \"job42\"\n",
            s(&j.l1()),
            s(&j.l2())
        ),
    )
    .unwrap();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart")
        .replace("/etc/rex/%i.toml", s(&cfg))
        .replace("/usr/bin/rexctl", env!("CARGO_BIN_EXE_rexctl"));
    assert!(!exec.contains('%') && !exec.contains('@'), "{exec}");
    let out = clean(Command::new("sh"))
        .args(["-c", &exec])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{exec}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout(&out).contains("flush job=job42 rank=0 decision="),
        "{}",
        stdout(&out)
    );
    // The crontab line's command (after the five time fields and the user).
    let cron = std::fs::read_to_string(root.join("usr/share/doc/rexctl/crontab.example")).unwrap();
    let line = cron
        .lines()
        .find(|l| !l.starts_with('#') && !l.trim().is_empty())
        .expect("a crontab line");
    let command = line
        .split_whitespace()
        .skip(6)
        .collect::<Vec<_>>()
        .join(" ");
    let log = j.dir.path().join("rex.log");
    let command = command
        .replace("/etc/rex/job42.toml", s(&cfg))
        .replace("/var/log/rex-job42.log", s(&log))
        .replace("/usr/bin/rexctl", env!("CARGO_BIN_EXE_rexctl"));
    let out = clean(Command::new("sh"))
        .args(["-c", &command])
        .output()
        .unwrap();
    assert!(out.status.success(), "{command}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("flush job=job42"), "{logged}");
}

#[test]
fn restore_replaces_only_a_regular_file() {
    let j = Job::new();
    let fifo = j.dir.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let dir = j.dir.path().join("adir");
    std::fs::create_dir(&dir).unwrap();
    let link = j.dir.path().join("link");
    std::os::unix::fs::symlink(j.dir.path().join("target"), &link).unwrap();
    for out in [&fifo, &dir, &link] {
        let o = j.run(&["restore", "-f", "-o", s(out)]);
        assert_clean_failure(&o, 5, &["not a regular file"]);
    }
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(!j.dir.path().join("target").exists());
}

#[test]
fn refused_settings_act_on_nothing() {
    let j = Job::new();
    let before = tree(j.dir.path());
    // Bad settings, a missing L1: no L2 directory is made.
    for args in [
        &["push-l2", "--l2", "./new-a", "--pattern-size", "24"][..],
        &["push-l2", "--l1", "./no-l1", "--l2", "./new-b"],
        &["flush", "--l1", "./no-l1", "--l2", "./new-c"],
    ] {
        let o = j.run(args);
        assert_clean_failure(&o, 5, &[]);
    }
    // A dry run decides and changes nothing.
    let o = j.run(&["flush", "-n", "--l2", "./new-d"]);
    assert_ok(&o);
    let o = j.run(&["flush", "--dry-run"]);
    assert!(o.status.success());
    assert_eq!(tree(j.dir.path()), before);
    // A flag beats a variable that would not parse.
    let o = j
        .cmd(&["plan", "--mtbf", "6"])
        .env("REX_MTBF", "abc")
        .output()
        .unwrap();
    assert_ok(&o);
    // Any command checks a configuration file named with -c.
    let o = j.run(&["gen", "--list-profiles", "-c", "nope.toml"]);
    assert_clean_failure(&o, 5, &["nope.toml"]);
    // Help written to a full disk is an error too.
    let o = sh(&j, "\"$B\" --help >/dev/full");
    assert_clean_failure(&o, 1, &["No space left on device"]);
}

#[test]
fn every_range_of_pages_must_select_a_page() {
    let j = Job::new();
    let o = j.run(&["restore", "-o", "img.rexic"]);
    assert!(o.status.success());
    let v: serde_json::Value =
        serde_json::from_slice(&j.run(&["inspect", "--index", "--json", "img.rexic"]).stdout)
            .unwrap();
    let pages: Vec<u64> = v[0]["pages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_u64().unwrap())
        .collect();
    let first = pages[0];
    let hole = (first..).find(|p| !pages.contains(p)).unwrap();
    let list = format!("{first:#x},{hole:#x}");
    let o = j.run(&["restore", "-f", "-o", "part.rexic", "--pages", &list]);
    assert_clean_failure(&o, 5, &["selects no page", &format!("{hole:#x}")]);
    let o = j.run(&[
        "restore",
        "-f",
        "-o",
        "part.rexic",
        "--pages",
        &format!("{first:#x}"),
    ]);
    assert_ok(&o);
    // `--raw` of a range spans the range: holes at its end read as zeros,
    // as holes at its start do (the output used to stop at the last page
    // restored).
    let last = *pages.last().unwrap();
    let range = format!("{:#x}-{:#x}", last - 1, last + 3);
    let o = j.run(&["restore", "-o", "tail.raw", "--raw", "--pages", &range]);
    assert_ok(&o);
    let raw = std::fs::read(j.dir.path().join("tail.raw")).unwrap();
    let ps = v[0]["header"]["page_size"].as_u64().unwrap() as usize;
    assert_eq!(raw.len(), 5 * ps, "--raw --pages {range}");
    assert!(
        raw[2 * ps..].iter().all(|&b| b == 0),
        "the trailing hole is not zeros"
    );
}

/// `coalesce -o` and `gen --truth` write their files as `restore -o` does:
/// never over an existing file without --force, and never into the
/// checkpoints' own directory, where the output would join the chain
/// (`coalesce` then refused every later batch: "seq 20 appears twice").
#[test]
fn outputs_never_replace_a_file_or_join_the_l1_directory() {
    let j = Job::new();
    let d = j.dir.path();
    assert_ok(&j.run(&["gen", "ics", "--pages", "16", "--count", "2"]));
    std::fs::write(d.join("notes.txt"), "mine").unwrap();
    let o = j.run(&["coalesce", "ics", "-o", "notes.txt"]);
    assert_clean_failure(&o, 5, &["notes.txt", "--force"]);
    assert_eq!(
        std::fs::read_to_string(d.join("notes.txt")).unwrap(),
        "mine"
    );
    let before = tree(d);
    for out in ["ics/ckpt-00000020.rexic", "./ics/x.rexic"] {
        let o = j.run(&["coalesce", "ics", "-o", out]);
        assert_clean_failure(&o, 5, &["lies in the L1 directory"]);
    }
    let o = j.run(&["gen", "new", "--count", "1", "--truth", "new/t.rexic"]);
    assert_clean_failure(&o, 5, &["--truth new/t.rexic must lie outside new"]);
    let o = j.run(&["gen", "new", "--count", "1", "--truth", "notes.txt"]);
    assert_clean_failure(&o, 5, &["notes.txt", "--force"]);
    for args in [&["restore", "-o", "-"][..], &["coalesce", "ics", "-o", "-"]] {
        let o = j.run(args);
        assert_clean_failure(&o, 5, &["standard output"]);
    }
    // A directory's name, before any work (helper-86: the whole restore
    // was written, then its rename failed).
    for args in [
        &["restore", "-o", "newdir/"][..],
        &["coalesce", "ics", "-o", "newdir/"],
    ] {
        let o = j.run(args);
        assert_clean_failure(&o, 5, &["newdir/", "names a directory"]);
    }
    assert_eq!(tree(d), before, "a refused output changed files");
    // With --force the file is replaced by a valid REX-IC file.
    assert_ok(&j.run(&["coalesce", "ics", "-o", "notes.txt", "-f"]));
    assert_ok(&j.run(&["inspect", "notes.txt"]));
    assert_ok(&j.run(&["coalesce", "ics"]));
    // No checkpoint where one is needed: bad data, exit 3.
    std::fs::create_dir(d.join("empty")).unwrap();
    let o = j.run(&["coalesce", "empty"]);
    assert_clean_failure(&o, 3, &["no checkpoint"]);
}

/// A value out of range exits 5 naming its key, as rex.toml(5) says,
/// instead of being raised or lowered silently; so does an unknown key in
/// a table.
#[test]
fn out_of_range_values_and_unknown_table_keys_are_refused() {
    let j = Job::new();
    for (flag, value, key) in [
        ("--keep-chains-l2", "0", "keep_chains_l2"),
        ("--keep-chains-l1", "0", "keep_chains_l1"),
        ("--s3-max-retries", "101", "s3_max_retries"),
    ] {
        let o = j.run(&["plan", flag, value]);
        assert_clean_failure(&o, 5, &[key]);
    }
    let toml = j.dir.path().join("t.toml");
    std::fs::write(
        &toml,
        "[interval_table]\nic = [1.0, 2.0]\ncr = [1.0, 2.0]\nchi = [[1.0, 2.0], [1.0, 2.0]]\nfoo = 1\n",
    )
    .unwrap();
    let o = j.run(&["plan", "-c", s(&toml)]);
    assert_clean_failure(&o, 5, &["t.toml", "foo"]);
    let o = j.run(&["demo", "--batch", "0"]);
    assert_clean_failure(&o, 2, &["--batch", "at least 1"]);
    // A file where an L2 directory would go: an unusable location.
    std::fs::write(j.dir.path().join("plain"), "x").unwrap();
    let o = j.run(&["push-l2", "--l2", "./plain"]);
    assert_clean_failure(&o, 5, &["plain", "not a directory"]);
}

/// A refused value names where it was set, since the key alone does not
/// say which of the three places to fix: the flag, the variable, or the
/// configuration file; a variable wins over the file and loses to a flag.
#[test]
fn a_refused_value_names_the_flag_variable_or_file_that_set_it() {
    let j = Job::new();
    let o = j.run(&["push-l2", "--zstd-level", "99"]);
    assert_clean_failure(&o, 5, &["zstd_level 99", "(set by --zstd-level)"]);
    let o = j
        .cmd(&["push-l2"])
        .env("REX_ZSTD_LEVEL", "99")
        .output()
        .unwrap();
    assert_clean_failure(
        &o,
        5,
        &["zstd_level 99", "(set by the variable REX_ZSTD_LEVEL)"],
    );
    let toml = j.dir.path().join("levels.toml");
    std::fs::write(&toml, "zstd_level = 98\nkeep_chains_l1 = 0\n").unwrap();
    let o = j.run(&["push-l2", "-c", s(&toml), "--keep-chains-l1", "1"]);
    assert_clean_failure(&o, 5, &["zstd_level 98", "levels.toml"]);
    let o = j
        .cmd(&["push-l2", "-c", s(&toml), "--zstd-level", "3"])
        .env("REX_KEEP_CHAINS_L1", "0")
        .output()
        .unwrap();
    let e = assert_clean_failure(&o, 5, &["keep_chains_l1", "REX_KEEP_CHAINS_L1"]);
    assert!(!e.contains("levels.toml"), "{e}");
    // Store settings too, from a command that only reads L2.
    let o = j
        .cmd(&["gc", "-n"])
        .env("REX_S3_PART_SIZE", "5")
        .output()
        .unwrap();
    assert_clean_failure(&o, 5, &["s3_part_size 5", "REX_S3_PART_SIZE"]);
    // A value clap cannot parse: clap names the flag, the tip the variable.
    let o = j
        .cmd(&["push-l2"])
        .env("REX_THREADS", "-1")
        .output()
        .unwrap();
    assert_clean_failure(&o, 2, &["--threads", "tip:", "variable REX_THREADS"]);
    let o = j
        .cmd(&["push-l2", "--threads=x"])
        .env("REX_THREADS", "-1")
        .output()
        .unwrap();
    let e = assert_clean_failure(&o, 2, &["'x'", "--threads"]);
    assert!(!e.contains("REX_THREADS"), "the flag was typed: {e}");
    // An empty location is refused by every command alike: `status` showed
    // an L2 "not made yet", `flush -n` would push, `push-l2` refused it.
    let toml = j.dir.path().join("empty.toml");
    std::fs::write(&toml, "l2 = \"\"\n").unwrap();
    for cmd in [
        &["status"][..],
        &["flush", "-n"],
        &["push-l2"],
        &["verify"],
        &["gc", "-n"],
    ] {
        let o = j
            .cmd(&["-c", s(&toml)])
            .args(cmd)
            .env_remove("REX_L2")
            .output()
            .unwrap();
        assert_clean_failure(&o, 5, &["l2 is empty", "empty.toml"]);
    }
    // Only where it is read: analyze reads an L1 directory alone.
    assert_ok(&j.run(&["gen", "g2", "--pages", "16", "--count", "2"]));
    let o = j
        .cmd(&["-c", s(&toml), "analyze", "g2", "--no-pipeline"])
        .env_remove("REX_L2")
        .output()
        .unwrap();
    assert_ok(&o);
    // And where L1 is optional (a restore from L2 alone without one).
    std::fs::write(&toml, "l1 = \"\"\n").unwrap();
    let o = j
        .cmd(&["-c", s(&toml), "restore", "-o", "x.rexic"])
        .env_remove("REX_L1")
        .output()
        .unwrap();
    assert_clean_failure(&o, 5, &["l1 is empty", "empty.toml"]);
    // Unless --l2-only leaves L1 unread.
    let o = j
        .cmd(&["-c", s(&toml), "restore", "--l2-only", "-o", "y.rexic"])
        .env_remove("REX_L1")
        .output()
        .unwrap();
    assert_ok(&o);
}

/// The temporary files of rexctl's under `dir` (a walk that tolerates
/// entries going away while a command runs).
fn temps_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') && name.contains(".tmp-") {
                out.push(e.path().display().to_string());
            } else if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            }
        }
    }
    out
}

/// Starts `c` and sends it `sig` once a temporary file shows under
/// `watch` (see `signal_when`). The child starts with `sig`'s default
/// action: under `nohup` (a CI script started so) SIGHUP is ignored, and
/// rexctl rightly keeps a signal ignored that was ignored when it started.
fn interrupt_while_writing(
    mut c: Command,
    watch: &Path,
    sig: libc::c_int,
) -> (std::process::ExitStatus, bool) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the closure calls only signal(2),
    // which is async-signal-safe, and touches no memory of the parent's.
    unsafe {
        c.pre_exec(move || {
            libc::signal(sig, libc::SIG_DFL);
            Ok(())
        });
    }
    super::util::signal_when(c, || !temps_under(watch).is_empty(), sig)
}

/// SIGINT, SIGTERM, SIGHUP (and SIGUSR1 or SIGALRM, helper-86) end a
/// restore or a push the way they end any Unix tool (the status shows the signal), and remove the temporary files
/// of what it was writing: no `.OUT.tmp-PID-0` beside the output it never
/// wrote, no half object in L2, and the next push and restore go on as if
/// the interrupted one had never started.
#[test]
fn an_interrupted_restore_or_push_leaves_no_temporary_file() {
    use std::os::unix::process::ExitStatusExt;
    let j = Job::new();
    let truth = j.dir.path().join("truth");
    // A larger image, so that each command writes for a while.
    let mut w = workload("balanced", 32768, 9);
    let l1 = j.dir.path().join("big-l1");
    let l2 = j.dir.path().join("big-l2");
    let want = super::util::take_until(&mut w, &l1, 2, &truth);
    let with = |args: &[&str]| {
        let mut c = clean(rexctl());
        c.current_dir(j.dir.path())
            .env("REX_L1", &l1)
            .env("REX_L2", &l2)
            .args(args);
        c
    };
    let out_dir = j.dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let out = out_dir.join("image.rexic");

    // The push: interrupted until a signal lands while it writes.
    let mut pushes_interrupted = 0;
    for _ in 0..10 {
        let (st, landed) = interrupt_while_writing(with(&["push-l2"]), j.dir.path(), libc::SIGTERM);
        assert!(
            temps_under(j.dir.path()).is_empty(),
            "{:?}",
            temps_under(j.dir.path())
        );
        if landed && st.signal() == Some(libc::SIGTERM) {
            pushes_interrupted += 1;
            break;
        }
        assert!(st.success(), "{st:?}");
        // It finished first: start over from an empty L2.
        std::fs::remove_dir_all(&l2).unwrap();
    }
    assert_eq!(
        pushes_interrupted, 1,
        "no push was interrupted while writing"
    );
    assert_ok(&with(&["push-l2"]).output().unwrap());
    assert!(temps_under(j.dir.path()).is_empty());

    for sig in [
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGUSR1,
        libc::SIGALRM,
    ] {
        let mut interrupted = false;
        for _ in 0..10 {
            let (st, landed) = interrupt_while_writing(
                with(&["restore", "--l2-only", "-o", s(&out)]),
                &out_dir,
                sig,
            );
            assert!(
                temps_under(j.dir.path()).is_empty(),
                "signal {sig}: {:?}",
                tree(&out_dir)
            );
            if landed && st.signal() == Some(sig) {
                assert!(!out.exists(), "signal {sig}: an output appeared");
                interrupted = true;
                break;
            }
            // Finished before the signal: the output is whole.
            assert!(st.success(), "signal {sig}: {st:?}");
            assert_image(&out, &want, "restore that finished first");
            std::fs::remove_file(&out).unwrap();
        }
        assert!(
            interrupted,
            "no restore was interrupted by signal {sig} while writing"
        );
    }
    assert_ok(
        &with(&["restore", "--l2-only", "-o", s(&out)])
            .output()
            .unwrap(),
    );
    assert_image(&out, &want, "restore after the interrupted ones");

    // A signal the command was started ignoring stays ignored (`nohup`,
    // a shell's background job): the restore goes on to the end.
    let mut landed_once = false;
    for _ in 0..10 {
        std::fs::remove_file(&out).unwrap();
        let mut nohup = clean(Command::new("nohup"));
        nohup
            .current_dir(j.dir.path())
            .arg(rexctl().get_program())
            .args(["restore", "--l2-only", "--l2", s(&l2), "-o", s(&out)]);
        let (st, landed) = interrupt_while_writing(nohup, &out_dir, libc::SIGHUP);
        assert!(st.success(), "nohup: SIGHUP ended it: {st:?}");
        assert_image(&out, &want, "restore under nohup");
        if landed {
            landed_once = true;
            break;
        }
    }
    assert!(
        landed_once,
        "no SIGHUP reached a restore under nohup while it wrote"
    );

    // `demo`'s work directory in TMPDIR goes too.
    let tmp = j.dir.path().join("tmpdir");
    std::fs::create_dir(&tmp).unwrap();
    let mut demos_interrupted = 0;
    for _ in 0..10 {
        let mut c = clean(rexctl());
        c.env("TMPDIR", &tmp).args(["demo", "-q"]);
        let (st, landed) = interrupt_while_writing(c, &tmp, libc::SIGTERM);
        assert_eq!(tree(&tmp), Vec::<String>::new(), "demo left files");
        if landed && st.signal() == Some(libc::SIGTERM) {
            demos_interrupted += 1;
            break;
        }
        assert!(st.success(), "{st:?}");
    }
    assert_eq!(
        demos_interrupted, 1,
        "no demo was interrupted while writing"
    );
}

/// A symbolic link (or a FIFO, a directory) where a lock file belongs is
/// refused, and the file it points to is left alone: a holder truncates
/// and writes its lock file, and through a link planted in a shared L2
/// directory the owner's cron `flush` emptied any file the owner may write
/// (helper-46: /etc/passwd).
#[test]
fn a_link_where_a_lock_file_belongs_is_refused_and_its_target_untouched() {
    for (dir, name, cmd) in [
        ("l1", ".rex.lock", "push-l2"),
        ("l2", ".rex.lock", "push-l2"),
        ("l1", ".rex.lock", "flush"),
        ("l2", ".rex.lock", "gc"),
        ("l1", ".rex.lock", "restore"),
        ("l1", ".capture.lock", "capture"),
    ] {
        let ctx = format!("{dir}/{name} for {cmd}");
        let j = Job::new();
        let victim = j.dir.path().join("victim");
        std::fs::write(&victim, "keep me\n").unwrap();
        let lock = j.dir.path().join(dir).join(name);
        let _ = std::fs::remove_file(&lock);
        std::os::unix::fs::symlink(&victim, &lock).unwrap();
        let out = match cmd {
            "flush" => j.run(&["flush", "--max-age", "0.001"]),
            "gc" => j.run(&["gc"]),
            "restore" => j.run(&["restore", "-o", "img.rexic"]),
            "capture" => j.run(&[
                "capture",
                "--interval",
                "0.1",
                "--count",
                "1",
                "--",
                "sleep",
                "5",
            ]),
            _ => j.run(&[cmd]),
        };
        let err = assert_clean_failure(&out, 1, &["symbolic link"]);
        assert!(err.contains(name), "{ctx}: {err}");
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "keep me\n",
            "{ctx}"
        );
    }
    // A FIFO there: refused, no hang.
    let j = Job::new();
    let fifo = j.l1().join(".rex.lock");
    let _ = std::fs::remove_file(&fifo);
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path of our own temporary directory.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let out = j.run(&["push-l2"]);
    assert_clean_failure(&out, 1, &["a FIFO is there"]);
}

/// An output inside the directories it is made from is refused before
/// anything is written (helper-46): `restore -o` onto an L2 data file or
/// L1's copy of the chain lost the generation (with `-f`), and an image
/// written into L1 joined its pending checkpoints and blocked every push;
/// `--svg` replaced checkpoints and devices.
#[test]
fn an_output_among_the_files_it_is_made_from_is_refused() {
    let j = Job::new();
    let (l1, l2) = (j.l1(), j.l2());
    let ckpt = crate::util::names_in(&l1)
        .into_iter()
        .find(|n| n.ends_with(".rexic"))
        .expect("a pending checkpoint");
    let keep = |p: &Path| (p.to_path_buf(), std::fs::read(p).unwrap());
    let kept = [
        keep(&l2.join("g00000001.rps")),
        keep(&l1.join("rex").join("g00000001.pf")),
        keep(&l1.join(&ckpt)),
    ];
    for (args, needle) in [
        (
            vec!["restore", "-f", "-o", "l2/g00000001.rps"],
            "the L2 directory",
        ),
        (
            vec!["restore", "-f", "-o", "l1/rex/g00000001.pf"],
            "the L1 directory",
        ),
        (vec!["restore", "-o", "l1/image.rexic"], "the L1 directory"),
        (
            vec!["restore", "--l2-only", "-o", "l1/sub/../image.rexic"],
            "the L1 directory",
        ),
        (
            vec!["coalesce", "l1", "-f", "-o", "l1/rex/g00000001.pf"],
            "the L1 directory",
        ),
        (
            vec![
                "analyze",
                "l1",
                "--no-pipeline",
                "--svg",
                &format!("l1/{ckpt}"),
            ],
            "the L1 directory",
        ),
        (vec!["compare", "l1", "--svg", "l1/x.svg"], "L1DIR"),
        (vec!["analyze", "l1", "--no-pipeline", "--svg", "-"], "-"),
        (
            vec!["analyze", "l1", "--no-pipeline", "--svg", "l2"],
            "not a regular file",
        ),
    ] {
        let out = j.run(&args);
        assert_clean_failure(&out, 5, &[needle]);
        for (p, b) in &kept {
            assert_eq!(
                &std::fs::read(p).unwrap(),
                b,
                "{args:?} changed {}",
                p.display()
            );
        }
        assert!(!l1.join("image.rexic").exists(), "{args:?}");
        assert!(!j.dir.path().join("-").exists(), "{args:?}");
    }
    let out = j.run(&["push-l2"]);
    assert_ok(&out);
}

/// Numbers past what a setting can mean are refused with the setting's
/// name, never a panic or an abort (helper-46: `--threads 100000` aborted
/// the push, `gc --grace 2e19` and `--s3-retry-timeout 1e300` panicked).
#[test]
fn settings_past_their_range_are_refused_by_name() {
    let j = Job::new();
    for (args, code, needle) in [
        (vec!["push-l2", "--threads", "100000"], 5, "threads 100000"),
        (
            vec!["restore", "-o", "x", "--threads", "100000"],
            5,
            "threads 100000",
        ),
        (vec!["gc", "--grace", "2e19"], 2, "--grace"),
        (
            vec!["status", "--s3-retry-timeout", "1e300"],
            5,
            "s3_retry_timeout",
        ),
        (vec!["status", "--s3-timeout", "1e300"], 5, "s3_timeout"),
        (
            vec!["status", "--s3-connect-timeout", "1e300"],
            5,
            "s3_connect_timeout",
        ),
        (
            vec!["capture", "--interval", "2e19", "--", "true"],
            5,
            "--interval",
        ),
    ] {
        let out = j.run(&args);
        assert_clean_failure(&out, code, &[needle]);
    }
    let out = j
        .cmd(&["flush"])
        .env("REX_THREADS", "100000")
        .output()
        .unwrap();
    assert_clean_failure(&out, 5, &["threads 100000"]);
}

/// `rexctl demo | head -1` ends quietly, as a closed pipe ends any Unix
/// tool, and leaves no work directory behind (helper-46: SIGPIPE's
/// default action skipped the sweep); a batch larger than the demo's
/// checkpoints, which would never push, is refused.
#[test]
fn demo_into_a_closed_pipe_leaves_nothing_and_a_batch_too_large_is_refused() {
    use std::io::BufRead;
    let tmp = tempfile::tempdir().unwrap();
    let mut child = clean(rexctl())
        .args(["demo", "--profile", "small-inc"])
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("rexctl demo"), "{first}");
    // The reader is gone (dropped above); the next line ends the demo.
    let out = child.wait_with_output().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert!(
        out.status.signal() == Some(libc::SIGPIPE) || out.status.code() == Some(141),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(names_in(tmp.path()), Vec::<String>::new(), "left behind");
    let out = clean(rexctl())
        .args(["demo", "--batch", "13"])
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    assert_clean_failure(&out, 5, &["--batch 13", "at most 12"]);
    assert_eq!(names_in(tmp.path()), Vec::<String>::new(), "left behind");
}

/// `gen --truth` into a directory that does not exist is refused before
/// any checkpoint is written (helper-46: the checkpoints were left, and
/// the corrected command refused the full directory).
#[test]
fn gen_with_a_truth_it_cannot_write_writes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let out = clean(rexctl())
        .current_dir(d.path())
        .args(["gen", "l1", "--truth", "missing/t.rexic"])
        .output()
        .unwrap();
    assert_clean_failure(&out, 5, &["--truth", "missing"]);
    assert_eq!(names_in(d.path()), Vec::<String>::new());
    // The truth named as OUTDIR itself (helper-72: the checkpoints were
    // written into it, then the truth failed on the directory).
    for truth in ["l1", "./l1"] {
        let out = clean(rexctl())
            .current_dir(d.path())
            .args(["gen", "l1", "--count", "1", "--truth", truth])
            .output()
            .unwrap();
        assert_clean_failure(&out, 5, &["is OUTDIR itself"]);
        assert_eq!(names_in(d.path()), Vec::<String>::new());
    }
    // A directory the truth cannot be made in (not for root, whom modes
    // do not stop).
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        use std::os::unix::fs::PermissionsExt;
        let ro = d.path().join("ro");
        std::fs::create_dir(&ro).unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
        let out = clean(rexctl())
            .current_dir(d.path())
            .args(["gen", "l1", "--count", "1", "--truth", "ro/t.rexic"])
            .output()
            .unwrap();
        assert_clean_failure(&out, 1, &["ro", "--truth"]);
        assert_eq!(names_in(d.path()), vec!["ro".to_string()]);
    }
    // An image past the machine's memory: it grew until the kernel killed
    // the generator (4 GB in 5 s).
    let out = clean(rexctl())
        .current_dir(d.path())
        .args(["gen", "l1", "--pages", "18446744073709551615"])
        .output()
        .unwrap();
    assert_clean_failure(&out, 5, &["18446744073709551615 pages", "in memory"]);
    assert_eq!(names_in(d.path()), Vec::<String>::new());
    // The same per rank of an MPI job, whose two parts (shared and own) are
    // held at once (helper-49: each alone passed the check).
    let out = clean(rexctl())
        .current_dir(d.path())
        .args(["gen", "l1", "--ranks", "2", "--page-size", "1048576"])
        .args(["--pages", "18446744073709551"])
        .output()
        .unwrap();
    assert_clean_failure(&out, 5, &["18446744073709551 pages", "in memory"]);
    assert_eq!(names_in(d.path()), Vec::<String>::new());
}

/// A file name is any bytes on Linux: `--json` writes a path that is not
/// UTF-8 lossily (U+FFFD) instead of failing after the work is done (`gen`
/// had written its checkpoints, then printed "path contains invalid UTF-8
/// characters" and exited 1).
#[test]
fn json_reports_write_paths_that_are_not_utf8() {
    use std::ffi::{OsStr, OsString};
    use std::os::unix::ffi::OsStrExt;
    let d = tempfile::tempdir().unwrap();
    let top = d.path().join(OsStr::from_bytes(b"d\xff"));
    std::fs::create_dir(&top).unwrap();
    let (l1, l2) = (top.join("l1"), top.join("l2"));
    std::fs::create_dir(&l2).unwrap();
    let os = |a: &[&dyn AsRef<OsStr>]| -> Vec<OsString> {
        a.iter().map(|x| x.as_ref().to_os_string()).collect()
    };
    let ic0 = l1.join("ckpt-00000000.rexic");
    let mut cmds = vec![
        os(&[&"gen", &"--json", &l1, &"--pages", &"32", &"--count", &"3"]),
        os(&[&"inspect", &"--json", &ic0]),
        os(&[&"coalesce", &"--json", &l1, &"-o", &top.join("c.rexic")]),
        os(&[&"analyze", &"--json", &l1, &"--no-pipeline"]),
        os(&[&"status", &"--json", &"--l1", &l1, &"--l2", &l2]),
        os(&[&"flush", &"--json", &"-n", &"--l1", &l1, &"--l2", &l2]),
        os(&[&"push-l2", &"--json", &"--l1", &l1, &"--l2", &l2]),
        os(&[
            &"restore",
            &"--json",
            &"--l2",
            &l2,
            &"-o",
            &top.join("o.rexic"),
        ]),
        os(&[&"verify", &"--json", &"--l2", &l2]),
        os(&[&"gc", &"--json", &"-n", &"--l2", &l2]),
        os(&[
            &"capture",
            &"--json",
            &"--l1",
            &top.join("cap"),
            &"--interval",
            &"0.2",
            &"--count",
            &"1",
            &"--",
            &"sleep",
            &"3",
        ]),
    ];
    if cfg!(feature = "counterparts") {
        cmds.insert(
            4,
            os(&[
                &"compare", &"--json", &l1, &"--only", &"rex,ic", &"--runs", &"1",
            ]),
        );
    }
    let mut lossy = 0;
    for args in cmds {
        let out = clean(rexctl())
            .current_dir(d.path())
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", stdout(&out)));
        if v.to_string().contains("d\u{fffd}") {
            lossy += 1;
        }
    }
    // gen, inspect, coalesce, analyze, capture (and compare) name a path.
    assert!(lossy >= 5, "{lossy} reports named the directory");
}

/// `gc -n` writes nothing to L2, not even a directory L2's lock file
/// (helper-72: it made `.rex.lock`, and failed on a read-only L2), and
/// still lists what a real run deletes.
#[test]
fn gc_dry_run_writes_nothing_to_l2() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    ok(&["gen", s(&l1), "--pages", "64", "--count", "2"]);
    ok(&["push-l2", "--l1", s(&l1), "--l2", s(&l2)]);
    std::fs::remove_file(l2.join(".rex.lock")).unwrap();
    std::fs::write(l2.join("g00000009.rps"), b"garbage").unwrap();
    let before = names_in(&l2);
    for extra in [&[][..], &["--l1", s(&l1)]] {
        let args = [&["gc", "-n", "--grace", "0", "--l2", s(&l2)][..], extra].concat();
        let text = ok(&args);
        assert!(text.contains("would delete 1 object"), "{text}");
        assert_eq!(names_in(&l2), before, "{args:?}");
    }
    // L2 equal to L1 is still refused.
    let o = run(&["gc", "-n", "--l2", s(&l1), "--l1", s(&l1)]);
    assert_clean_failure(&o, 5, &["is the L1 directory"]);
    ok(&["gc", "--grace", "0", "--l2", s(&l2)]);
    assert!(!l2.join("g00000009.rps").exists());
}

/// A directory operand that is not there is a mistyped name, exit 5 for
/// every command that reads an L1 directory, as for a push; a batch of 0
/// is a usage error for both commands that take one; an L1 that is a file
/// is said to be one (helper-72: exit 1 for coalesce, analyze and compare;
/// 5 and 2 for --batch 0; "no such directory" for a file).
#[test]
fn a_missing_l1_directory_is_the_same_error_everywhere() {
    let d = tempfile::tempdir().unwrap();
    let nol1 = d.path().join("nol1");
    for args in [
        vec!["coalesce", s(&nol1)],
        vec!["analyze", s(&nol1)],
        vec!["compare", s(&nol1)],
        vec!["push-l2", "--l1", s(&nol1), "--l2", "./l2"],
        vec!["status", "--l1", s(&nol1), "--l2", "./l2"],
        vec!["plan", "--l1", s(&nol1), "--l2", "./l2"],
    ] {
        let o = run(&args);
        assert_clean_failure(&o, 5, &["nol1"]);
    }
    let l1 = d.path().join("l1");
    ok(&["gen", s(&l1), "--pages", "16", "--count", "2"]);
    for cmd in ["analyze", "compare"] {
        assert_clean_failure(&run(&[cmd, s(&l1), "--batch", "0"]), 2, &["--batch"]);
    }
    let file = l1.join("ckpt-00000000.rexic");
    let o = run(&["restore", "--l1", s(&file), "--l2", "./l2", "-o", "x.rexic"]);
    assert_clean_failure(&o, 5, &["not a directory"]);
}

/// One of a thing is not "1 things" (helper-72).
#[test]
fn one_is_singular() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    let text = ok(&["gen", s(&l1), "--pages", "16", "--count", "0"]);
    assert!(text.starts_with("generated 1 checkpoint ("), "{text}");
    let f0 = l1.join("ckpt-00000000.rexic");
    let index: serde_json::Value =
        serde_json::from_str(&ok(&["inspect", "--json", "--index", s(&f0)])).unwrap();
    let page = index[0]["pages"][0].as_u64().unwrap();
    let text = ok(&["push-l2", "--l1", s(&l1), "--l2", s(&l2)]);
    assert!(text.contains("; 1 L1 checkpoint replaced"), "{text}");
    let out = d.path().join("one.rexic");
    let pages = format!("{page:#x}");
    let text = ok(&[
        "restore",
        "--l2-only",
        "--l2",
        s(&l2),
        "--pages",
        &pages,
        "-o",
        s(&out),
    ]);
    assert!(text.starts_with("restored 1 page ("), "{text}");
}

/// A file-size limit met while writing (`ulimit -f`): SIGXFSZ ended the
/// process with its temporary file left (helper-86); now the write fails,
/// "File too large", exit 1, and nothing is left.
#[test]
fn a_file_size_limit_is_an_error_not_a_signal() {
    let j = Job::new();
    // 512 pages of 4 KiB: a 2 MiB FULL checkpoint, past a 1 MiB limit.
    let out = sh(
        &j,
        "ulimit -f 2048; \"$B\" gen big --pages 512 --count 0 --profile incompressible",
    );
    assert_clean_failure(&out, 1, &["File too large"]);
    let left = names_in(&j.dir.path().join("big"));
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// A restore of pages of 1 MiB fills blocks of as many pages as fit in
/// 256 KiB, not 64 pages whatever their size: a one-page image took a
/// 64 MiB block, which aborted the process under an address-space limit,
/// its temporary file left (helper-86).
#[test]
fn a_restore_of_large_pages_needs_no_block_of_64_of_them() {
    let j = Job::new();
    let setup = "\"$B\" -q gen big --pages 1 --count 2 --page-size 1048576 && \"$B\" -q push-l2 --l1 big --l2 ./l2big";
    let out = sh(&j, setup);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = sh(
        &j,
        "ulimit -v 80000; \"$B\" -q restore --l2 ./l2big --l2-only --threads 4 -o limited.rexic",
    );
    assert!(
        out.status.success(),
        "under 80 MB of address space: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = sh(&j, "\"$B\" -q restore --l2 ./l2big --l2-only -o free.rexic");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        crate::util::same_image(
            &j.dir.path().join("limited.rexic"),
            &j.dir.path().join("free.rexic")
        ),
        "the two restores differ"
    );
}

/// Runs `args`, and truncates `victim` to 1 MiB as soon as the process has
/// it mapped (`/proc/PID/maps`). `None` when the process ended before it
/// mapped the file; else how it ended and its standard error.
fn shrink_when_mapped(args: &[&str], victim: &Path) -> Option<(std::process::ExitStatus, String)> {
    let mut child = rexctl()
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let maps = format!("/proc/{}/maps", child.id());
    let name = victim.display().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let mut shrunk = false;
    while child.try_wait().unwrap().is_none() {
        if std::fs::read_to_string(&maps).is_ok_and(|m| m.contains(&name)) {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(victim)
                .unwrap();
            f.set_len(1 << 20).unwrap();
            shrunk = true;
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never mapped {name}");
    }
    let out = child.wait_with_output().unwrap();
    shrunk.then(|| {
        (
            out.status,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
}

/// A file that shrinks while a command reads it through its mapping (a
/// producer rewriting a checkpoint in place, against FORMAT.md §2.7; a
/// parallel file system failing a read under the page cache raises the
/// same SIGBUS) is named with the byte that failed, exit 1, and the
/// command's temporary files are gone: it was "Bus error", status 135 and
/// a core dump, naming nothing, and a restore left its `.OUT.tmp-PID-0`.
/// A SIGBUS sent by `kill` keeps its default action.
#[test]
fn a_file_that_shrinks_under_a_read_is_named_not_a_bus_error() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (src, l1, l2) = (d.join("src"), d.join("l1"), d.join("l2"));
    ok(&[
        "-q",
        "gen",
        "--profile",
        "incompressible",
        "--pages",
        "65536",
        "--count",
        "0",
        s(&src),
    ]);
    std::fs::create_dir_all(&l1).unwrap();
    std::fs::create_dir_all(&l2).unwrap();
    let ic = src.join("ckpt-00000000.rexic");
    std::fs::copy(&ic, l1.join("ckpt-00000000.rexic")).unwrap();
    ok(&["-q", "push-l2", "--l1", s(&l1), "--l2", s(&l2)]);
    let rps = l2.join("g00000001.rps");
    let pristine = d.join("pristine.rps");
    std::fs::copy(&rps, &pristine).unwrap();
    let victim = d.join("victim.rexic");
    let out = d.join("out").join("image.rexic");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let cases: [(&str, Vec<&str>, &Path); 2] = [
        (
            "inspect of a REX-IC file",
            vec!["inspect", s(&victim)],
            &victim,
        ),
        (
            "restore from L2",
            vec!["restore", "--l2", s(&l2), "--l2-only", "-o", s(&out)],
            &rps,
        ),
    ];
    for (what, args, file) in cases {
        let mut reported = 0;
        for _ in 0..8 {
            std::fs::copy(&ic, &victim).unwrap();
            std::fs::copy(&pristine, &rps).unwrap();
            let Some((st, err)) = shrink_when_mapped(&args, file) else {
                continue;
            };
            assert_eq!(st.signal(), None, "{what}: ended by a signal: {err}");
            if st.code() == Some(0) {
                // It had read everything before the file shrank.
                continue;
            }
            assert_eq!(st.code(), Some(1), "{what}: {err}");
            let name = file.display().to_string();
            assert!(
                err.contains(&format!("{name}: byte ")) && err.contains("SIGBUS"),
                "{what}: {err}"
            );
            assert_eq!(err.lines().count(), 1, "{what}: {err}");
            assert!(!out.exists(), "{what}: an output was published");
            assert_eq!(
                names_in(out.parent().unwrap()),
                Vec::<String>::new(),
                "{what}: a temporary file was left"
            );
            reported += 1;
            if reported == 2 {
                break;
            }
        }
        assert!(reported > 0, "{what}: the file never shrank under a read");
    }
    // SIGBUS from kill(2): the default action, as before.
    std::fs::copy(&pristine, &rps).unwrap();
    let (st, sent) = super::util::signal_when(
        {
            let mut c = rexctl();
            c.args(["restore", "--l2", s(&l2), "--l2-only", "-o", s(&out)]);
            c
        },
        || !temps_under(out.parent().unwrap()).is_empty(),
        libc::SIGBUS,
    );
    assert!(sent, "the restore ended before its output appeared");
    assert_eq!(st.signal(), Some(libc::SIGBUS));
    // Ignored when it started, it stays ignored, as every signal does.
    for t in temps_under(out.parent().unwrap()) {
        std::fs::remove_file(t).unwrap();
    }
    let (st, sent) = super::util::signal_when(
        {
            use std::os::unix::process::CommandExt;
            let mut c = rexctl();
            c.args(["restore", "--l2", s(&l2), "--l2-only", "-o", s(&out)]);
            // SAFETY: between fork and exec the closure calls only
            // signal(2), which is async-signal-safe.
            unsafe {
                c.pre_exec(|| {
                    libc::signal(libc::SIGBUS, libc::SIG_IGN);
                    Ok(())
                });
            }
            c
        },
        || !temps_under(out.parent().unwrap()).is_empty(),
        libc::SIGBUS,
    );
    assert!(sent, "the restore ended before its output appeared");
    assert_eq!(st.code(), Some(0), "an ignored SIGBUS ended the restore");
    assert!(out.exists());
}

/// What helper-95 found refused too late or not at all, each refused before
/// anything is written (exit 5, or 2 for a command line): `gen --ranks`
/// into rank directories that hold checkpoints (it replaced some and kept
/// the rest), with --truth inside OUTDIR (rank 0's image joined its
/// checkpoints) or naming a file (written after the checkpoints); a chart
/// (`--svg`) over a file that is not one (an L2 manifest was replaced);
/// `coalesce -o` into the L2 directory, even with -f (an RPS was
/// replaced); `compare --update` without --summarize (ignored, exit 0); a
/// generated image larger than `ulimit -v` (an abort).
#[test]
fn late_or_missing_refusals_come_before_anything_is_written() {
    let j = Job::new();
    let d = j.dir.path();
    assert_ok(&j.run(&[
        "-q", "gen", "--ranks", "2", "--pages", "64", "--count", "2", "mpi",
    ]));
    let before = tree(&d.join("mpi"));
    let out = j.run(&[
        "-q", "gen", "--ranks", "2", "--pages", "64", "--count", "2", "--seed", "9", "mpi",
    ]);
    assert_clean_failure(&out, 5, &["mpi/0", "already holds REX-IC files"]);
    let out = j.run(&[
        "-q", "gen", "--ranks", "2", "--pages", "64", "mpi2", "--truth", "mpi2/0",
    ]);
    assert_clean_failure(&out, 5, &["--truth", "lies in OUTDIR"]);
    std::fs::write(d.join("tfile"), b"x").unwrap();
    let out = j.run(&[
        "-q", "gen", "--ranks", "2", "--pages", "64", "mpi3", "--truth", "tfile",
    ]);
    assert_clean_failure(&out, 5, &["tfile", "is a directory"]);
    assert!(!d.join("mpi2").exists() && !d.join("mpi3").exists());
    assert_eq!(tree(&d.join("mpi")), before);

    let manifest = j.l2().join(rexctl::format::manifest::manifest_name(1));
    let kept = std::fs::read(&manifest).unwrap();
    let out = j.run(&["analyze", "--svg", s(&manifest)]);
    assert_clean_failure(&out, 5, &["not an SVG chart"]);
    assert_eq!(std::fs::read(&manifest).unwrap(), kept);
    let rps = j.l2().join("g00000001.rps");
    let kept_rps = std::fs::read(&rps).unwrap();
    let out = j.run(&["coalesce", "-f", "-o", s(&rps)]);
    assert_clean_failure(&out, 5, &["lies in the L2 directory"]);
    assert_eq!(std::fs::read(&rps).unwrap(), kept_rps);
    // A chart replaces the chart of an earlier run.
    let svg = d.join("chart.svg");
    let g = d.join("g");
    assert_ok(&j.run(&["-q", "gen", "--pages", "64", "--count", "3", s(&g)]));
    assert_ok(&j.run(&["-q", "analyze", s(&g), "--svg", s(&svg)]));
    assert_ok(&j.run(&["-q", "analyze", s(&g), "--svg", s(&svg)]));

    let out = j.run(&[
        "compare",
        s(&j.l1()),
        "--update",
        "PERF.md",
        "--runs",
        "1",
        "--only",
        "zstd",
    ]);
    assert_clean_failure(&out, 2, &["--update goes with --summarize"]);

    let out = sh(&j, "ulimit -v 400000; \"$B\" -q gen big --pages 1000000");
    assert_clean_failure(&out, 5, &["ulimit -v"]);
    assert!(!d.join("big").exists() || names_in(&d.join("big")).is_empty());
}

/// An interrupted `analyze` leaves nothing in L1 (helper-95: its hidden
/// scratch directory stayed, tens of MB of hard links and a pushed chain
/// that `status` did not show).
#[test]
fn an_interrupted_analyze_leaves_nothing_in_l1() {
    let dir = tempfile::tempdir().unwrap();
    let l1 = dir.path().join("l1");
    ok(&["-q", "gen", "--pages", "4096", "--count", "12", s(&l1)]);
    let before = names_in(&l1);
    let scratch = || {
        names_in(&l1)
            .iter()
            .any(|n| n.starts_with(".rexctl-analyze-"))
    };
    let mut c = rexctl();
    c.args(["analyze", s(&l1)]);
    let (st, sent) = super::util::signal_when(c, scratch, libc::SIGTERM);
    use std::os::unix::process::ExitStatusExt;
    assert!(sent, "analyze ended before its scratch directory appeared");
    assert_eq!(st.signal(), Some(libc::SIGTERM));
    // What another thread made again meanwhile goes just after the
    // process (durable::remove_temps_on_signal).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while names_in(&l1) != before && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(names_in(&l1), before);
}

/// `status` says which generations L1's copy of the chain holds that L2
/// lacks (its manifest lost, a push interrupted, or another L2 location
/// given): it showed only L2's older ones, exit 0, while `verify` said BAD
/// (helper-95).
#[test]
fn status_names_the_generations_only_l1_holds() {
    let j = Job::new();
    std::fs::remove_file(j.l2().join(rexctl::format::manifest::manifest_name(1))).unwrap();
    let out = j.run(&["status"]);
    assert_ok(&out);
    let text = stdout(&out);
    assert!(text.contains("NOT IN L2: generation 1 (full"), "{text}");
    let out = j.run(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["l1_only"][0]["generation"], 1, "{v}");
    // Pushed again, L2 has it: nothing to say.
    assert_ok(&j.run(&["-q", "push-l2"]));
    assert!(!stdout(&j.run(&["status"])).contains("NOT IN L2"));
}

/// A producer that does not take the producer lock but names its
/// temporaries with its pid, as FORMAT.md §2.7 shows, keeps the file it is
/// writing through a push's recovery (helper-96: the push removed it and
/// the producer's rename failed); once that process is gone, the push
/// removes it as a crashed writer's.
#[test]
fn a_push_leaves_the_temporary_of_a_live_producer_without_the_lock() {
    let j = Job::new();
    let mut writer = Command::new("sleep").arg("60").spawn().unwrap();
    let tmp = j
        .l1()
        .join(format!(".ckpt-00000009.rexic.tmp-{}-0", writer.id()));
    std::fs::write(&tmp, b"being written").unwrap();
    assert_ok(&j.run(&["-q", "push-l2"]));
    assert!(tmp.exists(), "the push removed a live writer's temporary");
    writer.kill().unwrap();
    writer.wait().unwrap();
    assert_ok(&j.run(&["-q", "push-l2"]));
    assert!(!tmp.exists(), "a crashed writer's temporary stays");
}

/// A dangling symbolic link named like a checkpoint is a file of the wrong
/// type, as a FIFO is (FORMAT.md §2.8 step 0a): exit 3 from every command
/// that lists L1 (helper-96: exit 1 from push-l2 and restore, 3 from
/// verify), naming it; and `coalesce --from` past the newest pending seq
/// says so (helper-95: "L2 holds every one").
#[test]
fn a_dangling_link_named_like_a_checkpoint_is_bad_data() {
    let j = Job::new();
    let link = j.l1().join("ckpt-00000009.rexic");
    std::os::unix::fs::symlink(j.dir.path().join("nowhere"), &link).unwrap();
    for args in [&["push-l2"][..], &["restore", "-o", "x.rexic"], &["verify"]] {
        let out = j.run(args);
        assert_clean_failure(
            &out,
            3,
            &["ckpt-00000009.rexic", "symbolic link to nothing"],
        );
    }
    std::fs::remove_file(&link).unwrap();
    let out = j.run(&["coalesce", "--from", "50"]);
    assert_clean_failure(
        &out,
        3,
        &[
            "no checkpoint to coalesce from seq 50",
            "the newest pending checkpoint is seq 3",
        ],
    );
}
