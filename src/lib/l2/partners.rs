//! Replication-aware partner copies of L1 checkpoints in an MPI job
//! (Nicolae, IPDPS 2015): after each L1 checkpoint, every rank's file
//! reaches `K - 1` other ranks' L1 directories, so that a rank whose node
//! is lost restarts from its partners' copies without L2.
//!
//! What makes it cheaper than `K - 1` plain copies is the data the partners
//! already hold: a page a partner's own checkpoint of the same seq holds (a
//! replicated table, a read-only input) is not sent: the partner takes it
//! from its own file. To know which, the ranks all-gather a cuckoo filter of
//! the XXH3-128 hashes of their pages (`cuckoofilter`: about 2 bytes a page
//! instead of the 16 of a hash list, so the view every rank receives is
//! about 9x smaller), and each rank computes what it would send every other
//! (its own row of costs). A page a filter claims wrongly is asked for and
//! sent in a second round. The copy a partner stores is byte for byte
//! the sender's file (`L1/<partner>/partner-<sender>/ckpt-<seq>.rexic`),
//! rebuilt and then checked by the REX-IC file's own CRCs, so a hash
//! collision or a damaged page can only fail the copy, never make a wrong
//! one. Partners are chosen from the all-gathered rows of costs,
//! identically on every rank: the heaviest senders first, each to the
//! `K - 1` receivers with the least to receive so far (counting what each
//! would really be sent).
//!
//! Copies are deleted once the job's L2 holds their checkpoints
//! ([`prune`]); a rank that lost its L1 gets its copies back from every
//! rank that holds one ([`recover`]).

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use cuckoofilter::{CuckooFilter, ExportedCuckooFilter};

use serde::Serialize;

use crate::durable;
use crate::error::{Error, Failure, Result};
use crate::format::ic::IcFile;
use crate::l1::{ic_file_name, list_ic_files, seq_of_file_name};
use crate::l2::collective::{Comm, agree};
use crate::l2::push::Local;

/// The directory of the copies of rank `rank`'s checkpoints in an L1
/// directory.
pub fn partner_dir(l1: &Path, rank: u32) -> PathBuf {
    l1.join(format!("partner-{rank}"))
}

/// What one replication round moved, on this rank.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReplicaReport {
    /// The ranks that received this rank's checkpoint.
    pub partners: Vec<u32>,
    /// Bytes this rank sent: the copies and the pages asked for again.
    pub sent_bytes: u64,
    /// Bytes `K - 1` whole copies of its file would have been.
    pub full_copy_bytes: u64,
    /// Pages not sent because the partner held them already.
    pub natural_pages: u64,
    /// Copies of other ranks' checkpoints this rank stored.
    pub stored: u64,
    /// Bytes of this rank's view (its page filter) sent to every rank.
    pub view_bytes: u64,
    /// What the view would be as a list of the pages' 16-byte hashes.
    pub hash_list_bytes: u64,
    /// Pages a partner's filter claimed that it did not hold (false
    /// positives), sent in the second round.
    pub resent_pages: u64,
}

fn hashes_of(f: &IcFile) -> Result<Vec<u128>> {
    (0..f.meta().page_count())
        .map(|i| f.page(i).map(xxhash_rust::xxh3::xxh3_128))
        .collect()
}

/// The pages a rank holds, as every other rank sees them: a cuckoo filter
/// of their XXH3-128 hashes (one byte per slot, four slots per bucket).
/// With at least 1.25 slots per distinct page (a power of two: 40-80 %
/// full), about 1-2 % of the pages a rank lacks read as held; those are
/// asked for again, so a false positive costs a page sent twice and never
/// a page missing. A page the filter drops when full reads as missing and
/// is sent though the partner holds it. The hasher is std's default,
/// identical in every process of one build (a job's ranks).
type PageFilter = CuckooFilter<DefaultHasher>;

fn page_filter(own: &HashMap<u128, usize>) -> PageFilter {
    let mut f = PageFilter::with_capacity((own.len() + own.len() / 4).max(4));
    for h in own.keys() {
        // NotEnoughSpace: another page was dropped (read as missing).
        let _ = f.add(h);
    }
    f
}

/// One rank's view: page size, file length, page count, the filter's
/// fingerprint count, then its slots.
fn encode_view(f: &IcFile, filter: &PageFilter) -> Vec<u8> {
    let e = filter.export();
    let mut b = Vec::with_capacity(32 + e.values.len());
    for x in [
        f.meta().page_size() as u64,
        f.meta().layout.file_len,
        f.meta().page_count() as u64,
        e.length as u64,
    ] {
        b.extend_from_slice(&x.to_le_bytes());
    }
    b.extend_from_slice(&e.values);
    b
}

/// A rank's view, every field bounded: (page size, file length, filter).
fn decode_view(rank: usize, b: &[u8]) -> Result<(usize, u64, PageFilter)> {
    let bad = |what: &str| Error::Invalid(format!("rank {rank}'s view of its pages: {what}"));
    if b.len() < 32 {
        return Err(bad("truncated"));
    }
    let [ps, len, pages, count] = [0, 8, 16, 24].map(|at| le64(b, at));
    let values = &b[32..];
    let slots = values.len() as u64;
    let most = (pages.saturating_add(pages / 4)).max(4).next_power_of_two();
    let ps_ok = u32::try_from(ps).is_ok_and(|p| {
        p.is_power_of_two()
            && (crate::format::ic::MIN_PAGE_SIZE..=crate::format::ic::MAX_PAGE_SIZE).contains(&p)
    });
    if !ps_ok || pages.saturating_mul(ps) > len {
        return Err(bad("page size or page count out of range"));
    }
    if !slots.is_power_of_two() || !(4..=most).contains(&slots) || count > slots {
        return Err(bad("filter size out of range"));
    }
    let filter = PageFilter::from(ExportedCuckooFilter {
        values: values.to_vec(),
        length: count as usize,
    });
    Ok((ps as usize, len, filter))
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Replicates this rank's newest checkpoint `file` (durable in `l1`) to
/// `k - 1` partners, and stores the copies other ranks send here; every
/// rank calls it after the same checkpoint. `Err` as `file` says this rank
/// has no file this time (it takes part, and the round fails everywhere).
///
/// Four exchanges: the views (all-gather), each rank's cost to every
/// partner (all-gather: the partners are then chosen identically
/// everywhere), the copies (all-to-all), and the pages a filter wrongly
/// claimed (a request and its answer, all-to-all; mostly empty).
pub fn replicate(comm: &dyn Comm, l1: &Path, file: Local<&Path>, k: u32) -> Result<ReplicaReport> {
    let n = comm.size() as usize;
    let me = comm.rank() as usize;
    let mine = file.and_then(|p| {
        let f = IcFile::open(p).map_err(Failure::from)?;
        let h = hashes_of(&f).map_err(Failure::from)?;
        let own: HashMap<u128, usize> = h.iter().enumerate().map(|(i, &x)| (x, i)).collect();
        let view = encode_view(&f, &page_filter(&own));
        Ok((f, h, own, view))
    });
    let all = agree(
        comm,
        mine.as_ref().map(|m| m.3.clone()).map_err(|e| e.clone()),
        "replicating checkpoints",
    );
    let (f, my_hashes, own, view) =
        mine.map_err(|e| e.into_error(me as u32, "replicating checkpoints"))?;
    let all = all?;
    let views = all
        .iter()
        .enumerate()
        .map(|(r, b)| decode_view(r, b))
        .collect::<Result<Vec<_>>>();
    // What this rank would send each rank: its pages that rank lacks.
    let row = views.as_ref().map(|views| {
        let mut b = Vec::with_capacity(n * 8);
        for (p, (_, _, filter)) in views.iter().enumerate() {
            let lacking = match p == me {
                true => 0,
                false => my_hashes.iter().filter(|h| !filter.contains(*h)).count() as u64,
            };
            b.extend_from_slice(&(lacking * f.meta().page_size() as u64).to_le_bytes());
        }
        b
    });
    let rows = agree(
        comm,
        row.map_err(Failure::from),
        "choosing partners for checkpoint copies",
    );
    let views = views?;
    let rows = rows?;
    let cost: Vec<Vec<u64>> = rows
        .iter()
        .map(|b| b.chunks_exact(8).map(|c| le64(c, 0)).collect())
        .collect();
    if cost.iter().any(|c| c.len() != n) {
        return Err(Error::Invalid(
            "a rank's partner costs are malformed".into(),
        ));
    }
    let file_lens: Vec<u64> = views.iter().map(|v| v.1).collect();
    let partners = choose_partners(&file_lens, &cost, k);
    let mut report = ReplicaReport {
        partners: partners[me].iter().map(|&p| p as u32).collect(),
        full_copy_bytes: f.meta().layout.file_len * partners[me].len() as u64,
        view_bytes: view.len() as u64,
        hash_list_bytes: 16 * my_hashes.len() as u64,
        ..Default::default()
    };
    // This rank's messages: its file without the pages each partner holds
    // (by its filter); the offsets left out, to answer requests.
    let mut send: Vec<Vec<u8>> = vec![Vec::new(); n];
    let mut left_out: Vec<HashSet<u64>> = vec![HashSet::new(); n];
    for &p in &partners[me] {
        let held = |h: &u128| views[p].2.contains(h);
        let (b, skipped) = encode_copy(&f, f.bytes(), &my_hashes, held);
        report.sent_bytes += b.len() as u64;
        report.natural_pages += skipped.len() as u64;
        left_out[p] = skipped.into_iter().collect();
        send[p] = b;
    }
    let got = comm.all_to_all(&send);
    // Rebuild what was sent here with this rank's own pages; the pages it
    // does not hold after all are asked for.
    let mut incoming: Vec<Result<Incoming>> = Vec::new();
    let mut ask: Vec<Vec<u8>> = vec![Vec::new(); n];
    for (r, b) in got.iter().enumerate() {
        if b.is_empty() || r == me {
            continue;
        }
        let i = Incoming::parse(r as u32, b, &f, &own);
        if let Ok(i) = &i {
            for off in &i.holes {
                ask[r].extend_from_slice(&off.to_le_bytes());
            }
        }
        incoming.push(i);
    }
    let asked = comm.all_to_all(&ask);
    let mut answer: Vec<Vec<u8>> = vec![Vec::new(); n];
    let mut served: Result<()> = Ok(());
    for (p, b) in asked.iter().enumerate() {
        for c in b.chunks(8) {
            let off = (c.len() == 8).then(|| le64(c, 0));
            match off.filter(|o| left_out[p].contains(o)) {
                Some(off) => {
                    let at = off as usize;
                    answer[p].extend_from_slice(&f.bytes()[at..at + f.meta().page_size()]);
                    report.resent_pages += 1;
                    report.sent_bytes += f.meta().page_size() as u64;
                }
                None => {
                    served = Err(Error::Invalid(format!(
                        "rank {p} asked for a page this rank's copy did not leave out"
                    )));
                    break;
                }
            }
        }
    }
    let answers = comm.all_to_all(&answer);
    let mut stored: Result<u64> = served.map(|()| 0);
    for i in incoming {
        let r = i.and_then(|i| {
            let from = i.from as usize;
            i.finish(l1, &answers[from], f.meta().page_size())
        });
        match (&mut stored, r) {
            (Ok(n), Ok(())) => *n += 1,
            (Ok(_), Err(e)) => stored = Err(e),
            _ => {}
        }
    }
    let done = agree(
        comm,
        stored.as_ref().map(|_| Vec::new()).map_err(Failure::from),
        "storing partner copies",
    );
    report.stored = stored?;
    done?;
    Ok(report)
}

/// Partners of every rank: senders by falling file size, each to the
/// `k - 1` receivers with the least to receive so far once this copy is
/// counted (`cost[r][p]`: what r would really send p, the pages p lacks).
fn choose_partners(file_lens: &[u64], cost: &[Vec<u64>], k: u32) -> Vec<Vec<usize>> {
    let n = file_lens.len();
    let want = (k.saturating_sub(1) as usize).min(n.saturating_sub(1));
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&r| (std::cmp::Reverse(file_lens[r]), r));
    let mut load = vec![0u64; n];
    let mut out = vec![Vec::new(); n];
    for r in order {
        // By the receiver's load after this copy, then by what the copy
        // costs (a partner that holds the pages already), then by rank.
        let mut cands: Vec<(u64, u64, usize)> = (0..n)
            .filter(|&p| p != r)
            .map(|p| (load[p].saturating_add(cost[r][p]), cost[r][p], p))
            .collect();
        cands.sort_unstable();
        for &(l, _, p) in cands.iter().take(want) {
            load[p] = l;
            out[r].push(p);
        }
        out[r].sort_unstable();
    }
    out
}

/// A copy of `f` (whose bytes are `whole`) for a partner that holds the
/// pages `held` says: the file's seq, its length, the offset and hash of
/// each page left out, then the file's bytes without those pages. Returns
/// it and the offsets left out.
fn encode_copy(
    f: &IcFile,
    whole: &[u8],
    hashes: &[u128],
    held: impl Fn(&u128) -> bool,
) -> (Vec<u8>, Vec<u64>) {
    let meta = f.meta();
    let len = whole.len() as u64;
    let ps = meta.page_size();
    let skipped: Vec<(u64, u128)> = hashes
        .iter()
        .enumerate()
        .filter(|(_, h)| held(h))
        .map(|(i, &h)| (f.page_offset(i), h))
        .collect();
    let mut b = Vec::new();
    b.extend_from_slice(&meta.seq().to_le_bytes());
    b.extend_from_slice(&len.to_le_bytes());
    b.extend_from_slice(&(skipped.len() as u64).to_le_bytes());
    for (off, h) in &skipped {
        b.extend_from_slice(&off.to_le_bytes());
        b.extend_from_slice(&h.to_le_bytes());
    }
    let mut at = 0usize;
    for (off, _) in &skipped {
        b.extend_from_slice(&whole[at..*off as usize]);
        at = *off as usize + ps;
    }
    b.extend_from_slice(&whole[at..]);
    (b, skipped.into_iter().map(|(o, _)| o).collect())
}

/// A copy of rank `from`'s file being rebuilt here: its bytes, with the
/// pages this rank turned out not to hold (`holes`, by offset) still to
/// come from the sender.
#[derive(Debug)]
struct Incoming {
    from: u32,
    seq: u64,
    out: Vec<u8>,
    holes: Vec<u64>,
}

impl Incoming {
    /// Rebuilds rank `from`'s copy `b` with this rank's own pages (`own`,
    /// located by `own_pages`), every count and offset bounded first.
    fn parse(
        from: u32,
        b: &[u8],
        own: &IcFile,
        own_pages: &HashMap<u128, usize>,
    ) -> Result<Incoming> {
        let le = |at: usize| -> Result<u64> {
            b.get(at..at + 8)
                .and_then(|s| s.try_into().ok())
                .map(u64::from_le_bytes)
                .ok_or_else(|| Error::Invalid(format!("rank {from}'s copy is truncated")))
        };
        let (seq, len, count) = (le(0)?, le(8)?, le(16)?);
        let malformed = || Error::Invalid(format!("rank {from}'s copy of seq {seq} is malformed"));
        let ps = own.meta().page_size();
        let head = count
            .checked_mul(24)
            .and_then(|x| x.checked_add(24))
            .filter(|&h| h <= b.len() as u64)
            .ok_or_else(malformed)? as usize;
        if len != (b.len() - head) as u64 + count * ps as u64 {
            return Err(malformed());
        }
        let mut out = Vec::with_capacity(len as usize);
        let mut holes = Vec::new();
        let mut rest = &b[head..];
        for i in 0..count as usize {
            let at = 24 + i * 24;
            let off = le(at)? as usize;
            let h = u128::from_le_bytes(b[at + 8..at + 24].try_into().expect("16"));
            let gap = off
                .checked_sub(out.len())
                .filter(|&g| g <= rest.len())
                .ok_or_else(malformed)?;
            out.extend_from_slice(&rest[..gap]);
            rest = &rest[gap..];
            match own_pages.get(&h) {
                Some(&pp) => out.extend_from_slice(own.page(pp)?),
                None => {
                    holes.push(off as u64);
                    out.resize(out.len() + ps, 0);
                }
            }
        }
        out.extend_from_slice(rest);
        Ok(Incoming {
            from,
            seq,
            out,
            holes,
        })
    }

    /// Fills the holes with the sender's `answer` (their pages in order),
    /// writes the file durably, and checks it whole (its CRCs); a copy that
    /// does not check out is deleted and reported.
    fn finish(mut self, l1: &Path, answer: &[u8], ps: usize) -> Result<()> {
        if answer.len() != self.holes.len() * ps {
            return Err(Error::Invalid(format!(
                "rank {} answered {} bytes for the {} pages of seq {} this rank lacks",
                self.from,
                answer.len(),
                self.holes.len(),
                self.seq
            )));
        }
        for (off, page) in self.holes.iter().zip(answer.chunks_exact(ps)) {
            let at = *off as usize;
            self.out[at..at + ps].copy_from_slice(page);
        }
        let dir = partner_dir(l1, self.from);
        if !dir.is_dir() {
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, "create directory", e))?;
            durable::fsync_dir(l1)?;
        }
        let path = dir.join(ic_file_name(self.seq));
        durable::write_file(&path, &self.out)?;
        let checked = IcFile::open(&path).and_then(|f| f.verify());
        if let Err(e) = checked {
            durable::remove_file(&path)?;
            return Err(e);
        }
        Ok(())
    }
}

/// Deletes the copies this rank holds of rank `sender`'s checkpoints up to
/// seq `covered` (`sender`'s own L2 chain holds them now).
pub fn prune(l1: &Path, sender: u32, covered: u64) -> Result<()> {
    remove_where(&partner_dir(l1, sender), |s| s <= covered).map(|_| ())
}

/// Deletes every copy this rank holds, of any rank, of a checkpoint after
/// seq `target`: after a collective restart at `target`, they are a dead
/// run's, and a lost rank recovered from them would find them after the
/// restarted job's own checkpoints of the same run. Returns how many.
pub fn remove_after(l1: &Path, target: u64) -> Result<usize> {
    sum_over_partner_dirs(l1, |dir| remove_where(dir, |s| s > target))
}

/// Deletes every copy this rank holds, of any rank's checkpoints: when the
/// job starts afresh (no job generation ever committed), they are a dead
/// run's. Returns how many.
pub fn remove_all(l1: &Path) -> Result<usize> {
    sum_over_partner_dirs(l1, |dir| remove_where(dir, |_| true))
}

/// The sum of `f` over the partner directories of `l1` (none when `l1`
/// does not exist).
fn sum_over_partner_dirs(l1: &Path, f: impl Fn(&Path) -> Result<usize>) -> Result<usize> {
    let entries = match std::fs::read_dir(l1) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(Error::io(l1, "read directory", e)),
    };
    let mut n = 0;
    for e in entries {
        let e = e.map_err(|e| Error::io(l1, "read directory", e))?;
        if e.file_name().to_string_lossy().starts_with("partner-") && e.path().is_dir() {
            n += f(&e.path())?;
        }
    }
    Ok(n)
}

/// Deletes the checkpoint files of `dir` whose seq (by name) `doomed`
/// picks; returns how many.
fn remove_where(dir: &Path, doomed: impl Fn(u64) -> bool) -> Result<usize> {
    if !dir.is_dir() {
        return Ok(0);
    }
    let mut n = 0;
    for p in list_ic_files(dir)? {
        let seq = p
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(seq_of_file_name);
        if seq.is_some_and(&doomed) {
            durable::remove_file(&p)?;
            n += 1;
        }
    }
    Ok(n)
}

/// Removes the temporary files a crashed replication left in the partner
/// directories of `l1` (see [`durable::remove_stale_temps`]: call it only
/// when no replication into `l1` can run, i.e. holding the producer lock).
pub fn remove_stale_temps(l1: &Path) -> Result<usize> {
    sum_over_partner_dirs(l1, durable::remove_stale_temps)
}

/// After a restart on every rank: each rank whose L1 directory lost its
/// checkpoints (`lost`) gets back every copy another rank holds, written
/// into its L1 directory. Returns how many files this rank got back, and
/// a line per copy it left out because it failed its check.
pub fn recover(comm: &dyn Comm, l1: &Path, lost: Local<bool>) -> Result<(u64, Vec<String>)> {
    let n = comm.size() as usize;
    let me = comm.rank();
    let flags = agree(
        comm,
        lost.clone().map(|l| vec![u8::from(l)]),
        "finding lost L1 directories",
    );
    let lost = lost.map_err(|e| e.into_error(me, "finding lost L1 directories"))?;
    let flags = flags?;
    // What this rank holds for each lost rank: (name, bytes) pairs.
    let mut send: Vec<Vec<u8>> = vec![Vec::new(); n];
    let mut local = Ok(());
    for (r, f) in flags.iter().enumerate() {
        if f.first() != Some(&1) || r == me as usize {
            continue;
        }
        let dir = partner_dir(l1, r as u32);
        let files = match dir.is_dir() {
            true => list_ic_files(&dir).unwrap_or_else(|e| {
                local = Err(e);
                Vec::new()
            }),
            false => Vec::new(),
        };
        for p in files {
            match std::fs::read(&p) {
                Ok(bytes) => {
                    let name = p
                        .file_name()
                        .expect("a file")
                        .to_string_lossy()
                        .into_owned();
                    send[r].extend_from_slice(&(name.len() as u64).to_le_bytes());
                    send[r].extend_from_slice(name.as_bytes());
                    send[r].extend_from_slice(&(bytes.len() as u64).to_le_bytes());
                    send[r].extend_from_slice(&bytes);
                }
                Err(e) => local = Err(Error::io(&p, "read", e)),
            }
        }
    }
    let got = comm.all_to_all(&send);
    let mut n_files = 0;
    let mut skipped = Vec::new();
    if lost {
        for b in got {
            if local.is_ok()
                && let Err(e) = unpack(l1, &b, &mut n_files, &mut skipped)
            {
                local = Err(e);
            }
        }
    }
    let done = agree(
        comm,
        local.as_ref().map(|_| Vec::new()).map_err(Failure::from),
        "restoring lost L1 checkpoints from partners",
    );
    local?;
    done?;
    Ok((n_files, skipped))
}

/// Writes the copies of one partner's message (name, bytes pairs) into
/// the L1 directory `l1`, each checked whole; counts them in `n`. A copy
/// that fails its check is left out, and why is added to `skipped`: the
/// others (of this partner, and of the next, which may hold a good copy
/// of the same seq) are still written, and the restart uses what is
/// whole, as it would with a damaged checkpoint of its own (helper-58: the
/// first bad copy failed the recovery, and the copies after it were never
/// fetched again).
fn unpack(l1: &Path, b: &[u8], n: &mut u64, skipped: &mut Vec<String>) -> Result<()> {
    let mut at = 0usize;
    let mut take = |k: usize| -> Result<&[u8]> {
        let s = b
            .get(at..at.saturating_add(k))
            .ok_or_else(|| Error::Invalid("a partner's copies are truncated".into()))?;
        at += k;
        Ok(s)
    };
    let le = |s: &[u8]| u64::from_le_bytes(s.try_into().expect("8")) as usize;
    while !b.is_empty() {
        let nl = match take(8) {
            Ok(s) => le(s),
            Err(_) => break,
        };
        let name = String::from_utf8_lossy(take(nl)?).into_owned();
        let bl = le(take(8)?);
        let bytes = take(bl)?;
        let Some(seq) = seq_of_file_name(&name) else {
            continue;
        };
        let path = l1.join(ic_file_name(seq));
        if path.exists() {
            continue;
        }
        // Each copy was checked when stored; check it again here.
        let written = durable::write_file(&path, bytes)
            .and_then(|()| IcFile::open(&path).and_then(|f| f.verify()));
        if let Err(e) = written {
            let _ = durable::remove_file(&path);
            skipped.push(format!("a partner's copy of {name}: {}", e.report()));
            continue;
        }
        *n += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A partner's copy that fails its check is left out, with why, and
    /// the copies after it are still written (helper-58: the first bad
    /// copy failed the whole recovery).
    #[test]
    fn a_damaged_copy_is_left_out_and_the_others_are_written() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        std::fs::create_dir(&src).unwrap();
        let mut msg = Vec::new();
        for seq in [3u64, 4] {
            let p = src.join(ic_file_name(seq));
            crate::format::ic::write_ic(
                &p,
                4096,
                seq,
                seq == 3,
                1,
                &[(seq, &[seq as u8; 4096])],
                &[],
            )
            .unwrap();
            let mut bytes = std::fs::read(&p).unwrap();
            if seq == 3 {
                let n = bytes.len();
                bytes[n - 100] ^= 1;
            }
            let name = ic_file_name(seq);
            msg.extend_from_slice(&(name.len() as u64).to_le_bytes());
            msg.extend_from_slice(name.as_bytes());
            msg.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            msg.extend_from_slice(&bytes);
        }
        let l1 = d.path().join("l1");
        std::fs::create_dir(&l1).unwrap();
        let (mut n, mut skipped) = (0, Vec::new());
        unpack(&l1, &msg, &mut n, &mut skipped).unwrap();
        assert_eq!(n, 1);
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        assert!(skipped[0].contains(&ic_file_name(3)), "{skipped:?}");
        assert!(!l1.join(ic_file_name(3)).exists());
        assert!(l1.join(ic_file_name(4)).is_file());
    }

    /// What r would send p: its pages p lacks (exact sets).
    fn costs(ranks: &[Vec<u128>]) -> Vec<Vec<u64>> {
        ranks
            .iter()
            .map(|mine| {
                ranks
                    .iter()
                    .map(|theirs| mine.iter().filter(|h| !theirs.contains(h)).count() as u64 * 4096)
                    .collect()
            })
            .collect()
    }

    #[test]
    fn partners_are_balanced_and_avoid_what_they_hold() {
        // Four ranks; 0 and 1 hold the same pages, 2 and 3 others.
        let a: Vec<u128> = (0..10).collect();
        let b: Vec<u128> = (100..110).collect();
        let cost = costs(&[a.clone(), a, b.clone(), b]);
        let lens = [40960; 4];
        let p = choose_partners(&lens, &cost, 2);
        // Each rank sends to the rank that holds its pages: nothing moves.
        assert_eq!(p, vec![vec![1], vec![0], vec![3], vec![2]]);
        // K = 3: two partners each, every rank receives two copies.
        let p = choose_partners(&lens, &cost, 3);
        let mut recv = [0; 4];
        for (r, ps) in p.iter().enumerate() {
            assert_eq!(ps.len(), 2);
            assert!(!ps.contains(&r));
            for &x in ps {
                recv[x] += 1;
            }
        }
        assert_eq!(recv, [2, 2, 2, 2]);
    }

    fn ic_file(dir: &Path, seq: u64, pages: &[(u64, u8)]) -> IcFile {
        let path = dir.join(ic_file_name(seq));
        let data: Vec<(u64, Vec<u8>)> = pages.iter().map(|&(p, f)| (p, vec![f; 4096])).collect();
        let refs: Vec<(u64, &[u8])> = data.iter().map(|(p, d)| (*p, &d[..])).collect();
        crate::format::ic::write_ic(&path, 4096, seq, true, 1, &refs, &[]).unwrap();
        IcFile::open(&path).unwrap()
    }

    /// After a collective restart at seq 5, every rank's copies of later
    /// checkpoints are a dead run's: all go, of every sender; the rest and
    /// this rank's own L1 stay.
    #[test]
    fn copies_after_a_restart_target_are_removed() {
        let d = tempfile::tempdir().unwrap();
        let l1 = d.path();
        for sender in [1, 3] {
            let dir = partner_dir(l1, sender);
            std::fs::create_dir_all(&dir).unwrap();
            for seq in 4..8 {
                ic_file(&dir, seq, &[(1, seq as u8)]);
            }
        }
        ic_file(l1, 7, &[(1, 7)]);
        assert_eq!(remove_after(l1, 5).unwrap(), 4);
        for sender in [1, 3] {
            let left: Vec<_> = list_ic_files(&partner_dir(l1, sender))
                .unwrap()
                .iter()
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                .collect();
            assert_eq!(left, [ic_file_name(4), ic_file_name(5)]);
        }
        assert!(
            l1.join(ic_file_name(7)).is_file(),
            "its own L1 is not a copy"
        );
        assert_eq!(remove_after(&l1.join("none"), 5).unwrap(), 0);
    }

    #[test]
    fn a_filter_holds_every_page_it_was_given_and_few_others() {
        let own: HashMap<u128, usize> = (0..20_000u128).map(|h| (h * 7919, h as usize)).collect();
        let f = page_filter(&own);
        assert!(own.keys().all(|h| f.contains(h)));
        let others = (1..=20_000u128)
            .filter(|h| f.contains(&(h * 7919 + 1)))
            .count();
        assert!(others < 20_000 / 20, "{others} false positives in 20000");
        // Its view decodes to the same answers; a view out of bounds is refused.
        let d = tempfile::tempdir().unwrap();
        let ic = ic_file(d.path(), 1, &[(1, 1)]);
        let v = encode_view(&ic, &f);
        assert!(
            decode_view(0, &v).is_err(),
            "20000 pages' filter for a 1-page file"
        );
        let small: HashMap<u128, usize> = [(5u128, 0)].into_iter().collect();
        let v = encode_view(&ic, &page_filter(&small));
        let (ps, _, g) = decode_view(0, &v).unwrap();
        assert_eq!(ps, 4096);
        assert!(g.contains(&5u128));
        for cut in [0, 31, 33, v.len() - 1] {
            assert!(decode_view(0, &v[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn pages_a_filter_wrongly_claims_are_asked_for_and_the_copy_is_whole() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        // The sender's file; the receiver holds pages of fill 2 and 4 only.
        let sent = ic_file(&a, 9, &[(1, 1), (2, 2), (3, 3), (4, 4)]);
        let recv = ic_file(&b, 9, &[(7, 2), (8, 4), (9, 5)]);
        let hs = hashes_of(&sent).unwrap();
        let own: HashMap<u128, usize> = hashes_of(&recv)
            .unwrap()
            .into_iter()
            .enumerate()
            .map(|(i, h)| (h, i))
            .collect();
        // A filter claiming every page: two of four are really held.
        let (msg, left_out) = encode_copy(&sent, sent.bytes(), &hs, |_| true);
        assert_eq!(left_out.len(), 4);
        let inc = Incoming::parse(0, &msg, &recv, &own).unwrap();
        assert_eq!(inc.holes.len(), 2);
        // The sender answers with the pages asked for, in order.
        let mut answer = Vec::new();
        for off in &inc.holes {
            assert!(left_out.contains(off));
            answer.extend_from_slice(&sent.bytes()[*off as usize..*off as usize + 4096]);
        }
        // A short answer is refused; the whole one rebuilds the file.
        let short = Incoming::parse(0, &msg, &recv, &own).unwrap();
        assert!(short.finish(&b, &answer[..4096], 4096).is_err());
        inc.finish(&b, &answer, 4096).unwrap();
        let copy = std::fs::read(partner_dir(&b, 0).join(ic_file_name(9))).unwrap();
        assert_eq!(copy, sent.bytes());
        // A copy whose counts do not add up is refused, never allocated for.
        let mut bad = msg.clone();
        bad[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(Incoming::parse(0, &bad, &recv, &own).is_err());
        assert!(Incoming::parse(0, &msg[..msg.len() - 1], &recv, &own).is_err());
    }
}
