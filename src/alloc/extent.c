/*
 * extent.c -- the large allocator's operations (extent.h): reserve, commit,
 * free and release extents under the index lock, classify offsets for bad
 * frees, open and close, check.  The pieces are in extent_index.c (the
 * DRAM index), extent_log.c (the durable log and its crash protocol) and
 * extent_backing.c (growth and hole punching).
 *
 * An operation takes the lock once: it drains the extents released since
 * (durably freed, waiting to become free space), may purge, changes the
 * index, appends its log entry with non-temporal stores, drops the lock,
 * and only then fences, so that large operations of several threads fence
 * in parallel (extent_log.c says why replay copes).
 */
#include "alloc/extent_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "os/os.h"
#include "pheap.h"
#include "util/error.h"

/* Takes the free pages of the chunk at `off` out of free space for the
 * rest of the open (lock held).  A shared heap's become logged
 * reservations of this process, so that no other process takes them
 * either; the next exclusive open drops them. */
static void set_aside_locked(ph_extents *x, ph_pctx *c, uint64_t off)
{
    uint64_t first = page_of(x, PH_ALIGN_DOWN(off, PH_CHUNK_SIZE));
    uint64_t end = PH_MIN(first + PAGES_PER_CHUNK, x->pages);
    int logged = 0;
    for (uint64_t p = first; p < end;) {
        ph_extnode *f = ph_extent_index_holding(x, p);
        if (!f)
            break;
        uint64_t stop = PH_MIN(end, f->page + f->npages);
        ph_extnode *n = f->kind != PH_EXT_FREE ? NULL
                        : ph_extent_index_carve(x, f, p, stop - p,
                                                x->owner ? PH_EXT_RESERVED : PH_EXT_ASIDE, 0);
        if (n && x->owner) {
            ph_extnode e = *n;
            e.cls = x->owner;
            ph_extent_log_append(x, c, &e, PH_EXT_RESERVED);
            n->cls = x->owner; /* logged (see compaction) */
            n->aside = 1;
            logged = 1;
        }
        p = stop;
    }
    if (logged)
        ph_persist_fence(&x->sp->persist, c);
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
    ph_extnode *f = ph_extent_index_find_fit(x, n, aligned, &at);
    while (!f) {
        int rc = ph_extent_backing_grow(x, c, n, aligned);
        if (rc)
            return rc;
        f = ph_extent_index_find_fit(x, n, aligned, &at);
    }
    if (x->screen) {
        uint64_t bad;
        int rc = x->screen(x->screen_arg, off_of(x, at), n * PH_PAGE_SIZE, &bad);
        if (rc) {
            set_aside_locked(x, c, bad);
            return rc;
        }
    }
    *out = ph_extent_index_carve(x, f, at, n, kind, cls);
    if (!*out)
        return ph_err(PHEAP_ENOMEM, "extent index: out of memory");
    int rc = ph_extent_backing_refill(x, at, n);
    if (rc) { /* the file system is full: the pages stay free, as they were */
        ph_extent_index_make_free(x, *out, 1);
        *out = NULL;
    }
    return rc;
}

/* Freed extents whose free is durable wait on x->xreleased (a stack linked
 * through `next`, pushed without the lock) until the next holder of the
 * lock returns them to free space: a free takes the lock once, not twice. */
/* A released extent becomes free space, counted for the purge (lock held). */
static void released(ph_extents *x, ph_extnode *n)
{
    if (!x->dirty_since)
        x->dirty_since = ph_space_now(x->sp);
    x->dirty_bytes += n->npages * PH_PAGE_SIZE;
    ph_extent_index_make_free(x, n, 1);
}

void ph_extent_drain_released(ph_extents *x)
{
    ph_extnode *n = __atomic_exchange_n(&x->xreleased, NULL, __ATOMIC_ACQUIRE);
    while (n) {
        ph_extnode *next = n->next;
        n->next = NULL;
        released(x, n);
        n = next;
    }
}

static int open_index(ph_space *sp, unsigned owner, ph_extents **out, ph_extent_slab_fn on_slab,
                      void *arg);

/* A dead holder of the lock between processes may have left entries it
 * appended unfenced and one torn append after them: the entries the sync
 * replayed (slots [from, x->tail)) are flushed, the torn slot zeroed, and
 * both fenced before this index appends anything. */
static void repair_taken(ph_extents *x, ph_pctx *c, uint64_t from)
{
    ph_persist_flush(&x->sp->persist, c, x->hdr, sizeof(*x->hdr)); /* a switch or mark of its */
    for (uint64_t j = from; j < x->tail; j++)
        ph_persist_flush(&x->sp->persist, c, &x->half[x->active][j], sizeof(ph_extlog_entry));
    ph_extent_log_scrub(x, c);
    ph_persist_fence(&x->sp->persist, c);
    __atomic_fetch_add(&x->xtakeovers, 1, __ATOMIC_RELAXED);
}

int ph_extent_lock(ph_extents *x, ph_pctx *c, int purge, ph_extents_sync_info *info)
{
    int rc = 0;
    ph_spin_lock(&x->xlock);
    if (x->xplock) {
        int taken = ph_plock_lock(x->xplock, x->plock_owner) == PH_PLOCK_TAKEN;
        uint64_t from = x->tail;
        ph_extents_sync_info st = {0, 0};
        rc = ph_extent_sync_locked(x, &st);
        if (info)
            *info = st;
        if (taken) { /* after a compaction of the dead holder's: the whole new half */
            ph_pctx own = {0}; /* a lookup's caller has no context: one of its own */
            repair_taken(x, c ? c : &own, st.rebuilt || x->tail < from ? 0 : from);
            ph_persist_ctx_release(&own);
        }
    }
    if (purge) {
        ph_extent_drain_released(x);
        ph_extent_backing_maybe_purge(x);
    }
    return rc;
}

void ph_extent_unlock(ph_extents *x, ph_pctx *c, int fence)
{
    if (x->xplock) {
        if (fence)
            ph_persist_fence(&x->sp->persist, c);
        ph_plock_unlock(x->xplock);
        ph_spin_unlock(&x->xlock);
        return;
    }
    ph_spin_unlock(&x->xlock);
    if (fence)
        ph_persist_fence(&x->sp->persist, c); /* the entries, after the lock */
}

void ph_extents_share(ph_extents *x, uint64_t *word, const ph_plock_owner *o)
{
    x->plock_owner = o;
    x->xplock = word;
}

int ph_extents_open_shared(ph_space *sp, unsigned owner, uint64_t *word, const ph_plock_owner *o,
                           ph_extents **out)
{
    int taken = ph_plock_lock(word, o) == PH_PLOCK_TAKEN; /* no append while it replays */
    int rc = ph_space_follow(sp); /* the log may speak of pages another process added */
    if (!rc)
        rc = open_index(sp, owner, out, NULL, NULL);
    if (!rc) {
        ph_extents_share(*out, word, o);
        if (taken) {
            ph_pctx own = {0};
            repair_taken(*out, &own, 0);
            ph_persist_ctx_release(&own);
        }
    }
    ph_plock_unlock(word);
    return rc;
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
    x->half_entries = ph_space_extlog_half_entries(sp->extlog_size);
    x->half[0] = ph_space_at(sp, sp->extlog_region + PH_PAGE_SIZE);
    x->half[1] = x->half[0] + x->half_entries;
    uint64_t v = ph_load(&x->hdr->xactive);
    x->epoch = v ? v >> 1 : 1;
    x->active = (unsigned)(v & 1);
    x->bounded = (sp->features & PH_FEAT_INCOMPAT_EXTLOG_HIGH) != 0;
    x->high = x->bounded ? ph_load(&x->hdr->xhigh[x->active]) : x->half_entries;
    if (x->high > x->half_entries)
        return ph_err(PHEAP_ECORRUPT, "extent log: high-water mark %llu past the %llu entries "
                      "of a half", (unsigned long long)x->high, (unsigned long long)x->half_entries);
    x->pages_max = (sp->max_size - sp->data_off) / PH_PAGE_SIZE;
    x->pages = (ph_space_size(sp) - sp->data_off) / PH_PAGE_SIZE;
    x->head = alloc_map(x->pages_max * sizeof(*x->head));
    x->last = alloc_map(x->pages_max * sizeof(*x->last));
    x->freed = alloc_map((x->pages_max + 63) / 64 * 8);
    x->punched = alloc_map((x->pages_max + 63) / 64 * 8);
    x->scratch = alloc_map(x->half_entries * sizeof(*x->scratch));
    if (!x->head || !x->last || !x->freed || !x->punched || !x->scratch)
        return ph_err(PHEAP_ENOMEM, "extent index: cannot map %llu pages",
                      (unsigned long long)x->pages_max);
    /* The maps come zeroed from the kernel and are not touched here: an
     * open costs what the log holds, not the heap's size.  Allocations
     * fault their pages in, one per 2 MiB of data (growth prefaults). */
    return 0;
}

void ph_extents_fini(ph_extents *x)
{
    ph_extent_index_fini(x);
    ph_os_free_pages(x->head, PH_ALIGN_UP(x->pages_max * sizeof(*x->head), PH_PAGE_SIZE));
    ph_os_free_pages(x->last, PH_ALIGN_UP(x->pages_max * sizeof(*x->last), PH_PAGE_SIZE));
    ph_os_free_pages(x->freed, PH_ALIGN_UP((x->pages_max + 63) / 64 * 8, PH_PAGE_SIZE));
    ph_os_free_pages(x->punched, PH_ALIGN_UP((x->pages_max + 63) / 64 * 8, PH_PAGE_SIZE));
    ph_os_free_pages(x->scratch, PH_ALIGN_UP(x->half_entries * sizeof(*x->scratch), PH_PAGE_SIZE));
}

/* Drops the reservations of a shared heap's log from live[] (an index of
 * an exclusive open: their processes are gone, their pages free). */
static uint64_t drop_reserved(ph_extent_rec *live, uint64_t n)
{
    uint64_t k = 0;
    for (uint64_t i = 0; i < n; i++)
        if (live[i].kind != PH_EXT_RESERVED)
            live[k++] = live[i];
    return k;
}

static int open_index(ph_space *sp, unsigned owner, ph_extents **out, ph_extent_slab_fn on_slab,
                      void *arg)
{
    ph_extents *x = malloc(sizeof(*x));
    if (!x)
        return ph_err(PHEAP_ENOMEM, "extent index: out of memory");
    int rc = extents_init(sp, x);
    ph_extent_rec *live = NULL;
    uint64_t n = 0;
    char why[256];
    if (!rc && ph_extent_log_audit(x, why, sizeof(why)))
        rc = ph_err(PHEAP_ECORRUPT, "%s", why);
    if (!rc)
        rc = ph_extent_log_replay(x, &live, &n, &x->tail);
    if (!rc && !owner) {
        uint64_t all = n;
        n = drop_reserved(live, n);
        x->dropped = all - n;
    }
    if (!rc)
        rc = ph_extent_index_build(x, live, n);
    for (uint64_t i = 0; !rc && on_slab && i < n; i++)
        if (live[i].kind == PH_EXT_SLAB)
            on_slab(arg, sp->data_off + live[i].page * PH_PAGE_SIZE, live[i].cls);
    free(live);
    if (rc) {
        ph_extents_fini(x);
        free(x);
        return rc;
    }
    x->owner = owner;
    *out = x;
    return 0;
}

int ph_extents_open(ph_space *sp, ph_extents **out, ph_extent_slab_fn on_slab, void *arg)
{
    return open_index(sp, 0, out, on_slab, arg);
}

int ph_extents_open_owned(ph_space *sp, unsigned owner, ph_extents **out)
{
    return open_index(sp, owner, out, NULL, NULL);
}

void ph_extents_purge_now(ph_extents *x)
{
    if (x->xplock) /* a shared heap's: no other process allocates meanwhile */
        (void)ph_extent_lock(x, NULL, 0, NULL);
    ph_extent_drain_released(x);
    if (x->dirty_since) /* something was freed in this open: purge it now */
        ph_extent_backing_purge(x);
    if (x->xplock)
        ph_extent_unlock(x, NULL, 0);
}

void ph_extents_close(ph_extents *x)
{
    if (!x)
        return;
    if (!x->xplock) /* a shared heap's purged before its process let its lease go */
        ph_extents_purge_now(x);
    ph_extents_fini(x);
    free(x);
}

/* ---- operations ------------------------------------------------------------- */

/* Appends the commit entry of reserved node n and stores *dest (flushed,
 * not fenced: the caller fences after dropping the lock). */
static void stage_commit(ph_extents *x, ph_pctx *c, ph_extnode *n, uint32_t kind, unsigned cls,
                         uint64_t *dest, uint64_t dest_val)
{
    /* The node stays RESERVED until its entry is in the log: a compaction
     * that ph_extent_log_append() may run first must not write it as live already. */
    n->cls = cls;
    x->freed[n->page / 64] &= ~(1ull << (n->page % 64));
    ph_extent_log_append(x, c, n, kind);
    n->kind = kind;
    if (dest) {
        ph_persist_write(&x->sp->persist, c, dest, dest_val);
        ph_persist_flush(&x->sp->persist, c, dest, sizeof(*dest));
    }
}

int ph_extent_alloc(ph_extents *x, ph_pctx *c, uint64_t bytes, uint32_t kind, unsigned cls,
                    uint64_t *dest, uint64_t *off)
{
    ph_extnode *n;
    int rc = ph_extent_lock(x, c, 1, NULL);
    if (!rc) /* a slab's chunk is aligned */
        rc = reserve_locked(x, c, bytes, kind == PH_EXT_SLAB ? PH_EXT_SLAB : PH_EXT_LARGE, 0, &n);
    if (!rc) {
        n->kind = PH_EXT_RESERVED;
        *off = off_of(x, n->page);
        stage_commit(x, c, n, kind, cls, dest, *off);
    }
    ph_extent_unlock(x, c, !rc);
    return rc;
}

int ph_extent_reserve(ph_extents *x, ph_pctx *c, uint64_t bytes, uint32_t kind, uint64_t *off)
{
    ph_extnode *n;
    int rc = ph_extent_lock(x, c, 1, NULL);
    if (!rc)
        rc = reserve_locked(x, c, bytes, kind == PH_EXT_SLAB ? PH_EXT_SLAB : PH_EXT_LARGE, 0, &n);
    if (!rc) {
        n->kind = PH_EXT_RESERVED;
        *off = off_of(x, n->page);
        if (x->owner) { /* every index must see it: logged, and fenced before the unlock */
            ph_extnode e = *n;
            e.cls = x->owner;
            ph_extent_log_append(x, c, &e, PH_EXT_RESERVED);
            n->cls = x->owner; /* logged (see compaction) */
            if (!x->xplock) /* else the unlock fences */
                ph_persist_fence(&x->sp->persist, c);
        }
    }
    ph_extent_unlock(x, c, !rc && x->xplock);
    return rc;
}

void ph_extent_commit(ph_extents *x, ph_pctx *c, uint64_t off, uint32_t kind, unsigned cls,
                      uint64_t *dest, uint64_t dest_val)
{
    (void)ph_extent_lock(x, c, 1, NULL); /* a sync that failed left this reservation as it was */
    stage_commit(x, c, x->head[page_of(x, off)], kind, cls, dest, dest_val);
    ph_extent_unlock(x, c, 1);
}

void ph_extent_commit_staged(ph_extents *x, ph_pctx *c, uint64_t off)
{
    (void)ph_extent_lock(x, c, 1, NULL);
    stage_commit(x, c, x->head[page_of(x, off)], PH_EXT_LARGE, 0, NULL, 0);
    ph_extent_unlock(x, c, x->xplock != NULL);
}

void ph_extent_commit_slabs(ph_extents *x, ph_pctx *c, const uint64_t *offs, unsigned n,
                            unsigned cls)
{
    n = PH_MIN(n, PH_EXT_COMMIT_MAX);
    (void)ph_extent_lock(x, c, 1, NULL);
    for (unsigned i = 0; i < n; i++)
        stage_commit(x, c, x->head[page_of(x, offs[i])], PH_EXT_SLAB, cls, NULL, 0);
    ph_extent_unlock(x, c, 1);
}

void ph_extent_cancel(ph_extents *x, ph_pctx *c, uint64_t off)
{
    (void)ph_extent_lock(x, c, 1, NULL);
    ph_extnode *n = x->head[page_of(x, off)];
    if (x->owner) {
        ph_extent_log_append(x, c, n, PH_EXT_FREE);
        if (!x->xplock) /* else the unlock fences */
            ph_persist_fence(&x->sp->persist, c);
    }
    ph_extent_index_make_free(x, n, 1);
    ph_extent_unlock(x, c, x->owner && x->xplock);
}

/* What is at `page` that is not the head of a live extent of `kind`. */
static int classify_locked(ph_extents *x, uint64_t off, uint32_t kind, ph_extnode **out)
{
    uint64_t page = page_of(x, off);
    if (off < x->sp->data_off || off >= ph_space_size(x->sp))
        return ph_err(PHEAP_ERANGE, "offset %llu is outside the heap's data region",
                      (unsigned long long)off);
    ph_extnode *n = off % PH_PAGE_SIZE ? NULL : x->head[page];
    if (n && n->kind == kind) {
        *out = n;
        return 0;
    }
    int was_freed = off % PH_PAGE_SIZE == 0 && (x->freed[page / 64] >> (page % 64)) & 1;
    if (n && n->kind == PH_EXT_RESERVED && was_freed) /* held by a free_from in flight */
        return ph_err(PHEAP_EDOUBLEFREE, "double free of the large block at %llu",
                      (unsigned long long)off);
    n = ph_extent_index_holding(x, page);
    if (n && n->kind != PH_EXT_FREE && n->kind != PH_EXT_ASIDE && !n->aside)
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
    int rc = ph_extent_free_staged(x, c, off, kind, dest, dest_val);
    if (rc)
        return rc;
    ph_persist_fence(&x->sp->persist, c); /* the entry, after the lock */
    if (!hold)
        ph_extent_release(x, c, off);
    return 0;
}

int ph_extent_free_staged(ph_extents *x, ph_pctx *c, uint64_t off, uint32_t kind, uint64_t *dest,
                          uint64_t dest_val)
{
    ph_extnode *n = NULL;
    int rc = ph_extent_lock(x, c, 1, NULL);
    if (!rc)
        rc = classify_locked(x, off, kind, &n);
    if (!rc) {
        /* Free in the log, not reusable before the fence -- nor, in a shared
         * heap, by another index before its release: there the entry is a
         * reservation of this process's (free to a recovery all the same). */
        ph_extnode e = *n; /* n stays as it is until its entry is in (see compaction) */
        e.cls = x->owner;
        ph_extent_log_append(x, c, &e, x->owner ? PH_EXT_RESERVED : PH_EXT_FREE);
        n->kind = PH_EXT_RESERVED;
        n->cls = x->owner;
        if (!x->dirty_since) /* the purge delay counts from the first free */
            x->dirty_since = ph_space_now(x->sp);
        if (kind == PH_EXT_LARGE)
            x->freed[n->page / 64] |= 1ull << (n->page % 64);
        if (dest) {
            ph_persist_write(&x->sp->persist, c, dest, dest_val);
            ph_persist_flush(&x->sp->persist, c, dest, sizeof(*dest));
        }
    }
    ph_extent_unlock(x, c, !rc && x->xplock);
    return rc;
}

void ph_extent_release(ph_extents *x, ph_pctx *c, uint64_t off)
{
    ph_space_unguard(x->sp, off); /* never hand out a page the program cannot write */
    if (x->owner) { /* the free the other indexes replay */
        (void)ph_extent_lock(x, c, 1, NULL);
        ph_extnode *n = x->head[page_of(x, off)];
        ph_extent_log_append(x, c, n, PH_EXT_FREE);
        if (!x->xplock) /* else the unlock fences */
            ph_persist_fence(&x->sp->persist, c);
        released(x, n);
        ph_extent_unlock(x, c, x->xplock != NULL);
        return;
    }
    /* The node is RESERVED, so no one else changes it or its head[] slot
     * (only free nodes merge): read it without the lock. */
    ph_extnode *n = x->head[page_of(x, off)];
    n->next = __atomic_load_n(&x->xreleased, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(&x->xreleased, &n->next, n, 1, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED))
        ;
}

int ph_extents_hold(ph_extents *x, ph_pctx *c, uint64_t off, uint32_t *kind, uint64_t *start)
{
    int rc = ph_extent_lock(x, c, 0, NULL);
    ph_extents_holding(x, off, kind, start);
    return rc;
}

void ph_extents_holding(ph_extents *x, uint64_t off, uint32_t *kind, uint64_t *start)
{
    const ph_extnode *n = off >= x->sp->data_off && off < ph_space_size(x->sp)
                              ? ph_extent_index_holding(x, page_of(x, off))
                              : NULL;
    *kind = n ? n->kind : PH_EXT_FREE;
    *start = n ? off_of(x, n->page) : 0;
}

void ph_extents_unhold(ph_extents *x, ph_pctx *c)
{
    ph_extent_unlock(x, c, 0);
}

uint64_t ph_extents_drop_owner(ph_extents *x, ph_pctx *c, unsigned owner)
{
    uint64_t dropped = 0, n = 0, cap = 0, *pages = NULL;
    (void)ph_extent_lock(x, c, 1, NULL); /* a failed sync: the reservations it knew */
    for (uint64_t p = 0; p < x->pages; p += x->head[p]->npages) {
        const ph_extnode *e = x->head[p];
        if (e->kind != PH_EXT_RESERVED || e->cls != owner)
            continue;
        if (n == cap) { /* collected first: each free merges nodes */
            uint64_t *v = realloc(pages, (cap = cap ? 2 * cap : 16) * sizeof(*v));
            if (!v)
                break; /* the rest at the next takeover */
            pages = v;
        }
        pages[n++] = p;
    }
    for (uint64_t i = 0; i < n; i++) {
        ph_extnode *e = x->head[pages[i]];
        ph_extent_log_append(x, c, e, PH_EXT_FREE);
        released(x, e);
        dropped++;
    }
    free(pages);
    ph_extent_unlock(x, c, dropped != 0);
    return dropped;
}

int ph_extent_claim(ph_extents *x, ph_pctx *c, uint64_t off, uint64_t bytes)
{
    uint64_t page = page_of(x, off), n = PH_ALIGN_UP(bytes, PH_PAGE_SIZE) / PH_PAGE_SIZE;
    int rc = ph_extent_lock(x, c, 1, NULL);
    if (rc)
        goto out;
    ph_extnode *f = ph_extent_index_holding(x, page);
    if (f && f->page == page && f->kind == PH_EXT_LARGE && f->npages == n)
        goto out; /* the commit was durable */
    if (f && f->page == page && f->kind == PH_EXT_RESERVED && f->npages == n && x->owner &&
        f->cls != x->owner) { /* a dead process's reservation (a takeover's replay) */
        stage_commit(x, c, f, PH_EXT_LARGE, 0, NULL, 0);
        goto out;
    }
    if (!f || f->kind != PH_EXT_FREE || page + n > f->page + f->npages) {
        rc = ph_err(PHEAP_ECORRUPT, "recovery: extent at %llu is neither live nor free",
                    (unsigned long long)off);
        goto out;
    }
    f = ph_extent_index_carve(x, f, page, n, PH_EXT_RESERVED, 0);
    if (!f) {
        rc = ph_err(PHEAP_ENOMEM, "extent index: out of memory");
    } else {
        stage_commit(x, c, f, PH_EXT_LARGE, 0, NULL, 0); /* fenced by the caller */
    }
out:
    ph_extent_unlock(x, c, !rc && x->xplock);
    return rc;
}

int ph_extent_lookup(ph_extents *x, uint64_t off, uint64_t *bytes)
{
    ph_extnode *n = NULL;
    int rc = ph_extent_lock(x, NULL, 1, NULL);
    if (!rc)
        rc = classify_locked(x, off, PH_EXT_LARGE, &n);
    if (!rc)
        *bytes = n->npages * PH_PAGE_SIZE;
    ph_extent_unlock(x, NULL, 0);
    return rc;
}

int ph_extent_large_start(const ph_extents *x, uint64_t off, uint64_t *bytes)
{
    if (off % PH_PAGE_SIZE || off < x->sp->data_off)
        return 0;
    uint64_t page = (off - x->sp->data_off) / PH_PAGE_SIZE;
    const ph_extnode *n = page < x->pages ? x->head[page] : NULL;
    if (!n || n->kind != PH_EXT_LARGE)
        return 0;
    *bytes = n->npages * PH_PAGE_SIZE;
    return 1;
}

int ph_extent_live_at(ph_extents *x, uint64_t off)
{
    if (off < x->sp->data_off || off >= ph_space_size(x->sp))
        return 0;
    (void)ph_extent_lock(x, NULL, 1, NULL); /* after a failed sync: what the index knew */
    ph_extnode *n = ph_extent_index_holding(x, page_of(x, off));
    int live = n && n->kind == PH_EXT_LARGE;
    ph_extent_unlock(x, NULL, 0);
    return live;
}

void ph_extents_walk(ph_extents *x, void (*fn)(void *arg, const ph_extnode *n), void *arg)
{
    (void)ph_extent_lock(x, NULL, 1, NULL);
    for (uint64_t p = 0; p < x->pages; p += x->head[p]->npages)
        fn(arg, x->head[p]);
    ph_extent_unlock(x, NULL, 0);
}

size_t ph_extents_copy(ph_extents *x, uint64_t page, ph_extnode *out, size_t max)
{
    size_t n = 0;
    (void)ph_extent_lock(x, NULL, 0, NULL);
    ph_extent_drain_released(x);
    /* `page` starts a node unless the index changed since the caller's
     * last copy: then the node holding it starts further back (nodes tile
     * the backed pages, and only a node's first page has a head). */
    uint64_t p = page;
    while (p < x->pages && p > 0 && !x->head[p])
        p--;
    for (; p < x->pages && x->head[p] && n < max; p += x->head[p]->npages)
        out[n++] = *x->head[p];
    ph_extent_unlock(x, NULL, 0);
    return n;
}

uint64_t ph_extents_largest_free(ph_extents *x, uint64_t *tail)
{
    uint64_t best = 0;
    (void)ph_extent_lock(x, NULL, 1, NULL);
    for (int b = PH_EXT_BINS - 1; b >= 0 && !best; b--)
        for (ph_extnode *f = x->bins[b]; f; f = f->next)
            best = PH_MAX(best, f->npages);
    const ph_extnode *last = x->pages ? x->last[x->pages - 1] : NULL;
    *tail = last && last->kind == PH_EXT_FREE ? last->npages : 0;
    ph_extent_unlock(x, NULL, 0);
    return best;
}

int ph_extents_check(ph_extents *x, char *err, size_t errlen)
{
    ph_extent_rec *live = NULL;
    uint64_t n = 0, i = 0, free_pages = 0, p = 0, used;
    int bad = ph_extent_lock(x, NULL, 1, NULL);
    if (bad)
        snprintf(err, errlen, "%s", pheap_errmsg());
    if (!bad)
        bad = ph_extent_log_audit(x, err, errlen);
    if (!bad && ph_extent_log_replay(x, &live, &n, &used) != 0) {
        snprintf(err, errlen, "%s", pheap_errmsg());
        bad = 1;
    }
    if (!bad && !x->owner) /* reservations of processes gone: free space */
        n = drop_reserved(live, n);
    for (p = 0; !bad && p < x->pages;) {
        const ph_extnode *e = x->head[p];
        if (!e || e->page != p || e->npages == 0 || x->last[p + e->npages - 1] != e) {
            snprintf(err, errlen, "extent index: no extent starts at page %llu", (unsigned long long)p);
            bad = 1;
            break;
        }
        if (e->kind == PH_EXT_ASIDE) {
            /* in no log entry */
        } else if (e->kind == PH_EXT_FREE) {
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
    ph_extent_unlock(x, NULL, 0);
    return bad;
}
