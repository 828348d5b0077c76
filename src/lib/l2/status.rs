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
    #[serde(serialize_with = "crate::format::json_path::paths")]
    pub set_aside: Vec<PathBuf>,
    /// Generations L1's copy of the chain holds above L2's newest that L2
    /// lacks (its manifest lost, a push interrupted before L2's manifest,
    /// or an L2 location mistyped): the next push uploads them; until then
    /// L2 alone restores an older state (helper-95: status said nothing).
    pub l1_only: Vec<GenerationStatus>,
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
///
/// A push that commits and deletes what it coalesced while this reads made
/// the pending checkpoints look damaged ("seq N missing", a file gone:
/// exit 3, helper-73, about 1 status in 70 beside a job pushing in a
/// loop). So when something reads as wrong while the job's files changed
/// under the read, it is read again, up to 8 times.
pub fn status_committed(job: &Job, job_committed: Option<u64>) -> Result<Status> {
    read_unlocked(
        job,
        || status_once(job, job_committed),
        |s| s.pending_error.is_some() || !s.invalid.is_empty(),
    )
}

/// Runs `read`, a read of `job`'s files without its lock (`status`,
/// `plan`, `flush -n`), again while it fails or `wrong` finds its result
/// wrong: once, then as long as the job's files changed under the last
/// read (a push committed, or a producer wrote, meanwhile), up to 8 reads
/// in all. A push deletes the checkpoints it coalesced after its commit,
/// and a read between the two saw them neither pending nor covered. A
/// read that is right costs nothing more.
pub fn read_unlocked<T>(
    job: &Job,
    mut read: impl FnMut() -> Result<T>,
    wrong: impl Fn(&T) -> bool,
) -> Result<T> {
    let mut r = read();
    let mut seen = None;
    for _ in 1..8 {
        if r.as_ref().is_ok_and(|t| !wrong(t)) {
            return r;
        }
        let now = files_of(job);
        if seen.as_ref() == Some(&now) {
            return r;
        }
        seen = Some(now);
        r = read();
    }
    r
}

/// Each file a valid manifest of `index` names that `objects` (the
/// listing it was loaded from) lacks, or holds at another size.
fn unlike_listed(
    index: &ChainIndex,
    objects: &[crate::store::ObjectInfo],
    level: &str,
) -> Vec<String> {
    let sizes: std::collections::HashMap<&str, u64> =
        objects.iter().map(|o| (o.name.as_str(), o.bytes)).collect();
    let mut out = Vec::new();
    for m in index.manifests.values() {
        for f in &m.files {
            match sizes.get(f.name.as_str()) {
                None => out.push(format!(
                    "{level} generation {}: {} is missing",
                    m.generation, f.name
                )),
                Some(&b) if b != f.bytes => out.push(format!(
                    "{level} generation {}: {} holds {b} bytes, its manifest says {}",
                    m.generation, f.name, f.bytes
                )),
                Some(_) => {}
            }
        }
    }
    out
}

/// The names of the job's manifests (in L2 and in L1's copy) and of its
/// L1 directory's files: what a push changes when it commits.
fn files_of(job: &Job) -> [Vec<String>; 3] {
    let manifests = |s: &dyn crate::store::Store| -> Vec<String> {
        let mut v: Vec<String> = s
            .list()
            .unwrap_or_default()
            .into_iter()
            .filter(|o| crate::format::manifest::parse_manifest_name(&o.name).is_some())
            .map(|o| o.name)
            .collect();
        v.sort();
        v
    };
    let mut l1: Vec<String> = std::fs::read_dir(&job.l1)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    l1.sort();
    [manifests(job.l2.as_ref()), manifests(&job.l1_chain), l1]
}

fn status_once(job: &Job, job_committed: Option<u64>) -> Result<Status> {
    let l2_objects = job.l2.list()?;
    // An older state under a newer number is shown as the invalid
    // generation it is for a restore (helper-87: another job's generation
    // copied in said nothing).
    let l2 = ChainIndex::load_listed(job.l2.as_ref(), &l2_objects)?
        .committed_if(job_committed)
        .without_out_of_order(&job.l2.describe());
    let l1_objects = crate::store::Store::list(&job.l1_chain)?;
    let l1 = ChainIndex::load_listed(&job.l1_chain, &l1_objects)?
        .committed_if(job_committed)
        .without_out_of_order(&crate::store::Store::describe(&job.l1_chain));
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
    // L1's copy of another job beside this L2, as a restore refuses it
    // (which reads L2's objects named as that copy's files, of their sizes,
    // when its generations all lie above L2's and none is of L2's run: the
    // one case where status reads data).
    let foreign = crate::l2::restore::foreign_copy(
        job,
        &l2,
        &l1,
        &l2_objects,
        &crate::l2::restore::RestoreOptions::default(),
    )?;
    // L1's copy is another job's, or out of order beside L2: its
    // generations are not this L2's to upload (a push refuses them).
    let foreign = foreign.or_else(|| crate::l2::restore::differing_copy(job, &l2, &l1));
    let out_of_order = l2.out_of_order_with(&l1);
    let two_histories = foreign.is_some() || out_of_order.is_some();
    if let Some(e) = foreign {
        invalid.push(e.to_string());
    }
    if let Some((m, b)) = out_of_order {
        invalid.push(format!(
            "L2 and L1's copy together: {}",
            crate::l2::chain::out_of_order_text(m, b)
        ));
    }
    // The listing's sizes against the manifests: a missing or truncated
    // file, which costs no read (helper-72: a 0-byte RPS said ok; every
    // byte's check is `verify`'s).
    invalid.extend(unlike_listed(&l2, &l2_objects, "L2"));
    invalid.extend(unlike_listed(&l1, &l1_objects, "L1"));
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
    let l2_newest = l2.newest().map_or(0, |m| m.generation);
    let l1_only = l1
        .manifests
        .values()
        .filter(|m| !two_histories && m.generation > l2_newest && l2.get(m.generation).is_none())
        .map(|m| row(m, true))
        .collect();
    Ok(Status {
        l1_only,
        regions: regions.clone(),
        regions_seq: regions.and(regions_seq),
        producer: JobLock::producer_holder(&job.l1),
        // A directory that cannot be listed is said by the pending error.
        set_aside: crate::l1::list_set_aside(&job.l1).unwrap_or_default(),
        // Saturating: `bytes_out` is a manifest's word, not checked
        // against the files (helper-111: two of 2^64 - 1 panicked).
        l2_bytes: generations
            .iter()
            .fold(0, |a: u64, g| a.saturating_add(g.bytes_out)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::store::DirStore;
    use std::cell::Cell;

    /// A read that goes wrong while a push changes the job's files is read
    /// again until it is right; one that goes wrong on files nobody
    /// changes is read twice and its error returned; one that is right is
    /// read once.
    #[test]
    fn an_unlocked_read_is_read_again_only_while_the_files_change() {
        let d = tempfile::tempdir().unwrap();
        let (l1, l2) = (d.path().join("l1"), d.path().join("l2"));
        std::fs::create_dir_all(&l1).unwrap();
        std::fs::create_dir_all(&l2).unwrap();
        let job = Job::open_read(&l1, Box::new(DirStore::open(&l2).unwrap())).unwrap();
        let reads = Cell::new(0);
        // Wrong three times, each time with a file of L1 changed (a push
        // deleting what it coalesced, a producer writing), then right.
        let r = read_unlocked(
            &job,
            || {
                reads.set(reads.get() + 1);
                if reads.get() <= 3 {
                    std::fs::write(l1.join(format!("ckpt-{}.rexic", reads.get())), b"").unwrap();
                    Err(Error::Invalid("seq 7 missing".into()))
                } else {
                    Ok(reads.get())
                }
            },
            |_| false,
        );
        assert_eq!(r.unwrap(), 4);
        // A wrong result (not an error) is read again too, and the last
        // one returned when nothing changes.
        reads.set(0);
        let r = read_unlocked(
            &job,
            || {
                reads.set(reads.get() + 1);
                Ok(reads.get())
            },
            |_| true,
        );
        assert_eq!((r.unwrap(), reads.get()), (2, 2));
        // An error on files nobody changes: read twice.
        reads.set(0);
        let r: Result<()> = read_unlocked(
            &job,
            || {
                reads.set(reads.get() + 1);
                Err(Error::Invalid("damaged".into()))
            },
            |_| false,
        );
        assert!(r.is_err());
        assert_eq!(reads.get(), 2);
        // Changing for ever: at most 8 reads.
        reads.set(0);
        let r: Result<()> = read_unlocked(
            &job,
            || {
                reads.set(reads.get() + 1);
                std::fs::write(l1.join(format!("x-{}", reads.get())), b"").unwrap();
                Err(Error::Invalid("damaged".into()))
            },
            |_| false,
        );
        assert!(r.is_err());
        assert_eq!(reads.get(), 8);
        // Right at once: one read.
        reads.set(0);
        let r = read_unlocked(
            &job,
            || {
                reads.set(reads.get() + 1);
                Ok(())
            },
            |_| false,
        );
        assert!(r.is_ok());
        assert_eq!(reads.get(), 1);
    }
}
