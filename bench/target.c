/* The benchmark target: it times calls of a small non-inlined function
 * itself, so a tracer's start-up and tear-down are not counted.
 *
 *   target run N     N timed calls of work() (after N/100 untimed warm-up
 *                    calls, at most 100,000); prints "NS_PER_CALL SUM"
 *   target wait      prints "ready", then reads one line of stdin (used to
 *                    attach to a running process that calls nothing)
 *   target tick      prints "ready", then calls work() and f0() every
 *                    millisecond until stdin is closed or a line arrives
 *                    (a tracer with no ready message shows its first hit)
 *   target int3 N    as run, with the program's own int3 before each call
 *                    and an empty SIGTRAP handler: the kernel's round trip,
 *                    the least a trap probe costs
 *
 * f0 ... f999 are 1,000 more functions to probe for the attach workload;
 * bench/run generates them into funcs.h. */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) long work(long x) { return x * 2 + 1; }

#include "funcs.h"

static void on_trap(int sig, siginfo_t *info, void *uc) { (void)sig, (void)info, (void)uc; }

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "run";
    if (!strcmp(mode, "wait") || !strcmp(mode, "tick")) {
        int tick = !strcmp(mode, "tick");
        printf("ready\n");
        fflush(stdout);
        /* volatile: work and f0 are pure, so unused results would let
         * gcc drop the calls. */
        volatile long s = 0;
        struct pollfd p = {.fd = 0, .events = POLLIN};
        while (poll(&p, 1, tick ? 1 : -1) == 0)
            s = s + work(s) + f0(s);
        return 0;
    }
    long n = argc > 2 ? atol(argv[2]) : 10000000;
    long warm = n / 100 < 100000 ? n / 100 : 100000;
    long s = 0;
    if (!strcmp(mode, "int3")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_trap;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigaction(SIGTRAP, &sa, NULL);
        for (long i = 0; i < warm; i++) {
            __asm__ volatile("int3");
            s += work(i);
        }
        double a = now_ns();
        for (long i = 0; i < n; i++) {
            __asm__ volatile("int3");
            s += work(i);
        }
        printf("%.3f %ld\n", (now_ns() - a) / n, s);
        return 0;
    }
    for (long i = 0; i < warm; i++) s += work(i);
    double a = now_ns();
    for (long i = 0; i < n; i++) s += work(i);
    double b = now_ns();
    printf("%.3f %ld\n", (b - a) / n, s);
    return 0;
}
