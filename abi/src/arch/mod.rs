//! The register file of each architecture: one table per architecture
//! from which everything that names a register derives — the block a
//! trampoline saves ([`native::SavedRegs`]), `register("name")`, the
//! argument and return registers, the callee-clobbered set, and the C
//! header's register offsets (`c_header`). The runtime's trampolines and
//! clobber analysis check themselves against the same table.
//!
//! Only this folder, `runtime/src/arch/` and `compiler/src/arch/` may name
//! an architecture's registers (INTERNALS.md, "Where code may live").

pub mod x86_64;

/// The architecture telco-stap is built for; its targets are the same.
#[cfg(target_arch = "x86_64")]
pub use self::x86_64 as native;

#[cfg(not(target_arch = "x86_64"))]
compile_error!(
    "telco-stap runs on x86_64 so far: another architecture needs its own module beside abi/src/arch/x86_64.rs"
);

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

/// `register("NAME")` (an optional `%` before it): the index of NAME's word
/// in a register file, or None.
pub fn index_in(table: &[Register], name: &str) -> Option<u32> {
    let n = name.strip_prefix('%').unwrap_or(name);
    table.iter().position(|r| r.name == n || r.aliases.contains(&n)).map(|i| i as u32)
}
