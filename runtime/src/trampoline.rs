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

/// What one trampoline needs.
pub struct Entry {
    /// Where the trampoline will live in the target.
    pub at: u64,
    /// The region base in the target and the handler's address.
    pub region: u64,
    pub handler: u64,
    /// The probe's index (`Ctx::probe`, for `pp()`).
    pub probe: u32,
    /// The probed address (`uaddr()`, `SavedRegs::rip`).
    pub addr: u64,
    /// Bytes of context the handler needs (`Artifact::ctx_size`).
    pub ctx_size: u32,
}

fn off<T>(f: usize) -> i32 {
    let _ = core::mem::size_of::<T>();
    f as i32
}

/// Assemble the part before the relocated instructions. The caller appends
/// `x86::relocate(.., to = at + returned length)`.
pub fn entry_prefix(e: &Entry) -> Result<Vec<u8>, IcedError> {
    let regs_size = core::mem::size_of::<SavedRegs>() as i32;
    let ctx_at = regs_size;
    let frame = (regs_size + e.ctx_size.max(CTX_SIZE as u32) as i32 + 15) & !15;
    let mut a = CodeAssembler::new(64)?;
    let reg_off = |i: usize| (8 * i) as i32;
    a.lea(rsp, ptr(rsp - frame))?;
    // SavedRegs order: rax rbx rcx rdx rsi rdi rbp rsp r8..r15 rip rflags.
    let gprs = [rax, rbx, rcx, rdx, rsi, rdi, rbp];
    for (i, r) in gprs.iter().enumerate() {
        a.mov(qword_ptr(rsp + reg_off(i)), *r)?;
    }
    let high = [r8, r9, r10, r11, r12, r13, r14, r15];
    for (i, r) in high.iter().enumerate() {
        a.mov(qword_ptr(rsp + reg_off(8 + i)), *r)?;
    }
    a.pushfq()?;
    a.pop(rax)?;
    a.mov(qword_ptr(rsp + reg_off(17)), rax)?;
    a.lea(rax, ptr(rsp + frame))?;
    a.mov(qword_ptr(rsp + reg_off(7)), rax)?;
    a.mov(rax, e.addr)?;
    a.mov(qword_ptr(rsp + reg_off(16)), rax)?;
    // The context: regs, probe, flags, tid, tok_pos, addr, entry.
    let c = |f: usize| ctx_at + off::<Ctx>(f);
    a.mov(qword_ptr(rsp + c(core::mem::offset_of!(Ctx, regs))), rsp)?;
    a.mov(dword_ptr(rsp + c(core::mem::offset_of!(Ctx, probe))), e.probe)?;
    a.mov(dword_ptr(rsp + c(core::mem::offset_of!(Ctx, flags))), 0u32)?;
    a.xor(eax, eax)?;
    a.mov(qword_ptr(rsp + c(core::mem::offset_of!(Ctx, tid))), rax)?;
    a.mov(qword_ptr(rsp + c(core::mem::offset_of!(Ctx, tok_pos))), rax)?;
    a.mov(qword_ptr(rsp + c(core::mem::offset_of!(Ctx, entry))), rax)?;
    a.mov(rax, e.addr)?;
    a.mov(qword_ptr(rsp + c(core::mem::offset_of!(Ctx, addr))), rax)?;
    // Call the handler on a 16-byte aligned stack; rbx (saved above, and
    // callee-saved in the handler) keeps the frame.
    a.mov(rbx, rsp)?;
    a.and(rsp, -16)?;
    a.mov(rdi, e.region)?;
    a.lea(rsi, ptr(rbx + ctx_at))?;
    a.call(e.handler)?;
    a.mov(rsp, rbx)?;
    // Caller-saved registers (the arguments among them) and rbx.
    for (i, r) in [(0, rax), (1, rbx), (2, rcx), (3, rdx), (4, rsi), (5, rdi), (8, r8), (9, r9), (10, r10), (11, r11)] {
        a.mov(r, qword_ptr(rsp + reg_off(i)))?;
    }
    a.lea(rsp, ptr(rsp + frame))?;
    a.assemble(e.at)
}
