//! Restore (paper §3.3, Fig. 6) and chain verification.
//!
//! * **Permanent failure** (`--l2` alone): the newest valid generation's
//!   lineage (full RPS, ΔRPS files, P-Table deltas, PFs) rebuilds every live
//!   page by dereferencing its `alpha` pointers.
//! * **Transient failure** (`--l1` and `--l2`): the newest valid generation
//!   of either place (L2's manifests overlaid with L1's copies of those L2
//!   lacks); pages in the C-List of the IC files written since it (of its
//!   run, or a newer run's from its FULL checkpoint, which then supersedes
//!   the chain) come from those files; all other live pages come from the
//!   chain, read from L1's local copy, with each generation falling back to
//!   L2 when its L1 copy is missing or corrupt (found corrupt when a chunk
//!   fails its check during the rebuild: the restore then runs again with
//!   that generation from L2, and nothing is published before the end).
//! * **`--fallback`** restores the newest valid state instead of failing:
//!   the pending files up to the first unusable one (a later FULL one
//!   restarts the state), a pending FULL checkpoint when the generation is
//!   unreadable, else older generations, passing over another run's when the
//!   L1 directory's pending checkpoints are of its own run; and says what it
//!   left out.
//!
//! Both are one layered merge (generations, then pending IC files) followed
//! by one pass over the live pages. Every byte is CRC-checked (chunks of
//! RPS and PF, IC pages) and every pointer bounds-checked, and each rebuilt
//! page is compared with the CRC its P-Table delta recorded, so a restore
//! either produces the exact image or fails naming the file. Chunks are
//! verified as they are first decoded, so a restore reads each chunk a live
//! page needs once, and a `--pages` restore only the chunks it touches.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::durable::AtomicFile;
use crate::error::{Error, Result};
use crate::format::chunked::{ChunkedFile, Kind, check_all_parallel};
use crate::format::ic::{ChainId, IcExt, IcFile, IcMeta, IcWriter, RegionTable};
use crate::format::manifest::{
    Manifest, Role, Writer, generation_of, manifest_name, parse_manifest_name,
};
use crate::format::ptable::PTableDelta;
use crate::l1::coalesce::{PageLayer, merge_layers};
use crate::l1::{Covered, L1Dir, LeftOut, same_run};
use crate::l2::chain::{ChainIndex, LivePage, OpenChain, OpenGeneration, XrefSource};
use crate::l2::push::Job;
use crate::store::{Store, file_crc_if_len};

/// Inclusive page ranges to restore.
pub type PageRanges = Vec<(u64, u64)>;

/// Parses `A-B,C,D-E` (decimal or 0x-hex page numbers, inclusive ranges).
pub fn parse_page_ranges(s: &str) -> Result<PageRanges> {
    let num = |t: &str| -> Result<u64> {
        let t = t.trim();
        let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            u64::from_str_radix(h, 16)
        } else {
            t.parse()
        };
        v.map_err(|_| Error::Invalid(format!("--pages: {t:?} is not a page number")))
    };
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.trim().is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let a = num(part)?;
                (a, a)
            }
        };
        if b < a {
            return Err(Error::Invalid(format!(
                "--pages: range {part:?} ends before it starts"
            )));
        }
        out.push((a, b));
    }
    if out.is_empty() {
        return Err(Error::Invalid("--pages: no page given".into()));
    }
    out.sort_unstable();
    Ok(out)
}

/// How to restore.
#[derive(Clone, Debug, Default)]
pub struct RestoreOptions {
    /// Restore this generation instead of the newest.
    pub generation: Option<u64>,
    /// Fall back to the newest older valid generation when the requested
    /// one is corrupt.
    pub fallback: bool,
    /// Restore only these pages.
    pub pages: Option<PageRanges>,
    /// Write a flat image instead of a REX-IC file.
    pub raw: bool,
    /// Restore only the region with this id (a checkpoint of a job that
    /// checkpoints itself through librex; docs/FORMAT.md §2.12). With `raw`,
    /// the output is exactly the region's bytes.
    pub region: Option<u32>,
    /// Threads decoding chunks and rebuilding pages (0: the cores).
    pub threads: usize,
    /// Where pages other ranks store are read from (a rank of an MPI job,
    /// `crate::l2::jobgen`); without it, such a page is an error.
    pub xref_source: Option<Arc<dyn XrefSource>>,
    /// For a rank of an MPI job restored from L1 plus L2: the newest
    /// committed job generation (`Some(None)`: none yet). The rank's
    /// generations of later job generations never committed and are left
    /// out; the checkpoints they hold are still pending in L1 (a collective
    /// push deletes them only after the commit), and apply from there.
    pub job_committed: Option<Option<u64>>,
    /// Restore the state at exactly this checkpoint seq instead of the
    /// newest: the newest generation ending at or before it plus the
    /// pending checkpoints up to it. Any other state is refused before
    /// anything is written (the seq is inside a generation that coalesced
    /// it, or its checkpoint is gone).
    pub seq: Option<u64>,
    /// The caller holds L1's job lock already (a collective restart, under
    /// its writer lock): the restore takes no shared hold of its own, which
    /// would wait for the caller forever (helper-47).
    pub l1_locked: bool,
    /// Decoded Pointer File bytes a restore may hold (`None`:
    /// [`POINTER_FILE_BUDGET`]). Past it, it gives each Pointer File chunk
    /// back after its last page, at the price of decoding it twice
    /// ([`OpenChain::pool_pointer_files`]).
    pub pointer_file_budget: Option<u64>,
    /// Leave a file that appears under the output's name while the restore
    /// writes it, and fail ([`crate::durable::AtomicFile::keep_existing`]);
    /// otherwise the output replaces whatever is there.
    pub keep_existing: bool,
}

/// Default of [`RestoreOptions::pointer_file_budget`]: 256 MiB. Below it, a
/// restore keeps every Pointer File chunk it decodes (the lineage's
/// Pointer Files decoded are an eighth of each generation's dirty pages:
/// a few hundred MiB for a job of a few GiB); above it, holding them all
/// would cost more memory than decoding them twice costs time.
pub const POINTER_FILE_BUDGET: u64 = 256 << 20;

impl RestoreOptions {
    /// Gives `chain` the source of other ranks' pages, if there is one,
    /// and, for a full restore, pools its Pointer Files when the lineage's
    /// are larger, decoded, than
    /// [`pointer_file_budget`](Self::pointer_file_budget).
    pub fn attach(&self, chain: &mut OpenChain) {
        if let Some(s) = &self.xref_source {
            chain.set_xref_source(s.clone());
        }
        // A restore of some pages (`--pages`, `--region`) decodes few
        // Pointer File chunks, and from a bucket each one released would be
        // fetched again.
        let full = self.pages.is_none() && self.region.is_none();
        if full
            && chain.pointer_file_bytes() > self.pointer_file_budget.unwrap_or(POINTER_FILE_BUDGET)
        {
            chain.pool_pointer_files();
        }
    }

    /// The threads to use.
    pub fn threads(&self) -> usize {
        match self.threads {
            0 => crate::durable::default_threads(),
            n => n,
        }
    }
}

/// Where a restore puts the state it rebuilds.
#[derive(Clone, Copy)]
pub enum Output<'a> {
    /// A REX-IC file (a flat image with [`RestoreOptions::raw`]), written
    /// under a temporary name and published whole.
    File(&'a Path),
    /// Each page handed to a [`PageSink`], on the restore's threads: a
    /// restart into the job's own memory, with no image file between.
    Pages(&'a dyn PageSink),
}

/// The state a restore into a [`PageSink`] is about to hand over.
pub struct StateInfo<'a> {
    /// The checkpoint seq whose state it is.
    pub seq: u64,
    /// Its run.
    pub chain_id: Option<ChainId>,
    /// Bytes per page.
    pub page_size: u32,
    /// Its region table (librex checkpoints).
    pub regions: Option<&'a RegionTable>,
    /// Its pages, ascending: `put`'s `k` indexes them.
    pub pages: &'a [u64],
    /// Each page's recorded CRC (its P-Table's or its IC file's), which
    /// its rebuilt bytes are checked against before `put`.
    pub crcs: &'a [u32],
}

/// The receiver of a restore's pages ([`Output::Pages`]). A restore may
/// run several attempts (another copy of a generation, an older state with
/// `fallback`): each calls [`begin`](Self::begin) again before its pages.
pub trait PageSink: Sync {
    /// Before any page of an attempt; an error ends the restore with it,
    /// before any page is handed over.
    fn begin(&self, state: &StateInfo<'_>) -> Result<()>;
    /// Page `k` of the state (number `page`), rebuilt and checked against
    /// its recorded CRC, `crc` (`state.crcs[k]`). Called once per page of
    /// an attempt, from any of the restore's threads.
    fn put(&self, k: usize, page: u64, crc: u32, data: &[u8]) -> Result<()>;
}

/// What a restore did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RestoreReport {
    /// The generation restored (none when only L1 IC files were used).
    pub generation: Option<u64>,
    /// The seq whose state the image is.
    pub seq: u64,
    /// Pages written.
    pub pages: u64,
    /// Pages taken from pending L1 IC files.
    pub pages_from_l1_ics: u64,
    /// Bytes of page data written.
    pub bytes: u64,
    /// Seconds spent.
    pub seconds: f64,
    /// Generations whose L1 copy was unusable, read from L2 instead.
    pub l2_fallbacks: Vec<String>,
    /// Set when `--fallback` made the restore use an older generation.
    pub fell_back: Option<String>,
    /// The L1 files a fallback left out of the state it restored (a librex
    /// restart sets the checkpoints among them aside: [`crate::l1::set_aside`]).
    #[serde(serialize_with = "crate::format::json_path::paths")]
    pub left_out: Vec<PathBuf>,
    /// Chunks of the chain's RPS files and Pointer Files read (checked and
    /// decoded), and how many they hold: a `--pages` restore reads only
    /// the chunks its pages need.
    pub chunks_read: u64,
    /// Chunks of the chain's RPS files and Pointer Files.
    pub chunks_total: u64,
    /// For `--raw`: the page number of the image's first byte.
    pub raw_first_page: Option<u64>,
    /// The run (chain id) whose state the image is, when its checkpoints
    /// carry one; a REX-IC image carries it too.
    pub chain_id: Option<ChainId>,
    /// The region table of the restored state (checkpoints written by
    /// librex); a REX-IC image carries it too.
    pub regions: Option<RegionTable>,
    /// A page of the restored state outside its region table: a producer
    /// shrank a region without dropping the pages beyond it, which the
    /// format allows (§2.12.3: the table does not change the image), but a
    /// REX-IC file carrying that table could not hold the page (§2.12.2,
    /// check 5). The image is then written without the table (helper-96:
    /// such a state, pushed and its L1 files deleted, restored only with
    /// `--raw`).
    pub outside_regions: Option<u64>,
    /// Who wrote the restored state's checkpoint (seq `seq`): a job that
    /// continues the run records it in its next checkpoint
    /// ([`crate::format::ic::IcExt::continues`]).
    #[serde(skip)]
    pub writer: Writer,
}

/// Restores from L2 alone (permanent failure) into `out`.
///
/// Nothing keeps a push out of L2 meanwhile (there is no L1 to lock): a
/// push that prunes the chain being read (its complete coalescence made a
/// newer one) makes its files vanish under the restore. When an attempt
/// fails, or falls back, while the store's manifests changed under it, the
/// restore starts again on the new listing, a few times (helper-73: exit 1
/// or 3, "no valid generation", while a newer valid generation existed).
pub fn restore_l2(l2: &dyn Store, opts: &RestoreOptions, out: &Path) -> Result<RestoreReport> {
    let manifests = |objects: &[crate::store::ObjectInfo]| -> Vec<String> {
        objects
            .iter()
            .filter(|o| parse_manifest_name(&o.name).is_some())
            .map(|o| o.name.clone())
            .collect()
    };
    let mut objects = l2.list()?;
    for _ in 0..8 {
        let r = restore_l2_once(l2, &objects, opts, out);
        let retry = match &r {
            Err(_) => true,
            Ok(rep) => rep.fell_back.is_some(),
        };
        if !retry {
            return r;
        }
        match l2.list() {
            Ok(now) if manifests(&now) != manifests(&objects) => objects = now,
            _ => return r,
        }
    }
    restore_l2_once(l2, &objects, opts, out)
}

fn restore_l2_once(
    l2: &dyn Store,
    objects: &[crate::store::ObjectInfo],
    opts: &RestoreOptions,
    out: &Path,
) -> Result<RestoreReport> {
    let out = Output::File(out);
    let index = ChainIndex::load_listed(l2, objects)?.without_out_of_order(&l2.describe());
    if let Some(e) = rank_chain_alone(&index, &l2.describe(), opts) {
        return Err(e);
    }
    let coalesced = opts.seq.and_then(|want| coalesced_into(&index, want));
    let index = index.up_to_seq(opts.seq);
    if let (Some(e), None, None) = (coalesced, index.newest(), opts.generation) {
        return Err(e);
    }
    restore_with_fallback(&index, &l2.describe(), opts, None, |g, _| {
        let mut chain = OpenChain::open(l2, &index, g)?;
        opts.attach(&mut chain);
        let mut report = RestoreReport::default();
        write_image(Some(&chain), &[], opts, out, &mut report)?;
        Ok(report)
    })
}

/// Restores from L1 plus L2 (transient failure) into `out`: the newest
/// valid generation of either place (L2's, or L1's copy of one L2 lacks)
/// plus the pending IC files after it. With `--fallback`, the newest valid
/// state: the same generation with the pending files up to the first damaged
/// one, before any older generation.
///
/// Waits while a push holds L1's job lock, and keeps pushes out until the
/// image is written ([`JobLock::shared`](crate::l1::lock::JobLock::shared)).
pub fn restore_l1_l2(job: &Job, opts: &RestoreOptions, out: &Path) -> Result<RestoreReport> {
    restore_l1_l2_to(job, opts, Output::File(out))
}

/// [`restore_l1_l2`] into `out`: a file, or a [`PageSink`] that takes each
/// page (a restart into the job's memory).
pub fn restore_l1_l2_to(
    job: &Job,
    opts: &RestoreOptions,
    out: Output<'_>,
) -> Result<RestoreReport> {
    let _reading = if opts.l1_locked {
        None
    } else {
        crate::l1::lock::JobLock::shared(&job.l1, |_| {})?
    };
    // L1's copy of the chain is a shortcut: when its directory cannot be
    // listed (a file under its name, no permission), every generation is
    // read from L2, as for a copy that is not there (for the newest state,
    // only with --fallback: see `maybe_newer` below).
    let (l1_index, l1_unlisted) = match ChainIndex::load(&job.l1_chain) {
        Ok(i) => (i, None),
        Err(e @ Error::Io { .. }) => (ChainIndex::default(), Some(e)),
        Err(e) => return Err(e),
    };
    let l1_unreadable = l1_unlisted.as_ref().map(Error::report);
    let l2_objects = job.l2.list()?;
    let l2_index = ChainIndex::load_listed(job.l2.as_ref(), &l2_objects)?;
    if let Some(e) = foreign_copy(job, &l2_index, &l1_index, &l2_objects, opts)? {
        return Err(e);
    }
    if opts.generation.is_none()
        && let Some(e) = differing_copy(job, &l2_index, &l1_index)
    {
        return Err(e);
    }
    if let Some(e) = rank_chain_alone(&l2_index, &job.l2.describe(), opts) {
        return Err(e);
    }
    // Committed first: `committed` drops the invalid manifests above the
    // newest generation it keeps (torn uncommitted ones), and a committed
    // generation found out of order must stay among the invalid ones, so
    // that the restore stops on it or says it fell back (helper-89: a
    // rank's `--fallback` restore gave the generation below with no word).
    let mut index = l2_index.overlaid_with(&l1_index);
    if let Some(committed) = opts.job_committed {
        index = index.committed(committed);
    }
    let mut index = index.without_out_of_order(&job.l2.describe());
    let oldest = index.manifests.values().next().cloned();
    let all_newest = index.newest().map(Covered::from);
    let coalesced = opts.seq.and_then(|want| coalesced_into(&index, want));
    index = index.up_to_seq(opts.seq);
    if let (Some(want), Some(o), None) = (opts.seq, &oldest, index.newest()) {
        // A run restarted in L1 (its FULL checkpoint newer than every
        // generation, its seqs counted from 0 again) holds S on its own:
        // that FULL checkpoint and the files after it, up to S, with no
        // generation under them (helper-68: refused while an older run's
        // generation happened to end after S).
        if let Ok(l1) = L1Dir::scan_after_up_to(&job.l1, all_newest, Some(want))
            && l1.files.first().is_some_and(IcMeta::is_full)
        {
            let mut report = RestoreReport::default();
            write_image(None, &l1.files, opts, out, &mut report)?;
            return Ok(report);
        }
        // Every generation of the run S belongs to ends after S: the
        // checkpoints before them are coalesced into them and gone from L1.
        if let Some(e) = coalesced {
            return Err(e);
        }
        return Err(Error::chain(
            "--seq",
            format!(
                "checkpoint {want} cannot be restored: no generation ends at or before it (the oldest, generation {}, holds seq {}..={} coalesced)",
                o.generation, o.first_seq, o.last_seq
            ),
        ));
    }
    let newest = index.newest().map(|m| m.generation);
    if newest.is_none() && opts.generation.is_none() && index.invalid.is_empty() {
        // Nothing in L2 yet: the L1 checkpoints alone.
        let pending = match L1Dir::scan_after_up_to(&job.l1, None, opts.seq) {
            Ok(l1) => l1.files,
            Err(e) if opts.fallback && e.is_about_data() => {
                return restore_pending_prefix(job, opts, out, e);
            }
            Err(e) => return Err(e),
        };
        if pending.is_empty() {
            return Err(Error::chain(
                &job.l1,
                "nothing to restore: no L2 generation and no L1 checkpoint",
            ));
        }
        let mut report = RestoreReport::default();
        return match write_image(None, &pending, opts, out, &mut report) {
            Ok(()) => Ok(report),
            Err(e) if opts.fallback && e.is_about_data() => {
                restore_pending_prefix(job, opts, out, e)
            }
            Err(e) => Err(e),
        };
    }
    let place = format!(
        "{} (and L1's copy in {})",
        job.l2.describe(),
        job.l1.display()
    );
    // L1 names the job's runs: those of its IC files and of its copy of
    // the chain. The first choice may be of another (L2 shared with another
    // job by mistake), the walk back stays within them.
    // Read once: the runs here, the pending files' run in each attempt.
    let l1_files = crate::l1::read_readable(&job.l1);
    let mut runs: Vec<crate::format::ic::ChainId> = l1_files
        .iter()
        .filter_map(|f| f.chain_id)
        .chain(l1_index.manifests.values().filter_map(|m| m.chain_id))
        .collect();
    runs.dedup();
    // L1's copy unreadable, it may hold a newer generation than L2 (whose
    // manifest L2 lost: step 1 of FORMAT §3.5.2), and nothing else tells:
    // pending checkpoints that continue L2's newest may be stale copies of
    // ones that generation coalesced (helper-39, helper-40: an older state
    // with exit 0). The newest state stops here unless told otherwise.
    let mut maybe_newer = false;
    if let Some(Error::Io { path, source, .. }) = &l1_unlisted
        && opts.generation.is_none()
        && opts.seq.is_none()
    {
        maybe_newer = true;
        if !opts.fallback {
            return Err(Error::Io {
                path: path.clone(),
                op: "list L1's copy of the chain, which may hold a newer generation than L2 (--l2-only, or --fallback, restores L2's newest)",
                source: std::io::Error::new(source.kind(), source.to_string()),
            });
        }
    }
    let mut report = restore_with_fallback(&index, &place, opts, Some(runs), |g, first| {
        // L1's copy of a generation is trusted until one of its chunks
        // fails a CRC while the image is rebuilt (each chunk is checked as
        // it is first decoded); the restore then runs again with that
        // generation read from L2. Nothing is published before the end, and
        // L1's copy is not read twice (a check pass, then the rebuild) on
        // every restart.
        let mut from_l2 = BTreeMap::new();
        loop {
            let attempt = Attempt {
                job,
                l1_index: &l1_index,
                l1_unreadable: l1_unreadable.as_deref(),
                l1_files: &l1_files,
                index: &index,
                newest,
                opts,
                out,
                from_l2: &from_l2,
            };
            match attempt.restore(g, first) {
                Err(e) if rebuilt_page_failed(&e) => {
                    // Its chunks passed their CRCs, so the damage can be
                    // in any generation its pointers reach, not only the
                    // one the page belongs to (helper-38: CRCs forged in
                    // an older generation's L1 RPS). Every generation of
                    // the lineage still read from L1 is read from L2.
                    let why = format!(
                        "a page rebuilt from L1's copy of its lineage failed its CRC: {}",
                        e.report()
                    );
                    let mut more = false;
                    for m in index.lineage(g, job.l2.as_ref())? {
                        if l1_index.get(m.generation) == Some(&m)
                            && !from_l2.contains_key(&m.generation)
                        {
                            from_l2.insert(m.generation, why.clone());
                            more = true;
                        }
                    }
                    if !more {
                        return Err(neither_copy(e, &from_l2));
                    }
                }
                Err(e) => match damaged_l1_copy(job, &e) {
                    Some(bad) if !from_l2.contains_key(&bad) => {
                        from_l2.insert(bad, e.report());
                    }
                    _ => return Err(neither_copy(e, &from_l2)),
                },
                ok => return ok,
            }
        }
    })?;
    if maybe_newer {
        let why = "L1's copy of the chain cannot be read: a newer generation it may hold was not restored";
        report.fell_back = Some(match report.fell_back.take() {
            Some(n) => format!("{n}; {why}"),
            None => why.to_string(),
        });
    }
    // A fallback to an older state leaves out L1's checkpoints after it
    // (they continue the state that could not be restored): say which,
    // unless the note already does.
    if let Some(note) = &mut report.fell_back
        && !note.contains("left out")
    {
        let left_files: Vec<&IcMeta> = l1_files.iter().filter(|f| f.seq() > report.seq).collect();
        let left: Vec<u64> = left_files.iter().map(|f| f.seq()).collect();
        report
            .left_out
            .extend(left_files.iter().map(|f| f.path.clone()));
        if let (Some(a), Some(b)) = (left.first(), left.last()) {
            let n = left.len();
            note.push_str(&format!(
                "; left out: L1's checkpoints of seq {a}..={b} ({n} file{}), which continue a newer state",
                if n == 1 { "" } else { "s" }
            ));
        }
        // Those whose header cannot be read have no seq to tell (helper-40).
        let unreadable: Vec<PathBuf> = crate::l1::list_ic_files(&job.l1)
            .unwrap_or_default()
            .into_iter()
            .filter(|p| !l1_files.iter().any(|f| &f.path == p))
            .collect();
        if !unreadable.is_empty() {
            note.push_str(&format!(
                "; left out too, their header unreadable: {}",
                unreadable
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        report.left_out.extend(unreadable);
    }
    Ok(report)
}

/// One try of [`restore_l1_l2`] at generation `g`, reading the generations
/// in `from_l2` from L2 (their L1 copy failed a check, the reason beside).
struct Attempt<'a> {
    job: &'a Job,
    l1_index: &'a ChainIndex,
    /// Why L1's copy could not be listed, if it could not.
    l1_unreadable: Option<&'a str>,
    /// L1's readable IC files (their headers), in seq order.
    l1_files: &'a [IcMeta],
    index: &'a ChainIndex,
    newest: Option<u64>,
    opts: &'a RestoreOptions,
    out: Output<'a>,
    from_l2: &'a BTreeMap<u64, String>,
}

/// Whether `e` is a page of a generation (in L1's copy or in L2) whose
/// rebuilt bytes fail their CRC (`OpenChain::read_page`).
fn rebuilt_page_failed(e: &Error) -> bool {
    matches!(e, Error::Corrupt { path, field: "page", .. }
        if path.file_name().and_then(|n| generation_of(&n.to_string_lossy())).is_some())
}

/// `e`, about a file of a generation whose L1 copy was set aside before
/// (`from_l2`), as an error that names both: L2's problem alone sent the
/// operator to L2, while L1's damaged file was named only by `verify`.
fn neither_copy(e: Error, from_l2: &BTreeMap<u64, String>) -> Error {
    // Not a failure to reach L2 (exit 1 says to try again), only data
    // that is missing or wrong.
    if !e.is_about_data() {
        return e;
    }
    let path = match &e {
        Error::Io { path, .. } | Error::Corrupt { path, .. } | Error::Chain { path, .. } => {
            path.clone()
        }
        Error::Remote { key, .. } => PathBuf::from(key),
        _ => return e,
    };
    let Some((g, why)) = path
        .file_name()
        .and_then(|n| generation_of(&n.to_string_lossy()))
        .and_then(|g| Some((g, from_l2.get(&g)?)))
    else {
        return e;
    };
    Error::chain(
        format!("generation {g}"),
        format!(
            "neither copy can be read: L2's: {}; L1's: {why}",
            e.report()
        ),
    )
}

/// The generation whose L1 copy `e` found damaged, if `e` is that.
fn damaged_l1_copy(job: &Job, e: &Error) -> Option<u64> {
    match e {
        Error::Corrupt { path, .. } if path.starts_with(job.l1_chain.root()) => path
            .file_name()
            .and_then(|n| generation_of(&n.to_string_lossy())),
        _ => None,
    }
}

impl Attempt<'_> {
    fn restore(&self, g: u64, first: bool) -> Result<RestoreReport> {
        let Attempt {
            job,
            l1_index,
            l1_unreadable,
            l1_files,
            index,
            newest,
            opts,
            out,
            from_l2,
        } = *self;
        let Some(m) = index.get(g).cloned() else {
            // Why, when the index knows (helper-90: a generation set aside
            // as out of order was said to have no valid manifest anywhere,
            // while L1's copy held one).
            if let Some((_, e)) = index.invalid.iter().find(|(h, _)| *h == g) {
                return Err(Error::chain(
                    job.l2.describe(),
                    format!("generation {g} has no valid manifest: {}", e.report()),
                ));
            }
            return Err(Error::chain(
                job.l2.describe(),
                format!("generation {g} has no valid manifest in L2 or in L1's copy"),
            ));
        };
        let covered = Covered::from(&m);
        // Pending IC files extend the newest generation; when falling back,
        // also the newest generation of their own run (the L1 directory's
        // run, which another job's newer chain on the same L2 must not
        // replace), and an older one of it that L1 still continues: every
        // later one was passed over, and the files a later generation
        // coalesced, still in L1 when its push stopped before deleting
        // them, and the ones after give the newest state there is
        // (helper-67: a generation damaged in both copies took the restore
        // back to the one before it alone, and librex set aside the files
        // that continued it).
        let newest_of_run = !index
            .manifests
            .range(g + 1..)
            .any(|(_, n)| same_run(n.chain_id, m.chain_id));
        let continued = l1_files.iter().any(|f| {
            Some(f.seq()) == m.last_seq.checked_add(1) && same_run(f.chain_id, m.chain_id)
        });
        let pending_apply = Some(g) == newest
            || (!first
                && opts.fallback
                && opts.generation.is_none()
                && (newest_of_run || continued));
        // Falling back, a generation of another run than the L1 directory's
        // pending incrementals is another job's state (two jobs on one L2):
        // passed over, so the walk reaches the L1 directory's own run.
        if !first && foreign_pending(l1_files, &covered, &m) {
            return Err(Error::chain(
                &job.l1,
                format!(
                    "generation {g} is of another run than the pending checkpoints of this L1 directory"
                ),
            ));
        }
        let (chain, notes) = match open_mixed(job, l1_index, l1_unreadable, index, g, from_l2) {
            Ok((mut c, notes)) => {
                opts.attach(&mut c);
                (c, notes)
            }
            // The generation cannot be opened, but a pending FULL
            // checkpoint after it needs nothing from it.
            Err(e) if opts.fallback && pending_apply && e.is_about_data() => {
                let (prefix, skipped) = L1Dir::valid_prefix_after(&job.l1, Some(covered.clone()));
                let Some(i) = prefix.iter().rposition(|p| p.is_full()) else {
                    return Err(e);
                };
                let mut report = RestoreReport::default();
                write_image(None, &prefix[i..], opts, out, &mut report)?;
                report.fell_back = Some(format!(
                    "generation {g} cannot be read ({}); restored the pending FULL checkpoint of seq {} with seq {}..={} (the state at seq {}); left out: {}",
                    e.report(),
                    prefix[i].seq(),
                    prefix[i].seq(),
                    prefix[prefix.len() - 1].seq(),
                    prefix[prefix.len() - 1].seq(),
                    LeftOut::list(&skipped)
                ));
                report.left_out = skipped.into_iter().map(|l| l.path).collect();
                return Ok(report);
            }
            Err(e) => return Err(e),
        };
        let mut report = RestoreReport {
            l2_fallbacks: notes,
            ..Default::default()
        };
        if !pending_apply {
            write_image(Some(&chain), &[], opts, out, &mut report)?;
            return Ok(report);
        }
        let last = m.last_seq;
        let strict = L1Dir::scan_after_up_to(&job.l1, Some(covered.clone()), opts.seq)
            .and_then(|l1| write_state(&chain, &l1.files, opts, out, &mut report));
        match strict {
            Ok(()) => Ok(report),
            // The generation is sound but a pending file is not: its newest
            // valid state is the generation plus the files before it (or a
            // later pending FULL checkpoint and the files after it). Not
            // for a file that could not be read (no permission, an I/O
            // error): it may be sound, and what follows it the newest state
            // (helper-72: an unreadable checkpoint was passed over, exit 0).
            Err(e) if opts.fallback && e.is_about_data() => {
                let (prefix, skipped) = L1Dir::valid_prefix_after(&job.l1, Some(covered.clone()));
                // Nothing of the pending files continues this generation,
                // and they are of another run: this generation is not the
                // L1 directory's (another job's chain on the same L2); fall
                // back to the newest generation of the L1 directory's run.
                let foreign = prefix.is_empty() && foreign_pending(l1_files, &covered, &m);
                if foreign {
                    return Err(e);
                }
                let mut report = RestoreReport {
                    l2_fallbacks: report.l2_fallbacks,
                    ..Default::default()
                };
                write_state(&chain, &prefix, opts, out, &mut report)?;
                // What write_state used: from the newest FULL checkpoint on.
                let (base, used) = match prefix.iter().rposition(|p| p.is_full()) {
                    Some(i) => (
                        format!(
                            "the pending FULL checkpoint of seq {} (which supersedes generation {g})",
                            prefix[i].seq()
                        ),
                        &prefix[i..],
                    ),
                    None => (format!("generation {g}"), &prefix[..]),
                };
                report.fell_back = Some(format!(
                    "the pending checkpoints cannot all be used ({}); restored {base}{} (the state at seq {}); left out: {}",
                    e.report(),
                    match (used.first(), used.last()) {
                        (Some(a), Some(b)) => format!(" with seq {}..={}", a.seq(), b.seq()),
                        _ => String::new(),
                    },
                    prefix.last().map_or(last, |p| p.seq()),
                    LeftOut::list(&skipped)
                ));
                report.left_out = skipped.into_iter().map(|l| l.path).collect();
                Ok(report)
            }
            Err(e) => Err(e),
        }
    }
}

/// Whether the L1 directory holds pending incrementals of another run than
/// generation `m` (readable ones: a damaged file must not sway it): then `m`
/// is not the L1 directory's state but another job's on the same L2.
/// A rank's chain of an MPI job restored as a plain chain (no job to hold
/// it to): its generations are the job's only once their job generation
/// commits, which only the job's location tells. A plain restore took the
/// newest, committed or not, with exit 0 (helper-66: a generation of a
/// collective push killed before its commit). Refused, naming the way.
fn rank_chain_alone(index: &ChainIndex, place: &str, opts: &RestoreOptions) -> Option<Error> {
    if opts.xref_source.is_some() || opts.job_committed.is_some() {
        return None;
    }
    rank_chain(index, place, "restore")
}

/// The refusal of [`rank_chain_alone`] for `what` (restore, verify), when
/// the chain holds a generation of a job generation.
fn rank_chain(index: &ChainIndex, place: &str, what: &str) -> Option<Error> {
    let m = index
        .manifests
        .values()
        .rev()
        .find(|m| m.job_generation.is_some())?;
    Some(Error::chain(
        place,
        format!(
            "generation {} is a rank's part of job generation {} of an MPI job, whose generations count only once the job commits them: {what} it with --rank R and the job's location (the directory or prefix above this one) as --l2",
            m.generation,
            m.job_generation.unwrap_or(0)
        ),
    ))
}

/// L1's copy of the chain and L2 share no generation, differ on one, and
/// L2's newest is of no run L1's copy holds: L1 and L2 are two jobs' (an
/// `--l1` or `--l2` mistaken), and L2's newest state is not the L1
/// directory's job's. Each of L1's generations was passed over with a
/// warning and L2's state restored with exit 0 (helper-66). So are they
/// when L1's copy holds only generations above L2's newest, of no run of
/// L2's newest, and none of their files is in L2 (`l2_objects`; the same
/// bytes, not merely the name: [`crate::l2::push::shares_with`]), as
/// a push's recovery refuses them (§3.6.3 step 3): a push writes its data
/// files to L2 before either manifest (helper-87: another job's leftover
/// copy, pruned to a FULL generation numbered above this job's, was
/// restored as this job's newest state, exit 0). `None` when they agree
/// on a generation, or a generation is asked for.
pub(crate) fn foreign_copy(
    job: &Job,
    l2: &ChainIndex,
    l1: &ChainIndex,
    l2_objects: &[crate::store::ObjectInfo],
    opts: &RestoreOptions,
) -> Result<Option<Error>> {
    if opts.generation.is_some() {
        return Ok(None);
    }
    let mut differs = None;
    for (g, m) in &l1.manifests {
        match l2.get(*g) {
            Some(n) if n == m => return Ok(None),
            Some(_) => {
                differs.get_or_insert(*g);
            }
            None => {}
        }
    }
    let Some(newest) = l2.newest() else {
        return Ok(None);
    };
    if l1
        .manifests
        .values()
        .any(|m| m.chain_id.is_some() && m.chain_id == newest.chain_id)
    {
        return Ok(None);
    }
    let Some(g) = differs else {
        let above = l1
            .manifests
            .values()
            .all(|m| m.generation > newest.generation);
        if l1.manifests.is_empty()
            || !above
            || crate::l2::push::shares_with(l1, l2, job.l2.as_ref(), l2_objects)?
        {
            return Ok(None);
        }
        let gens: Vec<String> = l1.manifests.keys().map(u64::to_string).collect();
        return Ok(Some(Error::chain(
            &job.l1,
            format!(
                "L1's copy of the chain ({}, generations {}) shares no generation and no file with L2 ({}, newest generation {}), and holds none of its run: they are two jobs' (or L1 is another job's leftovers); give this L2's L1 directory, --l2-only to restore L2's newest state alone, or --generation N to take L1's copy anyway",
                job.l1_chain.describe(),
                gens.join(", "),
                job.l2.describe(),
                newest.generation
            ),
        )));
    };
    Ok(Some(Error::chain(
        &job.l1,
        format!(
            "L1's copy of the chain ({}) and L2 ({}) share no generation and hold different manifests of generation {g}: they are two jobs' (or L1 is another run's leftovers); give this L2's L1 directory, or --l2-only to restore L2's newest state alone",
            job.l1_chain.describe(),
            job.l2.describe()
        ),
    )))
}

/// L2 and L1's copy of the chain hold different manifests under one
/// generation number: two histories, as a push refuses them (§3.6.3 step
/// 2; only a push writes a manifest, the same bytes to both places). Which
/// pending checkpoints the generation covers depends on which one is
/// taken (helper-111: L2's generation 4 claiming `last_seq` 12, L1's copy
/// 9, made L1's pending 10..=12 covered; the restore read the generation
/// from L2, left their pages out and said seq 12, exit 0).
pub(crate) fn differing_copy(job: &Job, l2: &ChainIndex, l1: &ChainIndex) -> Option<Error> {
    let differ = crate::l2::push::two_histories(l2, l1)?;
    Some(Error::chain(
        job.l1_chain.root(),
        format!(
            "{differ} differ between {} and L1's copy of the chain: two histories (the L1 directory of another job, or another job's L2?); give this L2's L1 directory, --l2-only to restore L2's state alone, or --generation N to restore one generation",
            job.l2.describe()
        ),
    ))
}

fn foreign_pending(l1_files: &[IcMeta], covered: &Covered, m: &Manifest) -> bool {
    l1_files
        .iter()
        .any(|f| !covered.covers(f) && !f.is_full() && !same_run(f.chain_id, m.chain_id))
}

/// Writes the state of `chain` plus `pending`; when a pending FULL
/// checkpoint supersedes the chain, from that FULL checkpoint on alone (the
/// same image, and a damaged chain it no longer needs cannot spoil it).
fn write_state(
    chain: &OpenChain,
    pending: &[IcMeta],
    opts: &RestoreOptions,
    out: Output<'_>,
    report: &mut RestoreReport,
) -> Result<()> {
    let pending = up_to(pending, opts);
    match pending.iter().rposition(|p| p.is_full()) {
        Some(i) => write_image(None, &pending[i..], opts, out, report),
        None => write_image(Some(chain), pending, opts, out, report),
    }
}

/// With `--fallback` and no usable generation: the pending IC files up to
/// the first that cannot be used.
fn restore_pending_prefix(
    job: &Job,
    opts: &RestoreOptions,
    out: Output<'_>,
    first: Error,
) -> Result<RestoreReport> {
    let (prefix, skipped) = L1Dir::valid_prefix_after(&job.l1, None);
    if prefix.is_empty() {
        return Err(first);
    }
    let mut report = RestoreReport::default();
    write_image(None, &prefix, opts, out, &mut report)?;
    report.fell_back = Some(format!(
        "{}; restored the L1 checkpoints up to seq {}; left out: {}",
        first.report(),
        prefix.last().map_or(0, |m| m.seq()),
        LeftOut::list(&skipped)
    ));
    report.left_out = skipped.into_iter().map(|l| l.path).collect();
    Ok(report)
}

/// Picks the generation to restore and runs `restore` on it; with
/// `--fallback`, walks back through older valid generations while the
/// restore fails (opening, a chunk or page CRC, anything), saying so in the
/// report. `restore(g, first)` is told whether `g` is the first choice or a
/// fallback (with `--fallback`, it may itself fall back within `g`, to fewer
/// pending IC files). The output is written under a temporary name, so
/// a failed attempt leaves nothing behind. The walk back passes over
/// generations of another run than the job's: `runs` (what L1 holds; none
/// known, any run), or from L2 alone (`None`) the first choice's.
fn restore_with_fallback(
    index: &ChainIndex,
    place: &str,
    opts: &RestoreOptions,
    runs: Option<Vec<crate::format::ic::ChainId>>,
    mut restore: impl FnMut(u64, bool) -> Result<RestoreReport>,
) -> Result<RestoreReport> {
    let target = match opts.generation {
        Some(g) => g,
        None => match (index.newest(), index.invalid.iter().map(|(g, _)| *g).max()) {
            // Equal: a stray manifest name beside the generation's own
            // (`format::manifest::stray_manifest_name`).
            (Some(m), Some(bad)) if bad >= m.generation && !opts.fallback => {
                let e = &index
                    .invalid
                    .iter()
                    .find(|(g, _)| *g == bad)
                    .expect("present")
                    .1;
                return Err(Error::chain(
                    format!("{place}: generation {bad}"),
                    format!(
                        "the newest manifest is invalid: {} (use --fallback to restore generation {} instead)",
                        e.report(),
                        m.generation
                    ),
                ));
            }
            (Some(m), _) => m.generation,
            (None, _) => {
                let why = index
                    .invalid
                    .first()
                    .map(|(g, e)| format!(" (generation {g}: {})", e.report()))
                    .unwrap_or_default();
                let upto = opts
                    .seq
                    .map(|s| format!(" that ends at or before checkpoint {s} (--seq)"))
                    .unwrap_or_default();
                return Err(Error::chain(
                    place,
                    format!("no valid generation to restore{upto}{why}"),
                ));
            }
        },
    };
    let first = match restore(target, true) {
        Ok(mut r) => {
            if opts.generation.is_none() && r.fell_back.is_none() {
                r.fell_back = index
                    .invalid
                    .iter()
                    .find(|(g, _)| *g > target)
                    .map(|(g, e)| {
                        format!(
                            "generation {g} is invalid ({}); restored generation {target}",
                            e.report()
                        )
                    });
            }
            return Ok(r);
        }
        // Only for what the data is: a store out of reach (an S3 error
        // 500, an I/O error) may pass, and an older state restored then
        // would be taken for the newest (helper-67: a restart fell back
        // past a generation L2 failed to send once, and set aside the
        // checkpoints after it for good).
        Err(e) if opts.fallback && e.is_about_data() => e,
        Err(e) => return Err(e),
    };
    // Only the job's older states: a generation of another run is another
    // job's (or another start of the computation), never a fallback
    // (helper-38: a foreign generation copied under this chain's names was
    // restored with exit 0).
    let runs = runs.unwrap_or_else(|| {
        index
            .get(target)
            .and_then(|m| m.chain_id)
            .into_iter()
            .collect()
    });
    let mut other_runs = Vec::new();
    let mut tried = Vec::new();
    for m in index.older_than(target) {
        if !runs.is_empty() && m.chain_id.is_some_and(|c| !runs.contains(&c)) {
            other_runs.push(m.generation);
            continue;
        }
        match restore(m.generation, false) {
            Err(e) => tried.push((m.generation, e)),
            Ok(mut r) => {
                // The state restored is the generation's, or with pending
                // checkpoints on top (its own note, kept, says which).
                let inner = r.fell_back.take();
                r.fell_back = Some(format!(
                    "generation {target} is unusable ({}); fell back to generation {} (seq {}){}",
                    first.report(),
                    m.generation,
                    r.seq,
                    inner.map(|n| format!("; {n}")).unwrap_or_default()
                ));
                return Ok(r);
            }
        }
    }
    if !other_runs.is_empty() {
        other_runs.reverse();
        return Err(Error::chain(
            place,
            format!(
                "{} (--fallback: no older generation of this run restores; generations {other_runs:?} are of another run and were not tried)",
                first.report()
            ),
        ));
    }
    // Every older state refused for what its data is (not for a store out
    // of reach, whose exit 1 says to try again): say why, generation by
    // generation, instead of the first failure alone (helper-40: a stray
    // checkpoint of another run in L1 refused them all, unsaid).
    if !tried.is_empty() && first.is_about_data() && tried.iter().all(|(_, e)| e.is_about_data()) {
        let why: Vec<String> = tried
            .iter()
            .map(|(g, e)| format!("generation {g}: {}", e.report()))
            .collect();
        return Err(Error::chain(
            place,
            format!(
                "{} (--fallback: no older state restores either: {})",
                first.report(),
                why.join("; ")
            ),
        ));
    }
    Err(first)
}

/// Opens a lineage generation by generation from L1's copy, each falling
/// back to L2 when its L1 copy cannot be opened or verified.
fn open_mixed(
    job: &Job,
    l1: &ChainIndex,
    l1_unreadable: Option<&str>,
    l2: &ChainIndex,
    g: u64,
    from_l2: &BTreeMap<u64, String>,
) -> Result<(OpenChain, Vec<String>)> {
    let lineage = l2.lineage(g, job.l2.as_ref())?;
    let mut gens = Vec::new();
    let mut notes = Vec::new();
    for m in &lineage {
        let local = if let Some(why) = from_l2.get(&m.generation) {
            Err(Error::Invalid(why.clone()))
        } else if let (None, Some(why)) = (l1.get(m.generation), l1_unreadable) {
            Err(Error::Invalid(format!(
                "L1's copy of the chain cannot be read: {why}"
            )))
        } else if l1.get(m.generation) == Some(m) {
            // Its chunks are checked as the rebuild decodes them; one that
            // fails makes the caller try again with this generation from L2.
            OpenGeneration::open(&job.l1_chain, m)
        } else {
            let what = match l1.get(m.generation) {
                Some(_) => "L1 holds another manifest for it (another chain's, or a stale copy)",
                None => "it is not in L1",
            };
            Err(Error::chain(
                job.l1_chain.root(),
                format!("generation {}: {what}", m.generation),
            ))
        };
        match local {
            Ok(og) => gens.push(og),
            Err(e) => {
                notes.push(format!(
                    "generation {}: L1 copy unusable ({e}); read from L2",
                    m.generation
                ));
                gens.push(OpenGeneration::open(job.l2.as_ref(), m)?);
            }
        }
    }
    Ok((OpenChain::from_generations(gens), notes))
}

/// The pending checkpoints a restore of `--seq S` applies: those up to S
/// (all of them without `--seq`). `pending` is in seq order.
fn up_to<'p>(pending: &'p [IcMeta], opts: &RestoreOptions) -> &'p [IcMeta] {
    match opts.seq {
        Some(s) => &pending[..pending.partition_point(|m| m.seq() <= s)],
        None => pending,
    }
}

/// Refuses, before anything is written, a restore of `--seq S` whose state
/// (`chain` plus `pending`) is not the state at seq S.
/// `--seq want` inside a generation (after its first seq, before its
/// last): the newest such generation, which holds that checkpoint only
/// coalesced with the ones after it, as the reason nothing restores it.
fn coalesced_into(index: &ChainIndex, want: u64) -> Option<Error> {
    let m = index
        .manifests
        .values()
        .rev()
        .find(|m| m.first_seq <= want && want < m.last_seq)?;
    Some(Error::chain(
        "--seq",
        format!(
            "checkpoint {want} cannot be restored: it is coalesced into generation {} (seq {}..={}{}), which keeps the state at seq {} only{}",
            m.generation,
            m.first_seq,
            m.last_seq,
            m.chain_id
                .map(|r| format!(", {}", crate::l1::run_name(Some(r))))
                .unwrap_or_default(),
            m.last_seq,
            if index.manifests.values().any(|o| {
                o.generation < m.generation
                    && o.last_seq == want
                    && o.chain_id.is_some()
                    && m.chain_id.is_some()
                    && o.chain_id != m.chain_id
            }) {
                "; an older run's generation ends at that seq, but it is not the job's state there since the newer run began (--generation N restores it)"
            } else {
                ""
            }
        ),
    ))
}

fn check_seq(chain: Option<&OpenChain>, pending: &[IcMeta], opts: &RestoreOptions) -> Result<()> {
    let Some(want) = opts.seq else {
        return Ok(());
    };
    let got = seq_of(chain, pending);
    if chain.is_none() && pending.is_empty() {
        return Err(Error::chain(
            "--seq",
            format!(
                "checkpoint {want} cannot be restored: no generation ends at or before it, and no pending checkpoint in L1 is at or before it"
            ),
        ));
    }
    if got == want {
        return Ok(());
    }
    let base = match (chain, pending.first()) {
        (_, Some(f)) if f.is_full() => format!("the pending FULL checkpoint of seq {}", f.seq()),
        (Some(c), _) => {
            let m = c.manifest();
            format!(
                "generation {} (seq {}..={})",
                m.generation, m.first_seq, m.last_seq
            )
        }
        (None, _) => "the pending checkpoints".to_string(),
    };
    let why = if got > want {
        "it is inside that generation, which coalesced its checkpoints"
    } else {
        "no pending checkpoint of that seq is in L1 (or it was coalesced into a later generation)"
    };
    Err(Error::chain(
        "--seq",
        format!(
            "checkpoint {want} cannot be restored exactly: the newest state at or before it is seq {got}, from {base}{}; {why}",
            if pending.is_empty() || pending[0].is_full() {
                String::new()
            } else {
                format!(
                    " with the pending checkpoints of seq {}..={}",
                    pending[0].seq(),
                    pending[pending.len() - 1].seq()
                )
            }
        ),
    ))
}

/// The seq of the state `chain` plus `pending` restores.
fn seq_of(chain: Option<&OpenChain>, pending: &[IcMeta]) -> u64 {
    pending
        .last()
        .map(|m| m.seq())
        .or_else(|| chain.map(|c| c.manifest().last_seq))
        .unwrap_or(0)
}

/// Refuses a `--pages` selection with a range wholly outside the image's
/// pages (`span`, first and last), or a range that selects none of the
/// image's pages (`selected`, sorted): a range may cover holes of a sparse
/// image, as long as it selects something.
fn check_ranges(
    ranges: &[(u64, u64)],
    span: Option<(u64, u64)>,
    selected: &[u64],
    seq: u64,
) -> Result<()> {
    let show = |(a, b): (u64, u64)| {
        if a == b {
            format!("{a:#x}")
        } else {
            format!("{a:#x}-{b:#x}")
        }
    };
    let Some((first, last)) = span else {
        return Err(Error::Invalid(format!(
            "--pages: the image of seq {seq} has no page"
        )));
    };
    if let Some(&r) = ranges.iter().find(|&&(a, b)| b < first || a > last) {
        return Err(Error::Invalid(format!(
            "--pages: {} lies outside the image of seq {seq} (pages {first:#x}..={last:#x})",
            show(r)
        )));
    }
    for &(a, b) in ranges {
        let i = selected.partition_point(|&p| p < a);
        if selected.get(i).is_none_or(|&p| p > b) {
            return Err(Error::Invalid(format!(
                "--pages: {} selects no page of the image of seq {seq} (pages {first:#x}..={last:#x}, with holes)",
                show((a, b))
            )));
        }
    }
    Ok(())
}

fn in_ranges(ranges: &[(u64, u64)], page: u64) -> bool {
    let i = ranges.partition_point(|&(a, _)| a <= page);
    i > 0 && ranges[..i].iter().rev().any(|&(_, b)| page <= b)
}

/// Writes the image of `chain` (if any) plus `pending` IC files to `out`.
fn write_image(
    chain: Option<&OpenChain>,
    pending: &[IcMeta],
    opts: &RestoreOptions,
    out: Output<'_>,
    report: &mut RestoreReport,
) -> Result<()> {
    let pending = up_to(pending, opts);
    check_seq(chain, pending, opts)?;
    let started = Instant::now();
    // The regions of the state restored: those of its newest checkpoint.
    let regions = match pending.last() {
        Some(m) => m.regions.clone(),
        None => chain.and_then(|c| c.manifest().regions.clone()),
    };
    let mut region_size = None;
    let narrowed;
    let opts = match opts.region {
        None => opts,
        Some(id) => {
            let Some(r) = regions.as_ref().and_then(|t| t.get(id)) else {
                return Err(Error::Invalid(format!(
                    "--region {id}: the restored state (seq {}) has {}",
                    pending
                        .last()
                        .map(|m| m.seq())
                        .or_else(|| chain.map(|c| c.manifest().last_seq))
                        .unwrap_or(0),
                    match &regions {
                        None => "no region table (not written by librex)".to_string(),
                        Some(t) => format!(
                            "no region {id} (regions: {})",
                            t.0.iter()
                                .map(|r| r.id.to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    }
                )));
            };
            region_size = Some(r.size);
            narrowed = RestoreOptions {
                pages: Some(vec![(r.first_page(), r.first_page() + r.pages - 1)]),
                ..opts.clone()
            };
            &narrowed
        }
    };
    let gens: &[OpenGeneration] = chain.map(|c| c.gens.as_slice()).unwrap_or(&[]);
    let mut layers: Vec<&dyn PageLayer> = gens.iter().map(|g| g as &dyn PageLayer).collect();
    layers.extend(pending.iter().map(|m| m as &dyn PageLayer));
    let merged = merge_layers(&layers);
    let mut entries = merged.entries;
    // Chunks are verified (and decoded) as pages need them, a full restore
    // and a `--pages` one alike: a chunk no restored page references is
    // never read.
    let span = entries
        .first()
        .map(|f| (f.page, entries.last().expect("first").page));
    if let Some(r) = &opts.pages {
        entries.retain(|e| in_ranges(r, e.page));
        // Asked for pages the image does not have: an error, never an
        // empty "restored 0 pages" or a page silently left out. (A
        // region's range is the region's.)
        if opts.region.is_none() {
            let pages: Vec<u64> = entries.iter().map(|e| e.page).collect();
            check_ranges(r, span, &pages, seq_of(chain, pending))?;
        }
    }
    let decoder = chain.map(OpenChain::decoder);
    let ng = gens.len() as u32;
    let ics: Vec<Option<IcFile>> = {
        let mut used = vec![false; pending.len()];
        for e in &entries {
            if e.chk >= ng {
                used[(e.chk - ng) as usize] = true;
            }
        }
        pending
            .iter()
            .zip(used)
            .map(|(m, u)| {
                if u {
                    IcFile::open(&m.path).map(Some)
                } else {
                    Ok(None)
                }
            })
            .collect::<Result<_>>()?
    };
    // The image's page size is that of its base layer: the chain, or a
    // pending FULL checkpoint that supersedes it (which may change it).
    let base_ic = merged.start.checked_sub(gens.len());
    let page_size = match (base_ic, chain) {
        (Some(i), _) => pending[i].header.page_size,
        (None, Some(c)) => c.manifest().page_size,
        (None, None) => pending
            .first()
            .map(|m| m.header.page_size)
            .expect("something to restore"),
    };
    if let Some(m) = pending[base_ic.unwrap_or(0)..]
        .iter()
        .find(|m| m.header.page_size != page_size)
    {
        return Err(Error::chain(
            &m.path,
            format!(
                "page size {} differs from the image's {page_size} (only a FULL checkpoint may change it)",
                m.header.page_size
            ),
        ));
    }
    let seq = seq_of(chain, pending);
    let time_ns = pending
        .last()
        .map(|m| m.header.time_ns)
        .or_else(|| chain.map(|c| c.manifest().time_ns))
        .unwrap_or(0);
    // The run whose state this is: the image carries it, as a FULL
    // checkpoint of that run would (a restarted job continues it).
    let chain_id = match pending.last() {
        Some(m) => m.chain_id,
        None => chain.and_then(|c| c.manifest().chain_id),
    };
    report.generation = chain.map(|c| c.manifest().generation);
    report.seq = seq;
    report.chain_id = chain_id;
    report.writer = match pending.last() {
        Some(m) => m.instance.map_or(Writer::NoId, Writer::Id),
        None => chain.map_or(Writer::Unknown, |c| c.manifest().instance_at(seq)),
    };
    report.regions = regions.clone();

    // Every page is rebuilt (chain) or copied (pending IC file) and
    // checked against its recorded CRC by `fetch`, on every thread at once.
    let live = |e: &crate::l1::coalesce::CListEntry| {
        (e.chk < ng).then_some(LivePage {
            page: e.page,
            layer: e.chk,
            pos: e.pp,
        })
    };
    // How many pages use each chunk: a chunk's decoded memory is given
    // back after its last page, so the restore holds what the pages still
    // to come need, not the whole lineage decoded (several times the image
    // for a chain of deltas). The same for Pointer File chunks when they
    // are pooled (`RestoreOptions::attach`), which the count gives back as
    // it goes too. Nothing else reads the chain's RPS files or Pointer
    // Files while the chunks are counted and the pages rebuilt.
    let uses = decoder.as_ref().and_then(|d| {
        // SAFETY: nothing else reads the chain's pointers while this runs
        // (the rebuild starts after it, on these same pages).
        unsafe { d.count_uses_releasing(&entries, live, opts.threads()) }
    });
    let fetch = |e: &crate::l1::coalesce::CListEntry, buf: &mut [u8]| -> Result<u32> {
        if let Some(lp) = live(e) {
            let d = decoder
                .as_ref()
                .expect("generation layers come from the chain");
            match &uses {
                // SAFETY: `uses` counted every page of `entries`, and
                // `write_pages_parallel` fills each page once; nothing
                // but these rebuilds reads the chain's patterns or
                // pointers until they are done.
                Some(u) => unsafe { d.read_page_releasing(lp, buf, u) },
                None => d.read_page(lp, buf),
            }
        } else {
            let f = ics[(e.chk - ng) as usize].as_ref().expect("opened above");
            buf.copy_from_slice(f.page(e.pp as usize)?);
            Ok(f.meta().page_crcs[e.pp as usize])
        }
    };
    report.pages_from_l1_ics = entries.iter().filter(|e| e.chk >= ng).count() as u64;
    let threads = opts.threads();
    match out {
        Output::Pages(_) if opts.raw => {
            return Err(Error::Invalid(
                "a flat image (--raw) is a file, not pages handed to a sink".into(),
            ));
        }
        Output::Pages(sink) => {
            let pages: Vec<u64> = entries.iter().map(|e| e.page).collect();
            // What `fetch` checks each rebuilt or copied page against.
            let crcs: Vec<u32> = entries
                .iter()
                .map(|e| match gens.get(e.chk as usize) {
                    Some(g) => g.ptable.page_crcs[e.pp as usize],
                    None => pending[(e.chk - ng) as usize].page_crcs[e.pp as usize],
                })
                .collect();
            sink.begin(&StateInfo {
                seq,
                chain_id,
                page_size,
                regions: regions.as_ref(),
                pages: &pages,
                crcs: &crcs,
            })?;
            let ps = page_size as usize;
            crate::durable::fill_pages_parallel(
                entries.len(),
                ps,
                threads,
                &|k, buf| fetch(&entries[k], buf),
                &|first, crcs, buf| {
                    for (i, (&crc, data)) in crcs.iter().zip(buf.chunks_exact(ps)).enumerate() {
                        sink.put(first + i, pages[first + i], crc, data)?;
                    }
                    Ok(())
                },
            )?;
        }
        Output::File(out) if opts.raw => {
            let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
                return Err(Error::Invalid(match (opts.region, &opts.pages) {
                    (Some(id), _) => format!(
                        "--raw: region {id} has no live page in the restored state (seq {seq}): nothing to write"
                    ),
                    (None, Some(_)) => "--raw: no page to restore in the requested ranges".into(),
                    (None, None) => format!(
                        "--raw: the restored state (seq {seq}) has no page: nothing to write (without --raw, the image is a REX-IC file with no page)"
                    ),
                }));
            };
            // The requested ranges' whole span, holes at either end included
            // (`--pages A-B --raw` is B - A + 1 pages, as `dd` would give);
            // without ranges, the image's first to last page.
            let (first_page, last_page) = match opts.pages.as_deref() {
                Some(r) if !r.is_empty() => (
                    r.iter().map(|x| x.0).min().unwrap_or(first.page),
                    r.iter().map(|x| x.1).max().unwrap_or(last.page),
                ),
                _ => (first.page, last.page),
            };
            // Pages 0 and 2^64-1 span 2^64 pages, which wraps: computed without
            // overflow, and refused before any output.
            let span = (last_page - first_page)
                .checked_add(1)
                .and_then(|n| n.checked_mul(u64::from(page_size)));
            let Some(span) = span.filter(|&s| s <= 1 << 40) else {
                return Err(Error::Invalid(format!(
                    "--raw: pages {first_page:#x}..={last_page:#x} span more than 1 TiB; give --pages ranges that lie closer together, or restore without --raw"
                )));
            };
            let mut f = AtomicFile::create(out)?;
            if opts.keep_existing {
                f.keep_existing();
            }
            // Errors name the output asked for, not its temporary.
            let target = f.target().to_path_buf();
            let ps = u64::from(page_size);
            crate::durable::write_pages_parallel(
                f.file()?,
                &target,
                entries.len(),
                page_size as usize,
                threads,
                &|k| (entries[k].page - first_page) * ps,
                &|k, buf| fetch(&entries[k], buf),
            )?;
            // One region: exactly its bytes (the last page may be partly used).
            f.set_len(region_size.unwrap_or(span))?;
            f.commit()?;
            report.raw_first_page = Some(first_page);
        }
        Output::File(out) => {
            let full = opts.pages.is_none();
            // And the instance that wrote that checkpoint, so that the image
            // stands for it as its FULL checkpoint would.
            let instance = match pending.last() {
                Some(m) => m.instance,
                None => chain.and_then(|c| c.manifest().instance_at(seq).id()),
            };
            let pages: Vec<u64> = entries.iter().map(|e| e.page).collect();
            let regions = match regions {
                Some(t) => match t.check_pages(&pages) {
                    Ok(()) => Some(t),
                    Err(p) => {
                        report.outside_regions = Some(p);
                        report.regions = None;
                        None
                    }
                },
                None => None,
            };
            // A FULL image continues nothing.
            let ext = IcExt {
                chain: chain_id,
                regions,
                instance,
                continues: None,
            };
            let mut w =
                IcWriter::create_ext(out, page_size, seq, full, time_ns, &ext, pages, Vec::new())?;
            if opts.keep_existing {
                w.keep_existing();
            }
            w.write_pages_parallel(threads, &|k, buf| fetch(&entries[k], buf))?;
            w.finish()?;
        }
    }
    report.pages = entries.len() as u64;
    report.bytes = report.pages * u64::from(page_size);
    for g in gens {
        for f in [&g.rps, &g.pf] {
            report.chunks_read += f.chunks_verified() as u64;
            report.chunks_total += f.chunk_count() as u64;
        }
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(())
}

/// The result of verifying one generation.
#[derive(Clone, Debug, Serialize)]
pub struct GenerationCheck {
    /// The generation.
    pub generation: u64,
    /// Where it was checked ("L1" or "L2").
    pub level: &'static str,
    /// `None` when sound, else what is wrong.
    pub error: Option<String>,
}

/// What `verify` found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct VerifyReport {
    /// One entry per generation per level.
    pub generations: Vec<GenerationCheck>,
    /// Invalid manifests.
    pub invalid_manifests: Vec<String>,
    /// Problems with L1's pending IC files.
    pub l1_errors: Vec<String>,
    /// Pages rebuilt and checked (newest generation of each level).
    pub pages_checked: u64,
}

impl VerifyReport {
    /// Whether everything checked out.
    pub fn ok(&self) -> bool {
        self.invalid_manifests.is_empty()
            && self.l1_errors.is_empty()
            && self.generations.iter().all(|g| g.error.is_none())
    }
}

/// Checks a store's generations end to end: every manifest, every file's
/// size and whole-file CRC, every chunk, and every live page of each
/// generation rebuilt against its recorded CRC (no image is written).
pub fn verify_store(
    store: &dyn Store,
    level: &'static str,
    report: &mut VerifyReport,
) -> Result<()> {
    verify_store_with(store, level, None, None, report)
}

/// [`verify_store`], reading the pages other ranks store through `xrefs`
/// (a rank of an MPI job), of the generations job generations up to
/// `job_committed` committed: one a collective push wrote and never
/// committed is not the job's (a restore passes over it; the next push
/// rolls it back), and its references may name generations other ranks
/// never wrote.
pub fn verify_store_with(
    store: &dyn Store,
    level: &'static str,
    xrefs: Option<&Arc<dyn XrefSource>>,
    job_committed: Option<u64>,
    report: &mut VerifyReport,
) -> Result<()> {
    // A pass during which a push pruned what it read is done again on a
    // new listing, which holds the chain that replaced it (the push
    // commits the new chain before it prunes the old one): verify read only
    // the pruned chain, it would have checked nothing.
    for pass in 1.. {
        let index = ChainIndex::load(store)?
            .committed_if(job_committed)
            .without_out_of_order(&store.describe());
        let mut this = VerifyReport::default();
        let pruned = verify_index(store, level, &index, xrefs, &mut this)?;
        if !pruned || pass == 8 {
            report.generations.extend(this.generations);
            report.invalid_manifests.extend(this.invalid_manifests);
            report.l1_errors.extend(this.l1_errors);
            report.pages_checked += this.pages_checked;
            break;
        }
    }
    Ok(())
}

/// [`verify_store_with`] of the generations `index` holds; `true` when a
/// generation was pruned while it was read (and left out).
fn verify_index(
    store: &dyn Store,
    level: &'static str,
    index: &ChainIndex,
    xrefs: Option<&Arc<dyn XrefSource>>,
    report: &mut VerifyReport,
) -> Result<bool> {
    // A generation a push prunes while this runs (a complete coalescence's
    // retention) goes missing, manifest and all: not damage. Its manifest
    // no longer listed afterwards, it is left out (helper-84: beside a
    // pruning push, verify called a generation BAD, exit 3, in 1 run of 4
    // on S3).
    let mut listed: Option<BTreeSet<String>> = None;
    let mut any = false;
    let mut pruned = |g: u64, e: &Error| -> Result<bool> {
        if !e.is_not_found() {
            return Ok(false);
        }
        if listed.is_none() {
            listed = Some(store.list()?.into_iter().map(|o| o.name).collect());
        }
        let gone = !listed
            .as_ref()
            .is_some_and(|l| l.contains(&manifest_name(g)));
        any |= gone;
        Ok(gone)
    };
    for (g, e) in &index.invalid {
        if pruned(*g, e)? {
            continue;
        }
        report
            .invalid_manifests
            .push(format!("{level} generation {g}: {e}"));
    }
    for m in index.manifests.values() {
        let r = verify_generation(store, index, m, xrefs, report);
        if let Err(e) = &r
            && pruned(m.generation, e)?
        {
            continue;
        }
        // An object the server fails to send says nothing of the
        // generation: the verify fails with it (exit 1), as a restore
        // does, rather than calling the generation BAD (exit 3; helper-83).
        let r = match r {
            Err(e) if e.is_remote_failure() => return Err(e),
            r => r,
        };
        report.generations.push(GenerationCheck {
            generation: m.generation,
            level,
            error: r.err().map(|e| e.report()),
        });
    }
    Ok(any)
}

fn verify_generation(
    store: &dyn Store,
    index: &ChainIndex,
    m: &Manifest,
    xrefs: Option<&Arc<dyn XrefSource>>,
    report: &mut VerifyReport,
) -> Result<()> {
    for f in &m.files {
        let p: PathBuf = store.open_local(&f.name)?;
        // Of another length, the file is not read for its CRC.
        let (bytes, crc) = file_crc_if_len(&p, f.bytes)?;
        if (bytes, crc) != (f.bytes, Some(f.crc32)) {
            // Say where, when the file's own checks can: the header, the
            // chunk table or the chunk whose CRC fails (restore's error).
            // A chunked file's header gives its length: one of another
            // length fails there, before any chunk is read.
            let located = match f.role {
                Role::Rps | Role::Pf => {
                    let kind = if f.role == Role::Rps {
                        Kind::Rps
                    } else {
                        Kind::Pf
                    };
                    ChunkedFile::open(&p, kind).and_then(|c| check_all_parallel(&[&c], 1))
                }
                _ if crc.is_none() => Ok(()),
                Role::Ptable => PTableDelta::read(&p).map(drop),
                Role::Xref => crate::format::xref::XrefFile::read(&p, m.dirty_pages).map(drop),
            };
            let got = match crc {
                Some(crc) => format!("{bytes} bytes with CRC {crc:08x}"),
                None => format!("{bytes} bytes"),
            };
            return Err(located.err().unwrap_or_else(|| {
                Error::corrupt(
                    &p,
                    0,
                    "file",
                    format!(
                        "{got}, the manifest of generation {} says {} bytes with CRC {:08x}",
                        m.generation, f.bytes, f.crc32
                    ),
                )
            }));
        }
    }
    let mut chain = OpenChain::open(store, index, m.generation)?;
    if let Some(x) = xrefs {
        chain.set_xref_source(x.clone());
    }
    // Every live page rebuilt and checked against its CRC, on every core,
    // as a restore rebuilds them: each chunk is decoded and checked when a
    // page first needs it and given back after the last page that uses it
    // (helper-74: kept to the end, chunks that decode to 16 MiB each took
    // a verify of a 4.5 MB RPS past 17 GB). Then every chunk no live page
    // needed is checked without keeping what it decodes to; one a page
    // verified is not decoded again. Memory thus follows the chunks the
    // pages in flight use, not the decoded size of the lineage.
    let threads = crate::durable::default_threads();
    let pages = chain.live_pages();
    let per = pages.len().div_ceil(threads).max(1);
    let page_size = m.page_size as usize;
    if chain.pointer_file_bytes() > POINTER_FILE_BUDGET {
        chain.pool_pointer_files();
    }
    let decoder = chain.decoder();
    // SAFETY: nothing else reads the chain's pointers while this runs (the
    // rebuilds start after it, on these same pages).
    let uses = unsafe { decoder.count_uses_releasing(&pages, |lp| Some(*lp), threads) };
    let (decoder, uses) = (&decoder, uses.as_ref());
    std::thread::scope(|s| {
        let handles: Vec<_> = pages
            .chunks(per)
            .map(|part| {
                s.spawn(move || -> Result<()> {
                    let mut buf = vec![0u8; page_size];
                    part.iter().try_for_each(|&lp| {
                        match uses {
                            // SAFETY: `uses` counted every page of `pages`,
                            // each rebuilt once here; nothing else reads
                            // the chain until they are done.
                            Some(u) => unsafe { decoder.read_page_releasing(lp, &mut buf, u) },
                            None => decoder.read_page(lp, &mut buf),
                        }
                        .map(drop)
                    })
                })
            })
            .collect();
        // The error of the lowest pages first, as a sequential pass finds.
        handles
            .into_iter()
            .try_for_each(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    })?;
    report.pages_checked += pages.len() as u64;
    chain.check_all_parallel(threads)
}

/// Verifies a job: L2, and with `job` also L1's chain copy and pending IC
/// files. A rank's chain of an MPI job is refused (naming `--rank`): its
/// generations are the job's only once a job manifest commits them, and
/// its references are read from the other ranks' chains
/// ([`verify_with`] with the job's references checks it).
pub fn verify(l2: &dyn Store, job: Option<&Job>) -> Result<VerifyReport> {
    if let Some(e) = rank_chain(&ChainIndex::load(l2)?, &l2.describe(), "verify") {
        return Err(e);
    }
    verify_with(l2, job, None, None)
}

/// [`verify`] with the pages other ranks store read through `xrefs` (a
/// rank's chain of an MPI job; no refusal), of the generations job
/// generations up to `job_committed` committed ([`verify_store_with`]):
/// L1's pending checkpoints are those after the rank's committed
/// generation, as a restore takes them (helper-71: counted after a
/// generation a killed collective push never committed, a damaged pending
/// checkpoint went unchecked, "no checkpoint pending", exit 0).
pub fn verify_with(
    l2: &dyn Store,
    job: Option<&Job>,
    xrefs: Option<&Arc<dyn XrefSource>>,
    job_committed: Option<u64>,
) -> Result<VerifyReport> {
    let mut report = VerifyReport::default();
    verify_store_with(l2, "L2", xrefs, job_committed, &mut report)?;
    if let Some(job) = job {
        // L1 against L2 between a push's two manifests, or after its commit
        // and before it deleted its batch, is a false alarm: no push
        // meanwhile (as a restore, `restore_l1_l2`).
        let _reading = crate::l1::lock::JobLock::shared(&job.l1, |_| {})?;
        // L1's copy that cannot be listed (a file under its name, no
        // permission) is a problem of L1's, reported beside the others.
        let l1_index = match ChainIndex::load(&job.l1_chain) {
            Ok(i) => {
                // The generations L2 lacks are an interrupted push's, whose
                // checkpoints are still pending: no state older than a later
                // generation (`ChainIndex::unpublished`; helper-76: after
                // `verify --repair` copied another node's newer full
                // generation into L1's copy, verify refused it as stale).
                let mut i = i.committed_if(job_committed);
                let l2_valid = ChainIndex::load(l2)?.committed_if(job_committed);
                i.unpublished = i
                    .manifests
                    .keys()
                    .filter(|g| !l2_valid.manifests.contains_key(g))
                    .copied()
                    .collect();
                verify_index(&job.l1_chain, "L1", &i, xrefs, &mut report)?;
                i.unpublished.clear();
                i
            }
            Err(e @ Error::Io { .. }) => {
                report.l1_errors.push(e.report());
                ChainIndex::default()
            }
            Err(e) => return Err(e),
        };
        // L1 must hold L2's newest chain: it is where a transient restore
        // and the next push start.
        let l2_index = ChainIndex::load(l2)?.committed_if(job_committed);
        // Not when the L1 directory has started a new run (a job restarted
        // in a fresh L1 whose FULL checkpoint is still pending): its next
        // push starts a new chain, and L1 needs no copy of the old one.
        let new_run_pending = l2_index.newest().is_some_and(|n| {
            L1Dir::scan_after(&job.l1, Some(Covered::from(n))).is_ok_and(|d| {
                d.files
                    .first()
                    .is_some_and(|f| f.is_full() && !same_run(f.chain_id, n.chain_id))
            })
        });
        if let Some(n) = l2_index.newest()
            && !new_run_pending
            && let Ok(lineage) = l2_index.lineage(n.generation, l2)
        {
            for m in lineage {
                if l1_index.get(m.generation) != Some(&m) {
                    report.l1_errors.push(format!(
                        "{}: generation {} of L2's newest chain is missing from L1's copy, or differs",
                        job.l1_chain.root().display(),
                        m.generation
                    ));
                }
            }
        }
        // Each in order, but not together: another job's older chain in L2
        // beside this job's copy in L1, or the reverse.
        if let Some((m, b)) = l2_index.out_of_order_with(&l1_index) {
            report.l1_errors.push(format!(
                "{}: with {}: {}",
                job.l1_chain.root().display(),
                l2.describe(),
                crate::l2::chain::out_of_order_text(m, b)
            ));
        }
        // A generation L1 holds and L2 does not (L2 lost its manifest, or a
        // push was interrupted between its two manifests): L2 alone would
        // restore an older state than L1 plus L2. The next push uploads it.
        let l2_newest = l2_index.newest().map(|m| m.generation);
        for m in l1_index.manifests.values() {
            if Some(m.generation) > l2_newest && l2_index.get(m.generation).is_none() {
                report.l1_errors.push(format!(
                    "{}: L1 holds generation {} (seq {}..={}), newer than L2's newest{}: L2 lacks its manifest (lost, or a push was interrupted; the next push uploads it)",
                    job.l1_chain.root().display(),
                    m.generation,
                    m.first_seq,
                    m.last_seq,
                    l2_newest.map_or(" (none)".into(), |g| format!(" generation {g}"))
                ));
            }
        }
        let newest = l2_index
            .overlaid_with(&l1_index)
            .newest()
            .map(Covered::from);
        match L1Dir::scan_after(&job.l1, newest) {
            Ok(l1) => {
                for m in &l1.files {
                    if let Err(e) = IcFile::open(&m.path).and_then(|f| f.verify()) {
                        report.l1_errors.push(e.report());
                    }
                }
            }
            Err(e) => report.l1_errors.push(e.report()),
        }
    }
    Ok(report)
}
