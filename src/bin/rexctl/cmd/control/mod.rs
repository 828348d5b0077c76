//! Subcommands of the control loop: `flush`, `plan`.

pub mod flush;
pub mod plan;
