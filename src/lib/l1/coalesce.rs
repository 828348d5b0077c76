//! The Page Coalescer and its C-List (paper §3.2.1, Fig. 5a).
//!
//! From a batch of IC files the coalescer reads only headers and page
//! indexes, never page data, and keeps for every distinct page the entry of
//! its **last** copy in the batch: page number, the file it is in (`chk#`)
//! and its index position there (`pp`). Earlier copies are skipped without
//! ever being read, which is where coalescing saves work (the paper's Fig. 1).
//!
//! The build is a k-way merge of the files' sorted page indexes (a binary
//! heap keyed by page number), so it costs O(N log k) for N index entries in
//! k files: linear in the index for any realistic batch, with memory
//! proportional to the distinct pages (the output) rather than to N. The
//! output comes out sorted by page number, which the deduplication unit and
//! the P-Table merge rely on.
//!
//! Drops: a page is live after the batch iff its last write is newer than
//! every drop range covering it. Drop ranges are first flattened into
//! disjoint segments, each tagged with the newest file that dropped it, and
//! one cursor walks those segments beside the merge. The C-List also carries
//! the batch's *effective drops*: every dropped page not written again
//! afterwards, as ranges disjoint from the C-List pages, so that pages kept
//! from before the batch (in the P-Table) can be removed too. A FULL file
//! inside the batch supersedes everything before it: the C-List then starts
//! there and is marked `full` (the state before the batch is discarded).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::path::Path;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::format::ic::{DropRange, IcFile, IcMeta, IcWriter};

/// One C-List entry: where the last copy of a page lives in the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CListEntry {
    /// Page number.
    pub page: u64,
    /// Index of the file in the batch slice given to [`CList::build`] (`chk#`).
    pub chk: u32,
    /// Index position of the page in that file (`pp`).
    pub pp: u64,
}

/// Counts describing a coalesced batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CoalesceStats {
    /// Files in the batch.
    pub files: usize,
    /// Files superseded by a later FULL file in the batch.
    pub superseded_files: usize,
    /// Page copies carried by all files of the batch.
    pub pages_carried: u64,
    /// Distinct live pages after coalescing (C-List length).
    pub distinct_pages: u64,
    /// Page copies skipped: earlier copies of rewritten pages, pages dropped
    /// later in the batch, pages of superseded files.
    pub pages_skipped: u64,
    /// Drop ranges in the batch's files.
    pub drop_ranges_in: u64,
    /// Pages covered by the effective drops.
    pub pages_dropped: u64,
    /// Bytes read from the files to build the C-List (headers + indexes).
    pub meta_bytes_read: u64,
}

impl CoalesceStats {
    /// Share of carried page copies that coalescing skipped.
    pub fn skipped_share(&self) -> f64 {
        if self.pages_carried == 0 {
            0.0
        } else {
            self.pages_skipped as f64 / self.pages_carried as f64
        }
    }
}

/// The coalesced list of a batch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CList {
    /// Page size of the batch.
    pub page_size: u32,
    /// First and last seq of the batch.
    pub first_seq: u64,
    /// Last seq of the batch.
    pub last_seq: u64,
    /// The batch (from its last FULL file on) holds every live page: the
    /// state before the batch is discarded.
    pub full: bool,
    /// One entry per distinct live page, ascending by page number.
    pub entries: Vec<CListEntry>,
    /// Pages dropped in the batch and not written again afterwards:
    /// ascending, non-overlapping, disjoint from `entries`. Empty when `full`.
    pub drops: Vec<DropRange>,
    /// Counts.
    pub stats: CoalesceStats,
}

impl PageLayer for CList {
    fn layer_len(&self) -> usize {
        self.entries.len()
    }
    fn layer_page(&self, i: usize) -> u64 {
        self.entries[i].page
    }
    fn layer_drops(&self) -> &[DropRange] {
        &self.drops
    }
    fn layer_full(&self) -> bool {
        self.full
    }
}

impl CList {
    /// Builds the C-List of `batch`, files in ascending seq order (one chain:
    /// the caller has checked contiguity). Reads nothing: the metadata is
    /// already in memory.
    pub fn build(batch: &[IcMeta]) -> Result<CList> {
        let Some(first) = batch.first() else {
            return Err(Error::Invalid("cannot coalesce an empty batch".into()));
        };
        if batch.len() > u32::MAX as usize {
            return Err(Error::Invalid("batch has more than 2^32 files".into()));
        }
        for w in batch.windows(2) {
            if w[1].seq() <= w[0].seq() {
                return Err(Error::Invalid(format!(
                    "batch not in ascending seq order: {} (seq {}) after {} (seq {})",
                    w[1].path.display(),
                    w[1].seq(),
                    w[0].path.display(),
                    w[0].seq()
                )));
            }
        }
        let layers: Vec<&dyn PageLayer> = batch.iter().map(|m| m as &dyn PageLayer).collect();
        let merged = merge_layers(&layers);
        let start = merged.start;
        let live = &batch[start..];
        let full = merged.full;
        // A FULL file may change the page size; the files it supersedes
        // do not matter, the rest must agree with it.
        let page_size = live[0].header.page_size;
        for m in live {
            if m.header.page_size != page_size {
                return Err(Error::chain(
                    &m.path,
                    format!(
                        "page size {} differs from the batch's {}",
                        m.header.page_size, page_size
                    ),
                ));
            }
        }

        let mut stats = CoalesceStats {
            files: batch.len(),
            superseded_files: start,
            ..Default::default()
        };
        for m in batch {
            stats.pages_carried += m.pages.len() as u64;
            stats.drop_ranges_in += m.drops.len() as u64;
            stats.meta_bytes_read += m.bytes_read;
        }
        let entries = merged.entries;
        let drops = merged.drops;
        stats.distinct_pages = entries.len() as u64;
        stats.pages_skipped = stats.pages_carried - stats.distinct_pages;
        stats.pages_dropped = drops.iter().map(|d| d.count).sum();
        Ok(CList {
            page_size,
            first_seq: first.seq(),
            last_seq: batch[batch.len() - 1].seq(),
            full,
            entries,
            drops,
            stats,
        })
    }

    /// Number of distinct pages.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the C-List holds no page.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Writes the coalesced batch as one IC file at `out`: every C-List page
    /// copied from its last copy (CRC-checked), the effective drops, `seq` and
    /// time of the batch's last file, FULL when the batch starts FULL.
    pub fn write_ic(&self, batch: &[IcMeta], out: &Path) -> Result<()> {
        let opened = open_referenced(batch, &self.entries)?;
        let last = &batch[batch.len() - 1];
        let mut w = IcWriter::create(
            out,
            self.page_size,
            last.seq(),
            self.full,
            last.header.time_ns,
            self.entries.iter().map(|e| e.page).collect(),
            self.drops.clone(),
        )?;
        for e in &self.entries {
            let f = opened[e.chk as usize]
                .as_ref()
                .expect("referenced files are open");
            w.push_page(f.page(e.pp as usize)?)?;
        }
        w.finish()
    }
}

/// Anything that, like an IC file, says which pages it carries (ascending),
/// which it drops, and whether it holds every live page. IC files and the
/// P-Table deltas of L2 generations are both layers, so one merge serves the
/// coalescer, the live P-Table of a chain and the L1 + L2 restore.
pub trait PageLayer {
    /// Number of carried pages.
    fn layer_len(&self) -> usize;
    /// The `i`-th carried page; strictly ascending in `i`.
    fn layer_page(&self, i: usize) -> u64;
    /// Dropped ranges, ascending, disjoint from the carried pages.
    fn layer_drops(&self) -> &[DropRange];
    /// Whether the layer holds every live page (supersedes older layers).
    fn layer_full(&self) -> bool;
}

impl PageLayer for IcMeta {
    fn layer_len(&self) -> usize {
        self.pages.len()
    }
    fn layer_page(&self, i: usize) -> u64 {
        self.pages[i]
    }
    fn layer_drops(&self) -> &[DropRange] {
        &self.drops
    }
    fn layer_full(&self) -> bool {
        self.is_full()
    }
}

/// The result of merging layers: the newest copy of every live page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Merged {
    /// Index of the newest FULL layer (0 when none): layers before it are
    /// superseded.
    pub start: usize,
    /// Whether layer `start` is FULL.
    pub full: bool,
    /// One entry per live page, ascending; `chk` indexes the given layers.
    pub entries: Vec<CListEntry>,
    /// Effective drops, disjoint from `entries`; empty when `full`.
    pub drops: Vec<DropRange>,
}

/// Merges `layers` (oldest first): for each live page, the layer holding
/// its newest copy and the page's position there. See the module doc.
pub fn merge_layers(layers: &[&dyn PageLayer]) -> Merged {
    let start = layers.iter().rposition(|m| m.layer_full()).unwrap_or(0);
    let live = &layers[start..];
    let full = live.first().is_some_and(|l| l.layer_full());
    let segments = drop_segments(live);
    let mut seg = 0usize;

    let mut heap: BinaryHeap<Reverse<(u64, u32)>> = live
        .iter()
        .enumerate()
        .filter(|(_, m)| m.layer_len() > 0)
        .map(|(i, m)| Reverse((m.layer_page(0), i as u32)))
        .collect();
    let mut cursor = vec![0usize; live.len()];
    let upper = live.iter().map(|m| m.layer_len()).max().unwrap_or(0);
    let mut entries = Vec::with_capacity(upper);

    while let Some(Reverse((page, file))) = heap.pop() {
        // All heads equal to `page` pop in ascending layer order; the last
        // one popped holds the newest copy.
        let mut winner = file;
        advance(&mut heap, &mut cursor, live, file);
        while let Some(&Reverse((p, f))) = heap.peek() {
            if p != page {
                break;
            }
            heap.pop();
            winner = f;
            advance(&mut heap, &mut cursor, live, f);
        }
        while seg < segments.len() && segments[seg].end <= page {
            seg += 1;
        }
        let dropped_later =
            seg < segments.len() && segments[seg].first <= page && segments[seg].newest > winner;
        if !dropped_later {
            entries.push(CListEntry {
                page,
                chk: winner + start as u32,
                pp: cursor[winner as usize] as u64 - 1,
            });
        }
    }
    entries.shrink_to_fit();
    let drops = if full {
        Vec::new()
    } else {
        subtract_pages(&segments, &entries)
    };
    Merged {
        start,
        full,
        entries,
        drops,
    }
}

/// Opens (memory-maps) the files of `batch` that `entries` reference.
pub fn open_referenced(batch: &[IcMeta], entries: &[CListEntry]) -> Result<Vec<Option<IcFile>>> {
    let mut used = vec![false; batch.len()];
    for e in entries {
        used[e.chk as usize] = true;
    }
    batch
        .iter()
        .zip(used)
        .map(|(m, u)| {
            if u {
                IcFile::open(&m.path).map(Some)
            } else {
                Ok(None)
            }
        })
        .collect()
}

fn advance(
    heap: &mut BinaryHeap<Reverse<(u64, u32)>>,
    cursor: &mut [usize],
    live: &[&dyn PageLayer],
    f: u32,
) {
    let i = f as usize;
    cursor[i] += 1;
    if cursor[i] < live[i].layer_len() {
        heap.push(Reverse((live[i].layer_page(cursor[i]), f)));
    }
}

/// A maximal run of dropped pages with the newest file that dropped each.
#[derive(Clone, Copy, Debug)]
struct Segment {
    first: u64,
    end: u64,
    newest: u32,
}

/// Flattens the drop ranges of `files` into disjoint ascending segments,
/// each tagged with the newest file (index into `files`) dropping it.
fn drop_segments(files: &[&dyn PageLayer]) -> Vec<Segment> {
    let mut events: Vec<(u64, bool, u32)> = Vec::new(); // (page, is_end, file)
    for (i, m) in files.iter().enumerate() {
        for d in m.layer_drops() {
            events.push((d.first, false, i as u32));
            events.push((d.end(), true, i as u32));
        }
    }
    if events.is_empty() {
        return Vec::new();
    }
    // Order among events at one page does not matter: the segment before a
    // page is emitted at its first event, before any event there is applied.
    events.sort_unstable_by_key(|&(p, _, _)| p);
    let mut active: BTreeMap<u32, u32> = BTreeMap::new();
    let mut out: Vec<Segment> = Vec::new();
    let mut prev = events[0].0;
    for (p, is_end, f) in events {
        if p > prev
            && let Some((&newest, _)) = active.last_key_value()
        {
            match out.last_mut() {
                Some(s) if s.end == prev && s.newest == newest => s.end = p,
                _ => out.push(Segment {
                    first: prev,
                    end: p,
                    newest,
                }),
            }
        }
        prev = p;
        if is_end {
            if let Some(c) = active.get_mut(&f) {
                *c -= 1;
                if *c == 0 {
                    active.remove(&f);
                }
            }
        } else {
            *active.entry(f).or_insert(0) += 1;
        }
    }
    out
}

/// The union of `segments` minus the pages of `entries` (both ascending), as
/// drop ranges.
fn subtract_pages(segments: &[Segment], entries: &[CListEntry]) -> Vec<DropRange> {
    let mut out: Vec<DropRange> = Vec::new();
    let mut push = |first: u64, end: u64| {
        if end <= first {
            return;
        }
        match out.last_mut() {
            Some(d) if d.end() == first => d.count += end - first,
            _ => out.push(DropRange {
                first,
                count: end - first,
            }),
        }
    };
    let mut e = 0usize;
    for s in segments {
        while e < entries.len() && entries[e].page < s.first {
            e += 1;
        }
        let mut from = s.first;
        while e < entries.len() && entries[e].page < s.end {
            push(from, entries[e].page);
            from = entries[e].page + 1;
            e += 1;
        }
        push(from, s.end);
    }
    out
}
