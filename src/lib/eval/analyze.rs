//! `rexctl analyze`: the paper's motivation figures (§2, Figs. 1-3),
//! computed on a job's own L1 checkpoints, and what REX would make of them.
//!
//! The L1 directory is read as chains (a FULL checkpoint and the
//! incrementals after it). As REX would, each chain's FULL checkpoint is
//! the first L2 checkpoint on its own, and its incrementals are pushed in
//! batches of `B` (the last batch may be shorter).
//!
//! * **Fig. 1, re-dirtied pages** (what coalescing saves): for the `j`-th
//!   incremental of a batch, the share of its pages that an earlier
//!   incremental of the same batch also carried. Coalescing keeps only the
//!   last copy, so those earlier copies never reach L2. Reported per `j`
//!   (mean, min, max over the batches), with the batches' share of page
//!   copies coalescing skips.
//! * **Fig. 2, surviving patterns** (what page-aware deduplication saves):
//!   for batch sizes 2 and 4, every page a batch writes that already existed
//!   at the previous L2 checkpoint (a *rewritten* page) is cut into its
//!   32-byte patterns, and the share of them found anywhere in that page's
//!   previous L2 version is counted: the Deduplication Unit seeds its table
//!   with exactly those patterns. The share at the same offset is given too.
//! * **Fig. 3, incremental size**: each incremental's page data over the
//!   image size at that checkpoint (what a FULL checkpoint would have been
//!   then): mean, standard deviation, min, max, and the paper's variance
//!   (standard deviation over mean).
//! * **Prediction**: rexctl's real pipeline (coalesce, deduplicate, push)
//!   is run on copies of the checkpoints (hard links when possible) in a
//!   scratch directory, batch by batch, and the achieved compression ratio
//!   is reported, with the controller's L2 interval `chi = f(IC, CR)` for
//!   this workload (Table 1). Without `--batch`, the batch size is the
//!   controller's `[chi]`, found by iterating: from CR = 2 (the controller's
//!   value before any L2 checkpoint), push, recompute `[chi]` from the CR
//!   achieved, and again until it stops changing (at most three runs).
//!
//! Run it on a capture directory before pushing from it: `push-l2` deletes
//! the IC files it covers.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::control::controller::{IntervalTable, chi_int};
use crate::error::{Error, IoContext, Result};
use crate::format::ic::{IcFile, IcMeta};
use crate::l1::L1Dir;
use crate::l1::coalesce::CList;
use crate::l2::push::{Job, PushOptions, push_l2};
use crate::store::DirStore;

/// How to analyze.
#[derive(Clone, Debug)]
pub struct AnalyzeOptions {
    /// Batch size for Fig. 1 and the pipeline (default: the controller's).
    pub batch: Option<u64>,
    /// Pattern size for Fig. 2 and the pipeline.
    pub pattern_size: u32,
    /// Run the real pipeline for the compression ratio (else CR is assumed
    /// to be 2, the controller's default, and no bytes are written).
    pub pipeline: bool,
    /// Scratch directory for the pipeline (default: a hidden directory in
    /// the L1 directory, where the IC files are hard links, else the
    /// system's temporary directory).
    pub work: Option<PathBuf>,
    /// The controller's interval table.
    pub table: IntervalTable,
}

impl Default for AnalyzeOptions {
    fn default() -> Self {
        AnalyzeOptions {
            batch: None,
            pattern_size: 32,
            pipeline: true,
            work: None,
            table: IntervalTable::default(),
        }
    }
}

/// Fig. 1 at one position of the batch.
#[derive(Clone, Debug, Serialize)]
pub struct Fig1Point {
    /// Position `j` of the incremental in its batch (from 1).
    pub j: u64,
    /// Batches that have a `j`-th incremental.
    pub samples: u64,
    /// Mean share of its pages carried by an earlier incremental of the
    /// batch.
    pub mean: f64,
    /// Smallest share.
    pub min: f64,
    /// Largest share.
    pub max: f64,
}

/// Fig. 1: re-dirtied pages within a batch.
#[derive(Clone, Debug, Serialize)]
pub struct Fig1 {
    /// Batch size.
    pub batch: u64,
    /// Batches (the last may be shorter).
    pub batches: u64,
    /// One point per position.
    pub by_position: Vec<Fig1Point>,
    /// Page copies of the batches.
    pub pages_carried: u64,
    /// Of them, copies coalescing skips (earlier copies, dropped pages).
    pub pages_skipped: u64,
    /// `pages_skipped / pages_carried`.
    pub skipped_share: f64,
}

/// Fig. 2 for one batch size.
#[derive(Clone, Debug, Serialize)]
pub struct Fig2 {
    /// Batch size (ICB).
    pub batch: u64,
    /// L2 checkpoints compared with their predecessor.
    pub l2_checkpoints: u64,
    /// Rewritten pages (written by a batch, live at the previous L2
    /// checkpoint).
    pub rewritten_pages: u64,
    /// Their patterns.
    pub patterns: u64,
    /// Patterns found anywhere in the page's previous L2 version.
    pub repeated: u64,
    /// `repeated / patterns`.
    pub share: f64,
    /// Share found at the same offset.
    pub same_offset_share: f64,
    /// The share per L2 checkpoint, in order.
    pub per_checkpoint: Vec<f64>,
}

/// One incremental of Fig. 3.
#[derive(Clone, Debug, Serialize)]
pub struct IcRatio {
    /// Its seq.
    pub seq: u64,
    /// Its page data over the image size at that checkpoint.
    pub ratio: f64,
}

/// Fig. 3: incremental size over full size.
#[derive(Clone, Debug, Serialize)]
pub struct Fig3 {
    /// One entry per incremental.
    pub ratios: Vec<IcRatio>,
    /// Mean ratio.
    pub mean: f64,
    /// Standard deviation.
    pub stddev: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// The paper's variance: standard deviation over mean.
    pub variation: f64,
}

/// What REX would do with this workload.
#[derive(Clone, Debug, Serialize)]
pub struct Predicted {
    /// `pipeline`: measured by pushing the checkpoints; `assumed`: CR 2.
    pub source: &'static str,
    /// The batch size of the pipeline run.
    pub batch: u64,
    /// The compression ratio the controller would use: that of the Δ
    /// generations, else of the full one.
    pub compression_ratio: f64,
    /// Of the full generations (FULL checkpoints alone).
    pub full_compression_ratio: Option<f64>,
    /// Of the Δ generations (bytes in over bytes out).
    pub delta_compression_ratio: Option<f64>,
    /// Bytes of IC files pushed.
    pub bytes_in: u64,
    /// Bytes of L2 files written.
    pub bytes_out: u64,
    /// Generations pushed.
    pub generations: u64,
    /// Seconds spent coalescing and deduplicating.
    pub seconds: f64,
    /// Mean incremental size over full size (Fig. 3's mean).
    pub ic: f64,
    /// `chi = f(IC, CR)`, interpolated in the interval table.
    pub chi: f64,
    /// `[chi]`: L1 checkpoints per L2 checkpoint.
    pub chi_int: u64,
    /// Batch sizes tried while converging on `[chi]`.
    pub batches_tried: Vec<u64>,
}

/// The whole analysis.
#[derive(Clone, Debug, Serialize)]
pub struct Analysis {
    /// The L1 directory.
    #[serde(serialize_with = "crate::format::json_path::path")]
    pub l1: PathBuf,
    /// Page size.
    pub page_size: u32,
    /// Pattern size.
    pub pattern_size: u32,
    /// Checkpoints analyzed.
    pub checkpoints: u64,
    /// Chains (FULL checkpoints).
    pub chains: u64,
    /// Live pages at the first checkpoint.
    pub first_full_pages: u64,
    /// Live pages at the last checkpoint.
    pub last_live_pages: u64,
    /// Bytes of the IC files.
    pub bytes: u64,
    /// The batch size of Fig. 1 and of the prediction.
    pub batch: u64,
    /// Where it came from: `option` or `controller`.
    pub batch_source: &'static str,
    /// Fig. 1.
    pub fig1: Fig1,
    /// Fig. 2 for batch sizes 2 and 4.
    pub fig2: Vec<Fig2>,
    /// Fig. 3.
    pub fig3: Fig3,
    /// The prediction.
    pub predicted: Predicted,
}

/// A chain: a FULL file and the incrementals after it (indexes into the
/// file list).
struct Chain {
    full: usize,
    incs: Vec<usize>,
}

fn chains_of(files: &[IcMeta]) -> Vec<Chain> {
    let mut out: Vec<Chain> = Vec::new();
    for (i, m) in files.iter().enumerate() {
        if m.is_full() {
            out.push(Chain {
                full: i,
                incs: Vec::new(),
            });
        } else if let Some(c) = out.last_mut() {
            c.incs.push(i);
        }
    }
    out
}

/// The phases of [`analyze_with_progress`], in order.
pub const PHASES: [&str; 6] = [
    "scanning",
    "fig. 3",
    "fig. 2 B=2",
    "fig. 2 B=4",
    "pipeline",
    "fig. 1",
];

/// Analyzes the L1 directory `l1`.
pub fn analyze(l1: &Path, opts: &AnalyzeOptions) -> Result<Analysis> {
    analyze_with_progress(l1, opts, &mut |_| {})
}

/// As [`analyze`], calling `phase(i)` as phase `i` of [`PHASES`] starts
/// (the pipeline, the long one, even with `pipeline` off).
pub fn analyze_with_progress(
    l1: &Path,
    opts: &AnalyzeOptions,
    phase: &mut dyn FnMut(usize),
) -> Result<Analysis> {
    phase(0);
    let dir = L1Dir::scan(l1)?;
    let files = dir.files;
    if files.is_empty() {
        // Exit 3 as `compare`'s (and the man pages') "no checkpoint".
        return Err(Error::chain(
            l1,
            "no checkpoint to analyze (a chain starts with a FULL checkpoint; push-l2 removes the files it pushed)",
        ));
    }
    let ps = files[0].header.page_size;
    if opts.pattern_size < 16 || !opts.pattern_size.is_power_of_two() || opts.pattern_size > ps {
        return Err(Error::Invalid(format!(
            "--pattern-size {}: must be a power of two from 16 to the page size {ps}",
            opts.pattern_size
        )));
    }
    if opts.batch == Some(0) {
        return Err(Error::Invalid("--batch must be at least 1".into()));
    }
    let chains = chains_of(&files);
    phase(1);
    let fig3 = fig3(&files);
    let opened = files
        .iter()
        .map(|m| IcFile::open(&m.path))
        .collect::<Result<Vec<_>>>()?;
    let fig2 = [2u64, 4]
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            phase(2 + i);
            fig2(&files, &opened, &chains, b, opts.pattern_size as usize)
        })
        .collect::<Result<Vec<_>>>()?;
    drop(opened);
    phase(4);
    let predicted = predict(l1, &files, &chains, fig3.mean, opts)?;
    let (batch, batch_source) = match opts.batch {
        Some(b) => (b, "option"),
        None => (predicted.batch, "controller"),
    };
    phase(5);
    let fig1 = fig1(&files, &chains, batch)?;
    let mut live = BTreeSet::new();
    let mut first_full_pages = 0;
    for (i, m) in files.iter().enumerate() {
        apply_meta(&mut live, m);
        if i == 0 {
            first_full_pages = live.len() as u64;
        }
    }
    Ok(Analysis {
        l1: l1.to_path_buf(),
        page_size: ps,
        pattern_size: opts.pattern_size,
        checkpoints: files.len() as u64,
        chains: chains.len() as u64,
        first_full_pages,
        last_live_pages: live.len() as u64,
        bytes: files.iter().map(|m| m.layout.file_len).sum(),
        batch,
        batch_source,
        fig1,
        fig2,
        fig3,
        predicted,
    })
}

fn apply_meta(live: &mut BTreeSet<u64>, m: &IcMeta) {
    if m.is_full() {
        live.clear();
    }
    for d in &m.drops {
        let gone: Vec<u64> = live.range(d.first..d.end()).copied().collect();
        for p in gone {
            live.remove(&p);
        }
    }
    live.extend(m.pages.iter().copied());
}

fn batches(c: &Chain, b: u64) -> impl Iterator<Item = &[usize]> {
    c.incs.chunks(b.max(1) as usize)
}

fn fig1(files: &[IcMeta], chains: &[Chain], b: u64) -> Result<Fig1> {
    let mut sums: Vec<(u64, f64, f64, f64)> = vec![(0, 0.0, f64::INFINITY, 0.0); b as usize];
    let (mut carried, mut skipped, mut n) = (0u64, 0u64, 0u64);
    for c in chains {
        for batch in batches(c, b) {
            n += 1;
            let mut seen: HashSet<u64> = HashSet::new();
            for (j, &i) in batch.iter().enumerate() {
                let m = &files[i];
                if j > 0 {
                    let share = if m.pages.is_empty() {
                        0.0
                    } else {
                        m.pages.iter().filter(|p| seen.contains(p)).count() as f64
                            / m.pages.len() as f64
                    };
                    let s = &mut sums[j];
                    s.0 += 1;
                    s.1 += share;
                    s.2 = s.2.min(share);
                    s.3 = s.3.max(share);
                }
                seen.extend(m.pages.iter().copied());
            }
            let metas: Vec<IcMeta> = batch.iter().map(|&i| files[i].clone()).collect();
            let cl = CList::build(&metas)?;
            carried += cl.stats.pages_carried;
            skipped += cl.stats.pages_skipped;
        }
    }
    let by_position = sums
        .iter()
        .enumerate()
        .map(|(j, s)| Fig1Point {
            j: j as u64 + 1,
            samples: if j == 0 { n } else { s.0 },
            mean: if s.0 > 0 { s.1 / s.0 as f64 } else { 0.0 },
            min: if s.0 > 0 { s.2 } else { 0.0 },
            max: s.3,
        })
        .filter(|p| p.samples > 0)
        .collect();
    Ok(Fig1 {
        batch: b,
        batches: n,
        by_position,
        pages_carried: carried,
        pages_skipped: skipped,
        skipped_share: if carried > 0 {
            skipped as f64 / carried as f64
        } else {
            0.0
        },
    })
}

fn fig2(
    files: &[IcMeta],
    opened: &[IcFile],
    chains: &[Chain],
    b: u64,
    pattern: usize,
) -> Result<Fig2> {
    let mut out = Fig2 {
        batch: b,
        l2_checkpoints: 0,
        rewritten_pages: 0,
        patterns: 0,
        repeated: 0,
        share: 0.0,
        same_offset_share: 0.0,
        per_checkpoint: Vec::new(),
    };
    let mut same = 0u64;
    let mut old_patterns: Vec<&[u8]> = Vec::new();
    for c in chains {
        // The image at the previous L2 checkpoint: page -> (file, pp).
        let mut image: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
        for (pp, &p) in files[c.full].pages.iter().enumerate() {
            image.insert(p, (c.full, pp));
        }
        for batch in batches(c, b) {
            let metas: Vec<IcMeta> = batch.iter().map(|&i| files[i].clone()).collect();
            let cl = CList::build(&metas)?;
            let (mut pats, mut rep) = (0u64, 0u64);
            for e in &cl.entries {
                let Some(&(of, opp)) = image.get(&e.page) else {
                    continue;
                };
                let new = opened[batch[e.chk as usize]].page(e.pp as usize)?;
                let old = opened[of].page(opp)?;
                out.rewritten_pages += 1;
                old_patterns.clear();
                old_patterns.extend(old.chunks_exact(pattern));
                old_patterns.sort_unstable();
                for (k, np) in new.chunks_exact(pattern).enumerate() {
                    pats += 1;
                    if old_patterns.binary_search(&np).is_ok() {
                        rep += 1;
                    }
                    if &old[k * pattern..(k + 1) * pattern] == np {
                        same += 1;
                    }
                }
            }
            out.patterns += pats;
            out.repeated += rep;
            out.l2_checkpoints += 1;
            out.per_checkpoint.push(if pats > 0 {
                rep as f64 / pats as f64
            } else {
                0.0
            });
            for d in &cl.drops {
                let gone: Vec<u64> = image.range(d.first..d.end()).map(|(p, _)| *p).collect();
                for p in gone {
                    image.remove(&p);
                }
            }
            for e in &cl.entries {
                image.insert(e.page, (batch[e.chk as usize], e.pp as usize));
            }
        }
    }
    if out.patterns > 0 {
        out.share = out.repeated as f64 / out.patterns as f64;
        out.same_offset_share = same as f64 / out.patterns as f64;
    }
    Ok(out)
}

fn fig3(files: &[IcMeta]) -> Fig3 {
    let mut live = BTreeSet::new();
    let mut ratios = Vec::new();
    for m in files {
        apply_meta(&mut live, m);
        if !m.is_full() {
            let full = live.len() as f64 * m.page_size() as f64;
            ratios.push(IcRatio {
                seq: m.seq(),
                ratio: if full > 0.0 {
                    m.data_bytes() as f64 / full
                } else {
                    0.0
                },
            });
        }
    }
    let n = ratios.len() as f64;
    let (mean, stddev, min, max) = if ratios.is_empty() {
        (0.0, 0.0, 0.0, 0.0)
    } else {
        let mean = ratios.iter().map(|r| r.ratio).sum::<f64>() / n;
        let var = ratios.iter().map(|r| (r.ratio - mean).powi(2)).sum::<f64>() / n;
        (
            mean,
            var.sqrt(),
            ratios.iter().map(|r| r.ratio).fold(f64::INFINITY, f64::min),
            ratios.iter().map(|r| r.ratio).fold(0.0, f64::max),
        )
    };
    Fig3 {
        ratios,
        mean,
        stddev,
        min,
        max,
        variation: if mean > 0.0 { stddev / mean } else { 0.0 },
    }
}

/// A scratch directory removed when dropped, and by the CLI's signal
/// sweep when a signal ends the process (helper-95: an interrupted analyze
/// left its hidden directory in L1, tens of MB of hard links and a pushed
/// chain).
struct Scratch(
    PathBuf,
    #[allow(dead_code)] Option<crate::durable::RemovedOnSignal>,
);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The scratch directory of the pipeline runs: in `work` when given, else
/// in the L1 directory itself (hidden, so no L1 reader sees it; on the same
/// file system, so the IC files are hard links that cost no space), else in
/// the system's temporary directory.
fn scratch_root(work: Option<&Path>, l1: &Path) -> Result<Scratch> {
    let name = format!(
        ".rexctl-analyze-{}-{}",
        std::process::id(),
        crate::format::ic::now_ns()
    );
    let dir = match work {
        Some(w) => w.join(&name),
        None => l1.join(&name),
    };
    // Listed before it is made: a signal right after the directory
    // appears removes it too (a test sending one as soon as it appeared
    // found it left).
    let guard = crate::durable::RemovedOnSignal::new(&dir);
    match std::fs::create_dir(&dir) {
        Ok(()) => Ok(Scratch(dir, Some(guard))),
        Err(_) if work.is_none() => {
            drop(guard);
            let dir = std::env::temp_dir().join(&name);
            let guard = crate::durable::RemovedOnSignal::new(&dir);
            std::fs::create_dir(&dir).ctx(&dir, "create directory")?;
            Ok(Scratch(dir, Some(guard)))
        }
        Err(e) => Err(Error::io(&dir, "create directory", e)),
    }
}

/// One pipeline run: the compression it achieved.
struct PipelineRun {
    full: (u64, u64),
    delta: (u64, u64),
    generations: u64,
    seconds: f64,
}

fn run_pipeline(
    work: &Path,
    files: &[IcMeta],
    chains: &[Chain],
    b: u64,
    pattern: u32,
) -> Result<PipelineRun> {
    // Inside the listed root: removed with it.
    let scratch = Scratch(work.join(format!("run-b{b}")), None);
    let (l1, l2) = (scratch.0.join("l1"), scratch.0.join("l2"));
    std::fs::create_dir_all(&l1).ctx(&l1, "create directory")?;
    let job = Job::open(&l1, Box::new(DirStore::create(&l2)?))?;
    let opts = PushOptions {
        pattern_size: pattern,
        keep_chains_l1: usize::MAX,
        keep_chains_l2: usize::MAX,
        ..Default::default()
    };
    let mut run = PipelineRun {
        full: (0, 0),
        delta: (0, 0),
        generations: 0,
        seconds: 0.0,
    };
    for c in chains {
        let mut groups: Vec<Vec<usize>> = vec![vec![c.full]];
        groups.extend(batches(c, b).map(|s| s.to_vec()));
        for g in groups {
            for &i in &g {
                let src = &files[i].path;
                let dst = l1.join(src.file_name().unwrap_or_default());
                if std::fs::hard_link(src, &dst).is_err() {
                    std::fs::copy(src, &dst).ctx(&dst, "copy")?;
                }
            }
            let r = push_l2(&job, &opts)?;
            let Some(m) = r.manifest else { continue };
            run.generations += 1;
            run.seconds += m.timings.coalesce_s + m.timings.dedup_s;
            let acc = if m.parent.is_none() {
                &mut run.full
            } else {
                &mut run.delta
            };
            acc.0 += m.bytes_in;
            acc.1 += m.bytes_out;
        }
    }
    Ok(run)
}

fn ratio(x: (u64, u64)) -> Option<f64> {
    (x.1 > 0).then(|| x.0 as f64 / x.1 as f64)
}

fn predict(
    l1: &Path,
    files: &[IcMeta],
    chains: &[Chain],
    ic: f64,
    opts: &AnalyzeOptions,
) -> Result<Predicted> {
    let ic_for_table = if ic > 0.0 { ic } else { 1.0 };
    let t = &opts.table;
    if !opts.pipeline {
        let cr = 2.0;
        let chi = t.chi(ic_for_table, cr);
        let b = opts.batch.unwrap_or_else(|| chi_int(chi));
        return Ok(Predicted {
            source: "assumed",
            batch: b,
            compression_ratio: cr,
            full_compression_ratio: None,
            delta_compression_ratio: None,
            bytes_in: 0,
            bytes_out: 0,
            generations: 0,
            seconds: 0.0,
            ic,
            chi,
            chi_int: chi_int(chi),
            batches_tried: vec![b],
        });
    }
    let work = scratch_root(opts.work.as_deref(), l1)?;
    let mut b = opts
        .batch
        .unwrap_or_else(|| chi_int(t.chi(ic_for_table, 2.0)));
    let mut tried = Vec::new();
    loop {
        tried.push(b);
        let run = run_pipeline(&work.0, files, chains, b, opts.pattern_size)?;
        let full = ratio(run.full);
        let delta = ratio(run.delta);
        let cr = delta.or(full).unwrap_or(1.0);
        let chi = t.chi(ic_for_table, cr);
        let next = chi_int(chi);
        if opts.batch.is_some() || next == b || tried.contains(&next) || tried.len() >= 3 {
            return Ok(Predicted {
                source: "pipeline",
                batch: b,
                compression_ratio: cr,
                full_compression_ratio: full,
                delta_compression_ratio: delta,
                bytes_in: run.full.0 + run.delta.0,
                bytes_out: run.full.1 + run.delta.1,
                generations: run.generations,
                seconds: run.seconds,
                ic,
                chi,
                chi_int: next,
                batches_tried: tried,
            });
        }
        b = next;
    }
}

/// Draws the analysis as a four-panel SVG chart.
pub fn svg(a: &Analysis) -> Result<String> {
    use plotters::prelude::*;
    let mut out = String::new();
    let draw_err = |e: &dyn std::fmt::Display| Error::Invalid(format!("drawing the chart: {e}"));
    {
        let root = SVGBackend::with_string(&mut out, (1100, 800)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| draw_err(&e))?;
        let title = format!(
            "rexctl analyze: {} ({} checkpoints, {} pages of {} bytes)",
            a.l1.display(),
            a.checkpoints,
            a.last_live_pages,
            a.page_size
        );
        let root = root
            .titled(&title, ("sans-serif", 20))
            .map_err(|e| draw_err(&e))?;
        let panels = root.split_evenly((2, 2));
        let blue = RGBColor(52, 101, 164);
        let orange = RGBColor(245, 121, 0);

        // Fig. 1: bars per position j >= 2, whiskers from min to max.
        let pts: Vec<&Fig1Point> = a.fig1.by_position.iter().filter(|p| p.j >= 2).collect();
        bars(
            &panels[0],
            &format!(
                "Fig. 1: pages of the j-th incremental dirty earlier in its batch (B = {})",
                a.fig1.batch
            ),
            "share of pages, %",
            &pts.iter()
                .map(|p| format!("j = {}", p.j))
                .collect::<Vec<_>>(),
            &[Bars {
                legend: None,
                color: blue,
                values: pts.iter().map(|p| p.mean * 100.0).collect(),
                whiskers: Some(pts.iter().map(|p| (p.min * 100.0, p.max * 100.0)).collect()),
            }],
        )?;
        // Fig. 2: ICB = 2 and 4, patterns anywhere and at the same offset.
        bars(
            &panels[1],
            "Fig. 2: 32-byte patterns of rewritten pages repeated from the previous L2 version",
            "share of patterns, %",
            &a.fig2
                .iter()
                .map(|f| format!("ICB = {}", f.batch))
                .collect::<Vec<_>>(),
            &[
                Bars {
                    legend: Some("anywhere in the page"),
                    color: blue,
                    values: a.fig2.iter().map(|f| f.share * 100.0).collect(),
                    whiskers: None,
                },
                Bars {
                    legend: Some("at the same offset"),
                    color: orange,
                    values: a.fig2.iter().map(|f| f.same_offset_share * 100.0).collect(),
                    whiskers: None,
                },
            ],
        )?;

        // Fig. 3: the ratio per incremental, its mean and one stddev.
        {
            let r = &a.fig3.ratios;
            let (x0, x1) = match (r.first(), r.last()) {
                (Some(f), Some(l)) => (f.seq as f64 - 0.5, l.seq as f64 + 0.5),
                _ => (0.0, 1.0),
            };
            let ymax = (a.fig3.max * 100.0 * 1.15).clamp(5.0, 100.0);
            let mut c = ChartBuilder::on(&panels[2])
                .caption(
                    format!(
                        "Fig. 3: incremental size / full size (mean {:.1} %, sd {:.1} %)",
                        a.fig3.mean * 100.0,
                        a.fig3.stddev * 100.0
                    ),
                    ("sans-serif", 14),
                )
                .margin(12)
                .x_label_area_size(36)
                .y_label_area_size(48)
                .build_cartesian_2d(x0..x1, 0f64..ymax)
                .map_err(|e| draw_err(&e))?;
            c.configure_mesh()
                .x_desc("checkpoint seq")
                .y_desc("% of the full size")
                .x_label_formatter(&|x| format!("{x:.0}"))
                .draw()
                .map_err(|e| draw_err(&e))?;
            let (m, sd) = (a.fig3.mean * 100.0, a.fig3.stddev * 100.0);
            c.draw_series(std::iter::once(Rectangle::new(
                [(x0, (m - sd).max(0.0)), (x1, (m + sd).min(ymax))],
                blue.mix(0.12).filled(),
            )))
            .map_err(|e| draw_err(&e))?;
            c.draw_series(LineSeries::new(
                vec![(x0, m), (x1, m)],
                orange.stroke_width(2),
            ))
            .map_err(|e| draw_err(&e))?;
            c.draw_series(LineSeries::new(
                r.iter().map(|p| (p.seq as f64, p.ratio * 100.0)),
                blue.stroke_width(2),
            ))
            .map_err(|e| draw_err(&e))?;
            c.draw_series(
                r.iter()
                    .map(|p| Circle::new((p.seq as f64, p.ratio * 100.0), 3, blue.filled())),
            )
            .map_err(|e| draw_err(&e))?;
        }

        // The prediction, as text.
        {
            let p = &a.predicted;
            let style = ("sans-serif", 16).into_font().color(&BLACK);
            let lines = [
                "What REX would buy on this workload".to_string(),
                String::new(),
                format!(
                    "coalescing (B = {}): {:.1} % of page copies skipped",
                    a.fig1.batch,
                    a.fig1.skipped_share * 100.0
                ),
                match a.fig2.iter().find(|f| f.batch == 4).or(a.fig2.first()) {
                    Some(f) => format!(
                        "dedup: {:.1} % of rewritten patterns repeat (ICB = {})",
                        f.share * 100.0,
                        f.batch
                    ),
                    None => String::new(),
                },
                format!(
                    "incrementals: {:.1} % of the full size on average",
                    a.fig3.mean * 100.0
                ),
                format!(
                    "compression ratio: {:.2} ({})",
                    p.compression_ratio,
                    if p.source == "pipeline" {
                        "measured by the pipeline"
                    } else {
                        "assumed"
                    }
                ),
                format!(
                    "L2 interval: chi = {:.2}, [chi] = {} L1 checkpoints",
                    p.chi, p.chi_int
                ),
            ];
            for (i, l) in lines.iter().enumerate() {
                panels[3]
                    .draw_text(l, &style, (30, 40 + 30 * i as i32))
                    .map_err(|e| draw_err(&e))?;
            }
        }
        root.present().map_err(|e| draw_err(&e))?;
    }
    Ok(out)
}

/// One series of a bar chart.
struct Bars<'a> {
    legend: Option<&'a str>,
    color: plotters::style::RGBColor,
    values: Vec<f64>,
    whiskers: Option<Vec<(f64, f64)>>,
}

/// A grouped bar chart of percentages on `area`: one group per label, one
/// bar per series, each bar labelled with its value.
fn bars<DB: plotters::prelude::DrawingBackend>(
    area: &plotters::prelude::DrawingArea<DB, plotters::coord::Shift>,
    caption: &str,
    y_desc: &str,
    labels: &[String],
    series: &[Bars<'_>],
) -> Result<()> {
    use plotters::prelude::*;
    let draw_err = |e: &dyn std::fmt::Display| Error::Invalid(format!("drawing the chart: {e}"));
    let n = labels.len().max(1);
    let top = series
        .iter()
        .flat_map(|s| {
            s.values
                .iter()
                .copied()
                .chain(s.whiskers.iter().flatten().map(|w| w.1))
        })
        .fold(0.0f64, f64::max);
    let ymax = (top * 1.25).clamp(10.0, 105.0);
    let mut c = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 14))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(48)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0f64..ymax)
        .map_err(|e| draw_err(&e))?;
    c.configure_mesh()
        .disable_x_mesh()
        .x_labels(n + 1)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-9 && i >= 0.0 && (i as usize) < labels.len() {
                labels[i as usize].clone()
            } else {
                String::new()
            }
        })
        .y_desc(y_desc)
        .draw()
        .map_err(|e| draw_err(&e))?;
    let k = series.len().max(1) as f64;
    let width = 0.7 / k;
    let font = TextStyle::from(("sans-serif", 12).into_font()).pos(
        plotters::style::text_anchor::Pos::new(
            plotters::style::text_anchor::HPos::Center,
            plotters::style::text_anchor::VPos::Bottom,
        ),
    );
    for (si, s) in series.iter().enumerate() {
        let left = |i: usize| i as f64 - 0.35 + width * si as f64;
        let color = s.color;
        let drawn = c
            .draw_series(s.values.iter().enumerate().map(|(i, v)| {
                Rectangle::new(
                    [(left(i), 0.0), (left(i) + width * 0.92, *v)],
                    color.filled(),
                )
            }))
            .map_err(|e| draw_err(&e))?;
        if let Some(l) = s.legend {
            drawn.label(l).legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
            });
        }
        if let Some(w) = &s.whiskers {
            c.draw_series(w.iter().enumerate().map(|(i, (lo, hi))| {
                let x = left(i) + width * 0.46;
                PathElement::new(vec![(x, *lo), (x, *hi)], BLACK.stroke_width(1))
            }))
            .map_err(|e| draw_err(&e))?;
        }
        c.draw_series(s.values.iter().enumerate().map(|(i, v)| {
            let x = left(i) + width * 0.46;
            Text::new(format!("{v:.1} %"), (x, v + ymax * 0.015), font.clone())
        }))
        .map_err(|e| draw_err(&e))?;
    }
    if series.iter().any(|s| s.legend.is_some()) {
        c.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(RGBColor(136, 138, 133))
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(|e| draw_err(&e))?;
    }
    Ok(())
}

/// Writes [`svg`] to `path` atomically.
pub fn write_svg(a: &Analysis, path: &Path) -> Result<()> {
    crate::durable::write_file(path, svg(a)?.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ic::{DropRange, write_ic};
    use crate::l1::ic_file_name;

    const PS: usize = 512;

    fn fill(tag: u8) -> Vec<u8> {
        (0..PS).map(|i| tag.wrapping_add((i / 32) as u8)).collect()
    }

    /// FULL of pages 0..8; then incrementals with known overlaps.
    fn chain(dir: &Path) {
        let p = |tag: u8| fill(tag);
        let f: Vec<(u64, Vec<u8>)> = (0..8).map(|i| (i, p(i as u8 * 16))).collect();
        let refs: Vec<(u64, &[u8])> = f.iter().map(|(n, d)| (*n, d.as_slice())).collect();
        write_ic(dir.join(ic_file_name(0)), PS as u32, 0, true, 0, &refs, &[]).unwrap();
        // seq 1: pages 0, 1 (page 0: half its patterns kept)
        let mut half = p(0);
        half[PS / 2..].fill(0xEE);
        type Pages = Vec<(u64, Vec<u8>)>;
        let incs: Vec<(Pages, Vec<DropRange>)> = vec![
            (vec![(0, half), (1, vec![0xAB; PS])], vec![]),
            // seq 2: pages 1, 2 (1 re-dirtied), drop 7
            (
                vec![(1, vec![0xAC; PS]), (2, vec![0xAD; PS])],
                vec![DropRange { first: 7, count: 1 }],
            ),
            // seq 3: page 3 and 9 (new)
            (vec![(3, p(48)), (9, vec![1; PS])], vec![]),
            // seq 4: pages 3, 9
            (vec![(3, p(49)), (9, vec![2; PS])], vec![]),
        ];
        for (k, (pages, drops)) in incs.iter().enumerate() {
            let refs: Vec<(u64, &[u8])> = pages.iter().map(|(n, d)| (*n, d.as_slice())).collect();
            let seq = k as u64 + 1;
            write_ic(
                dir.join(ic_file_name(seq)),
                PS as u32,
                seq,
                false,
                0,
                &refs,
                drops,
            )
            .unwrap();
        }
    }

    #[test]
    fn figures_on_a_known_chain() {
        let d = tempfile::tempdir().unwrap();
        chain(d.path());
        let opts = AnalyzeOptions {
            batch: Some(2),
            work: Some(d.path().to_path_buf()),
            ..Default::default()
        };
        let a = analyze(d.path(), &opts).unwrap();
        assert_eq!((a.checkpoints, a.chains, a.batch), (5, 1, 2));
        // Fig. 1, B = 2: batches [1, 2] and [3, 4]. j = 2: 1 of 2 pages in
        // the first, 2 of 2 in the second.
        let j2 = &a.fig1.by_position[1];
        assert_eq!((j2.j, j2.samples), (2, 2));
        assert!(
            (j2.mean - 0.75).abs() < 1e-12 && j2.min == 0.5 && j2.max == 1.0,
            "{j2:?}"
        );
        // 8 copies carried, page 1 and pages 3, 9 re-dirtied: 3 skipped.
        assert_eq!((a.fig1.pages_carried, a.fig1.pages_skipped), (8, 3));
        // Fig. 2, ICB = 2: batch 1 rewrites 0, 1, 2 (all in the FULL):
        // page 0 keeps 8 of 16 patterns, 1 and 2 none (0xAC.. never in the
        // old pages). Batch 2 rewrites 3 (9 is new): p(49) shares 15 of 16
        // patterns with p(48), shifted by one (none at the same offset).
        let f2 = &a.fig2[0];
        assert_eq!(f2.batch, 2);
        assert_eq!(f2.rewritten_pages, 4);
        assert_eq!(f2.patterns, 64);
        assert_eq!(f2.repeated, 8 + 15);
        assert_eq!(f2.per_checkpoint.len(), 2);
        assert!((f2.same_offset_share - 8.0 / 64.0).abs() < 1e-12);
        // ICB = 4: one batch, C-List pages 0, 1, 2, 3 rewritten (9 new).
        assert_eq!(a.fig2[1].rewritten_pages, 4);
        // Fig. 3: 2/8, 2/7, 2/8, 2/8.
        let r: Vec<f64> = a.fig3.ratios.iter().map(|r| r.ratio).collect();
        assert_eq!(r, vec![0.25, 2.0 / 7.0, 0.25, 0.25]);
        assert!(a.fig3.max > a.fig3.min);
        // The pipeline ran and the scratch directory is gone.
        assert_eq!(a.predicted.source, "pipeline");
        assert_eq!(a.predicted.generations, 3);
        assert!(a.predicted.compression_ratio > 0.0);
        assert!((4..=9).contains(&a.predicted.chi_int));
        let left: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("rexctl-analyze")
            })
            .collect();
        assert!(left.is_empty());
        // The IC files were not touched.
        assert_eq!(L1Dir::scan(d.path()).unwrap().files.len(), 5);
        let s = svg(&a).unwrap();
        assert!(
            s.starts_with("<svg")
                && s.contains("Fig. 1")
                && s.contains("Fig. 2")
                && s.contains("Fig. 3")
        );
    }

    #[test]
    fn the_controller_picks_the_batch_without_an_option() {
        let d = tempfile::tempdir().unwrap();
        chain(d.path());
        let opts = AnalyzeOptions {
            work: Some(d.path().to_path_buf()),
            ..Default::default()
        };
        let a = analyze(d.path(), &opts).unwrap();
        assert_eq!(a.batch_source, "controller");
        assert_eq!(a.batch, a.predicted.batch);
        assert!(!a.predicted.batches_tried.is_empty() && a.predicted.batches_tried.len() <= 3);
        let quick = analyze(
            d.path(),
            &AnalyzeOptions {
                pipeline: false,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(quick.predicted.source, "assumed");
        assert_eq!(quick.predicted.compression_ratio, 2.0);
    }

    #[test]
    fn bad_requests_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let e = analyze(d.path(), &AnalyzeOptions::default()).unwrap_err();
        assert!(e.to_string().contains("no checkpoint"), "{e}");
        chain(d.path());
        for o in [
            AnalyzeOptions {
                batch: Some(0),
                ..Default::default()
            },
            AnalyzeOptions {
                pattern_size: 24,
                ..Default::default()
            },
            AnalyzeOptions {
                pattern_size: 1024,
                ..Default::default()
            },
        ] {
            assert!(analyze(d.path(), &o).is_err());
        }
    }
}
