/* dlopen a library named on the command line, call its `plugin` N times,
 * dlclose it, and do that R times: each load is a new mapping whose
 * probes must be placed again. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    long n = argc > 2 ? atol(argv[2]) : 100, rounds = argc > 3 ? atol(argv[3]) : 3, s = 0;
    for (long r = 0; r < rounds; r++) {
        void *h = dlopen(argv[1], RTLD_NOW);
        if (!h) { fprintf(stderr, "%s\n", dlerror()); return 2; }
        long (*f)(long) = (long (*)(long))dlsym(h, "plugin");
        for (long i = 0; i < n; i++) s += f(i);
        if (dlclose(h)) { fprintf(stderr, "%s\n", dlerror()); return 3; }
    }
    printf("reload %ld\n", s);
    return 0;
}
