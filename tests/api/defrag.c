/*
 * defrag.c -- pheap_defrag: blocks move out of sparse slabs, which go back
 * to free space; every slot (in the program's memory, in the heap, inside
 * blocks that move themselves) names the moved block afterwards, contents
 * survive, blocks bound by roots and names and slabs with blocks the
 * slots do not name stay; a fragbench in small ends every phase with the
 * heap at most 1.25 times its live bytes; every misuse is refused with its
 * own code and nothing changed.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define SMALL 100u /* a 112-byte class: 585 blocks a slab */

static pheap *fresh_heap(const char *name, uint64_t size)
{
    const char *path = ph_test_path(name);
    unlink(path);
    pheap_options o = {.size = size, .max_size = 256u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL,
                       .flush = PHEAP_FLUSH_NONE};
    pheap *h = NULL;
    if (pheap_open(path, &o, &h))
        ph_test_fail(__FILE__, __LINE__, "create: %s", pheap_errmsg());
    (void)ph_test_pin_cpu(0); /* one arena: the slabs are the ones counted */
    return h;
}

static struct pheap_stats stats(pheap *h)
{
    struct pheap_stats st;
    pheap_stats(h, &st);
    return st;
}

static void expect_sound(pheap *h, uint64_t live, int line)
{
    pheap_check_report rep;
    if (pheap_check(h, &rep) != 0)
        ph_test_fail(__FILE__, line, "pheap_check: %s", rep.first_error);
    else if (rep.live_blocks != live)
        ph_test_fail(__FILE__, line, "%llu live blocks, want %llu",
                     (unsigned long long)rep.live_blocks, (unsigned long long)live);
}

/* n blocks of `size` in v[], each filled with the pattern of its index;
 * then all but every `keep`-th freed (v[] keeps those, in order). */
static size_t make_sparse(pheap *h, pheap_off *v, size_t n, size_t size, unsigned keep)
{
    for (size_t i = 0; i < n; i++) {
        if (!(v[i] = pheap_alloc(h, size))) {
            ph_test_fail(__FILE__, __LINE__, "pheap_alloc: %s", pheap_errmsg());
            return 0;
        }
        ph_test_fill(pheap_direct(h, v[i]), size, i);
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % keep == 0)
            v[k++] = v[i];
        else if (pheap_free(h, v[i]))
            ph_test_fail(__FILE__, __LINE__, "pheap_free: %s", pheap_errmsg());
    }
    return k;
}

/* Distinct 64 KiB chunks the blocks lie in. */
static size_t chunks_of(const struct pheap_stats *st, const pheap_off *v, size_t n)
{
    size_t k = 0;
    uint64_t *c = calloc(n ? n : 1, sizeof(*c));
    for (size_t i = 0; c && i < n; i++) {
        uint64_t ch = (v[i] - st->data_offset) >> 16;
        size_t j = 0;
        while (j < k && c[j] != ch)
            j++;
        if (j == k)
            c[k++] = ch;
    }
    free(c);
    return k;
}

static pheap_off **slots_of(pheap_off *v, size_t n)
{
    pheap_off **s = calloc(n ? n : 1, sizeof(*s));
    for (size_t i = 0; s && i < n; i++)
        s[i] = &v[i];
    return s;
}

TEST(sparse_slabs_are_emptied)
{
    pheap *h = fresh_heap("defrag-sparse.heap", 8u << 20);
    REQUIRE(h);
    enum { N = 585 * 8 };
    pheap_off *v = calloc(N, sizeof(*v));
    REQUIRE(v);
    size_t n = make_sparse(h, v, N, SMALL, 10); /* every 10th kept: 8 slabs at 10 % */
    /* the blocks sat at indices 0, 10, 20 ...: their patterns */
    pheap_off *before = malloc(n * sizeof(*before));
    memcpy(before, v, n * sizeof(*v));
    struct pheap_stats st0 = stats(h);
    CHECK_EQ(chunks_of(&st0, v, n), 8);
    pheap_off **s = slots_of(v, n);
    pheap_defrag_result r;
    REQUIRE_OK(pheap_defrag(h, s, n, &r));
    struct pheap_stats st = stats(h);
    fprintf(stderr, "  %zu blocks: %zu moved, %zu slabs freed; slabs %llu -> %llu\n", r.total,
            r.relocated, r.slabs_freed, (unsigned long long)st0.slabs,
            (unsigned long long)st.slabs);
    CHECK_EQ(r.total, n);
    CHECK(r.relocated > 0);
    CHECK_EQ(r.bytes_moved, r.relocated * 112u);
    CHECK_EQ(chunks_of(&st, v, n), 1);         /* 468 blocks fit one slab */
    CHECK(r.slabs_freed >= 7);                 /* all 8 emptied when all moved */
    CHECK(st.slabs <= st0.slabs - r.slabs_freed);
    CHECK_EQ(st.live_blocks, n);
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ(pheap_usable_size(h, v[i]), 112);
        CHECK(ph_test_intact(pheap_direct(h, v[i]), SMALL, i * 10));
    }
    size_t moved = 0;
    for (size_t i = 0; i < n; i++) {
        moved += v[i] != before[i];
        for (size_t k = 0; k < i; k++) /* no two words name one block */
            if (v[k] == v[i])
                ph_test_fail(__FILE__, __LINE__, "blocks %zu and %zu both at %llu", k, i,
                             (unsigned long long)v[i]);
    }
    CHECK_EQ(moved, r.relocated);
    expect_sound(h, n, __LINE__);
    /* A second call finds nothing worth moving. */
    REQUIRE_OK(pheap_defrag(h, s, n, &r));
    CHECK_EQ(r.relocated, 0);
    /* Reopened: the same. */
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(pheap_open(ph_test_path("defrag-sparse.heap"), NULL, &h));
    for (size_t i = 0; i < n; i++)
        CHECK(ph_test_intact(pheap_direct(h, v[i]), SMALL, i * 10));
    expect_sound(h, n, __LINE__);
    REQUIRE_OK(pheap_close(h));
    free(s);
    free(before);
    free(v);
    unlink(ph_test_path("defrag-sparse.heap"));
}

/* A list in the heap: node i holds its successor's offset and the pattern
 * of i; the root names the head.  The slots are the `next` words -- inside
 * the very blocks that move -- and a copy of every offset in the program's
 * memory (two slots for each node). */
typedef struct node {
    pheap_off next;
    uint64_t id;
    uint8_t pad[80];
} node;

TEST(slots_in_the_heap_and_inside_moving_blocks)
{
    pheap *h = fresh_heap("defrag-list.heap", 8u << 20);
    REQUIRE(h);
    enum { N = 585 * 4 };
    pheap_off *all = calloc(N, sizeof(*all));
    REQUIRE(all);
    for (size_t i = 0; i < N; i++)
        REQUIRE(all[i] = pheap_alloc(h, sizeof(node)));
    /* keep every 8th, linked in order; the rest freed */
    size_t n = 0;
    pheap_off *keep = calloc(N, sizeof(*keep));
    for (size_t i = 0; i < N; i++) {
        if (i % 8 == 0)
            keep[n++] = all[i];
        else
            REQUIRE_OK(pheap_free(h, all[i]));
    }
    for (size_t i = 0; i < n; i++) {
        node *x = pheap_direct(h, keep[i]);
        x->next = i + 1 < n ? keep[i + 1] : 0;
        x->id = i;
        memset(x->pad, (int)(i & 0xff), sizeof(x->pad));
    }
    REQUIRE_OK(pheap_root_set(h, "list", keep[0]));
    /* slots: each node's next word and the DRAM copy of every offset */
    pheap_off **s = calloc(2 * n, sizeof(*s));
    size_t ns = 0;
    for (size_t i = 0; i < n; i++) {
        node *x = pheap_direct(h, keep[i]);
        if (x->next)
            s[ns++] = &x->next;
        s[ns++] = &keep[i];
    }
    pheap_off head = keep[0];
    pheap_defrag_result r;
    REQUIRE_OK(pheap_defrag(h, s, ns, &r));
    fprintf(stderr, "  list of %zu: %zu moved, %zu slabs freed\n", n, r.relocated, r.slabs_freed);
    CHECK_EQ(r.total, n);
    CHECK(r.relocated > 0);
    CHECK(r.slabs_freed >= 2);
    /* The head is rooted: it stays, and its slab with it. */
    CHECK_EQ(pheap_root_get(h, "list"), head);
    CHECK_EQ(keep[0], head);
    size_t i = 0;
    for (pheap_off o = pheap_root_get(h, "list"); o; o = ((node *)pheap_direct(h, o))->next, i++) {
        REQUIRE(i < n);
        node *x = pheap_direct(h, o);
        CHECK_EQ(o, keep[i]); /* the program's copies moved with the nodes */
        CHECK_EQ(x->id, i);
        CHECK_EQ(x->pad[0], i & 0xff);
        CHECK_EQ(x->pad[79], i & 0xff);
    }
    CHECK_EQ(i, n);
    expect_sound(h, n, __LINE__);
    free(s);
    free(keep);
    free(all);
    REQUIRE_OK(pheap_close(h));
    unlink(ph_test_path("defrag-list.heap"));
}

TEST(what_stays)
{
    pheap *h = fresh_heap("defrag-stays.heap", 8u << 20);
    REQUIRE(h);
    enum { N = 585 * 4 };
    pheap_off *v = calloc(N, sizeof(*v));
    REQUIRE(v);
    size_t n = make_sparse(h, v, N, SMALL, 10);
    /* Blocks the slots do not all name: nothing can empty a slab. */
    pheap_off **s = slots_of(v, n);
    pheap_defrag_result r;
    REQUIRE_OK(pheap_defrag(h, s, n - 1, &r)); /* the last slab keeps one unnamed */
    CHECK_EQ(r.total, n - 1);
    size_t first = r.relocated; /* the first three slabs may empty, not the last */
    struct pheap_stats st = stats(h);
    CHECK(st.slabs >= 2);
    /* A named block and large blocks stay where they are. */
    pheap_off named = pheap_alloc_named(h, "keep-me", SMALL);
    REQUIRE(named);
    pheap_off big = pheap_alloc(h, 1u << 20);
    REQUIRE(big);
    uint64_t live = stats(h).live_blocks;
    pheap_off slot_named = named, slot_big = big;
    pheap_off *two[2] = {&slot_named, &slot_big};
    REQUIRE_OK(pheap_defrag(h, two, 2, &r));
    CHECK_EQ(r.total, 2);
    CHECK_EQ(r.relocated, 0);
    CHECK_EQ(slot_named, named);
    CHECK_EQ(slot_big, big);
    CHECK_EQ(pheap_lookup(h, "keep-me"), named);
    /* Zero slots are skipped; no slots at all is no work. */
    pheap_off zero = 0, *zs[1] = {&zero};
    REQUIRE_OK(pheap_defrag(h, zs, 1, &r));
    CHECK_EQ(r.total, 0);
    REQUIRE_OK(pheap_defrag(h, NULL, 0, NULL));
    fprintf(stderr, "  partly named: %zu moved\n", first);
    expect_sound(h, stats(h).live_blocks, __LINE__);
    CHECK_EQ(stats(h).live_blocks, live);
    free(s);
    free(v);
    REQUIRE_OK(pheap_close(h));
    unlink(ph_test_path("defrag-stays.heap"));
}

#define EXPECT_REFUSED(call, want)                                                             \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_ != (want))                                                                     \
            ph_test_fail(__FILE__, __LINE__, "%s -> %d (%s), want %d", #call, rc_,            \
                         rc_ ? pheap_errmsg() : "", (want));                                   \
        else if (pheap_errno() != rc_ || !pheap_errmsg()[0])                                   \
            ph_test_fail(__FILE__, __LINE__, "%s: errno %d, message '%s'", #call,             \
                         pheap_errno(), pheap_errmsg());                                       \
        ph_test_unchanged(h, &st0, #call, __FILE__, __LINE__);                                 \
    } while (0)

TEST(misuse_changes_nothing)
{
    pheap *h = fresh_heap("defrag-misuse.heap", 8u << 20);
    REQUIRE(h);
    enum { N = 585 * 4 };
    pheap_off *v = calloc(N + 8, sizeof(*v));
    REQUIRE(v);
    size_t n = make_sparse(h, v, N, SMALL, 10);
    pheap_off *copy = malloc(n * sizeof(*copy));
    memcpy(copy, v, n * sizeof(*v));
    pheap_off **s = calloc(n + 1, sizeof(*s));
    for (size_t i = 0; i < n; i++)
        s[i] = &v[i];
    struct pheap_stats st0 = stats(h);
    pheap_defrag_result r = {1, 1, 1, 1};

    EXPECT_REFUSED(pheap_defrag(NULL, s, n, &r), PHEAP_EINVAL);
    CHECK_EQ(r.relocated, 0); /* zeroed on error too */
    EXPECT_REFUSED(pheap_defrag(h, NULL, 3, NULL), PHEAP_EINVAL);
    s[n] = NULL;
    EXPECT_REFUSED(pheap_defrag(h, s, n + 1, NULL), PHEAP_EINVAL);
    /* a misaligned slot */
    s[n] = (pheap_off *)((char *)&v[n + 2] + 4);
    EXPECT_REFUSED(pheap_defrag(h, s, n + 1, NULL), PHEAP_EINVAL);
    /* a slot in the heap's metadata (its first page) */
    pheap_off data = st0.data_offset;
    s[n] = (pheap_off *)((char *)pheap_direct(h, data) - data);
    EXPECT_REFUSED(pheap_defrag(h, s, n + 1, NULL), PHEAP_ERANGE);
    /* a slot in a freed block of the heap */
    pheap_off gone = pheap_alloc(h, 64);
    REQUIRE_OK(pheap_free(h, gone));
    st0 = stats(h);
    s[n] = pheap_direct(h, gone);
    EXPECT_REFUSED(pheap_defrag(h, s, n + 1, NULL), PHEAP_ENOTLIVE);
    /* slots naming what is no live block's start */
    v[n] = gone;
    s[n] = &v[n];
    EXPECT_REFUSED(pheap_defrag(h, s, n + 1, NULL), PHEAP_EDOUBLEFREE);
    v[n] = copy[1] + 8;
    EXPECT_REFUSED(pheap_defrag(h, s, n + 1, NULL), PHEAP_EINTERIOR);
    v[n] = 3;
    EXPECT_REFUSED(pheap_defrag(h, s, n + 1, NULL), PHEAP_ERANGE);
    v[n] = st0.data_offset + st0.data_size - 4096; /* never allocated */
    EXPECT_REFUSED(pheap_defrag(h, s, n + 1, NULL), PHEAP_ENOTALLOC);
    /* inside a transaction */
    REQUIRE_OK(pheap_tx_begin(h));
    EXPECT_REFUSED(pheap_defrag(h, s, n, NULL), PHEAP_EINVAL);
    REQUIRE_OK(pheap_tx_abort(h));
    for (size_t i = 0; i < n; i++) /* no slot was written */
        CHECK_EQ(v[i], copy[i]);
    REQUIRE_OK(pheap_close(h));

    /* read-only */
    pheap_options ro = {.flags = PHEAP_RDONLY};
    REQUIRE_OK(pheap_open(ph_test_path("defrag-misuse.heap"), &ro, &h));
    CHECK_EQ(pheap_defrag(h, s, n, NULL), PHEAP_ERDONLY);
    REQUIRE_OK(pheap_close(h));
    for (size_t i = 0; i < n; i++)
        CHECK_EQ(v[i], copy[i]);
    unlink(ph_test_path("defrag-misuse.heap"));

    /* a GC-mode heap */
    const char *gpath = ph_test_path("defrag-gc.heap");
    unlink(gpath);
    h = ph_test_create_mode(gpath, 4u << 20, PHEAP_CONSISTENCY_GC, 0);
    REQUIRE(h);
    pheap_off g = pheap_alloc(h, 64), *gs[1] = {&g};
    CHECK_EQ(pheap_defrag(h, gs, 1, NULL), PHEAP_ENOTSUP);
    REQUIRE_OK(pheap_close(h));
    unlink(gpath);
    free(s);
    free(copy);
    free(v);
}

/* fragbench in small (api_morph's phases): with pheap_defrag after each
 * phase's frees, every phase ends with the slabs and large blocks at most
 * 1.25 times the bytes the program asked for, and the contents whole. */
static const uint32_t phase_size[] = {100, 2000, 480, 1430, 195, 955, 1810, 765};
#define PHASES (sizeof(phase_size) / sizeof(phase_size[0]))
#define LIVE (8u << 20)

TEST(fragbench_phases_stay_within_a_quarter)
{
    pheap *h = fresh_heap("defrag-phases.heap", 4u << 20);
    REQUIRE(h);
    size_t cap = 2 * LIVE / 100 + 16, n = 0;
    pheap_off *v = calloc(cap, sizeof(*v));
    uint32_t *size = calloc(cap, sizeof(*size)), *id = calloc(cap, sizeof(*id));
    pheap_off **s = calloc(cap, sizeof(*s));
    REQUIRE(v && size && id && s);
    uint64_t rng = 11, live = 0;
    uint32_t next_id = 0;
    double worst = 0;
    for (unsigned ph = 0; ph < PHASES; ph++) {
        while (live < LIVE) {
            REQUIRE(n < cap);
            size[n] = phase_size[ph];
            id[n] = next_id++;
            REQUIRE(v[n] = pheap_alloc(h, size[n]));
            ph_test_fill(pheap_direct(h, v[n]), size[n], id[n]);
            live += size[n++];
        }
        struct pheap_stats st = stats(h);
        double ratio = (double)(st.slab_bytes + st.large_bytes) / (double)live;
        fprintf(stderr, "  phase %u: %.3f", ph, ratio);
        worst = ratio > worst ? ratio : worst;
        if (ph + 1 == PHASES)
            break;
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) {
            if (ph_test_rand(&rng) % 100 < 90) {
                REQUIRE_OK(pheap_free(h, v[i]));
                live -= size[i];
            } else {
                v[kept] = v[i], size[kept] = size[i], id[kept++] = id[i];
            }
        }
        n = kept;
        for (size_t i = 0; i < n; i++)
            s[i] = &v[i];
        pheap_defrag_result r;
        REQUIRE_OK(pheap_defrag(h, s, n, &r));
        fprintf(stderr, " (%zu moved)\n", r.relocated);
    }
    fprintf(stderr, "\n");
    CHECK(worst <= 1.25);
    for (size_t i = 0; i < n; i++)
        CHECK(ph_test_intact(pheap_direct(h, v[i]), size[i], id[i]));
    expect_sound(h, n, __LINE__);
    REQUIRE_OK(pheap_close(h));
    free(v);
    free(size);
    free(id);
    free(s);
    unlink(ph_test_path("defrag-phases.heap"));
}

/* Threads defragmenting their own blocks at once, while others allocate
 * and free (ThreadSanitizer's run): every block whole, the heap sound. */
typedef struct worker {
    pheap *h;
    unsigned id;
    int defrag;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    enum { M = 585 * 3 };
    pheap_off *v = calloc(M, sizeof(*v));
    pheap_off **s = calloc(M, sizeof(*s));
    if (!v || !s)
        return (void *)1;
    uintptr_t bad = 0;
    for (unsigned round = 0; round < 3 && !bad; round++) {
        size_t n = 0;
        for (size_t i = 0; i < M; i++) {
            pheap_off o = pheap_alloc(w->h, SMALL);
            if (!o)
                return (void *)2;
            ph_test_fill(pheap_direct(w->h, o), SMALL, w->id * 100000 + i);
            if (i % 6 == 0)
                v[n++] = o;
            else if (pheap_free(w->h, o))
                bad = 3;
        }
        for (size_t i = 0; i < n; i++)
            s[i] = &v[i];
        if (w->defrag && pheap_defrag(w->h, s, n, NULL))
            bad = 4;
        for (size_t i = 0; i < n && !bad; i++)
            if (!ph_test_intact(pheap_direct(w->h, v[i]), SMALL, w->id * 100000 + i * 6))
                bad = 5;
        for (size_t i = 0; i < n && !bad; i++)
            if (pheap_free(w->h, v[i]))
                bad = 6;
    }
    free(v);
    free(s);
    return (void *)bad;
}

TEST(threads_at_once)
{
    pheap *h = fresh_heap("defrag-threads.heap", 16u << 20);
    REQUIRE(h);
    enum { T = 4 };
    pthread_t th[T];
    worker w[T];
    for (unsigned i = 0; i < T; i++) {
        w[i] = (worker){h, i, i % 2 == 0};
        REQUIRE(pthread_create(&th[i], NULL, work, &w[i]) == 0);
    }
    for (unsigned i = 0; i < T; i++) {
        void *rc;
        pthread_join(th[i], &rc);
        CHECK_EQ((uintptr_t)rc, 0);
    }
    expect_sound(h, 0, __LINE__);
    REQUIRE_OK(pheap_close(h));
    unlink(ph_test_path("defrag-threads.heap"));
}

/* A thread that freed blocks keeps some in its cache: the slab they lie
 * in can neither be emptied by another thread's pheap_defrag nor go back
 * to free space until the thread gives them back with
 * pheap_thread_collect; then the empty slabs go (and a block of another
 * size needs no new slab). */
typedef struct holder {
    pheap *h;
    pheap_off *v;
    size_t n;
    pthread_barrier_t *meet;
    uint64_t morphs;
    int64_t slabs_grew;
    int rc;
} holder;

static void *hold_then_collect(void *arg)
{
    holder *o = arg;
    (void)ph_test_pin_cpu(0);
    o->n = make_sparse(o->h, o->v, 585 * 4, SMALL, 10);
    pthread_barrier_wait(o->meet); /* blocks freed, some in this thread's cache */
    pthread_barrier_wait(o->meet); /* pheap_defrag ran */
    struct pheap_stats st0 = stats(o->h), st1;
    o->rc = pheap_thread_collect(o->h);
    pheap_off other = pheap_alloc(o->h, 1000);
    st1 = stats(o->h);
    o->morphs = st1.slab_morphs - st0.slab_morphs;
    o->slabs_grew = (int64_t)st1.slabs - (int64_t)st0.slabs;
    if (other)
        pheap_free(o->h, other);
    return NULL;
}

TEST(collect_gives_cached_blocks_back)
{
    pheap *h = fresh_heap("defrag-collect.heap", 8u << 20);
    REQUIRE(h);
    pthread_barrier_t meet;
    pthread_barrier_init(&meet, NULL, 2);
    holder o = {h, calloc(585 * 4, sizeof(pheap_off)), 0, &meet, 0, 0, -1};
    REQUIRE(o.v);
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, hold_then_collect, &o) == 0);
    pthread_barrier_wait(&meet);
    pheap_off **s = slots_of(o.v, o.n);
    pheap_defrag_result r;
    REQUIRE_OK(pheap_defrag(h, s, o.n, &r));
    pthread_barrier_wait(&meet);
    pthread_join(t, NULL);
    fprintf(stderr, "  %zu slabs freed with blocks cached elsewhere; after collect: %llu morph, "
            "%lld slabs more\n", r.slabs_freed, (unsigned long long)o.morphs,
            (long long)o.slabs_grew);
    CHECK_EQ(o.rc, 0);
    CHECK(r.slabs_freed < 4); /* the cached blocks kept their slab */
    CHECK(o.slabs_grew < 0);  /* once they are back, empty slabs go (none without collect) */
    for (size_t i = 0; i < o.n; i++)
        CHECK(ph_test_intact(pheap_direct(h, o.v[i]), SMALL, i * 10));
    expect_sound(h, o.n, __LINE__);
    CHECK_EQ(pheap_thread_collect(NULL), PHEAP_EINVAL);
    REQUIRE_OK(pheap_close(h));
    pheap_options ro = {.flags = PHEAP_RDONLY};
    REQUIRE_OK(pheap_open(ph_test_path("defrag-collect.heap"), &ro, &h));
    CHECK_EQ(pheap_thread_collect(h), PHEAP_ERDONLY);
    REQUIRE_OK(pheap_close(h));
    pthread_barrier_destroy(&meet);
    free(s);
    free(o.v);
    unlink(ph_test_path("defrag-collect.heap"));
}

/* The blocks and the slabs that stay belong to another thread's arena: one
 * call still packs them into as few slabs as they need (the caller's
 * refills take from those slabs, not from a new slab of its own arena). */
typedef struct filler {
    pheap *h;
    pheap_off *v;
    size_t n;
    pthread_barrier_t *meet;
} filler;

static void *fill_then_wait(void *arg)
{
    filler *f = arg;
    f->n = make_sparse(f->h, f->v, 585 * 20, SMALL, 10);
    pheap_thread_collect(f->h);
    pthread_barrier_wait(f->meet); /* blocks ready */
    pthread_barrier_wait(f->meet); /* pheap_defrag ran: the thread held its arena meanwhile */
    return NULL;
}

TEST(one_call_packs_another_arenas_blocks)
{
    pheap *h = fresh_heap("defrag-arena.heap", 16u << 20);
    REQUIRE(h);
    pheap_off mine = pheap_alloc(h, SMALL); /* this thread's arena first */
    REQUIRE(mine);
    pthread_barrier_t meet;
    pthread_barrier_init(&meet, NULL, 2);
    filler f = {h, calloc(585 * 20, sizeof(pheap_off)), 0, &meet};
    REQUIRE(f.v);
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, fill_then_wait, &f) == 0);
    pthread_barrier_wait(&meet);
    pheap_off **s = slots_of(f.v, f.n);
    pheap_defrag_result r;
    REQUIRE_OK(pheap_defrag(h, s, f.n, &r));
    pthread_barrier_wait(&meet);
    pthread_join(t, NULL);
    struct pheap_stats st = stats(h);
    size_t need = (f.n + 584) / 585;
    fprintf(stderr, "  %zu blocks: %zu moved, %zu slabs freed; in %zu slabs (%zu needed)\n", f.n,
            r.relocated, r.slabs_freed, chunks_of(&st, f.v, f.n), need);
    CHECK_EQ(chunks_of(&st, f.v, f.n), need);
    for (size_t i = 0; i < f.n; i++)
        CHECK(ph_test_intact(pheap_direct(h, f.v[i]), SMALL, i * 10));
    REQUIRE_OK(pheap_free(h, mine));
    expect_sound(h, f.n, __LINE__);
    REQUIRE_OK(pheap_close(h));
    pthread_barrier_destroy(&meet);
    free(s);
    free(f.v);
    unlink(ph_test_path("defrag-arena.heap"));
}
