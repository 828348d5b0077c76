//! `rexctl inspect`: show and verify REX-IC files.

use std::path::PathBuf;

use rexctl::format::ic::{ChainId, DropRange, IcFile, IcHeader, IcLayout, InstanceId, RegionTable};
use serde::Serialize;

use crate::ui;

/// Show the header and counts of REX-IC files and verify every CRC (header,
/// metadata, padding, each page).
///
/// Every file is checked, even after one fails; the exit status is non-zero
/// when any file is bad, with the first failure's class (3 for bad data).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// REX-IC files to inspect.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Also list the page index and drop ranges.
    #[arg(long)]
    index: bool,
    /// Print a JSON array (one object per file) instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Report {
    #[serde(serialize_with = "rexctl::format::json_path::path")]
    path: PathBuf,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// The format version the header states (2 may have an empty
    /// extension area, so it is not told from `ext_len`).
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    header: Option<IcHeader>,
    #[serde(skip_serializing_if = "Option::is_none")]
    layout: Option<IcLayout>,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_page: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_page: Option<u64>,
    dropped_pages: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    chain_id: Option<ChainId>,
    /// The process that wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    instance: Option<InstanceId>,
    /// The writer of the checkpoint it continues (seq - 1), when it says
    /// (§2.11.2): its instance id, or "none" when that checkpoint names no
    /// instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    continues: Option<String>,
    /// The region table of a checkpoint written by librex.
    #[serde(skip_serializing_if = "Option::is_none")]
    regions: Option<RegionTable>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pages: Option<Vec<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    drops: Option<Vec<DropRange>>,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let mut reports = Vec::new();
    let mut code = 0;
    for path in &a.files {
        let mut r = Report {
            path: path.clone(),
            ok: false,
            error: None,
            version: None,
            header: None,
            layout: None,
            first_page: None,
            last_page: None,
            dropped_pages: 0,
            chain_id: None,
            instance: None,
            continues: None,
            regions: None,
            pages: None,
            drops: None,
        };
        match IcFile::open(path) {
            Ok(f) => {
                let m = f.meta();
                r.header = Some(m.header);
                r.version = f
                    .bytes()
                    .get(8..12)
                    .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
                r.layout = Some(m.layout);
                r.first_page = m.pages.first().copied();
                r.last_page = m.pages.last().copied();
                r.dropped_pages = m.drops.iter().map(|d| d.count).sum();
                r.chain_id = m.chain_id;
                r.instance = m.instance;
                r.continues = m
                    .continues
                    .map(|c| c.map_or("none".to_string(), |i| i.to_string()));
                r.regions = m.regions.clone();
                if a.index {
                    r.pages = Some(m.pages.clone());
                    r.drops = Some(m.drops.clone());
                }
                match f.verify() {
                    Ok(()) => r.ok = true,
                    Err(e) => {
                        if code == 0 {
                            code = e.exit_code();
                        }
                        r.error = Some(e.report());
                    }
                }
            }
            Err(e) => {
                if code == 0 {
                    code = e.exit_code();
                }
                r.error = Some(e.report());
            }
        }
        if !a.json {
            print_human(&r)?;
        } else if let Some(e) = &r.error {
            // On stderr too, as verify and status --json say theirs: a
            // script reading stdout sees the field, a user the message.
            ui::error(e);
        }
        reports.push(r);
    }
    if a.json {
        ui::print_json(&reports)?;
    }
    Ok(code)
}

fn print_human(r: &Report) -> Result<(), ui::StdoutError> {
    let Some(h) = r.header else {
        ui::error(r.error.as_deref().unwrap_or("unreadable"));
        return Ok(());
    };
    let l = r.layout.expect("layout with header");
    outln!(
        "{}: REX-IC v{}, seq {}, {}, page size {}{}{}{}",
        r.path.display(),
        r.version.unwrap_or(if h.ext_len > 0 { 2 } else { 1 }),
        h.seq,
        if h.full { "FULL" } else { "incremental" },
        h.page_size,
        r.chain_id.map_or(String::new(), |c| format!(", run {c}")),
        r.instance
            .map_or(String::new(), |i| format!(", instance {i}")),
        match r.continues.as_deref() {
            None => String::new(),
            Some("none") => ", continues a checkpoint that names no instance".into(),
            Some(c) => format!(", continues instance {c}"),
        }
    );
    let span = match (r.first_page, r.last_page) {
        (Some(a), Some(b)) => format!(", pages {a:#x}..={b:#x}"),
        _ => String::new(),
    };
    outln!(
        "  {} ({} of data){span}, {} ({}), captured {}",
        ui::count(h.page_count, "page"),
        ui::bytes(l.file_len - l.data_off),
        ui::count(h.drop_count, "drop range"),
        ui::count(r.dropped_pages, "page"),
        ui::time(h.time_ns)
    );
    if let Some(t) = &r.regions {
        outln!(
            "  {} ({}, {}):",
            ui::count(t.0.len() as u64, "region"),
            ui::bytes(t.bytes()),
            ui::count(t.pages(), "page")
        );
        for g in &t.0 {
            outln!(
                "    region {:>5}  {:>11}  {:>8} pages  pages {:#x}..",
                g.id,
                ui::bytes(g.size),
                g.pages,
                g.first_page()
            );
        }
    }
    match &r.error {
        None => outln!(
            "  data at offset {}, file {}; CRCs ok (header, metadata, {} pages)",
            l.data_off,
            ui::bytes(l.file_len),
            h.page_count
        ),
        Some(e) => {
            outln!("  {}: {e}", ui::bad("BAD"));
            ui::error(e);
        }
    }
    if let Some(pages) = &r.pages {
        for p in pages {
            outln!("  page {p:#x}");
        }
    }
    if let Some(drops) = &r.drops {
        for d in drops {
            outln!("  drop {:#x}..{:#x} ({} pages)", d.first, d.end(), d.count);
        }
    }
    Ok(())
}
