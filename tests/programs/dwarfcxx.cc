// Target for tests/dwarf.rs: C++ members (inherited too, and hidden by a
// derived class's), `this`, references, an unnamed parameter and a class
// passed by invisible reference, read by name; each function prints what
// it was given.
#include <cstdio>
#include <string>

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

struct Hiding : Base {
    int id;
};

__attribute__((noinline)) int hidden(const Hiding *h) {
    std::printf("hidden id=%d base=%d\n", h->id, h->Base::id);
    return h->id;
}

__attribute__((noinline)) int skip(int, int y) {
    std::printf("skip y=%d\n", y);
    return y;
}

__attribute__((noinline)) std::size_t by_string(std::string s, int n) {
    std::printf("by_string len=%zu n=%d\n", s.size(), n);
    return s.size() + n;
}

int main() {
    Widget w(3, 5);
    int c = 10;
    w.area(2);
    by_ref(w, c);
    Hiding h;
    h.id = 4;
    h.Base::id = 8;
    hidden(&h);
    skip(1, 2);
    by_string(std::string("twelve chars"), 6);
    return 0;
}
