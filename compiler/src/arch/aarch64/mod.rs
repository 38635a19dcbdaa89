//! aarch64 (AAPCS64, Linux): the code generator's target, SDT operand
//! syntax, and the instruction decoding behind `.return` refusals and
//! patch-site analysis.
//!
//! Built and tested on every host (its tests run on x86_64 too), like the
//! runtime's `arch::aarch64::patch`; `native` names it only on aarch64.
//! Register names come from `telco_abi::arch::aarch64`, never `native`.
//! Instructions are decoded with yaxpeax-arm: every one is one 4-byte
//! little-endian word, so decoding never loses its place.

pub mod entry;
pub mod hop;
pub mod sdt;
pub mod sites;

use super::Target;
use cranelift_codegen::binemit::Reloc;
use std::collections::HashMap;
use yaxpeax_arch::{Decoder, U8Reader};
use yaxpeax_arm::armv8::a64::{InstDecoder, Instruction, Opcode, Operand};

/// The ELF machine of the files this architecture's analyses read.
pub const MACHINE: super::Machine = super::Machine::Aarch64;

pub const TARGET: Target = Target {
    triple: "aarch64-unknown-linux-gnu",
    // None: the handlers need nothing beyond ARMv8.0 (atomics without LSE
    // are exclusive-load/store loops, which every aarch64 core runs), and
    // no BTI landing pads or PAC signing (the blob is mapped without
    // PROT_BTI, and its return addresses stay within it).
    isa_flags: &[],
    call_reloc: Reloc::Arm64Call,
    // Four zero bytes are `udf #0`: a word of padding that runs faults
    // (SIGILL) instead of sliding into the next function. Functions are
    // whole words, so padding up to a 16-byte boundary is whole words too.
    padding: 0x00,
    patch_call,
    disassemble,
};

/// AAPCS64's conventions (`CallConv`): structs over 16 bytes by reference,
/// a memory result's address in x8, no registers after a spilled struct.
pub const CALL_CONV: super::CallConv = super::CallConv {
    large_by_reference: true,
    result_address_returned: false,
    spill_closes_registers: true,
    homogeneous_float_in_vectors: true,
    return_address_in_register: true,
};

/// The DWARF register numbers (AAELF64's DWARF mapping) of the frame
/// pointer (x29) and the return-address column (x30), whose CFI rules
/// [`compact_unwind_rule`] takes.
pub const DWARF_FP: gimli::Register = gimli::AArch64::X29;
pub const DWARF_RA: gimli::Register = gimli::AArch64::X30;

/// The DWARF number of the stack pointer (a location based on it, or on
/// the frame pointer, is in the function's frame).
pub const DWARF_SP: gimli::Register = gimli::AArch64::SP;

/// The CFI vendor extensions `.eh_frame` uses here: AArch64's
/// `DW_CFA_AARCH64_negate_ra_state` (0x2d, after every `paciasp` of code
/// built with `-mbranch-protection`), which gimli reads only when told.
pub const CFI_VENDOR: gimli::Vendor = gimli::Vendor::AArch64;

/// The word at `code[at..]`, little-endian.
pub(crate) fn word_at(code: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(code.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

/// One instruction word decoded; None for an unallocated encoding.
pub(crate) fn decode(word: u32) -> Option<Instruction> {
    let bytes = word.to_le_bytes();
    let mut reader = U8Reader::new(&bytes);
    InstDecoder::default().decode(&mut reader).ok()
}

/// Whether `word` is in the SVE or SME encoding groups (bits 28:25 are
/// 0010, or 0000 with bit 31 set), which the decoder does not know but
/// which hold no branch and no PC-relative operand: the runtime copies such
/// an instruction as it is (`runtime/src/arch/aarch64/patch.rs`).
pub(crate) fn vector_extension(word: u32) -> bool {
    let op0 = (word >> 25) & 0xf;
    op0 == 0b0010 || (op0 == 0 && word >> 31 == 1)
}

/// The PC-relative displacement an instruction's operands hold (branches,
/// `adr`, literal loads): its target is the instruction's address plus it
/// (`adrp`: its page plus it).
pub(crate) fn pc_offset(i: &Instruction) -> Option<i64> {
    i.operands.iter().find_map(|o| match o {
        Operand::PCOffset(d) => Some(*d),
        _ => None,
    })
}

/// A `BL` (or a `B`, for a tail call) at `at`: its imm26 set so that it
/// reaches `dest` (offsets in the blob; Cranelift's addend, 0, is added to
/// the distance from the instruction itself). A `BL` reaches ±128 MiB.
fn patch_call(code: &mut [u8], at: usize, dest: u32, addend: i64) -> Result<(), String> {
    let field = code.get_mut(at..at + 4).ok_or("internal error: relocation outside the code")?;
    let mut word = [0u8; 4];
    word.copy_from_slice(field);
    let word = u32::from_le_bytes(word);
    if word & 0x7c00_0000 != 0x1400_0000 {
        return Err(format!("internal error: the call relocation at {at:#x} is not on a B or BL ({word:#010x})"));
    }
    let d = i64::from(dest) + addend - at as i64;
    if d & 3 != 0 || !(-(1 << 27)..(1 << 27)).contains(&d) {
        return Err(format!(
            "internal error: the call at {at:#x} cannot reach {dest:#x}: a BL reaches ±128 MiB (is the blob larger?)"
        ));
    }
    let patched = (word & 0xfc00_0000) | ((d >> 2) as u32 & 0x03ff_ffff);
    field.copy_from_slice(&patched.to_le_bytes());
    Ok(())
}

/// `Target::disassemble`: one word a line, `bl` annotated with the
/// callee's name. Stops after the first `udf` (Cranelift's traps, placed
/// after the code, and its constant islands follow; they are no code).
fn disassemble(bytes: &[u8], offset: u32, names: &HashMap<u32, &str>, out: &mut String) {
    for (k, w) in bytes.chunks_exact(4).enumerate() {
        let at = offset.wrapping_add(4 * k as u32);
        let word = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        let Some(ins) = decode(word) else {
            out.push_str(&format!("  {at:06x}  .word {word:#010x}\n"));
            continue;
        };
        let note = match (ins.opcode, pc_offset(&ins)) {
            (Opcode::BL, Some(d)) => {
                let target = i64::from(at).wrapping_add(d) as u32;
                names.get(&target).map(|n| format!("  ; {n}")).unwrap_or_default()
            }
            _ => String::new(),
        };
        out.push_str(&format!("  {at:06x}  {ins}{note}\n"));
        if ins.opcode == Opcode::UDF {
            break;
        }
    }
}

/// Whether an FDE's rule for the frame at a function's first instruction
/// is a fresh call's: nothing pushed yet (CFA = sp + 0), the return address
/// in x30. A compiler's cold part of a function has another.
pub fn fresh_call_frame(register: gimli::Register, offset: i64) -> bool {
    register == gimli::AArch64::SP && offset == 0
}

/// A CFI row as `ubacktrace()`'s compact rule (`telco_abi::region::
/// unwind_rule`), from the rules for the CFA, x29 (`fp`) and x30 (`ra`,
/// the return-address column): the CFA from sp or x29 plus an offset, the
/// return address saved just below the CFA, x29 saved at an offset from
/// the CFA or left as it is.
///
/// `stp x29, x30, [sp, #-16]!` saves the frame record at the top of the
/// frame (x29 at CFA-16, x30 at CFA-8): the compact rule's shape. Other
/// shapes are `UNW_NONE`, and the backtrace walks the frame-pointer chain
/// there (x29 points at a frame record {caller's x29, return address}):
/// * the return address still in x30 (a leaf, or before the prologue's
///   `stp`: no rule for x30) — the compact rule cannot name a register;
/// * the frame record at the bottom of a larger frame (`stp x29, x30,
///   [sp, #-48]!`: x30 at CFA-40) — it reads the return address at CFA-8
///   only.
///
/// With `-mbranch-protection=pac-ret` the saved return address is signed
/// (`paciasp`): the rule is the same, and whoever reads it strips the PAC
/// bits.
pub fn compact_unwind_rule(
    cfa: &gimli::CfaRule<usize>,
    fp: &gimli::RegisterRule<usize>,
    ra: &gimli::RegisterRule<usize>,
) -> u32 {
    super::compact_rule(cfa, fp, ra, gimli::AArch64::SP, gimli::AArch64::X29)
}

/// The register-file index (`telco_abi::arch::aarch64::REGISTERS`) of DWARF
/// register `n` (AAELF64's numbering: 0–30 are x0–x30, 31 is sp); None for
/// the vector registers (64–95, v0–v31) and the rest, which probes cannot
/// read.
pub fn dwarf_register(n: u16) -> Option<u32> {
    use telco_abi::arch::aarch64 as r;
    let i = match n {
        0..=30 => r::X0 + n as usize,
        31 => r::SP,
        _ => return None,
    };
    Some(i as u32)
}

/// What DWARF register `n` is called, for messages (`v0`).
pub fn dwarf_register_name(n: u16) -> String {
    match dwarf_register(n) {
        Some(i) => telco_abi::arch::aarch64::REGISTERS[i as usize].name.to_string(),
        None if (64..=95).contains(&n) => format!("v{}", n - 64),
        None => format!("DWARF register {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cranelift_codegen::ir::{self, types, AbiParam, InstBuilder, UserExternalName, UserFuncName};
    use cranelift_codegen::settings::{self, Configurable};
    use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};

    #[test]
    fn patch_call_writes_imm26() {
        // bl .+0 (as Cranelift emits it, to be patched).
        let mut code = vec![0u8; 0x20];
        code[0x10..0x14].copy_from_slice(&0x9400_0000u32.to_le_bytes());
        patch_call(&mut code, 0x10, 0x0, 0).unwrap();
        // bl .-0x10
        assert_eq!(word_at(&code, 0x10), Some(0x97ff_fffc));
        patch_call(&mut code, 0x10, 0x18, 0).unwrap();
        assert_eq!(word_at(&code, 0x10), Some(0x9400_0002));
        // A `b` (a tail call) keeps its opcode.
        code[0..4].copy_from_slice(&0x1400_0000u32.to_le_bytes());
        patch_call(&mut code, 0, 0x1c, 0).unwrap();
        assert_eq!(word_at(&code, 0), Some(0x1400_0007));
        // Out of reach, not a branch, outside the code.
        let e = patch_call(&mut code, 0x10, 0x1000_0000, 0).unwrap_err();
        assert!(e.contains("128 MiB"), "{e}");
        code[0x8..0xc].copy_from_slice(&0xd503_201fu32.to_le_bytes());
        assert!(patch_call(&mut code, 0x8, 0, 0).unwrap_err().contains("not on a B or BL"));
        assert!(patch_call(&mut code, 0x1e, 0, 0).is_err());
    }

    /// Cranelift's aarch64 backend with the shared flags and `TARGET`'s:
    /// a call within the blob is an `Arm64Call` on a `bl`, which
    /// `patch_call` links and `disassemble` names.
    #[test]
    fn cranelift_calls_are_linked_and_named() {
        let mut fb = settings::builder();
        for (k, v) in [("opt_level", "speed"), ("is_pic", "true"), ("preserve_frame_pointers", "true")] {
            fb.set(k, v).unwrap();
        }
        let triple = TARGET.triple.parse().unwrap();
        let mut ib = cranelift_codegen::isa::lookup(triple).unwrap();
        for (k, v) in TARGET.isa_flags {
            ib.set(k, v).unwrap();
        }
        let isa = ib.finish(settings::Flags::new(fb)).unwrap();

        let mut sig = ir::Signature::new(isa.default_call_conv());
        sig.params.push(AbiParam::new(types::I64));
        sig.returns.push(AbiParam::new(types::I64));
        let mut func = ir::Function::with_name_signature(UserFuncName::user(0, 0), sig.clone());
        let mut fctx = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut func, &mut fctx);
        let block = b.create_block();
        b.append_block_params_for_function_params(block);
        b.switch_to_block(block);
        let x = b.block_params(block)[0];
        let sref = b.import_signature(sig);
        let name = b.func.declare_imported_user_function(UserExternalName::new(0, 1));
        let callee = b.import_function(ir::ExtFuncData {
            name: ir::ExternalName::user(name),
            signature: sref,
            colocated: true,
            patchable: false,
        });
        let call = b.ins().call(callee, &[x]);
        let r = b.inst_results(call)[0];
        let r = b.ins().iadd_imm_s(r, 1);
        b.ins().return_(&[r]);
        b.seal_all_blocks();
        b.finalize(isa.frontend_config());

        let mut ctx = cranelift_codegen::Context::for_function(func);
        let compiled = ctx.compile(&*isa, &mut cranelift_codegen::control::ControlPlane::default()).unwrap();
        let mut code = vec![TARGET.padding; 0x40];
        code.extend_from_slice(compiled.code_buffer());
        let relocs = compiled.buffer.relocs();
        assert_eq!(relocs.len(), 1);
        assert_eq!(relocs[0].kind, TARGET.call_reloc);
        let at = 0x40 + relocs[0].offset as usize;
        (TARGET.patch_call)(&mut code, at, 0x20, relocs[0].addend).unwrap();
        let mut out = String::new();
        let names = HashMap::from([(0x20u32, "callee")]);
        (TARGET.disassemble)(&code[0x40..], 0x40, &names, &mut out);
        assert!(out.contains(&format!("  {at:06x}  bl $-{:#x}  ; callee\n", at - 0x20)), "{out}");
        assert!(out.contains("  ret\n") || out.contains("ret\n"), "{out}");
        // The padding before it is `udf #0`, a fault if run.
        let mut pad = String::new();
        (TARGET.disassemble)(&code[..8], 0, &names, &mut pad);
        assert_eq!(pad, "  000000  udf #0x0\n");
    }

    #[test]
    fn cfi_rows_as_compact_rules() {
        use gimli::{CfaRule, RegisterRule};
        use telco_abi::region::{unwind_rule, UNW_CFA_FP, UNW_CFA_SP, UNW_END, UNW_NONE};
        let sp = |o| CfaRule::RegisterAndOffset { register: gimli::AArch64::SP, offset: o };
        // At the entry: CFA = sp, the return address still in x30.
        assert!(fresh_call_frame(gimli::AArch64::SP, 0));
        assert!(!fresh_call_frame(gimli::AArch64::SP, 16));
        assert_eq!(compact_unwind_rule(&sp(0), &RegisterRule::SameValue, &RegisterRule::SameValue), UNW_NONE);
        // After `stp x29, x30, [sp, #-16]!`.
        assert_eq!(
            compact_unwind_rule(&sp(16), &RegisterRule::Offset(-16), &RegisterRule::Offset(-8)),
            unwind_rule(UNW_CFA_SP, 16, Some(-16)).unwrap()
        );
        let fp = CfaRule::RegisterAndOffset { register: gimli::AArch64::X29, offset: 16 };
        assert_eq!(
            compact_unwind_rule(&fp, &RegisterRule::Offset(-16), &RegisterRule::Offset(-8)),
            unwind_rule(UNW_CFA_FP, 16, Some(-16)).unwrap()
        );
        // The frame record at the bottom of a 48-byte frame: x30 at CFA-40.
        assert_eq!(compact_unwind_rule(&sp(48), &RegisterRule::Offset(-48), &RegisterRule::Offset(-40)), UNW_NONE);
        // `_start`: `.cfi_undefined x30`.
        assert_eq!(compact_unwind_rule(&sp(0), &RegisterRule::SameValue, &RegisterRule::Undefined), UNW_END);
    }

    #[test]
    fn dwarf_registers() {
        assert_eq!(dwarf_register(0), Some(0));
        assert_eq!(dwarf_register(29), Some(telco_abi::arch::aarch64::FP as u32));
        assert_eq!(dwarf_register(30), Some(telco_abi::arch::aarch64::LR as u32));
        assert_eq!(dwarf_register(31), Some(telco_abi::arch::aarch64::SP as u32));
        assert_eq!(dwarf_register(64), None);
        assert_eq!(dwarf_register_name(19), "x19");
        assert_eq!(dwarf_register_name(31), "sp");
        assert_eq!(dwarf_register_name(64), "v0");
        assert_eq!(dwarf_register_name(95), "v31");
        assert_eq!(dwarf_register_name(34), "DWARF register 34");
        assert_eq!(DWARF_FP.0, 29);
        assert_eq!(DWARF_RA.0, 30);
    }
}
