//! Entry trampolines (x86_64), assembled with iced-x86's code assembler.
//!
//! A patched function entry jumps here. The trampoline stores every
//! general-purpose register in a `SavedRegs` block (for `$argN`,
//! `register()`), builds the handler's `Ctx` beside it, aligns the stack to
//! 16 bytes, calls the compiled handler with (region, ctx), reloads the
//! registers the handler may change, runs the relocated original
//! instructions and jumps back after them.
//!
//! What a function entry lets us skip (System V ABI): the flags are dead
//! across a call, so they are recorded but not restored (no `popfq`, which
//! costs tens of cycles); nothing lives below the stack pointer, so no red
//! zone needs stepping over; the handler preserves the callee-saved
//! registers itself, so only the caller-saved ones (and rbx, which the
//! trampoline uses) are reloaded. Vector registers are not saved: the
//! handlers and the runtime library use general-purpose registers only
//! (checked when the runtime library is built). Probes placed elsewhere than
//! at an entry (statements) will need the red zone and the flags.

use iced_x86::code_asm::*;
use telco_abi::region::{Ctx, SavedRegs, CTX_SIZE};

/// What one function's trampoline does.
pub struct Entry {
    /// Where the trampoline will live in the target.
    pub at: u64,
    /// The region base in the target.
    pub region: u64,
    /// The probed address (`uaddr()`, `SavedRegs::rip`).
    pub addr: u64,
    /// Bytes of context the handlers need (`Artifact::ctx_size`).
    pub ctx_size: u32,
    /// Entry probes: (handler, probe index).
    pub handlers: Vec<(u64, u32)>,
    /// Return probes: (probe index, its entry handler for `@entry`).
    pub returns: Vec<(u32, Option<u64>)>,
    /// `rt_ret_push`, `rt_enter` and the code region's return trampoline.
    pub ret_push: u64,
    pub enter: u64,
    pub ret_tramp: u64,
}

/// The frame: SavedRegs, the context, then the thread slot `rt_enter` gave.
fn frame_size(ctx_size: u32) -> i32 {
    let regs = core::mem::size_of::<SavedRegs>() as i32;
    (regs + ctx_size.max(CTX_SIZE as u32) as i32 + 8 + 15) & !15
}

fn slot_at(ctx_size: u32) -> i32 {
    frame_size(ctx_size) - 8
}

/// Leave the handlers: clear the slot's busy flag.
fn leave(a: &mut CodeAssembler, slot: i32) -> Result<(), IcedError> {
    a.mov(rax, qword_ptr(rbx + slot))?;
    a.mov(dword_ptr(rax + core::mem::offset_of!(telco_abi::region::ThreadSlot, busy) as i32), 0u32)?;
    Ok(())
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

/// Reload the caller-saved registers and rbx from the SavedRegs block.
fn reload_regs(a: &mut CodeAssembler) -> Result<(), IcedError> {
    for i in [0usize, 1, 2, 3, 4, 5, 8, 9, 10, 11] {
        a.mov(REGS[i], qword_ptr(rsp + (8 * i) as i32))?;
    }
    Ok(())
}

/// Zero the context fields a trampoline owns and point it at the registers.
fn init_ctx(a: &mut CodeAssembler, ctx_at: i32) -> Result<(), IcedError> {
    let c = |f: usize| ctx_at + f as i32;
    a.mov(qword_ptr(rsp + c(core::mem::offset_of!(Ctx, regs))), rsp)?;
    a.xor(eax, eax)?;
    a.mov(dword_ptr(rsp + c(core::mem::offset_of!(Ctx, flags))), eax)?;
    a.mov(qword_ptr(rsp + c(core::mem::offset_of!(Ctx, tid))), rax)?;
    a.mov(qword_ptr(rsp + c(core::mem::offset_of!(Ctx, tok_pos))), rax)?;
    a.mov(qword_ptr(rsp + c(core::mem::offset_of!(Ctx, entry))), rax)?;
    Ok(())
}

/// Assemble the part before the relocated instructions. The caller appends
/// `x86::relocate(.., to = at + returned length)`.
pub fn entry_prefix(e: &Entry) -> Result<Vec<u8>, IcedError> {
    let ctx_at = core::mem::size_of::<SavedRegs>() as i32;
    let frame = frame_size(e.ctx_size);
    let c = |f: usize| ctx_at + f as i32;
    let mut a = CodeAssembler::new(64)?;
    a.lea(rsp, ptr(rsp - frame))?;
    save_regs(&mut a)?;
    a.pushfq()?;
    a.pop(rax)?;
    a.mov(qword_ptr(rsp + 8 * 17), rax)?;
    a.lea(rax, ptr(rsp + frame))?;
    a.mov(qword_ptr(rsp + 8 * 7), rax)?;
    a.mov(rax, e.addr)?;
    a.mov(qword_ptr(rsp + 8 * 16), rax)?;
    init_ctx(&mut a, ctx_at)?;
    a.mov(rax, e.addr)?;
    a.mov(qword_ptr(rsp + c(core::mem::offset_of!(Ctx, addr))), rax)?;
    // Handlers run on a 16-byte aligned stack; rbx (saved above, and
    // callee-saved in them) keeps the frame.
    a.mov(rbx, rsp)?;
    a.and(rsp, -16)?;
    // Not inside a handler already on this thread?
    let slot = slot_at(e.ctx_size);
    let mut done = a.create_label();
    a.mov(rdi, e.region)?;
    a.call(e.enter)?;
    a.mov(qword_ptr(rbx + slot), rax)?;
    a.mov(qword_ptr(rbx + c(core::mem::offset_of!(Ctx, slot))), rax)?;
    a.test(rax, rax)?;
    a.jz(done)?;
    for &(handler, probe) in &e.handlers {
        a.mov(dword_ptr(rbx + c(core::mem::offset_of!(Ctx, probe))), probe)?;
        a.mov(rdi, e.region)?;
        a.lea(rsi, ptr(rbx + ctx_at))?;
        a.call(handler)?;
    }
    for &(probe, entry_handler) in &e.returns {
        // rt_ret_push(region, ctx, &return address, return trampoline, probe)
        a.mov(rdi, e.region)?;
        a.lea(rsi, ptr(rbx + ctx_at))?;
        a.mov(rdx, qword_ptr(rbx + 8 * 7))?;
        a.mov(rcx, e.ret_tramp)?;
        a.mov(r8d, probe)?;
        a.call(e.ret_push)?;
        if let Some(h) = entry_handler {
            let mut skip = a.create_label();
            a.test(rax, rax)?;
            a.jz(skip)?;
            a.mov(qword_ptr(rbx + c(core::mem::offset_of!(Ctx, entry))), rax)?;
            a.mov(dword_ptr(rbx + c(core::mem::offset_of!(Ctx, probe))), probe)?;
            a.mov(rdi, e.region)?;
            a.lea(rsi, ptr(rbx + ctx_at))?;
            a.call(h)?;
            a.xor(eax, eax)?;
            a.mov(qword_ptr(rbx + c(core::mem::offset_of!(Ctx, entry))), rax)?;
            a.set_label(&mut skip)?;
            a.nop()?;
        }
    }
    leave(&mut a, slot)?;
    a.set_label(&mut done)?;
    a.mov(rsp, rbx)?;
    reload_regs(&mut a)?;
    a.lea(rsp, ptr(rsp + frame))?;
    a.assemble(e.at)
}

/// The return trampoline of a code region: a probed function with a return
/// probe returns here. It saves the registers (`$return` is rax), asks
/// `rt_ret_pop` for this call's frame (probe, `@entry` saves, the original
/// return address), calls the probe's handler through `handlers` (a table
/// of handler addresses by probe index), restores the return registers and
/// jumps to the original return address (through r11, dead at a return).
pub fn return_trampoline(
    at: u64,
    region: u64,
    ctx_size: u32,
    ret_pop: u64,
    handlers: u64,
) -> Result<Vec<u8>, IcedError> {
    let ctx_at = core::mem::size_of::<SavedRegs>() as i32;
    let frame = frame_size(ctx_size);
    let c = |f: usize| ctx_at + f as i32;
    let mut a = CodeAssembler::new(64)?;
    a.lea(rsp, ptr(rsp - frame))?;
    save_regs(&mut a)?;
    a.lea(rax, ptr(rsp + frame))?;
    a.mov(qword_ptr(rsp + 8 * 7), rax)?;
    init_ctx(&mut a, ctx_at)?;
    a.mov(qword_ptr(rsp + c(core::mem::offset_of!(Ctx, addr))), rax)?;
    a.mov(rbx, rsp)?;
    a.and(rsp, -16)?;
    a.mov(rdi, region)?;
    a.lea(rsi, ptr(rbx + ctx_at))?;
    a.mov(rdx, qword_ptr(rbx + 8 * 7))?;
    a.call(ret_pop)?;
    a.mov(qword_ptr(rbx + 8 * 16), rax)?; // rip: where we return to
                                          // rt_ret_pop also marked the thread busy (ctx.slot), or says skip (0).
    let slot = slot_at(ctx_size);
    let mut done = a.create_label();
    a.mov(rax, qword_ptr(rbx + c(core::mem::offset_of!(Ctx, slot))))?;
    a.mov(qword_ptr(rbx + slot), rax)?;
    a.test(rax, rax)?;
    a.jz(done)?;
    a.mov(eax, dword_ptr(rbx + c(core::mem::offset_of!(Ctx, probe))))?;
    a.mov(rcx, handlers)?;
    a.mov(rax, qword_ptr(rcx + rax * 8))?;
    a.mov(rdi, region)?;
    a.lea(rsi, ptr(rbx + ctx_at))?;
    a.call(rax)?;
    leave(&mut a, slot)?;
    a.set_label(&mut done)?;
    a.mov(rsp, rbx)?;
    reload_regs(&mut a)?;
    a.mov(r11, qword_ptr(rsp + 8 * 16))?;
    a.lea(rsp, ptr(rsp + frame))?;
    a.jmp(r11)?;
    a.assemble(at)
}
