/* Probes where no jump fits, placed with a trap (tests/traps.rs). `tick`
 * is a lone `ret` with a `ud2` right after it (not padding: nothing but a
 * trap can probe it, and a thread sent on past the trap dies of SIGILL).
 * `tock` is a lone `ret` packed against the next function by
 * -falign-functions=1, as gcc makes them. `looper` branches
 * back into its first five bytes, alone in a section of its own with no
 * neighbour to hop through. `entered` has room for a jump, but another
 * function jumps to its second instruction, inside it: only pass 2 sees
 * that. `add3` is an ordinary function (a trap there
 * only with -D TRAP_PROBES=1).
 *
 *   traps basic N     N rounds of tick(), tock(), add3(i, 1, 2), looper(3),
 *                     entered(), side_door()
 *   traps signals     its own SIGTRAP handler (raise, int3), what its
 *                     sigaction says, a thread that blocks every signal,
 *                     a handler that blocks every signal, 8 threads at once
 *   traps wait        "ready", then 4 threads call tick() (the first
 *                     with every signal blocked) until a line comes on
 *                     stdin; "alive"
 *   traps fork N      a child calls tick() N times, then the parent */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef __x86_64__
__asm__(".text\n"
        ".globl tick\n"
        ".type tick,@function\n"
        "tick:\n"
        "  ret\n"
        ".size tick,.-tick\n"
        "  ud2\n");
void tick(void);
__attribute__((noipa)) void tock(void) {}

/* xor eax,eax (2 bytes); then a loop whose `jl` goes back to +2, inside
 * the 5 bytes a jump at the entry would take. int3 around it: no code to
 * host a hop. */
__asm__(".pushsection .text.lonely,\"ax\",@progbits\n"
        ".fill 192,1,0xcc\n"
        ".globl looper\n"
        ".type looper,@function\n"
        "looper:\n"
        "  xor %eax,%eax\n"
        "1: add $1,%eax\n"
        "  cmp %edi,%eax\n"
        "  jl 1b\n"
        "  ret\n"
        ".size looper,.-looper\n"
        ".fill 192,1,0xcc\n"
        ".globl entered\n"
        ".type entered,@function\n"
        "entered:\n"
        "  xor %eax,%eax\n"
        "entered_inner:\n"
        "  add $7,%eax\n"
        "  ret\n"
        ".size entered,.-entered\n"
        ".fill 192,1,0xcc\n"
        ".popsection\n"
        ".pushsection .text.door,\"ax\",@progbits\n"
        ".globl side_door\n"
        ".type side_door,@function\n"
        "side_door:\n"
        "  mov $100,%eax\n"
        "  jmp entered_inner\n"
        ".size side_door,.-side_door\n"
        ".popsection\n");
long looper(long n);
long entered(void);
long side_door(void);
#else
/* Elsewhere (aarch64, where a trap takes the one instruction a branch
 * takes: -D TRAP_PROBES=1 places them) the same functions in C. */
__attribute__((noipa)) void tick(void) {}
__attribute__((noipa)) void tock(void) {}
__attribute__((noipa)) long looper(long n) {
    long i = 0;
    do i++; while (i < n);
    return i;
}
__attribute__((noipa)) long entered(void) { return 7; }
__attribute__((noipa)) long side_door(void) { return 107; }
#endif

__attribute__((noipa)) long add3(long a, long b, long c) { return a + b + c; }

static atomic_long own;
static atomic_int stop;

static void on_trap(int sig, siginfo_t *info, void *uc) {
    (void)sig, (void)info, (void)uc;
    own++;
}

static void on_usr1(int sig) {
    (void)sig;
    tick();
}

static void *blocker(void *arg) {
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    for (int i = 0; i < 1000; i++) tick();
    return NULL;
}

static void *hammer(void *arg) {
    long n = (long)arg;
    for (long i = 0; i < n; i++) tick();
    return NULL;
}

static void *spin(void *arg) {
    if (arg) {
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, NULL);
    }
    while (!atomic_load(&stop)) tick();
    return NULL;
}

static int signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_trap;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGTRAP, &sa, NULL);
    raise(SIGTRAP);
#ifdef __x86_64__
    /* Its own trap instruction (an aarch64 `brk` stays on itself: its
     * handler would have to step over it). */
    __asm__ volatile("int3");
#endif
    struct sigaction now;
    sigaction(SIGTRAP, NULL, &now);
    printf("view %s\n", now.sa_sigaction == on_trap && (now.sa_flags & SA_SIGINFO) ? "ok" : "changed");
    pthread_t t;
    pthread_create(&t, NULL, blocker, NULL);
    pthread_join(t, NULL);
    struct sigaction u;
    memset(&u, 0, sizeof u);
    u.sa_handler = on_usr1;
    sigfillset(&u.sa_mask);
    sigaction(SIGUSR1, &u, NULL);
    raise(SIGUSR1);
    pthread_t ts[8];
    for (int i = 0; i < 8; i++) pthread_create(&ts[i], NULL, hammer, (void *)100000L);
    for (int i = 0; i < 8; i++) pthread_join(ts[i], NULL);
    printf("own %ld\n", (long)own);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "basic";
    if (!strcmp(mode, "signals")) return signals();
    if (!strcmp(mode, "wait")) {
        pthread_t ts[4];
        for (long i = 0; i < 4; i++) pthread_create(&ts[i], NULL, spin, (void *)(long)(i == 0));
        printf("ready\n");
        char line[16];
        if (!fgets(line, sizeof line, stdin)) return 1;
        atomic_store(&stop, 1);
        for (int i = 0; i < 4; i++) pthread_join(ts[i], NULL);
        printf("alive\n");
        return 0;
    }
    long n = argc > 2 ? atol(argv[2]) : 10, s = 0;
    if (!strcmp(mode, "fork")) {
        pid_t child = fork();
        for (long i = 0; i < n; i++) tick();
        if (child == 0) _exit(0);
        int st;
        waitpid(child, &st, 0);
        printf("forked %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return 0;
    }
    for (long i = 0; i < n; i++) {
        tick();
        tock();
        s += add3(i, 1, 2) + looper(3) + entered() + side_door();
    }
    printf("done %ld\n", s);
    return 0;
}
