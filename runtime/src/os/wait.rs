//! Wait statuses, decoded in one place, and the one `waitpid`.
//!
//! Raw `libc::waitpid` rather than nix's: nix decodes a status into its
//! `Signal` enum, which has no real-time signals, so a thread stopped by
//! `SIGRTMIN+n` (glibc uses them itself) would be a decoding error there.
//! A tracer must see, and pass on, every signal.

use std::io;

/// A status `waitpid` reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status(pub i32);

impl Status {
    /// Exited normally: its exit code.
    pub fn exit_code(self) -> Option<i32> {
        libc::WIFEXITED(self.0).then(|| libc::WEXITSTATUS(self.0))
    }

    /// Killed by a signal: the signal.
    pub fn killed_by(self) -> Option<i32> {
        libc::WIFSIGNALED(self.0).then(|| libc::WTERMSIG(self.0))
    }

    /// The process or thread is gone (exited or killed).
    pub fn ended(self) -> bool {
        libc::WIFEXITED(self.0) || libc::WIFSIGNALED(self.0)
    }

    /// The exit status as a shell gives it: the code, or 128 + the signal.
    pub fn shell_status(self) -> Option<i32> {
        self.exit_code().or_else(|| self.killed_by().map(|s| 128 + s))
    }

    /// Stopped (under ptrace): the stop signal.
    pub fn stop_signal(self) -> Option<i32> {
        libc::WIFSTOPPED(self.0).then(|| libc::WSTOPSIG(self.0))
    }

    /// The ptrace event of an event stop (`PTRACE_EVENT_*`), 0 for none.
    pub fn event(self) -> i32 {
        self.0 >> 16
    }

    /// A signal-delivery stop: the signal the thread is about to get,
    /// which the tracer must pass on. None for event stops and traps.
    pub fn delivering(self) -> Option<i32> {
        self.stop_signal().filter(|&s| self.event() == 0 && s != libc::SIGTRAP && s != libc::SIGTRAP | 0x80)
    }

    /// A system-call stop (`PTRACE_SYSCALL` with `PTRACE_O_TRACESYSGOOD`).
    pub fn is_syscall_stop(self) -> bool {
        self.stop_signal() == Some(libc::SIGTRAP | 0x80)
    }

    /// Stopped at the start of a new program (`PTRACE_EVENT_EXEC`).
    pub fn is_exec(self) -> bool {
        self.0 >> 8 == (libc::SIGTRAP | libc::PTRACE_EVENT_EXEC << 8)
    }
}

/// `waitpid(pid, __WALL | (WNOHANG if !block))`, retried on EINTR:
/// the pid that changed state and its status, None when `!block` and
/// nothing did.
pub fn wait(pid: i32, block: bool) -> io::Result<Option<(i32, Status)>> {
    let flags = if block { libc::__WALL } else { libc::__WALL | libc::WNOHANG };
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid status pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, flags) };
        if r > 0 {
            return Ok(Some((r, Status(status))));
        }
        if r == 0 {
            return Ok(None);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_decode() {
        // Exit 3; killed by SIGKILL; stopped by SIGRTMIN+1; exec event.
        let exit = Status(3 << 8);
        assert_eq!((exit.exit_code(), exit.killed_by(), exit.shell_status()), (Some(3), None, Some(3)));
        let killed = Status(libc::SIGKILL);
        assert_eq!((killed.ended(), killed.shell_status()), (true, Some(128 + libc::SIGKILL)));
        let rt = libc::SIGRTMIN() + 1;
        let stop = Status(rt << 8 | 0x7f);
        assert_eq!((stop.stop_signal(), stop.delivering(), stop.ended()), (Some(rt), Some(rt), false));
        let exec = Status((libc::SIGTRAP | libc::PTRACE_EVENT_EXEC << 8) << 8 | 0x7f);
        assert!(exec.is_exec() && exec.delivering().is_none());
    }
}
