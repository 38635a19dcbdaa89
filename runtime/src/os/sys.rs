//! The tracer's own memory, signals and clocks: the region's memfd and its
//! mapping, executable memory for compiled handlers run in the tracer, the
//! session's signal pipe, the dlopen handshake's watcher ([`Watch`]),
//! CLOCK_REALTIME/MONOTONIC and the cycle counter's calibration. Every
//! mapping is a value whose `Drop` unmaps it. nix for every call but the
//! signal handler's `write` (async-signal-safe, raw) and the futex.

use nix::sys::mman::{MapFlags, ProtFlags};
use std::io;
use std::num::NonZeroUsize;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

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
    /// A new memfd of `len` bytes for a region made here (a session
    /// without a target), to map with [`SharedMemory::mirrored`].
    pub fn new_fd(len: usize) -> io::Result<OwnedFd> {
        memfd(c"telco-stap-region", len, false)
    }

    /// A new memfd of `len` bytes for the region of another trust domain
    /// of a session (`session/domains.rs`).
    pub fn new_domain_fd(len: usize) -> io::Result<OwnedFd> {
        memfd(c"telco-stap-domain", len, false)
    }

    /// Map `len` bytes of an open memfd (the target's, through
    /// `/proc/PID/fd/N`).
    pub fn from_fd(fd: OwnedFd, len: usize) -> io::Result<SharedMemory> {
        SharedMemory::map(fd, len, None, false)
    }

    /// [`SharedMemory::from_fd`] at exactly `at`, never over another
    /// mapping (`MAP_FIXED_NOREPLACE`): the trusted mirror, below the
    /// region (`telco_abi::region::MIRROR_GAP`).
    pub fn from_fd_at(fd: OwnedFd, len: usize, at: usize) -> io::Result<SharedMemory> {
        SharedMemory::map(fd, len, Some(at), true)
    }

    /// Map `fd` read and write, shared: near `at` (a hint), or `exact`ly
    /// there and never over another mapping (`MAP_FIXED_NOREPLACE`).
    fn map(fd: OwnedFd, len: usize, at: Option<usize>, exact: bool) -> io::Result<SharedMemory> {
        let n = NonZeroUsize::new(len).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let flags = MapFlags::MAP_SHARED | if exact { MapFlags::MAP_FIXED_NOREPLACE } else { MapFlags::empty() };
        let hint = at.and_then(NonZeroUsize::new);
        // SAFETY: a fresh shared mapping of the file, owned by the value;
        // with `exact`, never over another mapping (NOREPLACE).
        let p = unsafe { nix::sys::mman::mmap(hint, n, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, flags, &fd, 0)? };
        if exact && at.is_some_and(|a| a != p.as_ptr() as usize) {
            // SAFETY: unmapping what was just mapped (an old kernel that
            // took NOREPLACE as a hint).
            let _ = unsafe { nix::sys::mman::munmap(p, len) };
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        Ok(SharedMemory { ptr: p.as_ptr().cast(), len, _fd: fd })
    }

    /// A new memfd of `len` bytes for a trusted mirror
    /// ([`SharedMemory::mirrored`]), sealable.
    pub fn new_mirror_fd(len: usize) -> io::Result<OwnedFd> {
        memfd(c"telco-mirror", len, true)
    }

    /// Map the region's memfd `region` (`len` bytes) and its trusted
    /// mirror's `mirror` (as long) `MIRROR_GAP` bytes below it
    /// (`telco_abi::region::MIRROR_GAP`), then seal the mirror against
    /// writing by anyone but this mapping ([`seal_mirror`]). Where the
    /// kernel's place for the region has no room below, other places are
    /// tried.
    pub fn mirrored(region: OwnedFd, mirror: OwnedFd, len: usize) -> io::Result<(SharedMemory, SharedMemory)> {
        let gap = telco_abi::region::MIRROR_GAP as usize;
        let mut hint = None;
        for attempt in 0..16u64 {
            let r = SharedMemory::map(region.try_clone()?, len, hint, false)?;
            if let Some(at) = (r.ptr as usize).checked_sub(gap).filter(|&a| a >= 1 << 16) {
                match SharedMemory::from_fd_at(mirror.try_clone()?, len, at) {
                    Ok(m) => {
                        // Mapped writable first: after the seal no mapping can be.
                        seal_mirror(&m._fd)?;
                        return Ok((r, m));
                    }
                    Err(e) if e.raw_os_error() != Some(libc::EEXIST) => return Err(e),
                    Err(_) => {}
                }
            }
            // Somewhere between 16 and 112 TiB, spread by the attempt.
            let spread = (attempt + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ monotonic_ns();
            hint = Some((((16u64 << 40) + spread % (96u64 << 40)) & !0xfff) as usize);
        }
        Err(io::Error::other("no room for the region's trusted mirror below it"))
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
        if let Some(p) = NonNull::new(self.ptr) {
            // SAFETY: unmapping exactly what from_fd() mapped.
            let _ = unsafe { nix::sys::mman::munmap(p.cast(), self.len) };
        }
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
        let n = NonZeroUsize::new(len).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: a fresh private anonymous mapping, owned by the value.
        let p = unsafe {
            nix::sys::mman::mmap_anonymous(
                None,
                n,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE,
            )?
        };
        // SAFETY: p has room for len >= code.len() bytes and does not overlap code.
        unsafe { std::ptr::copy_nonoverlapping(code.as_ptr(), p.as_ptr().cast::<u8>(), code.len()) };
        // SAFETY: changing the protection of our own mapping.
        if let Err(e) = unsafe { nix::sys::mman::mprotect(p, len, ProtFlags::PROT_READ | ProtFlags::PROT_EXEC) } {
            // SAFETY: unmapping what we mapped.
            let _ = unsafe { nix::sys::mman::munmap(p, len) };
            return Err(e.into());
        }
        Ok(ExecMemory { ptr: p.as_ptr().cast(), len })
    }

    pub fn addr(&self, offset: u32) -> *const u8 {
        // SAFETY: callers pass offsets inside the blob (from the artifact).
        unsafe { self.ptr.add(offset as usize) }
    }
}

impl Drop for ExecMemory {
    fn drop(&mut self) {
        if let Some(p) = NonNull::new(self.ptr) {
            // SAFETY: unmapping exactly what new() mapped.
            let _ = unsafe { nix::sys::mman::munmap(p.cast(), self.len) };
        }
    }
}

pub fn gettid() -> u64 {
    nix::unistd::gettid().as_raw() as u64
}

pub fn getuid() -> u32 {
    nix::unistd::getuid().as_raw()
}

pub fn getppid() -> u64 {
    nix::unistd::getppid().as_raw() as u64
}

/// The signals that end a session.
const SESSION_SIGNALS: [nix::sys::signal::Signal; 3] =
    [nix::sys::signal::Signal::SIGINT, nix::sys::signal::Signal::SIGTERM, nix::sys::signal::Signal::SIGHUP];

/// The write end of the self-pipe SIGINT/SIGTERM write to.
static SIGNAL_FD: AtomicI32 = AtomicI32::new(-1);

/// A session signal came before [`Signals::install`] (while a process was
/// being attached to and armed).
static EARLY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A session signal has come, at any time (never cleared): see
/// [`stop_requested`].
static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
    let fd = SIGNAL_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = 1u8;
        // SAFETY: write(2) is async-signal-safe; the buffer is valid.
        unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
    } else {
        EARLY.store(true, Ordering::Relaxed);
    }
}

/// Catch SIGINT, SIGTERM and SIGHUP from now on, before a process is
/// attached to: one that comes while the tracer attaches and arms is kept
/// and ends the session as soon as it runs ([`Signals::install`]), with a
/// clean detach, instead of killing the tracer halfway through an
/// injection. (Commands the tracer starts get the default dispositions
/// back at their exec.)
pub fn catch_session_signals() -> io::Result<()> {
    use nix::sys::signal::{signal, SigHandler};
    for sig in SESSION_SIGNALS {
        // SAFETY: installing an async-signal-safe handler.
        unsafe { signal(sig, SigHandler::Handler(on_signal))? };
    }
    Ok(())
}

/// SIGUSR2s received ([`catch_dump_signal`]), and the CLOCK_REALTIME
/// time of the last one.
static DUMP_SIGNALS: AtomicU64 = AtomicU64::new(0);
static DUMP_SIGNAL_NS: AtomicU64 = AtomicU64::new(0);
static DUMP_SIGNAL_TICKS: AtomicU64 = AtomicU64::new(0);

/// The clock the probes' spans are in (TSC ticks, `cntvct_el0`): an
/// instant compared with theirs is read from it, not converted from
/// CLOCK_REALTIME (the calibration's error grows with the session).
pub fn ticks() -> u64 {
    crate::arch::native::clock()
}

/// The flight recorder's hold words in the session's region
/// (`Header::flight_hold`, `flight_gens`), which the SIGUSR2 handler sets
/// at once (null: none).
static DUMP_HOLD: std::sync::atomic::AtomicPtr<u64> = std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
static DUMP_GENS: std::sync::atomic::AtomicPtr<u64> = std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

/// SIGUSR2 holds the history at `hold` (a fresh generation from `gens`)
/// from now on, until [`no_dump_hold`]: both are 8-aligned words of the
/// session's region, which stays mapped until then.
pub fn dump_hold(hold: *mut u64, gens: *mut u64) {
    DUMP_GENS.store(gens, Ordering::Relaxed);
    DUMP_HOLD.store(hold, Ordering::Release);
}

/// The region is about to go: SIGUSR2 holds nothing.
pub fn no_dump_hold() {
    DUMP_HOLD.store(std::ptr::null_mut(), Ordering::Release);
}

extern "C" fn on_dump_signal(_: libc::c_int) {
    let hold = DUMP_HOLD.load(Ordering::Acquire);
    let gens = DUMP_GENS.load(Ordering::Relaxed);
    if !hold.is_null() && !gens.is_null() {
        // SAFETY: words of the mapped region (`dump_hold`); atomics are
        // async-signal-safe.
        let gen = unsafe { AtomicU64::from_ptr(gens) }.fetch_add(1, Ordering::Relaxed).wrapping_add(1).max(1);
        // SAFETY: as above.
        unsafe { AtomicU64::from_ptr(hold) }.store(gen, Ordering::Release);
    }
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime is async-signal-safe; `ts` is valid.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    DUMP_SIGNAL_NS.store(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64, Ordering::Relaxed);
    DUMP_SIGNAL_TICKS.store(ticks(), Ordering::Relaxed);
    DUMP_SIGNALS.fetch_add(1, Ordering::Release);
}

/// `--flight-recorder`: SIGUSR2 asks for a dump (counted, never the
/// default action, which would end the tracer).
pub fn catch_dump_signal() -> io::Result<()> {
    use nix::sys::signal::{signal, SigHandler, Signal};
    // SAFETY: installing an async-signal-safe handler.
    unsafe { signal(Signal::SIGUSR2, SigHandler::Handler(on_dump_signal))? };
    Ok(())
}

/// SIGUSR2s so far, and when the last one came (CLOCK_REALTIME ns, and
/// [`ticks`]).
pub fn dump_signals() -> (u64, u64, u64) {
    let n = DUMP_SIGNALS.load(Ordering::Acquire);
    (n, DUMP_SIGNAL_NS.load(Ordering::Relaxed), DUMP_SIGNAL_TICKS.load(Ordering::Relaxed))
}

/// Whether SIGINT, SIGTERM or SIGHUP has come since
/// [`catch_session_signals`]: the session is ending (or ended), and the
/// tracer's waits on the target (`os::ptrace`) give up an operation the
/// target holds up, instead of waiting on while the user waits for the
/// tracer. Polled, not a pipe: it holds before the session's
/// [`Signals`] exist (attach) and after (detach).
pub fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// SIGINT, SIGTERM and SIGHUP end the session: they become a readable byte
/// on a pipe that the session's waits poll.
pub struct Signals {
    read: OwnedFd,
    _write: OwnedFd,
}

impl Signals {
    pub fn install() -> io::Result<Signals> {
        use nix::fcntl::OFlag;
        use nix::sys::signal::{signal, SigHandler};
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        SIGNAL_FD.store(write.as_raw_fd(), Ordering::Relaxed);
        for sig in SESSION_SIGNALS {
            // SAFETY: installing an async-signal-safe handler.
            unsafe { signal(sig, SigHandler::Handler(on_signal))? };
        }
        if EARLY.swap(false, Ordering::Relaxed) {
            nix::unistd::write(&write, &[1])?;
        }
        Ok(Signals { read, _write: write })
    }

    /// Wait until a signal arrives or `timeout` passes (None: forever).
    /// Returns whether a signal arrived.
    pub fn wait(&self, timeout: Option<std::time::Duration>) -> bool {
        self.wait_or(timeout, &[])
    }

    /// [`Signals::wait`], returning early (false) also when one of `also`
    /// becomes readable (a [`Watch`], held execs).
    pub fn wait_or(&self, timeout: Option<std::time::Duration>, also: &[std::os::fd::BorrowedFd<'_>]) -> bool {
        use nix::poll::{ppoll, PollFd, PollFlags};
        use std::os::fd::AsFd;
        let mut fds = vec![PollFd::new(self.read.as_fd(), PollFlags::POLLIN)];
        fds.extend(also.iter().map(|&fd| PollFd::new(fd, PollFlags::POLLIN)));
        let ts = timeout.map(nix::sys::time::TimeSpec::from_duration);
        ppoll(&mut fds, ts, None).is_ok_and(|n| n > 0)
            && fds[0].revents().is_some_and(|r| r.contains(PollFlags::POLLIN))
    }

    pub fn pending(&self) -> bool {
        self.wait(Some(std::time::Duration::ZERO))
    }
}

/// The pipe goes; the handler stays: a signal after the session's waits
/// (^C pressed again while the end probes run and the process is
/// detached and restored) is noted and changes nothing, where the default
/// action would kill the tracer halfway through putting the process back.
impl Drop for Signals {
    fn drop(&mut self) {
        SIGNAL_FD.store(-1, Ordering::Relaxed);
    }
}

fn clock_ns(clock: nix::time::ClockId) -> u64 {
    nix::time::clock_gettime(clock).map_or(0, |ts| ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64)
}

/// CLOCK_REALTIME in ns (the handlers' `gettimeofday_ns()` time line).
pub fn realtime_ns() -> u64 {
    clock_ns(nix::time::ClockId::CLOCK_REALTIME)
}

/// CLOCK_MONOTONIC in ns.
pub fn monotonic_ns() -> u64 {
    clock_ns(nix::time::ClockId::CLOCK_MONOTONIC)
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

    /// The TSC tick at CLOCK_REALTIME `ns` (the inverse of [`Clock::ns`],
    /// to a tick).
    pub fn tsc(&self, ns: u64) -> u64 {
        if ns >= self.ns_base {
            self.tsc_base.saturating_add(self.ns_ticks(ns - self.ns_base))
        } else {
            self.tsc_base.saturating_sub(self.ns_ticks(self.ns_base - ns))
        }
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
    // A pair: the clock read between two reads of the TSC, the closest of
    // a few (a pair the thread was preempted in, or the host took the
    // CPU from, is off by as long: over 5 ms, microseconds are hundreds
    // of parts per million, milliseconds over a session).
    let pair = || {
        (0..16)
            .filter_map(|_| {
                let a = tsc();
                let n = now_ns();
                let b = tsc();
                // (Moved to a CPU whose counter is behind: no pair.)
                (b >= a).then(|| (b - a, a + (b - a) / 2, n))
            })
            .min_by_key(|p| p.0)
            .map_or((tsc(), now_ns()), |(_, t, n)| (t, n))
    };
    let (t0, n0) = pair();
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_millis(5) {
        std::hint::spin_loop();
    }
    let (t1, n1) = pair();
    let dt = (t1 - t0).max(1);
    let mult = (((n1 - n0) as u128) << telco_abi::region::TSC_SHIFT) / dt as u128;
    Clock { tsc_base: t1, ns_base: n1, mult: mult as u64, shift: telco_abi::region::TSC_SHIFT }
}

/// Seal a memfd's size (`F_SEAL_SHRINK | F_SEAL_GROW`) and its seals
/// (`F_SEAL_SEAL`).
pub fn seal_size(file: &std::fs::File) -> std::io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, SealFlag};
    let seals = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL;
    fcntl(file, FcntlArg::F_ADD_SEALS(seals))?;
    Ok(())
}

/// Map `len` bytes of `file` from `offset`, shared, at exactly `at` in
/// this process (`MAP_FIXED`: over what the caller mapped there, a part
/// of its own mapping), writable or read-only: the block tracer's code
/// memfd over its pool (`inject::itrace_pool`). Unmapped with the
/// mapping it lies in.
pub fn map_fixed_shared<F: std::os::fd::AsFd>(
    file: &F,
    at: usize,
    len: usize,
    offset: u64,
    writable: bool,
) -> io::Result<()> {
    let n = NonZeroUsize::new(len).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    let prot = if writable { ProtFlags::PROT_READ | ProtFlags::PROT_WRITE } else { ProtFlags::PROT_READ };
    // SAFETY: the caller owns the mapping at `at..at + len` and gives it
    // up to this one (the same memory role, another file).
    unsafe {
        nix::sys::mman::mmap(
            NonZeroUsize::new(at),
            n,
            prot,
            MapFlags::MAP_SHARED | MapFlags::MAP_FIXED,
            file,
            offset as libc::off_t,
        )?
    };
    Ok(())
}

/// A memfd of `len` bytes here, `sealable` or not.
fn memfd(name: &std::ffi::CStr, len: usize, sealable: bool) -> io::Result<OwnedFd> {
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let seal = if sealable { MFdFlags::MFD_ALLOW_SEALING } else { MFdFlags::empty() };
    let fd = memfd_create(name, MFdFlags::MFD_CLOEXEC | seal)?;
    nix::unistd::ftruncate(&fd, len as libc::off_t)?;
    Ok(fd)
}

/// Seal the trusted mirror's memfd (`telco_abi::region::MIRROR_GAP`):
/// no new writable mapping, no `write`, no change of size, no more seals
/// (`F_SEAL_FUTURE_WRITE`: the tracer's own mapping, made before the
/// seal, still writes). A process that maps it afterwards can map it
/// only read-only and never make that mapping writable (the kernel clears
/// `VM_MAYWRITE` of a shared mapping of such a file).
pub fn seal_mirror<F: std::os::fd::AsFd>(file: &F) -> std::io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, SealFlag};
    let seals = SealFlag::F_SEAL_FUTURE_WRITE | SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL;
    fcntl(file, FcntlArg::F_ADD_SEALS(seals))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Clock;

    /// `tsc` undoes `ns` to within a tick, on both sides of the base.
    #[test]
    fn tsc_is_the_inverse_of_ns() {
        // 2.5 GHz: 0.4 ns a tick, as a 32.32 multiplier.
        let c = Clock { tsc_base: 1_000_000_000, ns_base: 1_700_000_000_000_000_000, mult: (2 << 32) / 5, shift: 32 };
        for t in [0u64, 1, 999_999_999, 1_000_000_000, 1_000_000_001, 5_000_000_000, u64::MAX / 4] {
            let back = c.tsc(c.ns(t));
            // A ns is 2.5 ticks: within 3 ticks, and the same ns give or take one.
            assert!(back.abs_diff(t) <= 3, "{t} -> {} -> {back}", c.ns(t));
            assert!(c.ns(back).abs_diff(c.ns(t)) <= 1, "{t}");
        }
    }
}

/// Wait (at most `timeout`) while the shared word `word` holds `seen`
/// (`FUTEX_WAIT`, not private: the word may be in memory other processes
/// map). Returns at a wake, a change, a signal or the timeout. Raw
/// `libc::syscall`: nix has no futex call.
pub fn futex_wait(word: &std::sync::atomic::AtomicU32, seen: u32, timeout: std::time::Duration) {
    let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as _ };
    // SAFETY: FUTEX_WAIT on a live word, with a relative timeout.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, seen, &ts as *const libc::timespec) };
}

/// Wake every waiter on the shared word `word` (`FUTEX_WAKE`).
pub fn futex_wake(word: &std::sync::atomic::AtomicU32) {
    // SAFETY: FUTEX_WAKE on a live word.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
}

/// A thread that waits on a word of a memfd (a futex shared with the
/// processes that map it: `FUTEX_WAIT`, not private) and makes a pipe
/// readable each time the word changes, so a `poll` on the pipe wakes
/// at once (the dlopen handshake: `Header::dl_gen`, which `rt_dlnotify`
/// wakes). At most one wake per 250 µs, and one per 10 ms once a target
/// changes the word more than 200 times in 100 ms (no loader does).
pub struct Watch {
    read: OwnedFd,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watch {
    /// Watch the 4-aligned u32 at `offset` of the memfd `fd` (its first
    /// `len` bytes mapped by the thread itself, so the watch outlives any
    /// other mapping of it).
    pub fn start(fd: i32, len: usize, offset: usize) -> io::Result<Watch> {
        use nix::fcntl::OFlag;
        if !offset.is_multiple_of(4) || offset + 4 > len {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        // SAFETY: `fd` is an open memfd of the caller's; dup gives the
        // mapping its own descriptor.
        let own = nix::unistd::dup(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) })?;
        let map = SharedMemory::from_fd(own, len)?;
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let halt = stop.clone();
        let thread = std::thread::Builder::new().name("telco-dl-watch".into()).spawn(move || {
            // SAFETY: a 4-aligned word inside the thread's own mapping.
            let word = unsafe { std::sync::atomic::AtomicU32::from_ptr(map.as_ptr().add(offset).cast()) };
            let mut seen = word.load(Ordering::Acquire);
            // Wakes in the current 100 ms: past 200 (a target that spins on
            // the word, not a loader), one per 10 ms.
            let (mut window, mut wakes) = (std::time::Instant::now(), 0u32);
            while !halt.load(Ordering::Relaxed) {
                futex_wait(word, seen, std::time::Duration::from_millis(50));
                let now = word.load(Ordering::Acquire);
                if now != seen {
                    seen = now;
                    let _ = nix::unistd::write(&write, &[1]);
                    if window.elapsed() > std::time::Duration::from_millis(100) {
                        (window, wakes) = (std::time::Instant::now(), 0);
                    }
                    wakes += 1;
                    let gap = if wakes > 200 { 10_000 } else { 250 };
                    std::thread::sleep(std::time::Duration::from_micros(gap));
                }
            }
        })?;
        Ok(Watch { read, stop, thread: Some(thread) })
    }

    /// The pipe a poll waits on.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.read.as_fd()
    }

    /// Empty the pipe (the change is being answered).
    pub fn drain(&self) {
        let mut buf = [0u8; 64];
        while nix::unistd::read(&self.read, &mut buf).is_ok_and(|n| n > 0) {}
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // The thread sees the flag within one wait's timeout (50 ms).
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
