//! Crash-safe file publication: write to a temporary name, fsync, rename,
//! fsync the directory.
//!
//! Every file rexctl publishes goes through [`AtomicFile`], so that a reader
//! (or a restore after a crash) sees either the old file, or the complete
//! new one, never a torn one. Temporary files are named `.<name>.tmp-<pid>-<n>`
//! in the target directory (so the final `rename` never crosses a file
//! system) and start with a dot so directory scanners skip them; a crashed
//! writer's leftovers are removed by [`remove_stale_temps`]. A file being
//! written can also stream a copy of its bytes to a reader that stores them
//! elsewhere at the same time ([`Mirror`]), which publishes the copy only
//! once it has the whole file.
//!
//! A temporary file is also removed when the CLI is interrupted (SIGINT,
//! SIGTERM, SIGHUP, SIGPIPE, SIGUSR1, SIGUSR2, SIGALRM, SIGXCPU) while
//! writing it: [`remove_temps_on_signal`] starts a
//! thread that, on such a signal, removes every live temporary file (and
//! every [`ScratchDir`] and [`RemovedOnSignal`] path: an S3 cache, a work
//! directory, an MPI rank's staged image) and then lets the signal end the
//! process as it would have. A signal the process was started ignoring
//! (`nohup`, a shell's background job) stays ignored. Its registry is a
//! plain mutex, not a structure a signal handler reads, because the
//! removal runs on that thread (signal-hook's self-pipe), where anything
//! may be called. Only the CLI starts it: librex runs inside the user's
//! job, whose signals are not ours to take. A read through a mapped file
//! that faults (SIGBUS, [`report_mapped_faults`]) hands the process's end
//! to that thread too, through a real-time signal of its own, so that
//! its temporary files go as well.
//!
//! The module also hosts the crash-test failpoint: with `REX_FAILPOINT=N` in
//! the environment, the process aborts (as `kill -9` would leave it) at the
//! N-th durable file operation (with `REX_FAILPOINT_SIGNAL=kill`, it sends
//! itself SIGKILL). Crash tests run the real binary with every N in turn and
//! check that the next run recovers.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::error::{Error, IoContext, Result};

static OP_COUNT: AtomicU64 = AtomicU64::new(0);
static TEMP_COUNT: AtomicU64 = AtomicU64::new(0);

fn failpoint_limit() -> Option<u64> {
    static LIMIT: OnceLock<Option<u64>> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        std::env::var("REX_FAILPOINT")
            .ok()
            .and_then(|v| v.trim().parse().ok())
    })
}

/// Marks one durable file operation. With `REX_FAILPOINT=N`, the N-th call
/// aborts the process without unwinding, as a crash would.
pub fn failpoint(op: &str) {
    let n = OP_COUNT.fetch_add(1, Ordering::SeqCst) + 1;
    if let Some(limit) = failpoint_limit()
        && n >= limit
    {
        eprintln!("rexctl: REX_FAILPOINT={limit}: aborting at operation {n} ({op})");
        // `REX_FAILPOINT_SIGNAL=kill`: a real SIGKILL instead of an abort
        // (an MPI launcher tells the two apart).
        if std::env::var("REX_FAILPOINT_SIGNAL").is_ok_and(|v| v == "kill") {
            // SAFETY: kill(2) of this very process; nothing is shared.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        std::process::abort();
    }
}

/// Number of durable operations performed so far by this process (lets crash
/// tests know how many failpoints a command passes).
pub fn operations() -> u64 {
    OP_COUNT.load(Ordering::SeqCst)
}

/// The temporary files of the [`AtomicFile`]s alive in this process, and
/// the [`ScratchDir`]s.
static LIVE_TEMPS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn live_temps() -> MutexGuard<'static, Vec<PathBuf>> {
    // A panic while the list was held leaves it whole (push or remove).
    LIVE_TEMPS.lock().unwrap_or_else(|e| e.into_inner())
}

fn forget_temp(temp: &Path) {
    let mut live = live_temps();
    if let Some(i) = live.iter().rposition(|p| p == temp) {
        live.swap_remove(i);
    }
}

/// Whether signal `sig` is ignored now (SIG_IGN): one the process was
/// started ignoring (`nohup`, a shell's `cmd &`, `trap '' TERM`) stays
/// ignored whatever the commands install.
pub fn is_ignored(sig: libc::c_int) -> bool {
    // SAFETY: sigaction(2) with a null new action only reads the current
    // disposition into `old`, a zeroed sigaction owned here.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// From now on, SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGUSR1, SIGUSR2,
/// SIGALRM and SIGXCPU (those not ignored already)
/// remove the temporary file of every [`AtomicFile`] not yet committed,
/// every [`ScratchDir`] and every [`RemovedOnSignal`] path, then end the
/// process as the signal's default action does (the parent sees the
/// signal). Without it, an interrupted `restore` left `.OUT.tmp-PID-0`
/// beside the output it never wrote. For the CLI only (see the module doc).
///
/// A file being renamed into place at that moment is either published
/// whole or not at all: its rename fails once its temporary is gone.
pub fn remove_temps_on_signal() -> std::io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGPIPE, SIGTERM};
    // A signal the process was started ignoring stays ignored
    // (`is_ignored`; helper-39: the first version made `nohup rexctl
    // push-l2` die on SIGHUP).
    // A file-size limit (`ulimit -f`) met raises SIGXFSZ, whose default
    // action ended the process with its temporary left (helper-86):
    // ignored, the write fails with EFBIG ("File too large") and the
    // command fails cleanly, as on a full disk.
    if !is_ignored(libc::SIGXFSZ) {
        // SAFETY: setting a signal's disposition to SIG_IGN installs no
        // handler; nothing in this process relies on SIGXFSZ.
        unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    }
    // SIGPIPE too: `rexctl demo | head -1` left its work directory
    // (helper-46). And the other signals whose default action ends the
    // process that a batch system or a shell sends (helper-86): SIGUSR1
    // and SIGUSR2 (Slurm's `--signal` before a job's time limit, mpirun
    // forwards them), SIGALRM (`timeout -s ALRM`), SIGXCPU (a CPU-time
    // limit).
    let watched: Vec<libc::c_int> = [
        SIGINT,
        SIGTERM,
        SIGHUP,
        SIGPIPE,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGALRM,
        libc::SIGXCPU,
    ]
    .into_iter()
    .filter(|&sig| !is_ignored(sig))
    .collect();
    // The SIGBUS handler's call for a sweep (`report_mapped_faults`): a
    // real-time signal nothing else in the CLI sends.
    let handoff = libc::SIGRTMAX() - 1;
    let watched: Vec<libc::c_int> = watched.into_iter().chain([handoff]).collect();
    let mut signals = signal_hook::iterator::Signals::new(watched)?;
    std::thread::Builder::new()
        .name("rexctl-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                // Held until the process ends: no new temporary file
                // appears after the sweep.
                let live = live_temps();
                let mut dirs = Vec::new();
                for temp in live.iter() {
                    match fs::symlink_metadata(temp) {
                        Ok(m) if m.is_dir() => {
                            drop(fs::remove_dir_all(temp));
                            dirs.push(temp.clone());
                        }
                        _ => drop(fs::remove_file(temp)),
                    }
                }
                // A file is created under the list's lock, held from here
                // on; a directory is not: another thread still running may
                // make one again inside a scratch tree (a push's
                // `create_dir_all` in analyze's work directory did, and
                // the tree stayed). A child removes them once this process
                // is gone: it waits for the end of a pipe only this process
                // holds open.
                if !dirs.is_empty()
                    && let Ok(mut child) = std::process::Command::new("/bin/sh")
                        .args(["-c", "read _; rm -rf -- \"$@\"", "sh"])
                        .args(&dirs)
                        .stdin(std::process::Stdio::piped())
                        .stdout(std::process::Stdio::null())
                        .stderr(std::process::Stdio::null())
                        .spawn()
                {
                    // Held open until the process ends.
                    std::mem::forget(child.stdin.take());
                }
                if sig == handoff && BUS_REPORTED.load(Ordering::Acquire) {
                    // SAFETY: _exit(2) ends the process at once; the
                    // faulting thread waits in its handler meanwhile.
                    unsafe { libc::_exit(crate::error::exit::FAILURE) };
                }
                // Resets the default action and raises the signal again.
                let _ = signal_hook::low_level::emulate_default_handler(sig);
                // A signal whose default action does not end the process
                // (none of ours): end it the way a shell reports a signal.
                std::process::exit(128 + sig);
            }
        })?;
    HANDOFF.store(handoff, Ordering::Release);
    Ok(())
}

/// The signal that asks the signal thread of [`remove_temps_on_signal`]
/// to remove the temporary files and end the process with exit status 1,
/// once it runs (0 before).
static HANDOFF: AtomicI32 = AtomicI32::new(0);
/// Set by the SIGBUS handler before it sends [`HANDOFF`].
static BUS_REPORTED: AtomicBool = AtomicBool::new(false);
/// Set by the first SIGBUS handler to run: the one that reports.
static BUS_ONCE: AtomicBool = AtomicBool::new(false);

/// From now on, a SIGBUS raised by a read through a mapped file
/// ([`crate::mapped`]: a file that shrank after it was opened, or
/// whose storage failed) prints which file and byte, and ends the process
/// with exit status 1 instead of "Bus error" and a core dump. The process
/// ends where it was, as if killed, but without its temporary files when
/// [`remove_temps_on_signal`] runs (its thread removes them, as for an
/// interrupt). Any other SIGBUS keeps its default action. For the CLI
/// only: a library must not take a signal from the program that links it.
pub fn report_mapped_faults() -> std::io::Result<()> {
    // A SIGBUS ignored when the process started stays ignored, as every
    // signal does (`remove_temps_on_signal`).
    if is_ignored(libc::SIGBUS) {
        return Ok(());
    }
    // SAFETY: installs `on_sigbus`, which is async-signal-safe (atomic
    // loads, write(2), _exit(2), signal(2), raise(3)), with SA_SIGINFO for
    // the fault address; the sigaction struct is zeroed and filled here.
    let rc = unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The SIGBUS handler of [`report_mapped_faults`]. Async-signal-safe: it
/// reads the mapping table and its statics with atomic loads, formats into
/// a stack buffer, and calls only write(2), kill(2), getpid(2),
/// nanosleep(2) and _exit(2), or signal(2) and raise(3).
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler;
    // for a fault, `si_addr` is the faulting address, inside a mapping a
    // thread is reading, hence alive (the contract of `find`).
    let hit = unsafe {
        // Raised by the kernel for a fault (BUS_ADRERR, BUS_OBJERR...),
        // not sent by kill(2) or raise(3), whose codes are 0 or below.
        let addr = (*info).si_addr() as usize;
        if (*info).si_code > 0 {
            crate::mapped::find(addr)
        } else {
            None
        }
    };
    // A second thread faulting meanwhile (both restore threads read the
    // file) waits for the first one's handoff.
    if BUS_ONCE.swap(true, Ordering::AcqRel) {
        wait_for_handoff();
        // SAFETY: as below.
        unsafe { libc::_exit(crate::error::exit::FAILURE) };
    }
    let Some((path, off)) = hit else {
        // Not a mapped file's: the default action, as without a handler
        // (the raised signal is blocked until this handler returns; a
        // fault then also recurs on the same instruction).
        // SAFETY: signal(2) and raise(3) are async-signal-safe.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
        return;
    };
    let mut num = [0u8; 20];
    let mut i = num.len();
    let mut v = off;
    loop {
        i -= 1;
        num[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for part in [
        &b"rexctl: error: "[..],
        path,
        b": byte ",
        &num[i..],
        b" could not be read through its mapping (SIGBUS): the file shrank after it was opened \
(rewritten in place rather than under a temporary name and renamed), or its storage failed to \
read it; the command stopped there, as an interrupted one does\n",
    ] {
        let mut b = part;
        while !b.is_empty() {
            // SAFETY: write(2) of a live buffer to fd 2; async-signal-safe.
            let n = unsafe { libc::write(2, b.as_ptr().cast(), b.len()) };
            if n <= 0 {
                break;
            }
            b = &b[n as usize..];
        }
    }
    let handoff = HANDOFF.load(Ordering::Acquire);
    if handoff != 0 {
        // The signal thread removes the temporary files and ends the
        // process; this thread waits, and ends it itself after a minute if
        // it has not.
        BUS_REPORTED.store(true, Ordering::Release);
        // SAFETY: kill(2) and getpid(2) are async-signal-safe.
        unsafe { libc::kill(libc::getpid(), handoff) };
        wait_for_handoff();
    }
    // SAFETY: _exit(2) is async-signal-safe and ends the process at once.
    unsafe { libc::_exit(crate::error::exit::FAILURE) };
}

/// Sleeps up to a minute in steps (the handoff signal may interrupt one,
/// when delivered to this thread): the signal thread ends the process
/// first, once its sweep is done (a large scratch tree takes a while).
/// Async-signal-safe (nanosleep(2)).
fn wait_for_handoff() {
    let t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 50_000_000,
    };
    for _ in 0..1200 {
        // SAFETY: nanosleep(2) is async-signal-safe; `t` lives here.
        unsafe { libc::nanosleep(&t, std::ptr::null_mut()) };
    }
}

/// A path (a file or a directory tree) that a signal's sweep removes
/// while this guard lives (see [`remove_temps_on_signal`]): a work
/// directory or a staged output that is not an [`AtomicFile`]'s. Dropping
/// the guard only takes the path off the list.
pub struct RemovedOnSignal(PathBuf);

impl RemovedOnSignal {
    /// Lists `path` until the guard is dropped.
    pub fn new(path: impl Into<PathBuf>) -> RemovedOnSignal {
        let path = path.into();
        live_temps().push(path.clone());
        RemovedOnSignal(path)
    }
}

impl Drop for RemovedOnSignal {
    fn drop(&mut self) {
        forget_temp(&self.0);
    }
}

/// A scratch directory (tempfile's), removed when dropped and, in the CLI,
/// when a signal ends the process (see [`remove_temps_on_signal`]): an S3
/// store's cache of fetched objects, `compare`'s work directory. An
/// interrupted restore from a bucket left the whole lineage it had
/// fetched in the system's temporary directory.
pub struct ScratchDir {
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
}

impl ScratchDir {
    /// A fresh directory `<base>/<prefix>XXXXXX`.
    pub fn new_in(base: &Path, prefix: &str) -> std::io::Result<ScratchDir> {
        // Created while the list is held, as an `AtomicFile`'s temporary.
        let mut live = live_temps();
        let dir = tempfile::Builder::new().prefix(prefix).tempdir_in(base)?;
        let path = dir.path().to_path_buf();
        live.push(path.clone());
        Ok(ScratchDir {
            dir: Some(dir),
            path,
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the directory (no longer removed) and returns its path.
    pub fn keep(mut self) -> PathBuf {
        if let Some(d) = self.dir.take() {
            let _ = d.keep();
        }
        forget_temp(&self.path);
        self.path.clone()
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        drop(self.dir.take());
        forget_temp(&self.path);
    }
}

/// fsyncs a directory, so that a rename or unlink inside it is durable.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    let d = File::open(dir).ctx(dir, "open directory")?;
    d.sync_all().ctx(dir, "fsync directory")?;
    failpoint("fsync-dir");
    Ok(())
}

fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A file being written under a temporary name, published by [`commit`].
///
/// Dropping an `AtomicFile` without committing removes the temporary file, so
/// an error half way leaves nothing behind that could pass for a good file.
///
/// [`commit`]: AtomicFile::commit
pub struct AtomicFile {
    target: PathBuf,
    temp: PathBuf,
    writer: Option<BufWriter<File>>,
    /// Commit only where no file is ([`AtomicFile::keep_existing`]).
    keep_existing: bool,
}

impl AtomicFile {
    /// Starts writing `target` (created or replaced on commit).
    pub fn create(target: impl AsRef<Path>) -> Result<Self> {
        let target = target.as_ref().to_path_buf();
        let dir = parent_of(&target);
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "out".into());
        // The name shortened so that the temporary's stays within
        // NAME_MAX (255 bytes) beside the suffix: a legal name of 250
        // bytes failed as "File name too long" (helper-46).
        let mut cut = name.len().min(200);
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        let name = &name[..cut];
        let temp = dir.join(format!(
            ".{name}.tmp-{}-{}",
            std::process::id(),
            TEMP_COUNT.fetch_add(1, Ordering::Relaxed)
        ));
        // Created while the list is held, so that a signal's sweep either
        // sees the file or runs before it exists (and the process ends).
        let file = {
            let mut live = live_temps();
            let file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&temp)
                // Named after the output the user asked for, not the temporary.
                .ctx(&target, "create")?;
            live.push(temp.clone());
            file
        };
        failpoint("create");
        // The buffer's allocation would abort the process where memory is
        // exhausted (a librex job at its address-space limit, helper-50):
        // without room for it, writes go to the file unbuffered.
        const BUFFER: usize = 1 << 20;
        let room = Vec::<u8>::new().try_reserve_exact(BUFFER).is_ok();
        Ok(AtomicFile {
            target,
            temp,
            writer: Some(BufWriter::with_capacity(
                if room { BUFFER } else { 0 },
                file,
            )),
            keep_existing: false,
        })
    }

    /// The path the file will have once committed.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// The temporary file's path.
    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    /// The temporary file, with every buffered byte written to it: for
    /// positioned writes (`FileExt::write_all_at`) from several threads
    /// ([`write_pages_parallel`]).
    pub fn file(&mut self) -> Result<&File> {
        let w = self.writer.as_mut().expect("writer present until commit");
        w.flush().ctx(&self.target, "write")?;
        Ok(w.get_ref())
    }

    /// Writes all of `buf`.
    pub fn write_all(&mut self, buf: &[u8]) -> Result<()> {
        let w = self.writer.as_mut().expect("writer present until commit");
        w.write_all(buf).ctx(&self.target, "write")
    }

    /// Sets the file's length (flushing buffered bytes first); growing it
    /// leaves a hole, which reads as zeros.
    pub fn set_len(&mut self, len: u64) -> Result<()> {
        let w = self.writer.as_mut().expect("writer present until commit");
        w.flush().ctx(&self.target, "write")?;
        w.get_ref().set_len(len).ctx(&self.target, "set length")
    }

    /// Makes [`commit`](Self::commit) fail, leaving what is there, if a
    /// file of the target name exists by then (the caller checked it was
    /// absent before writing: this closes the window in between).
    pub fn keep_existing(&mut self) {
        self.keep_existing = true;
    }

    /// Flushes, fsyncs, renames to the target name and fsyncs the directory.
    /// If any step up to the rename fails (a full disk shows here, when the
    /// buffered bytes are flushed or fsynced), the temporary file is removed.
    pub fn commit(mut self) -> Result<()> {
        let w = self.writer.take().expect("writer present until commit");
        let publish = || -> Result<()> {
            let file = w
                .into_inner()
                .map_err(|e| e.into_error())
                .ctx(&self.target, "write")?;
            failpoint("write");
            file.sync_all().ctx(&self.target, "fsync")?;
            failpoint("fsync");
            drop(file);
            if self.keep_existing {
                // A link fails where any file is, atomically: a check made
                // before the write would let two writers of one new name
                // both succeed, the first file replaced by the second
                // (helper-84: two restores to one new `-o` both exited 0,
                // one file holding the other's state).
                let exists = || {
                    Error::Invalid(format!(
                        "{}: exists (written while this was being written); give --force (-f) to replace it",
                        self.target.display()
                    ))
                };
                match fs::hard_link(&self.temp, &self.target) {
                    Ok(()) => fs::remove_file(&self.temp).ctx(&self.temp, "remove"),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(exists()),
                    // A file system without hard links (EPERM, ENOTSUP):
                    // the check as close to the rename as it gets.
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EOPNOTSUPP)) => {
                        if fs::symlink_metadata(&self.target).is_ok() {
                            return Err(exists());
                        }
                        fs::rename(&self.temp, &self.target).ctx(&self.target, "rename")
                    }
                    Err(e) => Err(e).ctx(&self.target, "link"),
                }
            } else {
                fs::rename(&self.temp, &self.target).ctx(&self.target, "rename")
            }
        };
        let published = publish();
        if published.is_err() {
            let _ = fs::remove_file(&self.temp);
        }
        forget_temp(&self.temp);
        published?;
        failpoint("rename");
        fsync_dir(&parent_of(&self.target))
    }
}

impl AtomicFile {
    /// Moves the write position, writing what is buffered first, so that a
    /// write failing there (a full disk) is said as a write of the
    /// temporary file, not as the seek (helper-81: "seek: No space left on
    /// device").
    pub fn seek_after_writing(&mut self, pos: SeekFrom) -> Result<u64> {
        let target = self.target.clone();
        self.flush().ctx(&target, "write")?;
        self.seek(pos).ctx(&target, "seek")
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.writer
            .as_mut()
            .expect("writer present until commit")
            .write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.writer
            .as_mut()
            .expect("writer present until commit")
            .flush()
    }
}

impl Seek for AtomicFile {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.writer
            .as_mut()
            .expect("writer present until commit")
            .seek(pos)
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.writer.is_some() {
            self.writer = None;
            let _ = fs::remove_file(&self.temp);
            forget_temp(&self.temp);
        }
    }
}

/// One piece of a file streamed to another place while it is written (see
/// [`Mirror`]).
#[derive(Debug)]
pub enum Piece {
    /// The next bytes of the file.
    Data(Vec<u8>),
    /// The end of the file: these bytes replace its first `len()` bytes
    /// (a header written last, over placeholders streamed first).
    End(Vec<u8>),
}

/// The bytes of a file being written, streamed in order through a bounded
/// channel to a reader that stores them elsewhere at the same time (a
/// push's L2 upload running beside the Deduplication Unit, so that the
/// push takes the longer of the two rather than their sum).
///
/// Bytes go out in pieces of [`Mirror::PIECE`], and [`Mirror::end`] sends
/// the file's final first bytes. A mirror dropped without `end` closes the
/// channel: the reader sees the stream stop before its end and must
/// publish nothing. The channel's bound is the memory the copy may hold
/// and the writer's back-pressure: a slow reader slows the writer.
pub struct Mirror {
    tx: std::sync::mpsc::SyncSender<Piece>,
    buf: Vec<u8>,
    what: PathBuf,
}

/// The operation named by the error a [`Mirror`] returns when its reader
/// stopped (whose own error says why).
pub const MIRROR_STOPPED: &str = "stream a copy";

impl Mirror {
    /// Bytes per piece sent.
    pub const PIECE: usize = 1 << 20;

    /// A mirror of the file `what` (named in errors) and the reader's end,
    /// with at most `depth` pieces in the channel.
    pub fn channel(
        what: impl AsRef<Path>,
        depth: usize,
    ) -> (Mirror, std::sync::mpsc::Receiver<Piece>) {
        let (tx, rx) = std::sync::mpsc::sync_channel(depth);
        let m = Mirror {
            tx,
            buf: Vec::with_capacity(Self::PIECE),
            what: what.as_ref().to_path_buf(),
        };
        (m, rx)
    }

    fn send(&self, p: Piece) -> Result<()> {
        self.tx.send(p).map_err(|_| {
            Error::io(
                &self.what,
                MIRROR_STOPPED,
                std::io::Error::other("the copy's reader stopped"),
            )
        })
    }

    /// Appends `bytes`.
    pub fn write(&mut self, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            let n = (Self::PIECE - self.buf.len()).min(bytes.len());
            self.buf.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.buf.len() == Self::PIECE {
                let full = std::mem::replace(&mut self.buf, Vec::with_capacity(Self::PIECE));
                self.send(Piece::Data(full))?;
            }
        }
        Ok(())
    }

    /// Ends the stream: `head` replaces the first `head.len()` bytes.
    pub fn end(mut self, head: &[u8]) -> Result<()> {
        if !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            self.send(Piece::Data(rest))?;
        }
        self.send(Piece::End(head.to_vec()))
    }
}

/// Writes `bytes` to `target` atomically and durably.
pub fn write_file(target: impl AsRef<Path>, bytes: &[u8]) -> Result<()> {
    let mut f = AtomicFile::create(target)?;
    f.write_all(bytes)?;
    f.commit()
}

/// Removes a file and fsyncs its directory; a file already gone is fine.
pub fn remove_file(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(crate::Error::io(path, "remove", e)),
    }
    failpoint("remove");
    fsync_dir(&parent_of(path))
}

/// Whether a directory entry name is one of [`AtomicFile`]'s temporaries.
pub fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.contains(".tmp-")
}

/// Whether the temporary `name` may be a live writer's: its name carries
/// the pid of its writer (`.<name>.tmp-<pid>-<n>`, the form FORMAT.md
/// §2.7 shows a producer), and that process runs in this pid namespace
/// and is not this one. A third-party producer that does not take the producer lock
/// lost the file it was writing to a push's recovery (helper-96); a name
/// with no pid, or the pid of a process gone, is a crashed writer's. This
/// process's own pid counts as gone: callers clean up before they write,
/// and a job restarted in a container often gets its predecessor's pid.
fn may_be_live(name: &str) -> bool {
    let Some((_, after)) = name.split_once(".tmp-") else {
        return false;
    };
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    let Ok(pid) = digits.parse::<libc::pid_t>() else {
        return false;
    };
    if pid <= 0 || pid == std::process::id() as libc::pid_t {
        return false;
    }
    process_exists(pid)
}

/// Whether a process `pid` runs in this pid namespace (one of another
/// user too). A thread's id is not a process: `kill(2)` accepts thread
/// ids, so a recorded writer's pid reused by a thread of another process
/// would count as alive (helper-97); `/proc/PID/status` tells them apart
/// (its `Tgid` is the process's id), where /proc is readable.
pub fn process_exists(pid: libc::pid_t) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill(2) with signal 0 sends nothing: it only checks that
    // the process exists (EPERM: it exists, owned by another user).
    let r = unsafe { libc::kill(pid, 0) };
    if r != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EPERM) {
        return false;
    }
    match fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(status) => status
            .lines()
            .find_map(|l| l.strip_prefix("Tgid:"))
            .is_none_or(|tgid| tgid.trim().parse::<libc::pid_t>() == Ok(pid)),
        // /proc not mounted, or the process gone since: kill's answer.
        Err(_) => true,
    }
}

/// Removes temporary files left in `dir` by writers that crashed. Call it
/// only while holding the directory's lock (or when no writer can run).
pub fn remove_stale_temps(dir: &Path) -> Result<usize> {
    remove_temps(dir, false)
}

/// [`remove_stale_temps`] for an L1 directory that producers other than
/// rexctl's may write without its producer lock: a temporary whose name
/// carries the pid of another live process (in this pid namespace) stays.
/// Only there: everywhere else only rexctl writes, under the lock, and a
/// pid alive for another reason (pid 1 in a container, a reused pid) would
/// keep a crashed writer's file for ever.
pub fn remove_stale_temps_sparing_live(dir: &Path) -> Result<usize> {
    remove_temps(dir, true)
}

fn remove_temps(dir: &Path, spare_live: bool) -> Result<usize> {
    let mut removed = 0;
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(crate::Error::io(dir, "read directory", e)),
    };
    for entry in entries {
        let entry = entry.ctx(dir, "read directory")?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if is_temp_name(&name) && !(spare_live && may_be_live(&name)) {
            let p = entry.path();
            fs::remove_file(&p).ctx(&p, "remove")?;
            removed += 1;
        }
    }
    if removed > 0 {
        fsync_dir(dir)?;
    }
    Ok(removed)
}

/// The default of the `threads` setting: the cores this process may run
/// on.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Bytes per block of [`write_pages_parallel`]: 64 pages of 4 KiB, large
/// enough for one `pwrite` to run at memory speed, small enough that the
/// blocks spread evenly over the threads.
const BLOCK_BYTES: usize = 256 << 10;

/// Pages per block: [`BLOCK_BYTES`] of them, at least one. (A block of 64
/// pages whatever their size took 64 MiB per thread for pages of 1 MiB,
/// and aborted the process for a one-page image under a memory limit:
/// helper-86.)
fn block_pages(page_size: usize) -> usize {
    (BLOCK_BYTES / page_size.max(1)).max(1)
}

/// Writes `n` pages of `page_size` bytes into `file` (at `path`, for
/// messages) on `threads` threads: page `k` is made by `fill(k, buf)`,
/// which returns its CRC-32, and written at `offset(k)`. Threads take
/// stripes of consecutive blocks from a shared counter, fill each block of
/// consecutive pages into one buffer and write each run of adjacent pages
/// with one positioned write, so the output is written by every core at
/// once with no ordering between them. `fill` is called at most once per
/// page (a restore gives a chunk's memory back after its last page on
/// that). Returns the CRCs in page order, or the error of the lowest
/// failing block (the first a sequential writer would have met).
///
/// One thread writes at a time: the kernel serialises writes to a file on
/// its inode's lock anyway, and a thread waiting there spins (perf of a
/// restore to tmpfs on two cores: 7-19 % of the CPU in
/// `rwsem_spin_on_owner`). A thread that finds another writing queues its
/// block (a few MiB at most) and goes on filling the next one; the writing
/// thread writes what was queued before it lets go, and whatever is still
/// queued at the end is written before this returns.
pub fn write_pages_parallel(
    file: &File,
    path: &Path,
    n: usize,
    page_size: usize,
    threads: usize,
    offset: &(dyn Fn(usize) -> u64 + Sync),
    fill: &(dyn Fn(usize, &mut [u8]) -> Result<u32> + Sync),
) -> Result<Vec<u32>> {
    use std::os::unix::fs::FileExt;
    // Each run of adjacent pages of a block with one positioned write.
    let write_block = |first: usize, pages: usize, buf: &[u8]| -> Result<()> {
        let end = first + pages;
        let mut run = first;
        for k in first..end {
            let adjacent = k + 1 < end && offset(k + 1) == offset(k) + page_size as u64;
            if !adjacent {
                let (from, to) = ((run - first) * page_size, (k + 1 - first) * page_size);
                file.write_all_at(&buf[from..to], offset(run))
                    .ctx(path, "write")?;
                run = k + 1;
            }
        }
        Ok(())
    };
    let writer = OneWriter::new(
        (QUEUE_BYTES / (block_pages(page_size) * page_size).max(1)).min(4 * threads),
        &write_block,
    );
    let crcs = fill_blocks(n, page_size, threads, fill, &|first, crcs, buf| {
        writer.put(first, crcs.len(), buf)
    })?;
    writer.finish()?;
    Ok(crcs)
}

/// Writes blocks of pages from several threads, one thread at a time (see
/// [`write_pages_parallel`]): `write(first, pages, bytes)` writes a block.
struct OneWriter<'a> {
    /// Held by the thread writing.
    token: Mutex<()>,
    /// Blocks waiting for the writing thread: (first page, pages, bytes).
    queued: Mutex<Vec<(usize, usize, Vec<u8>)>>,
    /// Buffers of blocks written, for the threads that queued theirs.
    spare: Mutex<Vec<Vec<u8>>>,
    max_queued: usize,
    write: &'a WriteBlock<'a>,
}

/// How [`OneWriter`] writes a block: `(first page, pages, bytes)`.
type WriteBlock<'a> = dyn Fn(usize, usize, &[u8]) -> Result<()> + Sync + 'a;

impl<'a> OneWriter<'a> {
    fn new(max_queued: usize, write: &'a WriteBlock<'a>) -> OneWriter<'a> {
        OneWriter {
            token: Mutex::new(()),
            queued: Mutex::new(Vec::new()),
            spare: Mutex::new(Vec::new()),
            max_queued,
            write,
        }
    }

    /// Writes the block in `buf` now, with whatever is queued, if no other
    /// thread is writing; else queues it (taking the buffer and leaving a
    /// spare one) while the queue has room, or waits for its turn.
    fn put(&self, first: usize, pages: usize, buf: &mut Vec<u8>) -> Result<()> {
        if let Ok(_writing) = self.token.try_lock() {
            (self.write)(first, pages, buf)?;
            return self.drain();
        }
        {
            let mut q = unpoisoned(&self.queued);
            if q.len() < self.max_queued {
                let next = unpoisoned(&self.spare).pop().unwrap_or_default();
                q.push((first, pages, std::mem::replace(buf, next)));
                return Ok(());
            }
        }
        let _writing = unpoisoned(&self.token);
        (self.write)(first, pages, buf)?;
        self.drain()
    }

    /// Writes what is queued; the caller holds the token (or is the only
    /// thread left).
    fn drain(&self) -> Result<()> {
        loop {
            let Some((first, pages, buf)) = unpoisoned(&self.queued).pop() else {
                return Ok(());
            };
            (self.write)(first, pages, &buf)?;
            unpoisoned(&self.spare).push(buf);
        }
    }

    /// Writes the blocks queued after the last writer's drain: call once
    /// every [`put`](Self::put) has returned.
    fn finish(self) -> Result<()> {
        self.drain()
    }
}

/// The most bytes of filled blocks [`write_pages_parallel`] queues for the
/// writing thread.
const QUEUE_BYTES: usize = 4 << 20;

/// The guard of `m`, poisoned or not (what it guards stays consistent:
/// every change under it is a single push or pop).
fn unpoisoned<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where [`fill_pages_parallel`] hands a block: `(first, crcs, pages)`.
pub type PutBlock<'a> = dyn Fn(usize, &[u32], &[u8]) -> Result<()> + Sync + 'a;

/// The engine of [`write_pages_parallel`], for any destination: page `k`
/// is made by `fill(k, buf)`, which returns its CRC-32, and each block of
/// consecutive pages filled is handed to `put(first, crcs, pages)` (the
/// block's first page, its pages' CRCs and bytes), on the thread that
/// filled it. Threads take stripes of consecutive blocks from a shared
/// counter. Returns the CRCs in page order, or the error of the lowest
/// failing block (the first a sequential writer would have met).
pub fn fill_pages_parallel(
    n: usize,
    page_size: usize,
    threads: usize,
    fill: &(dyn Fn(usize, &mut [u8]) -> Result<u32> + Sync),
    put: &PutBlock<'_>,
) -> Result<Vec<u32>> {
    fill_blocks(n, page_size, threads, fill, &|first, crcs, buf| {
        put(first, crcs, &buf[..crcs.len() * page_size])
    })
}

/// Where [`fill_blocks`] hands a block: `(first, crcs, buffer)`, the
/// block's pages at the buffer's start. The buffer is the thread's, to
/// keep or to swap for another (it is resized before the next block).
type PutOwned<'a> = dyn Fn(usize, &[u32], &mut Vec<u8>) -> Result<()> + Sync + 'a;

/// [`fill_pages_parallel`], handing each block's buffer over mutably.
fn fill_blocks(
    n: usize,
    page_size: usize,
    threads: usize,
    fill: &(dyn Fn(usize, &mut [u8]) -> Result<u32> + Sync),
    put: &PutOwned<'_>,
) -> Result<Vec<u32>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let per_block = block_pages(page_size);
    let blocks = n.div_ceil(per_block);
    let threads = threads.clamp(1, blocks.max(1));
    let next = AtomicUsize::new(0);
    // The lowest block that failed so far: blocks above it stop, blocks
    // below it still run, so the error returned is the one a sequential
    // writer would have met first, whatever the threads' timing.
    let first_failed = AtomicUsize::new(usize::MAX);
    /// What one thread did: the CRCs of its blocks, and the block that
    /// failed, if one did.
    type Done = (Vec<(usize, Vec<u32>)>, Option<(usize, Error)>);
    // Threads claim stripes of consecutive blocks, not single blocks: a
    // thread then works through one region of the image while another works
    // through another, and the lazily decoded chunks they need are mostly
    // not the same ones (interleaved blocks would wait on each other's
    // chunks). Four stripes per thread keep the load even.
    let stripes = blocks.min(threads * 4).max(1);
    let stripe = |s: usize| s * blocks / stripes..(s + 1) * blocks / stripes;
    let work = || -> Done {
        let mut buf = Vec::new();
        let mut done = Vec::new();
        let mut mine = 0..0;
        loop {
            let b = match mine.next() {
                Some(b) => b,
                None => {
                    let s = next.fetch_add(1, Ordering::Relaxed);
                    if s >= stripes {
                        return (done, None);
                    }
                    mine = stripe(s);
                    continue;
                }
            };
            if b > first_failed.load(Ordering::Relaxed) {
                // Stripes are handed out in order: every later block is
                // above the failure too.
                return (done, None);
            }
            let (first, end) = (b * per_block, ((b + 1) * per_block).min(n));
            let mut crcs = Vec::with_capacity(end - first);
            let r = (|| -> Result<()> {
                // The block's bytes, or an error: never an abort where
                // memory is short.
                let need = (end - first) * page_size;
                if buf.len() < need {
                    buf.try_reserve_exact(need - buf.len()).map_err(|_| {
                        Error::Invalid(format!(
                            "cannot allocate {need} bytes for a block of {} pages",
                            end - first
                        ))
                    })?;
                    buf.resize(need, 0);
                }
                for k in first..end {
                    let at = (k - first) * page_size;
                    crcs.push(fill(k, &mut buf[at..at + page_size])?);
                }
                put(first, &crcs, &mut buf)
            })();
            match r {
                Ok(()) => done.push((b, crcs)),
                Err(e) => {
                    first_failed.fetch_min(b, Ordering::Relaxed);
                    return (done, Some((b, e)));
                }
            }
        }
    };
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
        let mut all = vec![work()];
        for h in handles {
            all.push(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        all
    });
    let mut per_block: Vec<Option<Vec<u32>>> = (0..blocks).map(|_| None).collect();
    let mut first_error: Option<(usize, Error)> = None;
    for (done, err) in results {
        for (b, c) in done {
            per_block[b] = Some(c);
        }
        if let Some((b, e)) = err
            && first_error.as_ref().is_none_or(|(fb, _)| b < *fb)
        {
            first_error = Some((b, e));
        }
    }
    if let Some((_, e)) = first_error {
        return Err(e);
    }
    Ok(per_block
        .into_iter()
        .flat_map(|c| c.expect("every block done when none failed"))
        .collect())
}

/// Blocks in the calling thread every asynchronous signal: all but the
/// faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS) and SIGABRT,
/// which are the thread's own. For the threads the library starts that
/// outlive the call that started them (librex's writer, L2 and fault
/// threads, an S3 store's runtime): a signal sent to the process then goes
/// to one of the program's threads, as it would without them, even one the
/// program blocks after they started, to collect with `sigwait` or
/// `signalfd` (helper-57: its default action killed a librex job from one
/// of those threads). Threads they start inherit the mask. Returns the
/// mask before.
pub fn block_async_signals() -> libc::sigset_t {
    // SAFETY: sigset_t values initialised by sigfillset and by
    // pthread_sigmask before use; pthread_sigmask changes only the calling
    // thread's mask.
    unsafe {
        let mut quiet: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut quiet);
        for s in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGTRAP,
            libc::SIGSYS,
            libc::SIGABRT,
        ] {
            libc::sigdelset(&mut quiet, s);
        }
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &quiet, &mut old);
        old
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread's id is not a live process (kill(2) accepts it), this
    /// process is, an exited child is not.
    #[test]
    fn a_thread_id_is_not_a_process() {
        let me = std::process::id() as libc::pid_t;
        assert!(process_exists(me));
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() }).unwrap();
            done_rx.recv().unwrap();
        });
        let tid = rx.recv().unwrap();
        assert_ne!(tid, me);
        // SAFETY: signal 0 sends nothing.
        assert_eq!(
            unsafe { libc::kill(tid, 0) },
            0,
            "kill(2) takes a thread id"
        );
        assert!(!process_exists(tid), "thread {tid} taken for a process");
        assert!(!may_be_live(&format!(".ckpt.tmp-{tid}-1")));
        done_tx.send(()).unwrap();
        t.join().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as libc::pid_t;
        child.wait().unwrap();
        assert!(!process_exists(pid));
        assert!(!process_exists(0) && !process_exists(-1));
    }

    /// A block queued while another thread writes, after that thread's
    /// last look at the queue, is written by `finish`; one queued with no
    /// room left waits for the token and is written by its own thread.
    #[test]
    fn a_block_queued_after_the_writer_s_last_drain_is_written() {
        let written = Mutex::new(Vec::new());
        let write = |first: usize, pages: usize, buf: &[u8]| -> Result<()> {
            unpoisoned(&written).push((first, pages, buf[0]));
            Ok(())
        };
        let w = OneWriter::new(1, &write);
        let writing = w.token.lock().unwrap();
        std::thread::scope(|s| {
            s.spawn(|| w.put(0, 64, &mut vec![7u8; 8]))
                .join()
                .unwrap()
                .unwrap();
        });
        assert!(unpoisoned(&written).is_empty(), "queued, not written");
        drop(writing);
        w.put(64, 3, &mut vec![9u8; 8]).unwrap();
        // The second put wrote its block and drained the first.
        assert_eq!(*unpoisoned(&written), vec![(64, 3, 9), (0, 64, 7)]);
        let writing = w.token.lock().unwrap();
        std::thread::scope(|s| {
            s.spawn(|| w.put(128, 64, &mut vec![1u8; 8]))
                .join()
                .unwrap()
                .unwrap();
        });
        drop(writing);
        w.finish().unwrap();
        assert_eq!(unpoisoned(&written).last(), Some(&(128, 64, 1)));
    }

    /// Pages written by several threads, one writing at a time while the
    /// others queue their blocks, land where their offsets say, with their
    /// CRCs in page order; holes between runs stay holes; and a failing
    /// page gives the error of the lowest failing block whatever the
    /// threads' timing.
    #[test]
    fn pages_written_in_parallel_land_at_their_offsets_and_fail_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let ps = 4096;
        let page =
            |k: usize| -> Vec<u8> { (0..ps).map(|i| (k * 31 + i * 7 + (k >> 3)) as u8).collect() };
        for (n, threads, gap_every) in [
            (64 * 100, 4, 0),
            (64 * 100, 3, 0),
            (0, 2, 0),
            (1, 2, 0),
            (63, 3, 0),
            (64 * 37 + 5, 2, 0),
            (64 * 37 + 5, 4, 0),
            (64 * 37 + 5, 3, 5),
            (3000, 1, 7),
        ] {
            let path = dir.path().join(format!("out-{n}-{threads}-{gap_every}"));
            let file = File::create(&path).unwrap();
            // A hole of one page after every `gap_every` pages.
            let slot = |k: usize| k + k.checked_div(gap_every).unwrap_or(0);
            let offset = |k: usize| (slot(k) * ps) as u64;
            let crcs = write_pages_parallel(&file, &path, n, ps, threads, &offset, &|k, buf| {
                if k % 97 == 0 {
                    std::thread::yield_now();
                }
                buf.copy_from_slice(&page(k));
                Ok(crc32fast::hash(buf))
            })
            .unwrap();
            let want: Vec<u32> = (0..n).map(|k| crc32fast::hash(&page(k))).collect();
            assert_eq!(crcs, want, "{n} pages, {threads} threads");
            let got = fs::read(&path).unwrap();
            let len = if n == 0 { 0 } else { (slot(n - 1) + 1) * ps };
            assert_eq!(got.len(), len, "{n} pages, {threads} threads");
            let mut expect = vec![0u8; len];
            for k in 0..n {
                expect[slot(k) * ps..(slot(k) + 1) * ps].copy_from_slice(&page(k));
            }
            assert!(
                got == expect,
                "{n} pages, {threads} threads: contents differ"
            );
        }
        for round in 0..20 {
            let path = dir.path().join(format!("fail-{round}"));
            let file = File::create(&path).unwrap();
            let bad = [64 * 20 + 3 + round, 64 * 9 + round, 64 * 30];
            let e = write_pages_parallel(
                &file,
                &path,
                64 * 40,
                ps,
                3,
                &|k| (k * ps) as u64,
                &|k, buf| {
                    if bad.contains(&k) {
                        return Err(Error::Invalid(format!("page {k}")));
                    }
                    buf.fill(k as u8);
                    Ok(0)
                },
            )
            .unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("page {}", 64 * 9 + round),
                "round {round}"
            );
        }
    }

    /// A commit that fails after the writer is flushed (here the rename,
    /// onto a non-empty directory; a full disk fails the flush or fsync the
    /// same way) leaves no temporary file behind.
    #[test]
    fn failed_commit_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("keep"), b"x").unwrap();
        let mut f = AtomicFile::create(&target).unwrap();
        f.write_all(&[7u8; 4096]).unwrap();
        let temp = f.temp_path().to_path_buf();
        assert!(f.commit().is_err());
        assert!(!temp.exists(), "{} leaked", temp.display());
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("out")]);
    }

    /// A file that appears under the target's name while a file that keeps
    /// existing ones is written stays as it is: the commit fails, naming
    /// it, and leaves no temporary file; with no such file, the commit
    /// publishes (helper-84: two `restore -o NEW` at once both exited 0, the
    /// first output replaced by the second, a restore's report naming a
    /// seq its file did not hold).
    #[test]
    fn a_file_that_keeps_existing_ones_never_replaces_one_that_appeared() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("image");
        let mut f = AtomicFile::create(&target).unwrap();
        f.keep_existing();
        f.write_all(&[1u8; 8192]).unwrap();
        let temp = f.temp_path().to_path_buf();
        fs::write(&target, b"the other writer's").unwrap();
        let e = f.commit().unwrap_err().to_string();
        assert!(e.contains("exists") && e.contains("image"), "{e}");
        assert_eq!(fs::read(&target).unwrap(), b"the other writer's");
        assert!(!temp.exists(), "{} leaked", temp.display());
        let mut f = AtomicFile::create(dir.path().join("new")).unwrap();
        f.keep_existing();
        f.write_all(b"mine").unwrap();
        f.commit().unwrap();
        assert_eq!(fs::read(dir.path().join("new")).unwrap(), b"mine");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    /// A file of the longest legal name (255 bytes, multi-byte
    /// characters at the cut) is written: its temporary's name is shortened.
    #[test]
    fn the_longest_names_are_written() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["x".repeat(255), format!("{}{}", "a", "é".repeat(127))] {
            let target = dir.path().join(&name);
            let mut f = AtomicFile::create(&target).unwrap();
            assert!(is_temp_name(
                &f.temp_path().file_name().unwrap().to_string_lossy()
            ));
            f.write_all(b"ok").unwrap();
            f.commit().unwrap();
            assert_eq!(fs::read(&target).unwrap(), b"ok");
        }
    }

    #[test]
    fn commit_publishes_and_drop_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("a.bin");
        let mut f = AtomicFile::create(&target).unwrap();
        f.write_all(b"hello").unwrap();
        assert!(!target.exists());
        let temp = f.temp_path().to_path_buf();
        f.commit().unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"hello");
        assert!(!temp.exists());

        let mut g = AtomicFile::create(&target).unwrap();
        g.write_all(b"partial").unwrap();
        let temp = g.temp_path().to_path_buf();
        drop(g);
        assert!(!temp.exists());
        assert_eq!(fs::read(&target).unwrap(), b"hello");
    }

    #[test]
    fn stale_temps_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        // A process that has ended: its pid names no process (until the
        // kernel hands it out again, which takes a whole cycle of pids).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        fs::write(dir.path().join(format!(".x.rexic.tmp-{gone}-2")), b"junk").unwrap();
        fs::write(dir.path().join(".y.rexic.tmp-nopid"), b"junk").unwrap();
        let me = std::process::id();
        fs::write(dir.path().join(format!(".z.rexic.tmp-{me}-0")), b"mine").unwrap();
        fs::write(dir.path().join("keep.rexic"), b"x").unwrap();
        // Another live process's (pid 1 runs as long as the system does):
        // a producer writing it now.
        fs::write(dir.path().join(".w.rexic.tmp-1-0"), b"live").unwrap();
        assert_eq!(remove_stale_temps_sparing_live(dir.path()).unwrap(), 3);
        assert!(dir.path().join("keep.rexic").exists());
        assert!(dir.path().join(".w.rexic.tmp-1-0").exists());
        // Where only rexctl writes, under the lock, every one goes.
        assert_eq!(remove_stale_temps(dir.path()).unwrap(), 1);
        assert!(!dir.path().join(".w.rexic.tmp-1-0").exists());
    }
}
