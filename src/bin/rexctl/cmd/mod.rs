//! One module per subcommand.

pub mod analyze;
pub mod capture;
pub mod coalesce;
pub mod compare;
pub mod config_args;
pub mod demo;
pub mod flush;
pub mod gc;
pub mod generate;
pub mod inspect;
pub mod man;
pub mod plan;
pub mod push;
pub mod restore;
pub mod status;
pub mod verify;
