//! [`Thread`]: one seized and stopped thread alone (`.itrace` steps it
//! while the others run on), and the ptrace options threads are seized
//! with.

use super::deadline::{signal_of, stop_again, wait_for, Again, Run, Until};
use super::{req, PtraceError, Regs};
use crate::arch::native as arch;

/// One seized and stopped thread: a guard that detaches it (with any
/// signal it was about to get) when dropped.
/// [`Stopped`](super::Stopped) holds one per thread of a process;
/// `.itrace` seizes a single thread, the others running on, single-steps
/// it through one call, then lets it go.
pub struct Thread {
    pub(super) tid: i32,
    /// A signal that arrived meanwhile, delivered with the next step (its
    /// handler is then traced too) or at detach.
    pub(super) pending: i32,
    pub(super) detached: bool,
    /// Its ptrace options (`PTRACE_SETOPTIONS` replaces them all).
    pub(super) options: i32,
}

/// The options of a thread seized to be stopped: TRACESYSGOOD, so that a
/// thread in a system-call stop whose tracer dies resumes with an invalid
/// signal number (ignored), where without it the kernel would send itself
/// SIGTRAP and die.
const OPTIONS: i32 = libc::PTRACE_O_TRACESYSGOOD;
/// Those of a thread followed into its exec (`seize_for_exec`,
/// `process::spawn_traced`), then adopted.
pub(super) const EXEC_OPTIONS: i32 = libc::PTRACE_O_TRACEEXEC | libc::PTRACE_O_TRACESYSGOOD;

/// What a single step did.
pub enum Step {
    /// One instruction ran (or a signal handler was entered).
    Done,
    /// A signal stopped the thread first; it goes with the next step.
    Signal,
    /// The thread is gone.
    Exited,
}

impl Thread {
    /// Seize thread `tid` and stop it (PTRACE_SEIZE + PTRACE_INTERRUPT).
    /// A thread that does not stop (it waits in the kernel where signals
    /// do not reach: a vfork's parent, a killable wait) is waited for
    /// until ^C.
    pub fn seize(tid: i32) -> Result<Thread, PtraceError> {
        req::seize(tid, nix::sys::ptrace::Options::from_bits_retain(OPTIONS)).map_err(PtraceError::Seize)?;
        let mut t = Thread { tid, pending: 0, detached: false, options: OPTIONS };
        req::interrupt(tid)?;
        let st = match wait_for(tid, Until::signalled())? {
            Ok(st) => st,
            Err(_) => {
                // Seized, not stopped: it cannot be detached; the kernel
                // lets it go when the tracer exits.
                t.detached = true;
                return Err(PtraceError::Abandoned {
                    op: "stop (PTRACE_INTERRUPT)".into(),
                    tid,
                    pid: tgid_of(tid),
                    why: "SIGINT or SIGTERM",
                    after: " (the kernel lets it go when the tracer exits)",
                });
            }
        };
        if st.ended() {
            t.detached = true;
            return Err(PtraceError::Exited { tid });
        }
        let mut st = st;
        let mut dequeued = false;
        if signal_of(st).is_none() && super::deadline::trap_queued(tid) {
            dequeued = true;
            // A trap instruction's SIGTRAP queued behind the interrupt's
            // stop: taken now (it is dequeued before any code runs).
            req::cont(tid, 0)?;
            st = match wait_for(tid, Until::signalled())? {
                Ok(st) if !st.ended() => st,
                _ => {
                    t.detached = true;
                    return Err(PtraceError::Exited { tid });
                }
            };
        }
        match signal_of(st) {
            // A trap instruction's (a trap probe's): the thread is put
            // back on it, to trap again once it goes on.
            // One sent (kill, raise) that this took from the queue: the
            // thread still gets it.
            Some(libc::SIGTRAP) => {
                if !super::deadline::rewind_trap(tid) && dequeued {
                    t.pending = libc::SIGTRAP;
                }
            }
            Some(sig) => t.pending = sig,
            None => {}
        }
        Ok(t)
    }

    pub fn tid(&self) -> i32 {
        self.tid
    }

    pub fn regs(&self) -> Result<Regs, PtraceError> {
        req::get_regs(self.tid)
    }

    pub fn set_regs(&self, r: &Regs) -> Result<(), PtraceError> {
        req::set_regs(self.tid, r)
    }

    /// The thread's vector registers as the architecture's register set
    /// holds them (`arch::VECTOR_REGSET`); empty where it has none.
    pub fn vector_regs(&self) -> Result<Vec<u8>, PtraceError> {
        let Some(nt) = arch::VECTOR_REGSET else { return Ok(Vec::new()) };
        let mut buf = vec![0u8; 4096];
        let n = req::get_regset(self.tid, nt, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// Execute one instruction.
    /// The thread's own code: as long as it takes (a system call that
    /// waits), but not past ^C, which stops it again where it is.
    pub fn step(&mut self) -> Result<Step, PtraceError> {
        let tid = self.tid;
        let mut sig = std::mem::take(&mut self.pending);
        let until = Until::signalled();
        loop {
            req::step(tid, sig)?;
            sig = 0;
            let st = match wait_for(tid, until)? {
                Ok(st) => st,
                Err(why) => {
                    let pid = tgid_of(tid);
                    let stopped = match stop_again(tid, Run::Step, &mut |_| {})? {
                        Again::Stopped(s) => {
                            self.pending = s;
                            true
                        }
                        Again::Exited => {
                            self.detached = true;
                            return Ok(Step::Exited);
                        }
                        Again::Running => {
                            self.detached = true;
                            false
                        }
                    };
                    let after = " (the kernel lets it go when the tracer exits)";
                    return Err(PtraceError::gave_up(why, stopped, "single step".into(), tid, pid, 0, after));
                }
            };
            if st.ended() {
                self.detached = true;
                return Ok(Step::Exited);
            }
            match signal_of(st) {
                Some(libc::SIGTRAP) => return Ok(Step::Done),
                Some(s) => {
                    self.pending = s;
                    return Ok(Step::Signal);
                }
                // An interrupt's stop left from before: not the step's.
                None => {}
            }
        }
    }

    /// Let the thread run on untraced.
    pub fn detach(mut self) -> Result<(), PtraceError> {
        self.let_go()
    }

    /// Detach once, delivering the pending signal; a thread already gone
    /// (ESRCH) is no error.
    pub(super) fn let_go(&mut self) -> Result<(), PtraceError> {
        if std::mem::replace(&mut self.detached, true) {
            return Ok(());
        }
        match req::detach(self.tid, self.pending) {
            Err(PtraceError::Call { source, .. }) if source.raw_os_error() == Some(libc::ESRCH) => {
                reap_exit(self.tid);
                Ok(())
            }
            r => r,
        }
    }
}

impl Drop for Thread {
    fn drop(&mut self) {
        let _ = self.let_go();
    }
}

/// A thread we traced that could not be detached (ESRCH): if it died
/// meanwhile (killed while we held it), its exit goes to us, its tracer,
/// before its parent: take it, so that the parent can reap it (a parent
/// waiting for it would wait for ever). One that stopped again is let go.
/// Our own child (the command) is left to the session, which waits for
/// it itself.
fn reap_exit(tid: i32) {
    let ours = std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("PPid:").map(|p| p.trim().parse::<u32>().ok())))
        .flatten()
        == Some(std::process::id());
    if ours {
        return;
    }
    let mut status = 0;
    // On its way out (a zombie, or exiting): its exit comes, so wait for
    // it; otherwise only take what is there.
    let flags = if crate::os::proc::ending(tid) { libc::__WALL } else { libc::WNOHANG | libc::__WALL };
    // SAFETY: waitpid on one thread id we trace.
    let r = unsafe { libc::waitpid(tid, &mut status, flags) };
    if r == tid && libc::WIFSTOPPED(status) {
        let _ = req::detach(tid, 0);
    }
}

/// The process of thread `tid` (`Tgid` in `/proc/TID/status`), for errors;
/// the thread's own id if that cannot be read.
fn tgid_of(tid: i32) -> i32 {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Tgid:")?.trim().parse().ok()))
        .unwrap_or(tid)
}
