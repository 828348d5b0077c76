//! `rexctl replicate`: partner copies of an MPI job's L1 checkpoints.

use rexctl::control::config::ConfigLayer;

/// Copy every rank's L1 checkpoints to K - 1 partner ranks (run under
/// `mpirun -np N rexctl replicate ...`), for jobs that write their L1 files
/// themselves; librex does it after each checkpoint (`replicas` in
/// rex.toml(5)).
///
/// Rank R's checkpoints are in L1/R; a copy of rank S's checkpoint goes to
/// L1/R/partner-S/, byte for byte S's file, checked by its CRCs. Pages a
/// partner's own checkpoint of the same seq holds are not sent: the partner
/// takes them from its own file. Partners are chosen per checkpoint with
/// the whole job's view: the heaviest senders first, to the receivers with
/// the least to receive. Every rank must hold the same seqs, and K is at
/// most the number of ranks (exit 5 otherwise). Each rank holds
/// its L1 directory's producer lock while it runs, as a librex job or a
/// capture does: it is refused (exit 4) beside one on the same directory.
/// Copies are deleted by `push-l2 --collective` once their sender's L2
/// chain holds them. Needs a rexctl built with the cargo feature `mpi`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    settings: ConfigLayer,
}

#[cfg(not(feature = "mpi"))]
pub fn run(_: Args) -> anyhow::Result<i32> {
    Err(rexctl::Error::Invalid(
        "replicate needs MPI: this rexctl was built without the cargo feature `mpi`".into(),
    )
    .into())
}

#[cfg(feature = "mpi")]
pub fn run(a: Args) -> anyhow::Result<i32> {
    use rexctl::l2::collective::{Comm, agree};
    use rexctl::l2::partners::replicate;
    let s = crate::cmd::config_args::Settings::load(&a.settings)?;
    let k = s.layer.replicas.unwrap_or(2);
    let comm = rexctl::l2::mpi::MpiComm::init()?;
    let rank = comm.rank();
    // Every rank sees the same K and N, so every rank stops here alike.
    // Fewer copies than asked would be a silent loss of resilience
    // (helper-72: `--replicas 2` on one rank exited 0 and copied nothing).
    if k > comm.size() {
        return Err(rexctl::Error::Invalid(format!(
            "--replicas {k} needs at least {k} ranks, this run has {}: each copy goes to another rank (run it under `mpirun -np N`)",
            comm.size()
        ))
        .into());
    }
    // The producer lock of the rank's L1 while it writes partner copies
    // there: a push's recovery then leaves their temporaries alone, and a
    // librex job cannot replicate into the same directory at once. The
    // seqs of every rank, which must agree.
    // Every checkpoint in L1, as a chain or not: after the job's first
    // push, L1 holds incrementals whose FULL checkpoint L2 holds
    // (helper-58: a scan that wanted a chain from a FULL file refused them).
    // A missing setting fails in the agreement below, not before it: the
    // other ranks would wait in it for ever (helper-62).
    let files = s.l1().and_then(|d| {
        let l1 = d.join(rank.to_string());
        // A setting that names no directory is exit 5, as for a push.
        rexctl::l2::push::check_l1(&l1)?;
        let lock = rexctl::l1::lock::JobLock::acquire_producer(&l1, "rexctl replicate")?;
        rexctl::l1::read_all(&l1).map(|f| (l1, lock, f))
    });
    let seqs = files
        .as_ref()
        .map(|(_, _, f)| f.iter().flat_map(|m| m.seq().to_le_bytes()).collect())
        .map_err(rexctl::error::Failure::from);
    let all = agree(&comm, seqs, "listing the checkpoints");
    let (l1, _producer, files) = files?;
    let all = all?;
    if all.iter().any(|b| *b != all[0]) {
        return Err(rexctl::Error::Invalid(
            "the ranks hold different checkpoints (seqs): every rank must hold the same".into(),
        )
        .into());
    }
    let (mut sent, mut full, mut natural, mut stored) = (0u64, 0u64, 0u64, 0u64);
    let (mut view, mut hash_list, mut resent) = (0u64, 0u64, 0u64);
    let mut partners = 0;
    for m in &files {
        let r = replicate(&comm, &l1, Ok(m.path.as_path()), k)?;
        sent += r.sent_bytes;
        full += r.full_copy_bytes;
        natural += r.natural_pages;
        stored += r.stored;
        view += r.view_bytes;
        hash_list += r.hash_list_bytes;
        resent += r.resent_pages;
        partners = r.partners.len();
    }
    outln!(
        "rank {rank}: {} checkpoints to {} partners each: sent {sent} bytes of {full} ({} full copies), {natural} pages not sent (the partner held them); stored {stored} copies of other ranks' checkpoints; views {view} bytes (hash lists: {hash_list}), {resent} pages resent (filter false positives)",
        files.len(),
        partners,
        partners
    );
    Ok(0)
}
