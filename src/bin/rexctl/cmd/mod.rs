//! One module per subcommand, grouped like the library's layers.

pub mod config_args;
pub mod control;
pub mod eval;
pub mod l1;
pub mod l2;
pub mod man;
