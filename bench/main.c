/*
 * main.c -- pheap_bench: runs the chosen workloads against the chosen
 * allocators under the same conditions (heap location, heap size, thread
 * counts, repetitions) and prints one line per result, plus JSON lines for
 * the report generator.  --smoke runs everything tiny against one allocator
 * and fails on any error, for use as a test.
 */
#include "bench.h"
#include "isolate.h"
#include "output.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_REPS 64
#define MAX_THREAD_COUNTS 16
#define EXIT_SKIPPED 77          /* CTest's conventional "skipped" code */

/* glibc keeps little spare static TLS; mimalloc and jemalloc need some when
 * loaded with dlopen.  The harness re-executes itself once with more. */
#define TLS_TUNABLE "glibc.rtld.optional_static_tls=65536"

typedef struct options {
    char *allocs;               /* comma list, NULL = all */
    char *workloads;            /* comma list, NULL = all */
    unsigned threads[MAX_THREAD_COUNTS];
    unsigned nthreads;
    unsigned reps;
    const char *heap_dir;
    uint64_t heap_size;
    int quick, smoke;
    const char *json;
    bench_params over;          /* command-line overrides; 0 = keep */
    int over_size;
    int in_process;             /* repetitions in this process, not children */
    int child_fd;               /* >= 0: we are a child running one repetition */
} options;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: pheap_bench [options]\n"
        "  -a, --alloc LIST       allocators, comma-separated (default: all; see --list)\n"
        "  -w, --workload LIST    workloads, comma-separated (default: all)\n"
        "  -t, --threads LIST     thread counts (default: 1,2,4; --smoke: 1,2); recovery-gc:\n"
        "                         marking threads\n"
        "  -r, --reps N           repetitions per point (default: 5; --quick: 3; --smoke: 1)\n"
        "  -d, --heap-dir DIR     where persistent heaps live (default: /dev/shm)\n"
        "  -s, --heap-size SIZE   heap size, suffix K/M/G allowed (default: 1G)\n"
        "  -q, --quick            smaller parameters (run.sh --quick)\n"
        "      --smoke            tiny parameters, one allocator, exit 1 on any error\n"
        "  -j, --json FILE        append one JSON object per result line to FILE\n"
        "      --ops N            override: total alloc+free calls (recovery: live blocks,\n"
        "                         recovery-gc: reachable blocks)\n"
        "      --size MIN[:MAX]   override: request size range, bytes\n"
        "      --batch N          override: blocks per batch / larson slots per thread\n"
        "      --rounds N         override: larson generations, fixed passes, frag phases\n"
        "      --live SIZE        override: fragbench live bytes\n"
        "      --free-pct N       override: fragbench percent freed per phase\n"
        "      --seed N           random seed (default: 1)\n"
        "      --in-process       run repetitions in this process (default: a fresh\n"
        "                         child process per repetition; easier to debug)\n"
        "  -l, --list             list allocators and workloads\n"
        "exit: 0 ok, 1 a run failed, 2 usage, 77 no selected allocator available\n");
}

static int parse_threads(char *s, options *o)
{
    o->nthreads = 0;
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
        uint64_t v;
        if (bench_parse_u64(tok, &v, 0) || v == 0 || v > 1024 || o->nthreads == MAX_THREAD_COUNTS)
            return -1;
        o->threads[o->nthreads++] = (unsigned)v;
    }
    return o->nthreads ? 0 : -1;
}

static void list_all(void)
{
    printf("allocators:\n");
    for (unsigned i = 0; bench_allocators[i]; i++)
        printf("  %-12s %s\n", bench_allocators[i]->name, bench_allocators[i]->what);
    printf("workloads:\n");
    for (const bench_workload *w = bench_workloads; w->name; w++)
        printf("  %-12s %s\n", w->name, w->what);
}

static int in_list(const char *list, const char *name)
{
    if (!list || strcmp(list, "all") == 0)
        return 1;
    size_t n = strlen(name);
    for (const char *s = list; *s;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == n && strncmp(s, name, n) == 0)
            return 1;
        if (!e)
            break;
        s = e + 1;
    }
    return 0;
}

/* Every name in a list must exist: a typo should not silently run nothing. */
static int check_list(const char *list, int allocs)
{
    if (!list || strcmp(list, "all") == 0)
        return 0;
    char *copy = strdup(list);
    int rc = 0;
    for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
        if (allocs ? !bench_allocator_find(tok) : !bench_workload_find(tok)) {
            fprintf(stderr, "pheap_bench: unknown %s '%s' (see --list)\n",
                    allocs ? "allocator" : "workload", tok);
            rc = -1;
        }
    }
    free(copy);
    return rc;
}

static int parse_args(int argc, char **argv, options *o)
{
    enum { O_SMOKE = 256, O_OPS, O_SIZE, O_BATCH, O_ROUNDS, O_LIVE, O_FREE, O_SEED, O_INPROC,
           O_CHILD };
    static const struct option longs[] = {
        { "alloc", required_argument, NULL, 'a' },
        { "workload", required_argument, NULL, 'w' },
        { "threads", required_argument, NULL, 't' },
        { "reps", required_argument, NULL, 'r' },
        { "heap-dir", required_argument, NULL, 'd' },
        { "heap-size", required_argument, NULL, 's' },
        { "quick", no_argument, NULL, 'q' },
        { "smoke", no_argument, NULL, O_SMOKE },
        { "json", required_argument, NULL, 'j' },
        { "ops", required_argument, NULL, O_OPS },
        { "size", required_argument, NULL, O_SIZE },
        { "batch", required_argument, NULL, O_BATCH },
        { "rounds", required_argument, NULL, O_ROUNDS },
        { "live", required_argument, NULL, O_LIVE },
        { "free-pct", required_argument, NULL, O_FREE },
        { "seed", required_argument, NULL, O_SEED },
        { "in-process", no_argument, NULL, O_INPROC },
        { "child-fd", required_argument, NULL, O_CHILD },
        { "list", no_argument, NULL, 'l' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    uint64_t v, v2;
    int c;

    while ((c = getopt_long(argc, argv, "a:w:t:r:d:s:qj:lh", longs, NULL)) != -1) {
        switch (c) {
        case 'a': o->allocs = optarg; break;
        case 'w': o->workloads = optarg; break;
        case 't': if (parse_threads(optarg, o)) goto bad; break;
        case 'r': if (bench_parse_u64(optarg, &v, 0) || !v || v > MAX_REPS) goto bad; o->reps = (unsigned)v; break;
        case 'd': o->heap_dir = optarg; break;
        case 's': if (bench_parse_u64(optarg, &o->heap_size, 1) || o->heap_size < (8u << 20)) goto bad; break;
        case 'q': o->quick = 1; break;
        case O_SMOKE: o->smoke = 1; break;
        case 'j': o->json = optarg; break;
        case O_OPS: if (bench_parse_u64(optarg, &o->over.ops, 0) || !o->over.ops) goto bad; break;
        case O_SIZE: {
            char *colon = strchr(optarg, ':');
            if (colon)
                *colon = 0;
            if (bench_parse_u64(optarg, &v, 1) || !v || (colon && bench_parse_u64(colon + 1, &v2, 1)))
                goto bad;
            if (!colon)
                v2 = v;
            if (v2 < v)
                goto bad;
            o->over.size_min = (size_t)v;
            o->over.size_max = (size_t)v2;
            o->over_size = 1;
            break;
        }
        case O_BATCH: if (bench_parse_u64(optarg, &o->over.batch, 0) || !o->over.batch) goto bad; break;
        case O_ROUNDS: if (bench_parse_u64(optarg, &o->over.rounds, 0) || !o->over.rounds) goto bad; break;
        case O_LIVE: if (bench_parse_u64(optarg, &o->over.live_bytes, 1) || !o->over.live_bytes) goto bad; break;
        case O_FREE: if (bench_parse_u64(optarg, &v, 0) || v > 100) goto bad; o->over.free_pct = (unsigned)v; break;
        case O_SEED: if (bench_parse_u64(optarg, &o->over.seed, 0)) goto bad; break;
        case O_INPROC: o->in_process = 1; break;
        case O_CHILD: if (bench_parse_u64(optarg, &v, 0) || v > 1024) goto bad; o->child_fd = (int)v; break;
        case 'l': list_all(); exit(0);
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "pheap_bench: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    return check_list(o->allocs, 1) || check_list(o->workloads, 0) ? -1 : 0;
bad:
    fprintf(stderr, "pheap_bench: bad value '%s' for -%c\n", optarg, c < 256 ? c : '-');
    return -1;
}

static bench_params params_for(const bench_workload *w, const options *o)
{
    bench_params p = o->smoke ? w->smoke : o->quick ? w->quick : w->full;
    if (o->over.ops)
        p.ops = o->over.ops;
    if (o->over_size) {
        p.size_min = o->over.size_min;
        p.size_max = o->over.size_max;
    }
    if (o->over.batch)
        p.batch = o->over.batch;
    if (o->over.rounds)
        p.rounds = o->over.rounds;
    if (o->over.live_bytes)
        p.live_bytes = o->over.live_bytes;
    if (o->over.free_pct)
        p.free_pct = o->over.free_pct;
    p.seed = o->over.seed ? o->over.seed : 1;
    p.heap_size = o->heap_size;
    return p;
}

/* One repetition: a fresh heap, the workload, a clean close. */
static int run_once(const bench_workload *w, const bench_allocator *a, const bench_params *p,
                    const char *path, bench_metrics *m)
{
    bench_run run = { .alloc = a, .p = p };
    run.heap = (bench_heap_conf){ .path = path, .size = p->heap_size, .nthreads = p->threads + 1,
                                  .want_usage = (w->flags & BENCH_W_USAGE) != 0,
                                  .grow_from = (w->flags & BENCH_W_USAGE) ? 8u << 20 : 0 };
    memset(m, 0, sizeof *m);
    unlink(path);
    if (w->flags & BENCH_W_REOPEN) {
        int rc = w->run(&run, m);
        unlink(path);
        return rc;
    }
    if (a->init(&run.heap) != 0)
        return -1;
    int rc = w->run(&run, m);
    if (a->close() != 0 && rc == 0)
        rc = -1;
    unlink(path);
    return rc;
}

/* Command line of a child that runs one repetition of a point. */
typedef struct child_argv {
    char *argv[40];
    char num[12][24];
    unsigned n, nums;
} child_argv;

static void arg(child_argv *c, const char *s)
{
    c->argv[c->n++] = (char *)s;
}

static void arg_num(child_argv *c, const char *flag, uint64_t v)
{
    char *digits = c->num[c->nums++];
    snprintf(digits, sizeof c->num[0], "%llu", (unsigned long long)v);
    arg(c, flag);
    arg(c, digits);
}

/* One repetition in a child process: the same binary, told exactly this
 * point's parameters. */
static int run_child(const options *o, const bench_workload *w, const bench_allocator *a,
                     const bench_params *p, bench_metrics *m)
{
    child_argv c = { .n = 0 };
    char size[48];

    arg(&c, "pheap_bench");
    arg(&c, "--alloc");
    arg(&c, a->name);
    arg(&c, "--workload");
    arg(&c, w->name);
    if (o->smoke || o->quick)
        arg(&c, o->smoke ? "--smoke" : "--quick");
    arg(&c, "--heap-dir");
    arg(&c, o->heap_dir);
    arg_num(&c, "--threads", p->threads);
    arg_num(&c, "--heap-size", p->heap_size);
    arg_num(&c, "--seed", p->seed);
    if (p->ops)
        arg_num(&c, "--ops", p->ops);
    if (p->batch)
        arg_num(&c, "--batch", p->batch);
    if (p->rounds)
        arg_num(&c, "--rounds", p->rounds);
    if (p->live_bytes)
        arg_num(&c, "--live", p->live_bytes);
    if (p->free_pct)
        arg_num(&c, "--free-pct", p->free_pct);
    snprintf(size, sizeof size, "%zu:%zu", p->size_min, p->size_max);
    arg(&c, "--size");
    arg(&c, size);
    c.argv[c.n] = NULL;
    return isolate_run(c.argv, m);
}

static int run_point(const options *o, const bench_workload *w, const bench_allocator *a,
                     bench_params p, const char *path, FILE *json)
{
    static bench_metrics reps[MAX_REPS];
    bench_result r = { .w = w, .a = a, .p = &p, .threads = p.threads, .rep = reps };
    char error[300];

    for (unsigned i = 0; i < o->reps; i++) {
        int rc = o->in_process ? run_once(w, a, &p, path, &reps[i])
                               : run_child(o, w, a, &p, &reps[i]);
        unlink(path);
        if (rc != 0) {
            snprintf(error, sizeof error, "%s", bench_error());
            r.error = error;
            break;
        }
        r.reps++;
    }
    out_text(&r);
    out_json(json, &r);
    return r.error ? -1 : 0;
}

static int run_allocator(const options *o, const bench_allocator *a, FILE *json)
{
    char path[4096];
    int failed = 0;

    snprintf(path, sizeof path, "%s/pheap-bench.%ld.%s.heap", o->heap_dir, (long)getpid(), a->name);
    printf("# allocator %s: %s\n", a->name, a->what);
    for (const bench_workload *w = bench_workloads; w->name; w++) {
        if (!in_list(o->workloads, w->name))
            continue;
        if ((w->flags & BENCH_W_REOPEN) && !a->reopen) {
            printf("== %s: skipped for %s (no reopen: transient allocator)\n", w->name, a->name);
            continue;
        }
        if ((w->flags & BENCH_W_TRACE) && !(a->root_set && a->recover)) {
            printf("== %s: skipped for %s (does not recover by tracing)\n", w->name, a->name);
            continue;
        }
        if (a->relocate && !(w->flags & BENCH_W_USAGE)) { /* the plain allocator's row */
            printf("== %s: skipped for %s (moves blocks only in fragbench)\n", w->name, a->name);
            continue;
        }
        bench_params base = params_for(w, o);
        out_params(w, &base);
        for (unsigned i = 0; i < o->nthreads; i++) {
            bench_params p = base;
            p.threads = o->threads[i];
            if (w->flags & BENCH_W_SINGLE) {
                if (i > 0)
                    break;
                p.threads = 1;
            }
            if ((w->flags & BENCH_W_PAIRS) && (p.threads < 2 || p.threads % 2)) {
                printf("  %-12s %-9s t=%-2u skipped: needs an even thread count\n", w->name,
                       a->name, p.threads);
                continue;
            }
            failed |= run_point(o, w, a, p, path, json) != 0;
        }
    }
    return failed;
}

/* Re-executes once with the static TLS reserve the peers need (see above). */
static void ensure_tls_reserve(char **argv)
{
    const char *cur = getenv("GLIBC_TUNABLES");
    if (cur && strstr(cur, "glibc.rtld.optional_static_tls"))
        return;
    char value[1024];
    snprintf(value, sizeof value, "%s%s%s", cur ? cur : "", cur && *cur ? ":" : "", TLS_TUNABLE);
    setenv("GLIBC_TUNABLES", value, 1);
    execv("/proc/self/exe", argv);
    /* Without the re-exec only the dlopen of mimalloc/jemalloc may fail,
     * and they report it; go on. */
}

/* The child side of run_child: one repetition, reported on o->child_fd. */
static int child_main(const options *o)
{
    const bench_allocator *a = o->allocs ? bench_allocator_find(o->allocs) : NULL;
    const bench_workload *w = o->workloads ? bench_workload_find(o->workloads) : NULL;
    bench_metrics m = { 0 };
    char path[4096];
    int rc = -1;

    if (!a || !w || o->nthreads != 1) {
        bench_fail("child: needs exactly one allocator, workload and thread count");
    } else if (!a->load || a->load() == 0) {
        bench_params p = params_for(w, o);
        p.threads = o->threads[0];
        /* The parent's file name, so that the parent can remove it if we die. */
        snprintf(path, sizeof path, "%s/pheap-bench.%ld.%s.heap", o->heap_dir, (long)getppid(),
                 a->name);
        rc = run_once(w, a, &p, path, &m);
    }
    return isolate_report(o->child_fd, rc, &m);
}

int main(int argc, char **argv)
{
    options o = { .reps = 0, .heap_dir = "/dev/shm", .heap_size = 1ull << 30, .child_fd = -1 };
    int failed = 0, available = 0;
    FILE *json = NULL;

    ensure_tls_reserve(argv);
    if (parse_args(argc, argv, &o) != 0)
        return 2;
    if (o.nthreads == 0) {
        char defaults[] = "1,2,4", smoke[] = "1,2";
        parse_threads(o.smoke ? smoke : defaults, &o);
    }
    if (o.reps == 0)
        o.reps = o.smoke ? 1 : o.quick ? 3 : 5;
    if (o.child_fd >= 0)
        return child_main(&o);
    if (o.json && !(json = fopen(o.json, "a"))) {
        fprintf(stderr, "pheap_bench: cannot open %s: %s\n", o.json, strerror(errno));
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("# pheap_bench: heap-dir=%s heap-size=%llu reps=%u mode=%s\n", o.heap_dir,
           (unsigned long long)o.heap_size, o.reps, o.smoke ? "smoke" : o.quick ? "quick" : "full");
    for (unsigned i = 0; bench_allocators[i]; i++) {
        const bench_allocator *a = bench_allocators[i];
        if (!in_list(o.allocs, a->name))
            continue;
        if (a->load && a->load() != 0) {
            printf("# allocator %s skipped: %s\n", a->name, bench_error());
            continue;
        }
        available++;
        failed |= run_allocator(&o, a, json);
    }
    if (json)
        fclose(json);
    if (failed)
        return 1;
    return available ? 0 : EXIT_SKIPPED;
}
