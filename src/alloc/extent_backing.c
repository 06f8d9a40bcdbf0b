/*
 * extent_backing.c -- which pages of the data region the file backs: the
 * heap grows on demand (new pages become free extents), and free extents
 * that stay free go back to the file system in purges (hole punching)
 * rather than at each free: a block freed and allocated again soon -- the
 * common case -- keeps its pages and costs no system call.
 */
#include "alloc/extent_int.h"

#include <string.h>

#include "alloc/slab.h"
#include "pheap.h"
#include "util/error.h"

/* Touches the page maps for pages [from, to) that a growth adds, so that
 * allocations take no page fault on them (a tail-latency cost, not a
 * correctness one); an open leaves them to fault in as they are reached. */
void ph_extent_backing_prefault(ph_extents *x, uint64_t from, uint64_t to)
{
    memset(x->head + from, 0, (to - from) * sizeof(*x->head));
    memset(x->last + from, 0, (to - from) * sizeof(*x->last));
}

/* The descriptors of chunks the heap grew over hold no allocated block:
 * they were never a slab (the file is made with zeros there).  Bits found
 * there are damage of the file from before the heap reached them; they
 * are zeroed, durably, before a chunk of them can become anything. */
static void clear_new_descriptors(ph_extents *x, ph_pctx *c, uint64_t from, uint64_t to)
{
    ph_space *sp = x->sp;
    int wrote = 0;
    for (uint64_t ch = from / PAGES_PER_CHUNK; ch < to / PAGES_PER_CHUNK; ch++) {
        ph_slab_desc *d = ph_space_at(sp, sp->slab_region + ch * PH_SLAB_DESC_SIZE);
        if (!ph_slab_desc_any_allocated(d))
            continue;
        for (unsigned w = 0; w < PH_SLAB_WORDS; w++)
            if (ph_load(&d->xbits[w]))
                ph_persist_write(&sp->persist, c, &d->xbits[w], 0);
        ph_persist_flush(&sp->persist, c, d->xbits, sizeof(d->xbits));
        wrote = 1;
    }
    if (wrote)
        ph_persist_fence(&sp->persist, c);
}

int ph_extent_backing_adopt(ph_extents *x)
{
    uint64_t pages = (ph_space_size(x->sp) - x->sp->data_off) / PH_PAGE_SIZE;
    if (pages <= x->pages)
        return 0;
    ph_extent_backing_prefault(x, x->pages, pages);
    ph_extnode *n = ph_extent_index_node(x, x->pages, pages - x->pages, PH_EXT_FREE, 0);
    if (!n)
        return ph_err(PHEAP_ENOMEM, "extent index: out of memory");
    ph_extent_backing_mark_punched(x, x->pages, pages - x->pages); /* the file grew with holes */
    x->pages = pages;
    ph_extent_index_set(x, n);
    ph_extent_index_make_free(x, n, 0);
    return 0;
}

/* Makes [x->pages, new pages) free space after the heap grew. */
static int add_backed(ph_extents *x, ph_pctx *c)
{
    uint64_t pages = (ph_space_size(x->sp) - x->sp->data_off) / PH_PAGE_SIZE;
    if (pages > x->pages)
        clear_new_descriptors(x, c, x->pages, pages);
    return ph_extent_backing_adopt(x);
}

/* Grows the heap (lock held) until a free extent of n pages (chunk-aligned
 * when `aligned`) fits: by what is missing beyond the free tail, at least. */
int ph_extent_backing_grow(ph_extents *x, ph_pctx *c, uint64_t n, int aligned)
{
    ph_extnode *tail = x->pages ? x->last[x->pages - 1] : NULL;
    uint64_t have = tail && tail->kind == PH_EXT_FREE ? tail->npages : 0;
    uint64_t need = n + (aligned ? PAGES_PER_CHUNK : 0) - PH_MIN(have, n);
    int rc = ph_space_grow(x->sp, c, ph_space_size(x->sp) + need * PH_PAGE_SIZE);
    return rc ? rc : add_backed(x, c);
}

/* The bits of pages [p, end) that lie in p's word of a one-bit-per-page map. */
static uint64_t word_mask(uint64_t p, uint64_t end)
{
    uint64_t k = PH_MIN(end - p, 64 - p % 64);
    return (k == 64 ? ~0ull : ((1ull << k) - 1)) << (p % 64);
}

#define NEXT_WORD(p) (((p) / 64 + 1) * 64)

static void bits_set(uint64_t *map, uint64_t page, uint64_t n, int on)
{
    for (uint64_t p = page; p < page + n; p = NEXT_WORD(p)) {
        uint64_t mask = word_mask(p, page + n);
        map[p / 64] = on ? map[p / 64] | mask : map[p / 64] & ~mask;
    }
}

void ph_extent_backing_mark_punched(ph_extents *x, uint64_t page, uint64_t n)
{
    bits_set(x->punched, page, n, 1);
}

int ph_extent_backing_refill(ph_extents *x, uint64_t page, uint64_t n)
{
    uint64_t any = 0;
    for (uint64_t p = page; p < page + n && !any; p = NEXT_WORD(p))
        any = x->punched[p / 64] & word_mask(p, page + n);
    /* A shared heap's: another process may have punched the pages, which
     * this index's map does not know: reserved again every time. */
    if (ph_likely(!any) && !x->xplock)
        return 0;
    int rc = ph_space_refill(x->sp, off_of(x, page), n * PH_PAGE_SIZE);
    if (rc)
        return rc;
    bits_set(x->punched, page, n, 0);
    return 0;
}

/* Punches pages [page, page + n) of a free extent, but for the chunks the
 * screen refuses (extent.h): those keep their bytes, which may be a lost
 * slab's blocks. */
static void punch_screened(ph_extents *x, uint64_t page, uint64_t n)
{
    uint64_t at = page, end = page + n, bad;
    while (at < end) {
        uint64_t stop = end, next = end;
        if (x->screen && x->screen(x->screen_arg, off_of(x, at), (end - at) * PH_PAGE_SIZE, &bad)) {
            uint64_t bad_page = (bad - x->sp->data_off) / PH_PAGE_SIZE;
            stop = PH_MAX(at, bad_page);
            next = PH_MIN(end, bad_page + PAGES_PER_CHUNK);
        }
        if (stop > at) {
            ph_space_punch(x->sp, off_of(x, at), (stop - at) * PH_PAGE_SIZE);
            ph_extent_backing_mark_punched(x, at, stop - at);
        }
        at = next;
    }
}

/* Punches the dirty free extents of PH_PUNCH_MIN or more (lock held: no
 * one can allocate them meanwhile).  Rare by design; see extent.h. */
void ph_extent_backing_purge(ph_extents *x)
{
    for (unsigned b = ph_extent_index_bin(PH_PUNCH_MIN / PH_PAGE_SIZE); b < PH_EXT_BINS; b++) {
        for (ph_extnode *f = x->bins[b]; f; f = f->next) {
            if (f->dirty && f->npages * PH_PAGE_SIZE >= PH_PUNCH_MIN) {
                punch_screened(x, f->page, f->npages);
                f->dirty = 0;
            }
        }
    }
    x->dirty_bytes = 0;
    x->dirty_since = 0;
}

void ph_extent_backing_maybe_purge(ph_extents *x)
{
    if (ph_likely(!x->dirty_since))
        return;
    uint64_t now = ph_space_now(x->sp);
    uint64_t budget = PH_MAX((uint64_t)PH_PURGE_BUDGET_MIN, ph_space_size(x->sp) / 16);
    if (x->dirty_bytes >= budget || now - x->dirty_since >= PH_PURGE_DELAY_NS)
        ph_extent_backing_purge(x);
}
