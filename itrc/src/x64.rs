//! x86_64: the register list of our ITRC files and basic-block analysis.
//!
//! A block starts where execution enters it and ends after its first
//! control-flow instruction (anything iced-x86 does not classify as
//! `FlowControl::Next`: `jmp`, `jcc`, `loop`, `jrcxz`, `call`, `ret`,
//! `syscall`, `int`, `ud2`, …), or earlier when its bytes run out, an
//! invalid instruction follows, or it reaches [`MAX_BLOCK_BYTES`]. Such a
//! block simply ends with an ordinary instruction; execution then enters the
//! block at the next address.

use crate::reader::RegisterSpec;
use iced_x86::{
    Decoder, DecoderError, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, InstructionInfoOptions,
    Mnemonic, OpAccess, Register,
};

/// Register names in `itrace:start` order: Frida's x64 `GumCpuContext`
/// (`rip`, `r15` … `r8`, `rdi`, `rsi`, `rbp`, `rsp`, `rbx`, `rdx`, `rcx`,
/// `rax`), then `rflags`, then the pseudo-register `ra`. All are 8 bytes.
pub const REGISTERS: [&str; 19] = [
    "rip", "r15", "r14", "r13", "r12", "r11", "r10", "r9", "r8", "rdi", "rsi", "rbp", "rsp", "rbx", "rdx", "rcx",
    "rax", "rflags", "ra",
];
/// Index of `rip`. Never a write: a record's position in its block says it.
pub const RIP: u32 = 0;
/// Index of `rsp`.
pub const RSP: u32 = 12;
/// Index of `rax`.
pub const RAX: u32 = 16;
/// Index of `rflags`: written by every instruction that modifies a flag.
pub const RFLAGS: u32 = 17;
/// Index of `ra`, the link-register stand-in: the return address of the
/// function the block belongs to, recorded at block entry as every block's
/// first write `[0, RA]`.
pub const RA: u32 = 18;

/// The longest block we decode; a longer run without a branch is cut into
/// blocks of at most this many bytes.
pub const MAX_BLOCK_BYTES: usize = 4096;

/// The vector registers after `ra` in the list, 32 bytes each (their
/// `xmm` halves for SSE, whole for AVX; indices [`YMM0`]…).
pub const VECTORS: [&str; 16] = [
    "ymm0", "ymm1", "ymm2", "ymm3", "ymm4", "ymm5", "ymm6", "ymm7", "ymm8", "ymm9", "ymm10", "ymm11", "ymm12", "ymm13",
    "ymm14", "ymm15",
];
/// Index of `ymm0`.
pub const YMM0: u32 = 19;
/// Bytes of a vector register's value.
pub const VECTOR_SIZE: usize = 32;

/// The size of the value of register `index` in a record.
pub fn value_size(index: u32) -> usize {
    if index >= YMM0 {
        VECTOR_SIZE
    } else {
        8
    }
}

/// The `itrace:start` register list: [`REGISTERS`], then [`VECTORS`].
pub fn register_specs() -> Vec<RegisterSpec> {
    REGISTERS
        .iter()
        .map(|n| RegisterSpec { name: (*n).to_string(), size: 8 })
        .chain(VECTORS.iter().map(|n| RegisterSpec { name: (*n).to_string(), size: VECTOR_SIZE as u32 }))
        .collect()
}

/// The 18 machine registers of a thread, in Frida's order (`ra` is not a
/// machine register; the [`crate::Recorder`] tracks it), and its vector
/// registers (`ymm`, zero where unknown).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct X64Regs {
    pub rip: u64,
    pub r15: u64,
    pub r14: u64,
    pub r13: u64,
    pub r12: u64,
    pub r11: u64,
    pub r10: u64,
    pub r9: u64,
    pub r8: u64,
    pub rdi: u64,
    pub rsi: u64,
    pub rbp: u64,
    pub rsp: u64,
    pub rbx: u64,
    pub rdx: u64,
    pub rcx: u64,
    pub rax: u64,
    pub rflags: u64,
    pub ymm: [[u8; VECTOR_SIZE]; 16],
}

impl X64Regs {
    /// From the values in [`REGISTERS`] order (without `ra`).
    pub fn from_array(v: [u64; 18]) -> Self {
        let [rip, r15, r14, r13, r12, r11, r10, r9, r8, rdi, rsi, rbp, rsp, rbx, rdx, rcx, rax, rflags] = v;
        X64Regs {
            rip,
            r15,
            r14,
            r13,
            r12,
            r11,
            r10,
            r9,
            r8,
            rdi,
            rsi,
            rbp,
            rsp,
            rbx,
            rdx,
            rcx,
            rax,
            rflags,
            ymm: Default::default(),
        }
    }

    /// Append register `index`'s value as a record holds it (little-endian,
    /// [`value_size`] bytes; `ra` and unknown indices as 0).
    pub fn put(&self, index: u32, out: &mut Vec<u8>) {
        if index >= YMM0 {
            match self.ymm.get((index - YMM0) as usize) {
                Some(v) => out.extend_from_slice(v),
                None => out.extend_from_slice(&[0; VECTOR_SIZE]),
            }
        } else {
            out.extend_from_slice(&self.get(index).unwrap_or(0).to_le_bytes());
        }
    }

    /// The values in [`REGISTERS`] order (without `ra`).
    pub fn to_array(&self) -> [u64; 18] {
        let r = self;
        [
            r.rip, r.r15, r.r14, r.r13, r.r12, r.r11, r.r10, r.r9, r.r8, r.rdi, r.rsi, r.rbp, r.rsp, r.rbx, r.rdx,
            r.rcx, r.rax, r.rflags,
        ]
    }

    /// The register at `index` in [`REGISTERS`]; `None` for `ra` and beyond.
    pub fn get(&self, index: u32) -> Option<u64> {
        self.to_array().get(index as usize).copied()
    }

    /// Sets the register at `index` in [`REGISTERS`]; ignores `ra` and
    /// beyond.
    pub fn set(&mut self, index: u32, value: u64) {
        let mut a = self.to_array();
        if let Some(slot) = a.get_mut(index as usize) {
            *slot = value;
            let ymm = self.ymm;
            *self = X64Regs::from_array(a);
            self.ymm = ymm;
        }
    }
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
impl From<&libc::user_regs_struct> for X64Regs {
    /// From `PTRACE_GETREGS`.
    fn from(r: &libc::user_regs_struct) -> Self {
        X64Regs {
            rip: r.rip,
            r15: r.r15,
            r14: r.r14,
            r13: r.r13,
            r12: r.r12,
            r11: r.r11,
            r10: r.r10,
            r9: r.r9,
            r8: r.r8,
            rdi: r.rdi,
            rsi: r.rsi,
            rbp: r.rbp,
            rsp: r.rsp,
            rbx: r.rbx,
            rdx: r.rdx,
            rcx: r.rcx,
            rax: r.rax,
            rflags: r.eflags,
            ymm: Default::default(),
        }
    }
}

impl X64Regs {
    /// The vector registers from an `NT_X86_XSTATE` register set (XSAVE's
    /// standard layout: `xmm` in the legacy area at 160, the upper halves of
    /// `ymm` at 576 when the AVX component is not in its initial state).
    pub fn set_xstate(&mut self, xsave: &[u8]) {
        let avx = xsave.get(512).is_some_and(|bv| bv & 4 != 0);
        for (n, v) in self.ymm.iter_mut().enumerate() {
            *v = [0; VECTOR_SIZE];
            if let Some(lo) = xsave.get(160 + 16 * n..176 + 16 * n) {
                v[..16].copy_from_slice(lo);
            }
            if avx {
                if let Some(hi) = xsave.get(576 + 16 * n..592 + 16 * n) {
                    v[16..].copy_from_slice(hi);
                }
            }
        }
    }
}

/// How control leaves an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Falls through to the next instruction.
    Next,
    /// A near `call` (direct or indirect).
    Call,
    /// A near `ret`.
    Return,
    /// `jmp`, `jcc`, `loop*`, `jrcxz`: direct or indirect.
    Branch,
    /// `syscall` / `sysenter`.
    Syscall,
    /// Anything else that is not `Next`: `int`, `int3`, `ud2`, far
    /// transfers, `xbegin`, …
    Other,
}

/// One decoded instruction of a block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Offset from the block start.
    pub offset: u32,
    /// Length in bytes.
    pub len: u32,
    pub flow: Flow,
    /// Indices (into [`REGISTERS`]) of the registers the instruction
    /// writes, each once: a partial write (`eax`, `ax`, `al`, `ah`) is a
    /// write of the full register; flags are `rflags`. Never `rip` or `ra`.
    pub writes: Vec<u32>,
}

/// Why decoding stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockEnd {
    /// After a control-flow instruction: the normal case.
    ControlFlow,
    /// The bytes ran out (unreadable memory, or [`MAX_BLOCK_BYTES`]).
    OutOfBytes,
    /// The next bytes do not decode; the block stops before them.
    Invalid,
}

/// A decoded basic block (of either architecture: `crate::a64` makes
/// them too, with its own register indices).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct X64Block {
    pub address: u64,
    pub insns: Vec<Insn>,
    /// The block's code bytes (exactly `size()` of them).
    pub code: Vec<u8>,
    pub end: BlockEnd,
    /// The index of the link register, every block's first write: [`RA`]
    /// here, `a64::LR` on aarch64.
    pub link: u32,
}

impl X64Block {
    /// Size in bytes (0 if not even the first instruction decoded).
    pub fn size(&self) -> u32 {
        self.insns.last().map(|i| i.offset + i.len).unwrap_or(0)
    }

    /// The block's `writes` for `itrace:compile`: `[0, link]` first, then
    /// every instruction's writes at the offset just after it (Frida's
    /// convention: the value is the register's value after the instruction).
    pub fn writes(&self) -> Vec<(u32, u32)> {
        let mut w = vec![(0, self.link)];
        for i in &self.insns {
            w.extend(i.writes.iter().map(|&r| (i.offset + i.len, r)));
        }
        w
    }
}

/// Index in [`REGISTERS`] of a general-purpose register or any part of one
/// (`al`, `ax`, `eax`, `r8d`, …); `None` for `rip`, segment, vector, mask,
/// control and other registers.
pub fn gpr_index(reg: Register) -> Option<u32> {
    Some(match reg.full_register() {
        Register::R15 => 1,
        Register::R14 => 2,
        Register::R13 => 3,
        Register::R12 => 4,
        Register::R11 => 5,
        Register::R10 => 6,
        Register::R9 => 7,
        Register::R8 => 8,
        Register::RDI => 9,
        Register::RSI => 10,
        Register::RBP => 11,
        Register::RSP => RSP,
        Register::RBX => 13,
        Register::RDX => 14,
        Register::RCX => 15,
        Register::RAX => RAX,
        _ => return None,
    })
}

/// Index in the register list of a vector register (`xmm0`…`xmm15`,
/// `ymm0`…`ymm15`, and the low halves of `zmm0`…`zmm15`); `None` for the
/// others (`xmm16` up, mask registers, x87).
pub fn vector_index(reg: Register) -> Option<u32> {
    let n = if reg.is_xmm() {
        reg.number()
    } else if reg.is_ymm() {
        reg.number()
    } else if reg.is_zmm() {
        reg.number()
    } else {
        return None;
    };
    (n < 16).then_some(YMM0 + n as u32)
}

fn flow_of(instr: &Instruction) -> Flow {
    match instr.flow_control() {
        FlowControl::Next => Flow::Next,
        FlowControl::Call | FlowControl::IndirectCall => match instr.mnemonic() {
            Mnemonic::Call if !instr.is_call_far() && !instr.is_call_far_indirect() => Flow::Call,
            Mnemonic::Syscall | Mnemonic::Sysenter => Flow::Syscall,
            _ => Flow::Other,
        },
        FlowControl::Return if instr.mnemonic() == Mnemonic::Ret => Flow::Return,
        FlowControl::UnconditionalBranch | FlowControl::IndirectBranch | FlowControl::ConditionalBranch => {
            if instr.is_jmp_far() || instr.is_jmp_far_indirect() {
                Flow::Other
            } else {
                Flow::Branch
            }
        }
        _ => Flow::Other,
    }
}

/// The registers `instr` writes, as indices into [`REGISTERS`], in the
/// order iced-x86 lists them, `rflags` last.
pub fn instruction_writes(factory: &mut InstructionInfoFactory, instr: &Instruction) -> Vec<u32> {
    let mut out = Vec::new();
    let info = factory.info_options(instr, InstructionInfoOptions::NO_MEMORY_USAGE);
    for used in info.used_registers() {
        let writes = matches!(
            used.access(),
            OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite
        );
        if let Some(i) = gpr_index(used.register()).or_else(|| vector_index(used.register())).filter(|_| writes) {
            if !out.contains(&i) {
                out.push(i);
            }
        }
    }
    // The kernel's result: the instruction itself only clobbers rcx and
    // r11 (and iced-x86 says so), but after the step rax holds the return
    // value.
    if matches!(instr.mnemonic(), Mnemonic::Syscall | Mnemonic::Sysenter) {
        for r in [RAX, 15, 5] {
            if !out.contains(&r) {
                out.push(r);
            }
        }
    }
    if instr.rflags_modified() != 0 {
        out.push(RFLAGS);
    }
    out
}

/// Decodes the block at `address` from `code` (the bytes there; more than
/// the block is fine). Pure: never fails, never reads memory.
pub fn decode_block(address: u64, code: &[u8]) -> X64Block {
    let code = &code[..code.len().min(MAX_BLOCK_BYTES)];
    let mut factory = InstructionInfoFactory::new();
    let mut decoder = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
    let mut instr = Instruction::default();
    let mut insns = Vec::new();
    let end = loop {
        if !decoder.can_decode() {
            break BlockEnd::OutOfBytes;
        }
        let offset = decoder.position() as u32;
        decoder.decode_out(&mut instr);
        match decoder.last_error() {
            DecoderError::None => {}
            DecoderError::NoMoreBytes => break BlockEnd::OutOfBytes,
            _ => break BlockEnd::Invalid,
        }
        let flow = flow_of(&instr);
        insns.push(Insn { offset, len: instr.len() as u32, flow, writes: instruction_writes(&mut factory, &instr) });
        if flow != Flow::Next {
            break BlockEnd::ControlFlow;
        }
    };
    let size = insns.last().map(|i| (i.offset + i.len) as usize).unwrap_or(0);
    X64Block { address, insns, code: code[..size].to_vec(), end, link: RA }
}

/// Reads and decodes the block at `address`. `read(addr, buf)` copies
/// target memory at `addr` into `buf` and returns how many bytes it copied
/// (fewer at the end of a mapping, 0 if unreadable). Reads 256 bytes at a
/// time, only as many as the block needs.
pub fn read_block(address: u64, read: &mut dyn FnMut(u64, &mut [u8]) -> usize) -> X64Block {
    read_block_with(address, read, 1, decode_block)
}

/// [`read_block`] for any architecture: `decode` a block from the bytes
/// read so far, more read while it runs out of them, in whole `align`-byte
/// instructions.
pub(crate) fn read_block_with(
    address: u64,
    read: &mut dyn FnMut(u64, &mut [u8]) -> usize,
    align: usize,
    decode: fn(u64, &[u8]) -> X64Block,
) -> X64Block {
    let mut code = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        let block = decode(address, &code);
        if block.end != BlockEnd::OutOfBytes || code.len() >= MAX_BLOCK_BYTES {
            return block;
        }
        let want = buf.len().min(MAX_BLOCK_BYTES - code.len());
        let n = read(address.wrapping_add(code.len() as u64), &mut buf[..want]).min(want) / align * align;
        if n == 0 {
            return block;
        }
        code.extend_from_slice(&buf[..n]);
    }
}

/// Disassembles `code` at `address`, one `(address, bytes, text)` per
/// instruction (NASM syntax); undecodable bytes become `(bad)` one byte at a
/// time.
pub fn disassemble(address: u64, code: &[u8]) -> Vec<(u64, Vec<u8>, String)> {
    use iced_x86::{Formatter, NasmFormatter};
    let mut fmt = NasmFormatter::new();
    let o = fmt.options_mut();
    o.set_space_after_operand_separator(true);
    o.set_hex_prefix("0x");
    o.set_hex_suffix("");
    o.set_uppercase_hex(false);
    o.set_branch_leading_zeros(false);
    let mut out = Vec::new();
    let mut decoder = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
    let mut instr = Instruction::default();
    while decoder.can_decode() {
        let pos = decoder.position();
        decoder.decode_out(&mut instr);
        if decoder.last_error() != DecoderError::None {
            out.push((address.wrapping_add(pos as u64), vec![code[pos]], "(bad)".to_string()));
            // Resynchronise one byte further on.
            if decoder.set_position(pos + 1).is_err() {
                break;
            }
            decoder.set_ip(address.wrapping_add(pos as u64 + 1));
            continue;
        }
        let mut text = String::new();
        fmt.format(&instr, &mut text);
        out.push((instr.ip(), code[pos..pos + instr.len()].to_vec(), text));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::code_asm::*;

    fn asm(address: u64, f: impl FnOnce(&mut CodeAssembler) -> Result<(), IcedError>) -> Vec<u8> {
        let mut a = CodeAssembler::new(64).unwrap();
        f(&mut a).unwrap();
        a.assemble(address).unwrap()
    }

    fn names(ws: &[u32]) -> Vec<&'static str> {
        ws.iter().map(|&i| REGISTERS[i as usize]).collect()
    }

    #[test]
    fn partial_register_writes_are_writes_of_the_full_register() {
        let code = asm(0x1000, |a| {
            a.mov(eax, 1)?;
            a.mov(al, 2)?;
            a.mov(ah, 3)?;
            a.mov(cx, 4)?;
            a.mov(r9d, 5)?;
            a.mov(r10b, 6)?;
            a.ret()
        });
        let b = decode_block(0x1000, &code);
        let per: Vec<_> = b.insns.iter().map(|i| names(&i.writes)).collect();
        assert_eq!(per, [vec!["rax"], vec!["rax"], vec!["rax"], vec!["rcx"], vec!["r9"], vec!["r10"], vec!["rsp"]]);
        assert_eq!(b.end, BlockEnd::ControlFlow);
        assert_eq!(b.size() as usize, code.len());
    }

    #[test]
    fn flags_are_written_by_arithmetic_not_by_mov_or_lea() {
        let code = asm(0x1000, |a| {
            a.add(rax, rbx)?;
            a.cmp(rdi, 0)?;
            a.lea(rdx, ptr(rdi + 8))?;
            a.inc(ecx)?;
            a.xor(eax, eax)?;
            a.test(esi, esi)?;
            a.jne(0x1000)
        });
        let b = decode_block(0x1000, &code);
        let per: Vec<_> = b.insns.iter().map(|i| names(&i.writes)).collect();
        assert_eq!(
            per,
            [
                vec!["rax", "rflags"],
                vec!["rflags"],
                vec!["rdx"],
                vec!["rcx", "rflags"],
                vec!["rax", "rflags"],
                vec!["rflags"],
                vec![],
            ]
        );
        assert_eq!(b.insns.last().unwrap().flow, Flow::Branch);
    }

    #[test]
    fn blocks_end_at_the_first_control_flow_instruction() {
        let cases: [(&str, Vec<u8>, Flow, Vec<&str>); 6] = [
            (
                "call",
                asm(0x1000, |a| {
                    a.push(rbp)?;
                    a.call(0x2000)?;
                    a.nop()
                }),
                Flow::Call,
                vec!["rsp"],
            ),
            (
                "ret",
                asm(0x1000, |a| {
                    a.pop(rbp)?;
                    a.ret()?;
                    a.nop()
                }),
                Flow::Return,
                vec!["rsp"],
            ),
            (
                "jcc",
                asm(0x1000, |a| {
                    a.sub(rsp, 8)?;
                    a.je(0x1000)?;
                    a.nop()
                }),
                Flow::Branch,
                vec![],
            ),
            (
                "jmp reg",
                asm(0x1000, |a| {
                    a.mov(rax, rdi)?;
                    a.jmp(rax)?;
                    a.nop()
                }),
                Flow::Branch,
                vec![],
            ),
            (
                "loop",
                asm(0x1000, |a| {
                    a.nop()?;
                    a.loop_(0x1000)?;
                    a.nop()
                }),
                Flow::Branch,
                vec!["rcx"],
            ),
            (
                "syscall",
                asm(0x1000, |a| {
                    a.mov(eax, 39)?;
                    a.syscall()?;
                    a.nop()
                }),
                Flow::Syscall,
                vec!["rcx", "r11", "rax", "rflags"],
            ),
        ];
        for (what, code, flow, last_writes) in cases {
            let b = decode_block(0x1000, &code);
            assert_eq!(b.insns.len(), 2, "{what}");
            assert_eq!(b.size() as usize, code.len() - 1, "{what}: the trailing nop is not in the block");
            let last = b.insns.last().unwrap();
            assert_eq!(last.flow, flow, "{what}");
            let mut got = names(&last.writes);
            got.sort();
            let mut want = last_writes.clone();
            want.sort();
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn block_writes_start_with_ra_and_sit_after_their_instruction() {
        let code = asm(0x1000, |a| {
            a.push(rbp)?; // 1 byte
            a.mov(rbp, rsp)?; // 3 bytes
            a.ret()
        });
        let b = decode_block(0x1000, &code);
        assert_eq!(b.writes(), [(0, RA), (1, RSP), (4, 11), (5, RSP)]);
    }

    #[test]
    fn short_unreadable_and_invalid_code() {
        // mov eax, imm32 cut short: no instruction at all.
        let b = decode_block(0x1000, &[0xb8, 1, 2]);
        assert_eq!((b.insns.len(), b.end, b.size()), (0, BlockEnd::OutOfBytes, 0));
        // nop, then bytes that do not decode in 64-bit mode (0x06 = push es).
        let b = decode_block(0x1000, &[0x90, 0x06, 0xc3]);
        assert_eq!((b.insns.len(), b.end, b.size()), (1, BlockEnd::Invalid, 1));
        // A reader that returns memory in pieces and then nothing.
        let code = asm(0x1000, |a| {
            for _ in 0..100 {
                a.mov(rax, 0x1122334455667788u64)?;
            }
            a.ret()
        });
        let mut reads = 0;
        let b = read_block(0x1000, &mut |addr, buf| {
            reads += 1;
            let at = (addr - 0x1000) as usize;
            let n = buf.len().min(code.len().saturating_sub(at)).min(100);
            buf[..n].copy_from_slice(&code[at..at + n]);
            n
        });
        assert_eq!(b.insns.len(), 101);
        assert_eq!(b.code, code);
        assert!(reads >= 11, "{reads}");
        let b = read_block(0x1000, &mut |_, _| 0);
        assert!(b.insns.is_empty());
    }

    #[test]
    fn long_straight_line_code_is_cut_at_max_block_bytes() {
        let code = vec![0x90u8; MAX_BLOCK_BYTES + 100];
        let b = read_block(0x1000, &mut |addr, buf| {
            let at = (addr - 0x1000) as usize;
            let n = buf.len().min(code.len() - at);
            buf[..n].copy_from_slice(&code[at..at + n]);
            n
        });
        assert_eq!(b.size() as usize, MAX_BLOCK_BYTES);
        assert_eq!(b.end, BlockEnd::OutOfBytes);
    }

    #[test]
    fn disassembly_survives_bad_bytes() {
        let d = disassemble(0x1000, &[0x90, 0x06, 0xc3]);
        let text: Vec<_> = d.iter().map(|(a, _, t)| format!("{a:#x} {t}")).collect();
        assert_eq!(text, ["0x1000 nop", "0x1001 (bad)", "0x1002 ret"]);
        let d = disassemble(0x1000, &[0xe8, 0x1b, 0, 0, 0, 0x48, 0x8b, 0x44, 0x24, 0x10]);
        let text: Vec<_> = d.iter().map(|(_, _, t)| t.as_str()).collect();
        assert_eq!(text, ["call 0x1020", "mov rax, [rsp+0x10]"]);
    }
}
