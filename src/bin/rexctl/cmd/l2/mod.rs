//! Subcommands of the L2 side: `push-l2`, `restore`, `verify`, `status`, `gc`.

pub mod gc;
pub mod push;
pub mod restore;
pub mod status;
pub mod verify;
