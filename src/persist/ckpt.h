/*
 * ckpt.h -- the checkpoint durability level (docs/PERSISTENCE.md,
 * "Checkpoints"): the heap runs in a working copy in memory, which a
 * process crash leaves intact, and a checkpoint copies what changed into
 * the heap file, which a power loss leaves at the last checkpoint.
 *
 * The back end (ph_ckpt_ops) stores and flushes nothing: a flush marks the
 * pages of its lines in a dirty map, a fence orders nothing that a process
 * crash could see.  A checkpoint:
 *   1. with every call of the process held at the gate (util/gate.h):
 *      takes the dirty map and copies those pages into memory -- a state a
 *      process crash could leave, since no call is half done;
 *   2. reserves their space in the heap file (a full file system fails
 *      here, changing nothing);
 *   3. writes them to the journal "<file>.ckpt", syncs it, writes its
 *      header (the commit), syncs it;
 *   4. writes them into the heap file, punches the pages of zeros, syncs
 *      it; marks the journal applied.
 * After a power loss the heap file holds any mix of old and new pages of
 * step 4 -- or of none: open replays a committed journal before anything
 * reads the file (ph_ckpt_replay), so the file is the last committed
 * checkpoint exactly.
 */
#ifndef PH_PERSIST_CKPT_H
#define PH_PERSIST_CKPT_H

#include <pthread.h>
#include <stdint.h>

#include "persist/persist.h"

typedef struct ph_ckpt {
    char *base;                  /* pheap's view of the working copy */
    char *view;                  /* the program's view (== base without alias) */
    uint64_t reserve;            /* bytes each view spans */
    uint64_t data_off;           /* pages of zeros are punched from here on */
    const uint64_t *xsize;       /* the working copy's length (ph_space.xsize) */
    uint64_t *xdirty;            /* bit per page of the reserve: flushed since the
                                    last checkpoint took it (atomic) */
    uint64_t *xpunched;          /* bit per page: punched by the heap in the working
                                    copy and not handed out since (atomic): such a
                                    page of zeros is punched in the heap file too;
                                    any other page of zeros is written, so that the
                                    file keeps the space of every page in use */
    uint64_t nwords;
    int dfd;                     /* the heap file (the durable copy) */
    int wfd;                     /* the working copy, for its holes (-1: not known) */
    int jfd;                     /* the journal; -1 until first needed */
    char *dpath;                 /* their paths */
    char *jpath;
    uint8_t uuid[16];
    uint64_t gen;                /* checkpoints the journal committed */
    unsigned compare_all;        /* the next checkpoint compares every page with
                                    the file (the dirty map of a working copy a
                                    crash left is lost) */
    int unapplied;               /* a checkpoint committed but not written into the
                                    file (an error): the next one replays it first */
    pthread_mutex_t lock;        /* one checkpoint at a time */
    uint64_t xcheckpoints;       /* checkpoints taken (relaxed: pheap_stats reads) */
    uint64_t xbytes;             /* bytes they wrote into the heap file */
    uint64_t xlast_pages;        /* pages the last one copied */
    uint64_t xlast_pause_ns;     /* how long the last one held the calls */
    uint64_t xlast_ns;           /* how long it took in all */
} ph_ckpt;

extern const ph_persist_ops ph_ckpt_ops;

/* A checkpoint state for the heap file open as `dfd` at `dpath` (whose
 * heap has `uuid`), its working copy mapped at `base` and `view` (reserve
 * bytes each) and `*xsize` long.  PHEAP_ENOMEM. */
int ph_ckpt_create(ph_ckpt **out, int dfd, const char *dpath, const uint8_t uuid[16], char *base,
                   char *view, uint64_t reserve, uint64_t data_off, const uint64_t *xsize);

/* Closes the journal and frees; the heap file's descriptor stays the
 * caller's. */
void ph_ckpt_destroy(ph_ckpt *k);

/* Marks [addr, addr+len) of either view changed. */
void ph_ckpt_mark(ph_ckpt *k, const void *addr, uint64_t len);

/* Marks [off, off+len) of the file changed (a hole punched in the working
 * copy). */
void ph_ckpt_mark_off(ph_ckpt *k, uint64_t off, uint64_t len);

/* [off, off+len) punched in the working copy (whole pages): changed, and
 * to be punched in the heap file by the next checkpoint. */
void ph_ckpt_mark_punched(ph_ckpt *k, uint64_t off, uint64_t len);

/* [off, off+len) of the working copy reserved again to be handed out (whole
 * pages): reserved in the heap file too (PHEAP_ENOSPC when it cannot be),
 * and no longer punched there by a checkpoint. */
int ph_ckpt_refill(ph_ckpt *k, uint64_t off, uint64_t len);

/* Takes a checkpoint (the steps above); durable on return.  `compare`:
 * of every page that differs from the heap file, not only the marked ones
 * (stores the program never flushed too: a clean close), which reads the
 * heap file's pages where the working copy stores data.  Called with the
 * gate passed at most once by this thread (not from an initialiser).
 * Errors: PHEAP_ENOSPC, PHEAP_EIO (the heap file stays at the last
 * checkpoint, and what was to be copied is copied by the next one),
 * PHEAP_ENOMEM. */
int ph_ckpt_take(ph_ckpt *k, int compare);

/* Open: copies a committed journal of the heap file `dfd` into it and
 * syncs it, so that the file is its last checkpoint.  `writable`: 0 for a
 * read-only open, which refuses (PHEAP_EBUSY) a file a journal has still
 * to be copied into.  0 when there is nothing to do. */
int ph_ckpt_replay(int dfd, const char *dpath, int writable);

/* The state of the journal of heap file `dfd` (PH_CKPT_COMMITTED,
 * PH_CKPT_APPLIED, or 0: none of this heap) and its generation. */
unsigned ph_ckpt_journal_state(int dfd, const char *dpath, uint64_t *gen);

/* "<dpath>.ckpt", malloc'd; NULL when out of memory. */
char *ph_ckpt_journal_path(const char *dpath);

/* ---- tests: the page-cache crash model of the checkpoint's own file
 * operations ----
 * With a crash point set, the file operations of checkpoints and replays
 * (writes, syncs, length changes, reservations, punches) are counted from
 * 1; just before operation `op` runs, the heap file and its journal are
 * written as a power loss at that moment could leave them -- each file as
 * of its last sync, plus each page written since with probability `evict`
 * (drawn from `seed`), its length old or new -- to "<image>" and
 * "<image>.ckpt"; then everything goes on as if nothing happened.
 * op 0 turns it off.  ph_ckpt_test_ops: operations counted so far. */
void ph_ckpt_test_crash(uint64_t op, uint64_t seed, double evict, const char *image);
uint64_t ph_ckpt_test_ops(void);

#endif
