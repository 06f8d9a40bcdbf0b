/*
 * defrag.c -- pheap_defrag: the program hands over the words that name some
 * blocks, and blocks move out of sparse slabs so that those slabs can go
 * back to free space.
 *
 * The call checks everything first (each slot, each block), then plans:
 * a slab can be emptied only if every block allocated in it is named by a
 * slot and may move (no root or name binds it); of the slabs of one size
 * class that can, the sparsest go first, as many as frees the most slabs
 * once the blocks they hold are packed into others.  The chosen slabs are
 * set aside (alloc/engine.h: no refill hands out their space), and blocks
 * move in batches, each one transaction of the calling thread: pheap_tx_alloc
 * a block of the same size, copy the bytes, pheap_tx_write every slot in
 * the heap (at its new place when the block holding it has moved, or moves
 * in the same batch), pheap_tx_free the old block, commit.  The
 * transaction's protocol gives the crash guarantee; slots in the program's
 * memory are stored after the commit.  Between batches the thread's cache
 * is drained, so that the blocks a commit freed go back to their slabs
 * (set aside: never a destination) and a slab that has lost its last
 * block is given back at once, making room for the next batch's.
 */
#include <stdlib.h>
#include <string.h>

#include "alloc/engine.h"
#include "heap/heap.h"
#include "heap/names.h"
#include "pheap.h"
#include "util/error.h"

#define DEFRAG_BATCH 256u /* blocks moved per transaction */

typedef struct slot_ref {
    pheap_off *slot;       /* the program's address of the word */
    uint64_t at;           /* its offset when it lies in the heap, else 0 */
    uint64_t value;        /* the block it names */
} slot_ref;

typedef struct block {
    uint64_t off, bytes;   /* the block and its usable size */
    uint64_t chunk;        /* its slab's chunk; 0: not in a slab */
    uint64_t to;           /* where it is now: off, or its new offset */
    uint64_t pending;      /* its new offset while its batch is open */
    size_t slot0, nslots;  /* its slots in the sorted refs */
    int pinned;            /* named by a root or a name: stays */
} block;

typedef struct slab_plan {
    uint64_t chunk;
    unsigned cls;
    uint32_t nblocks, live, named; /* live: allocated now; named: by the slots */
    uint32_t room;         /* free blocks of its class */
    int pinned;            /* holds a block that may not move */
    int chosen, set_aside;
    size_t left;           /* blocks still to move */
} slab_plan;

typedef struct defrag {
    pheap *h;
    ph_thread *t;
    slot_ref *refs;
    size_t nrefs;
    block *blocks;
    size_t nblocks;
    uint64_t *pins;        /* offsets of blocks that may not move, sorted */
    size_t npins, pins_cap;
    int pins_oom;          /* a realloc of pins failed */
    slab_plan *slabs;
    size_t nslabs;
    pheap_defrag_result res;
} defrag;

static int cmp_u64(uint64_t a, uint64_t b)
{
    return a < b ? -1 : a > b;
}

static int by_slot(const void *a, const void *b)
{
    return cmp_u64((uint64_t)(uintptr_t)((const slot_ref *)a)->slot,
                   (uint64_t)(uintptr_t)((const slot_ref *)b)->slot);
}

static int by_value(const void *a, const void *b)
{
    return cmp_u64(((const slot_ref *)a)->value, ((const slot_ref *)b)->value);
}

static int by_off(const void *a, const void *b)
{
    return cmp_u64(*(const uint64_t *)a, *(const uint64_t *)b);
}

static int by_chunk(const void *a, const void *b)
{
    return cmp_u64(((const slab_plan *)a)->chunk, ((const slab_plan *)b)->chunk);
}

/* Sparsest first; by class, so that a class's slabs are contiguous. */
static int by_class_live(const void *a, const void *b)
{
    const slab_plan *x = a, *y = b;
    if (x->cls != y->cls)
        return x->cls < y->cls ? -1 : 1;
    if (x->live != y->live)
        return x->live < y->live ? -1 : 1;
    return cmp_u64(x->chunk, y->chunk);
}

/* qsort of possibly nothing (whose array may then be NULL). */
static void sort(void *v, size_t n, size_t size, int (*cmp)(const void *, const void *))
{
    if (n > 1)
        qsort(v, n, size, cmp);
}

/* ---- checks ---------------------------------------------------------------------- */

/* Where slot `p` lies: *at its heap offset, or 0 in the program's memory;
 * an error for a word of the heap that is no aligned word of a live block
 * of the program's. */
static int locate_slot(pheap *h, pheap_off *p, uint64_t *at)
{
    uintptr_t a = (uintptr_t)p, view = (uintptr_t)h->sp.view, base = (uintptr_t)h->sp.base;
    uint64_t size = ph_space_size(&h->sp), reserve = h->sp.reserve, off;
    *at = 0;
    if (!p)
        return ph_err(PHEAP_EINVAL, "pheap_defrag: a slot is NULL");
    if (a % 8)
        return ph_err(PHEAP_EINVAL, "pheap_defrag: the slot at %p is not 8-byte aligned", (void *)p);
    /* the whole reservation of either view is the heap's, not the program's:
     * past the mapped size it is unmapped address space */
    if (a - view < reserve) /* the program's view of the heap (or pheap's own) */
        off = a - view;
    else if (a - base < reserve)
        off = a - base;
    else
        return 0; /* the program's memory */
    if (off < h->sp.data_off)
        return ph_err(PHEAP_ERANGE, "pheap_defrag: the slot at %p is in the heap's metadata, "
                      "outside its data region", (void *)p);
    if (off + 8 > size)
        return ph_err(PHEAP_ERANGE, "pheap_defrag: the slot at %p is past the end of the heap's "
                      "data region", (void *)p);
    int rc = ph_heap_guarded(h, off, 8, "pheap_defrag");
    if (!rc)
        rc = ph_engine_word_live(h->engine, off, "pheap_defrag");
    *at = off;
    return rc;
}

static int read_slots(defrag *d, pheap_off *const *slots, size_t n)
{
    if (n && !(d->refs = malloc(n * sizeof(*d->refs))))
        return ph_err(PHEAP_ENOMEM, "pheap_defrag: out of memory");
    for (size_t i = 0; i < n; i++) {
        slot_ref r = {slots[i], 0, 0};
        int rc = locate_slot(d->h, r.slot, &r.at);
        if (rc)
            return rc;
        r.value = r.at ? *(const uint64_t *)ph_space_at(&d->h->sp, r.at) : *r.slot;
        if (r.value)
            d->refs[d->nrefs++] = r;
    }
    /* One entry per word (a slot passed twice is one slot) ... */
    sort(d->refs, d->nrefs, sizeof(*d->refs), by_slot);
    size_t k = 0;
    for (size_t i = 0; i < d->nrefs; i++)
        if (!k || d->refs[i].slot != d->refs[k - 1].slot)
            d->refs[k++] = d->refs[i];
    d->nrefs = k;
    /* ... then in the order of the blocks they name. */
    sort(d->refs, d->nrefs, sizeof(*d->refs), by_value);
    return 0;
}

static void add_pin(void *arg, uint64_t off, const char *name)
{
    defrag *d = arg;
    (void)name;
    if (d->pins_oom)
        return;
    if (d->npins == d->pins_cap) {
        size_t cap = d->pins_cap ? 2 * d->pins_cap : 64;
        uint64_t *v = realloc(d->pins, cap * sizeof(*v));
        if (!v) {
            d->pins_oom = 1; /* reported by the caller */
            return;
        }
        d->pins = v;
        d->pins_cap = cap;
    }
    d->pins[d->npins++] = off;
}

/* The blocks that roots and names bind (and the directory's own). */
static int collect_pins(defrag *d)
{
    char name[PHEAP_ROOT_NAME_MAX + 1];
    pheap_off off;
    for (unsigned i = 0; !d->pins_oom && pheap_root_at(d->h, i, name, &off) == 0; i++)
        if (off)
            add_pin(d, off, name);
    if (!d->pins_oom)
        ph_names_roots(d->h, add_pin, d);
    if (d->pins_oom)
        return ph_err(PHEAP_ENOMEM, "pheap_defrag: out of memory");
    sort(d->pins, d->npins, sizeof(*d->pins), by_off);
    return 0;
}

static int pinned(const defrag *d, uint64_t off)
{
    return d->npins && bsearch(&off, d->pins, d->npins, sizeof(*d->pins), by_off) != NULL;
}

/* One block per distinct value, each checked to be a live block's start. */
static int read_blocks(defrag *d)
{
    pheap *h = d->h;
    if (d->nrefs && !(d->blocks = calloc(d->nrefs, sizeof(*d->blocks))))
        return ph_err(PHEAP_ENOMEM, "pheap_defrag: out of memory");
    for (size_t i = 0; i < d->nrefs; i++) {
        uint64_t v = d->refs[i].value;
        if (d->nblocks && d->blocks[d->nblocks - 1].off == v) {
            d->blocks[d->nblocks - 1].nslots++;
            continue;
        }
        if (v < h->sp.data_off || v >= ph_space_size(&h->sp))
            return ph_err(PHEAP_ERANGE, "pheap_defrag: the slot at %p holds %llu, outside the "
                          "heap's data region", (void *)d->refs[i].slot, (unsigned long long)v);
        int rc = ph_heap_guarded(h, v, 1, "pheap_defrag");
        uint64_t bytes = 0;
        if (!rc && (rc = ph_engine_usable(h->engine, v, &bytes)) != 0)
            ph_err(rc, "pheap_defrag: the slot at %p holds %llu, which starts no live block (%s)",
                   (void *)d->refs[i].slot, (unsigned long long)v,
                   rc == PHEAP_EDOUBLEFREE ? "a freed block" : rc == PHEAP_EINTERIOR
                       ? "inside a block" : "space never allocated");
        if (rc)
            return rc;
        block *b = &d->blocks[d->nblocks++];
        b->off = b->to = v;
        b->bytes = bytes;
        b->slot0 = i;
        b->nslots = 1;
    }
    d->res.total = d->nblocks;
    return 0;
}

/* ---- the plan -------------------------------------------------------------------- */

/* The slabs the blocks lie in, with how many of their live blocks the
 * slots name and whether any of those may not move. */
static int census(defrag *d)
{
    if (d->nblocks && !(d->slabs = calloc(d->nblocks, sizeof(*d->slabs))))
        return ph_err(PHEAP_ENOMEM, "pheap_defrag: out of memory");
    for (size_t i = 0; i < d->nblocks; i++) {
        block *b = &d->blocks[i];
        ph_slab_census c;
        b->pinned = pinned(d, b->off);
        if (!ph_engine_slab_census(d->h->engine, b->off, &c))
            continue;
        b->chunk = c.chunk;
        slab_plan *s = &d->slabs[d->nslabs++]; /* merged below */
        *s = (slab_plan){c.chunk, c.cls, c.nblocks, c.live, 1, c.room, b->pinned, 0, 0, 0};
    }
    sort(d->slabs, d->nslabs, sizeof(*d->slabs), by_chunk);
    size_t k = 0;
    for (size_t i = 0; i < d->nslabs; i++) {
        if (k && d->slabs[k - 1].chunk == d->slabs[i].chunk) {
            d->slabs[k - 1].named++;
            d->slabs[k - 1].pinned |= d->slabs[i].pinned;
        } else {
            d->slabs[k++] = d->slabs[i];
        }
    }
    d->nslabs = k;
    return 0;
}

static int can_empty(const slab_plan *s)
{
    return !s->pinned && s->named == s->live && s->live;
}

/* Of each class's slabs that can be emptied (sparsest first), the first e,
 * where e maximises the slabs emptied less the new slabs their blocks
 * need: they go first into the free blocks of the class's slabs that stay
 * (those that cannot be emptied, and the fuller ones that could), so that
 * a heap with no room for a new slab is compacted in place.  Nothing when
 * no e gains; of equal gains, the fewest moves. */
static void choose(defrag *d)
{
    sort(d->slabs, d->nslabs, sizeof(*d->slabs), by_class_live);
    for (size_t i = 0; i < d->nslabs;) {
        size_t j = i;
        uint64_t room = 0; /* free blocks of the slabs that stay, all of them first */
        for (; j < d->nslabs && d->slabs[j].cls == d->slabs[i].cls; j++)
            room += d->slabs[j].room;
        uint64_t moved = 0, nb = d->slabs[i].nblocks, e = 0, best_e = 0;
        long best_gain = 0;
        for (size_t k = i; k < j; k++) {
            const slab_plan *s = &d->slabs[k];
            if (!can_empty(s))
                continue;
            moved += s->live; /* s is emptied: its blocks move, its room is gone */
            room -= s->room;
            e++;
            uint64_t fresh = moved > room ? (moved - room + nb - 1) / nb : 0;
            long gain = (long)e - (long)fresh;
            if (gain > best_gain) {
                best_gain = gain;
                best_e = e;
            }
        }
        for (size_t k = i, taken = 0; k < j && taken < best_e; k++)
            if (can_empty(&d->slabs[k])) {
                d->slabs[k].chosen = 1;
                taken++;
            }
        i = j;
    }
    sort(d->slabs, d->nslabs, sizeof(*d->slabs), by_chunk);
}

static slab_plan *slab_of(defrag *d, uint64_t chunk)
{
    slab_plan key = {.chunk = chunk};
    return chunk ? bsearch(&key, d->slabs, d->nslabs, sizeof(*d->slabs), by_chunk) : NULL;
}

/* ---- moving ---------------------------------------------------------------------- */

/* The block whose bytes hold heap offset `at`, or NULL. */
static block *holder(defrag *d, uint64_t at)
{
    size_t lo = 0, hi = d->nblocks;
    while (lo < hi) { /* the first block starting after `at` */
        size_t mid = (lo + hi) / 2;
        if (d->blocks[mid].off <= at)
            lo = mid + 1;
        else
            hi = mid;
    }
    block *b = lo ? &d->blocks[lo - 1] : NULL;
    return b && at < b->off + b->bytes ? b : NULL;
}

/* Where the word at heap offset `at` is now: in the new block if the one
 * holding it moved (or moves in the open batch). */
static uint64_t now_at(defrag *d, uint64_t at)
{
    block *b = holder(d, at);
    uint64_t to = b ? (b->pending ? b->pending : b->to) : 0;
    return b ? to + (at - b->off) : at;
}

/* Moves blocks [first, end) of the order (indices into d->blocks) in one
 * transaction. */
static int move_batch(defrag *d, const size_t *order, size_t first, size_t end)
{
    pheap *h = d->h;
    int rc = pheap_tx_begin(h);
    for (size_t i = first; !rc && i < end; i++) {
        block *b = &d->blocks[order[i]];
        uint64_t to = pheap_tx_alloc(h, b->bytes);
        if (!to) {
            rc = pheap_errno();
            break;
        }
        memcpy(ph_space_at(&h->sp, to), ph_space_at(&h->sp, b->off), b->bytes);
        b->pending = to;
    }
    for (size_t i = first; !rc && i < end; i++) {
        block *b = &d->blocks[order[i]];
        for (size_t k = b->slot0; !rc && k < b->slot0 + b->nslots; k++) {
            const slot_ref *r = &d->refs[k];
            if (r->at)
                rc = pheap_tx_write(h, ph_space_user(&h->sp, now_at(d, r->at)), &b->pending,
                                    sizeof(b->pending));
        }
        if (!rc)
            rc = pheap_tx_free(h, b->off);
    }
    if (!rc)
        rc = pheap_tx_commit(h);
    else if (pheap_tx_depth(h))
        pheap_tx_abort(h); /* keeps the error of the call that failed */
    for (size_t i = first; i < end; i++) {
        block *b = &d->blocks[order[i]];
        if (!rc) {
            b->to = b->pending;
            for (size_t k = b->slot0; k < b->slot0 + b->nslots; k++)
                if (!d->refs[k].at)
                    *d->refs[k].slot = b->to;
            d->res.relocated++;
            d->res.bytes_moved += b->bytes;
            slab_of(d, b->chunk)->left--;
        }
        b->pending = 0;
    }
    return rc;
}

/* Gives back the set-aside slabs that no block is left to move out of (all
 * when `all`): the empty ones become free space. */
static void end_slabs(defrag *d, int all)
{
    ph_engine_drain_cache(d->h->engine, &d->t->tc, &d->t->pctx);
    for (size_t i = 0; i < d->nslabs; i++) {
        slab_plan *s = &d->slabs[i];
        if (s->set_aside && (all || !s->left)) {
            s->set_aside = 0;
            d->res.slabs_freed += (size_t)ph_engine_evacuate_end(d->h->engine, &d->t->pctx,
                                                                 s->chunk);
        }
    }
}

static int by_slab_order(const void *a, const void *b, void *arg)
{
    defrag *d = arg;
    const slab_plan *x = slab_of(d, d->blocks[*(const size_t *)a].chunk);
    const slab_plan *y = slab_of(d, d->blocks[*(const size_t *)b].chunk);
    if (x->live != y->live)
        return x->live < y->live ? -1 : 1;
    int c = cmp_u64(x->chunk, y->chunk);
    return c ? c : cmp_u64(*(const size_t *)a, *(const size_t *)b);
}

static int by_room(const void *a, const void *b, void *arg)
{
    defrag *d = arg;
    const slab_plan *x = slab_of(d, *(const uint64_t *)a), *y = slab_of(d, *(const uint64_t *)b);
    if (x->room != y->room)
        return x->room < y->room ? -1 : 1;
    return cmp_u64(x->chunk, y->chunk);
}

/* The slabs that stay and have room, fullest first: where the moved
 * blocks go (the thread's refills take from them first, whatever arena
 * they are in: its own arena might otherwise make a slab while they wait). */
static uint64_t *destinations(defrag *d, uint32_t *n)
{
    uint64_t *v = malloc((d->nslabs ? d->nslabs : 1) * sizeof(*v));
    *n = 0;
    for (size_t i = 0; v && i < d->nslabs; i++)
        if (!d->slabs[i].chosen && d->slabs[i].room)
            v[(*n)++] = d->slabs[i].chunk;
    if (v && *n > 1)
        qsort_r(v, *n, sizeof(*v), by_room, d);
    return v;
}

static int run(defrag *d)
{
    size_t *order = malloc((d->nblocks ? d->nblocks : 1) * sizeof(*order)), n = 0;
    uint32_t ndest = 0;
    uint64_t *dest = destinations(d, &ndest);
    if (!order || !dest) {
        free(order);
        free(dest);
        return ph_err(PHEAP_ENOMEM, "pheap_defrag: out of memory");
    }
    d->t->tc.prefer = dest;
    d->t->tc.nprefer = ndest;
    /* The caller's cache may hold free blocks of the chosen slabs: back to
     * them, or the first allocations would land there. */
    ph_engine_drain_cache(d->h->engine, &d->t->tc, &d->t->pctx);
    for (size_t i = 0; i < d->nslabs; i++) {
        slab_plan *s = &d->slabs[i];
        s->set_aside = s->chosen && ph_engine_evacuate(d->h->engine, s->chunk);
    }
    for (size_t i = 0; i < d->nblocks; i++) {
        slab_plan *s = slab_of(d, d->blocks[i].chunk);
        if (s && s->set_aside) {
            order[n++] = i;
            s->left++;
        }
    }
    /* Slab by slab, the sparsest first (then by chunk): batches empty
     * whole slabs one after another. */
    qsort_r(order, n, sizeof(*order), by_slab_order, d);
    /* A batch that finds no room (for its blocks, or for its transaction's
     * log to grow past the lane's own area) was rolled back whole: it is
     * tried again at half the size, down to one block. */
    int rc = 0;
    for (size_t first = 0, batch = DEFRAG_BATCH; !rc && first < n;) {
        size_t end = PH_MIN(n, first + batch);
        rc = move_batch(d, order, first, end);
        end_slabs(d, 0);
        if ((rc == PHEAP_ENOMEM || rc == PHEAP_ENOSPC) && batch > 1) {
            batch /= 2;
            rc = 0;
        } else if (!rc) {
            first = end;
        }
    }
    end_slabs(d, 1);
    d->t->tc.prefer = NULL;
    d->t->tc.nprefer = 0;
    free(dest);
    free(order);
    return rc;
}

ph_export int pheap_defrag(pheap *h, pheap_off *const *slots, size_t n, pheap_defrag_result *out)
{
    PH_WINDOW();
    if (ph_heap_unshared(h, "pheap_defrag"))
        return PHEAP_ENOTSUP;
    defrag d = {.h = h};
    if (out)
        memset(out, 0, sizeof(*out));
    if (!h)
        return ph_err(PHEAP_EINVAL, "pheap_defrag: heap is NULL");
    if (n && !slots)
        return ph_err(PHEAP_EINVAL, "pheap_defrag: slots is NULL");
    if (!(d.t = ph_heap_writer(h, "pheap_defrag")))
        return pheap_errno();
    if (h->gc)
        return ph_err(PHEAP_ENOTSUP, "pheap_defrag: %s is a GC-mode heap; moving blocks needs "
                      "transactions, which need a LOG-mode heap", h->path);
    if (!h->engine->txlogs)
        return ph_err(PHEAP_ENOTSUP, "pheap_defrag: %s has format %u.%u, made before "
                      "transactions (1.3)", h->path, h->hdr.major, h->hdr.minor);
    if (pheap_tx_depth(h))
        return ph_err(PHEAP_EINVAL, "pheap_defrag: the thread is inside a transaction (the call "
                      "commits transactions of its own)");
    int rc = read_slots(&d, slots, n);
    if (!rc)
        rc = read_blocks(&d);
    if (!rc)
        rc = collect_pins(&d);
    if (!rc)
        rc = census(&d);
    if (!rc) {
        choose(&d);
        rc = run(&d);
    }
    if (out)
        *out = d.res;
    free(d.refs);
    free(d.blocks);
    free(d.pins);
    free(d.slabs);
    return rc;
}
