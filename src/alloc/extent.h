/*
 * extent.h -- the large allocator: page-granular extents of the data
 * region, best fit with coalescing, indexed in DRAM and made durable by the
 * log-structured extent log (format/layout.h).  Slabs take their 64 KiB
 * chunks from here too.  All calls lock the extent index (a spin lock:
 * short sections); log entries are written under the lock and fenced after
 * it (see extent_log.c for why replay copes with entries that become durable
 * out of order).  An index of a heap shared between processes also holds
 * the log's lock between processes, and fences before it lets that go
 * (ph_extents_share).
 *
 * Free extents of PH_PUNCH_MIN or more are handed back to the file system
 * (hole punch) in purges, not at each free: a block freed and allocated
 * again soon -- the common case -- keeps its pages and costs no system
 * call and no page faults.  A purge runs when the bytes freed since the
 * last one reach the budget (size / 16, at least PH_PURGE_BUDGET_MIN), when
 * PH_PURGE_DELAY_NS passed since a free, and at close.
 */
#ifndef PH_ALLOC_EXTENT_H
#define PH_ALLOC_EXTENT_H

#include <pthread.h>
#include <stdint.h>

#include "alloc/space.h"
#include "util/plock.h"
#include "util/spin.h"

/* PH_EXT_RESERVED (format/layout.h) is also the kind of an exclusive
 * open's reservations: chosen, not yet committed, or freed and held; those
 * are in no log entry.  PH_EXT_ASIDE is the index's only, never logged:
 * a chunk of free space set aside for the rest of the open, because the
 * screen (below) refused it. */
#define PH_EXT_ASIDE 5u
#define PH_EXT_BINS 128u
#define PH_PUNCH_MIN (256u * 1024u) /* free extents this large go back to the file system */
#define PH_PURGE_DELAY_NS (100u * 1000u * 1000u) /* ... this long after a free at the latest */
#define PH_PURGE_BUDGET_MIN (32u << 20) /* ... or when this much (or size/16) was freed */

/* The screen of free space about to be reserved, [off, off + bytes), with
 * the index lock held: 0 to go on, or an error (its message set) with
 * *bad the offset of a chunk that must not be handed out.  The chunk is
 * then set aside until the close (in a shared heap as a logged
 * reservation of this process) and the reservation fails with the error.
 * (The engine's refuses chunks whose slab descriptor records allocated
 * blocks: ph_engine_screen.) */
typedef int (*ph_extent_screen_fn)(void *arg, uint64_t off, uint64_t bytes, uint64_t *bad);

typedef struct ph_extnode {
    uint64_t page;             /* first page, counted from the data region */
    uint64_t npages;
    uint32_t kind;             /* PH_EXT_FREE, _LARGE, _SLAB or _RESERVED */
    uint32_t cls;              /* size class of a slab */
    struct ph_extnode *next;   /* bin list, free nodes only */
    struct ph_extnode *prev;
    uint32_t dirty;            /* free node whose pages may be backed */
    uint32_t aside;            /* a shared heap's RESERVED node that set_aside_locked
                                  made (a damaged chunk), not an allocation's */
} ph_extnode;

typedef struct ph_extents {
    ph_space *sp;
    uint8_t xlock;             /* the index lock (util/spin.h) */
    ph_extlog_header *hdr;     /* in the mapping */
    ph_extlog_entry *half[2];  /* the two halves, in the mapping */
    uint64_t half_entries;     /* entries per half */
    uint64_t epoch;            /* epoch of the active half */
    unsigned active;           /* active half */
    uint64_t tail;             /* next free entry of the active half */
    uint64_t high;             /* the active half's high-water mark: tail <= high */
    unsigned bounded;          /* the log has marks (1.2); else high == half_entries */
    uint64_t pages_max;        /* data pages at max_size */
    uint64_t pages;            /* data pages backed now */
    ph_extnode **head;         /* [pages_max]: node starting at a page */
    ph_extnode **last;         /* [pages_max]: node ending at a page */
    uint64_t *freed;           /* [pages_max] bits: a large block started here and was freed */
    uint64_t *punched;         /* [pages_max] bits: free page whose file space may have been
                                  returned (punched, or not known at open): reserved
                                  again before it is handed out */
    ph_extlog_entry *scratch;  /* [half_entries]: a half being composed by compaction
                                  (touched only as far as the new mark) */
    ph_extnode *bins[PH_EXT_BINS]; /* free nodes by size */
    ph_extnode *spare;         /* unused nodes, linked by next */
    ph_extnode *xreleased;     /* freed, durable, not yet free space (atomic stack) */
    struct node_pool *pools;   /* where nodes live */
    uint64_t free_pages;       /* pages in free nodes */
    uint64_t dirty_bytes;      /* freed since the last purge */
    uint64_t dirty_since;      /* first free since then (coarse clock), 0: none */
    uint64_t dropped;          /* reservations of processes gone that the open found in
                                  the log (ph_extent_log_forget_reserved) */
    unsigned owner;            /* a heap shared between processes (docs/SHARING.md): this
                                  process's lease slot + 1, and every reservation is an
                                  entry of the log that names it (RESERVED); 0: an
                                  exclusive open, whose reservations are its own */
    uint64_t *xplock;          /* a shared heap's lock of the log between processes
                                  (ph_extents_share), or NULL */
    const ph_plock_owner *plock_owner;
    uint64_t xtakeovers;       /* that lock taken over from a dead holder (relaxed) */
    ph_extent_screen_fn screen; /* asked about free space before it is reserved (below) */
    void *screen_arg;
} ph_extents;

typedef void (*ph_extent_slab_fn)(void *arg, uint64_t off, unsigned cls);

/* Builds the index by replaying the extent log of `sp` and reports every
 * slab to on_slab.  PHEAP_ECORRUPT when the log contradicts itself. */
int ph_extents_open(ph_space *sp, ph_extents **out, ph_extent_slab_fn on_slab, void *arg);
/* Recovery after an unclean shutdown: durably zeroes the torn appends a
 * crash left past the log's tail (extent_log.c). */
void ph_extent_log_scrub(ph_extents *x, ph_pctx *c);
/* An index of a heap shared between processes, for the process whose
 * lease slot is owner - 1: the reservations the log holds (every process's)
 * are kept, and its own are logged.  (ph_extents_open drops them: an
 * exclusive open's index, for which their processes are gone.) */
int ph_extents_open_owned(ph_space *sp, unsigned owner, ph_extents **out);
/* A read-write open of an index that dropped reservations (above): the
 * log is compacted, so that no entry of theirs stays to meet the entries
 * the index appends over their pages (three fences; nothing when none). */
void ph_extent_log_forget_reserved(ph_extents *x, ph_pctx *c);
void ph_extents_close(ph_extents *x);
/* Shares an owned index's log with other processes (docs/SHARING.md):
 * from now on every operation holds the process lock `*word` (util/plock.h)
 * besides the index lock, first brings the index up to date with what
 * other processes appended (ph_extents_sync), and fences its entries
 * before it lets the lock go -- the staged calls too, which then fence
 * at once.  A lock taken over from a dead holder is repaired first: the
 * entries it appended are made durable, a torn append past them is
 * zeroed.  `o` must outlive the index. */
void ph_extents_share(ph_extents *x, uint64_t *word, const ph_plock_owner *o);
/* ph_extents_open_owned and ph_extents_share in one step, the log read
 * under the lock (other processes append meanwhile).  Errors as
 * ph_extents_open. */
int ph_extents_open_shared(ph_space *sp, unsigned owner, uint64_t *word, const ph_plock_owner *o,
                           ph_extents **out);
/* Holds the index's locks (a shared index: synced first) so that the
 * extent holding data offset `off` stays what it is while the caller
 * works on it -- a free of a block of another process's slab, an
 * adoption.  *kind (PH_EXT_FREE when `off` lies past the backed pages)
 * and *start of that extent.  0, or the sync's error (the locks are held
 * all the same: call ph_extents_unhold). */
int ph_extents_hold(ph_extents *x, ph_pctx *c, uint64_t off, uint32_t *kind, uint64_t *start);
/* The same lookup while the caller holds the locks. */
void ph_extents_holding(ph_extents *x, uint64_t off, uint32_t *kind, uint64_t *start);
void ph_extents_unhold(ph_extents *x, ph_pctx *c);
/* Takeover of a dead process of a shared heap (lease slot owner - 1): its
 * reservations -- blocks chosen and not committed, frees held until its
 * lane retired -- become free space, each by a logged free, one fence.
 * Returns how many; 0 with nothing to do.  Its lanes must have been rolled
 * forward first (a committed free_from is among the held frees). */
uint64_t ph_extents_drop_owner(ph_extents *x, ph_pctx *c, unsigned owner);
/* Gives back to the file system, now, the pages of every block freed in
 * this open (what close does first). */
void ph_extents_purge_now(ph_extents *x);

/* Allocates `bytes` (page-rounded) as one large block, or one chunk-aligned
 * chunk as a slab of class `cls` (kind PH_EXT_SLAB), growing the heap when
 * needed.  Durable on return (one log entry, one fence); if `dest` is not
 * NULL, *dest = data offset of the extent is stored and flushed before the
 * same fence.  Errors: PHEAP_ENOMEM. */
int ph_extent_alloc(ph_extents *x, ph_pctx *c, uint64_t bytes, uint32_t kind, unsigned cls,
                    uint64_t *dest, uint64_t *off);

/* Chooses an extent like ph_extent_alloc but only in the index (nothing is
 * durable); ph_extent_commit makes it durable, ph_extent_cancel frees it. */
int ph_extent_reserve(ph_extents *x, ph_pctx *c, uint64_t bytes, uint32_t kind, uint64_t *off);
void ph_extent_commit(ph_extents *x, ph_pctx *c, uint64_t off, uint32_t kind, unsigned cls,
                      uint64_t *dest, uint64_t dest_val);
void ph_extent_cancel(ph_extents *x, ph_pctx *c, uint64_t off);
/* ph_extent_commit of a reserved large block without the fence: the entry
 * is durable at the caller's next fence (a transaction's commit). */
void ph_extent_commit_staged(ph_extents *x, ph_pctx *c, uint64_t off);

/* Commits n (at most PH_EXT_COMMIT_MAX) reserved chunks as slabs of class
 * cls: n entries, one fence. */
#define PH_EXT_COMMIT_MAX 16u
void ph_extent_commit_slabs(ph_extents *x, ph_pctx *c, const uint64_t *offs, unsigned n,
                            unsigned cls);

/* Frees the extent starting at data offset `off`, which must be of `kind`
 * (PH_EXT_LARGE or PH_EXT_SLAB).  Durable on return (one entry, one fence;
 * `dest`, if set, gets dest_val before the fence).  With `hold`, the pages
 * are not reusable until ph_extent_release: a logged free_from must retire
 * its lane entry first, or a recovery could redo the free over a block
 * that another thread allocated from those pages meanwhile.
 * Nothing changes on error: PHEAP_EINTERIOR (inside an extent),
 * PHEAP_EDOUBLEFREE (a freed large block's start), PHEAP_ENOTALLOC. */
int ph_extent_free(ph_extents *x, ph_pctx *c, uint64_t off, uint32_t kind, uint64_t *dest,
                   uint64_t dest_val, int hold);
/* ph_extent_free with `hold` and without the fence: the entry is durable
 * at the caller's next fence, and the extent reusable after
 * ph_extent_release. */
int ph_extent_free_staged(ph_extents *x, ph_pctx *c, uint64_t off, uint32_t kind, uint64_t *dest,
                          uint64_t dest_val);
/* Makes the held extent at `off` reusable (without taking the lock: the
 * next holder of the lock does it; in a shared heap it takes the lock and
 * appends the free, which other indexes replay). */
void ph_extent_release(ph_extents *x, ph_pctx *c, uint64_t off);

/* Recovery: makes [off, off + bytes) a live large block if it is free
 * space now -- or, in a shared heap's index, another process's
 * reservation of exactly that (a takeover replaying a dead process's
 * allocation); 0 if it already is one.  The entry is durable at the caller's
 * next fence (recovery persists the destination word with it: until both
 * are, the lane entry stays committed and the redo repeats). */
int ph_extent_claim(ph_extents *x, ph_pctx *c, uint64_t off, uint64_t bytes);

/* Classifies `off` without changing anything: 0 and *bytes when it starts
 * a live large block, else the error ph_extent_free would return. */
int ph_extent_lookup(ph_extents *x, uint64_t off, uint64_t *bytes);

/* 1 and *bytes when data offset `off` starts a live large block; 0
 * otherwise.  Takes no lock: only while nothing changes the index (a
 * trace). */
int ph_extent_large_start(const ph_extents *x, uint64_t off, uint64_t *bytes);

/* 1 when data offset `off` lies inside a live large block (its first
 * byte included), 0 otherwise: free space, a slab, a reservation. */
int ph_extent_live_at(ph_extents *x, uint64_t off);

/* Copies the index from the extent that holds data page `page` on: up to
 * `max` nodes, in page order, into out[] (their links are meaningless);
 * returns how many, 0 past the backed data.  Holds the index lock only
 * while copying.  Extents whose free is durable become free space first,
 * as at every index operation, but no purge runs: the file is never
 * touched (the heap map, pheap_walk_chunks). */
size_t ph_extents_copy(ph_extents *x, uint64_t page, ph_extnode *out, size_t max);

/* Calls fn for every extent in address order, under the lock. */
void ph_extents_walk(ph_extents *x, void (*fn)(void *arg, const ph_extnode *n), void *arg);

/* Largest free extent, pages; *tail: the free pages that end the backed
 * data region (what a growth extends, see ph_extent_backing_grow). */
uint64_t ph_extents_largest_free(ph_extents *x, uint64_t *tail);

/* Brings the index up to date with what other indexes of the heap have
 * appended to the log since it last looked (extent_sync.c): their entries
 * replayed, the heap's growth taken in, and after a compaction the index
 * built again from the new half with this index's reservations kept.  The
 * appenders must be done (their entries fenced).  *info (may be NULL):
 * entries replayed, and whether the index was built again.  0, or
 * PHEAP_ECORRUPT (an entry contradicts the index), PHEAP_ENOMEM. */
typedef struct ph_extents_sync_info {
    uint64_t applied;
    int rebuilt;
} ph_extents_sync_info;
int ph_extents_sync(ph_extents *x, ph_extents_sync_info *info);

/* Compares the index with a fresh replay of the log and checks that the
 * extents tile the backed data region.  0 or 1 with a message. */
int ph_extents_check(ph_extents *x, char *err, size_t errlen);

#endif
