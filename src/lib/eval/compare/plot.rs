//! The comparison as bars, one panel per figure of the paper: restore time
//! over REX's (Fig. 10), compression ratio (Fig. 17), decompression rate
//! (Fig. 18) and compression rate (Fig. 19). SVG, drawn with `plotters`
//! (its SVG backend only, with its built-in font metrics: no font files).

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::error::{Error, Result};

use super::{REX, Report, Row};

struct Panel {
    title: &'static str,
    unit: &'static str,
    value: fn(&Row) -> Option<f64>,
}

const PANELS: [Panel; 4] = [
    Panel {
        title: "Restore time, normalized to REX (Fig. 10; lower is better)",
        unit: "x REX",
        value: |r| r.restore_vs_rex,
    },
    Panel {
        title: "Compression ratio (Fig. 17; higher is better)",
        unit: "L1 bytes / L2 bytes",
        value: |r| Some(r.compression_ratio),
    },
    Panel {
        title: "Decompression rate (Fig. 18; higher is better)",
        unit: "MB/s",
        value: |r| Some(r.decompress_mbps),
    },
    Panel {
        title: "Compression rate (Fig. 19; higher is better)",
        unit: "MB/s",
        value: |r| Some(r.compress_mbps),
    },
];

fn err<E: std::fmt::Display>(e: E) -> Error {
    Error::Invalid(format!("drawing the SVG: {e}"))
}

/// Renders `report` as an SVG document.
pub fn svg(report: &Report) -> Result<String> {
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, (1280, 900)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let title = format!(
            "rexctl compare: {} ({} files, {} L2 checkpoints)",
            report.label,
            report.files,
            report.batches.len()
        );
        let root = root.titled(&title, ("sans-serif", 22)).map_err(err)?;
        for (area, panel) in root.split_evenly((2, 2)).iter().zip(&PANELS) {
            draw_panel(area, panel, &report.rows)?;
        }
        root.present().map_err(err)?;
    }
    Ok(buf)
}

fn draw_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    panel: &Panel,
    rows: &[Row],
) -> Result<()> {
    let names: Vec<String> = rows.iter().map(|r| r.name.clone()).collect();
    let vals: Vec<(usize, f64)> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.ok)
        .filter_map(|(i, r)| {
            (panel.value)(r)
                .filter(|v| v.is_finite() && *v > 0.0)
                .map(|v| (i, v))
        })
        .collect();
    let top = vals.iter().map(|v| v.1).fold(0.0f64, f64::max).max(1e-9) * 1.18;
    let mut chart = ChartBuilder::on(area)
        .caption(panel.title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(34)
        .y_label_area_size(64)
        .build_cartesian_2d((0..names.len()).into_segmented(), 0f64..top)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(panel.unit)
        .x_labels(names.len())
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                names.get(*i).cloned().unwrap_or_default()
            }
            SegmentValue::Last => String::new(),
        })
        .draw()
        .map_err(err)?;
    chart
        .draw_series(vals.iter().map(|&(i, v)| {
            let color = if rows[i].name == REX {
                RGBColor(196, 48, 43)
            } else {
                RGBColor(70, 110, 160)
            };
            let mut bar = Rectangle::new(
                [
                    (SegmentValue::Exact(i), 0.0),
                    (SegmentValue::Exact(i + 1), v),
                ],
                color.filled(),
            );
            bar.set_margin(0, 0, 14, 14);
            bar
        }))
        .map_err(err)?;
    chart
        .draw_series(vals.iter().map(|&(i, v)| {
            let label = if v >= 100.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.2}")
            };
            Text::new(
                label,
                (SegmentValue::CenterOf(i), v + top * 0.02),
                ("sans-serif", 13),
            )
        }))
        .map_err(err)?;
    chart
        .draw_series(
            rows.iter()
                .enumerate()
                .filter(|(i, _)| !vals.iter().any(|v| v.0 == *i))
                .map(|(i, _)| {
                    Text::new(
                        "n/a",
                        (SegmentValue::CenterOf(i), top * 0.03),
                        ("sans-serif", 13),
                    )
                }),
        )
        .map_err(err)?;
    Ok(())
}

/// Writes [`svg`] of `report` to `path`, atomically.
pub fn write_svg(report: &Report, path: &Path) -> Result<()> {
    crate::durable::write_file(path, svg(report)?.as_bytes())
}
