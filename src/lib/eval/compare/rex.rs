//! REX itself, through the real pipeline: the batch's IC files are placed
//! in a scratch L1 directory as the job writes them (not timed), then
//! [`push_l2`] coalesces, deduplicates and publishes a generation into the
//! L2 directory (timed: lock, recovery, coalescing, deduplication into
//! `L1/rex/`, upload to L2, manifests, fsyncs, deleting the batch). The
//! restore is [`restore_l2`], the permanent-failure restore from L2 alone.
//!
//! Under the controller plan, [`crate::control::flush::decide`] runs after each
//! placed checkpoint with the default configuration (the paper's Table 1,
//! MTBF 10,000 s, no age or size limits), with the checkpoint's own capture
//! time as "now", so the batches do not depend on when the comparison runs.

use std::path::Path;

use crate::control::config::{Config, ConfigLayer};
use crate::control::flush::decide;
use crate::error::{Error, IoContext, Result};
use crate::format::manifest::manifest_name;
use crate::l2::chain::ChainIndex;
use crate::l2::push::{Job, PushOptions, push_l2};
use crate::l2::restore::{RestoreOptions, restore_l2};
use crate::store::DirStore;

use super::{Batch, Breakdown, Counterpart};

/// REX, through `push-l2` and `restore --l2`.
#[derive(Default)]
pub struct Rex {
    job: Option<(Job, Config)>,
    /// The kind of each generation pushed, and why a full one was.
    kinds: Vec<String>,
    /// Per generation: a complete coalescence.
    full: Vec<bool>,
    /// Why the controller's last decision asked for a complete coalescence.
    reason: Option<String>,
    /// The manifests' timings, summed.
    breakdown: Breakdown,
    /// REX's settings from the REX_* variables, read once, outside the
    /// timed pushes and restores.
    settings: ConfigLayer,
}

impl Rex {
    /// REX with the settings of the REX_* variables (REX_THREADS=1 for
    /// single-core figures, REX_ZSTD_LEVEL, ...); no rex.toml.
    pub fn from_env() -> Result<Rex> {
        Ok(Rex {
            settings: ConfigLayer::from_env()?,
            ..Rex::default()
        })
    }

    fn job(&mut self, batch: &Batch<'_>) -> Result<&(Job, Config)> {
        if self.job.is_none() {
            let l1 = batch.work.join("l1");
            std::fs::create_dir_all(&l1).ctx(&l1, "create directory")?;
            let job = Job::open(&l1, Box::new(DirStore::create(batch.l2)?))?;
            let cfg = Config::resolve(
                ConfigLayer {
                    l1: Some(l1),
                    l2: Some(batch.l2.to_path_buf()),
                    ..self.settings.clone()
                },
                Vec::new(),
            )?;
            self.job = Some((job, cfg));
        }
        Ok(self.job.as_ref().expect("set above"))
    }
}

impl Counterpart for Rex {
    fn name(&self) -> &'static str {
        super::REX
    }

    fn stage(&mut self, batch: &Batch<'_>) -> Result<()> {
        let l1 = self.job(batch)?.0.l1.clone();
        for m in batch.files {
            let name = m
                .path
                .file_name()
                .ok_or_else(|| Error::Invalid(format!("{}: no file name", m.path.display())))?;
            let dst = l1.join(name);
            std::fs::copy(&m.path, &dst).ctx(&dst, "copy")?;
        }
        Ok(())
    }

    fn due(&mut self, now_ns: u64) -> Result<Option<bool>> {
        let (job, cfg) = self
            .job
            .as_ref()
            .ok_or_else(|| Error::Invalid("REX: nothing staged".into()))?;
        let d = decide(job, cfg, now_ns)?;
        self.reason = d.full_reason.filter(|_| d.due && d.full);
        Ok(d.due.then_some(d.full))
    }

    fn push(&mut self, batch: &Batch<'_>) -> Result<Option<String>> {
        let (job, cfg) = self.job(batch)?;
        let opts = PushOptions {
            full: batch.force_full,
            format: cfg.write_format,
            dedup_memory: cfg.dedup_memory,
            max_chain_length: cfg.max_chain_length,
            ..PushOptions::default()
        };
        let r = push_l2(job, &opts)?;
        let Some(m) = &r.manifest else {
            return Err(Error::Invalid(format!(
                "REX: push-l2 found nothing to push for batch {}",
                batch.number
            )));
        };
        let reason = self.reason.take();
        self.kinds.push(match (m.parent, reason, &r.full_reason) {
            (Some(_), _, _) => "delta".into(),
            (None, Some(why), _) => format!("full ({why})"),
            (None, None, Some(why)) if !batch.force_full => format!("full ({why})"),
            (None, _, _) => "full".into(),
        });
        self.full.push(m.parent.is_none());
        self.breakdown.coalesce_s += m.timings.coalesce_s;
        self.breakdown.dedup_s += m.timings.dedup_s;
        self.breakdown.upload_s += m.timings.upload_s;
        self.breakdown.dedup_bytes += m.dirty_pages * u64::from(m.page_size);
        Ok(None)
    }

    fn remark(&self) -> Option<String> {
        Some(format!("generations: {}", self.kinds.join(", ")))
    }

    fn full_generations(&self) -> Vec<bool> {
        self.full.clone()
    }

    fn breakdown(&self) -> Breakdown {
        self.breakdown.clone()
    }

    fn restore_reads(&self, l2: &Path) -> Result<u64> {
        let store = DirStore::open(l2)?;
        let index = ChainIndex::load(&store)?;
        let newest = index
            .newest()
            .ok_or_else(|| Error::chain(l2, "no generation"))?;
        let mut n = 0;
        for m in index.lineage(newest.generation, &store)? {
            n += m.files.iter().map(|f| f.bytes).sum::<u64>();
            let man = l2.join(manifest_name(m.generation));
            n += std::fs::metadata(&man).ctx(&man, "stat")?.len();
        }
        Ok(n)
    }

    fn restore(&self, l2: &Path, out: &Path) -> Result<Option<String>> {
        let opts = RestoreOptions {
            threads: self.settings.threads.unwrap_or(0),
            ..RestoreOptions::default()
        };
        restore_l2(&DirStore::open(l2)?, &opts, out)?;
        Ok(None)
    }
}
