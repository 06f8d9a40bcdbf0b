/*
 * adapter_mimalloc.c -- mimalloc (Debian libmimalloc2.0), a transient upper
 * bound.  Loaded with dlopen into a local scope and called through mi_malloc
 * and mi_free, so it never becomes the process's malloc.
 */
#include "bench.h"

static void *(*mi_malloc_fn)(size_t size);
static void (*mi_free_fn)(void *p);

static int mimalloc_load(void)
{
    static const char *const names[] = { "libmimalloc.so.2", "libmimalloc.so", NULL };
    void *lib = bench_dlopen(names);
    if (!lib)
        return -1;
    if (bench_dlsym(lib, "mi_malloc", &mi_malloc_fn) != 0 ||
        bench_dlsym(lib, "mi_free", &mi_free_fn) != 0)
        return -1;
    return 0;
}

static int mimalloc_init(const bench_heap_conf *conf)
{
    (void)conf;
    return 0;
}

static bench_handle mimalloc_alloc(size_t size)
{
    return (bench_handle)(uintptr_t)mi_malloc_fn(size);
}

static void mimalloc_free(bench_handle h)
{
    mi_free_fn((void *)(uintptr_t)h);
}

static void *mimalloc_addr(bench_handle h)
{
    return (void *)(uintptr_t)h;
}

static int mimalloc_close(void)
{
    return 0;
}

const bench_allocator bench_mimalloc = {
    .name = "mimalloc",
    .what = "mimalloc mi_malloc/mi_free (transient upper bound)",
    .load = mimalloc_load,
    .init = mimalloc_init,
    .alloc = mimalloc_alloc,
    .free = mimalloc_free,
    .addr = mimalloc_addr,
    .close = mimalloc_close,
};
