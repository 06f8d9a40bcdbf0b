/*
 * engine_gc.c -- the engine's part of the GC consistency mode and of
 * tracing: the clean-close write-back of the bitmaps, the mark bits of a
 * trace and the sweep that turns marks into bitmaps (recovery) or into
 * frees (collection).  The tracing itself (roots, filters, marking threads)
 * is the heap layer's (heap/gc.c).
 *
 * Crash protocol of a GC heap:
 *   running        slab descriptors (class, a zeroed bitmap) and extent-log
 *                  entries are durable as in LOG mode; bitmaps are not
 *                  written at all.  A slab is released only after its
 *                  descriptor's bitmap is durably zero.
 *   clean close    caches drained, every bitmap written, one fence, then
 *                  the clean mark: the next open trusts the bitmaps.
 *   recovery       marks from the roots; bitmaps := marks; unmarked large
 *                  blocks and empty slabs are freed (logged, fenced).  The
 *                  heap stays marked open: a crash during or after it
 *                  leads to another recovery, which sees the same
 *                  reachable blocks (freeing garbage never changes what is
 *                  reachable) and so gives the same result.
 */
#include "alloc/engine_int.h"

#include <stdlib.h>
#include <string.h>

#include "os/os.h"
#include "pheap.h"
#include "util/error.h"

#define PH_GC_WORDS (PH_SLAB_MAX_BLOCKS / 64u) /* mark words per chunk */
/* A morphed slab's blocks number at most PH_MORPH_MAX_BLOCKS in each of its
 * two classes: its old blocks take the chunk's second half of marks. */
#define PH_GC_OLD_MARK PH_MORPH_MAX_BLOCKS

struct ph_gc_marks {
    ph_engine *e;
    unsigned flags;
    uint64_t lo, hi;       /* the backed data region [lo, hi) */
    uint64_t nchunks, npages;
    uint64_t *slab;        /* [2][nchunks * PH_GC_WORDS]: marked; visited by a filter */
    uint64_t *large;       /* [2][npages / 64 + 1]: the same for large blocks (first page) */
    size_t slab_words, large_words, slab_bytes, large_bytes;
};

void ph_engine_set_gc(ph_engine *e)
{
    e->gc = 1;
    e->morph = 0; /* the tracer knows one class per slab */
    for (uint64_t ch = 0; ch < ph_engine_backed_chunks(e); ch++)
        e->gc_slabs[ch] = ph_gc_slab_tag(e->chunks[ch]);
}


int ph_engine_gc_free_tiny(const ph_gc_freemap *m, ph_tbin *bins, uint64_t off)
{
    uint32_t r;
    uintptr_t v = ph_gc_map_entry(m, off, &r);
    /* class 0 (tag 0) fills a slab's PH_SLAB_MAX_BLOCKS blocks */
    if (!v || v % 64 != 0 || r % 8 != 0 || r / 8 >= PH_SLAB_MAX_BLOCKS ||
        ph_slab_available((const ph_slab *)v, r / 8))
        return 0;
    return ph_tcache_push_top(bins, 0, off);
}

void ph_engine_gc_writeback(ph_engine *e, ph_pctx *c)
{
    for (uint64_t ch = 0; ch < ph_engine_backed_chunks(e); ch++) {
        ph_slab *s = e->chunks[ch];
        if (s)
            ph_slab_store_desc(e->sp, c, s);
    }
    ph_persist_fence(&e->sp->persist, c);
}

/* ---- marks ------------------------------------------------------------------------ */

int ph_gc_marks_new(ph_engine *e, unsigned flags, ph_gc_marks **out)
{
    ph_gc_marks *m = calloc(1, sizeof(*m));
    if (!m)
        return ph_err(PHEAP_ENOMEM, "out of memory for the marks of a trace");
    m->e = e;
    m->flags = flags;
    m->lo = e->sp->data_off;
    m->hi = ph_space_size(e->sp);
    m->nchunks = ph_engine_backed_chunks(e);
    m->npages = (m->hi - m->lo) / PH_PAGE_SIZE;
    /* Fresh anonymous pages: zero, and only those touched take memory. */
    m->slab_words = m->nchunks * PH_GC_WORDS + 1;
    m->large_words = m->npages / 64 + 1;
    m->slab_bytes = PH_ALIGN_UP(2 * m->slab_words * 8, PH_PAGE_SIZE);
    m->large_bytes = PH_ALIGN_UP(2 * m->large_words * 8, PH_PAGE_SIZE);
    m->slab = ph_os_alloc_pages(m->slab_bytes);
    m->large = ph_os_alloc_pages(m->large_bytes);
    if (!m->slab || !m->large) {
        unsigned long long bytes = m->slab_bytes + m->large_bytes;
        ph_gc_marks_free(m);
        return ph_err(PHEAP_ENOMEM, "out of memory for the marks of a trace (%llu bytes)", bytes);
    }
    *out = m;
    return 0;
}

void ph_gc_marks_free(ph_gc_marks *m)
{
    if (!m)
        return;
    if (m->slab)
        ph_os_free_pages(m->slab, m->slab_bytes);
    if (m->large)
        ph_os_free_pages(m->large, m->large_bytes);
    free(m);
}

int ph_gc_in_range(const ph_gc_marks *m, uint64_t v)
{
    return v - m->lo < m->hi - m->lo;
}

/* Sets bit `bit` of *word; 1 if this call set it. */
static int set_mark(uint64_t *word, uint64_t bit)
{
    if (ph_load_relaxed(word) & bit)
        return 0;
    return !(__atomic_fetch_or(word, bit, __ATOMIC_RELAXED) & bit);
}

/* A filtered visit sets both bits: a block first reached conservatively
 * is visited again by the first filter that reaches it (its filter may see
 * links the conservative scan cannot); one reached by a filter first is
 * not scanned conservatively. */
static int mark_at(uint64_t *marks, size_t words, size_t w, uint64_t bit, int filtered)
{
    int fresh = set_mark(&marks[w], bit);
    if (!filtered)
        return fresh;
    return set_mark(&marks[words + w], bit) || fresh;
}

int ph_gc_mark(ph_gc_marks *m, uint64_t v, int filtered, uint64_t *bytes)
{
    if (!ph_gc_in_range(m, v))
        return -1;
    uint64_t rel = v - m->lo, ch = rel / PH_CHUNK_SIZE;
    ph_slab *s = ph_load_relaxed(&m->e->chunks[ch]);
    if (s) { /* a block of the slab's class, or an old block of a morphed slab */
        ph_blockref r;
        ph_slab_resolve(s, v, &r);
        if (!r.exact || (!(m->flags & PH_GC_ALL_BLOCKS) && !r.old && ph_slab_bits(s, r.index) != 3))
            return -1;
        uint32_t i = r.old ? PH_GC_OLD_MARK + r.index : r.index;
        *bytes = r.size;
        return mark_at(m->slab, m->slab_words, ch * PH_GC_WORDS + i / 64, 1ull << (i % 64),
                       filtered);
    }
    if (!ph_extent_large_start(m->e->ext, v, bytes))
        return -1;
    uint64_t page = rel / PH_PAGE_SIZE;
    return mark_at(m->large, m->large_words, page / 64, 1ull << (page % 64), filtered);
}

static int marked_small(const ph_gc_marks *m, uint64_t ch, uint32_t i)
{
    return (int)((m->slab[ch * PH_GC_WORDS + i / 64] >> (i % 64)) & 1);
}

/* ---- sweep -------------------------------------------------------------------------- */

typedef struct large_list {
    const ph_gc_marks *m;
    ph_gc_sweep *out;
    uint64_t *off;      /* unmarked large blocks */
    size_t n, cap;
    int oom;
} large_list;

static void collect_large(void *arg, const ph_extnode *n)
{
    large_list *l = arg;
    if (n->kind != PH_EXT_LARGE)
        return;
    uint64_t bytes = n->npages * PH_PAGE_SIZE;
    if ((l->m->large[n->page / 64] >> (n->page % 64)) & 1) {
        l->out->marked_blocks++;
        l->out->marked_bytes += bytes;
        return;
    }
    l->out->freed_blocks++;
    l->out->freed_bytes += bytes;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        uint64_t *v = realloc(l->off, cap * sizeof(*v));
        if (!v) {
            l->oom = 1;
            return;
        }
        l->off = v;
        l->cap = cap;
    }
    l->off[l->n++] = l->m->lo + n->page * PH_PAGE_SIZE;
}

/* Recovery: the slab's bitmap becomes its marks (E bits of unmarked
 * blocks stay: a later free of one is a double free, not a wild one). */
static void rebuild_slab(ph_engine *e, ph_pctx *c, const ph_gc_marks *m, uint64_t ch, ph_slab *s,
                         ph_gc_sweep *out, int dry)
{
    uint32_t marked = 0;
    for (uint32_t i = 0; i < s->nblocks; i++) {
        uint32_t w, sh;
        ph_slab_bitpos(i, &w, &sh);
        int mk = marked_small(m, ch, i);
        uint64_t v = s->bits[w];
        marked += (uint32_t)mk;
        out->freed_blocks += !mk && ((v >> sh) & 1);
        if (!dry)
            ph_store(&s->bits[w], mk ? v | 3ull << sh : v & ~(1ull << sh));
    }
    out->marked_blocks += marked;
    out->marked_bytes += (uint64_t)marked * s->block_size;
    if (dry)
        return;
    ph_slab_find_avail(s);
    ph_slab_store_desc(e->sp, c, s);
}

/* Recovery: a chunk that is no slab has no allocated block in its
 * descriptor (a slab is released only once its bitmap is durably zero);
 * bits found there are damage, and the chunk is free in the extent log:
 * the bitmap is zeroed to agree (the sweep's last fence makes it durable;
 * a crash before leaves it for the next recovery to zero). */
static void clear_orphan_desc(ph_engine *e, ph_pctx *c, uint64_t ch)
{
    ph_slab_desc *d = ph_space_at(e->sp, e->sp->slab_region + ch * PH_SLAB_DESC_SIZE);
    if (!ph_slab_desc_any_allocated(d))
        return;
    for (unsigned w = 0; w < PH_SLAB_WORDS; w++)
        if (ph_load(&d->xbits[w]))
            ph_persist_write(&e->sp->persist, c, &d->xbits[w], 0);
    ph_persist_flush(&e->sp->persist, c, d->xbits, sizeof(d->xbits));
}

/* An allocated small block: kept if marked (mark `i` of chunk ch), else
 * freed (counted only when `dry`). */
static void sweep_block(ph_engine *e, ph_tcache *t, ph_pctx *c, const ph_gc_marks *m,
                        ph_gc_sweep *out, int dry, uint64_t ch, uint32_t i, uint64_t off,
                        uint32_t size)
{
    if (marked_small(m, ch, i)) {
        out->marked_blocks++;
        out->marked_bytes += size;
        return;
    }
    out->freed_blocks++;
    out->freed_bytes += size;
    if (!dry)
        (void)ph_engine_free(e, t, c, off);
}

int ph_engine_gc_sweep(ph_engine *e, ph_tcache *t, ph_pctx *c, ph_gc_marks *m, int dry,
                       ph_gc_sweep *out, ph_gc_progress progress, void *arg)
{
    memset(out, 0, sizeof(*out));
    large_list l = {m, out, NULL, 0, 0, 0};
    ph_extents_walk(e->ext, collect_large, &l);
    if (l.oom) {
        free(l.off);
        return ph_err(PHEAP_ENOMEM, "out of memory for the list of unreachable large blocks");
    }
    int recover = (m->flags & PH_GC_ALL_BLOCKS) != 0;
    for (uint64_t ch = 0; ch < m->nchunks; ch++) {
        if (progress && ch % 4096 == 0)
            progress(arg, ch, m->nchunks);
        ph_slab *s = e->chunks[ch];
        if (!s && recover && !dry)
            clear_orphan_desc(e, c, ch);
        if (!s)
            continue;
        if (recover) {
            uint64_t before = out->freed_blocks;
            rebuild_slab(e, c, m, ch, s, out, dry);
            out->freed_bytes += (out->freed_blocks - before) * s->block_size;
            continue;
        }
        for (uint32_t i = 0; i < s->nblocks; i++) {
            if (ph_slab_bits(s, i) != 3) /* free, or pinned by an old block */
                continue;
            sweep_block(e, t, c, m, out, dry, ch, i, s->off + (uint64_t)i * s->block_size,
                        s->block_size);
        }
        for (uint32_t j = 0; ph_load_relaxed(&s->xold_live) && j < s->old_nblocks; j++) {
            uint32_t w, sh;
            ph_morph_bitpos(j, &w, &sh);
            if ((ph_load(&s->bits[w]) >> sh) & 1)
                sweep_block(e, t, c, m, out, dry, ch, PH_GC_OLD_MARK + j,
                            s->off + (uint64_t)j * s->old_size, s->old_size);
        }
    }
    for (size_t k = 0; !dry && k < l.n; k++)
        (void)ph_extent_free(e->ext, c, l.off[k], PH_EXT_LARGE, NULL, 0, 0);
    free(l.off);
    if (recover && !dry) {
        ph_persist_fence(&e->sp->persist, c); /* the bitmaps written, for pheap_check */
        ph_engine_rebuild_partials(e);
        ph_engine_release_empty_slabs(e, c);
    }
    if (progress)
        progress(arg, m->nchunks, m->nchunks);
    return 0;
}
