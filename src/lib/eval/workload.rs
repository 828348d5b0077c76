//! A deterministic workload generator: a FULL checkpoint and a sequence of
//! incrementals that behave like the applications of the paper's §2.
//!
//! The generator keeps the true memory image in memory and mutates it one
//! checkpoint interval at a time, so tests can compare any restore against
//! [`Workload::image`]. What it models, each knob tied to a figure of the
//! paper:
//!
//! * **footprint** (`pages`), spread over a few regions at realistic page
//!   numbers; with `churn` regions grow, shrink and get unmapped (drop
//!   ranges), and freed addresses are reused later (a page dropped and
//!   written again);
//! * **incremental size** as a share of the footprint (Fig. 3: 1 % to 90 %,
//!   about 55 % on average), drawn per interval from `inc_mean ± inc_spread`;
//! * **re-dirtying** (Fig. 1): a share `redirty` of each interval's dirty
//!   pages is drawn from the pages dirtied in the previous intervals;
//! * **pattern survival** (Fig. 2: about 40 %): when a page is rewritten,
//!   each of its 32-byte patterns survives with probability `survive`, in
//!   runs (writes are clustered, as real stores are);
//! * **zero pages** and zero patterns (freshly mapped memory);
//! * **compressibility** of new data: patterns drawn from a small dictionary
//!   (repeated structures: dedupable and compressible), structured words
//!   (pointers, counters: compressible, not dedupable), or random bytes
//!   (neither).
//!
//! Everything is derived from a ChaCha8 stream seeded by `--seed`, so a
//! profile and a seed always produce the same files, on every machine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::error::{Error, IoContext, Result};
use crate::format::ic::{ChainId, DropRange, IcExt, IcWriter, InstanceId};
use crate::l1::ic_file_name;

/// The granularity at which the generator mutates pages (the paper's
/// default pattern size); independent of the pattern size REX uses.
const GRAIN: usize = 32;

/// A named set of generator parameters.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Profile {
    /// Name used on the command line.
    pub name: &'static str,
    /// One line on what it models.
    pub description: &'static str,
    /// Page size in bytes.
    pub page_size: u32,
    /// Initial footprint in pages.
    pub pages: u64,
    /// Incremental checkpoints after the FULL one.
    pub checkpoints: u64,
    /// Mean incremental size, as a share of the footprint.
    pub inc_mean: f64,
    /// Half-width of the uniform spread around `inc_mean`.
    pub inc_spread: f64,
    /// Share of dirty pages drawn from recently dirtied pages.
    pub redirty: f64,
    /// Probability that a 32-byte pattern of a rewritten page survives.
    pub survive: f64,
    /// Share of new pages that are all zero.
    pub zero_pages: f64,
    /// Share of new patterns that are zero.
    pub zero_patterns: f64,
    /// Share of new patterns drawn from the dictionary.
    pub dict_share: f64,
    /// Share of the remaining new patterns that are random bytes (the rest
    /// are structured words).
    pub random_share: f64,
    /// Per-interval probability of a footprint change (grow, shrink, unmap).
    pub churn: f64,
}

const BASE: Profile = Profile {
    name: "balanced",
    description: "the paper's averages: incrementals ~55 % of the footprint, most pages re-dirtied, ~40 % of patterns survive, moderate compressibility",
    page_size: 4096,
    pages: 4096,
    checkpoints: 12,
    inc_mean: 0.55,
    inc_spread: 0.30,
    redirty: 0.80,
    survive: 0.40,
    zero_pages: 0.05,
    zero_patterns: 0.10,
    dict_share: 0.30,
    random_share: 0.40,
    churn: 0.25,
};

/// The built-in profiles.
pub fn profiles() -> Vec<Profile> {
    vec![
        BASE,
        Profile {
            name: "small-inc",
            description: "small incrementals (1-10 % of the footprint), hot pages rewritten in place, high compressibility (an iterative solver updating a few arrays)",
            inc_mean: 0.05,
            inc_spread: 0.04,
            redirty: 0.95,
            survive: 0.60,
            dict_share: 0.50,
            random_share: 0.15,
            churn: 0.10,
            ..BASE
        },
        Profile {
            name: "large-inc",
            description: "large incrementals (75-95 % of the footprint), low pattern survival, low compressibility (a streaming simulation rewriting its state each step)",
            inc_mean: 0.85,
            inc_spread: 0.10,
            redirty: 0.95,
            survive: 0.25,
            zero_patterns: 0.02,
            dict_share: 0.10,
            random_share: 0.75,
            churn: 0.10,
            ..BASE
        },
        Profile {
            name: "incompressible",
            description: "random new data and no surviving patterns: negligible compression, REX's worst case (encrypted or already compressed buffers)",
            inc_mean: 0.50,
            inc_spread: 0.20,
            redirty: 0.80,
            survive: 0.0,
            zero_pages: 0.0,
            zero_patterns: 0.0,
            dict_share: 0.0,
            random_share: 1.0,
            churn: 0.0,
            ..BASE
        },
        Profile {
            name: "churn",
            description: "a footprint that grows, shrinks and reuses freed addresses every interval (allocator-heavy code): many drop ranges",
            inc_mean: 0.30,
            inc_spread: 0.20,
            churn: 1.0,
            ..BASE
        },
        Profile {
            name: "sparse-zero",
            description: "large freshly mapped arrays filled slowly: many zero pages and zero patterns, high compression",
            inc_mean: 0.20,
            inc_spread: 0.15,
            zero_pages: 0.50,
            zero_patterns: 0.50,
            dict_share: 0.30,
            random_share: 0.20,
            churn: 0.20,
            ..BASE
        },
    ]
}

/// Refuses an image of `pages` pages of `ps` bytes larger than this
/// machine's physical memory, or than the process's address-space limit
/// (`ulimit -v`, common on login nodes: helper-95 saw the allocation fail
/// and abort): the generator holds the image (and the churn grows it), and
/// a count past the memory only ran until the kernel killed it.
fn fits_in_memory(pages: u64, ps: u32) -> Result<()> {
    let bytes = pages.saturating_mul(u64::from(ps));
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    if let Some(ram) = physical_memory()
        && bytes > ram
    {
        return Err(Error::Invalid(format!(
            "{pages} pages of {ps} bytes ({:.1} GiB): the generator holds the image in memory, \
             and this machine has {:.1} GiB",
            gib(bytes),
            gib(ram)
        )));
    }
    if let Some(limit) = address_space_limit()
        && bytes > limit
    {
        return Err(Error::Invalid(format!(
            "{pages} pages of {ps} bytes ({:.1} GiB): the generator holds the image in memory, \
             and this process may map {:.1} GiB (ulimit -v)",
            gib(bytes),
            gib(limit)
        )));
    }
    Ok(())
}

/// The process's address-space limit in bytes (RLIMIT_AS), when it has one.
fn address_space_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes the limit into `r`, a struct owned here.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut r) } == 0;
    (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

/// This machine's physical memory in bytes, when the system says.
fn physical_memory() -> Option<u64> {
    // SAFETY: sysconf reads a system constant; it takes no pointer and
    // touches no memory of ours.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages > 0 && size > 0).then(|| (pages as u64).saturating_mul(size as u64))
}

/// Looks a profile up by name.
pub fn profile(name: &str) -> Result<Profile> {
    profiles()
        .into_iter()
        .find(|p| p.name == name)
        .ok_or_else(|| {
            let names: Vec<_> = profiles().iter().map(|p| p.name).collect();
            Error::Invalid(format!(
                "unknown profile {name:?}; known profiles: {}",
                names.join(", ")
            ))
        })
}

/// A mapped region of the simulated address space.
#[derive(Clone, Debug)]
struct Region {
    base: u64,
    len: u64,
}

/// The contents of one generated checkpoint, before it is written.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    /// Sequence number.
    pub seq: u64,
    /// FULL checkpoint.
    pub full: bool,
    /// Carried pages, ascending.
    pub pages: Vec<u64>,
    /// Drop ranges.
    pub drops: Vec<DropRange>,
}

/// A simulated process whose memory the generator mutates.
pub struct Workload {
    profile: Profile,
    rng: ChaCha8Rng,
    image: BTreeMap<u64, Vec<u8>>,
    regions: Vec<Region>,
    freed: Vec<Region>,
    hot: Vec<u64>,
    dict: Vec<[u8; GRAIN]>,
    next_seq: u64,
    next_base: u64,
    /// The run's chain id (REX-IC version 2), derived from the seed so that
    /// generated runs are reproducible and tell apart.
    chain_id: ChainId,
    /// The instance id its files carry (one generator run is one process).
    instance: InstanceId,
}

impl Workload {
    /// A fresh process for `profile`, deterministic in `seed`.
    pub fn new(profile: Profile, seed: u64) -> Result<Workload> {
        let ps = profile.page_size;
        if !ps.is_power_of_two() || !(512..=1 << 20).contains(&ps) {
            return Err(Error::Invalid(format!(
                "page size {ps} is not a power of two in 512..=1048576"
            )));
        }
        if profile.pages == 0 {
            return Err(Error::Invalid("a workload needs at least one page".into()));
        }
        fits_in_memory(profile.pages, ps)?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let dict = (0..256)
            .map(|_| {
                let mut p = [0u8; GRAIN];
                rng.fill(&mut p[..]);
                p
            })
            .collect();
        let mut w = Workload {
            profile,
            rng,
            image: BTreeMap::new(),
            regions: Vec::new(),
            freed: Vec::new(),
            hot: Vec::new(),
            dict,
            next_seq: 0,
            // Heap-like addresses first (0x5555_5555_0000 / 4 KiB), as a
            // real process has; mappings go above.
            next_base: 0x5_5555_5555,
            chain_id: ChainId::from_seed(seed),
            instance: InstanceId::from_seed(seed),
        };
        // Three regions: a large heap, a medium mapping, a small stack-like.
        let total = w.profile.pages;
        let parts = [total / 2, total / 3, total - total / 2 - total / 3];
        for len in parts.into_iter().filter(|&l| l > 0) {
            let base = w.next_base;
            w.next_base += len + 1024 + w.rng.random_range(0..4096u64);
            w.map_region(base, len);
        }
        Ok(w)
    }

    /// The chain id its checkpoints carry.
    pub fn chain_id(&self) -> ChainId {
        self.chain_id
    }

    /// The profile driving this workload.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// The true memory image after the last checkpoint taken.
    pub fn image(&self) -> &BTreeMap<u64, Vec<u8>> {
        &self.image
    }

    /// The sequence number the next checkpoint will have.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    fn map_region(&mut self, base: u64, len: u64) {
        for p in base..base + len {
            let page = self.new_page();
            self.image.insert(p, page);
        }
        self.regions.push(Region { base, len });
    }

    fn new_page(&mut self) -> Vec<u8> {
        let mut page = vec![0u8; self.profile.page_size as usize];
        if !self.rng.random_bool(self.profile.zero_pages) {
            for chunk in page.chunks_exact_mut(GRAIN) {
                self.fill_pattern(chunk);
            }
        }
        page
    }

    fn fill_pattern(&mut self, out: &mut [u8]) {
        let p = &self.profile;
        let u: f64 = self.rng.random();
        if u < p.zero_patterns {
            out.fill(0);
        } else if u < p.zero_patterns + (1.0 - p.zero_patterns) * p.dict_share {
            // Skewed towards the first entries, as real repeated structures.
            let x: f64 = self.rng.random();
            let i = ((x * x) * self.dict.len() as f64) as usize;
            out.copy_from_slice(&self.dict[i.min(self.dict.len() - 1)]);
        } else if self.rng.random_bool(p.random_share) {
            self.rng.fill(out);
        } else {
            // Structured words: pointer-like and counter-like u64s.
            for w in out.chunks_exact_mut(8) {
                let v: u64 = if self.rng.random_bool(0.5) {
                    0x5555_5555_0000 + (self.rng.random_range(0..1u64 << 20) << 3)
                } else {
                    self.rng.random_range(0..1000)
                };
                w.copy_from_slice(&v.to_le_bytes());
            }
        }
    }

    /// Rewrites a page: each 32-byte pattern survives with probability
    /// `survive`, in runs of changed patterns.
    fn rewrite(&mut self, page_no: u64) {
        let mut page = self.image.remove(&page_no).expect("live page");
        let grains = page.len() / GRAIN;
        let survive = self.profile.survive;
        let mut g = 0;
        while g < grains {
            // Runs of 1..=8 patterns, kept or changed together.
            let run = self.rng.random_range(1..=8usize).min(grains - g);
            if !self.rng.random_bool(survive) {
                for k in g..g + run {
                    let (a, b) = (k * GRAIN, (k + 1) * GRAIN);
                    let mut tmp = [0u8; GRAIN];
                    self.fill_pattern(&mut tmp);
                    page[a..b].copy_from_slice(&tmp);
                }
            }
            g += run;
        }
        self.image.insert(page_no, page);
    }

    /// Mutates the image over one checkpoint interval and returns what the
    /// checkpoint must carry. The first call returns the FULL checkpoint.
    pub fn step(&mut self) -> Checkpoint {
        let seq = self.next_seq;
        self.next_seq += 1;
        if seq == 0 {
            return Checkpoint {
                seq,
                full: true,
                pages: self.image.keys().copied().collect(),
                drops: Vec::new(),
            };
        }
        let mut drops: Vec<DropRange> = Vec::new();
        let mut fresh: Vec<u64> = Vec::new();
        if self.rng.random_bool(self.profile.churn) {
            self.churn(&mut drops, &mut fresh);
        }
        // Dirty pages: a share re-dirtied from the hot set, the rest uniform.
        let live: Vec<u64> = self.image.keys().copied().collect();
        let p = &self.profile;
        let share =
            (p.inc_mean + self.rng.random_range(-1.0..=1.0) * p.inc_spread).clamp(0.005, 1.0);
        let want = ((live.len() as f64 * share).round() as usize).clamp(1, live.len().max(1));
        let mut dirty: Vec<u64> = Vec::with_capacity(want + fresh.len());
        let mut seen = std::collections::HashSet::with_capacity(want);
        let hot: Vec<u64> = self
            .hot
            .iter()
            .copied()
            .filter(|p| self.image.contains_key(p))
            .collect();
        let mut tries = 0;
        while dirty.len() < want && tries < want * 8 {
            tries += 1;
            let pick = if !hot.is_empty() && self.rng.random_bool(self.profile.redirty) {
                hot[self.rng.random_range(0..hot.len())]
            } else {
                live[self.rng.random_range(0..live.len())]
            };
            if seen.insert(pick) {
                dirty.push(pick);
            }
        }
        let fresh_set: std::collections::HashSet<u64> = fresh.iter().copied().collect();
        for &pg in &dirty {
            if !fresh_set.contains(&pg) {
                self.rewrite(pg);
            }
        }
        for &pg in &fresh {
            if seen.insert(pg) {
                dirty.push(pg);
            }
        }
        dirty.sort_unstable();
        // The hot set is what this interval dirtied, plus some of the older.
        let keep_old = self.hot.len().min(dirty.len() / 2);
        self.hot.truncate(keep_old);
        self.hot.extend_from_slice(&dirty);
        Checkpoint {
            seq,
            full: false,
            pages: dirty,
            drops,
        }
    }

    /// Footprint changes: shrink or unmap a region (drops), grow one or map
    /// a new one (fresh pages), reusing freed addresses.
    fn churn(&mut self, drops: &mut Vec<DropRange>, fresh: &mut Vec<u64>) {
        let target = self.profile.pages;
        let live = self.image.len() as u64;
        let shrink = self.rng.random_bool(if live > target { 0.7 } else { 0.4 });
        if shrink && self.regions.len() > 1 {
            let i = self.rng.random_range(0..self.regions.len());
            let r = self.regions[i].clone();
            let cut = if self.rng.random_bool(0.3) {
                r.len
            } else {
                self.rng.random_range(1..=r.len.div_ceil(4))
            };
            let first = r.base + r.len - cut;
            for pg in first..r.base + r.len {
                self.image.remove(&pg);
            }
            drops.push(DropRange { first, count: cut });
            if cut == r.len {
                self.regions.remove(i);
            } else {
                self.regions[i].len -= cut;
            }
            self.freed.push(Region {
                base: first,
                len: cut,
            });
        }
        let grow = self.rng.random_bool(if live < target { 0.8 } else { 0.5 });
        if grow {
            let len = self.rng.random_range(1..=(target / 8).max(1));
            // Reuse a range freed in an earlier interval (not this one: a
            // page cannot be dropped and carried by the same file).
            let freed_now = drops.len();
            let reusable = self.freed.len().saturating_sub(freed_now);
            let base = if reusable > 0 && self.rng.random_bool(0.5) {
                let r = self.freed.remove(self.rng.random_range(0..reusable));
                let len = len.min(r.len);
                for pg in r.base..r.base + len {
                    let page = self.new_page();
                    self.image.insert(pg, page);
                    fresh.push(pg);
                }
                self.regions.push(Region { base: r.base, len });
                return;
            } else {
                let b = self.next_base;
                self.next_base += len + 256;
                b
            };
            for pg in base..base + len {
                let page = self.new_page();
                self.image.insert(pg, page);
                fresh.push(pg);
            }
            self.regions.push(Region { base, len });
        }
    }

    /// Writes checkpoint `c` (from [`Workload::step`]) into `dir`, pages
    /// taken from the current image. Returns the file's path.
    pub fn write(&self, c: &Checkpoint, dir: &Path, time_ns: u64) -> Result<PathBuf> {
        let path = dir.join(ic_file_name(c.seq));
        let mut w = IcWriter::create_ext(
            &path,
            self.profile.page_size,
            c.seq,
            c.full,
            time_ns,
            &IcExt {
                chain: Some(self.chain_id),
                instance: Some(self.instance),
                regions: None,
                continues: None,
            },
            c.pages.clone(),
            c.drops.clone(),
        )?;
        for pg in &c.pages {
            w.push_page(&self.image[pg])?;
        }
        w.finish()?;
        Ok(path)
    }

    /// Takes one checkpoint into `dir` (FULL first), with a capture time
    /// one second per seq after a fixed epoch, so output is reproducible.
    pub fn checkpoint(&mut self, dir: &Path) -> Result<PathBuf> {
        let c = self.step();
        self.write(&c, dir, GEN_EPOCH_NS + c.seq * 1_000_000_000)
    }

    /// Writes the current image as one FULL IC file at `path`.
    pub fn write_image(&self, path: &Path) -> Result<()> {
        let pages: Vec<u64> = self.image.keys().copied().collect();
        let mut w = IcWriter::create(
            path,
            self.profile.page_size,
            self.next_seq.saturating_sub(1),
            true,
            GEN_EPOCH_NS + self.next_seq.saturating_sub(1) * 1_000_000_000,
            pages,
            Vec::new(),
        )?;
        for data in self.image.values() {
            w.push_page(data)?;
        }
        w.finish()
    }
}

/// 2026-01-01T00:00:00Z: generated files carry times from here on.
pub const GEN_EPOCH_NS: u64 = 1_767_225_600_000_000_000;

/// What [`generate`] wrote.
#[derive(Clone, Debug, Serialize)]
pub struct GenSummary {
    /// Profile name.
    pub profile: String,
    /// Seed.
    pub seed: u64,
    /// Files written, in seq order.
    #[serde(serialize_with = "crate::format::json_path::paths")]
    pub files: Vec<PathBuf>,
    /// Bytes written in IC files.
    pub bytes: u64,
    /// Live pages at the end.
    pub final_pages: u64,
    /// Path of the final-image FULL file, when asked for.
    #[serde(serialize_with = "crate::format::json_path::opt_path")]
    pub truth: Option<PathBuf>,
}

/// Writes a FULL file and `profile.checkpoints` incrementals into `outdir`
/// (created if missing); with `truth`, also the final image as a FULL file
/// there (keep it outside `outdir`, or it would join the chain). `on_file`
/// is called after each file is written.
pub fn generate(
    outdir: &Path,
    profile: Profile,
    seed: u64,
    truth: Option<&Path>,
    mut on_file: impl FnMut(&Path),
) -> Result<GenSummary> {
    let name = profile.name.to_string();
    let n = profile.checkpoints;
    // The profile is checked before the directory is made: a refused one
    // leaves nothing behind.
    let mut w = Workload::new(profile, seed)?;
    std::fs::create_dir_all(outdir).ctx(outdir, "create directory")?;
    let mut files = Vec::new();
    let mut bytes = 0;
    for _ in 0..=n {
        let p = w.checkpoint(outdir)?;
        bytes += std::fs::metadata(&p).ctx(&p, "stat")?.len();
        on_file(&p);
        files.push(p);
    }
    if let Some(t) = truth {
        w.write_image(t)?;
    }
    Ok(GenSummary {
        profile: name,
        seed,
        files,
        bytes,
        final_pages: w.image().len() as u64,
        truth: truth.map(Path::to_path_buf),
    })
}

/// Page-number offset of the rank's own part of a [`generate_ranks`] image,
/// above the shared part's addresses.
pub const RANK_PART_BASE: u64 = 1 << 40;

/// Writes the checkpoints of `ranks` MPI ranks into `outdir/<rank>/`, each
/// a FULL checkpoint and `profile.checkpoints` incrementals: a share
/// `shared` of every rank's footprint is the same on every rank (one
/// workload, seed `seed`, at the usual addresses: replicated tables,
/// read-only inputs), the rest is the rank's own (seed `seed + 1 + rank`,
/// its pages at [`RANK_PART_BASE`] and up). Both parts evolve by the
/// profile, in step. With `truth`, rank `r`'s final image is also written
/// as the FULL file `truth/<r>.rexic`.
pub fn generate_ranks(
    outdir: &Path,
    profile: Profile,
    seed: u64,
    ranks: u32,
    shared: f64,
    truth: Option<&Path>,
) -> Result<Vec<GenSummary>> {
    if !(0.0..=1.0).contains(&shared) {
        return Err(Error::Invalid(format!(
            "shared share {shared} is not in 0..=1"
        )));
    }
    let total = profile.pages;
    // A rank's two parts are held at once: the rank's whole image must fit
    // (helper-49: each part alone passed).
    fits_in_memory(total, profile.page_size)?;
    let shared_pages = ((total as f64) * shared).round() as u64;
    let part = |pages: u64, s: u64| -> Result<Option<Workload>> {
        if pages == 0 {
            return Ok(None);
        }
        Workload::new(Profile { pages, ..profile }, s).map(Some)
    };
    let mut out = Vec::new();
    for r in 0..ranks {
        let dir = outdir.join(r.to_string());
        let mut parts = [
            part(shared_pages, seed)?,
            part(total - shared_pages, seed + 1 + u64::from(r))?,
        ];
        std::fs::create_dir_all(&dir).ctx(&dir, "create directory")?;
        let chain_id = ChainId::from_seed(seed ^ (u64::from(r) << 32) ^ 0x5eed);
        let instance = InstanceId::from_seed(seed ^ (u64::from(r) << 32) ^ 0x5eed);
        let mut files = Vec::new();
        let mut bytes = 0;
        for _ in 0..=profile.checkpoints {
            let steps: Vec<Option<Checkpoint>> = parts
                .iter_mut()
                .map(|w| w.as_mut().map(Workload::step))
                .collect();
            let (mut pages, mut drops, mut seq, mut full) = (Vec::new(), Vec::new(), 0, false);
            for (k, c) in steps.iter().enumerate() {
                let Some(c) = c else { continue };
                let off = if k == 0 { 0 } else { RANK_PART_BASE };
                pages.extend(c.pages.iter().map(|p| p + off));
                drops.extend(c.drops.iter().map(|d| DropRange {
                    first: d.first + off,
                    count: d.count,
                }));
                (seq, full) = (c.seq, c.full);
            }
            let path = dir.join(ic_file_name(seq));
            let mut w = IcWriter::create_ext(
                &path,
                profile.page_size,
                seq,
                full,
                GEN_EPOCH_NS + seq * 1_000_000_000,
                &IcExt {
                    chain: Some(chain_id),
                    instance: Some(instance),
                    regions: None,
                    continues: None,
                },
                pages,
                drops,
            )?;
            for (k, c) in steps.iter().enumerate() {
                let (Some(c), Some(wl)) = (c, &parts[k]) else {
                    continue;
                };
                for pg in &c.pages {
                    w.push_page(&wl.image[pg])?;
                }
            }
            w.finish()?;
            bytes += std::fs::metadata(&path).ctx(&path, "stat")?.len();
            files.push(path);
        }
        let truth_path = match truth {
            Some(t) => {
                std::fs::create_dir_all(t).ctx(t, "create directory")?;
                let p = t.join(format!("{r}.rexic"));
                let index: Vec<u64> = parts
                    .iter()
                    .enumerate()
                    .filter_map(|(k, w)| w.as_ref().map(|w| (k, w)))
                    .flat_map(|(k, w)| {
                        let off = if k == 0 { 0 } else { RANK_PART_BASE };
                        w.image.keys().map(move |p| p + off)
                    })
                    .collect();
                let last = files.len() as u64 - 1;
                let mut w = IcWriter::create(
                    &p,
                    profile.page_size,
                    last,
                    true,
                    GEN_EPOCH_NS + last * 1_000_000_000,
                    index,
                    Vec::new(),
                )?;
                for wl in parts.iter().flatten() {
                    for data in wl.image.values() {
                        w.push_page(data)?;
                    }
                }
                w.finish()?;
                Some(p)
            }
            None => None,
        };
        out.push(GenSummary {
            profile: profile.name.to_string(),
            seed,
            files,
            bytes,
            final_pages: parts.iter().flatten().map(|w| w.image.len() as u64).sum(),
            truth: truth_path,
        });
    }
    Ok(out)
}
