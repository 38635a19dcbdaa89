/* Targets for the .itrace recorders on aarch64 (tests/programs/
 * itrace_shapes.c's shapes, in A64): loops, recursion, a jump table with
 * global data, `svc` and C library calls, indirect calls, a loop back to
 * the entry, vector registers, code that modifies itself, a signal and a
 * fork inside the call, a long loop, threads. `./shapes NAME N` calls
 * NAME(N) once (threads: spin in 8 threads; timed: spin, timed) and
 * prints the result. */
#include <arm_neon.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

long table_data[8] = {3, 1, 4, 1, 5, 9, 2, 6};
volatile long ticks;

__attribute__((noinline)) long loops(long n) {
    long s = 0;
    for (long i = 0; i < n; i++)
        for (long j = 0; j < i; j++) s += (i ^ j) & 7;
    return s;
}

__attribute__((noinline)) long fib(long n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

__attribute__((noinline)) long table(long n) {
    long s = 0;
    for (long i = 0; i < n; i++) {
        switch (i % 7) {
        case 0: s += table_data[i & 7]; break;
        case 1: s -= 3; break;
        case 2: s ^= 0x55; break;
        case 3: s += i * 5; break;
        case 4: s = s * 3 + 1; break;
        case 5: s -= table_data[(i + 3) & 7]; break;
        default: s += 11; break;
        }
    }
    return s;
}

/* The C library (memset, strlen) and a system call made with `svc`. */
__attribute__((noinline)) long strings(long n) {
    char buf[256];
    long s = 0;
    for (long i = 0; i < n; i++) {
        long len = 16 + i % 64;
        memset(buf, (int)i + 1, (size_t)len);
        buf[len] = 0;
        s += (long)strlen(buf) + buf[len - 1];
        register long x8 __asm__("x8") = SYS_sched_yield;
        register long x0 __asm__("x0");
        __asm__ volatile("svc #0" : "=r"(x0) : "r"(x8) : "memory");
        s += x0 == 0;
    }
    return s;
}

__attribute__((noinline)) long twice(long x) { return 2 * x; }
__attribute__((noinline)) long thrice(long x) { return 3 * x; }
long (*volatile ops[2])(long) = {twice, thrice};

__attribute__((noinline)) long indirect(long n) {
    long s = 0;
    for (long i = 0; i < n; i++) s += ops[i & 1](i);
    return s;
}

static void on_usr1(int sig) {
    (void)sig;
    ticks++;
}

__attribute__((noinline)) long signalled(long n) {
    long s = 0;
    for (long i = 0; i < n; i++) {
        s += i;
        if (i == n / 2) kill(getpid(), SIGUSR1);
    }
    return s + ticks;
}

/* A loop back to the function's first instruction (its probe's branch is
 * then followed by a second one, and the loop's branch retargeted). */
__asm__(".text\n.globl entry_loop\n.type entry_loop,%function\n.p2align 4\nentry_loop:\n"
        "  sub x0, x0, #1\n  add x1, x1, x0\n  cbnz x0, entry_loop\n  mov x0, #42\n  ret\n"
        ".size entry_loop, .-entry_loop\n");
long entry_loop(long n);

__attribute__((noinline)) long spin(long n) {
    long a = 0, b = 1;
    for (long i = 0; i < n; i++) {
        a += i;
        b ^= a;
        __asm__ volatile("" : "+r"(a), "+r"(b));
    }
    return a + b;
}

/* Vector registers (Advanced SIMD): recorded as `v0`… values. */
__attribute__((noinline)) long vectors(long n) {
    int32x4_t acc = vdupq_n_s32(1);
    for (long i = 0; i < n; i++) acc = vaddq_s32(vmulq_s32(acc, vdupq_n_s32(3)), vdupq_n_s32((int)i));
    return (long)vaddvq_s32(acc);
}

/* Code that modifies itself: a function in a fresh page (`mov w0, #1;
 * ret`) called, changed (`mov w0, #2`), and called again, n times. */
__attribute__((noinline)) long rewrite(long n) {
    unsigned int *page = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return -1;
    long s = 0;
    for (long i = 0; i < n; i++) {
        page[0] = 0x52800020;
        page[1] = 0xd65f03c0;
        __builtin___clear_cache((char *)page, (char *)(page + 2));
        long (*volatile f)(void) = (long (*)(void))page;
        s = s * 10 + f();
        page[0] = 0x52800040;
        __builtin___clear_cache((char *)page, (char *)(page + 1));
        s = s * 10 + f();
    }
    munmap(page, 4096);
    return s;
}

/* A fork inside the call: the child (which leaves the code cache at once)
 * computes and exits with its result; the parent adds it to its own. */
__attribute__((noinline)) long forked(long n) {
    pid_t pid = fork();
    if (pid == 0) _exit((int)(loops(n) & 0x7f));
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status) + 1000 * loops(n);
}

/* Threads: each of 8 calls spin once. */
static long results[8];
static void *thread_main(void *arg) {
    long k = (long)arg;
    results[k] = spin(1000 + k);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    long n = atol(argv[2]);
    signal(SIGUSR1, on_usr1);
    long r;
    if (!strcmp(argv[1], "loops")) r = loops(n);
    else if (!strcmp(argv[1], "fib")) r = fib(n);
    else if (!strcmp(argv[1], "table")) r = table(n);
    else if (!strcmp(argv[1], "strings")) r = strings(n);
    else if (!strcmp(argv[1], "indirect")) r = indirect(n);
    else if (!strcmp(argv[1], "signalled")) r = signalled(n);
    else if (!strcmp(argv[1], "spin")) r = spin(n);
    else if (!strcmp(argv[1], "entry_loop")) r = entry_loop(n);
    else if (!strcmp(argv[1], "rewrite")) r = rewrite(n);
    else if (!strcmp(argv[1], "vectors")) r = vectors(n);
    else if (!strcmp(argv[1], "forked")) r = forked(n);
    else if (!strcmp(argv[1], "timed")) {
        /* The bench (tests/aarch64/bench.sh): spin(n)'s own time. */
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        r = spin(n);
        clock_gettime(CLOCK_MONOTONIC, &b);
        printf("call %.3f ms\n", (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6);
    }
    else if (!strcmp(argv[1], "threads")) {
        pthread_t t[8];
        for (long k = 0; k < 8; k++) pthread_create(&t[k], 0, thread_main, (void *)k);
        r = 0;
        for (long k = 0; k < 8; k++) pthread_join(t[k], 0), r += results[k];
    } else return 2;
    printf("%ld\n", r);
    return 0;
}
