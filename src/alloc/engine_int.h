/*
 * engine_int.h -- what the files of the allocation engine share: the chunk
 * map, the thread-cache refill and flush, and the checks of small blocks
 * (engine.c), used by the transactional operations (engine_tx.c).
 */
#ifndef PH_ALLOC_ENGINE_INT_H
#define PH_ALLOC_ENGINE_INT_H

#include "alloc/engine.h"

/* The slab chunk `off` lies in is now, or NULL (free space, an extent). */
static inline ph_slab *ph_engine_chunk_slab(const ph_engine *e, uint64_t off)
{
    return ph_load(&e->chunks[(off - e->data_off) / PH_CHUNK_SIZE]);
}

/* Chunks of the data region backed by the file now. */
static inline uint64_t ph_engine_backed_chunks(const ph_engine *e)
{
    return (ph_space_size(e->sp) - e->sp->data_off) / PH_CHUNK_SIZE;
}

static inline uint64_t ph_engine_chunk_of(const ph_engine *e, uint64_t off)
{
    return (off - e->sp->data_off) / PH_CHUNK_SIZE;
}

/* Refills class cls's cache and pops a block, or 0 (heap full, error set). */
uint64_t ph_engine_refill(ph_engine *e, ph_tcache *t, ph_pctx *c, unsigned cls);
/* Puts a free block into the thread's cache (or back to its slab). */
void ph_engine_cache_block(ph_engine *e, ph_tcache *t, ph_pctx *c, unsigned cls, uint64_t off);
/* Reserves a large extent (nothing durable), reclaiming once when full. */
int ph_engine_reserve_large(ph_engine *e, ph_tcache *t, ph_pctx *c, size_t size, uint64_t *off);
/* 0 and the block index when `off` starts a live block of slab s; else the
 * error of a bad free, message set. */
int ph_engine_live_small(const ph_slab *s, uint64_t off, uint32_t *idx);
/* The message of a free of a block whose A bit is clear. */
int ph_engine_clear_error(int rc, uint64_t off);

/* Every arena's partial lists made again from the slabs' available sets
 * (after a recovery rewrote them); no other thread may run. */
void ph_engine_rebuild_partials(ph_engine *e);
/* Releases every empty slab of every arena. */
void ph_engine_release_empty_slabs(ph_engine *e, ph_pctx *c);

/* Recovery of interrupted transactions, at open after the lanes' (engine_tx.c). */
int ph_engine_tx_recover(ph_engine *e, ph_pctx *c);
/* Check of the transaction logs (engine_tx.c): problems found. */
unsigned ph_engine_tx_check(ph_engine *e, int idle, char *err, size_t errlen);

#endif
