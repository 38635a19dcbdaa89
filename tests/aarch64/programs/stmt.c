/* A statement right after a call (tests/aarch64/guest.sh): line 15's first
 * instruction is where `bl callee` returns to, so control arrives there
 * from the callee's `ret`; the patch goes on the `bl` instead (the lead),
 * and the probe runs at the call's return through a return trampoline.
 * `stmt N`: N calls of caller; prints their sum. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) long callee(long x) {
    __asm__ volatile("");
    return x * 3;
}
__attribute__((noinline)) long caller(long x) {
    long a = callee(x);
    long b = a ^ (x << 7);
    return b * 2;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10, s = 0;
    for (long i = 0; i < n; i++) s += caller(i);
    printf("sum %ld\n", s);
    return 0;
}
