/*
 * adapter_pheap.c -- pheap through its public API: pheap_open(PHEAP_CREATE),
 * pheap_alloc / pheap_free, pheap_stats for flushes, fences and reflushes.
 * heap_bytes: the data-region bytes held by slabs and large extents.
 * The flush kind comes from PHEAP_FLUSH (run.sh sets it; defaulted here to
 * the best cache-line flush of the CPU) so pheap writes back lines on tmpfs
 * exactly as it would on DAX.
 * The allocators here share this code and differ only in the heaps they
 * create or how they open them: "pheap" (LOG), "pheap-noprot" (LOG,
 * metadata protection off: the price of protection), "pheap-nomorph" (LOG,
 * opened with PHEAP_MORPH=0: what slab morphing saves and costs),
 * "pheap-keys" (LOG, protected by protection keys instead of the alias;
 * skipped where there are none), "pheap-defrag" (LOG, with relocate:
 * pheap_defrag) and "pheap-gc" (GC, which also has root_set and recover:
 * pheap_root_set, pheap_recover_ex).
 */
#include "bench.h"

#include <pheap.h>
#include <stdlib.h>
#include <sys/mman.h>

static pheap *heap;
static uint64_t free_errors;          /* failed pheap_free calls (atomic) */
static int first_free_error;

static int pheap_bench_load(void)
{
    setenv("PHEAP_FLUSH", bench_cpu_flush(), 0);
    return 0;
}

static int opened(int rc, const char *what, const char *path)
{
    if (rc != 0) {
        bench_fail("pheap_open(%s) %s: %s: %s", what, path, pheap_strerror(rc), pheap_errmsg());
        heap = NULL;
        return -1;
    }
    __atomic_store_n(&free_errors, 0, __ATOMIC_RELAXED);
    return 0;
}

static int create(const bench_heap_conf *conf, unsigned consistency, unsigned protect)
{
    pheap_options o = { 0 };
    o.size = conf->size; /* the data region; the file adds pheap's metadata */
    if (conf->grow_from && conf->grow_from < conf->size) { /* grows as it needs */
        o.size = conf->grow_from;
        o.max_size = conf->size;
    }
    o.flags = PHEAP_CREATE | PHEAP_EXCL;
    o.consistency = consistency;
    o.protect = protect;
    return opened(pheap_open(conf->path, &o, &heap), "create", conf->path);
}

/* A GC heap that was not closed cleanly opens needing recovery: recover()
 * does it, so that the workload can time it apart. */
static int reopen(const bench_heap_conf *conf, unsigned consistency, unsigned protect)
{
    pheap_options o = { 0 };
    o.consistency = consistency;
    o.protect = protect;
    return opened(pheap_open(conf->path, &o, &heap), "reopen", conf->path);
}

static int pheap_bench_init(const bench_heap_conf *conf)
{
    return create(conf, PHEAP_CONSISTENCY_LOG, PHEAP_PROTECT_AUTO);
}

static int pheap_bench_reopen(const bench_heap_conf *conf)
{
    return reopen(conf, PHEAP_CONSISTENCY_LOG, PHEAP_PROTECT_AUTO);
}

static int pheap_noprot_bench_init(const bench_heap_conf *conf)
{
    return create(conf, PHEAP_CONSISTENCY_LOG, PHEAP_PROTECT_OFF);
}

static int pheap_noprot_bench_reopen(const bench_heap_conf *conf)
{
    return reopen(conf, PHEAP_CONSISTENCY_LOG, PHEAP_PROTECT_OFF);
}

/* PHEAP_MORPH=0 for this open only: the other allocators of the run keep
 * the environment they had. */
static int pheap_nomorph_bench_init(const bench_heap_conf *conf)
{
    setenv("PHEAP_MORPH", "0", 1);
    int rc = create(conf, PHEAP_CONSISTENCY_LOG, PHEAP_PROTECT_AUTO);
    unsetenv("PHEAP_MORPH");
    return rc;
}

static int pheap_nomorph_bench_reopen(const bench_heap_conf *conf)
{
    setenv("PHEAP_MORPH", "0", 1);
    int rc = reopen(conf, PHEAP_CONSISTENCY_LOG, PHEAP_PROTECT_AUTO);
    unsetenv("PHEAP_MORPH");
    return rc;
}

static int pheap_keys_bench_load(void)
{
    int k = pkey_alloc(0, 0);
    if (k < 0) {
        bench_fail("no protection keys here (pkey_alloc failed)");
        return -1;
    }
    pkey_free(k);
    return pheap_bench_load();
}

static int pheap_keys_bench_init(const bench_heap_conf *conf)
{
    return create(conf, PHEAP_CONSISTENCY_LOG, PHEAP_PROTECT_KEYS);
}

static int pheap_keys_bench_reopen(const bench_heap_conf *conf)
{
    return reopen(conf, PHEAP_CONSISTENCY_LOG, PHEAP_PROTECT_KEYS);
}

static int pheap_gc_bench_init(const bench_heap_conf *conf)
{
    return create(conf, PHEAP_CONSISTENCY_GC, PHEAP_PROTECT_AUTO);
}

static int pheap_gc_bench_reopen(const bench_heap_conf *conf)
{
    return reopen(conf, PHEAP_CONSISTENCY_GC, PHEAP_PROTECT_AUTO);
}

static int pheap_bench_root_set(bench_handle h)
{
    int rc = pheap_root_set(heap, "bench", h);
    if (rc != 0)
        bench_fail("pheap_root_set: %s: %s", pheap_strerror(rc), pheap_errmsg());
    return rc ? -1 : 0;
}

static int pheap_bench_recover(unsigned threads, uint64_t *marked)
{
    pheap_gc_options o = { .threads = threads };
    pheap_gc_report r;
    int rc = pheap_recover_ex(heap, &o, &r);
    if (rc != 0) {
        bench_fail("pheap_recover: %s: %s", pheap_strerror(rc), pheap_errmsg());
        return -1;
    }
    if (marked)
        *marked = r.marked_blocks;
    return 0;
}

static bench_handle pheap_bench_alloc(size_t size)
{
    pheap_off off = pheap_alloc(heap, size);
    if (!off)
        bench_alloc_why(pheap_errmsg());
    return off;
}

static void pheap_bench_free(bench_handle h)
{
    int rc = pheap_free(heap, h);
    if (rc != 0 && __atomic_fetch_add(&free_errors, 1, __ATOMIC_RELAXED) == 0)
        first_free_error = rc;
}

static void *pheap_bench_addr(bench_handle h)
{
    return pheap_direct(heap, h);
}

/* A failed free is a bug the workload cannot see: report it here. */
static int pheap_bench_close(void)
{
    uint64_t errors = __atomic_load_n(&free_errors, __ATOMIC_RELAXED);
    int rc = pheap_close(heap);
    heap = NULL;
    if (errors) {
        bench_fail("%llu pheap_free calls failed, the first with %s",
                   (unsigned long long)errors, pheap_strerror(first_free_error));
        return -1;
    }
    if (rc != 0) {
        bench_fail("pheap_close: %s: %s", pheap_strerror(rc), pheap_errmsg());
        return -1;
    }
    return 0;
}

static int pheap_bench_counters(bench_counters *out)
{
    struct pheap_stats s;
    if (pheap_stats(heap, &s) != 0)
        return -1;
    out->flushes = s.flushes;
    out->fences = s.fences;
    out->reflushes = s.reflushes;
    return 0;
}

static int pheap_bench_heap_bytes(uint64_t *out)
{
    struct pheap_stats s;
    if (pheap_stats(heap, &s) != 0)
        return -1;
    *out = s.slab_bytes + s.large_bytes;
    return 0;
}

#define PHEAP_CALLS                          \
    .persistent = 1,                         \
    .alloc = pheap_bench_alloc,              \
    .free = pheap_bench_free,                \
    .addr = pheap_bench_addr,                \
    .close = pheap_bench_close,              \
    .counters = pheap_bench_counters,        \
    .heap_bytes = pheap_bench_heap_bytes

const bench_allocator bench_pheap = {
    .name = "pheap",
    .what = "pheap pheap_alloc/pheap_free (persistent, LOG consistency)",
    PHEAP_CALLS,
    .load = pheap_bench_load,
    .init = pheap_bench_init,
    .reopen = pheap_bench_reopen,
};

const bench_allocator bench_pheap_noprot = {
    .name = "pheap-noprot",
    .what = "pheap with metadata protection off (PHEAP_PROTECT=off): what protection costs",
    PHEAP_CALLS,
    .load = pheap_bench_load,
    .init = pheap_noprot_bench_init,
    .reopen = pheap_noprot_bench_reopen,
};

const bench_allocator bench_pheap_nomorph = {
    .name = "pheap-nomorph",
    .what = "pheap with slab morphing off (PHEAP_MORPH=0): what morphing saves and costs",
    PHEAP_CALLS,
    .load = pheap_bench_load,
    .init = pheap_nomorph_bench_init,
    .reopen = pheap_nomorph_bench_reopen,
};

static int pheap_bench_relocate(bench_handle *const *slots, size_t n)
{
    _Static_assert(sizeof(bench_handle) == sizeof(pheap_off), "a handle is an offset");
    if (pheap_defrag(heap, (pheap_off *const *)slots, n, NULL) != 0) {
        bench_fail("pheap_defrag: %s", pheap_errmsg());
        return -1;
    }
    return 0;
}

static void pheap_bench_collect(void)
{
    pheap_thread_collect(heap);
}

const bench_allocator bench_pheap_defrag = {
    .name = "pheap-defrag",
    .what = "pheap with pheap_defrag after each fragbench phase's frees (blocks move)",
    PHEAP_CALLS,
    .load = pheap_bench_load,
    .init = pheap_bench_init,
    .reopen = pheap_bench_reopen,
    .relocate = pheap_bench_relocate,
    .collect = pheap_bench_collect,
};

const bench_allocator bench_pheap_keys = {
    .name = "pheap-keys",
    .what = "pheap with metadata protected by protection keys (PHEAP_PROTECT=keys)",
    PHEAP_CALLS,
    .load = pheap_keys_bench_load,
    .init = pheap_keys_bench_init,
    .reopen = pheap_keys_bench_reopen,
};

const bench_allocator bench_pheap_gc = {
    .name = "pheap-gc",
    .what = "pheap pheap_alloc/pheap_free (persistent, GC consistency: recovery by tracing)",
    PHEAP_CALLS,
    .load = pheap_bench_load,
    .init = pheap_gc_bench_init,
    .reopen = pheap_gc_bench_reopen,
    .root_set = pheap_bench_root_set,
    .recover = pheap_bench_recover,
};
