/*
 * names_adversarial.c -- crash states of named objects that the
 * enumerations of names.c do not reach: a BIND entry that reaches media
 * before the directory entry it publishes, a lazily retired BIND entry
 * replayed after the word it names came back to its old value, and the
 * like.  Each test builds the state on purpose and judges the image.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

/* The names of an image; *unexpected counts those not in `allowed`. */
static unsigned count_names(pheap *h, const char *const *allowed, unsigned nallowed,
                            unsigned *unexpected, char *first_bad, size_t n)
{
    pheap_name_info info;
    const char *after = NULL;
    unsigned count = 0;
    char cur[PHEAP_NAME_MAX + 1];
    while (pheap_name_next(h, after, &info) == 0) {
        int ok = 0;
        for (unsigned i = 0; i < nallowed; i++)
            ok |= strcmp(info.name, allowed[i]) == 0;
        if (!ok && ((*unexpected)++ == 0 || !first_bad[0]))
            snprintf(first_bad, n, "%s", info.name);
        count++;
        snprintf(cur, sizeof(cur), "%s", info.name);
        after = cur;
    }
    return count;
}

/* A create of a name (no initialiser: the lane entry carries no CRC of
 * anything), crashed at the fence of its BIND entry (F1), every 64-byte
 * line joining the image or not.  The entry line can join while the head
 * line of the directory entry (hash, size, length, checksum, name bytes,
 * flushed before that fence but not yet fenced) does not: recovery then
 * redoes the bind over the head line's OLD body.  On a line that a removed
 * name used before, that removed name comes back, bound to the new block;
 * on a line never used, a head with length 0 appears, which pheap_check
 * refuses. */
static int fill48(pheap *h, void *block, size_t usable, void *arg)
{
    (void)h, (void)arg;
    memset(block, 0x5a, usable);
    return 0;
}

static void bind_before_head(int with_init)
{
    const char *path = ph_test_path(with_init ? "bind-early-init.heap" : "bind-early.heap");
    pheap *h = ph_test_create(path, 8u << 20);
    REQUIRE(h);
    char name[32];
    /* 150 names made and removed: most lines of the segment hold a removed
     * name's body under a FREE xref */
    REQUIRE_OK(ph_test_make_names(h, "gone-", 150, 48));
    for (unsigned i = 0; i < 150; i++) {
        snprintf(name, sizeof(name), "gone-%u", i);
        REQUIRE_OK(pheap_free_named(h, name));
    }
    REQUIRE_OK(pheap_close(h));
    static const char *const allowed[] = {"warm", "x-0", "x-1", "x-2", "x-3", "x-4", "x-5",
                                          "x-6", "x-7"};
    const char *img = ph_test_path("bind-early.image");
    unsigned images = 0, bad_check = 0, revived = 0;
    for (uint64_t seed = 1; seed <= 96; seed++) {
        for (uint64_t f = 2; f <= 4; f++) {
            /* lane_begin fence 1: "warm" (its refill fences the slab; the
             * later creates take blocks from the thread cache, so no fence
             * lies between their head line's flush and their entry's fence) */
            pheap_options o = {.flags = PHEAP_SIMULATE, .sim_crash_site = "ph_lane_begin",
                               .sim_crash_fence = f, .sim_crash_image = img,
                               .sim_evict_probability = 0.5, .sim_seed = seed * 7 + f};
            REQUIRE_OK(pheap_open(path, &o, &h));
            REQUIRE(pheap_alloc_named(h, "warm", 48));
            for (unsigned i = 0; i < 3; i++) {
                snprintf(name, sizeof(name), "x-%u", i);
                REQUIRE(with_init ? pheap_alloc_named_init(h, name, 48, 0, fill48, NULL)
                                  : pheap_alloc_named(h, name, 48));
            }
            pheap_sim_crash(h, NULL, 0, 0.0);
            pheap *r;
            REQUIRE_OK(pheap_open(img, NULL, &r));
            images++;
            pheap_check_report rep;
            char bad[PHEAP_NAME_MAX + 1] = "";
            unsigned unexpected = 0;
            count_names(r, allowed, PH_ARRAY_N(allowed), &unexpected, bad, sizeof(bad));
            if (unexpected && bad[0] && revived++ == 0)
                printf("  fence %llu seed %llu: removed name '%s' is back (at %llu)\n",
                       (unsigned long long)f, (unsigned long long)seed, bad,
                       (unsigned long long)pheap_lookup(r, bad));
            if (pheap_check(r, &rep) != 0 && bad_check++ == 0)
                printf("  fence %llu seed %llu: pheap_check: %s\n", (unsigned long long)f,
                       (unsigned long long)seed, rep.first_error);
            pheap_close(r);
        }
    }
    printf("  %u images: %u with a removed name back, %u failing pheap_check\n", images,
           revived, bad_check);
    CHECK_EQ(revived, 0);
    CHECK_EQ(bad_check, 0);
}

TEST(bind_entry_before_its_head_line)
{
    bind_before_head(0);
}

/* The same with pheap_alloc_named_init: the entry's CRC of the block's
 * contents holds once the block's lines are durable, and says nothing of
 * the head line. */
TEST(bind_entry_before_its_head_line_init)
{
    bind_before_head(1);
}

typedef struct cycler {
    pheap *h;
    unsigned cycles;
    int rc;
    pheap_off other;
} cycler;

static void *cycle_name(void *arg)
{
    cycler *c = arg;
    if ((c->rc = pheap_free_named(c->h, "x")) != 0)
        return NULL;
    for (unsigned i = 0; i < c->cycles; i++) {
        if (!pheap_alloc_named(c->h, "x", 48)) {
            c->rc = pheap_errno();
            return NULL;
        }
        if ((c->rc = pheap_free_named(c->h, "x")) != 0)
            return NULL;
    }
    /* the block the names used last, taken for something else */
    c->other = pheap_alloc(c->h, 48);
    c->rc = c->other ? pheap_root_set(c->h, "other", c->other) : pheap_errno();
    return NULL;
}

/* A lazily retired BIND entry outlives 2^16 stores to its word.  Thread A
 * (this one) creates "x" and then does nothing durable: its BIND entry
 * stays committed on media (retired only at A's next fence).  Thread B
 * removes "x" and creates and removes it again 32767 times: each store
 * to the head's xref adds one to its 16-bit version, so after 65536 stores
 * the word holds again exactly the value A's entry found (same version,
 * FREE).  B then allocates the block "x" used for an object of its own.  A
 * crash now: recovery finds A's entry with xref equal to its old value and
 * redoes it: "x", removed by B's last returned call, comes back, bound to
 * the block B owns (and the slab bit is set again over B's block). */
TEST(stale_bind_replayed_after_version_wrap)
{
    const char *path = ph_test_path("wrap.heap");
    pheap *h = ph_test_create(path, 8u << 20);
    REQUIRE(h);
    REQUIRE_OK(pheap_close(h));
    pheap_options o = {.flags = PHEAP_SIMULATE};
    REQUIRE_OK(pheap_open(path, &o, &h));
    REQUIRE(pheap_alloc_named(h, "x", 48)); /* the head line: version 1, HEAD */
    REQUIRE_OK(pheap_free_named(h, "x"));   /* version 2, FREE */
    REQUIRE(pheap_alloc_named(h, "x", 48)); /* A's bind: from 2|FREE to 3|HEAD */
    cycler c = {h, 32767, 0, 0};
    pthread_t b;
    REQUIRE(pthread_create(&b, NULL, cycle_name, &c) == 0);
    pthread_join(b, NULL);
    REQUIRE_OK(c.rc);
    CHECK_EQ(pheap_lookup(h, "x"), 0);
    const char *img = ph_test_path("wrap.image");
    REQUIRE_OK(pheap_sim_crash(h, img, 1, 0.0)); /* what is durable, nothing more */
    pheap *r;
    REQUIRE_OK(pheap_open(img, NULL, &r));
    pheap_off x = pheap_lookup(r, "x"), other = pheap_root_get(r, "other");
    printf("  after the crash: 'x' at %llu, B's object at %llu\n", (unsigned long long)x,
           (unsigned long long)other);
    CHECK_EQ(x, 0); /* removed by a call that returned */
    CHECK(!x || x != other);
    pheap_check_report rep;
    if (pheap_check(r, &rep) != 0)
        printf("  pheap_check: %s\n", rep.first_error);
    pheap_close(r);
}
