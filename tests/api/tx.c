/*
 * tx.c -- the transaction calls one by one: what each does, what it costs
 * in fences, what it returns at every nesting level after an abort, and
 * every misuse refused with its own code and nothing changed.
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "format/layout.h"

static pheap *fresh_heap(const char *name)
{
    const char *path = ph_test_path(name);
    unlink(path);
    pheap_options o = {.size = 16u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL,
                       .flush = PHEAP_FLUSH_NONE};
    pheap *h = NULL;
    if (pheap_open(path, &o, &h))
        ph_test_fail(__FILE__, __LINE__, "create: %s", pheap_errmsg());
    return h;
}

static struct pheap_stats stats(pheap *h)
{
    struct pheap_stats st;
    pheap_stats(h, &st);
    return st;
}

/* rc must be `want`, with pheap_errno() agreeing and a message. */
#define EXPECT(call, want)                                                                     \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_ != (want))                                                                     \
            ph_test_fail(__FILE__, __LINE__, "%s -> %d (%s), want %d", #call, rc_,            \
                         rc_ ? pheap_errmsg() : "", (want));                                   \
        else if (rc_ && (pheap_errno() != rc_ || !pheap_errmsg()[0]))                          \
            ph_test_fail(__FILE__, __LINE__, "%s: errno %d, message '%s'", #call,             \
                         pheap_errno(), pheap_errmsg());                                       \
    } while (0)

TEST(commit_makes_every_change)
{
    pheap *h = fresh_heap("tx-commit.heap");
    REQUIRE(h);
    pheap_off a = pheap_alloc(h, 64), old = pheap_alloc(h, 100);
    uint64_t *w = pheap_direct(h, a);
    memset(w, 0, 64);
    uint64_t live0 = stats(h).live_blocks;
    REQUIRE_OK(pheap_tx_begin(h));
    CHECK_EQ(pheap_tx_depth(h), 1);
    pheap_off b = pheap_tx_alloc(h, 200);
    REQUIRE(b);
    ph_test_fill(pheap_direct(h, b), 200, 7);
    uint64_t v = b, r = 0;
    REQUIRE_OK(pheap_tx_write(h, &w[0], &v, 8));
    CHECK_EQ(w[0], 0); /* not before the commit */
    REQUIRE_OK(pheap_tx_read(h, &r, &w[0], 8));
    CHECK_EQ(r, b);    /* but through the transaction */
    REQUIRE_OK(pheap_tx_add(h, &w[1], 16));
    w[1] = 11;
    w[2] = 12;
    REQUIRE_OK(pheap_tx_free(h, old));
    CHECK(pheap_usable_size(h, old) > 0); /* still live until the commit */
    REQUIRE_OK(pheap_tx_commit(h));
    CHECK_EQ(pheap_tx_depth(h), 0);
    CHECK_EQ(w[0], b);
    CHECK_EQ(w[1], 11);
    CHECK_EQ(w[2], 12);
    CHECK(ph_test_intact(pheap_direct(h, b), 200, 7));
    CHECK_EQ(pheap_usable_size(h, old), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EDOUBLEFREE);
    struct pheap_stats st = stats(h);
    CHECK_EQ(st.live_blocks, live0);
    CHECK_EQ(st.tx_commits, 1);
    CHECK_EQ(st.tx_aborts, 0);
    CHECK(pheap_check(h, NULL) == 0);
    REQUIRE_OK(pheap_close(h));
}

TEST(abort_undoes_everything)
{
    pheap *h = fresh_heap("tx-abort.heap");
    REQUIRE(h);
    pheap_off a = pheap_alloc(h, 4096), keep = pheap_alloc(h, 64);
    ph_test_fill(pheap_direct(h, a), 4096, 1);
    struct pheap_stats st0 = stats(h);
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE_OK(pheap_tx_add(h, pheap_direct(h, a), 4096));
    memset(pheap_direct(h, a), 0xee, 4096);
    pheap_off b = pheap_tx_alloc(h, 64), big = pheap_tx_alloc(h, 200000);
    REQUIRE(b && big);
    REQUIRE_OK(pheap_tx_free(h, keep));
    uint64_t v = 5;
    REQUIRE_OK(pheap_tx_write(h, pheap_direct(h, keep), &v, 8));
    REQUIRE_OK(pheap_tx_abort(h));
    CHECK_EQ(pheap_tx_depth(h), 0);
    CHECK(ph_test_intact(pheap_direct(h, a), 4096, 1));
    CHECK(pheap_usable_size(h, keep) > 0);
    struct pheap_stats st = stats(h);
    CHECK_EQ(st.live_blocks, st0.live_blocks);
    CHECK_EQ(st.tx_aborts, 1);
    CHECK_EQ(st.tx_commits, 0);
    CHECK(pheap_check(h, NULL) == 0);
    /* The reserved blocks went back: the next allocations may reuse them. */
    REQUIRE_OK(pheap_tx_begin(h));
    CHECK(pheap_tx_alloc(h, 200000) != 0);
    REQUIRE_OK(pheap_tx_commit(h));
    CHECK_EQ(stats(h).live_blocks, st0.live_blocks + 1);
    REQUIRE_OK(pheap_close(h));
}

TEST(nesting_and_what_each_level_returns_after_an_abort)
{
    pheap *h = fresh_heap("tx-nest.heap");
    REQUIRE(h);
    pheap_off a = pheap_alloc(h, 64);
    uint64_t *w = pheap_direct(h, a);
    w[0] = 1;
    /* Inner commits only close their level. */
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE_OK(pheap_tx_begin(h));
    CHECK_EQ(pheap_tx_depth(h), 2);
    REQUIRE_OK(pheap_tx_add(h, w, 8));
    w[0] = 2;
    REQUIRE_OK(pheap_tx_commit(h));
    CHECK_EQ(pheap_tx_depth(h), 1);
    CHECK_EQ(stats(h).tx_commits, 0);
    REQUIRE_OK(pheap_tx_commit(h));
    CHECK_EQ(stats(h).tx_commits, 1);
    CHECK_EQ(w[0], 2);
    /* An inner abort rolls back the whole; every call but commit and
     * abort fails until the levels are closed. */
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE_OK(pheap_tx_add(h, w, 8));
    w[0] = 3;
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE_OK(pheap_tx_abort(h));
    CHECK_EQ(w[0], 2);              /* rolled back at once */
    CHECK_EQ(pheap_tx_depth(h), -2); /* two levels open, aborted */
    EXPECT(pheap_tx_begin(h), PHEAP_EABORTED);
    CHECK_EQ(pheap_tx_depth(h), -2); /* a refused begin opens no level */
    EXPECT(pheap_tx_add(h, w, 8), PHEAP_EABORTED);
    uint64_t v = 9;
    EXPECT(pheap_tx_write(h, w, &v, 8), PHEAP_EABORTED);
    EXPECT(pheap_tx_read(h, &v, w, 8), PHEAP_EABORTED);
    EXPECT(pheap_tx_free(h, a), PHEAP_EABORTED);
    CHECK_EQ(pheap_tx_alloc(h, 64), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EABORTED);
    EXPECT(pheap_tx_commit(h), PHEAP_EABORTED); /* closes its level */
    CHECK_EQ(pheap_tx_depth(h), -1);
    EXPECT(pheap_tx_abort(h), 0);               /* closes the last */
    CHECK_EQ(pheap_tx_depth(h), 0);
    CHECK_EQ(w[0], 2);
    CHECK_EQ(stats(h).tx_aborts, 1);
    /* A new transaction works normally after it. */
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE_OK(pheap_tx_add(h, w, 8));
    w[0] = 4;
    REQUIRE_OK(pheap_tx_commit(h));
    CHECK_EQ(w[0], 4);
    CHECK(pheap_check(h, NULL) == 0);
    REQUIRE_OK(pheap_close(h));
}

TEST(misuse_is_refused_and_changes_nothing)
{
    pheap *h = fresh_heap("tx-misuse.heap");
    REQUIRE(h);
    pheap_off a = pheap_alloc(h, 64), freed = pheap_alloc(h, 64), large = pheap_alloc(h, 100000);
    pheap_free(h, freed);
    uint64_t *w = pheap_direct(h, a), v = 1, buf[2];
    memset(w, 0, 64);
    struct pheap_stats st0 = stats(h);
    /* Outside a transaction. */
    EXPECT(pheap_tx_commit(h), PHEAP_ENOTX);
    EXPECT(pheap_tx_abort(h), PHEAP_ENOTX);
    EXPECT(pheap_tx_add(h, w, 8), PHEAP_ENOTX);
    EXPECT(pheap_tx_write(h, w, &v, 8), PHEAP_ENOTX);
    EXPECT(pheap_tx_read(h, buf, w, 8), PHEAP_ENOTX);
    EXPECT(pheap_tx_free(h, a), PHEAP_ENOTX);
    CHECK_EQ(pheap_tx_alloc(h, 8), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENOTX);
    EXPECT(pheap_tx_begin(NULL), PHEAP_EINVAL);
    /* Inside one: bad ranges and bad frees fail alone; the transaction
     * goes on. */
    REQUIRE_OK(pheap_tx_begin(h));
    EXPECT(pheap_tx_add(h, &v, 8), PHEAP_ERANGE);                 /* not in the heap */
    EXPECT(pheap_tx_add(h, pheap_direct(h, st0.data_offset) - 64, 8), PHEAP_ERANGE); /* metadata */
    EXPECT(pheap_tx_add(h, w, 0), PHEAP_EINVAL);
    EXPECT(pheap_tx_add(h, w, 65), PHEAP_ENOTLIVE);               /* past the block's end */
    EXPECT(pheap_tx_add(h, pheap_direct(h, freed), 8), PHEAP_ENOTLIVE);
    EXPECT(pheap_tx_write(h, pheap_direct(h, freed), &v, 8), PHEAP_ENOTLIVE);
    EXPECT(pheap_tx_write(h, &v, &v, 8), PHEAP_ERANGE);
    EXPECT(pheap_tx_write(h, w, NULL, 8), PHEAP_EINVAL);
    EXPECT(pheap_tx_read(h, buf, &v, 8), PHEAP_ERANGE);
    EXPECT(pheap_tx_free(h, freed), PHEAP_EDOUBLEFREE);
    EXPECT(pheap_tx_free(h, a + 8), PHEAP_EINTERIOR);
    EXPECT(pheap_tx_free(h, large + 4096), PHEAP_EINTERIOR);
    EXPECT(pheap_tx_free(h, st0.data_offset + st0.data_size / 2), PHEAP_ENOTALLOC);
    EXPECT(pheap_tx_free(h, 8), PHEAP_ERANGE);
    CHECK_EQ(pheap_tx_alloc(h, 0), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EINVAL);
    REQUIRE_OK(pheap_tx_free(h, large));
    EXPECT(pheap_tx_free(h, large), PHEAP_EDOUBLEFREE);           /* freed by this one already */
    REQUIRE_OK(pheap_tx_write(h, &w[2], &v, 8));
    EXPECT(pheap_tx_add(h, w, 24), PHEAP_EINVAL);                 /* overlaps a pending write */
    CHECK_EQ(pheap_tx_depth(h), 1);
    REQUIRE_OK(pheap_tx_abort(h));
    ph_test_unchanged(h, &st0, "refused transactional calls and an abort", __FILE__, __LINE__);
    CHECK_EQ(w[2], 0);
    REQUIRE_OK(pheap_close(h));
    /* Read-only handles refuse to begin. */
    pheap_options ro = {.flags = PHEAP_RDONLY};
    REQUIRE_OK(pheap_open(ph_test_path("tx-misuse.heap"), &ro, &h));
    EXPECT(pheap_tx_begin(h), PHEAP_ERDONLY);
    REQUIRE_OK(pheap_close(h));
}

TEST(fences_per_transaction)
{
    pheap *h = fresh_heap("tx-fences.heap");
    REQUIRE(h);
    pheap_off a = pheap_alloc(h, 256), x[8];
    uint64_t *w = pheap_direct(h, a), v = 3;
    memset(w, 0, 256);
    for (int i = 0; i < 8; i++)
        x[i] = pheap_alloc(h, 64);
    REQUIRE_OK(pheap_tx_begin(h)); /* the first transaction of a thread raises its lane's ceiling */
    REQUIRE_OK(pheap_tx_commit(h));
    /* Redo: one allocation, one free, four written ranges: three fences. */
    for (int round = 0; round < 3; round++) {
        struct pheap_stats s0 = stats(h);
        REQUIRE_OK(pheap_tx_begin(h));
        pheap_off b = pheap_tx_alloc(h, 64);
        REQUIRE(b);
        memset(pheap_direct(h, b), 1, 64);
        for (int k = 0; k < 4; k++)
            REQUIRE_OK(pheap_tx_write(h, &w[8 * k], &v, 8));
        REQUIRE_OK(pheap_tx_free(h, x[round]));
        REQUIRE_OK(pheap_tx_commit(h));
        struct pheap_stats s1 = stats(h);
        CHECK_EQ(s1.fences - s0.fences, 3);
        CHECK_EQ(s1.tx_fences - s0.tx_fences, 3);
    }
    /* Undo: one fence per range added, plus two. */
    for (unsigned k = 1; k <= 4; k++) {
        struct pheap_stats s0 = stats(h);
        REQUIRE_OK(pheap_tx_begin(h));
        for (unsigned i = 0; i < k; i++) {
            REQUIRE_OK(pheap_tx_add(h, &w[8 * i], 16));
            w[8 * i] = k;
        }
        REQUIRE_OK(pheap_tx_add(h, &w[0], 8)); /* added already: no snapshot, no fence */
        REQUIRE_OK(pheap_tx_add(h, &w[1], 8));
        REQUIRE_OK(pheap_tx_commit(h));
        CHECK_EQ(stats(h).fences - s0.fences, k + 2);
    }
    /* Writes into added ranges and into the transaction's own blocks are
     * stored at once and cost nothing more; an empty transaction costs
     * nothing. */
    struct pheap_stats s0 = stats(h);
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE_OK(pheap_tx_add(h, w, 32));
    REQUIRE_OK(pheap_tx_write(h, &w[1], &v, 8));
    CHECK_EQ(w[1], v);
    pheap_off b = pheap_tx_alloc(h, 64);
    REQUIRE_OK(pheap_tx_add(h, pheap_direct(h, b), 64));
    REQUIRE_OK(pheap_tx_write(h, pheap_direct(h, b), &v, 8));
    CHECK_EQ(*(uint64_t *)pheap_direct(h, b), v);
    REQUIRE_OK(pheap_tx_commit(h));
    CHECK_EQ(stats(h).fences - s0.fences, 1 + 3);
    s0 = stats(h);
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE_OK(pheap_tx_commit(h));
    CHECK_EQ(stats(h).fences - s0.fences, 0);
    CHECK(pheap_check(h, NULL) == 0);
    REQUIRE_OK(pheap_close(h));
}

TEST(read_sees_pending_writes_in_order)
{
    pheap *h = fresh_heap("tx-read.heap");
    REQUIRE(h);
    pheap_off a = pheap_alloc(h, 64);
    unsigned char *p = pheap_direct(h, a), buf[64], want[64];
    memset(p, 'a', 64);
    memcpy(want, p, 64);
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE_OK(pheap_tx_write(h, p + 4, "bbbbbbbb", 8));
    REQUIRE_OK(pheap_tx_write(h, p + 8, "cccc", 4));
    memcpy(want + 4, "bbbbcccc", 8);
    REQUIRE_OK(pheap_tx_read(h, buf, p, 64));
    CHECK(memcmp(buf, want, 64) == 0);
    REQUIRE_OK(pheap_tx_read(h, buf, p + 6, 4));
    CHECK(memcmp(buf, "bbcc", 4) == 0);
    CHECK(p[4] == 'a');
    REQUIRE_OK(pheap_tx_commit(h));
    CHECK(memcmp(p, want, 64) == 0);
    REQUIRE_OK(pheap_close(h));
}

TEST(large_transactions_overflow_the_log_and_give_it_back)
{
    pheap *h = fresh_heap("tx-big.heap");
    REQUIRE(h);
    enum { N = 300 };
    pheap_off big = pheap_alloc(h, 1u << 20);
    ph_test_fill(pheap_direct(h, big), 1u << 20, 3);
    pheap_off nodes[N];
    struct pheap_stats s0 = stats(h);
    /* Undo of a megabyte, then abort. */
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE_OK(pheap_tx_add(h, pheap_direct(h, big), 1u << 20));
    memset(pheap_direct(h, big), 0, 1u << 20);
    REQUIRE_OK(pheap_tx_abort(h));
    CHECK(ph_test_intact(pheap_direct(h, big), 1u << 20, 3));
    CHECK_EQ(stats(h).live_blocks, s0.live_blocks);
    /* Many allocations and writes in one transaction, committed. */
    REQUIRE_OK(pheap_tx_begin(h));
    for (int i = 0; i < N; i++) {
        nodes[i] = pheap_tx_alloc(h, 48);
        REQUIRE(nodes[i]);
        uint64_t v = nodes[i];
        REQUIRE_OK(pheap_tx_write(h, (uint64_t *)pheap_direct(h, big) + i, &v, 8));
    }
    REQUIRE_OK(pheap_tx_commit(h));
    CHECK_EQ(stats(h).live_blocks, s0.live_blocks + N); /* the segments are gone again */
    for (int i = 0; i < N; i++)
        CHECK_EQ(((uint64_t *)pheap_direct(h, big))[i], nodes[i]);
    /* And all freed in one. */
    REQUIRE_OK(pheap_tx_begin(h));
    for (int i = 0; i < N; i++)
        REQUIRE_OK(pheap_tx_free(h, nodes[i]));
    REQUIRE_OK(pheap_tx_commit(h));
    CHECK_EQ(stats(h).live_blocks, s0.live_blocks);
    CHECK(pheap_check(h, NULL) == 0);
    REQUIRE_OK(pheap_close(h));
}

TEST(a_full_heap_aborts_the_transaction)
{
    const char *path = ph_test_path("tx-full.heap");
    unlink(path);
    pheap_options o = {.size = 8u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL,
                       .flush = PHEAP_FLUSH_NONE};
    pheap *h;
    REQUIRE_OK(pheap_open(path, &o, &h));
    pheap_off a = pheap_alloc(h, 64);
    uint64_t *w = pheap_direct(h, a);
    w[0] = 1;
    struct pheap_stats s0 = stats(h);
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE_OK(pheap_tx_add(h, w, 8));
    w[0] = 2;
    unsigned n = 0;
    while (pheap_tx_alloc(h, 100000))
        n++;
    CHECK(n > 10);
    int err = pheap_errno();
    CHECK(err == PHEAP_ENOMEM || err == PHEAP_ENOSPC);
    CHECK(strstr(pheap_errmsg(), "aborted") != NULL);
    CHECK_EQ(pheap_tx_depth(h), -1);
    CHECK_EQ(w[0], 1);
    EXPECT(pheap_tx_commit(h), PHEAP_EABORTED);
    CHECK_EQ(pheap_tx_depth(h), 0);
    ph_test_unchanged(h, &s0, "a transaction that filled the heap", __FILE__, __LINE__);
    REQUIRE_OK(pheap_close(h));
}

static void *open_and_exit(void *arg)
{
    pheap *h = arg;
    pheap_off a = pheap_root_get(h, "a");
    uint64_t *w = pheap_direct(h, a);
    if (pheap_tx_begin(h) || pheap_tx_add(h, w, 8) || !pheap_tx_alloc(h, 64))
        return (void *)1;
    w[0] = 77;
    return NULL; /* exits inside the transaction */
}

TEST(a_thread_that_exits_inside_a_transaction_is_rolled_back)
{
    pheap *h = fresh_heap("tx-exit.heap");
    REQUIRE(h);
    pheap_off a = pheap_alloc(h, 64);
    *(uint64_t *)pheap_direct(h, a) = 5;
    REQUIRE_OK(pheap_root_set(h, "a", a));
    struct pheap_stats s0 = stats(h);
    pthread_t t;
    void *ret;
    REQUIRE(pthread_create(&t, NULL, open_and_exit, h) == 0);
    pthread_join(t, &ret);
    CHECK(ret == NULL);
    CHECK_EQ(*(uint64_t *)pheap_direct(h, a), 5);
    struct pheap_stats st = stats(h);
    CHECK_EQ(st.live_blocks, s0.live_blocks);
    CHECK_EQ(st.tx_aborts, 1);
    /* Closing with a transaction open rolls it back too. */
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE_OK(pheap_tx_add(h, pheap_direct(h, a), 8));
    *(uint64_t *)pheap_direct(h, a) = 6;
    REQUIRE_OK(pheap_close(h));
    pheap_options o = {.flush = PHEAP_FLUSH_NONE};
    REQUIRE_OK(pheap_open(ph_test_path("tx-exit.heap"), &o, &h));
    CHECK_EQ(*(uint64_t *)pheap_direct(h, pheap_root_get(h, "a")), 5);
    CHECK_EQ(stats(h).was_unclean, 0);
    CHECK(pheap_check(h, NULL) == 0);
    REQUIRE_OK(pheap_close(h));
}

TEST(killed_inside_a_transaction_recovery_rolls_back)
{
    const char *path = ph_test_path("tx-kill.heap");
    pheap *h = fresh_heap("tx-kill.heap");
    REQUIRE(h);
    pheap_off a = pheap_alloc(h, 64);
    *(uint64_t *)pheap_direct(h, a) = 5;
    REQUIRE_OK(pheap_root_set(h, "a", a));
    uint64_t live = stats(h).live_blocks;
    REQUIRE_OK(pheap_close(h));
    pid_t pid = fork();
    if (pid == 0) {
        pheap_options o = {.flush = PHEAP_FLUSH_NONE};
        pheap *c;
        if (pheap_open(path, &o, &c))
            _exit(1);
        uint64_t *w = pheap_direct(c, pheap_root_get(c, "a"));
        if (pheap_tx_begin(c) || pheap_tx_add(c, w, 8) || !pheap_tx_alloc(c, 5000) ||
            !pheap_tx_alloc(c, 300000))
            _exit(2);
        *w = 99;
        kill(getpid(), SIGKILL);
    }
    int status;
    waitpid(pid, &status, 0);
    REQUIRE(WIFSIGNALED(status));
    pheap_options o = {.flush = PHEAP_FLUSH_NONE};
    REQUIRE_OK(pheap_open(path, &o, &h));
    struct pheap_stats st = stats(h);
    CHECK_EQ(st.was_unclean, 1);
    CHECK_EQ(st.tx_rolled_back, 1);
    CHECK_EQ(st.tx_rolled_forward, 0);
    CHECK_EQ(st.live_blocks, live);
    CHECK_EQ(*(uint64_t *)pheap_direct(h, pheap_root_get(h, "a")), 5);
    CHECK(pheap_check(h, NULL) == 0);
    REQUIRE_OK(pheap_close(h));
}

TEST(heaps_before_transactions_refuse_them)
{
    const char *path = ph_test_path("tx-old.heap");
    pheap *h = fresh_heap("tx-old.heap");
    REQUIRE(h);
    REQUIRE_OK(pheap_close(h));
    /* Make it a 1.2 heap: no transaction feature (its lane region is
     * larger than 1.2 needs, which 1.2 allows). */
    FILE *f = fopen(path, "r+b");
    REQUIRE(f);
    ph_header hdr;
    REQUIRE(fread(&hdr, sizeof(hdr), 1, f) == 1);
    hdr.feat_incompat &= ~PH_FEAT_INCOMPAT_TX;
    hdr.minor = 2;
    extern uint32_t ph_crc32c(uint32_t crc, const void *buf, size_t len);
    hdr.checksum = ph_crc32c(0, &hdr, offsetof(ph_header, checksum));
    fseek(f, 0, SEEK_SET);
    REQUIRE(fwrite(&hdr, sizeof(hdr), 1, f) == 1);
    fclose(f);
    pheap_options o = {.flush = PHEAP_FLUSH_NONE};
    REQUIRE_OK(pheap_open(path, &o, &h));
    EXPECT(pheap_tx_begin(h), PHEAP_ENOTSUP);
    CHECK(strstr(pheap_errmsg(), "1.2") != NULL);
    CHECK_EQ(pheap_tx_depth(h), 0);
    CHECK(pheap_alloc(h, 64) != 0);
    REQUIRE_OK(pheap_close(h));
}

TEST(inherited_handles_refuse_transactions)
{
    pheap *h = fresh_heap("tx-fork.heap");
    REQUIRE(h);
    pid_t pid = fork();
    if (pid == 0)
        _exit(pheap_tx_begin(h) == PHEAP_EFORKED ? 0 : 1);
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    REQUIRE_OK(pheap_close(h));
}
