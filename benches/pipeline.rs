//! Pipeline benchmark: the Deduplication Unit and the restore, in MB/s of
//! checkpoint data, beside baselines measured in the same run.
//!
//! For each generated profile (`balanced`, `small-inc`, `incompressible`;
//! 8192 pages of 4 KiB, a FULL checkpoint and 12 incrementals), the setup
//! writes the IC files into a temporary directory (on `/dev/shm` when it
//! exists, so that the outputs' fsync costs nothing and the figures are the
//! stages' own), then pushes them as a five-generation chain (batches of
//! 1, 3, 3, 3 and 3 checkpoints). Then:
//!
//! * `dedup-<profile>`: the Deduplication Unit on a Δ batch (the three
//!   incrementals after the FULL one, on top of the FULL generation) and on
//!   a full batch (the FULL checkpoint alone: a complete coalescence), with
//!   each DeD-Table hash; throughput is the batch's C-List bytes. Beside
//!   them, `memcpy` of as many bytes.
//! * `restore-<profile>`: the newest generation's image rebuilt into memory
//!   (`decode`: open the chain, verify it, rebuild every live page in place
//!   into one buffer, as `rexctl restore` does minus the output file), restored to a REX-IC file on tmpfs (`restore-tmpfs`: what
//!   `rexctl restore --l2` does, fsync included but free there) and on the
//!   ext4 disk (`restore-disk`: the fsync is real); beside them, `memcpy` of
//!   the image and `ic-apply`, the restore a user without REX would do:
//!   read the FULL file then each incremental in order, checking each page's
//!   CRC and applying drops and pages to a `BTreeMap`. Throughput is the
//!   image's bytes for all of them. `pf-decode`: the Pointer Files' pointer
//!   coding alone (every chunk of the lineage, zstd undone in the setup),
//!   in bytes of decoded pointers.
//!
//! Beside them, `write-tmpfs` and `write-disk` write the image's bytes to a
//! new file (fsync on disk) and rename it: the output I/O alone.
//!
//! Run: `cargo bench --bench pipeline` (`-- dedup-balanced` to filter the
//! benches, `REX_BENCH_PROFILES=balanced` to skip the other setups). At the
//! end it prints a table of MB/s and ratios to the baselines, read back from
//! criterion's estimates of this run.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use criterion::{BenchmarkGroup, Criterion, Throughput, measurement::WallTime};
use rexctl::eval::workload::{Workload, profile};
use rexctl::format::chunked::{DEFAULT_LEVEL, Encoding, WriteFormat};
use rexctl::format::ic::{IcFile, IcMeta};
use rexctl::l1::coalesce::CList;
use rexctl::l2::chain::{ChainIndex, OpenChain};
use rexctl::l2::dedup::{DedupJob, deduplicate};
use rexctl::l2::dedup_table::{Crc32Hasher, Xxh3Hasher};
use rexctl::l2::push::{Job, PushOptions, push_l2};
use rexctl::l2::restore::{RestoreOptions, restore_l2};
use rexctl::store::DirStore;

const PAGES: u64 = 8192;
const CHECKPOINTS: u64 = 12;
/// Checkpoints per push: the FULL one, then batches of three.
const BATCHES: [u64; 5] = [1, 3, 3, 3, 3];
const PROFILES: [&str; 3] = ["balanced", "small-inc", "incompressible"];

/// (group, bench, bytes per iteration) of every registered bench, for the
/// summary.
static REGISTERED: Mutex<Vec<(String, String, u64)>> = Mutex::new(Vec::new());

struct Fixture {
    _tmp: tempfile::TempDir,
    _disk: tempfile::TempDir,
    /// Every IC file, seq order (never deleted: L1 gets hard links).
    ics: Vec<PathBuf>,
    /// The five-generation chain.
    l2: PathBuf,
    /// Scratch output directory (tmpfs when available).
    out: PathBuf,
    /// Scratch output directory on the ext4 disk.
    disk_out: PathBuf,
    /// Bytes of the newest generation's image.
    image_bytes: u64,
}

fn scratch_root() -> Option<&'static Path> {
    let shm = Path::new("/dev/shm");
    shm.is_dir().then_some(shm)
}

fn fixture(name: &str) -> Fixture {
    let tmp = match scratch_root() {
        Some(r) => tempfile::tempdir_in(r).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let disk = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let root = tmp.path();
    let (icdir, l1, l2, out) = (
        root.join("ics"),
        root.join("l1"),
        root.join("l2"),
        root.join("out"),
    );
    for d in [&icdir, &l1, &out] {
        std::fs::create_dir_all(d).unwrap();
    }
    let mut p = profile(name).unwrap();
    p.pages = PAGES;
    p.checkpoints = CHECKPOINTS;
    let mut w = Workload::new(p, 1).unwrap();
    let ics: Vec<PathBuf> = (0..=CHECKPOINTS)
        .map(|_| w.checkpoint(&icdir).unwrap())
        .collect();
    let image_bytes = w.image().values().map(|v| v.len() as u64).sum();
    let job = Job::open(&l1, Box::new(DirStore::create(&l2).unwrap())).unwrap();
    let mut seq = 0usize;
    for n in BATCHES {
        for _ in 0..n {
            let f = &ics[seq];
            std::fs::hard_link(f, l1.join(f.file_name().unwrap())).unwrap();
            seq += 1;
        }
        push_l2(&job, &PushOptions::default()).unwrap();
    }
    assert_eq!(seq as u64, CHECKPOINTS + 1);
    Fixture {
        disk_out: disk.path().to_path_buf(),
        _tmp: tmp,
        _disk: disk,
        ics,
        l2,
        out,
        image_bytes,
    }
}

fn register(g: &mut BenchmarkGroup<'_, WallTime>, group: &str, id: &str, bytes: u64) {
    g.throughput(Throughput::BytesDecimal(bytes));
    REGISTERED
        .lock()
        .unwrap()
        .push((group.into(), id.into(), bytes));
}

/// Copies `bytes` bytes between two pre-faulted buffers, 1 MiB at a time.
fn memcpy_bench(g: &mut BenchmarkGroup<'_, WallTime>, group: &str, bytes: u64) {
    let src: Vec<u8> = (0..bytes).map(|i| (i * 7 + (i >> 12)) as u8).collect();
    let mut dst = vec![1u8; bytes as usize];
    register(g, group, "memcpy", bytes);
    g.bench_function("memcpy", |b| {
        b.iter(|| {
            for (d, s) in dst.chunks_mut(1 << 20).zip(src.chunks(1 << 20)) {
                d.copy_from_slice(s);
            }
            black_box(&mut dst);
        })
    });
}

fn metas(paths: &[PathBuf]) -> Vec<IcMeta> {
    paths.iter().map(|p| IcMeta::read(p).unwrap()).collect()
}

fn dedup_group(c: &mut Criterion, name: &str, fx: &Fixture) {
    let group = format!("dedup-{name}");
    let mut g = c.benchmark_group(&group);
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let store = DirStore::open(&fx.l2).unwrap();
    let index = ChainIndex::load(&store).unwrap();
    let g1 = *index.manifests.keys().next().unwrap();
    let delta_batch = metas(&fx.ics[1..4]);
    let delta_clist = CList::build(&delta_batch).unwrap();
    let full_batch = metas(&fx.ics[..1]);
    let full_clist = CList::build(&full_batch).unwrap();
    let run = |batch: &[IcMeta], clist: &CList, delta: bool, xxh3: bool, level: i32| {
        // Opening the chain belongs to the stage: its chunks are verified
        // lazily as the deduplication touches them.
        let chain = delta.then(|| OpenChain::open(&store, &index, g1).unwrap());
        let job = DedupJob {
            generation: 100,
            page_size: 4096,
            pattern_size: 32,
            batch,
            clist,
            chain: chain.as_ref(),
            full: !delta,
            dir: &fx.out,
            format: WriteFormat {
                encoding: Encoding {
                    level,
                    ..Default::default()
                },
                ..Default::default()
            },
            table_memory: rexctl::l2::dedup::DEFAULT_DEDUP_MEMORY,
            xrefs: &[],
            upload: None,
        };
        if xxh3 {
            deduplicate(&job, Xxh3Hasher::new()).unwrap()
        } else {
            deduplicate(&job, Crc32Hasher::new()).unwrap()
        }
    };
    let delta_bytes = run(&delta_batch, &delta_clist, true, false, 0).bytes_in;
    let full_bytes = run(&full_batch, &full_clist, false, false, 0).bytes_in;
    // `-raw`: the Deduplication Unit alone (chunks stored raw, CRCs still
    // computed); the others include the entropy stage (zstd at the default
    // level) on the same thread, as a push with `threads = 1` runs it.
    let zstd = DEFAULT_LEVEL;
    for (id, delta, xxh3, level) in [
        ("delta-crc32", true, false, zstd),
        ("delta-xxh3", true, true, zstd),
        ("delta-xxh3-raw", true, true, 0),
        ("full-crc32", false, false, zstd),
        ("full-xxh3", false, true, zstd),
        ("full-xxh3-raw", false, true, 0),
    ] {
        let (batch, clist, bytes) = if delta {
            (&delta_batch, &delta_clist, delta_bytes)
        } else {
            (&full_batch, &full_clist, full_bytes)
        };
        register(&mut g, &group, id, bytes);
        g.bench_function(id, |b| {
            b.iter(|| black_box(run(batch, clist, delta, xxh3, level)))
        });
    }
    memcpy_bench(&mut g, &group, delta_bytes);
    g.finish();
}

/// The restore without REX: apply the IC files in order to a map.
fn ic_apply(paths: &[PathBuf]) -> BTreeMap<u64, Vec<u8>> {
    let mut map: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    for p in paths {
        let f = IcFile::open(p).unwrap();
        let m = f.meta();
        if m.is_full() {
            map.clear();
        }
        for d in &m.drops {
            let doomed: Vec<u64> = map.range(d.first..d.end()).map(|(&k, _)| k).collect();
            for k in doomed {
                map.remove(&k);
            }
        }
        for (pp, &page) in m.pages.iter().enumerate() {
            let data = f.page(pp).unwrap();
            match map.get_mut(&page) {
                Some(v) => v.copy_from_slice(data),
                None => {
                    map.insert(page, data.to_vec());
                }
            }
        }
    }
    map
}

fn restore_group(c: &mut Criterion, name: &str, fx: &Fixture) {
    let group = format!("restore-{name}");
    let mut g = c.benchmark_group(&group);
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let bytes = fx.image_bytes;
    let store = DirStore::open(&fx.l2).unwrap();
    let mut image = vec![0u8; bytes as usize];
    let decode = |image: &mut [u8]| {
        let index = ChainIndex::load(&store).unwrap();
        let newest = index.newest().unwrap().generation;
        let chain = OpenChain::open(&store, &index, newest).unwrap();
        // What a full restore does, minus the output file (and on one
        // thread): rebuild each live page in place, decoding chunks as
        // pages need them and giving each back after its last page.
        let decoder = chain.decoder();
        let ps = decoder.page_size();
        let live = chain.live_pages();
        let uses = decoder.count_uses(&live, |lp| Some(*lp), 1).unwrap();
        let mut at = 0;
        for &lp in &live {
            // SAFETY: `uses` counted every live page, each read once here,
            // and nothing else reads the chain meanwhile.
            unsafe { decoder.read_page_releasing(lp, &mut image[at..at + ps], &uses) }.unwrap();
            at += ps;
        }
        at
    };
    assert_eq!(
        decode(&mut image) as u64,
        bytes,
        "the chain restores the generator's image"
    );
    register(&mut g, &group, "decode", bytes);
    g.bench_function("decode", |b| b.iter(|| black_box(decode(&mut image))));
    for (id, dir) in [("restore-tmpfs", &fx.out), ("restore-disk", &fx.disk_out)] {
        let out = dir.join("image.rexic");
        register(&mut g, &group, id, bytes);
        g.bench_function(id, |b| {
            b.iter(|| {
                black_box(
                    restore_l2(&store, &RestoreOptions::default(), &out)
                        .unwrap()
                        .bytes,
                )
            })
        });
    }
    pf_decode_bench(&mut g, &group, &chain_pf_streams(&store));
    memcpy_bench(&mut g, &group, bytes);
    // The output's I/O alone: the image's bytes written to a new file and
    // renamed over the previous one, as the restore publishes its output.
    let src = vec![7u8; bytes as usize];
    for (id, dir, sync) in [
        ("write-tmpfs", &fx.out, false),
        ("write-disk", &fx.disk_out, true),
    ] {
        let (tmp, out) = (dir.join("w.tmp"), dir.join("w.out"));
        register(&mut g, &group, id, bytes);
        g.bench_function(id, |b| {
            b.iter(|| {
                let mut f = std::fs::File::create(&tmp).unwrap();
                for c in src.chunks(1 << 20) {
                    f.write_all(c).unwrap();
                }
                if sync {
                    f.sync_all().unwrap();
                }
                std::fs::rename(&tmp, &out).unwrap();
            })
        });
    }
    let applied = ic_apply(&fx.ics);
    assert_eq!(applied.len() as u64 * 4096, bytes);
    drop(applied);
    register(&mut g, &group, "ic-apply", bytes);
    g.bench_function("ic-apply", |b| {
        b.iter(|| black_box(ic_apply(&fx.ics).len()))
    });
    g.finish();
}

/// Every Pointer File chunk of the newest generation's lineage as stored
/// (zstd undone): (coded pointer stream, pointers, `prev` coding). Checked
/// against the reader's own decode.
fn chain_pf_streams(store: &DirStore) -> Vec<(Vec<u8>, usize, bool)> {
    use rexctl::format::chunked::{Codec, Coding};
    let index = ChainIndex::load(store).unwrap();
    let chain = OpenChain::open(store, &index, index.newest().unwrap().generation).unwrap();
    let mut streams = Vec::new();
    for g in &chain.gens {
        let Coding::Pointers { prev } = g.pf.header().coding else {
            panic!("the pipeline bench's chain has coded Pointer Files");
        };
        let file = std::fs::read(g.pf.path()).unwrap();
        for k in 0..g.pf.chunk_count() {
            let (off, len, codec) = g.pf.stored_chunk(k).unwrap();
            let stored = &file[off as usize..off as usize + len as usize];
            let coded = match codec {
                Codec::Raw => stored.to_vec(),
                Codec::Zstd => zstd::stream::decode_all(stored).unwrap(),
                Codec::ZstdLanes(_) => panic!("a Pointer File chunk in byte lanes"),
            };
            let want = g.pf.chunk_payload(k).unwrap();
            let mut out = vec![0u8; want.len()];
            rexctl::format::pointer_coding::decode(&coded, &mut out, prev).unwrap();
            assert_eq!(out, want, "the stream decodes as the reader's chunk");
            streams.push((coded, want.len() / 4, prev));
        }
    }
    streams
}

/// `pf-decode`: the pointer coding's decoder alone over `streams`, into
/// one buffer; throughput is the decoded pointers' bytes.
fn pf_decode_bench(
    g: &mut BenchmarkGroup<'_, WallTime>,
    group: &str,
    streams: &[(Vec<u8>, usize, bool)],
) {
    let pointers: usize = streams.iter().map(|s| s.1).sum();
    let mut out = vec![0u8; streams.iter().map(|s| s.1).max().unwrap_or(0) * 4];
    register(g, group, "pf-decode", pointers as u64 * 4);
    g.bench_function("pf-decode", |b| {
        b.iter(|| {
            for (coded, n, prev) in streams {
                rexctl::format::pointer_coding::decode(coded, &mut out[..n * 4], *prev).unwrap();
            }
            black_box(&mut out);
        })
    });
}

/// Mean seconds per iteration of a bench, from criterion's estimates, if
/// it ran in this process.
fn mean_seconds(group: &str, id: &str, since: SystemTime) -> Option<f64> {
    let home = std::env::var_os("CRITERION_HOME")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("CARGO_TARGET_DIR").map(|t| PathBuf::from(t).join("criterion"))
        })
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/criterion"));
    let path = home.join(group).join(id).join("new/estimates.json");
    if std::fs::metadata(&path).ok()?.modified().ok()? < since {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
    Some(v["mean"]["point_estimate"].as_f64()? / 1e9)
}

fn summary(since: SystemTime) {
    let reg = REGISTERED.lock().unwrap().clone();
    let mut groups: Vec<&str> = reg.iter().map(|r| r.0.as_str()).collect();
    groups.dedup();
    println!(
        "\n{:<26} {:<14} {:>10} {:>10} {:>10}",
        "group", "bench", "MB/s", "/memcpy", "/ic-apply"
    );
    for grp in groups {
        let rate = |id: &str| {
            let (_, _, bytes) = reg.iter().find(|r| r.0 == grp && r.1 == id)?;
            Some(*bytes as f64 / mean_seconds(grp, id, since)? / 1e6)
        };
        let (memcpy, apply) = (rate("memcpy"), rate("ic-apply"));
        for (_, id, _) in reg.iter().filter(|r| r.0 == grp) {
            let Some(r) = rate(id) else { continue };
            let ratio = |base: Option<f64>| {
                base.map(|b| format!("{:.3}", r / b))
                    .unwrap_or_else(|| "-".into())
            };
            println!(
                "{grp:<26} {id:<14} {r:>10.0} {:>10} {:>10}",
                ratio(memcpy),
                ratio(apply)
            );
        }
    }
}

fn main() {
    let since = SystemTime::now();
    let mut c = Criterion::default().configure_from_args();
    // REX_BENCH_PROFILES=balanced,small-inc limits the (slow) setups.
    let only = std::env::var("REX_BENCH_PROFILES").ok();
    for name in PROFILES {
        if only
            .as_ref()
            .is_some_and(|o| !o.split(',').any(|p| p == name))
        {
            continue;
        }
        let fx = fixture(name);
        dedup_group(&mut c, name, &fx);
        restore_group(&mut c, name, &fx);
    }
    c.final_summary();
    summary(since);
}
