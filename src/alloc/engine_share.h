/*
 * engine_share.h -- what engine.c calls in a heap shared between
 * processes (engine_share.c says how the engine differs there).
 */
#ifndef PH_ALLOC_ENGINE_SHARE_H
#define PH_ALLOC_ENGINE_SHARE_H

#include "alloc/engine_int.h"

/* A slab this process makes is its own (its words compare-and-swap from
 * now on), from before its commit; a slab it released is no one's --
 * unless another process made a slab there since. */
void ph_engine_share_own(ph_engine *e, ph_slab *s);
void ph_engine_share_disown(ph_engine *e, ph_slab *s);

/* A free of `off`, which no slab of this process holds: a block of
 * another process's slab is cleared durably and goes to that slab's
 * remote-free list in one hold of the extent index's locks (pheap_free,
 * and a transaction's commit); 0, or the error of a bad free, nothing
 * changed; 1 when no slab holds it (the caller frees it as a large
 * block). */
int ph_engine_share_free(ph_engine *e, ph_pctx *c, uint64_t off);

/* Whether `off`, which no slab of this process holds, is a live block of
 * another process's slab: 0 when it is, 1 when no slab holds it (a large
 * block's business), else the error its free would meet. */
int ph_engine_share_live(ph_engine *e, ph_pctx *c, uint64_t off);

/* A logged free of a block of another process's slab, in two steps
 * around the retirement of its lane entry: its A bit cleared durably (0,
 * or the error of a bad free, nothing changed); then, under the extent
 * index's locks, which adoptions hold too, the entry retired and the
 * block (`off`; 0: none, the free failed) pushed onto the slab's
 * remote-free list -- after the retirement, so that no replay of the
 * entry meets the block handed out again, and with no adoption between,
 * which would make the block available before the push did it again. */
int ph_engine_share_clear(ph_engine *e, ph_pctx *c, uint64_t off);
void ph_engine_share_retire_push(ph_engine *e, ph_pctx *c, ph_lane *lane, uint64_t off);


/* A takeover's view of another process's slab holding `off`: a slab
 * (malloc'ed) whose commits are compare-and-swaps on the descriptor, with
 * the index's locks held -- the chunk stays that slab -- until
 * ph_engine_share_unview; NULL (nothing held) when no slab holds `off`.
 * ph_engine_share_push pushes a block freed through it (locks held). */
ph_slab *ph_engine_share_view(ph_engine *e, ph_pctx *c, uint64_t off);
void ph_engine_share_unview(ph_engine *e, ph_pctx *c, ph_slab *view);
void ph_engine_share_push(ph_engine *e, uint64_t off);
/* ph_engine_small_at for `off` in another process's slab: 1 with *bits,
 * *start and *size; 0 when no slab holds `off`. */
int ph_engine_share_small_at(ph_engine *e, uint64_t off, uint64_t *start, uint32_t *size,
                             unsigned *bits);

/* For a refill of class cls in arena ai that found no slab with blocks
 * (arena lock held): a slab of this process's whose blocks others freed,
 * taken back, or else an unowned slab of the class, adopted; NULL when
 * neither (a new slab must be made).  The slab is on no partial list. */
ph_slab *ph_engine_share_refill(ph_engine *e, ph_pctx *c, unsigned ai, unsigned cls);

/* Rolls forward the committed entries of lane `lane`, a dead process's
 * (the caller retires them): returns how many, *rc the error that stopped
 * it; the small blocks they free, into *pushes, for the list of their
 * slab once the lane is retired. */
unsigned ph_engine_share_replay(ph_engine *e, ph_pctx *c, unsigned lane, ph_engine_pushes *pushes,
                                int *rc);

/* A transaction's frees of other processes' blocks (v[k].foreign): the
 * index's locks taken, each A bit cleared (durable at the caller's fence;
 * a bad free skipped), and the locks kept until
 * ph_engine_share_tx_push, after the log's retirement, gives the blocks
 * back to their slabs' lists: before it, a takeover of this process
 * would roll the free forward again, so no one may have the block; no
 * adoption comes between, which would make it available twice. */
void ph_engine_share_tx_clear(ph_engine *e, ph_pctx *c, ph_tx_change *v, size_t n);
void ph_engine_share_tx_push(ph_engine *e, ph_pctx *c, const ph_tx_change *v, size_t n);

#endif
