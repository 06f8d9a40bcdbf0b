/*
 * damaged_repair.c -- crash points of the two repairs of damaged slab
 * descriptors (docs/RECOVERY.md): pheap_recover of a GC heap zeroing the
 * allocated bits of a chunk that is no slab, and a growth zeroing those of
 * the chunks it adds.  Each is crashed before every fence, with nothing
 * more, with half the unfenced lines and with half the unfenced 8-byte
 * words reaching media; the image must then open and check clean after
 * its own recovery -- or, for a growth cut before its zeroing was durable,
 * keep the damaged descriptor as its one problem (the file was damaged
 * before the growth): pheap_check counts it in damaged_chunks, and no
 * allocation takes the chunk.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "format/layout.h"
#include "harness.h"

static void set_word(const char *path, uint64_t off, uint64_t v)
{
    int fd = open(path, O_WRONLY);
    if (fd < 0 || pwrite(fd, &v, 8, (off_t)off) != 8)
        ph_test_fail(__FILE__, __LINE__, "cannot write %s", path);
    if (fd >= 0)
        close(fd);
}

static uint64_t word_at(const char *path, uint64_t off)
{
    uint64_t v = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0 || pread(fd, &v, 8, (off_t)off) != 8)
        ph_test_fail(__FILE__, __LINE__, "cannot read %s", path);
    if (fd >= 0)
        close(fd);
    return v;
}

static const struct variant {
    double evict;
    unsigned mode;
} variants[] = {{0, 0}, {0.5, 0}, {0.5, PHEAP_SIM_WORDS}};

/* Runs `work` on a simulated copy of `base`, crashed before fence f (0: a
 * dry run, returning its fences) with variant v, image into `image`. */
static uint64_t run(const char *base, const char *image, uint64_t f, const struct variant *v,
                    void (*work)(pheap *))
{
    char work_path[512];
    snprintf(work_path, sizeof(work_path), "%s", ph_test_path("repair-work.heap"));
    if (ph_test_copy_file(base, work_path) != 0)
        return 0;
    unlink(image);
    pheap_options o = {.flags = PHEAP_SIMULATE, .sim_crash_fence = f, .sim_crash_image = image,
                       .sim_evict_probability = v->evict, .sim_mode = v->mode, .sim_seed = f};
    pheap *h = NULL;
    if (pheap_open(work_path, &o, &h) != 0) {
        ph_test_fail(__FILE__, __LINE__, "simulated open: %s", pheap_errmsg());
        return 0;
    }
    work(h);
    uint64_t fences = pheap_sim_fence_count(h);
    pheap_sim_crash(h, f ? NULL : image, 0, 0);
    return fences;
}

/* Opens the image, recovers it if it asks, checks it, uses it a little,
 * closes, reopens and checks again.  With `may_keep`, the damaged
 * descriptor may still be there (pheap_check's damaged_chunks, its only
 * problem): 1 then. */
static int judge(const char *image, const char *where, int may_keep)
{
    pheap *h = NULL;
    int rc = pheap_open(image, NULL, &h);
    int kept = 0;
    if (rc != 0) {
        ph_test_fail(__FILE__, __LINE__, "%s: open: %d (%s)", where, rc, pheap_errmsg());
        return 0;
    }
    struct pheap_stats st;
    pheap_stats(h, &st);
    if (st.needs_recovery && pheap_recover(h) != 0)
        ph_test_fail(__FILE__, __LINE__, "%s: recover: %s", where, pheap_errmsg());
    pheap_check_report r;
    if (pheap_check(h, &r) != 0 && !(kept = may_keep && r.errors == r.damaged_chunks))
        ph_test_fail(__FILE__, __LINE__, "%s: check: %s", where, r.first_error);
    pheap_off keep = pheap_root_get(h, "keep");
    if (!keep || pheap_usable_size(h, keep) < 64)
        ph_test_fail(__FILE__, __LINE__, "%s: the rooted block is lost", where);
    pheap_off more = pheap_alloc(h, 3 * PH_CHUNK_SIZE);
    pheap_free(h, more);
    if (pheap_close(h) != 0 || pheap_open(image, NULL, &h) != 0) {
        ph_test_fail(__FILE__, __LINE__, "%s: reopen: %s", where, pheap_errmsg());
        return 0;
    }
    if (pheap_check(h, &r) != 0 && !(kept && r.errors == r.damaged_chunks))
        ph_test_fail(__FILE__, __LINE__, "%s: check after reopen: %s", where, r.first_error);
    pheap_close(h);
    return kept;
}

static void enumerate(const char *name, const char *base, void (*work)(pheap *), int may_keep,
                      uint64_t bits_off)
{
    char image[512], where[128];
    snprintf(image, sizeof(image), "%s", ph_test_path("repair-image.heap"));
    uint64_t fences = run(base, image, 0, &variants[0], work);
    if (!fences) {
        ph_test_fail(__FILE__, __LINE__, "%s: the dry run took no fence", name);
        return;
    }
    judge(image, "no crash", 0);
    if (word_at(image, bits_off) != 0)
        ph_test_fail(__FILE__, __LINE__, "%s: the damaged descriptor was not zeroed", name);
    unsigned images = 0, kept = 0;
    for (uint64_t f = 1; f <= fences; f++)
        for (unsigned v = 0; v < PH_ARRAY_N(variants); v++) {
            run(base, image, f, &variants[v], work);
            if (access(image, F_OK) != 0)
                continue;
            snprintf(where, sizeof(where), "%s, fence %llu, variant %u", name,
                     (unsigned long long)f, v);
            kept += (unsigned)judge(image, where, may_keep);
            images++;
        }
    printf("%s: %llu fences, %u crash images, %u with the damage left\n", name,
           (unsigned long long)fences, images, kept);
}

static void recover_only(pheap *h)
{
    pheap_recover(h);
}

TEST(gc_recovery_zeroes_a_damaged_descriptor)
{
    char base[512];
    snprintf(base, sizeof(base), "%s", ph_test_path("repair-gc.heap"));
    pheap *h = ph_test_create_mode(base, 1u << 20, PHEAP_CONSISTENCY_GC, 0);
    REQUIRE(h);
    pheap_off keep = pheap_alloc(h, 64);
    REQUIRE(keep);
    REQUIRE_OK(pheap_root_set(h, "keep", keep));
    for (unsigned i = 0; i < 50; i++)
        pheap_alloc(h, 100); /* garbage: recovery frees it */
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    uint64_t last = st.data_size / PH_CHUNK_SIZE - 1;
    REQUIRE_OK(pheap_close(h));
    /* a crash of a session: the next open needs recovery */
    pheap_options sim = {.flags = PHEAP_SIMULATE};
    REQUIRE_OK(pheap_open(base, &sim, &h));
    char crashed[512];
    snprintf(crashed, sizeof(crashed), "%s", ph_test_path("repair-gc-crashed.heap"));
    REQUIRE_OK(pheap_sim_crash(h, crashed, 0, 0));
    REQUIRE(rename(crashed, base) == 0);
    uint64_t bits = ph_test_region_offset(base, PH_REGION_SLABS) + last * PH_SLAB_DESC_SIZE +
                    offsetof(ph_slab_desc, xbits);
    set_word(base, bits, 0xf0f0f0f0f0f0f0f0ull);
    set_word(base, bits + 8 * 64, 3);
    enumerate("gc recovery", base, recover_only, 0, bits);
}

static void grow(pheap *h)
{
    pheap_off a = pheap_alloc(h, 6 * PH_CHUNK_SIZE);
    pheap_off b = pheap_alloc(h, 200);
    pheap_free(h, b);
    pheap_free(h, a);
}

TEST(growth_zeroes_a_damaged_descriptor)
{
    char base[512];
    snprintf(base, sizeof(base), "%s", ph_test_path("repair-grow.heap"));
    unlink(base);
    pheap_options o = {.size = 256u << 10, .max_size = 8u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h = NULL;
    REQUIRE_OK(pheap_open(base, &o, &h));
    pheap_off keep = pheap_alloc(h, 64);
    REQUIRE(keep);
    REQUIRE_OK(pheap_root_set(h, "keep", keep));
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    uint64_t backed = st.data_size / PH_CHUNK_SIZE;
    REQUIRE_OK(pheap_close(h));
    uint64_t bits = ph_test_region_offset(base, PH_REGION_SLABS) + (backed + 1) * PH_SLAB_DESC_SIZE +
                    offsetof(ph_slab_desc, xbits);
    set_word(base, bits, ~0ull);
    enumerate("growth", base, grow, 1, bits);
}
