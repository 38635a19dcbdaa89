//! The vocabulary every architecture shares, declared once: what a
//! trampoline builder is asked to build (`trampoline::Entry`, its
//! `Shadow`, `Returns`, the inline timing `SpanInline`, `StatInline`,
//! `Timed`, `ClockOnly`) and what the patch planner answers (`patch::Hook`,
//! `Retarget`, `CopyMap`). Each architecture re-exports these under its
//! `trampoline` and `patch` modules (the two generic ones with its own
//! register mask, `clobber::RegMask`), so callers name them through
//! `native::…` as before. The functions each architecture must provide are
//! listed, and checked, in `arch/mod.rs`.

/// What one function's trampoline does.
pub struct Entry<M> {
    /// Where the trampoline will live in the target.
    pub at: u64,
    /// The region base in the target.
    pub region: u64,
    /// The probed address (`uaddr()`, the saved program counter).
    pub addr: u64,
    /// Bytes of context the handlers need (`Artifact::ctx_size`).
    pub ctx_size: u32,
    /// Entry probes: (handler, probe index).
    pub handlers: Vec<(u64, u32)>,
    /// Return probes: (probe index, its entry handler for `@entry`).
    pub returns: Vec<(u32, Option<u64>)>,
    /// `rt_ret_push`, `rt_enter` and the return trampoline.
    pub ret_push: u64,
    pub enter: u64,
    pub ret_tramp: u64,
    /// Where the shadow stacks are (the lean return-probe path pushes
    /// frames inline).
    pub shadow: Shadow,
    /// None: save every register and fill the whole context (handlers read
    /// `$argN`, `register()`, …). Some(mask): the handlers need only
    /// `probe`, `slot` and `entry` of the context, and calling everything
    /// here changes at most the registers in `mask` (`clobber`): only the
    /// caller-saved ones among them are saved.
    pub lean: Option<M>,
    /// `.itrace`: after the handlers, `rt_itrace_wait` (its address) with
    /// this function's index, so the tracer can take the thread over.
    pub itrace: Option<(u64, u32)>,
    /// The return probe among `returns` that `--chrome` added: a lean
    /// trampoline saves its entry's clock inline (`span_start`) instead of
    /// calling its entry handler.
    pub span: Option<u32>,
    /// A site inside a function (a statement or a marker), not its entry:
    /// the red zone below the stack pointer and the flags may be live
    /// there, so the trampoline steps over the one (x86_64's `RED_ZONE`)
    /// and restores the other.
    pub inside: bool,
    /// Where the function saves its return address, from the entry's stack
    /// pointer (its CFI): aarch64's trampolines record it in each shadow
    /// frame they push (`ShadowFrame::saved`). Unused on x86_64, whose
    /// return address is the pushed one.
    pub ra_saved: Option<i32>,
    /// How the function signed its return address before the patch site
    /// (aarch64's landing pad `paciasp`/`pacibsp`:
    /// `telco_abi::region::SAVED_PACIA`/`SAVED_PACIB`; 0: not signed, and
    /// always 0 on x86_64).
    pub ra_signed: i32,
    /// A runtime function called first on every hit, before the thread's
    /// slot is looked for (so on threads without one, and inside a
    /// handler too), with (this argument, the context): the hooks that
    /// keep a program from blocking SIGTRAP while trap probes are placed
    /// (`rt_trap_sigaction`, `rt_trap_sigmask`). Needs the full path
    /// (`lean` None): it reads and changes the saved registers.
    pub always: Option<(u64, u64)>,
    /// A Go function's entry: its trampoline runs the function's own
    /// stack-bound check first and its handlers on the thread's scheduler
    /// stack (`GoEntry`); only `handlers` (on the full path) go with it.
    pub go: Option<GoEntry>,
}

/// What a Go function's trampoline needs (`artifact::GoSite`, as placed).
#[derive(Clone, Debug)]
pub struct GoEntry {
    /// The stack-bound check's instructions, as the function has them: the
    /// trampoline runs them, its branches to `morestack` going to their
    /// relocated copies instead.
    pub check: Vec<u8>,
    /// Where the function goes on once the check passed.
    pub back: u64,
    pub layout: telco_abi::artifact::GoLayout,
    /// `rt_enter_go`.
    pub enter: u64,
    /// `rt_go_push` (return probes: the call's frame by goroutine).
    pub push: u64,
}

/// A return of a Go function with return probes (`artifact::GoReturn`,
/// as placed): what its trampoline runs.
#[derive(Clone, Debug)]
pub struct GoExit {
    /// Where the trampoline will live, the region, the function's entry.
    pub at: u64,
    pub region: u64,
    pub addr: u64,
    pub ctx_size: u32,
    /// The epilogue's instructions before its `ret` (x86_64; empty on
    /// aarch64, whose patch is the `ret` itself).
    pub epilogue: Vec<u8>,
    /// (probe index, return handler).
    pub returns: Vec<(u32, u64)>,
    /// `rt_go_pop`, `rt_enter_go`.
    pub pop: u64,
    pub enter: u64,
    pub layout: telco_abi::artifact::GoLayout,
    pub shadow: Shadow,
}

/// The thread slots and shadow stacks of return probes in the target:
/// frames (`ShadowFrame` + `@entry` saves) per thread, frame size.
#[derive(Clone, Copy, Debug, Default)]
pub struct Shadow {
    /// The thread slots (`Header::threads_at` in the target) and how many
    /// (a power of two).
    pub threads: u64,
    pub nthreads: u32,
    pub depth: u32,
    pub frame_size: u32,
    /// `Header::tcb_tid_off`: where the thread's id is in its control
    /// block (0: unknown, not checked; on aarch64 it is below the thread
    /// pointer, read as signed).
    pub tid_off: u32,
}

/// The return handlers a return trampoline calls.
pub enum Returns {
    /// A table of handler addresses by probe index (a code region's shared
    /// return trampoline).
    Table(u64),
    /// (probe index, handler) of one function's return probes.
    Direct(Vec<(u32, u64)>),
}

/// `--chrome` calls recorded by lean trampolines themselves: the work of
/// `rt_span` (compiler/rt/rt.c) inline, the clock read (`rdtsc`, `cntvct_el0`) on
/// both sides, the call appended to the thread's span stage; only a full
/// stage calls into the runtime library (`rt_span_flush`). Handlers would
/// cost two calls, two clock conversions and their frames per call.
#[derive(Clone, Copy, Debug)]
pub struct SpanInline {
    /// The return probe `--chrome` added (`ProbeEntry::span`).
    pub probe: u32,
    /// `rt_span_flush`.
    pub flush: u64,
    /// `Header::spans_off`, `span_stride`, `span_batch`.
    pub spans_off: u64,
    pub stride: u32,
    pub batch: u32,
}

/// A call's duration added to a statistic by the trampolines themselves
/// (`ProbeEntry::latency`): the work of its handler, the duration in clock
/// ticks converted once and added to the thread's own copy as
/// `Gen::stat_add_inline` does (compiler/src/codegen/translate/storage.rs).
#[derive(Clone, Copy, Debug)]
pub struct StatInline {
    /// The copy's `Stat` for row 0 (an offset in the region), and the
    /// bytes between rows.
    pub copy: u32,
    pub row: u32,
    /// Offset of the log histogram's buckets in the copy.
    pub hist: Option<u32>,
}

/// What a `ClockOnly` return trampoline does with the call.
#[derive(Clone, Copy, Debug)]
pub enum Timed {
    Span(SpanInline),
    Stat(StatInline),
}

/// A function whose only probe is a return probe that times its calls —
/// `--chrome`'s (the usual `probe f {}` with `--chrome`), or one that adds
/// the duration to a statistic (`ProbeEntry::latency`): trampolines that
/// do nothing but time the call and record it, with no handler on the
/// common path, so they save only the five registers they use (at an
/// entry every argument register is live; at a return a caller built with
/// -fipa-ra may keep values in caller-saved registers; a span also uses
/// r8) and keep the slot in a register. What the runtime library's calls
/// off the common path change is saved around them.
#[derive(Clone, Copy, Debug)]
pub struct ClockOnly<M> {
    /// The probe, whose entry's clock is the first `@entry` save.
    pub probe: u32,
    pub work: Timed,
    /// The probe's return handler (`rt_ret_pop`'s path calls it: the same
    /// record, by `rt_span` or the compiled statistic update).
    pub handler: u64,
    /// Registers `rt_enter`, `rt_ret_push`, and `rt_ret_pop` with the
    /// handler or `rt_span_flush`, change.
    pub enter_clobbers: M,
    pub push_clobbers: M,
    pub pop_clobbers: M,
}

/// The plan for hooking one function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hook {
    /// Where the patch jump goes: the entry, or past its landing pad
    /// (x86_64's `endbr64`, aarch64's `bti`/`paciasp`).
    pub patch_at: u64,
    /// How many original bytes the jump displaces (whole instructions, at
    /// least `patch::JUMP_LEN`).
    pub displaced: usize,
}

/// A branch of the function retargeted by `patch::plan_loop` (a loop back
/// to the patch site, sent past the probe instead): its bytes at `at`, as
/// they are and as they become (restored at detach).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retarget {
    pub at: u64,
    pub original: Vec<u8>,
    pub patched: Vec<u8>,
}

/// Where each instruction of a relocated copy came from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CopyMap {
    /// (copy, original) address of each instruction, in order, the jump
    /// back last (its original is `from + len`, where it goes).
    pub map: Vec<(u64, u64)>,
    /// The copy's range where a call that ended the displaced instructions
    /// is under way (`call_from_the_original`: the return address pushed,
    /// the jump to the callee not yet taken): the frame is the caller's, at
    /// the return address, with the stack pointer 8 higher (x86_64; never
    /// set on aarch64, where a relocated `bl` sets x30 to the original
    /// return address).
    pub calling: Option<(u64, u64)>,
}
