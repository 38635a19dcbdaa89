/* A target for --flight-recorder tests: three functions nested in a loop
 * then a fault in a fourth; a loop that runs until stopped (for SIGUSR2);
 * calls of which a few are slow (for flight_dump() from a return probe);
 * threads with histories of their own. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile long sink;

__attribute__((noinline)) long third(long x) { return x * 2 + 1; }
__attribute__((noinline)) long second(long x) { return third(x) + 1; }
__attribute__((noinline)) long first(long x) { return second(x) + 1; }

/* Faults: a write through a pointer that is 0 (gcc cannot see it). */
static long *volatile nowhere;
__attribute__((noinline)) long fourth(long x) {
    *nowhere = x;
    return x;
}

__attribute__((noinline)) long maybe_slow(long x) {
    if (x % 100 == 99) {
        struct timespec t = {0, 15000000};
        nanosleep(&t, 0);
    }
    return x + 1;
}

static long per_thread;
static void *worker(void *arg) {
    long k = (long)arg;
    for (long i = 0; i < per_thread; i++) sink += first(k + i);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "crash";
    long n = argc > 2 ? atol(argv[2]) : 1000;
    if (!strcmp(mode, "crash")) {
        /* n iterations, then the fault. */
        for (long i = 0; i < n; i++) sink += first(i);
        fourth(n);
    } else if (!strcmp(mode, "run")) {
        /* Until stopped; "ready" once the loop runs. */
        for (long i = 0;; i++) {
            sink += first(i);
            if (i == 1000000) {
                printf("ready\n");
                fflush(stdout);
            }
        }
    } else if (!strcmp(mode, "steady")) {
        /* n seconds as fast as it can, a line each second (the calls so
         * far), then exit. */
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        long calls = 0, said = 0;
        for (;;) {
            for (int k = 0; k < 4096; k++) sink += first(k + calls);
            calls += 3 * 4096;
            clock_gettime(CLOCK_MONOTONIC, &t);
            long s = t.tv_sec - t0.tv_sec;
            if (s > said) {
                said = s;
                printf("%ld %ld\n", s, calls);
                fflush(stdout);
                if (s >= n) break;
            }
        }
    } else if (!strcmp(mode, "slow")) {
        /* n calls, one in a hundred slow. */
        for (long i = 0; i < n; i++) sink += maybe_slow(i);
    } else if (!strcmp(mode, "threads")) {
        /* argv[3] threads, n iterations each. */
        long t = argc > 3 ? atol(argv[3]) : 4;
        pthread_t th[64];
        per_thread = n;
        if (t > 64) t = 64;
        for (long i = 0; i < t; i++) pthread_create(&th[i], 0, worker, (void *)i);
        for (long i = 0; i < t; i++) pthread_join(th[i], 0);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    return 0;
}
