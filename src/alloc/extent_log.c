/*
 * extent_log.c -- the durable extent log (format/layout.h): entries and
 * their check, appends, compaction into the other half, and the replay
 * that rebuilds the set of live extents at open.
 *
 * Crash protocol.  Every durable change is one log entry, written with
 * non-temporal stores under the index lock and fenced by its thread after
 * the lock is released, so that large operations of several threads fence
 * in parallel.  Entries may therefore become durable out of log order; replay
 * reads every slot of the active half below its mark (see below) and skips
 * the invalid ones.  That is
 * sound because an entry that depends on another is only appended once the
 * other is durable: a block is freed only after its allocation returned,
 * and freed pages go back to the index only after the free's fence.  An
 * allocation commits with its entry; a free commits with its entry and
 * only then returns its pages to the index (and, when large, to the file
 * system).  Replay rebuilds the set of live extents; everything else
 * backed is free.  A torn entry has one zero word (it was appended over a
 * durably zero slot: see compaction) and fails its kind or page count; it
 * was never fenced, so the operation it describes had not returned.
 *
 * High-water marks (heaps with PH_FEAT_INCOMPAT_EXTLOG_HIGH): appends and
 * replay stay below the active half's mark x->high (durable in
 * hdr->xhigh[half]), so that what a heap touches, reserves and reads of
 * the log follows the entries it uses, not the half's size (max_size).
 * Invariant: every slot below the mark that no append filled since the
 * mark covered it is durably zero; slots at or past it may hold entries of
 * older epochs.  When an append takes the last slot below the mark and the
 * mark is below ph_space_extlog_cap (what the file system holds for the
 * heap's size: it moves with growth), the mark rises first, by at most
 * PH_EXTLOG_RAISE entries (a bound on the work under the lock), one fence:
 *   R1  zeros in the slots newly covered that are not zero (non-temporal),
 *       the new mark stored and flushed, fence.
 * A crash before the fence may leave the new mark with some old slots: they
 * hold whole entries of older epochs, or words of them next to zeros,
 * which never decode for the half's epoch (unique for the heap's life, see
 * C1).  After it, every append lands on a durably zero slot.  The extra
 * fence comes after a growth, or once per PH_EXTLOG_RAISE appends at most.
 * Without the feature, the mark is the whole half and never moves.
 *
 * Compaction, when the active half is full -- its mark at the cap --
 * (three fences):
 *   C1  xlast_epoch := e' (the highest epoch ever used, plus one): no
 *       compaction cut short by a crash can lend its epoch to a later one;
 *       in the same line and fence, the other half's mark := the live
 *       extents plus room, at most the cap (the whole half without marks);
 *   C2  every slot of the other half below its new mark: the live extents
 *       with epoch e', zeros in every other slot that is not zero already
 *       (so each slot an append fills was durably zero, and a torn append
 *       leaves a zero word that never decodes);
 *   C3  xactive := e' << 1 | other: the commit.
 * Before C3 is durable the old half rules, whatever C1 and C2 left.
 * Entries in flight (written, not yet fenced) are already reflected in the
 * index that compaction writes out; if a crash loses them, the next
 * compaction uses a newer epoch and rewrites the half below its mark, so
 * nothing of this one survives where replay reads.
 */
#include "alloc/extent_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/sizeclass.h"
#include "pheap.h"
#include "util/error.h"

static uint64_t check16(uint64_t w0, uint64_t w1lo)
{
    return ph_mix64(w0 ^ ph_mix64(w1lo ^ 0x5048454150455854ull)) >> 48;
}

static ph_extlog_entry encode(uint64_t page, uint64_t n, uint32_t kind, unsigned cls, uint64_t epoch)
{
    uint64_t w0 = page | (uint64_t)kind << 36 | (uint64_t)cls << 40 | ((epoch >> 16) & 0xffff) << 48;
    uint64_t w1 = n | (epoch & 0xffff) << 32;
    return (ph_extlog_entry){w0, w1 | check16(w0, w1) << 48};
}

/* Decodes a log entry; 0 when it is not a valid entry of `epoch`. */
static int decode(const ph_extlog_entry *e, uint64_t epoch, ph_extent_rec *out)
{
    uint64_t w0 = ph_load_relaxed(&e->w0), w1 = ph_load_relaxed(&e->w1);
    uint64_t e32 = (w0 >> 48) << 16 | ((w1 >> 32) & 0xffff);
    if ((w1 >> 48) != check16(w0, w1 & 0xffffffffffffull) || e32 != (epoch & 0xffffffffu))
        return 0;
    *out = (ph_extent_rec){w0 & 0xfffffffffull, w1 & 0xffffffffull, (uint32_t)(w0 >> 36) & 0xf,
                   (uint32_t)(w0 >> 40) & 0xff};
    return out->kind >= PH_EXT_FREE && out->kind <= PH_EXT_RESERVED && out->n > 0;
}

/* Entry j (in log order) of a half.  Entries are interleaved over the
 * half's lines -- entry j in line j mod L, L lines of 4 entries -- so that
 * consecutive appends flush different lines (no reflush). */
static ph_extlog_entry *slot(const ph_extents *x, unsigned half, uint64_t j)
{
    uint64_t lines = x->half_entries / 4;
    return &x->half[half][(j % lines) * 4 + j / lines];
}

/* Entries the active half may hold now: its cap for the heap's size. */
static uint64_t log_cap(const ph_extents *x)
{
    return x->bounded ? ph_space_extlog_cap(x->half_entries, x->sp->data_off, ph_space_size(x->sp))
                      : x->half_entries;
}

static int is_zero(const ph_extlog_entry *e)
{
    return (ph_load_relaxed(&e->w0) | ph_load_relaxed(&e->w1)) == 0;
}

/* R1: raises the active half's mark to `high` (lock held).  A slot that
 * reads zero is durably zero (every zero the log stores is fenced before
 * the lock is released, and the file starts zero): only the others are
 * written, so a rise over fresh space is one store and one fence.  Zeros
 * are fenced before the mark is stored: a mark that reached media first
 * would put stale slots below it, where open refuses them and where a
 * torn append could mix with them. */
static void raise_high(ph_extents *x, ph_pctx *c, uint64_t high)
{
    static const uint64_t zero[2];
    ph_persist *p = &x->sp->persist;
    int zeroed = 0;
    for (uint64_t j = x->high; j < high && !ph_plant("extlog-raise-no-zero"); j++) {
        ph_extlog_entry *e = slot(x, x->active, j);
        if (!is_zero(e)) { /* planted above: stale slots kept */
            ph_persist_store_nt_words(p, c, &e->w0, zero, 2);
            zeroed = 1;
        }
    }
    if (zeroed)
        ph_persist_fence(p, c);
    if (ph_plant("extlog-mark-unfenced")) /* planted: the mark neither flushed nor fenced */
        ph_persist_write(p, c, &x->hdr->xhigh[x->active], high);
    else
        ph_persist_store64(p, c, &x->hdr->xhigh[x->active], high);
    x->high = high;
}

/* Whether a compaction writes node n: live extents, and in a shared heap
 * the reservations of every process (an exclusive open's are its own),
 * once logged: a reservation whose entry is being appended (the append
 * may compact first) has no owner yet, or it would be in the log twice. */
static int logged(const ph_extents *x, const ph_extnode *n)
{
    return n->kind == PH_EXT_LARGE || n->kind == PH_EXT_SLAB ||
           (x->owner && n->kind == PH_EXT_RESERVED && n->cls);
}

/* C2 of a half whose mark is at most its L lines: entry j < high alone in
 * line j (slot 0); the line's other slots lie past the mark.  Slots that
 * already hold what they should (zero) are not written. */
static void write_sparse_half(ph_extents *x, ph_pctx *c, unsigned half, uint64_t high,
                              uint64_t epoch)
{
    static const uint64_t zero[2];
    ph_persist *p = &x->sp->persist;
    uint64_t j = 0;
    for (uint64_t pg = 0; pg < x->pages; pg += x->head[pg]->npages) {
        const ph_extnode *n = x->head[pg];
        if (logged(x, n)) {
            ph_extlog_entry v = encode(n->page, n->npages, n->kind, n->cls, epoch);
            ph_persist_store_nt_words(p, c, &slot(x, half, j++)->w0, &v.w0, 2);
        }
    }
    for (; j < high && !(ph_plant("compact-reuse-epoch")); j++) /* planted: no zeros */
        if (!is_zero(slot(x, half, j)))
            ph_persist_store_nt_words(p, c, &slot(x, half, j)->w0, zero, 2);
}

/* C2 of a half whose mark passes its L lines: whole lines, composed in
 * x->scratch (entry j in slot (j mod L) * 4 + j / L), each written unless
 * it is all zero and should be. */
static void write_full_half(ph_extents *x, ph_pctx *c, unsigned half, uint64_t used,
                            uint64_t epoch)
{
    ph_persist *p = &x->sp->persist;
    uint64_t lines = x->half_entries / 4, j = 0;
    ph_extlog_entry *v = x->scratch;
    memset(v, 0, x->half_entries * sizeof(*v));
    for (uint64_t pg = 0; pg < x->pages; pg += x->head[pg]->npages) {
        const ph_extnode *n = x->head[pg];
        if (logged(x, n)) {
            v[(j % lines) * 4 + j / lines] = encode(n->page, n->npages, n->kind, n->cls, epoch);
            j++;
        }
    }
    for (uint64_t l = 0; l < lines; l++) {
        const ph_extlog_entry *e = &x->half[half][l * 4];
        int keep = is_zero(&e[0]) && is_zero(&e[1]) && is_zero(&e[2]) && is_zero(&e[3]) &&
                   l >= PH_MIN(used, lines);
        if (ph_plant("compact-reuse-epoch") && l >= used)
            break; /* planted: only the lines the entries need */
        if (!keep)
            ph_persist_store_nt_words(p, c, &x->half[half][l * 4].w0, &v[l * 4].w0, 8);
    }
}

static void compact(ph_extents *x, ph_pctx *c)
{
    unsigned other = !x->active;
    ph_persist *p = &x->sp->persist;
    uint64_t used = 0;
    for (uint64_t pg = 0; pg < x->pages; pg += x->head[pg]->npages)
        used += logged(x, x->head[pg]);
    /* The other half's new mark: the live extents and room for appends
     * (the cap counts an entry per 16 KiB of data, more than live ones). */
    uint64_t high = x->bounded ? PH_MIN(used + PH_EXTLOG_RAISE, log_cap(x)) : x->half_entries;
    /* The epoch is new for the life of the heap: recorded before any entry
     * of it is written, so a compaction that a crash cut short never lends
     * its epoch to the next one.  (The rewrite below already keeps a reused
     * epoch from mixing with a cut-short compaction's entries where replay
     * reads; this fence, one per compaction, keeps the simpler rule.)  The
     * other half's mark goes with it, in the same line. */
    uint64_t epoch = PH_MAX(x->epoch, ph_load(&x->hdr->xlast_epoch)) + 1;
    if (ph_plant("compact-reuse-epoch")) /* planted: the old protocol */
        epoch = x->epoch + 1;
    else
        ph_persist_write(p, c, &x->hdr->xlast_epoch, epoch);
    if (x->bounded && !ph_plant("extlog-mark-after-commit"))
        ph_persist_write(p, c, &x->hdr->xhigh[other], high);
    ph_persist_range(p, c, x->hdr, sizeof(*x->hdr)); /* C1 */
    /* C2: the live extents in log order, zeros in every other slot below
     * the mark.  A slot that an append later fills was durably zero, so a
     * torn append leaves one zero word, which never decodes (kind 0 or 0
     * pages). */
    if (high <= x->half_entries / 4)
        write_sparse_half(x, c, other, high, epoch);
    else
        write_full_half(x, c, other, used, epoch);
    ph_persist_fence(p, c);
    ph_persist_store64(p, c, &x->hdr->xactive, epoch << 1 | other);
    if (x->bounded && ph_plant("extlog-mark-after-commit")) /* planted: the mark last, unflushed */
        ph_persist_write(p, c, &x->hdr->xhigh[other], high);
    x->active = other;
    x->epoch = epoch;
    x->tail = used;
    x->high = high;
}

/* Writes the next entry of the log (lock held); the caller fences it after
 * dropping the lock, so that the lock is not held for the fence.  The mark
 * rises one append early, so that the append after a rise never writes a
 * line the rise did (no line is flushed in two consecutive batches). */
void ph_extent_log_append(ph_extents *x, ph_pctx *c, const ph_extnode *n, uint32_t kind)
{
    if (x->tail + 1 >= x->high) {
        uint64_t cap = log_cap(x);
        if (x->high < cap)
            raise_high(x, c, PH_MIN(x->high + PH_EXTLOG_RAISE, cap));
        else if (x->tail == x->high)
            compact(x, c);
    }
    ph_extlog_entry *e = slot(x, x->active, x->tail++);
    /* planted: entries of the wrong epoch */
    ph_extlog_entry v = encode(n->page, n->npages, kind, n->cls, x->epoch + ph_plant("extent-wrong-epoch"));
    /* Non-temporal: the slot is this call's alone, so no lock is needed
     * until the fence; replay and check read the log from memory. */
    ph_persist_store_nt_words(&x->sp->persist, c, &e->w0, (const uint64_t[2]){v.w0, v.w1}, 2);
}

int ph_extent_log_entry(const ph_extents *x, uint64_t j, ph_extent_rec *out)
{
    return decode(slot(x, x->active, j), x->epoch, out);
}

void ph_extent_log_forget_reserved(ph_extents *x, ph_pctx *c)
{
    if (!x->dropped)
        return;
    ph_spin_lock(&x->xlock);
    compact(x, c);
    x->dropped = 0;
    ph_spin_unlock(&x->xlock);
}

/* Recovery: zeroes what a crash left in the active half at or past the
 * tail -- slots that do not decode (one word of an append that was never
 * fenced), since nothing past the tail does -- so that the next append
 * there fills a durably zero slot and a torn one can never mix a new word
 * with an old one (see compaction).  No fence of its own: the open's next
 * one (the state's, by the same thread) comes before any append. */
void ph_extent_log_scrub(ph_extents *x, ph_pctx *c)
{
    static const uint64_t zero[2];
    for (uint64_t j = x->tail; j < x->high; j++) {
        ph_extlog_entry *e = slot(x, x->active, j);
        if (!is_zero(e))
            ph_persist_store_nt_words(&x->sp->persist, c, &e->w0, zero, 2);
    }
}

/* Slots of the active half that replay reads, in log order: [0, span):
 * those below its mark (the whole half for heaps before format 1.2).
 * Replay and the audit below both go through here. */
static uint64_t replay_span(const ph_extents *x)
{
    return x->high;
}

/* Why the header of the log cannot be trusted, or NULL.  xactive == 0 is a
 * heap never compacted (epoch 1, half 0).  In heaps with tagged logs,
 * compaction persists xlast_epoch before it writes an entry of the new
 * epoch, so the active epoch never exceeds it (or 1). */
static const char *header_fault(const ph_extents *x)
{
    uint64_t v = ph_load(&x->hdr->xactive), last = ph_load(&x->hdr->xlast_epoch);
    if (v && (v >> 1) == 0)
        return "the active epoch is 0";
    if ((v >> 1) > PH_EXTLOG_EPOCH_MAX || last > PH_EXTLOG_EPOCH_MAX)
        return "an epoch beyond any a heap reaches";
    if ((x->sp->features & PH_FEAT_INCOMPAT_TAGGED_LOGS) && (v >> 1) > PH_MAX(last, 1u))
        return "the active epoch is above the highest epoch ever used";
    return NULL;
}

int ph_extent_log_audit(const ph_extents *x, char *err, size_t errlen)
{
    const char *why = header_fault(x);
    if (why) {
        snprintf(err, errlen, "extent log header (active %#llx, last epoch %#llx): %s",
                 (unsigned long long)ph_load(&x->hdr->xactive),
                 (unsigned long long)ph_load(&x->hdr->xlast_epoch), why);
        return 1;
    }
    /* Heaps without tagged logs may keep stale slots of older epochs, and
     * torn appends over them: there a slot that does not decode proves
     * nothing. */
    if (!(x->sp->features & PH_FEAT_INCOMPAT_TAGGED_LOGS))
        return 0;
    uint64_t span = replay_span(x), bad = 0, first = 0;
    ph_extent_rec e;
    for (uint64_t i = 0; i < span; i++) {
        const ph_extlog_entry *s = slot(x, x->active, i);
        /* Zero, or one word of a torn append (see compaction): legal. */
        if (!ph_load_relaxed(&s->w0) || !ph_load_relaxed(&s->w1) || decode(s, x->epoch, &e))
            continue;
        if (bad++ == 0)
            first = i;
    }
    if (bad) {
        const ph_extlog_entry *s = slot(x, x->active, first);
        snprintf(err, errlen, "extent log: %llu slot(s) of the active half hold neither an entry of "
                 "epoch %llu nor zeros, first entry %llu (%#llx %#llx)", (unsigned long long)bad,
                 (unsigned long long)x->epoch, (unsigned long long)first,
                 (unsigned long long)ph_load_relaxed(&s->w0), (unsigned long long)ph_load_relaxed(&s->w1));
        return 1;
    }
    return 0;
}

typedef struct live_set {
    ph_extent_rec *v;       /* open addressing by page; n == 0 marks empty */
    uint64_t cap;   /* power of two */
    uint64_t count;
} live_set;

static ph_extent_rec *live_find(live_set *s, uint64_t page, int insert)
{
    uint64_t i = ph_mix64(page) & (s->cap - 1);
    for (;; i = (i + 1) & (s->cap - 1)) {
        if (s->v[i].n == 0)
            return insert ? &s->v[i] : NULL;
        if (s->v[i].page == page)
            return &s->v[i];
    }
}

static int cmp_page(const void *a, const void *b)
{
    const ph_extent_rec *x = a, *y = b;
    return x->page < y->page ? -1 : x->page > y->page;
}

/* Replays the slots of the active half below its mark into a sorted array
 * of live extents; *used gets the position after the last valid entry
 * (the append position). */
int ph_extent_log_replay(ph_extents *x, ph_extent_rec **out, uint64_t *nout, uint64_t *used)
{
    live_set s = {NULL, 64, 0};
    while (s.cap < 2 * x->high)
        s.cap *= 2;
    s.v = calloc(s.cap, sizeof(*s.v));
    if (!s.v)
        return ph_err(PHEAP_ENOMEM, "extent log replay: out of memory");
    int rc = 0;
    ph_extent_rec e;
    uint64_t i, tail = 0;
    for (i = 0; i < replay_span(x); i++) {
        if (!decode(slot(x, x->active, i), x->epoch, &e))
            continue; /* never written, or in flight at the crash */
        tail = i + 1;
        const char *why = NULL;
        ph_extent_rec *slot = live_find(&s, e.page, e.kind != PH_EXT_FREE);
        /* A shared heap's reservations (RESERVED, owner in cls): of free
         * space, or a held free of a live extent; a reservation becomes
         * live (LARGE, SLAB) or free again, never anything else. */
        int was_reserved = slot && slot->n && slot->kind == PH_EXT_RESERVED;
        if (e.page + e.n > x->pages)
            why = "extent beyond the heap's size";
        else if (e.kind == PH_EXT_SLAB &&
                 (e.n != PAGES_PER_CHUNK || e.page % PAGES_PER_CHUNK || e.cls >= PH_CLASSES))
            why = "malformed slab extent";
        else if (e.kind == PH_EXT_RESERVED && slot->n && (was_reserved || slot->n != e.n))
            why = "reservation of an extent that is not free or held whole";
        else if ((e.kind == PH_EXT_LARGE || e.kind == PH_EXT_SLAB) && slot->n &&
                 (!was_reserved || slot->n != e.n))
            why = "extent allocated twice";
        else if (e.kind == PH_EXT_FREE && (!slot || slot->n != e.n))
            why = "free of an extent that is not allocated";
        if (why) {
            rc = ph_err(PHEAP_ECORRUPT, "extent log entry %llu (page %llu, %llu pages): %s",
                        (unsigned long long)i, (unsigned long long)e.page, (unsigned long long)e.n, why);
            break;
        }
        if (e.kind == PH_EXT_FREE) {
            /* Backward-shift deletion keeps probe chains intact. */
            uint64_t j = (uint64_t)(slot - s.v);
            slot->n = 0;
            for (uint64_t k = (j + 1) & (s.cap - 1); s.v[k].n; k = (k + 1) & (s.cap - 1)) {
                ph_extent_rec moved = s.v[k];
                s.v[k].n = 0;
                *live_find(&s, moved.page, 1) = moved;
            }
            s.count--;
        } else {
            s.count += slot->n == 0;
            *slot = e;
        }
    }
    uint64_t n = 0;
    for (uint64_t k = 0; rc == 0 && k < s.cap; k++)
        if (s.v[k].n)
            s.v[n++] = s.v[k];
    qsort(s.v, n, sizeof(*s.v), cmp_page);
    for (uint64_t k = 1; rc == 0 && k < n; k++)
        if (s.v[k - 1].page + s.v[k - 1].n > s.v[k].page)
            rc = ph_err(PHEAP_ECORRUPT, "extent log: extents at pages %llu and %llu overlap",
                        (unsigned long long)s.v[k - 1].page, (unsigned long long)s.v[k].page);
    if (rc) {
        free(s.v);
        return rc;
    }
    *out = s.v;
    *nout = n;
    *used = tail;
    return 0;
}
