/*
 * aarch64 (Linux, AAPCS64) for the runtime library: the same names as
 * x86_64.h beside this file (build.rs picks the target's).
 */
#pragma once

/* Busy-wait hint. */
#define cpu_relax() __asm__ volatile("yield" ::: "memory")

/* The counter the tracer calibrates (Header::tsc_mult): the virtual
 * counter, readable at EL0 on Linux (CNTVCT_EL0). The isb keeps the read
 * from being taken before earlier instructions, as rdtsc's ordering is
 * relied on nowhere stronger. */
LOCAL u64 read_clock(void) {
    u64 v;
    __asm__ volatile("isb\n\tmrs %0, cntvct_el0" : "=r"(v)::"memory");
    return v;
}

/* Fetch a cache line for writing. */
#define prefetch_for_write(p) __asm__ volatile("prfm pstl1keep, %0" ::"Q"(*(const u8 *)(p)))

/* The thread pointer (TPIDR_EL0: the C library's thread control block). */
LOCAL u64 thread_pointer(void) {
    u64 tp;
    __asm__ volatile("mrs %0, tpidr_el0" : "=r"(tp));
    return tp;
}

/* The thread pointer as the kernel has it, 0 when the thread has none yet
 * (a static program at its entry): reading TPIDR_EL0 never faults. */
LOCAL u64 kernel_thread_pointer(void) {
    return thread_pointer();
}

/* A system call with up to six arguments (`svc #0`, number in x8). */
LOCAL i64 sys6(i64 nr, i64 a, i64 b, i64 c, i64 d, i64 e, i64 f) {
    register i64 x8 __asm__("x8") = nr;
    register i64 x0 __asm__("x0") = a;
    register i64 x1 __asm__("x1") = b;
    register i64 x2 __asm__("x2") = c;
    register i64 x3 __asm__("x3") = d;
    register i64 x4 __asm__("x4") = e;
    register i64 x5 __asm__("x5") = f;
    __asm__ volatile("svc #0"
                     : "+r"(x0)
                     : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
                     : "memory");
    return x0;
}

/* The CPU this thread runs on (no user-readable register holds it on
 * aarch64: getcpu). */
LOCAL i64 current_cpu(void) {
    u32 cpu = 0;
    if (sys6(168 /* getcpu */, (i64)&cpu, 0, 0, 0, 0, 0) != 0) return -1;
    return cpu;
}

/* A return address signed as a function's `paciasp` (key A, `how` 1) or
 * `pacibsp` (key B, 2) signed the one it was entered with: the modifier is
 * the stack pointer at its entry, 8 above a return probe's slot (entry sp -
 * 8). PACIA1716 and PACIB1716 are hints, no-ops on a core without pointer
 * authentication; `how` 0: not signed. */
LOCAL u64 sign_return(u64 addr, u64 slot, u32 how) {
    register u64 x17 __asm__("x17") = addr;
    register u64 x16 __asm__("x16") = slot + 8;
    if (how == 1) __asm__ volatile("hint #8" : "+r"(x17) : "r"(x16));
    if (how == 2) __asm__ volatile("hint #10" : "+r"(x17) : "r"(x16));
    return x17;
}

/* System call numbers (the generic table). */
#define SYS_read 63
#define SYS_close 57
#define SYS_openat 56
#define SYS_rt_sigaction 134
#define SYS_sched_yield 124
#define SYS_futex 98
#define SYS_getpid 172
#define SYS_getuid 174
#define SYS_getppid 173
#define SYS_prctl 167
#define SYS_gettid 178
#define SYS_tgkill 131
#define SYS_process_vm_readv 270
#define SYS_process_vm_writev 271
#define SYS_rt_sigprocmask 135

/* Where a trap probe's `brk` leaves the pc: on it (rt_trap). */
#define TRAP_PC_ADJ 0

/* A signal handler's ucontext_t: the interrupted pc and stack pointer
 * (uc_mcontext at 176: fault_address, regs[31], sp, pc, pstate). */
#define UC_PC(uc) AT(uc, 176 + 8 + 32 * 8, u64)
#define UC_SP(uc) AT(uc, 176 + 8 + 31 * 8, u64)
