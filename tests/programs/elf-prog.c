/* A C program for compiler/tests/elf_resolve.rs: static and global functions, an
 * alias (two names at one address), a weak function, a zero-size label, an
 * ifunc with glibc-style implementations, a data object and an import. */
#include <stdio.h>

int counter = 0; /* data: matched by name, skipped as not a function */

static int __attribute__((noinline)) helper_static(int x) {
    return x * 3 + counter;
}

int __attribute__((noinline)) work(int x) {
    counter += x;
    return helper_static(x) + 1;
}

/* Two names at one address. */
int work_alias(int x) __attribute__((alias("work")));

int __attribute__((weak, noinline)) weak_fn(int x) {
    return x - 1;
}

/* A function-typed symbol without a .size: st_size is 0. */
__asm__(".text\n"
        ".globl zero_label\n"
        ".type zero_label, @function\n"
        "zero_label:\n"
        "  ret\n");

/* An ifunc whose implementations are named like glibc's (__memcpy_avx2...). */
typedef int (*compute_fn)(int);
int __attribute__((noinline)) __compute_generic(int x) {
    return x + 1;
}
int __attribute__((noinline)) __compute_avx2(int x) {
    return x + 2;
}
static compute_fn resolve_compute(void) {
    return __compute_generic;
}
int compute(int x) __attribute__((ifunc("resolve_compute")));

int main(void) {
    int r = work(1) + work_alias(2) + weak_fn(3) + compute(4) + __compute_avx2(5);
    printf("%d\n", r);
    return 0;
}
