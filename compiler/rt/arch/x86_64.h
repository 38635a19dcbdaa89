/*
 * x86_64 (Linux, System V) for the runtime library: the few lines of
 * rt.c that depend on the architecture. Another architecture provides the
 * same names in its own header beside this one (build.rs picks it).
 */
#pragma once

/* Busy-wait hint. */
#define cpu_relax() __asm__ volatile("pause" ::: "memory")

/* The cycle counter the tracer calibrates (Header::tsc_mult). */
LOCAL u64 read_clock(void) {
    u32 lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return ((u64)hi << 32) | lo;
}

/* The CPU this thread runs on: Linux keeps it in TSC_AUX. */
LOCAL i64 current_cpu(void) {
    u32 lo, hi, aux;
    __asm__ volatile("rdtscp" : "=a"(lo), "=d"(hi), "=c"(aux));
    return aux & 0xfff;
}

/* Fetch a cache line for writing. */
#define prefetch_for_write(p) __asm__ volatile("prefetchw %0" ::"m"(*(const u8 *)(p)))

/* The thread pointer: %fs:0 holds its own address (x86_64 TLS ABI). */
LOCAL u64 thread_pointer(void) {
    u64 tp;
    __asm__ volatile("mov %%fs:0, %0" : "=r"(tp));
    return tp;
}

/* The thread pointer as the kernel has it, 0 when the thread has none
 * yet (a static program at its entry: reading %fs:0 would fault) or on
 * error; safe when the thread's own %fs:0 is smashed. */
LOCAL i64 sys6(i64 nr, i64 a, i64 b, i64 c, i64 d, i64 e, i64 f);
LOCAL u64 kernel_thread_pointer(void) {
    u64 fs = 0;
    if (sys6(158 /* arch_prctl */, 0x1003 /* ARCH_GET_FS */, (i64)&fs, 0, 0, 0, 0) != 0) return 0;
    return fs;
}

/* A system call with up to six arguments. */
LOCAL i64 sys6(i64 nr, i64 a, i64 b, i64 c, i64 d, i64 e, i64 f) {
    i64 ret;
    register i64 r10 __asm__("r10") = d;
    register i64 r8 __asm__("r8") = e;
    register i64 r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}

/* Return addresses are not signed on x86_64 (aarch64.h signs them). */
LOCAL u64 sign_return(u64 addr, u64 slot, u32 how) {
    (void)slot;
    (void)how;
    return addr;
}

/* System call numbers. */
#define SYS_read 0
#define SYS_close 3
#define SYS_openat 257
#define SYS_rt_sigaction 13
#define SYS_sched_yield 24
#define SYS_futex 202
#define SYS_getpid 39
#define SYS_getuid 102
#define SYS_getppid 110
#define SYS_prctl 157
#define SYS_gettid 186
#define SYS_tgkill 234
#define SYS_process_vm_readv 310
#define SYS_process_vm_writev 311
#define SYS_rt_sigprocmask 14

/* Where a trap probe's `int3` leaves the pc: just after it (rt_trap). */
#define TRAP_PC_ADJ 1

/* A signal handler's ucontext_t: the interrupted pc and stack pointer
 * (uc_mcontext.gregs at 40: REG_RIP 16, REG_RSP 15). */
#define UC_PC(uc) AT(uc, 40 + 16 * 8, u64)
#define UC_SP(uc) AT(uc, 40 + 15 * 8, u64)
