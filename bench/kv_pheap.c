/*
 * kv_pheap.c -- pheap's side of the key-value benchmark: the heap made with
 * pheap_open(PHEAP_CREATE), and an update as one pheap transaction, in
 * three variants:
 *   pheap-redo       the node's version word through pheap_tx_write (redo)
 *   pheap-undo       pheap_tx_add of the word, then a store in place (undo)
 *   pheap-redo-none  pheap-redo with the flush back end "none": what the
 *                    transaction costs without any write-back
 *   pheap-redo-noprot  pheap-redo with metadata protection off: what
 *                    protection costs
 * The new version block comes from pheap_tx_alloc and is written in place;
 * the old one goes with pheap_tx_free.  The flush kind of the first two is
 * PHEAP_FLUSH when set, else the CPU's best cache-line flush, so that pheap
 * writes back lines on tmpfs as it would on DAX.
 */
#include "kv.h"

#include <pheap.h>
#include <stdlib.h>
#include <string.h>

static pheap *heap;
static char *base;

static int load_pheap(void)
{
    return 0;
}

unsigned kv_pheap_flush(void)
{
    const char *want = getenv("PHEAP_FLUSH");
    if (!want || !*want)
        want = bench_cpu_flush();
    for (unsigned k = PHEAP_FLUSH_CLWB; k <= PHEAP_FLUSH_NONE; k++) {
        if (strcmp(pheap_flush_name(k), want) == 0)
            return k;
    }
    return PHEAP_FLUSH_AUTO;
}

static int create_level(const kv_params *p, char **out, unsigned flush, unsigned protect,
                        unsigned durability)
{
    pheap_options o = { 0 };
    struct pheap_stats s;
    o.size = p->heap_size;
    o.flags = PHEAP_CREATE | PHEAP_EXCL;
    o.flush = flush;
    o.protect = protect;
    o.durability = durability;
    o.checkpoint_ms = durability == PHEAP_DURABILITY_CHECKPOINT ? 1000 : 0;
    int rc = pheap_open(p->path, &o, &heap);
    if (rc != 0) {
        bench_fail("pheap_open(create) %s: %s: %s", p->path, pheap_strerror(rc), pheap_errmsg());
        heap = NULL;
        return -1;
    }
    /* The data region maps at one address: blocks are base + offset. */
    pheap_stats(heap, &s);
    base = (char *)pheap_direct(heap, s.data_offset) - s.data_offset;
    *out = base;
    return 0;
}

static int create_with(const kv_params *p, char **out, unsigned flush, unsigned protect)
{
    return create_level(p, out, flush, protect, PHEAP_DURABILITY_AUTO);
}

/* The checkpoint level, a checkpoint every second (it chooses how stores
 * are made durable). */
static int create_checkpoint(const kv_params *p, char **out)
{
    return create_level(p, out, PHEAP_FLUSH_AUTO, PHEAP_PROTECT_AUTO, PHEAP_DURABILITY_CHECKPOINT);
}

static int create_cpu_flush(const kv_params *p, char **out)
{
    return create_with(p, out, kv_pheap_flush(), PHEAP_PROTECT_AUTO);
}

static int create_no_flush(const kv_params *p, char **out)
{
    return create_with(p, out, PHEAP_FLUSH_NONE, PHEAP_PROTECT_AUTO);
}

static int create_unprotected(const kv_params *p, char **out)
{
    return create_with(p, out, kv_pheap_flush(), PHEAP_PROTECT_OFF);
}

static uint64_t alloc_pheap(size_t size)
{
    pheap_off off = pheap_alloc(heap, size);
    if (!off)
        bench_fail("pheap_alloc(%zu): %s", size, pheap_errmsg());
    return off;
}

static void persist_pheap(const void *addr, size_t len)
{
    pheap_persist(heap, addr, len);
}

/* A transactional call failed: close the transaction and say which. */
static int tx_failed(const char *call, int rc)
{
    char why[160];
    snprintf(why, sizeof why, "%s", pheap_errmsg());
    for (int level = 0; level < 64 && pheap_tx_depth(heap) != 0; level++)
        pheap_tx_abort(heap);
    bench_fail("%s: %s: %s", call, pheap_strerror(rc), why);
    return -1;
}

/* The new version block, allocated by the transaction and filled in place. */
static pheap_off new_version(const kv_node *node, uint64_t seq, size_t value_size)
{
    pheap_off nv = pheap_tx_alloc(heap, value_size);
    if (nv)
        kv_fill(base + nv, node->key, seq, value_size);
    return nv;
}

static int update_redo(kv_node *node, uint64_t seq, size_t value_size)
{
    pheap_off old = node->version, nv;
    int rc = pheap_tx_begin(heap);
    if (rc != 0)
        return tx_failed("pheap_tx_begin", rc);
    if (!(nv = new_version(node, seq, value_size)))
        return tx_failed("pheap_tx_alloc", pheap_errno());
    if ((rc = pheap_tx_write(heap, &node->version, &nv, sizeof nv)) != 0)
        return tx_failed("pheap_tx_write", rc);
    if ((rc = pheap_tx_free(heap, old)) != 0)
        return tx_failed("pheap_tx_free", rc);
    if ((rc = pheap_tx_commit(heap)) != 0)
        return tx_failed("pheap_tx_commit", rc);
    return 0;
}

static int update_undo(kv_node *node, uint64_t seq, size_t value_size)
{
    pheap_off old = node->version, nv;
    int rc = pheap_tx_begin(heap);
    if (rc != 0)
        return tx_failed("pheap_tx_begin", rc);
    if (!(nv = new_version(node, seq, value_size)))
        return tx_failed("pheap_tx_alloc", pheap_errno());
    if ((rc = pheap_tx_add(heap, &node->version, sizeof node->version)) != 0)
        return tx_failed("pheap_tx_add", rc);
    node->version = nv;
    if ((rc = pheap_tx_free(heap, old)) != 0)
        return tx_failed("pheap_tx_free", rc);
    if ((rc = pheap_tx_commit(heap)) != 0)
        return tx_failed("pheap_tx_commit", rc);
    return 0;
}

static int counters_pheap(kv_counters *out)
{
    struct pheap_stats s;
    if (pheap_stats(heap, &s) != 0)
        return -1;
    out->flushes = s.flushes;
    out->fences = s.fences;
    out->reflushes = s.reflushes;
    out->tx_fences = s.tx_fences;
    out->tx_commits = s.tx_commits;
    out->tx_aborts = s.tx_aborts;
    out->live_blocks = s.live_blocks;
    return 0;
}

static const char *flush_name_pheap(void)
{
    struct pheap_stats s;
    return pheap_stats(heap, &s) == 0 ? pheap_flush_name(s.flush) : "?";
}

static int close_pheap(void)
{
    int rc = pheap_close(heap);
    heap = NULL;
    if (rc != 0) {
        bench_fail("pheap_close: %s: %s", pheap_strerror(rc), pheap_errmsg());
        return -1;
    }
    return 0;
}

#define PHEAP_COMMON                    \
    .load = load_pheap,                 \
    .alloc = alloc_pheap,               \
    .persist = persist_pheap,           \
    .counters = counters_pheap,         \
    .flush_name = flush_name_pheap,     \
    .close = close_pheap

const kv_backend kv_pheap_redo = {
    .name = "pheap-redo",
    .what = "pheap transaction, pheap_tx_write of the node's version word (redo)",
    .create = create_cpu_flush,
    .update = update_redo,
    PHEAP_COMMON,
};

const kv_backend kv_pheap_undo = {
    .name = "pheap-undo",
    .what = "pheap transaction, pheap_tx_add of the version word, then a store (undo)",
    .create = create_cpu_flush,
    .update = update_undo,
    PHEAP_COMMON,
};

const kv_backend kv_pheap_redo_noprot = {
    .name = "pheap-redo-noprot",
    .what = "pheap-redo with metadata protection off (PHEAP_PROTECT=off): what protection costs",
    .create = create_unprotected,
    .update = update_redo,
    PHEAP_COMMON,
};

const kv_backend kv_pheap_redo_none = {
    .name = "pheap-redo-none",
    .what = "pheap-redo with the flush back end none (no write-back at all)",
    .create = create_no_flush,
    .update = update_redo,
    PHEAP_COMMON,
};

const kv_backend kv_pheap_redo_ckpt = {
    .name = "pheap-redo-ckpt",
    .what = "pheap-redo at the checkpoint durability level, a checkpoint every second",
    .create = create_checkpoint,
    .update = update_redo,
    PHEAP_COMMON,
};
