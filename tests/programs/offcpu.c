/* A target with known waits for tests/profile.rs (--off-cpu,
 * process.blocked).
 *
 *   offcpu split ROUNDS    ROUNDS periods of 20 ms: burn() spins for the
 *                          first 5 ms, rest() sleeps (clock_nanosleep) the
 *                          other 15: a quarter on the CPU, three quarters
 *                          off it; prints "split B R", the wall time it
 *                          measured in each (ns: a loaded machine wakes
 *                          the sleeper late)
 *   offcpu mutex ROUNDS    two threads and a mutex: "holder" holds it
 *                          10 ms at a time (sleeping), ROUNDS times;
 *                          "waiter" takes it in waiter_lock() whenever
 *                          it sees it held, until the holder is done
 *   offcpu pipe MS         reader() blocks in read(2) on a pipe that a
 *                          thread writes to MS milliseconds later
 *   offcpu pingpong N [US [CPU]]
 *                          a child process and its parent pass a byte
 *                          back and forth over two pipes N times (the
 *                          blocking-heavy workload of benches/offcpu_cost.rs),
 *                          the child working US microseconds (burn())
 *                          before each answer, both on CPU if given: prints
 *                          "ns T", the round trips' time
 *
 * Each mode prints, last, the time it measured itself waiting: "waited N"
 * (ns: the waiter in pthread_mutex_lock, the reader in read), then
 * "done". */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void sleep_ns(long ns) {
    struct timespec t = {ns / 1000000000L, ns % 1000000000L};
    while (clock_nanosleep(CLOCK_MONOTONIC, 0, &t, &t) != 0) {
    }
}

static volatile long sink;

__attribute__((noinline)) void burn(long ns) {
    long end = now_ns() + ns;
    while (now_ns() < end) sink++;
}

__attribute__((noinline)) void rest(long ns) { sleep_ns(ns); }

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long rounds;
static pthread_barrier_t start;
static volatile int held, finished;

static void *holder(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "holder");
    pthread_barrier_wait(&start);
    for (long r = 0; r < rounds; r++) {
        pthread_mutex_lock(&lock);
        held = 1;
        sleep_ns(10000000);
        held = 0;
        pthread_mutex_unlock(&lock);
        /* Let the waiter have it. */
        sleep_ns(1000000);
    }
    finished = 1;
    return NULL;
}

__attribute__((noinline)) long waiter_lock(void) {
    long t0 = now_ns();
    pthread_mutex_lock(&lock);
    long t = now_ns() - t0;
    pthread_mutex_unlock(&lock);
    return t;
}

static long waited;

static void *waiter(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "waiter");
    pthread_barrier_wait(&start);
    for (;;) {
        /* Come when the holder has it (a loaded machine may not run
         * this thread through a whole holding: that one is missed). */
        while (!held && !finished) sched_yield();
        if (finished) break;
        waited += waiter_lock();
    }
    return NULL;
}

static int fds[2];

static void *writer(void *arg) {
    sleep_ns((long)arg * 1000000L);
    if (write(fds[1], "x", 1) != 1) abort();
    return NULL;
}

__attribute__((noinline)) long reader(void) {
    char c;
    long t0 = now_ns();
    if (read(fds[0], &c, 1) != 1) abort();
    return now_ns() - t0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: offcpu split|mutex|pipe N\n");
        return 2;
    }
    long n = atol(argv[2]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(argv[1], "split")) {
        long b = 0, s = 0;
        for (long r = 0; r < n; r++) {
            long t0 = now_ns();
            burn(5000000);
            long t1 = now_ns();
            rest(15000000);
            b += t1 - t0;
            s += now_ns() - t1;
        }
        printf("split %ld %ld\n", b, s);
    } else if (!strcmp(argv[1], "mutex")) {
        pthread_t a, b;
        rounds = n;
        pthread_barrier_init(&start, NULL, 2);
        pthread_create(&a, NULL, holder, NULL);
        pthread_create(&b, NULL, waiter, NULL);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
        printf("waited %ld\n", waited);
    } else if (!strcmp(argv[1], "pipe")) {
        pthread_t w;
        if (pipe(fds)) return 1;
        pthread_create(&w, NULL, writer, (void *)n);
        printf("waited %ld\n", reader());
        pthread_join(w, NULL);
    } else if (!strcmp(argv[1], "pingpong")) {
        long work = argc > 3 ? atol(argv[3]) * 1000 : 0;
        if (argc > 4) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(atoi(argv[4]), &set);
            if (sched_setaffinity(0, sizeof set, &set)) return 1;
        }
        int a[2], b[2];
        char c = 'x';
        if (pipe(a) || pipe(b)) return 1;
        long t0 = now_ns();
        pid_t p = fork();
        if (p == 0) {
            for (long i = 0; i < n; i++)
                if (read(a[0], &c, 1) != 1 || (work && (burn(work), 0)) || write(b[1], &c, 1) != 1) _exit(1);
            _exit(0);
        }
        for (long i = 0; i < n; i++)
            if (write(a[1], &c, 1) != 1 || read(b[0], &c, 1) != 1) return 1;
        int status;
        if (waitpid(p, &status, 0) != p || status != 0) return 1;
        printf("ns %ld\n", now_ns() - t0);
    } else {
        return 2;
    }
    printf("done\n");
    return 0;
}
