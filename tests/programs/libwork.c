/* A shared library programs find through DT_NEEDED and RUNPATH or RPATH
 * ($ORIGIN): two functions and a data object. */
int lib_calls = 0;
__attribute__((noinline)) int lib_work(int x) {
    lib_calls++;
    return x + 40;
}
__attribute__((noinline)) int lib_other(int x) { return x * 3; }
