/*
 * adapter_glibc.c -- glibc malloc, the process's own allocator: a transient
 * baseline that every machine has.
 */
#include "bench.h"

#include <stdlib.h>

static int glibc_init(const bench_heap_conf *conf)
{
    (void)conf;
    return 0;
}

static bench_handle glibc_alloc(size_t size)
{
    return (bench_handle)(uintptr_t)malloc(size);
}

static void glibc_free(bench_handle h)
{
    free((void *)(uintptr_t)h);
}

static void *glibc_addr(bench_handle h)
{
    return (void *)(uintptr_t)h;
}

static int glibc_close(void)
{
    return 0;
}

const bench_allocator bench_glibc = {
    .name = "glibc",
    .what = "glibc malloc/free (transient)",
    .init = glibc_init,
    .alloc = glibc_alloc,
    .free = glibc_free,
    .addr = glibc_addr,
    .close = glibc_close,
};
