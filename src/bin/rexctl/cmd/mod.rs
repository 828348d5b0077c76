//! One module per subcommand, grouped like the library's layers.

pub mod completions;
pub mod config_args;
pub mod control;
pub mod eval;
pub mod examples;
pub mod l1;
pub mod l2;
pub mod man;
