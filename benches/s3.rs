//! Push and restore throughput of the S3 backend against a local S3 server
//! (`s3s-fs` on 127.0.0.1), beside the directory backend, in one run.
//!
//! `cargo bench --bench s3` pushes one complete coalescence of an
//! incompressible workload (so that L2 objects are as large as the image)
//! to each backend, restores it from L2 alone, and restores a few pages
//! with `--pages`; each measurement is the best of `REX_BENCH_RUNS` (3)
//! runs. The figures are printed and written into `docs/PERFORMANCE.md`
//! between the markers `<!-- s3:begin -->` and `<!-- s3:end -->` (appended
//! when absent; the rest of the file is left alone). `REX_BENCH_PAGES`
//! sets the footprint in 4 KiB pages (default 32768, 128 MiB).
//!
//! The server must be installed (`cargo install s3s-fs@0.14.1 --features
//! binary`, or `REX_S3S_FS`).

#[path = "../tests/it/s3/server.rs"]
mod server;

use std::path::{Path, PathBuf};
use std::time::Instant;

use rexctl::eval::workload::{Workload, profile};
use rexctl::l2::push::{Job, PushOptions, push_l2};
use rexctl::l2::restore::{RestoreOptions, parse_page_ranges, restore_l2};
use rexctl::store::open_l2;
use rexctl::store::settings::{S3Settings, Secret, StoreSettings};
use server::S3Server;

struct Figures {
    backend: &'static str,
    l2_bytes: u64,
    image_bytes: u64,
    push_s: f64,
    upload_s: f64,
    restore_s: f64,
    pages_s: f64,
    pages_fetched: Option<u64>,
    /// Seconds to materialize the generation's objects (the restore's
    /// fetch phase; 0 for a directory, which is mapped in place).
    fetch_s: f64,
    /// Seconds of one plain GET of the RPS, one request (S3 only): what the
    /// server and the link give a single stream.
    one_get_s: Option<f64>,
    /// Seconds of one plain PUT of as many bytes, one request (S3 only).
    one_put_s: Option<f64>,
    /// Size of the RPS.
    rps_bytes: u64,
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn settings(server: Option<&S3Server>, part_size: u64, cache: &Path) -> StoreSettings {
    let mut s = StoreSettings {
        job: Some("bench".into()),
        rank: "0".into(),
        cache_dir: Some(cache.to_path_buf()),
        ..Default::default()
    };
    if let Some(server) = server {
        s.s3 = S3Settings {
            endpoint: Some(server.endpoint()),
            region: Some("us-east-1".into()),
            allow_http: Some(true),
            part_size,
            access_key_id: Some(server::ACCESS_KEY.into()),
            secret_access_key: Some(Secret(server::SECRET_KEY.into())),
            ..Default::default()
        };
    }
    s
}

/// One run: a fresh L1 with the workload's FULL checkpoint and one
/// incremental, pushed to a fresh L2 location, then restored.
fn run_once(
    backend: &'static str,
    l2: &Path,
    server: Option<&S3Server>,
    part_size: u64,
    pages: u64,
    work: &Path,
) -> Figures {
    let l1 = work.join("l1");
    let _ = std::fs::remove_dir_all(&l1);
    let mut p = profile("incompressible").expect("profile");
    p.pages = pages;
    let mut w = Workload::new(p, 1).expect("workload");
    std::fs::create_dir_all(&l1).expect("l1");
    w.checkpoint(&l1).expect("checkpoint");
    w.checkpoint(&l1).expect("checkpoint");
    // The first 16 live pages, for the `--pages` restore.
    let keys: Vec<u64> = w.image().keys().copied().take(16).collect();
    let ranges = format!("{:#x}-{:#x}", keys[0], keys[keys.len() - 1]);
    let st = settings(server, part_size, work);
    let job = Job::open(&l1, open_l2(l2, &st, true).expect("open L2")).expect("job");
    let t = Instant::now();
    let r = push_l2(&job, &PushOptions::default()).expect("push");
    let push_s = t.elapsed().as_secs_f64();
    let m = r.manifest.expect("pushed");
    drop(job);

    let out = work.join("restored.rexic");
    let store = open_l2(l2, &st, false).expect("open L2");
    let t = Instant::now();
    let rr = restore_l2(store.as_ref(), &RestoreOptions::default(), &out).expect("restore");
    let restore_s = t.elapsed().as_secs_f64();
    drop(store);

    let store = open_l2(l2, &st, false).expect("open L2");
    store.read_on_demand(true);
    let before = store.stats().map(|s| s.bytes_fetched);
    let opts = RestoreOptions {
        pages: Some(parse_page_ranges(&ranges).expect("ranges")),
        ..Default::default()
    };
    let t = Instant::now();
    let pr = restore_l2(store.as_ref(), &opts, &out).expect("restore --pages");
    assert_eq!(pr.pages, 16, "the --pages restore restores 16 pages");
    let pages_s = t.elapsed().as_secs_f64();
    let pages_fetched = store.stats().map(|s| s.bytes_fetched - before.unwrap_or(0));
    let _ = std::fs::remove_file(&out);
    drop(store);

    // The fetch phase alone: every object of the generation materialized.
    let store = open_l2(l2, &st, false).expect("open L2");
    let t = Instant::now();
    for f in &m.files {
        store.open_local(&f.name).expect("fetch");
    }
    let fetch_s = if server.is_some() {
        t.elapsed().as_secs_f64()
    } else {
        0.0
    };
    drop(store);
    let rps = m.files.iter().max_by_key(|f| f.bytes).expect("files");
    let one_get_s =
        server.map(|srv| one_get(srv, &format!("{}/bench/0/{}", l2_prefix(l2), rps.name)));
    let one_put_s =
        server.map(|srv| one_put(srv, &format!("{}/one-put", l2_prefix(l2)), rps.bytes));
    Figures {
        backend,
        l2_bytes: m.bytes_out,
        image_bytes: rr.bytes,
        push_s,
        upload_s: m.timings.upload_s,
        restore_s,
        pages_s,
        pages_fetched,
        fetch_s,
        one_get_s,
        one_put_s,
        rps_bytes: rps.bytes,
    }
}

/// The key prefix of an `s3://bucket/prefix` location.
fn l2_prefix(l2: &Path) -> String {
    let t = l2.to_str().expect("utf-8");
    let rest = t.strip_prefix("s3://").expect("an s3:// URL");
    rest.split_once('/')
        .map(|(_, p)| p.to_string())
        .unwrap_or_default()
}

/// Seconds of one plain GET of `key`, read whole, through `object_store`
/// directly: the single-stream baseline of the server and the link.
fn client(server: &S3Server) -> (object_store::aws::AmazonS3, tokio::runtime::Runtime) {
    let s3 = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(server.endpoint())
        .with_bucket_name(&server.bucket)
        .with_region("us-east-1")
        .with_access_key_id(server::ACCESS_KEY)
        .with_secret_access_key(server::SECRET_KEY)
        .with_allow_http(true)
        .build()
        .expect("client");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    (s3, rt)
}

/// Seconds of one plain PUT of `bytes` bytes to `key`, one request: the
/// single-stream upload baseline.
fn one_put(server: &S3Server, key: &str, bytes: u64) -> f64 {
    use object_store::ObjectStoreExt;
    let (s3, rt) = client(server);
    let path = object_store::path::Path::from(key);
    let data: Vec<u8> = (0..bytes).map(|i| ((i * 2654435761) >> 13) as u8).collect();
    let t = Instant::now();
    rt.block_on(s3.put(&path, data.into())).expect("PUT");
    let s = t.elapsed().as_secs_f64();
    rt.block_on(s3.delete(&path)).expect("DELETE");
    s
}

fn one_get(server: &S3Server, key: &str) -> f64 {
    use object_store::ObjectStoreExt;
    let (s3, rt) = client(server);
    let path = object_store::path::Path::from(key);
    let t = Instant::now();
    let n = rt
        .block_on(async { s3.get(&path).await?.bytes().await })
        .expect("GET")
        .len();
    assert!(n > 0);
    t.elapsed().as_secs_f64()
}

fn best(runs: Vec<Figures>) -> Figures {
    let min = |f: &dyn Fn(&Figures) -> f64| runs.iter().map(f).fold(f64::INFINITY, f64::min);
    let (push_s, upload_s, restore_s, pages_s, fetch_s) = (
        min(&|r| r.push_s),
        min(&|r| r.upload_s),
        min(&|r| r.restore_s),
        min(&|r| r.pages_s),
        min(&|r| r.fetch_s),
    );
    let one_get_s = runs.iter().filter_map(|r| r.one_get_s).reduce(f64::min);
    let one_put_s = runs.iter().filter_map(|r| r.one_put_s).reduce(f64::min);
    let first = runs.into_iter().next().expect("a run");
    Figures {
        push_s,
        upload_s,
        restore_s,
        pages_s,
        fetch_s,
        one_get_s,
        one_put_s,
        ..first
    }
}

fn mbs(bytes: u64, s: f64) -> f64 {
    bytes as f64 / s / 1e6
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let pages = env_num("REX_BENCH_PAGES", 32768);
    let runs = env_num("REX_BENCH_RUNS", 3).max(1);
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into());
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let server = S3Server::start("rex-bench")
        .expect("s3s-fs (REX_SKIP_S3_TESTS does not apply to the bench)");
    let work = tempfile::tempdir().expect("temp dir");
    let mut results = Vec::new();
    let default_part = rexctl::store::settings::DEFAULT_S3_PART_SIZE;
    for (backend, part) in [
        ("directory", default_part),
        ("s3", default_part),
        ("s3, single PUTs", 1 << 30),
    ] {
        let mut all = Vec::new();
        for i in 0..runs {
            let tag = format!("{}-{i}", backend.replace([',', ' '], ""));
            let w = work.path().join(&tag);
            std::fs::create_dir_all(&w).expect("work dir");
            let (l2, srv): (PathBuf, Option<&S3Server>) = match backend {
                "directory" => (w.join("l2"), None),
                _ => (PathBuf::from(server.url(&tag)), Some(&server)),
            };
            all.push(run_once(backend, &l2, srv, part, pages, &w));
            let _ = std::fs::remove_dir_all(&w);
        }
        results.push(best(all));
    }
    let mut table = String::new();
    table.push_str(&format!(
        "- Machine: {cpus} CPUs, load average {load} at the start (the server, the client and any \
         other load share them: trust the ratios between backends, not the absolute MB/s)\n\
         - Reproduce: `cargo bench --bench s3` (`REX_BENCH_PAGES`, `REX_BENCH_RUNS`)\n\n"
    ));
    table.push_str(&format!(
        "L2 backends, same run: one complete coalescence of an incompressible workload \
         ({pages} pages of 4 KiB, {:.0} MiB image), best of {runs} runs; `s3` is `s3s-fs` 0.14.1 on \
         127.0.0.1 (SigV4-checked, storing on the same disk), part size 16 MiB, 4 parts and 8 GETs in \
         flight. Push = coalesce + deduplicate + upload, the RPS and Pointer File streaming to L2 while they are \
         written; upload wait = the manifest's `upload_s`, what the push waited for its uploads once the \
         Deduplication Unit was done; restore = \
         `restore --l2` of the whole image (for S3, the RPS and Pointer File stream into the cache while \
         the restore decodes them); pages = \
         `restore --l2 --pages` of 16 pages (bytes fetched: what that restore fetched from the bucket).\n\n",
        results[0].image_bytes as f64 / (1u64 << 20) as f64
    ));
    table.push_str(
        "| backend | L2 bytes | push s | upload wait s | one PUT MB/s | restore s | restore MB/s (L2 bytes) | \
         restore MB/s (image) | fetch MB/s | one GET MB/s | `--pages` s | `--pages` bytes fetched |\n",
    );
    table.push_str(
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    let na = || "-".to_string();
    for r in &results {
        table.push_str(&format!(
            "| {} | {} | {:.3} | {:.3} | {} | {:.3} | {:.0} | {:.0} | {} | {} | {:.3} | {} |\n",
            r.backend,
            r.l2_bytes,
            r.push_s,
            r.upload_s,
            r.one_put_s
                .map(|s| format!("{:.0}", mbs(r.rps_bytes, s)))
                .unwrap_or_else(na),
            r.restore_s,
            mbs(r.l2_bytes, r.restore_s),
            mbs(r.image_bytes, r.restore_s),
            if r.fetch_s > 0.0 {
                format!("{:.0}", mbs(r.l2_bytes, r.fetch_s))
            } else {
                na()
            },
            r.one_get_s
                .map(|s| format!("{:.0}", mbs(r.rps_bytes, s)))
                .unwrap_or_else(na),
            r.pages_s,
            r.pages_fetched
                .map(|b| b.to_string())
                .unwrap_or_else(|| "(mapped in place)".into())
        ));
    }
    table.push_str(
        "\nfetch MB/s: fetching alone, nothing decoded (every object of the generation into the cache, \
         ranged GETs of 8 MiB, 8 in flight); the restore streams the objects it decodes, so its time \
         is about this fetch's where the link is the slower stage; one GET / one PUT MB/s: a plain GET of the RPS / PUT of \
         as many bytes, one request, through `object_store` directly, which is what the server and \
         the link give one stream. \
         `s3s-fs` stores no ETag for an object completed by a multipart upload, so it recomputes the \
         MD5 of the whole object for every GET and HEAD of it, ranged or not; the `s3, single PUTs` \
         row (part size 1 GiB, every object one PUT) shows the same transfers without that \
         server-side cost, closer to what a real S3 service gives. The \
         `--pages` restore fetches the manifest, the P-Table, the RPS's and the Pointer File's headers \
         and chunk tables, and the 1 MiB chunks its pages point into.\n",
    );
    print!("{table}");
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/PERFORMANCE.md");
    write_section(&doc, &table);
    println!("written to {}", doc.display());
}

/// Replaces the text between the markers (appending them when absent).
fn write_section(doc: &Path, body: &str) {
    const BEGIN: &str = "<!-- s3:begin -->";
    const END: &str = "<!-- s3:end -->";
    let text = std::fs::read_to_string(doc).unwrap_or_default();
    let section = format!("{BEGIN}\n{body}{END}");
    let new = match (text.find(BEGIN), text.find(END)) {
        (Some(a), Some(b)) if a < b => format!("{}{section}{}", &text[..a], &text[b + END.len()..]),
        _ => {
            let sep = if text.is_empty() || text.ends_with("\n\n") {
                ""
            } else if text.ends_with('\n') {
                "\n"
            } else {
                "\n\n"
            };
            format!("{text}{sep}## L2 on object storage (S3)\n\n{section}\n")
        }
    };
    std::fs::write(doc, new).expect("write docs/PERFORMANCE.md");
}
