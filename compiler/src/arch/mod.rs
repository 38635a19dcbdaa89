//! The architecture layer of the compiler: what pass 2 and pass 4 must
//! know about the instruction set of the target (the same as telco-stap's
//! own). One folder per architecture behind the same names; [`native`] is
//! the one this build targets, and the rest of the compiler names only
//! `native::…`.
//!
//! What each architecture provides (x86_64's, in `x86_64/`):
//! * [`Target`] (`native::TARGET`): the code generator's target triple and
//!   flags, the one relocation kind a linked blob may contain (a call
//!   within the blob) and how to patch it, the byte that pads between
//!   functions, and the disassembler of `--last-pass 4`;
//! * `sdt`: SDT marker argument specs in the architecture's operand syntax;
//! * `entry`: whether a function's first instructions use its return
//!   address as data (`.return` refusals) or only jump elsewhere;
//! * `sites`: decoding a whole module for where control can arrive (patch
//!   sites of statements, markers and hops).
//!
//! The register file is telco-abi's (`telco_abi::arch`); the runtime
//! library's architecture lines are in `compiler/rt/arch/`.

#[cfg(target_arch = "x86_64")]
pub mod x86_64;
#[cfg(target_arch = "x86_64")]
pub use self::x86_64 as native;

#[cfg(not(target_arch = "x86_64"))]
compile_error!(
    "telco-stap runs on x86_64 so far: another architecture needs its folder beside compiler/src/arch/x86_64/"
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
