/* A target for .itrace tests: sum(n) = 1² + … + n², through a probed
 * callee; on one thread, or on two at once. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) long sq(long x) { return x * x; }
__attribute__((noinline)) long sum(long n) {
    long s = 0;
    for (long i = 1; i <= n; i++) s += sq(i);
    return s;
}

static void *worker(void *arg) { return (void *)sum((long)arg); }

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 5;
    int calls = argc > 2 ? atoi(argv[2]) : 1;
    long t = 0;
    if (argc > 3 && !strcmp(argv[3], "threads")) {
        pthread_t a, b;
        void *ra, *rb;
        pthread_create(&a, 0, worker, (void *)n);
        pthread_create(&b, 0, worker, (void *)(n + 1));
        pthread_join(a, &ra);
        pthread_join(b, &rb);
        t = (long)ra + (long)rb;
    } else {
        for (int k = 0; k < calls; k++) t += sum(n + k);
    }
    printf("%ld\n", t);
    return 0;
}
