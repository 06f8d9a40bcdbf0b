/*
 * wl_fixed.c -- fixed-size allocation with per-call latency: the threads
 * together allocate `batch` blocks of one size, then free them in the same
 * order, for several passes; every call is timed, and the report gives the
 * p50, p99, p99.9 and max of alloc and free.  The block count is capped so
 * the blocks fit in half the heap.
 */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

typedef struct fixed_state {
    bench_handle *slots;         /* per_thread handles per thread */
    uint64_t per_thread;         /* blocks each thread holds at the peak */
    uint64_t passes;
    bench_lat alloc_lat, free_lat;   /* each thread owns a segment */
} fixed_state;

static void fixed_worker(bench_thread *t)
{
    const bench_allocator *a = t->run->alloc;
    fixed_state *st = t->arg;
    size_t size = t->run->p->size_min;
    uint64_t n = st->per_thread;
    bench_handle *slot = st->slots + t->tid * n;
    uint32_t *alat = st->alloc_lat.ns + t->tid * n * st->passes;
    uint32_t *flat = st->free_lat.ns + t->tid * n * st->passes;

    for (uint64_t pass = 0; pass < st->passes; pass++) {
        for (uint64_t i = 0; i < n; i++) {
            uint64_t t0 = bench_now_ns();
            bench_handle got = a->alloc(size);
            uint64_t d = bench_now_ns() - t0;
            slot[i] = got; /* after the clock: the store is not the allocator's cost */
            *alat++ = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
            if (!slot[i]) {
                bench_fail_alloc(size, i);
                while (i)
                    a->free(slot[--i]);
                t->failed = 1;
                return;
            }
        }
        for (uint64_t i = 0; i < n; i++) {
            uint64_t t0 = bench_now_ns();
            a->free(slot[i]);
            uint64_t d = bench_now_ns() - t0;
            *flat++ = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
        }
        t->ops += 2 * n;
    }
}

/* Cost of one reading of the clock, included in every latency sample. */
static double timer_overhead_ns(void)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 1000; i++) {
        uint64_t t0 = bench_now_ns(), d = bench_now_ns() - t0;
        if (d < best)
            best = d;
    }
    return (double)best;
}

int wl_fixed(const bench_run *run, bench_metrics *out)
{
    const bench_params *p = run->p;
    uint64_t blocks = p->batch, fit = p->heap_size / 2 / p->size_min;
    fixed_state st = { 0 };
    bench_timing tm;
    int rc = -1;

    if (blocks > fit)
        blocks = fit;
    st.per_thread = blocks / p->threads ? blocks / p->threads : 1;
    blocks = st.per_thread * p->threads;
    st.passes = p->ops / (2 * blocks);
    if (st.passes < p->rounds)
        st.passes = p->rounds;
    if (st.passes == 0)
        st.passes = 1;
    size_t samples = (size_t)(blocks * st.passes);
    st.slots = bench_xcalloc(blocks, sizeof *st.slots);
    st.alloc_lat.ns = bench_xcalloc(samples, sizeof(uint32_t));
    st.free_lat.ns = bench_xcalloc(samples, sizeof(uint32_t));
    if (st.slots && st.alloc_lat.ns && st.free_lat.ns) {
        /* Touch every page of the harness's own arrays first, so that no
         * sample includes a page fault of the harness. */
        memset(st.slots, 0, blocks * sizeof *st.slots);
        memset(st.alloc_lat.ns, 0, samples * sizeof(uint32_t));
        memset(st.free_lat.ns, 0, samples * sizeof(uint32_t));
        rc = bench_run_threads(run, p->threads, fixed_worker, &st, &tm);
    }
    if (rc == 0) {
        st.alloc_lat.n = st.free_lat.n = samples;
        bench_timing_metrics(&tm, out);
        bench_lat_metrics(&st.alloc_lat, "alloc", out);
        bench_lat_metrics(&st.free_lat, "free", out);
        bench_metric(out, "blocks", (double)blocks);
        bench_metric(out, "passes", (double)st.passes);
        bench_metric(out, "timer_ns", timer_overhead_ns());
    }
    free(st.slots);
    free(st.alloc_lat.ns);
    free(st.free_lat.ns);
    return rc;
}
