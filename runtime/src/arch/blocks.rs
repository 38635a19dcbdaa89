//! The block tracer's protocol, shared by both architectures: where an
//! arena's control block keeps each word, the requests a thread makes of
//! the tracer, the lookup table's entries, and what a translation returns.
//! Each architecture's `blocks.rs` writes the code that follows it
//! (`x86_64/blocks.rs` explains the design; `aarch64/blocks.rs` how it
//! differs there), and `crate::blocktrace` is the tracer's side.

/// Offsets in an arena's data part (its control block first).
pub mod ctl {
    /// u32: requests made (the target), and answered (the tracer).
    pub const REQ_GEN: u64 = 0;
    pub const ACK_GEN: u64 = 4;
    /// u32: what the last request asks ([`super::REQ_TRANSLATE`], …).
    pub const REQ_KIND: u64 = 8;
    /// u32: nonzero once the arena is abandoned (no tracer answer).
    pub const ABANDONED: u64 = 12;
    /// u64: the real address a transfer goes to (dispatcher input).
    pub const WANT: u64 = 16;
    /// u64: the translation the dispatcher jumps to.
    pub const TARGET: u64 = 24;
    /// u64: the traced call's return address and the stack pointer after
    /// its return: reaching both ends the trace.
    pub const END_RET: u64 = 32;
    pub const END_SP: u64 = 40;
    /// u64: where the next record goes; the end of the buffer.
    pub const CURSOR: u64 = 48;
    pub const LIMIT: u64 = 56;
    /// u64: a scratch register's value while it holds an address.
    pub const SCRATCH: u64 = 64;
    /// u64: the system call number before a `syscall`.
    pub const SYSNO: u64 = 72;
    /// struct timespec: one futex wait (10 ms).
    pub const TIMESPEC: u64 = 80;
    /// u64: the table's address (a constant).
    pub const TABLE: u64 = 96;
    /// u64: records dropped (abandoned arena).
    pub const LOST: u64 = 104;
    /// u64: the buffer's start (a constant).
    pub const BUF_START: u64 = 112;
    /// u64: the address the request is about (a miss's target).
    pub const REQ_ADDR: u64 = 120;
    /// u32: set when the thread left the cache (trace over or abandoned).
    pub const LEFT: u64 = 128;
    /// The buffer is two halves: the thread fills one while the tracer
    /// drains the other. u64: the half being filled (0, 1); each half's
    /// end cursor once full (0: empty, drained); each half's bounds.
    pub const HALF: u64 = 136;
    pub const FILLED: u64 = 144;
    pub const HALF_START: u64 = 160;
    pub const HALF_END: u64 = 176;
    /// u64: aarch64's record address across a `clone` (the parent's way
    /// back to it).
    pub const SVC_RECORD: u64 = 192;
    /// u64 count, then (real address, where to go instead) pairs: the
    /// instructions of traced functions' displaced first bytes, which in
    /// memory are our jump: a thread leaving the cache for one of them
    /// goes to its relocated copy.
    pub const REDIRECTS: u64 = 1024;
    pub const REDIRECTS_MAX: u64 = 190;
    /// The staging record (the block's values; up to [`STAGE_BYTES`]).
    pub const STAGE: u64 = 4096;
    pub const STAGE_BYTES: u64 = 64 << 10;
    /// The vector registers at the call's entry (16 × 32 bytes), stored
    /// by the prologue.
    pub const START_VEC: u64 = STAGE + STAGE_BYTES;
    /// u64: the first block's translation (the prologue goes there).
    pub const FIRST: u64 = START_VEC + 512;
    /// Exit slots and copies of blocks, bump-allocated after those.
    pub const SLOTS: u64 = FIRST + 8;
}

/// Request kinds.
pub const REQ_TRANSLATE: u32 = 1;
pub const REQ_FLUSH: u32 = 2;
pub const REQ_DONE: u32 = 3;
/// The thread left the traced call's frame other than by its return.
pub const REQ_UNWOUND: u32 = 4;
/// The block at `REQ_ADDR` changed since it was translated.
pub const REQ_CHANGED: u32 = 5;

/// Lookup table entries: real address, translation, and the address and
/// length of a copy of the block's bytes as translated (a block whose code
/// changed since is translated again when reached through the table).
pub const TABLE_ENTRIES: u64 = 1 << 16;
pub const TABLE_ENTRY: u64 = 32;

/// Where an arena is in the target, and the one word shared by all arenas
/// that wakes the tracer.
#[derive(Clone, Copy, Debug)]
pub struct ArenaAddrs {
    pub code: u64,
    pub code_size: u64,
    pub data: u64,
    pub data_size: u64,
    /// The lookup table (in the data part, at its end).
    pub table: u64,
    pub buf: u64,
    pub buf_size: u64,
    /// A u32 the tracer futex-waits on (`Header::itrace_bell`).
    pub bell: u64,
    /// The CPU has AVX: vector registers are stored whole (`ymm`), else
    /// their SSE half (`xmm`), the upper half recorded as zero.
    pub avx: bool,
}

impl ArenaAddrs {
    pub fn at(&self, off: u64) -> u64 {
        self.data + off
    }
}

/// Why a block is not translated (the trace stops before it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused(pub String);

/// A translated block and the exits it left for the tracer to chain:
/// (slot address, real target).
#[derive(Clone, Debug)]
pub struct Translated {
    pub code: Vec<u8>,
    pub exits: Vec<(u64, u64)>,
}

/// Allocates exit slots in the arena's data part (the tracer's side keeps
/// the count).
pub trait SlotAlloc {
    /// A fresh 8-byte slot for an exit to `target`, holding `thunk` for
    /// now (written by the tracer before the block runs).
    fn slot(&mut self, target: u64) -> Option<u64>;
}
