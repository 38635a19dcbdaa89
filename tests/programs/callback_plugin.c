/* A library that callback_host.c loads with dlopen after start: two frames,
 * built without frame pointers, between the host's loop and its callback. */
typedef long (*callback_fn)(long);

__attribute__((noinline)) long plugin_inner(callback_fn cb, long x) {
    volatile long pad[8];
    for (int i = 0; i < 8; i++) pad[i] = x + i;
    long r = cb(pad[3]);
    return r + pad[5];
}

__attribute__((noinline)) long plugin_outer(callback_fn cb, long x) {
    volatile long pad[4];
    for (int i = 0; i < 4; i++) pad[i] = x * i;
    long r = plugin_inner(cb, pad[1]);
    return 2 * r + pad[2];
}
