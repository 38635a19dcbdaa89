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
//! through an entry marker (`target::entry_by_marker`), not an `int3`.
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

use super::wait::Status;
use crate::arch::native as arch;
use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

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

/// Where a session's remote-operation stub is: in slack bytes of the
/// program (their original bytes kept), or a page of its own.
#[derive(Clone, Debug)]
pub struct StubPlace {
    pub at: u64,
    pub original: Option<Vec<u8>>,
}

/// An operation of the tracer's in a thread of the target.
struct Op<'a> {
    /// What it is, for errors ("injected system call munmap").
    what: &'a dyn Fn() -> String,
    /// Its deadline.
    secs: u64,
    /// How the thread is run meanwhile.
    run: Run,
    /// It runs in the session's stub (which puts the thread back by
    /// itself if it is left there).
    stub: bool,
    /// It is a system call (whose result may say it was interrupted).
    syscall: bool,
}

/// A process with every thread stopped under ptrace.
pub struct Stopped {
    pid: i32,
    /// Its threads, each detached (with the signal it must get back) when
    /// dropped.
    threads: BTreeMap<i32, Thread>,
    mem: std::fs::File,
    /// The session's remote-operation stub in the target
    /// (`arch::native::stub`), once mapped: system calls and calls then
    /// survive the tracer's death.
    stub: Option<u64>,
}

use super::proc::{tasks, tracer_of};

/// How long an injected system call may take. The tracer's are short
/// (memfd_create, ftruncate, mmap, mprotect, munmap, openat, close: micro-
/// to milliseconds); one still running after this is held up by the
/// target (a seccomp listener that never answers, where the filters could
/// not be suspended).
const SYSCALL_SECS: u64 = 2;
/// How long a called function may run: the session's own code, which
/// makes system calls of its own (the crash handler's installation) or
/// runs the script's lifecycle probes (bounded by MAXACTION, not by
/// microseconds).
const CALL_SECS: u64 = 5;
/// How long one instruction stepped for the tracer (`Stopped::step`) may
/// take: a system call's time.
const STEP_SECS: u64 = SYSCALL_SECS;
/// After SIGINT or SIGTERM (`sys::stop_requested`), how long an operation
/// may still run before its wait gives up: each of the tracer's takes far
/// less, so a ^C during a normal attach still lets every one finish (the
/// session then ends cleanly), while one the target holds up is given up
/// within a second of the signal.
const GRACE: Duration = Duration::from_millis(250);
/// How long a thread may take to stop once interrupted: microseconds,
/// unless it waits in the kernel where signals do not reach.
const STOP_WITHIN: Duration = Duration::from_millis(500);

/// When a wait for a thread's next stop gives up.
#[derive(Clone, Copy)]
struct Until {
    /// When the operation began.
    since: Instant,
    /// Its deadline. None for the thread's own code (a program starting,
    /// a call single-stepped), which may rightly take as long as it takes.
    deadline: Option<Instant>,
    /// Whether SIGINT or SIGTERM ends the wait (after [`GRACE`]).
    signals: bool,
}

impl Until {
    /// An operation of the tracer's: `secs` at most, or until ^C.
    fn within(secs: u64) -> Until {
        let now = Instant::now();
        Until { since: now, deadline: Some(now + Duration::from_secs(secs)), signals: true }
    }

    /// The thread's own code: until ^C.
    fn signalled() -> Until {
        Until { since: Instant::now(), deadline: None, signals: true }
    }
}

/// Why a wait gave up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GaveUp {
    Deadline,
    Signal,
}

/// The next stop of thread `tid` (its wait status), or why the wait gave
/// up. Polls: yielding for the first 100 µs (nearly every stop comes by
/// then), then sleeping longer and longer, at most 5 ms.
fn wait_for(tid: i32, until: Until) -> Result<Result<Status, GaveUp>, PtraceError> {
    let start = Instant::now();
    let mut pause = Duration::from_micros(50);
    loop {
        match super::wait::wait(tid, false) {
            Ok(Some((_, status))) => return Ok(Ok(status)),
            Ok(None) => {}
            Err(source) => return Err(PtraceError::Wait { tid, source }),
        }
        let now = Instant::now();
        if until.deadline.is_some_and(|d| now >= d) {
            return Ok(Err(GaveUp::Deadline));
        }
        if until.signals && now >= until.since + GRACE && super::sys::stop_requested() {
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
enum Run {
    Syscall,
    Cont,
    Step,
}

fn resume(tid: i32, run: Run, sig: i32) -> Result<(), PtraceError> {
    match run {
        Run::Syscall => req::syscall(tid, sig),
        Run::Cont => req::cont(tid, sig),
        Run::Step => req::step(tid, sig),
    }
}

/// The signal of a signal-delivery stop (SIGTRAP included: an `int3`, a
/// single step's end, or one sent); None for event and system-call stops.
fn signal_of(st: Status) -> Option<i32> {
    st.stop_signal().filter(|&s| st.event() == 0 && s != libc::SIGTRAP | 0x80)
}

/// Whether thread `tid`, stopped to receive `sig`, faulted: a signal the
/// CPU raised at an instruction (`si_code` > 0), not one sent (`kill`,
/// `tgkill`, `sigqueue`: `si_code` <= 0). Going on would fault again.
fn faulted(tid: i32, sig: i32) -> bool {
    [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGTRAP].contains(&sig)
        && req::signal_code(tid).is_some_and(|code| code > 0)
}

/// Whether SIGTRAP waits in thread `tid`'s own pending set (`SigPnd` in
/// `/proc/TID/status`): a single-stepped system call's trap, queued behind
/// an interrupt's stop.
fn trap_pending(tid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()
        .and_then(|s| s.lines().find_map(|l| Some(u64::from_str_radix(l.strip_prefix("SigPnd:")?.trim(), 16).ok())))
        .flatten()
        .is_some_and(|set| set & 1 << (libc::SIGTRAP - 1) != 0)
}

/// What [`stop_again`] did.
enum Again {
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
fn stop_again(tid: i32, run: Run, seen: &mut dyn FnMut(Status)) -> Result<Again, PtraceError> {
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
            Some(s) if faulted(tid, s) || run == Run::Step && s == libc::SIGTRAP => {}
            Some(s) => kept = s,
            None => {}
        }
        if run == Run::Step && trap_pending(tid) {
            // The step's trap, queued: taken now (a synchronous signal,
            // dequeued first, before any code runs), not delivered.
            req::cont(tid, 0)?;
            let Ok(st) = wait_for(tid, until)? else { return Ok(Again::Running) };
            seen(st);
            if st.ended() {
                return Ok(Again::Exited);
            }
            if let Some(s) = signal_of(st).filter(|&s| s != libc::SIGTRAP) {
                kept = s;
            }
        }
        return Ok(Again::Stopped(kept));
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

/// The name of system call `nr`, for errors: the ones the tracer makes.
fn syscall_name(nr: i64) -> String {
    let name = match nr {
        libc::SYS_memfd_create => "memfd_create",
        libc::SYS_ftruncate => "ftruncate",
        libc::SYS_mmap => "mmap",
        libc::SYS_mprotect => "mprotect",
        libc::SYS_munmap => "munmap",
        libc::SYS_openat => "openat",
        libc::SYS_close => "close",
        _ => return format!("injected system call {nr}"),
    };
    format!("injected system call {name}")
}

/// The kernel refused `PTRACE_O_SUSPEND_SECCOMP` once (the tracer lacks
/// `CAP_SYS_ADMIN` in the initial user namespace, or is itself under
/// seccomp): not asked again; the deadlines remain.
static SUSPEND_REFUSED: AtomicBool = AtomicBool::new(false);

/// Stubs a thread was left running in ([`PtraceError::Abandoned`]): pid,
/// address, thread. Their resume block is that thread's until it leaves,
/// so no other operation may use them, and they are never taken out.
static HELD_STUBS: Mutex<Vec<(i32, u64, i32)>> = Mutex::new(Vec::new());

/// The thread left running in process `pid`'s stub at `at`, if any.
fn stub_held(pid: i32, at: u64) -> Option<i32> {
    let held = HELD_STUBS.lock().unwrap_or_else(|e| e.into_inner());
    held.iter().find(|&&(p, a, _)| p == pid && a == at).map(|&(_, _, tid)| tid)
}

/// The ptrace requests, one function each: nix where it has them; raw
/// libc for the requests that carry a signal to deliver (`PTRACE_CONT`,
/// `PTRACE_SINGLESTEP`, `PTRACE_DETACH`), because nix's `Signal` has no
/// real-time signals and a tracer must pass every signal on.
pub(crate) mod req {
    use super::{PtraceError, Regs};
    use nix::sys::ptrace::{self, Options};
    use nix::unistd::Pid;

    fn call(op: &'static str, tid: i32, r: nix::Result<()>) -> Result<(), PtraceError> {
        r.map_err(|e| PtraceError::Call { op, tid, source: e.into() })
    }

    /// `PTRACE_SEIZE` (with `options`): traced, not stopped.
    pub fn seize(tid: i32, options: Options) -> nix::Result<()> {
        ptrace::seize(Pid::from_raw(tid), options)
    }

    /// `PTRACE_SETOPTIONS` with raw option bits (nix's `Options` lacks
    /// `PTRACE_O_SUSPEND_SECCOMP`, which `from_bits_retain` keeps).
    pub fn set_options(tid: i32, options: i32) -> nix::Result<()> {
        ptrace::setoptions(Pid::from_raw(tid), Options::from_bits_retain(options))
    }

    /// `PTRACE_INTERRUPT`: stop a seized thread.
    pub fn interrupt(tid: i32) -> Result<(), PtraceError> {
        call("PTRACE_INTERRUPT", tid, ptrace::interrupt(Pid::from_raw(tid)))
    }

    pub fn get_regs(tid: i32) -> Result<Regs, PtraceError> {
        ptrace::getregs(Pid::from_raw(tid)).map_err(|e| PtraceError::Call {
            op: "PTRACE_GETREGS",
            tid,
            source: e.into(),
        })
    }

    pub fn set_regs(tid: i32, r: &Regs) -> Result<(), PtraceError> {
        call("PTRACE_SETREGS", tid, ptrace::setregs(Pid::from_raw(tid), *r))
    }

    /// The register set `nt` (an `NT_*` note type) into `buf`: the bytes
    /// the kernel gave. Raw `libc::ptrace`: nix reads only `NT_PRSTATUS`
    /// and `NT_PRFPREG` sets.
    pub fn get_regset(tid: i32, nt: i32, buf: &mut [u8]) -> Result<usize, PtraceError> {
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        // SAFETY: the kernel writes at most iov_len bytes into buf and
        // updates iov_len.
        let r = unsafe { libc::ptrace(libc::PTRACE_GETREGSET, tid, nt as usize, &mut iov as *mut libc::iovec) };
        if r < 0 {
            return Err(PtraceError::Call { op: "PTRACE_GETREGSET", tid, source: std::io::Error::last_os_error() });
        }
        Ok(iov.iov_len)
    }

    /// Whether the thread is at a system call's entry stop
    /// (`PTRACE_GET_SYSCALL_INFO`: raw `libc::ptrace`, not in nix).
    pub fn syscall_entry(tid: i32) -> bool {
        let mut info = [0u8; 88];
        // SAFETY: the kernel writes at most the size passed into `info`.
        let r = unsafe { libc::ptrace(libc::PTRACE_GET_SYSCALL_INFO, tid, info.len(), info.as_mut_ptr()) };
        r > 0 && info[0] == libc::PTRACE_SYSCALL_INFO_ENTRY
    }

    /// The `si_code` of the signal the thread is stopped for.
    pub fn signal_code(tid: i32) -> Option<i32> {
        ptrace::getsiginfo(Pid::from_raw(tid)).ok().map(|i| i.si_code)
    }

    fn raw(op: &'static str, req: libc::c_uint, tid: i32, sig: i32) -> Result<(), PtraceError> {
        // SAFETY: these requests take the signal number as data, no buffers.
        if unsafe { libc::ptrace(req, tid, 0usize, sig as usize) } < 0 {
            return Err(PtraceError::Call { op, tid, source: std::io::Error::last_os_error() });
        }
        Ok(())
    }

    /// Resume, delivering `sig` (0: none).
    pub fn cont(tid: i32, sig: i32) -> Result<(), PtraceError> {
        raw("PTRACE_CONT", libc::PTRACE_CONT, tid, sig)
    }

    /// Resume until the next system-call entry or exit, delivering `sig`
    /// (0: none).
    pub fn syscall(tid: i32, sig: i32) -> Result<(), PtraceError> {
        raw("PTRACE_SYSCALL", libc::PTRACE_SYSCALL, tid, sig)
    }

    /// Run one instruction, delivering `sig` (0: none) first.
    pub fn step(tid: i32, sig: i32) -> Result<(), PtraceError> {
        raw("PTRACE_SINGLESTEP", libc::PTRACE_SINGLESTEP, tid, sig)
    }

    /// Stop tracing, delivering `sig` (0: none).
    pub fn detach(tid: i32, sig: i32) -> Result<(), PtraceError> {
        raw("PTRACE_DETACH", libc::PTRACE_DETACH, tid, sig)
    }
}

impl Stopped {
    /// Seize and stop every thread of `pid`.
    pub fn attach(pid: i32) -> Result<Stopped, PtraceError> {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() || pid <= 0 {
            return Err(PtraceError::NoProcess(pid));
        }
        if let Some(tracer) = tracer_of(pid) {
            return Err(PtraceError::AlreadyTraced { pid, tracer });
        }
        let mem = super::proc::mem(pid, true).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => PtraceError::NoProcess(pid),
            io::ErrorKind::PermissionDenied => PtraceError::Permission { pid },
            _ => PtraceError::Memory { op: "open /proc/PID/mem", pid, addr: 0, len: 0, source: e },
        })?;
        let mut s = Stopped { pid, threads: BTreeMap::new(), mem, stub: None };
        // Threads may be created while we stop the others: repeat until a
        // scan finds no new one (a stopped thread cannot create any), or
        // ^C (a target that makes threads as fast as they are stopped).
        let since = Instant::now();
        loop {
            if since.elapsed() >= GRACE && super::sys::stop_requested() {
                return Err(PtraceError::Interrupted { op: "attach".into(), tid: pid, pid });
            }
            let now = tasks(pid).map_err(|_| PtraceError::NoProcess(pid))?;
            let new: Vec<i32> = now.iter().copied().filter(|t| !s.threads.contains_key(t)).collect();
            if new.is_empty() {
                break;
            }
            for tid in new {
                match Thread::seize(tid) {
                    Ok(t) => {
                        s.threads.insert(tid, t);
                    }
                    // The thread just exited.
                    Err(PtraceError::Seize(nix::errno::Errno::ESRCH)) | Err(PtraceError::Exited { .. }) => {}
                    Err(PtraceError::Seize(nix::errno::Errno::EPERM)) => {
                        return Err(match tracer_of(pid) {
                            Some(tracer) => PtraceError::AlreadyTraced { pid, tracer },
                            None => PtraceError::Permission { pid },
                        })
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        if s.threads.is_empty() {
            return Err(PtraceError::NoProcess(pid));
        }
        Ok(s)
    }

    /// Take over a child that is already traced and stopped (spawned with
    /// `PTRACE_TRACEME`, stopped at its `exec`): one thread.
    pub fn adopt(pid: i32) -> Result<Stopped, PtraceError> {
        let mem = super::proc::mem(pid, true).map_err(|source| PtraceError::Memory {
            op: "open /proc/PID/mem",
            pid,
            addr: 0,
            len: 0,
            source,
        })?;
        let mut threads = BTreeMap::new();
        threads.insert(pid, Thread { tid: pid, pending: 0, detached: false, options: EXEC_OPTIONS });
        Ok(Stopped { pid, threads, mem, stub: None })
    }

    /// Let thread `tid` run until it executes the `int3` placed at `at`
    /// (the caller saved the byte), then put its instruction pointer back
    /// on `at`. The program's own code runs meanwhile (it is starting): as
    /// long as it takes, but not past ^C.
    pub fn run_to_trap(&mut self, tid: i32, at: u64) -> Result<(), PtraceError> {
        let until = Until::signalled();
        let mut sig = 0;
        loop {
            req::cont(tid, sig)?;
            sig = 0;
            let st = match wait_for(tid, until)? {
                Ok(st) => st,
                Err(why) => return Err(self.stop_given_up(tid, Run::Cont, why, "run to the program's entry", 0)),
            };
            if st.ended() {
                return Err(PtraceError::Exited { tid });
            }
            match signal_of(st) {
                Some(libc::SIGTRAP) => {
                    let mut r = self.regs(tid)?;
                    if arch::pc(&r) == arch::pc_after_trap(at) {
                        arch::set_pc(&mut r, at);
                        return self.set_regs(tid, &r);
                    }
                }
                // Delivered with the next continue (the program is starting).
                Some(s) => sig = s,
                None => {}
            }
        }
    }

    /// Step thread `tid` one instruction (within `STEP_SECS`: the
    /// instruction may be a system call that waits).
    pub fn step(&mut self, tid: i32) -> Result<(), PtraceError> {
        let until = Until::within(STEP_SECS);
        loop {
            req::step(tid, 0)?;
            let st = match wait_for(tid, until)? {
                Ok(st) => st,
                Err(why) => return Err(self.stop_given_up(tid, Run::Step, why, "single step", STEP_SECS)),
            };
            if st.ended() {
                return Err(PtraceError::Exited { tid });
            }
            match signal_of(st) {
                Some(libc::SIGTRAP) => return Ok(()),
                // A signal first: kept, and the step done (its handler
                // is not entered: the signal waits for the detach).
                Some(sig) => {
                    self.keep_signal(tid, sig);
                    return Ok(());
                }
                // An interrupt's stop left from before: not the step's.
                None => {}
            }
        }
    }

    /// A wait on the thread's own code (not an operation of ours, whose
    /// registers would be put back) gave up: the thread is stopped again,
    /// where it is, and the error says why.
    fn stop_given_up(&mut self, tid: i32, run: Run, why: GaveUp, op: &str, secs: u64) -> PtraceError {
        let again = stop_again(tid, run, &mut |_| {});
        let stopped = match again {
            Ok(Again::Stopped(sig)) => {
                if sig != 0 {
                    self.keep_signal(tid, sig);
                }
                true
            }
            Ok(Again::Exited) => return PtraceError::Exited { tid },
            Ok(Again::Running) => {
                self.forget(tid);
                false
            }
            Err(e) => return e,
        };
        PtraceError::gave_up(why, stopped, op.into(), tid, self.pid, secs, "")
    }

    /// A thread left running (it would not stop): out of this value's
    /// threads, never detached by it (it cannot be, running; the kernel
    /// lets it go when the tracer exits).
    fn forget(&mut self, tid: i32) {
        if let Some(mut t) = self.threads.remove(&tid) {
            t.detached = true;
        }
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    pub fn threads(&self) -> impl Iterator<Item = i32> + '_ {
        self.threads.keys().copied()
    }

    pub fn regs(&self, tid: i32) -> Result<Regs, PtraceError> {
        req::get_regs(tid)
    }

    pub fn set_regs(&self, tid: i32, r: &Regs) -> Result<(), PtraceError> {
        req::set_regs(tid, r)
    }

    /// Up to `len` bytes of thread `tid`'s register set `nt` (an `NT_*`
    /// note type), as the kernel gave them.
    pub fn regset(&self, tid: i32, nt: i32, len: usize) -> Result<Vec<u8>, PtraceError> {
        let mut buf = vec![0u8; len];
        let n = req::get_regset(tid, nt, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// Thread `tid`'s blocked signals (`PTRACE_GETSIGMASK`): raw
    /// `libc::ptrace`, which nix does not wrap.
    pub fn sigmask(&self, tid: i32) -> Result<u64, PtraceError> {
        let mut mask = 0u64;
        // SAFETY: the kernel writes 8 bytes (the size passed) into `mask`.
        let r = unsafe { libc::ptrace(libc::PTRACE_GETSIGMASK, tid, 8usize, &mut mask as *mut u64) };
        if r < 0 {
            return Err(PtraceError::Call { op: "PTRACE_GETSIGMASK", tid, source: std::io::Error::last_os_error() });
        }
        Ok(mask)
    }

    /// A signal thread `tid` was about to get: delivered at detach.
    fn keep_signal(&mut self, tid: i32, sig: i32) {
        if let Some(t) = self.threads.get_mut(&tid) {
            t.pending = sig;
        }
    }

    pub fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, PtraceError> {
        let mut buf = vec![0u8; len];
        self.mem.read_exact_at(&mut buf, addr).map_err(|source| PtraceError::Memory {
            op: "read",
            pid: self.pid,
            addr,
            len,
            source,
        })?;
        Ok(buf)
    }

    /// Write through `/proc/PID/mem`, which also writes read-only (code) pages.
    pub fn write(&self, addr: u64, bytes: &[u8]) -> Result<(), PtraceError> {
        self.mem.write_all_at(bytes, addr).map_err(|source| PtraceError::Memory {
            op: "write",
            pid: self.pid,
            addr,
            len: bytes.len(),
            source,
        })
    }

    /// Put the session's remote-operation stub (`arch::native::stub`) into
    /// the target and make every later system call and call go through
    /// it. `slack`: executable bytes the program never uses (past the end
    /// of its code segment, in that segment's last page: `inject::slack`),
    /// kept to be put back; without, a page of its own is mapped, that
    /// `mmap` being made the old way (the one moment the tracer's death
    /// could still hurt the thread). None when neither is possible (calls
    /// go on the old way).
    pub fn install_stub(&mut self, slack: Option<u64>) -> Result<Option<StubPlace>, PtraceError> {
        use crate::arch::native::stub;
        let code = stub::code();
        // Slack in a page the program made non-executable (mprotect) would
        // fault at every use: a page of its own then. (Made so later, the
        // operations fault and say so: `Faulted`.)
        let executable = |at: u64| {
            super::proc::maps(self.pid)
                .is_ok_and(|maps| maps.iter().any(|m| m.executable && m.start <= at && at + stub::SIZE <= m.end))
        };
        if let Some(at) = slack.filter(|&at| executable(at)) {
            // (A page the kernel will not let us write: a page of its own.)
            if let Ok(original) = self.read(at, stub::SIZE as usize) {
                if self.write(at, &code).is_ok() {
                    self.stub = Some(at);
                    return Ok(Some(StubPlace { at, original: Some(original) }));
                }
            }
        }
        let tid = self.main_thread();
        let page = stub::SIZE.next_multiple_of(4096);
        let prot = (libc::PROT_READ | libc::PROT_EXEC) as u64;
        let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
        let at = self.syscall(tid, libc::SYS_mmap, [0, page, prot, flags, u64::MAX, 0])?;
        if (-4095..0).contains(&at) {
            return Ok(None);
        }
        self.write(at as u64, &code)?;
        self.stub = Some(at as u64);
        Ok(Some(StubPlace { at: at as u64, original: None }))
    }

    /// Use the stub another `Stopped` of the same session installed.
    pub fn use_stub(&mut self, place: Option<&StubPlace>) {
        self.stub = place.map(|p| p.at);
    }

    /// Take the stub out (last of all): its bytes put back, or its page
    /// unmapped (the old way: its `munmap` cannot run in it).
    pub fn remove_stub(&mut self, place: &StubPlace) -> Result<(), PtraceError> {
        if let Some(tid) = stub_held(self.pid, place.at) {
            return Err(PtraceError::StubHeld { pid: self.pid, tid });
        }
        self.stub = None;
        match &place.original {
            Some(bytes) => self.write(place.at, bytes),
            None => {
                let page = crate::arch::native::stub::SIZE.next_multiple_of(4096);
                let tid = self.main_thread();
                self.syscall(tid, libc::SYS_munmap, [place.at, page, 0, 0, 0, 0]).map(|_| ())
            }
        }
    }

    /// Execute system call `nr` with `args` in thread `tid`; returns the
    /// raw result (a negative errno on failure). Through the stub when the
    /// session has one; else the old way: `syscall` written at the
    /// thread's pc (its bytes put back after).
    pub fn syscall(&mut self, tid: i32, nr: i64, args: [u64; 6]) -> Result<i64, PtraceError> {
        if let Some(stub) = self.stub {
            return self.syscall_by_stub(tid, stub, nr, args);
        }
        let saved = self.regs(tid)?;
        let ip = arch::pc(&saved);
        let bytes = self.read(ip, arch::SYSCALL_LEN)?;
        self.write(ip, arch::syscall_instruction())?;
        let mut r = saved;
        arch::set_syscall(&mut r, nr, args);
        let result = self.run_syscall(tid, &saved, &r, ip + arch::SYSCALL_LEN as u64, nr, false);
        // Restore whatever happened: the bytes (the registers are back).
        let restore_bytes = self.write(ip, &bytes);
        let v = result?;
        restore_bytes?;
        Ok(v)
    }

    /// The system call run by the stub: the resume block written first, so
    /// that from the moment the registers point at the stub the thread can
    /// finish alone; the tracer follows it with `PTRACE_SYSCALL` to the
    /// call's exit stop (the second stop past the `syscall`), reads the
    /// result and puts the saved registers back itself (the kernel then
    /// restarts what the thread was interrupted in, as usual).
    fn syscall_by_stub(&mut self, tid: i32, stub_at: u64, nr: i64, args: [u64; 6]) -> Result<i64, PtraceError> {
        use crate::arch::native::stub;
        if let Some(held) = stub_held(self.pid, stub_at) {
            return Err(PtraceError::StubHeld { pid: self.pid, tid: held });
        }
        let saved = self.regs(tid)?;
        let block = self.resume_block(tid, &saved)?;
        self.write(stub_at + stub::BLOCK, &block)?;
        let r = stub::syscall_regs(&saved, stub_at, nr, args);
        self.run_syscall(tid, &saved, &r, stub_at + stub::AFTER_SYSCALL, nr, true)
    }

    /// Run system call `nr` set up in registers `r` (the thread's own:
    /// `saved`) to its exit stop, the second stop with the pc at `after`:
    /// its result.
    fn run_syscall(
        &mut self,
        tid: i32,
        saved: &Regs,
        r: &Regs,
        after: u64,
        nr: i64,
        stub: bool,
    ) -> Result<i64, PtraceError> {
        let mut stops = 0;
        let mut done = |st: Status, now: &Regs| {
            if st.is_syscall_stop() && arch::pc(now) == after {
                stops += 1;
                if stops == 2 {
                    return Some(arch::syscall_result(now) as u64);
                }
            }
            None
        };
        let op = Op { what: &|| syscall_name(nr), secs: SYSCALL_SECS, run: Run::Syscall, stub, syscall: true };
        self.operate(tid, saved, r, &op, &mut done).map(|v| v as i64)
    }

    /// The stub's resume block for thread `tid` stopped with `saved`
    /// (`stub::resume_block`): with the floating-point registers and the
    /// signal mask where the architecture restores those too.
    fn resume_block(&self, tid: i32, saved: &Regs) -> Result<Vec<u8>, PtraceError> {
        use crate::arch::native::stub;
        let (fp, mask) = match stub::FP_REGSET {
            Some(nt) => (self.regset(tid, nt, 1024)?, self.sigmask(tid)?),
            None => (Vec::new(), 0),
        };
        Ok(stub::resume_block(saved, &fp, mask))
    }

    /// Call the function at `func` in thread `tid` with up to six integer
    /// arguments (the platform's calling convention), below the thread's
    /// stack pointer and its red zone: returns its result. Every register
    /// is restored afterwards. With the stub, the function returns into it
    /// (which marks the return with a `getpid` the tracer stops at, and
    /// would restore the thread by itself were the tracer gone); without,
    /// to `trap` (an `int3` byte in the target).
    pub fn call(&mut self, tid: i32, func: u64, args: &[u64], trap: u64) -> Result<u64, PtraceError> {
        use crate::arch::native::stub;
        let saved = self.regs(tid)?;
        let mut r = saved;
        let via = self.stub;
        let ret = via.map_or(trap, |at| at + stub::CALL_RETURN);
        if let Some(at) = via {
            if let Some(held) = stub_held(self.pid, at) {
                return Err(PtraceError::StubHeld { pid: self.pid, tid: held });
            }
            let block = self.resume_block(tid, &saved)?;
            self.write(at + stub::BLOCK, &block)?;
        }
        if let Some(ret_at) = arch::set_call(&mut r, func, args, ret) {
            self.write(ret_at, &ret.to_le_bytes())?;
        }
        let mut marker: Option<u64> = None;
        let mut done = |st: Status, now: &Regs| match via {
            // The marker's entry stop (the result is in hand), then its
            // exit stop: only then may the registers be put back.
            Some(at) if st.is_syscall_stop() && arch::pc(now) == at + stub::AFTER_SYSCALL => match marker {
                None => {
                    marker = Some(stub::call_result(now));
                    None
                }
                Some(v) => Some(v),
            },
            None if signal_of(st) == Some(libc::SIGTRAP) && arch::pc(now) == arch::pc_after_trap(trap) => {
                Some(arch::call_result(now))
            }
            // Another stop (the function's own system calls, an event).
            _ => None,
        };
        let what = || format!("call of the function at {func:#x}");
        let run = if via.is_some() { Run::Syscall } else { Run::Cont };
        self.operate(
            tid,
            &saved,
            &r,
            &Op { what: &what, secs: CALL_SECS, run, stub: via.is_some(), syscall: false },
            &mut done,
        )
    }

    /// Run an operation of ours in thread `tid`: its registers set to `r`
    /// (its own, `saved`, put back whatever happens), its seccomp filters
    /// suspended meanwhile, resumed as `op.run` says until `done`, shown
    /// every stop, gives the result; within `op.secs`, and not past ^C
    /// ([`GRACE`]). A fault ends it; signals meanwhile are kept for the
    /// thread. A wait that gives up stops the thread again
    /// ([`stop_again`]: the operation may still end on the way, then its
    /// result counts); a thread that does not stop is left to the stub.
    fn operate(
        &mut self,
        tid: i32,
        saved: &Regs,
        r: &Regs,
        op: &Op,
        done: &mut dyn FnMut(Status, &Regs) -> Option<u64>,
    ) -> Result<u64, PtraceError> {
        let suspended = self.suspend_seccomp(tid);
        let until = Until::within(op.secs);
        let mut left = false;
        let result = (|| {
            self.set_regs(tid, r)?;
            loop {
                resume(tid, op.run, 0)?;
                let st = match wait_for(tid, until)? {
                    Ok(st) => st,
                    Err(why) => {
                        let mut late = None;
                        let again = stop_again(tid, op.run, &mut |st| {
                            if late.is_none() && !st.ended() {
                                late = req::get_regs(tid).ok().and_then(|now| done(st, &now));
                            }
                        })?;
                        let stopped = match again {
                            Again::Stopped(sig) => {
                                if sig != 0 {
                                    self.keep_signal(tid, sig);
                                }
                                true
                            }
                            Again::Exited => return Err(PtraceError::Exited { tid }),
                            Again::Running => {
                                left = true;
                                false
                            }
                        };
                        // Done on the way, at last: the result stands (not a
                        // system call's that the interrupt broke: -EINTR,
                        // -ERESTARTSYS and its kin).
                        let broken = |v: u64| op.syscall && matches!(v as i64, -516..=-512 | -4);
                        if let (Some(v), true) = (late.filter(|&v| !broken(v)), stopped) {
                            return Ok(v);
                        }
                        let after = if op.stub {
                            ": the session's stub puts it back by itself then (the stub stays)"
                        } else {
                            " with the operation's registers (it may not survive)"
                        };
                        return Err(PtraceError::gave_up(why, stopped, (op.what)(), tid, self.pid, op.secs, after));
                    }
                };
                if st.ended() {
                    return Err(PtraceError::Exited { tid });
                }
                let now = self.regs(tid)?;
                if let Some(v) = done(st, &now) {
                    return Ok(v);
                }
                match signal_of(st) {
                    // The thread faulted where it runs for us (the stub's
                    // page made non-executable, its bytes rewritten, the
                    // called code broken): going on would fault again,
                    // forever; the signal is ours, never delivered.
                    Some(sig) if faulted(tid, sig) => {
                        return Err(PtraceError::Faulted {
                            op: (op.what)(),
                            tid,
                            pid: self.pid,
                            signal: super::process::signal_name(sig),
                            pc: arch::pc(&now),
                        })
                    }
                    // Not ours: kept for the detach.
                    Some(sig) => self.keep_signal(tid, sig),
                    None => {}
                }
            }
        })();
        if left {
            // Running in the stub (or at our `syscall` bytes): it can be
            // neither put back nor detached; the stub's block is its own.
            if op.stub {
                if let Some(at) = self.stub {
                    HELD_STUBS.lock().unwrap_or_else(|e| e.into_inner()).push((self.pid, at, tid));
                }
            }
            self.forget(tid);
            return result;
        }
        let restore = self.set_regs(tid, saved);
        if suspended {
            self.resume_seccomp(tid);
        }
        let v = result?;
        restore?;
        Ok(v)
    }

    /// Suspend thread `tid`'s seccomp filters for an operation of ours
    /// (`PTRACE_O_SUSPEND_SECCOMP` added to its options): whether they are.
    /// The program's filters must not hold, refuse or kill the tracer's
    /// calls; they apply to its own again once the operation is done
    /// ([`Stopped::resume_seccomp`]), and when the tracer dies the kernel
    /// drops the option with the others.
    fn suspend_seccomp(&self, tid: i32) -> bool {
        if SUSPEND_REFUSED.load(Ordering::Relaxed) {
            return false;
        }
        let Some(t) = self.threads.get(&tid) else { return false };
        match req::set_options(tid, t.options | libc::PTRACE_O_SUSPEND_SECCOMP) {
            Ok(()) => true,
            Err(nix::errno::Errno::EPERM | nix::errno::Errno::EINVAL) => {
                SUSPEND_REFUSED.store(true, Ordering::Relaxed);
                false
            }
            Err(_) => false,
        }
    }

    /// The thread's own options back: its seccomp filters apply again.
    fn resume_seccomp(&self, tid: i32) {
        if let Some(t) = self.threads.get(&tid) {
            // ESRCH: the thread is gone (or no longer stopped by us), and
            // its filters with it.
            if let Err(e) = req::set_options(tid, t.options).or_else(|e| match e {
                nix::errno::Errno::ESRCH => Ok(()),
                e => Err(e),
            }) {
                eprintln!("warning: thread {tid}'s seccomp filters stay suspended until the tracer exits: {e}");
            }
        }
    }

    /// Let the threads whose program counter `inside` accepts run on (the
    /// others stay stopped) until they have left, then stop them again:
    /// up to `rounds` short runs (about a millisecond each). No single
    /// steps: a tracer that dies in the middle of one leaves the trap flag
    /// set, and the thread dies of SIGTRAP. Returns the threads still
    /// inside.
    pub fn run_out(&mut self, inside: &dyn Fn(u64) -> bool, rounds: u32) -> Result<Vec<i32>, PtraceError> {
        let mut left: Vec<i32> = Vec::new();
        for round in 0..=rounds {
            left.clear();
            for tid in self.threads().collect::<Vec<_>>() {
                if inside(arch::pc(&self.regs(tid)?)) {
                    left.push(tid);
                }
            }
            if left.is_empty() || round == rounds {
                break;
            }
            for &tid in &left {
                req::cont(tid, 0)?;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
            for &tid in &left {
                match self.stop_overrunning_call(tid) {
                    Ok(()) => {}
                    Err(PtraceError::Exited { .. }) => {
                        if let Some(t) = self.threads.get_mut(&tid) {
                            t.detached = true;
                        }
                        self.threads.remove(&tid);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(left)
    }

    /// A thread let run (`run_out`) ran past its time: stop it again,
    /// within [`STOP_WITHIN`] ([`stop_again`]: never at a system call's
    /// entry, where putting registers back would run the wrong call).
    fn stop_overrunning_call(&mut self, tid: i32) -> Result<(), PtraceError> {
        match stop_again(tid, Run::Cont, &mut |_| {})? {
            Again::Stopped(sig) => {
                if sig != 0 {
                    self.keep_signal(tid, sig);
                }
                Ok(())
            }
            Again::Exited => Err(PtraceError::Exited { tid }),
            Again::Running => {
                self.forget(tid);
                Err(PtraceError::Abandoned {
                    op: "wait for it to leave the session's code".into(),
                    tid,
                    pid: self.pid,
                    why: "its time was up",
                    after: "",
                })
            }
        }
    }

    /// The first thread (the main thread when it is alive).
    pub fn main_thread(&self) -> i32 {
        if self.threads.contains_key(&self.pid) {
            self.pid
        } else {
            self.threads.keys().next().copied().unwrap_or(self.pid)
        }
    }

    /// Resume every thread and stop tracing; pending signals are delivered.
    pub fn detach(mut self) -> Result<(), PtraceError> {
        self.detach_all()
    }

    fn detach_all(&mut self) -> Result<(), PtraceError> {
        let mut first = Ok(());
        for t in self.threads.values_mut() {
            if let Err(e) = t.let_go() {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}

/// One seized and stopped thread: a guard that detaches it (with any
/// signal it was about to get) when dropped. [`Stopped`] holds one per
/// thread of a process; `.itrace` seizes a single thread, the others
/// running on, single-steps it through one call, then lets it go.
pub struct Thread {
    tid: i32,
    /// A signal that arrived meanwhile, delivered with the next step (its
    /// handler is then traced too) or at detach.
    pending: i32,
    detached: bool,
    /// Its ptrace options (`PTRACE_SETOPTIONS` replaces them all).
    options: i32,
}

/// The options of a thread seized to be stopped: TRACESYSGOOD, so that a
/// thread in a system-call stop whose tracer dies resumes with an invalid
/// signal number (ignored), where without it the kernel would send itself
/// SIGTRAP and die.
const OPTIONS: i32 = libc::PTRACE_O_TRACESYSGOOD;
/// Those of a thread followed into its exec (`seize_for_exec`,
/// `process::spawn_traced`), then adopted.
const EXEC_OPTIONS: i32 = libc::PTRACE_O_TRACEEXEC | libc::PTRACE_O_TRACESYSGOOD;

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
        if let Some(sig) = signal_of(st).filter(|&s| s != libc::SIGTRAP) {
            t.pending = sig;
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
    fn let_go(&mut self) -> Result<(), PtraceError> {
        if std::mem::replace(&mut self.detached, true) {
            return Ok(());
        }
        match req::detach(self.tid, self.pending) {
            Err(PtraceError::Call { source, .. }) if source.raw_os_error() == Some(libc::ESRCH) => Ok(()),
            r => r,
        }
    }
}

impl Drop for Thread {
    fn drop(&mut self) {
        let _ = self.let_go();
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Err(e) = self.detach_all() {
            eprintln!("warning: {e}");
        }
    }
}

/// What a thread attached by [`seize_for_exec`] did since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecWait {
    /// Still running its old program (signals it got meanwhile were passed on).
    Running,
    /// Stopped at the start of its new program: `pid` (the exec made the
    /// thread its process's only one), ready for [`Stopped::adopt`].
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
        let mut r = super::wait::wait(tid, false);
        if r.is_err() && tid != pid {
            // A thread other than the leader exec'd: it is the leader now.
            r = super::wait::wait(pid, false);
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
            // A signal-delivery stop came first: keep the signal, wait on.
            pending = status.stop_signal().unwrap_or(0);
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
