/* A target whose names carry terminal escape sequences, for
 * tests/hygiene.rs: the tests build it into a file whose name holds one
 * (so its path, execname() and module name do), its functions' symbols
 * hold others (an SGR colour, an OSC window title ended by BEL), and its
 * thread renames itself with one. "crash" makes it fault inside the
 * OSC-named function, so the crash report names it. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>

/* Quoted, the assembler takes any byte in a symbol name but NUL. */
__attribute__((noinline)) long evil(long x) __asm__("\"evil\033[31mred\"");
__attribute__((noinline)) long evil(long x) { return x * 3 + 1; }

__attribute__((noinline)) void boom(volatile int *p) __asm__("\"boom\033]0;pwned\007\"");
__attribute__((noinline)) void boom(volatile int *p) { *p = 1; }

static volatile int *volatile nowhere = 0;

int main(int argc, char **argv) {
    prctl(PR_SET_NAME, "thr\033[32mgrn");
    volatile long s = 0;
    for (int i = 0; i < 3; i++) s += evil(i);
    printf("%ld\n", s);
    fflush(stdout);
    if (argc > 1 && !strcmp(argv[1], "crash")) boom(nowhere);
    return 0;
}
