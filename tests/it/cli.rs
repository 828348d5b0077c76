//! The CLI end to end: the real binary in temporary directories.

use std::path::Path;

use crate::util::{assert_clean_failure, copy_tree, ok, run};

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

#[test]
fn gen_is_deterministic_and_seeded() {
    let d = tempfile::tempdir().unwrap();
    let (a, b, c) = (d.path().join("a"), d.path().join("b"), d.path().join("c"));
    for (dir, seed) in [(&a, "7"), (&b, "7"), (&c, "8")] {
        ok(&[
            "gen",
            s(dir),
            "--profile",
            "churn",
            "--seed",
            seed,
            "--pages",
            "256",
            "--count",
            "5",
        ]);
    }
    let files = |dir: &Path| {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        v.sort();
        v.into_iter()
            .map(|p| std::fs::read(p).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(files(&a).len(), 6);
    assert_eq!(files(&a), files(&b), "same seed, same bytes");
    assert_ne!(files(&a), files(&c), "another seed, other bytes");
}

#[test]
fn every_profile_generates_a_valid_chain_that_coalesces_to_the_truth() {
    let profiles = ok(&["gen", "--list-profiles", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&profiles).unwrap();
    let names: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    assert!(names.len() >= 5, "{names:?}");
    for name in names {
        let d = tempfile::tempdir().unwrap();
        let l1 = d.path().join("l1");
        let truth = d.path().join("truth.rexic");
        let out = d.path().join("coalesced.rexic");
        ok(&[
            "gen",
            s(&l1),
            "--profile",
            &name,
            "--pages",
            "300",
            "--count",
            "6",
            "--truth",
            s(&truth),
        ]);
        ok(&["coalesce", s(&l1), "--out", s(&out)]);
        ok(&["inspect", s(&out)]);
        let diff = rexctl::eval::image::compare_ic_files(&out, &truth).unwrap();
        assert!(diff.is_equal(), "profile {name}: {diff}");
    }
}

#[test]
fn coalesce_json_carries_the_clist() {
    let d = tempfile::tempdir().unwrap();
    let l1 = d.path().join("l1");
    ok(&["gen", s(&l1), "--pages", "200", "--count", "4"]);
    let human = ok(&["coalesce", s(&l1)]);
    assert!(human.contains("coalesced 5 files (seq 0..=4"), "{human}");
    let v: serde_json::Value = serde_json::from_str(&ok(&["coalesce", s(&l1), "--json"])).unwrap();
    let clist = v["clist"].as_array().unwrap();
    assert_eq!(
        clist.len() as u64,
        v["stats"]["distinct_pages"].as_u64().unwrap()
    );
    assert_eq!(v["files"].as_array().unwrap().len(), 5);
    let pages: Vec<u64> = clist.iter().map(|e| e["page"].as_u64().unwrap()).collect();
    assert!(pages.windows(2).all(|w| w[0] < w[1]));
    // --from coalesces a suffix; a missing start seq is an error.
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["coalesce", s(&l1), "--from", "2", "--json"])).unwrap();
    assert_eq!(v["first_seq"], 2);
    assert_eq!(v["full"], false);
    let out = run(&["coalesce", s(&l1), "--from", "9"]);
    assert_clean_failure(&out, 3, &["no checkpoint to coalesce"]);
}

#[test]
fn inspect_reports_human_and_json() {
    let d = tempfile::tempdir().unwrap();
    let l1 = d.path().join("l1");
    ok(&["gen", s(&l1), "--pages", "64", "--count", "1"]);
    let f0 = l1.join("ckpt-00000000.rexic");
    let f1 = l1.join("ckpt-00000001.rexic");
    let human = ok(&["inspect", s(&f0), s(&f1)]);
    assert!(human.contains("seq 0, FULL, page size 4096"), "{human}");
    assert!(human.contains("CRCs ok"), "{human}");
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["inspect", "--json", "--index", s(&f0)])).unwrap();
    assert_eq!(v[0]["ok"], true);
    assert_eq!(v[0]["header"]["page_count"], 64);
    assert_eq!(v[0]["pages"].as_array().unwrap().len(), 64);
}

/// The version printed is the header's: a version 2 file may have an
/// empty extension area (helper-95: printed as v1, from `ext_len`).
#[test]
fn inspect_prints_the_version_the_header_states() {
    let d = tempfile::tempdir().unwrap();
    let v1 = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/ic/golden-basic.rexic");
    let mut bytes = std::fs::read(&v1).unwrap();
    assert_eq!((bytes[8], bytes[28]), (1, 0), "a version 1 fixture");
    bytes[8] = 2;
    let crc = crc32fast::hash(&bytes[..56]);
    bytes[56..60].copy_from_slice(&crc.to_le_bytes());
    let v2 = d.path().join("v2-empty-ext.rexic");
    std::fs::write(&v2, &bytes).unwrap();
    let human = ok(&["inspect", s(&v1), s(&v2)]);
    assert!(human.contains("golden-basic.rexic: REX-IC v1,"), "{human}");
    assert!(human.contains("v2-empty-ext.rexic: REX-IC v2,"), "{human}");
    let v: serde_json::Value = serde_json::from_str(&ok(&["inspect", "--json", s(&v2)])).unwrap();
    assert_eq!(v[0]["version"], 2);
}

#[test]
fn inspect_checks_every_file_and_fails_on_a_bad_one() {
    let d = tempfile::tempdir().unwrap();
    let l1 = d.path().join("l1");
    ok(&["gen", s(&l1), "--pages", "16", "--count", "1"]);
    let good = l1.join("ckpt-00000000.rexic");
    let bad = d.path().join("flipped.rexic");
    let mut bytes = std::fs::read(&good).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&bad, bytes).unwrap();
    let out = run(&["inspect", s(&bad), s(&good)]);
    let err = assert_clean_failure(&out, 3, &["flipped.rexic", "page data"]);
    assert!(err.contains("offset "), "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("ckpt-00000000.rexic: REX-IC v2, seq 0, FULL"),
        "the good file is still reported: {stdout}"
    );
    let missing = d.path().join("nope.rexic");
    assert_clean_failure(&run(&["inspect", s(&missing)]), 1, &["nope.rexic", "open"]);
    // --json says the errors on stderr too, as verify and status do
    // (helper-72: only in the JSON).
    let out = run(&["inspect", "--json", s(&bad), s(&missing)]);
    assert_clean_failure(&out, 3, &["flipped.rexic", "page data", "nope.rexic"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v[0]["ok"].clone(), v[1]["ok"].clone()),
        (false.into(), false.into())
    );
}

#[test]
fn gen_refuses_a_directory_holding_checkpoints() {
    let d = tempfile::tempdir().unwrap();
    let l1 = d.path().join("l1");
    ok(&["gen", s(&l1), "--pages", "16", "--count", "1"]);
    assert_clean_failure(&run(&["gen", s(&l1)]), 5, &["already holds REX-IC files"]);
    assert_clean_failure(
        &run(&["gen", s(&d.path().join("x")), "--profile", "nope"]),
        5,
        &["unknown profile"],
    );
    assert_clean_failure(
        &run(&["gen", s(&d.path().join("y")), "--page-size", "3000"]),
        5,
        &["power of two"],
    );
}

#[test]
fn a_gap_in_the_chain_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    let l1 = d.path().join("l1");
    ok(&["gen", s(&l1), "--pages", "16", "--count", "4"]);
    std::fs::remove_file(l1.join("ckpt-00000002.rexic")).unwrap();
    assert_clean_failure(
        &run(&["coalesce", s(&l1)]),
        3,
        &["checkpoint seq 2 missing"],
    );
}

#[test]
fn bad_command_lines_exit_2() {
    assert_eq!(run(&["no-such-command"]).status.code(), Some(2));
    assert_eq!(run(&["restore", "--l2", "x"]).status.code(), Some(2));
    let help = ok(&["--help"]);
    assert!(help.contains("Exit status:"), "{help}");
}

#[test]
fn demo_runs_the_main_job_end_to_end() {
    let d = tempfile::tempdir().unwrap();
    let work = d.path().join("work");
    let out = ok(&["demo", "--dir", s(&work), "--profile", "small-inc"]);
    assert!(out.contains("equals the ground truth"), "{out}");
}

/// The committed man pages are what the clap definitions generate.
#[test]
fn man_pages_are_up_to_date() {
    let d = tempfile::tempdir().unwrap();
    ok(&["man", "--out", s(d.path())]);
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("man");
    let mut generated: Vec<String> = Vec::new();
    for e in std::fs::read_dir(d.path()).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        let fresh = std::fs::read_to_string(e.path()).unwrap();
        // Every page: EXIT STATUS, and a SYNOPSIS that shows option values;
        // every subcommand's page: EXAMPLES.
        assert!(fresh.contains(".SH \"EXIT STATUS\""), "{name}: EXIT STATUS");
        let synopsis = fresh
            .split(".SH SYNOPSIS\n")
            .nth(1)
            .and_then(|t| t.lines().next())
            .unwrap_or_default();
        if name != "rexctl.1" {
            assert!(fresh.contains(".SH EXAMPLES"), "{name}: EXAMPLES");
            assert!(
                synopsis.contains("\\fI") && synopsis.contains("[\\fISETTINGS\\fR]")
                    || name == "rexctl-completions.1"
                    || name == "rexctl-inspect.1"
                    || name == "rexctl-gen.1"
                    || name == "rexctl-demo.1"
                    || name == "rexctl-compare.1",
                "{name}: SYNOPSIS {synopsis}"
            );
        }
        if name == "rexctl-restore.1" {
            assert!(synopsis.contains("\\fB\\-o\\fR \\fIFILE\\fR"), "{synopsis}");
        }
        // Every option says what it does (clap_mangen left the settings
        // hidden from `-h` without a word: 308 options).
        let lines: Vec<&str> = fresh.lines().collect();
        for w in lines.windows(3) {
            if w[0] == ".TP" && w[1].starts_with("\\fB\\-") {
                assert!(
                    !w[2].is_empty() && !w[2].starts_with('.'),
                    "{name}: option {} has no description",
                    w[1]
                );
            }
        }
        let old = std::fs::read_to_string(committed.join(&name)).unwrap_or_default();
        assert!(
            fresh == old,
            "man/{name} is stale: run `cargo run -- man --out man`"
        );
        generated.push(name);
    }
    // No page left behind for a subcommand that no longer exists.
    for e in std::fs::read_dir(&committed).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if name.starts_with("rexctl") {
            assert!(
                generated.contains(&name),
                "man/{name} has no subcommand any more"
            );
        }
    }
}

/// Every example of `--help` and the man pages parses: each `$ rexctl ...`
/// command of `cmd/examples.rs`, its environment assignments and `mpirun`
/// prefix dropped and its shell redirection cut, runs with `--help` added
/// before any `--` (clap prints the help once every argument before it
/// parsed, and refuses an unknown one). helper-17 found `coalesce ... -o`
/// in an example that only took `--out`.
#[test]
fn every_example_command_line_parses() {
    let src = include_str!("../../src/bin/rexctl/cmd/examples.rs");
    let mut checked = 0;
    let mut bad = Vec::new();
    for line in src.lines() {
        let Some(cmd) = line.trim_start().strip_prefix("$ ") else {
            continue;
        };
        // Each command of `a && b`, `a; b`, `a | b`; a redirection ends one.
        for part in cmd.split("&&").flat_map(|c| c.split([';', '|'])) {
            let part = part.split('>').next().unwrap();
            let words: Vec<&str> = part.split_whitespace().collect();
            let Some(at) = words.iter().position(|w| *w == "rexctl") else {
                continue;
            };
            let mut args: Vec<&str> = words[at + 1..].to_vec();
            let sep = args.iter().position(|w| *w == "--").unwrap_or(args.len());
            args.insert(sep, "--help");
            let out = run(&args);
            if !out.status.success() {
                bad.push(format!(
                    "{line}\n  exit {:?}: {}",
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            checked += 1;
        }
    }
    assert!(checked >= 25, "only {checked} examples found");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// `dedup_memory` (here from rex.toml) bounds a push's DeD-Table: past it
/// the push stores the patterns it cannot index, says so in its text and
/// JSON reports, and the restore is exact; without it, nothing is said.
#[test]
fn a_push_past_its_dedup_memory_says_so_and_restores_exactly() {
    let d = tempfile::tempdir().unwrap();
    let l1 = d.path().join("l1");
    let truth = d.path().join("truth.rexic");
    let out = d.path().join("out.rexic");
    ok(&[
        "gen",
        s(&l1),
        "--pages",
        "1024",
        "--count",
        "3",
        "--truth",
        s(&truth),
    ]);
    let saved = d.path().join("saved");
    copy_tree(&l1, &saved);
    let toml = d.path().join("rex.toml");
    std::fs::write(&toml, "dedup_memory = 19000\n").unwrap();
    // The key from the file, the flag over it (in JSON), the default.
    for (i, extra, capped) in [
        (0, &[][..], true),
        (1, &["--dedup-memory", "0", "--json"][..], true),
        (2, &["--dedup-memory", "2147483648"][..], false),
    ] {
        let (l1, l2) = (
            d.path().join(format!("l1-{i}")),
            d.path().join(format!("l2-{i}")),
        );
        copy_tree(&saved, &l1);
        let mut args = vec![
            "--config",
            s(&toml),
            "push-l2",
            "--l1",
            s(&l1),
            "--l2",
            s(&l2),
        ];
        args.extend(extra);
        let said = ok(&args);
        if extra.contains(&"--json") {
            let v: serde_json::Value = serde_json::from_str(&said).unwrap();
            assert_eq!(
                v["dedup"]["unindexed"].as_u64().unwrap() > 0,
                capped,
                "{said}"
            );
        } else {
            let note = said.contains("note: the DeD-Table reached dedup_memory");
            assert_eq!(note, capped, "{said}");
        }
        ok(&["restore", "--l2", s(&l2), "--l2-only", "-o", s(&out), "-f"]);
        let diff = rexctl::eval::image::compare_ic_files(&out, &truth).unwrap();
        assert!(diff.is_equal(), "case {i}: {diff}");
    }
}
