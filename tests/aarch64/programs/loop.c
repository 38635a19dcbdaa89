/* A function whose loop jumps back to its first instruction
 * (tests/aarch64/guest.sh): the probe's `B` there would run the probe on
 * every iteration, so the loop's branch is retargeted to the second
 * displaced word, whose `B` leads to the relocated copy past the probe.
 * `loop N`: N calls of count_to(i); prints the sum of the results.
 * `loop N flags`: flags_live(N), whose flags are live at a statement.
 * `loop N excl`: N calls of excl_add, a statement on a load-exclusive. */
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

/* excl_add(p, v): *p += v atomically; returns the attempts it took. The
 * statement at excl_add+8 is the `ldaxr` opening the exclusive sequence,
 * which must not move (the monitor would not survive the trampoline): its
 * B goes on the `mov x3, x1` before it (the lead). The retry loop goes
 * back to the lead, so the probe fires once per attempt. */
__asm__(".text\n"
        ".global excl_add\n"
        ".type excl_add, %function\n"
        "excl_add:\n"
        "    mov x5, #0\n"
        "1:  mov x3, x1\n"
        "    ldaxr x2, [x0]\n"
        "    add x5, x5, #1\n"
        "    add x2, x2, x3\n"
        "    stlxr w4, x2, [x0]\n"
        "    cbnz w4, 1b\n"
        "    mov x0, x5\n"
        "    ret\n"
        ".size excl_add, .-excl_add\n");
long excl_add(long *p, long v);

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10, s = 0;
    if (argc > 2 && argv[2][0] == 'f') {
        printf("flags %ld\n", flags_live(n));
        return 0;
    }
    if (argc > 2) {
        long total = 0, tries = 0;
        for (long i = 0; i < n; i++) tries += excl_add(&total, 7);
        printf("excl %ld %ld\n", total, tries);
        return 0;
    }
    for (long i = 1; i <= n; i++) s += count_to(i, 0);
    printf("sum %ld\n", s);
    return 0;
}
