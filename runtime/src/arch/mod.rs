//! The architecture layer: everything that depends on the instruction set
//! of the machine telco-stap runs on (and its targets, the same). One
//! folder per architecture behind one set of names; [`native`] is the one
//! this build uses, and the rest of the runtime names only `native::…`.
//!
//! What each architecture provides (x86_64's, in `x86_64/`):
//! * `patch`: decoding a function's first instructions, deciding where the
//!   branch to a trampoline goes and which bytes it displaces (`plan`,
//!   `plan_loop`), relocating them (`relocate`), the branch itself
//!   (`jump`), the crash handler's stub and `rt_sigreturn` sequence;
//! * `trampoline`: the trampoline builders (entry, return, clock-only,
//!   the `.itrace` gate);
//! * `clobber`: which registers a call into the compiled blob can change
//!   (its reading of one function; the closure over calls is shared:
//!   `clobbers.rs`);
//! * `blocks`: the block tracer's translated code and the stubs it shares
//!   (`.itrace` in the target; the protocol with the tracer is shared:
//!   `blocks.rs` here);
//! * the ptrace register file (`Regs` and its accessors), the system-call
//!   and function-call setups for injected calls, the trap instruction, the
//!   cycle counter (`clock`), the instruction boundaries of a byte range.
//!
//! Pure parts (decode, plan, relocate, trampolines, clobbers, block
//! translation) are plain
//! functions of bytes and addresses, tested on every host; aarch64's so far
//! (`aarch64::patch`) are built on x86_64 too. The register
//! file itself (which register is which word) comes from telco-abi's
//! table (`telco_abi::arch`).

pub mod blocks;
pub mod clobbers;
pub mod contract;
#[cfg(target_arch = "x86_64")]
pub mod x86_64;

/// aarch64: its pure parts (`patch`: decode, plan, relocate) are built and
/// tested on every host; the rest only for aarch64.
pub mod aarch64;
#[cfg(target_arch = "aarch64")]
pub use self::aarch64 as native;
#[cfg(target_arch = "x86_64")]
pub use self::x86_64 as native;

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!(
    "telco-stap runs on x86_64 and aarch64: another architecture needs its folder beside runtime/src/arch/x86_64/"
);
