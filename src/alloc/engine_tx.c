/*
 * engine_tx.c -- what transactions need from the allocation engine: blocks
 * reserved without being allocated, the lookup of the block an address
 * lies in, the commit's bitmap and extent changes staged under one fence,
 * and the recovery of interrupted transactions at open.
 *
 * Commit (heap/tx.c): F1 the log and its COMMIT record; F2 the changes --
 * ph_engine_tx_stage locks every bitmap word the transaction changes, in
 * address order (two committing threads never wait on each other in a
 * cycle; the other operations hold one word at a time), writes each word
 * once with its final value, appends the extent-log entries of large
 * blocks, and the caller fences, then unlocks; F3 the log's retirement,
 * after which ph_engine_tx_release makes the freed blocks reusable (before
 * it, a recovery could redo a free over a block handed out again).
 *
 * Recovery, per lane whose log is ACTIVE: a first walk over the records
 * decides (a COMMIT record that counts, and the added ranges and allocated
 * blocks holding the contents it names: forward; otherwise back); a second
 * applies -- REDO, ALLOC and FREE in order, or every UNDO's old bytes.
 * Both are idempotent, so a crash during recovery is recovered by the next
 * open.  Then one fence; then every such log is retired (durable at the
 * open's fence, which follows before any operation); then the overflow
 * segments are freed, each free fenced before the link to it is cleared,
 * so a crash leaves a link to a free extent (skipped) but never a live
 * segment without a link.
 */
#include "alloc/engine_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pheap.h"
#include "util/error.h"

/* ---- blocks ------------------------------------------------------------------ */

int ph_engine_tx_reserve(ph_engine *e, ph_tcache *t, ph_pctx *c, size_t size, uint64_t *off,
                         uint64_t *bytes)
{
    if (size > PH_SMALL_MAX) {
        *bytes = PH_ALIGN_UP(size, PH_PAGE_SIZE);
        return ph_engine_reserve_large(e, t, c, size, off);
    }
    unsigned cls = ph_sizeclass(size);
    uint64_t o = ph_tcache_pop(t, cls);
    if (!o && !(o = ph_engine_refill(e, t, c, cls)))
        return pheap_errno();
    *off = o;
    *bytes = ph_class_size[cls];
    return 0;
}

void ph_engine_tx_unreserve(ph_engine *e, ph_tcache *t, ph_pctx *c, uint64_t off)
{
    ph_slab *s = ph_engine_chunk_slab(e, off);
    if (s)
        ph_engine_cache_block(e, t, c, s->xcls, off);
    else
        ph_extent_cancel(e->ext, off);
}

int ph_engine_block_at(ph_engine *e, uint64_t off, uint64_t *start, uint64_t *bytes,
                       const char *call)
{
    ph_slab *s = ph_engine_chunk_slab(e, off);
    if (s) {
        int exact;
        uint32_t i = ph_slab_index(s, off, &exact);
        if (i < s->nblocks && (ph_slab_bits(s, i) & 1)) {
            *start = s->off + (uint64_t)i * s->block_size;
            *bytes = s->block_size;
            return 0;
        }
        return ph_engine_word_live(e, off, call); /* the message */
    }
    int rc = ph_engine_word_live(e, off, call);
    if (rc)
        return rc;
    /* Inside a live large block: walk back to its first page. */
    uint64_t page = PH_ALIGN_DOWN(off - e->sp->data_off, PH_PAGE_SIZE) + e->sp->data_off;
    while (ph_extent_lookup(e->ext, page, bytes) != 0)
        page -= PH_PAGE_SIZE;
    *start = page;
    return 0;
}

/* ---- commit -------------------------------------------------------------------- */

static int by_word(const void *a, const void *b)
{
    const ph_tx_change *x = a, *y = b;
    uintptr_t kx = x->slab ? (uintptr_t)&x->slab->desc->xbits[x->word] : 0;
    uintptr_t ky = y->slab ? (uintptr_t)&y->slab->desc->xbits[y->word] : 0;
    if (kx != ky)
        return kx < ky ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* The first change of each group of changes to one bitmap word. */
static int group_start(const ph_tx_change *v, size_t k)
{
    return k == 0 || v[k].slab != v[k - 1].slab || v[k].word != v[k - 1].word;
}

void ph_engine_tx_stage(ph_engine *e, ph_pctx *c, ph_tx_change *v, size_t n)
{
    for (size_t k = 0; k < n; k++) { /* large blocks first, in order: no word lock held */
        v[k].skip = 0;
        v[k].slab = ph_engine_chunk_slab(e, v[k].off);
        if (v[k].slab) {
            int exact;
            ph_slab_bitpos(ph_slab_index(v[k].slab, v[k].off, &exact), &v[k].word, &v[k].shift);
        } else if (v[k].kind == PH_TXREC_ALLOC) {
            ph_extent_commit_staged(e->ext, c, v[k].off);
        } else {
            v[k].skip = ph_extent_free_staged(e->ext, c, v[k].off, PH_EXT_LARGE, NULL, 0) != 0;
        }
    }
    if (n > 1) /* a commit with REDO records only has no changes (v may be NULL) */
        qsort(v, n, sizeof(*v), by_word);
    for (size_t k = 0; k < n; k++) {
        ph_slab *s = v[k].slab;
        if (!s)
            continue;
        if (group_start(v, k))
            ph_spin_lock(&s->wlock[v[k].word]);
        uint64_t w = ph_load_relaxed(&s->bits[v[k].word]), a = 1ull << v[k].shift;
        if (v[k].kind == PH_TXREC_ALLOC)
            w |= 3 * a;
        else if (w & a)
            w &= ~a;
        else
            v[k].skip = 1; /* another thread freed it first (the application's race) */
        ph_store(&s->bits[v[k].word], w);
        if (k + 1 == n || group_start(v, k + 1))
            ph_persist_store_nt(&e->sp->persist, c, &s->desc->xbits[v[k].word], w);
    }
}

void ph_engine_tx_unlock(ph_engine *e, ph_tx_change *v, size_t n)
{
    (void)e;
    for (size_t k = 0; k < n; k++)
        if (v[k].slab && group_start(v, k))
            ph_slab_unlock(v[k].slab, v[k].word);
}

void ph_engine_tx_release(ph_engine *e, ph_tcache *t, ph_pctx *c, const ph_tx_change *v,
                          size_t n)
{
    for (size_t k = 0; k < n; k++) {
        if (v[k].kind != PH_TXREC_FREE || v[k].skip)
            continue;
        if (v[k].slab)
            ph_engine_cache_block(e, t, c, v[k].slab->xcls, v[k].off);
        else
            ph_extent_release(e->ext, v[k].off);
    }
}

int ph_engine_tx_anchor_word(const ph_engine *e, uint64_t off)
{
    if (!e->txlogs)
        return 0;
    uint64_t first = (uint64_t)((char *)ph_txlog_anchor_of(e->txlogs, 0) - e->sp->base);
    uint64_t rel = off - first;
    return off >= first && rel < (uint64_t)PH_LANES_MAX * PH_TXLOG_SIZE &&
           rel % PH_TXLOG_SIZE == offsetof(ph_txlog_anchor, xnext);
}

/* ---- recovery ------------------------------------------------------------------- */

typedef struct recover_ctx {
    ph_engine *e;
    ph_pctx *c;
    uint32_t undo_crc;  /* CRC of the added ranges, in log order */
    uint32_t alloc_crc; /* ... and of the allocated blocks */
    int forward;
    int rc;
} recover_ctx;

/* An overflow segment: a live large block. */
static int segment(void *arg, uint64_t off, ph_txseg *out)
{
    ph_engine *e = arg;
    uint64_t bytes;
    if (off < e->sp->data_off || off >= ph_space_size(e->sp) || ph_engine_chunk_slab(e, off) ||
        ph_extent_lookup(e->ext, off, &bytes) || bytes <= PH_LINE_SIZE)
        return PHEAP_ECORRUPT;
    ph_txseg_header *h = ph_space_at(e->sp, off);
    *out = (ph_txseg){(uint8_t *)(h + 1), bytes - PH_LINE_SIZE, &h->xnext};
    return 0;
}

static int in_data(const ph_engine *e, uint64_t off, uint64_t len)
{
    uint64_t size = ph_space_size(e->sp);
    return off >= e->sp->data_off && off < size && len <= size - off;
}

static void decide(void *arg, const ph_txrec_view *r)
{
    recover_ctx *o = arg;
    uint64_t len = r->kind == PH_TXREC_ALLOC || r->kind == PH_TXREC_FREE ? r->aux : r->len;
    if (!in_data(o->e, r->off, len)) {
        if (!o->rc)
            o->rc = ph_err(PHEAP_ECORRUPT, "transaction log: a record names [%llu, +%llu), "
                           "outside the data region", (unsigned long long)r->off,
                           (unsigned long long)len);
        return;
    }
    if (r->kind == PH_TXREC_UNDO)
        o->undo_crc = ph_crc32c(o->undo_crc, ph_space_at(o->e->sp, r->off), len);
    else if (r->kind == PH_TXREC_ALLOC)
        o->alloc_crc = ph_crc32c(o->alloc_crc, ph_space_at(o->e->sp, r->off), len);
}

/* Redoes an allocation or free of the log (the block was reserved or live
 * when the transaction ran; every step is idempotent). */
static void redo_block(recover_ctx *o, const ph_txrec_view *r)
{
    ph_engine *e = o->e;
    ph_slab *s = ph_engine_chunk_slab(e, r->off);
    if (!s) {
        uint64_t bytes;
        if (r->kind == PH_TXREC_ALLOC)
            o->rc = ph_extent_claim(e->ext, o->c, r->off, r->aux);
        else if (ph_extent_lookup(e->ext, r->off, &bytes) == 0)
            o->rc = ph_extent_free(e->ext, o->c, r->off, PH_EXT_LARGE, NULL, 0, 0);
        return;
    }
    int exact;
    uint32_t i = ph_slab_index(s, r->off, &exact), sh;
    if (!exact) {
        o->rc = ph_err(PHEAP_ECORRUPT, "transaction log: %llu is not a block",
                       (unsigned long long)r->off);
        return;
    }
    uint32_t w = ph_slab_lock(s, i, &sh);
    if (r->kind == PH_TXREC_ALLOC)
        ph_slab_set_locked(e->sp, o->c, s, w, sh);
    else
        (void)ph_slab_clear_locked(e->sp, o->c, s, w, sh); /* clear already: done before */
    ph_persist_fence(&e->sp->persist, o->c); /* before the word's unlock (slab.h) */
    ph_slab_unlock(s, w);
}

static void apply(void *arg, const ph_txrec_view *r)
{
    recover_ctx *o = arg;
    if (o->rc)
        return;
    int copy = o->forward ? r->kind == PH_TXREC_REDO : r->kind == PH_TXREC_UNDO;
    if (copy) {
        void *dst = ph_space_at(o->e->sp, r->off);
        memcpy(dst, r->payload, r->len);
        ph_persist_flush(&o->e->sp->persist, o->c, dst, r->len);
    } else if (o->forward && (r->kind == PH_TXREC_ALLOC || r->kind == PH_TXREC_FREE)) {
        redo_block(o, r);
    }
}

/* Frees a log's overflow segments, last first (see the top).  A link to an
 * extent that is no segment is where an interrupted pass stopped: its
 * extent was freed, only the link is left to clear. */
static void free_segments(ph_engine *e, ph_pctx *c, ph_txlog_anchor *a)
{
    for (;;) {
        uint64_t *last = NULL;
        ph_txseg seg;
        unsigned n = 0;
        for (uint64_t *l = &a->xnext; ph_load_relaxed(l) && n++ < 4096; l = seg.next) {
            last = l;
            if (segment(e, ph_load_relaxed(l), &seg))
                break;
        }
        if (!last)
            return;
        uint64_t off = ph_load_relaxed(last), bytes;
        if (ph_extent_lookup(e->ext, off, &bytes) == 0)
            ph_extent_free(e->ext, c, off, PH_EXT_LARGE, NULL, 0, 0); /* fenced */
        ph_persist_write(&e->sp->persist, c, last, 0);
        ph_persist_flush(&e->sp->persist, c, last, sizeof(*last));
    }
}

int ph_engine_tx_recover(ph_engine *e, ph_pctx *c)
{
    recover_ctx o = {e, c, 0, 0, 0, 0};
    unsigned active = 0;
    for (unsigned l = 0; l < PH_LANES_MAX && !o.rc; l++) {
        ph_txlog_anchor *a = ph_engine_txlog(e, l);
        uint64_t st = ph_load_relaxed(&a->xstate);
        if ((st & 0xff) != PH_TX_ACTIVE)
            continue;
        ph_txlog_end end;
        o.undo_crc = o.alloc_crc = 0;
        ph_txlog_walk(a, st >> 8, segment, e, decide, &o, &end);
        o.forward = end.committed && end.contents == ph_txlog_chain(o.undo_crc, o.alloc_crc);
        if (!o.rc)
            ph_txlog_walk(a, st >> 8, segment, e, apply, &o, &end);
        active++;
        if (o.forward)
            e->tx_rolled_forward++;
        else
            e->tx_rolled_back++;
    }
    if (o.rc)
        return o.rc;
    if (active) {
        ph_persist_fence(&e->sp->persist, c); /* the rollbacks and roll-forwards, then: */
        for (unsigned l = 0; l < PH_LANES_MAX; l++) {
            ph_txlog_anchor *a = ph_engine_txlog(e, l);
            uint64_t st = ph_load_relaxed(&a->xstate);
            if ((st & 0xff) == PH_TX_ACTIVE) {
                ph_persist_write(&e->sp->persist, c, &a->xstate, st & ~0xffull);
                ph_persist_flush(&e->sp->persist, c, &a->xstate, sizeof(a->xstate));
            }
        }
        ph_persist_fence(&e->sp->persist, c); /* retired before any segment is freed */
    }
    for (unsigned l = 0; l < PH_LANES_MAX; l++) {
        ph_txlog_anchor *a = ph_engine_txlog(e, l);
        if (ph_load_relaxed(&a->xnext))
            free_segments(e, c, a);
    }
    return 0;
}

unsigned ph_engine_tx_check(ph_engine *e, int idle, char *err, size_t errlen)
{
    unsigned errors = 0;
    for (unsigned l = 0; e->txlogs && l < PH_LANES_MAX; l++) {
        ph_txlog_anchor *a = ph_engine_txlog(e, l);
        uint64_t st = ph_load_relaxed(&a->xstate), ceil = ph_load_relaxed(&a->xceiling);
        const char *why = (st & 0xff) > PH_TX_ACTIVE     ? "an unknown state"
                          : (st >> 8) >= ceil && st >> 8  ? "a sequence at or above its ceiling"
                          : idle && (st & 0xff)           ? "a transaction in flight"
                          : idle && ph_load_relaxed(&a->xnext) ? "an overflow segment left"
                                                          : NULL;
        if (why && errors++ == 0)
            snprintf(err, errlen, "transaction log of lane %u has %s", l, why);
    }
    return errors;
}
