/*
 * heap.h -- the open heap: the handle behind `pheap *`, its thread records,
 * and the internal calls the modules of the heap layer share.  Volatile
 * only: nothing here is on media (see format/layout.h for that).
 */
#ifndef PH_HEAP_H
#define PH_HEAP_H

#include <pthread.h>
#include <stdint.h>

#include "alloc/engine.h"
#include "alloc/keys.h"
#include "alloc/space.h"
#include "format/layout.h"
#include "persist/persist.h"
#include "persist/sim.h"
#include "pheap.h"
#include "util/error.h"

typedef struct ph_thread ph_thread;
typedef struct ph_tx ph_tx;

/* Volatile state of one thread using one heap; created on first use,
 * folded into the heap's totals when the thread exits or the heap closes. */
struct ph_thread {
    pheap *heap;           /* owner; never dereferenced after close */
    ph_pctx pctx;          /* persistence counters and batches */
    ph_tcache tc;          /* free small blocks and the lane of this thread */
    ph_tx *tx;             /* the thread's transaction state (tx.c), or NULL */
    uint64_t xtx_commits;  /* transactions committed, aborted, and the fences */
    uint64_t xtx_aborts;   /*   of transactional calls (relaxed: pheap_stats reads) */
    uint64_t xtx_fences;
    uint32_t share_calls;  /* write calls, in a shared heap (share.h: ph_share_tick) */
    ph_thread *next;       /* in heap->threads (or heap->folding), under heap->threads_lock */
    ph_thread *prev;
};

struct pheap {
    /* What every allocation call reads, with the start of sp, in one line: */
    uint64_t id;                  /* unique per open in this process */
    uint64_t fork_gen;            /* ph_fork_generation when opened */
    ph_engine *engine;            /* the allocator's volatile state */
    unsigned readonly;            /* PHEAP_RDONLY or PHEAP_SNAPSHOT: no write call */
    unsigned xromode;             /* the heap is in read-only mode (PHEAP_MODE_READONLY):
                                     no write call; changed by pheap_set_mode only,
                                     under root_lock (mode.c) */
    unsigned needs_recovery;      /* GC heap found open: writers refused until
                                     pheap_recover (read anywhere) */
    unsigned gc;                  /* PHEAP_CONSISTENCY_GC heap */
    unsigned shared;              /* PHEAP_SHARED: other processes hold it too (share.c) */
    uint64_t xgc_key;             /* id while GC mode's small allocations and frees may
                                     take the thread cache alone (alloc.c): gc,
                                     read-write, not in read-only mode, recovered;
                                     else PH_GC_KEY_NONE, which no thread's cached id
                                     equals (ph_heap_gc_fast_update) */
    ph_gc_freemap gc_map;         /* the engine's chunk map for the GC fast path's free:
                                     one load nearer (set at open, fixed while it lasts) */
    ph_space sp;                  /* the mapping, its growth, persistence */
    unsigned flags;               /* PHEAP_* open flags */
    unsigned snapshot;            /* PHEAP_SNAPSHOT: a private view (sp.snapshot) */
    unsigned held_elsewhere;      /* snapshot of a heap held read-write elsewhere */
    unsigned in_addresses;        /* in the table pheap_of searches */
    unsigned was_unclean;         /* found PH_STATE_OPEN at open (not held elsewhere) */
    unsigned flush_source;        /* enum pheap_flush_source of `flush` below */
    unsigned flush;               /* enum pheap_flush_kind a read-write open uses
                                     (sp.persist.kind but for snapshots) */
    unsigned dax_file;            /* the file maps with MAP_SYNC */
    char *path;                   /* as given to pheap_open */
    ph_header hdr;                /* validated copy of the header */
    ph_root_entry *roots;         /* in the mapping, PH_ROOTS_MAX entries */
    pthread_mutex_t root_lock;    /* serialises root writers */
    pthread_mutex_t threads_lock; /* guards threads, folding and retired */
    ph_thread *threads;           /* live thread records */
    ph_thread *folding;           /* records their threads' exits are folding (thread.c):
                                     still counted by pheap_stats */
    pthread_cond_t exited_cv;     /* signalled when `folding` empties */
    ph_pctx retired;              /* counters of records already folded */
    uint64_t retired_tx[3];       /* their commits, aborts, transactional fences */
    struct ph_gc_state *gcs;      /* filters and the last trace's figures (gc.c) */
    struct ph_names *names;       /* the name directory (names_dir.c); NULL: the heap
                                     predates it */
    int lease;                    /* slot of this open's lease in the process table
                                     (procs.c), -1: none */
    struct ph_tier *tier;         /* the checkpoint durability level (tier.c), or NULL */
    int gate_fd;                  /* sharing: the open file of the process table's gate
                                     lock (procs.c), closed in fork children; -1 */
    pthread_mutex_t share_lock;   /* sharing: one takeover at a time in this process (the
                                     gate is a lock of the open file: every thread of
                                     the handle holds it alike) */
    uint64_t xnext_poll;          /* sharing: when a thread looks for dead processes next
                                     (ph_os_time_ns; atomic) */
    uint64_t xtakeovers;          /* sharing: dead processes this handle took over, */
    uint64_t xtakeover_max_ns;    /*   the longest of them (relaxed; under the gate) */
};

/* Sets xgc_key from what it stands for: at open, and whenever the access
 * mode or the need for recovery changes.  Ids are unique among the opens
 * of the process and never 0, the id of an empty ph_tls, nor this. */
#define PH_GC_KEY_NONE UINT64_MAX
static inline void ph_heap_gc_fast_update(pheap *h)
{
    int fast = h->gc && !h->readonly && !h->shared && !h->needs_recovery &&
               !ph_load_relaxed(&h->xromode);
    ph_store_relaxed(&h->xgc_key, fast ? h->id : PH_GC_KEY_NONE);
}

/* A call not built for a heap shared between processes yet: PHEAP_ENOTSUP
 * (with the error set) when h is one, else 0. */
static inline int ph_heap_unshared(pheap *h, const char *call)
{
    if (ph_likely(!h || !h->shared))
        return 0;
    return ph_err(PHEAP_ENOTSUP, "%s: not available in a heap opened with PHEAP_SHARED yet "
                  "(docs/SHARING.md); open it exclusively for this", call);
}

/* ---- sessions (open.c) ---- */
/* The session of a read-write open (also a snapshot's): the engine built,
 * recovering the heap when it was not closed cleanly, and the heap marked
 * open. */
int ph_heap_start_session(pheap *h);
/* The session of a process joining others on a shared heap, its engine
 * built (share.c): names and roots opened, the open counted. */
int ph_heap_join_session(pheap *h);

/* ---- thread records (thread.c) ---- */
typedef struct ph_tls_last {
    const pheap *heap;
    uint64_t id;
    ph_thread *thread;
    struct ph_tbin *bins;  /* thread->tc.bins: GC mode's pop, one add less */
} ph_tls_last;
extern __thread ph_tls_last ph_tls __attribute__((tls_model("initial-exec")));

ph_thread *ph_thread_get_slow(pheap *h);

/* The calling thread's record for `h`; NULL only when out of memory. */
static inline ph_thread *ph_thread_get(pheap *h)
{
    if (ph_likely(ph_tls.heap == h && ph_tls.id == h->id))
        return ph_tls.thread;
    return ph_thread_get_slow(h);
}

/* Handles inherited through fork().  A child gets a copy of the parent's
 * handles (and of their thread caches and volatile allocator state) while
 * the heap on media stays shared: allocating through the copy would hand
 * out the parent's blocks again.  The pthread_atfork child handler bumps
 * ph_fork_generation; a handle whose fork_gen differs is the copy, and
 * every call on it fails with PHEAP_EFORKED (pheap_close only releases
 * it).  Cost on the fast path: one load and a comparison. */
extern uint64_t ph_fork_generation;

static inline int ph_heap_inherited(const pheap *h)
{
    return ph_unlikely(h->fork_gen != ph_fork_generation);
}

/* Records PHEAP_EFORKED for `call` and returns it. */
int ph_heap_forked(const char *call);

/* The table of open heaps by address (addresses.c, pheap_of): a heap
 * joins it once mapped and leaves it before it is unmapped.  ENOMEM. */
int ph_addresses_add(pheap *h);
void ph_addresses_remove(pheap *h);

/* Registers a newly opened heap (assigns h->id and h->fork_gen); unregisters and frees
 * every thread record at close, returning cached blocks to their slabs
 * when `keep_caches` (see fold in thread.c). */
void ph_thread_register_heap(pheap *h);
void ph_thread_unregister_heap(pheap *h, int keep_caches);

/* Waits, h->threads_lock held, until no exiting thread is folding a
 * record of h: every cached block is then in a record on h->threads, in
 * a transfer batch or back in its slab. */
void ph_thread_wait_exits(pheap *h);

/* Sums the persistence counters and cached blocks (and their bytes) of
 * every thread of `h`.  Other threads' caches are read racily: the count
 * is a snapshot. */
void ph_thread_sum_counters(pheap *h, uint64_t *flushes, uint64_t *fences, uint64_t *reflushes,
                            uint64_t *cached, uint64_t *cached_bytes);

/* The engine's usage figures as pheap_stats reports them (GC mode: blocks
 * in thread caches are not live), with the sums of
 * ph_thread_sum_counters (api.c). */
void ph_heap_engine_stats(pheap *h, ph_engine_stats *st, uint64_t *flushes, uint64_t *fences,
                          uint64_t *reflushes, uint64_t *cached);

/* Sums the transaction counters of every thread: commits, aborts, fences. */
void ph_thread_sum_tx(pheap *h, uint64_t out[3]);

/* Persistence through the calling thread's context. */
static inline ph_pctx *ph_heap_pctx(pheap *h)
{
    static __thread ph_pctx oom_ctx; /* counts are lost only if malloc failed */
    ph_thread *t = ph_thread_get(h);
    return t ? &t->pctx : &oom_ctx;
}

/* The calling thread's record for a call that writes: NULL with the error
 * set when the handle is NULL, inherited, read-only, the heap is in
 * read-only mode, or memory ran out (alloc.c). */
ph_thread *ph_heap_writer(pheap *h, const char *call);
/* The same, without the access-mode check: for the calls of a transaction
 * the thread has open (tx.c), which may end after a switch to read-only
 * mode. */
ph_thread *ph_heap_writer_in_tx(pheap *h, const char *call);

/* PHEAP_EINVAL (message naming `call`) when [off, off+len) overlaps a
 * block that holds pheap's own metadata (ph_space_guard): the program's
 * calls never free such a block or write through it. */
int ph_heap_guarded(pheap *h, uint64_t off, uint64_t len, const char *call);

/* A user's initialiser, called by the engine with the handle added
 * (alloc.c). */
typedef struct ph_user_init {
    pheap *h;
    pheap_init_fn fn;
    void *arg;
} ph_user_init;

/* Fills *out (and *u, which it points to) for pheap_*_init's `flags`,
 * `fn` and `arg`: PHEAP_EINVAL for unknown flags. */
int ph_heap_block_init(pheap *h, unsigned flags, pheap_init_fn fn, void *arg, ph_user_init *u,
                       ph_block_init *out, const char *call);

/* ---- transactions (tx.c) ---- */
/* Frees the thread's transaction state; with `rollback`, a transaction it
 * left open is rolled back first (thread exit, clean close; not a
 * simulated crash). */
void ph_tx_thread_exit(pheap *h, ph_thread *t, int rollback);

/* 0 and the usable bytes when `off` starts a block that the calling
 * thread's open transaction allocated (and did not free); else nonzero. */
int ph_tx_usable(pheap *h, uint64_t off, uint64_t *bytes);

/* ---- tracing (gc.c) ---- */
/* Frees the handle's filters. */
void ph_gc_state_free(pheap *h);
/* The figures of pheap_stats kept by gc.c. */
void ph_gc_stats(pheap *h, struct pheap_stats *out);

/* ---- owner and access mode (mode.c) ---- */
/* PHEAP_EROMODE with `call` in the message. */
int ph_mode_refuse(const char *call);
/* Reads the mode word at open into h->xromode (the header validation
 * checked it already). */
void ph_mode_load(pheap *h);

/* ---- the checkpoint durability level (tier.c) ----
 * ph_tier_open, after the heap file is open and locked as sp.fd: replays a
 * committed checkpoint journal (every open); at the checkpoint level,
 * finds or makes the working copy and makes it sp.fd (the heap file's
 * descriptor, which holds the lock, moves into h->tier); at another level,
 * copies a working copy a crash left into the file and removes it.
 * ph_tier_attach, once the working copy is mapped: the dirty map, given to
 * the back end.  ph_tier_start: the thread of automatic checkpoints.
 * ph_tier_close: the last checkpoint, then the working copy goes.
 * ph_tier_release frees (a failed open removes a working copy it made). */
struct ph_config;
int ph_tier_open(pheap *h, const struct ph_config *cfg);
int ph_tier_attach(pheap *h);
int ph_tier_start(pheap *h);
int ph_tier_close(pheap *h);
void ph_tier_release(pheap *h, int inherited, int failed_open);
void ph_tier_stats(pheap *h, struct pheap_stats *out);
/* The heap file's descriptor (not the working copy's). */
int ph_tier_file(const pheap *h);

/* ---- roots (root.c) ---- */
/* 0, or PHEAP_ENAME with the message of a bad root name. */
int ph_root_name_check(const char *name);
int ph_root_check(pheap *h, unsigned *nroots, char *err, size_t errlen);
/* Open's check of the root table (root.c): PHEAP_ECORRUPT or 0. */
int ph_root_open_check(pheap *h);

#endif /* PH_HEAP_H */
