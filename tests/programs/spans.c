/* A target for --chrome tests: nested calls on two threads, a crash, a
 * program that runs until stopped, slow and fast calls, many calls, and
 * calls at a steady rate for a while. */
#define _GNU_SOURCE
#include <pthread.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) long leaf(long x) { return x * 2 + 1; }
__attribute__((noinline)) long mid(long x) { return leaf(x) + leaf(x + 1); }
__attribute__((noinline)) long top(long x) { return mid(x) + 1; }

__attribute__((noinline)) long slow(long x) {
    struct timespec t = {0, 3000000};
    nanosleep(&t, 0);
    return x + 1;
}
__attribute__((noinline)) long fast(long x) { return x ^ 5; }

static volatile long sink;
static jmp_buf jump;

/* n deep, then return, or longjmp out of every level. Each level calls
 * the next through a pointer gcc cannot see through, so the recursion
 * stays a recursion. */
long rec(long n, int out);
static long (*volatile recur)(long, int) = rec;
__attribute__((noinline)) long rec(long n, int out) {
    if (n == 0) {
        if (out) longjmp(jump, 1);
        return 0;
    }
    return recur(n - 1, out) + 1;
}

static void on_alarm(int sig) { sink += rec(2, 0); }

static long calls;

static void *worker(void *arg) {
    long s = 0;
    for (long i = 0; i < calls; i++) s += top(i);
    return (void *)s;
}

/* "named": calls, a new name, more calls, then idle until killed. */
static void *named_worker(void *arg) {
    for (long i = 0; i < 1000; i++) sink += top(i);
    pthread_setname_np(pthread_self(), "renamed-worker");
    for (long i = 0; i < 1000; i++) sink += top(i);
    printf("renamed\n");
    fflush(stdout);
    for (;;) pause();
    return arg;
}

static void *reuse_worker(void *arg) {
    printf("thread %ld\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    return worker(arg);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "nest";
    long n = argc > 2 ? atol(argv[2]) : 10;
    long s = 0;
    if (!strcmp(mode, "nest")) {
        calls = n;
        pthread_t t;
        pthread_create(&t, 0, worker, 0);
        void *r;
        for (long i = 0; i < n; i++) s += top(i);
        pthread_join(t, &r);
        s += (long)r;
    } else if (!strcmp(mode, "crash")) {
        for (long i = 0; i < n; i++) s += top(i);
        printf("%ld\n", s);
        fflush(stdout);
        raise(SIGSEGV);
    } else if (!strcmp(mode, "named")) {
        printf("ready\n");
        fflush(stdout);
        char line[8];
        if (!fgets(line, sizeof line, stdin)) return 1;
        pthread_t t;
        pthread_create(&t, 0, named_worker, 0);
        pthread_join(t, 0);
    } else if (!strcmp(mode, "forever")) {
        printf("ready\n");
        fflush(stdout);
        for (long i = 0;; i++) {
            sink += top(i);
            if (i == 10000) {
                /* Calls were made: a trace has something to hold. */
                printf("busy\n");
                fflush(stdout);
            }
            if ((i & 63) == 0) {
                struct timespec t = {0, 100000};
                nanosleep(&t, 0);
            }
        }
    } else if (!strcmp(mode, "slow")) {
        for (long i = 0; i < 3; i++) s += slow(i);
        for (long i = 0; i < n; i++) s += fast(i);
    } else if (!strcmp(mode, "reuse")) {
        /* Threads one after another: each new one may get the stack and
         * thread control block of the last (glibc caches them); the trace
         * must still tell them apart. */
        calls = 3;
        for (long i = 0; i < n; i++) {
            pthread_t t;
            pthread_create(&t, 0, reuse_worker, 0);
            void *r;
            pthread_join(t, &r);
            s += (long)r;
        }
    } else if (!strcmp(mode, "deep")) {
        /* Past the shadow stack's depth, out by longjmp, from a signal
         * handler: the slow paths of the trampolines. */
        if (!setjmp(jump)) rec(50, 1);
        s += rec(n, 0);
        signal(SIGALRM, on_alarm);
        for (int i = 0; i < 3; i++) raise(SIGALRM);
        s += rec(10, 0);
    } else if (!strcmp(mode, "many")) {
        for (long i = 0; i < n; i++) s += leaf(i);
    } else if (!strcmp(mode, "steady")) {
        /* n seconds at a steady rate: 50 calls of top() every 10 ms
         * (20,000 calls a second with mid and leaf), "tick I" after each
         * second, then how many calls of top() were made. */
        struct timespec next;
        clock_gettime(CLOCK_MONOTONIC, &next);
        long tops = 0;
        for (long tick = 1; tick <= n * 100; tick++) {
            for (int i = 0; i < 50; i++, tops++) sink += top(tops);
            if (tick % 100 == 0) {
                printf("tick %ld\n", tick / 100);
                fflush(stdout);
            }
            next.tv_nsec += 10000000;
            if (next.tv_nsec >= 1000000000) {
                next.tv_nsec -= 1000000000;
                next.tv_sec++;
            }
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, 0) == EINTR) {
            }
        }
        printf("tops %ld\n", tops);
        return 0;
    }
    printf("%ld\n", s);
    return 0;
}
