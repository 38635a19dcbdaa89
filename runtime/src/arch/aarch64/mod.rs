//! aarch64: probe placement, trampolines, and the register-level side of
//! ptrace (which `user_pt_regs` word is the program counter, how an
//! injected system call or call is set up), beside `x86_64/` with the
//! same names.
//!
//! `patch` (decode, plan, relocate), `trampoline`, `clobber`, `frames`,
//! `blocks`
//! (the block tracer's code, but for its cache maintenance), `asm` (the
//! assembler the last two share) and `sigframe` (the frame `rt_sigreturn`
//! reads) are pure and built and tested on every host; the rest is built
//! for aarch64 only.

pub(crate) mod asm;
pub mod blocks;
pub mod clobber;
pub mod frames;
pub mod patch;
#[cfg(target_arch = "aarch64")]
pub mod sample;
pub mod sigframe;
#[cfg(target_arch = "aarch64")]
pub mod stub;
pub mod trampoline;

#[cfg(target_arch = "aarch64")]
pub use native::*;

#[cfg(target_arch = "aarch64")]
mod native {
    use telco_abi::arch::aarch64 as abi;

    /// A stopped thread's registers as ptrace gives them (`NT_PRSTATUS`:
    /// x0–x30, sp, pc, pstate, the order of telco-abi's register file).
    pub type Regs = libc::user_regs_struct;

    /// The vector registers for `.itrace`'s single-stepper: `NT_PRFPREG`
    /// (v0–v31, then fpsr and fpcr).
    pub const VECTOR_REGSET: Option<i32> = Some(2);

    /// The end of user address space (48-bit addresses), less a page.
    pub const USER_TOP: u64 = 0xffff_ffff_f000;

    /// The architecture's name, as users read it.
    pub const NAME: &str = "aarch64";
    /// The ELF header's `e_machine` of its programs.
    pub const ELF_MACHINE: u16 = 183;

    /// What fills dead bytes: four of them are `udf #0`.
    pub const TRAP: u8 = 0;
    /// The trap instruction: `brk #0`.
    pub const TRAP_INSN: [u8; 4] = 0xd420_0000u32.to_le_bytes();
    /// A trap probe's patch: `brk #0x7e1` (not gdb's `#0`, the kernel's
    /// uprobe `#5`, nor `__builtin_trap`'s `#0x3e8`).
    pub const TRAP_PROBE: [u8; 4] = (0xd420_0000u32 | 0x7e1 << 5).to_le_bytes();

    /// `len` bytes of trap instructions (`len` a multiple of 4; a shorter
    /// tail is `udf`).
    pub fn trap_fill(len: usize) -> Vec<u8> {
        let mut v: Vec<u8> = TRAP_INSN.iter().copied().cycle().take(len & !3).collect();
        v.resize(len, TRAP);
        v
    }

    /// The sandbox's seccomp filter (`os::sandbox`): `AUDIT_ARCH_AARCH64`;
    /// the runtime library reads its thread pointer from a register, so no
    /// system call beyond the common ones.
    pub const AUDIT_ARCH: u32 = 0xc000_00b7;
    pub const SANDBOX_SYSCALLS: &[i64] = &[];
    /// `svc #0`.
    const SVC: [u8; 4] = 0xd400_0001u32.to_le_bytes();
    /// Bytes an injected system call overwrites at the thread's pc.
    pub const SYSCALL_LEN: usize = SVC.len();

    /// The program counter.
    pub fn pc(r: &Regs) -> u64 {
        r.pc
    }

    pub fn set_pc(r: &mut Regs, pc: u64) {
        r.pc = pc;
    }

    /// The stack pointer.
    pub fn sp(r: &Regs) -> u64 {
        r.sp
    }

    /// The thread pointer (TPIDR_EL0) is not in `NT_PRSTATUS`: the tracer
    /// reads the register set `NT_ARM_TLS` for it.
    pub const TLS_REGSET: Option<i32> = Some(0x401);

    /// The thread pointer (TLS base), from `NT_ARM_TLS`'s first word.
    pub fn thread_pointer(_r: &Regs, tls: Option<&[u8]>) -> u64 {
        tls.and_then(|b| b.get(..8)?.try_into().ok()).map_or(0, u64::from_le_bytes)
    }

    /// Where the C library's thread control block may hold the thread's
    /// id, from the thread pointer: glibc and musl keep `struct pthread`
    /// just below it here (TLS variant I).
    pub const TCB_WINDOW: i64 = -4096;

    /// The pc after a trap at `at` has stopped the thread: `brk` leaves
    /// the pc on itself.
    pub const fn pc_after_trap(at: u64) -> u64 {
        at
    }

    /// A thread stopped with the SIGTRAP of a trap instruction (`si_code`
    /// `TRAP_SI_CODE`, TRAP_BRKPT) at `pc`: where that instruction would
    /// be, and whether `bytes` (read there) are one (`brk`, any immediate).
    pub const TRAP_SI_CODE: i32 = 1;
    pub const fn trap_before(pc: u64) -> u64 {
        pc
    }
    pub fn is_trap(bytes: &[u8]) -> bool {
        bytes.get(..4).is_some_and(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) & 0xffe0_001f == 0xd420_0000)
    }

    /// The stack pointer after a function entered with `sp` returned (the
    /// return address was in x30: the same).
    pub const fn sp_after_return(sp: u64) -> u64 {
        sp
    }

    /// Nothing to do: on aarch64 the kernel settles a system call's
    /// restart (pc back on the `svc`, x0 its first argument again) before
    /// the thread stops for ptrace, and forgets the call's number then, so
    /// no restart happens behind registers the tracer set.
    pub fn forget_syscall(_r: &mut Regs) {}

    /// The instruction an injected system call runs at the thread's pc.
    pub fn syscall_instruction() -> &'static [u8] {
        &SVC
    }

    /// Registers for system call `nr` with `args` (the kernel's convention:
    /// number in x8, arguments in x0–x5).
    pub fn set_syscall(r: &mut Regs, nr: i64, args: [u64; 6]) {
        r.regs[8] = nr as u64;
        r.regs[..6].copy_from_slice(&args);
    }

    /// A system call's raw result (a negative errno on failure).
    pub fn syscall_result(r: &Regs) -> i64 {
        r.regs[0] as i64
    }

    /// Registers for a call of `func` with up to eight integer arguments
    /// (AAPCS64), on a stack below the thread's own, returning to `ret`
    /// (the link register). Returns where the caller must write `ret` in
    /// memory: nowhere here.
    pub fn set_call(r: &mut Regs, func: u64, args: &[u64], ret: u64) -> Option<u64> {
        r.sp = (r.sp - 256) & !15;
        r.pc = func;
        let n = args.len().min(8);
        r.regs[..n].copy_from_slice(&args[..n]);
        r.regs[abi::LR] = ret;
        None
    }

    /// An integer function result.
    pub fn call_result(r: &Regs) -> u64 {
        r.regs[0]
    }

    /// Load the registers a trampoline saved (telco-abi's `SavedRegs`
    /// words, the same order as `user_pt_regs`) into `r`.
    pub fn load_saved(r: &mut Regs, w: &[u64; abi::NREGS]) {
        r.regs.copy_from_slice(&w[..31]);
        r.sp = w[abi::SP];
        r.pc = w[abi::PC];
        r.pstate = w[abi::PSTATE];
    }

    /// The counter compiled handlers read (`rt.c`'s `read_clock`: the
    /// virtual counter, CNTVCT_EL0), which the tracer calibrates against
    /// CLOCK_REALTIME.
    pub fn clock() -> u64 {
        let v: u64;
        // SAFETY: Linux lets EL0 read the virtual counter.
        unsafe { core::arch::asm!("isb", "mrs {}, cntvct_el0", out(reg) v, options(nomem, nostack)) };
        v
    }

    /// The addresses of the instructions in `code` (at `ip`), in order:
    /// every word.
    pub fn instruction_starts(code: &[u8], ip: u64) -> Vec<u64> {
        (0..code.len() / 4).map(|i| ip + 4 * i as u64).collect()
    }

    /// The ITRC recorder's architecture (Frida's arm64 layout).
    pub type ItrcIsa = telco_itrc::a64::A64;

    /// A function's return address at its entry: the link register.
    pub fn return_address(r: &Regs, _read: &dyn Fn(u64) -> Option<u64>) -> Option<u64> {
        Some(r.regs[abi::LR])
    }

    /// A return address as a return goes there: its pointer
    /// authentication code, if it was signed, stripped (user addresses
    /// are below 2^48 here: `USER_TOP`).
    pub fn strip_return(ra: u64) -> u64 {
        ra & 0x0000_ffff_ffff_ffff
    }

    /// The register a return address may be held in between calls (the
    /// link register), which a detach must give back like a stack slot.
    pub fn link_register(r: &Regs) -> Option<u64> {
        Some(r.regs[abi::LR])
    }

    pub fn set_link_register(r: &mut Regs, v: u64) {
        r.regs[abi::LR] = v;
    }

    /// Whether `code` (at a thread's pc) starts with a return through the
    /// link register (`ret`).
    pub fn is_return(code: &[u8]) -> bool {
        code.starts_with(&0xd65f_03c0u32.to_le_bytes())
    }

    /// The ITRC register record of `r`, with the vector registers from
    /// `VECTOR_REGSET`'s bytes.
    pub fn itrc_regs_with(r: &Regs, vectors: &[u8]) -> telco_itrc::a64::A64Regs {
        let mut x = telco_itrc::a64::A64Regs::from_pt_regs(&r.regs, r.sp, r.pc, r.pstate);
        x.set_fpsimd(vectors);
        x
    }

    /// Nothing to hide: single-stepping a `svc` leaves no trace in the
    /// registers here.
    pub fn hide_step_flag_after_syscall(_r: &mut Regs, _read: &dyn Fn(u64, &mut [u8]) -> usize, _pc: u64) {}

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn saved_registers_land_in_their_fields() {
            let mut w = [0u64; abi::NREGS];
            for (i, v) in w.iter_mut().enumerate() {
                *v = 100 + i as u64;
            }
            // SAFETY: user_regs_struct is plain integers.
            let mut r: Regs = unsafe { std::mem::zeroed() };
            load_saved(&mut r, &w);
            assert_eq!(r.regs[0], 100);
            assert_eq!(r.regs[30], 100 + abi::LR as u64);
            assert_eq!((r.sp, r.pc, r.pstate), (100 + abi::SP as u64, 100 + abi::PC as u64, 100 + abi::PSTATE as u64));
        }
    }
}
