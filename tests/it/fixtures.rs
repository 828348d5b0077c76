//! The REX-IC fixtures in `fixtures/ic/`, written by an independent Python
//! implementation of docs/FORMAT.md §2 (`fixtures/make_fixtures.py`).
//!
//! * Golden files must read back exactly as the script wrote them, and the
//!   Rust writer must reproduce them byte for byte: two implementations
//!   agreeing pins the layout.
//! * Each corrupt file carries one defect, and the reader must reject it with
//!   the field and offset of the §2.8 read procedure, through the library and
//!   through the real binary, without panicking.
//! * The chains exercise the L1 directory rules (§2.9).
//! * The committed files must be what the script produces today.
//!
//! The P-Table delta fixtures in `fixtures/ptab/` follow the same rules, from
//! a second script (`fixtures/make_ptab_fixtures.py`, §3.3): golden files of
//! versions 1 and 2, and corrupt version 2 files listed with the field and
//! offset the reader must report in `corrupt.tsv`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use rexctl::Error;
use rexctl::format::ic::{ChainId, DropRange, IcFile, IcMeta, IcWriter};
use rexctl::format::ptable::PTableDelta;
use rexctl::l1::L1Dir;
use rexctl::l1::coalesce::{CList, CListEntry};

use crate::util;

/// Capture time of every golden file: 2026-01-01T00:00:00Z.
const TIME_NS: u64 = 1_767_225_600_000_000_000;
/// Exit code for bad data.
const DATA: i32 = rexctl::error::exit::DATA;

fn ic_dir() -> PathBuf {
    util::fixtures().join("ic")
}

fn fixture(name: &str) -> PathBuf {
    ic_dir().join(format!("{name}.rexic"))
}

/// The script's page contents: byte i is (i*31 + page + 97*salt) mod 256.
fn page_bytes(page: u64, page_size: u32, salt: u64) -> Vec<u8> {
    let base = page.wrapping_add(salt.wrapping_mul(97));
    (0..u64::from(page_size))
        .map(|i| i.wrapping_mul(31).wrapping_add(base) as u8)
        .collect()
}

fn drops(ranges: &[(u64, u64)]) -> Vec<DropRange> {
    ranges
        .iter()
        .map(|&(first, count)| DropRange { first, count })
        .collect()
}

/// What one valid file holds, as the script wrote it.
struct Expected {
    page_size: u32,
    seq: u64,
    full: bool,
    time_ns: u64,
    pages: Vec<(u64, Vec<u8>)>,
    drops: Vec<DropRange>,
    /// The chain id of a version 2 file.
    chain_id: Option<ChainId>,
    /// Bytes of the extension area (0 in version 1).
    ext_len: u64,
    /// Whether the Rust writer makes the same bytes (not for files with
    /// records it never writes).
    writer_reproduces: bool,
}

impl Expected {
    fn new(page_size: u32, seq: u64, full: bool, pages: &[u64], ranges: &[(u64, u64)]) -> Self {
        Expected {
            page_size,
            seq,
            full,
            time_ns: TIME_NS,
            pages: pages
                .iter()
                .map(|&p| (p, page_bytes(p, page_size, 0)))
                .collect(),
            drops: drops(ranges),
            chain_id: None,
            ext_len: 0,
            writer_reproduces: true,
        }
    }

    /// As `new`, a version 2 file of the fixtures' chain id whose extension
    /// area is `ext_len` bytes.
    fn in_chain(mut self, ext_len: u64) -> Self {
        self.chain_id = Some(fixture_chain_id());
        self.ext_len = ext_len;
        self
    }

    /// A chain file: contents salted with the seq, time one minute per seq.
    fn chain(seq: u64, full: bool, pages: &[u64], ranges: &[(u64, u64)]) -> Self {
        Expected {
            page_size: 512,
            seq,
            full,
            time_ns: TIME_NS + seq * 60_000_000_000,
            pages: pages
                .iter()
                .map(|&p| (p, page_bytes(p, 512, seq)))
                .collect(),
            drops: drops(ranges),
            chain_id: None,
            ext_len: 0,
            writer_reproduces: true,
        }
    }

    /// The file length §2.4 implies.
    fn file_len(&self) -> u64 {
        let pc = self.pages.len() as u64;
        let ps = u64::from(self.page_size);
        let meta_end = 64 + 12 * pc + 16 * self.drops.len() as u64 + self.ext_len + 4;
        meta_end.div_ceil(ps) * ps + pc * ps
    }

    /// Asserts that the file at `path` reads back as `self`.
    fn check(&self, path: &Path) {
        let f = IcFile::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        f.verify()
            .unwrap_or_else(|e| panic!("verify {}: {e}", path.display()));
        let m = f.meta();
        let h = &m.header;
        let what = path.display();
        assert_eq!(h.page_size, self.page_size, "{what}: page_size");
        assert_eq!(h.seq, self.seq, "{what}: seq");
        assert_eq!(h.full, self.full, "{what}: FULL flag");
        assert_eq!(h.time_ns, self.time_ns, "{what}: time_ns");
        assert_eq!(h.page_count, self.pages.len() as u64, "{what}: page_count");
        assert_eq!(h.drop_count, self.drops.len() as u64, "{what}: drop_count");
        assert_eq!(u64::from(h.ext_len), self.ext_len, "{what}: ext_len");
        assert_eq!(m.chain_id, self.chain_id, "{what}: chain id");
        let index: Vec<u64> = self.pages.iter().map(|p| p.0).collect();
        assert_eq!(m.pages, index, "{what}: page index");
        assert_eq!(m.drops, self.drops, "{what}: drop ranges");
        assert_eq!(m.layout.file_len, self.file_len(), "{what}: file_len");
        assert_eq!(
            fs::metadata(path).unwrap().len(),
            self.file_len(),
            "{what}: size"
        );
        for (pp, (page, data)) in self.pages.iter().enumerate() {
            let got = f.page(pp).unwrap();
            assert!(
                got == &data[..],
                "{what}: contents of page {page:#x} (pp {pp})"
            );
            assert_eq!(
                m.page_crcs[pp],
                crc32fast::hash(data),
                "{what}: CRC of pp {pp}"
            );
        }
        // The coalescer's metadata-only read agrees with the mapped open.
        let meta = IcMeta::read(path).unwrap();
        assert_eq!(meta.pages, m.pages);
        assert_eq!(meta.drops, m.drops);
        assert_eq!(meta.header, m.header);
    }

    /// Writes `self` with the Rust writer.
    fn write(&self, path: &Path) {
        let mut w = IcWriter::create_in_chain(
            path,
            self.page_size,
            self.seq,
            self.full,
            self.time_ns,
            self.chain_id,
            self.pages.iter().map(|p| p.0).collect(),
            self.drops.clone(),
        )
        .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        for (_, data) in &self.pages {
            w.push_page(data).unwrap();
        }
        w.finish()
            .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }
}

/// The golden files, by name.
fn goldens() -> Vec<(&'static str, Expected)> {
    let mut spec = Expected::new(4096, 7, false, &[], &[(20, 4)]);
    spec.time_ns = 1_700_000_000_000_000_000;
    spec.pages = vec![
        (16, vec![0x00; 4096]),
        (17, vec![0x11; 4096]),
        (40, vec![0xAA; 4096]),
    ];
    vec![
        (
            "golden-basic",
            Expected::new(512, 5, false, &[3, 7, 0x10000], &[(8, 4)]),
        ),
        (
            "golden-full",
            Expected::new(4096, 0, true, &[1, u64::MAX], &[]),
        ),
        ("golden-empty", Expected::new(512, 9, false, &[], &[])),
        (
            "golden-drops-only",
            Expected::new(512, 12, false, &[], &[(100, 5), (u64::MAX - 10, 10)]),
        ),
        ("golden-spec-example", spec),
        (
            "golden-chain",
            Expected::new(512, 5, false, &[3, 7, 0x10000], &[(8, 4)]).in_chain(24),
        ),
        (
            "golden-chain-optional-record",
            Expected {
                writer_reproduces: false,
                ..Expected::new(512, 5, false, &[3, 7, 0x10000], &[(8, 4)]).in_chain(40)
            },
        ),
    ]
}

/// The chain directories, by name: (file name, contents).
fn chains() -> Vec<(&'static str, Vec<(&'static str, Expected)>)> {
    vec![
        (
            "chain-ok",
            vec![
                (
                    "ckpt-00000000.rexic",
                    Expected::chain(0, true, &[0, 1, 2, 3], &[]),
                ),
                (
                    "ckpt-00000001.rexic",
                    Expected::chain(1, false, &[5], &[(2, 2)]),
                ),
                (
                    "ckpt-00000002.rexic",
                    Expected::chain(2, false, &[1, 2], &[]),
                ),
            ],
        ),
        (
            "chain-gap",
            vec![
                (
                    "ckpt-00000000.rexic",
                    Expected::chain(0, true, &[0, 1], &[]),
                ),
                ("ckpt-00000001.rexic", Expected::chain(1, false, &[1], &[])),
                ("ckpt-00000003.rexic", Expected::chain(3, false, &[0], &[])),
            ],
        ),
    ]
}

/// Where a defect is found: by the metadata read (open, scan, coalesce) or
/// only by a full verification (padding, page data).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Meta,
    Verify,
}
use Stage::{Meta, Verify};

/// Every corrupt fixture: (name, field, offset, stage), following the read
/// procedure of docs/FORMAT.md §2.8. All derive from golden-basic, whose
/// layout is: header 0..64, index 64..88, drop range 88..104, page CRCs
/// 104..116, meta_crc 116..120, padding 120..512, pages at 512/1024/1536,
/// file_len 2048.
const CORRUPT: &[(&str, &str, u64, Stage)] = &[
    ("zero-length", "header", 0, Meta),
    ("truncated-header", "header", 30, Meta),
    ("bad-magic", "magic", 0, Meta),
    ("bad-version", "version", 8, Meta),
    ("bad-version-stale-crc", "version", 8, Meta),
    ("bad-header-crc", "header_crc", 56, Meta),
    ("unknown-flags", "flags", 24, Meta),
    ("nonzero-reserved-28", "reserved", 28, Meta),
    ("nonzero-reserved-60", "reserved", 60, Meta),
    ("page-size-not-power-of-two", "page_size", 12, Meta),
    ("page-size-too-small", "page_size", 12, Meta),
    ("page-size-too-large", "page_size", 12, Meta),
    ("page-size-zero", "page_size", 12, Meta),
    ("absurd-page-count", "page_count", 32, Meta),
    // FORMAT.md §2.8 step 7: the error names `page_count` when it overflows
    // on its own, `drop_count` (offset 40) otherwise.
    ("absurd-drop-count", "drop_count", 40, Meta),
    ("data-off-rounding-overflow", "drop_count", 40, Meta),
    ("file-len-overflow", "page_count", 32, Meta),
    ("huge-drop-count", "file length", 2048, Meta),
    ("truncated-metadata", "file length", 100, Meta),
    ("truncated-data", "file length", 1792, Meta),
    ("trailing-bytes", "file length", 2048, Meta),
    ("bad-meta-crc", "meta_crc", 116, Meta),
    ("unsorted-index", "page index", 72, Meta),
    ("duplicate-page-in-index", "page index", 80, Meta),
    ("drop-count-zero", "drop ranges", 96, Meta),
    ("drop-overflows-u64", "drop ranges", 88, Meta),
    ("overlapping-drops", "drop ranges", 104, Meta),
    ("unsorted-drops", "drop ranges", 104, Meta),
    ("drop-covers-carried-page", "drop ranges", 88, Meta),
    ("second-drop-covers-carried-page", "drop ranges", 104, Meta),
    ("nonzero-padding", "padding", 300, Verify),
    ("bad-page-crc", "page data", 1024, Verify),
    ("wrong-page-crc-entry", "page data", 1536, Verify),
    // Version 2 (FORMAT.md §2.11): the extension area starts at 116.
    ("ext-len-not-multiple-of-8", "ext_len", 28, Meta),
    ("ext-unknown-tag", "extension", 116, Meta),
    ("ext-record-overruns", "extension", 116, Meta),
    ("ext-chain-id-all-zero", "extension", 116, Meta),
    ("ext-two-chain-ids", "extension", 140, Meta),
    ("ext-instance-id-all-zero", "extension", 140, Meta),
    ("ext-instance-id-short", "extension", 140, Meta),
    ("ext-two-instance-ids", "extension", 164, Meta),
    ("ext-continues-short", "extension", 164, Meta),
    ("ext-two-continues", "extension", 188, Meta),
    // Region tables (FORMAT.md §2.12).
    ("regions-page-outside-table", "page index", 80, Meta),
    ("regions-wrong-page-count", "region table", 132, Meta),
];

/// The chain id of the version 2 fixtures (make_fixtures.py's CHAIN_ID).
fn fixture_chain_id() -> ChainId {
    let mut b = [0u8; 16];
    for (i, v) in b.iter_mut().enumerate() {
        *v = 0xA0 + i as u8;
    }
    ChainId(b)
}

/// Checks that `result` is `Error::Corrupt` for `path` at `field`/`offset`,
/// with the message `<path>: offset <offset>: <field>: <reason>`.
fn check_corrupt<T: std::fmt::Debug>(
    name: &str,
    path: &Path,
    result: rexctl::Result<T>,
    field: &str,
    offset: u64,
) -> Result<(), String> {
    match result {
        Err(
            ref e @ Error::Corrupt {
                path: ref p,
                offset: got_offset,
                field: got_field,
                ..
            },
        ) => {
            if p != path {
                return Err(format!(
                    "{name}: names {} instead of {}",
                    p.display(),
                    path.display()
                ));
            }
            if (got_field, got_offset) != (field, offset) {
                return Err(format!(
                    "{name}: expected {field:?} at offset {offset}, got {got_field:?} at offset {got_offset}: {e}"
                ));
            }
            let shown = e.to_string();
            let prefix = format!("{}: offset {offset}: {field}: ", path.display());
            if !shown.starts_with(&prefix) {
                return Err(format!(
                    "{name}: message {shown:?} does not start with {prefix:?}"
                ));
            }
            Ok(())
        }
        other => Err(format!(
            "{name}: expected Corrupt {{ field: {field:?}, offset: {offset} }}, got {other:?}"
        )),
    }
}

/// Panics listing every failure, so that one divergence hides no other.
fn report(failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn golden_files_read_back_exactly() {
    for (name, exp) in goldens() {
        exp.check(&fixture(name));
    }
    for (dir, files) in chains() {
        for (file, exp) in files {
            exp.check(&ic_dir().join(dir).join(file));
        }
    }
}

#[test]
fn golden_spec_example_has_the_documented_crcs() {
    // docs/FORMAT.md §2.5 gives these numbers.
    let m = IcMeta::read(fixture("golden-spec-example")).unwrap();
    assert_eq!(m.page_crcs, [0xC71C_0011, 0xE67E_931F, 0x55BC_B83C]);
    assert_eq!(
        (m.layout.drops_off, m.layout.crcs_off, m.layout.meta_crc_off),
        (88, 104, 116)
    );
    assert_eq!((m.layout.data_off, m.layout.file_len), (4096, 16384));
    let raw = fs::read(fixture("golden-spec-example")).unwrap();
    assert_eq!(raw[56..60], 0x0AC5_354Eu32.to_le_bytes(), "header_crc");
    assert_eq!(raw[116..120], 0x8010_CA6Cu32.to_le_bytes(), "meta_crc");
}

#[test]
fn rust_writer_reproduces_golden_files_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let mut all: Vec<(PathBuf, Expected)> = goldens()
        .into_iter()
        .map(|(name, e)| (fixture(name), e))
        .collect();
    for (dir, files) in chains() {
        for (file, e) in files {
            all.push((ic_dir().join(dir).join(file), e));
        }
    }
    for (i, (golden, exp)) in all.iter().enumerate() {
        if !exp.writer_reproduces {
            continue;
        }
        let ours = tmp.path().join(format!("{i}.rexic"));
        exp.write(&ours);
        let want = fs::read(golden).unwrap();
        let got = fs::read(&ours).unwrap();
        assert_eq!(got.len(), want.len(), "{}: length", golden.display());
        if let Some(at) = got.iter().zip(&want).position(|(a, b)| a != b) {
            panic!(
                "{}: the Rust writer differs from the Python golden file at byte {at}: {:#04x} vs {:#04x}",
                golden.display(),
                got[at],
                want[at]
            );
        }
    }
}

#[test]
fn corrupt_fixtures_are_all_listed() {
    let mut on_disk: Vec<String> = fs::read_dir(ic_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("golden-"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = CORRUPT.iter().map(|c| format!("{}.rexic", c.0)).collect();
    listed.sort();
    assert_eq!(
        on_disk, listed,
        "fixtures/ic/ and the CORRUPT table disagree"
    );
    let goldens_on_disk = fs::read_dir(ic_dir())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("golden-")
        })
        .count();
    assert_eq!(goldens_on_disk, goldens().len());
}

#[test]
fn corrupt_fixtures_rejected_by_library() {
    let mut failures = Vec::new();
    for &(name, field, offset, stage) in CORRUPT {
        let path = fixture(name);
        match stage {
            Meta => {
                let open = check_corrupt(name, &path, IcFile::open(&path), field, offset);
                // The coalescer's read (no page data) finds it too.
                let meta = check_corrupt(name, &path, IcMeta::read(&path), field, offset)
                    .map_err(|e| format!("{e} (IcMeta::read)"));
                failures.extend(open.err());
                failures.extend(meta.err());
            }
            Verify => {
                // Header and metadata are sound: opening and the metadata-only
                // read succeed; the full verification finds the defect.
                IcMeta::read(&path).unwrap_or_else(|e| panic!("{name}: IcMeta::read: {e}"));
                let f = IcFile::open(&path).unwrap_or_else(|e| panic!("{name}: open: {e}"));
                failures.extend(check_corrupt(name, &path, f.verify(), field, offset).err());
            }
        }
    }
    report(failures);
}

#[test]
fn corrupt_page_is_never_handed_out() {
    // A restore reads pages one at a time: the bad page is refused, its
    // neighbours are served.
    let path = fixture("bad-page-crc");
    let f = IcFile::open(&path).unwrap();
    check_corrupt("bad-page-crc", &path, f.page(1), "page data", 1024).unwrap();
    assert_eq!(f.page(0).unwrap(), &page_bytes(3, 512, 0)[..]);
    assert_eq!(f.page(2).unwrap(), &page_bytes(0x10000, 512, 0)[..]);
}

/// `util::assert_clean_failure`, its panic turned into a failure message.
fn clean_failure(
    name: &str,
    out: &std::process::Output,
    needles: &[&str],
) -> Result<String, String> {
    std::panic::catch_unwind(|| util::assert_clean_failure(out, DATA, needles)).map_err(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        format!("{name}: {msg}")
    })
}

#[test]
fn corrupt_fixtures_rejected_by_inspect() {
    let mut failures = Vec::new();
    for &(name, field, offset, _) in CORRUPT {
        let path = fixture(name);
        let p = path.to_str().unwrap();
        let out = util::run(&["inspect", p]);
        // The file, then the offset and the field, as one message.
        let needle = format!("{p}: offset {offset}: {field}: ");
        failures.extend(clean_failure(name, &out, &[p, &needle]).err());
    }
    report(failures);
}

#[test]
fn inspect_checks_every_file_in_one_run() {
    // Every file is checked, even after one fails; the exit code is the
    // first failure's class.
    let paths: Vec<String> = CORRUPT
        .iter()
        .map(|c| fixture(c.0).to_str().unwrap().to_owned())
        .collect();
    let good = fixture("golden-basic");
    let mut args = vec!["inspect", good.to_str().unwrap()];
    args.extend(paths.iter().map(String::as_str));
    let out = util::run(&args);
    let needles: Vec<String> = paths
        .iter()
        .map(|p| format!("rexctl: error: {p}: offset "))
        .collect();
    let needles: Vec<&str> = needles.iter().map(String::as_str).collect();
    let stderr = util::assert_clean_failure(&out, DATA, &needles);
    assert!(!stderr.contains("golden-basic"), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("golden-basic.rexic: REX-IC v1, seq 5"));
}

#[test]
fn golden_files_pass_inspect() {
    let mut args = vec!["inspect".to_owned(), "--index".to_owned()];
    for (name, _) in goldens() {
        args.push(fixture(name).to_str().unwrap().to_owned());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let stdout = util::ok(&args);
    assert_eq!(
        stdout.matches("CRCs ok").count(),
        goldens().len(),
        "{stdout}"
    );
    assert!(stdout.contains("page 0xffffffffffffffff"), "{stdout}");
}

#[test]
fn coalesce_rejects_corrupt_header_or_metadata() {
    let mut failures = Vec::new();
    for &(name, field, offset, stage) in CORRUPT {
        if stage != Meta {
            continue;
        }
        // A valid chain plus one bad file: a single invalid file makes the
        // scan fail (§2.9).
        let tmp = tempfile::tempdir().unwrap();
        for e in fs::read_dir(ic_dir().join("chain-ok")).unwrap() {
            let e = e.unwrap();
            fs::copy(e.path(), tmp.path().join(e.file_name())).unwrap();
        }
        let bad = tmp.path().join(format!("{name}.rexic"));
        fs::copy(fixture(name), &bad).unwrap();

        let scan = check_corrupt(name, &bad, L1Dir::scan(tmp.path()), field, offset);
        failures.extend(scan.map_err(|e| format!("{e} (L1Dir::scan)")).err());

        let dir = tmp.path().to_str().unwrap();
        let out = util::run(&["coalesce", dir]);
        let needle = format!("{}: offset {offset}: {field}: ", bad.display());
        failures.extend(clean_failure(name, &out, &[&needle]).err());
    }
    report(failures);
}

#[test]
fn chain_gap_is_reported_by_library() {
    let dir = ic_dir().join("chain-gap");
    match L1Dir::scan(&dir) {
        Err(Error::Chain { path, reason }) => {
            assert_eq!(path, dir);
            assert!(
                reason.starts_with("checkpoint seq 2 missing: "),
                "reason: {reason}"
            );
            assert!(
                reason.contains("ckpt-00000003.rexic (seq 3)"),
                "reason: {reason}"
            );
            assert!(
                reason.contains("ckpt-00000001.rexic (seq 1)"),
                "reason: {reason}"
            );
            assert!(
                !reason.contains("more up to"),
                "one seq is missing: {reason}"
            );
        }
        other => panic!("expected a chain error, got {other:?}"),
    }
}

#[test]
fn chain_gap_is_reported_by_coalesce() {
    let dir = ic_dir().join("chain-gap");
    let out = util::run(&["coalesce", dir.to_str().unwrap()]);
    util::assert_clean_failure(
        &out,
        DATA,
        &[
            dir.to_str().unwrap(),
            "checkpoint seq 2 missing",
            "ckpt-00000003.rexic",
        ],
    );
}

#[test]
fn chain_ok_coalesces_to_the_last_copies() {
    let dir = ic_dir().join("chain-ok");
    let l1 = L1Dir::scan(&dir).unwrap();
    assert!(l1.orphans.is_empty());
    assert_eq!(
        l1.files.iter().map(|m| m.seq()).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    let clist = CList::build(&l1.files).unwrap();
    assert!(clist.full);
    assert!(clist.drops.is_empty(), "a FULL batch carries no drops");
    let e = |page, chk, pp| CListEntry { page, chk, pp };
    // Page 0 from seq 0; page 1 rewritten by seq 2; page 2 dropped by seq 1
    // and written back by seq 2; page 3 dropped by seq 1; page 5 from seq 1.
    assert_eq!(
        clist.entries,
        [e(0, 0, 0), e(1, 2, 0), e(2, 2, 1), e(5, 1, 0)]
    );

    // The binary agrees, and its coalesced file holds the right copies.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("batch.rexic");
    let stdout = util::ok(&[
        "coalesce",
        dir.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(stdout.contains("coalesced 3 files (seq 0..=2"), "{stdout}");
    let mut exp = Expected::chain(2, true, &[], &[]);
    exp.pages = vec![
        (0, page_bytes(0, 512, 0)),
        (1, page_bytes(1, 512, 2)),
        (2, page_bytes(2, 512, 2)),
        (5, page_bytes(5, 512, 1)),
    ];
    exp.check(&out);
}

/// Every file under `dir`, by path relative to it.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(
                    p.strip_prefix(root).unwrap().to_path_buf(),
                    fs::read(&p).unwrap(),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

#[test]
fn committed_fixtures_are_up_to_date() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("note: python3 not found; skipping the fixture freshness check");
        return;
    }
    for (script, dir) in [
        ("make_fixtures.py", ic_dir()),
        ("make_ptab_fixtures.py", ptab_dir()),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let script = util::fixtures().join(script);
        let out = Command::new("python3")
            .arg(&script)
            .arg(tmp.path())
            .output()
            .expect("run python3");
        assert!(
            out.status.success(),
            "{} failed:\n{}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let fresh = tree(tmp.path());
        let committed = tree(&dir);
        let names = |t: &BTreeMap<PathBuf, Vec<u8>>| t.keys().cloned().collect::<Vec<_>>();
        assert_eq!(
            names(&committed),
            names(&fresh),
            "{} holds other files than {} writes; run it",
            dir.display(),
            script.display()
        );
        for (name, bytes) in &fresh {
            assert!(
                committed[name] == *bytes,
                "{}/{} is stale; run python3 {}",
                dir.display(),
                name.display(),
                script.display()
            );
        }
    }
}

fn ptab_dir() -> PathBuf {
    util::fixtures().join("ptab")
}

/// The script's P-Table golden delta: generation 7 wrote pages 3, 4, 5, 9
/// and 2^40 and dropped 20..24; each page's stored CRC is the CRC-32 of
/// "page N".
fn golden_ptab(full: bool, generation: u64, pages: &[u64], ranges: &[(u64, u64)]) -> PTableDelta {
    PTableDelta {
        path: PathBuf::new(),
        generation,
        page_size: 4096,
        pattern_size: 32,
        full,
        pages: pages.to_vec(),
        drops: drops(ranges),
        page_crcs: pages
            .iter()
            .map(|p| crc32fast::hash(format!("page {p}").as_bytes()))
            .collect(),
    }
}

#[test]
fn ptab_goldens_read_back_and_the_writer_reproduces_them() {
    let cases = [
        (
            "golden-v1",
            1,
            golden_ptab(false, 7, &[3, 4, 5, 9, 1 << 40], &[(20, 4)]),
        ),
        (
            "golden-v2",
            2,
            golden_ptab(false, 7, &[3, 4, 5, 9, 1 << 40], &[(20, 4)]),
        ),
        (
            "golden-v2-full",
            2,
            golden_ptab(true, 1, &[0, 1, u64::MAX], &[]),
        ),
        ("golden-v2-empty", 2, golden_ptab(false, 2, &[], &[])),
    ];
    for (name, version, want) in cases {
        let path = ptab_dir().join(format!("{name}.ptab"));
        let got = PTableDelta::read(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            got,
            PTableDelta {
                path: path.clone(),
                ..want.clone()
            },
            "{name}"
        );
        assert_eq!(
            want.encode_version(version),
            fs::read(&path).unwrap(),
            "{name}"
        );
    }
    // Version 2 of the same delta is smaller: 5 pages in 3 runs, 11 bytes
    // of index (FORMAT.md §3.3.2's example).
    let v1 = fs::metadata(ptab_dir().join("golden-v1.ptab"))
        .unwrap()
        .len();
    let v2 = fs::read(ptab_dir().join("golden-v2.ptab")).unwrap();
    assert_eq!(v1, 64 + 5 * 12 + 16 + 4);
    assert_eq!(v2.len(), 64 + 11 + 16 + 5 * 4 + 4);
    assert_eq!(
        v2[64..75],
        [3, 3, 3, 1, 0xf6, 0xff, 0xff, 0xff, 0xff, 0x1f, 1]
    );
}

#[test]
fn ptab_corrupt_fixtures_are_rejected_with_field_and_offset() {
    let table = fs::read_to_string(ptab_dir().join("corrupt.tsv")).unwrap();
    let mut failures = Vec::new();
    let mut listed = Vec::new();
    for line in table.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let (name, field, offset) = (f[0], f[1], f[2].parse::<u64>().unwrap());
        let path = ptab_dir().join(format!("{name}.ptab"));
        failures.extend(check_corrupt(name, &path, PTableDelta::read(&path), field, offset).err());
        listed.push(format!("{name}.ptab"));
    }
    // Every file on disk is a golden file or listed.
    let mut on_disk: Vec<String> = fs::read_dir(ptab_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".ptab") && !n.starts_with("golden-"))
        .collect();
    on_disk.sort();
    listed.sort();
    assert_eq!(on_disk, listed, "fixtures/ptab/ and corrupt.tsv disagree");
    assert!(listed.len() >= 12);
    report(failures);
}
