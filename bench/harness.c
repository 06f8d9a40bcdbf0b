/*
 * harness.c -- services every workload shares: timed thread phases behind
 * a barrier, metrics, latency percentiles, random numbers, memory readings
 * and isolated loading of peer libraries.
 */
#include "bench.h"

#include <cpuid.h>
#include <errno.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static __thread char error_text[256];

void bench_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_text, sizeof error_text, fmt, ap);
    va_end(ap);
}

const char *bench_error(void)
{
    return error_text[0] ? error_text : "unknown error";
}

static __thread char alloc_why[160];

void bench_alloc_why(const char *why)
{
    snprintf(alloc_why, sizeof alloc_why, "%s", why ? why : "");
}

int bench_alloc_batch(bench_thread *t, bench_handle *slot, uint64_t n, size_t lo, size_t hi)
{
    const bench_allocator *a = t->run->alloc;
    for (uint64_t i = 0; i < n; i++) {
        size_t size = lo < hi ? bench_rand_range(&t->rng, lo, hi) : lo;
        slot[i] = a->alloc(size);
        if (!slot[i]) {
            bench_fail_alloc(size, i);
            while (i)
                a->free(slot[--i]);
            t->failed = 1;
            return -1;
        }
    }
    return 0;
}

void bench_fail_alloc(size_t size, uint64_t done)
{
    bench_fail("alloc(%zu) failed after %llu blocks%s%s", size, (unsigned long long)done,
               alloc_why[0] ? ": " : " (heap exhausted?)", alloc_why);
    alloc_why[0] = 0;
}

uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

size_t bench_rand_logsize(uint64_t *state, size_t lo, size_t hi)
{
    double u = (double)(bench_rand(state) >> 11) / 9007199254740992.0;
    size_t s = (size_t)((double)lo * pow((double)hi / (double)lo, u));
    return s < lo ? lo : s > hi ? hi : s;
}

void bench_shuffle(uint32_t *idx, size_t n, uint64_t *state)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(bench_rand(state) % i);
        uint32_t t = idx[i - 1];
        idx[i - 1] = idx[j];
        idx[j] = t;
    }
}

void *bench_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        bench_fail("harness out of memory (%zu x %zu bytes)", n, size);
        return NULL;
    }
    memset(p, 0, n * size);
    return p;
}

/* ---- metrics ---------------------------------------------------------- */

void bench_metric(bench_metrics *m, const char *name, double value)
{
    for (unsigned i = 0; i < m->n; i++) {
        if (strcmp(m->name[i], name) == 0) {
            m->value[i] = value;
            return;
        }
    }
    if (m->n < BENCH_MAX_METRICS) {
        m->name[m->n] = name;
        m->value[m->n++] = value;
    }
}

int bench_metric_get(const bench_metrics *m, const char *name, double *value)
{
    for (unsigned i = 0; i < m->n; i++) {
        if (strcmp(m->name[i], name) == 0) {
            *value = m->value[i];
            return 0;
        }
    }
    return -1;
}

void bench_timing_metrics(const bench_timing *t, bench_metrics *m)
{
    double secs = t->seconds > 0 ? t->seconds : 1e-9;
    bench_metric(m, "ops_per_s", (double)t->ops / secs);
    bench_metric(m, "ops", (double)t->ops);
    bench_metric(m, "seconds", t->seconds);
    if (t->has_counters && t->ops) {
        bench_metric(m, "flushes_per_op", (double)t->counters.flushes / (double)t->ops);
        bench_metric(m, "fences_per_op", (double)t->counters.fences / (double)t->ops);
        bench_metric(m, "reflushes_per_op", (double)t->counters.reflushes / (double)t->ops);
    }
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static double percentile(const uint32_t *sorted, size_t n, double q)
{
    size_t i = (size_t)ceil(q * (double)n);
    return (double)sorted[i ? i - 1 : 0];
}

void bench_lat_metrics(bench_lat *lat, const char *prefix, bench_metrics *m)
{
    /* Metric names must outlive the call: keep them in a static table. */
    static const char *const names[][4] = {
        { "alloc_p50_ns", "alloc_p99_ns", "alloc_p999_ns", "alloc_max_ns" },
        { "free_p50_ns", "free_p99_ns", "free_p999_ns", "free_max_ns" },
    };
    unsigned k = strcmp(prefix, "alloc") == 0 ? 0 : 1;
    if (lat->n == 0)
        return;
    qsort(lat->ns, lat->n, sizeof lat->ns[0], cmp_u32);
    bench_metric(m, names[k][0], percentile(lat->ns, lat->n, 0.50));
    bench_metric(m, names[k][1], percentile(lat->ns, lat->n, 0.99));
    bench_metric(m, names[k][2], percentile(lat->ns, lat->n, 0.999));
    bench_metric(m, names[k][3], (double)lat->ns[lat->n - 1]);
}

/* ---- timed thread phases ---------------------------------------------- */

typedef struct phase {
    pthread_barrier_t start;
    bench_worker_fn fn;
    bench_thread *threads;
} phase;

typedef struct phase_slot {
    phase *ph;
    bench_thread *t;
} phase_slot;

static void *phase_main(void *arg)
{
    phase_slot *slot = arg;
    bench_thread *t = slot->t;
    const bench_allocator *a = t->run->alloc;

    if (a->thread_attach)
        a->thread_attach(t->tid);
    pthread_barrier_wait(&slot->ph->start);
    t->start_ns = bench_now_ns();
    slot->ph->fn(t);
    t->end_ns = bench_now_ns();
    if (t->failed && !t->error[0])
        snprintf(t->error, sizeof t->error, "%.*s", (int)sizeof t->error - 1, bench_error());
    if (a->thread_detach)
        a->thread_detach();
    return NULL;
}

int bench_run_threads(const bench_run *run, unsigned n, bench_worker_fn fn,
                      void *arg, bench_timing *out)
{
    const bench_allocator *a = run->alloc;
    phase ph = { .fn = fn };
    bench_thread *ts = bench_xcalloc(n, sizeof *ts);
    phase_slot *slots = bench_xcalloc(n, sizeof *slots);
    pthread_t *tids = bench_xcalloc(n, sizeof *tids);
    bench_counters c0 = { 0 }, c1 = { 0 };
    unsigned started = 0;
    int rc = 0;

    memset(out, 0, sizeof *out);
    if (!ts || !slots || !tids) {
        free(ts);
        free(slots);
        free(tids);
        return -1;
    }
    pthread_barrier_init(&ph.start, NULL, n + 1);
    ph.threads = ts;
    for (unsigned i = 0; i < n; i++) {
        ts[i] = (bench_thread){ .run = run, .tid = i, .nthreads = n, .arg = arg,
                                .rng = run->p->seed * 1000003u + i + 1 };
        slots[i] = (phase_slot){ &ph, &ts[i] };
    }
    for (; started < n; started++) {
        if (pthread_create(&tids[started], NULL, phase_main, &slots[started]) != 0)
            break;
    }
    if (started < n) {
        /* The barrier counts n + 1 parties: without every thread it would
         * never open, so this is not recoverable. */
        fprintf(stderr, "bench: cannot start thread %u of %u\n", started, n);
        exit(1);
    }
    out->has_counters = a->counters && a->counters(&c0) == 0;
    pthread_barrier_wait(&ph.start);
    for (unsigned i = 0; i < n; i++)
        pthread_join(tids[i], NULL);
    uint64_t t0 = UINT64_MAX, t_end = 0;
    for (unsigned i = 0; i < n; i++) {
        if (ts[i].start_ns < t0)
            t0 = ts[i].start_ns;
        if (ts[i].end_ns > t_end)
            t_end = ts[i].end_ns;
        out->ops += ts[i].ops;
        if (ts[i].failed && rc == 0) {
            bench_fail("thread %u: %s", i, ts[i].error);
            rc = -1;
        }
    }
    if (out->has_counters && a->counters(&c1) == 0) {
        out->counters.flushes = c1.flushes - c0.flushes;
        out->counters.fences = c1.fences - c0.fences;
        out->counters.reflushes = c1.reflushes - c0.reflushes;
    } else {
        out->has_counters = 0;
    }
    out->seconds = (double)(t_end - t0) / 1e9;
    pthread_barrier_destroy(&ph.start);
    free(ts);
    free(slots);
    free(tids);
    return rc;
}

/* ---- memory readings -------------------------------------------------- */

uint64_t bench_rss_bytes(void)
{
    unsigned long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    if (fscanf(f, "%lu %lu", &size, &resident) != 2)
        resident = 0;
    fclose(f);
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

uint64_t bench_file_bytes(const char *path)
{
    struct stat st;
    if (!path || stat(path, &st) != 0)
        return 0;
    return (uint64_t)st.st_blocks * 512u;
}

/* ---- peer libraries --------------------------------------------------- */

void *bench_dlopen(const char *const names[])
{
    char tried[256] = "";
    size_t used = 0;
    for (unsigned i = 0; names[i]; i++) {
        /* RTLD_LOCAL: the library's malloc/free do not join the global
         * scope, so glibc stays the process's malloc. */
        void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib)
            return lib;
        const char *why = dlerror();
        int w = snprintf(tried + used, sizeof tried - used, "%s%s",
                         used ? "; " : "", why ? why : names[i]);
        if (w > 0 && (size_t)w < sizeof tried - used)
            used += (size_t)w;
    }
    bench_fail("library not installed (%s)", tried);
    return NULL;
}

int bench_dlsym(void *lib, const char *sym, void *fn_ptr)
{
    void *p = dlsym(lib, sym);
    if (!p) {
        bench_fail("symbol %s missing from the library", sym);
        return -1;
    }
    memcpy(fn_ptr, &p, sizeof p);
    return 0;
}

const char *bench_cpu_flush(void)
{
    unsigned a, b, c, d;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        if (b & (1u << 24))
            return "clwb";
        if (b & (1u << 23))
            return "clflushopt";
    }
    return "clflush";
}

/* A number, with a K/M/G suffix (and an optional "iB" or "B") when `sized`. */
int bench_parse_u64(const char *s, uint64_t *out, int sized)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s)
        return -1;
    if (sized && *end) {
        switch (*end++) {
        case 'k': case 'K': v <<= 10; break;
        case 'm': case 'M': v <<= 20; break;
        case 'g': case 'G': v <<= 30; break;
        default: return -1;
        }
        if (*end == 'i' || *end == 'B')
            end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
    }
    if (*end)
        return -1;
    *out = v;
    return 0;
}
