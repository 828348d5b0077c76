//! Property tests of the L2 chain: restoring generation g equals, byte for
//! byte, the image obtained by applying IC files 0..=last_seq(g) in order
//! (the generator's ground truth), for every g of a long chain, from L2
//! alone and from L1 plus L2, across profiles, page sizes 4 KiB and 64 KiB,
//! pattern sizes 16..128, drops, and FULL files in the middle of batches.

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;
use rexctl::eval::workload::{Profile, Workload, profile};
use rexctl::format::chunked::{ChunkedFile, Coding, Encoding, Kind, WriteFormat};
use rexctl::format::ic::IcFile;
use rexctl::format::manifest::object_name;
use rexctl::l2::dedup::HashChoice;
use rexctl::l2::push::{Job, PushOptions, push_l2};
use rexctl::l2::restore::{RestoreOptions, restore_l1_l2, restore_l2};
use rexctl::store::DirStore;

type Image = BTreeMap<u64, Vec<u8>>;

/// Asserts that the REX-IC file at `path` holds exactly `want`.
fn assert_image(path: &Path, want: &Image, what: &str) {
    let f = IcFile::open(path).unwrap();
    f.verify().unwrap();
    let got: Vec<u64> = f.meta().pages.clone();
    let keys: Vec<u64> = want.keys().copied().collect();
    assert_eq!(got.len(), keys.len(), "{what}: page count");
    assert!(got == keys, "{what}: page sets differ");
    for (pp, (p, data)) in want.iter().enumerate() {
        assert!(
            f.page(pp).unwrap() == data.as_slice(),
            "{what}: page {p:#x} differs"
        );
    }
}

/// Scenario: checkpoints in batches; `full_at` seqs are written as FULL
/// checkpoints; `pushes` lists the batch sizes (in checkpoints).
struct Scenario {
    profile: Profile,
    seed: u64,
    pattern_size: u32,
    /// Batch `i` is pushed with `pattern_sizes[i]` when given (a pattern
    /// size takes effect at a complete coalescence), else `pattern_size`.
    pattern_sizes: Vec<u32>,
    batches: Vec<usize>,
    full_at: Vec<u64>,
    complete_at: Vec<usize>,
    pending_after: usize,
    hash: HashChoice,
    /// What batch `i` is written as: `formats[i % len]` (empty: the
    /// default, container version 2).
    formats: Vec<WriteFormat>,
    /// The DeD-Table's ceiling of batch `i`: `dedup_memory[i % len]`
    /// (empty: the default).
    dedup_memory: Vec<u64>,
}

fn run(s: &Scenario) {
    let d = tempfile::tempdir().unwrap();
    let l1 = d.path().join("l1");
    let l2 = d.path().join("l2");
    std::fs::create_dir_all(&l1).unwrap();
    let job = Job::open(&l1, Box::new(DirStore::create(&l2).unwrap())).unwrap();
    let mut w = Workload::new(s.profile.clone(), s.seed).unwrap();
    let mut truth: BTreeMap<u64, Image> = BTreeMap::new();
    let mut take = |w: &mut Workload| {
        let mut c = w.step();
        if s.full_at.contains(&c.seq) {
            c.full = true;
            c.pages = w.image().keys().copied().collect();
            c.drops.clear();
        }
        w.write(&c, &l1, c.seq).unwrap();
        truth.insert(c.seq, w.image().clone());
    };
    let mut generations = Vec::new();
    for (i, &n) in s.batches.iter().enumerate() {
        for _ in 0..n {
            take(&mut w);
        }
        let opts = PushOptions {
            pattern_size: s.pattern_sizes.get(i).copied().unwrap_or(s.pattern_size),
            full: s.complete_at.contains(&i),
            keep_chains_l2: 100,
            hash: s.hash,
            format: s
                .formats
                .get(i % s.formats.len().max(1))
                .copied()
                .unwrap_or_default(),
            dedup_memory: s
                .dedup_memory
                .get(i % s.dedup_memory.len().max(1))
                .copied()
                .unwrap_or(rexctl::l2::dedup::DEFAULT_DEDUP_MEMORY),
            ..PushOptions::default()
        };
        let r = push_l2(&job, &opts).unwrap();
        let m = r.manifest.expect("a batch was pending");
        // Written in the versions asked for.
        for (name, kind) in [("rps", Kind::Rps), ("pf", Kind::Pf)] {
            let f = ChunkedFile::open(l2.join(object_name(m.generation, name)), kind).unwrap();
            assert_eq!(f.header().version, opts.format.version);
            if kind == Kind::Pf && opts.format.version == 2 {
                let prev = opts.format.pf_prev;
                assert_eq!(f.header().coding, Coding::Pointers { prev });
            }
        }
        let pt = std::fs::read(l2.join(object_name(m.generation, "ptab"))).unwrap();
        assert_eq!(pt[8..12], opts.format.ptable_version.to_le_bytes());
        generations.push((m.generation, m.last_seq));
    }
    for _ in 0..s.pending_after {
        take(&mut w);
    }
    let out = d.path().join("restored.rexic");
    // Every generation, from L2 alone; every other one with the Pointer
    // Files pooled and given back as the restore goes (a budget of 0).
    for (i, &(g, last_seq)) in generations.iter().enumerate() {
        let opts = RestoreOptions {
            generation: Some(g),
            pointer_file_budget: (i % 2 == 1).then_some(0),
            ..Default::default()
        };
        restore_l2(job.l2.as_ref(), &opts, &out).unwrap();
        assert_image(
            &out,
            &truth[&last_seq],
            &format!("L2 generation {g} (seq {last_seq})"),
        );
    }
    // The newest state, from L1 plus L2 (pending IC files on top).
    let newest_seq = *truth.keys().next_back().unwrap();
    restore_l1_l2(&job, &RestoreOptions::default(), &out).unwrap();
    assert_image(
        &out,
        &truth[&newest_seq],
        &format!("L1+L2 at seq {newest_seq}"),
    );
    // A page-aware restore of a slice equals that slice.
    let want = &truth[&generations.last().unwrap().1];
    if let (Some(&a), Some(&b)) = (
        want.keys().nth(want.len() / 3),
        want.keys().nth(want.len() / 2),
    ) {
        let opts = RestoreOptions {
            pages: Some(vec![(a, b)]),
            ..Default::default()
        };
        restore_l2(job.l2.as_ref(), &opts, &out).unwrap();
        let slice: Image = want.range(a..=b).map(|(k, v)| (*k, v.clone())).collect();
        assert_image(&out, &slice, "page-aware restore");
    }
}

fn small(name: &str, page_size: u32, pages: u64) -> Profile {
    let mut p = profile(name).unwrap();
    p.page_size = page_size;
    p.pages = pages;
    p
}

#[test]
fn every_profile_restores_every_generation_of_a_ten_generation_chain() {
    for p in rexctl::eval::workload::profiles() {
        run(&Scenario {
            profile: small(p.name, 4096, 96),
            seed: 3,
            pattern_size: 32,
            pattern_sizes: vec![],
            batches: vec![3, 1, 2, 4, 1, 3, 2, 1, 2, 3],
            full_at: vec![],
            complete_at: vec![],
            pending_after: 2,
            hash: HashChoice::Crc32,
            formats: vec![],
            dedup_memory: vec![],
        });
    }
}

/// Page sizes up to 1 MiB, pattern sizes from 16 bytes to the page (a
/// pattern larger than the default 256 KiB chunk gets chunks of its size:
/// helper-17 found 512 KiB and 1 MiB patterns refused).
#[test]
fn large_pages_and_every_pattern_size() {
    for (ps, pat) in [
        (1 << 20, 1 << 20),
        (1 << 20, 1 << 19),
        (65536, 16),
        (65536, 128),
        (4096, 16),
        (4096, 64),
        (4096, 128),
        (512, 512),
    ] {
        run(&Scenario {
            profile: small("churn", ps, 24),
            seed: u64::from(pat),
            pattern_size: pat,
            pattern_sizes: vec![],
            batches: vec![2, 3, 1, 2],
            full_at: vec![4],
            complete_at: vec![2],
            pending_after: 1,
            hash: HashChoice::Xxh3,
            formats: vec![],
            dedup_memory: vec![],
        });
    }
}

/// A complete coalescence that changes the pattern size, down and up (the
/// defect helper-17 found: a smaller size panicked, indexing the old
/// page's pointers with the new pattern count); the Δ pushes in between
/// keep their chain's size.
#[test]
fn a_complete_coalescence_changes_the_pattern_size_down_and_up() {
    for (a, b) in [(32, 16), (16, 64), (128, 16), (4096, 32)] {
        run(&Scenario {
            profile: small("balanced", 4096, 48),
            seed: u64::from(a + b),
            pattern_size: a,
            pattern_sizes: vec![a, a, b, b, a, a],
            batches: vec![2, 1, 2, 1, 2, 1],
            full_at: vec![],
            complete_at: vec![2, 4],
            pending_after: 1,
            hash: HashChoice::Crc32,
            formats: vec![],
            dedup_memory: vec![],
        });
    }
}

/// A `--pages` restore of 1 % of the pages (a contiguous range, as a job
/// restoring one array would ask) reads at most 2 % of the chain's chunks.
#[test]
fn a_pages_restore_of_one_percent_reads_at_most_two_percent_of_the_chunks() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    std::fs::create_dir_all(&l1).unwrap();
    let job = Job::open(&l1, Box::new(DirStore::create(&l2).unwrap())).unwrap();
    let mut w = Workload::new(small("balanced", 4096, 32768), 5).unwrap();
    for batch in [2, 2] {
        for _ in 0..batch {
            let c = w.step();
            w.write(&c, &l1, c.seq).unwrap();
        }
        push_l2(&job, &PushOptions::default()).unwrap();
    }
    let pages: Vec<u64> = w.image().keys().copied().collect();
    let (a, b) = (
        pages[pages.len() / 2],
        pages[pages.len() / 2 + pages.len() / 100],
    );
    let out = d.path().join("slice.rexic");
    let opts = RestoreOptions {
        pages: Some(vec![(a, b)]),
        ..Default::default()
    };
    let r = restore_l2(job.l2.as_ref(), &opts, &out).unwrap();
    assert!(r.pages >= pages.len() as u64 / 100, "{} pages", r.pages);
    assert!(r.chunks_total >= 100, "{} chunks in all", r.chunks_total);
    assert!(
        r.chunks_read * 50 <= r.chunks_total,
        "{} of {} chunks read for {} of {} pages",
        r.chunks_read,
        r.chunks_total,
        r.pages,
        pages.len()
    );
}

/// A full restore decodes only the chunks live pages reference: when the
/// newest generation rewrote every page with new content, none of the
/// older generation's chunks is read, and the image is the newest one.
#[test]
fn a_full_restore_reads_no_chunk_of_patterns_every_page_overwrote() {
    let d = tempfile::tempdir().unwrap();
    let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
    std::fs::create_dir_all(&l1).unwrap();
    let job = Job::open(&l1, Box::new(DirStore::create(&l2).unwrap())).unwrap();
    let pages: Vec<u64> = (0..256).collect();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut content = Vec::new();
    for seq in 0..2u64 {
        // Fresh pseudo-random bytes: no pattern of the first generation
        // survives into the second.
        content = (0..pages.len() * 4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect::<Vec<u8>>();
        let path = l1.join(format!("ckpt-{seq:08}.rexic"));
        let mut w = rexctl::format::ic::IcWriter::create(
            &path,
            4096,
            seq,
            seq == 0,
            seq,
            pages.clone(),
            Vec::new(),
        )
        .unwrap();
        for page in content.chunks_exact(4096) {
            w.push_page(page).unwrap();
        }
        w.finish().unwrap();
        push_l2(&job, &PushOptions::default()).unwrap();
    }
    let file = |g: u64, kind: Kind, ext: &str| {
        ChunkedFile::open(l2.join(object_name(g, ext)), kind).unwrap()
    };
    let chunks =
        |g: u64| file(g, Kind::Rps, "rps").chunk_count() + file(g, Kind::Pf, "pf").chunk_count();
    let out = d.path().join("image.rexic");
    let r = restore_l2(job.l2.as_ref(), &RestoreOptions::default(), &out).unwrap();
    assert_eq!(r.generation, Some(2));
    assert_eq!(
        r.chunks_total as usize,
        chunks(1) + chunks(2),
        "the lineage is both generations"
    );
    assert_eq!(
        r.chunks_read as usize,
        chunks(2),
        "only the newest generation's chunks are read"
    );
    let img = IcFile::open(&out).unwrap();
    for (k, want) in content.chunks_exact(4096).enumerate() {
        assert_eq!(img.page(k).unwrap(), want, "page {k}");
    }
}

/// A job in `dir` (`l1/`, `l2/`) whose L2 holds a chain of deltas: 10
/// checkpoints of 1024 balanced pages pushed in batches of 2. Returns the
/// job and its workload, to write more checkpoints.
fn chain_of_deltas(dir: &Path, seed: u64) -> (Job, Workload) {
    chain_of_deltas_in(dir, seed, WriteFormat::default())
}

/// [`chain_of_deltas`], written in `format`.
fn chain_of_deltas_in(dir: &Path, seed: u64, format: WriteFormat) -> (Job, Workload) {
    let (l1, l2) = (dir.join("l1"), dir.join("l2"));
    std::fs::create_dir_all(&l1).unwrap();
    let job = Job::open(&l1, Box::new(DirStore::create(&l2).unwrap())).unwrap();
    let mut p = profile("balanced").unwrap();
    p.pages = 1024;
    let mut w = Workload::new(p, seed).unwrap();
    for _ in 0..5 {
        for _ in 0..2 {
            w.checkpoint(&l1).unwrap();
        }
        push_l2(
            &job,
            &PushOptions {
                format,
                ..PushOptions::default()
            },
        )
        .unwrap();
    }
    (job, w)
}

/// L2 format 4 (Pointer Files that refer to the page's previous version):
/// every live page reads the same as from the same chain in format 3 while
/// the Pointer Files are smaller, and a page whose previous version is not
/// in the lineage is an error that says so, never a wrong page.
#[test]
fn pointers_taken_from_previous_versions_read_the_same_or_fail_loudly() {
    use rexctl::l2::chain::{ChainIndex, OpenChain, OpenGeneration};
    let d = tempfile::tempdir().unwrap();
    let open = |v: u32| {
        let dir = d.path().join(format!("v{v}"));
        let (job, _) = chain_of_deltas_in(&dir, 5, WriteFormat::for_l2_version(v).unwrap());
        let index = ChainIndex::load(job.l2.as_ref()).unwrap();
        let g = index.newest().unwrap().generation;
        let chain = OpenChain::open(job.l2.as_ref(), &index, g).unwrap();
        (job, index, chain)
    };
    let ((_, _, c3), (j4, i4, c4)) = (open(3), open(4));
    let pf_bytes = |c: &OpenChain| c.gens.iter().map(|g| g.pf.file_len()).sum::<u64>();
    assert!(
        pf_bytes(&c4) < pf_bytes(&c3),
        "{} >= {}",
        pf_bytes(&c4),
        pf_bytes(&c3)
    );
    let (live3, live4) = (c3.live_pages(), c4.live_pages());
    assert_eq!(live3.len(), live4.len());
    let mut holes = 0;
    let (mut a, mut b) = (vec![0u8; 4096], vec![0u8; 4096]);
    for (l3, l4) in live3.iter().zip(&live4) {
        c3.read_page(*l3, &mut a).unwrap();
        c4.read_page(*l4, &mut b).unwrap();
        assert_eq!(a, b, "page {:#x}", l3.page);
        assert_eq!(c3.pointers(*l3).unwrap(), c4.pointers(*l4).unwrap());
        let g = &c4.gens[l4.layer as usize];
        let raw = g.pf.records(l4.pos * 128, 128).unwrap();
        holes += raw.chunks_exact(4).filter(|p| p == &[0xff; 4]).count();
    }
    assert!(holes > 1000, "{holes} holes");
    // The newest generation alone: its holes have nothing to fill them.
    let newest = i4.newest().unwrap();
    let alone =
        OpenChain::from_generations(vec![OpenGeneration::open(j4.l2.as_ref(), newest).unwrap()]);
    let mut failed = 0;
    for lp in alone.live_pages() {
        let raw = alone.gens[0].pf.records(lp.pos * 128, 128).unwrap();
        if raw.chunks_exact(4).any(|p| p == [0xff; 4]) {
            let e = alone.read_page(lp, &mut b).unwrap_err().to_string();
            assert!(
                e.contains("takes pointers from its previous version"),
                "{e}"
            );
            assert!(e.contains(".pf"), "{e}");
            failed += 1;
        }
    }
    assert!(failed > 0);
}

/// Rebuilds every page of `live` through `dec`, giving its chunks back
/// (`uses` counted them), each equal to `check`'s (a decoder of another
/// chain on the same files); returns the most chunks `held` said were held
/// after a page.
fn rebuild_every_page_releasing(
    dec: &rexctl::l2::chain::PageDecoder<'_>,
    check: &rexctl::l2::chain::PageDecoder<'_>,
    live: &[rexctl::l2::chain::LivePage],
    uses: &rexctl::l2::chain::ChunkUses,
    held: impl Fn() -> usize,
) -> usize {
    let (mut a, mut b) = (vec![0u8; 4096], vec![0u8; 4096]);
    let mut peak = 0;
    for &lp in live {
        // SAFETY: `uses` counted every live page, each read once here;
        // `check` is another chain (its own files and pool).
        let crc = unsafe { dec.read_page_releasing(lp, &mut a, uses) }.unwrap();
        assert_eq!(crc, check.read_page(lp, &mut b).unwrap());
        assert!(a == b, "page {:#x}", lp.page);
        peak = peak.max(held());
    }
    peak
}

/// A full restore gives each RPS chunk's buffer back after the last page
/// that copies from it: the counts of `count_uses` are exact (every one is
/// given back, every chunk released by the end), the memory held at once
/// stays below what the walk decodes, and every page reads the same as
/// through a decoder that releases nothing.
#[test]
fn a_full_restore_releases_every_chunk_after_its_last_page() {
    use rexctl::l2::chain::{ChainIndex, OpenChain};
    let d = tempfile::tempdir().unwrap();
    let (job, _) = chain_of_deltas(d.path(), 11);
    let index = ChainIndex::load(job.l2.as_ref()).unwrap();
    let g = index.newest().unwrap().generation;
    let chain = OpenChain::open(job.l2.as_ref(), &index, g).unwrap();
    let plain = OpenChain::open(job.l2.as_ref(), &index, g).unwrap();
    assert!(chain.gens.len() >= 3, "a chain of deltas");
    let (dec, check) = (chain.decoder(), plain.decoder());
    let live = chain.live_pages();
    let uses = dec.count_uses(&live, |lp| Some(*lp), 2).unwrap();
    let held = || {
        chain
            .gens
            .iter()
            .map(|g| g.rps.chunks_held())
            .sum::<usize>()
    };
    let peak = rebuild_every_page_releasing(&dec, &check, &live, &uses, held);
    assert_eq!(uses.outstanding(), 0);
    assert_eq!(held(), 0, "every chunk released");
    let read: usize = chain.gens.iter().map(|g| g.rps.chunks_verified()).sum();
    assert!(
        peak < read,
        "held at most {peak} chunks at once of {read} decoded"
    );
}

/// Past its Pointer File budget, a full restore decodes the Pointer Files
/// into the chain's pool and gives each chunk back after the last page whose
/// pointers it holds: the count gives them back as it goes (their pages
/// counted), the rebuild decodes them again and gives them back (their
/// pages rebuilt), so a few are held at once; every page reads the same as
/// through a chain that keeps them. A chain in format 4 keeps its Pointer
/// Files (their holes are filled from other pages' generations).
#[test]
fn pointer_files_are_given_back_after_their_last_page_past_the_budget() {
    use rexctl::l2::chain::{ChainIndex, OpenChain};
    let d = tempfile::tempdir().unwrap();
    // Chunks of 64 KiB: 128 pages' pointers each, a few per generation.
    let format = WriteFormat {
        chunk_size: 64 << 10,
        ..WriteFormat::default()
    };
    let (job, _) = chain_of_deltas_in(d.path(), 13, format);
    let index = ChainIndex::load(job.l2.as_ref()).unwrap();
    let g = index.newest().unwrap().generation;
    let mut chain = OpenChain::open(job.l2.as_ref(), &index, g).unwrap();
    let plain = OpenChain::open(job.l2.as_ref(), &index, g).unwrap();
    assert!(chain.gens.len() >= 3, "a chain of deltas");
    // The budget is of decoded bytes: 4 per pointer, `alpha` per page of
    // each generation's P-Table delta; a restore pools past it, not at it.
    let bytes: u64 = chain
        .gens
        .iter()
        .map(|g| g.ptable.pages.len() as u64 * g.manifest.alpha() * 4)
        .sum();
    assert_eq!(chain.pointer_file_bytes(), bytes);
    for (budget, pooled) in [(bytes, false), (bytes - 1, true)] {
        let mut c = OpenChain::open(job.l2.as_ref(), &index, g).unwrap();
        let opts = RestoreOptions {
            pointer_file_budget: Some(budget),
            ..Default::default()
        };
        opts.attach(&mut c);
        assert!(c.gens.iter().all(|g| g.pf.pooled() == pooled), "{budget}");
    }
    assert!(chain.pool_pointer_files());
    assert!(chain.gens.iter().all(|g| g.pf.pooled()));
    let (dec, check) = (chain.decoder(), plain.decoder());
    let live = chain.live_pages();
    let pf_held = || chain.gens.iter().map(|g| g.pf.chunks_held()).sum::<usize>();
    let pf_read = || {
        chain
            .gens
            .iter()
            .map(|g| g.pf.chunks_verified())
            .sum::<usize>()
    };
    // SAFETY: nothing else reads `chain` while it counts.
    let uses = unsafe { dec.count_uses_releasing(&live, |lp| Some(*lp), 2) }.unwrap();
    let counted = pf_read();
    assert!(counted > chain.gens.len(), "{counted} Pointer File chunks");
    assert_eq!(pf_held(), 0, "the count gave every Pointer File chunk back");
    let peak = rebuild_every_page_releasing(&dec, &check, &live, &uses, pf_held);
    assert_eq!(uses.outstanding(), 0);
    assert_eq!(pf_held(), 0, "every Pointer File chunk given back");
    assert!(
        peak <= chain.gens.len() && peak < counted,
        "held {peak} Pointer File chunks at once of {counted}"
    );
    // A restore with a budget of 0 writes the same image as one within
    // the budget.
    let (x, y) = (d.path().join("x.rexic"), d.path().join("y.rexic"));
    let zero = RestoreOptions {
        pointer_file_budget: Some(0),
        ..Default::default()
    };
    restore_l2(job.l2.as_ref(), &zero, &x).unwrap();
    restore_l2(job.l2.as_ref(), &RestoreOptions::default(), &y).unwrap();
    assert!(std::fs::read(&x).unwrap() == std::fs::read(&y).unwrap());
    // Format 4: not pooled.
    let d4 = tempfile::tempdir().unwrap();
    let (job4, _) = chain_of_deltas_in(d4.path(), 13, WriteFormat::for_l2_version(4).unwrap());
    let index = ChainIndex::load(job4.l2.as_ref()).unwrap();
    let g = index.newest().unwrap().generation;
    let mut chain = OpenChain::open(job4.l2.as_ref(), &index, g).unwrap();
    assert!(!chain.pool_pointer_files());
    assert!(!chain.gens.iter().any(|g| g.pf.pooled()));
    restore_l2(job4.l2.as_ref(), &zero, &x).unwrap();
    restore_l2(job4.l2.as_ref(), &RestoreOptions::default(), &y).unwrap();
    assert!(std::fs::read(&x).unwrap() == std::fs::read(&y).unwrap());
}

/// A delta push gives the old chain's RPS chunks back as it goes (after
/// the last page whose previous version it read): the push's memory is
/// the DeD-Table and what the pages still to come need, with the chunks
/// decoded ahead of the unit on other threads too (`threads` > 1). Its
/// files are the same, byte for byte, on one thread and on three, and as
/// those `push_l2` then writes for the same batch (through its own chain).
/// A bad chunk of the old chain fails the push with that chunk's error
/// whichever thread decodes it first, and never hangs it.
#[test]
fn a_delta_push_gives_the_old_chunks_back_after_their_last_page() {
    use rexctl::format::chunked::Encoding;
    use rexctl::format::ic::IcMeta;
    use rexctl::l1::coalesce::CList;
    use rexctl::l2::chain::{ChainIndex, OpenChain};
    use rexctl::l2::dedup::{DedupJob, deduplicate};
    use rexctl::l2::dedup_table::Crc32Hasher;
    let d = tempfile::tempdir().unwrap();
    // The smallest chunks that are released: many of them, so that the
    // read-ahead runs through its window.
    let small = WriteFormat {
        chunk_size: rexctl::format::chunked::ChunkedFile::MIN_POOLED_CHUNK,
        ..WriteFormat::default()
    };
    let (job, mut w) = chain_of_deltas_in(d.path(), 12, small);
    let batch: Vec<_> = (0..2).map(|_| w.checkpoint(&job.l1).unwrap()).collect();
    let metas: Vec<IcMeta> = batch.iter().map(|p| IcMeta::read(p).unwrap()).collect();
    let clist = CList::build(&metas).unwrap();
    let index = ChainIndex::load(job.l2.as_ref()).unwrap();
    let g = index.newest().unwrap().generation;
    let dedup = |threads: usize, out: &Path| {
        let chain = OpenChain::open(job.l2.as_ref(), &index, g).unwrap();
        assert!(chain.gens.len() >= 3, "a chain of deltas");
        std::fs::create_dir_all(out).unwrap();
        let dj = DedupJob {
            generation: g + 1,
            page_size: 4096,
            pattern_size: 32,
            batch: &metas,
            clist: &clist,
            chain: Some(&chain),
            full: false,
            dir: out,
            format: WriteFormat {
                encoding: Encoding {
                    threads,
                    ..small.encoding
                },
                ..small
            },
            table_memory: rexctl::l2::dedup::DEFAULT_DEDUP_MEMORY,
            xrefs: &[],
            upload: None,
        };
        let o = deduplicate(&dj, Crc32Hasher::new());
        let held: usize = chain.gens.iter().map(|g| g.rps.chunks_held()).sum();
        let read: usize = chain.gens.iter().map(|g| g.rps.chunks_verified()).sum();
        (o, held, read)
    };
    let mut files = Vec::new();
    for threads in [1, 3] {
        let out = d.path().join(format!("out{threads}"));
        let (o, held, read) = dedup(threads, &out);
        let o = o.unwrap();
        assert!(
            read > 40 && held < read / 2,
            "{threads} threads: {held} of {read} chunks still held"
        );
        files.push((out, o.files));
    }
    let (out, names) = &files[0];
    for f in names {
        let one = std::fs::read(out.join(&f.name)).unwrap();
        assert!(
            std::fs::read(files[1].0.join(&f.name)).unwrap() == one,
            "{} differs between one thread and three",
            f.name
        );
    }
    // A flipped byte in the middle of the chain base's RPS (its stored
    // chunks follow the header and chunk table, so the file's second half
    // is chunk data): whichever thread meets it, the push fails with it.
    let base = index.newest().unwrap().chain_base;
    let rps = d.path().join("l2").join(object_name(base, "rps"));
    let mut bytes = std::fs::read(&rps).unwrap();
    let at = bytes.len() * 3 / 4;
    bytes[at] ^= 0x10;
    std::fs::write(&rps, &bytes).unwrap();
    for threads in [1, 3] {
        let (o, _, _) = dedup(threads, &d.path().join(format!("bad{threads}")));
        let e = o.expect_err("a bad chunk of the old chain").to_string();
        assert!(
            e.contains(&rps.display().to_string()) && e.contains("chunk"),
            "{e}"
        );
    }
    std::fs::write(&rps, {
        bytes[at] ^= 0x10;
        &bytes
    })
    .unwrap();
    push_l2(
        &job,
        &PushOptions {
            format: small,
            ..PushOptions::default()
        },
    )
    .unwrap();
    for f in names {
        let pushed = std::fs::read(d.path().join("l2").join(&f.name)).unwrap();
        assert!(
            std::fs::read(out.join(&f.name)).unwrap() == pushed,
            "{}",
            f.name
        );
    }
}

/// A DeD-Table ceiling (`dedup_memory`) far below a batch's patterns: the
/// table closes, the patterns after that are stored without an entry (so
/// their copies are stored again), the table and the source locations stay
/// within the ceiling, and every generation restores exactly, from L2 alone
/// and from L1 plus L2.
#[test]
fn a_push_past_its_dedup_table_ceiling_stores_more_and_restores_exactly() {
    let push = |mem: u64| {
        let d = tempfile::tempdir().unwrap();
        let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
        std::fs::create_dir_all(&l1).unwrap();
        let job = Job::open(&l1, Box::new(DirStore::create(&l2).unwrap())).unwrap();
        let mut w = Workload::new(small("balanced", 4096, 2048), 7).unwrap();
        let (mut stored, mut outs) = (0, Vec::new());
        let mut truth = Vec::new();
        for batch in [1, 3, 2] {
            for _ in 0..batch {
                let c = w.step();
                w.write(&c, &l1, c.seq).unwrap();
            }
            let opts = PushOptions {
                dedup_memory: mem,
                ..PushOptions::default()
            };
            let r = push_l2(&job, &opts).unwrap();
            let m = r.manifest.unwrap();
            stored += m.patterns;
            truth.push((m.generation, w.image().clone()));
            outs.push(r.dedup.unwrap());
        }
        let out = d.path().join("restored.rexic");
        for (g, want) in &truth {
            let opts = RestoreOptions {
                generation: Some(*g),
                ..Default::default()
            };
            restore_l2(job.l2.as_ref(), &opts, &out).unwrap();
            assert_image(&out, want, &format!("generation {g}, ceiling {mem}"));
        }
        restore_l1_l2(&job, &RestoreOptions::default(), &out).unwrap();
        assert_image(&out, &truth.last().unwrap().1, "L1+L2");
        (stored, outs)
    };
    let (stored, outs) = push(rexctl::l2::dedup::DEFAULT_DEDUP_MEMORY);
    assert!(outs.iter().all(|o| o.unindexed == 0));
    // 2048 pages of 128 patterns per batch, some from the profile's
    // dictionary; room for 1000 entries.
    let mem = 19 * 1000;
    let (capped, capped_outs) = push(mem);
    for o in &capped_outs {
        assert!(o.unindexed > 0, "the table closed in every batch: {o:?}");
        // The ceiling; at most the smallest table (1024 entries) above it.
        assert!(o.table_bytes <= mem + (16 << 10), "{} bytes", o.table_bytes);
    }
    assert!(
        capped > stored,
        "{capped} <= {stored} patterns: copies of unindexed patterns are stored again"
    );
    // No entry at all: only the shortcuts (zero patterns, patterns kept
    // from the previous version) are not stored.
    let (none, none_outs) = push(0);
    assert!(none_outs.iter().all(|o| o.unindexed + o.hits == o.probed));
    assert!(none > capped);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn restore_equals_the_naive_model(
        name in prop::sample::select(vec!["balanced", "small-inc", "large-inc", "churn", "sparse-zero", "incompressible"]),
        seed in any::<u64>(),
        page_size in prop::sample::select(vec![4096u32, 65536]),
        pattern_size in prop::sample::select(vec![16u32, 32, 64, 128]),
        batches in prop::collection::vec(1usize..4, 1..10),
        full_at in prop::collection::vec(1u64..20, 0..3),
        complete_at in prop::collection::vec(0usize..10, 0..2),
        pending_after in 0usize..3,
        xxh3 in any::<bool>(),
        dedup_memory in prop::collection::vec(
            prop::sample::select(vec![0u64, 19 * 200, 19 * 3000, u64::MAX]), 0..3),
    ) {
        let pages = if page_size == 65536 { 12 } else { 48 };
        run(&Scenario {
            profile: small(name, page_size, pages),
            seed,
            pattern_size,
            pattern_sizes: vec![],
            batches,
            full_at,
            complete_at,
            pending_after,
            hash: if xxh3 { HashChoice::Xxh3 } else { HashChoice::Crc32 },
            formats: vec![],
            dedup_memory,
        });
    }

    /// A chain whose generations are written in L2 format versions 1 to 4
    /// (container versions 1 and 2, P-Table versions 1 and 2, Pointer File
    /// codings 1 and 2: a chain begun by an older rexctl and continued by
    /// this one, or the reverse; a hole's previous version may be of any
    /// of them), with every zstd level from none to high, small chunks (so
    /// pointer coding crosses chunk boundaries) and several encoder
    /// threads: every generation restores as the naive model says.
    #[test]
    fn a_chain_mixing_versions_restores_every_generation(
        name in prop::sample::select(vec!["balanced", "small-inc", "churn", "sparse-zero", "incompressible"]),
        seed in any::<u64>(),
        batches in prop::collection::vec(1usize..4, 2..9),
        complete_at in prop::collection::vec(0usize..9, 0..2),
        formats in prop::collection::vec(
            (prop::sample::select(vec![1u32, 2, 3, 4]),
             prop::sample::select(vec![0i32, 1, 3, 9]),
             prop::sample::select(vec![0i32, 9]),
             prop::sample::select(vec![256u32, 4096, 1 << 18]),
             1usize..4),
            1..5),
        pending_after in 0usize..3,
    ) {
        let formats = formats
            .into_iter()
            .map(|(l2_version, level, max_level, chunk_size, threads)| WriteFormat {
                chunk_size,
                encoding: Encoding { level, max_level, threads },
                ..WriteFormat::for_l2_version(l2_version).unwrap()
            })
            .collect();
        run(&Scenario {
            profile: small(name, 4096, 64),
            seed,
            pattern_size: 32,
            pattern_sizes: vec![],
            batches,
            full_at: vec![],
            complete_at,
            pending_after,
            hash: HashChoice::Crc32,
            formats,
            dedup_memory: vec![],
        });
    }
}
