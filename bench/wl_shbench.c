/*
 * wl_shbench.c -- shbench-style stress (MicroQuill shbench as run by Ralloc
 * and NVAlloc): mixed sizes from size_min to size_max with small requests
 * the most frequent (log-uniform); each round allocates a batch, frees every
 * other object, refills the holes, then frees everything.
 */
#include "bench.h"

#include <stdlib.h>

#define SIZE_TABLE 4096         /* power of two; sizes drawn before timing */

typedef struct sh_state {
    bench_handle *slots;        /* batch handles per thread */
    uint32_t sizes[SIZE_TABLE];
    uint64_t rounds;            /* per thread */
} sh_state;

static int fill(bench_thread *t, bench_handle *slot, uint64_t from, uint64_t step,
                uint64_t n, unsigned *k)
{
    const bench_allocator *a = t->run->alloc;
    sh_state *st = t->arg;
    for (uint64_t i = from; i < n; i += step) {
        size_t size = st->sizes[(*k)++ & (SIZE_TABLE - 1)];
        slot[i] = a->alloc(size);
        if (!slot[i]) {
            bench_fail_alloc(size, i);
            t->failed = 1;
            return -1;
        }
        t->ops++;
    }
    return 0;
}

static void drain(bench_thread *t, bench_handle *slot, uint64_t from, uint64_t step, uint64_t n)
{
    for (uint64_t i = from; i < n; i += step) {
        if (slot[i]) {
            t->run->alloc->free(slot[i]);
            slot[i] = 0;
            t->ops++;
        }
    }
}

static void sh_worker(bench_thread *t)
{
    const bench_params *p = t->run->p;
    sh_state *st = t->arg;
    bench_handle *slot = st->slots + (size_t)t->tid * p->batch;
    unsigned k = t->tid * 977u;         /* each thread starts elsewhere in the table */

    for (uint64_t r = 0; r < st->rounds; r++) {
        if (fill(t, slot, 0, 1, p->batch, &k) != 0)
            break;
        drain(t, slot, 1, 2, p->batch);
        if (fill(t, slot, 1, 2, p->batch, &k) != 0)
            break;
        drain(t, slot, 0, 1, p->batch);
    }
    drain(t, slot, 0, 1, p->batch);     /* leftovers after a failure */
}

int wl_shbench(const bench_run *run, bench_metrics *out)
{
    const bench_params *p = run->p;
    bench_timing tm;
    uint64_t rng = p->seed;
    sh_state *st = bench_xcalloc(1, sizeof *st);

    if (!st)
        return -1;
    for (unsigned i = 0; i < SIZE_TABLE; i++)
        st->sizes[i] = (uint32_t)bench_rand_logsize(&rng, p->size_min, p->size_max);
    st->rounds = p->ops / p->threads / (3 * p->batch);
    if (st->rounds == 0)
        st->rounds = 1;
    st->slots = bench_xcalloc((size_t)p->threads * p->batch, sizeof *st->slots);
    if (!st->slots) {
        free(st);
        return -1;
    }
    int rc = bench_run_threads(run, p->threads, sh_worker, st, &tm);
    free(st->slots);
    free(st);
    if (rc == 0)
        bench_timing_metrics(&tm, out);
    return rc;
}
