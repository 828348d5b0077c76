//! "Never a silent wrong image", end to end against the real binary: cases
//! where L1 and L2 disagree or hold something unexpected (a lost or damaged
//! older L2 manifest, a manifest or IC file that is a symlink, a damaged
//! pending IC file, a FIFO, absurd headers), and in each one rexctl either
//! gives the newest durable state, heals, or fails cleanly naming the file;
//! never an older image passed off as the newest, never a panic or abort.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rexctl::format::ic::IcMeta;
use rexctl::format::manifest::{GenKind, manifest_name};
use rexctl::l1::ic_file_name;
use rexctl::l2::chain::ChainIndex;
use rexctl::store::DirStore;

use crate::util::{
    assert_image, assert_no_failures, case, copy_tree, names_in, rexctl, s, same_image, show,
    stderr, take_until, take_until_at, workload,
};

// ---------------------------------------------------------------------------
// Helpers (after l2_faults.rs)
// ---------------------------------------------------------------------------

/// Runs `rexctl args...` (never with an inherited failpoint).
fn rex(args: &[&str]) -> Output {
    let mut c: Command = rexctl();
    c.args(args).env_remove("REX_FAILPOINT");
    c.output().expect("run rexctl")
}

fn rex_ok(args: &[&str]) -> String {
    let out = rex(args);
    assert!(out.status.success(), "{}", show(args, &out));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Standard output and standard error together.
fn all_output(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A failure is clean: no panic (exit 101, "panicked"), no abort (exit 134,
/// a signal).
fn assert_no_crash(out: &Output, ctx: &str) {
    assert!(
        out.status.signal().is_none(),
        "{ctx}: killed by signal {:?} (abort?)\n{}",
        out.status.signal(),
        all_output(out)
    );
    let code = out.status.code();
    assert!(
        code != Some(101) && code != Some(134),
        "{ctx}: exit {code:?} (panic or abort)\n{}",
        all_output(out)
    );
    assert!(
        !all_output(out).contains("panicked"),
        "{ctx}: panic\n{}",
        all_output(out)
    );
}

/// A clean non-zero exit with an error message.
fn assert_clean_error(out: &Output, ctx: &str) {
    assert!(!out.status.success(), "{ctx}: succeeded");
    assert_no_crash(out, ctx);
    assert!(
        stderr(out).contains("rexctl:"),
        "{ctx}: no error message\n{}",
        all_output(out)
    );
}

/// A restore into a fresh, empty directory `outdir`; returns the output and
/// the path of the image (which exists only on success). A failure must be
/// clean and leave nothing behind.
fn restore(l2: &Path, l1: Option<&Path>, extra: &[&str], outdir: &Path) -> (Output, PathBuf) {
    std::fs::create_dir_all(outdir).unwrap();
    let out_file = outdir.join("image.rexic");
    let mut args: Vec<&str> = vec!["restore", "--l2", s(l2)];
    if let Some(l1) = l1 {
        args.extend(["--l1", s(l1)]);
    }
    args.extend(["--out", s(&out_file)]);
    args.extend_from_slice(extra);
    let out = rex(&args);
    if out.status.success() {
        assert!(out_file.is_file(), "{}", show(&args, &out));
    } else {
        assert_clean_error(&out, &show(&args, &out));
        assert!(
            names_in(outdir).is_empty(),
            "a failed restore left files behind: {:?}\n{}",
            names_in(outdir),
            show(&args, &out)
        );
    }
    (out, out_file)
}

fn push_args<'a>(l1: &'a Path, l2: &'a Path) -> Vec<&'a str> {
    vec!["push-l2", "--l1", s(l1), "--l2", s(l2)]
}

fn gen_file(dir: &Path, g: u64, kind: &str) -> PathBuf {
    dir.join(format!("g{g:08}.{kind}"))
}

fn flip_byte(path: &Path, at: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[at as usize] ^= 0xff;
    std::fs::write(path, b).unwrap();
}

/// (generation, last seq, kind) of every valid manifest in `dir`.
fn generations(dir: &Path) -> Vec<(u64, u64, GenKind)> {
    let store = DirStore::open(dir).unwrap();
    ChainIndex::load(&store)
        .unwrap()
        .manifests
        .values()
        .map(|m| (m.generation, m.last_seq, m.kind))
        .collect()
}

/// A job whose L2 and L1 hold generations 1 (full, seq 0..=1), 2 (Δ, seq
/// 2..=3) and 3 (Δ, seq 4..=5), with `truth/seq-{1,3,5}.rexic`; with
/// `more`, seq 6..=7 are taken into `template/more` (not into L1) and
/// `truth/seq-7.rexic` written.
struct Chain {
    _dir: tempfile::TempDir,
    template: PathBuf,
    truth: PathBuf,
}

impl Chain {
    fn image(&self, seq: u64) -> PathBuf {
        self.truth.join(format!("seq-{seq}.rexic"))
    }
}

impl Chain {
    /// A fresh copy of the template's L1 and L2, in a new temporary
    /// directory: (the directory, L1, L2).
    fn copy(&self) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let work = tempfile::tempdir().unwrap();
        let (l1, l2) = (work.path().join("l1"), work.path().join("l2"));
        copy_tree(&self.template.join("l1"), &l1);
        copy_tree(&self.template.join("l2"), &l2);
        (work, l1, l2)
    }
}

fn chain(seed: u64, gens: u64, more: bool) -> Chain {
    let d = tempfile::tempdir().unwrap();
    let t = d.path().join("template");
    let (l1, l2, truth) = (t.join("l1"), t.join("l2"), d.path().join("truth"));
    let mut w = workload("balanced", 48, seed);
    for g in 1..=gens {
        take_until(&mut w, &l1, 2 * g - 1, &truth);
        rex_ok(&push_args(&l1, &l2));
    }
    let want: Vec<(u64, u64, GenKind)> = (1..=gens)
        .map(|g| {
            let kind = if g == 1 {
                GenKind::Full
            } else {
                GenKind::Delta
            };
            (g, 2 * g - 1, kind)
        })
        .collect();
    assert_eq!(generations(&l2), want, "L2 after the setup pushes");
    assert_eq!(generations(&l1.join("rex")), want, "L1 after the setup");
    assert!(
        rexctl::l1::list_ic_files(&l1).unwrap().is_empty(),
        "the setup pushes leave IC files in L1"
    );
    if more {
        take_until(&mut w, &t.join("more"), 2 * gens + 1, &truth);
    }
    Chain {
        template: t,
        truth,
        _dir: d,
    }
}

// ---------------------------------------------------------------------------
// 1. A lost or damaged older L2 manifest
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ManifestDefect {
    Delete,
    Flip,
}

/// One case: returns its failed checks (each check runs, so one run shows
/// every way the case goes wrong).
fn older_l2_manifest_case(c: &Chain, k: u64, defect: ManifestDefect) -> Vec<String> {
    let ctx = format!("L2 manifest of generation {k} {defect:?}");
    let (work, l1, l2) = c.copy();
    let man = l2.join(manifest_name(k));
    match defect {
        ManifestDefect::Delete => std::fs::remove_file(&man).unwrap(),
        ManifestDefect::Flip => {
            let len = std::fs::metadata(&man).unwrap().len();
            flip_byte(&man, len / 2);
        }
    }
    // More checkpoints (seq 6..=7) arrive in L1.
    copy_tree(&c.template.join("more"), &l1);
    let pending: Vec<String> = names_in(&l1)
        .into_iter()
        .filter(|n| n.ends_with(".rexic"))
        .collect();
    assert_eq!(pending.len(), 2, "{ctx}: {pending:?}");
    let want = c.image(7);

    let args = push_args(&l1, &l2);
    let push = rex(&args);
    let pushed = push.status.success();
    let push_shown = show(&args, &push);
    let l2_gk = ChainIndex::load(&DirStore::open(&l2).unwrap())
        .unwrap()
        .get(k)
        .is_some();
    let mut failures = Vec::new();
    case(&mut failures, || {
        assert_no_crash(&push, &format!("{ctx}: push-l2"))
    });
    // Never delete generation k's data while L2 has no valid manifest of it.
    case(&mut failures, || {
        if !l2_gk {
            let gone: Vec<String> = ["rps", "pf", "ptab"]
                .iter()
                .map(|kind| gen_file(&l2, k, kind))
                .filter(|f| !f.is_file())
                .map(|f| f.display().to_string())
                .collect();
            assert!(
                gone.is_empty(),
                "{ctx}: push-l2 (exit {:?}) deleted {gone:?} from L2 although L2 holds no valid manifest of generation {k} (L2: {:?})\n{push_shown}",
                push.status.code(),
                names_in(&l2),
            );
        }
    });
    // A successful push healed L2; a failed one kept the pending IC files.
    case(&mut failures, || {
        if pushed {
            assert!(
                l2_gk,
                "{ctx}: push-l2 succeeded without healing L2's manifest of generation {k}; L2 holds {:?}\n{push_shown}",
                names_in(&l2)
            );
        } else {
            for n in &pending {
                assert!(
                    l1.join(n).is_file(),
                    "{ctx}: a failed push-l2 deleted the pending IC file {n}\n{push_shown}"
                );
            }
        }
        if l2_gk {
            let ours = std::fs::read(l2.join(manifest_name(k))).unwrap();
            let l1s = std::fs::read(l1.join("rex").join(manifest_name(k))).unwrap();
            assert!(
                ours == l1s,
                "{ctx}: L2's manifest of generation {k} differs from L1's copy"
            );
        }
    });
    for (which, l1opt) in [
        ("restore --l2", None),
        ("restore --l1 --l2", Some(l1.as_path())),
    ] {
        case(&mut failures, || {
            let dir = work.path().join(which.replace(' ', "_"));
            let (out, img) = restore(&l2, l1opt, &[], &dir);
            if out.status.success() {
                assert_image(&img, &want, &format!("{ctx}: {which}"));
            } else {
                assert!(
                    !pushed,
                    "{ctx}: push-l2 succeeded but then {which} fails\n{}",
                    show(&[which], &out)
                );
            }
        });
    }
    failures
}

fn older_l2_manifest_cases(seed: u64, defect: ManifestDefect) {
    let c = chain(seed, 3, true);
    let mut failures = Vec::new();
    for k in 1..=3 {
        failures.extend(older_l2_manifest_case(&c, k, defect));
    }
    assert_no_failures(&failures, 3 * 5);
}

/// L2 lost the manifest of one generation of its newest chain (1, 2 or 3):
/// the next push heals L2 from L1's copy or fails keeping the pending IC
/// files; it never deletes that generation's data files while L2 has no
/// manifest for them, nor builds a new generation on a chain L2 cannot
/// restore.
#[test]
fn lost_older_l2_manifest_is_healed_not_built_upon() {
    older_l2_manifest_cases(61, ManifestDefect::Delete);
}

/// As above, with one byte of the manifest flipped instead of deleted.
#[test]
fn flipped_older_l2_manifest_is_healed_not_built_upon() {
    older_l2_manifest_cases(62, ManifestDefect::Flip);
}

// ---------------------------------------------------------------------------
// 2. L1 holds a newer generation than L2
// ---------------------------------------------------------------------------

/// Every batch was pushed (no IC file in L1), then L2 lost the manifest of
/// generation 3. L1/rex/ still holds generation 3: a transient restore
/// gives its state, and verify reports the disagreement.
#[test]
fn l1_l2_restore_takes_the_newest_generation_of_either_place() {
    let c = chain(63, 3, false);
    let (work, l1, l2) = c.copy();
    std::fs::remove_file(l2.join(manifest_name(3))).unwrap();
    let mut failures = Vec::new();
    case(&mut failures, || {
        let (out, img) = restore(&l2, Some(&l1), &[], &work.path().join("a"));
        assert!(
            out.status.success(),
            "restore --l1 --l2 fails\n{}",
            show(&["restore"], &out)
        );
        assert!(
            !same_image(&img, &c.image(3)),
            "restore --l1 --l2 gives generation 2's state (seq 3), not generation 3's (seq 5), which L1/rex/ holds\n{}",
            show(&["restore"], &out)
        );
        assert_image(&img, &c.image(5), "restore --l1 --l2");
    });
    case(&mut failures, || {
        let args = ["verify", "--l1", s(&l1), "--l2", s(&l2)];
        let v = rex(&args);
        assert_no_crash(&v, "verify");
        assert!(
            !v.status.success(),
            "verify --l1 --l2 passes although L1 holds generation 3 and L2 does not\n{}",
            show(&args, &v)
        );
        // "L1 generation 3: ok" alone is no report of the disagreement.
        let mentions = all_output(&v)
            .lines()
            .any(|l| l.contains("generation 3") && !l.trim_end().ends_with(": ok"));
        assert!(
            mentions,
            "verify does not report that L1 holds generation 3, newer than L2's newest\n{}",
            show(&args, &v)
        );
    });
    assert_no_failures(&failures, 2);
}

// ---------------------------------------------------------------------------
// 3. A damaged pending IC file
// ---------------------------------------------------------------------------

/// Generations 1 (seq 0..=1) and 2 (seq 2..=3), then pending seq 4, 5, 6;
/// a page of seq 5 that seq 6 does not rewrite is damaged. A plain restore
/// fails naming the file; `--fallback` restores generation 2 plus seq 4
/// (the newest intact state), not generation 1.
#[test]
fn fallback_keeps_the_newest_intact_generation_when_a_pending_ic_is_damaged() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2, truth) = (
        d.path().join("l1"),
        d.path().join("l2"),
        d.path().join("truth"),
    );
    let mut w = workload("balanced", 48, 64);
    take_until(&mut w, &l1, 1, &truth);
    rex_ok(&push_args(&l1, &l2));
    take_until(&mut w, &l1, 3, &truth);
    rex_ok(&push_args(&l1, &l2));
    assert_eq!(generations(&l2).len(), 2);
    let want = take_until(&mut w, &l1, 4, &truth);
    take_until(&mut w, &l1, 6, &truth);

    // The last page of seq 5 that is still live at seq 6 (neither rewritten
    // nor dropped), so the restore of seq 6 must read it.
    let bad = l1.join(ic_file_name(5));
    let m5 = IcMeta::read(&bad).unwrap();
    let m6 = IcMeta::read(l1.join(ic_file_name(6))).unwrap();
    let pp = (0..m5.pages.len())
        .rev()
        .find(|&i| {
            let p = m5.pages[i];
            m6.pages.binary_search(&p).is_err() && !m6.drops.iter().any(|d| d.contains(p))
        })
        .expect("seq 5 carries a page that seq 6 neither rewrites nor drops");
    let ps = u64::from(m5.header.page_size);
    flip_byte(&bad, m5.layout.data_off + pp as u64 * ps + ps - 8);
    let bad_name = bad.file_name().unwrap().to_str().unwrap().to_owned();

    let mut failures = Vec::new();
    case(&mut failures, || {
        let (out, _) = restore(&l2, Some(&l1), &[], &d.path().join("plain"));
        assert_eq!(
            out.status.code(),
            Some(3),
            "restore --l1 --l2 with a damaged pending IC file\n{}",
            show(&["restore"], &out)
        );
        assert!(
            stderr(&out).contains(&bad_name),
            "restore does not name {bad_name}\n{}",
            show(&["restore"], &out)
        );
    });
    case(&mut failures, || {
        let (out, img) = restore(&l2, Some(&l1), &["--fallback"], &d.path().join("fb"));
        assert!(
            out.status.success(),
            "restore --l1 --l2 --fallback fails\n{}",
            show(&["restore", "--fallback"], &out)
        );
        assert!(
            !same_image(&img, &truth.join("seq-1.rexic")),
            "restore --fallback fell back to generation 1 (seq 1) instead of generation 2 + seq 4\n{}",
            show(&["restore", "--fallback"], &out)
        );
        assert_image(&img, &want, "restore --l1 --l2 --fallback");
        assert!(
            all_output(&out).contains(&bad_name),
            "restore --fallback does not name {bad_name}\n{}",
            show(&["restore", "--fallback"], &out)
        );
    });
    assert_no_failures(&failures, 2);
}

// ---------------------------------------------------------------------------
// 4, 5. Symlinks
// ---------------------------------------------------------------------------

/// L2's newest manifest is a symlink to the real file elsewhere: it is read
/// through the link, or the restore fails; never does the older generation
/// pass for the newest.
#[test]
fn manifest_symlink_is_followed_or_refused() {
    let c = chain(65, 2, false);
    let work = tempfile::tempdir().unwrap();
    let l2 = work.path().join("l2");
    copy_tree(&c.template.join("l2"), &l2);
    let elsewhere = work.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let man = l2.join(manifest_name(2));
    let target = elsewhere.join(manifest_name(2));
    std::fs::rename(&man, &target).unwrap();
    std::os::unix::fs::symlink(&target, &man).unwrap();

    let (out, img) = restore(&l2, None, &[], &work.path().join("a"));
    if out.status.success() {
        assert!(
            !same_image(&img, &c.image(1)),
            "restore --l2 ignored the symlinked manifest of generation 2 and restored generation 1 (seq 1)\n{}",
            show(&["restore"], &out)
        );
        assert_image(&img, &c.image(3), "restore --l2");
    }
}

/// The newest IC file is a dangling symlink: push-l2 and a transient
/// restore refuse it, naming it, instead of skipping it.
#[test]
fn dangling_symlink_as_newest_ic_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2, truth) = (
        d.path().join("l1"),
        d.path().join("l2"),
        d.path().join("truth"),
    );
    let mut w = workload("balanced", 48, 66);
    take_until(&mut w, &l1, 2, &truth);
    rex_ok(&push_args(&l1, &l2));
    take_until(&mut w, &l1, 3, &truth);
    let link = l1.join(ic_file_name(3));
    assert!(link.is_file());
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(d.path().join("gone").join(ic_file_name(3)), &link).unwrap();
    let name = ic_file_name(3);

    let mut failures = Vec::new();
    case(&mut failures, || {
        let (out, _) = restore(&l2, Some(&l1), &[], &d.path().join("a"));
        assert!(
            !out.status.success(),
            "restore --l1 --l2 skips the dangling symlink {} and succeeds\n{}",
            link.display(),
            show(&["restore"], &out)
        );
        assert!(
            stderr(&out).contains(&name),
            "restore does not name {}\n{}",
            link.display(),
            show(&["restore"], &out)
        );
    });
    case(&mut failures, || {
        let args = push_args(&l1, &l2);
        let out = rex(&args);
        assert!(
            !out.status.success(),
            "push-l2 skips the dangling symlink {} and succeeds\n{}",
            link.display(),
            show(&args, &out)
        );
        assert_clean_error(&out, "push-l2");
        assert!(
            stderr(&out).contains(&name),
            "push-l2 does not name {}\n{}",
            link.display(),
            show(&args, &out)
        );
    });
    assert_no_failures(&failures, 2);
}

// ---------------------------------------------------------------------------
// 6. A sparse IC file claiming a huge page count
// ---------------------------------------------------------------------------

const DATA_LIMIT: u64 = 64 << 20;

/// Runs `rexctl args...` with RLIMIT_DATA at 64 MiB (the issue's bound), killed after `limit`.
fn rex_limited(args: &[&str], limit: Duration) -> Output {
    let mut c = rexctl();
    c.args(args).env_remove("REX_FAILPOINT");
    // SAFETY: only setrlimit (async-signal-safe) runs between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut c, || {
            let lim = libc::rlimit {
                rlim_cur: DATA_LIMIT as libc::rlim_t,
                rlim_max: DATA_LIMIT as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_DATA, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    wait_bounded(c, limit, &format!("rexctl {args:?}"))
}

/// Spawns `c` with piped output and waits at most `limit`; on timeout,
/// kills it and fails.
fn wait_bounded(mut c: Command, limit: Duration, ctx: &str) -> Output {
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn rexctl");
    let t0 = Instant::now();
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("collect output");
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect output");
            panic!(
                "{ctx}: still running after {limit:?}, killed\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A valid FULL REX-IC header (FORMAT.md §2.2) for `page_count` pages of
/// 4096 bytes, and the file length it implies.
fn huge_header(page_count: u64) -> ([u8; 64], u64) {
    let ps = 4096u64;
    let mut b = [0u8; 64];
    b[0..8].copy_from_slice(b"REXIC01\n");
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    b[12..16].copy_from_slice(&(ps as u32).to_le_bytes());
    b[16..24].copy_from_slice(&0u64.to_le_bytes());
    b[24..28].copy_from_slice(&1u32.to_le_bytes());
    b[32..40].copy_from_slice(&page_count.to_le_bytes());
    b[40..48].copy_from_slice(&0u64.to_le_bytes());
    b[48..56].copy_from_slice(&rexctl::eval::workload::GEN_EPOCH_NS.to_le_bytes());
    let crc = crc32fast::hash(&b[0..56]);
    b[56..60].copy_from_slice(&crc.to_le_bytes());
    let data_off = (64 + page_count * 8 + page_count * 4 + 4).next_multiple_of(ps);
    (b, data_off + page_count * ps)
}

/// A sparse IC file whose header claims 2^28 pages (1 TiB of data, a 3 GiB
/// metadata block of zeros): inspect, coalesce and push-l2 reject it as bad
/// data with a bounded heap, and leave it in L1.
#[test]
fn sparse_ic_claiming_huge_page_count_is_refused_in_bounded_memory() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    std::fs::create_dir_all(&l1).unwrap();
    let file = l1.join(ic_file_name(0));
    let mut page_count = 1u64 << 28;
    loop {
        let (header, len) = huge_header(page_count);
        std::fs::write(&file, header).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
        match f.set_len(len) {
            Ok(()) => break,
            Err(e) if page_count == 1 << 28 => {
                eprintln!(
                    "the file system refuses a {len}-byte sparse file ({e}); falling back to 2^24 pages"
                );
                page_count = 1 << 24;
            }
            Err(e) => panic!("set_len({len}): {e}"),
        }
    }
    eprintln!(
        "sparse IC file of {} bytes, page_count {page_count}",
        std::fs::metadata(&file).unwrap().len()
    );

    // The limit alone does not stop rexctl: a small valid file inspects.
    {
        let ok = d.path().join("ok");
        std::fs::create_dir_all(&ok).unwrap();
        let mut w = workload("balanced", 16, 67);
        w.checkpoint(&ok).unwrap();
        let p = ok.join(ic_file_name(0));
        let out = rex_limited(&["inspect", s(&p)], Duration::from_secs(30));
        assert!(
            out.status.success(),
            "inspect of a valid file under RLIMIT_DATA {DATA_LIMIT}\n{}",
            show(&["inspect"], &out)
        );
    }

    let mut failures = Vec::new();
    let cmds: [Vec<&str>; 3] = [
        vec!["inspect", s(&file)],
        vec!["coalesce", s(&l1)],
        vec!["push-l2", "--l1", s(&l1), "--l2", s(&l2)],
    ];
    for args in &cmds {
        case(&mut failures, || {
            let out = rex_limited(args, Duration::from_secs(120));
            let ctx = show(args, &out);
            assert_no_crash(&out, &ctx);
            assert_eq!(out.status.code(), Some(3), "exit code\n{ctx}");
            assert!(
                stderr(&out).contains(ic_file_name(0).as_str()),
                "the error does not name the file\n{ctx}"
            );
            assert!(file.is_file(), "{} deleted\n{ctx}", file.display());
        });
    }
    assert_no_failures(&failures, cmds.len());
}

// ---------------------------------------------------------------------------
// 7. A raw restore whose page span wraps
// ---------------------------------------------------------------------------

/// A FULL IC file carrying pages 0 and u64::MAX, pushed: a raw restore
/// cannot lay those out in one file and says so (the span), leaving no
/// output.
#[test]
fn raw_restore_of_a_span_that_wraps_is_a_clear_error() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    std::fs::create_dir_all(&l1).unwrap();
    let p0 = vec![0x11u8; 4096];
    let p1 = vec![0x22u8; 4096];
    rexctl::format::ic::write_ic(
        l1.join(ic_file_name(0)),
        4096,
        0,
        true,
        rexctl::eval::workload::GEN_EPOCH_NS,
        &[(0, &p0), (u64::MAX, &p1)],
        &[],
    )
    .unwrap();
    rex_ok(&push_args(&l1, &l2));

    let out_file = d.path().join("out").join("image.raw");
    std::fs::create_dir_all(out_file.parent().unwrap()).unwrap();
    let args = ["restore", "--l2", s(&l2), "--raw", "--out", s(&out_file)];
    let out = rex(&args);
    let ctx = show(&args, &out);
    assert_no_crash(&out, &ctx);
    assert!(!out.status.success(), "raw restore succeeded\n{ctx}");
    let err = stderr(&out);
    assert!(
        !err.contains("seek: Invalid argument"),
        "raw restore fails with a bare seek error\n{ctx}"
    );
    assert!(
        err.to_lowercase().contains("span")
            || err.contains("0xffffffffffffffff")
            || err.contains("18446744073709551615"),
        "the error does not mention the page span\n{ctx}"
    );
    assert!(
        !out_file.exists(),
        "a failed raw restore left {}\n{ctx}",
        out_file.display()
    );
    assert!(
        names_in(out_file.parent().unwrap()).is_empty(),
        "a failed raw restore left files: {:?}",
        names_in(out_file.parent().unwrap())
    );
}

// ---------------------------------------------------------------------------
// 8. A FIFO
// ---------------------------------------------------------------------------

/// `inspect` on a FIFO (no writer) returns at once, saying it is not a
/// regular file, instead of blocking in open.
#[test]
fn inspect_refuses_a_fifo() {
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("ckpt.rexic");
    let c = std::ffi::CString::new(s(&fifo)).unwrap();
    // SAFETY: a valid NUL-terminated path.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(rc, 0, "mkfifo: {}", std::io::Error::last_os_error());
    let mut cmd = rexctl();
    cmd.args(["inspect", s(&fifo)]).env_remove("REX_FAILPOINT");
    let out = wait_bounded(cmd, Duration::from_secs(5), "rexctl inspect FIFO");
    let ctx = show(&["inspect", s(&fifo)], &out);
    assert_no_crash(&out, &ctx);
    assert!(!out.status.success(), "inspect of a FIFO succeeded\n{ctx}");
    let err = stderr(&out);
    assert!(err.contains("ckpt.rexic"), "does not name the file\n{ctx}");
    assert!(
        err.contains("not a regular file"),
        "does not say it is not a regular file\n{ctx}"
    );
}

/// A tmpfs of `bytes` mounted on `dir` for the life of the guard.
struct SmallDisk(PathBuf);

impl SmallDisk {
    /// `None` when this process may not mount (not root): said, not hidden.
    fn mount(dir: &Path, bytes: u64) -> Option<SmallDisk> {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={bytes}"),
                "tmpfs",
                s(dir),
            ])
            .output()
            .ok()?;
        out.status.success().then(|| SmallDisk(dir.to_path_buf()))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A full disk when the restored image is committed: exit 1 with the
/// error, and neither the image nor its temporary file is left behind.
#[test]
fn enospc_at_commit_leaves_no_temporary_file() {
    let c = chain(31, 2, false);
    let (work, _l1, l2) = c.copy();
    let disk = work.path().join("small");
    let Some(_mounted) = SmallDisk::mount(&disk, 64 << 10) else {
        eprintln!(
            "enospc_at_commit_leaves_no_temporary_file: cannot mount a tmpfs here (needs root); not run"
        );
        return;
    };
    let out_file = disk.join("image.rexic");
    let args = ["restore", "--l2", s(&l2), "--out", s(&out_file)];
    let out = rex(&args);
    let ctx = show(&args, &out);
    assert_no_crash(&out, &ctx);
    assert_eq!(out.status.code(), Some(1), "{ctx}");
    assert!(
        stderr(&out).contains("No space left on device"),
        "does not say the disk is full\n{ctx}"
    );
    assert_eq!(names_in(&disk), Vec::<String>::new(), "{ctx}");
}

/// A full disk while a push writes L1's copy of the RPS, on encoder
/// threads (its chunks are written by a writer thread of their own): exit
/// 1 with the error, no temporary file in L1's copy or in L2, no
/// generation published, and the checkpoint still pending, so that the
/// next push on a disk with room pushes it.
#[test]
fn enospc_while_a_push_writes_the_rps_keeps_the_checkpoint() {
    let d = tempfile::tempdir().unwrap();
    let l1 = d.path().join("l1");
    let Some(_mounted) = SmallDisk::mount(&l1, 2 << 20) else {
        eprintln!(
            "enospc_while_a_push_writes_the_rps_keeps_the_checkpoint: cannot mount a tmpfs here (needs root); not run"
        );
        return;
    };
    let l2 = d.path().join("l2");
    std::fs::create_dir_all(&l2).unwrap();
    // 384 incompressible pages (1.5 MiB): the FULL checkpoint fits, its
    // RPS (about as large) does not, and fills more than the file's 1 MiB
    // buffer, so the writer thread meets the full disk.
    rex_ok(&[
        "gen",
        "--profile",
        "incompressible",
        "--pages",
        "384",
        "--count",
        "0",
        s(&l1),
    ]);
    let before = ic_names(&l1);
    assert_eq!(before.len(), 1);
    let mut args = push_args(&l1, &l2);
    args.extend(["--threads", "2"]);
    let out = rex(&args);
    let ctx = show(&args, &out);
    assert_no_crash(&out, &ctx);
    assert_eq!(out.status.code(), Some(1), "{ctx}");
    let err = stderr(&out);
    assert!(
        err.contains("No space left on device"),
        "does not say the disk is full\n{ctx}"
    );
    assert!(
        err.contains(".rps") && err.contains("write:"),
        "does not name the RPS's write\n{ctx}"
    );
    assert_eq!(ic_names(&l1), before, "the checkpoint is gone\n{ctx}");
    let temps = |dir: &Path| -> Vec<String> {
        names_in(dir)
            .into_iter()
            .filter(|n| n.contains(".tmp"))
            .collect()
    };
    assert_eq!(temps(&l1.join("rex")), Vec::<String>::new(), "{ctx}");
    assert_eq!(temps(&l2), Vec::<String>::new(), "{ctx}");
    assert!(generations(&l2).is_empty(), "{ctx}");
    // With room, the same checkpoint goes up and restores.
    let truth = d.path().join("truth.rexic");
    std::fs::copy(l1.join(&before[0]), &truth).unwrap();
    let st = Command::new("mount")
        .args(["-o", "remount,size=8m", s(&l1)])
        .status()
        .unwrap();
    assert!(st.success(), "remount with room");
    rex_ok(&args);
    assert_eq!(generations(&l2).len(), 1);
    let (out, image) = restore(&l2, None, &[], &d.path().join("r"));
    assert!(out.status.success(), "{}", show(&["restore"], &out));
    assert_image(&image, &truth, "after the full disk");
}

/// A checkpoint smaller than the write buffer meets the full disk when the
/// buffer goes out before the header is written: said as a write of the
/// file, not as the seek (helper-81: "seek: No space left on device"), and
/// nothing is left under a checkpoint's name.
#[test]
fn a_full_disk_met_by_a_buffered_write_is_said_as_a_write() {
    let d = tempfile::tempdir().unwrap();
    let l1 = d.path().join("l1");
    let Some(_mounted) = SmallDisk::mount(&l1, 256 << 10) else {
        eprintln!(
            "a_full_disk_met_by_a_buffered_write_is_said_as_a_write: cannot mount a tmpfs here (needs root); not run"
        );
        return;
    };
    // 128 incompressible pages: 512 KiB, under the 1 MiB buffer.
    let args = [
        "gen",
        "--profile",
        "incompressible",
        "--pages",
        "128",
        "--count",
        "0",
        s(&l1),
    ];
    let out = rex(&args);
    let ctx = show(&args, &out);
    assert_no_crash(&out, &ctx);
    assert_eq!(out.status.code(), Some(1), "{ctx}");
    let err = stderr(&out);
    assert!(err.contains("No space left on device"), "{ctx}");
    assert!(
        err.contains("ckpt-00000000.rexic: write:") && !err.contains("seek"),
        "does not say the write failed\n{ctx}"
    );
    assert_eq!(ic_names(&l1), Vec::<String>::new(), "{ctx}");
}

// ---------------------------------------------------------------------------
// Chain identity: checkpoints are never "already pushed" by seq alone.

fn ic_names(l1: &Path) -> Vec<String> {
    names_in(l1)
        .into_iter()
        .filter(|n| n.ends_with(".rexic"))
        .collect()
}

/// Run A (8 checkpoints) is pushed; the job restarts in a fresh L1 at seq 0
/// (run B, 12 checkpoints, later in time). B starts a new chain: both
/// restores give B's state, and no file of B is deleted unpushed.
#[test]
fn job_restarted_in_a_fresh_l1_starts_a_new_chain() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2, truth) = (d.path().join("l1"), d.path().join("l2"), d.path().join("t"));
    let mut a = workload("balanced", 40, 101);
    take_until_at(&mut a, &l1, 7, &truth.join("a"), 1_800_000_000_000_000_000);
    rex_ok(&push_args(&l1, &l2));
    std::fs::remove_dir_all(&l1).unwrap();
    let mut b = workload("balanced", 40, 202);
    let want = take_until_at(&mut b, &l1, 11, &truth.join("b"), 1_800_000_100_000_000_000);
    // Before the push, L1 + L2 is already B's state (B's FULL supersedes).
    restores(
        &l2,
        Some(&l1),
        &[],
        &d.path().join("r0"),
        &want,
        "restore --l1 --l2 before pushing B",
    );
    rex_ok(&push_args(&l1, &l2));
    for (which, l1opt) in [("L2 alone", None), ("L1 + L2", Some(l1.as_path()))] {
        let (out, img) = restore(&l2, l1opt, &[], &d.path().join(which.replace(' ', "")));
        assert!(
            out.status.success(),
            "{which}: {}",
            show(&["restore"], &out)
        );
        assert_image(&img, &want, which);
    }
    let newest = ChainIndex::load(&DirStore::open(&l2).unwrap())
        .unwrap()
        .newest()
        .cloned()
        .unwrap();
    assert_eq!(newest.kind, GenKind::Full, "B starts a new L2 chain");
    assert_eq!(newest.chain_id, Some(b.chain_id()));
    assert_eq!((newest.first_seq, newest.last_seq), (0, 11));
}

/// The generator's runs share one fixed epoch, so run B's FULL is not newer
/// than L2's chain of run A: pointed at it, B is refused and kept, and the
/// L1 + L2 restore fails loudly instead of mixing the runs.
#[test]
fn older_run_pointed_at_a_newer_l2_is_refused_and_kept() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2, truth) = (d.path().join("l1"), d.path().join("l2"), d.path().join("t"));
    let mut a = workload("balanced", 40, 103);
    let want_a = take_until(&mut a, &l1, 7, &truth.join("a"));
    rex_ok(&push_args(&l1, &l2));
    std::fs::remove_dir_all(&l1).unwrap();
    let mut b = workload("balanced", 40, 204);
    take_until(&mut b, &l1, 11, &truth.join("b"));
    let before = ic_names(&l1);
    let args = push_args(&l1, &l2);
    let out = rex(&args);
    let ctx = show(&args, &out);
    assert_no_crash(&out, &ctx);
    assert_eq!(out.status.code(), Some(3), "{ctx}");
    assert!(stderr(&out).contains("runs are ordered by time"), "{ctx}");
    assert_eq!(
        ic_names(&l1),
        before,
        "a refused push deleted IC files\n{ctx}"
    );
    let (out, _) = restore(&l2, Some(&l1), &[], &d.path().join("r1"));
    assert_eq!(out.status.code(), Some(3), "{}", show(&["restore"], &out));
    // L2 alone still holds A's newest durable state.
    restores(
        &l2,
        None,
        &[],
        &d.path().join("r2"),
        &want_a,
        "restore --l2 after the refused push",
    );
}

/// Incrementals of run B (its FULL lost) in the L1 of run A's L2 chain, with
/// seqs that continue A's: refused by chain id, kept, never pushed as a Δ.
#[test]
fn incrementals_of_another_run_are_refused_and_kept() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2, truth) = (d.path().join("l1"), d.path().join("l2"), d.path().join("t"));
    let mut a = workload("balanced", 40, 105);
    let want_a = take_until(&mut a, &l1, 5, &truth.join("a"));
    rex_ok(&push_args(&l1, &l2));
    let other = d.path().join("other");
    let mut b = workload("balanced", 40, 206);
    take_until(&mut b, &other, 9, &truth.join("b"));
    for seq in 6..=9 {
        let n = rexctl::l1::ic_file_name(seq);
        std::fs::copy(other.join(&n), l1.join(&n)).unwrap();
    }
    let before = ic_names(&l1);
    let args = push_args(&l1, &l2);
    let out = rex(&args);
    let ctx = show(&args, &out);
    assert_no_crash(&out, &ctx);
    assert_eq!(out.status.code(), Some(3), "{ctx}");
    assert!(
        stderr(&out).contains(&b.chain_id().to_string()),
        "names B's run\n{ctx}"
    );
    assert_eq!(ic_names(&l1), before, "{ctx}");
    let (out, _) = restore(&l2, Some(&l1), &[], &d.path().join("r1"));
    assert_eq!(out.status.code(), Some(3), "{}", show(&["restore"], &out));
    let (out, img) = restore(&l2, None, &[], &d.path().join("r2"));
    assert!(out.status.success());
    assert_image(&img, &want_a, "restore --l2");
    let v = rex(&["verify", "--l2", s(&l2), "--l1", s(&l1)]);
    assert_eq!(v.status.code(), Some(3), "{}", show(&["verify"], &v));
}

/// Two ranks pointed at one L2 directory: the second writer is refused and
/// keeps its checkpoints; L2 keeps the first rank's chain.
#[test]
fn two_l1s_on_one_l2_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let (l1a, l1b, l2) = (d.path().join("a"), d.path().join("b"), d.path().join("l2"));
    let truth = d.path().join("t");
    let mut a = workload("balanced", 40, 107);
    let want_a = take_until_at(&mut a, &l1a, 3, &truth.join("a"), 1_800_000_000_000_000_000);
    let mut b = workload("balanced", 40, 208);
    take_until_at(&mut b, &l1b, 3, &truth.join("b"), 1_800_000_100_000_000_000);
    let mut pa = push_args(&l1a, &l2);
    pa.extend(["--job", "42", "--rank", "0"]);
    rex_ok(&pa);
    let mut pb = push_args(&l1b, &l2);
    pb.extend(["--job", "42", "--rank", "1"]);
    let before = ic_names(&l1b);
    let out = rex(&pb);
    let ctx = show(&pb, &out);
    assert_no_crash(&out, &ctx);
    assert_eq!(out.status.code(), Some(3), "{ctx}");
    assert!(stderr(&out).contains("two writers"), "{ctx}");
    assert_eq!(ic_names(&l1b), before, "{ctx}");
    let (out, img) = restore(&l2, None, &[], &d.path().join("r"));
    assert!(out.status.success());
    assert_image(
        &img,
        &want_a,
        "restore --l2 after the refused second writer",
    );
}

// ---------------------------------------------------------------------------
// Runs written by hand (any chain id, version, time), with a model image.

/// A hand-written checkpoint: page bytes depend on (seq, page), so every
/// copy of a page differs.
struct Hand {
    dir: PathBuf,
    image: std::collections::BTreeMap<u64, Vec<u8>>,
    /// The instance id its files carry (`None`: none, as older producers).
    instance: Option<u8>,
    /// The page size of the checkpoints it writes next.
    ps: u32,
}

const HPS: u32 = 4096;

fn hand_page(seq: u64, page: u64, ps: u32) -> Vec<u8> {
    (0..u64::from(ps))
        .map(|i| (i.wrapping_mul(7) ^ seq.wrapping_mul(31) ^ page.wrapping_mul(131)) as u8)
        .collect()
}

fn run_id(b: u8) -> rexctl::format::ic::ChainId {
    rexctl::format::ic::ChainId([b; 16])
}

impl Hand {
    fn new(dir: &Path) -> Hand {
        std::fs::create_dir_all(dir).unwrap();
        Hand {
            dir: dir.to_path_buf(),
            image: Default::default(),
            instance: None,
            ps: HPS,
        }
    }

    /// Writes checkpoint `seq` of run `run` (`None`: version 1) at time
    /// `t` seconds, carrying `pages`; a FULL one replaces the image.
    fn ic(&mut self, seq: u64, full: bool, pages: &[u64], t: u64, run: Option<u8>) -> PathBuf {
        self.ic_dropping(seq, full, pages, &[], t, run)
    }

    /// [`ic`](Self::ic), whose checkpoint also drops the pages `drops`
    /// (before it writes `pages`).
    fn ic_dropping(
        &mut self,
        seq: u64,
        full: bool,
        pages: &[u64],
        drops: &[u64],
        t: u64,
        run: Option<u8>,
    ) -> PathBuf {
        if full {
            self.image.clear();
        }
        for d in drops {
            self.image.remove(d);
        }
        let path = self.dir.join(ic_file_name(seq));
        let ext = rexctl::format::ic::IcExt {
            chain: run.map(run_id),
            instance: self
                .instance
                .map(|b| rexctl::format::ic::InstanceId([b; 16])),
            regions: None,
            continues: None,
        };
        let mut w = rexctl::format::ic::IcWriter::create_ext(
            &path,
            self.ps,
            seq,
            full,
            1_800_000_000_000_000_000 + t * 1_000_000_000,
            &ext,
            pages.to_vec(),
            drops
                .iter()
                .map(|&first| rexctl::format::ic::DropRange { first, count: 1 })
                .collect(),
        )
        .unwrap();
        for &p in pages {
            let b = hand_page(seq, p, self.ps);
            w.push_page(&b).unwrap();
            self.image.insert(p, b);
        }
        w.finish().unwrap();
        path
    }

    /// A hand in `dir` whose instance 1 wrote seq 0 (FULL, pages 1 to 3, at
    /// 100 s) and seq 1 (page 2, at 101 s) of run 0xA.
    fn run_a(dir: &Path) -> Hand {
        let mut h = Hand::new(dir);
        h.instance = Some(1);
        h.ic(0, true, &[1, 2, 3], 100, Some(0xA));
        h.ic(1, false, &[2], 101, Some(0xA));
        h
    }

    /// Writes the model image as a FULL file, to compare restores with.
    fn truth(&self, path: &Path) -> PathBuf {
        let pages: Vec<u64> = self.image.keys().copied().collect();
        let mut w =
            rexctl::format::ic::IcWriter::create(path, self.ps, 0, true, 0, pages, Vec::new())
                .unwrap();
        for b in self.image.values() {
            w.push_page(b).unwrap();
        }
        w.finish().unwrap();
        path.to_path_buf()
    }
}

/// A restore (see [`restore`]) that succeeds and writes the image `want`.
fn restores(l2: &Path, l1: Option<&Path>, extra: &[&str], outdir: &Path, want: &Path, ctx: &str) {
    let (out, img) = restore(l2, l1, extra, outdir);
    assert!(out.status.success(), "{ctx}: {}", show(&["restore"], &out));
    assert_image(&img, want, ctx);
}

fn refused_and_kept(args: &[&str], l1: &Path) -> String {
    let before = ic_names(l1);
    let out = rex(args);
    let ctx = show(args, &out);
    assert_no_crash(&out, &ctx);
    assert_eq!(out.status.code(), Some(3), "{ctx}");
    assert_eq!(
        ic_names(l1),
        before,
        "a refused command deleted IC files\n{ctx}"
    );
    stderr(&out)
}

/// The old run's unpushed files include a FULL checkpoint with a higher seq
/// than the restarted run's: seq order is not time order, so neither run is
/// taken for the newest state; nothing is pushed or deleted.
#[test]
fn an_older_runs_full_with_a_higher_seq_never_beats_the_restarted_run() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    let mut a = Hand::new(&l1);
    a.ic(0, true, &[1, 2, 3], 100, Some(0xA));
    a.ic(1, false, &[2], 101, Some(0xA));
    rex_ok(&push_args(&l1, &l2));
    a.ic(4, true, &[1, 2], 104, Some(0xA));
    a.ic(5, false, &[2], 105, Some(0xA));
    let mut b = Hand::new(&l1);
    b.ic(0, true, &[7, 8], 200, Some(0xB));
    b.ic(1, false, &[8], 201, Some(0xB));
    let err = refused_and_kept(&push_args(&l1, &l2), &l1);
    assert!(err.contains("runs are ordered by time"), "{err}");
    let (out, _) = restore(&l2, Some(&l1), &[], &d.path().join("r"));
    assert_eq!(out.status.code(), Some(3), "{}", show(&["restore"], &out));
}

/// A generation damaged in both copies (L2's and L1's) whose checkpoints
/// are still in L1 (its push stopped before deleting them): `--fallback`
/// restores the generation before it with those checkpoints and the
/// pending ones on top, the newest state (helper-67: the generation before
/// it alone, an older state, and librex set the checkpoints aside).
#[test]
fn a_generation_damaged_in_both_copies_falls_back_through_its_checkpoints_still_in_l1() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2, truth) = (d.path().join("l1"), d.path().join("l2"), d.path().join("t"));
    let kept = d.path().join("kept");
    std::fs::create_dir_all(&kept).unwrap();
    let mut w = workload("balanced", 64, 11);
    take_until(&mut w, &l1, 3, &truth);
    rex_ok(&push_args(&l1, &l2));
    take_until(&mut w, &l1, 6, &truth);
    for seq in 4..=6 {
        let n = ic_file_name(seq);
        std::fs::copy(l1.join(&n), kept.join(&n)).unwrap();
    }
    rex_ok(&push_args(&l1, &l2));
    // The push's deletions had not happened.
    for seq in 4..=6 {
        let n = ic_file_name(seq);
        std::fs::copy(kept.join(&n), l1.join(&n)).unwrap();
    }
    let want = take_until(&mut w, &l1, 8, &truth);
    // Generation 2's Pointer File damaged in L2 and in L1's copy.
    for dir in [l2.clone(), l1.join("rex")] {
        let pf = gen_file(&dir, 2, "pf");
        let mut b = std::fs::read(&pf).unwrap();
        let i = b.len() / 2;
        b[i] ^= 0x20;
        std::fs::write(&pf, &b).unwrap();
    }
    let (out, _) = restore(&l2, Some(&l1), &[], &d.path().join("r0"));
    assert_eq!(out.status.code(), Some(3), "{}", show(&["restore"], &out));
    let (out, img) = restore(&l2, Some(&l1), &["--fallback"], &d.path().join("r1"));
    assert!(out.status.success(), "{}", show(&["restore"], &out));
    assert!(
        stderr(&out).contains("fell back to generation 1"),
        "{}",
        stderr(&out)
    );
    assert_image(&img, &want, "generation 1 with checkpoints 4..=8 of L1");
}

/// `--seq S` of a run restarted in L1 (its FULL checkpoint pending, newer
/// than L2's generation of the old run, its seqs counted from 0 again):
/// the state at S is the new run's, also when no generation ends at or
/// before S (helper-68: refused with exit 3 whenever the old run's oldest
/// generation ended after S, so an MPI restart's `--seq 1` failed).
#[test]
fn seq_of_a_run_restarted_in_l1_restores_below_every_generation() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    let mut a = Hand::new(&l1);
    for seq in 0..4 {
        a.ic(seq, seq == 0, &[1, 2, seq + 3], 100 + seq, Some(0xA));
    }
    rex_ok(&push_args(&l1, &l2));
    let mut b = Hand::new(&l1);
    b.ic(0, true, &[7, 8], 200, Some(0xB));
    let b0 = b.truth(&d.path().join("b0.rexic"));
    b.ic(1, false, &[8], 201, Some(0xB));
    let b1 = b.truth(&d.path().join("b1.rexic"));
    for (seq, want) in [("0", &b0), ("1", &b1)] {
        restores(
            &l2,
            Some(&l1),
            &["--seq", seq],
            &d.path().join(format!("r{seq}")),
            want,
            &format!("--seq {seq} of the restarted run"),
        );
    }
    restores(
        &l2,
        Some(&l1),
        &[],
        &d.path().join("rn"),
        &b1,
        "the newest state",
    );
    // A seq the new run has not reached is not the old run's either.
    let (out, _) = restore(&l2, Some(&l1), &["--seq", "2"], &d.path().join("r2"));
    assert_eq!(out.status.code(), Some(3), "{}", show(&["restore"], &out));
}

/// `--seq S` after a job restarted by hand (its seqs counted from 0 again)
/// and its new run pushed: the new run's state at S, or a refusal when S is
/// coalesced into the new run's generation, never the old run's state at S
/// (helper-82: its generation ending at S was restored with exit 0).
#[test]
fn seq_of_a_restarted_run_already_pushed_is_never_the_old_run_s() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    let mut a = Hand::new(&l1);
    for seq in 0..6 {
        a.ic(seq, seq == 0, &[1, 2, seq + 3], 100 + seq, Some(0xA));
        if seq == 2 || seq == 5 {
            // generations 1 (seqs 0..=2) and 2 (3..=5) of run A
            rex_ok(&push_args(&l1, &l2));
        }
    }
    let mut b = Hand::new(&l1);
    b.ic(0, true, &[7, 8], 200, Some(0xB));
    for seq in 1..4 {
        b.ic(seq, false, &[8, seq + 8], 200 + seq, Some(0xB));
    }
    let b3 = b.truth(&d.path().join("b3.rexic"));
    // generation 3: run B's seqs 0..=3
    rex_ok(&push_args(&l1, &l2));
    b.ic(4, false, &[7], 204, Some(0xB));
    let b4 = b.truth(&d.path().join("b4.rexic"));
    for (which, l1opt) in [("L2", None), ("L1+L2", Some(l1.as_path()))] {
        for seq in ["2", "0"] {
            let (out, _) = restore(
                &l2,
                l1opt,
                &["--seq", seq],
                &d.path().join(format!("{which}-{seq}")),
            );
            assert_eq!(
                out.status.code(),
                Some(3),
                "--seq {seq} from {which}: {}",
                show(&["restore"], &out)
            );
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("coalesced into generation 3"), "{err}");
        }
        restores(
            &l2,
            l1opt,
            &["--seq", "3"],
            &d.path().join(format!("{which}-3")),
            &b3,
            &format!("--seq 3 from {which}"),
        );
    }
    restores(
        &l2,
        Some(&l1),
        &["--seq", "4"],
        &d.path().join("pending-4"),
        &b4,
        "--seq 4, a pending checkpoint of run B",
    );
    // The old run's generation is still there to be asked for by number.
    let (out, _) = restore(&l2, None, &["--generation", "1"], &d.path().join("g1"));
    assert_eq!(out.status.code(), Some(0), "{}", show(&["restore"], &out));
}

/// A version 1 file between two runs does not let the second continue the
/// first: an incremental continues exactly the run of its FULL checkpoint.
#[test]
fn a_version_1_file_never_joins_two_runs() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    std::fs::create_dir_all(&l2).unwrap();
    let mut h = Hand::new(&l1);
    h.ic(0, true, &[1, 2], 100, Some(0xA));
    h.ic(1, false, &[2], 101, None);
    h.ic(2, false, &[1], 102, Some(0xB));
    let (out, _) = restore(&l2, Some(&l1), &[], &d.path().join("r"));
    assert_eq!(out.status.code(), Some(3), "{}", show(&["restore"], &out));
    refused_and_kept(&push_args(&l1, &l2), &l1);
}

/// A generation of version 1 checkpoints (no run) never covers the files of
/// a run: a newer FULL checkpoint of a run starts a new chain.
#[test]
fn a_generation_without_a_run_never_covers_a_newer_run() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    let mut a = Hand::new(&l1);
    a.ic(0, true, &[1, 2, 3], 100, None);
    a.ic(1, false, &[2], 101, None);
    rex_ok(&push_args(&l1, &l2));
    let mut b = Hand::new(&l1);
    b.ic(0, true, &[5, 6], 200, Some(0xB));
    b.ic(1, false, &[6], 201, Some(0xB));
    let want = b.truth(&d.path().join("truth.rexic"));
    rex_ok(&push_args(&l1, &l2));
    for (which, l1opt) in [("L2", None), ("L1+L2", Some(l1.as_path()))] {
        restores(&l2, l1opt, &[], &d.path().join(which), &want, which);
    }
}

/// A committed generation whose manifest is lost in both places, with its
/// IC files gone from L1: recovery cannot tell it from a crashed push by
/// its number alone, but the crashed push's batch would still be in L1. Its
/// files are kept, and the push refuses (the gap).
#[test]
fn recovery_keeps_a_committed_generation_whose_manifest_is_lost_everywhere() {
    let c = chain(41, 3, true);
    let (_work, l1, l2) = c.copy();
    for n in names_in(&c.template.join("more")) {
        std::fs::copy(c.template.join("more").join(&n), l1.join(&n)).unwrap();
    }
    std::fs::remove_file(l2.join(manifest_name(3))).unwrap();
    std::fs::remove_file(l1.join("rex").join(manifest_name(3))).unwrap();
    refused_and_kept(&push_args(&l1, &l2), &l1);
    for kind in ["rps", "pf", "ptab"] {
        assert!(
            gen_file(&l2, 3, kind).is_file(),
            "g3.{kind} deleted from L2"
        );
        assert!(
            gen_file(&l1.join("rex"), 3, kind).is_file(),
            "g3.{kind} deleted from L1"
        );
    }
}

/// `gc` never collects the files of a generation whose manifest is lost
/// while a later Δ of its chain points into them; the next push heals it.
#[test]
fn gc_keeps_the_files_of_a_lost_ancestor() {
    let c = chain(43, 3, true);
    let (_work, l1, l2) = c.copy();
    std::fs::remove_file(l2.join(manifest_name(2))).unwrap();
    // A file of a committed generation that its manifest does not name is
    // garbage all the same (gc reads the manifest again before deleting).
    let extra = l2.join("g00000001.extra");
    std::fs::write(&extra, b"not rexctl's").unwrap();
    rex_ok(&["gc", "--l2", s(&l2), "--grace", "0"]);
    for kind in ["rps", "pf", "ptab"] {
        assert!(gen_file(&l2, 2, kind).is_file(), "gc deleted g2.{kind}");
    }
    assert!(!extra.exists(), "gc kept a file no manifest names");
    for n in names_in(&c.template.join("more")) {
        std::fs::copy(c.template.join("more").join(&n), l1.join(&n)).unwrap();
    }
    rex_ok(&push_args(&l1, &l2));
    rex_ok(&["verify", "--l2", s(&l2), "--l1", s(&l1)]);
}

/// `gc --l1` keeps the files of the newest generation while L2 lacks its
/// manifest and L1's copy of the chain holds it (a manifest lost, or not
/// yet listed by a lagging store); the next push uploads the manifest
/// again and L2 alone restores it. Nothing of a later generation names
/// them, and gc deleted them (helper-83, through an S3 listing and GET
/// that did not show the committed manifest yet).
#[test]
fn gc_keeps_the_files_of_a_generation_l1_s_copy_holds() {
    let c = chain(44, 3, true);
    let (_work, l1, l2) = c.copy();
    let newest = (1..10)
        .rev()
        .find(|g| l2.join(manifest_name(*g)).exists())
        .unwrap();
    std::fs::remove_file(l2.join(manifest_name(newest))).unwrap();
    rex_ok(&["gc", "--l2", s(&l2), "--l1", s(&l1), "--grace", "0"]);
    for kind in ["rps", "pf", "ptab"] {
        assert!(
            gen_file(&l2, newest, kind).is_file(),
            "gc deleted g{newest}.{kind}"
        );
    }
    for n in names_in(&c.template.join("more")) {
        std::fs::copy(c.template.join("more").join(&n), l1.join(&n)).unwrap();
    }
    rex_ok(&push_args(&l1, &l2));
    assert!(l2.join(manifest_name(newest)).is_file());
    rex_ok(&["verify", "--l2", s(&l2), "--l1", s(&l1)]);
}

/// The newest generation is unreadable in both places, but a pending FULL
/// checkpoint after it needs nothing from it: `--fallback` restores that
/// FULL checkpoint and the files after it, the newest valid state.
#[test]
fn fallback_restores_a_pending_full_when_the_generation_is_broken() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    let mut h = Hand::new(&l1);
    h.ic(0, true, &[1, 2, 3], 100, Some(0xA));
    h.ic(1, false, &[2], 101, Some(0xA));
    rex_ok(&push_args(&l1, &l2));
    h.ic(2, false, &[3], 102, Some(0xA));
    rex_ok(&push_args(&l1, &l2));
    h.ic(3, true, &[1, 4], 103, Some(0xA));
    h.ic(4, false, &[4], 104, Some(0xA));
    let want = h.truth(&d.path().join("truth.rexic"));
    for dir in [l2.clone(), l1.join("rex")] {
        let pf = gen_file(&dir, 2, "pf");
        let len = std::fs::metadata(&pf).unwrap().len();
        flip_byte(&pf, len / 2);
    }
    restores(
        &l2,
        Some(&l1),
        &["--fallback"],
        &d.path().join("r"),
        &want,
        "restore --l1 --l2 --fallback",
    );
}

/// A damaged page in a pending file that a later pending FULL checkpoint
/// supersedes does not stop `--fallback` short of the newest state.
#[test]
fn fallback_is_not_stopped_by_damage_a_later_full_supersedes() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    let mut h = Hand::new(&l1);
    h.ic(0, true, &[1, 2, 3], 100, Some(0xA));
    rex_ok(&push_args(&l1, &l2));
    let bad1 = h.ic(1, false, &[2], 101, Some(0xA));
    h.ic(2, true, &[1, 5], 102, Some(0xA));
    h.ic(3, false, &[5], 103, Some(0xA));
    let want = h.truth(&d.path().join("truth.rexic"));
    let bad4 = h.ic(4, false, &[6], 104, Some(0xA));
    for bad in [&bad1, &bad4] {
        let len = std::fs::metadata(bad).unwrap().len();
        flip_byte(bad, len - 10);
    }
    let (out, _) = restore(&l2, Some(&l1), &[], &d.path().join("r0"));
    assert_eq!(out.status.code(), Some(3), "{}", show(&["restore"], &out));
    restores(
        &l2,
        Some(&l1),
        &["--fallback"],
        &d.path().join("r"),
        &want,
        "restore --l1 --l2 --fallback",
    );
    assert!(
        all_output(&out).contains("ckpt-00000004.rexic"),
        "names the damaged file"
    );
}

/// Two jobs (one default rank) on one L2: the other job's newer chain (of
/// two generations) is never this L1 directory's state. Without `--fallback` the restore
/// refuses; with it, it restores this run's newest generation plus its
/// pending files.
#[test]
fn fallback_prefers_the_l1_directorys_own_run() {
    let d = tempfile::tempdir().unwrap();
    let (x, y, l2) = (d.path().join("x"), d.path().join("y"), d.path().join("l2"));
    let mut a = Hand::new(&x);
    a.ic(0, true, &[1, 2], 100, Some(0xA));
    a.ic(1, false, &[2], 101, Some(0xA));
    rex_ok(&push_args(&x, &l2));
    // The other job's chain has two generations above ours.
    let mut b = Hand::new(&y);
    b.ic(0, true, &[8, 9], 200, Some(0xB));
    rex_ok(&push_args(&y, &l2));
    b.ic(1, false, &[9], 201, Some(0xB));
    rex_ok(&push_args(&y, &l2));
    a.ic(2, false, &[1], 202, Some(0xA));
    a.ic(3, false, &[2], 203, Some(0xA));
    let want = a.truth(&d.path().join("truth.rexic"));
    let (out, _) = restore(&l2, Some(&x), &[], &d.path().join("r1"));
    assert_eq!(out.status.code(), Some(3), "{}", show(&["restore"], &out));
    restores(
        &l2,
        Some(&x),
        &["--fallback"],
        &d.path().join("r2"),
        &want,
        "restore --l1 x --l2 --fallback",
    );
}

/// A dangling symlink named like the newest manifest is an invalid
/// manifest: refused without `--fallback`, passed over (and said) with it;
/// nothing else is blocked.
#[test]
fn a_dangling_manifest_link_is_an_invalid_manifest() {
    let c = chain(45, 2, false);
    let (work, l1, l2) = c.copy();
    std::os::unix::fs::symlink(work.path().join("nowhere"), l2.join(manifest_name(9))).unwrap();
    let (out, _) = restore(&l2, None, &[], &work.path().join("r1"));
    assert_eq!(out.status.code(), Some(3), "{}", show(&["restore"], &out));
    assert!(
        stderr(&out).contains("generation 9"),
        "{}",
        show(&["restore"], &out)
    );
    restores(
        &l2,
        None,
        &["--fallback"],
        &work.path().join("r2"),
        &c.truth.join("seq-3.rexic"),
        "restore --fallback",
    );
    let v = rex(&["verify", "--l2", s(&l2)]);
    assert_eq!(v.status.code(), Some(3), "{}", show(&["verify"], &v));
    // status shows the invalid manifest and exits 3.
    let st = rex(&["status", "--l1", s(&l1), "--l2", s(&l2)]);
    assert_eq!(st.status.code(), Some(3), "{}", show(&["status"], &st));
    assert!(String::from_utf8_lossy(&st.stdout).contains("INVALID"));
}

/// A huge sparse manifest is refused from its size, never read into memory.
#[test]
fn a_huge_manifest_is_refused_unread() {
    let c = chain(47, 1, false);
    let work = tempfile::tempdir().unwrap();
    let l2 = work.path().join("l2");
    copy_tree(&c.template.join("l2"), &l2);
    let f = std::fs::File::create(l2.join(manifest_name(9))).unwrap();
    std::io::Write::write_all(&mut &f, b"REXMAN1\n").unwrap();
    f.set_len(1 << 30).unwrap();
    let out = rex_limited(
        &[
            "restore",
            "--l2",
            s(&l2),
            "--out",
            s(&work.path().join("x")),
        ],
        Duration::from_secs(60),
    );
    let ctx = show(&["restore"], &out);
    assert_no_crash(&out, &ctx);
    assert_eq!(out.status.code(), Some(3), "{ctx}");
    assert!(stderr(&out).len() < 4096, "a short message: {ctx}");
}

/// A manifest's counts past any image are refused where they are read,
/// and its byte counts, the manifest's own word, are summed without an
/// overflow (helper-111: `bytes_out` 2^64 - 1 made `status` panic;
/// `live_pages` 2^52 made `plan` and a cron `flush` panic).
#[test]
fn a_manifest_s_huge_counts_never_panic() {
    use rexctl::format::manifest::Manifest;
    let c = chain(48, 2, true);
    let rewrite = |l2: &Path, l1: &Path, edit: &dyn Fn(&mut Manifest)| {
        for dir in [l2.to_path_buf(), l1.join("rex")] {
            let path = dir.join(manifest_name(2));
            let mut m = Manifest::decode(&path, &std::fs::read(&path).unwrap()).unwrap();
            edit(&mut m);
            std::fs::write(&path, m.encode()).unwrap();
        }
    };
    let (_w, l1, l2) = c.copy();
    rewrite(&l2, &l1, &|m| m.bytes_out = u64::MAX);
    rewrite(&l2, &l1, &|m| m.bytes_in = u64::MAX);
    for args in [
        vec!["status", "--l1", s(&l1), "--l2", s(&l2)],
        vec!["status", "--l1", s(&l1), "--l2", s(&l2), "--json"],
        vec!["plan", "--l1", s(&l1), "--l2", s(&l2)],
    ] {
        let out = rex(&args);
        let ctx = show(&args, &out);
        assert_no_crash(&out, &ctx);
        assert_eq!(out.status.code(), Some(0), "{ctx}");
    }
    for field in ["live_pages", "dirty_pages", "dropped_pages"] {
        let (w, l1, l2) = c.copy();
        // A checkpoint pending, so that `plan` and `flush` read the chain.
        for n in names_in(&c.template.join("more")) {
            std::fs::copy(c.template.join("more").join(&n), l1.join(&n)).unwrap();
        }
        rewrite(&l2, &l1, &|m| match field {
            "live_pages" => m.live_pages = 1 << 52,
            "dirty_pages" => m.dirty_pages = 1 << 52,
            _ => m.dropped_pages = 1 << 52,
        });
        let img = w.path().join("out.rexic");
        for args in [
            vec!["status", "--l1", s(&l1), "--l2", s(&l2)],
            vec!["plan", "--l1", s(&l1), "--l2", s(&l2)],
            vec!["flush", "--l1", s(&l1), "--l2", s(&l2)],
            vec!["push-l2", "--l1", s(&l1), "--l2", s(&l2)],
            vec!["restore", "--l2", s(&l2), "-o", s(&img)],
        ] {
            let out = rex(&args);
            let ctx = show(&args, &out);
            assert_no_crash(&out, &ctx);
            assert_eq!(out.status.code(), Some(3), "{field}: {ctx}");
            // The field is named, even where the error is the gap after
            // generation 1 it leaves.
            assert!(stderr(&out).contains(field), "{field}: {ctx}");
            assert!(!img.exists(), "{ctx}");
        }
    }
}

/// L2's manifest of a generation and L1's copy of it differ: two
/// histories, refused by a restore from L1 and L2 as by a push, and said by
/// `status` (helper-111: L2's newest claiming `last_seq` 5, L1's copy 3,
/// made L1's pending checkpoints 4 and 5 covered; the restore left their
/// pages out and said seq 5, exit 0).
#[test]
fn a_generation_l2_and_l1_s_copy_tell_apart_is_two_histories() {
    use rexctl::format::manifest::Manifest;
    let c = chain(49, 2, true);
    let (w, l1, l2) = c.copy();
    let mut pending = Vec::new();
    for n in names_in(&c.template.join("more")) {
        std::fs::copy(c.template.join("more").join(&n), l1.join(&n)).unwrap();
        let f = IcMeta::read(l1.join(&n)).unwrap();
        pending.push((f.seq(), f.header.time_ns));
    }
    pending.sort();
    let truth = w.path().join("truth.rexic");
    let args = ["restore", "--l1", s(&l1), "--l2", s(&l2), "-o", s(&truth)];
    rex_ok(&args);
    assert_image(&truth, &c.image(5), "before the edit");
    let path = l2.join(manifest_name(2));
    let mut m = Manifest::decode(&path, &std::fs::read(&path).unwrap()).unwrap();
    let &(last, time) = pending.last().unwrap();
    (m.last_seq, m.time_ns) = (last, time);
    if !m.seq_times.is_empty() {
        m.seq_times.extend(pending.iter().copied());
    }
    std::fs::write(&path, m.encode()).unwrap();

    let img = w.path().join("img.rexic");
    let args = ["restore", "--l1", s(&l1), "--l2", s(&l2), "-o", s(&img)];
    let out = rex(&args);
    let ctx = show(&args, &out);
    assert_no_crash(&out, &ctx);
    assert_eq!(out.status.code(), Some(3), "{ctx}");
    assert!(stderr(&out).contains("generation 2 differ"), "{ctx}");
    assert!(stderr(&out).contains("two histories"), "{ctx}");
    assert!(!img.exists(), "{ctx}");
    let args = ["status", "--l1", s(&l1), "--l2", s(&l2)];
    let out = rex(&args);
    let ctx = show(&args, &out);
    assert_eq!(out.status.code(), Some(3), "{ctx}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("two histories"),
        "{ctx}"
    );
    // The push refused it already.
    let out = rex(&push_args(&l1, &l2));
    assert_eq!(out.status.code(), Some(3), "{}", show(&["push-l2"], &out));
    let left = names_in(&l1)
        .iter()
        .filter(|n| n.ends_with(".rexic"))
        .count();
    assert_eq!(left, pending.len(), "the pending checkpoints stay in L1");
}

/// L2 pointed at the L1 directory itself is a configuration error, not a
/// busy lock held by the same process.
#[test]
fn l2_equal_to_l1_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let l1 = d.path().join("l1");
    let mut h = Hand::new(&l1);
    h.ic(0, true, &[1], 100, Some(0xA));
    let out = rex(&push_args(&l1, &l1));
    let ctx = show(&["push-l2"], &out);
    assert_no_crash(&out, &ctx);
    assert_eq!(out.status.code(), Some(5), "{ctx}");
    assert!(stderr(&out).contains("L2 must be another place"), "{ctx}");
}

// ---------------------------------------------------------------------------
// A second hostile review.

fn crc_of(path: &Path) -> u32 {
    crc32fast::hash(&std::fs::read(path).unwrap())
}

/// A restarted job continued run A in a fresh L1 (from the restored image,
/// which names the run) while the old node later pushed its stale tail of
/// run A: the restarted job's checkpoints, taken after that generation with
/// seqs it holds, are a fork: refused and kept, never taken as pushed.
#[test]
fn a_fork_of_a_run_is_never_taken_as_pushed() {
    let d = tempfile::tempdir().unwrap();
    let (a_dir, b_dir, l2) = (d.path().join("a"), d.path().join("b"), d.path().join("l2"));
    let mut a = Hand::new(&a_dir);
    a.ic(0, true, &[1, 2, 3], 100, Some(0xA));
    a.ic(1, false, &[2], 101, Some(0xA));
    rex_ok(&push_args(&a_dir, &l2));
    a.ic(2, false, &[3], 102, Some(0xA));
    a.ic(3, false, &[1], 103, Some(0xA));
    // The restarted job, much later, continues run A with other pages.
    let mut b = Hand::new(&b_dir);
    b.ic(2, false, &[5], 5000, Some(0xA));
    b.ic(3, false, &[6], 5001, Some(0xA));
    b.ic(4, false, &[6], 5002, Some(0xA));
    rex_ok(&push_args(&a_dir, &l2)); // the old node's stale tail
    let err = refused_and_kept(&push_args(&b_dir, &l2), &b_dir);
    assert!(err.contains("a fork of the run"), "{err}");
    let (out, _) = restore(&l2, Some(&b_dir), &[], &d.path().join("r"));
    assert_eq!(out.status.code(), Some(3), "{}", show(&["restore"], &out));
}

/// The same fork, but the restarted copy's clock is behind: its
/// checkpoints look older than the generation the other copy pushed. Their
/// instance id, not their time, shows they are not the ones pushed: refused
/// and kept; restore from L1 refuses them too, and `--fallback` restores
/// what L2 holds, never a mix of the two copies.
#[test]
fn a_fork_whose_clock_is_behind_is_never_taken_as_pushed() {
    let d = tempfile::tempdir().unwrap();
    let (a_dir, b_dir, l2) = (d.path().join("a"), d.path().join("b"), d.path().join("l2"));
    let mut a = Hand::run_a(&a_dir);
    rex_ok(&push_args(&a_dir, &l2));
    // Copy B restarts from generation 1 on a node 60 s behind.
    let mut b = Hand::new(&b_dir);
    b.instance = Some(2);
    b.image = a.image.clone();
    b.ic(2, false, &[5], 45, Some(0xA));
    b.ic(3, false, &[6], 46, Some(0xA));
    // Copy A goes on and is pushed first, later in real time.
    a.ic(2, false, &[3], 102, Some(0xA));
    a.ic(3, false, &[1], 103, Some(0xA));
    rex_ok(&push_args(&a_dir, &l2));
    let want = a.truth(&d.path().join("truth.rexic"));
    b.ic(4, false, &[7], 47, Some(0xA));
    let err = refused_and_kept(&push_args(&b_dir, &l2), &b_dir);
    assert!(err.contains("a fork of the run"), "{err}");
    assert!(
        err.contains(&format!("instance {}", "02".repeat(16))),
        "{err}"
    );
    let (out, _) = restore(&l2, Some(&b_dir), &[], &d.path().join("r"));
    assert_eq!(out.status.code(), Some(3), "{}", show(&["restore"], &out));
    restores(
        &l2,
        Some(&b_dir),
        &["--fallback"],
        &d.path().join("f"),
        &want,
        "restore --l1 b --fallback",
    );

    // Copy B restarts (librex falls back to L2's state and starts a new run
    // with a FULL checkpoint). A FULL checkpoint no newer than L2's state
    // supersedes nothing: still refused and kept.
    b.instance = Some(3);
    b.ic(5, true, &[8, 9], 100, Some(0xB));
    refused_and_kept(&push_args(&b_dir, &l2), &b_dir);
    // Taken after it: the fork's files are superseded; the push takes the
    // FULL checkpoint, says so, then deletes them with it.
    b.ic(5, true, &[8, 9], 200, Some(0xB));
    let want_b = b.truth(&d.path().join("truth-b.rexic"));
    restores(
        &l2,
        Some(&b_dir),
        &[],
        &d.path().join("g"),
        &want_b,
        "restore --l1 b after B's new run",
    );
    let out = rex(&push_args(&b_dir, &l2));
    assert!(out.status.success(), "{}", show(&["push-l2"], &out));
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(said.contains("L1 checkpoints seq 2..=4 cannot continue L2's newest generation (a fork of the run), but the FULL checkpoint of seq 5"), "{said}");
    assert!(ic_names(&b_dir).is_empty(), "left: {:?}", ic_names(&b_dir));
    restores(
        &l2,
        None,
        &[],
        &d.path().join("h"),
        &want_b,
        "restore from L2 after B's push",
    );
}

/// Once another instance has taken a run over, a checkpoint of the earlier
/// one is a second copy's (a dead run's later checkpoints recovered from
/// partner copies after the restarted job's own): refused in L1 alone and
/// after a generation that records the hand-over; `--fallback` restores
/// the state before it.
#[test]
fn an_instance_that_comes_back_is_a_fork() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    let mut h = Hand::run_a(&l1);
    h.instance = Some(2);
    h.ic(2, false, &[3], 102, Some(0xA));
    let want = h.truth(&d.path().join("truth.rexic"));
    h.instance = Some(1);
    h.ic(3, false, &[1], 103, Some(0xA));
    let err = refused_and_kept(&push_args(&l1, &l2), &l1);
    assert!(err.contains("had already handed that run over"), "{err}");
    restores(
        &l2,
        Some(&l1),
        &["--fallback"],
        &d.path().join("a"),
        &want,
        "restore --fallback, L1 alone",
    );
    // The same after a push of seq 0..=2 (the hand-over is in its spans).
    let late = l1.join(ic_file_name(3));
    let keep = std::fs::read(&late).unwrap();
    std::fs::remove_file(&late).unwrap();
    rex_ok(&push_args(&l1, &l2));
    std::fs::write(&late, keep).unwrap();
    let err = refused_and_kept(&push_args(&l1, &l2), &l1);
    assert!(err.contains("had already handed that run over"), "{err}");
    let (out, _) = restore(&l2, Some(&l1), &[], &d.path().join("b"));
    assert_eq!(out.status.code(), Some(3), "{}", show(&["restore"], &out));
    restores(
        &l2,
        Some(&l1),
        &["--fallback"],
        &d.path().join("c"),
        &want,
        "restore --fallback after the push",
    );
}

/// A stale copy of the job holds, after its forked incrementals, a FULL
/// checkpoint of the same run (spec-legal: only "should" a producer mint a
/// new run with each FULL file) taken before L2's newest generation. It
/// supersedes nothing and is no newer state: refused and kept, by push and
/// by restore, and so is such a FULL file alone, at a seq L2 holds or above.
#[test]
fn a_stale_full_checkpoint_of_the_run_never_replaces_l2s_state() {
    let d = tempfile::tempdir().unwrap();
    let (a_dir, b_dir, l2) = (d.path().join("a"), d.path().join("b"), d.path().join("l2"));
    let mut a = Hand::run_a(&a_dir);
    rex_ok(&push_args(&a_dir, &l2));
    // Copy B continues from seq 1 and is pushed.
    let mut b = Hand::new(&b_dir);
    b.instance = Some(2);
    b.image = a.image.clone();
    b.ic(2, false, &[4], 150, Some(0xA));
    b.ic(3, false, &[5], 151, Some(0xA));
    rex_ok(&push_args(&b_dir, &l2));
    let want = b.truth(&d.path().join("truth.rexic"));
    // Copy A's stale branch: a fork, then a FULL file of the run, older.
    a.ic(2, false, &[6], 102, Some(0xA));
    a.ic(3, true, &[7], 103, Some(0xA));
    a.ic(4, false, &[8], 104, Some(0xA));
    let err = refused_and_kept(&push_args(&a_dir, &l2), &a_dir);
    assert!(err.contains("a fork of the run"), "{err}");
    let (out, _) = restore(&l2, Some(&a_dir), &[], &d.path().join("r"));
    assert_eq!(out.status.code(), Some(3), "{}", show(&["restore"], &out));
    // The FULL file alone: at a seq L2 holds, then above it.
    for seq in [2, 4] {
        let lone = d.path().join(format!("lone{seq}"));
        let mut c = Hand::new(&lone);
        c.instance = Some(1);
        c.ic(seq, true, &[9], 103, Some(0xA));
        let err = refused_and_kept(&push_args(&lone, &l2), &lone);
        assert!(
            err.contains("a stale branch of the run"),
            "seq {seq}: {err}"
        );
        // A restore that falls back (as librex's restart does) leaves it
        // out too: L2's state, never the stale one.
        let out = d.path().join(format!("fb{seq}"));
        restores(&l2, Some(&lone), &["--fallback"], &out, &want, "--fallback");
    }
    restores(
        &l2,
        None,
        &[],
        &d.path().join("l2only"),
        &want,
        "L2 keeps copy B's state",
    );
    // Behind a valid pending file: a FULL file of the run older than it
    // replaces nothing (refused and kept); the fallback keeps the valid one.
    let deep = d.path().join("deep");
    let mut e = Hand::new(&deep);
    e.instance = Some(2);
    e.image = b.image.clone();
    e.ic(4, false, &[6], 152, Some(0xA));
    let want_e = e.truth(&d.path().join("truth-e.rexic"));
    e.instance = Some(3);
    e.ic(5, true, &[9], 120, Some(0xA));
    let err = refused_and_kept(&push_args(&deep, &l2), &deep);
    assert!(err.contains("a stale branch of the run"), "{err}");
    let out = d.path().join("fb-deep");
    restores(
        &l2,
        Some(&deep),
        &["--fallback"],
        &out,
        &want_e,
        "--fallback",
    );
}

/// A pending checkpoint was lost (a gap) and the job restarted past it
/// with a new run's FULL checkpoint: the files before that checkpoint are
/// superseded, so pushes go on (they were refused for good).
#[test]
fn a_new_runs_full_checkpoint_supersedes_a_gap_before_it() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    let mut h = Hand::run_a(&l1);
    rex_ok(&push_args(&l1, &l2));
    h.ic(2, false, &[3], 102, Some(0xA));
    h.ic(4, false, &[1], 104, Some(0xA));
    h.instance = Some(2);
    h.ic(5, true, &[7, 8], 200, Some(0xB));
    let want = h.truth(&d.path().join("truth.rexic"));
    restores(&l2, Some(&l1), &[], &d.path().join("a"), &want, "L1 + L2");
    let out = rex(&push_args(&l1, &l2));
    assert!(out.status.success(), "{}", show(&["push-l2"], &out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("L1 checkpoints seq 2..=4 cannot continue L2's newest generation (a gap, a fork or a stale checkpoint among them)"),
        "{said}"
    );
    assert!(ic_names(&l1).is_empty(), "left: {:?}", ic_names(&l1));
    restores(&l2, None, &[], &d.path().join("b"), &want, "L2 alone");
}

/// A FULL checkpoint that changes the page size and leaves no live page
/// (it carries none, or the batch drops them): the generation takes the new
/// page size (helper-41: it kept the chain's, the restored image had the
/// old one, and every later push failed on the pending checkpoints' "other"
/// page size until the next FULL).
#[test]
fn a_full_checkpoint_that_changes_the_page_size_and_leaves_no_page_takes_it() {
    for dropped in [false, true] {
        let d = tempfile::tempdir().unwrap();
        let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
        let ctx = if dropped { "dropped" } else { "empty" };
        let mut h = Hand::new(&l1);
        h.ps = 512;
        h.ic(0, true, &[1, 2], 100, Some(0xA));
        rex_ok(&push_args(&l1, &l2));
        h.ps = 4096;
        if dropped {
            h.ic(1, true, &[3], 101, Some(0xB));
            h.ic_dropping(2, false, &[], &[3], 102, Some(0xB));
        } else {
            h.ic(1, true, &[], 101, Some(0xB));
        }
        rex_ok(&push_args(&l1, &l2));
        let m = std::fs::read_to_string(l2.join(manifest_name(2))).unwrap();
        assert!(m.contains("\"page_size\": 4096"), "{ctx}: {m}");
        let want = h.truth(&d.path().join("empty.rexic"));
        restores(&l2, None, &[], &d.path().join("r0"), &want, ctx);
        // As raw bytes there is nothing to write, and it says so (it spoke
        // of "requested ranges" that were never given).
        let raw = d.path().join("raw");
        let o = rex(&["restore", "--l2", s(&l2), "--raw", "-o", s(&raw)]);
        assert_eq!(o.status.code(), Some(5), "{ctx}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("has no page: nothing to write"),
            "{ctx}: {}",
            stderr(&o)
        );
        assert!(!raw.exists(), "{ctx}: an output was left");
        let next = if dropped { 3 } else { 2 };
        h.ic(next, false, &[7], 103, Some(0xB));
        let want = h.truth(&d.path().join("truth.rexic"));
        restores(&l2, Some(&l1), &[], &d.path().join("r1"), &want, ctx);
        rex_ok(&push_args(&l1, &l2));
        restores(&l2, None, &[], &d.path().join("r2"), &want, ctx);
    }
}

/// A FULL checkpoint whose pages are smaller than the configured pattern
/// size starts a chain with patterns of one page (helper-41: every push
/// failed, "4096 is not a power of two between 16 and the page size 512",
/// until the setting was changed); a later FULL with larger pages gets the
/// configured size again.
#[test]
fn pages_smaller_than_the_pattern_size_get_patterns_of_a_page() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    let mut push = push_args(&l1, &l2);
    push.extend(["--pattern-size", "1024"]);
    let pattern_of = |g: u64| {
        let m = std::fs::read_to_string(l2.join(manifest_name(g))).unwrap();
        m.lines()
            .find(|l| l.contains("\"pattern_size\""))
            .unwrap()
            .to_string()
    };
    let mut h = Hand::new(&l1);
    h.ic(0, true, &[1, 2], 100, Some(0xA));
    rex_ok(&push);
    assert!(pattern_of(1).contains("1024"), "{}", pattern_of(1));
    h.ps = 512;
    h.ic(1, true, &[3, 4], 101, Some(0xB));
    h.ic(2, false, &[4], 102, Some(0xB));
    rex_ok(&push);
    assert!(pattern_of(2).contains("512"), "{}", pattern_of(2));
    let want = h.truth(&d.path().join("t1.rexic"));
    restores(
        &l2,
        None,
        &[],
        &d.path().join("r1"),
        &want,
        "512-byte pages",
    );
    h.ps = 4096;
    h.ic(3, true, &[5], 103, Some(0xC));
    rex_ok(&push);
    assert!(pattern_of(3).contains("1024"), "{}", pattern_of(3));
    let want = h.truth(&d.path().join("t2.rexic"));
    restores(
        &l2,
        None,
        &[],
        &d.path().join("r2"),
        &want,
        "4096-byte pages",
    );
}

/// A version 1 producer (no chain id, no instance id) restarted in a fresh
/// directory counts seq from 0 again: its newer FULL checkpoint starts a
/// new chain, as before instance ids; an older one above L2's seqs is
/// refused (at or below them, times alone take it for pushed, as ever).
#[test]
fn a_version_1_job_restarted_in_a_fresh_directory_starts_a_new_chain() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    let mut h = Hand::new(&l1);
    h.ic(0, true, &[1, 2], 100, None);
    h.ic(1, false, &[2], 101, None);
    rex_ok(&push_args(&l1, &l2));
    let stale = d.path().join("stale");
    let mut s = Hand::new(&stale);
    s.ic(5, true, &[5], 50, None);
    let err = refused_and_kept(&push_args(&stale, &l2), &stale);
    assert!(err.contains("a stale branch of the run"), "{err}");
    let fresh = d.path().join("fresh");
    let mut f = Hand::new(&fresh);
    f.ic(0, true, &[9], 200, None);
    let want = f.truth(&d.path().join("truth.rexic"));
    rex_ok(&push_args(&fresh, &l2));
    restores(&l2, None, &[], &d.path().join("r"), &want, "the new chain");
}

/// A push committed a batch that two instances wrote (a job restarted in
/// its L1 directory, on a node whose clock is behind), then died before it
/// deleted the batch. The leftovers are the checkpoints it pushed, by their
/// instance ids, although the first instance's look newer than the
/// generation: the next push removes them and restores stay exact.
#[test]
fn a_batch_of_two_instances_left_after_its_push_is_taken_as_pushed() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    let mut h = Hand::run_a(&l1);
    h.instance = Some(2);
    h.ic(2, false, &[3, 4], 90, Some(0xA));
    h.ic(3, false, &[1], 91, Some(0xA));
    let kept: Vec<(PathBuf, Vec<u8>)> = ic_names(&l1)
        .iter()
        .map(|n| (l1.join(n), std::fs::read(l1.join(n)).unwrap()))
        .collect();
    rex_ok(&push_args(&l1, &l2));
    let m = std::fs::read_to_string(l2.join(manifest_name(1))).unwrap();
    let spans = m.matches("\"from_seq\"").count();
    assert_eq!(spans, 2, "two instance spans in\n{m}");
    for (p, b) in &kept {
        std::fs::write(p, b).unwrap();
    }
    h.instance = Some(3);
    h.ic(4, false, &[5], 92, Some(0xA));
    let want = h.truth(&d.path().join("truth.rexic"));
    restores(
        &l2,
        Some(&l1),
        &[],
        &d.path().join("r"),
        &want,
        "restore --l1 with the leftovers",
    );
    rex_ok(&push_args(&l1, &l2));
    assert!(ic_names(&l1).is_empty(), "left: {:?}", ic_names(&l1));
    restores(
        &l2,
        None,
        &[],
        &d.path().join("r2"),
        &want,
        "restore after the next push",
    );
}

/// A producer that names no instance, whose clock stepped back within a
/// batch, and a push that died after its commit, before it deleted the
/// batch (helper-41): the leftovers are the checkpoints it pushed, not a
/// newer restart (a FULL file later than the generation's last checkpoint)
/// nor a fork. The restore from L1 plus L2 gives the pushed state and the
/// next push removes them, instead of restoring (and pushing over L2's
/// newest) seq 2's state, or refusing every push.
#[test]
fn a_clock_stepped_back_within_a_pushed_batch_leaves_no_newer_looking_leftovers() {
    for (times, run) in [
        ([100, 200, 300, 50], None),
        ([100, 200, 300, 50], Some(0xA)),
        ([10, 200, 300, 250], Some(0xA)),
    ] {
        let ctx = format!("times {times:?}, run {run:?}");
        let d = tempfile::tempdir().unwrap();
        let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
        let mut h = Hand::new(&l1);
        h.ic(0, true, &[1, 2, 3], times[0], run);
        h.ic(1, false, &[1], times[1], run);
        h.ic(2, false, &[2], times[2], run);
        h.ic(3, false, &[3], times[3], run);
        let want = h.truth(&d.path().join("truth.rexic"));
        let kept: Vec<(PathBuf, Vec<u8>)> = ic_names(&l1)
            .iter()
            .map(|n| (l1.join(n), std::fs::read(l1.join(n)).unwrap()))
            .collect();
        rex_ok(&push_args(&l1, &l2));
        for (p, b) in &kept {
            std::fs::write(p, b).unwrap();
        }
        restores(&l2, Some(&l1), &[], &d.path().join("r1"), &want, &ctx);
        rex_ok(&push_args(&l1, &l2));
        assert!(ic_names(&l1).is_empty(), "{ctx}: left {:?}", ic_names(&l1));
        restores(&l2, None, &[], &d.path().join("r2"), &want, &ctx);
        let m = std::fs::read_to_string(l2.join(manifest_name(1))).unwrap();
        assert!(m.contains("\"seq_times\""), "{ctx}: {m}");
    }
}

/// A fork of a run whose producer names no instance and whose clock jumped
/// ahead at seq 1 then came back (helper-43: bounding leftovers by the
/// generation's latest time took the fork's seq 2 and 3 for pushed,
/// deleted them and pushed its seq 4 over the original: an image neither
/// branch had). Its checkpoints have other times than the generation's
/// batch for their seqs: refused as a fork, kept, L2's state intact.
#[test]
fn a_fork_is_not_taken_for_pushed_whatever_the_clock_did() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    let mut h = Hand::new(&l1);
    h.ic(0, true, &[1, 2, 3], 100, Some(0xA));
    h.ic(1, false, &[2], 10_000, Some(0xA));
    h.ic(2, false, &[3], 200, Some(0xA));
    h.ic(3, false, &[1], 300, Some(0xA));
    let want = h.truth(&d.path().join("truth.rexic"));
    rex_ok(&push_args(&l1, &l2));
    // The fork restarted from seq 1 elsewhere, now writing here.
    let mut f = Hand::new(&l1);
    f.ic(2, false, &[3], 400, Some(0xA));
    f.ic(3, false, &[1], 500, Some(0xA));
    f.ic(4, false, &[2], 600, Some(0xA));
    let before = ic_names(&l1);
    let err = refused_and_kept(&push_args(&l1, &l2), &l1);
    assert!(err.contains("a fork of the run"), "{err}");
    assert_eq!(ic_names(&l1), before);
    restores(
        &l2,
        None,
        &[],
        &d.path().join("r"),
        &want,
        "L2 after the refused fork",
    );
    let (o, _) = restore(&l2, Some(&l1), &[], &d.path().join("r2"));
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
}

/// A fork from below the newest generation (helper-44): generations of
/// seq 0, 1-2 and 3-4, then a restart from seq 0 elsewhere writes its own
/// seq 1 and 2 here, at times no later than the newest generation's. The
/// newest manifest's `seq_times` hold the earlier generations' entries too,
/// so these are not taken for pushed (which deleted them): refused as a
/// fork, kept, L2's state intact.
#[test]
fn a_fork_from_below_the_newest_generation_is_not_taken_for_pushed() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    let mut h = Hand::new(&l1);
    h.ic(0, true, &[1, 2, 3], 100, Some(0xA));
    rex_ok(&push_args(&l1, &l2));
    h.ic(1, false, &[2], 200, Some(0xA));
    h.ic(2, false, &[3], 300, Some(0xA));
    rex_ok(&push_args(&l1, &l2));
    h.ic(3, false, &[1], 400, Some(0xA));
    h.ic(4, false, &[2], 500, Some(0xA));
    rex_ok(&push_args(&l1, &l2));
    let want = h.truth(&d.path().join("truth.rexic"));
    let m = std::fs::read_to_string(l2.join(manifest_name(3))).unwrap();
    assert!(m.contains("\"seq_times\""), "{m}");
    let mut f = Hand::new(&l1);
    f.ic(1, false, &[3], 250, Some(0xA));
    f.ic(2, false, &[1], 350, Some(0xA));
    let before = ic_names(&l1);
    let err = refused_and_kept(&push_args(&l1, &l2), &l1);
    assert!(err.contains("a fork of the run"), "{err}");
    assert_eq!(ic_names(&l1), before);
    restores(
        &l2,
        None,
        &[],
        &d.path().join("r"),
        &want,
        "L2 after the refused fork",
    );
}

/// A restore from L1 plus L2 reads the chain, then L1's pending
/// checkpoints; a push commits a generation, then deletes the checkpoints
/// it coalesced. In between, the restore had neither and gave an older
/// state with success (helper-45: seq 3 of 12, exit 0). It now waits while
/// a push holds L1's lock, and a push waits for it: refused busy (exit 4),
/// nothing deleted, while a restore reads L1.
#[test]
fn a_restore_and_a_push_never_interleave_on_l1() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    let mut h = Hand::new(&l1);
    h.ic(0, true, &[1, 2, 3], 100, Some(0xA));
    rex_ok(&push_args(&l1, &l2));
    h.ic(1, false, &[2], 200, Some(0xA));
    h.ic(2, false, &[3], 300, Some(0xA));
    let want = h.truth(&d.path().join("truth.rexic"));
    // A push holds the lock (this process, as `push-l2` would).
    let push = rexctl::l1::lock::JobLock::acquire(&l1, "push-l2 (test)").unwrap();
    let out = d.path().join("image.rexic");
    let mut child = rexctl()
        .args(["restore", "--l2", s(&l2), "--l1", s(&l1), "-o", s(&out)])
        .env_remove("REX_FAILPOINT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // `verify --l1` compares L1 with L2: it waits too.
    let mut check = rexctl()
        .args(["verify", "--l2", s(&l2), "--l1", s(&l1)])
        .env_remove("REX_FAILPOINT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let early = child.try_wait().unwrap();
    let verified_early = check.try_wait().unwrap();
    drop(push);
    let v = check.wait_with_output().unwrap();
    assert!(verified_early.is_none(), "verify ran while a push held L1");
    assert!(v.status.success(), "{}", show(&["verify"], &v));
    let o = child.wait_with_output().unwrap();
    let ctx = show(&["restore"], &o);
    assert!(
        early.is_none(),
        "the restore ran while a push held L1: {ctx}"
    );
    assert!(o.status.success(), "{ctx}");
    assert!(stderr(&o).contains("waiting for"), "{ctx}");
    assert_image(&out, &want, "after the push let go");
    // A restore reads L1 (this process): a push is refused, keeps all.
    let reading = rexctl::l1::lock::JobLock::shared(&l1, |_| {})
        .unwrap()
        .expect("L1's lock file");
    let before = ic_names(&l1);
    let o = rex(&push_args(&l1, &l2));
    assert_eq!(o.status.code(), Some(4), "{}", show(&["push-l2"], &o));
    assert!(stderr(&o).contains("held by a restore"), "{}", stderr(&o));
    assert_eq!(ic_names(&l1), before);
    drop(reading);
    rex_ok(&push_args(&l1, &l2));
    restores(
        &l2,
        None,
        &[],
        &d.path().join("r"),
        &want,
        "pushed after the restore",
    );
}

/// Another rank-less job's chains (two full generations) pruned this L1
/// directory's chain from L2; its push is refused, and must not prune or
/// overwrite L1's copy of its own chain: `--fallback` still restores it.
#[test]
fn a_refused_push_keeps_the_l1_copy_of_its_own_chain() {
    let d = tempfile::tempdir().unwrap();
    let (x, y, l2) = (d.path().join("x"), d.path().join("y"), d.path().join("l2"));
    let mut a = Hand::new(&x);
    a.ic(0, true, &[1, 2], 100, Some(0xA));
    rex_ok(&push_args(&x, &l2));
    a.ic(1, false, &[2], 101, Some(0xA));
    rex_ok(&push_args(&x, &l2));
    a.ic(2, false, &[1], 102, Some(0xA));
    let want = a.truth(&d.path().join("truth.rexic"));
    let mut b = Hand::new(&y);
    b.ic(0, true, &[8], 200, Some(0xB));
    rex_ok(&push_args(&y, &l2));
    b.ic(1, true, &[9], 201, Some(0xB));
    rex_ok(&push_args(&y, &l2));
    assert!(
        !l2.join(manifest_name(1)).exists(),
        "run A's chain pruned from L2"
    );
    refused_and_kept(&push_args(&x, &l2), &x);
    for g in [1, 2] {
        assert!(
            x.join("rex").join(manifest_name(g)).is_file(),
            "L1's copy of g{g} kept"
        );
    }
    restores(
        &l2,
        Some(&x),
        &["--fallback"],
        &d.path().join("r"),
        &want,
        "restore --l1 x --fallback",
    );
}

/// L1's copy of a generation L2 lacks is never uploaded over another run's
/// files of the same number (whose manifest was lost), nor are those files
/// swept as crash leftovers.
#[test]
fn a_stale_l1_generation_never_overwrites_another_runs_files() {
    let d = tempfile::tempdir().unwrap();
    let (x, y, l2) = (d.path().join("x"), d.path().join("y"), d.path().join("l2"));
    let mut a = Hand::new(&x);
    a.ic(0, true, &[1, 2], 100, Some(0xA));
    rex_ok(&push_args(&x, &l2));
    // Run A's next push, interrupted between its two manifests: its
    // generation 2 is in L1's copy, its batch still pending in L1.
    let f = a.ic(1, false, &[2, 3], 101, Some(0xA));
    let keep = std::fs::read(&f).unwrap();
    rex_ok(&push_args(&x, &l2));
    std::fs::remove_file(l2.join(manifest_name(2))).unwrap();
    std::fs::write(&f, keep).unwrap();
    // Run B (newer, its own L1) pushes its generation 2 over A's leftovers.
    let mut b = Hand::new(&y);
    b.ic(0, true, &[7, 8, 9], 200, Some(0xB));
    let want_b = b.truth(&d.path().join("b.rexic"));
    rex_ok(&push_args(&y, &l2));
    let b_crc = crc_of(&gen_file(&l2, 2, "rps"));
    assert_eq!(b_crc, crc_of(&gen_file(&y.join("rex"), 2, "rps")));
    // Run B's manifest of generation 2 is lost; run A pushes again.
    std::fs::remove_file(l2.join(manifest_name(2))).unwrap();
    let _ = rex(&push_args(&x, &l2));
    assert!(gen_file(&l2, 2, "rps").is_file(), "run B's g2.rps swept");
    assert_eq!(
        crc_of(&gen_file(&l2, 2, "rps")),
        b_crc,
        "run B's g2.rps overwritten"
    );
    // Run B's generation survives in both places: its data in L2, its copy
    // (manifest and data) in its own L1.
    let _ = want_b;
    assert!(y.join("rex").join(manifest_name(2)).is_file());
    assert_eq!(crc_of(&gen_file(&y.join("rex"), 2, "rps")), b_crc);
}

/// An unreadable pending file does not turn `--fallback` to another job's
/// chain: the L1 directory's run is told by its readable files.
#[test]
fn an_unreadable_pending_file_does_not_turn_fallback_to_another_job() {
    let d = tempfile::tempdir().unwrap();
    let (x, y, l2) = (d.path().join("x"), d.path().join("y"), d.path().join("l2"));
    let mut a = Hand::new(&x);
    a.ic(0, true, &[1, 2], 100, Some(0xA));
    a.ic(1, false, &[2], 101, Some(0xA));
    rex_ok(&push_args(&x, &l2));
    a.ic(2, false, &[1], 102, Some(0xA));
    let want = a.truth(&d.path().join("truth.rexic"));
    let bad = a.ic(3, false, &[2], 103, Some(0xA));
    let mut b = Hand::new(&y);
    b.ic(0, true, &[8, 9], 200, Some(0xB));
    rex_ok(&push_args(&y, &l2));
    flip_byte(&bad, 20); // the header: the file no longer reads
    restores(
        &l2,
        Some(&x),
        &["--fallback"],
        &d.path().join("r"),
        &want,
        "restore --l1 x --fallback",
    );
}

/// A generation that does not exist is a clear error, not a panic.
#[test]
fn restoring_a_generation_that_does_not_exist_is_a_clear_error() {
    let c = chain(49, 2, false);
    let (work, l1, l2) = c.copy();
    for l1opt in [None, Some(l1.as_path())] {
        let (out, _) = restore(&l2, l1opt, &["--generation", "99"], &work.path().join("r"));
        assert_eq!(out.status.code(), Some(3), "{}", show(&["restore"], &out));
        assert!(stderr(&out).contains("99"), "{}", show(&["restore"], &out));
    }
}

/// A job restarted in a fresh L1 whose FULL checkpoint is not pushed yet
/// verifies: its L1 needs no copy of the old run's chain.
#[test]
fn verify_accepts_a_fresh_restart_before_its_first_push() {
    let d = tempfile::tempdir().unwrap();
    let (x, y, l2) = (d.path().join("x"), d.path().join("y"), d.path().join("l2"));
    let mut a = Hand::new(&x);
    a.ic(0, true, &[1, 2], 100, Some(0xA));
    rex_ok(&push_args(&x, &l2));
    let mut b = Hand::new(&y);
    b.ic(0, true, &[3], 200, Some(0xB));
    rex_ok(&["verify", "--l2", s(&l2), "--l1", s(&y)]);
}

// ---------------------------------------------------------------------------
// Compressed chunks (container version 2)
// ---------------------------------------------------------------------------

/// A flipped bit anywhere in a compressed chunk of an RPS file or a Pointer
/// File is reported by `restore` with the file and the chunk (the chunk's
/// stored CRC catches it before zstd or the pointer decoder sees the
/// bytes), and by `verify` with the file and the chunk too (its whole-file
/// CRC finds the file first); never as a wrong page.
#[test]
fn a_flipped_bit_in_a_compressed_chunk_names_the_file_and_chunk() {
    use rexctl::format::chunked::{ChunkedFile, Codec, Kind};
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    // Enough pages for several 256 KiB chunks in both files.
    let mut w = workload("balanced", 6000, 71);
    take_until(&mut w, &l1, 3, &d.path().join("truth"));
    rex_ok(&push_args(&l1, &l2));
    let mut failures = Vec::new();
    let mut total = 0;
    for (ext, kind) in [("rps", Kind::Rps), ("pf", Kind::Pf)] {
        let path = gen_file(&l2, 1, ext);
        let f = ChunkedFile::open(&path, kind).unwrap();
        let n = f.chunk_count();
        assert!(n >= 2, "{ext}: {n} chunks");
        let chunks: Vec<_> = (0..n)
            .filter_map(|i| f.stored_chunk(i).map(|c| (i, c)))
            .collect();
        drop(f);
        assert!(
            chunks
                .iter()
                .any(|(_, (_, _, codec))| *codec == Codec::Zstd),
            "{ext}: no compressed chunk"
        );
        let good = std::fs::read(&path).unwrap();
        for &(i, (off, len, codec)) in &chunks {
            if codec != Codec::Zstd {
                continue;
            }
            for at in [off, off + u64::from(len) / 2, off + u64::from(len) - 1] {
                total += 1;
                let ctx = format!("{ext} chunk {i} ({codec:?}) byte {at}");
                let work = tempfile::tempdir().unwrap();
                let l2c = work.path().join("l2");
                copy_tree(&l2, &l2c);
                let p = gen_file(&l2c, 1, ext);
                let mut b = good.clone();
                b[at as usize] ^= 1 << (at % 8);
                std::fs::write(&p, &b).unwrap();
                let want = format!("chunk {i} (bytes {off}..{}", off + u64::from(len));
                case(&mut failures, || {
                    let (out, _) = restore(&l2c, None, &[], &work.path().join("r"));
                    assert_eq!(
                        out.status.code(),
                        Some(3),
                        "{ctx}: {}",
                        show(&["restore"], &out)
                    );
                    let err = stderr(&out);
                    assert!(err.contains(s(&p)) && err.contains(&want), "{ctx}: {err}");
                });
                // verify finds the file by its whole-file CRC, then names
                // the chunk as restore does.
                case(&mut failures, || {
                    let v = rex(&["verify", "--l2", s(&l2c)]);
                    assert_eq!(v.status.code(), Some(3), "{ctx}: verify");
                    let all = all_output(&v);
                    assert!(all.contains(s(&p)) && all.contains(&want), "{ctx}: {all}");
                });
            }
        }
    }
    assert!(total >= 6, "{total} cases");
    assert_no_failures(&failures, total);
}

// ---------------------------------------------------------------------------
// restore --seq S: the state at S exactly, or a refusal
// ---------------------------------------------------------------------------

/// `restore --seq S` (the seq every rank of a job restarts from) gives the
/// state at checkpoint S: the newest generation ending at or before S plus
/// the pending checkpoints up to S. A seq that was coalesced inside a
/// generation, or whose checkpoint left L1 with its push, is refused before
/// anything is written, never answered with the nearest other state.
#[test]
fn a_restore_of_seq_s_is_the_state_at_s_or_refused() {
    let t = tempfile::tempdir().unwrap();
    let (l1, l2, truth) = (
        t.path().join("l1"),
        t.path().join("l2"),
        t.path().join("truth"),
    );
    std::fs::create_dir_all(&l2).unwrap();
    let mut w = workload("balanced", 64, 7);
    let mut truths = Vec::new();
    // Generation 1 holds seq 0..=3, generation 2 seq 4..=5 (their IC files
    // leave L1 with the push); seq 6..=8 are pending in L1.
    for (last, push) in [(3, true), (5, true), (8, false)] {
        while truths.len() as u64 <= last {
            let seq = truths.len() as u64;
            truths.push(take_until(&mut w, &l1, seq, &truth));
        }
        if push {
            let o = rex(&["push-l2", "--l1", s(&l1), "--l2", s(&l2)]);
            assert!(o.status.success(), "{}", show(&["push-l2"], &o));
        }
    }
    for (seq, want) in truths.iter().enumerate() {
        for l2_only in [false, true] {
            let out = t.path().join(format!("seq-{seq}-{l2_only}.rexic"));
            let n = seq.to_string();
            let mut args = vec!["restore", "--l2", s(&l2), "--seq", &n, "-o", s(&out)];
            if !l2_only {
                args.extend(["--l1", s(&l1)]);
            }
            let o = rex(&args);
            let ctx = format!("seq {seq}, L2 only {l2_only}: {}", show(&args, &o));
            let restorable = match seq {
                3 | 5 => true,
                6..=8 => !l2_only,
                _ => false,
            };
            if restorable {
                assert!(o.status.success(), "{ctx}");
                assert!(
                    String::from_utf8_lossy(&o.stdout).contains(&format!("of seq {seq}")),
                    "{ctx}"
                );
                assert_image(&out, want, &ctx);
            } else {
                assert_eq!(o.status.code(), Some(3), "{ctx}");
                let err = stderr(&o);
                assert!(err.contains(&format!("checkpoint {seq}")), "{ctx}");
                assert!(!err.contains("panicked"), "{ctx}");
                assert!(!out.exists(), "{ctx}: an output was left");
                assert_eq!(
                    names_in(t.path())
                        .iter()
                        .filter(|n| n.contains(".tmp") || n.starts_with(".seq"))
                        .count(),
                    0,
                    "{ctx}: a temporary file was left"
                );
            }
        }
    }
    // --seq names one state: with --generation or --fallback it is a usage
    // error.
    for extra in [["--generation", "1"].as_slice(), ["--fallback"].as_slice()] {
        let out = t.path().join("x.rexic");
        let mut args = vec!["restore", "--l2", s(&l2), "--seq", "3", "-o", s(&out)];
        args.extend_from_slice(extra);
        let o = rex(&args);
        assert_eq!(o.status.code(), Some(2), "{}", show(&args, &o));
    }
}

/// `restore --l1 A --l2 B`, A another job's L1 directory with no pending
/// checkpoint (right after its push, only its copy of the chain): refused
/// with exit 3 naming both, nothing written. It restored B's newest state
/// with exit 0 and a warning per generation (helper-66). `--l2-only`
/// restores B's state, and each job's own pair restores its own.
#[test]
fn an_l1_directory_of_another_job_is_refused_with_nothing_pending() {
    let d = tempfile::tempdir().unwrap();
    let p = |n: &str| d.path().join(n);
    for (job, seed) in [("a", "3"), ("b", "4")] {
        let (l1, l2, truth) = (p(job), p(&format!("{job}2")), p(&format!("{job}.rexic")));
        crate::util::ok(&[
            "gen",
            "--count",
            "5",
            "--seed",
            seed,
            "--pages",
            "200",
            s(&l1),
            "--truth",
            s(&truth),
        ]);
        std::fs::create_dir_all(&l2).unwrap();
        crate::util::ok(&["push-l2", "--l1", s(&l1), "--l2", s(&l2)]);
    }
    let (a, b2, out) = (p("a"), p("b2"), p("x.rexic"));
    let o = crate::util::run(&["restore", "--l1", s(&a), "--l2", s(&b2), "-o", s(&out)]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&["restore"], &o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("share no generation") && err.contains("--l2-only"),
        "{err}"
    );
    assert!(!out.exists());
    let args = [
        "restore",
        "--l1",
        s(&a),
        "--l2",
        s(&b2),
        "--l2-only",
        "-o",
        s(&out),
    ];
    crate::util::ok(&args);
    crate::util::assert_image(&out, &p("b.rexic"), "--l2-only");
    for job in ["a", "b"] {
        let out = p(&format!("{job}-own.rexic"));
        let (l1, l2) = (p(job), p(&format!("{job}2")));
        crate::util::ok(&["restore", "--l1", s(&l1), "--l2", s(&l2), "-o", s(&out)]);
        crate::util::assert_image(&out, &p(&format!("{job}.rexic")), job);
    }
}

/// A restore for a named rank (--rank, REX_RANK, a launcher's variable)
/// refuses a chain another rank pushed: two ranks given one L2 directory,
/// rank 1's restore gave rank 0's image with exit 0 (helper-72). With no
/// rank named (a lost rank restored from a login node), the chain restores.
#[test]
fn a_named_rank_never_restores_another_rank_s_chain() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2, truth) = (d.path().join("l1"), d.path().join("l2"), d.path().join("t"));
    let mut w = workload("balanced", 64, 12);
    let image = take_until(&mut w, &l1, 2, &truth);
    rex_ok(&["push-l2", "--l1", s(&l1), "--l2", s(&l2), "--rank", "0"]);
    let out = d.path().join("r.rexic");
    let restore = |env: &[(&str, &str)], extra: &[&str]| {
        let _ = std::fs::remove_file(&out);
        let mut c: Command = rexctl();
        c.env_remove("REX_FAILPOINT");
        for v in [
            "REX_RANK",
            "SLURM_PROCID",
            "PMIX_RANK",
            "PMI_RANK",
            "OMPI_COMM_WORLD_RANK",
            "FLUX_TASK_RANK",
        ] {
            c.env_remove(v);
        }
        c.envs(env.iter().copied());
        c.args(["restore", "--l2-only", "--l2", s(&l2), "--out", s(&out)])
            .args(extra);
        c.output().unwrap()
    };
    for (env, extra) in [
        (&[][..], &["--rank", "1"][..]),
        (&[("SLURM_PROCID", "1")][..], &[][..]),
        (&[("REX_RANK", "1")][..], &[][..]),
    ] {
        let o = restore(env, extra);
        assert_eq!(
            o.status.code(),
            Some(3),
            "{env:?} {extra:?}: {}",
            stderr(&o)
        );
        assert!(
            stderr(&o).contains("pushed by rank 0, this is rank 1"),
            "{}",
            stderr(&o)
        );
        assert!(!out.exists(), "an image was left");
    }
    for (env, extra) in [
        (&[][..], &[][..]),
        (&[][..], &["--rank", "0"][..]),
        (&[("OMPI_COMM_WORLD_RANK", "0")][..], &[][..]),
    ] {
        let o = restore(env, extra);
        assert!(o.status.success(), "{env:?} {extra:?}: {}", stderr(&o));
        assert_image(&out, &image, "rank 0's own restore");
    }
}

/// A manifest under a name of the listing form that is not its
/// generation's own (`g000000002.manifest`, digits beyond 2^64 - 1) is an
/// invalid manifest of that generation, not a name to ignore: renamed so,
/// the newest generation's manifest let a restore give the generation
/// before it with exit 0, and verify said ok (helper-74). Beside the
/// generation's own manifest, it makes the generation ambiguous: refused
/// too, `--fallback` takes the valid one.
#[test]
fn a_manifest_under_a_stray_name_is_never_ignored() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2, truth) = (d.path().join("l1"), d.path().join("l2"), d.path().join("t"));
    let mut w = workload("balanced", 64, 13);
    let first = take_until(&mut w, &l1, 1, &truth);
    rex_ok(&["push-l2", "--l1", s(&l1), "--l2", s(&l2)]);
    let second = take_until(&mut w, &l1, 3, &truth);
    rex_ok(&["push-l2", "--l1", s(&l1), "--l2", s(&l2)]);
    let out = d.path().join("r.rexic");
    let restore = |extra: &[&str]| {
        let _ = std::fs::remove_file(&out);
        rex(&[
            &["restore", "--l2-only", "--l2", s(&l2), "--out", s(&out)][..],
            extra,
        ]
        .concat())
    };
    let own = l2.join(manifest_name(2));
    for (stray, keep_own, fallback_to) in [
        ("g000000002.manifest", false, &first),
        ("g99999999999999999999.manifest", true, &second),
        ("g000000002.manifest", true, &second),
    ] {
        let ctx = format!("{stray} (own kept: {keep_own})");
        std::fs::copy(&own, l2.join(stray)).unwrap();
        if !keep_own {
            std::fs::rename(&own, d.path().join("own")).unwrap();
        }
        let o = restore(&[]);
        assert_eq!(o.status.code(), Some(3), "{ctx}: {}", stderr(&o));
        assert!(stderr(&o).contains(stray), "{ctx}: {}", stderr(&o));
        assert!(!out.exists(), "{ctx}");
        let v = rex(&["verify", "--l2", s(&l2)]);
        assert_eq!(v.status.code(), Some(3), "{ctx}: verify {}", stderr(&v));
        let o = restore(&["--fallback"]);
        assert!(o.status.success(), "{ctx}: {}", stderr(&o));
        assert_image(&out, fallback_to, &ctx);
        std::fs::remove_file(l2.join(stray)).unwrap();
        if !keep_own {
            std::fs::rename(d.path().join("own"), &own).unwrap();
        }
        let o = restore(&[]);
        assert!(o.status.success(), "{ctx}: {}", stderr(&o));
        assert_image(&out, &second, &ctx);
    }
}

/// A store that, when the restore first opens a data file, does what a
/// push that prunes does meanwhile: publishes a newer chain (`newer`'s
/// files, manifest last) and deletes the one being read (manifest first).
struct PrunedWhileRead {
    inner: DirStore,
    newer: PathBuf,
    fired: std::sync::atomic::AtomicBool,
}

impl rexctl::store::Store for PrunedWhileRead {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn list(&self) -> rexctl::Result<Vec<rexctl::store::ObjectInfo>> {
        self.inner.list()
    }
    fn replace_bytes(&self, name: &str, bytes: &[u8]) -> rexctl::Result<()> {
        self.inner.replace_bytes(name, bytes)
    }
    fn put_bytes(&self, name: &str, bytes: &[u8]) -> rexctl::Result<()> {
        self.inner.put_bytes(name, bytes)
    }
    fn put_stream(
        &self,
        name: &str,
        head_len: u64,
        pieces: &mut dyn Iterator<Item = rexctl::durable::Piece>,
        progress: &dyn rexctl::store::Progress,
    ) -> rexctl::Result<(u64, u32)> {
        self.inner.put_stream(name, head_len, pieces, progress)
    }
    fn read(&self, name: &str) -> rexctl::Result<Vec<u8>> {
        self.inner.read(name)
    }
    fn open_local(&self, name: &str) -> rexctl::Result<PathBuf> {
        if !name.ends_with(".manifest")
            && !self.fired.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            let root = self.inner.root().to_path_buf();
            let old: Vec<String> = names_in(&root);
            let mut new = names_in(&self.newer);
            new.sort_by_key(|n| n.ends_with(".manifest"));
            for n in &new {
                std::fs::copy(self.newer.join(n), root.join(n)).unwrap();
            }
            let mut old = old;
            old.sort_by_key(|n| !n.ends_with(".manifest"));
            for n in old.iter().filter(|n| !new.contains(n)) {
                std::fs::remove_file(root.join(n)).unwrap();
            }
        }
        self.inner.open_local(name)
    }
    fn delete(&self, name: &str) -> rexctl::Result<()> {
        self.inner.delete(name)
    }
}

/// A restore from L2 alone while a push prunes the chain it reads (its
/// complete coalescence made a newer one): it starts again on the new
/// listing and gives the newer state (helper-73: about one restore in 250
/// beside such pushes exited 1 or 3, "no valid generation to restore").
/// A verify does the same.
#[test]
fn a_restore_or_verify_from_l2_alone_beside_a_pruning_push_takes_the_newer_state() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2, newer, truth) = (
        d.path().join("l1"),
        d.path().join("l2"),
        d.path().join("newer"),
        d.path().join("t"),
    );
    let mut w = workload("balanced", 256, 14);
    let push = [
        "push-l2",
        "-q",
        "--l1",
        s(&l1),
        "--l2",
        s(&l2),
        "--keep-chains-l2",
        "1",
        "--max-chain-length",
        "1",
    ];
    take_until(&mut w, &l1, 1, &truth);
    rex_ok(&push);
    let older = d.path().join("older");
    copy_tree(&l2, &older);
    let want = take_until(&mut w, &l1, 3, &truth);
    rex_ok(&push);
    copy_tree(&l2, &newer);
    // L2 as it was before the push, read through a store that makes the
    // push (the newer chain, the older one pruned) at the first data file.
    let before_the_push = || {
        std::fs::remove_dir_all(&l2).unwrap();
        copy_tree(&older, &l2);
        PrunedWhileRead {
            inner: DirStore::open(&l2).unwrap(),
            newer: newer.clone(),
            fired: Default::default(),
        }
    };
    let store = before_the_push();
    let out = d.path().join("r.rexic");
    let r = rexctl::l2::restore::restore_l2(&store, &Default::default(), &out);
    assert!(
        store.fired.load(std::sync::atomic::Ordering::SeqCst),
        "the push was not simulated"
    );
    let r = r.unwrap_or_else(|e| panic!("restore beside the prune: {}", e.report()));
    assert!(r.fell_back.is_none(), "{:?}", r.fell_back);
    assert_image(&out, &want, "restore beside a pruning push");
    // `verify` beside the same prune: the pruned generation is not
    // damage, and the chain that replaced it is checked. It called the
    // pruned generation BAD (exit 3): a false alarm for a cron job's check
    // in 1 run of 4 beside pushes on S3 (helper-84).
    let store = before_the_push();
    let mut report = rexctl::l2::restore::VerifyReport::default();
    rexctl::l2::restore::verify_store(&store, "L2", &mut report).unwrap();
    assert!(store.fired.load(std::sync::atomic::Ordering::SeqCst));
    assert!(report.ok(), "{report:?}");
    let newest = ChainIndex::load(&DirStore::open(&newer).unwrap())
        .unwrap()
        .newest()
        .unwrap()
        .generation;
    let checked: Vec<u64> = report.generations.iter().map(|g| g.generation).collect();
    assert_eq!(checked, [newest], "{report:?}");
    // A file lost under a manifest that stays is damage all the same.
    let lost = names_in(&l2)
        .into_iter()
        .find(|n| n.ends_with(".pf"))
        .unwrap();
    std::fs::remove_file(l2.join(lost)).unwrap();
    let mut report = rexctl::l2::restore::VerifyReport::default();
    rexctl::l2::restore::verify_store(&DirStore::open(&l2).unwrap(), "L2", &mut report).unwrap();
    assert!(!report.ok(), "{report:?}");
}

/// `--fallback` passes over damaged or missing data only: a pending
/// checkpoint that cannot be read (no permission) may be sound, and the
/// state after it the newest, so the restore fails (exit 1), with or
/// without `--fallback` (helper-72: it restored the state before it, exit
/// 0). Run as nobody (root reads every file).
#[test]
fn fallback_never_passes_over_a_checkpoint_it_could_not_read() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let d = tempfile::tempdir().unwrap();
    let (l1, l2, truth) = (d.path().join("l1"), d.path().join("l2"), d.path().join("t"));
    let mut w = workload("balanced", 64, 15);
    take_until(&mut w, &l1, 3, &truth);
    rex_ok(&["push-l2", "--l1", s(&l1), "--l2", s(&l2)]);
    let newest = take_until(&mut w, &l1, 5, &truth);
    fn open_up(p: &Path) {
        let mode = if p.is_dir() { 0o777 } else { 0o666 };
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        if p.is_dir() {
            for e in std::fs::read_dir(p).unwrap() {
                open_up(&e.unwrap().path());
            }
        }
    }
    open_up(d.path());
    let out = d.path().join("r.rexic");
    let restore = |extra: &[&str]| {
        let _ = std::fs::remove_file(&out);
        let mut c = rexctl();
        c.env_remove("REX_FAILPOINT")
            .args(["restore", "--l1", s(&l1), "--l2", s(&l2), "--out", s(&out)])
            .args(extra);
        if root {
            c.uid(65534).gid(65534);
        }
        c.output().unwrap()
    };
    let victim = l1.join(ic_file_name(4));
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o000)).unwrap();
    for extra in [&[][..], &["--fallback"][..]] {
        let o = restore(extra);
        assert_eq!(o.status.code(), Some(1), "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("Permission denied"), "{}", stderr(&o));
        assert!(!out.exists(), "{extra:?}: an image was written");
    }
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = restore(&[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_image(&out, &newest, "readable again");
}

/// A node whose push was killed between its L1-copy manifest and its L2
/// manifest comes back after another node pushed a full generation of L2's
/// state (`push-l2 --full`, nothing pending there): its restore from L1 and
/// L2 gives the newest state (the full generation and its own pending
/// checkpoints), and `verify --repair` then verify say ok (helper-76: the
/// first version of the stale check refused the restore and the verify
/// after the repair, exit 3; the generation only L1's copy holds was never
/// published).
#[test]
fn a_push_killed_before_its_l2_manifest_is_no_stale_state_for_a_later_full_one() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2, truth) = (d.path().join("l1"), d.path().join("l2"), d.path().join("t"));
    let mut w = workload("balanced", 64, 16);
    take_until(&mut w, &l1, 2, &truth);
    rex_ok(&["push-l2", "--l1", s(&l1), "--l2", s(&l2)]);
    let want = take_until(&mut w, &l1, 5, &truth);
    let saved = d.path().join("saved");
    copy_tree(&l1, &saved.join("l1"));
    copy_tree(&l2, &saved.join("l2"));
    // The failpoint at which generation 2's manifest is in L1's copy and
    // not in L2.
    let (l1m, l2m) = (
        l1.join("rex").join(manifest_name(2)),
        l2.join(manifest_name(2)),
    );
    let mut found = false;
    for n in 1..200 {
        for p in [&l1, &l2] {
            let _ = std::fs::remove_dir_all(p);
        }
        copy_tree(&saved.join("l1"), &l1);
        copy_tree(&saved.join("l2"), &l2);
        let out = rexctl()
            .args(["push-l2", "--l1", s(&l1), "--l2", s(&l2)])
            .env("REX_FAILPOINT", n.to_string())
            .output()
            .unwrap();
        if out.status.success() {
            break;
        }
        if l1m.exists() && !l2m.exists() {
            found = true;
            break;
        }
    }
    assert!(found, "no failpoint between the two manifests");
    // The other node: a fresh L1, a full generation of L2's state.
    let other = d.path().join("other");
    std::fs::create_dir(&other).unwrap();
    rex_ok(&["push-l2", "--l1", s(&other), "--l2", s(&l2), "--full"]);
    let out = d.path().join("r.rexic");
    rex_ok(&["restore", "--l1", s(&l1), "--l2", s(&l2), "-o", s(&out)]);
    assert_image(&out, &want, "restore from L1 and L2");
    // L1's copy lacks L2's newest chain (verify says so); the repair
    // copies it, and then everything checks.
    rex_ok(&["verify", "--repair", "--l1", s(&l1), "--l2", s(&l2)]);
    rex_ok(&["verify", "--l1", s(&l1), "--l2", s(&l2)]);
    rex_ok(&[
        "restore",
        "--l1",
        s(&l1),
        "--l2",
        s(&l2),
        "-o",
        s(&out),
        "-f",
    ]);
    assert_image(&out, &want, "restore after the repair");
}

// ---------------------------------------------------------------------------
// Another job's chain inside this job's L2, or beside it (helper-87)
// ---------------------------------------------------------------------------

/// A job of three generations (seq 1, 3, 5) pushed at times from `t0`
/// seconds, then, with `full_at`, a FULL generation of seq `full_at` alone
/// (`--full`, every older chain pruned from L2 and L1's copy): (L1, L2,
/// the true image of its newest seq).
fn job_at(root: &Path, seed: u64, t0: u64, full_at: Option<u64>) -> (PathBuf, PathBuf, PathBuf) {
    let (l1, l2, truth) = (root.join("l1"), root.join("l2"), root.join("truth"));
    let mut w = workload("balanced", 48, seed);
    let mut last = PathBuf::new();
    for seq in [1, 3, 5] {
        last = take_until_at(&mut w, &l1, seq, &truth, t0 * 1_000_000_000);
        rex_ok(&push_args(&l1, &l2));
    }
    if let Some(seq) = full_at {
        last = take_until_at(&mut w, &l1, seq, &truth, t0 * 1_000_000_000);
        let mut args = push_args(&l1, &l2);
        args.extend(["--full", "--keep-chains-l2", "1"]);
        rex_ok(&args);
    }
    (l1, l2, last)
}

/// Another job's generations where this job's are: an older job's FULL
/// generation copied into this job's L2 under the next number, an L2
/// holding only an older job's chain beside this job's L1 copy, and this
/// job's L1 copy replaced by a newer job's, pruned to a FULL generation
/// numbered above this job's (helper-87), another job's generations above a
/// gap in the numbers or above its run's first, and L1's copy replaced
/// beside leftover files of an interrupted push of the same names
/// (helper-90). Each was restored as this job's newest state with exit 0,
/// and in the second a push copied the other chain over this job's L1 copy
/// and pruned that. Now a restore of the newest
/// state stops (exit 3), `verify` and `status` say so, a push changes
/// nothing, and
/// `--fallback` or `--l2-only` restore this job's own newest state.
#[test]
fn another_job_s_chain_in_or_beside_this_one_is_never_its_newest_state() {
    let d = tempfile::tempdir().unwrap();
    // This job, at 1000 s; an older job at 0 s (its FULL generation 4 holds
    // seq 6, at 6 s); a newer one at 5000 s.
    let (l1, l2, want) = job_at(&d.path().join("a"), 1, 1000, None);
    let (_, older_l2, _) = job_at(&d.path().join("b"), 2, 0, Some(6));
    let (newer_l1, _, _) = job_at(&d.path().join("c"), 3, 5000, Some(6));
    assert_eq!(
        generations(&older_l2).len(),
        1,
        "the older job's L2 is pruned to its FULL"
    );
    let mut failures = Vec::new();
    let fresh = |name: &str| {
        let w = d.path().join(name);
        copy_tree(&l1, &w.join("l1"));
        copy_tree(&l2, &w.join("l2"));
        (w.join("l1"), w.join("l2"), w)
    };
    let older_state = "an older state under a newer number";
    let refused = |out: &Output, what: &str, needle: &str| {
        assert_eq!(out.status.code(), Some(3), "{what}\n{}", all_output(out));
        assert!(
            stderr(out).contains(needle),
            "{what}: does not say why\n{}",
            all_output(out)
        );
    };

    // The older job's FULL generation copied into this job's L2.
    case(&mut failures, || {
        let (l1, l2, w) = fresh("inside");
        for kind in ["manifest", "rps", "pf", "ptab"] {
            let name = format!("g{:08}.{kind}", 4);
            std::fs::copy(older_l2.join(&name), l2.join(&name)).unwrap();
        }
        let (out, _) = restore(&l2, None, &["--l2-only"], &w.join("r1"));
        refused(&out, "restore --l2-only", older_state);
        let (out, _) = restore(&l2, Some(&l1), &[], &w.join("r2"));
        refused(&out, "restore --l1", older_state);
        let (out, image) = restore(&l2, None, &["--l2-only", "--fallback"], &w.join("r3"));
        assert!(out.status.success(), "{}", all_output(&out));
        assert_image(&image, &want, "restore --l2-only --fallback");
        refused(
            &rex(&["verify", "--l2", s(&l2)]),
            "verify --l2",
            older_state,
        );
        refused(
            &rex(&["status", "--l2", s(&l2), "--l1", s(&l1)]),
            "status",
            older_state,
        );
        refused(&rex(&push_args(&l1, &l2)), "push-l2", older_state);
        assert_eq!(
            generations(&l1.join("rex")).len(),
            3,
            "push: L1's copy changed"
        );
    });

    // This job's L2 location holding only the older job's chain.
    case(&mut failures, || {
        let (l1, l2, w) = fresh("beside");
        std::fs::remove_dir_all(&l2).unwrap();
        copy_tree(&older_l2, &l2);
        let (out, _) = restore(&l2, Some(&l1), &[], &w.join("r1"));
        refused(&out, "restore --l1", older_state);
        let (out, image) = restore(&l2, Some(&l1), &["--fallback"], &w.join("r2"));
        assert!(out.status.success(), "{}", all_output(&out));
        assert_image(&image, &want, "restore --l1 --fallback");
        refused(
            &rex(&["verify", "--l2", s(&l2), "--l1", s(&l1)]),
            "verify --l1",
            older_state,
        );
        refused(
            &rex(&["status", "--l2", s(&l2), "--l1", s(&l1)]),
            "status",
            older_state,
        );
        let before = generations(&l1.join("rex"));
        refused(&rex(&push_args(&l1, &l2)), "push-l2", older_state);
        assert_eq!(
            generations(&l1.join("rex")),
            before,
            "push: L1's copy changed"
        );
    });

    // This job's L1 copy replaced by the newer job's, pruned to its FULL
    // generation 4.
    case(&mut failures, || {
        let (l1, l2, w) = fresh("leftover");
        std::fs::remove_dir_all(l1.join("rex")).unwrap();
        copy_tree(&newer_l1.join("rex"), &l1.join("rex"));
        let (out, _) = restore(&l2, Some(&l1), &[], &w.join("r1"));
        refused(&out, "restore --l1", "shares no generation and no file");
        let (out, image) = restore(&l2, Some(&l1), &["--l2-only"], &w.join("r2"));
        assert!(out.status.success(), "{}", all_output(&out));
        assert_image(&image, &want, "restore --l2-only");
        refused(
            &rex(&push_args(&l1, &l2)),
            "push-l2",
            "shares no generation and no file",
        );
        let st = rex(&["status", "--l2", s(&l2), "--l1", s(&l1)]);
        refused(&st, "status", "shares no generation and no file");
        // Nor are its generations "in L1's copy only", for the next push
        // to upload (it refuses them: helper-97).
        assert!(
            !String::from_utf8_lossy(&st.stdout).contains("NOT IN L2"),
            "{}",
            all_output(&st)
        );
    });

    // An older job's FULL generations 4 and 5 (of one run): 5 alone copied
    // into this job's L2 above a gap, and both (helper-90: only a
    // generation numbered just above one of another run was compared, so
    // the first was never compared, and the second once its run's first
    // was set aside: each restored as this job's newest state, exit 0).
    let (_, e_l2, _) = pushed_job(
        &d.path().join("e"),
        4,
        0,
        &[(1, false), (3, false), (5, false), (6, true), (8, true)],
    );
    for (name, gens) in [("gap", &[5][..]), ("run", &[4, 5][..])] {
        case(&mut failures, || {
            let (l1, l2, w) = fresh(name);
            for g in gens {
                for kind in ["manifest", "rps", "pf", "ptab"] {
                    let file = format!("g{g:08}.{kind}");
                    std::fs::copy(e_l2.join(&file), l2.join(&file)).unwrap();
                }
            }
            let (out, _) = restore(&l2, None, &["--l2-only"], &w.join("r1"));
            refused(&out, &format!("{name}: restore --l2-only"), older_state);
            let (out, _) = restore(&l2, Some(&l1), &[], &w.join("r2"));
            refused(&out, &format!("{name}: restore --l1"), older_state);
            let (out, image) = restore(&l2, Some(&l1), &["--fallback"], &w.join("r3"));
            assert!(out.status.success(), "{name}: {}", all_output(&out));
            assert_image(&image, &want, &format!("{name}: restore --fallback"));
            refused(
                &rex(&["verify", "--l2", s(&l2)]),
                &format!("{name}: verify --l2"),
                older_state,
            );
            refused(
                &rex(&push_args(&l1, &l2)),
                &format!("{name}: push-l2"),
                older_state,
            );
            assert_eq!(
                generations(&l1.join("rex")).len(),
                3,
                "{name}: push: L1's copy changed"
            );
        });
    }

    // This job's push of generation 4 interrupted after some of its data
    // files reached L2, then its L1 copy replaced by the newer job's, pruned
    // to its FULL generation 4: file names alike are not files shared
    // (helper-90: L2's leftover files of the names of L1's copy's made it
    // this job's, and a restore gave the newer job's state, exit 0).
    case(&mut failures, || {
        let root = d.path().join("f");
        let (l1, l2, truth) = (root.join("l1"), root.join("l2"), root.join("truth"));
        let mut a = workload("balanced", 48, 5);
        let mut want = PathBuf::new();
        for seq in [1, 3, 5] {
            want = take_until_at(&mut a, &l1, seq, &truth, 1000 * 1_000_000_000);
            rex_ok(&push_args(&l1, &l2));
        }
        take_until_at(&mut a, &l1, 7, &truth, 1000 * 1_000_000_000);
        let w = (1..300)
            .map(|n| {
                let w = root.join(format!("fail-{n}"));
                copy_tree(&l1, &w.join("l1"));
                copy_tree(&l2, &w.join("l2"));
                let (wl1, wl2) = (w.join("l1"), w.join("l2"));
                let out = rexctl()
                    .args(push_args(&wl1, &wl2))
                    .env("REX_FAILPOINT", n.to_string())
                    .output()
                    .unwrap();
                assert!(!out.status.success(), "failpoint {n} reached no operation");
                w
            })
            .find(|w| {
                gen_file(&w.join("l2"), 4, "ptab").exists()
                    && !gen_file(&w.join("l2"), 4, "manifest").exists()
            })
            .expect("an interrupted push leaves generation 4's files without its manifest");
        let (l1, l2) = (w.join("l1"), w.join("l2"));
        std::fs::remove_dir_all(l1.join("rex")).unwrap();
        copy_tree(&newer_l1.join("rex"), &l1.join("rex"));
        let (out, _) = restore(&l2, Some(&l1), &[], &w.join("r1"));
        refused(&out, "restore --l1", "shares no generation and no file");
        refused(
            &rex(&push_args(&l1, &l2)),
            "push-l2",
            "shares no generation and no file",
        );
        let (out, image) = restore(&l2, Some(&l1), &["--l2-only"], &w.join("r2"));
        assert!(out.status.success(), "{}", all_output(&out));
        assert_image(&image, &want, "restore --l2-only");
    });

    // Another job's newer generations copied over two of this job's, below
    // this job's later FULL generation: those two are the intruders, not
    // this job's run, which comes back above them (helper-91: this job's
    // newest generations were set aside, and a `--fallback` restore gave
    // the other job's state).
    case(&mut failures, || {
        let root = d.path().join("between");
        let (l1, l2, images) = pushed_job(
            &root,
            6,
            1000,
            &[
                (1, false),
                (3, false),
                (5, false),
                (7, false),
                (9, false),
                (11, true),
                (13, false),
            ],
        );
        let (older, want) = (&images[2], &images[6]);
        let (_, f_l2, _) = pushed_job(
            &root.join("f"),
            7,
            3000,
            &[(1, false), (3, false), (5, false), (7, true), (9, false)],
        );
        for g in [4, 5] {
            for kind in ["manifest", "rps", "pf", "ptab"] {
                std::fs::copy(gen_file(&f_l2, g, kind), gen_file(&l2, g, kind)).unwrap();
            }
        }
        // Its newest state, a refusal (it is: its FULL generation 6 is
        // older than the other job's below it), or with --fallback its own
        // older state (generation 3's, below the other job's); never the
        // other job's.
        for (name, l1_arg, extra) in [
            ("r1", None, &["--l2-only", "--fallback"][..]),
            ("r4", None, &["--l2-only"][..]),
            ("r2", Some(l1.as_path()), &[][..]),
            ("r3", Some(l1.as_path()), &["--fallback"][..]),
        ] {
            let (out, image) = restore(&l2, l1_arg, extra, &root.join(name));
            if out.status.success() && !same_image(&image, older) {
                assert_image(&image, want, &format!("between {extra:?}"));
            }
        }
    });

    // Another job's Δ generation and the FULL one above it copied in above
    // this job's newest, and the same FULL one into a job whose retention
    // left a gap below, which the other job's first generation fills
    // (helper-92: its Δ, taken as the generation below, made its FULL one
    // compared with its own run; a run found in order below was not
    // compared again).
    let (_, e2_l2, _) = pushed_job(
        &d.path().join("e2"),
        8,
        0,
        &[(1, false), (3, false), (5, false), (7, false), (9, true)],
    );
    let kinds: Vec<GenKind> = generations(&e2_l2).iter().map(|g| g.2).collect();
    assert_eq!(
        kinds[3..],
        [GenKind::Delta, GenKind::Full],
        "the other job's generations 4 and 5"
    );
    case(&mut failures, || {
        let (l1, l2, w) = fresh("delta");
        for g in [4, 5] {
            for kind in ["manifest", "rps", "pf", "ptab"] {
                std::fs::copy(gen_file(&e2_l2, g, kind), gen_file(&l2, g, kind)).unwrap();
            }
        }
        let (out, _) = restore(&l2, None, &["--l2-only"], &w.join("r1"));
        refused(&out, "delta: restore --l2-only", older_state);
        let (out, _) = restore(&l2, Some(&l1), &[], &w.join("r2"));
        refused(&out, "delta: restore --l1", older_state);
    });
    case(&mut failures, || {
        let root = d.path().join("gap-below");
        let (l1, l2, truth) = (root.join("l1"), root.join("l2"), root.join("truth"));
        let mut g = workload("balanced", 48, 9);
        for (seq, extra) in [
            (1, &[][..]),
            (3, &["--full", "--keep-chains-l2", "1"][..]),
            (6, &[][..]),
        ] {
            take_until_at(&mut g, &l1, seq, &truth, 1000 * 1_000_000_000);
            let mut args = push_args(&l1, &l2);
            args.extend_from_slice(extra);
            rex_ok(&args);
        }
        assert!(
            !gen_file(&l2, 1, "manifest").exists(),
            "retention kept generation 1"
        );
        for g in [1, 5] {
            for kind in ["manifest", "rps", "pf", "ptab"] {
                std::fs::copy(gen_file(&e2_l2, g, kind), gen_file(&l2, g, kind)).unwrap();
            }
        }
        let (out, _) = restore(&l2, None, &["--l2-only"], &root.join("r1"));
        refused(&out, "gap-below: restore --l2-only", older_state);
        refused(
            &rex(&["verify", "--l2", s(&l2)]),
            "gap-below: verify --l2",
            older_state,
        );
    });
    assert_no_failures(&failures, 9);
}

/// A job of workload seed `seed` in `root` (`l1`, `l2`, `truth`), its
/// checkpoints taken at `t0` + seq seconds and pushed at each `(seq,
/// full)` of `pushes` (`--full` when `full`): its L1 and L2 directories,
/// and the true image at each push.
fn pushed_job(
    root: &Path,
    seed: u64,
    t0: u64,
    pushes: &[(u64, bool)],
) -> (PathBuf, PathBuf, Vec<PathBuf>) {
    let (l1, l2, truth) = (root.join("l1"), root.join("l2"), root.join("truth"));
    let mut w = workload("balanced", 48, seed);
    let mut images = Vec::new();
    for &(seq, full) in pushes {
        images.push(take_until_at(&mut w, &l1, seq, &truth, t0 * 1_000_000_000));
        let mut args = push_args(&l1, &l2);
        if full {
            args.push("--full");
        }
        rex_ok(&args);
    }
    (l1, l2, images)
}

/// Restores from L1 plus L2 and from L2 alone give `want`, and `verify`
/// and `status` pass: every command takes the job's chain as its own.
fn every_command_takes_it(l1: &Path, l2: &Path, work: &Path, want: &Path, name: &str) {
    for (r, l1_arg, extra) in [("r1", Some(l1), &[][..]), ("r2", None, &["--l2-only"][..])] {
        let (out, image) = restore(l2, l1_arg, extra, &work.join(r));
        assert!(out.status.success(), "{name}: {}", all_output(&out));
        assert_image(&image, want, name);
    }
    for args in [
        vec!["verify", "--l2", s(l2), "--l1", s(l1)],
        vec!["status", "--l2", s(l2), "--l1", s(l1)],
    ] {
        let out = rex(&args);
        assert!(out.status.success(), "{name}: {}", show(&args, &out));
    }
}

/// Generations out of order in time with nothing foreign among them, as a
/// job's own pushes make them: a run continued on a node whose clock is
/// behind the first node's, then a new run; and a clock stepped back within
/// a run, after another run, or within a new run's first batch. Every
/// command takes them as the job's (helper-88: comparing each generation
/// with every one below it refused them for ever, push, restore and
/// `--generation` alike; helper-89: so did comparing a new run's newest
/// checkpoint instead of its first).
#[test]
fn clocks_that_differ_between_nodes_or_step_back_are_not_another_job() {
    let d = tempfile::tempdir().unwrap();
    for (name, a_times, b_times) in [
        // Run A at 120 s, then continued at 0 s; run B at 10 s.
        ("nodes", [120, 0], [10, 10]),
        // Run A at 500 s; run B at 1000 s, then stepped back to 0 s.
        ("step", [500, 500], [1000, 0]),
    ] {
        let root = d.path().join(name);
        let (l1, l2, truth) = (root.join("l1"), root.join("l2"), root.join("truth"));
        let mut a = workload("balanced", 48, 1);
        for (seq, t0) in [(2, a_times[0]), (4, a_times[1])] {
            take_until_at(&mut a, &l1, seq, &truth, t0 * 1_000_000_000);
            rex_ok(&push_args(&l1, &l2));
        }
        let mut b = workload("balanced", 48, 2);
        let mut want = PathBuf::new();
        for (seq, t0) in [(2, b_times[0]), (4, b_times[1])] {
            want = take_until_at(&mut b, &l1, seq, &truth, t0 * 1_000_000_000);
            rex_ok(&push_args(&l1, &l2));
        }
        assert_eq!(generations(&l2).len(), 4, "{name}: the pushes");
        every_command_takes_it(&l1, &l2, &root, &want, name);
        take_until_at(&mut b, &l1, 6, &truth, b_times[1] * 1_000_000_000);
        rex_ok(&push_args(&l1, &l2));
    }
    // Run A at 500 s; run B's first batch from 1000 s, its clock stepped
    // back to 0 s after its FULL checkpoint: the push publishes it, so
    // every command takes it (helper-89: judged by its newest checkpoint,
    // the generation was refused by every command, push included, for
    // ever).
    let root = d.path().join("within");
    let (l1, l2, truth) = (root.join("l1"), root.join("l2"), root.join("truth"));
    let mut a = workload("balanced", 48, 1);
    take_until_at(&mut a, &l1, 4, &truth, 500 * 1_000_000_000);
    rex_ok(&push_args(&l1, &l2));
    let mut b = workload("balanced", 48, 2);
    take_until_at(&mut b, &l1, 1, &truth, 1000 * 1_000_000_000);
    let want = take_until_at(&mut b, &l1, 3, &truth, 0);
    rex_ok(&push_args(&l1, &l2));
    assert_eq!(generations(&l2).len(), 2, "within: the pushes");
    every_command_takes_it(&l1, &l2, &root, &want, "within");
    take_until_at(&mut b, &l1, 5, &truth, 0);
    rex_ok(&push_args(&l1, &l2));

    // Run A at 1000 s; one batch: run Y's FULL checkpoint at 1003 s, its
    // clock stepped back, Y's incremental at 10 s, then run Z's FULL at
    // 20 s. The push takes it (each FULL newer than the checkpoint before
    // it), so every command takes it (helper-91: Z's generation was judged
    // by its own run's first checkpoint).
    let root = d.path().join("runs");
    let (l1, l2, truth) = (root.join("l1"), root.join("l2"), root.join("truth"));
    let mut a = workload("balanced", 48, 1);
    take_until_at(&mut a, &l1, 2, &truth, 1000 * 1_000_000_000);
    rex_ok(&push_args(&l1, &l2));
    let secs = 1_000_000_000;
    let (mut y, mut z) = (workload("balanced", 48, 2), workload("balanced", 48, 3));
    for (run, seq, t) in [(0, 3, 1003), (0, 4, 10), (1, 5, 20), (1, 6, 21)] {
        let w = if run == 0 { &mut y } else { &mut z };
        let mut c = w.step();
        c.seq = seq;
        w.write(&c, &l1, t * secs).unwrap();
    }
    let want = truth.join("z.rexic");
    z.write_image(&want).unwrap();
    rex_ok(&push_args(&l1, &l2));
    every_command_takes_it(&l1, &l2, &root, &want, "runs");
    let mut c = z.step();
    c.seq = 7;
    z.write(&c, &l1, 22 * secs).unwrap();
    rex_ok(&push_args(&l1, &l2));

    // The "nodes" history (run A at 120 s, continued at 0 s, run B's FULL
    // generation at 10 s), then the manifest of the generation between
    // damaged: the push compared B's with that one, so the restore does
    // not compare it across it with A's first (helper-91).
    let root = d.path().join("damaged");
    let (l1, l2, truth) = (root.join("l1"), root.join("l2"), root.join("truth"));
    let mut a = workload("balanced", 48, 1);
    for (seq, t0) in [(2, 120), (4, 0)] {
        take_until_at(&mut a, &l1, seq, &truth, t0 * secs);
        rex_ok(&push_args(&l1, &l2));
    }
    let mut b = workload("balanced", 48, 2);
    let want = take_until_at(&mut b, &l1, 2, &truth, 10 * secs);
    rex_ok(&push_args(&l1, &l2));
    flip_byte(&gen_file(&l2, 2, "manifest"), 40);
    let (out, image) = restore(&l2, None, &["--l2-only"], &root.join("r1"));
    assert!(out.status.success(), "damaged: {}", all_output(&out));
    assert_image(&image, &want, "damaged");
}

/// A producer that shrinks a region without dropping the pages beyond its
/// new size writes valid files (each file's pages lie in its own table,
/// §2.12.2; the table does not change the image, §2.12.3), but a REX-IC
/// image carrying the newest table could not hold those pages: every
/// restore of such a state, from L1 or L2, refused ("refusing to write:
/// page 0x1 lies outside every region", exit 5) once the push had deleted
/// its L1 files (helper-96). The image is written without the table, every
/// page kept, with a warning.
#[test]
fn a_region_shrunk_without_its_pages_dropped_restores_every_page() {
    use rexctl::format::ic::{IcExt, IcWriter};
    use rexctl::format::region::{Region, RegionTable};
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    std::fs::create_dir_all(&l1).unwrap();
    std::fs::create_dir_all(&l2).unwrap();
    let ps = 4096u32;
    let page = |seq: u64, p: u64| vec![(seq * 16 + p + 1) as u8; ps as usize];
    // (seq, full, pages, region 0's pages)
    for (seq, full, pages, region) in [(0, true, vec![0, 1], 2), (1, false, vec![0], 1)] {
        let ext = IcExt {
            chain: Some(rexctl::format::ic::ChainId([0x44; 16])),
            regions: Some(RegionTable(vec![
                Region::new(0, region * u64::from(ps), ps).unwrap(),
            ])),
            instance: None,
            continues: None,
        };
        let mut w = IcWriter::create_ext(
            l1.join(ic_file_name(seq)),
            ps,
            seq,
            full,
            1_800_000_000_000_000_000 + seq,
            &ext,
            pages.clone(),
            Vec::new(),
        )
        .unwrap();
        for &p in &pages {
            w.push_page(&page(seq, p)).unwrap();
        }
        w.finish().unwrap();
    }
    let truth = d.path().join("truth.rexic");
    let mut w = IcWriter::create(&truth, ps, 0, true, 0, vec![0, 1], Vec::new()).unwrap();
    w.push_page(&page(1, 0)).unwrap();
    w.push_page(&page(0, 1)).unwrap();
    w.finish().unwrap();
    let restore = |args: &[&str], name: &str| {
        let out = d.path().join(name);
        let mut all = vec!["restore", "--l2", s(&l2), "-o", s(&out)];
        all.extend_from_slice(args);
        let o = crate::util::run(&all);
        assert!(o.status.success(), "{}", show(&all, &o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("page 0x1") && err.contains("outside its region table"),
            "{err}"
        );
        assert_image(&out, &truth, name);
    };
    restore(&["--l1", s(&l1)], "from-l1.rexic");
    crate::util::ok(&["-q", "push-l2", "--l1", s(&l1), "--l2", s(&l2)]);
    restore(&["--l2-only"], "from-l2.rexic");
    restore(&["--l1", s(&l1)], "from-l1-l2.rexic");
}
