/*
 * hashmap.c -- a persistent hash map (u64 keys and values, chained buckets)
 * kept in a heap, and a kill -9 in the middle of inserting into it: a writer
 * process inserts keys and reports each committed one on a pipe; this
 * process kills it, reopens the heap and finds every reported key.
 *
 * usage: hashmap [HEAP_PATH] [KILL_AFTER_MS]   (default /tmp/pheap-demo-data.heap, 300)
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <pheap.h>

#define NBUCKETS_LOG2 16

typedef struct entry {
    pheap_off next;   /* next entry of the bucket's chain */
    uint64_t key;
    uint64_t value;
} entry;

/* The map, rooted as "hashmap".  An insert is one failure-atomic step:
 * pheap_alloc_to_init allocates the entry, runs init_entry on it (key,
 * value, next = the bucket's head) and only then stores its offset into the
 * bucket, the new head.  After a crash the bucket holds its old head, or the
 * new entry, whole: nothing to repair, nothing leaked.  (One writer: the
 * bucket's head must not change between init_entry and the store.) */
typedef struct map {
    uint64_t nbuckets;
    pheap_off buckets[];
} map;

static int fail(const char *what)
{
    fprintf(stderr, "hashmap: %s: %s\n", what, pheap_errmsg());
    return 1;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Key number i and its value: spread keys, a value checkable from the key. */
static uint64_t key_of(uint64_t i) { return i * 0x9e3779b97f4a7c15ull + 1; }
static uint64_t value_of(uint64_t key) { return ~key ^ (key >> 17); }

static pheap_off *bucket(map *m, uint64_t key)
{
    return &m->buckets[(key * 0xff51afd7ed558ccdull) >> (64 - NBUCKETS_LOG2)];
}

/* Fills a new entry before it is linked (pheap persists it). */
static int init_entry(pheap *h, void *block, size_t usable, void *arg)
{
    (void)h, (void)usable;
    *(entry *)block = *(const entry *)arg;
    return 0;
}

static int map_insert(pheap *h, map *m, uint64_t key, uint64_t value)
{
    pheap_off *b = bucket(m, key);
    entry fresh = {*b, key, value};
    return pheap_alloc_to_init(h, sizeof(entry), b, 0, init_entry, &fresh) ? -1 : 0;
}

static const entry *map_get(pheap *h, map *m, uint64_t key)
{
    for (pheap_off off = *bucket(m, key); off;) {
        const entry *e = pheap_direct(h, off);
        if (e->key == key)
            return e;
        off = e->next;
    }
    return NULL;
}

static uint64_t map_count(pheap *h, map *m)
{
    uint64_t n = 0;
    for (uint64_t b = 0; b < m->nbuckets; b++)
        for (pheap_off off = m->buckets[b]; off; off = ((entry *)pheap_direct(h, off))->next)
            n++;
    return n;
}

static map *map_open(pheap *h, int create)
{
    map *m = pheap_direct(h, pheap_root_get(h, "hashmap"));
    if (m || !create)
        return m;
    uint64_t n = 1ull << NBUCKETS_LOG2, bytes = sizeof(map) + n * sizeof(pheap_off);
    pheap_off off = pheap_alloc(h, bytes); /* set-up, before any writer runs */
    if (!off)
        return NULL;
    m = pheap_direct(h, off);
    memset(m, 0, bytes);
    m->nbuckets = n;
    pheap_persist(h, m, bytes);
    return pheap_root_set(h, "hashmap", off) ? NULL : m;
}

/* The writer: inserts keys first, first + 1, ... and writes each key
 * number to `fd` once its insert has committed.  Runs until killed. */
static void writer(const char *path, int fd, uint64_t first)
{
    pheap *h;
    map *m;
    if (pheap_open(path, NULL, &h) || !(m = map_open(h, 0)))
        _exit(fail("writer: open"));
    for (uint64_t i = first;; i++) {
        uint64_t k = key_of(i);
        if (map_insert(h, m, k, value_of(k)))
            _exit(fail("writer: insert"));
        if (write(fd, &i, sizeof(i)) != sizeof(i))
            _exit(1);
    }
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "/tmp/pheap-demo-data.heap";
    double kill_after = argc > 2 ? atof(argv[2]) : 300;

    pheap_options o = {.size = 16u << 20, .max_size = 256u << 20, .flags = PHEAP_CREATE};
    pheap *h;
    map *m;
    if (pheap_open(path, &o, &h) || !(m = map_open(h, 1)))
        return fail("open");
    uint64_t first = map_count(h, m); /* key numbers 0 .. first-1 are in */
    pheap_close(h);
    printf("hashmap in %s holds %llu keys; starting a writer process\n", path,
           (unsigned long long)first);
    fflush(stdout);

    int fds[2];
    if (pipe(fds))
        return perror("pipe"), 1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        writer(path, fds[1], first);
    }
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    uint64_t last = first, reported = 0, got;
    double t0 = now_ms();
    int killed = 0;
    for (;;) { /* read reports; kill the writer when the time is up */
        double left = t0 + kill_after - now_ms();
        if (left <= 0 && !killed) {
            kill(pid, SIGKILL);
            killed = 1;
        }
        struct pollfd p = {fds[0], POLLIN, 0};
        poll(&p, 1, killed ? -1 : (int)left + 1);
        ssize_t n = read(fds[0], &got, sizeof(got));
        if (n == sizeof(got)) {
            last = got + 1;
            reported++;
        } else if (n == 0) {
            break;
        }
    }
    int status;
    waitpid(pid, &status, 0);
    if (!WIFSIGNALED(status))
        return fprintf(stderr, "hashmap: the writer failed before the kill\n"), 1;
    printf("killed the writer (SIGKILL) after %.0f ms: it had reported %llu committed inserts "
           "(key numbers %llu..%llu)\n", kill_after, (unsigned long long)reported,
           (unsigned long long)first, (unsigned long long)last - 1);

    double t1 = now_ms();
    if (pheap_open(path, NULL, &h))
        return fail("reopen");
    double t2 = now_ms();
    struct pheap_stats st;
    pheap_stats(h, &st);
    m = map_open(h, 0);
    printf("reopened: heap %s; pheap recovery and open %.2f ms; the map needs no repair of its "
           "own (each insert is one step)\n", st.was_unclean ? "was not closed cleanly" : "was clean",
           t2 - t1);

    uint64_t found = 0, wrong = 0;
    for (uint64_t i = 0; i < last; i++) {
        const entry *e = map_get(h, m, key_of(i));
        found += e != NULL;
        wrong += e && e->value != value_of(e->key);
    }
    uint64_t total = map_count(h, m);
    printf("verified: %llu of %llu committed keys found, %llu with a wrong value; the map holds "
           "%llu keys%s\n", (unsigned long long)found, (unsigned long long)last,
           (unsigned long long)wrong, (unsigned long long)total,
           total == found + 1 ? " (one more: the insert in flight had committed, unreported)" : "");
    pheap_check_report r;
    int rc = pheap_check(h, &r);
    printf("pheap_check: %s; %llu live blocks, %llu bytes, %u roots\n",
           rc ? r.first_error : "consistent", (unsigned long long)r.live_blocks,
           (unsigned long long)r.live_bytes, r.roots);
    pheap_close(h);
    return rc || found != last || wrong || total > last + 1 ? 1 : 0;
}
