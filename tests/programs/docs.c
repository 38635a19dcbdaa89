/* The program the documentation's examples probe (tests/docs.rs: a
 * ```stap run -c``` block runs as `telco-stap -e SCRIPT -c docs`). It
 * prints nothing, so an example's output is its probes' alone:
 *
 *   main -> work(20, "hello") -> leaf(20, "hello") = 45, twice.
 *
 * leaf reads its string through a pointer to a struct, which also points
 * at "hΩ😈" in UTF-16 and UTF-32, and passes its label `counted` once a
 * call. */
#include <string.h>

struct item {
    int id;
    char tag;
    const char *name;
    const unsigned short *w16;
    const unsigned int *w32;
};

static const unsigned short wide16[] = {'h', 0x3A9, 0xD83D, 0xDE08, 0};
static const unsigned int wide32[] = {'h', 0x3A9, 0x1F608, 0};

__attribute__((noinline)) long leaf(long x, const struct item *it) {
    volatile int again = 0;
counted:
    __asm__ volatile("" ::: "memory");
    /* Never taken: the label stays where it is. */
    if (again++ > 1) goto counted;
    return 2 * x + (long)strlen(it->name);
}

__attribute__((noinline)) long work(long x, const char *name) {
    struct item it = {7, 'k', name, wide16, wide32};
    return leaf(x, &it) + 0 * it.tag;
}

int main(void) {
    long s = 0;
    for (int i = 0; i < 2; i++) s += work(20, "hello");
    return s == 90 ? 0 : 1;
}
