//! Following a thread into the program it execs: seized without being
//! stopped, polled, and let go again.

use super::deadline::{wait_for, Until, STOP_WITHIN};
use super::req;
use super::thread::EXEC_OPTIONS;
use super::PtraceError;
use crate::os::wait::Status;
use std::time::{Duration, Instant};

/// What a thread attached by [`seize_for_exec`] did since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecWait {
    /// Still running its old program (signals it got meanwhile were passed on).
    Running,
    /// Stopped at the start of its new program: `pid` (the exec made the
    /// thread its process's only one), ready for
    /// [`Stopped::adopt`](super::Stopped::adopt).
    Exec,
    /// Gone (exited or killed), with its wait status when this wait
    /// reaped it.
    Gone(Option<Status>),
}

/// Attach to a thread about to `exec` without stopping it, so that the
/// new program stops before its first instruction (`PTRACE_O_TRACEEXEC`).
pub fn seize_for_exec(tid: i32) -> Result<(), PtraceError> {
    req::seize(tid, nix::sys::ptrace::Options::from_bits_retain(EXEC_OPTIONS)).map_err(PtraceError::Seize)
}

/// Poll a thread attached by [`seize_for_exec`] (process `pid`), without
/// blocking.
pub fn poll_exec(tid: i32, pid: i32) -> ExecWait {
    loop {
        let mut r = crate::os::wait::wait(tid, false);
        if r.is_err() && tid != pid {
            // A thread other than the leader exec'd: it is the leader now.
            r = crate::os::wait::wait(pid, false);
        }
        match r {
            Ok(None) => return ExecWait::Running,
            Err(_) => return ExecWait::Gone(None),
            Ok(Some((who, status))) => match exec_stop(who, status) {
                Some(w) => return w,
                None => continue,
            },
        }
    }
}

/// [`poll_exec`] until the thread's exec stop (or its end) comes, or
/// `within` passes (or ^C): Running then. Spins for the first
/// millisecond (an exec allowed a moment ago stops within microseconds),
/// then sleeps 200 µs between looks.
pub fn wait_exec(tid: i32, pid: i32, within: Duration) -> ExecWait {
    let start = Instant::now();
    loop {
        let w = poll_exec(tid, pid);
        let waited = start.elapsed();
        if w != ExecWait::Running || waited >= within || crate::os::sys::stop_requested() {
            return w;
        }
        if waited < Duration::from_millis(1) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// What the wait status `status` of thread `tid`, attached by
/// [`seize_for_exec`], says: an exec or an end; any other stop (a signal
/// for it, passed on; a group stop) is resumed and gives `None`.
pub fn exec_stop(tid: i32, status: Status) -> Option<ExecWait> {
    if status.ended() {
        return Some(ExecWait::Gone(Some(status)));
    }
    if status.is_exec() {
        return Some(ExecWait::Exec);
    }
    let deliver = if status.event() == 0 { status.stop_signal().unwrap_or(0) } else { 0 };
    if req::cont(tid, deliver).is_err() {
        return Some(ExecWait::Gone(None));
    }
    None
}

/// What a thread attached by [`seize_for_exec`] as it opened a library
/// did next ([`run_until_mapped`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapWait {
    /// It mapped the library executable: held in an interrupt stop right
    /// after that system call, before anything ran the library's code
    /// (for [`Stopped::attach_holding`](super::Stopped::attach_holding)).
    Mapped,
    /// It ended.
    Gone,
    /// It did not map it within the system calls or the time allowed (it
    /// read the file, say): let go.
    NotMapped,
}

/// Attach to a thread held in its `open` of a file (a fanotify permission
/// event not answered yet), so that it stops as the call returns: no
/// instruction of its own runs before [`run_until_mapped`] takes it.
pub fn seize_for_open(tid: i32) -> Result<(), PtraceError> {
    seize_for_exec(tid)?;
    req::interrupt(tid)
}

/// Run thread `tid` (attached by [`seize_for_open`]) from one system call
/// to the next until `mapped()` holds at a call's exit (the loader mapped
/// the library it opened): then held; else, after at most `calls` system
/// calls and `within`, let go.
pub fn run_until_mapped(tid: i32, mapped: &mut dyn FnMut() -> bool, calls: u32, within: Duration) -> MapWait {
    let now = Instant::now();
    let until = Until { since: now, deadline: Some(now + within), signals: true };
    let (mut sig, mut done) = (0, 0);
    loop {
        let status = match next_stop(tid, until) {
            Ok(st) => st,
            Err(w) => return w,
        };
        if status.stop_signal() == Some(libc::SIGTRAP | 0x80) {
            if !req::syscall_entry(tid) {
                done += 1;
                if mapped() {
                    return hold(tid, until);
                }
                if done >= calls {
                    let _ = req::detach(tid, 0);
                    return MapWait::NotMapped;
                }
            }
        } else if status.event() == 0 {
            // A signal for it: delivered as it goes on.
            sig = status.stop_signal().unwrap_or(0);
        }
        if req::syscall(tid, sig).is_err() {
            return MapWait::Gone;
        }
        sig = 0;
    }
}

/// The next stop of thread `tid` (running under [`run_until_mapped`]), or
/// what it means when there is none: gone, or let go at the deadline.
fn next_stop(tid: i32, until: Until) -> Result<Status, MapWait> {
    match wait_for(tid, until) {
        Ok(Ok(st)) if st.ended() => Err(MapWait::Gone),
        Ok(Ok(st)) => Ok(st),
        Ok(Err(_)) => {
            release(tid, tid);
            Err(MapWait::NotMapped)
        }
        Err(_) => Err(MapWait::Gone),
    }
}

/// Thread `tid`, in a system-call stop, into an interrupt stop (as
/// `Thread::seize` leaves one) before it runs an instruction: the
/// interrupt is taken on its way back to user space.
fn hold(tid: i32, until: Until) -> MapWait {
    if req::interrupt(tid).is_err() || req::cont(tid, 0).is_err() {
        return MapWait::Gone;
    }
    loop {
        let status = match next_stop(tid, until) {
            Ok(st) => st,
            Err(w) => return w,
        };
        if status.event() != 0 {
            return MapWait::Mapped;
        }
        // A signal came first: it goes with the next resume (the
        // interrupt is still pending).
        let sig = status.stop_signal().filter(|&s| s != libc::SIGTRAP | 0x80).unwrap_or(0);
        if req::cont(tid, sig).is_err() {
            return MapWait::Gone;
        }
    }
}

/// Let go of a thread of ours that sits in a stop already reported.
pub fn detach_stopped(tid: i32) {
    let _ = req::detach(tid, 0);
}

/// Let go of a thread attached by [`seize_for_exec`] (of process `pid`):
/// stopped, then detached with any signal it was about to get. A thread
/// that exec'd meanwhile is the process's leader now: `pid` is let go.
pub fn release(tid: i32, pid: i32) {
    let tid = if req::interrupt(tid).is_ok() {
        tid
    } else if tid != pid && req::interrupt(pid).is_ok() {
        pid
    } else {
        // Not stoppable: it may sit in a stop already (an exec's).
        let _ = req::detach(pid, 0);
        return;
    };
    let mut pending = 0;
    let until = Until { since: Instant::now(), deadline: Some(Instant::now() + STOP_WITHIN), signals: false };
    loop {
        // It stops at once, unless it waits in the kernel (then the kernel
        // lets it go when the tracer exits).
        let Ok(Ok(status)) = wait_for(tid, until) else { return };
        if status.ended() {
            return;
        }
        if status.event() == 0 {
            // A signal-delivery stop came first: keep the signal, wait on
            // (a system-call stop of `run_until_mapped`'s is no signal).
            pending = status.stop_signal().filter(|&s| s != libc::SIGTRAP | 0x80).unwrap_or(pending);
            if req::cont(tid, 0).is_err() {
                return;
            }
            let _ = req::interrupt(tid);
            continue;
        }
        break;
    }
    let _ = req::detach(tid, pending);
}
