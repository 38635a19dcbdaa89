/* Parameters whose only location after a call is their value at entry
 * (DW_OP_entry_value at -Og): found from the call sites' values, which
 * differ per caller. It prints what the probe should read. */
#include <stdio.h>

volatile int sink;

__attribute__((noinline)) int leaf(int a) {
    sink += a;
    return a;
}

__attribute__((noinline)) int mid(int b, int c) {
    int d = leaf(c);
    sink += d;
    return d;
}

int main(void) {
    int r = mid(3, 2);
    r += mid(7, 5);
    printf("mid b 3 c 2\nmid b 7 c 5\nr %d\n", r);
    return 0;
}
