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
 *            CRC of the added ranges and allocated blocks); flush the log,
 *            the added ranges and the allocated blocks; fence. -> committed
 *     F2     REDO bytes stored at their destinations, bitmap words and
 *            extent-log entries of ALLOC and FREE (engine_tx.c); flush;
 *            fence.                                   -> applied
 *     F3     xstate := S | IDLE; flush; fence.        -> retired
 *     Freed blocks become reusable and overflow segments are freed only
 *     after F3: a later recovery must not redo this transaction over
 *     their new owners.
 *   abort:   every UNDO record's bytes back; flush; fence; xstate := S |
 *            IDLE; flush; fence (nothing when no ACTIVE state was written).
 * ACTIVE logs: recovery rolls the transaction back -- unless its COMMIT
 * record counts and its contents CRC matches: forward.  Before F1 (or Fb)
 * completes, recovery finds either no COMMIT record that counts, or one
 * whose contents CRC does not match (the record reached media before some
 * line of a range or block), and rolls back; after, it rolls forward.  A
 * REDO record never overlaps an added range (pheap_tx_write stores into
 * added bytes in place, pheap_tx_add refuses bytes with a pending REDO),
 * and F2 does not touch added ranges or allocated blocks, so the contents
 * CRC still matches during F2 and the decision stays forward.
 * IDLE logs: F1 does not write the anchor (a transaction without UNDO
 * records has nothing to roll back, and so the anchor's line is flushed
 * once per transaction, never in two batches in a row).  Recovery also
 * reads a log whose state is IDLE with seq R when its first record counts
 * with a seq above R: a transaction that was cut short before F3 -- the
 * only kind whose COMMIT record can count, since every transaction that
 * writes one retires it before the next begins -- rolled forward when its
 * COMMIT record counts and the contents match, else left alone.
 * Names (names_tx.c): a create or remove inside the transaction logs its
 * block's ALLOC or FREE record at the call; the commit, before F1, places
 * the entries and appends REDO records of the directory lines it changes
 * (segments are pheap's own blocks: F2 never skips them), holding the
 * directory's write lock until F3.
 * Sequences: a holder of lane L takes them from the durable ceiling up,
 * raising the ceiling first (one fence per PH_TX_SEQ_BLOCK transactions),
 * so no record of an earlier holder or an earlier crash carries a seq that
 * a later transaction uses.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "heap/tx_int.h"
#include "util/error.h"

/* ---- the thread's transaction -------------------------------------------------- */


/* The thread's transaction, aborted or not, for a call that closes a
 * level: NULL with the error set (PHEAP_ENOTX, PHEAP_EROMODE, or the
 * handle's).  A transaction begun before the heap was switched to
 * read-only mode runs to its end: only pheap_tx_begin checks the mode. */
static ph_tx *open_levels(pheap *h, ph_thread **tp, const char *call)
{
    ph_thread *t = ph_heap_writer_in_tx(h, call);
    if (!t)
        return NULL;
    ph_tx *tx = t->tx;
    if (!tx || !tx->depth) {
        if (ph_load_relaxed(&h->xromode))
            ph_mode_refuse(call);
        else
            ph_err(PHEAP_ENOTX, "%s: the thread has no transaction on this heap", call);
        return NULL;
    }
    *tp = t;
    return tx;
}

ph_tx *ph_tx_current(pheap *h, ph_thread **tp, const char *call)
{
    ph_thread *t;
    ph_tx *tx = open_levels(h, &t, call);
    if (!tx)
        return NULL;
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
    ph_persist_store64(ph_tx_persist(h), &t->pctx, &a->xceiling, tx->ceiling);
    tx->seq = base - 1;
}

static void reset(ph_tx *tx)
{
    tx->seg = (ph_txseg){tx->area, PH_TXLOG_SIZE, &tx->anchor->xnext};
    tx->pos = tx->flushed = 0;
    tx->seg_bytes = 0;
    tx->active = 0;
    tx->records = 0;
    tx->chain = 0;
    tx->added.n = tx->undos.n = tx->redos.n = tx->changes.n = tx->links.n = 0;
    tx->name_tail = 0;
}

/* ---- ending a transaction ---------------------------------------------------------- */

/* Retires the log: xstate := seq | IDLE, durable on return. */
static void retire(pheap *h, ph_thread *t, ph_tx *tx)
{
    ph_persist_store64(ph_tx_persist(h), &t->pctx, &tx->anchor->xstate, tx->seq << 8 | PH_TX_IDLE);
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
        if (ph_space_guarded_overlap(&h->sp, u->off, u->len))
            continue; /* freed by the program since, and pheap's own now */
        void *dst = ph_space_at(&h->sp, u->off);
        memcpy(dst, u->data, u->len);
        ph_persist_flush(ph_tx_persist(h), &t->pctx, dst, u->len);
    }
    if (tx->active) {
        ph_persist_fence(ph_tx_persist(h), &t->pctx); /* the old bytes, before: */
        retire(h, t, tx);
    }
    for (size_t i = 0; i < tx->changes.n; i++)
        if (tx->changes.v[i].kind == PH_TXREC_ALLOC)
            ph_engine_tx_unreserve(h->engine, &t->tc, &t->pctx, tx->changes.v[i].off);
    free_segments(h, t, tx);
    ph_names_tx_done(h, t, tx, 0);
    tx->aborted = 1;
    ph_store_relaxed(&t->xtx_aborts, t->xtx_aborts + 1);
    count_fences(t, tx);
}

int ph_tx_fail(pheap *h, ph_thread *t, ph_tx *tx, int rc)
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
    ph_names_tx_done(h, t, tx, 0); /* a simulated crash: the names are let go */
    free(tx->names.v);
    free(tx->added.v);
    free(tx->undos.v);
    free(tx->redos.v);
    free(tx->changes.v);
    free(tx->links.v);
    free(tx);
    t->tx = NULL;
}

/* 0 and *off when [addr, addr + len) is a non-empty range of the data
 * region; else PHEAP_EINVAL or PHEAP_ERANGE, message naming `call`. */
static int data_range(pheap *h, const void *addr, size_t len, uint64_t *off, const char *call)
{
    uintptr_t a = (uintptr_t)addr, b = (uintptr_t)h->sp.view;
    uint64_t size = ph_space_size(&h->sp);
    if (len == 0)
        return ph_err(PHEAP_EINVAL, "%s: length 0", call);
    if (a < b + h->sp.data_off || a - b >= size || len > size - (a - b))
        return ph_err(PHEAP_ERANGE, "%s: [%p, +%zu) is not inside the heap's data region", call,
                      addr, len);
    *off = a - b;
    return ph_heap_guarded(h, *off, len, call);
}

/* Checks that [addr, addr + len) lies in the data region and in one live
 * block or one block of the transaction; *off its offset, *fresh 1 for
 * the latter. */
static int check_range(pheap *h, ph_tx *tx, const void *addr, size_t len, uint64_t *off,
                       int *fresh, const char *call)
{
    int rc = data_range(h, addr, len, off, call);
    if (rc)
        return rc;
    int mine = ph_tx_ranges_block(tx, *off, len);
    if (mine < 0)
        return ph_err(PHEAP_ENOTLIVE, "%s: [%llu, +%zu) is in a block this transaction frees",
                      call, (unsigned long long)*off, len);
    *fresh = mine;
    if (*fresh)
        return 0;
    uint64_t start, bytes;
    rc = ph_engine_block_at(h->engine, *off, &start, &bytes, call);
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
    PH_WINDOW();
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
    if (h->gc)
        return ph_err(PHEAP_ENOTSUP, "pheap_tx_begin: %s is a GC-mode heap; transactions need "
                      "a LOG-mode heap", h->path);
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
        tx->area = ph_txlog_records_of(h->engine->txlogs, (unsigned)tx->lane);
        take_sequences(h, t, tx);
    }
    tx->seq++;
    reset(tx);
    tx->depth = 1;
    count_fences(t, tx);
    return 0;
}

int ph_tx_usable(pheap *h, uint64_t off, uint64_t *bytes)
{
    ph_thread *t = ph_thread_get(h);
    ph_tx *tx = t ? t->tx : NULL;
    if (!tx || !tx->depth || tx->aborted || ph_tx_ranges_block(tx, off, 1) != 1)
        return -1;
    for (size_t i = 0; i < tx->changes.n; i++)
        if (tx->changes.v[i].off == off && tx->changes.v[i].kind == PH_TXREC_ALLOC) {
            *bytes = tx->changes.v[i].bytes;
            return 0;
        }
    return -1;
}

ph_export int pheap_tx_depth(pheap *h)
{
    PH_WINDOW();
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
        ph_persist_flush(ph_tx_persist(h), &t->pctx, ph_space_at(&h->sp, tx->added.v[i].off),
                         tx->added.v[i].len);
    ph_persist_fence(ph_tx_persist(h), &t->pctx); /* Fa: the new bytes */
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
    ph_persist *p = ph_tx_persist(h);
    uint64_t aux = tx->chain | (uint64_t)contents_crc(h, tx) << 32;
    ph_tx_log_put(tx, PH_TXREC_COMMIT, tx->records, aux, NULL, 0); /* TAIL kept room for it */
    ph_tx_log_flush(h, t, tx, 0); /* no ACTIVE state: see "IDLE logs" at the top */
    for (size_t i = 0; i < tx->added.n; i++)
        ph_persist_flush(p, &t->pctx, ph_space_at(&h->sp, tx->added.v[i].off), tx->added.v[i].len);
    for (size_t i = 0; i < tx->changes.n; i++)
        if (tx->changes.v[i].kind == PH_TXREC_ALLOC)
            ph_persist_flush(p, &t->pctx, ph_space_at(&h->sp, tx->changes.v[i].off),
                             tx->changes.v[i].bytes);
    ph_persist_fence(p, &t->pctx); /* F1: committed */
    if (ph_plant("tx-retire-before-apply")) /* planted: F3 before F2 */
        retire(h, t, tx);
    ph_engine_tx_lock(h->engine, tx->changes.v, tx->changes.n); /* nothing in flight */
    for (size_t i = 0; i < tx->redos.n; i++) {
        redo *r = &tx->redos.v[i];
        if (!r->own && ph_space_guarded_overlap(&h->sp, r->off, r->len))
            continue; /* freed by the program since, and pheap's own now */
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
    PH_WINDOW();
    ph_thread *t;
    ph_tx *tx = open_levels(h, &t, "pheap_tx_commit");
    if (!tx)
        return pheap_errno();
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
    int rc = tx->names.n ? ph_names_tx_prepare(h, t, tx) : 0;
    if (rc) { /* no room for a name in the directory: nothing was committed */
        rc = ph_tx_fail(h, t, tx, rc);
        close_level(tx);
        return rc;
    }
    if (tx->redos.n || tx->changes.n)
        commit_redo(h, t, tx);
    else if (tx->undos.n)
        commit_undo(h, t, tx);
    ph_names_tx_done(h, t, tx, 1);
    free_segments(h, t, tx);
    ph_store_relaxed(&t->xtx_commits, t->xtx_commits + 1);
    count_fences(t, tx);
    close_level(tx);
    return 0;
}

ph_export int pheap_tx_abort(pheap *h)
{
    PH_WINDOW();
    ph_thread *t;
    ph_tx *tx = open_levels(h, &t, "pheap_tx_abort");
    if (!tx)
        return pheap_errno();
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
        int rc = ph_tx_log_piece(a->h, a->t, tx, len, &n);
        if (rc)
            return rc;
        const void *old = ph_space_at(&a->h->sp, off);
        const uint8_t *data = ph_tx_log_put(tx, PH_TXREC_UNDO, off, 0, old, n);
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
    PH_WINDOW();
    ph_thread *t;
    ph_tx *tx = ph_tx_current(h, &t, "pheap_tx_add");
    uint64_t off;
    int fresh, rc;
    if (!tx)
        return pheap_errno();
    if ((rc = check_range(h, tx, addr, len, &off, &fresh, "pheap_tx_add")) != 0 || fresh)
        return rc;
    for (size_t i = 0; i < tx->redos.n; i++)
        if (ph_tx_overlaps(off, len, tx->redos.v[i].off, tx->redos.v[i].len))
            return ph_err(PHEAP_EINVAL, "pheap_tx_add: [%llu, +%zu) overlaps bytes given to "
                          "pheap_tx_write in this transaction; add a range before writing it",
                          (unsigned long long)off, len);
    add_ctx a = {h, t, tx, 0};
    if ((rc = ph_tx_ranges_each(tx, off, len, snapshot_piece, &a)) != 0 ||
        (rc = ph_tx_ranges_add(tx, off, len)) != 0)
        return ph_tx_fail(h, t, tx, rc);
    if (a.logged) {
        ph_tx_log_flush(h, t, tx, 1);
        ph_persist_fence(ph_tx_persist(h), &t->pctx); /* the snapshot before the caller's stores */
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
        int rc = ph_tx_log_piece(w->h, w->t, tx, len, &n);
        if (rc)
            return rc;
        const uint8_t *data = ph_tx_log_put(tx, PH_TXREC_REDO, off, 0, src, n);
        if (VEC_PUSH(tx->redos, ((redo){off, n, 0, data})))
            return ph_err(PHEAP_ENOMEM, "pheap_tx_write: out of memory");
        off += n;
        src += n;
        len -= n;
    }
    return 0;
}

ph_export int pheap_tx_write(pheap *h, void *dst, const void *src, size_t len)
{
    PH_WINDOW();
    ph_thread *t;
    ph_tx *tx = ph_tx_current(h, &t, "pheap_tx_write");
    uint64_t off;
    int fresh, rc;
    if (!tx)
        return pheap_errno();
    if (!src)
        return ph_err(PHEAP_EINVAL, "pheap_tx_write: src is NULL");
    if ((rc = check_range(h, tx, dst, len, &off, &fresh, "pheap_tx_write")) != 0)
        return rc;
    if (fresh) { /* the program's bytes, as its own store would */
        ph_window_copy_out(dst, src, len);
        return 0;
    }
    /* Pieces in added bytes are stored at once: a source that overlaps the
     * destination is copied first, so that every piece takes the bytes
     * that were at src when the call was made. */
    void *copy = NULL;
    if (ph_tx_overlaps((uintptr_t)src, len, (uintptr_t)dst, len)) {
        if (!(copy = malloc(len)))
            return ph_err(PHEAP_ENOMEM, "pheap_tx_write: out of memory");
        src = memcpy(copy, src, len);
    }
    write_ctx w = {h, t, tx, off, src};
    rc = ph_tx_ranges_each(tx, off, len, write_piece, &w);
    free(copy);
    if (rc)
        return ph_tx_fail(h, t, tx, rc);
    count_fences(t, tx); /* a log that grew fenced */
    return 0;
}

ph_export int pheap_tx_read(pheap *h, void *buf, const void *src, size_t len)
{
    PH_WINDOW();
    ph_thread *t;
    ph_tx *tx = ph_tx_current(h, &t, "pheap_tx_read");
    if (!tx)
        return pheap_errno();
    uint64_t off = 0;
    if (!buf)
        return ph_err(PHEAP_EINVAL, "pheap_tx_read: buf is NULL");
    int rc = data_range(h, src, len, &off, "pheap_tx_read");
    if (rc)
        return rc;
    int sealed = ph_window_seal(); /* buf is the program's */
    memmove(buf, src, len);
    for (size_t i = 0; i < tx->redos.n; i++) {
        const redo *r = &tx->redos.v[i];
        if (!ph_tx_overlaps(off, len, r->off, r->len))
            continue;
        uint64_t s = PH_MAX(off, r->off), e = PH_MIN(off + len, r->off + r->len);
        memcpy((uint8_t *)buf + (s - off), r->data + (s - r->off), e - s);
    }
    ph_window_unseal(sealed);
    return 0;
}

/* Runs a block's initialiser on the reserved block at `off`: 0 or
 * PHEAP_ECANCELED. */
static int run_init(pheap *h, const ph_block_init *init, uint64_t off, uint64_t bytes,
                    const char *call)
{
    void *p = ph_space_at(&h->sp, off);
    if (init->zero)
        memset(p, 0, bytes);
    if (init->fn && init->fn(init->arg, p, bytes) != 0)
        return ph_err(PHEAP_ECANCELED, "%s: the initialiser returned nonzero: nothing was "
                      "allocated", call);
    return 0;
}

int ph_tx_take(pheap *h, ph_thread *t, ph_tx *tx, size_t size, const ph_block_init *init,
               uint64_t *off, const char *call)
{
    uint64_t bytes;
    int rc = ph_engine_tx_reserve(h->engine, &t->tc, &t->pctx, size, off, &bytes);
    if (rc)
        return ph_tx_fail(h, t, tx, rc);
    if (init && (rc = run_init(h, init, *off, bytes, call)) == 0 && (!tx->depth || tx->aborted))
        rc = ph_err(PHEAP_EABORTED, "%s: the initialiser ended the transaction", call);
    if (rc) { /* the initialiser's refusal: the transaction goes on */
        ph_engine_tx_unreserve(h->engine, &t->tc, &t->pctx, *off);
        return rc;
    }
    if ((rc = ph_tx_log_room(h, t, tx, 0)) == 0) {
        ph_tx_change c = {*off, bytes, PH_TXREC_ALLOC, (uint32_t)tx->changes.n, 0, 0, 0, NULL};
        if (VEC_PUSH(tx->changes, c))
            rc = ph_err(PHEAP_ENOMEM, "%s: out of memory", call);
        else
            ph_tx_log_put(tx, PH_TXREC_ALLOC, *off, bytes, NULL, 0);
    }
    if (rc) {
        ph_engine_tx_unreserve(h->engine, &t->tc, &t->pctx, *off);
        return ph_tx_fail(h, t, tx, rc);
    }
    return 0;
}

ph_export pheap_off pheap_tx_alloc(pheap *h, size_t size)
{
    PH_WINDOW();
    ph_thread *t;
    ph_tx *tx = ph_tx_current(h, &t, "pheap_tx_alloc");
    if (!tx)
        return 0;
    if (size == 0 || size > h->hdr.max_size) { /* bad arguments: the transaction goes on */
        ph_err(PHEAP_EINVAL, "pheap_tx_alloc: size %zu%s", size,
               size ? " is more than the heap can ever hold" : "");
        return 0;
    }
    uint64_t off;
    if (ph_tx_take(h, t, tx, size, NULL, &off, "pheap_tx_alloc"))
        return 0;
    count_fences(t, tx);
    return off;
}

int ph_tx_give(pheap *h, ph_thread *t, ph_tx *tx, uint64_t off, const char *call)
{
    if (off < h->sp.data_off || off >= ph_space_size(&h->sp))
        return ph_err(PHEAP_ERANGE, "%s: offset %llu is outside the heap's data region", call,
                      (unsigned long long)off);
    int rc = ph_heap_guarded(h, off, 1, call);
    if (rc)
        return rc;
    uint64_t bytes = 0;
    int fresh = 0;
    for (size_t i = tx->changes.n; i-- > 0;) {
        const ph_tx_change *c = &tx->changes.v[i];
        if (c->off != off)
            continue;
        if (c->kind == PH_TXREC_FREE)
            return ph_err(PHEAP_EDOUBLEFREE, "%s: the block at %llu is freed by this "
                          "transaction already", call, (unsigned long long)off);
        fresh = 1; /* allocated by it */
        bytes = c->bytes;
        break;
    }
    rc = fresh ? 0 : ph_engine_usable(h->engine, off, &bytes);
    if (rc) {
        if (rc == PHEAP_EDOUBLEFREE)
            ph_err(rc, "%s: double free of the block at %llu", call, (unsigned long long)off);
        return rc;
    }
    if ((rc = ph_tx_log_room(h, t, tx, 0)) == 0) {
        ph_tx_change c = {off, bytes, PH_TXREC_FREE, (uint32_t)tx->changes.n, 0, 0, 0, NULL};
        if (VEC_PUSH(tx->changes, c))
            rc = ph_err(PHEAP_ENOMEM, "%s: out of memory", call);
        else
            ph_tx_log_put(tx, PH_TXREC_FREE, off, bytes, NULL, 0);
    }
    return rc ? ph_tx_fail(h, t, tx, rc) : 0;
}

ph_export int pheap_tx_free(pheap *h, pheap_off off)
{
    PH_WINDOW();
    ph_thread *t;
    ph_tx *tx = ph_tx_current(h, &t, "pheap_tx_free");
    if (!tx)
        return pheap_errno();
    if (off == 0)
        return 0;
    int rc = ph_tx_give(h, t, tx, off, "pheap_tx_free");
    if (!rc)
        count_fences(t, tx);
    return rc;
}

int ph_tx_keep_room(pheap *h, ph_thread *t, ph_tx *tx, uint32_t len)
{
    int rc = ph_tx_log_room(h, t, tx, len);
    if (rc)
        return ph_tx_fail(h, t, tx, rc);
    tx->name_tail += ph_txrec_size(len);
    return 0;
}

int ph_tx_redo_slots(ph_tx *tx, size_t n)
{
    while (tx->redos.cap - tx->redos.n < n)
        if (!ph_tx_vec_grow((void **)&tx->redos.v, &tx->redos.cap, sizeof(*tx->redos.v)))
            return ph_err(PHEAP_ENOMEM, "pheap_tx_commit: out of memory");
    return 0;
}

void ph_tx_redo_own(ph_tx *tx, uint64_t off, const void *src, uint32_t len)
{
    tx->name_tail -= ph_txrec_size(len);
    const uint8_t *data = ph_tx_log_put(tx, PH_TXREC_REDO, off, 0, src, len);
    tx->redos.v[tx->redos.n++] = (redo){off, len, 1, data};
}
