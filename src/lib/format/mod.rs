//! On-disk formats, each in its own module and specified in docs/FORMAT.md.
//!
//! Magic numbers and versions live here as constants that mirror the
//! specification; readers check every CRC and bound every offset before use.
//!
//! * [`ic`]: REX-IC, the L1 incremental checkpoint file (§2).
//! * [`chunked`]: the record container of RPS files and Pointer Files (§3.2).
//! * [`ptable`]: the P-Table delta of a generation (§3.3).
//! * [`manifest`]: the generation manifest (§3.4).

pub mod chunked;
pub mod ic;
pub mod manifest;
pub mod ptable;
