//! x86_64: the code generator's target, SDT operand syntax, and the
//! instruction decoding behind `.return` refusals and patch-site analysis.

pub mod entry;
pub mod hop;
pub mod sdt;
pub mod sites;

use super::Target;
use cranelift_codegen::binemit::Reloc;
use std::collections::HashMap;

/// The ELF machine of the files this architecture's analyses read.
pub const MACHINE: super::Machine = super::Machine::X86_64;

pub const TARGET: Target = Target {
    triple: "x86_64-unknown-linux-gnu",
    // SSE4.1 keeps Cranelift from calling libm for rounding; nothing here
    // uses vector registers.
    isa_flags: &[("has_sse41", "true")],
    call_reloc: Reloc::X86CallPCRel4,
    padding: 0xcc,
    patch_call,
    disassemble,
};

/// System V's conventions (`CallConv`).
pub const CALL_CONV: super::CallConv = super::CallConv {
    large_by_reference: false,
    result_address_returned: true,
    spill_closes_registers: false,
    homogeneous_float_in_vectors: false,
    return_address_in_register: false,
};

/// The DWARF register numbers (the psABI's) of the frame pointer (rbp) and
/// the return-address column, whose CFI rules [`compact_unwind_rule`]
/// takes.
pub const DWARF_FP: gimli::Register = gimli::X86_64::RBP;
pub const DWARF_RA: gimli::Register = gimli::X86_64::RA;

/// The DWARF number of the stack pointer (a location based on it, or on
/// the frame pointer, is in the function's frame).
pub const DWARF_SP: gimli::Register = gimli::X86_64::RSP;

/// The CFI vendor extensions `.eh_frame` uses here: none.
pub const CFI_VENDOR: gimli::Vendor = gimli::Vendor::Default;

/// A `call rel32`'s field at `at`: the distance to `dest` from the end of
/// the field (Cranelift's addend says where that is).
fn patch_call(code: &mut [u8], at: usize, dest: u32, addend: i64) -> Result<(), String> {
    let v = i64::from(dest) + addend - at as i64;
    let v = i32::try_from(v).map_err(|_| "internal error: blob larger than 2 GiB".to_string())?;
    code.get_mut(at..at + 4).ok_or("internal error: relocation outside the code")?.copy_from_slice(&v.to_le_bytes());
    Ok(())
}

/// `Target::disassemble`.
fn disassemble(bytes: &[u8], offset: u32, names: &HashMap<u32, &str>, out: &mut String) {
    use iced_x86::{Decoder, DecoderOptions, Formatter, NasmFormatter};
    let mut fmt = NasmFormatter::new();
    let mut dec = Decoder::with_ip(64, bytes, u64::from(offset), DecoderOptions::NONE);
    let mut text = String::new();
    for ins in &mut dec {
        text.clear();
        fmt.format(&ins, &mut text);
        let target = ins.near_branch_target();
        let note = if ins.is_call_near() {
            names.get(&(target as u32)).map(|n| format!("  ; {n}")).unwrap_or_default()
        } else {
            String::new()
        };
        out.push_str(&format!("  {:06x}  {}{}\n", ins.ip(), text, note));
        if matches!(ins.mnemonic(), iced_x86::Mnemonic::Ud2) {
            break;
        }
    }
}

/// Whether an FDE's rule for the frame at a function's first instruction
/// is a fresh call's: the return address at the stack pointer (CFA = rsp
/// + 8). A compiler's cold part of a function has another.
pub fn fresh_call_frame(register: gimli::Register, offset: i64) -> bool {
    register == gimli::X86_64::RSP && offset == 8
}

/// A CFI row as `ubacktrace()`'s compact rule (`telco_abi::region::
/// unwind_rule`): the CFA from rsp or rbp plus an offset, the return
/// address just below the CFA (the psABI's only shape: anything else is
/// `UNW_NONE`), rbp saved at an offset from the CFA or left as it is.
pub fn compact_unwind_rule(
    cfa: &gimli::CfaRule<usize>,
    rbp: &gimli::RegisterRule<usize>,
    ra: &gimli::RegisterRule<usize>,
) -> u32 {
    super::compact_rule(cfa, rbp, ra, gimli::X86_64::RSP, gimli::X86_64::RBP)
}

/// The register-file index (`telco_abi::arch::native::REGISTERS`) of DWARF
/// register `n` (the System V psABI numbering); None for the return
/// address column and vector registers, which probes cannot read.
pub fn dwarf_register(n: u16) -> Option<u32> {
    use telco_abi::arch::native as r;
    let i = match n {
        0 => r::RAX,
        1 => r::RDX,
        2 => r::RCX,
        3 => r::RBX,
        4 => r::RSI,
        5 => r::RDI,
        6 => r::RBP,
        7 => r::RSP,
        8..=15 => n as usize,
        _ => return None,
    };
    Some(i as u32)
}

/// What DWARF register `n` is called, for messages (`xmm0`).
pub fn dwarf_register_name(n: u16) -> String {
    match dwarf_register(n) {
        Some(i) => telco_abi::arch::native::REGISTERS[i as usize].name.to_string(),
        None if (17..=32).contains(&n) => format!("xmm{}", n - 17),
        None => format!("DWARF register {n}"),
    }
}
