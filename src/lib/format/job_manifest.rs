//! The job manifest of an MPI job (docs/FORMAT.md §3.9.3): the object whose
//! presence makes a *job generation* exist.
//!
//! A collective push writes one generation per rank (each with its own
//! manifest, in its own chain); pages of one rank may be stored by another
//! (cross-rank references, [`crate::format::xref`]). Those generations are
//! usable only together, so the job generation is committed by one more
//! manifest, written by rank 0 only after every rank's manifest is durable
//! in L2: it names each rank's generation and the CRC-32 of that rank's
//! manifest bytes. Framed like a generation manifest (`REXJOB1`, JSON, a
//! `crc32` line).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::format::manifest::{MAX_MANIFEST_BYTES, decode_framed, encode_framed};

/// First line of every job manifest.
pub const MAGIC_LINE: &str = "REXJOB1";
/// Job manifest format version (the `format` field).
pub const FORMAT: u32 = 1;
/// The most ranks a job manifest may name: a member is about 100 bytes of
/// JSON, and the whole object stays under [`MAX_MANIFEST_BYTES`].
pub const MAX_RANKS: u32 = (MAX_MANIFEST_BYTES / 128) as u32;

/// One rank's part of a job generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobMember {
    /// The rank.
    pub rank: u32,
    /// Its generation (in its own chain, `<job>/<rank>/`).
    pub generation: u64,
    /// The CRC-32 of that generation's manifest bytes, as committed.
    pub manifest_crc32: u32,
    /// That generation's chain base.
    pub chain_base: u64,
}

/// A job generation's manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobManifest {
    /// Format version.
    pub format: u32,
    /// The job generation (increasing, never reused).
    pub job_generation: u64,
    /// The job's name, when one is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// Ranks in the job (the communicator's size).
    pub ranks: u32,
    /// One member per rank, ascending by rank from 0.
    pub members: Vec<JobMember>,
    /// Every member's generation starts a chain (a collective complete
    /// coalescence): older job generations may be pruned after it.
    pub full: bool,
    /// Creation time, Unix nanoseconds.
    pub created_ns: u64,
    /// The rexctl version that wrote it.
    pub writer: String,
}

impl JobManifest {
    /// Encodes the job manifest with its frame.
    pub fn encode(&self) -> Vec<u8> {
        encode_framed(MAGIC_LINE, self)
    }

    /// Decodes and checks job manifest bytes read from `path`.
    pub fn decode(path: &Path, b: &[u8]) -> Result<JobManifest> {
        let m: JobManifest = decode_framed(path, b, MAGIC_LINE, "a rexctl job manifest")?;
        m.check(path)?;
        Ok(m)
    }

    /// Checks the internal consistency.
    pub fn check(&self, path: &Path) -> Result<()> {
        let bad = |field: &'static str, why: String| Err(Error::corrupt(path, 0, field, why));
        if self.format != FORMAT {
            return bad(
                "format",
                format!(
                    "unsupported job manifest format {} (this rexctl reads {FORMAT})",
                    self.format
                ),
            );
        }
        if !(1..=MAX_RANKS).contains(&self.ranks) || self.members.len() != self.ranks as usize {
            return bad(
                "members",
                format!(
                    "{} ranks with {} members (1..={MAX_RANKS} ranks, one member each)",
                    self.ranks,
                    self.members.len()
                ),
            );
        }
        for (i, m) in self.members.iter().enumerate() {
            if m.rank as usize != i {
                return bad(
                    "members",
                    format!("member {i} is rank {}, expected rank {i}", m.rank),
                );
            }
            if m.chain_base > m.generation || (self.full && m.chain_base != m.generation) {
                return bad(
                    "members",
                    format!(
                        "rank {} generation {} with chain base {} (full {})",
                        m.rank, m.generation, m.chain_base, self.full
                    ),
                );
            }
        }
        Ok(())
    }

    /// Rank `rank`'s member.
    pub fn member(&self, rank: u32) -> Option<&JobMember> {
        self.members.get(rank as usize)
    }
}

/// Object name of job generation `j`'s manifest (in the job's `job/`
/// prefix).
pub fn job_manifest_name(j: u64) -> String {
    format!("j{j:08}.job")
}

/// Parses a job manifest name back to its job generation (canonical
/// spelling only).
pub fn parse_job_manifest_name(name: &str) -> Option<u64> {
    let j: u64 = name.strip_prefix('j')?.strip_suffix(".job")?.parse().ok()?;
    (job_manifest_name(j) == name).then_some(j)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> JobManifest {
        JobManifest {
            format: FORMAT,
            job_generation: 3,
            job: Some("cm1".into()),
            ranks: 2,
            members: vec![
                JobMember {
                    rank: 0,
                    generation: 5,
                    manifest_crc32: 0xdead_beef,
                    chain_base: 4,
                },
                JobMember {
                    rank: 1,
                    generation: 5,
                    manifest_crc32: 1,
                    chain_base: 4,
                },
            ],
            full: false,
            created_ns: 1,
            writer: "test".into(),
        }
    }

    #[test]
    fn a_job_manifest_round_trips_and_damage_is_named() {
        let p = Path::new("job/j00000003.job");
        let m = sample();
        let b = m.encode();
        assert_eq!(JobManifest::decode(p, &b).unwrap(), m);
        let mut bad = b.clone();
        let i = bad.len() / 2;
        bad[i] ^= 1;
        let e = JobManifest::decode(p, &bad).unwrap_err().to_string();
        assert!(e.contains("crc32") || e.contains("json"), "{e}");
        let mut m2 = m.clone();
        m2.members.swap(0, 1);
        let e = JobManifest::decode(p, &m2.encode())
            .unwrap_err()
            .to_string();
        assert!(e.contains("member 0 is rank 1"), "{e}");
        assert_eq!(parse_job_manifest_name(&job_manifest_name(3)), Some(3));
        assert_eq!(parse_job_manifest_name("j3.job"), None);
    }
}
