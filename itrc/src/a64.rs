//! aarch64: Frida's arm64 register list and basic-block analysis, for the
//! ITRC files telco-stap writes on aarch64 (what `frida-itrace` writes).
//!
//! * Registers ([`REGISTERS`]): Frida's `GumArm64CpuContext` order: `pc`,
//!   `sp`, `nzcv`, `x0` … `x28`, `fp`, `lr` (8 bytes each), then `v0` …
//!   `v31` (16 bytes each). Every block's first write is `[0, 33]`: `lr`
//!   at block entry, the link register itself (on x86_64 a stand-in).
//! * A block ends after its first branch (`b`, `b.cond`, `cbz`, `tbz`,
//!   `br`, `bl`, `blr`, `ret` and their authenticated forms), as Frida's
//!   Stalker cuts them; `svc` does not end one.
//! * An instruction's writes: its destination registers (a `wN` write is
//!   `xN`, a scalar or vector SIMD write is the whole `vN`, `sp` when it is
//!   the destination or a written-back base), and `nzcv` for the
//!   flag-setting instructions. Unlike Frida, a block's last instruction's
//!   writes are recorded too (`lr` after `bl`), as on x86_64 (`crate::x64`).
//!   The list may name a register an instruction only reads (an exclusive
//!   store's status register is written; other stores' sources are not
//!   listed); a value recorded for it is its value after the instruction,
//!   so replaying the writes always gives the true registers.

use crate::reader::RegisterSpec;
use crate::x64::{BlockEnd, Flow, Insn, X64Block};
use yaxpeax_arch::{Decoder, U8Reader};
use yaxpeax_arm::armv8::a64::{InstDecoder, Instruction, Opcode, Operand};

/// Index of `pc` (never a write).
pub const PC: u32 = 0;
/// Index of `sp`.
pub const SP: u32 = 1;
/// Index of `nzcv`.
pub const NZCV: u32 = 2;
/// Index of `x0` (`xN` is `X0 + N` for N ≤ 28).
pub const X0: u32 = 3;
/// Index of `fp` (x29).
pub const FP: u32 = 32;
/// Index of `lr` (x30): every block's first write.
pub const LR: u32 = 33;
/// Index of `v0`.
pub const V0: u32 = 34;
/// Bytes of a vector register's value.
pub const VECTOR_SIZE: usize = 16;

/// The `itrace:start` register list.
pub fn register_specs() -> Vec<RegisterSpec> {
    let mut v: Vec<RegisterSpec> =
        ["pc", "sp", "nzcv"].iter().map(|n| RegisterSpec { name: (*n).to_string(), size: 8 }).collect();
    v.extend((0..29).map(|i| RegisterSpec { name: format!("x{i}"), size: 8 }));
    v.extend(["fp", "lr"].iter().map(|n| RegisterSpec { name: (*n).to_string(), size: 8 }));
    v.extend((0..32).map(|i| RegisterSpec { name: format!("v{i}"), size: VECTOR_SIZE as u32 }));
    v
}

/// The size of register `index`'s value.
pub fn value_size(index: u32) -> usize {
    if index >= V0 {
        VECTOR_SIZE
    } else {
        8
    }
}

/// A thread's registers in Frida's layout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct A64Regs {
    pub pc: u64,
    pub sp: u64,
    /// The condition flags as the `nzcv` system register holds them (bits
    /// 28–31 of `pstate`).
    pub nzcv: u64,
    pub x: [u64; 29],
    pub fp: u64,
    pub lr: u64,
    pub v: [[u8; 16]; 32],
}

impl A64Regs {
    /// From the kernel's `user_pt_regs` words (x0–x30, sp, pc, pstate).
    pub fn from_pt_regs(regs: &[u64; 31], sp: u64, pc: u64, pstate: u64) -> Self {
        let mut x = [0u64; 29];
        x.copy_from_slice(&regs[..29]);
        A64Regs { pc, sp, nzcv: pstate & 0xf000_0000, x, fp: regs[29], lr: regs[30], v: [[0; 16]; 32] }
    }

    /// The vector registers from `NT_PRFPREG`'s bytes (`v0`–`v31` first).
    pub fn set_fpsimd(&mut self, fp: &[u8]) {
        for (i, v) in self.v.iter_mut().enumerate() {
            if let Some(b) = fp.get(16 * i..16 * i + 16) {
                v.copy_from_slice(b);
            }
        }
    }

    /// Register `index`'s value, appended to `out` (8 or 16 bytes).
    pub fn put(&self, index: u32, out: &mut Vec<u8>) {
        match index {
            PC => out.extend_from_slice(&self.pc.to_le_bytes()),
            SP => out.extend_from_slice(&self.sp.to_le_bytes()),
            NZCV => out.extend_from_slice(&self.nzcv.to_le_bytes()),
            FP => out.extend_from_slice(&self.fp.to_le_bytes()),
            LR => out.extend_from_slice(&self.lr.to_le_bytes()),
            i if (X0..FP).contains(&i) => out.extend_from_slice(&self.x[(i - X0) as usize].to_le_bytes()),
            i if (V0..V0 + 32).contains(&i) => out.extend_from_slice(&self.v[(i - V0) as usize]),
            _ => out.extend_from_slice(&0u64.to_le_bytes()),
        }
    }

    /// Every register's value in list order (`itrace:start`'s data).
    pub fn values(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 * 34 + 16 * 32);
        for i in 0..V0 + 32 {
            self.put(i, &mut out);
        }
        out
    }
}

/// The list index of general register `n` (31 is `sp` where `sp_at_31`,
/// else the zero register: no index).
fn gpr(n: u16, sp_at_31: bool) -> Option<u32> {
    match n {
        0..=28 => Some(X0 + u32::from(n)),
        29 => Some(FP),
        30 => Some(LR),
        31 if sp_at_31 => Some(SP),
        _ => None,
    }
}

fn push(out: &mut Vec<u32>, r: Option<u32>) {
    if let Some(r) = r {
        if !out.contains(&r) {
            out.push(r);
        }
    }
}

/// The registers operand `o` names as a destination.
fn dest(o: &Operand, out: &mut Vec<u32>) {
    match *o {
        Operand::Register(_, n) => push(out, gpr(n, false)),
        Operand::RegisterOrSP(_, n) => push(out, gpr(n, true)),
        Operand::RegisterPair(_, n) => {
            push(out, gpr(n, false));
            push(out, gpr(n + 1, false));
        }
        Operand::SIMDRegister(_, n)
        | Operand::SIMDRegisterElements(_, n, _)
        | Operand::SIMDRegisterElementsLane(_, n, _, _)
        | Operand::SIMDRegisterElementsMultipleLane(_, n, _, _, _) => push(out, Some(V0 + u32::from(n % 32))),
        Operand::SIMDRegisterGroup(_, n, _, k) | Operand::SIMDRegisterGroupLane(n, _, _, k) => {
            for i in 0..u16::from(k) {
                push(out, Some(V0 + u32::from((n + i) % 32)));
            }
        }
        _ => {}
    }
}

/// How control leaves `i`.
fn flow_of(i: &Instruction) -> Flow {
    use Opcode::*;
    match i.opcode {
        BL | BLR | BLRAA | BLRAAZ | BLRAB | BLRABZ => Flow::Call,
        RET | RETAA | RETAB => Flow::Return,
        B | Bcc(_) | BCcc(_) | CBZ | CBNZ | TBZ | TBNZ | BR | BRAA | BRAAZ | BRAB | BRABZ => Flow::Branch,
        ERET => Flow::Other,
        _ => Flow::Next,
    }
}

/// The registers instruction `i` writes (see the module's documentation).
pub fn instruction_writes(i: &Instruction) -> Vec<u32> {
    use Opcode::*;
    let mut out = Vec::new();
    let name = format!("{:?}", i.opcode);
    match i.opcode {
        BL | BLR | BLRAA | BLRAAZ | BLRAB | BLRABZ => push(&mut out, Some(LR)),
        // The result of the call.
        SVC => push(&mut out, Some(X0)),
        B | Bcc(_) | BCcc(_) | CBZ | CBNZ | TBZ | TBNZ | BR | BRAA | BRAAZ | BRAB | BRABZ | RET | RETAA | RETAB => {}
        MSR => push(&mut out, Some(NZCV)),
        _ => {
            let store = name.starts_with("ST") && !name.contains("XR") && !name.contains("XP");
            if !store {
                dest(&i.operands[0], &mut out);
                // A pair load's second register; an atomic's loaded value.
                if name.starts_with("LD") || name.starts_with("CAS") || name.starts_with("SWP") {
                    dest(&i.operands[1], &mut out);
                }
            }
        }
    }
    if matches!(i.opcode, ADDS | SUBS | ANDS | BICS | ADCS | SBCS | CCMN | CCMP | FCMP | FCMPE | FCCMP | FCCMPE)
        || matches!(i.opcode, SETF8 | SETF16 | RMIF)
        || matches!(name.as_str(), "CMP" | "CMN" | "TST" | "NEGS" | "NGCS" | "CFINV" | "AXFLAG" | "XAFLAG")
    {
        push(&mut out, Some(NZCV));
    }
    // A written-back base register (pre- or post-indexed addressing).
    for o in &i.operands {
        match *o {
            Operand::RegPreIndex(n, _, true) | Operand::RegPostIndex(n, _) | Operand::RegPostIndexReg(n, _) => {
                push(&mut out, gpr(n, true))
            }
            _ => {}
        }
    }
    out
}

/// Decodes the block at `address` from `code`. Pure: never fails.
pub fn decode_block(address: u64, code: &[u8]) -> X64Block {
    let code = &code[..code.len().min(crate::x64::MAX_BLOCK_BYTES) & !3];
    let decoder = InstDecoder::default();
    let mut insns = Vec::new();
    let mut end = BlockEnd::OutOfBytes;
    for (k, w) in code.chunks_exact(4).enumerate() {
        let mut reader = U8Reader::new(w);
        let Ok(i) = decoder.decode(&mut reader) else {
            end = BlockEnd::Invalid;
            break;
        };
        let flow = flow_of(&i);
        insns.push(Insn { offset: 4 * k as u32, len: 4, flow, writes: instruction_writes(&i) });
        if flow != Flow::Next {
            end = BlockEnd::ControlFlow;
            break;
        }
    }
    let size = 4 * insns.len();
    X64Block { address, insns, code: code[..size].to_vec(), end, link: LR }
}

/// Reads and decodes the block at `address` (`read` as for
/// `x64::read_block`).
pub fn read_block(address: u64, read: &mut dyn FnMut(u64, &mut [u8]) -> usize) -> X64Block {
    crate::x64::read_block_with(address, read, 4, decode_block)
}

/// aarch64 for the recorder (`crate::A64Recorder`).
pub struct A64;

impl crate::isa::Isa for A64 {
    type Regs = A64Regs;

    fn specs() -> Vec<RegisterSpec> {
        register_specs()
    }

    fn start_values(regs: &A64Regs, _link: u64) -> Vec<u8> {
        regs.values()
    }

    fn pc(regs: &A64Regs) -> u64 {
        regs.pc
    }

    fn put(regs: &A64Regs, index: u32, out: &mut Vec<u8>) {
        regs.put(index, out)
    }

    fn value_size(index: u32) -> usize {
        value_size(index)
    }

    fn read_block(pc: u64, read: &mut dyn FnMut(u64, &mut [u8]) -> usize) -> X64Block {
        read_block(pc, read)
    }

    /// One undecodable instruction, writing every general register, sp
    /// and the flags.
    fn opaque_block(pc: u64, _regs_after: &A64Regs, code: Vec<u8>) -> X64Block {
        X64Block {
            address: pc,
            insns: vec![Insn { offset: 0, len: 4, flow: Flow::Other, writes: (SP..=LR).collect() }],
            code,
            end: BlockEnd::Invalid,
            link: LR,
        }
    }

    fn link_register(regs: &A64Regs) -> Option<u64> {
        Some(regs.lr)
    }

    const LINK_IN_RECORD: bool = true;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[u32]) -> Vec<u8> {
        w.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn the_register_list_is_fridas() {
        let s = register_specs();
        assert_eq!(s.len(), 66);
        assert_eq!((s[0].name.as_str(), s[2].name.as_str(), s[3].name.as_str()), ("pc", "nzcv", "x0"));
        assert_eq!((s[FP as usize].name.as_str(), s[LR as usize].name.as_str()), ("fp", "lr"));
        assert_eq!((s[V0 as usize].name.as_str(), s[V0 as usize].size), ("v0", 16));
        assert_eq!(A64Regs::default().values().len(), 34 * 8 + 32 * 16);
    }

    #[test]
    fn blocks_end_at_branches_and_name_their_writes() {
        // stp x29, x30, [sp, #-16]!; mov x29, sp; adds x0, x0, #1;
        // ldp x1, x2, [x3]; str x4, [x5]; fmov d1, x0; bl .+8
        let code = words(&[0xa9bf_7bfd, 0x9100_03fd, 0xb100_0400, 0xa940_0861, 0xf900_00a4, 0x9e67_0001, 0x9400_0002]);
        let b = decode_block(0x1000, &code);
        assert_eq!(b.end, BlockEnd::ControlFlow);
        assert_eq!(b.insns.len(), 7);
        let w: Vec<Vec<u32>> = b.insns.iter().map(|i| i.writes.clone()).collect();
        assert_eq!(w[0], vec![SP]);
        assert_eq!(w[1], vec![FP]);
        assert_eq!(w[2], vec![X0, NZCV]);
        assert_eq!(w[3], vec![X0 + 1, X0 + 2]);
        assert!(w[4].is_empty());
        assert_eq!(w[5], vec![V0 + 1]);
        assert_eq!(w[6], vec![LR]);
        assert_eq!(b.insns[6].flow, Flow::Call);
        assert_eq!(b.writes()[0], (0, LR));
    }

    #[test]
    fn a_return_ends_a_block_and_post_index_writes_back() {
        // ldp x29, x30, [sp], #16; ret
        let b = decode_block(0x2000, &words(&[0xa8c1_7bfd, 0xd65f_03c0, 0xd503_201f]));
        assert_eq!(b.insns.len(), 2);
        assert_eq!(b.insns[0].writes, vec![FP, LR, SP]);
        assert_eq!(b.insns[1].flow, Flow::Return);
    }
}
