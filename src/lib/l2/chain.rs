//! The L2 checkpoint chain: generations, their manifests, and reading pages
//! back out of them (paper §3.3, Fig. 6).
//!
//! A generation exists only through a valid manifest. [`ChainIndex`] reads
//! every manifest of a store and keeps the valid ones (reporting the rest);
//! [`OpenChain`] opens the files of one generation's lineage, from the
//! chain's base (full RPS) to it, checks each file against its manifest, and
//! serves pages: the live P-Table is the layered merge of the generations'
//! P-Table deltas (see [`crate::l1::coalesce::merge_layers`]), and a page is
//! rebuilt by dereferencing its `alpha` pointers into the chain's pattern
//! space, then checked against the CRC its P-Table delta recorded.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::format::chunked::{ChunkPool, ChunkedFile, Coding, Kind};
use crate::format::ic::{ChainId, DropRange};
use crate::format::manifest::{
    FileEntry, Manifest, Role, manifest_name, parse_manifest_name, stray_manifest_name,
};
use crate::format::pointer_coding::HOLE;
use crate::format::ptable::PTableDelta;
use crate::format::xref::{Xref, XrefFile};
use crate::l1::coalesce::{CListEntry, PageLayer, merge_layers};
use crate::store::Store;

/// The valid manifests found in a store.
#[derive(Debug, Default)]
pub struct ChainIndex {
    /// Valid manifests by generation.
    pub manifests: BTreeMap<u64, Manifest>,
    /// Manifests that could not be read or are invalid, with the reason
    /// (one a remote server fails to send fails the load instead).
    pub invalid: Vec<(u64, Error)>,
    /// The generations [`overlaid_with`](Self::overlaid_with) took from
    /// L1's copy alone: a push interrupted before its L2 manifest, which
    /// L2 never published.
    pub unpublished: std::collections::BTreeSet<u64>,
}

/// The generations of `ms` (ascending) that are out of order, each with
/// the valid generation below it ([`ChainIndex::out_of_order`]); `damaged`
/// lists the generation numbers whose manifest is there but invalid. The
/// walk compares every chain base with the nearest generation below it
/// that is itself in order, whatever the numbers between (helper-90:
/// another job's generations copied in above a gap were never compared),
/// and a run found out of order stays so above it (its later generations
/// are as foreign). Δ generations are not compared: the link to their
/// parent is (`check_link`: the same run), which tells which of the two is
/// foreign, where a comparison in time would blame the upper one (this
/// job's Δ above another job's base copied in under its parent's number).
/// A Δ whose parent is no generation of its run taken here (another job's
/// Δ copied in) is left to that check, and is not the generation below the
/// next ones (helper-92: another job's Δ and FULL generations copied in
/// together passed, the FULL compared with the Δ of its own run). Nor is a
/// chain base compared across a damaged manifest: the push compared it
/// with that generation, which may have been newer than the one below in
/// time alone (nodes whose clocks differ: helper-91).
fn out_of_order_pairs<'a>(
    ms: impl Iterator<Item = &'a Manifest>,
    damaged: &std::collections::BTreeSet<u64>,
) -> Vec<(&'a Manifest, &'a Manifest)> {
    let mut below: Option<&Manifest> = None;
    let mut taken: BTreeMap<u64, Option<ChainId>> = BTreeMap::new();
    let mut foreign: Vec<ChainId> = Vec::new();
    let mut bad = Vec::new();
    for m in ms {
        if let Some(p) = m.parent {
            if taken.get(&p).is_some_and(|r| *r == m.chain_id) {
                taken.insert(m.generation, m.chain_id);
                below = Some(m);
            }
            continue;
        }
        if let Some(b) = below
            && let (Some(run), Some(b_run)) = (m.chain_id, b.chain_id)
            && run != b_run
            && (foreign.contains(&run)
                || damaged
                    .range(b.generation + 1..m.generation)
                    .next()
                    .is_none()
                    && !follows(m, b))
        {
            if !foreign.contains(&run) {
                foreign.push(run);
            }
            bad.push((m, b));
            continue;
        }
        taken.insert(m.generation, m.chain_id);
        below = Some(m);
    }
    bad
}

/// Whether generation `m`, of another run than generation `b` below it,
/// is one a push could have published on it. A push takes a batch whose
/// first checkpoint continues the run of L2's newest generation, or is a
/// FULL one taken after that generation's newest checkpoint (§3.1.6). So
/// `m` follows when its batch coalesced checkpoints of `b`'s run after
/// `b`'s (its `other_runs`: a 128-bit run id no other job has, and seqs
/// after `b`'s last; helper-92: a copy of the job that forked before `b`
/// names the run too), or when the first checkpoint of its batch (the
/// lowest seq of its `other_runs` and `seq_times`: a push on another run's
/// generation records only its batch's) is newer than `b`'s newest. Not
/// the time of `m`'s own newest checkpoint: a clock stepped back within
/// the new run after its FULL checkpoint made a generation the push
/// published refused by every command afterwards (helper-89); nor its
/// run's first: another run may come first in the batch (helper-91). A
/// manifest with neither (older writers) is judged by its newest
/// checkpoint.
fn follows(m: &Manifest, b: &Manifest) -> bool {
    let first = m
        .other_runs
        .iter()
        .map(|o| (o.seq, o.time_ns))
        .chain(m.seq_times.iter().copied())
        .min_by_key(|&(q, _)| q)
        .map_or(m.time_ns, |(_, t)| t);
    m.other_runs
        .iter()
        .any(|o| Some(o.chain_id) == b.chain_id && o.seq > b.last_seq)
        || first > b.time_ns
}

/// Why generation `m` cannot follow generation `b` below it
/// ([`ChainIndex::out_of_order`]).
pub fn out_of_order_text(m: &Manifest, b: &Manifest) -> String {
    format!(
        "generation {} (seq {}, of another run) was not pushed on generation {} below it (seq {}): the first checkpoint of its batch is not newer than that generation's newest, nor does the batch continue its run (or its run was found so below): an older state under a newer number, which no push of one job makes (another job's generation, or an older run's, copied in?); remove its files if they are not this job's",
        m.generation, m.last_seq, b.generation, b.last_seq
    )
}

impl ChainIndex {
    /// Reads every manifest in `store`.
    pub fn load(store: &dyn Store) -> Result<ChainIndex> {
        Self::load_listed(store, &store.list()?)
    }

    /// [`load`](Self::load) from `objects`, the store's listing taken by
    /// the caller.
    pub fn load_listed(
        store: &dyn Store,
        objects: &[crate::store::ObjectInfo],
    ) -> Result<ChainIndex> {
        let mut idx = ChainIndex::default();
        for o in objects {
            let Some(g) = parse_manifest_name(&o.name) else {
                if let Some(g) = stray_manifest_name(&o.name) {
                    let at = store.local_root().map_or_else(
                        || format!("{}/{}", store.describe(), o.name).into(),
                        |r| r.join(&o.name),
                    );
                    let what = if g == u64::MAX && o.name != manifest_name(g) {
                        "a manifest name whose number lies beyond 2^64 - 1, the last generation"
                            .to_string()
                    } else {
                        format!(
                            "a manifest under another name than generation {g}'s ({})",
                            manifest_name(g)
                        )
                    };
                    idx.invalid.push((
                        g,
                        Error::chain(
                            at,
                            format!("{what}: which manifest is the generation's cannot be told; remove or rename it"),
                        ),
                    ));
                }
                continue;
            };
            match read_manifest(store, g) {
                Ok(m) => {
                    idx.manifests.insert(g, m);
                }
                // A manifest the server fails to send (an S3 error after
                // every retry, access refused) says nothing of the
                // generation: the load fails with it. Taken for an invalid
                // manifest, it made a `--fallback` restore, and every
                // librex restart, give the generation before with exit 0
                // while the server was overloaded (helper-83), and a push's
                // recovery write the committed manifest again.
                Err(e) if e.is_remote_failure() => return Err(e),
                Err(e) => idx.invalid.push((g, e)),
            }
        }
        Ok(idx)
    }

    /// The generations of the chain based at generation `base`, ascending.
    pub fn chain(&self, base: u64) -> impl Iterator<Item = &Manifest> {
        self.manifests
            .values()
            .filter(move |m| m.chain_base == base)
    }

    /// The newest valid manifest.
    pub fn newest(&self) -> Option<&Manifest> {
        self.manifests.values().next_back()
    }

    /// The manifest of generation `g`.
    pub fn get(&self, g: u64) -> Option<&Manifest> {
        self.manifests.get(&g)
    }

    /// The manifests from `g`'s chain base to `g`, oldest first, following
    /// parent links; an error names the first missing or invalid link.
    pub fn lineage(&self, g: u64, store: &dyn Store) -> Result<Vec<Manifest>> {
        let mut out = Vec::new();
        let mut cur = Some(g);
        while let Some(c) = cur {
            let Some(m) = self.manifests.get(&c) else {
                let why = self
                    .invalid
                    .iter()
                    .find(|(x, _)| *x == c)
                    .map(|(_, e)| format!(": {e}"))
                    .unwrap_or_else(|| ": no manifest".into());
                let what = if c == g {
                    format!("generation {g} is not valid{why}")
                } else {
                    format!("generation {g} needs generation {c}, which is not valid{why}")
                };
                return Err(Error::chain(store.describe(), what));
            };
            match out.last() {
                Some(child) => {
                    check_link(store, m, child)?;
                    self.check_no_sibling(store, m, child)?;
                }
                None => self.check_not_stale(store, m)?,
            }
            out.push(m.clone());
            cur = m.parent;
        }
        out.reverse();
        Ok(out)
    }

    /// A Δ generation's parent is the newest generation of its L2 chain
    /// before it (FORMAT.md §3.1.2): a push builds on the newest, and
    /// recovery deletes a generation it rolls back. A valid generation of
    /// the chain between the two makes `child` a second branch of the
    /// chain, whose state is older than its number says (helper-74: a copy
    /// of generation 3 numbered 5 with parent 2 restored generation 3's
    /// state as the newest, exit 0, and verify said ok).
    fn check_no_sibling(
        &self,
        store: &dyn Store,
        parent: &Manifest,
        child: &Manifest,
    ) -> Result<()> {
        let between = (parent.generation + 1)..child.generation;
        // Nor an invalid manifest between them: no push leaves one there
        // (manifests are written whole, and recovery deletes what it rolls
        // back), so it is a damaged generation of the chain or something
        // put there, and the child may be a second branch under it
        // (helper-111: generation 3 copied as 5 with parent 2, the
        // manifests of 3 and 4 damaged, restored generation 3's state as
        // the newest, exit 0).
        if let Some((h, e)) = self.invalid.iter().find(|(h, _)| between.contains(h)) {
            return Err(Error::chain(
                store.describe(),
                format!(
                    "generation {} continues generation {}, but generation {h} between them has an invalid manifest ({}): a Δ generation's parent is the newest generation of its chain before it, so the chain's state between them is unknown",
                    child.generation,
                    parent.generation,
                    e.report()
                ),
            ));
        }
        match self
            .manifests
            .range(between)
            .find(|(_, h)| h.chain_base == child.chain_base)
        {
            None => Ok(()),
            Some((h, _)) => Err(Error::chain(
                store.describe(),
                format!(
                    "generation {} continues generation {}, but generation {h} of the same L2 chain lies between them (a Δ generation's parent is the newest generation of its chain before it): two branches of one chain",
                    child.generation, parent.generation
                ),
            )),
        }
    }

    /// Within a run, a higher generation number holds a later state: `m`
    /// may not end before an older generation of its run does (FORMAT.md
    /// §3.1.2). Runs with a chain id only: checkpoints of version 1 carry
    /// none, and a restarted job's seqs began again under them (helper-74:
    /// a copy of the run's full generation 1 numbered 5 restored the run's
    /// oldest state as the newest, exit 0). A generation only L1's copy
    /// holds is no such older state: its push never published it, and its
    /// checkpoints are still pending in L1, where a restore from L1 and L2
    /// takes them after `m` (helper-76: a node whose push was killed before
    /// its L2 manifest came back after another node had pushed a full
    /// generation of L2's state, and its restore was refused).
    fn check_not_stale(&self, store: &dyn Store, m: &Manifest) -> Result<()> {
        if m.chain_id.is_none() {
            return Ok(());
        }
        match self.manifests.range(..m.generation).rev().find(|(g, h)| {
            !self.unpublished.contains(g)
                && crate::l1::same_run(h.chain_id, m.chain_id)
                && h.last_seq > m.last_seq
        }) {
            None => Ok(()),
            Some((h, o)) => Err(Error::chain(
                store.describe(),
                format!(
                    "generation {} of {} ends at seq {}, but the older generation {h} of the same run ends at seq {}: a stale state under a newer number",
                    m.generation,
                    crate::l1::run_name(m.chain_id),
                    m.last_seq,
                    o.last_seq
                ),
            )),
        }
    }

    /// The index a restore from L1 plus L2 uses: L2's valid manifests, and
    /// L1's copy of every generation L2 has no valid manifest for (a push
    /// interrupted between its two manifests, or an L2 manifest lost since).
    /// L2's invalid manifests that L1 makes good are dropped; the rest stay,
    /// so a newer invalid generation is still not passed over silently. So
    /// do L1's invalid manifests of generations neither place holds a valid
    /// one of (helper-40: L2's newest manifest lost and L1's copy of it
    /// damaged restored the generation before with exit 0, silently).
    pub fn overlaid_with(self, l1: &ChainIndex) -> ChainIndex {
        let mut manifests = self.manifests;
        let mut unpublished = self.unpublished;
        for (g, m) in &l1.manifests {
            if !manifests.contains_key(g) {
                manifests.insert(*g, m.clone());
                unpublished.insert(*g);
            }
        }
        let mut invalid: Vec<(u64, Error)> = self
            .invalid
            .into_iter()
            .filter(|(g, _)| !manifests.contains_key(g))
            .collect();
        for (g, e) in &l1.invalid {
            if !manifests.contains_key(g) && !invalid.iter().any(|(h, _)| h == g) {
                invalid.push((*g, e.again()));
            }
        }
        invalid.sort_by_key(|(g, _)| *g);
        ChainIndex {
            manifests,
            invalid,
            unpublished,
        }
    }

    /// The first valid generation of another run than the generation below
    /// it that no push could have published on that one, with that
    /// generation: an older state under a newer number. A push starts a new
    /// run's chain only on a FULL checkpoint newer than the checkpoint
    /// before it (§3.1.6; see `follows`), so no push of one job makes it:
    /// it is another job's generation, or an older run's, copied in
    /// (helper-87: another job's older FULL generation under the next
    /// number, or an L2 holding only another job's chain beside this job's
    /// L1 copy, was restored with exit 0, and a push pruned this job's L1
    /// copy for it). Each chain base is compared with the nearest
    /// generation below it that is in order, as the push compared them
    /// (see `out_of_order_pairs` for those not compared): generations
    /// further apart may be out of order in time with no foreign one among
    /// them (nodes whose clocks differ, a clock stepped back within a run:
    /// helper-88), and so may generations of one run; nor those without a
    /// chain identity.
    pub fn out_of_order(&self) -> Option<(&Manifest, &Manifest)> {
        out_of_order_pairs(self.manifests.values(), &self.damaged())
            .into_iter()
            .next()
    }

    /// The generation numbers whose manifest is there but invalid.
    fn damaged(&self) -> std::collections::BTreeSet<u64> {
        self.invalid
            .iter()
            .map(|(g, _)| *g)
            .filter(|g| !self.manifests.contains_key(g))
            .collect()
    }

    /// [`out_of_order`](Self::out_of_order) of this index overlaid with
    /// `other` (this one's manifest where both hold one), without building
    /// the overlay: a push's recovery and `verify` of L2 and L1's copy,
    /// which may each be in order alone (an L2 holding only another job's
    /// older chain beside this job's L1 copy).
    pub fn out_of_order_with<'a>(
        &'a self,
        other: &'a ChainIndex,
    ) -> Option<(&'a Manifest, &'a Manifest)> {
        let mut all: BTreeMap<u64, &Manifest> =
            other.manifests.iter().map(|(g, m)| (*g, m)).collect();
        all.extend(self.manifests.iter().map(|(g, m)| (*g, m)));
        let damaged = self
            .damaged()
            .into_iter()
            .chain(other.damaged())
            .filter(|g| !all.contains_key(g))
            .collect();
        out_of_order_pairs(all.into_values(), &damaged)
            .into_iter()
            .next()
    }

    /// Without the generations [`out_of_order`](Self::out_of_order) finds,
    /// each moved to the invalid manifests with why (`place` names where
    /// the index was read), so that a restore of the newest state stops on
    /// it, a `--fallback` one passes over it, and `verify` reports it.
    pub fn without_out_of_order(mut self, place: &str) -> ChainIndex {
        let bad: Vec<(u64, String)> = out_of_order_pairs(self.manifests.values(), &self.damaged())
            .into_iter()
            .map(|(m, b)| (m.generation, out_of_order_text(m, b)))
            .collect();
        for (g, why) in bad {
            self.manifests.remove(&g);
            self.unpublished.remove(&g);
            self.invalid.push((g, Error::chain(place, why)));
        }
        self.invalid.sort_by_key(|(g, _)| *g);
        self
    }

    /// Without the generations of job generations after `committed` (an MPI
    /// job's rank: they never committed; `None`: nothing committed yet), and
    /// without the invalid manifests after the newest generation kept (a
    /// torn uncommitted generation; whether it committed is the job
    /// manifests' to say, and the caller checked them).
    pub fn committed(self, committed: Option<u64>) -> ChainIndex {
        self.keep(|m| {
            m.job_generation
                .is_none_or(|j| committed.is_some_and(|c| j <= c))
        })
    }

    /// [`committed`](Self::committed) up to job generation `j` when
    /// `Some(j)` (a rank of an MPI job), all of it when `None`.
    pub fn committed_if(self, job_committed: Option<u64>) -> ChainIndex {
        match job_committed {
            Some(j) => self.committed(Some(j)),
            None => self,
        }
    }

    /// Only the generations `keep` accepts, and the invalid manifests
    /// older than the newest of them.
    fn keep(self, keep: impl Fn(&Manifest) -> bool) -> ChainIndex {
        let manifests: BTreeMap<u64, Manifest> = self
            .manifests
            .into_iter()
            .filter(|(_, m)| keep(m))
            .collect();
        let newest = manifests.keys().next_back().copied();
        let invalid = self
            .invalid
            .into_iter()
            .filter(|(g, _)| newest.is_some_and(|n| *g < n))
            .collect();
        let unpublished = self
            .unpublished
            .into_iter()
            .filter(|g| manifests.contains_key(g))
            .collect();
        ChainIndex {
            manifests,
            invalid,
            unpublished,
        }
    }

    /// Without the generations that end after checkpoint `seq` (a restore
    /// of the state at `seq`, `--seq`), and without the invalid manifests
    /// after the newest generation kept: what they held is after `seq`, or
    /// the restore's exact-seq check refuses the state it finds instead.
    ///
    /// Seqs do not order runs (a job restarted by hand counts from 0
    /// again), so the state at `seq` is that of the newest run that had
    /// begun by then: a generation is left out when a newer generation of
    /// another run holds seqs from `seq` or before (helper-82: after a
    /// restart whose run was pushed, `--seq 2` gave the old run's state at
    /// 2 with exit 0 while the job's own seq 2 is coalesced into the new
    /// run's generation). Generations of no recorded run (older manifests)
    /// leave out nothing and are never left out this way.
    pub fn up_to_seq(self, seq: Option<u64>) -> ChainIndex {
        let Some(seq) = seq else {
            return self;
        };
        let mut begun: Vec<ChainId> = Vec::new();
        let mut superseded = std::collections::BTreeSet::new();
        for m in self.manifests.values().rev() {
            if let Some(run) = m.chain_id {
                if begun.iter().any(|b| *b != run) {
                    superseded.insert(m.generation);
                }
                if m.first_seq <= seq && !begun.contains(&run) {
                    begun.push(run);
                }
            }
        }
        self.keep(|m| m.last_seq <= seq && !superseded.contains(&m.generation))
    }

    /// Generations `<= g` in descending order (candidates for a fallback).
    pub fn older_than(&self, g: u64) -> impl Iterator<Item = &Manifest> {
        self.manifests.range(..g).rev().map(|(_, m)| m)
    }
}

fn check_link(store: &dyn Store, parent: &Manifest, child: &Manifest) -> Result<()> {
    let ok = child.chain_base == parent.chain_base
        && child.page_size == parent.page_size
        && child.pattern_size == parent.pattern_size
        && child.pattern_base == parent.pattern_end()
        && child.first_seq == parent.last_seq + 1
        && crate::l1::same_run(child.chain_id, parent.chain_id);
    if ok {
        Ok(())
    } else {
        Err(Error::chain(
            store.describe(),
            format!(
                "generation {} does not continue its parent {}: chain base {} vs {}, sizes {}/{} vs {}/{}, pattern base {} vs {}, seqs {}.. after ..{}, {} vs {}",
                child.generation,
                parent.generation,
                child.chain_base,
                parent.chain_base,
                child.page_size,
                child.pattern_size,
                parent.page_size,
                parent.pattern_size,
                child.pattern_base,
                parent.pattern_end(),
                child.first_seq,
                parent.last_seq,
                crate::l1::run_name(child.chain_id),
                crate::l1::run_name(parent.chain_id)
            ),
        ))
    }
}

/// Reads and checks generation `g`'s manifest.
pub fn read_manifest(store: &dyn Store, g: u64) -> Result<Manifest> {
    let name = manifest_name(g);
    let bytes = store.read(&name)?;
    let path = Path::new(&store.describe()).join(&name);
    let m = Manifest::decode(&path, &bytes)?;
    if m.generation != g {
        return Err(Error::corrupt(
            &path,
            0,
            "generation",
            format!(
                "manifest says generation {}, its name says {g}",
                m.generation
            ),
        ));
    }
    Ok(m)
}

/// The files of one generation, opened and checked against its manifest.
#[derive(Debug)]
pub struct OpenGeneration {
    /// The manifest.
    pub manifest: Manifest,
    /// The RPS (full or Δ).
    pub rps: ChunkedFile,
    /// The Pointer File.
    pub pf: ChunkedFile,
    /// The P-Table delta.
    pub ptable: PTableDelta,
    /// The cross-rank references (an MPI job's generation): the position
    /// in the P-Table delta of each page another rank stores, ascending.
    pub xrefs: Vec<(u64, Xref)>,
    /// The Xref file, when there is one (for errors).
    pub xref_path: Option<std::path::PathBuf>,
}

/// Where the pages of other ranks are read from (an MPI job's collective
/// push stores a page shared by several ranks once, docs/FORMAT.md §3.9):
/// set on an [`OpenChain`] by whoever knows the job's location.
pub trait XrefSource: std::fmt::Debug + Send + Sync {
    /// Writes the page `x` names, rebuilt from the owner's chain and checked
    /// against the owner's own P-Table CRC, into `out` (one page).
    fn read(&self, x: &Xref, out: &mut [u8]) -> Result<()>;
}

impl PageLayer for OpenGeneration {
    fn layer_len(&self) -> usize {
        self.ptable.pages.len()
    }
    fn layer_page(&self, i: usize) -> u64 {
        self.ptable.pages[i]
    }
    fn layer_drops(&self) -> &[DropRange] {
        &self.ptable.drops
    }
    fn layer_full(&self) -> bool {
        self.ptable.full
    }
}

fn entry(m: &Manifest, role: Role) -> Result<&FileEntry> {
    m.file(role).ok_or_else(|| {
        Error::Invalid(format!(
            "generation {} manifest has no {role:?} file",
            m.generation
        ))
    })
}

/// A hole of a Pointer File in coding 2, as the payload holds it.
const HOLE_LE: [u8; 4] = HOLE.to_le_bytes();

/// The local path of file `e` of generation `m`. One a valid manifest
/// names and the store does not hold is a chain not whole: bad data (exit
/// 3, as a bucket's missing object is), not an I/O failure (helper-72: exit
/// 1, "no such object").
fn open_named(store: &dyn Store, m: &Manifest, e: &FileEntry) -> Result<std::path::PathBuf> {
    store.open_local(&e.name).map_err(|err| match err {
        Error::Io { path, source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            Error::chain(
                path,
                format!(
                    "missing: generation {}'s manifest names it ({}, {} bytes)",
                    m.generation, e.name, e.bytes
                ),
            )
        }
        err => err,
    })
}

impl OpenGeneration {
    /// Whether the Pointer File refers to previous versions (coding 2):
    /// its holes are to be filled.
    fn pf_prev(&self) -> bool {
        self.pf.header().coding == Coding::Pointers { prev: true }
    }

    /// Opens generation `m`'s files from `store` and checks every header
    /// field and size against the manifest.
    pub fn open(store: &dyn Store, m: &Manifest) -> Result<OpenGeneration> {
        let open = |role: Role| -> Result<std::path::PathBuf> {
            let e = entry(m, role)?;
            let p = open_named(store, m, e)?;
            let len = std::fs::metadata(&p).map(|md| md.len()).unwrap_or(0);
            if len != e.bytes {
                return Err(Error::corrupt(
                    &p,
                    len.min(e.bytes),
                    "file length",
                    format!(
                        "file is {len} bytes, manifest of generation {} says {}",
                        m.generation, e.bytes
                    ),
                ));
            }
            // The P-Table and Xref file: their CRC-32 depends on their
            // length alone (manifest module doc), their XXH3 binds them.
            if let (Some(got), Some(want)) = (e.xxh3_mismatch(&p)?, e.xxh3) {
                return Err(Error::corrupt(
                    &p,
                    0,
                    "file",
                    format!(
                        "{} has XXH3 {got:016x}, the manifest of generation {} says {want:016x}: another file of the same length",
                        e.name, m.generation
                    ),
                ));
            }
            Ok(p)
        };
        // A remote store may fetch an RPS or Pointer File in part
        // (`Store::open_chunked`); otherwise it is mapped whole.
        let chunked = |role: Role, kind: Kind| -> Result<ChunkedFile> {
            let e = entry(m, role)?;
            match store.open_chunked(&e.name, kind)? {
                Some(f) if f.file_len() != e.bytes => Err(Error::corrupt(
                    f.path(),
                    f.file_len().min(e.bytes),
                    "file length",
                    format!(
                        "file is {} bytes, manifest of generation {} says {}",
                        f.file_len(),
                        m.generation,
                        e.bytes
                    ),
                )),
                Some(f) => Ok(f),
                None => ChunkedFile::open(open(role)?, kind),
            }
        };
        let rps = chunked(Role::Rps, Kind::Rps)?;
        let rps_path = rps.path().to_path_buf();
        let h = *rps.header();
        if h.generation != m.generation
            || h.record_size != m.pattern_size
            || h.first_record != m.pattern_base
            || h.record_count != m.patterns
        {
            return Err(Error::corrupt(
                &rps_path,
                0,
                "header",
                format!(
                    "RPS header (generation {}, pattern size {}, first pattern {}, {} patterns) disagrees with the manifest (generation {}, {}, {}, {})",
                    h.generation,
                    h.record_size,
                    h.first_record,
                    h.record_count,
                    m.generation,
                    m.pattern_size,
                    m.pattern_base,
                    m.patterns
                ),
            ));
        }
        let pf = chunked(Role::Pf, Kind::Pf)?;
        let pf_path = pf.path().to_path_buf();
        let h = *pf.header();
        let alpha = m.alpha();
        if h.generation != m.generation
            || h.record_size != 4
            || u64::from(h.aux) != alpha
            || h.record_count != m.dirty_pages * alpha
        {
            return Err(Error::corrupt(
                &pf_path,
                0,
                "header",
                format!(
                    "Pointer File header (generation {}, record size {}, alpha {}, {} pointers) disagrees with the manifest (generation {}, 4, {alpha}, {} pages x {alpha})",
                    h.generation, h.record_size, h.aux, h.record_count, m.generation, m.dirty_pages
                ),
            ));
        }
        let pt_path = open(Role::Ptable)?;
        let ptable = PTableDelta::read(&pt_path)?;
        if ptable.generation != m.generation
            || ptable.page_size != m.page_size
            || ptable.pattern_size != m.pattern_size
            || ptable.pages.len() as u64 != m.dirty_pages
            || ptable.full != (m.parent.is_none())
        {
            return Err(Error::corrupt(
                &pt_path,
                0,
                "header",
                format!(
                    "P-Table (generation {}, {} pages, full {}) disagrees with the manifest (generation {}, {} pages, kind {:?})",
                    ptable.generation,
                    ptable.pages.len(),
                    ptable.full,
                    m.generation,
                    m.dirty_pages,
                    m.kind
                ),
            ));
        }
        let (xrefs, xref_path) = match m.file(Role::Xref) {
            None => (Vec::new(), None),
            Some(_) => {
                let p = open(Role::Xref)?;
                (open_xrefs(&p, m, &ptable)?, Some(p))
            }
        };
        Ok(OpenGeneration {
            manifest: m.clone(),
            rps,
            pf,
            ptable,
            xrefs,
            xref_path,
        })
    }

    /// The cross-rank reference of the page at `pos`, if it is one.
    #[inline]
    pub fn xref_at(&self, pos: u64) -> Option<&Xref> {
        if self.xrefs.is_empty() {
            return None;
        }
        self.xrefs
            .binary_search_by_key(&pos, |&(p, _)| p)
            .ok()
            .map(|i| &self.xrefs[i].1)
    }
}

/// Reads generation `m`'s Xref file and places every reference in its
/// P-Table delta: each must name a page the generation wrote, and another
/// rank than the generation's own.
fn open_xrefs(p: &Path, m: &Manifest, ptable: &PTableDelta) -> Result<Vec<(u64, Xref)>> {
    let x = XrefFile::read(p, ptable.pages.len() as u64)?;
    if x.generation != m.generation {
        return Err(Error::corrupt(
            p,
            16,
            "generation",
            format!(
                "Xref file says generation {}, its manifest {}",
                x.generation, m.generation
            ),
        ));
    }
    let own: Option<u32> = m.rank.as_deref().and_then(|r| r.parse().ok());
    let mut out = Vec::with_capacity(x.refs.len());
    for (i, r) in x.refs.iter().enumerate() {
        let at = 64 + i as u64 * crate::format::xref::RECORD_LEN;
        let Ok(pos) = ptable.pages.binary_search(&r.page) else {
            return Err(Error::corrupt(
                p,
                at,
                "page",
                format!(
                    "page {:#x} is not written by generation {} (its P-Table delta does not list it)",
                    r.page, m.generation
                ),
            ));
        };
        if own == Some(r.owner_rank) {
            return Err(Error::corrupt(
                p,
                at + 8,
                "owner_rank",
                format!(
                    "page {:#x} refers to rank {}, the generation's own rank",
                    r.page, r.owner_rank
                ),
            ));
        }
        out.push((pos as u64, *r));
    }
    Ok(out)
}

/// A live page of a chain: where its pointers are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LivePage {
    /// Page number.
    pub page: u64,
    /// Index of the generation in [`OpenChain::gens`].
    pub layer: u32,
    /// Position of the page in that generation's P-Table delta (its
    /// pointers start at `pos * alpha` in the PF).
    pub pos: u64,
}

impl From<CListEntry> for LivePage {
    fn from(e: CListEntry) -> Self {
        LivePage {
            page: e.page,
            layer: e.chk,
            pos: e.pp,
        }
    }
}

/// One generation's lineage, opened: everything needed to rebuild its pages.
#[derive(Debug)]
pub struct OpenChain {
    /// The generations from the chain's base to the target, oldest first.
    pub gens: Vec<OpenGeneration>,
    /// `(first pointer, generation index)`, ascending, for pointer lookup.
    bases: Vec<(u64, usize)>,
    /// Where pages stored by other ranks are read from.
    xref_source: Option<Arc<dyn XrefSource>>,
    /// The buffers the lineage's RPS chunks (and, once
    /// [`pool_pointer_files`](Self::pool_pointer_files) ran, its Pointer
    /// File chunks) decode into.
    pool: Arc<ChunkPool>,
}

impl OpenChain {
    /// Opens the lineage of generation `g`.
    pub fn open(store: &dyn Store, index: &ChainIndex, g: u64) -> Result<OpenChain> {
        let lineage = index.lineage(g, store)?;
        // The small files first (P-Tables, Xref files): nothing is rebuilt
        // before every one of them is read, while a remote store's RPS and
        // Pointer Files stream in behind (`Store::open_chunked`) and would
        // share the link with them.
        for m in &lineage {
            for f in m
                .files
                .iter()
                .filter(|f| !matches!(f.role, Role::Rps | Role::Pf))
            {
                open_named(store, m, f)?;
            }
        }
        let gens = lineage
            .iter()
            .map(|m| OpenGeneration::open(store, m))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self::from_generations(gens))
    }

    /// Builds a chain from already opened generations (oldest first).
    pub fn from_generations(mut gens: Vec<OpenGeneration>) -> OpenChain {
        // The RPS chunks of the whole lineage share one pool of buffers,
        // which a full restore recycles from the chunks it is done with
        // (`PageDecoder::read_page_releasing`); the Pointer Files keep their
        // own mappings unless a restore asks otherwise
        // (`pool_pointer_files`).
        let pool = Arc::new(ChunkPool::default());
        for g in &mut gens {
            g.rps.decode_into_pool(pool.clone());
        }
        let bases = gens
            .iter()
            .enumerate()
            .filter(|(_, g)| g.manifest.patterns > 0)
            .map(|(i, g)| (g.manifest.pattern_base, i))
            .collect();
        OpenChain {
            gens,
            bases,
            xref_source: None,
            pool,
        }
    }

    /// Decodes the Pointer Files into the chain's pool too, so that a full
    /// restore gives each Pointer File chunk back after the last page whose
    /// pointers it holds, as it does RPS chunks
    /// ([`PageDecoder::count_uses`]): decoded, a lineage's Pointer Files
    /// are 4 bytes per pattern of every generation's dirty pages (an eighth
    /// of them with 32-byte patterns), more than half the image on a long
    /// chain. The price is that the chunk-use count and the
    /// rebuild each decode them, so a restore asks for it only past a
    /// memory budget. `false`, and nothing pooled, when a Pointer File
    /// refers to previous versions (format 4: a page's holes are filled
    /// from the Pointer Files of other pages' generations, which no count
    /// covers) or when a page's pointers would span chunks; a file with a
    /// chunk already decoded, or with chunks too small to pool, stays as it
    /// is (its chunks are then never released; `true` is returned even if
    /// that leaves none pooled). Call it before anything reads the chain.
    pub fn pool_pointer_files(&mut self) -> bool {
        if self.gens.iter().any(|g| {
            g.pf_prev()
                || !u64::from(g.pf.header().chunk_size).is_multiple_of(g.manifest.alpha() * 4)
        }) {
            return false;
        }
        for g in &mut self.gens {
            g.pf.decode_into_pool(self.pool.clone());
        }
        true
    }

    /// Bytes of the lineage's Pointer Files decoded: what a full restore
    /// holds of them when it does not release them.
    pub fn pointer_file_bytes(&self) -> u64 {
        self.gens
            .iter()
            .map(|g| {
                g.pf.len()
                    .saturating_mul(u64::from(g.pf.header().record_size))
            })
            .sum()
    }

    /// Reads the pages other ranks store through `source`.
    pub fn set_xref_source(&mut self, source: Arc<dyn XrefSource>) {
        self.xref_source = Some(source);
    }

    /// Whether any generation of the chain has cross-rank references.
    pub fn has_xrefs(&self) -> bool {
        self.gens.iter().any(|g| !g.xrefs.is_empty())
    }

    /// The cross-rank reference of live page `lp`, if it is one (its
    /// pointers are then zero and mean nothing).
    #[inline]
    pub fn xref(&self, lp: LivePage) -> Option<&Xref> {
        self.gens[lp.layer as usize].xref_at(lp.pos)
    }

    /// Reads page `lp`, which another rank stores (`x`), and checks it
    /// against this chain's own P-Table CRC.
    #[cold]
    fn read_xref(&self, lp: LivePage, x: &Xref, out: &mut [u8]) -> Result<()> {
        let g = &self.gens[lp.layer as usize];
        let path = g.xref_path.clone().unwrap_or_default();
        let Some(src) = &self.xref_source else {
            return Err(Error::chain(
                &path,
                format!(
                    "page {:#x} of generation {} is stored by rank {} (its generation {}): restore it with its job (`rexctl restore --rank`, or librex in the MPI job)",
                    lp.page, g.manifest.generation, x.owner_rank, x.owner_generation
                ),
            ));
        };
        src.read(x, out)?;
        let want = g.ptable.page_crcs[lp.pos as usize];
        let got = crc32fast::hash(out);
        if got != want {
            return Err(Error::corrupt(
                &path,
                0,
                "page",
                format!(
                    "page {:#x} read from rank {} (generation {}, page {:#x}) has CRC {got:#010x}, the P-Table of generation {} says {want:#010x}",
                    lp.page, x.owner_rank, x.owner_generation, x.owner_page, g.manifest.generation
                ),
            ));
        }
        Ok(())
    }

    /// The newest generation's manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.gens.last().expect("a chain has a generation").manifest
    }

    /// Pointers per page.
    pub fn alpha(&self) -> usize {
        self.manifest().alpha() as usize
    }

    /// End of the pattern space (first unused pointer).
    pub fn pattern_end(&self) -> u64 {
        self.manifest().pattern_end()
    }

    /// The live P-Table: every live page and where its pointers are.
    pub fn live_pages(&self) -> Vec<LivePage> {
        let layers: Vec<&dyn PageLayer> = self.gens.iter().map(|g| g as &dyn PageLayer).collect();
        merge_layers(&layers)
            .entries
            .into_iter()
            .map(LivePage::from)
            .collect()
    }

    /// Checks every chunk of every RPS and PF on `threads` threads, keeping
    /// nothing it decodes: chunks already verified are skipped, the others
    /// checked and left for a reader to decode again
    /// ([`ChunkedFile::check_chunk_at`]).
    pub fn check_all_parallel(&self, threads: usize) -> Result<()> {
        let files: Vec<&ChunkedFile> = self.gens.iter().flat_map(|g| [&g.rps, &g.pf]).collect();
        crate::format::chunked::check_all_parallel(&files, threads)
    }

    /// The `alpha` pointers of a live page, CRC-checked; a Pointer File
    /// that refers to previous versions (coding 2) has its holes filled
    /// from the page's previous versions (FORMAT.md §3.5.3). Each must lie
    /// in the pattern space of the generation that wrote the page, never
    /// a newer one's (§3.2.4): the chain's end alone would let a page of
    /// an older generation read patterns that did not exist when it was
    /// written (helper-59: `verify` refused such a chain, `restore` took
    /// it).
    pub fn pointers(&self, lp: LivePage) -> Result<Cow<'_, [u8]>> {
        let alpha = self.alpha() as u64;
        let g = &self.gens[lp.layer as usize];
        let raw = g.pf.records(lp.pos.saturating_mul(alpha), alpha)?;
        let ptrs = if g.pf_prev() && raw.chunks_exact(4).any(|p| p == HOLE_LE) {
            Cow::Owned(self.fill_holes(lp, raw)?)
        } else {
            Cow::Borrowed(raw)
        };
        let end = g.manifest.pattern_end();
        let beyond = |p: &[u8]| u64::from(u32::from_le_bytes(p.try_into().expect("4"))) >= end;
        // One pass without a branch per pointer; the position only on
        // failure. A page another rank stores has zero pointers, never read.
        let max = ptrs
            .chunks_exact(4)
            .map(|p| u32::from_le_bytes(p.try_into().expect("4")))
            .fold(0, u32::max);
        if u64::from(max) >= end && g.xref_at(lp.pos).is_none() {
            let i = ptrs.chunks_exact(4).position(beyond).unwrap_or(0) as u64;
            return Err(Error::corrupt(
                g.pf.path(),
                chunked_offset((lp.pos.saturating_mul(alpha) + i).saturating_mul(4)),
                "pointer",
                format!(
                    "page {:#x} of generation {}: pointer {} (position {i}) lies outside the generation's pattern space 0..{end}",
                    lp.page,
                    g.manifest.generation,
                    u32::from_le_bytes(ptrs[i as usize * 4..][..4].try_into().expect("4")),
                ),
            ));
        }
        Ok(ptrs)
    }

    /// `raw`, the pointers of live page `lp` with holes, with each hole
    /// replaced by the pointer at the same position of the page's previous
    /// version: its entry in the newest older generation of the lineage
    /// whose P-Table delta lists the page (FORMAT.md §3.5.3). That entry
    /// may have holes of its own, filled from the version before, and so
    /// on down the lineage. A hole with no version to fill it is an error
    /// (a page rebuilt from wrong pointers would fail its CRC anyway; this
    /// says why).
    fn fill_holes(&self, lp: LivePage, raw: &[u8]) -> Result<Vec<u8>> {
        let alpha = self.alpha() as u64;
        let mut out = raw.to_vec();
        let mut layer = lp.layer as usize;
        loop {
            let prev = self.gens[..layer]
                .iter()
                .enumerate()
                .rev()
                .find_map(|(l, g)| {
                    let pos = g.ptable.pages.binary_search(&lp.page).ok()? as u64;
                    Some((l, pos))
                })
                .filter(|&(l, pos)| self.gens[l].xref_at(pos).is_none());
            let Some((l, pos)) = prev else {
                let g = &self.gens[lp.layer as usize];
                return Err(Error::corrupt(
                    g.pf.path(),
                    chunked_offset(lp.pos.saturating_mul(alpha * 4)),
                    "pointer",
                    format!(
                        "page {:#x} of generation {} takes pointers from its previous version, and no older generation of the chain has one to give (generations {} and older searched)",
                        lp.page, g.manifest.generation, self.gens[layer].manifest.generation
                    ),
                ));
            };
            let g = &self.gens[l];
            let older = g.pf.records(pos * alpha, alpha)?;
            let mut left = false;
            for (o, p) in out.chunks_exact_mut(4).zip(older.chunks_exact(4)) {
                if o == HOLE_LE {
                    o.copy_from_slice(p);
                    left |= p == HOLE_LE;
                }
            }
            if !left || !g.pf_prev() {
                return Ok(out);
            }
            layer = l;
        }
    }

    /// The bytes of pattern `ptr`, CRC-checked and bounds-checked.
    #[inline]
    pub fn pattern(&self, ptr: u32) -> Result<&[u8]> {
        match self.pattern_if_verified(ptr) {
            Some(b) => Ok(b),
            None => self.pattern_checked(ptr),
        }
    }

    /// The bytes of pattern `ptr` if it lies in the pattern space and its
    /// chunk has already been verified; else `None` (then
    /// [`pattern`](Self::pattern) verifies the chunk or reports the
    /// problem). A chain has a handful of generations: a reverse linear scan
    /// finds the pointer's one.
    #[inline]
    pub fn pattern_if_verified(&self, ptr: u32) -> Option<&[u8]> {
        let p = u64::from(ptr);
        let &(b, i) = self.bases.iter().rev().find(|&&(b, _)| b <= p)?;
        self.gens[i].rps.record_if_verified(p - b)
    }

    #[cold]
    #[inline(never)]
    fn pattern_checked(&self, ptr: u32) -> Result<&[u8]> {
        let p = u64::from(ptr);
        let i = self.bases.partition_point(|&(b, _)| b <= p);
        if i > 0 {
            let g = &self.gens[self.bases[i - 1].1];
            let local = p - g.manifest.pattern_base;
            if local < g.manifest.patterns {
                return g.rps.record(local);
            }
        }
        Err(Error::chain(
            self.gens
                .last()
                .map(|g| g.pf.path().to_path_buf())
                .unwrap_or_default(),
            format!(
                "pointer {ptr} lies outside the chain's pattern space 0..{}",
                self.pattern_end()
            ),
        ))
    }

    /// Rebuilds live page `lp` into `out` (one page) and checks it against
    /// the CRC recorded when it was deduplicated.
    pub fn read_page(&self, lp: LivePage, out: &mut [u8]) -> Result<()> {
        if let Some(x) = self.xref(lp) {
            return self.read_xref(lp, x, out);
        }
        let ps = self.manifest().pattern_size as usize;
        let ptrs = self.pointers(lp)?;
        for (chunk, p) in out.chunks_exact_mut(ps).zip(ptrs.chunks_exact(4)) {
            let ptr = u32::from_le_bytes(p.try_into().expect("4 bytes"));
            chunk.copy_from_slice(self.pattern(ptr)?);
        }
        let g = &self.gens[lp.layer as usize];
        let want = g.ptable.page_crcs[lp.pos as usize];
        let got = crc32fast::hash(out);
        if got != want {
            return Err(Error::corrupt(
                g.pf.path(),
                chunked_offset(lp.pos * self.alpha() as u64 * 4),
                "page",
                format!(
                    "page {:#x} rebuilt from generation {} has CRC {got:#010x}, its P-Table says {want:#010x}",
                    lp.page, g.manifest.generation
                ),
            ));
        }
        Ok(())
    }
}

/// A whole chain, for rebuilding many pages at memory speed (a full
/// restore). Chunks are verified (CRC-checked and decoded) lazily, the
/// first time a page needs one, by whichever thread gets there first: a
/// restore decodes only the chunks live pages reference (patterns that
/// every later generation overwrote are never decoded) and overlaps the
/// decoding with rebuilding and writing pages on every core. A page is then
/// rebuilt from plain slices: one range check per pointer against the
/// current verified chunk, a fixed-size copy per pattern, and the page CRC.
/// Errors name the same files and offsets as [`OpenChain::read_page`],
/// which reports whatever the fast path could not use.
pub struct PageDecoder<'a> {
    chain: &'a OpenChain,
    /// Each generation with patterns, ascending by first pointer.
    segs: Vec<Seg<'a>>,
    ps: usize,
    alpha: usize,
}

/// How many pages still to be rebuilt use each RPS chunk of a chain, per
/// generation with patterns: what lets a full restore give a chunk's
/// decoded memory back after its last use
/// ([`PageDecoder::read_page_releasing`]), so that it holds the chunks the
/// pages still to come need, not every chunk of the lineage.
pub struct ChunkUses {
    counts: Vec<Vec<AtomicU64>>,
    /// The same for each generation's Pointer File chunks, per generation
    /// of the chain; empty when the Pointer Files are not pooled (then
    /// they are never released).
    pf: Vec<Vec<AtomicU64>>,
    /// For each RPS chunk (as `counts`), the index among the counted pages
    /// of the first page that uses it (`usize::MAX`: none): the order in
    /// which a reader going through the pages in order needs the chunks
    /// ([`PageDecoder::first_uses`]).
    first: Vec<Vec<usize>>,
}

impl ChunkUses {
    /// Uses not given back yet, over every chunk: 0 once every counted
    /// page has been rebuilt.
    pub fn outstanding(&self) -> u64 {
        self.counts
            .iter()
            .chain(&self.pf)
            .flatten()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }
}

thread_local! {
    /// The chunks of the page just rebuilt ([`PageDecoder::read_page_releasing`]).
    static USED: std::cell::RefCell<Vec<(u32, u64)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The patterns of one generation, for [`PageDecoder`].
#[derive(Clone, Copy)]
struct Seg<'a> {
    /// First pointer.
    lo: u64,
    /// Patterns.
    n: u64,
    rps: &'a ChunkedFile,
    /// log2 of the patterns per chunk.
    shift: u32,
}

/// The verified chunk a page rebuild is copying from: pointers
/// `lo .. lo + n`, whose patterns are `data`.
#[derive(Clone, Copy)]
struct Window<'a> {
    lo: u64,
    n: u64,
    data: &'a [u8],
    /// Which chunk: (segment, chunk of its RPS).
    at: (u32, u64),
}

impl OpenChain {
    /// A decoder over the chain's files, which verifies (and decodes) their
    /// chunks as pages need them.
    pub fn decoder(&self) -> PageDecoder<'_> {
        let segs = self
            .bases
            .iter()
            .map(|&(lo, i)| {
                let g = &self.gens[i];
                Seg {
                    lo,
                    n: g.manifest.patterns,
                    rps: &g.rps,
                    shift: g.rps.records_per_chunk_shift(),
                }
            })
            .collect();
        PageDecoder {
            chain: self,
            segs,
            ps: self.manifest().pattern_size as usize,
            alpha: self.alpha(),
        }
    }
}

impl PageDecoder<'_> {
    /// Page size.
    pub fn page_size(&self) -> usize {
        self.ps * self.alpha
    }

    /// Rebuilds live page `lp` into `out` (one page), checks it against the
    /// CRC its P-Table delta recorded, and returns that CRC.
    pub fn read_page(&self, lp: LivePage, out: &mut [u8]) -> Result<u32> {
        self.rebuild(lp, out, |_| {}).map(|(crc, _)| crc)
    }

    /// [`read_page`](Self::read_page), handing `used` the (segment, chunk)
    /// of every RPS chunk the page copies from as it first takes it; `true`
    /// with the CRC when those were all of them (the page was rebuilt
    /// through the windows; `false` when the checked path did it).
    fn rebuild(
        &self,
        lp: LivePage,
        out: &mut [u8],
        used: impl FnMut((u32, u64)),
    ) -> Result<(u32, bool)> {
        let g = &self.chain.gens[lp.layer as usize];
        if let Some(x) = g.xref_at(lp.pos) {
            // Another rank's chain: none of this chain's chunks.
            self.chain.read_xref(lp, x, out)?;
            return Ok((g.ptable.page_crcs[lp.pos as usize], true));
        }
        let ptrs = self.chain.pointers(lp).ok();
        let (Some(ptrs), true) = (ptrs, out.len() == self.page_size()) else {
            // Out of range or a bad chunk: the checked path reports it.
            self.chain.read_page(lp, out)?;
            return Ok((g.ptable.page_crcs[lp.pos as usize], false));
        };
        let ok = match self.ps {
            32 => self.copy::<32>(&ptrs, out, used),
            16 => self.copy::<16>(&ptrs, out, used),
            64 => self.copy::<64>(&ptrs, out, used),
            128 => self.copy::<128>(&ptrs, out, used),
            _ => self.copy_any(&ptrs, out, used),
        };
        let want = g.ptable.page_crcs[lp.pos as usize];
        if ok.is_err() || crc32fast::hash(out) != want {
            // A bad pointer, chunk or CRC: the checked path names the
            // culprit.
            self.chain.read_page(lp, out)?;
            return Ok((want, false));
        }
        Ok((want, true))
    }

    /// The distinct RPS chunks the pointers of live page `lp` lie in, as
    /// (segment, chunk) pairs, into `out`. `false` when its pointers cannot
    /// be read (its rebuild then fails on them); nothing for a page another
    /// rank stores. Pointers outside the pattern space are left out: the
    /// rebuild fails on them.
    fn chunks_of(&self, lp: LivePage, out: &mut Vec<(u32, u64)>) -> bool {
        out.clear();
        let g = &self.chain.gens[lp.layer as usize];
        if g.xref_at(lp.pos).is_some() {
            return true;
        }
        let Ok(ptrs) = self.chain.pointers(lp) else {
            return false;
        };
        // The chunks of the pointers before, as `copy` keeps its windows:
        // pointers mostly run on in one, or alternate between two.
        let (mut w, mut w2) = ((0u64, 0u64), (0u64, 0u64));
        for p in ptrs.chunks_exact(4) {
            let p = u64::from(u32::from_le_bytes(p.try_into().expect("4 bytes")));
            if p.wrapping_sub(w.0) < w.1 {
                continue;
            }
            if p.wrapping_sub(w2.0) < w2.1 {
                std::mem::swap(&mut w, &mut w2);
                continue;
            }
            let Some((i, s)) = self.segs.iter().enumerate().rev().find(|(_, s)| s.lo <= p) else {
                continue;
            };
            let local = p - s.lo;
            if local >= s.n {
                continue;
            }
            let k = local >> s.shift;
            let lo = s.lo + (k << s.shift);
            w2 = w;
            w = (lo, (1u64 << s.shift).min(s.lo + s.n - lo));
            if !out.contains(&(i as u32, k)) {
                out.push((i as u32, k));
            }
        }
        true
    }

    /// Counts, on `threads` threads, the live pages of `pages` (those
    /// `live` gives) that use each RPS chunk, and when the chain's Pointer
    /// Files are pooled ([`OpenChain::pool_pointer_files`]) each Pointer
    /// File chunk, for [`read_page_releasing`](Self::read_page_releasing).
    /// `None` when a page's pointers cannot be read (a bad chunk of its
    /// Pointer File, a fetch that failed): its rebuild would then read
    /// chunks no count knows of, so nothing may be released. It holds every
    /// Pointer File chunk it decodes; a restore that pools them calls
    /// [`count_uses_releasing`](Self::count_uses_releasing) instead.
    pub fn count_uses<T: Sync>(
        &self,
        pages: &[T],
        live: impl Fn(&T) -> Option<LivePage> + Sync,
        threads: usize,
    ) -> Option<ChunkUses> {
        self.count(pages, live, threads, false)
    }

    /// [`count_uses`](Self::count_uses), giving each pooled Pointer File
    /// chunk back once the pages whose pointers it holds are counted (their
    /// rebuild decodes it again): the count then holds a few Pointer File
    /// chunks at once, not the lineage's.
    ///
    /// # Safety
    ///
    /// While it runs, nothing else reads the chain's pointers
    /// ([`OpenChain::pointers`], [`OpenChain::read_page`], another
    /// decoder's rebuild); a Pointer File chunk it releases is decoded
    /// again by the next read.
    pub unsafe fn count_uses_releasing<T: Sync>(
        &self,
        pages: &[T],
        live: impl Fn(&T) -> Option<LivePage> + Sync,
        threads: usize,
    ) -> Option<ChunkUses> {
        self.count(pages, live, threads, true)
    }

    /// The Pointer File chunk that live page `lp`'s pointers are in, as
    /// (generation, chunk), when the chain's Pointer Files are counted
    /// (`pf`): pooled, none referring to previous versions. `None` for a
    /// page another rank stores (its pointers are not read).
    fn pf_chunk(&self, lp: LivePage, pf: bool) -> Option<(usize, usize)> {
        let g = &self.chain.gens[lp.layer as usize];
        if !pf || g.xref_at(lp.pos).is_some() {
            return None;
        }
        let first = lp.pos.checked_mul(self.alpha as u64)?;
        Some((
            lp.layer as usize,
            usize::try_from(first >> g.pf.records_per_chunk_shift()).ok()?,
        ))
    }

    /// Whether Pointer File chunks are counted and released: some are
    /// pooled, and no Pointer File refers to previous versions (whose holes
    /// read other generations' Pointer Files, which no count covers).
    fn pf_counted(&self) -> bool {
        self.chain.gens.iter().any(|g| g.pf.pooled())
            && !self.chain.gens.iter().any(|g| g.pf_prev())
    }

    fn count<T: Sync>(
        &self,
        pages: &[T],
        live: impl Fn(&T) -> Option<LivePage> + Sync,
        threads: usize,
        release_pf: bool,
    ) -> Option<ChunkUses> {
        let pf = self.pf_counted();
        // Pages per Pointer File chunk, from their positions alone (nothing
        // decoded): the rebuild's counts, and the count pass's own when it
        // releases.
        let mut pf_counts: Vec<Vec<u64>> = Vec::new();
        if pf {
            pf_counts = self
                .chain
                .gens
                .iter()
                .map(|g| vec![0; g.pf.chunk_count()])
                .collect();
            for lp in pages.iter().filter_map(&live) {
                if let Some((l, k)) = self.pf_chunk(lp, pf)
                    && let Some(c) = pf_counts[l].get_mut(k)
                {
                    *c += 1;
                }
            }
        }
        let atomics = |t: &[Vec<u64>]| -> Vec<Vec<AtomicU64>> {
            t.iter()
                .map(|s| s.iter().map(|&n| AtomicU64::new(n)).collect())
                .collect()
        };
        let scan = if release_pf {
            atomics(&pf_counts)
        } else {
            Vec::new()
        };
        let scanned = |lp: LivePage| {
            // SAFETY: every page whose pointers lie in a chunk that reaches
            // zero has been counted, and their slices dropped (`chunks_of`
            // returned); nothing else reads the chain's pointers while the
            // count runs (`count_uses_releasing`'s contract).
            unsafe { self.release_pf_use(lp, &scan) }
        };
        let zeros = || -> Vec<Vec<u64>> {
            self.segs
                .iter()
                .map(|s| vec![0; s.rps.chunk_count()])
                .collect()
        };
        // Parts of a few hundred to a couple of thousand pages (up to a few
        // Pointer File chunks; at least eight parts per thread when there
        // are enough pages, so that a push's small batch is counted on
        // every core too), claimed from a shared counter so that the
        // threads stay busy to the end, each counting into its own table.
        let part = (pages.len() / (threads.max(1) * 8)).clamp(256, 2048);
        let parts = pages.len().div_ceil(part);
        let threads = threads.clamp(1, parts.max(1));
        let next = std::sync::atomic::AtomicUsize::new(0);
        type Tables = (Vec<Vec<u64>>, Vec<Vec<usize>>);
        let work = || -> Option<Tables> {
            let mut counts = zeros();
            // Parts are claimed in ascending order, so a chunk's first page
            // in this thread's parts is the first one it meets.
            let mut first: Vec<Vec<usize>> =
                counts.iter().map(|s| vec![usize::MAX; s.len()]).collect();
            let mut used = Vec::new();
            loop {
                let p = next.fetch_add(1, Ordering::Relaxed);
                if p >= parts {
                    return Some((counts, first));
                }
                let mine = &pages[p * part..((p + 1) * part).min(pages.len())];
                for (at, lp) in mine
                    .iter()
                    .enumerate()
                    .filter_map(|(j, t)| Some((p * part + j, live(t)?)))
                {
                    if !self.chunks_of(lp, &mut used) {
                        // Stop the others too: nothing will be released.
                        next.store(parts, Ordering::Relaxed);
                        return None;
                    }
                    for &(i, k) in &used {
                        counts[i as usize][k as usize] += 1;
                        let f = &mut first[i as usize][k as usize];
                        *f = (*f).min(at);
                    }
                    scanned(lp);
                }
            }
        };
        let tables = std::thread::scope(|sc| {
            let handles: Vec<_> = (1..threads).map(|_| sc.spawn(work)).collect();
            let mut all = vec![work()];
            for h in handles {
                all.push(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
            }
            all
        });
        let mut sum = zeros();
        let mut first: Vec<Vec<usize>> = sum.iter().map(|s| vec![usize::MAX; s.len()]).collect();
        for t in tables {
            let (t, f) = t?;
            for (s, t) in sum.iter_mut().zip(t) {
                for (a, b) in s.iter_mut().zip(t) {
                    *a += b;
                }
            }
            for (s, f) in first.iter_mut().zip(f) {
                for (a, b) in s.iter_mut().zip(f) {
                    *a = (*a).min(b);
                }
            }
        }
        let counts = sum
            .into_iter()
            .map(|s| s.into_iter().map(AtomicU64::new).collect())
            .collect();
        Some(ChunkUses {
            counts,
            pf: atomics(&pf_counts),
            first,
        })
    }

    /// [`read_page`](Self::read_page), then one use less of each RPS chunk
    /// the page copied from, and of the Pointer File chunk its pointers are
    /// in when those are counted; a chunk whose last use this was gives its
    /// decoded memory back ([`ChunkedFile::release_chunk`]). A page that
    /// fails gives nothing back.
    ///
    /// # Safety
    ///
    /// `uses` comes from [`count_uses`](Self::count_uses) (or
    /// [`count_uses_releasing`](Self::count_uses_releasing)) of this
    /// decoder over pages among which `lp` is, and each of those pages
    /// gives its uses back at most once (through this method or
    /// [`give_back`](Self::give_back)); while `uses` is in use, every
    /// other read of the chain's patterns or pointers (this method on other
    /// threads, another decoder, [`OpenChain::read_page`],
    /// [`OpenChain::pattern`], [`OpenChain::pointers`]) is of a page
    /// counted in `uses` that has not given its uses back yet. Otherwise a
    /// chunk could be released while a slice of it is still read.
    pub unsafe fn read_page_releasing(
        &self,
        lp: LivePage,
        out: &mut [u8],
        uses: &ChunkUses,
    ) -> Result<u32> {
        let mut used: Vec<(u32, u64)> = USED.with_borrow_mut(std::mem::take);
        used.clear();
        let (crc, all) = self.rebuild(lp, out, |c| {
            if !used.contains(&c) {
                used.push(c);
            }
        })?;
        // The checked path rebuilt it: its chunks from its pointers.
        if all || self.chunks_of(lp, &mut used) {
            // SAFETY: the page's rebuild returned (its windows into the
            // chunks and its pointers are gone), and every other read is of
            // a page still counted (this method's contract).
            unsafe {
                self.give_back_chunks(&used, uses);
                self.give_back_pf(lp, uses);
            }
        }
        USED.with_borrow_mut(|u| *u = used);
        Ok(crc)
    }

    /// Gives back the uses that [`count_uses`](Self::count_uses) counted
    /// for live page `lp`, once its reader is done with the patterns it
    /// read: what a push does after it deduplicated a page against its
    /// previous version (or rebuilt an old page), as a restore does after
    /// each page it rebuilds.
    ///
    /// # Safety
    ///
    /// `uses` comes from `count_uses` of this decoder over pages among
    /// which `lp` is, and each of those pages gives its uses back at most
    /// once; every slice of the chain's RPS chunks (and, when they are
    /// counted, Pointer File chunks) that is alive, or taken on any thread,
    /// while this runs belongs to a page counted in `uses` that has not
    /// given its uses back yet (so `lp`'s reader keeps none). A chunk whose
    /// count reaches zero is released: a later read decodes it again.
    pub unsafe fn give_back(&self, lp: LivePage, uses: &ChunkUses) {
        let mut used: Vec<(u32, u64)> = USED.with_borrow_mut(std::mem::take);
        if self.chunks_of(lp, &mut used) {
            // SAFETY: this method's contract (`chunks_of` dropped the
            // pointers it read).
            unsafe {
                self.give_back_chunks(&used, uses);
                self.give_back_pf(lp, uses);
            }
        }
        USED.with_borrow_mut(|u| *u = used);
    }

    /// The RPS chunks `uses` counted, in the order a reader going through
    /// the counted pages in order first needs them: (index of that first
    /// page, segment, chunk). What [`warm`](Self::warm) decodes ahead of a
    /// push's Deduplication Unit.
    pub fn first_uses(&self, uses: &ChunkUses) -> Vec<(usize, u32, u64)> {
        let mut order: Vec<(usize, u32, u64)> = uses
            .first
            .iter()
            .enumerate()
            .flat_map(|(i, s)| {
                s.iter()
                    .enumerate()
                    .filter(|&(_, &f)| f != usize::MAX)
                    .map(move |(k, &f)| (f, i as u32, k as u64))
            })
            .collect();
        order.sort_unstable();
        order
    }

    /// The largest decoded chunk of the chain's RPS files, in bytes.
    pub fn max_chunk_bytes(&self) -> u64 {
        self.segs
            .iter()
            .map(|s| u64::from(s.rps.header().chunk_size))
            .max()
            .unwrap_or(1)
    }

    /// Verifies (and decodes) RPS chunk `k` of segment `i` ahead of the
    /// reader that needs it, handing out no slice of it: safe beside that
    /// reader's releases on another thread (both take the chunk's lock).
    /// A chunk that fails is left unverified, for its reader to fail on
    /// with the same error.
    pub fn warm(&self, i: u32, k: u64) -> Result<()> {
        let Some(seg) = self.segs.get(i as usize) else {
            return Ok(());
        };
        match usize::try_from(k) {
            Ok(k) => seg.rps.warm_chunk(k),
            Err(_) => Ok(()),
        }
    }

    /// One use less of the Pointer File chunk live page `lp`'s pointers
    /// are in, when `uses` counts them; released at zero.
    ///
    /// # Safety
    ///
    /// As [`give_back`](Self::give_back), for page `lp`, whose reader
    /// holds no slice of its pointers any more.
    unsafe fn give_back_pf(&self, lp: LivePage, uses: &ChunkUses) {
        // SAFETY: as for an RPS chunk (`give_back_chunks`): the count was
        // the number of counted pages whose pointers lie in this chunk,
        // each gives its use back once, after its reader dropped them, and
        // nothing else reads the chain meanwhile.
        unsafe { self.release_pf_use(lp, &uses.pf) }
    }

    /// One use less in `table` (uses per Pointer File chunk, per
    /// generation; empty when they are not counted) of the chunk live page
    /// `lp`'s pointers are in; the chunk is released at zero. Shared by
    /// the count pass (its own table) and the rebuild (`ChunkUses::pf`).
    ///
    /// # Safety
    ///
    /// When the count reaches zero no reader holds or will take a slice of
    /// that chunk without decoding it again: each page counted in `table`
    /// gives its use back once, after its reader dropped its pointers, and
    /// nothing else reads the chain's pointers meanwhile.
    unsafe fn release_pf_use(&self, lp: LivePage, table: &[Vec<AtomicU64>]) {
        let Some((l, k)) = self.pf_chunk(lp, !table.is_empty()) else {
            return;
        };
        let Some(c) = table.get(l).and_then(|s| s.get(k)) else {
            return;
        };
        if c.fetch_sub(1, Ordering::AcqRel) == 1 {
            // SAFETY: this function's contract.
            unsafe { self.chain.gens[l].pf.release_chunk(k) };
        }
    }

    /// One use less of each chunk of `used`; a chunk at zero is released.
    ///
    /// # Safety
    ///
    /// As [`give_back`](Self::give_back), for the page whose distinct
    /// chunks `used` holds (as `count_uses` counted them).
    unsafe fn give_back_chunks(&self, used: &[(u32, u64)], uses: &ChunkUses) {
        for &(i, k) in used {
            let left = uses.counts[i as usize][k as usize].fetch_sub(1, Ordering::AcqRel);
            if left == 1 {
                // SAFETY: the count was the number of pages whose readers
                // take slices of this chunk, each counted from the same
                // verified pointers its reader follows, and each gives its
                // use back once, when its reader holds no slice any more:
                // at zero no reader holds or will take a slice of the
                // chunk without decoding it again, and nothing else reads
                // the chain meanwhile (the caller's contract).
                unsafe { self.segs[i as usize].rps.release_chunk(k as usize) };
            }
        }
    }

    /// The verified chunk holding pointer `p`, `None` when `p` lies outside
    /// the pattern space or its chunk does not verify (the checked path
    /// then says why). A chain has a handful of generations, so a linear
    /// scan beats a binary search.
    #[cold]
    fn window(&self, p: u64) -> Option<Window<'_>> {
        let (i, s) = self
            .segs
            .iter()
            .enumerate()
            .rev()
            .find(|(_, s)| s.lo <= p)?;
        let local = p - s.lo;
        if local >= s.n {
            return None;
        }
        let k = local >> s.shift;
        let data = s.rps.chunk_payload(k as usize).ok()?;
        Some(Window {
            lo: s.lo + (k << s.shift),
            n: (data.len() / self.ps) as u64,
            data,
            at: (i as u32, k),
        })
    }

    /// Copies the patterns `ptrs` (little-endian u32s) into `out`, `N`
    /// bytes each; on a pointer it cannot use, returns it.
    #[inline(always)]
    fn copy<const N: usize>(
        &self,
        ptrs: &[u8],
        out: &mut [u8],
        mut used: impl FnMut((u32, u64)),
    ) -> std::result::Result<(), u32> {
        let none = Window {
            lo: 0,
            n: 0,
            data: &[],
            at: (0, 0),
        };
        let mut w = none;
        // The window used before `w`: a page's pointers alternate between
        // a few chunks (its new patterns, the zero pattern's, its previous
        // version's), and a hit here is one compare where `window` is a
        // search and a lookup.
        let mut w2 = none;
        for (dst, p) in out.chunks_exact_mut(N).zip(ptrs.chunks_exact(4)) {
            let ptr = u32::from_le_bytes(p.try_into().expect("4 bytes"));
            let p = u64::from(ptr);
            if p.wrapping_sub(w.lo) >= w.n {
                if p.wrapping_sub(w2.lo) < w2.n {
                    std::mem::swap(&mut w, &mut w2);
                } else {
                    w2 = w;
                    w = self.window(p).ok_or(ptr)?;
                    used(w.at);
                }
            }
            // `p - lo < n` and the window holds `n` patterns of `N` bytes.
            let at = (p - w.lo) as usize * N;
            let src: &[u8; N] = w.data[at..at + N].try_into().expect("N bytes");
            let dst: &mut [u8; N] = dst.try_into().expect("N bytes");
            *dst = *src;
        }
        Ok(())
    }

    fn copy_any(
        &self,
        ptrs: &[u8],
        out: &mut [u8],
        mut used: impl FnMut((u32, u64)),
    ) -> std::result::Result<(), u32> {
        let ps = self.ps;
        for (dst, p) in out.chunks_exact_mut(ps).zip(ptrs.chunks_exact(4)) {
            let ptr = u32::from_le_bytes(p.try_into().expect("4 bytes"));
            let w = self.window(u64::from(ptr)).ok_or(ptr)?;
            used(w.at);
            let at = (u64::from(ptr) - w.lo) as usize * ps;
            dst.copy_from_slice(&w.data[at..at + ps]);
        }
        Ok(())
    }
}

fn chunked_offset(payload_off: u64) -> u64 {
    crate::format::chunked::HEADER_LEN + payload_off
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ic::ChainId;
    use crate::format::manifest::{GenKind, test_manifest};

    /// Generation `g` with `parent`, of the chain based at `base`, holding
    /// seqs `first..=last` and patterns from its parent's end.
    fn generation(g: u64, parent: Option<u64>, base: u64, seqs: (u64, u64), run: u8) -> Manifest {
        let mut m = test_manifest();
        m.generation = g;
        m.parent = parent;
        m.chain_base = base;
        m.kind = if parent.is_some() {
            GenKind::Delta
        } else {
            GenKind::Full
        };
        (m.first_seq, m.last_seq) = seqs;
        m.pattern_base = 0;
        m.patterns = 10;
        m.chain_id = Some(ChainId([run; 16]));
        m
    }

    fn index(gens: Vec<Manifest>) -> ChainIndex {
        let mut gens = gens;
        // Pattern bases as a push numbers them: each Δ from its parent's end.
        for i in 0..gens.len() {
            if let Some(p) = gens[i].parent {
                let end = gens
                    .iter()
                    .find(|m| m.generation == p)
                    .unwrap()
                    .pattern_end();
                gens[i].pattern_base = end;
            }
        }
        ChainIndex {
            manifests: gens.into_iter().map(|m| (m.generation, m)).collect(),
            ..Default::default()
        }
    }

    /// helper-74's forgeries, every file self-consistent: a second branch
    /// of a chain (a Δ whose parent is not the newest generation of its
    /// chain before it), and a state of a run older than an older
    /// generation's under a newer number. Each gives its lineage an error,
    /// so a restore of the newest state refuses rather than restoring it.
    #[test]
    fn a_lineage_is_one_branch_and_never_older_than_its_number() {
        let d = tempfile::tempdir().unwrap();
        let store = crate::store::DirStore::open(d.path()).unwrap();
        let good = index(vec![
            generation(1, None, 1, (0, 2), 1),
            generation(2, Some(1), 1, (3, 4), 1),
            generation(3, Some(2), 1, (5, 5), 1),
            // A new chain of the same run, then of a new run (seqs again
            // from 0, with a chain id of its own).
            generation(4, None, 4, (0, 5), 1),
            generation(5, Some(4), 4, (6, 7), 1),
            generation(6, None, 6, (0, 1), 2),
        ]);
        for g in 1..=6 {
            good.lineage(g, &store).unwrap();
        }

        let mut sibling = good.clone_manifests();
        // Generation 7: a second child of 2 beside 3, ending later.
        sibling.push(generation(7, Some(2), 1, (5, 9), 1));
        let e = index(sibling).lineage(7, &store).unwrap_err().to_string();
        assert!(
            e.contains("generation 3 of the same L2 chain lies between"),
            "{e}"
        );

        // Generation 3 copied as 7 with parent 2 (its files renamed), the
        // manifests of 3 to 6 damaged (helper-111): the valid ones alone
        // show no generation between 2 and 7, the damaged ones do.
        let mut replay: Vec<Manifest> = good
            .clone_manifests()
            .into_iter()
            .filter(|m| m.generation <= 2)
            .collect();
        replay.push(generation(7, Some(2), 1, (5, 5), 1));
        let mut damaged = index(replay);
        damaged.lineage(7, &store).unwrap();
        damaged.invalid = (3..=6)
            .map(|g| {
                (
                    g,
                    Error::corrupt(Path::new("m"), 0, "crc32", "flipped".to_string()),
                )
            })
            .collect();
        let e = damaged.lineage(7, &store).unwrap_err().to_string();
        assert!(
            e.contains("but generation 3 between them has an invalid manifest"),
            "{e}"
        );
        // Damaged ones above it, or below its parent, are not between.
        damaged.invalid.retain(|(g, _)| *g > 7);
        damaged.lineage(7, &store).unwrap();

        let mut stale = good.clone_manifests();
        // Generation 7: the run's first state again, under a newer number.
        stale.push(generation(7, None, 7, (0, 2), 1));
        let e = index(stale).lineage(7, &store).unwrap_err().to_string();
        assert!(
            e.contains("older generation 5 of the same run ends at seq 7"),
            "{e}"
        );

        // A generation only L1's copy holds (its push killed before the L2
        // manifest) does not make a later full generation of L2's state
        // stale: its checkpoints are still pending in L1 (helper-76). Once
        // in L2 too, the two are ambiguous.
        let l2 = index(vec![
            generation(1, None, 1, (0, 9), 1),
            generation(3, None, 3, (0, 9), 1),
        ]);
        let l1 = index(vec![
            generation(1, None, 1, (0, 9), 1),
            generation(2, Some(1), 1, (10, 19), 1),
        ]);
        l2.clone_index()
            .overlaid_with(&l1)
            .lineage(3, &store)
            .unwrap();
        let both = index(
            l1.clone_manifests()
                .into_iter()
                .chain(l2.clone_manifests())
                .collect(),
        );
        let e = both.lineage(3, &store).unwrap_err().to_string();
        assert!(
            e.contains("older generation 2 of the same run ends at seq 19"),
            "{e}"
        );

        // Version 1 runs (no chain id) restarted their seqs: not stale.
        let mut v1 = good.clone_manifests();
        v1.iter_mut().for_each(|m| m.chain_id = None);
        v1.push(generation(7, None, 7, (0, 2), 1));
        v1.last_mut().unwrap().chain_id = None;
        index(v1).lineage(7, &store).unwrap();
    }

    impl ChainIndex {
        fn clone_manifests(&self) -> Vec<Manifest> {
            self.manifests.values().cloned().collect()
        }

        fn clone_index(&self) -> ChainIndex {
            index(self.clone_manifests())
        }
    }
}
