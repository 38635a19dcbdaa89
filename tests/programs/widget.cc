// C++ names for demangled matching (tests/resolve.rs and
// compiler/tests/elf_resolve.rs): a namespace, a class with overloaded
// methods (one const) and a static data member, function templates.
#include <cstdio>

namespace ns {

class Widget {
public:
    explicit Widget(int v) : v_(v) {}
    int draw(int x);
    int draw(int x, int y);
    int draw(double x) const;
    static int count;

private:
    int v_;
};

int Widget::count = 0;

__attribute__((noinline)) int Widget::draw(int x) {
    count++;
    return v_ + x;
}

__attribute__((noinline)) int Widget::draw(int x, int y) {
    return v_ + x * y;
}

__attribute__((noinline)) int Widget::draw(double x) const {
    return v_ + static_cast<int>(x);
}

template <typename T>
T maxv(T a, T b) {
    return a > b ? a : b;
}

template int maxv<int>(int, int);
template double maxv<double>(double, double);

template <typename T>
__attribute__((noinline)) T twice(T v) {
    return v + v;
}

void free_function() {
    std::puts("free");
}

}  // namespace ns

int main() {
    ns::Widget w(1);
    const ns::Widget& cw = w;
    ns::free_function();
    std::printf("%d %d %d %d %f %d %ld\n", w.draw(2), w.draw(2, 3), cw.draw(3.0), ns::maxv(4, 5), ns::maxv(6.0, 7.0),
                ns::twice(4), ns::twice(5L));
    return 0;
}
