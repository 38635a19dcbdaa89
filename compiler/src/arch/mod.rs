//! The architecture layer of the compiler: what pass 2 and pass 4 must
//! know about the instruction set of the target (the same as telco-stap's
//! own). One folder per architecture behind the same names; [`native`] is
//! the one this build targets, and the rest of the compiler names only
//! `native::…`.
//!
//! What each architecture provides (x86_64's, in `x86_64/`; aarch64's, in
//! `aarch64/`):
//! * [`Target`] (`native::TARGET`): the code generator's target triple and
//!   flags, the one relocation kind a linked blob may contain (a call
//!   within the blob) and how to patch it, the byte that pads between
//!   functions, and the disassembler of `--last-pass 4`;
//! * `sdt`: SDT marker argument specs in the architecture's operand syntax;
//! * `entry`: whether a function's first instructions use its return
//!   address as data (`.return` refusals) or only jump elsewhere;
//! * `sites`: decoding a whole module for where control can arrive (patch
//!   sites of statements, markers and hops);
//! * `hop`: a jump through a neighbour for functions shorter than the
//!   jump (x86_64 only: aarch64's `B` always fits);
//! * the CFI the unwinders read: a fresh call's frame, the compact unwind
//!   rule, DWARF register numbers (`DWARF_FP`, `DWARF_RA`, the `.eh_frame`
//!   vendor extensions `CFI_VENDOR`).
//!
//! The register file is telco-abi's (`telco_abi::arch`); the runtime
//! library's architecture lines are in `compiler/rt/arch/`.

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
