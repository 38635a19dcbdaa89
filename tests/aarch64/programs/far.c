/* A function beyond a `B`'s reach (±128 MiB) of the rest of its program
 * (tests/aarch64/guest.sh): far_fn sits in a section linked 256 MiB above
 * the text, so the program's code region, placed near its first probed
 * function, is out of reach of the other, which telco-stap reaches through
 * a veneer. `far N`: N calls of each; prints their sum, after whether
 * the pages of each are guarded by BTI (the kernel's "bt" flag in
 * /proc/self/smaps).
 *
 * Every object linked in carries the BTI note, so the program is guarded:
 * run.sh links it without the C library's startup files (the cross
 * toolchain's carry no note, and a program linked with them is
 * unguarded, or dies of SIGILL if forced) and the `_start` below, a
 * landing pad first, hands main to __libc_start_main. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv);
__asm__(".text\n.globl _start\n.type _start,%function\n_start:\n"
        "  bti c\n  mov x29, #0\n  mov x30, #0\n  mov x5, x0\n  ldr x1, [sp]\n  add x2, sp, #8\n  mov x6, sp\n"
        "  adrp x0, main\n  add x0, x0, :lo12:main\n  mov x3, #0\n  mov x4, #0\n  bl __libc_start_main\n  brk #0\n"
        ".size _start, .-_start\n");

/* Whether the mapping holding `at` is guarded (VM_ARM64_BTI). */
static int guarded(const void *at) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    int in = 0, bt = 0;
    unsigned long a = (unsigned long)at;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) in = a >= lo && a < hi;
        else if (in && !strncmp(line, "VmFlags:", 8)) bt = strstr(line, " bt") != 0;
    }
    fclose(f);
    return bt;
}

__attribute__((noinline)) long near_fn(long x) { return x + 1; }

__attribute__((noinline, section("far_text"))) long far_fn(long x) {
    /* Its call of near_fn goes through a linker veneer (x16) of its own. */
    return x * 2 + near_fn(x);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10, sum = 0;
    printf("bti %d %d\n", guarded((const void *)near_fn), guarded((const void *)far_fn));
    for (long i = 0; i < n; i++) sum += near_fn(i) + far_fn(i);
    printf("sum %ld\n", sum);
    return 0;
}
