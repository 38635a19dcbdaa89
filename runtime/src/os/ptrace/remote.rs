//! System calls and calls run inside the target for the tracer: through
//! the stub when the session has one, else the old way; every one an
//! operation with a deadline, its faults caught, its thread put back, and
//! its seccomp filters suspended meanwhile.

use super::deadline::{faulted, resume, signal_of, stop_again, wait_for, Again, Run, Until, CALL_SECS, SYSCALL_SECS};
use super::stub::{stub_held, HELD_STUBS};
use super::{req, PtraceError, Regs, Stopped};
use crate::arch::native as arch;
use crate::os::wait::Status;
use std::sync::atomic::{AtomicBool, Ordering};

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

impl Stopped {
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
    /// ([`GRACE`](super::deadline::GRACE)). A fault ends it; signals
    /// meanwhile are kept for the thread. A wait that gives up stops the
    /// thread again ([`stop_again`]: the operation may still end on the
    /// way, then its result counts); a thread that does not stop is left
    /// to the stub.
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
                            signal: crate::os::process::signal_name(sig),
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
}
