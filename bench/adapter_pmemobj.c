/*
 * adapter_pmemobj.c -- PMDK libpmemobj, the persistent peer.  Measured the
 * way the Ralloc paper did: pmemobj_alloc into a per-thread dummy PMEMoid
 * (no persistent destination) and pmemobj_free.  The pool is a file at the
 * heap location; PMEM_IS_PMEM_FORCE=1 (set by run.sh, defaulted here) makes
 * it write back cache lines instead of calling msync, as on real PMEM.
 * The library is loaded with dlopen, so a machine without it only skips
 * this peer.
 */
#include "bench.h"

#include <stdlib.h>

#if __has_include(<libpmemobj.h>)
#include <libpmemobj.h>

#define LAYOUT "pheap-bench"

static __typeof__(pmemobj_create) *create_fn;
static __typeof__(pmemobj_open) *open_fn;
static __typeof__(pmemobj_close) *close_fn;
static __typeof__(pmemobj_alloc) *alloc_fn;
static __typeof__(pmemobj_free) *free_fn;
static __typeof__(pmemobj_ctl_get) *ctl_get_fn;
static __typeof__(pmemobj_ctl_set) *ctl_set_fn;
static __typeof__(pmemobj_errormsg) *errormsg_fn;
static __typeof__(pmemobj_oid) *oid_fn;
static __typeof__(pmemobj_defrag) *defrag_fn;
static void *pmemobj_lib;

static PMEMobjpool *pool;
static uint64_t pool_uuid_lo;
static __thread PMEMoid dummy;     /* where pmemobj_alloc stores the oid */

static int pmemobj_load(void)
{
    static const char *const names[] = { "libpmemobj.so.1", "libpmemobj.so", NULL };
    /* libpmem reads this when it is loaded: set it before dlopen. */
    setenv("PMEM_IS_PMEM_FORCE", "1", 0);
    void *lib = bench_dlopen(names);
    if (!lib)
        return -1;
    if (bench_dlsym(lib, "pmemobj_create", &create_fn) || bench_dlsym(lib, "pmemobj_open", &open_fn) ||
        bench_dlsym(lib, "pmemobj_close", &close_fn) || bench_dlsym(lib, "pmemobj_alloc", &alloc_fn) ||
        bench_dlsym(lib, "pmemobj_free", &free_fn) || bench_dlsym(lib, "pmemobj_ctl_get", &ctl_get_fn) ||
        bench_dlsym(lib, "pmemobj_ctl_set", &ctl_set_fn) ||
        bench_dlsym(lib, "pmemobj_errormsg", &errormsg_fn) || bench_dlsym(lib, "pmemobj_oid", &oid_fn))
        return -1;
    pmemobj_lib = lib;
    return 0;
}

static int pmemobj_defrag_load(void)
{
    if (pmemobj_load())
        return -1;
    return bench_dlsym(pmemobj_lib, "pmemobj_defrag", &defrag_fn);
}

/* pmemobj_defrag takes oids: the handles become oids in a scratch array
 * (volatile memory, which it accepts) and come back from it. */
static int pmemobj_bench_relocate(bench_handle *const *slots, size_t n)
{
    PMEMoid *oid = malloc((n ? n : 1) * sizeof(*oid));
    PMEMoid **ptr = malloc((n ? n : 1) * sizeof(*ptr));
    int rc = -1;
    if (oid && ptr) {
        for (size_t i = 0; i < n; i++) {
            oid[i] = (PMEMoid){pool_uuid_lo, *slots[i]};
            ptr[i] = &oid[i];
        }
        struct pobj_defrag_result r;
        rc = defrag_fn(pool, ptr, n, &r);
        if (rc)
            bench_fail("pmemobj_defrag: %s", errormsg_fn());
        for (size_t i = 0; rc == 0 && i < n; i++)
            *slots[i] = oid[i].off;
    }
    free(oid);
    free(ptr);
    return rc ? -1 : 0;
}

static int adopt(PMEMobjpool *pop, const char *what, const char *path)
{
    if (!pop) {
        bench_fail("pmemobj_%s %s: %s", what, path, errormsg_fn());
        return -1;
    }
    pool = pop;
    /* Every oid of one pool carries the same uuid: a handle keeps only the
     * offset and free() puts the uuid back. */
    pool_uuid_lo = oid_fn(pop).pool_uuid_lo;
    return 0;
}

static int pmemobj_init(const bench_heap_conf *conf)
{
    PMEMobjpool *pop = create_fn(conf->path, LAYOUT, conf->size, 0600);
    if (pop && conf->want_usage) {
        enum pobj_stats_enabled on = POBJ_STATS_ENABLED_BOTH;
        ctl_set_fn(pop, "stats.enabled", &on);
    }
    return adopt(pop, "create", conf->path);
}

static int pmemobj_reopen(const bench_heap_conf *conf)
{
    return adopt(open_fn(conf->path, LAYOUT), "open", conf->path);
}

static bench_handle pmemobj_bench_alloc(size_t size)
{
    if (alloc_fn(pool, &dummy, size, 0, NULL, NULL) != 0) {
        bench_alloc_why(errormsg_fn());
        return 0;
    }
    return dummy.off;
}

static void pmemobj_bench_free(bench_handle h)
{
    PMEMoid oid = { pool_uuid_lo, h };
    free_fn(&oid);
}

/* What pmemobj_direct computes for an oid of this pool. */
static void *pmemobj_bench_addr(bench_handle h)
{
    return (char *)pool + h;
}

static int pmemobj_bench_close(void)
{
    if (pool)
        close_fn(pool);
    pool = NULL;
    return 0;
}

/* Huge blocks count whole; small ones count the runs (slabs) holding them. */
static int pmemobj_heap_bytes(uint64_t *out)
{
    uint64_t all = 0, run_alloc = 0, run_active = 0;
    if (ctl_get_fn(pool, "stats.heap.curr_allocated", &all) != 0 ||
        ctl_get_fn(pool, "stats.heap.run_allocated", &run_alloc) != 0 ||
        ctl_get_fn(pool, "stats.heap.run_active", &run_active) != 0)
        return -1;
    *out = all - run_alloc + run_active;
    return 0;
}

#else /* no libpmemobj headers at build time */

static int pmemobj_load(void)
{
    bench_fail("built without libpmemobj headers (install libpmemobj-dev and rebuild)");
    return -1;
}

#define pmemobj_init NULL
#define pmemobj_reopen NULL
#define pmemobj_bench_alloc NULL
#define pmemobj_bench_free NULL
#define pmemobj_bench_close NULL
#define pmemobj_bench_addr NULL
#define pmemobj_heap_bytes NULL
#define pmemobj_defrag_load pmemobj_load
#define pmemobj_bench_relocate NULL

#endif

#define PMEMOBJ_CALLS                   \
    .persistent = 1,                    \
    .init = pmemobj_init,               \
    .alloc = pmemobj_bench_alloc,       \
    .free = pmemobj_bench_free,         \
    .addr = pmemobj_bench_addr,         \
    .close = pmemobj_bench_close,       \
    .heap_bytes = pmemobj_heap_bytes,   \
    .reopen = pmemobj_reopen

const bench_allocator bench_pmemobj = {
    .name = "pmemobj",
    .what = "PMDK libpmemobj pmemobj_alloc/pmemobj_free (persistent)",
    PMEMOBJ_CALLS,
    .load = pmemobj_load,
};

const bench_allocator bench_pmemobj_defrag = {
    .name = "pmemobj-defrag",
    .what = "libpmemobj with pmemobj_defrag after each fragbench phase's frees (objects move)",
    PMEMOBJ_CALLS,
    .load = pmemobj_defrag_load,
    .relocate = pmemobj_bench_relocate,
};
