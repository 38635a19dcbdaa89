/* A target with a known CPU split for tests/profile.rs (timer.profile).
 *
 *   profile split ROUNDS     hot() takes three quarters of the CPU time,
 *                            cold() one quarter (the same loop, 3:1)
 *   profile threads ROUNDS   threads "alpha" and "beta", each in its own
 *                            function (alpha_work, beta_work)
 *   profile sigprof ROUNDS   split, while the program's own SIGPROF timer
 *                            (setitimer ITIMER_PROF, 1 ms) counts ticks
 *   profile blocked ROUNDS   split with every signal blocked
 *   profile handler ROUNDS   split, with a SIGPROF handler that works
 *                            (handler_work) on every tick
 *   profile serve 0          split until a line (or EOF) comes on stdin,
 *                            for -p
 *   profile syscalls ROUNDS  zeroes(): ROUNDS reads of 64 KiB from
 *                            /dev/zero (time in the kernel)
 *   profile clock ROUNDS     ROUNDS calls of clock_gettime (the vDSO's)
 *   profile calls ROUNDS     calls(): ROUNDS calls of tiny(), a short
 *                            spin after each (probed by tests/profile.rs:
 *                            samples in trampolines and handlers)
 *
 * It prints "ready" first, then how long the work took ("ns N") and
 * "done" (with the SIGPROF count) last. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile long sink;

/* The same loop in each: the split is the iteration counts'. */
#define SPIN(n)                                                 \
    do {                                                        \
        long x = 0;                                             \
        for (long i = 0; i < (n); i++) {                        \
            x += i;                                             \
            __asm__ volatile("" : "+r"(x));                     \
        }                                                       \
        sink += x;                                              \
    } while (0)

__attribute__((noinline)) void hot(long n) { SPIN(n); }
__attribute__((noinline)) void cold(long n) { SPIN(n); }
__attribute__((noinline)) void alpha_work(long n) { SPIN(n); }
__attribute__((noinline)) void beta_work(long n) { SPIN(n); }
__attribute__((noinline)) void handler_work(long n) { SPIN(n); }

__attribute__((noinline)) long tiny(long x) { return x * 3 + 1; }

__attribute__((noinline)) void calls(long rounds) {
    for (long r = 0; r < rounds; r++) {
        long v = tiny(r);
        sink += v; /* statement probe */
        SPIN(20);
    }
}

__attribute__((noinline)) void zeroes(long rounds) {
    static char buf[65536];
    FILE *f = fopen("/dev/zero", "r");
    if (!f) return;
    for (long r = 0; r < rounds; r++) sink += read(fileno(f), buf, sizeof buf);
    fclose(f);
}

__attribute__((noinline)) void run(long rounds) {
    for (long r = 0; r < rounds; r++) {
        hot(30000);
        cold(10000);
    }
    __asm__ volatile("");
}

static long rounds;

static void *alpha(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "alpha");
    alpha_work(rounds * 40000);
    return NULL;
}

static void *beta(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "beta");
    beta_work(rounds * 40000);
    return NULL;
}

static volatile sig_atomic_t ticks;
static volatile int stop;

static void *watch_stdin(void *arg) {
    (void)arg;
    char line[64];
    (void)fgets(line, sizeof line, stdin);
    stop = 1;
    return NULL;
}

static void on_prof(int sig) { (void)sig; ticks++; }
static void on_prof_work(int sig) {
    (void)sig;
    handler_work(600000);
    ticks++;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: profile split|threads|sigprof|blocked ROUNDS\n");
        return 2;
    }
    rounds = atol(argv[2]);
    printf("ready\n");
    fflush(stdout);
    struct timespec t0, t1, c0, c1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    if (!strcmp(argv[1], "threads")) {
        pthread_t a, b;
        pthread_create(&a, NULL, alpha, NULL);
        pthread_create(&b, NULL, beta, NULL);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
    } else if (!strcmp(argv[1], "sigprof")) {
        signal(SIGPROF, on_prof);
        struct itimerval t = {{0, 1000}, {0, 1000}};
        setitimer(ITIMER_PROF, &t, NULL);
        run(rounds);
        struct itimerval off = {{0, 0}, {0, 0}};
        setitimer(ITIMER_PROF, &off, NULL);
    } else if (!strcmp(argv[1], "handler")) {
        signal(SIGPROF, on_prof_work);
        struct itimerval t = {{0, 2000}, {0, 2000}};
        setitimer(ITIMER_PROF, &t, NULL);
        run(rounds);
        struct itimerval off = {{0, 0}, {0, 0}};
        setitimer(ITIMER_PROF, &off, NULL);
    } else if (!strcmp(argv[1], "blocked")) {
        sigset_t all;
        sigfillset(&all);
        sigprocmask(SIG_BLOCK, &all, NULL);
        run(rounds);
    } else if (!strcmp(argv[1], "clock")) {
        struct timespec t;
        for (long r = 0; r < rounds; r++) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            sink += t.tv_nsec;
        }
    } else if (!strcmp(argv[1], "syscalls")) {
        zeroes(rounds);
    } else if (!strcmp(argv[1], "calls")) {
        calls(rounds);
    } else if (!strcmp(argv[1], "serve")) {
        pthread_t w;
        pthread_create(&w, NULL, watch_stdin, NULL);
        while (!stop) run(100);
        pthread_join(w, NULL);
    } else {
        run(rounds);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    /* How long the work took, and its CPU time (benches/profile_cost.rs). */
    printf("ns %ld\n", (long)((t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec)));
    printf("cpu %ld\n", (long)((c1.tv_sec - c0.tv_sec) * 1000000000L + (c1.tv_nsec - c0.tv_nsec)));
    printf("done %d\n", (int)ticks);
    return 0;
}
