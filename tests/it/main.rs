//! The integration test suite, one binary (as ripgrep does): the real
//! `rexctl` binary in temporary directories, the golden and corrupt fixtures,
//! and property tests of the pipeline against naive models.

mod capture;
mod chain_props;
mod cli;
mod coalesce_props;
#[cfg(feature = "counterparts")]
mod compare;
mod fixtures;
mod flush;
mod l2_faults;
mod layers;
mod librex;
#[cfg(feature = "mpi")]
mod mpi;
mod never_wrong;
mod restart_props;
mod s3;
mod unix;
mod util;
