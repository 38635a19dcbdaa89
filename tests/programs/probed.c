/* A target for function probes (tests/target.rs). Each mode exercises one
 * prologue shape; the program prints a checksum, so traced and untraced runs
 * can be compared. Built with gcc -O2 (and -fcf-protection for endbr64). */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

volatile long g = 7;

/* Shorter than the 5-byte jump (mov + ret), padding follows at -O2. */
__attribute__((noinline)) long tiny(long x) { return x; }
/* A plain leaf. */
__attribute__((noinline)) long work(long x) { return x * 2 + 1; }
/* Returns no sooner than `ns` nanoseconds after it was called. */
__attribute__((noinline)) long spin(long ns) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < ns);
    return 1;
}
/* First instruction reads a global RIP-relative. */
__attribute__((noinline)) long rip_first(void) { return g + 1; }
/* A conditional jump within the first 5 bytes: odd x gives 2x, even x. */
__asm__(".text\n.globl cond_first\n.type cond_first,@function\n.p2align 4\ncond_first:\n"
        "  test $1, %dil\n  jz 1f\n  lea (%rdi,%rdi), %rax\n  ret\n1:\n  mov %rdi, %rax\n  ret\n"
        ".size cond_first, .-cond_first\n");
long cond_first(long x);
/* A loop that jumps back to the function's first instruction. */
__asm__(".text\n.globl loopy\n.type loopy,@function\n.p2align 4\nloopy:\n"
        "  sub $1, %rdi\n  jnz loopy\n  mov $42, %eax\n  ret\n.size loopy, .-loopy\n");
long loopy(long n);
/* Loops back to their first instruction from past the 5 bytes a jump
 * displaces (acc + n + (n-1) + ... + 1): a short loop, and one with 40
 * bytes of body. */
__asm__(".text\n.globl loop_small\n.type loop_small,@function\n.p2align 4\nloop_small:\n"
        "  add %rdi, %rsi\n  sub $1, %rdi\n  jnz loop_small\n  mov %rsi, %rax\n  ret\n.size loop_small, .-loop_small\n");
__asm__(".text\n.globl loop_long\n.type loop_long,@function\n.p2align 4\nloop_long:\n"
        "  add %rdi, %rsi\n  sub $1, %rdi\n  .fill 40, 1, 0x90\n  jnz loop_long\n  mov %rsi, %rax\n  ret\n"
        ".size loop_long, .-loop_long\n");
long loop_small(long n, long acc);
long loop_long(long n, long acc);
/* Stores 1 through its argument at its first instruction: given NULL, it
 * faults there (in a trampoline's copy of it when it is probed). */
__asm__(".text\n.globl poke\n.type poke,@function\n.p2align 4\npoke:\n"
        "  movq $1, (%rdi)\n  ret\n.size poke, .-poke\n");
void poke(long *p);

volatile long sink;

/* fork() inside a function with a return probe: both processes return
 * through the return trampoline, each with its own shadow stack. */
__attribute__((noinline)) long forked(void) {
    pid_t c = fork();
    sink += c;
    return c;
}

/* Recursion that is not a loop in disguise (the volatile store after the
 * call keeps gcc from turning it into one). */
__attribute__((noinline)) long rec(long n) {
    if (n <= 0) return 0;
    long r = rec(n - 1);
    sink += r;
    return r + 1;
}

/* A tail call (`jmp five` at -O2) to a function with five arguments:
 * both probed, the callee's trampoline runs on the caller's return slot
 * and must keep every argument register (r8 included). */
__attribute__((noinline)) long five(long a, long b, long c, long d, long e) {
    sink += e;
    return a + 2 * b + 3 * c + 4 * d + 5 * e;
}
__attribute__((noinline)) long tail5(long a, long b, long c, long d, long e) {
    sink++;
    return five(a, b, c, d, e + 1);
}

/* Eight arguments: the seventh and eighth on the stack. */
__attribute__((noinline)) long eight(long a, long b, long c, long d, long e, long f, long g, long h) {
    sink += h;
    return a + b + c + d + e + f + 10 * g + 100 * h;
}

/* longjmp out of a stack of probed frames. */
static jmp_buf jb;
__attribute__((noinline)) void jumper(long n) {
    if (n == 0) longjmp(jb, 1);
    jumper(n - 1);
    sink++;
}

static void on_signal(int sig) {
    (void)sig;
    sink += work(1);
}

static long n_calls = 1000;

static void *thread_main(void *arg) {
    long s = 0;
    for (long i = 0; i < n_calls; i++) s += work(i);
    *(long *)arg = s;
    return 0;
}

/* `busy`: 4 threads call rec(20) until stdin says stop; each checks every
 * result, so a return address handed back wrong shows. */
static volatile int busy_stop;
static void *busy_main(void *arg) {
    long bad = 0, calls = 0, want = rec(20);
    while (!busy_stop) {
        bad += rec(20) != want;
        calls++;
    }
    ((long *)arg)[0] = bad;
    ((long *)arg)[1] = calls;
    return 0;
}

/* A thread that ends by pthread_exit, not by returning. */
static void *thread_exit(void *arg) {
    *(long *)arg = work(1);
    pthread_exit(0);
}

/* A thread that blocks until the process ends. */
static int never[2];
static void *thread_block(void *arg) {
    char c;
    (void)arg;
    while (read(never[0], &c, 1) != 0) {
    }
    return 0;
}

extern char **environ;

/* Allocations for the "leak" mode, kept and given back. */
static void *volatile kept[64];
__attribute__((noinline)) void *keeper(int i) { return kept[i] = malloc(32 + i); }
__attribute__((noinline)) void *borrower(int i) { return malloc(64 + i); }

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "work";
    if (argc > 2) n_calls = atol(argv[2]);
    long s = 0;
    if (!strcmp(mode, "work")) {
        for (long i = 0; i < n_calls; i++) s += work(i);
    } else if (!strcmp(mode, "shapes")) {
        for (long i = 0; i < n_calls; i++) s += rip_first() + cond_first(i) + tiny(i) + loopy(3);
    } else if (!strcmp(mode, "threads")) {
        pthread_t t[8];
        long r[8];
        for (int i = 0; i < 8; i++) pthread_create(&t[i], 0, thread_main, &r[i]);
        for (int i = 0; i < 8; i++) {
            pthread_join(t[i], 0);
            s += r[i];
        }
    } else if (!strcmp(mode, "spin")) {
        for (long i = 0; i < n_calls; i++) s += spin(200000);
    } else if (!strcmp(mode, "rec")) {
        for (long i = 0; i < n_calls; i++) s += rec(100);
    } else if (!strcmp(mode, "rec10k")) {
        /* Recursion 10,000 deep. */
        for (long i = 0; i < n_calls; i++) s += rec(10000);
    } else if (!strcmp(mode, "crash")) {
        /* Work, then die of SIGSEGV. */
        for (long i = 0; i < n_calls; i++) s += work(i);
        raise(SIGSEGV);
    } else if (!strcmp(mode, "shrink")) {
        /* A hostile target: truncate and grow the tracer's region through
         * /proc/self/map_files, then keep working. */
        FILE *m = fopen("/proc/self/maps", "r");
        char line[512], path[600] = "";
        while (m && fgets(line, sizeof line, m)) {
            if (strstr(line, "memfd:telco-stap")) {
                char *dash = strchr(line, '-'), *space = strchr(line, ' ');
                if (dash && space) {
                    *space = 0;
                    snprintf(path, sizeof path, "/proc/self/map_files/%s", line);
                }
                break;
            }
        }
        if (m) fclose(m);
        int fd = path[0] ? open(path, O_RDWR) : -1;
        printf("open %s\n", fd >= 0 ? "ok" : "failed");
        printf("shrink %s\n", fd >= 0 && ftruncate(fd, 0) == 0 ? "done" : "refused");
        printf("grow %s\n", fd >= 0 && ftruncate(fd, 1L << 30) == 0 ? "done" : "refused");
        fflush(stdout);
        for (long i = 0; i < n_calls; i++) s += work(i);
    } else if (!strcmp(mode, "scribble")) {
        /* A hostile target: work, then overwrite every byte of the region
         * it shares with the tracer (argument 3: the byte, default 0xff),
         * then work again. */
        for (long i = 0; i < n_calls; i++) s += work(i);
        int byte = argc > 3 ? atoi(argv[3]) : 0xff;
        FILE *m = fopen("/proc/self/maps", "r");
        char line[512];
        while (m && fgets(line, sizeof line, m)) {
            if (strstr(line, "memfd:telco-stap")) {
                unsigned long lo = strtoul(line, 0, 16), hi = strtoul(strchr(line, '-') + 1, 0, 16);
                memset((void *)lo, byte, hi - lo);
            }
        }
        if (m) fclose(m);
        for (long i = 0; i < n_calls; i++) s += work(i);
    } else if (!strcmp(mode, "loops")) {
        for (long i = 0; i < n_calls; i++) s += loop_small(5, i) + loop_long(4, i);
    } else if (!strcmp(mode, "fault")) {
        /* Work, then store through a null pointer (SIGSEGV at poke). */
        for (long i = 0; i < n_calls; i++) s += work(i);
        long *volatile p = 0;
        poke(p);
    } else if (!strcmp(mode, "life")) {
        /* Lifecycles: 4 threads (2 end by pthread_exit), 2 forked children
         * (exit and _exit), a forked child that execs this program (`work
         * 1`), and a spawned one (posix_spawn: vfork and exec). */
        pthread_t t[4];
        long r[4];
        for (int i = 0; i < 4; i++) pthread_create(&t[i], 0, i % 2 ? thread_exit : thread_main, &r[i]);
        for (int i = 0; i < 4; i++) {
            pthread_join(t[i], 0);
            s += r[i];
        }
        for (int i = 0; i < 3; i++) {
            pid_t c = fork();
            if (c == 0) {
                if (i == 0) exit(0);
                if (i == 1) _exit(0);
                execl("/proc/self/exe", "prog", "work", "1", (char *)0);
                _exit(9);
            }
            int st = 0;
            waitpid(c, &st, 0);
            s += WIFEXITED(st) && WEXITSTATUS(st) == 0;
        }
        char *args[] = {"prog", "work", "2", 0};
        pid_t q;
        if (posix_spawn(&q, "/proc/self/exe", 0, 0, args, environ)) return 7;
        int st = 0;
        waitpid(q, &st, 0);
        s += WIFEXITED(st) && WEXITSTATUS(st) == 0;
    } else if (!strcmp(mode, "lifewait")) {
        /* For -p: two threads blocked, say ready, wait for a line, work. */
        if (pipe(never)) return 8;
        pthread_t t[2];
        for (int i = 0; i < 2; i++) pthread_create(&t[i], 0, thread_block, 0);
        printf("ready\n");
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin)) return 2;
        s += work(1);
    } else if (!strcmp(mode, "eight")) {
        for (long i = 0; i < n_calls; i++) s += eight(1, 1, 1, 1, 1, 1, 1, i);
    } else if (!strcmp(mode, "tail")) {
        for (long i = 0; i < n_calls; i++) s += tail5(i, 1, 2, 3, i);
    } else if (!strcmp(mode, "deep")) {
        /* Deeper than a thread's return-probe stack (1024 frames). */
        for (long i = 0; i < n_calls; i++) s += rec(1100);
    } else if (!strcmp(mode, "jump")) {
        for (long i = 0; i < n_calls; i++) {
            if (!setjmp(jb)) jumper(5);
            s += rec(3);
        }
    } else if (!strcmp(mode, "signal")) {
        signal(SIGUSR1, on_signal);
        for (long i = 0; i < n_calls; i++) {
            raise(SIGUSR1);
            s += work(i);
        }
    } else if (!strcmp(mode, "fork")) {
        /* The child inherits the patched code and the shared region. */
        pid_t c = fork();
        for (long i = 0; i < n_calls; i++) s += work(i);
        if (c == 0) _exit(s == n_calls * n_calls ? 0 : 1);
        int st = 0;
        waitpid(c, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return 4;
    } else if (!strcmp(mode, "forkret")) {
        long c = forked();
        for (long i = 0; i < n_calls; i++) s += work(i);
        if (c == 0) _exit(s == n_calls * n_calls ? 0 : 1);
        int st = 0;
        waitpid((pid_t)c, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return 4;
    } else if (!strcmp(mode, "exec")) {
        /* Work, then become another program: the hooks go with the old image. */
        for (long i = 0; i < n_calls; i++) s += work(i);
        printf("before exec %ld\n", s);
        fflush(stdout);
        execl("/bin/echo", "echo", "after exec", (char *)0);
        return 5;
    } else if (!strcmp(mode, "leak")) {
        /* scripts/malloc-leaks.tp's known answer: 30 blocks from keeper()
         * never freed, 20 from borrower() freed. */
        for (int i = 0; i < 30; i++) s += keeper(i) != 0;
        for (int i = 0; i < 20; i++) free(borrower(i));
        char line[32];
        int n = snprintf(line, sizeof line, "leak %ld\n", s);
        return write(1, line, (size_t)n) == n ? 0 : 6;
    } else if (!strcmp(mode, "alloc") || !strcmp(mode, "open")) {
        /* Known answers for scripts/malloc-sizes.tp and file-opens.tp:
         * nothing else here allocates or opens (the result is written
         * without stdio, which would allocate its buffer). */
        if (!strcmp(mode, "alloc")) {
            for (long i = 0; i < n_calls; i++) {
                void *p = malloc(100), *q = malloc(5000);
                s += (p != 0) + (q != 0);
                free(p);
                free(q);
            }
        } else {
            for (int i = 0; i < 2; i++) {
                int fd = open("/dev/null", O_RDONLY);
                s += fd >= 0;
                if (fd >= 0) close(fd);
            }
            s += open("/nonexistent/telco-stap", O_RDONLY) < 0;
        }
        char line[64];
        int n = snprintf(line, sizeof line, "%s %ld\n", mode, s);
        return write(1, line, (size_t)n) == n ? 0 : 6;
    } else if (!strcmp(mode, "once")) {
        /* One probed call, then block until stdin closes: output of the
         * probe must reach the tracer's stdout while we still run. */
        s += work(41);
        char line[16];
        if (!fgets(line, sizeof line, stdin)) line[0] = 0;
    } else if (!strcmp(mode, "busy")) {
        pthread_t t[4];
        long r[4][2];
        for (int i = 0; i < 4; i++) pthread_create(&t[i], 0, busy_main, r[i]);
        printf("ready\n");
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin)) return 2;
        busy_stop = 1;
        for (int i = 0; i < 4; i++) {
            pthread_join(t[i], 0);
            s += r[i][0];
        }
        /* s: results that were wrong (0). */
    } else if (!strcmp(mode, "forkwait")) {
        /* For -p: say ready; on "fork", fork a child that takes over stdin:
         * "work" runs work() n times and prints the sum, "end" ends it;
         * the parent waits for it. */
        printf("ready\n");
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin)) return 2;
        pid_t c = fork();
        if (c == 0) {
            printf("child %d\n", (int)getpid());
            fflush(stdout);
            while (fgets(line, sizeof line, stdin) && strncmp(line, "end", 3)) {
                long w = 0;
                for (long i = 0; i < n_calls; i++) w += work(i);
                printf("worked %ld\n", w);
                fflush(stdout);
            }
            _exit(0);
        }
        int st;
        waitpid(c, &st, 0);
        s = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    } else if (!strcmp(mode, "wait")) {
        /* For -p: say where work is, then wait for a line on stdin, work. */
        printf("ready %p\n", (void *)work);
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin)) return 2;
        for (long i = 0; i < n_calls; i++) s += work(i);
        /* Then wait again so the test can read the code back. */
        printf("worked %ld\n", s);
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin)) return 2;
    }
    printf("%s %ld\n", mode, s);
    return strcmp(mode, "exit3") ? 0 : 3;
}
