//! How build.rs compiles and checks the runtime library for aarch64 (the C
//! side is `aarch64.h` beside this file).

/// Compiler flags beyond the common ones: general-purpose registers only
/// (trampolines save no vector state); no BTI/PAC landing pads (the blob
/// is entered only by direct calls from trampolines and handlers); atomics
/// inline (gcc would otherwise call libgcc's `__aarch64_*` helpers); the
/// tiny code model, whose every address is PC-relative (`adr`, literal
/// loads), so the bytes work wherever pass 4 places them, not only at a
/// page offset an `adrp` would need.
pub const CFLAGS: &[&str] =
    &["-mgeneral-regs-only", "-mbranch-protection=none", "-mno-outline-atomics", "-mcmodel=tiny"];

/// The relocations the linked library may have used: PC-relative ones only.
pub const PC_RELATIVE: &[u32] = &[
    goblin::elf::reloc::R_AARCH64_NONE,
    goblin::elf::reloc::R_AARCH64_PREL64,
    goblin::elf::reloc::R_AARCH64_PREL32,
    goblin::elf::reloc::R_AARCH64_LD_PREL_LO19,
    goblin::elf::reloc::R_AARCH64_ADR_PREL_LO21,
    goblin::elf::reloc::R_AARCH64_TSTBR14,
    goblin::elf::reloc::R_AARCH64_CONDBR19,
    goblin::elf::reloc::R_AARCH64_JUMP26,
    goblin::elf::reloc::R_AARCH64_CALL26,
];
