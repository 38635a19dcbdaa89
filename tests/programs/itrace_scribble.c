/* A hostile target for the block tracer: inside its traced call it writes
 * over the arenas (the first MiB of every writable mapping of the pool)
 * with the byte `fill` (argv[1]), then goes on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static void scribble(int fill) {
    FILE *m = fopen("/proc/self/maps", "r");
    char line[512];
    while (m && fgets(line, sizeof line, m)) {
        unsigned long lo, hi;
        char perms[8];
        if (!strstr(line, "memfd:telco-itrace") || sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3) continue;
        if (perms[1] != 'w') continue;
        unsigned long n = hi - lo < (1 << 20) ? hi - lo : (1 << 20);
        memset((void *)lo, fill, n);
    }
    if (m) fclose(m);
}
__attribute__((noinline)) long victim(long n, int fill) {
    long s = 0;
    for (long i = 0; i < n; i++) {
        s += i * i;
        if (i == n / 2) scribble(fill);
    }
    return s;
}
int main(int argc, char **argv) {
    int fill = argc > 1 ? atoi(argv[1]) : 0xff;
    printf("%ld\n", victim(1000, fill));
    return 0;
}
