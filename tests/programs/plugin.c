/* A library that tests/target.rs loads with dlopen (see host.c). */
__attribute__((noinline)) long plugin(long x) { return x * 3; }
