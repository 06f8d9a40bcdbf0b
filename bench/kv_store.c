/*
 * kv_store.c -- one repetition of the key-value benchmark, the same for
 * every library: create the heap, load the keys into the hash table
 * (untimed), draw each thread's operations (Zipfian over the keys it owns),
 * run them in threads released together, then check the whole store.
 *
 * Keys are partitioned: key k belongs to thread k % threads, and a thread
 * reads and updates only its own keys.  Isolation is the application's job
 * in both libraries, and neither offers safe reclamation of a version block
 * that another thread may still be reading, so threads share no key.
 */
#include "kv.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OP_UPDATE 0x80000000u   /* an operation: key | OP_UPDATE for an update */
#define OP_KEY    0x7fffffffu

/* ---- version blocks --------------------------------------------------- */

void kv_fill(void *block, uint64_t key, uint64_t seq, size_t value_size)
{
    kv_value *v = block;
    v->key = key;
    v->seq = seq;
    memset(v->bytes, (int)((key + seq) & 0xff), value_size - sizeof *v);
}

int kv_value_ok(const void *block, uint64_t key, size_t value_size)
{
    const kv_value *v = block;
    unsigned char want = (unsigned char)((key + v->seq) & 0xff);
    return v->key == key && v->bytes[0] == want && v->bytes[value_size - sizeof *v - 1] == want;
}

/* ---- the hash table --------------------------------------------------- */

typedef struct kv_table {
    char *base;             /* the heap's base: a block at off is base + off */
    uint64_t *buckets;      /* offsets of the chains' first nodes */
    unsigned bits;          /* log2 of the bucket count */
} kv_table;

static uint64_t bucket_of(const kv_table *t, uint64_t key)
{
    return (key * 0x9e3779b97f4a7c15ull) >> (64 - t->bits);
}

static kv_node *node_at(const kv_table *t, uint64_t off)
{
    return off ? (kv_node *)(t->base + off) : NULL;
}

static kv_node *lookup(const kv_table *t, uint64_t key)
{
    for (kv_node *n = node_at(t, t->buckets[bucket_of(t, key)]); n; n = node_at(t, n->next)) {
        if (n->key == key)
            return n;
    }
    return NULL;
}

static int insert(const kv_backend *b, const kv_params *p, kv_table *t, uint64_t key)
{
    uint64_t voff = b->alloc(p->value_size);
    uint64_t noff = voff ? b->alloc(sizeof(kv_node)) : 0;
    if (!noff)
        return -1;
    void *value = t->base + voff;
    kv_fill(value, key, 0, p->value_size);
    b->persist(value, p->value_size);
    uint64_t *head = &t->buckets[bucket_of(t, key)];
    kv_node *n = node_at(t, noff);
    n->next = *head;
    n->key = key;
    n->version = voff;
    b->persist(n, sizeof *n);
    *head = noff;
    b->persist(head, sizeof *head);
    return 0;
}

/* One bucket per key or more (a power of two), then every key. */
static int load(const kv_backend *b, const kv_params *p, kv_table *t)
{
    t->bits = 1;
    while ((1ull << t->bits) < p->keys)
        t->bits++;
    size_t bytes = sizeof(uint64_t) << t->bits;
    uint64_t off = b->alloc(bytes);
    if (!off)
        return -1;
    t->buckets = (uint64_t *)(t->base + off);
    memset(t->buckets, 0, bytes);
    b->persist(t->buckets, bytes);
    for (uint64_t k = 0; k < p->keys; k++) {
        if (insert(b, p, t, k) != 0) {
            char why[200];
            snprintf(why, sizeof why, "%s", bench_error());
            bench_fail("load: key %llu of %llu: %s", (unsigned long long)k,
                       (unsigned long long)p->keys, why);
            return -1;
        }
    }
    return 0;
}

/* ---- Zipfian ranks (YCSB's generator, after Gray et al., SIGMOD 1994) --- */

typedef struct zipf {
    uint64_t n;
    double alpha, zetan, eta, two_cut;
} zipf;

static double zeta(uint64_t n, double theta)
{
    double sum = 0;
    for (uint64_t i = 1; i <= n; i++)
        sum += 1.0 / pow((double)i, theta);
    return sum;
}

static void zipf_init(zipf *z, uint64_t n, double theta)
{
    z->n = n;
    z->alpha = 1.0 / (1.0 - theta);
    z->zetan = zeta(n, theta);
    z->eta = n > 2 ? (1.0 - pow(2.0 / (double)n, 1.0 - theta)) / (1.0 - zeta(2, theta) / z->zetan)
                   : 1.0;
    z->two_cut = 1.0 + pow(0.5, theta);
}

/* Rank 0 is the most popular. */
static uint64_t zipf_next(const zipf *z, uint64_t *rng)
{
    double u = (double)(bench_rand(rng) >> 11) / 9007199254740992.0;
    double uz = u * z->zetan;
    if (uz < 1.0)
        return 0;
    if (uz < z->two_cut && z->n > 1)
        return 1;
    uint64_t r = (uint64_t)((double)z->n * pow(z->eta * u - z->eta + 1.0, z->alpha));
    return r < z->n ? r : z->n - 1;
}

/* ---- the timed phase -------------------------------------------------- */

typedef struct kv_worker {
    const kv_backend *b;
    const kv_params *p;
    const kv_table *t;
    uint32_t *seq;          /* updates done per key (shared; each key has one writer) */
    pthread_barrier_t *start;
    unsigned tid;
    uint32_t *ops;          /* this thread's operations, drawn before the run */
    uint64_t nops;
    uint64_t reads, updates;
    uint64_t start_ns, end_ns;
    int failed;
    char error[256];
} kv_worker;

/* Keys k with k % threads == tid, ranked in a random order so that the hot
 * ones are spread over the table; then nops draws of (key, read or update). */
static int draw_ops(kv_worker *w)
{
    const kv_params *p = w->p;
    uint64_t mine = (p->keys - w->tid + p->threads - 1) / p->threads;
    uint64_t rng = p->seed * 7919u + w->tid + 1;
    uint32_t *perm = malloc(mine * sizeof *perm);
    w->ops = malloc((w->nops ? w->nops : 1) * sizeof *w->ops);
    if (!perm || !w->ops) {
        free(perm);
        bench_fail("out of memory drawing the operations");
        return -1;
    }
    for (uint64_t i = 0; i < mine; i++)
        perm[i] = (uint32_t)i;
    bench_shuffle(perm, mine, &rng);
    zipf z;
    zipf_init(&z, mine, p->theta);
    for (uint64_t i = 0; i < w->nops; i++) {
        uint64_t key = (uint64_t)perm[zipf_next(&z, &rng)] * p->threads + w->tid;
        int update = bench_rand(&rng) % 100 >= p->read_pct;
        w->ops[i] = (uint32_t)key | (update ? OP_UPDATE : 0);
    }
    free(perm);
    return 0;
}

static void worker_fail(kv_worker *w, const char *what, uint64_t key)
{
    snprintf(w->error, sizeof w->error, "thread %u, key %llu: %s", w->tid,
             (unsigned long long)key, what);
    w->failed = 1;
}

/* A read copies the value out, as a store would hand it to its caller, and
 * checks it is the key's latest version. */
static void run_ops(kv_worker *w)
{
    const kv_table *t = w->t;
    size_t vsize = w->p->value_size;
    unsigned char buf[4096];

    for (uint64_t i = 0; i < w->nops; i++) {
        uint64_t key = w->ops[i] & OP_KEY;
        kv_node *n = lookup(t, key);
        if (!n) {
            worker_fail(w, "not in the table", key);
            return;
        }
        if (w->ops[i] & OP_UPDATE) {
            if (w->b->update(n, w->seq[key] + 1, vsize) != 0) {
                worker_fail(w, bench_error(), key);
                return;
            }
            w->seq[key]++;
            w->updates++;
        } else {
            memcpy(buf, t->base + n->version, vsize);
            if (!kv_value_ok(buf, key, vsize) || ((kv_value *)buf)->seq != w->seq[key]) {
                worker_fail(w, "read a wrong version", key);
                return;
            }
            w->reads++;
        }
    }
}

static void *worker_main(void *arg)
{
    kv_worker *w = arg;
    pthread_barrier_wait(w->start);
    w->start_ns = bench_now_ns();
    run_ops(w);
    w->end_ns = bench_now_ns();
    return NULL;
}

static int counters(const kv_backend *b, kv_counters *c)
{
    memset(c, 0, sizeof *c);
    return b->counters ? b->counters(c) : -1;
}

/* The library's own account of the run: one commit per update, no abort,
 * as many live blocks after as before; and its durability work per update. */
static int counter_metrics(const kv_counters *c0, const kv_counters *c1, uint64_t updates,
                           bench_metrics *out)
{
    uint64_t commits = c1->tx_commits - c0->tx_commits;
    if (commits != updates || c1->tx_aborts != c0->tx_aborts) {
        bench_fail("%llu updates, but the library counted %llu commits and %llu aborts",
                   (unsigned long long)updates, (unsigned long long)commits,
                   (unsigned long long)(c1->tx_aborts - c0->tx_aborts));
        return -1;
    }
    if (c1->live_blocks != c0->live_blocks) {
        bench_fail("live blocks went from %llu to %llu over the run",
                   (unsigned long long)c0->live_blocks, (unsigned long long)c1->live_blocks);
        return -1;
    }
    double u = updates ? (double)updates : 1.0;
    bench_metric(out, "fences_per_update", (double)(c1->fences - c0->fences) / u);
    bench_metric(out, "flushes_per_update", (double)(c1->flushes - c0->flushes) / u);
    bench_metric(out, "reflushes_per_update", (double)(c1->reflushes - c0->reflushes) / u);
    bench_metric(out, "tx_fences_per_commit",
                 (double)(c1->tx_fences - c0->tx_fences) / (commits ? (double)commits : 1.0));
    return 0;
}

static int start_workers(kv_worker *ws, pthread_t *ids, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        if (pthread_create(&ids[i], NULL, worker_main, &ws[i]) != 0) {
            /* The barrier waits for every thread: nothing to recover. */
            fprintf(stderr, "pheap_kvbench: cannot start thread %u of %u\n", i, n);
            exit(1);
        }
    }
    return 0;
}

/* Sums the workers, times from the first start to the last end. */
static int collect(kv_worker *ws, unsigned n, bench_metrics *out, uint64_t *updates)
{
    uint64_t t0 = UINT64_MAX, t1 = 0, reads = 0;
    *updates = 0;
    for (unsigned i = 0; i < n; i++) {
        if (ws[i].failed) {
            bench_fail("%s", ws[i].error);
            return -1;
        }
        t0 = ws[i].start_ns < t0 ? ws[i].start_ns : t0;
        t1 = ws[i].end_ns > t1 ? ws[i].end_ns : t1;
        reads += ws[i].reads;
        *updates += ws[i].updates;
    }
    double secs = (double)(t1 - t0) / 1e9;
    bench_metric(out, "ops_per_s", (double)(reads + *updates) / (secs > 0 ? secs : 1e-9));
    bench_metric(out, "seconds", secs);
    bench_metric(out, "reads", (double)reads);
    bench_metric(out, "updates", (double)*updates);
    return 0;
}

static int run_phase(const kv_backend *b, const kv_params *p, const kv_table *t, uint32_t *seq,
                     bench_metrics *out)
{
    unsigned n = p->threads;
    kv_worker *ws = bench_xcalloc(n, sizeof *ws);
    pthread_t *ids = bench_xcalloc(n, sizeof *ids);
    pthread_barrier_t start;
    kv_counters c0, c1;
    uint64_t updates = 0;
    int rc = ws && ids ? 0 : -1;

    pthread_barrier_init(&start, NULL, n + 1);
    for (unsigned i = 0; i < n && rc == 0; i++) {
        ws[i] = (kv_worker){ .b = b, .p = p, .t = t, .seq = seq, .start = &start, .tid = i,
                             .nops = p->ops / n + (i < p->ops % n) };
        rc = draw_ops(&ws[i]);
    }
    if (rc == 0) {
        int counted = counters(b, &c0) == 0;
        start_workers(ws, ids, n);
        pthread_barrier_wait(&start);
        for (unsigned i = 0; i < n; i++)
            pthread_join(ids[i], NULL);
        rc = collect(ws, n, out, &updates);
        if (rc == 0 && counted && counters(b, &c1) == 0)
            rc = counter_metrics(&c0, &c1, updates, out);
    }
    pthread_barrier_destroy(&start);
    for (unsigned i = 0; ws && i < n; i++)
        free(ws[i].ops);
    free(ws);
    free(ids);
    return rc;
}

/* Every key once, at its latest version. */
static int check_store(const kv_params *p, const kv_table *t, const uint32_t *seq)
{
    for (uint64_t k = 0; k < p->keys; k++) {
        kv_node *n = lookup(t, k);
        const kv_value *v = n ? (const kv_value *)(t->base + n->version) : NULL;
        if (!v || !kv_value_ok(v, k, p->value_size) || v->seq != seq[k]) {
            bench_fail("check after the run: key %llu %s", (unsigned long long)k,
                       n ? "has a wrong version" : "is missing");
            return -1;
        }
    }
    return 0;
}

int kv_run(const kv_backend *b, const kv_params *p, bench_metrics *out)
{
    kv_table t = { 0 };
    uint32_t *seq = bench_xcalloc(p->keys, sizeof *seq);
    if (!seq)
        return -1;
    unlink(p->path);
    if (b->create(p, &t.base) != 0) {
        free(seq);
        return -1;
    }
    uint64_t t0 = bench_now_ns();
    int rc = load(b, p, &t);
    bench_metric(out, "load_seconds", (double)(bench_now_ns() - t0) / 1e9);
    if (rc == 0)
        rc = run_phase(b, p, &t, seq, out);
    if (rc == 0)
        rc = check_store(p, &t, seq);
    if (b->close() != 0 && rc == 0)
        rc = -1;
    unlink(p->path);
    free(seq);
    return rc;
}
