/* dlopen a library named on the command line and call its `plugin` N times
 * right away: probes in it must be placed before the first call. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    long n = argc > 2 ? atol(argv[2]) : 1000, s = 0;
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 2; }
    long (*f)(long) = (long (*)(long))dlsym(h, "plugin");
    for (long i = 0; i < n; i++) s += f(i);
    printf("host %ld\n", s);
    return 0;
}
