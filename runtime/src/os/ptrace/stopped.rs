//! [`Stopped`]: a process with every thread stopped, from attach to
//! detach; its registers and memory, the thread's own code run to a trap
//! or stepped, and threads let run out of the session's code.

use super::deadline::{signal_of, stop_again, wait_for, Again, GaveUp, Run, Until, GRACE, STEP_SECS};
use super::thread::EXEC_OPTIONS;
use super::{req, PtraceError, Regs, Thread};
use crate::arch::native as arch;
use crate::os::proc::{tasks, tracer_of};
use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::FileExt;
use std::time::Instant;

/// A process with every thread stopped under ptrace.
pub struct Stopped {
    pub(super) pid: i32,
    /// Its threads, each detached (with the signal it must get back) when
    /// dropped.
    pub(super) threads: BTreeMap<i32, Thread>,
    pub(super) mem: std::fs::File,
    /// The session's remote-operation stub in the target
    /// (`arch::native::stub`), once mapped: system calls and calls then
    /// survive the tracer's death.
    pub(super) stub: Option<u64>,
}

impl Stopped {
    /// Seize and stop every thread of `pid`.
    pub fn attach(pid: i32) -> Result<Stopped, PtraceError> {
        Stopped::attach_holding(pid, None)
    }

    /// [`Stopped::attach`], with thread `held` of `pid` already ours and in
    /// an interrupt stop (`ptrace::run_until_mapped`).
    pub fn attach_holding(pid: i32, held: Option<i32>) -> Result<Stopped, PtraceError> {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() || pid <= 0 {
            return Err(PtraceError::NoProcess(pid));
        }
        if let Some(tracer) = tracer_of(pid).filter(|_| held.is_none()) {
            return Err(PtraceError::AlreadyTraced { pid, tracer });
        }
        let mem = crate::os::proc::mem(pid, true).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => PtraceError::NoProcess(pid),
            io::ErrorKind::PermissionDenied => PtraceError::Permission { pid },
            _ => PtraceError::Memory { op: "open /proc/PID/mem", pid, addr: 0, len: 0, source: e },
        })?;
        let mut s = Stopped { pid, threads: BTreeMap::new(), mem, stub: None };
        if let Some(tid) = held {
            s.threads.insert(tid, Thread { tid, pending: 0, detached: false, options: EXEC_OPTIONS });
        }
        // Threads may be created while we stop the others: repeat until a
        // scan finds no new one (a stopped thread cannot create any), or
        // ^C (a target that makes threads as fast as they are stopped).
        let since = Instant::now();
        loop {
            if since.elapsed() >= GRACE && crate::os::sys::stop_requested() {
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
        let mem = crate::os::proc::mem(pid, true).map_err(|source| PtraceError::Memory {
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
    pub(super) fn forget(&mut self, tid: i32) {
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

    /// Set thread `tid`'s blocked signals (`PTRACE_SETSIGMASK`).
    pub fn set_sigmask(&self, tid: i32, mask: u64) -> Result<(), PtraceError> {
        // SAFETY: the kernel reads 8 bytes (the size passed) from `mask`.
        let r = unsafe { libc::ptrace(libc::PTRACE_SETSIGMASK, tid, 8usize, &mask as *const u64) };
        if r < 0 {
            return Err(PtraceError::Call { op: "PTRACE_SETSIGMASK", tid, source: std::io::Error::last_os_error() });
        }
        Ok(())
    }

    /// A signal thread `tid` was about to get: delivered at detach.
    pub(super) fn keep_signal(&mut self, tid: i32, sig: i32) {
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
    /// within [`STOP_WITHIN`](super::deadline::STOP_WITHIN)
    /// ([`stop_again`]: never at a system call's entry, where putting
    /// registers back would run the wrong call).
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

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Err(e) = self.detach_all() {
            eprintln!("warning: {e}");
        }
    }
}
