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
//! The table and the source locations grow with the batch's patterns (about
//! 19 bytes per indexed pattern), so they have a ceiling of their own
//! ([`DedupJob::table_memory`], rex.toml `dedup_memory`): for 32-byte
//! patterns they take a third to a half of the batch's bytes, and a job
//! whose memory is most of its node's cannot spare that much again.
//! Once the table holds as many entries as the ceiling allows, it is
//! *closed*: every later pattern is only looked up, a miss is stored as a
//! new pattern without an entry or a source location, and a later copy of
//! it is stored again. Entries are never removed, so a closed table stays
//! closed, and every pointer it holds was inserted while source locations
//! were still kept: the output is exact, only less deduplicated, and
//! depends on the ceiling, not on the machine.
//!
//! The previous version of a page is found by a merge-join of the C-List
//! with the live P-Table (both sorted by page number), so no per-page hash
//! lookup is needed.
//!
//! A **complete coalescence** runs the same loop over every live page
//! (from the batch or, for pages the batch did not touch, rebuilt from the
//! old chain) into a fresh pattern space with no previous versions.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::durable::{MIRROR_STOPPED, Mirror};
use crate::error::{Error, Result};
use crate::format::chunked::{ChunkedWriter, HEADER_LEN, Kind, WriteFormat};
use crate::format::ic::{DropRange, IcMeta};
use crate::format::manifest::{FileEntry, Role, object_name};
use crate::format::pointer_coding;
use crate::format::ptable::{PTableDelta, check_sizes};
use crate::format::xref::{Xref, XrefFile};
use crate::l1::coalesce::{CList, CListEntry, PageLayer, merge_layers};
use crate::l2::chain::{LivePage, OpenChain, PageDecoder};
use crate::l2::dedup_table::{DedupTable, PatternHash, PatternHasher, same};
use crate::store::{Progress, Store};

/// The hash functions of the DeD-Table.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum HashChoice {
    /// CRC-32 indexes the table, as in the paper (and a keyed XXH3 gives
    /// the tag).
    #[default]
    Crc32,
    /// Both hashes from one XXH3-64, keyed: faster, same results.
    Xxh3,
}

/// Buffer size for the streamed RPS and PF.
const FLUSH: usize = 1 << 20;

/// A checkpoint's mapped pages are given back in steps of this many bytes
/// behind the page being read, less [`RELEASE_MARGIN`] (the pages prepared
/// and committed around it).
const RELEASE_STEP: u64 = 8 << 20;
const RELEASE_MARGIN: u64 = 1 << 20;
/// Default ceiling of the DeD-Table and the source locations, bytes
/// (rex.toml `dedup_memory`).
pub const DEFAULT_DEDUP_MEMORY: u64 = 2 << 30;
/// Bytes an indexed pattern costs at most: a table entry (8 bytes at a
/// load of 3/4, the table being sized for its ceiling so that it never
/// grows) and a source location (8 bytes).
const ENTRY_BYTES: u64 = 19;
/// Source-location tag: the pattern's bytes are an old-chain pattern.
const OLD: u64 = 1 << 63;
/// Source location of a pattern whose bytes cannot be read again (a page
/// another rank stored, rewritten by a complete coalescence): it resolves
/// to nothing, so it is never a hit.
const DETACHED: u64 = u64::MAX;

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
    /// New patterns stored without a DeD-Table entry: the table had
    /// reached its ceiling (`dedup_memory`), so their later copies, if
    /// any, were stored again.
    #[serde(default)]
    pub unindexed: u64,
    /// Pages written as cross-rank references (stored by another rank).
    #[serde(default)]
    pub xref_pages: u64,
    /// Seconds spent.
    pub seconds: f64,
    /// Data files already in the store (streamed while written; see
    /// [`DedupJob::upload`]).
    #[serde(skip)]
    pub uploaded: Vec<String>,
    /// Seconds spent waiting for those uploads after the unit finished.
    #[serde(skip)]
    pub upload_wait_s: f64,
    /// Seconds the slower of those uploads spent moving bytes: its thread's
    /// time not spent waiting for the unit to write the next piece (the
    /// link's time, which the controller turns into the L2 read rate).
    #[serde(skip)]
    pub upload_busy_s: f64,
}

/// The pattern space would pass 2^32 - 1 patterns (pointer 2^32 - 1 is
/// the Pointer Files' hole, FORMAT.md §3.2.6).
fn space_full(generation: u64, needed: u64) -> Error {
    Error::PatternSpaceFull(format!(
        "generation {generation} would need pattern pointer {needed}, beyond the 4-byte pointer space (2^32 - 1 patterns)"
    ))
}

/// Where the bytes of a page being deduplicated come from.
enum PageSource<'a> {
    /// An IC file's page (CRC-checked), at `offset` in file `file`.
    Ic {
        file: u32,
        data: &'a [u8],
        offset: u64,
        crc: u32,
    },
    /// A page rebuilt (and CRC-checked) from the old chain into `data`;
    /// `ptrs` are its old pointers, through which its new patterns are found
    /// again.
    Old {
        data: &'a [u8],
        ptrs: &'a [u8],
        crc: u32,
    },
}

/// How the `i`-th pattern of a page is resolved (decided by
/// [`Unit::prepare`], carried out by [`Unit::commit`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    /// Probe the DeD-Table with the hash computed for it.
    Probe,
    /// The all-zero pattern, whose pointer is already known.
    Zero,
    /// (New contents only) equal to the previous version's pattern at the
    /// same position: takes the pointer that pattern's insertion returned.
    Same,
}

/// Whether `p` is all zero bytes (`p.len()` is a multiple of 8: pattern
/// sizes are powers of two from 16).
#[inline(always)]
fn is_zero(p: &[u8]) -> bool {
    p.chunks_exact(8).fold(0u64, |a, w| {
        a | u64::from_ne_bytes(w.try_into().expect("8 bytes"))
    }) == 0
}

/// Shared state of one deduplication run.
struct Unit<'a, H: PatternHasher> {
    table: DedupTable<H>,
    pattern_size: usize,
    generation: u64,
    base: u64,
    next: u64,
    /// Source location of every new pattern (see module doc), while the
    /// table is open.
    locs: Vec<u64>,
    /// The most entries the table may hold; at that many it is closed
    /// (see module doc).
    max_entries: usize,
    ic: Vec<IcData<'a>>,
    /// The chain whose patterns are reachable: the previous generation's
    /// for a Δ, the old chain (as a page source) for a complete coalescence.
    chain: Option<&'a OpenChain>,
    /// Whether the chain's pointers belong to the new pattern space
    /// (Δ: yes; complete coalescence: no, a fresh space starts at 0).
    chain_shared: bool,
    /// The Pointer File refers to previous versions: a pointer equal to
    /// the page's previous version's at the same position is written as a
    /// hole ([`pointer_coding::HOLE`]).
    pf_prev: bool,
    rps: ChunkedWriter,
    rps_buf: Vec<u8>,
    pf: ChunkedWriter,
    pf_buf: Vec<u8>,
    out: DedupOutput,
    /// The pointer the DeD-Table maps the all-zero pattern to, once known.
    /// Entries are never replaced, so it stays valid for the whole batch.
    zero_ptr: Option<u32>,
    /// What pass 1 learned about the page being committed and the next one
    /// (see [`Unit::prepare`]).
    scratch: [Scratch<'a>; 2],
    /// What each previous-version insertion of the page returned.
    prev_res: Vec<u32>,
}

/// Pass 1's findings about one page (`alpha` entries each): how each new
/// pattern is resolved and its hashes; the same for the previous version's
/// patterns, with their bytes and pointers.
#[derive(Default)]
struct Scratch<'a> {
    new: Vec<(Way, PatternHash)>,
    prev: Vec<Prev<'a>>,
}

/// A previous-version pattern of the page: its bytes, pointer, and how it
/// is inserted.
struct Prev<'a> {
    pat: &'a [u8],
    ptr: u32,
    way: Way,
    h: PatternHash,
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
    ic: &[IcData<'a>],
    chain: Option<&'a OpenChain>,
    chain_shared: bool,
) -> &'a [u8] {
    let p = u64::from(p);
    if p >= base {
        let Some(&loc) = locs.get((p - base) as usize) else {
            return &[];
        };
        if loc == DETACHED {
            return &[];
        }
        if loc & OLD != 0 {
            return chain
                .and_then(|c| c.pattern(loc as u32).ok())
                .unwrap_or(&[]);
        }
        let (file, off) = ((loc >> 48) as usize, loc & ((1 << 48) - 1));
        let Some(&(data_off, data)) = ic.get(file) else {
            return &[];
        };
        let at = off.wrapping_sub(data_off) as usize;
        return at
            .checked_add(ps)
            .and_then(|end| data.get(at..end))
            .unwrap_or(&[]);
    }
    if chain_shared {
        return chain.and_then(|c| c.pattern(p as u32).ok()).unwrap_or(&[]);
    }
    &[]
}

/// An IC file's page data and its offset in the file (empty for files the
/// batch does not reference), for [`resolve`].
type IcData<'a> = (u64, &'a [u8]);

impl<'a, H: PatternHasher> Unit<'a, H> {
    /// Pass 1 of a page (into `scratch[slot]`): reads the previous
    /// version's patterns (Δ only) and classifies every pattern, hashing
    /// and prefetching the DeD-Table bucket of those that need a probe.
    ///
    /// It changes no table state, so [`deduplicate`] runs it one page ahead:
    /// page k+1 is prepared before page k is committed, and the buckets it
    /// prefetches have a whole page's work to arrive.
    ///
    /// Two kinds of pattern skip the table, with the answer the table would
    /// give: the all-zero pattern once its pointer is known, and a new
    /// pattern equal to the previous version's pattern at the same position
    /// (a surviving pattern), which takes the pointer that pattern's
    /// insertion returns. Entries are never replaced within a batch (and
    /// `zero_ptr`, once known, never changes), so both shortcuts return
    /// exactly what a probe would: the output is the same, byte for byte, as
    /// probing every pattern in order.
    fn prepare(&mut self, slot: usize, data: &[u8], prev: Option<LivePage>) -> Result<()> {
        match self.pattern_size {
            16 => self.prepare_n::<16>(slot, data, prev),
            32 => self.prepare_n::<32>(slot, data, prev),
            64 => self.prepare_n::<64>(slot, data, prev),
            128 => self.prepare_n::<128>(slot, data, prev),
            _ => self.prepare_n::<0>(slot, data, prev),
        }
    }

    /// [`prepare`](Self::prepare) for patterns of `N` bytes (0: any size),
    /// so that the usual sizes get fixed-size compares and copies.
    #[inline(always)]
    fn prepare_n<const N: usize>(
        &mut self,
        slot: usize,
        data: &[u8],
        prev: Option<LivePage>,
    ) -> Result<()> {
        let ps = if N > 0 { N } else { self.pattern_size };
        let sc = &mut self.scratch[slot];
        sc.prev.clear();
        let prev_chain = match (prev, self.chain) {
            (Some(lp), Some(chain)) if self.chain_shared => Some((lp, chain)),
            _ => None,
        };
        if let Some((lp, chain)) = prev_chain {
            for p in chain.pointers(lp)?.chunks_exact(4) {
                let ptr = u32::from_le_bytes(p.try_into().expect("4"));
                let pat = chain.pattern(ptr)?;
                let (way, h) = match self.zero_ptr {
                    Some(_) if is_zero(pat) => (Way::Zero, PatternHash::default()),
                    _ => {
                        let h = self.table.hash(pat);
                        self.table.prefetch(h);
                        (Way::Probe, h)
                    }
                };
                sc.prev.push(Prev { pat, ptr, way, h });
            }
        }
        sc.new.clear();
        let alpha = data.len() / ps;
        let has_prev = sc.prev.len() == alpha;
        for (i, pat) in data.chunks_exact(ps).enumerate() {
            let (way, h) = if has_prev && same(pat, sc.prev[i].pat) {
                (Way::Same, PatternHash::default())
            } else if self.zero_ptr.is_some() && is_zero(pat) {
                (Way::Zero, PatternHash::default())
            } else {
                let h = self.table.hash(pat);
                self.table.prefetch(h);
                (Way::Probe, h)
            };
            sc.new.push((way, h));
        }
        Ok(())
    }

    /// Passes 2 and 3 of a page prepared into `scratch[slot]`: inserts the
    /// previous version's patterns under their pointers, in order, then
    /// probes the new contents, in order, appending misses to the ΔRPS.
    fn commit(
        &mut self,
        slot: usize,
        page: u64,
        src: PageSource<'_>,
        ptab: &mut PTableDelta,
    ) -> Result<()> {
        match self.pattern_size {
            16 => self.commit_n::<16>(slot, page, src, ptab),
            32 => self.commit_n::<32>(slot, page, src, ptab),
            64 => self.commit_n::<64>(slot, page, src, ptab),
            128 => self.commit_n::<128>(slot, page, src, ptab),
            _ => self.commit_n::<0>(slot, page, src, ptab),
        }
    }

    /// [`commit`](Self::commit) for patterns of `N` bytes (0: any size).
    #[inline(always)]
    fn commit_n<const N: usize>(
        &mut self,
        slot: usize,
        page: u64,
        src: PageSource<'_>,
        ptab: &mut PTableDelta,
    ) -> Result<()> {
        let ps = if N > 0 { N } else { self.pattern_size };
        let (data, crc) = match &src {
            PageSource::Ic { data, crc, .. } | PageSource::Old { data, crc, .. } => (*data, *crc),
        };
        let alpha = data.len() / ps;
        let data = &data[..alpha * ps];
        let (base, ic, chain, shared) = (self.base, &self.ic[..], self.chain, self.chain_shared);
        let sc = &self.scratch[slot];

        // Pass 2: the previous version's patterns.
        self.prev_res.clear();
        for &Prev { pat, ptr, way, h } in &sc.prev {
            let res = match (way, self.zero_ptr) {
                (Way::Zero, Some(z)) => z,
                _ => {
                    let locs = &self.locs;
                    let resolve = |q| resolve(q, base, ps, locs, ic, chain, shared);
                    let res = if self.table.len() < self.max_entries {
                        self.table.get_or_insert_hashed(pat, h, ptr, resolve)
                    } else {
                        self.table.get_hashed(pat, h, resolve)
                    }
                    .unwrap_or(ptr);
                    if self.zero_ptr.is_none() && is_zero(pat) {
                        self.zero_ptr = Some(res);
                        self.pf.set_zero_hint(res);
                    }
                    res
                }
            };
            self.prev_res.push(res);
        }
        self.out.prev_inserted += sc.prev.len() as u64;

        // Pass 3: the new contents; their pointers go straight into the PF
        // buffer.
        let pf_at = self.pf_buf.len();
        self.pf_buf.resize(pf_at + alpha * 4, 0);
        let pf_out = self.pf_buf[pf_at..].chunks_exact_mut(4);
        for (i, ((pat, out), &(way, h))) in
            data.chunks_exact(ps).zip(pf_out).zip(&sc.new).enumerate()
        {
            if self.next >= u64::from(pointer_coding::HOLE) {
                return Err(space_full(self.generation, self.next));
            }
            // Whether a probe below inserts what it misses.
            let open = self.table.len() < self.max_entries;
            let hit = match (way, self.zero_ptr) {
                (Way::Same, _) => Some(self.prev_res[i]),
                (Way::Zero, Some(z)) => Some(z),
                _ => {
                    let locs = &self.locs;
                    let resolve = |q| resolve(q, base, ps, locs, ic, chain, shared);
                    let hit = if open {
                        self.table
                            .get_or_insert_hashed(pat, h, self.next as u32, resolve)
                    } else {
                        self.table.get_hashed(pat, h, resolve)
                    };
                    if self.zero_ptr.is_none() && is_zero(pat) {
                        let z = hit.unwrap_or(self.next as u32);
                        self.zero_ptr = Some(z);
                        self.pf.set_zero_hint(z);
                    }
                    hit
                }
            };
            let ptr = match hit {
                Some(p) => {
                    self.out.hits += 1;
                    p
                }
                None => {
                    let loc = match &src {
                        PageSource::Ic { file, offset, .. } => {
                            (u64::from(*file) << 48) | (offset + (i * ps) as u64)
                        }
                        PageSource::Old { ptrs: [], .. } => DETACHED,
                        PageSource::Old { ptrs, .. } => {
                            OLD | u64::from(u32::from_le_bytes(
                                ptrs[i * 4..i * 4 + 4].try_into().expect("4"),
                            ))
                        }
                    };
                    let p = self.next as u32;
                    self.next += 1;
                    // Kept while the table is open: the probe above then
                    // inserted `p`, and `locs` covers every pointer from
                    // the base to the closing (it stays closed).
                    if open {
                        self.locs.push(loc);
                    } else {
                        self.out.unindexed += 1;
                    }
                    self.rps_buf.extend_from_slice(pat);
                    if self.rps_buf.len() >= FLUSH {
                        self.rps.write(&self.rps_buf)?;
                        self.rps_buf.clear();
                    }
                    p
                }
            };
            // The previous version's pointer here (not the zero pattern's,
            // which its own token codes without looking back): a hole.
            let ptr = match sc.prev.get(i) {
                Some(p)
                    if self.pf_prev
                        && sc.prev.len() == alpha
                        && p.ptr == ptr
                        && Some(ptr) != self.zero_ptr =>
                {
                    pointer_coding::HOLE
                }
                _ => ptr,
            };
            out.copy_from_slice(&ptr.to_le_bytes());
        }
        self.out.probed += alpha as u64;
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

impl<H: PatternHasher> Unit<'_, H> {
    /// Writes a page another rank stores: `alpha` zero pointers (never
    /// read) and its P-Table entry, with the CRC of its contents.
    fn commit_xref(&mut self, page: u64, crc: u32, ptab: &mut PTableDelta) -> Result<()> {
        let n = ptab_alpha(ptab) * 4;
        self.pf_buf.resize(self.pf_buf.len() + n, 0);
        if self.pf_buf.len() >= FLUSH {
            self.pf.write(&self.pf_buf)?;
            self.pf_buf.clear();
        }
        ptab.pages.push(page);
        ptab.page_crcs.push(crc);
        Ok(())
    }
}

fn ptab_alpha(p: &PTableDelta) -> usize {
    (p.page_size / p.pattern_size) as usize
}

/// A page prepared and waiting for its commit: where its bytes are.
enum Pending<'i> {
    Ic {
        page: u64,
        file: u32,
        data: &'i [u8],
        offset: u64,
        crc: u32,
    },
    /// Rebuilt into `old_bufs[buf]`.
    Old {
        page: u64,
        ptrs: std::borrow::Cow<'i, [u8]>,
        crc: u32,
        buf: usize,
    },
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
    /// What to write the RPS and Pointer File as.
    pub format: WriteFormat,
    /// The most bytes the DeD-Table and the new patterns' source locations
    /// may take (rex.toml `dedup_memory`; see the module doc).
    pub table_memory: u64,
    /// Pages to write as cross-rank references (an MPI job's collective
    /// push), ascending by page: each must be a page the generation writes;
    /// its pointers are zero and its bytes are another rank's.
    pub xrefs: &'a [Xref],
    /// Upload the RPS and PF to this store while they are written.
    pub upload: Option<Upload<'a>>,
}

/// Where [`deduplicate`] streams the RPS and PF while it writes them.
#[derive(Clone, Copy)]
pub struct Upload<'a> {
    /// The L2 store.
    pub store: &'a dyn Store,
    /// Receives the uploads' progress.
    pub progress: &'a dyn Progress,
}

/// Where the bytes of a page to write come from.
#[derive(Clone, Copy)]
enum Src {
    Ic(CListEntry),
    Old(LivePage),
}

/// (page, source, previous version) for every page to write.
type Plan = Vec<(u64, Src, Option<LivePage>)>;

/// What a generation writes: the pages (in order), the drops, the live
/// page count after it, and whether it starts a chain.
struct PagePlan {
    plan: Plan,
    drops: Vec<DropRange>,
    live_pages: u64,
    full: bool,
}

/// Which pages `job` writes and where each one's bytes come from: for a
/// Δ, the C-List, each page with its previous version; for a complete
/// coalescence, every live page (the batch's newest copies over the old
/// chain), with none.
fn make_plan(job: &DedupJob<'_>) -> PagePlan {
    let delta_chain = job.chain.filter(|_| !(job.full || job.clist.full));
    if let Some(chain) = delta_chain {
        let old_live = chain.live_pages();
        let mut plan = Vec::with_capacity(job.clist.len());
        let mut j = 0usize;
        for e in &job.clist.entries {
            while j < old_live.len() && old_live[j].page < e.page {
                j += 1;
            }
            // A previous version another rank stores has no patterns in
            // this chain's space to share.
            let prev = (j < old_live.len() && old_live[j].page == e.page)
                .then(|| old_live[j])
                .filter(|lp| chain.xref(*lp).is_none());
            plan.push((e.page, Src::Ic(*e), prev));
        }
        let old_layer = LiveLayer(&old_live);
        let layers: Vec<&dyn PageLayer> = vec![&old_layer, job.clist];
        let live = merge_layers(&layers).entries.len() as u64;
        PagePlan {
            plan,
            drops: job.clist.drops.clone(),
            live_pages: live,
            full: false,
        }
    } else {
        // Every live page: the batch's newest copies over the old chain.
        let old_live = match (job.chain, job.clist.full) {
            (Some(c), false) => c.live_pages(),
            _ => Vec::new(),
        };
        let old_layer = LiveLayer(&old_live);
        let layers: Vec<&dyn PageLayer> = vec![&old_layer, job.clist];
        let merged = merge_layers(&layers);
        let plan: Plan = merged
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
        PagePlan {
            plan,
            drops: Vec::new(),
            live_pages: n,
            full: true,
        }
    }
}

/// The pages a deduplication run of `job` would write, readable one by one
/// before it runs (a collective push hashes and compares them across
/// ranks to choose the cross-rank references).
pub struct PlanPages<'a> {
    plan: Plan,
    ic: Vec<Option<crate::format::ic::IcFile>>,
    chain: Option<&'a OpenChain>,
}

impl<'a> PlanPages<'a> {
    /// The pages `job` writes (its `xrefs` are ignored).
    pub fn new(job: &DedupJob<'a>) -> Result<PlanPages<'a>> {
        Ok(PlanPages {
            plan: make_plan(job).plan,
            ic: crate::l1::coalesce::open_referenced(job.batch, &job.clist.entries)?,
            chain: job.chain,
        })
    }

    /// How many pages.
    pub fn len(&self) -> usize {
        self.plan.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.plan.is_empty()
    }

    /// The page number of the `i`-th page.
    pub fn page(&self, i: usize) -> u64 {
        self.plan[i].0
    }

    /// The bytes of the `i`-th page, CRC-checked, and their CRC: mapped from
    /// its IC file, or rebuilt from the old chain into `buf`.
    pub fn read<'b>(&'b self, i: usize, buf: &'b mut Vec<u8>) -> Result<(&'b [u8], u32)> {
        match self.plan[i].1 {
            Src::Ic(e) => {
                let f = self.ic[e.chk as usize]
                    .as_ref()
                    .expect("referenced files are open");
                Ok((f.page(e.pp as usize)?, f.meta().page_crcs[e.pp as usize]))
            }
            Src::Old(lp) => {
                let chain = self.chain.expect("old pages come with their chain");
                buf.resize(chain.manifest().page_size as usize, 0);
                chain.read_page(lp, buf)?;
                let crc = chain.gens[lp.layer as usize].ptable.page_crcs[lp.pos as usize];
                Ok((&buf[..], crc))
            }
        }
    }
}

/// Runs the Deduplication Unit with the hasher `hasher`, writing the
/// generation's RPS, PF and P-Table into `job.dir`.
///
/// With `job.upload`, the RPS and the Pointer File also go to the store
/// while they are written: each streams through a bounded channel
/// ([`Mirror`]) to an upload thread, so a push takes about the longer of
/// deduplication and upload instead of their sum. Each upload's length and
/// CRC must match the local file's, and the uploaded names are listed in
/// [`DedupOutput::uploaded`]; the small files written at the end (P-Table,
/// cross-rank references) are left to the caller. On failure nothing is
/// published in the store (an upload whose stream stops publishes
/// nothing), and an upload's own error is reported rather than the
/// stopped stream it caused.
pub fn deduplicate<H: PatternHasher>(job: &DedupJob<'_>, hasher: H) -> Result<DedupOutput> {
    let Some(up) = job.upload else {
        return run(job, hasher, [None, None]);
    };
    let names = [
        object_name(job.generation, "rps"),
        object_name(job.generation, "pf"),
    ];
    std::thread::scope(|s| {
        let mut mirrors = [None, None];
        let mut uploads = Vec::new();
        for (name, m) in names.iter().zip(&mut mirrors) {
            let (mirror, rx) = Mirror::channel(job.dir.join(name), UPLOAD_QUEUE);
            *m = Some(mirror);
            uploads.push(s.spawn(move || {
                up.progress.start(name, 0);
                let t0 = Instant::now();
                let idle = std::cell::Cell::new(Duration::ZERO);
                let mut pieces = rx.into_iter();
                let mut timed = std::iter::from_fn(|| {
                    let t = Instant::now();
                    let p = pieces.next();
                    idle.set(idle.get() + t.elapsed());
                    p
                });
                let sent = up
                    .store
                    .put_stream(name, HEADER_LEN, &mut timed, up.progress);
                let busy = t0.elapsed().saturating_sub(idle.get()).as_secs_f64();
                sent.map(|(bytes, crc)| (bytes, crc, busy))
            }));
        }
        let r = run(job, hasher, mirrors);
        let waited = Instant::now();
        let sent: Vec<Result<(u64, u32, f64)>> = uploads
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Invalid("an upload thread panicked".into())))
            })
            .collect();
        let mut out = match r {
            // The upload of the file whose copy stopped says why (the other
            // one only saw its stream stop in turn).
            Err(Error::Io { path, op, .. }) if op == MIRROR_STOPPED => {
                let failed = names.iter().position(|n| path.ends_with(n));
                return Err(sent
                    .into_iter()
                    .enumerate()
                    .filter(|(i, _)| failed.is_none_or(|f| f == *i))
                    .find_map(|(_, r)| r.err())
                    .unwrap_or_else(|| {
                        Error::Invalid(format!("the upload of {} stopped", path.display()))
                    }));
            }
            other => other?,
        };
        for (name, sent) in names.iter().zip(sent) {
            let (bytes, crc, busy) = sent?;
            out.upload_busy_s = out.upload_busy_s.max(busy);
            let f = out
                .files
                .iter()
                .find(|f| &f.name == name)
                .expect("the unit writes the RPS and the PF");
            if (bytes, crc) != (f.bytes, f.crc32) {
                return Err(Error::corrupt(
                    job.dir.join(name),
                    0,
                    "upload",
                    format!(
                        "{bytes} bytes with CRC {crc:08x} reached {}, the Deduplication Unit wrote {} bytes with CRC {:08x}",
                        up.store.describe(),
                        f.bytes,
                        f.crc32
                    ),
                ));
            }
            out.uploaded.push(name.clone());
        }
        out.upload_wait_s = waited.elapsed().as_secs_f64();
        Ok(out)
    })
}

/// Pieces of 1 MiB queued per streamed upload: with the store's own
/// buffers, the memory an upload may hold beside the unit.
const UPLOAD_QUEUE: usize = 4;

/// Decoded bytes a read-ahead may hold beyond the chunks whose first page
/// the unit has reached: 16 chunks of 256 KiB, fewer of larger chunks
/// (never fewer than 2).
const READ_AHEAD_BYTES: u64 = 4 << 20;

/// Decodes the old chain's RPS chunks on other threads before the unit
/// needs them: a Δ's previous versions, a complete coalescence's old
/// pages. A Δ batch of pages spread over a large chain decodes most of the
/// chain's chunks to read a few pages of each (zstd, on the unit's thread,
/// was a third of such a push's CPU, with the other core idle).
///
/// The threads go through the chunks in the order the plan's pages first
/// use them ([`PageDecoder::first_uses`], from the count the unit releases
/// chunks by), at most [`READ_AHEAD_BYTES`] beyond the unit, and skip
/// those the unit reached first. They only verify chunks
/// ([`PageDecoder::warm`]) and hold no slice of one, so the unit's
/// releases stay sound; a chunk that fails is left for the unit to fail
/// on. A chunk a thread decodes just after the unit gave back its last use
/// stays decoded until the push ends (one chunk per such race).
struct ReadAhead {
    /// The plan index of the page the unit is preparing.
    progress: AtomicUsize,
    /// The page index a waiting thread wants to be woken at
    /// (`usize::MAX`: none).
    wake_at: AtomicUsize,
    /// The next chunk of the order to claim.
    next: AtomicUsize,
    stop: AtomicBool,
    /// Chunks a thread may decode beyond those the unit reached.
    window: usize,
}

/// The unit's side of a [`ReadAhead`]: tells the threads how far it got,
/// and stops them when dropped (the unit's loop ended, or failed).
struct Ahead<'s> {
    state: &'s ReadAhead,
    threads: Vec<std::thread::Thread>,
}

impl ReadAhead {
    /// For chunks of at most `chunk_bytes` decoded bytes.
    fn new(chunk_bytes: u64) -> ReadAhead {
        ReadAhead {
            progress: AtomicUsize::new(0),
            wake_at: AtomicUsize::new(usize::MAX),
            next: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            window: usize::try_from(READ_AHEAD_BYTES / chunk_bytes.max(1))
                .unwrap_or(usize::MAX)
                .max(2),
        }
    }

    /// No threads: [`Ahead::reached`] does nothing.
    fn none(&self) -> Ahead<'_> {
        Ahead {
            state: self,
            threads: Vec::new(),
        }
    }

    /// Starts `n` threads in `scope` decoding `order` (from `dec`).
    fn start<'s, 'e: 's>(
        &'s self,
        scope: &'s std::thread::Scope<'s, 'e>,
        dec: &'s PageDecoder<'_>,
        order: &'s [(usize, u32, u64)],
        n: usize,
    ) -> Ahead<'s> {
        let threads = (0..n.min(order.len()))
            .filter_map(|i| {
                std::thread::Builder::new()
                    .name(format!("rex-ahead-{i}"))
                    .spawn_scoped(scope, move || self.run(dec, order))
                    .ok()
                    .map(|h| h.thread().clone())
            })
            .collect();
        Ahead {
            state: self,
            threads,
        }
    }

    fn run(&self, dec: &PageDecoder<'_>, order: &[(usize, u32, u64)]) {
        // Chunks of `order` whose first page the unit has reached.
        let mut reached = 0usize;
        loop {
            let j = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(&(first, seg, chunk)) = order.get(j) else {
                return;
            };
            loop {
                if self.stop.load(Ordering::Acquire) {
                    return;
                }
                let p = self.progress.load(Ordering::Acquire);
                while order.get(reached).is_some_and(|o| o.0 <= p) {
                    reached += 1;
                }
                if j < reached + self.window {
                    break;
                }
                // Wait for the unit to reach the chunk `window` chunks
                // before this one (woken by `Ahead::reached`; the timeout
                // covers a wake-up this thread asked for too late).
                // SeqCst here and in `reached`: each side stores then
                // loads the other's variable, which weaker orders may see
                // stale on both sides at once (the timeout would end it).
                let at = order[j - self.window].0;
                self.wake_at.fetch_min(at, Ordering::SeqCst);
                if self.progress.load(Ordering::SeqCst) < at {
                    std::thread::park_timeout(Duration::from_millis(5));
                }
            }
            if first > self.progress.load(Ordering::Acquire) {
                // An error is the unit's to report, when it reads the chunk.
                let _ = dec.warm(seg, chunk);
            }
        }
    }
}

impl Ahead<'_> {
    /// The unit is preparing page `k` of the plan.
    #[inline]
    fn reached(&self, k: usize) {
        if self.threads.is_empty() {
            return;
        }
        self.state.progress.store(k, Ordering::SeqCst);
        if k >= self.state.wake_at.load(Ordering::SeqCst) {
            self.state.wake_at.store(usize::MAX, Ordering::Relaxed);
            for t in &self.threads {
                t.unpark();
            }
        }
    }
}

impl Drop for Ahead<'_> {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Release);
        for t in &self.threads {
            t.unpark();
        }
    }
}

/// [`deduplicate`] itself, the RPS and PF mirrored to `mirrors`.
fn run<H: PatternHasher>(
    job: &DedupJob<'_>,
    hasher: H,
    mirrors: [Option<Mirror>; 2],
) -> Result<DedupOutput> {
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
    let ic = crate::l1::coalesce::open_referenced(job.batch, &job.clist.entries)?;

    let PagePlan {
        plan,
        drops,
        live_pages,
        full: full_flag,
    } = make_plan(job);
    if let Some(w) = job.xrefs.windows(2).find(|w| w[0].page >= w[1].page) {
        return Err(Error::Invalid(format!(
            "cross-rank references not ascending: page {:#x} before {:#x}",
            w[0].page, w[1].page
        )));
    }
    let mut xrefs = job.xrefs.iter().peekable();

    // Size the table for the most entries it can get, so that it never
    // grows: one per probed pattern, plus one per previous-version pattern
    // inserted (Δ only). Entries never exceed the unique patterns, so the
    // table is usually much emptier than its 3/4 load limit; sizing it
    // tighter than this bound would risk a growth (every entry re-hashed
    // through the resolver), sizing it looser only spreads the probes over
    // more memory.
    let with_prev = plan.iter().filter(|(_, _, prev)| prev.is_some()).count();
    let expected = (plan.len() + with_prev).saturating_mul(alpha as usize);
    // At most its ceiling, though: then it closes (module doc).
    let max_entries = usize::try_from(job.table_memory / ENTRY_BYTES).unwrap_or(usize::MAX);
    let table = DedupTable::with_hasher_threads(
        expected.min(max_entries).max(1024),
        hasher,
        job.format.encoding.threads,
    );
    let names = [
        object_name(job.generation, "rps"),
        object_name(job.generation, "pf"),
        object_name(job.generation, "ptab"),
    ];
    let fmt = &job.format;
    let mut rps = ChunkedWriter::create_with(
        job.dir.join(&names[0]),
        fmt.header(Kind::Rps, job.pattern_size, job.generation, base, 0),
        fmt.encoding,
    )?;
    let mut pf = ChunkedWriter::create_with(
        job.dir.join(&names[1]),
        fmt.header(Kind::Pf, 4, job.generation, 0, alpha),
        fmt.encoding,
    )?;
    let [rps_mirror, pf_mirror] = mirrors;
    if let Some(m) = rps_mirror {
        rps.mirror(m)?;
    }
    if let Some(m) = pf_mirror {
        pf.mirror(m)?;
    }
    // New pointers count from the pattern base (`base` < 2^32: the
    // manifest of the chain checked its pattern end).
    pf.set_next_new(base as u32);
    let mut unit = Unit {
        table,
        pattern_size: ps,
        generation: job.generation,
        base,
        next: base,
        // Not reallocated as it grows (so never twice its ceiling): a
        // reservation, whose pages the kernel provides as they are written
        // (if it cannot be had, the vector grows as usual).
        locs: {
            let mut v = Vec::new();
            let _ = v.try_reserve_exact(expected.min(max_entries));
            v
        },
        max_entries,
        ic: ic
            .iter()
            .map(|f| {
                f.as_ref()
                    .and_then(|f| {
                        let l = f.meta().layout;
                        Some((
                            l.data_off,
                            f.raw(l.data_off, usize::try_from(l.file_len - l.data_off).ok()?)?,
                        ))
                    })
                    .unwrap_or((0, &[]))
            })
            .collect(),
        chain: job.chain,
        chain_shared: shared && job.chain.is_some() && !full_flag,
        pf_prev: job.format.version == 2 && job.format.pf_prev,
        rps,
        rps_buf: Vec::with_capacity(FLUSH + ps),
        pf,
        pf_buf: Vec::with_capacity(FLUSH + 4 * alpha as usize),
        zero_ptr: None,
        scratch: [Scratch::default(), Scratch::default()],
        prev_res: Vec::with_capacity(alpha as usize),
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
            unindexed: 0,
            xref_pages: 0,
            seconds: 0.0,
            uploaded: Vec::new(),
            upload_wait_s: 0.0,
            upload_busy_s: 0.0,
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
    // Page k+1 is prepared (pass 1: hashes, prefetches) before page k is
    // committed (passes 2 and 3), so that its DeD-Table buckets arrive
    // while page k is being processed. Rebuilt old pages alternate between
    // two buffers, as a prepared page's bytes must outlive the next
    // page's preparation.
    let mut old_bufs = [
        vec![0u8; job.page_size as usize],
        vec![0u8; job.page_size as usize],
    ];
    let mut pending: Option<Pending<'_>> = None;
    let mut xref_pages: Vec<u64> = Vec::new();
    // How far each checkpoint's mapped pages have been given back
    // (`IcFile::release`): the unit's resident memory is then the table
    // and a window of each file, not every checkpoint of the batch (the
    // kernel maps 64 KiB around each fault, so superseded copies of pages
    // beside the ones read were mapped too).
    let mut released: Vec<u64> = ic
        .iter()
        .map(|f| f.as_ref().map_or(0, |f| f.meta().layout.data_off))
        .collect();
    // The old chain's RPS chunks are given back after the last page that
    // reads them (its previous version, or the old page itself for a
    // complete coalescence), as a restore does: the push's memory is then
    // the DeD-Table and the chunks the pages still to come need, not every
    // chunk of the lineage it decoded. (A page that reads nothing, or an
    // xref page counted and skipped, only keeps its chunks longer.)
    let chain_shared = unit.chain_shared;
    let decoder = job.chain.map(OpenChain::decoder);
    // A page another rank stores (an xref) reads nothing: not counted, so
    // that its chunks are neither kept for it nor decoded ahead for it
    // (helper-100).
    let xref_page = |page: u64| job.xrefs.binary_search_by_key(&page, |x| x.page).is_ok();
    let read_of = |(page, src, prev): &(u64, Src, Option<LivePage>)| match src {
        _ if xref_page(*page) => None,
        Src::Ic(_) => prev.filter(|_| chain_shared),
        Src::Old(lp) => Some(*lp),
    };
    let uses = decoder
        .as_ref()
        .and_then(|d| d.count_uses(&plan, read_of, job.format.encoding.threads));
    // The page whose commit is pending: what it read, to give back after.
    let mut pending_read: Option<LivePage> = None;
    let give_back = |unit: &mut Unit<'_, H>, slot: usize, read: Option<LivePage>| {
        // Its reader's slices of the chain go with the slot's previous
        // version; the page prepared after it keeps its own.
        unit.scratch[slot].prev.clear();
        if let (Some(lp), Some(d), Some(u)) = (read, &decoder, &uses) {
            // SAFETY: `uses` counted every page of the plan; each gives
            // back once, after its commit, with the slot's slices dropped;
            // the only slices of the chain alive then are those of the
            // page prepared next (counted, not given back yet), since the
            // unit's other reads (hits checked against old patterns, old
            // pages rebuilt into buffers) end within a call; one thread.
            unsafe { d.give_back(lp, u) };
        }
    };
    // The chunks pages read from the old chain, decoded ahead of the unit
    // on the other threads (see `ReadAhead`).
    let order = match (&decoder, &uses) {
        (Some(d), Some(u)) if job.format.encoding.threads > 1 => d.first_uses(u),
        _ => Vec::new(),
    };
    let ahead = ReadAhead::new(decoder.as_ref().map_or(1, PageDecoder::max_chunk_bytes));
    let loop_result = std::thread::scope(|s| -> Result<()> {
        let _ahead = match &decoder {
            Some(d) if !order.is_empty() => {
                ahead.start(s, d, &order, job.format.encoding.threads - 1)
            }
            _ => ahead.none(),
        };
        for (k, entry) in plan.iter().enumerate() {
            _ahead.reached(k);
            let (page, src, prev) = entry;
            let slot = k % 2;
            while xrefs.next_if(|x| x.page < *page).is_some() {}
            if xrefs.next_if(|x| x.page == *page).is_some() {
                // Another rank stores it: only its CRC (and zero pointers).
                if let Some(p) = pending.take() {
                    commit(&mut unit, 1 - slot, p, &old_bufs, &mut ptab)?;
                    give_back(&mut unit, 1 - slot, pending_read.take());
                }
                let crc = match src {
                    Src::Ic(e) => {
                        ic[e.chk as usize]
                            .as_ref()
                            .expect("referenced files are open")
                            .meta()
                            .page_crcs[e.pp as usize]
                    }
                    Src::Old(lp) => {
                        let chain = job.chain.expect("old pages come with their chain");
                        chain.gens[lp.layer as usize].ptable.page_crcs[lp.pos as usize]
                    }
                };
                unit.commit_xref(*page, crc, &mut ptab)?;
                xref_pages.push(*page);
                continue;
            }
            let next = match src {
                Src::Ic(e) => {
                    let f = ic[e.chk as usize]
                        .as_ref()
                        .expect("referenced files are open");
                    // Pages of a file come in ascending order: what lies well
                    // behind this one is read again only to confirm a hit.
                    let at = f.page_offset(e.pp as usize);
                    let done = &mut released[e.chk as usize];
                    if at >= *done + RELEASE_STEP + RELEASE_MARGIN {
                        f.release(*done, at - RELEASE_MARGIN);
                        *done = at - RELEASE_MARGIN;
                    }
                    let data = f.page(e.pp as usize)?;
                    unit.prepare(slot, data, *prev)?;
                    Pending::Ic {
                        page: *page,
                        file: e.chk,
                        data,
                        offset: f.page_offset(e.pp as usize),
                        crc: f.meta().page_crcs[e.pp as usize],
                    }
                }
                Src::Old(lp) => {
                    let chain = job.chain.expect("old pages come with their chain");
                    // Rebuild (and CRC-check) the page before trusting its pointers.
                    chain.read_page(*lp, &mut old_bufs[slot])?;
                    let crc = chain.gens[lp.layer as usize].ptable.page_crcs[lp.pos as usize];
                    // A page another rank stored has no pointers of this chain:
                    // its patterns are written without a source to confirm
                    // later hits against (they are never hits, only misses).
                    // So is a page of a chain with another pattern size (a
                    // complete coalescence that changes it): its old pointers
                    // do not name its new patterns.
                    let ptrs = if chain.xref(*lp).is_some()
                        || chain.manifest().pattern_size != job.pattern_size
                    {
                        std::borrow::Cow::Borrowed(&[][..])
                    } else {
                        chain.pointers(*lp)?
                    };
                    unit.prepare(slot, &old_bufs[slot], None)?;
                    Pending::Old {
                        page: *page,
                        ptrs,
                        crc,
                        buf: slot,
                    }
                }
            };
            let read = std::mem::replace(&mut pending_read, read_of(entry));
            if let Some(p) = pending.replace(next) {
                commit(&mut unit, 1 - slot, p, &old_bufs, &mut ptab)?;
                give_back(&mut unit, 1 - slot, read);
            }
        }
        if let Some(p) = pending.take() {
            let slot = (plan.len() + 1) % 2;
            commit(&mut unit, slot, p, &old_bufs, &mut ptab)?;
            give_back(&mut unit, slot, pending_read.take());
        }
        Ok(())
    });
    loop_result?;
    unit.out.table_bytes = unit.out.table_bytes.max(unit.table.memory_bytes() as u64);
    if !unit.rps_buf.is_empty() {
        unit.rps.write(&unit.rps_buf)?;
    }
    if !unit.pf_buf.is_empty() {
        unit.pf.write(&unit.pf_buf)?;
    }
    let mut out = unit.out;
    out.table_bytes = out
        .table_bytes
        .max(unit.table.memory_bytes() as u64 + unit.locs.len() as u64 * 8);
    out.patterns = unit.next - base;
    let (rps_len, rps_crc) = unit.rps.finish()?;
    let (pf_len, pf_crc) = unit.pf.finish()?;
    let (pt_len, pt_crc, pt_xxh3) =
        ptab.write(&job.dir.join(&names[2]), job.format.ptable_version)?;
    if xref_pages.len() != job.xrefs.len() {
        return Err(Error::Invalid(format!(
            "{} of {} cross-rank references name pages generation {} does not write",
            job.xrefs.len() - xref_pages.len(),
            job.xrefs.len(),
            job.generation
        )));
    }
    out.files = vec![
        FileEntry {
            role: Role::Rps,
            name: names[0].clone(),
            bytes: rps_len,
            crc32: rps_crc,
            xxh3: None,
        },
        FileEntry {
            role: Role::Pf,
            name: names[1].clone(),
            bytes: pf_len,
            crc32: pf_crc,
            xxh3: None,
        },
        FileEntry {
            role: Role::Ptable,
            name: names[2].clone(),
            bytes: pt_len,
            crc32: pt_crc,
            xxh3: Some(pt_xxh3),
        },
    ];
    if !job.xrefs.is_empty() {
        let name = object_name(job.generation, "xref");
        let xf = XrefFile {
            path: job.dir.join(&name),
            generation: job.generation,
            refs: job.xrefs.to_vec(),
        };
        let (bytes, crc32, xxh3) = xf.write(&xf.path)?;
        out.files.push(FileEntry {
            role: Role::Xref,
            name,
            bytes,
            crc32,
            xxh3: Some(xxh3),
        });
    }
    out.xref_pages = job.xrefs.len() as u64;
    out.seconds = started.elapsed().as_secs_f64();
    Ok(out)
}

/// Commits a prepared page (see [`Unit::commit`]).
fn commit<H: PatternHasher>(
    unit: &mut Unit<'_, H>,
    slot: usize,
    p: Pending<'_>,
    old_bufs: &[Vec<u8>; 2],
    ptab: &mut PTableDelta,
) -> Result<()> {
    match p {
        Pending::Ic {
            page,
            file,
            data,
            offset,
            crc,
        } => unit.commit(
            slot,
            page,
            PageSource::Ic {
                file,
                data,
                offset,
                crc,
            },
            ptab,
        ),
        Pending::Old {
            page,
            ptrs,
            crc,
            buf,
        } => unit.commit(
            slot,
            page,
            PageSource::Old {
                data: &old_bufs[buf],
                ptrs: &ptrs,
                crc,
            },
            ptab,
        ),
    }
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
