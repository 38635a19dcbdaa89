//! Which registers a call into the blob can change, read off the machine
//! code: a trampoline saves only those (and what it uses itself) instead
//! of every register.
//!
//! A function's set is the general-purpose registers written by any
//! instruction of it or of any function it calls or jumps to, found by
//! decoding each function whole (the blob has no data between
//! instructions: the runtime library is built without it, Cranelift emits
//! no constant pools for integer code). The answer is "unknown" (None) when
//! the code calls or jumps through a register, branches to an address no
//! symbol covers, or touches a vector, x87 or mask register (trampolines
//! never save those).

use crate::arch::clobbers::{Function, Isa};
use iced_x86::{Decoder, DecoderOptions, FlowControl, InstructionInfoFactory, OpAccess, Register};

/// Bit `i` stands for word `i` of `SavedRegs` (telco-abi's register
/// table: rax, rbx, rcx, rdx, rsi, rdi, rbp, rsp, r8 … r15).
pub use telco_abi::arch::x86_64::RegMask;

/// The registers the System V ABI lets a callee change: rax rcx rdx rsi
/// rdi r8 r9 r10 r11 (the table's `caller_saved` column).
pub use telco_abi::arch::x86_64::CALLER_SAVED;

/// `SavedRegs` index of a general-purpose register (any width), or None.
pub fn saved_index(r: Register) -> Option<u32> {
    let full = r.full_register();
    if !full.is_gpr64() {
        return None;
    }
    Some(match full {
        Register::RAX => 0,
        Register::RBX => 1,
        Register::RCX => 2,
        Register::RDX => 3,
        Register::RSI => 4,
        Register::RDI => 5,
        Register::RBP => 6,
        Register::RSP => 7,
        other => other as u32 - Register::R8 as u32 + 8,
    })
}

/// x86_64's reading of a function.
pub struct X64;

/// Memoised clobber sets of the functions of one blob.
pub type Clobbers<'a> = crate::arch::clobbers::Clobbers<'a, X64>;

impl Isa for X64 {
    type Mask = RegMask;

    fn decode(f: &Function) -> Option<(RegMask, Vec<u32>)> {
        let (bytes, lo, hi) = (f.bytes, f.lo, f.hi);
        let mut dec = Decoder::with_ip(64, bytes, lo, DecoderOptions::NONE);
        let mut info = InstructionInfoFactory::new();
        let mut mask: RegMask = 0;
        let mut callees = Vec::new();
        for ins in &mut dec {
            if ins.is_invalid() {
                return None;
            }
            match ins.flow_control() {
                FlowControl::IndirectBranch | FlowControl::IndirectCall => return None,
                FlowControl::Call | FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch => {
                    let t = ins.near_branch_target();
                    if !(lo..hi).contains(&t) {
                        // A call, or a tail call: it must start a function.
                        callees.push(f.callee(t)?);
                    }
                }
                _ => {}
            }
            for u in info.info(&ins).used_registers() {
                let r = u.register();
                if r == Register::None {
                    continue;
                }
                match saved_index(r) {
                    Some(i) => {
                        if !matches!(u.access(), OpAccess::Read | OpAccess::CondRead | OpAccess::NoMemAccess) {
                            mask |= 1 << i;
                        }
                    }
                    // Segment registers are read for fs:/gs: accesses; the
                    // rest (vector, x87, mask, control) are never saved.
                    None if r.is_segment_register() && u.access() == OpAccess::Read => {}
                    None => return None,
                }
            }
        }
        Some((mask, callees))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::code_asm::*;
    use telco_abi::artifact::Symbol;

    #[test]
    fn indices_are_the_register_table() {
        for r in Register::values().filter(|r| r.is_gpr64()) {
            let name = format!("{r:?}").to_lowercase();
            assert_eq!(saved_index(r), telco_abi::arch::x86_64::register_index(&name), "{name}");
        }
        assert_eq!(saved_index(Register::EAX), Some(0));
    }

    fn blob(funcs: &[fn(&mut CodeAssembler)]) -> (Vec<u8>, Vec<Symbol>) {
        let mut code = Vec::new();
        let mut symbols = Vec::new();
        for (i, f) in funcs.iter().enumerate() {
            let mut a = CodeAssembler::new(64).expect("asm");
            f(&mut a);
            let start = code.len() as u64;
            let bytes = a.assemble(start).expect("assemble");
            symbols.push(Symbol { name: format!("f{i}"), offset: start as u32, size: bytes.len() as u32 });
            code.extend_from_slice(&bytes);
        }
        (code, symbols)
    }

    #[test]
    fn writes_of_the_function_and_its_callees() {
        // f0: writes eax (rax) and r9b (r9), calls f1; f1 writes rdx via
        // a partial register and rcx/r11 via syscall.
        let (code, syms) = blob(&[
            |a| {
                a.mov(eax, 1).unwrap();
                a.mov(r9b, 2).unwrap();
                a.call(0x13u64).unwrap(); // patched below
                a.ret().unwrap();
            },
            |a| {
                a.mov(dx, 3).unwrap();
                a.syscall().unwrap();
                a.ret().unwrap();
            },
        ]);
        // Re-assemble f0 with the real call target.
        let f1 = syms[1].offset as u64;
        let mut a = CodeAssembler::new(64).unwrap();
        a.mov(eax, 1).unwrap();
        a.mov(r9b, 2).unwrap();
        a.call(f1).unwrap();
        a.ret().unwrap();
        let mut code2 = a.assemble(0).unwrap();
        assert!(code2.len() <= f1 as usize);
        code2.resize(f1 as usize, 0xcc);
        code2.extend_from_slice(&code[f1 as usize..]);
        let syms = vec![Symbol { name: "f0".into(), offset: 0, size: f1 as u32 }, syms[1].clone()];
        let m = Clobbers::new(&code2, &syms).of(0).expect("known");
        let want = 1 << 0 | 1 << 9 | 1 << 3 | 1 << 2 | 1 << 11 | 1 << 7;
        assert_eq!(m, want, "{m:#x}");
    }

    #[test]
    fn reads_are_not_writes() {
        let (code, syms) = blob(&[|a| {
            a.mov(qword_ptr(rdi + 8), rsi).unwrap();
            a.cmp(rdx, rcx).unwrap();
            a.ret().unwrap();
        }]);
        assert_eq!(Clobbers::new(&code, &syms).of(0), Some(1 << 7));
    }

    #[test]
    fn unknown_when_indirect_or_vector() {
        let (code, syms) = blob(&[
            |a| {
                a.call(rax).unwrap();
                a.ret().unwrap();
            },
            |a| {
                a.movq(xmm0, rax).unwrap();
                a.ret().unwrap();
            },
        ]);
        let mut c = Clobbers::new(&code, &syms);
        assert_eq!(c.of(0), None);
        assert_eq!(c.of(syms[1].offset), None);
        // Not a function start.
        assert_eq!(c.of(1), None);
    }
}
