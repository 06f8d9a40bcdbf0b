/*
 * durability_bench.c -- pheap_durabench: the durability levels on an
 * ordinary file system (pheap_durability): small allocations and frees per
 * second at the sync level (an fdatasync per fence, shared by threads that
 * fence at once) and at the checkpoint level with a checkpoint every
 * second; how long a checkpoint of 64 MiB of changed pages takes, and how
 * long it holds the calls.  Every row runs in this process, on heaps in
 * the same directory.  Two rows measure the device alone, without pheap,
 * with a file of the same directory: an O_DSYNC write of 4 KiB per
 * operation, one per thread at once ("a write each"), or one per group of
 * threads that arrive together, led as pheap's fences are ("grouped"): the
 * most any design that makes every operation durable on return can reach
 * there.
 *
 *   pheap_durabench DIR [--seconds S] [--threads LIST]
 *
 * Prints a Markdown table; never part of make test.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
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

/* `threads` threads running fn for `seconds`: the operations they did. */
static uint64_t run_threads(void *(*fn)(void *), pheap *h, unsigned threads, double seconds)
{
    run r[64];
    pthread_t t[64];
    for (unsigned i = 0; i < threads; i++) {
        r[i] = (run){h, seconds, 0};
        pthread_create(&t[i], NULL, fn, &r[i]);
    }
    uint64_t ops = 0;
    for (unsigned i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        ops += r[i].ops;
    }
    return ops;
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
    uint64_t ops = run_threads(worker, h, threads, seconds);
    pheap_stats(h, st);
    pheap_close(h);
    return (double)ops / seconds;
}

/* ---- the device alone ---- */

enum { DEV_BLOCK = 4096, DEV_BLOCKS = 4096 }; /* a 16 MiB file, written once */

static struct {
    int fd;
    int grouped;
    pthread_mutex_t lock;
    pthread_cond_t cv;
    uint64_t requested, done, writes, last_batch;
    uint64_t next;           /* the next block written */
    int running;
    char *block;
} dev = {.lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void dev_write(uint64_t slot)
{
    while (pwrite(dev.fd, dev.block, DEV_BLOCK, (off_t)((slot % DEV_BLOCKS) * DEV_BLOCK)) < 0 &&
           errno == EINTR)
        ;
}

/* One durable operation: a write of its own, or a ticket in the next group
 * write (the leader yields while threads keep arriving, as pheap's does). */
static void dev_op(void)
{
    pthread_mutex_lock(&dev.lock);
    if (!dev.grouped) {
        uint64_t slot = dev.next++;
        dev.writes++;
        pthread_mutex_unlock(&dev.lock);
        dev_write(slot);
        return;
    }
    uint64_t ticket = ++dev.requested;
    while (dev.done < ticket) {
        if (dev.running) {
            pthread_cond_wait(&dev.cv, &dev.lock);
            continue;
        }
        dev.running = 1;
        for (unsigned k = 0, idle = 0; k < 16 && dev.last_batch > 1; k++) {
            uint64_t before = dev.requested;
            pthread_mutex_unlock(&dev.lock);
            sched_yield();
            pthread_mutex_lock(&dev.lock);
            idle = dev.requested == before ? idle + 1 : 0;
            if (idle >= 2 && dev.requested - dev.done >= dev.last_batch)
                break;
        }
        uint64_t upto = dev.requested, slot = dev.next++;
        dev.last_batch = upto - dev.done;
        dev.writes++;
        pthread_mutex_unlock(&dev.lock);
        dev_write(slot);
        pthread_mutex_lock(&dev.lock);
        dev.running = 0;
        dev.done = upto;
        pthread_cond_broadcast(&dev.cv);
    }
    pthread_mutex_unlock(&dev.lock);
}

static void *dev_worker(void *arg)
{
    run *r = arg;
    double end = now() + r->seconds;
    uint64_t ops = 0;
    while (now() < end) {
        dev_op();
        ops++;
    }
    r->ops = ops;
    return NULL;
}

/* Durable operations per second, and operations per write (*per). */
static double device(const char *dir, int grouped, unsigned threads, double seconds, double *per)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/durabench.device", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    dev.block = calloc(1, DEV_BLOCK);
    for (unsigned i = 0; fd >= 0 && i < DEV_BLOCKS; i++) /* no metadata change when timed */
        if (pwrite(fd, dev.block, DEV_BLOCK, (off_t)i * DEV_BLOCK) != DEV_BLOCK)
            break;
    if (fd >= 0)
        fsync(fd), close(fd);
    dev.fd = open(path, O_RDWR | O_DSYNC);
    if (dev.fd < 0) {
        fprintf(stderr, "pheap_durabench: %s: cannot open\n", path);
        exit(1);
    }
    dev.grouped = grouped;
    dev.requested = dev.done = dev.writes = dev.last_batch = dev.next = 0;
    uint64_t ops = run_threads(dev_worker, NULL, threads, seconds);
    close(dev.fd);
    unlink(path);
    free(dev.block);
    *per = dev.writes ? (double)ops / (double)dev.writes : 0;
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
    printf("| level | threads | M ops/s | ops per fdatasync (device: per write) | checkpoints | last checkpoint: pages, held, total |\n");
    printf("|---|---|---|---|---|---|\n");
    for (char *s = threads_list, *tok; (tok = strtok(s, ",")) != NULL; s = NULL) {
        unsigned n = (unsigned)atoi(tok);
        if (n < 1 || n > 64)
            continue;
        struct pheap_stats st;
        double sync = throughput(dir, PHEAP_DURABILITY_SYNC, n, seconds, &st);
        printf("| sync | %u | %.4f | %.1f | | |\n", n, sync / 1e6,
               st.file_syncs ? sync * seconds / (double)st.file_syncs : 0.0);
        double per;
        double each = device(dir, 0, n, seconds, &per);
        printf("| device, a write each | %u | %.4f | %.1f | | |\n", n, each / 1e6, per);
        double grouped = device(dir, 1, n, seconds, &per);
        printf("| device, grouped writes | %u | %.4f | %.1f | | |\n", n, grouped / 1e6, per);
        double ck = throughput(dir, PHEAP_DURABILITY_CHECKPOINT, n, seconds, &st);
        printf("| checkpoint (1/s) | %u | %.3f | | %llu | %llu, %.2f ms, %.1f ms |\n", n, ck / 1e6,
               (unsigned long long)st.checkpoints, (unsigned long long)st.checkpoint_last_pages,
               (double)st.checkpoint_last_pause_ns / 1e6, (double)st.checkpoint_last_ns / 1e6);
        fflush(stdout);
    }
    big_checkpoint(dir);
    return 0;
}
