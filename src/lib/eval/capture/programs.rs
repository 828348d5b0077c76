//! Real-program workloads for the tests and benches: programs found on a
//! stock Debian machine, captured while they run, so that rexctl is
//! measured on real memory and not only on the generator's.
//!
//! * [`Program::PythonArray`]: a Python 3 script that fills a 32 MiB array
//!   of doubles and updates a sweeping window of it, like a simulation's
//!   time steps (with the interpreter's own heap churn around it);
//! * [`Program::Xz`]: `xz` at preset 9 (with an 8 MiB dictionary, to keep
//!   it small) compressing generated text: a compressor's hash chains and
//!   window;
//! * [`Program::Sqlite`]: `sqlite3` updating rows of an in-memory table:
//!   B-tree pages and the page cache.
//!
//! A program that is not installed is reported by [`Program::available`];
//! callers skip its workload with a note (nothing is installed).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{AfterCapture, CaptureOptions, CommandReport, RunOptions, capture_command};
use crate::error::{Error, IoContext, Result};

/// A real program to capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    /// `python3` updating a large array.
    PythonArray,
    /// `xz -9` compressing a file.
    Xz,
    /// `sqlite3` updating an in-memory table.
    Sqlite,
}

const PYTHON_SCRIPT: &str = r#"
import array, sys, time
seconds = float(sys.argv[1])
n = 4 * 1024 * 1024                      # 32 MiB of doubles
a = array.array('d', bytes(8 * n))
block = 1 << 14
for i in range(0, n, block):
    a[i:i + block] = array.array('d', [float(i + k) * 0.5 for k in range(block)])
end = time.monotonic() + seconds
step, pos = 0, 0
while time.monotonic() < end:
    step += 1
    width = block * (8 + step % 24)       # 1 to 4 MiB per step
    s = pos % n
    e = min(n, s + width)
    a[s:e] = array.array('d', [x * 1.0001 + step for x in a[s:e]])
    pos += width // 2                     # windows overlap: pages are rewritten
"#;

impl Program {
    /// All the programs.
    pub const ALL: [Program; 3] = [Program::PythonArray, Program::Xz, Program::Sqlite];

    /// A short name (`python-array`, `xz`, `sqlite`).
    pub fn name(&self) -> &'static str {
        match self {
            Program::PythonArray => "python-array",
            Program::Xz => "xz",
            Program::Sqlite => "sqlite",
        }
    }

    /// The executable it needs.
    pub fn executable(&self) -> &'static str {
        match self {
            Program::PythonArray => "python3",
            Program::Xz => "xz",
            Program::Sqlite => "sqlite3",
        }
    }

    /// The executable's path, when it is installed (on `PATH`).
    pub fn available(&self) -> Option<PathBuf> {
        find_on_path(self.executable())
    }

    /// The command that runs the workload for about `seconds`, with its
    /// inputs prepared in `scratch`. Standard output and error go nowhere.
    pub fn command(&self, scratch: &Path, seconds: f64) -> Result<Command> {
        let exe = self.available().ok_or_else(|| {
            Error::Invalid(format!(
                "{} is not installed: the {} workload needs it",
                self.executable(),
                self.name()
            ))
        })?;
        std::fs::create_dir_all(scratch).ctx(scratch, "create directory")?;
        let mut cmd = Command::new(exe);
        cmd.stdout(Stdio::null())
            .stderr(Stdio::null())
            .stdin(Stdio::null());
        match self {
            Program::PythonArray => {
                let script = scratch.join("array_steps.py");
                std::fs::write(&script, PYTHON_SCRIPT).ctx(&script, "write")?;
                cmd.arg(script).arg(format!("{seconds}"));
            }
            Program::Xz => {
                let input = scratch.join("input.txt");
                write_text(&input, 12 << 20)?;
                cmd.args(["-T1", "--format=xz", "--lzma2=preset=9,dict=8MiB", "-c"])
                    .arg(input);
            }
            Program::Sqlite => {
                let script = scratch.join("updates.sql");
                write_sql(&script, seconds)?;
                let f = std::fs::File::open(&script).ctx(&script, "open")?;
                cmd.arg(":memory:").stdin(Stdio::from(f));
            }
        }
        Ok(cmd)
    }

    /// Runs the workload and captures `count` checkpoints, `interval`
    /// apart, into the L1 directory `l1` (hash detection), with a FULL copy
    /// of the last stop's image in `full_copy` when given; the program is
    /// killed afterwards.
    pub fn capture(
        &self,
        scratch: &Path,
        l1: &Path,
        interval: Duration,
        count: u64,
        full_copy: Option<PathBuf>,
    ) -> Result<CommandReport> {
        // Long enough that the program outlives the capture.
        let seconds = interval.as_secs_f64() * (count as f64 + 2.0) + 30.0;
        let mut cmd = self.command(scratch, seconds)?;
        let ropts = RunOptions {
            interval,
            count: Some(count),
            full_copy,
            interrupt: None,
        };
        capture_command(
            &mut cmd,
            l1,
            CaptureOptions::default(),
            &ropts,
            AfterCapture::Kill,
            |_| {},
            |_| {},
        )
    }
}

/// The first executable `name` on `PATH`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Deterministic English-like text: compressible, not trivially.
fn write_text(path: &Path, bytes: usize) -> Result<()> {
    const WORDS: [&str; 32] = [
        "the",
        "page",
        "memory",
        "checkpoint",
        "of",
        "and",
        "restore",
        "pattern",
        "a",
        "batch",
        "to",
        "file",
        "incremental",
        "in",
        "level",
        "storage",
        "is",
        "coalesced",
        "with",
        "deduplicated",
        "job",
        "for",
        "failure",
        "node",
        "that",
        "L2",
        "pointer",
        "each",
        "dirty",
        "copy",
        "last",
        "chain",
    ];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut out = Vec::with_capacity(bytes + 64);
    let mut line = 0;
    while out.len() < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let w = WORDS[(x % 32) as usize];
        out.extend_from_slice(w.as_bytes());
        line += w.len() + 1;
        if x.is_multiple_of(97) {
            out.extend_from_slice(format!(" {}", x % 100_000).as_bytes());
        }
        if line > 70 {
            out.push(b'\n');
            line = 0;
        } else {
            out.push(b' ');
        }
    }
    std::fs::write(path, &out).ctx(path, "write")
}

/// An SQL script: a 120,000-row table, then rounds of updates for about
/// `seconds`.
fn write_sql(path: &Path, seconds: f64) -> Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).ctx(path, "create")?);
    let mut s = String::from(
        "PRAGMA cache_size = -65536;\n\
         CREATE TABLE t (id INTEGER PRIMARY KEY, n REAL, tag TEXT, v BLOB);\n\
         WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 120000)\n\
         INSERT INTO t SELECT i, i * 0.5, printf('row-%08d', i), zeroblob(64) || randomblob(32) || zeroblob(64) FROM c;\n\
         CREATE INDEX t_n ON t (n);\n",
    );
    // About 15 ms per round on a small machine.
    let rounds = ((seconds * 70.0) as u64).clamp(10, 1_000_000);
    for k in 0..rounds {
        s.push_str(&format!(
            "UPDATE t SET n = n + {k}, v = zeroblob(64) || randomblob(32) || zeroblob(64) WHERE id % 13 = {};\n",
            k % 13
        ));
        if k % 50 == 49 {
            s.push_str("DELETE FROM t WHERE id % 97 = 0; INSERT OR REPLACE INTO t SELECT id + 1000000, n, tag, v FROM t WHERE id % 89 = 0;\n");
        }
        if s.len() > 1 << 16 {
            f.write_all(s.as_bytes()).ctx(path, "write")?;
            s.clear();
        }
    }
    f.write_all(s.as_bytes()).ctx(path, "write")?;
    f.flush().ctx(path, "write")
}
