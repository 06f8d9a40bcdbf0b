/*
 * share_bench.c -- pheap_sharebench: a heap shared between processes
 * (PHEAP_SHARED) against threads of one process.
 *
 * Workload (threadtest): each worker allocates `batch` blocks of `size`
 * bytes, frees them, and again, `rounds` times.  Rows, on one heap
 * location, in one invocation:
 *   threads    N threads of one process, exclusive open
 *   processes  N processes, each opening the heap with PHEAP_SHARED
 *   shared-1   one process opened with PHEAP_SHARED, one thread: what the
 *              sharing costs a process that is alone
 *   takeover   a process that holds slabs, cached blocks and large blocks
 *              killed with SIGKILL; the time a survivor's takeover took
 * with flushes and fences per operation (summed over the workers), and the
 * processes row's ratio to the threads row.  Output: a table, and with
 * --json one JSON object per row.
 *
 * usage: pheap_sharebench [--heap-dir DIR] [--workers N] [--rounds N]
 *                         [--batch N] [--size BYTES] [--flush KIND] [--json]
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pheap.h"

typedef struct params {
    const char *dir;
    unsigned workers, rounds, batch;
    size_t size;
    unsigned flush;
    int json;
} params;

typedef struct result {
    double seconds;
    uint64_t ops, flushes, fences;
} result;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
    fprintf(stderr, "pheap_sharebench: %s: %s\n", what, pheap_errmsg());
    exit(1);
}

/* One worker's loop on h; its flushes and fences, when it is the only
 * thread of its handle, from pheap_stats. */
static void threadtest(pheap *h, const params *p, pheap_off *blocks)
{
    for (unsigned r = 0; r < p->rounds; r++) {
        for (unsigned i = 0; i < p->batch; i++)
            if (!(blocks[i] = pheap_alloc(h, p->size)))
                die("pheap_alloc");
        for (unsigned i = 0; i < p->batch; i++)
            if (pheap_free(h, blocks[i]))
                die("pheap_free");
    }
}

typedef struct worker_arg {
    pheap *h;
    const params *p;
    pthread_barrier_t *start;
} worker_arg;

static void *thread_main(void *arg)
{
    worker_arg *w = arg;
    pheap_off *blocks = malloc(w->p->batch * sizeof(*blocks));
    if (!blocks)
        die("malloc");
    pthread_barrier_wait(w->start);
    threadtest(w->h, w->p, blocks);
    free(blocks);
    return NULL;
}

static void add_counters(pheap *h, result *r)
{
    struct pheap_stats st;
    if (pheap_stats(h, &st))
        die("pheap_stats");
    r->flushes += st.flushes;
    r->fences += st.fences;
}

static void create_heap(const char *path, const params *p)
{
    pheap_options o = {.flags = PHEAP_CREATE, .size = 512u << 20, .flush = p->flush};
    pheap *h;
    unlink(path);
    if (pheap_open(path, &o, &h) || pheap_close(h))
        die(path);
}

static result run_threads(const char *path, const params *p, unsigned n, unsigned flags)
{
    pheap_options o = {.flags = flags, .flush = p->flush};
    pheap *h;
    create_heap(path, p);
    if (pheap_open(path, &o, &h))
        die("open");
    pthread_t t[64];
    worker_arg w = {h, p, NULL};
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, n + 1);
    w.start = &start;
    for (unsigned i = 0; i < n; i++)
        pthread_create(&t[i], NULL, thread_main, &w);
    result r = {0, (uint64_t)n * p->rounds * p->batch * 2, 0, 0};
    pthread_barrier_wait(&start);
    double t0 = now_s();
    for (unsigned i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    r.seconds = now_s() - t0;
    add_counters(h, &r);
    if (pheap_close(h))
        die("close");
    return r;
}

/* What the processes of a row tell the parent. */
typedef struct board {
    unsigned ready, go;
    uint64_t flushes, fences;
} board;

static result run_processes(const char *path, const params *p)
{
    create_heap(path, p);
    board *b = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED)
        die("mmap");
    memset(b, 0, sizeof(*b));
    int pids[64];
    for (unsigned i = 0; i < p->workers; i++) {
        fflush(NULL);
        if ((pids[i] = fork()) == 0) {
            pheap_options o = {.flags = PHEAP_SHARED, .flush = p->flush};
            pheap *h;
            if (pheap_open(path, &o, &h))
                die("shared open");
            pheap_off *blocks = malloc(p->batch * sizeof(*blocks));
            __atomic_fetch_add(&b->ready, 1, __ATOMIC_SEQ_CST);
            while (!__atomic_load_n(&b->go, __ATOMIC_ACQUIRE))
                ;
            threadtest(h, p, blocks);
            result r = {0};
            add_counters(h, &r);
            __atomic_fetch_add(&b->flushes, r.flushes, __ATOMIC_SEQ_CST);
            __atomic_fetch_add(&b->fences, r.fences, __ATOMIC_SEQ_CST);
            _exit(pheap_close(h) ? 1 : 0);
        }
    }
    while (__atomic_load_n(&b->ready, __ATOMIC_ACQUIRE) < p->workers)
        usleep(100);
    double t0 = now_s();
    __atomic_store_n(&b->go, 1, __ATOMIC_RELEASE);
    int bad = 0;
    for (unsigned i = 0; i < p->workers; i++) {
        int st;
        waitpid(pids[i], &st, 0);
        bad |= !WIFEXITED(st) || WEXITSTATUS(st);
    }
    result r = {now_s() - t0, (uint64_t)p->workers * p->rounds * p->batch * 2, b->flushes,
                b->fences};
    munmap(b, sizeof(*b));
    if (bad) {
        fprintf(stderr, "pheap_sharebench: a worker process failed\n");
        exit(1);
    }
    return r;
}

/* A process allocates a mix, is killed; the survivor's next write calls
 * take it over.  The takeover's own time, from pheap_stats. */
static uint64_t run_takeover(const char *path, const params *p)
{
    create_heap(path, p);
    pheap_options o = {.flags = PHEAP_SHARED, .flush = p->flush};
    pheap *h;
    if (pheap_open(path, &o, &h))
        die("shared open");
    int pipefd[2];
    if (pipe(pipefd))
        die("pipe");
    fflush(NULL);
    int pid = fork();
    if (pid == 0) {
        pheap *c;
        if (pheap_open(path, &o, &c))
            die("shared open");
        for (unsigned i = 0; i < 20000; i++)
            if (!pheap_alloc(c, i % 64 == 0 ? 50000 : 16 + i % 1000))
                die("pheap_alloc");
        char x = 'y';
        if (write(pipefd[1], &x, 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    char x;
    if (read(pipefd[0], &x, 1) != 1)
        die("child");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    struct pheap_stats st = {0};
    for (unsigned i = 0; i < 1000000 && !st.takeovers; i++) {
        pheap_off off = pheap_alloc(h, 64);
        if (!off || pheap_free(h, off))
            die("alloc");
        if (i % 256 == 0 && pheap_stats(h, &st))
            die("pheap_stats");
    }
    if (!st.takeovers) {
        fprintf(stderr, "pheap_sharebench: the dead process was not taken over\n");
        exit(1);
    }
    pheap_close(h);
    return st.takeover_max_ns;
}

static void row(const params *p, const char *name, unsigned workers, const result *r,
                const result *base, const char *base_name)
{
    double mops = (double)r->ops / r->seconds / 1e6;
    double ratio = base ? mops / ((double)base->ops / base->seconds / 1e6) : 0;
    double fl = (double)r->flushes / (double)r->ops, fe = (double)r->fences / (double)r->ops;
    if (p->json) {
        printf("{\"bench\": \"share\", \"row\": \"%s\", \"workers\": %u, \"mops\": %.3f, "
               "\"flushes_per_op\": %.3f, \"fences_per_op\": %.3f",
               name, workers, mops, fl, fe);
        if (base)
            printf(", \"ratio_to\": \"%s\", \"ratio\": %.3f", base_name, ratio);
        printf("}\n");
        return;
    }
    printf("%-10s %7u %10.2f %10.3f %10.3f", name, workers, mops, fl, fe);
    if (base)
        printf("   %.3fx of %s", ratio, base_name);
    printf("\n");
}

int main(int argc, char **argv)
{
    params p = {"/dev/shm", 4, 2000, 100, 64, PHEAP_FLUSH_CLWB, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json"))
            p.json = 1;
        else if (!strcmp(a, "--heap-dir") && v)
            p.dir = argv[++i];
        else if (!strcmp(a, "--workers") && v)
            p.workers = (unsigned)atoi(argv[++i]);
        else if (!strcmp(a, "--rounds") && v)
            p.rounds = (unsigned)atoi(argv[++i]);
        else if (!strcmp(a, "--batch") && v)
            p.batch = (unsigned)atoi(argv[++i]);
        else if (!strcmp(a, "--size") && v)
            p.size = (size_t)atol(argv[++i]);
        else if (!strcmp(a, "--flush") && v) {
            const char *k = argv[++i];
            p.flush = !strcmp(k, "none") ? PHEAP_FLUSH_NONE
                      : !strcmp(k, "msync") ? PHEAP_FLUSH_MSYNC
                      : !strcmp(k, "clflushopt") ? PHEAP_FLUSH_CLFLUSHOPT
                                                 : PHEAP_FLUSH_CLWB;
        } else {
            fprintf(stderr, "usage: pheap_sharebench [--heap-dir DIR] [--workers N] [--rounds N] "
                            "[--batch N] [--size BYTES] [--flush clwb|clflushopt|msync|none] "
                            "[--json]\n");
            return 2;
        }
    }
    if (p.workers < 1 || p.workers > 64 || !p.batch || !p.rounds || !p.size) {
        fprintf(stderr, "pheap_sharebench: bad parameters\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/sharebench-%d.heap", p.dir, (int)getpid());
    if (!p.json)
        printf("threadtest: %u rounds of %u blocks of %zu B per worker, flush %s, %s\n", p.rounds,
               p.batch, p.size, pheap_flush_name(p.flush), p.dir);
    if (!p.json)
        printf("%-10s %7s %10s %10s %10s\n", "row", "workers", "Mops/s", "flush/op", "fence/op");
    result one = run_threads(path, &p, 1, 0);
    row(&p, "exclusive", 1, &one, NULL, NULL);
    result shared1 = run_threads(path, &p, 1, PHEAP_SHARED);
    row(&p, "shared-1", 1, &shared1, &one, "exclusive");
    result threads = run_threads(path, &p, p.workers, 0);
    row(&p, "threads", p.workers, &threads, NULL, NULL);
    result procs = run_processes(path, &p);
    row(&p, "processes", p.workers, &procs, &threads, "threads");
    uint64_t ns = run_takeover(path, &p);
    if (p.json)
        printf("{\"bench\": \"share\", \"row\": \"takeover\", \"takeover_ns\": %llu}\n",
               (unsigned long long)ns);
    else
        printf("takeover of a killed process (20,000 blocks, 313 large): %.3f ms\n", (double)ns / 1e6);
    unlink(path);
    return 0;
}
