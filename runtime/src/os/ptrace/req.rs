//! The ptrace requests, one function each: nix where it has them; raw
//! libc for the requests that carry a signal to deliver (`PTRACE_CONT`,
//! `PTRACE_SINGLESTEP`, `PTRACE_DETACH`), because nix's `Signal` has no
//! real-time signals and a tracer must pass every signal on.

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
    ptrace::getregs(Pid::from_raw(tid)).map_err(|e| PtraceError::Call { op: "PTRACE_GETREGS", tid, source: e.into() })
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
