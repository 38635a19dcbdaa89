//! How build.rs compiles and checks the runtime library for x86_64 (the C
//! side is `x86_64.h` beside this file).

/// Compiler flags beyond the common ones: general-purpose registers only
/// (trampolines save no vector state), no CET landing pads.
pub const CFLAGS: &[&str] = &["-mgeneral-regs-only", "-fcf-protection=none"];

/// The relocations the linked library may have used: PC-relative ones
/// only, so the bytes work at any address.
pub const PC_RELATIVE: &[u32] =
    &[goblin::elf::reloc::R_X86_64_PC32, goblin::elf::reloc::R_X86_64_PLT32, goblin::elf::reloc::R_X86_64_NONE];
