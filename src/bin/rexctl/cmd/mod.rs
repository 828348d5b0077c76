//! One module per subcommand.

pub mod coalesce;
pub mod config_args;
pub mod demo;
pub mod flush;
pub mod generate;
pub mod inspect;
pub mod man;
pub mod plan;
pub mod push;
pub mod restore;
pub mod status;
pub mod verify;
