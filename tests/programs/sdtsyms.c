/* SDT markers whose arguments are globals and statics named by symbol
 * (STAP_SDT_ARG_CONSTRAINT=m: `4@counter(%rip)`), in the program and,
 * built with -DLIB as a shared library, in a library. It prints the
 * values it passes. */
#include <stdio.h>
#include <sys/sdt.h>

struct three {
    int a, b, c;
};

#ifdef LIB
int lib_total = 70;
static struct three lib_parts = {7, 8, 9};
void lib_mark(void) {
    static int lib_calls = 1;
    STAP_PROBE4(syms, lib, lib_total, lib_parts.b, lib_parts.c, lib_calls);
    printf("lib 70 8 9 1\n");
}
#else
void lib_mark(void);
int total = 40;
static struct three parts = {4, 5, 6};
int main(void) {
    static int calls = 3;
    STAP_PROBE4(syms, main, total, parts.b, parts.c, calls);
    printf("main 40 5 6 3\n");
    lib_mark();
    return 0;
}
#endif
