//! Counterparts benchmark: each counterpart of `rexctl compare` (REX, IC,
//! IC-bzip2, IC-Xdelta3 and AIC with the `xdelta3` feature, Libhash, zstd)
//! writing its L2 checkpoints for a whole sequence (`push`, throughput: the
//! L1 bytes) and restoring the newest state from them (`restore`,
//! throughput: the image's bytes).
//!
//! The sequence is the `balanced` profile (override with `REX_BENCH_PROFILE`)
//! at 2048 pages of 4 KiB, a FULL checkpoint and 12 incrementals, batched
//! where REX's runtime controller puts the L2 checkpoints, in a temporary
//! directory on `/dev/shm` when it exists (so fsyncs cost nothing and the
//! figures are the algorithms'). Every restore is checked against the truth
//! once before it is measured.
//!
//! Run: `cargo bench --bench counterparts --features xdelta3` (`-- zstd` to
//! filter). Compare counterparts within one run; `benches/compare.sh` gives
//! the full table with memory and compression ratios.

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, Throughput};
use rexctl::eval::compare::{self, Input, NAMES, Plan, Workspace};
use rexctl::eval::workload::{Workload, profile};

const PAGES: u64 = 2048;
const CHECKPOINTS: u64 = 12;

fn main() {
    let root = Path::new("/dev/shm");
    let tmp = if root.is_dir() {
        tempfile::tempdir_in(root).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let name = std::env::var("REX_BENCH_PROFILE").unwrap_or_else(|_| "balanced".into());
    let l1 = tmp.path().join("l1");
    std::fs::create_dir_all(&l1).unwrap();
    let mut p = profile(&name).unwrap();
    p.pages = PAGES;
    p.checkpoints = CHECKPOINTS;
    let mut w = Workload::new(p, 1).unwrap();
    for _ in 0..=CHECKPOINTS {
        w.checkpoint(&l1).unwrap();
    }
    let input = Input::scan(&l1).unwrap();
    let ws = Workspace::new(tmp.path().join("ws")).unwrap();
    let rex = compare::push_stage(compare::REX, &input, &Plan::Controller, &ws, 1).unwrap();
    let plan = Plan::Replay {
        ends: rex.boundaries.clone(),
        full: rex.full.clone(),
    };
    let truth = compare::write_truth(&input, &rex.boundaries, &ws, true).unwrap();

    let mut c = Criterion::default().configure_from_args();
    for cp in NAMES {
        if compare::counterpart(cp).unwrap().unavailable().is_some() {
            eprintln!("{cp}: skipped, not built (enable feature xdelta3)");
            continue;
        }
        // Once, checked, so that the restore has its L2 data.
        compare::push_stage(cp, &input, &plan, &ws, 1).unwrap();
        compare::restore_stage(cp, &ws, 1).unwrap();
        let diff = compare::check(&ws.restored(cp), &ws.truth()).unwrap();
        assert!(diff.is_equal(), "{cp} restores wrongly: {diff}");

        let mut g = c.benchmark_group(format!("{name}/{cp}"));
        g.sample_size(10)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(5));
        g.throughput(Throughput::BytesDecimal(input.bytes_in));
        // Pushing again removes the previous L2 data first, so each
        // iteration writes the whole sequence's L2 checkpoints.
        let scratch = Workspace::new(tmp.path().join("scratch")).unwrap();
        std::fs::create_dir_all(tmp.path().join("scratch/fc")).unwrap();
        for k in 0..rex.boundaries.len() {
            std::fs::copy(ws.full_image(k), scratch.full_image(k)).unwrap();
        }
        g.bench_function("push", |b| {
            b.iter(|| {
                black_box(
                    compare::push_stage(cp, &input, &plan, &scratch, 1)
                        .unwrap()
                        .l2_bytes,
                )
            })
        });
        g.throughput(Throughput::BytesDecimal(truth.bytes));
        g.bench_function("restore", |b| {
            b.iter(|| black_box(compare::restore_stage(cp, &ws, 1).unwrap().image_bytes))
        });
        g.finish();
    }
    c.final_summary();
}
