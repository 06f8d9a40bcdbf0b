/*
 * engine.c -- allocation and free of small and large blocks, thread-cache
 * refill and flush, slab creation and release, the logged operations, and
 * the rebuild of all volatile state at open.
 *
 * Durability of each call (LOG mode):
 *   small alloc / free      one bitmap word, persisted: 1 fence
 *   large alloc / free      one extent-log entry, persisted: 1 fence
 *   alloc_to / free_from    lane entry (F1), in-place changes (F2), retire
 *                           (F3): see log/lane.c
 *   with an initialiser     the block is filled and its lines flushed before
 *                           the fence that commits it (the bitmap word, the
 *                           extent-log entry, or F1): no fence more
 *   slab creation           descriptor (fence), then its extent-log entry
 *                           (fence): the slab exists once the entry does
 *   slab release            one extent-log entry (fence), only when no
 *                           block of the slab is allocated or cached
 * Locks, in order: arena -> extent index -> growth.  Thread caches need none.
 */
#include "alloc/engine_int.h"
#include "alloc/engine_share.h"

#include "alloc/morph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "os/os.h"
#include "pheap.h"
#include "util/crc32c.h"
#include "util/error.h"

#define PH_ARENAS_MAX 64u
#define PH_SIM_ARENAS 4u /* simulated heaps: the same on every machine */
#define PH_SLAB_BATCH 8u
_Static_assert(PH_SLAB_BATCH <= PH_EXT_COMMIT_MAX, "slab batch fits one commit");


/* ---- arenas and slabs ------------------------------------------------------- */

static void partial_push(ph_arena *a, ph_slab *s)
{
    if (s->evac) /* set aside until ph_engine_evacuate_end */
        return;
    unsigned cls = s->xcls;
    s->prev = NULL;
    s->next = a->partial[cls];
    if (s->next)
        s->next->prev = s;
    a->partial[cls] = s;
    s->in_partial = 1;
}

/* No block of s is allocated or cached: every block of its class is
 * available, and no old block is left -- an old block may lie past the
 * class's last block, where no pin keeps the count up (alloc/morph.h). */
static int slab_empty(const ph_slab *s)
{
    return s->navail == s->nblocks && !ph_load_relaxed(&s->xold_live);
}

static void partial_remove(ph_arena *a, ph_slab *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        a->partial[s->xcls] = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->next = s->prev = NULL;
    s->in_partial = 0;
}

/* Slabs made at once for a class whose arena has made `made` before: one
 * at first, more for a hot class, so that its allocations pay the cost of
 * making slabs (two fences, descriptor page faults) rarely. */
static unsigned slab_batch(uint32_t made)
{
    return made < 2 ? 1 : made < 8 ? 2 : made < 32 ? 4 : PH_SLAB_BATCH;
}

/* Gives the chunk of empty slab s back to free space (arena lock held; s
 * off its partial list and out of the chunk map).  In GC mode its
 * descriptor may still record blocks allocated at the last clean close:
 * it is zeroed durably first, so that no chunk outside a slab has
 * allocated blocks in its descriptor (see pheap_check). */
static int slab_release(ph_engine *e, ph_pctx *c, ph_slab *s)
{
    if (e->gc) {
        ph_slab_zero_desc(e->sp, c, s);
        ph_persist_fence(&e->sp->persist, c);
    }
    int rc = ph_extent_free(e->ext, c, s->off, PH_EXT_SLAB, NULL, 0, 0);
    if (!rc && e->shared) /* after: no one may adopt a slab on its way out */
        ph_engine_share_disown(e, s);
    return rc;
}

/* Makes chunk `off` slab s in the chunk map, or no slab (s NULL); in GC
 * mode in gc_slabs too. */
static void chunk_set(ph_engine *e, uint64_t off, ph_slab *s)
{
    uint64_t ch = ph_engine_chunk_of(e, off);
    ph_store(&e->chunks[ch], s);
    if (e->gc)
        ph_store(&e->gc_slabs[ch], ph_gc_slab_tag(s));
}

/* Releases the empty slabs of arena a (lock held); returns how many. */
static unsigned release_empty(ph_engine *e, ph_pctx *c, ph_arena *a)
{
    unsigned n = 0;
    for (unsigned cls = 0; cls < PH_CLASSES; cls++) {
        for (ph_slab *s = a->partial[cls], *next; s; s = next) {
            next = s->next;
            if (!slab_empty(s))
                continue;
            partial_remove(a, s);
            chunk_set(e, s->off, NULL);
            if (slab_release(e, c, s) == 0)
                n++;
        }
    }
    return n;
}

/* Makes new slabs of class cls for arena ai (lock held) and returns one.
 * Crash protocol: every descriptor is written and fenced first, then the
 * slabs' extent-log entries are appended and fenced together: a slab
 * exists once its entry does, and its descriptor is durable by then. */
static int slab_create(ph_engine *e, ph_pctx *c, unsigned ai, unsigned cls, ph_slab **out)
{
    ph_arena *a = &e->arenas[ai];
    uint64_t offs[PH_SLAB_BATCH];
    unsigned want = slab_batch(a->made[cls]), n = 0;
    int rc = 0, damaged = 0;
    while (n < want) {
        rc = ph_extent_reserve(e->ext, c, PH_CHUNK_SIZE, PH_EXT_SLAB, &offs[n]);
        if ((rc == PHEAP_ENOMEM || rc == PHEAP_ENOSPC) && n == 0 && release_empty(e, c, a) > 0)
            continue; /* this arena's empty slabs of other classes made room */
        if (rc == PHEAP_ECORRUPT) /* a damaged chunk, set aside: the caller reports it */
            damaged = rc;
        if (rc)
            break;
        uint64_t ch = ph_engine_chunk_of(e, offs[n]);
        if (!e->slabs[ch] && !(e->slabs[ch] = ph_slab_new(e->sp, offs[n]))) {
            ph_extent_cancel(e->ext, c, offs[n]);
            rc = ph_err(PHEAP_ENOMEM, "out of memory for a slab");
            break;
        }
        if (e->gc) /* its descriptor may differ from the copy: zero it all */
            e->slabs[ch]->bits_known = 0;
        ph_slab_format(e->sp, c, e->slabs[ch], cls);
        if (e->shared) /* before its commit: no one may adopt it as a slab no one owns */
            ph_engine_share_own(e, e->slabs[ch]);
        n++;
    }
    if (n == 0)
        return damaged ? damaged : rc;
    /* After damage, the slabs made so far are committed still and wait in
     * the partial list; the caller reports the damage. */
    if (ph_plant("slab-commit-before-desc")) /* planted: the two persists swapped */
        ph_extent_commit_slabs(e->ext, c, offs, n, cls);
    if (!ph_plant("slab-no-desc-fence")) /* planted: a fence left out */
        ph_persist_fence(&e->sp->persist, c); /* descriptors durable before the commit */
    if (!ph_plant("slab-commit-before-desc"))
        ph_extent_commit_slabs(e->ext, c, offs, n, cls);
    for (unsigned i = 0; i < n; i++) {
        ph_slab *s = e->slabs[ph_engine_chunk_of(e, offs[i])];
        s->arena = ai;
        partial_push(a, s);
        chunk_set(e, offs[i], s);
        *out = s;
    }
    a->made[cls] += n;
    return damaged;
}

/* Slabs of other classes a refill looks at for one to morph, and the
 * least share of the new class's blocks a morph must make available
 * (1 / PH_MORPH_MIN_YIELD). */
#define PH_MORPH_SCAN 4096u
#define PH_MORPH_MIN_YIELD 4u

/* A slab of arena a (lock held) to morph to class cls: of another class
 * that may morph, empty or with other partial slabs of its class in the
 * arena (a class with one slab in use left may be in use still), at most
 * a quarter of its bytes allocated, with every free block available (none
 * in a thread cache or an operation in flight) and no old block of an
 * earlier morph -- the emptiest of the first PH_MORPH_SCAN looked at;
 * NULL if none.  An empty slab so serves another class at once. */
static ph_slab *morph_candidate(ph_arena *a, unsigned cls)
{
    ph_slab *best = NULL;
    uint32_t best_used = 0, seen = 0;
    for (unsigned k = 0; k < PH_CLASSES && seen < PH_MORPH_SCAN; k++) {
        if (!ph_morph_classes_ok(k, cls))
            continue;
        for (ph_slab *s = a->partial[k]; s && seen < PH_MORPH_SCAN; s = s->next, seen++) {
            uint32_t used = (s->nblocks - s->navail) * s->block_size;
            if (used > PH_CHUNK_SIZE / 4 || (best && used >= best_used) ||
                (!s->next && !s->prev && used) || ph_load_relaxed(&s->xold_live))
                continue;
            if (ph_slab_live(s) != s->nblocks - s->navail)
                continue; /* blocks in caches or in flight */
            best = s;
            best_used = used;
        }
    }
    return best;
}

/* Morphs a slab of arena ai (lock held) to class cls instead of making a
 * new one, so that space stranded in slabs of classes no longer in demand
 * serves this one before fresh space does; 1 if it did. */
static int try_morph(ph_engine *e, ph_pctx *c, unsigned ai, unsigned cls, ph_slab **out)
{
    ph_arena *a = &e->arenas[ai];
    if (!e->morph || ph_class_blocks(cls) > PH_MORPH_MAX_BLOCKS)
        return 0;
    ph_slab *s = morph_candidate(a, cls);
    if (!s || ph_morph_yield(s, cls) < PH_MAX(ph_class_blocks(cls) / PH_MORPH_MIN_YIELD, 1u))
        return 0; /* too little of it free for this class: kept for one it suits */
    partial_remove(a, s);
    if (!ph_morph(e->sp, c, s, cls)) { /* a free of one of its blocks is not finished */
        partial_push(a, s);
        return 0;
    }
    __atomic_fetch_add(&e->xmorphs, 1, __ATOMIC_RELAXED);
    if (s->navail)
        partial_push(a, s);
    *out = s;
    return s->navail != 0;
}

/* Gives an empty slab's chunk back when its arena has another slab of the
 * class to allocate from (arena lock held). */
static void maybe_release(ph_engine *e, ph_pctx *c, ph_arena *a, ph_slab *s)
{
    if (!slab_empty(s) || (!s->next && !s->prev))
        return;
    partial_remove(a, s);
    chunk_set(e, s->off, NULL);
    if (slab_release(e, c, s) != 0) {
        /* Cannot happen while the index is consistent; keep the slab. */
        chunk_set(e, s->off, s);
        partial_push(a, s);
    }
}

int ph_engine_slab_census(ph_engine *e, uint64_t off, ph_slab_census *out)
{
    ph_slab *s = ph_engine_chunk_slab(e, off);
    if (!s)
        return 0;
    out->chunk = s->off;
    out->cls = ph_load_relaxed(&s->xcls);
    out->nblocks = ph_load_relaxed(&s->nblocks);
    out->live = ph_slab_live(s) + ph_load_relaxed(&s->xold_live);
    out->room = out->nblocks - ph_slab_taken(s);
    return 1;
}

int ph_engine_evacuate(ph_engine *e, uint64_t chunk)
{
    ph_slab *s = ph_engine_chunk_slab(e, chunk);
    if (!s || s->off != chunk)
        return 0;
    ph_arena *a = &e->arenas[s->arena];
    pthread_mutex_lock(&a->lock);
    int ok = ph_engine_chunk_slab(e, chunk) == s && !s->evac;
    if (ok) {
        if (s->in_partial)
            partial_remove(a, s);
        s->evac = 1;
    }
    pthread_mutex_unlock(&a->lock);
    return ok;
}

int ph_engine_evacuate_end(ph_engine *e, ph_pctx *c, uint64_t chunk)
{
    ph_slab *s = ph_engine_chunk_slab(e, chunk);
    if (!s || s->off != chunk)
        return 0;
    ph_arena *a = &e->arenas[s->arena];
    int released = 0;
    pthread_mutex_lock(&a->lock);
    s->evac = 0;
    if (slab_empty(s)) {
        chunk_set(e, s->off, NULL);
        released = slab_release(e, c, s) == 0;
        if (!released) /* cannot happen while the index is consistent: keep it */
            chunk_set(e, s->off, s);
    }
    if (!released && s->navail)
        partial_push(a, s);
    pthread_mutex_unlock(&a->lock);
    return released;
}

void ph_engine_old_freed(ph_engine *e, ph_pctx *c, ph_slab *s, uint32_t j)
{
    uint32_t idx[PH_MORPH_MAX_BLOCKS];
    int none_left;
    uint32_t n = ph_morph_unpin(e->sp, c, s, j, idx, &none_left);
    if (!n && !none_left)
        return;
    ph_arena *a = &e->arenas[s->arena]; /* blocks to hand out, or the slab may be empty now */
    pthread_mutex_lock(&a->lock);
    for (uint32_t k = 0; k < n; k++)
        ph_slab_give(s, s->off + (uint64_t)idx[k] * s->block_size);
    if (!s->in_partial && s->navail)
        partial_push(a, s);
    maybe_release(e, c, a, s);
    pthread_mutex_unlock(&a->lock);
}

/* Returns cached blocks to their slabs. */
static void give_back(ph_engine *e, ph_pctx *c, const uint64_t *v, uint32_t n)
{
    ph_arena *locked = NULL;
    for (uint32_t i = 0; i < n; i++) {
        ph_slab *s = ph_engine_chunk_slab(e, v[i]);
        ph_arena *a = &e->arenas[s->arena];
        if (a != locked) {
            if (locked)
                pthread_mutex_unlock(&locked->lock);
            pthread_mutex_lock(&a->lock);
            locked = a;
        }
        if (e->gc && !ph_slab_gc_return(s, v[i])) {
            __atomic_fetch_add(&e->xgc_double_frees, 1, __ATOMIC_RELAXED);
            continue; /* a double free the cache held twice: once is enough */
        }
        ph_slab_give(s, v[i]);
        if (!s->in_partial)
            partial_push(a, s);
        maybe_release(e, c, a, s);
    }
    if (locked)
        pthread_mutex_unlock(&locked->lock);
}

#define PH_XFER_MAX 64u /* batches kept per class; more go back to the slabs */

/* Drops the n oldest blocks of bin b (its bottom), which went elsewhere. */
static void tbin_drop_oldest(ph_tbin *b, uint32_t n)
{
    uint32_t left = ph_tbin_count(b) - n;
    memmove(b->v, b->v + n, left * sizeof(*b->v));
    ph_tbin_set_count(b, left);
}

/* GC mode: moves the `n` oldest blocks of bin b into a transfer batch;
 * 0 when there are enough batches of the class already (or no memory). */
static int batch_put(ph_engine *e, unsigned cls, ph_tbin *b, uint32_t n)
{
    if (ph_load_relaxed(&e->xfer_n[cls]) >= PH_XFER_MAX)
        return 0;
    ph_batch *q = malloc(sizeof(*q) + n * sizeof(uint64_t));
    if (!q)
        return 0;
    q->n = n;
    memcpy(q->v, b->v, n * sizeof(uint64_t));
    /* counted before a taker can count them out */
    __atomic_fetch_add(&e->xxfer_blocks, n, __ATOMIC_RELAXED);
    __atomic_fetch_add(&e->xxfer_bytes, (uint64_t)n * ph_class_size[cls], __ATOMIC_RELAXED);
    pthread_mutex_lock(&e->xfer_lock);
    q->next = e->xfer[cls];
    e->xfer[cls] = q;
    ph_store_relaxed(&e->xfer_n[cls], e->xfer_n[cls] + 1);
    pthread_mutex_unlock(&e->xfer_lock);
    tbin_drop_oldest(b, n);
    return 1;
}

/* GC mode: fills bin b from a transfer batch of its class, if there is
 * one that fits; returns whether one came. */
static int batch_take(ph_engine *e, unsigned cls, ph_tbin *b)
{
    if (!ph_load_relaxed(&e->xfer_n[cls]))
        return 0;
    pthread_mutex_lock(&e->xfer_lock);
    ph_batch *q = e->xfer[cls];
    if (q && q->n <= ph_tbin_cap(b) - ph_tbin_count(b)) {
        e->xfer[cls] = q->next;
        ph_store_relaxed(&e->xfer_n[cls], e->xfer_n[cls] - 1);
    } else {
        q = NULL;
    }
    pthread_mutex_unlock(&e->xfer_lock);
    if (!q)
        return 0;
    memcpy(b->top, q->v, q->n * sizeof(uint64_t));
    ph_tbin_set_count(b, ph_tbin_count(b) + q->n);
    __atomic_fetch_sub(&e->xxfer_blocks, q->n, __ATOMIC_RELAXED);
    __atomic_fetch_sub(&e->xxfer_bytes, (uint64_t)q->n * ph_class_size[cls], __ATOMIC_RELAXED);
    free(q);
    return 1;
}

void ph_engine_drain_batches(ph_engine *e, ph_pctx *c)
{
    for (unsigned cls = 0; cls < PH_CLASSES; cls++) {
        pthread_mutex_lock(&e->xfer_lock);
        ph_batch *q = e->xfer[cls];
        e->xfer[cls] = NULL;
        ph_store_relaxed(&e->xfer_n[cls], 0);
        pthread_mutex_unlock(&e->xfer_lock);
        while (q) {
            ph_batch *next = q->next;
            give_back(e, c, q->v, q->n);
            __atomic_fetch_sub(&e->xxfer_blocks, q->n, __ATOMIC_RELAXED);
            __atomic_fetch_sub(&e->xxfer_bytes, (uint64_t)q->n * ph_class_size[cls],
                               __ATOMIC_RELAXED);
            free(q);
            q = next;
        }
    }
}

/* ---- thread caches ------------------------------------------------------------ */

static int tcache_init(ph_engine *e, ph_tcache *t)
{
    uint32_t total = 0;
    for (unsigned k = 0; k < PH_CLASSES; k++)
        total += ph_tcache_cap(k, e->gc);
    t->store = malloc(total * sizeof(uint64_t));
    if (!t->store)
        return ph_err(PHEAP_ENOMEM, "out of memory for a thread cache");
    uint64_t *p = t->store;
    for (unsigned k = 0; k < PH_CLASSES; k++) {
        ph_tbin *b = &t->bins[k];
        b->end = p + ph_tcache_cap(k, e->gc);
        ph_store_relaxed(&b->top, p); /* pheap_stats may read them */
        ph_store_relaxed(&b->v, p);
        p = b->end;
    }
    return 0;
}

/* Moves available blocks of class cls from arena ai into bin b, up to
 * `want`, making slabs when `create`; returns whether any block came. */
static int take_blocks(ph_engine *e, ph_pctx *c, unsigned ai, unsigned cls, ph_tbin *b,
                       uint32_t want, int create)
{
    ph_arena *a = &e->arenas[ai];
    uint32_t before = ph_tbin_count(b);
    pthread_mutex_lock(&a->lock);
    while (ph_tbin_count(b) < want) {
        ph_slab *s = a->partial[cls];
        if (!s && e->shared && (s = ph_engine_share_refill(e, c, ai, cls)) != NULL)
            partial_push(a, s); /* others freed blocks of its, or no one owned it */
        if (!s && (!create || (!try_morph(e, c, ai, cls, &s) &&
                               slab_create(e, c, ai, cls, &s) != 0)))
            break;
        uint32_t got = ph_slab_take(s, b->top, want - ph_tbin_count(b));
        for (uint32_t k = 0; e->gc && k < got; k++)
            ph_slab_gc_hold(s, b->top[k]);
        ph_tbin_set_count(b, ph_tbin_count(b) + got);
        if (s->navail == 0)
            partial_remove(a, s);
    }
    pthread_mutex_unlock(&a->lock);
    return ph_tbin_count(b) > before;
}

static int reclaim(ph_engine *e, ph_tcache *t, ph_pctx *c);

/* Moves available blocks of class cls from the thread's preferred slabs
 * (whatever their arena) into bin b, up to `want`; whether any came. */
static int take_preferred(ph_engine *e, const ph_tcache *t, unsigned cls, ph_tbin *b,
                          uint32_t want)
{
    uint32_t before = ph_tbin_count(b);
    for (uint32_t k = 0; k < t->nprefer && ph_tbin_count(b) < want; k++) {
        ph_slab *s = ph_engine_chunk_slab(e, t->prefer[k]);
        if (!s || ph_load_relaxed(&s->xcls) != cls)
            continue;
        ph_arena *a = &e->arenas[s->arena];
        pthread_mutex_lock(&a->lock);
        if (ph_engine_chunk_slab(e, t->prefer[k]) == s && s->xcls == cls && !s->evac) {
            uint32_t n = ph_tbin_count(b);
            ph_tbin_set_count(b, n + ph_slab_take(s, b->top, want - n));
            if (s->navail == 0 && s->in_partial)
                partial_remove(a, s);
        }
        pthread_mutex_unlock(&a->lock);
    }
    return ph_tbin_count(b) > before;
}

/* A thread's home arena: the current CPU's, unless another arena has fewer
 * threads -- threads that first run on the same CPU (as new threads often
 * do) would otherwise share one arena for life, and its slabs' words.  The
 * count is claimed by compare-and-swap: threads that start together would
 * otherwise all see the same least-loaded arena and pile into it. */
static unsigned pick_arena(ph_engine *e)
{
    /* Simulated heaps start from arena 0: the same calls must give the
     * same fences whatever CPU the thread runs on. */
    unsigned home = e->sp->sim ? 0 : ph_os_current_cpu() % e->narenas;
    for (;;) {
        unsigned best = home;
        uint32_t least = ph_load_relaxed(&e->arenas[best].xthreads);
        for (unsigned k = 1; k < e->narenas && least > 0; k++) {
            unsigned a = (home + k) % e->narenas;
            uint32_t n = ph_load_relaxed(&e->arenas[a].xthreads);
            if (n < least) {
                least = n;
                best = a;
            }
        }
        if (__atomic_compare_exchange_n(&e->arenas[best].xthreads, &least, least + 1, 0,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return best;
    }
}

/* Fills half of a class's cache from the arena of the current CPU; when it
 * has no block and no room for a slab, from the other arenas, and at last
 * after reclaiming empty slabs.  Returns a block or 0 (heap full, error
 * set). */
ph_noinline uint64_t ph_engine_refill(ph_engine *e, ph_tcache *t, ph_pctx *c, unsigned cls)
{
    if (!t->store && tcache_init(e, t) != 0)
        return 0;
    ph_tbin *b = &t->bins[cls];
    uint32_t want = ph_tbin_cap(b) / 2 ? ph_tbin_cap(b) / 2 : 1;
    /* A thread keeps the arena it first refilled from: moving with the
     * scheduler would make slabs in every arena it visits. */
    if (t->arena < 0)
        t->arena = (int)pick_arena(e);
    if (e->gc && batch_take(e, cls, b))
        return ph_tcache_pop(t, cls);
    if (ph_unlikely(t->prefer) && take_preferred(e, t, cls, b, want))
        return ph_tcache_pop(t, cls);
    unsigned ai = (unsigned)t->arena;
    if (!take_blocks(e, c, ai, cls, b, want, 1)) {
        int err = pheap_errno();
        if (err == PHEAP_ECORRUPT) /* a damaged descriptor met: this call reports it */
            return 0;
        for (unsigned k = 1; k < e->narenas && !ph_tbin_count(b); k++)
            take_blocks(e, c, (ai + k) % e->narenas, cls, b, want, 0);
        if (!ph_tbin_count(b) && reclaim(e, t, c) && !take_blocks(e, c, ai, cls, b, want, 1) &&
            pheap_errno() == PHEAP_ECORRUPT)
            return 0;
        if (!ph_tbin_count(b))
            ph_err(err, "%s", pheap_errmsg()); /* keep the heap-full message */
    }
    return ph_tcache_pop(t, cls);
}

/* Caches a freed block; when the class's cache is full, the older half
 * goes to a transfer batch (GC mode) or back to the slabs first. */
void ph_engine_cache_block(ph_engine *e, ph_tcache *t, ph_pctx *c, unsigned cls, uint64_t off)
{
    if (ph_likely(ph_tcache_push(t, cls, off)))
        return;
    if (!t->store) {
        if (tcache_init(e, t) == 0 && ph_tcache_push(t, cls, off))
            return;
        give_back(e, c, &off, 1);
        return;
    }
    ph_tbin *b = &t->bins[cls];
    uint32_t half = ph_tbin_count(b) / 2;
    if (!e->gc || !batch_put(e, cls, b, half)) {
        give_back(e, c, b->v, half);
        tbin_drop_oldest(b, half);
    }
    ph_tcache_push(t, cls, off);
}

/* Returns every block of a thread cache to its slab. */
static void tcache_drain(ph_engine *e, ph_tcache *t, ph_pctx *c)
{
    for (unsigned k = 0; t->store && k < PH_CLASSES; k++) {
        give_back(e, c, t->bins[k].v, ph_tbin_count(&t->bins[k]));
        ph_tbin_set_count(&t->bins[k], 0);
    }
}

void ph_engine_drain_cache(ph_engine *e, ph_tcache *t, ph_pctx *c)
{
    tcache_drain(e, t, c);
}

/* A GC heap's exiting thread hands each class's cache on whole, as a
 * transfer batch for the next refill of any thread: its blocks stay held,
 * so their slabs are neither emptied and released (a fence each) nor made
 * again by the threads that come next (a server's short-lived workers).
 * What the batches cannot take goes back to the slabs. */
static void tcache_hand_on(ph_engine *e, ph_tcache *t, ph_pctx *c)
{
    for (unsigned k = 0; e->gc && t->store && k < PH_CLASSES; k++)
        if (ph_tbin_count(&t->bins[k]))
            batch_put(e, k, &t->bins[k], ph_tbin_count(&t->bins[k]));
    tcache_drain(e, t, c);
}

void ph_engine_thread_exit(ph_engine *e, ph_tcache *t, ph_pctx *c)
{
    tcache_hand_on(e, t, c);
    if (t->arena >= 0) {
        __atomic_fetch_sub(&e->arenas[t->arena].xthreads, 1, __ATOMIC_RELAXED);
        t->arena = -1;
    }
    if (t->lane.index >= 0) {
        ph_lane_settle_own(&e->lanes, c, &t->lane); /* before a new holder zeroes it */
        pthread_mutex_lock(&e->lane_lock);
        e->lane_used[t->lane.index] = 0;
        if (e->shared) /* its entries are retired: no survivor has anything to replay */
            __atomic_store_n(&e->share.lanes[t->lane.index], 0, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&e->lane_lock);
        t->lane.index = -1;
    }
}

/* ---- errors of small offsets ------------------------------------------------- */

/* Why `off`, inside slab s but not a block start, cannot be freed. */
static int bad_small(const ph_slab *s, uint64_t off, uint32_t i)
{
    if (i < s->nblocks)
        return ph_err(PHEAP_EINTERIOR, "offset %llu is inside the %u-byte block at %llu",
                      (unsigned long long)off, s->block_size,
                      (unsigned long long)(s->off + (uint64_t)i * s->block_size));
    return ph_err(PHEAP_ENOTALLOC, "offset %llu is in the unused tail of a slab",
                  (unsigned long long)off);
}

int ph_engine_clear_error(int rc, uint64_t off)
{
    return ph_slab_free_error(rc, off);
}

/* 0 and *r when `off` starts a live block of slab s (of its class, or an
 * old block of a morphed slab). */
int ph_engine_live_small(const ph_slab *s, uint64_t off, ph_blockref *r)
{
    ph_slab_resolve(s, off, r);
    if (!r->exact)
        return bad_small(s, off, r->index);
    int rc = r->old ? 0 : ph_slab_pair_error(ph_slab_bits(s, r->index));
    return rc ? ph_engine_clear_error(rc, off) : 0;
}

unsigned ph_engine_small_at(const ph_slab *s, uint64_t off, uint64_t *start, uint32_t *size)
{
    for (;;) {
        uint32_t gen = ph_load(&s->xgen), rel = (uint32_t)(off - s->off), w, sh;
        if (ph_unlikely(gen & 1)) {
            ph_morph_wait(s);
            continue;
        }
        unsigned bits = 0;
        *size = 0;
        if (ph_unlikely(ph_load_relaxed(&s->xold_live))) {
            uint32_t os = ph_load_relaxed(&s->old_size);
            uint32_t j = (uint32_t)(((uint64_t)rel * ph_load_relaxed(&s->old_magic)) >> 32);
            ph_morph_bitpos(j, &w, &sh);
            if (j < ph_load_relaxed(&s->old_nblocks) && ((ph_load(&s->bits[w]) >> sh) & 1)) {
                *start = s->off + (uint64_t)j * os;
                *size = os;
                bits = 3;
            }
        }
        if (!bits) {
            int exact;
            uint32_t i = ph_slab_index(s, off, &exact), bs = ph_load_relaxed(&s->block_size);
            if (i < ph_load_relaxed(&s->nblocks)) {
                bits = ph_slab_bits(s, i);
                *start = s->off + (uint64_t)i * bs;
                *size = bs;
            }
        }
        ph_seq_read();
        if (ph_likely(ph_load_relaxed(&s->xgen) == gen))
            return bits;
    }
}

int ph_engine_clear_block(ph_space *sp, ph_pctx *c, ph_slab *s, const ph_blockref *r)
{
    if (!r->old)
        return ph_slab_clear_locked(sp, c, s, r->word, r->shift);
    uint64_t v = s->bits[r->word], bit = 1ull << r->shift;
    if (!(v & bit))
        return PHEAP_EDOUBLEFREE;
    ph_store(&s->bits[r->word], v & ~bit);
    ph_persist_store_nt(&sp->persist, c, &s->desc->xbits[r->word], v & ~bit);
    return 0;
}

/* ---- allocation and free ------------------------------------------------------ */

void ph_engine_release_empty_slabs(ph_engine *e, ph_pctx *c)
{
    for (unsigned i = 0; i < e->narenas; i++) {
        pthread_mutex_lock(&e->arenas[i].lock);
        release_empty(e, c, &e->arenas[i]);
        pthread_mutex_unlock(&e->arenas[i].lock);
    }
}

void ph_engine_rebuild_partials(ph_engine *e)
{
    for (unsigned a = 0; a < e->narenas; a++)
        memset(e->arenas[a].partial, 0, sizeof(e->arenas[a].partial));
    for (uint64_t ch = 0; ch < ph_engine_backed_chunks(e); ch++) {
        ph_slab *s = e->chunks[ch];
        if (!s)
            continue;
        s->in_partial = 0;
        s->next = s->prev = NULL;
        if (s->navail)
            partial_push(&e->arenas[s->arena], s);
    }
}

/* When the heap is full: returns the calling thread's cached blocks to
 * their slabs, then every arena's empty slabs to free space; returns
 * whether any slab was released. */
static int reclaim(ph_engine *e, ph_tcache *t, ph_pctx *c)
{
    unsigned n = 0;
    tcache_drain(e, t, c);
    ph_engine_drain_batches(e, c);
    for (unsigned i = 0; i < e->narenas; i++) {
        pthread_mutex_lock(&e->arenas[i].lock);
        n += release_empty(e, c, &e->arenas[i]);
        pthread_mutex_unlock(&e->arenas[i].lock);
    }
    return n > 0;
}

/* After an initialiser, which may call pheap: the destination word must
 * not have become pheap's own meanwhile (its block freed by the program,
 * and made a segment). */
static int dest_still_ok(ph_engine *e, uint64_t dest_off)
{
    if (ph_likely(!ph_space_guarded_overlap(e->sp, dest_off, 8)))
        return 0;
    return ph_err(PHEAP_EINVAL, "the destination word at %llu is in a block that holds pheap's "
                  "own metadata now (the initialiser freed its block?): allocation canceled",
                  (unsigned long long)dest_off);
}

/* Fills a block that is not committed yet (see ph_block_init) and flushes
 * its lines without a fence: the fence that commits the allocation makes
 * them durable, so no crash image holds the block allocated (or published)
 * with other contents.  0, or PHEAP_ECANCELED when the initialiser refused
 * (the caller gives the block back). */
static int init_block(ph_engine *e, ph_pctx *c, const ph_block_init *ini, uint64_t off,
                      uint64_t usable)
{
    void *p = ph_space_at(e->sp, off);
    if (ini->zero)
        memset(p, 0, usable);
    int r = ini->fn ? ini->fn(ini->arg, p, usable) : 0;
    if (r)
        return ph_err(PHEAP_ECANCELED, "the initialiser returned %d: allocation canceled", r);
    if (!e->gc) /* GC mode makes nothing durable for the program */
        ph_persist_flush(&e->sp->persist, c, p, usable);
    return 0;
}

/* The lane entry's check of an initialised block's contents: an entry
 * evicted to media before its fence may be durable while some of the
 * block's lines are not, and recovery must then not publish the block. */
static uint64_t contents_check(ph_engine *e, uint64_t off, uint64_t bytes)
{
    return PH_LOG_CONTENTS | ph_crc32c(0, ph_space_at(e->sp, off), bytes);
}

/* A large extent reserved in the index (nothing durable yet), or 0 with
 * the error set; the heap is reclaimed once when full. */
int ph_engine_reserve_large(ph_engine *e, ph_tcache *t, ph_pctx *c, size_t size, uint64_t *off)
{
    int rc = ph_extent_reserve(e->ext, c, size, PH_EXT_LARGE, off);
    if ((rc == PHEAP_ENOMEM || rc == PHEAP_ENOSPC) && reclaim(e, t, c))
        rc = ph_extent_reserve(e->ext, c, size, PH_EXT_LARGE, off);
    return rc;
}

static ph_noinline uint64_t alloc_large(ph_engine *e, ph_tcache *t, ph_pctx *c, size_t size,
                                        const ph_block_init *init)
{
    uint64_t off = 0;
    if (!init) { /* reserve and commit under one hold of the index lock */
        int rc = ph_extent_alloc(e->ext, c, size, PH_EXT_LARGE, 0, NULL, &off);
        if ((rc == PHEAP_ENOMEM || rc == PHEAP_ENOSPC) && reclaim(e, t, c))
            rc = ph_extent_alloc(e->ext, c, size, PH_EXT_LARGE, 0, NULL, &off);
        return rc ? 0 : off;
    }
    if (ph_engine_reserve_large(e, t, c, size, &off))
        return 0;
    if (init_block(e, c, init, off, PH_ALIGN_UP(size, PH_PAGE_SIZE))) {
        ph_extent_cancel(e->ext, c, off);
        return 0;
    }
    ph_extent_commit(e->ext, c, off, PH_EXT_LARGE, 0, NULL, 0);
    return off;
}

uint64_t ph_engine_alloc(ph_engine *e, ph_tcache *t, ph_pctx *c, size_t size,
                         const ph_block_init *init)
{
    if (size > PH_SMALL_MAX)
        return alloc_large(e, t, c, size, init);
    unsigned cls = ph_sizeclass(size);
    uint64_t off = ph_tcache_pop(t, cls);
    if (ph_unlikely(!off) && !(off = ph_engine_refill(e, t, c, cls)))
        return 0;
    if (ph_unlikely(init) && init_block(e, c, init, off, ph_class_size[cls])) {
        ph_engine_cache_block(e, t, c, cls, off);
        return 0;
    }
    if (ph_unlikely(e->gc))
        return off; /* the block's bit was set when it entered the cache */
    ph_slab *s = ph_engine_chunk_slab(e, off);
    int exact;
    ph_slab_mark(e->sp, c, s, ph_slab_index(s, off, &exact));
    return off;
}

int ph_engine_free(ph_engine *e, ph_tcache *t, ph_pctx *c, uint64_t off)
{
    ph_slab *s = ph_engine_chunk_slab(e, off);
    if (!s) {
        int rc = e->shared ? ph_engine_share_free(e, c, off) : 1; /* another process's slab? */
        return rc != 1 ? rc : ph_extent_free(e->ext, c, off, PH_EXT_LARGE, NULL, 0, 0);
    }
    ph_blockref r;
    int rc;
    do {
        ph_slab_resolve(s, off, &r);
        if (!r.exact)
            return bad_small(s, off, r.index);
        if (ph_unlikely(e->gc)) { /* A clear: free in its slab (see ph_engine_set_gc) */
            unsigned bits = ph_slab_bits(s, r.index);
            rc = bits & 1 ? 0 : bits & 2 ? PHEAP_EDOUBLEFREE : PHEAP_ENOTALLOC;
        } else if (ph_unlikely(r.old)) {
            if ((rc = ph_morph_free_old(e->sp, c, s, &r)) == 0) {
                ph_engine_old_freed(e, c, s, r.index);
                return 0;
            }
        } else {
            rc = ph_slab_unmark(e->sp, c, s, r.word, r.shift, r.gen);
        }
    } while (rc == 1); /* a morph came between: resolve again */
    if (rc)
        return ph_engine_clear_error(rc, off);
    ph_engine_cache_block(e, t, c, s->xcls, off);
    return 0;
}

int ph_engine_lane(ph_engine *e, ph_tcache *t, ph_pctx *c)
{
    if (ph_likely(t->lane.index >= 0))
        return 0;
    int index = -1;
    pthread_mutex_lock(&e->lane_lock);
    for (unsigned i = 0; i < PH_LANES_MAX && index < 0; i++) {
        uint8_t none = 0;
        if (e->lane_used[i])
            continue;
        /* in a shared heap, also free of every other process's threads */
        if (e->shared && !__atomic_compare_exchange_n(&e->share.lanes[i], &none,
                                                      (uint8_t)e->share.owner, 0,
                                                      __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            continue;
        e->lane_used[i] = 1;
        index = (int)i;
    }
    pthread_mutex_unlock(&e->lane_lock);
    if (index < 0)
        return ph_err(PHEAP_ENOMEM, "all %u lanes are in use by other threads", PH_LANES_MAX);
    ph_lane_acquire(&e->lanes, c, &t->lane, (unsigned)index);
    return 0;
}

/* Whether a small logged allocation may leave its stores unfenced (see
 * PH_LOG_BIND): a bind with no block contents to check -- the program may
 * write the block once the call returns, and a replay from the old value
 * would then find another CRC -- in a heap of this process only (another
 * process could free the segment of the entry's word while it lasts). */
static int deferrable(const ph_engine *e, uint64_t op, uint64_t contents)
{
    return (op & 0xff) == PH_LOG_BIND && !contents && !e->shared && e->lanes.deferred;
}

/* The logged allocation behind pheap_alloc_to and the names' bind.  With
 * an initialiser, the block is filled and its lines flushed before F1,
 * whose fence makes them durable before F2 can publish the block; the
 * entry carries their CRC, for a crash that finds the entry durable early
 * (see log/lane.c).  `op` is PH_LOG_ALLOC_TO (*dest := block; retired with
 * a fence) or a PH_LOG_BIND word (*dest := block | nv_bits, a versioned
 * word: retired at the lane's next fence, see format/layout.h). */
static int alloc_logged(ph_engine *e, ph_tcache *t, ph_pctx *c, size_t size, uint64_t *dest,
                        const ph_block_init *init, uint64_t op, uint64_t old, uint64_t nv_bits,
                        uint64_t *out)
{
    ph_space *sp = e->sp;
    uint64_t dest_off = (uint64_t)((char *)dest - sp->base), off, contents = 0;
    int rc = ph_engine_lane(e, t, c);
    if (rc)
        return rc;
    if (size > PH_SMALL_MAX) {
        uint64_t bytes = PH_ALIGN_UP(size, PH_PAGE_SIZE);
        if ((rc = ph_engine_reserve_large(e, t, c, size, &off)) != 0)
            return rc;
        if (init && (rc = init_block(e, c, init, off, bytes)) == 0 && init->program_dest)
            rc = dest_still_ok(e, dest_off);
        if (rc) {
            ph_extent_cancel(e->ext, c, off);
            return rc;
        }
        if (init)
            contents = contents_check(e, off, bytes);
        ph_lane_begin(&e->lanes, c, &t->lane, op, off, bytes, dest_off, old, contents);
        ph_extent_commit(e->ext, c, off, PH_EXT_LARGE, 0, dest, off | nv_bits);
    } else {
        unsigned cls = ph_sizeclass(size);
        off = ph_tcache_pop(t, cls);
        if (!off && !(off = ph_engine_refill(e, t, c, cls)))
            return pheap_errno();
        if (init && (rc = init_block(e, c, init, off, ph_class_size[cls])) == 0 &&
            init->program_dest)
            rc = dest_still_ok(e, dest_off);
        if (rc) {
            ph_engine_cache_block(e, t, c, cls, off);
            return rc;
        }
        if (init)
            contents = contents_check(e, off, ph_class_size[cls]);
        if (!ph_plant("alloc-to-no-log")) /* planted: the log entry forgotten */
            ph_lane_begin(&e->lanes, c, &t->lane, op, off, ph_class_size[cls], dest_off, old,
                          contents);
        if (ph_plant("lane-retire-first")) /* planted: retired before the changes */
            ph_lane_end(&e->lanes, c, &t->lane);
        ph_slab *s = ph_engine_chunk_slab(e, off);
        int exact;
        uint32_t sh, w = ph_slab_lock(s, ph_slab_index(s, off, &exact), &sh);
        if (deferrable(e, op, contents)) {
            /* A plain bind: its entry is durable and its replay harmless
             * while the entry lasts, so the stores wait for the thread's
             * next fence (ph_lane_end_deferred): one fence per create. */
            ph_slab_set_locked_plain(sp, c, s, w, sh);
            ph_persist_write(&sp->persist, c, dest, off | nv_bits);
            ph_persist_flush(&sp->persist, c, dest, sizeof(*dest));
            ph_slab_unlock(s, w);
            if (ph_plant("bind-retire-early")) /* planted: retired before the stores' fence */
                ph_lane_end_lazy(&e->lanes, c, &t->lane);
            else
                ph_lane_end_deferred(&e->lanes, &t->lane, &s->desc->xbits[w], dest);
            *out = off;
            return 0;
        }
        ph_slab_set_locked(sp, c, s, w, sh);
        ph_persist_write(&sp->persist, c, dest, off | nv_bits);
        ph_persist_range(&sp->persist, c, dest, sizeof(*dest));
        ph_slab_unlock(s, w);
        if (ph_plant("alloc-to-no-log") || ph_plant("lane-retire-first")) {
            *out = off;
            return 0;
        }
    }
    if (op == PH_LOG_ALLOC_TO)
        ph_lane_end(&e->lanes, c, &t->lane);
    else
        ph_lane_end_lazy(&e->lanes, c, &t->lane);
    *out = off;
    return 0;
}

int ph_engine_alloc_to(ph_engine *e, ph_tcache *t, ph_pctx *c, size_t size, uint64_t *dest,
                       const ph_block_init *init)
{
    uint64_t off;
    if (e->gc) { /* nothing logged: a block no one links is garbage to recovery */
        if (!(off = ph_engine_alloc(e, t, c, size, init)))
            return pheap_errno();
        uint64_t dest_off = (uint64_t)((char *)dest - e->sp->base);
        if (init && init->program_dest && ph_space_guarded_overlap(e->sp, dest_off, 8)) {
            (void)ph_engine_free(e, t, c, off); /* the block goes back, *dest untouched */
            return dest_still_ok(e, dest_off);
        }
        ph_store(dest, off);
        return 0;
    }
    return alloc_logged(e, t, c, size, dest, init, PH_LOG_ALLOC_TO, ph_load(dest), 0, &off);
}

int ph_engine_alloc_bind(ph_engine *e, ph_tcache *t, ph_pctx *c, size_t size,
                         const ph_block_init *init, uint64_t *dest, uint64_t nv_bits,
                         unsigned body_lines, uint64_t *block)
{
    if (e->gc) { /* the word, durable, is what makes the block reachable */
        uint64_t bytes;
        if (!(*block = ph_engine_alloc(e, t, c, size, init)))
            return pheap_errno();
        if (init && ph_engine_usable(e, *block, &bytes) == 0)
            ph_persist_flush(&e->sp->persist, c, ph_space_at(e->sp, *block), bytes);
        ph_persist_fence(&e->sp->persist, c); /* the caller's entry and the contents first */
        ph_persist_store64(&e->sp->persist, c, dest, *block | nv_bits);
        return 0;
    }
    /* The entry carries the CRC of the body (its lines flushed by the
     * caller): recovery must not publish a body that did not reach media
     * with the entry (see PH_LOG_BIND).  A block with nothing to
     * initialise has no contents to check. */
    if (init && !init->zero && !init->fn)
        init = NULL;
    uint64_t cur = ph_load(dest);
    uint32_t crc = ph_crc32c(0, dest + 1, (size_t)body_lines * PH_LINE_SIZE - 8);
    return alloc_logged(e, t, c, size, dest, init,
                        PH_LOG_VERSIONED(PH_LOG_BIND, cur, nv_bits) | (uint64_t)body_lines << 43,
                        (cur & 0xffff) | (uint64_t)crc << 16, nv_bits, block);
}

/* The logged free behind pheap_free_from and the names' unbind: `op` is
 * PH_LOG_FREE_FROM (*src holds `off`, := 0) or a PH_LOG_UNBIND word (*src,
 * a versioned word naming `off`, := nv). */
static int free_logged(ph_engine *e, ph_tcache *t, ph_pctx *c, uint64_t off, uint64_t *src,
                       uint64_t op, uint64_t nv)
{
    ph_space *sp = e->sp;
    uint64_t src_off = (uint64_t)((char *)src - sp->base), bytes, old = ph_load(src);
    int rc = ph_engine_lane(e, t, c);
    if (rc)
        return rc;
    ph_slab *s = ph_engine_chunk_slab(e, off);
    if (!s && e->shared && (rc = ph_engine_share_live(e, c, off)) != 1) {
        if (rc) /* a block of another process's slab, checked before it is logged */
            return rc;
        ph_lane_begin(&e->lanes, c, &t->lane, op, off, 0, src_off, old, 0);
        if ((rc = ph_engine_share_clear(e, c, off)) == 0) {
            ph_persist_write(&sp->persist, c, src, nv);
            ph_persist_range(&sp->persist, c, src, sizeof(*src));
        }
        /* Retired, then the block goes back to its owner, with no adoption
         * between: one would make it available (no entry names it) before
         * the push did it again.  A replay never meets a pushed block. */
        ph_engine_share_retire_push(e, c, &t->lane, rc == 0 ? off : 0);
        return rc;
    }
    if (!s) {
        if ((rc = ph_extent_lookup(e->ext, off, &bytes)) != 0)
            return rc;
        ph_lane_begin(&e->lanes, c, &t->lane, op, off, bytes, src_off, old, 0);
        rc = ph_extent_free(e->ext, c, off, PH_EXT_LARGE, src, nv, 1);
        ph_lane_end(&e->lanes, c, &t->lane); /* also when another thread freed it first */
        if (!rc)
            ph_extent_release(e->ext, c, off); /* reusable only once retired */
        return rc;
    }
    ph_blockref r;
    for (;;) { /* the word locked before the entry: no morph may come between */
        if ((rc = ph_engine_live_small(s, off, &r)) != 0)
            return rc;
        ph_spin_lock(&s->wlock[r.word]);
        if (ph_slab_gen_ok(s, &r))
            break;
        ph_slab_unlock(s, r.word);
    }
    ph_lane_begin(&e->lanes, c, &t->lane, op, off, r.size, src_off, old, 0);
    rc = ph_engine_clear_block(sp, c, s, &r);
    if (!rc) {
        ph_persist_write(&sp->persist, c, src, nv);
        ph_persist_range(&sp->persist, c, src, sizeof(*src));
    }
    ph_slab_unlock(s, r.word);
    ph_lane_end(&e->lanes, c, &t->lane);
    if (rc)
        return ph_engine_clear_error(rc, off);
    if (r.old)
        ph_engine_old_freed(e, c, s, r.index);
    else
        ph_engine_cache_block(e, t, c, s->xcls, off);
    return 0;
}

int ph_engine_free_from(ph_engine *e, ph_tcache *t, ph_pctx *c, uint64_t *src)
{
    ph_space *sp = e->sp;
    uint64_t off = ph_load(src);
    if (off == 0)
        return 0;
    if (off >= ph_space_size(sp) && e->shared)
        (void)ph_space_follow(sp); /* a block in pages another process added */
    if (off < sp->data_off || off >= ph_space_size(sp))
        return ph_err(PHEAP_ERANGE, "*src = %llu is outside the data region", (unsigned long long)off);
    if (e->gc) { /* checked, unlinked, freed: a crash between is recovery's business */
        ph_slab *s = ph_engine_chunk_slab(e, off);
        if (!s) /* the extent's free is durable: so must the cleared word be, with it */
            return ph_extent_free(e->ext, c, off, PH_EXT_LARGE, src, 0, 0);
        ph_blockref r;
        int rc = ph_engine_live_small(s, off, &r);
        if (rc)
            return rc;
        ph_store(src, 0);
        return ph_engine_free(e, t, c, off);
    }
    return free_logged(e, t, c, off, src, PH_LOG_FREE_FROM, 0);
}

int ph_engine_free_unbind(ph_engine *e, ph_tcache *t, ph_pctx *c, uint64_t off, uint64_t *src,
                          uint64_t nv)
{
    if (e->gc) { /* the word first, durable: then the block is garbage whatever comes */
        uint64_t bytes;
        int rc = ph_engine_usable(e, off, &bytes);
        if (rc)
            return rc;
        ph_persist_store64(&e->sp->persist, c, src, nv);
        ph_slab *s = ph_engine_chunk_slab(e, off);
        return s ? ph_engine_free(e, t, c, off)
                 : ph_extent_free(e->ext, c, off, PH_EXT_LARGE, NULL, 0, 0);
    }
    return free_logged(e, t, c, off, src, PH_LOG_VERSIONED(PH_LOG_UNBIND, ph_load(src), nv), nv);
}

int ph_engine_usable(ph_engine *e, uint64_t off, uint64_t *bytes)
{
    ph_slab *s = ph_engine_chunk_slab(e, off);
    if (!s && e->shared) { /* another process's slab? */
        uint64_t start;
        uint32_t size;
        unsigned bits;
        if (ph_engine_share_small_at(e, off, &start, &size, &bits)) {
            if (bits == 3 && start == off) {
                *bytes = size;
                return 0;
            }
            int rc = ph_engine_share_live(e, NULL, off); /* the error and its message */
            return rc ? rc : ph_err(PHEAP_ENOTALLOC, "offset %llu is no block's start",
                                    (unsigned long long)off);
        }
    }
    if (!s)
        return ph_extent_lookup(e->ext, off, bytes);
    ph_blockref r;
    int rc = ph_engine_live_small(s, off, &r);
    if (!rc)
        *bytes = r.size;
    return rc;
}

int ph_engine_word_live(ph_engine *e, uint64_t off, const char *call)
{
    ph_slab *s = ph_engine_chunk_slab(e, off);
    uint64_t start;
    uint32_t size;
    unsigned bits;
    if (ph_likely(s) || (e->shared && ph_engine_share_small_at(e, off, &start, &size, &bits))) {
        if (ph_likely(s))
            bits = ph_engine_small_at(s, off, &start, &size);
        if (ph_likely(bits == 3))
            return 0;
        return ph_err(PHEAP_ENOTLIVE, "%s: the word at offset %llu is in %s", call,
                      (unsigned long long)off,
                      !size           ? "the unused tail of a slab"
                      : bits & 2      ? "a freed block"
                      : bits & 1      ? "the space of a block freed before its slab changed "
                                        "size class"
                                      : "a block never allocated");
    }
    if (ph_extent_live_at(e->ext, off))
        return 0;
    return ph_err(PHEAP_ENOTLIVE, "%s: the word at offset %llu is in free space (a freed block or "
                  "space never allocated)", call, (unsigned long long)off);
}

/* ---- open, recovery, close ------------------------------------------------------ */

typedef struct open_ctx {
    ph_engine *e;
    ph_pctx *c;
    int repair;  /* writable: what a morph cut short left is put right */
    int repaired; /* ... and something was: a fence to take */
    int rc;
    ph_engine_pushes *pushes; /* a takeover: blocks its frees give back (engine_share.c) */
} open_ctx;

static void on_slab(void *arg, uint64_t off, unsigned cls)
{
    open_ctx *o = arg;
    ph_engine *e = o->e;
    uint64_t ch = ph_engine_chunk_of(e, off);
    ph_slab *s = ph_slab_new(e->sp, off);
    if (!s) {
        o->rc = ph_err(PHEAP_ENOMEM, "out of memory for a slab");
        return;
    }
    ph_slab_set_class(s, cls);
    ph_slab_load(s); /* the bitmap copy, before roll-forward changes it */
    s->arena = e->next_arena++ % e->narenas;
    e->slabs[ch] = e->chunks[ch] = s;
    /* A descriptor that no crash can leave: its bitmap is no truth to
     * allocate from (see ph_slab_check_desc).  Then its morph word sets
     * the class it has now. */
    char why[200];
    if (!o->rc && (ph_slab_check_desc(s, cls, why, sizeof(why)) ||
                   ph_morph_open(e->sp, o->c, s, cls, o->repair, &o->repaired, why, sizeof(why))))
        o->rc = ph_err(PHEAP_ECORRUPT, "%s", why);
}

/* The words of the names header that logged operations write: a
 * rebuild's new segments (xnew[]) and the segment it frees (xold). */
static int names_word(const ph_space *sp, uint64_t off)
{
    uint64_t first = sp->names_region + offsetof(ph_names_header, xnew);
    return sp->names_region && off >= first && off <= first + 16 && (off - first) % 8 == 0;
}

int ph_engine_free_large(ph_engine *e, ph_pctx *c, ph_engine_pushes *gives, uint64_t off)
{
    int rc = ph_extent_free(e->ext, c, off, PH_EXT_LARGE, NULL, 0, gives != NULL);
    if (!rc && gives && ph_engine_pushes_add(gives, off | PH_GIVE_LARGE))
        rc = ph_err(PHEAP_ENOMEM, "out of memory for a takeover");
    return rc;
}

/* Recovery: redo one committed logged operation (see log/lane.c). */
static void redo(open_ctx *o, const ph_lane_op *le, uint64_t *dest, ph_slab *s);

static void roll_forward(void *arg, const ph_lane_op *le)
{
    open_ctx *o = arg;
    ph_engine *e = o->e;
    ph_space *sp = e->sp;
    uint64_t size = ph_space_size(sp);
    if (o->rc)
        return;
    int dest_ok = (le->dest >= sp->data_off && le->dest <= size - 8 && le->dest % 8 == 0) ||
                  ph_engine_tx_anchor_word(e, le->dest) || /* an overflow segment's link */
                  names_word(sp, le->dest);
    if (!dest_ok || le->block < sp->data_off || le->block >= size || le->size > size - le->block) {
        o->rc = ph_err(PHEAP_ECORRUPT, "lane entry for block %llu is out of range",
                       (unsigned long long)le->block);
        return;
    }
    uint64_t *dest = ph_space_at(sp, le->dest);
    ph_slab *s = ph_engine_chunk_slab(e, le->block), *view = NULL;
    if (!s && e->shared) /* a takeover: the block may lie in another process's slab */
        s = view = ph_engine_share_view(e, o->c, le->block);
    redo(o, le, dest, s);
    ph_engine_share_unview(e, o->c, view);
}

/* roll_forward with the destination word and the block's slab (NULL:
 * large; in a takeover, perhaps another process's slab seen through a
 * view of its own). */
static void redo(open_ctx *o, const ph_lane_op *le, uint64_t *dest, ph_slab *s)
{
    ph_engine *e = o->e;
    ph_space *sp = e->sp;
    uint64_t size = ph_space_size(sp);
    ph_blockref r = {0};
    if (s) {
        ph_slab_resolve(s, le->block, &r);
        if (!r.exact)
            (void)ph_morph_old_ref(s, le->block, &r); /* a block of the class before a morph */
    }
    /* The destination's values: what the operation found and what it
     * leaves (BIND and UNBIND: versioned words, see format/layout.h).  A
     * lazily retired entry may name a block whose slab has changed since:
     * the word says whether it is superseded before the block is judged. */
    unsigned kind = (unsigned)(le->op & 0xff);
    int block_ok = s ? r.exact : le->size > PH_SMALL_MAX;
    if (!block_ok && kind != PH_LOG_BIND && kind != PH_LOG_UNBIND) {
        o->rc = ph_err(PHEAP_ECORRUPT, "lane entry names %llu, not a block",
                       (unsigned long long)le->block);
        return;
    }
    uint64_t oldv = le->old, nv = kind == PH_LOG_ALLOC_TO ? le->block : 0, cur = ph_load(dest);
    if (kind == PH_LOG_BIND || kind == PH_LOG_UNBIND) {
        if (kind == PH_LOG_BIND)
            oldv &= 0xffff; /* the body's CRC above */
        oldv |= (le->op >> 8 & 0xffff) << 48;
        nv = (le->op >> 24 & 0xffff) << 48 | (le->op >> 40 & 7) | (kind == PH_LOG_BIND ? le->block : 0);
        if (cur != oldv && cur != nv)
            return; /* superseded by a later operation on the same word */
        uint64_t body = (le->op >> 43 & 31) * PH_LINE_SIZE;
        if (kind == PH_LOG_BIND && cur == oldv &&
            (body < PH_LINE_SIZE || le->dest + body > size ||
             ph_crc32c(0, dest + 1, body - 8) != (uint32_t)(le->old >> 16)))
            return; /* committed before its body was durable: not done */
        if (!block_ok) {
            o->rc = ph_err(PHEAP_ECORRUPT, "lane entry names %llu, not a block",
                           (unsigned long long)le->block);
            return;
        }
    }
    int alloc = kind == PH_LOG_ALLOC_TO || kind == PH_LOG_BIND;
    if (alloc && (le->contents & PH_LOG_CONTENTS) && !(kind == PH_LOG_BIND && cur == nv) &&
        ph_crc32c(0, ph_space_at(sp, le->block), le->size) != (uint32_t)le->contents)
        return; /* committed before the block's contents were durable: not done */
    if (alloc) {
        if (s && !r.old) /* a live old block: allocated already */
            ph_slab_set_locked(sp, o->c, s, r.word, r.shift);
        else if (!s)
            o->rc = ph_extent_claim(e->ext, o->c, le->block, le->size);
    } else {
        uint64_t bytes;
        int rc = s ? ph_engine_clear_block(sp, o->c, s, &r) : -1;
        if (rc == 0 && r.old) /* else clear already: done before */
            ph_morph_unpin(sp, o->c, s, r.index, NULL, NULL);
        else if (o->pushes && s && !r.old && (rc == 0 || rc == PHEAP_EDOUBLEFREE)) {
            /* a takeover: a dead process's free of another's block -- or of this
             * process's own -- cleared now or by it; its push comes with the
             * retirement, so it never happened: the block goes onto its slab's list
             * once the entry is retired (no adoption makes it available meanwhile:
             * the entry withholds it) */
            if (ph_engine_pushes_add(o->pushes, le->block))
                o->rc = ph_err(PHEAP_ENOMEM, "out of memory for a takeover");
        }
        else if (!s && ph_extent_lookup(e->ext, le->block, &bytes) == 0)
            o->rc = ph_engine_free_large(e, o->c, o->pushes, le->block);
    }
    ph_persist_write(&sp->persist, o->c, dest, nv);
    ph_persist_range(&sp->persist, o->c, dest, sizeof(*dest));
}

unsigned ph_engine_share_replay(ph_engine *e, ph_pctx *c, unsigned lane, ph_engine_pushes *pushes,
                                int *rc)
{
    open_ctx o = {e, c, 1, 0, 0, pushes};
    unsigned n = ph_lanes_scan_one(&e->lanes, lane, roll_forward, &o);
    *rc = o.rc;
    return n;
}

/* The chunk maps are reserved for max_size and touched only as far as the
 * heap is backed (slabs exist only there), so that memory and time at open
 * follow the heap's size. */
static void *alloc_map(uint64_t bytes)
{
    return ph_os_alloc_pages(PH_ALIGN_UP(bytes, PH_PAGE_SIZE));
}


/* GC mode's chunk map (gc_slabs) has an entry for each chunk of the file,
 * the metadata's first, all zero: the fast free indexes it with an
 * offset's chunk number as it is. */
static uint64_t gc_map_lead(const ph_engine *e)
{
    return e->data_off / PH_CHUNK_SIZE;
}

static size_t gc_map_bytes(const ph_engine *e)
{
    return PH_ALIGN_UP((gc_map_lead(e) + e->nchunks) * sizeof(uintptr_t), PH_PAGE_SIZE);
}

ph_gc_freemap ph_engine_gc_freemap(const ph_engine *e)
{
    return (ph_gc_freemap){e->gc_slabs - gc_map_lead(e), gc_map_lead(e) + e->nchunks};
}

/* An engine with its maps and arenas and no extent index yet: 0, or
 * PHEAP_ENOMEM with *out to close. */
static int engine_new(ph_space *sp, ph_engine **out)
{
    ph_engine *e = *out = calloc(1, sizeof(*e));
    if (!e)
        return ph_err(PHEAP_ENOMEM, "out of memory");
    e->sp = sp;
    e->data_off = sp->data_off;
    e->nchunks = (sp->max_size - sp->data_off) / PH_CHUNK_SIZE;
    e->chunks = alloc_map(e->nchunks * sizeof(*e->chunks));
    e->slabs = alloc_map(e->nchunks * sizeof(*e->slabs));
    uintptr_t *gc_map = alloc_map(gc_map_bytes(e));
    e->gc_slabs = gc_map ? gc_map + gc_map_lead(e) : NULL;
    e->screened = alloc_map((e->nchunks + 63) / 64 * 8);
    e->narenas = sp->sim ? PH_SIM_ARENAS : PH_MIN(ph_os_cpu_count(), PH_ARENAS_MAX);
    e->arenas = aligned_alloc(64, PH_ALIGN_UP(e->narenas * sizeof(ph_arena), 64));
    pthread_mutex_init(&e->lane_lock, NULL);
    pthread_mutex_init(&e->xfer_lock, NULL);
    int lanes_rc = ph_lanes_init(&e->lanes, ph_space_at(sp, sp->lane_region), &sp->persist,
                                 !(sp->features & PH_FEAT_INCOMPAT_TAGGED_LOGS),
                                 (sp->features & PH_FEAT_INCOMPAT_NAMES) != 0);
    if (sp->features & PH_FEAT_INCOMPAT_TX)
        e->txlogs = ph_space_at(sp, sp->lane_region);
    e->morph = (sp->features & PH_FEAT_INCOMPAT_MORPH) != 0;
    if (lanes_rc || !e->chunks || !e->slabs || !e->gc_slabs || !e->screened || !e->arenas) {
        free(e->arenas);
        e->arenas = NULL;
        return ph_err(PHEAP_ENOMEM, "out of memory for the allocator's index");
    }
    memset(e->arenas, 0, e->narenas * sizeof(ph_arena));
    for (unsigned a = 0; a < e->narenas; a++)
        ph_os_mutex_init(&e->arenas[a].lock);
    return 0;
}

/* The extent index asks the engine before it hands free space out. */
static void screen_free_space(ph_engine *e)
{
    e->ext->screen = ph_engine_screen;
    e->ext->screen_arg = e;
}

int ph_engine_open_shared(ph_space *sp, const ph_engine_share *share, ph_engine **out)
{
    ph_engine *e = NULL;
    int rc = engine_new(sp, &e);
    if (!rc) {
        e->share = *share;
        e->shared = 1;
        e->morph = 0; /* a slab changes class only with every block of it in one process */
        rc = ph_extents_open_shared(sp, share->owner, share->ext_lock, &e->share.plock, &e->ext);
    }
    if (!rc)
        screen_free_space(e);
    if (rc) {
        ph_engine_close(e);
        return rc;
    }
    *out = e;
    return 0;
}

int ph_engine_open(ph_space *sp, ph_pctx *c, int writable, int recover, ph_engine **out)
{
    ph_engine *e = NULL;
    open_ctx o = {NULL, c, writable, 0, 0, NULL};
    o.rc = engine_new(sp, &e);
    o.e = e;
    if (!o.rc) {
        int rc = ph_extents_open(sp, &e->ext, on_slab, &o);
        if (rc && !o.rc)
            o.rc = rc;
        if (!rc)
            screen_free_space(e);
    }
    if (!o.rc && o.repaired)
        ph_persist_fence(&sp->persist, c); /* the morph repairs of on_slab */
    if (!o.rc && recover) {
        e->recovered = ph_lanes_scan(&e->lanes, roll_forward, &o);
        if (!o.rc) /* also torn entries, which the scan skipped */
            ph_lanes_retire_all(&e->lanes, c);
        if (!o.rc)
            ph_extent_log_scrub(e->ext, c);
        if (!o.rc && e->txlogs)
            o.rc = ph_engine_tx_recover(e, c);
    }
    if (!o.rc && writable) /* a shared heap's processes are gone: their reservations too */
        ph_extent_log_forget_reserved(e->ext, c);
    for (uint64_t ch = 0; !o.rc && ch < ph_engine_backed_chunks(e); ch++) {
        ph_slab *s = e->chunks[ch];
        if (!s)
            continue;
        ph_slab_find_avail(s);
        if (s->navail)
            partial_push(&e->arenas[s->arena], s);
    }
    if (!o.rc)
        o.rc = ph_engine_open_check(e, recover);
    if (o.rc) {
        ph_engine_close(e);
        return o.rc;
    }
    *out = e;
    return 0;
}

void ph_engine_purge(ph_engine *e)
{
    ph_extents_purge_now(e->ext);
}

void ph_engine_close(ph_engine *e)
{
    if (!e)
        return;
    for (uint64_t ch = 0; e->slabs && ch < ph_engine_backed_chunks(e); ch++)
        free(e->slabs[ch]);
    ph_extents_close(e->ext);
    ph_os_free_pages(e->chunks, PH_ALIGN_UP(e->nchunks * sizeof(*e->chunks), PH_PAGE_SIZE));
    ph_os_free_pages(e->slabs, PH_ALIGN_UP(e->nchunks * sizeof(*e->slabs), PH_PAGE_SIZE));
    if (e->gc_slabs)
        ph_os_free_pages(e->gc_slabs - gc_map_lead(e), gc_map_bytes(e));
    ph_os_free_pages(e->screened, PH_ALIGN_UP((e->nchunks + 63) / 64 * 8, PH_PAGE_SIZE));
    for (unsigned a = 0; e->arenas && a < e->narenas; a++)
        pthread_mutex_destroy(&e->arenas[a].lock);
    free(e->arenas);
    ph_lanes_fini(&e->lanes);
    pthread_mutex_destroy(&e->lane_lock);
    for (unsigned cls = 0; cls < PH_CLASSES; cls++) /* memory only: the heap is closed */
        for (ph_batch *q = e->xfer[cls], *next; q; q = next) {
            next = q->next;
            free(q);
        }
    pthread_mutex_destroy(&e->xfer_lock);
    free(e);
}
