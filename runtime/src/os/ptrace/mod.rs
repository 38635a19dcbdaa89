//! The one module that calls ptrace: stopping every thread of a process,
//! reading and writing its registers and memory, and executing system calls
//! inside it. Pass 5 builds injection on top of this.
//!
//! Life cycle: [`Stopped::attach`] seizes and interrupts every thread (and
//! threads created meanwhile) and returns a value whose `Drop` detaches them
//! again; the normal path calls [`Stopped::detach`]. A signal that arrived
//! while a thread was stopped is delivered again at detach, so the target
//! loses nothing.
//!
//! Remote system calls and calls must leave the target whole whatever
//! instant the tracer dies at (it may be SIGKILLed mid-attach). Once the
//! session's stub is in place ([`Stopped::install_stub`]:
//! `arch::native::stub`, in slack bytes past the program's code or a page
//! of its own), a system call runs there: the thread's registers are
//! saved, the state it must resume in is written into the stub's block
//! first (with a system call it was interrupted in set to restart, as the
//! kernel would), then its registers point at the stub's `syscall`; the
//! tracer follows with `PTRACE_SYSCALL` to the call's exit stop, reads
//! `rax` and puts the saved registers back itself (so the kernel restarts
//! an interrupted call as usual). A dead tracer leaves the thread to run
//! the stub on: the call, then every register back and a jump to where it
//! was. A called function ([`Stopped::call`]: the crash handler's
//! installation, lifecycle probes) returns into the stub the same way.
//! Threads are seized with `PTRACE_O_TRACESYSGOOD`: without it, a thread
//! in a system-call stop whose tracer dies sends itself SIGTRAP. No trap
//! flag and no `int3` is left for a dead tracer's thread to hit.
//!
//! A command (`-c`) is started by `os::process::spawn_traced`, seized
//! before its exec (not `PTRACE_TRACEME`, whose exec stop is a SIGTRAP a
//! dead tracer leaves to be delivered), and run to its entry point
//! through an entry marker (`session::spawn`'s `entry_by_marker`), not an `int3`.
//!
//! Before the stub exists, and for its own removal when it has a page of
//! its own, the old recipe: put `syscall` (0f 05) at the thread's
//! instruction pointer, load the call's registers with `orig_rax = -1`
//! (so the kernel does not treat our call as the restart of a syscall the
//! thread was blocked in), follow it with `PTRACE_SYSCALL` to its exit
//! stop (as the stub's: no trap flag for a dying tracer to leave set),
//! read `rax`, restore the two bytes and every register; calls return to
//! an `int3` in the session's code.
//!
//! The target cannot wedge the tracer (invariant 6). Every system call and
//! call has a deadline (`SYSCALL_SECS`, `CALL_SECS`): past it the thread
//! is interrupted (`PTRACE_INTERRUPT`; a system call waiting in the kernel
//! returns, a seccomp listener's wait included) and put back, and the
//! operation fails ([`PtraceError::TimedOut`]). A fault where the thread
//! runs for us (the target made the stub's page non-executable, or
//! rewrote it) ends the operation at once ([`PtraceError::Faulted`]): the
//! thread is put back and the signal, ours, is never delivered. While an
//! operation runs, and only then, the thread's seccomp filters are
//! suspended (`PTRACE_O_SUSPEND_SECCOMP`, which the kernel grants a tracer
//! with `CAP_SYS_ADMIN` in the initial user namespace that is not itself
//! filtered): the program's filters may not hold, refuse or kill our calls,
//! and keep applying to its own. Where the kernel refuses, the deadline
//! remains. Every wait on a thread also gives up once SIGINT or SIGTERM
//! has come and the operation has run `GRACE` (`sys::stop_requested`):
//! the thread is stopped again and put back, and attach or detach ends
//! with [`PtraceError::Interrupted`] (the session then ends as on any
//! ^C). A thread that does not stop again even then (a wait in the kernel
//! that signals do not break) is left to finish through the stub, which
//! puts it back by itself ([`PtraceError::Abandoned`]); the stub then
//! stays. The waits poll (`waitpid` cannot also wait for a flag):
//! yielding for the first microseconds, where the stops come, then
//! sleeping longer and longer, up to 5 ms. [`Thread`] guards one thread
//! alone (`.itrace` single-steps it while the others run);
//! [`seize_for_exec`], [`poll_exec`] and [`release`] follow a thread into
//! the program it execs.
//!
//! The files: [`Stopped`] and its attach, memory and detach in `stopped`;
//! [`Thread`], one thread alone, in `thread`; the stub in `stub`; system
//! calls and calls run in the target in `remote`; the waits, their
//! deadlines and faults in `deadline`; following an exec in `exec`; the
//! ptrace requests themselves in `req`.

mod deadline;
mod exec;
mod remote;
pub(crate) mod req;
mod stopped;
mod stub;
mod thread;

use deadline::GaveUp;
use std::io;

pub use exec::{
    detach_stopped, exec_stop, poll_exec, release, run_until_mapped, seize_for_exec, seize_for_open, wait_exec,
    ExecWait, MapWait,
};
pub use stopped::Stopped;
pub use stub::StubPlace;
pub use thread::{Step, Thread};

#[derive(Debug, thiserror::Error)]
pub enum PtraceError {
    #[error("no process with pid {0}")]
    NoProcess(i32),
    #[error(
        "ptrace(PTRACE_SEIZE) on pid {pid} failed: Operation not permitted (run as root, or allow \
         tracing: `sysctl kernel.yama.ptrace_scope=0`, or give the tracer CAP_SYS_PTRACE)"
    )]
    Permission { pid: i32 },
    #[error("pid {pid} is already being traced by pid {tracer} (a debugger or another tracer)")]
    AlreadyTraced { pid: i32, tracer: i32 },
    #[error("ptrace({op}) on thread {tid} failed: {source}")]
    Call { op: &'static str, tid: i32, source: io::Error },
    #[error("ptrace(PTRACE_SEIZE) failed: {0}")]
    Seize(nix::errno::Errno),
    #[error("waiting for thread {tid} failed: {source}")]
    Wait { tid: i32, source: io::Error },
    #[error("thread {tid} exited while stopped")]
    Exited { tid: i32 },
    #[error("{op} of {len} bytes at {addr:#x} in pid {pid} failed: {source}")]
    Memory { op: &'static str, pid: i32, addr: u64, len: usize, source: io::Error },
    #[error("the {op} in thread {tid} of pid {pid} faulted: {signal} at {pc:#x}; the thread was put back as it was")]
    Faulted { op: String, tid: i32, pid: i32, signal: String, pc: u64 },
    #[error(
        "the {op} in thread {tid} of pid {pid} did not finish within {secs} s (held up by the target); it was \
         interrupted and the thread put back as it was"
    )]
    TimedOut { op: String, tid: i32, pid: i32, secs: u64 },
    #[error(
        "the {op} in thread {tid} of pid {pid} was given up: the tracer was asked to stop (SIGINT or SIGTERM) \
         while it waited; the thread was put back as it was"
    )]
    Interrupted { op: String, tid: i32, pid: i32 },
    #[error(
        "the {op} in thread {tid} of pid {pid} was given up ({why}) and the thread does not stop (it waits in \
         the kernel): it is left to finish on its own{after}"
    )]
    Abandoned { op: String, tid: i32, pid: i32, why: &'static str, after: &'static str },
    #[error(
        "the session's stub in pid {pid} is still in use by thread {tid}, which was left in an operation given \
         up: no other may run there"
    )]
    StubHeld { pid: i32, tid: i32 },
}

impl PtraceError {
    /// The error of an operation whose wait gave up (`why`) and whose
    /// thread was stopped again (`stopped`) or not (`after` says what
    /// becomes of it then).
    fn gave_up(why: GaveUp, stopped: bool, op: String, tid: i32, pid: i32, secs: u64, after: &'static str) -> Self {
        match (why, stopped) {
            (GaveUp::Deadline, true) => PtraceError::TimedOut { op, tid, pid, secs },
            (GaveUp::Signal, true) => PtraceError::Interrupted { op, tid, pid },
            (why, false) => PtraceError::Abandoned {
                op,
                tid,
                pid,
                why: match why {
                    GaveUp::Deadline => "past its deadline",
                    GaveUp::Signal => "SIGINT or SIGTERM",
                },
                after,
            },
        }
    }
}

pub use crate::arch::native::Regs;
