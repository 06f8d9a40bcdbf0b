/*
 * engine_tx.c -- what transactions need from the allocation engine: blocks
 * reserved without being allocated, the lookup of the block an address
 * lies in, the commit's bitmap and extent changes staged under one fence,
 * and the recovery of interrupted transactions at open.
 *
 * Commit (heap/tx.c): F1 the log and its COMMIT record; F2 the changes --
 * ph_engine_tx_lock locks every bitmap word the transaction changes, in
 * address order (two committing threads never wait on each other in a
 * cycle; the other operations hold one word at a time), before the caller
 * writes anything back (a locked instruction waits for the write-backs in
 * flight); ph_engine_tx_stage appends the extent-log entries of large
 * blocks and writes each word once with its final value; the caller
 * fences, then unlocks; F3 the log's retirement,
 * after which ph_engine_tx_release makes the freed blocks reusable (before
 * it, a recovery could redo a free over a block handed out again).  In a
 * shared heap, the frees of other processes' blocks are cleared after the
 * rest of the stage under the extent index's locks, held until the
 * release gives the blocks back to their slabs' lists (engine_share.h).
 *
 * Recovery reads every log whose state is ACTIVE or FORWARD, and every IDLE
 * one whose first record counts with a seq above its state's (a redo
 * transaction cut short, heap/tx.c).  A walk over the records decides: a
 * COMMIT record that counts and the added ranges and allocated blocks
 * holding the contents it names mean forward; a FORWARD state means
 * forward (an earlier recovery decided); anything else means back.
 *   1  Every log is read and decided, every overflow link checked, before
 *      anything is written: damage (an unknown state, a record outside the
 *      data region, a link to a block that is no segment of its lane)
 *      refuses the open with the file as it was.
 *   2  Logs going forward get the state FORWARD, all fenced once, before
 *      any is applied: a roll-forward changes what the contents CRC covers
 *      (a block it frees may be punched, or handed out and written), and a
 *      crash during it must not make the next recovery decide back.  Logs
 *      going back are rolled back -- every UNDO record's old bytes, for an
 *      ACTIVE log; an IDLE one has nothing to undo.
 *   3  Roll-forwards: REDO, ALLOC and FREE in log order, idempotent.
 *   4  One fence; every log read gets IDLE with its seq; one fence (a log
 *      that no recovery retires could count again later: its COMMIT
 *      record and the contents it names can come back).
 *   5  Overflow segments are freed, each free fenced before the link to it
 *      is cleared, so a crash leaves a link to a free extent (cleared next
 *      time) but never a live segment without a link.  A segment is a
 *      live large block carrying the magic and the lane in its header.
 * A crash at any point is recovered by the next open the same way.
 */
#include "alloc/engine_int.h"
#include "alloc/engine_share.h"

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
        ph_extent_cancel(e->ext, c, off);
}

int ph_engine_block_at(ph_engine *e, uint64_t off, uint64_t *start, uint64_t *bytes,
                       const char *call)
{
    ph_slab *s = ph_engine_chunk_slab(e, off);
    uint32_t size;
    unsigned bits;
    if (s || (e->shared && ph_engine_share_small_at(e, off, start, &size, &bits))) {
        if (s)
            bits = ph_engine_small_at(s, off, start, &size);
        if (bits == 3) {
            *bytes = size;
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

/* 1 when a slab of v changed class since v was resolved (its word locked). */
static int moved(const ph_tx_change *v, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (v[k].slab && ph_load_relaxed(&v[k].slab->xgen) != v[k].gen)
            return 1;
    return 0;
}

void ph_engine_tx_lock(ph_engine *e, ph_tx_change *v, size_t n)
{
    for (;;) {
        for (size_t k = 0; k < n; k++) {
            v[k].skip = 0;
            v[k].slab = ph_engine_chunk_slab(e, v[k].off);
            /* in a shared heap, a block no slab of this process holds may be another's */
            v[k].foreign = !v[k].slab && e->shared && v[k].kind == PH_TXREC_FREE &&
                           ph_engine_share_live(e, NULL, v[k].off) != 1;
            if (v[k].slab) {
                ph_blockref r;
                ph_slab_resolve(v[k].slab, v[k].off, &r);
                v[k].word = r.word;
                v[k].shift = r.shift;
                v[k].gen = r.gen;
                v[k].old = (uint32_t)r.old;
                v[k].index = r.index;
            }
        }
        if (n > 1) /* large blocks first, each group in log order */
            qsort(v, n, sizeof(*v), by_word);
        for (size_t k = 0; k < n; k++)
            if (v[k].slab && group_start(v, k))
                ph_spin_lock(&v[k].slab->wlock[v[k].word]);
        if (!moved(v, n))
            return;
        ph_engine_tx_unlock(e, v, n); /* a morph came between: resolve again */
    }
}

void ph_engine_tx_stage(ph_engine *e, ph_pctx *c, ph_tx_change *v, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        ph_slab *s = v[k].slab;
        if (ph_unlikely(v[k].foreign))
            continue; /* below */
        if (!s) {
            if (v[k].kind == PH_TXREC_ALLOC)
                ph_extent_commit_staged(e->ext, c, v[k].off);
            else /* a block the program freed twice may be pheap's own now: never freed */
                v[k].skip = ph_space_guarded_overlap(e->sp, v[k].off, 1) ||
                            ph_extent_free_staged(e->ext, c, v[k].off, PH_EXT_LARGE, NULL, 0) != 0;
            continue;
        }
        if (ph_unlikely(s->shared)) { /* each change by compare-and-swap */
            if (v[k].kind == PH_TXREC_ALLOC)
                (void)ph_slab_cas_locked(e->sp, c, s, v[k].word, 3ull << v[k].shift, v[k].shift, 0);
            else
                v[k].skip = ph_slab_cas_locked(e->sp, c, s, v[k].word, 0, v[k].shift, 1) != 0;
            continue;
        }
        uint64_t w = ph_load_relaxed(&s->bits[v[k].word]), a = 1ull << v[k].shift;
        if (v[k].kind == PH_TXREC_ALLOC)
            w |= 3 * a;
        else if ((w & a) && (v[k].old || (w & 2 * a))) /* live: an old block's bit, or A and E */
            w &= ~a;
        else
            v[k].skip = 1; /* another thread freed it first (the application's race) */
        ph_store(&s->bits[v[k].word], w);
        if (k + 1 == n || group_start(v, k + 1))
            ph_persist_store_nt(&e->sp->persist, c, &s->desc->xbits[v[k].word], w);
    }
    if (e->shared) /* blocks of other processes' slabs: cleared, and given back after F3 */
        ph_engine_share_tx_clear(e, c, v, n);
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
    if (e->shared) /* first: the index's locks held since the stage go */
        ph_engine_share_tx_push(e, c, v, n);
    for (size_t k = 0; k < n; k++) {
        if (v[k].kind != PH_TXREC_FREE || v[k].skip || v[k].foreign)
            continue; /* (a foreign block is back with its owner) */
        if (v[k].slab && v[k].old)
            ph_engine_old_freed(e, c, v[k].slab, v[k].index);
        else if (v[k].slab)
            ph_engine_cache_block(e, t, c, v[k].slab->xcls, v[k].off);
        else
            ph_extent_release(e->ext, c, v[k].off);
    }
}

int ph_engine_tx_anchor_word(const ph_engine *e, uint64_t off)
{
    if (!e->txlogs)
        return 0;
    uint64_t first = (uint64_t)((char *)ph_txlog_anchor_of(e->txlogs, 0) - e->sp->base);
    uint64_t rel = off - first;
    return off >= first && rel < (uint64_t)PH_LANES_MAX * PH_LINE_SIZE &&
           rel % PH_LINE_SIZE == offsetof(ph_txlog_anchor, xnext);
}

/* ---- recovery ------------------------------------------------------------------- */

typedef struct recover_ctx {
    ph_engine *e;
    ph_pctx *c;
    unsigned lane;      /* the log being read */
    uint32_t undo_crc;  /* CRC of the added ranges, in log order */
    uint32_t alloc_crc; /* ... and of the allocated blocks */
    int forward;
    int committed;      /* the walk ended in a COMMIT record that counts */
    int rc;
    ph_txrec_view *recs; /* the log's records, kept by the walk */
    size_t n, cap;
    ph_engine_pushes *pushes; /* a takeover: the blocks its frees give back (shared heap) */
} recover_ctx;

static int in_data(const ph_engine *e, uint64_t off, uint64_t len)
{
    uint64_t size = ph_space_size(e->sp);
    return off >= e->sp->data_off && off < size && len <= size - off;
}

/* An overflow segment of the log being read: a live large block whose
 * header carries the magic and the lane (format/layout.h). */
static int segment(void *arg, uint64_t off, ph_txseg *out)
{
    recover_ctx *o = arg;
    ph_engine *e = o->e;
    uint64_t bytes;
    if (!in_data(e, off, PH_PAGE_SIZE) || off % PH_PAGE_SIZE || ph_engine_chunk_slab(e, off) ||
        ph_extent_lookup(e->ext, off, &bytes) || bytes <= PH_LINE_SIZE)
        return PHEAP_ECORRUPT;
    ph_txseg_header *h = ph_space_at(e->sp, off);
    if (ph_load_relaxed(&h->magic) != PH_TXSEG_MAGIC || ph_load_relaxed(&h->lane) != o->lane)
        return PHEAP_ECORRUPT;
    *out = (ph_txseg){(uint8_t *)(h + 1), bytes - PH_LINE_SIZE, &h->xnext};
    return 0;
}

/* Keeps a record of the walk and folds it into the contents CRC. */
static void keep(void *arg, const ph_txrec_view *r)
{
    recover_ctx *o = arg;
    uint64_t len = r->kind == PH_TXREC_ALLOC || r->kind == PH_TXREC_FREE ? r->aux : r->len;
    if (o->rc)
        return;
    if (!in_data(o->e, r->off, len)) {
        o->rc = ph_err(PHEAP_ECORRUPT, "transaction log: a record names [%llu, +%llu), "
                       "outside the data region", (unsigned long long)r->off,
                       (unsigned long long)len);
        return;
    }
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 64;
        ph_txrec_view *v = realloc(o->recs, cap * sizeof(*v));
        if (!v) {
            o->rc = ph_err(PHEAP_ENOMEM, "out of memory for recovery");
            return;
        }
        o->recs = v;
        o->cap = cap;
    }
    o->recs[o->n++] = *r;
    if (r->kind == PH_TXREC_UNDO)
        o->undo_crc = ph_crc32c(o->undo_crc, ph_space_at(o->e->sp, r->off), len);
    else if (r->kind == PH_TXREC_ALLOC)
        o->alloc_crc = ph_crc32c(o->alloc_crc, ph_space_at(o->e->sp, r->off), len);
}

/* Redoes an allocation or free of the log (the block was reserved or live
 * when the transaction ran; every step is idempotent).  In a takeover the
 * block may lie in another process's slab, seen through a view; a small
 * block freed -- now, or by the dead process, whose commit gives blocks
 * back only after its log's retirement -- is given back to its slab's
 * list by the caller, after the retirement (ph_engine_pushes). */
static void redo_block(recover_ctx *o, const ph_txrec_view *r)
{
    ph_engine *e = o->e;
    ph_slab *s = ph_engine_chunk_slab(e, r->off), *view = NULL;
    if (!s && e->shared)
        s = view = ph_engine_share_view(e, o->c, r->off);
    if (!s) {
        uint64_t bytes;
        if (r->kind == PH_TXREC_ALLOC)
            o->rc = ph_extent_claim(e->ext, o->c, r->off, r->aux);
        else if (ph_extent_lookup(e->ext, r->off, &bytes) == 0)
            o->rc = ph_engine_free_large(e, o->c, o->pushes, r->off);
        return;
    }
    ph_blockref b;
    ph_slab_resolve(s, r->off, &b);
    if (!b.exact) /* a block of the class before a morph, freed by this log already */
        (void)ph_morph_old_ref(s, r->off, &b);
    if (!b.exact) {
        o->rc = ph_err(PHEAP_ECORRUPT, "transaction log: %llu is not a block",
                       (unsigned long long)r->off);
    } else if (r->kind == PH_TXREC_ALLOC) {
        /* No lock and no fence: recovery runs alone (a takeover's slab is
         * the dead process's, or compares and swaps), and step 4's fence
         * makes the word durable before the log is retired. */
        if (!b.old) /* a live old block: allocated already */
            ph_slab_set_locked(e->sp, o->c, s, b.word, b.shift);
    } else {
        int rc = ph_engine_clear_block(e->sp, o->c, s, &b);
        if (rc == 0 && b.old)
            ph_morph_unpin(e->sp, o->c, s, b.index, NULL, NULL); /* else clear already: done before */
        else if (o->pushes && !b.old && (rc == 0 || rc == PHEAP_EDOUBLEFREE) &&
                 ph_engine_pushes_add(o->pushes, r->off) != 0)
            o->rc = ph_err(PHEAP_ENOMEM, "out of memory for a takeover");
    }
    ph_engine_share_unview(e, o->c, view);
}

/* Rolls the kept records back (UNDO bytes) or forward (REDO, ALLOC, FREE). */
static void apply(recover_ctx *o, size_t first, size_t end, int forward)
{
    o->forward = forward;
    for (size_t i = first; i < end && !o->rc; i++) {
        const ph_txrec_view *r = &o->recs[i];
        if (o->forward ? r->kind == PH_TXREC_REDO : r->kind == PH_TXREC_UNDO) {
            void *dst = ph_space_at(o->e->sp, r->off);
            memcpy(dst, r->payload, r->len);
            ph_persist_flush(&o->e->sp->persist, o->c, dst, r->len);
        } else if (o->forward && (r->kind == PH_TXREC_ALLOC || r->kind == PH_TXREC_FREE)) {
            redo_block(o, r);
        }
    }
}

/* The transaction whose log lane `l` holds, if one may be in flight: its
 * seq, or 0.  ACTIVE and FORWARD logs; an IDLE one whose first record
 * counts with a seq above its state's (a redo transaction cut short,
 * heap/tx.c). */
static uint64_t in_flight(ph_engine *e, unsigned l, uint64_t st)
{
    if ((st & 0xff) != PH_TX_IDLE)
        return st >> 8;
    const ph_txrec *first = (const ph_txrec *)ph_txlog_records_of(e->txlogs, l);
    ph_txrec_view r;
    uint64_t seq = ph_load_relaxed(&first->seq);
    if (!ph_load_relaxed(&ph_engine_txlog(e, l)->xceiling))
        return 0; /* never used: its records area was never read or written */
    if (seq <= st >> 8 || !ph_txrec_get(first, PH_TXLOG_SIZE, seq, &r))
        return 0;
    return seq;
}

/* Reads lane l's log of transaction `seq` into o (its records appended to
 * o->recs) and decides. */
static void read_log(recover_ctx *o, unsigned l, uint64_t st, uint64_t seq)
{
    ph_txlog_end end;
    o->lane = l;
    o->undo_crc = o->alloc_crc = 0;
    ph_txlog_walk(ph_engine_txlog(o->e, l), ph_txlog_records_of(o->e->txlogs, l), seq, segment,
                  o, keep, o, &end);
    o->committed = end.committed;
    int contents = end.contents == ph_txlog_chain(o->undo_crc, o->alloc_crc) ||
                   ph_plant("tx-no-contents-check"); /* planted */
    if ((st & 0xff) == PH_TX_FORWARD) {
        o->forward = 1; /* decided by an earlier recovery: the contents may have changed since */
        if (!end.committed && !o->rc)
            o->rc = ph_err(PHEAP_ECORRUPT, "transaction log of lane %u: rolling forward, but "
                           "its records do not end in a COMMIT record that counts", l);
    } else {
        o->forward = end.committed && contents;
    }
}

/* Frees a log's overflow segments, last first (see the top).  A link to
 * free space is where an interrupted pass stopped (its extent was freed,
 * only the link is left to clear); a link to anything else that is no
 * segment of this lane is damage, and nothing is freed. */
static int free_segments(recover_ctx *o, unsigned l, int check_only)
{
    ph_engine *e = o->e;
    ph_txlog_anchor *a = ph_engine_txlog(e, l);
    o->lane = l;
    for (;;) {
        uint64_t *last = NULL;
        ph_txseg seg;
        unsigned n = 0;
        int ok = 0;
        for (uint64_t *link = &a->xnext; ph_load_relaxed(link) && n++ < 4096; link = seg.next) {
            last = link;
            if (!(ok = segment(o, ph_load_relaxed(link), &seg) == 0))
                break;
        }
        if (!last)
            return 0;
        uint64_t off = ph_load_relaxed(last);
        if (!ok && (!in_data(e, off, 8) || ph_engine_chunk_slab(e, off) ||
                    ph_extent_live_at(e->ext, off)))
            return ph_err(PHEAP_ECORRUPT, "transaction log of lane %u links to %llu, which is no "
                          "overflow segment of it", l, (unsigned long long)off);
        if (check_only)
            return 0;
        if (ok)
            ph_extent_free(e->ext, o->c, off, PH_EXT_LARGE, NULL, 0, 0); /* fenced */
        ph_persist_write(&e->sp->persist, o->c, last, 0);
        ph_persist_flush(&e->sp->persist, o->c, last, sizeof(*last));
    }
}

/* Stores lane l's state word and flushes it (durable at the next fence). */
static void set_state(ph_engine *e, ph_pctx *c, unsigned l, uint64_t v)
{
    ph_txlog_anchor *a = ph_engine_txlog(e, l);
    ph_persist_write(&e->sp->persist, c, &a->xstate, v);
    ph_persist_flush(&e->sp->persist, c, &a->xstate, sizeof(a->xstate));
}

/* A recovery of the logs of some lanes (every lane at open; a dead
 * process's in a takeover), through its steps. */
struct ph_tx_recovery {
    recover_ctx o;
    const uint8_t *holders; /* the lanes: those whose holder byte is `owner`; NULL: all */
    uint8_t owner;
    uint64_t seqs[PH_LANES_MAX];   /* in flight: seq; 0 none */
    size_t first[PH_LANES_MAX + 1]; /* its records in o.recs */
    uint8_t fwd[PH_LANES_MAX];
    unsigned read;
};

static int mine(const ph_tx_recovery *t, unsigned l)
{
    return !t->holders || __atomic_load_n(&t->holders[l], __ATOMIC_ACQUIRE) == t->owner;
}

/* Steps 1 to 3 (see the top): read, decide, roll back or forward. */
static int recover_apply(ph_tx_recovery *t)
{
    recover_ctx *o = &t->o;
    ph_engine *e = o->e;
    ph_pctx *c = o->c;
    unsigned decided = 0;
    /* 1: read and decide every log, and check every overflow link, before
     * anything is written: damage refuses the open with the heap as it
     * was. */
    for (unsigned l = 0; l < PH_LANES_MAX && !o->rc; l++) {
        ph_txlog_anchor *a = ph_engine_txlog(e, l);
        uint64_t st = ph_load_relaxed(&a->xstate);
        t->first[l] = o->n;
        if (!mine(t, l))
            continue;
        if ((st & 0xff) > PH_TX_FORWARD) {
            o->rc = ph_err(PHEAP_ECORRUPT, "transaction log of lane %u: unknown state %llu", l,
                           (unsigned long long)(st & 0xff));
            break;
        }
        if ((t->seqs[l] = in_flight(e, l, st)) != 0) {
            read_log(o, l, st, t->seqs[l]);
            t->fwd[l] = (uint8_t)o->forward;
            decided += o->forward && (st & 0xff) != PH_TX_FORWARD;
            t->read++;
        }
        if (!o->rc && ph_load_relaxed(&a->xnext))
            o->rc = free_segments(o, l, 1);
    }
    t->first[PH_LANES_MAX] = o->n;
    /* 2: the decisions to roll forward made durable before any is applied,
     * so that no later recovery decides otherwise (a roll-forward changes
     * what the contents CRC covers: a freed block's pages may be punched);
     * the others rolled back -- UNDO records count only in an ACTIVE log. */
    for (unsigned l = 0; l < PH_LANES_MAX && !o->rc && t->read; l++) {
        uint64_t st = ph_load_relaxed(&ph_engine_txlog(e, l)->xstate);
        if (t->fwd[l] && (st & 0xff) != PH_TX_FORWARD)
            set_state(e, c, l, t->seqs[l] << 8 | PH_TX_FORWARD);
        if (t->seqs[l] && !t->fwd[l]) {
            if ((st & 0xff) == PH_TX_ACTIVE)
                apply(o, t->first[l], t->first[l + 1], 0);
            e->tx_rolled_back++;
        }
    }
    if (!o->rc && decided)
        ph_persist_fence(&e->sp->persist, c);
    /* 3: roll forward. */
    for (unsigned l = 0; l < PH_LANES_MAX && !o->rc && t->read; l++) {
        if (t->fwd[l]) {
            apply(o, t->first[l], t->first[l + 1], 1);
            e->tx_rolled_forward++;
        }
    }
    return o->rc;
}

/* Step 4 without its fences: every log read gets IDLE with its seq. */
static void recover_retire(ph_tx_recovery *t)
{
    for (unsigned l = 0; l < PH_LANES_MAX && !t->o.rc && t->read; l++)
        if (t->seqs[l])
            set_state(t->o.e, t->o.c, l, t->seqs[l] << 8 | PH_TX_IDLE);
}

/* Step 5, and the end. */
static int recover_end(ph_tx_recovery *t)
{
    recover_ctx *o = &t->o;
    for (unsigned l = 0; l < PH_LANES_MAX && !o->rc; l++)
        if (mine(t, l) && ph_load_relaxed(&ph_engine_txlog(o->e, l)->xnext))
            o->rc = free_segments(o, l, 0);
    int rc = o->rc;
    free(o->recs);
    free(t);
    return rc;
}

static ph_tx_recovery *recovery_new(ph_engine *e, ph_pctx *c)
{
    ph_tx_recovery *t = calloc(1, sizeof(*t));
    if (!t) {
        ph_err(PHEAP_ENOMEM, "out of memory for recovery");
        return NULL;
    }
    t->o.e = e;
    t->o.c = c;
    return t;
}

int ph_engine_tx_recover(ph_engine *e, ph_pctx *c)
{
    ph_tx_recovery *t = recovery_new(e, c);
    if (!t)
        return PHEAP_ENOMEM;
    /* 4: retire every log read, once what it did is durable (a log that
     * no recovery retires could count again later: its COMMIT record and
     * the contents it names can come back); 5: free the overflow segments
     * once the logs that may need them are retired. */
    if (!recover_apply(t) && t->read) {
        ph_persist_fence(&e->sp->persist, c);
        recover_retire(t);
        ph_persist_fence(&e->sp->persist, c);
    }
    return recover_end(t);
}

ph_tx_recovery *ph_engine_tx_takeover(ph_engine *e, ph_pctx *c, uint8_t owner,
                                      ph_engine_pushes *pushes, int *rc)
{
    ph_tx_recovery *t = e->txlogs ? recovery_new(e, c) : NULL;
    *rc = e->txlogs && !t ? PHEAP_ENOMEM : 0;
    if (!t)
        return NULL;
    t->holders = e->share.lanes;
    t->owner = owner;
    t->o.pushes = pushes;
    if ((*rc = recover_apply(t)) == 0 && t->read)
        ph_persist_fence(&e->sp->persist, c); /* what the roll-forwards did, before the retirements */
    return t;
}

void ph_engine_tx_takeover_retire(ph_tx_recovery *t)
{
    if (t)
        recover_retire(t);
}

int ph_engine_tx_takeover_end(ph_tx_recovery *t)
{
    return t ? recover_end(t) : 0;
}

/* ---- a shared heap: what the others' logs may still do ---------------------------- */

void ph_engine_tx_scan_frees(ph_engine *e, void (*fn)(void *, uint64_t), void *arg)
{
    if (!e->txlogs)
        return;
    for (unsigned l = 0; l < PH_LANES_MAX; l++) {
        uint64_t st = ph_load_relaxed(&ph_engine_txlog(e, l)->xstate);
        uint64_t seq = (st & 0xff) <= PH_TX_FORWARD ? in_flight(e, l, st) : 0;
        if (!seq)
            continue;
        recover_ctx o = {.e = e};
        read_log(&o, l, st, seq);
        if (o.committed)
            for (size_t i = 0; i < o.n; i++)
                if (o.recs[i].kind == PH_TXREC_FREE)
                    fn(arg, o.recs[i].off);
        free(o.recs);
    }
}

/* A committed transaction that was never retired: recovery would roll it
 * forward (idle heaps only: between a commit's first and last fence, this
 * is the transaction in flight). */
static int unretired(ph_engine *e, unsigned l, uint64_t st)
{
    uint64_t seq = in_flight(e, l, st);
    if (!seq || (st & 0xff) != PH_TX_IDLE)
        return 0;
    recover_ctx o = {e, NULL, 0, 0, 0, 0, 0, 0, NULL, 0, 0};
    read_log(&o, l, st, seq);
    free(o.recs);
    return o.committed;
}

/* Sequences live in the 56 bits above a state word's kind byte: a ceiling
 * from which the next block of sequences would not fit is damage (no heap
 * takes 2^36 blocks of them). */
#define PH_TX_CEILING_MAX ((1ull << 56) - 2 * PH_TX_SEQ_BLOCK)

unsigned ph_engine_tx_check(ph_engine *e, int idle, char *err, size_t errlen)
{
    unsigned errors = 0;
    for (unsigned l = 0; e->txlogs && l < PH_LANES_MAX; l++) {
        ph_txlog_anchor *a = ph_engine_txlog(e, l);
        uint64_t st = ph_load_relaxed(&a->xstate), ceil = ph_load_relaxed(&a->xceiling);
        const char *why = (st & 0xff) > PH_TX_FORWARD ? "an unknown state"
                          : (st >> 8) >= ceil && st >> 8 ? "a sequence at or above its ceiling"
                          : ceil > PH_TX_CEILING_MAX     ? "a sequence ceiling past 2^56"
                          : idle && (st & 0xff)          ? "a transaction in flight"
                          : idle && ph_load_relaxed(&a->xnext) ? "an overflow segment left"
                          : idle && unretired(e, l, st)  ? "a committed transaction never retired"
                                                         : NULL;
        if (why && errors++ == 0)
            snprintf(err, errlen, "transaction log of lane %u has %s", l, why);
    }
    return errors;
}
