/*
 * kv_recovery.c -- pheap_kvbench --recovery: what recovering interrupted
 * transactions costs at pheap_open.
 *
 * A child process creates a heap with one small record per thread, then
 * starts `ntx` threads (pheap runs one transaction per thread, each in its
 * own lane).  Each thread opens a transaction, snapshots its record's
 * counter with pheap_tx_add and increments it in place, allocates a block
 * with pheap_tx_alloc and links it with pheap_tx_write.  Then, in three
 * heap shapes:
 *   open   the threads wait at a barrier with their transactions open and
 *          the child dies by SIGKILL: recovery rolls back ntx transactions;
 *   idle   the threads commit first, then the child dies the same way:
 *          a crash with no transaction open;
 *   clean  the threads commit and the child closes the heap.
 * The parent times pheap_open of each and checks what it finds (the open
 * shape: pheap_stats.tx_rolled_back == ntx, every record as before).  The
 * open time of "open" minus that of "idle" is the recovery work.
 */
#include "kv.h"

#include <pheap.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROOT "kv-recovery"
#define LINK_SIZE 64            /* bytes of the block each transaction links */

enum shape { SHAPE_CLEAN, SHAPE_IDLE, SHAPE_OPEN, SHAPES };
static const char *const shape_metric[SHAPES] = { "clean_open_ns", "crash_open_ns", "tx_open_ns" };
static const char *const shape_faults[SHAPES] = { "clean_open_faults", "crash_open_faults",
                                                  "tx_open_faults" };

typedef struct record {         /* one per thread, 64 bytes */
    uint64_t counter;           /* its index; +1 by a committed transaction */
    uint64_t link;              /* 0; a block by a committed transaction */
    uint64_t pad[6];
} record;

typedef struct rec_thread {
    pheap *h;
    record *rec;
    uint64_t index;
    enum shape shape;
    pthread_barrier_t *ready;
    int failed;
} rec_thread;

/* ---- the child: the heap and its threads ------------------------------ */

static int one_tx(rec_thread *t)
{
    pheap *h = t->h;
    if (pheap_tx_begin(h) != 0 || pheap_tx_add(h, &t->rec->counter, sizeof t->rec->counter) != 0)
        return -1;
    t->rec->counter++;
    pheap_off blk = pheap_tx_alloc(h, LINK_SIZE);
    if (!blk)
        return -1;
    kv_fill(pheap_direct(h, blk), t->index, 1, LINK_SIZE);
    if (pheap_tx_write(h, &t->rec->link, &blk, sizeof blk) != 0)
        return -1;
    return t->shape == SHAPE_OPEN ? 0 : pheap_tx_commit(h);
}

static void *rec_thread_main(void *arg)
{
    rec_thread *t = arg;
    t->failed = one_tx(t) != 0;
    pthread_barrier_wait(t->ready);
    if (t->shape == SHAPE_OPEN) {
        for (;;)
            pause();            /* the transaction stays open until the kill */
    }
    return NULL;
}

/* The records, and a root block holding their offsets. */
static record **make_records(pheap *h, unsigned n)
{
    record **recs = calloc(n, sizeof *recs);
    pheap_off table = pheap_alloc(h, n * sizeof(pheap_off));
    if (!recs || !table)
        return NULL;
    pheap_off *offs = pheap_direct(h, table);
    for (unsigned i = 0; i < n; i++) {
        if (!(offs[i] = pheap_alloc(h, sizeof(record))))
            return NULL;
        recs[i] = pheap_direct(h, offs[i]);
        memset(recs[i], 0, sizeof(record));
        recs[i]->counter = i;
        pheap_persist(h, recs[i], sizeof(record));
    }
    pheap_persist(h, offs, n * sizeof(pheap_off));
    return pheap_root_set(h, ROOT, table) == 0 ? recs : NULL;
}

static int run_threads(pheap *h, record **recs, unsigned n, enum shape shape)
{
    rec_thread *ts = calloc(n, sizeof *ts);
    pthread_t *ids = calloc(n, sizeof *ids);
    pthread_barrier_t ready;
    pthread_attr_t attr;
    if (!ts || !ids)
        return -1;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 << 10);
    pthread_barrier_init(&ready, NULL, n + 1);
    for (unsigned i = 0; i < n; i++) {
        ts[i] = (rec_thread){ .h = h, .rec = recs[i], .index = i, .shape = shape, .ready = &ready };
        if (pthread_create(&ids[i], &attr, rec_thread_main, &ts[i]) != 0) {
            fprintf(stderr, "pheap_kvbench: cannot start thread %u of %u\n", i, n);
            _exit(3);           /* the barrier would never open */
        }
    }
    pthread_barrier_wait(&ready);
    for (unsigned i = 0; i < n; i++) {
        if (ts[i].failed) {
            bench_fail("thread %u: transaction failed: %s", i, pheap_errmsg());
            return -1;
        }
    }
    if (shape == SHAPE_CLEAN) {
        for (unsigned i = 0; i < n; i++)
            pthread_join(ids[i], NULL);
    }
    return 0;
}

static void child(const kv_params *p, enum shape shape, unsigned ntx, int fd)
{
    pheap_options o = { 0 };
    pheap *h = NULL;
    record **recs = NULL;
    char msg[256];

    o.size = p->heap_size;
    o.flags = PHEAP_CREATE | PHEAP_EXCL;
    o.flush = kv_pheap_flush();
    int rc = pheap_open(p->path, &o, &h);
    if (rc != 0)
        bench_fail("pheap_open(create): %s: %s", pheap_strerror(rc), pheap_errmsg());
    else if (!(recs = make_records(h, ntx)))
        bench_fail("making the records: %s", pheap_errmsg());
    else if (run_threads(h, recs, ntx, shape) == 0) {
        if (shape != SHAPE_CLEAN)
            raise(SIGKILL);
        if (pheap_close(h) == 0)
            _exit(0);
        bench_fail("pheap_close: %s", pheap_errmsg());
    }
    snprintf(msg, sizeof msg, "%s", bench_error());
    if (write(fd, msg, strlen(msg)) < 0)
        _exit(3);
    _exit(2);
}

/* Runs the child to leave a heap of this shape at p->path. */
static int make_heap(const kv_params *p, enum shape shape, unsigned ntx)
{
    int fds[2], status = 0;
    char msg[256] = "";

    unlink(p->path);
    if (pipe(fds) != 0) {
        bench_fail("pipe failed");
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        child(p, shape, ntx, fds[1]);
    }
    close(fds[1]);
    ssize_t got = pid > 0 ? read(fds[0], msg, sizeof msg - 1) : 0;
    msg[got > 0 ? got : 0] = 0;
    close(fds[0]);
    if (pid < 0 || waitpid(pid, &status, 0) < 0) {
        bench_fail("fork failed");
        return -1;
    }
    int expected = shape == SHAPE_CLEAN ? WIFEXITED(status) && WEXITSTATUS(status) == 0
                                        : WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    if (!expected) {
        bench_fail("heap-making child failed: %s", msg[0] ? msg : "no message");
        return -1;
    }
    return 0;
}

/* ---- the parent: timed opens and what they find ----------------------- */

/* Rolled back: every record as it was made.  Committed: incremented and
 * linked to a filled block. */
static int check_records(pheap *h, enum shape shape, unsigned ntx)
{
    const pheap_off *offs = pheap_direct(h, pheap_root_get(h, ROOT));
    if (!offs) {
        bench_fail("root %s missing after the open", ROOT);
        return -1;
    }
    for (unsigned i = 0; i < ntx; i++) {
        const record *r = pheap_direct(h, offs[i]);
        int ok = shape == SHAPE_OPEN
                     ? r && r->counter == i && r->link == 0
                     : r && r->counter == i + 1u && r->link &&
                           kv_value_ok(pheap_direct(h, r->link), i, LINK_SIZE);
        if (!ok) {
            bench_fail("record %u is wrong after the open (%s)", i,
                       shape == SHAPE_OPEN ? "not rolled back" : "commit lost");
            return -1;
        }
    }
    return 0;
}

static int check_open(pheap *h, enum shape shape, unsigned ntx)
{
    struct pheap_stats s;
    uint64_t want_back = shape == SHAPE_OPEN ? ntx : 0;
    uint64_t want_live = 1u + ntx + (shape == SHAPE_OPEN ? 0u : ntx);
    if (pheap_stats(h, &s) != 0)
        return -1;
    if (s.tx_rolled_back != want_back || s.tx_rolled_forward != 0) {
        bench_fail("open of the %s heap rolled back %llu and forward %llu transactions, "
                   "expected %llu and 0", shape_metric[shape],
                   (unsigned long long)s.tx_rolled_back, (unsigned long long)s.tx_rolled_forward,
                   (unsigned long long)want_back);
        return -1;
    }
    if (s.live_blocks != want_live) {
        bench_fail("%llu live blocks after the open, expected %llu",
                   (unsigned long long)s.live_blocks, (unsigned long long)want_live);
        return -1;
    }
    return check_records(h, shape, ntx);
}

static long minor_faults(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_minflt : 0;
}

/* The open's time in ns and the page faults it took. */
static int timed_open(const kv_params *p, enum shape shape, unsigned ntx, double *ns,
                      double *faults)
{
    pheap_options o = { 0 };
    pheap *h;

    if (make_heap(p, shape, ntx) != 0)
        return -1;
    o.flush = kv_pheap_flush();
    long f0 = minor_faults();
    uint64_t t0 = bench_now_ns();
    int rc = pheap_open(p->path, &o, &h);
    uint64_t t1 = bench_now_ns();
    long f1 = minor_faults();
    if (rc != 0) {
        bench_fail("pheap_open: %s: %s", pheap_strerror(rc), pheap_errmsg());
        unlink(p->path);
        return -1;
    }
    *ns = (double)(t1 - t0);
    *faults = (double)(f1 - f0);
    rc = check_open(h, shape, ntx);
    if (pheap_close(h) != 0 && rc == 0) {
        bench_fail("pheap_close: %s", pheap_errmsg());
        rc = -1;
    }
    unlink(p->path);
    return rc;
}

static void print_result(const kv_params *p, unsigned ntx, unsigned reps, double *v[SHAPES],
                         double *f[SHAPES])
{
    static const char *const label[SHAPES] = {
        "after a clean close", "after a kill, no transaction open", "after a kill, transactions open",
    };
    kv_spread s[SHAPES];
    for (int k = 0; k < SHAPES; k++)
        s[k] = kv_spread_of(v[k], reps);
    printf("== recovery: %u interrupted transactions (one per thread and lane), heap %llu MiB, "
           "flush %s, %u reps\n", ntx, (unsigned long long)(p->heap_size >> 20),
           pheap_flush_name(kv_pheap_flush()), reps);
    for (int k = 0; k < SHAPES; k++)
        printf("  pheap_open %-36s %9.1f us  [%.1f - %.1f]  %6.0f page faults\n", label[k],
               s[k].median / 1e3, s[k].min / 1e3, s[k].max / 1e3, kv_spread_of(f[k], reps).median);
    double work = s[SHAPE_OPEN].median - s[SHAPE_IDLE].median;
    printf("  recovery work (open with transactions - open without) %.1f us%s (goal: < 60 us"
           " for 512)\n", work / 1e3, ntx != 512 ? "" : work < 60e3 ? ": met" : ": missed");
}

static void json_result(FILE *f, const kv_params *p, unsigned ntx, unsigned reps, double *v[SHAPES],
                        double *faults[SHAPES])
{
    double work = kv_spread_of(v[SHAPE_OPEN], reps).median - kv_spread_of(v[SHAPE_IDLE], reps).median;
    fprintf(f, "{\"bench\":\"kv-recovery\",\"transactions\":%u,\"reps\":%u,\"flush\":", ntx, reps);
    kv_json_string(f, pheap_flush_name(kv_pheap_flush()));
    fprintf(f, ",\"params\":{\"heap_size\":%llu},\"metrics\":{",
            (unsigned long long)p->heap_size);
    for (int k = 0; k < SHAPES; k++)
        kv_json_metric(f, k == 0, shape_metric[k], v[k], reps);
    for (int k = 0; k < SHAPES; k++)
        kv_json_metric(f, 0, shape_faults[k], faults[k], reps);
    kv_json_metric(f, 0, "recovery_ns", &work, 1);
    fprintf(f, "}}\n");
    fflush(f);
}

int kv_recovery(const kv_params *p, unsigned ntx, unsigned reps, FILE *json)
{
    double *v[SHAPES], *f[SHAPES], warm, warm_faults;
    int rc = 0;
    for (int k = 0; k < SHAPES; k++) {
        v[k] = bench_xcalloc(reps, sizeof(double));
        f[k] = bench_xcalloc(reps, sizeof(double));
    }
    /* One untimed round first: the first open of a process pays for
     * faulting in the library's code. */
    rc = timed_open(p, SHAPE_OPEN, ntx, &warm, &warm_faults);
    for (unsigned r = 0; r < reps && rc == 0; r++) {
        for (int k = 0; k < SHAPES && rc == 0; k++)
            rc = timed_open(p, (enum shape)k, ntx, &v[k][r], &f[k][r]);
    }
    if (rc == 0) {
        print_result(p, ntx, reps, v, f);
        if (json)
            json_result(json, p, ntx, reps, v, f);
    } else {
        printf("== recovery: FAILED: %s\n", bench_error());
        if (json) {
            fprintf(json, "{\"bench\":\"kv-recovery\",\"transactions\":%u,\"reps\":0,\"error\":",
                    ntx);
            kv_json_string(json, bench_error());
            fprintf(json, ",\"metrics\":{}}\n");
        }
    }
    for (int k = 0; k < SHAPES; k++) {
        free(v[k]);
        free(f[k]);
    }
    return rc;
}
