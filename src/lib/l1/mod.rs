//! The L1 directory: a job's `*.rexic` files, ordered by `seq`.
//!
//! File names carry no meaning; the `seq` field inside each file orders
//! them. A chain starts at a FULL file, and every later file must continue
//! it without a gap: a missing incremental would make every later restore
//! silently wrong, so a gap is an error, never skipped. A FULL file may follow
//! a gap, because it starts a new chain on its own.
//!
//! **Runs.** A FULL file of version 2 mints a chain id, and every incremental
//! that extends it carries the same id (docs/FORMAT.md §2.11, §3.1.6). An
//! incremental continues exactly the run of the file before it; a FULL file
//! of another run must be newer in time (runs are ordered by time, not by
//! seq). A file counts as covered by an L2 generation ([`Covered`]) only if
//! it is of the same run and was written by the instance (the producer
//! process) that the generation records for its seq, or, where the
//! generation records none, was taken no later: seq numbers alone never
//! decide it, because a job restarted in a fresh L1 directory counts from 0
//! again, and times alone cannot tell a forked copy whose clock is behind.
//! Version 1 files carry no id and are one run among themselves.
//!
//! This is the L1 layer of the pipeline (the left of the paper's Fig. 4):
//! the directory of IC files ([`L1Dir`]), the Page Coalescer that turns a
//! batch of them into the C-List ([`coalesce`], Fig. 5a), and the job lock
//! that lets one rexctl at a time push from the directory ([`lock`]).

pub mod coalesce;
pub mod lock;

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::format::ic::{ChainId, EXTENSION, IcMeta, InstanceId};
use crate::format::manifest::{InstanceSpan, Manifest, OtherRun, Writer, instance_at};

/// What an L2 generation already holds of an L1 directory: the checkpoints
/// of run `chain_id` up to `last_seq`, written by the instances `instances`
/// says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Covered {
    /// The last seq the generation holds.
    pub last_seq: u64,
    /// The run it holds (`None` for version 1 checkpoints).
    pub chain_id: Option<ChainId>,
    /// The capture time of checkpoint `last_seq`.
    pub time_ns: u64,
    /// `(seq, time_ns)` of the checkpoints the generation's batch
    /// coalesced, ascending (the manifest's `seq_times`): a checkpoint that
    /// names no instance, of a seq listed, is covered only with that time.
    pub seq_times: Vec<(u64, u64)>,
    /// Which instance wrote which seqs (the manifest's spans; empty when it
    /// predates them).
    pub instances: Vec<InstanceSpan>,
    /// The generation's page size: an incremental that continues it has
    /// the same (only a FULL checkpoint changes it).
    pub page_size: u32,
    /// Checkpoints of other runs its batch coalesced (the manifest's
    /// `other_runs`): covered when a file is exactly one of them.
    pub other_runs: Vec<OtherRun>,
}

impl From<&Manifest> for Covered {
    fn from(m: &Manifest) -> Covered {
        Covered {
            last_seq: m.last_seq,
            chain_id: m.chain_id,
            time_ns: m.time_ns,
            seq_times: m.seq_times.clone(),
            instances: m.instances.clone(),
            page_size: m.page_size,
            other_runs: m.other_runs.clone(),
        }
    }
}

/// Whether two checkpoints (or generations) belong to one run: their chain
/// ids are equal. Version 1 files have none, and are one "run" among
/// themselves (matched by seq alone, as before chain ids); a version 2 file
/// never continues them, nor they a version 2 run.
pub fn same_run(a: Option<ChainId>, b: Option<ChainId>) -> bool {
    a == b
}

/// Why `next` cannot follow a state of run `run` whose newest checkpoint was
/// taken at `time_ns`, if it cannot: an incremental must continue that run;
/// a FULL checkpoint of another run must be newer (checkpoint times order
/// runs; a higher seq of an older run is never newer). `None` when it can.
fn run_break(run: Option<ChainId>, time_ns: u64, next: &IcMeta) -> Option<String> {
    if next.is_full() && next.header.time_ns <= time_ns {
        // A FULL checkpoint replaces the state before it only if it is
        // newer: of another run (runs are ordered by time), or of the same
        // one (an older one is a stale branch of it).
        Some(if same_run(run, next.chain_id) {
            format!(
                "its FULL checkpoint of {} was taken at {} ns, not after the {} ns of the state before it (a stale branch of the run)",
                run_name(next.chain_id),
                next.header.time_ns,
                time_ns
            )
        } else {
            format!(
                "its FULL checkpoint starts {} at {} ns, not after the {} ns of {} before it (runs are ordered by time: an older run's checkpoint, or an older L1 directory pointed at a newer L2?)",
                run_name(next.chain_id),
                next.header.time_ns,
                time_ns,
                run_name(run)
            )
        })
    } else if next.is_full() {
        None
    } else {
        (!same_run(run, next.chain_id)).then(|| {
            format!(
                "it is an incremental of {}, but continues {}: an incremental continues the run of the FULL checkpoint it extends",
                run_name(next.chain_id),
                run_name(run)
            )
        })
    }
}

impl Covered {
    /// Whether the generation already holds `m`: a checkpoint of its run,
    /// at or below its last seq, written by the instance that the
    /// generation's spans name for its seq. A process writes each seq once,
    /// so that instance's file is the one pushed, whatever the clocks say.
    /// Where the spans do not reach back, or the file names no instance,
    /// times decide: the checkpoint must have the time its seq has in the
    /// generation's batch, or, for a seq the manifest lists no time of, be
    /// no later than the generation's last checkpoint. Any other checkpoint of the run with such a seq is a fork
    /// (a restarted job that continued the run elsewhere while this
    /// generation was pushed from another copy): never taken as pushed.
    /// A checkpoint of another run is held only if the generation's batch
    /// coalesced that very file (`other_runs`).
    pub fn covers(&self, m: &IcMeta) -> bool {
        // A checkpoint of another run the batch coalesced (a push that
        // stopped after its commit left it: helper-60), by all it says of
        // itself: its run's 128-bit id, seq, time and writer.
        if self.other_runs.iter().any(|o| {
            Some(o.chain_id) == m.chain_id
                && o.seq == m.seq()
                && o.time_ns == m.header.time_ns
                && o.instance == m.instance
        }) {
            return true;
        }
        let by_time = match self.seq_times.binary_search_by_key(&m.seq(), |&(q, _)| q) {
            Ok(i) => m.header.time_ns == self.seq_times[i].1,
            Err(_) => m.header.time_ns <= self.time_ns,
        };
        m.seq() <= self.last_seq
            && same_run(m.chain_id, self.chain_id)
            && match instance_at(&self.instances, m.seq()) {
                Writer::Id(id) => m.instance == Some(id),
                Writer::NoId => m.instance.is_none() && by_time,
                Writer::Unknown => by_time,
                Writer::Forgotten => false,
            }
    }
}

/// Why `first`, the lowest pending file of `dir`, cannot continue the
/// generation `cov` describes, if it cannot: another run's file that is not
/// a newer FULL checkpoint, a fork of the generation's run, or a gap (in
/// a few words, and the error).
fn cannot_continue(dir: &Path, cov: &Covered, first: &IcMeta) -> Option<(&'static str, Error)> {
    let last = cov.last_seq;
    if let Some(why) = run_break(cov.chain_id, cov.time_ns, first) {
        let kind = match (first.is_full(), same_run(first.chain_id, cov.chain_id)) {
            (true, true) => "an older FULL checkpoint of its run",
            (true, false) => "an older run",
            (false, _) => "another run",
        };
        return Some((
            kind,
            Error::chain(
                &first.path,
                format!(
                    "{why}; L2's newest generation holds {} up to seq {last}: not pushed, kept",
                    run_name(cov.chain_id)
                ),
            ),
        ));
    }
    // A FULL file passed `run_break`: it is newer than the generation. One
    // of another run starts a new chain; one of the generation's run must
    // also come after it in seq, or be judged as a fork below, unless
    // nothing but times tells checkpoints of the run apart (a version 1
    // producer restarted in a fresh directory counts seq anew).
    if first.is_full()
        && (!same_run(first.chain_id, cov.chain_id)
            || first.seq() > last
            || first.instance.is_none()
                && matches!(
                    instance_at(&cov.instances, first.seq()),
                    Writer::Unknown | Writer::NoId
                ))
    {
        return None;
    }
    if first.seq() <= last {
        let how = match instance_at(&cov.instances, first.seq()) {
            Writer::Forgotten => format!(
                "was written by {}, but L2's newest generation holds that run up to seq {last}, and no longer records which instance wrote seq {} (its instance spans were capped)",
                instance_name(first.instance),
                first.seq()
            ),
            w @ (Writer::Id(_) | Writer::NoId) if w.id() != first.instance => format!(
                "was written by {}, but L2's newest generation holds that run up to seq {last} with seq {} written by {}",
                instance_name(first.instance),
                first.seq(),
                instance_name(w.id())
            ),
            _ => match cov
                .seq_times
                .binary_search_by_key(&first.seq(), |&(q, _)| q)
            {
                Ok(i) => format!(
                    "was taken at {} ns, but L2's newest generation holds that run up to seq {last} with seq {} taken at {} ns",
                    first.header.time_ns,
                    first.seq(),
                    cov.seq_times[i].1
                ),
                Err(_) => format!(
                    "was taken after L2's newest generation, which already holds that run up to seq {last}"
                ),
            },
        };
        return Some((
            "a fork of the run",
            Error::chain(
                &first.path,
                format!(
                    "seq {} of {} {how}: a fork of the run, from seq {} on this directory branches off from what L2 holds (another copy of the job, or the job restarted elsewhere, pushed first); not pushed, kept (if this branch is abandoned, remove its files: `restore --fallback` restores what L2 holds)",
                    first.seq(),
                    run_name(first.chain_id),
                    first.seq()
                ),
            ),
        ));
    }
    if !first.is_full() && first.header.page_size != cov.page_size {
        // What push and restore refuse, said by `status` and `verify` too
        // (helper-59: they passed such a directory).
        return Some((
            "another page size",
            Error::chain(
                &first.path,
                format!(
                    "an incremental checkpoint of {}-byte pages, but L2's newest generation has {}-byte pages: only a FULL checkpoint may change the page size; not pushed, kept",
                    first.header.page_size, cov.page_size
                ),
            ),
        ));
    }
    (first.seq() != last + 1 && !first.is_full()).then(|| {
        ("a gap", Error::chain(
            dir,
            format!(
                "checkpoint seq {} missing: the L2 chain covers up to seq {last}, the next L1 checkpoint is {} (seq {})",
                last + 1,
                first.path.display(),
                first.seq()
            ),
        ))
    })
}

fn instance_name(i: Option<InstanceId>) -> String {
    i.map_or("a process that names no instance".into(), |i| {
        format!("instance {i}")
    })
}

/// A run, as messages name it: its chain id.
pub(crate) fn run_name(c: Option<ChainId>) -> String {
    c.map_or("a version 1 run (no chain id)".into(), |c| {
        format!("run {c}")
    })
}

/// The IC files found in an L1 directory, validated as a chain.
#[derive(Debug, Clone)]
pub struct L1Dir {
    /// The directory.
    pub path: PathBuf,
    /// Files in ascending `seq`, starting at the first FULL file.
    pub files: Vec<IcMeta>,
    /// Files older than the first FULL file, which no chain can use.
    pub orphans: Vec<IcMeta>,
    /// Pending files that could not continue the generation but that a
    /// later FULL checkpoint of the directory supersedes (`files` starts
    /// there): deleted only once that checkpoint is pushed.
    pub superseded: Vec<IcMeta>,
    /// Why they were superseded, for the push to report.
    pub superseded_why: Option<String>,
}

/// A file a fallback restore left out of the state it restored, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    /// The file (the directory itself when it could not be listed).
    pub path: PathBuf,
    /// Why, without the path.
    pub why: String,
}

impl LeftOut {
    /// `why` may start with the path (an error's report does): said once.
    fn new(path: &Path, why: String) -> LeftOut {
        let shown = format!("{}: ", path.display());
        let why = match why.strip_prefix(&shown) {
            Some(rest) => rest.to_string(),
            None => why,
        };
        LeftOut {
            path: path.to_path_buf(),
            why,
        }
    }

    /// The lines of `left`, joined with "; " ("nothing" when empty).
    pub fn list(left: &[LeftOut]) -> String {
        if left.is_empty() {
            return "nothing".into();
        }
        left.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    }
}

impl std::fmt::Display for LeftOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.why)
    }
}

/// What a set-aside checkpoint's name ends with (after its own name):
/// see [`set_aside`].
pub const SET_ASIDE_SUFFIX: &str = ".left-out";

/// Sets the L1 checkpoint `path` aside: renames it, in its directory, to
/// `<name>.left-out` (`<name>.left-out.2`, ... when taken), a name no scan,
/// push, restore or garbage collection reads or deletes, then makes the
/// rename durable. Returns the new path.
///
/// A librex restart that fell back past damaged or unusable checkpoints
/// sets them aside: it continues as a new run above them, and a file whose
/// header cannot even be read would otherwise stop every later push (only
/// the files' own contents say which run they are of). They are kept as
/// evidence, never deleted: the user decides.
pub fn set_aside(path: &Path) -> Result<PathBuf> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| Error::chain(path, "not a file name".to_string()))?
        .to_string_lossy()
        .into_owned();
    let mut n = 1u32;
    let to = loop {
        let to = dir.join(match n {
            1 => format!("{name}{SET_ASIDE_SUFFIX}"),
            n => format!("{name}{SET_ASIDE_SUFFIX}.{n}"),
        });
        // The caller holds the producer lock: nothing else creates these
        // names between the check and the rename.
        if fs::symlink_metadata(&to).is_err() {
            break to;
        }
        n += 1;
    };
    fs::rename(path, &to).ctx(path, "set aside")?;
    crate::durable::fsync_dir(dir)?;
    Ok(to)
}

/// Whether `a` and `b` hold one checkpoint: the same file (links to it),
/// or the same bytes. Compared in 1 MiB blocks, so a large checkpoint
/// costs no memory; any failure to read says no.
fn same_checkpoint(a: &Path, b: &Path) -> bool {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let (Ok(ma), Ok(mb)) = (fs::metadata(a), fs::metadata(b)) else {
        return false;
    };
    if (ma.dev(), ma.ino()) == (mb.dev(), mb.ino()) {
        return true;
    }
    if ma.len() != mb.len() {
        return false;
    }
    let (Ok(mut fa), Ok(mut fb)) = (fs::File::open(a), fs::File::open(b)) else {
        return false;
    };
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = match fa.read(&mut ba) {
            Ok(0) => return fb.read(&mut bb[..1]).is_ok_and(|m| m == 0),
            Ok(n) => n,
            Err(_) => return false,
        };
        if fb.read_exact(&mut bb[..n]).is_err() || ba[..n] != bb[..n] {
            return false;
        }
    }
}

/// The checkpoints of `dir` that [`set_aside`] set aside (whatever their
/// names were), sorted by name.
pub fn list_set_aside(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).ctx(dir, "read directory")? {
        let entry = entry.ctx(dir, "read directory")?;
        if set_aside_name(&entry.file_name().to_string_lossy()).is_some() {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// The name a checkpoint had before [`set_aside`] renamed it to `name`,
/// if `name` is such a name.
fn set_aside_name(name: &str) -> Option<&str> {
    let (base, tail) = name.rsplit_once(SET_ASIDE_SUFFIX)?;
    let numbered = || tail.strip_prefix('.')?.parse::<u32>().ok();
    let ok = base.ends_with(&format!(".{EXTENSION}"))
        && !base.starts_with('.')
        && (tail.is_empty() || numbered().is_some());
    ok.then_some(base)
}

/// The seq of a checkpoint [`set_aside`] set aside at `path`: its header's
/// when it can be read, else the one its former name carries (see
/// [`seq_of_file_name`]), if any.
pub fn set_aside_seq(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_string_lossy().into_owned();
    let base = set_aside_name(&name)?;
    IcMeta::read(path)
        .ok()
        .map(|m| m.seq())
        .or_else(|| seq_of_file_name(base))
}

/// Lists the `*.rexic` files of `dir` (temporaries excluded), unsorted.
pub fn list_ic_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).ctx(dir, "read directory")? {
        let entry = entry.ctx(dir, "read directory")?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        // Hidden names are temporaries (ours are `.<name>.tmp-*`) or other
        // tools' scratch files, never published checkpoints.
        if name.starts_with('.') {
            continue;
        }
        let p = entry.path();
        if p.extension().is_none_or(|e| e != EXTENSION) {
            continue;
        }
        // Symlinks are followed. Anything that is not a regular file in the
        // end (a dangling link, a directory, a FIFO) is refused rather than
        // skipped: skipping the newest checkpoint would make the next push or
        // restore silently older.
        match fs::metadata(&p) {
            Ok(md) if md.is_file() => out.push(p),
            Ok(md) => {
                return Err(Error::corrupt(
                    &p,
                    0,
                    "file type",
                    format!(
                        "named like a checkpoint but {}",
                        if md.is_dir() {
                            "a directory"
                        } else {
                            "not a regular file"
                        }
                    ),
                ));
            }
            // A dangling link is a file of the wrong type, as a FIFO is
            // (FORMAT.md §2.8 step 0a: exit 3; helper-96 saw exit 1 here and
            // 3 in verify).
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    && fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) =>
            {
                return Err(Error::corrupt(
                    &p,
                    0,
                    "file type",
                    "named like a checkpoint but a symbolic link to nothing",
                ));
            }
            Err(e) => {
                return Err(Error::io(
                    &p,
                    "follow (a dangling symlink named like a checkpoint?)",
                    e,
                ));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The IC files of `dir` whose header and metadata read, sorted by seq;
/// unreadable ones are left out (for decisions that must not be swayed by
/// one damaged file).
pub fn read_readable(dir: &Path) -> Vec<IcMeta> {
    let mut metas: Vec<IcMeta> = fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    p.extension().is_some_and(|e| e == EXTENSION)
                        && !p
                            .file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                })
                .filter_map(|p| IcMeta::read(&p).ok())
                .collect()
        })
        .unwrap_or_default();
    metas.sort_by_key(|m| m.seq());
    metas
}

/// Reads the header and metadata of every IC file in `dir` (never page
/// data), sorted by seq.
pub fn read_all(dir: &Path) -> Result<Vec<IcMeta>> {
    let mut metas = list_ic_files(dir)?
        .into_iter()
        .map(IcMeta::read)
        .collect::<Result<Vec<_>>>()?;
    metas.sort_by_key(|m| m.seq());
    Ok(metas)
}

impl L1Dir {
    /// Reads the header and metadata of every IC file in `dir` (never page
    /// data) and checks that they form a chain starting at a FULL file.
    pub fn scan(dir: impl AsRef<Path>) -> Result<L1Dir> {
        Self::scan_after_up_to(dir, None, None)
    }

    /// Reads the IC files of `dir` when an L2 generation already covers
    /// every seq up to `covered` (when `Some`): files up to it go to
    /// `orphans` (they are replaced by the generation), and the rest must
    /// continue at `covered + 1` (or restart at a FULL file) without a gap.
    ///
    /// Only files of the generation's run are covered (see the module doc).
    /// Pending files of another run must start with a FULL file newer than
    /// the generation (a restarted job); an incremental of another run is an
    /// error, and so is an older FULL file (an old L1 pointed at a newer
    /// L2): such files are never taken as pushed, hence never deleted.
    pub fn scan_after(dir: impl AsRef<Path>, covered: Option<Covered>) -> Result<L1Dir> {
        Self::scan_after_up_to(dir, covered, None)
    }

    /// [`L1Dir::scan_after`] of the files up to seq `up_to` alone (a
    /// restore of the state at that seq): later files are not checked or
    /// used.
    pub fn scan_after_up_to(
        dir: impl AsRef<Path>,
        covered: Option<Covered>,
        up_to: Option<u64>,
    ) -> Result<L1Dir> {
        let dir = dir.as_ref();
        let mut all = read_all(dir)?;
        if let Some(s) = up_to {
            all.retain(|m| m.seq() <= s);
        }
        let Some(cov) = covered else {
            let (orphans, files) = order_chain(dir, all)?;
            return Ok(L1Dir {
                path: dir.to_path_buf(),
                files,
                orphans,
                superseded: Vec::new(),
                superseded_why: None,
            });
        };
        let (mut files, mut pending): (Vec<IcMeta>, Vec<IcMeta>) =
            all.into_iter().partition(|m| cov.covers(m));
        check_unique_seqs(dir, &files)?;
        check_unique_seqs(dir, &pending)?;
        files.sort_by_key(|m| m.seq());
        // The pending files must continue the generation: the first one
        // against it, each later one against the one before.
        let writers = Writers::of_spans(cov.chain_id, &cov.instances);
        let check = |files: &[IcMeta]| -> Result<()> {
            if let Some((_, e)) = files.first().and_then(|f| cannot_continue(dir, &cov, f)) {
                return Err(e);
            }
            check_contiguous_after(dir, files, writers.clone())
        };
        let mut superseded = Vec::new();
        let mut superseded_why = None;
        if let Err(refused) = check(&pending) {
            // A later FULL checkpoint of this directory from which on the
            // files do continue the generation, taken after every file
            // before it, is a newer state that needs none of them (the
            // producer restarted past them, as librex does after a
            // fallback): they are superseded, and deleted once it is pushed.
            let i = (1..pending.len()).find(|&i| {
                let b = &pending[i];
                b.is_full()
                    && pending[..i]
                        .iter()
                        .all(|p| p.header.time_ns < b.header.time_ns)
                    && check(&pending[i..]).is_ok()
            });
            let Some(i) = i else {
                return Err(refused);
            };
            let kind = cannot_continue(dir, &cov, &pending[0])
                .map_or("a gap, a fork or a stale checkpoint among them", |k| k.0);
            superseded = pending.drain(..i).collect::<Vec<_>>();
            let (a, b) = (superseded[0].seq(), superseded[superseded.len() - 1].seq());
            superseded_why = Some(format!(
                "L1 checkpoint{} cannot continue L2's newest generation ({kind}), but the FULL checkpoint of seq {}, taken after {}, supersedes {}: not pushed, deleted once it is",
                if a == b {
                    format!(" seq {a}")
                } else {
                    format!("s seq {a}..={b}")
                },
                pending[0].seq(),
                if a == b { "it" } else { "them" },
                if a == b { "it" } else { "them" },
            ));
        }
        Ok(L1Dir {
            path: dir.to_path_buf(),
            files: pending,
            orphans: files,
            superseded,
            superseded_why,
        })
    }

    /// The newest valid state the directory holds after `covered` (or, with
    /// `None`, from its first FULL file on), for a restore that falls back:
    /// the pending files in seq order up to (not including) the first that
    /// cannot be used: unreadable, failing a page CRC, after a gap, or a
    /// seq of which not exactly one checkpoint could continue the state
    /// (copies of one checkpoint, links or identical bytes, count once). Returns
    /// those files and one line per file left out, saying why. Never fails:
    /// what cannot be read is left out and said.
    pub fn valid_prefix_after(
        dir: impl AsRef<Path>,
        covered: Option<Covered>,
    ) -> (Vec<IcMeta>, Vec<LeftOut>) {
        let dir = dir.as_ref();
        let mut skipped = Vec::new();
        let paths = match fs::read_dir(dir) {
            Ok(rd) => rd
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    p.extension().is_some_and(|e| e == EXTENSION)
                        && !p
                            .file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                })
                .collect::<Vec<_>>(),
            Err(e) => {
                skipped.push(LeftOut::new(dir, format!("read directory: {e}")));
                return (Vec::new(), skipped);
            }
        };
        let mut metas = Vec::new();
        for p in paths {
            match IcMeta::read(&p) {
                Ok(m) if covered.as_ref().is_none_or(|c| !c.covers(&m)) => metas.push(m),
                Ok(_) => {}
                Err(e) => skipped.push(LeftOut::new(&p, e.report())),
            }
        }
        metas.sort_by_key(|m| m.seq());
        if covered.is_none() {
            // Files before the first FULL one are no state of their own.
            let first_full = metas
                .iter()
                .position(|m| m.is_full())
                .unwrap_or(metas.len());
            metas.drain(..first_full);
        }
        // Walk the files in seq order; a file that cannot be used ends the
        // state there, unless a later FULL checkpoint (which needs nothing
        // before it) starts a newer one.
        let mut out: Vec<IcMeta> = Vec::new();
        let mut expected = match &covered {
            Some(c) => c.last_seq.checked_add(1),
            None => metas.first().map(|m| m.seq()),
        };
        let mut writers = covered.as_ref().map_or_else(Writers::default, |c| {
            Writers::of_spans(c.chain_id, &c.instances)
        });
        let (mut run, mut time) = match &covered {
            Some(c) => (c.chain_id, c.time_ns),
            None => (metas.first().and_then(|m| m.chain_id), 0),
        };
        let mut broken = false;
        // Why `m` cannot be the next file of the state (else the writers
        // once it is): the checks a push makes, then its page CRCs.
        let why_not = |m: &IcMeta,
                       out: &[IcMeta],
                       broken: bool,
                       expected: Option<u64>,
                       (run, time): (Option<ChainId>, u64),
                       writers: &Writers|
         -> std::result::Result<Writers, String> {
            if broken && !m.is_full() {
                return Err("after a checkpoint left out".to_string());
            }
            if let Some(c) = covered.as_ref().filter(|_| out.is_empty())
                && let Some((_, e)) = cannot_continue(dir, c, m)
            {
                // Nothing taken yet: the state is the generation's, and
                // the file must continue it as a push would require.
                return Err(match e {
                    Error::Chain { reason, .. } => reason,
                    e => e.report(),
                });
            }
            if let Some(why) = run_break(run, time, m) {
                return Err(why);
            }
            if Some(m.seq()) != expected && !m.is_full() {
                return Err(format!(
                    "seq {} is missing before it",
                    expected.map_or("?".into(), |e| e.to_string())
                ));
            }
            if out
                .last()
                .is_some_and(|p| p.header.page_size != m.header.page_size && !m.is_full())
            {
                return Err("its page size differs from the previous checkpoint's".into());
            }
            let mut w = writers.clone();
            if let Some(why) = w.refuse(m) {
                return Err(why);
            }
            match crate::format::ic::IcFile::open(&m.path).and_then(|f| f.verify()) {
                Ok(()) => Ok(w),
                Err(e) => Err(e.report()),
            }
        };
        // Files of one seq are judged together: of two copies of a seq (a
        // stray copy, another run's file), the one that continues the state
        // is taken when it is the only one (helper-63: both were left out,
        // and the job's own later checkpoints with them); when none or
        // several could, none is.
        for group in metas.chunk_by(|a, b| a.seq() == b.seq()) {
            let judged: Vec<_> = group
                .iter()
                .map(|m| why_not(m, &out, broken, expected, (run, time), &writers))
                .collect();
            let fits: Vec<usize> = (0..group.len()).filter(|&i| judged[i].is_ok()).collect();
            // Copies that are one checkpoint (a link to it, or its very
            // bytes: a user's backup copy under a `.rexic` name) are
            // one: the file under its own name is taken, the others left
            // out as copies (helper-67: every copy was left out, and with
            // them the job's later checkpoints, all intact).
            let same = |&k: &usize| same_checkpoint(&group[fits[0]].path, &group[k].path);
            let taken = match fits[..] {
                [i] => Some(i),
                [first, ..] if fits.iter().all(same) => Some(
                    fits.iter()
                        .copied()
                        .find(|&k| {
                            group[k].path.file_name().and_then(|n| n.to_str())
                                == Some(ic_file_name(group[k].seq()).as_str())
                        })
                        .unwrap_or(first),
                ),
                _ => None,
            };
            for (i, (m, j)) in group.iter().zip(&judged).enumerate() {
                if Some(i) == taken {
                    continue;
                }
                let mut left = LeftOut::new(&m.path, j.as_ref().err().cloned().unwrap_or_default());
                left.why = match (group.len(), j) {
                    (1, _) => left.why,
                    (_, Ok(_)) if taken.is_some() => format!(
                        "a copy of {} (the same checkpoint, seq {})",
                        group[taken.expect("some")].path.display(),
                        m.seq()
                    ),
                    (_, Err(_)) => {
                        format!("seq {} appears twice; this copy: {}", m.seq(), left.why)
                    }
                    (_, Ok(_)) => format!(
                        "seq {} appears twice, and more than one copy could continue the state",
                        m.seq()
                    ),
                };
                skipped.push(left);
            }
            let Some(i) = taken else {
                broken = true;
                continue;
            };
            let m = &group[i];
            // The instances that wrote the other copies of this seq are
            // forks of the run from here on: a later file of theirs
            // continues their copy, not the one taken (helper-64: the
            // damaged copy's next checkpoint was taken on top of the
            // other copy, an image no process ever had).
            let mut w = judged[i].clone().expect("taken");
            for (k, other) in group.iter().enumerate() {
                if let Some(id) = other
                    .instance
                    .filter(|&id| k != i && Some(id) != m.instance)
                {
                    w.end(id);
                }
            }
            if m.is_full() && broken {
                // A newer self-contained state: what came before no longer
                // matters (it stays listed as left out).
                out.clear();
            }
            broken = false;
            expected = m.seq().checked_add(1);
            run = m.chain_id;
            time = m.header.time_ns;
            writers = w;
            out.push(m.clone());
        }
        (out, skipped)
    }

    /// The files with `seq >= first`.
    pub fn since(&self, first: u64) -> &[IcMeta] {
        let i = self.files.partition_point(|m| m.seq() < first);
        &self.files[i..]
    }

    /// Page size of the chain, if it has any file.
    pub fn page_size(&self) -> Option<u32> {
        self.files.first().map(|m| m.header.page_size)
    }
}

/// Checks that no two of the seq-sorted `files` have the same seq.
fn check_unique_seqs(dir: &Path, files: &[IcMeta]) -> Result<()> {
    match files.windows(2).find(|w| w[0].seq() == w[1].seq()) {
        Some(w) => Err(Error::chain(
            dir,
            format!(
                "checkpoint seq {} appears twice: {} and {}",
                w[0].seq(),
                w[0].path.display(),
                w[1].path.display()
            ),
        )),
        None => Ok(()),
    }
}

/// Splits seq-sorted files into (orphans before the first FULL, chain) and
/// checks the chain: unique seqs, no gaps except before a FULL file, one
/// page size.
pub fn order_chain(dir: &Path, metas: Vec<IcMeta>) -> Result<(Vec<IcMeta>, Vec<IcMeta>)> {
    check_unique_seqs(dir, &metas)?;
    let Some(start) = metas.iter().position(|m| m.is_full()) else {
        return if metas.is_empty() {
            Ok((Vec::new(), Vec::new()))
        } else {
            Err(Error::chain(
                dir,
                format!(
                    "no FULL checkpoint: {} incremental files (seq {}..={}) have nothing to start from",
                    metas.len(),
                    metas[0].seq(),
                    metas[metas.len() - 1].seq()
                ),
            ))
        };
    };
    let mut metas = metas;
    let files = metas.split_off(start);
    check_contiguous(dir, &files)?;
    Ok((metas, files))
}

/// Checks that `files` (ascending seq) have no gap except before a FULL
/// file, and that each chain (a FULL file and the incrementals after it)
/// has one page size.
pub fn check_contiguous(dir: &Path, files: &[IcMeta]) -> Result<()> {
    check_contiguous_after(dir, files, Writers::default())
}

/// The instances that wrote a run, in seq order. Once another instance has
/// taken a run over, an earlier one never writes it again: a process writes
/// its seqs in order, and a restarted one is a new instance. An instance
/// that comes back is therefore a second copy of the job writing the same
/// run (a fork), for example a dead run's later checkpoints recovered from
/// partner copies after the restarted job's own.
#[derive(Clone, Debug, Default)]
pub struct Writers {
    /// The run they wrote (`None` before the first file).
    run: Option<Option<ChainId>>,
    current: Option<InstanceId>,
    ended: std::collections::HashSet<InstanceId>,
    /// The writer of the run's last checkpoint so far (`Some(None)`: it
    /// names no instance), when known: the one the next checkpoint must
    /// say it continues, if it says (§2.11.2).
    last: Option<Option<InstanceId>>,
}

impl Writers {
    /// The writers a generation's spans record for its run `chain`.
    pub fn of_spans(chain: Option<ChainId>, spans: &[InstanceSpan]) -> Writers {
        let mut w = Writers {
            run: Some(chain),
            ..Writers::default()
        };
        for s in spans {
            if let Some(id) = s.id {
                w.see(id);
            }
        }
        // The last span reaches the generation's last seq.
        w.last = spans.last().and_then(|s| (!s.forgotten).then_some(s.id));
        w
    }

    /// Records that `id` never writes the run again: a later checkpoint of
    /// its is a fork's.
    fn end(&mut self, id: InstanceId) {
        if self.current != Some(id) {
            self.ended.insert(id);
        }
    }

    /// Records that `id` wrote the next checkpoint of the run; false when it
    /// had already handed the run over (the checkpoint is a fork's).
    pub fn see(&mut self, id: InstanceId) -> bool {
        if self.current == Some(id) {
            return true;
        }
        if self.ended.contains(&id) {
            return false;
        }
        if let Some(c) = self.current.replace(id) {
            self.ended.insert(c);
        }
        true
    }

    /// Why `m` cannot be the next checkpoint of the run (recording it when
    /// it can): its instance had handed the run over. A file of another
    /// run (a FULL one starts it) starts afresh; a FULL file of the same run
    /// does not.
    ///
    /// A checkpoint that names the writer of the checkpoint it continues
    /// (§2.11.2) must continue the run's last one: a file of a fork whose
    /// own predecessor is missing would otherwise read as a hand-over
    /// (helper-67: B's seq 3 gone, B's seq 4 taken on top of C's seq 3, an
    /// image no process had).
    fn refuse(&mut self, m: &IcMeta) -> Option<String> {
        if self.run.is_some_and(|r| !same_run(r, m.chain_id)) {
            *self = Writers::default();
        }
        self.run = Some(m.chain_id);
        let last = self.last.replace(m.instance);
        if !m.is_full()
            && let (Some(c), Some(l)) = (m.continues, last)
            && c != l
        {
            // Not taken: the run's last checkpoint stays the one before.
            self.last = last;
            return Some(format!(
                "seq {} of {} continues a checkpoint written by {}, but seq {} before it was written by {}: two copies of the job wrote the run (a fork)",
                m.seq(),
                run_name(m.chain_id),
                instance_name(c),
                m.seq().wrapping_sub(1),
                instance_name(l)
            ));
        }
        let id = m.instance?;
        let before = self.current;
        (!self.see(id)).then(|| {
            format!(
                "seq {} of {} was written by instance {id}, which had already handed that run over to {}: two copies of the job wrote it (a fork)",
                m.seq(),
                run_name(m.chain_id),
                instance_name(before)
            )
        })
    }
}

/// [`check_contiguous`] of files that continue a run whose writers so far
/// were `writers`.
fn check_contiguous_after(dir: &Path, files: &[IcMeta], mut writers: Writers) -> Result<()> {
    if let Some(why) = files.first().and_then(|f| writers.refuse(f)) {
        return Err(Error::chain(
            &files[0].path,
            format!("{why}; not pushed, kept"),
        ));
    }
    for w in files.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        if b.header.page_size != a.header.page_size && !b.is_full() {
            return Err(Error::chain(
                dir,
                format!(
                    "{} has page size {}, but {} has {}: a chain has one page size (only a FULL checkpoint may change it)",
                    b.path.display(),
                    b.header.page_size,
                    a.path.display(),
                    a.header.page_size
                ),
            ));
        }
        if let Some(why) = run_break(a.chain_id, a.header.time_ns, b) {
            return Err(Error::chain(
                dir,
                format!(
                    "{} (seq {}) cannot follow {} (seq {}): {why}; not pushed, kept",
                    b.path.display(),
                    b.seq(),
                    a.path.display(),
                    a.seq(),
                ),
            ));
        }
        if b.seq() != a.seq() + 1 && !b.is_full() {
            let missing = a.seq() + 1;
            let more = if b.seq() - a.seq() > 2 {
                format!(
                    " (and {} more up to {})",
                    b.seq() - a.seq() - 2,
                    b.seq() - 1
                )
            } else {
                String::new()
            };
            return Err(Error::chain(
                dir,
                format!(
                    "checkpoint seq {missing} missing{more}: {} (seq {}) follows {} (seq {})",
                    b.path.display(),
                    b.seq(),
                    a.path.display(),
                    a.seq()
                ),
            ));
        }
        if let Some(why) = writers.refuse(b) {
            return Err(Error::chain(&b.path, format!("{why}; not pushed, kept")));
        }
    }
    Ok(())
}

/// A conventional file name for the checkpoint with sequence number `seq`.
pub fn ic_file_name(seq: u64) -> String {
    format!("ckpt-{seq:08}.{EXTENSION}")
}

/// The seq in a file name made by [`ic_file_name`], if it is one.
pub fn seq_of_file_name(name: &str) -> Option<u64> {
    name.strip_prefix("ckpt-")?
        .strip_suffix(&format!(".{EXTENSION}"))?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_aside_checkpoint_keeps_its_bytes_and_never_takes_an_existing_name() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(ic_file_name(7));
        let mut names = Vec::new();
        for k in 0..3u8 {
            std::fs::write(&p, [k; 5]).unwrap();
            let to = set_aside(&p).unwrap();
            assert!(!p.exists());
            assert_eq!(std::fs::read(&to).unwrap(), [k; 5]);
            names.push(to.file_name().unwrap().to_string_lossy().into_owned());
        }
        assert_eq!(
            names,
            [
                "ckpt-00000007.rexic.left-out",
                "ckpt-00000007.rexic.left-out.2",
                "ckpt-00000007.rexic.left-out.3"
            ]
        );
        assert!(list_ic_files(d.path()).unwrap().is_empty(), "still scanned");
        // Any checkpoint's name: a stray copy too.
        let other = d.path().join("other.rexic");
        std::fs::write(&other, b"x").unwrap();
        let other = set_aside(&other).unwrap();
        let listed = list_set_aside(d.path()).unwrap();
        assert_eq!(listed.len(), 4);
        assert_eq!(listed[3], other);
        for p in &listed[..3] {
            assert_eq!(set_aside_seq(p), Some(7));
        }
        assert_eq!(set_aside_seq(&other), None, "no seq to tell");
        for not in [
            "ckpt-00000007.rexic",
            "ckpt-00000007.rexic.left-out.x",
            "other.left-out",
            "ckpt-00000007.rexic.left-outer",
            ".ckpt-00000007.rexic.tmp-1.left-out",
        ] {
            assert_eq!(set_aside_name(not), None, "{not}");
        }
    }

    #[test]
    fn a_file_left_out_is_named_once() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(ic_file_name(1));
        std::fs::write(&p, b"not a checkpoint").unwrap();
        let (prefix, left) = L1Dir::valid_prefix_after(d.path(), None);
        assert!(prefix.is_empty());
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].path, p);
        let line = LeftOut::list(&left);
        assert_eq!(line.matches(&*p.to_string_lossy()).count(), 1, "{line}");
        assert_eq!(LeftOut::list(&[]), "nothing");
    }
}
