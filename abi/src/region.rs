//! The shared region: what compiled handlers and the tracer both see.
//!
//! One mapping of a memfd, at a different address in every process that maps
//! it. Everything inside refers to everything else by *offset from the
//! region base*, never by pointer. The compiled code receives the base as its
//! first argument.
//!
//! The main parts (every part 64-byte aligned; the order and the offsets
//! are decided per program by compiler/src/codegen/layout.rs and recorded
//! in the header and the artifact):
//!
//! | part | type | written by |
//! |---|---|---|
//! | header | [`Header`] | tracer (setup), handlers (counters, exit flag, requests) |
//! | event ring | [`RingHeader`] + data | handlers produce, the tracer consumes |
//! | per-thread rows | counter shards, statistic copies, [`SpanStage`]s | each by its own thread, read by the tracer |
//! | globals | scalars, [`LockedStr`], [`Stat`], [`TableHeader`] + slots | handlers, read by the tracer |
//! | constants | string literals, formats, statistic descriptors, [`SymTable`] | tracer, before handlers run (load biases also later) |
//! | late symbols | [`SymEntry`]s, [`UnwindRow`]s and names of libraries loaded later (`Artifact::symtab_late`) | tracer, while the loading thread waits |
//!
//! The thread slots ([`ThreadSlot`]) and their shadow stacks are not in
//! the region: each target maps them privately (`Header::threads_at`).
//!
//! # Concurrency
//!
//! Handlers run in many target threads at once; the tracer reads while they
//! run. The rules, and the atomic orderings that implement them, are written
//! next to each type and in `compiler/rt/rt.c`, which is the only code that
//! touches the shared structures from handlers (compiled code and
//! trampolines inline only word-sized updates and writes to the calling
//! thread's own rows). Plain `long` globals are
//! naturally atomic 8-byte words: loads and stores are relaxed, read-modify-
//! write operators (`++`, `+=`, …) are atomic RMW instructions.

/// The clock calibration's fixed point: `Header::tsc_mult` is ns per TSC
/// tick × 2^TSC_SHIFT.
pub const TSC_SHIFT: u32 = 32;

/// `TELCOSTP`
pub const MAGIC: [u8; 8] = *b"TELCOSTP";
/// Bumped whenever any layout in this module changes.
pub const VERSION: u32 = 7;

/// Alignment of every part of the region.
pub const PART_ALIGN: u64 = 64;

/// The trusted mirror: in every process that maps the region, a second
/// mapping `MIRROR_GAP` bytes below it holds the region's constants at the
/// same offsets (the header's layout fields, the ring's geometry, every
/// array's geometry, the statistic descriptors, string literals and
/// formats, the probe and symbol tables). It is a memfd sealed against
/// writing (`F_SEAL_FUTURE_WRITE`) before any process of the session maps
/// it: only the tracer, through the mapping it made before the seal,
/// writes it. Code that runs in a target takes every address and every
/// bound from the mirror, never from the region, so a process that writes
/// the region (any process sharing it) can forge data, never move a write
/// or a read (INTERNALS.md, invariant 6). A region is at most this large.
pub const MIRROR_GAP: u64 = 1 << 36;

/// The header at offset 0.
///
/// Counters are updated with relaxed atomic adds (they are only totals; the
/// tracer reads them after the handlers have stopped, or as estimates).
/// `enabled` is read with acquire by handlers at entry and written with
/// release by the tracer: a handler that sees 0 returns at once.
/// `exit_requested` is set (relaxed) by `exit()`; the tracer polls it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Header {
    pub magic: [u8; 8],
    pub version: u32,
    pub header_size: u32,
    pub region_size: u64,
    pub enabled: u32,
    pub exit_requested: u32,
    /// Runtime errors reported by handlers.
    pub errors: u64,
    /// Probe hits that did not run their handler (re-entry on a thread that is
    /// already inside a handler, no free thread slot).
    pub skipped: u64,
    /// Events dropped because the ring was full.
    pub dropped: u64,
    /// The process the region serves (the tracer for begin/end/timer probes).
    pub pid: u64,
    /// Clock calibration: `ns = ns_base + ((tsc - tsc_base) * mult) >> shift`,
    /// where `shift` is always [`TSC_SHIFT`] (compiled code and trampolines
    /// convert tick counts with that constant).
    pub tsc_base: u64,
    pub ns_base: u64,
    pub tsc_mult: u64,
    pub tsc_shift: u32,
    pub maxstringlen: u32,
    pub ring_off: u64,
    pub nthreads: u32,
    /// The process's user id (`uid()`).
    pub uid: u32,
    /// Its parent (`ppid()`).
    pub ppid: u64,
    /// Offset of the probe table: per probe, [`PROBE_ROW_SIZE`] bytes: the
    /// region offsets of its `pp()` and `probefunc()` strings (two u64),
    /// its link-time address (u64: a function's or statement's, else 0) and
    /// the index of its module among those `@var` names in script
    /// functions (u32; `u32::MAX`: none), for `rt_module_bias`.
    pub probes_off: u64,
    /// Offset of the `thread_indent` table ([`INDENT_SLOTS`] × [`IndentSlot`]).
    pub indent_off: u64,
    /// The process name, NUL-padded (`execname()`).
    pub execname: [u8; 16],
    /// Shadow stacks of return probes (`ThreadSlot::frames`): `shadow_depth`
    /// frames of `frame_size` bytes ([`ShadowFrame`] + `@entry` saves) each.
    pub frame_size: u32,
    pub shadow_depth: u32,
    /// `dlopen` handshake: a thread in the dynamic loader's notification
    /// function (`r_brk`) increments `dl_gen` (AcqRel) and, while
    /// `dl_wait` is set, waits (bounded) until the tracer has hooked the new
    /// libraries (and added their symbols to the symbol table) and stored
    /// `dl_ack >= ` its generation (Release / Acquire).
    pub dl_gen: u64,
    pub dl_ack: u64,
    pub dl_wait: u32,
    /// Where the C library keeps a thread's id in its thread control block,
    /// as an offset from the thread pointer (`%fs` base), found by the
    /// tracer at attach; 0 when unknown. A slot whose `tid` differs from
    /// it belongs to another thread with the same thread pointer: one of
    /// ours that exited (its control block reused), or the thread a forked
    /// child was copied from (`ThreadSlot`).
    pub tcb_tid_off: u32,
    /// Per-thread shards of counters (globals that target-side code only
    /// adds to): `nthreads` rows of `nshards` i64, one row per thread slot.
    /// A counter's value is its word in the globals plus its column's sum.
    /// Only the slot's own thread writes its row (plain adds); readers sum.
    pub shards_off: u64,
    pub nshards: u32,
    /// MAXERRORS (saturated): when `errors` exceeds it, the handler that
    /// reported the error clears `enabled` at once (Release), so the other
    /// threads stop running handlers without waiting for the tracer.
    pub maxerrors: u32,
    /// `.itrace` probes: the request slots ([`ItraceSlot`]) through which
    /// a thread entering a traced function asks the tracer to take it over
    /// (`rt_itrace_wait`), how many, and the calls that went untraced
    /// because no slot was free or the tracer did not come in time.
    pub itrace_off: u64,
    pub itrace_slots: u32,
    /// The next free row of the per-thread shards and span stages
    /// (`ThreadSlot::index`), taken with an atomic add when a slot is
    /// claimed or a forked child takes over its copy of one: rows are
    /// shared by all the processes, slots are not. Past `nthreads` a slot
    /// has no row: it stays busy, so its thread's hits are skipped and
    /// counted.
    pub rows_next: u32,
    pub itrace_missed: u64,
    /// `--chrome` spans staged per thread slot: `nthreads` [`SpanStage`]s,
    /// `span_stride` bytes apart, of up to `span_batch` [`SpanEntry`]s
    /// (none without `--chrome`). Only the slot's own thread writes its
    /// stage (plain stores); a full stage goes into the ring as one
    /// [`EV_SPANS`] record, so a call costs no ring reservation of its own.
    /// What is left in the stages the tracer takes when the session ends.
    pub spans_off: u64,
    pub span_batch: u32,
    pub span_stride: u32,
    /// The thread slots ([`ThreadSlot`], `nthreads` of them) and their
    /// shadow stacks: a private mapping in the target (absolute address),
    /// so a forked child gets a copy of its parent's, consistent with the
    /// copy of its stacks, instead of sharing them. Only target-side code
    /// uses thread slots (the tracer's handlers have none).
    pub threads_at: u64,
    /// `--chrome-min-dur` in TSC ticks: spans (whose `ts` and `dur` are
    /// TSC ticks, converted by the tracer) shorter than this are left out.
    pub span_min_ticks: u64,
    /// Calls with a return probe that never returned through it: left by
    /// `longjmp` or a C++ exception (their frames found below the stack,
    /// or dropped where a catch starts). Reported at the end.
    pub unreturned: u64,
    /// `skipped`, by reason: a hit on a thread already inside a handler
    /// (a signal handler calling a probed function); on a thread that has
    /// no slot (more threads than slots); a return probe on a call nested
    /// deeper than a thread's shadow stack.
    pub skipped_busy: u64,
    pub skipped_noslot: u64,
    pub skipped_deep: u64,
    /// `target()`: the process of `-c` or `-p`, 0 in a session without one.
    pub target: u64,
    /// A thread about to `exec` (hooked on the C library's `execve`):
    /// `pid << 32 | tid`, 0 when none. The tracer attaches to it, so the
    /// new program stops at its start and gets its probes, and answers in
    /// `exec_ack` with the same value; the thread then clears both.
    pub exec_req: u64,
    pub exec_ack: u64,
    /// Execs the tracer did not answer in time (10 s): their programs ran
    /// without probes. Reported at the end.
    pub unfollowed_execs: u64,
    /// The tracer's pid (`rt_read_user` reads the region's process from
    /// the tracer, its own process from a target thread).
    pub tracer: u64,
    /// `nthreads` u32s: the process that holds each row of the per-thread
    /// shards and span stages (0 = never taken). When every row is taken,
    /// the tracer marks the rows of processes that have ended
    /// [`ROW_FREE`], and `take_row` (compiler/rt/rt.c) takes them again:
    /// their counts stay in them, and add up.
    pub row_owners_off: u64,
    /// A fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) in a
    /// process of the session, recorded by `rt_crash` (compiler/rt/rt.c),
    /// the handler the tracer installs where the program has none: the
    /// thread claims the record (`crash_who`, `pid << 32 | tid`, by a
    /// compare-and-swap from 0), fills it, publishes it in `crash_req`
    /// (Release) and waits (bounded) until the tracer has read it and the
    /// process's maps and answered in `crash_ack`; then it clears all
    /// three and lets the signal kill the process as it would have.
    pub crash_who: u64,
    pub crash_req: u64,
    pub crash_ack: u64,
    /// The signal, its `si_code`, and the fault address (`si_addr`).
    pub crash_sig: u32,
    pub crash_code: i32,
    pub crash_addr: u64,
    /// Where the thread was: its program counter and stack pointer.
    pub crash_pc: u64,
    pub crash_sp: u64,
    /// 1 when a probe handler was running on that thread.
    pub crash_in_probe: u32,
    /// Rung (atomic add, then a shared FUTEX_WAKE) by a thread asking the
    /// block tracer for something: a traced call, a block, a drain.
    pub itrace_bell: u32,
    /// Where the region's process keeps its command line (`arg_start`
    /// and `arg_end` of /proc/PID/stat), for `cmdline_str()` in the
    /// tracer's probes; 0 when unknown.
    pub arg_start: u64,
    pub arg_end: u64,
    /// Hits of the probes placed with a one-byte trap where no jump fits
    /// (`rt_trap`, compiler/rt/rt.c: an atomic add per hit), for the
    /// session summary.
    pub trap_hits: u64,
    /// `skipped`, by reason: a probe on a Go function hit where its
    /// handler cannot run (the thread on Go's scheduler or signal stack, or
    /// with too little of the scheduler's stack free). Its trampoline adds
    /// to both itself.
    pub skipped_go: u64,
    /// Return probes on Go functions: the calls in progress, by goroutine
    /// ([`GoCalls`]), `go_calls` of them from `threads_at + go_calls_off`
    /// in the same private mapping (none: 0).
    pub go_calls_off: u64,
    pub go_calls: u32,
    pub _pad_go: u32,
    /// `--flight-recorder`: the history of calls, `flight_chunks`
    /// [`FlightChunk`]s of `flight_stride` bytes from `flight_off` (none
    /// without it). A thread whose span stage fills copies it into the
    /// chunk `flight_next` names (an atomic add: chunks are taken in turn,
    /// the oldest overwritten), instead of the ring: nothing is sent,
    /// nothing drained, until a dump reads every chunk.
    pub flight_off: u64,
    pub flight_chunks: u32,
    pub flight_stride: u32,
    pub flight_next: u64,
    /// `flight_dump()` calls (an atomic add each): the tracer writes a
    /// dump when it sees the count grow.
    pub flight_asks: u64,
    /// Nonzero while a dump is due (a generation from `flight_gens`): set
    /// at the trigger (`flight_dump()`, the crash handler, the tracer's
    /// SIGUSR2 handler), cleared by the tracer once it has copied the
    /// history. Meanwhile each thread copies at most one more stage into
    /// the chunks (its calls up to the trigger, `ThreadSlot::flight_hold`
    /// says it did) and drops the rest: the history up to the trigger is
    /// not overwritten while the tracer comes to read it.
    pub flight_hold: u64,
    pub flight_gens: u64,
    /// The clock (the spans' ticks) at the last trigger in the target
    /// (`flight_dump()`, a fault): the instant its dump is of.
    pub flight_at: u64,
    /// Calls not kept in the history: made while it was held, or whose
    /// chunk another thread was still writing (the history wrapped
    /// around it).
    pub flight_unkept: u64,
}

pub const HEADER_SIZE: usize = 512;

/// The stack each thread slot has for the handlers of probes on Go
/// functions (`ThreadSlot::go_stack`), in a session with such probes.
pub const GO_STACK_SIZE: u64 = 64 << 10;

/// How many goroutines may be inside calls with return probes at once
/// (their `GoCalls`), in a session with return probes on Go functions.
pub const GO_CALLS: u32 = 1024;

/// How many calls deep a goroutine's record keeps (`MAXRETURNDEPTH` when
/// it is smaller): deeper calls' return probes are skipped and counted.
pub const GO_CALLS_DEPTH: u32 = 1024;

/// A goroutine's calls in progress with return probes on Go functions:
/// Go moves a goroutine between threads while it waits, so these are kept
/// by goroutine, not by thread (a thread's shadow stack would lose them).
/// `min(shadow_depth, GO_CALLS_DEPTH)` frames of `frame_size` bytes
/// follow, each a
/// [`ShadowFrame`] whose `sp` is the call's depth in its goroutine's stack
/// (`g.stack.hi` - the stack pointer at entry, which Go keeps when it
/// copies a stack) and whose `ret` and `tramp` are 0, then its `@entry`
/// saves. `state` is the owner's goroutine id times two, plus one while
/// it has frames: a goroutine takes a free or idle record (even `state`)
/// with a compare-and-swap, and only its owner touches a record with the
/// bit set (compiler/rt/rt.c, `go_calls`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct GoCalls {
    pub state: u64,
    /// The owner's `g` (a record whose `g` runs another goroutine now is
    /// free again: its owner ended inside a call).
    pub g: u64,
    pub depth: u32,
    pub _pad: u32,
    pub _reserved: u64,
}
pub const GO_CALLS_HEADER: usize = 32;
const _: () = assert!(core::mem::size_of::<GoCalls>() == GO_CALLS_HEADER);

/// The bytes a Go function's trampoline needs free on the thread's
/// scheduler stack (Go's `g0`: 8 KiB on a thread Go starts itself, cgo's
/// and the main thread's are larger), where it runs `rt_enter_go` when a
/// thread takes its slot; with less it skips the hit.
pub const GO_STACK_ROOM: u64 = 2048;

/// The trap area: per process, after the thread slots and their shadow
/// stacks in the same private mapping (`Header::threads_at`, so a forked
/// child has a copy and an exec'd program a new one), where `rt_trap`
/// (compiler/rt/rt.c) finds which trampoline a trap site goes to. Written
/// by the tracer while the process is stopped: two tables of
/// `TRAP_CAP` sorted `(site, trampoline)` pairs, the one in use named by
/// `active`, so a thread that was stopped in the middle of a lookup finds
/// the table it was reading unchanged. The process's own view of SIGTRAP
/// (what its `sigaction` set: `rt_trap` calls its handler for traps that
/// are not ours) is kept here too. The target may write all of it: only
/// the target reads it, and nothing in it is an address the tracer uses.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TrapArea {
    /// The region's address in the process (for `Header::trap_hits`).
    pub region: u64,
    /// 0 or 1: the table in use; `count[active]` its entries.
    pub active: u64,
    pub count: [u64; 2],
    /// The program's SIGTRAP disposition as the kernel's `struct
    /// sigaction` has it (handler, flags, restorer, mask): `SIG_DFL` is 0.
    pub handler: u64,
    pub flags: u64,
    pub restorer: u64,
    pub mask: u64,
    /// Our handler's entry (the stub that passes this area to `rt_trap`).
    pub stub: u64,
    pub _reserved: [u64; 7],
    /// A C library `struct sigaction` (handler, 128-byte mask, int flags,
    /// restorer) naming our stub, which the `sigaction` hook hands the C
    /// library in place of the program's for SIGTRAP: the library installs
    /// it with its own restorer, which stays valid after the session.
    pub libc_act: [u64; 19],
    pub _pad: [u64; 13],
}

/// Bytes of a row of the probe table (`Header::probes_off`).
pub const PROBE_ROW_SIZE: usize = 32;

pub const TRAP_AREA_HEADER: usize = 384;
const _: () = assert!(core::mem::size_of::<TrapArea>() == TRAP_AREA_HEADER);
/// Entries per table, and the whole area's size (a page multiple).
pub const TRAP_CAP: usize = 2048;
pub const TRAP_AREA_SIZE: usize = (TRAP_AREA_HEADER + 2 * 16 * TRAP_CAP).next_multiple_of(4096);

/// A row of the per-thread data whose process has ended
/// (`Header::row_owners_off`).
pub const ROW_FREE: u32 = u32::MAX;
const _: () = assert!(core::mem::size_of::<Header>() == HEADER_SIZE);

/// Ring of variable-size event records: many producers (handlers), one
/// consumer (the tracer).
///
/// * A producer reserves `len` bytes by a compare-and-swap on `head` (AcqRel),
///   after checking against `tail` (Acquire, pairs with the consumer's Release
///   store of `tail`) that the bytes are free. A record never wraps: when it
///   does not fit before the end, the producer also reserves the rest of the
///   data area and fills it with a [`EV_PAD`] record.
/// * It writes the record, then stores the first word of [`EventHeader`]
///   (`size | COMMITTED`) with Release; the consumer loads it with Acquire.
/// * The consumer processes committed records in order, zeroes them (so the
///   next producer finds a zero first word), and publishes the new `tail`
///   with Release.
/// * When the ring is full the event is dropped and `Header::dropped`
///   counted; producers never wait (except tracer-side handlers, which may
///   wait for the consumer thread: see `CTX_MAY_WAIT`).
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
pub struct RingHeader {
    pub head: u64,
    pub _pad0: [u64; 7],
    pub tail: u64,
    pub _pad1: [u64; 7],
    /// Size of the data area in bytes, a power of two.
    pub size: u64,
    /// Offset of the data area from the region base.
    pub data_off: u64,
    pub _pad2: [u64; 6],
}
const _: () = assert!(core::mem::size_of::<RingHeader>() == 192);

/// The first word of a record once it is complete.
pub const COMMITTED: u32 = 1 << 31;

/// Header of every event record; the payload follows. `size` includes the
/// header and is a multiple of 8.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct EventHeader {
    pub size: u32,
    pub kind: u16,
    pub probe: u16,
    pub tid: u32,
    /// Kind-specific: the format id, the location id, the histogram kind.
    pub aux: u32,
    pub ts: u64,
}
pub const EVENT_HEADER_SIZE: usize = 24;
const _: () = assert!(core::mem::size_of::<EventHeader>() == EVENT_HEADER_SIZE);

/// Padding to the end of the data area.
pub const EV_PAD: u16 = 1;
/// `printf`: aux = format id; payload = the arguments in format order, each a
/// long as 8 bytes or a string as `u32` length + bytes, padded to 8.
pub const EV_PRINTF: u16 = 2;
/// A runtime error: aux = location id; payload = `u32` code, `u32` length, message.
pub const EV_ERROR: u16 = 3;
/// `warn(msg)`: payload = `u32` length, message.
pub const EV_WARN: u16 = 4;
/// `exit()` was called.
pub const EV_EXIT: u16 = 5;
/// `print(@hist_log(s))` / `print(@hist_linear(...))`: aux = [`HIST_LOG`] or
/// [`HIST_LINEAR`]; payload = [`HistEvent`] then `nbuckets` × i64 counts.
pub const EV_HIST: u16 = 6;
/// `trace_instant(name)`: payload = `u32` length, name.
pub const EV_INSTANT: u16 = 7;
/// `trace_counter(name, value)`: payload = i64 value, `u32` length, name.
pub const EV_COUNTER: u16 = 8;
/// One call of a probed function, for `--chrome`: ts = its start, aux = 0;
/// payload = i64 duration in ns. Written at the function's return.
pub const EV_SPAN: u16 = 9;
/// Calls of probed functions, for `--chrome`, moved from a thread's
/// [`SpanStage`]: aux = how many; payload = that many [`SpanEntry`]s.
pub const EV_SPANS: u16 = 10;
/// `trace_span(name, start_ns)`, for `--chrome` and `--perfetto`: a slice
/// with a name of the script's, ts = its end (ns, as every event's), aux =
/// 0; payload = i64 start ns, `u32` length, name.
pub const EV_NAMED_SPAN: u16 = 11;
/// A thread of the session's processes took its slot: tid, aux = its
/// process id (the trace files give each process a track, though the
/// thread may be gone when they are written). No payload.
pub const EV_THREAD: u16 = 12;

/// A thread slot's staged `--chrome` calls: the count, then the entries.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SpanStage {
    pub count: u32,
    /// With the flight recorder, times the stage filled and went into the
    /// history: a reader that finds it changed while it copied the stage
    /// drops what it copied.
    pub sent: u32,
}
pub const SPAN_STAGE_HEADER: usize = 8;
const _: () = assert!(core::mem::size_of::<SpanStage>() == SPAN_STAGE_HEADER);

/// A chunk of the flight recorder's history (`Header::flight_off`): a
/// span stage's calls, as the stage had them when it filled. `seq` is odd
/// while the chunk is written and then `2 * (n + 1)` for the `n`th chunk
/// written (Release): a reader copies the chunk between two loads of
/// `seq` and keeps it only if both are the same even number.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FlightChunk {
    pub seq: u64,
    pub tid: u32,
    pub count: u32,
}
pub const FLIGHT_CHUNK_HEADER: usize = 16;
const _: () = assert!(core::mem::size_of::<FlightChunk>() == FLIGHT_CHUNK_HEADER);

/// The function symbols of the probed modules, for `usymname()` and
/// `print_ubacktrace()`: this header, `nmodules` [`SymTableModule`]s and
/// `late_cap` more, then each module's [`SymEntry`]s sorted by address, room
/// for `relocs_cap` [`SymReloc`]s, then the names (NUL terminated). Offsets
/// are from the table's start. A constant, but for the modules' `bias` and
/// `mapped`, which the tracer writes when it finds the module in the target
/// (before handlers run, or when it is loaded later), the relocations, and
/// the late modules: libraries the target loads after pass 2 read its
/// modules, which the tracer adds (slot, then entries, rows and names in the
/// region's late-symbols area, `Artifact::symtab_late`) before it raises
/// `late_used` (Release).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SymTable {
    pub nmodules: u32,
    /// Relocations written so far (Release by the tracer, after them).
    pub nrelocs: u32,
    pub relocs: u32,
    pub relocs_cap: u32,
    /// Module slots after the first `nmodules` for libraries loaded later.
    pub late_cap: u32,
    /// Late slots written so far (Release by the tracer, after them).
    pub late_used: u32,
}

/// A probed function's first instructions, relocated into its trampoline:
/// a return address inside the copy (a call among them) is reported at the
/// same offset in the original.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SymReloc {
    pub copy: u64,
    pub orig: u64,
    pub copy_len: u32,
    pub orig_len: u32,
}
pub const SYM_RELOC_SIZE: usize = 24;
const _: () = assert!(core::mem::size_of::<SymReloc>() == SYM_RELOC_SIZE);

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SymTableModule {
    /// Run-time address = link-time address + bias.
    pub bias: u64,
    pub entries: u32,
    pub count: u32,
    pub path: u32,
    /// Nonzero once `bias` is known (Release by the tracer).
    pub mapped: u32,
    /// The module's unwind rows ([`UnwindRow`], by address; table offset),
    /// from its CFI: how `ubacktrace()` steps from a frame to its caller.
    pub unwind: u32,
    pub unwind_count: u32,
}
pub const SYM_MODULE_SIZE: usize = 32;
const _: () = assert!(core::mem::size_of::<SymTableModule>() == SYM_MODULE_SIZE);

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SymEntry {
    pub addr: u64,
    pub size: u32,
    pub name: u32,
}
pub const SYM_ENTRY_SIZE: usize = 16;
const _: () = assert!(core::mem::size_of::<SymEntry>() == SYM_ENTRY_SIZE);

/// From `addr` (link-time) up to the next row's, how a frame finds its
/// caller ([`unwind_rule`]): the module's `.eh_frame` compacted to what a
/// backtrace needs (the canonical frame address, where the frame pointer
/// was saved; the return address is just below the CFA).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct UnwindRow {
    pub addr: u64,
    pub rule: u32,
    pub _pad: u32,
}
pub const UNWIND_ROW_SIZE: usize = 16;
const _: () = assert!(core::mem::size_of::<UnwindRow>() == UNWIND_ROW_SIZE);

/// CFA = stack pointer + offset.
pub const UNW_CFA_SP: u32 = 0;
/// CFA = frame pointer + offset.
pub const UNW_CFA_FP: u32 = 1;
/// No rule here (a gap between functions, an expression): walk the frame
/// pointer.
pub const UNW_NONE: u32 = 2;
/// The outermost frame (its return address is undefined: `_start`).
pub const UNW_END: u32 = 3;

/// A row's rule: `kind` (2 bits), whether the caller's frame pointer is
/// saved (bit 2) at CFA + `fp_off` (bits 16–31, in words, signed), the
/// CFA's offset from its register in words (bits 3–15). None when the
/// offsets do not fit (the caller then treats the row as [`UNW_NONE`]).
pub fn unwind_rule(kind: u32, cfa_off: i64, fp_off: Option<i64>) -> Option<u32> {
    if kind > UNW_END {
        return None;
    }
    if kind >= UNW_NONE {
        return Some(kind);
    }
    if cfa_off < 0 || cfa_off % 8 != 0 || cfa_off / 8 >= 1 << 13 {
        return None;
    }
    let fp = match fp_off {
        None => 0,
        Some(o) if o % 8 == 0 && (i16::MIN as i64..=i16::MAX as i64).contains(&(o / 8)) => {
            (1u32 << 2) | (((o / 8) as i16 as u16 as u32) << 16)
        }
        Some(_) => return None,
    };
    Some(kind | fp | ((cfa_off / 8) as u32) << 3)
}

/// One call of a probed function: its thread, probe, start and duration,
/// in TSC ticks (`rdtsc`: the trampolines read the clock inline; the
/// tracer converts with the header's calibration).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SpanEntry {
    pub tid: u32,
    pub probe: u16,
    pub _pad: u16,
    pub ts: u64,
    pub dur: u64,
}
pub const SPAN_ENTRY_SIZE: usize = 24;
const _: () = assert!(core::mem::size_of::<SpanEntry>() == SPAN_ENTRY_SIZE);

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HistEvent {
    pub count: i64,
    pub lo: i64,
    pub hi: i64,
    pub step: i64,
    pub nbuckets: u32,
    pub _pad: u32,
}
const _: () = assert!(core::mem::size_of::<HistEvent>() == 40);

/// Per-thread state of a target thread. A thread claims a free slot by a
/// compare-and-swap of `key` from 0 to its thread pointer (AcqRel); only that
/// thread writes the rest of its slot afterwards, so no further atomics are
/// needed inside it. Slots are found by hashing the thread pointer (`%fs:0`)
/// with linear probing; a slot stays claimed after its thread exits, and is
/// taken over by the next thread with the same thread pointer (one whose id
/// in its control block differs from `tid`, see `Header::tcb_tid_off`):
/// with a fresh shadow stack when the slot's `pid` is this process (the
/// old thread exited), with the one it has when it is another (a forked
/// child's copy of its parent's slot). The slots live in private memory of
/// the target (`Header::threads_at`); `index` and `frames` are written by
/// the tracer.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ThreadSlot {
    /// The thread pointer (`%fs` base) of the owner; 0 = free.
    pub key: u64,
    pub tid: u32,
    /// Nonzero while the thread runs a handler: a probe hit during that time
    /// (a signal handler calling a probed function) is skipped and counted
    /// instead of nesting (`rt_enter` in compiler/rt/rt.c).
    pub busy: u32,
    /// Frames on the thread's shadow stack.
    pub depth: u32,
    /// The process that claimed the slot.
    pub pid: u32,
    /// This slot's shadow stack (absolute address in the target).
    pub frames: u64,
    /// The slot's row in the per-thread shards and span stages
    /// (`Header::rows_next`).
    pub index: u32,
    pub _pad: u32,
    /// The top of this slot's stack for the handlers of probes on Go
    /// functions (`GO_STACK_SIZE` bytes; 0 in a session without them):
    /// Go's own stacks are too small, and move.
    pub go_stack: u64,
    /// The `Header::flight_hold` under which this thread last copied its
    /// stage into the flight recorder's history.
    pub flight_hold: u64,
    pub _reserved: u64,
}

/// One return-probe frame: the replaced return address, the stack address
/// it was at (a frame whose slot lies below the current stack pointer was
/// skipped by `longjmp` and is dropped), and the probe. The `@entry` saves
/// follow.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ShadowFrame {
    pub ret: u64,
    pub sp: u64,
    pub probe: u32,
    /// Where the function keeps the replaced return address, in bytes from
    /// `sp` (a multiple of 8): what an unwinder reads, and what an
    /// exception or the detach puts back. 0 on x86_64 (the pushed return
    /// address itself). On aarch64 `sp` names entry sp - 8 and the
    /// prologue saves x30 where its CFI says, which is lower for a large
    /// frame. The low bits ([`SAVED_SIGNED`]) say how the function signs
    /// its return address (aarch64's pointer authentication).
    pub saved: i32,
    /// The return trampoline written over the return address (an exception
    /// puts `ret` back only where the stack still holds it).
    pub tramp: u64,
}
pub const SHADOW_FRAME_HEADER: usize = 32;

/// `ShadowFrame::saved`'s low bits: how the function signed the return
/// address it keeps (aarch64: 1 `paciasp`, key A; 2 `pacibsp`, key B;
/// the modifier is its entry's stack pointer). The trampoline's address it
/// keeps instead is signed the same way.
pub const SAVED_SIGNED: i32 = 3;
pub const SAVED_PACIA: i32 = 1;
pub const SAVED_PACIB: i32 = 2;

/// A thread's request to be instruction-traced (`.itrace`): it claims a
/// free slot (CAS `state` FREE -> CLAIMED), fills it, publishes it
/// (Release store of WAITING), rings `Header::itrace_bell` and waits,
/// bounded. The block tracer (runtime/src/blocktrace.rs) takes the request
/// (CAS WAITING -> TAKEN), translates the function's first block, puts its
/// address in `resume` and stores RUN (Release): the thread frees the slot
/// and its gate jumps there. The single-stepper (`--itrace-step`) instead
/// seizes the thread, and only once it is stopped takes the request: from
/// the saved registers it restarts the thread at the function's relocated
/// first instructions and single-steps it to the return. A thread that
/// gives up first (CAS WAITING -> FREE) runs on untraced and counts
/// `Header::itrace_missed`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ItraceSlot {
    pub state: u32,
    pub tid: u32,
    /// The thread's registers at the function's entry (`SavedRegs`).
    pub regs: u64,
    /// Which traced function (the tracer's index).
    pub func: u64,
    /// The requesting process (a forked child shares the region).
    pub pid: u64,
    /// With RUN: where the thread goes on (0: untraced).
    pub resume: u64,
    /// A value of the request's own (the thread's clock when it asked),
    /// kept by the thread. The region is any process's to write, so the
    /// block tracer's answer is not `resume` here but the same slot in the
    /// trusted mirror (`MIRROR_GAP`): `tid`, `func`, `nonce` as the
    /// request had them, then `resume`, written before RUN (Release). The
    /// thread goes to `resume` only if the mirror's slot names its own
    /// request (its tid, function and nonce, which it kept itself), so a
    /// forged RUN or answer sends no thread anywhere.
    pub nonce: u64,
}
pub const ITRACE_FREE: u32 = 0;
pub const ITRACE_CLAIMED: u32 = 1;
pub const ITRACE_WAITING: u32 = 2;
pub const ITRACE_TAKEN: u32 = 3;
/// The tracer will not take this request (another process's thread): the
/// owner frees the slot and runs on.
pub const ITRACE_DECLINED: u32 = 4;
/// The block tracer took the request: go on at `resume`.
pub const ITRACE_RUN: u32 = 5;
const _: () = assert!(core::mem::size_of::<ItraceSlot>() == 48);
const _: () = assert!(core::mem::size_of::<ShadowFrame>() == SHADOW_FRAME_HEADER);
const _: () = assert!(core::mem::size_of::<ThreadSlot>() == 64);

/// A string global (or string array value). Writers take the lock (`seq` odd)
/// by compare-and-swap (Acquire), copy, and release it by storing the next
/// even number (Release). Readers copy optimistically: load `seq` (Acquire),
/// copy, fence (Acquire), load `seq` again; they retry if it was odd or
/// changed. The bytes (`maxstringlen` of them, NUL-terminated) follow.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct LockedStr {
    pub seq: u32,
    pub _pad: u32,
}
pub const LOCKED_STR_HEADER: usize = 8;
const _: () = assert!(core::mem::size_of::<LockedStr>() == LOCKED_STR_HEADER);

/// Log histogram: 128 buckets, value 0 in bucket 64, positive `v` with
/// `2^k <= v < 2^(k+1)` in bucket 65 + k, negative values mirrored
/// (`128 - bucket(|v|)`), `i64::MIN` in bucket 0. SystemTap's layout.
pub const HIST_LOG_BUCKETS: u32 = 128;
pub const HIST_LOG_BUCKET0: u32 = 64;
/// Linear histograms have `(hi - lo) / step + 3` buckets (underflow, one per
/// step from `lo` to `hi` inclusive, overflow), at most this many.
pub const HIST_MAX_LINEAR_BUCKETS: u32 = 128;

pub const HIST_LOG: u32 = 1;
pub const HIST_LINEAR: u32 = 2;

/// A statistic aggregate. Updates are atomic adds (Relaxed) and CAS loops for
/// min/max (Relaxed): a reader may see a count without its sum for an
/// instant, never a torn word. `min`/`max` are meaningful once `count` > 0.
/// The histogram buckets described by the statistic's [`StatDesc`] follow.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Stat {
    pub count: i64,
    pub sum: i64,
    pub min: i64,
    pub max: i64,
    /// For `@variance` (kept only when the statistic's [`StatDesc`] says
    /// `variance`), SystemTap's per-copy running state
    /// (`runtime/stat-common.c`, Welford's algorithm with a 32-bit
    /// difference): the running mean, truncated, and the sum of squared
    /// differences, wrapping.
    pub avg_s: i64,
    pub m2: i64,
    /// Taken (1) while a value is added to a statistic that keeps the
    /// running state and many threads share; a bounded spin.
    pub lock: u32,
    pub _pad: u32,
}
pub const STAT_HEADER: usize = 56;
const _: () = assert!(core::mem::size_of::<Stat>() == STAT_HEADER);

/// Up to this many histograms (one log, several linear) per statistic.
pub const MAX_HISTS: usize = 4;

/// Which histograms a statistic collects (constant, in the constants area).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct HistSpec {
    pub kind: u32,
    pub nbuckets: u32,
    pub lo: i64,
    pub hi: i64,
    pub step: i64,
    /// Offset of the buckets from the start of the [`Stat`].
    pub offset: u32,
    pub _pad: u32,
}
const _: () = assert!(core::mem::size_of::<HistSpec>() == 40);

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct StatDesc {
    pub nhists: u32,
    /// Size of one statistic including its buckets.
    pub size: u32,
    pub hists: [HistSpec; MAX_HISTS],
    /// 1: the script reads `@variance`, so adds keep the running state,
    /// with values shifted left by `shift` (`@variance(s, shift)`).
    pub variance: u32,
    pub shift: u32,
}
const _: () = assert!(core::mem::size_of::<StatDesc>() == 176);

/// Key and value kinds of arrays.
pub const KIND_LONG: u8 = 1;
pub const KIND_STRING: u8 = 2;
pub const KIND_STAT: u8 = 3;

pub const MAX_KEYS: usize = 9;

/// An associative array: a fixed-capacity open-addressing hash table.
///
/// * Insertions and deletions take `lock` (a spinlock: CAS 0→1 Acquire,
///   store 0 Release). Handlers never run twice on one thread (see
///   `ThreadSlot::busy`), so a lock holder is never waiting on itself.
/// * Lookups do not lock. Each slot has a sequence number: a writer makes it
///   odd (Relaxed store + Release fence), writes keys and state, makes it
///   even (Release); a reader loads it (Acquire), compares keys, fences
///   (Acquire) and loads it again, retrying when it changed or was odd.
/// * Values of live entries are updated in place with atomics (longs,
///   statistics) or the [`LockedStr`] protocol (strings).
/// * `count` (live entries) is changed only under the lock; at `capacity` an
///   insertion fails with "Array overflow".
/// * `order` numbers insertions, so `foreach` without sorting visits entries
///   in insertion order.
///
/// The slots follow the header: `nslots` × `slot_size` bytes, each a
/// [`SlotHeader`], then the keys at `key_off[i]` (long: 8 bytes, string:
/// `maxstringlen` bytes), then the value at `value_off`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TableHeader {
    pub lock: u32,
    pub nkeys: u32,
    pub key_kinds: [u8; 12],
    pub value_kind: u8,
    /// 1: full, an insertion drops the oldest element (`global a%`).
    pub wrap: u8,
    pub _pad0: [u8; 2],
    pub capacity: u32,
    /// Number of slots, a power of two, at least twice `capacity`.
    pub nslots: u32,
    pub slot_size: u32,
    pub value_off: u32,
    pub key_off: [u32; 10],
    pub count: u32,
    /// Waits for `lock` that gave up and went on without it (held for
    /// ever: only a process writing the region can do that; `SPIN_LIMIT`
    /// in compiler/rt/rt.c). The tracer reports a non-zero count as the
    /// target's damage (`Region::stolen_locks`).
    pub stolen: u32,
    pub order: u64,
    /// For statistic values: offset of the [`StatDesc`] in the region.
    pub stat_desc: u64,
    pub maxstringlen: u32,
    pub _pad2: u32,
}
pub const TABLE_HEADER_SIZE: usize = 112;
const _: () = assert!(core::mem::size_of::<TableHeader>() == TABLE_HEADER_SIZE);

pub const SLOT_EMPTY: u32 = 0;
pub const SLOT_LIVE: u32 = 1;
/// A deleted entry: lookups go on past it, insertions may reuse it.
pub const SLOT_DEAD: u32 = 2;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SlotHeader {
    pub seq: u32,
    pub state: u32,
    pub order: u64,
}
pub const SLOT_HEADER_SIZE: usize = 16;
const _: () = assert!(core::mem::size_of::<SlotHeader>() == SLOT_HEADER_SIZE);

/// The context of one handler run: on the stack of whoever calls the handler
/// (a trampoline in the target, the tracer's probe thread). Private to that
/// run, so plain loads and stores. Two string buffers of `maxstringlen` bytes
/// follow it: the error message, then `tokenize`'s saved input.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Ctx {
    /// Saved registers of the probed thread (function probes), else 0.
    pub regs: u64,
    pub probe: u32,
    pub flags: u32,
    /// Actions left before "MAXACTION exceeded".
    pub actions: i64,
    /// Script-function calls in progress.
    pub nesting: u32,
    /// The pending error ([`ERR_DIV0`] …), 0 when none.
    pub error: u32,
    /// Location id of the pending error.
    pub error_loc: u32,
    /// A probe on a Go function: the offset of the goroutine id in Go's
    /// `g` (`goid()`; `$argN` then follows Go's register ABI); 0 elsewhere.
    pub go_goid: u32,
    pub tid: u64,
    pub pid: u64,
    /// `tokenize`'s position in its saved input.
    pub tok_pos: u64,
    /// The function probe's address (`uaddr()`).
    pub addr: u64,
    /// Return probes: the values their `@entry(...)` expressions had at
    /// entry, saved there by the probe's entry handler.
    pub entry: u64,
    /// The thread's slot (from `rt_enter`) in a target thread, else 0.
    pub slot: u64,
}
pub const CTX_SIZE: usize = 88;
const _: () = assert!(core::mem::size_of::<Ctx>() == CTX_SIZE);

/// The registers of a probed thread at the probe, saved by its trampoline
/// (the native architecture's register file, `crate::arch`).
pub use crate::arch::native::SavedRegs;

/// The handler runs in the tracer: it may wait for room in the ring.
pub const CTX_MAY_WAIT: u32 = 1;
/// The handler is a begin/end/error probe (MAXACTION × 10).
pub const CTX_INTERRUPTIBLE: u32 = 2;
/// A `timer.profile` handler: `regs` points at a [`Sample`], the sampled
/// thread's registers followed by its stack as the tracer unwound it
/// (`ubacktrace()` reads those frames: the thread has moved on).
pub const CTX_SAMPLE: u32 = 4;

/// The most frames a sample's stack keeps (deeper stacks are cut at the
/// root end and counted as truncated).
pub const SAMPLE_FRAMES: usize = 128;

/// What a `timer.profile` handler's context points at ([`CTX_SAMPLE`]).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub regs: SavedRegs,
    /// How many of `pcs` hold frames, the sampled pc first, then return
    /// addresses outwards.
    pub frames: u64,
    pub pcs: [u64; SAMPLE_FRAMES],
    /// A `process.blocked` sample: how long the thread waited (ns), and
    /// in what (`$syscall`: NUL-terminated, at most 31 bytes).
    pub wait_ns: u64,
    pub wait: [u8; 32],
}
// `c_header` places these by the register file's size alone.
const _: () = assert!(core::mem::offset_of!(Sample, frames) == 8 * crate::arch::native::NREGS);
const _: () = assert!(core::mem::offset_of!(Sample, pcs) == 8 * crate::arch::native::NREGS + 8);

pub const ERR_DIV0: u32 = 1;
pub const ERR_MAXACTION: u32 = 2;
pub const ERR_OVERFLOW: u32 = 3;
pub const ERR_NESTING: u32 = 4;
/// `error(msg)`, `assert`: the message is in the context's buffer.
pub const ERR_USER: u32 = 5;
pub const ERR_EMPTY_AGG: u32 = 6;
/// `user_string` and friends on an unreadable address (message in the buffer).
pub const ERR_FAULT: u32 = 7;
/// Shared data the target overwrote into an impossible state (a
/// statistic's count, minimum and maximum).
pub const ERR_CORRUPT: u32 = 8;

/// SystemTap's wording for each error code.
pub fn error_message(code: u32) -> &'static str {
    match code {
        ERR_DIV0 => "division by 0",
        ERR_MAXACTION => "MAXACTION exceeded",
        ERR_OVERFLOW => "Array overflow, check MAXMAPENTRIES",
        ERR_NESTING => "MAXNESTING exceeded",
        ERR_EMPTY_AGG => "empty aggregate",
        ERR_CORRUPT => {
            "statistic damaged: its count, minimum and maximum cannot all hold (the target can write to the shared \
             region)"
        }
        _ => "error",
    }
}

/// `thread_indent` state of one thread: claimed by CAS of `tid` from 0.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IndentSlot {
    pub tid: u64,
    pub depth: i64,
    /// Timestamp (ns) when the depth was last 0.
    pub base_ns: u64,
    pub _pad: u64,
}
pub const INDENT_SLOTS: usize = 256;
const _: () = assert!(core::mem::size_of::<IndentSlot>() == 32);

/// Round `n` up to a multiple of `a` (a power of two).
pub const fn align_up(n: u64, a: u64) -> u64 {
    (n + a - 1) & !(a - 1)
}
