/*
 * engine_check.c -- what the allocation engine reports about itself: the
 * figures of pheap_stats, and the deep check of pheap_check (the extent
 * index against the log, every slab against its descriptor and bitmap,
 * descriptors that no slab owns, the lanes), the part of that check every
 * open makes, so that damage no recovery explains is refused, and the
 * screen of free space before it is handed out (descriptors of chunks
 * that are no slab, read once per open when first needed).
 */
#include "alloc/engine_int.h"

#include <stdio.h>
#include <string.h>

#include "pheap.h"
#include "util/error.h"

/* ---- statistics and check -------------------------------------------------------- */

typedef struct walk_ctx {
    ph_engine *e;
    ph_engine_stats *st;
    char *err;
    size_t errlen;
    unsigned errors;
    unsigned orphans; /* of check_orphan_descriptors */
} walk_ctx;

static void stats_visit(void *arg, const ph_extnode *n)
{
    walk_ctx *w = arg;
    ph_engine_stats *st = w->st;
    uint64_t bytes = n->npages * PH_PAGE_SIZE;
    if (n->kind == PH_EXT_FREE) {
        st->free_bytes += bytes;
    } else if (n->kind == PH_EXT_LARGE) {
        st->large_extents++;
        st->large_bytes += bytes;
        st->live_blocks++;
        st->live_bytes += bytes;
    } else if (n->kind == PH_EXT_SLAB) {
        ph_slab *s = ph_load(&w->e->chunks[(n->page * PH_PAGE_SIZE) / PH_CHUNK_SIZE]);
        ph_slab_view v = {.cls = n->cls}; /* no slab yet: committed, not yet handed out */
        if (s)
            ph_slab_view_of(s, &v);
        unsigned cls = v.cls;
        uint64_t live = v.live, old = v.old_live;
        st->slabs++;
        st->slab_bytes += bytes;
        st->class_slabs[cls]++;
        st->class_live[cls] += live;
        st->live_blocks += live + old;
        st->live_bytes += live * ph_class_size[cls];
        if (old) { /* a morphed slab's old blocks (alloc/morph.h) */
            unsigned oc = v.old_cls;
            st->morphed_slabs++;
            st->old_blocks += old;
            st->class_live[oc] += old;
            st->live_bytes += old * ph_class_size[oc];
        }
    }
}

void ph_engine_stats_get(ph_engine *e, ph_engine_stats *out)
{
    memset(out, 0, sizeof(*out));
    walk_ctx w = {e, out, NULL, 0, 0};
    ph_extents_walk(e->ext, stats_visit, &w);
    uint64_t tail, grow = (e->sp->max_size - ph_space_size(e->sp)) / PH_PAGE_SIZE;
    out->largest_free = ph_extents_largest_free(e->ext, &tail) * PH_PAGE_SIZE;
    out->largest_alloc = PH_MAX(out->largest_free, (tail + grow) * PH_PAGE_SIZE);
}

static void check_fail(walk_ctx *w, const char *msg)
{
    if (w->errors++ == 0)
        snprintf(w->err, w->errlen, "%s", msg);
}

static void check_visit(void *arg, const ph_extnode *n)
{
    walk_ctx *w = arg;
    char msg[256];
    uint64_t ch = (n->page * PH_PAGE_SIZE) / PH_CHUNK_SIZE;
    ph_slab *s = n->kind == PH_EXT_SLAB ? w->e->chunks[ch] : NULL;
    if (n->kind == PH_EXT_SLAB && (!s || ph_slab_base_cls(s) != n->cls)) {
        snprintf(msg, sizeof(msg), "slab chunk %llu: index and extent log disagree",
                 (unsigned long long)ch);
        check_fail(w, msg);
    } else if (s && (w->e->gc ? ph_slab_check_desc(s, n->cls, msg, sizeof(msg)) /* bitmap
                                  written at close only */
                              : ph_slab_check(s, n->cls, msg, sizeof(msg)))) {
        check_fail(w, msg);
    } else if (s) {
        /* Available blocks must be free in the bitmap. */
        for (uint32_t i = 0; i < s->nblocks; i++) {
            if (((s->avail[i / 64] >> (i % 64)) & 1) && (ph_slab_bits(s, i) & 1)) {
                snprintf(msg, sizeof(msg), "slab at %llu: block %u is allocated and available",
                         (unsigned long long)s->off, i);
                check_fail(w, msg);
                break;
            }
        }
        int64_t g = ph_slab_held_mismatch(s);
        if (g >= 0) {
            snprintf(msg, sizeof(msg), "slab at %llu: the fast free's bit of offset %llu does "
                     "not follow the available blocks", (unsigned long long)s->off,
                     (unsigned long long)(s->off + (uint64_t)g * 16));
            check_fail(w, msg);
        }
    }
    const uint64_t per_chunk = PH_CHUNK_SIZE / PH_PAGE_SIZE;
    for (uint64_t p = PH_ALIGN_UP(n->page, per_chunk); n->kind != PH_EXT_SLAB && p < n->page + n->npages;
         p += per_chunk) {
        if (w->e->chunks[p / per_chunk]) {
            snprintf(msg, sizeof(msg), "chunk %llu is mapped as a slab but is not one",
                     (unsigned long long)(p / per_chunk));
            check_fail(w, msg);
        }
    }
}

int ph_engine_orphan_descriptor(const ph_engine *e, uint64_t ch, char *msg, size_t len)
{
    const ph_slab_desc *d = ph_space_at(e->sp, e->sp->slab_region + ch * PH_SLAB_DESC_SIZE);
    if (!ph_slab_desc_any_allocated(d))
        return 0;
    snprintf(msg, len, "chunk %llu (offset %llu) is no slab in the extent log, but its slab "
             "descriptor (class %llu) records %u allocated block(s)", (unsigned long long)ch,
             (unsigned long long)(e->sp->data_off + ch * PH_CHUNK_SIZE), (unsigned long long)d->cls,
             ph_slab_desc_allocated(d));
    return 1;
}

int ph_engine_screen(void *arg, uint64_t off, uint64_t bytes, uint64_t *bad)
{
    ph_engine *e = arg;
    char why[256];
    uint64_t first = ph_engine_chunk_of(e, off), end = ph_engine_chunk_of(e, off + bytes - 1) + 1;
    for (uint64_t ch = first; ch < end; ch++) {
        /* A chunk that was a slab in this open has the descriptor this
         * open wrote: a slab is released with no A bit left. */
        if ((e->screened[ch / 64] >> (ch % 64)) & 1 || e->slabs[ch])
            continue;
        if (ph_engine_orphan_descriptor(e, ch, why, sizeof(why))) {
            *bad = e->data_off + ch * PH_CHUNK_SIZE;
            return ph_err(PHEAP_ECORRUPT, "%s: set aside until the heap is closed (see pheap_check)",
                          why);
        }
        e->screened[ch / 64] |= 1ull << (ch % 64);
    }
    return 0;
}

/* Chunks that are no slab must have no allocated block in their
 * descriptor (ph_engine_orphan_descriptor).  (A descriptor with a class
 * and no A bit is legal: a slab made but not committed at a crash, or
 * released.)  Only the chunks backed now are read. */
static void check_orphan_descriptors(walk_ctx *w)
{
    ph_engine *e = w->e;
    uint64_t backed = (ph_space_size(e->sp) - e->sp->data_off) / PH_CHUNK_SIZE;
    char msg[256];
    for (uint64_t ch = 0; ch < backed; ch++)
        if (!ph_load(&e->chunks[ch]) && ph_engine_orphan_descriptor(e, ch, msg, sizeof(msg))) {
            check_fail(w, msg);
            w->orphans++;
        }
}

unsigned ph_engine_check(ph_engine *e, int lanes_idle, int traced, char *err, size_t errlen,
                         unsigned *orphans)
{
    walk_ctx w = {e, NULL, err, errlen, 0, 0};
    char msg[256];
    if (ph_extents_check(e->ext, msg, sizeof(msg)))
        check_fail(&w, msg);
    ph_extents_walk(e->ext, check_visit, &w);
    if (traced) /* else bitmaps of the last clean close, which recovery rewrites */
        check_orphan_descriptors(&w);
    *orphans = w.orphans;
    unsigned active = lanes_idle ? ph_lanes_active(&e->lanes) : 0;
    if (active) {
        snprintf(msg, sizeof(msg), "%u lane entries are active with no operation in flight", active);
        check_fail(&w, msg);
    }
    unsigned tx = ph_engine_tx_check(e, lanes_idle, msg, sizeof(msg));
    if (tx)
        check_fail(&w, msg);
    return w.errors + (tx ? tx - 1 : 0);
}

/* At open, once recovery (if any) ran: what no crash can leave behind and
 * what the operations would trust -- an active lane entry or a transaction
 * in flight on a heap that was closed cleanly or has just been recovered,
 * a transaction log with an unknown state or a sequence at its ceiling.
 * Allocated blocks in the descriptor of a chunk that is no slab are not
 * looked for here, so that an open costs what is live, not the heap's
 * size: ph_engine_screen refuses such a chunk when it is to be handed out
 * (and pheap_check reports it).  PHEAP_ECORRUPT with the finding, or 0.
 * Reads the lanes and the anchors. */
int ph_engine_open_check(ph_engine *e, int recovered)
{
    int clean = ph_load(&e->sp->state->xclean) == PH_STATE_CLEAN;
    int settled = clean || recovered;
    char msg[256] = "";
    unsigned active = settled ? ph_lanes_active(&e->lanes) : 0;
    if (active)
        return ph_err(PHEAP_ECORRUPT, "%u lane entries are active in a heap %s", active,
                      clean ? "closed cleanly" : "just recovered");
    if (ph_engine_tx_check(e, settled, msg, sizeof(msg)))
        return ph_err(PHEAP_ECORRUPT, "%s%s", msg, settled ? " (after a clean close or recovery)" : "");
    return 0;
}
