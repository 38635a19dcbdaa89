//! The architecture layer: everything that depends on the instruction set
//! of the machine telco-stap runs on (and its targets, the same). One
//! folder per architecture behind one set of names; [`native`] is the one
//! this build uses, and the rest of the runtime names only `native::…`.
//!
//! # The contract
//!
//! What an architecture module (`x86_64/`, `aarch64/`) must provide, each
//! item with the type `check_native_contract` (and, for the pure part,
//! `check_pure_contract!`) gives it; a missing or mistyped item does not
//! compile. The types they share are declared once, in [`contract`], and
//! re-exported by each architecture.
//!
//! `patch` (pure): where a probe's jump goes and what it displaces.
//! * `Hook`, `Retarget`, `CopyMap`: [`contract`]'s; `Refusal`: why not (an
//!   error enum of the architecture's own reasons);
//! * `JUMP_LEN`, `jump(at, target)`: the patch jump and its length, None
//!   out of reach (`jmp rel32`, `B`); `REACH`: how far a code region may be
//!   from the code jumping to it;
//! * `JUMP_ANYWHERE_LEN`, `jump_anywhere(target)`: a jump to any address;
//!   `far_jump(target)`: the veneer a site out of reach jumps through (None
//!   where the jump always reaches); `short_jump(at, target)`: the shortest
//!   jump;
//! * `DIRECT_CALL_LEN`, `direct_call(at, target)`,
//!   `direct_call_target(bytes, at)`: a direct call, written and read;
//! * `LANDING_PAD_LEN`, `landing_pad_len(code)`, `signs_return(pad)`: the
//!   landing pad a function starts with, and whether it signs the return
//!   address;
//! * `plan`, `plan_loop`: where the jump goes and which branches of the
//!   function are retargeted;
//! * `relocate`, `relocate_with_map`, `relocate_at_entry`, `relocated_pc`:
//!   the displaced instructions moved to the trampoline, then the jump back;
//! * `signal_stub(region, handler)`, `SIGRETURN`: the crash handler's
//!   entry stub and its `rt_sigreturn` restorer.
//!
//! `trampoline` (pure): `Entry` and `ClockOnly` ([`contract`]'s, with
//! `clobber::RegMask`), `Shadow`, `Returns`, `SpanInline`, `StatInline`,
//! `Timed`; `AsmError`; the builders `entry_prefix`, `return_trampoline`,
//! `clock_entry_prefix`, `clock_return_trampoline`.
//!
//! `clobber` (pure): `RegMask`, `CALLER_SAVED`, and `Clobbers`: the shared
//! closure over calls ([`clobbers`]) with the architecture's reading of
//! one function.
//!
//! `frames` (pure): `LINK_REGISTER`, `CALLED_ENTRY`, `rows`, `return_rows`:
//! the unwind rows of code the tracer wrote or moved.
//!
//! `blocks`: the block tracer's translated code (`.itrace`; the protocol
//! with the tracer is [`blocks`] here): `Stubs`, `stubs`, `translate`,
//! `record_values`, `fit`, `has_avx`, `START_VEC_BYTES` (pure);
//! `start_regs`, `code_written` (native only).
//!
//! `stub` (native only): the runtime's stub page in the target for
//! injected system calls and calls: `code`, `SIZE`, `BLOCK`, `CALL_RETURN`,
//! `SYSCALL_AT`, `AFTER_SYSCALL`, `RETURN_MARKER`, `FP_REGSET`,
//! `resume_block`, `syscall_regs`, `entry_marker_head`,
//! `ENTRY_MARKER_SIGNAL`, `ENTRY_MARKER_AFTER`, `ENTRY_KEPT`, `entry_regs`,
//! `call_result`.
//!
//! `sample` (native only): the profiler's unwinding: `PERF_USER_REGS`,
//! `Unwinder`, `Cache`, `unwind_start`, `unwind_regs`, `unwind_regs_lr`,
//! `unwind_sp`, `unwind_fp`, `SIGRETURN`, `SIGFRAME_REGS`, `saved_from`,
//! `in_syscall`, `is_kernel_address`.
//!
//! The module itself (native only):
//! * `NAME`, `ELF_MACHINE`, `USER_TOP`: the architecture's name, its ELF
//!   machine, the end of user address space;
//! * `Regs` (ptrace's register file) with `pc`, `set_pc`, `sp`,
//!   `thread_pointer` (`TLS_REGSET`, `TCB_WINDOW`), `link_register`,
//!   `set_link_register`, `load_saved`, `VECTOR_REGSET`, `itrc_regs_with`
//!   and `ItrcIsa` (the `.itrace` recorder's);
//! * `TRAP`, `TRAP_INSN`, `trap_fill`, `pc_after_trap`: the trap
//!   instruction and what fills dead bytes; `TRAP_PROBE`: a trap probe's
//!   patch (`rt_trap` in compiler/rt/rt.c);
//! * injected system calls and calls: `SYSCALL_LEN`,
//!   `syscall_instruction`, `set_syscall`, `syscall_result`,
//!   `forget_syscall`, `hide_step_flag_after_syscall`, `set_call`,
//!   `call_result`;
//! * returns: `return_address`, `strip_return`, `sp_after_return`,
//!   `is_return`;
//! * `AUDIT_ARCH`, `SANDBOX_SYSCALLS`: the sandbox's seccomp filter;
//! * `clock`: the cycle counter; `instruction_starts`: the instruction
//!   boundaries of a byte range.
//!
//! Pure parts are plain functions of bytes and addresses, tested on every
//! host; aarch64's are built on x86_64 too, and checked there against the
//! pure part of the contract. The register file itself (which register is
//! which word) comes from telco-abi's table (`telco_abi::arch`).

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

/// The pure part of the contract (`patch`, `trampoline`, `clobber`,
/// `frames`, `blocks`' translator), named through the architecture module
/// `$a` with the type each item must have. Expanded for [`native`] and, on
/// every host, for `aarch64` (whose pure parts are built everywhere): an
/// architecture that lacks an item, or gives it another type, does not
/// compile.
macro_rules! check_pure_contract {
    ($a:ident) => {{
        use self::$a::{blocks, clobber, frames, patch, trampoline};
        use crate::arch::blocks::{ArenaAddrs, Refused, SlotAlloc, Translated};
        use crate::arch::contract;
        use telco_itrc::x64::X64Block;
        type Mask = clobber::RegMask;
        type AsmError = trampoline::AsmError;

        // patch: the shared types are the contract's.
        let _: Option<contract::Hook> = None::<patch::Hook>;
        let _: Option<contract::Retarget> = None::<patch::Retarget>;
        let _: Option<contract::CopyMap> = None::<patch::CopyMap>;
        fn is_error<E: std::error::Error>() {}
        is_error::<patch::Refusal>();
        let _: usize = patch::JUMP_LEN;
        let _: usize = patch::JUMP_ANYWHERE_LEN;
        let _: usize = patch::DIRECT_CALL_LEN;
        let _: usize = patch::LANDING_PAD_LEN;
        let _: u64 = patch::REACH;
        let _: &[u8] = &patch::SIGRETURN;
        let _: fn(&[u8]) -> usize = patch::landing_pad_len;
        let _: fn(&[u8], u64, u64) -> Result<patch::Hook, patch::Refusal> = patch::plan;
        let _: fn(&[u8], u64, u64) -> Result<(patch::Hook, Vec<patch::Retarget>), patch::Refusal> = patch::plan_loop;
        let _: fn(&[u8], u64, u64) -> Result<patch::Hook, patch::Refusal> = patch::plan_trap;
        let _: fn(&patch::Refusal) -> bool = patch::trap_may_fit;
        let _: fn(&[u8], u64, usize, u64) -> Result<Vec<u8>, patch::Refusal> = patch::relocate;
        let _: fn(&[u8], u64, usize, u64) -> Result<(Vec<u8>, patch::CopyMap), patch::Refusal> =
            patch::relocate_with_map;
        let _: fn(&[u8], u64, usize, u64) -> Result<(Vec<u8>, patch::CopyMap), patch::Refusal> =
            patch::relocate_at_entry;
        let _: fn(&[u8], u64, usize, u64, u64) -> Option<u64> = patch::relocated_pc;
        let _: fn(u64, u64) -> Option<[u8; patch::JUMP_LEN]> = patch::jump;
        let _: fn(u64) -> [u8; patch::JUMP_ANYWHERE_LEN] = patch::jump_anywhere;
        let _: fn(u64) -> Option<Vec<u8>> = patch::far_jump;
        let _: fn(u64, u64) -> Option<Vec<u8>> = patch::short_jump;
        let _: fn(u64, u64) -> Option<[u8; patch::DIRECT_CALL_LEN]> = patch::direct_call;
        let _: fn(&[u8], u64) -> Option<u64> = patch::direct_call_target;
        let _: fn(u32) -> i32 = patch::signs_return;
        let _: fn(u64, u64) -> Vec<u8> = patch::signal_stub;
        let _: fn(&[u8]) -> Result<(), String> = patch::go_check;
        let _: fn(&[u8]) -> Result<Vec<u8>, String> = patch::go_epilogue;

        // trampoline: the shared types, with this architecture's mask.
        is_error::<AsmError>();
        let _: Option<contract::Entry<Mask>> = None::<trampoline::Entry>;
        let _: Option<contract::ClockOnly<Mask>> = None::<trampoline::ClockOnly>;
        let _: Option<contract::Shadow> = None::<trampoline::Shadow>;
        let _: Option<contract::Returns> = None::<trampoline::Returns>;
        let _: Option<contract::SpanInline> = None::<trampoline::SpanInline>;
        let _: Option<contract::StatInline> = None::<trampoline::StatInline>;
        let _: Option<contract::Timed> = None::<trampoline::Timed>;
        let _: fn(&trampoline::Entry) -> Result<Vec<u8>, AsmError> = trampoline::entry_prefix;
        let _: fn(&trampoline::GoExit) -> Result<Vec<u8>, AsmError> = trampoline::go_return_trampoline;
        let _: fn(
            u64,
            u64,
            u32,
            u64,
            &contract::Returns,
            Option<Mask>,
            &contract::Shadow,
            Option<&contract::SpanInline>,
        ) -> Result<Vec<u8>, AsmError> = trampoline::return_trampoline;
        let _: fn(&trampoline::Entry, &trampoline::ClockOnly) -> Result<Vec<u8>, AsmError> =
            trampoline::clock_entry_prefix;
        let _: fn(u64, u64, u32, u64, &contract::Shadow, &trampoline::ClockOnly) -> Result<Vec<u8>, AsmError> =
            trampoline::clock_return_trampoline;

        // clobber: the register mask and the closure over calls.
        let _: Mask = clobber::CALLER_SAVED;
        let _: fn(&mut clobber::Clobbers<'static>, u32) -> Option<Mask> = clobber::Clobbers::of;

        // frames: the unwind rows of code the tracer wrote or moved.
        let _: Option<usize> = frames::LINK_REGISTER;
        let _: i64 = frames::CALLED_ENTRY;
        let _: fn(&[u8], u64, i64, Option<std::ops::Range<u64>>) -> Vec<crate::frames::Row> = frames::rows;
        let _: fn(&[u8], u64) -> Vec<crate::frames::Row> = frames::return_rows;

        // blocks: the block tracer's translator and its stubs.
        let _: usize = blocks::START_VEC_BYTES;
        let _: fn() -> bool = blocks::has_avx;
        let _: fn(&X64Block) -> usize = blocks::record_values;
        let _: fn(&mut X64Block) = blocks::fit;
        let _: fn(&ArenaAddrs) -> Result<(Vec<u8>, blocks::Stubs), AsmError> = blocks::stubs;
        let _: fn(
            &X64Block,
            u64,
            &ArenaAddrs,
            &blocks::Stubs,
            &mut dyn SlotAlloc,
        ) -> Result<(Translated, Vec<(u64, u64)>), Refused> = blocks::translate;
    }};
}

/// The whole contract for the architecture this build runs on: the pure
/// part, then the register file, the injected calls, `stub` and `sample`.
/// Never called: compiling it is the check.
#[allow(dead_code)]
fn check_native_contract() {
    use self::native::{self as a, stub, Regs};
    check_pure_contract!(native);

    let _: fn(&Regs, &[u8]) -> _ = a::blocks::start_regs;
    let _: fn(*const u8, usize) = a::blocks::code_written;

    let _: &str = a::NAME;
    let _: u16 = a::ELF_MACHINE;
    let _: u64 = a::USER_TOP;
    let _: u8 = a::TRAP;
    let _: &[u8] = &a::TRAP_INSN;
    let _: fn(usize) -> Vec<u8> = a::trap_fill;
    let _: &[u8] = &a::TRAP_PROBE;
    let _: u32 = a::AUDIT_ARCH;
    let _: &[i64] = a::SANDBOX_SYSCALLS;
    let _: Option<i32> = a::VECTOR_REGSET;
    let _: Option<i32> = a::TLS_REGSET;
    let _: i64 = a::TCB_WINDOW;
    let _: usize = a::SYSCALL_LEN;
    let _: fn(&Regs) -> u64 = a::pc;
    let _: fn(&mut Regs, u64) = a::set_pc;
    let _: fn(&Regs) -> u64 = a::sp;
    let _: fn(&Regs, Option<&[u8]>) -> u64 = a::thread_pointer;
    let _: fn(u64) -> u64 = a::pc_after_trap;
    let _: i32 = a::TRAP_SI_CODE;
    let _: fn(u64) -> u64 = a::trap_before;
    let _: fn(&[u8]) -> bool = a::is_trap;
    let _: fn(u64) -> u64 = a::sp_after_return;
    let _: fn(&mut Regs) = a::forget_syscall;
    let _: fn() -> &'static [u8] = a::syscall_instruction;
    let _: fn(&mut Regs, i64, [u64; 6]) = a::set_syscall;
    let _: fn(&Regs) -> i64 = a::syscall_result;
    let _: fn(&mut Regs, u64, &[u64], u64) -> Option<u64> = a::set_call;
    let _: fn(&Regs) -> u64 = a::call_result;
    let _: fn(&mut Regs, &[u64; telco_abi::arch::native::NREGS]) = a::load_saved;
    let _: fn() -> u64 = a::clock;
    let _: fn(&[u8], u64) -> Vec<u64> = a::instruction_starts;
    let _: Option<a::ItrcIsa> = None;
    let _: fn(&Regs, &dyn Fn(u64) -> Option<u64>) -> Option<u64> = a::return_address;
    let _: fn(u64) -> u64 = a::strip_return;
    let _: fn(&Regs) -> Option<u64> = a::link_register;
    let _: fn(&mut Regs, u64) = a::set_link_register;
    let _: fn(&[u8]) -> bool = a::is_return;
    let _: fn(&Regs, &[u8]) -> _ = a::itrc_regs_with;
    let _: fn(&mut Regs, &dyn Fn(u64, &mut [u8]) -> usize, u64) = a::hide_step_flag_after_syscall;

    let _: u64 = stub::SIZE;
    let _: u64 = stub::BLOCK;
    let _: u64 = stub::CALL_RETURN;
    let _: u64 = stub::SYSCALL_AT;
    let _: u64 = stub::AFTER_SYSCALL;
    let _: i64 = stub::RETURN_MARKER;
    let _: u64 = stub::ENTRY_MARKER_AFTER;
    let _: i32 = stub::ENTRY_MARKER_SIGNAL;
    let _: (i64, usize) = stub::ENTRY_KEPT;
    let _: Option<i32> = stub::FP_REGSET;
    let _: fn() -> Vec<u8> = stub::code;
    let _: fn(&Regs, &[u8], u64) -> Vec<u8> = stub::resume_block;
    let _: fn(&Regs, u64, i64, [u64; 6]) -> Regs = stub::syscall_regs;
    let _: fn() -> Vec<u8> = stub::entry_marker_head;
    let _: fn(&Regs, &[u8], u64) -> (Regs, u64) = stub::entry_regs;
    let _: fn(&Regs) -> u64 = stub::call_result;

    use self::native::sample;
    let _: &[(u32, usize)] = &sample::PERF_USER_REGS;
    let _: Option<sample::Cache> = None;
    let _: &[u8] = &sample::SIGRETURN;
    let _: [u64; 3] = sample::SIGFRAME_REGS;
    let _: fn(&telco_abi::region::SavedRegs) -> (u64, u64, _) = sample::unwind_start;
    let regs: fn(u64, u64, u64) -> _ = sample::unwind_regs;
    let _: fn(u64, u64, u64, Option<u64>) -> _ = sample::unwind_regs_lr;
    let r = regs(0, 0, 0);
    let _: u64 = sample::unwind_sp(&r);
    let _: u64 = sample::unwind_fp(&r);
    let _: fn(&Regs) -> telco_abi::region::SavedRegs = sample::saved_from;
    let _: fn(&Regs) -> bool = sample::in_syscall;
    let _: fn(u64) -> bool = sample::is_kernel_address;
}

/// aarch64's pure parts against the contract, on every host.
#[allow(dead_code)]
fn check_aarch64_contract() {
    check_pure_contract!(aarch64);
}
