/*
 * tx_int.h -- what the files of transactions share: the thread's volatile
 * transaction state (struct ph_tx), the writing of its log (tx_log.c) and
 * the set of bytes it snapshotted (tx_ranges.c).  The public calls and the
 * crash protocol are in tx.c.
 */
#ifndef PH_HEAP_TX_INT_H
#define PH_HEAP_TX_INT_H

#include <stdlib.h>

#include "heap/heap.h"

#define SEG_MIN (64u * 1024u)   /* first overflow segment */
#define SEG_MAX (4u << 20)      /* overflow segments grow to this */
#define TAIL (2 * sizeof(ph_txrec)) /* kept free at a segment's end: NEXT, or COMMIT */

typedef struct span {
    uint64_t off, len;
} span;

typedef struct redo {
    uint64_t off;
    uint32_t len;
    int own;              /* pheap's own metadata (a name's lines): never skipped */
    const uint8_t *data;  /* the new bytes, in the log */
} redo;

typedef struct undo {
    uint64_t off;
    uint32_t len;
    const uint8_t *data;  /* the old bytes, in the log */
} undo;

/* A growable array of `type` in fields v, n, cap. */
#define VEC(type) struct { type *v; size_t n, cap; }

struct ph_tx {
    unsigned depth;             /* levels open; 0: no transaction */
    unsigned aborted;           /* rolled back, levels still open */
    int lane;                   /* lane whose sequences seq..ceiling are ours; -1 none */
    uint64_t seq;               /* the transaction's sequence */
    uint64_t ceiling;           /* durable ceiling of the lane */
    ph_txlog_anchor *anchor;
    uint8_t *area;              /* the lane's records area */
    ph_txseg seg;               /* segment being written */
    size_t pos, flushed;        /* append position and flushed bytes in it */
    uint64_t seg_bytes;         /* size of the last overflow segment */
    int active;                 /* xstate := seq | ACTIVE written */
    uint64_t records;           /* records written (NEXT, COMMIT excluded) */
    uint32_t chain;             /* their chained CRC */
    uint64_t fences0;           /* thread's fences at the call's start */
    VEC(span) added;            /* bytes with an UNDO snapshot: sorted, disjoint */
    VEC(undo) undos;            /* UNDO records, in log order */
    VEC(redo) redos;            /* REDO records, in log order */
    VEC(ph_tx_change) changes;  /* ALLOC and FREE records, in log order */
    VEC(uint64_t *) links;      /* the words that link overflow segments, in order */
    VEC(struct ph_name_hold *) names; /* names it creates or removes (names_tx.c) */
    size_t name_tail;           /* log bytes kept for the records of those names,
                                   written by the commit (before its COMMIT record) */
};

#define VEC_PUSH(vec, item)                                                             \
    ((vec).n < (vec).cap || ph_tx_vec_grow((void **)&(vec).v, &(vec).cap, sizeof(*(vec).v)) \
         ? ((vec).v[(vec).n++] = (item), 0)                                             \
         : PHEAP_ENOMEM)


static inline int ph_tx_vec_grow(void **v, size_t *cap, size_t elem)
{
    size_t c = *cap ? *cap * 2 : 16;
    void *p = realloc(*v, c * elem);
    if (!p)
        return 0;
    *v = p;
    *cap = c;
    return 1;
}

static inline ph_persist *ph_tx_persist(pheap *h)
{
    return &h->sp.persist;
}

static inline int ph_tx_overlaps(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
    return a < b + blen && b < a + alen;
}

/* The thread's transaction for a call that needs one: NULL with the error
 * set (PHEAP_ENOTX, PHEAP_EABORTED, or the handle's). */
ph_tx *ph_tx_current(pheap *h, ph_thread **tp, const char *call);
/* A failure that aborts: rolls back, keeps the error of `rc`. */
int ph_tx_fail(pheap *h, ph_thread *t, ph_tx *tx, int rc);
/* Reserves a block of `size` bytes for the transaction, runs `init` (may
 * be NULL) on it, logs its ALLOC record: 0 and *off.  A failing
 * initialiser fails alone (PHEAP_ECANCELED, nothing reserved); no memory
 * or log space aborts. */
int ph_tx_take(pheap *h, ph_thread *t, ph_tx *tx, size_t size, const ph_block_init *init,
               uint64_t *off, const char *call);
/* Logs the FREE record of the block at `off` (live, or the transaction's
 * own): 0, or the error of a bad offset (nothing changes), or of an abort. */
int ph_tx_give(pheap *h, ph_thread *t, ph_tx *tx, uint64_t off, const char *call);
/* Keeps log room for a REDO record of `len` bytes that the commit writes. */
int ph_tx_keep_room(pheap *h, ph_thread *t, ph_tx *tx, uint32_t len);
/* Room for n more REDO records in tx->redos: 0 or PHEAP_ENOMEM. */
int ph_tx_redo_slots(ph_tx *tx, size_t n);
/* The commit's REDO record of pheap's own bytes (room kept, slot made). */
void ph_tx_redo_own(ph_tx *tx, uint64_t off, const void *src, uint32_t len);

/* ---- names in the transaction (names_tx.c) ---- */

/* At the outermost commit, before its COMMIT record: places the names the
 * transaction creates and logs the changes of their lines; returns with
 * the directory's write lock held (0), or an error with nothing logged. */
int ph_names_tx_prepare(pheap *h, ph_thread *t, ph_tx *tx);
/* After the commit's retirement (`committed`: the lock is released) or at
 * a rollback: lets go of the transaction's names. */
void ph_names_tx_done(pheap *h, ph_thread *t, ph_tx *tx, int committed);

/* ---- the log (tx_log.c) ---- */

/* Writes back what was appended since the last flush, and with `active`
 * the ACTIVE state the first time: durable at the caller's fence. */
void ph_tx_log_flush(pheap *h, ph_thread *t, ph_tx *tx, int active);
/* Room for a record of `len` payload bytes, growing the log when needed:
 * 0, or the error of the overflow segment's allocation. */
int ph_tx_log_room(pheap *h, ph_thread *t, ph_tx *tx, uint32_t len);
/* Room for the next piece of `len` payload bytes: 0 and its size in *n. */
int ph_tx_log_piece(pheap *h, ph_thread *t, ph_tx *tx, uint64_t len, uint32_t *n);
/* Appends a record (room already made); returns where its payload is. */
const uint8_t *ph_tx_log_put(ph_tx *tx, uint32_t kind, uint64_t off, uint64_t aux,
                             const void *payload, uint32_t len);

/* ---- the added bytes (tx_ranges.c) ---- */

/* Adds [off, off + len) to the added spans (merged with neighbours). */
int ph_tx_ranges_add(ph_tx *tx, uint64_t off, uint64_t len);
/* Calls fn for each piece of [off, off + len), saying whether it is added. */
int ph_tx_ranges_each(ph_tx *tx, uint64_t off, uint64_t len,
                      int (*fn)(void *arg, uint64_t off, uint64_t len, int added), void *arg);
/* 1 when [off, off + len) lies in a block this transaction allocated
 * (and did not free), -1 when it meets a block the transaction freed, 0
 * otherwise. */
int ph_tx_ranges_block(const ph_tx *tx, uint64_t off, uint64_t len);

#endif
