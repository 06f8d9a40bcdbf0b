/*
 * durability_bench.c -- pheap_durabench: the durability levels on an
 * ordinary file system (pheap_durability): small allocations and frees per
 * second at the sync level (an fdatasync per fence, shared by threads that
 * fence at once) and at the checkpoint level with a checkpoint every
 * second; how long a checkpoint of 64 MiB of changed pages takes, and how
 * long it holds the calls.  Every row runs in this process, on heaps in
 * the same directory.
 *
 *   pheap_durabench DIR [--seconds S] [--threads LIST]
 *
 * Prints a Markdown table; never part of make test.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pheap.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct run {
    pheap *h;
    double seconds;
    uint64_t ops;
} run;

/* threadtest's shape: 100 blocks of 64 bytes allocated, then freed. */
static void *worker(void *arg)
{
    run *r = arg;
    pheap_off b[100];
    double end = now() + r->seconds;
    uint64_t ops = 0;
    while (now() < end) {
        for (unsigned i = 0; i < 100; i++)
            b[i] = pheap_alloc(r->h, 64);
        for (unsigned i = 0; i < 100; i++)
            if (b[i])
                pheap_free(r->h, b[i]);
        ops += 200;
    }
    r->ops = ops;
    return NULL;
}

static pheap *open_heap(const char *dir, const char *name, unsigned level, unsigned ms)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    unlink(path);
    char j[4200];
    snprintf(j, sizeof(j), "%s.ckpt", path);
    unlink(j);
    pheap_options o = {.flags = PHEAP_CREATE, .size = 256u << 20, .durability = level,
                       .checkpoint_ms = ms};
    pheap *h = NULL;
    if (pheap_open(path, &o, &h) != 0) {
        fprintf(stderr, "pheap_durabench: %s: %s\n", path, pheap_errmsg());
        exit(1);
    }
    return h;
}

static double throughput(const char *dir, unsigned level, unsigned threads, double seconds,
                         struct pheap_stats *st)
{
    pheap *h = open_heap(dir, "durabench.heap", level, level == PHEAP_DURABILITY_CHECKPOINT ? 1000 : 0);
    run r[64];
    pthread_t t[64];
    for (unsigned i = 0; i < threads; i++) {
        r[i] = (run){h, seconds, 0};
        pthread_create(&t[i], NULL, worker, &r[i]);
    }
    uint64_t ops = 0;
    for (unsigned i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        ops += r[i].ops;
    }
    pheap_stats(h, st);
    pheap_close(h);
    return (double)ops / seconds;
}

/* 64 MiB of blocks written and persisted, then one checkpoint, timed. */
static void big_checkpoint(const char *dir)
{
    pheap *h = open_heap(dir, "durabench-64.heap", PHEAP_DURABILITY_CHECKPOINT, 0);
    (void)pheap_checkpoint(h);
    enum { BLOCK = 4096, N = (64u << 20) / BLOCK };
    for (unsigned i = 0; i < N; i++) {
        pheap_off off = pheap_alloc(h, BLOCK);
        if (!off)
            break;
        memset(pheap_direct(h, off), (int)(i | 1), BLOCK);
        pheap_persist(h, pheap_direct(h, off), BLOCK);
    }
    double t0 = now();
    int rc = pheap_checkpoint(h);
    double t1 = now();
    struct pheap_stats st;
    pheap_stats(h, &st);
    printf("| checkpoint of 64 MiB of changed pages | %s | %.0f ms | %.1f ms held | %llu pages |\n",
           rc ? pheap_errmsg() : "ok", (t1 - t0) * 1e3, (double)st.checkpoint_last_pause_ns / 1e6,
           (unsigned long long)st.checkpoint_last_pages);
    pheap_close(h);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: pheap_durabench DIR [--seconds S] [--threads LIST]\n");
        return 2;
    }
    const char *dir = argv[1];
    double seconds = 3;
    char threads_list[256] = "1,2,4,8";
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--seconds") == 0)
            seconds = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--threads") == 0)
            snprintf(threads_list, sizeof(threads_list), "%s", argv[i + 1]);
    }
    unsetenv("PHEAP_FLUSH");
    unsetenv("PHEAP_DURABILITY");
    printf("| level | threads | M ops/s | ops per fdatasync | checkpoints | last checkpoint: pages, held, total |\n");
    printf("|---|---|---|---|---|---|\n");
    for (char *s = threads_list, *tok; (tok = strtok(s, ",")) != NULL; s = NULL) {
        unsigned n = (unsigned)atoi(tok);
        if (n < 1 || n > 64)
            continue;
        struct pheap_stats st;
        double sync = throughput(dir, PHEAP_DURABILITY_SYNC, n, seconds, &st);
        printf("| sync | %u | %.4f | %.1f | | |\n", n, sync / 1e6,
               st.file_syncs ? sync * seconds / (double)st.file_syncs : 0.0);
        double ck = throughput(dir, PHEAP_DURABILITY_CHECKPOINT, n, seconds, &st);
        printf("| checkpoint (1/s) | %u | %.3f | | %llu | %llu, %.2f ms, %.1f ms |\n", n, ck / 1e6,
               (unsigned long long)st.checkpoints, (unsigned long long)st.checkpoint_last_pages,
               (double)st.checkpoint_last_pause_ns / 1e6, (double)st.checkpoint_last_ns / 1e6);
        fflush(stdout);
    }
    big_checkpoint(dir);
    return 0;
}
