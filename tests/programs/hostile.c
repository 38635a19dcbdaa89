/* A hostile target (tests/hostile.rs): it calls `work` (which the scripts
 * probe) while it corrupts the region it shares with the tracer.
 *
 *   hostile CALLS WHAT WHEN [SEED] [OFFSETS...]
 *
 * WHAT:
 *   fill:N   every byte of the region becomes N
 *   random   every byte becomes a pseudo-random one (SEED)
 *   ring     forge event records: reserve room in the ring as a producer
 *            does and commit a record of a huge length, then one of an
 *            unknown kind, then a printf of an unknown format, then a
 *            histogram of 2^31 buckets (OFFSETS: the header's ring_off
 *            field, the ring header's head, size and data_off fields)
 *   table    overwrite the geometry (slots, slot size) of every array
 *            header found (OFFSETS: capacity and slot count to look for,
 *            their offsets in the header)
 *   lock     set the lock word of every array header found (as `table`)
 *   stat     put every statistic whose count, sum, min and max are those of
 *            the calls so far (work(i) for i < CALLS/2, in thread 1) into an
 *            impossible state: a negative count, min 1000, max -1000
 * WHEN:
 *   start    before the first call
 *   middle   after CALLS/2 calls
 *   always   a second thread corrupts again and again at pseudo-random
 *            moments from the start until the program ends (fill, random)
 *
 * With HOSTILE_WAIT set (for -p): it prints "ready" and waits for a line on
 * stdin before working; CALLS < 0 works until it is killed.
 * It prints "done S" at the end, S the sum of the results. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((noinline)) long work(long x) { return x * 2 + 1; }

static const char *what;
static unsigned long long seed = 88172645463325252ULL;
static long offs[8];
static int noffs;
static volatile int finished;
/* Corruptions the scribbler made (of a region it found). */
static volatile int scribbled;

static unsigned long long next_random(void) {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return seed;
}

/* The region's mapping in this process (0 when there is none). */
static unsigned char *region(size_t *len) {
    FILE *m = fopen("/proc/self/maps", "r");
    char line[512];
    unsigned char *at = 0;
    while (m && fgets(line, sizeof line, m)) {
        if (strstr(line, "memfd:telco-stap")) {
            unsigned long lo = strtoul(line, 0, 16), hi = strtoul(strchr(line, '-') + 1, 0, 16);
            at = (unsigned char *)lo;
            *len = hi - lo;
            break;
        }
    }
    if (m) fclose(m);
    return at;
}

/* Reserve `len` bytes in the ring as a producer would; 0 when full. */
static unsigned char *reserve(unsigned char *r, size_t rlen, unsigned len) {
    uint64_t ring_off = *(uint64_t *)(r + offs[0]);
    if (ring_off + 192 > rlen) return 0;
    unsigned char *rg = r + ring_off;
    uint64_t *head = (uint64_t *)(rg + offs[1]);
    uint64_t size = *(uint64_t *)(rg + offs[2]), data_off = *(uint64_t *)(rg + offs[3]);
    if (size == 0 || (size & (size - 1)) || data_off + size > rlen) return 0;
    for (;;) {
        uint64_t h = __atomic_load_n(head, __ATOMIC_RELAXED), off = h & (size - 1);
        if (size - off < len) return 0; /* would wrap: give up */
        if (__atomic_compare_exchange_n(head, &h, h + len, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            return r + data_off + off;
    }
}

static void commit(unsigned char *rec, unsigned len, unsigned short kind, unsigned aux) {
    *(unsigned short *)(rec + 4) = kind;
    *(unsigned *)(rec + 12) = aux;
    __atomic_store_n((unsigned *)rec, len | 0x80000000u, __ATOMIC_RELEASE);
}

/* Returns whether it found the region. */
static int corrupt(long calls) {
    size_t len = 0;
    unsigned char *r = region(&len);
    if (!r) return 0;
    if (!strncmp(what, "fill:", 5)) {
        memset(r, atoi(what + 5), len);
    } else if (!strcmp(what, "random")) {
        for (size_t i = 0; i < len; i++) r[i] = (unsigned char)next_random();
    } else if (!strcmp(what, "ring")) {
        unsigned char *a = reserve(r, len, 64), *b = reserve(r, len, 64), *c = reserve(r, len, 64),
                      *d = reserve(r, len, 64);
        /* A histogram claiming 2^31 buckets, a printf of format 1000000, a
         * kind nobody knows, and one record as long as the whole ring. */
        if (d) {
            memset(d, 0, 64);
            *(unsigned *)(d + 24 + 32) = 0x80000000u;
            commit(d, 64, 6, 1);
        }
        if (c) {
            memset(c, 0, 64);
            commit(c, 64, 2, 1000000);
        }
        if (b) {
            memset(b, 0, 64);
            commit(b, 64, 0x7777, 0);
        }
        if (a) {
            memset(a, 0, 64);
            commit(a, 0x7ffffff8u, 2, 0);
        }
    } else if (!strcmp(what, "table") || !strcmp(what, "lock")) {
        /* Array headers: 4-aligned words holding the capacity and the slot
         * count where a header has them. */
        long cap = offs[0], nslots = offs[1], cap_at = offs[2], nslots_at = offs[3];
        for (size_t i = cap_at; i + 112 < len; i += 4) {
            if (*(unsigned *)(r + i) != cap || *(unsigned *)(r + i - cap_at + nslots_at) != nslots) continue;
            unsigned char *h = r + i - cap_at;
            if (!strcmp(what, "lock")) {
                *(unsigned *)h = 1;
            } else {
                *(unsigned *)(h + nslots_at) = 0x40000000u;
                *(unsigned *)(h + nslots_at + 4) = 0x10000u; /* slot size */
            }
        }
    } else if (!strcmp(what, "stat")) {
        long n = calls, sum = 0;
        for (long i = 0; i < n; i++) sum += i;
        for (size_t i = 0; i + 32 <= len; i += 8) {
            long *s = (long *)(r + i);
            if (s[0] == n && s[1] == sum && s[2] == 0 && s[3] == n - 1) {
                s[0] = -1000000000000L; /* still negative after every later call */
                s[2] = 1000;
                s[3] = -1000;
            }
        }
    }
    return 1;
}

static void *scribbler(void *arg) {
    (void)arg;
    while (!finished) {
        /* A pseudo-random pause, in loop iterations (no clock, no sleep). */
        for (volatile unsigned long k = next_random() % 2000000; k > 0; k--) {
        }
        if (corrupt(0)) scribbled++;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: hostile CALLS WHAT WHEN [SEED] [OFFSETS...]\n");
        return 2;
    }
    long calls = atol(argv[1]);
    what = argv[2];
    const char *when = argv[3];
    if (argc > 4) seed = strtoull(argv[4], 0, 10) | 1;
    for (int i = 5; i < argc && noffs < 8; i++) offs[noffs++] = atol(argv[i]);
    /* The scribbler starts first: with -p it is at work before the tracer
     * attaches. */
    pthread_t t;
    int threaded = !strcmp(when, "always") && !pthread_create(&t, 0, scribbler, 0);
    if (getenv("HOSTILE_WAIT")) {
        char line[16];
        printf("ready\n");
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin)) return 3;
    }
    if (!strcmp(when, "start")) corrupt(0);
    long s = 0;
    /* CALLS < 0: for ever (with -p, until the test kills it). */
    for (long i = 0; calls < 0 || i < calls; i++) {
        if (i == calls / 2 && !strcmp(when, "middle")) corrupt(i);
        s += work(i);
    }
    /* At least one corruption happened while the tracer was attached, at
     * whatever moment it came. */
    while (threaded && !scribbled) {
    }
    finished = 1;
    if (threaded) pthread_join(t, 0);
    printf("done %ld\n", s);
    return 0;
}
