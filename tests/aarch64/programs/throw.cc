// Exceptions and detaches through return-probed functions (tests/aarch64/
// guest.sh): the unwinder must find real return addresses, not the return
// trampoline's, wherever the function's prologue saved x30.
//
//   throw N      N rounds of middle, big and catcher (some throw); prints
//                what was caught and the sum
//   throw serve  big_wait per byte read from standard input, to its end;
//                prints how many calls returned
//   throw spin   after a byte on standard input, spin until SIGUSR1;
//                prints "spun"
#include <cstdio>
#include <cstdlib>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <unistd.h>

__attribute__((noinline)) int thrower(int x) {
    if (x % 3 == 0) throw std::runtime_error("every third");
    return x;
}

// The frame record at the top of its 16-byte frame: x30 saved at entry
// sp - 8, the return probe's slot.
__attribute__((noinline)) int middle(int x) { return thrower(x) + 1; }

// A larger frame: gcc puts the record at its bottom (`stp x29, x30, [sp,
// #-256]!`), x30 at entry sp - 248, where the unwinder reads it (the CFI
// says so, and the trampoline records it in the shadow frame).
__attribute__((noinline)) int big(int x) {
    volatile char buf[200];
    buf[x % 200] = (char)x;
    return thrower(x) + buf[x % 200] - (char)x + 2;
}

// The exception caught inside the probed function: its call runs on, and
// its return probe fires (rt_caught gives the trampoline back).
__attribute__((noinline)) int catcher(int x) {
    volatile char buf[200];
    buf[x % 200] = (char)x;
    try {
        return thrower(x) + buf[x % 200] - (char)x;
    } catch (const std::exception &) {
        return -1 + buf[x % 200] - (char)x;
    }
}

// Blocks in read() inside a large frame: a tracer that detaches meanwhile
// must give the return address back where the prologue saved it.
__attribute__((noinline)) int big_wait() {
    volatile char buf[200];
    memset((char *)buf, 0, sizeof buf);
    return read(0, (char *)buf, 1) == 1 ? buf[0] : -1;
}

// A leaf that never saves x30: while it spins, a return probe's trampoline
// address is in the link register only, which a tracer that detaches
// meanwhile must give back there.
static volatile sig_atomic_t go;
static void on_usr1(int) { go = 1; }
__attribute__((noinline)) void spin() {
    while (!go) {
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "spin") == 0) {
        signal(SIGUSR1, on_usr1);
        char c;
        if (read(0, &c, 1) != 1) return 1;
        spin();
        printf("spun\n");
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "serve") == 0) {
        long calls = 0;
        while (big_wait() >= 0) calls++;
        printf("served %ld\n", calls);
        return 0;
    }
    int n = argc > 1 ? atoi(argv[1]) : 30;
    long caught = 0, sum = 0;
    for (int i = 0; i < n; i++) {
        try {
            sum += middle(i);
        } catch (const std::exception &) {
            caught++;
        }
        try {
            sum += big(i);
        } catch (const std::exception &) {
            caught++;
        }
        sum += catcher(i);
    }
    printf("caught %ld sum %ld\n", caught, sum);
    return 0;
}
