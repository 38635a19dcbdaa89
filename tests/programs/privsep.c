/* Processes of different privileges around one session (tests/privilege.rs).
 *
 *   privsep worker RING_OFF HEAD DATA_OFF CALLS FORGE
 *     A root master forks a worker that drops to uid and gid 12345, then
 *     (FORGE 1) does what a compromised worker would: points the shared ring's data
 *     offset at the master's `canary` (the same address in both: a fork),
 *     and tries to make the region's trusted mirror writable. The master
 *     then calls work() CALLS times (probed: every call writes an event)
 *     and waits (bounded) until the tracer has cut the worker off (its
 *     region is no longer the session's memfd). Prints what the worker
 *     could do, then "canary N" (N the canary's value: 0x5afe unless a
 *     write landed there). With CALLS2 (once the tracer moved it), the
 *     worker calls work() CALLS2 times, then once on a new thread.
 *   privsep su RING_OFF HEAD DATA_OFF
 *     Run as an unprivileged user: points the ring's data offset at
 *     0x414141414000, calls getuid() (probed), then forks a child that
 *     execs /usr/bin/su (setuid root) with no input, and prints how it
 *     ended ("su exit N" or "su signal S").
 *
 *   privsep itrace CALLS
 *     work() is traced by `.itrace` (calls run translated by the block
 *     tracer): a second thread forges the tracer's answer in every
 *     request slot it sees waiting (state RUN, resume 0x414141414000) as
 *     a process sharing the region could; then tries to make the block
 *     tracer's code writable ("pool code sealed" when it cannot); prints
 *     "itrace S" (the sum of the results) if every call returned.
 *
 * All print "ready" and wait for a line on stdin first (the tracer's
 * begin probe has run by then). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) long work(long x) { return x * 2 + 1; }

static void *worker_thread(void *arg) { return (void *)work((long)arg); }

static volatile uint64_t canary = 0x5afe;

/* The mapping of /proc/self/maps whose name ends with `name` (exactly). */
static unsigned char *mapping(pid_t pid, const char *name, size_t *len) {
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *m = fopen(path, "r");
    unsigned char *at = 0;
    size_t n = strlen(name);
    while (m && fgets(line, sizeof line, m)) {
        line[strcspn(line, "\n")] = 0;
        const char *end = strstr(line, " (deleted)");
        size_t l = end ? (size_t)(end - line) : strlen(line);
        if (l >= n && !memcmp(line + l - n, name, n)) {
            at = (unsigned char *)strtoul(line, 0, 16);
            if (len) *len = strtoul(strchr(line, '-') + 1, 0, 16) - (unsigned long)at;
            break;
        }
    }
    if (m) fclose(m);
    return at;
}

/* Point the ring's data offset at `where`, its head and tail at 0. */
static int forge(long ring_off_at, long head_at, long data_off_at, uint64_t where) {
    size_t len = 0;
    unsigned char *r = mapping(getpid(), "/memfd:telco-stap", &len);
    if (!r) return 0;
    uint64_t ring_off = *(uint64_t *)(r + ring_off_at);
    if (ring_off + 192 > len) return 0;
    unsigned char *rg = r + ring_off;
    *(uint64_t *)(rg + data_off_at) = where - (uint64_t)r;
    *(uint64_t *)(rg + head_at) = 0;
    *(uint64_t *)(rg + head_at + 64) = 0; /* tail */
    return 1;
}

static void wait_line(void) {
    char line[16];
    printf("ready\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) exit(3);
}

static volatile int itrace_done;

/* ItraceSlot (abi/src/region.rs): state at 0, pid at 24, resume at 32. */
static void *forger(void *arg) {
    (void)arg;
    size_t len = 0;
    unsigned char *r = mapping(getpid(), "/memfd:telco-stap", &len);
    while (r && !itrace_done) {
        for (size_t i = 0; i + 48 <= len; i += 8) {
            uint32_t *state = (uint32_t *)(r + i);
            uint32_t st = __atomic_load_n(state, __ATOMIC_RELAXED);
            if ((st == 2 || st == 3) && *(uint64_t *)(r + i + 24) == (uint64_t)getpid()) {
                *(uint64_t *)(r + i + 32) = 0x414141414000ULL;
                __atomic_store_n(state, 5, __ATOMIC_RELEASE);
            }
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "itrace")) {
        wait_line();
        pthread_t t;
        if (pthread_create(&t, 0, forger, 0)) return 4;
        long calls = atol(argv[2]), s = 0;
        for (long i = 0; i < calls; i++) s += work(i);
        itrace_done = 1;
        pthread_join(t, 0);
        /* The block tracer's code, shared with every process the pool is:
         * never writable here. */
        size_t clen = 0;
        unsigned char *code = mapping(getpid(), "/memfd:telco-itrace-code", &clen);
        printf("pool code %s\n", !code ? "absent" : mprotect(code, 4096, PROT_READ | PROT_WRITE) ? "sealed" : "writable");
        printf("itrace %ld\n", s);
        return 0;
    }
    if (argc < 5) {
        fprintf(stderr, "usage: privsep worker|su RING_OFF HEAD DATA_OFF [CALLS [FORGE [WCALLS]]]\n");
        return 2;
    }
    long ring_off_at = atol(argv[2]), head_at = atol(argv[3]), data_off_at = atol(argv[4]);
    wait_line();
    if (!strcmp(argv[1], "worker")) {
        long calls = argc > 5 ? atol(argv[5]) : 1000;
        long wcalls = argc > 7 ? atol(argv[7]) : 0;
        int p[2], q[2], m[2];
        if (pipe(p) || pipe(q) || pipe(m)) return 4;
        pid_t w = fork();
        if (w == 0) {
            close(p[0]);
            close(q[1]);
            close(m[1]);
            gid_t none[1] = {12345};
            if (setgroups(1, none) || setresgid(12345, 12345, 12345) || setresuid(12345, 12345, 12345)) _exit(5);
            char out[256];
            int forged = argc > 6 && atoi(argv[6]) ? forge(ring_off_at, head_at, data_off_at, (uint64_t)&canary) : 0;
            size_t mlen = 0;
            unsigned char *mirror = mapping(getpid(), "/memfd:telco-mirror", &mlen);
            const char *prot = !mirror ? "absent" : mprotect(mirror, 4096, PROT_READ | PROT_WRITE) ? "refused" : "allowed";
            int mem = open("/proc/self/mem", O_RDWR);
            uint64_t x = 1;
            const char *poke =
                !mirror ? "absent" : mem < 0 ? "refused" : pwrite(mem, &x, 8, (off_t)(uintptr_t)mirror) == 8 ? "allowed" : "refused";
            char go;
            if (wcalls && read(m[0], &go, 1) != 1) _exit(7);
            int moved = mapping(getpid(), "/memfd:telco-stap-domain", 0) != 0;
            long ws = 0;
            for (long i = 0; i < wcalls; i++) ws += work(1000000 + i);
            if (wcalls) {
                /* A thread new since the move: its slot is claimed in
                 * the domain's region. */
                pthread_t t;
                void *r;
                if (pthread_create(&t, 0, worker_thread, (void *)2000000L) || pthread_join(t, &r)) _exit(8);
                ws += (long)r;
            }
            int n = snprintf(out, sizeof out,
                             "worker forged %d, mirror mprotect %s, mirror write %s, worker moved %d (sum %ld)\n", forged,
                             prot, poke, moved, ws);
            if (write(p[1], out, (size_t)n) != n) _exit(6);
            close(p[1]);
            /* Stay until the master is done (it kills us). */
            char c;
            while (read(q[0], &c, 1) != 0) {
            }
            _exit(0);
        }
        close(p[1]);
        close(q[0]);
        close(m[0]);
        if (wcalls) {
            char line[16];
            if (!fgets(line, sizeof line, stdin) || write(m[1], "m", 1) != 1) return 3;
        }
        close(m[1]);
        char msg[256] = "";
        ssize_t n = read(p[0], msg, sizeof msg - 1);
        msg[n > 0 ? n : 0] = 0;
        fputs(msg, stdout);
        long s = 0;
        for (long i = 0; i < calls; i++) s += work(i);
        /* Until the tracer has cut the worker off: its region is no longer
         * the session's memory, its mirror still there (its maps read), 10 s
         * at most. */
        int cut = 0;
        for (int i = 0; i < 10000 && !(cut = mapping(w, "/memfd:telco-mirror", 0) && !mapping(w, "/memfd:telco-stap", 0));
             i++) {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, 0);
        }
        printf("worker cut off %d\n", cut);
        printf("calls %ld canary %#llx\n", s ? calls : 0, (unsigned long long)canary);
        fflush(stdout);
        kill(w, 9);
        int st = 0;
        waitpid(w, &st, 0);
        /* It ends by our SIGKILL, not by anything done to it before. */
        printf("worker ended by %d\n", WIFSIGNALED(st) ? WTERMSIG(st) : -1);
        return 0;
    }
    int forged = forge(ring_off_at, head_at, data_off_at, 0x414141414000ULL);
    printf("forged %d uid %d\n", forged, (int)getuid());
    fflush(stdout);
    pid_t c = fork();
    if (c == 0) {
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
        execl("/usr/bin/su", "su", "-c", "true", (char *)0);
        _exit(127);
    }
    int st = 0;
    waitpid(c, &st, 0);
    if (WIFSIGNALED(st))
        printf("su signal %d\n", WTERMSIG(st));
    else
        printf("su exit %d\n", WEXITSTATUS(st));
    return 0;
}
