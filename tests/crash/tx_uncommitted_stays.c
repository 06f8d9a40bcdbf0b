/*
 * tx_uncommitted_stays.c -- a redo transaction whose COMMIT record reached
 * media before its new block's lines (an eviction before the commit's
 * first fence) did not commit: the recovery at the next open leaves it
 * undone, and it must stay undone for good.  The program then writes the
 * same bytes into the same block (a retry of the same insertion after the
 * crash, say) and crashes again: were the log left unretired, the next
 * recovery would find the contents matching and roll the old transaction
 * forward over everything the program did since (its REDO writes over
 * newer durable data, its FREE records over blocks with new owners).
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

typedef struct state {
    uint64_t w;      /* the word the transaction writes (redo) */
    pheap_off f;     /* the block it frees */
} state;

static state *state_of(pheap *h)
{
    return pheap_direct(h, pheap_root_get(h, "state"));
}

static const char *make_base(void)
{
    const char *path = ph_test_path("adv-idle.heap");
    pheap *h = ph_test_create(path, 8u << 20);
    if (!h)
        return NULL;
    pheap_off s = pheap_alloc(h, sizeof(state));
    state *st = pheap_direct(h, s);
    st->w = 1;
    st->f = pheap_alloc(h, 64);
    memset(pheap_direct(h, st->f), 0x11, 64);
    pheap_persist(h, pheap_direct(h, st->f), 64);
    pheap_persist(h, st, sizeof(*st));
    pheap_root_set(h, "state", s);
    pheap_close(h);
    return path;
}

/* The transaction: a new block filled with `seed`, w := 2, f freed. */
static pheap_off run_tx(const char *base, const pheap_options *o, uint64_t *fence_before)
{
    pheap *h = ph_test_open(base, o);
    if (!h)
        return 0;
    state *s = state_of(h);
    pheap_off b = 0;
    uint64_t two = 2;
    if (pheap_tx_begin(h) == 0 && (b = pheap_tx_alloc(h, 64)) != 0) {
        ph_test_fill(pheap_direct(h, b), 64, 0x4242);
        pheap_tx_write(h, &s->w, &two, sizeof(two));
        pheap_tx_free(h, s->f);
        *fence_before = pheap_sim_fence_count(h);
        pheap_tx_commit(h);
    }
    pheap_sim_crash(h, NULL, 0, 0.0);
    return b;
}

/* Replaces [off, off + len) of file `to` with the bytes of file `from`. */
static int revert_bytes(const char *from, const char *to, uint64_t off, size_t len)
{
    char buf[4096];
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY);
    int ok = in >= 0 && out >= 0 && len <= sizeof(buf) &&
             pread(in, buf, len, (off_t)off) == (ssize_t)len &&
             pwrite(out, buf, len, (off_t)off) == (ssize_t)len;
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    return ok ? 0 : -1;
}

typedef struct hunt {
    pheap *h;
    pheap_off b;
    int found;
    pthread_barrier_t bar;
} hunt;

/* Allocates 64-byte blocks until it gets b (or another thread did). */
static void *hunt_b(void *arg)
{
    hunt *hu = arg;
    pthread_barrier_wait(&hu->bar);
    for (unsigned n = 0; n < 8192 && !__atomic_load_n(&hu->found, __ATOMIC_ACQUIRE); n++) {
        pheap_off x = pheap_alloc(hu->h, 64);
        if (!x)
            break;
        if (x == hu->b)
            __atomic_store_n(&hu->found, 1, __ATOMIC_RELEASE);
    }
    pthread_barrier_wait(&hu->bar);
    return NULL;
}

TEST(a_transaction_recovery_found_uncommitted_stays_undone)
{
    const char *base = make_base();
    REQUIRE(base);
    char img1[512], img2[512];
    snprintf(img1, sizeof(img1), "%s", ph_test_path("adv-idle-1.image"));
    snprintf(img2, sizeof(img2), "%s", ph_test_path("adv-idle-2.image"));

    /* Dry run: the commit's first fence (F1). */
    pheap_options dry = {.flags = PHEAP_SIMULATE};
    uint64_t before = 0;
    pheap_off b = run_tx(base, &dry, &before);
    REQUIRE(b && before);

    /* Crash just before F1 with every dirty line on media... */
    pheap_options o = {.flags = PHEAP_SIMULATE, .sim_crash_fence = before + 1,
                       .sim_crash_image = img1, .sim_evict_probability = 1.0, .sim_seed = 1};
    unlink(img1);
    REQUIRE_EQ(run_tx(base, &o, &before), b);
    /* ...but the new block's line: it was flushed, not fenced, and did not
     * make it (the base holds what the media had there). */
    REQUIRE_OK(revert_bytes(base, img1, b, 64));

    /* First recovery: not committed (the contents do not match). */
    pheap *h;
    pheap_options sim = {.flags = PHEAP_SIMULATE};
    REQUIRE_OK(pheap_open(img1, &sim, &h));
    state *s = state_of(h);
    CHECK_EQ(s->w, 1);
    CHECK(pheap_usable_size(h, s->f) > 0);
    CHECK_EQ(pheap_usable_size(h, b), 0);
    CHECK(pheap_check(h, NULL) == 0);

    /* The program carries on with plain calls: it inserts the same 64-byte
     * record again (the allocator hands out the same free block), sets w
     * to 3, frees f and allocates g (which gets f's place). */
    hunt hu = {.h = h, .b = b};
    pthread_t th[4];
    pthread_barrier_init(&hu.bar, NULL, 4);
    for (unsigned k = 0; k < 4; k++) /* one thread per arena: b's slab may be in any */
        pthread_create(&th[k], NULL, hunt_b, &hu);
    for (unsigned k = 0; k < 4; k++)
        pthread_join(th[k], NULL);
    pthread_barrier_destroy(&hu.bar);
    REQUIRE(hu.found);
    ph_test_fill(pheap_direct(h, b), 64, 0x4242);
    pheap_persist(h, pheap_direct(h, b), 64);
    s->w = 3;
    pheap_persist(h, &s->w, sizeof(s->w));
    pheap_off f = s->f;
    REQUIRE_OK(pheap_free(h, f));
    pheap_off g = pheap_alloc(h, 64);
    REQUIRE(g);
    memset(pheap_direct(h, g), 0x77, 64);
    pheap_persist(h, pheap_direct(h, g), 64);
    s->f = g;
    pheap_persist(h, &s->f, sizeof(s->f));
    /* ...and crashes with all of that durable. */
    unlink(img2);
    REQUIRE_OK(pheap_sim_crash(h, img2, 0, 0.0));

    /* Second recovery: what the program made durable must be there. */
    REQUIRE_OK(pheap_open(img2, &sim, &h));
    struct pheap_stats st;
    pheap_stats(h, &st);
    s = state_of(h);
    CHECK_EQ(st.tx_rolled_forward, 0);
    CHECK_EQ(s->w, 3);                        /* fails: 2, the old transaction's REDO */
    CHECK(pheap_usable_size(h, g) > 0);       /* fails: freed by the old FREE record */
    if (g == f)
        printf("  g took f's place: the old transaction's FREE of f freed g, a live block\n");
    CHECK(pheap_check(h, NULL) == 0);
    pheap_sim_crash(h, NULL, 0, 0.0);
}

