/*
 * engine_int.h -- what the files of the allocation engine share: the chunk
 * map, the thread-cache refill and flush, and the checks of small blocks
 * (engine.c), used by the transactional operations (engine_tx.c).
 */
#ifndef PH_ALLOC_ENGINE_INT_H
#define PH_ALLOC_ENGINE_INT_H

#include <stdlib.h>

#include "alloc/engine.h"
#include "alloc/morph.h"

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
/* 0 and *r when `off` starts a live block of slab s (alloc/morph.h); else
 * the error of a bad free, message set. */
int ph_engine_live_small(const ph_slab *s, uint64_t off, ph_blockref *r);
/* With r's word locked (or at recovery): clears r's A bit -- an old
 * block's, or one of the class's as ph_slab_clear_locked -- durable at the
 * caller's next fence.  0, or the error with nothing changed. */
int ph_engine_clear_block(ph_space *sp, ph_pctx *c, ph_slab *s, const ph_blockref *r);
/* After old block j of morphed slab s was freed (its bit durably clear):
 * the blocks of the slab's class it alone pinned become available. */
void ph_engine_old_freed(ph_engine *e, ph_pctx *c, ph_slab *s, uint32_t j);
/* The block of slab s that `off` lies in: its bits (3 live, 2 freed, 1 the
 * space of an old block freed, 0 never allocated), start and size (0: in
 * the unused tail of the slab).  Takes no lock. */
unsigned ph_engine_small_at(const ph_slab *s, uint64_t off, uint64_t *start, uint32_t *size);
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

/* What a takeover gives back once the logs that free it are retired
 * (engine_share.c): small blocks, onto their slabs' remote-free lists;
 * large blocks (PH_GIVE_LARGE | off), freed and held until then, released
 * -- a taker that dies before the retirement leaves them held, and its own
 * takeover frees them; the next taker's replay finds them no live block
 * and frees nothing that another process may have allocated meanwhile. */
typedef struct ph_engine_pushes {
    uint64_t *v;
    size_t n, cap;
} ph_engine_pushes;

#define PH_GIVE_LARGE 1u /* low bit of an entry: a held large block (offsets are 8-aligned) */

static inline int ph_engine_pushes_add(ph_engine_pushes *p, uint64_t off)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 16;
        uint64_t *v = realloc(p->v, cap * sizeof(*v));
        if (!v)
            return -1;
        p->v = v;
        p->cap = cap;
    }
    p->v[p->n++] = off;
    return 0;
}

/* Recovery's free of the live large block at `off`: at once, or -- in a
 * takeover (`gives`) -- held, and given back after the retirement. */
int ph_engine_free_large(ph_engine *e, ph_pctx *c, ph_engine_pushes *gives, uint64_t off);

/* A takeover of the transaction logs of a dead process's lanes (those
 * whose holder byte is `owner`), as recovery at open takes every lane's,
 * in three steps: rolled back or forward, and what that did fenced (the
 * small blocks its frees give back into *pushes); then, under the extent
 * index's locks with the lanes' retirement, the logs retired (durable at
 * the caller's fence); then their overflow segments freed.  NULL with *rc
 * 0 when the heap has no logs; *rc the error (ECORRUPT: a damaged log,
 * nothing written for it). */
typedef struct ph_tx_recovery ph_tx_recovery;
ph_tx_recovery *ph_engine_tx_takeover(ph_engine *e, ph_pctx *c, uint8_t owner,
                                      ph_engine_pushes *pushes, int *rc);
void ph_engine_tx_takeover_retire(ph_tx_recovery *t);
int ph_engine_tx_takeover_end(ph_tx_recovery *t);

/* Nonzero, with its description in msg, when chunk ch -- no slab in the
 * extent log -- has a descriptor that records allocated blocks: a slab
 * the log lost (a slab is released only once its A bits are durably clear,
 * and a chunk's bitmap is zeroed before it becomes a slab again). */
int ph_engine_orphan_descriptor(const ph_engine *e, uint64_t ch, char *msg, size_t len);

/* The extent index's screen (ph_extent_screen_fn, arg the engine): free
 * space is handed out -- as a slab or a large block -- only where no
 * chunk it touches has a descriptor that records allocated blocks, a slab
 * the log lost, whose blocks the program may still use.  Such a chunk is
 * PHEAP_ECORRUPT, and set aside.  Each descriptor is read once per open,
 * when its chunk is first reserved or purged, so that an open reads none. */
int ph_engine_screen(void *arg, uint64_t off, uint64_t bytes, uint64_t *bad);

/* Calls fn(arg, off) for each block that a FREE record of a committed log
 * not yet retired names, in any lane: a commit or a takeover may still
 * clear it and give it back, so an adoption may not hand it out. */
void ph_engine_tx_scan_frees(ph_engine *e, void (*fn)(void *, uint64_t), void *arg);

#endif
