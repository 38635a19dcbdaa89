/* A target for variables by name at a marker inside an inlined function:
 * `body` is inlined into main at -O2; its constant struct `p` lives only
 * in the debugging information (DW_AT_const_value), its parameter `n` in
 * a register or nowhere. It prints what the probe should read. */
#include <stdio.h>
#include <sys/sdt.h>

struct pair {
    const int i;
    const long j;
};

static inline __attribute__((always_inline)) long body(long n) {
    const struct pair p = {.i = 2, .j = 21};
    long r = n * p.j + p.i;
    STAP_PROBE1(test, inside, r);
    return r;
}

int main(int argc, char **argv) {
    (void)argv;
    long r = body(argc + 4);
    printf("r %ld i 2 j 21\n", r);
    return 0;
}
