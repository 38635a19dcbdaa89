//! `timer.profile`: the target's threads sampled by CPU time
//! ([`crate::os::perf`]) and their stacks unwound in the tracer with the
//! modules' CFI (`.eh_frame`, `.debug_frame`) by framehop, the unwinder
//! samply uses, falling back to frame pointers only where a module has no
//! unwind information.
//!
//! Each sample carries the thread's user registers and the top 16 KiB of
//! its stack; the tracer knows the process's modules from
//! `/proc/PID/maps` (re-read when a frame lands outside every known module,
//! at most every 100 ms: a library loaded since) and reads their unwind
//! sections from the files (the vDSO's from the process's memory): each
//! file opened as the process maps it and held memory-mapped once for the
//! session however many names and processes map it (`os::modfile`), its
//! sections slices of that mapping, never copies. A stack
//! is a list of [`Frame`]s, the sampled pc first; each frame says which
//! module it is in so that the writers can name it by the module's
//! symbols. Frames no module holds are kept, as unknown, and counted.
//!
//! A [`Sink`] receives every unwound sample (the `--folded`,
//! `--flamegraph`, `--speedscope` and `--pprof` writers), and the session
//! runs the script's `timer.profile` handlers on it, in the sandbox, with
//! the registers and these frames (`ubacktrace()`).

use std::collections::HashMap;
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use telco_abi::region::{SavedRegs, SAMPLE_FRAMES};

use crate::arch::native::sample::{self as arch, Cache, Unwinder};
use crate::os::perf::{Event, RawSample, Sampler};
use crate::os::proc::{self, Mapping};

/// How much user stack each sample copies (as `perf record --call-graph
/// dwarf` does by default: 8 KiB; twice that here for deep interpreters).
pub const STACK_BYTES: u32 = 16 * 1024;

/// A module (an ELF file, or the vDSO) mapped in a sampled process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleInfo {
    /// The file as the process maps it (`[vdso]` for the vDSO).
    pub path: PathBuf,
    /// Load bias: address in the process minus link-time address.
    pub bias: u64,
    /// Where it is mapped (all its mappings' span).
    pub start: u64,
    pub end: u64,
    /// The file offset `start` maps.
    pub file_offset: u64,
    /// Its GNU build id, when it has one.
    pub build_id: Vec<u8>,
    /// The module's bytes: its file as the process maps it (never the
    /// file its path names: that may be another, `os::modfile`), or the
    /// vDSO's image read from the process's memory. Its symbols name its
    /// frames.
    pub image: Option<Bytes>,
}

/// One frame of a sampled stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// The sampled pc (first frame) or a return address.
    pub pc: u64,
    /// Where to look the frame's function up: the pc, or the return
    /// address minus one (inside the call).
    pub lookup: u64,
    /// Index into [`Profiler::modules`], `None` when no module holds it.
    pub module: Option<u32>,
    /// The signal trampoline a handler returns to: the frames after it
    /// are the code the signal interrupted.
    pub signal: bool,
    /// Our own code (a trampoline, a handler: `[telco-stap]`), under the
    /// probed function (`crate::owncode`).
    pub own: bool,
}

/// An unwound sample.
#[derive(Debug)]
pub struct Stack<'a> {
    pub pid: u32,
    pub tid: u32,
    /// CLOCK_MONOTONIC, ns.
    pub time: u64,
    /// CPU time this sample stands for, ns.
    pub period: u64,
    /// Taken in the kernel (a system call): the frames start where the
    /// thread entered it.
    pub in_kernel: bool,
    /// The kernel's frames then, innermost first (kernel addresses; empty
    /// where the kernel does not give them: `[kernel]`).
    pub kernel: &'a [u64],
    pub regs: &'a SavedRegs,
    /// The sampled pc first, then return addresses outwards.
    pub frames: &'a [Frame],
    /// The unwinder reached the stack's root (else the stack is cut: its
    /// outermost frames are missing).
    pub complete: bool,
    pub modules: &'a [ModuleInfo],
    /// An off-CPU sample (`--off-cpu`, `process.blocked`): the stack is
    /// where the thread blocked at `time`, and this is how long and in
    /// what. `period` is then the wait's length too.
    pub off_cpu: Option<Wait<'a>>,
}

/// A thread's time off its CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait<'a> {
    pub ns: u64,
    /// The system call it waited in (`futex`, `read`, ...), `preempted`
    /// (runnable, waiting for a CPU), `page fault`, `ptrace stop`,
    /// `stopped`, or `kernel` (blocked elsewhere in the kernel).
    pub name: &'a str,
}

/// Where unwound samples go (the profile files).
pub trait Sink: Send {
    fn sample(&mut self, s: &Stack<'_>);
    /// Called after each poll of the samples while the session runs
    /// (every few milliseconds): a sink that sends as it goes
    /// (`--pyroscope`) looks at the time.
    fn tick(&mut self) {}
    /// The session ended: write everything out.
    fn finish(&mut self, summary: &Summary) -> std::io::Result<()>;
}

/// What the profiler counted, for the session's summary.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub samples: u64,
    /// Samples the kernel could not store (its ring full).
    pub lost: u64,
    /// Stacks the unwinder could not follow to their root.
    pub truncated: u64,
    /// Frames in no known module.
    pub unknown_frames: u64,
    /// Records that did not parse.
    pub malformed: u64,
    /// Off-CPU samples (waits), among `samples`.
    pub waits: u64,
    /// Waits whose end was lost (the kernel's ring full): left out.
    pub unpaired: u64,
}

/// Bytes of a module shared between the unwinders of processes that map
/// the same file: a range of its mapped file (or of the vDSO's image),
/// no copy.
#[derive(Clone)]
pub struct Bytes {
    whole: Arc<dyn AsRef<[u8]> + Send + Sync>,
    range: std::ops::Range<usize>,
}

impl Bytes {
    fn new(whole: Arc<dyn AsRef<[u8]> + Send + Sync>) -> Bytes {
        let len = (*whole).as_ref().len();
        Bytes { whole, range: 0..len }
    }

    /// Bytes `range` of these, if they have them.
    fn slice(&self, range: std::ops::Range<usize>) -> Option<Bytes> {
        let len = self.range.len();
        (range.start <= range.end && range.end <= len).then(|| Bytes {
            whole: self.whole.clone(),
            range: self.range.start + range.start..self.range.start + range.end,
        })
    }
}

impl Default for Bytes {
    fn default() -> Bytes {
        Bytes::new(Arc::new(Vec::new()))
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &(*self.whole).as_ref()[self.range.clone()]
    }
}

impl AsRef<[u8]> for Bytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bytes({:?})", self.range)
    }
}

/// The same bytes of the same image.
impl PartialEq for Bytes {
    fn eq(&self, other: &Bytes) -> bool {
        Arc::ptr_eq(&self.whole, &other.whole) && self.range == other.range
    }
}

impl Eq for Bytes {}

/// A module's unwind sections, as read from its file.
#[derive(Clone, Default)]
struct Sections {
    text: Option<(std::ops::Range<u64>, Bytes)>,
    got: Option<std::ops::Range<u64>>,
    eh_frame: Option<(std::ops::Range<u64>, Bytes)>,
    eh_frame_hdr: Option<(std::ops::Range<u64>, Bytes)>,
    debug_frame: Option<Bytes>,
    /// (p_vaddr, p_offset, p_filesz) of each PT_LOAD.
    loads: Vec<(u64, u64, u64)>,
    build_id: Vec<u8>,
    /// The whole image.
    image: Option<Bytes>,
}

struct Proc {
    unwinder: Unwinder<Bytes>,
    /// Return addresses known to be (or not) the signal trampoline.
    sigreturns: HashMap<u64, bool>,
    cache: Box<Cache>,
    /// (start, end, module index), sorted.
    ranges: Vec<(u64, u64, u32)>,
    loaded: Instant,
}

/// Where the samples come from.
enum Source {
    /// The kernel's perf events ([`crate::os::perf`]).
    Perf(Sampler),
    /// The fallback where perf events are refused: [`Interrupter`].
    Ptrace(Interrupter),
}

/// The fallback sampler, for kernels or containers that refuse
/// `perf_event_open`: at each poll (every 10 ms) it reads each thread's
/// CPU time (`schedstat`) and, for a thread that ran a period or more
/// since its last sample, stops it for a moment (`PTRACE_SEIZE` and
/// `PTRACE_INTERRUPT`, as `.itrace` does), reads its registers and the top
/// of its stack, and lets it go. The sample stands for the CPU time since
/// the last one (its weight). At most one sample a thread per poll, so at
/// most 100 a second; an idle thread is never stopped. A thread stopped
/// inside a blocking call has it restarted by the kernel, but the calls
/// signal(7) lists as failing with EINTR after a stop (`epoll_wait`,
/// `sigtimedwait`, …) can: said when the fallback is chosen.
struct Interrupter {
    pid: i32,
    period: u64,
    /// CPU time at each thread's last sample (or first sight).
    last: HashMap<i32, u64>,
    /// Threads that could not be stopped (already traced, gone).
    lost: u64,
}

impl Interrupter {
    fn drain(&mut self, f: &mut dyn FnMut(Event<'_>)) {
        let Ok(tasks) = proc::tasks(self.pid) else { return };
        self.last.retain(|t, _| tasks.contains(t));
        for tid in tasks {
            let Some(cpu) = proc::thread_cpu_ns(self.pid, tid) else { continue };
            let last = *self.last.entry(tid).or_insert(cpu);
            if cpu.saturating_sub(last) < self.period {
                continue;
            }
            let Ok(t) = crate::os::ptrace::Thread::seize(tid) else {
                self.lost += 1;
                continue;
            };
            let Ok(r) = t.regs() else {
                self.lost += 1;
                continue;
            };
            let regs = arch::saved_from(&r);
            let (_, sp, _) = arch::unwind_start(&regs);
            let mut stack = vec![0u8; STACK_BYTES as usize];
            let n = proc::mem(self.pid, false)
                .ok()
                .and_then(|m| std::os::unix::fs::FileExt::read_at(&m, &mut stack, sp).ok())
                .unwrap_or(0);
            stack.truncate(n);
            let in_kernel = arch::in_syscall(&r);
            drop(t);
            self.last.insert(tid, cpu);
            f(Event::Sample(RawSample {
                pid: self.pid as u32,
                tid: tid as u32,
                time: crate::os::sys::monotonic_ns(),
                period: cpu - last,
                in_kernel,
                regs,
                stack: std::borrow::Cow::Owned(stack),
                // (ptrace does not see the kernel's stack.)
                kernel: Vec::new(),
            }));
        }
    }
}

pub use shadow::ShadowStacks;
use shadow::{shadow_read, ShadowRead};
use waits::{Out, Pairing, Timed};

mod shadow;
mod waits;

/// Samples a process and unwinds them.
pub struct Profiler {
    /// (Taken out while it is drained.)
    sampler: Option<Source>,
    /// The session's return probes' shadow stacks, when it has any.
    shadow: Option<ShadowStacks>,
    /// The code the session wrote into the target.
    own: Option<crate::owncode::Shared>,
    /// Reads the modules' ELF layout (the driver's: the runtime parses no
    /// ELF); without one, no module's CFI is used.
    symbols: Option<std::rc::Rc<dyn crate::symtab::SymbolSource>>,
    /// The last shadow stack read for each thread (forgotten all at once
    /// past 4096 threads).
    shadow_seen: HashMap<u32, Vec<(u64, u64, u64)>>,
    /// Set when the fallback sampler runs: why, and what it changes.
    pub fallback: Option<String>,
    procs: HashMap<u32, Proc>,
    /// Every module seen, in any sampled process (indices are stable).
    pub modules: Vec<ModuleInfo>,
    /// Module index by file (device, inode) and load bias.
    known: HashMap<((u64, u64), u64), u32>,
    /// By file (device, inode as the opened file's `fstat` gives them;
    /// the vDSO's is `VDSO`).
    files: HashMap<(u64, u64), Option<Sections>>,
    pub summary: Summary,
    frames: Vec<Frame>,
    /// The kernel's symbols, read at the first wait that needs them.
    kallsyms: Option<Vec<(u64, String)>>,
    /// The wait a kernel call chain names, by the chain (a wait site's
    /// switches all have the same one; forgotten past 4096 chains).
    wait_names: HashMap<Vec<u64>, String>,
    /// The session is over: the next poll is the last.
    stopped: bool,
    /// The waits being paired.
    pairing: Pairing,
}

const RELOAD_EVERY: Duration = Duration::from_millis(100);

impl Profiler {
    /// Sample every thread of `pid`, now and later, every `period_ns` of
    /// its CPU time.
    ///
    /// Where the kernel refuses perf events (or `TELCO_PROFILE_SAMPLER=
    /// ptrace` asks for it), the fallback [`Interrupter`] samples instead,
    /// and [`Profiler::fallback`] says so.
    ///
    /// `off_cpu`: each thread's waits too (every switch-out, with the time
    /// until it runs again): only with perf events, which must allow kernel
    /// samples (the switch is taken in the kernel's scheduler); `period_ns`
    /// `None` then samples no CPU time.
    pub fn start(pid: i32, period_ns: Option<u64>, off_cpu: bool) -> std::io::Result<Profiler> {
        let forced = std::env::var("TELCO_PROFILE_SAMPLER").is_ok_and(|v| v == "ptrace");
        let perf = if forced {
            Err(std::io::Error::other("TELCO_PROFILE_SAMPLER=ptrace"))
        } else {
            Sampler::open(pid, period_ns, STACK_BYTES, off_cpu)
        };
        let period_ns = period_ns.unwrap_or(10_000_000);
        let (sampler, fallback) = match perf {
            Ok(s) => (Source::Perf(s), None),
            Err(e) => {
                // Not a missing process: the same error either way; and
                // waits have no fallback.
                if e.raw_os_error() == Some(libc::ESRCH) || off_cpu {
                    return Err(e);
                }
                let why = format!(
                    "timer.profile: perf events are not available ({e}): sampling by stopping threads with ptrace \
                     instead, at most 100 samples a second a thread; a blocking call of the target stopped this way \
                     may fail with EINTR where signal(7) says a stopped process's calls can"
                );
                let i = Interrupter { pid, period: period_ns.max(10_000_000), last: HashMap::new(), lost: 0 };
                (Source::Ptrace(i), Some(why))
            }
        };
        Ok(Profiler {
            sampler: Some(sampler),
            shadow: None,
            own: None,
            symbols: None,
            shadow_seen: HashMap::new(),
            fallback,
            procs: HashMap::new(),
            modules: Vec::new(),
            known: HashMap::new(),
            files: HashMap::new(),
            summary: Summary::default(),
            frames: Vec::new(),
            // (Read now, before the target runs on: some 100 ms, during
            // which a busy program's waits would fill the rings.)
            kallsyms: off_cpu.then(crate::os::kallsyms::read),
            wait_names: HashMap::new(),
            stopped: false,
            pairing: Pairing::default(),
        })
    }

    /// The session has return probes: their trampolines' addresses in a
    /// stack are the return addresses they replaced.
    pub fn set_shadow_stacks(&mut self, s: ShadowStacks) {
        self.shadow = Some(s);
    }

    /// The session's trampolines and handlers in the target: samples
    /// taken there are unwound out of them.
    /// Where the modules' ELF layout comes from.
    pub fn set_symbols(&mut self, symbols: std::rc::Rc<dyn crate::symtab::SymbolSource>) {
        self.symbols = Some(symbols);
    }

    pub fn set_own_code(&mut self, own: crate::owncode::Shared) {
        self.own = Some(own);
    }

    /// The perf descriptors that become readable when a ring is half
    /// full: none once the sampled process has exited (they then poll as
    /// hung up, for ever).
    pub fn fds(&self) -> Vec<i32> {
        match &self.sampler {
            Some(Source::Perf(s)) if proc::running(s.pid()) => s.fds(),
            _ => Vec::new(),
        }
    }

    /// Stop sampling; the samples taken so far can still be polled.
    pub fn stop(&mut self) {
        self.stopped = true;
        match &mut self.sampler {
            Some(Source::Perf(s)) => s.disable(),
            // No sample after this (a last poll would stop threads).
            Some(Source::Ptrace(i)) => i.period = u64::MAX,
            None => {}
        }
    }

    /// Unwind every sample taken since the last poll and give each to `f`;
    /// and each wait that ended (its stack unwound when it began).
    pub fn poll(&mut self, f: &mut dyn FnMut(&Stack<'_>)) {
        let Some(mut source) = self.sampler.take() else { return };
        let now = crate::os::sys::monotonic_ns();
        let mut batch = Vec::new();
        let mut event = |me: &mut Profiler, e: Event<'_>| match e {
            Event::Sample(s) if s.period == 1 => {
                // A switch-out: unwound now, from the ring.
                let complete = me.unwind(&s);
                let name = me.wait_name(&s);
                let out = Out {
                    pid: s.pid,
                    tid: s.tid,
                    time: s.time,
                    in_kernel: s.in_kernel,
                    kernel: s.kernel,
                    regs: s.regs,
                    frames: me.frames.clone(),
                    complete,
                    name,
                    preempted: false,
                    recorded: false,
                };
                batch.push((s.time, Timed::Out(Box::new(out))));
            }
            Event::Sample(s) => {
                let complete = me.unwind(&s);
                me.summary.samples += 1;
                let stack = Stack {
                    pid: s.pid,
                    tid: s.tid,
                    time: s.time,
                    period: s.period,
                    in_kernel: s.in_kernel,
                    kernel: &s.kernel,
                    regs: &s.regs,
                    frames: &me.frames,
                    complete,
                    modules: &me.modules,
                    off_cpu: None,
                };
                f(&stack);
            }
            Event::Switch { tid, time, out, preempted } => batch.push((time, Timed::Switch { tid, out, preempted })),
            Event::Exit { tid, time } => batch.push((time, Timed::Exit { tid })),
        };
        match &mut source {
            Source::Perf(s) => {
                s.drain(&mut |e| event(self, e));
                self.summary.lost = s.lost;
                self.summary.malformed = s.malformed;
            }
            Source::Ptrace(i) => {
                i.drain(&mut |e| event(self, e));
                self.summary.lost = i.lost;
            }
        }
        self.sampler = Some(source);
        if batch.is_empty() && self.pairing.deferred.is_empty() && !self.stopped {
            return;
        }
        self.pair(batch, now, f);
    }

    /// Give `f` each wait that ended ([`Pairing::pair`]).
    fn pair(&mut self, batch: Vec<(u64, Timed)>, now: u64, f: &mut dyn FnMut(&Stack<'_>)) {
        let ended = self.pairing.pair(batch, now, self.stopped, &|pid, tid| proc::thread_state(pid as i32, tid as i32));
        self.summary.lost += std::mem::take(&mut self.pairing.lost);
        self.summary.unpaired = self.pairing.unpaired;
        for (o, ns) in ended {
            self.wait(&o, ns, f);
        }
    }

    /// Give `f` wait `o`, `ns` long.
    fn wait(&mut self, o: &Out, ns: u64, f: &mut dyn FnMut(&Stack<'_>)) {
        self.summary.samples += 1;
        self.summary.waits += 1;
        let name = if o.preempted { "preempted" } else { o.name.as_str() };
        let stack = Stack {
            pid: o.pid,
            tid: o.tid,
            time: o.time,
            period: ns,
            in_kernel: o.in_kernel,
            kernel: &o.kernel,
            regs: &o.regs,
            frames: &o.frames,
            complete: o.complete,
            modules: &self.modules,
            off_cpu: Some(Wait { ns, name }),
        };
        f(&stack);
    }

    /// Unwind `s` into `self.frames`: whether the stack reached its root
    /// (counted in the summary either way).
    fn unwind(&mut self, s: &RawSample<'_>) -> bool {
        let now = Instant::now();
        let (pc, _, _) = arch::unwind_start(&s.regs);
        let ours = self.own.as_ref().and_then(|o| o.read().ok()).is_some_and(|o| o.holds(s.pid, pc).is_some());
        let fresh = match self.procs.get(&s.pid) {
            None => true,
            Some(p) => !ours && find(&p.ranges, pc).is_none() && now.duration_since(p.loaded) >= RELOAD_EVERY,
        };
        if fresh {
            self.load(s.pid, now);
        }
        let mut complete = self.walk(s);
        if complete.is_none() {
            // A return address in no known module: a library loaded since
            // the last look, perhaps.
            let reload = self.procs.get(&s.pid).is_some_and(|p| now.duration_since(p.loaded) >= RELOAD_EVERY);
            if reload {
                self.load(s.pid, now);
                complete = self.walk(s);
            }
        }
        let complete = complete.unwrap_or(false);
        if !complete {
            self.summary.truncated += 1;
        }
        self.summary.unknown_frames += self.frames.iter().filter(|fr| fr.module.is_none() && !fr.own).count() as u64;
        complete
    }

    /// What the thread of switch-out `s` waits in (unless it was
    /// preempted: its switch record says): the system call in its kernel
    /// call chain (named by the kernel's symbols), else what else the chain
    /// shows (a fault, a stop); without the chain or the symbols, the call
    /// the instructions before its pc make (the architecture's guess: `mov
    /// $N, %eax` before `syscall`, x8).
    fn wait_name(&mut self, s: &RawSample<'_>) -> String {
        if let Some(n) = self.wait_names.get(&s.kernel) {
            return n.clone();
        }
        let n = self.name_wait(s);
        // (Named by the chain only where the kernel's symbols are known.)
        if !s.kernel.is_empty() && self.kallsyms.as_ref().is_some_and(|k| !k.is_empty()) {
            if self.wait_names.len() >= 4096 {
                self.wait_names.clear();
            }
            self.wait_names.insert(s.kernel.clone(), n.clone());
        }
        n
    }

    /// [`Profiler::wait_name`], not yet known for this chain.
    fn name_wait(&mut self, s: &RawSample<'_>) -> String {
        let syms = self.kallsyms.get_or_insert_with(crate::os::kallsyms::read);
        let names = crate::os::kallsyms::names(syms, &s.kernel);
        // (A stop at a system call's entry or exit is the stop's.)
        let what = crate::os::kallsyms::wait_in(&names);
        if what.ends_with("stop") || what == "stopped" {
            return what.into();
        }
        if let Some(n) = crate::os::kallsyms::syscall_in(&names) {
            return n;
        }
        if !s.kernel.is_empty() && syms.first().is_some() {
            // The kernel's frames say it was not a system call.
            return what.into();
        }
        let (pc, _, _) = arch::unwind_start(&s.regs);
        let mut code = [0u8; 8];
        let read = proc::mem(s.pid as i32, false)
            .and_then(|m| std::os::unix::fs::FileExt::read_exact_at(&m, &mut code, pc.wrapping_sub(8)))
            .is_ok();
        match arch::syscall_number(&s.regs, if read { &code } else { &[] }) {
            Some(nr) => match arch::BLOCKING_SYSCALLS.iter().find(|(n, _)| *n == nr) {
                Some((_, name)) => (*name).into(),
                None => format!("syscall {nr}"),
            },
            None => "kernel".into(),
        }
    }

    /// Unwind `s` into `self.frames`: `Some(reached the root)`, or `None`
    /// when a frame fell outside every known module. A return into the
    /// signal trampoline (a sample in a signal handler) continues from the
    /// registers the kernel saved on the stack, in the interrupted code.
    fn walk(&mut self, s: &RawSample<'_>) -> Option<bool> {
        use framehop::{FrameAddress, Unwinder as _};
        self.frames.clear();
        let pid = s.pid;
        let shadow = self.shadow;
        let shadow_seen = &mut self.shadow_seen;
        // The thread's shadow stack, read at its first trampoline address.
        let mut returns: Option<ShadowRead> = None;
        // The live frames matched so far.
        let mut next_return = 0;
        let Some(p) = self.procs.get_mut(&pid) else { return Some(false) };
        let own = self.own.as_ref().and_then(|o| o.read().ok());
        // The sample's own registers, while the walk is in its first frame.
        let mut first: Option<&[u64]> = Some(&s.regs.words);
        let mut own_steps = 0;
        let (pc, sp, mut regs) = arch::unwind_start(&s.regs);
        let stack = &s.stack;
        let mut read = |addr: u64| -> Result<u64, ()> {
            let off = addr.checked_sub(sp).ok_or(())? as usize;
            let b = stack.get(off..off.checked_add(8).ok_or(())?).ok_or(())?;
            Ok(u64::from_ne_bytes(b.try_into().map_err(|_| ())?))
        };
        let mut at = FrameAddress::from_instruction_pointer(pc);
        let mut complete = false;
        let mut outside = false;
        while self.frames.len() < SAMPLE_FRAMES {
            if let (true, None, Some(sh)) = (at.is_return_address(), find(&p.ranges, at.address_for_lookup()), &shadow)
            {
                // A return trampoline where a probed function was called:
                // the caller is where it would have returned; failing a
                // call still running, one just popped.
                // The return address was read from just below the
                // caller's stack pointer.
                let slot = arch::unwind_sp(&regs).wrapping_sub(8);
                let ret =
                    shadow_read(&mut returns, shadow_seen, pid, s.tid, sh).find(at.address(), slot, &mut next_return);
                if let Some(r) = ret.and_then(FrameAddress::from_return_address) {
                    at = r;
                }
            }
            let (a, lookup) = (at.address(), at.address_for_lookup());
            if arch::is_kernel_address(a) {
                break;
            }
            // Our code: a trampoline or handler (one `[telco-stap]` frame
            // for a run of them), or a probed function's relocated first
            // instructions (its own, at their original addresses).
            if let Some(ours) = own.as_deref().and_then(|o| o.holds(pid, a).map(|x| (o, x))) {
                let (o, called) = ours;
                own_steps += 1;
                if own_steps > 64 {
                    break;
                }
                if called && !self.frames.last().is_some_and(|f| f.own) {
                    self.frames.push(Frame { pc: a, lookup: a, module: None, signal: false, own: true });
                }
                let here = crate::owncode::Here {
                    pc: a,
                    is_return: at.is_return_address(),
                    sp: arch::unwind_sp(&regs),
                    fp: arch::unwind_fp(&regs),
                    regs: first,
                };
                if called {
                    first = None;
                }
                let (pc, sp, fp, ret, lr) = match o.step(pid, &here, &mut |x| read(x).ok()) {
                    Some(crate::owncode::Next::At { pc, sp, fp, lr }) => (pc, sp, fp, false, lr),
                    Some(crate::owncode::Next::Return { pc, sp, fp }) => (pc, sp, fp, true, None),
                    // The return address is below the stack (a trampoline
                    // about to call, or just returned into): the innermost
                    // call the shadow stack has not matched yet.
                    Some(crate::owncode::Next::Root) => {
                        complete = true;
                        break;
                    }
                    Some(crate::owncode::Next::Shadow { sp, fp }) => {
                        let Some(sh) = &shadow else { break };
                        let read = shadow_read(&mut returns, shadow_seen, pid, s.tid, sh);
                        // The frame whose return address's slot is just
                        // below the caller's stack pointer (live, or popped
                        // since the sample: the stack is read after it),
                        // else the innermost live one not matched yet.
                        let Some(ret) = read.by_slot(sp.wrapping_sub(8), &mut next_return) else { break };
                        (ret, sp, fp, true, None)
                    }
                    None => break,
                };
                regs = arch::unwind_regs_lr(pc, sp, fp, lr);
                at = if ret {
                    match FrameAddress::from_return_address(pc) {
                        Some(n) => n,
                        None => break,
                    }
                } else {
                    FrameAddress::from_instruction_pointer(pc)
                };
                continue;
            }
            first = None;
            let module = find(&p.ranges, lookup);
            outside |= module.is_none() && !self.frames.is_empty();
            let signal = at.is_return_address() && is_sigreturn(pid, &mut p.sigreturns, a);
            self.frames.push(Frame { pc: a, lookup, module, signal, own: false });
            if signal {
                // The ucontext is where the trampoline's stack pointer is.
                let uc = arch::unwind_sp(&regs);
                let [bp, isp, ip] = arch::SIGFRAME_REGS.map(|o| read(uc.wrapping_add(o)));
                let (Ok(bp), Ok(isp), Ok(ip)) = (bp, isp, ip) else { break };
                regs = arch::unwind_regs(ip, isp, bp);
                at = FrameAddress::from_instruction_pointer(ip);
                continue;
            }
            match p.unwinder.unwind_frame(at, &mut regs, &mut p.cache, &mut read) {
                Ok(Some(ret)) => match FrameAddress::from_return_address(ret) {
                    Some(next) => at = next,
                    None => {
                        complete = true;
                        break;
                    }
                },
                Ok(None) => {
                    complete = true;
                    break;
                }
                Err(_) => break,
            }
        }
        if outside && !complete {
            return None;
        }
        Some(complete)
    }

    /// (Re)build process `pid`'s unwinder from its maps.
    fn load(&mut self, pid: u32, now: Instant) {
        use framehop::Unwinder as _;
        let maps = proc::maps(pid as i32).unwrap_or_default();
        if maps.is_empty() {
            // Gone (samples drained after the process ended): what was
            // known of it still names them.
            if let Some(p) = self.procs.get_mut(&pid) {
                p.loaded = now;
                return;
            }
        }
        let mut unwinder = Unwinder::<Bytes>::new();
        let mut ranges = Vec::new();
        // Mappings of one file (device and inode as maps say), in address
        // order (maps is sorted).
        let mut groups: Vec<((u64, u64), Vec<&Mapping>)> = Vec::new();
        for m in &maps {
            let file = match m.path.as_os_str() == "[vdso]" {
                true => VDSO,
                false if m.is_file() => (m.dev, m.inode),
                false => continue,
            };
            match groups.last_mut() {
                Some((f, ms)) if *f == file => ms.push(m),
                _ => groups.push((file, vec![m])),
            }
        }
        for (file, ms) in groups {
            if !ms.iter().any(|m| m.executable) {
                continue;
            }
            // The file as mapped (`os::modfile`), known by what it opens.
            let image = match file == VDSO {
                true => None,
                false => match crate::os::modfile::mapped(ms[0]) {
                    Some(i) => Some(i),
                    None => continue,
                },
            };
            let file = image.as_ref().map_or(VDSO, |i| (i.dev, i.ino));
            let symbols = self.symbols.as_deref();
            let sections = self.files.entry(file).or_insert_with(|| read_sections(symbols?, pid, ms[0], image)).clone();
            let Some(sec) = sections else { continue };
            let first = ms[0];
            let path = first.path.clone();
            let Some(bias) = bias_of(&sec.loads, first.start, first.offset) else { continue };
            let (start, end) = (first.start, ms.iter().map(|m| m.end).max().unwrap_or(first.end));
            let key = (file, bias);
            let idx = *self.known.entry(key).or_insert_with(|| {
                self.modules.push(ModuleInfo {
                    path: path.clone(),
                    bias,
                    start,
                    end,
                    file_offset: first.offset,
                    build_id: sec.build_id.clone(),
                    image: sec.image.clone(),
                });
                (self.modules.len() - 1) as u32
            });
            ranges.push((start, end, idx));
            let info = framehop::ExplicitModuleSectionInfo {
                base_svma: 0,
                text_svma: sec.text.as_ref().map(|t| t.0.clone()),
                text: sec.text.as_ref().map(|t| t.1.clone()),
                got_svma: sec.got.clone(),
                eh_frame_svma: sec.eh_frame.as_ref().map(|t| t.0.clone()),
                eh_frame: sec.eh_frame.as_ref().map(|t| t.1.clone()),
                eh_frame_hdr_svma: sec.eh_frame_hdr.as_ref().map(|t| t.0.clone()),
                eh_frame_hdr: sec.eh_frame_hdr.as_ref().map(|t| t.1.clone()),
                debug_frame: sec.debug_frame.clone(),
                ..Default::default()
            };
            unwinder.add_module(framehop::Module::new(path.to_string_lossy().into_owned(), start..end, bias, info));
        }
        ranges.sort_unstable();
        let sigreturns = self.procs.remove(&pid).map(|p| p.sigreturns).unwrap_or_default();
        self.procs.insert(pid, Proc { unwinder, sigreturns, cache: Box::new(Cache::new()), ranges, loaded: now });
    }
}

/// Whether return address `a` in process `pid` is the signal trampoline
/// (its code read once, then remembered; at most 4096 addresses).
fn is_sigreturn(pid: u32, known: &mut HashMap<u64, bool>, a: u64) -> bool {
    if let Some(&k) = known.get(&a) {
        return k;
    }
    let mut code = [0u8; arch::SIGRETURN.len()];
    let yes = proc::mem(pid as i32, false)
        .and_then(|m| std::os::unix::fs::FileExt::read_exact_at(&m, &mut code, a))
        .is_ok_and(|()| code == arch::SIGRETURN);
    if known.len() < 4096 {
        known.insert(a, yes);
    }
    yes
}

/// The module holding `a`.
fn find(ranges: &[(u64, u64, u32)], a: u64) -> Option<u32> {
    let i = ranges.partition_point(|r| r.0 <= a);
    let r = ranges.get(i.checked_sub(1)?)?;
    (a < r.1).then_some(r.2)
}

/// Load bias of a module whose file offset `offset` is mapped at `start`.
fn bias_of(loads: &[(u64, u64, u64)], start: u64, offset: u64) -> Option<u64> {
    let page = 4096;
    let &(vaddr, off, _) =
        loads.iter().find(|(_, o, sz)| offset >= o / page * page && offset < o + sz.max(&1)).or(loads.first())?;
    // vaddr(fileoff) = p_vaddr + fileoff - p_offset (page-congruent).
    Some(start.wrapping_sub(vaddr.wrapping_add(offset).wrapping_sub(off)))
}

/// The vDSO's key among the files (no file has inode 0).
const VDSO: (u64, u64) = (0, 0);

/// A module's unwind sections and load segments: from its file as the
/// process maps it (`file`), or (the vDSO) from the process's memory.
fn read_sections(
    symbols: &dyn crate::symtab::SymbolSource,
    pid: u32,
    first: &Mapping,
    file: Option<crate::os::modfile::Image>,
) -> Option<Sections> {
    if let Some(f) = file {
        return parse_sections(symbols, Bytes::new(f));
    }
    let len = (first.end - first.start).min(1 << 20) as usize;
    let mut buf = vec![0u8; len];
    let f = proc::mem(pid as i32, false).ok()?;
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, first.start).ok()?;
    parse_sections(symbols, Bytes::new(Arc::new(buf)))
}

/// The sections of the ELF image `image` (its layout read by `symbols`):
/// slices of it (a section header may claim any size: only what the image
/// has is taken, and nothing is copied).
fn parse_sections(symbols: &dyn crate::symtab::SymbolSource, image: Bytes) -> Option<Sections> {
    let layout = symbols.layout(&image)?;
    let mut s = Sections { loads: layout.loads, build_id: layout.build_id, ..Default::default() };
    for (name, addr, size, offset) in &layout.sections {
        let range = *addr..addr.saturating_add(*size);
        let data = || -> Option<Bytes> {
            let start = usize::try_from((*offset)?).ok()?;
            image.slice(start..start.checked_add(usize::try_from(*size).ok()?)?)
        };
        match name.as_str() {
            ".text" => s.text = data().map(|d| (range, d)),
            ".got" => s.got = Some(range),
            ".eh_frame" => s.eh_frame = data().map(|d| (range, d)),
            ".eh_frame_hdr" => s.eh_frame_hdr = data().map(|d| (range, d)),
            ".debug_frame" => s.debug_frame = data(),
            _ => {}
        }
    }
    // A Go binary's frames from its function table: CFI its own sections
    // lack (or keep compressed).
    if let Some(cfi) = layout.debug_frame {
        s.debug_frame = Some(Bytes::new(Arc::new(cfi)));
    }
    s.image = Some(image.clone());
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_module_of_an_address_is_found() {
        let r = [(0x1000, 0x2000, 0), (0x5000, 0x6000, 1)];
        assert_eq!(find(&r, 0x1000), Some(0));
        assert_eq!(find(&r, 0x1fff), Some(0));
        assert_eq!(find(&r, 0x2000), None);
        assert_eq!(find(&r, 0x5800), Some(1));
        assert_eq!(find(&r, 0x10), None);
    }

    #[test]
    fn the_load_bias_follows_the_segment() {
        // A PIE: text at vaddr 0x1000, file offset 0x1000, mapped at
        // 0x5555_5555_5000 from offset 0x1000.
        let loads = [(0, 0, 0x800), (0x1000, 0x1000, 0x2000)];
        assert_eq!(bias_of(&loads, 0x5555_5555_5000, 0x1000), Some(0x5555_5555_4000));
        // A non-PIE executable mapped where it was linked.
        let loads = [(0x400000, 0, 0x1000)];
        assert_eq!(bias_of(&loads, 0x400000, 0), Some(0));
    }

    #[test]
    fn this_test_binary_has_unwind_sections() {
        let me = std::env::current_exe().expect("exe");
        let bytes = std::fs::read(me).expect("read");
        let s = parse_sections(&crate::symtab::TestSymbols, Bytes::new(Arc::new(bytes))).expect("an ELF file");
        assert!(s.eh_frame.is_some() && s.eh_frame_hdr.is_some() && s.text.is_some());
        assert!(!s.build_id.is_empty());
    }
}
