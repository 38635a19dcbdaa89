/* A target for print_ubacktrace() and usymname() (tests/target.rs): a
 * chain main -> top -> mid -> leaf, built with frame pointers. mid calls
 * leaf within its first bytes, so the call is in mid's relocated copy
 * when mid is probed. */
#include <stdio.h>

__attribute__((noinline)) long leaf(long x) { return x * 2 + 1; }
__attribute__((noinline)) long mid(long x) { return leaf(x) + 1; }
__attribute__((noinline)) long top(long x) { return mid(x) + 1; }

int main(void) {
    long s = 0;
    for (int i = 0; i < 2; i++) s += top(i);
    printf("%ld\n", s);
    return 0;
}
