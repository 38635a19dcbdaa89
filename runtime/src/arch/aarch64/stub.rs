//! The remote-operation stub (aarch64): code in the target that runs an
//! injected system call, or receives a called function's return, and then
//! puts *every* register back by itself and goes on where the thread was.
//! The tracer watches it with `PTRACE_SYSCALL` (syscall stops only): if the
//! tracer dies at any instant, the thread finishes the operation and goes
//! on as it was (`os::ptrace`), as on x86_64 (`x86_64/stub.rs`).
//!
//! aarch64 has no branch through memory, so no sequence of loads can put
//! back all 31 registers and then jump: the last register would hold the
//! address. The stub ends with `rt_sigreturn` instead, over a signal frame
//! the tracer wrote into its block: the kernel restores every general
//! register, sp, pc, pstate, the FP/SIMD registers and the signal mask
//! from it in one step.
//!
//! ```text
//! CALL_RETURN:    mov x9, x0            ; a called function returns here
//!                 mov x8, #SYS_getpid   ; (its result kept in x9)
//! SYSCALL_AT:     svc #0                ; an injected system call starts here
//! AFTER_SYSCALL:  adr x8, BLOCK
//!                 mov sp, x8
//!                 mov x8, #SYS_rt_sigreturn
//!                 svc #0
//! BLOCK:          struct rt_sigframe (siginfo, ucontext with the registers,
//!                 an FP/SIMD record, the terminating record)
//! ```
//!
//! The stub must start 16-byte aligned (`rt_sigreturn` wants its frame
//! so). A system call the thread was interrupted in needs nothing more:
//! the kernel put its pc back on the `svc` and x0 back to its first
//! argument before the thread stopped for ptrace, so those registers
//! restart it. (One exception: a call restarted through
//! `restart_syscall`, such as a relative `nanosleep`, starts its whole
//! time again.)

use super::Regs;

/// Offsets in the stub's page.
pub const CALL_RETURN: u64 = 0;
pub const SYSCALL_AT: u64 = 8;
/// Where the thread stops after the system call (entry and exit stops).
pub const AFTER_SYSCALL: u64 = SYSCALL_AT + 4;
pub const BLOCK: u64 = 32;
/// The marker system call a called function's return makes.
pub const RETURN_MARKER: i64 = libc::SYS_getpid;
/// The register set holding the FP/SIMD registers (`NT_PRFPREG`: 32
/// 16-byte registers, fpsr, fpcr), which the resume block needs.
pub const FP_REGSET: Option<i32> = Some(2);

use super::sigframe::*;

/// Bytes the stub uses.
pub const SIZE: u64 = BLOCK + FRAME as u64;

const fn movz_x8(v: i64) -> u32 {
    0xd280_0008 | ((v as u32 & 0xffff) << 5)
}

/// The stub's code (position-independent).
pub fn code() -> Vec<u8> {
    let words: [u32; 7] = [
        0xaa00_03e9, // mov x9, x0
        movz_x8(RETURN_MARKER),
        0xd400_0001, // svc #0
        // adr x8, BLOCK (from AFTER_SYSCALL)
        0x1000_0008 | ((((BLOCK - AFTER_SYSCALL) as u32 & 3) << 29) | (((BLOCK - AFTER_SYSCALL) as u32 >> 2) << 5)),
        0x9100_011f, // mov sp, x8
        movz_x8(libc::SYS_rt_sigreturn),
        0xd400_0001, // svc #0
    ];
    let mut c: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    assert!(c.len() as u64 <= BLOCK);
    c.resize(BLOCK as usize, 0);
    c
}

/// The signal frame a thread stopped with `saved` resumes from after the
/// stub runs without the tracer: its registers, its FP/SIMD registers
/// (`fp`: `NT_PRFPREG`'s bytes) and its signal mask. The alternate
/// signal stack in the frame is left invalid (size 0), which the kernel
/// ignores: the thread's own is kept.
pub fn resume_block(saved: &Regs, fp: &[u8], sigmask: u64) -> Vec<u8> {
    let mut f = vec![0u8; FRAME];
    let mut put = |at: usize, b: &[u8]| f[at..at + b.len()].copy_from_slice(b);
    put(SIGMASK, &sigmask.to_le_bytes());
    for (i, w) in saved.regs.iter().chain([saved.sp, saved.pc, saved.pstate].iter()).enumerate() {
        put(REGS + 8 * i, &w.to_le_bytes());
    }
    put(RESERVED, &FPSIMD_MAGIC.to_le_bytes());
    put(RESERVED + 4, &(FPSIMD_SIZE as u32).to_le_bytes());
    // user_fpsimd_state: vregs[32] then fpsr, fpcr; the record: fpsr,
    // fpcr, then vregs.
    if fp.len() >= 520 {
        put(RESERVED + 8, &fp[512..520]);
        put(RESERVED + 16, &fp[..512]);
    }
    f
}

/// Registers for system call `nr` with `args` run by the stub at `stub`.
pub fn syscall_regs(saved: &Regs, stub: u64, nr: i64, args: [u64; 6]) -> Regs {
    let mut r = *saved;
    r.pc = stub + SYSCALL_AT;
    super::set_syscall(&mut r, nr, args);
    r
}

/// The entry marker (a program run to its entry point with no trap and
/// no stop at each system call of the dynamic loader): the entry branches
/// here; the registers it uses are kept in 64 bytes it takes from the
/// stack (free at a program's entry; below them a signal frame cannot
/// reach them); `ENTRY_MARKER_SIGNAL` is unblocked and sent to the thread
/// itself (`tgkill`), which a tracer sees as a signal-delivery stop at
/// `ENTRY_MARKER_AFTER` (and takes back with the thread's old mask); then
/// the old mask, the registers and the stack pointer come back, and the
/// relocated first instruction of the entry follows (then a branch back).
/// A tracer that dies leaves the program to start normally: the signal's
/// default is to be ignored (at worst a handler a preloaded library
/// installed sees one `SIGURG`), and no flags change.
pub fn entry_marker_head() -> Vec<u8> {
    let movz = |reg: u32, v: i64| 0xd280_0000 | ((v as u32 & 0xffff) << 5) | reg;
    let words: [u32; 30] = [
        0xd101_03ff,                                                    // sub sp, sp, #64
        0xa900_07e0,                                                    // stp x0, x1, [sp]
        0xa901_0fe2,                                                    // stp x2, x3, [sp, #16]
        0xf900_13e8,                                                    // str x8, [sp, #32]
        0xd2a0_0000 | ((1u32 << (ENTRY_MARKER_SIGNAL - 1)) >> 16) << 5, // movz x0, #mask, lsl #16
        0xf900_17e0,                                                    // str x0, [sp, #40]
        movz(0, 1),                                                     // mov x0, #SIG_UNBLOCK
        0x9100_a3e1,                                                    // add x1, sp, #40
        0x9100_c3e2,                                                    // add x2, sp, #48 (the old mask)
        movz(3, 8),                                                     // mov x3, #8
        movz(8, libc::SYS_rt_sigprocmask),
        0xd400_0001, // svc #0
        movz(8, libc::SYS_gettid),
        0xd400_0001, // svc #0
        0xaa00_03e1, // mov x1, x0
        movz(8, libc::SYS_getpid),
        0xd400_0001, // svc #0
        movz(2, i64::from(ENTRY_MARKER_SIGNAL)),
        movz(8, libc::SYS_tgkill),
        0xd400_0001, // svc #0
        movz(0, 2),  // mov x0, #SIG_SETMASK
        0x9100_c3e1, // add x1, sp, #48
        movz(2, 0),  // mov x2, #0
        movz(3, 8),  // mov x3, #8
        movz(8, libc::SYS_rt_sigprocmask),
        0xd400_0001, // svc #0
        0xa940_07e0, // ldp x0, x1, [sp]
        0xa941_0fe2, // ldp x2, x3, [sp, #16]
        0xf940_13e8, // ldr x8, [sp, #32]
        0x9101_03ff, // add sp, sp, #64
    ];
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// The signal the entry marker sends itself: ignored by default.
pub const ENTRY_MARKER_SIGNAL: i32 = libc::SIGURG;

/// Where the thread stops in the entry marker (after its `tgkill`).
pub const ENTRY_MARKER_AFTER: u64 = 80;

/// Where the marker keeps what it saved, from the stack pointer at its
/// stop, and how many bytes: x0, x1, x2, x3, x8, the new signal mask, the
/// old one (the stack pointer is 64 bytes lower than at the entry).
pub const ENTRY_KEPT: (i64, usize) = (0, 56);

/// At the entry marker's stop: the registers as they were at the entry
/// (from `kept`, the `ENTRY_KEPT` bytes), at `pc`, and the thread's
/// signal mask before the marker.
pub fn entry_regs(now: &Regs, kept: &[u8], pc: u64) -> (Regs, u64) {
    let word = |i: usize| kept.get(8 * i..8 * i + 8).and_then(|w| w.try_into().ok()).map_or(0, u64::from_le_bytes);
    let mut r = *now;
    (r.regs[0], r.regs[1], r.regs[2], r.regs[3], r.regs[8]) = (word(0), word(1), word(2), word(3), word(4));
    r.sp = now.sp.wrapping_add(64);
    r.pc = pc;
    (r, word(6))
}

/// A called function's result, read at the marker's system-call stop.
pub fn call_result(r: &Regs) -> u64 {
    r.regs[9]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frame_holds_the_registers_where_the_kernel_reads_them() {
        // SAFETY: user_regs_struct is plain integers.
        let mut r: Regs = unsafe { std::mem::zeroed() };
        for (i, w) in r.regs.iter_mut().enumerate() {
            *w = 1000 + i as u64;
        }
        (r.sp, r.pc, r.pstate) = (0x7ff0, 0x4000, 0x6000_0000);
        let mut fp = vec![0u8; 528];
        fp[0] = 0xaa;
        fp[512] = 0x11;
        fp[516] = 0x22;
        let f = resume_block(&r, &fp, 0x5);
        let word = |at: usize| u64::from_le_bytes(f[at..at + 8].try_into().unwrap());
        // ucontext at 128; uc_mcontext at 176 in it; regs after fault_address.
        assert_eq!(word(128 + 40), 5);
        assert_eq!(word(128 + 176 + 8), 1000);
        assert_eq!(word(128 + 176 + 8 + 30 * 8), 1030);
        assert_eq!((word(128 + 176 + 8 + 31 * 8), word(128 + 176 + 8 + 32 * 8)), (0x7ff0, 0x4000));
        assert_eq!(word(128 + 176 + 8 + 33 * 8), 0x6000_0000);
        // The FP/SIMD record at __reserved (16-aligned), then the end.
        assert_eq!(RESERVED % 16, 0);
        assert_eq!(&f[RESERVED..RESERVED + 4], &FPSIMD_MAGIC.to_le_bytes());
        assert_eq!((f[RESERVED + 8], f[RESERVED + 12], f[RESERVED + 16]), (0x11, 0x22, 0xaa));
        assert!(f[RESERVED + FPSIMD_SIZE..].iter().all(|&b| b == 0));
    }

    #[test]
    fn the_stub_finds_its_block() {
        let c = code();
        let adr = u32::from_le_bytes(c[12..16].try_into().unwrap());
        let imm = ((adr >> 5) & 0x7ffff) << 2 | (adr >> 29) & 3;
        assert_eq!(AFTER_SYSCALL + u64::from(imm), BLOCK);
        assert_eq!(BLOCK % 16, 0);
    }
}
