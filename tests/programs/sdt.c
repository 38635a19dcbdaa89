/* SDT markers and statement sites for tests/markers.rs.
 *
 * `work N`: N calls of step(); each runs the `app:loop` marker 3 times
 * (integer and string arguments) and `app:tick` once (a negative int).
 * While `app:tick`'s semaphore is set (a tracer probes it), step() adds
 * 1000: the output says whether the program saw it. `wait`: for -p, say
 * ready, then on each line of stdin print the semaphore and run step once.
 * `loop N`: a loop whose head is the global label `loop_head` (a
 * statement site) runs N times. */
#define _SDT_HAS_SEMAPHORES 1
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>

unsigned short app_loop_semaphore __attribute__((unused, section(".probes")));
unsigned short app_tick_semaphore __attribute__((unused, section(".probes")));

__attribute__((noinline)) long step(long i, const char *name) {
    long r = 0;
    for (int k = 0; k < 3; k++) {
        DTRACE_PROBE3(app, loop, i, k, name);
        r += k;
    }
    if (app_tick_semaphore) r += 1000;
    STAP_PROBE1(app, tick, (int)-i);
    return r;
}

/* Something after step, so that its last marker has room. */
__attribute__((noinline)) long after_step(long x) { return x * 3; }

volatile long sink;

__attribute__((noinline)) long looping(long n) {
    long s = 0;
    for (long i = 0; i < n; i++) {
        __asm__ volatile(".globl loop_head\nloop_head:");
        s += i;
        sink = s; /* the loop's line */
    }
    return s;
}

/* A site the jump cannot take: the loop's head is 2 bytes after the
 * function's start, inside the 5 bytes a jump there would replace. */
__asm__(".text\n.globl refuse_me\n.type refuse_me,@function\n.p2align 4\nrefuse_me:\n"
        "  xor %eax, %eax\n1:\n  add $1, %eax\n  cmp %edi, %eax\n  jl 1b\n  ret\n.size refuse_me, .-refuse_me\n");
long refuse_me(long n);

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "work";
    long n = argc > 2 ? atol(argv[2]) : 5, s = 0;
    if (!strcmp(mode, "work")) {
        for (long i = 0; i < n; i++) s += step(i, "hello");
    } else if (!strcmp(mode, "loop")) {
        s = looping(n) + refuse_me(3) + after_step(0);
    } else if (!strcmp(mode, "wait")) {
        char line[16];
        printf("ready\n");
        fflush(stdout);
        while (fgets(line, sizeof line, stdin)) {
            printf("semaphore %d\n", app_tick_semaphore);
            fflush(stdout);
            s += step(1, "wait");
        }
    }
    printf("%s %ld\n", mode, s);
    return 0;
}
