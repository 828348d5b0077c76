//! The generation manifest (docs/FORMAT.md §3.4): the file whose presence
//! makes a generation exist.
//!
//! A manifest is JSON, because people read it when a restore goes wrong,
//! framed for integrity: the line `REXMAN1`, the JSON object, and a last line
//! `crc32 XXXXXXXX` holding the CRC-32 of every byte before that line. It is
//! written last, after every file it names is durable, so a generation
//! without a valid manifest does not exist. Each file it names is checked
//! against the recorded size whenever it is opened, against the recorded
//! whole-file CRC-32 whenever it is copied (upload, copy back to L1) and by
//! `verify`; restores rely on the files' own chunk CRCs and on each rebuilt
//! page's CRC.
//!
//! The whole-file CRC-32 cannot tell apart two P-Tables (or Xref files)
//! of the same length: each of their regions ends with its own CRC-32, and
//! a CRC-32 run over data followed by that data's CRC ends in the same
//! state whatever the data (the CRC's residue), so the file's CRC depends
//! on its length alone. Those files carry what every restore trusts (page
//! numbers, page CRCs, drops), so the manifest also records their XXH3-64
//! (`xxh3`), checked whenever one is opened (docs/FORMAT.md §3.4.2).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::format::ic::{ChainId, InstanceId};
use crate::format::ptable::check_sizes;
use crate::format::region::RegionTable;

/// First line of every manifest.
pub const MAGIC_LINE: &str = "REXMAN1";
/// Manifest format version (the `format` field).
pub const FORMAT: u32 = 1;

/// Whether a generation starts a chain (full RPS) or extends one (ΔRPS).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GenKind {
    /// A full RPS: complete coalescence, the base of a chain.
    Full,
    /// A ΔRPS on top of its parent.
    Delta,
}

/// The role of a file in a generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The RPS (full or Δ).
    Rps,
    /// The Pointer File.
    Pf,
    /// The P-Table delta.
    Ptable,
    /// The cross-rank references of an MPI job's generation (optional;
    /// docs/FORMAT.md §3.9).
    Xref,
}

/// One file of a generation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// What the file is.
    pub role: Role,
    /// Object name within the chain directory.
    pub name: String,
    /// Size in bytes.
    pub bytes: u64,
    /// CRC-32 of the whole file.
    pub crc32: u32,
    /// XXH3-64 of the whole file, for the P-Table and the Xref file (see
    /// the module doc for why their CRC-32 does not bind them); absent in
    /// manifests written before it, and for the RPS and Pointer File, whose
    /// chunks' CRCs are in their chunk table and whose pages' CRCs are in
    /// the P-Table.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "hex64")]
    pub xxh3: Option<u64>,
}

/// `Option<u64>` as 16 lowercase hex digits in JSON (a 64-bit number is not
/// exact in every JSON reader people use on a manifest).
mod hex64 {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(x) => s.serialize_str(&format!("{x:016x}")),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        let Some(h) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        if h.len() != 16
            || !h
                .bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
        {
            return Err(D::Error::custom(format!(
                "xxh3 {h:?} is not 16 lowercase hex digits"
            )));
        }
        u64::from_str_radix(&h, 16)
            .map(Some)
            .map_err(D::Error::custom)
    }
}

impl FileEntry {
    /// The XXH3-64 of the file at `path` when it differs from the recorded
    /// `xxh3` (`None` when it agrees, or when the entry records none).
    pub fn xxh3_mismatch(&self, path: &Path) -> Result<Option<u64>> {
        use crate::error::IoContext;
        let Some(want) = self.xxh3 else {
            return Ok(None);
        };
        let got = xxhash_rust::xxh3::xxh3_64(&std::fs::read(path).ctx(path, "read")?);
        Ok((got != want).then_some(got))
    }
}

impl Role {
    /// The extension of this role's object name (`gNNNNNNNN.<ext>`).
    pub fn ext(self) -> &'static str {
        match self {
            Role::Rps => "rps",
            Role::Pf => "pf",
            Role::Ptable => "ptab",
            Role::Xref => "xref",
        }
    }
}

/// Length, CRC-32 and XXH3-64 of `bytes` (a P-Table's or Xref file's, as
/// written), for its [`FileEntry`].
pub fn digest(bytes: &[u8]) -> (u64, u32, u64) {
    (
        bytes.len() as u64,
        crc32fast::hash(bytes),
        xxhash_rust::xxh3::xxh3_64(bytes),
    )
}

/// Time spent in each stage of the push, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// Scanning L1 and building the C-List.
    pub coalesce_s: f64,
    /// Deduplication (reading pages, DeD-Table, writing RPS/PF/P-Table to L1).
    pub dedup_s: f64,
    /// Uploading the data files to L2: what the push waited for them after
    /// the deduplication (the RPS and Pointer File stream to L2 while they
    /// are written).
    pub upload_s: f64,
    /// Seconds the uploads spent moving bytes (the streamed files' upload
    /// threads' time not spent waiting for the unit, plus the files sent
    /// after it): the L2 bytes over this is the link's rate. 0 (absent) in
    /// manifests written before it was recorded.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_zero"
    )]
    pub link_s: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// An optional member written as `null` reads as if absent (FORMAT.md
/// §3.4.2: "may be absent (or `null`)"), for members whose absence is a
/// default value rather than `None` (helper-98: `null` was refused there,
/// accepted for the `Option` members).
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// The largest manifest a reader accepts: a real one is a few KiB (its
/// size does not grow with the data), so anything larger is damage, and
/// never read into memory.
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// The most instance spans a manifest carries; a writer keeps the newest.
/// Each costs about 80 bytes of manifest; a run restarts this often only
/// in a crash loop.
pub const MAX_INSTANCE_SPANS: usize = 1024;

/// Which process wrote the checkpoints of a run from `from_seq` on (up to
/// the next span's `from_seq`, or the generation's `last_seq`): the
/// instance id their IC files carry, `None` for files without one
/// (docs/FORMAT.md §3.4). Spans let a push tell the checkpoints it holds
/// from a fork's checkpoints of the same seqs, whatever the clocks say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceSpan {
    /// The first seq of the span.
    pub from_seq: u64,
    /// The instance id of its checkpoints (absent: they carry none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<InstanceId>,
    /// The writers of these seqs are no longer recorded (older spans were
    /// dropped at the cap): no checkpoint of them counts as covered.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub forgotten: bool,
}

/// A checkpoint of another run that a generation's batch coalesced: the
/// job restarted as a new run within the batch, whose FULL checkpoint
/// made the generation a full one of the new run (docs/FORMAT.md §3.4).
/// The covered rule (§3.1.6) takes a file with exactly these fields as
/// pushed, so that a push that stopped after its commit, before deleting
/// its batch, does not leave files no later push can use or delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OtherRun {
    /// The run's chain id.
    pub chain_id: ChainId,
    /// The checkpoint's seq.
    pub seq: u64,
    /// Its capture time (its REX-IC `time_ns`).
    pub time_ns: u64,
    /// The instance that wrote it (absent: the file names none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<InstanceId>,
}

/// Who wrote a seq of a generation's run, by its spans.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Writer {
    /// The spans do not reach back to the seq (or there are none).
    #[default]
    Unknown,
    /// Files that carry no instance id.
    NoId,
    /// The instance with this id.
    Id(InstanceId),
    /// Recorded once, dropped at the cap.
    Forgotten,
}

impl Writer {
    /// The instance id, when one is recorded.
    pub fn id(self) -> Option<InstanceId> {
        match self {
            Writer::Id(i) => Some(i),
            _ => None,
        }
    }

    /// What a checkpoint that continues this writer's records
    /// ([`crate::format::ic::IcExt::continues`]): `None` when the writer
    /// is not known.
    pub fn continued(self) -> Option<Option<InstanceId>> {
        match self {
            Writer::Id(i) => Some(Some(i)),
            Writer::NoId => Some(None),
            Writer::Unknown | Writer::Forgotten => None,
        }
    }
}

/// A generation's manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Manifest format version.
    pub format: u32,
    /// Generation number (increasing, never reused within a job).
    pub generation: u64,
    /// The generation this one extends (`None` for a chain base).
    pub parent: Option<u64>,
    /// The chain's base generation (itself for a full one).
    pub chain_base: u64,
    /// Full or Δ.
    pub kind: GenKind,
    /// Page size in bytes.
    pub page_size: u32,
    /// Pattern size in bytes.
    pub pattern_size: u32,
    /// First L1 seq coalesced into this generation.
    pub first_seq: u64,
    /// Last L1 seq coalesced: the generation restores the state at this seq.
    pub last_seq: u64,
    /// Capture time of checkpoint `last_seq` (Unix nanoseconds), carried
    /// into restored images.
    pub time_ns: u64,
    /// Pointer of this generation's first pattern in the chain's space.
    pub pattern_base: u64,
    /// Patterns in this generation's RPS.
    pub patterns: u64,
    /// Live pages after this generation.
    pub live_pages: u64,
    /// Pages written by this generation (its C-List).
    pub dirty_pages: u64,
    /// Pages dropped by this generation.
    pub dropped_pages: u64,
    /// The data files.
    pub files: Vec<FileEntry>,
    /// Bytes of the IC files this generation replaces (what plain IC would
    /// have shipped).
    pub bytes_in: u64,
    /// Bytes of the data files (what rexctl shipped).
    pub bytes_out: u64,
    /// `bytes_in / bytes_out`.
    pub compression_ratio: f64,
    /// Stage times.
    pub timings: Timings,
    /// Creation time, Unix nanoseconds.
    pub created_ns: u64,
    /// The rexctl version that wrote it.
    pub writer: String,
    /// The run (REX-IC chain id) whose checkpoints this generation holds:
    /// the chain id of checkpoint `last_seq`. Absent when those checkpoints
    /// were version 1 files, which carry none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain_id: Option<ChainId>,
    /// The job that pushed it (the first level of its prefix in a bucket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The rank within the job that pushed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<String>,
    /// The region table of checkpoint `last_seq`, when a job checkpointing
    /// itself through librex wrote it (docs/FORMAT.md §2.12).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regions: Option<RegionTable>,
    /// The job generation this generation belongs to, when a collective
    /// push of an MPI job wrote it (docs/FORMAT.md §3.9): it exists for a
    /// restore only once that job generation's manifest does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_generation: Option<u64>,
    /// The instances that wrote the run's checkpoints up to `last_seq`,
    /// ascending by `from_seq` (at most [`MAX_INSTANCE_SPANS`], the newest);
    /// seqs before the first span are not known. Empty in manifests written
    /// before instance ids.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub instances: Vec<InstanceSpan>,
    /// `(seq, time_ns)` of the checkpoints of the generation's run that its
    /// batch coalesced (the newest [`MAX_SEQ_TIMES`]), ascending: a leftover
    /// checkpoint that names no instance is covered only if its time is its
    /// seq's here, whatever the clocks did (docs/FORMAT.md §3.1.6). Empty in
    /// manifests written before it.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub seq_times: Vec<(u64, u64)>,
    /// The checkpoints of other runs (version 2 files) that the
    /// generation's batch coalesced, ascending by seq (the newest
    /// [`MAX_SEQ_TIMES`]); empty unless the job restarted as a new run
    /// within the batch. Absent in manifests written before it.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub other_runs: Vec<OtherRun>,
}

/// The most `seq_times` a manifest carries: a batch of more checkpoints
/// keeps its newest, the older fall back to the time rule.
pub const MAX_SEQ_TIMES: usize = 4096;

impl Manifest {
    /// Pointers per page.
    pub fn alpha(&self) -> u64 {
        u64::from(self.page_size / self.pattern_size)
    }

    /// Patterns addressable after this generation (the chain's pattern
    /// space so far).
    pub fn pattern_end(&self) -> u64 {
        self.pattern_base + self.patterns
    }

    /// Who wrote checkpoint `seq` of the run.
    pub fn instance_at(&self, seq: u64) -> Writer {
        instance_at(&self.instances, seq)
    }

    /// The entry of the file with `role`.
    pub fn file(&self, role: Role) -> Option<&FileEntry> {
        self.files.iter().find(|f| f.role == role)
    }

    /// Encodes the manifest with its frame.
    pub fn encode(&self) -> Vec<u8> {
        encode_framed(MAGIC_LINE, self)
    }

    /// Decodes and checks manifest bytes read from `path`.
    pub fn decode(path: &Path, b: &[u8]) -> Result<Manifest> {
        let m: Manifest = decode_framed(path, b, MAGIC_LINE, "a rexctl manifest")?;
        m.check(path)?;
        Ok(m)
    }

    /// Checks the manifest's internal consistency.
    pub fn check(&self, path: &Path) -> Result<()> {
        let bad = |field: &'static str, why: String| Err(Error::corrupt(path, 0, field, why));
        if let Some(t) = &self.regions
            && let Err(why) = t.check(self.page_size)
        {
            return bad("regions", why);
        }
        if self.format != FORMAT {
            return bad(
                "format",
                format!(
                    "unsupported manifest format {} (this rexctl reads {FORMAT})",
                    self.format
                ),
            );
        }
        if let Err((_, field, why)) = check_sizes(self.page_size, self.pattern_size) {
            return bad(field, why);
        }
        match (self.kind, self.parent) {
            (GenKind::Full, None)
                if self.chain_base == self.generation && self.pattern_base == 0 => {}
            (GenKind::Delta, Some(p)) if p < self.generation && self.chain_base <= p => {}
            _ => {
                return bad(
                    "kind",
                    format!(
                        "inconsistent lineage: kind {:?}, parent {:?}, chain_base {}, generation {}, pattern_base {}",
                        self.kind, self.parent, self.chain_base, self.generation, self.pattern_base
                    ),
                );
            }
        }
        if self
            .pattern_base
            .checked_add(self.patterns)
            .is_none_or(|end| end > 1 << 32)
        {
            return bad(
                "patterns",
                format!(
                    "pattern space {} + {} patterns ends beyond 2^32",
                    self.pattern_base, self.patterns
                ),
            );
        }
        if self.dirty_pages.checked_mul(self.alpha()).is_none() {
            return bad(
                "dirty_pages",
                format!("{} pages overflow the pointer count", self.dirty_pages),
            );
        }
        // Page counts are of one image, whose bytes a u64 addresses: a
        // count past it is no generation's (helper-111: live_pages 2^52
        // made `plan` and a cron `flush` panic on live_pages * page_size).
        for (field, n) in [
            ("live_pages", self.live_pages),
            ("dirty_pages", self.dirty_pages),
            ("dropped_pages", self.dropped_pages),
        ] {
            if n.checked_mul(u64::from(self.page_size)).is_none() {
                return bad(
                    field,
                    format!(
                        "{n} pages of {} bytes are more than a 64-bit address space",
                        self.page_size
                    ),
                );
            }
        }
        if self.first_seq > self.last_seq {
            return bad(
                "first_seq",
                format!("first_seq {} > last_seq {}", self.first_seq, self.last_seq),
            );
        }
        if self.instances.len() > MAX_INSTANCE_SPANS {
            return bad(
                "instances",
                format!(
                    "{} spans (at most {MAX_INSTANCE_SPANS})",
                    self.instances.len()
                ),
            );
        }
        if let Some(w) = self
            .instances
            .windows(2)
            .find(|w| w[0].from_seq >= w[1].from_seq)
        {
            return bad(
                "instances",
                format!(
                    "spans not ascending: from_seq {} then {}",
                    w[0].from_seq, w[1].from_seq
                ),
            );
        }
        if let Some((i, s)) = self
            .instances
            .iter()
            .enumerate()
            .find(|(i, s)| s.forgotten && (*i > 0 || s.id.is_some()))
        {
            return bad(
                "instances",
                format!(
                    "span {i} (from seq {}) is forgotten but {}",
                    s.from_seq,
                    if i > 0 {
                        "not the first"
                    } else {
                        "names an id"
                    }
                ),
            );
        }
        if self.seq_times.len() > MAX_SEQ_TIMES
            || self.seq_times.windows(2).any(|w| w[0].0 >= w[1].0)
            || self
                .seq_times
                .last()
                .is_some_and(|&(q, _)| q > self.last_seq)
        {
            return bad(
                "seq_times",
                format!(
                    "{} entries: at most {MAX_SEQ_TIMES}, seqs strictly ascending and at most last_seq {}",
                    self.seq_times.len(),
                    self.last_seq
                ),
            );
        }
        // A push lists the checkpoint of `last_seq` last, with the time it
        // also records as `time_ns` (a batch ends with it; a generation
        // without a batch carries its parent's). A `last_seq` beyond it
        // would make later checkpoints look pushed, and their files be
        // deleted from L1 (helper-59).
        if let Some(&(q, t)) = self.seq_times.last()
            && (q, t) != (self.last_seq, self.time_ns)
        {
            return bad(
                "seq_times",
                format!(
                    "the newest entry is seq {q} taken at {t} ns, but the generation holds up to seq {} taken at {} ns",
                    self.last_seq, self.time_ns
                ),
            );
        }
        if self.other_runs.len() > MAX_SEQ_TIMES
            || self
                .other_runs
                .iter()
                .any(|o| Some(o.chain_id) == self.chain_id)
        {
            return bad(
                "other_runs",
                format!(
                    "{} entries: at most {MAX_SEQ_TIMES}, none of the generation's own run",
                    self.other_runs.len()
                ),
            );
        }
        if let Some(s) = self.instances.last()
            && s.from_seq > self.last_seq
        {
            return bad(
                "instances",
                format!(
                    "a span from seq {} after last_seq {}",
                    s.from_seq, self.last_seq
                ),
            );
        }
        for role in [Role::Rps, Role::Pf, Role::Ptable] {
            if self.files.iter().filter(|f| f.role == role).count() != 1 {
                return bad("files", format!("needs exactly one {role:?} file"));
            }
        }
        if self.files.iter().filter(|f| f.role == Role::Xref).count() > 1 {
            return bad("files", "more than one Xref file".into());
        }
        if self.file(Role::Xref).is_some() && self.job_generation.is_none() {
            return bad(
                "files",
                "an Xref file outside a job generation (no job_generation)".into(),
            );
        }
        for f in &self.files {
            let want = object_name(self.generation, f.role.ext());
            if f.name != want {
                return bad(
                    "files",
                    format!(
                        "the {:?} file is named {:?}, not {want:?} (generation {}'s)",
                        f.role, f.name, self.generation
                    ),
                );
            }
        }
        Ok(())
    }
}

/// [`Manifest::instance_at`] over `spans`.
pub fn instance_at(spans: &[InstanceSpan], seq: u64) -> Writer {
    let i = spans.partition_point(|s| s.from_seq <= seq);
    match i.checked_sub(1).map(|i| &spans[i]) {
        None => Writer::Unknown,
        Some(s) if s.forgotten => Writer::Forgotten,
        Some(InstanceSpan { id: Some(id), .. }) => Writer::Id(*id),
        Some(_) => Writer::NoId,
    }
}

/// The spans of a generation of run `chain` that holds `parent`'s state
/// (when it is of the same run) and then the checkpoints `batch`, in seq
/// order: `parent`'s spans, a new span wherever the instance changes. Past
/// [`MAX_INSTANCE_SPANS`], the oldest spans give way to one `forgotten`
/// span from the first seq they described: those seqs are then never taken
/// as covered, rather than judged by times again.
pub fn extend_instances(
    parent: Option<&Manifest>,
    chain: Option<ChainId>,
    batch: &[(u64, Option<InstanceId>)],
) -> Vec<InstanceSpan> {
    let mut spans: Vec<InstanceSpan> = parent
        .filter(|p| p.chain_id == chain)
        .map(|p| p.instances.clone())
        .unwrap_or_default();
    for &(seq, id) in batch {
        // Spans describe seqs up to the parent's last one; a batch starts
        // after it, but never let a span begin at or before an earlier one.
        spans.retain(|s| s.from_seq < seq || s.from_seq == seq && s.id == id && !s.forgotten);
        if spans.last().is_none_or(|s| s.id != id || s.forgotten) {
            spans.push(InstanceSpan {
                from_seq: seq,
                id,
                forgotten: false,
            });
        }
    }
    if spans.len() > MAX_INSTANCE_SPANS {
        let from_seq = spans[0].from_seq;
        spans.drain(..spans.len() - (MAX_INSTANCE_SPANS - 1));
        spans.insert(
            0,
            InstanceSpan {
                from_seq,
                id: None,
                forgotten: true,
            },
        );
    }
    spans
}

/// Frames `value` as a manifest-like object: the line `magic_line`, the
/// value as pretty JSON, and a last line `crc32 XXXXXXXX` holding the CRC-32
/// of every byte before it (generation manifests, job manifests).
pub fn encode_framed<T: Serialize>(magic_line: &str, value: &T) -> Vec<u8> {
    let mut s = format!("{magic_line}\n");
    s.push_str(&serde_json::to_string_pretty(value).expect("manifest serializes"));
    s.push('\n');
    let crc = crc32fast::hash(s.as_bytes());
    s.push_str(&format!("crc32 {crc:08x}\n"));
    s.into_bytes()
}

/// Checks the frame of [`encode_framed`] bytes read from `path` (first line
/// `magic_line`, `what` naming the format in errors; the CRC line) and
/// parses the JSON between.
pub fn decode_framed<T: serde::de::DeserializeOwned>(
    path: &Path,
    b: &[u8],
    magic_line: &str,
    what: &str,
) -> Result<T> {
    let magic = format!("{magic_line}\n");
    if !b.starts_with(magic.as_bytes()) {
        return Err(Error::corrupt(
            path,
            0,
            "magic",
            format!("expected the line {magic_line:?} ({what})"),
        ));
    }
    let body_end = b[..b.len().saturating_sub(1)]
        .iter()
        .rposition(|&c| c == b'\n')
        .map(|i| i + 1)
        .filter(|&i| i >= magic.len())
        .ok_or_else(|| {
            Error::corrupt(
                path,
                b.len() as u64,
                "crc32",
                "missing the final `crc32` line",
            )
        })?;
    let line = std::str::from_utf8(&b[body_end..]).unwrap_or("");
    let stored = line
        .strip_prefix("crc32 ")
        .and_then(|h| h.strip_suffix('\n'))
        .filter(|h| h.len() == 8)
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .ok_or_else(|| {
            Error::corrupt(
                path,
                body_end as u64,
                "crc32",
                format!(
                    "malformed last line {:?}{} (truncated?)",
                    line.chars().take(80).collect::<String>(),
                    if line.chars().nth(80).is_some() {
                        "..."
                    } else {
                        ""
                    }
                ),
            )
        })?;
    let actual = crc32fast::hash(&b[..body_end]);
    if stored != actual {
        return Err(Error::corrupt(
            path,
            body_end as u64,
            "crc32",
            format!("stored {stored:08x}, computed {actual:08x} over the manifest"),
        ));
    }
    serde_json::from_slice(&b[magic.len()..body_end]).map_err(|e| {
        Error::corrupt(
            path,
            magic.len() as u64 + e.column() as u64,
            "json",
            e.to_string(),
        )
    })
}

/// Object name of a generation's file with the given extension.
pub fn object_name(generation: u64, ext: &str) -> String {
    format!("g{generation:08}.{ext}")
}

/// Object name of a generation's manifest.
pub fn manifest_name(generation: u64) -> String {
    object_name(generation, "manifest")
}

/// Parses a manifest object name back to its generation; only the
/// canonical spelling ([`manifest_name`]) is accepted.
pub fn parse_manifest_name(name: &str) -> Option<u64> {
    let g = name.strip_prefix('g')?.strip_suffix(".manifest")?;
    let g: u64 = g.parse().ok()?;
    (manifest_name(g) == name).then_some(g)
}

/// A name of a manifest's listing form (`g`, at least 8 ASCII digits,
/// `.manifest`: FORMAT.md §3.1.1) that is not a generation's canonical
/// manifest name (`g000000004.manifest`, or digits beyond 2^64 - 1): the
/// generation it names (2^64 - 1 when the digits overflow), which readers
/// report as an invalid manifest of it. Ignored, such a name let a restore
/// give the generation before it with exit 0 (helper-74).
pub fn stray_manifest_name(name: &str) -> Option<u64> {
    let d = name.strip_prefix('g')?.strip_suffix(".manifest")?;
    if d.len() < 8 || !d.bytes().all(|b| b.is_ascii_digit()) || parse_manifest_name(name).is_some()
    {
        return None;
    }
    Some(d.parse().unwrap_or(u64::MAX))
}

/// The generation of a generation file name `gNNNNNNNN.<ext>` (canonical
/// spelling only), for any extension.
pub fn generation_of(name: &str) -> Option<u64> {
    let (stem, ext) = name.split_once('.')?;
    let g: u64 = stem.strip_prefix('g')?.parse().ok()?;
    (object_name(g, ext) == name).then_some(g)
}

/// A manifest with every field set (generation 4, a Δ of 5 live pages),
/// for unit tests here and elsewhere.
#[cfg(test)]
pub(crate) fn test_manifest() -> Manifest {
    let files = [Role::Rps, Role::Pf, Role::Ptable]
        .into_iter()
        .map(|role| FileEntry {
            role,
            name: object_name(4, role.ext()),
            bytes: 100,
            crc32: 7,
            xxh3: (role == Role::Ptable).then_some(0xdead_beef),
        })
        .collect();
    Manifest {
        format: FORMAT,
        generation: 4,
        parent: Some(3),
        chain_base: 1,
        kind: GenKind::Delta,
        page_size: 4096,
        pattern_size: 32,
        first_seq: 10,
        last_seq: 12,
        time_ns: 1,
        pattern_base: 1000,
        patterns: 10,
        live_pages: 5,
        dirty_pages: 2,
        dropped_pages: 0,
        files,
        bytes_in: 1,
        bytes_out: 1,
        compression_ratio: 1.0,
        timings: Timings::default(),
        created_ns: 1,
        writer: "test".into(),
        chain_id: None,
        job: None,
        rank: None,
        regions: None,
        job_generation: None,
        instances: Vec::new(),
        seq_times: Vec::new(),
        other_runs: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Manifest {
        test_manifest()
    }

    fn decode(m: &Manifest) -> Result<Manifest> {
        Manifest::decode(Path::new("g00000004.manifest"), &m.encode())
    }

    #[test]
    fn xxh3_is_written_as_hex_and_read_back() {
        let m = manifest();
        let text = String::from_utf8(m.encode()).unwrap();
        assert!(text.contains("\"xxh3\": \"00000000deadbeef\""), "{text}");
        // Only where it is known: the RPS and Pointer File entries have none.
        assert_eq!(text.matches("xxh3").count(), 1, "{text}");
        assert_eq!(decode(&m).unwrap(), m);
    }

    /// Every optional member may be written as `null`: it reads as if
    /// absent (FORMAT.md §3.4.2).
    #[test]
    fn an_optional_member_written_as_null_reads_as_absent() {
        let mut v = serde_json::to_value(manifest()).unwrap();
        for k in [
            "chain_id",
            "job",
            "rank",
            "regions",
            "job_generation",
            "instances",
            "seq_times",
            "other_runs",
        ] {
            v[k] = serde_json::Value::Null;
        }
        v["timings"]["link_s"] = serde_json::Value::Null;
        let got = Manifest::decode(Path::new("m"), &encode_framed(MAGIC_LINE, &v)).unwrap();
        assert!(got.instances.is_empty() && got.seq_times.is_empty() && got.other_runs.is_empty());
        assert_eq!(
            (got.timings.link_s, got.chain_id, got.job),
            (0.0, None, None)
        );
    }

    #[test]
    fn a_malformed_xxh3_is_refused() {
        let good = String::from_utf8(manifest().encode()).unwrap();
        for bad in [
            "00000000DEADBEEF",
            "deadbeef",
            "00000000deadbeeg",
            "0x000000deadbeef",
        ] {
            let body = good.replace("00000000deadbeef", bad);
            let body = &body[..body.rfind("crc32 ").unwrap()];
            let framed = format!("{body}crc32 {:08x}\n", crc32fast::hash(body.as_bytes()));
            let e = Manifest::decode(Path::new("m"), framed.as_bytes()).unwrap_err();
            assert!(e.to_string().contains("xxh3"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_file_must_bear_its_generations_name_for_its_role() {
        for (i, name) in [
            "g00000004.rps\u{0}x",
            "g00000003.rps",
            "g00000004.pf",
            "g4.rps",
            "../g00000004.rps",
            "",
        ]
        .into_iter()
        .enumerate()
        {
            let mut m = manifest();
            m.files[0].name = name.into();
            let e = decode(&m).unwrap_err();
            assert!(
                matches!(e, Error::Corrupt { .. }) && e.to_string().contains("g00000004.rps"),
                "case {i} {name:?}: {e}"
            );
        }
        decode(&manifest()).unwrap();
    }
    /// `seq_times` is read back, and refused out of order, past
    /// `last_seq`, too long, or when its newest entry is not `last_seq`
    /// at `time_ns` (helper-59: a `last_seq` raised past it made later
    /// checkpoints look pushed).
    #[test]
    fn seq_times_ascend_up_to_the_last_seq() {
        let mut m = manifest();
        let (l, t) = (m.last_seq, m.time_ns);
        m.seq_times = vec![(l - 1, t + 10), (l, t)];
        assert_eq!(decode(&m).unwrap(), m);
        let text = String::from_utf8(m.encode()).unwrap();
        assert!(text.contains("\"seq_times\""), "{text}");
        for bad in [
            vec![(l, t), (l - 1, 2)],
            vec![(l, 1), (l, t)],
            vec![(l + 1, t)],
            vec![(l - 2, 1), (l - 1, t)],
            vec![(l - 1, 1), (l, t + 1)],
            (0..=MAX_SEQ_TIMES as u64).map(|q| (q, q)).collect(),
        ] {
            m.seq_times = bad;
            let e = decode(&m).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::Corrupt {
                        field: "seq_times",
                        ..
                    }
                ),
                "{e}"
            );
        }
    }

    /// `other_runs` is read back (each entry whole), and refused when it
    /// names the generation's own run or is too long.
    #[test]
    fn other_runs_name_other_runs_only() {
        let mut m = manifest();
        m.chain_id = Some(ChainId([0xA; 16]));
        let other = OtherRun {
            chain_id: ChainId([0xB; 16]),
            seq: 3,
            time_ns: 7,
            instance: id(2),
        };
        m.other_runs = vec![
            other,
            OtherRun {
                instance: None,
                seq: 4,
                ..other
            },
        ];
        assert_eq!(decode(&m).unwrap(), m);
        for bad in [
            vec![OtherRun {
                chain_id: ChainId([0xA; 16]),
                ..other
            }],
            vec![other; MAX_SEQ_TIMES + 1],
        ] {
            m.other_runs = bad;
            let e = decode(&m).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::Corrupt {
                        field: "other_runs",
                        ..
                    }
                ),
                "{e}"
            );
        }
    }

    fn id(b: u8) -> Option<InstanceId> {
        Some(InstanceId([b; 16]))
    }

    #[test]
    fn instance_spans_follow_the_writers_and_keep_the_newest() {
        let chain = Some(ChainId([0xA; 16]));
        let mut parent = manifest();
        parent.chain_id = chain;
        parent.instances = extend_instances(None, chain, &[(0, id(1)), (1, id(1)), (2, None)]);
        let want = |v: &[(u64, Option<InstanceId>)]| -> Vec<InstanceSpan> {
            v.iter()
                .map(|&(from_seq, id)| InstanceSpan {
                    from_seq,
                    id,
                    forgotten: false,
                })
                .collect()
        };
        assert_eq!(parent.instances, want(&[(0, id(1)), (2, None)]));
        assert_eq!(
            instance_at(&parent.instances, 1),
            Writer::Id(id(1).unwrap())
        );
        assert_eq!(instance_at(&parent.instances, 9), Writer::NoId);
        // A Δ of the run carries the parent's spans on.
        let next = extend_instances(Some(&parent), chain, &[(13, None), (14, id(2))]);
        assert_eq!(next, want(&[(0, id(1)), (2, None), (14, id(2))]));
        // Another run starts afresh; seqs before the first span are unknown.
        let other = extend_instances(Some(&parent), Some(ChainId([0xB; 16])), &[(20, id(3))]);
        assert_eq!(other, want(&[(20, id(3))]));
        assert_eq!(instance_at(&other, 19), Writer::Unknown);
        // At most MAX_INSTANCE_SPANS: the newest, after one forgotten span
        // from the first seq the dropped ones described.
        let n = MAX_INSTANCE_SPANS as u64 + 100;
        let many: Vec<_> = (0..n).map(|s| (s + 5, id(s as u8 % 2 + 1))).collect();
        let capped = extend_instances(None, chain, &many);
        assert_eq!(capped.len(), MAX_INSTANCE_SPANS);
        assert_eq!(capped.last().unwrap().from_seq, n + 4);
        assert!(
            capped[0].forgotten && capped[0].from_seq == 5,
            "{:?}",
            capped[0]
        );
        assert_eq!(instance_at(&capped, 4), Writer::Unknown);
        assert_eq!(instance_at(&capped, 100), Writer::Forgotten);
        assert_eq!(instance_at(&capped, n + 4), Writer::Id(id(2).unwrap()));
        // Capped again: the forgotten span still starts at seq 5.
        let mut p = manifest();
        p.chain_id = chain;
        p.instances = capped.clone();
        let again = extend_instances(Some(&p), chain, &[(n + 5, id(1))]);
        assert_eq!(again.len(), MAX_INSTANCE_SPANS);
        assert!(again[0].forgotten && again[0].from_seq == 5);
        assert_eq!(again[1].from_seq, capped[2].from_seq);
        let mut m = manifest();
        m.last_seq = n + 4;
        m.instances = capped;
        assert_eq!(decode(&m).unwrap(), m);
    }

    #[test]
    fn bad_instance_spans_are_refused() {
        let span = |from_seq| InstanceSpan {
            from_seq,
            id: id(1),
            forgotten: false,
        };
        let forgot = |from_seq, id| InstanceSpan {
            from_seq,
            id,
            forgotten: true,
        };
        for (spans, why) in [
            (vec![span(1), forgot(2, None)], "not the first"),
            (vec![forgot(1, id(1))], "names an id"),
            (vec![span(5), span(5)], "not ascending"),
            (vec![span(6), span(5)], "not ascending"),
            (vec![span(13)], "after last_seq"),
            (
                (0..MAX_INSTANCE_SPANS as u64 + 1).map(span).collect(),
                "at most 1024",
            ),
        ] {
            let mut m = manifest();
            m.last_seq = 2000.min(spans.len() as u64 + 11);
            m.instances = spans;
            let e = decode(&m).unwrap_err().to_string();
            assert!(e.contains("instances") && e.contains(why), "{e}");
        }
    }
}
