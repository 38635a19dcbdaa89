// An exception thrown through a return-probed function (tests/aarch64/
// guest.sh): the unwinder must find real return addresses, not the
// return trampoline's.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

__attribute__((noinline)) int thrower(int x) {
    if (x % 3 == 0) throw std::runtime_error("every third");
    return x;
}

// The frame record at the top of its 16-byte frame: x30 saved at entry
// sp - 8, where the return probe's shadow frame says the return address
// is, so the unwinder hook (rt_unwind) puts the real one back there. (A
// larger frame, with its record at the bottom, is a known gap:
// docs/aarch64.md.)
__attribute__((noinline)) int middle(int x) { return thrower(x) + 1; }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 30;
    long caught = 0, sum = 0;
    for (int i = 0; i < n; i++) {
        try {
            sum += middle(i);
        } catch (const std::exception &) {
            caught++;
        }
    }
    printf("caught %ld sum %ld\n", caught, sum);
    return 0;
}
