/*
 * names_million.c -- a million named objects: created, the heap closed and
 * reopened, every name found with its contents, iteration visiting each
 * name exactly once, pheap_check clean, then every name removed.
 *
 * The heap is opened with PHEAP_FLUSH_NONE unless PHEAP_FLUSH is set in
 * the environment: this test is about the directory's size and shape (a
 * million entries over hundreds of segments, the directory doubled many
 * times), not about durability, which the crash and kill tests judge; a
 * fence per call would make it a flush benchmark of the machine.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

enum { N = 1000000 };

static size_t name_of(char *buf, size_t n, unsigned i)
{
    return (size_t)snprintf(buf, n, "n%u", i);
}

/* 16 to 64 bytes: the object's index, then a pattern seeded by it. */
static size_t size_of(unsigned i)
{
    return 16 + (size_t)(i * 2654435761u >> 7) % 49;
}

static uint64_t seed_of(unsigned i)
{
    return 0x6e616d6573000000ull ^ (uint64_t)i * 0x9e3779b97f4a7c15ull;
}

static int fill(pheap *h, void *block, size_t usable, void *arg)
{
    (void)h, (void)usable;
    unsigned i = *(const unsigned *)arg;
    uint64_t w = i;
    memcpy(block, &w, 8);
    ph_test_fill((char *)block + 8, size_of(i) - 8, seed_of(i));
    return 0;
}

static int intact(pheap *h, pheap_off off, unsigned i)
{
    const char *b = pheap_direct(h, off);
    uint64_t w;
    if (!b || pheap_usable_size(h, off) < size_of(i))
        return 0;
    memcpy(&w, b, 8);
    return w == i && ph_test_intact(b + 8, size_of(i) - 8, seed_of(i));
}

static unsigned flush_kind(void)
{
    return getenv("PHEAP_FLUSH") ? PHEAP_FLUSH_AUTO : PHEAP_FLUSH_NONE;
}

TEST(a_million_names)
{
    const char *path = ph_test_path("names-million.heap");
    unlink(path);
    pheap_options o = {.size = 64u << 20, .max_size = 1ull << 30,
                       .flags = PHEAP_CREATE | PHEAP_EXCL, .flush = flush_kind()};
    pheap *h = ph_test_open(path, &o);
    REQUIRE(h);
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    uint64_t base_blocks = st.live_blocks;
    char name[32];
    for (unsigned i = 0; i < N; i++) {
        name_of(name, sizeof(name), i);
        if (!pheap_alloc_named_init(h, name, size_of(i), 0, fill, &i)) {
            ph_test_fail(__FILE__, __LINE__, "create %s: %s", name, pheap_errmsg());
            pheap_close(h);
            return;
        }
    }
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.names, N);
    CHECK_EQ(st.live_blocks, base_blocks + N + st.name_segments);
    uint64_t segments = st.name_segments;
    REQUIRE_OK(pheap_close(h));

    o.flags = 0;
    h = ph_test_open(path, &o);
    REQUIRE(h);
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.was_unclean, 0);
    CHECK_EQ(st.names, N);
    CHECK_EQ(st.name_segments, segments);
    unsigned missing = 0, damaged = 0;
    for (unsigned i = 0; i < N; i++) {
        name_of(name, sizeof(name), i);
        pheap_off off = pheap_lookup(h, name);
        if (!off)
            missing++;
        else if (!intact(h, off, i))
            damaged++;
        if ((!off || !intact(h, off, i)) && missing + damaged <= 5)
            ph_test_fail(__FILE__, __LINE__, "%s: %s after the reopen", name,
                         off ? "contents lost" : "not found");
    }
    CHECK_EQ(missing, 0);
    CHECK_EQ(damaged, 0);

    /* iteration: every name once, its size and block those of its creation */
    unsigned char *seen = calloc(N, 1);
    REQUIRE(seen);
    pheap_name_info info;
    uint64_t visits = 0, twice = 0, wrong = 0, prev_hash = 0;
    int rc;
    for (rc = pheap_name_next(h, NULL, &info); rc == 0; rc = pheap_name_next(h, info.name, &info)) {
        char *end;
        unsigned long i = strtoul(info.name + 1, &end, 10);
        if (info.name[0] != 'n' || *end || i >= N || info.len != strlen(info.name)) {
            if (wrong++ == 0)
                ph_test_fail(__FILE__, __LINE__, "iteration reports '%s', never created",
                             info.name);
        } else if (seen[i]++) {
            twice++;
        } else if (info.size != size_of((unsigned)i) || info.off != pheap_lookup(h, info.name) ||
                   !intact(h, info.off, (unsigned)i)) {
            if (wrong++ == 0)
                ph_test_fail(__FILE__, __LINE__, "iteration: %s reports size %llu at %llu",
                             info.name, (unsigned long long)info.size,
                             (unsigned long long)info.off);
        }
        if (visits && info.hash < prev_hash && wrong++ == 0)
            ph_test_fail(__FILE__, __LINE__, "iteration goes back in hash order at %s",
                         info.name);
        prev_hash = info.hash;
        if (++visits > N + 10u)
            break;
    }
    CHECK_EQ(rc, PHEAP_ENOENT);
    CHECK_EQ(visits, N);
    CHECK_EQ(twice, 0);
    CHECK_EQ(wrong, 0);
    unsigned unseen = 0;
    for (unsigned i = 0; i < N; i++)
        unseen += !seen[i];
    CHECK_EQ(unseen, 0);
    free(seen);

    pheap_check_report r;
    if (pheap_check(h, &r) != 0)
        ph_test_fail(__FILE__, __LINE__, "pheap_check: %s", r.first_error);
    CHECK_EQ(r.names, N);
    CHECK_EQ(r.live_blocks, base_blocks + N + segments);

    /* remove them all, in another order than they were made */
    unsigned failed = 0;
    for (unsigned k = 0; k < N; k++) {
        unsigned i = (unsigned)((k * 7919ull) % N); /* 7919 is prime, N is not its multiple */
        name_of(name, sizeof(name), i);
        if (pheap_free_named(h, name) != 0 && failed++ < 5)
            ph_test_fail(__FILE__, __LINE__, "remove %s: %s", name, pheap_errmsg());
    }
    CHECK_EQ(failed, 0);
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.names, 0);
    CHECK_EQ(st.live_blocks, base_blocks + st.name_segments);
    CHECK_EQ(pheap_name_next(h, NULL, &info), PHEAP_ENOENT);
    name_of(name, sizeof(name), 12345);
    CHECK_EQ(pheap_lookup(h, name), 0);
    if (pheap_check(h, &r) != 0)
        ph_test_fail(__FILE__, __LINE__, "pheap_check after removing all: %s", r.first_error);
    CHECK_EQ(r.names, 0);
    printf("names_million: %u names in %llu segments\n", N, (unsigned long long)segments);
    REQUIRE_OK(pheap_close(h));
}
