/*
 * kv_tx.c -- pheap_kvbench: a transactional key-value workload against
 * pheap and libpmemobj.  200k keys in a persistent hash table, YCSB-A-like
 * operations (50 % reads, 50 % updates, Zipfian keys), each update one
 * transaction that allocates the new version block, links it and frees the
 * old one.  One row per variant and thread count (a child process per
 * repetition, a fresh heap each), then the ratios the performance goals
 * are stated in.  --recovery measures pheap_open after 512 transactions
 * were interrupted instead (kv_recovery.c).
 *
 * This file: options, the repetitions, the table, the JSON lines.
 */
#include "isolate.h"
#include "kv.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_REPS 64
#define MAX_THREAD_COUNTS 16
#define MAX_ROWS 64
#define EXIT_SKIPPED 77

const kv_backend *const kv_backends[] = {
    &kv_pheap_redo, &kv_pheap_undo, &kv_pheap_redo_none, &kv_pheap_redo_noprot, &kv_pheap_redo_ckpt,
    &kv_pmemobj, NULL,
};

const kv_backend *kv_backend_find(const char *name)
{
    for (unsigned i = 0; kv_backends[i]; i++) {
        if (strcmp(kv_backends[i]->name, name) == 0)
            return kv_backends[i];
    }
    return NULL;
}

typedef struct options {
    char *variants;             /* comma list, NULL = all */
    unsigned threads[MAX_THREAD_COUNTS];
    unsigned nthreads;
    unsigned reps;
    const char *heap_dir;
    kv_params p;                /* threads, path: per run */
    int quick, smoke, recovery, in_process;
    unsigned transactions;      /* --recovery: interrupted transactions */
    const char *json;
    int child_fd;               /* >= 0: a child running one repetition */
} options;

/* One table row: a variant at one thread count, over the repetitions. */
typedef struct row {
    const kv_backend *b;
    unsigned threads;
    unsigned reps;              /* repetitions that succeeded */
    bench_metrics m[MAX_REPS];
    char flush[24];
    char error[256];
} row;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: pheap_kvbench [options]\n"
        "  -v, --variant LIST     variants, comma-separated (default: all; see --list)\n"
        "  -t, --threads LIST     thread counts (default: 1,2)\n"
        "  -r, --reps N           repetitions, a fresh heap each (default: 3; --recovery: 10)\n"
        "  -d, --heap-dir DIR     where the heaps live (default: /dev/shm)\n"
        "  -s, --heap-size SIZE   heap size, suffix K/M/G allowed (default: 256M)\n"
        "      --keys N           keys loaded before the run (default: 200000)\n"
        "      --ops N            reads + updates of all threads (default: 1000000;\n"
        "                         --quick: 300000)\n"
        "      --value-size N     bytes of a version block, 24..4096 (default: 128)\n"
        "      --read-pct N       percent of reads (default: 50)\n"
        "      --theta X          Zipfian skew, 0 <= X < 1 (default: 0.99)\n"
        "      --seed N           random seed (default: 1)\n"
        "  -q, --quick            fewer operations (run.sh --quick)\n"
        "      --smoke            tiny run of every variant; exit 1 on any failure\n"
        "      --recovery         time pheap_open after interrupted transactions instead\n"
        "      --transactions N   --recovery: transactions left open (default: 512)\n"
        "  -j, --json FILE        append one JSON object per row to FILE\n"
        "      --in-process       repetitions in this process (default: a child each)\n"
        "  -l, --list             list the variants\n"
        "exit: 0 ok, 1 a run failed, 2 usage, 77 no selected variant available\n");
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

static int check_variants(const char *list)
{
    if (!list || strcmp(list, "all") == 0)
        return 0;
    char *copy = strdup(list);
    int rc = 0;
    for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
        if (!kv_backend_find(tok)) {
            fprintf(stderr, "pheap_kvbench: unknown variant '%s' (see --list)\n", tok);
            rc = -1;
        }
    }
    free(copy);
    return rc;
}

static void list_variants(void)
{
    for (unsigned i = 0; kv_backends[i]; i++)
        printf("  %-16s %s\n", kv_backends[i]->name, kv_backends[i]->what);
}

enum { O_KEYS = 256, O_OPS, O_VSIZE, O_READ, O_THETA, O_SEED, O_SMOKE, O_RECOVERY, O_TX,
       O_INPROC, O_CHILD };

static int parse_one(int c, const char *arg, options *o)
{
    uint64_t v;
    switch (c) {
    case 'v': o->variants = (char *)arg; return 0;
    case 't': return parse_threads((char *)arg, o);
    case 'r': if (bench_parse_u64(arg, &v, 0) || !v || v > MAX_REPS) return -1; o->reps = (unsigned)v; return 0;
    case 'd': o->heap_dir = arg; return 0;
    case 's': return bench_parse_u64(arg, &o->p.heap_size, 1) || o->p.heap_size < (8u << 20) ? -1 : 0;
    case 'q': o->quick = 1; return 0;
    case 'j': o->json = arg; return 0;
    case O_KEYS: return bench_parse_u64(arg, &o->p.keys, 0) || !o->p.keys || o->p.keys > 0x7fffffff ? -1 : 0;
    case O_OPS: return bench_parse_u64(arg, &o->p.ops, 0) || !o->p.ops ? -1 : 0;
    case O_VSIZE:
        if (bench_parse_u64(arg, &v, 0) || v < KV_VALUE_MIN || v > 4096)
            return -1;
        o->p.value_size = (size_t)v;
        return 0;
    case O_READ: if (bench_parse_u64(arg, &v, 0) || v > 100) return -1; o->p.read_pct = (unsigned)v; return 0;
    case O_THETA: {
        char *end;
        o->p.theta = strtod(arg, &end);
        return *end || end == arg || o->p.theta < 0 || o->p.theta >= 1 ? -1 : 0;
    }
    case O_SEED: return bench_parse_u64(arg, &o->p.seed, 0);
    case O_SMOKE: o->smoke = 1; return 0;
    case O_RECOVERY: o->recovery = 1; return 0;
    case O_TX:
        if (bench_parse_u64(arg, &v, 0) || !v || v > 1024)
            return -1;
        o->transactions = (unsigned)v;
        return 0;
    case O_INPROC: o->in_process = 1; return 0;
    case O_CHILD: if (bench_parse_u64(arg, &v, 0) || v > 1024) return -1; o->child_fd = (int)v; return 0;
    default: return -1;
    }
}

static int parse_args(int argc, char **argv, options *o)
{
    static const struct option longs[] = {
        { "variant", required_argument, NULL, 'v' },
        { "threads", required_argument, NULL, 't' },
        { "reps", required_argument, NULL, 'r' },
        { "heap-dir", required_argument, NULL, 'd' },
        { "heap-size", required_argument, NULL, 's' },
        { "keys", required_argument, NULL, O_KEYS },
        { "ops", required_argument, NULL, O_OPS },
        { "value-size", required_argument, NULL, O_VSIZE },
        { "read-pct", required_argument, NULL, O_READ },
        { "theta", required_argument, NULL, O_THETA },
        { "seed", required_argument, NULL, O_SEED },
        { "quick", no_argument, NULL, 'q' },
        { "smoke", no_argument, NULL, O_SMOKE },
        { "recovery", no_argument, NULL, O_RECOVERY },
        { "transactions", required_argument, NULL, O_TX },
        { "json", required_argument, NULL, 'j' },
        { "in-process", no_argument, NULL, O_INPROC },
        { "child-fd", required_argument, NULL, O_CHILD },
        { "list", no_argument, NULL, 'l' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int c;
    while ((c = getopt_long(argc, argv, "v:t:r:d:s:qj:lh", longs, NULL)) != -1) {
        if (c == 'l') {
            list_variants();
            exit(0);
        }
        if (c == 'h') {
            usage(stdout);
            exit(0);
        }
        if (c == '?') {
            usage(stderr);
            return -1;
        }
        if (parse_one(c, optarg, o) != 0) {
            fprintf(stderr, "pheap_kvbench: bad value '%s' for -%c\n", optarg, c < 256 ? c : '-');
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "pheap_kvbench: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    return check_variants(o->variants);
}

/* What the options left unset, by mode. */
static void defaults(options *o)
{
    if (o->nthreads == 0) {
        char list[] = "1,2";
        parse_threads(list, o);
    }
    if (!o->p.keys)
        o->p.keys = o->smoke ? 2000 : 200000;
    if (!o->p.ops)
        o->p.ops = o->smoke ? 20000 : o->quick ? 300000 : 1000000;
    if (!o->p.heap_size)
        o->p.heap_size = o->smoke ? 64u << 20 : 256u << 20;
    if (!o->reps)
        o->reps = o->recovery ? (o->smoke ? 2 : 10) : o->smoke ? 1 : 3;
    if (!o->transactions)
        o->transactions = o->smoke ? 16 : 512;
}

/* ---- results ---------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

kv_spread kv_spread_of(const double *v, unsigned n)
{
    kv_spread s = { 0, 0, 0 };
    double sorted[MAX_REPS];
    if (n == 0 || n > MAX_REPS)
        return s;
    memcpy(sorted, v, n * sizeof *v);
    qsort(sorted, n, sizeof *sorted, cmp_double);
    s.min = sorted[0];
    s.max = sorted[n - 1];
    s.median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    return s;
}

void kv_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

void kv_json_metric(FILE *f, int first, const char *name, const double *v, unsigned n)
{
    kv_spread s = kv_spread_of(v, n);
    fprintf(f, "%s\"%s\":{\"median\":%.6g,\"min\":%.6g,\"max\":%.6g,\"values\":[", first ? "" : ",",
            name, s.median, s.min, s.max);
    for (unsigned i = 0; i < n; i++)
        fprintf(f, "%s%.6g", i ? "," : "", v[i]);
    fprintf(f, "]}");
}

/* The values of one metric over a row's repetitions; 0 if it has none. */
static unsigned values_of(const row *r, const char *name, double *v)
{
    unsigned n = 0;
    for (unsigned i = 0; i < r->reps; i++) {
        if (bench_metric_get(&r->m[i], name, &v[n]) == 0)
            n++;
    }
    return n;
}

static int median_of(const row *r, const char *name, double *out)
{
    double v[MAX_REPS];
    unsigned n = values_of(r, name, v);
    if (n)
        *out = kv_spread_of(v, n).median;
    return n ? 0 : -1;
}

static void print_header(const options *o)
{
    printf("# pheap_kvbench: keys=%llu ops=%llu value=%zu B reads=%u%% theta=%.2f heap=%llu MiB "
           "dir=%s reps=%u mode=%s\n",
           (unsigned long long)o->p.keys, (unsigned long long)o->p.ops, o->p.value_size,
           o->p.read_pct, o->p.theta, (unsigned long long)(o->p.heap_size >> 20), o->heap_dir,
           o->reps, o->smoke ? "smoke" : o->quick ? "quick" : "full");
    printf("%-16s %3s %8s %-19s %9s %9s %9s  %s\n", "variant", "thr", "Mops/s", "  [min - max]",
           "fence/upd", "flush/upd", "txfe/cmt", "flush");
}

static void print_row(const row *r)
{
    double v[MAX_REPS], fe, fl, tf;
    printf("%-16s %3u ", r->b->name, r->threads);
    if (r->error[0]) {
        printf("FAILED: %s\n", r->error);
        return;
    }
    kv_spread s = kv_spread_of(v, values_of(r, "ops_per_s", v));
    char spread[48];
    snprintf(spread, sizeof spread, "[%.3f - %.3f]", s.min / 1e6, s.max / 1e6);
    printf("%8.3f %-19s ", s.median / 1e6, spread);
    if (median_of(r, "fences_per_update", &fe) == 0 && median_of(r, "flushes_per_update", &fl) == 0 &&
        median_of(r, "tx_fences_per_commit", &tf) == 0)
        printf("%9.2f %9.2f %9.2f", fe, fl, tf);
    else
        printf("%9s %9s %9s", "-", "-", "-");
    printf("  %s\n", r->flush);
}

static void json_row(FILE *f, const options *o, const row *r)
{
    static const char *const names[] = {
        "ops_per_s", "seconds", "reads", "updates", "load_seconds", "fences_per_update",
        "flushes_per_update", "reflushes_per_update", "tx_fences_per_commit", NULL,
    };
    double v[MAX_REPS];
    int first = 1;
    fprintf(f, "{\"bench\":\"kv-tx\",\"variant\":");
    kv_json_string(f, r->b->name);
    fprintf(f, ",\"threads\":%u,\"reps\":%u,\"flush\":", r->threads, r->reps);
    kv_json_string(f, r->flush);
    fprintf(f, ",\"params\":{\"keys\":%llu,\"ops\":%llu,\"value_size\":%zu,\"read_pct\":%u,"
               "\"theta\":%g,\"seed\":%llu,\"heap_size\":%llu,\"mode\":\"%s\"}",
            (unsigned long long)o->p.keys, (unsigned long long)o->p.ops, o->p.value_size,
            o->p.read_pct, o->p.theta, (unsigned long long)o->p.seed,
            (unsigned long long)o->p.heap_size, o->smoke ? "smoke" : o->quick ? "quick" : "full");
    if (r->error[0]) {
        fprintf(f, ",\"error\":");
        kv_json_string(f, r->error);
    }
    fprintf(f, ",\"metrics\":{");
    for (unsigned i = 0; names[i]; i++) {
        unsigned n = values_of(r, names[i], v);
        if (n) {
            kv_json_metric(f, first, names[i], v, n);
            first = 0;
        }
    }
    fprintf(f, "}}\n");
    fflush(f);
}

/* ---- the ratios the goals are stated in -------------------------------- */

static const row *find_row(const row *rows, unsigned n, const char *variant, unsigned threads)
{
    for (unsigned i = 0; i < n; i++) {
        if (!rows[i].error[0] && rows[i].threads == threads && strcmp(rows[i].b->name, variant) == 0)
            return &rows[i];
    }
    return NULL;
}

static void print_ratio(const options *o, const row *rows, unsigned n, const char *a,
                        const char *b, double target)
{
    char label[64];
    snprintf(label, sizeof label, "%s / %s", a, b);
    printf("%-30s", label);
    for (unsigned i = 0; i < o->nthreads; i++) {
        const row *ra = find_row(rows, n, a, o->threads[i]), *rb = find_row(rows, n, b, o->threads[i]);
        double va, vb;
        if (ra && rb && median_of(ra, "ops_per_s", &va) == 0 && median_of(rb, "ops_per_s", &vb) == 0)
            printf(" %6.2f%s", va / vb, target > 0 ? (va / vb >= target ? " met " : " MISS") : "     ");
        else
            printf(" %6s     ", "-");
    }
    if (target > 0)
        printf("   target >= %.2f", target);
    printf("\n");
}

static void print_ratios(const options *o, const row *rows, unsigned n)
{
    printf("\n%-30s", "ratios of median Mops/s");
    for (unsigned i = 0; i < o->nthreads; i++)
        printf(" t=%-9u", o->threads[i]);
    printf("\n");
    print_ratio(o, rows, n, "pheap-redo", "pmemobj", 1.5);
    print_ratio(o, rows, n, "pheap-redo", "pheap-redo-none", 0.75);
    print_ratio(o, rows, n, "pheap-undo", "pmemobj", 0);
    print_ratio(o, rows, n, "pheap-undo", "pheap-redo", 0);
}

/* ---- repetitions -------------------------------------------------------- */

static void heap_path(char *buf, size_t len, const options *o, long pid)
{
    snprintf(buf, len, "%s/pheap-kvbench.%ld.heap", o->heap_dir, pid);
}

/* One repetition in a child process: this binary, told the row's point. */
static int run_child(const options *o, const kv_backend *b, unsigned threads, bench_metrics *m)
{
    char num[8][32];
    char *argv[32];
    unsigned n = 0, k = 0;
#define ARG(s) (argv[n++] = (char *)(s))
#define NUM(flag, fmt, v) (ARG(flag), snprintf(num[k], sizeof num[k], fmt, v), ARG(num[k++]))
    ARG("pheap_kvbench");
    ARG("--variant");
    ARG(b->name);
    ARG("--heap-dir");
    ARG(o->heap_dir);
    NUM("--threads", "%u", threads);
    NUM("--keys", "%llu", (unsigned long long)o->p.keys);
    NUM("--ops", "%llu", (unsigned long long)o->p.ops);
    NUM("--value-size", "%zu", o->p.value_size);
    NUM("--read-pct", "%u", o->p.read_pct);
    NUM("--theta", "%.17g", o->p.theta);
    NUM("--seed", "%llu", (unsigned long long)o->p.seed);
    NUM("--heap-size", "%llu", (unsigned long long)o->p.heap_size);
    argv[n] = NULL;
#undef ARG
#undef NUM
    return isolate_run(argv, m);
}

static int run_in_process(const options *o, const kv_backend *b, unsigned threads, bench_metrics *m)
{
    char path[4096];
    kv_params p = o->p;
    heap_path(path, sizeof path, o, (long)getpid());
    p.threads = threads;
    p.path = path;
    memset(m, 0, sizeof *m);
    return kv_run(b, &p, m);
}

/* The flush kind a row ran with, for the table. */
static void row_flush(row *r)
{
    const char *name = "?";
    if (r->b == &kv_pmemobj) {
        const char *force = getenv("PMEM_IS_PMEM_FORCE");
        name = force && *force == '1' ? "PMEM_IS_PMEM_FORCE=1" : "pmem auto";
    } else if (r->b == &kv_pheap_redo_none) {
        name = "none";
    } else if (r->b == &kv_pheap_redo_ckpt) {
        name = "checkpoint";
    } else {
        name = getenv("PHEAP_FLUSH") && *getenv("PHEAP_FLUSH") ? getenv("PHEAP_FLUSH")
                                                               : bench_cpu_flush();
    }
    snprintf(r->flush, sizeof r->flush, "%s", name);
}

/* One more repetition of a row that has not failed. */
static void run_rep(const options *o, row *r, const char *path)
{
    if (r->error[0])
        return;
    bench_metrics *m = &r->m[r->reps];
    int rc = o->in_process ? run_in_process(o, r->b, r->threads, m)
                           : run_child(o, r->b, r->threads, m);
    unlink(path);
    if (rc != 0)
        snprintf(r->error, sizeof r->error, "%s", bench_error());
    else
        r->reps++;
}

/* The rows of one thread count, repetitions taken in turns (every variant's
 * first, then every variant's second, ...) so that anything else the
 * machine does in the meantime weighs on every variant alike. */
static int run_rows(const options *o, row *rows, unsigned n, const char *path, FILE *json)
{
    int failed = 0;
    for (unsigned rep = 0; rep < o->reps; rep++) {
        for (unsigned i = 0; i < n; i++)
            run_rep(o, &rows[i], path);
    }
    for (unsigned i = 0; i < n; i++) {
        failed |= rows[i].error[0] != 0;
        print_row(&rows[i]);
        if (json)
            json_row(json, o, &rows[i]);
    }
    return failed;
}

/* The child side of run_child. */
static int child_main(const options *o)
{
    const kv_backend *b = o->variants ? kv_backend_find(o->variants) : NULL;
    bench_metrics m = { 0 };
    char path[4096];
    int rc = -1;
    if (!b || o->nthreads != 1) {
        bench_fail("child: needs exactly one variant and thread count");
    } else if (b->load() == 0) {
        kv_params p = o->p;
        /* The parent's file name, so that the parent can remove it if we die. */
        heap_path(path, sizeof path, o, (long)getppid());
        p.path = path;
        p.threads = o->threads[0];
        rc = kv_run(b, &p, &m);
    }
    return isolate_report(o->child_fd, rc, &m);
}

static int run_table(const options *o, FILE *json)
{
    static row rows[MAX_ROWS];
    unsigned nrows = 0, available = 0;
    const kv_backend *usable[8];
    int failed = 0;
    char path[4096];

    for (unsigned i = 0; kv_backends[i]; i++) {
        const kv_backend *b = kv_backends[i];
        if (!in_list(o->variants, b->name))
            continue;
        if (b->load() != 0) {
            printf("# variant %s skipped: %s\n", b->name, bench_error());
            continue;
        }
        usable[available++] = b;
    }
    if (!available)
        return EXIT_SKIPPED;
    print_header(o);
    heap_path(path, sizeof path, o, (long)getpid());
    for (unsigned t = 0; t < o->nthreads && nrows + available <= MAX_ROWS; t++) {
        row *first = &rows[nrows];
        for (unsigned i = 0; i < available; i++) {
            row *r = &rows[nrows++];
            memset(r, 0, sizeof *r);
            r->b = usable[i];
            r->threads = o->threads[t];
            row_flush(r);
        }
        failed |= run_rows(o, first, available, path, json);
    }
    print_ratios(o, rows, nrows);
    return failed;
}

static int run_recovery(const options *o, FILE *json)
{
    char path[4096];
    kv_params p = o->p;
    heap_path(path, sizeof path, o, (long)getpid());
    p.path = path;
    int rc = kv_recovery(&p, o->transactions, o->reps, json);
    unlink(path);
    return rc != 0;
}

int main(int argc, char **argv)
{
    options o = { .heap_dir = "/dev/shm", .child_fd = -1 };
    FILE *json = NULL;

    o.p.value_size = 128;
    o.p.read_pct = 50;
    o.p.theta = 0.99;
    o.p.seed = 1;
    if (parse_args(argc, argv, &o) != 0)
        return 2;
    defaults(&o);
    for (unsigned i = 0; i < o.nthreads; i++) {
        if (o.p.keys >= o.threads[i])
            continue;
        fprintf(stderr, "pheap_kvbench: fewer keys than threads\n");
        return 2;
    }
    if (o.child_fd >= 0)
        return child_main(&o);
    if (o.json && !(json = fopen(o.json, "a"))) {
        fprintf(stderr, "pheap_kvbench: cannot open %s: %s\n", o.json, strerror(errno));
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    int rc = o.recovery ? run_recovery(&o, json) : run_table(&o, json);
    if (json)
        fclose(json);
    return rc;
}
