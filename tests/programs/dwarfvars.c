/* Target for tests/dwarf.rs: functions whose parameters, locals and the
 * globals they see have the types `$name` must read (structs, pointers,
 * arrays, unions, bitfields, enums, char *), built at -O0 and -O2. Each
 * call prints what it was given, so a test compares the probe's values
 * with the program's own. Argument: the number of rounds (1 by default). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum color { RED = 1, GREEN = 2, BLUE = 4 };

struct point {
    int x;
    int y;
};

struct flags {
    unsigned a : 3;
    signed b : 5;
    unsigned c : 12;
};

union number {
    int i;
    unsigned char bytes[4];
};

struct shape {
    const char *name;
    struct point corners[3];
    struct point *origin;
    enum color color;
    struct flags flags;
    union number n;
    long weights[4];
    char tag[8];
};

typedef struct shape shape_t;

struct big {
    long a, b, c;
};

struct pair {
    int lo;
    int hi;
};

struct point global_origin = {7, -9};
int grid[2][3] = {{1, 2, 3}, {4, 5, 6}};
int global_counter = 40;
const char *global_label = "global label";

__attribute__((noinline)) int area(struct point *p, int scale) {
    int result = p->x * p->y * scale;
    printf("area x=%d y=%d scale=%d result=%d\n", p->x, p->y, scale, result);
    fflush(stdout);
    return result;
}

__attribute__((noinline)) long describe(shape_t *s, const char *why, enum color c) {
    long sum = 0;
    for (int i = 0; i < 3; i++)
        sum += s->corners[i].x + s->corners[i].y;
    printf("describe name=%s why=%s color=%d c1x=%d origin=%d,%d a=%u b=%d c=%u n=%d w2=%ld tag=%s sum=%ld\n",
           s->name, why, (int)c, s->corners[1].x, s->origin->x, s->origin->y, s->flags.a, s->flags.b, s->flags.c,
           s->n.i, s->weights[2], s->tag, sum);
    fflush(stdout);
    return sum;
}

/* Structs passed by value: a small one in two registers, a large one on
 * the stack (System V ABI), then more parameters after them. */
__attribute__((noinline)) long by_value(struct point a, int k, struct shape big, long tail) {
    long r = a.x * 1000 + a.y * 100 + k + big.weights[3] + tail;
    printf("by_value a=%d,%d k=%d big.w3=%ld tail=%ld\n", a.x, a.y, k, big.weights[3], tail);
    fflush(stdout);
    return r;
}

/* Returned in memory (the caller's buffer, its address in rax) and in a
 * register. */
__attribute__((noinline)) struct big make_big(long seed) {
    struct big b = {seed, seed * 2, seed * 3};
    printf("make_big a=%ld b=%ld c=%ld\n", b.a, b.b, b.c);
    fflush(stdout);
    return b;
}

__attribute__((noinline)) struct pair make_pair(int lo, int hi) {
    struct pair p = {lo, hi};
    printf("make_pair lo=%d hi=%d\n", p.lo, p.hi);
    fflush(stdout);
    return p;
}

/* Floating point and integers mixed: the integers take the integer
 * registers in order whatever the floats between them take. */
__attribute__((noinline)) long mixed(double d, int x, float f, long y) {
    printf("mixed d=%.1f x=%d f=%.1f y=%ld\n", d, x, f, y);
    fflush(stdout);
    return (long)d + x + (long)f + y;
}

__attribute__((noinline)) int guarded(int x) {
    /* A fault-injection target: `-g` writes change what it returns. */
    return x > 0 ? x * 2 : -1;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 1;
    struct point o = {3, 4};
    struct shape s;
    memset(&s, 0, sizeof s);
    s.name = "triangle";
    for (int i = 0; i < 3; i++) {
        s.corners[i].x = 10 * (i + 1);
        s.corners[i].y = -(i + 1);
    }
    s.origin = &o;
    s.color = GREEN;
    s.flags.a = 5;
    s.flags.b = -7;
    s.flags.c = 3000;
    s.n.i = 0x01020304;
    for (int i = 0; i < 4; i++)
        s.weights[i] = 100 + i;
    strcpy(s.tag, "tagged");
    for (int r = 0; r < rounds; r++) {
        struct point p = {6, 7};
        area(&p, 2);
        describe(&s, "because", BLUE);
        by_value(p, 5, s, 77);
        struct big b = make_big(11 + r);
        struct pair q = make_pair(-2, 3);
        mixed(1.5, 17, 2.5, -40);
        printf("got %ld %d\n", b.c, q.hi);
        printf("guarded=%d\n", guarded(21));
        fflush(stdout);
        global_counter++;
    }
    return 0;
}
