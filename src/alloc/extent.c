/*
 * extent.c -- page-granular extents: the DRAM index (nodes tiling the
 * backed data region, size bins of free nodes, page -> node maps for
 * coalescing) and the durable extent log behind it.
 *
 * Crash protocol.  Every durable change is one log entry, written with
 * non-temporal stores under the index lock and fenced by its thread after
 * the lock is released, so that large operations of several threads fence
 * in parallel.  Entries may therefore become durable out of log order; replay
 * reads every slot of the active half and skips the invalid ones.  That is
 * sound because an entry that depends on another is only appended once the
 * other is durable: a block is freed only after its allocation returned,
 * and freed pages go back to the index only after the free's fence.  An
 * allocation commits with its entry; a free commits with its entry and
 * only then returns its pages to the index (and, when large, to the file
 * system).  Replay rebuilds the set of live extents; everything else
 * backed is free.  A torn or stale entry fails its epoch or check: it was
 * never fenced, so the operation it describes had not returned.
 *
 * Compaction, when the active half is full (three fences):
 *   C1  xlast_epoch := e' (the highest epoch ever used, plus one): no
 *       compaction cut short by a crash can lend its epoch to a later one;
 *   C2  every line of the other half: the live extents with epoch e', zeros
 *       in every other slot (so each slot an append fills was durably
 *       zero, and a torn append leaves a zero word that never decodes);
 *   C3  xactive := e' << 1 | other: the commit.
 * Before C3 is durable the old half rules, whatever C2 left.  Entries in
 * flight (written, not yet fenced) are already reflected in the index that
 * compaction writes out; if a crash loses them, the next compaction uses
 * a newer epoch and rewrites the whole half, so nothing of this one
 * survives there.
 */
#include "alloc/extent.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/sizeclass.h"
#include "os/os.h"
#include "pheap.h"
#include "util/error.h"

#define PAGES_PER_CHUNK (PH_CHUNK_SIZE / PH_PAGE_SIZE)

/* ---- log entries ---------------------------------------------------------- */

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

typedef struct entry {
    uint64_t page, n;
    uint32_t kind, cls;
} entry;

/* Decodes a log entry; 0 when it is not a valid entry of `epoch`. */
static int decode(const ph_extlog_entry *e, uint64_t epoch, entry *out)
{
    uint64_t w0 = ph_load_relaxed(&e->w0), w1 = ph_load_relaxed(&e->w1);
    uint64_t e32 = (w0 >> 48) << 16 | ((w1 >> 32) & 0xffff);
    if ((w1 >> 48) != check16(w0, w1 & 0xffffffffffffull) || e32 != (epoch & 0xffffffffu))
        return 0;
    *out = (entry){w0 & 0xfffffffffull, w1 & 0xffffffffull, (uint32_t)(w0 >> 36) & 0xf,
                   (uint32_t)(w0 >> 40) & 0xff};
    return out->kind >= PH_EXT_FREE && out->kind <= PH_EXT_SLAB && out->n > 0;
}

/* ---- index ------------------------------------------------------------------ */

static uint64_t page_of(const ph_extents *x, uint64_t off)
{
    return (off - x->sp->data_off) / PH_PAGE_SIZE;
}

static uint64_t off_of(const ph_extents *x, uint64_t page)
{
    return x->sp->data_off + page * PH_PAGE_SIZE;
}

static unsigned bin_of(uint64_t n)
{
    if (n < 64)
        return (unsigned)n - 1;
    unsigned b = 63 + (unsigned)(63 - __builtin_clzll(n)) - 6;
    return b < PH_EXT_BINS ? b : PH_EXT_BINS - 1;
}

static void bin_insert(ph_extents *x, ph_extnode *n)
{
    ph_extnode **b = &x->bins[bin_of(n->npages)];
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
        x->bins[bin_of(n->npages)] = n->next;
    if (n->next)
        n->next->prev = n->prev;
    n->next = n->prev = NULL;
    x->free_pages -= n->npages;
}

static void index_set(ph_extents *x, ph_extnode *n)
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

static ph_extnode *node_new(ph_extents *x, uint64_t page, uint64_t n, uint32_t kind, unsigned cls)
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
static void make_free(ph_extents *x, ph_extnode *n, int dirty)
{
    n->kind = PH_EXT_FREE;
    n->dirty = (uint32_t)dirty;
    if (n->page > 0) {
        ph_extnode *l = x->last[n->page - 1];
        if (l && l->kind == PH_EXT_FREE) {
            bin_remove(x, l);
            index_clear(x, l);
            index_clear(x, n);
            n->npages += l->npages;
            n->page = l->page;
            n->dirty |= l->dirty;
            index_set(x, n);
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
            index_set(x, n);
            node_free(x, r);
        }
    }
    bin_insert(x, n);
}

/* Carves [page, page + n) out of free node f; returns the carved node. */
static ph_extnode *carve(ph_extents *x, ph_extnode *f, uint64_t page, uint64_t n, uint32_t kind,
                         unsigned cls)
{
    bin_remove(x, f);
    index_clear(x, f);
    uint64_t fend = f->page + f->npages;
    if (page > f->page) {
        ph_extnode *l = node_new(x, f->page, page - f->page, PH_EXT_FREE, 0);
        if (l)
            l->dirty = f->dirty;
        if (!l) {
            index_set(x, f);
            bin_insert(x, f);
            return NULL;
        }
        index_set(x, l);
        bin_insert(x, l);
    }
    if (page + n < fend) {
        ph_extnode *r = node_new(x, page + n, fend - page - n, PH_EXT_FREE, 0);
        if (r)
            r->dirty = f->dirty;
        if (!r) { /* give the left part back to f */
            if (page > f->page) {
                ph_extnode *l = x->head[f->page];
                bin_remove(x, l);
                index_clear(x, l);
                node_free(x, l);
            }
            index_set(x, f);
            bin_insert(x, f);
            return NULL;
        }
        index_set(x, r);
        bin_insert(x, r);
    }
    *f = (ph_extnode){page, n, kind, cls, NULL, NULL};
    index_set(x, f);
    return f;
}

/* Best fit for n pages (chunk-aligned when `aligned`); *at gets the page. */
static ph_extnode *find_fit(ph_extents *x, uint64_t n, int aligned, uint64_t *at)
{
    for (unsigned b = bin_of(n); b < PH_EXT_BINS; b++) {
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

/* Touches the page maps for pages [from, to) so that allocations never take
 * a page fault on them (a tail-latency cost, not a correctness one). */
static void prefault_maps(ph_extents *x, uint64_t from, uint64_t to)
{
    memset(x->head + from, 0, (to - from) * sizeof(*x->head));
    memset(x->last + from, 0, (to - from) * sizeof(*x->last));
}

/* Makes [x->pages, new pages) free space after the heap grew. */
static int add_backed(ph_extents *x)
{
    uint64_t pages = (ph_space_size(x->sp) - x->sp->data_off) / PH_PAGE_SIZE;
    if (pages <= x->pages)
        return 0;
    prefault_maps(x, x->pages, pages);
    ph_extnode *n = node_new(x, x->pages, pages - x->pages, PH_EXT_FREE, 0);
    if (!n)
        return ph_err(PHEAP_ENOMEM, "extent index: out of memory");
    x->pages = pages;
    index_set(x, n);
    make_free(x, n, 0); /* the file grew with holes */
    return 0;
}

static int reserve_locked(ph_extents *x, ph_pctx *c, uint64_t bytes, uint32_t kind, unsigned cls,
                          ph_extnode **out)
{
    uint64_t n = PH_ALIGN_UP(bytes, PH_PAGE_SIZE) / PH_PAGE_SIZE;
    int aligned = kind == PH_EXT_SLAB;
    if (n == 0 || n > x->pages_max)
        return ph_err(PHEAP_ENOMEM, "cannot allocate %llu bytes: the heap can hold at most %llu",
                      (unsigned long long)bytes, (unsigned long long)(x->pages_max * PH_PAGE_SIZE));
    uint64_t at;
    ph_extnode *f = find_fit(x, n, aligned, &at);
    while (!f) {
        /* Grow by what is missing beyond the free tail, at least. */
        ph_extnode *tail = x->pages ? x->last[x->pages - 1] : NULL;
        uint64_t have = tail && tail->kind == PH_EXT_FREE ? tail->npages : 0;
        uint64_t need = n + (aligned ? PAGES_PER_CHUNK : 0) - PH_MIN(have, n);
        int rc = ph_space_grow(x->sp, c, ph_space_size(x->sp) + need * PH_PAGE_SIZE);
        if (rc)
            return rc;
        if ((rc = add_backed(x)) != 0)
            return rc;
        f = find_fit(x, n, aligned, &at);
    }
    *out = carve(x, f, at, n, kind, cls);
    return *out ? 0 : ph_err(PHEAP_ENOMEM, "extent index: out of memory");
}

static void compact(ph_extents *x, ph_pctx *c);

/* Punches the dirty free extents of PH_PUNCH_MIN or more (lock held: no
 * one can allocate them meanwhile).  Rare by design; see extent.h. */
static void purge(ph_extents *x)
{
    for (unsigned b = bin_of(PH_PUNCH_MIN / PH_PAGE_SIZE); b < PH_EXT_BINS; b++) {
        for (ph_extnode *f = x->bins[b]; f; f = f->next) {
            if (f->dirty && f->npages * PH_PAGE_SIZE >= PH_PUNCH_MIN) {
                ph_space_punch(x->sp, off_of(x, f->page), f->npages * PH_PAGE_SIZE);
                f->dirty = 0;
            }
        }
    }
    x->dirty_bytes = 0;
    x->dirty_since = 0;
}

static void maybe_purge(ph_extents *x)
{
    if (ph_likely(!x->dirty_since))
        return;
    uint64_t now = ph_space_now(x->sp);
    uint64_t budget = PH_MAX((uint64_t)PH_PURGE_BUDGET_MIN, ph_space_size(x->sp) / 16);
    if (x->dirty_bytes >= budget || now - x->dirty_since >= PH_PURGE_DELAY_NS)
        purge(x);
}

/* Freed extents whose free is durable wait on x->xreleased (a stack linked
 * through `next`, pushed without the lock) until the next holder of the
 * lock returns them to free space: a free takes the lock once, not twice. */
static void drain_released(ph_extents *x)
{
    ph_extnode *n = __atomic_exchange_n(&x->xreleased, NULL, __ATOMIC_ACQUIRE);
    if (n && !x->dirty_since)
        x->dirty_since = ph_space_now(x->sp);
    while (n) {
        ph_extnode *next = n->next;
        n->next = NULL;
        x->dirty_bytes += n->npages * PH_PAGE_SIZE;
        make_free(x, n, 1);
        n = next;
    }
}

static void lock_index(ph_extents *x)
{
    ph_spin_lock(&x->xlock);
    drain_released(x);
    maybe_purge(x);
}

/* Entry j (in log order) of a half.  Entries are interleaved over the
 * half's lines -- entry j in line j mod L, L lines of 4 entries -- so that
 * consecutive appends flush different lines (no reflush). */
static ph_extlog_entry *slot(const ph_extents *x, unsigned half, uint64_t j)
{
    uint64_t lines = x->half_entries / 4;
    return &x->half[half][(j % lines) * 4 + j / lines];
}

/* Writes the next entry of the log (lock held); the caller fences it after
 * dropping the lock, so that the lock is not held for the fence. */
static void append(ph_extents *x, ph_pctx *c, const ph_extnode *n, uint32_t kind)
{
    if (x->tail == x->half_entries)
        compact(x, c);
    ph_extlog_entry *e = slot(x, x->active, x->tail++);
    /* planted: entries of the wrong epoch */
    ph_extlog_entry v = encode(n->page, n->npages, kind, n->cls, x->epoch + ph_plant("extent-wrong-epoch"));
    /* Non-temporal: the slot is this call's alone, so no lock is needed
     * until the fence; replay and check read the log from memory. */
    ph_persist_store_nt_words(&x->sp->persist, c, &e->w0, (const uint64_t[2]){v.w0, v.w1}, 2);
}

/* After the lock: makes the entry stored by append durable with the
 * caller's other flushed lines. */
static void persist_entry(ph_extents *x, ph_pctx *c)
{
    ph_persist_fence(&x->sp->persist, c);
}

static void compact(ph_extents *x, ph_pctx *c)
{
    unsigned other = !x->active;
    ph_persist *p = &x->sp->persist;
    /* The epoch is new for the life of the heap: recorded before any entry
     * of it is written, so a compaction that a crash cut short never lends
     * its epoch to the next one. */
    uint64_t epoch = PH_MAX(x->epoch, ph_load(&x->hdr->xlast_epoch)) + 1;
    if (ph_plant("compact-reuse-epoch")) /* planted: the old protocol */
        epoch = x->epoch + 1;
    else
        ph_persist_store64(p, c, &x->hdr->xlast_epoch, epoch);
    /* Every line of the half is written: the live extents in log order
     * (entry j in slot (j mod L) * 4 + j / L), zeros in every other slot.
     * A slot that an append later fills was durably zero, so a torn append
     * leaves one zero word, which never decodes (kind 0 or 0 pages). */
    uint64_t lines = x->half_entries / 4, used = 0;
    ph_extlog_entry *v = x->scratch;
    memset(v, 0, x->half_entries * sizeof(*v));
    for (uint64_t pg = 0; pg < x->pages; pg += x->head[pg]->npages) {
        const ph_extnode *n = x->head[pg];
        if (n->kind == PH_EXT_LARGE || n->kind == PH_EXT_SLAB) {
            v[(used % lines) * 4 + used / lines] = encode(n->page, n->npages, n->kind, n->cls, epoch);
            used++;
        }
    }
    for (uint64_t l = 0; l < lines; l++) {
        if (ph_plant("compact-reuse-epoch") && l >= used)
            break; /* planted: only the lines the entries need */
        ph_persist_store_nt_words(p, c, &x->half[other][l * 4].w0, &v[l * 4].w0, 8);
    }
    ph_persist_fence(p, c);
    ph_persist_store64(p, c, &x->hdr->xactive, epoch << 1 | other);
    x->active = other;
    x->epoch = epoch;
    x->tail = used;
}

/* ---- replay ----------------------------------------------------------------- */

typedef struct live_set {
    entry *v;       /* open addressing by page; n == 0 marks empty */
    uint64_t cap;   /* power of two */
    uint64_t count;
} live_set;

static entry *live_find(live_set *s, uint64_t page, int insert)
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
    const entry *x = a, *y = b;
    return x->page < y->page ? -1 : x->page > y->page;
}

/* Replays the active half into a sorted array of live extents; *used gets
 * the number of valid entries (the append position). */
static int replay(ph_extents *x, entry **out, uint64_t *nout, uint64_t *used)
{
    live_set s = {NULL, 64, 0};
    while (s.cap < 2 * x->half_entries)
        s.cap *= 2;
    s.v = calloc(s.cap, sizeof(*s.v));
    if (!s.v)
        return ph_err(PHEAP_ENOMEM, "extent log replay: out of memory");
    int rc = 0;
    entry e;
    uint64_t i, tail = 0;
    for (i = 0; i < x->half_entries; i++) {
        if (!decode(slot(x, x->active, i), x->epoch, &e))
            continue; /* never written, or in flight at the crash */
        tail = i + 1;
        const char *why = NULL;
        entry *slot = live_find(&s, e.page, e.kind != PH_EXT_FREE);
        if (e.page + e.n > x->pages)
            why = "extent beyond the heap's size";
        else if (e.kind == PH_EXT_SLAB &&
                 (e.n != PAGES_PER_CHUNK || e.page % PAGES_PER_CHUNK || e.cls >= PH_CLASSES))
            why = "malformed slab extent";
        else if (e.kind != PH_EXT_FREE && slot->n)
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
                entry moved = s.v[k];
                s.v[k].n = 0;
                *live_find(&s, moved.page, 1) = moved;
            }
            s.count--;
        } else {
            *slot = e;
            s.count++;
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

static int build_index(ph_extents *x, const entry *live, uint64_t n)
{
    uint64_t p = 0;
    for (uint64_t i = 0; i <= n; i++) {
        uint64_t next = i < n ? live[i].page : x->pages;
        if (next > p) {
            ph_extnode *f = node_new(x, p, next - p, PH_EXT_FREE, 0);
            if (!f)
                return ph_err(PHEAP_ENOMEM, "extent index: out of memory");
            f->dirty = 1; /* not known: a crash may have come before a purge */
            index_set(x, f);
            bin_insert(x, f);
        }
        if (i == n)
            break;
        ph_extnode *a = node_new(x, live[i].page, live[i].n, live[i].kind, live[i].cls);
        if (!a)
            return ph_err(PHEAP_ENOMEM, "extent index: out of memory");
        index_set(x, a);
        p = live[i].page + live[i].n;
    }
    return 0;
}

static void *alloc_map(uint64_t bytes)
{
    return ph_os_alloc_pages(PH_ALIGN_UP(bytes, PH_PAGE_SIZE));
}

static int extents_init(ph_space *sp, ph_extents *x)
{
    memset(x, 0, sizeof(*x));
    x->sp = sp;
    x->hdr = ph_space_at(sp, sp->extlog_region);
    x->half_entries = (sp->extlog_size - PH_PAGE_SIZE) / 2 / sizeof(ph_extlog_entry);
    x->half[0] = ph_space_at(sp, sp->extlog_region + PH_PAGE_SIZE);
    x->half[1] = x->half[0] + x->half_entries;
    uint64_t v = ph_load(&x->hdr->xactive);
    x->epoch = v ? v >> 1 : 1;
    x->active = (unsigned)(v & 1);
    x->pages_max = (sp->max_size - sp->data_off) / PH_PAGE_SIZE;
    x->pages = (ph_space_size(sp) - sp->data_off) / PH_PAGE_SIZE;
    x->head = alloc_map(x->pages_max * sizeof(*x->head));
    x->last = alloc_map(x->pages_max * sizeof(*x->last));
    x->freed = alloc_map((x->pages_max + 63) / 64 * 8);
    x->scratch = alloc_map(x->half_entries * sizeof(*x->scratch));
    if (!x->head || !x->last || !x->freed || !x->scratch)
        return ph_err(PHEAP_ENOMEM, "extent index: cannot map %llu pages",
                      (unsigned long long)x->pages_max);
    prefault_maps(x, 0, x->pages);
    return 0;
}

static void extents_fini(ph_extents *x)
{
    while (x->pools) {
        node_pool *p = x->pools;
        x->pools = p->next;
        free(p);
    }
    ph_os_free_pages(x->head, PH_ALIGN_UP(x->pages_max * sizeof(*x->head), PH_PAGE_SIZE));
    ph_os_free_pages(x->last, PH_ALIGN_UP(x->pages_max * sizeof(*x->last), PH_PAGE_SIZE));
    ph_os_free_pages(x->freed, PH_ALIGN_UP((x->pages_max + 63) / 64 * 8, PH_PAGE_SIZE));
    ph_os_free_pages(x->scratch, PH_ALIGN_UP(x->half_entries * sizeof(*x->scratch), PH_PAGE_SIZE));
}

int ph_extents_open(ph_space *sp, ph_extents **out, ph_extent_slab_fn on_slab, void *arg)
{
    ph_extents *x = malloc(sizeof(*x));
    if (!x)
        return ph_err(PHEAP_ENOMEM, "extent index: out of memory");
    int rc = extents_init(sp, x);
    entry *live = NULL;
    uint64_t n = 0;
    if (!rc)
        rc = replay(x, &live, &n, &x->tail);
    if (!rc)
        rc = build_index(x, live, n);
    for (uint64_t i = 0; !rc && on_slab && i < n; i++)
        if (live[i].kind == PH_EXT_SLAB)
            on_slab(arg, sp->data_off + live[i].page * PH_PAGE_SIZE, live[i].cls);
    free(live);
    if (rc) {
        extents_fini(x);
        free(x);
        return rc;
    }
    *out = x;
    return 0;
}

void ph_extents_close(ph_extents *x)
{
    if (!x)
        return;
    drain_released(x);
    if (x->dirty_since) /* something was freed in this open: purge it now */
        purge(x);
    extents_fini(x);
    free(x);
}

/* ---- operations ------------------------------------------------------------- */

/* Appends the commit entry of reserved node n and stores *dest (flushed,
 * not fenced: the caller fences after dropping the lock). */
static void stage_commit(ph_extents *x, ph_pctx *c, ph_extnode *n, uint32_t kind, unsigned cls,
                         uint64_t *dest, uint64_t dest_val)
{
    /* The node stays RESERVED until its entry is in the log: a compaction
     * that append() may run first must not write it as live already. */
    n->cls = cls;
    x->freed[n->page / 64] &= ~(1ull << (n->page % 64));
    append(x, c, n, kind);
    n->kind = kind;
    if (dest) {
        ph_persist_write(&x->sp->persist, c, dest, dest_val);
        ph_persist_flush(&x->sp->persist, c, dest, sizeof(*dest));
    }
}

int ph_extent_alloc(ph_extents *x, ph_pctx *c, uint64_t bytes, uint32_t kind, unsigned cls,
                    uint64_t *dest, uint64_t *off)
{
    lock_index(x);
    ph_extnode *n;
    int rc = reserve_locked(x, c, bytes, PH_EXT_RESERVED, 0, &n);
    if (!rc) {
        *off = off_of(x, n->page);
        stage_commit(x, c, n, kind, cls, dest, *off);
    }
    ph_spin_unlock(&x->xlock);
    if (!rc)
        persist_entry(x, c);
    return rc;
}

int ph_extent_reserve(ph_extents *x, ph_pctx *c, uint64_t bytes, uint32_t kind, uint64_t *off)
{
    lock_index(x);
    ph_extnode *n;
    int rc = reserve_locked(x, c, bytes, kind == PH_EXT_SLAB ? PH_EXT_SLAB : PH_EXT_LARGE, 0, &n);
    if (!rc) {
        n->kind = PH_EXT_RESERVED;
        *off = off_of(x, n->page);
    }
    ph_spin_unlock(&x->xlock);
    return rc;
}

void ph_extent_commit(ph_extents *x, ph_pctx *c, uint64_t off, uint32_t kind, unsigned cls,
                      uint64_t *dest, uint64_t dest_val)
{
    lock_index(x);
    stage_commit(x, c, x->head[page_of(x, off)], kind, cls, dest, dest_val);
    ph_spin_unlock(&x->xlock);
    persist_entry(x, c);
}

void ph_extent_commit_slabs(ph_extents *x, ph_pctx *c, const uint64_t *offs, unsigned n,
                            unsigned cls)
{
    n = PH_MIN(n, PH_EXT_COMMIT_MAX);
    lock_index(x);
    for (unsigned i = 0; i < n; i++)
        stage_commit(x, c, x->head[page_of(x, offs[i])], PH_EXT_SLAB, cls, NULL, 0);
    ph_spin_unlock(&x->xlock);
    ph_persist_fence(&x->sp->persist, c);
}

void ph_extent_cancel(ph_extents *x, uint64_t off)
{
    lock_index(x);
    make_free(x, x->head[page_of(x, off)], 1);
    ph_spin_unlock(&x->xlock);
}

/* What is at `page` that is not the head of a live extent of `kind`. */
static int classify_locked(ph_extents *x, uint64_t off, uint32_t kind, ph_extnode **out)
{
    uint64_t page = page_of(x, off);
    if (off >= ph_space_size(x->sp))
        return ph_err(PHEAP_ERANGE, "offset %llu is beyond the heap's end", (unsigned long long)off);
    ph_extnode *n = off % PH_PAGE_SIZE ? NULL : x->head[page];
    if (n && n->kind == kind) {
        *out = n;
        return 0;
    }
    int was_freed = off % PH_PAGE_SIZE == 0 && (x->freed[page / 64] >> (page % 64)) & 1;
    if (n && n->kind == PH_EXT_RESERVED && was_freed) /* held by a free_from in flight */
        return ph_err(PHEAP_EDOUBLEFREE, "double free of the large block at %llu",
                      (unsigned long long)off);
    /* Find the extent containing the page: walk back to a head. */
    uint64_t p = page;
    while (!x->head[p] && p > 0)
        p--;
    n = x->head[p];
    if (n && n->kind != PH_EXT_FREE && p + n->npages > page)
        return ph_err(PHEAP_EINTERIOR, "offset %llu is inside the block at %llu",
                      (unsigned long long)off, (unsigned long long)off_of(x, n->page));
    if (was_freed)
        return ph_err(PHEAP_EDOUBLEFREE, "double free of the large block at %llu",
                      (unsigned long long)off);
    return ph_err(PHEAP_ENOTALLOC, "offset %llu was never allocated", (unsigned long long)off);
}

int ph_extent_free(ph_extents *x, ph_pctx *c, uint64_t off, uint32_t kind, uint64_t *dest,
                   uint64_t dest_val, int hold)
{
    lock_index(x);
    ph_extnode *n;
    int rc = classify_locked(x, off, kind, &n);
    if (!rc) {
        append(x, c, n, PH_EXT_FREE);
        n->kind = PH_EXT_RESERVED; /* free in the log, not reusable before the fence */
        if (!x->dirty_since) /* the purge delay counts from the first free */
            x->dirty_since = ph_space_now(x->sp);
        if (kind == PH_EXT_LARGE)
            x->freed[n->page / 64] |= 1ull << (n->page % 64);
        if (dest) {
            ph_persist_write(&x->sp->persist, c, dest, dest_val);
            ph_persist_flush(&x->sp->persist, c, dest, sizeof(*dest));
        }
    }
    ph_spin_unlock(&x->xlock);
    if (rc)
        return rc;
    persist_entry(x, c);
    if (!hold)
        ph_extent_release(x, off);
    return 0;
}

void ph_extent_release(ph_extents *x, uint64_t off)
{
    /* The node is RESERVED, so no one else changes it or its head[] slot
     * (only free nodes merge): read it without the lock. */
    ph_extnode *n = x->head[page_of(x, off)];
    n->next = __atomic_load_n(&x->xreleased, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(&x->xreleased, &n->next, n, 1, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED))
        ;
}

int ph_extent_claim(ph_extents *x, ph_pctx *c, uint64_t off, uint64_t bytes)
{
    lock_index(x);
    uint64_t page = page_of(x, off), n = PH_ALIGN_UP(bytes, PH_PAGE_SIZE) / PH_PAGE_SIZE, p = page;
    int rc = 0, staged = 0;
    while (p > 0 && !x->head[p])
        p--;
    ph_extnode *f = x->head[p];
    if (f && f->page == page && f->kind == PH_EXT_LARGE && f->npages == n)
        goto out; /* the commit was durable */
    if (!f || f->kind != PH_EXT_FREE || page + n > f->page + f->npages) {
        rc = ph_err(PHEAP_ECORRUPT, "recovery: extent at %llu is neither live nor free",
                    (unsigned long long)off);
        goto out;
    }
    f = carve(x, f, page, n, PH_EXT_RESERVED, 0);
    if (!f) {
        rc = ph_err(PHEAP_ENOMEM, "extent index: out of memory");
    } else {
        stage_commit(x, c, f, PH_EXT_LARGE, 0, NULL, 0);
        staged = 1;
    }
out:
    ph_spin_unlock(&x->xlock);
    if (staged)
        persist_entry(x, c);
    return rc;
}

int ph_extent_lookup(ph_extents *x, uint64_t off, uint64_t *bytes)
{
    lock_index(x);
    ph_extnode *n;
    int rc = classify_locked(x, off, PH_EXT_LARGE, &n);
    if (!rc)
        *bytes = n->npages * PH_PAGE_SIZE;
    ph_spin_unlock(&x->xlock);
    return rc;
}

void ph_extents_walk(ph_extents *x, void (*fn)(void *arg, const ph_extnode *n), void *arg)
{
    lock_index(x);
    for (uint64_t p = 0; p < x->pages; p += x->head[p]->npages)
        fn(arg, x->head[p]);
    ph_spin_unlock(&x->xlock);
}

uint64_t ph_extents_largest_free(ph_extents *x)
{
    uint64_t best = 0;
    lock_index(x);
    for (int b = PH_EXT_BINS - 1; b >= 0 && !best; b--)
        for (ph_extnode *f = x->bins[b]; f; f = f->next)
            best = PH_MAX(best, f->npages);
    ph_spin_unlock(&x->xlock);
    return best;
}

int ph_extents_check(ph_extents *x, char *err, size_t errlen)
{
    lock_index(x);
    entry *live = NULL;
    uint64_t n = 0, i = 0, free_pages = 0, p = 0, used;
    int bad = 0;
    if (replay(x, &live, &n, &used) != 0) {
        snprintf(err, errlen, "%s", pheap_errmsg());
        bad = 1;
    }
    for (p = 0; !bad && p < x->pages;) {
        const ph_extnode *e = x->head[p];
        if (!e || e->page != p || e->npages == 0 || x->last[p + e->npages - 1] != e) {
            snprintf(err, errlen, "extent index: no extent starts at page %llu", (unsigned long long)p);
            bad = 1;
            break;
        }
        if (e->kind == PH_EXT_FREE) {
            free_pages += e->npages;
            if (p + e->npages < x->pages && x->head[p + e->npages]->kind == PH_EXT_FREE) {
                snprintf(err, errlen, "extent index: free extents at page %llu not merged",
                         (unsigned long long)p);
                bad = 1;
            }
        } else if (i >= n || live[i].page != p || live[i].n != e->npages || live[i].kind != e->kind ||
                   live[i].cls != e->cls) {
            snprintf(err, errlen, "extent at page %llu (%llu pages, kind %u) disagrees with the log",
                     (unsigned long long)p, (unsigned long long)e->npages, e->kind);
            bad = 1;
        } else {
            i++;
        }
        p += e->npages;
    }
    if (!bad && (p != x->pages || i != n || free_pages != x->free_pages)) {
        snprintf(err, errlen, "extent index: %llu of %llu logged extents found, %llu free pages "
                 "counted, %llu recorded", (unsigned long long)i, (unsigned long long)n,
                 (unsigned long long)free_pages, (unsigned long long)x->free_pages);
        bad = 1;
    }
    free(live);
    ph_spin_unlock(&x->xlock);
    return bad;
}
