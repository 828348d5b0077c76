//! REX against the paper's counterparts on the same L1 sequence (paper
//! §6.1 and §6.4.2; Figs. 10, 17, 18 and 19).
//!
//! Every counterpart implements [`Counterpart`]: at each L2 checkpoint it
//! turns the batch of L1 files (and, for those that need it, the full image
//! at the end of the batch, as the job's full checkpoint) into L2 objects in
//! its own directory, and after the last one it rebuilds the newest state
//! from those objects alone, as a FULL REX-IC file. The runner
//! ([`run`]) replays the sequence for each of them at the same batch
//! boundaries, times the L2 checkpoints and the restore, counts the L2
//! bytes, and compares every restored image with the truth, byte for byte:
//! a counterpart that restores wrongly is a bug, not a data point.
//!
//! What one L2 checkpoint is, per counterpart (each module says more):
//!
//! | counterpart | L2 checkpoint | restore of the newest state |
//! | --- | --- | --- |
//! | REX | `push-l2`: coalesce, deduplicate in 32-byte patterns, publish | `restore --l2` |
//! | IC | the batch's IC files, uncompressed | the FULL file, then every incremental in order |
//! | IC-bzip2 | the full image at the batch end, bzip2 (level 9, the tool's default) | decompress the newest |
//! | IC-Xdelta3 | the full image at the batch end, xdelta3 against the first one (kept raw) | decode the newest against the first |
//! | AIC | the batch's coalesced pages, each xdelta3 against its previous version; new pages raw | decode every checkpoint in order |
//! | Libhash | the batch's IC files in 256-byte blocks, MD5 fingerprints, new blocks only | rebuild every file in order |
//! | zstd | each IC file of the batch, zstd at its default level (3) | decompress and apply every file in order |
//! | zstd-19 | each IC file of the batch, `zstd -19 --long` | decompress and apply every file in order |
//! | CDC-zstd | the full image at the batch end in content-defined chunks (FastCDC, restic's sizes), new chunks zstd-3 into a pack | read the newest snapshot's chunks |
//!
//! **Batching.** The batch boundaries come from REX's own runtime
//! controller ([`crate::control::flush::decide`] after each L1 checkpoint, with the
//! default configuration: the paper's Table 1, MTBF 10,000 s), or from a
//! fixed batch size. The tail of the sequence is pushed as a last batch, so
//! that every counterpart's L2 holds the newest state.
//!
//! **What is timed.** Compression: each counterpart's L2 checkpoints, from
//! reading its input to its L2 objects being durable (the harness's own
//! work, such as placing the L1 files or writing the full images, is not
//! timed). Restore: from opening the L2 objects to the FULL image being
//! durable, best of `runs`. Every output goes through the same
//! write-fsync-rename discipline as rexctl's own, so a fast file system
//! (tmpfs) for the work directory measures the algorithms, a disk adds the
//! same fsync costs to every counterpart.
//!
//! **Memory.** The [`Executor`] runs each stage; the command line's
//! executor runs each in a child process that reports its own peak
//! resident set (`VmHWM`), so the figure is the counterpart's whole
//! process, mapped files included.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};
use crate::eval::image::{ImageDiff, compare_ic_files};
use crate::format::ic::{self, DropRange, HEADER_LEN, IcFile, IcHeader, IcMeta, IcWriter};
use crate::l1::L1Dir;

mod aic;
mod cdc_zstd;
mod ic_bzip2;
mod ic_plain;
mod ic_xdelta3;
mod ic_zstd;
mod libhash;
pub mod plot;
pub mod report;
mod rex;

/// The counterparts, in the order the tables show them.
pub const NAMES: [&str; 9] = [
    "REX",
    "IC",
    "IC-bzip2",
    "IC-Xdelta3",
    "AIC",
    "Libhash",
    "zstd",
    "zstd-19",
    "CDC-zstd",
];

/// The name rexctl itself goes by in the comparison.
pub const REX: &str = "REX";

/// Whether this build has the xdelta3-based counterparts (cargo feature
/// `xdelta3`).
pub const XDELTA3_BUILT: bool = cfg!(feature = "xdelta3");

/// What a counterpart reports when it was built without its library.
pub const NOT_BUILT_XDELTA3: &str = "not built (enable feature xdelta3)";

/// One batch, as handed to a counterpart at an L2 checkpoint.
pub struct Batch<'a> {
    /// The batch's number, from 0.
    pub number: usize,
    /// The batch's L1 files, ascending seq (read-only input).
    pub files: &'a [IcMeta],
    /// The full image at the end of the batch, as a FULL REX-IC file, for
    /// counterparts that ask for it ([`Counterpart::needs_full_images`]).
    pub full_image: Option<&'a Path>,
    /// REX's controller asked for a complete coalescence.
    pub force_full: bool,
    /// The counterpart's L2 directory.
    pub l2: &'a Path,
    /// The counterpart's private scratch directory (not L2).
    pub work: &'a Path,
}

/// A way of keeping L2 checkpoints that REX is compared with (or REX).
pub trait Counterpart {
    /// Its name in the tables.
    fn name(&self) -> &'static str;
    /// Whether [`Batch::full_image`] must be given.
    fn needs_full_images(&self) -> bool {
        false
    }
    /// Why it cannot run in this build, if it cannot.
    fn unavailable(&self) -> Option<String> {
        None
    }
    /// Harness work before an L2 checkpoint, not timed (REX: placing the
    /// files in its L1 directory, as the job writes them).
    fn stage(&mut self, _batch: &Batch<'_>) -> Result<()> {
        Ok(())
    }
    /// Whether an L2 checkpoint is due now by REX's runtime controller
    /// (`Some(full)`), after [`Counterpart::stage`] of one more file. Only
    /// REX has a controller.
    fn due(&mut self, _now_ns: u64) -> Result<Option<bool>> {
        Err(Error::Invalid(format!(
            "{} has no runtime controller",
            self.name()
        )))
    }
    /// Writes one L2 checkpoint for `batch`. `Ok(Some(why))` when a
    /// documented limitation of the underlying library prevents it.
    fn push(&mut self, batch: &Batch<'_>) -> Result<Option<String>>;
    /// A remark on the L2 checkpoints written so far (REX: the kinds of
    /// its generations), for the report.
    fn remark(&self) -> Option<String> {
        None
    }
    /// Which L2 checkpoints were complete coalescences (REX only), so that
    /// a repeated run can replay the controller's decisions.
    fn full_generations(&self) -> Vec<bool> {
        Vec::new()
    }
    /// Where the L2 checkpoints' time went, by the counterpart's own
    /// account (REX: its manifests' timings), seconds or bytes per item.
    fn breakdown(&self) -> Breakdown {
        Breakdown::default()
    }
    /// Bytes of L2 objects the restore of the newest state reads (default:
    /// every object).
    fn restore_reads(&self, l2: &Path) -> Result<u64> {
        dir_bytes(l2, |_| true)
    }
    /// Rebuilds the newest state from `l2` alone into `out`, a FULL REX-IC
    /// file. Called on a fresh instance: it may use nothing but `l2`.
    fn restore(&self, l2: &Path, out: &Path) -> Result<Option<String>>;
}

/// REX's own account of its L2 checkpoints, summed over the generations
/// (from the manifests' `timings`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Breakdown {
    /// Scanning L1 and building the C-List, seconds.
    pub coalesce_s: f64,
    /// The Deduplication Unit, seconds.
    pub dedup_s: f64,
    /// Uploading the generation's files to L2, seconds.
    pub upload_s: f64,
    /// Bytes of the coalesced pages deduplicated.
    pub dedup_bytes: u64,
}

/// The rate of the link to L2 in the paper's testbed (Gigabit Ethernet,
/// §6.1), bytes per second, for the modelled restore time.
pub const LINK_BYTES_PER_S: f64 = 125e6;

/// Bytes of the visible files of `dir` whose names pass `keep`.
pub fn dir_bytes(dir: &Path, keep: impl Fn(&str) -> bool) -> Result<u64> {
    let mut n = 0;
    for e in std::fs::read_dir(dir).ctx(dir, "read directory")? {
        let e = e.ctx(dir, "read directory")?;
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') && keep(&name) {
            n += e.metadata().ctx(e.path(), "stat")?.len();
        }
    }
    Ok(n)
}

/// A fresh instance of the counterpart called `name` (case-insensitive).
pub fn counterpart(name: &str) -> Result<Box<dyn Counterpart>> {
    let canon = canonical_name(name)?;
    Ok(match canon {
        "REX" => Box::new(rex::Rex::from_env()?),
        "IC" => Box::new(ic_plain::Ic),
        "IC-bzip2" => Box::new(ic_bzip2::IcBzip2),
        "IC-Xdelta3" => Box::new(ic_xdelta3::IcXdelta3::default()),
        "AIC" => Box::new(aic::Aic::default()),
        "Libhash" => Box::new(libhash::Libhash::default()),
        "zstd" => Box::new(ic_zstd::IcZstd::default_level()),
        "zstd-19" => Box::new(ic_zstd::IcZstd::best()),
        "CDC-zstd" => Box::new(cdc_zstd::CdcZstd::default()),
        _ => unreachable!("canonical_name returns one of NAMES"),
    })
}

/// The spelling of `name` in [`NAMES`] (case-insensitive match).
pub fn canonical_name(name: &str) -> Result<&'static str> {
    NAMES
        .iter()
        .copied()
        .find(|n| n.eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            Error::Invalid(format!(
                "unknown counterpart {name:?}; known: {}",
                NAMES.join(", ")
            ))
        })
}

/// The L1 sequence under comparison (read-only).
#[derive(Clone, Debug)]
pub struct Input {
    /// The L1 directory.
    pub l1dir: PathBuf,
    /// Its chain, from the first FULL file, ascending seq.
    pub files: Vec<IcMeta>,
    /// Bytes of those files.
    pub bytes_in: u64,
}

impl Input {
    /// Reads the headers and metadata of the L1 directory's chain.
    pub fn scan(dir: impl AsRef<Path>) -> Result<Input> {
        let dir = dir.as_ref();
        let l1 = L1Dir::scan(dir)?;
        if l1.files.is_empty() {
            return Err(Error::chain(dir, "no REX-IC checkpoint to compare"));
        }
        let bytes_in = l1.files.iter().map(|m| m.layout.file_len).sum();
        Ok(Input {
            l1dir: dir.to_path_buf(),
            files: l1.files,
            bytes_in,
        })
    }

    /// Incremental (non-FULL) files in the sequence.
    pub fn incrementals(&self) -> usize {
        self.files.iter().filter(|m| !m.is_full()).count()
    }
}

/// How the sequence is cut into batches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Plan {
    /// REX's runtime controller decides, after each checkpoint (only REX
    /// runs under this plan; the others get its boundaries).
    Controller,
    /// Fixed batch ends: `ends[k]` is one past the last file of batch `k`.
    Boundaries(Vec<usize>),
    /// A controller run replayed: its batch ends, and which batches REX
    /// pushed as complete coalescences (the others ignore it).
    Replay {
        /// Batch ends.
        ends: Vec<usize>,
        /// Per batch: a complete coalescence.
        full: Vec<bool>,
    },
}

impl Plan {
    /// The plan as `--boundaries` spells it: batch ends, comma-separated,
    /// `f` after the ends of complete coalescences (`1f,7,11f,13`).
    pub fn to_arg(&self) -> Option<String> {
        let (ends, full): (&[usize], &[bool]) = match self {
            Plan::Controller => return None,
            Plan::Boundaries(e) => (e, &[]),
            Plan::Replay { ends, full } => (ends, full),
        };
        let v: Vec<String> = ends
            .iter()
            .enumerate()
            .map(|(k, e)| format!("{e}{}", if full.get(k) == Some(&true) { "f" } else { "" }))
            .collect();
        Some(v.join(","))
    }
}

/// Batch ends for fixed batches of `n` files over `len` files.
pub fn fixed_boundaries(len: usize, n: usize) -> Vec<usize> {
    let n = n.max(1);
    let mut v: Vec<usize> = (1..=len.div_ceil(n)).map(|k| (k * n).min(len)).collect();
    v.dedup();
    v
}

/// Parses [`Plan::to_arg`]'s spelling (`3,7,12`, or `1f,7,12` for a
/// replay), checking that the ends ascend and end at `len`.
pub fn parse_boundaries(s: &str, len: usize) -> Result<Plan> {
    let mut ends = Vec::new();
    let mut full = Vec::new();
    for t in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let (n, f) = match t.strip_suffix('f') {
            Some(n) => (n, true),
            None => (t, false),
        };
        ends.push(
            n.parse()
                .map_err(|_| Error::Invalid(format!("--boundaries: {t:?} is not a file count")))?,
        );
        full.push(f);
    }
    check_boundaries(&ends, len)?;
    Ok(if full.iter().any(|&f| f) {
        Plan::Replay { ends, full }
    } else {
        Plan::Boundaries(ends)
    })
}

fn check_boundaries(v: &[usize], len: usize) -> Result<()> {
    let ascending = v.first().is_some_and(|&f| f > 0) && v.windows(2).all(|w| w[0] < w[1]);
    if !ascending || v.last() != Some(&len) {
        return Err(Error::Invalid(format!(
            "batch ends {v:?} must ascend from above 0 and end at {len}, the number of files"
        )));
    }
    Ok(())
}

/// The comparison's scratch directory and where everything goes in it.
#[derive(Clone, Debug)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// A workspace rooted at `root` (created if missing).
    pub fn new(root: impl AsRef<Path>) -> Result<Workspace> {
        let root = root.as_ref().to_path_buf();
        std::fs::create_dir_all(&root).ctx(&root, "create directory")?;
        Ok(Workspace { root })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The ground truth: the newest state, a FULL REX-IC file.
    pub fn truth(&self) -> PathBuf {
        self.root.join("truth.rexic")
    }

    /// The full image at the end of batch `k` (the job's full checkpoint).
    pub fn full_image(&self, k: usize) -> PathBuf {
        self.root.join("fc").join(format!("fc-{k:06}.rexic"))
    }

    /// A counterpart's directory.
    pub fn dir(&self, name: &str) -> PathBuf {
        self.root.join(name.to_ascii_lowercase())
    }

    /// A counterpart's L2 directory.
    pub fn l2(&self, name: &str) -> PathBuf {
        self.dir(name).join("l2")
    }

    /// A counterpart's scratch directory.
    pub fn work(&self, name: &str) -> PathBuf {
        self.dir(name).join("work")
    }

    /// Where a counterpart's restore writes the newest state.
    pub fn restored(&self, name: &str) -> PathBuf {
        self.dir(name).join("restored.rexic")
    }
}

/// What a counterpart's L2 checkpoints came to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PushOutcome {
    /// Batch ends used (one past the last file of each batch).
    pub boundaries: Vec<usize>,
    /// L2 checkpoints written.
    pub l2_checkpoints: usize,
    /// Bytes of every object written to L2 (nothing is ever removed from
    /// the count: retention is not what is compared).
    pub l2_bytes: u64,
    /// Objects written to L2.
    pub l2_objects: usize,
    /// Seconds spent writing the L2 checkpoints.
    pub compress_s: f64,
    /// Bytes the counterpart compressed: the batches' L1 files, or the full
    /// images for those that compress full images.
    pub data_in: u64,
    /// Why it could not run, if it could not (not built, or a limitation of
    /// its library hit at some checkpoint).
    pub unavailable: Option<String>,
    /// The counterpart's remark on its L2 checkpoints.
    #[serde(default)]
    pub remark: Option<String>,
    /// Per L2 checkpoint, a complete coalescence (REX only).
    #[serde(default)]
    pub full: Vec<bool>,
    /// Times the whole sequence was pushed (the fastest is reported).
    #[serde(default)]
    pub runs: usize,
    /// The counterpart's own account of the fastest run (REX only).
    #[serde(default)]
    pub breakdown: Option<Breakdown>,
}

/// What a counterpart's restore came to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RestoreOutcome {
    /// Seconds of the fastest run.
    pub restore_s: f64,
    /// Runs made.
    pub runs: usize,
    /// Pages in the restored image.
    pub image_pages: u64,
    /// Bytes of page data in the restored image.
    pub image_bytes: u64,
    /// Bytes of L2 objects the restore reads.
    #[serde(default)]
    pub read_bytes: u64,
    /// Why it could not restore, if it could not.
    pub unavailable: Option<String>,
}

/// Runs a counterpart's L2 checkpoints over `input` in this process, `runs`
/// times (at least once; a controller plan is replayed after the first),
/// and reports the fastest; the last run's L2 data stays for the restore.
pub fn push_stage(
    name: &str,
    input: &Input,
    plan: &Plan,
    ws: &Workspace,
    runs: usize,
) -> Result<PushOutcome> {
    let mut plan = plan.clone();
    let mut best: Option<PushOutcome> = None;
    for i in 0..runs.max(1) {
        let mut o = push_once(name, input, &plan, ws)?;
        if o.unavailable.is_some() {
            return Ok(o);
        }
        if plan == Plan::Controller {
            plan = Plan::Replay {
                ends: o.boundaries.clone(),
                full: o.full.clone(),
            };
        }
        o.runs = i + 1;
        if let Some(b) = &best {
            // Manifests record timings, so REX's bytes may differ by a few.
            let drift = o.l2_bytes.abs_diff(b.l2_bytes) as f64 / b.l2_bytes.max(1) as f64;
            if o.boundaries != b.boundaries || o.l2_objects != b.l2_objects || drift > 1e-3 {
                return Err(Error::Invalid(format!(
                    "{name}: a repeated run wrote {} L2 bytes in batches {:?}, the first {} in {:?}",
                    o.l2_bytes, o.boundaries, b.l2_bytes, b.boundaries
                )));
            }
            if b.compress_s < o.compress_s {
                o.compress_s = b.compress_s;
                o.breakdown = b.breakdown.clone();
            }
            o.remark = b.remark.clone();
        }
        best = Some(o);
    }
    Ok(best.expect("at least one run"))
}

fn push_once(name: &str, input: &Input, plan: &Plan, ws: &Workspace) -> Result<PushOutcome> {
    let mut cp = counterpart(name)?;
    let name = cp.name();
    let mut out = PushOutcome::default();
    if let Some(why) = cp.unavailable() {
        out.unavailable = Some(why);
        return Ok(out);
    }
    let (l2, work) = (ws.l2(name), ws.work(name));
    let dir = ws.dir(name);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).ctx(&dir, "remove directory")?;
    }
    for d in [&l2, &work] {
        std::fs::create_dir_all(d).ctx(d, "create directory")?;
    }
    let mut seen: HashMap<String, u64> = HashMap::new();
    let files = &input.files;
    match plan {
        Plan::Boundaries(ends) | Plan::Replay { ends, .. } => {
            check_boundaries(ends, files.len())?;
            let full = match plan {
                Plan::Replay { full, .. } => full.as_slice(),
                _ => &[],
            };
            let mut start = 0;
            for (k, &end) in ends.iter().enumerate() {
                let range = &files[start..end];
                let fc = ws.full_image(k);
                let batch = Batch {
                    number: k,
                    files: range,
                    full_image: cp.needs_full_images().then_some(fc.as_path()),
                    force_full: full.get(k) == Some(&true),
                    l2: &l2,
                    work: &work,
                };
                cp.stage(&batch)?;
                if let Some(why) = timed_push(cp.as_mut(), &batch, &mut out, &mut seen)? {
                    out.unavailable = Some(why);
                    return Ok(out);
                }
                start = end;
            }
        }
        Plan::Controller => {
            let mut start = 0;
            for i in 0..files.len() {
                let one = Batch {
                    number: out.l2_checkpoints,
                    files: &files[i..=i],
                    full_image: None,
                    force_full: false,
                    l2: &l2,
                    work: &work,
                };
                cp.stage(&one)?;
                let last = i + 1 == files.len();
                let due = cp.due(files[i].header.time_ns)?;
                if due.is_some() || last {
                    let batch = Batch {
                        number: out.l2_checkpoints,
                        files: &files[start..=i],
                        full_image: None,
                        force_full: due.unwrap_or(false),
                        l2: &l2,
                        work: &work,
                    };
                    if let Some(why) = timed_push(cp.as_mut(), &batch, &mut out, &mut seen)? {
                        out.unavailable = Some(why);
                        return Ok(out);
                    }
                    start = i + 1;
                }
            }
        }
    }
    out.remark = cp.remark();
    out.full = cp.full_generations();
    out.breakdown = Some(cp.breakdown()).filter(|b| *b != Breakdown::default());
    Ok(out)
}

fn timed_push(
    cp: &mut dyn Counterpart,
    batch: &Batch<'_>,
    out: &mut PushOutcome,
    seen: &mut HashMap<String, u64>,
) -> Result<Option<String>> {
    out.data_in += match batch.full_image {
        Some(fc) => std::fs::metadata(fc).ctx(fc, "stat")?.len(),
        None => batch.files.iter().map(|m| m.layout.file_len).sum(),
    };
    let t = Instant::now();
    let limited = cp.push(batch)?;
    out.compress_s += t.elapsed().as_secs_f64();
    if limited.is_some() {
        return Ok(limited);
    }
    out.l2_checkpoints += 1;
    let prev = out.boundaries.last().copied().unwrap_or(0);
    out.boundaries.push(prev + batch.files.len());
    for e in std::fs::read_dir(batch.l2).ctx(batch.l2, "read directory")? {
        let e = e.ctx(batch.l2, "read directory")?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let len = e.metadata().ctx(e.path(), "stat")?.len();
        if seen.insert(name, len).is_none() {
            out.l2_bytes += len;
            out.l2_objects += 1;
        }
    }
    Ok(None)
}

/// Restores a counterpart's newest state from its L2 directory, `runs`
/// times (at least once), in this process; reports the fastest run.
pub fn restore_stage(name: &str, ws: &Workspace, runs: usize) -> Result<RestoreOutcome> {
    let cp = counterpart(name)?;
    let name = cp.name();
    let mut out = RestoreOutcome::default();
    if let Some(why) = cp.unavailable() {
        out.unavailable = Some(why);
        return Ok(out);
    }
    let (l2, target) = (ws.l2(name), ws.restored(name));
    let mut best = f64::INFINITY;
    for _ in 0..runs.max(1) {
        if target.exists() {
            std::fs::remove_file(&target).ctx(&target, "remove")?;
        }
        let t = Instant::now();
        if let Some(why) = cp.restore(&l2, &target)? {
            out.unavailable = Some(why);
            return Ok(out);
        }
        best = best.min(t.elapsed().as_secs_f64());
        out.runs += 1;
    }
    let m = IcMeta::read(&target)?;
    out.read_bytes = cp.restore_reads(&l2)?;
    out.restore_s = best;
    out.image_pages = m.page_count() as u64;
    out.image_bytes = m.data_bytes();
    Ok(out)
}

/// The truth, written by [`write_truth`].
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Truth {
    /// Live pages of the newest state.
    pub pages: u64,
    /// Bytes of page data of the newest state.
    pub bytes: u64,
}

/// Applies the L1 files in order to an in-memory image (the naive model of
/// a memory image: a FULL file replaces it, drops remove pages, pages
/// overwrite), writes the full image at each batch end when
/// `full_images`, and the newest state as the truth.
pub fn write_truth(
    input: &Input,
    ends: &[usize],
    ws: &Workspace,
    full_images: bool,
) -> Result<Truth> {
    check_boundaries(ends, input.files.len())?;
    if full_images {
        let d = ws.root().join("fc");
        std::fs::create_dir_all(&d).ctx(&d, "create directory")?;
    }
    let mut img = MemImage::default();
    let mut k = 0;
    for (i, m) in input.files.iter().enumerate() {
        img.apply(&IcFile::open(&m.path)?)?;
        if full_images && ends.get(k) == Some(&(i + 1)) {
            img.write(&ws.full_image(k))?;
        }
        if ends.get(k) == Some(&(i + 1)) {
            k += 1;
        }
    }
    img.write(&ws.truth())?;
    Ok(Truth {
        pages: img.len() as u64,
        bytes: img.len() as u64 * u64::from(img.page_size),
    })
}

/// A measured stage: its outcome and the peak resident set of the process
/// that ran it, when the executor measures it.
#[derive(Clone, Debug)]
pub struct Measured<T> {
    /// The stage's outcome.
    pub value: T,
    /// Peak resident set size in bytes.
    pub peak_rss: Option<u64>,
}

/// Runs the stages of a comparison: in this process ([`InProcess`]) or in
/// child processes that measure memory (the command line's).
pub trait Executor {
    /// Runs [`push_stage`] for `name`.
    fn push(&mut self, name: &str, plan: &Plan) -> Result<Measured<PushOutcome>>;
    /// Runs [`restore_stage`] for `name`.
    fn restore(&mut self, name: &str) -> Result<Measured<RestoreOutcome>>;
    /// Peak resident set of a process that only reads the L1 metadata (what
    /// every stage's figure includes), if measured.
    fn baseline_rss(&mut self) -> Result<Option<u64>> {
        Ok(None)
    }
    /// How memory is measured, for the report.
    fn memory_method(&self) -> String;
}

/// Runs every stage in this process; memory is not measured.
pub struct InProcess<'a> {
    /// The sequence.
    pub input: &'a Input,
    /// The workspace.
    pub ws: &'a Workspace,
    /// Restore runs per counterpart (the fastest is kept).
    pub runs: usize,
    /// Runs of each counterpart's L2 checkpoints (the fastest is kept).
    pub push_runs: usize,
}

impl Executor for InProcess<'_> {
    fn push(&mut self, name: &str, plan: &Plan) -> Result<Measured<PushOutcome>> {
        Ok(Measured {
            value: push_stage(name, self.input, plan, self.ws, self.push_runs)?,
            peak_rss: None,
        })
    }
    fn restore(&mut self, name: &str) -> Result<Measured<RestoreOutcome>> {
        Ok(Measured {
            value: restore_stage(name, self.ws, self.runs)?,
            peak_rss: None,
        })
    }
    fn memory_method(&self) -> String {
        "not measured (all counterparts ran in one process)".into()
    }
}

/// The outcome of one counterpart in a comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Ran, and restored the truth byte for byte.
    Ok,
    /// Not in this build.
    NotBuilt,
    /// A documented limitation of its library prevents it on this input.
    Unsupported,
    /// Failed: an error, or a restore that differs from the truth.
    Failed,
}

/// One counterpart's line of the comparison.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    /// Counterpart name.
    pub name: String,
    /// Outcome.
    pub status: Status,
    /// Whether it ran and restored the truth exactly.
    pub ok: bool,
    /// Why it is not ok, or a remark.
    pub note: Option<String>,
    /// L2 checkpoints written.
    pub l2_checkpoints: usize,
    /// Bytes written to L2.
    pub l2_bytes: u64,
    /// Objects written to L2.
    pub l2_objects: usize,
    /// L1 bytes in over L2 bytes.
    pub compression_ratio: f64,
    /// Seconds spent writing the L2 checkpoints.
    pub compress_s: f64,
    /// L1 bytes in per second of compression, MB/s (10^6 bytes).
    pub compress_mbps: f64,
    /// Bytes the counterpart compressed (L1 files or full images).
    pub data_in: u64,
    /// Seconds to restore the newest state from L2 (best run).
    pub restore_s: f64,
    /// Image bytes per second of restore, MB/s.
    pub decompress_mbps: f64,
    /// Restore time over REX's (REX = 1).
    pub restore_vs_rex: Option<f64>,
    /// Bytes of L2 objects the restore reads.
    #[serde(default)]
    pub restore_read_bytes: u64,
    /// Model, not a measurement: the restore time with L2 behind the
    /// paper's Gigabit link, `restore_s + restore_read_bytes /`
    /// [`LINK_BYTES_PER_S`].
    #[serde(default)]
    pub restore_1gbe_s: f64,
    /// The modelled time over REX's.
    #[serde(default)]
    pub restore_1gbe_vs_rex: Option<f64>,
    /// The counterpart's own account of its L2 checkpoints (REX only).
    #[serde(default)]
    pub breakdown: Option<Breakdown>,
    /// Runs of the L2 checkpoints (the fastest is reported).
    #[serde(default)]
    pub push_runs: usize,
    /// Runs of the restore (the fastest is reported).
    #[serde(default)]
    pub restore_runs: usize,
    /// Peak resident set of the L2 checkpoints' process, bytes.
    pub peak_rss_push: Option<u64>,
    /// Peak resident set of the restore's process, bytes.
    pub peak_rss_restore: Option<u64>,
    /// The byte-for-byte check against the truth.
    pub check: Option<String>,
}

impl Row {
    fn empty(name: &str, status: Status, note: Option<String>) -> Row {
        Row {
            name: name.to_string(),
            status,
            ok: false,
            note,
            l2_checkpoints: 0,
            l2_bytes: 0,
            l2_objects: 0,
            compression_ratio: 0.0,
            compress_s: 0.0,
            compress_mbps: 0.0,
            data_in: 0,
            restore_s: 0.0,
            decompress_mbps: 0.0,
            restore_vs_rex: None,
            restore_read_bytes: 0,
            restore_1gbe_s: 0.0,
            restore_1gbe_vs_rex: None,
            breakdown: None,
            push_runs: 0,
            restore_runs: 0,
            peak_rss_push: None,
            peak_rss_restore: None,
            check: None,
        }
    }
}

/// A whole comparison: the input, the batches, one row per counterpart.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// A label (the workload profile's name for the benchmark suite).
    pub label: String,
    /// The L1 directory.
    #[serde(serialize_with = "crate::format::json_path::path")]
    pub l1dir: PathBuf,
    /// L1 files in the sequence.
    pub files: usize,
    /// Incremental files among them.
    pub incrementals: usize,
    /// Bytes of the L1 files.
    pub bytes_in: u64,
    /// Page size.
    pub page_size: u32,
    /// Pages of the newest state.
    pub image_pages: u64,
    /// Bytes of the newest state.
    pub image_bytes: u64,
    /// "controller" or "fixed N".
    pub batching: String,
    /// Seq ranges of the batches (first, last).
    pub batches: Vec<(u64, u64)>,
    /// How peak memory was measured.
    pub memory: String,
    /// Peak resident set of a process that only reads the L1 metadata.
    pub rss_baseline: Option<u64>,
    /// The rate at which the newest image, already in memory, is written as
    /// a FULL REX-IC file in the work directory (fsync included), MB/s: no
    /// restore that produces the file can be faster.
    #[serde(default)]
    pub output_floor_mbps: Option<f64>,
    /// One row per counterpart, REX first.
    pub rows: Vec<Row>,
}

impl Report {
    /// The row of `name`.
    pub fn row(&self, name: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.name == name)
    }

    /// Whether every counterpart that ran restored the truth (rows not built
    /// or unsupported do not count against it).
    pub fn all_ok(&self) -> bool {
        self.rows.iter().all(|r| r.status != Status::Failed)
    }

    /// Whether some restore differed from the truth.
    pub fn any_mismatch(&self) -> bool {
        self.rows.iter().any(|r| {
            r.status == Status::Failed
                && r.check.as_deref().is_some_and(|c| !c.starts_with("equal"))
        })
    }
}

/// What to compare.
#[derive(Clone, Debug)]
pub struct Options {
    /// Batch boundaries: REX's controller, or fixed batches of N files.
    pub batch: Option<usize>,
    /// Counterparts to run (REX always runs); empty for all.
    pub only: Vec<String>,
    /// A label for the report.
    pub label: String,
}

/// Compares the counterparts on `input`: REX first (its controller, or the
/// fixed batches, gives the boundaries), then the truth and the full images,
/// then every other counterpart at the same boundaries; each restore is
/// checked against the truth. `step` is told what runs next.
pub fn run(
    input: &Input,
    opts: &Options,
    ws: &Workspace,
    exec: &mut dyn Executor,
    step: &mut dyn FnMut(&str),
) -> Result<Report> {
    let mut names: Vec<&'static str> = vec![REX];
    for n in NAMES.iter().skip(1) {
        if opts.only.is_empty() || opts.only.iter().any(|o| o.eq_ignore_ascii_case(n)) {
            names.push(n);
        }
    }
    for o in &opts.only {
        canonical_name(o)?;
    }
    let plan = match opts.batch {
        Some(n) => Plan::Boundaries(fixed_boundaries(input.files.len(), n)),
        None => Plan::Controller,
    };
    step("REX: L2 checkpoints");
    let rex_push = exec.push(REX, &plan)?;
    if let Some(why) = &rex_push.value.unavailable {
        return Err(Error::Invalid(format!("REX could not run: {why}")));
    }
    let ends = rex_push.value.boundaries.clone();
    check_boundaries(&ends, input.files.len())?;
    let fixed = Plan::Boundaries(ends.clone());
    let wants_fc = names
        .iter()
        .filter_map(|n| counterpart(n).ok())
        .any(|c| c.needs_full_images() && c.unavailable().is_none());
    step("truth: applying the L1 files in order");
    let truth = write_truth(input, &ends, ws, wants_fc)?;
    let output_floor_mbps = output_floor(ws, truth.bytes)?;
    let rss_baseline = exec.baseline_rss()?;
    let mut rows = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let push = if i == 0 {
            Ok(rex_push.clone())
        } else {
            step(&format!("{name}: L2 checkpoints"));
            exec.push(name, &fixed)
        };
        rows.push(row_for(name, push, exec, ws, &mut *step)?);
    }
    finish_rows(&mut rows);
    let batches = batch_seqs(input, &ends);
    for row in &mut rows {
        if row.l2_bytes > 0 {
            row.compression_ratio = input.bytes_in as f64 / row.l2_bytes as f64;
        }
        if row.compress_s > 0.0 {
            row.compress_mbps = input.bytes_in as f64 / row.compress_s / 1e6;
        }
    }
    Ok(Report {
        label: opts.label.clone(),
        l1dir: input.l1dir.clone(),
        files: input.files.len(),
        incrementals: input.incrementals(),
        bytes_in: input.bytes_in,
        page_size: input.files[input.files.len() - 1].header.page_size,
        image_pages: truth.pages,
        image_bytes: truth.bytes,
        batching: match opts.batch {
            Some(n) => format!("fixed {n}"),
            None => "controller".into(),
        },
        batches,
        memory: exec.memory_method(),
        rss_baseline,
        output_floor_mbps,
        rows,
    })
}

/// Times writing the truth, already in memory, as a FULL REX-IC file in
/// the workspace (best of three), in MB/s of page data.
fn output_floor(ws: &Workspace, bytes: u64) -> Result<Option<f64>> {
    let mut img = MemImage::default();
    img.apply(&IcFile::open(ws.truth())?)?;
    let out = ws.root().join("floor.rexic");
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t = Instant::now();
        img.write(&out)?;
        best = best.min(t.elapsed().as_secs_f64());
        std::fs::remove_file(&out).ctx(&out, "remove")?;
    }
    Ok((best > 0.0 && bytes > 0).then(|| bytes as f64 / best / 1e6))
}

fn row_for(
    name: &str,
    push: Result<Measured<PushOutcome>>,
    exec: &mut dyn Executor,
    ws: &Workspace,
    step: &mut dyn FnMut(&str),
) -> Result<Row> {
    let push = match push {
        Ok(p) => p,
        Err(e) => {
            return Ok(Row::empty(
                name,
                Status::Failed,
                Some(format!("L2 checkpoints failed: {e}")),
            ));
        }
    };
    if let Some(why) = push.value.unavailable.clone() {
        let status = if why.starts_with("not built") {
            Status::NotBuilt
        } else {
            Status::Unsupported
        };
        return Ok(Row::empty(name, status, Some(why)));
    }
    let p = &push.value;
    let mut row = Row::empty(name, Status::Failed, None);
    row.l2_checkpoints = p.l2_checkpoints;
    row.l2_bytes = p.l2_bytes;
    row.l2_objects = p.l2_objects;
    row.compress_s = p.compress_s;
    row.data_in = p.data_in;
    row.peak_rss_push = push.peak_rss;
    row.note = p.remark.clone();
    row.breakdown = p.breakdown.clone();
    row.push_runs = p.runs;
    step(&format!("{name}: restore"));
    let r = match exec.restore(name) {
        Ok(r) => r,
        Err(e) => {
            row.note = Some(format!("restore failed: {e}"));
            return Ok(row);
        }
    };
    row.peak_rss_restore = r.peak_rss;
    if let Some(why) = r.value.unavailable {
        row.status = Status::Unsupported;
        row.note = Some(why);
        return Ok(row);
    }
    row.restore_s = r.value.restore_s;
    row.restore_runs = r.value.runs;
    row.restore_read_bytes = r.value.read_bytes;
    row.restore_1gbe_s = r.value.restore_s + r.value.read_bytes as f64 / LINK_BYTES_PER_S;
    if r.value.restore_s > 0.0 {
        row.decompress_mbps = r.value.image_bytes as f64 / r.value.restore_s / 1e6;
    }
    let diff = check(&ws.restored(name), &ws.truth());
    match diff {
        Ok(d) if d.is_equal() => {
            row.status = Status::Ok;
            row.ok = true;
            row.check = Some(d.to_string());
        }
        Ok(d) => {
            row.check = Some(d.to_string());
            row.note = Some(format!("RESTORE DIFFERS FROM THE TRUTH: {d}"));
        }
        Err(e) => {
            row.check = Some(format!("unreadable: {e}"));
            row.note = Some(format!("restored image unreadable: {e}"));
        }
    }
    Ok(row)
}

fn finish_rows(rows: &mut [Row]) {
    let rex = rows.iter().find(|r| r.name == REX && r.ok).cloned();
    let rex_s = rex.as_ref().map(|r| r.restore_s).filter(|s| *s > 0.0);
    let rex_link = rex.as_ref().map(|r| r.restore_1gbe_s).filter(|s| *s > 0.0);
    for r in rows.iter_mut() {
        if r.ok {
            r.restore_vs_rex = rex_s.map(|x| r.restore_s / x);
            r.restore_1gbe_vs_rex = rex_link.map(|x| r.restore_1gbe_s / x);
        }
    }
}

fn batch_seqs(input: &Input, ends: &[usize]) -> Vec<(u64, u64)> {
    let mut start = 0;
    ends.iter()
        .map(|&e| {
            let r = (input.files[start].seq(), input.files[e - 1].seq());
            start = e;
            r
        })
        .collect()
}

/// Compares a restored image with the truth, byte for byte (every page
/// CRC-checked on the way).
pub fn check(restored: &Path, truth: &Path) -> Result<ImageDiff> {
    compare_ic_files(restored, truth)
}

/// A memory image held in memory: page number to (CRC-32, bytes).
#[derive(Clone, Debug, Default)]
pub struct MemImage {
    /// Page size (0 before the first FULL file).
    pub page_size: u32,
    /// The live pages.
    pub pages: BTreeMap<u64, (u32, Box<[u8]>)>,
    /// Seq of the last file applied.
    pub seq: u64,
    /// Capture time of the last file applied.
    pub time_ns: u64,
}

/// Something that carries pages as an IC file does: its metadata and its
/// CRC-checked pages.
pub trait PageSource {
    /// Header and metadata.
    fn meta(&self) -> &IcMeta;
    /// The page at index position `pp`, CRC-checked.
    fn page(&self, pp: usize) -> Result<&[u8]>;
}

impl PageSource for IcFile {
    fn meta(&self) -> &IcMeta {
        IcFile::meta(self)
    }
    fn page(&self, pp: usize) -> Result<&[u8]> {
        IcFile::page(self, pp)
    }
}

impl MemImage {
    /// Pages held.
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    /// Whether no page is held.
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// Starts a file: a FULL one replaces the image, the others must have
    /// its page size; then the drops. Pages follow through [`MemImage::set`].
    pub fn begin(&mut self, path: &Path, h: &IcHeader, drops: &[DropRange]) -> Result<()> {
        if h.full {
            self.pages.clear();
            self.page_size = h.page_size;
        } else if self.page_size == 0 {
            return Err(Error::chain(
                path,
                "an incremental checkpoint comes before any FULL one",
            ));
        } else if h.page_size != self.page_size {
            return Err(Error::chain(
                path,
                format!(
                    "page size {} differs from the image's {}",
                    h.page_size, self.page_size
                ),
            ));
        }
        for d in drops {
            let mut tail = self.pages.split_off(&d.first);
            let mut rest = tail.split_off(&d.end());
            self.pages.append(&mut rest);
        }
        self.seq = h.seq;
        self.time_ns = h.time_ns;
        Ok(())
    }

    /// Sets a page (whose CRC-32 the caller checked) to `data`.
    pub fn set(&mut self, page: u64, crc: u32, data: &[u8]) {
        match self.pages.get_mut(&page) {
            Some(v) if v.1.len() == data.len() => {
                v.0 = crc;
                v.1.copy_from_slice(data);
            }
            _ => {
                self.pages.insert(page, (crc, data.into()));
            }
        }
    }

    /// Applies one IC file: FULL replaces, drops remove, pages overwrite.
    pub fn apply(&mut self, f: &dyn PageSource) -> Result<()> {
        let m = f.meta();
        self.begin(&m.path, &m.header, &m.drops)?;
        for (pp, &page) in m.pages.iter().enumerate() {
            let data = f.page(pp)?;
            self.set(page, m.page_crcs[pp], data);
        }
        Ok(())
    }

    /// Writes the image as one FULL REX-IC file, durably.
    pub fn write(&self, out: &Path) -> Result<()> {
        let mut w = IcWriter::create(
            out,
            self.page_size.max(ic::MIN_PAGE_SIZE),
            self.seq,
            true,
            self.time_ns,
            self.pages.keys().copied().collect(),
            Vec::new(),
        )?;
        for (crc, data) in self.pages.values() {
            w.push_page_with_crc(data, *crc)?;
        }
        w.finish()
    }
}

/// An IC file held in memory (decompressed), validated as the reader of
/// [`crate::format::ic`] validates a file.
pub struct MemIc {
    meta: IcMeta,
    bytes: Vec<u8>,
}

impl MemIc {
    /// Validates `bytes` as a REX-IC file; `path` names it in errors.
    pub fn parse(path: &Path, bytes: Vec<u8>) -> Result<MemIc> {
        let len = bytes.len() as u64;
        let hb: &[u8; HEADER_LEN as usize] = bytes
            .get(..HEADER_LEN as usize)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| {
                Error::corrupt(
                    path,
                    len,
                    "header",
                    format!("{len} bytes, shorter than the header"),
                )
            })?;
        let header = IcHeader::decode(path, hb)?;
        let layout = header
            .layout()
            .filter(|l| l.file_len == len)
            .ok_or_else(|| {
                Error::corrupt(
                    path,
                    len,
                    "file length",
                    "does not match the header's counts",
                )
            })?;
        let meta_end = (layout.meta_crc_off + 4) as usize;
        let (pages, drops, page_crcs, ext) = ic::parse_meta(
            path,
            header.page_size,
            header.page_count,
            header.drop_count,
            header.ext_len,
            &bytes[HEADER_LEN as usize..meta_end],
        )?;
        Ok(MemIc {
            meta: IcMeta {
                path: path.to_path_buf(),
                header,
                layout,
                pages,
                drops,
                page_crcs,
                chain_id: ext.chain,
                regions: ext.regions,
                instance: ext.instance,
                continues: ext.continues,
                bytes_read: meta_end as u64,
            },
            bytes,
        })
    }
}

impl PageSource for MemIc {
    fn meta(&self) -> &IcMeta {
        &self.meta
    }
    fn page(&self, pp: usize) -> Result<&[u8]> {
        let ps = self.meta.page_size();
        let off = self.meta.layout.data_off as usize + pp * ps;
        let data = &self.bytes[off..off + ps];
        check_page_crc(
            &self.meta.path,
            off as u64,
            self.meta.pages[pp],
            data,
            self.meta.page_crcs[pp],
        )?;
        Ok(data)
    }
}

/// Checks a page's bytes against the CRC-32 recorded for it.
pub fn check_page_crc(path: &Path, offset: u64, page: u64, data: &[u8], want: u32) -> Result<()> {
    let got = crc32fast::hash(data);
    if got != want {
        return Err(Error::corrupt(
            path,
            offset,
            "page data",
            format!("page {page:#x} rebuilt with CRC {got:#010x}, recorded {want:#010x}"),
        ));
    }
    Ok(())
}

/// The objects of `l2` whose names start with `prefix`, sorted by name.
pub fn l2_objects(l2: &Path, prefix: &str) -> Result<Vec<PathBuf>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(l2).ctx(l2, "read directory")? {
        let e = e.ctx(l2, "read directory")?;
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with(prefix) {
            v.push(e.path());
        }
    }
    v.sort();
    if v.is_empty() {
        return Err(Error::chain(
            l2,
            format!("no L2 checkpoint ({prefix}*) to restore from"),
        ));
    }
    Ok(v)
}

/// Copies `src` to `dst` durably (write, fsync, rename).
pub fn durable_copy(src: &Path, dst: &Path) -> Result<u64> {
    let mut input = File::open(src).ctx(src, "open")?;
    let mut out = crate::durable::AtomicFile::create(dst)?;
    let n = std::io::copy(&mut input, &mut out).ctx(dst, "copy")?;
    out.commit()?;
    Ok(n)
}

/// Reads a whole file.
pub fn read_all(path: &Path) -> Result<Vec<u8>> {
    let mut f = File::open(path).ctx(path, "open")?;
    let mut v = Vec::new();
    f.read_to_end(&mut v).ctx(path, "read")?;
    Ok(v)
}

/// A little-endian cursor over a counterpart's own L2 object, with every
/// read bounds-checked into [`Error::Corrupt`].
pub struct Cursor<'a> {
    path: &'a Path,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `bytes` (the contents of `path`).
    pub fn new(path: &'a Path, bytes: &'a [u8]) -> Cursor<'a> {
        Cursor { path, bytes, at: 0 }
    }
    /// The offset of the next read.
    pub fn offset(&self) -> usize {
        self.at
    }
    /// The next `n` bytes.
    pub fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| {
                Error::corrupt(
                    self.path,
                    self.at as u64,
                    field,
                    format!("{n} bytes wanted, {} left", self.bytes.len() - self.at),
                )
            })?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
    /// The next u32.
    pub fn u32(&mut self, field: &'static str) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4, field)?.try_into().expect("4 bytes"),
        ))
    }
    /// The next u64.
    pub fn u64(&mut self, field: &'static str) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8, field)?.try_into().expect("8 bytes"),
        ))
    }
    /// The next u64, as a count of items of `item` bytes that must fit in
    /// what is left.
    pub fn count(&mut self, item: usize, field: &'static str) -> Result<usize> {
        let at = self.at;
        let n = self.u64(field)?;
        let left = (self.bytes.len() - self.at) as u64;
        if n.checked_mul(item as u64).is_none_or(|b| b > left) {
            return Err(Error::corrupt(
                self.path,
                at as u64,
                field,
                format!("{n} items do not fit in {left} bytes"),
            ));
        }
        Ok(n as usize)
    }
    /// Checks that the whole object was read.
    pub fn finish(&self) -> Result<()> {
        if self.at != self.bytes.len() {
            return Err(Error::corrupt(
                self.path,
                self.at as u64,
                "end",
                format!("{} trailing bytes", self.bytes.len() - self.at),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::workload::{Workload, profile};

    #[test]
    fn fixed_boundaries_cover_the_sequence() {
        assert_eq!(fixed_boundaries(13, 4), vec![4, 8, 12, 13]);
        assert_eq!(fixed_boundaries(8, 4), vec![4, 8]);
        assert_eq!(fixed_boundaries(3, 10), vec![3]);
        assert_eq!(fixed_boundaries(3, 0), vec![1, 2, 3]);
        assert_eq!(
            parse_boundaries("1,5,9", 9).unwrap(),
            Plan::Boundaries(vec![1, 5, 9])
        );
        let replay = Plan::Replay {
            ends: vec![1, 5, 9],
            full: vec![true, false, true],
        };
        assert_eq!(parse_boundaries("1f,5,9f", 9).unwrap(), replay);
        assert_eq!(replay.to_arg().unwrap(), "1f,5,9f");
        assert_eq!(Plan::Boundaries(vec![2, 4]).to_arg().unwrap(), "2,4");
        assert!(parse_boundaries("1,5", 9).is_err());
        assert!(parse_boundaries("5,1,9", 9).is_err());
        assert!(parse_boundaries("0,9", 9).is_err());
    }

    #[test]
    fn names_are_case_insensitive() {
        assert_eq!(canonical_name("ic-xdelta3").unwrap(), "IC-Xdelta3");
        assert_eq!(canonical_name("ZSTD").unwrap(), "zstd");
        assert!(canonical_name("gzip").is_err());
        for n in NAMES {
            assert_eq!(counterpart(n).unwrap().name(), n);
        }
    }

    fn small_input(dir: &Path, name: &str) -> (Input, BTreeMap<u64, Vec<u8>>) {
        let mut p = profile(name).unwrap();
        p.pages = 96;
        p.checkpoints = 9;
        let mut w = Workload::new(p, 3).unwrap();
        for _ in 0..10 {
            w.checkpoint(dir).unwrap();
        }
        (Input::scan(dir).unwrap(), w.image().clone())
    }

    /// Each counterpart restores the generator's image, in process, under
    /// the controller's batches and under fixed ones.
    #[test]
    fn every_counterpart_restores_the_generator_image() {
        let d = tempfile::tempdir().unwrap();
        let l1 = d.path().join("l1");
        std::fs::create_dir_all(&l1).unwrap();
        let (input, image) = small_input(&l1, "churn");
        for batch in [None, Some(3)] {
            let ws = Workspace::new(d.path().join(format!("ws-{batch:?}"))).unwrap();
            let opts = Options {
                batch,
                only: vec![],
                label: "t".into(),
            };
            let mut exec = InProcess {
                input: &input,
                ws: &ws,
                runs: 1,
                push_runs: 2,
            };
            let r = run(&input, &opts, &ws, &mut exec, &mut |_| {}).unwrap();
            for row in &r.rows {
                let built = XDELTA3_BUILT || !matches!(row.name.as_str(), "IC-Xdelta3" | "AIC");
                if built {
                    assert!(
                        row.ok,
                        "{batch:?} {}: {:?} {:?}",
                        row.name, row.status, row.note
                    );
                } else {
                    assert_eq!(row.status, Status::NotBuilt);
                }
            }
            let f = IcFile::open(ws.truth()).unwrap();
            let got: Vec<u64> = f.meta().pages.clone();
            assert_eq!(got, image.keys().copied().collect::<Vec<_>>());
            for (pp, data) in image.values().enumerate() {
                assert_eq!(f.page(pp).unwrap(), data.as_slice());
            }
        }
    }

    /// A restore that is off by one byte is a failed row, not a data point.
    #[test]
    fn a_wrong_restore_is_detected() {
        struct Broken<'a>(InProcess<'a>);
        impl Executor for Broken<'_> {
            fn push(&mut self, name: &str, plan: &Plan) -> Result<Measured<PushOutcome>> {
                self.0.push(name, plan)
            }
            fn restore(&mut self, name: &str) -> Result<Measured<RestoreOutcome>> {
                let r = self.0.restore(name)?;
                if name == "IC" {
                    // Flip one bit of one page, keeping the file valid.
                    let p = self.0.ws.restored(name);
                    let f = IcFile::open(&p).unwrap();
                    let mut img = MemImage::default();
                    img.apply(&f).unwrap();
                    let (_, v) = img.pages.values_mut().nth(3).unwrap();
                    v[17] ^= 1;
                    let crc = crc32fast::hash(v);
                    img.pages.values_mut().nth(3).unwrap().0 = crc;
                    drop(f);
                    std::fs::remove_file(&p).unwrap();
                    img.write(&p).unwrap();
                }
                Ok(r)
            }
            fn memory_method(&self) -> String {
                "none".into()
            }
        }
        let d = tempfile::tempdir().unwrap();
        let l1 = d.path().join("l1");
        std::fs::create_dir_all(&l1).unwrap();
        let (input, _) = small_input(&l1, "balanced");
        let ws = Workspace::new(d.path().join("ws")).unwrap();
        let opts = Options {
            batch: Some(4),
            only: vec!["IC".into(), "zstd".into()],
            label: "t".into(),
        };
        let mut exec = Broken(InProcess {
            input: &input,
            ws: &ws,
            runs: 1,
            push_runs: 1,
        });
        let r = run(&input, &opts, &ws, &mut exec, &mut |_| {}).unwrap();
        let ic = r.row("IC").unwrap();
        assert_eq!(ic.status, Status::Failed);
        assert!(!ic.ok);
        assert!(ic.note.as_deref().unwrap().contains("DIFFERS"), "{ic:?}");
        assert!(r.row("zstd").unwrap().ok);
        assert!(r.row("REX").unwrap().ok);
        assert!(r.any_mismatch() && !r.all_ok());
        assert!(ic.restore_vs_rex.is_none());
    }

    #[test]
    fn mem_ic_rejects_what_the_file_reader_rejects() {
        let d = tempfile::tempdir().unwrap();
        let (input, _) = small_input(d.path(), "balanced");
        let bytes = std::fs::read(&input.files[1].path).unwrap();
        let m = MemIc::parse(Path::new("x"), bytes.clone()).unwrap();
        assert_eq!(m.meta().pages, input.files[1].pages);
        let mut short = bytes.clone();
        short.pop();
        assert!(MemIc::parse(Path::new("x"), short).is_err());
        let mut bad = bytes;
        let off = input.files[1].layout.data_off as usize + 5;
        bad[off] ^= 0xff;
        let m = MemIc::parse(Path::new("x"), bad).unwrap();
        assert!(matches!(
            m.page(0),
            Err(Error::Corrupt {
                field: "page data",
                ..
            })
        ));
    }
}
