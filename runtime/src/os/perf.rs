//! CPU-time samples of a process's threads from the kernel's perf events
//! (`timer.profile`).
//!
//! For every thread of the process and every CPU, one software
//! `task-clock` event with a sample period in nanoseconds of that thread's
//! CPU time: a thread is sampled every `period` it spends running, an idle
//! thread costs nothing. Events are `inherit`ed, so threads (and children)
//! the process creates later are sampled from their first instruction;
//! they exist per CPU because the kernel refuses to map the buffer of an
//! inherited per-thread event. The events of one CPU share one ring
//! (`PERF_EVENT_IOC_SET_OUTPUT`), which the tracer drains.
//!
//! Each sample carries the thread's user registers and a copy of the top
//! of its user stack (`PERF_SAMPLE_REGS_USER`, `PERF_SAMPLE_STACK_USER`,
//! as `perf record --call-graph dwarf` asks for): the tracer unwinds it
//! with the modules' CFI afterwards. Nothing runs in the target and
//! nothing touches its signals, timers or system calls: the kernel takes
//! the sample on its own timer interrupt.
//!
//! The ring is written by the kernel alone (the target cannot reach it),
//! but its records are still parsed defensively: a size that does not fit
//! ends the drain of that ring instead of reading past it. Samples the
//! kernel could not store (the ring full) arrive as `PERF_RECORD_LOST`
//! counts, reported in the session's summary.
//!
//! Off-CPU time (`--off-cpu`, `process.blocked`): one more software event
//! per thread and CPU, `context-switches` with a period of 1, samples each
//! switch-out with the same registers and stack (taken in the kernel's
//! `schedule`, so it needs kernel samples allowed: root or CAP_PERFMON),
//! and asks for `PERF_RECORD_SWITCH` records (`context_switch`): the
//! thread's next switch-in ends the wait. The records come out as the
//! rings hold them ([`Event`]); the profiler unwinds each switch-out's
//! stack at once (read in place in the ring) and pairs the waits
//! (`crate::profile`). A sample's `period` says which event took it: 1
//! for a switch, the CPU period (at least 10 µs) for `task-clock`.
//!
//! `nix` has no `perf_event_open`: the system call, the ring's `mmap` and
//! the two ioctls are raw `libc`, with the attribute block laid out here
//! (`struct perf_event_attr`, its 136-byte version).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::arch::native::sample::PERF_USER_REGS;

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
const PERF_COUNT_SW_CONTEXT_SWITCHES: u64 = 3;

const SAMPLE_IP: u64 = 1 << 0;
const SAMPLE_TID: u64 = 1 << 1;
const SAMPLE_TIME: u64 = 1 << 2;
const SAMPLE_CALLCHAIN: u64 = 1 << 5;
const SAMPLE_CPU: u64 = 1 << 7;
const SAMPLE_PERIOD: u64 = 1 << 8;
const SAMPLE_REGS_USER: u64 = 1 << 12;
const SAMPLE_STACK_USER: u64 = 1 << 13;

const ATTR_INHERIT: u64 = 1 << 1;
const ATTR_EXCLUDE_HV: u64 = 1 << 6;
const ATTR_TASK: u64 = 1 << 13;
const ATTR_SAMPLE_ID_ALL: u64 = 1 << 18;
const ATTR_USE_CLOCKID: u64 = 1 << 25;
const ATTR_CONTEXT_SWITCH: u64 = 1 << 26;

const RECORD_LOST: u32 = 2;
const RECORD_EXIT: u32 = 4;
const RECORD_SAMPLE: u32 = 9;
const RECORD_SWITCH: u32 = 14;
const MISC_SWITCH_OUT: u16 = 1 << 13;
const MISC_SWITCH_OUT_PREEMPT: u16 = 1 << 14;
const MISC_CPUMODE_MASK: u16 = 7;
const MISC_USER: u16 = 2;

const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
const IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
const IOC_DISABLE: libc::c_ulong = 0x2401;

/// Where `data_head`, `data_tail`, `data_offset` and `data_size` are in
/// the ring's first page (`struct perf_event_mmap_page`).
const HEAD_AT: usize = 1024;
const TAIL_AT: usize = 1032;
const DATA_OFFSET_AT: usize = 1040;
const DATA_SIZE_AT: usize = 1048;

/// Ring data pages per CPU (plus the control page): 2 MiB, about 120
/// samples of 16 KiB stacks, drained every few milliseconds.
const RING_PAGES: usize = 512;
/// With switches sampled: 8 MiB, some 1,000 switch-outs of 8 KiB stacks
/// (the tracer is woken when a ring is half full).
const SWITCH_RING_PAGES: usize = 2048;
/// The stack a switch-out copies (perf's own default for `--call-graph
/// dwarf`: a thread blocks in a system call, its stack no deeper than
/// where it computes).
pub const SWITCH_STACK_BYTES: u32 = 8 * 1024;

/// A sample as the kernel took it (its stack read in place in the ring,
/// while the drain lasts).
#[derive(Debug, Clone)]
pub struct RawSample<'a> {
    pub pid: u32,
    pub tid: u32,
    /// CLOCK_MONOTONIC, ns.
    pub time: u64,
    /// The CPU time this sample stands for (the event's period), ns.
    pub period: u64,
    /// Taken while the thread ran in the kernel (a system call, a fault):
    /// `regs` are then its user registers where it entered the kernel.
    pub in_kernel: bool,
    /// The user registers, in our register file's order.
    pub regs: telco_abi::region::SavedRegs,
    /// The user stack from `regs`' stack pointer upwards.
    pub stack: std::borrow::Cow<'a, [u8]>,
    /// Taken in the kernel: its call chain, innermost first (kernel
    /// addresses), when kernel samples are allowed.
    pub kernel: Vec<u64>,
}

/// A ring's record: a sample (`period` 1: a switch-out), or a thread's
/// switch (with `--off-cpu`: `preempted` when it was switched out
/// runnable, its time slice over or a more urgent thread woken), or its
/// exit.
pub enum Event<'a> {
    Sample(RawSample<'a>),
    Switch { tid: u32, time: u64, out: bool, preempted: bool },
    Exit { tid: u32, time: u64 },
}

struct Ring {
    base: *mut u8,
    len: usize,
}

// The ring is a shared mapping the kernel writes; only the sampler's
// thread reads it.
unsafe impl Send for Ring {}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `Sampler::open`, unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// The perf events sampling one process.
pub struct Sampler {
    pid: i32,
    period_ns: u64,
    stack_bytes: u32,
    /// One ring per CPU: the first event opened on that CPU.
    rings: Vec<(OwnedFd, Ring)>,
    /// Every other event, redirected into its CPU's ring.
    others: Vec<OwnedFd>,
    /// Threads with events of their own (the rest inherit them).
    threads: std::collections::BTreeSet<i32>,
    /// Samples the kernel could not store (rings full).
    pub lost: u64,
    /// Records that did not parse (counted, skipped).
    pub malformed: u64,
    buf: Vec<u8>,
    /// Switches sampled too (`--off-cpu`).
    switches: bool,
    /// CPU-time samples too (`timer.profile`).
    cpu: bool,
}

/// A sampling event: `task-clock` every `period_ns`, or (`switches`) every
/// context switch with its records.
fn attr(period_ns: u64, stack_bytes: u32, exclude_kernel: bool, switches: bool) -> [u64; 17] {
    // struct perf_event_attr, PERF_ATTR_SIZE_VER8 (136 bytes).
    let mut a = [0u64; 17];
    a[0] = u64::from(PERF_TYPE_SOFTWARE) | (136u64 << 32);
    a[1] = if switches { PERF_COUNT_SW_CONTEXT_SWITCHES } else { PERF_COUNT_SW_TASK_CLOCK };
    a[2] = if switches { 1 } else { period_ns };
    a[3] = SAMPLE_IP
        | SAMPLE_TID
        | SAMPLE_TIME
        | SAMPLE_CPU
        | SAMPLE_PERIOD
        | SAMPLE_CALLCHAIN
        | SAMPLE_REGS_USER
        | SAMPLE_STACK_USER;
    // The call chain is the kernel's part only (exclude_callchain_user,
    // bit 22: the user stack is unwound from the copy); none at all where
    // kernel samples are not allowed (exclude_kernel, bit 5, and
    // exclude_callchain_kernel, bit 21: every event of a ring has the same
    // record layout).
    a[5] = ATTR_INHERIT
        | ATTR_EXCLUDE_HV
        | ATTR_SAMPLE_ID_ALL
        | ATTR_USE_CLOCKID
        | 1 << 22
        | if exclude_kernel { 1 << 5 | 1 << 21 } else { 0 }
        | if switches { ATTR_CONTEXT_SWITCH | ATTR_TASK } else { 0 };
    // wakeup_events: 0; sample_regs_user at byte 80, sample_stack_user and
    // clockid at 88.
    a[10] = PERF_USER_REGS.iter().fold(0u64, |m, (p, _)| m | 1 << p);
    a[11] = u64::from(stack_bytes) | (u64::from(libc::CLOCK_MONOTONIC as u32) << 32);
    a
}

fn open_event(a: &[u64; 17], tid: i32, cpu: i32) -> io::Result<OwnedFd> {
    // SAFETY: perf_event_open with a live, fully initialised attr.
    let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, a.as_ptr(), tid, cpu, -1, PERF_FLAG_FD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

impl Sampler {
    /// Sample every thread of `pid` every `period_ns` of its CPU time
    /// (`None`: not at all), with `stack_bytes` of user stack (a multiple
    /// of 8, at most 65,000), and (`switches`) at each switch-out, with
    /// the time until its switch-in.
    pub fn open(pid: i32, period_ns: Option<u64>, stack_bytes: u32, switches: bool) -> io::Result<Sampler> {
        let cpus = online_cpus();
        let mut s = Sampler {
            switches,
            cpu: period_ns.is_some() || !switches,
            pid,
            period_ns: period_ns.unwrap_or(10_000_000).max(10_000),
            stack_bytes: stack_bytes.min(65_000) & !7,
            rings: Vec::new(),
            others: Vec::new(),
            threads: Default::default(),
            lost: 0,
            malformed: 0,
            buf: Vec::new(),
        };
        s.cover_threads(&cpus)?;
        Ok(s)
    }

    /// Open events for the process's threads that have none yet (until the
    /// list stops growing: a thread created while we open them is either
    /// seen again or inherits the event of the thread that created it).
    fn cover_threads(&mut self, cpus: &[i32]) -> io::Result<()> {
        for _ in 0..100 {
            let tasks = super::proc::tasks(self.pid)?;
            let new: Vec<i32> = tasks.into_iter().filter(|t| !self.threads.contains(t)).collect();
            if new.is_empty() {
                return Ok(());
            }
            for tid in new {
                match self.open_thread(tid, cpus) {
                    Ok(()) => {}
                    // Gone meanwhile.
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                    Err(e) => return Err(e),
                }
                self.threads.insert(tid);
            }
        }
        Ok(())
    }

    fn open_thread(&mut self, tid: i32, cpus: &[i32]) -> io::Result<()> {
        let kinds = [(self.cpu, false), (self.switches, true)];
        for (_, switches) in kinds.into_iter().filter(|k| k.0) {
            let stack = if switches { SWITCH_STACK_BYTES.min(self.stack_bytes) } else { self.stack_bytes };
            let mut a = attr(self.period_ns, stack, false, switches);
            for (i, &cpu) in cpus.iter().enumerate() {
                let fd = match open_event(&a, tid, cpu) {
                    Ok(fd) => fd,
                    // Kernel samples not allowed (perf_event_paranoid):
                    // user time only. (A switch is taken in the kernel:
                    // no fallback for it.)
                    Err(e) if e.raw_os_error() == Some(libc::EACCES) && a[5] & (1 << 5) == 0 && !switches => {
                        a = attr(self.period_ns, stack, true, false);
                        open_event(&a, tid, cpu)?
                    }
                    Err(e) => return Err(e),
                };
                self.add(i, fd)?;
            }
        }
        Ok(())
    }

    /// Event `fd` on the `i`th CPU: the first one there gets the ring,
    /// the others write into it.
    fn add(&mut self, i: usize, fd: OwnedFd) -> io::Result<()> {
        if let Some((ring_fd, _)) = self.rings.get(i) {
            // SAFETY: an ioctl on two live perf descriptors.
            if unsafe { libc::ioctl(fd.as_raw_fd(), IOC_SET_OUTPUT, ring_fd.as_raw_fd()) } != 0 {
                return Err(io::Error::last_os_error());
            }
            self.others.push(fd);
            return Ok(());
        }
        let page = 4096usize;
        let len = page * (if self.switches { SWITCH_RING_PAGES } else { RING_PAGES } + 1);
        // SAFETY: mapping a perf event's ring (read-write: we write
        // data_tail), unmapped by Ring's Drop.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        self.rings.push((fd, Ring { base: base.cast(), len }));
        Ok(())
    }

    /// The sampled process.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The descriptors to poll for samples: those not hung up (a ring
    /// whose first thread has gone polls as hung up for ever, while the
    /// other threads' events still write into it: drained every 10 ms).
    pub fn fds(&self) -> Vec<i32> {
        let mut p: Vec<libc::pollfd> = self
            .rings
            .iter()
            .map(|(fd, _)| libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 })
            .collect();
        // SAFETY: a zero-timeout poll of our own live descriptors.
        unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, 0) };
        p.iter().filter(|x| x.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) == 0).map(|x| x.fd).collect()
    }

    /// Stop sampling (the rings keep what they hold).
    pub fn disable(&self) {
        for fd in self.rings.iter().map(|(f, _)| f).chain(self.others.iter()) {
            // SAFETY: an ioctl on a live perf descriptor.
            unsafe { libc::ioctl(fd.as_raw_fd(), IOC_DISABLE, 0) };
        }
    }

    /// Every record the rings hold, oldest first per CPU (the CPUs one
    /// after the other: a thread's records on two CPUs are not in time
    /// order here).
    pub fn drain(&mut self, f: &mut dyn FnMut(Event<'_>)) {
        let mut lost = 0;
        let mut malformed = 0;
        for (_, ring) in &self.rings {
            drain_ring(ring, &mut self.buf, &mut lost, &mut malformed, f);
        }
        self.lost += lost;
        self.malformed += malformed;
    }
}

fn drain_ring(ring: &Ring, buf: &mut Vec<u8>, lost: &mut u64, malformed: &mut u64, f: &mut dyn FnMut(Event<'_>)) {
    use std::sync::atomic::{AtomicU64, Ordering};
    // SAFETY: the control page is mapped; the head is written by the
    // kernel (acquire), the tail by us (release), both aligned words.
    let head_w = unsafe { AtomicU64::from_ptr(ring.base.add(HEAD_AT).cast()) };
    let tail_w = unsafe { AtomicU64::from_ptr(ring.base.add(TAIL_AT).cast()) };
    // SAFETY: plain reads of the control page's fixed fields.
    let (off, size) = unsafe {
        (
            std::ptr::read_volatile(ring.base.add(DATA_OFFSET_AT).cast::<u64>()) as usize,
            std::ptr::read_volatile(ring.base.add(DATA_SIZE_AT).cast::<u64>()) as usize,
        )
    };
    let (off, size) = if size == 0 || off + size > ring.len { (4096, ring.len - 4096) } else { (off, size) };
    let head = head_w.load(Ordering::Acquire);
    let mut tail = tail_w.load(Ordering::Relaxed);
    let data = ring.base.wrapping_add(off);
    // A record may wrap around the data area's end: at most two slices.
    let copy = |from: u64, n: usize, out: &mut Vec<u8>| {
        out.clear();
        let start = from as usize % size;
        let first = n.min(size - start);
        // SAFETY: [start, start + first) and [0, n - first) lie inside the
        // data area (n <= size: a record is at most 64 KiB, the area 2 MiB).
        unsafe {
            out.extend_from_slice(std::slice::from_raw_parts(data.add(start), first));
            out.extend_from_slice(std::slice::from_raw_parts(data, n.saturating_sub(first).min(size)));
        }
    };
    let mut h = Vec::with_capacity(8);
    while tail + 8 <= head {
        copy(tail, 8, &mut h);
        let kind = u32::from_ne_bytes(h[0..4].try_into().unwrap_or_default());
        let misc = u16::from_ne_bytes(h[4..6].try_into().unwrap_or_default());
        let len = u16::from_ne_bytes(h[6..8].try_into().unwrap_or_default()) as u64;
        if len < 8 || tail + len > head {
            *malformed += 1;
            tail = head;
            break;
        }
        // A record that does not wrap is read in place (a sample is some
        // 8 KiB of stack, unwound there: never copied).
        let start = tail as usize % size;
        let buf: &[u8] = if start + len as usize <= size {
            // SAFETY: [start, start + len) lies inside the data area, which
            // the kernel does not write between our head and tail.
            unsafe { std::slice::from_raw_parts(data.add(start), len as usize) }
        } else {
            copy(tail, len as usize, buf);
            buf
        };
        match kind {
            RECORD_SAMPLE => match parse_sample(buf, misc) {
                Some(s) => f(Event::Sample(s)),
                None => *malformed += 1,
            },
            // The sample id after the header: pid, tid, time.
            RECORD_SWITCH if buf.len() >= 24 => {
                let tid = u32::from_ne_bytes(buf[12..16].try_into().unwrap_or_default());
                let time = u64::from_ne_bytes(buf[16..24].try_into().unwrap_or_default());
                let out = misc & MISC_SWITCH_OUT != 0;
                f(Event::Switch { tid, time, out, preempted: out && misc & MISC_SWITCH_OUT_PREEMPT != 0 })
            }
            // pid, ppid, tid, ptid, time.
            RECORD_EXIT if buf.len() >= 32 => {
                let tid = u32::from_ne_bytes(buf[16..20].try_into().unwrap_or_default());
                let time = u64::from_ne_bytes(buf[24..32].try_into().unwrap_or_default());
                f(Event::Exit { tid, time })
            }
            RECORD_LOST if buf.len() >= 24 => {
                *lost += u64::from_ne_bytes(buf[16..24].try_into().unwrap_or_default());
            }
            _ => {}
        }
        tail += len;
    }
    tail_w.store(tail, Ordering::Release);
}

/// One `PERF_RECORD_SAMPLE` with our sample type: ip, pid/tid, time,
/// cpu, period, user registers, user stack.
fn parse_sample(r: &[u8], misc: u16) -> Option<RawSample<'_>> {
    let mut at = 8;
    let mut word = || -> Option<u64> {
        let w = u64::from_ne_bytes(r.get(at..at + 8)?.try_into().ok()?);
        at += 8;
        Some(w)
    };
    let _ip = word()?;
    let pt = word()?;
    let time = word()?;
    let _cpu = word()?;
    let period = word()?;
    // The kernel's call chain, less its context markers (PERF_CONTEXT_*,
    // the top 4095 values).
    let nr = word()?;
    // (At most the kernel's sample_max_stack, 127 by default: more is no
    // record of ours.)
    if nr > 4096 {
        return None;
    }
    let mut kernel = Vec::with_capacity(nr as usize);
    for _ in 0..nr {
        let ip = word()?;
        if ip < (-4095i64) as u64 {
            kernel.push(ip);
        }
    }
    let abi = word()?;
    let mut regs = telco_abi::region::SavedRegs::default();
    if abi != 0 {
        for (_, ours) in PERF_USER_REGS {
            regs.words[ours] = word()?;
        }
    }
    let size = word()? as usize;
    let start = at;
    let mut stack: &[u8] = &[];
    if size > 0 {
        let bytes = r.get(start..start + size)?;
        let dyn_size = u64::from_ne_bytes(r.get(start + size..start + size + 8)?.try_into().ok()?) as usize;
        stack = &bytes[..dyn_size.min(size)];
    }
    Some(RawSample {
        pid: pt as u32,
        tid: (pt >> 32) as u32,
        time,
        period,
        in_kernel: misc & MISC_CPUMODE_MASK != MISC_USER,
        regs,
        stack: std::borrow::Cow::Borrowed(stack),
        kernel,
    })
}

/// The online CPUs (`/sys/devices/system/cpu/online`: "0-3,5").
fn online_cpus() -> Vec<i32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut v = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let mut ends = part.splitn(2, '-').map(|x| x.trim().parse::<i32>());
        match (ends.next(), ends.next()) {
            (Some(Ok(a)), Some(Ok(b))) if a <= b && b - a < 4096 => v.extend(a..=b),
            (Some(Ok(a)), None) => v.push(a),
            _ => {}
        }
    }
    if v.is_empty() {
        // SAFETY: sysconf has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1);
        v.extend(0..n as i32);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_record_parses_and_a_short_one_does_not() {
        let mut r = vec![0u8; 8];
        let mut push = |v: u64| r.extend_from_slice(&v.to_ne_bytes());
        push(0x1234); // ip
        push(7 | 9 << 32); // pid, tid
        push(1000); // time
        push(1); // cpu
        push(10_101_010); // period
        push(3); // callchain: the kernel context marker, two addresses
        push((-128i64) as u64);
        push(0xffff_ffff_8100_0010);
        push(0xffff_ffff_8100_0020);
        push(2); // abi 64
        for i in 0..18 {
            push(100 + i);
        }
        push(16); // stack size
        push(0xaaaa);
        push(0xbbbb);
        push(8); // dyn size
        let s = parse_sample(&r, MISC_USER).expect("parses");
        assert_eq!((s.pid, s.tid, s.time, s.period, s.in_kernel), (7, 9, 1000, 10_101_010, false));
        // perf's order: ax bx cx dx si di bp sp ip flags r8..r15.
        assert_eq!(s.regs.words[telco_abi::arch::native::PC], 108);
        assert_eq!(s.regs.words[telco_abi::arch::native::SP], 107);
        assert_eq!(&*s.stack, 0xaaaau64.to_ne_bytes());
        assert_eq!(s.kernel, [0xffff_ffff_8100_0010, 0xffff_ffff_8100_0020]);
        assert!(parse_sample(&r[..r.len() - 9], MISC_USER).is_none());
    }

    #[test]
    fn online_cpus_are_listed() {
        assert!(!online_cpus().is_empty());
    }
}
