//! The compiled artifact: everything pass 4 hands to pass 5, and nothing
//! else (pass 5 never sees the script).

use std::path::PathBuf;

/// What a probe is attached to.
#[derive(Clone, Debug, PartialEq)]
pub enum Attach {
    Begin {
        order: i64,
    },
    End {
        order: i64,
    },
    Error {
        order: i64,
    },
    Timer {
        period_ns: u64,
        randomize_ns: u64,
    },
    /// `timer.profile`: samples of the target's threads, one every
    /// `period_ns` of a thread's CPU time (run in the tracer, with the
    /// sampled thread's registers and stack).
    Profile {
        period_ns: u64,
    },
    /// `process.blocked`: each wait of a target thread (run in the
    /// tracer when it ends, with the thread's registers and stack where it
    /// blocked, and the wait in the [`crate::region::Sample`]).
    Blocked,
    /// Entry or return of a function: module, link-time address and size,
    /// and the offset of its first byte in the module's file (which finds it
    /// in the target's mappings).
    Function {
        module: PathBuf,
        symbol: String,
        addr: u64,
        size: u64,
        file_offset: u64,
        ret: bool,
        itrace: bool,
        /// Hooked only in processes running this program (a lifecycle
        /// probe's hook in the C library).
        only_exe: Option<PathBuf>,
        /// For a function too short for the 5-byte jump: a 2-byte hop
        /// through a nearby function (pass 2 planned it).
        hop: Option<Hop>,
        /// For a return probe: where the function saves its return address
        /// at its call sites, from its entry's stack pointer (its CFI; None:
        /// not saved, or unknown). On aarch64 the unwinder reads the return
        /// address there, not at the trampoline's return slot.
        ra_saved: Option<i32>,
        /// Control arrives inside the jump's bytes from elsewhere in the
        /// module and no hop could be planned, but nothing arrives inside
        /// the first instruction: a one-byte trap goes there instead.
        trap: bool,
        /// A Go function (its `.gopclntab` lists it): its handlers run on
        /// the thread's scheduler stack, never on the goroutine's.
        go: Option<GoSite>,
    },
    /// An instruction inside a function (a statement or an SDT marker):
    /// link-time address, offset in the file, and the bytes the jump
    /// displaces there (pass 2 proved that control never arrives inside
    /// them). A marker's semaphore (link-time address) is incremented
    /// while it is probed.
    Statement {
        module: PathBuf,
        addr: u64,
        file_offset: u64,
        displaced: u32,
        /// Bytes of whole instructions just before `addr` that take the
        /// jump instead (`displaced` is then 0): the trampoline runs them,
        /// then the probe, then jumps to `addr`.
        lead: u32,
        /// The lead is one `call rel32`: the call is probed at its return,
        /// through a return trampoline (shadow stacks are allocated).
        lead_call: bool,
        /// A `jmp rel8` at `addr` to the dead padding `pad` bytes on, where
        /// the jump to the trampoline goes (0: the jump is at `addr`).
        pad: u32,
        /// No jump fits at the site (nor before it, nor a short one): a
        /// one-byte trap over its first instruction (`displaced` bytes).
        trap: bool,
        semaphore: Option<u64>,
    },
    /// A process or thread lifecycle event, run by a remote call where
    /// pass 5 starts or attaches to a process (`ProcessBegin` in it,
    /// `ThreadBegin` in each of its other threads) and where one execs
    /// (`ProcessEnd` of the old program, then `ProcessBegin`); inside a
    /// process the same body also runs from hooks in the C library
    /// (`Function` entries with `only_exe`). `module`: only in processes
    /// running that program.
    Lifecycle {
        what: String,
        event: LifeEvent,
        module: Option<PathBuf>,
    },
}

/// Where a probe's handler runs: the one place each kind of probe point
/// decides it ([`Attach::runs_in`], and the compiler's `Point::runs_in`
/// for the points that become these).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runs {
    /// In the tracer, on a session event or a timer (`begin`, `end`,
    /// `error`, `timer.*`): no target thread, no target registers.
    Tracer,
    /// In the tracer, on a sample of a target thread (`timer.profile`):
    /// that thread's registers and unwound stack, but no function's
    /// arguments.
    TracerSampling,
    /// In a target process, on the thread that reached the probe
    /// (functions, statements, markers, lifecycle events).
    Target,
}

impl Runs {
    /// Whether a session with such a probe needs a target process (`-p
    /// PID` or `-c CMD`): to probe, or to sample.
    pub fn needs_target(self) -> bool {
        match self {
            Runs::Tracer => false,
            Runs::TracerSampling | Runs::Target => true,
        }
    }
}

impl Attach {
    /// Where this probe's handler runs.
    pub fn runs_in(&self) -> Runs {
        match self {
            Attach::Begin { .. } | Attach::End { .. } | Attach::Error { .. } | Attach::Timer { .. } => Runs::Tracer,
            Attach::Profile { .. } | Attach::Blocked => Runs::TracerSampling,
            Attach::Function { .. } | Attach::Statement { .. } | Attach::Lifecycle { .. } => Runs::Target,
        }
    }

    /// Whether its handler counts its actions against
    /// `MAXACTION_INTERRUPTIBLE` rather than `MAXACTION` (its context's
    /// `CTX_INTERRUPTIBLE`), as SystemTap's `begin`, `end` and `error`
    /// probes do; timers do not.
    pub fn interruptible(&self) -> bool {
        match self {
            Attach::Begin { .. } | Attach::End { .. } | Attach::Error { .. } => true,
            Attach::Timer { .. }
            | Attach::Profile { .. }
            | Attach::Blocked
            | Attach::Function { .. }
            | Attach::Statement { .. }
            | Attach::Lifecycle { .. } => false,
        }
    }
}

/// A function shorter than the 5-byte jump, with nothing after it the
/// jump may cover: a 2-byte `jmp rel8` at its entry reaches a `jmp rel32`
/// to its trampoline, written in a nearby function (the host) right after
/// the host's own entry jump, in bytes the host's displaced instructions
/// leave dead (pass 2 proved that nothing arrives inside either range).
/// The host gets a trampoline too (its probes', or one that only runs its
/// displaced instructions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hop {
    /// The function's bytes the 2-byte jump displaces (whole instructions).
    pub displaced: u32,
    /// Link-time address and file offset where the host's jump goes.
    pub host: u64,
    pub host_file_offset: u64,
    /// Where in the host's displaced bytes this hop's `jmp rel32` goes
    /// (5, 10, ...: several short functions may share a host).
    pub slot: u32,
    /// The host's bytes its jump displaces (at least `slot + 5`; the
    /// runtime takes the largest of its hops').
    pub host_displaced: u32,
    /// A 5-byte jump would cover a place control arrives at from
    /// elsewhere in the module (a cold part, a table): hop even where the
    /// function's own bytes would take the jump.
    pub required: bool,
}

/// A Go function's entry as its trampoline takes it: the bytes of Go's
/// stack-bound check there (the instructions up to and with its `jbe` to
/// the function's `morestack` call), which the trampoline runs first, and
/// where the fields it reads are in the runtime's structures of the
/// program's Go version. With a return probe, the function's returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoSite {
    pub check: u8,
    pub layout: GoLayout,
    /// Every return of the function, each patched where its epilogue
    /// starts (a return probe: empty otherwise).
    pub rets: Vec<GoReturn>,
}

/// One return of a Go function: its epilogue (x86_64: `mov rbp,
/// [rsp+X]; add rsp, Y; ret`; aarch64: the `ret` alone), from `offset`
/// bytes after the function's entry, `len` bytes up to and with the
/// `ret`. Pass 2 proved that nothing arrives inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoReturn {
    pub offset: u32,
    pub len: u8,
}

/// Offsets in Go's `g` and `m` (runtime/runtime2.go of the program's Go
/// version; `g.stack.lo` and `.hi` are its first two words in all of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoLayout {
    /// `g.m`, `g.sched.sp`, `g.goid`.
    pub g_m: u16,
    pub g_sched_sp: u16,
    pub g_goid: u16,
    /// `m.g0`, `m.procid` (the thread's id), `m.gsignal`.
    pub m_g0: u16,
    pub m_procid: u16,
    pub m_gsignal: u16,
}

impl GoLayout {
    /// The layout of Go 1.18 to 1.23 (runtime/runtime2.go of each, on
    /// amd64 and arm64 alike), where only `g.goid` moved (1.23's
    /// `g.syscallbp` came before it).
    pub const fn go1_18(g_goid: u16) -> GoLayout {
        GoLayout { g_m: 0x30, g_sched_sp: 0x38, g_goid, m_g0: 0, m_procid: 0x48, m_gsignal: 0x50 }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LifeEvent {
    ProcessBegin,
    ProcessEnd,
    ThreadBegin,
    ThreadEnd,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ProbeEntry {
    /// Offset of the handler in the code: `extern "C" fn(region, ctx)`.
    pub handler: u32,
    pub attach: Attach,
    /// The probe point as written, for messages.
    pub name: String,
    /// Index of the probe body (several entries may share one handler).
    pub body: u32,
    /// Return probes with `@entry(...)`: the handler to run at the function's
    /// entry, and the bytes it saves (passed back in `Ctx::entry`).
    pub entry_handler: Option<u32>,
    pub entry_size: u32,
    /// `probefunc()`: the probed function's name, or "".
    pub function: String,
    /// The handler (or its entry handler) reads context fields beyond
    /// `probe`, `slot` and `entry`: saved registers, `addr`, the tid
    /// cache… A trampoline must then save every register and fill the
    /// whole context; otherwise it may save only what its calls change.
    pub full_ctx: bool,
    /// The body does nothing (no statement, no condition): an entry probe
    /// with such a body need not be called (`probe f {}` with `--chrome`).
    pub empty: bool,
    /// The return probe `--chrome` adds (`__telco_span`): a lean
    /// trampoline records the call inline instead of calling its handlers.
    pub span: bool,
    /// A return probe that only adds the call's duration to a statistic:
    /// trampolines can do it inline.
    pub latency: Option<Latency>,
}

/// A return probe whose body is `S <<< gettimeofday_ns() -
/// @entry(gettimeofday_ns())` and nothing else (timed in TSC ticks, the
/// entry's clock the first `@entry` save), where S has per-thread copies
/// and only logarithmic histograms: what its handler does, a trampoline
/// can do inline (`Stat` fields and log buckets, as `rt_stat_add`).
#[derive(Clone, Debug, PartialEq)]
pub struct Latency {
    /// Region offset of S's copy in row 0 (a thread slot's `index`), and
    /// the bytes between rows.
    pub copy: u64,
    pub row: u32,
    /// Offset in the copy of its logarithmic histogram's buckets (a
    /// statistic has at most one).
    pub hist: Option<u32>,
}

/// A source location, for runtime error messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    pub file: String,
    pub line: u32,
    pub col: u32,
}

/// A global the tracer prints at the end because the script writes it and
/// never reads it (SystemTap does this).
#[derive(Clone, Debug, PartialEq)]
pub struct Display {
    pub name: String,
    pub offset: u64,
    pub kind: DisplayKind,
}

/// A global: where it is, what it holds (as [`Display`] says it), the
/// region offset of its [`crate::region::StatDesc`] for a statistic (0
/// otherwise), and how target-side code changes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Global {
    pub name: String,
    pub offset: u64,
    pub kind: DisplayKind,
    pub desc: u64,
    pub merge: Merge,
}

/// How the code that runs in targets changes a global: what the tracer
/// does with the value processes of another trust domain gave it in their
/// own region when the session ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Merge {
    /// Never written in a target: the domain starts with the session's
    /// value and nothing is folded back.
    Untouched,
    /// Only added to (`++`, `--`, `+=`, `-=`, `<<<`, on the global or its
    /// elements): the domain starts empty and its sums are added.
    Add,
    /// Assigned, deleted, or written otherwise: what the domain changed
    /// replaces the session's value.
    Assign,
}

#[derive(Clone, Debug, PartialEq)]
pub enum DisplayKind {
    Long,
    /// A counter with per-thread shards: its column in the shards.
    ShardedLong(u32),
    /// A statistic with per-thread copies: the first copy's region offset
    /// and the distance between copies.
    ShardedStat {
        shards: u64,
        row: u32,
    },
    String,
    Stat,
    /// An array at a [`crate::region::TableHeader`].
    Array,
}

/// Limits fixed at compile time (`-D NAME=VALUE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub maxstringlen: u32,
    pub maxmapentries: u32,
    pub maxaction: i64,
    pub maxaction_interruptible: i64,
    pub maxnesting: u32,
    pub maxerrors: u64,
    pub maxskipped: u64,
    /// Return-probe frames per thread (`-D MAXRETURNDEPTH`): calls nested
    /// deeper in one thread have their return probes skipped (counted).
    pub maxreturndepth: u32,
    /// Bytes of the event ring (a power of two): `-s MB`; `--chrome`
    /// defaults to a larger one.
    pub ring_size: u64,
    /// `-D TRAP_PROBES=1`: function entries and statements are probed
    /// with a one-byte trap even where a jump fits (to measure a trap's
    /// cost, or test the trap path where jumps always fit); by default a
    /// trap is placed only where no jump fits.
    pub trap_probes: bool,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            maxstringlen: 128,
            maxmapentries: 2048,
            maxaction: 1000,
            maxaction_interruptible: 10_000,
            maxnesting: 10,
            maxerrors: 0,
            maxskipped: 100,
            maxreturndepth: 100_000,
            ring_size: 1 << 20,
            trap_probes: false,
        }
    }
}

/// A named range of the code, for disassembly and symbolization.
#[derive(Clone, Debug, PartialEq)]
pub struct Symbol {
    pub name: String,
    pub offset: u32,
    pub size: u32,
}

/// A module in the symbol table `usymname()` and `print_ubacktrace()` use
/// (`Artifact::symtab_off`): its path and one function's link-time address
/// and file offset, from which the tracer finds where it is loaded.
#[derive(Clone, Debug, PartialEq)]
pub struct SymModule {
    pub path: PathBuf,
    pub anchor_addr: u64,
    pub anchor_offset: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Artifact {
    /// The linked, position-independent code.
    pub code: Vec<u8>,
    pub symbols: Vec<Symbol>,
    /// Offset of `rt_format(out, cap, fmt, args, nargs) -> len` in the code:
    /// the tracer formats `printf` events with the handlers' own formatter.
    pub format_fn: u32,
    pub probes: Vec<ProbeEntry>,
    /// Size of the shared region and its initial contents, as (offset, bytes)
    /// writes over a zeroed region (the tracer fills the header itself).
    pub region_size: u64,
    pub ring_off: u64,
    pub ring_size: u64,
    /// Thread slots and, with return probes, their shadow stacks
    /// (`shadow_depth` frames of `frame_size` bytes each) are not in the
    /// region: the tracer maps them privately in the target
    /// (`Header::threads_at`).
    pub nthreads: u32,
    pub frame_size: u32,
    pub shadow_depth: u32,
    pub shards_off: u64,
    pub nshards: u32,
    pub indent_off: u64,
    /// `Header::row_owners_off`.
    pub row_owners_off: u64,
    pub probes_off: u64,
    /// `.itrace` request slots (`ItraceSlot`), none without such probes.
    pub itrace_off: u64,
    pub itrace_slots: u32,
    /// `--chrome` span stages (`Header::spans_off`), none without it.
    pub spans_off: u64,
    pub span_batch: u32,
    pub span_stride: u32,
    /// `--flight-recorder`'s history (`Header::flight_off`): none without it.
    pub flight_off: u64,
    pub flight_chunks: u32,
    pub flight_stride: u32,
    /// `--chrome-min-dur` in ns (`Header::span_min_ticks` once calibrated).
    pub span_min_ns: u64,
    /// The function symbols of the probed modules ([`crate::region::SymTable`]),
    /// 0 when no handler symbolizes; the tracer writes each module's load
    /// bias into it.
    pub symtab_off: u64,
    pub symtab_modules: Vec<SymModule>,
    /// The region's late-symbols area (offset, bytes; 0 bytes: none): where
    /// the tracer writes the entries, unwind rows and names of libraries
    /// the target loads later, for the symbol table's late slots.
    pub symtab_late: (u64, u64),
    pub init: Vec<(u64, Vec<u8>)>,
    /// Region offset of each format (by format id).
    pub formats: Vec<u64>,
    /// Which format arguments are strings (by format id).
    pub format_args: Vec<Vec<bool>>,
    pub locations: Vec<Location>,
    pub display: Vec<Display>,
    /// Every global array: its name and the region offset of its
    /// [`crate::region::TableHeader`] (whose geometry `init` holds). The
    /// tracer checks the region's copies against it: the target can write
    /// over them.
    pub tables: Vec<(String, u64)>,
    /// Every global of the program, for folding what processes of another
    /// trust domain wrote in their own region into the session's
    /// (`runtime/src/merge.rs`).
    pub globals: Vec<Global>,
    pub limits: Limits,
    /// Bytes the caller must provide for a [`crate::region::Ctx`] and its buffers.
    pub ctx_size: u32,
}

impl Artifact {
    /// The region's initial bytes (`init`) from region offset `off` to the
    /// end of the piece that holds it: what pass 3 put there, which the
    /// tracer trusts where the region's copy is the target's to overwrite.
    pub fn init_at(&self, off: u64) -> Option<&[u8]> {
        self.init
            .iter()
            .find_map(|(o, b)| b.get(usize::try_from(off.checked_sub(*o)?).ok()?..).filter(|r| !r.is_empty()))
    }

    /// The little-endian `u32` pass 3 put at region offset `off`.
    pub fn init_u32(&self, off: u64) -> Option<u32> {
        self.init_at(off)?.get(..4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
    }
}
