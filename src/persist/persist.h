/*
 * persist.h -- the persistence layer: the only module that flushes cache
 * lines and issues fences.  Back ends (clwb, clflushopt, clflush, msync,
 * none, crash simulator) sit behind one small ops table; everything else in
 * pheap calls ph_persist_flush / ph_persist_fence / ph_persist_range.
 *
 * Counting.  Every back end counts, per thread:
 *   flushes    cache lines handed to a flush,
 *   fences     fence calls,
 *   reflushes  lines flushed again while an earlier flush of the same line
 *              is in the thread's current batch (since its last fence) or
 *              in the batch just before it -- the case NVAlloc measured as
 *              costly on real persistent memory.
 */
#ifndef PH_PERSIST_H
#define PH_PERSIST_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "util/fault.h"
#include "util/util.h"

#define PH_CACHE_LINE 64u
#define PH_BATCH_TRACK 16u  /* lines remembered per batch for reflush counting */

struct ph_sim;
struct ph_sim_pending;
struct ph_ckpt;

/* A flush site: one place in the source that flushes, fences or stores
 * non-temporally.  Every call below records its caller's site (a static
 * record in the section ph_persist_sites, so a test-only build can list
 * them all): the crash simulator can crash at the k-th fence of a site,
 * and a test-only build (PHEAP_FAULTS) can drop one site to prove a test
 * needs it.  A site inside a static inline function has one record per
 * file that uses it, all with the same file and line. */
typedef struct ph_site {
    const char *file;
    const char *func;
    uint32_t line;
    uint32_t kind;       /* PH_SITE_* */
} ph_site;
enum { PH_SITE_FLUSH = 1, PH_SITE_FENCE, PH_SITE_RANGE, PH_SITE_NT };

#define PH_SITE(kind)                                                                   \
    ({                                                                                  \
        static const ph_site site_ __attribute__((section("ph_persist_sites"), used,    \
                                                  aligned(8))) = {__FILE__, __func__,   \
                                                                  __LINE__, kind};      \
        &site_;                                                                         \
    })

/* Per-thread persistence state; lives in the thread's record of a heap.
 * Counters are written by the owning thread only and read by others
 * (pheap_stats) with relaxed atomics. */
typedef struct ph_pctx {
    uint64_t xflushes;               /* lines flushed */
    uint64_t xfences;                /* fences */
    uint64_t xreflushes;             /* see above */
    uint32_t ncur, nprev;            /* valid entries in cur[] / prev[] */
    uintptr_t cur[PH_BATCH_TRACK];   /* lines flushed since the last fence */
    uintptr_t prev[PH_BATCH_TRACK];  /* lines of the batch before */
    struct ph_sim_pending *pending;  /* simulator: flushed, not yet fenced */
    uint32_t msync_dirty;            /* msync back end: flushed since the last fence */
    const ph_site *site;             /* site of the fence in progress */
} ph_pctx;

typedef struct ph_persist ph_persist;

typedef struct ph_persist_ops {
    const char *name;
    /* Writes back `n` lines starting at line-aligned `line`. */
    void (*flush)(ph_persist *p, ph_pctx *c, uintptr_t line, uint64_t n);
    void (*fence)(ph_persist *p, ph_pctx *c);
    /* Stores n words src[] to dst[] (all in one line), bypassing the cache
     * where the CPU can (movnti), else stores and a flush of the line. */
    void (*store_nt)(ph_persist *p, ph_pctx *c, uint64_t *dst, const uint64_t *src, unsigned n);
} ph_persist_ops;

/* Group commit of the msync back end: a flush only notes that the thread
 * has something to write back; its fence takes a ticket and waits until
 * one fdatasync of the file that started after the ticket was taken has
 * returned.  Whichever waiting thread finds no sync running runs the next
 * one for every ticket taken so far, so N threads fencing at once share
 * one sync instead of queueing N.  A leader whose last sync served several
 * threads first yields, until as many have arrived and a yield brings no
 * more (16 yields at most): the
 * threads its sync released are back with their next fence within
 * microseconds, while a sync takes a device flush, and a sync started
 * before they arrive would serve the leader alone. */
typedef struct ph_group_sync {
    pthread_mutex_t lock;
    pthread_cond_t done_cv;
    uint64_t requested;          /* tickets taken */
    uint64_t done;               /* every ticket up to this one is durable */
    int running;                 /* a sync is in progress */
    uint64_t last_batch;         /* tickets the last sync served */
    uint64_t xsyncs;             /* syncs run (relaxed: pheap_stats reads) */
    int error;                   /* first failed sync (PHEAP_EIO ...), under lock */
} ph_group_sync;

struct ph_persist {
    const ph_persist_ops *ops;
    unsigned kind;               /* enum pheap_flush_kind */
    struct ph_sim *sim;          /* PHEAP_FLUSH_SIM only */
    int fd;                      /* the heap file (msync back end) */
    unsigned plain_stores;       /* msync: word stores are plain stores of the shared
                                    page and a fence syncs the file, so a fence makes
                                    durable the page as it is then, whichever thread
                                    stored what: a lock guarding a word need not be held
                                    across it (slab.h) */
    ph_group_sync *group;        /* msync back end: the group commit */
    struct ph_ckpt *ckpt;        /* PHEAP_FLUSH_CHECKPOINT: the dirty map (persist/ckpt.h),
                                    set by the caller after ph_persist_init */
    unsigned nt_stores;          /* commit words are written with non-temporal stores
                                    (movnti); else stored and their line written back */
};

/* How the cache-line back ends write a commit word (ph_persist_store_nt):
 * the cheaper of the two on this CPU (timed once per process), or the one
 * PHEAP_NT_STORES asks for. */
enum { PH_NT_AUTO = 0, PH_NT_ON = 1, PH_NT_OFF = 2 };
/* 1 when movnti and a fence cost no more than a store, a write-back of
 * its line (clwb, or clflushopt when `clflushopt`) and a fence on this
 * CPU (flush_x86.c; 1 off x86). */
int ph_flush_nt_faster(int clflushopt);

/* Selects back end `kind` (never AUTO) for the heap file open as `fd`,
 * its commit words written as `nt` (PH_NT_*) says.  PHEAP_ENOTSUP when
 * the CPU lacks the instruction; PHEAP_ENOMEM. */
int ph_persist_init(ph_persist *p, unsigned kind, struct ph_sim *sim, int fd, unsigned nt);

/* Releases what ph_persist_init allocated.  `inherited`: in a fork child's
 * copy, whose condition variable may count waiters of the parent's threads
 * that do not exist here: freed without being destroyed. */
void ph_persist_fini(ph_persist *p, int inherited);

/* The first error of a file sync the msync back end ran (a fence cannot
 * return one), or 0. */
int ph_persist_sync_error(const ph_persist *p);

/* File syncs the msync back end ran (0 for the other back ends). */
uint64_t ph_persist_syncs(const ph_persist *p);

/* Kind that AUTO means for a mapping: cache-line flushes (best available)
 * when `dax`, msync otherwise. */
unsigned ph_persist_auto_kind(int dax);

/* Parses "clwb", "msync", ... into *kind; PHEAP_EINVAL if unknown. */
int ph_persist_parse_kind(const char *s, unsigned *kind);

/* Frees what the thread context holds (simulator pending lines). */
void ph_persist_ctx_release(ph_pctx *c);

void ph_persist_track(ph_pctx *c, uintptr_t first, uint64_t n);

/* Simulator: a durable store, counted (persist/sim.c). */
void ph_sim_store(struct ph_sim *s, ph_pctx *c, uint64_t *dst, uint64_t v);

/* A store of a durable 8-byte word (metadata, or a word of the heap that a
 * protocol of pheap writes, like the destination of pheap_alloc_to): an
 * atomic store, durable after a flush of its line and a fence.  Going
 * through here lets the crash simulator count it, crash just after it, and
 * write its line back early. */
static inline void ph_persist_write(ph_persist *p, ph_pctx *c, uint64_t *word, uint64_t v)
{
    if (ph_unlikely(p->sim != NULL))
        ph_sim_store(p->sim, c, word, v);
    else
        ph_store(word, v);
}

/* Compare-and-swap of a durable word that other processes change too (a
 * slab bitmap word of a heap shared between processes): 1 when *word held
 * *expected and now holds `desired`, else 0 with *expected updated.
 * Durable, like a store, after a flush of its line and a fence.  The
 * simulator counts a successful one as a store (its runs are
 * single-threaded where these meet). */
static inline int ph_persist_cas(ph_persist *p, ph_pctx *c, uint64_t *word, uint64_t *expected,
                                 uint64_t desired)
{
    if (!__atomic_compare_exchange_n(word, expected, desired, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return 0;
    if (ph_unlikely(p->sim != NULL))
        ph_sim_store(p->sim, c, word, desired);
    return 1;
}

/* Starts writing back [addr, addr+len); durable after the next fence. */
#define ph_persist_flush(...) ph_persist_flush_at(__VA_ARGS__, PH_SITE(PH_SITE_FLUSH))
static inline void ph_persist_flush_at(ph_persist *p, ph_pctx *c, const void *addr, size_t len,
                                       const ph_site *site)
{
    if (ph_unlikely(len == 0) || ph_fault_dropped(site))
        return;
    uintptr_t first = (uintptr_t)addr & ~(uintptr_t)(PH_CACHE_LINE - 1);
    uintptr_t last = ((uintptr_t)addr + len - 1) & ~(uintptr_t)(PH_CACHE_LINE - 1);
    uint64_t n = (last - first) / PH_CACHE_LINE + 1;
    ph_persist_track(c, first, n);
    p->ops->flush(p, c, first, n);
}

/* The fence itself, at `site`. */
static inline void ph_persist_fence_now(ph_persist *p, ph_pctx *c, const ph_site *site)
{
    ph_store_relaxed(&c->xfences, c->xfences + 1);
    c->nprev = c->ncur;
    for (uint32_t i = 0; i < c->ncur; i++)
        c->prev[i] = c->cur[i];
    c->ncur = 0;
    c->site = site;
    p->ops->fence(p, c);
}

/* Fence: every line this thread flushed before is durable on return. */
#define ph_persist_fence(...) ph_persist_fence_at(__VA_ARGS__, PH_SITE(PH_SITE_FENCE))
static inline void ph_persist_fence_at(ph_persist *p, ph_pctx *c, const ph_site *site)
{
    if (!ph_fault_dropped(site))
        ph_persist_fence_now(p, c, site);
}

/* Flush + fence (one site: dropping it drops the flush). */
#define ph_persist_range(...) ph_persist_range_at(__VA_ARGS__, PH_SITE(PH_SITE_RANGE))
static inline void ph_persist_range_at(ph_persist *p, ph_pctx *c, const void *addr, size_t len,
                                       const ph_site *site)
{
    ph_persist_flush_at(p, c, addr, len, site);
    ph_persist_fence_now(p, c, site);
}

/* Atomic 8-byte store of a durable word, flushed and fenced: the commit
 * step of every protocol. */
#define ph_persist_store64(...) ph_persist_store64_at(__VA_ARGS__, PH_SITE(PH_SITE_RANGE))
static inline void ph_persist_store64_at(ph_persist *p, ph_pctx *c, uint64_t *word, uint64_t v,
                                         const ph_site *site)
{
    ph_persist_write(p, c, word, v);
    ph_persist_range_at(p, c, word, sizeof(*word), site);
}

/* Non-temporal store of durable words (n words of one line, or one word):
 * writes them to memory without pulling the line into the cache (movnti on
 * the x86 back ends where that and the fence cost less than a store, a
 * write-back and the fence; else the latter: ph_persist_init chooses).
 * Durable after the thread's next fence; counted as one flush.
 * Non-temporal stores are weakly ordered, so no other thread may write
 * these words between this store and that fence (the slab code holds
 * the word's lock until then; an extent-log slot has one writer), and the
 * current value must come from a volatile copy: reading it back would miss
 * the cache.  (Dropped in a test-only build: plain stores, never
 * written back.) */
#define ph_persist_store_nt_words(...) ph_persist_store_nt_words_at(__VA_ARGS__, PH_SITE(PH_SITE_NT))
static inline void ph_persist_store_nt_words_at(ph_persist *p, ph_pctx *c, uint64_t *dst,
                                                const uint64_t *src, unsigned n,
                                                const ph_site *site)
{
    if (ph_fault_dropped(site)) {
        for (unsigned i = 0; i < n; i++)
            ph_persist_write(p, c, &dst[i], src[i]);
        return;
    }
    ph_persist_track(c, (uintptr_t)dst & ~(uintptr_t)(PH_CACHE_LINE - 1), 1);
    p->ops->store_nt(p, c, dst, src, n);
}

#define ph_persist_store_nt(p, c, word, v)                                              \
    ph_persist_store_nt_words_at(p, c, word, (const uint64_t[1]){v}, 1, PH_SITE(PH_SITE_NT))

#endif /* PH_PERSIST_H */
