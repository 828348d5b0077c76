//! `flush`: what cron runs every minute. Takes the job lock without
//! waiting, recovers from any interrupted push, asks the controller whether
//! an L2 checkpoint is due and of which kind, and pushes when it is.
//!
//! The decision is a pure function of the job's files (pending IC headers,
//! the L2 manifests) and the configuration, so `--dry-run` and `plan` show
//! exactly what a real run would do. The cost-rule terms come from the
//! chain's own manifests:
//!
//! * `Psi`: mean time (coalesce + dedup + upload) per live byte of the
//!   full generations kept in L2, times the current footprint (a complete
//!   coalescence deduplicates every live page);
//! * `C`: mean time of the Δ generations kept in L2; before any exists,
//!   `Psi / 2`;
//! * `delta`: mean bytes of a Δ generation (before any exists: the pending
//!   bytes over the last compression ratio) divided by the L2 read rate, which
//!   is the configured `read_rate_mbps`, else the mean measured upload rate of
//!   past pushes (their L2 bytes over their `link_s`, the time their uploads
//!   spent moving bytes: the RPS streams beside the deduplication, so the
//!   push's wait for it says nothing of the link), else 200 MB/s;
//! * `T`: mean capture-time distance between consecutive generations; before
//!   two exist, `[chi]` times the mean L1 interval of the pending checkpoints,
//!   else 600 s;
//! * `M`: the configured MTBF (default 10,000 s).
//!
//! Beyond the paper, a **bytes rule**: a complete coalescence is also taken
//! when the chain's own generations predict it at most `full_bytes_margin`
//! (default 0) larger than the ΔRPS of the same batch. The full RPS is
//! predicted from the full generations' L2 bytes per live page times the
//! newest footprint, the ΔRPS from the Δ generations' bytes per dirty page
//! times the pages the pending checkpoints carry (the C-List's size, from
//! their headers). Where nearly every page changes every
//! interval (a database rewriting its rows, a solver's whole state), a ΔRPS
//! saves almost nothing, yet a restore must read every generation of the
//! chain, whose live patterns lie scattered over all of their chunks: on a
//! sqlite capture a Δ second generation was 2.5 % smaller than a full one,
//! and the restore read 270 chunks instead of 154 and took 85 ms instead of
//! 61 (docs/PERFORMANCE.md). Before a Δ generation exists nothing predicts
//! a ΔRPS, and the rule waits.

use std::time::Instant;

use serde::Serialize;

use crate::control::config::Config;
use crate::control::controller::{CostRule, chi_int};
use crate::error::Result;
use crate::format::manifest::{GenKind, Manifest};
use crate::l1::coalesce::CList;
use crate::l1::{Covered, L1Dir};
use crate::l2::chain::ChainIndex;
use crate::l2::push::{Job, PushOptions, PushReport, begin_writing, push_locked, recover};

/// Default L2 read rate when nothing was measured, bytes per second.
const DEFAULT_RATE: f64 = 200e6;
/// Default L2 interval when nothing was measured, seconds.
const DEFAULT_T: f64 = 600.0;

/// The controller's decision and every input it used.
#[derive(Clone, Debug, Serialize)]
pub struct Decision {
    /// Whether an L2 checkpoint is due now.
    pub due: bool,
    /// Why (or why not).
    pub reason: String,
    /// Pending L1 checkpoints.
    pub pending: usize,
    /// Their bytes.
    pub pending_bytes: u64,
    /// Age of the oldest pending checkpoint, seconds.
    pub oldest_age_s: Option<f64>,
    /// Latest incremental size over the full checkpoint size.
    pub ic: f64,
    /// Compression ratio of the previous L2 checkpoint.
    pub cr: f64,
    /// Interpolated optimum interval.
    pub chi: f64,
    /// `[chi]`.
    pub chi_int: u64,
    /// Whether the push would be a complete coalescence.
    pub full: bool,
    /// Why it would be.
    pub full_reason: Option<String>,
    /// Δ generations since the last full one.
    pub n: u64,
    /// Generations in the newest chain.
    pub chain_length: u64,
    /// The cost rule's terms (absent before the first generation).
    pub rule: Option<CostRule>,
    /// The bytes rule's predictions (absent until the chain holds a full
    /// and a Δ generation).
    pub bytes_rule: Option<BytesRule>,
}

/// The bytes rule (module doc): the predicted L2 bytes of a complete
/// coalescence and of a ΔRPS of the pending batch.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct BytesRule {
    /// Predicted bytes of a full RPS generation now.
    pub full_bytes: f64,
    /// Predicted bytes of the ΔRPS generation of the pending batch.
    pub delta_bytes: f64,
    /// The margin: a full one is taken when `full_bytes <= delta_bytes *
    /// (1 + margin)`.
    pub margin: f64,
}

impl BytesRule {
    /// Predicts both from the generations of the newest chain and the
    /// pending batch's C-List size (`dirty` pages); `None` when the chain
    /// has no full or no Δ generation with pages to learn from.
    pub fn predict(
        chain: &[&Manifest],
        live_pages: u64,
        dirty: u64,
        margin: f64,
    ) -> Option<BytesRule> {
        let per = |kind: GenKind, pages: fn(&Manifest) -> u64| {
            mean(
                chain
                    .iter()
                    .filter(|m| m.kind == kind && pages(m) > 0)
                    .map(|m| m.bytes_out as f64 / pages(m) as f64),
            )
        };
        let full = per(GenKind::Full, |m| m.live_pages)?;
        let delta = per(GenKind::Delta, |m| m.dirty_pages)?;
        Some(BytesRule {
            full_bytes: full * live_pages as f64,
            delta_bytes: delta * dirty as f64,
            margin,
        })
    }

    /// Whether a complete coalescence costs at most the margin more.
    pub fn due(&self) -> bool {
        self.full_bytes <= self.delta_bytes * (1.0 + self.margin)
    }
}

/// [`decide`] now, without the job's lock (`plan`, `flush -n`): read
/// again when a push changed the files under the read
/// ([`read_unlocked`](crate::l2::status::read_unlocked); helper-73: a
/// spurious "seq N missing", exit 3, about 1 in 280 beside a job pushing
/// in a loop).
pub fn decide_unlocked(job: &Job, cfg: &Config) -> Result<Decision> {
    crate::l2::status::read_unlocked(
        job,
        || decide(job, cfg, crate::format::ic::now_ns()),
        |_| false,
    )
}

/// Computes the controller's decision for `job` now (`now_ns`, Unix
/// nanoseconds), from its files and `cfg`.
pub fn decide(job: &Job, cfg: &Config, now_ns: u64) -> Result<Decision> {
    // After the newest generation of either place (recovery has uploaded
    // any generation L2 lacked, so they agree but after a failed upload).
    let index = ChainIndex::load(job.l2.as_ref())?.overlaid_with(&ChainIndex::load(&job.l1_chain)?);
    let newest = index.newest();
    let l1 = L1Dir::scan_after(&job.l1, newest.map(Covered::from))
        .map_err(|e| crate::l2::push::invalid_above(e, newest.map(|m| m.generation), &[&index]))?;
    let pending = &l1.files;
    let pending_bytes: u64 = pending.iter().map(|m| m.layout.file_len).sum();
    let oldest_age_s = pending
        .first()
        .map(|m| now_ns.saturating_sub(m.header.time_ns) as f64 / 1e9);
    let chain: Vec<&Manifest> = match newest {
        Some(n) => index.chain(n.chain_base).collect(),
        None => Vec::new(),
    };
    let chain_length = chain.len() as u64;
    let n = chain.iter().filter(|m| m.kind == GenKind::Delta).count() as u64;

    // IC: the latest incremental over the full checkpoint.
    let full_bytes = match newest {
        Some(m) => m.live_pages * u64::from(m.page_size),
        None => pending
            .iter()
            .find(|m| m.is_full())
            .map(|m| m.data_bytes())
            .unwrap_or(0),
    };
    let latest = pending.last().map(|m| m.data_bytes()).unwrap_or(0);
    let ic = if full_bytes > 0 {
        latest as f64 / full_bytes as f64
    } else {
        1.0
    };
    let cr = newest
        .map(|m| m.compression_ratio)
        .filter(|c| *c > 0.0)
        .unwrap_or(2.0);
    let chi = cfg.interval_table.chi(ic, cr);
    let chi_n = chi_int(chi);

    let mut d = Decision {
        due: false,
        reason: String::new(),
        pending: pending.len(),
        pending_bytes,
        oldest_age_s,
        ic,
        cr,
        chi,
        chi_int: chi_n,
        full: false,
        full_reason: None,
        n,
        chain_length,
        rule: None,
        bytes_rule: None,
    };
    if pending.is_empty() {
        d.reason = "no pending L1 checkpoint".into();
        return Ok(d);
    }
    let Some(newest) = newest else {
        d.due = true;
        d.full = true;
        d.reason = "first checkpoint: the full checkpoint goes to L2 at once".into();
        d.full_reason = Some("first generation".into());
        return Ok(d);
    };
    if pending.len() as u64 >= chi_n {
        d.due = true;
        d.reason = format!(
            "{} pending L1 checkpoints >= [chi] = {chi_n}",
            pending.len()
        );
    } else if let (Some(max), Some(age)) = (cfg.max_age_s, oldest_age_s)
        && age > max
    {
        d.due = true;
        d.reason = format!("oldest pending checkpoint is {age:.0} s old > max_age {max} s");
    } else if let Some(max) = cfg.max_pending_bytes
        && pending_bytes > max
    {
        d.due = true;
        d.reason = format!("{pending_bytes} pending bytes > max_pending_bytes {max}");
    } else {
        d.reason = format!("{} pending L1 checkpoints < [chi] = {chi_n}", pending.len());
    }

    // Kind: the batch, pointer space, chain length, bytes rule, cost rule.
    let rule = cost_rule(&index, cfg, newest, pending_bytes, chi_n, pending);
    d.rule = Some(rule);
    // The batch's C-List size, as the push will coalesce it (from the
    // headers already read; a batch the push would refuse predicts nothing).
    d.bytes_rule = CList::build(pending).ok().and_then(|c| {
        BytesRule::predict(
            &chain,
            newest.live_pages,
            c.entries.len() as u64,
            cfg.full_bytes_margin,
        )
    });
    let alpha = newest.alpha();
    let max_new_patterns: u64 = pending.iter().map(|m| m.pages.len() as u64).sum::<u64>() * alpha;
    if pending.iter().any(|m| m.is_full()) {
        d.full_reason = Some("the batch holds a FULL checkpoint".into());
    } else if newest.pattern_end() + max_new_patterns > 1 << 32 {
        d.full_reason = Some("the pattern pointer space could overflow".into());
    } else if chain_length >= cfg.max_chain_length {
        d.full_reason = Some(format!(
            "the chain has {chain_length} generations, max_chain_length is {}",
            cfg.max_chain_length
        ));
    } else if let Some(b) = d.bytes_rule.filter(BytesRule::due) {
        // Before the cost rule: bytes are what the files say, where the
        // cost rule weighs push times a loaded machine moves.
        d.full_reason = Some(format!(
            "bytes rule: a full RPS predicted at {:.0} bytes, the ΔRPS at {:.0} (margin {:.0} %)",
            b.full_bytes,
            b.delta_bytes,
            b.margin * 100.0
        ));
    } else if rule.due(n) {
        d.full_reason = Some(format!(
            "cost rule: n = {n} >= (Psi - C) / (p delta) - 1 = {:.1}",
            rule.threshold
        ));
    }
    d.full = d.full_reason.is_some();
    Ok(d)
}

fn mean(xs: impl Iterator<Item = f64>) -> Option<f64> {
    let (s, k) = xs.fold((0.0, 0usize), |(s, k), x| (s + x, k + 1));
    (k > 0).then(|| s / k as f64)
}

fn cost_rule(
    index: &ChainIndex,
    cfg: &Config,
    newest: &Manifest,
    pending_bytes: u64,
    chi_n: u64,
    pending: &[crate::format::ic::IcMeta],
) -> CostRule {
    let cost = |m: &Manifest| m.timings.coalesce_s + m.timings.dedup_s + m.timings.upload_s;
    let all: Vec<&Manifest> = index.manifests.values().collect();
    // A complete coalescence deduplicates every live page, so its cost
    // scales with the footprint: Psi is the full generations' mean cost per
    // live byte times today's footprint. (The chain's very first generation
    // often holds one small FULL checkpoint; its raw time would make every
    // later Δ look dearer than a full one.)
    let live_bytes = |m: &Manifest| (m.live_pages * u64::from(m.page_size)).max(1) as f64;
    let psi = mean(
        all.iter()
            .filter(|m| m.kind == GenKind::Full)
            .map(|m| cost(m) / live_bytes(m)),
    )
    .map(|per_byte| per_byte * live_bytes(newest))
    .unwrap_or(60.0);
    let c = mean(
        all.iter()
            .filter(|m| m.kind == GenKind::Delta)
            .map(|m| cost(m)),
    )
    .unwrap_or(psi / 2.0);
    let rate = cfg
        .read_rate_mbps
        .map(|r| r * 1e6)
        // The link's own time where the manifests record it; older ones
        // timed the whole upload (before it streamed beside the unit).
        .or_else(|| {
            mean(
                all.iter()
                    .filter(|m| m.timings.link_s > 0.0)
                    .map(|m| m.bytes_out as f64 / m.timings.link_s),
            )
        })
        .or_else(|| {
            mean(
                all.iter()
                    .filter(|m| m.timings.upload_s > 0.0)
                    .map(|m| m.bytes_out as f64 / m.timings.upload_s),
            )
        })
        .unwrap_or(DEFAULT_RATE);
    let delta_bytes = mean(
        all.iter()
            .filter(|m| m.kind == GenKind::Delta)
            .map(|m| m.bytes_out as f64),
    )
    .unwrap_or(pending_bytes as f64 / newest.compression_ratio.max(1.0));
    let delta = delta_bytes / rate;
    let gaps: Vec<f64> = all
        .windows(2)
        .map(|w| w[1].time_ns.saturating_sub(w[0].time_ns) as f64 / 1e9)
        .filter(|g| *g > 0.0)
        .collect();
    let t = mean(gaps.into_iter()).unwrap_or_else(|| {
        let l1_gaps: Vec<f64> = pending
            .windows(2)
            .map(|w| w[1].header.time_ns.saturating_sub(w[0].header.time_ns) as f64 / 1e9)
            .filter(|g| *g > 0.0)
            .collect();
        mean(l1_gaps.into_iter())
            .map(|g| g * chi_n as f64)
            .unwrap_or(DEFAULT_T)
    });
    CostRule::new(c, delta, psi, t, cfg.mtbf_s)
}

/// What a flush did.
#[derive(Clone, Debug, Serialize)]
pub struct FlushReport {
    /// The decision and its inputs.
    pub decision: Decision,
    /// Whether this was a dry run.
    pub dry_run: bool,
    /// The push, when one was made.
    pub push: Option<PushReport>,
    /// Recovery actions taken (also when nothing was due).
    pub recovered: Vec<String>,
    /// Seconds spent.
    pub seconds: f64,
}

/// The push options of `cfg` (a push that is not `--full`).
pub fn push_options(cfg: &Config) -> PushOptions {
    PushOptions {
        pattern_size: cfg.pattern_size,
        full: false,
        keep_chains_l2: cfg.keep_chains_l2,
        keep_chains_l1: cfg.keep_chains_l1,
        hash: cfg.hash,
        format: cfg.write_format,
        dedup_memory: cfg.dedup_memory,
        max_chain_length: cfg.max_chain_length,
    }
}

/// Runs one flush: lock, recover, decide, push when due. With `dry_run`,
/// only decides (no lock, no change).
pub fn flush(job: &Job, cfg: &Config, dry_run: bool) -> Result<FlushReport> {
    let started = Instant::now();
    let opts = push_options(cfg);
    if dry_run {
        let decision = decide_unlocked(job, cfg)?;
        return Ok(FlushReport {
            decision,
            dry_run,
            push: None,
            recovered: Vec::new(),
            seconds: started.elapsed().as_secs_f64(),
        });
    }
    let _writer = begin_writing(job, "flush")?;
    let mut rec_report = PushReport::default();
    recover(job, &opts, false, &mut rec_report)?;
    let decision = decide(job, cfg, crate::format::ic::now_ns())?;
    let push = if decision.due {
        let reason = if decision.full {
            decision.full_reason.clone()
        } else {
            None
        };
        let mut r = push_locked(job, &opts, reason)?;
        let mut recovered = rec_report.recovered.clone();
        recovered.append(&mut r.recovered);
        r.recovered = recovered;
        Some(r)
    } else {
        None
    };
    Ok(FlushReport {
        decision,
        dry_run,
        recovered: rec_report.recovered,
        push,
        seconds: started.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generation(kind: GenKind, live_pages: u64, dirty_pages: u64, bytes_out: u64) -> Manifest {
        Manifest {
            kind,
            live_pages,
            dirty_pages,
            bytes_out,
            ..crate::format::manifest::test_manifest()
        }
    }

    #[test]
    fn the_bytes_rule_takes_a_full_rps_where_a_delta_saves_little() {
        // Every page rewritten each interval: 4000 bytes per live page in
        // the full generation, 3900 per dirty page in the Δ one.
        let full = generation(GenKind::Full, 1000, 1000, 4_000_000);
        let delta = generation(GenKind::Delta, 1000, 1000, 3_900_000);
        let chain = [&full, &delta];
        let b = BytesRule::predict(&chain, 1000, 1000, 0.05).unwrap();
        assert_eq!((b.full_bytes, b.delta_bytes), (4_000_000.0, 3_900_000.0));
        assert!(b.due(), "{b:?}");
        // Not with no margin: the full one is 2.6 % larger.
        assert!(!BytesRule::predict(&chain, 1000, 1000, 0.0).unwrap().due());
        // A batch dirtying a tenth of the pages: the ΔRPS is far smaller.
        let b = BytesRule::predict(&chain, 1000, 100, 0.05).unwrap();
        assert!(!b.due(), "{b:?}");
        // The footprint grew: the full one is predicted per live page.
        let b = BytesRule::predict(&chain, 2000, 1000, 0.05).unwrap();
        assert_eq!(b.full_bytes, 8_000_000.0);
        assert!(!b.due());
        // Nothing predicts a ΔRPS before a Δ generation exists, nor a full
        // one without a full generation.
        assert!(BytesRule::predict(&[&full], 1000, 1000, 0.05).is_none());
        assert!(BytesRule::predict(&[&delta], 1000, 1000, 0.05).is_none());
        // A generation without pages teaches nothing (no division by 0).
        let empty = generation(GenKind::Delta, 1000, 0, 100);
        assert!(BytesRule::predict(&[&full, &empty], 1000, 10, 0.05).is_none());
    }
}
