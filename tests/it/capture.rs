//! `rexctl capture` and `rexctl analyze` on real processes: a Python child
//! with known memory contents, driven step by step through its standard
//! input, and real programs (python3, xz, sqlite3) captured while they run.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use rexctl::eval::capture::programs::{Program, find_on_path};
use rexctl::eval::capture::{Capture, CaptureOptions, CaptureState, Step};
use rexctl::eval::image::compare_ic_files;
use rexctl::format::ic::IcFile;
use rexctl::l1::L1Dir;
use rexctl::l1::coalesce::CList;
use rexctl::l2::push::{Job, PushOptions, push_l2};
use rexctl::l2::restore::{RestoreOptions, restore_l1_l2, restore_l2};
use rexctl::store::DirStore;

use crate::util::{assert_clean_failure, ok, rexctl};

/// A child that maps `N` pages, fills page `i` with `unit(0, i)` repeated,
/// prints the mapping's address, then obeys one command per line:
/// `w STEP FIRST COUNT` writes `unit(STEP, i)` into pages FIRST.., `d FIRST
/// COUNT` gives pages back (MADV_DONTNEED), `q` quits; each answers `ok`.
const CHILD: &str = r#"
import ctypes, mmap, sys
PS = mmap.PAGESIZE
N = int(sys.argv[1])
def page(step, i):
    return (b"REX step %04d page %08d ---\n" % (step, i)) * (PS // 32)
# Private: a capture takes the writable private mappings (Python's
# default for an anonymous map is MAP_SHARED).
flags = mmap.MAP_PRIVATE | getattr(mmap, "MAP_ANONYMOUS", 0x20)
m = mmap.mmap(-1, N * PS, flags=flags)
for i in range(N):
    m[i * PS:(i + 1) * PS] = page(0, i)
print(ctypes.addressof(ctypes.c_char.from_buffer(m)), flush=True)
for line in sys.stdin:
    f = line.split()
    if f[0] == "w":
        step, first, count = map(int, f[1:])
        for i in range(first, first + count):
            m[i * PS:(i + 1) * PS] = page(step, i)
    elif f[0] == "d":
        first, count = map(int, f[1:])
        m.madvise(mmap.MADV_DONTNEED, first * PS, count * PS)
    elif f[0] == "q":
        break
    print("ok", flush=True)
"#;

const PAGES: u64 = 2048;

fn page_size() -> u64 {
    rexctl::eval::capture::system_page_size() as u64
}

/// The bytes the child writes into page `i` at `step`.
fn expected(step: u64, i: u64) -> Vec<u8> {
    let unit = format!("REX step {step:04} page {i:08} ---\n");
    assert_eq!(unit.len(), 32);
    unit.repeat(page_size() as usize / 32).into_bytes()
}

fn python() -> Option<PathBuf> {
    let p = find_on_path("python3");
    if p.is_none() {
        eprintln!("note: python3 is not installed; skipping the capture test");
    }
    p
}

struct Kid {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// Page number of the mapping's first page.
    base: u64,
}

impl Kid {
    fn start(py: &Path, dir: &Path) -> Kid {
        let script = dir.join("child.py");
        std::fs::write(&script, CHILD).unwrap();
        let mut child = Command::new(py)
            .arg(&script)
            .arg(PAGES.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let addr: u64 = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("child said {line:?}"));
        assert_eq!(addr % page_size(), 0);
        Kid {
            child,
            stdin,
            stdout,
            base: addr / page_size(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn send(&mut self, cmd: &str) {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ok", "after {cmd}");
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn taken(step: Step) -> rexctl::eval::capture::CheckpointReport {
    match step {
        Step::Taken(r) => *r,
        Step::Exited => panic!("the child exited"),
    }
}

/// The page of `file` with page number `page`, if carried.
fn page_of(file: &IcFile, page: u64) -> Option<Vec<u8>> {
    let pp = file.meta().pages.binary_search(&page).ok()?;
    Some(file.page(pp).unwrap().to_vec())
}

#[test]
fn a_captured_chain_restores_to_a_full_capture_at_the_same_stop() {
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    let l1 = d.path().join("l1");
    let full = d.path().join("full.rexic");
    let mut kid = Kid::start(&py, d.path());
    let b = kid.base;
    let mut cap = Capture::attach(kid.pid(), &l1, CaptureOptions::default()).unwrap();
    assert!(cap.next_is_full());
    assert_eq!(cap.next_seq(), 0);

    let c0 = taken(cap.checkpoint().unwrap());
    assert!(c0.full);
    assert_eq!(c0.seq, 0);
    assert!(c0.pages >= PAGES, "{c0:?}");
    assert!(c0.stop.total_s > 0.0 && c0.stop.total_s < 5.0);
    let f0 = IcFile::open(&c0.path).unwrap();
    for i in [0, 1, 777, PAGES - 1] {
        assert_eq!(
            page_of(&f0, b + i).unwrap(),
            expected(0, i),
            "page {i} of the FULL checkpoint"
        );
    }

    kid.send("w 1 0 64");
    let c1 = taken(cap.checkpoint().unwrap());
    assert!(!c1.full);
    let m1 = IcFile::open(&c1.path).unwrap();
    let ours: Vec<u64> = m1
        .meta()
        .pages
        .iter()
        .copied()
        .filter(|p| (b..b + PAGES).contains(p))
        .collect();
    assert_eq!(
        ours,
        (b..b + 64).collect::<Vec<_>>(),
        "exactly the pages written"
    );
    assert_eq!(page_of(&m1, b + 5).unwrap(), expected(1, 5));
    // Everything else of the process is mostly unchanged: an incremental is
    // a small part of the footprint.
    assert!(c1.pages < c0.pages / 2, "{} of {}", c1.pages, c0.pages);

    kid.send("d 100 20");
    kid.send("w 2 32 64");
    let c2 = taken(cap.checkpoint_with_full_copy(&full).unwrap());
    let m2 = IcFile::open(&c2.path).unwrap();
    let dropped: u64 = m2
        .meta()
        .drops
        .iter()
        .map(|r| (r.first.max(b + 100)..r.end().min(b + 120)).count() as u64)
        .sum();
    assert_eq!(dropped, 20, "drops {:?}", m2.meta().drops);

    // The FULL copy holds the known contents...
    let f = IcFile::open(&full).unwrap();
    assert!(f.meta().is_full());
    assert_eq!(f.meta().seq(), 2);
    for i in 0..PAGES {
        let want = match i {
            32..96 => Some(expected(2, i)),
            0..32 => Some(expected(1, i)),
            100..120 => None,
            _ => Some(expected(0, i)),
        };
        assert_eq!(page_of(&f, b + i), want, "page {i}");
    }
    // ... and the chain rebuilds it byte for byte.
    let chain = L1Dir::scan(&l1).unwrap();
    assert_eq!(
        chain.files.iter().map(|m| m.seq()).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    let coalesced = d.path().join("coalesced.rexic");
    CList::build(&chain.files)
        .unwrap()
        .write_ic(&chain.files, &coalesced)
        .unwrap();
    let diff = compare_ic_files(&coalesced, &full).unwrap();
    assert!(diff.is_equal(), "{diff}");

    let state = CaptureState::load(&l1).unwrap().unwrap();
    assert_eq!(state.last_seq, 2);
    assert_eq!(state.process.pid, kid.pid());
    assert_eq!(state.entries.len() as u64, f.meta().pages.len() as u64);
}

#[test]
fn captured_checkpoints_push_and_restore_through_l2() {
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    let full = d.path().join("full.rexic");
    let mut kid = Kid::start(&py, d.path());
    let mut cap = Capture::attach(kid.pid(), &l1, CaptureOptions::default()).unwrap();
    let job = Job::open(&l1, Box::new(DirStore::create(&l2).unwrap())).unwrap();
    let opts = PushOptions::default();
    taken(cap.checkpoint().unwrap());
    push_l2(&job, &opts).unwrap();
    for (k, cmd) in ["w 1 0 300", "w 2 200 300", "d 600 100"].iter().enumerate() {
        kid.send(cmd);
        taken(cap.checkpoint().unwrap());
        if k == 1 {
            push_l2(&job, &opts).unwrap();
        }
    }
    kid.send("w 3 1000 10");
    taken(cap.checkpoint_with_full_copy(&full).unwrap());
    // L1 + L2 (transient fault): generations plus pending IC files.
    let out = d.path().join("restored-l1l2.rexic");
    restore_l1_l2(&job, &RestoreOptions::default(), &out).unwrap();
    let diff = compare_ic_files(&out, &full).unwrap();
    assert!(diff.is_equal(), "L1 + L2: {diff}");
    // L2 alone after the last push.
    let r = push_l2(&job, &opts).unwrap();
    assert!(r.manifest.unwrap().parent.is_some(), "a Δ generation");
    let out = d.path().join("restored-l2.rexic");
    restore_l2(job.l2.as_ref(), &RestoreOptions::default(), &out).unwrap();
    let diff = compare_ic_files(&out, &full).unwrap();
    assert!(diff.is_equal(), "L2: {diff}");
    // Everything was pushed, so L1 holds no IC file: a restarted capture
    // still continues the chain after the generations' last seq.
    assert!(L1Dir::scan(&l1).unwrap().files.is_empty());
    drop(cap);
    let cap = Capture::attach(kid.pid(), &l1, CaptureOptions::default()).unwrap();
    assert!(!cap.next_is_full(), "{}", cap.start_note());
    assert_eq!(cap.next_seq(), 5);
}

/// A push beside a live capture leaves the checkpoint it is writing alone
/// (helper-17's defect: a push's recovery removed the capture's temporary
/// file, whose rename then failed and ended the capture); once no producer
/// holds the L1 directory, a push removes such a file as stale.
#[test]
fn a_push_beside_a_live_capture_leaves_its_temporary_alone() {
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    let kid = Kid::start(&py, d.path());
    let mut cap = Capture::attach(kid.pid(), &l1, CaptureOptions::default()).unwrap();
    taken(cap.checkpoint().unwrap());
    let job = Job::open(&l1, Box::new(DirStore::create(&l2).unwrap())).unwrap();
    // The next checkpoint, being written, as the capture names it.
    let tmp = l1.join(format!(".ckpt-00000001.rexic.tmp-{}-0", std::process::id()));
    std::fs::write(&tmp, b"being written").unwrap();
    push_l2(&job, &PushOptions::default()).unwrap();
    assert!(tmp.exists(), "the push removed a live capture's temporary");
    drop(cap);
    let r = push_l2(&job, &PushOptions::default()).unwrap();
    assert!(!tmp.exists(), "a stale temporary stays: {:?}", r.recovered);
    // A capture that starts removes a crashed capture's temporary itself
    // (pushes during it must leave it, as above).
    std::fs::write(&tmp, b"left by a crash").unwrap();
    let cap = Capture::attach(kid.pid(), &l1, CaptureOptions::default()).unwrap();
    assert!(
        !tmp.exists(),
        "a new capture kept a crashed one's temporary"
    );
    drop(cap);
}

#[test]
fn a_restarted_capture_continues_the_chain_of_the_same_process_only() {
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    let l1 = d.path().join("l1");
    let full = d.path().join("full.rexic");
    let mut kid = Kid::start(&py, d.path());
    {
        let mut cap = Capture::attach(kid.pid(), &l1, CaptureOptions::default()).unwrap();
        taken(cap.checkpoint().unwrap());
    }
    kid.send("w 5 10 10");
    let mut cap = Capture::attach(kid.pid(), &l1, CaptureOptions::default()).unwrap();
    assert!(!cap.next_is_full(), "{}", cap.start_note());
    assert_eq!(cap.next_seq(), 1);
    assert!(
        cap.start_note().contains("continuing"),
        "{}",
        cap.start_note()
    );
    let c = taken(cap.checkpoint_with_full_copy(&full).unwrap());
    assert!(!c.full && c.pages < 1000, "{c:?}");
    let chain = L1Dir::scan(&l1).unwrap();
    let coalesced = d.path().join("coalesced.rexic");
    CList::build(&chain.files)
        .unwrap()
        .write_ic(&chain.files, &coalesced)
        .unwrap();
    assert!(compare_ic_files(&coalesced, &full).unwrap().is_equal());

    // Two captures never write one directory at once.
    let e = Capture::attach(kid.pid(), &l1, CaptureOptions::default()).unwrap_err();
    assert!(e.to_string().contains("another capture"), "{e}");
    assert_eq!(e.exit_code(), rexctl::error::exit::BUSY);
    drop(cap);

    // Another process: a new chain, FULL at the next seq.
    let other = Kid::start(&py, d.path());
    let mut cap = Capture::attach(other.pid(), &l1, CaptureOptions::default()).unwrap();
    assert!(cap.next_is_full());
    assert_eq!(cap.next_seq(), 2);
    assert!(
        cap.start_note().contains("another process"),
        "{}",
        cap.start_note()
    );
    let c = taken(cap.checkpoint().unwrap());
    assert!(c.full && c.seq == 2);
    let chain = L1Dir::scan(&l1).unwrap();
    assert_eq!(
        chain.files.len(),
        3,
        "a FULL may follow: the directory stays a valid chain"
    );
    // The restarted capture continued the run of seq 0 (its chain id); the
    // other process's FULL checkpoint started a run of its own.
    let runs: Vec<_> = chain.files.iter().map(|m| m.chain_id).collect();
    assert!(runs[0].is_some(), "capture writes REX-IC version 2");
    assert_eq!(runs[0], runs[1], "a restarted capture continues its run");
    assert_ne!(runs[1], runs[2], "another process starts a new run");
    // Each capture is an instance of its own (docs/FORMAT.md §2.11.2): the
    // restarted one continued the run under another instance id.
    let ids: Vec<_> = chain.files.iter().map(|m| m.instance).collect();
    assert!(ids.iter().all(Option::is_some), "{ids:?}");
    assert_ne!(ids[0], ids[1], "a restarted capture is a new instance");
    assert_ne!(ids[1], ids[2]);
    drop(cap);

    // --full starts a new chain even for the same process.
    let opts = CaptureOptions {
        full: true,
        ..Default::default()
    };
    let cap = Capture::attach(other.pid(), &l1, opts).unwrap();
    assert!(cap.next_is_full() && cap.next_seq() == 3);
}

#[test]
fn a_process_killed_during_a_checkpoint_leaves_the_chain_valid() {
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    let l1 = d.path().join("l1");
    let mut kid = Kid::start(&py, d.path());
    let mut cap = Capture::attach(kid.pid(), &l1, CaptureOptions::default()).unwrap();
    taken(cap.checkpoint().unwrap());
    kid.send("w 1 0 100");
    // SIGKILL while the process is stopped, before its memory is read.
    cap.set_after_stop_hook(Box::new(|pid| {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        std::thread::sleep(Duration::from_millis(50));
    }));
    assert!(matches!(cap.checkpoint().unwrap(), Step::Exited));
    assert!(
        matches!(cap.checkpoint().unwrap(), Step::Exited),
        "and it stays gone"
    );
    let mut names: Vec<String> = std::fs::read_dir(&l1)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            ".capture-state",
            ".capture.lock",
            ".rex.producer.lock",
            "ckpt-00000000.rexic"
        ],
        "nothing partial was published"
    );
    let chain = L1Dir::scan(&l1).unwrap();
    assert_eq!(chain.files.len(), 1);
    assert_eq!(CaptureState::load(&l1).unwrap().unwrap().last_seq, 0);
}

#[test]
fn attaching_to_a_missing_process_says_so() {
    let d = tempfile::tempdir().unwrap();
    let e =
        Capture::attach(999_999_999, d.path().join("l1"), CaptureOptions::default()).unwrap_err();
    assert!(e.to_string().contains("no such process"), "{e}");
    let out = rexctl()
        .args(["capture", "--l1"])
        .arg(d.path().join("l1"))
        .args(["--interval", "0.1", "--pid", "999999999"])
        .output()
        .unwrap();
    assert_clean_failure(&out, 1, &["no such process"]);
    // A program that ends before the first checkpoint: exit 1, nothing
    // captured (helper-72: exit 0); an L1 that is a file: exit 5.
    for json in [false, true] {
        let l1 = d.path().join(format!("early-{json}"));
        let mut c = rexctl();
        c.args(["capture", "--l1"])
            .arg(&l1)
            .args(["--interval", "2"]);
        if json {
            c.arg("--json");
        }
        let out = c.args(["--", "sleep", "0.1"]).output().unwrap();
        assert_clean_failure(&out, 1, &["exited before the first checkpoint"]);
    }
    let file = d.path().join("file");
    std::fs::write(&file, b"").unwrap();
    let out = rexctl()
        .args(["capture", "--l1"])
        .arg(&file)
        .args(["--interval", "1", "--", "sleep", "0.1"])
        .output()
        .unwrap();
    assert_clean_failure(&out, 5, &["not a directory"]);
}

#[test]
fn missing_permissions_are_explained() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("note: not root; the permission test needs to run rexctl as another user");
        return;
    }
    let Some(py) = python() else { return };
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let kid = Kid::start(&py, d.path());
    // nobody may not trace a root process.
    let out = rexctl()
        .args(["capture", "--l1"])
        .arg(d.path().join("l1"))
        .args([
            "--interval",
            "0.1",
            "--count",
            "1",
            "--pid",
            &kid.pid().to_string(),
        ])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert_clean_failure(&out, 1, &["CAP_SYS_PTRACE", "same user"]);
}

/// A script that writes memory for about `seconds`, then exits.
const BUSY: &str = r#"
import sys, time
end = time.monotonic() + float(sys.argv[1])
buf = bytearray(16 << 20)
k = 0
while time.monotonic() < end:
    k += 1
    s = (k * 1234567) % (len(buf) - 65536)
    buf[s:s + 65536] = bytes([k % 251]) * 65536
    time.sleep(0.002)
"#;

#[test]
fn the_cli_captures_a_command_and_analyzes_it() {
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    let l1 = d.path().join("l1");
    let script = d.path().join("busy.py");
    std::fs::write(&script, BUSY).unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let out = ok(&[
        "capture",
        "--l1",
        &s(&l1),
        "--interval",
        "0.2",
        "--count",
        "3",
        "--json",
        "--",
        &s(&py),
        &s(&script),
        "1.5",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["checkpoints"].as_array().unwrap().len(), 3, "{out}");
    assert_eq!(v["ended"], "count");
    assert_eq!(v["exit"], "exit 0", "rexctl waits for the program");
    assert_eq!(v["checkpoints"][0]["full"], true);
    assert!(v["stop"]["mean_s"].as_f64().unwrap() > 0.0);
    let chain = L1Dir::scan(&l1).unwrap();
    assert_eq!(chain.files.len(), 3);

    // Human output, and a program that exits before the count.
    let l1b = d.path().join("l1b");
    let human = ok(&[
        "capture",
        "--l1",
        &s(&l1b),
        "--interval",
        "0.2",
        "--count",
        "100",
        "--",
        &s(&py),
        &s(&script),
        "0.9",
    ]);
    assert!(human.contains("seq 0 FULL"), "{human}");
    assert!(human.contains("stopped"), "{human}");
    assert!(human.contains("exited"), "{human}");
    assert!(L1Dir::scan(&l1b).unwrap().files.len() >= 2, "{human}");

    let an = ok(&["analyze", &s(&l1), "--json", "--batch", "2"]);
    let a: serde_json::Value = serde_json::from_str(&an).unwrap();
    assert_eq!(a["checkpoints"], 3);
    assert!(
        a["predicted"]["compression_ratio"].as_f64().unwrap() > 0.0,
        "{an}"
    );
    let svg = d.path().join("figs.svg");
    let human = ok(&["analyze", &s(&l1), "--svg", &s(&svg)]);
    assert!(human.contains("Fig. 1"), "{human}");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.starts_with("<svg") && text.contains("Fig. 3"),
        "{}",
        &text[..200.min(text.len())]
    );
}

/// `capture --workload` runs a built-in real program, takes the checkpoints
/// asked for, kills the program and leaves nothing of it behind; without
/// `--count` (the program would run on) it is a usage error.
#[test]
fn the_cli_captures_a_named_workload_and_kills_it_after_the_count() {
    if Program::Sqlite.available().is_none() {
        eprintln!("note: sqlite3 is not installed; skipping");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let l1 = d.path().join("l1");
    let l1s = l1.to_str().unwrap();
    let out = ok(&[
        "capture",
        "--l1",
        l1s,
        "--interval",
        "0.2",
        "--count",
        "3",
        "--workload",
        "sqlite",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["checkpoints"].as_array().unwrap().len(), 3, "{out}");
    assert_eq!(v["ended"], "count");
    assert_eq!(v["exit"], "signal 9", "the program is killed: {out}");
    let pid = v["process"]["pid"]
        .as_u64()
        .expect("the report names the process");
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the workload {pid} is gone"
    );
    assert_eq!(L1Dir::scan(&l1).unwrap().files.len(), 3);
    let out = rexctl()
        .args([
            "capture",
            "--l1",
            l1s,
            "--interval",
            "0.2",
            "--workload",
            "xz",
        ])
        .output()
        .unwrap();
    assert_clean_failure(&out, 2, &["--count"]);
    let out = rexctl()
        .args([
            "capture",
            "--l1",
            l1s,
            "--interval",
            "0.2",
            "--count",
            "1",
            "--workload",
            "gzip",
        ])
        .output()
        .unwrap();
    assert_clean_failure(&out, 2, &["python-array", "xz", "sqlite"]);
}

/// Captures a real program, pushes the checkpoints to L2 in batches and
/// restores: the image must equal the FULL copy of the last stop.
fn real_program_round_trip(p: Program) {
    if p.available().is_none() {
        eprintln!(
            "note: {} is not installed; skipping the {} workload",
            p.executable(),
            p.name()
        );
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    let full = d.path().join("full.rexic");
    let r = p
        .capture(
            &d.path().join("scratch"),
            &l1,
            Duration::from_millis(300),
            5,
            Some(full.clone()),
        )
        .unwrap();
    assert_eq!(
        r.run.checkpoints.len(),
        5,
        "{} ended early: {:?}",
        p.name(),
        r.run.ended
    );
    let last = r.run.checkpoints.last().unwrap();
    eprintln!(
        "{}: FULL {} pages, incrementals {:?} pages, stops {:.1?} ms",
        p.name(),
        r.run.checkpoints[0].pages,
        r.run.checkpoints[1..]
            .iter()
            .map(|c| c.pages)
            .collect::<Vec<_>>(),
        r.run
            .checkpoints
            .iter()
            .map(|c| c.stop.total_s * 1e3)
            .collect::<Vec<_>>()
    );
    assert!(last.live_pages > 256, "{last:?}");

    // The analysis reads the chain before it is pushed.
    let a = rexctl::eval::analyze::analyze(&l1, &rexctl::eval::analyze::AnalyzeOptions::default())
        .unwrap();
    assert_eq!(a.checkpoints, 5);
    assert!(a.predicted.compression_ratio > 1.0, "{:?}", a.predicted);

    // Push: the FULL one alone, then the rest as one batch.
    let hold = d.path().join("hold");
    std::fs::create_dir_all(&hold).unwrap();
    for f in L1Dir::scan(&l1).unwrap().files.iter().skip(1) {
        std::fs::rename(&f.path, hold.join(f.path.file_name().unwrap())).unwrap();
    }
    let job = Job::open(&l1, Box::new(DirStore::create(&l2).unwrap())).unwrap();
    push_l2(&job, &PushOptions::default()).unwrap();
    for e in std::fs::read_dir(&hold).unwrap() {
        let e = e.unwrap();
        std::fs::rename(e.path(), l1.join(e.file_name())).unwrap();
    }
    let r = push_l2(&job, &PushOptions::default()).unwrap();
    let m = r.manifest.unwrap();
    assert!(m.parent.is_some());
    let out = d.path().join("restored.rexic");
    restore_l2(job.l2.as_ref(), &RestoreOptions::default(), &out).unwrap();
    let diff = compare_ic_files(&out, &full).unwrap();
    assert!(diff.is_equal(), "{}: {diff}", p.name());
}

#[test]
fn real_workload_python_array_round_trips() {
    real_program_round_trip(Program::PythonArray);
}

#[test]
fn real_workload_xz_round_trips() {
    real_program_round_trip(Program::Xz);
}

#[test]
fn real_workload_sqlite_round_trips() {
    real_program_round_trip(Program::Sqlite);
}

/// Four threads rewriting their own buffers without pause.
const THREADS: &str = r#"
import threading, time
def work(n):
    buf = bytearray(2 << 20)
    k = 0
    while True:
        k += 1
        s = (k * 4096 * 7) % (len(buf) - 8192)
        buf[s:s + 8192] = bytes([(k + n) % 251]) * 8192
        if k % 64 == 0:
            time.sleep(0)
for n in range(4):
    threading.Thread(target=work, args=(n,), daemon=True).start()
print("ready", flush=True)
time.sleep(600)
"#;

#[test]
fn every_thread_is_stopped_with_either_stop_method() {
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    let script = d.path().join("threads.py");
    std::fs::write(&script, THREADS).unwrap();
    let mut child = Command::new(&py)
        .arg(&script)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    for method in [
        rexctl::eval::capture::StopMethod::Ptrace,
        rexctl::eval::capture::StopMethod::Signal,
    ] {
        let l1 = d.path().join(format!("l1-{method:?}"));
        let full = d.path().join(format!("full-{method:?}.rexic"));
        let opts = CaptureOptions {
            stop: method,
            ..Default::default()
        };
        let mut cap = Capture::attach(child.id(), &l1, opts).unwrap();
        let mut last = None;
        for k in 0..4 {
            std::thread::sleep(Duration::from_millis(40));
            let step = if k == 3 {
                cap.checkpoint_with_full_copy(&full)
            } else {
                cap.checkpoint()
            };
            last = Some(taken(step.unwrap()));
        }
        let last = last.unwrap();
        assert!(
            last.threads >= 5 || method == rexctl::eval::capture::StopMethod::Signal,
            "{last:?}"
        );
        assert!(
            last.pages > 0,
            "the threads write between checkpoints: {last:?}"
        );
        let chain = L1Dir::scan(&l1).unwrap();
        let coalesced = d.path().join(format!("coalesced-{method:?}.rexic"));
        CList::build(&chain.files)
            .unwrap()
            .write_ic(&chain.files, &coalesced)
            .unwrap();
        let diff = compare_ic_files(&coalesced, &full).unwrap();
        assert!(diff.is_equal(), "{method:?}: {diff}");
    }
    // The process still runs: neither method left it stopped.
    let st = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap();
    let state = st[st.rfind(')').unwrap() + 2..].chars().next().unwrap();
    assert!(matches!(state, 'R' | 'S'), "state {state}");
    let _ = child.kill();
    let _ = child.wait();
}

/// Every signal that ends another command after its temporary files are
/// removed (rexctl(1): SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM,
/// SIGXCPU) ends a capture after the checkpoint in progress, with its
/// report and no temporary file in L1 (helper-95: SIGHUP and SIGUSR1,
/// which Slurm sends before a time limit, killed it with a large
/// `.ckpt-N.rexic.tmp-*` left); a signal ignored when it started stays
/// ignored (a script's background job: SIGINT), as for every command.
#[test]
fn a_capture_ends_after_its_checkpoint_on_every_signal_that_ends_a_command() {
    use std::os::unix::process::CommandExt;
    for (sig, ignored) in [
        (libc::SIGHUP, None),
        (libc::SIGUSR1, None),
        (libc::SIGTERM, Some(libc::SIGINT)),
    ] {
        let d = tempfile::tempdir().unwrap();
        let l1 = d.path().join("l1");
        let mut c = rexctl();
        c.args([
            "capture",
            "--l1",
            l1.to_str().unwrap(),
            "--interval",
            "0.1",
            "--json",
        ])
        // The program must not hold the capture's output pipes open.
        .args(["--", "sh", "-c", "exec sleep 60 >/dev/null 2>&1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        // SAFETY: between fork and exec the closure calls only signal(2),
        // which is async-signal-safe, and touches no memory of the parent's.
        unsafe {
            c.pre_exec(move || {
                libc::signal(sig, libc::SIG_DFL);
                if let Some(i) = ignored {
                    libc::signal(i, libc::SIG_IGN);
                }
                Ok(())
            });
        }
        let mut child = c.spawn().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while !l1.join("ckpt-00000001.rexic").exists() {
            assert!(child.try_wait().unwrap().is_none(), "capture ended early");
            assert!(std::time::Instant::now() < deadline, "no second checkpoint");
            std::thread::sleep(Duration::from_millis(5));
        }
        let pid = child.id() as libc::pid_t;
        if let Some(i) = ignored {
            // SAFETY: kill(2) of our own child, not yet waited for.
            assert_eq!(unsafe { libc::kill(pid, i) }, 0);
            std::thread::sleep(Duration::from_millis(500));
            assert!(
                child.try_wait().unwrap().is_none(),
                "signal {i}, ignored at the start, ended the capture"
            );
        }
        // SAFETY: as above.
        assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "signal {sig}: {err}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["ended"], "interrupted", "signal {sig}");
        // The program runs on (a job is never lost to its capture): end it.
        if let Some(p) = v["process"]["pid"].as_u64() {
            // SAFETY: kill(2) of the `sleep` the capture started.
            unsafe { libc::kill(p as libc::pid_t, libc::SIGKILL) };
        }
        let names = crate::util::names_in(&l1);
        assert!(
            names.iter().all(|n| !n.contains(".tmp")),
            "signal {sig}: {names:?}"
        );
        assert!(L1Dir::scan(&l1).unwrap().files.len() >= 2, "signal {sig}");
    }
}
