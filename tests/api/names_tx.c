/*
 * names_tx.c -- named objects inside transactions: a name made in a
 * transaction exists with its block only after the commit, a name removed
 * in one goes only then; aborts, nesting, the same name twice, a name made
 * and removed in one transaction, what other threads see and may do
 * meanwhile, and the directory rebuilt by the commit.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static pheap *heap(const char *name)
{
    return ph_test_create(ph_test_path(name), 64u << 20);
}

static uint64_t live(pheap *h)
{
    struct pheap_stats st;
    pheap_stats(h, &st);
    return st.live_blocks;
}

static uint64_t names(pheap *h)
{
    struct pheap_stats st;
    pheap_stats(h, &st);
    return st.names;
}

static uint64_t segments(pheap *h)
{
    struct pheap_stats st;
    pheap_stats(h, &st);
    return st.name_segments;
}

static void check_clean(pheap *h)
{
    pheap_check_report r;
    int rc = pheap_check(h, &r);
    if (rc)
        ph_test_fail(__FILE__, __LINE__, "pheap_check: %s", r.first_error);
}

/* ---- another thread's view ---- */

typedef struct other {
    pheap *h;
    const char *name;
    pheap_off found;
    int lookup_err, create_err, free_err;
} other;

static void *other_run(void *arg)
{
    other *o = arg;
    o->found = pheap_lookup(o->h, o->name);
    o->lookup_err = o->found ? 0 : pheap_errno();
    pheap_off b = pheap_alloc_named(o->h, o->name, 8);
    o->create_err = b ? 0 : pheap_errno();
    o->free_err = pheap_free_named(o->h, o->name);
    return NULL;
}

static other other_view(pheap *h, const char *name)
{
    other o = {h, name, 0, 0, 0, 0};
    pthread_t th;
    pthread_create(&th, NULL, other_run, &o);
    pthread_join(th, NULL);
    return o;
}

TEST(abort_removes_name_and_block)
{
    pheap *h = heap("ntx-abort.heap");
    REQUIRE(h);
    REQUIRE(pheap_alloc_named(h, "seed", 8)); /* the directory's first segment */
    uint64_t live0 = live(h), names0 = names(h);
    REQUIRE_OK(pheap_tx_begin(h));
    pheap_off a = pheap_alloc_named(h, "a", 100);
    REQUIRE(a);
    CHECK_EQ(pheap_lookup(h, "a"), a); /* the thread's own transaction: seen */
    CHECK(pheap_usable_size(h, a) >= 100);
    other o = other_view(h, "a");
    CHECK_EQ(o.found, 0); /* others see the directory as committed */
    CHECK_EQ(o.lookup_err, PHEAP_ENOENT);
    CHECK_EQ(o.create_err, PHEAP_EBUSY); /* held by the transaction */
    CHECK_EQ(o.free_err, PHEAP_EBUSY);
    CHECK_EQ(names(h), names0);
    REQUIRE_OK(pheap_tx_abort(h));
    CHECK_EQ(pheap_lookup(h, "a"), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENOENT);
    CHECK_EQ(live(h), live0);
    CHECK_EQ(names(h), names0);
    check_clean(h);
    /* free again for others */
    o = other_view(h, "a");
    CHECK_EQ(o.create_err, 0);
    CHECK_EQ(o.free_err, 0);
    REQUIRE_OK(pheap_close(h));
}

TEST(commit_keeps_name_and_block)
{
    const char *path = ph_test_path("ntx-commit.heap");
    pheap *h = ph_test_create(path, 64u << 20);
    REQUIRE(h);
    uint64_t live0 = live(h);
    REQUIRE_OK(pheap_tx_begin(h));
    pheap_off a = pheap_alloc_named(h, "alpha", 300);
    REQUIRE(a);
    ph_test_fill(pheap_direct(h, a), 300, 11);
    pheap_off b = pheap_tx_alloc(h, 40); /* mixed with the other kinds of change */
    REQUIRE(b);
    REQUIRE_OK(pheap_tx_commit(h));
    CHECK_EQ(pheap_lookup(h, "alpha"), a);
    CHECK_EQ(names(h), 1);
    CHECK_EQ(live(h), live0 + 2 + segments(h));
    other o = other_view(h, "alpha");
    CHECK_EQ(o.found, a);
    CHECK_EQ(o.create_err, PHEAP_EEXIST);
    CHECK_EQ(o.free_err, 0); /* the other thread removes it */
    CHECK_EQ(pheap_lookup(h, "alpha"), 0);
    REQUIRE_OK(pheap_tx_begin(h));
    a = pheap_alloc_named(h, "alpha", 300);
    REQUIRE(a);
    ph_test_fill(pheap_direct(h, a), 300, 12);
    REQUIRE_OK(pheap_tx_commit(h));
    REQUIRE_OK(pheap_close(h));
    h = ph_test_open(path, NULL);
    REQUIRE(h);
    CHECK_EQ(pheap_lookup(h, "alpha"), a);
    CHECK(ph_test_intact(pheap_direct(h, a), 300, 12));
    check_clean(h);
    REQUIRE_OK(pheap_close(h));
}

TEST(free_in_tx_then_abort_keeps)
{
    pheap *h = heap("ntx-free-abort.heap");
    REQUIRE(h);
    pheap_off a = pheap_alloc_named(h, "kept", 64);
    REQUIRE(a);
    ph_test_fill(pheap_direct(h, a), 64, 5);
    uint64_t live0 = live(h);
    REQUIRE_OK(pheap_tx_begin(h));
    CHECK_EQ(pheap_free_named(h, "kept"), 0);
    CHECK_EQ(pheap_lookup(h, "kept"), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENOENT);
    CHECK_EQ(pheap_free_named(h, "kept"), PHEAP_ENOENT); /* removed by this transaction */
    other o = other_view(h, "kept");
    CHECK_EQ(o.found, a); /* still there for others until the commit */
    CHECK_EQ(o.create_err, PHEAP_EEXIST);
    CHECK_EQ(o.free_err, PHEAP_EBUSY);
    CHECK_EQ(live(h), live0);
    REQUIRE_OK(pheap_tx_abort(h));
    CHECK_EQ(pheap_lookup(h, "kept"), a);
    CHECK(ph_test_intact(pheap_direct(h, a), 64, 5));
    CHECK_EQ(live(h), live0);
    /* and committed: both go */
    REQUIRE_OK(pheap_tx_begin(h));
    CHECK_EQ(pheap_free_named(h, "kept"), 0);
    REQUIRE_OK(pheap_tx_commit(h));
    CHECK_EQ(pheap_lookup(h, "kept"), 0);
    CHECK_EQ(live(h), live0 - 1);
    CHECK_EQ(pheap_usable_size(h, a), 0);
    check_clean(h);
    REQUIRE_OK(pheap_close(h));
}

TEST(create_and_free_in_one_tx)
{
    pheap *h = heap("ntx-create-free.heap");
    REQUIRE(h);
    REQUIRE(pheap_alloc_named(h, "seed", 8));
    uint64_t live0 = live(h);
    REQUIRE_OK(pheap_tx_begin(h));
    pheap_off a = pheap_alloc_named(h, "brief", 50);
    REQUIRE(a);
    CHECK_EQ(pheap_free_named(h, "brief"), 0);
    CHECK_EQ(pheap_lookup(h, "brief"), 0);
    CHECK_EQ(pheap_free_named(h, "brief"), PHEAP_ENOENT);
    other o = other_view(h, "brief"); /* no longer held */
    CHECK_EQ(o.create_err, 0);
    CHECK_EQ(o.free_err, 0);
    pheap_off b = pheap_alloc_named(h, "brief", 70); /* made again */
    REQUIRE(b);
    CHECK_EQ(pheap_lookup(h, "brief"), b);
    REQUIRE_OK(pheap_tx_commit(h));
    CHECK_EQ(pheap_lookup(h, "brief"), b);
    CHECK_EQ(live(h), live0 + 1);
    check_clean(h);
    /* replaced: the old entry removed and a new one made in one transaction */
    pheap_off old = b;
    REQUIRE_OK(pheap_tx_begin(h));
    CHECK_EQ(pheap_free_named(h, "brief"), 0);
    pheap_off c = pheap_alloc_named(h, "brief", 900);
    REQUIRE(c);
    CHECK_EQ(pheap_alloc_named(h, "brief", 900), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EEXIST);
    CHECK_EQ(pheap_lookup(h, "brief"), c);
    o = other_view(h, "brief");
    CHECK_EQ(o.found, old);
    CHECK_EQ(o.free_err, PHEAP_EBUSY);
    REQUIRE_OK(pheap_tx_commit(h));
    CHECK_EQ(pheap_lookup(h, "brief"), c);
    CHECK_EQ(pheap_usable_size(h, old), 0);
    CHECK_EQ(live(h), live0 + 1);
    CHECK_EQ(names(h), 2);
    check_clean(h);
    REQUIRE_OK(pheap_close(h));
}

TEST(nesting)
{
    pheap *h = heap("ntx-nesting.heap");
    REQUIRE(h);
    REQUIRE(pheap_alloc_named(h, "outer", 8));
    uint64_t live0 = live(h);
    /* an inner commit closes a level only */
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE_OK(pheap_tx_begin(h));
    pheap_off a = pheap_alloc_named(h, "inner", 16);
    REQUIRE(a);
    CHECK_EQ(pheap_free_named(h, "outer"), 0);
    REQUIRE_OK(pheap_tx_commit(h));
    CHECK_EQ(pheap_tx_depth(h), 1);
    CHECK_EQ(pheap_lookup(h, "inner"), a);
    REQUIRE_OK(pheap_tx_abort(h)); /* the outer abort undoes the inner level's names */
    CHECK_EQ(pheap_lookup(h, "inner"), 0);
    CHECK(pheap_lookup(h, "outer") != 0);
    CHECK_EQ(live(h), live0);
    /* an inner abort aborts all: names calls refused until the levels close */
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE(pheap_alloc_named(h, "first", 16));
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE(pheap_alloc_named(h, "second", 16));
    REQUIRE_OK(pheap_tx_abort(h));
    CHECK_EQ(pheap_tx_depth(h), -1);
    CHECK_EQ(pheap_lookup(h, "first"), 0);
    CHECK_EQ(pheap_alloc_named(h, "third", 16), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EABORTED);
    CHECK_EQ(pheap_free_named(h, "outer"), PHEAP_EABORTED);
    CHECK_EQ(pheap_tx_commit(h), PHEAP_EABORTED);
    CHECK_EQ(pheap_tx_depth(h), 0);
    CHECK_EQ(pheap_lookup(h, "second"), 0);
    CHECK_EQ(live(h), live0);
    /* nested levels that all commit */
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE_OK(pheap_tx_begin(h));
    pheap_off d = pheap_alloc_named(h, "deep", 16);
    REQUIRE_OK(pheap_tx_commit(h));
    REQUIRE_OK(pheap_tx_commit(h));
    CHECK_EQ(pheap_lookup(h, "deep"), d);
    CHECK_EQ(live(h), live0 + 1);
    check_clean(h);
    REQUIRE_OK(pheap_close(h));
}

static int cancel_init(pheap *h, void *block, size_t usable, void *arg)
{
    (void)h, (void)block, (void)usable, (void)arg;
    return 1;
}

static int fill_init(pheap *h, void *block, size_t usable, void *arg)
{
    (void)h;
    ph_test_fill(block, usable, *(const uint64_t *)arg);
    return 0;
}

TEST(refusals_leave_the_tx_usable)
{
    pheap *h = heap("ntx-refusals.heap");
    REQUIRE(h);
    pheap_off d = pheap_alloc_named(h, "dup", 8);
    REQUIRE(d);
    uint64_t live0 = live(h);
    REQUIRE_OK(pheap_tx_begin(h));
    CHECK_EQ(pheap_alloc_named(h, "dup", 8), 0); /* exists: refused, the transaction goes on */
    CHECK_EQ(pheap_errno(), PHEAP_EEXIST);
    CHECK_EQ(pheap_tx_depth(h), 1);
    pheap_off e = pheap_alloc_named(h, "e", 8);
    REQUIRE(e);
    CHECK_EQ(pheap_alloc_named(h, "e", 8), 0); /* made by this transaction already */
    CHECK_EQ(pheap_errno(), PHEAP_EEXIST);
    CHECK_EQ(pheap_alloc_named(h, "", 8), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENAME);
    CHECK_EQ(pheap_alloc_named(h, "zero", 0), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EINVAL);
    CHECK_EQ(pheap_alloc_named(h, "huge", (size_t)1 << 62), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EINVAL);
    CHECK_EQ(pheap_alloc_named_init(h, "canceled", 64, 0, cancel_init, NULL), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ECANCELED);
    CHECK_EQ(pheap_lookup(h, "canceled"), 0);
    CHECK_EQ(pheap_alloc_named_init(h, "flags", 64, 0x100, NULL, NULL), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EINVAL);
    CHECK_EQ(pheap_free_named(h, "missing"), PHEAP_ENOENT);
    CHECK_EQ(pheap_free_named(h, NULL), PHEAP_ENAME);
    CHECK_EQ(pheap_tx_depth(h), 1);
    uint64_t seed = 99;
    pheap_off f = pheap_alloc_named_init(h, "filled", 128, 0, fill_init, &seed);
    REQUIRE(f);
    REQUIRE_OK(pheap_tx_commit(h));
    CHECK_EQ(pheap_lookup(h, "e"), e);
    CHECK_EQ(pheap_lookup(h, "dup"), d);
    CHECK_EQ(pheap_lookup(h, "canceled"), 0);
    CHECK(ph_test_intact(pheap_direct(h, f), 128, 99));
    CHECK_EQ(live(h), live0 + 2);
    /* a dangling name (its block freed by pheap_free): refused in a transaction */
    REQUIRE_OK(pheap_free(h, e));
    REQUIRE_OK(pheap_tx_begin(h));
    CHECK_EQ(pheap_free_named(h, "e"), PHEAP_ENOTLIVE);
    CHECK_EQ(pheap_lookup(h, "e"), e); /* nothing changed */
    REQUIRE_OK(pheap_tx_commit(h));
    CHECK_EQ(pheap_lookup(h, "e"), e);
    CHECK_EQ(pheap_free_named(h, "e"), PHEAP_ENOTLIVE); /* outside: the name alone goes */
    check_clean(h);
    REQUIRE_OK(pheap_close(h));
}

/* ---- other threads making names meanwhile, the commit rebuilding ---- */

typedef struct maker {
    pheap *h;
    unsigned from, n;
    int failed;
} maker;

static void *maker_run(void *arg)
{
    maker *m = arg;
    char name[64];
    for (unsigned i = m->from; i < m->from + m->n; i++) {
        snprintf(name, sizeof(name), "other-%u", i);
        if (!pheap_alloc_named(m->h, name, 24))
            m->failed++;
    }
    return NULL;
}

TEST(names_by_other_threads_meanwhile)
{
    const char *path = ph_test_path("ntx-others.heap");
    pheap *h = ph_test_create(path, 64u << 20);
    REQUIRE(h);
    char name[300];
    uint64_t live0 = live(h);
    REQUIRE_OK(pheap_tx_begin(h));
    for (unsigned i = 0; i < 300; i++) { /* long names: more lines than a segment's first size */
        snprintf(name, sizeof(name), "mine-%u-%0200u", i, i);
        pheap_off b = pheap_alloc_named(h, name, 32);
        REQUIRE(b);
        ph_test_fill(pheap_direct(h, b), 32, i);
    }
    maker m = {h, 0, 3000, 0};
    pthread_t th;
    pthread_create(&th, NULL, maker_run, &m);
    pthread_join(th, NULL);
    CHECK_EQ(m.failed, 0);
    CHECK_EQ(names(h), 3000);
    REQUIRE_OK(pheap_tx_commit(h));
    CHECK_EQ(names(h), 3300);
    CHECK_EQ(live(h), live0 + 3300 + segments(h));
    check_clean(h);
    REQUIRE_OK(pheap_close(h));
    h = ph_test_open(path, NULL);
    REQUIRE(h);
    for (unsigned i = 0; i < 300; i++) {
        snprintf(name, sizeof(name), "mine-%u-%0200u", i, i);
        pheap_off b = pheap_lookup(h, name);
        CHECK(b && ph_test_intact(pheap_direct(h, b), 32, i));
    }
    /* every one of them removed in one transaction, half of the others' made again */
    REQUIRE_OK(pheap_tx_begin(h));
    for (unsigned i = 0; i < 300; i++) {
        snprintf(name, sizeof(name), "mine-%u-%0200u", i, i);
        CHECK_EQ(pheap_free_named(h, name), 0);
    }
    for (unsigned i = 0; i < 3000; i += 2) {
        snprintf(name, sizeof(name), "other-%u", i);
        CHECK_EQ(pheap_free_named(h, name), 0);
        CHECK(pheap_alloc_named(h, name, 48) != 0);
    }
    REQUIRE_OK(pheap_tx_commit(h));
    CHECK_EQ(names(h), 3000);
    CHECK_EQ(live(h), live0 + 3000 + segments(h));
    check_clean(h);
    REQUIRE_OK(pheap_close(h));
}

/* A committed transaction with one named object costs the three fences of
 * a redo commit; lookups in it write nothing. */
TEST(fences)
{
    const char *path = ph_test_path("ntx-fences.heap");
    pheap_options o = {.size = 16u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL,
                       .flush = PHEAP_FLUSH_NONE};
    pheap *h = NULL;
    REQUIRE_OK(pheap_open(path, &o, &h));
    REQUIRE(pheap_alloc_named(h, "seed", 8));
    REQUIRE_OK(pheap_free(h, pheap_alloc(h, 64))); /* the size class has a slab */
    REQUIRE_OK(pheap_tx_begin(h)); /* the lane's first transaction raises its ceiling */
    REQUIRE_OK(pheap_tx_commit(h));
    struct pheap_stats a, b;
    pheap_stats(h, &a);
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE(pheap_alloc_named(h, "one", 64));
    REQUIRE(pheap_lookup(h, "one"));
    REQUIRE_OK(pheap_tx_commit(h));
    pheap_stats(h, &b);
    CHECK_EQ(b.fences - a.fences, 3);
    REQUIRE_OK(pheap_tx_begin(h));
    CHECK_EQ(pheap_free_named(h, "one"), 0);
    REQUIRE_OK(pheap_tx_commit(h));
    pheap_stats(h, &a);
    CHECK_EQ(a.fences - b.fences, 3);
    REQUIRE_OK(pheap_close(h));
}

/* A thread that exits with a transaction open, a heap closed with one
 * open: rolled back, the names let go. */
static void *exit_in_tx(void *arg)
{
    pheap *h = arg;
    if (pheap_tx_begin(h) == 0)
        pheap_alloc_named(h, "left", 16);
    return NULL;
}

TEST(thread_exit_and_close_roll_back)
{
    const char *path = ph_test_path("ntx-exit.heap");
    pheap *h = ph_test_create(path, 16u << 20);
    REQUIRE(h);
    pthread_t th;
    pthread_create(&th, NULL, exit_in_tx, h);
    pthread_join(th, NULL);
    CHECK_EQ(pheap_lookup(h, "left"), 0);
    REQUIRE(pheap_alloc_named(h, "left", 16)); /* not held any more */
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE(pheap_alloc_named(h, "open", 16));
    REQUIRE_OK(pheap_close(h));
    h = ph_test_open(path, NULL);
    REQUIRE(h);
    CHECK_EQ(pheap_lookup(h, "open"), 0);
    CHECK(pheap_lookup(h, "left") != 0);
    check_clean(h);
    REQUIRE_OK(pheap_close(h));
}

/* A heap of format 1.4 (names, no owner): names in transactions work the
 * same, since they change nothing in the format. */
TEST(format_1_4_heap)
{
    const char *path = ph_test_path("ntx-1.4.heap");
    pheap *h = ph_test_create(path, 16u << 20);
    REQUIRE(h);
    REQUIRE(pheap_alloc_named(h, "old", 16));
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(ph_test_as_format_1_4(path));
    h = ph_test_open(path, NULL);
    REQUIRE(h);
    REQUIRE_OK(pheap_tx_begin(h));
    pheap_off a = pheap_alloc_named(h, "new", 16);
    REQUIRE(a);
    CHECK_EQ(pheap_free_named(h, "old"), 0);
    REQUIRE_OK(pheap_tx_commit(h));
    REQUIRE_OK(pheap_close(h));
    h = ph_test_open(path, NULL);
    REQUIRE(h);
    CHECK_EQ(pheap_lookup(h, "new"), a);
    CHECK_EQ(pheap_lookup(h, "old"), 0);
    check_clean(h);
    REQUIRE_OK(pheap_close(h));
}
