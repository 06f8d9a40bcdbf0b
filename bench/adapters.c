/*
 * adapters.c -- the table of allocators the harness can measure, in report
 * order.  pheap is listed even in builds without its allocator, so that
 * asking for it explains why it is skipped.
 */
#include "bench.h"

#include <string.h>

extern const bench_allocator bench_pmemobj, bench_mimalloc, bench_jemalloc, bench_glibc;

#if BENCH_HAVE_PHEAP
extern const bench_allocator bench_pheap;
#else
static int pheap_missing(void)
{
    bench_fail("this build has no pheap_alloc (configure with -DPHEAP_HAVE_ALLOC=ON)");
    return -1;
}

static const bench_allocator bench_pheap = {
    .name = "pheap",
    .what = "pheap (not built: the library has no pheap_alloc yet)",
    .persistent = 1,
    .load = pheap_missing,
};
#endif

const bench_allocator *const bench_allocators[] = {
    &bench_pheap, &bench_pmemobj, &bench_mimalloc, &bench_jemalloc, &bench_glibc, NULL,
};

const bench_allocator *bench_allocator_find(const char *name)
{
    for (unsigned i = 0; bench_allocators[i]; i++) {
        if (strcmp(bench_allocators[i]->name, name) == 0)
            return bench_allocators[i];
    }
    return NULL;
}
