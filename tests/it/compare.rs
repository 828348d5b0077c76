//! `rexctl compare`: every counterpart restores the generator's image
//! exactly (all profiles, drops, churn, a FULL checkpoint mid-sequence),
//! the command's JSON, human and SVG output, the markdown summary, and a
//! wrong restore being caught.

use std::collections::BTreeMap;
use std::path::Path;

use rexctl::eval::compare::{
    self, Executor, InProcess, Input, Measured, NAMES, Options, Plan, PushOutcome, RestoreOutcome,
    Status, Workspace, XDELTA3_BUILT, report,
};
use rexctl::eval::workload::{Workload, profile, profiles};
use rexctl::format::ic::IcFile;

use crate::util::{ok, run};

type Image = BTreeMap<u64, Vec<u8>>;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// Writes a FULL checkpoint and `count` incrementals of `name` into `dir`;
/// the checkpoints with a seq in `full_at` are FULL too. Returns the final
/// image.
fn generate(dir: &Path, name: &str, pages: u64, count: u64, full_at: &[u64]) -> Image {
    std::fs::create_dir_all(dir).unwrap();
    let mut p = profile(name).unwrap();
    p.pages = pages;
    let mut w = Workload::new(p, 11).unwrap();
    for _ in 0..=count {
        let mut c = w.step();
        if full_at.contains(&c.seq) {
            c.full = true;
            c.pages = w.image().keys().copied().collect();
            c.drops.clear();
        }
        w.write(&c, dir, 1_000 + c.seq).unwrap();
    }
    w.image().clone()
}

/// Asserts that the REX-IC file at `path` holds exactly `want`.
fn assert_image(path: &Path, want: &Image, what: &str) {
    let f = IcFile::open(path).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(f.meta().is_full(), "{what}: not a FULL image");
    let keys: Vec<u64> = want.keys().copied().collect();
    assert!(f.meta().pages == keys, "{what}: page sets differ");
    for (pp, (p, data)) in want.iter().enumerate() {
        assert!(
            f.page(pp).unwrap() == data.as_slice(),
            "{what}: page {p:#x} differs"
        );
    }
}

fn built(name: &str) -> bool {
    XDELTA3_BUILT || !matches!(name, "IC-Xdelta3" | "AIC")
}

#[test]
fn every_counterpart_restores_exactly_on_every_profile() {
    for p in profiles() {
        for (batch, full_at) in [(None, vec![]), (Some(3), vec![5])] {
            let d = tempfile::tempdir().unwrap();
            let l1 = d.path().join("l1");
            let image = generate(&l1, p.name, 96, 9, &full_at);
            let input = Input::scan(&l1).unwrap();
            let ws = Workspace::new(d.path().join("ws")).unwrap();
            let opts = Options {
                batch,
                only: vec![],
                label: p.name.into(),
            };
            let mut exec = InProcess {
                input: &input,
                ws: &ws,
                runs: 1,
                push_runs: 1,
            };
            let r = compare::run(&input, &opts, &ws, &mut exec, &mut |_| {}).unwrap();
            let what = format!("{} batch {batch:?} full at {full_at:?}", p.name);
            assert_image(&ws.truth(), &image, &format!("{what}: truth"));
            assert_eq!(r.rows.len(), NAMES.len(), "{what}");
            for row in &r.rows {
                if built(&row.name) {
                    assert!(
                        row.ok,
                        "{what}: {}: {:?} {:?}",
                        row.name, row.status, row.note
                    );
                    assert_image(
                        &ws.restored(&row.name),
                        &image,
                        &format!("{what}: {}", row.name),
                    );
                } else {
                    assert_eq!(row.status, Status::NotBuilt, "{what}: {}", row.name);
                }
            }
            if batch.is_some() {
                assert_eq!(r.batches, vec![(0, 2), (3, 5), (6, 8), (9, 9)], "{what}");
            }
        }
    }
}

#[test]
fn compare_json_gives_every_counterpart_a_sane_row() {
    let d = tempfile::tempdir().unwrap();
    let l1 = d.path().join("l1");
    generate(&l1, "balanced", 128, 9, &[]);
    let before: Vec<(std::path::PathBuf, Vec<u8>)> = {
        let mut v: Vec<_> = std::fs::read_dir(&l1)
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                let b = std::fs::read(&p).unwrap();
                (p, b)
            })
            .collect();
        v.sort();
        v
    };
    let work = d.path().join("work");
    let out = ok(&[
        "compare",
        s(&l1),
        "--json",
        "--runs",
        "1",
        "--work-dir",
        s(&work),
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["files"], 10);
    assert_eq!(v["incrementals"], 9);
    assert_eq!(v["batching"], "controller");
    let batches = v["batches"].as_array().unwrap();
    assert_eq!(
        batches[0],
        serde_json::json!([0, 0]),
        "the FULL checkpoint goes to L2 at once"
    );
    assert_eq!(batches.last().unwrap()[1], 9, "the tail is pushed");
    let bytes_in = v["bytes_in"].as_f64().unwrap();
    assert!(v["rss_baseline"].as_u64().unwrap() > 0);
    let rows = v["rows"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, NAMES.to_vec());
    for r in rows {
        let name = r["name"].as_str().unwrap();
        if !built(name) {
            assert_eq!(r["status"], "not_built", "{r}");
            assert_eq!(r["ok"], false);
            assert!(
                r["note"].as_str().unwrap().contains("feature xdelta3"),
                "{r}"
            );
            continue;
        }
        assert_eq!(r["ok"], true, "{r}");
        assert_eq!(r["status"], "ok", "{r}");
        assert!(r["check"].as_str().unwrap().starts_with("equal"), "{r}");
        assert_eq!(
            r["l2_checkpoints"].as_u64().unwrap() as usize,
            batches.len(),
            "{r}"
        );
        let l2 = r["l2_bytes"].as_f64().unwrap();
        assert!(l2 > 0.0, "{r}");
        let cr = r["compression_ratio"].as_f64().unwrap();
        assert!((cr - bytes_in / l2).abs() < 1e-9 * cr.max(1.0), "{r}");
        assert!(cr > 0.3 && cr < 1000.0, "{r}");
        for k in [
            "compress_mbps",
            "decompress_mbps",
            "compress_s",
            "restore_s",
            "restore_vs_rex",
            "restore_1gbe_s",
            "restore_1gbe_vs_rex",
        ] {
            let x = r[k].as_f64().unwrap_or(-1.0);
            assert!(x > 0.0 && x.is_finite(), "{k} of {r}");
        }
        for k in ["peak_rss_push", "peak_rss_restore"] {
            let x = r[k].as_u64().unwrap_or(0);
            assert!(x > 1 << 20 && x < 1 << 34, "{k} of {r}");
        }
    }
    assert_eq!(rows[0]["restore_vs_rex"], 1.0);
    assert_eq!(rows[0]["restore_1gbe_vs_rex"], 1.0);
    for r in rows.iter().filter(|r| r["ok"] == true) {
        let read = r["restore_read_bytes"].as_u64().unwrap();
        assert!(read > 0 && read <= r["l2_bytes"].as_u64().unwrap(), "{r}");
    }
    assert_eq!(
        rows[1]["restore_read_bytes"], rows[1]["l2_bytes"],
        "IC reads every file"
    );
    assert_eq!(
        rows[1]["compression_ratio"], 1.0,
        "IC keeps the files as they are"
    );
    // The input is read only.
    for (p, b) in &before {
        assert_eq!(&std::fs::read(p).unwrap(), b, "{} changed", p.display());
    }
    assert_eq!(
        std::fs::read_dir(&l1).unwrap().count(),
        before.len(),
        "files added to L1DIR"
    );
    // The work directory given is kept, with each counterpart's L2.
    assert!(work.join("rex/l2").is_dir() && work.join("truth.rexic").is_file());
}

#[test]
fn compare_human_output_svg_and_fixed_batches() {
    let d = tempfile::tempdir().unwrap();
    let l1 = d.path().join("l1");
    generate(&l1, "churn", 64, 8, &[]);
    let svg = d.path().join("bars.svg");
    let out = ok(&[
        "compare",
        s(&l1),
        "--batch",
        "4",
        "--only",
        "ic,zstd",
        "--runs",
        "1",
        "--svg",
        s(&svg),
    ]);
    assert!(
        out.contains("3 L2 checkpoints at fixed batches of 4: seq 0-3, 4-7, 8"),
        "{out}"
    );
    assert!(
        out.contains("counterpart") && out.contains("compress MB/s"),
        "{out}"
    );
    for name in ["REX", "IC", "zstd"] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(name) && l.ends_with("ok")),
            "{name}:\n{out}"
        );
    }
    assert!(
        !out.contains("Libhash"),
        "--only limits the counterparts:\n{out}"
    );
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.starts_with("<svg") || text.starts_with("<?xml"),
        "{}",
        &text[..80.min(text.len())]
    );
    assert!(text.trim_end().ends_with("</svg>"));
    // One background rect per drawing plus three bars in each of four panels.
    assert!(text.matches("<rect").count() >= 12, "{text}");
    for label in [
        "REX", "IC", "zstd", "Fig. 10", "Fig. 17", "Fig. 18", "Fig. 19",
    ] {
        assert!(text.contains(label), "{label} missing from the SVG");
    }
}

#[test]
fn bad_compare_command_lines() {
    let d = tempfile::tempdir().unwrap();
    let l1 = d.path().join("l1");
    generate(&l1, "balanced", 32, 2, &[]);
    let out = run(&["compare", s(&l1), "--only", "gzip"]);
    crate::util::assert_clean_failure(&out, 5, &["unknown counterpart \"gzip\""]);
    let out = run(&["compare", s(&l1), "--batch", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let work = d.path().join("busy");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("x"), b"x").unwrap();
    let out = run(&["compare", s(&l1), "--work-dir", s(&work)]);
    crate::util::assert_clean_failure(&out, 5, &["--work-dir", "not empty"]);
    let empty = d.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let out = run(&["compare", s(&empty)]);
    crate::util::assert_clean_failure(&out, 3, &["no REX-IC checkpoint"]);
    // `analyze` says the same with the same status (helper-46: 5).
    let out = run(&["analyze", s(&empty)]);
    crate::util::assert_clean_failure(&out, 3, &["no checkpoint to analyze"]);
    let out = run(&["compare", s(&l1), "--work-dir", s(&work.join("x"))]);
    crate::util::assert_clean_failure(&out, 5, &["--work-dir", "not a directory"]);
}

#[test]
fn summarize_rewrites_only_the_marked_section() {
    let d = tempfile::tempdir().unwrap();
    let mut jsons = Vec::new();
    for name in ["balanced", "incompressible"] {
        let l1 = d.path().join(name);
        generate(&l1, name, 64, 8, &[]);
        let json = ok(&[
            "compare",
            s(&l1),
            "--json",
            "--runs",
            "1",
            "--only",
            "ic,zstd",
            "--label",
            name,
        ]);
        let p = d.path().join(format!("{name}.json"));
        std::fs::write(&p, json).unwrap();
        jsons.push(p);
    }
    let doc = d.path().join("PERFORMANCE.md");
    let before = format!(
        "# Performance\n\nHand-written, mentions `{}` in prose.\n\n{}\nstale\n{}\n\n## Later\nkept\n",
        report::BEGIN,
        report::BEGIN,
        report::END
    );
    std::fs::write(&doc, &before).unwrap();
    let args = |extra: &[&str]| {
        let mut v = vec!["compare", "--summarize", s(&jsons[0]), s(&jsons[1])];
        v.extend_from_slice(extra);
        ok(&v)
    };
    args(&[
        "--update",
        s(&doc),
        "--machine",
        "test box",
        "--command",
        "benches/compare.sh",
    ]);
    let after = std::fs::read_to_string(&doc).unwrap();
    let (head, rest) = after.split_once(&format!("\n{}\n", report::BEGIN)).unwrap();
    assert_eq!(
        head,
        before
            .split_once(&format!("\n{}\n", report::BEGIN))
            .unwrap()
            .0
    );
    let (section, tail) = rest.split_once(&format!("{}\n", report::END)).unwrap();
    assert_eq!(tail, "\n## Later\nkept\n");
    assert!(!section.contains("stale"));
    for needle in [
        "Machine: test box",
        "Reproduce: `benches/compare.sh`",
        "### Targets",
        "### Geometric means over 2 profiles",
        "#### balanced",
        "#### incompressible",
        "| **REX** |",
        "| IC-bzip2 | 0 |",
    ] {
        assert!(section.contains(needle), "{needle} missing:\n{section}");
    }
    // Printing instead of updating gives the same section.
    let printed = args(&["--machine", "test box", "--command", "benches/compare.sh"]);
    assert_eq!(printed, section);
    // Without markers, they are appended.
    let bare = d.path().join("bare.md");
    std::fs::write(&bare, "# Perf\n").unwrap();
    args(&["--update", s(&bare)]);
    let t = std::fs::read_to_string(&bare).unwrap();
    assert!(
        t.starts_with("# Perf\n\n<!-- compare:begin -->\n")
            && t.ends_with("<!-- compare:end -->\n"),
        "{t}"
    );
}

/// An executor whose IC restore is off by one bit (with a consistent CRC,
/// so only the comparison with the truth can tell).
struct OffByOneBit<'a>(InProcess<'a>);

impl Executor for OffByOneBit<'_> {
    fn push(&mut self, name: &str, plan: &Plan) -> rexctl::Result<Measured<PushOutcome>> {
        self.0.push(name, plan)
    }
    fn restore(&mut self, name: &str) -> rexctl::Result<Measured<RestoreOutcome>> {
        let r = self.0.restore(name)?;
        if name == "IC" {
            let p = self.0.ws.restored(name);
            let f = IcFile::open(&p).unwrap();
            let m = f.meta().clone();
            let mut pages: Vec<Vec<u8>> = (0..m.pages.len())
                .map(|pp| f.page(pp).unwrap().to_vec())
                .collect();
            drop(f);
            pages[m.pages.len() / 2][100] ^= 0x10;
            let refs: Vec<(u64, &[u8])> = m
                .pages
                .iter()
                .copied()
                .zip(pages.iter().map(|v| v.as_slice()))
                .collect();
            std::fs::remove_file(&p).unwrap();
            rexctl::format::ic::write_ic(&p, m.header.page_size, m.seq(), true, 0, &refs, &[])
                .unwrap();
        }
        Ok(r)
    }
    fn memory_method(&self) -> String {
        "none".into()
    }
}

#[test]
fn a_counterpart_that_restores_wrongly_is_a_failure() {
    let d = tempfile::tempdir().unwrap();
    let l1 = d.path().join("l1");
    generate(&l1, "small-inc", 64, 6, &[]);
    let input = Input::scan(&l1).unwrap();
    let ws = Workspace::new(d.path().join("ws")).unwrap();
    let opts = Options {
        batch: None,
        only: vec!["IC".into()],
        label: "t".into(),
    };
    let mut exec = OffByOneBit(InProcess {
        input: &input,
        ws: &ws,
        runs: 1,
        push_runs: 1,
    });
    let r = compare::run(&input, &opts, &ws, &mut exec, &mut |_| {}).unwrap();
    let ic = r.row("IC").unwrap();
    assert_eq!(ic.status, Status::Failed);
    assert!(
        ic.check
            .as_deref()
            .unwrap()
            .contains("differs from byte 100"),
        "{ic:?}"
    );
    assert!(r.any_mismatch());
    assert!(r.row("REX").unwrap().ok);
    // And the checker itself, on the files.
    let diff = compare::check(&ws.restored("IC"), &ws.truth()).unwrap();
    assert!(!diff.is_equal());
}
