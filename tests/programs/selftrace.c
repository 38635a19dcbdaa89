/* Target for tests/target.rs: a program that ptraces its own child (the
 * child asks with PTRACE_TRACEME, stops, works; with a second argument
 * it then execs /bin/true), as debuggers and sandboxes do. Prints each
 * side's sum of work() and what the parent saw. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>
__attribute__((noinline)) long work(long x) { return x * 2 + 1; }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    pid_t c = fork();
    if (c == 0) {
        ptrace(PTRACE_TRACEME, 0, 0, 0);
        raise(SIGSTOP);
        long s = 0;
        for (int i = 0; i < n; i++) s += work(i);
        if (argc > 2) execl("/bin/true", "true", (char *)0);
        printf("child %ld\n", s);
        fflush(stdout);
        _exit(0);
    }
    int st, stops = 0;
    waitpid(c, &st, 0);
    while (WIFSTOPPED(st)) {
        stops++;
        ptrace(PTRACE_CONT, c, 0, 0);
        waitpid(c, &st, 0);
    }
    long s = 0;
    for (int i = 0; i < n; i++) s += work(i);
    printf("parent %ld stops %d exited %d\n", s, stops, WIFEXITED(st));
    return 0;
}
