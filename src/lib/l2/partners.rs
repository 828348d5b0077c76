//! Replication-aware partner copies of L1 checkpoints in an MPI job
//! (Nicolae, IPDPS 2015): after each L1 checkpoint, every rank's file
//! reaches `K - 1` other ranks' L1 directories, so that a rank whose node
//! is lost restarts from its partners' copies without L2.
//!
//! What makes it cheaper than `K - 1` plain copies is the data the partners
//! already hold: the ranks all-gather the XXH3-128 of every page of their
//! new checkpoint, and a page a partner's own checkpoint of the same seq
//! holds (a replicated table, a read-only input) is not sent: the partner
//! takes it from its own file. The copy a partner stores is byte for byte
//! the sender's file (`L1/<partner>/partner-<sender>/ckpt-<seq>.rexic`),
//! rebuilt and then checked by the REX-IC file's own CRCs, so a hash
//! collision or a damaged page can only fail the copy, never make a wrong
//! one. Partners are chosen with the same global view, identically on every
//! rank: the heaviest senders first, each to the `K - 1` receivers with the
//! least to receive so far (counting what each would really be sent).
//!
//! Copies are deleted once the job's L2 holds their checkpoints
//! ([`prune`]); a rank that lost its L1 gets its copies back from every
//! rank that holds one ([`recover`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::durable;
use crate::error::{Error, Result};
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
    /// Bytes this rank sent.
    pub sent_bytes: u64,
    /// Bytes `K - 1` whole copies of its file would have been.
    pub full_copy_bytes: u64,
    /// Pages not sent because the partner held them already.
    pub natural_pages: u64,
    /// Copies of other ranks' checkpoints this rank stored.
    pub stored: u64,
}

fn hashes_of(f: &IcFile) -> Result<Vec<u128>> {
    (0..f.meta().page_count())
        .map(|i| f.page(i).map(xxhash_rust::xxh3::xxh3_128))
        .collect()
}

/// Replicates this rank's newest checkpoint `file` (durable in `l1`) to
/// `k - 1` partners, and stores the copies other ranks send here; every
/// rank calls it after the same checkpoint. `Err` as `file` says this rank
/// has no file this time (it takes part, and the round fails everywhere).
pub fn replicate(comm: &dyn Comm, l1: &Path, file: Local<&Path>, k: u32) -> Result<ReplicaReport> {
    let n = comm.size() as usize;
    let me = comm.rank() as usize;
    let mine = file.and_then(|p| {
        let f = IcFile::open(p).map_err(|e| e.report())?;
        let h = hashes_of(&f).map_err(|e| e.report())?;
        Ok((f, h))
    });
    let msg = mine.as_ref().map(|(f, h)| {
        let mut b = Vec::with_capacity(8 + h.len() * 16);
        b.extend_from_slice(&f.meta().page_size().to_le_bytes());
        b.extend_from_slice(&f.meta().layout.file_len.to_le_bytes());
        for x in h {
            b.extend_from_slice(&x.to_le_bytes());
        }
        b
    });
    let all = agree(
        comm,
        msg.clone().map_err(|e| e.clone()),
        "replicating checkpoints",
    );
    let (f, my_hashes) = match mine {
        Ok(x) => x,
        Err(e) => return Err(Error::Invalid(e)),
    };
    let all = all?;
    // Every rank's page size, file size and page hashes.
    let views: Vec<(usize, u64, Vec<u128>)> = all
        .iter()
        .map(|b| {
            let ps = u64::from_le_bytes(b[0..8].try_into().expect("8")) as usize;
            let len = u64::from_le_bytes(b[8..16].try_into().expect("8"));
            let h = b[16..]
                .chunks_exact(16)
                .map(|c| u128::from_le_bytes(c.try_into().expect("16")))
                .collect();
            (ps, len, h)
        })
        .collect();
    let sets: Vec<std::collections::HashSet<u128>> = views
        .iter()
        .map(|v| v.2.iter().copied().collect())
        .collect();
    let partners = choose_partners(&views, &sets, k);
    let mut report = ReplicaReport {
        partners: partners[me].iter().map(|&p| p as u32).collect(),
        full_copy_bytes: f.meta().layout.file_len * partners[me].len() as u64,
        ..Default::default()
    };
    // This rank's messages: its file without the pages each partner has.
    let mut send: Vec<Vec<u8>> = vec![Vec::new(); n];
    let mut stored: Result<u64> = Ok(0);
    for &p in &partners[me] {
        let (b, natural) = encode_copy(&f, f.bytes(), &my_hashes, &sets[p]);
        report.sent_bytes += b.len() as u64;
        report.natural_pages += natural;
        send[p] = b;
    }
    let got = comm.all_to_all(&send);
    // Store what was sent here: rebuilt with this rank's own pages, then
    // checked whole.
    let own: HashMap<u128, usize> = my_hashes.iter().enumerate().map(|(i, &h)| (h, i)).collect();
    for (r, b) in got.iter().enumerate() {
        if b.is_empty() || r == me {
            continue;
        }
        let r = store_copy(l1, r as u32, b, &f, &own);
        match (&mut stored, r) {
            (Ok(n), Ok(())) => *n += 1,
            (Ok(_), Err(e)) => stored = Err(e),
            _ => {}
        }
    }
    let done = agree(
        comm,
        stored.as_ref().map(|_| Vec::new()).map_err(Error::report),
        "storing partner copies",
    );
    report.stored = stored?;
    done?;
    Ok(report)
}

/// Partners of every rank: senders by falling file size, each to the
/// `k - 1` receivers with the least to receive so far once this copy is
/// counted (what it really costs: the pages the receiver lacks).
fn choose_partners(
    views: &[(usize, u64, Vec<u128>)],
    sets: &[std::collections::HashSet<u128>],
    k: u32,
) -> Vec<Vec<usize>> {
    let n = views.len();
    let want = (k.saturating_sub(1) as usize).min(n.saturating_sub(1));
    // Bytes r would send p: its pages p lacks.
    let cost = |r: usize, p: usize| -> u64 {
        views[r].2.iter().filter(|h| !sets[p].contains(h)).count() as u64 * views[r].0 as u64
    };
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&r| (std::cmp::Reverse(views[r].1), r));
    let mut load = vec![0u64; n];
    let mut out = vec![Vec::new(); n];
    for r in order {
        // By the receiver's load after this copy, then by what the copy
        // costs (a partner that holds the pages already), then by rank.
        let mut cands: Vec<(u64, u64, usize)> = (0..n)
            .filter(|&p| p != r)
            .map(|p| {
                let c = cost(r, p);
                (load[p] + c, c, p)
            })
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

/// A copy of `f` (whose bytes are `whole`) for a partner holding the pages
/// `theirs`: the file's seq, its length, the offset and hash of each page left out, then the
/// file's bytes without those pages. Returns it and the pages left out.
fn encode_copy(
    f: &IcFile,
    whole: &[u8],
    hashes: &[u128],
    theirs: &std::collections::HashSet<u128>,
) -> (Vec<u8>, u64) {
    let meta = f.meta();
    let len = whole.len() as u64;
    let ps = meta.page_size();
    let skipped: Vec<(u64, u128)> = hashes
        .iter()
        .enumerate()
        .filter(|(_, h)| theirs.contains(h))
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
    (b, skipped.len() as u64)
}

/// Rebuilds rank `from`'s file from its copy `b` and this rank's own pages,
/// writes it durably, and checks it whole (its CRCs); a copy that does not
/// check out is deleted and reported.
fn store_copy(
    l1: &Path,
    from: u32,
    b: &[u8],
    own: &IcFile,
    own_pages: &HashMap<u128, usize>,
) -> Result<()> {
    let le = |at: usize| -> Result<u64> {
        b.get(at..at + 8)
            .and_then(|s| s.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| Error::Invalid(format!("rank {from}'s copy is truncated")))
    };
    let (seq, len, count) = (le(0)?, le(8)?, le(16)?);
    let ps = own.meta().page_size();
    let head = 24usize + count as usize * 24;
    if b.len() < head || len > (b.len() - head) as u64 + count * ps as u64 {
        return Err(Error::Invalid(format!(
            "rank {from}'s copy of seq {seq} is malformed"
        )));
    }
    let mut out = Vec::with_capacity(len as usize);
    let mut rest = &b[head..];
    for i in 0..count as usize {
        let at = 24 + i * 24;
        let off = le(at)? as usize;
        let h = u128::from_le_bytes(b[at + 8..at + 24].try_into().expect("16"));
        let gap = off
            .checked_sub(out.len())
            .filter(|&g| g <= rest.len())
            .ok_or_else(|| {
                Error::Invalid(format!("rank {from}'s copy of seq {seq} is malformed"))
            })?;
        out.extend_from_slice(&rest[..gap]);
        rest = &rest[gap..];
        let Some(&pp) = own_pages.get(&h) else {
            return Err(Error::Invalid(format!(
                "rank {from}'s copy of seq {seq} leaves out a page this rank does not hold"
            )));
        };
        out.extend_from_slice(own.page(pp)?);
    }
    out.extend_from_slice(rest);
    let dir = partner_dir(l1, from);
    if !dir.is_dir() {
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, "create directory", e))?;
        durable::fsync_dir(l1)?;
    }
    let path = dir.join(ic_file_name(seq));
    durable::write_file(&path, &out)?;
    let checked = IcFile::open(&path).and_then(|f| f.verify());
    if let Err(e) = checked {
        durable::remove_file(&path)?;
        return Err(e);
    }
    Ok(())
}

/// Deletes the copies this rank holds of checkpoints up to seq `covered`
/// (the job's L2 holds them now).
pub fn prune(l1: &Path, covered: u64) -> Result<()> {
    for e in std::fs::read_dir(l1).map_err(|e| Error::io(l1, "read directory", e))? {
        let e = e.map_err(|e| Error::io(l1, "read directory", e))?;
        let name = e.file_name();
        if !name.to_string_lossy().starts_with("partner-") || !e.path().is_dir() {
            continue;
        }
        for p in list_ic_files(&e.path())? {
            let seq = p
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(seq_of_file_name);
            if seq.is_some_and(|s| s <= covered) {
                durable::remove_file(&p)?;
            }
        }
    }
    Ok(())
}

/// After a restart on every rank: each rank whose L1 directory lost its
/// checkpoints (`lost`) gets back every copy another rank holds, written
/// into its L1 directory. Returns how many files this rank got back.
pub fn recover(comm: &dyn Comm, l1: &Path, lost: Local<bool>) -> Result<u64> {
    let n = comm.size() as usize;
    let me = comm.rank();
    let flags = agree(
        comm,
        lost.clone().map(|l| vec![u8::from(l)]),
        "finding lost L1 directories",
    );
    let lost = lost.map_err(Error::Invalid)?;
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
    if lost {
        for b in got {
            if local.is_ok()
                && let Err(e) = unpack(l1, &b, &mut n_files)
            {
                local = Err(e);
            }
        }
    }
    let done = agree(
        comm,
        local.as_ref().map(|_| Vec::new()).map_err(Error::report),
        "restoring lost L1 checkpoints from partners",
    );
    local?;
    done?;
    Ok(n_files)
}

/// Writes the copies of one partner's message (name, bytes pairs) into
/// the L1 directory `l1`, each checked whole; counts them in `n`.
fn unpack(l1: &Path, b: &[u8], n: &mut u64) -> Result<()> {
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
            return Err(e);
        }
        *n += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partners_are_balanced_and_avoid_what_they_hold() {
        // Four ranks; 0 and 1 hold the same pages, 2 and 3 others.
        let a: Vec<u128> = (0..10).collect();
        let b: Vec<u128> = (100..110).collect();
        let views = vec![
            (4096, 40960, a.clone()),
            (4096, 40960, a.clone()),
            (4096, 40960, b.clone()),
            (4096, 40960, b.clone()),
        ];
        let sets: Vec<_> = views
            .iter()
            .map(|v| v.2.iter().copied().collect())
            .collect();
        let p = choose_partners(&views, &sets, 2);
        // Each rank sends to the rank that holds its pages: nothing moves.
        assert_eq!(p, vec![vec![1], vec![0], vec![3], vec![2]]);
        // K = 3: two partners each, every rank receives two copies.
        let p = choose_partners(&views, &sets, 3);
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
}
