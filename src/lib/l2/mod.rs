//! The L2 side: from a coalesced batch to a chain of generations, and back.
//!
//! The paper's Figs. 5b and 6. The Deduplication Unit ([`dedup`], with its
//! DeD-Table in [`dedup_table`]) turns the C-List of a batch into a
//! generation (P-Table delta, Pointer File, ΔRPS); [`push`] publishes it to
//! the L2 store and L1's copy of the chain in a crash-safe order and only
//! then deletes the IC files it replaced; [`chain`] reads generations back;
//! [`restore`] rebuilds the image (from L2 alone, or L1 plus L2) and
//! verifies chains ([`repair`] rewrites a copy damaged in one place from the
//! other); [`gc`] removes what crashed pushes left; [`status`]
//! reports what both levels hold. An MPI job pushes collectively
//! ([`collective`]: cross-rank deduplication of whole pages) into job
//! generations ([`jobgen`]); the transport is MPI (`mpi`, cargo feature
//! `mpi`).

pub mod chain;
pub mod collective;
pub mod dedup;
pub mod dedup_table;
pub mod gc;
pub mod jobgen;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod partners;
pub mod push;
pub mod repair;
pub mod restore;
pub mod status;
