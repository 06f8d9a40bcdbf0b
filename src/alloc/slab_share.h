/*
 * slab_share.h -- slabs of a heap shared between processes
 * (docs/SHARING.md, "Small blocks").
 *
 * A slab belongs to one process at a time, its owner, named by the chunk's
 * entry of the process table (ph_procs_chunk.xowner).  Only the owner
 * hands out its blocks, from its own available set and thread caches.
 * Any process may free a block of it.  So a bitmap word has writers in
 * several processes, and no per-process word lock orders them: in a
 * shared heap every change of a word is a compare-and-swap on the
 * descriptor (the truth), flushed and fenced, and the owner's volatile
 * copy follows the descriptor rather than leading it.
 *
 * A free by another process ("remote") clears A durably, then pushes the
 * block onto the chunk's remote-free list (a stack linked through the
 * freed blocks' first words, ph_procs_chunk.xremote); the owner takes the
 * whole list at once (exchange with empty) and makes its blocks
 * available.  A block is pushed only by the free whose compare-and-swap
 * cleared its A bit, and cannot be freed again before the owner has taken
 * it and handed it out, so it is never on the list twice.
 *
 * A process that dies between the two steps leaves a block free in the
 * bitmap but on no list: unavailable, not lost -- free space to the next
 * owner of the slab (adoption rebuilds the available set from the bitmap)
 * and to the next open.  Remote frees and adoption run under a lock that
 * also keeps the chunk a slab meanwhile (the extent log's, between
 * processes): adoption sees no free half done but a dead one's.
 */
#ifndef PH_ALLOC_SLAB_SHARE_H
#define PH_ALLOC_SLAB_SHARE_H

#include <stdint.h>

#include "alloc/slab.h"
#include "format/layout.h"

/* The owner's allocation of block i of its slab s: A and E set by
 * compare-and-swap, the copy refreshed, the line flushed (durable at the
 * caller's next fence).  0, or PHEAP_EBUSY when the block is not free in
 * the bitmap (nothing changed: the caller's available set was wrong). */
int ph_slab_shared_set(ph_space *sp, ph_pctx *c, ph_slab *s, uint32_t i);

/* 0, with the bitmap word and A's shift of block `off`, when it is a live
 * block of the slab whose descriptor is d (read from the descriptor: any
 * process's slab); else the error of its free, as ph_slab_shared_clear. */
int ph_slab_desc_live(const ph_slab_desc *d, uint64_t chunk_off, uint64_t off, uint32_t *w,
                      uint32_t *sh);

/* A free of block `off` in the slab whose descriptor is d (any process's):
 * A cleared by compare-and-swap and flushed (durable at the caller's next
 * fence).  Errors, with nothing changed: PHEAP_EINTERIOR (not a block's
 * start, or a pinned block), PHEAP_EDOUBLEFREE, PHEAP_ENOTALLOC, and
 * PHEAP_ENOTSUP for a morphed slab (never in a shared heap). */
int ph_slab_shared_clear(ph_space *sp, ph_pctx *c, ph_slab_desc *d, uint64_t chunk_off,
                         uint64_t off);

/* A remote free: ph_slab_shared_clear, fenced, then `off` pushed onto the
 * chunk's remote-free list `pc`.  The caller holds the lock that keeps
 * the chunk this slab.  Errors as ph_slab_shared_clear. */
int ph_slab_remote_free(ph_space *sp, ph_pctx *c, ph_slab_desc *d, ph_procs_chunk *pc,
                        uint64_t chunk_off, uint64_t off);

/* The second step alone: `off`, whose A bit a free cleared durably, pushed
 * onto the list (a logged free pushes only with its lane entry's
 * retirement: a replay of the entry must never meet the block handed out
 * again).  Under the same lock. */
void ph_slab_remote_push(ph_space *sp, ph_procs_chunk *pc, uint64_t off);

/* The owner takes its slab's remote-free list: each block on it is
 * available again (the copy refreshed from the descriptor).  Arena lock
 * held.  Returns the blocks taken; a link that names no free block of the
 * slab ends the walk (*bad set: the list was damaged). */
uint32_t ph_slab_collect(ph_space *sp, ph_slab *s, ph_procs_chunk *pc, int *bad);

/* Takes a dead process's slab for process `me`: its class, copy and
 * available set built from the descriptor (blocks that the dead process's
 * caches held are free there already), its list dropped.  Under the lock
 * of ph_slab_remote_free.  0, or PHEAP_ECORRUPT (the descriptor names no
 * class, or a morph: nothing changed). */
int ph_slab_adopt(ph_slab *s, ph_procs_chunk *pc, uint64_t me);

/* Makes process `me` the owner of a slab it just made (its list empty). */
static inline void ph_slab_own(ph_procs_chunk *pc, uint64_t me)
{
    __atomic_store_n(&pc->xremote, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&pc->xowner, me, __ATOMIC_RELEASE);
}

static inline uint64_t ph_slab_owner(const ph_procs_chunk *pc)
{
    return __atomic_load_n(&pc->xowner, __ATOMIC_ACQUIRE);
}

#endif
