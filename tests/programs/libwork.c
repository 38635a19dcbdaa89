/* A shared library the test program needs through DT_NEEDED + RUNPATH. */
__attribute__((noinline)) int lib_work(int x) { return x + 40; }
__attribute__((noinline)) int lib_other(int x) { return x * 3; }
