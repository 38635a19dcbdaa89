//! Processes as wholes: starting a command traced from its first
//! instruction, ending one, whether one exists or shares its parent's
//! memory, signals by name, and the scheduling and file calls the
//! consumer threads need.

use super::wait::{self, Status};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::io;

/// Make the tracer the reaper of its descendants' orphans
/// (`PR_SET_CHILD_SUBREAPER`): a `-c` command's daemon (it forks, and its
/// parent exits) stays in the tracer's process tree, where the session
/// finds it, instead of becoming init's.
pub fn become_subreaper() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)
}

/// Start `argv` traced from its first instruction: forked, the child
/// waits on a pipe until the tracer has seized it (`PTRACE_SEIZE` with
/// `PTRACE_O_TRACEEXEC` and `PTRACE_O_TRACESYSGOOD`), then execs; it stops
/// at the exec in an event stop. Unlike `PTRACE_TRACEME`, whose exec stop
/// is a SIGTRAP the kernel delivers if the tracer dies before handling it,
/// no instant leaves the command a signal away from its death: a tracer
/// that dies before seizing closes the pipe, and the command runs
/// untraced. Returns its pid and that first wait status; a child that did
/// not stop (the exec failed, it was killed) gives its status.
pub fn spawn_traced(argv: &[String]) -> io::Result<(i32, Status)> {
    use nix::fcntl::OFlag;
    use nix::sys::ptrace::Options;
    use nix::unistd::{fork, ForkResult};
    use std::ffi::CString;
    use std::os::fd::AsRawFd;
    let args: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()).map_err(|_| io::Error::other(format!("a NUL byte in `{a}`"))))
        .collect::<io::Result<_>>()?;
    let Some(prog) = args.first().cloned() else { return Err(io::Error::other("no command")) };
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let (rfd, wfd) = (read.as_raw_fd(), write.as_raw_fd());
    // SAFETY: the child calls only async-signal-safe functions (close,
    // read, signal, execvp with arguments made before the fork, _exit).
    match unsafe { fork() }? {
        ForkResult::Child => unsafe {
            // The command starts with SIGPIPE's default action, as from a
            // shell: the tracer's runtime ignores it, and an exec keeps an
            // ignored signal ignored (`yes | head` would never end).
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::close(wfd);
            let mut b = 0u8;
            while libc::read(rfd, (&mut b as *mut u8).cast(), 1) < 0 && *libc::__errno_location() == libc::EINTR {}
            libc::close(rfd);
            let mut ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
            ptrs.push(std::ptr::null());
            libc::execvp(prog.as_ptr(), ptrs.as_ptr());
            libc::_exit(127)
        },
        ForkResult::Parent { child } => {
            drop(read);
            let pid = child.as_raw();
            let seized = nix::sys::ptrace::seize(child, Options::PTRACE_O_TRACEEXEC | Options::PTRACE_O_TRACESYSGOOD);
            // Go (or, if the seize failed, go untraced and say why below).
            let _ = nix::unistd::write(&write, &[1]);
            drop(write);
            if let Err(e) = seized {
                let _ = kill(child, Signal::SIGKILL);
                let _ = wait::wait(pid, true);
                return Err(io::Error::other(format!("ptrace(PTRACE_SEIZE) of the command failed: {e}")));
            }
            let (_, status) = wait::wait(pid, true)?.ok_or_else(|| io::Error::other("waitpid returned nothing"))?;
            Ok((pid, status))
        }
    }
}

/// End our child `pid`: SIGTERM, then SIGKILL if it is still there after
/// `grace`; reaped either way.
pub fn terminate(pid: i32, grace: std::time::Duration) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd};
    // pidfd_open: not in nix. The descriptor becomes readable when the
    // process exits.
    // SAFETY: a system call with integer arguments; the result, when not
    // negative, is a new descriptor we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    let pidfd = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) });
    let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    let exited = pidfd.as_ref().is_some_and(|fd| {
        let ms = u16::try_from(grace.as_millis()).unwrap_or(u16::MAX);
        // SAFETY: the descriptor is alive for the call.
        let b = unsafe { BorrowedFd::borrow_raw(std::os::fd::AsRawFd::as_raw_fd(fd)) };
        let mut fds = [PollFd::new(b, PollFlags::POLLIN)];
        poll(&mut fds, PollTimeout::from(ms)).is_ok_and(|n| n == 1)
    });
    if !exited {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let _ = wait::wait(pid, true);
}

/// Whether process `pid` exists (it may be a zombie).
pub fn exists(pid: i32) -> bool {
    !matches!(kill(Pid::from_raw(pid), None), Err(nix::errno::Errno::ESRCH))
}

/// Whether process `pid` shares its address space with process `other`
/// (a vfork or posix_spawn child before its exec, and its parent):
/// `kcmp(KCMP_VM)`, which nix does not have.
pub fn same_vm(pid: i32, other: i32) -> bool {
    const KCMP_VM: i32 = 1;
    // SAFETY: kcmp compares two processes' kernel objects; no pointers.
    unsafe { libc::syscall(libc::SYS_kcmp, pid, other, KCMP_VM, 0, 0) == 0 }
}

/// Run the calling thread only on CPU time nothing else wants
/// (`SCHED_IDLE`; Linux schedules threads one by one). nix has no
/// `sched_setscheduler`.
pub fn run_when_idle() {
    let idle = libc::sched_param { sched_priority: 0 };
    // SAFETY: plain syscall on the calling thread, with a valid param.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &idle) };
}

/// Run the calling thread as threads normally run again (`SCHED_OTHER`),
/// after [`run_when_idle`]: when the session waits for it.
pub fn run_normally() {
    let normal = libc::sched_param { sched_priority: 0 };
    // SAFETY: plain syscall on the calling thread, with a valid param.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &normal) };
}

/// Give the disk under `file`'s first `len` bytes back (a hole), keeping
/// its size.
pub fn punch_hole(file: &std::fs::File, len: u64) {
    use nix::fcntl::{fallocate, FallocateFlags};
    let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
    let _ = fallocate(file, flags, 0, len as libc::off_t);
}

/// A signal's name and description: "SIGSEGV (Segmentation fault)".
pub fn signal_name(sig: i32) -> String {
    const NAMES: &[(i32, &str)] = &[
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGILL, "SIGILL"),
        (libc::SIGTRAP, "SIGTRAP"),
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGBUS, "SIGBUS"),
        (libc::SIGFPE, "SIGFPE"),
        (libc::SIGKILL, "SIGKILL"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGPIPE, "SIGPIPE"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGSTKFLT, "SIGSTKFLT"),
        (libc::SIGXCPU, "SIGXCPU"),
        (libc::SIGXFSZ, "SIGXFSZ"),
        (libc::SIGVTALRM, "SIGVTALRM"),
        (libc::SIGPROF, "SIGPROF"),
        (libc::SIGSYS, "SIGSYS"),
    ];
    let name = NAMES.iter().find(|(n, _)| *n == sig).map_or_else(|| format!("signal {sig}"), |(_, s)| s.to_string());
    // SAFETY: strsignal returns a pointer to a static or thread-local
    // string, valid until the next call on this thread; copied at once.
    let text = unsafe {
        let p = libc::strsignal(sig);
        if p.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    if text.is_empty() {
        name
    } else {
        format!("{name} ({text})")
    }
}
