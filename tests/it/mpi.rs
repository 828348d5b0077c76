//! MPI jobs (cargo feature `mpi`): real `mpirun -np 4` runs of
//! `rexctl push-l2 --collective` over generated ranks that share part of
//! their memory; every rank restores bit-identically from L2 alone, and a
//! rank SIGKILLed during a collective push leaves the previous job
//! generation restorable for every rank.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::util::{assert_image, copy_tree, names_in, ok, run, s, show, stderr};

const RANKS: u32 = 4;

/// `mpirun -np RANKS rexctl ARGS`, as root where the tests run as root,
/// with `env` set for rank `env.0` only. Bounded by mpirun's own timeout.
fn mpirun(args: &[&str], env: Option<(u32, &str)>) -> Output {
    mpirun_np(RANKS, args, env)
}

/// [`mpirun`] with `np` processes.
fn mpirun_np(np: u32, args: &[&str], env: Option<(u32, &str)>) -> Output {
    let mut c = Command::new("mpirun");
    c.args(["--oversubscribe", "--timeout", "120", "-np"])
        .arg(np.to_string());
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        c.arg("--allow-run-as-root");
    }
    let bin = env!("CARGO_BIN_EXE_rexctl");
    match env {
        None => {
            c.arg(bin).args(args);
        }
        Some((rank, vars)) => {
            // Open MPI names each process's rank in its environment.
            let script = format!(
                "if [ \"$OMPI_COMM_WORLD_RANK\" = {rank} ]; then export {vars}; fi; exec \"$0\" \"$@\""
            );
            c.args(["sh", "-c", &script, bin]).args(args);
        }
    }
    c.output()
        .expect("run mpirun (scripts/deps installs Open MPI)")
}

fn gen_ranks(dir: &Path, shared: &str, pages: &str, count: &str, truth: &Path) {
    ok(&[
        "gen",
        "--ranks",
        "4",
        "--shared",
        shared,
        "--pages",
        pages,
        "--count",
        count,
        "--seed",
        "7",
        s(dir),
        "--truth",
        s(truth),
    ]);
}

/// Moves every rank's checkpoints with seq above `last` from `from` to
/// `to` (kept for a later batch).
fn hold_back(from: &Path, to: &Path, last: u64) {
    for r in 0..RANKS {
        let (a, b) = (from.join(r.to_string()), to.join(r.to_string()));
        std::fs::create_dir_all(&b).unwrap();
        for e in std::fs::read_dir(&a).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if !p.is_file() || !name.starts_with("ckpt-") {
                continue; // partner-* directories, L1/rex, lock files
            }
            let seq: u64 = p
                .file_stem()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix("ckpt-"))
                .and_then(|n| n.parse().ok())
                .unwrap();
            if seq > last {
                std::fs::rename(&p, b.join(p.file_name().unwrap())).unwrap();
            }
        }
    }
}

/// Moves the checkpoints `hold_back` kept in `later` back into `l1`.
fn release(later: &Path, l1: &Path) {
    for r in 0..RANKS {
        let (a, b) = (later.join(r.to_string()), l1.join(r.to_string()));
        for e in std::fs::read_dir(&a).unwrap() {
            let p = e.unwrap().path();
            std::fs::rename(&p, b.join(p.file_name().unwrap())).unwrap();
        }
    }
}

fn restore_rank(l2: &Path, rank: u32, out: &Path, extra: &[&str]) -> Output {
    let r = rank.to_string();
    let mut args = vec!["restore", "--l2", s(l2), "--rank", &r, "-o", s(out), "-f"];
    args.extend_from_slice(extra);
    run(&args)
}

fn assert_ranks_restore(l2: &Path, truth: &Path, tmp: &Path, ctx: &str) {
    assert_ranks_restore_with(l2, truth, tmp, ctx, &[]);
}

/// Every rank restores from L2 plus its L1 directory (`L1/R`): the newest
/// job generation and the rank's pending checkpoints.
fn assert_ranks_restore_l1(l1: &Path, l2: &Path, truth: &Path, tmp: &Path, ctx: &str) {
    assert_ranks_restore_with(l2, truth, tmp, ctx, &["--l1", s(l1)]);
}

fn assert_ranks_restore_with(l2: &Path, truth: &Path, tmp: &Path, ctx: &str, extra: &[&str]) {
    for r in 0..RANKS {
        let out = tmp.join(format!("restored-{r}.rexic"));
        let o = restore_rank(l2, r, &out, extra);
        assert!(o.status.success(), "{ctx}: {}", show(&["restore"], &o));
        assert_image(
            &out,
            &truth.join(format!("{r}.rexic")),
            &format!("{ctx}, rank {r}"),
        );
    }
}

/// Bytes of the generation files under `dir` (recursively).
fn l2_bytes(dir: &Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            n += l2_bytes(&p);
        } else if p
            .file_name()
            .and_then(|f| f.to_str())
            .is_some_and(|f| f.starts_with('g'))
        {
            n += std::fs::metadata(&p).unwrap().len();
        }
    }
    n
}

fn success(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what} failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A rank with no checkpoint at the job's first collective push fails it on
/// every rank alike, with exit 3 (no checkpoint where one is needed): the
/// ranks' statuses differed before, and this case had no test.
#[test]
fn a_rank_without_a_checkpoint_fails_the_first_collective_push_alike_on_every_rank() {
    let _one_at_a_time = crate::util::exclusive();
    let t = tempfile::tempdir().unwrap();
    let (l1, l2) = (t.path().join("l1"), t.path().join("l2"));
    gen_ranks(&l1, "0.5", "64", "1", &t.path().join("truth"));
    for e in std::fs::read_dir(l1.join("3")).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::remove_file(p).unwrap();
        }
    }
    std::fs::create_dir_all(&l2).unwrap();
    let o = mpirun(
        &["push-l2", "--collective", "--l1", s(&l1), "--l2", s(&l2)],
        None,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("rank 3 failed"), "{err}");
    assert!(err.contains("it has no checkpoint"), "{err}");
    assert!(!l2.join("job/j00000001.job").exists());
    // A bad L2 location on rank 2 alone fails every rank with its exit
    // code; that rank used to return before the agreement, and the others
    // waited in it until mpirun's timeout (helper-62).
    let mut c = Command::new("mpirun");
    c.args(["--oversubscribe", "--timeout", "120", "-np"])
        .arg(RANKS.to_string());
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        c.arg("--allow-run-as-root");
    }
    let script =
        "if [ \"$OMPI_COMM_WORLD_RANK\" = 2 ]; then export REX_L2=s3://; fi; exec \"$0\" \"$@\"";
    let o = c
        .env("REX_L2", &l2)
        .args(["sh", "-c", script, env!("CARGO_BIN_EXE_rexctl")])
        .args(["push-l2", "--collective", "--l1", s(&l1)])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(5), "{err}");
    assert!(err.contains("is not a bucket name"), "{err}");
    // Nothing pushed, so nothing deleted: each other rank's FULL
    // checkpoint and its incremental are still in L1.
    for r in 0..3 {
        let ckpts = names_in(&l1.join(r.to_string()))
            .into_iter()
            .filter(|n| n.starts_with("ckpt-"))
            .count();
        assert_eq!(ckpts, 2, "rank {r}");
    }
}

#[test]
fn ranks_sharing_memory_store_it_once_and_every_rank_restores_bit_identically() {
    let _one_at_a_time = crate::util::exclusive();
    let t = tempfile::tempdir().unwrap();
    let (all, truth_final, truth3) = (
        t.path().join("all"),
        t.path().join("tf"),
        t.path().join("t3"),
    );
    gen_ranks(&all, "0.9", "600", "6", &truth_final);
    gen_ranks(&t.path().join("first"), "0.9", "600", "3", &truth3);
    let (l1, later, l1_single) = (
        t.path().join("l1"),
        t.path().join("later"),
        t.path().join("single"),
    );
    copy_tree(&all, &l1);
    hold_back(&l1, &later, 3);
    copy_tree(&l1, &l1_single);
    let l2 = t.path().join("l2");
    std::fs::create_dir_all(&l2).unwrap();

    let o = mpirun(
        &["push-l2", "--collective", "--l1", s(&l1), "--l2", s(&l2)],
        None,
    );
    success(&o, "collective push");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("job generation 1"), "{text}");
    assert!(l2.join("job/j00000001.job").is_file());
    assert_ranks_restore(&l2, &truth3, t.path(), "job generation 1");

    // The same checkpoints pushed rank by rank, each alone.
    let single = t.path().join("l2-single");
    for r in 0..RANKS {
        let (a, b) = (l1_single.join(r.to_string()), single.join(r.to_string()));
        std::fs::create_dir_all(&b).unwrap();
        ok(&["push-l2", "--l1", s(&a), "--l2", s(&b)]);
    }
    let (coll, alone) = (l2_bytes(&l2), l2_bytes(&single));
    eprintln!("L2 bytes: collective {coll}, per-rank {alone}");
    // 90 % shared on 4 ranks: at best (0.9 + 4 x 0.1) / 4 = 0.33 of the
    // bytes; each rank's own part compresses differently, so allow 0.5.
    assert!(
        (coll as f64) < 0.5 * alone as f64,
        "collective L2 {coll} bytes, per-rank {alone} bytes"
    );

    // A plain restore of one rank's chain is refused (its generations are
    // the job's once committed, and other ranks store some of its pages),
    // and says how to.
    let o = run(&[
        "restore",
        "--l2",
        s(&l2.join("1")),
        "-o",
        s(&t.path().join("x")),
        "-f",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&["restore"], &o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--rank"));

    // A rank's chain is pushed by every rank together: a single-rank push
    // or flush of rank 1 refuses before anything changes.
    let before = std::fs::read_dir(l1.join("1")).unwrap().count();
    for cmd in ["push-l2", "flush"] {
        let (a, b) = (l1.join("1"), l2.join("1"));
        let o = run(&[cmd, "--l1", s(&a), "--l2", s(&b), "--rank", "1"]);
        assert_eq!(o.status.code(), Some(3), "{}", show(&[cmd], &o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("job generation 1") && err.contains("--collective"),
            "{err}"
        );
    }
    assert_eq!(std::fs::read_dir(l1.join("1")).unwrap().count(), before);
    assert!(!l2.join("1/g00000002.manifest").exists());

    // The next batch, still in L1: each rank restores from L1 plus L2 (a
    // transient fault), its pending checkpoints on top of job generation 1.
    release(&later, &l1);
    assert_ranks_restore_l1(&l1, &l2, &truth_final, t.path(), "L1 + job generation 1");
    let o = restore_rank(
        &l2,
        1,
        &t.path().join("r1.rexic"),
        &["--l1", s(&l1), "--json"],
    );
    success(&o, "restore of rank 1 from L1 + L2");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["generation"], 1, "{v}");
    assert_eq!(v["seq"], 6, "{v}");
    assert!(v["pages_from_l1_ics"].as_u64().unwrap() > 0, "{v}");
    // A rank's L1 directory is L1/R: one that is missing is named.
    let no_ranks = t.path().join("l1-without-ranks");
    std::fs::create_dir_all(&no_ranks).unwrap();
    let o = restore_rank(&l2, 1, &t.path().join("x"), &["--l1", s(&no_ranks)]);
    assert_eq!(o.status.code(), Some(5), "{}", show(&["restore"], &o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--l2-only"));
    // A job restarting every rank at one seq (the smallest of the ranks'
    // newest): `--seq 3` leaves the pending checkpoints after it out, on
    // every rank; a seq before the newest job generation is refused.
    assert_ranks_restore_with(
        &l2,
        &truth3,
        t.path(),
        "L1 + job generation 1 at --seq 3",
        &["--l1", s(&l1), "--seq", "3"],
    );
    let out = t.path().join("seq2.rexic");
    let o = restore_rank(&l2, 1, &out, &["--l1", s(&l1), "--seq", "2"]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&["restore"], &o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--job-generation"),
        "{}",
        show(&["restore"], &o)
    );
    assert!(!out.exists());
    // The whole job restarted at once (`restore --collective`): rank 2
    // never wrote checkpoints 4..6 and rank 1's node is lost (no L1/1), so
    // every rank restores seq 3, rank 1 from L2 alone.
    let aside = t.path().join("aside");
    std::fs::create_dir_all(aside.join("2")).unwrap();
    for seq in 4..=6 {
        let n = format!("ckpt-{seq:08}.rexic");
        std::fs::rename(l1.join("2").join(&n), aside.join("2").join(&n)).unwrap();
    }
    std::fs::rename(l1.join("1"), aside.join("1")).unwrap();
    let coll = t.path().join("collective");
    std::fs::create_dir_all(&coll).unwrap();
    let pattern = coll.join("image-{rank}.rexic");
    let collective = |out: &Path, extra: &[&str]| {
        let mut args = vec!["restore", "--collective", "--l1", s(&l1), "--l2", s(&l2)];
        args.extend(["-o", s(out)]);
        args.extend_from_slice(extra);
        mpirun(&args, None)
    };
    let o = collective(&pattern, &[]);
    success(&o, "collective restore, one rank behind and one node lost");
    assert!(String::from_utf8_lossy(&o.stderr).contains("restoring from L2 alone"));
    for r in 0..RANKS {
        let got = coll.join(format!("image-{r}.rexic"));
        assert_image(
            &got,
            &truth3.join(format!("{r}.rexic")),
            &format!("collective, rank {r}"),
        );
    }
    // A mistyped --l1 (no rank finds its directory there) is refused on
    // every rank, no image anywhere: it read as every node lost, L2's
    // older state with exit 0 (helper-66). Every node lost is --l2-only.
    let typo = t.path().join("l1-typo");
    let coll2 = t.path().join("collective-typo");
    std::fs::create_dir_all(&coll2).unwrap();
    let o = mpirun(
        &[
            "restore",
            "--collective",
            "--l1",
            s(&typo),
            "--l2",
            s(&l2),
            "-o",
            s(&coll2.join("image-{rank}.rexic")),
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(5), "{}", show(&["restore"], &o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--l2-only"),
        "{}",
        show(&["restore"], &o)
    );
    assert_eq!(std::fs::read_dir(&coll2).unwrap().count(), 0);
    let o = mpirun(
        &[
            "restore",
            "--collective",
            "--l1",
            s(&typo),
            "--l2-only",
            "--l2",
            s(&l2),
            "-o",
            s(&coll2.join("image-{rank}.rexic")),
        ],
        None,
    );
    success(&o, "collective restore from L2 alone");
    for r in 0..RANKS {
        assert_image(
            &coll2.join(format!("image-{r}.rexic")),
            &truth3.join(format!("{r}.rexic")),
            &format!("collective from L2 alone, rank {r}"),
        );
    }
    // Every rank's checkpoints back: every rank at seq 6.
    for seq in 4..=6 {
        let n = format!("ckpt-{seq:08}.rexic");
        std::fs::rename(aside.join("2").join(&n), l1.join("2").join(&n)).unwrap();
    }
    std::fs::rename(aside.join("1"), l1.join("1")).unwrap();
    // A push holds rank 2's L1 directory: the restore waits for it and
    // says so (helper-62: it waited without a word).
    let held = rexctl::l1::lock::JobLock::acquire(&l1.join("2"), "a test").unwrap();
    let o = {
        let mut c = Command::new("mpirun");
        c.args(["--oversubscribe", "--timeout", "120", "-np"])
            .arg(RANKS.to_string());
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            c.arg("--allow-run-as-root");
        }
        let mut child = c
            .arg(env!("CARGO_BIN_EXE_rexctl"))
            .args(["restore", "--collective", "--l1", s(&l1), "--l2", s(&l2)])
            .args(["-o", s(&pattern), "-f"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            let mut all = String::new();
            for line in std::io::BufReader::new(stderr).lines() {
                let line = line.unwrap_or_default();
                if line.contains("waiting for") {
                    let _ = tx.send(());
                }
                all.push_str(&line);
                all.push('\n');
            }
            all
        });
        let said = rx.recv_timeout(std::time::Duration::from_secs(60));
        drop(held);
        let mut o = child.wait_with_output().unwrap();
        o.stderr = reader.join().unwrap().into_bytes();
        assert!(
            said.is_ok(),
            "no word of the wait: {}",
            show(&["restore"], &o)
        );
        o
    };
    success(&o, "collective restore, every rank at seq 6");
    for r in 0..RANKS {
        let got = coll.join(format!("image-{r}.rexic"));
        assert_image(
            &got,
            &truth_final.join(format!("{r}.rexic")),
            &format!("collective at 6, rank {r}"),
        );
    }
    // One output name for every rank is refused on every rank, and no
    // image appears.
    let one = coll.join("one.rexic");
    let o = collective(&one, &[]);
    assert!(!o.status.success(), "{}", show(&["restore"], &o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("{rank}"));
    assert!(!one.exists());
    assert_eq!(
        names_in(&coll).len(),
        RANKS as usize,
        "{:?}",
        names_in(&coll)
    );
    // From L2 alone, --seq is the job generation's own seq or a refusal.
    assert_ranks_restore_with(
        &l2,
        &truth3,
        t.path(),
        "job generation 1 at --seq 3",
        &["--seq", "3"],
    );
    let o = restore_rank(&l2, 1, &out, &["--seq", "5"]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&["restore"], &o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--l1"),
        "{}",
        show(&["restore"], &o)
    );
    assert!(!out.exists());

    // The next batch: a Δ on every rank, job generation 2.
    let o = mpirun(
        &["push-l2", "--collective", "--l1", s(&l1), "--l2", s(&l2)],
        None,
    );
    success(&o, "second collective push");
    assert!(String::from_utf8_lossy(&o.stdout).contains("ΔRPS"));
    assert_ranks_restore(&l2, &truth_final, t.path(), "job generation 2");
    // The older job generation is still whole.
    let out = t.path().join("old.rexic");
    let o = restore_rank(&l2, 2, &out, &["--job-generation", "1"]);
    success(&o, "restore of job generation 1");
    assert_image(&out, &truth3.join("2.rexic"), "job generation 1 after 2");
    // A job generation that does not exist is bad data asked for (exit 3),
    // not an I/O failure.
    let o = restore_rank(
        &l2,
        2,
        &t.path().join("none.rexic"),
        &["--job-generation", "9"],
    );
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("no job generation 9"));
    // The job's status and verification cover every rank.
    let text = ok(&["verify", "--l2", s(&l2)]);
    assert!(text.contains("job generations [1, 2]"), "{text}");
    assert!(text.contains("ok"), "{text}");
    for r in 0..RANKS {
        assert!(text.contains(&format!("rank {r}: generation")), "{text}");
    }
    let text = ok(&["status", "--l2", s(&l2)]);
    assert!(text.contains("4 ranks"), "{text}");

    // A job manifest lost after its job generation committed (its ranks'
    // checkpoints are gone from L1), and the copies the ranks keep of it
    // in L1 lost too (or a job pushed before they were kept): the next
    // push refuses to roll the generations back, and deletes nothing.
    let j2 = l2.join("job/j00000002.job");
    // While a rank's L1 keeps its copy, a restore with that L1 refuses to
    // take the job generation before it for the newest (with --fallback,
    // it does, and says why).
    std::fs::rename(&j2, t.path().join("j2")).unwrap();
    let out = t.path().join("older.rexic");
    let o = restore_rank(&l2, 1, &out, &["--l1", s(&l1)]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&["restore"], &o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("job generation 2 committed"),
        "{}",
        show(&["restore"], &o)
    );
    assert!(!out.exists());
    let o = restore_rank(&l2, 1, &out, &["--l1", s(&l1), "--fallback"]);
    assert!(o.status.success(), "{}", show(&["restore"], &o));
    std::fs::rename(t.path().join("j2"), &j2).unwrap();
    for r in 0..RANKS {
        let copy = l1.join(format!("{r}/rex/j00000002.job"));
        assert!(copy.is_file(), "rank {r} keeps no copy of the job manifest");
        std::fs::rename(&copy, t.path().join(format!("j2-{r}"))).unwrap();
    }
    std::fs::rename(&j2, t.path().join("j2")).unwrap();
    let o = mpirun(
        &[
            "push-l2",
            "--collective",
            "--full",
            "--l1",
            s(&l1),
            "--l2",
            s(&l2),
        ],
        None,
    );
    assert!(!o.status.success(), "{}", show(&["push-l2"], &o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("job manifest was lost"));
    for r in 0..RANKS {
        assert!(l2.join(format!("{r}/g00000002.manifest")).is_file());
    }
    std::fs::rename(t.path().join("j2"), &j2).unwrap();
    for r in 0..RANKS {
        let copy = l1.join(format!("{r}/rex/j00000002.job"));
        std::fs::rename(t.path().join(format!("j2-{r}")), &copy).unwrap();
    }
    // A newest job manifest that is damaged is refused, never passed over
    // for the older job generation: the restore names it and the older one.
    let good = std::fs::read(&j2).unwrap();
    let mut bad = good.clone();
    bad[good.len() / 2] ^= 0x10;
    std::fs::write(&j2, &bad).unwrap();
    for extra in [&[][..], &["--l1", s(&l1)][..]] {
        let out = t.path().join("stale.rexic");
        let o = restore_rank(&l2, 0, &out, extra);
        assert_eq!(o.status.code(), Some(3), "{}", show(&["restore"], &o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("job generation 2, the newest, is invalid")
                && err.contains("--job-generation 1"),
            "{err}"
        );
        assert!(!out.exists());
    }
    std::fs::write(&j2, &good).unwrap();
    // Nor when no regular file is left under its name: a dangling link,
    // a directory (helper-60: the job's listing dropped such names, and
    // the older job generation restored with exit 0).
    for how in ["a dangling link", "a directory"] {
        std::fs::remove_file(&j2).unwrap();
        if how == "a directory" {
            std::fs::create_dir(&j2).unwrap();
        } else {
            std::os::unix::fs::symlink(t.path().join("gone"), &j2).unwrap();
        }
        let out = t.path().join("stale.rexic");
        let o = restore_rank(&l2, 0, &out, &[]);
        assert_eq!(
            o.status.code(),
            Some(3),
            "{how}: {}",
            show(&["restore"], &o)
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("job generation 2, the newest, is invalid"),
            "{how}: {err}"
        );
        assert!(!out.exists());
        if how == "a directory" {
            std::fs::remove_dir(&j2).unwrap();
        } else {
            std::fs::remove_file(&j2).unwrap();
        }
        std::fs::write(&j2, &good).unwrap();
    }
    // A job manifest naming a rank's older generation, CRCs and all: that
    // generation is not the rank's part of the job generation when a newer
    // one of the rank belongs to it (helper-60: rank 0 restored seq 3's
    // state with exit 0).
    {
        use rexctl::format::job_manifest::JobManifest;
        let mut jm = JobManifest::decode(&j2, &good).unwrap();
        let g1 = std::fs::read(l2.join("0/g00000001.manifest")).unwrap();
        let m0 = jm.members.iter_mut().find(|m| m.rank == 0).unwrap();
        assert_eq!(m0.generation, 2);
        m0.generation = 1;
        m0.manifest_crc32 = crc32fast::hash(&g1);
        std::fs::write(&j2, jm.encode()).unwrap();
        let out = t.path().join("stale.rexic");
        let o = restore_rank(&l2, 0, &out, &[]);
        assert_eq!(o.status.code(), Some(3), "{}", show(&["restore"], &o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("names rank 0's generation 1, but its generation 2"),
            "{err}"
        );
        assert!(!out.exists());
        std::fs::write(&j2, &good).unwrap();
    }

    // A complete coalescence on every rank rewrites the pages other ranks
    // stored (read from them) and chooses the shared pages again.
    let o = mpirun(
        &[
            "push-l2",
            "--collective",
            "--full",
            "--l1",
            s(&l1),
            "--l2",
            s(&l2),
        ],
        None,
    );
    success(&o, "full collective push");
    assert!(String::from_utf8_lossy(&o.stdout).contains("full RPS"));
    assert_ranks_restore(&l2, &truth_final, t.path(), "job generation 3 (full)");
    assert!(l2.join("2/g00000003.xref").is_file());

    // Nothing left to push: every rank agrees and nothing changes.
    let o = mpirun(
        &["push-l2", "--collective", "--l1", s(&l1), "--l2", s(&l2)],
        None,
    );
    success(&o, "empty collective push");
    assert!(!l2.join("job/j00000004.job").exists());

    // gc over the job: each rank's chain; an object no manifest names goes.
    let junk = l2.join("2/g00000099.rps");
    std::fs::write(&junk, b"left by a crash").unwrap();
    let text = ok(&["gc", "--l2", s(&l2), "--grace", "0"]);
    assert!(text.contains("deleted g00000099.rps"), "{text}");
    assert!(!junk.exists());
    assert_ranks_restore(&l2, &truth_final, t.path(), "after gc");

    // A rank's committed manifest that changed is named, with its rank.
    let m = l2.join("3/g00000003.manifest");
    let mut b = std::fs::read(&m).unwrap();
    let i = b.len() / 2;
    b[i] ^= 1;
    std::fs::write(&m, &b).unwrap();
    let o = run(&["status", "--l2", s(&l2)]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&["status"], &o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("rank 3: BAD"));
    let o = restore_rank(&l2, 3, &t.path().join("bad.rexic"), &[]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&["restore"], &o));
    assert!(!t.path().join("bad.rexic").exists());
}

#[test]
fn a_rank_killed_during_a_collective_push_leaves_the_previous_job_generation() {
    let _one_at_a_time = crate::util::exclusive();
    let t = tempfile::tempdir().unwrap();
    let (all, truth_final, truth2) = (
        t.path().join("all"),
        t.path().join("tf"),
        t.path().join("t2"),
    );
    gen_ranks(&all, "0.5", "300", "4", &truth_final);
    gen_ranks(&t.path().join("first"), "0.5", "300", "2", &truth2);
    let (l1, later) = (t.path().join("l1"), t.path().join("later"));
    copy_tree(&all, &l1);
    hold_back(&l1, &later, 2);
    let l2 = t.path().join("l2");
    std::fs::create_dir_all(&l2).unwrap();
    success(
        &mpirun(
            &["push-l2", "--collective", "--l1", s(&l1), "--l2", s(&l2)],
            None,
        ),
        "first collective push",
    );
    release(&later, &l1);
    let base = t.path().join("base");
    copy_tree(&t.path().join("l1"), &base.join("l1"));
    copy_tree(&l2, &base.join("l2"));
    // Kill rank 2 at its N-th durable operation: while it writes its
    // generation, uploads it, writes its manifests, or after.
    let mut completed = false;
    let mut killed = 0;
    let (mut lost_node_tried, mut lost_manifest_tried) = (false, false);
    let mut pending_after_commit_tried = false;
    for n in [
        1u32, 2, 4, 6, 9, 12, 16, 21, 27, 34, 40, 46, 48, 49, 50, 51, 52, 53, 54, 55, 56, 58, 60,
        80,
    ] {
        let trial = t.path().join(format!("trial-{n}"));
        copy_tree(&base, &trial);
        let (tl1, tl2) = (trial.join("l1"), trial.join("l2"));
        let vars = format!("REX_FAILPOINT={n} REX_FAILPOINT_SIGNAL=kill");
        let o = mpirun(
            &["push-l2", "--collective", "--l1", s(&tl1), "--l2", s(&tl2)],
            Some((2, &vars)),
        );
        let committed = tl2.join("job/j00000002.job").is_file();
        eprintln!(
            "killed at {n}: exit {:?}, job generation 2 committed: {committed}, rank 2 part in L2: {}, its copy of the job manifest: {}, its L1: {:?}",
            o.status.code(),
            tl2.join("2/g00000002.manifest").is_file(),
            tl1.join("2/rex/j00000002.job").is_file(),
            names_in(&tl1.join("2"))
        );
        if o.status.success() {
            assert!(committed, "n={n}: success without a job manifest");
            completed = true;
        } else {
            killed += 1;
        }
        // Every rank restores one whole job generation: the new one if it
        // committed, else the previous one.
        let want = if committed { &truth_final } else { &truth2 };
        assert_ranks_restore(&tl2, want, &trial, &format!("killed at {n}"));
        if !committed {
            // verify counts each rank's pending checkpoints after its
            // committed generation, as a restore takes them (helper-71:
            // after the uncommitted one, "no checkpoint pending", and a
            // damaged one went unchecked with exit 0).
            let text = ok(&["verify", "--l2", s(&tl2), "--l1", s(&tl1)]);
            assert!(
                text.contains("2 checkpoints pending (seqs 3..=4)"),
                "n={n}: {text}"
            );
            let victim = tl1.join("1/ckpt-00000004.rexic");
            let good = std::fs::read(&victim).unwrap();
            let mut bad = good.clone();
            let at = bad.len() - 100;
            bad[at] ^= 0x40;
            std::fs::write(&victim, &bad).unwrap();
            let o = run(&["verify", "--l2", s(&tl2), "--l1", s(&tl1)]);
            assert_eq!(o.status.code(), Some(3), "n={n}: {}", show(&["verify"], &o));
            assert!(
                String::from_utf8_lossy(&o.stdout).contains("ckpt-00000004.rexic"),
                "n={n}: {}",
                show(&["verify"], &o)
            );
            std::fs::write(&victim, &good).unwrap();
        }
        // From L1 plus L2, every rank has its newest checkpoint: the
        // generations that never committed are left out, and the
        // checkpoints they hold are still in L1.
        assert_ranks_restore_l1(
            &tl1,
            &tl2,
            &truth_final,
            &trial,
            &format!("L1 after a kill at {n}"),
        );
        // Rank 2's node lost after its part of the unfinished job
        // generation reached L2: its L1 cannot tell that part from a
        // committed one, ranks 0 and 1 still hold theirs pending, so the
        // next push rolls it back (helper-76: refused for ever, "it
        // committed and its job manifest was lost"); rank 2 then stands at
        // seq 2, and holds the others back there (they had committed seq 4
        // beside its seq 2, a job generation no collective restore takes).
        let unfinished = tl2.join("2/g00000002.manifest").is_file() && !committed;
        if unfinished && !lost_node_tried {
            lost_node_tried = true;
            let lost = t.path().join(format!("lost-{n}"));
            copy_tree(&trial, &lost);
            let (ll1, ll2) = (lost.join("l1"), lost.join("l2"));
            std::fs::remove_dir_all(ll1.join("2")).unwrap();
            std::fs::create_dir(ll1.join("2")).unwrap();
            let o = mpirun(
                &["push-l2", "--collective", "--l1", s(&ll1), "--l2", s(&ll2)],
                None,
            );
            success(
                &o,
                &format!("the push after a kill at {n} and rank 2's node lost"),
            );
            assert!(
                String::from_utf8_lossy(&o.stdout)
                    .contains("rank 2 has no checkpoint of seq 3 (its newest is seq 2); seq 2 is the newest every rank stands at"),
                "n={n}: {}",
                show(&["push-l2"], &o)
            );
            assert!(!ll2.join("2/g00000002.manifest").exists());
            assert_ranks_restore(&ll2, &truth2, &lost, &format!("lost node at {n}"));
            assert!(ll1.join("0/ckpt-00000004.rexic").is_file());
            std::fs::remove_dir_all(&lost).unwrap();
            // Every rank's node lost (one node, L1 in memory): no rank can
            // tell, and no restore takes the job generation without its
            // manifest, so it is rolled back, said, and the job goes on
            // from the previous one.
            copy_tree(&trial, &lost);
            for r in 0..RANKS {
                std::fs::remove_dir_all(ll1.join(r.to_string())).unwrap();
                std::fs::create_dir(ll1.join(r.to_string())).unwrap();
            }
            let o = mpirun(
                &["push-l2", "--collective", "--l1", s(&ll1), "--l2", s(&ll2)],
                None,
            );
            success(
                &o,
                &format!("the push after a kill at {n} and every node lost"),
            );
            let text = String::from_utf8_lossy(&o.stdout);
            assert!(text.contains("taken as unfinished"), "{text}");
            assert!(!ll2.join("2/g00000002.manifest").exists());
            assert_ranks_restore(&ll2, &truth2, &lost, &format!("every node lost at {n}"));
            std::fs::remove_dir_all(&lost).unwrap();
        }
        // Killed after the commit, before deleting its checkpoints (and
        // after keeping its copy of the job manifest); then the job
        // manifest lost, and rank 0's node: rank 2's pending checkpoints
        // look like an unfinished push, but its copy says the job
        // generation committed. The next push puts the job manifest back
        // and the job goes on from it (helper-78: every rank rolled the
        // committed job generation back, exit 0 with the state before it).
        let pending2 = names_in(&tl1.join("2"))
            .iter()
            .any(|f| f.ends_with(".rexic"));
        if committed
            && !o.status.success()
            && pending2
            && tl1.join("2/rex/j00000002.job").is_file()
            && !pending_after_commit_tried
        {
            pending_after_commit_tried = true;
            let lost = t.path().join(format!("pending-{n}"));
            copy_tree(&trial, &lost);
            let (ll1, ll2) = (lost.join("l1"), lost.join("l2"));
            let j2 = ll2.join("job/j00000002.job");
            let good = std::fs::read(&j2).unwrap();
            std::fs::remove_file(&j2).unwrap();
            std::fs::remove_dir_all(ll1.join("0")).unwrap();
            std::fs::create_dir(ll1.join("0")).unwrap();
            let o = mpirun(
                &["push-l2", "--collective", "--l1", s(&ll1), "--l2", s(&ll2)],
                None,
            );
            success(
                &o,
                &format!(
                    "the push after a kill at {n} past the commit, a lost job manifest and node"
                ),
            );
            assert!(
                std::fs::read(&j2).is_ok_and(|b| b == good),
                "n={n}: job generation 2 was not put back: {}",
                show(&["push-l2"], &o)
            );
            assert_ranks_restore(
                &ll2,
                &truth_final,
                &lost,
                &format!("pending after the commit at {n}"),
            );
            std::fs::remove_dir_all(&lost).unwrap();
        }
        // The next run rolls back what did not commit and completes.
        let o = mpirun(
            &["push-l2", "--collective", "--l1", s(&tl1), "--l2", s(&tl2)],
            None,
        );
        success(&o, &format!("the push after a kill at {n}"));
        if committed && !lost_manifest_tried {
            // A committed job generation whose job manifest was lost, and
            // rank 2's node too: the ranks left keep a copy of it in L1,
            // which the next push puts back, and the job goes on from it.
            // Without the copies, ranks 0 and 1 still show it committed
            // (their checkpoints gone, their chain copies hold it), so no
            // rank rolls anything back: refused.
            lost_manifest_tried = true;
            for copies in [true, false] {
                let lost = t.path().join(format!("lost-manifest-{n}"));
                copy_tree(&base, &lost);
                let (ll1, ll2) = (lost.join("l1"), lost.join("l2"));
                success(
                    &mpirun(
                        &["push-l2", "--collective", "--l1", s(&ll1), "--l2", s(&ll2)],
                        None,
                    ),
                    "a push that commits",
                );
                let j2 = ll2.join("job/j00000002.job");
                let good = std::fs::read(&j2).unwrap();
                std::fs::remove_file(&j2).unwrap();
                std::fs::remove_dir_all(ll1.join("2")).unwrap();
                std::fs::create_dir(ll1.join("2")).unwrap();
                if !copies {
                    for r in (0..RANKS).filter(|r| *r != 2) {
                        std::fs::remove_file(ll1.join(format!("{r}/rex/j00000002.job"))).unwrap();
                    }
                }
                let o = mpirun(
                    &["push-l2", "--collective", "--l1", s(&ll1), "--l2", s(&ll2)],
                    None,
                );
                if copies {
                    success(&o, "the push after a lost job manifest and node");
                    assert!(
                        String::from_utf8_lossy(&o.stdout)
                            .contains("put back from this rank's copy"),
                        "{}",
                        show(&["push-l2"], &o)
                    );
                    assert!(std::fs::read(&j2).unwrap() == good, "another job manifest");
                    assert_ranks_restore(&ll2, &truth_final, &lost, "job manifest put back");
                } else {
                    assert_eq!(o.status.code(), Some(3), "{}", show(&["push-l2"], &o));
                }
                for r in 0..RANKS {
                    assert!(
                        ll2.join(format!("{r}/g00000002.manifest")).is_file(),
                        "copies {copies}: rank {r}'s committed generation deleted"
                    );
                }
                std::fs::remove_dir_all(&lost).unwrap();
            }
        }
        assert_ranks_restore(&tl2, &truth_final, &trial, &format!("after a kill at {n}"));
        std::fs::remove_dir_all(&trial).unwrap();
    }
    assert!(killed >= 5, "only {killed} runs were killed");
    assert!(completed, "no run got past its last failpoint");
    assert!(
        lost_node_tried,
        "no kill left rank 2's part unfinished in L2"
    );
    assert!(lost_manifest_tried);
    assert!(
        pending_after_commit_tried,
        "no kill came between rank 2's copy of the job manifest and its checkpoints' deletion"
    );
}

#[test]
fn damage_in_a_reference_or_in_the_page_it_names_is_named_never_restored() {
    let _one_at_a_time = crate::util::exclusive();
    let t = tempfile::tempdir().unwrap();
    let (l1, truth) = (t.path().join("l1"), t.path().join("truth"));
    gen_ranks(&l1, "0.9", "300", "2", &truth);
    let l2 = t.path().join("l2");
    std::fs::create_dir_all(&l2).unwrap();
    success(
        &mpirun(
            &["push-l2", "--collective", "--l1", s(&l1), "--l2", s(&l2)],
            None,
        ),
        "collective push",
    );
    let flip = |p: &Path, at: usize| {
        let mut b = std::fs::read(p).unwrap();
        b[at] ^= 0x40;
        std::fs::write(p, &b).unwrap();
    };
    // A flipped bit in rank 1's Xref file: its restore and the job's
    // verification name the file; nothing is written.
    let x = l2.join("1/g00000001.xref");
    let mid = std::fs::metadata(&x).unwrap().len() as usize / 2;
    flip(&x, mid);
    let out = t.path().join("r1.rexic");
    let o = restore_rank(&l2, 1, &out, &[]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&["restore"], &o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("g00000001.xref"));
    assert!(!out.exists());
    let o = run(&["verify", "--l2", s(&l2)]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&["verify"], &o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("rank 1"));
    flip(&x, mid);
    assert_ranks_restore(&l2, &truth, t.path(), "after the Xref file is mended");

    // A flipped bit in rank 0's RPS, which stores pages other ranks
    // reference: every rank restores its own image or fails naming that
    // file, and at least one other rank fails through its references.
    let rps = l2.join("0/g00000001.rps");
    let len = std::fs::metadata(&rps).unwrap().len() as usize;
    for at in [len / 4, len / 2, 3 * len / 4] {
        flip(&rps, at);
    }
    // The job's verification names the damage, and no rank with a failing
    // generation is "ok" (helper-66: "1 BAD: ok").
    let o = run(&["verify", "--l2", s(&l2)]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&["verify"], &o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("0/g00000001.rps"), "{text}");
    let rank0 = text.lines().find(|l| l.starts_with("rank 0:")).unwrap();
    assert!(rank0.contains("BAD") && !rank0.contains("ok"), "{text}");
    let mut failed_through_references = 0;
    for r in 0..RANKS {
        let out = t.path().join(format!("d{r}.rexic"));
        let o = restore_rank(&l2, r, &out, &[]);
        if o.status.success() {
            assert_image(
                &out,
                &truth.join(format!("{r}.rexic")),
                "a restore that passed",
            );
        } else {
            assert_eq!(o.status.code(), Some(3), "{}", show(&["restore"], &o));
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(err.contains("0/g00000001.rps"), "rank {r}: {err}");
            assert!(!out.exists());
            failed_through_references += u32::from(r != 0);
        }
    }
    assert!(
        failed_through_references > 0,
        "no rank read rank 0's damaged pages"
    );
}

/// `mpirun -np RANKS EXE ARGS` with the job's L1 and L2 and extra
/// variables.
fn mpi_job(exe: &Path, args: &[&str], l1: &Path, l2: &Path, vars: &[(&str, &str)]) -> Output {
    mpi_job_on(exe, args, l1, l2, vars, None)
}

/// [`mpi_job`], with `on_rank`'s variables (`(rank, "A=1 B=2")`) exported
/// on that rank alone.
fn mpi_job_on(
    exe: &Path,
    args: &[&str],
    l1: &Path,
    l2: &Path,
    vars: &[(&str, &str)],
    on_rank: Option<(u32, &str)>,
) -> Output {
    let mut c = Command::new("mpirun");
    c.args(["--oversubscribe", "--timeout", "180", "-np"])
        .arg(RANKS.to_string());
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        c.arg("--allow-run-as-root");
    }
    if let Some((rank, vars)) = on_rank {
        let script = format!(
            "if [ \"$OMPI_COMM_WORLD_RANK\" = {rank} ]; then export {vars}; fi; exec \"$0\" \"$@\""
        );
        c.args(["sh", "-c", &script]);
    }
    c.arg(exe)
        .args(args)
        .env("REX_L1", l1)
        .env("REX_L2", l2)
        // Push at every checkpoint, so kills land in collective pushes too.
        .env("REX_MAX_AGE", "0.01")
        .env_remove("REX_CONFIG")
        .env_remove("REX_FAILPOINT");
    for (k, v) in vars {
        c.env(k, v);
    }
    c.output().expect("run mpirun")
}

fn outputs_equal(a: &str, b: &str) {
    for r in 0..RANKS {
        let (x, y) = (format!("{a}.{r}"), format!("{b}.{r}"));
        assert!(
            std::fs::read(&x).unwrap() == std::fs::read(&y).unwrap(),
            "rank {r}: {x} differs from {y}"
        );
    }
}

#[test]
fn an_mpi_job_checkpointing_itself_restarts_bit_identically_after_kills_and_a_lost_node() {
    let _one_at_a_time = crate::util::exclusive();
    let t = tempfile::tempdir().unwrap();
    let exe = crate::librex::build_c("mpicc", "mpi_ranks", t.path());
    let args = |out: &Path| -> Vec<String> {
        ["48", "60", "5", s(out)]
            .iter()
            .map(|x| x.to_string())
            .collect()
    };
    let run_job = |tag: &str, vars: &[(&str, &str)]| -> Output {
        let out = t.path().join(format!("{tag}-out"));
        let a = args(&out.join("o"));
        std::fs::create_dir_all(&out).unwrap();
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        mpi_job(
            &exe,
            &a,
            &t.path().join(format!("{tag}-l1")),
            &t.path().join(format!("{tag}-l2")),
            vars,
        )
    };
    let o = run_job("ref", &[]);
    success(&o, "the uninterrupted job");
    let ref_out = t.path().join("ref-out/o");
    let l2 = t.path().join("ref-l2");
    assert!(l2.join("job").is_dir(), "no job generation was written");
    let xrefs = (0..RANKS)
        .flat_map(|r| std::fs::read_dir(l2.join(r.to_string())).unwrap())
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "xref")
        })
        .count();
    assert!(xrefs > 0, "no rank referenced another rank's pages");

    // Rank 2 killed at step 23, then at 41 (inside pushes too, as every
    // checkpoint pushes); each rerun restarts and goes on.
    let kill_out = t.path().join("kill-out/o");
    for step in ["23", "41"] {
        let o = run_job("kill", &[("CRASH_RANK", "2"), ("CRASH_STEP", step)]);
        assert!(
            !o.status.success(),
            "the crash at step {step} did not happen"
        );
    }
    let o = run_job("kill", &[]);
    success(&o, "the run after the kills");
    assert!(String::from_utf8_lossy(&o.stdout).contains("restarted from seq"));
    outputs_equal(s(&kill_out), s(&ref_out));

    // That job with rank 0's newest L2 manifest lost (L1's copy of the
    // chain keeps it): the restart puts it back before any rank restores,
    // and every rank restarts from the newest checkpoint (helper-79: the
    // other ranks, reading rank 0's pages from L2, fell back to an older
    // state, rank 0 deleted its newest checkpoint, and every restart
    // failed).
    copy_tree(&t.path().join("kill-l1"), &t.path().join("mlost-l1"));
    copy_tree(&t.path().join("kill-l2"), &t.path().join("mlost-l2"));
    let newest = names_in(&t.path().join("mlost-l1/0/rex"))
        .into_iter()
        .filter(|n| n.ends_with(".manifest"))
        .max()
        .expect("rank 0 keeps a copy of its chain");
    std::fs::remove_file(t.path().join("mlost-l2/0").join(&newest)).unwrap();
    let o = run_job("mlost", &[]);
    success(&o, "the run after rank 0's newest L2 manifest was lost");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("librex: uploaded generation"), "{err}");
    assert!(t.path().join("mlost-l2/0").join(&newest).is_file());
    assert!(String::from_utf8_lossy(&o.stdout).contains("restarted from seq"));
    outputs_equal(s(&t.path().join("mlost-out/o")), s(&ref_out));

    // A lost node: rank 1's L1 is gone after a kill. Every rank restarts
    // from the newest job generation in L2 (the others set their newer L1
    // checkpoints aside by deleting them) and finishes with the same bytes.
    let lost_out = t.path().join("lost-out/o");
    // The runtime controller alone decides the pushes here (no age limit),
    // so L2 lags behind L1 when rank 1's node is lost.
    let slow = ("REX_MAX_AGE", "100000");
    let o = run_job("lost", &[("CRASH_RANK", "3"), ("CRASH_STEP", "57"), slow]);
    assert!(!o.status.success());
    std::fs::remove_dir_all(t.path().join("lost-l1/1")).unwrap();
    let o = run_job("lost", &[slow]);
    success(&o, "the run after a lost node");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("rank 1 restarted from seq"), "{text}");
    outputs_equal(s(&lost_out), s(&ref_out));

    // With partner copies (replicas = 2), the lost rank gets its newer L1
    // checkpoints back from its partner: every rank restarts from the
    // newest checkpoint (step 55, seq 10), not from the older L2 state.
    let k2 = ("REX_REPLICAS", "2");
    let part_out = t.path().join("part-out/o");
    let o = run_job(
        "part",
        &[("CRASH_RANK", "3"), ("CRASH_STEP", "57"), slow, k2],
    );
    assert!(!o.status.success());
    let partner_copies = (0..RANKS)
        .filter(|r| *r != 1)
        .filter(|r| t.path().join(format!("part-l1/{r}/partner-1")).is_dir())
        .count();
    assert!(
        partner_copies >= 1,
        "no rank holds a copy of rank 1's checkpoints"
    );
    std::fs::remove_dir_all(t.path().join("part-l1/1")).unwrap();
    let o = run_job("part", &[slow, k2]);
    success(&o, "the run after a lost node, with partner copies");
    let text = String::from_utf8_lossy(&o.stdout);
    for r in 0..RANKS {
        assert!(
            text.contains(&format!("rank {r} restarted from seq 10 at step 55")),
            "{text}"
        );
    }
    outputs_equal(s(&part_out), s(&ref_out));

    // Rank 1's node lost in the middle of a collective push, after its part
    // of the new job generation reached L2 and before the job manifest:
    // the job restarts from the previous job generation (helper-76:
    // rex_restart_test refused on every rank, every time, taking the part
    // for a committed one whose job manifest was lost). The push is
    // `push-l2 --collective` killed on rank 1 at its N-th durable
    // operation, for the first N that leaves that state.
    let jobs = |l2: &Path| names_in(&l2.join("job")).len();
    let parts = |l2: &Path| {
        names_in(&l2.join("1"))
            .iter()
            .filter(|n| n.ends_with(".manifest"))
            .count()
    };
    let o = run_job("mid", &[("CRASH_RANK", "3"), ("CRASH_STEP", "57"), slow]);
    assert!(!o.status.success());
    let (l1, l2) = (t.path().join("mid-l1"), t.path().join("mid-l2"));
    let (jobs0, parts0) = (jobs(&l2), parts(&l2));
    let (kl1, kl2) = (t.path().join("midk-l1"), t.path().join("midk-l2"));
    let found = first_kill(20, 45, 120, |n| {
        let _ = std::fs::remove_dir_all(&kl1);
        let _ = std::fs::remove_dir_all(&kl2);
        copy_tree(&l1, &kl1);
        copy_tree(&l2, &kl2);
        let vars = format!("REX_FAILPOINT={n} REX_FAILPOINT_SIGNAL=kill");
        let o = mpirun(
            &["push-l2", "--collective", "--l1", s(&kl1), "--l2", s(&kl2)],
            Some((1, &vars)),
        );
        (!o.status.success()).then(|| parts(&kl2) > parts0 && jobs(&kl2) == jobs0)
    });
    assert!(
        found.is_some(),
        "no kill left rank 1's part unfinished in L2"
    );
    std::fs::remove_dir_all(kl1.join("1")).unwrap();
    let o = run_job("midk", &[slow]);
    success(&o, "the run after a node lost in a collective push");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("rank 1 restarted from seq"), "{text}");
    outputs_equal(s(&t.path().join("midk-out/o")), s(&ref_out));

    // The same in the job's first collective push (librex's own, rank 1
    // killed at its N-th durable operation, for the first N that leaves its
    // part in L2 without the job manifest): no job generation ever
    // committed, rank 1 has nothing, the others their L1 checkpoints of
    // that state. The job starts afresh, their checkpoints set aside
    // (helper-78: every restart failed for ever, "rank 1 has nothing to
    // restart from while other ranks do"), and finishes with the same bytes.
    let (fl1, fl2) = (t.path().join("firstk-l1"), t.path().join("firstk-l2"));
    let a = args(&t.path().join("firstk-out/o"));
    std::fs::create_dir_all(t.path().join("firstk-out")).unwrap();
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let found = first_kill(1, 50, 80, |n| {
        let _ = std::fs::remove_dir_all(&fl1);
        let _ = std::fs::remove_dir_all(&fl2);
        let vars = format!("REX_FAILPOINT={n} REX_FAILPOINT_SIGNAL=kill");
        let o = mpi_job_on(&exe, &a, &fl1, &fl2, &[slow], Some((1, &vars)));
        (!o.status.success()).then(|| parts(&fl2) > 0 && jobs(&fl2) == 0)
    });
    assert!(
        found.is_some(),
        "no kill left rank 1's part of the first job generation unfinished"
    );
    std::fs::remove_dir_all(fl1.join("1")).unwrap();
    let o = run_job("firstk", &[slow]);
    success(&o, "the run after a node lost in the first collective push");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("the job starts afresh"), "{err}");
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("restarted from seq"),
        "{err}"
    );
    assert!(
        names_in(&t.path().join("firstk-l1/0"))
            .iter()
            .any(|n| n.contains(".rexic.left-out")),
        "rank 0's checkpoints of the never-committed state were not set aside"
    );
    outputs_equal(s(&t.path().join("firstk-out/o")), s(&ref_out));
    // And a run after that restarts from the new run's state.
    let o = run_job("firstk", &[]);
    success(&o, "the run after the fresh start");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("restarted from seq"), "{text}");
    outputs_equal(s(&t.path().join("firstk-out/o")), s(&ref_out));

    // That job's L2 lost whole (its L1 directories kept): the restart
    // refuses, and deletes nothing of L1's copies of the chains, which the
    // ranks' copies of the job manifest show committed (helper-79: every
    // rank's copy was rolled back, and the job started over with exit 0).
    let (wl1, wl2) = (t.path().join("wiped-l1"), t.path().join("wiped-l2"));
    copy_tree(&t.path().join("firstk-l1"), &wl1);
    std::fs::create_dir_all(&wl2).unwrap();
    let copies = |l1: &Path| -> Vec<Vec<String>> {
        (0..RANKS)
            .map(|r| names_in(&l1.join(format!("{r}/rex"))))
            .collect()
    };
    let before = copies(&wl1);
    assert!(before.iter().all(|c| c.iter().any(|n| n.ends_with(".job"))));
    let o = run_job("wiped", &[]);
    assert!(
        !o.status.success(),
        "the job restarted over a lost L2: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(
        copies(&wl1) == before,
        "L1's copies of the chains were changed"
    );
    outputs_equal(s(&t.path().join("midk-out/o")), s(&ref_out));

    // Every rank must be given the same `replicas`: one rank with another
    // is refused at the start, on every rank alike, naming each rank's
    // value (helper-79: the job hung in the partner exchange until
    // mpirun's timeout killed it). The first rank to report aborts the
    // job, so the others may never print.
    assert_eq!(RANKS, 4);
    let (rl1, rl2) = (t.path().join("repl-l1"), t.path().join("repl-l2"));
    let a = args(&t.path().join("repl-out/o"));
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let o = mpi_job_on(&exe, &a, &rl1, &rl2, &[], Some((1, "REX_REPLICAS=2")));
    assert!(!o.status.success(), "ranks with different replicas ran");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(": rex_init_comm: ")
            && err.contains("different replicas (1 on rank 0, 2, 3; 2 on rank 1;"),
        "{err}"
    );
}

/// The failpoint of the first kill `trial` reports as the state sought
/// (`Some(true)`), trying `hint..end` first, then `start..hint`: the kill
/// searches of a test start where the state was last found, and a change
/// in the number of durable operations before it costs runs, never the
/// test. `trial` returns `None` when the run completed (its failpoint past
/// the last operation), which ends that range.
fn first_kill(
    start: u32,
    hint: u32,
    end: u32,
    mut trial: impl FnMut(u32) -> Option<bool>,
) -> Option<u32> {
    for range in [hint..end, start..hint] {
        for n in range {
            match trial(n) {
                Some(true) => {
                    eprintln!("killed at operation {n}: the state sought");
                    return Some(n);
                }
                Some(false) => {}
                None => break,
            }
        }
    }
    None
}

/// Partner copies are pruned by what their sender pushed: a rank whose L1
/// was lost pushes nothing new, so the other ranks keep their copies of its
/// later checkpoints (they were pruned by the pushing rank's own last seq,
/// which left those checkpoints nowhere; since session 44 that rank holds
/// every rank back at its seq, and the copies stay all the more).
#[test]
fn partner_copies_are_pruned_by_what_their_sender_pushed() {
    let _one_at_a_time = crate::util::exclusive();
    let t = tempfile::tempdir().unwrap();
    let (l1, l2, truth, later) = (
        t.path().join("l1"),
        t.path().join("l2"),
        t.path().join("truth"),
        t.path().join("later"),
    );
    gen_ranks(&l1, "0.5", "64", "4", &truth);
    // More copies than ranks: refused on every rank, nothing copied
    // (helper-72: one rank, `--replicas 2`, exit 0 and no copy).
    let o = mpirun(&["replicate", "--l1", s(&l1), "--replicas", "5"], None);
    assert_eq!(
        o.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("--replicas 5 needs at least 5 ranks"));
    for r in 0..RANKS {
        let names = names_in(&l1.join(r.to_string()));
        assert!(
            !names.iter().any(|n| n.starts_with("partner-")),
            "{names:?}"
        );
    }
    let o = mpirun(&["replicate", "--l1", s(&l1), "--replicas", "2"], None);
    success(&o, "replicate");
    // The copies of rank 1's checkpoints after seq 1, wherever the
    // balanced pairing put them.
    let copies: Vec<PathBuf> = (0..RANKS)
        .flat_map(|r| (2..=4).map(move |seq| (r, seq)))
        .map(|(r, seq)| {
            l1.join(r.to_string())
                .join("partner-1")
                .join(rexctl::l1::ic_file_name(seq))
        })
        .filter(|p| p.is_file())
        .collect();
    assert!(
        copies.len() >= 3,
        "rank 1's seqs 2..=4 have no copies: {copies:?}"
    );
    hold_back(&l1, &later, 1);
    let push = ["push-l2", "--collective", "--l1", s(&l1), "--l2", s(&l2)];
    success(&mpirun(&push, None), "first collective push");
    // What every rank pushed (seqs 0 and 1) needs no copy any more.
    for r in 0..RANKS {
        for sender in 0..RANKS {
            for seq in 0..=1 {
                let c = l1
                    .join(r.to_string())
                    .join(format!("partner-{sender}"))
                    .join(rexctl::l1::ic_file_name(seq));
                assert!(!c.exists(), "{} was kept after its push", c.display());
            }
        }
    }
    release(&later, &l1);
    // The checkpoints after a push are incrementals whose FULL checkpoint
    // L2 holds: they are replicated all the same (helper-58: "no FULL
    // checkpoint", exit 3 on every rank).
    let o = mpirun(&["replicate", "--l1", s(&l1), "--replicas", "2"], None);
    success(&o, "replicate after a push");
    // Rank 1's node is lost. Without its L1 directory, replicate is a
    // configuration error (exit 5, as for a push) on every rank, named
    // (helper-62: exit 1, "open lock file").
    std::fs::remove_dir_all(l1.join("1")).unwrap();
    let o = mpirun(&["replicate", "--l1", s(&l1), "--replicas", "2"], None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(5), "{err}");
    assert!(err.contains("L1 directory") && err.contains("/1:"), "{err}");
    // Its L1 directory is empty: it holds every rank back at seq 1.
    std::fs::create_dir(l1.join("1")).unwrap();
    let o = mpirun(&push, None);
    success(&o, "the push after rank 1 lost its checkpoints");
    assert!(
        String::from_utf8_lossy(&o.stdout)
            .contains("rank 1 has no checkpoint of seq 2 (its newest is seq 1); seq 1 is the newest every rank stands at"),
        "{}",
        show(&push, &o)
    );
    for c in &copies {
        assert!(
            c.is_file(),
            "{} was pruned, though rank 1 never pushed it",
            c.display()
        );
    }
    // A rank that cannot even start (its L1 busy) fails every rank at once:
    // no rank waits in a collective step the others never reach (an extra
    // all-gather after the push once hung them all until mpirun's timeout).
    let held = rexctl::l1::lock::JobLock::acquire(&l1.join("2"), "a test").unwrap();
    let o = mpirun(&push, None);
    drop(held);
    let err = String::from_utf8_lossy(&o.stderr);
    // Every rank exits 4, the busy rank's code: it was 5 on every rank
    // (helper-58), then 4 on the busy rank and 1 on the others, so that
    // mpirun's status depended on which rank ended first.
    assert!(
        o.status.code() == Some(4) && err.contains("busy"),
        "{:?}: {err}",
        o.status.code()
    );
    // A job keeps its number of ranks: a push by 3 of its 4 ranks is
    // refused by every rank, before anything is written or deleted
    // (helper-58: fewer ranks pruned what an absent rank's chain reads).
    let before: Vec<Vec<String>> = (0..RANKS)
        .map(|r| names_in(&l1.join(r.to_string())))
        .collect();
    let mut c = Command::new("mpirun");
    c.args(["--oversubscribe", "--timeout", "120", "-np", "3"]);
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        c.arg("--allow-run-as-root");
    }
    let o = c
        .arg(env!("CARGO_BIN_EXE_rexctl"))
        .args(push)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("a job keeps its number of ranks"), "{err}");
    let after: Vec<Vec<String>> = (0..RANKS)
        .map(|r| names_in(&l1.join(r.to_string())))
        .collect();
    assert_eq!(before, after);
}

/// A rank that cannot start librex fails every rank's `rex_init_comm` at
/// once, with the code of that rank's failure: a bad setting on one rank
/// (helper-62: the others waited in the start's agreement until mpirun's
/// timeout), and a busy L1 directory (the others got `REX_EL2`, "a
/// background push failed").
#[test]
fn a_rank_that_cannot_start_fails_every_ranks_start_alike() {
    let _one_at_a_time = crate::util::exclusive();
    let t = tempfile::tempdir().unwrap();
    let exe = crate::librex::build_c_file(
        "mpicc",
        &crate::librex::repo().join("tests/it/c/mpi_init.c"),
        t.path(),
    );
    let (l1, l2) = (t.path().join("l1"), t.path().join("l2"));
    let start = |rank2: &str| -> Vec<String> {
        let mut c = Command::new("mpirun");
        // Short: the hang this guards against lasted until this timeout.
        c.args(["--oversubscribe", "--timeout", "60", "-np"])
            .arg(RANKS.to_string());
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            c.arg("--allow-run-as-root");
        }
        let script = format!(
            "if [ \"$OMPI_COMM_WORLD_RANK\" = 2 ]; then export {rank2}; fi; exec \"$0\" \"$@\""
        );
        let o = c
            .args(["sh", "-c", &script])
            .arg(&exe)
            .env("REX_L1", &l1)
            .env("REX_L2", &l2)
            .env_remove("REX_CONFIG")
            .env_remove("REX_FAILPOINT")
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{:?}\n{out}\n{err}", o.status);
        let mut lines: Vec<String> = out.lines().map(String::from).collect();
        lines.sort();
        assert_eq!(lines.len(), RANKS as usize, "{out}\n{err}");
        lines
    };
    let every_rank = |lines: &[String], code: i32, own: &str| {
        for (r, l) in lines.iter().enumerate() {
            assert!(
                l.starts_with(&format!("rank {r}: rex_init_comm {code}: ")),
                "{lines:?}"
            );
            let said = if r == 2 || code == 0 { own } else { "rank 2" };
            assert!(l.contains(said), "{lines:?}");
        }
    };
    // REX_ECONFIG (-3) on every rank.
    let lines = start("REX_COLLECTIVE_TABLE=3");
    every_rank(&lines, -3, "collective_table 3");
    // REX_EBUSY (-5) on every rank: rank 2's L1 directory has a producer.
    std::fs::create_dir_all(l1.join("2")).unwrap();
    let held = rexctl::l1::lock::JobLock::acquire_producer(&l1.join("2"), "a test").unwrap();
    let lines = start("UNUSED=1");
    drop(held);
    every_rank(&lines, -5, "busy");
    // And they start when nothing stops them.
    let lines = start("UNUSED=1");
    every_rank(&lines, 0, "");
}

/// `restore --rank R --l1 L1` of a job none of whose job generations
/// committed (no collective push yet, or the first one killed after rank
/// 1's part reached L2 and before the job manifest): rank R's checkpoints
/// in L1/R restore, its uncommitted part in L2 left out (helper-102: the
/// single chain's restore read L1's top, "nothing to restore", exit 3).
#[test]
fn a_rank_restores_from_its_l1_before_any_job_generation_committed() {
    let _one_at_a_time = crate::util::exclusive();
    let t = tempfile::tempdir().unwrap();
    let (l1, l2, truth) = (
        t.path().join("l1"),
        t.path().join("l2"),
        t.path().join("truth"),
    );
    gen_ranks(&l1, "0.5", "64", "2", &truth);
    let restores_each_rank = |ctx: &str| {
        for r in 0..RANKS {
            let out = t.path().join(format!("{ctx}-{r}.rexic"));
            let o = restore_rank(&l2, r, &out, &["--l1", s(&l1)]);
            success(&o, &format!("{ctx}: rank {r}"));
            crate::util::assert_image(&out, &truth.join(format!("{r}.rexic")), ctx);
        }
    };
    restores_each_rank("no push yet");
    let push = ["push-l2", "--collective", "--l1", s(&l1), "--l2", s(&l2)];
    let base = t.path().join("base");
    copy_tree(&l1, &base);
    let mut left_unfinished = false;
    for n in 25..90u32 {
        let _ = std::fs::remove_dir_all(&l1);
        let _ = std::fs::remove_dir_all(&l2);
        copy_tree(&base, &l1);
        let vars = format!("REX_FAILPOINT={n} REX_FAILPOINT_SIGNAL=kill");
        if mpirun(&push, Some((1, &vars))).status.success() {
            break;
        }
        let parts = names_in(&l2.join("1"))
            .iter()
            .filter(|n| n.ends_with(".manifest"))
            .count();
        if parts > 0 && names_in(&l2.join("job")).is_empty() {
            left_unfinished = true;
            break;
        }
    }
    assert!(
        left_unfinished,
        "no kill left rank 1's part in L2 uncommitted"
    );
    restores_each_rank("first push killed");
    // `status` shows each rank's pending checkpoints, the job's and one
    // rank's (it said "0 chains in L2 ..., no pending L1 checkpoint").
    let o = run(&["status", "--l1", s(&l1), "--l2", s(&l2)]);
    success(&o, "status");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("no job generation committed yet"), "{out}");
    assert!(
        out.contains("ranks found in L1 and L2: 0, 1, 2, 3"),
        "{out}"
    );
    for r in 0..RANKS {
        let line = format!(
            "rank {r} L1 {}: 3 pending L1 checkpoints (seq 0..=2",
            l1.join(r.to_string()).display()
        );
        assert!(out.contains(&line), "{out}");
    }
    let o = run(&["status", "--l1", s(&l1), "--l2", s(&l2), "--rank", "1"]);
    success(&o, "status --rank 1");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("rank 1 of the MPI job at"), "{out}");
    assert!(out.contains("3 pending L1 checkpoints (seq 0..=2"), "{out}");
    let o = run(&["status", "--l1", s(&l1), "--l2", s(&l2), "--json"]);
    success(&o, "status --json");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ranks = v["uncommitted"].as_array().unwrap();
    assert_eq!(ranks.len(), RANKS as usize, "{v}");
    assert!(ranks.iter().all(|r| r["status"]["pending_ics"] == 3), "{v}");
    // Without --l1: the ranks, and no claim about them.
    let o = run(&["status", "--l2", s(&l2)]);
    success(&o, "status without --l1");
    assert!(String::from_utf8_lossy(&o.stdout).contains("no L1 directory given"));
    let o = run(&["status", "--l2", s(&l2), "--rank", "1"]);
    assert_eq!(o.status.code(), Some(5), "{}", show(&["status"], &o));
    assert!(stderr(&o).contains("give --l1"), "{}", stderr(&o));
    // A rank is not the job's: refused (it showed "0 chains, no pending L1
    // checkpoint", exit 0). A rank below the highest without its L1/R lost
    // its node: nothing of it can be restored, exit 3 (ranks 0, 1, 3 were
    // shown, exit 0, and the collective restore failed: helper-109).
    let o = run(&["status", "--l1", s(&l1), "--l2", s(&l2), "--rank", "9"]);
    assert_eq!(o.status.code(), Some(5), "{}", show(&["status"], &o));
    std::fs::rename(l1.join("2"), t.path().join("lost-2")).unwrap();
    let o = run(&["status", "--l1", s(&l1), "--l2", s(&l2)]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&["status"], &o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("rank 2: NO L1"));
    let o = run(&["status", "--l1", s(&l1), "--l2", s(&l2), "--rank", "2"]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&["status"], &o));
    assert!(
        stderr(&o).contains("nothing of it can be restored"),
        "{}",
        stderr(&o)
    );
    std::fs::rename(t.path().join("lost-2"), l1.join("2")).unwrap();
    // Fewer processes than L1 has ranks: refused on every rank (3 of the 4
    // ranks were restored, exit 0: helper-109); as many: every rank.
    let pattern = t.path().join("coll-{rank}.rexic");
    let mut args = vec!["restore", "--collective", "--l1", s(&l1), "--l2", s(&l2)];
    args.extend(["-o", s(&pattern)]);
    let o = mpirun_np(3, &args, None);
    assert_eq!(o.status.code(), Some(3), "{}", show(&args, &o));
    assert!(
        stderr(&o).contains("no job generation committed yet, and L1 holds rank 3's checkpoints"),
        "{}",
        show(&args, &o)
    );
    assert!(!t.path().join("coll-0.rexic").exists());
    success(&mpirun(&args, None), "the collective restore");
    for r in 0..RANKS {
        let image = t.path().join(format!("coll-{r}.rexic"));
        crate::util::assert_image(&image, &truth.join(format!("{r}.rexic")), "collective");
    }
    // From L2 alone there is nothing committed to restore.
    let o = restore_rank(&l2, 0, &t.path().join("none.rexic"), &["--l2-only"]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&["restore"], &o));
}

/// A single chain's L1 directory, its rank named by hand, restores its own
/// checkpoints even when it holds a subdirectory named like the rank
/// (helper-104: the subdirectory's were taken for an MPI rank's).
#[test]
fn a_single_chain_s_l1_with_a_rank_named_restores_its_own_checkpoints() {
    let t = tempfile::tempdir().unwrap();
    let (l1, l2, truth) = (
        t.path().join("l1"),
        t.path().join("l2"),
        t.path().join("truth.rexic"),
    );
    ok(&[
        "gen",
        s(&l1),
        "--count",
        "3",
        "--pages",
        "64",
        "--truth",
        s(&truth),
    ]);
    ok(&[
        "gen",
        s(&l1.join("0")),
        "--count",
        "2",
        "--pages",
        "64",
        "--seed",
        "9",
    ]);
    let out = t.path().join("out.rexic");
    let o = restore_rank(&l2, 0, &out, &["--l1", s(&l1)]);
    success(&o, "a single chain's L1, rank 0 named");
    assert_image(&out, &truth, "the single chain's own state");
}

/// A rank whose L1 directory holds a FULL checkpoint newer than its part of
/// the newest job generation (its job restarted past a fallback and
/// started a new run) restores that state, from L1 alone (helper-63:
/// "rank 0 restored generation None, but its generation in the newest job
/// generation is Some(1)", exit 3, until the next collective push), also
/// when its new run counts seqs from 0 again (helper-89).
#[test]
fn a_rank_restores_its_pending_full_checkpoint_newer_than_its_job_generation() {
    use rexctl::control::config::{Config, ConfigLayer, TrackerChoice};
    let _one_at_a_time = crate::util::exclusive();
    let t = tempfile::tempdir().unwrap();
    let (l1, l2, truth) = (
        t.path().join("l1"),
        t.path().join("l2"),
        t.path().join("truth"),
    );
    gen_ranks(&l1, "0.5", "64", "2", &truth);
    let push = ["push-l2", "--collective", "--l1", s(&l1), "--l2", s(&l2)];
    success(&mpirun(&push, None), "collective push");
    // Rank 0's new run: a job on its directories writes a FULL checkpoint.
    let cfg = Config::resolve(
        ConfigLayer {
            l1: Some(l1.join("0")),
            l2: Some(l2.join("0")),
            l2_thread: Some(false),
            tracker: Some(TrackerChoice::Mprotect),
            ..Default::default()
        },
        Vec::new(),
    )
    .unwrap();
    let mut rex = rexctl::job::Rex::with_config(cfg).unwrap();
    let n = 3 * 4096;
    let a = rex.alloc(1, n).unwrap();
    // SAFETY: `n` bytes from rex.alloc.
    unsafe { std::slice::from_raw_parts_mut(a, n) }.fill(7);
    let c = rex.checkpoint().unwrap();
    assert!(c.full);
    rex.finalize().unwrap();
    let out = t.path().join("r0.rexic");
    let o = restore_rank(&l2, 0, &out, &["--l1", s(&l1)]);
    success(&o, "rank 0 from its pending FULL checkpoint");
    let img = rexctl::format::ic::IcFile::open(&out).unwrap();
    assert_eq!(img.meta().seq(), c.seq);
    // The other ranks restore their part of the job generation as before.
    let o = restore_rank(&l2, 1, &t.path().join("r1.rexic"), &["--l1", s(&l1)]);
    success(&o, "rank 1");
    // Rank 2's job restarted by hand, counting seqs from 0 again: its new
    // run's state is newer whatever its seqs (helper-89: refused while the
    // new run's seq was below the job generation's).
    let mut w = crate::util::workload("balanced", 32, 11);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let want = crate::util::take_until_at(&mut w, &l1.join("2"), 1, &truth.join("new"), now);
    let out = t.path().join("r2.rexic");
    let o = restore_rank(&l2, 2, &out, &["--l1", s(&l1)]);
    success(&o, "rank 2 from its new run, seqs from 0");
    crate::util::assert_image(&out, &want, "rank 2's new run");
}

/// `restore --fallback` on an MPI job: a damaged pending checkpoint of one
/// rank takes every rank of `--collective` back to the seq before it, and
/// rank 1's part of the newest job generation damaged in both copies takes
/// every rank back to the job generation before (ranks whose own part is
/// intact restore theirs from L2). Without `--fallback` both fail (exit 3)
/// and no image appears; `--rank R --fallback` restores one rank's newest
/// valid state. It was refused with --collective and --rank.
#[test]
fn a_damaged_rank_takes_the_whole_job_back_with_fallback() {
    let _one_at_a_time = crate::util::exclusive();
    let t = tempfile::tempdir().unwrap();
    let truth = |n: u64| t.path().join(format!("t{n}"));
    let all = t.path().join("all");
    gen_ranks(&all, "0.5", "64", "6", &truth(6));
    for n in [3, 5] {
        let dir = t.path().join(format!("g{n}"));
        gen_ranks(&dir, "0.5", "64", &n.to_string(), &truth(n));
    }
    let (l1, l2, later) = (
        t.path().join("l1"),
        t.path().join("l2"),
        t.path().join("later"),
    );
    copy_tree(&all, &l1);
    std::fs::create_dir_all(&l2).unwrap();
    let push = ["push-l2", "--collective", "--l1", s(&l1), "--l2", s(&l2)];
    // Job generation 1: seq 0..=3; job generation 2: seq 4..=5; 6 pending.
    for last in [3, 5] {
        hold_back(&l1, &later, last);
        success(&mpirun(&push, None), "collective push");
        release(&later, &l1);
    }
    assert!(l2.join("job/j00000002.job").is_file());
    let flip = |p: &Path| {
        let mut b = std::fs::read(p).unwrap();
        for at in [b.len() / 4, b.len() / 2, 3 * b.len() / 4] {
            b[at] ^= 0x40;
        }
        std::fs::write(p, &b).unwrap();
    };
    let coll = t.path().join("coll");
    std::fs::create_dir_all(&coll).unwrap();
    let image = |r: u32| coll.join(format!("image-{r}.rexic"));
    let collective = |extra: &[&str]| {
        let pattern = coll.join("image-{rank}.rexic");
        let mut args = vec!["restore", "--collective", "--l1", s(&l1), "--l2", s(&l2)];
        args.extend(["-o", s(&pattern), "-f"]);
        args.extend_from_slice(extra);
        mpirun(&args, None)
    };
    let check = |want: u64, ctx: &str| {
        for r in 0..RANKS {
            let want = truth(want).join(format!("{r}.rexic"));
            assert_image(&image(r), &want, &format!("{ctx}, rank {r}"));
            std::fs::remove_file(image(r)).unwrap();
        }
    };

    // Rank 2's checkpoint 6 damaged.
    let c6 = l1.join("2/ckpt-00000006.rexic");
    flip(&c6);
    let o = collective(&[]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&["restore"], &o));
    assert!((0..RANKS).all(|r| !image(r).exists()));
    let o = collective(&["--fallback"]);
    success(
        &o,
        "collective restore --fallback past rank 2's checkpoint 6",
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("FALLBACK"),
        "{}",
        show(&["restore"], &o)
    );
    check(5, "rank 2's checkpoint 6 damaged");
    // One rank alone: its own newest valid state.
    let one = t.path().join("one.rexic");
    let o = restore_rank(&l2, 2, &one, &["--l1", s(&l1), "--fallback"]);
    success(&o, "restore --rank 2 --fallback");
    assert_image(&one, &truth(5).join("2.rexic"), "rank 2 alone");
    let o = restore_rank(&l2, 0, &one, &["--l1", s(&l1), "--fallback"]);
    success(&o, "restore --rank 0 --fallback");
    assert_image(&one, &truth(6).join("0.rexic"), "rank 0 alone");
    flip(&c6);

    // Rank 1's part of job generation 2 damaged in L2 and in L1's copy.
    let mut damaged = 0;
    for dir in [l2.join("1"), l1.join("1/rex")] {
        let rps = dir.join("g00000002.rps");
        if rps.exists() {
            flip(&rps);
            damaged += 1;
        }
    }
    assert!(damaged > 0);
    let o = collective(&[]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&["restore"], &o));
    assert!((0..RANKS).all(|r| !image(r).exists()));
    let o = collective(&["--fallback"]);
    success(
        &o,
        "collective restore --fallback past rank 1's job generation 2",
    );
    check(3, "rank 1's part of job generation 2 damaged");
    // From L2 alone: rank 1 restores its part of job generation 1, and
    // says why.
    let o = restore_rank(&l2, 1, &one, &["--fallback", "--json"]);
    success(&o, "restore --rank 1 --fallback from L2 alone");
    assert_image(&one, &truth(3).join("1.rexic"), "rank 1 from L2 alone");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["fell_back"]
            .as_str()
            .is_some_and(|w| w.contains("job generation 2")),
        "{v}"
    );
    // `--job-generation` names one: no fallback beside it.
    let o = restore_rank(&l2, 1, &one, &["--fallback", "--job-generation", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", show(&["restore"], &o));

    // Fewer processes than the job has ranks: refused on every one, no
    // image (helper-66: ranks 0..=2 published a seq rank 3 never wrote).
    let pattern = coll.join("image-{rank}.rexic");
    let args = [
        "restore",
        "--collective",
        "--l1",
        s(&l1),
        "--l2",
        s(&l2),
        "-o",
        s(&pattern),
    ];
    let o = mpirun_np(3, &args, None);
    assert_eq!(o.status.code(), Some(3), "{}", show(&["restore"], &o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("the job has 4 ranks"),
        "{}",
        show(&["restore"], &o)
    );
    assert!((0..RANKS).all(|r| !image(r).exists()));
}

/// A rank's chain read as a plain chain is refused, naming `--rank`: with no
/// shared pages (no references to stop it), a plain restore of a rank whose
/// generation of a collective push killed before its commit restored that
/// uncommitted generation with exit 0 (helper-66).
#[test]
fn a_rank_s_chain_is_never_restored_as_a_plain_chain() {
    let _one_at_a_time = crate::util::exclusive();
    let t = tempfile::tempdir().unwrap();
    let (all, l1, later, l2) = (
        t.path().join("all"),
        t.path().join("l1"),
        t.path().join("later"),
        t.path().join("l2"),
    );
    gen_ranks(&all, "0", "64", "4", &t.path().join("truth"));
    copy_tree(&all, &l1);
    hold_back(&l1, &later, 2);
    std::fs::create_dir_all(&l2).unwrap();
    let push = ["push-l2", "--collective", "--l1", s(&l1), "--l2", s(&l2)];
    success(&mpirun(&push, None), "first collective push");
    release(&later, &l1);
    let base = t.path().join("base");
    copy_tree(&l1, &base.join("l1"));
    copy_tree(&l2, &base.join("l2"));
    let mut uncommitted = 0;
    for n in [6u32, 9, 12, 16, 21, 27, 34, 40, 46, 52] {
        let trial = t.path().join(format!("trial-{n}"));
        copy_tree(&base, &trial);
        let (tl1, tl2) = (trial.join("l1"), trial.join("l2"));
        let vars = format!("REX_FAILPOINT={n} REX_FAILPOINT_SIGNAL=kill");
        let args = ["push-l2", "--collective", "--l1", s(&tl1), "--l2", s(&tl2)];
        mpirun(&args, Some((2, &vars)));
        let committed = tl2.join("job/j00000002.job").is_file();
        for r in 0..RANKS {
            let chain = tl2.join(r.to_string());
            uncommitted += usize::from(!committed && chain.join("g00000002.manifest").is_file());
            let out = trial.join(format!("plain-{r}.rexic"));
            let o = run(&["restore", "--l2", s(&chain), "-o", s(&out)]);
            assert_eq!(
                o.status.code(),
                Some(3),
                "n={n}: {}",
                show(&["restore"], &o)
            );
            assert!(
                String::from_utf8_lossy(&o.stderr).contains("--rank"),
                "n={n}: {}",
                show(&["restore"], &o)
            );
            assert!(!out.exists());
            let (rl1, out) = (tl1.join(r.to_string()), trial.join(format!("l1-{r}.rexic")));
            let o = run(&["restore", "--l1", s(&rl1), "--l2", s(&chain), "-o", s(&out)]);
            assert_eq!(
                o.status.code(),
                Some(3),
                "n={n}: {}",
                show(&["restore"], &o)
            );
            assert!(!out.exists());
        }
        std::fs::remove_dir_all(&trial).unwrap();
    }
    assert!(uncommitted > 0, "no kill left an uncommitted generation");
}

/// `verify`, `status` and `gc` of a job's location take the job's L1
/// directory (each rank's L1/R) and `--rank R` (rank R's chain, on a
/// directory as on a bucket); a rank's chain alone is refused by verify
/// as by restore; gc collects every rank it can (helper-66: verify said ok
/// with a rank's pending checkpoint damaged, `--rank 1` read the job's
/// top level as a plain chain, `verify --l2 JOB/1` passed an uncommitted
/// generation, and gc stopped with exit 1 at a missing rank).
#[test]
fn verify_status_and_gc_of_a_job_check_each_rank_s_l1_and_take_a_rank() {
    let _one_at_a_time = crate::util::exclusive();
    let t = tempfile::tempdir().unwrap();
    let (all, truth) = (t.path().join("all"), t.path().join("truth"));
    gen_ranks(&all, "0.5", "300", "6", &truth);
    let (l1, later, l2) = (
        t.path().join("l1"),
        t.path().join("later"),
        t.path().join("l2"),
    );
    copy_tree(&all, &l1);
    hold_back(&l1, &later, 3);
    std::fs::create_dir_all(&l2).unwrap();
    let o = mpirun(
        &["push-l2", "--collective", "--l1", s(&l1), "--l2", s(&l2)],
        None,
    );
    success(&o, "collective push");
    release(&later, &l1);

    // Every rank's L1: its pending checkpoints, checked.
    let text = ok(&["verify", "--l2", s(&l2), "--l1", s(&l1)]);
    for r in 0..RANKS {
        assert!(
            text.contains(&format!("rank {r} L1 "))
                && text.contains("3 checkpoints pending (seqs 4..=6)"),
            "{text}"
        );
    }
    // A pending checkpoint of rank 2 whose page data is damaged.
    let victim = l1.join("2/ckpt-00000005.rexic");
    let good = std::fs::read(&victim).unwrap();
    let mut bad = good.clone();
    let at = bad.len() - 100;
    bad[at] ^= 0x40;
    std::fs::write(&victim, &bad).unwrap();
    let o = run(&["verify", "--l2", s(&l2), "--l1", s(&l1)]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&["verify"], &o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("rank 2 L1: BAD") && out.contains("ckpt-00000005.rexic"),
        "{out}"
    );
    // L2 alone is fine.
    ok(&["verify", "--l2", s(&l2)]);
    // An invalid manifest under a rank's chain: that rank is not "ok"
    // (helper-89: "ok" above the error that made verify exit 3).
    let junk = l2.join("1/g00000000.manifest");
    std::fs::write(&junk, b"junk").unwrap();
    let o = run(&["verify", "--l2", s(&l2)]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&["verify"], &o));
    let text = String::from_utf8_lossy(&o.stdout);
    let rank1 = text.lines().find(|l| l.starts_with("rank 1:")).unwrap();
    assert!(rank1.contains("BAD") && !rank1.contains("ok"), "{text}");
    std::fs::remove_file(&junk).unwrap();
    // Said on standard error, which -q keeps (helper-71: silent).
    let o = run(&["verify", "-q", "--l2", s(&l2), "--l1", s(&l1)]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&["verify"], &o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("ckpt-00000005.rexic"),
        "{}",
        show(&["verify"], &o)
    );
    std::fs::write(&victim, &good).unwrap();

    // `verify --repair`: rank 1's L2 RPS altered (what no push reads) is
    // rewritten from its L1/1 copy; with --rank, only that rank is touched
    // (rank 0 reads pages rank 1 stores: its verify then fails on them).
    let rps = l2.join("1/g00000001.rps");
    let good_rps = std::fs::read(&rps).unwrap();
    let mut bad = good_rps.clone();
    let at = bad.len() / 2;
    bad[at] ^= 0x10;
    std::fs::write(&rps, &bad).unwrap();
    let o = run(&[
        "verify",
        "--l2",
        s(&l2),
        "--l1",
        s(&l1),
        "--rank",
        "0",
        "--repair",
    ]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        show(&["verify --repair --rank 0"], &o)
    );
    assert_eq!(
        std::fs::read(&rps).unwrap(),
        bad,
        "--rank 0 repaired rank 1"
    );
    let text = ok(&["verify", "--l2", s(&l2), "--l1", s(&l1), "--repair"]);
    assert!(
        text.contains("repaired: rank 1 L2 generation 1") && text.contains("g00000001.rps"),
        "{text}"
    );
    assert_eq!(std::fs::read(&rps).unwrap(), good_rps);

    // One rank: its chain (references read from the others) and its L1.
    let text = ok(&["verify", "--l2", s(&l2), "--l1", s(&l1), "--rank", "1"]);
    assert!(text.contains("rank 1: generation 1"), "{text}");
    assert!(!text.contains("rank 0"), "{text}");
    let text = ok(&["status", "--l2", s(&l2), "--l1", s(&l1), "--rank", "1"]);
    assert!(
        text.contains("rank 1 of the MPI job") && text.contains("generation 1 in job generation 1"),
        "{text}"
    );
    assert!(text.contains("1 chain in L2"), "{text}");
    assert!(
        text.contains("3 pending L1 checkpoints (seq 4..=6"),
        "{text}"
    );
    // A damaged newest job manifest is said with --rank too (helper-71).
    let j1 = l2.join("job/j00000001.job");
    let good_j1 = std::fs::read(&j1).unwrap();
    let mut bad_j1 = good_j1.clone();
    bad_j1[good_j1.len() / 2] ^= 0x10;
    std::fs::write(&j1, &bad_j1).unwrap();
    let o = run(&["status", "--l2", s(&l2), "--l1", s(&l1), "--rank", "1"]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&["status"], &o));
    std::fs::write(&j1, &good_j1).unwrap();
    let o = run(&["verify", "--l2", s(&l2), "--rank", "4"]);
    assert_eq!(o.status.code(), Some(5), "{}", show(&["verify"], &o));
    // A rank's chain alone is refused, naming the way.
    let o = run(&["verify", "--l2", s(&l2.join("1"))]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&["verify"], &o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--rank R"));

    // An --l1 under which no rank has its directory: a typo (exit 5).
    let typo = t.path().join("l1-typo");
    for cmd in ["verify", "status", "gc"] {
        let o = run(&[cmd, "--l2", s(&l2), "--l1", s(&typo)]);
        assert_eq!(o.status.code(), Some(5), "{}", show(&[cmd], &o));
    }
    // One rank's L1 missing (a lost node): said, and not ok.
    let aside = t.path().join("aside-3");
    std::fs::rename(l1.join("3"), &aside).unwrap();
    for cmd in ["verify", "status"] {
        for rank in [&[][..], &["--rank", "3"][..]] {
            let mut args = vec![cmd, "--l2", s(&l2), "--l1", s(&l1)];
            args.extend_from_slice(rank);
            let o = run(&args);
            assert_eq!(o.status.code(), Some(3), "{}", show(&args, &o));
            assert!(
                String::from_utf8_lossy(&o.stdout).contains("rank 3 L1: BAD"),
                "{}",
                show(&args, &o)
            );
        }
    }
    std::fs::rename(&aside, l1.join("3")).unwrap();
    ok(&["status", "--l2", s(&l2), "--l1", s(&l1)]);

    // gc: rank 2's chain missing is said (exit 3), ranks 1 and 3 are
    // collected all the same; --rank 1 collects rank 1 alone.
    let junk = |r: u32| l2.join(format!("{r}/g00000099.rps"));
    for r in [1, 3] {
        std::fs::write(junk(r), b"left by a crash").unwrap();
    }
    let aside = t.path().join("aside-l2-2");
    std::fs::rename(l2.join("2"), &aside).unwrap();
    let o = run(&["gc", "--l2", s(&l2), "--grace", "0"]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&["gc"], &o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("rank 2"));
    assert!(!junk(1).exists() && !junk(3).exists());
    std::fs::rename(&aside, l2.join("2")).unwrap();
    for r in [1, 3] {
        std::fs::write(junk(r), b"left by a crash").unwrap();
    }
    let text = ok(&[
        "gc",
        "--l2",
        s(&l2),
        "--grace",
        "0",
        "--rank",
        "1",
        "--l1",
        s(&l1),
    ]);
    assert!(text.contains("deleted g00000099.rps"), "{text}");
    assert!(!junk(1).exists() && junk(3).exists());
    // Nothing of the job was lost on the way.
    assert_ranks_restore_l1(&l1, &l2, &truth, t.path(), "after verify, status and gc");
}

/// A first collective push by fewer ranks than L1 holds directories for
/// (run without `mpirun`, or with a smaller -np) is refused (exit 5) and
/// commits nothing: it made a job of one rank, whose later pushes with
/// every rank were refused for good, and rank 1's checkpoints were never
/// pushed (helper-72). With every rank, it pushes.
#[test]
fn a_first_collective_push_with_ranks_missing_is_refused() {
    let _one_at_a_time = crate::util::exclusive();
    let t = tempfile::tempdir().unwrap();
    let (l1, l2, truth) = (t.path().join("l1"), t.path().join("l2"), t.path().join("t"));
    gen_ranks(&l1, "0.5", "64", "2", &truth);
    let args = ["push-l2", "--collective", "--l1", s(&l1), "--l2", s(&l2)];
    let o = run(&args);
    assert_eq!(o.status.code(), Some(5), "{}", show(&args, &o));
    assert!(
        stderr(&o).contains("L1 directory of rank 1"),
        "{}",
        stderr(&o)
    );
    let o = mpirun_np(RANKS - 1, &args, None);
    assert!(!o.status.success(), "{}", show(&args, &o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("L1 directory of rank 3")
            || stderr(&o).contains("L1 directory of rank 3"),
        "{}",
        show(&args, &o)
    );
    assert!(
        !l2.join("job").is_dir() || names_in(&l2.join("job")).is_empty(),
        "a job generation was committed"
    );
    success(&mpirun(&args, None), "the push of every rank");
    for r in 0..RANKS {
        let out = t.path().join(format!("r{r}.rexic"));
        ok(&[
            "restore",
            "--l2",
            s(&l2),
            "--rank",
            &r.to_string(),
            "--l2-only",
            "-o",
            s(&out),
        ]);
        assert_image(
            &out,
            &truth.join(format!("{r}.rexic")),
            &format!("rank {r}"),
        );
    }
}

/// A restore from an MPI job's location takes the rank the launcher gives
/// (SLURM_PROCID, PMIX_RANK, PMI_RANK, OMPI_COMM_WORLD_RANK,
/// FLUX_TASK_RANK), as every command does, with L2 alone and with the
/// job's L1 directory (its `L1/R`), each rank into `--out` with `{rank}`
/// replaced (under mpirun too); an `--out` without `{rank}` is refused
/// then (exit 2: every rank would write the same file, helper-100), and
/// so is a restore with no rank named, rather than taking rank 0 for the
/// user (helper-99: the launcher's rank was read for a single chain only,
/// and every such restore said "no valid generation to restore", exit 3).
#[test]
fn a_restore_from_a_job_s_location_takes_the_launcher_s_rank() {
    let _one_at_a_time = crate::util::exclusive();
    let t = tempfile::tempdir().unwrap();
    let (l1, l2, truth) = (
        t.path().join("l1"),
        t.path().join("l2"),
        t.path().join("truth"),
    );
    gen_ranks(&l1, "0.5", "64", "3", &truth);
    std::fs::create_dir_all(&l2).unwrap();
    let push = ["push-l2", "--collective", "--l1", s(&l1), "--l2", s(&l2)];
    success(&mpirun(&push, None), "collective push");
    let vars = [
        "SLURM_PROCID",
        "PMIX_RANK",
        "PMI_RANK",
        "OMPI_COMM_WORLD_RANK",
        "FLUX_TASK_RANK",
    ];
    for (i, var) in vars.iter().enumerate() {
        let r = (i as u32 + 1) % RANKS;
        for with_l1 in [false, true] {
            let out = t.path().join(format!("{var}-{with_l1}-{{rank}}.rexic"));
            let mut c = crate::util::rexctl();
            c.args(["restore", "--l2", s(&l2), "-o", s(&out)]);
            if with_l1 {
                c.args(["--l1", s(&l1)]);
            }
            let o = c.env(var, r.to_string()).output().unwrap();
            assert!(o.status.success(), "{var}={r}: {}", show(&["restore"], &o));
            assert_image(
                &t.path().join(format!("{var}-{with_l1}-{r}.rexic")),
                &truth.join(format!("{r}.rexic")),
                &format!("{var}={r}, L1 too: {with_l1}"),
            );
        }
        let one = t.path().join(format!("{var}.rexic"));
        let mut c = crate::util::rexctl();
        c.args(["restore", "--l2", s(&l2), "-o", s(&one)]);
        let o = c.env(var, r.to_string()).output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(2),
            "{var}: {}",
            show(&["restore"], &o)
        );
        assert!(
            stderr(&o).contains("{rank}") && !one.exists(),
            "{}",
            stderr(&o)
        );
    }
    let each = t.path().join("mpirun-{rank}.rexic");
    let args = ["restore", "--l2", s(&l2), "-o", s(&each)];
    success(&mpirun(&args, None), "a restore under mpirun");
    for r in 0..RANKS {
        assert_image(
            &t.path().join(format!("mpirun-{r}.rexic")),
            &truth.join(format!("{r}.rexic")),
            &format!("mpirun, rank {r}"),
        );
    }
    let out = t.path().join("none.rexic");
    let mut c = crate::util::rexctl();
    c.args(["restore", "--l2", s(&l2), "-o", s(&out)]);
    for var in vars.iter().chain(&["REX_RANK"]) {
        c.env_remove(var);
    }
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", show(&["restore"], &o));
    assert!(
        stderr(&o).contains("--rank") && !out.exists(),
        "{}",
        stderr(&o)
    );
}

/// Copies the IC files (`ckpt-*`) of `from` into `to`.
fn copy_checkpoints(from: &Path, to: &Path) {
    for n in names_in(from).iter().filter(|n| n.starts_with("ckpt-")) {
        std::fs::copy(from.join(n), to.join(n)).unwrap();
    }
}

/// A collective push never commits a job generation whose ranks stand at
/// different seqs: a rank behind (its node lost since the last push, so
/// nothing pending; or still writing the checkpoint the others finished)
/// holds the others back at its newest seq, their newer checkpoints staying
/// in L1, said as "held back". Session 43 found the push committing ranks
/// at seq 4 beside a lost rank at seq 1; no collective restore could
/// then take the job (exit 3) without `--fallback`.
#[test]
fn a_rank_behind_holds_a_collective_push_back_at_its_newest_seq() {
    let _one_at_a_time = crate::util::exclusive();
    let t = tempfile::tempdir().unwrap();
    let truth = |n: u64| t.path().join(format!("t{n}"));
    let (l1, l2, later, lost) = (
        t.path().join("l1"),
        t.path().join("l2"),
        t.path().join("later"),
        t.path().join("lost"),
    );
    gen_ranks(&t.path().join("g1"), "0.5", "64", "1", &truth(1));
    gen_ranks(&l1, "0.5", "64", "4", &truth(4));
    std::fs::create_dir_all(&l2).unwrap();
    let push = ["push-l2", "--collective", "--l1", s(&l1), "--l2", s(&l2)];
    // Job generation 1: seq 0..=1 on every rank.
    hold_back(&l1, &later, 1);
    success(&mpirun(&push, None), "the first collective push");
    release(&later, &l1);
    let ckpts = |r: u32| {
        names_in(&l1.join(r.to_string()))
            .into_iter()
            .filter(|n| n.starts_with("ckpt-"))
            .collect::<Vec<_>>()
    };
    // Rank 2's L1 directory gone, checkpoints 2..=4 with it (its node
    // lost, L1 in memory): the push fails on every rank, says why and what
    // to do, and makes nothing (a librex restart would take an L1/2 with a
    // copy of the chain for a rank that is not lost: helper-108).
    std::fs::rename(l1.join("2"), &lost).unwrap();
    let o = mpirun(&push, None);
    assert_eq!(o.status.code(), Some(5), "{}", show(&push, &o));
    assert!(
        stderr(&o).contains(&format!(
            "L1 directory {}: missing: rank 2 of the job lost its node?",
            l1.join("2").display()
        )),
        "{}",
        show(&push, &o)
    );
    assert!(!l1.join("2").exists());
    // Made again, empty: the push holds the others back at rank 2's seq.
    std::fs::create_dir(l1.join("2")).unwrap();
    let o = mpirun(&push, None);
    success(&o, "the push after rank 2 lost its L1 directory");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("rank 2 has no checkpoint of seq 2 (its newest is seq 1); seq 1 is the newest every rank stands at"),
        "{out}"
    );
    assert_eq!(
        names_in(&l2.join("job")),
        ["j00000001.job"],
        "a job generation committed past rank 2's seq"
    );
    for r in [0, 1, 3] {
        assert_eq!(ckpts(r).len(), 3, "rank {r}'s held-back checkpoints");
    }
    // The whole job restarts at seq 1, from L1 and L2 and from L2 alone.
    let coll = t.path().join("coll");
    std::fs::create_dir_all(&coll).unwrap();
    let pattern = coll.join("image-{rank}.rexic");
    for extra in [&["--l1", s(&l1)][..], &["--l2-only"][..]] {
        let mut args = vec!["restore", "--collective", "--l2", s(&l2)];
        args.extend(["-o", s(&pattern), "-f"]);
        args.extend_from_slice(extra);
        success(&mpirun(&args, None), "the collective restore");
        for r in 0..RANKS {
            let image = coll.join(format!("image-{r}.rexic"));
            let want = truth(1).join(format!("{r}.rexic"));
            assert_image(&image, &want, &format!("{extra:?}, rank {r}"));
        }
    }
    // Rank 2 was only behind (writing them): once its checkpoints are in,
    // the next push takes every rank to seq 4.
    for n in names_in(&lost)
        .into_iter()
        .filter(|n| n.starts_with("ckpt-"))
    {
        std::fs::rename(lost.join(&n), l1.join("2").join(&n)).unwrap();
    }
    let o = mpirun(&push, None);
    success(&o, "the push with every rank at seq 4");
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("held back"),
        "{}",
        show(&push, &o)
    );
    assert!(l2.join("job/j00000002.job").is_file());
    assert_ranks_restore(&l2, &truth(4), t.path(), "job generation 2");
    for r in 0..RANKS {
        assert!(ckpts(r).is_empty(), "rank {r}'s checkpoints not pushed");
    }

    // The job restarted by hand as new runs counting from seq 0 again
    // (captures of live processes, taken now), and rank 2's node lost
    // before its first checkpoint: rank 2 stands at the old run's seq 4,
    // the others have a seq 4 of the new runs. Numbers alike, two lives of
    // the job: the push holds everything back and the collective restore
    // refuses (helper-105: it put rank 2's old seq 4 beside the others' new
    // one, exit 0).
    let captures: Vec<_> = [0, 1, 3]
        .into_iter()
        .map(|r| {
            let dir = t.path().join(format!("cap-{r}"));
            let child = Command::new(env!("CARGO_BIN_EXE_rexctl"))
                .args(["capture", "--l1", s(&dir), "--interval", "0.2"])
                .args(["--count", "5", "--", "sleep", "3"])
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap();
            (r, dir, child)
        })
        .collect();
    for (r, dir, mut child) in captures {
        assert!(child.wait().unwrap().success(), "capture of rank {r}");
        copy_checkpoints(&dir, &l1.join(r.to_string()));
    }
    let o = mpirun(&push, None);
    success(&o, "the push of a job restarted as new runs");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("no seq is one state of the job on every rank"),
        "{out}"
    );
    assert!(!l2.join("job/j00000003.job").exists(), "{out}");
    for r in 0..RANKS {
        let _ = std::fs::remove_file(coll.join(format!("image-{r}.rexic")));
    }
    let mut args = vec!["restore", "--collective", "--l2", s(&l2), "--l1", s(&l1)];
    args.extend(["-o", s(&pattern), "-f"]);
    let o = mpirun(&args, None);
    assert_eq!(o.status.code(), Some(3), "{}", show(&args, &o));
    assert!(
        stderr(&o).contains("no seq is one state of the job on every rank: rank 2's checkpoint of seq 4 was taken before rank"),
        "{}",
        show(&args, &o)
    );
    assert!(names_in(&coll).is_empty(), "{:?}", names_in(&coll));

    // A job's first push with no seq in common, made full (`--full`, as
    // librex's first push is): nothing to push on any rank (helper-107: a
    // rank with every checkpoint held back and no generation to rewrite
    // reached an unreachable!).
    let (f1, f2) = (t.path().join("first-l1"), t.path().join("first-l2"));
    copy_tree(&t.path().join("g1"), &f1);
    for n in names_in(&f1.join("0")) {
        std::fs::remove_file(f1.join("0").join(n)).unwrap();
    }
    copy_checkpoints(&t.path().join("cap-0"), &f1.join("0"));
    let first = [
        "push-l2",
        "--collective",
        "--full",
        "--l1",
        s(&f1),
        "--l2",
        s(&f2),
    ];
    let o = mpirun(&first, None);
    success(&o, "a first push with two lives");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("another life of the job"),
        "{}",
        show(&first, &o)
    );
    assert!(!f2.join("job").is_dir() || names_in(&f2.join("job")).is_empty());
}

/// A job restarted by hand as new runs numbering from seq 0 again, below
/// the seq of the job's newest job generation, on every rank: the
/// collective restore takes the new runs' newest common seq, 1 (rank 0 is
/// a checkpoint behind the others' 2), as each rank's own restore does
/// (helper-108: the cut was passed as `--seq` to every rank, which refused
/// a seq below its member generation, exit 3; helper-109: so did a rank
/// past the cut, and no command restored that seq).
#[test]
fn a_job_restarted_by_hand_from_seq_0_restores_collectively() {
    let _one_at_a_time = crate::util::exclusive();
    let t = tempfile::tempdir().unwrap();
    let (l1, l2) = (t.path().join("l1"), t.path().join("l2"));
    gen_ranks(&l1, "0.5", "64", "3", &t.path().join("truth"));
    std::fs::create_dir_all(&l2).unwrap();
    let push = ["push-l2", "--collective", "--l1", s(&l1), "--l2", s(&l2)];
    success(&mpirun(&push, None), "the first collective push");
    let captures: Vec<_> = (0..RANKS)
        .map(|r| {
            let dir = t.path().join(format!("cap-{r}"));
            let count = if r == 0 { "2" } else { "3" };
            // One second apart: the captures start one after another, and
            // a rank's seq 1 taken before another rank's run began would
            // be another life of the job (spawns under load must not read
            // as two lives).
            let child = Command::new(env!("CARGO_BIN_EXE_rexctl"))
                .args(["capture", "--l1", s(&dir), "--interval", "1"])
                .args(["--count", count, "--", "sleep", "5"])
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap();
            (r, dir, child)
        })
        .collect();
    for (r, dir, mut child) in captures {
        assert!(child.wait().unwrap().success(), "capture of rank {r}");
        copy_checkpoints(&dir, &l1.join(r.to_string()));
        // What the new run alone restores to at seq 1.
        let empty = t.path().join(format!("empty-{r}"));
        std::fs::create_dir_all(&empty).unwrap();
        let want = t.path().join(format!("want-{r}.rexic"));
        ok(&[
            "restore",
            "--l1",
            s(&dir),
            "--l2",
            s(&empty),
            "--seq",
            "1",
            "-o",
            s(&want),
        ]);
    }
    let coll = t.path().join("coll");
    std::fs::create_dir_all(&coll).unwrap();
    let pattern = coll.join("image-{rank}.rexic");
    let args = [
        "restore",
        "--collective",
        "--l2",
        s(&l2),
        "--l1",
        s(&l1),
        "-o",
        s(&pattern),
    ];
    success(&mpirun(&args, None), "the collective restore");
    for r in 0..RANKS {
        let want = t.path().join(format!("want-{r}.rexic"));
        assert_image(
            &coll.join(format!("image-{r}.rexic")),
            &want,
            &format!("rank {r}"),
        );
    }
}

/// A collective restore takes the seq a collective push would cut at: the
/// newest at which every rank stands in one life of the job. Rank 1 lost
/// its checkpoint of seq 3 and began a new chain with a FULL checkpoint at
/// seq 4 (librex after a failed write does), the others stand at 3: the
/// smallest newest seq, 3, was one rank 1 cannot restore, and the restore
/// failed on every rank (exit 3); seq 2 is the job's newest state.
#[test]
fn a_collective_restore_takes_the_newest_seq_every_rank_stands_at() {
    use rexctl::format::ic::{ChainId, IcFile, IcMeta, IcWriter};
    let _one_at_a_time = crate::util::exclusive();
    let t = tempfile::tempdir().unwrap();
    let truth = |n: u64| t.path().join(format!("t{n}"));
    let (l1, l2, later) = (
        t.path().join("l1"),
        t.path().join("l2"),
        t.path().join("later"),
    );
    gen_ranks(&t.path().join("g2"), "0.5", "64", "2", &truth(2));
    gen_ranks(&l1, "0.5", "64", "3", &truth(3));
    std::fs::create_dir_all(&l2).unwrap();
    let push = ["push-l2", "--collective", "--l1", s(&l1), "--l2", s(&l2)];
    hold_back(&l1, &later, 1);
    success(&mpirun(&push, None), "the first collective push");
    release(&later, &l1);
    // Rank 1: seq 3 gone, then a FULL checkpoint of a new chain at seq 4
    // (its image at seq 3, taken after it).
    let r1 = l1.join("1");
    let ic = |n: u64| r1.join(rexctl::l1::ic_file_name(n));
    let t3 = IcMeta::read(ic(3)).unwrap().header.time_ns;
    std::fs::remove_file(ic(3)).unwrap();
    let image = IcFile::open(truth(3).join("1.rexic")).unwrap();
    let m = image.meta();
    let mut w = IcWriter::create_in_chain(
        ic(4),
        m.header.page_size,
        4,
        true,
        t3 + 1,
        Some(ChainId::random().unwrap()),
        m.pages.clone(),
        Vec::new(),
    )
    .unwrap();
    for i in 0..m.pages.len() {
        w.push_page(image.page(i).unwrap()).unwrap();
    }
    w.finish().unwrap();
    let coll = t.path().join("coll");
    std::fs::create_dir_all(&coll).unwrap();
    let pattern = coll.join("image-{rank}.rexic");
    let args = [
        "restore",
        "--collective",
        "--l2",
        s(&l2),
        "--l1",
        s(&l1),
        "-o",
        s(&pattern),
        "--json",
    ];
    let o = mpirun(&args, None);
    success(&o, "the collective restore");
    for r in 0..RANKS {
        let image = coll.join(format!("image-{r}.rexic"));
        assert_image(
            &image,
            &truth(2).join(format!("{r}.rexic")),
            &format!("rank {r}"),
        );
    }
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out.matches("\"seq\": 2").count(), RANKS as usize, "{out}");
    // The push cuts there too: seq 3 and 4 stay in L1.
    let o = mpirun(&push, None);
    success(&o, "the push");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("rank 1 has no checkpoint of seq 3; seq 2 is the newest every rank stands at"),
        "{out}"
    );
}
