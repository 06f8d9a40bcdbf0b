/*
 * kv_pmemobj.c -- libpmemobj's side of the key-value benchmark: the same
 * store in a pool made with pmemobj_create, and an update as one
 * transaction written with libpmemobj's own macros: TX_BEGIN,
 * pmemobj_tx_alloc of the new version block (filled in place),
 * pmemobj_tx_add_range of the node's version field, a store, and
 * pmemobj_tx_free of the old block.
 *
 * As in adapter_pmemobj.c, the library is loaded with dlopen (its headers
 * are used when installed), so a machine without it only skips this
 * variant; PMEM_IS_PMEM_FORCE=1 (defaulted here, set by run.sh) makes it
 * write back cache lines on tmpfs instead of calling msync.
 */
#include "kv.h"

#include <stdlib.h>

#if __has_include(<libpmemobj.h>)
#include <libpmemobj.h>
#include <stddef.h>

#define LAYOUT "pheap-kvbench"

static __typeof__(pmemobj_create) *create_fn;
static __typeof__(pmemobj_close) *close_fn;
static __typeof__(pmemobj_alloc) *alloc_fn;
static __typeof__(pmemobj_persist) *persist_fn;
static __typeof__(pmemobj_errormsg) *errormsg_fn;
static __typeof__(pmemobj_tx_begin) *tx_begin_fn;
static __typeof__(pmemobj_tx_stage) *tx_stage_fn;
static __typeof__(pmemobj_tx_process) *tx_process_fn;
static __typeof__(pmemobj_tx_end) *tx_end_fn;
static __typeof__(pmemobj_tx_errno) *tx_errno_fn;
static __typeof__(pmemobj_tx_alloc) *tx_alloc_fn;
static __typeof__(pmemobj_tx_add_range) *tx_add_range_fn;
static __typeof__(pmemobj_tx_free) *tx_free_fn;

/* The TX_* macros call these by name: route them to the loaded library. */
#define pmemobj_tx_begin tx_begin_fn
#define pmemobj_tx_stage tx_stage_fn
#define pmemobj_tx_process tx_process_fn
#define pmemobj_tx_end tx_end_fn
#define pmemobj_tx_errno tx_errno_fn
#define pmemobj_tx_alloc tx_alloc_fn
#define pmemobj_tx_add_range tx_add_range_fn
#define pmemobj_tx_free tx_free_fn

static PMEMobjpool *pool;
static uint64_t uuid_lo;          /* the pool's: every oid of it carries it */

static int load_pmemobj(void)
{
    static const char *const names[] = { "libpmemobj.so.1", "libpmemobj.so", NULL };
    /* libpmem reads this when it is loaded: set it before dlopen. */
    setenv("PMEM_IS_PMEM_FORCE", "1", 0);
    void *lib = bench_dlopen(names);
    if (!lib)
        return -1;
    if (bench_dlsym(lib, "pmemobj_create", &create_fn) ||
        bench_dlsym(lib, "pmemobj_close", &close_fn) ||
        bench_dlsym(lib, "pmemobj_alloc", &alloc_fn) ||
        bench_dlsym(lib, "pmemobj_persist", &persist_fn) ||
        bench_dlsym(lib, "pmemobj_errormsg", &errormsg_fn) ||
        bench_dlsym(lib, "pmemobj_tx_begin", &tx_begin_fn) ||
        bench_dlsym(lib, "pmemobj_tx_stage", &tx_stage_fn) ||
        bench_dlsym(lib, "pmemobj_tx_process", &tx_process_fn) ||
        bench_dlsym(lib, "pmemobj_tx_end", &tx_end_fn) ||
        bench_dlsym(lib, "pmemobj_tx_errno", &tx_errno_fn) ||
        bench_dlsym(lib, "pmemobj_tx_alloc", &tx_alloc_fn) ||
        bench_dlsym(lib, "pmemobj_tx_add_range", &tx_add_range_fn) ||
        bench_dlsym(lib, "pmemobj_tx_free", &tx_free_fn))
        return -1;
    return 0;
}

static int create_pmemobj(const kv_params *p, char **base)
{
    pool = create_fn(p->path, LAYOUT, p->heap_size, 0600);
    if (!pool) {
        bench_fail("pmemobj_create %s: %s", p->path, errormsg_fn());
        return -1;
    }
    uuid_lo = 0;
    *base = (char *)pool;     /* what pmemobj_direct computes for this pool */
    return 0;
}

static uint64_t alloc_pmemobj(size_t size)
{
    PMEMoid oid;
    if (alloc_fn(pool, &oid, size, 0, NULL, NULL) != 0) {
        bench_fail("pmemobj_alloc(%zu): %s", size, errormsg_fn());
        return 0;
    }
    uuid_lo = oid.pool_uuid_lo;
    return oid.off;
}

static void persist_pmemobj(const void *addr, size_t len)
{
    persist_fn(pool, addr, len);
}

static int update_pmemobj(kv_node *node, uint64_t seq, size_t value_size)
{
    const PMEMoid old = { uuid_lo, node->version };
    const PMEMoid node_oid = { uuid_lo, (uint64_t)((char *)node - (char *)pool) };
    volatile int committed = 0;

    TX_BEGIN(pool) {
        PMEMoid nv = pmemobj_tx_alloc(value_size, 0);
        kv_fill((char *)pool + nv.off, node->key, seq, value_size);
        pmemobj_tx_add_range(node_oid, offsetof(kv_node, version), sizeof node->version);
        node->version = nv.off;
        pmemobj_tx_free(old);
    } TX_ONCOMMIT {
        committed = 1;
    } TX_ONABORT {
        bench_fail("pmemobj transaction aborted: %s", errormsg_fn());
    } TX_END
    return committed ? 0 : -1;
}

static const char *flush_name_pmemobj(void)
{
    const char *force = getenv("PMEM_IS_PMEM_FORCE");
    return force && *force == '1' ? "forced" : "auto";
}

static int close_pmemobj(void)
{
    if (pool)
        close_fn(pool);
    pool = NULL;
    return 0;
}

#else /* no libpmemobj headers at build time */

static int load_pmemobj(void)
{
    bench_fail("built without libpmemobj headers (install libpmemobj-dev and rebuild)");
    return -1;
}

#define create_pmemobj NULL
#define alloc_pmemobj NULL
#define persist_pmemobj NULL
#define update_pmemobj NULL
#define flush_name_pmemobj NULL
#define close_pmemobj NULL

#endif

const kv_backend kv_pmemobj = {
    .name = "pmemobj",
    .what = "PMDK libpmemobj TX_BEGIN, pmemobj_tx_alloc, pmemobj_tx_add_range, pmemobj_tx_free",
    .load = load_pmemobj,
    .create = create_pmemobj,
    .alloc = alloc_pmemobj,
    .persist = persist_pmemobj,
    .update = update_pmemobj,
    .flush_name = flush_name_pmemobj,
    .close = close_pmemobj,
};
