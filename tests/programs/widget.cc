// C++ names for demangled matching.
#include <cstdio>
namespace ns {
struct Widget {
    int size;
    __attribute__((noinline)) int draw(int x) { return size + x; }
    __attribute__((noinline)) int draw(int x, int y) { return size + x * y; }
};
template <typename T> __attribute__((noinline)) T twice(T v) { return v + v; }
}  // namespace ns

int main() {
    ns::Widget w{3};
    std::printf("%d %d %d %ld\n", w.draw(1), w.draw(2, 3), ns::twice(4), ns::twice(5L));
    return 0;
}
