//! rexctl: restore-express multi-level checkpointing (REX).
//!
//! The library is the pipeline; the `rexctl` binary is a thin command line
//! over it. The modules are grouped by pipeline stage, in layers whose
//! dependencies run one way, from the bottom up (`docs/ARCHITECTURE.md`
//! has the map, and a test enforces the order):
//!
//! | layer | module | what it holds |
//! | --- | --- | --- |
//! | 0 | [`error`], [`durable`] | the error type and exit codes; crash-safe publication of files |
//! | 1 | [`mod@format`] | the on-disk formats: REX-IC, P-Table delta, chunked RPS/PF container, manifest |
//! | 2 | [`store`] | the L2 storage trait and its directory and S3 backends |
//! | 3 | [`l1`] | the L1 directory, the Page Coalescer (C-List), the job lock |
//! | 4 | [`l2`] | the Deduplication Unit, chains of generations, push, restore, verify, gc |
//! | 5 | [`control`] | the runtime controller, `flush`, the configuration |
//! | 6 | [`eval`] | workload generator, capture of live processes, analyze, compare |
//! | 6 | [`job`] | librex: a job that checkpoints itself (dirty-page trackers, C API) |
//!
//! The items re-exported here are the API a program needs to drive the
//! pipeline: read and write REX-IC files, coalesce a batch, push it to L2,
//! restore or verify, and let the controller decide when to push:
//!
//! ```no_run
//! use rexctl::{Job, PushOptions, RestoreOptions, StoreSettings, open_l2, push_l2, restore_l2};
//! # fn main() -> rexctl::Result<()> {
//! let settings = StoreSettings::default();
//! let l2 = open_l2("/lustre/ckpt/job42".as_ref(), &settings, true)?;
//! let job = Job::open("/local/ckpt/job42", l2)?;
//! let pushed = push_l2(&job, &PushOptions::default())?;
//! println!("generation {:?}", pushed.manifest.map(|m| m.generation));
//! let l2 = open_l2("/lustre/ckpt/job42".as_ref(), &settings, false)?;
//! restore_l2(&*l2, &RestoreOptions::default(), "image.rexic".as_ref())?;
//! # Ok(())
//! # }
//! ```
//!
//! The design follows Sigdel & Tzeng, "Coalescing and Deduplicating
//! Incremental Checkpoint Files for Restore-Express Multi-Level
//! Checkpointing", IEEE TPDS 2018.

#![warn(missing_docs)]

pub mod control;
pub mod durable;
pub mod error;
pub mod eval;
pub mod format;
pub mod job;
pub mod l1;
pub mod l2;
pub mod mapped;
pub mod store;

pub use control::config::Config;
pub use control::flush::{Decision, FlushReport, decide, flush};
pub use error::{Error, Result};
pub use format::ic::{IcFile, IcMeta, IcWriter};
pub use l1::L1Dir;
pub use l1::coalesce::CList;
pub use l2::push::{Job, PushOptions, PushReport, push_l2};
pub use l2::restore::{
    RestoreOptions, RestoreReport, VerifyReport, restore_l1_l2, restore_l2, verify,
};
pub use store::settings::StoreSettings;
pub use store::{DirStore, Store, open_l2};
