//! Holding the execs of chosen files (probes by path, system-wide):
//! fanotify's `FAN_OPEN_EXEC_PERM` marked on each file's inode. An exec
//! of a marked file, by any process in any mount namespace, waits in the
//! kernel until the tracer answers; the tracer attaches to the thread
//! first (`ptrace::seize_for_exec`), so the new program stops before its
//! first instruction. Needs `CAP_SYS_ADMIN`.
//!
//! Every event is answered (allowed) before [`ExecWatch::take`] returns,
//! whatever the caller decided: an exec is never refused nor left waiting,
//! and if the tracer dies its descriptor closes, which allows every exec
//! still held.

use nix::sys::fanotify::{EventFFlags, Fanotify, FanotifyResponse, InitFlags, MarkFlags, MaskFlags, Response};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use super::proc::FileId;

/// The execs of a set of files, held until answered.
pub struct ExecWatch {
    fan: Fanotify,
}

/// One exec (or open) held: the thread that called it (in our pid
/// namespace; 0 when it is not visible from here), the file, and whether
/// it is an exec of it (else an open of a library: the loader's or
/// `dlopen`'s, or any read of the file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exec {
    pub tid: i32,
    pub file: FileId,
    pub exec: bool,
}

impl ExecWatch {
    /// Watch the execs of `programs` and the opens of `libraries` (each
    /// marked by inode: a bind mount or a container's mount namespace
    /// shows the same file under any path).
    pub fn new(programs: &[&Path], libraries: &[&Path]) -> std::io::Result<ExecWatch> {
        let fan = Fanotify::init(
            InitFlags::FAN_CLASS_CONTENT | InitFlags::FAN_CLOEXEC | InitFlags::FAN_NONBLOCK | InitFlags::FAN_REPORT_TID,
            EventFFlags::O_RDONLY | EventFFlags::O_CLOEXEC | EventFFlags::O_LARGEFILE,
        )
        .map_err(std::io::Error::from)?;
        // SAFETY: AT_FDCWD is no descriptor to close; fanotify_mark reads
        // it as "the current directory" (the paths are absolute anyway).
        let cwd = unsafe { BorrowedFd::borrow_raw(libc::AT_FDCWD) };
        let marks = programs.iter().map(|f| (f, MaskFlags::FAN_OPEN_EXEC_PERM));
        for (f, mask) in marks.chain(libraries.iter().map(|f| (f, MaskFlags::FAN_OPEN_PERM))) {
            fan.mark(MarkFlags::FAN_MARK_ADD, mask, cwd, Some(*f))
                .map_err(|e| std::io::Error::other(format!("{}: {e}", f.display())))?;
        }
        Ok(ExecWatch { fan })
    }

    /// Readable when an exec waits.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fan.as_fd()
    }

    /// Wait until an exec is held, or `timeout` passes (or a signal
    /// comes): whether one is.
    pub fn wait(&self, timeout: std::time::Duration) -> bool {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut fds = [PollFd::new(self.fan.as_fd(), PollFlags::POLLIN)];
        let ms = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
        poll(&mut fds, ms).is_ok_and(|n| n > 0)
    }

    /// The execs waiting now (none: at once): `decide` sees each, then it
    /// is allowed to go on. Bounded: 64 reads of events a call.
    pub fn take(&self, decide: &mut dyn FnMut(Exec)) {
        for _ in 0..64 {
            let Ok(events) = self.fan.read_events() else { return };
            if events.is_empty() {
                return;
            }
            for ev in events {
                let Some(fd) = ev.fd() else { continue };
                let exec = ev.mask().contains(MaskFlags::FAN_OPEN_EXEC_PERM);
                if exec || ev.mask().contains(MaskFlags::FAN_OPEN_PERM) {
                    let file = nix::sys::stat::fstat(fd).map(|st| (st.st_dev, st.st_ino)).unwrap_or((0, 0));
                    decide(Exec { tid: ev.pid(), file, exec });
                    // Nothing to do when it fails: the exec's process is
                    // gone (the kernel drops the event with it).
                    let _ = self.fan.write_response(FanotifyResponse::new(fd, Response::FAN_ALLOW));
                }
            }
        }
    }
}
