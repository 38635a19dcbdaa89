/* A function beyond a `B`'s reach (±128 MiB) of the rest of its program
 * (tests/aarch64/guest.sh): far_fn sits in a section linked 256 MiB above
 * the text, so the program's code region, placed near its first probed
 * function, is out of reach of the other, which telco-stap reaches through
 * a veneer. `far N`: N calls of each; prints their sum. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) long near_fn(long x) { return x + 1; }

__attribute__((noinline, section("far_text"))) long far_fn(long x) {
    /* Its call of near_fn goes through a linker veneer (x16) of its own. */
    return x * 2 + near_fn(x);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10, sum = 0;
    for (long i = 0; i < n; i++) sum += near_fn(i) + far_fn(i);
    printf("sum %ld\n", sum);
    return 0;
}
