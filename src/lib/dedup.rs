//! The Deduplication Unit (paper §3.2.2-3.2.3, Fig. 5b).
//!
//! For each page of the C-List, in page order: if the page is live in the
//! previous generation's P-Table, its previous `alpha` patterns are
//! dereferenced and inserted into the DeD-Table under their existing
//! pointers; then each pattern of the new contents is probed: a hit reuses
//! the existing pointer, a miss appends the pattern to the ΔRPS under the
//! next pointer. Patterns are thus shared within the batch (across pages) and
//! with each page's previous version. The DeD-Table starts empty every batch.
//!
//! Memory is bounded by the DeD-Table plus fixed buffers, not by the batch:
//! page data is read from the memory-mapped IC files, the ΔRPS and the PF
//! stream to disk through 1 MiB buffers, and the only per-pattern state kept
//! besides the table entry is an 8-byte *source location* per new pattern
//! (where its bytes can be read again: an IC file offset, or a pointer of the
//! old chain during a complete coalescence), which the DeD-Table's resolver
//! needs to confirm later hits byte for byte. Per page, the P-Table delta
//! keeps its number and CRC (12 bytes per dirty page).
//!
//! The previous version of a page is found by a merge-join of the C-List
//! with the live P-Table (both sorted by page number), so no per-page hash
//! lookup is needed.
//!
//! A **complete coalescence** runs the same loop over every live page
//! (from the batch or, for pages the batch did not touch, rebuilt from the
//! old chain) into a fresh pattern space with no previous versions.

use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use crate::chain::{LivePage, OpenChain};
use crate::coalesce::{CList, CListEntry, PageLayer, merge_layers};
use crate::dedup_table::{DedupTable, PatternHasher};
use crate::error::{Error, Result};
use crate::format::chunked::{ChunkedHeader, ChunkedWriter, DEFAULT_CHUNK, Kind};
use crate::format::ic::{DropRange, IcFile, IcMeta};
use crate::format::manifest::{FileEntry, Role, object_name};
use crate::format::ptable::{PTableDelta, check_sizes};

/// Buffer size for the streamed RPS and PF.
const FLUSH: usize = 1 << 20;
/// Source-location tag: the pattern's bytes are an old-chain pattern.
const OLD: u64 = 1 << 63;

/// What the Deduplication Unit produced.
#[derive(Clone, Debug, Serialize)]
pub struct DedupOutput {
    /// The generation written.
    pub generation: u64,
    /// The data files, in the directory given.
    pub files: Vec<FileEntry>,
    /// Patterns in the new RPS.
    pub patterns: u64,
    /// First pointer of the new RPS.
    pub pattern_base: u64,
    /// Pages written (C-List length, or all live pages for a full one).
    pub dirty_pages: u64,
    /// Live pages after the generation.
    pub live_pages: u64,
    /// Pages dropped.
    pub dropped_pages: u64,
    /// Patterns probed (new page contents).
    pub probed: u64,
    /// Probes that hit a pattern of a page's previous version or of the
    /// batch (the rest were appended to the RPS).
    pub hits: u64,
    /// Previous-version patterns inserted into the DeD-Table.
    pub prev_inserted: u64,
    /// Bytes of page data deduplicated.
    pub bytes_in: u64,
    /// Peak DeD-Table memory, in bytes.
    pub table_bytes: u64,
    /// Seconds spent.
    pub seconds: f64,
}

/// The pattern space would pass 2^32 patterns.
fn space_full(generation: u64, needed: u64) -> Error {
    Error::PatternSpaceFull(format!(
        "generation {generation} would need pattern pointer {needed}, beyond the 4-byte pointer space (2^32 patterns)"
    ))
}

/// Where the bytes of a page being deduplicated come from.
enum PageSource<'a> {
    /// An IC file's page.
    Ic { file: u32, data: &'a [u8], offset: u64, crc: u32 },
    /// A page rebuilt from the old chain into a buffer; `ptrs` are its old
    /// pointers (new patterns are found again through them).
    Old { ptrs: &'a [u8], crc: u32 },
}

/// Shared state of one deduplication run.
struct Unit<'a, H: PatternHasher> {
    table: DedupTable<H>,
    pattern_size: usize,
    generation: u64,
    base: u64,
    next: u64,
    /// Source location of every new pattern (see module doc).
    locs: Vec<u64>,
    ic: &'a [Option<IcFile>],
    /// The chain whose patterns are reachable: the previous generation's
    /// for a Δ, the old chain (as a page source) for a complete coalescence.
    chain: Option<&'a OpenChain>,
    /// Whether the chain's pointers belong to the new pattern space
    /// (Δ: yes; complete coalescence: no, a fresh space starts at 0).
    chain_shared: bool,
    rps: ChunkedWriter,
    rps_buf: Vec<u8>,
    pf: ChunkedWriter,
    pf_buf: Vec<u8>,
    ptrs: Vec<u32>,
    out: DedupOutput,
}

/// Resolves a pointer to its bytes for the DeD-Table's hit confirmation.
/// Infallible by design: bytes that cannot be read resolve to an empty
/// slice, which equals no pattern, so the worst outcome is a missed
/// duplicate, never a wrong pointer.
fn resolve<'a>(
    p: u32,
    base: u64,
    ps: usize,
    locs: &[u64],
    ic: &'a [Option<IcFile>],
    chain: Option<&'a OpenChain>,
    chain_shared: bool,
) -> &'a [u8] {
    let p = u64::from(p);
    if p >= base {
        let Some(&loc) = locs.get((p - base) as usize) else {
            return &[];
        };
        if loc & OLD != 0 {
            return chain.and_then(|c| c.pattern(loc as u32).ok()).unwrap_or(&[]);
        }
        let (file, off) = ((loc >> 48) as usize, loc & ((1 << 48) - 1));
        return ic
            .get(file)
            .and_then(Option::as_ref)
            .and_then(|f| f.raw(off, ps))
            .unwrap_or(&[]);
    }
    if chain_shared {
        return chain.and_then(|c| c.pattern(p as u32).ok()).unwrap_or(&[]);
    }
    &[]
}

impl<'a, H: PatternHasher> Unit<'a, H> {
    fn page(&mut self, page: u64, src: PageSource<'_>, prev: Option<LivePage>, ptab: &mut PTableDelta) -> Result<()> {
        let ps = self.pattern_size;
        // Insert the previous version's patterns under their pointers.
        if let (Some(lp), Some(chain)) = (prev, self.chain)
            && self.chain_shared
        {
            let old = chain.pointers(lp)?;
            for p in old.chunks_exact(4) {
                let ptr = u32::from_le_bytes(p.try_into().expect("4"));
                let pat = chain.pattern(ptr)?;
                let (base, locs, ic) = (self.base, &self.locs, self.ic);
                let shared = self.chain_shared;
                self.table
                    .get_or_insert(pat, ptr, |q| resolve(q, base, ps, locs, ic, Some(chain), shared));
                self.out.prev_inserted += 1;
            }
        }
        let (data, crc): (&[u8], u32) = match &src {
            PageSource::Ic { data, crc, .. } => (data, *crc),
            PageSource::Old { crc, .. } => (&[], *crc),
        };
        self.ptrs.clear();
        let alpha = match &src {
            PageSource::Ic { data, .. } => data.len() / ps,
            PageSource::Old { ptrs, .. } => ptrs.len() / 4,
        };
        for i in 0..alpha {
            let (pat, loc): (&[u8], u64) = match &src {
                PageSource::Ic { file, offset, .. } => {
                    (&data[i * ps..(i + 1) * ps], (u64::from(*file) << 48) | (offset + (i * ps) as u64))
                }
                PageSource::Old { ptrs, .. } => {
                    let old = u32::from_le_bytes(ptrs[i * 4..i * 4 + 4].try_into().expect("4"));
                    let chain = self.chain.expect("old pages come with their chain");
                    (chain.pattern(old)?, OLD | u64::from(old))
                }
            };
            if self.next > u64::from(u32::MAX) {
                return Err(space_full(self.generation, self.next));
            }
            let (base, locs, ic, chain, shared) = (self.base, &self.locs, self.ic, self.chain, self.chain_shared);
            let hit = self
                .table
                .get_or_insert(pat, self.next as u32, |q| resolve(q, base, ps, locs, ic, chain, shared));
            self.out.probed += 1;
            match hit {
                Some(p) => {
                    self.out.hits += 1;
                    self.ptrs.push(p);
                }
                None => {
                    self.ptrs.push(self.next as u32);
                    self.next += 1;
                    self.locs.push(loc);
                    self.rps_buf.extend_from_slice(pat);
                    if self.rps_buf.len() >= FLUSH {
                        self.rps.write(&self.rps_buf)?;
                        self.rps_buf.clear();
                    }
                }
            }
        }
        for p in &self.ptrs {
            self.pf_buf.extend_from_slice(&p.to_le_bytes());
        }
        if self.pf_buf.len() >= FLUSH {
            self.pf.write(&self.pf_buf)?;
            self.pf_buf.clear();
        }
        ptab.pages.push(page);
        ptab.page_crcs.push(crc);
        self.out.bytes_in += (alpha * ps) as u64;
        Ok(())
    }
}

/// Parameters of one deduplication run.
pub struct DedupJob<'a> {
    /// The generation to write.
    pub generation: u64,
    /// Page size.
    pub page_size: u32,
    /// Pattern size.
    pub pattern_size: u32,
    /// The batch (IC files, seq order) the C-List indexes.
    pub batch: &'a [IcMeta],
    /// The batch's C-List.
    pub clist: &'a CList,
    /// The chain the generation extends (Δ) or replaces (complete
    /// coalescence), if any.
    pub chain: Option<&'a OpenChain>,
    /// Complete coalescence: a fresh full RPS of every live page.
    pub full: bool,
    /// Directory to write the generation's files into.
    pub dir: &'a Path,
}

/// Runs the Deduplication Unit with the hasher `hasher`, writing the
/// generation's RPS, PF and P-Table into `job.dir`.
pub fn deduplicate<H: PatternHasher>(job: &DedupJob<'_>, hasher: H) -> Result<DedupOutput> {
    let started = Instant::now();
    check_sizes(job.page_size, job.pattern_size).map_err(|(_, _, why)| Error::Invalid(why))?;
    if job.clist.page_size != job.page_size && !job.clist.is_empty() {
        return Err(Error::Invalid(format!(
            "the batch has {}-byte pages, the chain {}-byte pages",
            job.clist.page_size, job.page_size
        )));
    }
    let shared = !job.full;
    let base = match (job.chain, shared) {
        (Some(c), true) => {
            let m = c.manifest();
            if m.page_size != job.page_size || m.pattern_size != job.pattern_size {
                return Err(Error::Invalid(format!(
                    "chain has page/pattern size {}/{}, the batch {}/{}",
                    m.page_size, m.pattern_size, job.page_size, job.pattern_size
                )));
            }
            m.pattern_end()
        }
        _ => 0,
    };
    let ps = job.pattern_size as usize;
    let alpha = job.page_size / job.pattern_size;
    let ic = crate::coalesce::open_referenced(job.batch, &job.clist.entries)?;

    // Which pages to write, and where each one's bytes come from.
    enum Src {
        Ic(CListEntry),
        Old(LivePage),
    }
    let (plan, drops, live_pages, full_flag): (Vec<(u64, Src, Option<LivePage>)>, Vec<DropRange>, u64, bool) =
        if job.full || job.clist.full || job.chain.is_none() {
            // Every live page: the batch's newest copies over the old chain.
            let old_live = match (job.chain, job.clist.full) {
                (Some(c), false) => c.live_pages(),
                _ => Vec::new(),
            };
            let old_layer = LiveLayer(&old_live);
            let layers: Vec<&dyn PageLayer> = vec![&old_layer, job.clist];
            let merged = merge_layers(&layers);
            let plan: Vec<_> = merged
                .entries
                .into_iter()
                .map(|e| {
                    if e.chk == 0 {
                        (e.page, Src::Old(old_live[e.pp as usize]), None)
                    } else {
                        (e.page, Src::Ic(job.clist.entries[e.pp as usize]), None)
                    }
                })
                .collect();
            let n = plan.len() as u64;
            (plan, Vec::new(), n, true)
        } else {
            let chain = job.chain.expect("checked above");
            let old_live = chain.live_pages();
            let mut plan = Vec::with_capacity(job.clist.len());
            let mut j = 0usize;
            for e in &job.clist.entries {
                while j < old_live.len() && old_live[j].page < e.page {
                    j += 1;
                }
                let prev = (j < old_live.len() && old_live[j].page == e.page).then(|| old_live[j]);
                plan.push((e.page, Src::Ic(*e), prev));
            }
            let old_layer = LiveLayer(&old_live);
            let layers: Vec<&dyn PageLayer> = vec![&old_layer, job.clist];
            let live = merge_layers(&layers).entries.len() as u64;
            (plan, job.clist.drops.clone(), live, false)
        };

    let expected = plan.len() * alpha as usize;
    let table = DedupTable::with_hasher(expected.saturating_mul(2).max(1024), hasher);
    let names = [
        object_name(job.generation, "rps"),
        object_name(job.generation, "pf"),
        object_name(job.generation, "ptab"),
    ];
    let rps = ChunkedWriter::create(
        job.dir.join(&names[0]),
        ChunkedHeader {
            kind: Kind::Rps,
            record_size: job.pattern_size,
            generation: job.generation,
            first_record: base,
            record_count: 0,
            chunk_size: DEFAULT_CHUNK,
            aux: 0,
        },
    )?;
    let pf = ChunkedWriter::create(
        job.dir.join(&names[1]),
        ChunkedHeader {
            kind: Kind::Pf,
            record_size: 4,
            generation: job.generation,
            first_record: 0,
            record_count: 0,
            chunk_size: DEFAULT_CHUNK,
            aux: alpha,
        },
    )?;
    let mut unit = Unit {
        table,
        pattern_size: ps,
        generation: job.generation,
        base,
        next: base,
        locs: Vec::new(),
        ic: &ic,
        chain: job.chain,
        chain_shared: shared && job.chain.is_some() && !full_flag,
        rps,
        rps_buf: Vec::with_capacity(FLUSH + ps),
        pf,
        pf_buf: Vec::with_capacity(FLUSH + 4 * alpha as usize),
        ptrs: Vec::with_capacity(alpha as usize),
        out: DedupOutput {
            generation: job.generation,
            files: Vec::new(),
            patterns: 0,
            pattern_base: base,
            dirty_pages: plan.len() as u64,
            live_pages,
            dropped_pages: drops.iter().map(|d| d.count).sum(),
            probed: 0,
            hits: 0,
            prev_inserted: 0,
            bytes_in: 0,
            table_bytes: 0,
            seconds: 0.0,
        },
    };
    let mut ptab = PTableDelta {
        path: job.dir.join(&names[2]),
        generation: job.generation,
        page_size: job.page_size,
        pattern_size: job.pattern_size,
        full: full_flag,
        pages: Vec::with_capacity(plan.len()),
        drops,
        page_crcs: Vec::with_capacity(plan.len()),
    };
    let mut old_buf = vec![0u8; job.page_size as usize];
    for (page, src, prev) in &plan {
        match src {
            Src::Ic(e) => {
                let f = ic[e.chk as usize].as_ref().expect("referenced files are open");
                let data = f.page(e.pp as usize)?;
                let src = PageSource::Ic {
                    file: e.chk,
                    data,
                    offset: f.page_offset(e.pp as usize),
                    crc: f.meta().page_crcs[e.pp as usize],
                };
                unit.page(*page, src, *prev, &mut ptab)?;
            }
            Src::Old(lp) => {
                let chain = job.chain.expect("old pages come with their chain");
                // Rebuild (and CRC-check) the page before trusting its pointers.
                chain.read_page(*lp, &mut old_buf)?;
                let crc = chain.gens[lp.layer as usize].ptable.page_crcs[lp.pos as usize];
                let ptrs = chain.pointers(*lp)?;
                unit.page(*page, PageSource::Old { ptrs, crc }, None, &mut ptab)?;
            }
        }
        unit.out.table_bytes = unit.out.table_bytes.max(unit.table.memory_bytes() as u64);
    }
    if !unit.rps_buf.is_empty() {
        unit.rps.write(&unit.rps_buf)?;
    }
    if !unit.pf_buf.is_empty() {
        unit.pf.write(&unit.pf_buf)?;
    }
    let mut out = unit.out;
    out.table_bytes = out.table_bytes.max(unit.table.memory_bytes() as u64 + unit.locs.capacity() as u64 * 8);
    out.patterns = unit.next - base;
    let (rps_len, rps_crc) = unit.rps.finish()?;
    let (pf_len, pf_crc) = unit.pf.finish()?;
    let (pt_len, pt_crc) = ptab.write(&job.dir.join(&names[2]))?;
    out.files = vec![
        FileEntry { role: Role::Rps, name: names[0].clone(), bytes: rps_len, crc32: rps_crc },
        FileEntry { role: Role::Pf, name: names[1].clone(), bytes: pf_len, crc32: pf_crc },
        FileEntry { role: Role::Ptable, name: names[2].clone(), bytes: pt_len, crc32: pt_crc },
    ];
    out.seconds = started.elapsed().as_secs_f64();
    Ok(out)
}

/// The live P-Table of a chain as a merge layer (a FULL one: it is the
/// whole state before the batch).
struct LiveLayer<'a>(&'a [LivePage]);

impl PageLayer for LiveLayer<'_> {
    fn layer_len(&self) -> usize {
        self.0.len()
    }
    fn layer_page(&self, i: usize) -> u64 {
        self.0[i].page
    }
    fn layer_drops(&self) -> &[DropRange] {
        &[]
    }
    fn layer_full(&self) -> bool {
        true
    }
}
