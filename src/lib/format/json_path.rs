//! Paths in `--json` reports, written whatever bytes they hold.
//!
//! serde writes a `Path` as a JSON string and fails on one that is not
//! UTF-8 ("path contains invalid UTF-8 characters", naming no file), and it
//! fails only when the report is printed: after the command did its work
//! (`gen` had written its checkpoints). A Linux file name is any bytes, so
//! reports write paths as their lossy UTF-8 form instead (U+FFFD for each
//! invalid sequence), as the human output's `display()` does. Use with
//! `#[serde(serialize_with = "...")]`.

use std::path::Path;

use serde::Serializer;

/// A path as its lossy UTF-8 string.
pub fn path<P: AsRef<Path>, S: Serializer>(p: &P, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&p.as_ref().to_string_lossy())
}

/// An optional path: `null`, or its lossy UTF-8 string.
pub fn opt_path<P: AsRef<Path>, S: Serializer>(p: &Option<P>, s: S) -> Result<S::Ok, S::Error> {
    match p {
        Some(p) => path(p, s),
        None => s.serialize_none(),
    }
}

/// A list of paths, each as its lossy UTF-8 string.
pub fn paths<P: AsRef<Path>, S: Serializer>(v: &[P], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|p| p.as_ref().to_string_lossy()))
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use std::path::PathBuf;

    #[derive(serde::Serialize)]
    struct Report {
        #[serde(serialize_with = "super::path")]
        one: PathBuf,
        #[serde(serialize_with = "super::opt_path")]
        maybe: Option<PathBuf>,
        #[serde(serialize_with = "super::opt_path")]
        none: Option<PathBuf>,
        #[serde(serialize_with = "super::paths")]
        many: Vec<PathBuf>,
    }

    #[test]
    fn a_path_that_is_not_utf8_is_written_lossily() {
        let bad = PathBuf::from(OsStr::from_bytes(b"d\xff/L1"));
        let r = Report {
            one: bad.clone(),
            maybe: Some(bad.clone()),
            none: None,
            many: vec![bad, PathBuf::from("ok")],
        };
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(
            text,
            r#"{"one":"d\u{fffd}/L1","maybe":"d\u{fffd}/L1","none":null,"many":["d\u{fffd}/L1","ok"]}"#
                .replace("\\u{fffd}", "\u{fffd}")
        );
    }
}
