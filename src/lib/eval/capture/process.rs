//! The live process: who it is, whether it still exists, and stopping and
//! resuming all of its threads around a checkpoint.
//!
//! **ptrace** (the default): at each checkpoint every thread is attached
//! with `PTRACE_SEIZE` and stopped with `PTRACE_INTERRUPT`, and detached
//! again right after the memory is read. Between checkpoints the process is
//! not traced at all, so signals reach it as usual and no event loop is
//! needed; its parent never sees it stopped (a ptrace stop is not a job
//! control stop). Threads are listed from `/proc/PID/task` again after each
//! round of stops until no new one appears: a stopped thread cannot create
//! another, so the last round sees them all. A thread caught in a
//! signal-delivery stop keeps its signal, which is given back at detach;
//! a thread that was already in a job-control stop stays stopped after.
//!
//! **signal**: `SIGSTOP`, wait until every thread shows state `T` in
//! `/proc/PID/task/*/stat`, then `SIGCONT` (not sent when the process was
//! already stopped before). The parent and a shell see this stop.
//!
//! Whatever happens while the process is stopped (an error, a panic), the
//! [`Stopped`] guard resumes it when dropped.

use std::collections::BTreeSet;
use std::io;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::state::ProcessIdentity;
use crate::error::{Error, Result};

/// How a capture stops the process at each checkpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum StopMethod {
    /// `PTRACE_SEIZE` + `PTRACE_INTERRUPT` on every thread, detached after
    /// the read: invisible to the parent.
    #[default]
    Ptrace,
    /// `SIGSTOP` / `SIGCONT`: for a process that is already being traced (by
    /// a debugger), which cannot be attached again. The parent sees it.
    Signal,
}

/// Why a process could not be stopped or read.
#[derive(Debug)]
pub(crate) enum Fail {
    /// The process exited (or was killed) before or during the checkpoint.
    Exited,
    /// Anything else.
    Err(Error),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Err(e)
    }
}

/// What a capture needs to be allowed to read another process, for error
/// messages.
pub const PERMISSION_HINT: &str = "capturing a process needs ptrace access to it: run rexctl as the same user \
with ptrace allowed (kernel.yama.ptrace_scope 0, or 1 when rexctl starts the program itself with `-- CMD`), \
or with CAP_SYS_PTRACE (for example as root)";

/// The error for a permission failure of `op` on process `pid`.
pub fn permission_error(pid: u32, op: &str, source: io::Error) -> Error {
    Error::Process {
        pid,
        reason: format!("{op}: {source}: {PERMISSION_HINT}"),
    }
}

/// The error for a process that does not exist.
pub fn no_such_process(pid: u32) -> Error {
    Error::Process {
        pid,
        reason: "no such process".into(),
    }
}

/// `/proc/PID/<what>` (or `/proc/PID` when `what` is empty).
pub fn proc_path(pid: u32, what: &str) -> PathBuf {
    if what.is_empty() {
        PathBuf::from(format!("/proc/{pid}"))
    } else {
        PathBuf::from(format!("/proc/{pid}/{what}"))
    }
}

/// The fields of `/proc/PID/stat` a capture uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stat {
    /// State letter (`R`, `S`, `D`, `T`, `t`, `Z`, `X`, ...).
    pub state: char,
    /// Parent pid.
    pub ppid: u32,
    /// Start time, clock ticks after boot.
    pub start_ticks: u64,
}

/// Parses a `stat` line; the command name (in parentheses) may hold any
/// byte, so fields are counted from the last `)`.
pub(crate) fn parse_stat(s: &str) -> Option<Stat> {
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 (state) is f[0]; field N is f[N - 3].
    Some(Stat {
        state: f.first()?.chars().next()?,
        ppid: f.get(1)?.parse().ok()?,
        start_ticks: f.get(19)?.parse().ok()?,
    })
}

/// Reads `/proc/PID/stat` (or a task's, with `tid`).
pub(crate) fn stat(pid: u32, tid: Option<u32>) -> Option<Stat> {
    let path = match tid {
        Some(t) => proc_path(pid, &format!("task/{t}/stat")),
        None => proc_path(pid, "stat"),
    };
    parse_stat(&std::fs::read_to_string(path).ok()?)
}

/// XXH3-64 of this boot's id, or 0 when the kernel does not tell it.
pub(crate) fn boot_id() -> u64 {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| xxhash_rust::xxh3::xxh3_64(s.trim().as_bytes()))
        .unwrap_or(0)
}

/// The identity of a live process, or an error naming what is wrong.
pub(crate) fn identify(pid: u32) -> Result<ProcessIdentity> {
    let Some(st) = stat(pid, None) else {
        return Err(no_such_process(pid));
    };
    if matches!(st.state, 'Z' | 'X') {
        return Err(Error::Process {
            pid,
            reason: "it has already exited (it is a zombie)".into(),
        });
    }
    let command = std::fs::read(proc_path(pid, "cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .split('\0')
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    Ok(ProcessIdentity {
        pid,
        start_ticks: st.start_ticks,
        boot_id: boot_id(),
        command,
    })
}

/// Whether the process `id` still exists and has not exited (a zombie has).
pub(crate) fn alive(id: &ProcessIdentity) -> bool {
    match stat(id.pid, None) {
        Some(st) => st.start_ticks == id.start_ticks && !matches!(st.state, 'Z' | 'X'),
        None => false,
    }
}

/// The thread ids of process `pid`; `None` when the process is gone.
fn tasks(pid: u32) -> Option<Vec<u32>> {
    let dir = std::fs::read_dir(proc_path(pid, "task")).ok()?;
    let mut out: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    out.sort_unstable();
    Some(out)
}

fn errno() -> io::Error {
    io::Error::last_os_error()
}

fn ptrace(req: libc::c_uint, tid: u32, data: usize) -> io::Result<()> {
    // SAFETY: the requests used here (SEIZE, INTERRUPT, DETACH) take a pid,
    // an ignored address and an integer in the data argument; no memory is
    // passed to the kernel, so no pointer can be left dangling. The variadic
    // arguments are passed at their ABI sizes (pid_t, void *, void *).
    let rc = unsafe {
        libc::ptrace(
            req,
            tid as libc::pid_t,
            std::ptr::null_mut::<libc::c_void>(),
            data as *mut libc::c_void,
        )
    };
    if rc == -1 { Err(errno()) } else { Ok(()) }
}

/// What waiting for a traced thread produced.
enum Waited {
    /// In a ptrace stop; the signal to give back at detach (0 for none).
    Stopped(i32),
    /// The thread is gone.
    Gone,
}

/// Waits (polling, so that a thread that never stops cannot hang the
/// capture) until the traced thread `tid` reports a stop or its end.
fn wait_stop(tid: u32, deadline: Instant) -> io::Result<Option<Waited>> {
    let mut pause = Duration::from_micros(5);
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: `status` is a live, writable c_int for the whole call;
        // waitpid writes at most one int through the pointer.
        let r = unsafe {
            libc::waitpid(
                tid as libc::pid_t,
                &mut status,
                libc::__WALL | libc::WNOHANG,
            )
        };
        if r == tid as libc::pid_t {
            if libc::WIFSTOPPED(status) {
                let event = (status >> 16) & 0xff;
                let sig = libc::WSTOPSIG(status);
                // event 0 is a signal-delivery stop: the signal was about to
                // be delivered, so it is given back at detach. A
                // PTRACE_EVENT_STOP is our interrupt or a group stop.
                return Ok(Some(Waited::Stopped(if event == 0 { sig } else { 0 })));
            }
            return Ok(Some(Waited::Gone));
        }
        if r == -1 {
            let e = errno();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ECHILD) => return Ok(Some(Waited::Gone)),
                _ => return Err(e),
            }
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        if pause < Duration::from_micros(50) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(pause);
        }
        pause = (pause * 2).min(Duration::from_millis(1));
    }
}

/// A stopped process; resumed by [`Stopped::resume`] or when dropped.
pub(crate) struct Stopped {
    pid: u32,
    method: StopMethod,
    /// ptrace: attached threads and the signal to give back to each.
    threads: Vec<(u32, i32)>,
    /// ptrace: attached threads that had not stopped when the stop gave up.
    stragglers: Vec<u32>,
    /// signal: the process was already stopped, do not continue it.
    was_stopped: bool,
    resumed: bool,
}

impl Stopped {
    /// Stops every thread of `pid`.
    pub fn stop(
        pid: u32,
        method: StopMethod,
        timeout: Duration,
    ) -> std::result::Result<Stopped, Fail> {
        let mut s = Stopped {
            pid,
            method,
            threads: Vec::new(),
            stragglers: Vec::new(),
            was_stopped: false,
            resumed: false,
        };
        let deadline = Instant::now() + timeout;
        match method {
            StopMethod::Ptrace => s.stop_ptrace(deadline)?,
            StopMethod::Signal => s.stop_signal(deadline)?,
        }
        Ok(s)
    }

    fn stop_ptrace(&mut self, deadline: Instant) -> std::result::Result<(), Fail> {
        let pid = self.pid;
        let mut seen = BTreeSet::new();
        loop {
            let Some(all) = tasks(pid) else {
                return Err(Fail::Exited);
            };
            let new: Vec<u32> = all.into_iter().filter(|t| seen.insert(*t)).collect();
            if new.is_empty() {
                break;
            }
            let mut attached = Vec::new();
            for tid in new {
                match ptrace(libc::PTRACE_SEIZE, tid, 0) {
                    Ok(()) => {}
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => continue,
                    Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                        // A zombie (or a dying thread) cannot be attached
                        // either: only a live one is a permission problem.
                        match stat(pid, Some(tid)) {
                            None => continue,
                            Some(st) if matches!(st.state, 'Z' | 'X') => {
                                if tid == pid
                                    && stat(pid, None).is_none_or(|s| matches!(s.state, 'Z' | 'X'))
                                {
                                    return Err(Fail::Exited);
                                }
                                continue;
                            }
                            Some(_) if tid == pid || self.threads.is_empty() => {
                                let hint = if stat(pid, None).is_some_and(|s| s.state == 't')
                                    || traced_by_other(pid)
                                {
                                    " (it is already traced by another process, such as a debugger: try --stop signal)"
                                } else {
                                    ""
                                };
                                return Err(Fail::Err(permission_error(
                                    pid,
                                    "ptrace attach",
                                    io::Error::new(e.kind(), format!("{e}{hint}")),
                                )));
                            }
                            Some(_) => continue,
                        }
                    }
                    Err(e) => {
                        return Err(Fail::Err(Error::io(proc_path(pid, ""), "ptrace attach", e)));
                    }
                }
                // From here the thread is ours: it must be waited for and
                // detached whatever happens.
                let _ = ptrace(libc::PTRACE_INTERRUPT, tid, 0);
                attached.push(tid);
            }
            for (i, &tid) in attached.iter().enumerate() {
                match wait_stop(tid, deadline) {
                    Ok(Some(Waited::Stopped(sig))) => self.threads.push((tid, sig)),
                    Ok(Some(Waited::Gone)) => {}
                    Ok(None) => {
                        // Not stopped in time (uninterruptible sleep). A
                        // running tracee cannot be detached: the guard waits
                        // for these once more when it resumes the others.
                        self.stragglers.extend_from_slice(&attached[i..]);
                        return Err(Fail::Err(Error::io(
                            proc_path(pid, ""),
                            "stop",
                            io::Error::new(
                                io::ErrorKind::TimedOut,
                                format!(
                                    "thread {tid} did not stop within the stop timeout (uninterruptible sleep?)"
                                ),
                            ),
                        )));
                    }
                    Err(e) => {
                        self.stragglers.extend_from_slice(&attached[i..]);
                        return Err(Fail::Err(Error::io(proc_path(pid, ""), "waitpid", e)));
                    }
                }
            }
        }
        // A leader that called pthread_exit stays a zombie while the other
        // threads run: the process lives as long as one thread is stopped.
        if self.threads.is_empty() {
            return Err(Fail::Exited);
        }
        Ok(())
    }

    fn stop_signal(&mut self, deadline: Instant) -> std::result::Result<(), Fail> {
        let pid = self.pid;
        let stopped_now = || -> Option<bool> {
            let ts = tasks(pid)?;
            let mut any = false;
            for t in ts {
                match stat(pid, Some(t)) {
                    Some(st) if matches!(st.state, 'T' | 't' | 'Z' | 'X') => any = true,
                    Some(_) => return Some(false),
                    None => {}
                }
            }
            Some(any)
        };
        self.was_stopped = stopped_now() == Some(true);
        // SAFETY: kill has no memory-safety preconditions.
        if unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) } != 0 {
            let e = errno();
            return Err(match e.raw_os_error() {
                Some(libc::ESRCH) => Fail::Exited,
                Some(libc::EPERM) => Fail::Err(permission_error(pid, "send SIGSTOP", e)),
                _ => Fail::Err(Error::io(proc_path(pid, ""), "send SIGSTOP", e)),
            });
        }
        let mut pause = Duration::from_micros(20);
        loop {
            match stopped_now() {
                None => return Err(Fail::Exited),
                Some(true) => break,
                Some(false) => {}
            }
            if Instant::now() >= deadline {
                self.resume_inner();
                return Err(Fail::Err(Error::io(
                    proc_path(pid, ""),
                    "stop",
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the process did not stop within the stop timeout",
                    ),
                )));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
        if !alive_pid(pid) {
            self.resume_inner();
            return Err(Fail::Exited);
        }
        Ok(())
    }

    /// Threads stopped.
    pub fn threads(&self) -> usize {
        match self.method {
            StopMethod::Ptrace => self.threads.len(),
            StopMethod::Signal => tasks(self.pid).map(|t| t.len()).unwrap_or(0),
        }
    }

    /// Resumes the process. `Err(Fail::Exited)` when it turned out to have
    /// died while stopped (killed by `SIGKILL`), so that what was read must
    /// be discarded.
    pub fn resume(mut self) -> std::result::Result<(), Fail> {
        let leader_ok = self.resume_inner();
        if !leader_ok || !alive_pid(self.pid) {
            return Err(Fail::Exited);
        }
        Ok(())
    }

    /// Resumes everything; returns whether the leader was still there.
    fn resume_inner(&mut self) -> bool {
        if self.resumed {
            return true;
        }
        self.resumed = true;
        match self.method {
            StopMethod::Ptrace => {
                let mut leader_ok = true;
                // Threads that were slow to stop: give them one more stop
                // timeout, so that none is left stuck in a ptrace stop.
                let later = Instant::now() + Duration::from_secs(10);
                for tid in std::mem::take(&mut self.stragglers) {
                    if let Ok(Some(Waited::Stopped(sig))) = wait_stop(tid, later) {
                        self.threads.push((tid, sig));
                    }
                }
                for &(tid, sig) in &self.threads {
                    if let Err(e) = ptrace(libc::PTRACE_DETACH, tid, sig as usize) {
                        if tid == self.pid {
                            leader_ok = false;
                        }
                        if e.raw_os_error() == Some(libc::ESRCH) {
                            // Killed while stopped: collect its exit
                            // notification, which is ours as its tracer.
                            let mut status = 0;
                            // SAFETY: `status` is a live, writable c_int.
                            unsafe {
                                libc::waitpid(
                                    tid as libc::pid_t,
                                    &mut status,
                                    libc::__WALL | libc::WNOHANG,
                                );
                            }
                        }
                    }
                }
                leader_ok
            }
            StopMethod::Signal => {
                if !self.was_stopped {
                    // SAFETY: kill has no memory-safety preconditions.
                    unsafe {
                        libc::kill(self.pid as libc::pid_t, libc::SIGCONT);
                    }
                }
                true
            }
        }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        self.resume_inner();
    }
}

fn alive_pid(pid: u32) -> bool {
    stat(pid, None).is_some_and(|s| !matches!(s.state, 'Z' | 'X'))
}

/// Whether `/proc/PID/status` names a tracer other than this process.
fn traced_by_other(pid: u32) -> bool {
    std::fs::read_to_string(proc_path(pid, "status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("TracerPid:")
                    .map(|v| v.trim().parse::<u32>().unwrap_or(0))
            })
        })
        .is_some_and(|t| t != 0 && t != std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_command_names_parse() {
        let line = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615";
        let s = parse_stat(line).unwrap();
        assert_eq!(
            s,
            Stat {
                state: 'S',
                ppid: 1,
                start_ticks: 987654
            }
        );
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1"), None);
    }

    #[test]
    fn this_process_is_identified_and_alive() {
        let me = identify(std::process::id()).unwrap();
        assert!(alive(&me));
        assert!(me.same_process(&identify(std::process::id()).unwrap()));
        let e = identify(u32::MAX - 7).unwrap_err().to_string();
        assert!(e.contains("no such process"), "{e}");
    }

    #[test]
    fn permission_errors_say_what_is_needed() {
        let e = permission_error(
            7,
            "ptrace attach",
            io::Error::from_raw_os_error(libc::EPERM),
        );
        assert_eq!(e.exit_code(), crate::error::exit::FAILURE);
        let e = e.to_string();
        assert!(e.starts_with("process 7: ptrace attach: "), "{e}");
        assert!(e.contains("same user"), "{e}");
        assert!(e.contains("CAP_SYS_PTRACE"), "{e}");
        assert!(e.contains("ptrace_scope"), "{e}");
    }
}
