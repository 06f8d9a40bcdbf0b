/*
 * tcache.h -- the per-thread cache of free small blocks, one stack per size
 * class.  The common allocation and free are a pop and a push here plus
 * one bitmap commit; no lock.  Blocks in a cache are free in the bitmap
 * (the durable truth) and absent from their slab's available set, so after
 * a crash they are simply free again.
 */
#ifndef PH_ALLOC_TCACHE_H
#define PH_ALLOC_TCACHE_H

#include <stdint.h>

#include "alloc/sizeclass.h"
#include "log/lane.h"

typedef struct ph_tbin {
    uint32_t n;            /* blocks cached */
    uint32_t cap;          /* capacity; 0 until the cache is set up */
    uint64_t *v;           /* block offsets, a stack */
} ph_tbin;

typedef struct ph_tcache {
    ph_tbin bins[PH_CLASSES];
    uint64_t *store;       /* backing array of all bins */
    ph_lane lane;          /* this thread's lane, for logged operations */
    int arena;             /* home arena, chosen at first refill; -1 before */
    const uint64_t *prefer; /* chunks of slabs (of any arena) a refill takes blocks
                              from first, fullest first: pheap_defrag's destinations */
    uint32_t nprefer;
} ph_tcache;

static inline uint64_t ph_tcache_pop(ph_tcache *t, unsigned cls)
{
    ph_tbin *b = &t->bins[cls];
    uint32_t n = b->n;
    if (ph_unlikely(!n))
        return 0;
    ph_store_relaxed(&b->n, n - 1); /* relaxed: pheap_stats reads it */
    return b->v[n - 1];
}

/* A freed block goes just below the top of the stack, so the next
 * allocation does not hand it straight back: that would commit the same
 * bitmap word in two consecutive fence batches (a reflush). */
static inline int ph_tcache_push(ph_tcache *t, unsigned cls, uint64_t off)
{
    ph_tbin *b = &t->bins[cls];
    if (ph_unlikely(b->n == b->cap))
        return 0;
    if (ph_likely(b->n)) {
        b->v[b->n] = b->v[b->n - 1];
        b->v[b->n - 1] = off;
    } else {
        b->v[0] = off;
    }
    ph_store_relaxed(&b->n, b->n + 1);
    return 1;
}

/* A freed block on top of the stack of class cls among `bins` (a cache's
 * bins[]: GC mode, no bitmap word to reflush). */
static inline int ph_tcache_push_top(ph_tbin *bins, unsigned cls, uint64_t off)
{
    ph_tbin *b = &bins[cls];
    if (ph_unlikely(b->n == b->cap))
        return 0;
    b->v[b->n] = off;
    ph_store_relaxed(&b->n, b->n + 1);
    return 1;
}

/* Capacity of a class's stack: more for small blocks, at least 4.  A GC
 * heap's caches are deeper: their blocks cost nothing to hold, and every
 * refill or overflow takes the arena's lock. */
static inline uint32_t ph_tcache_cap(unsigned cls, int gc)
{
    uint32_t c = (gc ? 65536u : 8192u) / ph_class_size[cls], max = gc ? 1024u : 64u;
    return c < 4 ? 4 : c > max ? max : c;
}

#endif
