//! L2 on object storage, against a real S3 server (`s3s-fs`, which checks
//! request signatures), started and stopped by the tests themselves:
//!
//! * one conformance body run against the directory backend and against
//!   the S3 backend: pushes, listing, byte-exact restores (L2 alone, L1 plus
//!   L2, an older generation), retention, verify, gc;
//! * multipart uploads, pages fetched by a `--pages` restore, many ranks of
//!   a job pushing to one bucket at once;
//! * faults: the server killed in the middle of a push (and restarted
//!   after the push gave up, or while it retries), the link lost while a
//!   restore streams the objects it decodes, wrong credentials, a
//!   bucket that does not exist, an unreachable endpoint, objects altered
//!   or deleted behind rexctl's back.
//!
//! The server's binary must be installed (`cargo install s3s-fs@0.14.1
//! --features binary`; CI does): a missing server fails these tests, unless
//! `REX_SKIP_S3_TESTS=1` skips them explicitly.

mod fault;
mod link;
mod server;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

use rexctl::eval::image::compare_ic_files;
use rexctl::eval::workload::{Workload, profile};
use rexctl::store::settings::{S3Settings, Secret, StoreSettings};
use rexctl::store::{Store, open_l2};
use server::S3Server;

use crate::util::rexctl;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// Where a test's L2 lives.
enum Backend<'a> {
    Dir(PathBuf),
    S3 {
        server: &'a S3Server,
        prefix: String,
    },
}

/// A job: its name, L1 directory, L2 backend, and a scratch directory.
struct Job<'a> {
    name: String,
    rank: String,
    l1: PathBuf,
    work: PathBuf,
    backend: Backend<'a>,
    /// Extra environment for every command.
    env: Vec<(String, String)>,
}

impl<'a> Job<'a> {
    fn new(dir: &Path, name: &str, backend: Backend<'a>) -> Job<'a> {
        let work = dir.join(format!("work-{name}"));
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(work.join("empty.toml"), "").unwrap();
        Job {
            name: name.to_string(),
            rank: "0".into(),
            l1: dir.join(format!("l1-{name}")),
            work,
            backend,
            env: Vec::new(),
        }
    }

    fn l2(&self) -> String {
        match &self.backend {
            Backend::Dir(p) => p.to_str().unwrap().to_string(),
            Backend::S3 { server, prefix } => server.url(prefix),
        }
    }

    /// `rexctl args...` with this job's environment: its name and rank, an
    /// empty configuration file, the server's endpoint and credentials, few
    /// retries (a dead server fails a command in about a second).
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = rexctl();
        c.args(args);
        for v in [
            "REX_FAILPOINT",
            "REX_L1",
            "REX_L2",
            "SLURM_JOB_ID",
            "SLURM_PROCID",
        ] {
            c.env_remove(v);
        }
        c.env("REX_CONFIG", self.work.join("empty.toml"))
            .env("REX_JOB", &self.name)
            .env("REX_RANK", &self.rank)
            .env("REX_CACHE_DIR", self.work.join("cache"))
            .env("REX_S3_MAX_RETRIES", "3");
        if let Backend::S3 { server, .. } = &self.backend {
            for (k, v) in server.env() {
                c.env(k, v);
            }
        }
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run rexctl")
    }

    /// Runs and asserts success; returns standard output.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "{}", show(args, &out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn push(&self, extra: &[&str]) -> String {
        let l2 = self.l2();
        let mut args = vec!["push-l2", "--l1", s(&self.l1), "--l2", &l2];
        args.extend_from_slice(extra);
        self.ok(&args)
    }

    /// Restores into a fresh file and asserts it is exactly `want`;
    /// returns standard output and standard error.
    fn restore_exact(&self, with_l1: bool, extra: &[&str], want: &Path, ctx: &str) -> String {
        let out = self.work.join(format!("restored-{}.rexic", unique()));
        let l2 = self.l2();
        let mut args = vec!["restore", "--l2", &l2, "--out", s(&out)];
        if with_l1 {
            args.extend(["--l1", s(&self.l1)]);
        }
        args.extend_from_slice(extra);
        let o = self.run(&args);
        assert!(o.status.success(), "{ctx}: {}", show(&args, &o));
        let d = compare_ic_files(&out, want).unwrap();
        assert!(
            d.is_equal(),
            "{ctx}: restored image differs from {}: {d}",
            want.display()
        );
        std::fs::remove_file(&out).unwrap();
        format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o))
    }

    /// The store, through the library (for listing and planting objects).
    /// Starts `rexctl args` with its output captured.
    fn spawn(&self, args: &[&str]) -> std::process::Child {
        self.cmd(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn store(&self) -> Box<dyn Store> {
        self.store_with_parts(rexctl::store::settings::DEFAULT_S3_PART_SIZE)
    }

    /// The store, with multipart uploads of `part_size` parts (S3).
    fn store_with_parts(&self, part_size: u64) -> Box<dyn Store> {
        self.store_with(part_size, rexctl::store::settings::INTENT_REFRESH_S)
    }

    /// [`store_with_parts`](Self::store_with_parts), its uploads writing
    /// their intent again every `intent_refresh_s` seconds.
    fn store_with(&self, part_size: u64, intent_refresh_s: f64) -> Box<dyn Store> {
        let mut settings = StoreSettings {
            job: Some(self.name.clone()),
            rank: self.rank.clone(),
            cache_dir: Some(self.work.join("cache")),
            ..Default::default()
        };
        if let Backend::S3 { server, .. } = &self.backend {
            settings.s3 = S3Settings {
                endpoint: Some(server.endpoint()),
                region: Some("us-east-1".into()),
                allow_http: Some(true),
                access_key_id: Some(server::ACCESS_KEY.into()),
                secret_access_key: Some(Secret(server::SECRET_KEY.into())),
                max_retries: 2,
                part_size,
                intent_refresh_s,
                ..Default::default()
            };
        }
        open_l2(Path::new(&self.l2()), &settings, true).unwrap()
    }

    fn names(&self) -> BTreeSet<String> {
        self.store()
            .list()
            .unwrap()
            .into_iter()
            .map(|o| o.name)
            .collect()
    }

    /// The file that holds object `name`: the directory's file, or the
    /// file in which the server keeps the object.
    fn object_file(&self, name: &str) -> PathBuf {
        match &self.backend {
            Backend::Dir(p) => p.join(name),
            Backend::S3 { server, prefix } => {
                server.object_file(&format!("{prefix}/{}/{}/{name}", self.name, self.rank))
            }
        }
    }

    /// Makes object `name` look `age` old to its store.
    fn age(&self, name: &str, age: Duration) {
        let f = std::fs::File::options()
            .write(true)
            .open(self.object_file(name))
            .unwrap();
        f.set_modified(SystemTime::now() - age).unwrap();
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn show(args: &[&str], out: &Output) -> String {
    format!(
        "rexctl {args:?}: status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn workload(name: &str, pages: u64, seed: u64) -> Workload {
    let mut p = profile(name).unwrap();
    p.pages = pages;
    Workload::new(p, seed).unwrap()
}

/// Takes checkpoints into `l1` up to seq `last`; returns the true image then.
fn take_until(w: &mut Workload, l1: &Path, last: u64, truth: &Path) -> PathBuf {
    std::fs::create_dir_all(l1).unwrap();
    std::fs::create_dir_all(truth).unwrap();
    while w.next_seq() <= last {
        w.checkpoint(l1).unwrap();
    }
    let p = truth.join(format!("seq-{last}.rexic"));
    w.write_image(&p).unwrap();
    p
}

fn gen_names(gens: &[u64]) -> BTreeSet<String> {
    gens.iter()
        .flat_map(|g| ["rps", "pf", "ptab", "manifest"].map(|k| format!("g{g:08}.{k}")))
        .collect()
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

fn json_names(v: &serde_json::Value, key: &str) -> Vec<String> {
    v[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {v}"))
        .iter()
        .map(|o| o["name"].as_str().unwrap().to_string())
        .collect()
}

/// Asserts a clean failure: exit `code`, no panic, every needle in stderr.
fn assert_fails(out: &Output, code: i32, needles: &[&str], ctx: &str) -> String {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "{ctx}: exit code\n{err}");
    assert!(!err.contains("panicked"), "{ctx}: panic\n{err}");
    for n in needles {
        assert!(err.contains(n), "{ctx}: stderr lacks {n:?}:\n{err}");
    }
    err
}

// ---------------------------------------------------------------------------
// Conformance: the same body against both backends
// ---------------------------------------------------------------------------

/// Pushes several generations (a Δ, then a complete coalescence that prunes
/// the old chain, then a Δ on it), lists the store, restores byte for byte
/// (L2 alone, L1 plus L2 with a pending checkpoint, an older generation),
/// verifies, and collects garbage: an old orphan goes, a young one stays
/// until the grace period is 0, other names are never touched, and gc
/// waits for no lock but refuses a held one.
fn conformance(job: &Job) {
    let truth = job.work.join("truth");
    let mut w = workload("balanced", 256, 7);
    take_until(&mut w, &job.l1, 2, &truth);
    job.push(&[]);
    take_until(&mut w, &job.l1, 4, &truth);
    job.push(&[]);
    assert_eq!(job.names(), gen_names(&[1, 2]), "after two pushes");

    let seq6 = take_until(&mut w, &job.l1, 6, &truth);
    let out = job.push(&["--full", "--keep-chains", "1"]);
    assert!(
        out.contains("pushed generation 3") && out.contains("uploaded"),
        "{out}"
    );
    let seq8 = take_until(&mut w, &job.l1, 8, &truth);
    job.push(&["--keep-chains", "1"]);
    assert_eq!(
        job.names(),
        gen_names(&[3, 4]),
        "retention keeps only the newest chain"
    );

    let l2 = job.l2();
    let st = json(&job.ok(&["status", "--l1", s(&job.l1), "--l2", &l2, "--json"]));
    let gens: Vec<u64> = st["generations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["generation"].as_u64().unwrap())
        .collect();
    assert_eq!(gens, [3, 4]);

    job.restore_exact(false, &[], &seq8, "restore --l2");
    let seq9 = take_until(&mut w, &job.l1, 9, &truth);
    job.restore_exact(
        true,
        &[],
        &seq9,
        "restore --l1 --l2 with a pending checkpoint",
    );
    job.restore_exact(
        false,
        &["--generation", "3"],
        &seq6,
        "restore --generation 3",
    );
    job.ok(&["verify", "--l2", &l2, "--l1", s(&job.l1)]);

    // Garbage: an old orphan, a young orphan, and an object that is not
    // rexctl's (old too).
    let store = job.store();
    store
        .put_bytes("g00000098.pf", b"left by a crashed push, long ago")
        .unwrap();
    store
        .put_bytes("g00000099.rps", b"left by a push a minute ago")
        .unwrap();
    store
        .put_bytes("NOTES.txt", b"an operator's notes")
        .unwrap();
    drop(store);
    job.age("g00000098.pf", Duration::from_secs(7200));
    job.age("NOTES.txt", Duration::from_secs(7200));
    let r = json(&job.ok(&["gc", "--l2", &l2, "--json"]));
    assert_eq!(json_names(&r, "deleted"), ["g00000098.pf"], "{r}");
    assert_eq!(json_names(&r, "young"), ["g00000099.rps"], "{r}");
    assert_eq!(r["referenced"], 8, "{r}");
    let r = json(&job.ok(&["gc", "--l2", &l2, "--grace", "0", "--dry-run", "--json"]));
    assert_eq!(json_names(&r, "deleted"), ["g00000099.rps"], "{r}");
    assert!(job.names().contains("g00000099.rps"), "a dry run deleted");
    {
        let _lock = rexctl::l1::lock::JobLock::acquire(&job.l1, "conformance test").unwrap();
        let out = job.run(&["gc", "--l2", &l2, "--l1", s(&job.l1), "--grace", "0"]);
        assert_fails(
            &out,
            4,
            &["busy", "conformance test"],
            "gc while the job is locked",
        );
        assert!(job.names().contains("g00000099.rps"), "a busy gc deleted");
    }
    let out = job.ok(&["gc", "--l2", &l2, "--l1", s(&job.l1), "--grace", "0"]);
    assert!(out.contains("deleted g00000099.rps"), "{out}");
    let mut want = gen_names(&[3, 4]);
    want.insert("NOTES.txt".into());
    assert_eq!(
        job.names(),
        want,
        "gc kept exactly the referenced objects and foreign names"
    );
    job.restore_exact(false, &[], &seq8, "restore --l2 after gc");
    job.ok(&["verify", "--l2", &l2]);
}

/// Streamed objects ([`Store::put_stream`], how a push uploads the RPS and
/// the Pointer File while it writes them): the object is stored exactly,
/// its placeholder head replaced by the final one, with the length and
/// CRC-32 of what was stored, whether it fits one request or needs a
/// multipart upload (5 MiB parts; the part holding the head goes up last);
/// a stream that stops before its end, or ends with a head of another
/// length, publishes nothing. `leftovers` lists what an unfinished upload
/// could leave in the backend (temporaries, parts, intents).
fn streamed_objects(job: &Job, leftovers: &dyn Fn() -> Vec<String>) {
    use rexctl::durable::Piece;
    use rexctl::store::NoProgress;
    let store = job.store_with_parts(5 << 20);
    // Irregular pieces: a placeholder head of 64 bytes, then a body cut in
    // pieces of 1 byte to 1.5 MiB.
    let stream = |body: &[u8], head: &[u8]| -> Vec<Piece> {
        let mut v = vec![Piece::Data(vec![0; 64])];
        let mut at = 0;
        for k in [1usize, 4096, 3 << 19, 777].into_iter().cycle() {
            if at == body.len() {
                break;
            }
            let n = k.min(body.len() - at);
            v.push(Piece::Data(body[at..at + n].to_vec()));
            at += n;
        }
        v.push(Piece::End(head.to_vec()));
        v
    };
    let head: Vec<u8> = (0..64u8).map(|b| b.wrapping_mul(7) | 1).collect();
    let mut body = vec![0u8; (12 << 20) + 12345];
    rand::Rng::fill_bytes(
        &mut <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(51),
        &mut body,
    );
    for (name, len) in [("g00000051.rps", body.len()), ("g00000052.pf", 100_000)] {
        let got = store
            .put_stream(
                name,
                64,
                &mut stream(&body[..len], &head).into_iter(),
                &NoProgress,
            )
            .unwrap();
        let mut whole = head.clone();
        whole.extend_from_slice(&body[..len]);
        assert_eq!(got, (whole.len() as u64, crc32fast::hash(&whole)), "{name}");
        assert!(
            std::fs::read(job.object_file(name)).unwrap() == whole,
            "{name} was not stored exactly"
        );
    }
    // Stopped half way (its writer failed), or ended with a wrong head.
    let mut cut = stream(&body, &head);
    cut.pop();
    for (name, pieces) in [
        ("g00000053.rps", cut),
        ("g00000054.rps", stream(&body, &head[..10])),
    ] {
        let r = store.put_stream(name, 64, &mut pieces.into_iter(), &NoProgress);
        assert!(r.is_err(), "{name}: an unfinished stream was stored");
        assert!(!job.names().contains(name), "{name} was published");
    }
    assert_eq!(
        leftovers(),
        Vec::<String>::new(),
        "an unfinished upload left these"
    );
    for name in ["g00000051.rps", "g00000052.pf"] {
        store.delete(name).unwrap();
    }
}

#[test]
fn conformance_directory() {
    let d = tempfile::tempdir().unwrap();
    let job = Job::new(d.path(), "dirjob", Backend::Dir(d.path().join("l2")));
    conformance(&job);
    let l2 = d.path().join("l2");
    streamed_objects(&job, &|| {
        std::fs::read_dir(&l2)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.') && n != ".rex.lock")
            .collect()
    });
}

#[test]
fn conformance_s3() {
    let Some(server) = S3Server::start("rex-conformance") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let job = Job::new(
        d.path(),
        "s3job",
        Backend::S3 {
            server: &server,
            prefix: "site/ckpt".into(),
        },
    );
    conformance(&job);
    let intents = server
        .root()
        .join(&server.bucket)
        .join("site/ckpt/s3job/0/.uploads");
    streamed_objects(&job, &|| {
        let mut left = server.pending_parts();
        if let Ok(r) = std::fs::read_dir(&intents) {
            left.extend(r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()));
        }
        left
    });
    // Everything under the job's own prefix.
    let dir = server.root().join(&server.bucket).join("site/ckpt/s3job/0");
    assert!(
        dir.join("g00000004.manifest").is_file(),
        "layout: <prefix>/<job>/<rank>/"
    );
    // The file:// form of a directory location works as the plain path.
    let url = format!("file://{}", job.work.join("l2-url").display());
    let dj = Job::new(d.path(), "urljob", Backend::Dir(job.work.join("l2-url")));
    let truth = dj.work.join("truth");
    let mut w = workload("balanced", 64, 3);
    let seq2 = take_until(&mut w, &dj.l1, 2, &truth);
    dj.ok(&["push-l2", "--l1", s(&dj.l1), "--l2", &url]);
    let out = dj.work.join("u.rexic");
    dj.ok(&["restore", "--l2", &url, "--out", s(&out)]);
    assert!(compare_ic_files(&out, &seq2).unwrap().is_equal());
}

/// The conformance suite on S3 in L2 format 4: Pointer Files whose holes a
/// restore fills from older generations' objects (fetched as it needs them,
/// with the objects it streams).
#[test]
fn conformance_s3_format_4() {
    let Some(server) = S3Server::start("rex-conformance-4") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let mut job = s3_job(d.path(), &server, "s3job4");
    job.env.push(("REX_L2_VERSION".into(), "4".into()));
    conformance(&job);
}

// ---------------------------------------------------------------------------
// S3 specifics: multipart, ranged reads, many ranks
// ---------------------------------------------------------------------------

fn s3_job<'a>(d: &Path, server: &'a S3Server, name: &str) -> Job<'a> {
    Job::new(
        d,
        name,
        Backend::S3 {
            server,
            prefix: "ckpt".into(),
        },
    )
}

/// A push whose RPS exceeds the part size goes up as a multipart upload
/// (several parts, a few in flight) and leaves neither parts nor upload
/// intents behind; a restore reads it back exactly and reports what it
/// fetched.
#[test]
fn s3_multipart_upload_restores_exactly_and_leaves_nothing_behind() {
    let Some(server) = S3Server::start("rex-multipart") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let mut job = s3_job(d.path(), &server, "mp");
    job.env
        .push(("REX_S3_PART_SIZE".into(), (5u64 << 20).to_string()));
    job.env.push(("REX_S3_PARTS_IN_FLIGHT".into(), "2".into()));
    let truth = job.work.join("truth");
    let mut w = workload("incompressible", 4096, 11);
    let seq1 = take_until(&mut w, &job.l1, 1, &truth);
    job.push(&[]);
    let rps = std::fs::metadata(job.object_file("g00000001.rps"))
        .unwrap()
        .len();
    assert!(
        rps > 10 << 20,
        "the RPS ({rps} bytes) should need three parts or more"
    );
    assert!(
        server.pending_parts().is_empty(),
        "parts left: {:?}",
        server.pending_parts()
    );
    let intents = server
        .root()
        .join(&server.bucket)
        .join("ckpt/mp/0/.uploads");
    assert!(
        std::fs::read_dir(&intents).map(|r| r.count()).unwrap_or(0) == 0,
        "upload intents left in {}",
        intents.display()
    );
    let l2 = job.l2();
    let out = job.work.join("full.rexic");
    let j = json(&job.ok(&["restore", "--l2", &l2, "--out", s(&out), "--json"]));
    assert!(compare_ic_files(&out, &seq1).unwrap().is_equal());
    let fetched = j["l2_transfer"]["bytes_fetched"].as_u64().unwrap();
    assert!(
        fetched >= rps,
        "a full restore fetched {fetched} bytes, the RPS alone is {rps}"
    );
    job.ok(&["verify", "--l2", &l2]);

    // A few pages: only the manifests, the P-Tables, the headers and chunk
    // tables, and the chunks those pages need are fetched; the pages are
    // those of a whole read (the library's default).
    let pages: Vec<u64> = w.image().keys().copied().skip(1000).take(4).collect();
    let ranges = format!("{:#x}-{:#x}", pages[0], pages[3]);
    let part = job.work.join("part.rexic");
    let j = json(&job.ok(&[
        "restore",
        "--l2",
        &l2,
        "--out",
        s(&part),
        "--pages",
        &ranges,
        "--json",
    ]));
    assert_eq!(j["pages"], 4, "{j}");
    let fetched = j["l2_transfer"]["bytes_fetched"].as_u64().unwrap();
    assert!(
        fetched < 4 << 20,
        "a 4-page restore fetched {fetched} bytes of a {rps}-byte RPS"
    );
    let whole = job.work.join("part-whole.rexic");
    let opts = rexctl::l2::restore::RestoreOptions {
        pages: Some(rexctl::l2::restore::parse_page_ranges(&ranges).unwrap()),
        ..Default::default()
    };
    rexctl::l2::restore::restore_l2(job.store().as_ref(), &opts, &whole).unwrap();
    assert!(compare_ic_files(&part, &whole).unwrap().is_equal());
    eprintln!("4-page restore fetched {fetched} bytes (RPS {rps} bytes)");
}

/// Several ranks of a job push to one bucket at once, each under its own
/// prefix; each restores exactly its own image.
#[test]
fn s3_ranks_push_to_one_bucket_at_once() {
    let Some(server) = S3Server::start("rex-ranks") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let ranks: Vec<Job> = (0..4)
        .map(|r| {
            let mut j = s3_job(d.path(), &server, "shared");
            j.rank = r.to_string();
            j.l1 = d.path().join(format!("l1-rank{r}"));
            j.work = d.path().join(format!("work-rank{r}"));
            std::fs::create_dir_all(&j.work).unwrap();
            std::fs::write(j.work.join("empty.toml"), "").unwrap();
            j
        })
        .collect();
    let mut wants = Vec::new();
    for (r, j) in ranks.iter().enumerate() {
        let mut w = workload("balanced", 512, 100 + r as u64);
        wants.push(take_until(&mut w, &j.l1, 3, &j.work.join("truth")));
    }
    let children: Vec<_> = ranks
        .iter()
        .map(|j| {
            let l2 = j.l2();
            j.spawn(&["push-l2", "--l1", s(&j.l1), "--l2", &l2])
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", show(&["push-l2"], &out));
    }
    for (j, want) in ranks.iter().zip(&wants) {
        assert_eq!(j.names(), gen_names(&[1]), "rank {}", j.rank);
        j.restore_exact(false, &[], want, &format!("rank {}", j.rank));
    }
}

// ---------------------------------------------------------------------------
// Faults
// ---------------------------------------------------------------------------

/// Waits until the server holds `parts` multipart parts of uploads in
/// progress, then runs `then`. Returns false if `child` ended first.
fn when_parts_arrive(
    server: &S3Server,
    child: &mut std::process::Child,
    parts: usize,
    then: impl FnOnce(),
) -> bool {
    let deadline = Instant::now() + Duration::from_secs(120);
    while server.pending_parts().len() < parts {
        if child.try_wait().unwrap().is_some() || Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    then();
    true
}

/// A job with one small generation in a bucket and a large `--full` push
/// pending (an incompressible 48 MiB footprint, 5 MiB parts, one in
/// flight: ten parts and more).
fn big_push_setup<'a>(d: &Path, server: &'a S3Server, name: &str) -> (Job<'a>, PathBuf, PathBuf) {
    let mut job = s3_job(d, server, name);
    job.env
        .push(("REX_S3_PART_SIZE".into(), (5u64 << 20).to_string()));
    job.env.push(("REX_S3_PARTS_IN_FLIGHT".into(), "1".into()));
    let truth = job.work.join("truth");
    let mut w = workload("incompressible", 12288, 5);
    let seq0 = take_until(&mut w, &job.l1, 0, &truth);
    job.push(&[]);
    let seq2 = take_until(&mut w, &job.l1, 2, &truth);
    (job, seq0, seq2)
}

/// The server is killed while a push uploads its parts: the push fails
/// cleanly (I/O exit code, naming the endpoint and the bucket), no manifest
/// appears, a restore gives the last good generation; once the server is
/// back, the next push aborts the dead upload (no parts left), pushes, and
/// restores exactly.
#[test]
fn s3_server_killed_mid_push_fails_cleanly_and_the_next_push_recovers() {
    let Some(server) = S3Server::start("rex-kill") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let (mut job, seq0, seq2) = big_push_setup(d.path(), &server, "killed");
    job.env.push(("REX_S3_MAX_RETRIES".into(), "1".into()));
    let l2 = job.l2();
    let args = ["push-l2", "--l1", s(&job.l1), "--l2", &l2, "--full"];
    let mut child = job.spawn(&args);
    let endpoint = server.endpoint();
    let killed = when_parts_arrive(&server, &mut child, 1, || server.kill());
    let out = child.wait_with_output().unwrap();
    assert!(
        killed,
        "the push ended before any part reached the server:\n{}",
        show(&args, &out)
    );
    assert_fails(
        &out,
        1,
        &[&endpoint, "rex-kill", "g00000002.rps"],
        "push with the server killed",
    );
    let err = stderr(&out);
    assert!(err.contains("next push or `rexctl gc` aborts it"), "{err}");

    server.restart();
    assert!(
        !server.pending_parts().is_empty(),
        "the dead push's parts should still be on the server"
    );
    after_a_dead_push(&job, &server, &seq0, &seq2);
}

/// After a `--full` push of generation 2 died uploading (see
/// [`big_push_setup`]): no manifest appeared, the last good generation
/// restores from L2 alone and the batch from L1 plus L2; the next push
/// aborts the dead upload (no parts left), pushes, and restores exactly.
fn after_a_dead_push(job: &Job, server: &S3Server, seq0: &Path, seq2: &Path) {
    assert!(
        !job.names().contains("g00000002.manifest"),
        "a manifest appeared for the failed push: {:?}",
        job.names()
    );
    job.restore_exact(
        false,
        &[],
        seq0,
        "restore --l2 after the failed push: the last good generation",
    );
    job.restore_exact(
        true,
        &[],
        seq2,
        "restore --l1 --l2 after the failed push: L1 still has the batch",
    );
    let out = job.push(&["--full"]);
    assert!(
        out.contains("aborted an unfinished multipart upload of g00000002.rps"),
        "{out}"
    );
    assert!(
        server.pending_parts().is_empty(),
        "parts left: {:?}",
        server.pending_parts()
    );
    job.restore_exact(false, &[], seq2, "restore --l2 after the next push");
    job.ok(&["verify", "--l2", &job.l2(), "--l1", s(&job.l1)]);
}

/// The link to the bucket goes down while a full restore streams the RPS
/// (decoding the chunks that arrived while the rest is on its way): the
/// restore fails with the I/O exit code, naming the endpoint, the bucket
/// and the object, and leaves no image and no temporary file; over a
/// working link the same restore is exact.
#[test]
fn s3_link_lost_while_a_restore_streams_fails_cleanly() {
    let Some(server) = S3Server::start("rex-link") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let mut job = s3_job(d.path(), &server, "link");
    let truth = job.work.join("truth");
    let mut w = workload("incompressible", 12288, 7);
    let seq0 = take_until(&mut w, &job.l1, 0, &truth);
    job.push(&[]);
    let rps = job
        .store()
        .list()
        .unwrap()
        .into_iter()
        .find(|o| o.name == "g00000001.rps")
        .expect("the RPS was pushed")
        .bytes;
    // Down after half the RPS: its header, chunk table, the manifest and
    // the P-Table came through, and the restore has begun decoding.
    let link = link::Link::to(server.port, rps / 2);
    job.env.push(("AWS_ENDPOINT_URL".into(), link.endpoint()));
    job.env.push(("REX_S3_MAX_RETRIES".into(), "1".into()));
    let dir = job.work.join("restored");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("image.rexic");
    let l2 = job.l2();
    let args = ["restore", "--l2", &l2, "--out", s(&out)];
    let o = job.run(&args);
    assert!(
        link.was_cut(),
        "the restore ended before the link went down:\n{}",
        show(&args, &o)
    );
    let err = assert_fails(
        &o,
        1,
        &[&link.endpoint(), "rex-link", "g00000001."],
        "restore over a link lost mid-stream",
    );
    assert!(err.contains("get"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "the failed restore left {left:?}");
    job.env.retain(|(k, _)| k != "AWS_ENDPOINT_URL");
    job.restore_exact(false, &[], &seq0, "restore over a working link");
}

/// rexctl is killed (SIGKILL) while its push streams the RPS to the bucket,
/// at the first part the server holds and, in a second job, a few parts
/// later: no manifest appears, the last good generation restores from L2
/// alone and the pending batch from L1 plus L2, and the next push aborts
/// the dead upload (no parts left), pushes, and restores exactly.
#[test]
fn s3_push_killed_while_streaming_keeps_the_last_good_generation() {
    let Some(server) = S3Server::start("rex-push-killed") else {
        return;
    };
    for (round, parts) in [1usize, 3].into_iter().enumerate() {
        let d = tempfile::tempdir().unwrap();
        let name = format!("killed{round}");
        let (job, seq0, seq2) = big_push_setup(d.path(), &server, &name);
        let l2 = job.l2();
        let args = ["push-l2", "--l1", s(&job.l1), "--l2", &l2, "--full"];
        let mut child = job.spawn(&args);
        let reached = when_parts_arrive(&server, &mut child, parts, || {});
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        assert!(
            reached,
            "round {round}: the push ended before {parts} parts reached the server:\n{}",
            show(&args, &out)
        );
        after_a_dead_push(&job, &server, &seq0, &seq2);
    }
}

/// The server dies while a push uploads and comes back a moment later:
/// the requests in flight are retried with backoff and the push succeeds.
#[test]
fn s3_server_restarted_mid_push_is_retried() {
    let Some(server) = S3Server::start("rex-retry") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let (mut job, _seq0, seq2) = big_push_setup(d.path(), &server, "retried");
    job.env.push(("REX_S3_MAX_RETRIES".into(), "10".into()));
    let l2 = job.l2();
    let args = ["push-l2", "--l1", s(&job.l1), "--l2", &l2, "--full"];
    let mut child = job.spawn(&args);
    let bounced = when_parts_arrive(&server, &mut child, 1, || {
        server.kill();
        std::thread::sleep(Duration::from_millis(700));
        server.restart();
    });
    let out = child.wait_with_output().unwrap();
    assert!(
        bounced,
        "the push ended before any part reached the server:\n{}",
        show(&args, &out)
    );
    assert!(out.status.success(), "{}", show(&args, &out));
    assert!(
        server.pending_parts().is_empty(),
        "parts left: {:?}",
        server.pending_parts()
    );
    job.restore_exact(false, &[], &seq2, "restore --l2 after a retried push");
}

/// Wrong credentials: every command fails with the configuration exit
/// code and a message that names the endpoint and the bucket.
#[test]
fn s3_wrong_credentials_are_a_configuration_error() {
    let Some(server) = S3Server::start("rex-auth") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let job = s3_job(d.path(), &server, "auth");
    let mut w = workload("balanced", 64, 1);
    take_until(&mut w, &job.l1, 1, &job.work.join("truth"));
    job.push(&[]);
    let endpoint = server.endpoint();
    let l2 = job.l2();
    let out_file = job.work.join("x.rexic");
    for (var, value) in [
        ("AWS_SECRET_ACCESS_KEY", "not-the-secret"),
        ("AWS_ACCESS_KEY_ID", "nobody"),
    ] {
        for args in [
            vec!["push-l2", "--l1", s(&job.l1), "--l2", &l2],
            vec!["restore", "--l2", &l2, "--out", s(&out_file)],
            vec!["verify", "--l2", &l2],
            vec!["gc", "--l2", &l2],
        ] {
            let out = job.cmd(&args).env(var, value).output().unwrap();
            assert_fails(
                &out,
                5,
                &[&endpoint, "bucket rex-auth", "credentials"],
                &format!("{var} wrong: {args:?}"),
            );
        }
    }
    assert!(!out_file.exists());
    // The secret never appears in a message.
    let out = job
        .cmd(&["verify", "--l2", &l2])
        .env("AWS_SECRET_ACCESS_KEY", "s3cr3t-v4lue")
        .output()
        .unwrap();
    assert!(!stderr(&out).contains("s3cr3t-v4lue"));
}

/// A bucket that does not exist is a configuration error naming it and the
/// endpoint; an endpoint nobody listens on is an I/O failure naming it.
#[test]
fn s3_missing_bucket_and_unreachable_endpoint() {
    let Some(server) = S3Server::start("rex-exists") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let job = s3_job(d.path(), &server, "nb");
    let mut w = workload("balanced", 64, 1);
    take_until(&mut w, &job.l1, 1, &job.work.join("truth"));
    let endpoint = server.endpoint();
    let url = "s3://no-such-bucket/ckpt";
    for args in [
        vec!["push-l2", "--l1", s(&job.l1), "--l2", url],
        vec!["verify", "--l2", url],
    ] {
        let out = job.run(&args);
        assert_fails(
            &out,
            5,
            &[&endpoint, "no-such-bucket", "does not exist"],
            &format!("{args:?}"),
        );
    }
    let l2 = job.l2();
    drop(job);
    server.kill();
    let job = s3_job(d.path(), &server, "nb2");
    let started = Instant::now();
    let out = job.run(&["verify", "--l2", &l2]);
    assert_fails(&out, 1, &[&endpoint, "rex-exists"], "unreachable endpoint");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "gave up after {:?}",
        started.elapsed()
    );
}

/// Objects altered or deleted in the bucket behind rexctl's back: verify
/// and restore detect it by CRC (or absence) and name the object by its
/// s3:// URL; `--fallback` restores the last generation still intact.
#[test]
fn s3_altered_or_deleted_objects_are_detected_and_named() {
    let Some(server) = S3Server::start("rex-damage") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let job = s3_job(d.path(), &server, "dmg");
    let truth = job.work.join("truth");
    let mut w = workload("balanced", 256, 4);
    let seq1 = take_until(&mut w, &job.l1, 1, &truth);
    job.push(&[]);
    let seq3 = take_until(&mut w, &job.l1, 3, &truth);
    job.push(&[]);
    let l2 = job.l2();
    let url = |name: &str| format!("s3://rex-damage/ckpt/dmg/0/{name}");
    let out_file = job.work.join("x.rexic");

    // Altered: one byte of generation 2's RPS, in the server's storage.
    let f = job.object_file("g00000002.rps");
    let original = std::fs::read(&f).unwrap();
    let mut bad = original.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x55;
    std::fs::write(&f, &bad).unwrap();
    let out = job.run(&["verify", "--l2", &l2]);
    assert_fails(
        &out,
        3,
        &[&url("g00000002.rps")],
        "verify of an altered object",
    );
    let out = job.run(&["restore", "--l2", &l2, "--out", s(&out_file)]);
    assert_fails(
        &out,
        3,
        &[&url("g00000002.rps")],
        "restore of an altered object",
    );
    assert!(!out_file.exists());
    std::fs::write(&f, &original).unwrap();
    job.ok(&["verify", "--l2", &l2]);

    // Altered on demand: a `--pages` restore fetches chunks as it needs
    // them, checks each, and names the object.
    let f = job.object_file("g00000002.pf");
    let original = std::fs::read(&f).unwrap();
    let mut bad = original.clone();
    bad[64] ^= 0x01;
    std::fs::write(&f, &bad).unwrap();
    let out = job.run(&[
        "restore",
        "--l2",
        &l2,
        "--out",
        s(&out_file),
        "--pages",
        "0-0xffffffffff",
    ]);
    assert_fails(
        &out,
        3,
        &[&url("g00000002.pf"), "chunk data"],
        "restore --pages of an altered chunk",
    );
    assert!(!out_file.exists());
    std::fs::write(&f, &original).unwrap();

    // Altered manifest: invalid, named.
    let m = job.object_file("g00000002.manifest");
    let text = std::fs::read_to_string(&m).unwrap();
    std::fs::write(
        &m,
        text.replacen("\"live_pages\": ", "\"live_pages\": 1", 1),
    )
    .unwrap();
    let out = job.run(&["verify", "--l2", &l2]);
    assert_fails(
        &out,
        3,
        &["g00000002.manifest"],
        "verify of an altered manifest",
    );
    std::fs::write(&m, text).unwrap();

    // Deleted: generation 2's Pointer File; `--fallback` restores
    // generation 1, loudly.
    let pf = job.object_file("g00000002.pf");
    let keep = std::fs::read(&pf).unwrap();
    std::fs::remove_file(&pf).unwrap();
    let out = job.run(&["restore", "--l2", &l2, "--out", s(&out_file)]);
    assert_fails(
        &out,
        3,
        &["ckpt/dmg/0/g00000002.pf", "no such object"],
        "restore with a deleted object",
    );
    let said = job.restore_exact(
        false,
        &["--fallback"],
        &seq1,
        "restore --fallback past a deleted object",
    );
    assert!(
        said.contains("FALLBACK") && said.contains("generation 1"),
        "{said}"
    );
    std::fs::write(&pf, keep).unwrap();
    job.ok(&["verify", "--l2", &l2]);

    // Deleted: the P-Table of generation 1, which generation 2 needs too.
    std::fs::remove_file(job.object_file("g00000001.ptab")).unwrap();
    let out = job.run(&["restore", "--l2", &l2, "--out", s(&out_file)]);
    assert_fails(
        &out,
        3,
        &["ckpt/dmg/0/g00000001.ptab", "no such object"],
        "restore with a deleted object",
    );
    let out = job.run(&["verify", "--l2", &l2]);
    assert_fails(&out, 3, &["g00000001.ptab"], "verify with a deleted object");
    assert!(!out_file.exists());

    // `verify --repair` puts back from L1's copy the deleted P-Table and
    // an altered RPS (which no push reads: it reads L1's copy), each named
    // by its URL; then L2 alone restores the newest state.
    let f = job.object_file("g00000002.rps");
    let mut bad = std::fs::read(&f).unwrap();
    bad[100] ^= 0x01;
    std::fs::write(&f, &bad).unwrap();
    let said = job.ok(&["verify", "--l2", &l2, "--l1", s(&job.l1), "--repair"]);
    for (g, name) in [(1, "g00000001.ptab"), (2, "g00000002.rps")] {
        assert!(
            said.lines()
                .any(|l| l.starts_with(&format!("repaired: L2 generation {g}: "))
                    && l.contains(name)
                    && l.contains("s3://rex-damage/ckpt/dmg/0")
                    && !l.contains("http")),
            "{name} not said repaired, by its s3:// name:\n{said}"
        );
    }
    job.ok(&["verify", "--l2", &l2]);
    job.restore_exact(false, &[], &seq3, "restore from L2 after --repair");
}

/// `flush` takes an s3:// L2 and the endpoint and credentials from its
/// configuration file alone (no `AWS_*` variable), pushes, and says how
/// much it uploaded and how fast.
#[test]
fn s3_flush_takes_the_bucket_and_credentials_from_rex_toml() {
    let Some(server) = S3Server::start("rex-flush") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let job = s3_job(d.path(), &server, "fl");
    let mut w = workload("balanced", 256, 9);
    let seq2 = take_until(&mut w, &job.l1, 2, &job.work.join("truth"));
    let cfg = job.work.join("rex.toml");
    std::fs::write(
        &cfg,
        format!(
            "l1 = {:?}\nl2 = {:?}\njob = \"fl\"\nrank = \"0\"\ns3_endpoint = {:?}\ns3_region = \"us-east-1\"\n\
             s3_allow_http = true\ns3_access_key_id = {:?}\ns3_secret_access_key = {:?}\ns3_max_retries = 2\n",
            s(&job.l1),
            job.l2(),
            server.endpoint(),
            server::ACCESS_KEY,
            server::SECRET_KEY
        ),
    )
    .unwrap();
    let mut c = rexctl();
    c.args(["flush", "--config", s(&cfg)]);
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") || k.starts_with("REX_") || k.starts_with("SLURM_") {
            c.env_remove(k);
        }
    }
    let out = c.output().unwrap();
    assert!(out.status.success(), "{}", show(&["flush"], &out));
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(
        line.contains("flush job=fl rank=0 decision=push generation=1")
            && line.contains(" bytes=")
            && line.lines().count() == 1,
        "{line}"
    );
    job.restore_exact(false, &[], &seq2, "restore after flush");
}

/// An MPI job's location in a bucket: `push-l2 --collective` under
/// `mpirun -np 4`, then every rank restored from the bucket alone, and the
/// job's status and verification.
#[cfg(feature = "mpi")]
#[test]
fn s3_an_mpi_job_pushes_collectively_and_every_rank_restores() {
    let _one_at_a_time = crate::util::exclusive();
    let Some(server) = S3Server::start("rex-mpi") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let (l1, truth) = (d.path().join("l1"), d.path().join("truth"));
    let out = rexctl()
        .args([
            "gen", "--ranks", "4", "--shared", "0.9", "--pages", "200", "--count", "2",
        ])
        .arg(&l1)
        .arg("--truth")
        .arg(&truth)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&["gen"], &out));
    let url = server.url("hpc");
    let before = d.path().join("l1-before");
    crate::util::copy_tree(&l1, &before);
    let mut c = Command::new("mpirun");
    c.args(["--oversubscribe", "--timeout", "180", "-np", "4"]);
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        c.arg("--allow-run-as-root");
    }
    c.arg(env!("CARGO_BIN_EXE_rexctl"))
        .args(["push-l2", "--collective", "--l1", s(&l1), "--l2", &url])
        .env("REX_JOB", "mpijob")
        .envs(server.env());
    let out = c.output().expect("run mpirun");
    assert!(
        out.status.success(),
        "{}",
        show(&["mpirun push-l2 --collective"], &out)
    );
    let job_dir = server.root().join(&server.bucket).join("hpc/mpijob");
    assert!(
        job_dir.join("job/j00000001.job").is_file(),
        "layout: <prefix>/<job>/job/"
    );
    assert!(
        job_dir.join("2/g00000001.xref").is_file(),
        "layout: <prefix>/<job>/<rank>/"
    );
    let run = |args: &[&str]| {
        rexctl()
            .args(args)
            .env("REX_JOB", "mpijob")
            .envs(server.env())
            .output()
            .unwrap()
    };
    for r in 0..4 {
        let img = d.path().join(format!("r{r}.rexic"));
        let rank = r.to_string();
        let out = run(&["restore", "--l2", &url, "--rank", &rank, "-o", s(&img)]);
        assert!(out.status.success(), "{}", show(&["restore"], &out));
        assert!(
            compare_ic_files(&img, &truth.join(format!("{r}.rexic")))
                .unwrap()
                .is_equal(),
            "rank {r} restored from the bucket differs"
        );
    }
    let out = run(&["verify", "--l2", &url]);
    assert!(out.status.success(), "{}", show(&["verify"], &out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("rank 3: generation 1"));

    // The same push killed before its job manifest: every rank's part in
    // the bucket, none committed, the checkpoints still in L1/R. A bucket
    // opens at the rank's own prefix, whose generation read as a single
    // chain's: status showed "1 chain ..., no pending L1 checkpoint" (exit
    // 0) and `restore --rank 0` refused (exit 3) (helper-109).
    std::fs::remove_dir_all(job_dir.join("job")).unwrap();
    std::fs::remove_dir_all(&l1).unwrap();
    crate::util::copy_tree(&before, &l1);
    let out = run(&["status", "--l1", s(&l1), "--l2", &url]);
    assert!(out.status.success(), "{}", show(&["status"], &out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no job generation committed yet"), "{text}");
    for r in 0..4 {
        let line = format!(
            "rank {r} L1 {}: 3 pending L1 checkpoints (seq 0..=2",
            l1.join(r.to_string()).display()
        );
        assert!(text.contains(&line), "{text}");
    }
    let out = run(&["status", "--l1", s(&l1), "--l2", &url, "--rank", "2"]);
    assert!(out.status.success(), "{}", show(&["status --rank 2"], &out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("rank 2 of the MPI job at"));
    for r in 0..4 {
        let img = d.path().join(format!("u{r}.rexic"));
        let rank = r.to_string();
        let args = [
            "restore",
            "--l1",
            s(&l1),
            "--l2",
            &url,
            "--rank",
            &rank,
            "-o",
            s(&img),
        ];
        let out = run(&args);
        assert!(out.status.success(), "{}", show(&args, &out));
        assert!(
            compare_ic_files(&img, &truth.join(format!("{r}.rexic")))
                .unwrap()
                .is_equal(),
            "rank {r} restored from L1/{r}, nothing committed, differs"
        );
    }
}

/// A restore from a bucket interrupted (SIGTERM) while it fetches: it
/// leaves neither its cache of fetched objects (the first version of the
/// signal sweep removed only temporary files: the lineage fetched so far
/// stayed in the cache directory) nor an image; the next restore is exact.
#[test]
fn s3_interrupted_restore_leaves_no_cache() {
    use std::os::unix::process::ExitStatusExt;
    let Some(server) = S3Server::start("rex-sigterm") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let job = s3_job(d.path(), &server, "sigterm");
    let truth = job.work.join("truth");
    let mut w = workload("incompressible", 12288, 9);
    let seq0 = take_until(&mut w, &job.l1, 0, &truth);
    job.push(&[]);
    let cache = job.work.join("cache");
    let dir = job.work.join("restored");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("image.rexic");
    let l2 = job.l2();
    let args = ["restore", "--l2", &l2, "--out", s(&out)];
    let mut interrupted = false;
    for _ in 0..10 {
        // Once a fetched object's file shows in the cache.
        let fetched = || {
            std::fs::read_dir(&cache)
                .into_iter()
                .flatten()
                .flatten()
                .flat_map(|e| std::fs::read_dir(e.path()).into_iter().flatten().flatten())
                .count()
                > 0
        };
        let (st, landed) = crate::util::signal_when(job.cmd(&args), fetched, libc::SIGTERM);
        let left: Vec<_> = std::fs::read_dir(&cache).into_iter().flatten().collect();
        assert!(
            left.is_empty(),
            "the restore left {left:?} in its cache directory"
        );
        if landed && st.signal() == Some(libc::SIGTERM) {
            assert!(!out.exists(), "an interrupted restore left an image");
            interrupted = true;
            break;
        }
        assert!(st.success(), "{st:?}");
        std::fs::remove_file(&out).unwrap();
    }
    assert!(interrupted, "no restore was interrupted while it fetched");
    job.restore_exact(false, &[], &seq0, "restore after the interrupted one");
}

/// A multipart upload that another process aborts while it runs (`rexctl
/// gc --grace 0`, or another push's recovery on the prefix: they abort the
/// uploads whose intent is older than their grace) fails as what it is,
/// exit 1, and publishes nothing (helper-90: the server's refusal of the
/// next part read as rejected credentials, exit 5).
#[test]
fn s3_an_upload_another_process_aborts_is_said_so() {
    use rexctl::durable::Piece;
    use rexctl::store::NoProgress;
    let Some(server) = S3Server::start("rex-abort") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let job = s3_job(d.path(), &server, "abort");
    let (pusher, gc) = (job.store_with_parts(5 << 20), job.store_with_parts(5 << 20));
    let body: Vec<u8> = (0..(16u32 << 20)).map(|i| (i % 249) as u8).collect();
    let mut pieces = vec![Piece::Data(vec![0; 64])];
    pieces.extend(body.chunks(1 << 20).map(|c| Piece::Data(c.to_vec())));
    pieces.push(Piece::End(vec![9; 64]));
    let mut sent = 0usize;
    let mut aborted = Vec::new();
    let mut stream = pieces.into_iter().inspect(|p| {
        if let Piece::Data(b) = p {
            sent += b.len();
        }
        // Two parts on their way: the other process aborts the upload (from
        // a thread of its own: the stream is read within the pusher's
        // runtime).
        if sent > (11 << 20) && aborted.is_empty() {
            aborted = std::thread::scope(|t| {
                t.spawn(|| gc.abort_stale_uploads(None).unwrap())
                    .join()
                    .unwrap()
            });
        }
    });
    let e = pusher
        .put_stream("g00000001.rps", 64, &mut stream, &NoProgress)
        .unwrap_err();
    drop(stream);
    assert_eq!(aborted.len(), 1, "the other process aborted no upload");
    let text = e.to_string();
    assert!(
        text.contains("aborted by another process"),
        "not said as an abort: {text}"
    );
    assert!(
        !text.contains("credentials") && !text.contains("failed too"),
        "{text}"
    );
    assert_eq!(e.exit_code(), 1, "{text}");
    assert!(
        !job.names().contains("g00000001.rps"),
        "the object was published"
    );
}

/// A multipart upload that runs longer than `gc`'s grace keeps its intent
/// fresh, so `gc` (or another push's recovery) aborts no upload in
/// progress: gc with a grace of 2 s, run 3 s into an upload that refreshes
/// its intent at every part (helper-90: every push longer than gc's grace,
/// an hour by default, was aborted by a gc from cron).
#[test]
fn s3_an_upload_longer_than_gc_s_grace_is_not_aborted() {
    use rexctl::durable::Piece;
    use rexctl::store::NoProgress;
    let Some(server) = S3Server::start("rex-slow") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let job = s3_job(d.path(), &server, "slow");
    let pusher = job.store_with(5 << 20, 0.0);
    let gc = job.store_with_parts(5 << 20);
    let body: Vec<u8> = (0..(16u32 << 20)).map(|i| (i % 247) as u8).collect();
    let head = vec![5u8; 64];
    let mut pieces = vec![Piece::Data(vec![0; 64])];
    pieces.extend(body.chunks(1 << 20).map(|c| Piece::Data(c.to_vec())));
    pieces.push(Piece::End(head.clone()));
    let mut sent = 0usize;
    let (mut slept, mut aborted) = (false, None);
    let mut stream = pieces.into_iter().inspect(|p| {
        if let Piece::Data(b) = p {
            sent += b.len();
        }
        // A slow writer: 3 s after the first parts, before the next one.
        if sent > (6 << 20) && !slept {
            std::thread::sleep(std::time::Duration::from_secs(3));
            slept = true;
        }
        // The next part went up, and the intent with it: gc now.
        if sent > (12 << 20) && aborted.is_none() {
            aborted = Some(std::thread::scope(|t| {
                t.spawn(|| {
                    gc.abort_stale_uploads(Some(std::time::Duration::from_secs(2)))
                        .unwrap()
                })
                .join()
                .unwrap()
            }));
        }
    });
    let got = pusher.put_stream("g00000001.rps", 64, &mut stream, &NoProgress);
    drop(stream);
    assert_eq!(
        aborted,
        Some(Vec::new()),
        "gc aborted the upload in progress"
    );
    let mut whole = head;
    whole.extend_from_slice(&body);
    assert_eq!(
        got.unwrap(),
        (whole.len() as u64, crc32fast::hash(&whole)),
        "the upload"
    );
}

/// Two copies of one job push to one bucket (a restart on another node
/// while the first still runs); a bucket has no writer lock. The copy
/// slowed past the other's commit of the same generation number used to
/// upload its data files over the committed ones (only its manifest was
/// refused): L2's newest generation no longer restored (helper-45). Its
/// uploads now fail before the objects appear, single PUT and multipart
/// alike, and the committed files stay; after a push's own manifest, its
/// files may be uploaded again (recovery of one gone missing).
#[test]
fn s3_a_generation_another_copy_committed_keeps_its_files() {
    use rexctl::durable::Piece;
    use rexctl::store::NoProgress;
    let Some(server) = S3Server::start("rex-fresh") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let job = s3_job(d.path(), &server, "fresh");
    let (a, b) = (job.store_with_parts(5 << 20), job.store_with_parts(5 << 20));
    let head = vec![7u8; 64];
    let put = |s: &dyn Store, name: &str, body: &[u8]| {
        let mut v = vec![Piece::Data(vec![0; 64])];
        v.extend(body.chunks(1 << 20).map(|c| Piece::Data(c.to_vec())));
        v.push(Piece::End(head.clone()));
        s.put_stream(name, 64, &mut v.into_iter(), &NoProgress)
    };
    let small: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let big: Vec<u8> = (0..(12u32 << 20)).map(|i| (i % 253) as u8).collect();
    // B starts writing generation 2; A writes and commits it first.
    b.writing_generation(Some(2));
    a.writing_generation(Some(2));
    put(a.as_ref(), "g00000002.rps", &small).unwrap();
    put(a.as_ref(), "g00000002.pf", &big).unwrap();
    a.put_bytes("g00000002.manifest", b"A's manifest").unwrap();
    a.writing_generation(None);
    let kept = [
        std::fs::read(job.object_file("g00000002.rps")).unwrap(),
        std::fs::read(job.object_file("g00000002.pf")).unwrap(),
    ];
    for (name, body) in [("g00000002.rps", &big), ("g00000002.pf", &small)] {
        let e = put(b.as_ref(), name, body).unwrap_err().to_string();
        assert!(e.contains("another copy of the job"), "{name}: {e}");
    }
    assert_eq!(
        std::fs::read(job.object_file("g00000002.rps")).unwrap(),
        kept[0]
    );
    assert_eq!(
        std::fs::read(job.object_file("g00000002.pf")).unwrap(),
        kept[1]
    );
    b.writing_generation(None);
    // A generation nobody committed goes up; after our own manifest its
    // files may go up again.
    b.writing_generation(Some(3));
    put(b.as_ref(), "g00000003.rps", &small).unwrap();
    b.put_bytes("g00000003.manifest", b"B's manifest").unwrap();
    put(b.as_ref(), "g00000003.rps", &small).unwrap();
    b.writing_generation(None);
    // Other generations' files are not concerned (healing an older one).
    b.writing_generation(Some(4));
    put(b.as_ref(), "g00000002.rps", &small).unwrap();
}

/// `restore --fallback` walks back past damaged data only: while the server
/// fails every GET of the newest generation's RPS (500), the restore fails
/// with exit 1 naming it, from L2 alone and from L1 plus L2 with L1's copy
/// damaged, and writes nothing. It restored the older generation with exit
/// 0 (helper-67; a librex restart then set aside the checkpoints after it
/// for good). Once the server sends it again, the newest state restores.
#[test]
fn s3_fallback_never_walks_back_past_an_object_the_server_failed_to_send() {
    let Some(server) = S3Server::start("rex-blip") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let job = s3_job(d.path(), &server, "blip");
    let truth = job.work.join("truth");
    let mut w = workload("balanced", 64, 9);
    take_until(&mut w, &job.l1, 1, &truth);
    job.push(&[]);
    let seq3 = take_until(&mut w, &job.l1, 3, &truth);
    job.push(&[]);
    let key = format!("ckpt/{}/{}/g00000002.rps", job.name, job.rank);
    let records = server.object_records(&key);
    let saved: Vec<Vec<u8>> = records.iter().map(|p| std::fs::read(p).unwrap()).collect();
    for p in &records {
        std::fs::write(p, "{not json").unwrap();
    }
    let copy = job.l1.join("rex/g00000002.rps");
    let mut b = std::fs::read(&copy).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 0x40;
    std::fs::write(&copy, &b).unwrap();
    let l2 = job.l2();
    for with_l1 in [false, true] {
        let out = job.work.join(format!("fallback-{with_l1}.rexic"));
        let mut args = vec!["restore", "--l2", &l2, "--out", s(&out), "--fallback"];
        if with_l1 {
            args.extend(["--l1", s(&job.l1)]);
        }
        let o = job.run(&args);
        let ctx = format!("restore --fallback (L1: {with_l1}) while the server fails");
        assert_fails(&o, 1, &["g00000002.rps"], &ctx);
        assert!(!out.exists(), "{ctx}");
    }
    for (p, b) in records.iter().zip(&saved) {
        std::fs::write(p, b).unwrap();
    }
    job.restore_exact(false, &["--fallback"], &seq3, "the server sends it again");
    job.restore_exact(true, &["--fallback"], &seq3, "and with L1");
}

/// The server answers every GET of the newest manifest with 503 SlowDown
/// (an overloaded service, after every retry): a restore, with
/// `--fallback` or not, from L2 alone or with L1, fails with exit 1 naming
/// the manifest and writes nothing; a push fails alike and writes nothing
/// over the committed generation. The manifest was taken for an invalid
/// one: `--fallback` (and every librex restart, which falls back) gave the
/// generation before with exit 0, a plain restore exit 3 advising
/// `--fallback`, and a push's recovery uploaded the committed manifest and
/// data files again (helper-83). Once the server answers, the newest states
/// restore exactly.
#[test]
fn s3_a_manifest_the_server_fails_to_send_is_never_taken_for_an_invalid_one() {
    let Some(server) = S3Server::start("rex-slowdown") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let mut job = s3_job(d.path(), &server, "slowdown");
    let truth = job.work.join("truth");
    let mut w = workload("balanced", 64, 12);
    take_until(&mut w, &job.l1, 1, &truth);
    job.push(&[]);
    let seq3 = take_until(&mut w, &job.l1, 3, &truth);
    job.push(&[]);
    let seq4 = take_until(&mut w, &job.l1, 4, &truth);
    let relay = fault::Faulty::to(
        server.port,
        Box::new(|method: &str, path: &str| {
            (method == "GET" && path.ends_with("/g00000002.manifest")).then_some((503, "SlowDown"))
        }),
    );
    job.env.push(("AWS_ENDPOINT_URL".into(), relay.endpoint()));
    job.env.push(("REX_S3_MAX_RETRIES".into(), "1".into()));
    let names = job.names();
    let manifest = job.object_file("g00000002.manifest");
    let committed = std::fs::read(&manifest).unwrap();
    let l2 = job.l2();
    for (with_l1, fallback) in [(false, false), (false, true), (true, true)] {
        let out = job.work.join(format!("r-{with_l1}-{fallback}.rexic"));
        let mut args = vec!["restore", "--l2", &l2, "--out", s(&out)];
        if with_l1 {
            args.extend(["--l1", s(&job.l1)]);
        }
        if fallback {
            args.push("--fallback");
        }
        let o = job.run(&args);
        let ctx = format!("restore (L1: {with_l1}, --fallback: {fallback}) while the server fails");
        let err = assert_fails(&o, 1, &["g00000002.manifest", "503"], &ctx);
        assert!(!err.contains("use --fallback"), "{ctx}: {err}");
        assert!(!out.exists(), "{ctx}");
    }
    let args = ["push-l2", "--l1", s(&job.l1), "--l2", &l2];
    let o = job.run(&args);
    assert_fails(
        &o,
        1,
        &["g00000002.manifest"],
        "push while the server fails",
    );
    assert!(
        relay.faults() >= 4,
        "{} requests answered 503",
        relay.faults()
    );
    assert_eq!(job.names(), names, "the failed push changed L2");
    assert_eq!(std::fs::read(&manifest).unwrap(), committed);
    job.env.retain(|(k, _)| k != "AWS_ENDPOINT_URL");
    job.restore_exact(false, &["--fallback"], &seq3, "the server answers again");
    job.restore_exact(true, &[], &seq4, "and with L1");
}

/// The server acknowledges the PUT of a push's manifest (200) and keeps
/// nothing: the push fails with exit 1 naming the manifest, keeps the
/// pending checkpoints, and L2 alone still restores the generation before;
/// a recovery whose upload is dropped again fails alike. It said "pushed
/// generation 2", deleted the batch, and left a generation only L1's copy
/// held (helper-83). With the server keeping what it acknowledges, the next
/// push uploads the generation again and L2 alone restores it.
#[test]
fn s3_a_manifest_the_server_acknowledges_and_drops_fails_the_push() {
    let Some(server) = S3Server::start("rex-dropped") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let mut job = s3_job(d.path(), &server, "dropped");
    let truth = job.work.join("truth");
    let mut w = workload("balanced", 64, 13);
    let seq1 = take_until(&mut w, &job.l1, 1, &truth);
    job.push(&[]);
    let seq3 = take_until(&mut w, &job.l1, 3, &truth);
    let pending = rexctl::l1::list_ic_files(&job.l1).unwrap().len();
    let relay = fault::Faulty::to(
        server.port,
        Box::new(|method: &str, path: &str| {
            (method == "PUT" && path.ends_with("/g00000002.manifest")).then_some((200, "OK"))
        }),
    );
    job.env.push(("AWS_ENDPOINT_URL".into(), relay.endpoint()));
    let l2 = job.l2();
    let args = ["push-l2", "--l1", s(&job.l1), "--l2", &l2];
    for attempt in ["the push", "its recovery"] {
        let o = job.run(&args);
        let err = assert_fails(&o, 1, &["g00000002.manifest", "does not hold it"], attempt);
        assert!(!err.contains("pushed generation"), "{attempt}: {err}");
        assert_eq!(
            rexctl::l1::list_ic_files(&job.l1).unwrap().len(),
            pending,
            "{attempt}: the pending checkpoints were deleted"
        );
        assert!(!job.names().contains("g00000002.manifest"), "{attempt}");
        job.restore_exact(false, &[], &seq1, attempt);
        job.restore_exact(true, &[], &seq3, attempt);
    }
    assert_eq!(relay.faults(), 2);
    job.env.retain(|(k, _)| k != "AWS_ENDPOINT_URL");
    job.push(&[]);
    job.restore_exact(false, &[], &seq3, "after the server keeps it");
}
