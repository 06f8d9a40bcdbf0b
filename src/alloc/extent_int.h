/*
 * extent_int.h -- what the files of the large allocator share: the index
 * (extent_index.c), the log (extent_log.c), the backed range and purges
 * (extent_backing.c), and the operations that use them (extent.c).  All
 * calls that change the index are made with the index lock held.
 */
#ifndef PH_ALLOC_EXTENT_INT_H
#define PH_ALLOC_EXTENT_INT_H

#include "alloc/extent.h"

#define PAGES_PER_CHUNK (PH_CHUNK_SIZE / PH_PAGE_SIZE)

static inline uint64_t page_of(const ph_extents *x, uint64_t off)
{
    return (off - x->sp->data_off) / PH_PAGE_SIZE;
}

static inline uint64_t off_of(const ph_extents *x, uint64_t page)
{
    return x->sp->data_off + page * PH_PAGE_SIZE;
}

/* ---- operations (extent.c) ---- */

/* Takes the index lock -- and in a shared heap the lock between processes,
 * then brings the index up to date (ph_extent_sync_locked, what it did in
 * *info, which may be NULL); with `purge`, returns released extents to
 * free space and may purge.  `c` may be NULL (a call that appends
 * nothing).  0, or the sync's error (the locks are held all the same). */
int ph_extent_lock(ph_extents *x, ph_pctx *c, int purge, ph_extents_sync_info *info);
/* Drops the locks; with `fence`, the caller's entries are fenced -- in a
 * shared heap before the lock between processes goes (no other process
 * may read an entry that a crash could still lose), else after. */
void ph_extent_unlock(ph_extents *x, ph_pctx *c, int fence);
/* ph_extents_sync with the locks held. */
int ph_extent_sync_locked(ph_extents *x, ph_extents_sync_info *info);

/* Returns the extents whose free is durable to free space (lock held). */
void ph_extent_drain_released(ph_extents *x);
/* Frees what ph_extents_open made, but not x itself; no purge. */
void ph_extents_fini(ph_extents *x);

/* ---- index (extent_index.c) ---- */

/* Size bin of a free extent of n pages. */
unsigned ph_extent_index_bin(uint64_t n);
/* Records node n in the page -> node maps. */
void ph_extent_index_set(ph_extents *x, ph_extnode *n);
/* A node from the pools; NULL when out of memory. */
ph_extnode *ph_extent_index_node(ph_extents *x, uint64_t page, uint64_t n, uint32_t kind,
                                 unsigned cls);
/* Turns n into free space, merged with free neighbours; `dirty`: its pages
 * may be backed (a purge may punch them). */
void ph_extent_index_make_free(ph_extents *x, ph_extnode *n, int dirty);
/* Carves [page, page + n) out of free node f as `kind`; NULL when out of
 * memory (f unchanged). */
ph_extnode *ph_extent_index_carve(ph_extents *x, ph_extnode *f, uint64_t page, uint64_t n,
                                  uint32_t kind, unsigned cls);
/* The node whose pages hold `page` (walking back to its head), or NULL
 * (past the backed pages). */
ph_extnode *ph_extent_index_holding(const ph_extents *x, uint64_t page);
/* Best free fit for n pages (chunk-aligned when `aligned`); *at gets the
 * first page.  NULL when nothing fits. */
ph_extnode *ph_extent_index_find_fit(ph_extents *x, uint64_t n, int aligned, uint64_t *at);
/* Builds the index of the backed pages from the sorted live extents. */
typedef struct ph_extent_rec {
    uint64_t page, n;
    uint32_t kind, cls;
} ph_extent_rec;
int ph_extent_index_build(ph_extents *x, const ph_extent_rec *live, uint64_t n);
/* Frees the node pools. */
void ph_extent_index_fini(ph_extents *x);

/* ---- log (extent_log.c) ---- */

/* Writes the entry of node n as `kind` with non-temporal stores, compacting
 * first when the active half is full; the caller fences after dropping
 * the lock. */
void ph_extent_log_append(ph_extents *x, ph_pctx *c, const ph_extnode *n, uint32_t kind);
/* Replays the active half into a sorted array of live extents (malloc'ed);
 * *used gets the append position.  PHEAP_ECORRUPT when the log
 * contradicts itself. */
int ph_extent_log_replay(ph_extents *x, ph_extent_rec **out, uint64_t *nout, uint64_t *used);

/* 1 and *out when slot j (in log order) of the active half holds an entry
 * of its epoch; else 0. */
int ph_extent_log_entry(const ph_extents *x, uint64_t j, ph_extent_rec *out);

/* Whether recovery can trust the log: its header's epochs, and every slot
 * of the active half that replay reads holds an entry of the active epoch,
 * zeros, or one word of a torn append (heaps with tagged logs: see
 * compaction).  0, or 1 with a message in err. */
int ph_extent_log_audit(const ph_extents *x, char *err, size_t errlen);

/* ---- the backed range and purges (extent_backing.c) ---- */

/* Faults in the page maps for pages [from, to). */
void ph_extent_backing_prefault(ph_extents *x, uint64_t from, uint64_t to);
/* Grows the heap so that n free pages (chunk-aligned) can fit at its end. */
int ph_extent_backing_grow(ph_extents *x, ph_pctx *c, uint64_t n, int aligned);
/* Makes the pages the heap has grown by since the index last looked
 * (another index's growth: their descriptors are clear already) free
 * space.  0 or PHEAP_ENOMEM. */
int ph_extent_backing_adopt(ph_extents *x);
/* Punched pages: marked by a purge (and, at open, every free page, whose
 * past is not known); refill reserves the file space of a range about to
 * be handed out if any of its pages is marked (PHEAP_ENOSPC when the file
 * system is full), then unmarks it. */
void ph_extent_backing_mark_punched(ph_extents *x, uint64_t page, uint64_t n);
int ph_extent_backing_refill(ph_extents *x, uint64_t page, uint64_t n);

/* Punches the dirty free extents of PH_PUNCH_MIN or more. */
void ph_extent_backing_purge(ph_extents *x);
/* Purges when the budget or the delay since the first free is reached. */
void ph_extent_backing_maybe_purge(ph_extents *x);

#endif
