/* Loads a plugin (argv[1]) with dlopen and calls its plugin_outer N times
 * (argv[2]), which calls back into callback() here; prints the sum. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) long callback(long v) {
    return 3 * v;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    long (*outer)(long (*)(long), long) = (long (*)(long (*)(long), long))dlsym(h, "plugin_outer");
    if (!outer) return 1;
    long n = atol(argv[2]), sum = 0;
    for (long i = 0; i < n; i++) sum += outer(callback, i);
    printf("%ld\n", sum);
    return 0;
}
