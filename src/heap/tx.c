/*
 * tx.c -- transactions: the public pheap_tx_* calls, the thread's volatile
 * transaction state, and the writing of its log (format/layout.h,
 * "transaction logs"; records in log/txlog.c; the engine's part and the
 * recovery in alloc/engine_tx.c).
 *
 * Crash protocol.  A transaction S of lane L writes records with seq S into
 * L's log with plain stores.
 *   tx_add   UNDO records (the old bytes) and, the first time, xstate :=
 *            S | ACTIVE; flush; fence.  -> recovery restores the range
 *            The caller changes the range only after this fence.
 *   commit, only UNDO records (two fences):
 *     Fa     flush the added ranges; fence.
 *     Fb     xstate := S | IDLE; flush; fence.        -> committed, retired
 *   commit, with REDO / ALLOC / FREE records (three fences):
 *     F1     COMMIT record (record count, chained record CRCs, contents
 *            CRC of the added ranges and allocated blocks), xstate := S |
 *            ACTIVE; flush the log, the added ranges and the allocated
 *            blocks; fence.                           -> committed
 *     F2     REDO bytes stored at their destinations, bitmap words and
 *            extent-log entries of ALLOC and FREE (engine_tx.c); flush;
 *            fence.                                   -> applied
 *     F3     xstate := S | IDLE; flush; fence.        -> retired
 *     Freed blocks become reusable and overflow segments are freed only
 *     after F3: a later recovery must not redo this transaction over
 *     their new owners.
 *   abort:   every UNDO record's bytes back; flush; fence; xstate := S |
 *            IDLE; flush; fence (nothing when nothing was fenced before).
 * Before F1 (or Fb) completes, recovery finds either no COMMIT record that
 * counts, or one whose contents CRC does not match (the record reached
 * media before some line of a range or block), and rolls back; after, it
 * rolls forward.  A REDO record never overlaps an added range (pheap_tx_write
 * stores into added bytes in place, pheap_tx_add refuses bytes with a
 * pending REDO), and F2 does not touch added ranges or allocated blocks, so
 * the contents CRC still matches during F2 and the decision stays forward.
 * Sequences: a holder of lane L takes them from the durable ceiling up,
 * raising the ceiling first (one fence per PH_TX_SEQ_BLOCK transactions),
 * so no record of an earlier holder or an earlier crash carries a seq that
 * a later transaction uses.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "heap/heap.h"
#include "util/error.h"

#define SEG_MIN (64u * 1024u)   /* first overflow segment */
#define SEG_MAX (4u << 20)      /* overflow segments grow to this */
#define TAIL (2 * sizeof(ph_txrec)) /* kept free at a segment's end: NEXT, or COMMIT */

typedef struct span {
    uint64_t off, len;
} span;

typedef struct redo {
    uint64_t off;
    uint32_t len;
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
    ph_txseg seg;               /* segment being written */
    size_t pos, flushed;        /* append position and flushed bytes in it */
    uint64_t seg_bytes;         /* size of the last overflow segment */
    int active;                 /* xstate := seq | ACTIVE written */
    int fenced;                 /* something of it was fenced */
    uint64_t records;           /* records written (NEXT, COMMIT excluded) */
    uint32_t chain;             /* their chained CRC */
    uint64_t fences0;           /* thread's fences at the call's start */
    VEC(span) added;            /* bytes with an UNDO snapshot: sorted, disjoint */
    VEC(undo) undos;            /* UNDO records, in log order */
    VEC(redo) redos;            /* REDO records, in log order */
    VEC(ph_tx_change) changes;  /* ALLOC and FREE records, in log order */
    VEC(uint64_t *) links;      /* the words that link overflow segments, in order */
};

#define VEC_PUSH(vec, item)                                                             \
    ((vec).n < (vec).cap || vec_grow((void **)&(vec).v, &(vec).cap, sizeof(*(vec).v)) \
         ? ((vec).v[(vec).n++] = (item), 0)                                             \
         : PHEAP_ENOMEM)

static int vec_grow(void **v, size_t *cap, size_t elem)
{
    size_t c = *cap ? *cap * 2 : 16;
    void *p = realloc(*v, c * elem);
    if (!p)
        return 0;
    *v = p;
    *cap = c;
    return 1;
}

/* ---- the thread's transaction -------------------------------------------------- */

static ph_persist *persist_of(pheap *h)
{
    return &h->sp.persist;
}

/* The thread's transaction for a call that needs one: NULL with the error
 * set (PHEAP_ENOTX, PHEAP_EABORTED, or the handle's). */
static ph_tx *current(pheap *h, ph_thread **tp, const char *call)
{
    ph_thread *t = ph_heap_writer(h, call);
    if (!t)
        return NULL;
    ph_tx *tx = t->tx;
    if (!tx || !tx->depth) {
        ph_err(PHEAP_ENOTX, "%s: the thread has no transaction on this heap", call);
        return NULL;
    }
    if (tx->aborted) {
        ph_err(PHEAP_EABORTED, "%s: the transaction was aborted; close its levels with "
               "pheap_tx_commit or pheap_tx_abort", call);
        return NULL;
    }
    *tp = t;
    tx->fences0 = t->pctx.xfences;
    return tx;
}

static void count_fences(ph_thread *t, ph_tx *tx)
{
    ph_store_relaxed(&t->xtx_fences, t->xtx_fences + (t->pctx.xfences - tx->fences0));
    tx->fences0 = t->pctx.xfences;
}

/* Takes sequences for the thread's lane: from the durable ceiling, which
 * is raised first. */
static void take_sequences(pheap *h, ph_thread *t, ph_tx *tx)
{
    ph_txlog_anchor *a = tx->anchor;
    uint64_t st = ph_load_relaxed(&a->xstate) >> 8, ceil = ph_load_relaxed(&a->xceiling);
    uint64_t base = PH_MAX(PH_MAX(ceil, st + 1), (uint64_t)1);
    tx->ceiling = base + PH_TX_SEQ_BLOCK;
    ph_persist_store64(persist_of(h), &t->pctx, &a->xceiling, tx->ceiling);
    tx->seq = base - 1;
}

static void reset(ph_tx *tx)
{
    tx->seg = (ph_txseg){(uint8_t *)(tx->anchor + 1), PH_TXLOG_RECORDS, &tx->anchor->xnext};
    tx->pos = tx->flushed = 0;
    tx->seg_bytes = 0;
    tx->active = tx->fenced = 0;
    tx->records = 0;
    tx->chain = 0;
    tx->added.n = tx->undos.n = tx->redos.n = tx->changes.n = tx->links.n = 0;
}

/* ---- the log ------------------------------------------------------------------- */

/* Writes back what was appended since the last flush, and the ACTIVE state
 * the first time: durable at the caller's fence. */
static void log_flush(pheap *h, ph_thread *t, ph_tx *tx)
{
    ph_persist_flush(persist_of(h), &t->pctx, tx->seg.records + tx->flushed, tx->pos - tx->flushed);
    tx->flushed = tx->pos;
    if (!tx->active) {
        ph_persist_write(persist_of(h), &t->pctx, &tx->anchor->xstate, tx->seq << 8 | PH_TX_ACTIVE);
        ph_persist_flush(persist_of(h), &t->pctx, &tx->anchor->xstate, 8);
        tx->active = 1;
    }
}

/* An overflow segment's initialiser: its link to the next is zero before
 * the allocation commits. */
static int zero_link(void *arg, void *block, size_t usable)
{
    (void)arg;
    (void)usable;
    memset(block, 0, sizeof(ph_txseg_header));
    return 0;
}

/* Continues the log in a new overflow segment of at least `need` record
 * bytes: allocated with a logged pheap_alloc_to whose destination is the
 * current segment's link, then a NEXT record points the walk there. */
static int log_grow(pheap *h, ph_thread *t, ph_tx *tx, size_t need)
{
    uint64_t bytes = tx->seg_bytes ? PH_MIN(tx->seg_bytes * 2, (uint64_t)SEG_MAX) : SEG_MIN;
    bytes = PH_MAX(bytes, PH_ALIGN_UP(need + TAIL + PH_LINE_SIZE, PH_PAGE_SIZE));
    if (VEC_PUSH(tx->links, tx->seg.next))
        return ph_err(PHEAP_ENOMEM, "out of memory for the transaction log");
    ph_block_init zero = {0, zero_link, NULL};
    int rc = ph_engine_alloc_to(h->engine, &t->tc, &t->pctx, bytes, tx->seg.next, &zero);
    if (rc) {
        tx->links.n--;
        return rc;
    }
    ph_txrec_put(tx->seg.records + tx->pos, PH_TXREC_NEXT, tx->seq, 0, 0, NULL, 0);
    tx->pos += sizeof(ph_txrec);
    ph_persist_flush(persist_of(h), &t->pctx, tx->seg.records + tx->flushed,
                     tx->pos - tx->flushed);
    ph_txseg_header *sh = ph_space_at(&h->sp, ph_load_relaxed(tx->seg.next));
    tx->seg = (ph_txseg){(uint8_t *)(sh + 1), bytes - PH_LINE_SIZE, &sh->xnext};
    tx->seg_bytes = bytes;
    tx->pos = tx->flushed = 0;
    return 0;
}

/* Payload bytes the next record may carry in the current segment. */
static uint64_t log_space(const ph_tx *tx)
{
    size_t left = tx->seg.bytes - tx->pos;
    if (left <= TAIL + sizeof(ph_txrec))
        return 0;
    return PH_MIN(left - TAIL - sizeof(ph_txrec), (size_t)PH_TXREC_LEN_MAX & ~7ull);
}

/* Room for a record of `len` payload bytes after the append position,
 * growing the log when needed.  A record without payload (ALLOC, FREE)
 * needs room too: log_space 0 means none is left, not "0 bytes fit". */
static int log_room(pheap *h, ph_thread *t, ph_tx *tx, uint32_t len)
{
    if (tx->seg.bytes - tx->pos > TAIL + sizeof(ph_txrec) && log_space(tx) >= PH_ALIGN_UP(len, 8))
        return 0;
    return log_grow(h, t, tx, ph_txrec_size(len));
}

/* Room for the next piece of `len` payload bytes (a record carries at
 * least 64 of them, or all): 0 and the piece's size in *n. */
static int log_piece(pheap *h, ph_thread *t, ph_tx *tx, uint64_t len, uint32_t *n)
{
    int rc = log_room(h, t, tx, (uint32_t)PH_MIN(len, (uint64_t)64));
    if (rc)
        return rc;
    if (log_space(tx) < PH_MIN(len, (uint64_t)SEG_MIN) && log_space(tx) < len / 2 &&
        (rc = log_room(h, t, tx, (uint32_t)PH_MIN(len, (uint64_t)SEG_MAX - 4096))) != 0)
        return rc; /* a big piece: a segment of its own rather than many small records */
    *n = (uint32_t)PH_MIN(len, log_space(tx));
    return 0;
}

/* Appends a record (room already made) and returns where its payload is. */
static const uint8_t *log_put(ph_tx *tx, uint32_t kind, uint64_t off, uint64_t aux,
                              const void *payload, uint32_t len)
{
    uint8_t *p = tx->seg.records + tx->pos;
    uint32_t crc = ph_txrec_put(p, kind, tx->seq, off, aux, payload, len);
    tx->pos += ph_txrec_size(len);
    if (kind != PH_TXREC_COMMIT) {
        tx->chain = ph_txlog_chain(tx->chain, crc);
        tx->records++;
    }
    return p + sizeof(ph_txrec);
}

/* ---- ending a transaction ---------------------------------------------------------- */

/* Retires the log: xstate := seq | IDLE, durable on return. */
static void retire(pheap *h, ph_thread *t, ph_tx *tx)
{
    if (tx->active)
        ph_persist_store64(persist_of(h), &t->pctx, &tx->anchor->xstate, tx->seq << 8 | PH_TX_IDLE);
}

/* Frees the overflow segments, last first, each with a logged
 * pheap_free_from of its link (after the retirement). */
static void free_segments(pheap *h, ph_thread *t, ph_tx *tx)
{
    while (tx->links.n)
        ph_engine_free_from(h->engine, &t->tc, &t->pctx, tx->links.v[--tx->links.n]);
}

/* Rolls everything back and marks the transaction aborted. */
static void rollback(pheap *h, ph_thread *t, ph_tx *tx)
{
    for (size_t i = tx->undos.n; i-- > 0;) {
        undo *u = &tx->undos.v[i];
        void *dst = ph_space_at(&h->sp, u->off);
        memcpy(dst, u->data, u->len);
        ph_persist_flush(persist_of(h), &t->pctx, dst, u->len);
    }
    if (tx->fenced) {
        ph_persist_fence(persist_of(h), &t->pctx); /* the old bytes, before: */
        retire(h, t, tx);
    }
    for (size_t i = 0; i < tx->changes.n; i++)
        if (tx->changes.v[i].kind == PH_TXREC_ALLOC)
            ph_engine_tx_unreserve(h->engine, &t->tc, &t->pctx, tx->changes.v[i].off);
    free_segments(h, t, tx);
    tx->aborted = 1;
    ph_store_relaxed(&t->xtx_aborts, t->xtx_aborts + 1);
    count_fences(t, tx);
}

/* A failure that aborts: rolls back, keeps the error of `rc`. */
static int fail(pheap *h, ph_thread *t, ph_tx *tx, int rc)
{
    int err = pheap_errno();
    char msg[256];
    snprintf(msg, sizeof(msg), "%s", pheap_errmsg());
    rollback(h, t, tx);
    return ph_err(rc ? rc : err, "%s (the transaction was aborted)", msg);
}

/* Closes a level; the last one ends the transaction. */
static void close_level(ph_tx *tx)
{
    if (--tx->depth == 0) {
        tx->aborted = 0;
        reset(tx);
    }
}

void ph_tx_thread_exit(pheap *h, ph_thread *t, int rollback_open)
{
    ph_tx *tx = t->tx;
    if (!tx)
        return;
    if (rollback_open && tx->depth && !tx->aborted && h->engine)
        rollback(h, t, tx);
    free(tx->added.v);
    free(tx->undos.v);
    free(tx->redos.v);
    free(tx->changes.v);
    free(tx->links.v);
    free(tx);
    t->tx = NULL;
}

/* ---- ranges -------------------------------------------------------------------- */

/* Index of the first added span that ends after `off`. */
static size_t first_after(const ph_tx *tx, uint64_t off)
{
    size_t lo = 0, hi = tx->added.n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (tx->added.v[mid].off + tx->added.v[mid].len <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Adds [off, off + len) to the added spans (merged with neighbours). */
static int add_span(ph_tx *tx, uint64_t off, uint64_t len)
{
    size_t i = first_after(tx, off);
    if (i > 0 && tx->added.v[i - 1].off + tx->added.v[i - 1].len == off)
        i--; /* touches the previous span: merge */
    uint64_t end = off + len;
    size_t j = i;
    while (j < tx->added.n && tx->added.v[j].off <= end) {
        off = PH_MIN(off, tx->added.v[j].off);
        end = PH_MAX(end, tx->added.v[j].off + tx->added.v[j].len);
        j++;
    }
    if (j == i) { /* insert */
        if (VEC_PUSH(tx->added, ((span){0, 0})))
            return PHEAP_ENOMEM;
        memmove(&tx->added.v[i + 1], &tx->added.v[i], (tx->added.n - 1 - i) * sizeof(span));
    } else { /* spans i..j-1 become one */
        memmove(&tx->added.v[i + 1], &tx->added.v[j], (tx->added.n - j) * sizeof(span));
        tx->added.n -= j - i - 1;
    }
    tx->added.v[i] = (span){off, end - off};
    return 0;
}

/* Calls fn for each piece of [off, off + len), saying whether it is added. */
static int each_piece(ph_tx *tx, uint64_t off, uint64_t len,
                      int (*fn)(void *arg, uint64_t off, uint64_t len, int added), void *arg)
{
    uint64_t end = off + len;
    for (size_t i = first_after(tx, off); off < end; i++) {
        uint64_t s = i < tx->added.n ? PH_MAX(tx->added.v[i].off, off) : end;
        int rc;
        if (s > off && (rc = fn(arg, off, PH_MIN(s, end) - off, 0)) != 0)
            return rc;
        if (s >= end)
            break;
        uint64_t e = PH_MIN(tx->added.v[i].off + tx->added.v[i].len, end);
        if ((rc = fn(arg, s, e - s, 1)) != 0)
            return rc;
        off = e;
    }
    return 0;
}

/* The block this transaction allocated that holds [off, off + len), if any. */
static int in_fresh_block(const ph_tx *tx, uint64_t off, uint64_t len)
{
    for (size_t i = tx->changes.n; i-- > 0;) {
        const ph_tx_change *c = &tx->changes.v[i];
        if (c->kind == PH_TXREC_ALLOC && off >= c->off && off + len <= c->off + c->bytes)
            return 1;
    }
    return 0;
}

static int overlaps(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
    return a < b + blen && b < a + alen;
}

/* Checks that [addr, addr + len) lies in the data region and in one live
 * block or one block of the transaction; *off its offset, *fresh 1 for
 * the latter. */
static int check_range(pheap *h, ph_tx *tx, const void *addr, size_t len, uint64_t *off,
                       int *fresh, const char *call)
{
    uintptr_t a = (uintptr_t)addr, b = (uintptr_t)h->sp.base;
    uint64_t size = ph_space_size(&h->sp);
    if (len == 0)
        return ph_err(PHEAP_EINVAL, "%s: length 0", call);
    if (a < b + h->sp.data_off || a - b >= size || len > size - (a - b))
        return ph_err(PHEAP_ERANGE, "%s: [%p, +%zu) is not inside the heap's data region", call,
                      addr, len);
    *off = a - b;
    *fresh = in_fresh_block(tx, *off, len);
    if (*fresh)
        return 0;
    uint64_t start, bytes;
    int rc = ph_engine_block_at(h->engine, *off, &start, &bytes, call);
    if (rc)
        return rc;
    if (*off + len > start + bytes)
        return ph_err(PHEAP_ENOTLIVE, "%s: [%llu, +%zu) runs past the end of the %llu-byte block "
                      "at %llu", call, (unsigned long long)*off, len, (unsigned long long)bytes,
                      (unsigned long long)start);
    return 0;
}

/* ---- public calls ---------------------------------------------------------------- */

ph_export int pheap_tx_begin(pheap *h)
{
    ph_thread *t = ph_heap_writer(h, "pheap_tx_begin");
    if (!t)
        return pheap_errno();
    ph_tx *tx = t->tx;
    if (tx && tx->depth) {
        if (tx->aborted)
            return ph_err(PHEAP_EABORTED, "pheap_tx_begin: the thread's transaction was aborted; "
                          "close its levels first");
        tx->depth++;
        return 0;
    }
    if (!h->engine->txlogs)
        return ph_err(PHEAP_ENOTSUP, "pheap_tx_begin: %s has format %u.%u, made before "
                      "transactions (1.3)", h->path, h->hdr.major, h->hdr.minor);
    if (!tx) {
        if (!(tx = calloc(1, sizeof(*tx))))
            return ph_err(PHEAP_ENOMEM, "pheap_tx_begin: out of memory");
        tx->lane = -1;
        t->tx = tx;
    }
    int rc = ph_engine_lane(h->engine, &t->tc, &t->pctx);
    if (rc)
        return rc;
    tx->fences0 = t->pctx.xfences;
    if (tx->lane != t->tc.lane.index || tx->seq + 1 >= tx->ceiling) {
        tx->lane = t->tc.lane.index;
        tx->anchor = ph_engine_txlog(h->engine, (unsigned)tx->lane);
        take_sequences(h, t, tx);
    }
    tx->seq++;
    reset(tx);
    tx->depth = 1;
    count_fences(t, tx);
    return 0;
}

ph_export int pheap_tx_depth(pheap *h)
{
    if (!h || ph_heap_inherited(h))
        return 0;
    ph_thread *t = ph_thread_get(h);
    if (!t || !t->tx)
        return 0;
    return t->tx->aborted ? -(int)t->tx->depth : (int)t->tx->depth;
}

/* The outermost commit of a transaction that only added ranges. */
static void commit_undo(pheap *h, ph_thread *t, ph_tx *tx)
{
    for (size_t i = 0; i < tx->added.n; i++)
        ph_persist_flush(persist_of(h), &t->pctx, ph_space_at(&h->sp, tx->added.v[i].off),
                         tx->added.v[i].len);
    ph_persist_fence(persist_of(h), &t->pctx); /* Fa: the new bytes */
    retire(h, t, tx);                          /* Fb */
}

/* The contents CRC of the COMMIT record (see txlog.h). */
static uint32_t contents_crc(pheap *h, ph_tx *tx)
{
    uint32_t u = 0, a = 0;
    for (size_t i = 0; i < tx->undos.n; i++)
        u = ph_crc32c(u, ph_space_at(&h->sp, tx->undos.v[i].off), tx->undos.v[i].len);
    for (size_t i = 0; i < tx->changes.n; i++)
        if (tx->changes.v[i].kind == PH_TXREC_ALLOC)
            a = ph_crc32c(a, ph_space_at(&h->sp, tx->changes.v[i].off), tx->changes.v[i].bytes);
    return ph_txlog_chain(u, a);
}

/* The outermost commit of a transaction with REDO, ALLOC or FREE records. */
static void commit_redo(pheap *h, ph_thread *t, ph_tx *tx)
{
    ph_persist *p = persist_of(h);
    uint64_t aux = tx->chain | (uint64_t)contents_crc(h, tx) << 32;
    log_put(tx, PH_TXREC_COMMIT, tx->records, aux, NULL, 0); /* TAIL kept room for it */
    log_flush(h, t, tx);
    for (size_t i = 0; i < tx->added.n; i++)
        ph_persist_flush(p, &t->pctx, ph_space_at(&h->sp, tx->added.v[i].off), tx->added.v[i].len);
    for (size_t i = 0; i < tx->changes.n; i++)
        if (tx->changes.v[i].kind == PH_TXREC_ALLOC)
            ph_persist_flush(p, &t->pctx, ph_space_at(&h->sp, tx->changes.v[i].off),
                             tx->changes.v[i].bytes);
    ph_persist_fence(p, &t->pctx); /* F1: committed */
    for (size_t i = 0; i < tx->redos.n; i++) {
        redo *r = &tx->redos.v[i];
        void *dst = ph_space_at(&h->sp, r->off);
        memcpy(dst, r->data, r->len);
        ph_persist_flush(p, &t->pctx, dst, r->len);
    }
    ph_engine_tx_stage(h->engine, &t->pctx, tx->changes.v, tx->changes.n);
    ph_persist_fence(p, &t->pctx); /* F2: applied */
    ph_engine_tx_unlock(h->engine, tx->changes.v, tx->changes.n);
    retire(h, t, tx);              /* F3 */
    ph_engine_tx_release(h->engine, &t->tc, &t->pctx, tx->changes.v, tx->changes.n);
}

ph_export int pheap_tx_commit(pheap *h)
{
    ph_thread *t = ph_heap_writer(h, "pheap_tx_commit");
    if (!t)
        return pheap_errno();
    ph_tx *tx = t->tx;
    if (!tx || !tx->depth)
        return ph_err(PHEAP_ENOTX, "pheap_tx_commit: the thread has no transaction on this heap");
    if (tx->aborted) {
        close_level(tx);
        return ph_err(PHEAP_EABORTED, "pheap_tx_commit: the transaction was aborted: nothing of "
                      "it happened");
    }
    if (tx->depth > 1) {
        tx->depth--;
        return 0;
    }
    tx->fences0 = t->pctx.xfences;
    if (tx->redos.n || tx->changes.n)
        commit_redo(h, t, tx);
    else if (tx->undos.n)
        commit_undo(h, t, tx);
    free_segments(h, t, tx);
    ph_store_relaxed(&t->xtx_commits, t->xtx_commits + 1);
    count_fences(t, tx);
    close_level(tx);
    return 0;
}

ph_export int pheap_tx_abort(pheap *h)
{
    ph_thread *t = ph_heap_writer(h, "pheap_tx_abort");
    if (!t)
        return pheap_errno();
    ph_tx *tx = t->tx;
    if (!tx || !tx->depth)
        return ph_err(PHEAP_ENOTX, "pheap_tx_abort: the thread has no transaction on this heap");
    if (!tx->aborted) {
        tx->fences0 = t->pctx.xfences;
        rollback(h, t, tx);
    }
    close_level(tx);
    return 0;
}

typedef struct add_ctx {
    pheap *h;
    ph_thread *t;
    ph_tx *tx;
    int logged;
} add_ctx;

/* Snapshots a piece of a pheap_tx_add range that no earlier add covers. */
static int snapshot_piece(void *arg, uint64_t off, uint64_t len, int added)
{
    add_ctx *a = arg;
    ph_tx *tx = a->tx;
    while (!added && len) {
        uint32_t n;
        int rc = log_piece(a->h, a->t, tx, len, &n);
        if (rc)
            return rc;
        const uint8_t *data = log_put(tx, PH_TXREC_UNDO, off, 0, ph_space_at(&a->h->sp, off), n);
        if (VEC_PUSH(tx->undos, ((undo){off, n, data})))
            return ph_err(PHEAP_ENOMEM, "pheap_tx_add: out of memory");
        a->logged = 1;
        off += n;
        len -= n;
    }
    return 0;
}

ph_export int pheap_tx_add(pheap *h, const void *addr, size_t len)
{
    ph_thread *t;
    ph_tx *tx = current(h, &t, "pheap_tx_add");
    uint64_t off;
    int fresh, rc;
    if (!tx)
        return pheap_errno();
    if ((rc = check_range(h, tx, addr, len, &off, &fresh, "pheap_tx_add")) != 0 || fresh)
        return rc;
    for (size_t i = 0; i < tx->redos.n; i++)
        if (overlaps(off, len, tx->redos.v[i].off, tx->redos.v[i].len))
            return ph_err(PHEAP_EINVAL, "pheap_tx_add: [%llu, +%zu) overlaps bytes given to "
                          "pheap_tx_write in this transaction; add a range before writing it",
                          (unsigned long long)off, len);
    add_ctx a = {h, t, tx, 0};
    if ((rc = each_piece(tx, off, len, snapshot_piece, &a)) != 0 ||
        (rc = add_span(tx, off, len)) != 0)
        return fail(h, t, tx, rc);
    if (a.logged) {
        log_flush(h, t, tx);
        ph_persist_fence(persist_of(h), &t->pctx); /* the snapshot before the caller's stores */
        tx->fenced = 1;
        count_fences(t, tx);
    }
    return 0;
}

typedef struct write_ctx {
    pheap *h;
    ph_thread *t;
    ph_tx *tx;
    uint64_t off0;
    const uint8_t *src;
} write_ctx;

/* Stores a piece of a pheap_tx_write in place (added bytes) or logs it. */
static int write_piece(void *arg, uint64_t off, uint64_t len, int added)
{
    write_ctx *w = arg;
    ph_tx *tx = w->tx;
    const uint8_t *src = w->src + (off - w->off0);
    if (added) {
        memmove(ph_space_at(&w->h->sp, off), src, len);
        return 0;
    }
    while (len) {
        uint32_t n;
        int rc = log_piece(w->h, w->t, tx, len, &n);
        if (rc)
            return rc;
        const uint8_t *data = log_put(tx, PH_TXREC_REDO, off, 0, src, n);
        if (VEC_PUSH(tx->redos, ((redo){off, n, data})))
            return ph_err(PHEAP_ENOMEM, "pheap_tx_write: out of memory");
        off += n;
        src += n;
        len -= n;
    }
    return 0;
}

ph_export int pheap_tx_write(pheap *h, void *dst, const void *src, size_t len)
{
    ph_thread *t;
    ph_tx *tx = current(h, &t, "pheap_tx_write");
    uint64_t off;
    int fresh, rc;
    if (!tx)
        return pheap_errno();
    if (!src)
        return ph_err(PHEAP_EINVAL, "pheap_tx_write: src is NULL");
    if ((rc = check_range(h, tx, dst, len, &off, &fresh, "pheap_tx_write")) != 0)
        return rc;
    if (fresh) {
        memmove(dst, src, len);
        return 0;
    }
    write_ctx w = {h, t, tx, off, src};
    if ((rc = each_piece(tx, off, len, write_piece, &w)) != 0)
        return fail(h, t, tx, rc);
    count_fences(t, tx); /* a log that grew fenced */
    return 0;
}

ph_export int pheap_tx_read(pheap *h, void *buf, const void *src, size_t len)
{
    ph_thread *t;
    ph_tx *tx = current(h, &t, "pheap_tx_read");
    if (!tx)
        return pheap_errno();
    uintptr_t a = (uintptr_t)src, b = (uintptr_t)h->sp.base;
    uint64_t size = ph_space_size(&h->sp);
    if (!buf || len == 0)
        return ph_err(PHEAP_EINVAL, "pheap_tx_read: %s", buf ? "length 0" : "buf is NULL");
    if (a < b + h->sp.data_off || a - b >= size || len > size - (a - b))
        return ph_err(PHEAP_ERANGE, "pheap_tx_read: [%p, +%zu) is not inside the heap's data "
                      "region", src, len);
    uint64_t off = a - b;
    memmove(buf, src, len);
    for (size_t i = 0; i < tx->redos.n; i++) {
        const redo *r = &tx->redos.v[i];
        if (!overlaps(off, len, r->off, r->len))
            continue;
        uint64_t s = PH_MAX(off, r->off), e = PH_MIN(off + len, r->off + r->len);
        memcpy((uint8_t *)buf + (s - off), r->data + (s - r->off), e - s);
    }
    return 0;
}

ph_export pheap_off pheap_tx_alloc(pheap *h, size_t size)
{
    ph_thread *t;
    ph_tx *tx = current(h, &t, "pheap_tx_alloc");
    if (!tx)
        return 0;
    if (size == 0) {
        ph_err(PHEAP_EINVAL, "pheap_tx_alloc: size 0");
        return 0;
    }
    uint64_t off, bytes;
    int rc = log_room(h, t, tx, 0);
    if (!rc && (rc = ph_engine_tx_reserve(h->engine, &t->tc, &t->pctx, size, &off, &bytes)) == 0) {
        ph_tx_change c = {off, bytes, PH_TXREC_ALLOC, (uint32_t)tx->changes.n, 0, 0, 0, NULL};
        if (VEC_PUSH(tx->changes, c)) {
            ph_engine_tx_unreserve(h->engine, &t->tc, &t->pctx, off);
            rc = ph_err(PHEAP_ENOMEM, "pheap_tx_alloc: out of memory");
        } else {
            log_put(tx, PH_TXREC_ALLOC, off, bytes, NULL, 0);
        }
    }
    if (rc) {
        fail(h, t, tx, rc);
        return 0;
    }
    count_fences(t, tx);
    return off;
}

ph_export int pheap_tx_free(pheap *h, pheap_off off)
{
    ph_thread *t;
    ph_tx *tx = current(h, &t, "pheap_tx_free");
    if (!tx)
        return pheap_errno();
    if (off == 0)
        return 0;
    if (off < h->sp.data_off || off >= ph_space_size(&h->sp))
        return ph_err(PHEAP_ERANGE, "pheap_tx_free: offset %llu is outside the heap's data region",
                      (unsigned long long)off);
    uint64_t bytes = 0;
    int fresh = 0;
    for (size_t i = tx->changes.n; i-- > 0;) {
        const ph_tx_change *c = &tx->changes.v[i];
        if (c->off != off)
            continue;
        if (c->kind == PH_TXREC_FREE)
            return ph_err(PHEAP_EDOUBLEFREE, "pheap_tx_free: the block at %llu is freed by this "
                          "transaction already", (unsigned long long)off);
        fresh = 1; /* allocated by it */
        bytes = c->bytes;
        break;
    }
    int rc = fresh ? 0 : ph_engine_usable(h->engine, off, &bytes);
    if (rc) {
        if (rc == PHEAP_EDOUBLEFREE)
            ph_err(rc, "pheap_tx_free: double free of the block at %llu", (unsigned long long)off);
        return rc;
    }
    if ((rc = log_room(h, t, tx, 0)) == 0) {
        ph_tx_change c = {off, bytes, PH_TXREC_FREE, (uint32_t)tx->changes.n, 0, 0, 0, NULL};
        if (VEC_PUSH(tx->changes, c))
            rc = ph_err(PHEAP_ENOMEM, "pheap_tx_free: out of memory");
        else
            log_put(tx, PH_TXREC_FREE, off, bytes, NULL, 0);
    }
    if (rc)
        return fail(h, t, tx, rc);
    count_fences(t, tx);
    return 0;
}
