//! x86_64: probe placement, trampolines, clobber analysis, and the
//! register-level side of ptrace (which `user_regs_struct` field is the
//! program counter, how an injected system call or call is set up).

pub mod blocks;
pub mod clobber;
pub mod frames;
pub mod patch;
pub mod sample;
pub mod stub;
pub mod trampoline;

use telco_abi::arch::x86_64 as abi;

/// A stopped thread's registers as ptrace gives them.
pub type Regs = libc::user_regs_struct;

/// The register set of the vector registers (`NT_X86_XSTATE`: XSAVE's
/// layout), for `.itrace`'s single-stepper.
pub const VECTOR_REGSET: Option<i32> = Some(0x202);

/// The end of user address space (47-bit addresses), less a page.
pub const USER_TOP: u64 = 0x7fff_ffff_f000;

/// The architecture's name, as users read it.
pub const NAME: &str = "x86_64";
/// The ELF header's `e_machine` of its programs (64-bit).
pub const ELF_MACHINE: u16 = 62;

/// The trap instruction (`int3`), and what fills dead bytes.
pub const TRAP: u8 = 0xcc;
pub const TRAP_INSN: [u8; 1] = [TRAP];
/// A trap probe's patch (`int3` too: `rt_trap` tells it from the
/// program's own by its address).
pub const TRAP_PROBE: [u8; 1] = [TRAP];

/// `len` bytes of trap instructions.
pub fn trap_fill(len: usize) -> Vec<u8> {
    vec![TRAP; len]
}

/// The sandbox's seccomp filter (`os::sandbox`): this architecture's
/// `AUDIT_ARCH_*`, and the system calls the runtime library makes here
/// beyond the common ones (`arch_prctl(ARCH_GET_FS)`: the thread pointer).
pub const AUDIT_ARCH: u32 = 0xc000_003e;
pub const SANDBOX_SYSCALLS: &[i64] = &[libc::SYS_arch_prctl];
/// `syscall`.
const SYSCALL: [u8; 2] = [0x0f, 0x05];
/// Bytes an injected system call overwrites at the thread's pc.
pub const SYSCALL_LEN: usize = SYSCALL.len();

/// The program counter.
pub fn pc(r: &Regs) -> u64 {
    r.rip
}

pub fn set_pc(r: &mut Regs, pc: u64) {
    r.rip = pc;
}

/// The stack pointer.
pub fn sp(r: &Regs) -> u64 {
    r.rsp
}

/// The thread pointer is in the general registers (`fs_base`): no other
/// register set to read.
pub const TLS_REGSET: Option<i32> = None;

/// The thread pointer (TLS base), as the kernel keeps it.
pub fn thread_pointer(r: &Regs, _tls: Option<&[u8]>) -> u64 {
    r.fs_base
}

/// Where the C library's thread control block may hold the thread's id,
/// from the thread pointer: `struct pthread` starts at it (TLS variant II).
pub const TCB_WINDOW: i64 = 0;

/// The pc after a trap at `at` has stopped the thread (past the `int3`).
pub const fn pc_after_trap(at: u64) -> u64 {
    at + 1
}

/// A thread stopped with the SIGTRAP of a trap instruction (`si_code`
/// `TRAP_SI_CODE`) at `pc`: where that instruction would be, and whether
/// `bytes` (read there) are one (`int3`).
pub const TRAP_SI_CODE: i32 = 0x80;
pub const fn trap_before(pc: u64) -> u64 {
    pc.wrapping_sub(1)
}
pub fn is_trap(bytes: &[u8]) -> bool {
    bytes.first() == Some(&TRAP)
}

/// The stack pointer after a function entered with `sp` returned (the
/// return address popped).
pub const fn sp_after_return(sp: u64) -> u64 {
    sp + 8
}

/// Not in a system call any more: nothing for the kernel to restart when
/// the thread resumes with these registers.
pub fn forget_syscall(r: &mut Regs) {
    r.orig_rax = u64::MAX;
}

/// The instruction an injected system call runs at the thread's pc.
pub fn syscall_instruction() -> &'static [u8] {
    &SYSCALL
}

/// Registers for system call `nr` with `args` (the kernel's convention).
pub fn set_syscall(r: &mut Regs, nr: i64, args: [u64; 6]) {
    r.rax = nr as u64;
    forget_syscall(r);
    (r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9) = (args[0], args[1], args[2], args[3], args[4], args[5]);
}

/// A system call's raw result (a negative errno on failure).
pub fn syscall_result(r: &Regs) -> i64 {
    r.rax as i64
}

/// Registers for a call of `func` with up to six integer arguments (System
/// V), on a stack below the thread's own and its red zone, returning to
/// `ret`. Returns where the caller must write `ret` in memory (the new
/// stack pointer); the result is read with [`call_result`].
pub fn set_call(r: &mut Regs, func: u64, args: &[u64], _ret: u64) -> Option<u64> {
    let sp = (r.rsp - 256) & !15;
    // The return address, as a `call` would push it (rsp % 16 == 8 at entry).
    r.rsp = sp - 8;
    r.rip = func;
    forget_syscall(r);
    r.rax = 0;
    let mut a = [0u64; 6];
    a[..args.len().min(6)].copy_from_slice(&args[..args.len().min(6)]);
    (r.rdi, r.rsi, r.rdx, r.rcx, r.r8, r.r9) = (a[0], a[1], a[2], a[3], a[4], a[5]);
    Some(r.rsp)
}

/// An integer function result.
pub fn call_result(r: &Regs) -> u64 {
    r.rax
}

/// Load the registers a trampoline saved (telco-abi's `SavedRegs` words)
/// into `r`; the pc is set apart.
pub fn load_saved(r: &mut Regs, w: &[u64; abi::NREGS]) {
    (r.rax, r.rbx, r.rcx, r.rdx) = (w[abi::RAX], w[abi::RBX], w[abi::RCX], w[abi::RDX]);
    (r.rsi, r.rdi, r.rbp, r.rsp) = (w[abi::RSI], w[abi::RDI], w[abi::RBP], w[abi::RSP]);
    (r.r8, r.r9, r.r10, r.r11) = (w[abi::R8], w[abi::R9], w[abi::R10], w[abi::R11]);
    (r.r12, r.r13, r.r14, r.r15) = (w[12], w[13], w[14], w[15]);
    r.eflags = w[abi::RFLAGS];
}

/// The cycle counter (TSC), which the tracer calibrates against
/// CLOCK_REALTIME and compiled handlers read (`rt.c`'s `read_clock`).
pub fn clock() -> u64 {
    // SAFETY: rdtsc is available on every x86_64 CPU.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// The addresses of the instructions in `code` (at `ip`), in order.
pub fn instruction_starts(code: &[u8], ip: u64) -> Vec<u64> {
    use iced_x86::{Decoder, DecoderOptions};
    Decoder::with_ip(64, code, ip, DecoderOptions::NONE).into_iter().map(|i| i.ip()).collect()
}

/// The ITRC recorder's architecture.
pub type ItrcIsa = telco_itrc::X64;

/// A function's return address at its entry (registers `r`): the word at
/// the stack pointer.
pub fn return_address(r: &Regs, read: &dyn Fn(u64) -> Option<u64>) -> Option<u64> {
    read(r.rsp)
}

/// A return address as a return goes there: as it is (no pointer
/// authentication code on x86_64).
pub fn strip_return(ra: u64) -> u64 {
    ra
}

/// The register a return address may be held in between calls: none on
/// x86_64 (a call pushes it).
pub fn link_register(_r: &Regs) -> Option<u64> {
    None
}

pub fn set_link_register(_r: &mut Regs, _v: u64) {}

/// Whether `code` (at a thread's pc) starts with a return (`ret`).
pub fn is_return(code: &[u8]) -> bool {
    code.first() == Some(&0xc3)
}

/// The ITRC file format's x86_64 register record of `r`.
/// [`itrc_regs`] with the vector registers from `VECTOR_REGSET`'s bytes.
pub fn itrc_regs_with(r: &Regs, vectors: &[u8]) -> telco_itrc::x64::X64Regs {
    let mut x = itrc_regs(r);
    x.set_xstate(vectors);
    x
}

pub fn itrc_regs(r: &Regs) -> telco_itrc::x64::X64Regs {
    telco_itrc::x64::X64Regs::from(r)
}

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
        for (name, v) in [("rax", r.rax), ("rbx", r.rbx), ("rcx", r.rcx), ("rdx", r.rdx), ("rsi", r.rsi)] {
            assert_eq!(v, 100 + abi::register_index(name).unwrap() as u64, "{name}");
        }
        for (name, v) in [("rdi", r.rdi), ("rbp", r.rbp), ("rsp", r.rsp), ("r8", r.r8), ("r15", r.r15)] {
            assert_eq!(v, 100 + abi::register_index(name).unwrap() as u64, "{name}");
        }
        assert_eq!(r.eflags, 100 + abi::RFLAGS as u64);
    }
}

/// After a single-stepped `syscall` at `pc`, r11 holds the flags the
/// kernel saved, with the trap flag the single-stepping set: the program
/// running freely would have it clear.
pub fn hide_step_flag_after_syscall(r: &mut Regs, read: &dyn Fn(u64, &mut [u8]) -> usize, pc: u64) {
    let mut b = [0u8; 2];
    if read(pc, &mut b) == 2 && b == SYSCALL {
        r.r11 &= !0x100;
    }
}
