//! Subcommands of the L2 side: `push-l2`, `restore`, `verify`, `status`, `gc`;
//! `status` and `verify` of an MPI job's location (`run_job`).

pub mod gc;
pub mod push;
pub mod replicate;
pub mod restore;
pub mod status;
pub mod verify;

use rexctl::l2::jobgen::{JobIndex, JobStatus, job_status};
use rexctl::store::JobRoot;

use crate::cmd::config_args::Settings;
use crate::ui;

/// The MPI job whose location `--l2` names (it holds job generations,
/// written by `push-l2 --collective`), if it is one.
pub fn job_root(s: &Settings) -> anyhow::Result<Option<JobRoot>> {
    Ok(job_index(s)?.map(|(root, _)| root))
}

/// [`job_root`] with the job's index of job generations (read once).
pub fn job_index(s: &Settings) -> anyhow::Result<Option<(JobRoot, JobIndex)>> {
    let root = JobRoot::new(s.l2()?, &s.store()?)?;
    let jobs = JobIndex::load(root.job_store(false)?.as_ref())?;
    Ok((!jobs.manifests.is_empty() || !jobs.invalid.is_empty()).then_some((root, jobs)))
}

/// The rank `--rank` (or REX_RANK) names, when the location is an MPI
/// job's: its ranks are numbers.
pub fn job_rank(s: &Settings) -> anyhow::Result<Option<u32>> {
    match &s.layer.rank {
        None => Ok(None),
        Some(r) => Ok(Some(r.parse::<u32>().map_err(|_| {
            rexctl::Error::Invalid(format!("--rank {r}: the ranks of an MPI job are numbers"))
        })?)),
    }
}

/// `status` or `verify` of an MPI job: its job generations and each rank's
/// part of the newest (rank `only` alone, with `--rank`), with `l1_root`
/// each rank's L1 directory too. Exits 3 when a rank's part is missing or
/// bad.
pub fn run_job(
    root: &JobRoot,
    verify: bool,
    l1_root: Option<&std::path::Path>,
    only: Option<u32>,
    json: bool,
    repair: Option<&rexctl::l2::repair::RepairReport>,
) -> anyhow::Result<i32> {
    let pb = ui::spinner(if verify { "verifying" } else { "reading" });
    let st = job_status(root, verify, l1_root, only);
    pb.finish_and_clear();
    let st: JobStatus = st?;
    if json {
        match repair {
            Some(r) => ui::print_json(&serde_json::json!({ "repair": r, "verify": &st }))?,
            None => ui::print_json(&st)?,
        }
    } else {
        outln!(
            "MPI job at {}: job generations {:?}, {} ranks in the newest",
            st.location,
            st.job_generations,
            st.ranks
        );
        for m in &st.members {
            let bad = m.verify.as_ref().map_or(0, |v| {
                v.generations.iter().filter(|g| g.error.is_some()).count()
            });
            let gens = m.verify.as_ref().map(|v| {
                format!(
                    "; {} generations verified, {} pages rebuilt{}",
                    v.generations.len(),
                    v.pages_checked,
                    if bad > 0 {
                        format!(", {bad} BAD")
                    } else {
                        String::new()
                    }
                )
            });
            match &m.error {
                // A rank with a generation that fails is not ok (helper-66:
                // "1 BAD: ok"); its generations are listed below.
                None => outln!(
                    "rank {}: generation {}{}: {}",
                    m.rank,
                    m.generation.map_or("-".into(), |g| g.to_string()),
                    gens.unwrap_or_default(),
                    // Nor one whose invalid manifests verify found
                    // (helper-89: "ok" above its out-of-order generation).
                    if bad > 0
                        || m.verify.as_ref().is_some_and(|v| !v.ok())
                        || m.l1.as_ref().is_some_and(|l| !l.errors.is_empty())
                    {
                        ui::bad("BAD")
                    } else {
                        ui::good("ok")
                    }
                ),
                Some(e) => outln!("rank {}: {}: {e}", m.rank, ui::bad("BAD")),
            }
            if let Some(v) = &m.verify {
                for g in v.generations.iter().filter(|g| g.error.is_some()) {
                    outln!(
                        "rank {} {} generation {}: {}: {}",
                        m.rank,
                        g.level,
                        g.generation,
                        ui::bad("BAD"),
                        g.error.as_deref().unwrap_or("")
                    );
                }
                for e in &v.invalid_manifests {
                    outln!("rank {}: {}: {e}", m.rank, ui::bad("BAD"));
                }
            }
            if let Some(l1) = &m.l1 {
                // What is pending, when it could be read (helper-69: "no
                // checkpoint pending" beside a pending file that failed).
                if !l1.missing && (l1.pending_seqs.is_some() || l1.errors.is_empty()) {
                    outln!(
                        "rank {} L1 {}: {}{}",
                        m.rank,
                        l1.dir.display(),
                        match l1.pending_seqs {
                            Some((a, b)) => format!(
                                "{} pending (seqs {a}..={b})",
                                ui::count(l1.pending_ics as u64, "checkpoint")
                            ),
                            None => "no checkpoint pending".into(),
                        },
                        if l1.set_aside.is_empty() {
                            String::new()
                        } else {
                            format!(", {} set aside", l1.set_aside.len())
                        }
                    );
                }
                for e in &l1.errors {
                    outln!("rank {} L1: {}: {e}", m.rank, ui::bad("BAD"));
                }
            }
        }
        for i in &st.invalid {
            outln!("{}: {i}", ui::bad("BAD"));
        }
    }
    if st.job_generations.is_empty() || !st.ok() {
        // Said on standard error too, which `-q` keeps (helper-71: a
        // failing job verify was silent under -q).
        let mut said = false;
        for m in &st.members {
            let gens = m
                .verify
                .iter()
                .flat_map(|v| v.generations.iter())
                .filter_map(|g| {
                    g.error
                        .as_ref()
                        .map(|e| format!("{} generation {}: {e}", g.level, g.generation))
                });
            let other = m
                .verify
                .iter()
                .flat_map(|v| v.invalid_manifests.iter().chain(&v.l1_errors))
                .cloned();
            let l1 = m.l1.iter().flat_map(|l| l.errors.iter()).cloned();
            for e in m.error.iter().cloned().chain(gens).chain(other).chain(l1) {
                ui::error(&format!("rank {}: {e}", m.rank));
                said = true;
            }
        }
        for i in &st.invalid {
            ui::error(i);
            said = true;
        }
        if !said {
            ui::error(&format!("{}: no job generation", st.location));
        }
        return Ok(rexctl::error::exit::DATA);
    }
    Ok(0)
}
