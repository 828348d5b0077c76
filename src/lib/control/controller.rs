//! The runtime L2 controller (paper §4.1, Table 1, and §3.4).
//!
//! Two decisions, both made from numbers the job's own files provide:
//!
//! * **When an L2 checkpoint is due.** After each L1 checkpoint, `IC` is the
//!   size of the latest incremental over the size of the full checkpoint and
//!   `CR` the compression ratio of the previous L2 checkpoint (2 before there
//!   is one). The optimum interval `chi = f(IC, CR)`, in L1 checkpoints, is
//!   interpolated from the paper's Table 1 (replaceable in the
//!   configuration); `[chi]` is the nearest integer clamped to 4..=9. An L2
//!   checkpoint is due when at least `[chi]` L1 checkpoints are pending, or
//!   the oldest pending one is older than a configured age, or the pending
//!   bytes exceed a configured size. The very first full checkpoint is due
//!   at once: REX saves it to both levels (paper §3.1).
//! * **Batched (ΔRPS) or complete coalescence (full RPS).** With `C` and
//!   `delta` the mean checkpoint and restore cost of a ΔRPS generation,
//!   `Psi` the checkpoint cost of a full RPS, `n` the ΔRPS generations since
//!   the last full one, `T` the L2 interval and `M` the MTBF,
//!   `p = 1 - exp(-T/M)`: a complete coalescence is taken when
//!   `n >= (Psi - C) / (p * delta) - 1`; also when the pattern pointer space
//!   would overflow or the chain reaches its maximum length.
//!
//! **Interpolation.** `f` is bilinear over `log2 IC` and `log2 CR`: both axes
//! of Table 1 are geometric (1/16 .. 1, 1 .. 16), so equal ratios get equal
//! weight, and bilinear interpolation returns the table's value exactly at
//! its points, is continuous, and is monotone along any line on which the
//! table is monotone. Outside the table it clamps to the edge.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The paper's Table 1 (cores = 4, bandwidth = 1): rows IC, columns CR.
pub const PAPER_IC: [f64; 6] = [1.0 / 16.0, 1.0 / 12.0, 1.0 / 8.0, 1.0 / 4.0, 1.0 / 2.0, 1.0];
/// Table 1's CR axis.
pub const PAPER_CR: [f64; 6] = [1.0, 2.0, 4.0, 8.0, 12.0, 16.0];
/// Table 1's values.
pub const PAPER_CHI: [[f64; 6]; 6] = [
    [9.0, 7.0, 7.0, 7.0, 6.0, 5.0],
    [8.0, 6.0, 6.0, 5.0, 5.0, 5.0],
    [8.0, 7.0, 6.0, 5.0, 5.0, 5.0],
    [8.0, 7.0, 6.0, 5.0, 5.0, 5.0],
    [7.0, 7.0, 6.0, 5.0, 5.0, 5.0],
    [5.0, 4.0, 4.0, 4.0, 4.0, 4.0],
];

/// The interval table: `chi[i][j]` is the optimum L2 interval for `ic[i]`
/// and `cr[j]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntervalTable {
    /// IC axis (ascending, positive).
    pub ic: Vec<f64>,
    /// CR axis (ascending, positive).
    pub cr: Vec<f64>,
    /// Values, one row per IC.
    pub chi: Vec<Vec<f64>>,
}

impl Default for IntervalTable {
    fn default() -> Self {
        IntervalTable {
            ic: PAPER_IC.to_vec(),
            cr: PAPER_CR.to_vec(),
            chi: PAPER_CHI.iter().map(|r| r.to_vec()).collect(),
        }
    }
}

/// Position of `x` on an ascending `axis` in log2 space: (lower index,
/// weight of the upper one), clamped at both ends.
fn locate(axis: &[f64], x: f64) -> (usize, f64) {
    let n = axis.len();
    if n == 1 || x <= axis[0] || x.is_nan() {
        return (0, 0.0);
    }
    if x >= axis[n - 1] {
        return (n - 2, 1.0);
    }
    let i = axis.partition_point(|&a| a <= x) - 1;
    let (a, b) = (axis[i].log2(), axis[i + 1].log2());
    (i, (x.log2() - a) / (b - a))
}

impl IntervalTable {
    /// Checks the table's shape: at least one point per axis, axes strictly
    /// ascending and positive, values finite.
    pub fn check(&self) -> Result<()> {
        let axis_ok = |a: &[f64]| {
            !a.is_empty()
                && a.iter().all(|x| x.is_finite() && *x > 0.0)
                && a.windows(2).all(|w| w[0] < w[1])
        };
        if !axis_ok(&self.ic) || !axis_ok(&self.cr) {
            return Err(Error::Invalid(
                "interval table: the ic and cr axes must be non-empty, positive and strictly ascending".into(),
            ));
        }
        if self.chi.len() != self.ic.len()
            || self
                .chi
                .iter()
                .any(|r| r.len() != self.cr.len() || r.iter().any(|v| !v.is_finite()))
        {
            return Err(Error::Invalid(format!(
                "interval table: chi must have {} rows of {} finite values",
                self.ic.len(),
                self.cr.len()
            )));
        }
        Ok(())
    }

    /// `f(IC, CR)`: bilinear interpolation over log2 of both axes, clamped
    /// to the table's edges.
    pub fn chi(&self, ic: f64, cr: f64) -> f64 {
        let (i, u) = locate(&self.ic, ic);
        let (j, v) = locate(&self.cr, cr);
        let at = |a: usize, b: usize| self.chi[a.min(self.ic.len() - 1)][b.min(self.cr.len() - 1)];
        let (i1, j1) = (
            (i + 1).min(self.ic.len() - 1),
            (j + 1).min(self.cr.len() - 1),
        );
        let top = at(i, j) * (1.0 - v) + at(i, j1) * v;
        let bottom = at(i1, j) * (1.0 - v) + at(i1, j1) * v;
        top * (1.0 - u) + bottom * u
    }
}

/// `[chi]`: the nearest integer, clamped to 4..=9 (paper §4.1).
pub fn chi_int(chi: f64) -> u64 {
    if chi.is_nan() {
        return 4;
    }
    chi.round().clamp(4.0, 9.0) as u64
}

/// The terms of the complete-coalescence rule.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CostRule {
    /// Mean checkpoint cost of a ΔRPS generation (s).
    pub c: f64,
    /// Mean restore cost of a ΔRPS generation (s).
    pub delta: f64,
    /// Checkpoint cost of a full RPS (s).
    pub psi: f64,
    /// L2 interval (s).
    pub t: f64,
    /// Mean time between failures (s).
    pub m: f64,
    /// Probability of a failure within the next L2 interval.
    pub p: f64,
    /// `(Psi - C) / (p * delta) - 1`.
    pub threshold: f64,
}

impl CostRule {
    /// Evaluates the rule's terms.
    pub fn new(c: f64, delta: f64, psi: f64, t: f64, m: f64) -> CostRule {
        let p = 1.0 - (-t / m).exp();
        let threshold = if p > 0.0 && delta > 0.0 {
            (psi - c) / (p * delta) - 1.0
        } else {
            f64::INFINITY
        };
        CostRule {
            c,
            delta,
            psi,
            t,
            m,
            p,
            threshold,
        }
    }

    /// Whether `n` ΔRPS generations call for a complete coalescence.
    pub fn due(&self, n: u64) -> bool {
        n as f64 >= self.threshold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f_equals_table_1_at_all_36_points() {
        let t = IntervalTable::default();
        for (i, &ic) in PAPER_IC.iter().enumerate() {
            for (j, &cr) in PAPER_CR.iter().enumerate() {
                assert_eq!(t.chi(ic, cr), PAPER_CHI[i][j], "IC {ic}, CR {cr}");
            }
        }
    }

    #[test]
    fn f_clamps_outside_the_table() {
        let t = IntervalTable::default();
        assert_eq!(t.chi(1.0 / 64.0, 0.5), 9.0);
        assert_eq!(t.chi(4.0, 100.0), 4.0);
        assert_eq!(t.chi(1.0 / 100.0, 16.0), 5.0);
        assert_eq!(t.chi(2.0, 1.0), 5.0);
        assert_eq!(t.chi(0.0, 0.0), 9.0);
        assert_eq!(t.chi(f64::NAN, f64::NAN), 9.0);
    }

    #[test]
    fn f_is_monotone_where_the_table_is_and_between_its_values() {
        let t = IntervalTable::default();
        let grid: Vec<f64> = (0..=160)
            .map(|k| 2f64.powf(-4.0 + 4.0 * k as f64 / 160.0))
            .collect();
        let crs: Vec<f64> = (0..=160)
            .map(|k| 2f64.powf(4.0 * k as f64 / 160.0))
            .collect();
        // Every row of Table 1 is non-increasing in CR, so f is too.
        for &ic in &grid {
            for w in crs.windows(2) {
                assert!(
                    t.chi(ic, w[1]) <= t.chi(ic, w[0]) + 1e-12,
                    "IC {ic}: not monotone in CR at {}",
                    w[0]
                );
            }
        }
        // Between two adjacent table points, f stays within their values.
        for i in 0..5 {
            for j in 0..6 {
                let (a, b) = (PAPER_CHI[i][j], PAPER_CHI[i + 1][j]);
                for k in 0..=10 {
                    let ic = 2f64.powf(
                        PAPER_IC[i].log2()
                            + (PAPER_IC[i + 1].log2() - PAPER_IC[i].log2()) * k as f64 / 10.0,
                    );
                    let v = t.chi(ic, PAPER_CR[j]);
                    assert!(v >= a.min(b) - 1e-12 && v <= a.max(b) + 1e-12);
                    if a >= b {
                        let prev = if k == 0 {
                            v
                        } else {
                            let ic0 = 2f64.powf(
                                PAPER_IC[i].log2()
                                    + (PAPER_IC[i + 1].log2() - PAPER_IC[i].log2())
                                        * (k - 1) as f64
                                        / 10.0,
                            );
                            t.chi(ic0, PAPER_CR[j])
                        };
                        assert!(v <= prev + 1e-12);
                    }
                }
            }
        }
    }

    #[test]
    fn f_interpolates_in_log_space() {
        let t = IntervalTable::default();
        // Half way between CR 1 and 2 in log2 is sqrt(2): between 9 and 7 at IC 1/16.
        assert!((t.chi(1.0 / 16.0, 2f64.sqrt()) - 8.0).abs() < 1e-12);
        // Half way between IC 1/2 and 1 (log2 -0.5), at CR 1: between 7 and 5.
        assert!((t.chi(2f64.powf(-0.5), 1.0) - 6.0).abs() < 1e-12);
    }

    #[test]
    fn chi_int_rounds_and_clamps() {
        assert_eq!(chi_int(3.2), 4);
        assert_eq!(chi_int(6.5), 7);
        assert_eq!(chi_int(6.49), 6);
        assert_eq!(chi_int(12.0), 9);
        assert_eq!(chi_int(f64::NAN), 4);
    }

    #[test]
    fn cost_rule_on_the_worked_numbers() {
        let r = CostRule::new(10.0, 5.0, 60.0, 600.0, 10_000.0);
        assert!((r.p - 0.05824).abs() < 5e-6, "p = {}", r.p);
        assert!(
            (r.threshold - 170.7).abs() < 0.05,
            "threshold = {}",
            r.threshold
        );
        assert!(!r.due(170));
        assert!(r.due(171));
    }

    #[test]
    fn table_shape_is_checked() {
        let mut t = IntervalTable::default();
        t.check().unwrap();
        t.chi[2].pop();
        assert!(t.check().is_err());
        let mut t = IntervalTable::default();
        t.cr[1] = 0.5;
        assert!(t.check().is_err());
    }
}
