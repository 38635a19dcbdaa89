//! Waiting for a thread's next stop within a deadline (or until ^C), how
//! long each operation may take, telling a fault from a signal sent, and
//! stopping a thread again when a wait gives up.

use super::{req, PtraceError};
use crate::arch::native as arch;
use crate::os::wait::Status;
use std::time::{Duration, Instant};

/// How long an injected system call may take. The tracer's are short
/// (memfd_create, ftruncate, mmap, mprotect, munmap, openat, close: micro-
/// to milliseconds); one still running after this is held up by the
/// target (a seccomp listener that never answers, where the filters could
/// not be suspended).
pub(super) const SYSCALL_SECS: u64 = 2;
/// How long a called function may run: the session's own code, which
/// makes system calls of its own (the crash handler's installation) or
/// runs the script's lifecycle probes (bounded by MAXACTION, not by
/// microseconds).
pub(super) const CALL_SECS: u64 = 5;
/// How long one instruction stepped for the tracer (`Stopped::step`) may
/// take: a system call's time.
pub(super) const STEP_SECS: u64 = SYSCALL_SECS;
/// After SIGINT or SIGTERM (`sys::stop_requested`), how long an operation
/// may still run before its wait gives up: each of the tracer's takes far
/// less, so a ^C during a normal attach still lets every one finish (the
/// session then ends cleanly), while one the target holds up is given up
/// within a second of the signal.
pub(super) const GRACE: Duration = Duration::from_millis(250);
/// How long a thread may take to stop once interrupted: microseconds,
/// unless it waits in the kernel where signals do not reach.
pub(super) const STOP_WITHIN: Duration = Duration::from_millis(500);

/// When a wait for a thread's next stop gives up.
#[derive(Clone, Copy)]
pub(super) struct Until {
    /// When the operation began.
    pub(super) since: Instant,
    /// Its deadline. None for the thread's own code (a program starting,
    /// a call single-stepped), which may rightly take as long as it takes.
    pub(super) deadline: Option<Instant>,
    /// Whether SIGINT or SIGTERM ends the wait (after [`GRACE`]).
    pub(super) signals: bool,
}

impl Until {
    /// An operation of the tracer's: `secs` at most, or until ^C.
    pub(super) fn within(secs: u64) -> Until {
        let now = Instant::now();
        Until { since: now, deadline: Some(now + Duration::from_secs(secs)), signals: true }
    }

    /// The thread's own code: until ^C.
    pub(super) fn signalled() -> Until {
        Until { since: Instant::now(), deadline: None, signals: true }
    }
}

/// Why a wait gave up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum GaveUp {
    Deadline,
    Signal,
}

/// The next stop of thread `tid` (its wait status), or why the wait gave
/// up. Polls: yielding for the first 100 µs (nearly every stop comes by
/// then), then sleeping longer and longer, at most 5 ms.
pub(super) fn wait_for(tid: i32, until: Until) -> Result<Result<Status, GaveUp>, PtraceError> {
    let start = Instant::now();
    let mut pause = Duration::from_micros(50);
    loop {
        match crate::os::wait::wait(tid, false) {
            Ok(Some((_, status))) => return Ok(Ok(status)),
            Ok(None) => {}
            Err(source) => return Err(PtraceError::Wait { tid, source }),
        }
        let now = Instant::now();
        if until.deadline.is_some_and(|d| now >= d) {
            return Ok(Err(GaveUp::Deadline));
        }
        if until.signals && now >= until.since + GRACE && crate::os::sys::stop_requested() {
            return Ok(Err(GaveUp::Signal));
        }
        if now - start < Duration::from_micros(100) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }
}

/// How a thread is run: to its next system-call stop (`PTRACE_SYSCALL`:
/// the stub's system calls and calls), freely (`PTRACE_CONT`), or one
/// instruction (`PTRACE_SINGLESTEP`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Run {
    Syscall,
    Cont,
    Step,
}

pub(super) fn resume(tid: i32, run: Run, sig: i32) -> Result<(), PtraceError> {
    match run {
        Run::Syscall => req::syscall(tid, sig),
        Run::Cont => req::cont(tid, sig),
        Run::Step => req::step(tid, sig),
    }
}

/// The signal of a signal-delivery stop (SIGTRAP included: an `int3`, a
/// single step's end, or one sent); None for event and system-call stops.
pub(super) fn signal_of(st: Status) -> Option<i32> {
    st.stop_signal().filter(|&s| st.event() == 0 && s != libc::SIGTRAP | 0x80)
}

/// Whether thread `tid`, stopped to receive `sig`, faulted: a signal the
/// CPU raised at an instruction (`si_code` > 0), not one sent (`kill`,
/// `tgkill`, `sigqueue`: `si_code` <= 0). Going on would fault again.
pub(super) fn faulted(tid: i32, sig: i32) -> bool {
    [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGTRAP].contains(&sig)
        && req::signal_code(tid).is_some_and(|code| code > 0)
}

/// Thread `tid`, stopped to receive the SIGTRAP of a trap instruction (a
/// trap probe's, or the program's own `int3`/`brk`), is put back on that
/// instruction, and the caller drops the signal: going on, the thread
/// traps again (into `rt_trap` while the probe is there) or runs the
/// instruction put back under it. Dropped without that, the signal would
/// leave an x86_64 thread inside the instruction (past the `int3`), and
/// delivered after the session it would end the process. Whether it was
/// such a trap.
pub(super) fn rewind_trap(tid: i32) -> bool {
    if req::signal_code(tid) != Some(arch::TRAP_SI_CODE) {
        return false;
    }
    let Ok(mut r) = req::get_regs(tid) else { return false };
    let at = arch::trap_before(arch::pc(&r));
    let mut bytes = [0u8; 4];
    let read = std::fs::File::open(format!("/proc/{tid}/mem"))
        .and_then(|f| std::os::unix::fs::FileExt::read_exact_at(&f, &mut bytes[..arch::TRAP_PROBE.len()], at));
    if read.is_err() || !arch::is_trap(&bytes) {
        return false;
    }
    arch::set_pc(&mut r, at);
    req::set_regs(tid, &r).is_ok()
}

/// Whether SIGTRAP waits in thread `tid`'s own pending set (`SigPnd` in
/// `/proc/TID/status`): a single-stepped system call's trap, queued behind
/// an interrupt's stop.
fn trap_pending(tid: i32) -> bool {
    sig_set(tid, "SigPnd:").is_some_and(|set| set & 1 << (libc::SIGTRAP - 1) != 0)
}

/// A signal set of thread `tid` from `/proc/TID/status` (`SigPnd:`,
/// `SigBlk:`).
fn sig_set(tid: i32, field: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()?
        .lines()
        .find_map(|l| u64::from_str_radix(l.strip_prefix(field)?.trim(), 16).ok())
}

/// Whether thread `tid`, stopped, has a SIGTRAP queued that it takes as
/// soon as it goes on (pending and not blocked): a trap instruction's,
/// which the kernel reports after the stop PTRACE_INTERRUPT asked for.
pub(super) fn trap_queued(tid: i32) -> bool {
    trap_pending(tid) && sig_set(tid, "SigBlk:").is_some_and(|set| set & 1 << (libc::SIGTRAP - 1) == 0)
}

/// What [`stop_again`] did.
pub(super) enum Again {
    /// The thread is stopped; the signal it was about to get (0: none),
    /// to be kept.
    Stopped(i32),
    /// It does not stop: it waits in the kernel where signals do not reach
    /// (a killable or uninterruptible sleep).
    Running,
    Exited,
}

/// Stop thread `tid` again after a wait for it gave up or it ran past its
/// time (`PTRACE_INTERRUPT`), within [`STOP_WITHIN`]. The kernel ends the
/// interrupt's trap at the thread's first stop, whichever: its own stop,
/// a signal's (kept for the thread, the last, but not its faults nor,
/// when it was single-stepped, its traps), or a system call's exit (a wait
/// the interrupt broke returns at once). At a system call's entry the
/// registers must not be put back (the call would run with them): it is
/// interrupted again and run to its exit. A single step's trap still
/// queued is taken too. `seen` is shown every stop.
pub(super) fn stop_again(tid: i32, run: Run, seen: &mut dyn FnMut(Status)) -> Result<Again, PtraceError> {
    req::interrupt(tid)?;
    let until = Until { since: Instant::now(), deadline: Some(Instant::now() + STOP_WITHIN), signals: false };
    let mut kept = 0;
    loop {
        let Ok(st) = wait_for(tid, until)? else { return Ok(Again::Running) };
        seen(st);
        if st.ended() {
            return Ok(Again::Exited);
        }
        if st.is_syscall_stop() && req::syscall_entry(tid) {
            req::interrupt(tid)?;
            req::syscall(tid, 0)?;
            continue;
        }
        match signal_of(st) {
            // A trap instruction's: back on it (it traps again).
            Some(libc::SIGTRAP) if run != Run::Step && rewind_trap(tid) => {}
            Some(s) if faulted(tid, s) || run == Run::Step && s == libc::SIGTRAP => {}
            Some(s) => kept = s,
            None => {}
        }
        if run == Run::Step && trap_pending(tid) || run != Run::Step && trap_queued(tid) {
            // The step's trap, or a trap instruction's, queued: taken now
            // (a synchronous signal, dequeued first, before any code
            // runs), not delivered; a trap instruction's thread back on it.
            req::cont(tid, 0)?;
            let Ok(st) = wait_for(tid, until)? else { return Ok(Again::Running) };
            seen(st);
            if st.ended() {
                return Ok(Again::Exited);
            }
            match signal_of(st) {
                Some(libc::SIGTRAP) if run != Run::Step => {
                    rewind_trap(tid);
                }
                Some(libc::SIGTRAP) | None => {}
                Some(s) => kept = s,
            }
        }
        return Ok(Again::Stopped(kept));
    }
}
