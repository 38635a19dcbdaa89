/* Functions shorter than the 5-byte jump, packed with no padding between
 * them (built with -falign-functions=1) for tests/real_programs.rs: each
 * is reached by a 2-byte hop through a neighbour. `noipa` keeps gcc from
 * hoisting their calls out of the loop. `nothing` is a lone `ret`: one
 * byte, which nothing can hook without a trap. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noipa)) long ident(long x) { return x; }
__attribute__((noipa)) long zero(void) { return 0; }
__attribute__((noipa)) long neg(long x) { return -x; }
__attribute__((noipa)) void nothing(void) {}
__attribute__((noipa)) long mix(long x, long y) {
    long s = 0;
    for (long i = 0; i < x; i++) s += i * y ^ (s >> 3);
    return s;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10, s = 0;
    for (long i = 0; i < n; i++) {
        nothing();
        s += ident(i) + zero() + neg(i) + mix(i % 7, i);
    }
    printf("packed %ld\n", s);
    return 0;
}
