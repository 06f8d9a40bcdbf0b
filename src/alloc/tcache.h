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
    uint64_t *top;         /* one past the newest cached block: v + count (read by
                              pheap_stats: relaxed) */
    uint64_t *v;           /* block offsets, a stack from here up; NULL until the
                              cache is set up (relaxed: pheap_stats reads it) */
    uint64_t *end;         /* v + capacity */
    uint64_t unused;       /* (a bin is 32 bytes: one shift to index) */
} ph_tbin;

/* Blocks cached in b, by its thread. */
static inline uint32_t ph_tbin_count(const ph_tbin *b)
{
    return (uint32_t)(b->top - b->v);
}

static inline uint32_t ph_tbin_cap(const ph_tbin *b)
{
    return (uint32_t)(b->end - b->v);
}

static inline void ph_tbin_set_count(ph_tbin *b, uint32_t n)
{
    ph_store_relaxed(&b->top, b->v + n);
}

/* Blocks cached in b, read by another thread (pheap_stats): a snapshot,
 * 0 for a cache not set up yet. */
static inline uint32_t ph_tbin_count_racy(const ph_tbin *b)
{
    uint64_t *top = ph_load_relaxed(&b->top), *v = ph_load_relaxed(&b->v);
    return v && top > v ? (uint32_t)(top - v) : 0;
}

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
    uint64_t *top = b->top;
    if (ph_unlikely(top == b->v))
        return 0;
    ph_store_relaxed(&b->top, top - 1); /* relaxed: pheap_stats reads it */
    return top[-1];
}

/* A freed block goes just below the top of the stack, so the next
 * allocation does not hand it straight back: that would commit the same
 * bitmap word in two consecutive fence batches (a reflush). */
static inline int ph_tcache_push(ph_tcache *t, unsigned cls, uint64_t off)
{
    ph_tbin *b = &t->bins[cls];
    uint64_t *top = b->top;
    if (ph_unlikely(top == b->end))
        return 0;
    if (ph_likely(top != b->v)) {
        top[0] = top[-1];
        top[-1] = off;
    } else {
        top[0] = off;
    }
    ph_store_relaxed(&b->top, top + 1);
    return 1;
}

/* A freed block on top of the stack of class cls among `bins` (a cache's
 * bins[]: GC mode, no bitmap word to reflush). */
static inline int ph_tcache_push_top(ph_tbin *bins, unsigned cls, uint64_t off)
{
    ph_tbin *b = &bins[cls];
    uint64_t *top = b->top;
    if (ph_unlikely(top == b->end))
        return 0;
    *top = off;
    ph_store_relaxed(&b->top, top + 1);
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
