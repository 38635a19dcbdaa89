/* What a program finds at main of its signal state, for the entry marker
 * (tests/target.rs): the marker unblocks SIGURG and sends it to itself, and
 * the tracer takes it back with the thread's old mask. `sigstate block`
 * blocks SIGURG and SIGUSR1, ignores SIGWINCH, then runs itself again;
 * every run prints the signals blocked, pending and ignored at main, then
 * calls work once. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

__attribute__((noinline)) long work(long x) { return x * 2 + 1; }

static void list(const char *what, int (*has)(int, void *), void *arg) {
    printf("%s:", what);
    for (int s = 1; s < 65; s++)
        if (has(s, arg)) printf(" %d", s);
    printf("\n");
}

static int in_set(int s, void *set) { return sigismember((sigset_t *)set, s) == 1; }

static int ignored(int s, void *unused) {
    struct sigaction a;
    (void)unused;
    return sigaction(s, NULL, &a) == 0 && a.sa_handler == SIG_IGN;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "block") == 0) {
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, SIGURG);
        sigaddset(&s, SIGUSR1);
        sigprocmask(SIG_BLOCK, &s, NULL);
        signal(SIGWINCH, SIG_IGN);
        execl("/proc/self/exe", argv[0], (char *)NULL);
        return 127;
    }
    sigset_t blocked, pending;
    sigprocmask(SIG_BLOCK, NULL, &blocked);
    sigpending(&pending);
    list("blocked", in_set, &blocked);
    list("pending", in_set, &pending);
    list("ignored", ignored, NULL);
    printf("work %ld\n", work(20));
    return 0;
}
