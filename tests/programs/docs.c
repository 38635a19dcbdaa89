/* The program the documentation's examples probe (tests/docs.rs: a
 * ```stap run -c``` block runs as `telco-stap -e SCRIPT -c docs`). It
 * prints nothing, so an example's output is its probes' alone:
 *
 *   main -> work(20, "hello") -> leaf(20, "hello") = 45, twice.
 *
 * leaf reads its string through a pointer to a struct. */
#include <string.h>

struct item {
    int id;
    char tag;
    const char *name;
};

__attribute__((noinline)) long leaf(long x, const struct item *it) {
    __asm__ volatile("" ::: "memory");
    return 2 * x + (long)strlen(it->name);
}

__attribute__((noinline)) long work(long x, const char *name) {
    struct item it = {7, 'k', name};
    return leaf(x, &it) + 0 * it.tag;
}

int main(void) {
    long s = 0;
    for (int i = 0; i < 2; i++) s += work(20, "hello");
    return s == 90 ? 0 : 1;
}
