//! Where the objects of an MPI job live: one chain per rank and the job
//! manifests (docs/FORMAT.md §3.9.1).
//!
//! A collective push names the *job's* L2 location, not a rank's: in a
//! directory, rank `r`'s chain is the subdirectory `r/` and the job
//! manifests are in `job/`; in a bucket, they are `prefix/<job>/<r>/` and
//! `prefix/<job>/job/`, the very prefixes a single-rank push of rank `r`
//! uses. So every rank's chain is an ordinary chain that the single-rank
//! commands read as they are, and only the job manifests are new.

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::store::settings::StoreSettings;
use crate::store::{DirStore, L2Location, Store, open_l2, open_s3};

/// The name of the job manifests' place beside the ranks' chains.
pub const JOB_DIR: &str = "job";

/// A job's L2 location, from which every rank's store and the job store
/// are opened.
#[derive(Clone, Debug)]
pub struct JobRoot {
    location: PathBuf,
    settings: StoreSettings,
}

impl JobRoot {
    /// The job at `location` (a directory or `s3://bucket/prefix`), reached
    /// with `settings` (the job name; the rank is set per store).
    pub fn new(location: impl AsRef<Path>, settings: &StoreSettings) -> Result<JobRoot> {
        let location = location.as_ref().to_path_buf();
        // Parse now, so that a bad location is reported before any rank
        // opens a store.
        L2Location::parse(&location)?;
        Ok(JobRoot {
            location,
            settings: settings.clone(),
        })
    }

    /// What to call the job's location in messages.
    pub fn describe(&self) -> String {
        self.location.display().to_string()
    }

    /// Whether the location is a directory.
    pub fn is_dir(&self) -> bool {
        matches!(L2Location::parse(&self.location), Ok(L2Location::Dir(_)))
    }

    /// Rank `rank`'s store. With `create`, a missing directory is made.
    pub fn rank_store(&self, rank: u32, create: bool) -> Result<Box<dyn Store>> {
        self.open(&rank.to_string(), create)
    }

    /// The store of the job manifests.
    pub fn job_store(&self, create: bool) -> Result<Box<dyn Store>> {
        self.open(JOB_DIR, create)
    }

    fn open(&self, part: &str, create: bool) -> Result<Box<dyn Store>> {
        Ok(match L2Location::parse(&self.location)? {
            L2Location::Dir(p) if create => {
                // The job directory itself follows open_l2's rule for a new
                // relative directory; the parts below it are ours to make.
                open_l2(&self.location, &self.settings, true)?;
                Box::new(DirStore::create(p.join(part))?)
            }
            L2Location::Dir(p) => Box::new(DirStore::open_or_empty(p.join(part))),
            L2Location::S3 { bucket, prefix } => {
                let mut s = self.settings.clone();
                s.rank = part.to_string();
                open_s3(&bucket, &prefix, &s)?
            }
        })
    }
}
