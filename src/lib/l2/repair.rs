//! `verify --repair`: a generation damaged in one of its two copies is
//! rewritten from the other.
//!
//! Every generation a push commits exists twice, in L2 and in L1's copy of
//! the chain (`L1/rex/`), byte for byte the same files under the same
//! manifest. A push reads L1's copy (it is local) and checks L2's only by
//! names and sizes ([`super::push`]'s lineage check), so bit rot in L2's
//! copy, with the size unchanged, goes unnoticed until a node is lost and
//! the restore from L2 alone fails on it: the newest checkpoint is then
//! gone although an intact copy sat in L1 the whole time. The reverse
//! (L1's copy damaged) a push heals when it reads it, but only for the
//! lineage it builds on.
//!
//! [`repair`] reads both copies of every generation the two places share
//! and puts back, from the sound copy, each file whose size, CRC-32 (and
//! XXH3 where the manifest records one) differs from its manifest; a
//! manifest that is invalid in one place is replaced by the other's valid
//! one. Nothing is ever written from a copy that does not match its
//! manifest, and each file is checked again where it arrived
//! (`push::copy_file`). A generation whose two manifests differ is not
//! damage but two histories under one number (another job's L1 or L2): it
//! is reported, and nothing at all is copied between the two places; a
//! generation only one place has is what retention (`keep_chains_l1`)
//! or an interrupted push (which the next push finishes) leaves, not damage.
//! It runs under the job's writer locks, as a push does.

use std::path::Path;

use serde::Serialize;

use crate::error::Result;
use crate::format::manifest::{Manifest, manifest_name};
use crate::l2::chain::ChainIndex;
use crate::l2::jobgen::{JobIndex, check_l1_root};
use crate::l2::push::{
    Job, begin_writing, copy_file, copy_generation, foreign, manifest_bytes, two_histories,
    unsound, upload_generation,
};
use crate::store::{JobRoot, NoProgress, Store};

/// What [`repair`] did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RepairReport {
    /// What was put back, one line each.
    pub repaired: Vec<String>,
    /// What could not be: both copies damaged.
    pub unrepairable: Vec<String>,
}

/// Why generation `m`'s files in `store` are not all sound, if they are not.
fn generation_unsound(store: &dyn Store, m: &Manifest) -> Result<Option<String>> {
    for f in &m.files {
        if let Some(why) = unsound(store, m, f)? {
            return Ok(Some(why));
        }
    }
    Ok(None)
}

/// Puts back, into `place` (named `name`), each file of generation `m`
/// that is damaged there from `other`, where `m`'s manifest is invalid,
/// when `other`'s file of that name is sound against `m` (size, CRC,
/// XXH3): the copy with the valid manifest and the copy with the sound
/// files make one whole generation between them (helper-77: L1's manifest
/// and L2's RPS of one generation both rotted, every restore then failed
/// although every byte was there). `foreign` has cleared `m` for `other`
/// first: files of its names there, and none of them its own, are another
/// generation's, which nothing here takes.
fn mend_from(
    place: &dyn Store,
    name: &str,
    other: &dyn Store,
    m: &Manifest,
    report: &mut RepairReport,
) -> Result<()> {
    for f in &m.files {
        let Some(why) = unsound(place, m, f)? else {
            continue;
        };
        if unsound(other, m, f)?.is_none() {
            copy_file(other, place, m, f, &NoProgress)?;
            report.repaired.push(format!(
                "{name} generation {}: {why}; replaced by the other place's file, sound against this manifest, whose own manifest there is invalid",
                m.generation
            ));
        }
    }
    Ok(())
}

/// Repairs every generation L2 and L1's copy share (see the module doc),
/// under the job's writer locks (refused, [`crate::Error::Busy`], beside a
/// push).
pub fn repair(job: &Job) -> Result<RepairReport> {
    let _writer = begin_writing(job, "verify --repair")?;
    let l2 = job.l2.as_ref();
    let l1 = &job.l1_chain;
    let l2_index = ChainIndex::load(l2)?;
    let l1_index = ChainIndex::load(l1)?;
    let mut report = RepairReport::default();
    let invalid = |i: &ChainIndex, g: u64| {
        i.invalid
            .iter()
            .find(|(x, _)| *x == g)
            .map(|(_, e)| e.report())
    };
    // Two places holding different valid manifests under one number hold
    // two histories (another job's L1 or L2 given, or two copies of the
    // job): nothing is copied between them, neither a file nor a missing
    // generation (helper-77: the other job's FULL generation was copied in
    // as the newest, and a restore gave its state with exit 0; its files
    // overwrote this job's intact ones under an invalid manifest).
    if let Some(differ) = two_histories(&l2_index, &l1_index) {
        report.unrepairable.push(format!(
            "{differ} differ between L2 and L1's copy: the two places hold different histories (the L1 or L2 of another job, or of another copy of this job?); nothing was copied between them"
        ));
        return Ok(report);
    }
    let mut gens: Vec<u64> = l2_index
        .manifests
        .keys()
        .chain(l1_index.manifests.keys())
        .copied()
        .collect();
    gens.sort_unstable();
    gens.dedup();
    for g in gens {
        match (l2_index.get(g), l1_index.get(g)) {
            (Some(a), Some(b)) if a == b => {
                for f in &a.files {
                    match (unsound(l2, a, f)?, unsound(l1, a, f)?) {
                        (None, None) => {}
                        (Some(why), None) => {
                            copy_file(l1, l2, a, f, &NoProgress)?;
                            report
                                .repaired
                                .push(format!("L2 generation {g}: {why}; replaced by L1's copy"));
                        }
                        (None, Some(why)) => {
                            copy_file(l2, l1, a, f, &NoProgress)?;
                            report
                                .repaired
                                .push(format!("L1 generation {g}: {why}; replaced by L2's copy"));
                        }
                        (Some(w2), Some(w1)) => report.unrepairable.push(format!(
                            "generation {g}: {} is damaged in both copies (L2: {w2}; L1: {w1})",
                            f.name
                        )),
                    }
                }
            }
            // Two chains under one number: refused above.
            (Some(_), Some(_)) => {}
            (None, Some(m)) => {
                let Some(why) = invalid(&l2_index, g) else {
                    continue;
                };
                if let Some(w) = foreign(l2, &l2_index, m, None) {
                    report.unrepairable.push(format!(
                        "generation {g}: its manifest in L2 is invalid ({}), and L1's generation {g} is not copied there: {w}",
                        l2.public_text(&why)
                    ));
                    continue;
                }
                mend_from(l1, "L1", l2, m, &mut report)?;
                match generation_unsound(l1, m)? {
                    None => {
                        if let Some(note) = upload_generation(job, m, true)? {
                            report.repaired.push(note);
                        }
                        report.repaired.push(format!(
                            "L2 generation {g}: {}; replaced by L1's copy",
                            l2.public_text(&why)
                        ));
                    }
                    Some(w1) => report.unrepairable.push(format!(
                        "generation {g}: its manifest in L2 is invalid ({}) and L1's copy is damaged ({w1})",
                        l2.public_text(&why)
                    )),
                }
            }
            (Some(m), None) => {
                let Some(why) = invalid(&l1_index, g) else {
                    continue;
                };
                if let Some(w) = foreign(l1, &l1_index, m, None) {
                    report.unrepairable.push(format!(
                        "generation {g}: its manifest in L1 is invalid ({why}), and L2's generation {g} is not copied there: {w}"
                    ));
                    continue;
                }
                mend_from(l2, "L2", l1, m, &mut report)?;
                match generation_unsound(l2, m)? {
                    None => {
                        // The files, then the manifest in place of the
                        // invalid one (never none in between).
                        copy_generation(l2, l1, m, &NoProgress, false)?;
                        l1.replace_bytes(&manifest_name(g), &manifest_bytes(l2, m)?)?;
                        report.repaired.push(format!(
                            "L1 generation {g}: {why}; replaced by L2's copy"
                        ));
                    }
                    Some(w2) => report.unrepairable.push(format!(
                        "generation {g}: its manifest in L1 is invalid ({why}) and L2's copy is damaged ({w2})"
                    )),
                }
            }
            (None, None) => {}
        }
    }
    // What the pass above replaced counts below (helper-77: a lost L2
    // manifest under L1's invalid newest one took two runs).
    let mut l2_index = ChainIndex::load(l2)?;
    let mut l1_index = ChainIndex::load(l1)?;
    // A generation of the newest lineage one place lacks altogether (its
    // manifest deleted, or a push interrupted between its two manifests,
    // which the next push would finish the same way): copied from the
    // other, the newest lineage only, so that chains retention pruned from
    // one place are not brought back. A place ahead of the other gets only
    // what its own newest lineage lacks, from its own chain; then a second
    // round, on what the first copied (helper-77: L2's newest manifest lost
    // and L1's copy missing one before it never converged).
    for _round in 0..2 {
        let mut copied = false;
        for (from, to, from_index, to_index, to_name) in [
            (l1 as &dyn Store, l2, &l1_index, &l2_index, "L2"),
            (l2, l1 as &dyn Store, &l2_index, &l1_index, "L1"),
        ] {
            let Some(n) = from_index.newest() else {
                continue;
            };
            let mut lowest = 0;
            if let Some(t) = to_index.newest().filter(|t| t.generation > n.generation) {
                if to_index.lineage(t.generation, to).is_ok() {
                    continue;
                }
                lowest = t.chain_base;
            }
            let Ok(lineage) = from_index.lineage(n.generation, from) else {
                continue;
            };
            for m in lineage {
                let g = m.generation;
                if g < lowest || to_index.get(g).is_some() || invalid(to_index, g).is_some() {
                    continue;
                }
                // (What was refused, and whether the rest of the lineage is
                // refused with it: all of it, when it is not this job's.)
                let (refused, stop) = if let Some(why) = generation_unsound(from, &m)? {
                    (
                        format!(
                            "generation {g}: its manifest is missing from {to_name}, and the other copy is damaged ({why})"
                        ),
                        false,
                    )
                } else if let Some(why) = foreign(to, to_index, &m, Some(from_index)) {
                    (
                        format!(
                            "generation {g}: its manifest is missing from {to_name}, and the other place's is not copied there: {why}"
                        ),
                        true,
                    )
                } else {
                    if to_name == "L2" {
                        if let Some(note) = upload_generation(job, &m, false)? {
                            report.repaired.push(note);
                        }
                    } else {
                        copy_generation(from, to, &m, &NoProgress, true)?;
                    }
                    report.repaired.push(format!(
                        "{to_name} generation {g}: its manifest was missing (lost, or a push was interrupted between its two manifests); copied from the other place"
                    ));
                    copied = true;
                    continue;
                };
                if !report.unrepairable.contains(&refused) {
                    report.unrepairable.push(refused);
                }
                if stop {
                    break;
                }
            }
        }
        if !copied {
            break;
        }
        l2_index = ChainIndex::load(l2)?;
        l1_index = ChainIndex::load(l1)?;
    }
    for (g, e2) in &l2_index.invalid {
        if let Some(e1) = invalid(&l1_index, *g) {
            report.unrepairable.push(format!(
                "generation {g}: its manifest is invalid in both places (L2: {}; L1: {e1})",
                l2.public_text(&e2.report())
            ));
        }
    }
    Ok(report)
}

impl RepairReport {
    /// Whether something could not be repaired.
    pub fn incomplete(&self) -> bool {
        !self.unrepairable.is_empty()
    }
}

/// [`repair`] for each rank of an MPI job at `root` (rank `only` alone
/// when given) whose L1 directory `l1_root/R` exists, each rank's chain
/// against its own L1 copy; a rank without its L1 directory (a lost node)
/// has nothing to repair from and is skipped (`verify` reports it). Lines
/// are prefixed with the rank.
pub fn repair_job(root: &JobRoot, l1_root: &Path, only: Option<u32>) -> Result<RepairReport> {
    let jobs = JobIndex::load(root.job_store(false)?.as_ref())?;
    let Some(jm) = jobs.newest() else {
        return Ok(RepairReport::default());
    };
    check_l1_root(l1_root, jm.ranks)?;
    let mut report = RepairReport::default();
    for rank in (0..jm.ranks).filter(|r| only.is_none_or(|o| o == *r)) {
        let dir = l1_root.join(rank.to_string());
        if !dir.is_dir() {
            continue;
        }
        let job = Job::open(&dir, root.rank_store(rank, false)?)?;
        let r = repair(&job).map_err(|e| job.l2.public_error(e))?;
        report
            .repaired
            .extend(r.repaired.into_iter().map(|l| format!("rank {rank} {l}")));
        report.unrepairable.extend(
            r.unrepairable
                .into_iter()
                .map(|l| format!("rank {rank} {l}")),
        );
    }
    Ok(report)
}
