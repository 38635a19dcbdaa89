//! The holder of a session's region for an unprivileged trust domain.
//!
//! A process the session arms maps the region by opening a descriptor of
//! a process that holds it (`/proc/PID/fd/N`, `inject::map_region_at`),
//! which the kernel allows only to a process that may read that one
//! (`PTRACE_MODE_READ`): not the tracer, which runs as root, to a process
//! of another user. While the session's first process lives and holds its
//! descriptors it serves; a program exec'd later, or a process found
//! later (a session by path), maps them through a holder instead: a child
//! of the tracer with exactly the domain's user and group ids (and so no
//! capabilities), dumpable, holding the region's and the mirror's memfds
//! and nothing else, waiting to be killed (it dies with the tracer:
//! `PR_SET_PDEATHSIG`). What a process of the domain can do to it (trace
//! it, use its descriptors) it could do with the region anyway: the
//! mirror is sealed against writes before anyone maps it.

use std::io;

/// A process's user and group ids (real, effective, saved) and
/// supplementary groups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ids {
    pub uid: [u32; 3],
    pub gid: [u32; 3],
    pub groups: Vec<u32>,
}

impl Ids {
    /// Whether none of the ids is root's: only then is a holder needed
    /// (root's processes open the tracer's descriptors).
    pub fn unprivileged(&self) -> bool {
        self.uid.iter().all(|&u| u != 0)
    }
}

/// A running holder; killed and reaped when dropped.
pub struct Holder {
    pid: i32,
}

impl Holder {
    /// Fork a holder of descriptors `keep` (the tracer's own, at the same
    /// numbers in it) running as `ids`.
    pub fn spawn(ids: &Ids, keep: [i32; 2]) -> io::Result<Holder> {
        use std::os::fd::AsRawFd;
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let ready = write.as_raw_fd();
        let groups: Vec<libc::gid_t> = ids.groups.clone();
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: the child makes raw system calls only (no allocation, no
        // lock: `groups` was made before the fork), then waits or _exits.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: as above.
            unsafe { child(parent, ids, &groups, keep, ready) }
        }
        drop(write);
        let holder = Holder { pid };
        // Its setup's end: one byte, or none when it failed.
        let mut b = [0u8; 1];
        match nix::unistd::read(&read, &mut b) {
            Ok(1) => Ok(holder),
            _ => Err(io::Error::other("the holder could not take the domain's ids")),
        }
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        // SAFETY: our own child.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// The holder's side of the fork.
///
/// # Safety
/// Only in the child of a fork: raw system calls, then a wait that ends
/// with the process.
unsafe fn child(parent: libc::pid_t, ids: &Ids, groups: &[libc::gid_t], keep: [i32; 2], ready: i32) -> ! {
    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 || libc::getppid() != parent {
        libc::_exit(1);
    }
    // The session's signals are the tracer's (a terminal's ^C reaches the
    // whole process group).
    for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        libc::signal(s, libc::SIG_IGN);
    }
    // Every descriptor but the two kept and the ready pipe.
    let mut open = [keep[0], keep[1], ready];
    open.sort_unstable();
    let mut from = 0u32;
    for &fd in &open {
        let fd = fd as u32;
        if fd > from && libc::close_range(from, fd - 1, 0) != 0 {
            libc::_exit(1);
        }
        from = fd + 1;
    }
    if libc::close_range(from, u32::MAX, 0) != 0 {
        libc::_exit(1);
    }
    // Groups, then group ids, then user ids (which drop the capabilities
    // needed for the others).
    if libc::setgroups(groups.len(), groups.as_ptr()) != 0
        || libc::setresgid(ids.gid[0], ids.gid[1], ids.gid[2]) != 0
        || libc::setresuid(ids.uid[0], ids.uid[1], ids.uid[2]) != 0
        || libc::prctl(libc::PR_SET_DUMPABLE, 1) != 0
        // Changing the ids cleared the parent-death signal: again, and the
        // parent checked again (it may have died meanwhile).
        || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
        || libc::getppid() != parent
    {
        libc::_exit(1);
    }
    let b = 1u8;
    if libc::write(ready, (&b as *const u8).cast(), 1) != 1 {
        libc::_exit(1);
    }
    libc::close(ready);
    loop {
        libc::pause();
    }
}
