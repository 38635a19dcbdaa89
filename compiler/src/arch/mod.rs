//! The architecture layer of the compiler: what pass 2 and pass 4 must
//! know about the instruction set of the target (the same as telco-stap's
//! own). One folder per architecture behind the same names; [`native`] is
//! the one this build targets, and the rest of the compiler names only
//! `native::…`.
//!
//! What each architecture provides (x86_64's, in `x86_64/`; aarch64's, in
//! `aarch64/`), each item with the type `check_contract!` (at the end of
//! this file) gives it, for both architectures on every host: a missing or
//! mistyped item does not compile. Types both share are declared here
//! ([`Patch`], [`CallConv`], [`Machine`], [`MarkArg`], [`Target`]).
//! * `MACHINE`: the [`Machine`] of the files its analyses read;
//! * [`Target`] (`native::TARGET`): the code generator's target triple and
//!   flags, the one relocation kind a linked blob may contain (a call
//!   within the blob) and how to patch it, the byte that pads between
//!   functions, and the disassembler of `--last-pass 4`;
//! * `sdt`: SDT marker argument specs in the architecture's operand syntax,
//!   parsed to [`MarkArg`]s (`parse_args`);
//! * `entry`: whether a function's first instructions use its return
//!   address as data (`.return` refusals: `return_address_use`, its
//!   `NoReturnAddress`) or only jump elsewhere (`tail_jump`); the length of
//!   Go's stack-bound check at a Go function's entry (`go_stack_check`);
//! * `sites`: decoding a whole module for where control can arrive (patch
//!   sites of statements, markers and hops): `Sites` (`build`,
//!   `instruction_starts`, `function_range`, `plan`, `plan_pad`,
//!   `plan_lead`, `plan_len`), its `Arrival`, and [`Patch`] re-exported;
//! * `hop`: a jump through a neighbour for functions shorter than the
//!   jump (`short_hop`; x86_64 only: aarch64's `B` always fits), planned
//!   over a [`ModuleCode`];
//! * the CFI the unwinders read: a fresh call's frame, the compact unwind
//!   rule (`fresh_call_frame`, `compact_unwind_rule`), DWARF register
//!   numbers (`DWARF_FP`, `DWARF_RA`, `DWARF_SP`, `dwarf_register`,
//!   `dwarf_register_name`, the `.eh_frame` vendor extensions
//!   `CFI_VENDOR`);
//! * [`CallConv`] (`native::CALL_CONV`): how the platform ABI passes what
//!   the argument registers' order alone does not say (large structs, a
//!   result returned in memory), for parameters read at a function's
//!   entry and `$return`.
//!
//! The register file is telco-abi's (`telco_abi::arch`); the runtime
//! library's architecture lines are in `compiler/rt/arch/`.

/// Where the platform ABI passes what does not fit its integer
/// registers plainly (`elaborate::dwarf_vars`; the classification itself
/// is System V's, which AAPCS64 matches for integers and small structs).
#[derive(Clone, Copy, Debug)]
pub struct CallConv {
    /// A struct larger than two registers: copied by the caller and passed
    /// by its address (AAPCS64), rather than copied onto the stack
    /// (System V).
    pub large_by_reference: bool,
    /// A result returned in memory: its address is a hidden first argument
    /// and comes back in the return register (System V), or it arrives in
    /// a register of its own the function need not keep (AAPCS64's x8), so
    /// `$return` cannot find it.
    pub result_address_returned: bool,
    /// Once a struct does not fit the argument registers left, later
    /// arguments go on the stack too (AAPCS64: NGRN = 8), rather than in
    /// the registers left (System V).
    pub spill_closes_registers: bool,
    /// A struct of one to four floating-point members of one type (a
    /// homogeneous aggregate, AAPCS64's HFA) goes whole into vector
    /// registers, whatever its size.
    pub homogeneous_float_in_vectors: bool,
    /// A function is entered with its return address in a register
    /// (aarch64's x30), which its prologue saves where its CFI says, not
    /// on the stack where the call put it (x86_64).
    pub return_address_in_register: bool,
}

/// A safe patch site (each architecture's `sites` plans it, and
/// re-exports it as `sites::Patch`): the file offset of the instruction
/// the patch jump replaces and how many bytes it displaces (whole
/// instructions); or, with `lead` set, the jump goes on the `lead` bytes of
/// whole instructions just before the site instead (`displaced` 0): the
/// trampoline runs them, then the probe, then jumps to the site, whose own
/// bytes stay as they are (`Sites::plan_lead`).
///
/// The file offset is the site's, except at an aarch64 landing pad: there
/// it is the next instruction's (4 bytes on), where the jump goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Patch {
    pub file_offset: u64,
    pub displaced: u32,
    pub lead: u32,
    /// The lead is one direct call (x86_64's `call rel32`, aarch64's `bl`):
    /// its callee returns through a return trampoline, which runs the probe
    /// and goes on at the site.
    pub call: bool,
    /// A short jump at the site (x86_64's `jmp rel8`, `displaced` at least
    /// 2 bytes) to the padding after the function, `pad` bytes on from the
    /// site, where five dead bytes take the jump to the trampoline
    /// (`Sites::plan_pad`); 0 when the jump is at the site, and always 0 on
    /// aarch64.
    pub pad: u32,
    /// No jump fits (nor before the site, nor a short one): a one-byte
    /// trap (`int3`; `brk` on aarch64) over the instruction at the site,
    /// which `displaced` covers (`Sites::plan_trap`).
    pub trap: bool,
}

#[cfg(target_arch = "x86_64")]
pub mod x86_64;
#[cfg(target_arch = "x86_64")]
pub use self::x86_64 as native;

/// aarch64's layer, built and tested on every host (its analyses are pure
/// functions of bytes) while the port is written (issue 18).
pub mod aarch64;
#[cfg(target_arch = "aarch64")]
pub use self::aarch64 as native;

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!(
    "telco-stap runs on x86_64 and aarch64: another architecture needs its folder beside compiler/src/arch/x86_64/"
);

/// An ELF file's machine (`e_machine`): each architecture's `MACHINE` is
/// the one whose files its analyses read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Machine {
    X86_64,
    Aarch64,
    /// Any other `e_machine` value.
    Other(u16),
}

impl Machine {
    /// The raw `e_machine` value.
    pub fn e_machine(self) -> u16 {
        match self {
            Machine::X86_64 => goblin::elf::header::EM_X86_64,
            Machine::Aarch64 => goblin::elf::header::EM_AARCH64,
            Machine::Other(m) => m,
        }
    }

    /// The machine an `e_machine` value names.
    pub(crate) fn from_e_machine(m: u16) -> Machine {
        match m {
            goblin::elf::header::EM_X86_64 => Machine::X86_64,
            goblin::elf::header::EM_AARCH64 => Machine::Aarch64,
            other => Machine::Other(other),
        }
    }
}

/// Where an argument is at the marker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgLoc {
    /// `$N`.
    Const(i64),
    /// `%reg`: a register (its index in the saved registers,
    /// `telco_abi::arch`), shifted right by `shift` bits (8 for `%ah` and
    /// friends).
    Reg { index: u32, shift: u8 },
    /// `disp(%base,%index,scale)`: memory.
    Mem { base: Option<u32>, index: Option<(u32, u8)>, disp: i64 },
    /// `name+off(%rip)` or `name+off`: memory at a symbol of the module
    /// (what `STAP_SDT_ARG_CONSTRAINT=m` gives for globals and statics),
    /// until pass 2 finds the symbol ([`ArgLoc::Link`]).
    Symbol { name: String, offset: i64 },
    /// Memory at this link-time address of the marker's module (moved by
    /// the module's load bias).
    Link(u64),
}

/// One argument: its size in bytes, signedness and place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkArg {
    pub size: u8,
    pub signed: bool,
    pub loc: ArgLoc,
}

/// A function of a module as the architecture's analyses see it: where
/// it starts, its size, and whether it is an ifunc's resolver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FunctionRange {
    pub addr: u64,
    pub size: u64,
    pub ifunc: bool,
}

/// What an architecture's module-wide analyses (`hop`) read of a module:
/// its bytes and patch sites, its functions, and the hops planned in it so
/// far. `elf::Module` implements it; the architecture layer names no
/// module type of its own, so it sits below `elf`.
pub trait ModuleCode {
    fn machine(&self) -> Machine;
    /// The file's size, in bytes.
    fn file_len(&self) -> Option<u64>;
    /// The file's bytes (read once, or given).
    fn bytes(&self) -> Result<crate::image::Image, String>;
    /// The module's patch-site analysis (computed once).
    fn sites(&self) -> Result<&native::sites::Sites, String>;
    /// The file offset of link address `addr` (`PT_LOAD` segments).
    fn file_offset_of(&self, addr: u64) -> Option<u64>;
    /// Every function, in address order.
    fn functions(&self) -> impl Iterator<Item = FunctionRange> + '_;
    /// The function containing a link-time address, if any.
    fn function_at(&self, addr: u64) -> Option<FunctionRange>;
    /// The module's hop plans, shared by every copy of it.
    fn hops(&self) -> &std::sync::Mutex<Hops>;
}

/// What `hop::short_hop` decided, by function address, and how many
/// slots each host has given.
#[derive(Debug, Default)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub struct Hops {
    pub(crate) planned: std::collections::HashMap<u64, Result<Option<telco_abi::artifact::Hop>, String>>,
    pub(crate) hosts: std::collections::HashMap<u64, u32>,
}

/// What the code generator needs to know about an architecture.
pub struct Target {
    /// Cranelift's target triple.
    pub triple: &'static str,
    /// Cranelift ISA flags beyond the shared ones.
    pub isa_flags: &'static [(&'static str, &'static str)],
    /// The relocation Cranelift emits for a call to another function of
    /// the blob; pass 4 patches it with [`Target::patch_call`] and refuses
    /// every other kind.
    pub call_reloc: cranelift_codegen::binemit::Reloc,
    /// Fills the space between functions (a trap instruction's byte).
    pub padding: u8,
    /// Write a call relocation at `code[at..]` so that it reaches `dest`
    /// (offsets in the blob; `addend` as Cranelift gave it). Err when out
    /// of reach.
    pub patch_call: fn(code: &mut [u8], at: usize, dest: u32, addend: i64) -> Result<(), String>,
    /// `--last-pass 4`: append the instructions of one function at
    /// `offset` of the blob to `out`, one line each, calls annotated with
    /// the callee's name.
    pub disassemble: fn(bytes: &[u8], offset: u32, names: &std::collections::HashMap<u32, &str>, out: &mut String),
}

/// A CFI row as `ubacktrace()`'s compact rule (`telco_abi::region::
/// unwind_rule`), from the rules for the CFA, the frame pointer and the
/// return-address column: the CFA from the stack pointer `sp` or the frame
/// pointer `fp` plus an offset, the return address saved just below the
/// CFA, the frame pointer saved at an offset from the CFA or left as it
/// is; `UNW_END` where the return address is undefined (the outermost
/// frame), `UNW_NONE` for every other shape. Each architecture's
/// `compact_unwind_rule` says which shapes its compilers make.
pub(crate) fn compact_rule(
    cfa: &gimli::CfaRule<usize>,
    fp: &gimli::RegisterRule<usize>,
    ra: &gimli::RegisterRule<usize>,
    sp_reg: gimli::Register,
    fp_reg: gimli::Register,
) -> u32 {
    use telco_abi::region::{unwind_rule, UNW_CFA_FP, UNW_CFA_SP, UNW_END, UNW_NONE};
    match ra {
        gimli::RegisterRule::Undefined => return UNW_END,
        gimli::RegisterRule::Offset(-8) => {}
        _ => return UNW_NONE,
    }
    let (kind, off) = match cfa {
        gimli::CfaRule::RegisterAndOffset { register, offset } if *register == sp_reg => (UNW_CFA_SP, *offset),
        gimli::CfaRule::RegisterAndOffset { register, offset } if *register == fp_reg => (UNW_CFA_FP, *offset),
        _ => return UNW_NONE,
    };
    let saved_fp = match fp {
        gimli::RegisterRule::Offset(o) => Some(*o),
        gimli::RegisterRule::SameValue | gimli::RegisterRule::Undefined => None,
        _ => return UNW_NONE,
    };
    unwind_rule(kind, off, saved_fp).unwrap_or(UNW_NONE)
}

/// What both architectures' patch-site analyses (`sites`) read alike: code
/// addresses stored as data, each with where it is stored: every aligned
/// 8-byte word of the allocated sections that are not code, for which
/// `in_exec` holds.
pub(crate) fn code_addresses_in_data(
    elf: &goblin::elf::Elf<'_>,
    bytes: &[u8],
    in_exec: impl Fn(u64) -> bool,
) -> Vec<(u64, u64)> {
    use goblin::elf::section_header::{SHF_ALLOC, SHF_EXECINSTR, SHT_NOBITS};
    let mut out = Vec::new();
    for sh in &elf.section_headers {
        let alloc = sh.sh_flags & u64::from(SHF_ALLOC) != 0;
        if !alloc || sh.sh_flags & u64::from(SHF_EXECINSTR) != 0 || sh.sh_type == SHT_NOBITS {
            continue;
        }
        let Some(data) = bytes.get(sh.sh_offset as usize..sh.sh_offset.saturating_add(sh.sh_size) as usize) else {
            continue;
        };
        let skew = (8 - sh.sh_addr % 8) % 8;
        for (k, w) in data.get(skew as usize..).unwrap_or_default().chunks_exact(8).enumerate() {
            let v = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
            if in_exec(v) {
                out.push((v, sh.sh_addr + skew + 8 * k as u64));
            }
        }
    }
    out
}

/// The function ranges of a file's `.eh_frame` (sorted) and the exception
/// landing pads of their LSDAs (`.gcc_except_table`). A malformed entry
/// ends the walk; what was read stands.
pub(crate) fn fdes_and_landing_pads(elf: &goblin::elf::Elf<'_>, bytes: &[u8]) -> (Vec<(u64, u64)>, Vec<u64>) {
    use crate::image::{eh_frame, landing_pads, section};
    use gimli::UnwindSection;
    let (mut fdes, mut pads) = (Vec::new(), Vec::new());
    let Some((eh, bases)) = eh_frame(elf, bytes, native::CFI_VENDOR) else { return (fdes, pads) };
    let lsda_section = section(elf, bytes, ".gcc_except_table");
    let mut entries = eh.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        let gimli::CieOrFde::Fde(partial) = entry else { continue };
        let Ok(fde) = partial.parse(gimli::EhFrame::cie_from_offset) else { continue };
        let start = fde.initial_address();
        let end = start.wrapping_add(fde.len());
        if fde.len() > 0 {
            fdes.push((start, end));
        }
        let Some(gimli::Pointer::Direct(lsda)) = fde.lsda() else { continue };
        let Some((gx_addr, gx)) = lsda_section else { continue };
        let Some(at) = lsda.checked_sub(gx_addr).filter(|&o| (o as usize) < gx.len()) else { continue };
        pads.extend(landing_pads(&gx[at as usize..], start));
    }
    fdes.sort_unstable();
    (fdes, pads)
}

/// The contract, named through the architecture module `$a` with the type
/// each item must have (the list is in this module's documentation).
/// Expanded for both architectures, both being built on every host: one
/// that lacks an item, or gives it another type, does not compile.
macro_rules! check_contract {
    ($a:ident) => {
        #[allow(dead_code)]
        fn $a() {
            use self::$a::{entry, hop, sdt, sites};
            let _: Machine = self::$a::MACHINE;
            let _: Target = self::$a::TARGET;
            let _: CallConv = self::$a::CALL_CONV;
            let _: gimli::Register = self::$a::DWARF_FP;
            let _: gimli::Register = self::$a::DWARF_RA;
            let _: gimli::Register = self::$a::DWARF_SP;
            let _: gimli::Vendor = self::$a::CFI_VENDOR;
            let _: fn(gimli::Register, i64) -> bool = self::$a::fresh_call_frame;
            let _: fn(&gimli::CfaRule<usize>, &gimli::RegisterRule<usize>, &gimli::RegisterRule<usize>) -> u32 =
                self::$a::compact_unwind_rule;
            let _: fn(u16) -> Option<u32> = self::$a::dwarf_register;
            let _: fn(u16) -> String = self::$a::dwarf_register_name;

            let _: fn(&str) -> Result<Vec<MarkArg>, String> = sdt::parse_args;

            let _: fn(&[u8], u64) -> Option<entry::NoReturnAddress> = entry::return_address_use;
            let _: fn(&[u8], u64) -> Option<u64> = entry::tail_jump;
            let _: fn(&[u8]) -> Result<u8, String> = entry::go_stack_check;

            fn short_hop<M: ModuleCode>(m: &M, f: FunctionRange) -> Result<Option<telco_abi::artifact::Hop>, String> {
                hop::short_hop(m, f)
            }

            type Plan = fn(&sites::Sites, &[u8], u64, (u64, u64)) -> Result<Patch, String>;
            let _: Option<Patch> = None::<sites::Patch>;
            let _: fn(&goblin::elf::Elf<'_>, &[u8]) -> Result<sites::Sites, String> = sites::Sites::build;
            let _: fn(&sites::Sites, &[u8], u64, u64) -> Vec<(u64, u64)> = sites::Sites::instruction_starts;
            let _: fn(&sites::Sites, u64, Option<(u64, u64)>) -> Option<(u64, u64)> = sites::Sites::function_range;
            let _: Plan = sites::Sites::plan;
            let _: Plan = sites::Sites::plan_pad;
            let _: Plan = sites::Sites::plan_lead;
            let _: fn(&sites::Sites, &[u8], u64, (u64, u64), u64, bool) -> Result<Patch, String> =
                sites::Sites::plan_len;
        }
    };
}

/// Compiling these is the check; they are never called.
mod contract_check {
    use super::*;
    #[cfg(target_arch = "x86_64")]
    check_contract!(x86_64);
    check_contract!(aarch64);
}
