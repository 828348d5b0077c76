//! One module per subcommand, grouped like the library's layers.

pub mod completions;
pub mod config_args;
pub mod control;
pub mod eval;
pub mod examples;
pub mod l1;
pub mod l2;
pub mod man;

use std::path::Path;

/// An output file is written under a temporary name and renamed into place:
/// only a regular file may be replaced (never a device, a FIFO, a directory
/// or a symlink's link), and only with `--force`. Exit 5 otherwise.
pub fn check_out(out: &Path, force: bool) -> rexctl::Result<()> {
    if out.as_os_str() == "-" {
        return Err(rexctl::Error::Invalid(
            "-: the output cannot be standard output: it is written under a temporary name and renamed into place; give a file name (./- for a file named -)".into(),
        ));
    }
    // A name ending in `/` is a directory's: the output was written whole
    // under a temporary name beside it, and only its rename failed
    // (helper-86).
    if std::os::unix::ffi::OsStrExt::as_bytes(out.as_os_str()).ends_with(b"/") {
        return Err(rexctl::Error::Invalid(format!(
            "{}: names a directory (it ends with /); give the output file's name",
            out.display()
        )));
    }
    if let Ok(m) = std::fs::symlink_metadata(out) {
        if !m.file_type().is_file() {
            return Err(rexctl::Error::Invalid(format!(
                "{}: exists and is not a regular file: the output is written under a temporary name and renamed into place, which would replace it",
                out.display()
            )));
        }
        if !force {
            return Err(rexctl::Error::Invalid(format!(
                "{}: exists; give --force (-f) to replace it",
                out.display()
            )));
        }
    }
    Ok(())
}

/// Whether the file `file` would be a direct entry of directory `dir`
/// (which need not exist yet): the L1 scan reads every REX-IC file there,
/// so an output written there would join the batch.
pub fn lies_in(file: &Path, dir: &Path) -> bool {
    let Some(parent) = file.parent() else {
        return false;
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    match (parent.canonicalize(), dir.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        // A directory that does not exist yet: compare the absolute paths,
        // `.` components dropped.
        _ => match (std::path::absolute(parent), std::path::absolute(dir)) {
            (Ok(a), Ok(b)) => a.components().eq(b.components()),
            _ => false,
        },
    }
}

/// A command line clap accepted that the command refuses: exit 2, as
/// clap's own usage errors.
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// A chart's output (`--svg`): replaced when it exists, as a report is
/// on each run, but only when what is there is a chart too (helper-95:
/// `--svg l2/g00000001.manifest` replaced a manifest and lost its
/// generation), and never a device or a directory.
pub fn check_chart(out: &Path) -> rexctl::Result<()> {
    check_out(out, true)?;
    if let Ok(f) = std::fs::File::open(out) {
        let mut head = [0u8; 1024];
        let n = std::io::Read::read(&mut &f, &mut head).unwrap_or(0);
        let text = String::from_utf8_lossy(&head[..n]);
        if n > 0 && !text.contains("<svg") {
            return Err(rexctl::Error::Invalid(format!(
                "{}: exists and is not an SVG chart; give another name, or remove it first",
                out.display()
            )));
        }
    }
    Ok(())
}

/// Refuses an output `out` (`flag` names it) anywhere inside the
/// directory `dir` (`what` names it), at any depth: a checkpoint directory
/// whose files the output would replace or join (helper-46: `restore -o`
/// onto an L2 data file or L1's copy of the chain lost the generation;
/// into L1, its image joined the pending checkpoints and blocked every
/// push).
pub fn not_inside(out: &Path, flag: &str, dir: &Path, what: &str) -> rexctl::Result<()> {
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let inside = match (parent.canonicalize(), dir.canonicalize()) {
        (Ok(a), Ok(b)) => a.starts_with(b),
        _ => match (std::path::absolute(parent), std::path::absolute(dir)) {
            (Ok(a), Ok(b)) => a
                .components()
                .collect::<Vec<_>>()
                .starts_with(&b.components().collect::<Vec<_>>()),
            _ => false,
        },
    };
    if inside {
        return Err(rexctl::Error::Invalid(format!(
            "{flag} {}: lies in {what} {}, whose files it would replace or join; write it elsewhere",
            out.display(),
            dir.display()
        )));
    }
    Ok(())
}

/// clap value parser of a count that must be at least 1 (clap's own
/// `range(1..)` prints the whole `u64` range in its message).
pub fn at_least_one(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}
