/* Two versions of one symbol (glibc-style symbol versioning), for
 * tests/elf_resolve.rs: .symtab names them greet@VER_1 and greet@@VER_2,
 * .dynsym names both plain greet. */
int greet_v1(int x) {
    return x + 1;
}

int greet_v2(int x) {
    return x + 2;
}

__asm__(".symver greet_v1, greet@VER_1");
__asm__(".symver greet_v2, greet@@VER_2");
