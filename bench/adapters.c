/*
 * adapters.c -- the table of allocators the harness can measure, in report
 * order.
 */
#include "bench.h"

#include <string.h>

extern const bench_allocator bench_pmemobj, bench_pmemobj_defrag, bench_mimalloc, bench_jemalloc, bench_glibc;

extern const bench_allocator bench_pheap, bench_pheap_gc, bench_pheap_noprot, bench_pheap_nomorph,
    bench_pheap_keys, bench_pheap_defrag;

const bench_allocator *const bench_allocators[] = {
    &bench_pheap, &bench_pheap_gc, &bench_pheap_noprot, &bench_pheap_nomorph, &bench_pheap_keys,
    &bench_pheap_defrag, &bench_pmemobj, &bench_pmemobj_defrag, &bench_mimalloc, &bench_jemalloc,
    &bench_glibc, NULL,
};

const bench_allocator *bench_allocator_find(const char *name)
{
    for (unsigned i = 0; bench_allocators[i]; i++) {
        if (strcmp(bench_allocators[i]->name, name) == 0)
            return bench_allocators[i];
    }
    return NULL;
}
