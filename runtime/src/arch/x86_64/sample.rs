//! x86_64's part of `timer.profile`: which user registers a perf sample
//! carries and where each goes in our register file, and the CFI unwinder
//! (framehop's) with the registers it starts from.

use telco_abi::arch::x86_64 as r;
use telco_abi::region::SavedRegs;

/// (perf's register number, our word), in perf's order (the order a
/// sample lists them in; `arch/x86/include/uapi/asm/perf_regs.h`).
pub const PERF_USER_REGS: [(u32, usize); 18] = [
    (0, r::RAX),
    (1, r::RBX),
    (2, r::RCX),
    (3, r::RDX),
    (4, r::RSI),
    (5, r::RDI),
    (6, r::RBP),
    (7, r::RSP),
    (8, r::RIP),
    (9, r::RFLAGS),
    (16, r::R8),
    (17, r::R9),
    (18, r::R10),
    (19, r::R11),
    (20, 12),
    (21, 13),
    (22, 14),
    (23, 15),
];

/// framehop's unwinder for this architecture, over section bytes `D`.
pub type Unwinder<D> = framehop::x86_64::UnwinderX86_64<D>;
/// Its rule cache.
pub type Cache = framehop::x86_64::CacheX86_64;

/// The pc, the stack pointer and the registers the unwinder starts from.
pub fn unwind_start(regs: &SavedRegs) -> (u64, u64, framehop::x86_64::UnwindRegsX86_64) {
    let (pc, sp, fp) = (regs.words[r::RIP], regs.words[r::RSP], regs.words[r::RBP]);
    (pc, sp, framehop::x86_64::UnwindRegsX86_64::new(pc, sp, fp))
}

/// The system calls a thread may block in, by number (a wait's name when
/// the kernel's symbols do not give it).
pub const BLOCKING_SYSCALLS: &[(u64, &str)] = &[
    (0, "read"),
    (1, "write"),
    (7, "poll"),
    (17, "pread64"),
    (18, "pwrite64"),
    (19, "readv"),
    (20, "writev"),
    (23, "select"),
    (24, "sched_yield"),
    (34, "pause"),
    (35, "nanosleep"),
    (40, "sendfile"),
    (42, "connect"),
    (43, "accept"),
    (44, "sendto"),
    (45, "recvfrom"),
    (46, "sendmsg"),
    (47, "recvmsg"),
    (61, "wait4"),
    (65, "semop"),
    (70, "msgrcv"),
    (73, "flock"),
    (74, "fsync"),
    (75, "fdatasync"),
    (128, "rt_sigtimedwait"),
    (130, "rt_sigsuspend"),
    (202, "futex"),
    (208, "io_getevents"),
    (220, "semtimedop"),
    (230, "clock_nanosleep"),
    (232, "epoll_wait"),
    (243, "mq_timedreceive"),
    (247, "waitid"),
    (257, "openat"),
    (270, "pselect6"),
    (271, "ppoll"),
    (275, "splice"),
    (281, "epoll_pwait"),
    (288, "accept4"),
    (299, "recvmmsg"),
    (426, "io_uring_enter"),
    (441, "epoll_pwait2"),
    (449, "futex_waitv"),
];

/// The system call a thread entered at `pc` (just after its `syscall`
/// instruction; `code` the 8 bytes before `pc`): the number a
/// `mov $N, %eax` (or `xor %eax, %eax`) just before it loads. The kernel
/// has replaced rax by then; glibc's wrappers and inlined calls load it
/// this way.
pub fn syscall_number(_regs: &SavedRegs, code: &[u8]) -> Option<u64> {
    match code {
        [_, 0xb8, a, b, c, d, 0x0f, 0x05] => Some(u64::from(u32::from_le_bytes([*a, *b, *c, *d]))),
        [.., 0x31, 0xc0, 0x0f, 0x05] => Some(0),
        _ => None,
    }
}

/// The signal-return trampoline a handler returns to (glibc's
/// `__restore_rt`: `mov $15, %rax; syscall`, rt_sigreturn).
pub const SIGRETURN: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];

/// Where the interrupted thread's rbp, rsp and rip are saved, from the
/// stack pointer at the signal trampoline: the `ucontext_t` there
/// (`uc_mcontext.gregs` at 40; REG_RBP 10, REG_RSP 15, REG_RIP 16).
pub const SIGFRAME_REGS: [u64; 3] = [40 + 8 * 10, 40 + 8 * 15, 40 + 8 * 16];

/// The registers the unwinder starts from at (pc, sp, fp).
pub fn unwind_regs(pc: u64, sp: u64, fp: u64) -> framehop::x86_64::UnwindRegsX86_64 {
    framehop::x86_64::UnwindRegsX86_64::new(pc, sp, fp)
}

/// [`unwind_regs`]: x86_64 has no link register.
pub fn unwind_regs_lr(pc: u64, sp: u64, fp: u64, _lr: Option<u64>) -> framehop::x86_64::UnwindRegsX86_64 {
    unwind_regs(pc, sp, fp)
}

/// The unwinder's stack pointer.
pub fn unwind_sp(r: &framehop::x86_64::UnwindRegsX86_64) -> u64 {
    r.sp()
}

/// The unwinder's frame pointer.
pub fn unwind_fp(r: &framehop::x86_64::UnwindRegsX86_64) -> u64 {
    r.bp()
}

/// A ptrace register file as our register file (the fallback sampler's
/// samples).
pub fn saved_from(r: &super::Regs) -> SavedRegs {
    let mut w = [0u64; r::NREGS];
    (w[r::RAX], w[r::RBX], w[r::RCX], w[r::RDX]) = (r.rax, r.rbx, r.rcx, r.rdx);
    (w[r::RSI], w[r::RDI], w[r::RBP], w[r::RSP]) = (r.rsi, r.rdi, r.rbp, r.rsp);
    (w[r::R8], w[r::R9], w[r::R10], w[r::R11]) = (r.r8, r.r9, r.r10, r.r11);
    (w[12], w[13], w[14], w[15]) = (r.r12, r.r13, r.r14, r.r15);
    (w[r::RIP], w[r::RFLAGS]) = (r.rip, r.eflags);
    SavedRegs { words: w }
}

/// The thread was stopped in a system call (it entered the kernel by
/// one: `orig_rax` holds its number, -1 otherwise).
pub fn in_syscall(r: &super::Regs) -> bool {
    (r.orig_rax as i64) >= 0
}

/// Kernel addresses (the upper half): a sample's pc there was taken in
/// the kernel.
pub fn is_kernel_address(a: u64) -> bool {
    a >> 63 == 1
}
