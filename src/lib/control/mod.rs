//! The runtime control loop: when an L2 checkpoint is due, and of which kind.
//!
//! The paper's §4. [`controller`] interpolates Table 1 and applies the cost
//! rule that chooses a complete coalescence over a ΔRPS; [`flush`] is what
//! cron runs (take the job lock, recover, decide, push); [`config`] layers
//! `rex.toml`, `REX_*` variables and flags into the settings of a job.

pub mod config;
pub mod controller;
pub mod flush;
