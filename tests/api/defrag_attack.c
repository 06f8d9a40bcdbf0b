/*
 * defrag_attack.c -- adversarial review of pheap_defrag and
 * pheap_thread_collect: inputs and layouts the first tests did not try.
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define SMALL 100u /* a 112-byte class: 585 blocks a slab */

static pheap *fresh(const char *name, uint64_t size, uint64_t max)
{
    const char *path = ph_test_path(name);
    unlink(path);
    pheap_options o = {.size = size, .max_size = max, .flags = PHEAP_CREATE | PHEAP_EXCL,
                       .flush = PHEAP_FLUSH_NONE};
    pheap *h = NULL;
    if (pheap_open(path, &o, &h))
        ph_test_fail(__FILE__, __LINE__, "create: %s", pheap_errmsg());
    (void)ph_test_pin_cpu(0);
    return h;
}

static struct pheap_stats stats(pheap *h)
{
    struct pheap_stats st;
    pheap_stats(h, &st);
    return st;
}

static void sound(pheap *h, int line)
{
    pheap_check_report rep;
    if (pheap_check(h, &rep) != 0)
        ph_test_fail(__FILE__, line, "pheap_check: %s", rep.first_error);
}

/* ---- 1. a slot in the heap's address reservation past its current end ---- */

TEST(slot_in_reservation_past_the_end_is_refused)
{
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) { /* the child makes its own heap: a handle is not inherited */
        pheap *h = fresh("atk-tail.heap", 1u << 20, 64u << 20);
        if (!h)
            _exit(2);
        struct pheap_stats st = stats(h);
        pheap_off b = pheap_alloc(h, 64);
        char *view0 = (char *)pheap_direct(h, b) - b; /* the view's base */
        /* one page past the mapped size: in the reservation, not the program's */
        pheap_off *s[1] = {(pheap_off *)(view0 + st.data_offset + st.data_size + 4096)};
        int rc = pheap_defrag(h, s, 1, NULL);
        fprintf(stderr, "  child: %d (%s)\n", rc, rc ? pheap_errmsg() : "");
        _exit(rc == PHEAP_ERANGE ? 0 : 10 + (rc < 0 ? -rc : rc));
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status))
        ph_test_fail(__FILE__, __LINE__, "pheap_defrag with a slot one page past the heap's "
                     "end (inside its address reservation) died of signal %d instead of "
                     "returning PHEAP_ERANGE", WTERMSIG(status));
    else
        CHECK_EQ(WEXITSTATUS(status), 0);
    unlink(ph_test_path("atk-tail.heap"));
}

/* ---- 2. many slots for one block: DRAM, heap (pinned, large, self, moving), dup ---- */

typedef struct obj {
    pheap_off self;   /* names the block itself */
    pheap_off other;  /* names another moving block */
    uint64_t id;
    uint8_t pad[80];
} obj;

TEST(many_kinds_of_slots_for_the_same_blocks)
{
    pheap *h = fresh("atk-kinds.heap", 8u << 20, 64u << 20);
    REQUIRE(h);
    enum { N = 585 * 4 };
    pheap_off *all = calloc(N, sizeof(*all));
    REQUIRE(all);
    for (size_t i = 0; i < N; i++)
        REQUIRE(all[i] = pheap_alloc(h, sizeof(obj)));
    size_t n = 0;
    for (size_t i = 0; i < N; i++) {
        if (i % 12 == 0)
            all[n++] = all[i];
        else
            REQUIRE_OK(pheap_free(h, all[i]));
    }
    /* a rooted table of offsets (pinned, in a large block) and a small pinned table */
    pheap_off big = pheap_alloc(h, n * sizeof(pheap_off) + 70000);
    REQUIRE(big);
    REQUIRE_OK(pheap_root_set(h, "big", big));
    pheap_off *tab = pheap_direct(h, big);
    pheap_off named = pheap_alloc_named(h, "tiny", 64);
    REQUIRE(named);
    pheap_off *tiny = pheap_direct(h, named);
    for (size_t i = 0; i < n; i++) {
        obj *o = pheap_direct(h, all[i]);
        o->self = all[i];
        o->other = all[(i + 1) % n];
        o->id = i;
        memset(o->pad, (int)(i & 0xff), sizeof(o->pad));
        tab[i] = all[i];
    }
    tiny[0] = all[0];
    tiny[1] = all[n - 1];
    tiny[2] = 0;
    /* slots: every kind, many duplicates */
    pheap_off *dram = malloc(n * sizeof(*dram));
    memcpy(dram, all, n * sizeof(*dram));
    size_t cap = 8 * n + 16, ns = 0;
    pheap_off **s = calloc(cap, sizeof(*s));
    for (size_t i = 0; i < n; i++) {
        obj *o = pheap_direct(h, all[i]);
        s[ns++] = &o->self;
        s[ns++] = &o->other;
        s[ns++] = &tab[i];
        s[ns++] = &dram[i];
        s[ns++] = &dram[i]; /* the same DRAM word twice */
        s[ns++] = &o->self; /* the same heap word twice */
    }
    s[ns++] = &tiny[0];
    s[ns++] = &tiny[1];
    s[ns++] = &tiny[2]; /* 0 */
    pheap_defrag_result r;
    REQUIRE_OK(pheap_defrag(h, s, ns, &r));
    fprintf(stderr, "  %zu blocks, %zu moved, %zu slabs freed\n", r.total, r.relocated,
            r.slabs_freed);
    CHECK_EQ(r.total, n);
    CHECK(r.relocated > 0);
    for (size_t i = 0; i < n; i++) {
        pheap_off at = dram[i];
        CHECK_EQ(tab[i], at);
        CHECK(pheap_usable_size(h, at) >= sizeof(obj));
        obj *o = pheap_direct(h, at);
        CHECK_EQ(o->self, at);
        CHECK_EQ(o->other, dram[(i + 1) % n]);
        CHECK_EQ(o->id, i);
        CHECK_EQ(o->pad[0], i & 0xff);
        CHECK_EQ(o->pad[79], i & 0xff);
    }
    CHECK_EQ(tiny[0], dram[0]);
    CHECK_EQ(tiny[1], dram[n - 1]);
    CHECK_EQ(tiny[2], 0);
    fprintf(stderr, "  live blocks %llu (n + big + named = %zu)\n", (unsigned long long)stats(h).live_blocks, n + 2);
    sound(h, __LINE__);
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(pheap_open(ph_test_path("atk-kinds.heap"), NULL, &h));
    tab = pheap_direct(h, pheap_root_get(h, "big"));
    for (size_t i = 0; i < n; i++) {
        obj *o = pheap_direct(h, tab[i]);
        CHECK_EQ(o->self, tab[i]);
        CHECK_EQ(o->id, i);
    }
    sound(h, __LINE__);
    REQUIRE_OK(pheap_close(h));
    free(s);
    free(dram);
    free(all);
    unlink(ph_test_path("atk-kinds.heap"));
}

/* ---- 3. a heap that is full: the call fails or works, and leaves the heap whole ---- */

TEST(full_heap)
{
    /* no growth: 1 MiB of data = 16 chunks */
    pheap *h = fresh("atk-full.heap", 1u << 20, 0);
    REQUIRE(h);
    enum { N = 585 * 6 };
    pheap_off *v = calloc(N, sizeof(*v));
    REQUIRE(v);
    size_t made = 0;
    for (; made < N; made++)
        if (!(v[made] = pheap_alloc(h, SMALL)))
            break;
    REQUIRE(made == N);
    for (size_t i = 0; i < N; i++)
        ph_test_fill(pheap_direct(h, v[i]), SMALL, i);
    size_t n = 0;
    pheap_off *ids = calloc(N, sizeof(*ids));
    for (size_t i = 0; i < N; i++) {
        if (i % 4 == 0) {
            ids[n] = i;
            v[n++] = v[i];
        } else {
            REQUIRE_OK(pheap_free(h, v[i]));
        }
    }
    REQUIRE_OK(pheap_thread_collect(h));
    /* fill every free chunk with large blocks */
    pheap_off fill[64];
    unsigned nf = 0;
    while (nf < 64 && (fill[nf] = pheap_alloc(h, 60000)) != 0)
        nf++;
    struct pheap_stats st0 = stats(h);
    fprintf(stderr, "  %zu small kept in %llu slabs, %u large fill\n", n,
            (unsigned long long)st0.slabs, nf);
    pheap_off *copy = malloc(n * sizeof(*copy));
    memcpy(copy, v, n * sizeof(*v));
    pheap_off **s = calloc(n, sizeof(*s));
    for (size_t i = 0; i < n; i++)
        s[i] = &v[i];
    pheap_defrag_result r;
    int rc = pheap_defrag(h, s, n, &r);
    fprintf(stderr, "  defrag of a full heap: %d (%s): %zu moved, %zu slabs freed\n", rc,
            rc ? pheap_errmsg() : "", r.relocated, r.slabs_freed);
    /* 6 slabs at 25 %: 2 would hold them all; the blocks could pack into the slabs kept */
    CHECK_EQ(rc, 0);
    size_t moved = 0;
    for (size_t i = 0; i < n; i++) {
        moved += v[i] != copy[i];
        CHECK(ph_test_intact(pheap_direct(h, v[i]), SMALL, ids[i]));
    }
    CHECK_EQ(moved, r.relocated);
    sound(h, __LINE__);
    CHECK_EQ(stats(h).live_blocks, st0.live_blocks);
    /* no slab lost: after freeing everything small, the space serves small blocks again */
    for (size_t i = 0; i < n; i++)
        REQUIRE_OK(pheap_free(h, v[i]));
    size_t again = 0;
    while (again < N && (v[again] = pheap_alloc(h, SMALL)) != 0)
        again++;
    fprintf(stderr, "  after freeing: %zu small blocks fit again (had %d)\n", again, N);
    CHECK(again >= N);
    sound(h, __LINE__);
    REQUIRE_OK(pheap_close(h));
    free(s);
    free(copy);
    free(ids);
    free(v);
    unlink(ph_test_path("atk-full.heap"));
}

/* ---- 4. thread_collect inside a transaction ---- */

TEST(collect_inside_a_transaction)
{
    pheap *h = fresh("atk-collect-tx.heap", 4u << 20, 64u << 20);
    REQUIRE(h);
    pheap_off keep = pheap_alloc(h, 64);
    REQUIRE(keep);
    for (int round = 0; round < 2; round++) {
        REQUIRE_OK(pheap_tx_begin(h));
        pheap_off a[40];
        for (int i = 0; i < 40; i++)
            REQUIRE(a[i] = pheap_tx_alloc(h, 64));
        for (int i = 0; i < 40; i += 2)
            REQUIRE_OK(pheap_tx_free(h, a[i]));
        REQUIRE_OK(pheap_thread_collect(h));
        REQUIRE_OK(pheap_tx_free(h, keep));
        REQUIRE_OK(pheap_thread_collect(h));
        if (round == 0) {
            REQUIRE_OK(pheap_tx_abort(h));
            CHECK(pheap_usable_size(h, keep) > 0);
            for (int i = 0; i < 40; i++)
                CHECK_EQ(pheap_usable_size(h, a[i]), 0);
        } else {
            REQUIRE_OK(pheap_tx_commit(h));
            CHECK_EQ(pheap_usable_size(h, keep), 0);
            for (int i = 1; i < 40; i += 2)
                CHECK(pheap_usable_size(h, a[i]) > 0);
        }
        sound(h, __LINE__);
    }
    REQUIRE_OK(pheap_close(h));
    unlink(ph_test_path("atk-collect-tx.heap"));
}

/* ---- 5. a morphed slab with old blocks ---- */

static int kept_old(unsigned i)
{
    return i == 1 || i == 6 || i == 10 || i == 15 || (i >= 16 && i % 3 == 0);
}

TEST(morphed_slab_with_old_blocks)
{
    pheap *h = fresh("atk-morph.heap", 1u << 20, 64u << 20);
    REQUIRE(h);
    enum { NOLD = 32, NNEW = 58 }; /* 48 fill the morphed slab, 10 a new one */
    pheap_off old[NOLD], nw[NNEW];
    for (unsigned i = 0; i < NOLD; i++) {
        REQUIRE(old[i] = pheap_alloc(h, 4096));
        ph_test_fill(pheap_direct(h, old[i]), 4096, old[i]);
    }
    for (unsigned i = 0; i < NOLD; i++)
        if (!kept_old(i))
            REQUIRE_OK(pheap_free(h, old[i]));
    REQUIRE_OK(pheap_thread_collect(h));
    uint64_t m0 = stats(h).slab_morphs;
    for (unsigned i = 0; i < NNEW; i++) {
        REQUIRE(nw[i] = pheap_alloc(h, 1024));
        ph_test_fill(pheap_direct(h, nw[i]), 1024, nw[i]);
    }
    fprintf(stderr, "  morphs: %llu\n", (unsigned long long)(stats(h).slab_morphs - m0));
    CHECK(stats(h).slab_morphs > m0);
    /* every live block named */
    pheap_off v[NOLD + NNEW], orig[NOLD + NNEW];
    size_t sz[NOLD + NNEW], n = 0;
    for (unsigned i = 0; i < NOLD; i++)
        if (kept_old(i))
            orig[n] = v[n] = old[i], sz[n++] = 4096;
    for (unsigned i = 0; i < NNEW; i++)
        orig[n] = v[n] = nw[i], sz[n++] = 1024;
    pheap_off *s[NOLD + NNEW];
    for (size_t i = 0; i < n; i++)
        s[i] = &v[i];
    uint64_t slabs0 = stats(h).slabs;
    pheap_defrag_result r;
    REQUIRE_OK(pheap_defrag(h, s, n, &r));
    fprintf(stderr, "  %zu blocks, %zu moved, %zu slabs freed, slabs %llu -> %llu\n", r.total,
            r.relocated, r.slabs_freed, (unsigned long long)slabs0,
            (unsigned long long)stats(h).slabs);
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ(pheap_usable_size(h, v[i]), sz[i]);
        CHECK(ph_test_intact(pheap_direct(h, v[i]), sz[i], orig[i]));
    }
    sound(h, __LINE__);
    CHECK_EQ(stats(h).live_blocks, n);
    /* the heap keeps working: allocate and free of both sizes */
    pheap_off x[64];
    for (int i = 0; i < 64; i++)
        REQUIRE(x[i] = pheap_alloc(h, i % 2 ? 4096 : 1024));
    for (int i = 0; i < 64; i++)
        REQUIRE_OK(pheap_free(h, x[i]));
    sound(h, __LINE__);
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(pheap_open(ph_test_path("atk-morph.heap"), NULL, &h));
    for (size_t i = 0; i < n; i++)
        CHECK(ph_test_intact(pheap_direct(h, v[i]), sz[i], orig[i]));
    sound(h, __LINE__);
    REQUIRE_OK(pheap_close(h));
    unlink(ph_test_path("atk-morph.heap"));
}

/* ---- 6. the heap grows to defragment ---- */

TEST(defrag_grows_the_file)
{
    pheap *h = fresh("atk-grow.heap", 1u << 20, 64u << 20);
    REQUIRE(h);
    enum { N = 585 * 6 };
    pheap_off *v = calloc(N, sizeof(*v));
    for (size_t i = 0; i < N; i++)
        REQUIRE(v[i] = pheap_alloc(h, SMALL));
    size_t n = 0;
    for (size_t i = 0; i < N; i++) {
        if (i % 4 == 0)
            v[n++] = v[i];
        else
            REQUIRE_OK(pheap_free(h, v[i]));
    }
    REQUIRE_OK(pheap_thread_collect(h));
    pheap_off fill[64];
    unsigned nf = 0;
    struct pheap_stats st0 = stats(h);
    while (nf < 64 && stats(h).data_size == st0.data_size && (fill[nf] = pheap_alloc(h, 60000)))
        nf++;
    if (stats(h).data_size != st0.data_size)
        REQUIRE_OK(pheap_free(h, fill[--nf])); /* the last grew it: back */
    st0 = stats(h);
    pheap_off **s = calloc(n, sizeof(*s));
    for (size_t i = 0; i < n; i++)
        s[i] = &v[i];
    pheap_defrag_result r;
    REQUIRE_OK(pheap_defrag(h, s, n, &r));
    struct pheap_stats st = stats(h);
    fprintf(stderr, "  %zu moved, %zu slabs freed; data size %llu -> %llu, slabs %llu -> %llu\n",
            r.relocated, r.slabs_freed, (unsigned long long)st0.data_size,
            (unsigned long long)st.data_size, (unsigned long long)st0.slabs,
            (unsigned long long)st.slabs);
    CHECK_EQ(st.data_size, st0.data_size);
    sound(h, __LINE__);
    REQUIRE_OK(pheap_close(h));
    free(s);
    free(v);
    unlink(ph_test_path("atk-grow.heap"));
}

/* ---- 7. defrag while other threads churn the same class and collect ---- */

typedef struct churn {
    pheap *h;
    int *stop;
    int rc;
    unsigned id;
} churn;

static void *churner(void *arg)
{
    churn *c = arg;
    pheap_off v[700];
    uint64_t rng = c->id + 1;
    while (!__atomic_load_n(c->stop, __ATOMIC_RELAXED)) {
        unsigned n = 100 + (unsigned)(ph_test_rand(&rng) % 600);
        for (unsigned i = 0; i < n; i++) {
            if (!(v[i] = pheap_alloc(c->h, SMALL))) {
                c->rc = 1;
                return NULL;
            }
            ph_test_fill(pheap_direct(c->h, v[i]), SMALL, v[i]);
        }
        for (unsigned i = 0; i < n; i++) {
            if (!ph_test_intact(pheap_direct(c->h, v[i]), SMALL, v[i]))
                c->rc = 2;
            if (pheap_free(c->h, v[i]))
                c->rc = 3;
        }
        if (ph_test_rand(&rng) % 3 == 0 && pheap_thread_collect(c->h))
            c->rc = 4;
    }
    return NULL;
}

static void *defragger(void *arg)
{
    churn *c = arg;
    enum { M = 585 * 3 };
    pheap_off *v = calloc(M, sizeof(*v));
    pheap_off **s = calloc(M, sizeof(*s));
    for (unsigned round = 0; round < 200 && !c->rc; round++) {
        size_t n = 0;
        for (size_t i = 0; i < M; i++) {
            pheap_off o = pheap_alloc(c->h, SMALL);
            if (!o) {
                c->rc = 11;
                break;
            }
            ph_test_fill(pheap_direct(c->h, o), SMALL, c->id * 1000000 + i);
            if (i % 7 == 0)
                v[n++] = o;
            else if (pheap_free(c->h, o))
                c->rc = 12;
        }
        for (size_t i = 0; i < n; i++)
            s[i] = &v[i];
        pheap_defrag_result r;
        if (pheap_defrag(c->h, s, n, &r))
            c->rc = 13;
        for (size_t i = 0; i < n && !c->rc; i++)
            if (!ph_test_intact(pheap_direct(c->h, v[i]), SMALL, c->id * 1000000 + i * 7))
                c->rc = 14;
        for (size_t i = 0; i < n; i++)
            if (pheap_free(c->h, v[i]))
                c->rc = 15;
    }
    free(v);
    free(s);
    return NULL;
}

TEST(defrag_while_others_churn_the_class)
{
    pheap *h = fresh("atk-churn.heap", 16u << 20, 256u << 20);
    REQUIRE(h);
    int stop = 0;
    enum { T = 4 };
    churn c[T];
    pthread_t th[T];
    for (unsigned i = 0; i < T; i++) {
        c[i] = (churn){h, &stop, 0, i};
        REQUIRE(pthread_create(&th[i], NULL, i < 2 ? defragger : churner, &c[i]) == 0);
    }
    pthread_join(th[0], NULL);
    pthread_join(th[1], NULL);
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    pthread_join(th[2], NULL);
    pthread_join(th[3], NULL);
    for (unsigned i = 0; i < T; i++)
        CHECK_EQ(c[i].rc, 0);
    sound(h, __LINE__);
    CHECK_EQ(stats(h).live_blocks, 0);
    REQUIRE_OK(pheap_close(h));
    unlink(ph_test_path("atk-churn.heap"));
}

/* ---- 8. pheap_thread_collect "changes nothing durable" -- even in read-only mode ---- */

TEST(collect_changes_the_file_in_read_only_mode)
{
    pheap *h = fresh("atk-collect-ro.heap", 4u << 20, 64u << 20);
    REQUIRE(h);
    enum { N = 585 * 3 };
    pheap_off *v = calloc(N, sizeof(*v));
    for (size_t i = 0; i < N; i++)
        REQUIRE(v[i] = pheap_alloc(h, SMALL));
    /* a block of the last slab freed and given back: a partial slab of the class */
    REQUIRE_OK(pheap_free(h, v[N - 1]));
    REQUIRE_OK(pheap_thread_collect(h));
    /* every block of v[0]'s slab freed: some stay in this thread's cache */
    uint64_t ch = v[0] >> 16;
    for (size_t i = 0; i < N - 1; i++)
        if (v[i] >> 16 == ch)
            REQUIRE_OK(pheap_free(h, v[i]));
    fprintf(stderr, "  before: %llu slabs, %llu cached, %llu live\n",
            (unsigned long long)stats(h).slabs, (unsigned long long)stats(h).cached_blocks,
            (unsigned long long)stats(h).live_blocks);
    REQUIRE_OK(pheap_set_mode(h, PHEAP_MODE_READONLY));
    CHECK_EQ(pheap_alloc(h, SMALL), 0); /* read-only mode: refused */
    uint64_t slabs0 = stats(h).slabs;
    CHECK_EQ(pheap_thread_collect(h), PHEAP_EROMODE); /* it may give slabs back: a change */
    uint64_t slabs1 = stats(h).slabs;
    fprintf(stderr, "  after: %llu cached, %llu live, %llu free bytes\n",
            (unsigned long long)stats(h).cached_blocks, (unsigned long long)stats(h).live_blocks,
            (unsigned long long)stats(h).free_bytes);
    fprintf(stderr, "  read-only mode: slabs %llu -> %llu across pheap_thread_collect\n",
            (unsigned long long)slabs0, (unsigned long long)slabs1);
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(pheap_open(ph_test_path("atk-collect-ro.heap"), NULL, &h));
    uint64_t slabs2 = stats(h).slabs;
    fprintf(stderr, "  reopened: %llu slabs\n", (unsigned long long)slabs2);
    /* refused: no slab went back (the reopen may: the cached blocks are free) */
    CHECK_EQ(slabs1, slabs0);
    REQUIRE_OK(pheap_close(h));
    free(v);
    unlink(ph_test_path("atk-collect-ro.heap"));
}

/* ---- 9. many batches; slots in moving blocks naming blocks of earlier and later batches ---- */

TEST(cross_batch_slots_inside_moving_blocks)
{
    pheap *h = fresh("atk-batches.heap", 16u << 20, 256u << 20);
    REQUIRE(h);
    enum { N = 585 * 20 };
    pheap_off *all = calloc(N, sizeof(*all));
    for (size_t i = 0; i < N; i++)
        REQUIRE(all[i] = pheap_alloc(h, sizeof(obj)));
    size_t n = 0;
    for (size_t i = 0; i < N; i++) {
        if (i % 9 == 0)
            all[n++] = all[i];
        else
            REQUIRE_OK(pheap_free(h, all[i]));
    }
    uint64_t rng = 5;
    size_t *perm = malloc(n * sizeof(*perm));
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = ph_test_rand(&rng) % (i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (size_t i = 0; i < n; i++) {
        obj *o = pheap_direct(h, all[i]);
        o->self = all[i];
        o->other = all[perm[i]];
        o->id = i;
        memset(o->pad, (int)(i & 0xff), sizeof(o->pad));
    }
    pheap_off *dram = malloc(n * sizeof(*dram));
    memcpy(dram, all, n * sizeof(*dram));
    pheap_off **s = calloc(3 * n, sizeof(*s));
    size_t ns = 0;
    for (size_t i = 0; i < n; i++) {
        obj *o = pheap_direct(h, all[i]);
        s[ns++] = &o->other;
        s[ns++] = &o->self;
        s[ns++] = &dram[i];
    }
    pheap_defrag_result r;
    REQUIRE_OK(pheap_defrag(h, s, ns, &r));
    fprintf(stderr, "  %zu blocks, %zu moved, %zu slabs freed\n", r.total, r.relocated,
            r.slabs_freed);
    CHECK(r.relocated > 256);
    for (size_t i = 0; i < n; i++) {
        obj *o = pheap_direct(h, dram[i]);
        CHECK_EQ(o->self, dram[i]);
        CHECK_EQ(o->other, dram[perm[i]]);
        CHECK_EQ(o->id, i);
        CHECK_EQ(o->pad[40], i & 0xff);
    }
    sound(h, __LINE__);
    CHECK_EQ(stats(h).live_blocks, n);
    REQUIRE_OK(pheap_close(h));
    free(s);
    free(dram);
    free(perm);
    free(all);
    unlink(ph_test_path("atk-batches.heap"));
}

/* ---- 10. collect on a GC-mode heap ---- */

TEST(collect_on_a_gc_heap)
{
    const char *path = ph_test_path("atk-gc.heap");
    unlink(path);
    pheap *h = ph_test_create_mode(path, 4u << 20, PHEAP_CONSISTENCY_GC, 0);
    REQUIRE(h);
    pheap_off keep = pheap_alloc(h, 64);
    REQUIRE(keep);
    REQUIRE_OK(pheap_root_set(h, "keep", keep));
    pheap_off v[3000];
    for (int i = 0; i < 3000; i++)
        REQUIRE(v[i] = pheap_alloc(h, i % 3 ? 64 : 500));
    for (int i = 0; i < 3000; i++)
        REQUIRE_OK(pheap_free(h, v[i]));
    REQUIRE_OK(pheap_thread_collect(h));
    CHECK_EQ(stats(h).cached_blocks, 0);
    sound(h, __LINE__);
    REQUIRE_OK(pheap_gc(h));
    sound(h, __LINE__);
    CHECK(pheap_usable_size(h, keep) >= 64);
    REQUIRE_OK(pheap_close(h));
    unlink(path);
}

/* ---- 11. random layouts: mixed sizes, roots, heap slots in random blocks ---- */

#define RW 4 /* words at the start of each block that may hold slots */

TEST(random_layouts)
{
    static const size_t sizes[] = {16, 48, 100, 250, 1000, 3000, 9000, 20000};
    for (unsigned iter = 0; iter < 30; iter++) {
        pheap *h = fresh("atk-rand.heap", 4u << 20, 256u << 20);
        REQUIRE(h);
        uint64_t rng = 1000 + iter;
        enum { N = 6000 };
        pheap_off *v = calloc(N, sizeof(*v));
        size_t *sz = calloc(N, sizeof(*sz));
        for (size_t i = 0; i < N; i++) {
            sz[i] = sizes[ph_test_rand(&rng) % (iter % 2 ? 8 : 3)];
            REQUIRE(v[i] = pheap_alloc(h, sz[i]));
        }
        size_t n = 0;
        unsigned keep = 2 + (unsigned)(ph_test_rand(&rng) % 12);
        for (size_t i = 0; i < N; i++) {
            if (ph_test_rand(&rng) % keep == 0)
                v[n] = v[i], sz[n++] = sz[i];
            else
                REQUIRE_OK(pheap_free(h, v[i]));
        }
        /* contents: words 0..RW-1 slots (random blocks or 0), the rest a pattern */
        pheap_off *dram = malloc(n * sizeof(*dram));
        uint32_t (*tgt)[RW] = calloc(n, sizeof(*tgt));
        for (size_t i = 0; i < n; i++) {
            pheap_off *p = pheap_direct(h, v[i]);
            for (unsigned w = 0; w < RW; w++) {
                if (sz[i] >= 8 * (w + 1) && ph_test_rand(&rng) % 3) {
                    tgt[i][w] = (uint32_t)(ph_test_rand(&rng) % n) + 1;
                    p[w] = v[tgt[i][w] - 1];
                } else if (sz[i] >= 8 * (w + 1)) {
                    p[w] = 0;
                }
            }
            if (sz[i] > 8 * RW)
                ph_test_fill(p + RW, sz[i] - 8 * RW, i);
            dram[i] = v[i];
        }
        /* a few roots (pinned) */
        unsigned nroots = (unsigned)(ph_test_rand(&rng) % 4);
        size_t root_of[4];
        for (unsigned k = 0; k < nroots; k++) {
            char name[16];
            snprintf(name, sizeof(name), "r%u", k);
            root_of[k] = ph_test_rand(&rng) % n;
            REQUIRE_OK(pheap_root_set(h, name, v[root_of[k]]));
        }
        /* slots: every heap word that names a block, every DRAM copy; shuffled */
        pheap_off **s = calloc(n * (RW + 1), sizeof(*s));
        size_t ns = 0;
        for (size_t i = 0; i < n; i++) {
            pheap_off *p = pheap_direct(h, v[i]);
            for (unsigned w = 0; w < RW; w++)
                if (sz[i] >= 8 * (w + 1))
                    s[ns++] = &p[w]; /* 0 words included */
            s[ns++] = &dram[i];
        }
        for (size_t i = ns - 1; i > 0; i--) {
            size_t j = ph_test_rand(&rng) % (i + 1);
            pheap_off *t = s[i];
            s[i] = s[j], s[j] = t;
        }
        uint64_t live0 = stats(h).live_blocks;
        pheap_defrag_result r;
        int rc = pheap_defrag(h, s, ns, &r);
        if (rc)
            ph_test_fail(__FILE__, __LINE__, "iter %u: %s", iter, pheap_errmsg());
        for (size_t i = 0; i < n; i++) {
            if (pheap_usable_size(h, dram[i]) < sz[i]) {
                ph_test_fail(__FILE__, __LINE__, "iter %u: block %zu at %llu not live", iter, i,
                             (unsigned long long)dram[i]);
                continue;
            }
            pheap_off *p = pheap_direct(h, dram[i]);
            for (unsigned w = 0; w < RW; w++)
                if (sz[i] >= 8 * (w + 1) && p[w] != (tgt[i][w] ? dram[tgt[i][w] - 1] : 0))
                    ph_test_fail(__FILE__, __LINE__, "iter %u: block %zu word %u: %llu", iter, i,
                                 w, (unsigned long long)p[w]);
            if (sz[i] > 8 * RW && !ph_test_intact(p + RW, sz[i] - 8 * RW, i))
                ph_test_fail(__FILE__, __LINE__, "iter %u: block %zu contents", iter, i);
        }
        for (unsigned k = 0; k < nroots; k++) {
            char name[16];
            snprintf(name, sizeof(name), "r%u", k);
            CHECK_EQ(pheap_root_get(h, name), dram[root_of[k]]);
        }
        CHECK_EQ(stats(h).live_blocks, live0);
        sound(h, __LINE__);
        if (iter < 3)
            fprintf(stderr, "  iter %u: %zu blocks, %zu moved, %zu slabs freed\n", iter, r.total,
                    r.relocated, r.slabs_freed);
        REQUIRE_OK(pheap_close(h));
        free(s);
        free(tgt);
        free(dram);
        free(sz);
        free(v);
        unlink(ph_test_path("atk-rand.heap"));
        if (ph_test_failed)
            break;
    }
}
