//! Subcommands of the L1 side: `inspect`, `coalesce`.

pub mod coalesce;
pub mod inspect;
