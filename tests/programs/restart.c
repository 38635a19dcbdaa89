/* A thread asleep in a system call whose instruction ends the bytes a probe
 * patches (`raw_read`: xor, nop, syscall: five bytes, then ret), for
 * tests/target.rs. Lines on stdin drive it: "sig" signals the reader (a
 * handler with SA_RESTART: the kernel restarts the read at the syscall
 * instruction), "byte" gives it a byte to read (it reads again at once),
 * "end" ends it. Its answers go to stdout. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

long raw_read(int fd, void *buf, unsigned long n);
__asm__(".text\n"
        ".globl raw_read\n"
        ".type raw_read, @function\n"
        "raw_read:\n"
        "  xor %eax, %eax\n"
        "  nop\n"
        "  syscall\n"
        "  ret\n"
        ".size raw_read, .-raw_read\n");

static int pipefd[2];
static volatile sig_atomic_t handled;
static volatile pid_t reader_tid;
static volatile long reads;

/* A guard against a hang when the reader is lost (it restarted its call
 * inside the jump): ten seconds without the awaited change end it. */
static struct timespec since;

static void waiting(const char *what) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - since.tv_sec > 10) {
        printf("stuck %s\n", what);
        fflush(stdout);
        _exit(4);
    }
    sched_yield();
}

static void on_usr1(int sig) {
    (void)sig;
    handled++;
}

static void *reader(void *arg) {
    (void)arg;
    reader_tid = gettid();
    char c;
    for (;;) {
        long r = raw_read(pipefd[0], &c, 1);
        if (r != 1 || c == 'q')
            break;
        reads++;
    }
    return NULL;
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    if (pipe(pipefd) != 0)
        return 2;
    pthread_t t;
    pthread_create(&t, NULL, reader, NULL);
    while (reader_tid == 0)
        sched_yield();
    printf("ready %d\n", (int)reader_tid);
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "sig", 3) == 0) {
            int before = handled;
            clock_gettime(CLOCK_MONOTONIC, &since);
            pthread_kill(t, SIGUSR1);
            while (handled == before)
                waiting("handler");
            printf("handled %d\n", (int)handled);
        } else if (strncmp(line, "byte", 4) == 0) {
            long before = reads;
            if (write(pipefd[1], "x", 1) != 1)
                return 3;
            clock_gettime(CLOCK_MONOTONIC, &since);
            while (reads == before)
                waiting("read");
            printf("read %ld\n", reads);
        } else if (strncmp(line, "end", 3) == 0) {
            if (write(pipefd[1], "q", 1) != 1)
                return 3;
            pthread_join(t, NULL);
            printf("done %ld %d\n", reads, (int)handled);
            return 0;
        }
        fflush(stdout);
    }
    return 1;
}
