/*
 * modes.c -- crash points of pheap_set_mode and of open with a damaged
 * mode word.  Switches between writable and read-only are crashed before
 * every fence, with whole lines and with 8-byte words reaching media, with
 * no eviction and with half of the dirty lines evicted; each image must
 * open read-write (recovery at open crashed too, at each of its fences),
 * pass pheap_check with the blocks it had, hold the mode before or after
 * the switch in flight, and let its owner switch and allocate again.
 * Then every mixture of the bytes of an old and a new mode word (what a
 * torn store would leave, which x86 never does for an aligned word) is
 * refused at open with PHEAP_ECHECKSUM naming the word, never read as a
 * mode.
 */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "format/header.h"
#include "format/layout.h"
#include "harness.h"

#define FAIL(...) ph_test_fail(__FILE__, __LINE__, __VA_ARGS__)

/* The switches of the workload: mode after op i. */
static const unsigned ops[] = {PHEAP_MODE_READONLY, PHEAP_MODE_WRITABLE, PHEAP_MODE_READONLY,
                               PHEAP_MODE_READONLY, PHEAP_MODE_WRITABLE};
#define NOPS (sizeof(ops) / sizeof(ops[0]))
#define BLOCKS 5

static unsigned mode_after(unsigned n)
{
    return n ? ops[n - 1] : PHEAP_MODE_WRITABLE;
}

/* Runs the workload on a simulated copy of `base` with `o`: each switch,
 * then a fenced write to user data and, in writable mode, an alloc and a
 * free.  starts[i] and marks[i] are the fence counts before switch i and
 * when it returned.  Returns the fences in all. */
static uint64_t workload(const char *base, const char *work, pheap_options *o, uint64_t *starts,
                         uint64_t *marks)
{
    pheap *h;
    if (ph_test_copy_file(base, work) || pheap_open(work, o, &h)) {
        FAIL("workload open: %s", pheap_errmsg());
        return 0;
    }
    pheap_off user = pheap_root_get(h, "user");
    uint64_t *u = pheap_direct(h, user);
    if (!u) {
        FAIL("no user block");
        pheap_close(h);
        return 0;
    }
    for (unsigned i = 0; i < NOPS; i++) {
        starts[i] = pheap_sim_fence_count(h);
        if (pheap_set_mode(h, ops[i]))
            FAIL("op %u: %s", i, pheap_errmsg());
        marks[i] = pheap_sim_fence_count(h);
        /* The mode governs calls, not the program's stores. */
        u[0] = i;
        pheap_persist(h, u, 8);
        /* Refused in read-only mode, so the heap's blocks never change. */
        pheap_off x = pheap_alloc(h, 32);
        if ((x != 0) != (ops[i] == PHEAP_MODE_WRITABLE))
            FAIL("op %u: alloc in mode %u gave %llu", i, ops[i], (unsigned long long)x);
        if (x && pheap_free(h, x))
            FAIL("op %u: free: %s", i, pheap_errmsg());
    }
    uint64_t fences = pheap_sim_fence_count(h);
    pheap_close(h);
    return fences;
}

/* Judges one image: `done` switches had returned; the next may show when
 * `in_flight` (the crash fell inside it). */
static void judge(const char *image, unsigned done, int in_flight, uint64_t live, const char *where)
{
    pheap *h;
    if (pheap_open(image, NULL, &h)) {
        FAIL("%s: open: %s", where, pheap_errmsg());
        return;
    }
    int m = pheap_get_mode(h);
    unsigned before = mode_after(done), after = in_flight ? mode_after(done + 1) : before;
    if (m != (int)before && m != (int)after)
        FAIL("%s: mode %d, expected %u or %u", where, m, before, after);
    pheap_check_report r;
    if (pheap_check(h, &r))
        FAIL("%s: check: %s", where, r.first_error);
    struct pheap_stats st;
    pheap_stats(h, &st);
    /* The alloc and free after a switch to writable may be cut short. */
    int allocating = !in_flight && done > 0 && ops[done - 1] == PHEAP_MODE_WRITABLE;
    if (st.live_blocks != live && !(allocating && st.live_blocks == live + 1))
        FAIL("%s: %llu live blocks, expected %llu", where, (unsigned long long)st.live_blocks,
             (unsigned long long)live);
    /* The owner takes it back and writes. */
    pheap_off x = 0;
    if (pheap_set_mode(h, PHEAP_MODE_WRITABLE) || !(x = pheap_alloc(h, 64)) || pheap_free(h, x))
        FAIL("%s: after the crash: %s", where, pheap_errmsg());
    if (pheap_set_mode(h, (unsigned)m))
        FAIL("%s: mode back: %s", where, pheap_errmsg());
    pheap_close(h);
    if (pheap_open(image, NULL, &h)) {
        FAIL("%s: reopen: %s", where, pheap_errmsg());
        return;
    }
    if (pheap_get_mode(h) != m)
        FAIL("%s: reopened in mode %d, was %d", where, pheap_get_mode(h), m);
    if (pheap_check(h, &r))
        FAIL("%s: check after reopen: %s", where, r.first_error);
    pheap_close(h);
}

/* The open of `image` (which marks the heap open and may run recovery)
 * crashed at each of its fences: the result still opens with the mode the
 * image had. */
static unsigned crash_open(const char *image, const char *where, unsigned *nested)
{
    const char *work = ph_test_path("modes-open-work.heap");
    const char *img2 = ph_test_path("modes-open-image.heap");
    pheap_options sim = {.flags = PHEAP_SIMULATE};
    pheap *h;
    int want = -1;
    if (ph_test_copy_file(image, work) || pheap_open(work, &sim, &h)) {
        FAIL("%s: simulated open: %s", where, pheap_errmsg());
        return 0;
    }
    want = pheap_get_mode(h);
    uint64_t fences = pheap_sim_fence_count(h);
    pheap_sim_crash(h, NULL, 0, 0);
    for (uint64_t k = 1; k <= fences; k++) {
        pheap_options o = {.flags = PHEAP_SIMULATE, .sim_crash_fence = k, .sim_crash_image = img2,
                           .sim_evict_probability = 0.5, .sim_seed = k};
        if (ph_test_copy_file(image, work) || pheap_open(work, &o, &h)) {
            FAIL("%s: open crashed at %llu: %s", where, (unsigned long long)k, pheap_errmsg());
            continue;
        }
        pheap_sim_crash(h, NULL, 0, 0);
        pheap *g;
        if (pheap_open(img2, NULL, &g)) {
            FAIL("%s, its open crashed at fence %llu: %s", where, (unsigned long long)k,
                 pheap_errmsg());
            continue;
        }
        if (pheap_get_mode(g) != want)
            FAIL("%s, its open crashed at fence %llu: mode %d, was %d", where,
                 (unsigned long long)k, pheap_get_mode(g), want);
        if (pheap_check(g, NULL))
            FAIL("%s, its open crashed: check: %s", where, pheap_errmsg());
        pheap_close(g);
        (*nested)++;
    }
    return (unsigned)fences;
}

TEST(set_mode_at_every_fence)
{
    char base[512], work[512], image[512]; /* ph_test_path reuses its buffers */
    snprintf(base, sizeof(base), "%s", ph_test_path("modes-base.heap"));
    snprintf(work, sizeof(work), "%s", ph_test_path("modes-work.heap"));
    snprintf(image, sizeof(image), "%s", ph_test_path("modes-image.heap"));
    pheap *h = ph_test_create(base, 4u << 20);
    REQUIRE(h);
    for (unsigned i = 0; i < BLOCKS - 1; i++)
        REQUIRE(pheap_alloc(h, 100 + i * 5000) != 0);
    pheap_off user = pheap_alloc(h, 64);
    REQUIRE(user);
    REQUIRE_OK(pheap_root_set(h, "user", user));
    REQUIRE_OK(pheap_close(h));
    uint64_t starts[NOPS], marks[NOPS];
    pheap_options dry = {.flags = PHEAP_SIMULATE};
    uint64_t fences = workload(base, work, &dry, starts, marks);
    REQUIRE(fences > 0);
    unsigned images = 0, nested = 0, with_mode[2] = {0, 0};
    static const double evict[] = {0.0, 0.5};
    for (uint64_t k = 1; k <= fences + 1; k++) {
        /* The image holds fences 1..k-1: switch i returned when
         * marks[i] < k, and is in flight when starts[i] < k too. */
        unsigned done = 0;
        while (done < NOPS && marks[done] < k)
            done++;
        int in_flight = done < NOPS && starts[done] < k;
        for (unsigned words = 0; words < 2; words++) {
            for (unsigned e = 0; e < 2; e++) {
                pheap_options o = {.flags = PHEAP_SIMULATE, .sim_crash_fence = k,
                                   .sim_crash_image = image, .sim_evict_probability = evict[e],
                                   .sim_seed = k * 4 + words * 2 + e,
                                   .sim_mode = words ? PHEAP_SIM_WORDS : 0};
                unlink(image);
                uint64_t s2[NOPS], m2[NOPS];
                workload(base, work, &o, s2, m2);
                if (access(image, F_OK) != 0) {
                    FAIL("fence %llu: no image", (unsigned long long)k);
                    continue;
                }
                char where[96];
                snprintf(where, sizeof(where), "fence %llu (%s, eviction %.1f)",
                         (unsigned long long)k, words ? "words" : "lines", evict[e]);
                pheap_options ro = {.flags = PHEAP_RDONLY};
                pheap *p;
                if (pheap_open(image, &ro, &p) == 0) {
                    int m = pheap_get_mode(p);
                    if (m == 0 || m == 1)
                        with_mode[m]++;
                    pheap_close(p);
                }
                if (e == 1 && words == 1)
                    crash_open(image, where, &nested);
                judge(image, done, in_flight, BLOCKS, where);
                images++;
            }
        }
    }
    printf("set_mode: %llu fences, %u images, %u of crashed opens; %u read-only, %u writable\n",
           (unsigned long long)fences, images, nested, with_mode[1], with_mode[0]);
    /* the open's one, one per switch that changes the mode (the repeated
     * read-only switch stores nothing), one per persist of user data, and
     * the two writable rounds' alloc and free */
    for (unsigned i = 0; i < NOPS; i++)
        CHECK_EQ(marks[i] - starts[i], i == 3 ? 0 : 1);
    uint64_t round_fences = fences - 1 - (NOPS - 1) - NOPS;
    CHECK(round_fences >= 4 && round_fences <= 6);
    CHECK(with_mode[0] > 0 && with_mode[1] > 0); /* both modes seen in images */
    CHECK(nested > 0);
}

/* Every mixture of the bytes of two mode words: refused unless it is one
 * of them. */
TEST(torn_mode_word_is_refused)
{
    const char *path = ph_test_path("modes-torn.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    REQUIRE_OK(pheap_close(h));
    const off_t at = PH_STATE_OFFSET + offsetof(ph_state, xmode);
    unsigned refused = 0, opened = 0;
    for (unsigned dir = 0; dir < 2; dir++) {
        uint64_t oldw = ph_mode_word(dir), neww = ph_mode_word(!dir);
        for (unsigned mask = 0; mask < 256; mask++) {
            uint8_t a[8], b[8], m[8];
            memcpy(a, &oldw, 8);
            memcpy(b, &neww, 8);
            for (unsigned i = 0; i < 8; i++)
                m[i] = mask >> i & 1 ? b[i] : a[i];
            uint64_t w;
            memcpy(&w, m, 8);
            int fd = open(path, O_RDWR);
            REQUIRE(fd >= 0);
            REQUIRE(pwrite(fd, &w, 8, at) == 8);
            close(fd);
            for (unsigned ro = 0; ro < 2; ro++) {
                pheap_options o = {.flags = ro ? PHEAP_RDONLY : 0};
                int rc = pheap_open(path, &o, &h);
                if (w == oldw || w == neww) {
                    if (rc) {
                        FAIL("mask %#x: a whole word refused: %s", mask, pheap_errmsg());
                        continue;
                    }
                    CHECK_EQ(pheap_get_mode(h), w == oldw ? (int)dir : (int)!dir);
                    pheap_close(h);
                    opened++;
                } else if (rc != PHEAP_ECHECKSUM) {
                    FAIL("mask %#x (%016llx): open gave %d, not PHEAP_ECHECKSUM", mask,
                         (unsigned long long)w, rc);
                    if (rc == 0)
                        pheap_close(h);
                } else if (!strstr(pheap_errmsg(), "state line word 5 (access mode")) {
                    FAIL("mask %#x: message '%s'", mask, pheap_errmsg());
                } else {
                    refused++;
                }
            }
        }
    }
    printf("torn mode words: %u refused, %u whole words opened\n", refused, opened);
    CHECK(refused > 800);
    CHECK(opened >= 8);
}
