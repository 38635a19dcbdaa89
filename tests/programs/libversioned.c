/* Two versions of one symbol (glibc-style symbol versioning), for
 * compiler/tests/elf_resolve.rs: .symtab names them greet@VER_1 and greet@@VER_2,
 * .dynsym names both greet, the old one's version (hidden) in .gnu.version. */
int greet_v1(int x) {
    return x + 1;
}

int greet_v2(int x) {
    return x + 2;
}

__asm__(".symver greet_v1, greet@VER_1");
__asm__(".symver greet_v2, greet@@VER_2");
