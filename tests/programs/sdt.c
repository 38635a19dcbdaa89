/* SDT markers and statement sites for tests/markers.rs.
 *
 * `work N`: N calls of step(); each runs the `app:loop` marker 3 times
 * (integer and string arguments) and `app:tick` once (a negative int).
 * While `app:tick`'s semaphore is set (a tracer probes it), step() adds
 * 1000: the output says whether the program saw it. `wait`: for -p, say
 * ready, then on each line of stdin print the semaphore and run step once.
 * `loop N`: a loop whose head is the global label `loop_head` (a
 * statement site) runs N times. `live N`: N calls of live_state, a leaf
 * function that keeps its values in the red zone and its flags across the
 * statement site `live_site`. `tails N`: N calls each of call_tail and
 * pop_tail, whose last instruction, a one-byte `ret` with the next
 * function right after it, is a statement site (`call_tail_site`, just
 * after a call; `pop_tail_site`, after `lea; pop`). `twice N`: the
 * `app:twice` marker, at two places: at the start of refuse_mark, where
 * no jump fits (a loop's head 1 byte after it), and in twice_ok's loop
 * (N times each). `adjacent N`: the markers `app:first` and `app:second`
 * one right after the other (two `nop`s), N times. */
#define _SDT_HAS_SEMAPHORES 1
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>

unsigned short app_loop_semaphore __attribute__((unused, section(".probes")));
unsigned short app_tick_semaphore __attribute__((unused, section(".probes")));
unsigned short app_twice_semaphore __attribute__((unused, section(".probes")));
unsigned short app_first_semaphore __attribute__((unused, section(".probes")));
unsigned short app_second_semaphore __attribute__((unused, section(".probes")));

__attribute__((noinline)) long step(long i, const char *name) {
    long r = 0;
    for (int k = 0; k < 3; k++) {
        DTRACE_PROBE3(app, loop, i, k, name);
        r += k;
    }
    if (app_tick_semaphore) r += 1000;
    STAP_PROBE1(app, tick, (int)-i);
    return r;
}

/* Something after step, so that its last marker has room. */
__attribute__((noinline)) long after_step(long x) { return x * 3; }

volatile long sink;

__attribute__((noinline)) long looping(long n) {
    long s = 0;
    for (long i = 0; i < n; i++) {
        __asm__ volatile(".globl loop_head\nloop_head:");
        s += i;
        sink = s; /* the loop's line */
    }
    return s;
}

/* A site no jump can take: the loop's head is 1 byte after the
 * function's start, inside even a 2-byte jump there, and nothing comes
 * before it. */
__asm__(".text\n.globl refuse_me\n.type refuse_me,@function\n.p2align 4\nrefuse_me:\n"
        "  nop\n1:\n  sub $1, %rdi\n  jg 1b\n  mov %rdi, %rax\n  ret\n.size refuse_me, .-refuse_me\n");
long refuse_me(long n);

/* The `app:twice` marker where no jump fits, as refuse_me's site. */
__asm__(".text\n.globl refuse_mark\n.type refuse_mark,@function\n.p2align 4\nrefuse_mark:\n" STAP_PROBE_ASM(app, twice, )
        "1:\n  sub $1, %rdi\n  jg 1b\n  mov %rdi, %rax\n  ret\n.size refuse_mark, .-refuse_mark\n");
long refuse_mark(long n);

/* Two markers with nothing between them: a jump at the first would take
 * the second's `nop`. */
__attribute__((noinline)) long adjacent(long n) {
    long s = 0;
    for (long i = 0; i < n; i++) {
        STAP_PROBE(app, first);
        STAP_PROBE1(app, second, i);
        s += i;
        sink = s;
    }
    return s;
}

/* The same marker where a jump fits. */
__attribute__((noinline)) long twice_ok(long n) {
    long s = 0;
    for (long i = 0; i < n; i++) {
        STAP_PROBE(app, twice);
        s += i;
        sink = s;
    }
    return s;
}

/* A leaf function whose state at `live_site` is below the stack pointer
 * (the red zone) and in the flags (a compare before its branch, and the
 * carry it leaves, added after): a probe there must leave both as they
 * were. */
__asm__(".text\n.globl live_state\n.type live_state,@function\n.p2align 4\nlive_state:\n"
        "  movq %rdi, -8(%rsp)\n  movq $85, -16(%rsp)\n  cmpq $10, %rdi\n"
        ".globl live_site\nlive_site:\n  .byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n"
        "  jl 1f\n  movq -8(%rsp), %rax\n  adcq $0, %rax\n  addq -16(%rsp), %rax\n  ret\n"
        "1:\n  movq -8(%rsp), %rax\n  adcq $0, %rax\n  subq -16(%rsp), %rax\n  ret\n.size live_state, .-live_state\n");
long live_state(long x);

/* No alignment between these functions: nothing pads their `ret`s. */
__asm__(".text\n.globl triple\n.type triple,@function\n.p2align 4\ntriple:\n  lea (%rdi,%rdi,2), %rax\n  ret\n"
        ".size triple, .-triple\n"
        ".globl call_tail\n.type call_tail,@function\ncall_tail:\n  add $1, %rdi\n  call triple\n"
        ".globl call_tail_site\ncall_tail_site:\n  ret\n.size call_tail, .-call_tail\n"
        ".globl pop_tail\n.type pop_tail,@function\npop_tail:\n  push %rbx\n  mov %rdi, %rbx\n  add $7, %rdi\n  sub $7, %rdi\n"
        "  lea (%rbx,%rbx,2), %rax\n  pop %rbx\n.globl pop_tail_site\npop_tail_site:\n  ret\n.size pop_tail, .-pop_tail\n"
        ".globl after_tails\n.type after_tails,@function\nafter_tails:\n  xor %eax, %eax\n  ret\n"
        ".size after_tails, .-after_tails\n");
long call_tail(long x);
long pop_tail(long x);
long after_tails(void);

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "work";
    long n = argc > 2 ? atol(argv[2]) : 5, s = 0;
    if (!strcmp(mode, "work")) {
        for (long i = 0; i < n; i++) s += step(i, "hello");
    } else if (!strcmp(mode, "live")) {
        for (long i = 0; i < n; i++) s += live_state(i);
    } else if (!strcmp(mode, "loop")) {
        s = looping(n) + refuse_me(3) + after_step(0);
    } else if (!strcmp(mode, "adjacent")) {
        s = adjacent(n);
    } else if (!strcmp(mode, "twice")) {
        s = refuse_mark(n) + twice_ok(n);
    } else if (!strcmp(mode, "tails")) {
        for (long i = 0; i < n; i++) s += call_tail(i) + 1000 * pop_tail(i) + after_tails();
    } else if (!strcmp(mode, "wait")) {
        char line[16];
        printf("ready\n");
        fflush(stdout);
        while (fgets(line, sizeof line, stdin)) {
            printf("semaphore %d\n", app_tick_semaphore);
            fflush(stdout);
            s += step(1, "wait");
        }
    }
    printf("%s %ld\n", mode, s);
    return 0;
}
