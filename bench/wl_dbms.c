/*
 * wl_dbms.c -- DBMStest-style large allocations (NVAlloc's large-allocation
 * workload): each thread, like a query operator, allocates a batch of
 * buffers of random size between size_min and size_max, then releases them
 * in allocation order, over and over.
 */
#include "bench.h"

#include <stdlib.h>

typedef struct dbms_state {
    bench_handle *slots;         /* batch handles per thread */
    uint64_t rounds;             /* per thread */
} dbms_state;

static void dbms_worker(bench_thread *t)
{
    const bench_params *p = t->run->p;
    const bench_allocator *a = t->run->alloc;
    dbms_state *st = t->arg;
    bench_handle *slot = st->slots + (size_t)t->tid * p->batch;

    for (uint64_t r = 0; r < st->rounds; r++) {
        if (bench_alloc_batch(t, slot, p->batch, p->size_min, p->size_max))
            return;
        for (uint64_t i = 0; i < p->batch; i++)
            a->free(slot[i]);
        t->ops += 2 * p->batch;
    }
}

int wl_dbms(const bench_run *run, bench_metrics *out)
{
    const bench_params *p = run->p;
    dbms_state st;
    bench_timing tm;

    st.rounds = p->ops / p->threads / (2 * p->batch);
    if (st.rounds == 0)
        st.rounds = 1;
    st.slots = bench_xcalloc((size_t)p->threads * p->batch, sizeof *st.slots);
    if (!st.slots)
        return -1;
    int rc = bench_run_threads(run, p->threads, dbms_worker, &st, &tm);
    free(st.slots);
    if (rc == 0)
        bench_timing_metrics(&tm, out);
    return rc;
}
