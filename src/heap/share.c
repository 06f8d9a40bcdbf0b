/*
 * share.c -- a heap opened for sharing between processes (PHEAP_SHARED;
 * docs/SHARING.md has the design, alloc/engine_share.c the engine).
 *
 * Every step that changes who holds the heap runs under the process
 * table's gate (procs.c), a lock the kernel drops when its holder dies
 * (lock order: the name directory's locks, the gate, the extent log's):
 *   open:     the first process (no live lease of a sharer) recovers the
 *             heap as an exclusive open does and clears the table's
 *             sharing state (chunk owners and remote-free lists, lane
 *             holders, locks: whatever a power loss or the last processes'
 *             deaths left); every process then takes a lease and builds
 *             its engine; then, outside the gate, opens the name directory
 *             (checked under its lock) and takes over the sharers that died.
 *   takeover: a sharer whose lease's lock is gone (it died), or held only
 *             by a fork child of it, is taken over by whichever process
 *             finds it first -- at an open, at a close, or in the write
 *             calls' periodic look (ph_share_poll) -- and its slot cleared
 *             (marked taken over, while a child holds its lock).  The gate
 *             makes one process take over one dead process, once; a taker
 *             that dies midway leaves the slot as it was, and the next
 *             taker does it again (every step of a takeover can be done
 *             twice: alloc/engine_share.c).  A takeover holds the name
 *             directory's lock: a dead process's lanes may hold entries that
 *             bind or unbind names, replayed over the directory.
 *   close:    caches back, slabs left to no one, the dead taken over; the
 *             last process marks the heap clean, so that the next first
 *             process needs no recovery.
 * A process that dies while it holds the gate lets it go with its death:
 * its half-done open is a dead sharer's or none (a slot without a pid is
 * free), its half-done recovery the next first process's to do.
 */
#include "heap/share.h"

#include <string.h>

#include "format/header.h"
#include "heap/names.h"
#include "heap/procs.h"
#include "os/os.h"
#include "util/error.h"
#include "util/plock.h"

int ph_share_check(pheap *h)
{
    if (h->hdr.consistency == PH_CONSISTENCY_GC)
        return ph_err(PHEAP_ENOTSUP, "%s: a GC-mode heap cannot be shared between processes "
                      "(PHEAP_SHARED): its allocations write nothing a survivor could take over",
                      h->path);
    if (!(h->hdr.feat_incompat & PH_FEAT_INCOMPAT_SHARED))
        return ph_err(PHEAP_ENOTSUP, "%s: format %u.%u: the heap was made before sharing between "
                      "processes (1.8), which PHEAP_SHARED needs", h->path, h->hdr.major,
                      h->hdr.minor);
    return 0;
}

static int dead_test(void *ctx, uint64_t who)
{
    return ph_procs_dead(ctx, who);
}

static uint64_t region_of(const pheap *h)
{
    return ph_header_region(&h->hdr, PH_REGION_PROCS)->offset;
}

static ph_engine_share share_of(pheap *h)
{
    uint64_t r = region_of(h), me = ph_procs_identity(h);
    return (ph_engine_share){me, (unsigned)h->lease + 1,
                             ph_space_at(&h->sp, PH_PROCS_CHUNKS_AT(r)),
                             &ph_procs_table(h)->xext_lock,
                             ph_space_at(&h->sp, PH_PROCS_LANES_AT(r)),
                             {me, dead_test, h}};
}

static void clear_word(uint64_t *w)
{
    if (ph_load_relaxed(w)) /* untouched pages stay untouched */
        ph_store(w, 0);
}

/* The first process: what the table says about sharers who are all gone
 * now (their locks, their chunks, their lanes) is cleared; their slots
 * are free, or marked taken over while a fork child holds their lock. */
static void reset_table(pheap *h)
{
    uint64_t r = region_of(h);
    ph_procs_header *t = ph_procs_table(h);
    clear_word(&t->xext_lock);
    clear_word(&t->xroot_lock);
    clear_word(&t->xnames_lock);
    clear_word(&t->xnames_seq);
    t->xtakeovers = 0;
    memset(ph_space_at(&h->sp, PH_PROCS_LANES_AT(r)), 0, PH_LANES_MAX);
    memset(ph_space_at(&h->sp, PH_PROCS_HOLDS_AT(r)), 0, PH_PROCS_HOLDS * sizeof(ph_procs_hold));
    ph_procs_chunk *pc = ph_space_at(&h->sp, PH_PROCS_CHUNKS_AT(r));
    for (uint64_t ch = 0; ch < (ph_space_size(&h->sp) - h->sp.data_off) / PH_CHUNK_SIZE; ch++) {
        clear_word(&pc[ch].xowner);
        clear_word(&pc[ch].xremote);
    }
    ph_lease *leases = ph_procs_leases(h);
    for (unsigned i = 0; i < PH_PROCS_SLOTS; i++) {
        ph_lease l;
        int st = ph_procs_slot(h, i, &l);
        if (st == PH_SLOT_DEAD)
            memset(&leases[i], 0, sizeof(leases[i]));
        else if (st == PH_SLOT_ORPHANED)
            leases[i].xflags |= PH_LEASE_TAKEN;
    }
}

/* Takes over the process of slot i (gate held), dead or orphaned: its
 * lanes, reservations and slabs (ph_engine_takeover), the names its
 * transactions held, then its slot. */
static int take_over(pheap *h, ph_pctx *c, unsigned i, const ph_lease *l, int orphaned)
{
    uint64_t t0 = ph_os_time_ns(), who = l->xgen << 8 | (i + 1);
    ph_takeover_info info;
    int rc = ph_engine_takeover(h->engine, c, i + 1, who, &info);
    if (rc)
        return rc; /* the slot stays: its lanes could not all be replayed */
    ph_names_holds_drop(h->names, who);
    ph_lease *slot = ph_procs_leases(h) + i;
    if (orphaned)
        slot->xflags |= PH_LEASE_TAKEN;
    else
        memset(slot, 0, sizeof(*slot));
    ph_procs_table(h)->xtakeovers++;
    uint64_t ns = ph_os_time_ns() - t0;
    __atomic_fetch_add(&h->xtakeovers, 1, __ATOMIC_RELAXED);
    if (ns > ph_load_relaxed(&h->xtakeover_max_ns))
        ph_store(&h->xtakeover_max_ns, ns);
    return 0;
}

/* 1 when slot i holds a sharer that died and was not taken over yet
 * (*orphaned: a fork child holds its lock); *live counts live ones. */
static int dead_sharer(pheap *h, unsigned i, ph_lease *l, int *orphaned, unsigned *live)
{
    if ((int)i == h->lease)
        return 0;
    int st = ph_procs_slot(h, i, l);
    if ((st == PH_SLOT_LIVE || st < 0) && live) /* (a lock test that failed: not known dead) */
        (*live)++;
    *orphaned = st == PH_SLOT_ORPHANED;
    return (st == PH_SLOT_DEAD || st == PH_SLOT_ORPHANED) &&
           (l->xflags & (PH_LEASE_SHARED | PH_LEASE_TAKEN)) == PH_LEASE_SHARED;
}

/* Takes over every dead sharer (gate held); how many live ones there are
 * besides this process, and dead ones left as they were (a takeover that
 * failed: a damaged log) -- the heap is not clean while one is. */
static unsigned take_over_dead(pheap *h, ph_pctx *c)
{
    unsigned live = 0;
    for (unsigned i = 0; i < PH_PROCS_SLOTS; i++) {
        ph_lease l;
        int orphaned;
        if (dead_sharer(h, i, &l, &orphaned, &live) && take_over(h, c, i, &l, orphaned) != 0)
            live++;
    }
    return live;
}

/* Takes over every dead sharer: the name directory's lock first (a dead
 * process's lanes may hold BIND and UNBIND entries to replay: no writer
 * of the directory may run meanwhile) unless the caller holds it, then
 * the gate -- waiting for it, or not at all (`try`: a process holding it
 * is taking over or attaching).  Lock order: names, gate, extent log. */
static void take_over_all(pheap *h, int names_held, int try)
{
    ph_names *n = names_held ? NULL : h->names;
    /* The thread's record first: getting one takes the registry's lock,
     * and nothing that waits for the registry may hold the directory
     * (an exiting thread lets the registry go before it folds, which may
     * wait for the directory).  Under the directory's lock, a caller has
     * one already. */
    ph_pctx *c = ph_heap_pctx(h);
    if (n)
        ph_names_wrlock(n);
    /* the gate is the open file's: this process's threads take turns first */
    if (try ? pthread_mutex_trylock(&h->share_lock) == 0 : pthread_mutex_lock(&h->share_lock) == 0) {
        if ((try ? ph_procs_gate_try(h) : ph_procs_gate(h)) == 0) {
            take_over_dead(h, c);
            ph_procs_ungate(h);
        }
        pthread_mutex_unlock(&h->share_lock);
    }
    if (n)
        ph_names_unlock(n);
}

/* The directory's lock taken over from a dead process: the process taken
 * over (its lanes may complete what it was doing), then a rebuild it cut
 * short finished or undone, as recovery at open does. */
static void names_taken(pheap *h)
{
    take_over_all(h, 1, 0);
    ph_thread *t = ph_thread_get(h);
    if (!t || ph_names_recover(h, t))
        ph_err(PHEAP_ECORRUPT, "%s: the name directory left by a dead process could not be "
               "repaired: %s", h->path, t ? pheap_errmsg() : "out of memory");
}

void ph_share_take_over_dead_held(pheap *h)
{
    take_over_all(h, 1, 0);
}

void ph_share_names(pheap *h)
{
    ph_procs_header *t = ph_procs_table(h);
    ph_names_share(h, &t->xnames_seq, &t->xnames_lock,
                   ph_space_at(&h->sp, PH_PROCS_HOLDS_AT(region_of(h))), &h->engine->share.plock,
                   names_taken);
}

static int sharers_alive(pheap *h)
{
    for (unsigned i = 0; i < PH_PROCS_SLOTS; i++) {
        ph_lease l;
        int st = ph_procs_slot(h, i, &l);
        if ((st == PH_SLOT_LIVE || st < 0) && (l.xflags & PH_LEASE_SHARED))
            return 1; /* (a lock test that failed: not known dead) */
    }
    return 0;
}

/* The first process: the heap recovered with an engine of the exclusive
 * kind, which then gives way to this process's engine of a shared heap. */
static int first_open(pheap *h)
{
    int rc = ph_heap_start_session(h);
    if (rc)
        return rc;
    ph_thread_unregister_heap(h, 1); /* caches back into that engine's slabs */
    ph_engine_close(h->engine);
    h->engine = NULL;
    ph_thread_register_heap(h);
    reset_table(h);
    return 0;
}

int ph_share_open(pheap *h)
{
    int rc = ph_os_open(h->path, 0, &h->gate_fd);
    if (!rc)
        rc = ph_procs_gate(h);
    if (rc)
        return ph_err(rc, "%s: cannot take the process table's gate: %s", h->path, pheap_errmsg());
    int first = !sharers_alive(h);
    if (first)
        rc = first_open(h);
    if (!rc)
        rc = ph_procs_attach_shared(h);
    ph_engine_share share;
    if (!rc) {
        share = share_of(h);
        rc = ph_engine_open_shared(&h->sp, &share, &h->engine);
    }
    if (!rc) {
        h->shared = 1;
        ph_space_guard_off(&h->sp);
        if (first) /* its directory was opened with the exclusive engine */
            ph_share_names(h);
    }
    ph_procs_ungate(h);
    /* The rest outside the gate: the directory's lock comes before it. */
    if (!rc && !first)
        rc = ph_heap_join_session(h);
    if (!rc)
        take_over_all(h, 0, 0);
    ph_store(&h->xnext_poll, ph_os_time_ns() + PH_SHARE_POLL_NS);
    return rc;
}

void ph_share_close(pheap *h, ph_pctx *c)
{
    if (h->names)
        ph_names_wrlock(h->names);
    pthread_mutex_lock(&h->share_lock);
    int gated = ph_procs_gate(h) == 0; /* (fails only when the file lock calls do) */
    ph_engine_detach(h->engine);
    ph_engine_purge(h->engine); /* under the extent log's lock: while this process holds a lease */
    unsigned live = take_over_dead(h, c);
    if (gated && !live) /* the last one, and no dead one left: the next first process needs
                           no recovery */
        ph_persist_store64(&h->sp.persist, c, &h->sp.state->xclean, PH_STATE_CLEAN);
    ph_procs_detach_gated(h, gated);
    if (gated)
        ph_procs_ungate(h);
    pthread_mutex_unlock(&h->share_lock);
    if (h->names)
        ph_names_unlock(h->names);
}

void ph_share_poll(pheap *h)
{
    int any = 0;
    for (unsigned i = 0; i < PH_PROCS_SLOTS && !any; i++) {
        ph_lease l;
        int orphaned;
        any = dead_sharer(h, i, &l, &orphaned, NULL);
    }
    if (any) /* unless someone is at it, or opening: then later */
        take_over_all(h, 0, 1);
}

void ph_share_tick_slow(pheap *h)
{
    uint64_t now = ph_os_time_ns(), next = ph_load_relaxed(&h->xnext_poll);
    if (now < next || !__atomic_compare_exchange_n(&h->xnext_poll, &next, now + PH_SHARE_POLL_NS, 0,
                                                   __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return;
    ph_share_poll(h);
}

void ph_share_root_lock(pheap *h)
{
    pthread_mutex_lock(&h->root_lock);
    /* A dead holder's root writes need no repair: each leaves the table as
     * a crash at the same point would (root.c). */
    if (h->shared)
        (void)ph_plock_lock(&ph_procs_table(h)->xroot_lock, &h->engine->share.plock);
}

void ph_share_root_unlock(pheap *h)
{
    if (h->shared)
        ph_plock_unlock(&ph_procs_table(h)->xroot_lock);
    pthread_mutex_unlock(&h->root_lock);
}

void ph_share_stats(pheap *h, struct pheap_stats *out)
{
    /* (a snapshot of a shared heap reads the table as its processes left it) */
    if (ph_header_region(&h->hdr, PH_REGION_PROCS) && !h->tier)
        out->heap_takeovers = ph_load_relaxed(&ph_procs_table(h)->xtakeovers);
    if (!h->shared)
        return;
    out->shared = 1;
    out->processes = 1;
    for (unsigned i = 0; i < PH_PROCS_SLOTS; i++) {
        ph_lease l;
        out->processes += (int)i != h->lease && ph_procs_slot(h, i, &l) == PH_SLOT_LIVE;
    }
    out->takeovers = ph_load_relaxed(&h->xtakeovers);
    out->takeover_max_ns = ph_load_relaxed(&h->xtakeover_max_ns);
}
