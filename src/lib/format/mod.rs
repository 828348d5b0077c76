//! On-disk formats, each in its own module and specified in docs/FORMAT.md.
//!
//! Magic numbers and versions live here as constants that mirror the
//! specification; readers check every CRC and bound every offset before use.

pub mod ic;
