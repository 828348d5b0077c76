//! The capture state file, `L1/.capture-state`: what a capture remembers
//! between checkpoints and across restarts.
//!
//! It holds the identity of the process the chain belongs to, the seq of
//! the last checkpoint written, and one `(page, hash)` pair per live page of
//! that checkpoint (XXH3-64 of the page's bytes), sorted by page number. The
//! next checkpoint compares every present page's hash with this table: a
//! page whose hash differs, or that is new, is dirty; a page in the table
//! that is no longer present is dropped.
//!
//! The name starts with a dot, so L1 scanning ignores it, and it is written
//! with [`crate::durable::write_file`] (temporary name, fsync, rename): a
//! crash leaves either the old state or the new one. The file is written
//! *after* the checkpoint it describes is published, so it is never ahead of
//! the chain; a state behind the chain (a crash between the two) is detected
//! by comparing `last_seq` with the chain and makes the next capture start a
//! new chain with a FULL checkpoint.
//!
//! Layout (little-endian):
//!
//! ```text
//! offset size
//! 0      8    magic "REXCAPS\n"
//! 8      4    version u32 = 1
//! 12     4    page_size u32
//! 16     8    boot id: XXH3-64 of /proc/sys/kernel/random/boot_id
//! 24     4    pid u32
//! 28     4    flags u32; bit 0: soft-dirty bits were cleared at last_seq
//! 32     8    start time of the process, clock ticks after boot
//! 40     8    last_seq u64
//! 48     8    time_ns u64 of the last checkpoint
//! 56     8    entry_count u64
//! 64     4    command length u32 (at most 4096)
//! 68          command (UTF-8, informational)
//!             entry_count x (page u64, hash u64), pages strictly ascending
//!             crc u32: CRC-32 of every byte before it
//! ```

use std::path::{Path, PathBuf};

use crate::durable;
use crate::error::{Error, Result};

/// Name of the state file inside the L1 directory.
pub const STATE_NAME: &str = ".capture-state";

const MAGIC: [u8; 8] = *b"REXCAPS\n";
const VERSION: u32 = 1;
const FIXED: usize = 68;
const MAX_CMD: usize = 4096;
/// Flag bit 0: the process's soft-dirty bits were cleared at `last_seq`.
pub const FLAG_SOFT_DIRTY_CLEARED: u32 = 1;

/// Who a state (and the chain it continues) belongs to: a process is the
/// same one when its pid, its start time and the boot all match.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ProcessIdentity {
    /// Process id.
    pub pid: u32,
    /// Start time in clock ticks after boot (`/proc/PID/stat` field 22).
    pub start_ticks: u64,
    /// XXH3-64 of the boot id.
    pub boot_id: u64,
    /// The command line, for messages only.
    pub command: String,
}

impl ProcessIdentity {
    /// Whether `other` is the same process (the command is not compared).
    pub fn same_process(&self, other: &ProcessIdentity) -> bool {
        self.pid == other.pid
            && self.start_ticks == other.start_ticks
            && self.boot_id == other.boot_id
    }
}

/// The decoded state file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaptureState {
    /// Page size of the chain.
    pub page_size: u32,
    /// The process the chain belongs to.
    pub process: ProcessIdentity,
    /// Flags (bit 0: the soft-dirty bits were cleared after this state).
    pub flags: u32,
    /// Seq of the last checkpoint written.
    pub last_seq: u64,
    /// Its capture time, Unix nanoseconds.
    pub time_ns: u64,
    /// `(page, hash)` of every live page at `last_seq`, strictly ascending.
    pub entries: Vec<(u64, u64)>,
}

/// Path of the state file of the L1 directory `l1`.
pub fn state_path(l1: &Path) -> PathBuf {
    l1.join(STATE_NAME)
}

impl CaptureState {
    /// Encodes the state, CRC included.
    pub fn encode(&self) -> Vec<u8> {
        let cmd = truncate_utf8(&self.process.command, MAX_CMD).as_bytes();
        let mut b = Vec::with_capacity(FIXED + cmd.len() + self.entries.len() * 16 + 4);
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&self.page_size.to_le_bytes());
        b.extend_from_slice(&self.process.boot_id.to_le_bytes());
        b.extend_from_slice(&self.process.pid.to_le_bytes());
        b.extend_from_slice(&self.flags.to_le_bytes());
        b.extend_from_slice(&self.process.start_ticks.to_le_bytes());
        b.extend_from_slice(&self.last_seq.to_le_bytes());
        b.extend_from_slice(&self.time_ns.to_le_bytes());
        b.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        b.extend_from_slice(&(cmd.len() as u32).to_le_bytes());
        b.extend_from_slice(cmd);
        for (p, h) in &self.entries {
            b.extend_from_slice(&p.to_le_bytes());
            b.extend_from_slice(&h.to_le_bytes());
        }
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and checks a state file's bytes; `path` names it in errors.
    pub fn decode(path: &Path, b: &[u8]) -> Result<CaptureState> {
        let bad = |off: usize, field: &'static str, why: String| {
            Error::corrupt(path, off as u64, field, why)
        };
        if b.len() < FIXED + 4 {
            return Err(bad(
                0,
                "header",
                format!("file is {} bytes, too short for a capture state", b.len()),
            ));
        }
        if b[0..8] != MAGIC {
            return Err(bad(0, "magic", "not a rexctl capture state file".into()));
        }
        let version = le32(b, 8);
        if version != VERSION {
            return Err(bad(
                8,
                "version",
                format!("unsupported version {version} (this rexctl reads {VERSION})"),
            ));
        }
        let stored = le32(b, b.len() - 4);
        let actual = crc32fast::hash(&b[..b.len() - 4]);
        if stored != actual {
            return Err(bad(
                b.len() - 4,
                "crc",
                format!("stored {stored:#010x}, computed {actual:#010x}"),
            ));
        }
        let count = le64(b, 56);
        let cmd_len = le32(b, 64) as usize;
        if cmd_len > MAX_CMD {
            return Err(bad(
                64,
                "command length",
                format!("{cmd_len} is over {MAX_CMD}"),
            ));
        }
        let expect = count
            .checked_mul(16)
            .and_then(|e| e.checked_add((FIXED + cmd_len + 4) as u64));
        if expect != Some(b.len() as u64) {
            return Err(bad(
                56,
                "entry_count",
                format!(
                    "{count} entries and a {cmd_len}-byte command do not fit a {}-byte file",
                    b.len()
                ),
            ));
        }
        let command = String::from_utf8_lossy(&b[FIXED..FIXED + cmd_len]).into_owned();
        let mut entries = Vec::with_capacity(count as usize);
        let mut off = FIXED + cmd_len;
        for i in 0..count as usize {
            let p = le64(b, off);
            if let Some(&(prev, _)) = entries.last()
                && p <= prev
            {
                return Err(bad(
                    off,
                    "entries",
                    format!("entry {i} (page {p}) is not above page {prev}"),
                ));
            }
            entries.push((p, le64(b, off + 8)));
            off += 16;
        }
        Ok(CaptureState {
            page_size: le32(b, 12),
            process: ProcessIdentity {
                pid: le32(b, 24),
                start_ticks: le64(b, 32),
                boot_id: le64(b, 16),
                command,
            },
            flags: le32(b, 28),
            last_seq: le64(b, 40),
            time_ns: le64(b, 48),
            entries,
        })
    }

    /// Reads the state of the L1 directory `l1`: `Ok(None)` when there is
    /// none, an error when the file exists but is unreadable or invalid.
    pub fn load(l1: &Path) -> Result<Option<CaptureState>> {
        let path = state_path(l1);
        match std::fs::read(&path) {
            Ok(b) => Self::decode(&path, &b).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(&path, "read", e)),
        }
    }

    /// Writes the state into the L1 directory `l1`, atomically and durably.
    pub fn save(&self, l1: &Path) -> Result<()> {
        durable::write_file(state_path(l1), &self.encode())
    }
}

fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn le32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

fn le64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> CaptureState {
        CaptureState {
            page_size: 4096,
            process: ProcessIdentity {
                pid: 4242,
                start_ticks: 123_456,
                boot_id: 0xdead_beef,
                command: "python3 -c pass".into(),
            },
            flags: FLAG_SOFT_DIRTY_CLEARED,
            last_seq: 7,
            time_ns: 1_700_000_000_000_000_000,
            entries: vec![(16, 1), (17, 2), (40, 3)],
        }
    }

    #[test]
    fn capture_state_round_trips() {
        let s = sample();
        let b = s.encode();
        assert_eq!(b.len(), FIXED + 15 + 3 * 16 + 4);
        assert_eq!(CaptureState::decode(Path::new("x"), &b).unwrap(), s);
        let d = tempfile::tempdir().unwrap();
        assert_eq!(CaptureState::load(d.path()).unwrap(), None);
        s.save(d.path()).unwrap();
        assert_eq!(CaptureState::load(d.path()).unwrap(), Some(s));
    }

    #[test]
    fn capture_state_rejects_damage_without_panicking() {
        let b = sample().encode();
        for cut in 0..b.len() {
            assert!(
                CaptureState::decode(Path::new("x"), &b[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x40;
            assert!(
                CaptureState::decode(Path::new("x"), &c).is_err(),
                "flip at {i}"
            );
        }
        // A valid CRC over unsorted entries is still rejected.
        let mut s = sample();
        s.entries = vec![(5, 0), (5, 1)];
        let e = CaptureState::decode(Path::new("x"), &s.encode()).unwrap_err();
        assert!(e.to_string().contains("not above"), "{e}");
    }

    #[test]
    fn long_commands_are_cut_on_a_char_boundary() {
        let mut s = sample();
        s.process.command = "é".repeat(3000);
        let d = CaptureState::decode(Path::new("x"), &s.encode()).unwrap();
        assert_eq!(d.process.command.len(), 4096);
    }
}
