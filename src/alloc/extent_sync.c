/*
 * extent_sync.c -- an index brought up to date with what other indexes of
 * the same heap appended to the extent log: the piece of sharing a heap
 * between processes (docs/SHARING.md) where each process keeps its own
 * index in DRAM and, when it takes the lock that serialises appends,
 * replays the entries appended since it last held it.
 *
 * The log says it all.  Appends fill the active half's slots in log order
 * (extent_log.c), so the entries another index appended are the valid
 * slots from this index's tail on; the appender fences them before it
 * lets the lock go, so none is seen half written.  A growth shows in the
 * heap's size; a compaction in the log header's active epoch, and then
 * the index is built again from the new half, as at open.  What no entry
 * says is kept across a rebuild: this index's reservations (a block
 * chosen, not yet committed, or freed and held until its lane retires),
 * in an exclusive open; a shared heap's are entries of the log.
 *
 * In a shared heap (x->owner) every reservation is an entry of the log
 * (RESERVED, naming its process), so every index sees every process's;
 * an exclusive open's reservations are its own and are carried over.
 * An index shared with ph_extents_share syncs under the lock between
 * processes at every operation (extent.c: ph_extent_lock).
 */
#include "alloc/extent_int.h"

#include <stdlib.h>
#include <string.h>

#include "pheap.h"
#include "util/error.h"

static int contradicts(uint64_t j, const ph_extent_rec *e, const char *what)
{
    static const char *const kinds[] = {"?", "frees", "allocates", "makes a slab of",
                                        "reserves"};
    return ph_err(PHEAP_ECORRUPT, "extent log entry %llu %s pages %llu..%llu, which this index "
                  "does not hold %s", (unsigned long long)j, kinds[e->kind],
                  (unsigned long long)e->page, (unsigned long long)(e->page + e->n), what);
}

/* One entry another index appended.  Besides allocations and frees, a
 * shared heap's log holds reservations (RESERVED, the owner in cls): of
 * free space, or a held free of a live extent; a reservation becomes
 * live or free. */
static int apply(ph_extents *x, uint64_t j, const ph_extent_rec *e)
{
    if (e->page + e->n > x->pages)
        return ph_err(PHEAP_ECORRUPT, "extent log entry %llu: pages %llu..%llu lie beyond the "
                      "heap's %llu", (unsigned long long)j, (unsigned long long)e->page,
                      (unsigned long long)(e->page + e->n), (unsigned long long)x->pages);
    ph_extnode *n = x->head[e->page];
    int whole = n && n->npages == e->n;
    /* this index's own reservation: no other index commits or frees it */
    int mine = whole && n->kind == PH_EXT_RESERVED && n->cls == x->owner;
    if (e->kind == PH_EXT_FREE) {
        if (!whole || n->kind == PH_EXT_FREE || mine)
            return contradicts(j, e, "as one extent of another's");
        if (n->kind == PH_EXT_LARGE)
            x->freed[n->page / 64] |= 1ull << (n->page % 64);
        /* the other index may purge them: their file space is not known */
        ph_extent_backing_mark_punched(x, n->page, n->npages);
        ph_extent_index_make_free(x, n, 1);
        return 0;
    }
    if (whole && e->kind == PH_EXT_RESERVED && (n->kind == PH_EXT_LARGE || n->kind == PH_EXT_SLAB)) {
        if (n->kind == PH_EXT_LARGE) /* a held free */
            x->freed[n->page / 64] |= 1ull << (n->page % 64);
        n->kind = PH_EXT_RESERVED;
        n->cls = e->cls;
        return 0;
    }
    if (whole && e->kind != PH_EXT_RESERVED && n->kind == PH_EXT_RESERVED && !mine) {
        /* another's reservation, committed */
        n->kind = e->kind;
        n->cls = e->cls;
        x->freed[e->page / 64] &= ~(1ull << (e->page % 64));
        return 0;
    }
    ph_extnode *f = ph_extent_index_holding(x, e->page);
    if (!f || f->kind != PH_EXT_FREE || f->page + f->npages < e->page + e->n)
        return contradicts(j, e, "free");
    if (!ph_extent_index_carve(x, f, e->page, e->n, e->kind, e->cls))
        return ph_err(PHEAP_ENOMEM, "extent index: out of memory");
    if (e->kind != PH_EXT_RESERVED)
        x->freed[e->page / 64] &= ~(1ull << (e->page % 64));
    return 0;
}

/* The entries appended since x->tail, in the half x knows. */
static int replay_new(ph_extents *x, uint64_t *applied)
{
    x->high = x->bounded ? ph_load(&x->hdr->xhigh[x->active]) : x->half_entries;
    ph_extent_rec e;
    for (; x->tail < x->high && ph_extent_log_entry(x, x->tail, &e); x->tail++) {
        int rc = apply(x, x->tail, &e);
        if (rc)
            return rc;
        ++*applied;
    }
    return 0;
}

typedef struct held {
    uint64_t page, n;
} held;

/* After a compaction: the index of the new half, as an open builds it,
 * with this index's reservations carved in again and its record of freed
 * large blocks (for the messages of double frees) kept. */
static int rebuild(ph_extents *x)
{
    size_t nh = 0, cap = 16;
    held *h = malloc(cap * sizeof(*h));
    if (!h)
        return ph_err(PHEAP_ENOMEM, "extent index: out of memory");
    for (uint64_t p = 0; p < x->pages; p += x->head[p]->npages) {
        const ph_extnode *n = x->head[p];
        if (n->kind != PH_EXT_RESERVED)
            continue;
        if (nh == cap) {
            held *v = realloc(h, 2 * cap * sizeof(*h));
            if (!v) {
                free(h);
                return ph_err(PHEAP_ENOMEM, "extent index: out of memory");
            }
            h = v;
            cap *= 2;
        }
        h[nh++] = (held){n->page, n->npages};
    }
    ph_extents *nx = NULL;
    /* a shared heap's reservations, this index's included, are in the log */
    int rc = x->owner ? ph_extents_open_owned(x->sp, x->owner, &nx)
                      : ph_extents_open(x->sp, &nx, NULL, NULL);
    if (x->owner)
        nh = 0;
    for (size_t i = 0; !rc && i < nh; i++) {
        ph_extnode *f = ph_extent_index_holding(nx, h[i].page);
        if (!f || f->kind != PH_EXT_FREE || f->page + f->npages < h[i].page + h[i].n)
            rc = ph_err(PHEAP_ECORRUPT, "extent index: pages %llu..%llu this index holds "
                        "reserved are not free in the log", (unsigned long long)h[i].page,
                        (unsigned long long)(h[i].page + h[i].n));
        else if (!ph_extent_index_carve(nx, f, h[i].page, h[i].n, PH_EXT_RESERVED, 0))
            rc = ph_err(PHEAP_ENOMEM, "extent index: out of memory");
    }
    free(h);
    if (rc) {
        if (nx) {
            ph_extents_fini(nx);
            free(nx);
        }
        return rc;
    }
    memcpy(nx->freed, x->freed, (x->pages_max + 63) / 64 * 8);
    ph_extents_fini(x);
    /* The index and the log position; not the lock, which the caller holds
     * and others spin on, nor what never changes, which others read
     * without it (released extents were drained before the rebuild). */
    x->epoch = nx->epoch;
    x->active = nx->active;
    x->tail = nx->tail;
    x->high = nx->high;
    x->pages = nx->pages;
    x->head = nx->head;
    x->last = nx->last;
    x->freed = nx->freed;
    x->punched = nx->punched;
    x->scratch = nx->scratch;
    memcpy(x->bins, nx->bins, sizeof(x->bins));
    x->spare = nx->spare;
    x->pools = nx->pools;
    x->free_pages = nx->free_pages;
    x->dropped = nx->dropped;
    free(nx);
    return 0;
}

int ph_extent_sync_locked(ph_extents *x, ph_extents_sync_info *info)
{
    ph_extents_sync_info st = {0, 0};
    ph_extent_drain_released(x);
    int rc = x->xplock ? ph_space_follow(x->sp) : 0; /* another process's growth */
    if (!rc)
        rc = ph_extent_backing_adopt(x);
    uint64_t v = ph_load(&x->hdr->xactive), epoch = v ? v >> 1 : 1;
    if (!rc && (epoch != x->epoch || (unsigned)(v & 1) != x->active)) {
        rc = rebuild(x);
        st.rebuilt = rc == 0;
    } else if (!rc) {
        rc = replay_new(x, &st.applied);
    }
    if (info)
        *info = st;
    return rc;
}

int ph_extents_sync(ph_extents *x, ph_extents_sync_info *info)
{
    int rc;
    if (x->xplock) { /* the lock syncs */
        rc = ph_extent_lock(x, NULL, 0, info);
        ph_extent_unlock(x, NULL, 0);
        return rc;
    }
    ph_spin_lock(&x->xlock);
    rc = ph_extent_sync_locked(x, info);
    ph_spin_unlock(&x->xlock);
    return rc;
}
