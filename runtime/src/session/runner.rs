//! The tracer's own probes (`begin`, `end`, `error`, `timer.*`) run in a
//! sandbox process (`os::sandbox`, forked when the session starts): a
//! fault there, a stall (no MAXACTION countdown and no consumer progress
//! for [`SANDBOX_STALL`]: a forged lock or ring tail) or damage found
//! before a run ends them with one ERROR, and the session goes on to
//! detach and exits 1.

use super::*;
use crate::os::sandbox::Sandbox;
use crate::os::sys::ExecMemory;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use telco_abi::artifact::Artifact;
use telco_abi::region::{self as abi};

pub(super) type Handler = extern "C" fn(*mut u8, *mut u8);

/// Call probe `probe`'s handler on this thread with `ctx` (zeroed here),
/// as process `pid`, thread `tid`.
pub(super) fn call(
    artifact: &Artifact,
    region: &Region,
    code: &ExecMemory,
    ctx: &mut [u64],
    probe: usize,
    pid: u64,
    tid: u64,
) {
    call_with(artifact, region, code, ctx, probe, pid, tid, None)
}

/// Words of the sandbox's page after the context: a `timer.profile`
/// sample's thread id, then its [`abi::Sample`].
pub(super) const SAMPLE_WORDS: usize = 1 + core::mem::size_of::<abi::Sample>() / 8;

/// [`call`], for a `timer.profile` handler with `sample` (the sampled
/// thread's id and [`abi::Sample`], as [`Runner::run_sample`] wrote them).
#[allow(clippy::too_many_arguments)]
pub(super) fn call_with(
    artifact: &Artifact,
    region: &Region,
    code: &ExecMemory,
    ctx: &mut [u64],
    probe: usize,
    pid: u64,
    tid: u64,
    sample: Option<&mut [u64]>,
) {
    let Some(p) = artifact.probes.get(probe) else { return };
    if ctx.len() * 8 < core::mem::size_of::<abi::Ctx>() {
        return;
    }
    let sample =
        sample.filter(|s| s.len() >= SAMPLE_WORDS && p.attach.runs_in() == telco_abi::artifact::Runs::TracerSampling);
    let interruptible = p.attach.interruptible();
    ctx.iter_mut().for_each(|w| *w = 0);
    // A sample: its thread, registers (pc: `uaddr()`) and unwound frames.
    let (regs, tid, addr, sampled) = match sample {
        Some(s) => {
            let t = s[0];
            let regs = s[1..].as_mut_ptr();
            (regs as u64, t, s[1 + telco_abi::arch::native::PC], abi::CTX_SAMPLE)
        }
        None => (0, tid, 0, 0),
    };
    let c = abi::Ctx {
        regs,
        probe: probe as u32,
        flags: abi::CTX_MAY_WAIT | sampled | if interruptible { abi::CTX_INTERRUPTIBLE } else { 0 },
        actions: 0,
        nesting: 0,
        error: 0,
        error_loc: 0,
        go_goid: 0,
        tid,
        pid,
        tok_pos: 0,
        addr,
        entry: 0,
        slot: 0,
    };
    // SAFETY: ctx has at least CTX_SIZE bytes (checked), 8-aligned.
    unsafe { std::ptr::write(ctx.as_mut_ptr().cast::<abi::Ctx>(), c) };
    // SAFETY: the artifact's handler offsets point at functions with
    // this signature inside the mapped blob; they read the region and
    // the context, both live for the call.
    let f: Handler = unsafe { std::mem::transmute(code.addr(p.handler)) };
    f(region.base(), ctx.as_mut_ptr().cast());
}

/// How long a tracer-side handler may run without progress (its MAXACTION
/// countdown unchanged, the consumer idle) before the sandbox is killed: a
/// lock or ring tail the target forged would make it spin forever. One
/// statement can take long on its own (sorting a huge array for
/// `foreach`): [`stall_limit`] adds a microsecond per array entry.
pub const SANDBOX_STALL: Duration = Duration::from_secs(5);

/// [`SANDBOX_STALL`] plus 1 µs for each entry the script's arrays can hold.
pub fn stall_limit(a: &Artifact) -> Duration {
    let at = core::mem::offset_of!(abi::TableHeader, capacity) as u64;
    let entries: u64 = a.tables.iter().filter_map(|(_, off)| a.init_u32(off + at)).map(u64::from).sum();
    SANDBOX_STALL + Duration::from_micros(entries)
}

/// What to say when the sandbox that runs the tracer's probes failed
/// while running `probe`.
pub(super) fn sandbox_failure(artifact: &Artifact, probe: usize, f: &crate::os::sandbox::Failure) -> String {
    use crate::os::sandbox::Failure;
    let name = artifact.probes.get(probe).map_or("?", |p| p.name.as_str());
    let why = match f {
        Failure::Signal(libc::SIGKILL) => "something outside the session killed it (the out-of-memory killer?)",
        Failure::Signal(libc::SIGSYS) => {
            "it made a system call its filter forbids: the shared region it works on is damaged (the target can \
             write to it)"
        }
        Failure::Signal(_) => "the shared region it works on is damaged (the target can write to it)",
        Failure::Stalled(_) => {
            "a lock, a table or the event ring in the shared region is held or damaged (the target can write to it)"
        }
        Failure::Exited(_) | Failure::Io(_) => "it could not run the tracer's probes",
    };
    format!("the sandbox running probe {name} {f}: {why}; the tracer's probes no longer run and the session ends here")
}

/// The sandbox and what the session watches while a handler runs there.
pub(super) struct Runner<'x> {
    pub(super) sandbox: Option<Sandbox>,
    pub(super) region: &'x Region,
    /// The consumer is inside a drain (maybe blocked writing the output):
    /// a handler waiting for room in the ring is not stalled.
    pub(super) draining: &'x AtomicBool,
    /// Drains that found records.
    pub(super) consumed: &'x AtomicU64,
    /// The consumer stopped on a record the target forged: it frees no
    /// more room in the ring, which the tracer's probes would wait for.
    pub(super) ring_broken: &'x AtomicBool,
    pub(super) tick: u64,
    /// [`stall_limit`].
    pub(super) stall: Duration,
    /// The sandbox failed: what to say.
    pub(super) lost: Option<String>,
    /// No more tracer-side probes run (`lost`, or the ring is broken).
    pub(super) stopped: bool,
}

impl Runner<'_> {
    /// Run probe `p` in the sandbox; false once the sandbox is lost.
    pub(super) fn run(&mut self, artifact: &Artifact, p: usize) -> bool {
        if self.stopped || self.ring_broken.load(Ordering::Relaxed) {
            self.stopped = true;
            return false;
        }
        // The parts the compiled code trusts to stay in bounds, checked
        // before each run (the sandbox contains what happens if the target
        // changes them during one).
        if let Some(d) = self.region.damage(artifact) {
            self.lost = Some(format!("{d}; the tracer's probes no longer run and the session ends here"));
            self.stopped = true;
            return false;
        }
        let Some(sandbox) = &mut self.sandbox else {
            self.stopped = true;
            return false;
        };
        let actions = core::mem::offset_of!(abi::Ctx, actions) / 8;
        let (draining, consumed, tick) = (self.draining, self.consumed, &mut self.tick);
        let mut progress = |s: &Sandbox| {
            if draining.load(Ordering::Relaxed) {
                *tick += 1;
            }
            s.word(actions) ^ consumed.load(Ordering::Relaxed).rotate_left(32) ^ tick.rotate_left(48)
        };
        match sandbox.run(p as u32, self.stall, &mut progress) {
            Ok(()) => true,
            Err(f) => {
                self.lost = Some(sandbox_failure(artifact, p, &f));
                self.stopped = true;
                false
            }
        }
    }

    pub(super) fn ok(&self) -> bool {
        !self.stopped
    }

    /// Run `timer.profile` probe `p` on sample `s`: its thread, registers
    /// and frames go into the sandbox's page after the context's `words`.
    pub(super) fn run_sample(
        &mut self,
        artifact: &Artifact,
        p: usize,
        words: usize,
        s: &crate::profile::Stack<'_>,
    ) -> bool {
        let Some(sandbox) = &self.sandbox else {
            self.stopped = true;
            return false;
        };
        sandbox.put(words, u64::from(s.tid));
        for (i, w) in s.regs.words.iter().enumerate() {
            sandbox.put(words + 1 + i, *w);
        }
        let at = words + 1 + telco_abi::arch::native::NREGS;
        // The probes' own frames (`[telco-stap]` in the profile files)
        // are not the program's: its backtrace goes without them.
        let mut n = 0;
        for f in s.frames.iter().filter(|f| !f.own).take(abi::SAMPLE_FRAMES) {
            sandbox.put(at + 1 + n, f.pc);
            n += 1;
        }
        sandbox.put(at, n as u64);
        // A wait's length and name (`process.blocked`), NUL-terminated.
        let wait = words + 1 + core::mem::offset_of!(abi::Sample, wait_ns) / 8;
        sandbox.put(wait, s.off_cpu.map_or(0, |w| w.ns));
        let mut name = [0u8; 32];
        let given = s.off_cpu.map_or(&b""[..], |w| w.name.as_bytes());
        let len = given.len().min(31);
        name[..len].copy_from_slice(&given[..len]);
        for (i, w) in name.chunks_exact(8).enumerate() {
            sandbox.put(wait + 1 + i, u64::from_le_bytes(w.try_into().unwrap_or_default()));
        }
        self.run(artifact, p)
    }
}
