/*
 * wl_batches.c -- batches: every thread allocates a batch of objects of
 * size_min..size_max bytes, then frees them in allocation order, over and
 * over, with no sharing between threads.  With one size this is threadtest
 * (Hoard; used by Ralloc and NVAlloc); with 32-512 KiB buffers it is
 * NVAlloc's DBMStest, a query operator's allocations.
 */
#include "bench.h"

#include <stdlib.h>

typedef struct tt_state {
    bench_handle *slots;        /* batch handles per thread, side by side */
    uint64_t iters;             /* batches per thread */
} tt_state;

static void tt_worker(bench_thread *t)
{
    const bench_params *p = t->run->p;
    const bench_allocator *a = t->run->alloc;
    tt_state *st = t->arg;
    bench_handle *slot = st->slots + (size_t)t->tid * p->batch;

    for (uint64_t it = 0; it < st->iters; it++) {
        if (bench_alloc_batch(t, slot, p->batch, p->size_min, p->size_max))
            return;
        for (uint64_t i = 0; i < p->batch; i++)
            a->free(slot[i]);
        t->ops += 2 * p->batch;
    }
}

int wl_batches(const bench_run *run, bench_metrics *out)
{
    const bench_params *p = run->p;
    tt_state st;
    bench_timing tm;
    uint64_t per_thread = p->ops / p->threads;

    st.iters = per_thread / (2 * p->batch);
    if (st.iters == 0)
        st.iters = 1;
    st.slots = bench_xcalloc((size_t)p->threads * p->batch, sizeof *st.slots);
    if (!st.slots)
        return -1;
    int rc = bench_run_threads(run, p->threads, tt_worker, &st, &tm);
    free(st.slots);
    if (rc == 0)
        bench_timing_metrics(&tm, out);
    return rc;
}
