//! One module per subcommand.

pub mod coalesce;
pub mod demo;
pub mod generate;
pub mod inspect;
pub mod man;
pub mod push;
pub mod restore;
pub mod status;
pub mod verify;
