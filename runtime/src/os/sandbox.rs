//! A process that runs the tracer's own probe handlers (`begin`, `end`,
//! `error`, `timer.*`) away from the tracer (invariant 6).
//!
//! Those handlers are compiled code working on the shared region, and the
//! region is the target's to write: a table's geometry, a ring offset, a
//! lock word or a string length that the target overwrote sends the code
//! reading or writing wherever the target likes, or spinning forever. In
//! the tracer (root, holding the output files and `/proc/PID/mem`) that
//! would be a crash, a hang or worse. So the session forks a sandbox
//! before anything runs, and every tracer-side handler runs there:
//!
//! * the child keeps only the two pipe ends it talks on (every other file
//!   descriptor is closed: no output file, no `/proc/PID/mem`), ignores
//!   the session's signals, dies with the tracer (`PR_SET_PDEATHSIG`), and
//!   enters a seccomp filter that allows only what the runtime library
//!   calls: `read`/`write` on its pipes, `getpid`/`gettid`/`getppid`/
//!   `getuid`, `sched_yield`, `process_vm_readv`/`writev` on the one
//!   process the session serves (the tracer's word, never the region's),
//!   `prctl(PR_GET_NAME)`, the architecture's thread-pointer call, and
//!   `exit`. Anything else kills it (SIGSYS);
//! * it shares with the tracer the region (a `MAP_SHARED` memfd, inherited)
//!   and one page for the handler's context, whose MAXACTION countdown the
//!   tracer watches as a sign of progress;
//! * a request is a probe index written to the pipe; the reply is the same
//!   word back. The tracer waits with a poll: the child's death (a fault on
//!   corrupted data) or a stall (no progress for the given time: a spin on
//!   a lock or a ring tail the target forged) ends the sandbox, and the
//!   caller says what happened. Nothing the child does can reach the
//!   tracer's memory.
//!
//! The child runs only the handler calls and raw `read`/`write`: it never
//! allocates (the fork may have happened while another thread of the
//! tracer held the allocator's lock).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Why the sandbox stopped serving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Killed by this signal (SIGSEGV, SIGBUS… on corrupted data; SIGSYS
    /// for a forbidden system call).
    Signal(i32),
    /// Exited by itself with this status (it only does so when it cannot
    /// set itself up).
    Exited(i32),
    /// No progress for this long: killed.
    Stalled(Duration),
    /// The pipe to it failed.
    Io(i32),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Signal(s) => write!(f, "was killed by {}", super::process::signal_name(*s)),
            Failure::Exited(c) => write!(f, "exited with status {c}"),
            Failure::Stalled(d) => write!(f, "made no progress for {} s and was killed", d.as_secs()),
            Failure::Io(e) => write!(f, "could not be reached ({})", io::Error::from_raw_os_error(*e)),
        }
    }
}

/// A running sandbox process.
pub struct Sandbox {
    pid: libc::pid_t,
    to: Option<OwnedFd>,
    from: OwnedFd,
    page: *mut u64,
    page_len: usize,
    failed: Option<Failure>,
}

// The context page's bytes change concurrently in the child: the parent
// reads them with volatile loads only.
unsafe impl Send for Sandbox {}

/// Exit statuses of a child that could not set itself up.
const SETUP_FAILED: i32 = 101;

impl Sandbox {
    /// Fork the sandbox. `serve(request, page)` runs in the child for each
    /// request, with `page` the shared context page (`page_words` 64-bit
    /// words, zeroed): it must not allocate, lock or touch a file. `peer`
    /// is the only process whose memory it may read or write
    /// (`process_vm_readv`/`writev`).
    pub fn start<F: Fn(u32, &mut [u64])>(page_words: usize, peer: libc::pid_t, serve: F) -> io::Result<Sandbox> {
        Sandbox::start_with_input(page_words, 0, peer, serve)
    }

    /// [`Sandbox::start`], with `input_words` more words after the
    /// zeroed ones: the parent sets them ([`Sandbox::put`]) before a
    /// request and `serve` reads them (not zeroed between requests).
    pub fn start_with_input<F: Fn(u32, &mut [u64])>(
        page_words: usize,
        input_words: usize,
        peer: libc::pid_t,
        serve: F,
    ) -> io::Result<Sandbox> {
        let zeroed = page_words.max(1);
        let page_words = zeroed + input_words;
        use nix::fcntl::OFlag;
        use nix::sys::mman::{mmap_anonymous, MapFlags, ProtFlags};
        let (req_r, req_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let (rep_r, rep_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let page_len = (page_words.max(1) * 8).next_multiple_of(4096);
        // SAFETY: a fresh anonymous shared mapping, unmapped in Drop (or
        // below if the fork fails).
        let page = unsafe {
            mmap_anonymous(
                None,
                std::num::NonZeroUsize::new(page_len).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
            )?
        }
        .as_ptr()
        .cast::<u64>();
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: the child runs only `child`, which makes raw system calls
        // and the handler calls of `serve` (no allocation, no lock), then
        // _exits: what fork(2) allows in a multithreaded process.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            let e = io::Error::last_os_error();
            // SAFETY: unmapping what was mapped above.
            unsafe { libc::munmap(page.cast(), page_len) };
            return Err(e);
        }
        if pid == 0 {
            // SAFETY: the shared page is mapped, page_words words long.
            let ctx = unsafe { std::slice::from_raw_parts_mut(page, page_words) };
            child(parent, peer, req_r.as_raw_fd(), rep_w.as_raw_fd(), ctx, zeroed, &serve);
        }
        drop(req_r);
        drop(rep_w);
        Ok(Sandbox { pid, to: Some(req_w), from: rep_r, page, page_len, failed: None })
    }

    /// Word `i` of the shared context page, as the child last wrote it.
    pub fn word(&self, i: usize) -> u64 {
        if i * 8 >= self.page_len {
            return 0;
        }
        // SAFETY: inside the mapping; the child may be writing it: a
        // volatile load of an aligned word.
        unsafe { std::ptr::read_volatile(self.page.add(i)) }
    }

    /// Set word `i` of the shared context page (before a request: the
    /// child reads it when it runs the request).
    pub fn put(&self, i: usize, w: u64) {
        if i * 8 < self.page_len {
            // SAFETY: inside the mapping; the child is idle between
            // requests: a volatile store of an aligned word.
            unsafe { std::ptr::write_volatile(self.page.add(i), w) };
        }
    }

    /// Why the sandbox stopped, once it has.
    pub fn failed(&self) -> Option<&Failure> {
        self.failed.as_ref()
    }

    /// Run request `req` and wait for it. `progress` is polled every 50 ms
    /// and the child is killed when it returns the same value for
    /// `stall`. Once this has failed, every later call fails the same way
    /// without running anything.
    pub fn run(&mut self, req: u32, stall: Duration, progress: &mut dyn FnMut(&Sandbox) -> u64) -> Result<(), Failure> {
        if let Some(f) = &self.failed {
            return Err(f.clone());
        }
        let r = self.exchange(req, stall, progress);
        if let Err(f) = &r {
            self.failed = Some(f.clone());
            self.stop();
        }
        r
    }

    fn exchange(
        &mut self,
        req: u32,
        stall: Duration,
        progress: &mut dyn FnMut(&Sandbox) -> u64,
    ) -> Result<(), Failure> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        let Some(to) = &self.to else { return Err(Failure::Io(libc::EPIPE)) };
        let w = req.to_ne_bytes();
        // SAFETY: writing 4 bytes from a live buffer to our pipe. A dead
        // child makes this EPIPE (SIGPIPE is ignored by the session).
        let n = unsafe { libc::write(to.as_raw_fd(), w.as_ptr().cast(), 4) };
        if n != 4 {
            return Err(self.death().unwrap_or(Failure::Io(io::Error::last_os_error().raw_os_error().unwrap_or(0))));
        }
        let mut last = progress(self);
        let mut since = Instant::now();
        loop {
            let mut fds = [PollFd::new(self.from.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::from(50u16)) {
                Ok(0) => {}
                Ok(_) => {
                    let mut b = [0u8; 4];
                    // SAFETY: reading into a live 4-byte buffer.
                    let n = unsafe { libc::read(self.from.as_raw_fd(), b.as_mut_ptr().cast(), 4) };
                    if n == 4 && u32::from_ne_bytes(b) == req {
                        return Ok(());
                    }
                    // EOF (the child is gone or going) or a reply that is
                    // not ours (the child is then killed by `stop`).
                    return Err(if n == 0 { self.death() } else { None }.unwrap_or(Failure::Io(libc::EPROTO)));
                }
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(Failure::Io(e as i32)),
            }
            let now = progress(self);
            if now != last {
                last = now;
                since = Instant::now();
            } else if since.elapsed() >= stall {
                return Err(Failure::Stalled(stall));
            }
        }
    }

    /// How the child ended, once it has (reaped): it closed its pipe end,
    /// so it is exiting; waited for 1 s at most, never blocking (a child
    /// that closed it and lives on is killed by `stop`).
    fn death(&mut self) -> Option<Failure> {
        for _ in 0..100 {
            match super::wait::wait(self.pid, false) {
                Ok(Some((_, st))) if st.ended() => {
                    self.pid = 0;
                    return Some(
                        st.killed_by().map_or_else(|| Failure::Exited(st.exit_code().unwrap_or(0)), Failure::Signal),
                    );
                }
                Ok(_) => std::thread::sleep(Duration::from_millis(10)),
                Err(_) => return None,
            }
        }
        None
    }

    /// End the child (killed if it is still running) and reap it.
    fn stop(&mut self) {
        self.to = None;
        if self.pid > 0 {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid), nix::sys::signal::Signal::SIGKILL);
            let _ = super::wait::wait(self.pid, true);
            self.pid = 0;
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // Closing the request pipe ends a healthy child's loop; it is
        // killed anyway, as it may be stuck.
        self.stop();
        // SAFETY: unmapping what start() mapped.
        unsafe { libc::munmap(self.page.cast(), self.page_len) };
    }
}

/// The child: set up, then serve requests until the pipe closes.
fn child(
    parent: libc::pid_t,
    peer: libc::pid_t,
    req: i32,
    rep: i32,
    ctx: &mut [u64],
    zeroed: usize,
    serve: &dyn Fn(u32, &mut [u64]),
) -> ! {
    // SAFETY: raw system calls on our own process; no allocation.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 || libc::getppid() != parent {
            libc::_exit(SETUP_FAILED);
        }
        // The session's signals are the tracer's to act on (a terminal's
        // ^C reaches the whole process group).
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE, libc::SIGQUIT] {
            libc::signal(s, libc::SIG_IGN);
        }
        // A fault kills it plainly (Rust's own SIGSEGV handler would make
        // a system call the filter forbids, and the tracer would be told
        // SIGSYS instead of what happened).
        for s in [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE] {
            libc::signal(s, libc::SIG_DFL);
        }
        // Every file descriptor but the two pipe ends.
        let (lo, hi) = (req.min(rep) as u32, req.max(rep) as u32);
        let closed = (lo == 0 || libc::close_range(0, lo - 1, 0) == 0)
            && (hi == lo + 1 || libc::close_range(lo + 1, hi - 1, 0) == 0)
            && libc::close_range(hi + 1, u32::MAX, 0) == 0;
        if !closed {
            // Kernels before 5.9 have no close_range: one by one.
            let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            let max =
                if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 { lim.rlim_cur.min(1 << 20) } else { 1024 };
            for fd in (0..max as i32).filter(|&fd| fd != req && fd != rep) {
                libc::close(fd);
            }
        }
        if !enter_seccomp(peer) {
            libc::_exit(SETUP_FAILED);
        }
        let mut b = [0u8; 4];
        loop {
            if libc::read(req, b.as_mut_ptr().cast(), 4) != 4 {
                libc::_exit(0);
            }
            ctx.iter_mut().take(zeroed).for_each(|w| *w = 0);
            serve(u32::from_ne_bytes(b), ctx);
            if libc::write(rep, b.as_ptr().cast(), 4) != 4 {
                libc::_exit(0);
            }
        }
    }
}

/// The seccomp filter (see the module doc). `peer`: the only process
/// `process_vm_readv`/`writev` may name.
fn enter_seccomp(peer: libc::pid_t) -> bool {
    const ALLOW: u32 = 0x7fff_0000; // SECCOMP_RET_ALLOW
    const KILL: u32 = 0x8000_0000; // SECCOMP_RET_KILL_PROCESS
    const NR: u32 = 0; // offsetof(struct seccomp_data, nr)
    const ARCH: u32 = 4; // offsetof(struct seccomp_data, arch)
    const ARG0: u32 = 16; // offsetof(struct seccomp_data, args[0]), low half
    let ld = |k: u32| libc::sock_filter { code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16, jt: 0, jf: 0, k };
    let ret = |k: u32| libc::sock_filter { code: (libc::BPF_RET | libc::BPF_K) as u16, jt: 0, jf: 0, k };
    // Jump `jt` ahead when equal, else `jf` ahead.
    let jeq = |k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let plain: [i64; 10] = [
        libc::SYS_read,
        libc::SYS_write,
        libc::SYS_getpid,
        libc::SYS_gettid,
        libc::SYS_getppid,
        libc::SYS_getuid,
        libc::SYS_sched_yield,
        libc::SYS_exit,
        libc::SYS_exit_group,
        libc::SYS_rt_sigreturn,
    ];
    let extra = crate::arch::native::SANDBOX_SYSCALLS;
    // A fixed-size program: no allocation in the child (and no panic:
    // a program that does not fit fails the setup).
    let mut p = [ret(KILL); 64];
    let mut n = 0;
    let mut fits = true;
    let mut push = |f: libc::sock_filter| match p.get_mut(n) {
        Some(slot) => {
            *slot = f;
            n += 1;
        }
        None => fits = false,
    };
    push(ld(ARCH));
    push(jeq(crate::arch::native::AUDIT_ARCH, 1, 0));
    push(ret(KILL));
    push(ld(NR));
    for &nr in plain.iter().chain(extra) {
        push(jeq(nr as u32, 0, 1));
        push(ret(ALLOW));
    }
    // process_vm_readv/writev(peer, …) and prctl(PR_GET_NAME, …): the
    // argument decides.
    for (nr, arg) in
        [(libc::SYS_process_vm_readv, peer as u32), (libc::SYS_process_vm_writev, peer as u32), (libc::SYS_prctl, 16)]
    {
        push(jeq(nr as u32, 0, 4));
        push(ld(ARG0));
        push(jeq(arg, 0, 1));
        push(ret(ALLOW));
        push(ret(KILL));
    }
    push(ret(KILL));
    if !fits {
        return false;
    }
    let prog = libc::sock_fprog { len: n as u16, filter: p.as_mut_ptr() };
    // SAFETY: a well-formed classic BPF program that outlives the call.
    unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
            && libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog as *const libc::sock_fprog) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_requests_and_shares_the_page() {
        let mut s = Sandbox::start(4, 1, |r, page| page[1] = u64::from(r) * 3).expect("start");
        for r in [1u32, 7, 40] {
            s.run(r, Duration::from_secs(5), &mut |_| 0).expect("run");
            assert_eq!(s.word(1), u64::from(r) * 3);
        }
    }

    #[test]
    fn a_fault_is_a_failure_not_a_crash() {
        let mut s = Sandbox::start(1, 1, |r, _| {
            if r == 2 {
                // SAFETY: deliberately faulting in the child.
                unsafe { std::ptr::write_volatile(std::ptr::without_provenance_mut::<u64>(8), 1) };
            }
        })
        .expect("start");
        s.run(1, Duration::from_secs(5), &mut |_| 0).expect("a healthy request");
        assert_eq!(s.run(2, Duration::from_secs(5), &mut |_| 0), Err(Failure::Signal(libc::SIGSEGV)));
        assert_eq!(s.run(1, Duration::from_secs(5), &mut |_| 0), Err(Failure::Signal(libc::SIGSEGV)));
    }

    #[test]
    fn a_forbidden_system_call_kills_it() {
        let mut s = Sandbox::start(1, 1, |_, _| {
            // SAFETY: a harmless call the filter forbids.
            unsafe { libc::syscall(libc::SYS_getcwd, std::ptr::null_mut::<u8>(), 0) };
        })
        .expect("start");
        assert_eq!(s.run(1, Duration::from_secs(5), &mut |_| 0), Err(Failure::Signal(libc::SIGSYS)));
    }

    #[test]
    fn a_spin_without_progress_is_stopped() {
        let mut s = Sandbox::start(1, 1, |_, _| loop {
            std::hint::spin_loop();
        })
        .expect("start");
        let r = s.run(1, Duration::from_millis(200), &mut |_| 0);
        assert_eq!(r, Err(Failure::Stalled(Duration::from_millis(200))));
    }

    #[test]
    fn progress_keeps_a_long_request_alive() {
        // The child counts in word 0 until the parent sets word 1, which
        // it does after 10 polls (500 ms), five times the stall limit: the
        // request survives because the count moves.
        let mut s = Sandbox::start(2, 1, |_, page| {
            // SAFETY: the shared page, read and written by both sides.
            unsafe {
                while std::ptr::read_volatile(&page[1]) == 0 {
                    std::ptr::write_volatile(&mut page[0], page[0] + 1);
                }
            }
        })
        .expect("start");
        let mut polls = 0;
        let page = s.page;
        s.run(1, Duration::from_millis(100), &mut |s| {
            polls += 1;
            if polls == 10 {
                // SAFETY: word 1 of the shared page.
                unsafe { std::ptr::write_volatile(page.add(1), 1) };
            }
            s.word(0)
        })
        .expect("progress seen");
        assert!(polls >= 10);
    }
}
