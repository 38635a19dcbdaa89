/* The library tests/programs/mapped.c loads (tests/files.rs). NAME(x)
 * names its functions: shown_x, or a decoy's names that must never reach
 * the tracer's output (the decoy, root's alone, is put where the target's
 * maps say the library is). dlsym finds shown_outer and shown_spin. */
#include <time.h>

#ifndef NAME
#define NAME(x) shown_##x
#endif

static volatile long sink;

__attribute__((noinline)) void NAME(outer)(void (*f)(void)) {
    f();
    sink++;
}

__attribute__((noinline)) void NAME(spin)(long ms) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    long end = t.tv_sec * 1000 + t.tv_nsec / 1000000 + ms;
    for (;;) {
        for (long i = 0; i < 100000; i++) sink += i;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec * 1000 + t.tv_nsec / 1000000 >= end) break;
    }
}
