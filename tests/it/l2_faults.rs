//! L2 fault tolerance, end to end against the real binary:
//!
//! * crashes (`REX_FAILPOINT=N`: the process aborts, as `kill -9` would, at
//!   its N-th durable file operation) at every point of a `push-l2`: a Δ
//!   push, the first (full) push, and a `--full` push that prunes old
//!   chains; after each crash both restores give the old or the new state
//!   (L1 + L2 always the new one), and the next push recovers;
//! * corrupt, truncated and missing L2 files (RPS, PF, P-Table, manifest)
//!   of each generation of a chain, and of L1's copy of the chain;
//! * forced DeD-Table hash collisions through the library pipeline;
//! * concurrent `push-l2` processes on one job.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rexctl::format::ic::IcMeta;
use rexctl::format::manifest::{FORMAT, GenKind, Manifest, Timings, manifest_name};
use rexctl::format::ptable::PTableDelta;
use rexctl::l1::coalesce::CList;
use rexctl::l1::{L1Dir, list_ic_files};
use rexctl::l2::chain::{ChainIndex, OpenChain};
use rexctl::l2::dedup::{DedupJob, deduplicate};
use rexctl::l2::dedup_table::{Crc32Hasher, PatternHash, PatternHasher};
use rexctl::l2::restore::{RestoreOptions, restore_l2};
use rexctl::store::{DirStore, Store};

use crate::util::{
    assert_image, assert_no_failures, case, copy_tree, names_in, rexctl, s, same_image, show,
    stderr, take_until, take_until_at, workload,
};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Runs `rexctl args...`, with `REX_FAILPOINT=n` when given (and never
/// inherited otherwise).
fn rex(args: &[&str], failpoint: Option<u64>) -> Output {
    let mut c: Command = rexctl();
    c.args(args).env_remove("REX_FAILPOINT");
    if let Some(n) = failpoint {
        c.env("REX_FAILPOINT", n.to_string());
    }
    c.output().expect("run rexctl")
}

/// Runs `rexctl` without failpoint and asserts success; returns stderr.
fn rex_ok(args: &[&str]) -> String {
    let out = rex(args, None);
    assert!(out.status.success(), "{}", show(args, &out));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A restore into a fresh, empty directory `outdir`; returns the output and
/// the path of the image (which exists only on success).
fn restore(l2: &Path, l1: Option<&Path>, extra: &[&str], outdir: &Path) -> (Output, PathBuf) {
    std::fs::create_dir_all(outdir).unwrap();
    assert!(
        names_in(outdir).is_empty(),
        "{} not empty",
        outdir.display()
    );
    let out_file = outdir.join("image.rexic");
    let mut args: Vec<&str> = vec!["restore", "--l2", s(l2)];
    if let Some(l1) = l1 {
        args.extend(["--l1", s(l1)]);
    }
    args.extend(["--out", s(&out_file)]);
    args.extend_from_slice(extra);
    let out = rex(&args, None);
    if out.status.success() {
        assert!(out_file.is_file(), "{}", show(&args, &out));
    } else {
        assert!(
            !stderr(&out).contains("panicked"),
            "panic: {}",
            show(&args, &out)
        );
        assert!(
            names_in(outdir).is_empty(),
            "a failed restore left files behind: {:?}\n{}",
            names_in(outdir),
            show(&args, &out)
        );
    }
    (out, out_file)
}

/// A restore that must succeed and produce exactly `want`; returns stderr.
fn restore_exact(
    l2: &Path,
    l1: Option<&Path>,
    extra: &[&str],
    outdir: &Path,
    want: &Path,
    ctx: &str,
) -> String {
    let (out, img) = restore(l2, l1, extra, outdir);
    assert!(
        out.status.success(),
        "{ctx}: restore failed\n{}",
        show(
            &["restore", "--l2", s(l2), "--l1", l1.map(s).unwrap_or("-")],
            &out
        )
    );
    assert_image(&img, want, ctx);
    stderr(&out)
}

/// The newest valid L2 generation's last seq.
fn l2_last_seq(l2: &Path) -> Option<u64> {
    let store = DirStore::open(l2).unwrap();
    ChainIndex::load(&store)
        .unwrap()
        .newest()
        .map(|m| m.last_seq)
}

/// After a successful push: no temporary file anywhere, no IC file covered
/// by the newest generation left in L1, and no generation file without a
/// valid manifest in L1's chain copy or in L2.
fn assert_clean(l1: &Path, l2: &Path, ctx: &str) {
    for dir in [l1.to_path_buf(), l1.join("rex"), l2.to_path_buf()] {
        for n in names_in(&dir) {
            assert!(
                !rexctl::durable::is_temp_name(&n),
                "{ctx}: temporary file {n} left in {}",
                dir.display()
            );
        }
    }
    let covered = l2_last_seq(l2).expect("L2 holds a generation");
    for p in list_ic_files(l1).unwrap() {
        let seq = IcMeta::read(&p).unwrap().seq();
        assert!(
            seq > covered,
            "{ctx}: {} (seq {seq}) is covered by the newest generation (up to seq {covered}) but still in L1",
            p.display()
        );
    }
    for dir in [l1.join("rex"), l2.to_path_buf()] {
        let store = DirStore::open(&dir).unwrap();
        let idx = ChainIndex::load(&store).unwrap();
        assert!(
            idx.invalid.is_empty(),
            "{ctx}: invalid manifests in {}: {:?}",
            dir.display(),
            idx.invalid
        );
        for n in names_in(&dir) {
            if let Some(g) = rexctl::l2::push::generation_of(&n) {
                assert!(
                    idx.manifests.contains_key(&g),
                    "{ctx}: {n} in {} belongs to no generation (no manifest for generation {g}); files: {:?}",
                    dir.display(),
                    names_in(&dir)
                );
            }
        }
    }
}

/// Number of distinct chains (chain bases) with a valid manifest in `dir`.
fn chains_in(dir: &Path) -> usize {
    let store = DirStore::open(dir).unwrap();
    let idx = ChainIndex::load(&store).unwrap();
    idx.manifests
        .values()
        .map(|m| m.chain_base)
        .collect::<BTreeSet<_>>()
        .len()
}

// ---------------------------------------------------------------------------
// 1. Crashes during push-l2
// ---------------------------------------------------------------------------

/// One crash scenario: the job in `template/{l1,l2}`, the push to crash, the
/// state before (`old`, `None` when L2 holds nothing yet) and after (`new`).
struct CrashCase {
    name: &'static str,
    template: PathBuf,
    /// Extra `push-l2` arguments of the crashing push (and of the retry).
    push_args: Vec<&'static str>,
    old: Option<PathBuf>,
    new: PathBuf,
    /// Chains L2 may hold after the retry (retention).
    max_l2_chains: usize,
}

fn push_args<'a>(l1: &'a Path, l2: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["push-l2", "--l1", s(l1), "--l2", s(l2)];
    v.extend_from_slice(extra);
    v
}

/// The state after a successful push: both restores give `new`, verify
/// passes, L1 and L2 hold no leftovers, retention holds.
fn check_pushed(case: &CrashCase, l1: &Path, l2: &Path, work: &Path, ctx: &str) {
    restore_exact(
        l2,
        None,
        &[],
        &work.join("final-l2"),
        &case.new,
        &format!("{ctx}: restore --l2"),
    );
    restore_exact(
        l2,
        Some(l1),
        &[],
        &work.join("final-l1l2"),
        &case.new,
        &format!("{ctx}: restore --l1 --l2"),
    );
    rex_ok(&["verify", "--l2", s(l2), "--l1", s(l1)]);
    assert_clean(l1, l2, ctx);
    let chains = chains_in(l2);
    assert!(
        chains <= case.max_l2_chains,
        "{ctx}: L2 holds {chains} chains, retention allows {}",
        case.max_l2_chains
    );
}

fn run_crash_case(case: &CrashCase) {
    let mut seen_old = 0;
    let mut seen_new = 0;
    let mut seen_none = 0;
    let mut n = 1u64;
    loop {
        assert!(n < 1000, "{}: push-l2 never finished", case.name);
        let work = tempfile::tempdir().unwrap();
        let (l1, l2) = (work.path().join("l1"), work.path().join("l2"));
        copy_tree(&case.template.join("l1"), &l1);
        copy_tree(&case.template.join("l2"), &l2);
        let ctx = format!("{}: REX_FAILPOINT={n}", case.name);

        let args = push_args(&l1, &l2, &case.push_args);
        let out = rex(&args, Some(n));
        if out.status.success() {
            // The push finished before its N-th durable operation.
            assert!(
                n > 10,
                "{ctx}: a push takes more than {n} durable operations"
            );
            check_pushed(case, &l1, &l2, work.path(), &ctx);
            break;
        }
        let err = stderr(&out);
        assert!(
            err.contains(&format!("REX_FAILPOINT={n}: aborting")),
            "{ctx}: the push failed otherwise than at its failpoint\n{}",
            show(&args, &out)
        );

        // The crashed state: L2 alone gives the old or the new state ...
        let (r, img) = restore(&l2, None, &[], &work.path().join("crash-l2"));
        if r.status.success() {
            if same_image(&img, &case.new) {
                seen_new += 1;
            } else if case.old.as_ref().is_some_and(|o| same_image(&img, o)) {
                seen_old += 1;
            } else {
                panic!(
                    "{ctx}: restore --l2 after the crash gives neither the old nor the new state\n{}",
                    show(&["restore"], &r)
                );
            }
        } else {
            assert!(
                case.old.is_none(),
                "{ctx}: restore --l2 after the crash failed\n{}",
                show(&["restore"], &r)
            );
            // Nothing committed yet: a clean "no generation" error.
            assert_eq!(
                r.status.code(),
                Some(3),
                "{ctx}\n{}",
                show(&["restore"], &r)
            );
            assert!(
                stderr(&r).contains("no valid generation"),
                "{ctx}\n{}",
                show(&["restore"], &r)
            );
            seen_none += 1;
        }
        // ... and L1 + L2 always the new one (L1 keeps the IC files until the
        // generation is durable in both places).
        restore_exact(
            &l2,
            Some(&l1),
            &[],
            &work.path().join("crash-l1l2"),
            &case.new,
            &format!("{ctx}: restore --l1 --l2 after the crash"),
        );

        // The next push recovers.
        let out = rex(&args, None);
        assert!(
            out.status.success(),
            "{ctx}: push after the crash\n{}",
            show(&args, &out)
        );
        check_pushed(case, &l1, &l2, work.path(), &format!("{ctx}, then a push"));
        n += 1;
    }
    // The crash points span the commit point.
    assert!(
        seen_new > 0,
        "{}: no crash after the commit point",
        case.name
    );
    match case.old {
        Some(_) => assert!(
            seen_old > 0,
            "{}: no crash before the commit point",
            case.name
        ),
        None => assert!(
            seen_none > 0,
            "{}: no crash before the commit point",
            case.name
        ),
    }
    eprintln!(
        "{}: {} crash points (old state {seen_old}, new state {seen_new}, nothing {seen_none})",
        case.name,
        n - 1
    );
}

/// Crash during a Δ push: generation 1 (seq 0..=2) is pushed, seq 3..=5
/// are pending.
#[test]
fn crash_during_delta_push_recovers() {
    let d = tempfile::tempdir().unwrap();
    let t = d.path().join("template");
    let (l1, l2, truth) = (t.join("l1"), t.join("l2"), d.path().join("truth"));
    let mut w = workload("balanced", 64, 11);
    let old = take_until(&mut w, &l1, 2, &truth);
    rex_ok(&push_args(&l1, &l2, &[]));
    let new = take_until(&mut w, &l1, 5, &truth);
    run_crash_case(&CrashCase {
        name: "delta push",
        template: t,
        push_args: vec![],
        old: Some(old),
        new,
        max_l2_chains: 2,
    });
}

/// Crash during the first push (a complete coalescence of seq 0..=3): L2
/// holds nothing before.
#[test]
fn crash_during_first_push_recovers() {
    let d = tempfile::tempdir().unwrap();
    let t = d.path().join("template");
    let (l1, truth) = (t.join("l1"), d.path().join("truth"));
    std::fs::create_dir_all(t.join("l2")).unwrap();
    let mut w = workload("churn", 64, 12);
    let new = take_until(&mut w, &l1, 3, &truth);
    run_crash_case(&CrashCase {
        name: "first push",
        template: t,
        push_args: vec![],
        old: None,
        new,
        max_l2_chains: 2,
    });
}

/// Crash during `push-l2 --full` with retention pruning: L2 holds chain A
/// (generations 1, 2) and chain B (generation 3); the crashing push starts
/// chain C, which prunes chain A from L2 and chain B from L1.
#[test]
fn crash_during_full_push_with_pruning_recovers() {
    let d = tempfile::tempdir().unwrap();
    let t = d.path().join("template");
    let (l1, l2, truth) = (t.join("l1"), t.join("l2"), d.path().join("truth"));
    let mut w = workload("balanced", 64, 13);
    take_until(&mut w, &l1, 1, &truth);
    rex_ok(&push_args(&l1, &l2, &[]));
    take_until(&mut w, &l1, 2, &truth);
    rex_ok(&push_args(&l1, &l2, &[]));
    let old = take_until(&mut w, &l1, 3, &truth);
    rex_ok(&push_args(&l1, &l2, &["--full"]));
    assert_eq!(chains_in(&l2), 2);
    let new = take_until(&mut w, &l1, 5, &truth);
    run_crash_case(&CrashCase {
        name: "full push with pruning",
        template: t,
        push_args: vec!["--full"],
        old: Some(old),
        new,
        max_l2_chains: 2,
    });
}

/// The retry after a crash in a `--full` push is a plain `push-l2` (the
/// operator's next scheduled push): recovery alone must leave a chain that
/// verifies, whatever step of the pruning the crash interrupted.
#[test]
fn crash_during_full_push_then_plain_push_verifies() {
    let d = tempfile::tempdir().unwrap();
    let t = d.path().join("template");
    let (l1, l2, truth) = (t.join("l1"), t.join("l2"), d.path().join("truth"));
    let mut w = workload("balanced", 64, 14);
    take_until(&mut w, &l1, 1, &truth);
    rex_ok(&push_args(&l1, &l2, &[]));
    take_until(&mut w, &l1, 2, &truth);
    rex_ok(&push_args(&l1, &l2, &[]));
    take_until(&mut w, &l1, 3, &truth);
    rex_ok(&push_args(&l1, &l2, &["--full"]));
    let new = take_until(&mut w, &l1, 5, &truth);
    let mut failures = Vec::new();
    let mut n = 1u64;
    loop {
        assert!(n < 1000);
        let work = tempfile::tempdir().unwrap();
        let (l1, l2) = (work.path().join("l1"), work.path().join("l2"));
        copy_tree(&t.join("l1"), &l1);
        copy_tree(&t.join("l2"), &l2);
        let out = rex(&push_args(&l1, &l2, &["--full"]), Some(n));
        if out.status.success() {
            break;
        }
        rex_ok(&push_args(&l1, &l2, &[]));
        restore_exact(
            &l2,
            Some(&l1),
            &[],
            &work.path().join("o1"),
            &new,
            &format!("REX_FAILPOINT={n}"),
        );
        restore_exact(
            &l2,
            None,
            &[],
            &work.path().join("o2"),
            &new,
            &format!("REX_FAILPOINT={n}"),
        );
        let v = rex(&["verify", "--l2", s(&l2), "--l1", s(&l1)], None);
        if !v.status.success() {
            failures.push(format!(
                "REX_FAILPOINT={n}: verify after a plain push exits {:?}: {}",
                v.status.code(),
                stderr(&v).trim()
            ));
        }
        n += 1;
    }
    assert!(
        failures.is_empty(),
        "{} of {} crash points leave a chain that does not verify after recovery:\n{}",
        failures.len(),
        n - 1,
        failures.join("\n")
    );
}

// ---------------------------------------------------------------------------
// 2. Corrupt files
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Defect {
    Flip,
    Truncate,
    Delete,
}

const DEFECTS: [Defect; 3] = [Defect::Flip, Defect::Truncate, Defect::Delete];
const KINDS: [&str; 4] = ["rps", "pf", "ptab", "manifest"];

fn damage(path: &Path, defect: Defect) {
    assert!(path.is_file(), "{} missing", path.display());
    match defect {
        Defect::Flip => {
            let mut b = std::fs::read(path).unwrap();
            let mid = b.len() / 2;
            b[mid] ^= 0xff;
            std::fs::write(path, b).unwrap();
        }
        Defect::Truncate => {
            let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
            let len = f.metadata().unwrap().len();
            f.set_len(len - 3).unwrap();
        }
        Defect::Delete => std::fs::remove_file(path).unwrap(),
    }
}

/// A 3-generation chain: generation 1 (full, seq 0..=1), 2 (Δ, seq 2..=3),
/// 3 (Δ, seq 4..=5); seq 6..=7 pending in L1. `images[seq]` for 1, 3, 5, 7.
struct Chain3 {
    _dir: tempfile::TempDir,
    template: PathBuf,
    images: std::collections::BTreeMap<u64, PathBuf>,
}

fn chain3(seed: u64) -> Chain3 {
    let d = tempfile::tempdir().unwrap();
    let t = d.path().join("template");
    let (l1, l2, truth) = (t.join("l1"), t.join("l2"), d.path().join("truth"));
    let mut w = workload("balanced", 64, seed);
    let mut images = std::collections::BTreeMap::new();
    for last in [1, 3, 5] {
        images.insert(last, take_until(&mut w, &l1, last, &truth));
        rex_ok(&push_args(&l1, &l2, &[]));
    }
    images.insert(7, take_until(&mut w, &l1, 7, &truth));
    let store = DirStore::open(&l2).unwrap();
    let idx = ChainIndex::load(&store).unwrap();
    let gens: Vec<(u64, u64, GenKind)> = idx
        .manifests
        .values()
        .map(|m| (m.generation, m.last_seq, m.kind))
        .collect();
    assert_eq!(
        gens,
        vec![
            (1, 1, GenKind::Full),
            (2, 3, GenKind::Delta),
            (3, 5, GenKind::Delta)
        ]
    );
    Chain3 {
        template: t,
        images,
        _dir: d,
    }
}

fn gen_file(dir: &Path, g: u64, kind: &str) -> PathBuf {
    dir.join(format!("g{g:08}.{kind}"))
}

/// A copy of chain `c`'s L1 and L2 in a fresh directory: (that directory,
/// L1, L2).
fn chain_copy(c: &Chain3) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let work = tempfile::tempdir().unwrap();
    let (l1, l2) = (work.path().join("l1"), work.path().join("l2"));
    copy_tree(&c.template.join("l1"), &l1);
    copy_tree(&c.template.join("l2"), &l2);
    (work, l1, l2)
}

/// A restore from L1 plus L2 (into `out`) whose L1 copy of generation `g`
/// is damaged: the newest image, read from L2 for that generation, with a
/// warning naming it. Returns standard error.
fn falls_back_to_l2(c: &Chain3, l1: &Path, l2: &Path, out: &Path, g: u64, ctx: &str) -> String {
    let err = restore_exact(l2, Some(l1), &[], out, &c.images[&7], ctx);
    assert!(
        err.contains("warning") && err.contains(&format!("generation {g}")),
        "{ctx}: no warning naming generation {g}:\n{err}"
    );
    err
}

/// Asserts a failed command exited with a data (3) or, for a missing file,
/// I/O (1) error, without panicking, naming the file or the generation.
fn assert_names(out: &Output, g: u64, kind: &str, defect: Defect, ctx: &str) {
    let err = stderr(out);
    let code = out.status.code();
    let codes: &[i32] = if defect == Defect::Delete {
        &[1, 3]
    } else {
        &[3]
    };
    assert!(
        code.is_some_and(|c| codes.contains(&c)),
        "{ctx}: exit {code:?}, expected {codes:?}\n{err}"
    );
    assert!(!err.contains("panicked"), "{ctx}: panic\n{err}");
    let file = format!("g{g:08}.{kind}");
    let generation = format!("generation {g}");
    assert!(
        err.contains(&file) || err.contains(&generation),
        "{ctx}: stderr names neither {file} nor {generation}:\n{err}"
    );
}

/// Every kind of L2 file of every generation of a 3-generation chain, with
/// every defect: restore --l2 fails naming it (or, with --fallback,
/// restores the newest older generation whose lineage is intact, loudly);
/// verify --l2 exits 3 naming it.
#[test]
fn corrupt_l2_files_fail_cleanly_or_fall_back() {
    let c = chain3(21);
    // Generation -> the seq it restores.
    let seq_of = |g: u64| [0, 1, 3, 5][g as usize];
    let mut failures = Vec::new();
    let mut total = 0;
    for g in [3u64, 2, 1] {
        for kind in KINDS {
            for defect in DEFECTS {
                total += 1;
                let ctx = format!("generation {g} {kind} {defect:?}");
                let work = tempfile::tempdir().unwrap();
                let l2 = work.path().join("l2");
                copy_tree(&c.template.join("l2"), &l2);
                damage(&gen_file(&l2, g, kind), defect);

                if g == 3 && kind == "manifest" && defect == Defect::Delete {
                    // A generation exists through its manifest: without it,
                    // generation 3 was never committed (the state a crash
                    // before the L2 manifest leaves), and generation 2 is
                    // the newest, restored and verified as such.
                    case(&mut failures, || {
                        restore_exact(&l2, None, &[], &work.path().join("a"), &c.images[&3], &ctx);
                        rex_ok(&["verify", "--l2", s(&l2)]);
                    });
                    continue;
                }

                case(&mut failures, || {
                    let (out, _) = restore(&l2, None, &[], &work.path().join("plain"));
                    assert!(!out.status.success(), "{ctx}: restore --l2 succeeded");
                    assert_names(&out, g, kind, defect, &format!("{ctx}: restore --l2"));
                });

                case(&mut failures, || {
                    let v = rex(&["verify", "--l2", s(&l2)], None);
                    assert_eq!(
                        v.status.code(),
                        Some(3),
                        "{ctx}: verify --l2\n{}",
                        show(&["verify"], &v)
                    );
                    assert_names(&v, g, kind, Defect::Flip, &format!("{ctx}: verify --l2"));
                });

                case(&mut failures, || {
                    let (out, img) =
                        restore(&l2, None, &["--fallback"], &work.path().join("fallback"));
                    if g == 1 {
                        // The chain's base is gone: no older generation to use.
                        assert!(!out.status.success(), "{ctx}: restore --fallback succeeded");
                        assert_names(
                            &out,
                            g,
                            kind,
                            defect,
                            &format!("{ctx}: restore --l2 --fallback"),
                        );
                    } else {
                        assert!(
                            out.status.success(),
                            "{ctx}: restore --l2 --fallback does not fall back to generation {}\n{}",
                            g - 1,
                            show(&["restore"], &out)
                        );
                        assert_image(
                            &img,
                            &c.images[&seq_of(g - 1)],
                            &format!("{ctx}: restore --fallback"),
                        );
                        let err = stderr(&out);
                        assert!(err.contains("FALLBACK"), "{ctx}: no loud warning:\n{err}");
                        assert!(
                            err.contains(&format!("generation {}", g - 1)),
                            "{ctx}: {err}"
                        );
                    }
                });

                // The generations before the damage still restore exactly.
                case(&mut failures, || {
                    for older in 1..g {
                        restore_exact(
                            &l2,
                            None,
                            &["--generation", &older.to_string()],
                            &work.path().join(format!("older-{older}")),
                            &c.images[&seq_of(older)],
                            &format!("{ctx}: restore --generation {older}"),
                        );
                    }
                });
            }
        }
    }
    assert_no_failures(&failures, total);
}

/// A damaged chain base falls back to an older chain when L2 keeps one.
#[test]
fn corrupt_chain_base_falls_back_to_an_older_chain() {
    let d = tempfile::tempdir().unwrap();
    let t = d.path().join("template");
    let (l1, l2, truth) = (t.join("l1"), t.join("l2"), d.path().join("truth"));
    let mut w = workload("balanced", 64, 22);
    take_until(&mut w, &l1, 1, &truth);
    rex_ok(&push_args(&l1, &l2, &[]));
    let seq3 = take_until(&mut w, &l1, 3, &truth);
    rex_ok(&push_args(&l1, &l2, &[]));
    take_until(&mut w, &l1, 5, &truth);
    rex_ok(&push_args(&l1, &l2, &["--full"]));
    let seq7 = take_until(&mut w, &l1, 7, &truth);
    rex_ok(&push_args(&l1, &l2, &[]));
    assert_eq!(chains_in(&l2), 2);
    let mut failures = Vec::new();
    let mut total = 0;
    for kind in KINDS {
        for defect in DEFECTS {
            total += 1;
            let ctx = format!("chain base (generation 3) {kind} {defect:?}");
            let work = tempfile::tempdir().unwrap();
            let (l1, l2) = (work.path().join("l1"), work.path().join("l2"));
            copy_tree(&t.join("l1"), &l1);
            copy_tree(&t.join("l2"), &l2);
            damage(&gen_file(&l2, 3, kind), defect);
            case(&mut failures, || {
                let (out, _) = restore(&l2, None, &[], &work.path().join("plain"));
                assert!(!out.status.success(), "{ctx}: restore --l2 succeeded");
                assert_names(&out, 3, kind, defect, &ctx);
            });
            case(&mut failures, || {
                let err = restore_exact(
                    &l2,
                    None,
                    &["--fallback"],
                    &work.path().join("fb"),
                    &seq3,
                    &format!("{ctx}: restore --l2 --fallback"),
                );
                assert!(err.contains("FALLBACK"), "{ctx}: no loud warning:\n{err}");
            });
            // L1's own copy of chain B is intact: L1 + L2 is still exact for
            // damaged data files (read from L1). A damaged L2 manifest breaks
            // the lineage L1 + L2 restores follow: exact, or a clean error.
            case(&mut failures, || {
                let (out, img) = restore(&l2, Some(&l1), &[], &work.path().join("l1l2"));
                if kind != "manifest" || out.status.success() {
                    assert!(
                        out.status.success(),
                        "{ctx}: restore --l1 --l2\n{}",
                        show(&["restore"], &out)
                    );
                    assert_image(&img, &seq7, &format!("{ctx}: restore --l1 --l2"));
                } else {
                    assert_names(
                        &out,
                        3,
                        kind,
                        Defect::Flip,
                        &format!("{ctx}: restore --l1 --l2"),
                    );
                }
            });
        }
    }
    assert_no_failures(&failures, total);
}

/// Damage in L1's copy of the chain: restore --l1 --l2 reads that file's
/// generation from L2 (with a warning) and stays exact; verify --l1 --l2
/// reports the L1 problem.
#[test]
fn corrupt_l1_chain_copy_falls_back_to_l2() {
    let c = chain3(23);
    let mut failures = Vec::new();
    let mut total = 0;
    for g in [3u64, 1] {
        for kind in KINDS {
            for defect in DEFECTS {
                total += 1;
                let ctx = format!("L1 copy of generation {g} {kind} {defect:?}");
                let (work, l1, l2) = chain_copy(&c);
                damage(&gen_file(&l1.join("rex"), g, kind), defect);

                case(&mut failures, || {
                    let out = work.path().join("a");
                    falls_back_to_l2(&c, &l1, &l2, &out, g, &format!("{ctx}: restore"));
                });
                case(&mut failures, || {
                    // L2 alone is untouched.
                    restore_exact(&l2, None, &[], &work.path().join("b"), &c.images[&5], &ctx);
                    rex_ok(&["verify", "--l2", s(&l2)]);
                });
                case(&mut failures, || {
                    let v = rex(&["verify", "--l2", s(&l2), "--l1", s(&l1)], None);
                    assert_eq!(
                        v.status.code(),
                        Some(3),
                        "{ctx}: verify --l1 --l2 does not report the L1 problem\n{}",
                        show(&["verify"], &v)
                    );
                    let all = format!("{}{}", String::from_utf8_lossy(&v.stdout), stderr(&v));
                    assert!(
                        all.contains(&format!("g{g:08}.{kind}"))
                            || all.contains(&format!("L1 generation {g}"))
                            || (all.contains(&format!("generation {g}")) && all.contains("l1/rex")),
                        "{ctx}: verify does not name the L1 file:\n{all}"
                    );
                });
            }
        }
    }
    assert_no_failures(&failures, total);
}

/// An L1 copy whose stored bytes pass their CRC but whose chunk decodes to
/// other bytes (its decoded CRC flipped, the chunk table's CRC
/// recomputed): the restore from L1 plus L2 checks every chunk of the copy
/// before preferring it, so it reads that generation from L2 (helper-18
/// found a version that checked stored CRCs only and failed mid-rebuild).
#[test]
fn l1_copy_whose_chunk_decodes_wrong_falls_back_to_l2() {
    let c = chain3(27);
    let (work, l1, l2) = chain_copy(&c);
    let rps = gen_file(&l1.join("rex"), 3, "rps");
    let mut b = std::fs::read(&rps).unwrap();
    let table = rexctl::format::chunked::table_offset(&b[..64]).unwrap() as usize;
    b[table + 12] ^= 0x40;
    let end = b.len();
    let crc = crc32fast::hash(&b[table..end - 4]);
    b[end - 4..].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&rps, &b).unwrap();
    let out = work.path().join("a");
    let err = falls_back_to_l2(&c, &l1, &l2, &out, 3, "L1 copy decoding wrong");
    assert!(err.contains("decodes to"), "the warning says why:\n{err}");
}

/// After damage in L1's copy, the next push still works (it can read the
/// chain from L2) and leaves a job that verifies in both places.
#[test]
fn push_after_l1_copy_damage_succeeds_and_heals() {
    let c = chain3(24);
    let mut failures = Vec::new();
    for kind in KINDS {
        for defect in DEFECTS {
            let ctx = format!("L1 copy of generation 3 {kind} {defect:?}");
            let work = tempfile::tempdir().unwrap();
            let (l1, l2) = (work.path().join("l1"), work.path().join("l2"));
            copy_tree(&c.template.join("l1"), &l1);
            copy_tree(&c.template.join("l2"), &l2);
            damage(&gen_file(&l1.join("rex"), 3, kind), defect);
            let args = push_args(&l1, &l2, &[]);
            let out = rex(&args, None);
            if !out.status.success() {
                failures.push(format!(
                    "{ctx}: push-l2 exits {:?}: {}",
                    out.status.code(),
                    stderr(&out).trim()
                ));
                continue;
            }
            restore_exact(&l2, None, &[], &work.path().join("a"), &c.images[&7], &ctx);
            restore_exact(
                &l2,
                Some(&l1),
                &[],
                &work.path().join("b"),
                &c.images[&7],
                &ctx,
            );
            let v = rex(&["verify", "--l2", s(&l2), "--l1", s(&l1)], None);
            if !v.status.success() {
                failures.push(format!(
                    "{ctx}: verify after the push exits {:?}: {}",
                    v.status.code(),
                    stderr(&v).trim()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `verify --repair`: a file of any kind damaged (flipped, cut short,
/// deleted) in one copy of a generation, L2's or L1's, is rewritten from
/// the other; afterwards verify passes and a restore from L2 alone (a lost
/// node) gives the newest generation's image. Without --repair, L2's bit
/// rot is what no push reads. Damaged in both copies: nothing is written,
/// exit 3, said. Refused without L1 and beside a push (the job lock).
#[test]
fn verify_repair_rewrites_a_damaged_copy_from_the_other() {
    let c = chain3(31);
    let mut failures = Vec::new();
    for (place, g) in [("L2", 3), ("L2", 1), ("L1", 2)] {
        for kind in KINDS {
            for defect in DEFECTS {
                let ctx = format!("{place} copy of generation {g} {kind} {defect:?}");
                let (work, l1, l2) = chain_copy(&c);
                let dir = if place == "L2" {
                    l2.clone()
                } else {
                    l1.join("rex")
                };
                damage(&gen_file(&dir, g, kind), defect);
                let verify = ["verify", "--l2", s(&l2), "--l1", s(&l1)];
                let v = rex(&verify, None);
                if v.status.code() != Some(3) {
                    failures.push(format!("{ctx}: verify before exits {:?}", v.status.code()));
                }
                let args = [&verify[..], &["--repair", "--json"]].concat();
                let r = rex(&args, None);
                let text = String::from_utf8_lossy(&r.stdout);
                if !r.status.success() || !text.contains(&format!("{place} generation {g}")) {
                    failures.push(format!("{ctx}: {}", show(&args, &r)));
                    continue;
                }
                let json: serde_json::Value = serde_json::from_str(&text).unwrap();
                if json["repair"]["repaired"]
                    .as_array()
                    .is_none_or(|a| a.is_empty())
                {
                    failures.push(format!("{ctx}: nothing said repaired: {text}"));
                }
                if !rex(&verify, None).status.success() {
                    failures.push(format!("{ctx}: verify after the repair fails"));
                }
                restore_exact(&l2, None, &[], &work.path().join("a"), &c.images[&5], &ctx);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // A manifest lost or invalid in each place at once: one run repairs
    // both (helper-77: L2's generation 2 lost under L1's invalid newest
    // took a second run, the missing generation sought in the manifests
    // read before the invalid one was replaced; L2's newest lost and L1's
    // generation 2 lost never converged, each newest lineage broken).
    for (l2_gen, l1_gen, l1_defect) in [(2, 3, Defect::Flip), (3, 2, Defect::Delete)] {
        let ctx = format!("L2 generation {l2_gen} lost, L1's {l1_gen} {l1_defect:?}");
        let (work, l1, l2) = chain_copy(&c);
        damage(&gen_file(&l2, l2_gen, "manifest"), Defect::Delete);
        damage(&gen_file(&l1.join("rex"), l1_gen, "manifest"), l1_defect);
        rex_ok(&["verify", "--l2", s(&l2), "--l1", s(&l1), "--repair"]);
        restore_exact(&l2, None, &[], &work.path().join("a"), &c.images[&5], &ctx);
    }

    // One place's manifest invalid, the other place's data file of that
    // generation damaged: the sound manifest and the sound file make the
    // generation whole between them, in both places (helper-77: exit 3 at
    // every run, and every restore failed, although every byte was there).
    for (bad_manifest, bad_file) in [("L1", "L2"), ("L2", "L1")] {
        for kind in ["rps", "pf"] {
            let ctx = format!("{bad_manifest}'s manifest and {bad_file}'s {kind} of generation 2");
            let (work, l1, l2) = chain_copy(&c);
            let place = |p: &str| {
                if p == "L2" {
                    l2.clone()
                } else {
                    l1.join("rex")
                }
            };
            damage(&gen_file(&place(bad_manifest), 2, "manifest"), Defect::Flip);
            damage(&gen_file(&place(bad_file), 2, kind), Defect::Flip);
            let args = ["verify", "--l2", s(&l2), "--l1", s(&l1), "--repair"];
            let out = rex(&args, None);
            assert!(out.status.success(), "{ctx}: {}", show(&args, &out));
            rex_ok(&["verify", "--l2", s(&l2), "--l1", s(&l1)]);
            restore_exact(&l2, None, &[], &work.path().join("a"), &c.images[&5], &ctx);
            restore_exact(
                &l2,
                Some(&l1),
                &[],
                &work.path().join("b"),
                &c.images[&7],
                &ctx,
            );
        }
    }

    // Both copies damaged: reported, nothing written, exit 3.
    let (_work, l1, l2) = chain_copy(&c);
    for dir in [l2.clone(), l1.join("rex")] {
        damage(&gen_file(&dir, 2, "rps"), Defect::Flip);
    }
    let before = (
        std::fs::read(gen_file(&l2, 2, "rps")).unwrap(),
        std::fs::read(gen_file(&l1.join("rex"), 2, "rps")).unwrap(),
    );
    let args = ["verify", "--l2", s(&l2), "--l1", s(&l1), "--repair"];
    let out = rex(&args, None);
    assert_eq!(out.status.code(), Some(3), "{}", show(&args, &out));
    assert!(
        stderr(&out).contains("damaged in both copies"),
        "{}",
        show(&args, &out)
    );
    let after = (
        std::fs::read(gen_file(&l2, 2, "rps")).unwrap(),
        std::fs::read(gen_file(&l1.join("rex"), 2, "rps")).unwrap(),
    );
    assert!(before == after, "a copy was rewritten from a damaged one");

    // No L1: nothing to repair from (configuration, exit 5); --l2-only
    // contradicts it (usage, exit 2).
    let out = rex(&["verify", "--l2", s(&l2), "--repair"], None);
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    let out = rex(
        &[
            "verify",
            "--l2",
            s(&l2),
            "--l1",
            s(&l1),
            "--l2-only",
            "--repair",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    // Beside a writer holding the job lock: busy, exit 4.
    let _lock = rexctl::l1::lock::JobLock::acquire(&l1, "test").unwrap();
    let out = rex(
        &["verify", "--l2", s(&l2), "--l1", s(&l1), "--repair"],
        None,
    );
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
}

/// `verify --repair` killed at every durable operation while it replaces
/// L2's invalid newest manifest: a restore from L2 alone then refuses or
/// gives the newest state, never the generation before it with exit 0
/// (helper-77: the invalid manifest was deleted before its replacement
/// was written), and the next repair converges.
#[test]
fn verify_repair_killed_never_leaves_a_generation_without_its_manifest() {
    let c = chain3(33);
    let mut done = false;
    for n in 1..80 {
        let (work, l1, l2) = chain_copy(&c);
        damage(&gen_file(&l2, 3, "manifest"), Defect::Flip);
        let args = ["verify", "--l2", s(&l2), "--l1", s(&l1), "--repair"];
        let killed = rex(&args, Some(n));
        let (out, img) = restore(&l2, None, &[], &work.path().join("a"));
        if out.status.success() {
            assert_image(&img, &c.images[&5], &format!("killed at {n}"));
        } else {
            assert_eq!(
                out.status.code(),
                Some(3),
                "killed at {n}: {}",
                stderr(&out)
            );
        }
        rex_ok(&args);
        restore_exact(
            &l2,
            None,
            &[],
            &work.path().join("b"),
            &c.images[&5],
            &format!("repaired after {n}"),
        );
        if killed.status.success() {
            done = true;
            break;
        }
    }
    assert!(done, "the repair never got past its last durable operation");
}

/// L2 loses its newest manifest, a FULL generation's, after retention
/// pruned L1's copy to that generation: the next push puts it back from
/// L1 (helper-79: refused at every push, "none of the generations before
/// it there is in the other place", a check taken from `verify --repair`),
/// and a restore from L2 alone gives the newest state again.
#[test]
fn a_lost_newest_full_manifest_is_put_back_from_l1_s_pruned_copy() {
    let c = chain3(34);
    let (work, l1, l2) = chain_copy(&c);
    rex_ok(&push_args(&l1, &l2, &["--full"]));
    let manifests: Vec<String> = names_in(&l1.join("rex"))
        .into_iter()
        .filter(|n| n.ends_with(".manifest"))
        .collect();
    assert_eq!(
        manifests.len(),
        1,
        "L1's copy was not pruned: {manifests:?}"
    );
    std::fs::remove_file(l2.join(&manifests[0])).unwrap();
    let args = push_args(&l1, &l2, &[]);
    let out = rex(&args, None);
    assert!(out.status.success(), "{}", show(&args, &out));
    assert!(l2.join(&manifests[0]).is_file(), "{}", show(&args, &out));
    restore_exact(
        &l2,
        None,
        &[],
        &work.path().join("a"),
        &c.images[&7],
        "L2 alone",
    );
}

/// `verify --repair` given another job's L1 or L2 copies nothing between
/// the two (helper-77: that job's FULL generation, numbered above this
/// job's newest, was copied in, and a restore gave its state with exit 0;
/// its files overwrote this job's intact ones under an invalid manifest).
/// Exit 3, said; this job's places are as they were. Nor does `push-l2`'s
/// recovery (it uploaded the other job's generation above this job's
/// newest into L2).
#[test]
fn verify_repair_and_push_never_copy_another_job_s_generations() {
    let (x, y) = (chain3(31), chain3(32));
    let listing = |dir: &Path| -> Vec<(String, Vec<u8>)> {
        names_in(dir)
            .into_iter()
            .map(|n| (n.clone(), std::fs::read(dir.join(&n)).unwrap_or_default()))
            .collect()
    };
    // Y's L1 copy holds a FULL generation 4 alone (pruned after it), or
    // Y's generations 1..=3 (another history under the same numbers).
    for y_full in [true, false] {
        let (_wx, xl1, xl2) = chain_copy(&x);
        let (_wy, yl1, yl2) = chain_copy(&y);
        if y_full {
            rex_ok(&push_args(&yl1, &yl2, &["--full"]));
            assert_eq!(
                names_in(&yl1.join("rex"))
                    .iter()
                    .filter(|n| n.ends_with(".manifest"))
                    .count(),
                1
            );
        }
        for (l1, l2, mine) in [(&yl1, &xl2, &xl2), (&xl1, &yl2, &xl1.join("rex"))] {
            let ctx = format!(
                "Y full {y_full}: --l1 {} --l2 {}",
                l1.display(),
                l2.display()
            );
            let before = listing(mine);
            let args = ["verify", "--l2", s(l2), "--l1", s(l1), "--repair"];
            let out = rex(&args, None);
            assert_eq!(out.status.code(), Some(3), "{ctx}: {}", show(&args, &out));
            assert!(
                listing(mine) == before,
                "{ctx}: this job's place was written"
            );
            // Nor does a push given the other job's L1 or L2 (its recovery
            // uploaded Y's FULL generation into X's L2 as the newest, and
            // copied L2's generations over the other L1's copy): Y's copy
            // pruned to a FULL generation numbered above all of X's, and
            // newer, shares no file with X's L2, unlike X's own newest
            // FULL generation whose L2 manifest was lost, which recovery
            // puts back
            // (`a_lost_newest_full_manifest_is_put_back_from_l1_s_pruned_copy`).
            let both = (listing(&l1.join("rex")), listing(l1), listing(l2));
            let args = push_args(l1, l2, &[]);
            let out = rex(&args, None);
            assert_eq!(out.status.code(), Some(3), "{ctx}: {}", show(&args, &out));
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("nothing was changed"),
                "{ctx}: {}",
                show(&args, &out)
            );
            assert!(
                (listing(&l1.join("rex")), listing(l1), listing(l2)) == both,
                "{ctx}: push-l2 wrote a place"
            );
        }
        restore_exact(
            &xl2,
            None,
            &[],
            &_wx.path().join("a"),
            &x.images[&5],
            "X from L2",
        );
        restore_exact(
            &xl2,
            Some(&xl1),
            &[],
            &_wx.path().join("b"),
            &x.images[&7],
            "X from L1 and L2",
        );
    }
    // X's L2 newest manifest invalid, its files intact: Y's L1 (Y's own
    // generation 3) does not overwrite them; X's own L1 repairs it.
    let (wx, xl1, xl2) = chain_copy(&x);
    let (_wy, yl1, _yl2) = chain_copy(&y);
    damage(&gen_file(&xl2, 3, "manifest"), Defect::Flip);
    let before = listing(&xl2);
    let args = ["verify", "--l2", s(&xl2), "--l1", s(&yl1), "--repair"];
    let out = rex(&args, None);
    assert_eq!(out.status.code(), Some(3), "{}", show(&args, &out));
    assert!(listing(&xl2) == before, "X's L2 was written from Y's L1");
    rex_ok(&["verify", "--l2", s(&xl2), "--l1", s(&xl1), "--repair"]);
    restore_exact(
        &xl2,
        None,
        &[],
        &wx.path().join("a"),
        &x.images[&5],
        "X repaired",
    );
}

/// Rewrites the P-Table delta at `path` as another valid one of the same
/// length: its last page renumbered, every CRC recomputed. Returns the
/// whole-file CRC-32 before and after, which are equal: each region of a
/// P-Table ends with its own CRC, so the file's CRC-32 depends on its
/// length alone (CRC-32's residue).
fn renumber_last_page(path: &Path) -> (u32, u32) {
    let before = std::fs::read(path).unwrap();
    let version = u32::from_le_bytes(before[8..12].try_into().unwrap());
    let t = PTableDelta::read(path).unwrap();
    // The nearest renumbering that stays valid and codes to the same length
    // (version 2 codes the page index as gaps of varying length).
    let after = (1..10_000u64)
        .map(|d| {
            let mut t = t.clone();
            *t.pages.last_mut().expect("a page") += d;
            t
        })
        .find(|t| {
            rexctl::format::ic::check_index(&t.pages, &t.drops).is_ok()
                && t.encode_version(version).len() == before.len()
        })
        .expect("a renumbering of the same length")
        .encode_version(version);
    assert_eq!(after.len(), before.len());
    assert_ne!(after, before);
    std::fs::write(path, &after).unwrap();
    (crc32fast::hash(&before), crc32fast::hash(&after))
}

/// The defect helper-16 found: a P-Table rewritten consistently (a page
/// renumbered, its CRCs recomputed) kept the manifest's whole-file CRC-32,
/// so `restore` and `verify` exited 0 with a page at the wrong address, and
/// a restore from L1 plus L2 preferred L1's rewritten copy. The manifest's
/// XXH3 of the P-Table now tells them apart: L2's copy fails the restore
/// and `verify` (exit 3, naming the file), L1's copy falls back to L2.
#[test]
fn ptable_rewritten_with_the_same_crc_is_caught() {
    let c = chain3(26);
    let mut failures = Vec::new();
    // In L2: the restore fails, naming the file; verify exits 3.
    {
        let (work, _, l2) = chain_copy(&c);
        let (a, b) = renumber_last_page(&gen_file(&l2, 3, "ptab"));
        assert_eq!(a, b, "the premise: the CRC-32 does not change");
        let (out, img) = restore(&l2, None, &[], &work.path().join("a"));
        case(&mut failures, || {
            assert_names(
                &out,
                3,
                "ptab",
                Defect::Flip,
                "rewritten L2 P-Table: restore",
            );
            assert!(!img.exists(), "an image was left behind");
            assert!(stderr(&out).contains("XXH3"), "{}", stderr(&out));
        });
        let v = rex(&["verify", "--l2", s(&l2)], None);
        case(&mut failures, || {
            assert_eq!(v.status.code(), Some(3), "{}", show(&["verify"], &v));
        });
    }
    // In L1's copy: L2's copy is used, with a warning; verify --l1 exits 3.
    {
        let (work, l1, l2) = chain_copy(&c);
        renumber_last_page(&gen_file(&l1.join("rex"), 3, "ptab"));
        case(&mut failures, || {
            let out = work.path().join("b");
            falls_back_to_l2(&c, &l1, &l2, &out, 3, "rewritten L1 P-Table");
        });
        let v = rex(&["verify", "--l2", s(&l2), "--l1", s(&l1)], None);
        case(&mut failures, || {
            assert_eq!(v.status.code(), Some(3), "{}", show(&["verify"], &v));
        });
    }
    assert_no_failures(&failures, 4);
}

/// L2 lost its newest manifest (generation 3) after the push deleted the IC
/// files it covers: a transient restore gives the newest state or fails
/// loudly, never silently an older one.
#[test]
fn l1_l2_restore_after_l2_lost_its_newest_manifest_is_never_silently_stale() {
    let c = chain3(25);
    let work = tempfile::tempdir().unwrap();
    let (l1, l2) = (work.path().join("l1"), work.path().join("l2"));
    copy_tree(&c.template.join("l1"), &l1);
    copy_tree(&c.template.join("l2"), &l2);
    std::fs::remove_file(l2.join(manifest_name(3))).unwrap();
    let (out, img) = restore(&l2, Some(&l1), &[], &work.path().join("a"));
    if out.status.success() {
        assert_image(
            &img,
            &c.images[&7],
            "restore --l1 --l2 with L2's newest manifest lost",
        );
    } else {
        // Failing loudly is acceptable; a silently older image is not.
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    }
}

// ---------------------------------------------------------------------------
// 3. Forced hash collisions in the DeD-Table
// ---------------------------------------------------------------------------

/// One push through the library (as `push_locked` does it), with the
/// DeD-Table hasher `hasher`: the pending batch of `l1` (IC files after the
/// newest generation of `l2`) becomes the next generation, written straight
/// into `l2` with its manifest.
fn lib_push<H: PatternHasher>(l1: &Path, l2: &DirStore, hasher: H) -> Manifest {
    let index = ChainIndex::load(l2).unwrap();
    let newest = index.newest().cloned();
    let l1d = L1Dir::scan_after(l1, newest.as_ref().map(rexctl::l1::Covered::from)).unwrap();
    let batch = &l1d.files;
    let clist = CList::build(batch).unwrap();
    let chain = newest
        .as_ref()
        .map(|m| OpenChain::open(l2, &index, m.generation).unwrap());
    let full = chain.is_none() || clist.full;
    let generation = newest.as_ref().map_or(1, |m| m.generation + 1);
    let job = DedupJob {
        generation,
        page_size: clist.page_size,
        pattern_size: 32,
        batch,
        clist: &clist,
        chain: chain.as_ref(),
        full,
        dir: l2.root(),
        format: Default::default(),
        table_memory: rexctl::l2::dedup::DEFAULT_DEDUP_MEMORY,
        xrefs: &[],
        upload: None,
    };
    let out = deduplicate(&job, hasher).unwrap();
    let (parent, chain_base) = match (&chain, full) {
        (Some(ch), false) => (Some(ch.manifest().generation), ch.manifest().chain_base),
        _ => (None, generation),
    };
    let bytes_in: u64 = batch.iter().map(|m| m.layout.file_len).sum();
    let bytes_out: u64 = out.files.iter().map(|f| f.bytes).sum();
    let m = Manifest {
        format: FORMAT,
        generation,
        parent,
        chain_base,
        kind: if full { GenKind::Full } else { GenKind::Delta },
        page_size: clist.page_size,
        pattern_size: 32,
        first_seq: clist.first_seq,
        last_seq: clist.last_seq,
        time_ns: batch.last().unwrap().header.time_ns,
        pattern_base: out.pattern_base,
        patterns: out.patterns,
        live_pages: out.live_pages,
        dirty_pages: out.dirty_pages,
        dropped_pages: out.dropped_pages,
        files: out.files.clone(),
        bytes_in,
        bytes_out,
        compression_ratio: bytes_in as f64 / bytes_out.max(1) as f64,
        timings: Timings::default(),
        created_ns: 0,
        writer: "l2_faults test".into(),
        chain_id: batch.last().and_then(|m| m.chain_id),
        job: None,
        rank: None,
        regions: None,
        job_generation: None,
        instances: Vec::new(),
        seq_times: Vec::new(),
        other_runs: Vec::new(),
    };
    m.check(&l2.root().join(manifest_name(generation))).unwrap();
    l2.put_bytes(&manifest_name(generation), &m.encode())
        .unwrap();
    m
}

/// The Deduplication Unit streams the RPS and the Pointer File to the store
/// while it writes them: the store ends up with the very bytes of the local
/// files, which the output lists as uploaded (the P-Table, written at the
/// end, is left to the caller). When the store fails, the store's own error
/// is reported, not the stopped stream it caused, whether it fails at the
/// start or when it publishes.
#[test]
fn dedup_streams_its_files_to_the_store_and_reports_the_stores_failure() {
    use rexctl::l2::dedup::Upload;
    use rexctl::store::NoProgress;
    let d = tempfile::tempdir().unwrap();
    let (l1, truth) = (d.path().join("l1"), d.path().join("truth"));
    let mut w = workload("balanced", 4096, 3);
    take_until(&mut w, &l1, 2, &truth);
    let l1d = L1Dir::scan_after(&l1, None).unwrap();
    let clist = CList::build(&l1d.files).unwrap();
    let job = |dir: &Path, store: &dyn Store| {
        deduplicate(
            &DedupJob {
                generation: 1,
                page_size: clist.page_size,
                pattern_size: 32,
                batch: &l1d.files,
                clist: &clist,
                chain: None,
                full: true,
                dir,
                format: Default::default(),
                table_memory: rexctl::l2::dedup::DEFAULT_DEDUP_MEMORY,
                xrefs: &[],
                upload: Some(Upload {
                    store,
                    progress: &NoProgress,
                }),
            },
            Crc32Hasher::new(),
        )
    };
    let local = d.path().join("local");
    std::fs::create_dir_all(&local).unwrap();
    let l2 = DirStore::create(d.path().join("l2")).unwrap();
    let out = job(&local, &l2).unwrap();
    assert_eq!(out.uploaded, ["g00000001.rps", "g00000001.pf"]);
    for f in &out.files {
        let mine = std::fs::read(local.join(&f.name)).unwrap();
        assert_eq!(crc32fast::hash(&mine), f.crc32, "{}", f.name);
        if out.uploaded.contains(&f.name) {
            assert!(
                std::fs::read(l2.root().join(&f.name)).unwrap() == mine,
                "{}",
                f.name
            );
        } else {
            assert!(!l2.root().join(&f.name).exists(), "{} uploaded", f.name);
        }
    }
    assert!(
        out.files[0].bytes > 4 << 20,
        "the RPS should outgrow the upload queue"
    );

    // The store's directory disappears: its error names it.
    let gone = DirStore::create(d.path().join("gone")).unwrap();
    std::fs::remove_dir(gone.root()).unwrap();
    let local2 = d.path().join("local2");
    std::fs::create_dir_all(&local2).unwrap();
    let err = job(&local2, &gone).unwrap_err().report();
    assert!(err.contains(&gone.root().display().to_string()), "{err}");
    assert!(!err.contains("reader stopped"), "{err}");

    // Only the Pointer File's upload fails, when it publishes (a directory
    // holds its name): that is the error, naming the object.
    let blocked = DirStore::create(d.path().join("blocked")).unwrap();
    std::fs::create_dir_all(blocked.root().join("g00000001.pf/x")).unwrap();
    let local3 = d.path().join("local3");
    std::fs::create_dir_all(&local3).unwrap();
    let err = job(&local3, &blocked).unwrap_err().report();
    assert!(
        err.contains(&blocked.root().join("g00000001.pf").display().to_string()),
        "{err}"
    );
}

/// Pushes seq 0..=2 (full) and 3..=5 (Δ) of a workload through the library
/// with `make()`'s hasher, checks exact restores of both generations, and
/// that the generations are byte for byte those of the real hasher (a hash
/// function changes speed, never the result).
fn collision_round<H: PatternHasher>(pages: u64, seed: u64, make: impl Fn() -> H) {
    let d = tempfile::tempdir().unwrap();
    let (l1, truth) = (d.path().join("l1"), d.path().join("truth"));
    let (l2, l2_ref) = (d.path().join("l2"), d.path().join("l2-ref"));
    let store = DirStore::create(&l2).unwrap();
    let store_ref = DirStore::create(&l2_ref).unwrap();
    let mut w = workload("balanced", pages, seed);
    let img2 = take_until(&mut w, &l1, 2, &truth);
    let m1 = lib_push(&l1, &store, make());
    let r1 = lib_push(&l1, &store_ref, Crc32Hasher::new());
    let img5 = take_until(&mut w, &l1, 5, &truth);
    let m2 = lib_push(&l1, &store, make());
    let r2 = lib_push(&l1, &store_ref, Crc32Hasher::new());
    assert_eq!(m2.kind, GenKind::Delta);
    for (m, r) in [(&m1, &r1), (&m2, &r2)] {
        assert_eq!(
            m.patterns, r.patterns,
            "generation {}: patterns",
            m.generation
        );
        assert_eq!(
            m.files, r.files,
            "generation {}: files (sizes and CRCs)",
            m.generation
        );
    }
    // Some patterns were shared, so the collisions were exercised on hits.
    assert!(m1.patterns < m1.dirty_pages * 128, "{m1:?}");
    assert!(m2.patterns < m2.dirty_pages * 128, "{m2:?}");

    let out = d.path().join("out-5.rexic");
    let rep = restore_l2(&store, &RestoreOptions::default(), &out).unwrap();
    assert_eq!(rep.generation, Some(2));
    assert_image(&out, &img5, "restore of generation 2");
    let out = d.path().join("out-2.rexic");
    let opts = RestoreOptions {
        generation: Some(1),
        ..Default::default()
    };
    restore_l2(&store, &opts, &out).unwrap();
    assert_image(&out, &img2, "restore of generation 1");
    // The CLI agrees the chain is sound.
    rex_ok(&["verify", "--l2", s(&l2)]);
}

#[test]
fn constant_hash_collisions_restore_exactly() {
    collision_round(24, 31, || |_: &[u8]| PatternHash { h1: 7, h2: 9 });
}

#[test]
fn first_byte_hash_restores_exactly() {
    // h1 from the first byte only: most patterns share a few buckets.
    collision_round(64, 32, || {
        |p: &[u8]| PatternHash {
            h1: u32::from(p[0]),
            h2: u32::from(p[0]).wrapping_mul(0x9e37_79b9) ^ 1,
        }
    });
}

#[test]
fn half_colliding_hash_restores_exactly() {
    // Patterns with an even first byte all collide; the others hash well.
    collision_round(64, 33, || {
        let crc = Crc32Hasher::new();
        move |p: &[u8]| {
            if p[0] & 1 == 0 {
                PatternHash { h1: 7, h2: 9 }
            } else {
                crc.hash(p)
            }
        }
    });
}

// ---------------------------------------------------------------------------
// 4. Concurrent pushes
// ---------------------------------------------------------------------------

/// Two `push-l2` at once on one job: one pushes and the other is told the
/// job is busy (exit 4, naming the holder), or they run one after the other
/// (the second finds nothing to push). Never a corrupt chain.
#[test]
fn concurrent_pushes_never_corrupt() {
    let mut outcomes = BTreeSet::new();
    for round in 0..6u64 {
        let d = tempfile::tempdir().unwrap();
        let (l1, l2, truth) = (
            d.path().join("l1"),
            d.path().join("l2"),
            d.path().join("truth"),
        );
        let mut w = workload("balanced", 256, 40 + round);
        // Round 0.. 2: the first push; then a Δ push.
        if round >= 3 {
            take_until(&mut w, &l1, 2, &truth);
            rex_ok(&push_args(&l1, &l2, &[]));
        }
        let want = take_until(&mut w, &l1, if round >= 3 { 6 } else { 4 }, &truth);
        let args = push_args(&l1, &l2, &[]);
        let spawn = || {
            let mut c = rexctl();
            c.args(&args).env_remove("REX_FAILPOINT");
            c.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            c.spawn().unwrap()
        };
        let (a, b) = (spawn(), spawn());
        let (oa, ob) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
        let mut codes = [oa.status.code(), ob.status.code()];
        codes.sort();
        match codes {
            [Some(0), Some(0)] => {
                // One after the other: exactly one of them pushed.
                let pushed = [&oa, &ob]
                    .iter()
                    .filter(|o| String::from_utf8_lossy(&o.stdout).contains("pushed generation"))
                    .count();
                assert_eq!(pushed, 1, "{}\n{}", show(&args, &oa), show(&args, &ob));
                outcomes.insert("sequential");
            }
            [Some(0), Some(4)] => {
                let busy = if oa.status.code() == Some(4) {
                    &oa
                } else {
                    &ob
                };
                let err = stderr(busy);
                assert!(err.contains("busy") && err.contains("held by pid"), "{err}");
                assert!(!err.contains("panicked"), "{err}");
                outcomes.insert("busy");
            }
            _ => panic!(
                "unexpected outcome\n{}\n{}",
                show(&args, &oa),
                show(&args, &ob)
            ),
        }
        rex_ok(&["verify", "--l2", s(&l2), "--l1", s(&l1)]);
        restore_exact(
            &l2,
            None,
            &[],
            &d.path().join("a"),
            &want,
            "after concurrent pushes",
        );
        restore_exact(
            &l2,
            Some(&l1),
            &[],
            &d.path().join("b"),
            &want,
            "after concurrent pushes",
        );
        assert_clean(&l1, &l2, "after concurrent pushes");
    }
    eprintln!("concurrent push outcomes: {outcomes:?}");
}

/// While another process holds the job lock, push-l2 exits 4 naming the
/// holder and changes nothing; once released, the push goes through.
#[test]
fn push_while_locked_is_busy_and_harmless() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2, truth) = (
        d.path().join("l1"),
        d.path().join("l2"),
        d.path().join("truth"),
    );
    let mut w = workload("balanced", 64, 50);
    let seq2 = take_until(&mut w, &l1, 2, &truth);
    rex_ok(&push_args(&l1, &l2, &[]));
    let seq4 = take_until(&mut w, &l1, 4, &truth);
    let before_l2 = names_in(&l2);
    let before_l1 = names_in(&l1);
    {
        let _lock = rexctl::l1::lock::JobLock::acquire(&l1, "l2_faults test").unwrap();
        let out = rex(&push_args(&l1, &l2, &[]), None);
        crate::util::assert_clean_failure(
            &out,
            4,
            &[
                "busy",
                &format!("pid {}", std::process::id()),
                "l2_faults test",
            ],
        );
        assert_eq!(names_in(&l2), before_l2, "a busy push changed L2");
        assert_eq!(names_in(&l1), before_l1, "a busy push changed L1");
        // A restore from L2 alone does not need the lock; one that reads
        // L1 waits for it (never_wrong::a_restore_and_a_push_never_interleave_on_l1).
        restore_exact(&l2, None, &[], &d.path().join("a"), &seq2, "locked");
    }
    restore_exact(&l2, Some(&l1), &[], &d.path().join("b"), &seq4, "unlocked");
    rex_ok(&push_args(&l1, &l2, &[]));
    restore_exact(&l2, None, &[], &d.path().join("c"), &seq4, "after the lock");
    assert_clean(&l1, &l2, "after the lock");
}

// ---------------------------------------------------------------------------
// 5. Runs: a job restarted in a fresh L1, and two L1s on one L2
// ---------------------------------------------------------------------------

/// Crash at every durable operation of the first push of a job restarted
/// in a fresh L1 (run B, seq 0..=4) onto L2's chain of run A: L2 alone gives
/// A's or B's state, L1 + L2 always B's, and the next push recovers.
#[test]
fn crash_during_push_of_a_job_restarted_in_a_fresh_l1_recovers() {
    let d = tempfile::tempdir().unwrap();
    let t = d.path().join("template");
    let (l1, l2, truth) = (t.join("l1"), t.join("l2"), d.path().join("truth"));
    let mut a = workload("balanced", 64, 61);
    let old = take_until_at(&mut a, &l1, 3, &truth, 1_800_000_000_000_000_000);
    rex_ok(&push_args(&l1, &l2, &[]));
    std::fs::remove_dir_all(&l1).unwrap();
    let mut b = workload("balanced", 64, 62);
    let new = take_until_at(&mut b, &l1, 4, &truth, 1_800_000_100_000_000_000);
    run_crash_case(&CrashCase {
        name: "restarted job, fresh L1",
        template: t,
        push_args: vec![],
        old: Some(old),
        new,
        max_l2_chains: 2,
    });
}

/// Two L1 directories (ranks 0 and 1) push onto one L2 directory at the same
/// time, round after round: one writer at a time (the L2 writer lock: busy,
/// exit 4), the second rank refused once the first has pushed (exit 3), and
/// L2 always one rank's whole chain.
#[test]
fn two_l1s_racing_on_one_l2_never_corrupt() {
    let mut outcomes = BTreeSet::new();
    for round in 0..6u64 {
        let d = tempfile::tempdir().unwrap();
        let l2 = d.path().join("l2");
        let truth = d.path().join("truth");
        let ls: Vec<PathBuf> = (0..2).map(|r| d.path().join(format!("l1-{r}"))).collect();
        let wants: Vec<PathBuf> = (0..2u64)
            .map(|r| {
                let mut w = workload("balanced", 128, 70 + 2 * round + r);
                take_until_at(
                    &mut w,
                    &ls[r as usize],
                    3,
                    &truth,
                    1_800_000_000_000_000_000,
                )
            })
            .collect();
        let ranks = ["0", "1"];
        let argv: Vec<Vec<&str>> = (0..2)
            .map(|r| push_args(&ls[r], &l2, &["--job", "7", "--rank", ranks[r]]))
            .collect();
        let spawn = |args: &Vec<&str>| {
            let mut c = rexctl();
            c.args(args).env_remove("REX_FAILPOINT");
            c.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            c.spawn().unwrap()
        };
        let (a, b) = (spawn(&argv[0]), spawn(&argv[1]));
        let outs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
        let codes: Vec<Option<i32>> = outs.iter().map(|o| o.status.code()).collect();
        let ctx = format!(
            "round {round}\n{}\n{}",
            show(&argv[0], &outs[0]),
            show(&argv[1], &outs[1])
        );
        let winners: Vec<usize> = (0..2).filter(|&r| codes[r] == Some(0)).collect();
        assert_eq!(winners.len(), 1, "exactly one rank pushes: {ctx}");
        let loser = 1 - winners[0];
        match codes[loser] {
            Some(4) => outcomes.insert("busy"),
            Some(3) => {
                assert!(stderr(&outs[loser]).contains("two writers"), "{ctx}");
                outcomes.insert("refused")
            }
            _ => panic!("unexpected outcome: {ctx}"),
        };
        assert!(!stderr(&outs[loser]).contains("panicked"), "{ctx}");
        // The loser kept its checkpoints; L2 is the winner's chain, whole.
        assert_eq!(list_ic_files(&ls[loser]).unwrap().len(), 4, "{ctx}");
        rex_ok(&["verify", "--l2", s(&l2), "--l1", s(&ls[winners[0]])]);
        restore_exact(
            &l2,
            None,
            &[],
            &d.path().join("r"),
            &wants[winners[0]],
            &ctx,
        );
    }
    eprintln!("two L1s racing on one L2: {outcomes:?}");
}

// ---------------------------------------------------------------------------
// gc of an object store racing a stalled push
// ---------------------------------------------------------------------------

/// A directory store on which a `gc` runs right before each manifest is
/// committed, and collects the generation's data files: what `gc` on a
/// bucket (which takes no lock) does to a push stalled for longer than its
/// grace period between its uploads and its manifest.
/// With `damage`, it also flips a byte of L1's copy of the generation's
/// Pointer File (in that `L1/rex` directory) at that moment.
struct GcBeforeCommit(DirStore, Option<PathBuf>);

impl Store for GcBeforeCommit {
    fn describe(&self) -> String {
        self.0.describe()
    }
    fn list(&self) -> rexctl::Result<Vec<rexctl::store::ObjectInfo>> {
        self.0.list()
    }
    fn replace_bytes(&self, name: &str, bytes: &[u8]) -> rexctl::Result<()> {
        self.0.replace_bytes(name, bytes)
    }
    fn put_bytes(&self, name: &str, bytes: &[u8]) -> rexctl::Result<()> {
        if let Some(g) = rexctl::format::manifest::parse_manifest_name(name) {
            for o in self.0.list()? {
                if rexctl::format::manifest::generation_of(&o.name) == Some(g) {
                    self.0.delete(&o.name)?;
                }
            }
            if let Some(rex) = &self.1 {
                let pf = rex.join(format!("g{g:08}.pf"));
                let mut b = std::fs::read(&pf).unwrap();
                let at = b.len() / 2;
                b[at] ^= 1;
                std::fs::write(&pf, b).unwrap();
            }
        }
        self.0.put_bytes(name, bytes)
    }
    fn put_stream(
        &self,
        name: &str,
        head_len: u64,
        pieces: &mut dyn Iterator<Item = rexctl::durable::Piece>,
        progress: &dyn rexctl::store::Progress,
    ) -> rexctl::Result<(u64, u32)> {
        self.0.put_stream(name, head_len, pieces, progress)
    }
    fn read(&self, name: &str) -> rexctl::Result<Vec<u8>> {
        self.0.read(name)
    }
    fn open_local(&self, name: &str) -> rexctl::Result<PathBuf> {
        self.0.open_local(name)
    }
    fn delete(&self, name: &str) -> rexctl::Result<()> {
        self.0.delete(name)
    }
}

/// The push deleted every checkpoint of `l1`, and L2 alone restores `want`.
fn assert_l1_deleted_and_l2_restores(l1: &Path, l2: &Path, out: &Path, want: &Path, ctx: &str) {
    assert!(
        list_ic_files(l1).unwrap().is_empty(),
        "{ctx}: the checkpoints were kept"
    );
    restore_l2(
        &DirStore::open(l2).unwrap(),
        &RestoreOptions::default(),
        out,
    )
    .unwrap();
    assert_image(out, want, ctx);
}

/// A push whose files were collected before its commit uploads them again
/// from L1's copy before it deletes its checkpoints: a node lost right
/// after the push still restores the newest state from L2 alone.
#[test]
fn files_collected_before_the_commit_are_uploaded_again() {
    use rexctl::l2::push::{Job, PushOptions, push_l2};
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    std::fs::create_dir_all(&l1).unwrap();
    let truth = d.path().join("truth");
    let mut w = workload("balanced", 256, 7);
    let job = Job::open(
        &l1,
        Box::new(GcBeforeCommit(DirStore::create(&l2).unwrap(), None)),
    )
    .unwrap();
    take_until(&mut w, &l1, 3, &truth);
    let r1 = push_l2(&job, &PushOptions::default()).unwrap();
    let want = take_until(&mut w, &l1, 6, &truth);
    let r2 = push_l2(&job, &PushOptions::default()).unwrap();
    for r in [&r1, &r2] {
        assert!(
            r.recovered.iter().any(|n| n.contains("uploaded again")),
            "{:?}",
            r.recovered
        );
    }
    assert_l1_deleted_and_l2_restores(
        &l1,
        &l2,
        &d.path().join("out.rexic"),
        &want,
        "L2 alone after the push",
    );

    // L1's copy is damaged too: nothing is uploaded from it, and the push
    // fails and keeps its checkpoints.
    let job = Job::open(
        &l1,
        Box::new(GcBeforeCommit(
            DirStore::open(&l2).unwrap(),
            Some(l1.join("rex")),
        )),
    )
    .unwrap();
    take_until(&mut w, &l1, 9, &truth);
    let e = push_l2(&job, &PushOptions::default()).unwrap_err();
    assert!(e.to_string().contains("not copied"), "{e}");
    assert_eq!(
        list_ic_files(&l1).unwrap().len(),
        3,
        "the checkpoints were not kept"
    );
    assert!(
        !l2.join("g00000003.pf").exists(),
        "a damaged copy reached L2"
    );
}

/// A push died between L1's manifest and L2's; the next push's recovery
/// uploads L1's copy of that generation. A gc that collects its files just
/// before that commit is answered as after a push's own commit: they are
/// uploaded again before the checkpoints are deleted.
#[test]
fn files_collected_before_a_recovered_commit_are_uploaded_again() {
    use rexctl::l2::push::{Job, PushOptions, push_l2};
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    std::fs::create_dir_all(&l1).unwrap();
    let truth = d.path().join("truth");
    let mut w = workload("balanced", 256, 11);
    let want = take_until(&mut w, &l1, 3, &truth);
    let kept: Vec<(PathBuf, Vec<u8>)> = list_ic_files(&l1)
        .unwrap()
        .into_iter()
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    let job = Job::open(&l1, Box::new(DirStore::create(&l2).unwrap())).unwrap();
    push_l2(&job, &PushOptions::default()).unwrap();
    // The push died before L2's manifest: its checkpoints are still in L1.
    std::fs::remove_file(l2.join(manifest_name(1))).unwrap();
    for (p, b) in &kept {
        std::fs::write(p, b).unwrap();
    }
    let job = Job::open(
        &l1,
        Box::new(GcBeforeCommit(DirStore::open(&l2).unwrap(), None)),
    )
    .unwrap();
    let r = push_l2(&job, &PushOptions::default()).unwrap();
    for want_note in ["uploaded generation 1", "uploaded again"] {
        assert!(
            r.recovered.iter().any(|n| n.contains(want_note)),
            "{want_note}: {:?}",
            r.recovered
        );
    }
    assert_l1_deleted_and_l2_restores(
        &l1,
        &l2,
        &d.path().join("out.rexic"),
        &want,
        "L2 alone after the recovery",
    );
}

/// `rexctl ARGS` in a child killed after a minute: a hang (or a read of
/// terabytes) fails the test instead of stalling the suite.
fn within_a_minute(args: &[&str]) -> Output {
    let mut c = rexctl()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t0.elapsed() > std::time::Duration::from_secs(60) {
            let _ = c.kill();
            panic!("rexctl {args:?} still runs after a minute");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    c.wait_with_output().unwrap()
}

/// A FIFO under a manifest's name, in L2 or in L1's copy (helper-38: every
/// command blocked opening it, forever, and a push held the job's lock):
/// the manifest is invalid, as a directory's would be. A restore names it
/// and exits 3, `--fallback` restores the generation before, and `status`,
/// `verify` and `gc` finish.
#[test]
fn a_fifo_under_a_manifest_name_is_an_invalid_manifest_not_a_hang() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    let mut w = workload("balanced", 200, 4);
    for last in [1, 3] {
        take_until(&mut w, &l1, last, &d.path().join("truth"));
        rex_ok(&push_args(&l1, &l2, &[]));
    }
    let fifo = |p: &Path| {
        std::fs::remove_file(p).unwrap();
        let st = Command::new("mkfifo").arg(p).status().unwrap();
        assert!(st.success(), "mkfifo {}", p.display());
    };
    fifo(&l2.join(manifest_name(2)));
    fifo(&l1.join("rex").join(manifest_name(2)));
    let out = d.path().join("out.rexic");
    let o = within_a_minute(&["restore", "--l2", s(&l2), "--l2-only", "-o", s(&out)]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("not a regular file"), "{}", stderr(&o));
    let o = within_a_minute(&[
        "restore",
        "--l2",
        s(&l2),
        "--l2-only",
        "--fallback",
        "-o",
        s(&out),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let seq1 = d.path().join("truth").join("seq-1.rexic");
    assert_image(&out, &seq1, "L2 --fallback");
    let o = within_a_minute(&[
        "restore",
        "--l1",
        s(&l1),
        "--l2",
        s(&l2),
        "--fallback",
        "-o",
        s(&out),
        "-f",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_image(&out, &seq1, "L1+L2 --fallback");
    for args in [
        &["status", "--l1", s(&l1), "--l2", s(&l2)][..],
        &["verify", "--l1", s(&l1), "--l2", s(&l2)][..],
        &["gc", "--l2", s(&l2)][..],
    ] {
        let o = within_a_minute(args);
        assert!(o.status.code().is_some() && !stderr(&o).contains("panicked"));
    }
}

/// A directory, a FIFO or a symbolic link loop under an L2 data file's name
/// (helper-40: read as "no such object", exit 1) is damage to the store: an
/// L2-only restore and `verify` name the file and what is there (exit 3),
/// and a restore from L1 plus L2 reads L1's copy of that generation.
#[test]
fn a_data_file_name_holding_no_file_is_named_for_what_is_there() {
    let c = chain3(41);
    for (what, expect) in [
        ("directory", "not a regular file but a directory"),
        ("fifo", "not a regular file but a FIFO"),
        ("loop", "symbolic link that leads nowhere"),
    ] {
        let (work, l1, l2) = chain_copy(&c);
        let rps = gen_file(&l2, 3, "rps");
        std::fs::remove_file(&rps).unwrap();
        match what {
            "directory" => std::fs::create_dir(&rps).unwrap(),
            "fifo" => assert!(Command::new("mkfifo").arg(&rps).status().unwrap().success()),
            _ => std::os::unix::fs::symlink(rps.file_name().unwrap(), &rps).unwrap(),
        }
        let out = work.path().join("out.rexic");
        let o = within_a_minute(&["restore", "--l2", s(&l2), "--l2-only", "-o", s(&out)]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(3), "{what}: {err}");
        assert!(
            err.contains(s(&rps)) && err.contains(expect),
            "{what}: {err}"
        );
        assert!(!out.exists(), "{what}: an output was left");
        let o = within_a_minute(&["verify", "--l2", s(&l2)]);
        assert_eq!(o.status.code(), Some(3), "{what}: {}", stderr(&o));
        let said = String::from_utf8_lossy(&o.stdout);
        assert!(said.contains(expect), "{what}: {said}");
        restore_exact(
            &l2,
            Some(&l1),
            &[],
            &work.path().join("b"),
            &c.images[&7],
            what,
        );
    }
}

/// `--fallback` walks back within the run it starts from: job B's first
/// generation copied over job A's (helper-38) breaks A's lineage, and the
/// restore exits 3 naming the generations of the other run instead of
/// restoring B's state with exit 0. So does L1 plus L2, whose runs are
/// A's (L2's valid foreign manifest of generation 1 and L1's copy of it
/// differ: two histories, a refusal, not B's image).
#[test]
fn fallback_never_crosses_to_another_run() {
    let d = tempfile::tempdir().unwrap();
    let p = |n: &str| d.path().join(n);
    let (mut a, mut b) = (workload("balanced", 200, 1), workload("balanced", 200, 2));
    for last in [1, 3, 5] {
        take_until(&mut a, &p("a1"), last, &p("ta"));
        rex_ok(&push_args(&p("a1"), &p("a2"), &[]));
    }
    take_until(&mut b, &p("b1"), 1, &p("tb"));
    rex_ok(&push_args(&p("b1"), &p("b2"), &[]));
    for ext in ["manifest", "rps", "pf", "ptab"] {
        let name = format!("g00000001.{ext}");
        std::fs::copy(p("b2").join(&name), p("a2").join(&name)).unwrap();
    }
    // Each refused (exit 3, the other run named, nothing written): from L2
    // alone with and without --fallback (the broken link), and from L1 plus
    // L2, whose runs are A's.
    for (i, (l1, extra)) in [
        (None, &["--l2-only", "--fallback"][..]),
        (None, &["--l2-only"][..]),
        (Some(p("a1")), &["--fallback"][..]),
    ]
    .into_iter()
    .enumerate()
    {
        let (o, _) = restore(&p("a2"), l1.as_deref(), extra, &p(&format!("r{i}")));
        assert_eq!(o.status.code(), Some(3), "{extra:?}: {}", stderr(&o));
        // From L1 plus L2, before any fallback: generation 1 differs
        // between the two places, two histories (helper-111).
        let why = if l1.is_some() {
            "generation 1 differ"
        } else {
            "of another run"
        };
        if extra.contains(&"--fallback") {
            assert!(stderr(&o).contains(why), "{}", stderr(&o));
        }
    }
}

/// A file of a generation grown into a sparse file of terabytes (helper-38:
/// `verify` read all of it before reporting the length its size shows):
/// `verify` and `restore` refuse it from its length, without reading it,
/// exit 3 naming it; in L1's copy, the restore reads that generation
/// from L2 instead, exactly.
#[test]
fn a_file_grown_to_terabytes_is_refused_by_its_length_not_read() {
    let c = chain3(29);
    for kind in ["rps", "pf", "ptab"] {
        for in_l1 in [false, true] {
            let ctx = format!(
                "generation 2 {kind}, {}",
                if in_l1 { "L1's copy" } else { "L2" }
            );
            let (work, l1, l2) = chain_copy(&c);
            let dir = if in_l1 { l1.join("rex") } else { l2.clone() };
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(gen_file(&dir, 2, kind))
                .unwrap();
            // 8 TiB where the file system allows it (ext4 stops at 16).
            if f.set_len(8 << 40).is_err() {
                f.set_len(1 << 40).unwrap();
            }
            drop(f);
            let v = within_a_minute(&["verify", "--l2", s(&l2), "--l1", s(&l1)]);
            assert_eq!(v.status.code(), Some(3), "{ctx}: verify\n{}", stderr(&v));
            assert_names(&v, 2, kind, Defect::Flip, &format!("{ctx}: verify"));
            let out = work.path().join("out.rexic");
            if in_l1 {
                let o =
                    within_a_minute(&["restore", "--l2", s(&l2), "--l1", s(&l1), "-o", s(&out)]);
                assert!(o.status.success(), "{ctx}: restore\n{}", stderr(&o));
                assert!(stderr(&o).contains("warning"), "{ctx}: {}", stderr(&o));
                assert_image(&out, &c.images[&7], &ctx);
            } else {
                let o = within_a_minute(&["restore", "--l2", s(&l2), "--l2-only", "-o", s(&out)]);
                assert_names(&o, 2, kind, Defect::Flip, &format!("{ctx}: restore"));
                assert!(!out.exists(), "{ctx}: an output");
            }
        }
    }
}

/// Raw patterns of an older generation's L1 copy changed with every CRC
/// forged to match (helper-38): each chunk passes, the pages that reach
/// those patterns from a newer generation fail their CRC, and the page
/// names the newer generation. The restore from L1 plus L2 once re-read
/// only that generation from L2 and failed (exit 3) though L2 was sound;
/// now every generation of the lineage is read from L2, exactly, loudly.
#[test]
fn forged_damage_in_an_older_l1_generation_restores_from_l2() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2, truth) = (d.path().join("l1"), d.path().join("l2"), d.path().join("t"));
    let mut w = workload("balanced", 64, 21);
    let mut want = PathBuf::new();
    for last in [1, 3, 5] {
        want = take_until(&mut w, &l1, last, &truth);
        // Raw chunks, so that the test can change patterns in place.
        rex_ok(&push_args(&l1, &l2, &["--zstd-level", "0"]));
    }
    // Every 7th pattern of generation 1's L1 copy, CRCs forged.
    let rps = gen_file(&l1.join("rex"), 1, "rps");
    let mut b = std::fs::read(&rps).unwrap();
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let stored_len = u64::from_le_bytes(b[48..56].try_into().unwrap()) as usize;
    let table = 64 + stored_len;
    let chunks = (b.len() - table - 4) / 16;
    let mut at = 64;
    for i in 0..chunks {
        let e = table + 16 * i;
        let len = u32_at(&b, e) as usize;
        assert_eq!(u32_at(&b, e + 4), 0, "chunk {i} is raw");
        for rec in (0..len / 32).step_by(7) {
            b[at + rec * 32] ^= 0x5a;
        }
        let crc = crc32fast::hash(&b[at..at + len]);
        b[e + 8..e + 12].copy_from_slice(&crc.to_le_bytes());
        b[e + 12..e + 16].copy_from_slice(&crc.to_le_bytes());
        at += len;
    }
    let end = b.len();
    let crc = crc32fast::hash(&b[table..end - 4]);
    b[end - 4..].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&rps, &b).unwrap();

    let err = restore_exact(
        &l2,
        Some(&l1),
        &[],
        &d.path().join("a"),
        &want,
        "forged L1 g1",
    );
    assert!(
        err.contains("generation 1: L1 copy unusable") && err.contains("failed its CRC"),
        "no warning naming generation 1:\n{err}"
    );
    restore_exact(&l2, None, &[], &d.path().join("b"), &want, "L2 alone");
    let v = rex(&["verify", "--l2", s(&l2), "--l1", s(&l1)], None);
    assert_eq!(v.status.code(), Some(3), "verify --l1: {}", stderr(&v));
}

/// L1's copy of the chain that cannot be listed (here a regular file under
/// its name; also a directory without permission). It may hold a newer
/// generation whose L2 manifest was lost, and nothing else tells (pending
/// checkpoints that continue L2's newest may be stale copies of ones that
/// generation coalesced: helper-40): the restore of the newest state is
/// refused (exit 1, naming --l2-only and --fallback); with --fallback,
/// every generation comes from L2, L1's pending checkpoints on top, and
/// the warning says what may be missing. It failed with exit 1 and no way
/// out before (helper-38), then restored an older state with exit 0
/// (helper-39). `verify` reports it (exit 3).
#[test]
fn an_unreadable_l1_chain_copy_is_read_from_l2() {
    let c = chain3(31);
    let (work, l1, l2) = chain_copy(&c);
    std::fs::remove_dir_all(l1.join("rex")).unwrap();
    std::fs::write(l1.join("rex"), b"not a directory").unwrap();
    let (o, _) = restore(&l2, Some(&l1), &[], &work.path().join("r"));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("--l2-only"), "{}", stderr(&o));
    fallback_exact(
        &l2,
        &l1,
        &work.path().join("a"),
        &c.images[&7],
        "L1/rex a file",
        &[
            "L1's copy of the chain cannot be read",
            "generation 3",
            "a newer generation it may hold was not restored",
        ],
    );
    let v = rex(&["verify", "--l2", s(&l2), "--l1", s(&l1)], None);
    assert_eq!(v.status.code(), Some(3), "verify: {}", stderr(&v));
    assert!(stderr(&v).contains("rex"), "{}", stderr(&v));

    // Without a pending checkpoint (helper-39: seq 3 restored with exit 0
    // where seq 6 was durable), the same.
    for seq in [6, 7] {
        std::fs::remove_file(l1.join(format!("ckpt-{seq:08}.rexic"))).unwrap();
    }
    let (o, _) = restore(&l2, Some(&l1), &[], &work.path().join("b"));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("--l2-only"), "{}", stderr(&o));
    fallback_exact(
        &l2,
        &l1,
        &work.path().join("c"),
        &c.images[&5],
        "no pending",
        &["a newer generation it may hold was not restored"],
    );
    restore_exact(
        &l2,
        None,
        &[],
        &work.path().join("d"),
        &c.images[&5],
        "L2 alone",
    );
}

/// `restore --fallback` from L1 plus L2 into `out`: exactly `want`, with a
/// warning that holds every one of `needles`. Returns standard error.
fn fallback_exact(
    l2: &Path,
    l1: &Path,
    out: &Path,
    want: &Path,
    ctx: &str,
    needles: &[&str],
) -> String {
    let err = restore_exact(l2, Some(l1), &["--fallback"], out, want, ctx);
    for n in needles {
        assert!(
            err.contains(n),
            "{ctx}: the warning does not say {n:?}:\n{err}"
        );
    }
    err
}

/// `--fallback` from L1 plus L2 to an older generation says which of L1's
/// checkpoints it leaves out (they continue the generation that could not
/// be read): the warning named only the generation (helper-38).
#[test]
fn a_fallback_names_the_l1_checkpoints_it_leaves_out() {
    let c = chain3(33);
    let (work, l1, l2) = chain_copy(&c);
    std::fs::remove_file(gen_file(&l2, 3, "rps")).unwrap();
    std::fs::remove_file(gen_file(&l1.join("rex"), 3, "rps")).unwrap();
    fallback_exact(
        &l2,
        &l1,
        &work.path().join("a"),
        &c.images[&3],
        "g3 gone",
        &[
            "fell back to generation 2 (seq 3)",
            "left out: L1's checkpoints of seq 6..=7 (2 files)",
        ],
    );
    // A checkpoint whose header cannot be read is named too (helper-40).
    let seven = l1.join("ckpt-00000007.rexic");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&seven)
        .unwrap()
        .set_len(100)
        .unwrap();
    fallback_exact(
        &l2,
        &l1,
        &work.path().join("b"),
        &c.images[&3],
        "g3 gone, ckpt 7 cut",
        &[
            "seq 6..=6 (1 file)",
            "header unreadable",
            "ckpt-00000007.rexic",
        ],
    );
}

/// A generation L2 lost a file of while L1's copy of it is damaged: the
/// restore from L1 plus L2 fails (exit 3) naming both copies, not only
/// L2's missing object (helper-38: the damaged L1 file was named only by
/// `verify`).
#[test]
fn neither_copy_of_a_generation_readable_names_both() {
    let c = chain3(35);
    let (work, l1, l2) = chain_copy(&c);
    std::fs::remove_file(gen_file(&l2, 3, "rps")).unwrap();
    damage(&gen_file(&l1.join("rex"), 3, "rps"), Defect::Flip);
    let (o, _) = restore(&l2, Some(&l1), &[], &work.path().join("a"));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("neither copy can be read")
            && err.contains(s(&gen_file(&l2, 3, "rps")))
            && err.contains(s(&gen_file(&l1.join("rex"), 3, "rps"))),
        "both copies are not named:\n{err}"
    );
}

/// L2 lost its newest manifest and L1's copy of it is damaged (helper-40:
/// the generation before was restored with exit 0 and no word): the L1 +
/// L2 restore refuses as it does for a damaged newest manifest in L2
/// (exit 3, naming it); --fallback restores the generation before, saying
/// so.
#[test]
fn a_damaged_l1_manifest_of_a_generation_l2_lost_is_not_passed_over() {
    let c = chain3(37);
    let (work, l1, l2) = chain_copy(&c);
    std::fs::remove_file(gen_file(&l2, 3, "manifest")).unwrap();
    for seq in [6, 7] {
        std::fs::remove_file(l1.join(format!("ckpt-{seq:08}.rexic"))).unwrap();
    }
    let m = gen_file(&l1.join("rex"), 3, "manifest");
    let len = std::fs::metadata(&m).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&m)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let (o, _) = restore(&l2, Some(&l1), &[], &work.path().join("a"));
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_names(&o, 3, "manifest", Defect::Truncate, "damaged L1 manifest");
    fallback_exact(
        &l2,
        &l1,
        &work.path().join("b"),
        &c.images[&3],
        "damaged L1 manifest",
        &["generation 3"],
    );
}

/// A stray incremental checkpoint of another run in L1 makes `--fallback`
/// refuse every older generation (they are not that run's state): the
/// error says so, generation by generation (exit 3), instead of the first
/// failure alone with exit 1 (helper-40).
#[test]
fn a_refused_fallback_says_why_each_older_generation_was_refused() {
    let c = chain3(39);
    let (work, l1, l2) = chain_copy(&c);
    std::fs::remove_file(gen_file(&l2, 3, "rps")).unwrap();
    std::fs::remove_file(gen_file(&l1.join("rex"), 3, "rps")).unwrap();
    let mut other = workload("balanced", 64, 40);
    let stray = work.path().join("other");
    take_until(&mut other, &stray, 3, &work.path().join("other-truth"));
    std::fs::copy(
        stray.join("ckpt-00000003.rexic"),
        l1.join("ckpt-00000003.rexic"),
    )
    .unwrap();
    let (o, _) = restore(&l2, Some(&l1), &["--fallback"], &work.path().join("a"));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("no older state restores either")
            && err.contains("generation 2:")
            && err.contains("generation 1:")
            && err.contains("another run"),
        "{err}"
    );
}

/// A manifest whose `last_seq` was raised past the checkpoints it lists
/// (`seq_times`), CRC and all forged, in L2 and in L1's copy: pending
/// checkpoints 6 and 7 then looked pushed. The restore gave generation 3's
/// state labelled seq 7 with exit 0, and a push said "nothing to push" and
/// deleted them (helper-59). Now the manifest is refused as inconsistent
/// (exit 3, naming `seq_times`): the push keeps them, and `--fallback`
/// restores generation 2 with them on top refused too (they do not
/// continue it), never generation 3 as seq 7.
#[test]
fn a_last_seq_raised_past_its_checkpoints_is_refused_and_nothing_is_deleted() {
    let c = chain3(59);
    let (_w, l1, l2) = chain_copy(&c);
    for dir in [l2.clone(), l1.join("rex")] {
        let path = dir.join(manifest_name(3));
        let mut m = Manifest::decode(&path, &std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(m.seq_times.last().map(|t| t.0), Some(5));
        m.last_seq = 7;
        std::fs::write(&path, m.encode()).unwrap();
    }
    let pending = || {
        names_in(&l1)
            .into_iter()
            .filter(|n| n.ends_with(".rexic"))
            .collect::<Vec<_>>()
    };
    let before = pending();
    assert_eq!(before.len(), 2, "{before:?}");
    let out = d_out(&l1);
    let r = rex(
        &["restore", "--l1", s(&l1), "--l2", s(&l2), "-o", s(&out)],
        None,
    );
    assert_eq!(r.status.code(), Some(3), "restore: {}", show(&[], &r));
    assert!(stderr(&r).contains("seq_times"), "{}", stderr(&r));
    assert!(!out.exists(), "restore left {}", out.display());
    let p = rex(&push_args(&l1, &l2, &[]), None);
    assert_eq!(p.status.code(), Some(3), "push: {}", show(&[], &p));
    assert_eq!(pending(), before, "the push deleted pending checkpoints");
    let st = rex(&["status", "--l1", s(&l1), "--l2", s(&l2)], None);
    assert_ne!(st.status.code(), Some(0), "status: {}", show(&[], &st));
}

fn d_out(l1: &Path) -> PathBuf {
    l1.parent().unwrap().join("out.rexic")
}

/// A pointer of a page generation 2 wrote that names one of generation 3's
/// patterns (Pointer File rewritten, CRCs forged): the chain's pattern
/// space holds it, the generation's does not (FORMAT.md §3.2.4). `verify`
/// refused it and `restore` took the pattern, which did not exist when the
/// page was written (helper-59, who forged the page's CRC too). Both now
/// refuse it, naming the Pointer File and the generation's pattern space.
#[test]
fn a_pointer_into_a_newer_generations_patterns_is_refused() {
    use rexctl::format::chunked::{ChunkedFile, ChunkedWriter, Kind};
    use rexctl::format::manifest::Role;
    let c = chain3(60);
    let (_w, l1, l2) = chain_copy(&c);
    let store = DirStore::open(&l2).unwrap();
    let index = ChainIndex::load(&store).unwrap();
    let chain = OpenChain::open(&store, &index, 3).unwrap();
    let (base2, base3) = (
        chain.gens[1].manifest.pattern_base,
        chain.gens[2].manifest.pattern_base,
    );
    let lp = chain
        .live_pages()
        .into_iter()
        .find(|lp| lp.layer == 1)
        .expect("a page generation 2 wrote is live");
    drop(chain);
    let pf_path = gen_file(&l2, 2, "pf");
    let pf = ChunkedFile::open(&pf_path, Kind::Pf).unwrap();
    let header = *pf.header();
    let mut ptrs = pf.payload().unwrap().to_vec();
    let at = (lp.pos * u64::from(header.aux) * 4) as usize;
    ptrs[at..at + 4].copy_from_slice(&(base3 as u32 + 1).to_le_bytes());
    drop(pf);
    let mut w = ChunkedWriter::create(&pf_path, header).unwrap();
    w.set_next_new(base2 as u32);
    w.write(&ptrs).unwrap();
    let (bytes, crc32) = w.finish().unwrap();
    let mpath = l2.join(manifest_name(2));
    let mut m = Manifest::decode(&mpath, &std::fs::read(&mpath).unwrap()).unwrap();
    let e = m.files.iter_mut().find(|f| f.role == Role::Pf).unwrap();
    (e.bytes, e.crc32) = (bytes, crc32);
    std::fs::write(&mpath, m.encode()).unwrap();

    let out = d_out(&l1);
    for args in [
        vec!["restore", "--l2", s(&l2), "--l2-only", "-o", s(&out)],
        vec!["verify", "--l2", s(&l2)],
    ] {
        let r = rex(&args, None);
        let err = stderr(&r);
        assert_eq!(r.status.code(), Some(3), "{}", show(&args, &r));
        assert!(
            err.contains("g00000002.pf") && err.contains("outside the generation's pattern space"),
            "{}",
            show(&args, &r)
        );
        assert!(!out.exists(), "restore left {}", out.display());
    }
}

/// A pending incremental checkpoint with another page size than L2's
/// newest generation: push and restore refused it, `status` and `verify`
/// said all was well (helper-59). All four refuse it now, naming the file.
#[test]
fn a_pending_incremental_of_another_page_size_is_refused_by_every_command() {
    use rexctl::format::ic::IcWriter;
    let c = chain3(61);
    let (_w, l1, l2) = chain_copy(&c);
    let p6 = l1.join(rexctl::l1::ic_file_name(6));
    let m6 = IcMeta::read(&p6).unwrap();
    std::fs::remove_file(l1.join(rexctl::l1::ic_file_name(7))).unwrap();
    std::fs::remove_file(&p6).unwrap();
    let page = m6.pages.first().copied().unwrap_or(0x1000) / 2;
    let mut w = IcWriter::create_in_chain(
        &p6,
        8192,
        6,
        false,
        m6.header.time_ns,
        m6.chain_id,
        vec![page],
        Vec::new(),
    )
    .unwrap();
    w.push_page(&[7u8; 8192]).unwrap();
    w.finish().unwrap();
    let out = d_out(&l1);
    for args in [
        vec!["status", "--l1", s(&l1), "--l2", s(&l2)],
        vec!["verify", "--l1", s(&l1), "--l2", s(&l2)],
        vec!["restore", "--l1", s(&l1), "--l2", s(&l2), "-o", s(&out)],
        push_args(&l1, &l2, &[]),
    ] {
        let r = rex(&args, None);
        assert_eq!(r.status.code(), Some(3), "{}", show(&args, &r));
        let err = stderr(&r);
        assert!(
            err.contains("ckpt-00000006") && err.contains("page size"),
            "{}",
            show(&args, &r)
        );
    }
    assert!(p6.exists(), "the checkpoint was deleted");
}

/// A batch of two runs: the job's run A continued L2's generation (seq 4
/// and 5), then it restarted as run B, whose FULL checkpoint (seq 6) makes
/// the generation a full one of run B. A push killed after its commit,
/// before it deleted its batch, left run A's checkpoints in L1, which no
/// rule counted as pushed (another run's) and none could continue: every
/// later push, `status` and `verify` failed (exit 3), and so did a librex
/// restart, until someone deleted them by hand (helper-60). The generation
/// now records the other runs' checkpoints its batch coalesced
/// (`other_runs`), and the push after the crash takes them as pushed.
#[test]
fn crash_after_committing_a_batch_of_two_runs_recovers() {
    let d = tempfile::tempdir().unwrap();
    let t = d.path().join("template");
    let (l1, l2, truth) = (t.join("l1"), t.join("l2"), d.path().join("truth"));
    let t0 = 1_800_000_000_000_000_000;
    let mut a = workload("balanced", 64, 63);
    let old = take_until_at(&mut a, &l1, 3, &truth, t0);
    rex_ok(&push_args(&l1, &l2, &[]));
    take_until_at(&mut a, &l1, 5, &truth, t0);
    let mut b = workload("balanced", 64, 64);
    for _ in 0..2 {
        let mut c = b.step();
        c.seq += 6;
        b.write(&c, &l1, t0 + 100_000_000_000 + c.seq).unwrap();
    }
    let new = truth.join("run-b-seq-7.rexic");
    b.write_image(&new).unwrap();
    run_crash_case(&CrashCase {
        name: "batch of two runs",
        template: t,
        push_args: vec![],
        old: Some(old),
        new,
        max_l2_chains: 2,
    });
}

/// A data file a valid manifest names and a directory L2 lacks is bad data
/// (exit 3, naming the file and the generation), as a bucket's missing
/// object is, not an I/O failure (helper-72: exit 1, "no such object").
/// So it is for a push when L1's copy lacks it too: the chain is broken in
/// both places, and the pending checkpoints stay (helper-99: exit 1, from
/// the copy that was to heal L1's).
#[test]
fn a_missing_data_file_is_bad_data_not_an_io_failure() {
    let c = chain3(32);
    for kind in ["rps", "pf", "ptab"] {
        let (work, l1, l2) = chain_copy(&c);
        std::fs::remove_file(gen_file(&l2, 2, kind)).unwrap();
        let (out, _) = restore(&l2, None, &[], &work.path().join("o"));
        assert_eq!(out.status.code(), Some(3), "{kind}: {}", stderr(&out));
        let missing = format!("g00000002.{kind}: missing: generation 2's manifest");
        assert!(stderr(&out).contains(&missing), "{kind}: {}", stderr(&out));
        std::fs::remove_file(gen_file(&l1.join("rex"), 2, kind)).unwrap();
        let pending = names_in(&l1);
        for cmd in [&["push-l2"][..], &["flush", "--max-age", "1"]] {
            let mut args = cmd.to_vec();
            args.extend(["--l1", s(&l1), "--l2", s(&l2)]);
            let out = rex(&args, None);
            assert_eq!(out.status.code(), Some(3), "{kind}: {}", show(&args, &out));
            assert!(stderr(&out).contains(&missing), "{kind}: {}", stderr(&out));
            assert_eq!(names_in(&l1), pending, "{kind}: {cmd:?}");
        }
    }
}

/// `status` compares the listing's sizes with the manifests: a data file
/// missing or of another size in L2 or in L1's copy is said, exit 3
/// (helper-72: a 0-byte RPS said ok, exit 0). It reads no data, so a
/// flipped byte stays `verify`'s to find.
#[test]
fn status_says_a_missing_or_resized_data_file() {
    let c = chain3(33);
    for (level, what) in [("L2", "missing"), ("L2", "empty"), ("L1", "empty")] {
        let ctx = format!("{level} {what}");
        let (_work, l1, l2) = chain_copy(&c);
        let st = |l1: &Path, l2: &Path| rex(&["status", "--l1", s(l1), "--l2", s(l2)], None);
        assert!(st(&l1, &l2).status.success(), "{ctx}");
        let dir = if level == "L2" {
            l2.clone()
        } else {
            l1.join("rex")
        };
        let f = gen_file(&dir, 3, "rps");
        match what {
            "missing" => std::fs::remove_file(&f).unwrap(),
            _ => std::fs::File::create(&f).map(drop).unwrap(),
        }
        let o = st(&l1, &l2);
        assert_eq!(o.status.code(), Some(3), "{ctx}: {}", stderr(&o));
        let said = String::from_utf8_lossy(&o.stdout).into_owned() + &stderr(&o);
        let want = match what {
            "missing" => format!("{level} generation 3: g00000003.rps is missing"),
            _ => format!("{level} generation 3: g00000003.rps holds 0 bytes, its manifest says"),
        };
        assert!(said.contains(&want), "{ctx}: {said}");
    }
}
