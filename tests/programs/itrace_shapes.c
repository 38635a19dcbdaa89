/* Targets for the .itrace recorders, on x86_64 (tests/itrace.rs) and on
 * aarch64 (tests/aarch64/guest.sh): each function a shape of code the
 * block tracer translates (loops, recursion, a jump table with global
 * data, string instructions or the C library's, a system call, indirect
 * calls, a loop back to the entry, vector registers, code that modifies
 * itself, a signal and a fork inside the call, the C library at length,
 * a long loop, threads).
 * `./itrace_shapes NAME N` calls NAME(N) once (threads: spin in 8
 * threads; timed: spin, timed) and prints the result. */
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
#if defined(__x86_64__)
#include <emmintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

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

#if defined(__x86_64__)
/* `rep stosb` and a `syscall`. */
__attribute__((noinline)) long strings(long n) {
    char buf[256];
    long s = 0;
    for (long i = 0; i < n; i++) {
        long len = 16 + i % 64;
        void *d = buf;
        long c = len;
        __asm__ volatile("rep stosb" : "+D"(d), "+c"(c) : "a"(i) : "memory");
        s += buf[len - 1];
        long r;
        __asm__ volatile("syscall" : "=a"(r) : "a"(SYS_sched_yield) : "rcx", "r11", "memory");
        s += r == 0;
    }
    return s;
}
#else
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
#endif

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

/* A loop back to the function's first instruction (its probe's jump is
 * then followed by a second one, and the loop's branch retargeted). */
#if defined(__x86_64__)
__asm__(".text\n.globl entry_loop\n.type entry_loop,@function\n.p2align 4\nentry_loop:\n"
        "  sub $1, %rdi\n  jnz entry_loop\n  mov $42, %eax\n  ret\n.size entry_loop, .-entry_loop\n");
#else
__asm__(".text\n.globl entry_loop\n.type entry_loop,%function\n.p2align 4\nentry_loop:\n"
        "  sub x0, x0, #1\n  add x1, x1, x0\n  cbnz x0, entry_loop\n  mov x0, #42\n  ret\n"
        ".size entry_loop, .-entry_loop\n");
#endif
long entry_loop(long n);

__attribute__((noinline)) long spin(long n) {
    long a = 0, b = 1;
    for (long i = 0; i < n; i++) {
        a += i;
        b ^= a;
#if defined(__aarch64__)
        __asm__ volatile("" : "+r"(a), "+r"(b));
#endif
    }
    return a + b;
}

#if defined(__x86_64__)
/* Vector registers (SSE2, which every x86_64 has): their writes are
 * recorded as `ymm` values. */
__attribute__((noinline)) long vectors(long n) {
    __m128i acc = _mm_set1_epi32(1);
    for (long i = 0; i < n; i++) acc = _mm_add_epi32(_mm_mullo_epi16(acc, _mm_set1_epi32(3)), _mm_set1_epi32((int)i));
    int out[4];
    _mm_storeu_si128((__m128i *)out, acc);
    return (long)out[0] + out[1] + out[2] + out[3];
}
#else
/* Vector registers (Advanced SIMD): recorded as `v0`… values. */
__attribute__((noinline)) long vectors(long n) {
    int32x4_t acc = vdupq_n_s32(1);
    for (long i = 0; i < n; i++) acc = vaddq_s32(vmulq_s32(acc, vdupq_n_s32(3)), vdupq_n_s32((int)i));
    return (long)vaddvq_s32(acc);
}
#endif

/* Code that modifies itself: a function in a fresh page (`mov eax, 1;
 * ret`, on aarch64 `mov w0, #1; ret`) called, changed (to return 2), and
 * called again, n times. */
__attribute__((noinline)) long rewrite(long n) {
    unsigned char *page = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return -1;
    long s = 0;
    for (long i = 0; i < n; i++) {
#if defined(__x86_64__)
        unsigned char code[] = {0xb8, 1, 0, 0, 0, 0xc3};
        memcpy(page, code, sizeof code);
#else
        unsigned int code[] = {0x52800020, 0xd65f03c0};
        memcpy(page, code, sizeof code);
        __builtin___clear_cache((char *)page, (char *)page + sizeof code);
#endif
        long (*volatile f)(void) = (long (*)(void))page;
        s = s * 10 + f();
#if defined(__x86_64__)
        page[1] = 2;
#else
        code[0] = 0x52800040;
        memcpy(page, code, 4);
        __builtin___clear_cache((char *)page, (char *)page + 4);
#endif
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

static int by_value(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

/* The C library at length: formatted output, sorting through a callback,
 * the allocator. */
__attribute__((noinline)) long libc(long n) {
    long *v = malloc((size_t)n * sizeof *v);
    if (!v) return -1;
    char buf[64];
    long s = 0;
    for (long i = 0; i < n; i++) {
        v[i] = (i * 7919) % 1009;
        s += snprintf(buf, sizeof buf, "%ld:%05.2f:%s", v[i], (double)i / 3, i % 2 ? "odd" : "even");
    }
    qsort(v, (size_t)n, sizeof *v, by_value);
    for (long i = 0; i < n; i++) s = s * 31 + v[i];
    free(v);
    return s;
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
    else if (!strcmp(argv[1], "libc")) r = libc(n);
    else if (!strcmp(argv[1], "timed")) {
        /* The bench (tests/aarch64/bench.sh): spin(n)'s own time. */
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        r = spin(n);
        clock_gettime(CLOCK_MONOTONIC, &b);
        printf("call %.3f ms\n", (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6);
    } else if (!strcmp(argv[1], "threads")) {
        pthread_t t[8];
        for (long k = 0; k < 8; k++) pthread_create(&t[k], 0, thread_main, (void *)k);
        r = 0;
        for (long k = 0; k < 8; k++) pthread_join(t[k], 0), r += results[k];
    } else return 2;
    printf("%ld\n", r);
    return 0;
}
