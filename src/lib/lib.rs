//! rexctl: restore-express multi-level checkpointing (REX).
//!
//! The library is the pipeline; the `rexctl` binary is a thin command line
//! over it. One module per pipeline stage, on-disk formats in [`format`]:
//!
//! * [`format::ic`]: the REX-IC L1 checkpoint file (read, validate, write).
//! * [`l1`]: an L1 directory as a chain of IC files ordered by `seq`.
//! * [`coalesce`]: the Page Coalescer and its C-List.
//! * [`workload`]: a deterministic workload generator for tests, benches, demos.
//! * [`durable`]: crash-safe publication of files.
//!
//! The design follows Sigdel & Tzeng, "Coalescing and Deduplicating
//! Incremental Checkpoint Files for Restore-Express Multi-Level
//! Checkpointing", IEEE TPDS 2018.

pub mod control;
pub mod durable;
pub mod error;
pub mod eval;
pub mod format;
pub mod l1;
pub mod l2;
pub mod store;

pub use error::{Error, Result};
