//! Trampolines (aarch64): where a patched `B` lands, how the handlers are
//! called, and the way back. The same protocol as x86_64's
//! (`x86_64/trampoline.rs` explains it), in its two kinds:
//!
//! * *full*: every register saved, the whole context filled, the runtime
//!   library called for the shadow stack (`rt_ret_push`, `rt_ret_pop`);
//!   for handlers that read `$argN`, `register()`, `uaddr()`;
//! * *lean* (`Entry::lean`, the return trampolines' `lean`): only the
//!   caller-saved registers that the trampoline and the code it calls
//!   change (`clobber` reads them off the blob) are saved, and the shadow
//!   frame is pushed and popped inline (`push_frame`, `pop_frame`); the
//!   runtime library is called only off that common path.
//!
//! Both find the thread's slot inline at entry (`find_slot`), `rt_enter`
//! only off the common path.
//!
//! Lean trampolines also time calls themselves, as x86_64's do: a
//! `--chrome` span (`SpanInline`) or a duration into a statistic
//! (`StatInline`) is recorded by the return trampoline from the clock
//! (`cntvct_el0`) its entry trampoline saved, and a function with nothing
//! else to run gets `ClockOnly` trampolines (here the lean ones with only
//! that work, saving what their calls off the common path change).
//! `.itrace` has its gate (`itrace_gate`), for the single-stepper.
//!
//! # Entry (full; a lean one stores fewer registers and has the slot and
//! the frame inline)
//!
//! ```text
//! sub  sp, sp, #FRAME              ; SavedRegs, the context, the return slot
//! str  x0..x30 -> SavedRegs        ; sp (as at entry), pc, nzcv too
//! str  x30 -> [sp, #FRAME-8]       ; the return slot (entry sp - 8)
//! ...  context: regs, addr, zeros
//! ...  the slot (tpidr_el0), busy  ; find_slot; else rt_enter(region), 0: skip
//! bl   handler(region, ctx) ...    ; each entry probe
//! bl   rt_ret_push(region, ctx, entry sp - 8, return trampoline, probe)
//! str  ra_saved -> frame.saved      ; if pushed, and x30 is saved elsewhere
//! bl   entry handler (@entry)      ; if a frame was pushed
//! str  wzr -> slot.busy
//! ldr  x30 <- [sp, #FRAME-8]       ; the return trampoline, if pushed
//! msr  nzcv; ldp x0..x29           ; every register back (guru writes too)
//! add  sp, sp, #FRAME
//! xpaclri; paciasp                 ; if the function's landing pad signs x30
//!                                  ; (with return probes): signed as it did
//! (the relocated instruction, then B back: appended by the caller)
//! ```
//!
//! A return probe's shadow frame names the word at entry sp - 8 as the
//! return address's slot: it holds x30 while the trampoline runs, and the
//! stack pointer after the function's `ret` is the entry's, so
//! `rt_ret_pop`'s test (`frame.sp + 8 == sp`) and its longjmp detection
//! (frames below the stack pointer are stale) hold as on x86_64. The
//! function itself then saves x30 (the trampoline's address) where its
//! prologue does, which for a large frame is its bottom: each frame pushed
//! here records that place (`Entry::ra_saved`, from the CFI, into
//! `ShadowFrame::saved`), where `rt_unwind`, `rt_caught` and the detach
//! put the real return address back and forth.
//!
//! # Return
//!
//! The function's `ret` lands here with sp as at its entry. The trampoline
//! saves every register (lean: those it and its calls change; `$return`
//! is x0), pops the thread's top shadow frame for the original return
//! address (inline, `pop_frame`; `rt_ret_pop` off the common path; its
//! pointer-authentication code stripped with `xpaclri`, a no-op on a core
//! without it) and the probe, calls the handler, restores the registers with x30 = the original return address,
//! and `ret`s: no other register changes (x30 holds the return address
//! after any return).
//!
//! Constants are built with `movz`/`movk` in x16 (IP0), which a function
//! entry leaves free, and which every trampoline restores anyway.

use telco_abi::arch::aarch64 as regs;
use telco_abi::region::{Ctx, CTX_SIZE};

use super::asm::*;
use super::clobber::{RegMask, CALLER_SAVED};
use super::patch::{PACIASP, PACIBSP};

pub use super::asm::AsmError;

pub use crate::arch::contract::{GoEntry, GoExit, Returns, Shadow, SpanInline, StatInline, Timed};
/// What one function's trampolines do (`arch::contract`), with this
/// architecture's register mask.
pub type Entry = crate::arch::contract::Entry<RegMask>;
pub type ClockOnly = crate::arch::contract::ClockOnly<RegMask>;

/// `xpaclri`: a hint (a no-op without pointer authentication).
const XPACLRI: u32 = 0xd503_20ff;

/// The registers first, then the context, then a 16-byte top whose upper
/// word is the return slot; a multiple of 16.
fn frame_size(ctx_size: u32) -> u32 {
    let regs = core::mem::size_of::<regs::SavedRegs>() as u32;
    (regs + ctx_size.max(CTX_SIZE as u32)).div_ceil(16) * 16 + 16
}

const CTX_AT: u32 = core::mem::size_of::<regs::SavedRegs>() as u32;

fn ctx(f: usize) -> u32 {
    CTX_AT + f as u32
}

/// Save x0–x30 into the SavedRegs block at [sp], then sp (`frame` above),
/// the flags and pc = `pc`, and point the context at them.
fn save_all(a: &mut Asm, frame: u32, pc: Option<u64>) {
    store_gprs(a);
    a.add_imm(X16, SP, frame, false);
    a.str64(X16, SP, 8 * regs::SP as u32);
    a.emit(0xd53b_4200 | X16); // mrs x16, nzcv
    a.str64(X16, SP, 8 * regs::PSTATE as u32);
    // The context: regs, flags, tid, tok_pos, entry (`slot` is set where
    // the slot is found, before any handler runs).
    a.add_imm(X16, SP, 0, false);
    a.str64(X16, SP, ctx(core::mem::offset_of!(Ctx, regs)));
    a.str32(ZR, SP, ctx(core::mem::offset_of!(Ctx, flags)));
    a.str32(ZR, SP, ctx(core::mem::offset_of!(Ctx, go_goid)));
    a.str64(ZR, SP, ctx(core::mem::offset_of!(Ctx, tid)));
    a.str64(ZR, SP, ctx(core::mem::offset_of!(Ctx, tok_pos)));
    a.str64(ZR, SP, ctx(core::mem::offset_of!(Ctx, entry)));
    // The pc and `uaddr()`: the probed address (a return trampoline
    // stores the return address there once `rt_ret_pop` gave it).
    if let Some(pc) = pc {
        a.mov64(X16, pc);
        a.str64(X16, SP, 8 * regs::PC as u32);
        a.str64(X16, SP, ctx(core::mem::offset_of!(Ctx, addr)));
    }
}

/// Every register back from the block (the flags through x16 first).
fn restore_all(a: &mut Asm) {
    restore_all_but_lr(a);
    a.ldr64(LR, SP, 8 * LR);
}

/// [`restore_all`] but x30, which the caller loads from elsewhere.
fn restore_all_but_lr(a: &mut Asm) {
    a.ldr64(X16, SP, 8 * regs::PSTATE as u32);
    a.emit(0xd51b_4200 | X16); // msr nzcv, x16
    for r in (0..30).step_by(2) {
        a.ldp64(r, r + 1, SP, 8 * r);
    }
}

/// x0–x30 into the SavedRegs block at [sp], in pairs.
fn store_gprs(a: &mut Asm) {
    for r in (0..30).step_by(2) {
        a.stp64(r, r + 1, SP, 8 * r);
    }
    a.str64(LR, SP, 8 * LR);
}

/// Store the registers of `mask` in their words of the SavedRegs block at
/// [sp] (adjacent ones in pairs).
fn store_mask(a: &mut Asm, mask: RegMask) {
    each_of_mask(mask, |r, pair| if pair { a.stp64(r, r + 1, SP, 8 * r) } else { a.str64(r, SP, 8 * r) });
}

fn load_mask(a: &mut Asm, mask: RegMask) {
    each_of_mask(mask, |r, pair| if pair { a.ldp64(r, r + 1, SP, 8 * r) } else { a.ldr64(r, SP, 8 * r) });
}

/// The registers of `mask` (x0–x30) in order: (r, whether r + 1 goes
/// with it).
fn each_of_mask(mask: RegMask, mut f: impl FnMut(u32, bool)) {
    let mut r = 0;
    while r < 31 {
        if mask & 1 << r != 0 {
            let pair = r < 30 && mask & 1 << (r + 1) != 0;
            f(r, pair);
            r += if pair { 2 } else { 1 };
        } else {
            r += 1;
        }
    }
}

/// `handler(region, ctx)`.
fn call_handler(a: &mut Asm, region: u64, handler: u64) {
    a.mov64(X0, region);
    a.add_imm(X1, SP, CTX_AT, false);
    a.call(handler);
}

/// Clear the slot's busy flag (the slot in the context).
fn leave_slot(a: &mut Asm) {
    use telco_abi::region::ThreadSlot;
    a.ldr64(X16, SP, ctx(core::mem::offset_of!(Ctx, slot)));
    a.str32(ZR, X16, core::mem::offset_of!(ThreadSlot, busy) as u32);
}

/// The registers a lean entry trampoline uses itself: x0 and x1 (the
/// handlers' arguments, `find_slot`), x16 and x17 (constants, the slot),
/// x30 (every call); with return probes also x2–x4 (`push_frame`).
fn lean_entry_used(returns: bool) -> RegMask {
    let own = 1 << X0 | 1 << X1 | 1 << X16 | 1 << X17 | 1 << LR;
    if returns {
        own | 1 << X2 | 1 << X3 | 1 << X4
    } else {
        own
    }
}

/// Assemble the part before the relocated instruction; the caller appends
/// the relocation and the branch back.
///
/// A lean trampoline (`Entry::lean`: the handlers read only `probe`,
/// `slot` and `entry` of the context, and what they change is known)
/// saves the caller-saved registers among those and its own, finds the
/// thread's slot inline (`find_slot`), and pushes a return probe's shadow
/// frame inline (`push_frame`); the runtime library (`rt_enter`,
/// `rt_ret_push`) is called only off that common path, with what it
/// changes beyond the saved registers saved around it. At a site inside a
/// function (`Entry::inside`) the flags are saved and restored too.
pub fn entry_prefix(e: &Entry) -> Result<Vec<u8>, AsmError> {
    match &e.go {
        Some(g) => go_entry_prefix(e, g),
        None => entry_with(e, 0),
    }
}

/// A Go function's entry trampoline: x86_64's `go_entry_prefix`, in
/// aarch64's registers (`g` in x28; x16, x17, x19 and x27 are Go's
/// scratch registers, dead at a function's entry):
///
/// 1. the function's own stack-bound check, its branches to `morestack`
///    going to its relocated copy after this prefix, which takes them;
/// 2. `g` the goroutine its thread runs (not `m.g0`, not `m.gsignal`),
///    its stack pointer within `g.stack`, else skipped and counted;
/// 3. the slot keyed by `m` (x27), checked against `m.procid`, else
///    `rt_enter_go` on `g0`'s stack with x0-x15 and x30 kept there;
/// 4. the slot's own stack, every register saved (`SavedRegs::sp` the
///    goroutine's), the handlers; everything back, and on after the check.
///
/// Unlike x86_64's, Go's signal handler on aarch64 takes `g` from x28
/// itself (a program without cgo keeps no copy of it), and compiled code
/// may use x28 for anything in between: every signal is blocked while our
/// C and compiled code runs (`rt_enter_go`, the handlers), two system
/// calls a hit; a signal that comes meanwhile is delivered after, with x28
/// `g` again.
///
/// With return probes, each pushes a frame for the call in its
/// goroutine's record (`rt_go_push`) after the entry handlers, filled by
/// its `@entry` handler; `go_return_trampoline` pops it.
fn go_entry_prefix(e: &Entry, g: &GoEntry) -> Result<Vec<u8>, AsmError> {
    use core::mem::offset_of;
    let b_cond = |a: &mut Asm, cond: u32, l: usize| a.branch(0x5400_0000 | cond, l, Kind::Imm19);
    let mut a = Asm::default();
    let (reloc, back) = (a.label(), a.label());
    let go = GoLabels::new(&mut a);
    // 1. The check first.
    for w in g.check.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])) {
        if w & 0xff00_0010 == 0x5400_0000 {
            b_cond(&mut a, w & 0xf, reloc);
        } else {
            a.emit(w);
        }
    }
    // 2.-4. The goroutine's slot, its stack, the frame.
    go_find_slot(&mut a, &g.layout, &e.shadow, &go);
    let frame = frame_size(e.ctx_size);
    go_frame(&mut a, frame, frame - 16, e.addr, &g.layout, &go);
    for &(handler, probe) in &e.handlers {
        a.mov32(X16, probe);
        a.str32(X16, SP, ctx(offset_of!(Ctx, probe)));
        call_handler(&mut a, e.region, handler);
    }
    // Return probes: a frame each (in increasing order, as rt_go_push
    // expects), its @entry saves by the probe's entry handler.
    let mut returns = e.returns.clone();
    returns.sort_by_key(|&(probe, _)| probe);
    for (probe, entry) in returns {
        a.mov64(X0, e.region);
        a.add_imm(X1, SP, CTX_AT, false);
        a.mov32(X2, probe);
        a.call(g.push);
        if let Some(h) = entry {
            let next = a.label();
            a.branch(0xb400_0000 | X0, next, Kind::Imm19); // cbz x0, next
            a.str64(X0, SP, ctx(offset_of!(Ctx, entry)));
            a.mov32(X16, probe);
            a.str32(X16, SP, ctx(offset_of!(Ctx, probe)));
            call_handler(&mut a, e.region, h);
            a.bind(next);
        }
    }
    // 5. Everything back, and on after the check.
    go_unframe(&mut a, frame - 16);
    let jump_back = |a: &mut Asm| {
        a.branch(0x5800_0000 | X16, back, Kind::Imm19); // ldr x16, back
        a.emit(0xd61f_0000 | X16 << 5); // br x16
    };
    jump_back(&mut a);
    go_slow_path(&mut a, e.region, g.enter, &g.layout, &go);
    jump_back(&mut a);
    go_skip(&mut a, e.region, &go);
    jump_back(&mut a);
    a.align8();
    a.bind(back);
    a.quad(g.back);
    // The relocated check (and the branch back after it) follows.
    a.bind(reloc);
    a.finish()
}

/// A return of a Go function with return probes (`GoExit`): its `ret`
/// becomes a branch here, where the stack pointer is where it was at the
/// entry (Go's epilogue popped the frame) and x30 holds the return
/// address. Steps 2-5 of `go_entry_prefix` (x16, x17, x19 and x27 are
/// dead at a return too), per return probe in decreasing order
/// `rt_go_pop` (the call's frame, its saves copied onto this stack) and
/// the handler when it found one (`$return` is x0, the first result);
/// every register back, and `ret`.
pub fn go_return_trampoline(x: &GoExit) -> Result<Vec<u8>, AsmError> {
    use core::mem::offset_of;
    let mut a = Asm::default();
    let go = GoLabels::new(&mut a);
    go_find_slot(&mut a, &x.layout, &x.shadow, &go);
    // The frame, and room above it for the @entry saves of one call.
    let saves = x.shadow.frame_size.saturating_sub(telco_abi::region::SHADOW_FRAME_HEADER as u32);
    let saves_at = frame_size(x.ctx_size);
    let frame = saves_at + saves.div_ceil(16) * 16;
    go_frame(&mut a, frame, saves_at - 16, x.addr, &x.layout, &go);
    // `uaddr()`: where the call returns (the pc, as SystemTap's).
    a.str64(LR, SP, 8 * regs::PC as u32);
    a.str64(LR, SP, ctx(offset_of!(Ctx, addr)));
    let mut returns = x.returns.clone();
    returns.sort_by_key(|&(probe, _)| core::cmp::Reverse(probe));
    for (probe, handler) in returns {
        let next = a.label();
        a.mov64(X0, x.region);
        a.add_imm(X1, SP, CTX_AT, false);
        a.mov32(X2, probe);
        a.add_imm(X3, SP, saves_at, false);
        a.call(x.pop);
        a.branch(0xb400_0000 | X0, next, Kind::Imm19); // cbz x0, next
        call_handler(&mut a, x.region, handler);
        a.bind(next);
    }
    go_unframe(&mut a, saves_at - 16);
    a.emit(RET);
    go_slow_path(&mut a, x.region, x.enter, &x.layout, &go);
    a.emit(RET);
    go_skip(&mut a, x.region, &go);
    a.emit(RET);
    a.finish()
}

/// `ret` (to x30).
const RET: u32 = 0xd65f_03c0;
const X19: u32 = 19;
const X27: u32 = 27;
const X28: u32 = 28;

/// The labels the Go trampolines' common steps share.
struct GoLabels {
    /// The hit is skipped (counted), or the slot released then skipped.
    skip: usize,
    release: usize,
    /// The slot (x17) is this thread's and busy: onto its stack.
    have: usize,
    /// `rt_enter_go` finds one.
    slow: usize,
}

impl GoLabels {
    fn new(a: &mut Asm) -> GoLabels {
        GoLabels { skip: a.label(), release: a.label(), have: a.label(), slow: a.label() }
    }
}

fn cmp64(a: &mut Asm, rn: u32, rm: u32) {
    a.emit(0xeb00_001f | rm << 16 | rn << 5);
}

fn b_if(a: &mut Asm, cond: u32, l: usize) {
    a.branch(0x5400_0000 | cond, l, Kind::Imm19);
}

const EQ: u32 = 0;
const NE: u32 = 1;
const HS: u32 = 2;
const LO: u32 = 3;
const HI: u32 = 8;

/// Steps 2 and 3 of a Go trampoline (`go_entry_prefix`): `g` (x28) the
/// goroutine its thread runs, on its own stack, else skip; the slot at
/// its first place by `m` (x27), this thread's and not busy (x17, marked
/// busy), else the slow path. Uses x16, x17, x19, x27 and the flags.
fn go_find_slot(a: &mut Asm, l: &telco_abi::artifact::GoLayout, shadow: &Shadow, go: &GoLabels) {
    use core::mem::offset_of;
    use telco_abi::region::ThreadSlot;
    a.ldr64(X27, X28, u32::from(l.g_m));
    a.branch(0xb400_0000 | X27, go.skip, Kind::Imm19); // cbz x27, skip
    a.ldr64(X16, X27, u32::from(l.m_g0));
    cmp64(a, X28, X16);
    b_if(a, EQ, go.skip);
    a.ldr64(X16, X27, u32::from(l.m_gsignal));
    cmp64(a, X28, X16);
    b_if(a, EQ, go.skip);
    a.add_imm(X16, SP, 0, false);
    a.ldr64(X17, X28, 0);
    cmp64(a, X16, X17);
    b_if(a, LO, go.skip);
    a.ldr64(X17, X28, 8);
    cmp64(a, X16, X17);
    b_if(a, HS, go.skip);
    slot_home(a, shadow, X27, X16);
    a.ldr64(X16, X17, offset_of!(ThreadSlot, key) as u32);
    cmp64(a, X16, X27);
    b_if(a, NE, go.slow);
    const _: () = assert!(offset_of!(ThreadSlot, busy) == offset_of!(ThreadSlot, tid) + 4);
    a.ldr32(X16, X27, u32::from(l.m_procid));
    a.ldr64(X19, X17, offset_of!(ThreadSlot, tid) as u32);
    cmp64(a, X19, X16);
    b_if(a, NE, go.slow);
    a.mov32(X16, 1);
    a.str32(X16, X17, offset_of!(ThreadSlot, busy) as u32);
}

/// Step 4 of a Go trampoline: onto the slot's (x17) own stack; a frame of
/// `frame` bytes, every register saved (`SavedRegs::sp` the goroutine's,
/// the pc `addr`), every signal blocked (the masks at `masks`, 16 bytes),
/// the context naming the goid's offset and the slot.
fn go_frame(a: &mut Asm, frame: u32, masks: u32, addr: u64, l: &telco_abi::artifact::GoLayout, go: &GoLabels) {
    use core::mem::offset_of;
    use telco_abi::region::ThreadSlot;
    a.bind(go.have);
    a.ldr64(X16, X17, offset_of!(ThreadSlot, go_stack) as u32);
    a.branch(0xb400_0000 | X16, go.release, Kind::Imm19); // cbz x16, release
    a.add_imm(X19, SP, 0, false);
    a.add_imm(SP, X16, 0, false);
    a.add_imm(SP, SP, frame, true);
    save_all(a, frame, Some(addr));
    a.str64(X19, SP, 8 * regs::SP as u32);
    block_signals(a, masks);
    a.mov32(X16, u32::from(l.g_goid));
    a.str32(X16, SP, ctx(offset_of!(Ctx, go_goid)));
    a.str64(X17, SP, ctx(offset_of!(Ctx, slot)));
}

/// Step 5 of a Go trampoline: the slot not busy, the signals of before,
/// every register back, the goroutine's stack.
fn go_unframe(a: &mut Asm, masks: u32) {
    leave_slot(a);
    unblock_signals(a, masks);
    restore_all(a);
    a.ldr64(X16, SP, 8 * regs::SP as u32);
    a.add_imm(SP, X16, 0, false);
}

/// The slow path of a Go trampoline's step 3: rt_enter_go(region, m,
/// m.procid) on g0's stack below `sched.sp`, GO_STACK_ROOM free there;
/// x0-x15 (Go's arguments and results) and x30 kept, every signal
/// blocked; to `have` with the slot in x17, else the caller's way on
/// follows.
fn go_slow_path(a: &mut Asm, region: u64, enter: u64, l: &telco_abi::artifact::GoLayout, go: &GoLabels) {
    use telco_abi::region::GO_STACK_ROOM;
    a.bind(go.slow);
    a.ldr64(X16, X28, u32::from(l.g_m));
    a.ldr64(X16, X16, u32::from(l.m_g0));
    a.branch(0xb400_0000 | X16, go.skip, Kind::Imm19); // cbz x16, skip
    a.ldr64(X17, X16, u32::from(l.g_sched_sp));
    a.ldr64(X19, X16, 8);
    cmp64(a, X17, X19);
    b_if(a, HI, go.skip);
    a.emit(0xf100_0000 | (GO_STACK_ROOM as u32) << 10 | X17 << 5 | X17); // subs x17, x17, #ROOM
    b_if(a, LO, go.skip);
    a.ldr64(X19, X16, 0);
    cmp64(a, X17, X19);
    b_if(a, LO, go.skip);
    a.add_imm(X17, X17, GO_STACK_ROOM as u32, false);
    a.emit(0x927c_ee31); // and x17, x17, #~15
    a.add_imm(X19, SP, 0, false);
    a.add_imm(SP, X17, 0, false);
    a.add_imm(SP, SP, 160, true);
    for r in (0..16).step_by(2) {
        a.stp64(r, r + 1, SP, 8 * r);
    }
    a.stp64(LR, X19, SP, 128);
    block_signals(a, 144);
    a.mov64(X0, region);
    a.ldr64(X1, X28, u32::from(l.g_m));
    a.ldr32(X2, X1, u32::from(l.m_procid));
    a.call(enter);
    a.add_imm(X17, X0, 0, false);
    unblock_signals(a, 144);
    for r in (0..16).step_by(2) {
        a.ldp64(r, r + 1, SP, 8 * r);
    }
    a.ldp64(LR, X19, SP, 128);
    a.add_imm(SP, X19, 0, false);
    a.branch(0xb500_0000 | X17, go.have, Kind::Imm19); // cbnz x17, have
}

/// A Go trampoline's skipped hit: the slot released when it had one
/// without a stack of its own (cannot happen: the tracer gives each one
/// when a probe is on a Go function), counted (the session summary says
/// why); the caller's way on follows.
fn go_skip(a: &mut Asm, region: u64, go: &GoLabels) {
    use core::mem::offset_of;
    use telco_abi::region::{Header, ThreadSlot};
    a.bind(go.release);
    a.str32(ZR, X17, offset_of!(ThreadSlot, busy) as u32);
    a.bind(go.skip);
    for field in [offset_of!(Header, skipped), offset_of!(Header, skipped_go)] {
        a.mov64(X16, region + field as u64);
        let again = a.label();
        a.bind(again);
        a.emit(0xc85f_7c00 | X16 << 5 | X17); // ldxr x17, [x16]
        a.add_imm(X17, X17, 1, false);
        a.emit(0xc800_7c00 | X19 << 16 | X16 << 5 | X17); // stxr w19, x17, [x16]
        a.branch(0x3500_0000 | X19, again, Kind::Imm19); // cbnz w19, again
    }
}

/// `entry_prefix`, with the registers of `around` (lean) saved only
/// around the call of `rt_ret_push`, off the common path.
fn entry_with(e: &Entry, around: RegMask) -> Result<Vec<u8>, AsmError> {
    let frame = frame_size(e.ctx_size);
    let ret_slot = frame - 8;
    let mut a = Asm::default();
    a.add_imm(SP, SP, frame, true);
    // What is saved: every register and the whole context, or (lean) the
    // caller-saved registers the trampoline and its calls change.
    let saved = e.lean.map(|m| (m | lean_entry_used(!e.returns.is_empty())) & CALLER_SAVED);
    match saved {
        None => save_all(&mut a, frame, Some(e.addr)),
        Some(saved) => {
            store_mask(&mut a, saved);
            if e.inside {
                a.emit(0xd53b_4200 | X16); // mrs x16, nzcv
                a.str64(X16, SP, 8 * regs::PSTATE as u32);
            }
            if !e.returns.is_empty() {
                a.str64(ZR, SP, ctx(core::mem::offset_of!(Ctx, entry)));
            }
        }
    }
    if saved.is_none() || !e.returns.is_empty() {
        a.str64(LR, SP, ret_slot);
    }
    let done = a.label();
    let have = a.label();
    let slow = a.label();
    // A hook called on every hit (full path); with nothing else to run, no
    // slot is looked for (a thread without one would count as skipped).
    if let (Some((f, arg)), None) = (e.always, saved) {
        call_handler(&mut a, arg, f);
        if e.handlers.is_empty() && e.returns.is_empty() {
            a.branch(0x1400_0000, done, Kind::B26);
        }
    }
    // The thread's slot, marked busy, in x17; none (or busy already): skip.
    find_slot(&mut a, &e.shadow, slow);
    a.bind(have);
    a.str64(X17, SP, ctx(core::mem::offset_of!(Ctx, slot)));
    for &(handler, probe) in &e.handlers {
        a.mov32(X16, probe);
        a.str32(X16, SP, ctx(core::mem::offset_of!(Ctx, probe)));
        call_handler(&mut a, e.region, handler);
    }
    // x17 still holds the slot unless a call came between.
    let mut reload_slot = !e.handlers.is_empty();
    for &(probe, entry_handler) in &e.returns {
        // The return address at the unwinder's place is where the
        // prologue stores x30, from the CFI: entry sp + ra_saved.
        let saved_at = e.ra_saved.map_or(0, |at| at + 8) | e.ra_signed;
        let pushed = a.label();
        let push_slow = a.label();
        if saved.is_some() {
            // rt_ret_push's common case inline.
            if reload_slot {
                a.ldr64(X17, SP, ctx(core::mem::offset_of!(Ctx, slot)));
            }
            reload_slot = true;
            push_frame(&mut a, &e.shadow, ret_slot, probe, e.ret_tramp, saved_at, push_slow);
            a.branch(0x1400_0000, pushed, Kind::B26);
        }
        a.bind(push_slow);
        // rt_ret_push(region, ctx, return slot, return trampoline, probe)
        a.mov64(X0, e.region);
        a.add_imm(X1, SP, CTX_AT, false);
        a.add_imm(X2, SP, ret_slot, false);
        a.mov64(X3, e.ret_tramp);
        a.mov32(X4, probe);
        let around = saved.map_or(0, |saved| around & CALLER_SAVED & !saved);
        store_mask(&mut a, around);
        a.call(e.ret_push);
        load_mask(&mut a, around);
        // rt_ret_push gave the frame's @entry saves (0: none pushed).
        if saved_at != 0 {
            use telco_abi::region::{ShadowFrame, SHADOW_FRAME_HEADER};
            a.branch(0xb400_0000 | X0, pushed, Kind::Imm19); // cbz x0, pushed
            a.add_imm(X17, X0, SHADOW_FRAME_HEADER as u32, true);
            a.mov32(X16, saved_at as u32);
            a.str32(X16, X17, core::mem::offset_of!(ShadowFrame, saved) as u32);
        }
        a.bind(pushed);
        if saved.is_some() && e.span == Some(probe) {
            // `--chrome`'s (or a timed statistic's) entry: the clock into
            // the frame's first `@entry` save.
            let skip = a.label();
            a.branch(0xb400_0000 | X0, skip, Kind::Imm19); // cbz x0, skip
            read_clock(&mut a, X4);
            a.str64(X4, X0, 0);
            a.bind(skip);
        } else if let Some(h) = entry_handler {
            let skip = a.label();
            a.branch(0xb400_0000 | X0, skip, Kind::Imm19); // cbz x0, skip
            a.str64(X0, SP, ctx(core::mem::offset_of!(Ctx, entry)));
            a.mov32(X16, probe);
            a.str32(X16, SP, ctx(core::mem::offset_of!(Ctx, probe)));
            call_handler(&mut a, e.region, h);
            a.str64(ZR, SP, ctx(core::mem::offset_of!(Ctx, entry)));
            a.bind(skip);
        }
    }
    leave_slot(&mut a);
    a.bind(done);
    // x30 from the return slot (the return trampoline where a frame was
    // pushed) where there is one, not also from SavedRegs.
    let lr_from_slot = saved.is_none() || !e.returns.is_empty();
    match saved {
        None => restore_all_but_lr(&mut a),
        Some(saved) => {
            if e.inside {
                a.ldr64(X16, SP, 8 * regs::PSTATE as u32);
                a.emit(0xd51b_4200 | X16); // msr nzcv, x16
            }
            load_mask(&mut a, if lr_from_slot { saved & !(1 << LR) } else { saved });
        }
    }
    if lr_from_slot {
        a.ldr64(LR, SP, ret_slot);
    }
    a.add_imm(SP, SP, frame, false);
    if !e.returns.is_empty() && e.ra_signed != 0 {
        // Signed as the function's landing pad signed the return address
        // (sp is the entry's again): stripped first, which leaves an
        // unpushed return address as it was.
        a.emit(XPACLRI);
        a.emit(if e.ra_signed == telco_abi::region::SAVED_PACIB { PACIBSP } else { PACIASP });
    }
    if let Some((wait, func)) = e.itrace {
        itrace_gate(&mut a, e.region, wait, func);
    }
    // Not the common case: rt_enter finds (or claims) the slot, or says
    // skip. A lean trampoline saves what it may change beyond the saved
    // registers (and x0, x17, set here) around the call; a full one has
    // saved everything.
    let extra = saved.map_or(0, |saved| CALLER_SAVED & !saved & !(1 << X0 | 1 << X17));
    let after = a.label();
    a.branch(0x1400_0000, after, Kind::B26);
    a.bind(slow);
    store_mask(&mut a, extra);
    a.mov64(X0, e.region);
    a.call(e.enter);
    load_mask(&mut a, extra);
    a.emit(0xaa00_03f1); // mov x17, x0
    a.branch(0xb500_0000 | X0, have, Kind::Imm19); // cbnz x0, have
    a.branch(0x1400_0000, done, Kind::B26);
    a.bind(after);
    a.finish()
}

/// x17 = the slot of the calling thread at its first place (`thread_slot`
/// in compiler/rt/rt.c looks there first), marked busy; else `slow` (no
/// thread pointer, another key, another thread with this thread pointer,
/// or busy). The slot's `tid` and `busy` are compared with one load
/// against the thread id the C library keeps at `Shadow::tid_off` from the
/// thread pointer (signed: below it on aarch64), as x86_64's `find_slot`
/// does. Uses x0, x1, x16.
fn find_slot(a: &mut Asm, sh: &Shadow, slow: usize) {
    use core::mem::offset_of;
    use telco_abi::region::ThreadSlot;
    const _: () = assert!(offset_of!(ThreadSlot, busy) == offset_of!(ThreadSlot, tid) + 4);
    const _: () = assert!(offset_of!(ThreadSlot, tid) % 8 == 0);
    a.emit(0xd53b_d040 | X16); // mrs x16, tpidr_el0
    a.branch(0xb400_0000 | X16, slow, Kind::Imm19); // cbz x16, slow
    slot_home(a, sh, X16, X0);
    a.ldr64(X0, X17, offset_of!(ThreadSlot, key) as u32);
    a.emit(0xeb00_001f | X16 << 16 | X0 << 5); // cmp x0, x16
    a.branch(0x5400_0001, slow, Kind::Imm19); // b.ne slow
    let tid_off = sh.tid_off as i32;
    if tid_off != 0 {
        // me = *(u32 *)(tp + tid_off), against tid with busy (0) above.
        if (-256..256).contains(&tid_off) {
            // ldur w0, [x16, #off]
            a.emit(0xb840_0000 | ((tid_off as u32) & 0x1ff) << 12 | X16 << 5 | X0);
        } else {
            a.mov64(X1, tid_off as i64 as u64);
            a.emit(0xb860_6800 | X1 << 16 | X16 << 5 | X0); // ldr w0, [x16, x1]
        }
        a.ldr64(X1, X17, offset_of!(ThreadSlot, tid) as u32);
        a.emit(0xeb00_001f | X0 << 16 | X1 << 5); // cmp x1, x0
        a.branch(0x5400_0001, slow, Kind::Imm19); // b.ne slow
    } else {
        a.ldr32(X0, X17, offset_of!(ThreadSlot, busy) as u32);
        a.branch(0xb500_0000 | X0, slow, Kind::Imm19); // cbnz x0, slow (w0 zero-extended)
    }
    a.mov32(X0, 1);
    a.str32(X0, X17, offset_of!(ThreadSlot, busy) as u32);
}

/// Block every signal (`rt_sigprocmask(SIG_SETMASK, all, old)`): the new
/// mask goes to [sp + at], the old one to [sp + at + 8]. Changes x0-x3,
/// x8 and x16.
fn block_signals(a: &mut Asm, at: u32) {
    a.mov64(X16, u64::MAX);
    a.str64(X16, SP, at);
    sigprocmask(a, at, Some(at + 8));
}

/// The mask `block_signals` kept at [sp + at + 8] back.
fn unblock_signals(a: &mut Asm, at: u32) {
    sigprocmask(a, at + 8, None);
}

/// `rt_sigprocmask(SIG_SETMASK, sp + set, old)` (none: NULL).
fn sigprocmask(a: &mut Asm, set: u32, old: Option<u32>) {
    const X8: u32 = 8;
    a.mov32(X0, 2);
    a.add_imm(X1, SP, set, false);
    match old {
        Some(o) => a.add_imm(X2, SP, o, false),
        None => a.mov32(X2, 0),
    }
    a.mov32(X3, 8);
    a.mov32(X8, 135);
    a.emit(0xd400_0001); // svc #0
}

/// x17 = the first place `thread_slot` (rt.c) looks for the slot keyed
/// by register `key`: the top log2(nthreads) bits of its low half times
/// 0x9e3779b9, times the slot size, from the slots' address (left in
/// register `base`).
fn slot_home(a: &mut Asm, sh: &Shadow, key: u32, base: u32) {
    use telco_abi::region::ThreadSlot;
    let bits = sh.nthreads.max(1).trailing_zeros();
    let size = core::mem::size_of::<ThreadSlot>().trailing_zeros();
    a.mov64(base, sh.threads);
    if bits > 0 {
        a.mov32(X17, 0x9e37_79b9);
        a.emit(0x1b00_7c00 | X17 << 16 | key << 5 | X17); // mul w17, w<key>, w17
        a.emit(0x5300_7c00 | (32 - bits) << 16 | X17 << 5 | X17); // lsr w17, w17, #(32 - bits)
        a.emit(0x8b00_0000 | X17 << 16 | size << 10 | base << 5 | X17); // add x17, x<base>, x17, lsl #size
    } else {
        a.add_imm(X17, base, 0, false);
    }
}

/// x2 = the address of shadow frame w0 of the slot in x17, as
/// `shadow_frame` (rt.c) computes it. Uses x1.
fn frame_addr(a: &mut Asm, sh: &Shadow) {
    use telco_abi::region::ThreadSlot;
    a.ldr64(X1, X17, core::mem::offset_of!(ThreadSlot, frames) as u32);
    a.mov32(X2, sh.frame_size);
    a.emit(0x9ba0_0000 | X2 << 16 | X1 << 10 | X0 << 5 | X2); // umaddl x2, w0, w2, x1
}

/// rt_ret_push's common case inline, the slot in x17: room on the shadow
/// stack and the top frame a caller's (a higher stack slot), else `slow`.
/// The frame for the return address at sp + `ret_slot` gets it, the slot,
/// `probe`, `saved` (`ShadowFrame::saved`) and the return trampoline
/// `tramp`, which replaces the return address in the slot; the depth is
/// stored. Leaves x0 = the frame's `@entry` saves, as `rt_ret_push`
/// returns; uses x1–x4.
fn push_frame(a: &mut Asm, sh: &Shadow, ret_slot: u32, probe: u32, tramp: u64, saved: i32, slow: usize) {
    use core::mem::offset_of;
    use telco_abi::region::{ShadowFrame, ThreadSlot, SHADOW_FRAME_HEADER};
    let room = a.label();
    a.ldr32(X0, X17, offset_of!(ThreadSlot, depth) as u32);
    a.mov32(X4, sh.depth);
    a.emit(0x6b00_001f | X4 << 16 | X0 << 5); // cmp w0, w4
    a.branch(0x5400_0002, slow, Kind::Imm19); // b.hs slow
    frame_addr(a, sh);
    a.add_imm(X3, SP, ret_slot, false);
    a.branch(0x3400_0000 | X0, room, Kind::Imm19); // cbz w0, room

    // The top frame: x2 less one frame.
    a.add_imm(X4, X2, sh.frame_size, true);
    a.ldr64(X4, X4, offset_of!(ShadowFrame, sp) as u32);
    a.emit(0xeb00_001f | X3 << 16 | X4 << 5); // cmp x4, x3
    a.branch(0x5400_0009, slow, Kind::Imm19); // b.ls slow
    a.bind(room);
    a.ldr64(X4, X3, 0);
    a.str64(X4, X2, offset_of!(ShadowFrame, ret) as u32);
    a.str64(X3, X2, offset_of!(ShadowFrame, sp) as u32);
    a.mov32(X4, probe);
    a.str32(X4, X2, offset_of!(ShadowFrame, probe) as u32);
    if saved != 0 {
        a.mov32(X4, saved as u32);
        a.str32(X4, X2, offset_of!(ShadowFrame, saved) as u32);
    } else {
        a.str32(ZR, X2, offset_of!(ShadowFrame, saved) as u32);
    }
    a.mov64(X4, tramp);
    a.str64(X4, X2, offset_of!(ShadowFrame, tramp) as u32);
    a.str64(X4, X3, 0);
    a.add_imm(X0, X0, 1, false);
    a.str32(X0, X17, offset_of!(ThreadSlot, depth) as u32);
    a.add_imm(X0, X2, SHADOW_FRAME_HEADER as u32, false);
}

/// rt_ret_pop's common case inline, the slot in x17: the top frame is this
/// very call's (its return address's slot was sp + `ret_slot`, just below
/// the stack pointer after the return), else `undo`. Pops it into the
/// context (probe, `@entry` saves, slot); leaves x0 = the return address.
/// Uses x1–x3.
fn pop_frame(a: &mut Asm, sh: &Shadow, ret_slot: u32, undo: usize) {
    use core::mem::offset_of;
    use telco_abi::region::{ShadowFrame, ThreadSlot, SHADOW_FRAME_HEADER};
    a.ldr32(X0, X17, offset_of!(ThreadSlot, depth) as u32);
    // None left (the depth was 0).
    a.emit(0x7100_0400 | X0 << 5 | X0); // subs w0, w0, #1
    a.branch(0x5400_0004, undo, Kind::Imm19); // b.mi undo
    frame_addr(a, sh);
    a.add_imm(X3, SP, ret_slot, false);
    a.ldr64(X1, X2, offset_of!(ShadowFrame, sp) as u32);
    a.emit(0xeb00_001f | X3 << 16 | X1 << 5); // cmp x1, x3
    a.branch(0x5400_0001, undo, Kind::Imm19); // b.ne undo
    a.str32(X0, X17, offset_of!(ThreadSlot, depth) as u32);
    a.ldr32(X1, X2, offset_of!(ShadowFrame, probe) as u32);
    a.str32(X1, SP, ctx(offset_of!(Ctx, probe)));
    a.add_imm(X1, X2, SHADOW_FRAME_HEADER as u32, false);
    a.str64(X1, SP, ctx(offset_of!(Ctx, entry)));
    a.str64(X17, SP, ctx(offset_of!(Ctx, slot)));
    a.ldr64(X0, X2, offset_of!(ShadowFrame, ret) as u32);
}

/// The `.itrace` gate (x86_64's `itrace_gate`): every register as at the
/// entry into a `SavedRegs` block (sp as the caller left it, pc = where
/// the relocated instruction starts, just after the gate), then
/// `rt_itrace_wait(region, regs, func)`. The single-stepper takes the
/// thread over from that block and never returns here; an untraced call
/// (declined, or the tracer busy) gets every register back and goes on.
/// The block tracer's answer is where to go on instead (its prologue):
/// every register back, the thread enters the code cache "in transit"
/// (`blocks.rs`: the program's x16 and x17 pushed, x16 the address).
fn itrace_gate(a: &mut Asm, region: u64, wait: u64, func: u32) {
    let frame = core::mem::size_of::<regs::SavedRegs>() as u32;
    debug_assert!(frame >= 8 * 18 + 16 && frame.is_multiple_of(16));
    let resume = a.label();
    let untraced = a.label();
    a.add_imm(SP, SP, frame, true);
    store_gprs(a);
    a.add_imm(X16, SP, frame, false);
    a.str64(X16, SP, 8 * regs::SP as u32);
    a.branch(0x1000_0000 | X16, resume, Kind::Adr); // adr x16, resume
    a.str64(X16, SP, 8 * regs::PC as u32);
    a.emit(0xd53b_4200 | X16); // mrs x16, nzcv
    a.str64(X16, SP, 8 * regs::PSTATE as u32);
    a.mov64(X0, region);
    a.add_imm(X1, SP, 0, false);
    a.mov32(X2, func);
    a.call(wait);
    a.branch(0xb400_0000, untraced, Kind::Imm19); // cbz x0, untraced
                                                  // The code the tracer wrote, fetched anew.
    a.emit(0xd503_3fdf); // isb
    a.str64(X0, SP, 8 * regs::PC as u32);
    // Every register but x16 and x17; then those two where the transit
    // keeps them (the block's top 16 bytes), x16 = the address.
    a.ldr64(X16, SP, 8 * regs::PSTATE as u32);
    a.emit(0xd51b_4200 | X16); // msr nzcv, x16
    for r in (0..16).step_by(2).chain((18..30).step_by(2)) {
        a.ldp64(r, r + 1, SP, 8 * r);
    }
    a.ldr64(LR, SP, 8 * LR);
    a.ldr64(X17, SP, 8 * 16);
    a.ldr64(X16, SP, 8 * regs::PC as u32);
    a.str64(X17, SP, frame - 16);
    a.ldr64(X17, SP, 8 * 17);
    a.str64(X17, SP, frame - 8);
    a.add_imm(SP, SP, frame - 16, false);
    a.emit(0xd61f_0200); // br x16
    a.bind(untraced);
    restore_all(a);
    a.add_imm(SP, SP, frame, false);
    a.bind(resume);
}

/// A return trampoline at `at` (see the module's documentation). A lean
/// one (`lean`: what its handlers change) saves the caller-saved registers
/// among those and its own (a caller built with gcc's `-fipa-ra` may keep
/// values in any of them across the call; x30 is the return address it
/// sets), and pops the shadow frame inline (`pop_frame`), calling
/// `rt_ret_pop` only off that common path; `span`'s probe is recorded
/// inline (`timed_work`) instead of calling its handler.
#[allow(clippy::too_many_arguments)]
pub fn return_trampoline(
    _at: u64,
    region: u64,
    ctx_size: u32,
    ret_pop: u64,
    handlers: &Returns,
    lean: Option<RegMask>,
    shadow: &Shadow,
    span: Option<&SpanInline>,
) -> Result<Vec<u8>, AsmError> {
    // Inline spans are for lean trampolines (Direct handlers).
    let timed = span.filter(|_| lean.is_some()).map(|inl| (inl.probe, Timed::Span(*inl)));
    returns(region, ctx_size, ret_pop, handlers, lean, 0, shadow, timed)
}

/// `return_trampoline`, with the call of `timed`'s probe recorded by the
/// trampoline itself (`timed_work`) in place of its handler, and (lean)
/// the registers of `around` saved only around the calls off the common
/// path (`rt_ret_pop`, `rt_span_flush`).
#[allow(clippy::too_many_arguments)]
fn returns(
    region: u64,
    ctx_size: u32,
    ret_pop: u64,
    handlers: &Returns,
    lean: Option<RegMask>,
    around: RegMask,
    shadow: &Shadow,
    timed: Option<(u32, Timed)>,
) -> Result<Vec<u8>, AsmError> {
    let frame = frame_size(ctx_size);
    let mut a = Asm::default();
    a.add_imm(SP, SP, frame, true);
    // x0–x3 (find_slot, pop_frame, the handlers' arguments), x16, x17,
    // x4 for timing; x30 is not kept: the return address replaces it.
    let own = 0b1_1111 | 1 << X16 | 1 << X17;
    let saved = lean.map(|m| (m | own) & CALLER_SAVED & !(1 << LR));
    match saved {
        None => save_all(&mut a, frame, None),
        Some(saved) => store_mask(&mut a, saved),
    }
    let around = saved.map_or(0, |saved| around & CALLER_SAVED & !saved & !(1 << LR));
    let popped = a.label();
    {
        // rt_ret_pop's common case inline (lean or full): the thread's
        // slot at the first place (not busy), its top frame this very
        // call's.
        use telco_abi::region::ThreadSlot;
        let slow = a.label();
        let undo = a.label();
        find_slot(&mut a, shadow, slow);
        pop_frame(&mut a, shadow, frame - 8, undo);
        a.branch(0x1400_0000, popped, Kind::B26);
        a.bind(undo);
        a.str32(ZR, X17, core::mem::offset_of!(ThreadSlot, busy) as u32);
        a.bind(slow);
        // rt_ret_pop sets it only where it finds the frame.
        a.str64(ZR, SP, ctx(core::mem::offset_of!(Ctx, entry)));
    }
    // rt_ret_pop(region, ctx, sp after the return)
    a.mov64(X0, region);
    a.add_imm(X1, SP, CTX_AT, false);
    a.add_imm(X2, SP, frame, false);
    store_mask(&mut a, around);
    a.call(ret_pop);
    load_mask(&mut a, around);
    a.bind(popped);
    // The return address as the function was given it may be signed
    // (pointer authentication): stripped in x30, whose `xpaclri` is a
    // no-op on a core without it. Where to return (x30 at the end), and
    // with the whole context the pc and `uaddr()`.
    a.emit(0xaa00_03fe); // mov x30, x0
    a.emit(XPACLRI);
    a.str64(LR, SP, 8 * regs::LR as u32);
    if saved.is_none() {
        a.str64(LR, SP, 8 * regs::PC as u32);
        a.str64(LR, SP, ctx(core::mem::offset_of!(Ctx, addr)));
    }
    // rt_ret_pop marked the thread busy (ctx.slot), or says skip (0).
    let done = a.label();
    a.ldr64(X16, SP, ctx(core::mem::offset_of!(Ctx, slot)));
    a.branch(0xb400_0000 | X16, done, Kind::Imm19); // cbz x16, done
    match handlers {
        Returns::Table(table) => {
            a.ldr32(X16, SP, ctx(core::mem::offset_of!(Ctx, probe)));
            a.mov64(X17, *table);
            a.emit(0xf860_7800 | X16 << 16 | X17 << 5 | X16); // ldr x16, [x17, x16, lsl #3]
            a.mov64(X0, region);
            a.add_imm(X1, SP, CTX_AT, false);
            a.emit(0xd63f_0000 | X16 << 5); // blr x16
        }
        Returns::Direct(list) => {
            let leave = a.label();
            for (i, &(probe, h)) in list.iter().enumerate() {
                let last = i + 1 == list.len();
                let next = a.label();
                if !last {
                    a.ldr32(X16, SP, ctx(core::mem::offset_of!(Ctx, probe)));
                    a.mov32(X17, probe);
                    a.emit(0x6b11_021f); // cmp w16, w17
                    a.branch(0x5400_0001, next, Kind::Imm19); // b.ne next
                }
                match timed {
                    Some((p, work)) if p == probe => timed_work(&mut a, region, &work, around, leave),
                    _ => call_handler(&mut a, region, h),
                }
                if !last {
                    a.branch(0x1400_0000, leave, Kind::B26);
                }
                a.bind(next);
            }
            a.bind(leave);
        }
    }
    leave_slot(&mut a);
    a.bind(done);
    match saved {
        None => restore_all(&mut a),
        Some(saved) => {
            load_mask(&mut a, saved);
            a.ldr64(LR, SP, 8 * regs::LR as u32);
        }
    }
    a.add_imm(SP, SP, frame, false);
    a.emit(0xd65f_03c0); // ret
    a.finish()
}

/// Entry trampoline of a `ClockOnly` function: a lean one (see
/// `entry_prefix`) whose only work is the return probe's shadow frame and
/// the clock into its `@entry` save; it saves the registers it uses, and
/// what `rt_enter` and `rt_ret_push`, called only off its common path,
/// change around those calls.
pub fn clock_entry_prefix(e: &Entry, so: &ClockOnly) -> Result<Vec<u8>, AsmError> {
    let e = Entry {
        at: e.at,
        region: e.region,
        addr: e.addr,
        ctx_size: e.ctx_size,
        handlers: Vec::new(),
        returns: vec![(so.probe, None)],
        ret_push: e.ret_push,
        enter: e.enter,
        ret_tramp: e.ret_tramp,
        shadow: Shadow { ..e.shadow },
        lean: Some(0),
        itrace: None,
        span: Some(so.probe),
        inside: e.inside,
        ra_saved: e.ra_saved,
        ra_signed: e.ra_signed,
        always: None,
        go: None,
    };
    entry_with(&e, so.push_clobbers)
}

/// Return trampoline of a `ClockOnly` function: a lean one whose probe's
/// call is recorded by the trampoline (`timed_work`), not its handler; it
/// saves the registers it uses, and what `rt_ret_pop` and `rt_span_flush`
/// change around those calls, off its common path.
pub fn clock_return_trampoline(
    _at: u64,
    region: u64,
    ctx_size: u32,
    ret_pop: u64,
    shadow: &Shadow,
    so: &ClockOnly,
) -> Result<Vec<u8>, AsmError> {
    let direct = Returns::Direct(vec![(so.probe, so.handler)]);
    returns(region, ctx_size, ret_pop, &direct, Some(0), so.pop_clobbers, shadow, Some((so.probe, so.work)))
}

/// `isb; mrs xt, cntvct_el0`: the clock the runtime library reads
/// (`read_clock` in compiler/rt/arch/aarch64.h), which the tracer
/// calibrates (`Header::tsc_mult`).
fn read_clock(a: &mut Asm, rt: u32) {
    a.emit(0xd503_3fdf); // isb
    a.emit(0xd53b_e040 | rt); // mrs xt, cntvct_el0
}

/// A timed call's return, in a return trampoline whose frame was popped
/// into the context: the duration since the entry's clock (the first
/// `@entry` save), unless the session is over, recorded as `rt_span` or
/// the compiled statistic update would (`Timed`); then `leave`. Uses x0–x4,
/// x16, x17 and what `rt_span_flush` changes.
fn timed_work(a: &mut Asm, region: u64, work: &Timed, around: RegMask, leave: usize) {
    use core::mem::offset_of;
    use telco_abi::region::Header;
    a.ldr64(X1, SP, ctx(offset_of!(Ctx, entry)));
    a.ldr64(X1, X1, 0);
    a.mov64(X0, region);
    a.ldr32(X2, X0, offset_of!(Header, enabled) as u32);
    a.branch(0xb400_0000 | X2, leave, Kind::Imm19); // cbz x2, leave
    read_clock(a, X2);
    a.emit(0xcb00_0000 | X1 << 16 | X2 << 5 | X2); // sub x2, x2, x1
    a.ldr64(X17, SP, ctx(offset_of!(Ctx, slot)));
    match work {
        Timed::Span(inl) => {
            // Shorter than Header::span_min_ticks: not recorded.
            a.ldr64(X3, X0, offset_of!(Header, span_min_ticks) as u32);
            a.emit(0xeb00_001f | X3 << 16 | X2 << 5); // cmp x2, x3
            a.branch(0x5400_000b, leave, Kind::Imm19); // b.lt leave
            span_append(a, region, inl, around, leave);
        }
        Timed::Stat(st) => stat_add(a, st, leave),
    }
}

/// The call (x1 = start, x2 = duration, in ticks) appended to the stage of
/// the slot in x17 (x0 = the region), as `rt_span` does; a full stage goes
/// to `rt_span_flush`. Then `leave`.
fn span_append(a: &mut Asm, region: u64, inl: &SpanInline, around: RegMask, leave: usize) {
    use core::mem::offset_of;
    use telco_abi::region::{SpanEntry, SpanStage, ThreadSlot, SPAN_ENTRY_SIZE, SPAN_STAGE_HEADER};
    let room = a.label();
    let full = a.label();
    // The stage: region + spans_off + row × stride.
    a.ldr32(X3, X17, offset_of!(ThreadSlot, index) as u32);
    a.mov32(X4, inl.stride);
    a.emit(0x9ba0_0000 | X4 << 16 | X0 << 10 | X3 << 5 | X3); // umaddl x3, w3, w4, x0
    a.mov64(X4, inl.spans_off);
    a.emit(0x8b00_0000 | X4 << 16 | X3 << 5 | X3); // add x3, x3, x4

    // Its count, never past the stage whatever it holds (a forked child
    // shares its parent's rows until it takes a slot over).
    a.ldr32(X4, X3, offset_of!(SpanStage, count) as u32);
    a.mov32(X16, inl.batch);
    a.emit(0x6b00_001f | X16 << 16 | X4 << 5); // cmp w4, w16
    a.branch(0x5400_0003, room, Kind::Imm19); // b.lo room
    a.emit(0x2a1f_03e4); // mov w4, wzr
    a.bind(room);
    a.mov32(X16, SPAN_ENTRY_SIZE as u32);
    a.emit(0x9ba0_0000 | X16 << 16 | X3 << 10 | X4 << 5 | X16); // umaddl x16, w4, w16, x3
    a.add_imm(X16, X16, SPAN_STAGE_HEADER as u32, false);
    a.str64(X1, X16, offset_of!(SpanEntry, ts) as u32);
    a.str64(X2, X16, offset_of!(SpanEntry, dur) as u32);
    a.ldr32(X2, X17, offset_of!(ThreadSlot, tid) as u32);
    a.str32(X2, X16, offset_of!(SpanEntry, tid) as u32);
    // probe (u16) and the spare u16 (0) as one store.
    const _: () = assert!(offset_of!(SpanEntry, _pad) == offset_of!(SpanEntry, probe) + 2);
    a.mov32(X2, inl.probe & 0xffff);
    a.str32(X2, X16, offset_of!(SpanEntry, probe) as u32);
    a.add_imm(X4, X4, 1, false);
    a.mov32(X16, inl.batch);
    a.emit(0x6b00_001f | X16 << 16 | X4 << 5); // cmp w4, w16
    a.branch(0x5400_0002, full, Kind::Imm19); // b.hs full
                                              // stlr w4, [x3]: the entries before the count that covers them (the
                                              // flight recorder reads a live stage).
    const _: () = assert!(offset_of!(SpanStage, count) == 0);
    a.emit(0x889f_fc00 | X3 << 5 | X4);
    a.branch(0x1400_0000, leave, Kind::B26);
    a.bind(full);
    a.mov64(X0, region);
    a.emit(0xaa11_03e1); // mov x1, x17
    store_mask(a, around);
    a.call(inl.flush);
    load_mask(a, around);
    a.branch(0x1400_0000, leave, Kind::B26);
}

/// The duration (x2, in ticks; x0 = the region) in ns, added to the copy
/// of the thread whose slot is in x17, as `Gen::stat_add_inline` does
/// (compiler/src/codegen/translate/storage.rs); then `leave`.
fn stat_add(a: &mut Asm, st: &StatInline, leave: usize) {
    use core::mem::offset_of;
    use telco_abi::region::{Header, Stat, ThreadSlot, HIST_LOG_BUCKET0, HIST_LOG_BUCKETS, TSC_SHIFT};
    let first = a.label();
    let min_ok = a.label();
    let max_ok = a.label();
    // ns = ticks × mult >> TSC_SHIFT (the 128-bit product, signed as
    // x86_64's `imul`).
    a.ldr64(X3, X0, offset_of!(Header, tsc_mult) as u32);
    a.emit(0x9b00_7c00 | X3 << 16 | X2 << 5 | X4); // mul x4, x2, x3
    a.emit(0x9b40_7c00 | X3 << 16 | X2 << 5 | X3); // smulh x3, x2, x3
    a.emit(0x93c0_0000 | X4 << 16 | TSC_SHIFT << 10 | X3 << 5 | X2); // extr x2, x3, x4, #TSC_SHIFT

    // x3 = this thread's copy: region + index × row + copy.
    a.ldr32(X3, X17, offset_of!(ThreadSlot, index) as u32);
    a.mov32(X4, st.row);
    a.emit(0x9ba0_0000 | X4 << 16 | X0 << 10 | X3 << 5 | X3); // umaddl x3, w3, w4, x0
    a.mov64(X4, u64::from(st.copy));
    a.emit(0x8b00_0000 | X4 << 16 | X3 << 5 | X3); // add x3, x3, x4
    let f = |field: usize| field as u32;
    a.ldr64(X4, X3, f(offset_of!(Stat, count)));
    a.branch(0xb400_0000 | X4, first, Kind::Imm19); // cbz x4, first
    a.ldr64(X16, X3, f(offset_of!(Stat, min)));
    a.emit(0xeb00_001f | X16 << 16 | X2 << 5); // cmp x2, x16
    a.branch(0x5400_000a, min_ok, Kind::Imm19); // b.ge min_ok
    a.str64(X2, X3, f(offset_of!(Stat, min)));
    a.bind(min_ok);
    a.ldr64(X16, X3, f(offset_of!(Stat, max)));
    a.emit(0xeb00_001f | X16 << 16 | X2 << 5); // cmp x2, x16
    a.branch(0x5400_000d, max_ok, Kind::Imm19); // b.le max_ok
    a.str64(X2, X3, f(offset_of!(Stat, max)));
    a.bind(max_ok);
    a.add_imm(X4, X4, 1, false);
    a.str64(X4, X3, f(offset_of!(Stat, count)));
    a.ldr64(X16, X3, f(offset_of!(Stat, sum)));
    a.emit(0x8b00_0000 | X2 << 16 | X16 << 5 | X16); // add x16, x16, x2
    a.str64(X16, X3, f(offset_of!(Stat, sum)));
    if let Some(h) = st.hist {
        // log_bucket (rt.c): B0 + 64 - clz(|v|), mirrored below B0 for a
        // negative v.
        a.emit(0xf100_001f | X2 << 5); // cmp x2, #0
        a.emit(0xda80_0400 | X2 << 16 | 5 << 12 | X2 << 5 | X4); // cneg x4, x2, mi
        a.emit(0xdac0_1000 | X4 << 5 | X4); // clz x4, x4
        a.mov64(X16, u64::from(HIST_LOG_BUCKET0) + 64);
        a.emit(0xcb00_0000 | X4 << 16 | X16 << 5 | X4); // sub x4, x16, x4
        a.mov64(X16, u64::from(HIST_LOG_BUCKETS));
        a.emit(0xcb00_0000 | X4 << 16 | X16 << 5 | X16); // sub x16, x16, x4
        a.emit(0x9a80_0000 | X4 << 16 | 0xb << 12 | X16 << 5 | X4); // csel x4, x16, x4, lt
        a.emit(0x8b00_0000 | X4 << 16 | 3 << 10 | X3 << 5 | X4); // add x4, x3, x4, lsl #3
        a.add_imm(X4, X4, h, false);
        a.ldr64(X16, X4, 0);
        a.add_imm(X16, X16, 1, false);
        a.str64(X16, X4, 0);
    }
    a.branch(0x1400_0000, leave, Kind::B26);
    // The first value: the minimum and the maximum.
    a.bind(first);
    a.str64(X2, X3, f(offset_of!(Stat, min)));
    a.str64(X2, X3, f(offset_of!(Stat, max)));
    a.branch(0x1400_0000, max_ok, Kind::B26);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(b: &[u8]) -> Vec<u32> {
        b.chunks_exact(4).map(|w| u32::from_le_bytes(w.try_into().unwrap())).collect()
    }

    #[test]
    fn constants_and_frames_encode() {
        let mut a = Asm::default();
        a.mov64(X16, 0x1234_0000_5678);
        a.add_imm(SP, SP, 0x1230, true);
        a.str64(LR, SP, 8 * 30);
        let w = words(&a.finish().unwrap());
        // movz x16, #0x5678; movk x16, #0x1234, lsl #32
        assert_eq!(w[0], 0xd28a_cf10);
        assert_eq!(w[1], 0xf2c2_4690);
        // sub sp, sp, #0x1, lsl #12; sub sp, sp, #0x230
        assert_eq!(w[2], 0xd140_07ff);
        assert_eq!(w[3], 0xd108_c3ff);
        // str x30, [sp, #240]
        assert_eq!(w[4], 0xf900_7bfe);
        let mut a = Asm::default();
        a.stp64(0, 1, SP, 0);
        a.stp64(28, 29, SP, 224);
        a.ldp64(28, 29, SP, 224);
        let w = words(&a.finish().unwrap());
        // stp x0, x1, [sp]; stp x28, x29, [sp, #224]; ldp x28, x29, [sp, #224]
        assert_eq!(w, [0xa900_07e0, 0xa90e_77fc, 0xa94e_77fc]);
    }

    #[test]
    fn adr_reaches_its_label() {
        let mut a = Asm::default();
        let l = a.label();
        a.branch(0x1000_0000 | X16, l, Kind::Adr);
        a.emit(0xd503_201f);
        a.emit(0xd503_201f);
        a.bind(l);
        let w = words(&a.finish().unwrap());
        // adr x16, #12
        assert_eq!(w[0], 0x1000_0070);
    }

    /// A Go function's trampoline writes nothing on the goroutine's stack:
    /// no store through sp and no call until sp is on a stack of ours (a
    /// `mov sp, xN`), none once it is back; the function's own check
    /// comes first, its `b.ls` going to the relocated copy at the end.
    #[test]
    fn a_go_trampoline_never_writes_the_goroutine_stack() {
        let layout = telco_abi::artifact::GoLayout::go1_18(0x98);
        // ldr x16, [x28, #16]; sub x17, sp, #0xb0; cmp x17, x16; b.ls +0xa4
        let check: Vec<u8> =
            [0xf940_0b90u32, 0xd102_c3f1, 0xeb10_023f, 0x5400_0529].iter().flat_map(|w| w.to_le_bytes()).collect();
        let e = Entry {
            go: Some(GoEntry { check, back: 0x4010, layout, enter: 0x5400, push: 0x5800 }),
            ..entry(None, false, false)
        };
        let code = entry_prefix(&e).unwrap();
        let w: Vec<u32> = code.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        assert_eq!(w[..3], [0xf940_0b90, 0xd102_c3f1, 0xeb10_023f]);
        // b.ls to the end of the prefix (the relocated copy).
        assert_eq!(w[3] & 0xff00_001f, 0x5400_0009);
        assert_eq!(((w[3] >> 5) & 0x7ffff) as usize, w.len() - 3);
        let literal = w.windows(2).position(|p| p == [0x4010, 0]).expect("the literal");
        let mut ours = false;
        for (i, &x) in w[..literal].iter().enumerate() {
            let mov_sp = x & 0xffff_fc1f == 0x9100_001f; // add sp, xN, #0
            let from_sp = x & 0xffff_ffe0 == 0x9100_03e0 && x & 0x1f != 31; // add xN, sp, #0
            if mov_sp {
                ours = !ours;
                continue;
            }
            if from_sp || ours {
                continue;
            }
            // Stores (str/stp/stur, any size) and pre-index writes through sp, calls.
            let store = x & 0x3a40_0000 == 0x3800_0000 || x & 0x3e40_0000 == 0x2800_0000;
            let writes_sp = store && (x >> 5) & 0x1f == 31;
            let call = x & 0xfc00_0000 == 0x9400_0000 || x & 0xffff_fc1f == 0xd63f_0000;
            assert!(!writes_sp && !call, "word {i} ({x:#010x}) on the goroutine's stack: {w:x?}");
        }
    }

    /// A Go function's return trampoline writes nothing to the
    /// goroutine's stack, pops the frames of its return probes (last
    /// probe first) on the slot's stack, and leaves by `ret` only.
    #[test]
    fn go_return_trampolines_run_on_the_slot_s_stack() {
        let layout = telco_abi::artifact::GoLayout::go1_18(0x98);
        let x = GoExit {
            at: 0x1000,
            region: 0x7000_0000,
            addr: 0x4000,
            ctx_size: CTX_SIZE as u32,
            epilogue: Vec::new(),
            returns: vec![(3, 0x5000), (5, 0x5100)],
            pop: 0x5900,
            enter: 0x5400,
            layout,
            shadow: entry(None, true, false).shadow,
        };
        let code = go_return_trampoline(&x).unwrap();
        let w: Vec<u32> = code.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        let mut ours = false;
        for (i, &x) in w.iter().enumerate() {
            let mov_sp = x & 0xffff_fc1f == 0x9100_001f; // add sp, xN, #0
            if mov_sp {
                ours = !ours;
                continue;
            }
            if ours {
                continue;
            }
            let store = x & 0x3a40_0000 == 0x3800_0000 || x & 0x3e40_0000 == 0x2800_0000;
            let writes_sp = store && (x >> 5) & 0x1f == 31;
            let call = x & 0xfc00_0000 == 0x9400_0000 || x & 0xffff_fc1f == 0xd63f_0000;
            assert!(!writes_sp && !call, "word {i} ({x:#010x}) on the goroutine's stack: {w:x?}");
        }
        // Three ways out, each a `ret`; no `br`.
        assert_eq!(w.iter().filter(|&&x| x == RET).count(), 3, "{w:x?}");
        assert!(!w.iter().any(|&x| x & 0xffff_fc1f == 0xd61f_0000), "{w:x?}");
        // `mov w2, #probe` before each rt_go_pop: 5, then 3.
        let probes: Vec<u32> =
            w.iter().filter(|&&x| x & 0xffe0_001f == 0x5280_0002).map(|&x| (x >> 5) & 0xffff).collect();
        assert_eq!(probes[..2], [5, 3], "{w:x?}");
    }

    #[test]
    fn the_frame_keeps_the_stack_aligned_and_the_return_slot_on_top() {
        for ctx in [0, 88, 100, 2048 + 88] {
            let f = frame_size(ctx);
            assert_eq!(f % 16, 0);
            assert!(f - 8 >= CTX_AT + ctx.max(CTX_SIZE as u32));
        }
    }

    fn entry(lean: Option<RegMask>, returns: bool, inside: bool) -> Entry {
        Entry {
            at: 0x1000,
            region: 0x7000_0000,
            addr: 0x4000,
            ctx_size: 88,
            handlers: vec![(0x5000, 1)],
            returns: if returns { vec![(2, Some(0x6000))] } else { Vec::new() },
            ret_push: 0x5100,
            enter: 0x5200,
            ret_tramp: 0x5300,
            shadow: Shadow {
                threads: 0x7100_0000,
                nthreads: 64,
                depth: 256,
                frame_size: 48,
                tid_off: (-0x700i32) as u32,
            },
            lean,
            itrace: None,
            span: None,
            inside,
            ra_saved: Some(-16),
            ra_signed: 0,
            always: None,
            go: None,
        }
    }

    /// The registers `str`/`stp` (`ldr`/`ldp`: `load`) move to or from
    /// their words of SavedRegs at [sp], in the run of such instructions
    /// starting at word `from`.
    fn moved(w: &[u32], from: usize, load: bool) -> RegMask {
        let (single, pair) = if load { (0xf940_03e0, 0xa940_03e0) } else { (0xf900_03e0, 0xa900_03e0) };
        let mut m = 0;
        // Only a register's own word of SavedRegs counts (not the context,
        // nor the return slot).
        for &x in &w[from..] {
            let r = x & 31;
            if x & 0xffc0_03e0 == single {
                m |= if (x >> 10) & 0xfff == r { 1 << r } else { 0 };
            } else if x & 0xffc0_03e0 == pair {
                m |= if (x >> 15) & 0x7f == r { 1 << r | 1 << ((x >> 10) & 31) } else { 0 };
            } else {
                break;
            }
        }
        m
    }

    #[test]
    fn a_lean_entry_saves_the_caller_saved_registers_it_changes_and_restores_them() {
        let frame = frame_size(88);
        for (mask, returns, inside) in [(1 << 9, false, false), (1 << 9 | 1 << 18, true, false), (0, false, true)] {
            let w = words(&entry_prefix(&entry(Some(mask), returns, inside)).unwrap());
            let want = (mask | lean_entry_used(returns)) & CALLER_SAVED;
            assert_eq!(moved(&w, 1, false), want, "stored: {mask:#x}");
            // The loads end where sp is put back.
            let add_sp = 0x9100_03ff | frame << 10;
            let end = w.iter().rposition(|&x| x == add_sp).expect("sp put back");
            let is_load = |x: u32| x & 0xffc0_03e0 == 0xf940_03e0 || x & 0xffc0_03e0 == 0xa940_03e0;
            let from = (0..end).rev().find(|&k| !is_load(w[k])).unwrap() + 1;
            let mut loaded = moved(&w, from, true);
            // x30 is loaded twice with return probes (the return slot's).
            if returns {
                assert_eq!(w[end - 1], 0xf940_03fe | ((frame - 8) / 8) << 10);
                loaded |= 1 << LR;
            }
            assert_eq!(loaded, want, "loaded: {mask:#x}");
            // Off the common path (rt_enter) the rest of the caller-saved
            // registers are saved around the call.
            assert!(w.contains(&(0xf900_03f2 | 18 << 10)) || want & 1 << 18 != 0, "x18 around rt_enter");
            // The flags inside a function: mrs/msr nzcv.
            assert_eq!(w.contains(&(0xd53b_4200 | X16)), inside);
            assert_eq!(w.contains(&(0xd51b_4200 | X16)), inside);
        }
    }

    #[test]
    fn falling_through_an_entry_leaves_at_its_end() {
        // The slow path follows the trampoline's common path: the word
        // after sp is put back branches over it, to where the relocated
        // instruction goes.
        let frame = frame_size(88);
        for (lean, returns) in [(Some(0), false), (Some(0), true), (None, false), (None, true)] {
            let w = words(&entry_prefix(&entry(lean, returns, false)).unwrap());
            let add_sp = 0x9100_03ff | frame << 10;
            let k = w.iter().rposition(|&x| x == add_sp).unwrap();
            let b = w[k + 1];
            assert_eq!(b >> 26, 0b000101, "b after add sp: {b:#x}");
            assert_eq!(k + 1 + (b & 0x03ff_ffff) as usize, w.len());
        }
    }

    #[test]
    fn a_lean_return_trampoline_keeps_the_return_values_and_not_x30() {
        let sh = entry(None, true, false).shadow;
        let r =
            return_trampoline(0, 0x7000_0000, 88, 0x5400, &Returns::Direct(vec![(2, 0x5500)]), Some(1 << 5), &sh, None);
        let w = words(&r.unwrap());
        let want = 0b10_0000 | 0b1_1111 | 1 << X16 | 1 << X17;
        assert_eq!(moved(&w, 1, false), want);
        // Back through x30 = the return address, stored at SavedRegs' x30.
        assert_eq!(*w.last().unwrap(), 0xd65f_03c0);
        assert!(w.contains(&(0xf940_03fe | 30 << 10)));
    }

    #[test]
    fn clock_only_trampolines_save_their_calls_registers_only_around_them() {
        let inl = SpanInline { probe: 2, flush: 0x5600, spans_off: 0x10_0000, stride: 4096, batch: 64 };
        let so = ClockOnly {
            probe: 2,
            work: Timed::Span(inl),
            handler: 0x5500,
            enter_clobbers: 1 << 7,
            push_clobbers: 1 << 9,
            pop_clobbers: 1 << 12,
        };
        let stores = |r: u32| 0xf900_03e0 | r << 10 | r;
        let e = entry(Some(0), true, false);
        let w = words(&clock_entry_prefix(&e, &so).unwrap());
        assert_eq!(moved(&w, 1, false), lean_entry_used(true) & CALLER_SAVED);
        assert!(w.contains(&stores(9)), "x9 around rt_ret_push");
        let w = words(&clock_return_trampoline(0, 0x7000_0000, 88, 0x5400, &e.shadow, &so).unwrap());
        assert_eq!(moved(&w, 1, false), 0b1_1111 | 1 << X16 | 1 << X17);
        // Around rt_ret_pop and rt_span_flush.
        assert_eq!(w.iter().filter(|&&x| x == stores(12)).count(), 2);
    }
}
