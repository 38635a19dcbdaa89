// Target for tests/dwarf.rs: C++ members (inherited too), `this`, and
// references, read by name; each function prints what it was given.
#include <cstdio>

struct Base {
    int id;
};

class Widget : public Base {
  public:
    Widget(int w, int h) : width(w), height(h) { id = 9; }
    __attribute__((noinline)) int area(int scale) const;
    int width;
    int height;
};

int Widget::area(int scale) const {
    int a = width * height * scale;
    std::printf("area id=%d w=%d h=%d scale=%d a=%d\n", id, width, height, scale, a);
    return a;
}

__attribute__((noinline)) int by_ref(const Widget &w, int &counter) {
    counter += w.width;
    std::printf("by_ref h=%d counter=%d\n", w.height, counter);
    return counter;
}

int main() {
    Widget w(3, 5);
    int c = 10;
    w.area(2);
    by_ref(w, c);
    return 0;
}
