//! Evaluation: trying rexctl on workloads and programs, and against others.
//!
//! Nothing in the pipeline depends on this layer. [`workload`] generates
//! deterministic checkpoint batches (tests, benches, the demo); [`capture`]
//! takes real L1 checkpoints of a live process from outside (ptrace), to try
//! rexctl on a program before adopting it; [`analyze`] computes the paper's
//! motivation figures (Figs. 1-3) on a batch; `compare` (feature `counterparts`) replays a batch
//! through REX and the paper's counterparts (§6); [`image`] is the one
//! byte-for-byte comparison of memory images that every check uses.

pub mod analyze;
pub mod capture;
// Built with the default cargo feature `counterparts` (their crates).
#[cfg(feature = "counterparts")]
pub mod compare;
pub mod image;
pub mod workload;
