/*
 * kv_pmemobj.c -- libpmemobj's side of the key-value benchmark: the same
 * store in a pool made with pmemobj_create, and an update as one
 * transaction written with libpmemobj's own macros: TX_BEGIN,
 * pmemobj_tx_alloc of the new version block (filled in place),
 * pmemobj_tx_add_range of the node's version field, a store, and
 * pmemobj_tx_free of the old block.
 *
 * The library is loaded with dlopen (pmemobj_calls.h), so a machine without
 * it only skips this variant; PMEM_IS_PMEM_FORCE=1 (defaulted there, set by
 * run.sh) makes it write back cache lines on tmpfs instead of calling msync.
 */
#include "kv.h"
#include "pmemobj_calls.h"

#include <stdlib.h>

#if BENCH_HAVE_PMEMOBJ
#include <stddef.h>

#define LAYOUT "pheap-kvbench"

static PMEMobjpool *pool;
static uint64_t uuid_lo;          /* the pool's: every oid of it carries it */

static int create_pmemobj(const kv_params *p, char **base)
{
    pool = pmemobj_create(p->path, LAYOUT, p->heap_size, 0600);
    if (!pool) {
        bench_fail("pmemobj_create %s: %s", p->path, pmemobj_errormsg());
        return -1;
    }
    uuid_lo = 0;
    *base = (char *)pool;     /* what pmemobj_direct computes for this pool */
    return 0;
}

static uint64_t alloc_pmemobj(size_t size)
{
    PMEMoid oid;
    if (pmemobj_alloc(pool, &oid, size, 0, NULL, NULL) != 0) {
        bench_fail("pmemobj_alloc(%zu): %s", size, pmemobj_errormsg());
        return 0;
    }
    uuid_lo = oid.pool_uuid_lo;
    return oid.off;
}

static void persist_pmemobj(const void *addr, size_t len)
{
    pmemobj_persist(pool, addr, len);
}

struct update {
    kv_node *node;
    uint64_t seq;
    size_t value_size;
};

static void update_body(void *arg)
{
    const struct update *u = arg;
    kv_node *node = u->node;
    const PMEMoid old = { uuid_lo, node->version };
    const PMEMoid node_oid = { uuid_lo, (uint64_t)((char *)node - (char *)pool) };
    PMEMoid nv = pmemobj_tx_alloc(u->value_size, 0);
    kv_fill((char *)pool + nv.off, node->key, u->seq, u->value_size);
    pmemobj_tx_add_range(node_oid, offsetof(kv_node, version), sizeof node->version);
    node->version = nv.off;
    pmemobj_tx_free(old);
}

static int update_pmemobj(kv_node *node, uint64_t seq, size_t value_size)
{
    struct update u = {node, seq, value_size};
    return bench_pmemobj_tx(pool, update_body, &u);
}

static const char *flush_name_pmemobj(void)
{
    const char *force = getenv("PMEM_IS_PMEM_FORCE");
    return force && *force == '1' ? "forced" : "auto";
}

static int close_pmemobj(void)
{
    if (pool)
        pmemobj_close(pool);
    pool = NULL;
    return 0;
}

#else /* no libpmemobj headers at build time */

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
    .load = bench_pmemobj_load,
    .create = create_pmemobj,
    .alloc = alloc_pmemobj,
    .persist = persist_pmemobj,
    .update = update_pmemobj,
    .flush_name = flush_name_pmemobj,
    .close = close_pmemobj,
};
