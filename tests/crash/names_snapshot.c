/*
 * names_snapshot.c -- a snapshot of a heap crashed during a name-segment
 * rebuild shows the heap as the next read-write open leaves it: the
 * rebuild finished or undone in its private view, pheap_check clean, the
 * same names as a read-write open finds, and the file untouched.  Crash
 * points: every fence of the creates that rebuild a segment, with nothing
 * more and with half the unfenced 8-byte words reaching media.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

enum { NAMES = 700 };

static void name_of(char *buf, size_t n, unsigned i)
{
    snprintf(buf, n, "snapshot-name-%u", i);
}

/* Creates names until stop (0: all); returns the fences each create took
 * into fences[i] (before it). */
static void creates(pheap *h, uint64_t *before)
{
    char name[64];
    for (unsigned i = 0; i < NAMES; i++) {
        if (before)
            before[i] = pheap_sim_fence_count(h);
        name_of(name, sizeof(name), i);
        pheap_alloc_named(h, name, 32);
    }
}

/* The names a handle finds, as a bitmap over i. */
static void found(pheap *h, uint8_t *seen)
{
    char name[64];
    for (unsigned i = 0; i < NAMES; i++) {
        name_of(name, sizeof(name), i);
        seen[i] = pheap_lookup(h, name) != 0;
    }
}

static int same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    static char ba[1 << 16], bb[1 << 16];
    while (same) {
        size_t na = fread(ba, 1, sizeof(ba), fa), nb = fread(bb, 1, sizeof(bb), fb);
        same = na == nb && memcmp(ba, bb, na) == 0;
        if (!na)
            break;
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return same;
}

static void judge(const char *image, const char *where)
{
    char copy[512], rw[512];
    snprintf(copy, sizeof(copy), "%s", ph_test_path("snap-names-copy.heap"));
    snprintf(rw, sizeof(rw), "%s", ph_test_path("snap-names-rw.heap"));
    ph_test_copy_file(image, copy);
    ph_test_copy_file(image, rw);
    static uint8_t in_snap[NAMES], in_rw[NAMES];
    pheap_options snap = {.flags = PHEAP_SNAPSHOT};
    pheap *h = NULL;
    if (pheap_open(copy, &snap, &h) != 0) {
        ph_test_fail(__FILE__, __LINE__, "%s: snapshot open: %s", where, pheap_errmsg());
        return;
    }
    pheap_check_report r;
    if (pheap_check(h, &r) != 0)
        ph_test_fail(__FILE__, __LINE__, "%s: snapshot check: %s", where, r.first_error);
    found(h, in_snap);
    pheap_close(h);
    if (!same_file(copy, image))
        ph_test_fail(__FILE__, __LINE__, "%s: the snapshot changed the file", where);
    if (pheap_open(rw, NULL, &h) != 0) {
        ph_test_fail(__FILE__, __LINE__, "%s: open: %s", where, pheap_errmsg());
        return;
    }
    if (pheap_check(h, &r) != 0)
        ph_test_fail(__FILE__, __LINE__, "%s: check: %s", where, r.first_error);
    found(h, in_rw);
    pheap_close(h);
    if (memcmp(in_snap, in_rw, sizeof(in_rw)) != 0)
        ph_test_fail(__FILE__, __LINE__, "%s: the snapshot and the open find other names", where);
}

TEST(snapshot_of_a_rebuild_cut_short)
{
    char base[512], work[512], image[512], where[128];
    snprintf(base, sizeof(base), "%s", ph_test_path("snap-names-base.heap"));
    snprintf(work, sizeof(work), "%s", ph_test_path("snap-names-work.heap"));
    snprintf(image, sizeof(image), "%s", ph_test_path("snap-names-image.heap"));
    pheap *h = ph_test_create(base, 4u << 20);
    REQUIRE(h);
    REQUIRE_OK(pheap_close(h));
    static uint64_t before[NAMES + 1];
    pheap_options sim = {.flags = PHEAP_SIMULATE};
    REQUIRE_OK(ph_test_copy_file(base, work));
    REQUIRE_OK(pheap_open(work, &sim, &h));
    creates(h, before);
    before[NAMES] = pheap_sim_fence_count(h);
    pheap_sim_crash(h, NULL, 0, 0);
    /* a plain create takes two fences; a rebuild many more */
    unsigned rebuilds = 0, images = 0;
    for (unsigned i = 0; i < NAMES; i++) {
        if (before[i + 1] - before[i] <= 4)
            continue;
        rebuilds++;
        for (uint64_t f = before[i] + 1; f <= before[i + 1]; f++)
            for (unsigned v = 0; v < 2; v++) {
                REQUIRE_OK(ph_test_copy_file(base, work));
                unlink(image);
                pheap_options o = {.flags = PHEAP_SIMULATE, .sim_crash_fence = f,
                                   .sim_crash_image = image, .sim_evict_probability = v ? 0.5 : 0,
                                   .sim_mode = v ? PHEAP_SIM_WORDS : 0, .sim_seed = f};
                REQUIRE_OK(pheap_open(work, &o, &h));
                creates(h, NULL);
                pheap_sim_crash(h, NULL, 0, 0);
                if (access(image, F_OK) != 0)
                    continue;
                snprintf(where, sizeof(where), "create %u, fence %llu, variant %u", i,
                         (unsigned long long)f, v);
                judge(image, where);
                images++;
            }
    }
    CHECK(rebuilds > 0);
    printf("%u rebuilds, %u crash images\n", rebuilds, images);
}
