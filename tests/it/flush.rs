//! `rexctl flush` end to end: a generated workload driven checkpoint by
//! checkpoint with a flush after each; L2 checkpoints must happen exactly at
//! the controller's decisions (recomputed here from the files), complete
//! coalescences when the rules say, old chains pruned only after their
//! successor is durable, and every restore exact; plus concurrent flushes
//! and flushes killed at every durable file operation.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;

use rexctl::control::controller::{IntervalTable, chi_int};
use rexctl::eval::workload::{Workload, profile};
use rexctl::format::manifest::GenKind;
use rexctl::l1::L1Dir;
use rexctl::l2::chain::ChainIndex;
use rexctl::store::DirStore;

use crate::util::{ok, rexctl, run};

type Image = BTreeMap<u64, Vec<u8>>;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn assert_restores(d: &Path, l1: &Path, l2: &Path, truth: &BTreeMap<u64, Image>, what: &str) {
    let out = d.join("r.rexic");
    let idx = ChainIndex::load(&DirStore::open(l2).unwrap()).unwrap();
    if let Some(newest) = idx.newest() {
        ok(&["restore", "-f", "--l2", s(l2), "--out", s(&out)]);
        assert_eq!(
            read_image(&out),
            truth[&newest.last_seq],
            "{what}: L2 restore of seq {}",
            newest.last_seq
        );
    }
    let last = *truth.keys().next_back().unwrap();
    ok(&[
        "restore",
        "-f",
        "--l2",
        s(l2),
        "--l1",
        s(l1),
        "--out",
        s(&out),
    ]);
    assert_eq!(
        read_image(&out),
        truth[&last],
        "{what}: L1+L2 restore of seq {last}"
    );
}

fn read_image(p: &Path) -> Image {
    let f = rexctl::format::ic::IcFile::open(p).unwrap();
    f.meta()
        .pages
        .iter()
        .enumerate()
        .map(|(i, &pg)| (pg, f.page(i).unwrap().to_vec()))
        .collect()
}

/// The controller's due rule, recomputed from the files: at least [chi]
/// pending checkpoints, chi = f(IC, CR) on the default table.
fn expected_due(l1: &Path, l2: &Path) -> (bool, u64) {
    let idx = ChainIndex::load(&DirStore::create(l2).unwrap()).unwrap();
    let Some(newest) = idx.newest() else {
        return (
            L1Dir::scan(l1)
                .map(|d| !d.files.is_empty())
                .unwrap_or(false),
            0,
        );
    };
    let pending = L1Dir::scan_after(l1, Some(rexctl::l1::Covered::from(newest)))
        .unwrap()
        .files;
    let Some(latest) = pending.last() else {
        return (false, 0);
    };
    let ic = latest.data_bytes() as f64 / (newest.live_pages * u64::from(newest.page_size)) as f64;
    let chi = chi_int(IntervalTable::default().chi(ic, newest.compression_ratio));
    (pending.len() as u64 >= chi, chi)
}

#[test]
fn flush_pushes_exactly_when_the_controller_says() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    std::fs::create_dir_all(&l1).unwrap();
    let mut p = profile("balanced").unwrap();
    p.pages = 96;
    let mut w = Workload::new(p, 11).unwrap();
    let mut truth = BTreeMap::new();
    let (mut pushes, mut fulls, mut pruned_seen) = (0, 0, false);
    let mut bases_seen: Vec<u64> = Vec::new();
    for _ in 0..40 {
        let c = w.step();
        w.write(&c, &l1, 1_000_000_000 * c.seq).unwrap();
        truth.insert(c.seq, w.image().clone());
        let (due, chi) = expected_due(&l1, &l2);
        let before = ChainIndex::load(&DirStore::create(&l2).unwrap()).unwrap();
        let out = ok(&[
            "flush",
            "--l1",
            s(&l1),
            "--l2",
            s(&l2),
            "--max-chain-length",
            "3",
            "--json",
        ]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let after = ChainIndex::load(&DirStore::open(&l2).unwrap()).unwrap();
        let pushed = after.newest().map(|m| m.generation) != before.newest().map(|m| m.generation);
        assert_eq!(
            v["decision"]["due"].as_bool().unwrap(),
            due,
            "seq {}: decision; {out}",
            c.seq
        );
        assert_eq!(pushed, due, "seq {}: pushed exactly when due", c.seq);
        if before.newest().is_some() {
            assert_eq!(
                v["decision"]["chi_int"].as_u64().unwrap(),
                chi,
                "seq {}: [chi]",
                c.seq
            );
        }
        if pushed {
            pushes += 1;
            let m = after.newest().unwrap();
            let full = v["decision"]["full"].as_bool().unwrap();
            assert_eq!(
                m.kind == GenKind::Full,
                full,
                "seq {}: kind follows the decision",
                c.seq
            );
            // The chain never grows past max_chain_length = 3.
            let len = after
                .manifests
                .values()
                .filter(|x| x.chain_base == m.chain_base)
                .count();
            assert!(len <= 3, "chain of {len}");
            if let Some(prev) = before.newest() {
                let prev_len = before
                    .manifests
                    .values()
                    .filter(|x| x.chain_base == prev.chain_base)
                    .count();
                if prev_len == 3 {
                    assert!(
                        full,
                        "seq {}: a chain of 3 must be closed by a complete coalescence",
                        c.seq
                    );
                }
            }
            if full {
                fulls += 1;
                bases_seen.push(m.generation);
            }
            // Retention: at most 2 chains in L2, and an old chain disappears
            // only in the push whose full generation supersedes it.
            let bases: std::collections::BTreeSet<u64> =
                after.manifests.values().map(|x| x.chain_base).collect();
            assert!(bases.len() <= 2, "{bases:?}");
            let lost: Vec<u64> = before
                .manifests
                .keys()
                .filter(|g| !after.manifests.contains_key(g))
                .copied()
                .collect();
            if !lost.is_empty() {
                pruned_seen = true;
                assert!(full, "generations {lost:?} pruned by a Δ push");
                assert!(
                    after
                        .manifests
                        .keys()
                        .all(|g| *g > *lost.iter().max().unwrap()
                            || bases.contains(&after.manifests[g].chain_base))
                );
            }
        }
        assert_restores(d.path(), &l1, &l2, &truth, &format!("after seq {}", c.seq));
    }
    assert!(pushes >= 5, "{pushes} pushes");
    assert!(fulls >= 3, "{fulls} complete coalescences");
    assert!(pruned_seen, "retention never pruned");
    ok(&["verify", "--l2", s(&l2), "--l1", s(&l1)]);
}

#[test]
fn the_cost_rule_triggers_a_complete_coalescence() {
    // Push timings decide the rule: not while MPI tests load every core.
    let _one_at_a_time = crate::util::exclusive();
    // With a tiny MTBF, p is ~1 and the threshold (Psi - C) / delta - 1 is
    // small: the controller must close the chain by itself.
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    std::fs::create_dir_all(&l1).unwrap();
    let mut p = profile("small-inc").unwrap();
    p.pages = 64;
    let mut w = Workload::new(p, 5).unwrap();
    let mut saw = false;
    for _ in 0..40 {
        let c = w.step();
        w.write(&c, &l1, 1_000_000_000 * c.seq).unwrap();
        let out = ok(&[
            "flush",
            "--l1",
            s(&l1),
            "--l2",
            s(&l2),
            "--mtbf",
            "0.001",
            // The read rate as a setting, not measured from uploads to a
            // local directory (microseconds, as noisy as the machine's
            // load): delta is then the Δ's bytes at 0.1 MB/s.
            "--read-rate",
            "0.1",
            "--json",
        ]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let dec = &v["decision"];
        if dec["due"].as_bool().unwrap() && !dec["rule"].is_null() {
            let n = dec["n"].as_f64().unwrap();
            let th = dec["rule"]["threshold"].as_f64().unwrap();
            let reason = dec["full_reason"].as_str().unwrap_or("");
            assert_eq!(
                dec["full"].as_bool().unwrap(),
                n >= th || reason.contains("FULL") || reason.starts_with("bytes rule"),
                "{dec}"
            );
            saw |= n >= th;
        }
    }
    assert!(saw, "the cost rule never fired");
}

#[test]
fn dry_run_and_plan_change_nothing() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    ok(&["gen", s(&l1), "--pages", "32", "--count", "2"]);
    let out = ok(&["flush", "--l1", s(&l1), "--l2", s(&l2), "--dry-run"]);
    assert!(out.contains("decision=would-push"), "{out}");
    assert_eq!(
        std::fs::read_dir(&l1)
            .unwrap()
            .filter(|e| e
                .as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "rexic"))
            .count(),
        3
    );
    let plan = ok(&["plan", "--l1", s(&l1), "--l2", s(&l2)]);
    assert!(
        plan.contains("IC \\ CR") && plan.contains("[chi]"),
        "{plan}"
    );
    ok(&["flush", "--l1", s(&l1), "--l2", s(&l2)]);
    let plan: serde_json::Value =
        serde_json::from_str(&ok(&["plan", "--l1", s(&l1), "--l2", s(&l2), "--json"])).unwrap();
    assert_eq!(plan["table"]["chi"][0][0], 9.0);
}

#[test]
fn configuration_precedence_and_errors() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    ok(&["gen", s(&l1), "--pages", "16", "--count", "1"]);
    let cfg = d.path().join("job.toml");
    std::fs::write(
        &cfg,
        format!("l1 = {:?}\nl2 = {:?}\nmtbf_s = 5000.0\n", s(&l1), s(&l2)),
    )
    .unwrap();
    // The file alone is enough.
    ok(&["flush", "--config", s(&cfg), "--dry-run"]);
    // An environment variable beats the file, a flag beats the variable.
    let out = rexctl()
        .args(["plan", "--config", s(&cfg), "--json"])
        .env("REX_MTBF", "7")
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["decision"]["rule"].is_null() || v["decision"]["rule"]["m"] == 7.0);
    // Errors: exit 5, naming what is wrong.
    std::fs::write(&cfg, "l1 = \"x\"\nmtbf_seconds = 3\n").unwrap();
    let out = run(&["flush", "--config", s(&cfg)]);
    crate::util::assert_clean_failure(&out, 5, &["job.toml", "mtbf_seconds"]);
    let out = rexctl()
        .args(["flush", "--l1", s(&l1), "--l2", s(&l2)])
        .env("REX_MTBF", "soon")
        .output()
        .unwrap();
    // A variable that does not parse is a command-line error (2), named by
    // its flag, as clap reports it.
    crate::util::assert_clean_failure(&out, 2, &["soon", "--mtbf"]);
    let out = rexctl()
        .args(["flush"])
        .env_remove("REX_L1")
        .current_dir(d.path())
        .output()
        .unwrap();
    crate::util::assert_clean_failure(&out, 5, &["no L1 directory"]);
}

#[test]
fn concurrent_flushes_never_run_two_pushes() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    ok(&["gen", s(&l1), "--pages", "256", "--count", "12"]);
    let mut truth = BTreeMap::new();
    let f = d.path().join("truth.rexic");
    // The truth is the coalesced chain itself (independently tested).
    ok(&["coalesce", s(&l1), "--out", s(&f)]);
    truth.insert(12u64, read_image(&f));
    for round in 0..3 {
        let children: Vec<_> = (0..8)
            .map(|_| {
                rexctl()
                    .args([
                        "flush",
                        "--l1",
                        s(&l1),
                        "--l2",
                        s(&l2),
                        "--max-age",
                        "0.000001",
                        "--json",
                    ])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut pushed = 0;
        for c in children {
            let out = c.wait_with_output().unwrap();
            match out.status.code() {
                Some(0) => {
                    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                    if !v["push"].is_null() && !v["push"]["manifest"].is_null() {
                        pushed += 1;
                    }
                }
                Some(4) => {
                    let e = String::from_utf8_lossy(&out.stderr);
                    assert!(e.contains("busy") && e.contains("pid "), "{e}");
                }
                other => panic!(
                    "flush exited {other:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                ),
            }
        }
        assert!(pushed <= 1, "round {round}: {pushed} pushes");
        if round == 0 {
            assert_eq!(pushed, 1, "the first round has a batch to push");
        }
    }
    ok(&["verify", "--l2", s(&l2), "--l1", s(&l1)]);
    let out = d.path().join("r.rexic");
    ok(&["restore", "-f", "--l2", s(&l2), "--out", s(&out)]);
    assert_eq!(read_image(&out), truth[&12]);
}

#[test]
fn a_flush_killed_at_any_file_operation_recovers() {
    let d = tempfile::tempdir().unwrap();
    let template = d.path().join("template");
    let (tl1, tl2) = (template.join("l1"), template.join("l2"));
    std::fs::create_dir_all(&tl1).unwrap();
    let mut p = profile("churn").unwrap();
    p.pages = 48;
    let mut w = Workload::new(p, 2).unwrap();
    let mut truth = BTreeMap::new();
    for _ in 0..4 {
        let c = w.step();
        w.write(&c, &tl1, c.seq).unwrap();
        truth.insert(c.seq, w.image().clone());
    }
    ok(&["flush", "--l1", s(&tl1), "--l2", s(&tl2)]);
    for _ in 0..4 {
        let c = w.step();
        w.write(&c, &tl1, c.seq).unwrap();
        truth.insert(c.seq, w.image().clone());
    }
    let (old_seq, new_seq) = (3u64, 7u64);
    let mut n = 1;
    loop {
        let case = d.path().join(format!("case{n}"));
        copy_tree(&template, &case);
        let (l1, l2) = (case.join("l1"), case.join("l2"));
        let out = rexctl()
            .args([
                "flush",
                "--l1",
                s(&l1),
                "--l2",
                s(&l2),
                "--max-age",
                "0.000001",
            ])
            .env("REX_FAILPOINT", n.to_string())
            .output()
            .unwrap();
        let finished = out.status.success();
        // Whatever the crash point: L2 restores the old or the new state,
        // L1 + L2 the newest.
        let r = case.join("r.rexic");
        ok(&["restore", "-f", "--l2", s(&l2), "--out", s(&r)]);
        let got = read_image(&r);
        assert!(
            got == truth[&old_seq] || got == truth[&new_seq],
            "failpoint {n}: L2 restore is neither state"
        );
        ok(&[
            "restore",
            "-f",
            "--l2",
            s(&l2),
            "--l1",
            s(&l1),
            "--out",
            s(&r),
        ]);
        assert!(
            read_image(&r) == truth[&new_seq],
            "failpoint {n}: L1+L2 restore"
        );
        // The next flush recovers and pushes.
        ok(&[
            "flush",
            "--l1",
            s(&l1),
            "--l2",
            s(&l2),
            "--max-age",
            "0.000001",
        ]);
        ok(&["restore", "-f", "--l2", s(&l2), "--out", s(&r)]);
        assert!(
            read_image(&r) == truth[&new_seq],
            "failpoint {n}: after recovery"
        );
        ok(&["verify", "--l2", s(&l2), "--l1", s(&l1)]);
        let leftovers: Vec<_> = std::fs::read_dir(&l1)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".rexic") || n.contains(".tmp-"))
            .collect();
        assert!(
            leftovers.is_empty(),
            "failpoint {n}: left in L1: {leftovers:?}"
        );
        std::fs::remove_dir_all(&case).unwrap();
        if finished {
            break;
        }
        n += 1;
        assert!(n < 500, "the flush never finished");
    }
    assert!(n > 10, "only {n} failpoints were crossed");
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

/// The restore-cost term reads L2 at the rate the uploads moved bytes
/// (`link_s`), not at the push's wait for them: the RPS streams to L2
/// beside the deduplication, so that wait is often a millisecond, which
/// made the read rate tens of GB/s and `delta` zero.
#[test]
fn the_read_rate_is_the_l2_bytes_over_the_link_time() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    std::fs::create_dir_all(&l1).unwrap();
    let mut p = profile("balanced").unwrap();
    p.pages = 256;
    let mut w = Workload::new(p, 3).unwrap();
    for _ in 0..3 {
        for _ in 0..3 {
            let c = w.step();
            w.write(&c, &l1, 1_000_000_000 * c.seq).unwrap();
        }
        ok(&["push-l2", "--l1", s(&l1), "--l2", s(&l2)]);
    }
    let c = w.step();
    w.write(&c, &l1, 1_000_000_000 * c.seq).unwrap();
    let index = ChainIndex::load(&DirStore::open(&l2).unwrap()).unwrap();
    let ms: Vec<_> = index.manifests.values().collect();
    assert!(
        ms.iter().all(|m| m.timings.link_s > 0.0),
        "no link time recorded"
    );
    let mean = |v: Vec<f64>| v.iter().sum::<f64>() / v.len() as f64;
    let rate = mean(
        ms.iter()
            .map(|m| m.bytes_out as f64 / m.timings.link_s)
            .collect(),
    );
    let delta_bytes = mean(
        ms.iter()
            .filter(|m| m.kind == GenKind::Delta)
            .map(|m| m.bytes_out as f64)
            .collect(),
    );
    let out = ok(&["plan", "--l1", s(&l1), "--l2", s(&l2), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let got = v["decision"]["rule"]["delta"]
        .as_f64()
        .unwrap_or_else(|| panic!("no cost rule in {v}"));
    let want = delta_bytes / rate;
    assert!(
        (got - want).abs() <= 1e-9 * want.max(1e-12),
        "delta {got}, want {want}"
    );
}

/// Writes checkpoint `seq` into `l1`: `pages` of the `n`-page image, each
/// with fresh bytes from `x` (a FULL one when `seq` is 0).
fn write_random(l1: &Path, seq: u64, pages: Vec<u64>, x: &mut u64) {
    let path = l1.join(format!("ckpt-{seq:08}.rexic"));
    let mut w = rexctl::format::ic::IcWriter::create(
        &path,
        4096,
        seq,
        seq == 0,
        seq * 1_000_000_000,
        pages.clone(),
        Vec::new(),
    )
    .unwrap();
    for _ in &pages {
        let page: Vec<u8> = (0..4096)
            .map(|_| {
                *x ^= *x << 13;
                *x ^= *x >> 7;
                *x ^= *x << 17;
                *x as u8
            })
            .collect();
        w.push_page(&page).unwrap();
    }
    w.finish().unwrap();
}

/// Beyond the paper's cost rule: where every page changes every interval,
/// a ΔRPS is as large as a full RPS while a restore must read the whole
/// chain, so the controller takes a complete coalescence; where a batch
/// dirties a tenth of the pages, it does not.
#[test]
fn the_bytes_rule_takes_a_full_rps_where_every_page_changes() {
    const N: u64 = 256;
    for (share, full_expected) in [(1, true), (10, false)] {
        let d = tempfile::tempdir().unwrap();
        let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
        std::fs::create_dir_all(&l1).unwrap();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        write_random(&l1, 0, (0..N).collect(), &mut x);
        ok(&["push-l2", "--l1", s(&l1), "--l2", s(&l2)]);
        for batch in [1..=4, 5..=8] {
            for seq in batch {
                // Every page, or every tenth (a different tenth each time).
                let pages = (0..N).filter(|p| (p + seq) % share == 0).collect();
                write_random(&l1, seq, pages, &mut x);
            }
            if l2.join("g00000002.manifest").exists() {
                break;
            }
            ok(&["push-l2", "--l1", s(&l1), "--l2", s(&l2)]);
        }
        // Random pages: a full RPS and a ΔRPS of every page are the same
        // bytes but for a few of metadata, either way: a margin of 5 %.
        let margin = ["--full-bytes-margin", "0.05"];
        let out = ok(&[
            &["flush", "-n", "--l1", s(&l1), "--l2", s(&l2), "--json"][..],
            &margin,
        ]
        .concat());
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let dec = &v["decision"];
        let b = &dec["bytes_rule"];
        let (full, delta) = (
            b["full_bytes"].as_f64().unwrap(),
            b["delta_bytes"].as_f64().unwrap(),
        );
        let reason = dec["full_reason"].as_str().unwrap_or("");
        if full_expected {
            assert!(dec["due"].as_bool().unwrap(), "{dec}");
            assert!(full <= delta * 1.05, "{dec}");
            assert!(dec["full"].as_bool().unwrap(), "{dec}");
            assert!(reason.starts_with("bytes rule"), "{dec}");
            // The flush itself does what it said, and the chain verifies.
            ok(&[&["flush", "--l1", s(&l1), "--l2", s(&l2)][..], &margin].concat());
            let index = ChainIndex::load(&DirStore::open(&l2).unwrap()).unwrap();
            assert_eq!(index.newest().unwrap().kind, GenKind::Full);
            ok(&["verify", "--l2", s(&l2)]);
        } else {
            // A union of four tenths: the ΔRPS predicted at about 0.4 of
            // the full one.
            assert!(full > delta * 1.5, "{dec}");
            assert!(!reason.starts_with("bytes rule"), "{dec}");
        }
    }
}

/// `max_chain_length` bounds the chains `push-l2` makes too, not only the
/// controller's (helper-48: `push-l2 --max-chain-length 2` grew a chain of
/// six generations).
#[test]
fn push_l2_keeps_to_the_maximum_chain_length() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    std::fs::create_dir_all(&l1).unwrap();
    let mut p = profile("balanced").unwrap();
    p.pages = 64;
    let mut w = Workload::new(p, 3).unwrap();
    let mut kinds = Vec::new();
    for _ in 0..5 {
        let c = w.step();
        w.write(&c, &l1, 1_000_000_000 * c.seq).unwrap();
        let out = ok(&[
            "push-l2",
            "--l1",
            s(&l1),
            "--l2",
            s(&l2),
            "--max-chain-length",
            "2",
            "--json",
        ]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        kinds.push(v["manifest"]["kind"].as_str().unwrap().to_string());
    }
    assert_eq!(kinds, ["full", "delta", "full", "delta", "full"]);
    ok(&["verify", "--l2", s(&l2)]);
}

/// A failed run logs its line too, on standard output beside the error
/// (decision=error, the exit code, the message), so that a cron or
/// journald log holds one line per run (helper-73: only the error text).
#[test]
fn a_failed_flush_logs_its_line() {
    let d = tempfile::tempdir().unwrap();
    let l1 = d.path().join("l1");
    crate::util::ok(&["gen", "--pages", "64", "--count", "1", s(&l1)]);
    let not_a_dir = d.path().join("file");
    std::fs::write(&not_a_dir, b"").unwrap();
    let out = crate::util::run(&["flush", "--l1", s(&l1), "--l2", s(&not_a_dir), "--job", "j"]);
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        crate::util::show(&["flush"], &out)
    );
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(
        line.contains(" flush job=j rank=0 decision=error exit=5 error=\"")
            && line.trim_end().ends_with('"')
            && line.lines().count() == 1,
        "{line}"
    );
}

/// After L2 is lost, a flush puts L1's copy back and says each recovery
/// once under -v (helper-73: every note came twice).
#[test]
fn a_flush_says_each_recovery_once() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    crate::util::ok(&["gen", "--pages", "64", "--count", "3", s(&l1)]);
    crate::util::ok(&["push-l2", "--l1", s(&l1), "--l2", s(&l2)]);
    std::fs::remove_dir_all(&l2).unwrap();
    std::fs::create_dir(&l2).unwrap();
    let out = crate::util::run(&["flush", "-v", "--l1", s(&l1), "--l2", s(&l2)]);
    let all = String::from_utf8_lossy(&out.stdout).into_owned() + &crate::util::stderr(&out);
    assert!(out.status.success(), "{all}");
    let notes: Vec<&str> = all
        .lines()
        .filter(|l| l.starts_with("recovered: "))
        .collect();
    assert!(!notes.is_empty(), "no recovery said: {all}");
    let mut once = notes.clone();
    once.sort();
    once.dedup();
    assert_eq!(once.len(), notes.len(), "{all}");
    crate::util::ok(&["verify", "--l1", s(&l1), "--l2", s(&l2)]);
}
