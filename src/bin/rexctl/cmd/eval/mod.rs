//! Evaluation subcommands: `gen`, `demo`, `capture`, `analyze`, `compare`.

pub mod analyze;
pub mod capture;
#[cfg(feature = "counterparts")]
pub mod compare;
pub mod demo;
pub mod generate;
