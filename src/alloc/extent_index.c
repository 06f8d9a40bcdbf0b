/*
 * extent_index.c -- the DRAM index of the extents: nodes tiling the backed
 * data region (from pools that grow by doubling), size bins of the free
 * ones, and the page -> node maps that find neighbours to coalesce with.
 * Volatile: rebuilt at open from the extent log (extent_log.c).
 */
#include "alloc/extent_int.h"

#include <stdlib.h>

#include "pheap.h"
#include "util/error.h"

unsigned ph_extent_index_bin(uint64_t n)
{
    if (n < 64)
        return (unsigned)n - 1;
    unsigned b = 63 + (unsigned)(63 - __builtin_clzll(n)) - 6;
    return b < PH_EXT_BINS ? b : PH_EXT_BINS - 1;
}

static void bin_insert(ph_extents *x, ph_extnode *n)
{
    ph_extnode **b = &x->bins[ph_extent_index_bin(n->npages)];
    n->prev = NULL;
    n->next = *b;
    if (*b)
        (*b)->prev = n;
    *b = n;
    x->free_pages += n->npages;
}

static void bin_remove(ph_extents *x, ph_extnode *n)
{
    if (n->prev)
        n->prev->next = n->next;
    else
        x->bins[ph_extent_index_bin(n->npages)] = n->next;
    if (n->next)
        n->next->prev = n->prev;
    n->next = n->prev = NULL;
    x->free_pages -= n->npages;
}

void ph_extent_index_set(ph_extents *x, ph_extnode *n)
{
    x->head[n->page] = n;
    x->last[n->page + n->npages - 1] = n;
}

static void index_clear(ph_extents *x, ph_extnode *n)
{
    x->head[n->page] = NULL;
    x->last[n->page + n->npages - 1] = NULL;
}

/* Nodes come from pools that double in size (1024 nodes, then 2048, ...,
 * at most 65536), zeroed -- so faulted in -- when made: the cost of
 * growing the index is paid a logarithmic number of times, never as a
 * page fault in an ordinary allocation. */
#define PH_NODE_POOL_MIN 1024u
#define PH_NODE_POOL_MAX 65536u

typedef struct node_pool {
    struct node_pool *next;
    uint64_t n;
    ph_extnode nodes[];
} node_pool;

ph_extnode *ph_extent_index_node(ph_extents *x, uint64_t page, uint64_t n, uint32_t kind, unsigned cls)
{
    if (!x->spare) {
        uint64_t cap = x->pools ? PH_MIN(2 * x->pools->n, (uint64_t)PH_NODE_POOL_MAX) : PH_NODE_POOL_MIN;
        node_pool *p = calloc(1, sizeof(*p) + cap * sizeof(ph_extnode));
        if (!p)
            return NULL;
        p->n = cap;
        p->next = x->pools;
        x->pools = p;
        for (uint64_t i = 0; i < cap; i++) {
            p->nodes[i].next = x->spare;
            x->spare = &p->nodes[i];
        }
    }
    ph_extnode *e = x->spare;
    x->spare = e->next;
    *e = (ph_extnode){page, n, kind, cls, NULL, NULL};
    return e;
}

static void node_free(ph_extents *x, ph_extnode *e)
{
    e->next = x->spare;
    x->spare = e;
}

/* Turns n into free space, merging it with free neighbours; `dirty`: its
 * pages may be backed (see purge). */
void ph_extent_index_make_free(ph_extents *x, ph_extnode *n, int dirty)
{
    n->kind = PH_EXT_FREE;
    n->cls = 0;
    n->dirty = (uint32_t)dirty;
    n->aside = 0;
    if (n->page > 0) {
        ph_extnode *l = x->last[n->page - 1];
        if (l && l->kind == PH_EXT_FREE) {
            bin_remove(x, l);
            index_clear(x, l);
            index_clear(x, n);
            n->npages += l->npages;
            n->page = l->page;
            n->dirty |= l->dirty;
            ph_extent_index_set(x, n);
            node_free(x, l);
        }
    }
    uint64_t end = n->page + n->npages;
    if (end < x->pages) {
        ph_extnode *r = x->head[end];
        if (r && r->kind == PH_EXT_FREE) {
            bin_remove(x, r);
            index_clear(x, r);
            index_clear(x, n);
            n->npages += r->npages;
            n->dirty |= r->dirty;
            ph_extent_index_set(x, n);
            node_free(x, r);
        }
    }
    bin_insert(x, n);
}

/* Carves [page, page + n) out of free node f; returns the carved node. */
ph_extnode *ph_extent_index_carve(ph_extents *x, ph_extnode *f, uint64_t page, uint64_t n, uint32_t kind,
                         unsigned cls)
{
    bin_remove(x, f);
    index_clear(x, f);
    uint64_t fend = f->page + f->npages;
    if (page > f->page) {
        ph_extnode *l = ph_extent_index_node(x, f->page, page - f->page, PH_EXT_FREE, 0);
        if (l)
            l->dirty = f->dirty;
        if (!l) {
            ph_extent_index_set(x, f);
            bin_insert(x, f);
            return NULL;
        }
        ph_extent_index_set(x, l);
        bin_insert(x, l);
    }
    if (page + n < fend) {
        ph_extnode *r = ph_extent_index_node(x, page + n, fend - page - n, PH_EXT_FREE, 0);
        if (r)
            r->dirty = f->dirty;
        if (!r) { /* give the left part back to f */
            if (page > f->page) {
                ph_extnode *l = x->head[f->page];
                bin_remove(x, l);
                index_clear(x, l);
                node_free(x, l);
            }
            ph_extent_index_set(x, f);
            bin_insert(x, f);
            return NULL;
        }
        ph_extent_index_set(x, r);
        bin_insert(x, r);
    }
    *f = (ph_extnode){page, n, kind, cls, NULL, NULL};
    ph_extent_index_set(x, f);
    return f;
}

ph_extnode *ph_extent_index_holding(const ph_extents *x, uint64_t page)
{
    uint64_t p = page;
    while (p > 0 && !x->head[p])
        p--;
    ph_extnode *n = x->head[p];
    return n && n->page + n->npages > page ? n : NULL;
}

/* Best fit for n pages (chunk-aligned when `aligned`); *at gets the page. */
ph_extnode *ph_extent_index_find_fit(ph_extents *x, uint64_t n, int aligned, uint64_t *at)
{
    for (unsigned b = ph_extent_index_bin(n); b < PH_EXT_BINS; b++) {
        ph_extnode *best = NULL;
        uint64_t best_at = 0;
        for (ph_extnode *f = x->bins[b]; f; f = f->next) {
            uint64_t start = aligned ? PH_ALIGN_UP(f->page, PAGES_PER_CHUNK) : f->page;
            if (start + n > f->page + f->npages || (best && f->npages >= best->npages))
                continue;
            best = f;
            best_at = start;
            if (b < 63 && !aligned)
                break; /* exact bins hold one size */
        }
        if (best) {
            *at = best_at;
            return best;
        }
    }
    return NULL;
}

int ph_extent_index_build(ph_extents *x, const ph_extent_rec *live, uint64_t n)
{
    uint64_t p = 0;
    /* The free pages of a heap's first read-write open are as creation
     * reserved them, if nothing was ever allocated: the extent log, never
     * written, is the evidence (the open count alone is guarded by no
     * check), and only a freed extent is ever punched. */
    int as_created = x->sp->fresh && n == 0 && x->tail == 0 &&
                     ph_load(&x->hdr->xlast_epoch) == 0;
    for (uint64_t i = 0; i <= n; i++) {
        uint64_t next = i < n ? live[i].page : x->pages;
        if (next > p) {
            ph_extnode *f = ph_extent_index_node(x, p, next - p, PH_EXT_FREE, 0);
            if (!f)
                return ph_err(PHEAP_ENOMEM, "extent index: out of memory");
            f->dirty = 1; /* not known: a crash may have come before a purge */
            if (!as_created) /* ... or after one (then a refill reserves them again) */
                ph_extent_backing_mark_punched(x, p, next - p);
            ph_extent_index_set(x, f);
            bin_insert(x, f);
        }
        if (i == n)
            break;
        ph_extnode *a = ph_extent_index_node(x, live[i].page, live[i].n, live[i].kind, live[i].cls);
        if (!a)
            return ph_err(PHEAP_ENOMEM, "extent index: out of memory");
        ph_extent_index_set(x, a);
        p = live[i].page + live[i].n;
    }
    return 0;
}

void ph_extent_index_fini(ph_extents *x)
{
    while (x->pools) {
        node_pool *p = x->pools;
        x->pools = p->next;
        free(p);
    }
}
