/*
 * engine_share.c -- the engine of a process of a heap shared between
 * processes (docs/SHARING.md): what it does besides what engine.c does.
 *
 * The process's chunk map (chunks[]) holds the slabs it owns, and only
 * those: a slab it makes, or adopts -- one that no process owns (left by
 * a process that detached, or made before the heap was shared) -- is
 * entered there and in the process table's word of its chunk.  A block
 * in a chunk that the map does not hold is another process's, or large:
 * under the extent index's locks (which keep the chunk what it is) a
 * block of a slab is freed into the slab's remote-free list
 * (alloc/slab_share.h), anything else as a large block; the calls that
 * ask whether a block or word is live read such a slab's descriptor.
 * When a class has no slab with available blocks, the owner first takes
 * back the blocks others freed in its slabs of that class, then adopts an
 * unowned slab of the class, and only then makes one.
 */
#include "alloc/engine_share.h"

#include <stdlib.h>

#include "alloc/slab_share.h"
#include "pheap.h"
#include "util/error.h"

static ph_procs_chunk *chunk_words(const ph_engine *e, uint64_t ch)
{
    return &e->share.chunks[ch];
}

static ph_slab_desc *desc_of(const ph_engine *e, uint64_t ch)
{
    return ph_space_at(e->sp, e->sp->slab_region + ch * PH_SLAB_DESC_SIZE);
}

void ph_engine_share_own(ph_engine *e, ph_slab *s)
{
    s->shared = 1;
    ph_slab_own(chunk_words(e, ph_engine_chunk_of(e, s->off)), e->share.me);
}

void ph_engine_share_disown(ph_engine *e, ph_slab *s)
{
    /* only if still its own: a released chunk may be another's slab already */
    uint64_t me = e->share.me;
    __atomic_compare_exchange_n(&chunk_words(e, ph_engine_chunk_of(e, s->off))->xowner, &me, 0, 0,
                                __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

/* Holds the index's locks; 1 with *start when `off` lies in a slab (of
 * another process: the caller's map holds none of its own there). */
static int hold_slab(ph_engine *e, ph_pctx *c, uint64_t off, uint64_t *start)
{
    uint32_t kind;
    return ph_extents_hold(e->ext, c, off, &kind, start) == 0 && kind == PH_EXT_SLAB;
}

int ph_engine_share_clear(ph_engine *e, ph_pctx *c, uint64_t off)
{
    uint64_t start;
    int rc = PHEAP_ENOTALLOC;
    if (hold_slab(e, c, off, &start)) {
        uint64_t ch = ph_engine_chunk_of(e, off);
        if ((rc = ph_slab_shared_clear(e->sp, c, desc_of(e, ch), start, off)) == 0)
            ph_persist_fence(&e->sp->persist, c);
    }
    ph_extents_unhold(e->ext, c);
    return rc;
}

void ph_engine_share_retire_push(ph_engine *e, ph_pctx *c, ph_lane *lane, uint64_t off)
{
    uint64_t start;
    int slab = hold_slab(e, c, off ? off : e->sp->data_off, &start);
    ph_lane_end(&e->lanes, c, lane);
    if (off && slab)
        ph_slab_remote_push(e->sp, chunk_words(e, ph_engine_chunk_of(e, off)), off);
    ph_extents_unhold(e->ext, c);
}

ph_slab *ph_engine_share_view(ph_engine *e, ph_pctx *c, uint64_t off)
{
    uint64_t start;
    ph_slab *s = NULL;
    if (hold_slab(e, c, off, &start)) {
        const ph_slab_desc *d = desc_of(e, ph_engine_chunk_of(e, off));
        uint64_t cls = ph_load(&d->cls);
        if (cls < PH_CLASSES && !ph_load(&d->morph) && (s = ph_slab_new(e->sp, start)) != NULL) {
            ph_slab_set_class(s, (unsigned)cls);
            ph_slab_load(s);
            s->shared = 1;
            return s; /* held until ph_engine_share_unview */
        }
    }
    ph_extents_unhold(e->ext, c);
    return NULL;
}

void ph_engine_share_unview(ph_engine *e, ph_pctx *c, ph_slab *view)
{
    if (!view)
        return;
    free(view);
    ph_extents_unhold(e->ext, c);
}

int ph_engine_share_small_at(ph_engine *e, uint64_t off, uint64_t *start, uint32_t *size,
                             unsigned *bits)
{
    ph_slab *view = ph_engine_share_view(e, NULL, off);
    if (!view)
        return 0;
    *bits = ph_engine_small_at(view, off, start, size);
    ph_engine_share_unview(e, NULL, view);
    return 1;
}

void ph_engine_share_push(ph_engine *e, uint64_t off)
{
    ph_slab_remote_push(e->sp, chunk_words(e, ph_engine_chunk_of(e, off)), off);
}

int ph_engine_share_free(ph_engine *e, ph_pctx *c, uint64_t off)
{
    uint32_t kind;
    uint64_t start;
    int rc = ph_extents_hold(e->ext, c, off, &kind, &start);
    if (!rc && kind == PH_EXT_SLAB) {
        uint64_t ch = ph_engine_chunk_of(e, off);
        rc = ph_slab_remote_free(e->sp, c, desc_of(e, ch), chunk_words(e, ch), start, off);
    } else if (!rc) {
        rc = 1; /* no slab: the caller frees it as a large block */
    }
    ph_extents_unhold(e->ext, c);
    return rc;
}

int ph_engine_share_live(ph_engine *e, ph_pctx *c, uint64_t off)
{
    uint32_t kind;
    uint64_t start;
    int rc = ph_extents_hold(e->ext, c, off, &kind, &start);
    if (!rc && kind != PH_EXT_SLAB)
        rc = 1;
    if (!rc) {
        uint32_t w, sh;
        rc = ph_slab_desc_live(desc_of(e, ph_engine_chunk_of(e, off)), start, off, &w, &sh);
    }
    ph_extents_unhold(e->ext, c);
    return rc;
}

/* Takes back what other processes freed in slab s (arena lock held);
 * returns the blocks. */
static uint32_t collect(ph_engine *e, ph_slab *s)
{
    ph_procs_chunk *pc = chunk_words(e, ph_engine_chunk_of(e, s->off));
    if (!__atomic_load_n(&pc->xremote, __ATOMIC_RELAXED))
        return 0;
    int bad;
    uint32_t n = ph_slab_collect(e->sp, s, pc, &bad);
    if (bad) /* a damaged list: what it still names stays unavailable until an adoption */
        ph_err(PHEAP_ECORRUPT, "the remote-free list of the slab at %llu is damaged",
               (unsigned long long)s->off);
    return n;
}

/* A block that a committed lane entry or transaction log names -- of a
 * live process's operation in flight, or of a dead one's not replayed yet
 * -- is not available in a slab just adopted: that operation, or its
 * replay, may still set or clear its bit, or push it onto the list. */
static void withhold_block(void *arg, uint64_t off)
{
    ph_slab *s = arg;
    if (off >= s->off && off < s->off + PH_CHUNK_SIZE)
        ph_slab_withhold(s, off);
}

static void withhold(void *arg, const ph_lane_op *op)
{
    withhold_block(arg, op->block);
}

/* An unowned slab of class cls, adopted for arena ai (its lock held), or
 * NULL.  The index's locks keep the chunk a slab, and every remote free
 * out, while the slab changes hands. */
static ph_slab *adopt(ph_engine *e, ph_pctx *c, unsigned ai, unsigned cls)
{
    for (uint64_t ch = 0; ch < ph_engine_backed_chunks(e); ch++) {
        if (ph_load(&e->chunks[ch]) ||
            __atomic_load_n(&chunk_words(e, ch)->xowner, __ATOMIC_RELAXED) ||
            ph_load_relaxed(&desc_of(e, ch)->cls) != cls)
            continue;
        uint64_t off = e->sp->data_off + ch * PH_CHUNK_SIZE, start, none = 0;
        uint32_t kind;
        ph_slab *s = NULL;
        int rc = ph_extents_hold(e->ext, c, off, &kind, &start);
        if (!rc && kind == PH_EXT_SLAB && start == off &&
            __atomic_compare_exchange_n(&chunk_words(e, ch)->xowner, &none, e->share.me, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            if ((s = e->slabs[ch]) == NULL && (s = e->slabs[ch] = ph_slab_new(e->sp, off)) == NULL)
                ph_slab_own(chunk_words(e, ch), 0); /* no memory: left for another */
            else if (ph_slab_adopt(s, chunk_words(e, ch), e->share.me) != 0)
                s = NULL; /* not a slab a shared heap holds: left owned, unused, until the detach */
            else {
                ph_lanes_scan(&e->lanes, withhold, s);
                ph_engine_tx_scan_frees(e, withhold_block, s);
            }
        }
        ph_extents_unhold(e->ext, c);
        if (!s)
            continue;
        s->shared = 1;
        s->arena = ai;
        s->in_partial = 0;
        s->evac = 0;
        ph_store(&e->chunks[ch], s);
        if (s->navail) /* else full: kept, its blocks come back through its list */
            return s;
    }
    return NULL;
}

ph_slab *ph_engine_share_refill(ph_engine *e, ph_pctx *c, unsigned ai, unsigned cls)
{
    ph_slab *found = NULL;
    for (uint64_t ch = 0; ch < ph_engine_backed_chunks(e); ch++) {
        ph_slab *s = ph_load(&e->chunks[ch]);
        /* the arena first: the rest is under its lock, which the caller holds */
        if (s && ph_load_relaxed(&s->arena) == ai && s->xcls == cls && !s->in_partial &&
            !s->evac && collect(e, s))
            found = s; /* the caller puts slabs with blocks on the list */
        if (found)
            return found;
    }
    return adopt(e, c, ai, cls);
}

void ph_engine_detach(ph_engine *e)
{
    for (uint64_t ch = 0; e->shared && ch < ph_engine_backed_chunks(e); ch++) {
        if (e->chunks[ch]) {
            ph_engine_share_disown(e, e->chunks[ch]);
            ph_store(&e->chunks[ch], (ph_slab *)NULL);
        } else {
            /* a slab it took and could not use (adopt): no one's again */
            uint64_t me = e->share.me;
            __atomic_compare_exchange_n(&chunk_words(e, ch)->xowner, &me, 0, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED);
        }
    }
}

void ph_engine_share_tx_clear(ph_engine *e, ph_pctx *c, ph_tx_change *v, size_t n)
{
    int held = 0;
    for (size_t k = 0; k < n; k++) {
        if (!v[k].foreign)
            continue;
        uint64_t start;
        uint32_t kind;
        if (!held++)
            (void)ph_extents_hold(e->ext, c, v[k].off, &kind, &start);
        else
            ph_extents_holding(e->ext, v[k].off, &kind, &start);
        v[k].skip = kind != PH_EXT_SLAB ||
                    ph_slab_shared_clear(e->sp, c, desc_of(e, ph_engine_chunk_of(e, v[k].off)),
                                         start, v[k].off) != 0;
    }
}

void ph_engine_share_tx_push(ph_engine *e, ph_pctx *c, const ph_tx_change *v, size_t n)
{
    int held = 0;
    for (size_t k = 0; k < n; k++) {
        if (!v[k].foreign)
            continue;
        held = 1;
        if (!v[k].skip)
            ph_engine_share_push(e, v[k].off);
    }
    if (held)
        ph_extents_unhold(e->ext, c);
}

int ph_engine_takeover(ph_engine *e, ph_pctx *c, unsigned owner, uint64_t dead,
                       ph_takeover_info *out)
{
    ph_takeover_info st = {0, 0, 0, 0};
    ph_engine_pushes pushes = {NULL, 0, 0};
    /* first what it did to the heap: grown it, appended to the log */
    int rc = ph_extents_sync(e->ext, NULL);
    /* 1: its lanes rolled forward, then its transaction logs rolled back
     * or forward, before anything it held becomes anyone's */
    for (unsigned l = 0; l < PH_LANES_MAX && !rc; l++) {
        if (__atomic_load_n(&e->share.lanes[l], __ATOMIC_ACQUIRE) != owner)
            continue;
        st.entries += ph_engine_share_replay(e, c, l, &pushes, &rc);
        st.lanes++;
    }
    ph_tx_recovery *tx = rc ? NULL : ph_engine_tx_takeover(e, c, (uint8_t)owner, &pushes, &rc);
    if (!rc) {
        /* 2: under the index's locks, which adoptions take, the lanes and
         * logs retired, then the blocks they freed given back: before the
         * retirement a replay by another survivor (this one may die too)
         * would free them again; after the push no adoption may find them
         * free and not on the list */
        uint64_t start;
        uint32_t kind;
        (void)ph_extents_hold(e->ext, c, e->data_off, &kind, &start);
        for (unsigned l = 0; l < PH_LANES_MAX; l++)
            if (__atomic_load_n(&e->share.lanes[l], __ATOMIC_ACQUIRE) == owner)
                ph_lanes_retire_one(&e->lanes, c, l);
        ph_engine_tx_takeover_retire(tx);
        ph_persist_fence(&e->sp->persist, c);
        for (size_t i = 0; i < pushes.n; i++)
            if (!(pushes.v[i] & PH_GIVE_LARGE))
                ph_engine_share_push(e, pushes.v[i]);
        ph_extents_unhold(e->ext, c);
        for (size_t i = 0; i < pushes.n; i++)
            if (pushes.v[i] & PH_GIVE_LARGE)
                ph_extent_release(e->ext, c, pushes.v[i] & ~(uint64_t)PH_GIVE_LARGE);
    }
    int end = ph_engine_tx_takeover_end(tx); /* its overflow segments, once retired */
    free(pushes.v);
    if (rc || (rc = end) != 0) {
        *out = st;
        return rc;
    }
    for (unsigned l = 0; l < PH_LANES_MAX; l++) {
        uint8_t was = (uint8_t)owner;
        __atomic_compare_exchange_n(&e->share.lanes[l], &was, 0, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED);
    }
    /* 3: its reservations (blocks chosen, frees held) become free space */
    st.reservations = ph_extents_drop_owner(e->ext, c, owner);
    /* 4: its slabs become no one's, for whoever needs them to adopt: their
     * bitmaps hold its cached blocks free already */
    for (uint64_t ch = 0; ch < ph_engine_backed_chunks(e); ch++) {
        uint64_t was = dead;
        st.slabs += __atomic_compare_exchange_n(&chunk_words(e, ch)->xowner, &was, 0, 0,
                                                __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    }
    *out = st;
    return 0;
}
