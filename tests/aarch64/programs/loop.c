/* A function whose loop jumps back to its first instruction
 * (tests/aarch64/guest.sh): the probe's `B` there would run the probe on
 * every iteration, so the loop's branch is retargeted to the second
 * displaced word, whose `B` leads to the relocated copy past the probe.
 * `loop N`: N calls of count_to(i); prints the sum of the results.
 * `loop N flags`: flags_live(N), whose flags are live at a statement. */
#include <stdio.h>
#include <stdlib.h>

/* count_to(n, acc): acc + 1 per iteration, n iterations (n >= 1). */
__asm__(".text\n"
        ".global count_to\n"
        ".type count_to, %function\n"
        "count_to:\n"
        "    add x1, x1, #1\n"
        "    sub x0, x0, #1\n"
        "    cbnz x0, count_to\n"
        "    mov x0, x1\n"
        "    ret\n"
        ".size count_to, .-count_to\n");
long count_to(long n, long acc);

/* flags_live(n): n iterations, counted; the flags `subs` sets are tested
 * by the `b.gt` after flags_live+8, where a statement probe goes (its
 * trampoline compares, so it must put them back). */
__asm__(".text\n"
        ".global flags_live\n"
        ".type flags_live, %function\n"
        "flags_live:\n"
        "    mov x2, #0\n"
        "1:  subs x0, x0, #1\n"
        "    add x2, x2, #1\n"
        "    b.gt 1b\n"
        "    mov x0, x2\n"
        "    ret\n"
        ".size flags_live, .-flags_live\n");
long flags_live(long n);

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10, s = 0;
    if (argc > 2) {
        printf("flags %ld\n", flags_live(n));
        return 0;
    }
    for (long i = 1; i <= n; i++) s += count_to(i, 0);
    printf("sum %ld\n", s);
    return 0;
}
