// C++ exceptions thrown through frames that have return probes (tests/target.rs).
#include <cstdio>
#include <cstdlib>
#include <cstring>
volatile long sink;
__attribute__((noinline)) long leaf(long x) { return x + 1; }
__attribute__((noinline)) void thrower(long n) {
    if (n == 0) throw 42;
    thrower(n - 1);
    sink += leaf(n);
}
// Catches what a probed callee throws, then returns normally.
__attribute__((noinline)) long catcher(long n) {
    long got = 0;
    try {
        thrower(n);
    } catch (int e) {
        got = e;
    }
    return got + leaf(n);
}
// Catches and throws again (`throw;`).
__attribute__((noinline)) void rethrower(long n) {
    try {
        thrower(n);
    } catch (int) {
        sink += 1;
        throw;
    }
}
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100, s = 0, caught = 0;
    for (long i = 0; i < n; i++) {
        try { thrower(3); } catch (int e) { caught += e; }
        s += leaf(i);
        s += catcher(2);
        try { rethrower(1); } catch (int e) { caught += e; }
    }
    printf("exc %ld %ld\n", s, caught);
    return 0;
}
