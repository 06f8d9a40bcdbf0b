/*
 * bench.h -- the contract between the benchmark harness, its workloads and
 * the allocator adapters.  Every workload is written once against
 * bench_allocator; an adapter wraps one allocator (pheap, libpmemobj,
 * mimalloc, jemalloc, glibc malloc) behind it.
 */
#ifndef BENCH_H
#define BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ===================================================================== */
/*  Allocator interface                                                  */
/* ===================================================================== */

/* A block as the workload sees it: an address for transient allocators, an
 * offset (or packed object id) for persistent ones.  0 means "no block". */
typedef uint64_t bench_handle;

typedef struct bench_counters {   /* durability work, summed over threads */
    uint64_t flushes;             /* cache lines written back */
    uint64_t fences;              /* store fences */
    uint64_t reflushes;           /* lines flushed again in the same or the
                                     previous fence batch */
} bench_counters;

typedef struct bench_heap_conf {
    const char *path;       /* heap file; ignored by transient allocators */
    uint64_t size;          /* heap size, bytes */
    unsigned nthreads;      /* worker threads the workload will attach */
    unsigned want_usage;    /* 1: keep the accounting heap_bytes() needs */
    uint64_t grow_from;     /* nonzero: a heap that can grow starts this small and
                               grows up to `size` (memory-use workloads: the
                               file's storage then follows what the allocator
                               uses, not what it was given at creation) */
} bench_heap_conf;

/* Calls marked "optional" may be NULL.  One heap is open at a time; alloc
 * and free may be called from any attached thread, and a block may be
 * freed by a thread other than the one that allocated it. */
typedef struct bench_allocator {
    const char *name;       /* what --alloc selects */
    const char *what;       /* one line for --list */
    unsigned persistent;    /* 1: the heap is a file at bench_heap_conf.path */

    /* Makes the allocator usable (loads its library).  Fails, with a
     * message in bench_error(), when it is not installed.  Optional. */
    int (*load)(void);
    /* Creates a fresh heap.  0 or -1 with bench_error() set. */
    int (*init)(const bench_heap_conf *conf);
    void (*thread_attach)(unsigned tid);   /* optional */
    void (*thread_detach)(void);           /* optional */
    bench_handle (*alloc)(size_t size);    /* 0 when out of memory */
    void (*free)(bench_handle h);
    /* Address of a block, so a workload can write it.  Optional. */
    void *(*addr)(bench_handle h);
    /* Clean shutdown of the heap made by init or reopen.  0 or -1. */
    int (*close)(void);
    /* Durability counters since init/reopen.  Optional. */
    int (*counters)(bench_counters *out);
    /* Bytes the allocator holds for blocks by its own account (live blocks,
     * their slack and partly used slabs).  Optional. */
    int (*heap_bytes)(uint64_t *out);
    /* Opens the existing heap at conf->path, recovering it if it was not
     * closed cleanly.  Optional: allocators without it skip "recovery". */
    int (*reopen)(const bench_heap_conf *conf);
    /* Allocators that recover by tracing (pheap's GC mode), both optional.
     * root_set names block h as the root a recovery traces from.  recover,
     * after reopen of a heap that was not closed cleanly (reopen leaves it
     * to be called), keeps the blocks reachable from the root, frees the
     * rest, with `threads` marking threads (0: the allocator's default);
     * *marked: reachable blocks it found. */
    int (*root_set)(bench_handle h);
    int (*recover)(unsigned threads, uint64_t *marked);
    /* Defragmentation the program takes part in (pheap_defrag,
     * pmemobj_defrag): the allocator may move the blocks that the n words
     * at slots[] name -- every word naming them -- and rewrites those words.
     * 0 or -1.  Optional; fragbench calls it after each phase's frees,
     * in one thread, over every thread's blocks, once each thread has
     * called collect. */
    int (*relocate)(bench_handle *const *slots, size_t n);
    /* Gives the calling thread's cached free blocks back (pheap_thread_collect).
     * Optional. */
    void (*collect)(void);
} bench_allocator;

/* Every adapter the binary knows, in report order; the list ends with NULL. */
extern const bench_allocator *const bench_allocators[];
const bench_allocator *bench_allocator_find(const char *name);

/* ===================================================================== */
/*  Workloads                                                            */
/* ===================================================================== */

/* Parameters of one workload run.  Every workload reads the ones it lists
 * in its `uses` mask and ignores the others. */
typedef struct bench_params {
    uint64_t ops;           /* total alloc + free calls to aim for (all
                               threads together); recovery: live blocks,
                               recovery-gc: reachable blocks */
    unsigned threads;       /* worker threads; recovery-gc: marking threads */
    size_t   size_min;      /* smallest request, bytes */
    size_t   size_max;      /* largest request, bytes (== size_min: fixed) */
    uint64_t batch;         /* blocks per batch, per thread (larson: slots) */
    uint64_t rounds;        /* larson: thread generations; fixed: passes */
    uint64_t live_bytes;    /* fragbench: live bytes to reach per phase */
    unsigned free_pct;      /* fragbench: percent freed after each phase */
    uint64_t seed;          /* random seed */
    uint64_t heap_size;     /* bytes, from the command line */
} bench_params;

enum {                      /* bench_workload.uses */
    BENCH_P_OPS = 1u << 0,
    BENCH_P_SIZE = 1u << 1,
    BENCH_P_BATCH = 1u << 2,
    BENCH_P_ROUNDS = 1u << 3,
    BENCH_P_LIVE = 1u << 4,
};

enum {                      /* bench_workload.flags */
    BENCH_W_SINGLE = 1u << 0,    /* runs once, at one thread */
    BENCH_W_PAIRS = 1u << 1,     /* needs an even number >= 2 of threads */
    BENCH_W_REOPEN = 1u << 2,    /* needs allocator->reopen */
    BENCH_W_USAGE = 1u << 3,     /* measures memory use */
    BENCH_W_TRACE = 1u << 4,     /* needs allocator->root_set and ->recover */
};

#define BENCH_MAX_METRICS 24

/* What one repetition measured: named numbers ("ops_per_s", "alloc_p99_ns"). */
typedef struct bench_metrics {
    unsigned n;
    const char *name[BENCH_MAX_METRICS];
    double value[BENCH_MAX_METRICS];
} bench_metrics;

void bench_metric(bench_metrics *m, const char *name, double value);
int  bench_metric_get(const bench_metrics *m, const char *name, double *value);

/* Everything a workload needs for one repetition. */
typedef struct bench_run {
    const bench_allocator *alloc;
    const bench_params *p;
    bench_heap_conf heap;   /* heap the harness created before the call */
} bench_run;

/* A workload runs one repetition on a heap the harness already created
 * (except BENCH_W_REOPEN ones, which manage heaps themselves) and fills
 * *out.  0, or -1 with bench_error() set. */
typedef int (*bench_workload_fn)(const bench_run *run, bench_metrics *out);

typedef struct bench_workload {
    const char *name;
    const char *what;        /* one line: what it does and where from */
    bench_workload_fn run;
    unsigned uses;           /* BENCH_P_* it reads */
    unsigned flags;          /* BENCH_W_* */
    bench_params full;       /* defaults of the full run */
    bench_params quick;      /* --quick */
    bench_params smoke;      /* --smoke: tiny, for a functional check */
} bench_workload;

extern const bench_workload bench_workloads[];   /* ends with name == NULL */
const bench_workload *bench_workload_find(const char *name);

/* The workloads (one file each). */
int wl_batches(const bench_run *run, bench_metrics *out);  /* threadtest, dbmstest */
int wl_shbench(const bench_run *run, bench_metrics *out);
int wl_larson(const bench_run *run, bench_metrics *out);
int wl_prodcon(const bench_run *run, bench_metrics *out);
int wl_fixed(const bench_run *run, bench_metrics *out);
int wl_random(const bench_run *run, bench_metrics *out);
int wl_frag(const bench_run *run, bench_metrics *out);
int wl_recovery(const bench_run *run, bench_metrics *out);
int wl_recovery_gc(const bench_run *run, bench_metrics *out);

/* ===================================================================== */
/*  Harness services (harness.c)                                         */
/* ===================================================================== */

/* Last failure message of the calling thread. */
void bench_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *bench_error(void);

/* An adapter whose alloc returns 0 may say why (the library's message);
 * the workload then reports "alloc(size) failed after n blocks: why". */
void bench_alloc_why(const char *why);
void bench_fail_alloc(size_t size, uint64_t done);

uint64_t bench_now_ns(void);

/* splitmix64: small, fast, good enough to pick sizes and slots. */
static inline uint64_t bench_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi]. */
static inline size_t bench_rand_range(uint64_t *state, size_t lo, size_t hi)
{
    return lo + (size_t)(bench_rand(state) % (uint64_t)(hi - lo + 1));
}

/* Log-uniform in [lo, hi]: the density falls as 1/size, so small requests
 * are the most frequent (shbench's shape). */
size_t bench_rand_logsize(uint64_t *state, size_t lo, size_t hi);

/* Fisher-Yates shuffle of idx[0..n). */
void bench_shuffle(uint32_t *idx, size_t n, uint64_t *state);

/* calloc that reports failure through bench_fail (harness memory, not the
 * allocator under test; touched so its pages count before any baseline). */
void *bench_xcalloc(size_t n, size_t size);

/* One worker thread of a timed phase. */
typedef struct bench_thread {
    const bench_run *run;
    unsigned tid;            /* 0 .. nthreads-1 */
    unsigned nthreads;
    void *arg;               /* the workload's shared state */
    uint64_t rng;            /* seeded from params.seed and tid */
    uint64_t ops;            /* alloc + free calls done (worker sets) */
    uint64_t start_ns;       /* set by the harness: left the barrier */
    uint64_t end_ns;         /* set by the harness: worker returned */
    int failed;              /* worker sets with bench_fail on error */
    char error[256];
} bench_thread;

/* Allocates n blocks of lo..hi bytes (drawn from t->rng when lo < hi) into
 * slot[0..n).  On failure: reports it, frees what it allocated, marks the
 * thread failed and returns -1. */
int bench_alloc_batch(bench_thread *t, bench_handle *slot, uint64_t n, size_t lo, size_t hi);

typedef void (*bench_worker_fn)(bench_thread *t);

typedef struct bench_timing {
    double seconds;          /* first worker's start to the last one's end */
    uint64_t ops;            /* sum of the workers' ops */
    bench_counters counters; /* durability work done inside the phase */
    int has_counters;
} bench_timing;

/* Runs fn in n threads, each attached to the allocator, released together
 * by a barrier; times from the first worker's start to the last one's end.  Returns
 * 0, or -1 with the first worker's error. */
int bench_run_threads(const bench_run *run, unsigned n, bench_worker_fn fn,
                      void *arg, bench_timing *out);

/* Adds ops_per_s, ops, seconds and (with counters) flushes/fences/reflushes
 * per op to *m. */
void bench_timing_metrics(const bench_timing *t, bench_metrics *m);

/* Latency samples of one kind of call. */
typedef struct bench_lat {
    uint32_t *ns;            /* samples, saturated at UINT32_MAX */
    size_t n, cap;
} bench_lat;

/* Sorts the samples and adds <prefix>_p50_ns, _p99_ns, _p999_ns, _max_ns. */
void bench_lat_metrics(bench_lat *lat, const char *prefix, bench_metrics *m);

/* Resident memory of the process, bytes. */
uint64_t bench_rss_bytes(void);
/* Bytes of storage the file occupies (st_blocks * 512); 0 if unknown. */
uint64_t bench_file_bytes(const char *path);

/* Loads a shared library into its own symbol scope so that it never
 * replaces the process's malloc; the first name that loads wins. */
void *bench_dlopen(const char *const names[]);
/* Resolves sym from lib into *fn (a function pointer); -1 with a message. */
int bench_dlsym(void *lib, const char *sym, void *fn_ptr);

/* Name of the best cache-line flush the CPU has: clwb, clflushopt, clflush. */
const char *bench_cpu_flush(void);

/* Parses an unsigned number for an option: 0, or -1 if it is not one; with
 * `sized`, a K, M or G suffix (KiB units; "KiB", "KB" accepted too). */
int bench_parse_u64(const char *s, uint64_t *out, int sized);

#endif /* BENCH_H */
