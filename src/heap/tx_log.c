/*
 * tx_log.c -- the writing of a transaction's log: records appended to the
 * lane's records area and, when it is full, to overflow segments
 * (format/layout.h, "transaction logs"; the protocol in tx.c).
 */
#include <string.h>

#include "heap/tx_int.h"
#include "util/error.h"

/* Writes back what was appended since the last flush, and with `active`
 * the ACTIVE state the first time: durable at the caller's fence. */
void ph_tx_log_flush(pheap *h, ph_thread *t, ph_tx *tx, int active)
{
    ph_persist *p = ph_tx_persist(h);
    ph_persist_flush(p, &t->pctx, tx->seg.records + tx->flushed, tx->pos - tx->flushed);
    tx->flushed = tx->pos;
    if (active && !tx->active) {
        ph_persist_write(p, &t->pctx, &tx->anchor->xstate, tx->seq << 8 | PH_TX_ACTIVE);
        ph_persist_flush(p, &t->pctx, &tx->anchor->xstate, 8);
        tx->active = 1;
    }
}

/* An overflow segment's initialiser: its header -- no link to a next one,
 * the magic and lane that recovery checks -- is written before the
 * allocation commits. */
static int segment_header(void *arg, void *block, size_t usable)
{
    (void)usable;
    ph_txseg_header *sh = block;
    memset(sh, 0, sizeof(*sh));
    sh->magic = PH_TXSEG_MAGIC;
    sh->lane = *(const unsigned *)arg;
    return 0;
}

/* Continues the log in a new overflow segment of at least `need` record
 * bytes: allocated with a logged pheap_alloc_to whose destination is the
 * current segment's link, then a NEXT record points the walk there. */
static int log_grow(pheap *h, ph_thread *t, ph_tx *tx, size_t need)
{
    uint64_t bytes = tx->seg_bytes ? PH_MIN(tx->seg_bytes * 2, (uint64_t)SEG_MAX) : SEG_MIN;
    bytes = PH_MAX(bytes, PH_ALIGN_UP(need + TAIL + tx->name_tail + PH_LINE_SIZE, PH_PAGE_SIZE));
    if (VEC_PUSH(tx->links, tx->seg.next))
        return ph_err(PHEAP_ENOMEM, "out of memory for the transaction log");
    unsigned lane = (unsigned)tx->lane;
    ph_block_init init = {0, segment_header, &lane};
    int rc = ph_engine_alloc_to(h->engine, &t->tc, &t->pctx, bytes, tx->seg.next, &init);
    if (rc) {
        tx->links.n--;
        return rc;
    }
    ph_txrec_put(tx->seg.records + tx->pos, PH_TXREC_NEXT, tx->seq, 0, 0, NULL, 0);
    tx->pos += sizeof(ph_txrec);
    ph_persist_flush(ph_tx_persist(h), &t->pctx, tx->seg.records + tx->flushed,
                     tx->pos - tx->flushed);
    ph_space_guard(&h->sp, ph_load_relaxed(tx->seg.next), bytes);
    ph_txseg_header *sh = ph_space_at(&h->sp, ph_load_relaxed(tx->seg.next));
    tx->seg = (ph_txseg){(uint8_t *)(sh + 1), bytes - PH_LINE_SIZE, &sh->xnext};
    tx->seg_bytes = bytes;
    tx->pos = tx->flushed = 0;
    return 0;
}

/* Payload bytes the next record may carry in the current segment. */
static uint64_t log_space(const ph_tx *tx)
{
    size_t left = tx->seg.bytes - tx->pos, keep = TAIL + tx->name_tail;
    if (left <= keep + sizeof(ph_txrec))
        return 0;
    return PH_MIN(left - keep - sizeof(ph_txrec), (size_t)PH_TXREC_LEN_MAX & ~7ull);
}

/* Room for a record of `len` payload bytes after the append position,
 * and the bytes kept for the commit's records, growing the log when
 * needed. */
int ph_tx_log_room(pheap *h, ph_thread *t, ph_tx *tx, uint32_t len)
{
    if (tx->pos + ph_txrec_size(len) + TAIL + tx->name_tail <= tx->seg.bytes)
        return 0;
    return log_grow(h, t, tx, ph_txrec_size(len));
}

/* Room for the next piece of `len` payload bytes (a record carries at
 * least 64 of them, or all): 0 and the piece's size in *n. */
int ph_tx_log_piece(pheap *h, ph_thread *t, ph_tx *tx, uint64_t len, uint32_t *n)
{
    int rc = ph_tx_log_room(h, t, tx, (uint32_t)PH_MIN(len, (uint64_t)64));
    if (rc)
        return rc;
    if (log_space(tx) < PH_MIN(len, (uint64_t)SEG_MIN) && log_space(tx) < len / 2 &&
        (rc = ph_tx_log_room(h, t, tx, (uint32_t)PH_MIN(len, (uint64_t)SEG_MAX - 4096))) != 0)
        return rc; /* a big piece: a segment of its own rather than many small records */
    *n = (uint32_t)PH_MIN(len, log_space(tx));
    return 0;
}

/* Appends a record (room already made) and returns where its payload is. */
const uint8_t *ph_tx_log_put(ph_tx *tx, uint32_t kind, uint64_t off, uint64_t aux,
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
