/* Parameters read at a function's entry where AAPCS64 passes them
 * (tests/aarch64/guest.sh), built at -O0, where each parameter's DWARF
 * location is its stack slot, which the prologue has not stored yet: a
 * struct over 16 bytes by reference, a small one in two registers, the
 * memory result's address in x8 (not an argument register).
 * `args N`: N calls of mk; prints the sum of the results' fields. */
#include <stdio.h>
#include <stdlib.h>

struct big { long a, b, c; };
struct small { long a, b; };

__attribute__((noinline)) struct big mk(long x, struct big in, struct small sm, long y) {
    struct big r = { in.a + x, in.b + sm.a, in.c + y + sm.b };
    return r;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10, s = 0;
    for (long i = 0; i < n; i++) {
        struct big in = { i, 2 * i, 3 * i };
        struct small sm = { 5, 7 };
        struct big r = mk(i, in, sm, 11);
        s += r.a + r.b + r.c;
    }
    printf("sum %ld\n", s);
    return 0;
}
