/*
 * sim.h -- the crash simulator (DESIGN 4.8).  The heap's working memory is
 * a private copy; a separate durable image receives a cache line only when
 * the line was flushed and a fence of the flushing thread followed.  A
 * crash image is the durable image plus, with a given probability per
 * line, lines whose working contents differ from it (dirty and never
 * flushed, or flushed and not yet fenced): spontaneous eviction.
 */
#ifndef PH_PERSIST_SIM_H
#define PH_PERSIST_SIM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "persist/persist.h"

typedef struct ph_sim {
    pthread_mutex_t lock;        /* guards durable[] and fences */
    char *working;               /* the heap mapping (private copy) */
    char *durable;               /* durable image, capacity bytes */
    uint64_t size;               /* bytes of both images in use */
    uint64_t capacity;           /* bytes reserved for durable[] */
    uint64_t xfences;            /* fences so far, all threads */
    uint64_t crash_fence;        /* dump before this fence (0 = never) */
    char *crash_image;           /* where to dump it */
    double crash_evict;          /* eviction probability of that dump */
    uint64_t crash_seed;         /* seed of that dump */
    int crash_error;             /* first error writing that dump */
} ph_sim;

extern const ph_persist_ops ph_sim_ops;

/* Creates a simulator over `working` (size bytes, growable to capacity)
 * whose durable image starts as the first `size` bytes of file `fd`. */
int ph_sim_create(ph_sim **out, char *working, uint64_t size, uint64_t capacity, int fd);
void ph_sim_destroy(ph_sim *s);

/* Sets the automatic dump before fence number `fence` (1-based). */
int ph_sim_set_crash_fence(ph_sim *s, uint64_t fence, const char *path, double evict,
                           uint64_t seed);

/* Writes the crash image (see above) to `path`. */
int ph_sim_write_image(ph_sim *s, const char *path, double evict, uint64_t seed);

/* Writes the durable image, without eviction, to file `fd` at offset 0. */
int ph_sim_write_durable(ph_sim *s, int fd);

/* Whether line `index` joins a crash image drawn from `seed` with
 * probability `evict`: a pure function of its arguments. */
int ph_sim_evicts(uint64_t seed, uint64_t index, double evict);

void ph_sim_pending_free(struct ph_sim_pending *p);

#endif
