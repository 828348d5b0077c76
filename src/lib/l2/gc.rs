//! `gc`: removes the L2 objects that no manifest references.
//!
//! A push that crashed (or lost its store) before its commit point leaves
//! data files without a manifest; a prune that crashed leaves data files of
//! pruned generations. The next push's recovery deletes them, but a job
//! that never pushes again (it ended, or its node is gone) leaves them
//! behind, billed forever in a bucket. `gc` finds them:
//!
//! * **referenced**: every manifest object (valid or not), every file a
//!   valid manifest names, and every object of a generation whose manifest
//!   is invalid (kept as evidence for `verify` and for a person);
//! * **garbage**: the other objects whose names have the form
//!   `g<digits>.<anything>` (FORMAT.md §3.1.1: they belong to a generation,
//!   and that generation does not exist). Other names are not rexctl's and
//!   are never touched.
//!
//! Garbage is deleted only once it is older than the grace period (default
//! one hour), and unfinished multipart uploads only once their intent is
//! that old (a running upload writes its intent again every
//! [`INTENT_REFRESH_S`](crate::store::settings::INTENT_REFRESH_S) seconds). With `--l1`, `gc` also takes the job's lock without waiting, so
//! it never runs while a push of this node holds it (exit code 4).
//!
//! # Why the grace period covers pushes from other nodes
//!
//! The lock is local to a node, and a bucket is shared by many. A push
//! writes a generation's data files and then, at once, its manifest; the
//! objects of a push in progress are therefore younger than the time the
//! push has spent uploading. The listing is taken before the manifests are
//! read, so a manifest committed in between is seen. An object is only
//! collected if it was unreferenced when listed *and* older than the grace
//! period, that is, if some push has been uploading for longer than the
//! grace period without committing: with the default of one hour, far
//! longer than any push, that push has failed. Should a push be that slow,
//! it loses nothing either: its recovery uploads the generation again from
//! L1. Ages are measured against the store's modification times, so clock
//! skew between this node and the store eats into the grace period.
//!
//! Two more checks narrow the race with a push stalled past the grace
//! period (a frozen VM, skewed clocks) to the latency of one request: `gc`
//! reads a generation's manifest again right before it deletes each of
//! its objects, and keeps the object if the manifest now names it; a push,
//! after its commit and before it deletes its checkpoints, checks that L2
//! still holds every file of the generation and uploads again from L1's
//! copy any that went missing.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::error::Result;
use crate::format::manifest::{Manifest, generation_of, manifest_name, parse_manifest_name};
use crate::l1::lock::JobLock;
use crate::l2::chain::ChainIndex;
use crate::store::{DirStore, Store};

/// Whether generation `g`'s manifest, read now, names object `name` (or
/// cannot be told: a read or decode error other than "no such object").
fn named_by_manifest_now(store: &dyn Store, g: u64, name: &str) -> bool {
    let mname = manifest_name(g);
    match store.read(&mname) {
        Err(e) => !e.is_not_found(),
        Ok(b) => match Manifest::decode(Path::new(&mname), &b) {
            Ok(m) => m.files.iter().any(|f| f.name == name),
            Err(_) => true,
        },
    }
}

/// Default grace period: one hour.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(3600);

/// How to collect.
#[derive(Clone, Debug)]
pub struct GcOptions {
    /// Only objects at least this old are deleted.
    pub grace: Duration,
    /// Report what would be deleted, delete nothing.
    pub dry_run: bool,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions {
            grace: DEFAULT_GRACE,
            dry_run: false,
        }
    }
}

/// One object `gc` looked at.
#[derive(Clone, Debug, Serialize)]
pub struct GcObject {
    /// Object name.
    pub name: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Age in seconds, if the store knows it.
    pub age_s: Option<f64>,
}

/// What `gc` did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GcReport {
    /// The store collected.
    pub store: String,
    /// Whether this was a dry run.
    pub dry_run: bool,
    /// The grace period, seconds.
    pub grace_s: f64,
    /// Objects referenced by a manifest (kept).
    pub referenced: usize,
    /// Objects of generations with an invalid manifest (kept as evidence).
    pub evidence: Vec<GcObject>,
    /// Unreferenced objects deleted (or, dry run, to delete).
    pub deleted: Vec<GcObject>,
    /// Unreferenced objects younger than the grace period (kept).
    pub young: Vec<GcObject>,
    /// Bytes deleted (or, dry run, to delete).
    pub bytes_freed: u64,
    /// Unfinished multipart uploads aborted.
    pub aborted_uploads: Vec<String>,
}

/// Collects `store`'s garbage (see the module doc). With `l1`, holds that
/// job's lock throughout (busy: [`crate::Error::Busy`]).
pub fn gc(store: &dyn Store, l1: Option<&Path>, opts: &GcOptions) -> Result<GcReport> {
    let _lock = l1.map(|d| JobLock::acquire(d, "gc")).transpose()?;
    // A directory L2 has a writer lock of its own (see `begin_writing`);
    // L2 equal to L1 is refused there. A dry run writes nothing, not even
    // the lock file (helper-72: `gc -n` made `.rex.lock`, and failed on a
    // read-only L2); what it lists is what the grace period lets go.
    let _l2_lock = match l1 {
        Some(l1) if opts.dry_run => {
            crate::l2::push::check_l2_is_not_l1(store, l1)?;
            None
        }
        _ if opts.dry_run => None,
        _ => crate::l2::push::lock_l2(store, l1, "gc")?,
    };
    // List first, then read the manifests: a manifest committed in between
    // is seen, so none of its files can pass for garbage.
    let objects = store.list()?;
    let index = ChainIndex::load(store)?;
    let mut referenced: BTreeSet<&str> = BTreeSet::new();
    for m in index.manifests.values() {
        referenced.extend(m.files.iter().map(|f| f.name.as_str()));
    }
    let mut invalid: BTreeSet<u64> = index.invalid.iter().map(|(g, _)| *g).collect();
    // A generation between a Δ's chain base and its parent may be one of
    // its ancestors whose manifest was lost: its files are what the Δ's
    // pointers reach, so they are kept as evidence (recovery heals them
    // from L1's copy, `verify` reports them), never collected.
    for m in index.manifests.values() {
        if let Some(p) = m.parent {
            for o in &objects {
                if let Some(g) = generation_of(&o.name)
                    && (m.chain_base..=p).contains(&g)
                    && index.get(g).is_none()
                {
                    invalid.insert(g);
                }
            }
        }
    }
    // A generation whose manifest L1's copy of the chain holds and L2's
    // listing lacks (lost, or committed and not yet listed or readable by
    // a lagging store) is kept: recovery uploads it again from the copy
    // (helper-83: a listing and a GET that did not show a committed
    // manifest yet had `gc --grace 0 --l1` delete its data files). A copy
    // that cannot be read keeps nothing more.
    if let Some(l1) = l1 {
        let copy = DirStore::open_or_empty(l1.join(crate::l2::push::L1_CHAIN_DIR));
        if let Ok(c) = ChainIndex::load(&copy) {
            let held = c.manifests.keys().chain(c.invalid.iter().map(|(g, _)| g));
            invalid.extend(held.filter(|g| index.get(**g).is_none()));
        }
    }
    let now = SystemTime::now();
    let mut report = GcReport {
        store: store.describe(),
        dry_run: opts.dry_run,
        grace_s: opts.grace.as_secs_f64(),
        ..Default::default()
    };
    for o in &objects {
        let Some(g) = generation_of(&o.name) else {
            continue;
        };
        let age = o
            .modified
            .map(|t| now.duration_since(t).unwrap_or_default());
        let entry = GcObject {
            name: o.name.clone(),
            bytes: o.bytes,
            age_s: age.map(|a| a.as_secs_f64()),
        };
        if parse_manifest_name(&o.name).is_some() || referenced.contains(o.name.as_str()) {
            report.referenced += 1;
        } else if invalid.contains(&g) {
            report.evidence.push(entry);
        } else if age.is_some_and(|a| a >= opts.grace) || (age.is_none() && opts.grace.is_zero()) {
            // A push may have committed this generation since the listing:
            // read its manifest again right before deleting each object,
            // and keep the object if that manifest names it (or cannot be
            // read or decoded: anything but "no such object" keeps it).
            if named_by_manifest_now(store, g, &o.name) {
                report.referenced += 1;
                continue;
            }
            if !opts.dry_run {
                store.delete(&o.name)?;
            }
            report.bytes_freed += o.bytes;
            report.deleted.push(entry);
        } else {
            report.young.push(entry);
        }
    }
    if !opts.dry_run {
        report.aborted_uploads = store.abort_stale_uploads(Some(opts.grace))?;
    }
    Ok(report)
}
