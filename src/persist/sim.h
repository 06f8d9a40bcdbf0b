/*
 * sim.h -- the crash simulator (DESIGN 4.8, docs/CRASH_SIMULATOR.md).  The
 * heap's working memory is a private copy; a separate durable image
 * receives a cache line only when the line was flushed and a fence of the
 * flushing thread followed, or when the line is written back on its own
 * (eviction) at a durable store.  A crash image is the durable image plus,
 * drawn from a seed, parts of what differs from it: whole lines, or each
 * aligned 8-byte word on its own (x86 guarantees no more).  The file's
 * length and its punched holes are simulated state too.
 *
 * The page-cache model (PHEAP_SIM_PAGES) is the msync back end's instead:
 * a flush only notes that the thread has something to sync, and its fence
 * syncs the file -- every page that differs from the durable image becomes
 * durable, flushed or not, and so does the file's length and its holes.
 * A crash adds whole 4 KiB pages, and the length old or new.
 */
#ifndef PH_PERSIST_SIM_H
#define PH_PERSIST_SIM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "persist/persist.h"

/* What a crash takes (ph_sim_crash_spec.mode, PHEAP_SIM_* in pheap.h):
 *   lines      each differing line joins whole with probability `evict`;
 *   words      each differing aligned 8-byte word joins on its own;
 *   nt_lag     with words: words of non-temporal stores not yet fenced never
 *              join (write-combining buffers drain last), while the other
 *              words join with probability `evict`;
 *   pages      each differing 4 KiB page joins whole, and a length not yet
 *              synced, with probability `evict` (the page-cache model:
 *              also what a fence does, see ph_sim.pages). */
typedef struct ph_sim_crash_spec {
    uint64_t fence;              /* crash just before this fence (1-based; 0 = no) */
    uint64_t store;              /* ... or just after this durable store (0 = no) */
    double evict;                /* probability that a differing part joins */
    uint64_t seed;               /* draws of that image */
    unsigned words;              /* 8-byte granularity instead of lines */
    unsigned nt_lag;             /* unfenced non-temporal words stay out */
    unsigned contended;          /* `fence` counts contended fences only */
    unsigned pages;              /* 4 KiB pages (the page-cache model) */
    const char *site;            /* ... and fences of this site only (function
                                    name or file:line; NULL: all) */
} ph_sim_crash_spec;

#define PH_SIM_PAGE 4096u

typedef struct ph_sim {
    pthread_mutex_t lock;        /* guards durable[], the sizes and the dump */
    char *working;               /* the heap's working copy, as pheap maps it */
    char *view;                  /* a second mapping of it (the program's view), or NULL */
    char *durable;               /* durable image, capacity bytes */
    uint64_t *changed;           /* bit per PH_SIM_PAGE of durable[]: differs
                                    from the file it was read from */
    uint64_t *xnt;               /* bit per 8-byte word: stored non-temporally,
                                    not yet fenced (atomic) */
    uint64_t *stamps;            /* per 8-byte word of durable[]: the stamp of
                                    the snapshot or write-back it holds (0:
                                    the file's) */
    uint64_t stamp;              /* the last stamp taken (under lock) */
    uint64_t size;               /* file length the program sees */
    uint64_t durable_size;       /* file length a crash keeps (pages: or `size`) */
    unsigned pages;              /* the page-cache model: a fence of a thread
                                    that flushed syncs the file (set once, by
                                    ph_sim_configure) */
    uint64_t capacity;           /* bytes reserved for durable[] */
    uint64_t xfences;            /* fences so far, all threads */
    uint64_t xcontended;         /* fences that count for crash.fence when it
                                    is contended or at a site */
    uint64_t xstores;            /* durable stores so far (8-byte words) */
    uint64_t xevents;            /* stores, flushes and fences, for xtrace */
    uint64_t xtrace;             /* order-sensitive hash of those events */
    uint32_t xpending;           /* threads with unfenced stores or flushes */
    ph_sim_crash_spec crash;     /* the automatic dump, if any */
    char *crash_image;           /* where to write it */
    char *crash_site;            /* owned copy of crash.site */
    int crash_error;             /* first error writing it */
    double store_evict;          /* write-back of the line at each durable store */
    uint64_t store_seed;         /* draws of those write-backs */
    uint64_t schedule_seed;      /* nonzero: seeded pauses before fences */
    /* Tests: called by every thread before each of its fences, outside the
     * simulator lock; may block to hold the thread there (a deterministic
     * schedule: another thread's stores stay unfenced meanwhile). */
    void (*before_fence)(void *arg);
    void *before_fence_arg;
} ph_sim;

extern const ph_persist_ops ph_sim_ops;

/* Creates a simulator over `working` (size bytes, growable to capacity)
 * whose durable image starts as the first `size` bytes of file `fd`.
 * `view`, when not `working`, maps the same memory: stores and flushes
 * through it count as through `working`. */
int ph_sim_create(ph_sim **out, char *working, char *view, uint64_t size, uint64_t capacity, int fd);
void ph_sim_destroy(ph_sim *s);

/* Sets the automatic dump (see ph_sim_crash_spec) and the run's eviction
 * at stores and schedule.  PHEAP_EINVAL on a bad probability or a crash
 * point without a path. */
int ph_sim_configure(ph_sim *s, const ph_sim_crash_spec *crash, const char *path,
                     double store_evict, uint64_t store_seed, uint64_t schedule_seed);

/* Writes the crash image `spec` describes (its fence/store ignored) to
 * `path`. */
int ph_sim_write_image(ph_sim *s, const char *path, const ph_sim_crash_spec *spec);

/* Writes the durable image, without eviction, to file `fd` at offset 0 (a
 * clean close). */
int ph_sim_write_durable(ph_sim *s, int fd);

/* The file: the program's view grows to `size` at once; the durable length
 * follows only at ph_sim_file_sync (fsync / fdatasync), which in the
 * page-cache model also syncs every page, as fsync does. */
void ph_sim_file_resize(ph_sim *s, uint64_t size);
void ph_sim_file_sync(ph_sim *s);

/* Hole punch: [off, off+len) reads as zeros in the durable image (the
 * caller clears the working copy); in the page-cache model, from the next
 * sync on, and a crash before it draws each page. */
void ph_sim_punch(ph_sim *s, uint64_t off, uint64_t len);

/* A logical clock for the heap's timed work (purges): 10 us per fence, so
 * that the same calls give the same fences whatever the real time. */
uint64_t ph_sim_clock_ns(const ph_sim *s);

/* Whether part `index` joins a crash image drawn from `seed` with
 * probability `evict`: a pure function of its arguments. */
int ph_sim_evicts(uint64_t seed, uint64_t index, double evict);

void ph_sim_pending_free(struct ph_sim_pending *p);

#endif
