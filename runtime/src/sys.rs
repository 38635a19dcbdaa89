//! The one place the runtime calls the OS for memory and signals (ptrace
//! and target memory will live beside it). Every mapping is a value whose
//! `Drop` unmaps it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};

/// A shared mapping of a memfd: the region. Other processes can map the same
/// pages through `/proc/self/fd/N` (pass 5 does this in targets).
pub struct SharedMemory {
    ptr: *mut u8,
    len: usize,
    _fd: OwnedFd,
}

// SAFETY: the mapping is plain shared memory; all concurrent access to it
// goes through atomics or the protocols documented in telco-abi.
unsafe impl Send for SharedMemory {}
unsafe impl Sync for SharedMemory {}

impl SharedMemory {
    pub fn new(len: usize) -> io::Result<SharedMemory> {
        // SAFETY: memfd_create with a valid NUL-terminated name.
        let fd = unsafe { libc::memfd_create(c"telco-stap-region".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd was just created and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: ftruncate on our own descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        SharedMemory::from_fd(fd, len)
    }

    /// Map `len` bytes of an open memfd (the target's, through
    /// `/proc/PID/fd/N`).
    pub fn from_fd(fd: OwnedFd, len: usize) -> io::Result<SharedMemory> {
        // SAFETY: a fresh shared mapping of the file; checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SharedMemory { ptr: p.cast(), len, _fd: fd })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The file behind the mapping (a memfd), for other processes to map
    /// it through `/proc/PID/fd/N`.
    pub fn fd(&self) -> i32 {
        self._fd.as_raw_fd()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what new() mapped.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Executable memory holding a copy of the compiled blob.
pub struct ExecMemory {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: read-only executable memory after construction.
unsafe impl Send for ExecMemory {}
unsafe impl Sync for ExecMemory {}

impl ExecMemory {
    pub fn new(code: &[u8]) -> io::Result<ExecMemory> {
        let len = code.len().max(1).next_multiple_of(4096);
        // SAFETY: a fresh private anonymous mapping; checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: p has room for len >= code.len() bytes and does not overlap code.
        unsafe { std::ptr::copy_nonoverlapping(code.as_ptr(), p.cast::<u8>(), code.len()) };
        // SAFETY: changing the protection of our own mapping.
        if unsafe { libc::mprotect(p, len, libc::PROT_READ | libc::PROT_EXEC) } != 0 {
            let e = io::Error::last_os_error();
            // SAFETY: unmapping what we mapped.
            unsafe { libc::munmap(p, len) };
            return Err(e);
        }
        Ok(ExecMemory { ptr: p.cast(), len })
    }

    pub fn addr(&self, offset: u32) -> *const u8 {
        // SAFETY: callers pass offsets inside the blob (from the artifact).
        unsafe { self.ptr.add(offset as usize) }
    }
}

impl Drop for ExecMemory {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what new() mapped.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

pub fn gettid() -> u64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u64 }
}

pub fn getuid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::getuid() }
}

pub fn getppid() -> u64 {
    // SAFETY: no preconditions.
    unsafe { libc::getppid() as u64 }
}

/// The write end of the self-pipe SIGINT/SIGTERM write to.
static SIGNAL_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(_: libc::c_int) {
    let fd = SIGNAL_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = 1u8;
        // SAFETY: write(2) is async-signal-safe; the buffer is valid.
        unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
    }
}

/// SIGINT, SIGTERM and SIGHUP end the session: they become a readable byte
/// on a pipe that the session's waits poll.
pub struct Signals {
    read: OwnedFd,
    _write: OwnedFd,
}

impl Signals {
    pub fn install() -> io::Result<Signals> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into fds.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are ours.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        SIGNAL_FD.store(write.as_raw_fd(), Ordering::Relaxed);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: installing an async-signal-safe handler.
            unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
        }
        Ok(Signals { read, _write: write })
    }

    /// Wait until a signal arrives or `timeout` passes (None: forever).
    /// Returns whether a signal arrived.
    pub fn wait(&self, timeout: Option<std::time::Duration>) -> bool {
        let mut pfd = libc::pollfd { fd: self.read.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ts =
            timeout.map(|d| libc::timespec { tv_sec: d.as_secs() as libc::time_t, tv_nsec: d.subsec_nanos() as _ });
        let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: one valid pollfd; tsp is null or points at a live timespec.
        let r = unsafe { libc::ppoll(&mut pfd, 1, tsp, std::ptr::null()) };
        r > 0 && pfd.revents & libc::POLLIN != 0
    }

    pub fn pending(&self) -> bool {
        self.wait(Some(std::time::Duration::ZERO))
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        SIGNAL_FD.store(-1, Ordering::Relaxed);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: restoring the default disposition.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
        }
    }
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid timespec pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_REALTIME in ns (the handlers' `gettimeofday_ns()` time line).
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// CLOCK_MONOTONIC in ns.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The TSC against CLOCK_REALTIME: `ns = ns_base + ((tsc - tsc_base) *
/// mult) >> shift` (`Header`'s calibration, `rt_now_ns`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clock {
    pub tsc_base: u64,
    pub ns_base: u64,
    pub mult: u64,
    pub shift: u32,
}

impl Clock {
    /// CLOCK_REALTIME ns at TSC `tsc` (the time line of `gettimeofday_ns()`).
    pub fn ns(&self, tsc: u64) -> u64 {
        let d = i128::from(tsc) - i128::from(self.tsc_base);
        let ns = i128::from(self.ns_base) + ((d * i128::from(self.mult)) >> self.shift);
        ns.clamp(0, i128::from(u64::MAX)) as u64
    }

    /// ns in `ticks` TSC ticks.
    pub fn ticks_ns(&self, ticks: u64) -> u64 {
        ((u128::from(ticks) * u128::from(self.mult)) >> self.shift).min(u128::from(u64::MAX)) as u64
    }

    /// The fewest ticks that last at least `ns` (`ticks_ns` of them ≥ ns).
    pub fn ns_ticks(&self, ns: u64) -> u64 {
        let m = u128::from(self.mult.max(1));
        let mut t = ((u128::from(ns) << self.shift) / m).min(u128::from(u64::MAX)) as u64;
        while self.ticks_ns(t) < ns && t < u64::MAX {
            t += 1;
        }
        t
    }
}

/// The process's TSC calibration, measured once (5 ms) and shared by every
/// region and by the `--chrome` writer, which converts the ticks of spans.
pub fn clock() -> Clock {
    static CLOCK: std::sync::OnceLock<Clock> = std::sync::OnceLock::new();
    *CLOCK.get_or_init(calibrate_tsc)
}

/// The TSC frequency relative to CLOCK_REALTIME: (tsc, ns) pairs taken
/// `spread` apart give a 32.32 fixed-point ns-per-tick multiplier.
fn calibrate_tsc() -> Clock {
    fn now_ns() -> u64 {
        realtime_ns()
    }
    fn tsc() -> u64 {
        crate::arch::native::clock()
    }
    let (t0, n0) = (tsc(), now_ns());
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_millis(5) {
        std::hint::spin_loop();
    }
    let (t1, n1) = (tsc(), now_ns());
    let dt = (t1 - t0).max(1);
    let mult = (((n1 - n0) as u128) << telco_abi::region::TSC_SHIFT) / dt as u128;
    Clock { tsc_base: t1, ns_base: n1, mult: mult as u64, shift: telco_abi::region::TSC_SHIFT }
}

/// Seal a memfd's size (`F_SEAL_SHRINK | F_SEAL_GROW`) and its seals
/// (`F_SEAL_SEAL`).
pub fn seal_size(file: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl on an open descriptor with integer arguments.
    let r = unsafe {
        libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL)
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
