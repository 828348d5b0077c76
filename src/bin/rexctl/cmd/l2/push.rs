//! `rexctl push-l2`: coalesce, deduplicate and publish the pending batch.

use std::sync::Arc;

use rexctl::control::config::ConfigLayer;
use rexctl::l2::push::{Job, JobIdentity, PushOptions, PushReport, push_l2};

use crate::cmd::config_args::Settings;
use crate::ui;

/// Coalesce the pending L1 checkpoints, deduplicate them page by page, and
/// publish a new L2 generation (it then replaces those checkpoints in L1).
///
/// The first push, a batch holding a FULL checkpoint, a chain already
/// `max_chain_length` generations long, or `--full` makes a complete
/// coalescence (a fresh full RPS starting a new chain); otherwise the
/// generation is a ΔRPS on top of the newest one (`flush` also applies the
/// controller's rules). A push first recovers
/// from any interrupted push. Exits 4 when another rexctl holds the job's
/// lock.
///
/// The L1 directory holds the REX-IC files (the chain's local copy is kept
/// in its `rex/` subdirectory). The L2 location is a directory (created if
/// missing; a relative one only when named with ./), file:///DIR, or
/// s3://BUCKET/PREFIX, where the job's objects go under PREFIX/JOB/RANK/
/// (the job named by --job, REX_JOB, rex.toml or the scheduler; endpoint,
/// region and credentials from rex.toml(5) or the AWS_* variables). The
/// RPS and the Pointer File go up while they are written, so the push waits
/// only for the end of their upload; large objects go up as multipart
/// uploads, a few parts at a time, with a progress bar on a terminal; the
/// summary line gives the bytes uploaded and the throughput.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Force a complete coalescence: a fresh full RPS and a new chain.
    #[arg(long)]
    full: bool,
    /// Push collectively with every rank of an MPI job (run under
    /// `mpirun -np N rexctl push-l2 --collective ...`): rank R pushes the IC
    /// files of L1/R into its own chain under the job's L2 location (L2/R/
    /// in a directory, PREFIX/JOB/R/ in a bucket); pages several ranks hold
    /// are stored once, by one of them (byte-verified), and the push commits
    /// as one job generation (L2/job/). A job generation stands at one seq
    /// on every rank: no rank pushes past the newest seq at which every rank
    /// has a checkpoint of the same life of the job (a rank behind lost its
    /// L1 checkpoints, or is still writing one), and the checkpoints after
    /// it stay in L1, said as "held back". A rank whose L1/R is missing (a
    /// lost node) fails the push on every rank (exit 5): restart the job
    /// first (librex recovers the rank from its partners' copies), or make
    /// L1/R again, empty, to push the others back to its newest seq.
    /// Restore a rank with `restore --rank R`. The first push makes the job's number of ranks: run with an
    /// L1/N beside it (fewer ranks than L1 has directories for, or no
    /// `mpirun`), it is refused (exit 5). Needs a rexctl built with the
    /// cargo feature `mpi`.
    #[arg(long)]
    collective: bool,
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    settings: ConfigLayer,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    // Every setting and the L1 directory are checked before L2 is created.
    let s = Settings::load(&a.settings)?;
    let store = s.store()?;
    let cfg = s.config()?;
    if a.collective {
        return collective(&a, &cfg);
    }
    rexctl::l2::push::check_l1(&cfg.l1)?;
    let l2 = rexctl::store::open_l2(&cfg.l2, &store, true)?;
    let pb = ui::spinner("coalescing, deduplicating and pushing");
    let job = Job::open(&cfg.l1, l2)?
        .with_identity(JobIdentity {
            job: cfg.store.job.clone(),
            rank: cfg.store.rank.clone(),
        })
        .with_progress(Arc::new(ui::UploadBar::new(pb.clone())));
    let report = push_l2(&job, &push_options(&a, &cfg));
    pb.finish_and_clear();
    let report = report.map_err(|e| job.l2.public_error(e))?;
    if a.json {
        ui::print_json(&report)?;
    } else {
        print_human(&report)?;
    }
    Ok(0)
}

fn push_options(a: &Args, cfg: &rexctl::control::config::Config) -> PushOptions {
    PushOptions {
        pattern_size: cfg.pattern_size,
        full: a.full,
        keep_chains_l2: cfg.keep_chains_l2,
        keep_chains_l1: cfg.keep_chains_l1,
        hash: cfg.hash,
        format: cfg.write_format,
        dedup_memory: cfg.dedup_memory,
        max_chain_length: cfg.max_chain_length,
    }
}

#[cfg(not(feature = "mpi"))]
fn collective(_: &Args, _: &rexctl::control::config::Config) -> anyhow::Result<i32> {
    Err(rexctl::Error::Invalid(
        "--collective needs MPI: this rexctl was built without the cargo feature `mpi`".into(),
    )
    .into())
}

/// `push-l2 --collective`: this process is one rank of `mpirun`.
#[cfg(feature = "mpi")]
fn collective(a: &Args, cfg: &rexctl::control::config::Config) -> anyhow::Result<i32> {
    use rexctl::l2::collective::{CollectiveOptions, Comm, push_collective};
    let comm = rexctl::l2::mpi::MpiComm::init()?;
    let rank = comm.rank();
    // A failure before the push still takes part in its agreement, its
    // L2 location's too: a rank that returned before it left the others
    // waiting in it for ever (helper-62).
    let setup = rexctl::store::JobRoot::new(&cfg.l2, &cfg.store).and_then(|root| {
        // The job's number of ranks, when committed, says what a missing
        // L1/R is.
        let ranks = rexctl::l2::jobgen::JobIndex::load(root.job_store(false)?.as_ref())?
            .newest()
            .map(|jm| jm.ranks);
        let l1 = rexctl::l2::push::rank_l1(&cfg.l1, rank, ranks)?;
        root.rank_store(rank, true)
            .and_then(|l2| Job::open(&l1, l2))
            .map(|job| (root, job))
    });
    let (root, job) = match setup {
        Ok((root, j)) => (
            root,
            j.with_identity(JobIdentity {
                job: cfg.store.job.clone(),
                rank: rank.to_string(),
            }),
        ),
        Err(e) => {
            rexctl::l2::collective::fail_early(&comm, &e);
            return Err(e.into());
        }
    };
    let copts = CollectiveOptions {
        table: cfg.collective_table,
        ..CollectiveOptions::default()
    };
    let report = push_collective(&job, &root, &comm, &push_options(a, cfg), &copts, None)
        .map_err(|e| job.l2.public_error(e))?;
    if a.json {
        ui::print_json(&report)?;
    } else {
        for note in &report.healed {
            outln!("rank {rank}: recovered: {note}");
        }
        for note in &report.rolled_back {
            outln!("rank {rank}: rolled back: {note}");
        }
        let c = &report.collective;
        if report.push.manifest.is_some() || c.job_generation > 0 {
            outln!(
                "rank {rank}: job generation {}: {} shared pages across {} ranks, {} of this rank's stored by others ({} compared bytes differed), {} stored here for others",
                c.job_generation,
                c.shared_hashes,
                c.ranks,
                c.xref_pages,
                c.mismatches,
                c.owned
            );
        }
        print_human(&report.push)?;
    }
    Ok(0)
}

/// One summary line (plus recovery notes) for a push.
pub fn print_human(r: &PushReport) -> Result<(), ui::StdoutError> {
    for note in &r.recovered {
        outln!("recovered: {note}");
    }
    if let Some(why) = &r.held_back {
        outln!("held back: {why}");
    }
    let Some(m) = &r.manifest else {
        outln!(
            "nothing to push: {}",
            if r.held_back.is_some() {
                "every pending L1 checkpoint is held back"
            } else {
                "no pending L1 checkpoint"
            }
        );
        return Ok(());
    };
    let d = r.dedup.as_ref().expect("dedup with manifest");
    let mbps = ui::mbps;
    outln!(
        "pushed generation {} ({}{}, seq {}..={}): {} pages ({} live), {} in -> {} out, ratio {:.2}; dedup {:.3}s ({:.0} MB/s), uploaded {} ({:.0} MB/s over {:.3}s of link time, {:.3}s after the deduplication); {} replaced{}",
        m.generation,
        match m.kind {
            rexctl::format::manifest::GenKind::Full => "full RPS",
            rexctl::format::manifest::GenKind::Delta => "ΔRPS",
        },
        r.full_reason
            .as_ref()
            .map(|w| format!(": {w}"))
            .unwrap_or_default(),
        m.first_seq,
        m.last_seq,
        m.dirty_pages,
        m.live_pages,
        ui::bytes(m.bytes_in),
        ui::bytes(m.bytes_out),
        m.compression_ratio,
        m.timings.dedup_s,
        mbps(d.bytes_in, m.timings.dedup_s),
        ui::bytes(m.bytes_out),
        mbps(m.bytes_out, m.timings.link_s),
        m.timings.link_s,
        m.timings.upload_s,
        ui::count(r.deleted_ics as u64, "L1 checkpoint"),
        if r.pruned_l2.is_empty() {
            String::new()
        } else {
            format!("; pruned generations {:?} from L2", r.pruned_l2)
        }
    );
    if d.unindexed > 0 {
        outln!(
            "note: the DeD-Table reached dedup_memory ({} held): {} new patterns were stored without an entry, so their copies in the batch were stored again (rex.toml(5))",
            ui::bytes(d.table_bytes),
            d.unindexed
        );
    }
    Ok(())
}
