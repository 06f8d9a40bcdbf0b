/*
 * wl_random.c -- random-order alloc/free (Poseidon's microbenchmark): each
 * thread allocates `batch` blocks of one size, then frees them in a random
 * order, until the threads together have made ops/2 alloc-free pairs.  No
 * block crosses threads.  The orders are drawn before timing.
 */
#include "bench.h"

#include <stdlib.h>

#define ORDERS 64                /* distinct free orders, reused in turn */

typedef struct random_state {
    bench_handle *slots;         /* batch handles per thread */
    uint32_t *order;             /* ORDERS permutations of 0..batch-1 */
    uint64_t rounds;             /* per thread */
} random_state;

static void random_worker(bench_thread *t)
{
    const bench_params *p = t->run->p;
    const bench_allocator *a = t->run->alloc;
    random_state *st = t->arg;
    bench_handle *slot = st->slots + (size_t)t->tid * p->batch;
    size_t size = p->size_min;

    for (uint64_t r = 0; r < st->rounds; r++) {
        const uint32_t *order = st->order + ((r + t->tid) % ORDERS) * p->batch;
        if (bench_alloc_batch(t, slot, p->batch, size, size))
            return;
        for (uint64_t i = 0; i < p->batch; i++)
            a->free(slot[order[i]]);
        t->ops += 2 * p->batch;
    }
}

int wl_random(const bench_run *run, bench_metrics *out)
{
    const bench_params *p = run->p;
    random_state st;
    bench_timing tm;
    uint64_t rng = p->seed ^ 0x5eed;
    int rc = -1;

    st.rounds = p->ops / p->threads / (2 * p->batch);
    if (st.rounds == 0)
        st.rounds = 1;
    st.slots = bench_xcalloc((size_t)p->threads * p->batch, sizeof *st.slots);
    st.order = bench_xcalloc((size_t)ORDERS * p->batch, sizeof *st.order);
    if (st.slots && st.order) {
        for (unsigned k = 0; k < ORDERS; k++) {
            uint32_t *o = st.order + (size_t)k * p->batch;
            for (uint64_t i = 0; i < p->batch; i++)
                o[i] = (uint32_t)i;
            bench_shuffle(o, p->batch, &rng);
        }
        rc = bench_run_threads(run, p->threads, random_worker, &st, &tm);
    }
    free(st.slots);
    free(st.order);
    if (rc == 0)
        bench_timing_metrics(&tm, out);
    return rc;
}
