/* Functions for probe point resolution tests: global, static, an alias. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) int work(int x) { return x * 2 + 1; }
__attribute__((noinline)) static int local_helper(int x) { return x - 3; }
__attribute__((noinline)) long compute_sum(long n) {
    long s = 0;
    for (long i = 0; i < n; i++) s += local_helper((int)i);
    return s;
}
int work_alias(int x) __attribute__((alias("work")));

int main(int argc, char **argv) {
    /* With an argument, wait for stdin to close: lets a test attach by pid. */
    if (argc > 1) {
        printf("ready\n");
        fflush(stdout);
        while (getchar() != EOF) {
        }
    }
    printf("%d %ld\n", work(argc), compute_sum(10));
    return 0;
}
