/* A target for tests/files.rs, whose files the tracer must read as the
 * process maps them, never by the path /proc/PID/maps shows (which the
 * process controls: a file renamed or deleted since, a name with a
 * newline, a path in its own mount namespace).
 *
 *   mapped lib PATH       dlopen PATH (mappedlib.c) at the start
 *   mapped late PATH      dlopen PATH at the line "load"
 *   mapped hold PATH...   map each PATH whole, readable and executable,
 *                         private (no code of them runs)
 *
 * It prints "ready" once started, then answers each line on stdin:
 *   load      dlopen the library (late)           "loaded"
 *   call      the library's outer(probe_here)     "called"
 *   spin MS   in the library's spin for MS ms     "spun"
 *   work MS   in this program's work for MS ms    "worked"
 * and exits at the end of its input. NAME(x) names this program's own
 * functions (the tests build a decoy with other names). */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef NAME
#define NAME(x) x
#endif

static volatile long sink;

static long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Called back from the library: a backtrace here goes through it. */
__attribute__((noinline)) void NAME(probe_here)(void) { sink++; }

__attribute__((noinline)) void NAME(work)(long ms) {
    long end = now_ms() + ms;
    while (now_ms() < end)
        for (long i = 0; i < 100000; i++) sink += i;
}

static void *lib;
static void (*outer)(void (*)(void));
static void (*spin)(long);

static int load(const char *path) {
    lib = dlopen(path, RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    outer = (void (*)(void (*)(void)))dlsym(lib, "shown_outer");
    spin = (void (*)(long))dlsym(lib, "shown_spin");
    return !outer || !spin;
}

static int hold(const char *path) {
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return 1;
    void *p = mmap(NULL, st.st_size, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
    close(fd);
    return p == MAP_FAILED;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    if (!strcmp(argv[1], "lib") && load(argv[2])) return 1;
    if (!strcmp(argv[1], "hold"))
        for (int i = 2; i < argc; i++)
            if (hold(argv[i])) {
                perror(argv[i]);
                return 1;
            }
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");
    char line[256];
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "load", 4)) {
            if (load(argv[2])) return 1;
            printf("loaded\n");
        } else if (!strncmp(line, "call", 4) && outer) {
            outer(NAME(probe_here));
            printf("called\n");
        } else if (!strncmp(line, "spin ", 5) && spin) {
            spin(atol(line + 5));
            printf("spun\n");
        } else if (!strncmp(line, "work ", 5)) {
            NAME(work)(atol(line + 5));
            printf("worked\n");
        }
    }
    return 0;
}
