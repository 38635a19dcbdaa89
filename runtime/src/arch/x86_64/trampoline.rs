//! Trampolines (x86_64), assembled with iced-x86's code assembler: where a
//! patched jump lands, how the handlers are called, and the way back.
//!
//! # Entry trampolines
//!
//! A patched function entry (or statement, or marker site) jumps here. The
//! trampoline makes a frame below the stack pointer (a `SavedRegs` block,
//! then the handler's `Ctx`), finds the thread's slot, calls each compiled
//! handler with (region, ctx), reloads what it saved, runs the relocated
//! original instructions (`patch::relocate`) and jumps back after them.
//! Two kinds (`Entry::lean`):
//!
//! * *full*: every general-purpose register saved (`$argN`, `register()`,
//!   `uaddr()`), the whole `Ctx` filled, the stack aligned to 16 bytes; for
//!   handlers whose `ProbeEntry::full_ctx` is set;
//! * *lean*: the handlers read only `probe`, `slot` and `entry` of the
//!   context and set up the rest themselves (pass 3 records this per
//!   handler), so only the caller-saved registers that the code called can
//!   change are saved, as `clobber` reads them off the linked machine code
//!   ("unknown", for indirect calls or vector registers, means full). This
//!   also keeps callers built with gcc's `-fipa-ra` right: every register a
//!   trampoline changes is restored.
//!
//! An entry probe whose body is empty (`ProbeEntry::empty`) is not called,
//! and a function left with nothing to run is not hooked (`Hooker::module`
//! in runtime/src/place/).
//!
//! What a function entry lets us skip (System V ABI): the flags are dead
//! across a call, so they are recorded but not restored (no `popfq`, which
//! costs tens of cycles); nothing lives below the stack pointer, so no red
//! zone needs stepping over; the handler preserves the callee-saved
//! registers itself, so the lean path reloads only the caller-saved ones
//! (and rbx, which the trampoline uses); the full path reloads every
//! register but rsp, so that a guru-mode write to a variable that DWARF
//! places in a callee-saved register takes effect. Vector registers are not saved: the
//! handlers and the runtime library use general-purpose registers only
//! (checked when the runtime library is built). Statement and marker sites
//! are inside functions, where the flags and the red zone may be live
//! (a compare before its branch, a leaf function's locals below the stack
//! pointer): their trampolines (`Entry::inside`) first step over the red
//! zone and save the arithmetic flags (`lahf`/`seto`, restored with
//! `add al, 0x7f`/`sahf`: a few cycles where `pushfq`/`popfq` cost tens),
//! and restore both before the relocated instructions run.
//!
//! The thread's slot (`ThreadSlot`: busy flag, shadow stack, row of the
//! per-thread data) is found inline (`find_slot`) where `thread_slot` in
//! compiler/rt/rt.c looks first: the low half of the thread pointer times
//! 0x9e3779b9, its top log2(nthreads) bits. The slot's `tid` and `busy`
//! (adjacent words) are checked with one compare against the thread id the
//! C library keeps in its control block (`Header::tcb_tid_off`), so a
//! thread that reuses an exited thread's control block, or a forked child's
//! thread, goes to `rt_enter`, which takes the slot over instead of letting
//! it pass for its previous owner. `rt_enter` also skips (and counts) a hit
//! on a thread already inside a handler: a signal handler that calls a
//! probed function while a handler holds a lock.
//!
//! # Return probes
//!
//! Each thread keeps a shadow stack (`ShadowFrame`: the original return
//! address, its stack slot, the probe, the `@entry` saves). At entry the
//! frame is pushed (inline on the lean path, else `rt_ret_push`); if it
//! was, the return address is dropped and the function's relocated first
//! instructions *called*: the function sees the stack it would have,
//! returns into the trampoline, and both its `ret` and the return
//! trampoline's are predicted (the return-stack buffer stays balanced).
//! A return trampoline pops the frame (inline, `rt_ret_pop` off the
//! common path), calls the return handlers (`$return` is rax), and
//! returns with `ret` through the slot it wrote the original address back
//! into: no register is used for the jump.
//! Lean return probes get a return trampoline of their own that calls their
//! handlers directly; a code region's shared one (a table by probe index)
//! serves the full ones. `.itrace` functions are jumped to with the return
//! address replaced instead.
//!
//! Calls that never return through their trampoline are found and counted
//! (`Header::unreturned`), never lost silently: a frame below the current
//! stack pointer was left by `longjmp` and is dropped. Before a C++
//! exception walks a stack, hooks on the unwinder's entry points
//! (`_Unwind_RaiseException`, `_Unwind_ForcedUnwind`, `_Unwind_Resume`,
//! `_Unwind_Resume_or_Rethrow`, placed by `session::arm`) run `rt_unwind`,
//! which puts the real return addresses back; a hook on `__cxa_begin_catch`
//! (`rt_caught`) drops the frames of the calls the exception left and gives
//! the calls still running their trampolines again, so their return probes
//! fire.
//!
//! # Calls timed by the trampolines themselves
//!
//! * `SpanInline`: `--chrome`'s return probe (`ProbeEntry::span`) done
//!   inline by lean trampolines: `rdtsc` at entry into the frame's `@entry`
//!   save, `rdtsc` at return, the call appended to the thread's span stage
//!   (runtime/src/chrome.rs explains the pipeline).
//! * `StatInline`: a return probe that only adds the call's duration to a
//!   statistic with per-thread copies (`ProbeEntry::latency`,
//!   compiler/src/codegen/mod.rs): count, sum, sum of squares, min, max and
//!   log bucket updated in the thread's copy, as the compiled handler would.
//! * `ClockOnly`: a function whose only probe is one of those gets
//!   trampolines that do nothing else: five registers saved, the slot kept
//!   in a register, the runtime library called only off the common path
//!   (`rt_span_flush` for a full stage). `-vv` names the functions timed so.
//!
//! # Alignment
//!
//! The hot trampolines are assembled by `assemble_aligned`: no branch (with
//! the instruction it fuses with) crosses or ends on a 32-byte boundary,
//! which on the Skylake family would keep the code out of the decoded-uop
//! cache (the JCC-erratum microcode). Padding is multi-byte NOPs, never
//! right after a call (its return address is a shadow frame's `tramp`).

use super::clobber::{RegMask, CALLER_SAVED};
use iced_x86::code_asm::*;

/// Why a trampoline could not be assembled.
pub type AsmError = IcedError;
use telco_abi::arch::x86_64 as regs;
use telco_abi::region::{Ctx, SavedRegs, CTX_SIZE};

pub use crate::arch::contract::{GoEntry, GoExit, Returns, Shadow, SpanInline, StatInline, Timed};
/// What one function's trampolines do (`arch::contract`), with this
/// architecture's register mask.
pub type Entry = crate::arch::contract::Entry<RegMask>;
pub type ClockOnly = crate::arch::contract::ClockOnly<RegMask>;

/// What a trampoline at a site inside a function leaves alone below the
/// stack pointer: the System V red zone (128 bytes), then two words of its
/// own (the flags, and rax while it moves them), which keep the stack's
/// alignment as it was.
pub const RED_ZONE: i32 = 144;

/// Inside a function: step over the red zone and save the arithmetic flags
/// (`lahf` and `seto`: SF ZF AF PF CF and OF, what compiled code tests; a
/// few cycles, where `pushfq`/`popfq` cost tens).
fn save_flags(a: &mut CodeAssembler) -> Result<(), IcedError> {
    a.lea(rsp, ptr(rsp - RED_ZONE))?;
    a.mov(qword_ptr(rsp + 8), rax)?;
    a.lahf()?;
    a.seto(al)?;
    a.mov(qword_ptr(rsp), rax)?;
    a.mov(rax, qword_ptr(rsp + 8))
}

/// The inverse of [`save_flags`]: OF from `add al, 0x7f` (it overflows
/// exactly when OF was saved as 1), the others from `sahf`; then back over
/// the red zone (`lea` leaves the flags).
fn restore_flags(a: &mut CodeAssembler) -> Result<(), IcedError> {
    a.mov(qword_ptr(rsp + 8), rax)?;
    a.mov(rax, qword_ptr(rsp))?;
    a.add(al, 0x7f)?;
    a.sahf()?;
    a.mov(rax, qword_ptr(rsp + 8))?;
    a.lea(rsp, ptr(rsp + RED_ZONE))
}

/// Entry side: the TSC into the frame's `@entry` save at rsi (the first
/// save of the `--chrome` probe's frame). Uses rax, rdx.
fn span_start(a: &mut CodeAssembler) -> Result<(), IcedError> {
    a.rdtsc()?;
    a.shl(rdx, 32)?;
    a.or(rax, rdx)?;
    a.mov(qword_ptr(rsi), rax)?;
    Ok(())
}

/// The clock at a return: rsi = the entry's TSC; unless the session is
/// over (then `leave`), rax = the call's duration in ticks and rdi = the
/// region. Uses rdx.
fn return_clock(a: &mut CodeAssembler, region: u64, leave: CodeLabel) -> Result<(), IcedError> {
    use core::mem::offset_of;
    use telco_abi::region::Header;
    a.mov(rdi, region)?;
    a.cmp(dword_ptr(rdi + offset_of!(Header, enabled) as i32), 0)?;
    a.je(leave)?;
    a.rdtsc()?;
    a.shl(rdx, 32)?;
    a.or(rax, rdx)?;
    a.sub(rax, rsi)
}

/// `return_clock`, then `leave` too for a call shorter than
/// `Header::span_min_ticks`.
fn span_clock(a: &mut CodeAssembler, region: u64, leave: CodeLabel) -> Result<(), IcedError> {
    use core::mem::offset_of;
    use telco_abi::region::Header;
    return_clock(a, region, leave)?;
    a.cmp(rax, qword_ptr(rdi + offset_of!(Header, span_min_ticks) as i32))?;
    a.jl(leave)
}

/// The duration (rax, in ticks; rdi = the region) in ns, added to the
/// copy of the thread whose slot is in rcx, then `leave`. Keeps rcx; uses
/// rax, rdx, rsi, rdi.
fn stat_add(a: &mut CodeAssembler, st: &StatInline, leave: CodeLabel) -> Result<(), IcedError> {
    use core::mem::offset_of;
    use telco_abi::region::{Header, Stat, ThreadSlot, HIST_LOG_BUCKET0, HIST_LOG_BUCKETS, TSC_SHIFT};
    let mut first = a.create_label();
    let mut min_ok = a.create_label();
    let mut max_ok = a.create_label();
    // ns = ticks × mult >> TSC_SHIFT (128-bit product).
    a.imul(qword_ptr(rdi + offset_of!(Header, tsc_mult) as i32))?;
    a.shrd(rax, rdx, TSC_SHIFT)?;
    // rsi = the copy of this thread's row, less its offset (in `f`).
    a.mov(esi, dword_ptr(rcx + offset_of!(ThreadSlot, index) as i32))?;
    a.imul_3(rsi, rsi, st.row as i32)?;
    a.add(rsi, rdi)?;
    let f = |field: usize| qword_ptr(rsi + (st.copy as usize + field) as i32);
    a.cmp(f(offset_of!(Stat, count)), 0)?;
    a.je(first)?;
    a.cmp(rax, f(offset_of!(Stat, min)))?;
    a.jge(min_ok)?;
    a.mov(f(offset_of!(Stat, min)), rax)?;
    a.set_label(&mut min_ok)?;
    a.cmp(rax, f(offset_of!(Stat, max)))?;
    a.jle(max_ok)?;
    a.mov(f(offset_of!(Stat, max)), rax)?;
    a.set_label(&mut max_ok)?;
    a.add(f(offset_of!(Stat, count)), 1)?;
    a.add(f(offset_of!(Stat, sum)), rax)?;
    if let Some(h) = st.hist {
        // log_bucket (rt.c): B0 + 1 + bsr(|v|) (B0 for 0), mirrored below
        // B0 for a negative v.
        let mut zero = a.create_label();
        let mut pos = a.create_label();
        a.mov(rdx, rax)?;
        a.neg(rdx)?;
        a.cmovs(rdx, rax)?;
        a.mov(edi, HIST_LOG_BUCKET0)?;
        a.bsr(rdx, rdx)?;
        a.jz(zero)?;
        a.lea(edi, ptr(rdx + (HIST_LOG_BUCKET0 + 1) as i32))?;
        a.set_label(&mut zero)?;
        a.test(rax, rax)?;
        a.jns(pos)?;
        a.neg(edi)?;
        a.add(edi, HIST_LOG_BUCKETS as i32)?;
        a.set_label(&mut pos)?;
        a.add(qword_ptr(rsi + rdi * 8 + (st.copy + h) as i32), 1)?;
    }
    a.jmp(leave)?;
    // The first value: the minimum and the maximum.
    a.set_label(&mut first)?;
    a.mov(f(offset_of!(Stat, min)), rax)?;
    a.mov(f(offset_of!(Stat, max)), rax)?;
    a.jmp(max_ok)
}

/// The call (rsi = start, rax = duration, in ticks) appended to the stage
/// of the slot in rcx (rdi = the region), then `leave`; `full` when that
/// filled the stage (for `rt_span_flush`). Keeps rcx and rsi; uses rax,
/// rdx, rdi, r8.
fn span_append(a: &mut CodeAssembler, inl: &SpanInline, leave: CodeLabel, full: CodeLabel) -> Result<(), IcedError> {
    use core::mem::offset_of;
    use telco_abi::region::{SpanEntry, SpanStage, ThreadSlot, SPAN_ENTRY_SIZE, SPAN_STAGE_HEADER};
    let mut room = a.create_label();
    // The stage: region + spans_off + row × stride.
    a.mov(edx, dword_ptr(rcx + offset_of!(ThreadSlot, index) as i32))?;
    a.imul_3(rdx, rdx, inl.stride as i32)?;
    a.add(rdx, rdi)?;
    a.mov(r8, inl.spans_off)?;
    a.add(rdx, r8)?;
    // Its count, never past the stage whatever it holds (a forked child
    // shares its parent's rows until it takes a slot over).
    let count = dword_ptr(rdx + offset_of!(SpanStage, count) as i32);
    a.mov(r8d, count)?;
    a.cmp(r8d, inl.batch as i32)?;
    a.jb(room)?;
    a.xor(r8d, r8d)?;
    a.set_label(&mut room)?;
    const _: () = assert!(SPAN_ENTRY_SIZE == 24);
    a.lea(rdi, ptr(r8 + r8 * 2))?;
    a.lea(rdi, ptr(rdx + rdi * 8 + SPAN_STAGE_HEADER as i32))?;
    a.mov(qword_ptr(rdi + offset_of!(SpanEntry, ts) as i32), rsi)?;
    a.mov(qword_ptr(rdi + offset_of!(SpanEntry, dur) as i32), rax)?;
    a.mov(eax, dword_ptr(rcx + offset_of!(ThreadSlot, tid) as i32))?;
    a.mov(dword_ptr(rdi + offset_of!(SpanEntry, tid) as i32), eax)?;
    // probe (u16) and the spare u16 (0) as one store.
    const _: () = assert!(offset_of!(SpanEntry, _pad) == offset_of!(SpanEntry, probe) + 2);
    a.mov(dword_ptr(rdi + offset_of!(SpanEntry, probe) as i32), inl.probe & 0xffff)?;
    a.inc(r8d)?;
    a.cmp(r8d, inl.batch as i32)?;
    a.jae(full)?;
    a.mov(count, r8d)?;
    a.jmp(leave)
}

/// Return side in a return trampoline that also calls handlers, with the
/// frame popped into the context (`Ctx::entry`, `Ctx::slot`, the frame at
/// `fb`): the call recorded as `rt_span` would, then `leave`. Uses rax,
/// rcx, rdx, rsi, rdi, r8 and what `rt_span_flush` changes.
fn span_end(
    a: &mut CodeAssembler,
    region: u64,
    fb: AsmRegister64,
    ctx_at: i32,
    inl: &SpanInline,
    leave: CodeLabel,
) -> Result<(), IcedError> {
    use core::mem::offset_of;
    let c = |f: usize| ctx_at + f as i32;
    let mut full = a.create_label();
    a.mov(rsi, qword_ptr(fb + c(offset_of!(Ctx, entry))))?;
    a.mov(rsi, qword_ptr(rsi))?;
    span_clock(a, region, leave)?;
    a.mov(rcx, qword_ptr(fb + c(offset_of!(Ctx, slot))))?;
    span_append(a, inl, leave, full)?;
    a.set_label(&mut full)?;
    a.mov(rdi, region)?;
    a.mov(rsi, qword_ptr(fb + c(offset_of!(Ctx, slot))))?;
    a.call(inl.flush)?;
    a.jmp(leave)
}

/// rdx = the address of frame `index` (a 32-bit register) of the thread
/// whose slot is in rcx, as `shadow_frame` (rt.c) computes it.
fn frame_addr(a: &mut CodeAssembler, sh: &Shadow, index: AsmRegister32) -> Result<(), IcedError> {
    use telco_abi::region::ThreadSlot;
    a.mov(edx, index)?;
    a.imul_3(rdx, rdx, sh.frame_size as i32)?;
    a.add(rdx, qword_ptr(rcx + core::mem::offset_of!(ThreadSlot, frames) as i32))?;
    Ok(())
}

/// rt_ret_push's common case inline, the slot in rcx: room on the shadow
/// stack and the top frame a caller's (a higher stack slot), else `slow`.
/// The frame for the return address at `ret_slot` (rsi) is filled with
/// `probe` and the trampoline address `tramp` puts in rdi (which also
/// replaces the return address if `replace`), and the depth stored. Leaves
/// rdx = the frame; uses rax, rdi.
fn push_frame(
    a: &mut CodeAssembler,
    sh: &Shadow,
    ret_slot: AsmMemoryOperand,
    probe: u32,
    tramp: &dyn Fn(&mut CodeAssembler) -> Result<(), IcedError>,
    replace: bool,
    slow: CodeLabel,
) -> Result<(), IcedError> {
    use core::mem::offset_of;
    use telco_abi::region::{ShadowFrame, ThreadSlot};
    let mut room = a.create_label();
    let depth = dword_ptr(rcx + offset_of!(ThreadSlot, depth) as i32);
    a.mov(eax, depth)?;
    a.cmp(eax, sh.depth as i32)?;
    a.jae(slow)?;
    frame_addr(a, sh, eax)?;
    a.lea(rsi, ret_slot)?;
    a.test(eax, eax)?;
    a.jz(room)?;
    let top_sp = offset_of!(ShadowFrame, sp) as i32 - sh.frame_size as i32;
    a.cmp(qword_ptr(rdx + top_sp), rsi)?;
    a.jbe(slow)?;
    a.set_label(&mut room)?;
    a.mov(rdi, qword_ptr(rsi))?;
    a.mov(qword_ptr(rdx + offset_of!(ShadowFrame, ret) as i32), rdi)?;
    a.mov(qword_ptr(rdx + offset_of!(ShadowFrame, sp) as i32), rsi)?;
    a.mov(dword_ptr(rdx + offset_of!(ShadowFrame, probe) as i32), probe)?;
    tramp(a)?;
    a.mov(qword_ptr(rdx + offset_of!(ShadowFrame, tramp) as i32), rdi)?;
    if replace {
        a.mov(qword_ptr(rsi), rdi)?;
    }
    a.inc(eax)?;
    a.mov(depth, eax)
}

/// rt_ret_pop's common case inline, the slot in rcx: the top frame is this
/// very call's (its return address was at `ret_slot`, just below the
/// stack pointer after the return), else `undo`. Pops it; leaves rdx =
/// the frame; uses rax, rsi.
fn pop_frame(a: &mut CodeAssembler, sh: &Shadow, ret_slot: AsmMemoryOperand, undo: CodeLabel) -> Result<(), IcedError> {
    use core::mem::offset_of;
    use telco_abi::region::{ShadowFrame, ThreadSlot};
    let depth = dword_ptr(rcx + offset_of!(ThreadSlot, depth) as i32);
    a.mov(eax, depth)?;
    // None left (the depth was 0).
    a.dec(eax)?;
    a.js(undo)?;
    frame_addr(a, sh, eax)?;
    a.lea(rsi, ret_slot)?;
    a.cmp(qword_ptr(rdx + offset_of!(ShadowFrame, sp) as i32), rsi)?;
    a.jne(undo)?;
    a.mov(depth, eax)
}

/// The frame: SavedRegs, then the context.
fn frame_size(ctx_size: u32) -> i32 {
    let regs = core::mem::size_of::<SavedRegs>() as i32;
    (regs + ctx_size.max(CTX_SIZE as u32) as i32 + 15) & !15
}

const REGS: [AsmRegister64; 16] = [rax, rbx, rcx, rdx, rsi, rdi, rbp, rsp, r8, r9, r10, r11, r12, r13, r14, r15];

/// Store every register but rsp in the SavedRegs block at [rsp].
fn save_regs(a: &mut CodeAssembler) -> Result<(), IcedError> {
    for (i, r) in REGS.iter().enumerate() {
        if i != 7 {
            a.mov(qword_ptr(rsp + (8 * i) as i32), *r)?;
        }
    }
    Ok(())
}

/// Store, or reload, the registers of `mask` in the SavedRegs block at
/// [base].
fn store_mask(a: &mut CodeAssembler, base: AsmRegister64, mask: RegMask) -> Result<(), IcedError> {
    for (i, r) in REGS.iter().enumerate() {
        if mask & (1 << i) != 0 {
            a.mov(qword_ptr(base + (8 * i) as i32), *r)?;
        }
    }
    Ok(())
}

fn load_mask(a: &mut CodeAssembler, base: AsmRegister64, mask: RegMask) -> Result<(), IcedError> {
    for (i, r) in REGS.iter().enumerate() {
        if mask & (1 << i) != 0 {
            a.mov(*r, qword_ptr(base + (8 * i) as i32))?;
        }
    }
    Ok(())
}

/// Zero the context fields a trampoline owns and point it at the registers.
fn init_ctx(a: &mut CodeAssembler, ctx_at: i32) -> Result<(), IcedError> {
    let c = |f: usize| ctx_at + f as i32;
    a.mov(qword_ptr(rsp + c(core::mem::offset_of!(Ctx, regs))), rsp)?;
    a.xor(eax, eax)?;
    a.mov(dword_ptr(rsp + c(core::mem::offset_of!(Ctx, flags))), eax)?;
    a.mov(dword_ptr(rsp + c(core::mem::offset_of!(Ctx, go_goid))), eax)?;
    a.mov(qword_ptr(rsp + c(core::mem::offset_of!(Ctx, tid))), rax)?;
    a.mov(qword_ptr(rsp + c(core::mem::offset_of!(Ctx, tok_pos))), rax)?;
    a.mov(qword_ptr(rsp + c(core::mem::offset_of!(Ctx, entry))), rax)?;
    Ok(())
}

const SR_RAX: RegMask = 1 << regs::RAX;
const SR_RCX: RegMask = 1 << regs::RCX;
const SR_RDX: RegMask = 1 << regs::RDX;
const SR_RSI: RegMask = 1 << regs::RSI;
const SR_RDI: RegMask = 1 << regs::RDI;
const SR_R8: RegMask = 1 << regs::R8;

/// Assemble at `at` so that no branch (with the instruction it fuses
/// with) crosses or ends on a 32-byte boundary. On the Skylake family the
/// microcode that fixed the JCC erratum keeps such code out of the decoded
/// uop cache, and a trampoline is short enough for that to cost several
/// cycles a call (measured: up to 4 ns on (b) in docs/PERFORMANCE.md, by
/// where the code happened to land). Padding is multi-byte NOPs before the
/// branch; labels stay on the branch, so only falling through runs them.
/// Never right after a call: its return address (a shadow frame's
/// `tramp`, which rt.c compares with stack slots) would be the padding's.
fn assemble_aligned(a: &mut CodeAssembler, at: u64) -> Result<Vec<u8>, IcedError> {
    use iced_x86::{BlockEncoder, BlockEncoderOptions, FlowControl, Instruction, InstructionBlock, Mnemonic};
    const NOPS: [&[u8]; 9] = [
        &[0x90],
        &[0x66, 0x90],
        &[0x0f, 0x1f, 0x00],
        &[0x0f, 0x1f, 0x40, 0x00],
        &[0x0f, 0x1f, 0x44, 0x00, 0x00],
        &[0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00],
        &[0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00],
        &[0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
        &[0x66, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
    ];
    let is_branch = |i: &Instruction| {
        !matches!(i.flow_control(), FlowControl::Next | FlowControl::Exception | FlowControl::Interrupt)
    };
    // An instruction the decoders fuse with a following conditional jump.
    let fuses = |i: &Instruction| {
        matches!(
            i.mnemonic(),
            Mnemonic::Cmp
                | Mnemonic::Test
                | Mnemonic::Add
                | Mnemonic::Sub
                | Mnemonic::And
                | Mnemonic::Inc
                | Mnemonic::Dec
        )
    };
    let mut list: Vec<Instruction> = a.instructions().to_vec();
    let encode = |list: &[Instruction]| {
        BlockEncoder::encode(64, InstructionBlock::new(list, at), BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)
    };
    // Usually two rounds: pad by the offsets of the first, check (a branch
    // may have grown from short to near).
    for _ in 0..8 {
        let r = encode(&list)?;
        let offs = &r.new_instruction_offsets;
        // (A branch the encoder had to rewrite has no offset: leave it.)
        if offs.contains(&u32::MAX) {
            return Ok(r.code_buffer);
        }
        let len = |k: usize| offs.get(k + 1).copied().unwrap_or(r.code_buffer.len() as u32) - offs[k];
        let mut out = Vec::with_capacity(list.len() + 8);
        let mut shift = 0u64;
        let mut padded = false;
        let mut k = 0;
        while k < list.len() {
            // A branch, or a fusing instruction and the jump after it.
            let pair =
                fuses(&list[k]) && list.get(k + 1).is_some_and(|j| j.flow_control() == FlowControl::ConditionalBranch);
            let n = if pair { 2 } else { 1 };
            let after_call =
                k > 0 && matches!(list[k - 1].flow_control(), FlowControl::Call | FlowControl::IndirectCall);
            if (pair || is_branch(&list[k])) && !after_call {
                let start = at + u64::from(offs[k]) + shift;
                let end = start + (k..k + n).map(|j| u64::from(len(j))).sum::<u64>();
                if start / 32 != (end - 1) / 32 || end % 32 == 0 {
                    let mut pad = (32 - start % 32) as usize;
                    shift += pad as u64;
                    padded = true;
                    while pad > 0 {
                        let b = NOPS[pad.min(NOPS.len()) - 1];
                        out.push(Instruction::with_declare_byte(b)?);
                        pad -= b.len();
                    }
                }
            }
            out.extend_from_slice(&list[k..k + n]);
            k += n;
        }
        if !padded {
            return Ok(r.code_buffer);
        }
        list = out;
    }
    Ok(encode(&list)?.code_buffer)
}

/// The thread's slot into rcx, marked busy, without a call in the common
/// case: the slot `thread_slot` (rt.c) would find at the first place it
/// looks, owned by this thread and not busy. Otherwise `slow` (rt_enter
/// decides: another place, a new slot, a slot to take over, busy, none).
/// Uses rax, rcx, rdi.
fn find_slot(a: &mut CodeAssembler, e: &Shadow, slow: CodeLabel) -> Result<(), IcedError> {
    use core::mem::offset_of;
    use telco_abi::region::ThreadSlot;
    let n = e.nthreads.max(1);
    let bits = n.trailing_zeros();
    let size = core::mem::size_of::<ThreadSlot>().trailing_zeros();
    // (nthreads is a power of two, at most 2^26: layout.rs.)
    let shift = 32 - (bits + size).min(32);
    a.mov(rax, qword_ptr(0u64).fs())?;
    a.test(rax, rax)?;
    a.jz(slow)?;
    // The first place: the top `bits` bits of the thread pointer's low
    // half times 0x9e3779b9 (a multiplicative hash), times the slot size.
    a.imul_3(ecx, eax, 0x9e37_79b9u32 as i32)?;
    a.shr(ecx, shift)?;
    a.and(ecx, ((n - 1) << size) as i32)?;
    a.mov(rdi, e.threads)?;
    a.add(rcx, rdi)?;
    a.cmp(qword_ptr(rcx + offset_of!(ThreadSlot, key) as i32), rax)?;
    a.jne(slow)?;
    let busy = dword_ptr(rcx + offset_of!(ThreadSlot, busy) as i32);
    if e.tid_off != 0 {
        // The same thread, not a later one with the same thread pointer
        // (or, in a forked child, the copy of its parent's), and not busy:
        // the thread id with a zero above it against `tid` and `busy`.
        const _: () = assert!(offset_of!(ThreadSlot, busy) == offset_of!(ThreadSlot, tid) + 4);
        a.mov(edi, dword_ptr(rax + e.tid_off as i32))?;
        a.cmp(rdi, qword_ptr(rcx + offset_of!(ThreadSlot, tid) as i32))?;
        a.jne(slow)?;
    } else {
        a.cmp(busy, 0)?;
        a.jne(slow)?;
    }
    a.mov(busy, 1)?;
    Ok(())
}

/// Assemble the part before the relocated instructions. The caller appends
/// `x86::relocate(.., to = at + returned length)`.
///
/// With every register saved (`lean` None) the frame is reached through
/// rbx and the stack is aligned by hand; a lean trampoline addresses its
/// frame from rsp and keeps the alignment the ABI gives a function entry
/// (rsp = 8 mod 16; were it not, the handlers still run: they use no
/// instruction that needs an aligned stack, which `clobber` checks).
pub fn entry_prefix(e: &Entry) -> Result<Vec<u8>, IcedError> {
    if let Some(g) = &e.go {
        return go_entry_prefix(e, g);
    }
    use telco_abi::region::ThreadSlot;
    let ctx_at = core::mem::size_of::<SavedRegs>() as i32;
    let c = |f: usize| ctx_at + f as i32;
    let mut a = CodeAssembler::new(64)?;
    // Inside a function: past the red zone, the flags saved (restored
    // before the relocated instructions run). The frame is below them.
    let below = if e.inside {
        save_flags(&mut a)?;
        RED_ZONE
    } else {
        0
    };
    // What this trampoline saves (lean), and the frame base register.
    let (frame, fb, saved) = match e.lean {
        None => (frame_size(e.ctx_size) + 16, rbx, 0),
        Some(m) => {
            let mut used = SR_RAX | SR_RCX | SR_RDI | SR_RSI;
            if !e.returns.is_empty() {
                used |= SR_RDX | SR_R8;
            }
            (frame_size(e.ctx_size) + 8, rsp, (m | used) & CALLER_SAVED)
        }
    };
    a.lea(rsp, ptr(rsp - frame))?;
    if e.lean.is_none() {
        save_regs(&mut a)?;
        a.pushfq()?;
        a.pop(rax)?;
        a.mov(qword_ptr(rsp + 8 * 17), rax)?;
        a.lea(rax, ptr(rsp + frame + below))?;
        a.mov(qword_ptr(rsp + 8 * 7), rax)?;
        a.mov(rax, e.addr)?;
        a.mov(qword_ptr(rsp + 8 * 16), rax)?;
        init_ctx(&mut a, ctx_at)?;
        a.mov(rax, e.addr)?;
        a.mov(qword_ptr(rsp + c(core::mem::offset_of!(Ctx, addr))), rax)?;
        // Handlers run on a 16-byte aligned stack; rbx (saved above, and
        // callee-saved in them) keeps the frame, and so does the word at
        // the aligned stack's top (pushed twice: still aligned), where an
        // unwinder inside a handler finds it (arch::x86_64::frames).
        a.mov(rbx, rsp)?;
        a.and(rsp, -16)?;
        a.push(rbx)?;
        a.push(rbx)?;
    } else {
        store_mask(&mut a, rsp, saved)?;
        if !e.returns.is_empty() {
            a.mov(qword_ptr(rsp + c(core::mem::offset_of!(Ctx, entry))), 0)?;
        }
    }
    // Return probes: the function is called from here (`tramp_after` is
    // where it returns), so its `ret` pops the return-stack entry our
    // `call` pushed and is predicted; with `.itrace` it is jumped to, and
    // returns to the return trampoline through the replaced address.
    let call_in = !e.returns.is_empty() && e.itrace.is_none();
    let mut tramp_after = a.create_label();
    let mut reloc = a.create_label();
    let ret_to = |a: &mut CodeAssembler, r: AsmRegister64| -> Result<(), IcedError> {
        if call_in {
            a.lea(r, ptr(tramp_after))
        } else {
            a.mov(r, e.ret_tramp)
        }
    };
    let mut slow = a.create_label();
    let mut have = a.create_label();
    let mut done = a.create_label();
    // A hook called on every hit (full path: rbx holds the frame); with
    // nothing else to run, no slot is looked for (a thread without one
    // would count as a skipped hit).
    if let (Some((f, arg)), None) = (e.always, e.lean) {
        a.mov(rdi, arg)?;
        a.lea(rsi, ptr(fb + ctx_at))?;
        a.call(f)?;
        if e.handlers.is_empty() && e.returns.is_empty() {
            a.jmp(done)?;
        }
    }
    // The thread's slot, marked busy; none (or busy already): skip.
    find_slot(&mut a, &e.shadow, slow)?;
    a.set_label(&mut have)?;
    a.mov(qword_ptr(fb + c(core::mem::offset_of!(Ctx, slot))), rcx)?;
    for &(handler, probe) in &e.handlers {
        a.mov(dword_ptr(fb + c(core::mem::offset_of!(Ctx, probe))), probe)?;
        a.mov(rdi, e.region)?;
        a.lea(rsi, ptr(fb + ctx_at))?;
        a.call(handler)?;
    }
    // rcx still holds the slot unless a call came between.
    let mut reload_slot = !e.handlers.is_empty();
    for &(probe, entry_handler) in &e.returns {
        let mut pushed = a.create_label();
        if e.lean.is_some() {
            // rt_ret_push's common case inline.
            use telco_abi::region::SHADOW_FRAME_HEADER;
            let mut slow = a.create_label();
            if reload_slot {
                a.mov(rcx, qword_ptr(fb + c(core::mem::offset_of!(Ctx, slot))))?;
            }
            reload_slot = true;
            push_frame(&mut a, &e.shadow, ptr(fb + frame), probe, &|a| ret_to(a, rdi), true, slow)?;
            a.lea(rax, ptr(rdx + SHADOW_FRAME_HEADER as i32))?;
            a.jmp(pushed)?;
            a.set_label(&mut slow)?;
        }
        // rt_ret_push(region, ctx, &return address, return trampoline, probe)
        a.mov(rdi, e.region)?;
        a.lea(rsi, ptr(fb + ctx_at))?;
        a.lea(rdx, ptr(fb + frame))?;
        ret_to(&mut a, rcx)?;
        a.mov(r8d, probe)?;
        a.call(e.ret_push)?;
        a.set_label(&mut pushed)?;
        if e.lean.is_some() && e.span == Some(probe) {
            let mut skip = a.create_label();
            a.test(rax, rax)?;
            a.jz(skip)?;
            a.mov(rsi, rax)?;
            span_start(&mut a)?;
            a.set_label(&mut skip)?;
            a.nop()?;
        } else if let Some(h) = entry_handler {
            let mut skip = a.create_label();
            a.test(rax, rax)?;
            a.jz(skip)?;
            a.mov(qword_ptr(fb + c(core::mem::offset_of!(Ctx, entry))), rax)?;
            a.mov(dword_ptr(fb + c(core::mem::offset_of!(Ctx, probe))), probe)?;
            a.mov(rdi, e.region)?;
            a.lea(rsi, ptr(fb + ctx_at))?;
            a.call(h)?;
            a.mov(qword_ptr(fb + c(core::mem::offset_of!(Ctx, entry))), 0)?;
            a.set_label(&mut skip)?;
            a.nop()?;
        }
    }
    // Leave the handlers: the slot is not busy any more.
    a.mov(rax, qword_ptr(fb + c(core::mem::offset_of!(Ctx, slot))))?;
    a.mov(dword_ptr(rax + core::mem::offset_of!(ThreadSlot, busy) as i32), 0)?;
    a.set_label(&mut done)?;
    if call_in {
        // Was a frame pushed (the return address replaced)? The flags
        // carry the answer past the reloads (mov and lea leave them).
        a.lea(rax, ptr(tramp_after))?;
        a.cmp(qword_ptr(fb + frame), rax)?;
    }
    match e.lean {
        None => {
            // Every register but rsp: the handlers preserved the
            // callee-saved ones, so their saved copies differ only where a
            // guru-mode write changed one (`$x = v` on a variable DWARF
            // places in rbx or r12).
            a.mov(rsp, rbx)?;
            for i in [0usize, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15] {
                a.mov(REGS[i], qword_ptr(rsp + (8 * i) as i32))?;
            }
        }
        Some(_) => load_mask(&mut a, rsp, saved)?,
    }
    a.lea(rsp, ptr(rsp + frame))?;
    if e.inside {
        restore_flags(&mut a)?;
    }
    let mut after = a.create_label();
    a.jmp(after)?;
    // Not the common case: rt_enter finds (or claims) the slot, or says
    // skip. Around the call, save what this trampoline does not already.
    a.set_label(&mut slow)?;
    let extra = CALLER_SAVED & !saved & !(SR_RAX | SR_RCX);
    if e.lean.is_some() {
        store_mask(&mut a, rsp, extra)?;
    }
    a.mov(rdi, e.region)?;
    a.call(e.enter)?;
    if e.lean.is_some() {
        load_mask(&mut a, rsp, extra)?;
    }
    a.mov(rcx, rax)?;
    a.test(rax, rax)?;
    a.jnz(have)?;
    a.jmp(done)?;
    a.set_label(&mut after)?;
    if let Some((wait, func)) = e.itrace {
        itrace_gate(&mut a, e.region, wait, func)?;
    } else if call_in {
        // Call the function in place of its caller: drop the (saved)
        // return address; the call stores tramp_after in the same slot, so
        // the function sees the stack it would have.
        a.jne(reloc)?;
        a.lea(rsp, ptr(rsp + 8))?;
        a.call(reloc)?;
        a.set_label(&mut tramp_after)?;
        a.jmp(e.ret_tramp)?;
        a.set_label(&mut reloc)?;
        a.zero_bytes()?;
    } else {
        a.zero_bytes()?;
    }
    assemble_aligned(&mut a, e.at)
}

/// A Go function's entry trampoline. Go's stacks are small and move, so
/// nothing of ours goes on the goroutine's: the handlers run on the
/// thread slot's own stack (`ThreadSlot::go_stack`). In order, using only
/// R12, R13 and the flags until the switch (Go's register ABI leaves them
/// dead at a function's entry):
///
/// 1. the function's own stack-bound check: when it fails, its relocated
///    copy after this prefix branches to the function's `morestack` call,
///    which starts the function again once the stack has grown, so a call
///    fires its probes once;
/// 2. `g` (R14, which the check just used) must be the goroutine its
///    thread runs, not `m.g0` or `m.gsignal` (Go's runtime on its
///    scheduler or signal stack), with its stack pointer within
///    `g.stack`; otherwise the hit is skipped and counted
///    (`Header::skipped_go`) and the function goes on;
/// 3. the thread's slot, keyed by its `m` (a Go program without cgo keeps
///    nothing at the thread pointer's word 0) and checked against
///    `m.procid` as the C library's thread id is elsewhere; off the common
///    path `rt_enter_go` finds or takes one, run on Go's scheduler stack
///    (`g0`, idle while the goroutine runs: below `g0.sched.sp`, where
///    Go's own use of it starts) with the caller-saved registers kept;
/// 4. onto the slot's stack, the goroutine's stack pointer kept on top;
///    the full frame, every register saved (`SavedRegs::rsp` the
///    goroutine's), the context naming the goid's offset in `g`; the
///    handlers;
/// 5. every register back, the goroutine's stack pointer back, and on
///    after the check.
///
/// With return probes, after the entry handlers each return probe pushes
/// a frame for the call in its goroutine's record (`rt_go_push`) and its
/// `@entry` handler fills the frame's saves; `go_return_trampoline` pops
/// it at the function's returns.
fn go_entry_prefix(e: &Entry, g: &GoEntry) -> Result<Vec<u8>, IcedError> {
    use core::mem::offset_of;
    let ctx_at = core::mem::size_of::<SavedRegs>() as i32;
    let c = |f: usize| ctx_at + f as i32;
    let mut a = CodeAssembler::new(64)?;
    let mut reloc = a.create_label();
    let mut back = a.create_label();
    let mut go = GoLabels::new(&mut a);
    // 1. The check first: its branches (to `morestack`) go to its
    // relocated copy, which takes them again.
    // (Decoded instructions' addresses cleared: the assembler names its
    // labels by instruction address.)
    let mut dec = iced_x86::Decoder::new(64, &g.check, iced_x86::DecoderOptions::NONE);
    for mut ins in &mut dec {
        ins.set_ip(0);
        match ins.mnemonic() {
            iced_x86::Mnemonic::Jb => a.jb(reloc)?,
            iced_x86::Mnemonic::Jbe => a.jbe(reloc)?,
            _ => a.add_instruction(ins)?,
        }
    }
    // 2.-4. The goroutine's slot, its stack, the frame.
    go_find_slot(&mut a, &g.layout, &e.shadow, &mut go)?;
    let frame = frame_size(e.ctx_size) + 16;
    go_frame(&mut a, frame, &g.layout, &mut go)?;
    // Where it was called from is not known here: rip is the function's.
    a.mov(rax, e.addr)?;
    a.mov(qword_ptr(rsp + 8 * 16), rax)?;
    a.mov(qword_ptr(rsp + c(offset_of!(Ctx, addr))), rax)?;
    a.mov(rbx, rsp)?;
    a.push(rbx)?;
    a.push(rbx)?;
    for &(handler, probe) in &e.handlers {
        a.mov(dword_ptr(rbx + c(offset_of!(Ctx, probe))), probe)?;
        a.mov(rdi, e.region)?;
        a.lea(rsi, ptr(rbx + ctx_at))?;
        a.call(handler)?;
    }
    // Return probes: a frame each (in increasing order, as rt_go_push
    // expects), its @entry saves by the probe's entry handler.
    let mut returns = e.returns.clone();
    returns.sort_by_key(|&(probe, _)| probe);
    for (probe, entry) in returns {
        a.mov(rdi, e.region)?;
        a.lea(rsi, ptr(rbx + ctx_at))?;
        a.mov(edx, probe)?;
        a.call(g.push)?;
        if let Some(h) = entry {
            let mut next = a.create_label();
            a.test(rax, rax)?;
            a.jz(next)?;
            a.mov(qword_ptr(rbx + c(offset_of!(Ctx, entry))), rax)?;
            a.mov(dword_ptr(rbx + c(offset_of!(Ctx, probe))), probe)?;
            a.mov(rdi, e.region)?;
            a.lea(rsi, ptr(rbx + ctx_at))?;
            a.call(h)?;
            a.set_label(&mut next)?;
        }
    }
    // 5. Every register back (a guru-mode `$argN = v` included), the
    // goroutine's stack, and on.
    go_unframe(&mut a, frame)?;
    a.jmp(qword_ptr(back))?;
    go_slow_path(&mut a, e.region, g.enter, &g.layout, &mut go)?;
    a.jmp(qword_ptr(back))?;
    go_skip(&mut a, e.region, &mut go)?;
    a.jmp(qword_ptr(back))?;
    a.set_label(&mut back)?;
    a.dq(&[g.back])?;
    a.set_label(&mut go.threads)?;
    a.dq(&[e.shadow.threads])?;
    // The relocated check (and the jump back after it) follows.
    a.set_label(&mut reloc)?;
    a.zero_bytes()?;
    assemble_aligned(&mut a, e.at)
}

/// A return of a Go function with return probes (`GoExit`): its epilogue
/// (`mov rbp, [rsp+X]; add rsp, Y`, `GoReturn` in telco_abi::artifact)
/// jumps here. The epilogue runs first, without its `ret`: the stack
/// pointer is then where it was at the entry, on the return address,
/// which names the call (its depth in the goroutine's stack). The rest
/// as at the entry (`go_entry_prefix`, whose steps 2-5 these are, with
/// R12, R13 and the flags, dead at a return in Go's register ABI, used
/// before the switch): the goroutine's slot, the slot's stack, every
/// register saved (`$return` is RAX, the first result), and per return
/// probe, in decreasing order, `rt_go_pop` (the call's frame, its saves
/// copied onto this stack) and the handler when it found one. Then
/// every register back, and `ret`.
pub fn go_return_trampoline(x: &GoExit) -> Result<Vec<u8>, IcedError> {
    use core::mem::offset_of;
    let ctx_at = core::mem::size_of::<SavedRegs>() as i32;
    let c = |f: usize| ctx_at + f as i32;
    let mut a = CodeAssembler::new(64)?;
    let mut go = GoLabels::new(&mut a);
    let mut dec = iced_x86::Decoder::new(64, &x.epilogue, iced_x86::DecoderOptions::NONE);
    for mut ins in &mut dec {
        ins.set_ip(0);
        a.add_instruction(ins)?;
    }
    go_find_slot(&mut a, &x.layout, &x.shadow, &mut go)?;
    // The frame, and room for the @entry saves of one call.
    let saves = x.shadow.frame_size.saturating_sub(telco_abi::region::SHADOW_FRAME_HEADER as u32);
    let saves_at = frame_size(x.ctx_size);
    let frame = saves_at + 16 + ((saves as i32 + 15) & !15);
    go_frame(&mut a, frame, &x.layout, &mut go)?;
    // `uaddr()`: where the call returns (the pc, as SystemTap's).
    a.mov(rax, qword_ptr(r12))?;
    a.mov(qword_ptr(rsp + 8 * 16), rax)?;
    a.mov(qword_ptr(rsp + c(offset_of!(Ctx, addr))), rax)?;
    a.mov(rbx, rsp)?;
    a.push(rbx)?;
    a.push(rbx)?;
    let mut returns = x.returns.clone();
    returns.sort_by_key(|&(probe, _)| core::cmp::Reverse(probe));
    for (probe, handler) in returns {
        let mut next = a.create_label();
        a.mov(rdi, x.region)?;
        a.lea(rsi, ptr(rbx + ctx_at))?;
        a.mov(edx, probe)?;
        a.lea(rcx, ptr(rbx + saves_at))?;
        a.call(x.pop)?;
        a.test(rax, rax)?;
        a.jz(next)?;
        a.mov(rdi, x.region)?;
        a.lea(rsi, ptr(rbx + ctx_at))?;
        a.call(handler)?;
        a.set_label(&mut next)?;
    }
    go_unframe(&mut a, frame)?;
    a.ret()?;
    go_slow_path(&mut a, x.region, x.enter, &x.layout, &mut go)?;
    a.ret()?;
    go_skip(&mut a, x.region, &mut go)?;
    a.ret()?;
    a.set_label(&mut go.threads)?;
    a.dq(&[x.shadow.threads])?;
    assemble_aligned(&mut a, x.at)
}

/// The labels the Go trampolines' common steps share.
struct GoLabels {
    /// The hit is skipped (counted), or the slot released then skipped.
    skip: CodeLabel,
    release: CodeLabel,
    /// The slot (R13) is this thread's and busy: onto its stack.
    have: CodeLabel,
    /// `rt_enter_go` finds one.
    slow: CodeLabel,
    /// The address of the thread slots (a word in the trampoline).
    threads: CodeLabel,
}

impl GoLabels {
    fn new(a: &mut CodeAssembler) -> GoLabels {
        GoLabels {
            skip: a.create_label(),
            release: a.create_label(),
            have: a.create_label(),
            slow: a.create_label(),
            threads: a.create_label(),
        }
    }
}

/// Steps 2 and 3 of a Go trampoline (`go_entry_prefix`): `g` (R14) the
/// goroutine its thread runs, on its own stack, else skip; the slot at its
/// first place by `m`, this thread's and not busy (R13, marked busy),
/// else the slow path. Uses R12, R13 and the flags.
fn go_find_slot(
    a: &mut CodeAssembler,
    l: &telco_abi::artifact::GoLayout,
    shadow: &Shadow,
    go: &mut GoLabels,
) -> Result<(), IcedError> {
    use core::mem::offset_of;
    use telco_abi::region::ThreadSlot;
    let (g_m, m_g0, m_gsignal, procid) =
        (i32::from(l.g_m), i32::from(l.m_g0), i32::from(l.m_gsignal), i32::from(l.m_procid));
    let slot_field = |f: usize| qword_ptr(r13 + f as i32);
    let n = shadow.nthreads.max(1);
    let size = core::mem::size_of::<ThreadSlot>().trailing_zeros();
    let shift = 32 - (n.trailing_zeros() + size).min(32);
    a.mov(r12, qword_ptr(r14 + g_m))?;
    a.test(r12, r12)?;
    a.jz(go.skip)?;
    a.cmp(r14, qword_ptr(r12 + m_g0))?;
    a.je(go.skip)?;
    a.cmp(r14, qword_ptr(r12 + m_gsignal))?;
    a.je(go.skip)?;
    a.cmp(rsp, qword_ptr(r14))?;
    a.jb(go.skip)?;
    a.cmp(rsp, qword_ptr(r14 + 8))?;
    a.jae(go.skip)?;
    a.imul_3(r13d, r12d, 0x9e37_79b9u32 as i32)?;
    a.shr(r13d, shift)?;
    a.and(r13d, ((n - 1) << size) as i32)?;
    a.add(r13, qword_ptr(go.threads))?;
    a.cmp(slot_field(offset_of!(ThreadSlot, key)), r12)?;
    a.jne(go.slow)?;
    const _: () = assert!(offset_of!(ThreadSlot, busy) == offset_of!(ThreadSlot, tid) + 4);
    a.mov(r12d, dword_ptr(r12 + procid))?;
    a.cmp(r12, slot_field(offset_of!(ThreadSlot, tid)))?;
    a.jne(go.slow)?;
    a.mov(dword_ptr(r13 + offset_of!(ThreadSlot, busy) as i32), 1)?;
    Ok(())
}

/// Step 4 of a Go trampoline: onto the slot's stack (R13's), the
/// goroutine's stack pointer on top (and in R12); a frame of `frame`
/// bytes, every register saved in its `SavedRegs` (rsp the goroutine's,
/// no flags: they are dead at a Go function's entry and return, and
/// `pushfq` costs tens of cycles), the context filled but for `addr`
/// (and the saved rip), which the caller sets from RAX.
fn go_frame(
    a: &mut CodeAssembler,
    frame: i32,
    l: &telco_abi::artifact::GoLayout,
    go: &mut GoLabels,
) -> Result<(), IcedError> {
    use core::mem::offset_of;
    use telco_abi::region::ThreadSlot;
    let ctx_at = core::mem::size_of::<SavedRegs>() as i32;
    let c = |f: usize| ctx_at + f as i32;
    a.set_label(&mut go.have)?;
    a.mov(r12, qword_ptr(r13 + offset_of!(ThreadSlot, go_stack) as i32))?;
    a.test(r12, r12)?;
    a.jz(go.release)?;
    a.xchg(r12, rsp)?;
    a.push(r12)?;
    a.push(r12)?;
    a.lea(rsp, ptr(rsp - frame))?;
    save_regs(a)?;
    a.mov(qword_ptr(rsp + 8 * 17), 0)?;
    a.mov(qword_ptr(rsp + 8 * 7), r12)?;
    init_ctx(a, ctx_at)?;
    a.mov(dword_ptr(rsp + c(offset_of!(Ctx, go_goid))), u32::from(l.g_goid))?;
    a.mov(qword_ptr(rsp + c(offset_of!(Ctx, slot))), r13)?;
    Ok(())
}

/// Step 5 of a Go trampoline, with the frame at RBX: the slot not busy,
/// every register back (a guru-mode `$argN = v` included), the
/// goroutine's stack.
fn go_unframe(a: &mut CodeAssembler, frame: i32) -> Result<(), IcedError> {
    use core::mem::offset_of;
    use telco_abi::region::ThreadSlot;
    let ctx_at = core::mem::size_of::<SavedRegs>() as i32;
    a.mov(rax, qword_ptr(rbx + ctx_at + offset_of!(Ctx, slot) as i32))?;
    a.mov(dword_ptr(rax + offset_of!(ThreadSlot, busy) as i32), 0)?;
    a.mov(rsp, rbx)?;
    for i in [0usize, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15] {
        a.mov(REGS[i], qword_ptr(rsp + (8 * i) as i32))?;
    }
    a.lea(rsp, ptr(rsp + frame))?;
    a.pop(rsp)?;
    Ok(())
}

/// The slow path of a Go trampoline's step 3: rt_enter_go(region, m,
/// m.procid) on g0's stack, below `sched.sp` with GO_STACK_ROOM free, the
/// registers it may change kept there: the slot (busy, to `have`), or 0
/// (counted: none, or busy), after which the caller's way on follows.
fn go_slow_path(
    a: &mut CodeAssembler,
    region: u64,
    enter: u64,
    l: &telco_abi::artifact::GoLayout,
    go: &mut GoLabels,
) -> Result<(), IcedError> {
    use telco_abi::region::GO_STACK_ROOM;
    let g_m = i32::from(l.g_m);
    a.set_label(&mut go.slow)?;
    a.mov(r12, qword_ptr(r14 + g_m))?;
    a.mov(r12, qword_ptr(r12 + i32::from(l.m_g0)))?;
    a.test(r12, r12)?;
    a.jz(go.skip)?;
    a.mov(r13, qword_ptr(r12 + i32::from(l.g_sched_sp)))?;
    a.cmp(r13, qword_ptr(r12 + 8))?;
    a.ja(go.skip)?;
    a.sub(r13, GO_STACK_ROOM as i32)?;
    a.jb(go.skip)?;
    a.cmp(r13, qword_ptr(r12))?;
    a.jb(go.skip)?;
    a.add(r13, GO_STACK_ROOM as i32)?;
    a.and(r13, -16)?;
    a.xchg(r13, rsp)?;
    a.push(r13)?;
    for r in [rax, rcx, rdx, rsi, rdi, r8, r9, r10, r11] {
        a.push(r)?;
    }
    a.mov(rdi, region)?;
    a.mov(rsi, qword_ptr(r14 + g_m))?;
    a.mov(edx, dword_ptr(rsi + i32::from(l.m_procid)))?;
    a.call(enter)?;
    a.mov(r13, rax)?;
    for r in [r11, r10, r9, r8, rdi, rsi, rdx, rcx, rax] {
        a.pop(r)?;
    }
    a.pop(rsp)?;
    a.test(r13, r13)?;
    a.jnz(go.have)?;
    Ok(())
}

/// A Go trampoline's skipped hit: the slot released when it had one
/// without a stack of its own (cannot happen: the tracer gives each one
/// when a probe is on a Go function), counted (the session summary says
/// why); the caller's way on follows.
fn go_skip(a: &mut CodeAssembler, region: u64, go: &mut GoLabels) -> Result<(), IcedError> {
    use core::mem::offset_of;
    use telco_abi::region::{Header, ThreadSlot};
    a.set_label(&mut go.release)?;
    a.mov(dword_ptr(r13 + offset_of!(ThreadSlot, busy) as i32), 0)?;
    a.set_label(&mut go.skip)?;
    a.mov(r12, region + offset_of!(Header, skipped) as u64)?;
    a.lock().add(qword_ptr(r12), 1)?;
    a.mov(r12, region + offset_of!(Header, skipped_go) as u64)?;
    a.lock().add(qword_ptr(r12), 1)?;
    Ok(())
}

/// The `.itrace` gate: every register as at the entry into a `SavedRegs`
/// block (rsp as the caller left it, rip = where the relocated
/// instructions start, just after the gate), then
/// `rt_itrace_wait(region, regs, func)`. Everything is put back, and the
/// thread goes on at the block's rip, which is the translated first block
/// when `rt_itrace_wait` returns one (the block tracer), or the relocated
/// instructions (untraced). The single-stepper restarts the thread from
/// the block itself and never returns here.
fn itrace_gate(a: &mut CodeAssembler, region: u64, wait: u64, func: u32) -> Result<(), IcedError> {
    // 144 bytes of registers + 8: rsp = 0 mod 16 at the call (entry
    // rsp = 8 mod 16).
    let frame = core::mem::size_of::<SavedRegs>() as i32 + 8;
    let mut resume = a.create_label();
    a.lea(rsp, ptr(rsp - frame))?;
    save_regs(a)?;
    a.lea(rax, ptr(rsp + frame))?;
    a.mov(qword_ptr(rsp + 8 * 7), rax)?;
    a.lea(rax, ptr(resume))?;
    a.mov(qword_ptr(rsp + 8 * 16), rax)?;
    a.pushfq()?;
    a.pop(rax)?;
    a.mov(qword_ptr(rsp + 8 * 17), rax)?;
    a.mov(rdi, region)?;
    a.mov(rsi, rsp)?;
    a.mov(edx, func)?;
    a.call(wait)?;
    let mut untraced = a.create_label();
    a.test(rax, rax)?;
    a.jz(untraced)?;
    a.mov(qword_ptr(rsp + 8 * 16), rax)?;
    a.set_label(&mut untraced)?;
    a.push(qword_ptr(rsp + 8 * 17))?;
    a.popfq()?;
    for (i, r) in REGS.iter().enumerate() {
        if i != 7 {
            a.mov(*r, qword_ptr(rsp + (8 * i) as i32))?;
        }
    }
    a.lea(rsp, ptr(rsp + frame))?;
    // The saved rip, now in the red zone (which a signal frame skips).
    a.jmp(qword_ptr(rsp - (frame - 8 * 16)))?;
    a.set_label(&mut resume)?;
    a.zero_bytes()?;
    Ok(())
}

/// A return trampoline: a probed function with a return probe returns
/// here. It saves the registers (`$return` is rax), asks `rt_ret_pop` for
/// this call's frame (probe, `@entry` saves, the original return address),
/// calls the probe's handler, restores the registers and returns to the
/// original return address (written back where the trampoline's address
/// was, and returned to through that slot with `ret`, so no register is
/// used for the jump: a caller built with gcc's -fipa-ra may keep values
/// in caller-saved registers the callee does not touch). The entry
/// trampoline called the function (`entry_prefix`), so that `ret` is
/// predicted.
///
/// `lean` as in [`Entry`]: None saves every register and fills the whole
/// context; Some(mask) saves only the caller-saved registers in `mask`
/// (with those this code uses).
pub fn return_trampoline(
    at: u64,
    region: u64,
    ctx_size: u32,
    ret_pop: u64,
    handlers: &Returns,
    lean: Option<RegMask>,
    shadow: &Shadow,
    span: Option<&SpanInline>,
) -> Result<Vec<u8>, IcedError> {
    use telco_abi::region::ThreadSlot;
    // Inline spans are for lean trampolines (Direct handlers).
    let span = span.filter(|_| lean.is_some());
    let ctx_at = core::mem::size_of::<SavedRegs>() as i32;
    let frame = frame_size(ctx_size);
    let c = |f: usize| ctx_at + f as i32;
    let mut a = CodeAssembler::new(64)?;
    a.lea(rsp, ptr(rsp - frame))?;
    // After the return rsp = 0 mod 16 (ABI), and so is the frame.
    let (fb, saved) = match lean {
        None => {
            save_regs(&mut a)?;
            a.lea(rax, ptr(rsp + frame))?;
            a.mov(qword_ptr(rsp + 8 * 7), rax)?;
            init_ctx(&mut a, ctx_at)?;
            a.mov(qword_ptr(rsp + c(core::mem::offset_of!(Ctx, addr))), rax)?;
            // Aligned as in `entry_prefix`, the frame findable from rsp.
            a.mov(rbx, rsp)?;
            a.and(rsp, -16)?;
            a.push(rbx)?;
            a.push(rbx)?;
            (rbx, CALLER_SAVED | 1 << 1)
        }
        Some(m) => {
            let extra = if span.is_some() { SR_R8 } else { 0 };
            let saved = (m | SR_RAX | SR_RCX | SR_RDX | SR_RSI | SR_RDI | extra) & CALLER_SAVED;
            store_mask(&mut a, rsp, saved)?;
            (rsp, saved)
        }
    };
    let mut popped = a.create_label();
    {
        // rt_ret_pop's common case inline (lean or full): the thread's
        // slot at the first place (not busy), its top frame this very
        // call's.
        use telco_abi::region::{ShadowFrame, ThreadSlot, SHADOW_FRAME_HEADER};
        let mut slow = a.create_label();
        let mut undo = a.create_label();
        find_slot(&mut a, shadow, slow)?;
        pop_frame(&mut a, shadow, ptr(fb + (frame - 8)), undo)?;
        a.mov(edi, dword_ptr(rdx + core::mem::offset_of!(ShadowFrame, probe) as i32))?;
        a.mov(dword_ptr(fb + c(core::mem::offset_of!(Ctx, probe))), edi)?;
        a.lea(rdi, ptr(rdx + SHADOW_FRAME_HEADER as i32))?;
        a.mov(qword_ptr(fb + c(core::mem::offset_of!(Ctx, entry))), rdi)?;
        a.mov(qword_ptr(fb + c(core::mem::offset_of!(Ctx, slot))), rcx)?;
        a.mov(rax, qword_ptr(rdx + core::mem::offset_of!(ShadowFrame, ret) as i32))?;
        a.jmp(popped)?;
        a.set_label(&mut undo)?;
        a.mov(dword_ptr(rcx + core::mem::offset_of!(ThreadSlot, busy) as i32), 0)?;
        a.set_label(&mut slow)?;
    }
    a.mov(rdi, region)?;
    a.lea(rsi, ptr(fb + ctx_at))?;
    a.lea(rdx, ptr(fb + frame))?;
    a.call(ret_pop)?;
    a.set_label(&mut popped)?;
    // Where to return: in the slot the return address was taken from.
    a.mov(qword_ptr(fb + (frame - 8)), rax)?;
    a.mov(qword_ptr(fb + 8 * 16), rax)?;
    if lean.is_none() {
        // `uaddr()`: where the call returns (the pc, as SystemTap's).
        a.mov(qword_ptr(fb + c(core::mem::offset_of!(Ctx, addr))), rax)?;
    }
    // rt_ret_pop also marked the thread busy (ctx.slot), or says skip (0).
    let mut done = a.create_label();
    let slot = qword_ptr(fb + c(core::mem::offset_of!(Ctx, slot)));
    a.mov(rax, slot)?;
    a.test(rax, rax)?;
    a.jz(done)?;
    let mut leave = a.create_label();
    match handlers {
        Returns::Table(table) => {
            a.mov(eax, dword_ptr(fb + c(core::mem::offset_of!(Ctx, probe))))?;
            a.mov(rcx, *table)?;
            a.mov(rax, qword_ptr(rcx + rax * 8))?;
            a.mov(rdi, region)?;
            a.lea(rsi, ptr(fb + ctx_at))?;
            a.call(rax)?;
        }
        Returns::Direct(list) => {
            // The frame's probe picks the handler (the last one needs no test).
            for (i, &(probe, h)) in list.iter().enumerate() {
                let last = i + 1 == list.len();
                let mut next = a.create_label();
                if !last {
                    a.cmp(dword_ptr(fb + c(core::mem::offset_of!(Ctx, probe))), probe)?;
                    a.jne(next)?;
                }
                match span {
                    Some(inl) if inl.probe == probe => span_end(&mut a, region, fb, ctx_at, inl, leave)?,
                    _ => {
                        a.mov(rdi, region)?;
                        a.lea(rsi, ptr(fb + ctx_at))?;
                        a.call(h)?;
                    }
                }
                if !last {
                    a.jmp(leave)?;
                    a.set_label(&mut next)?;
                }
            }
        }
    }
    a.set_label(&mut leave)?;
    a.mov(rax, slot)?;
    a.mov(dword_ptr(rax + core::mem::offset_of!(ThreadSlot, busy) as i32), 0)?;
    a.set_label(&mut done)?;
    if lean.is_none() {
        a.mov(rsp, rbx)?;
    }
    load_mask(&mut a, rsp, saved)?;
    // Back to the caller with `ret` through the slot we wrote: the entry
    // trampoline called the function, so the return-stack entry of the
    // caller's own call is on top, and this return is predicted (a
    // function reached by a jump — `.itrace` — returned here through the
    // replaced address, and mispredicts).
    a.lea(rsp, ptr(rsp + (frame - 8)))?;
    a.ret()?;
    assemble_aligned(&mut a, at)
}

/// The five registers the `ClockOnly` trampolines' common paths use.
const SPAN_USED: RegMask = SR_RAX | SR_RCX | SR_RDX | SR_RSI | SR_RDI;

/// Entry trampoline of a `ClockOnly` function (not `.itrace`): the thread's
/// slot, a shadow frame pushed with the TSC as its `@entry` save, and the
/// function called (as `entry_prefix` does with return probes). The caller
/// appends the relocated instructions.
pub fn clock_entry_prefix(e: &Entry, so: &ClockOnly) -> Result<Vec<u8>, IcedError> {
    use core::mem::offset_of;
    use telco_abi::region::{ThreadSlot, SHADOW_FRAME_HEADER};
    let ctx_at = core::mem::size_of::<SavedRegs>() as i32;
    let c = |f: usize| ctx_at + f as i32;
    let frame = frame_size(e.ctx_size) + 8;
    let sh = &e.shadow;
    let probe = so.probe;
    let mut a = CodeAssembler::new(64)?;
    let mut tramp_after = a.create_label();
    let mut reloc = a.create_label();
    let mut slow = a.create_label();
    let mut have = a.create_label();
    let mut push_slow = a.create_label();
    let mut call_it = a.create_label();
    let mut check = a.create_label();
    a.lea(rsp, ptr(rsp - frame))?;
    store_mask(&mut a, rsp, SPAN_USED)?;
    find_slot(&mut a, sh, slow)?;
    a.set_label(&mut have)?;
    // rt_ret_push's common case; the return address itself is replaced
    // by the call below.
    push_frame(&mut a, sh, ptr(rsp + frame), probe, &|a| a.lea(rdi, ptr(tramp_after)), false, push_slow)?;
    a.lea(rsi, ptr(rdx + SHADOW_FRAME_HEADER as i32))?;
    span_start(&mut a)?;
    a.mov(dword_ptr(rcx + offset_of!(ThreadSlot, busy) as i32), 0)?;
    load_mask(&mut a, rsp, SPAN_USED)?;
    // Call the function in place of its caller (see entry_prefix): the
    // frame and the return address dropped.
    a.set_label(&mut call_it)?;
    a.lea(rsp, ptr(rsp + frame + 8))?;
    a.call(reloc)?;
    a.set_label(&mut tramp_after)?;
    a.jmp(e.ret_tramp)?;
    // Off the common path: rt_ret_push, with the slot in the context.
    a.set_label(&mut push_slow)?;
    // r8 carries rt_ret_push's fifth argument: written here, so saved here
    // (clobber analysis sees only what the callee itself writes).
    let extra = (so.push_clobbers | SR_R8) & CALLER_SAVED & !SPAN_USED;
    a.mov(qword_ptr(rsp + c(offset_of!(Ctx, slot))), rcx)?;
    store_mask(&mut a, rsp, extra)?;
    a.mov(rdi, e.region)?;
    a.lea(rsi, ptr(rsp + ctx_at))?;
    a.lea(rdx, ptr(rsp + frame))?;
    a.lea(rcx, ptr(tramp_after))?;
    a.mov(r8d, probe)?;
    a.call(e.ret_push)?;
    load_mask(&mut a, rsp, extra)?;
    let mut none = a.create_label();
    a.test(rax, rax)?;
    a.jz(none)?;
    a.mov(rsi, rax)?;
    span_start(&mut a)?;
    a.set_label(&mut none)?;
    a.mov(rax, qword_ptr(rsp + c(offset_of!(Ctx, slot))))?;
    a.mov(dword_ptr(rax + offset_of!(ThreadSlot, busy) as i32), 0)?;
    a.jmp(check)?;
    // No slot at the first place: rt_enter (another place, a new slot, a
    // slot to take over, busy, none).
    a.set_label(&mut slow)?;
    let extra = so.enter_clobbers & CALLER_SAVED & !SPAN_USED;
    store_mask(&mut a, rsp, extra)?;
    a.mov(rdi, e.region)?;
    a.call(e.enter)?;
    load_mask(&mut a, rsp, extra)?;
    a.mov(rcx, rax)?;
    a.test(rax, rax)?;
    a.jnz(have)?;
    // Was a frame pushed (rt_ret_push replaced the return address)? Then
    // call the function, else jump to it.
    a.set_label(&mut check)?;
    a.lea(rax, ptr(tramp_after))?;
    a.cmp(qword_ptr(rsp + frame), rax)?;
    load_mask(&mut a, rsp, SPAN_USED)?;
    a.je(call_it)?;
    a.lea(rsp, ptr(rsp + frame))?;
    a.set_label(&mut reloc)?;
    a.zero_bytes()?;
    assemble_aligned(&mut a, e.at)
}

/// Return trampoline of a `ClockOnly` function: the frame popped, the call
/// recorded, back to the caller with a predicted `ret` (as
/// `return_trampoline`). Off the common path `rt_ret_pop` and the probe's
/// handler do the same.
pub fn clock_return_trampoline(
    at: u64,
    region: u64,
    ctx_size: u32,
    ret_pop: u64,
    shadow: &Shadow,
    so: &ClockOnly,
) -> Result<Vec<u8>, IcedError> {
    use core::mem::offset_of;
    use telco_abi::region::{ShadowFrame, ThreadSlot, SHADOW_FRAME_HEADER};
    let ctx_at = core::mem::size_of::<SavedRegs>() as i32;
    let frame = frame_size(ctx_size);
    let c = |f: usize| ctx_at + f as i32;
    let saved = match so.work {
        Timed::Span(_) => SPAN_USED | SR_R8,
        Timed::Stat(_) => SPAN_USED,
    };
    let mut a = CodeAssembler::new(64)?;
    let mut slow = a.create_label();
    let mut undo = a.create_label();
    let mut leave = a.create_label();
    let mut out = a.create_label();
    let mut full = a.create_label();
    a.lea(rsp, ptr(rsp - frame))?;
    store_mask(&mut a, rsp, saved)?;
    find_slot(&mut a, shadow, slow)?;
    pop_frame(&mut a, shadow, ptr(rsp + (frame - 8)), undo)?;
    // Where to return: in the slot the return address was taken from.
    a.mov(rax, qword_ptr(rdx + offset_of!(ShadowFrame, ret) as i32))?;
    a.mov(qword_ptr(rsp + (frame - 8)), rax)?;
    a.mov(rsi, qword_ptr(rdx + SHADOW_FRAME_HEADER as i32))?;
    match &so.work {
        Timed::Span(inl) => {
            span_clock(&mut a, region, leave)?;
            span_append(&mut a, inl, leave, full)?;
        }
        Timed::Stat(st) => {
            return_clock(&mut a, region, leave)?;
            stat_add(&mut a, st, leave)?;
        }
    }
    a.set_label(&mut leave)?;
    a.mov(dword_ptr(rcx + offset_of!(ThreadSlot, busy) as i32), 0)?;
    a.set_label(&mut out)?;
    load_mask(&mut a, rsp, saved)?;
    a.lea(rsp, ptr(rsp + (frame - 8)))?;
    a.ret()?;
    let extra = so.pop_clobbers & CALLER_SAVED & !saved;
    if let Timed::Span(inl) = &so.work {
        // A full stage.
        a.set_label(&mut full)?;
        a.mov(qword_ptr(rsp + c(offset_of!(Ctx, slot))), rcx)?;
        store_mask(&mut a, rsp, extra)?;
        a.mov(rdi, region)?;
        a.mov(rsi, rcx)?;
        a.call(inl.flush)?;
        load_mask(&mut a, rsp, extra)?;
        a.mov(rcx, qword_ptr(rsp + c(offset_of!(Ctx, slot))))?;
        a.jmp(leave)?;
    }
    // Not this call's frame on top, or no slot at the first place:
    // rt_ret_pop finds it (and the slot, marked busy, or 0 to skip), the
    // handler records the call.
    a.set_label(&mut undo)?;
    a.mov(dword_ptr(rcx + offset_of!(ThreadSlot, busy) as i32), 0)?;
    a.set_label(&mut slow)?;
    store_mask(&mut a, rsp, extra)?;
    a.mov(rdi, region)?;
    a.lea(rsi, ptr(rsp + ctx_at))?;
    a.lea(rdx, ptr(rsp + frame))?;
    a.call(ret_pop)?;
    a.mov(qword_ptr(rsp + (frame - 8)), rax)?;
    let mut done = a.create_label();
    let slot = qword_ptr(rsp + c(offset_of!(Ctx, slot)));
    a.mov(rax, slot)?;
    a.test(rax, rax)?;
    a.jz(done)?;
    a.mov(rdi, region)?;
    a.lea(rsi, ptr(rsp + ctx_at))?;
    a.call(so.handler)?;
    a.mov(rax, slot)?;
    a.mov(dword_ptr(rax + offset_of!(ThreadSlot, busy) as i32), 0)?;
    a.set_label(&mut done)?;
    load_mask(&mut a, rsp, extra)?;
    a.jmp(out)?;
    assemble_aligned(&mut a, at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions, Formatter, Instruction, NasmFormatter};

    #[test]
    fn saved_order_is_the_register_table() {
        for (i, r) in REGS.iter().enumerate() {
            let reg: iced_x86::Register = (*r).into();
            assert_eq!(format!("{reg:?}").to_lowercase(), regs::REGISTERS[i].name);
        }
    }

    fn listing(code: &[u8], at: u64) -> Vec<String> {
        let mut f = NasmFormatter::new();
        Decoder::with_ip(64, code, at, DecoderOptions::NONE)
            .into_iter()
            .map(|i: Instruction| {
                let mut s = String::new();
                f.format(&i, &mut s);
                s
            })
            .collect()
    }

    fn entry(lean: Option<RegMask>, returns: bool) -> Entry {
        Entry {
            at: 0x10000,
            region: 0x7000_0000,
            addr: 0x40_1000,
            ctx_size: CTX_SIZE as u32,
            handlers: if returns { Vec::new() } else { vec![(0x20000, 0)] },
            returns: if returns { vec![(0, Some(0x20100))] } else { Vec::new() },
            ret_push: 0x20200,
            enter: 0x20300,
            ret_tramp: 0x20400,
            shadow: Shadow { threads: 0x7000_1000, nthreads: 256, depth: 128, frame_size: 48, tid_off: 0x2d0 },
            lean,
            itrace: None,
            span: None,
            inside: false,
            ra_saved: None,
            ra_signed: 0,
            always: None,
            go: None,
        }
    }

    /// A lean trampoline stores only the caller-saved registers its calls
    /// change (plus those it uses itself), and calls nothing on the common
    /// path but the handler; a full one stores them all.
    #[test]
    fn lean_trampolines_save_what_is_changed() {
        let lean = entry_prefix(&entry(Some(1 << 9 /* r9 */), false)).unwrap();
        let text = listing(&lean, 0x10000);
        // Up to the handler's call (the rest is the way back, and the path
        // through rt_enter).
        let stores = |t: &[String]| {
            t.iter().take_while(|l| !l.starts_with("call")).filter(|l| l.starts_with("mov [rsp")).count()
        };
        // rax rcx rsi rdi (its own) + r9 (the handler's), and the slot in the context.
        assert_eq!(stores(&text), 6, "{text:#?}");
        let calls: Vec<&String> = text.iter().filter(|l| l.starts_with("call")).collect();
        assert_eq!(calls.len(), 2, "the handler, and rt_enter off the common path: {text:#?}");
        let full = listing(&entry_prefix(&entry(None, false)).unwrap(), 0x10000);
        assert!(stores(&full) >= 20, "{full:#?}");
    }

    /// A Go function's trampoline writes nothing on the goroutine's stack
    /// (no push, call or store through rsp until rsp is on a stack of
    /// ours: the slot's, or g0's for rt_enter_go, and none once it is
    /// back), runs the function's stack check first with its branch to
    /// the relocated copy, and leaves through the literal past the check.
    #[test]
    fn a_go_trampoline_never_writes_the_goroutine_stack() {
        let layout = telco_abi::artifact::GoLayout::go1_18(0x98);
        // lea r12,[rsp-0xa8]; cmp r12,[r14+0x10]; jbe +0xc5
        let check =
            vec![0x4c, 0x8d, 0xa4, 0x24, 0x58, 0xff, 0xff, 0xff, 0x4d, 0x3b, 0x66, 0x10, 0x0f, 0x86, 0xc5, 0, 0, 0];
        let e = Entry {
            go: Some(GoEntry { check, back: 0x40_1012, layout, enter: 0x20600, push: 0x20800 }),
            ..entry(None, false)
        };
        let code = entry_prefix(&e).unwrap();
        // The code, up to its literals (where to go on, the slots).
        let literal = code.windows(8).position(|w| w == 0x40_1012u64.to_le_bytes()).expect("the literal");
        let text = listing(&code[..literal], 0x10000);
        assert!(text[0].starts_with("lea r12,[rsp-0A8h]") && text[1] == "cmp r12,[r14+10h]", "{text:#?}");
        let end = 0x10000 + code.len() as u64;
        assert!(text[2].starts_with("jbe") && text[2].ends_with(&format!("{end:X}h")), "{text:#?}");
        nothing_on_the_goroutine_stack(&text);
        let calls: Vec<&String> = text.iter().filter(|l| l.starts_with("call")).collect();
        assert_eq!(calls.len(), 2, "the handler and rt_enter_go: {text:#?}");
        assert!(calls[1].ends_with("20600h"), "{text:#?}");
    }

    /// Nothing in a Go trampoline's `text` pushes, calls or stores
    /// through the stack pointer until it has switched to a stack of ours
    /// (`xchg` with rsp), nor after it switched back (`pop rsp`).
    fn nothing_on_the_goroutine_stack(text: &[String]) {
        let mut on_goroutine = true;
        for l in text {
            if l.starts_with("xchg") && l.contains("rsp") {
                on_goroutine = false;
            } else if l == "pop rsp" {
                on_goroutine = true;
            } else if on_goroutine {
                let writes = l.starts_with("push")
                    || l.starts_with("call")
                    || (l.starts_with("mov") || l.starts_with("lock")) && l.contains("[rsp");
                assert!(!writes, "{l} on the goroutine's stack: {text:#?}");
            }
        }
    }

    /// A Go function's return trampoline: the epilogue without its `ret`
    /// first, nothing written to the goroutine's stack, each return
    /// probe's `rt_go_pop` (last probe first) and handler on the slot's
    /// stack, and `ret` on every way out.
    #[test]
    fn go_return_trampolines_run_the_epilogue_then_the_probes() {
        let layout = telco_abi::artifact::GoLayout::go1_18(0x98);
        let x = GoExit {
            at: 0x10000,
            region: 0x7000_0000,
            addr: 0x40_1000,
            ctx_size: CTX_SIZE as u32,
            // mov rbp,[rsp+30h]; add rsp,38h
            epilogue: vec![0x48, 0x8b, 0x6c, 0x24, 0x30, 0x48, 0x83, 0xc4, 0x38],
            returns: vec![(3, 0x20000), (5, 0x20100)],
            pop: 0x20900,
            enter: 0x20600,
            layout,
            shadow: entry(None, true).shadow,
        };
        let code = go_return_trampoline(&x).unwrap();
        let literal = code.windows(8).position(|w| w == 0x7000_1000u64.to_le_bytes()).expect("the literal");
        let text = listing(&code[..literal], 0x10000);
        assert!(text[0] == "mov rbp,[rsp+30h]" && text[1] == "add rsp,38h", "{text:#?}");
        // (The epilogue's own reads of its frame aside.)
        nothing_on_the_goroutine_stack(&text[2..]);
        let calls: Vec<&str> = text.iter().filter(|l| l.starts_with("call")).map(|l| l.as_str()).collect();
        assert_eq!(calls.len(), 5, "{text:#?}");
        for (call, to) in calls.iter().zip(["20900h", "20100h", "20900h", "20000h", "20600h"]) {
            assert!(call.ends_with(to), "{call}, not to {to}: {text:#?}");
        }
        // Probe 5's frame before probe 3's (pushed in increasing order).
        let probes: Vec<&str> = text.iter().filter(|l| l.starts_with("mov edx,")).map(|l| l.as_str()).collect();
        assert_eq!(probes[..2], ["mov edx,5", "mov edx,3"], "{text:#?}");
        // Every way out is a `ret`, never a jump.
        assert!(!text.iter().any(|l| l.starts_with("jmp") && l.contains('[')), "{text:#?}");
        assert_eq!(text.iter().filter(|l| *l == "ret").count(), 3, "{text:#?}");
    }

    /// A trampoline that only calls a hook on every hit (the signal hooks
    /// of trap probes) calls it and looks for no slot: its path never
    /// reaches rt_enter, and nothing counts a hit as skipped.
    #[test]
    fn an_always_hook_alone_looks_for_no_slot() {
        let e = Entry { handlers: Vec::new(), always: Some((0x20500, 0x7100_0000)), ..entry(None, false) };
        let text = listing(&entry_prefix(&e).unwrap(), 0x10000);
        let first_call = text.iter().position(|l| l.starts_with("call")).expect("a call");
        assert!(text[first_call].ends_with("20500h"), "{text:#?}");
        // Straight after the hook: a jump past the slot's lookup.
        assert!(text[first_call + 1].starts_with("jmp"), "{text:#?}");
    }

    /// A return trampoline leaves with `ret` through the slot it wrote.
    #[test]
    fn return_trampolines_return_through_the_slot() {
        for lean in [None, Some(CALLER_SAVED)] {
            let sh = entry(lean, true).shadow;
            let code = return_trampoline(
                0x30000,
                0x7000_0000,
                CTX_SIZE as u32,
                0x20500,
                &Returns::Direct(vec![(0, 0x20000)]),
                lean,
                &sh,
                None,
            )
            .unwrap();
            // (Without the alignment padding.)
            let text: Vec<String> = listing(&code, 0x30000).into_iter().filter(|l| !l.starts_with("nop")).collect();
            let n = text.len();
            assert!(text[n - 2].starts_with("lea rsp,[rsp+"), "{text:#?}");
            assert_eq!(text[n - 1], "ret", "{text:#?}");
            assert!(!text.iter().any(|l| l.starts_with("jmp qword")), "{text:#?}");
        }
    }

    /// Every instruction of every kind of trampoline has an unwind row
    /// (`frames::rows`): a sample taken anywhere in one finds the probed
    /// site's frame, or its caller's. The stack pointer at the site (entry)
    /// or after the return (return trampolines) is where the rows say.
    #[test]
    fn every_trampoline_instruction_has_an_unwind_row() {
        use crate::frames::Cfa;
        for lean in [None, Some(CALLER_SAVED), Some(0)] {
            for returns in [false, true] {
                for inside in [false, true] {
                    let mut e = entry(lean, returns);
                    e.inside = inside;
                    let code = entry_prefix(&e).unwrap();
                    let end = e.at + code.len() as u64;
                    let rows = super::super::frames::rows(&code, e.at, 0, Some(e.at..end));
                    let text = listing(&code, e.at);
                    for (r, t) in rows.iter().zip(&text) {
                        assert_ne!(
                            r.cfa,
                            Cfa::Unknown,
                            "lean {lean:?} returns {returns} inside {inside}: {t}\n{text:#?}"
                        );
                    }
                    assert_eq!(rows[0].cfa, Cfa::Sp(0));
                    // The call of the function drops the return address: the
                    // caller's frame after it returns is rsp's own.
                    if returns {
                        assert!(rows.iter().any(|r| r.cfa == Cfa::Returned(0)), "{text:#?}");
                    }
                }
            }
            let code = return_trampoline(
                0x30000,
                0x7000_0000,
                CTX_SIZE as u32,
                0x20500,
                &Returns::Direct(vec![(0, 0x20000)]),
                lean,
                &entry(lean, true).shadow,
                None,
            )
            .unwrap();
            let rows = super::super::frames::rows(&code, 0x30000, 0, None);
            let text = listing(&code, 0x30000);
            for (r, t) in rows.iter().zip(&text) {
                assert_ne!(r.cfa, Cfa::Unknown, "return, lean {lean:?}: {t}\n{text:#?}");
            }
            // At the `ret`, rsp is the slot just below the caller's frame.
            assert_eq!(rows.last().unwrap().cfa, Cfa::Sp(8), "{text:#?}");
        }
    }

    /// Wherever a trampoline lands, no branch (or fused compare and
    /// branch) crosses or ends on a 32-byte boundary, and the code is the
    /// same but for NOPs.
    #[test]
    fn branches_stay_within_32_byte_lines() {
        use iced_x86::FlowControl;
        let sh = entry(Some(CALLER_SAVED), true).shadow;
        let at_base = 0x30000u64;
        let mut plain: Option<Vec<String>> = None;
        for skew in 0..32u64 {
            let at = at_base + skew;
            let code = return_trampoline(
                at,
                0x7000_0000,
                CTX_SIZE as u32,
                0x20500,
                &Returns::Direct(vec![(0, 0x20000), (1, 0x20100)]),
                Some(CALLER_SAVED),
                &sh,
                None,
            )
            .unwrap();
            let all: Vec<Instruction> = Decoder::with_ip(64, &code, at, DecoderOptions::NONE).into_iter().collect();
            let fuses = |i: &Instruction| {
                ["Cmp", "Test", "Add", "Sub", "And", "Inc", "Dec"].contains(&format!("{:?}", i.mnemonic()).as_str())
            };
            for (k, i) in all.iter().enumerate() {
                if matches!(i.flow_control(), FlowControl::Next | FlowControl::Exception | FlowControl::Interrupt) {
                    continue;
                }
                let start = if k > 0 && i.flow_control() == FlowControl::ConditionalBranch && fuses(&all[k - 1]) {
                    all[k - 1].ip()
                } else {
                    i.ip()
                };
                let end = i.next_ip();
                assert!(start / 32 == (end - 1) / 32 && end % 32 != 0, "at {at:#x}: {i} at {:#x}", i.ip());
            }
            let text: Vec<String> = listing(&code, at)
                .into_iter()
                .filter(|l| !l.starts_with("nop") && l != "xchg ax,ax" && !l.starts_with('j') && !l.starts_with("call"))
                .collect();
            match &plain {
                None => plain = Some(text),
                Some(p) => assert_eq!(&text, p, "at {at:#x}"),
            }
        }
    }

    /// The address a trampoline's call of the function returns to is the
    /// one its shadow frames record (`lea rdi,[rip+…]`), wherever the
    /// trampoline lands: alignment padding never comes between them.
    #[test]
    fn padding_keeps_the_return_address() {
        use iced_x86::{FlowControl, OpKind, Register};
        let so = ClockOnly {
            probe: 0,
            work: Timed::Stat(StatInline { copy: 0x1000, row: 0x430, hist: Some(48) }),
            handler: 0x20000,
            enter_clobbers: CALLER_SAVED,
            push_clobbers: CALLER_SAVED,
            pop_clobbers: CALLER_SAVED,
        };
        for skew in 0..32u64 {
            let mut e = entry(Some(CALLER_SAVED), true);
            e.at = 0x10000 + skew;
            for code in [entry_prefix(&e).unwrap(), clock_entry_prefix(&e, &so).unwrap()] {
                let all: Vec<Instruction> =
                    Decoder::with_ip(64, &code, e.at, DecoderOptions::NONE).into_iter().collect();
                let rip_targets: Vec<u64> = all
                    .iter()
                    .filter(|i| i.op_count() == 2 && i.op1_kind() == OpKind::Memory && i.memory_base() == Register::RIP)
                    .map(|i| i.memory_displacement64())
                    .collect();
                // The call of the function's first instructions (to the end
                // of the prefix) returns where the frames say.
                let call = all
                    .iter()
                    .find(|i| {
                        i.flow_control() == FlowControl::Call && i.near_branch_target() == e.at + code.len() as u64
                    })
                    .unwrap_or_else(|| panic!("at {:#x}: no call of the function", e.at));
                assert!(
                    rip_targets.contains(&call.next_ip()),
                    "at {:#x}: {rip_targets:x?} vs {:#x}",
                    e.at,
                    call.next_ip()
                );
            }
        }
    }
}
