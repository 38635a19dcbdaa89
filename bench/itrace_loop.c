/* The .itrace benchmark's target (benches/itrace_speed.rs): one call of
 * spin(N), a 5-instruction loop at -O1 (add, xor, add, cmp, jne), timed by
 * the program itself: "NS ns RESULT". */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
__attribute__((noinline)) long spin(long n) {
    long a = 0, b = 1;
    for (long i = 0; i < n; i++) { a += i; b ^= a; }
    return a + b;
}
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000000;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long r = spin(n);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%ld ns %ld\n", (t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec), r);
    return 0;
}
