//! Real-memory benchmark: rexctl on checkpoints captured from real
//! programs, not on the generator's data.
//!
//! For each program of `rexctl::eval::capture::programs` that is installed
//! (`python3` updating a 32 MiB array, `xz -9` compressing text, `sqlite3`
//! updating an in-memory table; a missing one is skipped with a note), the
//! setup captures 9 checkpoints, 0.4 s apart, into a temporary L1 directory
//! (on `/dev/shm` when it exists), with a FULL copy of the last stop. Then:
//!
//! * `real-<program>/push`: the pipeline as a job runs it: the FULL
//!   checkpoint pushed alone, then two batches of four incrementals
//!   (coalesce, deduplicate, publish to L1 and L2), into fresh directories;
//!   throughput is the IC files' bytes.
//! * `real-<program>/restore`: `restore --l2` of the last generation to a
//!   REX-IC file (checked once against the FULL copy, byte for byte);
//!   throughput is the image's bytes.
//!
//! And `capture-stop`: the stop time of an incremental checkpoint (what the
//! job pays) of a Python process with a 256 MiB footprint that rewrites
//! about 1 MiB every 10 ms, with one reading thread and with two; measured
//! with the capture's own stop clock (stop request to resume), so the IC
//! file's write, which happens after the resume, is not counted.
//!
//! Run: `cargo bench --bench real_memory` (`REX_BENCH_PROGRAMS=xz,sqlite`
//! limits the programs). A table of MB/s, compression ratios and stop
//! times follows criterion's output.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, Throughput};
use rexctl::eval::capture::programs::{Program, find_on_path};
use rexctl::eval::capture::{Capture, CaptureOptions, DirtyMode, Step};
use rexctl::eval::image::compare_ic_files;
use rexctl::format::ic::IcMeta;
use rexctl::l1::L1Dir;
use rexctl::l2::push::{Job, PushOptions, push_l2};
use rexctl::l2::restore::{RestoreOptions, restore_l2};
use rexctl::store::DirStore;

const CHECKPOINTS: u64 = 9;
const BATCH: usize = 4;

/// Lines of the final summary.
static SUMMARY: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

struct Fixture {
    tmp: tempfile::TempDir,
    /// The captured IC files, seq order.
    ics: Vec<IcMeta>,
    /// The pushed chain.
    l2: PathBuf,
    /// Bytes of the IC files.
    ic_bytes: u64,
    /// Bytes of the image at the last checkpoint.
    image_bytes: u64,
}

/// Pushes `ics` into fresh `l1`, `l2`: the FULL one alone, then batches.
fn push_all(ics: &[IcMeta], l1: &Path, l2: &Path) -> Vec<rexctl::format::manifest::Manifest> {
    std::fs::create_dir_all(l1).unwrap();
    let job = Job::open(l1, Box::new(DirStore::create(l2).unwrap())).unwrap();
    let mut groups: Vec<&[IcMeta]> = vec![&ics[..1]];
    groups.extend(ics[1..].chunks(BATCH));
    let mut out = Vec::new();
    for g in groups {
        for m in g {
            std::fs::hard_link(&m.path, l1.join(m.path.file_name().unwrap())).unwrap();
        }
        out.push(
            push_l2(&job, &PushOptions::default())
                .unwrap()
                .manifest
                .unwrap(),
        );
    }
    out
}

fn fixture(p: Program) -> Fixture {
    let tmp = scratch();
    let (ics_dir, full) = (tmp.path().join("ics"), tmp.path().join("full.rexic"));
    let r = p
        .capture(
            &tmp.path().join("work"),
            &ics_dir,
            Duration::from_millis(400),
            CHECKPOINTS,
            Some(full.clone()),
        )
        .unwrap();
    assert_eq!(
        r.run.checkpoints.len() as u64,
        CHECKPOINTS,
        "{} ended early",
        p.name()
    );
    let ics = L1Dir::scan(&ics_dir).unwrap().files;
    let l2 = tmp.path().join("l2");
    let ms = push_all(&ics, &tmp.path().join("l1"), &l2);
    let out = tmp.path().join("restored.rexic");
    let rr = restore_l2(
        &DirStore::open(&l2).unwrap(),
        &RestoreOptions::default(),
        &out,
    )
    .unwrap();
    let diff = compare_ic_files(&out, &full).unwrap();
    assert!(
        diff.is_equal(),
        "{}: restore differs from the FULL capture: {diff}",
        p.name()
    );
    let ic_bytes: u64 = ics.iter().map(|m| m.layout.file_len).sum();
    let bytes_out: u64 = ms.iter().map(|m| m.bytes_out).sum();
    let dedup_s: f64 = ms
        .iter()
        .map(|m| m.timings.coalesce_s + m.timings.dedup_s)
        .sum();
    let delta: Vec<&rexctl::format::manifest::Manifest> =
        ms.iter().filter(|m| m.parent.is_some()).collect();
    let (din, dout) = delta
        .iter()
        .fold((0u64, 0u64), |a, m| (a.0 + m.bytes_in, a.1 + m.bytes_out));
    let stops: Vec<f64> = r
        .run
        .checkpoints
        .iter()
        .map(|c| c.stop.total_s * 1e3)
        .collect();
    SUMMARY.lock().unwrap().push(format!(
        "{:<13} FULL {:>6} pages, IC mean {:>5.1} % | {:>8.1} MB -> {:>7.1} MB, CR {:.2} (Δ {:.2}) | coalesce+dedup {:>6.0} MB/s | capture stop FULL {:.1} ms, incrementals mean {:.1} ms",
        p.name(),
        r.run.checkpoints[0].pages,
        100.0 * ics[1..].iter().map(|m| m.pages.len() as f64).sum::<f64>()
            / (ics.len() - 1) as f64
            / r.run.checkpoints.last().unwrap().live_pages as f64,
        ic_bytes as f64 / 1e6,
        bytes_out as f64 / 1e6,
        ic_bytes as f64 / bytes_out as f64,
        if dout > 0 { din as f64 / dout as f64 } else { 0.0 },
        ic_bytes as f64 / dedup_s / 1e6,
        stops[0],
        stops[1..].iter().sum::<f64>() / (stops.len() - 1) as f64,
    ));
    Fixture {
        ics,
        l2,
        ic_bytes,
        image_bytes: rr.bytes,
        tmp,
    }
}

fn pipeline_group(c: &mut Criterion, p: Program, fx: &Fixture) {
    let mut g = c.benchmark_group(format!("real-{}", p.name()));
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::BytesDecimal(fx.ic_bytes));
    g.bench_function("push", |b| {
        b.iter_batched(
            || tempfile::tempdir_in(fx.tmp.path()).unwrap(),
            |d| {
                black_box(push_all(
                    &fx.ics,
                    &d.path().join("l1"),
                    &d.path().join("l2"),
                ));
                d
            },
            BatchSize::PerIteration,
        )
    });
    g.throughput(Throughput::BytesDecimal(fx.image_bytes));
    let store = DirStore::open(&fx.l2).unwrap();
    let out = fx.tmp.path().join("bench-restore.rexic");
    g.bench_function("restore", |b| {
        b.iter(|| {
            black_box(
                restore_l2(&store, &RestoreOptions::default(), &out)
                    .unwrap()
                    .bytes,
            )
        })
    });
    g.finish();
}

/// A process with a 256 MiB footprint that rewrites ~1 MiB every 10 ms.
const BIG: &str = r#"
import time
buf = bytearray(256 << 20)
for i in range(0, len(buf), 4096):
    buf[i:i + 8] = i.to_bytes(8, "little")
print("ready", flush=True)
k = 0
while True:
    k += 1
    s = (k * 7919 * 4096) % (len(buf) - (1 << 20))
    buf[s:s + (1 << 20)] = bytes([k % 251]) * (1 << 20)
    time.sleep(0.01)
"#;

fn start_big(dir: &Path) -> Option<Child> {
    let py = find_on_path("python3")?;
    let script = dir.join("big.py");
    std::fs::write(&script, BIG).unwrap();
    let mut child = Command::new(py)
        .arg(script)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    Some(child)
}

fn stop_group(c: &mut Criterion) {
    let tmp = scratch();
    let Some(mut child) = start_big(tmp.path()) else {
        eprintln!("note: python3 is not installed; skipping capture-stop");
        return;
    };
    let mut g = c.benchmark_group("capture-stop");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(4));
    for threads in [1usize, 2] {
        let l1 = tmp.path().join(format!("l1-{threads}"));
        let opts = CaptureOptions {
            dirty: DirtyMode::Hash,
            threads,
            ..Default::default()
        };
        let mut cap = Capture::attach(child.id(), &l1, opts).unwrap();
        let Step::Taken(full) = cap.checkpoint().unwrap() else {
            panic!("exited")
        };
        let live = full.live_pages * u64::from(cap.page_size());
        std::fs::remove_file(&full.path).unwrap();
        let mut stops = Vec::new();
        g.throughput(Throughput::BytesDecimal(live));
        g.bench_function(format!("incremental-{threads}-thread"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    std::thread::sleep(Duration::from_millis(20));
                    let Step::Taken(r) = cap.checkpoint().unwrap() else {
                        panic!("exited")
                    };
                    std::fs::remove_file(&r.path).unwrap();
                    stops.push((r.stop.total_s, r.pages));
                    total += Duration::from_secs_f64(r.stop.total_s);
                }
                total
            })
        });
        let n = stops.len() as f64;
        let mean = stops.iter().map(|s| s.0).sum::<f64>() / n;
        let pages = stops.iter().map(|s| s.1 as f64).sum::<f64>() / n;
        SUMMARY.lock().unwrap().push(format!(
            "capture-stop  {threads} thread{}: {:.0} MiB live, {:.0} dirty pages per checkpoint: stop mean {:.1} ms ({:.0} MB/s of live memory)",
            if threads == 1 { "" } else { "s" },
            live as f64 / (1 << 20) as f64,
            pages,
            mean * 1e3,
            live as f64 / mean / 1e6
        ));
    }
    g.finish();
    let _ = child.kill();
    let _ = child.wait();
}

fn main() {
    let t0 = Instant::now();
    let mut c = Criterion::default().configure_from_args();
    let only = std::env::var("REX_BENCH_PROGRAMS").ok();
    for p in Program::ALL {
        if only
            .as_ref()
            .is_some_and(|o| !o.split(',').any(|n| n == p.name()))
        {
            continue;
        }
        if p.available().is_none() {
            eprintln!(
                "note: {} is not installed; skipping the {} workload",
                p.executable(),
                p.name()
            );
            continue;
        }
        let fx = fixture(p);
        pipeline_group(&mut c, p, &fx);
    }
    if only
        .as_ref()
        .is_none_or(|o| o.split(',').any(|n| n == "capture-stop"))
    {
        stop_group(&mut c);
    }
    c.final_summary();
    println!("\nreal memory ({:.0} s):", t0.elapsed().as_secs_f64());
    for l in SUMMARY.lock().unwrap().iter() {
        println!("  {l}");
    }
}
