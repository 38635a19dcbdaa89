/* The aarch64 guest's target program (tests/aarch64/guest.sh): portable
 * C, one mode per shape the end-to-end tests probe. Prints a result that
 * does not depend on tracing, so traced and untraced runs compare. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef HAVE_SDT
#include <sys/sdt.h>
#endif

volatile long g = 7;

/* A plain leaf. */
__attribute__((noinline)) long work(long x) { return x * 2 + 1; }
/* Its first instruction reads a global through adrp. */
__attribute__((noinline)) long global_first(void) { return g + 1; }
/* Recursion: every level returns through its own frame (no call turned
 * into a loop: `fib_calls` counts the calls). */
static long fib_calls;
__attribute__((noinline, optimize("no-optimize-sibling-calls"))) long fib(long n) {
    fib_calls++;
    return n < 2 ? n : fib(n - 1) + fib(n - 2);
}
/* Eight arguments in registers, the ninth on the stack. */
__attribute__((noinline)) long nine(long a, long b, long c, long d, long e, long f, long h, long i, long j) {
    return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f + 7 * h + 8 * i + 9 * j;
}

/* Busy for at least `us` microseconds of CLOCK_MONOTONIC: a call of a
 * known least duration. */
__attribute__((noinline)) long spin(long us) {
    struct timespec a, b;
    long loops = 0;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do {
        clock_gettime(CLOCK_MONOTONIC, &b);
        loops++;
    } while ((b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000 < us);
    return loops > 0;
}

static long iterations;

static void *thread_main(void *arg) {
    long s = 0;
    for (long i = 0; i < iterations; i++) s += work(i);
    *(long *)arg = s;
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "work";
    long n = argc > 2 ? atol(argv[2]) : 1000;
    if (!strcmp(mode, "threads")) {
        pthread_t t[8];
        long sums[8], total = 0;
        iterations = n;
        for (int i = 0; i < 8; i++) pthread_create(&t[i], 0, thread_main, &sums[i]);
        for (int i = 0; i < 8; i++) pthread_join(t[i], 0), total += sums[i];
        printf("threads %ld\n", total);
    } else if (!strcmp(mode, "bench")) {
        /* ns per call of work(), over n calls after a warm-up. */
        struct timespec a, b;
        long s = 0;
        for (long i = 0; i < n / 10; i++) s += work(i);
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (long i = 0; i < n; i++) s += work(i);
        clock_gettime(CLOCK_MONOTONIC, &b);
        long ns = (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec);
        printf("bench %ld.%02ld ns/call (%ld)\n", ns / n, ns * 100 / n % 100, s & 1);
    } else if (!strcmp(mode, "slow")) {
        /* n calls a millisecond apart: a process to attach to and kill
         * the tracer of. */
        long s = 0;
        for (long i = 0; i < n; i++) s += work(i), usleep(1000);
        printf("slow %ld\n", s);
#ifdef HAVE_SDT
    } else if (!strcmp(mode, "sdt")) {
        long s = 0;
        for (long i = 0; i < n; i++) {
            s += work(i);
            DTRACE_PROBE2(a64, tick, i, s);
        }
        printf("sdt %ld\n", s);
#endif
    } else if (!strcmp(mode, "spin")) {
        /* n calls of spin(200); prints the shortest as the program
         * measured it around the call (ns), which holds any probe's
         * measure of the same call. */
        long s = 0, least = -1;
        for (long i = 0; i < n; i++) {
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            s += spin(200);
            clock_gettime(CLOCK_MONOTONIC, &b);
            long ns = (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec);
            if (least < 0 || ns < least) least = ns;
        }
        printf("spin %ld %ld\n", s, least);
    } else if (!strcmp(mode, "fib")) {
        long v = fib(n);
        printf("fib %ld %ld\n", v, fib_calls);
    } else if (!strcmp(mode, "mixed")) {
        long s = 0;
        for (long i = 0; i < n; i++) s += work(i) + global_first() + nine(i, 1, 2, 3, 4, 5, 6, 7, 8);
        printf("mixed %ld\n", s);
    } else {
        long s = 0;
        for (long i = 0; i < n; i++) s += work(i);
        printf("work %ld\n", s);
    }
    return 0;
}
