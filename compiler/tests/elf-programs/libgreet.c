/* A shared library for tests/elf_resolve.rs (soname libgreet.so.1). */
int greet_calls = 0;

int greet(int x) {
    greet_calls++;
    return x + 42;
}
