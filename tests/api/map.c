/*
 * map.c -- pheap_walk_chunks: runs that tile the file in order and agree
 * with pheap_stats and pheap_stats_class (slabs per class, their live
 * blocks, large and free bytes), a freed large block punched at close and
 * a small one kept, names segments as metadata, the same map through
 * read-only, snapshot and read-write handles, GC mode (also left by a
 * crash, before and after pheap_recover), a heap held by another process, a walk stopped by its function, one that allocates as
 * it goes, and the refused calls.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "format/layout.h"
#include "harness.h"

#define MAX_RUNS 4096

typedef struct walk {
    pheap_chunk_run runs[MAX_RUNS];
    unsigned n;
    unsigned stop_after;      /* nonzero: return 7 at this run */
    pheap *alloc_in;          /* nonzero: allocate a block at each run */
} walk;

static int collect(void *arg, const pheap_chunk_run *r)
{
    walk *w = arg;
    if (w->n < MAX_RUNS)
        w->runs[w->n] = *r;
    w->n++;
    if (w->alloc_in && !pheap_alloc(w->alloc_in, 64))
        return -1;
    return w->stop_after && w->n == w->stop_after ? 7 : 0;
}

static walk *walk_heap(pheap *h)
{
    walk *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    int rc = pheap_walk_chunks(h, collect, w);
    if (rc != 0 || w->n > MAX_RUNS) {
        ph_test_fail(__FILE__, __LINE__, "walk: %d (%s), %u runs", rc, pheap_errmsg(), w->n);
        free(w);
        return NULL;
    }
    return w;
}

/* The kind of the run holding file offset `off`, or 0. */
static unsigned kind_at(const walk *w, uint64_t off)
{
    for (unsigned i = 0; i < w->n; i++)
        if (off >= w->runs[i].off && off < w->runs[i].off + w->runs[i].bytes)
            return w->runs[i].kind;
    return 0;
}

static int same_runs(const walk *a, const walk *b)
{
    if (a->n != b->n)
        return 0;
    for (unsigned i = 0; i < a->n; i++) {
        const pheap_chunk_run *x = &a->runs[i], *y = &b->runs[i];
        if (x->off != y->off || x->bytes != y->bytes || x->kind != y->kind || x->cls != y->cls ||
            x->blocks_used != y->blocks_used || x->blocks_total != y->blocks_total ||
            (x->what && strcmp(x->what, y->what)))
            return 0;
    }
    return 1;
}

/* The shape's map, open (read-write) and after a close and reopen. */
static void check_shape(unsigned consistency)
{
    const char *path = ph_test_path("map-shape.heap");
    ph_map_shape shape;
    pheap *h = ph_test_map_shape(path, consistency, &shape);
    REQUIRE(h);
    walk *w = walk_heap(h);
    REQUIRE(w);
    if (consistency == PHEAP_CONSISTENCY_LOG) /* GC: cached blocks count as used until close */
        ph_test_map_consistent(h, w->runs, w->n);
    CHECK_EQ(kind_at(w, shape.large[1]), PHEAP_CHUNK_LARGE);
    free(w);
    REQUIRE_OK(pheap_close(h));

    h = ph_test_open(path, NULL);
    REQUIRE(h);
    REQUIRE(w = walk_heap(h));
    ph_test_map_consistent(h, w->runs, w->n);
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK(st.data_size > (2u << 20)); /* grown */
    unsigned classes = 0, full = 0, partial = 0, meta_blocks = 0;
    for (unsigned i = 0; i < w->n; i++) {
        const pheap_chunk_run *r = &w->runs[i];
        classes += r->kind == PHEAP_CHUNK_SLAB && (i == 0 || w->runs[i - 1].cls != r->cls);
        full += r->kind == PHEAP_CHUNK_SLAB && r->blocks_used == r->blocks_total;
        partial += r->kind == PHEAP_CHUNK_SLAB && r->blocks_used && r->blocks_used < r->blocks_total;
        meta_blocks += r->kind == PHEAP_CHUNK_META && r->off >= st.data_offset;
    }
    CHECK(classes >= 4);
    CHECK(full >= 2 && partial >= 2);
    CHECK(meta_blocks >= 1);
    for (uint64_t p = 0; p < shape.punched_bytes; p += PH_PAGE_SIZE)
        CHECK_EQ(kind_at(w, shape.punched + p), PHEAP_CHUNK_PUNCHED);
    CHECK_EQ(kind_at(w, shape.kept_free), PHEAP_CHUNK_FREE);
    for (unsigned i = 0; i < 3; i++)
        CHECK_EQ(kind_at(w, shape.large[i]), PHEAP_CHUNK_LARGE);
    CHECK_EQ(w->runs[0].kind, PHEAP_CHUNK_META);
    CHECK(!strcmp(w->runs[0].what, "header"));

    /* Read-only and snapshot handles see the same map. */
    for (unsigned f = 0; f < 2; f++) {
        pheap_options o = {.flags = f ? PHEAP_SNAPSHOT : PHEAP_RDONLY};
        REQUIRE_OK(pheap_close(h));
        h = ph_test_open(path, &o);
        REQUIRE(h);
        walk *v = walk_heap(h);
        REQUIRE(v);
        CHECK(same_runs(w, v));
        ph_test_map_consistent(h, v->runs, v->n);
        free(v);
    }
    pheap_check_report rep;
    CHECK_EQ(pheap_check(h, &rep), 0);
    free(w);
    REQUIRE_OK(pheap_close(h));
}

TEST(shape_log)
{
    check_shape(PHEAP_CONSISTENCY_LOG);
}

TEST(shape_gc)
{
    check_shape(PHEAP_CONSISTENCY_GC);
}

/* A GC heap left by a crash: mapped before pheap_recover (slabs with the
 * bitmaps of the last clean close), through a snapshot and read-write,
 * and after it. */
TEST(gc_before_recovery)
{
    const char *path = ph_test_path("map-gc-crash.heap");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        ph_map_shape shape;
        _exit(ph_test_map_shape(path, PHEAP_CONSISTENCY_GC, &shape) ? 0 : 1); /* no close */
    }
    int status = 0;
    REQUIRE(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status));
    REQUIRE_EQ(WEXITSTATUS(status), 0);
    for (unsigned f = 0; f < 2; f++) {
        pheap_options o = {.flags = f ? 0 : PHEAP_SNAPSHOT};
        pheap *h = ph_test_open(path, &o);
        REQUIRE(h);
        struct pheap_stats st;
        REQUIRE_OK(pheap_stats(h, &st));
        CHECK_EQ(st.needs_recovery, 1);
        ph_test_map_check(h);
        if (f) {
            REQUIRE_OK(pheap_recover(h));
            ph_test_map_check(h);
            pheap_check_report rep;
            CHECK_EQ(pheap_check(h, &rep), 0);
        }
        REQUIRE_OK(pheap_close(h));
    }
}

/* A heap another process holds read-write: mapped through a snapshot. */
TEST(held_elsewhere)
{
    const char *path = ph_test_path("map-held.heap");
    REQUIRE(ph_test_map_shape_file(path, PHEAP_CONSISTENCY_LOG) == 0);
    int pid = ph_test_hold(path, 0);
    REQUIRE(pid > 0);
    pheap_options o = {.flags = PHEAP_SNAPSHOT};
    pheap *h = ph_test_open(path, &o);
    if (h) {
        struct pheap_stats st;
        CHECK_EQ(pheap_stats(h, &st), 0);
        CHECK(st.held_elsewhere);
        ph_test_map_check(h);
        pheap_close(h);
    }
    CHECK_EQ(ph_test_release(pid), 0);
}

/* The function's nonzero return stops the walk and is returned; a
 * function that allocates as it goes meets no lock and no overlap. */
TEST(stop_and_allocate)
{
    const char *path = ph_test_path("map-stop.heap");
    pheap *h = ph_test_create(path, 1u << 20);
    REQUIRE(h);
    walk *w = calloc(1, sizeof(*w));
    REQUIRE(w);
    w->stop_after = 3;
    CHECK_EQ(pheap_walk_chunks(h, collect, w), 7);
    CHECK_EQ(w->n, 3);
    memset(w, 0, sizeof(*w));
    w->alloc_in = h;
    CHECK_EQ(pheap_walk_chunks(h, collect, w), 0);
    uint64_t at = 0;
    for (unsigned i = 0; i < w->n && i < MAX_RUNS; i++) {
        CHECK(w->runs[i].off >= at || w->runs[i].kind == PHEAP_CHUNK_SLAB);
        at = w->runs[i].off + w->runs[i].bytes;
    }
    free(w);
    ph_test_map_check(h);
    pheap_check_report rep;
    CHECK_EQ(pheap_check(h, &rep), 0);
    REQUIRE_OK(pheap_close(h));
}

static int never(void *arg, const pheap_chunk_run *r)
{
    (void)r;
    ++*(int *)arg;
    return 0;
}

/* Bad arguments: refused with nothing called and nothing changed. */
TEST(refused)
{
    const char *path = ph_test_path("map-refused.heap");
    pheap *h = ph_test_create(path, 1u << 20);
    REQUIRE(h);
    REQUIRE(pheap_alloc(h, 100));
    struct pheap_stats before;
    REQUIRE_OK(pheap_stats(h, &before));
    int calls = 0;
    CHECK_EQ(pheap_walk_chunks(NULL, never, &calls), PHEAP_EINVAL);
    CHECK(strstr(pheap_errmsg(), "heap"));
    CHECK_EQ(pheap_walk_chunks(h, NULL, &calls), PHEAP_EINVAL);
    CHECK(strstr(pheap_errmsg(), "function"));
    CHECK_EQ(calls, 0);
    ph_test_unchanged(h, &before, "refused walks", __FILE__, __LINE__);
    /* A fork child's copy of the handle is refused too. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
        _exit(pheap_walk_chunks(h, never, &calls) == PHEAP_EFORKED && calls == 0 ? 0 : 1);
    int status = 0;
    REQUIRE(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    REQUIRE_OK(pheap_close(h));
}
