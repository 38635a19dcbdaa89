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
//! thread was blocked in), single-step, read `rax`, restore the two bytes
//! and every register; calls return to an `int3` in the session's code.
//!
//! Calls are bounded: one that has not returned after 5 s is stopped and
//! undone ([`PtraceError::CallTimedOut`]), so target code that never
//! returns cannot hang the tracer. [`Thread`] guards one thread
//! alone (`.itrace` single-steps it while the others run);
//! [`seize_for_exec`], [`poll_exec`] and [`release`] follow a thread into
//! the program it execs.

use super::wait::Status;
use crate::arch::native as arch;
use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::FileExt;

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
    #[error("a function called in thread {tid} faulted (signal {sig} at {pc:#x}); the call was undone")]
    CallFaulted { tid: i32, sig: i32, pc: u64 },
    #[error("a function called in thread {tid} did not return within {secs} s; the call was undone")]
    CallTimedOut { tid: i32, secs: u64 },
}

pub use crate::arch::native::Regs;

/// Where a session's remote-operation stub is: in slack bytes of the
/// program (their original bytes kept), or a page of its own.
#[derive(Clone, Debug)]
pub struct StubPlace {
    pub at: u64,
    pub original: Option<Vec<u8>>,
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

/// What a wait saw.
enum Stop {
    /// A ptrace event stop (interrupt, group stop) or a single-step trap.
    Trap,
    /// A signal about to be delivered: it must be delivered later.
    Signal(i32),
    Exited,
}

fn wait(tid: i32) -> Result<Stop, PtraceError> {
    wait_until(tid, None).map(|s| s.unwrap_or(Stop::Trap))
}

/// [`wait`] that gives up at `deadline` (None: never), returning None.
fn wait_until(tid: i32, deadline: Option<std::time::Instant>) -> Result<Option<Stop>, PtraceError> {
    loop {
        match super::wait::wait(tid, deadline.is_none()) {
            Ok(Some((_, status))) => return Ok(Some(decode(status))),
            Ok(None) => {
                if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                    return Ok(None);
                }
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            Err(source) => return Err(PtraceError::Wait { tid, source }),
        }
    }
}

fn decode(status: Status) -> Stop {
    if status.ended() {
        return Stop::Exited;
    }
    match status.delivering() {
        Some(sig) => Stop::Signal(sig),
        None => Stop::Trap,
    }
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
        // scan finds no new one (a stopped thread cannot create any).
        loop {
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
        threads.insert(pid, Thread { tid: pid, pending: 0, detached: false });
        Ok(Stopped { pid, threads, mem, stub: None })
    }

    /// Let thread `tid` run until it executes the `int3` placed at `at`
    /// (the caller saved the byte), then put its instruction pointer back
    /// on `at`.
    pub fn run_to_trap(&mut self, tid: i32, at: u64) -> Result<(), PtraceError> {
        let mut sig = 0;
        loop {
            req::cont(tid, sig)?;
            sig = 0;
            match wait(tid)? {
                Stop::Trap => {
                    let mut r = self.regs(tid)?;
                    if arch::pc(&r) == arch::pc_after_trap(at) {
                        arch::set_pc(&mut r, at);
                        return self.set_regs(tid, &r);
                    }
                }
                // Delivered with the next continue (the program is starting).
                Stop::Signal(s) => sig = s,
                Stop::Exited => return Err(PtraceError::Exited { tid }),
            }
        }
    }

    /// Step thread `tid` one instruction.
    pub fn step(&mut self, tid: i32) -> Result<(), PtraceError> {
        req::step(tid, 0)?;
        match wait(tid)? {
            Stop::Trap => Ok(()),
            Stop::Signal(sig) => {
                self.keep_signal(tid, sig);
                Ok(())
            }
            Stop::Exited => Err(PtraceError::Exited { tid }),
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
        if let Some(at) = slack {
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
    /// raw result (a negative errno on failure).
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
        let result = (|| {
            self.set_regs(tid, &r)?;
            loop {
                req::step(tid, 0)?;
                match wait(tid)? {
                    Stop::Trap => break,
                    Stop::Signal(sig) => {
                        // Not ours: keep it for detach and step again (the
                        // instruction has not run yet).
                        self.keep_signal(tid, sig);
                    }
                    Stop::Exited => return Err(PtraceError::Exited { tid }),
                }
            }
            Ok(arch::syscall_result(&self.regs(tid)?))
        })();
        // Restore whatever happened: the bytes, then every register.
        let restore_bytes = self.write(ip, &bytes);
        let restore_regs = self.set_regs(tid, &saved);
        let v = result?;
        restore_bytes?;
        restore_regs?;
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
        let saved = self.regs(tid)?;
        let block = self.resume_block(tid, &saved)?;
        self.write(stub_at + stub::BLOCK, &block)?;
        let r = stub::syscall_regs(&saved, stub_at, nr, args);
        let after = stub_at + stub::AFTER_SYSCALL;
        let result = (|| {
            self.set_regs(tid, &r)?;
            let mut stops = 0;
            loop {
                req::syscall(tid, 0)?;
                match wait(tid)? {
                    Stop::Trap => {
                        let now = self.regs(tid)?;
                        if arch::pc(&now) == after {
                            stops += 1;
                            if stops == 2 {
                                return Ok(arch::syscall_result(&now));
                            }
                        }
                    }
                    Stop::Signal(sig) => self.keep_signal(tid, sig),
                    Stop::Exited => return Err(PtraceError::Exited { tid }),
                }
            }
        })();
        let restore = self.set_regs(tid, &saved);
        let v = result?;
        restore?;
        Ok(v)
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
            let block = self.resume_block(tid, &saved)?;
            self.write(at + stub::BLOCK, &block)?;
        }
        if let Some(ret_at) = arch::set_call(&mut r, func, args, ret) {
            self.write(ret_at, &ret.to_le_bytes())?;
        }
        // Bounded: code that never returns (a bug, a target that changed
        // under us) must not hang the tracer.
        const CALL_SECS: u64 = 5;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(CALL_SECS);
        let mut marker: Option<u64> = None;
        let result = (|| {
            self.set_regs(tid, &r)?;
            loop {
                match via {
                    Some(_) => req::syscall(tid, 0)?,
                    None => req::cont(tid, 0)?,
                }
                let Some(stop) = wait_until(tid, Some(deadline))? else {
                    self.stop_overrunning_call(tid)?;
                    return Err(PtraceError::CallTimedOut { tid, secs: CALL_SECS });
                };
                match stop {
                    Stop::Trap => {
                        let now = self.regs(tid)?;
                        match via {
                            // The marker's entry stop (the result is in
                            // hand), then its exit stop: only then may the
                            // registers be put back.
                            Some(at) if arch::pc(&now) == at + stub::AFTER_SYSCALL => match marker {
                                None => marker = Some(stub::call_result(&now)),
                                Some(v) => return Ok(v),
                            },
                            Some(_) => {}
                            None if arch::pc(&now) == arch::pc_after_trap(trap) => return Ok(arch::call_result(&now)),
                            // Another stop (an event): keep going.
                            None => {}
                        }
                    }
                    // The called code faulted (a synchronous signal, not one
                    // sent): going on would fault again, forever.
                    Stop::Signal(sig)
                        if [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE].contains(&sig)
                            && self.signal_code(tid).is_some_and(|code| code > 0) =>
                    {
                        let pc = self.regs(tid).map(|r| arch::pc(&r)).unwrap_or(0);
                        return Err(PtraceError::CallFaulted { tid, sig, pc });
                    }
                    Stop::Signal(sig) => {
                        self.keep_signal(tid, sig);
                    }
                    Stop::Exited => return Err(PtraceError::Exited { tid }),
                }
            }
        })();
        let restore = self.set_regs(tid, &saved);
        let v = result?;
        restore?;
        Ok(v)
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

    /// A called function ran past its time: stop the thread again so the
    /// call can be undone. A seized thread gets `PTRACE_INTERRUPT`, one
    /// traced since its start (`PTRACE_TRACEME`, `-c`) a SIGSTOP of ours;
    /// the stop awaited is that one, never a system-call stop (putting the
    /// registers back at a system call's entry would run the wrong call).
    fn stop_overrunning_call(&mut self, tid: i32) -> Result<(), PtraceError> {
        let seized = req::interrupt(tid).is_ok();
        if !seized {
            // tgkill (one thread): not in nix.
            // SAFETY: a signal to our own tracee's thread.
            unsafe { libc::syscall(libc::SYS_tgkill, self.pid, tid, libc::SIGSTOP) };
        }
        loop {
            let status = match super::wait::wait(tid, true) {
                Ok(Some((_, st))) => st,
                Ok(None) => continue,
                Err(source) => return Err(PtraceError::Wait { tid, source }),
            };
            if status.ended() {
                return Err(PtraceError::Exited { tid });
            }
            let interrupted = status.event() == libc::PTRACE_EVENT_STOP;
            match status.delivering() {
                Some(libc::SIGSTOP) if !seized => return Ok(()),
                Some(sig) => {
                    // Not ours: kept for detach; on to our stop.
                    self.keep_signal(tid, sig);
                    req::cont(tid, 0)?;
                }
                None if interrupted || !seized && status.stop_signal() == Some(libc::SIGSTOP) => return Ok(()),
                // A system-call stop (or another trap) before ours.
                None => req::cont(tid, 0)?,
            }
        }
    }

    /// The `si_code` of the signal thread `tid` is stopped for.
    fn signal_code(&self, tid: i32) -> Option<i32> {
        req::signal_code(tid)
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
}

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
    pub fn seize(tid: i32) -> Result<Thread, PtraceError> {
        // TRACESYSGOOD: a thread in a system-call stop whose tracer dies
        // resumes with an invalid signal number (ignored), where without
        // it the kernel would send itself SIGTRAP and die.
        req::seize(tid, nix::sys::ptrace::Options::PTRACE_O_TRACESYSGOOD).map_err(PtraceError::Seize)?;
        let mut t = Thread { tid, pending: 0, detached: false };
        req::interrupt(tid)?;
        match wait(tid)? {
            Stop::Trap => {}
            Stop::Signal(sig) => t.pending = sig,
            Stop::Exited => {
                t.detached = true;
                return Err(PtraceError::Exited { tid });
            }
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
    pub fn step(&mut self) -> Result<Step, PtraceError> {
        let sig = std::mem::take(&mut self.pending);
        req::step(self.tid, sig)?;
        match wait(self.tid)? {
            Stop::Trap => Ok(Step::Done),
            Stop::Signal(s) => {
                self.pending = s;
                Ok(Step::Signal)
            }
            Stop::Exited => {
                self.detached = true;
                Ok(Step::Exited)
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
    use nix::sys::ptrace::Options;
    req::seize(tid, Options::PTRACE_O_TRACEEXEC | Options::PTRACE_O_TRACESYSGOOD).map_err(PtraceError::Seize)
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
    loop {
        // A blocking wait on our tracee (it stops at once).
        let Ok(Some((_, status))) = super::wait::wait(tid, true) else { return };
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
