/*
 * space.h -- the mapped heap file as the allocator sees it: where it is,
 * how much of it is backed, how it grows and how pages go back to the file
 * system.  Owned by the heap handle; every allocator module reaches the
 * mapping and the persistence layer through it.
 */
#ifndef PH_ALLOC_SPACE_H
#define PH_ALLOC_SPACE_H

#include <pthread.h>
#include <stdint.h>

#include "format/layout.h"
#include "os/os.h"
#include "persist/persist.h"
#include "persist/sim.h"

/* Invariants: [base, base + xsize) is mapped and backed by the file (or, in
 * simulation, by the private working copy); xsize <= max_size <= reserve;
 * state->xsize == xsize once a growth has committed. */
typedef struct ph_protected ph_protected;

typedef struct ph_space {
    char *base;               /* pheap's own view of the file: the one its code
                                 reads and writes through (ph_space_at) */
    char *view;               /* the program's view (pheap_direct): the same
                                 file, its metadata read-only; == base when
                                 protect is not PHEAP_PROTECT_ALIAS */
    unsigned protect;         /* enum pheap_protect_kind in use */
    unsigned protect_rw;      /* what a read-write open would use (snapshots report it) */
    int wfd;                  /* simulation: the memfd holding the working copy
                                 (both views map it); -1 otherwise */
    ph_protected *guarded;    /* metadata blocks of the data region, read-only
                                 in the view (names segments, transaction log
                                 segments) */
    unsigned no_guard;        /* a heap shared between processes: no block is
                                 guarded (another process may free and hand out
                                 what this one's view would keep read-only) */
    uint64_t xsize;           /* bytes mapped now; grows under grow_lock */
    uint64_t data_off;        /* first byte of the data region */
    uint64_t reserve;         /* bytes of address space reserved */
    uint64_t max_size;        /* growth limit, from the header */
    uint64_t slab_region;     /* offset of the slab descriptors */
    uint64_t lane_region;     /* offset of the lanes */
    uint64_t extlog_region;   /* offset and size of the extent log */
    uint64_t extlog_size;
    uint64_t names_region;    /* offset of the names directory (0 without PH_FEAT_INCOMPAT_NAMES) */
    int fd;                   /* heap file */
    const char *path;         /* its path, for messages (owned by the handle) */
    unsigned dax;             /* mapped with MAP_SYNC */
    unsigned in_memory;       /* the file is on tmpfs or ramfs */
    uint32_t features;        /* the header's feat_incompat */
    unsigned inherited;       /* a fork child's copy being released: the file is not touched */
    unsigned snapshot;        /* a private copy-on-write view: the file is never touched */
    unsigned fresh;           /* the first read-write open of the heap by its open
                                 count: if its extent log was never written, the
                                 file stores every page of its data region, as its
                                 creation reserved them (ph_extent_index_build) */
    ph_sim *sim;              /* simulation: working copy and durable image */
    ph_persist persist;       /* the flush back end */
    ph_state *state;          /* in the mapping */
    pthread_mutex_t grow_lock;
} ph_space;

static inline void *ph_space_at(const ph_space *s, uint64_t off)
{
    return s->base + off;
}

/* The program's address of offset `off` (what pheap_direct returns, and
 * what initialisers and filters are given). */
static inline void *ph_space_user(const ph_space *s, uint64_t off)
{
    return s->view + off;
}

/* The offset of a program's address, which must be in the view:
 * (uintptr_t)addr - view; callers check the range. */
static inline uint64_t ph_space_user_off(const ph_space *s, const void *addr)
{
    return (uint64_t)((uintptr_t)addr - (uintptr_t)s->view);
}

/* ---- mapping and protection (alloc/space_map.c) ----
 * ph_space_map maps a heap whose fd, path, xsize, data_off, reserve and
 * max_size are set: `kind` is PH_MAP_SHARED, PH_MAP_PRIVATE (a snapshot)
 * or PH_MAP_READONLY; `simulated` puts the working copy in a memfd (the
 * simulator's durable image is made from the file by the caller).
 * `protect` (enum pheap_protect_kind, AUTO resolved here) chooses how the
 * metadata -- every page below data_off, and the blocks later given to
 * ph_space_guard -- is kept out of the program's reach:
 *   ALIAS  a second shared mapping of the same file, s->view, whose
 *          metadata pages are read-only; pheap writes through s->base,
 *          at an address it never hands out.
 *   KEYS   one mapping (s->view == s->base) whose metadata pages carry
 *          the process's protection key: writable only inside pheap's
 *          write window (alloc/keys.h); PHEAP_ENOTSUP where the CPU or
 *          the kernel has no keys (space_keys.c).
 *   OFF    one mapping, everything writable (a debugging aid); also what
 *          a snapshot (a private copy-on-write mapping cannot be aliased)
 *          uses.
 *   READONLY  a read-only open: the one mapping is read-only throughout.
 * AUTO is ALIAS, but OFF for a simulated heap: the simulator's working
 * copy is then a private copy-on-write mapping of the file, which no
 * second mapping can share; asked for, ALIAS puts the working copy of a
 * simulated heap in a memfd both views map (each open copies the file's
 * pages that hold something, and every page it touches takes memory).
 * *dax tells whether the file mapped with MAP_SYNC.
 * Errors: PHEAP_ENOTSUP (KEYS asked for and not available), PHEAP_ENOMEM,
 * PHEAP_EIO. */
int ph_space_map(ph_space *s, int kind, int simulated, unsigned protect, int *dax);

/* Unmaps both views and closes the working copy.  Idempotent. */
void ph_space_unmap(ph_space *s);

/* Maps [cur, want) of the grown file (or working copy) into both views:
 * data, readable and writable in both. */
int ph_space_extend_map(ph_space *s, uint64_t cur, uint64_t want);

/* Records the block [off, off+len) of the data region (whole pages) as
 * one that holds pheap's own metadata -- the program's calls may not free
 * it or write through it (ph_space_guarded_overlap) -- and makes it read-only in
 * the program's view (ALIAS).  A
 * block given already is left as it is.  Best effort: when memory or the
 * kernel refuses, the block stays as it was. */
void ph_space_guard(ph_space *s, uint64_t off, uint64_t len);

/* 1 when [off, off+len) overlaps a guarded block.  No system call and no
 * lock: a few loads. */
int ph_space_guarded_overlap(ph_space *s, uint64_t off, uint64_t len);

/* Gives the block at `off` back to the program's access if ph_space_guard
 * took it; nothing otherwise.  Every free of a large block calls it, so
 * that no guarded page is ever handed out.  Costs no system call for a
 * block that was not guarded. */
void ph_space_unguard(ph_space *s, uint64_t off);

/* Blocks guarded now. */
uint64_t ph_space_guarded_count(const ph_space *s);

/* From now on no block is guarded; the blocks guarded are given back (a
 * heap opened for sharing between processes: ph_space_guard's table is
 * this process's, and other processes free and reuse those blocks). */
void ph_space_guard_off(ph_space *s);

/* ---- protection keys (alloc/space_keys.c, alloc/keys.h) ----
 * ph_keys_setup makes the process's key ready (once; PHEAP_ENOTSUP when
 * there is none).  ph_keys_attach keys the metadata below data_off of a
 * heap mapped with KEYS, ph_keys_detach forgets it before the unmap;
 * ph_keys_tag keys (keyed) or frees (!keyed) the whole OS pages of
 * [off, off+len). */
int ph_keys_setup(void);
int ph_keys_attach(ph_space *s);
void ph_keys_detach(ph_space *s);
int ph_keys_tag(ph_space *s, uint64_t off, uint64_t len, int keyed);

/* The clock of timed work (purges): real time, or the simulator's logical
 * clock, so that a simulated heap's fences do not depend on timing. */
static inline uint64_t ph_space_now(const ph_space *s)
{
    return s->sim ? ph_sim_clock_ns(s->sim) : ph_os_coarse_ns();
}

static inline uint64_t ph_space_size(const ph_space *s)
{
    return ph_load(&s->xsize);
}

/* End of the slab-descriptor pages that a heap of `size` bytes writes: the
 * descriptors of its chunks, rounded up to a whole page.  These pages and
 * everything else the heap writes are reserved in the file system before
 * use (creation and ph_space_grow), so a full file system is an error and
 * never a SIGBUS.  Past this end, the slab region is sparse. */
static inline uint64_t ph_space_desc_end(uint64_t slab_region, uint64_t data_off, uint64_t size)
{
    return slab_region +
           PH_ALIGN_UP((size - data_off) / PH_CHUNK_SIZE * PH_SLAB_DESC_SIZE, PH_PAGE_SIZE);
}

/* ---- the extent log's capacity (alloc/extent_log.c) ----
 * A heap whose extent log has high-water marks (PH_FEAT_INCOMPAT_EXTLOG_HIGH)
 * uses only the first entries of each half: at most ph_space_extlog_cap for
 * its current size.  Those, like the slab descriptors of its chunks, are
 * reserved in the file system with the data they describe (creation and
 * ph_space_grow); the rest of the region stays sparse and untouched. */
#define PH_EXTLOG_RAISE 16384u /* most entries a mark covers anew at once */

static inline uint64_t ph_space_extlog_half_entries(uint64_t extlog_size)
{
    return (extlog_size - PH_PAGE_SIZE) / 2 / sizeof(ph_extlog_entry);
}

/* Entries of each half a heap of `size` bytes may use: one per 16 KiB of
 * its data -- more than a compacted log holds, since every live extent is
 * larger than 16 KiB -- plus room for appends between compactions (a
 * sixteenth of the half, 16 to 4096), rounded up to a page of lines (the
 * first L entries of a half of L lines have a line each); the whole half
 * once that reaches L. */
static inline uint64_t ph_space_extlog_cap(uint64_t half_entries, uint64_t data_off, uint64_t size)
{
    uint64_t room = PH_MIN(PH_MAX(half_entries / 16, (uint64_t)16), (uint64_t)4096);
    uint64_t cap = PH_ALIGN_UP((size - data_off) / PH_EXTLOG_BYTES_PER_ENTRY_SPAN + room,
                               PH_PAGE_SIZE / PH_LINE_SIZE);
    return cap >= half_entries / 4 ? half_entries : cap;
}

/* Bytes at the start of a half that its first `cap` entries occupy: whole
 * pages. */
static inline uint64_t ph_space_extlog_bytes(uint64_t half_entries, uint64_t cap)
{
    return PH_MIN(cap, half_entries / 4) * PH_LINE_SIZE;
}

/* Grows the heap to at least `min_size` bytes (rounded up to a chunk, at
 * least doubling the data region, at most max_size; when the file system cannot hold the
 * doubling, just enough).  Durable on return: the file is extended and its
 * new space reserved (the new data and its slab descriptors), its length
 * synced, then state->xsize is persisted (the commit); a crash in between
 * leaves a file longer than xsize, which open accepts.
 * Errors: PHEAP_ENOMEM (max_size reached), PHEAP_ENOSPC (the file system
 * is full; nothing changed), PHEAP_EIO. */
int ph_space_grow(ph_space *s, ph_pctx *c, uint64_t min_size);

/* A heap shared between processes: another process grew it (its durable
 * size, state->xsize, is past this mapping's): maps the new part and takes
 * the size.  0, or the error of the mapping (nothing changed). */
int ph_space_follow(ph_space *s);

/* Returns the whole pages of [off, off+len) to the file system; they read
 * as zero afterwards.  Best effort: failures (file systems without hole
 * punching) are ignored.  Simulated: the range reads as zeros in the
 * program's view and in the durable image at once. */
void ph_space_punch(ph_space *s, uint64_t off, uint64_t len);

/* Reserves again the file space of [off, off+len), which a punch may have
 * returned, before it is handed out: a full file system is then
 * PHEAP_ENOSPC here rather than a SIGBUS at the program's first store.
 * Nothing to do for simulated heaps and snapshots. */
int ph_space_refill(ph_space *s, uint64_t off, uint64_t len);

#endif
