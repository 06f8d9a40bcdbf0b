/*
 * adapter_jemalloc.c -- jemalloc (Debian libjemalloc2), a transient upper
 * bound.  Debian builds it unprefixed, so linking it would take over malloc
 * for the whole process; it is loaded with dlopen into a local scope instead
 * and called through its own mallocx/dallocx entry points.
 */
#include "bench.h"

static void *(*mallocx_fn)(size_t size, int flags);
static void (*dallocx_fn)(void *p, int flags);

static int jemalloc_load(void)
{
    static const char *const names[] = { "libjemalloc.so.2", "libjemalloc.so", NULL };
    void *lib = bench_dlopen(names);
    if (!lib)
        return -1;
    if (bench_dlsym(lib, "mallocx", &mallocx_fn) != 0 ||
        bench_dlsym(lib, "dallocx", &dallocx_fn) != 0)
        return -1;
    return 0;
}

static int jemalloc_init(const bench_heap_conf *conf)
{
    (void)conf;
    return 0;
}

static bench_handle jemalloc_alloc(size_t size)
{
    return (bench_handle)(uintptr_t)mallocx_fn(size, 0);
}

static void jemalloc_free(bench_handle h)
{
    dallocx_fn((void *)(uintptr_t)h, 0);
}

static void *jemalloc_addr(bench_handle h)
{
    return (void *)(uintptr_t)h;
}

static int jemalloc_close(void)
{
    return 0;
}

const bench_allocator bench_jemalloc = {
    .name = "jemalloc",
    .what = "jemalloc mallocx/dallocx (transient upper bound)",
    .load = jemalloc_load,
    .init = jemalloc_init,
    .alloc = jemalloc_alloc,
    .free = jemalloc_free,
    .addr = jemalloc_addr,
    .close = jemalloc_close,
};
