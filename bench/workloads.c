/*
 * workloads.c -- the table of workloads with their parameters for the full
 * run, --quick and --smoke.  Full-run sizes keep the default run of run.sh
 * (all workloads, five allocators, 1/2/4 threads, 5 repetitions) within
 * about eight minutes on two cores, well inside the fifteen-minute budget;
 * --smoke only proves every path works.
 */
#include "bench.h"

#include <string.h>

#define KiB 1024ull
#define MiB (1024ull * 1024ull)

/* ops, size_min, size_max, batch, rounds, live_bytes, free_pct */
#define P(o, lo, hi, b, r, l, f) \
    { .ops = (o), .size_min = (lo), .size_max = (hi), .batch = (b), .rounds = (r), \
      .live_bytes = (l), .free_pct = (f) }

const bench_workload bench_workloads[] = {
    { "threadtest", "batches of fixed-size objects allocated then freed per thread (Hoard; Ralloc, NVAlloc)",
      wl_batches, BENCH_P_OPS | BENCH_P_SIZE | BENCH_P_BATCH, 0,
      P(5000000, 64, 64, 1000, 0, 0, 0), P(200000, 64, 64, 1000, 0, 0, 0),
      P(4000, 64, 64, 100, 0, 0, 0) },
    { "shbench", "mixed sizes, small ones most frequent, partial frees and refills (MicroQuill shbench; Ralloc, NVAlloc)",
      wl_shbench, BENCH_P_OPS | BENCH_P_SIZE | BENCH_P_BATCH, 0,
      P(5000000, 64, 1000, 1000, 0, 0, 0), P(200000, 64, 1000, 1000, 0, 0, 0),
      P(6000, 64, 1000, 100, 0, 0, 0) },
    { "larson", "random free+alloc in per-lane slots, leftovers freed by successor threads (Larson & Krishnan; Ralloc, Poseidon, NVAlloc)",
      wl_larson, BENCH_P_OPS | BENCH_P_SIZE | BENCH_P_BATCH | BENCH_P_ROUNDS, 0,
      P(5000000, 64, 256, 1000, 4, 0, 0), P(200000, 64, 256, 1000, 4, 0, 0),
      P(4000, 64, 256, 100, 2, 0, 0) },
    { "larson-large", "larson with large blocks (NVAlloc large-allocation set)",
      wl_larson, BENCH_P_OPS | BENCH_P_SIZE | BENCH_P_BATCH | BENCH_P_ROUNDS, 0,
      P(300000, 32 * KiB, 512 * KiB, 32, 4, 0, 0), P(10000, 32 * KiB, 512 * KiB, 32, 4, 0, 0),
      P(200, 32 * KiB, 512 * KiB, 8, 2, 0, 0) },
    { "prod-con", "thread pairs: producer allocates into a queue, consumer frees (Makalu via Ralloc; NVAlloc)",
      wl_prodcon, BENCH_P_OPS | BENCH_P_SIZE, BENCH_W_PAIRS,
      P(5000000, 64, 64, 0, 0, 0, 0), P(200000, 64, 64, 0, 0, 0, 0),
      P(4000, 64, 64, 0, 0, 0, 0) },
    { "fixed-64", "1e6 fixed-size blocks allocated then freed by all threads, per-call latency percentiles (PMA)",
      wl_fixed, BENCH_P_OPS | BENCH_P_SIZE | BENCH_P_BATCH | BENCH_P_ROUNDS, 0,
      P(4000000, 64, 64, 1000000, 1, 0, 0), P(200000, 64, 64, 100000, 1, 0, 0),
      P(2000, 64, 64, 1000, 1, 0, 0) },
    { "fixed-32k", "fixed-64 with 32 KiB blocks, as many as fit in half the heap (PMA)",
      wl_fixed, BENCH_P_OPS | BENCH_P_SIZE | BENCH_P_BATCH | BENCH_P_ROUNDS, 0,
      P(300000, 32 * KiB, 32 * KiB, 1000000, 1, 0, 0), P(10000, 32 * KiB, 32 * KiB, 1000000, 1, 0, 0),
      P(200, 32 * KiB, 32 * KiB, 100, 1, 0, 0) },
    { "random-64", "100 allocs then 100 frees in random order, 64 B (Poseidon microbenchmark)",
      wl_random, BENCH_P_OPS | BENCH_P_SIZE | BENCH_P_BATCH, 0,
      P(2000000, 64, 64, 100, 0, 0, 0), P(200000, 64, 64, 100, 0, 0, 0),
      P(2000, 64, 64, 100, 0, 0, 0) },
    { "random-512", "random-order alloc/free, 512 B (Poseidon microbenchmark)",
      wl_random, BENCH_P_OPS | BENCH_P_SIZE | BENCH_P_BATCH, 0,
      P(2000000, 512, 512, 100, 0, 0, 0), P(200000, 512, 512, 100, 0, 0, 0),
      P(2000, 512, 512, 100, 0, 0, 0) },
    { "random-4k", "random-order alloc/free, 4 KiB (Poseidon microbenchmark)",
      wl_random, BENCH_P_OPS | BENCH_P_SIZE | BENCH_P_BATCH, 0,
      P(2000000, 4 * KiB, 4 * KiB, 100, 0, 0, 0), P(200000, 4 * KiB, 4 * KiB, 100, 0, 0, 0),
      P(2000, 4 * KiB, 4 * KiB, 100, 0, 0, 0) },
    { "dbmstest", "batches of large buffers, random 32-512 KiB, released in order (NVAlloc DBMStest)",
      wl_batches, BENCH_P_OPS | BENCH_P_SIZE | BENCH_P_BATCH, 0,
      P(300000, 32 * KiB, 512 * KiB, 16, 0, 0, 0), P(10000, 32 * KiB, 512 * KiB, 16, 0, 0, 0),
      P(200, 32 * KiB, 512 * KiB, 8, 0, 0, 0) },
    { "fragbench", "size-changing phases that allocate, free most, allocate another size; memory against live bytes (NVAlloc fragbench)",
      wl_frag, BENCH_P_SIZE | BENCH_P_ROUNDS | BENCH_P_LIVE, BENCH_W_USAGE,
      P(0, 100, 2000, 0, 6, 64 * MiB, 90), P(0, 100, 2000, 0, 6, 16 * MiB, 90),
      P(0, 100, 2000, 0, 3, 256 * KiB, 90) },
    { "recovery", "reopen time with ops live blocks, after SIGKILL and after clean close (Ralloc, PMA)",
      wl_recovery, BENCH_P_OPS | BENCH_P_SIZE, BENCH_W_SINGLE | BENCH_W_REOPEN,
      P(100000, 64, 64, 0, 0, 0, 0), P(20000, 64, 64, 0, 0, 0, 0),
      P(100, 64, 64, 0, 0, 0, 0) },
    { "recovery-gc", "open + trace after SIGKILL of a heap with ops reachable blocks (list, tree, garbage), threads marking; then a clean open (Ralloc)",
      wl_recovery_gc, BENCH_P_OPS | BENCH_P_SIZE, BENCH_W_REOPEN | BENCH_W_TRACE,
      P(1000000, 64, 64, 0, 0, 0, 0), P(200000, 64, 64, 0, 0, 0, 0),
      P(2000, 64, 64, 0, 0, 0, 0) },
    { NULL, NULL, NULL, 0, 0, { 0 }, { 0 }, { 0 } },
};

const bench_workload *bench_workload_find(const char *name)
{
    for (const bench_workload *w = bench_workloads; w->name; w++) {
        if (strcmp(w->name, name) == 0)
            return w;
    }
    return NULL;
}
