/*
 * engine.h -- the allocation engine of one open heap: per-CPU arenas of
 * slabs behind the thread caches, the extent allocator for large blocks
 * and slab chunks, the chunk map from offsets to slabs, and the lanes.
 * Everything here is volatile and rebuilt at open from the durable
 * metadata (extent log, slab bitmaps, lanes).
 */
#ifndef PH_ALLOC_ENGINE_H
#define PH_ALLOC_ENGINE_H

#include <pthread.h>
#include <stdint.h>

#include "alloc/extent.h"
#include "alloc/slab.h"
#include "alloc/space.h"
#include "alloc/tcache.h"
#include "format/layout.h"
#include "log/txlog.h"
#include "util/plock.h"

typedef struct ph_arena {
    pthread_mutex_t lock;
    ph_slab *partial[PH_CLASSES];  /* slabs with available blocks, under lock */
    uint32_t made[PH_CLASSES];     /* slabs made per class, under lock */
    uint32_t xthreads;             /* threads whose home this is (atomic) */
} __attribute__((aligned(64))) ph_arena;

/* A batch of free blocks of one class moving between thread caches as a
 * unit (GC mode): a producer's overflow becomes a consumer's refill
 * without passing each block through its slab. */
typedef struct ph_batch {
    struct ph_batch *next;
    uint32_t n;
    uint64_t v[];
} ph_batch;

/* An engine of a heap shared between processes (docs/SHARING.md): who
 * this process is, and where the state every process sees lives. */
typedef struct ph_engine_share {
    uint64_t me;               /* this process's identity (ph_procs_identity) */
    unsigned owner;            /* its lease slot + 1: the owner of its extent reservations */
    ph_procs_chunk *chunks;    /* the process table's words of chunk 0, 1, ... */
    uint64_t *ext_lock;        /* the extent log's lock between processes */
    uint8_t *lanes;            /* the process table's lane holders (PH_PROCS_LANES_AT) */
    ph_plock_owner plock;      /* identity and death test for the locks between processes */
} ph_engine_share;

typedef struct ph_engine {
    ph_space *sp;
    uint64_t data_off;             /* sp->data_off, one load nearer */
    ph_extents *ext;
    uint64_t nchunks;              /* chunks at max_size */
    ph_slab **chunks;              /* [nchunks]: the slab a chunk is now, or NULL */
    ph_slab **slabs;               /* [nchunks]: volatile part ever made for a chunk */
    uint64_t *screened;            /* [nchunks / 64]: chunks whose descriptor was found
                                      free of allocated blocks in this open (engine_check.c) */
    uintptr_t *gc_slabs;           /* [nchunks], GC mode: chunks[] tagged with each slab's
                                      class (ph_gc_slab_tag), for the fast free; preceded
                                      by data_off / PH_CHUNK_SIZE zero entries, one per
                                      chunk of metadata (gc_map_lead) */
    unsigned narenas;
    unsigned next_arena;           /* round robin at open */
    ph_arena *arenas;
    ph_lanes lanes;                /* the lane region */
    pthread_mutex_t lane_lock;
    uint8_t lane_used[PH_LANES_MAX];
    unsigned recovered;            /* lane entries rolled forward at open */
    void *txlogs;                  /* the lane region, when it holds transaction logs
                                      (PH_FEAT_INCOMPAT_TX); else NULL */
    unsigned tx_rolled_back;       /* interrupted transactions recovery rolled back */
    unsigned tx_rolled_forward;    /* ... and forward */
    int morph;                     /* slabs may morph (PH_FEAT_INCOMPAT_MORPH, LOG mode) */
    uint64_t xmorphs;              /* morphs since the open (relaxed) */
    int gc;                        /* GC consistency mode (engine_gc.c): no bitmap is
                                      written on the fast path; bits[] of a slab
                                      count blocks in thread caches as allocated */
    uint64_t xgc_double_frees;     /* GC mode: found when caches gave blocks back */
    pthread_mutex_t xfer_lock;     /* guards xfer and xfer_n */
    ph_batch *xfer[PH_CLASSES];    /* GC mode: batches of cached blocks between threads */
    uint32_t xfer_n[PH_CLASSES];   /* batches per class */
    uint64_t xxfer_blocks;         /* blocks in them, and their bytes (relaxed) */
    uint64_t xxfer_bytes;
    int shared;                    /* a heap shared between processes (engine_share.c):
                                      chunks[] holds the slabs this process owns */
    ph_engine_share share;
} ph_engine;

/* Builds the engine from the durable metadata.  When `writable` (a
 * read-write open, or a snapshot's private view), what a morph cut short
 * left in a slab descriptor is put right (alloc/morph.h); else only the
 * volatile copy is.  When `recover`, committed lane entries are rolled
 * forward first (read-write opens after an unclean shutdown).  Errors:
 * PHEAP_ECORRUPT, PHEAP_ENOMEM. */
int ph_engine_open(ph_space *sp, ph_pctx *c, int writable, int recover, ph_engine **out);
void ph_engine_close(ph_engine *e);
/* The engine of a process attaching to a heap shared between processes:
 * an extent index that follows the others' (ph_extents_open_shared), no
 * slab of its own yet -- it makes its own, adopts slabs no process owns,
 * and frees blocks of the others' through their remote-free lists
 * (engine_share.c).  No recovery: the first process to attach did it.
 * Errors as ph_engine_open. */
int ph_engine_open_shared(ph_space *sp, const ph_engine_share *share, ph_engine **out);
/* A shared engine's process detaches: its slabs (caches drained first)
 * belong to no process any more, for others to adopt. */
void ph_engine_detach(ph_engine *e);
/* A survivor takes over a dead process of a shared heap (lease slot
 * owner - 1, identity `dead`), while the others run: the committed
 * entries of its lanes rolled forward and retired, then its extent
 * reservations dropped, then its slabs left to no one (docs/SHARING.md,
 * "Takeover").  Not yet: its transaction logs.  One survivor at a time
 * per dead process: the caller claims the takeover first (two replays
 * would push one block twice).  0, or the error of a lane entry that
 * cannot be replayed (ECORRUPT; the rest left as it was). */
typedef struct ph_takeover_info {
    unsigned lanes, entries;      /* its lanes, and their entries rolled forward */
    uint64_t reservations, slabs; /* reservations dropped, slabs left to no one */
} ph_takeover_info;
int ph_engine_takeover(ph_engine *e, ph_pctx *c, unsigned owner, uint64_t dead,
                       ph_takeover_info *out);
/* The purge of close, ahead of it: freed large blocks' pages go back to
 * the file system now (before the checkpoint level's last checkpoint). */
void ph_engine_purge(ph_engine *e);

/* How a block is filled before its allocation commits (pheap_alloc_init,
 * pheap_alloc_to_init): zeroed when `zero`, then fn(arg, block, usable)
 * unless fn is NULL; a nonzero return of fn cancels the allocation. */
typedef struct ph_block_init {
    int zero;
    int (*fn)(void *arg, void *block, size_t usable);
    void *arg;
    int program_dest;   /* the destination word is the program's: after fn (which
                           may call pheap), it must not be in a guarded block */
} ph_block_init;

/* The operations behind pheap_alloc & co; arguments already validated
 * except what only the engine can check.  `init` may be NULL. */
uint64_t ph_engine_alloc(ph_engine *e, ph_tcache *t, ph_pctx *c, size_t size,
                         const ph_block_init *init);
int ph_engine_free(ph_engine *e, ph_tcache *t, ph_pctx *c, uint64_t off);
int ph_engine_alloc_to(ph_engine *e, ph_tcache *t, ph_pctx *c, size_t size, uint64_t *dest,
                       const ph_block_init *init);
int ph_engine_free_from(ph_engine *e, ph_tcache *t, ph_pctx *c, uint64_t *src);
/* The names' failure-atomic steps (heap/names.c).  *dest is a versioned
 * word (format/layout.h, PH_LOG_BIND): bind allocates a block (*block) and
 * stores block | nv_bits there, durable on return; the body -- the rest of
 * dest's line and body_lines - 1 lines after it, written and flushed by
 * the caller -- is published with it or not at all -- LOG mode: two fences,
 * the entry retired at the thread's next fence; GC mode: two, nothing
 * logged: a fence for what the caller flushed (the rest of the entry) and
 * the block's initialised contents, then the word's.  Unbind
 * frees `off`, which *dest names, and stores nv there (LOG mode: three
 * fences; GC mode: nv durable first, then the block freed).  Errors as
 * ph_engine_alloc_to and ph_engine_free_from; nothing changes on error. */
int ph_engine_alloc_bind(ph_engine *e, ph_tcache *t, ph_pctx *c, size_t size,
                         const ph_block_init *init, uint64_t *dest, uint64_t nv_bits,
                         unsigned body_lines, uint64_t *block);
int ph_engine_free_unbind(ph_engine *e, ph_tcache *t, ph_pctx *c, uint64_t off, uint64_t *src,
                          uint64_t nv);
int ph_engine_usable(ph_engine *e, uint64_t off, uint64_t *bytes);

/* 0 when the 8-byte word at data offset `off` lies inside a live block;
 * else PHEAP_ENOTLIVE, with a message naming `call` and what is there
 * (a freed block, space never allocated).  No lock for a small block: one
 * bitmap read. */
int ph_engine_word_live(ph_engine *e, uint64_t off, const char *call);

/* ---- moving blocks out of sparse slabs (pheap_defrag, heap/defrag.c) ----
 * A slab chosen to empty is set aside ("evacuated"): off its arena's
 * partial list until the end, so that no refill -- the allocations that
 * take the moved blocks included -- hands out its free blocks; blocks
 * freed into it meanwhile still return to it.  The caller's own cache must
 * hold none of its blocks (drain it first). */
typedef struct ph_slab_census {
    uint64_t chunk;       /* data offset of the slab's chunk */
    unsigned cls;         /* its size class */
    uint32_t nblocks;     /* blocks of the class it holds */
    uint32_t live;        /* blocks allocated now: the class's and a morph's old ones */
    uint32_t room;        /* blocks of the class free now (neither allocated nor pinned) */
} ph_slab_census;
/* 1 and *out when `off` lies in a slab; 0 (a large block, free space).
 * A racy snapshot: exact while no other thread allocates from the slab. */
int ph_engine_slab_census(ph_engine *e, uint64_t off, ph_slab_census *out);
/* Sets the slab of `chunk` aside; 0 when it is no slab now or is set
 * aside already (by another thread's defragmentation). */
int ph_engine_evacuate(ph_engine *e, uint64_t chunk);
/* Ends it: an empty slab goes back to free space (durable on return: 1),
 * else the slab takes its place among the partial ones again (0). */
int ph_engine_evacuate_end(ph_engine *e, ph_pctx *c, uint64_t chunk);
/* ---- GC mode and tracing (engine_gc.c) ----
 * In GC mode a slab's bits[] copy is kept at batch boundaries under its
 * arena's lock: A|E set when a block goes into a thread cache, A cleared
 * when it comes back; the descriptor's bitmap is written only at a clean
 * close (ph_engine_gc_writeback) and after a recovery.  So A means
 * "allocated or cached" while the heap runs, and exactly "allocated" once
 * every cache is drained. */

/* GC mode's map entry of a slab: its address (aligned to 64) plus its
 * class, which never changes in GC mode (no morph); 0 for no slab. */
_Static_assert(PH_CLASSES <= 64, "a class must fit below a slab's 64-byte alignment");
static inline uintptr_t ph_gc_slab_tag(const ph_slab *s)
{
    return s ? (uintptr_t)s + ph_load_relaxed(&s->xcls) : 0;
}

/* What GC mode's fast free reads of the engine (a copy in the handle). */
typedef struct ph_gc_freemap {
    const uintptr_t *slabs;    /* ph_engine.gc_slabs with its lead: entry off / PH_CHUNK_SIZE
                                  is the chunk at offset off, 0 in the metadata */
    uint64_t nchunks;          /* entries of the map: the heap's chunks at its largest size,
                                  metadata included */
} ph_gc_freemap;

/* The map of an engine's GC mode for the fast free. */
ph_gc_freemap ph_engine_gc_freemap(const ph_engine *e);

/* GC mode's small free, inlined into pheap_free (the allocation is a pop
 * there): a push on the thread cache.  0 when the engine's own call must
 * run instead (cache full, a large block, an offset that is no block
 * start, a block available in its slab: that call tells which).  Offsets
 * outside the data region -- 0 among them -- index a zero entry or none
 * (the data region starts at a chunk boundary), and a chunk beyond the
 * heap's size now holds no slab.  The class comes
 * with the slab's address: the one line of the slab read is the held
 * bit's. */
static inline __attribute__((always_inline)) uintptr_t ph_gc_map_entry(const ph_gc_freemap *m,
                                                                       uint64_t off, uint32_t *r)
{
    uint64_t ch = off / PH_CHUNK_SIZE;
    *r = (uint32_t)(off % PH_CHUNK_SIZE); /* the offset in the chunk */
    return ph_likely(ch < m->nchunks) ? ph_load(&m->slabs[ch]) : 0;
}

static inline __attribute__((always_inline)) int ph_engine_gc_free_fast(const ph_gc_freemap *m,
                                                                        ph_tbin *bins, uint64_t off)
{
    uint32_t r;
    uintptr_t v = ph_gc_map_entry(m, off, &r);
    if (ph_unlikely(!v))
        return 0;
    unsigned cls = (unsigned)(v % 64);
    const ph_slab *s = (const ph_slab *)(v - cls);
    if (ph_unlikely(!ph_slab_held(s, r)))
        return 0;
    return ph_tcache_push_top(bins, cls, off);
}

/* The same for an 8-byte block (class 0), which ph_engine_gc_free_fast
 * leaves: two blocks to a held bit, so the block's index and its
 * available bit are read.  0 for any other offset. */
int ph_engine_gc_free_tiny(const ph_gc_freemap *m, ph_tbin *bins, uint64_t off);

/* Selects GC mode for an engine just opened. */
void ph_engine_set_gc(ph_engine *e);

/* Clean close of a GC heap, thread caches drained: every slab descriptor
 * bitmap gets its copy, durable on return (one fence). */
void ph_engine_gc_writeback(ph_engine *e, ph_pctx *c);

/* Returns a thread's cached blocks to their slabs (pheap_gc in GC mode
 * empties every cache first). */
void ph_engine_drain_cache(ph_engine *e, ph_tcache *t, ph_pctx *c);
/* Returns the blocks of every transfer batch to their slabs (close, pheap_gc). */
void ph_engine_drain_batches(ph_engine *e, ph_pctx *c);

/* Mark bits of one trace: one per possible small block of every backed
 * chunk and one per page (large blocks), set atomically by any number of
 * marking threads. */
typedef struct ph_gc_marks ph_gc_marks;
#define PH_GC_ALL_BLOCKS 0x1u /* recovery: every block of a slab is a candidate (the
                                  bitmaps are unknown); else only allocated ones */
int ph_gc_marks_new(ph_engine *e, unsigned flags, ph_gc_marks **out);
void ph_gc_marks_free(ph_gc_marks *m);
/* If `v` is the offset of a candidate block: 1 and its usable *bytes when
 * the caller must visit it (this call marked it; with `filtered`, also the
 * first filtered visit of a block marked conservatively before), 0 when
 * not; -1 when `v` starts no candidate block.  Lock-free; the engine must
 * not change meanwhile. */
int ph_gc_mark(ph_gc_marks *m, uint64_t v, int filtered, uint64_t *bytes);
/* 1 when `v` lies in the data region now backed (a cheap first test). */
int ph_gc_in_range(const ph_gc_marks *m, uint64_t v);

typedef struct ph_gc_sweep {
    uint64_t marked_blocks, marked_bytes, freed_blocks, freed_bytes;
} ph_gc_sweep;
typedef void (*ph_gc_progress)(void *arg, uint64_t done, uint64_t total);
/* Frees every candidate block left unmarked (with `dry`, only counts):
 * after a recovery (PH_GC_ALL_BLOCKS) the bitmaps become the marks, empty
 * slabs and unmarked large blocks are released; after a collection each
 * unmarked allocated block is freed as pheap_free would (LOG: durably).
 * No thread may use the engine meanwhile; thread caches must be empty in
 * GC mode.  0 or PHEAP_ENOMEM. */
int ph_engine_gc_sweep(ph_engine *e, ph_tcache *t, ph_pctx *c, ph_gc_marks *m, int dry,
                       ph_gc_sweep *out, ph_gc_progress progress, void *arg);

/* ---- transactions (engine_tx.c) ---- */

/* The transaction log of lane `lane`, or NULL when the heap predates
 * transactions. */
static inline ph_txlog_anchor *ph_engine_txlog(ph_engine *e, unsigned lane)
{
    return e->txlogs ? ph_txlog_anchor_of(e->txlogs, lane) : NULL;
}

/* The calling thread's lane (taken on first use): 0, or PHEAP_ENOMEM. */
int ph_engine_lane(ph_engine *e, ph_tcache *t, ph_pctx *c);

/* A block for a transaction: taken from the thread cache or the extent
 * index but not allocated (nothing durable).  0 with *off and its usable
 * *bytes, or the error of a full heap. */
int ph_engine_tx_reserve(ph_engine *e, ph_tcache *t, ph_pctx *c, size_t size, uint64_t *off,
                         uint64_t *bytes);
/* Gives back a block of ph_engine_tx_reserve that was not allocated. */
void ph_engine_tx_unreserve(ph_engine *e, ph_tcache *t, ph_pctx *c, uint64_t off);

/* The live block that data offset `off` lies in: 0 with its start and
 * usable bytes, or PHEAP_ENOTLIVE (message naming `call`). */
int ph_engine_block_at(ph_engine *e, uint64_t off, uint64_t *start, uint64_t *bytes,
                       const char *call);

/* An allocation or free that a transaction's commit applies (kind
 * PH_TXREC_ALLOC or PH_TXREC_FREE); the other fields are the engine's. */
typedef struct ph_tx_change {
    uint64_t off, bytes;
    uint32_t kind;
    uint32_t order;        /* position in the transaction */
    uint32_t skip;         /* a free another thread made first: nothing to release */
    uint32_t word, shift;  /* bitmap word and A's shift (small blocks) */
    ph_slab *slab;         /* NULL: large */
    uint32_t gen;          /* the slab's xgen they were found at (alloc/morph.h) */
    uint32_t old;          /* an old block of a morphed slab ... */
    uint32_t index;        /*   and its index */
    uint32_t foreign;      /* a free of a block of another process's slab (a shared heap) */
} ph_tx_change;

/* Applies v[0..n) in order: ph_engine_tx_lock locks the bitmap words
 * (and reorders v; call it before writing anything back), then
 * ph_engine_tx_stage writes them and appends the extent-log entries,
 * durable at the caller's next fence, after which it calls
 * ph_engine_tx_unlock. */
void ph_engine_tx_lock(ph_engine *e, ph_tx_change *v, size_t n);
void ph_engine_tx_stage(ph_engine *e, ph_pctx *c, ph_tx_change *v, size_t n);
void ph_engine_tx_unlock(ph_engine *e, ph_tx_change *v, size_t n);
/* After the transaction's log is retired: freed blocks become reusable. */
void ph_engine_tx_release(ph_engine *e, ph_tcache *t, ph_pctx *c, const ph_tx_change *v,
                          size_t n);

/* 1 when data offset `off` is the xnext word of a transaction log's anchor
 * (the destination of an overflow segment's logged allocation). */
int ph_engine_tx_anchor_word(const ph_engine *e, uint64_t off);

/* Returns a thread's cached blocks and lane (thread exit). */
void ph_engine_thread_exit(ph_engine *e, ph_tcache *t, ph_pctx *c);

/* Usage totals and per-class figures (see pheap_stats). */
typedef struct ph_engine_stats {
    uint64_t live_blocks, live_bytes, slabs, slab_bytes, large_extents, large_bytes;
    uint64_t free_bytes, largest_free;
    uint64_t largest_alloc;   /* largest large block an allocation gets now: a free
                                 extent, or the free tail grown up to max_size */
    uint64_t class_slabs[PH_CLASSES], class_live[PH_CLASSES];
    uint64_t morphed_slabs, old_blocks; /* slabs with blocks of a class they had, and those */
} ph_engine_stats;
void ph_engine_stats_get(ph_engine *e, ph_engine_stats *out);

/* The data region's runs for pheap_walk_chunks (engine_map.c), from its
 * first page to the backed end, in offset order: free pages are PUNCHED
 * where file `fd` has a hole, large blocks are META where
 * is_meta(arg, off, bytes) says they hold pheap's metadata.  Returns 0,
 * or fn's nonzero return. */
typedef struct ph_engine_map_req {
    int fd;
    int (*is_meta)(void *arg, uint64_t off, uint64_t bytes);
    pheap_chunk_fn fn;
    void *arg;                 /* for is_meta and fn */
} ph_engine_map_req;
int ph_engine_map(ph_engine *e, const ph_engine_map_req *req);

/* Deep check of the engine's durable metadata against its index; returns
 * the number of problems and writes the first into err.  With lanes_idle,
 * an active lane entry is a problem too (no operation may be in flight:
 * false for a read-only view of a heap that crashed).  `traced` is 0 for
 * a GC heap awaiting pheap_recover: the descriptors of chunks that are no
 * slab are not checked (recovery zeroes what they hold).  *orphans: how
 * many of the problems are such descriptors recording allocated blocks. */
unsigned ph_engine_check(ph_engine *e, int lanes_idle, int traced, char *err, size_t errlen,
                         unsigned *orphans);

/* The part of that check each open makes after its recovery (`recovered`:
 * the lanes and transaction logs were recovered): PHEAP_ECORRUPT with a
 * message for damage no crash leaves, else 0 (engine_check.c). */
int ph_engine_open_check(ph_engine *e, int recovered);

#endif
