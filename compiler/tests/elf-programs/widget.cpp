// A C++ program for tests/elf_resolve.rs: a namespace, a class with
// overloaded methods and a static data member, function templates.
#include <cstdio>

namespace ns {

class Widget {
public:
    explicit Widget(int v) : v_(v) {}
    int draw(int x);
    int draw(double x) const;
    static int count;

private:
    int v_;
};

int Widget::count = 0;

int Widget::draw(int x) {
    count++;
    return v_ + x;
}

int Widget::draw(double x) const {
    return v_ + static_cast<int>(x);
}

template <typename T>
T maxv(T a, T b) {
    return a > b ? a : b;
}

template int maxv<int>(int, int);
template double maxv<double>(double, double);

void free_function() {
    std::puts("free");
}

}  // namespace ns

int main() {
    ns::Widget w(1);
    const ns::Widget& cw = w;
    ns::free_function();
    std::printf("%d %d %d %f\n", w.draw(2), cw.draw(3.0), ns::maxv(4, 5), ns::maxv(6.0, 7.0));
    return 0;
}
