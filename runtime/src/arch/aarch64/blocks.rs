//! `.itrace` in the target on aarch64: the block tracer's code (x86_64's
//! `blocks.rs` explains the design: arenas, chaining, the dispatcher, the
//! request protocol, `crate::arch::blocks` the words they share). What
//! differs here is that aarch64 has no store to a PC-relative address and
//! no branch through memory: every record store needs a base register and
//! every jump a register holding its target.
//!
//! * **Between blocks** ("in transit") the program's x16 and x17 are on
//!   the stack (`stp x16, x17, [sp, #-16]!`) and the two are ours: an exit
//!   is `stp; ldr x16, =slot; br x16` with the slot a literal in the code
//!   cache that the tracer points at the target's translation (chaining)
//!   or at a thunk (`ldr x16, =target; b dispatch`). Every translation
//!   starts by taking the two back (`ldp x16, x17, [sp], #16`) once its
//!   record is set up. Linux on aarch64 has no red zone: nothing of the
//!   program's lives below its stack pointer.
//! * **Records** go straight into the buffer: a block's prologue reserves
//!   its record at the cursor (the room test is `sub` and `tbnz`: the
//!   flags are the program's throughout), keeps the record's address in a
//!   register R the block does not name, and a second such register T for
//!   values that need one (`sp`, `nzcv`, vector registers); their program
//!   values wait just past the record and come back at the block's end.
//!   Each instruction is followed by stores of what it wrote, `lr` at the
//!   block's entry first: the layout of the ITRC record (`writes()`),
//!   which the tracer replays as it is.
//! * **Leaving the cache** (the traced call returned, the frame was left,
//!   the arena abandoned, a fork's child) must put back every register and
//!   jump, which no sequence of loads can do: the last register would hold
//!   the address. The thread builds a signal frame on its stack (every
//!   register, the FP/SIMD registers, its signal mask from
//!   `rt_sigprocmask`) and `rt_sigreturn`s over it, as the remote-operation
//!   stub does (`stub.rs`): the kernel restores everything at once.
//! * Calls are emulated (`bl` sets x30 to the real return address), so
//!   the program sees only its own addresses; `ret`, `br`, `blr` and their
//!   authenticating forms go to the dispatcher with the target
//!   authenticated as the instruction would (`autia`…).
//! * `svc` runs in the cache; `clone` and `clone3` (x8, tested before the
//!   call without the flags) have their child leave the cache at once.
//!   Exclusive loads and stores are copied as they are. Between the two,
//!   the records go to the arena's buffer, but a block that ends between
//!   them (`ldaxr; cmp; b.ne`, then `stlxr`) passes through the transit,
//!   whose x16/x17 go just below the stack pointer: an atomic variable on
//!   the stack in the same reservation granule (up to 2 KiB) would see its
//!   exclusive store fail on a core that clears the monitor on such a
//!   store, and the loop retry without end. Whether a store clears it is
//!   the core's choice (qemu's does not); no hardware has run this yet.
//! * Leaving the cache needs about 4.7 KiB of stack below the program's
//!   stack pointer (the kernel checks a whole `rt_sigframe`'s room).
//! * The tracer writes code through its own mapping of the arena: it
//!   cleans and invalidates the caches for the range ([`code_written`])
//!   before it answers, and the thread runs `isb` on seeing the answer.
//!   (By address, through the tracer's mapping: right for the PIPT
//!   instruction caches of current cores; a core with an aliasing VIPT
//!   one would need the thread to invalidate through its own.)
//! * The return address that ends the trace is x30 at the entry with its
//!   pointer authentication code stripped for 48-bit user addresses
//!   (`strip_return` in `aarch64/mod.rs`): on a kernel with 39-bit ones the mask would keep
//!   some of the code, and the trace would go on past the return into the
//!   caller until its frame is left (then end, with a warning).

use super::asm::*;
use super::clobber::RegMask;
use super::sigframe as sf;
use telco_itrc::a64::{self as itrc, LR as W_LR, NZCV as W_NZCV, SP as W_SP, V0 as W_V0, X0 as W_X0};
use telco_itrc::x64::{BlockEnd, Flow, X64Block};
use yaxpeax_arm::armv8::a64::Opcode;

pub use crate::arch::blocks::*;

/// Addresses of the shared stubs at the start of the code part.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stubs {
    /// In transit, x16 = the real address wanted.
    pub dispatch: u64,
    /// `bl`ed from a stub with x17 = the control block and `REQ_KIND` set:
    /// make the request and wait for the answer (changes x0–x8).
    pub request: u64,
    /// In transit, x16 = where to go: leave the cache for it (an address
    /// in a traced function's displaced first word goes to its relocated
    /// copy).
    pub leave: u64,
    /// [`Stubs::leave`] without the redirection (reads nothing of the
    /// arena: the traced call's return, a fork's child).
    pub leave_plain: u64,
    /// In transit, x16 = where to retry: the half being filled is full.
    pub switch: u64,
    /// Where a traced call starts (in transit): store the vector registers
    /// (the `itrace:start` values), go to the first block (`FIRST`).
    pub prologue: u64,
}

/// No AVX here (the field is x86_64's).
pub fn has_avx() -> bool {
    false
}

const X5: u32 = 5;
const X6: u32 = 6;
const X7: u32 = 7;
const X8: u32 = 8;

/// `stp x16, x17, [sp, #-16]!`: into transit.
const PUSH_IP: u32 = 0xa9bf_47f0;
/// `ldp x16, x17, [sp], #16`: out of it.
const POP_IP: u32 = 0xa8c1_47f0;
const SVC0: u32 = 0xd400_0001;
const ISB: u32 = 0xd503_3fdf;
/// aarch64 system call numbers.
const SYS_FUTEX: u32 = 98;
const SYS_RT_SIGPROCMASK: u32 = 135;
const SYS_RT_SIGRETURN: u32 = 139;
const SYS_CLONE: u32 = 220;
const SYS_CLONE3: u32 = 435;

/// Condition codes for `b.cond`.
const EQ: u32 = 0;
const NE: u32 = 1;
const LO: u32 = 3;
const LS: u32 = 9;

fn br(r: u32) -> u32 {
    0xd61f_0000 | r << 5
}

fn mov(rd: u32, rm: u32) -> u32 {
    0xaa00_03e0 | rm << 16 | rd
}

fn mrs_nzcv(rt: u32) -> u32 {
    0xd53b_4200 | rt
}

fn msr_nzcv(rt: u32) -> u32 {
    0xd51b_4200 | rt
}

/// `cmp xn, xm`.
fn cmp(rn: u32, rm: u32) -> u32 {
    0xeb00_001f | rm << 16 | rn << 5
}

/// `sub xd, xn, xm`.
fn sub(rd: u32, rn: u32, rm: u32) -> u32 {
    0xcb00_0000 | rm << 16 | rn << 5 | rd
}

impl Asm {
    /// `adrp rd, page of target` for code at `base` (this word at
    /// `base + 4 * len`).
    fn adrp(&mut self, base: u64, rd: u32, target: u64) {
        let here = base + 4 * self.len() as u64;
        let d = ((target >> 12) as i64 - (here >> 12) as i64) as u32 & 0x1f_ffff;
        self.emit(0x9000_0000 | (d & 3) << 29 | (d >> 2) << 5 | rd);
    }

    /// `b target` (absolute) for code at `base`.
    fn b_abs(&mut self, base: u64, target: u64) {
        let here = base + 4 * self.len() as u64;
        let d = (target.wrapping_sub(here) as i64 >> 2) as u32 & 0x03ff_ffff;
        self.emit(0x1400_0000 | d);
    }

    /// `b.cond label`.
    fn b_cond(&mut self, cond: u32, l: usize) {
        self.branch(0x5400_0000 | cond, l, Kind::Imm19);
    }

    fn b(&mut self, l: usize) {
        self.branch(0x1400_0000, l, Kind::B26);
    }

    /// `ldr xt, label` (a literal).
    fn ldr_lit(&mut self, rt: u32, l: usize) {
        self.branch(0x5800_0000 | rt, l, Kind::Imm19);
    }

    /// Atomically add 1 to the u32 at [xn] (`ldaxr`/`stlxr`: no LSE
    /// assumed); the new value in w(t), status in w(s).
    fn inc32(&mut self, rn: u32, t: u32, s: u32) {
        let again = self.label();
        self.bind(again);
        self.emit(0x885f_fc00 | rn << 5 | t); // ldaxr wt, [xn]
        self.emit(0x1100_0400 | t << 5 | t); // add wt, wt, #1
        self.emit(0x8800_fc00 | s << 16 | rn << 5 | t); // stlxr ws, wt, [xn]
        self.branch(0x3500_0000 | s, again, Kind::Imm19); // cbnz ws, again
    }
}

/// Words of the stub frame below a transit (x0–x8, x30, nzcv, x16).
const STUB_FRAME: u32 = 96;
const STUB_NZCV: u32 = 80;
const STUB_X16: u32 = 88;

fn stub_enter(a: &mut Asm) {
    a.add_imm(SP, SP, STUB_FRAME, true);
    for r in [0, 2, 4, 6] {
        a.stp64(r, r + 1, SP, 8 * r);
    }
    a.stp64(X8, LR, SP, 64);
    a.emit(mrs_nzcv(X0));
    a.str64(X0, SP, STUB_NZCV);
    a.str64(X16, SP, STUB_X16);
}

/// The stub frame's registers back (x16 as it is now).
fn stub_leave(a: &mut Asm) {
    a.ldr64(X0, SP, STUB_NZCV);
    a.emit(msr_nzcv(X0));
    for r in [0, 2, 4, 6] {
        a.ldp64(r, r + 1, SP, 8 * r);
    }
    a.ldp64(X8, LR, SP, 64);
    a.add_imm(SP, SP, STUB_FRAME, false);
}

/// `REQ_KIND = kind; bl request` (x17 = the control block).
fn ask(a: &mut Asm, request: usize, kind: u32) {
    a.mov32(X0, kind);
    a.str32(X0, X17, ctl::REQ_KIND as u32);
    a.branch(0x9400_0000, request, Kind::B26); // bl request
}

/// The shared stubs, assembled at `ar.code`.
pub fn stubs(ar: &ArenaAddrs) -> Result<(Vec<u8>, Stubs), AsmError> {
    let base = ar.code;
    let mut a = Asm::default();
    let request = a.label();
    let leave = a.label();
    let leave_plain = a.label();

    // dispatch (in transit, x16 = want).
    let dispatch_at = a.len();
    let (not_ret, done, lookup, gone, probe, hit, miss, changed, same, cmp_loop, wrapped) = (
        a.label(),
        a.label(),
        a.label(),
        a.label(),
        a.label(),
        a.label(),
        a.label(),
        a.label(),
        a.label(),
        a.label(),
        a.label(),
    );
    stub_enter(&mut a);
    a.adrp(base, X17, ar.data);
    a.str64(X16, X17, ctl::WANT as u32);
    // The program's stack pointer: above the stub frame and the transit.
    a.add_imm(X1, SP, STUB_FRAME + 16, false);
    a.ldr64(X2, X17, ctl::END_RET as u32);
    a.emit(cmp(X16, X2));
    a.b_cond(NE, not_ret);
    a.ldr64(X2, X17, ctl::END_SP as u32);
    a.emit(cmp(X1, X2));
    a.b_cond(EQ, done);
    // The stack above the traced call's frame: a longjmp or an exception
    // left it; the trace ends, the thread goes on natively.
    a.bind(not_ret);
    a.ldr64(X2, X17, ctl::END_SP as u32);
    a.emit(cmp(X1, X2));
    a.b_cond(LS, lookup);
    ask(&mut a, request, REQ_UNWOUND);
    a.b(gone);
    a.bind(done);
    ask(&mut a, request, REQ_DONE);
    // The arena may serve another call as soon as the tracer answered:
    // leave without reading it (x16 is still the return address).
    stub_leave(&mut a);
    a.b(leave_plain);
    a.bind(gone);
    a.mov32(X0, 1);
    a.str32(X0, X17, ctl::LEFT as u32);
    stub_leave(&mut a);
    a.b(leave);

    a.bind(lookup);
    a.ldr32(X0, X17, ctl::ABANDONED as u32);
    a.branch(0x3500_0000, gone, Kind::Imm19); // cbnz w0, gone
                                              // Entry: (want >> 2) mod entries, 32 bytes each.
    let bits = TABLE_ENTRIES.trailing_zeros();
    a.emit(0xd340_0000 | 2 << 16 | (2 + bits - 1) << 10 | X16 << 5 | X2); // ubfx x2, x16, #2, #bits
    a.ldr64(X3, X17, ctl::TABLE as u32);
    a.emit(0x8b00_0000 | X2 << 16 | TABLE_ENTRY.trailing_zeros() << 10 | X3 << 5 | X2); // add x2, x3, x2, lsl #5
    a.bind(probe);
    a.emit(0xc8df_fc00 | X2 << 5 | X0); // ldar x0, [x2]: the key, then its value
    a.emit(cmp(X0, X16));
    a.b_cond(EQ, hit);
    a.branch(0xb400_0000, miss, Kind::Imm19); // cbz x0, miss
    a.add_imm(X2, X2, TABLE_ENTRY as u32, false);
    a.emit(sub(X0, X2, X3));
    let size = TABLE_ENTRIES * TABLE_ENTRY;
    debug_assert!(size.is_multiple_of(4096) && size >> 12 < 4096);
    a.emit(0xf140_001f | ((size >> 12) as u32) << 10 | X0 << 5); // cmp x0, #size
    a.b_cond(LO, probe);
    a.bind(wrapped);
    a.emit(mov(X2, X3));
    a.b(probe);
    a.bind(hit);
    a.ldr64(X4, X2, 8);
    // The block's bytes as they were translated? (Code that modifies
    // itself, reached through a return or an indirect branch.)
    a.ldr64(X1, X2, 16);
    a.ldr64(X3, X2, 24);
    a.emit(mov(X5, X16));
    a.bind(cmp_loop);
    a.branch(0xb400_0000 | X3, same, Kind::Imm19); // cbz x3, same
    a.emit(0xb840_4400 | X5 << 5 | X0); // ldr w0, [x5], #4
    a.emit(0xb840_4400 | X1 << 5 | X6); // ldr w6, [x1], #4
    a.emit(0x6b00_001f | X6 << 16 | X0 << 5); // cmp w0, w6
    a.b_cond(NE, changed);
    a.add_imm(X3, X3, 4, true);
    a.b(cmp_loop);
    a.bind(same);
    a.emit(mov(X16, X4));
    stub_leave(&mut a);
    a.emit(br(X16));
    a.bind(changed);
    a.str64(X16, X17, ctl::REQ_ADDR as u32);
    ask(&mut a, request, REQ_CHANGED);
    a.ldr64(X16, X17, ctl::WANT as u32);
    a.b(lookup);
    a.bind(miss);
    a.str64(X16, X17, ctl::REQ_ADDR as u32);
    ask(&mut a, request, REQ_TRANSLATE);
    a.ldr64(X16, X17, ctl::WANT as u32);
    a.b(lookup);

    // request: x17 = the control block; changes x0–x8. Ring: REQ_GEN++,
    // the bell++, wake the tracer; then wait (10 ms at a time, 200 times
    // at most) until ACK_GEN reaches our generation. No answer: abandon
    // the arena.
    let (ask_l, wait, recheck, give_up, answered) = (a.label(), a.label(), a.label(), a.label(), a.label());
    a.bind(request);
    a.ldr32(X0, X17, ctl::ABANDONED as u32);
    a.branch(0x3400_0000, ask_l, Kind::Imm19); // cbz w0, ask
                                               // Abandoned: no tracer to ask; a full buffer is dropped.
    a.ldr64(X0, X17, ctl::BUF_START as u32);
    a.str64(X0, X17, ctl::CURSOR as u32);
    a.emit(0xd65f_03c0); // ret
    a.bind(ask_l);
    a.add_imm(X0, X17, ctl::REQ_GEN as u32, false);
    a.inc32(X0, X6, X7); // w6: our generation
    a.mov64(X0, ar.bell);
    a.inc32(X0, X1, X7);
    a.mov32(X1, 1); // FUTEX_WAKE (shared)
    a.mov32(X2, 1);
    a.mov32(X8, SYS_FUTEX);
    a.emit(SVC0);
    a.mov32(X5, 201);
    a.bind(wait);
    a.emit(0x7100_0400 | X5 << 5 | X5); // subs w5, w5, #1
    a.b_cond(EQ, give_up);
    a.bind(recheck);
    a.add_imm(X0, X17, ctl::ACK_GEN as u32, false);
    a.emit(0x88df_fc00 | X0 << 5 | X2); // ldar w2, [x0]
                                        // Answered once ACK_GEN has reached our generation (wrapping): a later
                                        // call's requests may have taken it past ours meanwhile.
    a.emit(0x4b00_0000 | X6 << 16 | X2 << 5 | X3); // sub w3, w2, w6
    a.branch(0x3600_0000 | 31 << 19 | X3, answered, Kind::Imm14); // tbz w3, #31, answered
    a.mov32(X1, 0); // FUTEX_WAIT (shared), expected = w2
    a.add_imm(X3, X17, ctl::TIMESPEC as u32, false);
    a.mov32(X8, SYS_FUTEX);
    a.emit(SVC0);
    // A wake, a changed word or a signal: look again; anything else (a
    // timeout, or an error: the futex word unmapped) counts towards
    // giving up.
    a.branch(0xb400_0000 | X0, recheck, Kind::Imm19); // cbz x0, recheck
    a.emit(0xb100_001f | 11 << 10 | X0 << 5); // cmn x0, #11 (-EAGAIN)
    a.b_cond(EQ, recheck);
    a.emit(0xb100_001f | 4 << 10 | X0 << 5); // cmn x0, #4 (-EINTR)
    a.b_cond(EQ, recheck);
    a.b(wait);
    a.bind(give_up);
    a.mov32(X0, 1);
    a.str32(X0, X17, ctl::ABANDONED as u32);
    a.bind(answered);
    // The code the tracer wrote, fetched anew.
    a.emit(ISB);
    a.emit(0xd65f_03c0); // ret

    // switch (in transit, x16 = where to retry): the half being filled
    // is full.
    let switch_at = a.len();
    let (h1, marked, wait_other, drained, abandoned, out) =
        (a.label(), a.label(), a.label(), a.label(), a.label(), a.label());
    stub_enter(&mut a);
    a.adrp(base, X17, ar.data);
    a.ldr32(X0, X17, ctl::ABANDONED as u32);
    a.branch(0x3500_0000, abandoned, Kind::Imm19); // cbnz w0, abandoned
                                                   // FILLED[half] = cursor (release: the records before it).
    a.ldr64(X0, X17, ctl::CURSOR as u32);
    a.ldr64(X1, X17, ctl::HALF as u32);
    a.branch(0xb500_0000 | X1, h1, Kind::Imm19); // cbnz x1, h1
    a.add_imm(X2, X17, ctl::FILLED as u32, false);
    a.b(marked);
    a.bind(h1);
    a.add_imm(X2, X17, ctl::FILLED as u32 + 8, false);
    a.bind(marked);
    a.emit(0xc89f_fc00 | X2 << 5 | X0); // stlr x0, [x2]
                                        // Ring the bell: the tracer drains it.
    a.mov64(X0, ar.bell);
    a.inc32(X0, X1, X7);
    a.mov32(X1, 1);
    a.mov32(X2, 1);
    a.mov32(X8, SYS_FUTEX);
    a.emit(SVC0);
    // The other half: wait while it is not drained.
    a.ldr64(X1, X17, ctl::HALF as u32);
    a.emit(0xd240_0000 | X1 << 5 | X1); // eor x1, x1, #1
    a.str64(X1, X17, ctl::HALF as u32);
    a.bind(wait_other);
    a.ldr64(X1, X17, ctl::HALF as u32);
    a.add_imm(X2, X17, ctl::FILLED as u32, false);
    a.emit(0x8b00_0000 | X1 << 16 | 3 << 10 | X2 << 5 | X2); // add x2, x2, x1, lsl #3
    a.emit(0xc8df_fc00 | X2 << 5 | X0); // ldar x0, [x2]
    a.branch(0xb400_0000, drained, Kind::Imm19); // cbz x0, drained
    ask(&mut a, request, REQ_FLUSH);
    a.ldr32(X0, X17, ctl::ABANDONED as u32);
    a.branch(0x3500_0000, abandoned, Kind::Imm19);
    a.b(wait_other);
    a.bind(drained);
    // cursor = HALF_START[half], limit = HALF_END[half].
    a.ldr64(X1, X17, ctl::HALF as u32);
    a.add_imm(X2, X17, ctl::HALF_START as u32, false);
    a.emit(0xf860_7800 | X1 << 16 | X2 << 5 | X0); // ldr x0, [x2, x1, lsl #3]
    a.str64(X0, X17, ctl::CURSOR as u32);
    a.add_imm(X2, X17, ctl::HALF_END as u32, false);
    a.emit(0xf860_7800 | X1 << 16 | X2 << 5 | X0);
    a.str64(X0, X17, ctl::LIMIT as u32);
    a.b(out);
    // Abandoned: the half is dropped (its bounds both set: HALF may have
    // changed since the limit was).
    a.bind(abandoned);
    a.ldr64(X1, X17, ctl::HALF as u32);
    a.add_imm(X2, X17, ctl::HALF_START as u32, false);
    a.emit(0xf860_7800 | X1 << 16 | X2 << 5 | X0);
    a.str64(X0, X17, ctl::CURSOR as u32);
    a.add_imm(X2, X17, ctl::HALF_END as u32, false);
    a.emit(0xf860_7800 | X1 << 16 | X2 << 5 | X0);
    a.str64(X0, X17, ctl::LIMIT as u32);
    a.bind(out);
    a.ldr64(X16, SP, STUB_X16);
    stub_leave(&mut a);
    a.emit(br(X16));

    // prologue (in transit): the vector registers at the call's entry.
    let prologue_at = a.len();
    a.adrp(base, X17, ar.data);
    a.add_imm(X17, X17, ctl::START_VEC as u32, false);
    for q in (0..32).step_by(2) {
        a.emit(0xad00_0000 | q << 15 | (q + 1) << 10 | X17 << 5 | q); // stp q, q+1, [x17, #16q]
    }
    debug_assert_eq!(ctl::FIRST - ctl::START_VEC, 512);
    a.ldr64(X16, X17, 512);
    a.emit(br(X16));

    // leave (in transit, x16 = where): inside a traced function's
    // displaced first bytes, go to their relocated copy instead.
    let (next, found, end, capped) = (a.label(), a.label(), a.label(), a.label());
    a.bind(leave);
    a.add_imm(SP, SP, 48, true);
    a.stp64(X0, X1, SP, 0);
    a.stp64(X2, X3, SP, 16);
    a.emit(mrs_nzcv(X0));
    a.str64(X0, SP, 32);
    a.adrp(base, X17, ar.data);
    a.ldr64(X0, X17, ctl::REDIRECTS as u32);
    a.emit(0xf100_001f | (ctl::REDIRECTS_MAX as u32) << 10 | X0 << 5); // cmp x0, #MAX
    a.b_cond(LS, capped);
    a.mov32(X0, ctl::REDIRECTS_MAX as u32);
    a.bind(capped);
    a.add_imm(X1, X17, ctl::REDIRECTS as u32 + 8, false);
    a.bind(next);
    a.branch(0xb400_0000, end, Kind::Imm19); // cbz x0, end
    a.ldr64(X2, X1, 0);
    a.emit(cmp(X2, X16));
    a.b_cond(EQ, found);
    a.add_imm(X1, X1, 16, false);
    a.add_imm(X0, X0, 1, true);
    a.b(next);
    a.bind(found);
    a.ldr64(X16, X1, 8);
    a.bind(end);
    a.ldr64(X0, SP, 32);
    a.emit(msr_nzcv(X0));
    a.ldp64(X0, X1, SP, 0);
    a.ldp64(X2, X3, SP, 16);
    a.add_imm(SP, SP, 48, false);
    // leave_plain: a signal frame with every register, pc = x16.
    a.bind(leave_plain);
    leave_by_sigreturn(&mut a);

    let leave_at = a.labels_at(leave);
    let plain_at = a.labels_at(leave_plain);
    let request_at = a.labels_at(request);
    let code = a.finish()?;
    let at = |w: usize| base + 4 * w as u64;
    let s = Stubs {
        dispatch: at(dispatch_at),
        request: at(request_at.unwrap_or(0)),
        leave: at(leave_at.unwrap_or(0)),
        leave_plain: at(plain_at.unwrap_or(0)),
        switch: at(switch_at),
        prologue: at(prologue_at),
    };
    Ok((code, s))
}

/// In transit with x16 = pc: every register as the program's (x16 and x17
/// from the transit) into a signal frame below the stack, pc = x16, the
/// signal mask as it is now; `rt_sigreturn`.
fn leave_by_sigreturn(a: &mut Asm) {
    let frame = sf::KERNEL_FRAME as u32;
    debug_assert!(frame.is_multiple_of(16));
    let reg = |i: u32| sf::REGS as u32 + 8 * i;
    a.add_imm(SP, SP, frame, true);
    for r in (0..31).filter(|r| !matches!(r, 16 | 17)) {
        a.str64(r, SP, reg(r));
    }
    a.str64(X16, SP, reg(32));
    a.ldr64(X0, SP, frame);
    a.ldr64(X1, SP, frame + 8);
    a.str64(X0, SP, reg(16));
    a.str64(X1, SP, reg(17));
    a.add_imm(X0, SP, frame + 16, false);
    a.str64(X0, SP, reg(31));
    a.emit(mrs_nzcv(X0));
    a.str64(X0, SP, reg(33));
    // uc_stack zero: sigaltstack is left as it is.
    for k in 0..3 {
        a.str64(ZR, SP, sf::UC_STACK as u32 + 8 * k);
    }
    // The FP/SIMD record: magic, size, fpsr, fpcr, v0–v31; then the end.
    a.mov32(X0, sf::FPSIMD_MAGIC);
    a.str32(X0, SP, sf::RESERVED as u32);
    a.mov32(X0, sf::FPSIMD_SIZE as u32);
    a.str32(X0, SP, sf::RESERVED as u32 + 4);
    a.emit(0xd53b_4420 | X0); // mrs x0, fpsr
    a.str32(X0, SP, sf::RESERVED as u32 + 8);
    a.emit(0xd53b_4400 | X0); // mrs x0, fpcr
    a.str32(X0, SP, sf::RESERVED as u32 + 12);
    a.add_imm(X0, SP, sf::RESERVED as u32 + 16, false);
    for q in (0..32).step_by(2) {
        a.emit(0xad00_0000 | q << 15 | (q + 1) << 10 | X0 << 5 | q); // stp q, q+1, [x0, #16q]
    }
    a.str64(ZR, SP, (sf::RESERVED + sf::FPSIMD_SIZE) as u32);
    a.str64(ZR, SP, (sf::RESERVED + sf::FPSIMD_SIZE) as u32 + 8);
    // rt_sigprocmask(SIG_BLOCK, NULL, &uc_sigmask, 8): the mask as it is.
    a.mov32(X0, 0);
    a.mov32(X1, 0);
    a.add_imm(X2, SP, sf::SIGMASK as u32, false);
    a.mov32(X3, 8);
    a.mov32(X8, SYS_RT_SIGPROCMASK);
    a.emit(SVC0);
    a.mov32(X8, SYS_RT_SIGRETURN);
    a.emit(SVC0);
}

/// Bytes of a block's record after its address: `lr` at the entry, then
/// every write's value (`X64Block::writes` order).
pub fn record_values(block: &X64Block) -> usize {
    8 + block.insns.iter().flat_map(|i| i.writes.iter()).map(|&w| itrc::value_size(w)).sum::<usize>()
}

/// The registers candidates for R and T, in the order they are taken.
const CANDIDATES: [u32; 27] =
    [9, 10, 11, 12, 13, 14, 15, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 18, 7, 6, 5, 4, 3, 2, 1, 0, 8];

/// The most a record may hold (its values' stores are `str [R, #off]`).
const MAX_RECORD: usize = 32 << 10;

/// The registers instruction `insn` of `block` names, with those it
/// writes without naming them (x0–x8 for a `svc`: its arguments, number
/// and result).
fn insn_named(block: &X64Block, insn: &telco_itrc::x64::Insn) -> RegMask {
    let Some(i) = word(block, insn.offset).and_then(super::patch::decode) else {
        // A vector extension word: no general register the decoder knows.
        return 0;
    };
    let svc = if i.opcode == Opcode::SVC { 0x1ff } else { 0 };
    super::clobber::named_gprs(&i) | svc
}

/// Never R or T: x16 and x17 (the transit's), x29, and x30 (`lr` is every
/// record's first value; `bl` writes it unnamed).
const RESERVED: RegMask = 1 << 16 | 1 << 17 | 1 << 29 | 1 << LR;

/// The registers a block's first `n` instructions name, and the reserved.
fn named(block: &X64Block, n: usize) -> RegMask {
    block.insns[..n].iter().fold(RESERVED, |m, i| m | insn_named(block, i))
}

fn word(block: &X64Block, offset: u32) -> Option<u32> {
    let o = offset as usize;
    block.code.get(o..o + 4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
}

/// Two registers the block's instructions do not name.
fn free_pair(mask: RegMask) -> Option<(u32, u32)> {
    let mut free = CANDIDATES.iter().copied().filter(|&r| mask & 1 << r == 0);
    Some((free.next()?, free.next()?))
}

/// Cut `block` to what one translation can hold: two registers it does
/// not name, a record of at most 32 KiB (a block cut so falls through to
/// the next, as one cut by size).
pub fn fit(block: &mut X64Block) {
    let mut bytes = 16;
    let mut mask = RESERVED;
    let mut keep = block.insns.len();
    for (k, insn) in block.insns.iter().enumerate() {
        bytes += insn.writes.iter().map(|&w| itrc::value_size(w)).sum::<usize>();
        mask |= insn_named(block, insn);
        if k > 0 && (bytes + 24 > MAX_RECORD || free_pair(mask).is_none()) {
            keep = k;
            break;
        }
    }
    if keep < block.insns.len() {
        block.insns.truncate(keep);
        let size = block.size() as usize;
        block.code.truncate(size);
        block.end = BlockEnd::OutOfBytes;
    }
}

fn refuse<T>(s: String) -> Result<T, Refused> {
    Err(Refused(s))
}

/// Translate `block` (its real address and bytes) to run at `at` (8-byte
/// aligned). Exits leave through literals in the translation itself:
/// the returned exits name each literal's address and the real target,
/// and the initial list each literal's thunk (which the tracer writes
/// there before the block runs, as on x86_64). `slots` is not used: the
/// literals are the slots.
pub fn translate(
    block: &X64Block,
    at: u64,
    ar: &ArenaAddrs,
    stubs: &Stubs,
    _slots: &mut dyn SlotAlloc,
) -> Result<(Translated, Vec<(u64, u64)>), Refused> {
    let n = block.insns.len();
    if n == 0 {
        return refuse(format!("no instruction at {:#x}", block.address));
    }
    let Some((r, t)) = free_pair(named(block, n)) else {
        return refuse(format!("the block at {:#x} names every register", block.address));
    };
    let values = record_values(block);
    let rec = 8 + values;
    if rec + 24 > MAX_RECORD {
        return refuse(format!("the block at {:#x} writes more registers than a record holds", block.address));
    }
    let rec = rec as u32;
    let (spill_r, spill_t, spill_x) = (rec, rec + 8, rec + 16);
    let need = rec + 24;

    let mut a = Asm::default();
    let full = a.label();
    let addr_lit = a.label();
    // Exits: (literal label, thunk label, target literal label, target).
    let mut exits: Vec<(usize, usize, usize, u64)> = Vec::new();
    let exit = |a: &mut Asm, exits: &mut Vec<(usize, usize, usize, u64)>, target: u64| {
        let (slot, thunk, tlit) = (a.label(), a.label(), a.label());
        a.emit(PUSH_IP);
        a.ldr_lit(X16, slot);
        a.emit(br(X16));
        exits.push((slot, thunk, tlit, target));
    };

    // The prologue: reserve the record (or switch halves and retry).
    let entry = a.label();
    a.bind(entry);
    a.adrp(at, X17, ar.data);
    a.ldr64(X16, X17, ctl::CURSOR as u32);
    a.ldr64(X17, X17, ctl::LIMIT as u32);
    a.emit(sub(X17, X17, X16));
    a.add_imm(X17, X17, need, true);
    // Negative: no room (the sign bit alone, tested without the flags;
    // cbnz reaches the block's end, which tbnz might not).
    a.emit(0xd37f_fc00 | X17 << 5 | X17); // lsr x17, x17, #63
    a.branch(0xb500_0000 | X17, full, Kind::Imm19); // cbnz x17, full
    a.add_imm(X17, X16, rec, false);
    a.stp64(r, t, X17, 0);
    a.emit(mov(r, X16));
    a.adrp(at, X16, ar.data);
    a.str64(X17, X16, ctl::CURSOR as u32);
    a.ldr_lit(X16, addr_lit);
    a.str64(X16, r, 0);
    a.str64(LR, r, 8);
    a.emit(POP_IP);

    let mut off = 16u32;
    // Store each write of one instruction (its value now) into the record.
    let store_writes = |a: &mut Asm, off: &mut u32, writes: &[u32]| {
        for &w in writes {
            match w {
                W_SP => {
                    a.add_imm(t, SP, 0, false); // mov t, sp
                    a.str64(t, r, *off);
                }
                W_NZCV => {
                    a.emit(mrs_nzcv(t));
                    a.str64(t, r, *off);
                }
                w if w >= W_V0 => {
                    a.add_imm(t, r, *off, false);
                    a.emit(0x3d80_0000 | t << 5 | (w - W_V0)); // str q, [t]
                }
                w if w == W_LR || w >= W_X0 => a.str64(w - W_X0, r, *off),
                _ => {}
            }
            *off += itrc::value_size(w) as u32;
        }
    };
    // R and T back to the program's values.
    let epilogue = |a: &mut Asm| {
        a.ldr64(t, r, spill_t);
        a.ldr64(r, r, spill_r);
    };
    // Into transit with x16 = t's value (an indirect target): the target
    // waits in the spare word past the record.
    let to_dispatch_with_t = |a: &mut Asm| {
        a.str64(t, r, spill_x);
        a.ldr64(t, r, spill_t);
        a.emit(PUSH_IP);
        a.ldr64(X16, r, spill_x);
        a.ldr64(r, r, spill_r);
        a.b_abs(at, stubs.dispatch);
    };

    for (k, insn) in block.insns.iter().enumerate() {
        let from = block.address + u64::from(insn.offset);
        let next = from + 4;
        let last = k + 1 == n;
        let Some(w) = word(block, insn.offset) else {
            return refuse(format!("the block at {:#x} is cut short", block.address));
        };
        let decoded = super::patch::decode(w);
        if insn.flow != Flow::Next && !last {
            return refuse(format!("control flow inside the block at {:#x}", block.address));
        }
        match insn.flow {
            Flow::Next => {
                if decoded.as_ref().is_some_and(|i| i.opcode == Opcode::SVC) {
                    svc(&mut a, at, w, next, r, t, rec, ar, stubs);
                } else {
                    copy(&mut a, at, w, from, t)?;
                }
                store_writes(&mut a, &mut off, &insn.writes);
                if last {
                    // Cut by size: falls through to the next block.
                    epilogue(&mut a);
                    exit(&mut a, &mut exits, next);
                }
            }
            Flow::Call | Flow::Branch | Flow::Return => {
                let Some(i) = decoded else {
                    return refuse(format!("`{w:#010x}` at {from:#x}"));
                };
                let target = super::patch::pc_offset(&i).map(|d| from.wrapping_add(d as u64));
                let rn = (w >> 5) & 31;
                let rm = w & 31;
                use Opcode::*;
                match i.opcode {
                    B | BL => {
                        let Some(target) = target else { return refuse(format!("`{i}` at {from:#x}")) };
                        if i.opcode == BL {
                            a.mov64(LR, next);
                        }
                        store_writes(&mut a, &mut off, &insn.writes);
                        epilogue(&mut a);
                        exit(&mut a, &mut exits, target);
                    }
                    Bcc(_) | BCcc(_) | CBZ | CBNZ | TBZ | TBNZ => {
                        let Some(target) = target else { return refuse(format!("`{i}` at {from:#x}")) };
                        store_writes(&mut a, &mut off, &insn.writes);
                        epilogue(&mut a);
                        // The same test, to a local label.
                        let taken = a.label();
                        match i.opcode {
                            TBZ | TBNZ => a.branch(w & !(0x3fff << 5), taken, Kind::Imm14),
                            _ => a.branch(w & !(0x7ffff << 5), taken, Kind::Imm19),
                        }
                        exit(&mut a, &mut exits, next);
                        a.bind(taken);
                        exit(&mut a, &mut exits, target);
                    }
                    BR | BLR | RET | BRAA | BRAAZ | BRAB | BRABZ | BLRAA | BLRAAZ | BLRAB | BLRABZ | RETAA | RETAB => {
                        // The target into t, authenticated as the
                        // instruction does (the modifier: xm or sp; for
                        // `retaa`, sp), before x30 changes.
                        let src = if matches!(i.opcode, RETAA | RETAB) { LR } else { rn };
                        a.emit(mov(t, src));
                        match i.opcode {
                            BRAA | BLRAA => a.emit(0xdac1_1000 | rm << 5 | t), // autia t, xm|sp
                            BRAB | BLRAB => a.emit(0xdac1_1400 | rm << 5 | t), // autib t, xm|sp
                            BRAAZ | BLRAAZ => a.emit(0xdac1_33e0 | t),         // autiza t
                            BRABZ | BLRABZ => a.emit(0xdac1_37e0 | t),         // autizb t
                            RETAA => a.emit(0xdac1_1000 | SP << 5 | t),        // autia t, sp
                            RETAB => a.emit(0xdac1_1400 | SP << 5 | t),        // autib t, sp
                            _ => {}
                        }
                        if matches!(i.opcode, BLR | BLRAA | BLRAAZ | BLRAB | BLRABZ) {
                            a.mov64(LR, next);
                        }
                        store_writes(&mut a, &mut off, &insn.writes);
                        to_dispatch_with_t(&mut a);
                    }
                    _ => return refuse(format!("`{i}` at {from:#x}")),
                }
            }
            Flow::Syscall | Flow::Other => {
                let text = decoded.map_or_else(|| format!("{w:#010x}"), |i| i.to_string());
                return refuse(format!("`{text}` at {from:#x}"));
            }
        }
    }
    debug_assert_eq!(off as usize, 8 + values);

    // The record's room ran out: switch halves, come back to the entry.
    a.bind(full);
    a.branch(0x1000_0000 | X16, entry, Kind::Adr); // adr x16, entry
    a.b_abs(at, stubs.switch);
    // The thunks: name the target, go to the dispatcher.
    let mut thunks = Vec::new();
    for &(_, thunk, tlit, _) in &exits {
        a.bind(thunk);
        a.ldr_lit(X16, tlit);
        a.b_abs(at, stubs.dispatch);
        thunks.push(thunk);
    }
    // The literals, 8-byte aligned: the block's address, each exit's slot
    // (its thunk for now) and target.
    a.align8();
    a.bind(addr_lit);
    a.quad(block.address);
    let mut slots = Vec::new();
    for &(slot, thunk, tlit, target) in &exits {
        a.bind(slot);
        let slot_at = a.len();
        a.quad(0);
        a.bind(tlit);
        a.quad(target);
        slots.push((slot_at, thunk, target));
    }
    let thunk_at: Vec<Option<usize>> = slots.iter().map(|&(_, th, _)| a.labels_at(th)).collect();
    let code = a.finish().map_err(|e| Refused(format!("cannot assemble the translation: {e}")))?;
    let mut code = code;
    let mut out_exits = Vec::new();
    let mut initial = Vec::new();
    for (&(slot_at, _, target), th) in slots.iter().zip(thunk_at) {
        let slot = at + 4 * slot_at as u64;
        let thunk = at + 4 * th.unwrap_or(0) as u64;
        code[4 * slot_at..4 * slot_at + 8].copy_from_slice(&thunk.to_le_bytes());
        out_exits.push((slot, target));
        initial.push((slot, thunk));
    }
    Ok((Translated { code, exits: out_exits }, initial))
}

/// Copy one original instruction (not a branch) to run in the cache: its
/// PC-relative operand, if any, made absolute (`patch::relocate_word`;
/// a vector literal load through `t`).
fn copy(a: &mut Asm, at: u64, w: u32, from: u64, t: u32) -> Result<(), Refused> {
    let here = at + 4 * a.len() as u64;
    if let Some(i) = super::patch::decode(w) {
        let literal = matches!(i.opcode, Opcode::LDR | Opcode::LDRSW | Opcode::PRFM);
        if literal && w >> 26 & 1 == 1 {
            if let Some(d) = super::patch::pc_offset(&i) {
                let through = match w >> 30 {
                    0 => 0xbd40_0000, // ldr st, [t]
                    1 => 0xfd40_0000, // ldr dt, [t]
                    2 => 0x3dc0_0000, // ldr qt, [t]
                    _ => return refuse(format!("`{i}` at {from:#x}")),
                };
                a.mov64(t, from.wrapping_add(d as u64));
                a.emit(through | t << 5 | (w & 31));
                return Ok(());
            }
        }
    }
    match super::patch::relocate_word(w, from, here, false) {
        Ok(bytes) => {
            for c in bytes.chunks_exact(4) {
                a.emit(u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
            }
            Ok(())
        }
        // Exclusive loads and stores run here as they are (the module's
        // documentation says why that holds).
        Err(super::patch::Refusal::Exclusive { .. }) => {
            a.emit(w);
            Ok(())
        }
        Err(e) => refuse(e.to_string()),
    }
}

/// A `svc` in the cache. `clone` and `clone3` (x8) share the arena with
/// the child, which must not touch it: R and T get their program values
/// before the call (the child has every register as the program's), the
/// child leaves for `next` at once, and the parent finds its record again
/// where it left its address (`ctl::SVC_RECORD`).
#[allow(clippy::too_many_arguments)]
fn svc(a: &mut Asm, at: u64, w: u32, next: u64, r: u32, t: u32, rec: u32, ar: &ArenaAddrs, stubs: &Stubs) {
    let (forking, after, next_lit) = (a.label(), a.label(), a.label());
    for nr in [SYS_CLONE, SYS_CLONE3] {
        a.emit(0x5100_0000 | nr << 10 | X8 << 5 | t); // sub wt, w8, #nr (the kernel reads w8)
        a.branch(0x3400_0000 | t, forking, Kind::Imm19); // cbz wt, forking
    }
    a.emit(w);
    a.b(after);
    a.bind(forking);
    // The record's address where the parent finds it again (the child
    // never writes the arena; the cursor may move under a session's end).
    a.adrp(at, t, ar.data);
    a.str64(r, t, ctl::SVC_RECORD as u32);
    a.ldr64(t, r, rec + 8);
    a.ldr64(r, r, rec);
    a.emit(w);
    let parent = a.label();
    a.branch(0xb500_0000 | X0, parent, Kind::Imm19); // cbnz x0, parent
                                                     // The child: to the real next instruction.
    a.emit(PUSH_IP);
    a.ldr_lit(X16, next_lit);
    a.b_abs(at, stubs.leave_plain);
    a.align8();
    a.bind(next_lit);
    a.quad(next);
    a.bind(parent);
    // R back (t's spill is still past the record).
    a.emit(PUSH_IP);
    a.adrp(at, X16, ar.data);
    a.ldr64(r, X16, ctl::SVC_RECORD as u32);
    a.emit(POP_IP);
    a.bind(after);
}

/// The `itrace:start` registers: `regs` at the entry, the vector registers
/// as the prologue stored them (`START_VEC`: v0–v31).
#[cfg(target_arch = "aarch64")]
pub fn start_regs(regs: &super::Regs, vectors: &[u8]) -> telco_itrc::a64::A64Regs {
    super::itrc_regs_with(regs, vectors)
}

/// Bytes of vector registers the prologue stores.
pub const START_VEC_BYTES: usize = 32 * 16;

/// The tracer wrote `len` bytes of code at `p` (its own mapping of the
/// arena): clean them to the point of unification and invalidate the
/// instruction cache for them, on every core (`dc cvau`, `ic ivau`,
/// `dsb ish`); the thread's `isb` after the answer does the rest.
#[cfg(target_arch = "aarch64")]
pub fn code_written(p: *const u8, len: usize) {
    let ctr: u64;
    // SAFETY: reading CTR_EL0 (EL0-readable on Linux, or emulated).
    unsafe { core::arch::asm!("mrs {}, ctr_el0", out(reg) ctr) };
    let dline = 4usize << ((ctr >> 16) & 0xf);
    let iline = 4usize << (ctr & 0xf);
    let start = p as usize;
    let end = start + len;
    let mut x = start & !(dline - 1);
    while x < end {
        // SAFETY: cache maintenance by address on our own mapping.
        unsafe { core::arch::asm!("dc cvau, {}", in(reg) x) };
        x += dline;
    }
    // SAFETY: barrier.
    unsafe { core::arch::asm!("dsb ish") };
    let mut x = start & !(iline - 1);
    while x < end {
        // SAFETY: as above.
        unsafe { core::arch::asm!("ic ivau, {}", in(reg) x) };
        x += iline;
    }
    // SAFETY: barrier.
    unsafe { core::arch::asm!("dsb ish") };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arena() -> ArenaAddrs {
        let code = 0x7f00_0000_0000;
        let data = code + (32 << 20);
        ArenaAddrs {
            code,
            code_size: 32 << 20,
            data,
            data_size: 8 << 20,
            table: data + (8 << 20) - TABLE_ENTRIES * TABLE_ENTRY,
            buf: data + (8 << 20),
            buf_size: 16 << 20,
            bell: 0x7e00_0000_1000,
            avx: false,
        }
    }

    fn words(code: &[u8]) -> Vec<u32> {
        code.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
    }

    fn le(w: &[u32]) -> Vec<u8> {
        w.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    struct NoSlots;
    impl SlotAlloc for NoSlots {
        fn slot(&mut self, _: u64) -> Option<u64> {
            None
        }
    }

    #[test]
    fn stubs_assemble_with_every_entry_inside() {
        let ar = arena();
        let (code, s) = stubs(&ar).unwrap();
        let end = ar.code + code.len() as u64;
        for e in [s.dispatch, s.request, s.leave, s.leave_plain, s.switch, s.prologue] {
            assert!((ar.code..end).contains(&e) && e % 4 == 0, "{e:#x}");
        }
        // Every word decodes (no field spilled into another).
        for (k, w) in words(&code).iter().enumerate() {
            assert!(super::super::patch::decode(*w).is_some(), "word {k}: {w:#010x}");
        }
    }

    /// A loop body: `add x0, x0, x1; subs x2, x2, #1; b.ne back`: the
    /// record holds lr, x0, x2, nzcv; the copy keeps the flags' test; two
    /// exits (taken, fallen through), each with its thunk.
    #[test]
    fn a_conditional_block_records_its_writes_and_leaves_two_ways() {
        let ar = arena();
        let (_, s) = stubs(&ar).unwrap();
        let code = le(&[0x8b01_0000, 0xf100_0442, 0x54ff_ffc1]);
        let block = itrc::decode_block(0x40_1000, &code);
        assert_eq!(block.insns.len(), 3);
        let at = ar.code + 0x1000;
        let (t, initial) = translate(&block, at, &ar, &s, &mut NoSlots).unwrap();
        assert_eq!(record_values(&block), 8 * 4);
        let targets: Vec<u64> = t.exits.iter().map(|e| e.1).collect();
        assert_eq!(targets, vec![0x40_1000 + 12, 0x40_1000 + 8 - 8]);
        let w = words(&t.code);
        // Each slot holds its thunk, which loads the target and goes to
        // the dispatcher.
        for &(slot, thunk) in &initial {
            assert_eq!(slot % 8, 0);
            let k = ((slot - at) / 4) as usize;
            assert_eq!(u64::from(w[k]) | u64::from(w[k + 1]) << 32, thunk);
            let tk = ((thunk - at) / 4) as usize;
            assert_eq!(w[tk] & 0xff00_001f, 0x5800_0010, "ldr x16, literal");
        }
        // x0, x1, x2 are named: R and T are x9 and x10; the flags are
        // stored through T (mrs x10, nzcv).
        assert!(w.contains(&mrs_nzcv(10)));
        assert!(w.contains(&0xf900_0000u32.wrapping_add((24 / 8) << 10 | 9 << 5 | 2)), "str x2, [x9, #24]");
        // The program's x16/x17 are taken back once, after the prologue.
        assert_eq!(w.iter().filter(|&&x| x == POP_IP).count(), 1);
    }

    #[test]
    fn calls_set_the_real_return_address_and_returns_authenticate() {
        let ar = arena();
        let (_, s) = stubs(&ar).unwrap();
        // bl .+0x100
        let block = itrc::decode_block(0x40_2000, &le(&[0x9400_0040]));
        let (t, _) = translate(&block, ar.code + 0x2000, &ar, &s, &mut NoSlots).unwrap();
        assert_eq!(t.exits[0].1, 0x40_2100);
        let w = words(&t.code);
        assert!(w.contains(&(0xd280_0000 | 0x2004 << 5 | LR)), "movz x30, #0x2004");
        // retaa: x30 authenticated against sp into T, then dispatched.
        let block = itrc::decode_block(0x40_3000, &le(&[0xd65f_0bff]));
        let (t, _) = translate(&block, ar.code + 0x3000, &ar, &s, &mut NoSlots).unwrap();
        let w = words(&t.code);
        assert!(t.exits.is_empty());
        assert!(w.contains(&(0xdac1_1000 | SP << 5 | 10)), "autia x10, sp");
    }

    #[test]
    fn blocks_are_cut_where_no_two_registers_are_left() {
        // ldp xN, xN+1, [sp] for N = 0, 2, … 28: every register named.
        let ws: Vec<u32> = (0..15).map(|k| 0xa940_0000 | (2 * k + 1) << 10 | SP << 5 | 2 * k).collect();
        let mut block = itrc::decode_block(0x40_4000, &le(&ws));
        fit(&mut block);
        assert!(block.insns.len() < 15 && !block.insns.is_empty());
        assert_eq!(block.code.len(), 4 * block.insns.len());
        assert!(free_pair(named(&block, block.insns.len())).is_some());
        let ar = arena();
        let (_, s) = stubs(&ar).unwrap();
        assert!(translate(&block, ar.code, &ar, &s, &mut NoSlots).is_ok());
    }

    #[test]
    fn svc_blocks_keep_x0_to_x8_and_send_forks_children_away() {
        let ar = arena();
        let (_, s) = stubs(&ar).unwrap();
        // svc #0; ret
        let block = itrc::decode_block(0x40_5000, &le(&[SVC0, 0xd65f_03c0]));
        let (t, _) = translate(&block, ar.code + 0x5000, &ar, &s, &mut NoSlots).unwrap();
        let w = words(&t.code);
        // R and T are x9 and x10 (x0–x8 excluded); the clone test is on x8.
        assert!(w.contains(&(0x5100_0000 | SYS_CLONE << 10 | X8 << 5 | 10)), "sub w10, w8, #220");
        assert_eq!(w.iter().filter(|&&x| x == SVC0).count(), 2);
    }
}
