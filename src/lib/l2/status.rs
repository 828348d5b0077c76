//! `status`: what a job's two levels hold, for people and scripts.

use std::path::PathBuf;

use serde::Serialize;

use crate::error::Result;
use crate::format::manifest::{GenKind, Manifest};
use crate::format::region::RegionTable;
use crate::l1::lock::JobLock;
use crate::l1::{Covered, L1Dir};
use crate::l2::chain::ChainIndex;
use crate::l2::push::Job;

/// One generation, as listed by `status`.
#[derive(Clone, Debug, Serialize)]
pub struct GenerationStatus {
    /// Generation number.
    pub generation: u64,
    /// Full or Δ.
    pub kind: GenKind,
    /// Base of its chain.
    pub chain_base: u64,
    /// Seqs it covers.
    pub first_seq: u64,
    /// Last seq it covers.
    pub last_seq: u64,
    /// Pages it wrote.
    pub dirty_pages: u64,
    /// Live pages after it.
    pub live_pages: u64,
    /// Bytes it replaced.
    pub bytes_in: u64,
    /// Bytes it shipped.
    pub bytes_out: u64,
    /// Compression ratio.
    pub compression_ratio: f64,
    /// Whether L1 holds it too.
    pub in_l1: bool,
}

/// A job's state.
#[derive(Clone, Debug, Serialize)]
pub struct Status {
    /// Valid generations in L2, oldest first.
    pub generations: Vec<GenerationStatus>,
    /// Chains in L2 (distinct bases) and the newest chain's length.
    pub chains: usize,
    /// Generations in the newest chain.
    pub newest_chain_length: usize,
    /// Invalid manifests found (L2 then L1).
    pub invalid: Vec<String>,
    /// IC files waiting in L1 for the next push.
    pub pending_ics: usize,
    /// Their seqs.
    pub pending_seqs: Option<(u64, u64)>,
    /// Their bytes.
    pub pending_bytes: u64,
    /// Bytes of all valid generations in L2.
    pub l2_bytes: u64,
    /// Why the pending IC files could not be listed, if they could not.
    pub pending_error: Option<String>,
    /// The regions of the newest state (a job checkpointing itself through
    /// librex): of the newest pending checkpoint, else of the newest
    /// generation.
    pub regions: Option<RegionTable>,
    /// The seq whose region table `regions` is.
    pub regions_seq: Option<u64>,
    /// The live producer writing this L1 directory (a librex job or a
    /// capture: who holds its producer lock), if one runs.
    pub producer: Option<String>,
    /// L1 checkpoints librex set aside ([`crate::l1::set_aside`]): kept
    /// for the user, never read or deleted by rexctl.
    pub set_aside: Vec<PathBuf>,
}

fn row(m: &Manifest, in_l1: bool) -> GenerationStatus {
    GenerationStatus {
        generation: m.generation,
        kind: m.kind,
        chain_base: m.chain_base,
        first_seq: m.first_seq,
        last_seq: m.last_seq,
        dirty_pages: m.dirty_pages,
        live_pages: m.live_pages,
        bytes_in: m.bytes_in,
        bytes_out: m.bytes_out,
        compression_ratio: m.compression_ratio,
        in_l1,
    }
}

/// Reads the status of `job`.
pub fn status(job: &Job) -> Result<Status> {
    status_committed(job, None)
}

/// [`status`] of a rank of an MPI job: of the generations job generations
/// up to `job_committed` committed (all when `None`), so that the pending
/// checkpoints are those after the rank's committed generation, as a
/// restore takes them (helper-71: a generation a killed collective push
/// never committed hid them).
pub fn status_committed(job: &Job, job_committed: Option<u64>) -> Result<Status> {
    let l2 = ChainIndex::load(job.l2.as_ref())?.committed_if(job_committed);
    let l1 = ChainIndex::load(&job.l1_chain)?.committed_if(job_committed);
    let generations: Vec<_> = l2
        .manifests
        .values()
        .map(|m| row(m, l1.get(m.generation) == Some(m)))
        .collect();
    let mut bases: Vec<u64> = generations.iter().map(|g| g.chain_base).collect();
    bases.dedup();
    let newest_chain_length = match l2.newest() {
        Some(n) => generations
            .iter()
            .filter(|g| g.chain_base == n.chain_base)
            .count(),
        None => 0,
    };
    let mut invalid: Vec<String> = l2
        .invalid
        .iter()
        .map(|(g, e)| format!("L2 generation {g}: {e}"))
        .collect();
    invalid.extend(
        l1.invalid
            .iter()
            .map(|(g, e)| format!("L1 generation {g}: {e}")),
    );
    // Pending after the newest generation of either place (a generation L2
    // lost its manifest of still holds its checkpoints in L1's copy).
    let newest = match (l2.newest(), l1.newest()) {
        (Some(a), Some(b)) if b.generation > a.generation && l2.get(b.generation).is_none() => {
            Some(b)
        }
        (Some(a), _) => Some(a),
        (None, b) => b,
    };
    let (pending, pending_error) = match L1Dir::scan_after(&job.l1, newest.map(Covered::from)) {
        Ok(d) => (d.files, None),
        Err(e) => (Vec::new(), Some(e.report())),
    };
    let (regions, regions_seq) = match pending.last() {
        Some(p) => (p.regions.clone(), Some(p.seq())),
        None => match newest {
            Some(m) => (m.regions.clone(), Some(m.last_seq)),
            None => (None, None),
        },
    };
    Ok(Status {
        regions: regions.clone(),
        regions_seq: regions.and(regions_seq),
        producer: JobLock::producer_holder(&job.l1),
        // A directory that cannot be listed is said by the pending error.
        set_aside: crate::l1::list_set_aside(&job.l1).unwrap_or_default(),
        l2_bytes: generations.iter().map(|g| g.bytes_out).sum(),
        chains: bases.len(),
        newest_chain_length,
        generations,
        invalid,
        pending_ics: pending.len(),
        pending_seqs: pending
            .first()
            .map(|f| (f.seq(), pending[pending.len() - 1].seq())),
        pending_bytes: pending.iter().map(|m| m.layout.file_len).sum(),
        pending_error,
    })
}
