//! Property tests: the REX-IC writer and reader are inverse, and the C-List
//! equals a naive model (apply the files in order to a map) for random
//! batches with drops and FULL files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use proptest::prelude::*;
use rexctl::format::ic::{DropRange, IcFile, IcMeta, write_ic};
use rexctl::l1::coalesce::CList;

const PS: u32 = 512;

/// One generated file: FULL flag, carried pages, drop ranges.
#[derive(Clone, Debug)]
struct FileSpec {
    full: bool,
    pages: Vec<u64>,
    drops: Vec<DropRange>,
}

/// Random carried pages and drop ranges over a small page space, disjoint
/// as the format requires.
fn file_spec(space: u64) -> impl Strategy<Value = FileSpec> {
    (
        prop::bool::weighted(0.15),
        prop::collection::btree_set(0..space, 0..24),
        prop::collection::vec((0..space, 1..6u64), 0..4),
    )
        .prop_map(move |(full, pages, raw_drops)| {
            let mut taken: BTreeSet<u64> = pages.clone();
            let mut drops: Vec<DropRange> = Vec::new();
            let mut sorted = raw_drops;
            sorted.sort();
            for (first, count) in sorted {
                // Trim each range so it avoids carried pages and earlier ranges.
                let mut end = first;
                while end < first + count && !taken.contains(&end) {
                    end += 1;
                }
                if end > first {
                    for p in first..end {
                        taken.insert(p);
                    }
                    drops.push(DropRange {
                        first,
                        count: end - first,
                    });
                }
            }
            drops.sort();
            FileSpec {
                full,
                pages: pages.into_iter().collect(),
                drops,
            }
        })
}

fn page_bytes(seq: u64, page: u64) -> Vec<u8> {
    (0..PS as u64)
        .map(|i| (i * 7 + page * 13 + seq * 101) as u8)
        .collect()
}

fn write_batch(dir: &Path, specs: &[FileSpec]) -> Vec<IcMeta> {
    specs
        .iter()
        .enumerate()
        .map(|(seq, s)| {
            let seq = seq as u64 + 10;
            let data: Vec<Vec<u8>> = s.pages.iter().map(|&p| page_bytes(seq, p)).collect();
            let pages: Vec<(u64, &[u8])> = s
                .pages
                .iter()
                .zip(&data)
                .map(|(&p, d)| (p, d.as_slice()))
                .collect();
            let path = dir.join(format!("f{seq}.rexic"));
            write_ic(&path, PS, seq, s.full, seq, &pages, &s.drops).unwrap();
            IcMeta::read(&path).unwrap()
        })
        .collect()
}

/// The naive model: apply the files in order to a map page -> (file, pp).
struct Model {
    live: BTreeMap<u64, (u32, u64)>,
    dropped: BTreeSet<u64>,
    full: bool,
}

fn model(specs: &[FileSpec]) -> Model {
    let mut m = Model {
        live: BTreeMap::new(),
        dropped: BTreeSet::new(),
        full: false,
    };
    for (i, s) in specs.iter().enumerate() {
        if s.full {
            m.live.clear();
            m.dropped.clear();
            m.full = true;
        }
        for d in &s.drops {
            for p in d.first..d.end() {
                m.live.remove(&p);
                m.dropped.insert(p);
            }
        }
        for (pp, &p) in s.pages.iter().enumerate() {
            m.live.insert(p, (i as u32, pp as u64));
        }
    }
    // Effective drops: dropped and not alive at the end; a FULL batch needs
    // none (everything not carried is gone anyway).
    let live = m.live.clone();
    m.dropped.retain(|p| !live.contains_key(p));
    if m.full {
        m.dropped.clear();
    }
    m
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn clist_equals_naive_model(specs in prop::collection::vec(file_spec(48), 1..7)) {
        let dir = tempfile::tempdir().unwrap();
        let batch = write_batch(dir.path(), &specs);
        let clist = CList::build(&batch).unwrap();
        let m = model(&specs);

        let got: BTreeMap<u64, (u32, u64)> = clist.entries.iter().map(|e| (e.page, (e.chk, e.pp))).collect();
        prop_assert_eq!(clist.entries.len(), got.len(), "duplicate pages in the C-List");
        prop_assert!(clist.entries.windows(2).all(|w| w[0].page < w[1].page), "C-List not ascending");
        prop_assert_eq!(&got, &m.live);
        prop_assert_eq!(clist.full, m.full);

        let dropped: BTreeSet<u64> = clist.drops.iter().flat_map(|d| d.first..d.end()).collect();
        prop_assert_eq!(&dropped, &m.dropped);
        // The effective drops are valid IC drop ranges beside the C-List.
        let pages: Vec<u64> = clist.entries.iter().map(|e| e.page).collect();
        prop_assert!(rexctl::format::ic::check_index(&pages, &clist.drops).is_ok());
        prop_assert_eq!(clist.stats.distinct_pages as usize, m.live.len());
    }

    #[test]
    fn coalesced_file_applies_like_the_batch(specs in prop::collection::vec(file_spec(40), 1..6)) {
        let dir = tempfile::tempdir().unwrap();
        let batch = write_batch(dir.path(), &specs);
        let clist = CList::build(&batch).unwrap();
        let out = dir.path().join("out.coalesced");
        clist.write_ic(&batch, &out).unwrap();
        let f = IcFile::open(&out).unwrap();
        f.verify().unwrap();
        let m = model(&specs);
        prop_assert_eq!(f.meta().seq(), batch.last().unwrap().seq());
        prop_assert_eq!(f.meta().is_full(), m.full);
        for (pp, &p) in f.meta().pages.iter().enumerate() {
            let (chk, _) = m.live[&p];
            let seq = chk as u64 + 10;
            let want = page_bytes(seq, p);
            prop_assert_eq!(f.page(pp).unwrap(), want.as_slice());
        }
    }

    #[test]
    fn write_then_read_is_identity(
        page_size in prop::sample::select(vec![512u32, 1024, 4096, 65536]),
        seq in any::<u64>(),
        time_ns in any::<u64>(),
        spec in file_spec(1 << 20),
        fill in any::<u8>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.rexic");
        let data: Vec<Vec<u8>> = spec
            .pages
            .iter()
            .map(|&p| (0..page_size as u64).map(|i| (i ^ p) as u8 ^ fill).collect())
            .collect();
        let pages: Vec<(u64, &[u8])> = spec.pages.iter().zip(&data).map(|(&p, d)| (p, d.as_slice())).collect();
        write_ic(&path, page_size, seq, spec.full, time_ns, &pages, &spec.drops).unwrap();
        let f = IcFile::open(&path).unwrap();
        f.verify().unwrap();
        let m = f.meta();
        prop_assert_eq!(m.header.page_size, page_size);
        prop_assert_eq!(m.header.seq, seq);
        prop_assert_eq!(m.header.time_ns, time_ns);
        prop_assert_eq!(m.header.full, spec.full);
        prop_assert_eq!(&m.pages, &spec.pages);
        prop_assert_eq!(&m.drops, &spec.drops);
        prop_assert_eq!(m.layout.data_off % page_size as u64, 0);
        prop_assert_eq!(std::fs::metadata(&path).unwrap().len(), m.layout.file_len);
        for (pp, d) in data.iter().enumerate() {
            prop_assert_eq!(f.page(pp).unwrap(), d.as_slice());
        }
    }
}

/// `/proc/thread-self/io` `rchar`: bytes this thread obtained through read
/// system calls (page data reached through mmap would not show, which is why
/// the coalescer is also given files whose page data it could not use).
fn thread_rchar() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/io").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .and_then(|v| v.trim().parse().ok())
}

/// A 1 GiB batch whose page data is a hole with wrong CRCs: the coalescer
/// must build the C-List reading only headers and indexes.
#[test]
fn coalescing_a_gib_batch_reads_no_page_data() {
    use rexctl::format::ic::{IcHeader, encode_meta};
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let files = 8u64;
    let per_file = 32768u64; // 8 x 32768 x 4 KiB = 1 GiB of page data
    let mut meta_bytes = 0;
    let mut total = 0;
    for seq in 0..files {
        // Every other page, shifted per file, so files overlap partly.
        let pages: Vec<u64> = (0..per_file).map(|i| i * 2 + (seq % 2)).collect();
        let crcs = vec![0xdead_beef_u32; pages.len()];
        let meta = encode_meta(&pages, &[], &crcs);
        let h = IcHeader {
            page_size: 4096,
            seq,
            full: seq == 0,
            page_count: per_file,
            drop_count: 0,
            time_ns: 0,
            ext_len: 0,
        };
        let layout = h.layout().unwrap();
        let path = dir.path().join(format!("c{seq}.rexic"));
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&h.encode()).unwrap();
        f.write_all(&meta).unwrap();
        f.set_len(layout.file_len).unwrap(); // sparse: data is a hole
        meta_bytes += 64 + meta.len() as u64;
        total += layout.file_len;
    }
    assert!(total >= 1 << 30);
    let before = thread_rchar();
    let l1 = rexctl::l1::L1Dir::scan(dir.path()).unwrap();
    let clist = CList::build(&l1.files).unwrap();
    let after = thread_rchar();
    assert_eq!(clist.stats.meta_bytes_read, meta_bytes);
    assert_eq!(clist.len() as u64, 2 * per_file);
    assert_eq!(clist.stats.pages_carried, files * per_file);
    if let (Some(b), Some(a)) = (before, after) {
        // Only the metadata (plus directory listing noise) was read.
        assert!(
            a - b < meta_bytes + 64 * 1024,
            "read {} bytes, metadata is {meta_bytes}",
            a - b
        );
    }
    // Opening the page data of such a file is where the CRCs would bite.
    let f = IcFile::open(&l1.files[1].path).unwrap();
    assert!(matches!(
        f.page(0),
        Err(rexctl::Error::Corrupt {
            field: "page data",
            ..
        })
    ));
}
