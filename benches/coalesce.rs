//! Coalescing benchmark: building the C-List of a 1 GiB batch (8 files of
//! 32768 pages of 4 KiB, half of each file's pages rewritten by the next),
//! beside a naive baseline measured in the same run: apply every index entry
//! to a `HashMap` in file order, which is what a coalescer without the
//! sorted merge would do.
//!
//! Run: `cargo bench --bench coalesce`. Report the ratio, not the absolute
//! times, across machines.

use std::collections::HashMap;
use std::hint::black_box;
use std::io::Write;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rexctl::format::ic::{IcHeader, IcMeta, encode_meta};
use rexctl::l1::L1Dir;
use rexctl::l1::coalesce::CList;

const FILES: u64 = 8;
const PER_FILE: u64 = 32768;

fn sparse_batch(dir: &std::path::Path) {
    for seq in 0..FILES {
        let pages: Vec<u64> = (0..PER_FILE).map(|i| i * 2 + (seq % 2)).collect();
        let crcs = vec![0u32; pages.len()];
        let meta = encode_meta(&pages, &[], &crcs);
        let h = IcHeader {
            page_size: 4096,
            seq,
            full: seq == 0,
            page_count: PER_FILE,
            drop_count: 0,
            time_ns: 0,
            ext_len: 0,
        };
        let path = dir.join(format!("c{seq}.rexic"));
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&h.encode()).unwrap();
        f.write_all(&meta).unwrap();
        f.set_len(h.layout().unwrap().file_len).unwrap();
    }
}

fn naive(batch: &[IcMeta]) -> usize {
    let mut map: HashMap<u64, (usize, usize)> = HashMap::new();
    for (i, m) in batch.iter().enumerate() {
        if m.is_full() {
            map.clear();
        }
        for d in &m.drops {
            for p in d.first..d.end() {
                map.remove(&p);
            }
        }
        for (pp, &p) in m.pages.iter().enumerate() {
            map.insert(p, (i, pp));
        }
    }
    let mut v: Vec<_> = map.into_iter().collect();
    v.sort_unstable_by_key(|e| e.0);
    v.len()
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    sparse_batch(dir.path());
    let l1 = L1Dir::scan(dir.path()).unwrap();
    let mut g = c.benchmark_group("coalesce-1GiB");
    g.throughput(Throughput::Elements(FILES * PER_FILE));
    g.bench_function("scan+clist (rexctl)", |b| {
        b.iter(|| {
            let l1 = L1Dir::scan(dir.path()).unwrap();
            black_box(CList::build(&l1.files).unwrap().len())
        })
    });
    g.bench_function("clist only (rexctl)", |b| {
        b.iter(|| black_box(CList::build(&l1.files).unwrap().len()))
    });
    g.bench_function("hashmap apply (baseline)", |b| {
        b.iter(|| black_box(naive(&l1.files)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
