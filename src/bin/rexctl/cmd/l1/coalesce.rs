//! `rexctl coalesce`: build the C-List of an L1 batch.

use std::path::PathBuf;

use rexctl::l1::L1Dir;
use rexctl::l1::coalesce::CList;
use serde::Serialize;

use crate::cmd::config_args::Settings;
use crate::ui;
use rexctl::control::config::ConfigLayer;

/// Coalesce the checkpoints of an L1 directory: keep only the last copy of
/// every dirty page (the C-List), reading headers and page indexes only.
///
/// The batch is every checkpoint of the directory, or, once a push has
/// copied a chain into L1/rex/, the pending ones (those L2 does not hold
/// yet, which continue that chain). Prints the batch summary; `--json`
/// prints the C-List itself; `--out` writes the coalesced batch as one
/// REX-IC file.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The L1 directory holding the REX-IC files (default: the l1 setting:
    /// --l1, REX_L1 or rex.toml).
    #[arg(value_name = "L1DIR")]
    l1dir: Option<PathBuf>,
    /// Coalesce only the files with seq >= FROM (default: the whole chain).
    #[arg(long)]
    from: Option<u64>,
    /// Write the coalesced batch as one REX-IC file (pages copied from their
    /// last copies, CRC-checked); `-o`, as in `restore`: an existing file is
    /// replaced only with --force, and never one in L1DIR itself.
    #[arg(short = 'o', long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Replace the --out file if it exists.
    #[arg(short, long, requires = "out")]
    force: bool,
    /// Print the summary and the C-List as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    settings: ConfigLayer,
}

#[derive(Serialize)]
struct Output<'a> {
    files: Vec<FileRef>,
    first_seq: u64,
    last_seq: u64,
    full: bool,
    page_size: u32,
    stats: rexctl::l1::coalesce::CoalesceStats,
    skipped_share: f64,
    #[serde(serialize_with = "rexctl::format::json_path::opt_path")]
    out: Option<&'a PathBuf>,
    clist: Vec<Entry>,
    drops: &'a [rexctl::format::ic::DropRange],
}

#[derive(Serialize)]
struct FileRef {
    chk: usize,
    seq: u64,
    #[serde(serialize_with = "rexctl::format::json_path::path")]
    path: PathBuf,
}

#[derive(Serialize)]
struct Entry {
    page: u64,
    chk: u32,
    seq: u64,
    pp: u64,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let l1dir = match &a.l1dir {
        Some(d) => d.clone(),
        None => Settings::load(&a.settings)?.l1()?,
    };
    // A directory that is not there is a mistyped name, exit 5 as for a
    // push (helper-72: exit 1).
    rexctl::l2::push::check_l1(&l1dir)?;
    if let Some(out) = &a.out {
        crate::cmd::not_inside(out, "--out", &l1dir, "the L1 directory")?;
        // Nor among L2's files, as for a restore (helper-95: `-o
        // l2/g00000002.rps -f` replaced a generation's RPS). The settings
        // are read for that only: coalesce itself needs none of them.
        if let Some(l2) = Settings::load(&a.settings).ok().and_then(|s| s.l2().ok())
            && let Ok(rexctl::store::L2Location::Dir(d)) = rexctl::store::L2Location::parse(&l2)
        {
            crate::cmd::not_inside(out, "--out", &d, "the L2 directory")?;
        }
        crate::cmd::check_out(out, a.force)?;
    }
    // After a push, L1 holds the checkpoints that continue the pushed
    // chain (its copy is in L1/rex/): those are the pending batch, as
    // `push-l2` and `status` see it.
    let chain_dir = l1dir.join(rexctl::l2::push::L1_CHAIN_DIR);
    let newest = if chain_dir.is_dir() {
        rexctl::l2::chain::ChainIndex::load(&rexctl::store::DirStore::open(&chain_dir)?)?
            .newest()
            .map(rexctl::l1::Covered::from)
    } else {
        None
    };
    let l1 = L1Dir::scan_after(&l1dir, newest.clone())?;
    let batch = l1.since(a.from.unwrap_or(0));
    if batch.is_empty() {
        return Err(rexctl::Error::Chain {
            path: l1dir.clone(),
            reason: match (a.from, l1.files.last()) {
                // Pending checkpoints, all before --from (helper-95: "L2
                // holds every one").
                (Some(from), Some(last)) => format!(
                    "no checkpoint to coalesce from seq {from}: the newest pending checkpoint is seq {}",
                    last.seq()
                ),
                _ if newest.is_some() => {
                    "no pending checkpoint to coalesce: L2 holds every one".into()
                }
                _ => "no checkpoint to coalesce".into(),
            },
        }
        .into());
    }
    if let Some(from) = a.from
        && batch[0].seq() != from
        && !batch[0].is_full()
    {
        return Err(rexctl::Error::Chain {
            path: l1dir.clone(),
            reason: format!(
                "checkpoint seq {from} missing: the batch would start at seq {}",
                batch[0].seq()
            ),
        }
        .into());
    }
    let clist = CList::build(batch)?;
    if let Some(out) = &a.out {
        clist.write_ic(batch, out)?;
    }
    let s = clist.stats;
    if a.json {
        ui::print_json(&Output {
            files: batch
                .iter()
                .enumerate()
                .map(|(i, m)| FileRef {
                    chk: i,
                    seq: m.seq(),
                    path: m.path.clone(),
                })
                .collect(),
            first_seq: clist.first_seq,
            last_seq: clist.last_seq,
            full: clist.full,
            page_size: clist.page_size,
            stats: s,
            skipped_share: s.skipped_share(),
            out: a.out.as_ref(),
            clist: clist
                .entries
                .iter()
                .map(|e| Entry {
                    page: e.page,
                    chk: e.chk,
                    seq: batch[e.chk as usize].seq(),
                    pp: e.pp,
                })
                .collect(),
            drops: &clist.drops,
        })?;
    } else {
        outln!(
            "coalesced {} (seq {}..={}{}): {} carried, {}, {} skipped ({}), {} in, {} dropped; read {} of headers and indexes",
            ui::count(s.files as u64, "file"),
            clist.first_seq,
            clist.last_seq,
            if clist.full {
                ", from a FULL checkpoint"
            } else {
                ""
            },
            if s.pages_carried == 1 {
                "1 page copy".to_string()
            } else {
                format!("{} page copies", s.pages_carried)
            },
            ui::count(s.distinct_pages, "distinct page"),
            s.pages_skipped,
            ui::pct(s.skipped_share()),
            ui::count(s.drop_ranges_in, "drop range"),
            ui::count(s.pages_dropped, "page"),
            ui::bytes(s.meta_bytes_read)
        );
        if let Some(out) = &a.out {
            outln!("wrote {}", out.display());
        }
    }
    Ok(0)
}
