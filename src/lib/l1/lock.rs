//! The job lock: one rexctl at a time pushes from an L1 directory.
//!
//! The lock is a `flock(2)` on `L1/.rex.lock`, taken without waiting. The
//! kernel releases it when its holder dies, however it dies, so a lock left
//! by a crashed process is never stale: the next taker simply gets it. The
//! file's contents (pid, host, start time, command) only say who holds it,
//! for the "busy" message; they are rewritten by each holder.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};

/// Name of the lock file inside the L1 directory.
pub const LOCK_NAME: &str = ".rex.lock";
/// Name of the producer lock inside the L1 directory: held for its whole
/// life by a job that checkpoints itself through librex, so that two
/// processes never write one L1 directory, and so that recovery leaves the
/// temporary files of a live producer alone.
pub const PRODUCER_LOCK_NAME: &str = ".rex.producer.lock";
/// What a push's recovery names itself as while it holds the producer
/// lock.
const RECOVERY: &str = "recovery";
/// How long a starting producer waits for a push's recovery to release the
/// producer lock.
pub const RECOVERY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A held job lock; released on drop (or by the kernel at exit).
#[derive(Debug)]
pub struct JobLock {
    file: File,
    path: PathBuf,
}

impl JobLock {
    /// Takes the lock of the L1 directory `l1` without waiting, or returns
    /// [`Error::Busy`] naming the holder.
    pub fn acquire(l1: &Path, what: &str) -> Result<JobLock> {
        Self::acquire_named(l1, LOCK_NAME, what)
    }

    /// Takes the producer lock of the L1 directory `l1`
    /// ([`PRODUCER_LOCK_NAME`]) for a producer (a librex job, a capture).
    /// A push's recovery holds it for the few milliseconds it takes to
    /// remove stale temporaries ([`JobLock::for_recovery`]): a producer
    /// starting then waits for it (up to [`RECOVERY_WAIT`]) instead of
    /// failing as if a second producer ran; another producer's hold is
    /// refused at once.
    pub fn acquire_producer(l1: &Path, what: &str) -> Result<JobLock> {
        let start = std::time::Instant::now();
        let by_recovery = format!("({RECOVERY})");
        loop {
            match Self::acquire_named(l1, PRODUCER_LOCK_NAME, what) {
                // A holder whose recorded process is dead is one that has
                // just taken the lock (a recovery) and not yet written its
                // name over a killed producer's.
                Err(Error::Busy { holder, .. })
                    if (holder.ends_with(&by_recovery) || recorded_holder_is_dead(&holder))
                        && start.elapsed() < RECOVERY_WAIT =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                r => return r,
            }
        }
    }

    /// The producer lock of `l1` for a push's recovery, if no producer
    /// holds it (without waiting; any failure to take it counts as a live
    /// producer, whose temporaries then stay).
    pub fn for_recovery(l1: &Path) -> Option<JobLock> {
        Self::acquire_named(l1, PRODUCER_LOCK_NAME, RECOVERY).ok()
    }

    /// Who holds the producer lock of `l1` (a live librex job), if anyone;
    /// creates nothing (a read-only probe with a shared lock).
    pub fn producer_holder(l1: &Path) -> Option<String> {
        let path = l1.join(PRODUCER_LOCK_NAME);
        let mut file = File::open(&path).ok()?;
        // SAFETY: flock on a descriptor owned by `file`; no memory-safety
        // preconditions.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
        if rc == 0 {
            // SAFETY: as above, releasing the probe.
            unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
            return None;
        }
        let mut holder = String::new();
        let _ = file.read_to_string(&mut holder);
        Some(if holder.trim().is_empty() {
            "a live process".into()
        } else {
            holder.trim().to_string()
        })
    }

    fn acquire_named(l1: &Path, name: &str, what: &str) -> Result<JobLock> {
        let path = l1.join(name);
        let mut file = open_lock_file(&path, true)?;
        // A holder writes its name just after taking the lock and clears it
        // just before releasing it; in those instants the name is empty.
        // Rather than report an anonymous holder, look again (and try the
        // lock again) for up to 200 ms.
        let (mut tries, mut shared_seen) = (0, 0);
        loop {
            // SAFETY: `flock` is called on a file descriptor owned by
            // `file`, which outlives the call; it has no memory-safety
            // preconditions.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc == 0 {
                break;
            }
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(Error::io(&path, "flock", err));
            }
            // Held shared: by restores, whatever name a dead push left in
            // the file (helper-47: the busy message named it). Only the job
            // lock: the producer lock's shared holds are a probe's instant
            // (`producer_holder`), after which it is taken. Seen three
            // times, 5 ms apart, so that a lock just let go of is taken.
            if name == LOCK_NAME && held_shared(&file) {
                shared_seen += 1;
                if shared_seen >= 3 {
                    return Err(Error::Busy {
                        holder: "held by a restore, a verify or a restart reading this directory"
                            .into(),
                        path,
                    });
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
                continue;
            }
            let mut holder = String::new();
            let _ = file.seek(SeekFrom::Start(0));
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            tries += 1;
            if !holder.is_empty() || tries >= 40 {
                return Err(Error::Busy {
                    holder: if holder.is_empty() {
                        "held by another process".into()
                    } else {
                        format!("held by {holder}")
                    },
                    path,
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let info = format!(
            "pid {} on {} since {} ({what})\n",
            std::process::id(),
            host.trim(),
            humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        );
        file.set_len(0).ctx(&path, "truncate lock file")?;
        file.seek(SeekFrom::Start(0)).ctx(&path, "seek lock file")?;
        write_holder(&mut file, &path, &info)?;
        let lock = JobLock { file, path };
        lock.not_in_forked_children();
        Ok(lock)
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Takes the lock of the L1 directory `l1` shared, for a restore that
    /// reads its pending checkpoints: waits while a push (`push-l2`,
    /// `flush`, `gc`, a librex job's background push) holds it, and keeps
    /// them out until dropped. A push commits a generation, then deletes
    /// the checkpoints it coalesced: a restore that read the chain before
    /// the commit and listed L1 after the deletion had neither, and gave
    /// an older state with success (helper-45). Restores share it. `None`
    /// when there is no lock file and none can be made (a read-only L1,
    /// where nothing pushes either, or no L1 directory: the restore says
    /// so), or the file system has no `flock` (nor can a push take it).
    /// `on_wait` is called once, with the holder, if it has to wait.
    pub fn shared(l1: &Path, on_wait: impl FnOnce(&str)) -> Result<Option<SharedLock>> {
        let path = l1.join(LOCK_NAME);
        let file = match open_lock_file(&path, true) {
            Ok(f) => f,
            Err(_) => match open_lock_file(&path, false) {
                Ok(f) => f,
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                    return Ok(None);
                }
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::PermissionDenied =>
                {
                    return Err(Error::io(
                        &path,
                        "open lock file, which a restore from L1 holds while it reads so that no push deletes what it reads (give read access to it, or restore with --l2-only)",
                        source,
                    ));
                }
                Err(e) => return Err(e),
            },
        };
        let mut on_wait = Some(on_wait);
        let mut how = libc::LOCK_SH | libc::LOCK_NB;
        loop {
            // SAFETY: `flock` on a descriptor owned by `file`, which
            // outlives the call; no memory-safety preconditions.
            let rc = unsafe { libc::flock(file.as_raw_fd(), how) };
            if rc == 0 {
                return Ok(Some(SharedLock { _file: file }));
            }
            let err = std::io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EWOULDBLOCK | libc::EINTR) => {}
                // No `flock` here: no push can hold it either.
                Some(libc::ENOLCK | libc::ENOSYS | libc::EOPNOTSUPP) => return Ok(None),
                _ => return Err(Error::io(&path, "flock", err)),
            }
            if let Some(f) = on_wait.take() {
                let mut holder = String::new();
                let _ = (&file).read_to_string(&mut holder);
                let holder = holder.trim();
                f(if holder.is_empty() {
                    "another process"
                } else {
                    holder
                });
            }
            // Then a blocking wait: the kernel hands the lock over when the
            // push lets go, where polling lost every time to a job whose
            // background flush takes it again at once (helper-47: a
            // restore waited for the job's whole life). The CLI's signal
            // thread still ends the process on Ctrl-C.
            how = libc::LOCK_SH;
        }
    }
}

/// Opens the lock file `path` (`write`: for writing, made if missing),
/// never through a symbolic link, and only a regular file: a holder
/// truncates and writes it, which through a link planted in a shared
/// directory would empty any file its user may write (helper-46: a
/// link to /etc/passwd emptied it).
pub fn open_lock_file(path: &Path, write: bool) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = OpenOptions::new()
        .read(true)
        .write(write)
        .create(write)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                Error::io(
                    path,
                    "open lock file: a symbolic link is there, remove it",
                    e,
                )
            } else {
                Error::io(path, "open lock file", e)
            }
        })?;
    let meta = file.metadata().ctx(path, "stat lock file")?;
    if !meta.is_file() {
        return Err(Error::io(
            path,
            "open lock file",
            std::io::Error::other(format!(
                "{} is there, not a regular file: remove it",
                crate::store::file_kind(&meta.file_type())
            )),
        ));
    }
    Ok(file)
}

/// A shared hold of an L1 directory's job lock ([`JobLock::shared`]);
/// released on drop.
#[derive(Debug)]
pub struct SharedLock {
    _file: File,
}

/// Whether the lock `file` is held only shared (by restores): a shared
/// hold of our own is granted then, and given back at once.
fn held_shared(file: &File) -> bool {
    // SAFETY: `flock` on a descriptor owned by `file`; no memory-safety
    // preconditions.
    let got = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0;
    if got {
        // SAFETY: as above, giving back the hold just taken.
        unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
    }
    got
}

/// Whether a lock file's text (`held by pid N on HOST since ...`) names a
/// process of this host that no longer exists.
fn recorded_holder_is_dead(holder: &str) -> bool {
    let Some(rest) = holder.strip_prefix("held by pid ") else {
        return false;
    };
    let mut words = rest.split_whitespace();
    let (Some(pid), Some("on"), Some(host)) = (words.next(), words.next(), words.next()) else {
        return false;
    };
    let Ok(pid) = pid.parse::<libc::pid_t>() else {
        return false;
    };
    let here = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    if pid <= 0 || host != here.trim() {
        return false;
    }
    !crate::durable::process_exists(pid)
}

/// The descriptors of the locks this process holds (-1: a free slot; a
/// few in a job: its producer lock, and a background push's L1 and L2
/// locks): what a forked child lets go of
/// ([`JobLock::not_in_forked_children`]).
static HELD_FDS: [std::sync::atomic::AtomicI32; 16] =
    [const { std::sync::atomic::AtomicI32::new(-1) }; 16];

/// `pthread_atfork` child handler: points each lock's descriptor at
/// `/dev/null`, which drops the child's reference to the locked file (a
/// `flock` lasts while any descriptor of its open file is open). The
/// number stays valid, so the child's copy of the lock closes only that.
/// Async-signal-safe: an atomic load, `open`, `dup3` and `close`.
extern "C" fn release_locks_in_child() {
    for slot in &HELD_FDS {
        let fd = slot.load(std::sync::atomic::Ordering::Relaxed);
        if fd < 0 {
            continue;
        }
        // SAFETY: system calls on descriptors: `fd` is a lock's, open in
        // this (forked) process; the path is a NUL-terminated constant.
        unsafe {
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
            if null >= 0 {
                libc::dup3(null, fd, libc::O_CLOEXEC);
                libc::close(null);
            }
        }
    }
}

impl JobLock {
    /// Makes a process forked from this one (without `exec`) let go of
    /// this lock at once, so that it never outlives its holder in a child
    /// (helper-42: a librex job's child kept the producer lock after the
    /// job died, and its restart found it busy; helper-44: a child forked
    /// while the job's background push ran kept that push's L1 and L2
    /// locks). A forked child never carries on its parent's push, so every
    /// lock is let go of, from the moment it is taken.
    fn not_in_forked_children(&self) {
        static ONCE: std::sync::Once = std::sync::Once::new();
        let fd = self.file.as_raw_fd();
        // A job holds three at most: past 16 at once, the others stay
        // in children, as before.
        let _ = HELD_FDS.iter().find(|s| {
            s.compare_exchange(
                -1,
                fd,
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
            )
            .is_ok()
        });
        ONCE.call_once(|| {
            // SAFETY: registers a child handler that is async-signal-safe
            // (see `release_locks_in_child`); no memory is involved.
            unsafe { libc::pthread_atfork(None, None, Some(release_locks_in_child)) };
        });
    }
}

/// Takes the descriptor `fd` off [`HELD_FDS`].
fn forget_held(fd: i32) {
    for slot in &HELD_FDS {
        let _ = slot.compare_exchange(
            fd,
            -1,
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}

impl Drop for JobLock {
    fn drop(&mut self) {
        forget_held(self.file.as_raw_fd());
        let _ = self.file.set_len(0);
        // SAFETY: as in `acquire`; unlocking a descriptor we own.
        unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// Writes who holds a lock into its file. A full file system does not
/// keep the lock from being held: only who holds it goes unsaid (others
/// read an empty holder). A full L1 is when a push is needed most: it is
/// what empties L1 (helper-94: a job whose L1 had filled while L2 was
/// away never pushed again, every push failing here).
fn write_holder(file: &mut std::fs::File, path: &Path, info: &str) -> Result<()> {
    match file.write_all(info.as_bytes()) {
        Err(e) if !matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)) => {
            Err(Error::io(path, "write lock file", e))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {

    /// A full file system still lets a lock be taken (its holder unsaid);
    /// another write error is one.
    #[test]
    fn a_full_file_system_does_not_fail_the_lock() {
        let mut full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        write_holder(&mut full, Path::new("/dev/full"), "pid 1\n").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        let mut ro = std::fs::File::open(&p).unwrap();
        assert!(write_holder(&mut ro, &p, "pid 1\n").is_err());
    }
    use super::*;

    /// A child forked (without exec) while a lock is held, such as a
    /// librex job's child forked during its background push, does not
    /// keep the lock once its parent dies (helper-44: the job's restart
    /// found L1 busy for as long as the child lived).
    #[test]
    fn a_forked_child_does_not_keep_a_lock_its_parent_held() {
        let d = tempfile::tempdir().unwrap();
        let lock = JobLock::acquire(d.path(), "push-l2").unwrap();
        let mut ready = [0i32; 2];
        // SAFETY: a pipe into our own array.
        assert_eq!(unsafe { libc::pipe(ready.as_mut_ptr()) }, 0);
        // SAFETY: the child only writes a byte, sleeps and exits
        // (async-signal-safe calls).
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            // SAFETY: as above. The byte says the fork handlers have run.
            unsafe {
                libc::write(ready[1], b"x".as_ptr() as *const libc::c_void, 1);
                libc::sleep(30);
                libc::_exit(0);
            }
        }
        let mut b = [0u8; 1];
        // SAFETY: reading one byte into our buffer, then closing our pipe.
        unsafe {
            assert_eq!(
                libc::read(ready[0], b.as_mut_ptr() as *mut libc::c_void, 1),
                1
            );
            libc::close(ready[0]);
            libc::close(ready[1]);
        }
        // The parent dies holding it: its descriptor closes, nothing
        // unlocks (dropping would unlock the child's copy too).
        let fd = lock.file.as_raw_fd();
        std::mem::forget(lock);
        // SAFETY: the leaked lock's descriptor, closed once; nothing uses it
        // again.
        unsafe { libc::close(fd) };
        forget_held(fd);
        let taken = JobLock::acquire(d.path(), "restart");
        // SAFETY: our own child; reaped here.
        unsafe {
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, std::ptr::null_mut(), 0);
        }
        assert!(taken.is_ok(), "the forked child keeps the lock: {taken:?}");
    }

    /// Held shared by a restore, the lock is busy for a push, which is
    /// told so, not the name a dead push left in the file (helper-47).
    #[test]
    fn a_push_is_told_a_restore_holds_the_lock() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join(LOCK_NAME),
            "pid 999999999 on x since y (push-l2)\n",
        )
        .unwrap();
        let reading = JobLock::shared(d.path(), |_| panic!("nothing holds it"))
            .unwrap()
            .unwrap();
        let again = JobLock::shared(d.path(), |_| panic!("shared with restores")).unwrap();
        match JobLock::acquire(d.path(), "push-l2") {
            Err(Error::Busy { holder, .. }) => assert!(holder.contains("a restore"), "{holder}"),
            other => panic!("{other:?}"),
        }
        drop((reading, again));
        JobLock::acquire(d.path(), "push-l2").unwrap();
    }

    #[test]
    fn second_taker_is_told_who_holds_it() {
        let d = tempfile::tempdir().unwrap();
        let a = JobLock::acquire(d.path(), "push-l2").unwrap();
        match JobLock::acquire(d.path(), "flush") {
            Err(Error::Busy { holder, .. }) => {
                assert!(
                    holder.contains(&format!("pid {}", std::process::id())),
                    "{holder}"
                );
                assert!(holder.contains("push-l2"), "{holder}");
            }
            other => panic!("expected Busy, got {other:?}"),
        }
        drop(a);
        JobLock::acquire(d.path(), "flush").unwrap();
    }

    /// A producer starting while a push's recovery holds the producer lock
    /// waits for it; one starting beside another producer is refused.
    #[test]
    fn a_producer_waits_for_recovery_but_not_for_another_producer() {
        let d = tempfile::tempdir().unwrap();
        let r = JobLock::for_recovery(d.path()).expect("free");
        assert!(JobLock::for_recovery(d.path()).is_none());
        std::thread::scope(|s| {
            let producer = s.spawn(|| JobLock::acquire_producer(d.path(), "librex job"));
            std::thread::sleep(std::time::Duration::from_millis(100));
            assert!(!producer.is_finished(), "did not wait for the recovery");
            drop(r);
            let p = producer.join().unwrap().unwrap();
            match JobLock::acquire_producer(d.path(), "rexctl capture") {
                Err(Error::Busy { holder, .. }) => {
                    assert!(holder.contains("librex job"), "{holder}")
                }
                other => panic!("expected Busy, got {other:?}"),
            }
            assert!(JobLock::for_recovery(d.path()).is_none());
            drop(p);
        });
    }

    /// A producer killed by SIGKILL leaves its name in the lock file; a
    /// recovery that has just taken the lock has not written its own yet.
    /// A producer starting then must wait, not fail as busy naming the
    /// dead process.
    #[test]
    fn a_producer_waits_while_the_lock_file_names_a_dead_process() {
        let d = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let r = JobLock::for_recovery(d.path()).expect("free");
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        std::fs::write(
            d.path().join(PRODUCER_LOCK_NAME),
            format!(
                "pid {dead} on {} since 2026-01-01T00:00:00Z (librex job)\n",
                host.trim()
            ),
        )
        .unwrap();
        std::thread::scope(|s| {
            let producer = s.spawn(|| JobLock::acquire_producer(d.path(), "librex job"));
            std::thread::sleep(std::time::Duration::from_millis(100));
            assert!(!producer.is_finished(), "failed at once instead of waiting");
            drop(r);
            producer
                .join()
                .unwrap()
                .expect("took the lock once it was free");
        });
        assert!(!recorded_holder_is_dead(&format!(
            "held by pid {} on {} since x (librex job)",
            std::process::id(),
            host.trim()
        )));
        assert!(!recorded_holder_is_dead(
            "held by pid 1 on another-host since x"
        ));
    }
}
