//! The register file of each architecture: one table per architecture
//! from which everything that names a register derives — the block a
//! trampoline saves ([`native::SavedRegs`]), `register("name")`, the
//! argument and return registers, the callee-clobbered set, and the C
//! header's register offsets (`c_header`). The runtime's trampolines and
//! clobber analysis check themselves against the same table.
//!
//! Only this folder, `runtime/src/arch/` and `compiler/src/arch/` may name
//! an architecture's registers (INTERNALS.md, "Where code may live").

pub mod aarch64;
pub mod x86_64;

#[cfg(target_arch = "aarch64")]
pub use self::aarch64 as native;
/// The architecture telco-stap is built for; its targets are the same.
#[cfg(target_arch = "x86_64")]
pub use self::x86_64 as native;

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!(
    "telco-stap runs on x86_64 and aarch64: another architecture needs its own module beside abi/src/arch/x86_64.rs"
);

/// What the C header of the runtime library needs of an architecture's
/// register file (`c_header`, run by a build script, which may build for
/// another architecture than its own).
pub struct Layout {
    pub nregs: usize,
    pub arg_regs: &'static [usize],
    /// Go's register ABI: its integer argument registers, and `g`'s.
    pub go_arg_regs: &'static [usize],
    pub go_g_reg: usize,
    pub return_reg: usize,
    pub sp: usize,
    pub fp: usize,
    pub pc: usize,
    /// Bytes from the stack pointer at a function's entry to its first
    /// argument passed on the stack (x86_64: past the return address).
    pub stack_args_at: u64,
    /// Where a function's return address is at its entry: a register
    /// (aarch64's link register), or None for the top of the stack.
    pub ra_reg: Option<usize>,
    /// The bits of a return address that are the address (aarch64: below
    /// a pointer-authentication code's bits, 48-bit user addresses).
    pub pc_mask: u64,
}

/// The register-file layout of the architecture Rust calls `arch`
/// (`CARGO_CFG_TARGET_ARCH`).
pub fn layout(arch: &str) -> Option<Layout> {
    match arch {
        "x86_64" => Some(Layout {
            nregs: x86_64::NREGS,
            arg_regs: &x86_64::ARG_REGS,
            go_arg_regs: &x86_64::GO_ARG_REGS,
            go_g_reg: x86_64::GO_G_REG,
            return_reg: x86_64::RETURN_REG,
            sp: x86_64::SP,
            fp: x86_64::FP,
            pc: x86_64::PC,
            stack_args_at: x86_64::STACK_ARGS_AT,
            ra_reg: None,
            pc_mask: x86_64::PC_MASK,
        }),
        "aarch64" => Some(Layout {
            nregs: aarch64::NREGS,
            arg_regs: &aarch64::ARG_REGS,
            go_arg_regs: &aarch64::GO_ARG_REGS,
            go_g_reg: aarch64::GO_G_REG,
            return_reg: aarch64::RETURN_REG,
            sp: aarch64::SP,
            fp: aarch64::FP,
            pc: aarch64::PC,
            stack_args_at: aarch64::STACK_ARGS_AT,
            ra_reg: Some(aarch64::LR),
            pc_mask: aarch64::PC_MASK,
        }),
        _ => None,
    }
}

/// One word of the saved register file.
#[derive(Clone, Copy, Debug)]
pub struct Register {
    /// The name `register()` takes and SDT argument specs use (`rax`).
    pub name: &'static str,
    /// Other spellings of the same register (`eax`, `ax`) for `register()`.
    pub aliases: &'static [&'static str],
    /// A call may change it (the platform ABI's caller-saved set).
    pub caller_saved: bool,
}

/// The caller-saved registers of a register file, as a mask (bit `i`
/// stands for word `i`; up to 64 words).
pub const fn caller_saved(table: &[Register]) -> u64 {
    let mut m = 0;
    let mut i = 0;
    while i < table.len() {
        if table[i].caller_saved {
            m |= 1 << i;
        }
        i += 1;
    }
    m
}

/// `register("NAME")` (an optional `%` before it): the index of NAME's word
/// in a register file, or None.
pub fn index_in(table: &[Register], name: &str) -> Option<u32> {
    let n = name.strip_prefix('%').unwrap_or(name);
    table.iter().position(|r| r.name == n || r.aliases.contains(&n)).map(|i| i as u32)
}
