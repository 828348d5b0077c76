//! Shared by the fuzz targets: the readers take files, so each input is
//! written to one scratch file per process, in the directory
//! `REXCTL_FUZZ_SCRATCH` names (scripts/fuzz makes one on tmpfs and removes
//! it afterwards: a fuzzer that stops has no hook to remove its file), else
//! on tmpfs when there is one.

use std::path::PathBuf;

/// Writes `data` to this process's scratch file and returns its path.
pub fn scratch(data: &[u8], ext: &str) -> PathBuf {
    let dir = if let Some(d) = std::env::var_os("REXCTL_FUZZ_SCRATCH") {
        PathBuf::from(d)
    } else if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let path = dir.join(format!("rexctl-fuzz-{}.{ext}", std::process::id()));
    std::fs::write(&path, data).expect("write the scratch file");
    path
}
