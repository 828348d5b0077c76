//! `rexctl plan`: the controller's interval table and where the job sits.

use rexctl::control::config::ConfigLayer;
use rexctl::control::flush::decide_unlocked;
use rexctl::l2::push::Job;
use serde::Serialize;

use super::flush::inputs;
use crate::cmd::config_args::Settings;
use crate::ui;

/// Show how the controller decides for this job: the interval table (the
/// paper's Table 1 unless the configuration replaces it), the job's current
/// IC and CR, chi interpolated there, and the decision a flush would take.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    settings: ConfigLayer,
}

#[derive(Serialize)]
struct Plan<'a> {
    table: &'a rexctl::control::controller::IntervalTable,
    decision: rexctl::control::flush::Decision,
    chi_at_current_ic: Vec<(f64, f64)>,
    chi_at_current_cr: Vec<(f64, f64)>,
}

fn frac(x: f64) -> String {
    if x < 1.0 && (1.0 / x).fract().abs() < 1e-9 {
        format!("1/{}", (1.0 / x).round())
    } else {
        format!("{x}")
    }
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let cfg = Settings::load(&a.settings)?.config()?;
    let job = Job::open_read(&cfg.l1, rexctl::store::open_l2_read(&cfg.l2, &cfg.store)?)?;
    let d = decide_unlocked(&job, &cfg).map_err(|e| job.l2.public_error(e))?;
    let t = &cfg.interval_table;
    let plan = Plan {
        table: t,
        chi_at_current_ic: t.cr.iter().map(|&cr| (cr, t.chi(d.ic, cr))).collect(),
        chi_at_current_cr: t.ic.iter().map(|&ic| (ic, t.chi(ic, d.cr))).collect(),
        decision: d,
    };
    if a.json {
        ui::print_json(&plan)?;
        return Ok(0);
    }
    let d = &plan.decision;
    outln!("optimum L2 interval chi (in L1 checkpoints) by IC (rows) and CR (columns):");
    let row = |head: String, cells: Vec<String>, last: String| {
        format!("{head:>10}{}{last:>9}", cells.concat())
    };
    outln!(
        "{}",
        row(
            "IC \\ CR".into(),
            t.cr.iter().map(|cr| format!("{:>7}", frac(*cr))).collect(),
            "CR here".into()
        )
    );
    for (i, ic) in t.ic.iter().enumerate() {
        outln!(
            "{}",
            row(
                frac(*ic),
                t.chi[i].iter().map(|v| format!("{v:>7.1}")).collect(),
                format!("{:.2}", t.chi(*ic, d.cr))
            )
        );
    }
    outln!(
        "{}",
        row(
            "IC here".into(),
            t.cr.iter()
                .map(|cr| format!("{:>7.2}", t.chi(d.ic, *cr)))
                .collect(),
            format!("{:.2}", d.chi)
        )
    );
    outln!("");
    outln!(
        "this job: IC = {:.4} (latest incremental / full checkpoint), CR = {:.2} (previous L2 checkpoint)",
        d.ic,
        d.cr
    );
    outln!(
        "chi = f(IC, CR) = {:.2} (bilinear over log2 IC and log2 CR, clamped to the table), [chi] = {}",
        d.chi,
        d.chi_int
    );
    outln!(
        "{}: {}{}",
        if d.due {
            "an L2 checkpoint is due"
        } else {
            "no L2 checkpoint due"
        },
        d.reason,
        match (&d.full_reason, d.due) {
            (Some(w), true) => format!("; it would be a complete coalescence: {w}"),
            (None, true) => "; it would be a ΔRPS".into(),
            _ => String::new(),
        }
    );
    outln!("inputs: {}", inputs(d));
    Ok(0)
}
