/* A service as a test sees one: a master and N workers forked before any
 * tracer came (`service N`), or a daemon (`service daemon`). It prints "ready" once every worker waits;
 * on "go" on its stdin each worker makes 1000 calls of work() and exits,
 * then the master makes its own 1000 and prints the total; on "end" it
 * exits. With "stay", the workers wait for a second "go" too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

__attribute__((noinline)) long work(long x) {
    __asm__ volatile("" ::: "memory");
    return 2 * x + 1;
}

static long calls(void) {
    long sum = 0;
    for (long i = 0; i < 1000; i++) sum += work(i);
    return sum;
}

/* `service daemon`: the command makes 1000 calls, says "command PID",
 * and starts a daemon the usual way (fork, setsid, fork, the middle one
 * exits), waits for the middle one and exits. The daemon says "daemon
 * PID", and makes 1000 calls for each "go" on its stdin (saying "worked
 * SUM") until anything else or the end of its input. */
static int daemon_mode(void) {
    long sum = calls();
    printf("command %d %ld\n", (int)getpid(), sum);
    fflush(stdout);
    pid_t p = fork();
    if (p < 0) return 2;
    if (p > 0) {
        waitpid(p, NULL, 0);
        return 0;
    }
    setsid();
    pid_t q = fork();
    if (q < 0) _exit(2);
    if (q > 0) _exit(0);
    printf("daemon %d\n", (int)getpid());
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin) && strncmp(line, "go", 2) == 0) {
        printf("worked %ld\n", calls());
        fflush(stdout);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "daemon") == 0) return daemon_mode();
    int n = argc > 1 ? atoi(argv[1]) : 3;
    int rounds = argc > 2 && strcmp(argv[2], "stay") == 0 ? 2 : 1;
    /* One go pipe per worker: a fast worker must not take another's turn. */
    int go[32][2], up[2];
    if (n < 1 || n > 32 || pipe(up)) return 2;
    for (int w = 0; w < n; w++) {
        if (pipe(go[w])) return 2;
        pid_t p = fork();
        if (p < 0) return 2;
        if (p == 0) {
            int in = go[w][0];
            close(go[w][1]);
            close(up[0]);
            char c = 'r';
            if (write(up[1], &c, 1) != 1) _exit(3);
            for (int r = 0; r < rounds; r++) {
                if (read(in, &c, 1) != 1) _exit(4);
                long s = calls();
                if (write(up[1], &s, sizeof s) != sizeof s) _exit(5);
            }
            _exit(0);
        }
    }
    for (int w = 0; w < n; w++) close(go[w][0]);
    for (int w = 0; w < n; w++) {
        char c;
        if (read(up[0], &c, 1) != 1) return 2;
    }
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    char line[64];
    for (int r = 0; r < rounds; r++) {
        if (!fgets(line, sizeof line, stdin)) return 2;
        for (int w = 0; w < n; w++)
            if (write(go[w][1], "g", 1) != 1) return 2;
        long total = 0;
        for (int w = 0; w < n; w++) {
            long s;
            if (read(up[0], &s, sizeof s) != sizeof s) return 2;
            total += s;
        }
        total += calls();
        printf("worked %ld\n", total);
        fflush(stdout);
    }
    for (int w = 0; w < n; w++) wait(NULL);
    if (!fgets(line, sizeof line, stdin)) return 0;
    return 0;
}
