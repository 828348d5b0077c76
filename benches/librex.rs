//! librex: what a job pays for checkpointing itself, side by side in one
//! run (ratios, because machines are noisy).
//!
//! * **Write fault**: the cost of the first write to a protected page, per
//!   tracker (mprotect + SIGSEGV as the paper's AIC; userfaultfd
//!   write-protect where the kernel offers it, resolved by the kernel itself
//!   and by the library's fault thread), against the same writes to
//!   unprotected memory.
//! * **Job stop per checkpoint**: the time `checkpoint()` keeps the job
//!   stopped (collect and copy the dirty pages; the file is written in the
//!   background), for 2 %, 10 % and 100 % of 64 MiB dirty, against a plain
//!   copy of the whole 64 MiB (what a full-copy library stops for); and for
//!   the same memory registered whole (`REX_WHOLE`: no tracking, every page
//!   copied at every checkpoint).
//! * **Heat stencil slowdown**: a 2-D Jacobi stencil on a 1024 x 1024 grid
//!   (2 x 8 MiB), run without checkpointing, and checkpointing every N steps
//!   with the background L1 writer and L2 thread (pushes to a local
//!   directory), with the default tracker (`auto`: userfaultfd resolved by
//!   the kernel where it can), the paper's (mprotect), and the grids
//!   registered whole. The paper reports under 3 % with a dedicated L2
//!   thread.
//!
//! Run: `cargo bench --bench librex` (`REX_BENCH_DIR` picks the directory of
//! L1 and L2, default the system's temporary directory). The figures are
//! recorded in docs/PERFORMANCE.md.

use std::time::{Duration, Instant};

use rexctl::control::config::{Config, ConfigLayer, TrackerChoice};
use rexctl::job::Rex;
use rexctl::job::tracker::{
    MprotectTracker, Range, Tracker, map_anonymous, page_size, unmap_anonymous,
};
use rexctl::job::uffd::{UffdMode, UffdTracker};

fn map(len: usize) -> usize {
    map_anonymous(len).unwrap()
}

fn unmap(p: usize, len: usize) {
    // SAFETY: a mapping made by `map`, no longer used.
    unsafe { unmap_anonymous(p, len) };
}

fn touch_all(p: usize, pages: usize, v: u8) -> Duration {
    let ps = page_size();
    let t = Instant::now();
    for i in 0..pages {
        // SAFETY: inside the mapping.
        unsafe { std::ptr::write_volatile((p + i * ps) as *mut u8, v) };
    }
    t.elapsed()
}

/// ns per first write to a protected page, and per write to a writable one.
fn fault_cost(t: &dyn Tracker, pages: usize, rounds: usize) -> (f64, f64) {
    let ps = page_size();
    let p = map(pages * ps);
    touch_all(p, pages, 1); // populate
    let r = t.track(Range::new(p, pages)).unwrap();
    let mut out = Vec::new();
    let (mut faulting, mut plain) = (Duration::ZERO, Duration::ZERO);
    for k in 0..rounds {
        out.clear();
        t.collect(r, &mut out).unwrap(); // protect all
        faulting += touch_all(p, pages, k as u8);
        plain += touch_all(p, pages, k as u8 + 1);
    }
    t.untrack(r).unwrap();
    unmap(p, pages * ps);
    let n = (pages * rounds) as f64;
    (
        faulting.as_secs_f64() * 1e9 / n,
        plain.as_secs_f64() * 1e9 / n,
    )
}

fn config(dir: &std::path::Path, tracker: TrackerChoice, l2_thread: bool) -> Config {
    Config::resolve(
        ConfigLayer {
            l1: Some(dir.join("l1")),
            l2: Some(dir.join("l2")),
            tracker: Some(tracker),
            l2_thread: Some(l2_thread),
            ..Default::default()
        },
        Vec::new(),
    )
    .unwrap()
}

fn bench_dir() -> tempfile::TempDir {
    match std::env::var_os("REX_BENCH_DIR") {
        Some(d) => tempfile::tempdir_in(d).unwrap(),
        None => tempfile::tempdir().unwrap(),
    }
}

/// How the bench's memory is registered: tracked by a tracker, or carried
/// whole by every checkpoint (`REX_WHOLE`).
#[derive(Clone, Copy, Debug)]
enum Watch {
    Tracked(TrackerChoice),
    Whole,
}

impl Watch {
    fn name(self) -> String {
        match self {
            Watch::Tracked(t) => format!("{t:?}").to_lowercase(),
            Watch::Whole => "whole".into(),
        }
    }

    /// `n` bytes registered as region `id` this way (never freed: the
    /// bench's process ends soon).
    fn alloc(self, rex: &mut Rex, id: u32, n: usize) -> *mut u8 {
        match self {
            Watch::Tracked(_) => rex.alloc(id, n).unwrap(),
            Watch::Whole => {
                let p = map(n) as *mut u8;
                // SAFETY: a fresh mapping of `n` bytes, never unmapped.
                unsafe { rex.protect_whole(id, p, n) }.unwrap();
                p
            }
        }
    }

    fn tracker(self) -> TrackerChoice {
        match self {
            Watch::Tracked(t) => t,
            Watch::Whole => TrackerChoice::Auto,
        }
    }
}

/// Median job stop (seconds) of `checkpoint()` with `share` of 64 MiB
/// dirty, and of a plain copy of the whole 64 MiB.
fn stop_times(watch: Watch, share: f64) -> (f64, f64) {
    let d = bench_dir();
    let mut rex = Rex::with_config(config(d.path(), watch.tracker(), false)).unwrap();
    let n = 64 << 20;
    let ps = page_size();
    let p = watch.alloc(&mut rex, 0, n);
    // SAFETY: `n` bytes from rex.alloc.
    let buf = unsafe { std::slice::from_raw_parts_mut(p, n) };
    rex.checkpoint().unwrap(); // the FULL one
    rex.checkpoint_wait().unwrap();
    let pages = n / ps;
    let every = ((1.0 / share).round() as usize).max(1);
    let mut stops = Vec::new();
    let mut copies = Vec::new();
    let mut copy = vec![0u8; n];
    for k in 0..7u8 {
        for i in (0..pages).step_by(every) {
            buf[i * ps + 3] = k;
        }
        let rep = rex.checkpoint().unwrap();
        stops.push(rep.stop_s);
        rex.checkpoint_wait().unwrap();
        let t = Instant::now();
        copy.copy_from_slice(buf);
        copies.push(t.elapsed().as_secs_f64());
        std::hint::black_box(&copy);
    }
    rex.finalize().unwrap();
    stops.sort_by(f64::total_cmp);
    copies.sort_by(f64::total_cmp);
    (stops[stops.len() / 2], copies[copies.len() / 2])
}

/// Seconds for `steps` Jacobi steps on an `n` x `n` grid, checkpointing
/// every `every` steps (never with `None`).
fn heat(n: usize, steps: usize, ckpt: Option<(usize, Watch)>) -> (f64, u64, u64) {
    let d = bench_dir();
    let watch = ckpt.map_or(Watch::Tracked(TrackerChoice::Mprotect), |c| c.1);
    let mut rex = Rex::with_config(config(d.path(), watch.tracker(), true)).unwrap();
    let bytes = n * n * 8;
    let a = watch.alloc(&mut rex, 1, bytes) as *mut f64;
    let b = watch.alloc(&mut rex, 2, bytes) as *mut f64;
    // SAFETY: two grids of n*n doubles from rex.alloc.
    let (ga, gb) = unsafe {
        (
            std::slice::from_raw_parts_mut(a, n * n),
            std::slice::from_raw_parts_mut(b, n * n),
        )
    };
    for g in [&mut *ga, &mut *gb] {
        g[..n].fill(100.0);
    }
    let faults0 = rex.faults();
    let t = Instant::now();
    let (mut cur, mut next) = (ga, gb);
    for s in 0..steps {
        for i in 1..n - 1 {
            for j in 1..n - 1 {
                next[i * n + j] = 0.25
                    * (cur[(i - 1) * n + j]
                        + cur[(i + 1) * n + j]
                        + cur[i * n + j - 1]
                        + cur[i * n + j + 1]);
            }
        }
        std::mem::swap(&mut cur, &mut next);
        if let Some((every, _)) = ckpt
            && (s + 1) % every == 0
        {
            rex.checkpoint().unwrap();
        }
    }
    let secs = t.elapsed().as_secs_f64();
    std::hint::black_box(&cur[n + 1]);
    rex.checkpoint_wait().unwrap();
    let pushes = rex.l2_pushes();
    let faults = rex.faults() - faults0;
    rex.finalize().unwrap();
    (secs, pushes, faults)
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs it once
    // quickly (smaller sizes).
    let quick = !std::env::args().any(|a| a == "--bench");
    let mut trackers: Vec<(String, Box<dyn Tracker>)> =
        vec![("mprotect".into(), Box::new(MprotectTracker::new().unwrap()))];
    for mode in [UffdMode::Async, UffdMode::Thread] {
        let name = format!("uffd {}", format!("{mode:?}").to_lowercase());
        match UffdTracker::with_mode(mode) {
            Ok(t) => trackers.push((name, Box::new(t))),
            Err(e) => println!("{name} unavailable here: {e}"),
        }
    }

    println!("\n== write fault (first write to a protected page), 16384 pages x 5 rounds");
    println!(
        "{:<12} {:>14} {:>14} {:>8}",
        "tracker", "ns/fault", "ns/plain write", "ratio"
    );
    for (name, t) in &trackers {
        let (f, p) = fault_cost(t.as_ref(), if quick { 512 } else { 16384 }, 5);
        println!(
            "{:<12} {:>14.0} {:>14.1} {:>8.0}",
            name,
            f,
            p,
            f / p.max(0.01)
        );
    }
    drop(trackers);

    if quick {
        let (s, c) = stop_times(Watch::Tracked(TrackerChoice::Mprotect), 0.1);
        println!("quick run: stop {s:.4}s, copy {c:.4}s");
        return;
    }
    println!("\n== job stop per checkpoint, 64 MiB registered (median of 7)");
    println!(
        "{:<12} {:>7} {:>10} {:>14} {:>8}",
        "tracker", "dirty", "stop ms", "full copy ms", "ratio"
    );
    // The default (userfaultfd resolved by the kernel where it can) and
    // the paper's.
    // And memory carried whole (REX_WHOLE): every page every time.
    for w in [
        Watch::Tracked(TrackerChoice::Auto),
        Watch::Tracked(TrackerChoice::Mprotect),
        Watch::Whole,
    ] {
        for share in [0.02, 0.1, 1.0] {
            let (s, c) = stop_times(w, share);
            println!(
                "{:<12} {:>6.0}% {:>10.2} {:>14.2} {:>8.2}",
                w.name(),
                share * 100.0,
                s * 1e3,
                c * 1e3,
                s / c
            );
        }
    }

    println!("\n== heat stencil 1024 x 1024 (16 MiB), 400 steps");
    let (base, _, _) = heat(1024, 400, None);
    println!(
        "{:<34} {:>8} {:>9} {:>7} {:>9}",
        "run", "seconds", "slowdown", "pushes", "faults"
    );
    println!(
        "{:<34} {:>8.3} {:>9} {:>7} {:>9}",
        "no checkpointing", base, "-", 0, 0
    );
    for w in [
        Watch::Tracked(TrackerChoice::Auto),
        Watch::Tracked(TrackerChoice::Mprotect),
        Watch::Whole,
    ] {
        for every in [100, 50, 20] {
            let (s, pushes, faults) = heat(1024, 400, Some((every, w)));
            println!(
                "{:<34} {:>8.3} {:>8.1}% {:>7} {:>9}",
                format!("{} every {every} steps", w.name()),
                s,
                (s / base - 1.0) * 100.0,
                pushes,
                faults
            );
        }
    }
}
