//! `.itrace` in the target: the code of the block tracer (`blocktrace.rs`
//! drives it). A traced call runs in a code cache of translated basic
//! blocks, one cache ("arena") per traced call; each translated block runs
//! the original instructions and stores the value of every register each
//! one writes, in the order the ITRC `compile` message declares
//! (`telco_itrc::x64::X64Block::writes`, `ra` excepted: the tracer derives
//! it), then appends `[block address, values…]` to the arena's buffer.
//!
//! The hot path never traps and never calls the tracer:
//! * values go to a staging record at a fixed address (RIP-relative `mov`,
//!   no scratch register, flags untouched); at the block's end the record
//!   is copied to the buffer (`pushfq` after skipping the red zone);
//! * a direct branch, jump or call leaves through an exit slot (`jmp
//!   [rip+slot]`), which the tracer points at the target's translation once
//!   it exists (chaining); until then at a thunk that names the target and
//!   goes to the dispatcher;
//! * a `ret`, an indirect jump or call go to the dispatcher, which checks
//!   for the traced call's own return (then the thread leaves the cache for
//!   the real return address) and looks the target up in the arena's table
//!   (real address → translation, filled by the tracer);
//! * a call is emulated: the real return address is pushed, so the
//!   program's stack holds only its own addresses (and the `rsp` values in
//!   the trace are the program's).
//!
//! Only a miss (a block not translated yet) and a full buffer (both halves:
//! the tracer drains one while the thread fills the other) wait for the
//! tracer (the request stub: futex wake, then futex waits of 10 ms, 200
//! timeouts at most; past that the arena is abandoned: its records are
//! dropped, the trace file ends incomplete with a warning, and every exit
//! leaves for the real code, so the program runs on whatever the tracer
//! does). The traced call ends at the return to its caller (the return
//! address and stack pointer its gate saw), or when the stack pointer goes
//! above its frame (a `longjmp`, an exception): the thread leaves for the
//! real code there (an address in a traced function's displaced first
//! bytes is redirected to their relocated copy). Original instructions are
//! copied unchanged but for RIP-relative operands (`lea` becomes a `mov` of
//! the address; any other gets a scratch register holding the absolute
//! address); `syscall` runs in the cache (rcx then holds the real address
//! after it), and for `fork`, `vfork`, `clone` and `clone3` (decided by
//! rax before the call, the arena being shared with the child) the child
//! leaves the cache at once. A signal's handler runs natively (untraced)
//! and returns into the cache. Code that modifies itself: the dispatcher
//! compares a block's bytes with a copy of those it translated before
//! using the translation (`REQ_CHANGED`: translated anew); blocks chained
//! by direct jumps are not compared (the tracer reports their changes at
//! the end of the call).

use iced_x86::code_asm::*;
use iced_x86::{
    Code, Decoder, DecoderOptions, Instruction, InstructionInfoFactory, MemoryOperand, Mnemonic, OpKind, Register,
};
use telco_itrc::x64::{Flow, X64Block};

pub use crate::arch::blocks::*;

/// Addresses of the shared stubs at the start of the code part.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stubs {
    pub dispatch: u64,
    /// `call`ed with rax, rcx and the flags saved (the red zone skipped):
    /// make the request in `REQ_KIND`/`REQ_ADDR` and wait for the answer.
    pub request: u64,
    /// Leave for the real address in `WANT` (registers as the program's).
    pub leave: u64,
    /// `call`ed like `request` when the half being filled is full: hand it
    /// to the tracer and go on in the other (waiting only while that one
    /// is not drained yet).
    pub switch: u64,
    /// Where a traced call starts: store the vector registers (the
    /// `itrace:start` values), go to the first block (`FIRST`).
    pub prologue: u64,
}

/// Whether this CPU has AVX (the target's, on the same machine).
pub fn has_avx() -> bool {
    std::arch::is_x86_feature_detected!("avx")
}

/// Bytes of a block's record after its address: every write's value
/// (`ra` excepted: the recorder tracks it).
pub fn record_values(block: &X64Block) -> usize {
    block.insns.iter().flat_map(|i| i.writes.iter()).map(|&w| telco_itrc::x64::value_size(w)).sum()
}

/// Nothing to cut here: any block translates (x86_64 needs no free
/// register).
pub fn fit(_block: &mut X64Block) {}

/// Bytes of vector registers the prologue stores (16 `ymm`).
pub const START_VEC_BYTES: usize = 16 * 32;

/// The `itrace:start` registers: `regs` at the entry, the vector registers
/// as the prologue stored them.
pub fn start_regs(regs: &super::Regs, vectors: &[u8]) -> telco_itrc::x64::X64Regs {
    let mut x = super::itrc_regs(regs);
    for (y, v) in x.ymm.iter_mut().zip(vectors.chunks_exact(32)) {
        y.copy_from_slice(v);
    }
    x
}

/// Code written through the tracer's mapping needs nothing more here
/// (x86_64 keeps instruction fetch coherent with stores).
pub fn code_written(_p: *const u8, _len: usize) {}

/// Store vector register `n` (0..16) at `at` (32 bytes), flags untouched.
fn store_vector(a: &mut CodeAssembler, ar: &ArenaAddrs, n: u32, at: u64) -> Result<(), IcedError> {
    use Register::*;
    const YMM: [Register; 16] =
        [YMM0, YMM1, YMM2, YMM3, YMM4, YMM5, YMM6, YMM7, YMM8, YMM9, YMM10, YMM11, YMM12, YMM13, YMM14, YMM15];
    const XMM: [Register; 16] =
        [XMM0, XMM1, XMM2, XMM3, XMM4, XMM5, XMM6, XMM7, XMM8, XMM9, XMM10, XMM11, XMM12, XMM13, XMM14, XMM15];
    let n = (n as usize).min(15);
    if ar.avx {
        add(a, Instruction::with2(Code::VEX_Vmovdqu_ymmm256_ymm, rip(at), YMM[n]))
    } else {
        add(a, Instruction::with2(Code::Movdqu_xmmm128_xmm, rip(at), XMM[n]))?;
        add(a, Instruction::with2(Code::Mov_rm64_imm32, rip(at + 16), 0i32))?;
        add(a, Instruction::with2(Code::Mov_rm64_imm32, rip(at + 24), 0i32))
    }
}

fn rip(addr: u64) -> MemoryOperand {
    MemoryOperand::with_base_displ(Register::RIP, addr as i64)
}

fn add(a: &mut CodeAssembler, i: Result<Instruction, iced_x86::IcedError>) -> Result<(), IcedError> {
    a.add_instruction(i?)
}

/// `mov [addr], reg` (RIP-relative).
fn store(a: &mut CodeAssembler, addr: u64, reg: Register) -> Result<(), IcedError> {
    add(a, Instruction::with2(Code::Mov_rm64_r64, rip(addr), reg))
}

/// `mov reg, [addr]` (RIP-relative).
fn load(a: &mut CodeAssembler, reg: Register, addr: u64) -> Result<(), IcedError> {
    add(a, Instruction::with2(Code::Mov_r64_rm64, reg, rip(addr)))
}

/// `jmp [addr]` (RIP-relative).
fn jmp_via(a: &mut CodeAssembler, addr: u64) -> Result<(), IcedError> {
    add(a, Instruction::with1(Code::Jmp_rm64, rip(addr)))
}

/// Skip the red zone, save rax, rcx and the flags.
fn enter(a: &mut CodeAssembler) -> Result<(), IcedError> {
    a.lea(rsp, ptr(rsp - 128))?;
    a.push(rax)?;
    a.push(rcx)?;
    a.pushfq()
}

fn leave(a: &mut CodeAssembler) -> Result<(), IcedError> {
    a.popfq()?;
    a.pop(rcx)?;
    a.pop(rax)?;
    a.lea(rsp, ptr(rsp + 128))
}

/// The shared stubs, assembled at `ar.code`. Returns the bytes and where
/// each stub is.
pub fn stubs(ar: &ArenaAddrs) -> Result<(Vec<u8>, Stubs), IcedError> {
    let mut a = CodeAssembler::new(64)?;
    let mut dispatch = a.create_label();
    let mut request = a.create_label();
    let mut leave_l = a.create_label();
    let mut lookup = a.create_label();
    let mut probe = a.create_label();
    let mut hit = a.create_label();
    let mut miss = a.create_label();
    let mut done = a.create_label();
    let mut not_ret = a.create_label();
    let mut changed = a.create_label();
    let mut gone = a.create_label();
    let mut wait = a.create_label();
    let mut answered = a.create_label();
    let mut give_up = a.create_label();
    let mut recheck = a.create_label();
    let mut wrap = a.create_label();

    // dispatch: WANT holds the real target; the registers are the
    // program's.
    a.set_label(&mut dispatch)?;
    enter(&mut a)?;
    load(&mut a, Register::RAX, ar.at(ctl::WANT))?;
    // The traced call returns: leave, and tell the tracer.
    a.lea(rcx, ptr(rsp + 128 + 24))?;
    add(&mut a, Instruction::with2(Code::Cmp_r64_rm64, Register::RAX, rip(ar.at(ctl::END_RET))))?;
    a.jne(not_ret)?;
    add(&mut a, Instruction::with2(Code::Cmp_r64_rm64, Register::RCX, rip(ar.at(ctl::END_SP))))?;
    a.je(done)?;
    // The stack above the traced call's frame: a longjmp or an exception
    // left it. The trace ends; the thread goes on natively.
    a.set_label(&mut not_ret)?;
    add(&mut a, Instruction::with2(Code::Cmp_r64_rm64, Register::RCX, rip(ar.at(ctl::END_SP))))?;
    a.jbe(lookup)?;
    a.mov(eax, REQ_UNWOUND)?;
    add(&mut a, Instruction::with2(Code::Mov_rm32_r32, rip(ar.at(ctl::REQ_KIND)), Register::EAX))?;
    a.call(request)?;
    a.jmp(gone)?;
    a.set_label(&mut done)?;
    a.mov(eax, super::blocks::REQ_DONE)?;
    add(&mut a, Instruction::with2(Code::Mov_rm32_r32, rip(ar.at(ctl::REQ_KIND)), Register::EAX))?;
    a.call(request)?;
    leave(&mut a)?;
    // The arena may serve another call as soon as the tracer answered:
    // leave without reading it. The emulated `ret` left the return
    // address where it was, just below the stack pointer.
    a.lea(rsp, ptr(rsp - 8))?;
    a.ret()?;
    // Abandoned: leave for the real code (an address inside a traced
    // function's displaced first bytes goes to their relocated copy).
    a.set_label(&mut gone)?;
    add(&mut a, Instruction::with2(Code::Mov_rm32_imm32, rip(ar.at(ctl::LEFT)), 1u32))?;
    redirect(&mut a, ar)?;
    leave(&mut a)?;
    jmp_via(&mut a, ar.at(ctl::WANT))?;

    a.set_label(&mut lookup)?;
    add(&mut a, Instruction::with2(Code::Cmp_rm32_imm8, rip(ar.at(ctl::ABANDONED)), 0u32))?;
    a.jne(gone)?;
    // Slot: (address >> 2) mod entries, 16 bytes each.
    a.mov(rcx, rax)?;
    a.shr(rcx, 2)?;
    a.and(ecx, (TABLE_ENTRIES - 1) as u32)?;
    a.shl(rcx, TABLE_ENTRY.trailing_zeros())?;
    add(&mut a, Instruction::with2(Code::Add_r64_rm64, Register::RCX, rip(ar.at(ctl::TABLE))))?;
    a.set_label(&mut probe)?;
    a.cmp(qword_ptr(rcx), rax)?;
    a.je(hit)?;
    a.cmp(qword_ptr(rcx), 0)?;
    a.je(miss)?;
    a.add(rcx, TABLE_ENTRY as i32)?;
    // Past the table's end: back to its start.
    a.lea(rax, ptr(rcx))?;
    add(&mut a, Instruction::with2(Code::Sub_r64_rm64, Register::RAX, rip(ar.at(ctl::TABLE))))?;
    a.cmp(rax, (TABLE_ENTRIES * TABLE_ENTRY) as i32)?;
    a.jae(wrap)?;
    load(&mut a, Register::RAX, ar.at(ctl::WANT))?;
    a.jmp(probe)?;
    a.set_label(&mut wrap)?;
    load(&mut a, Register::RCX, ar.at(ctl::TABLE))?;
    load(&mut a, Register::RAX, ar.at(ctl::WANT))?;
    a.jmp(probe)?;
    a.set_label(&mut hit)?;
    a.mov(rax, qword_ptr(rcx + 8))?;
    store(&mut a, ar.at(ctl::TARGET), Register::RAX)?;
    // The block's bytes as they were translated? (Code that modifies
    // itself, reached through a return or an indirect branch.)
    a.push(rsi)?;
    a.push(rdi)?;
    load(&mut a, Register::RSI, ar.at(ctl::WANT))?;
    a.mov(rdi, qword_ptr(rcx + 16))?;
    a.mov(rcx, qword_ptr(rcx + 24))?;
    a.cld()?;
    a.repe().cmpsb()?;
    a.pop(rdi)?;
    a.pop(rsi)?;
    a.jne(changed)?;
    leave(&mut a)?;
    jmp_via(&mut a, ar.at(ctl::TARGET))?;
    a.set_label(&mut changed)?;
    load(&mut a, Register::RAX, ar.at(ctl::WANT))?;
    store(&mut a, ar.at(ctl::REQ_ADDR), Register::RAX)?;
    a.mov(eax, REQ_CHANGED)?;
    add(&mut a, Instruction::with2(Code::Mov_rm32_r32, rip(ar.at(ctl::REQ_KIND)), Register::EAX))?;
    a.call(request)?;
    load(&mut a, Register::RAX, ar.at(ctl::WANT))?;
    a.jmp(lookup)?;
    a.set_label(&mut miss)?;
    store(&mut a, ar.at(ctl::REQ_ADDR), Register::RAX)?;
    a.mov(eax, REQ_TRANSLATE)?;
    add(&mut a, Instruction::with2(Code::Mov_rm32_r32, rip(ar.at(ctl::REQ_KIND)), Register::EAX))?;
    a.call(request)?;
    load(&mut a, Register::RAX, ar.at(ctl::WANT))?;
    a.jmp(lookup)?;

    // request: the caller saved rax, rcx and the flags; this saves what
    // the system calls clobber. Ring: REQ_GEN++, the bell++, wake the
    // tracer; then wait (10 ms at a time, 200 times at most) until ACK_GEN
    // reaches our generation. No answer: abandon the arena.
    a.set_label(&mut request)?;
    // Abandoned: no tracer to ask; a full buffer is dropped.
    let mut ask = a.create_label();
    add(&mut a, Instruction::with2(Code::Cmp_rm32_imm8, rip(ar.at(ctl::ABANDONED)), 0u32))?;
    a.je(ask)?;
    load(&mut a, Register::RAX, ar.at(ctl::BUF_START))?;
    store(&mut a, ar.at(ctl::CURSOR), Register::RAX)?;
    a.ret()?;
    a.set_label(&mut ask)?;
    for r in [rdx, rsi, rdi, r8, r9, r10, r11] {
        a.push(r)?;
    }
    a.mov(r8d, 1)?;
    add(
        &mut a,
        Instruction::with2(Code::Xadd_rm32_r32, rip(ar.at(ctl::REQ_GEN)), Register::R8D).map(|mut i| {
            i.set_has_lock_prefix(true);
            i
        }),
    )?;
    a.inc(r8d)?; // our generation
    a.mov(rdi, ar.bell)?;
    a.lock().add(dword_ptr(rdi), 1)?;
    a.mov(eax, 202)?; // futex
    a.mov(esi, 1)?; // FUTEX_WAKE (shared)
    a.mov(edx, 1)?;
    a.syscall()?;
    a.mov(r9d, 201)?;
    a.set_label(&mut wait)?;
    a.dec(r9d)?;
    a.jz(give_up)?;
    a.set_label(&mut recheck)?;
    add(&mut a, Instruction::with2(Code::Mov_r32_rm32, Register::EDX, rip(ar.at(ctl::ACK_GEN))))?;
    // Answered once ACK_GEN has reached our generation (wrapping): a later
    // call's requests may have taken it past ours meanwhile.
    a.mov(ecx, edx)?;
    a.sub(ecx, r8d)?;
    a.jns(answered)?;
    a.mov(eax, 202)?;
    a.mov(rdi, ar.at(ctl::ACK_GEN))?;
    a.xor(esi, esi)?; // FUTEX_WAIT (shared), expected = edx
    a.mov(r10, ar.at(ctl::TIMESPEC))?;
    a.syscall()?;
    // A wake, a changed word or a signal: look again; anything else (a
    // timeout, or an error: the futex word unmapped) counts towards
    // giving up.
    a.test(rax, rax)?;
    a.je(recheck)?;
    a.cmp(rax, -11)?; // -EAGAIN
    a.je(recheck)?;
    a.cmp(rax, -4)?; // -EINTR
    a.je(recheck)?;
    a.jmp(wait)?;
    a.set_label(&mut give_up)?;
    add(&mut a, Instruction::with2(Code::Mov_rm32_imm32, rip(ar.at(ctl::ABANDONED)), 1u32))?;
    a.set_label(&mut answered)?;
    for r in [r11, r10, r9, r8, rdi, rsi, rdx] {
        a.pop(r)?;
    }
    a.ret()?;

    // switch: the half being filled is full.
    let mut switch = a.create_label();
    let mut h1 = a.create_label();
    let mut marked = a.create_label();
    let mut drained = a.create_label();
    let mut abandoned = a.create_label();
    a.set_label(&mut switch)?;
    add(&mut a, Instruction::with2(Code::Cmp_rm32_imm8, rip(ar.at(ctl::ABANDONED)), 0u32))?;
    a.jne(abandoned)?;
    // FILLED[half] = cursor.
    load(&mut a, Register::RAX, ar.at(ctl::CURSOR))?;
    add(&mut a, Instruction::with2(Code::Cmp_rm64_imm8, rip(ar.at(ctl::HALF)), 0u32))?;
    a.jne(h1)?;
    store(&mut a, ar.at(ctl::FILLED), Register::RAX)?;
    a.jmp(marked)?;
    a.set_label(&mut h1)?;
    store(&mut a, ar.at(ctl::FILLED + 8), Register::RAX)?;
    a.set_label(&mut marked)?;
    // Ring the bell: the tracer drains it.
    for r in [rdx, rsi, rdi, r11] {
        a.push(r)?;
    }
    a.mov(rdi, ar.bell)?;
    a.lock().add(dword_ptr(rdi), 1)?;
    a.mov(eax, 202)?;
    a.mov(esi, 1)?;
    a.mov(edx, 1)?;
    a.syscall()?;
    for r in [r11, rdi, rsi, rdx] {
        a.pop(r)?;
    }
    // The other half: wait while it is not drained.
    load(&mut a, Register::RCX, ar.at(ctl::HALF))?;
    a.xor(ecx, 1)?;
    store(&mut a, ar.at(ctl::HALF), Register::RCX)?;
    let mut wait_other = a.create_label();
    a.set_label(&mut wait_other)?;
    load(&mut a, Register::RCX, ar.at(ctl::HALF))?;
    a.shl(ecx, 3)?;
    a.mov(rax, ar.at(ctl::FILLED))?;
    a.cmp(qword_ptr(rax + rcx), 0)?;
    a.je(drained)?;
    a.mov(eax, REQ_FLUSH)?;
    add(&mut a, Instruction::with2(Code::Mov_rm32_r32, rip(ar.at(ctl::REQ_KIND)), Register::EAX))?;
    a.call(request)?;
    add(&mut a, Instruction::with2(Code::Cmp_rm32_imm8, rip(ar.at(ctl::ABANDONED)), 0u32))?;
    a.jne(abandoned)?;
    a.jmp(wait_other)?;
    a.set_label(&mut drained)?;
    // cursor = HALF_START[half], limit = HALF_END[half].
    load(&mut a, Register::RCX, ar.at(ctl::HALF))?;
    a.shl(ecx, 3)?;
    a.mov(rax, ar.at(ctl::HALF_START))?;
    a.mov(rax, qword_ptr(rax + rcx))?;
    store(&mut a, ar.at(ctl::CURSOR), Register::RAX)?;
    a.mov(rax, ar.at(ctl::HALF_END))?;
    a.mov(rax, qword_ptr(rax + rcx))?;
    store(&mut a, ar.at(ctl::LIMIT), Register::RAX)?;
    a.ret()?;
    // Abandoned: the half is dropped (its bounds both set: HALF may have
    // changed since the limit was).
    a.set_label(&mut abandoned)?;
    load(&mut a, Register::RCX, ar.at(ctl::HALF))?;
    a.shl(ecx, 3)?;
    a.mov(rax, ar.at(ctl::HALF_START))?;
    a.mov(rax, qword_ptr(rax + rcx))?;
    store(&mut a, ar.at(ctl::CURSOR), Register::RAX)?;
    a.mov(rax, ar.at(ctl::HALF_END))?;
    a.mov(rax, qword_ptr(rax + rcx))?;
    store(&mut a, ar.at(ctl::LIMIT), Register::RAX)?;
    a.ret()?;

    // prologue: the vector registers at the call's entry.
    let mut prologue = a.create_label();
    a.set_label(&mut prologue)?;
    for n in 0..16 {
        store_vector(&mut a, ar, n, ar.at(ctl::START_VEC + 32 * u64::from(n)))?;
    }
    jmp_via(&mut a, ar.at(ctl::FIRST))?;

    // leave: to the real address in WANT.
    a.set_label(&mut leave_l)?;
    jmp_via(&mut a, ar.at(ctl::WANT))?;

    let r = a.assemble_options(ar.code, iced_x86::BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)?;
    let at = |l: CodeLabel| r.label_ip(&l);
    let s = Stubs {
        dispatch: at(dispatch)?,
        request: at(request)?,
        leave: at(leave_l)?,
        switch: at(switch)?,
        prologue: at(prologue)?,
    };
    Ok((r.inner.code_buffer, s))
}

const FORK_LIKE: [i32; 4] = [56, 57, 58, 435]; // clone, fork, vfork, clone3

/// Translate `block` (its real address and bytes) to run at `at`.
/// `slots` gives exit slots; thunks for them are emitted in the block's
/// own code (after it), and the slot must first hold its thunk's address:
/// the returned exits say which slot goes where, the code's `thunk_of`
/// offsets are resolved by the tracer through [`thunk_addresses`].
pub fn translate(
    block: &X64Block,
    at: u64,
    ar: &ArenaAddrs,
    stubs: &Stubs,
    slots: &mut dyn SlotAlloc,
) -> Result<(Translated, Vec<(u64, u64)>), Refused> {
    translate_inner(block, at, ar, stubs, slots).map_err(|e| match e {
        Fail::Refused(r) => r,
        Fail::Asm(e) => Refused(format!("cannot assemble the translation: {e}")),
    })
}

enum Fail {
    Refused(Refused),
    Asm(IcedError),
}

impl From<IcedError> for Fail {
    fn from(e: IcedError) -> Self {
        Fail::Asm(e)
    }
}

fn refuse<T>(s: String) -> Result<T, Fail> {
    Err(Fail::Refused(Refused(s)))
}

fn translate_inner(
    block: &X64Block,
    at: u64,
    ar: &ArenaAddrs,
    stubs: &Stubs,
    slots: &mut dyn SlotAlloc,
) -> Result<(Translated, Vec<(u64, u64)>), Fail> {
    let mut a = CodeAssembler::new(64)?;
    let mut decoder = Decoder::with_ip(64, &block.code, block.address, DecoderOptions::NONE);
    let mut info = InstructionInfoFactory::new();
    let mut stage = ctl::STAGE;
    // The record's values, in 8-byte words.
    let bytes: usize = block.insns.iter().flat_map(|i| i.writes.iter()).map(|&w| telco_itrc::x64::value_size(w)).sum();
    let values = bytes / 8;
    if bytes as u64 > ctl::STAGE_BYTES {
        return refuse(format!("the block at {:#x} writes more registers than the record holds", block.address));
    }
    // Exits: (label of its thunk, slot, target).
    let mut thunks: Vec<(CodeLabel, u64, u64)> = Vec::new();
    let mut exit = |a: &mut CodeAssembler, target: u64| -> Result<(), Fail> {
        let Some(slot) = slots.slot(target) else {
            return refuse("the code cache's exit slots are exhausted".into());
        };
        jmp_via(a, slot)?;
        thunks.push((a.create_label(), slot, target));
        Ok(())
    };
    let n = block.insns.len();
    for (k, insn) in block.insns.iter().enumerate() {
        let ins = decoder.decode();
        let next = ins.next_ip();
        let last = k + 1 == n;
        let stage_writes = |a: &mut CodeAssembler, stage: &mut u64| -> Result<(), Fail> {
            for &w in &insn.writes {
                if w >= telco_itrc::x64::YMM0 {
                    store_vector(a, ar, w - telco_itrc::x64::YMM0, ar.at(*stage))?;
                } else if w == telco_itrc::x64::RFLAGS {
                    a.lea(rsp, ptr(rsp - 128))?;
                    a.pushfq()?;
                    add(a, Instruction::with1(Code::Pop_rm64, rip(ar.at(*stage))))?;
                    a.lea(rsp, ptr(rsp + 128))?;
                } else {
                    store(a, ar.at(*stage), full_reg(w))?;
                }
                *stage += telco_itrc::x64::value_size(w) as u64;
            }
            Ok(())
        };
        match insn.flow {
            Flow::Next => {
                copy_instruction(&mut a, &ins, ar, &mut info)?;
                stage_writes(&mut a, &mut stage)?;
                if last {
                    // Cut by size: falls through to the next block.
                    copy_out(&mut a, block.address, values, ar, stubs)?;
                    exit(&mut a, next)?;
                }
            }
            Flow::Syscall => {
                if ins.mnemonic() != Mnemonic::Syscall {
                    return refuse(format!("`{ins}` at {:#x}", ins.ip()));
                }
                // fork, vfork, clone, clone3: decided before the call (the
                // arena is shared with the child, which must not touch it):
                // their child leaves the cache at once.
                let mut plain = a.create_label();
                let mut forking = a.create_label();
                let mut after = a.create_label();
                a.lea(rsp, ptr(rsp - 128))?;
                a.pushfq()?;
                for nr in FORK_LIKE {
                    a.cmp(rax, nr)?;
                    a.je(forking)?;
                }
                a.jmp(plain)?;
                a.set_label(&mut forking)?;
                a.popfq()?;
                a.lea(rsp, ptr(rsp + 128))?;
                a.syscall()?;
                a.lea(rsp, ptr(rsp - 128))?;
                a.pushfq()?;
                a.test(rax, rax)?;
                let mut parent = a.create_label();
                a.jne(parent)?;
                // The child: to the real next instruction, its address
                // pushed past the red zone and returned to.
                a.popfq()?;
                a.lea(rsp, ptr(rsp + 128 - 136))?;
                a.mov(dword_ptr(rsp), next as u32)?;
                a.mov(dword_ptr(rsp + 4), (next >> 32) as u32)?;
                a.ret_1(128)?;
                a.set_label(&mut parent)?;
                a.popfq()?;
                a.lea(rsp, ptr(rsp + 128))?;
                a.mov(rcx, next)?;
                a.jmp(after)?;
                a.set_label(&mut plain)?;
                a.popfq()?;
                a.lea(rsp, ptr(rsp + 128))?;
                a.syscall()?;
                // The kernel put the address after the `syscall` in rcx:
                // the program's, not ours.
                a.mov(rcx, next)?;
                a.set_label(&mut after)?;
                stage_writes(&mut a, &mut stage)?;
                copy_out(&mut a, block.address, values, ar, stubs)?;
                exit(&mut a, next)?;
            }
            Flow::Call | Flow::Branch | Flow::Return => {
                if !last {
                    return refuse(format!("control flow inside the block at {:#x}", block.address));
                }
                transfer(&mut a, &ins, insn, block, values, &mut stage, ar, stubs, &mut exit, &stage_writes)?;
            }
            Flow::Other => {
                return refuse(format!("`{}` at {:#x}", ins, ins.ip()));
            }
        }
    }
    // The thunks: name the target, go to the dispatcher.
    let mut thunk_of = Vec::new();
    for (mut label, slot, target) in thunks {
        a.set_label(&mut label)?;
        a.lea(rsp, ptr(rsp - 128))?;
        a.push(rax)?;
        a.mov(rax, target)?;
        store(&mut a, ar.at(ctl::WANT), Register::RAX)?;
        a.pop(rax)?;
        a.lea(rsp, ptr(rsp + 128))?;
        a.jmp(stubs.dispatch)?;
        thunk_of.push((label, slot, target));
    }
    let r = a.assemble_options(at, iced_x86::BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)?;
    let mut exits = Vec::new();
    let mut initial = Vec::new();
    for (label, slot, target) in thunk_of {
        let thunk = r.label_ip(&label)?;
        exits.push((slot, target));
        initial.push((slot, thunk));
    }
    Ok((Translated { code: r.inner.code_buffer, exits }, initial))
}

/// The index of an ITRC register as a 64-bit register.
fn full_reg(w: u32) -> Register {
    use Register::*;
    [RIP, R15, R14, R13, R12, R11, R10, R9, R8, RDI, RSI, RBP, RSP, RBX, RDX, RCX, RAX][w as usize]
}

/// WANT inside a traced function's displaced first bytes becomes its
/// relocated copy (the `REDIRECTS` table). rax, rcx and the flags are
/// saved by the caller.
fn redirect(a: &mut CodeAssembler, ar: &ArenaAddrs) -> Result<(), IcedError> {
    let mut next = a.create_label();
    let mut found = a.create_label();
    let mut end = a.create_label();
    load(a, Register::RAX, ar.at(ctl::WANT))?;
    a.mov(rcx, ar.at(ctl::REDIRECTS))?;
    a.push(rdx)?;
    a.mov(rdx, qword_ptr(rcx))?;
    a.cmp(rdx, ctl::REDIRECTS_MAX as i32)?;
    a.jbe(next)?;
    a.mov(edx, ctl::REDIRECTS_MAX as u32)?;
    a.set_label(&mut next)?;
    a.test(rdx, rdx)?;
    a.jz(end)?;
    a.add(rcx, 16)?;
    a.dec(rdx)?;
    a.cmp(qword_ptr(rcx - 8), rax)?;
    a.je(found)?;
    a.jmp(next)?;
    a.set_label(&mut found)?;
    a.mov(rax, qword_ptr(rcx))?;
    store(a, ar.at(ctl::WANT), Register::RAX)?;
    a.set_label(&mut end)?;
    a.pop(rdx)
}

/// Copy one original (non-control-flow) instruction, its RIP-relative
/// operand made absolute.
fn copy_instruction(
    a: &mut CodeAssembler,
    ins: &Instruction,
    ar: &ArenaAddrs,
    info: &mut InstructionInfoFactory,
) -> Result<(), Fail> {
    if !ins.is_ip_rel_memory_operand() {
        return Ok(a.add_instruction(*ins)?);
    }
    let target = ins.ip_rel_memory_address();
    if ins.mnemonic() == Mnemonic::Lea && ins.op0_kind() == OpKind::Register {
        let r = ins.op0_register();
        if r.size() == 8 {
            a.add_instruction(Instruction::with2(Code::Mov_r64_imm64, r, target)?)?;
            return Ok(());
        }
    }
    // A scratch register the instruction does not use.
    let used: Vec<Register> = info.info(ins).used_registers().iter().map(|u| u.register().full_register()).collect();
    let scratch = [Register::RAX, Register::RCX, Register::RDX, Register::RBX, Register::RSI, Register::RDI]
        .into_iter()
        .find(|r| !used.contains(r));
    let Some(s) = scratch else {
        return refuse(format!("no scratch register for `{ins}` at {:#x}", ins.ip()));
    };
    store(a, ar.at(ctl::SCRATCH), s)?;
    a.add_instruction(Instruction::with2(Code::Mov_r64_imm64, s, target)?)?;
    let mut copy = *ins;
    copy.set_memory_base(s);
    copy.set_memory_index(Register::None);
    copy.set_memory_displacement64(0);
    copy.set_memory_displ_size(1);
    a.add_instruction(copy)?;
    load(a, s, ar.at(ctl::SCRATCH))?;
    Ok(())
}

/// The block's record into the buffer: its address, then the staged
/// values. A full buffer asks the tracer to drain it first.
fn copy_out(a: &mut CodeAssembler, address: u64, values: usize, ar: &ArenaAddrs, stubs: &Stubs) -> Result<(), Fail> {
    let bytes = 8 * (1 + values as i32);
    let mut retry = a.create_label();
    let mut room = a.create_label();
    enter(a)?;
    a.set_label(&mut retry)?;
    load(a, Register::RCX, ar.at(ctl::CURSOR))?;
    a.lea(rax, ptr(rcx + bytes))?;
    add(a, Instruction::with2(Code::Cmp_r64_rm64, Register::RAX, rip(ar.at(ctl::LIMIT))))?;
    a.jbe(room)?;
    a.call(stubs.switch)?;
    a.jmp(retry)?;
    a.set_label(&mut room)?;
    store(a, ar.at(ctl::CURSOR), Register::RAX)?;
    a.mov(rax, address)?;
    a.mov(qword_ptr(rcx), rax)?;
    for i in 0..values as u64 {
        load(a, Register::RAX, ar.at(ctl::STAGE + 8 * i))?;
        a.mov(qword_ptr(rcx + 8 * (1 + i as i32)), rax)?;
    }
    leave(a)?;
    Ok(())
}

/// The block's last instruction: a call, a jump (direct, conditional,
/// indirect, `loop`, `jrcxz`) or a return, emulated.
#[allow(clippy::too_many_arguments)]
fn transfer(
    a: &mut CodeAssembler,
    ins: &Instruction,
    insn: &telco_itrc::x64::Insn,
    block: &X64Block,
    values: usize,
    stage: &mut u64,
    ar: &ArenaAddrs,
    stubs: &Stubs,
    exit: &mut dyn FnMut(&mut CodeAssembler, u64) -> Result<(), Fail>,
    stage_writes: &dyn Fn(&mut CodeAssembler, &mut u64) -> Result<(), Fail>,
) -> Result<(), Fail> {
    let next = ins.next_ip();
    let direct = matches!(ins.op0_kind(), OpKind::NearBranch64);
    match (insn.flow, ins.mnemonic()) {
        (Flow::Call, _) => {
            if !direct {
                want_from_operand(a, ins, ar)?;
            }
            // Push the real return address (no register: two halves).
            a.lea(rsp, ptr(rsp - 8))?;
            a.mov(dword_ptr(rsp), next as u32)?;
            a.mov(dword_ptr(rsp + 4), (next >> 32) as u32)?;
            stage_writes(a, stage)?;
            copy_out(a, block.address, values, ar, stubs)?;
            if direct {
                exit(a, ins.near_branch_target())?;
            } else {
                a.jmp(stubs.dispatch)?;
            }
        }
        (Flow::Return, _) => {
            let pop = if ins.op_count() == 1 { u64::from(ins.immediate16()) } else { 0 };
            a.lea(rsp, ptr(rsp - 128))?;
            a.push(rax)?;
            a.mov(rax, qword_ptr(rsp + 136))?;
            store(a, ar.at(ctl::WANT), Register::RAX)?;
            a.pop(rax)?;
            a.lea(rsp, ptr(rsp + (128 + 8 + pop as i32)))?;
            stage_writes(a, stage)?;
            copy_out(a, block.address, values, ar, stubs)?;
            a.jmp(stubs.dispatch)?;
        }
        (Flow::Branch, Mnemonic::Jmp) => {
            stage_writes(a, stage)?;
            if direct {
                copy_out(a, block.address, values, ar, stubs)?;
                exit(a, ins.near_branch_target())?;
            } else {
                want_from_operand(a, ins, ar)?;
                copy_out(a, block.address, values, ar, stubs)?;
                a.jmp(stubs.dispatch)?;
            }
        }
        (Flow::Branch, m @ (Mnemonic::Loop | Mnemonic::Loope | Mnemonic::Loopne)) => {
            if !matches!(ins.code(), Code::Loop_rel8_64_RCX | Code::Loope_rel8_64_RCX | Code::Loopne_rel8_64_RCX) {
                return refuse(format!("`{ins}` at {:#x}", ins.ip()));
            }
            // rcx - 1 (no flags), taken while rcx != 0 (and ZF as asked).
            a.lea(rcx, ptr(rcx - 1))?;
            stage_writes(a, stage)?;
            copy_out(a, block.address, values, ar, stubs)?;
            let mut fall = a.create_label();
            let mut taken = a.create_label();
            let mut check = a.create_label();
            a.jrcxz(fall)?;
            a.jmp(check)?;
            a.set_label(&mut check)?;
            match m {
                Mnemonic::Loope => a.jne(fall)?,
                Mnemonic::Loopne => a.je(fall)?,
                _ => {}
            }
            a.jmp(taken)?;
            a.set_label(&mut taken)?;
            exit(a, ins.near_branch_target())?;
            a.set_label(&mut fall)?;
            exit(a, next)?;
        }
        (Flow::Branch, _) if direct => {
            // jcc, jrcxz, jecxz: the flags and rcx are the program's.
            stage_writes(a, stage)?;
            copy_out(a, block.address, values, ar, stubs)?;
            let mut taken = a.create_label();
            if matches!(ins.mnemonic(), Mnemonic::Jrcxz | Mnemonic::Jecxz) {
                let mut fall = a.create_label();
                match ins.mnemonic() {
                    Mnemonic::Jrcxz => a.jrcxz(taken)?,
                    _ => a.jecxz(taken)?,
                }
                a.jmp(fall)?;
                a.set_label(&mut fall)?;
                exit(a, next)?;
            } else {
                // The same condition, to a local label.
                let cc = ins.condition_code();
                jcc(a, cc, taken)?;
                exit(a, next)?;
            }
            a.set_label(&mut taken)?;
            exit(a, ins.near_branch_target())?;
        }
        _ => return refuse(format!("`{ins}` at {:#x}", ins.ip())),
    }
    Ok(())
}

fn jcc(a: &mut CodeAssembler, cc: iced_x86::ConditionCode, l: CodeLabel) -> Result<(), Fail> {
    use iced_x86::ConditionCode as C;
    Ok(match cc {
        C::o => a.jo(l),
        C::no => a.jno(l),
        C::b => a.jb(l),
        C::ae => a.jae(l),
        C::e => a.je(l),
        C::ne => a.jne(l),
        C::be => a.jbe(l),
        C::a => a.ja(l),
        C::s => a.js(l),
        C::ns => a.jns(l),
        C::p => a.jp(l),
        C::np => a.jnp(l),
        C::l => a.jl(l),
        C::ge => a.jge(l),
        C::le => a.jle(l),
        C::g => a.jg(l),
        C::None => return refuse("a branch without a condition".into()),
    }?)
}

/// An indirect call's or jump's target into `WANT`, read as the program
/// would (its operand, with rsp as the program's).
fn want_from_operand(a: &mut CodeAssembler, ins: &Instruction, ar: &ArenaAddrs) -> Result<(), Fail> {
    a.lea(rsp, ptr(rsp - 128))?;
    a.push(rax)?;
    match ins.op0_kind() {
        OpKind::Register => {
            let r = ins.op0_register();
            if r == Register::RSP {
                return refuse(format!("`{ins}` at {:#x}", ins.ip()));
            }
            a.add_instruction(Instruction::with2(Code::Mov_r64_rm64, Register::RAX, r)?)?;
        }
        OpKind::Memory => {
            let mut m = MemoryOperand::new(
                ins.memory_base(),
                ins.memory_index(),
                ins.memory_index_scale(),
                ins.memory_displacement64() as i64,
                8,
                false,
                ins.segment_prefix(),
            );
            if ins.memory_base() == Register::ESP
                || (ins.is_ip_rel_memory_operand() && ins.segment_prefix() != Register::None)
            {
                return refuse(format!("`{ins}` at {:#x}", ins.ip()));
            }
            if ins.is_ip_rel_memory_operand() {
                a.mov(rax, ins.ip_rel_memory_address())?;
                m = MemoryOperand::with_base(Register::RAX);
            } else if ins.memory_base() == Register::RSP {
                m.displacement += 136;
            }
            if ins.memory_index() == Register::RSP {
                return refuse(format!("`{ins}` at {:#x}", ins.ip()));
            }
            a.add_instruction(Instruction::with2(Code::Mov_r64_rm64, Register::RAX, m)?)?;
        }
        _ => return refuse(format!("`{ins}` at {:#x}", ins.ip())),
    }
    store(a, ar.at(ctl::WANT), Register::RAX)?;
    a.pop(rax)?;
    a.lea(rsp, ptr(rsp + 128))?;
    Ok(())
}
