/*
 * share.h -- a heap opened for sharing between processes (PHEAP_SHARED;
 * docs/SHARING.md): the open that recovers the heap or joins the processes
 * using it, the takeover of dead ones, and the close.
 */
#ifndef PH_HEAP_SHARE_H
#define PH_HEAP_SHARE_H

#include "heap/heap.h"

/* What an open for sharing needs of the heap and the options: 0, or
 * PHEAP_ENOTSUP (a GC heap, a heap made before sharing). */
int ph_share_check(pheap *h);

/* The session of an open for sharing, in place of an exclusive open's
 * (h mapped and registered): under the process table's gate, the first
 * process (no other holds the heap) recovers the heap as an exclusive open
 * does and resets the table's sharing state; every process then takes a
 * lease, builds its engine (ph_engine_open_shared) and takes over the
 * processes that died holding the heap.  0 or the error of the open. */
int ph_share_open(pheap *h);

/* The close of an open for sharing, before the handle's release: thread
 * caches back, slabs left to no one, dead processes taken over, the lease
 * given back -- and the heap marked clean by the last process. */
void ph_share_close(pheap *h, ph_pctx *c);

/* Takes over the processes that died holding the heap, unless another
 * process is at it (ph_share_tick calls it at most every
 * PH_SHARE_POLL_NS). */
void ph_share_poll(pheap *h);

#define PH_SHARE_POLL_NS (10u * 1000u * 1000u)
#define PH_SHARE_POLL_OPS 256u /* calls of a thread between two looks at the clock */

void ph_share_tick_slow(pheap *h);

/* Every write call of a thread of a shared heap: now and then, a look for
 * dead processes. */
static inline void ph_share_tick(pheap *h, ph_thread *t)
{
    if (ph_unlikely(++t->share_calls % PH_SHARE_POLL_OPS == 0))
        ph_share_tick_slow(h);
}

/* pheap_stats' figures of sharing. */
void ph_share_stats(pheap *h, struct pheap_stats *out);

/* The name directory of h (opened) shared: its sequence and lock the
 * process table's. */
void ph_share_names(pheap *h);
/* The directory's write lock held: every dead sharer taken over now. */
void ph_share_take_over_dead_held(pheap *h);

/* The root table's lock: the process lock besides the thread lock. */
void ph_share_root_lock(pheap *h);
void ph_share_root_unlock(pheap *h);

#endif
