//! Which registers a call into the blob can change, read off the machine
//! code (as `x86_64/clobber.rs` does): a lean trampoline saves only those
//! (and what it uses itself) instead of every register.
//!
//! A function's set is the general-purpose registers named by any
//! instruction of it or of any function it calls or branches to, found by
//! decoding each function whole. Every register an instruction names
//! counts, read or written: a superset of its writes, which is all a
//! trampoline needs (it saves a register it did not have to, never the
//! other way round), without a table of which operand each of the A64
//! instructions writes. A few instructions write registers they do not
//! name (`bl` and `paciasp`…: x30; `svc`: x0; `pacia1716`…: x17): x0, x16,
//! x17 and x30 count for every function ([`IMPLICIT`]). The answer is
//! "unknown" (None) when the code branches through a register (`br`,
//! `blr`, a `ret` through another register than x30), branches to an
//! address no symbol starts,
//! holds a word that does not decode, names a vector or floating-point
//! register (trampolines never save those: the runtime library is built
//! with `-mgeneral-regs-only`, and Cranelift's integer code uses none), or
//! writes a system register.

use crate::arch::clobbers::{Function, Isa};
use yaxpeax_arm::armv8::a64::{Opcode, Operand};

pub use telco_abi::arch::aarch64::{RegMask, CALLER_SAVED};

/// Registers some instructions write without naming them, counted for
/// every function: x30 (`bl`, `blr`, the pointer-authentication hints on
/// x30), x0 (`svc`: the kernel's result), x16 and x17 (the `…1716` hints).
pub const IMPLICIT: RegMask = 1 << 0 | 1 << 16 | 1 << 17 | 1 << 30;

/// A64's reading of a function.
pub struct A64;

/// Memoised clobber sets of the functions of one blob.
pub type Clobbers<'a> = crate::arch::clobbers::Clobbers<'a, A64>;

impl Isa for A64 {
    type Mask = RegMask;

    fn decode(f: &Function) -> Option<(RegMask, Vec<u32>)> {
        let (bytes, lo, hi) = (f.bytes, f.lo, f.hi);
        let mut mask: RegMask = IMPLICIT;
        let mut callees = Vec::new();
        for (k, w) in bytes.chunks_exact(4).enumerate() {
            let at = lo + 4 * k as u64;
            let i = super::patch::decode(u32::from_le_bytes(w.try_into().ok()?))?;
            match i.opcode {
                // The function's return reads x30 only.
                Opcode::RET if matches!(i.operands[0], Operand::Register(_, 30)) => continue,
                Opcode::RET => return None,
                Opcode::BR
                | Opcode::BLR
                | Opcode::BRAA
                | Opcode::BRAAZ
                | Opcode::BRAB
                | Opcode::BRABZ
                | Opcode::BLRAA
                | Opcode::BLRAAZ
                | Opcode::BLRAB
                | Opcode::BLRABZ
                | Opcode::RETAA
                | Opcode::RETAB
                | Opcode::ERET
                | Opcode::MSR => return None,
                _ => {}
            }
            let literal = matches!(i.opcode, Opcode::ADR | Opcode::ADRP | Opcode::LDR | Opcode::LDRSW | Opcode::PRFM);
            mask |= named_gprs(&i);
            for o in &i.operands {
                match *o {
                    Operand::SIMDRegister(..)
                    | Operand::SIMDRegisterElements(..)
                    | Operand::SIMDRegisterElementsLane(..)
                    | Operand::SIMDRegisterElementsMultipleLane(..)
                    | Operand::SIMDRegisterGroup(..)
                    | Operand::SIMDRegisterGroupLane(..) => return None,
                    Operand::PCOffset(d) if !literal => {
                        // A branch: inside the function, or to one's start
                        // (a call, or a tail call).
                        let t = at.wrapping_add(d as u64);
                        if !(lo..hi).contains(&t) {
                            callees.push(f.callee(t)?);
                        }
                    }
                    _ => {}
                }
            }
        }
        Some((mask, callees))
    }
}

/// The general-purpose registers instruction `i` names (read or written;
/// sp and the zero register are none).
pub(super) fn named_gprs(i: &yaxpeax_arm::armv8::a64::Instruction) -> RegMask {
    let mut mask = 0;
    for o in &i.operands {
        match *o {
            Operand::Register(_, r) | Operand::RegisterOrSP(_, r) | Operand::RegShift(_, _, _, r) => mask |= named(r),
            Operand::RegisterPair(_, r) => mask |= named(r) | named(r + 1),
            Operand::RegPreIndex(r, _, _) | Operand::RegPostIndex(r, _) => mask |= named(r),
            Operand::RegRegOffset(r, s, ..) | Operand::RegPostIndexReg(r, s) => mask |= named(r) | named(s),
            _ => {}
        }
    }
    mask
}

/// The mask bit of general-purpose register `r` (31, the zero register or
/// sp, counts as none: sp is never saved as a register).
fn named(r: u16) -> RegMask {
    if r < 31 {
        1 << r
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use telco_abi::artifact::Symbol;

    /// A blob of functions given as words.
    fn blob(funcs: &[&[u32]]) -> (Vec<u8>, Vec<Symbol>) {
        let mut code = Vec::new();
        let mut symbols = Vec::new();
        for (i, f) in funcs.iter().enumerate() {
            let start = code.len() as u32;
            code.extend(f.iter().flat_map(|w| w.to_le_bytes()));
            symbols.push(Symbol { name: format!("f{i}"), offset: start, size: 4 * f.len() as u32 });
        }
        (code, symbols)
    }

    const RET: u32 = 0xd65f_03c0;

    #[test]
    fn registers_of_the_function_and_its_callees() {
        // f0: mov x3, #1; ldp x5, x6, [x2], #16; bl f1; ret
        // f1: str w9, [x10, x11, lsl #2]; svc #0; ret
        let f0: &[u32] = &[0xd280_0023, 0xa8c1_1845, 0x9400_0002, RET];
        let f1: &[u32] = &[0xb82b_7949, 0xd400_0001, RET];
        let (code, syms) = blob(&[f0, f1]);
        let m = Clobbers::new(&code, &syms).of(0).expect("known");
        let want = IMPLICIT | 1 << 3 | 1 << 5 | 1 << 6 | 1 << 2 | 1 << 9 | 1 << 10 | 1 << 11;
        assert_eq!(m, want, "{m:#x}");
    }

    #[test]
    fn sp_and_the_zero_register_are_not_registers_to_save() {
        // stp x29, x30, [sp, #-16]!; str xzr, [sp, #8]; ldp x29, x30, [sp], #16; ret
        let (code, syms) = blob(&[&[0xa9bf_7bfd, 0xf900_07ff, 0xa8c1_7bfd, RET]]);
        assert_eq!(Clobbers::new(&code, &syms).of(0), Some(IMPLICIT | 1 << 29));
    }

    #[test]
    fn literals_are_not_branches() {
        // adr x0, #8; ldr x1, #-4; ret: the targets need no symbol.
        let (code, syms) = blob(&[&[0x1000_0040, 0x58ff_ffe1, RET]]);
        assert_eq!(Clobbers::new(&code, &syms).of(0), Some(IMPLICIT | 0b11));
    }

    #[test]
    fn unknown_when_indirect_vector_undecodable_or_outside() {
        let (code, syms) = blob(&[
            // blr x16; ret
            &[0xd63f_0200, RET],
            // fmov d0, x1; ret
            &[0x9e67_0020, RET],
            // msr nzcv, x16; ret
            &[0xd51b_4210, RET],
            // b to the middle of f0
            &[0x17ff_fffb],
            // br x17
            &[0xd61f_0220],
            // ret x1
            &[0xd65f_0020],
        ]);
        let mut c = Clobbers::new(&code, &syms);
        for s in &syms {
            assert_eq!(c.of(s.offset), None, "{}", s.name);
        }
        // Not a function start; a start whose only symbol is empty.
        assert_eq!(c.of(4), None);
        let empty = [Symbol { name: "e".into(), offset: 0, size: 0 }];
        assert_eq!(Clobbers::new(&code, &empty).of(0), None);
    }
}
