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
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100, s = 0, caught = 0;
    for (long i = 0; i < n; i++) {
        try { thrower(3); } catch (int e) { caught += e; }
        s += leaf(i);
    }
    printf("exc %ld %ld\n", s, caught);
    return 0;
}
