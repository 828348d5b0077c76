//! The C API of librex (`include/rex.h`, generated from this file by
//! cbindgen; `rex(3)` documents it).
//!
//! One job per process, as in VeloC and FTI: the functions work on a
//! process-wide [`Rex`] behind a mutex. Every function returns 0 or a
//! negative `REX_E*` code (`rex_alloc` returns NULL); `rex_strerror`
//! explains a code and `rex_last_error` gives the full message of the
//! calling thread's last failure (file, offset, what was wrong). No Rust
//! panic crosses the C boundary: one is caught and reported as
//! `REX_EIO` with its message.

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Mutex;

use super::Rex;
use crate::error::Error;

/// Success.
pub const REX_OK: c_int = 0;
/// A bad argument: a NULL pointer, a negative id, size 0, an overlapping
/// or unknown region.
pub const REX_EINVAL: c_int = -1;
/// A call out of order: not initialized, initialized twice, a restart
/// after a checkpoint, no region registered, a call in a forked child.
pub const REX_ESTATE: c_int = -2;
/// The configuration: no L1 or L2, an unreadable rex.toml, a bad value.
pub const REX_ECONFIG: c_int = -3;
/// An I/O error writing or reading a checkpoint (or reaching L2).
pub const REX_EIO: c_int = -4;
/// Another process checkpoints into the same L1 directory (another job,
/// or `rexctl capture`), or a push recovering it after a crash did not
/// finish within 10 s.
pub const REX_EBUSY: c_int = -5;
/// Out of memory.
pub const REX_ENOMEM: c_int = -6;
/// Restart: the registered regions differ from the checkpoint's.
pub const REX_EREGION: c_int = -7;
/// Restart: there is nothing to restart from.
pub const REX_ENORESTART: c_int = -8;
/// No valid state of the job's run is left to restart from: the
/// checkpoints are damaged, or L1 and L2 hold runs that do not continue one
/// another (an L1 directory of an older run beside an L2 a newer run wrote),
/// or, for `rex_restart`, the state changed since `rex_restart_test`;
/// `rex_last_error` says which.
pub const REX_ECORRUPT: c_int = -9;
/// A background L2 push failed (the L1 checkpoints are safe).
pub const REX_EL2: c_int = -10;
/// Dirty-page tracking could not be set up or kept (mprotect,
/// userfaultfd, vm.max_map_count).
pub const REX_ETRACK: c_int = -11;

/// `rex_protect_flags`: every checkpoint carries the whole region, which
/// is never write-protected: for memory devices or the kernel write where
/// no tracker sees it (RDMA, buffers registered with io_uring, GPU peer
/// memory), which then needs no `rex_dirty`.
pub const REX_WHOLE: u32 = 1;

static REX: Mutex<Option<Rex>> = Mutex::new(None);
/// The process that started librex (0: not started), see [`with_rex`].
static OWNER: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

/// The code of a library error, with `invalid` for [`Error::Invalid`]
/// (whose meaning depends on the call).
fn code_of(e: &Error, invalid: c_int) -> c_int {
    match e {
        Error::Io { source, .. }
            if source.raw_os_error() == Some(libc::ENOMEM)
                || source.kind() == std::io::ErrorKind::OutOfMemory =>
        {
            REX_ENOMEM
        }
        // What `rexctl` calls a configuration error (exit 5) is one here
        // too: rejected credentials, no such bucket, no job name for a
        // bucket (helper-94: REX_EIO).
        Error::Remote {
            kind: crate::error::RemoteKind::Config,
            ..
        } => REX_ECONFIG,
        Error::Io { .. } | Error::Remote { .. } => REX_EIO,
        Error::Corrupt { .. } | Error::Chain { .. } => REX_ECORRUPT,
        Error::Busy { .. } => REX_EBUSY,
        Error::PatternSpaceFull(_) | Error::Peer(_) => REX_EL2,
        Error::Invalid(_) | Error::Process { .. } => invalid,
    }
}

/// The code of a failed restart: another rank's failure in an MPI job's
/// collective restart is `REX_EIO` (a rank could not read its L1 or L2;
/// its error is the message), not `REX_EL2`, which says a push failed
/// (helper-58: the example then reported a "background L2 push" that never
/// ran).
fn fail_restart(e: Error) -> (c_int, String) {
    match e {
        Error::Peer(_) => (REX_EIO, e.report()),
        e => fail(e, REX_EINVAL),
    }
}

/// Runs `f` on the job under the lock, catching panics; records the
/// message of a failure for `rex_last_error`.
///
/// A child of the process that started librex (fork) is refused before
/// the lock is taken: it has none of the library's threads (a checkpoint
/// waited for ever on a writer that is not there, helper-80), the lock may
/// have been held by a thread of the parent at the fork, and L1 is the
/// parent's.
fn with_rex(f: impl FnOnce(&mut Option<Rex>) -> Result<c_int, (c_int, String)>) -> c_int {
    // SAFETY: getpid has no preconditions and cannot fail.
    let me = unsafe { libc::getpid() };
    let owner = OWNER.load(std::sync::atomic::Ordering::Acquire);
    if owner != 0 && owner != me {
        set_last(&format!(
            "librex was started in process {owner}, and this is a child of it (fork): librex does not follow a fork (its threads, lock and L1 directory are the parent's); exec, or let the parent checkpoint"
        ));
        return REX_ESTATE;
    }
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut g = REX.lock().unwrap_or_else(|e| e.into_inner());
        let r = f(&mut g);
        // Set and cleared under the lock: the process whose calls it serves.
        OWNER.store(
            if g.is_some() { me } else { 0 },
            std::sync::atomic::Ordering::Release,
        );
        r
    }));
    match r {
        Ok(Ok(code)) => code,
        Ok(Err((code, msg))) => {
            set_last(&msg);
            code
        }
        Err(p) => {
            let what = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            set_last(&format!("internal error (panic): {what}"));
            REX_EIO
        }
    }
}

/// A region registered between `rex_restart_test` and `rex_restart` is a
/// call out of order (REX_ESTATE, as rex(3) says of calls out of order;
/// helper-94: REX_EINVAL).
fn pending_restart(rex: &Rex) -> Result<(), (c_int, String)> {
    if rex.restart_pending() {
        return Err((
            REX_ESTATE,
            "a region cannot be registered between rex_restart_test and rex_restart (register every region first)".into(),
        ));
    }
    Ok(())
}

fn started(g: &mut Option<Rex>) -> Result<&mut Rex, (c_int, String)> {
    g.as_mut().ok_or((
        REX_ESTATE,
        "librex is not initialized: call rex_init first".to_string(),
    ))
}

fn fail(e: Error, invalid: c_int) -> (c_int, String) {
    // Invalid is an umbrella: the tracker's failures, a background L2
    // failure and no memory each have their own code, whatever the call.
    let code = match &e {
        Error::Invalid(m) if m.starts_with("L2: ") => REX_EL2,
        Error::Invalid(m)
            if m.starts_with("mprotect")
                || m.starts_with("userfaultfd")
                || m.contains("SIGSEGV")
                || m.contains("is not tracked")
                || m.starts_with("registered memory")
                || m.contains("regions tracked at once") =>
        {
            REX_ETRACK
        }
        Error::Invalid(m) if m.contains("cannot allocate") => REX_ENOMEM,
        _ => code_of(&e, invalid),
    };
    (code, e.report())
}

fn region_id(id: c_int) -> Result<u32, (c_int, String)> {
    u32::try_from(id).map_err(|_| (REX_EINVAL, format!("region id {id} is negative")))
}

/// Starts checkpointing this process. `config` is a rex.toml path, or NULL
/// for the usual layers (`REX_*` variables, `./rex.toml`,
/// `/etc/rex/rex.toml`); the `l1` and `l2` keys are required.
///
/// # Safety
/// `config` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rex_init(config: *const c_char) -> c_int {
    // SAFETY: passed on from the caller (same contract).
    unsafe {
        init_with(config, |cfg| {
            // In an MPI job (MPI_Init done), the job's world, collectively.
            #[cfg(feature = "mpi")]
            if crate::l2::mpi::MpiComm::initialized() {
                let comm = crate::l2::mpi::MpiComm::world_of_program()
                    .map_err(|e| fail(e, REX_ECONFIG))?;
                return start_collective(cfg, Box::new(comm));
            }
            Rex::with_config(cfg.map_err(config_error)?).map_err(|e| fail(e, REX_ECONFIG))
        })
    }
}

/// As `rex_init`, in an MPI job, over the communicator whose Fortran
/// handle is `comm` (pass `MPI_Comm_c2f(comm)`; `rex_init` itself uses
/// `MPI_COMM_WORLD`). Collective: every rank of `comm` calls it. Rank R's
/// L1 directory is `l1/R`, and `l2` is the job's location (R's chain in
/// `R/`, the job manifests in `job/`). `REX_ECONFIG` when this librex was
/// built without MPI or MPI is not initialized.
///
/// # Safety
/// `config` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rex_init_comm(config: *const c_char, comm: c_int) -> c_int {
    // SAFETY: passed on from the caller (same contract).
    unsafe {
        init_with(config, |cfg| {
            #[cfg(feature = "mpi")]
            {
                let c = crate::l2::mpi::MpiComm::from_fortran(comm)
                    .map_err(|e| fail(e, REX_ECONFIG))?;
                start_collective(cfg, Box::new(c))
            }
            #[cfg(not(feature = "mpi"))]
            {
                let _ = (cfg, comm);
                Err((
                    REX_ECONFIG,
                    "this librex was built without MPI (the cargo feature `mpi`)".into(),
                ))
            }
        })
    }
}

/// Any failure to read the configuration (an unreadable file too) is a
/// configuration error.
fn config_error(e: Error) -> (c_int, String) {
    (REX_ECONFIG, e.report())
}

/// Starts an MPI job's rank over `comm`, collectively: a rank without a
/// configuration takes part in the agreement too, and every rank fails
/// when one does, with the code that rank's failure has (helper-62: they
/// got `REX_EL2`, "a background push failed", when a rank's L1 directory
/// was busy or a setting bad).
#[cfg(feature = "mpi")]
fn start_collective(
    cfg: crate::error::Result<crate::control::config::Config>,
    comm: Box<dyn crate::l2::collective::Comm + Send>,
) -> Result<Rex, (c_int, String)> {
    let cfg = match cfg {
        Ok(c) => c,
        Err(e) => return Err(config_error(Rex::refuse_start(comm.as_ref(), e))),
    };
    Rex::with_comm(cfg, comm).map_err(|e| match &e {
        Error::Peer(p) => (
            match p.exit_code {
                crate::error::exit::BUSY => REX_EBUSY,
                crate::error::exit::DATA => REX_ECORRUPT,
                crate::error::exit::FAILURE => REX_EIO,
                _ => REX_ECONFIG,
            },
            e.report(),
        ),
        _ => fail(e, REX_ECONFIG),
    })
}

/// The part of `rex_init` and `rex_init_comm` they share: the
/// configuration read from `config` (NULL: the usual layers), refused when
/// librex is already initialized; `start` makes the job from it (or from
/// the error reading it: an MPI rank still takes part in its job's start).
///
/// # Safety
/// `config` is NULL or a NUL-terminated string.
unsafe fn init_with(
    config: *const c_char,
    start: impl FnOnce(
        crate::error::Result<crate::control::config::Config>,
    ) -> Result<Rex, (c_int, String)>,
) -> c_int {
    let path = if config.is_null() {
        None
    } else {
        // SAFETY: the caller passes a NUL-terminated string (rex.h).
        let c = unsafe { CStr::from_ptr(config) };
        Some(Path::new(std::ffi::OsStr::from_bytes(c.to_bytes())).to_path_buf())
    };
    with_rex(|g| {
        if g.is_some() {
            return Err((
                REX_ESTATE,
                "librex is already initialized (rex_finalize first)".into(),
            ));
        }
        let cfg = crate::control::config::Config::load(Default::default(), path.as_deref());
        *g = Some(start(cfg)?);
        Ok(REX_OK)
    })
}

/// Registers `size` bytes at `ptr` as region `id` (`id` >= 0, any
/// alignment). The id, not the address, names the region in checkpoints.
#[unsafe(no_mangle)]
pub extern "C" fn rex_protect(id: c_int, ptr: *mut c_void, size: usize) -> c_int {
    rex_protect_flags(id, ptr, size, 0)
}

/// As `rex_protect`, with `flags`: 0 (`rex_protect` itself) or
/// `REX_WHOLE`. Other bits are refused with `REX_EINVAL`.
#[unsafe(no_mangle)]
pub extern "C" fn rex_protect_flags(id: c_int, ptr: *mut c_void, size: usize, flags: u32) -> c_int {
    with_rex(|g| {
        let rex = started(g)?;
        let id = region_id(id)?;
        if flags & !REX_WHOLE != 0 {
            return Err((
                REX_EINVAL,
                format!("region {id}: unknown flags {flags:#x} (known: REX_WHOLE = {REX_WHOLE})"),
            ));
        }
        pending_restart(rex)?;
        let ptr = ptr as *mut u8;
        // SAFETY: the caller registers memory it owns for as long as the
        // region is registered (rex.h, rex(3)).
        unsafe {
            if flags & REX_WHOLE != 0 {
                rex.protect_whole(id, ptr, size)
            } else {
                rex.protect(id, ptr, size)
            }
        }
        .map_err(|e| fail(e, REX_EINVAL))?;
        Ok(REX_OK)
    })
}

/// How region `id` is watched, as rex.toml names trackers:
/// "userfaultfd" (the kernel resolving its write faults),
/// "userfaultfd-thread", "mprotect" (a system call writing into it needs
/// `rex_dirty` first), or "whole" (`REX_WHOLE`). A static string; NULL
/// when no region `id` is registered (`rex_last_error` says why).
#[unsafe(no_mangle)]
pub extern "C" fn rex_region_tracker(id: c_int) -> *const c_char {
    let mut out: *const c_char = std::ptr::null();
    with_rex(|g| {
        let rex = started(g)?;
        let id = region_id(id)?;
        let name = rex
            .region_tracker(id)
            .ok_or_else(|| (REX_EINVAL, format!("region {id} is not registered")))?;
        // Static strings: the caller keeps the pointer as long as it likes.
        out = [c"userfaultfd", c"userfaultfd-thread", c"mprotect", c"whole"]
            .into_iter()
            .find(|c| c.to_bytes() == name.as_bytes())
            .ok_or_else(|| {
                (
                    REX_EIO,
                    format!("region {id}: a tracker with no C name: {name}"),
                )
            })?
            .as_ptr();
        Ok(REX_OK)
    });
    out
}

/// Allocates `size` bytes of zeroed, page-aligned memory registered as
/// region `id`; NULL on failure (`rex_last_error` says why).
#[unsafe(no_mangle)]
pub extern "C" fn rex_alloc(id: c_int, size: usize) -> *mut c_void {
    let mut out: *mut c_void = std::ptr::null_mut();
    with_rex(|g| {
        let rex = started(g)?;
        let id = region_id(id)?;
        pending_restart(rex)?;
        out = rex.alloc(id, size).map_err(|e| fail(e, REX_EINVAL))? as *mut c_void;
        Ok(REX_OK)
    });
    out
}

/// Forgets region `id`: its pages are dropped by the next checkpoint;
/// memory from `rex_alloc` is freed.
#[unsafe(no_mangle)]
pub extern "C" fn rex_unprotect(id: c_int) -> c_int {
    with_rex(|g| {
        let rex = started(g)?;
        let id = region_id(id)?;
        rex.unprotect(id).map_err(|e| fail(e, REX_EINVAL))?;
        Ok(REX_OK)
    })
}

/// Declares that the kernel is about to write `ptr .. ptr + size` (a
/// `read(2)` into a region): its pages are recorded and write-enabled until
/// the next checkpoint.
#[unsafe(no_mangle)]
pub extern "C" fn rex_dirty(ptr: *mut c_void, size: usize) -> c_int {
    with_rex(|g| {
        let rex = started(g)?;
        rex.dirty(ptr as *const u8, size)
            .map_err(|e| fail(e, REX_EINVAL))?;
        Ok(REX_OK)
    })
}

/// Takes an L1 checkpoint: the first is FULL, later ones carry the pages
/// written since the previous one. Returns when the pages are copied; the
/// file is written in the background, and an L2 push runs in the
/// background when the controller says one is due.
#[unsafe(no_mangle)]
pub extern "C" fn rex_checkpoint() -> c_int {
    with_rex(|g| {
        let rex = started(g)?;
        if rex.regions.is_empty() {
            return Err((
                REX_ESTATE,
                "no region is registered: nothing to checkpoint".into(),
            ));
        }
        rex.checkpoint().map_err(|e| fail(e, REX_EIO))?;
        Ok(REX_OK)
    })
}

/// Waits for all background work (the L1 write, an L2 push).
#[unsafe(no_mangle)]
pub extern "C" fn rex_checkpoint_wait() -> c_int {
    with_rex(|g| {
        let rex = started(g)?;
        rex.checkpoint_wait().map_err(|e| fail(e, REX_EIO))?;
        Ok(REX_OK)
    })
}

/// 1 if the job can restart (and `*seq` the seq of the newest restorable
/// state), 0 if there is nothing to restart from, or a negative code.
///
/// # Safety
/// `seq` must point to a writable `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rex_restart_test(seq: *mut u64) -> c_int {
    with_rex(|g| {
        let rex = started(g)?;
        if seq.is_null() {
            return Err((REX_EINVAL, "rex_restart_test: seq is NULL".into()));
        }
        if rex.checkpoints > 0 {
            return Err((
                REX_ESTATE,
                "rex_restart_test after a checkpoint: restart before the first checkpoint".into(),
            ));
        }
        match rex.restart_test().map_err(fail_restart)? {
            Some(s) => {
                // SAFETY: checked non-NULL; the caller passes a writable
                // uint64_t.
                unsafe { *seq = s };
                Ok(1)
            }
            None => Ok(0),
        }
    })
}

/// Fills the registered regions (same ids and sizes as at the checkpoint)
/// with the newest valid state; later checkpoints continue its chain.
#[unsafe(no_mangle)]
pub extern "C" fn rex_restart() -> c_int {
    with_rex(|g| {
        let rex = started(g)?;
        if rex.checkpoints > 0 {
            return Err((
                REX_ESTATE,
                "rex_restart after a checkpoint: restart before the first checkpoint".into(),
            ));
        }
        match rex.restart_test() {
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err((
                    REX_ENORESTART,
                    format!(
                        "nothing to restart from: no L2 generation in {} and no L1 checkpoint in {}",
                        rex.cfg.l2.display(),
                        rex.cfg.l1.display()
                    ),
                ));
            }
            Err(e) => return Err(fail(e, REX_EINVAL)),
        }
        let report = rex.restart().map_err(|e| match e {
            e @ Error::Peer(_) => fail_restart(e),
            e => fail(e, REX_EREGION),
        })?;
        if let Some(why) = &report.fell_back {
            eprintln!("librex: WARNING: restarted from an older state: {why}");
        }
        Ok(REX_OK)
    })
}

/// Waits for background work, stops the threads and the tracking, and
/// releases the L1 directory. Memory from `rex_alloc` stays valid.
#[unsafe(no_mangle)]
pub extern "C" fn rex_finalize() -> c_int {
    with_rex(|g| {
        let rex = g.take().ok_or((
            REX_ESTATE,
            "librex is not initialized: call rex_init first".to_string(),
        ))?;
        // Memory the job got from rex_alloc stays mapped: the job may still
        // read its results after finalizing.
        let mut rex = rex;
        for r in rex.regions.values_mut() {
            r.owned = false;
        }
        rex.finalize().map_err(|e| fail(e, REX_EIO))?;
        Ok(REX_OK)
    })
}

/// A static description of a `REX_E*` code.
#[unsafe(no_mangle)]
pub extern "C" fn rex_strerror(code: c_int) -> *const c_char {
    let s: &'static CStr = match code {
        REX_OK => c"success",
        REX_EINVAL => c"invalid argument",
        REX_ESTATE => c"call out of order",
        REX_ECONFIG => c"configuration error",
        REX_EIO => c"input/output error",
        REX_EBUSY => c"another process holds this L1 directory or this job's L2 location",
        REX_ENOMEM => c"out of memory",
        REX_EREGION => c"registered regions differ from the checkpoint's",
        REX_ENORESTART => c"nothing to restart from",
        REX_ECORRUPT => {
            c"no valid state left (checkpoint damaged, L1 and L2 hold different runs, or the state changed since rex_restart_test)"
        }
        REX_EL2 => c"background L2 push failed (L1 checkpoints are safe)",
        REX_ETRACK => c"dirty-page tracking failed",
        _ => c"unknown error code",
    };
    s.as_ptr()
}

/// The full message of this thread's last failure ("" if none); valid until
/// this thread's next failing rex_* call.
#[unsafe(no_mangle)]
pub extern "C" fn rex_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another rank's failure in a collective restart is REX_EIO with its
    /// message, not REX_EL2 (no push ran: helper-58); a rank's own errors
    /// keep their codes.
    #[test]
    fn a_peer_failure_in_a_restart_is_an_io_error_not_an_l2_one() {
        let peer = Error::Peer(crate::error::PeerFailure {
            rank: 1,
            stage: "restoring lost L1 checkpoints from partners",
            reason: "l1/1/ckpt-00000006.rexic: bad".into(),
            exit_code: crate::error::exit::DATA,
        });
        let (code, msg) = fail_restart(peer);
        assert_eq!(code, REX_EIO);
        assert!(msg.contains("rank 1 failed"), "{msg}");
        let own = Error::chain("l2", "no generation");
        assert_eq!(fail_restart(own).0, REX_ECORRUPT);
    }

    /// What `rexctl` calls a configuration error of a bucket (no job name,
    /// rejected credentials, no such bucket: exit 5) is REX_ECONFIG, not
    /// REX_EIO (helper-94); a transport failure stays REX_EIO.
    #[test]
    fn a_bucket_s_configuration_error_is_a_configuration_error() {
        let remote = |kind| Error::Remote {
            endpoint: "http://127.0.0.1:9000".into(),
            bucket: "b".into(),
            key: "k".into(),
            op: "list",
            kind,
            reason: "no job name".into(),
        };
        use crate::error::RemoteKind;
        assert_eq!(
            code_of(&remote(RemoteKind::Config), REX_EINVAL),
            REX_ECONFIG
        );
        assert_eq!(code_of(&remote(RemoteKind::Transport), REX_EINVAL), REX_EIO);
    }
}
