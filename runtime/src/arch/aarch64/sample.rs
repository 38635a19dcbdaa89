//! aarch64's part of `timer.profile`: which user registers a perf sample
//! carries and where each goes in our register file (the same numbering:
//! `arch/arm64/include/uapi/asm/perf_regs.h` is x0–x30, sp, pc), and the
//! CFI unwinder (framehop's) with the registers it starts from.

use telco_abi::arch::aarch64 as r;
use telco_abi::region::SavedRegs;

/// (perf's register number, our word), in perf's order.
pub const PERF_USER_REGS: [(u32, usize); 33] = {
    let mut m = [(0u32, 0usize); 33];
    let mut i = 0;
    while i < 33 {
        m[i] = (i as u32, i);
        i += 1;
    }
    m
};

/// framehop's unwinder for this architecture, over section bytes `D`.
pub type Unwinder<D> = framehop::aarch64::UnwinderAarch64<D>;
/// Its rule cache.
pub type Cache = framehop::aarch64::CacheAarch64;

/// The pc, the stack pointer and the registers the unwinder starts from
/// (the link register counts in a leaf function's first frame).
pub fn unwind_start(regs: &SavedRegs) -> (u64, u64, framehop::aarch64::UnwindRegsAarch64) {
    let (pc, sp, fp, lr) = (regs.words[r::PC], regs.words[r::SP], regs.words[r::FP], regs.words[r::LR]);
    (pc, sp, framehop::aarch64::UnwindRegsAarch64::new(lr, sp, fp))
}

/// The system calls a thread may block in, by number (a wait's name when
/// the kernel's symbols do not give it).
pub const BLOCKING_SYSCALLS: &[(u64, &str)] = &[
    (4, "io_getevents"),
    (22, "epoll_pwait"),
    (32, "flock"),
    (56, "openat"),
    (63, "read"),
    (64, "write"),
    (65, "readv"),
    (66, "writev"),
    (67, "pread64"),
    (68, "pwrite64"),
    (71, "sendfile"),
    (72, "pselect6"),
    (73, "ppoll"),
    (76, "splice"),
    (82, "fsync"),
    (83, "fdatasync"),
    (95, "waitid"),
    (98, "futex"),
    (101, "nanosleep"),
    (115, "clock_nanosleep"),
    (124, "sched_yield"),
    (133, "rt_sigsuspend"),
    (137, "rt_sigtimedwait"),
    (183, "mq_timedreceive"),
    (188, "msgrcv"),
    (192, "semtimedop"),
    (193, "semop"),
    (202, "accept"),
    (203, "connect"),
    (206, "sendto"),
    (207, "recvfrom"),
    (211, "sendmsg"),
    (212, "recvmsg"),
    (242, "accept4"),
    (243, "recvmmsg"),
    (260, "wait4"),
    (426, "io_uring_enter"),
    (441, "epoll_pwait2"),
    (449, "futex_waitv"),
];

/// The system call a thread entered (`code`, the 8 bytes before its pc,
/// ending in `svc #0`): its number stays in x8.
pub fn syscall_number(regs: &SavedRegs, code: &[u8]) -> Option<u64> {
    code.ends_with(&[0x01, 0x00, 0x00, 0xd4]).then_some(regs.words[8])
}

/// The signal-return trampoline a handler returns to (glibc's
/// `__restore_rt`: `mov x8, #139; svc #0`, rt_sigreturn).
pub const SIGRETURN: [u8; 8] = super::patch::SIGRETURN;

/// Where the interrupted thread's x29, sp and pc are saved, from the stack
/// pointer at the signal trampoline: the `rt_sigframe` there (siginfo,
/// then the ucontext, whose `uc_mcontext` is at 176: fault_address, then
/// x0–x30, sp, pc).
pub const SIGFRAME_REGS: [u64; 3] = [128 + 176 + 8 + 8 * 29, 128 + 176 + 8 + 8 * 31, 128 + 176 + 8 + 8 * 32];

/// The registers the unwinder starts from at (pc, sp, fp), past a frame
/// whose link register is unknown.
pub fn unwind_regs(pc: u64, sp: u64, fp: u64) -> framehop::aarch64::UnwindRegsAarch64 {
    unwind_regs_lr(pc, sp, fp, None)
}

/// [`unwind_regs`] with the link register, where known (at a function's
/// entry, out of its entry trampoline: what it returns through).
pub fn unwind_regs_lr(_pc: u64, sp: u64, fp: u64, lr: Option<u64>) -> framehop::aarch64::UnwindRegsAarch64 {
    framehop::aarch64::UnwindRegsAarch64::new(lr.unwrap_or(0), sp, fp)
}

/// The unwinder's stack pointer.
pub fn unwind_sp(r: &framehop::aarch64::UnwindRegsAarch64) -> u64 {
    r.sp()
}

/// The unwinder's frame pointer.
pub fn unwind_fp(r: &framehop::aarch64::UnwindRegsAarch64) -> u64 {
    r.fp()
}

/// A ptrace register file as our register file (the same order).
pub fn saved_from(x: &super::Regs) -> SavedRegs {
    let mut w = [0u64; r::NREGS];
    w[..31].copy_from_slice(&x.regs);
    (w[r::SP], w[r::PC], w[r::PSTATE]) = (x.sp, x.pc, x.pstate);
    SavedRegs { words: w }
}

/// Whether the thread was stopped in a system call: ptrace's register set
/// does not say on aarch64 (the kernel forgets the call's number before
/// the stop), so never.
pub fn in_syscall(_r: &super::Regs) -> bool {
    false
}

/// Kernel addresses (the upper half).
pub fn is_kernel_address(a: u64) -> bool {
    a >> 63 == 1
}
