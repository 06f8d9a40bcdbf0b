/*
 * names.c -- named objects: every call and every misuse, many names across
 * directory rebuilds and a reopen, iteration while names come and go, GC
 * tracing through names, pheap_check of dangling and damaged names.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static void name_of(char *buf, size_t n, unsigned i)
{
    snprintf(buf, n, "object-%u", i);
}

static int fill_init(pheap *h, void *block, size_t usable, void *arg)
{
    (void)h;
    memset(block, *(const int *)arg, usable);
    return 0;
}

static int cancel_init(pheap *h, void *block, size_t usable, void *arg)
{
    (void)h, (void)block, (void)usable, (void)arg;
    return 1;
}

TEST(create_lookup_free)
{
    const char *path = ph_test_path("names.heap");
    pheap *h = ph_test_create(path, 8u << 20);
    REQUIRE(h);
    struct pheap_stats st0, st;
    REQUIRE_OK(pheap_stats(h, &st0));
    CHECK_EQ(st0.names, 0);
    CHECK_EQ(pheap_lookup(h, "config"), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENOENT);
    pheap_off a = pheap_alloc_named(h, "config", 100);
    REQUIRE(a);
    CHECK(pheap_usable_size(h, a) >= 100);
    CHECK_EQ(pheap_lookup(h, "config"), a);
    strcpy(pheap_direct(h, a), "hello");
    /* duplicate: refused, nothing changes */
    CHECK_EQ(pheap_alloc_named(h, "config", 10), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EEXIST);
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.names, 1);
    CHECK_EQ(st.name_segments, 1);
    CHECK_EQ(st.live_blocks, st0.live_blocks + 2); /* the block and the directory segment */
    /* a large named block, and one made by an initialiser */
    pheap_off big = pheap_alloc_named(h, "big", 100000);
    REQUIRE(big);
    CHECK(pheap_usable_size(h, big) >= 100000);
    int byte = 0x5a;
    pheap_off filled = pheap_alloc_named_init(h, "filled", 300, 0, fill_init, &byte);
    REQUIRE(filled);
    CHECK_EQ(((unsigned char *)pheap_direct(h, filled))[299], 0x5a);
    CHECK_EQ(pheap_alloc_named_init(h, "canceled", 300, 0, cancel_init, NULL), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ECANCELED);
    CHECK_EQ(pheap_lookup(h, "canceled"), 0);
    pheap_off zeroed = pheap_alloc_named_init(h, "zeroed", 64, PHEAP_ALLOC_ZERO, NULL, NULL);
    REQUIRE(zeroed);
    CHECK_EQ(*(uint64_t *)pheap_direct(h, zeroed), 0);
    CHECK_EQ(pheap_alloc_named_init(h, "flags", 64, 0x80, NULL, NULL), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EINVAL);
    pheap_check_report r;
    REQUIRE_OK(pheap_check(h, &r));
    CHECK_EQ(r.names, 4);
    REQUIRE_OK(pheap_close(h));

    REQUIRE_OK(pheap_open(path, NULL, &h));
    CHECK_EQ(pheap_lookup(h, "config"), a);
    CHECK(strcmp(pheap_direct(h, a), "hello") == 0);
    CHECK_EQ(pheap_lookup(h, "big"), big);
    REQUIRE_OK(pheap_free_named(h, "big"));
    CHECK_EQ(pheap_lookup(h, "big"), 0);
    CHECK_EQ(pheap_free_named(h, "big"), PHEAP_ENOENT); /* twice */
    CHECK_EQ(pheap_free(h, big), PHEAP_EDOUBLEFREE);    /* the block went with it */
    REQUIRE_OK(pheap_free_named(h, "config"));
    REQUIRE_OK(pheap_free_named(h, "filled"));
    REQUIRE_OK(pheap_free_named(h, "zeroed"));
    /* the name is free again */
    pheap_off again = pheap_alloc_named(h, "config", 8);
    REQUIRE(again);
    REQUIRE_OK(pheap_free_named(h, "config"));
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.names, 0);
    CHECK_EQ(st.live_blocks, st0.live_blocks + 1); /* the segment stays */
    REQUIRE_OK(pheap_check(h, &r));
    pheap_close(h);
}

TEST(misuse)
{
    const char *path = ph_test_path("names-misuse.heap");
    pheap *h = ph_test_create(path, 8u << 20);
    REQUIRE(h);
    char longest[PHEAP_NAME_MAX + 2];
    memset(longest, 'x', sizeof(longest));
    longest[PHEAP_NAME_MAX] = '\0';
    pheap_off a = pheap_alloc_named(h, longest, 16); /* 255 bytes: the limit */
    REQUIRE(a);
    CHECK_EQ(pheap_lookup(h, longest), a);
    longest[PHEAP_NAME_MAX] = 'x';
    longest[PHEAP_NAME_MAX + 1] = '\0';
    CHECK_EQ(pheap_alloc_named(h, longest, 16), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENAME);
    CHECK_EQ(pheap_lookup(h, longest), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENAME);
    CHECK_EQ(pheap_free_named(h, longest), PHEAP_ENAME);
    CHECK_EQ(pheap_alloc_named(h, "", 16), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENAME);
    CHECK_EQ(pheap_alloc_named(h, NULL, 16), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENAME);
    CHECK_EQ(pheap_lookup(h, ""), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENAME);
    CHECK_EQ(pheap_free_named(h, ""), PHEAP_ENAME);
    CHECK_EQ(pheap_alloc_named(h, "zero", 0), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EINVAL);
    CHECK_EQ(pheap_lookup(h, "zero"), 0);
    CHECK_EQ(pheap_alloc_named(NULL, "n", 8), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EINVAL);
    CHECK_EQ(pheap_lookup(NULL, "n"), 0);
    CHECK_EQ(pheap_free_named(NULL, "n"), PHEAP_EINVAL);
    CHECK_EQ(pheap_free_named(h, "missing"), PHEAP_ENOENT);
    /* heap full: refused, nothing named */
    CHECK_EQ(pheap_alloc_named(h, "huge", 1ull << 40), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENOMEM);
    CHECK_EQ(pheap_lookup(h, "huge"), 0);
    /* inside a transaction: refused */
    pheap_off x = pheap_alloc_named(h, "x", 32);
    REQUIRE(x);
    REQUIRE_OK(pheap_tx_begin(h));
    CHECK_EQ(pheap_alloc_named(h, "in-tx", 16), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENOTSUP);
    CHECK_EQ(pheap_free_named(h, "x"), PHEAP_ENOTSUP);
    CHECK_EQ(pheap_lookup(h, "x"), x); /* reading is fine */
    REQUIRE_OK(pheap_tx_commit(h));
    /* the block freed behind the name's back: the name dangles */
    REQUIRE_OK(pheap_free(h, x));
    pheap_check_report r;
    CHECK_EQ(pheap_check(h, &r), PHEAP_ECORRUPT);
    CHECK(strstr(r.first_error, "'x'") != NULL);
    CHECK_EQ(pheap_free_named(h, "x"), PHEAP_ENOTLIVE); /* the name alone goes */
    CHECK_EQ(pheap_lookup(h, "x"), 0);
    REQUIRE_OK(pheap_check(h, &r));
    REQUIRE_OK(pheap_close(h));
    /* read-only */
    pheap_options ro = {.flags = PHEAP_RDONLY};
    REQUIRE_OK(pheap_open(path, &ro, &h));
    longest[PHEAP_NAME_MAX] = '\0';
    CHECK_EQ(pheap_lookup(h, longest), a);
    CHECK_EQ(pheap_alloc_named(h, "ro", 8), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ERDONLY);
    CHECK_EQ(pheap_free_named(h, longest), PHEAP_ERDONLY);
    CHECK_EQ(pheap_lookup(h, longest), a);
    pheap_close(h);
}

/* pheap_check of a heap with no name, then with a directory whose last
 * name was removed: nothing to compare (run under UBSan: no sort of an
 * empty, unallocated list). */
TEST(check_without_names)
{
    pheap *h = ph_test_create(ph_test_path("names-none.heap"), 8u << 20);
    REQUIRE(h);
    pheap_check_report r;
    REQUIRE_OK(pheap_check(h, &r));
    CHECK_EQ(r.names, 0);
    REQUIRE(pheap_alloc_named(h, "only", 32));
    REQUIRE_OK(pheap_check(h, &r));
    CHECK_EQ(r.names, 1);
    REQUIRE_OK(pheap_free_named(h, "only"));
    REQUIRE_OK(pheap_check(h, &r));
    CHECK_EQ(r.names, 0);
    REQUIRE_OK(pheap_close(h));
}

/* Many names through several segment rebuilds (grow, split, directory
 * doubling), every one found, iteration complete and ordered, the check
 * clean; again after a reopen; then most removed. */
TEST(many_names_iterate_reopen)
{
    const char *path = ph_test_path("names-many.heap");
    pheap *h = ph_test_create(path, 256u << 20);
    REQUIRE(h);
    enum { N = 50000 };
    static pheap_off offs[N];
    char name[64];
    for (unsigned i = 0; i < N; i++) {
        name_of(name, sizeof(name), i);
        if (i % 7 == 0) /* some names past one line */
            snprintf(name, sizeof(name), "a-rather-long-name-that-takes-two-lines-%u", i);
        offs[i] = pheap_alloc_named(h, name, 8 + i % 200);
        REQUIRE(offs[i]);
        *(uint32_t *)pheap_direct(h, offs[i]) = i;
    }
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.names, N);
    CHECK(st.name_segments > 8);
    pheap_check_report r;
    REQUIRE_OK(pheap_check(h, &r));
    CHECK_EQ(r.names, N);
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(pheap_open(path, NULL, &h));
    for (unsigned i = 0; i < N; i++) {
        name_of(name, sizeof(name), i);
        if (i % 7 == 0)
            snprintf(name, sizeof(name), "a-rather-long-name-that-takes-two-lines-%u", i);
        pheap_off off = pheap_lookup(h, name);
        CHECK_EQ(off, offs[i]);
        CHECK_EQ(*(uint32_t *)pheap_direct(h, off), i);
    }
    /* iteration: each name once, in increasing order */
    static unsigned char seen[N];
    pheap_name_info info, prev;
    unsigned count = 0;
    const char *after = NULL;
    while (pheap_name_next(h, after, &info) == 0) {
        uint32_t i = *(uint32_t *)pheap_direct(h, info.off);
        REQUIRE(i < N);
        CHECK(!seen[i]);
        seen[i] = 1;
        CHECK_EQ(info.size, 8 + i % 200);
        CHECK_EQ(strlen(info.name), info.len);
        if (count)
            CHECK(info.hash > prev.hash || (info.hash == prev.hash && info.len >= prev.len));
        prev = info;
        after = prev.name;
        count++;
    }
    CHECK_EQ(count, N);
    CHECK_EQ(pheap_errno(), PHEAP_ENOENT);
    /* remove nine in ten, the rest stay findable */
    for (unsigned i = 0; i < N; i++) {
        if (i % 10 == 0)
            continue;
        name_of(name, sizeof(name), i);
        if (i % 7 == 0)
            snprintf(name, sizeof(name), "a-rather-long-name-that-takes-two-lines-%u", i);
        REQUIRE_OK(pheap_free_named(h, name));
    }
    for (unsigned i = 0; i < N; i += 10) {
        name_of(name, sizeof(name), i);
        if (i % 7 == 0)
            snprintf(name, sizeof(name), "a-rather-long-name-that-takes-two-lines-%u", i);
        CHECK_EQ(pheap_lookup(h, name), offs[i]);
    }
    REQUIRE_OK(pheap_check(h, &r));
    CHECK_EQ(r.names, N / 10);
    pheap_close(h);
}

/* Iteration keeps going while the iterating thread adds and removes names. */
TEST(iterate_while_changing)
{
    pheap *h = ph_test_create(ph_test_path("names-iter.heap"), 64u << 20);
    REQUIRE(h);
    char name[64];
    enum { N = 3000 };
    for (unsigned i = 0; i < N; i++) {
        name_of(name, sizeof(name), i);
        REQUIRE(pheap_alloc_named(h, name, 16));
    }
    pheap_name_info info;
    char after[PHEAP_NAME_MAX + 1];
    unsigned seen = 0, made = 0;
    /* the cursor may be the output's own buffer */
    unsigned all = 0;
    for (int r = pheap_name_next(h, NULL, &info); r == 0; r = pheap_name_next(h, info.name, &info))
        REQUIRE(++all <= N);
    CHECK_EQ(all, N);
    int rc = pheap_name_next(h, NULL, &info);
    while (rc == 0) {
        seen++;
        strcpy(after, info.name);
        REQUIRE_OK(pheap_free_named(h, after)); /* the current one goes */
        name_of(name, sizeof(name), N + made++);
        pheap_off made_off = pheap_alloc_named(h, name, 16); /* and a new one comes, anywhere */
        if (!made_off)
            ph_test_fail(__FILE__, __LINE__, "create %s: %s", name, pheap_errmsg());
        REQUIRE(made_off);
        rc = pheap_name_next(h, after, &info);
        REQUIRE(seen < 4 * N);
    }
    CHECK_EQ(rc, PHEAP_ENOENT);
    CHECK(seen >= N); /* every original name, plus new ones that sorted later */
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.names, N);
    pheap_check_report r;
    REQUIRE_OK(pheap_check(h, &r));
    pheap_close(h);
}

/* Tracing follows names: pheap_gc keeps named blocks and what they
 * reference, and the directory's own blocks. */
TEST(gc_keeps_named)
{
    pheap *h = ph_test_create(ph_test_path("names-gc.heap"), 16u << 20);
    REQUIRE(h);
    pheap_off a = pheap_alloc_named(h, "list", 64);
    REQUIRE(a);
    pheap_off child = pheap_alloc(h, 128), garbage = pheap_alloc(h, 128);
    REQUIRE(child && garbage);
    *(uint64_t *)pheap_direct(h, a) = child;
    pheap_gc_report rep;
    REQUIRE_OK(pheap_gc_ex(h, NULL, &rep));
    CHECK_EQ(rep.freed_blocks, 1);
    CHECK(pheap_usable_size(h, child) >= 128);
    CHECK_EQ(pheap_lookup(h, "list"), a);
    pheap_check_report r;
    REQUIRE_OK(pheap_check(h, &r));
    CHECK_EQ(r.names, 1);
    pheap_close(h);
}

/* GC mode: a crash, then recovery traces from the names: the named blocks
 * and what they reference survive, the rest is freed, lookups work before
 * recovery, creating waits for it. */
TEST(gc_mode_names)
{
    const char *path = ph_test_path("names-gcmode.heap");
    const char *image = ph_test_path("names-gcmode.img");
    static char img[512];
    snprintf(img, sizeof(img), "%s", image);
    pheap *h = ph_test_create_mode(path, 32u << 20, PHEAP_CONSISTENCY_GC, PHEAP_SIMULATE);
    REQUIRE(h);
    char name[64];
    enum { N = 2000 };
    for (unsigned i = 0; i < N; i++) {
        name_of(name, sizeof(name), i);
        pheap_off o = pheap_alloc_named(h, name, 24);
        REQUIRE(o);
        pheap_off child = pheap_alloc(h, 40);
        REQUIRE(child);
        *(uint64_t *)pheap_direct(h, o) = child; /* reachable through the name */
        pheap_persist(h, pheap_direct(h, o), 8);
        REQUIRE(pheap_alloc(h, 40)); /* garbage */
    }
    for (unsigned i = 0; i < N; i += 2) {
        name_of(name, sizeof(name), i);
        REQUIRE_OK(pheap_free_named(h, name));
    }
    REQUIRE_OK(pheap_sim_crash(h, img, 1, 0.0));
    REQUIRE_OK(pheap_open(img, NULL, &h));
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.needs_recovery, 1);
    name_of(name, sizeof(name), 1);
    CHECK(pheap_lookup(h, name) != 0);
    CHECK_EQ(pheap_alloc_named(h, "new", 8), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ERECOVER);
    REQUIRE_OK(pheap_recover(h));
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.names, N / 2);
    /* the named blocks, their children, the segments */
    CHECK_EQ(st.live_blocks, N / 2 * 2 + st.name_segments);
    for (unsigned i = 1; i < N; i += 2) {
        name_of(name, sizeof(name), i);
        pheap_off o = pheap_lookup(h, name);
        REQUIRE(o);
        CHECK(pheap_usable_size(h, *(uint64_t *)pheap_direct(h, o)) >= 40);
    }
    pheap_check_report r;
    REQUIRE_OK(pheap_check(h, &r));
    CHECK_EQ(r.names, N / 2);
    REQUIRE(pheap_alloc_named(h, "new", 8));
    REQUIRE_OK(pheap_close(h));
}
