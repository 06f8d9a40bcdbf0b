/*
 * check_damage.c -- damaged allocator metadata is never silent.  A closed
 * heap with live small and large blocks and a root naming one of them has
 * its extent log, a slab descriptor or a root damaged on the file; then
 * either pheap_open refuses it (PHEAP_ECORRUPT, the file unchanged) or
 * pheap_check reports a problem, or nothing that was live is lost.  What
 * open refuses and what only check reports is documented in pheap.h and
 * docs/RECOVERY.md.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/layout.h"
#include "harness.h"
#include "util/crc32c.h"

#define FAIL(...) ph_test_fail(__FILE__, __LINE__, __VA_ARGS__)

enum { NSMALL = 12, NMID = 6, NLARGE = 3 };

typedef struct heap_info {
    uint64_t live_blocks;        /* after creation */
    uint64_t extlog, extlog_size; /* the extent log region */
    uint64_t slabs;              /* the slab descriptor region */
    uint64_t roots;              /* the root region */
    uint64_t data;               /* the data region */
    pheap_off rooted;            /* the large block the root "obj" names */
    pheap_off small;             /* a small block (its slab is the first chunk) */
} heap_info;

static uint64_t region(const ph_header *hdr, unsigned kind, uint64_t *size)
{
    for (unsigned i = 0; i < hdr->nregions && i < PH_REGIONS_MAX; i++)
        if (hdr->regions[i].kind == kind) {
            if (size)
                *size = hdr->regions[i].size;
            return hdr->regions[i].offset;
        }
    return 0;
}

/* A closed heap at `path`: NSMALL 64-byte, NMID 1000-byte and NLARGE
 * 100 KB blocks; the root "obj" names the second large block. */
static int make_heap(const char *path, heap_info *hi)
{
    unlink(path);
    pheap_options o = {.size = 8u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL, .flush = PHEAP_FLUSH_NONE};
    pheap *h;
    if (pheap_open(path, &o, &h)) {
        FAIL("create: %s", pheap_errmsg());
        return -1;
    }
    memset(hi, 0, sizeof(*hi));
    for (int i = 0; i < NSMALL + NMID + NLARGE; i++) {
        pheap_off off = pheap_alloc(h, i < NSMALL ? 64 : i < NSMALL + NMID ? 1000 : 100000);
        if (!off)
            FAIL("alloc: %s", pheap_errmsg());
        if (i == 0)
            hi->small = off;
        if (i == NSMALL + NMID + 1)
            hi->rooted = off;
    }
    if (pheap_root_set(h, "obj", hi->rooted))
        FAIL("root_set: %s", pheap_errmsg());
    struct pheap_stats st;
    pheap_stats(h, &st);
    hi->live_blocks = st.live_blocks;
    if (pheap_check(h, NULL) != 0)
        FAIL("fresh heap: %s", pheap_errmsg());
    pheap_close(h);
    int fd = open(path, O_RDONLY);
    ph_header hdr;
    if (fd < 0 || pread(fd, &hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr)) {
        FAIL("read header of %s", path);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    hi->extlog = region(&hdr, PH_REGION_EXTLOG, &hi->extlog_size);
    hi->slabs = region(&hdr, PH_REGION_SLABS, NULL);
    hi->roots = region(&hdr, PH_REGION_ROOTS, NULL);
    hi->data = region(&hdr, PH_REGION_DATA, NULL);
    return hi->extlog && hi->slabs && hi->roots ? 0 : -1;
}

static int patch(const char *path, uint64_t off, const void *buf, size_t len)
{
    int fd = open(path, O_RDWR);
    int ok = fd >= 0 && pwrite(fd, buf, len, (off_t)off) == (ssize_t)len;
    if (fd >= 0)
        close(fd);
    return ok ? 0 : -1;
}

static int peek(const char *path, uint64_t off, void *buf, size_t len)
{
    int fd = open(path, O_RDONLY);
    int ok = fd >= 0 && pread(fd, buf, len, (off_t)off) == (ssize_t)len;
    if (fd >= 0)
        close(fd);
    return ok ? 0 : -1;
}

static int same_file(const char *a, const char *b)
{
    char cmd[1300];
    snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}

/* What became of a damaged heap. */
enum verdict { REFUSED, REPORTED, INTACT, SILENT_LOSS, OTHER };

static const char *verdict_name[] = {"refused", "reported", "intact", "SILENT LOSS", "other failure"};

/* Opens the damaged heap read-only (nothing may be written) and judges it:
 * refused by open, reported by check, or intact (everything still live and
 * the root's block still allocated).  A refusing open leaves the file as
 * it was. */
static enum verdict judge(const char *path, const heap_info *hi, char *why, size_t whylen)
{
    char copy[600];
    snprintf(copy, sizeof(copy), "%s.before", path);
    if (ph_test_copy_file(path, copy) != 0)
        return OTHER;
    pheap *h;
    pheap_options ro = {.flags = PHEAP_RDONLY};
    int rc = pheap_open(path, &ro, &h);
    snprintf(why, whylen, "%s", rc ? pheap_errmsg() : "");
    if (rc == PHEAP_ECORRUPT) {
        pheap_options rw = {.flush = PHEAP_FLUSH_NONE};
        int rw_rc = pheap_open(path, &rw, &h);
        if (rw_rc == 0) {
            pheap_close(h);
            snprintf(why, whylen, "a read-only open refused it but a read-write open did not");
            return OTHER;
        }
        if (!same_file(path, copy) || !strstr(pheap_errmsg(), path)) {
            snprintf(why, whylen, "refusing open changed the file or named no path: %s", pheap_errmsg());
            return OTHER;
        }
        unlink(copy);
        return REFUSED;
    }
    unlink(copy);
    if (rc)
        return OTHER;
    pheap_check_report r;
    rc = pheap_check(h, &r);
    snprintf(why, whylen, "%s", r.first_error);
    struct pheap_stats st;
    pheap_stats(h, &st);
    size_t rooted = pheap_usable_size(h, pheap_root_get(h, "obj"));
    pheap_close(h);
    if (rc == PHEAP_ECORRUPT && r.errors > 0 && r.first_error[0])
        return REPORTED;
    if (rc)
        return OTHER;
    if (st.live_blocks == hi->live_blocks && rooted >= 100000)
        return INTACT;
    snprintf(why, whylen, "check says consistent; live blocks %llu of %llu, root's block %s",
             (unsigned long long)st.live_blocks, (unsigned long long)hi->live_blocks,
             rooted ? "live" : "gone");
    return SILENT_LOSS;
}

static void expect(const char *what, enum verdict got, unsigned allowed, const char *why)
{
    if (!(allowed & (1u << got)))
        FAIL("%s: %s (%s)", what, verdict_name[got], why);
}

#define ANY_VISIBLE (1u << REFUSED | 1u << REPORTED | 1u << INTACT)

/* Offsets (from the file start) of the nonzero words of the extent log's
 * first half -- the active one of a heap never compacted. */
static unsigned live_words(const char *path, const heap_info *hi, uint64_t *out, unsigned cap)
{
    uint64_t half = (hi->extlog_size - PH_PAGE_SIZE) / 2;
    uint64_t *buf = malloc(half);
    unsigned n = 0;
    if (buf && peek(path, hi->extlog + PH_PAGE_SIZE, buf, half) == 0)
        for (uint64_t i = 0; i < half / 8 && n < cap; i++)
            if (buf[i])
                out[n++] = hi->extlog + PH_PAGE_SIZE + i * 8;
    free(buf);
    return n;
}

/* Eight random bytes over a live entry of the extent log, over its header,
 * or anywhere in it: never a silent loss. */
TEST(eight_random_bytes_in_the_extent_log)
{
    const char *path = ph_test_path("eight.heap");
    heap_info hi;
    unsigned refused = 0, reported = 0;
    for (uint64_t seed = 1; seed <= 24; seed++) {
        REQUIRE(make_heap(path, &hi) == 0);
        uint64_t words[64], rng = seed * 0x9e3779b97f4a7c15ull;
        unsigned n = live_words(path, &hi, words, 64);
        REQUIRE(n >= 2 * 4); /* slab and large entries, two words each */
        uint64_t at;
        switch (seed % 3) {
        case 0: at = words[ph_test_rand(&rng) % n] + ph_test_rand(&rng) % 8 - 4; break;
        case 1: at = hi.extlog + ph_test_rand(&rng) % 16; break; /* xactive, xlast_epoch */
        default: at = hi.extlog + ph_test_rand(&rng) % (hi.extlog_size - 8); break;
        }
        uint64_t bytes = ph_test_rand(&rng);
        REQUIRE(patch(path, at, &bytes, 8) == 0);
        char why[300], what[96];
        enum verdict v = judge(path, &hi, why, sizeof(why));
        snprintf(what, sizeof(what), "seed %llu, 8 bytes at extent log + %llu", (unsigned long long)seed,
                 (unsigned long long)(at - hi.extlog));
        expect(what, v, ANY_VISIBLE, why);
        refused += v == REFUSED;
        reported += v == REPORTED;
    }
    /* Two thirds of the seeds hit a live entry or the header: those are
     * refused, not merely reported. */
    CHECK(refused >= 16);
    (void)reported;
}

/* 64 KiB of random bytes over the start of the extent log: refused. */
TEST(random_64k_over_the_extent_log)
{
    const char *path = ph_test_path("random64k.heap");
    heap_info hi;
    for (uint64_t seed = 1; seed <= 4; seed++) {
        REQUIRE(make_heap(path, &hi) == 0);
        static uint64_t junk[65536 / 8];
        uint64_t rng = seed;
        for (size_t i = 0; i < PH_ARRAY_N(junk); i++)
            junk[i] = ph_test_rand(&rng);
        uint64_t at = seed == 1 ? hi.extlog : hi.extlog + PH_PAGE_SIZE; /* header too, or not */
        REQUIRE(patch(path, at, junk, sizeof(junk)) == 0);
        char why[300];
        enum verdict v = judge(path, &hi, why, sizeof(why));
        if (v != REFUSED)
            FAIL("seed %llu: 64 KiB random: %s (%s)", (unsigned long long)seed, verdict_name[v], why);
        else if (!strstr(why, "extent log"))
            FAIL("seed %llu: the message does not name the extent log: %s", (unsigned long long)seed, why);
    }
}

/* The extent log's entries of a slab erased (both words zero, as if never
 * written): the log alone cannot tell, but the slab's descriptor still
 * records allocated blocks, which check reports. */
TEST(erased_slab_entry_is_reported)
{
    const char *path = ph_test_path("erased.heap");
    heap_info hi;
    REQUIRE(make_heap(path, &hi) == 0);
    /* The entry of the 64-byte blocks' slab: kind SLAB, first page of its chunk. */
    uint64_t chunk_page = (hi.small - hi.data) / PH_CHUNK_SIZE * (PH_CHUNK_SIZE / PH_PAGE_SIZE);
    uint64_t words[64];
    unsigned n = live_words(path, &hi, words, 64), erased = 0;
    for (unsigned i = 0; i + 1 < n; i++) {
        uint64_t w0;
        REQUIRE(peek(path, words[i], &w0, 8) == 0);
        if ((words[i] - hi.extlog - PH_PAGE_SIZE) % 16 == 0 && ((w0 >> 36) & 0xf) == PH_EXT_SLAB &&
            (w0 & 0xfffffffffull) == chunk_page) {
            static const uint64_t zero[2];
            REQUIRE(patch(path, words[i], zero, 16) == 0);
            erased++;
        }
    }
    REQUIRE_EQ(erased, 1);
    char why[300];
    enum verdict v = judge(path, &hi, why, sizeof(why));
    expect("slab entry erased", v, 1u << REFUSED | 1u << REPORTED, why);
    if (v == REPORTED && !strstr(why, "descriptor"))
        FAIL("the finding does not name the descriptor: %s", why);
}

/* A live slab whose descriptor header is blank or names another class:
 * its bitmap cannot be trusted, and open refuses the heap. */
TEST(blank_or_wrong_slab_descriptor_is_refused)
{
    const char *path = ph_test_path("desc.heap");
    heap_info hi;
    for (int variant = 0; variant < 3; variant++) {
        REQUIRE(make_heap(path, &hi) == 0);
        uint64_t desc = hi.slabs + (hi.small - hi.data) / PH_CHUNK_SIZE * PH_SLAB_DESC_SIZE;
        uint64_t head[3] = {0, 0, 0};
        if (variant == 1) {
            REQUIRE(peek(path, desc, head, sizeof(head)) == 0);
            head[0] += 1; /* another class, its sizes left */
        }
        if (variant == 2) { /* a bit past the slab's last block */
            uint64_t word = ~0ull;
            REQUIRE(patch(path, desc + PH_LINE_SIZE + 15 * PH_LINE_SIZE + 56, &word, 8) == 0);
        } else {
            REQUIRE(patch(path, desc, head, sizeof(head)) == 0);
        }
        char why[300];
        enum verdict v = judge(path, &hi, why, sizeof(why));
        if (v != REFUSED)
            FAIL("descriptor variant %d: %s (%s)", variant, verdict_name[v], why);
        else if (!strstr(why, "slab"))
            FAIL("descriptor variant %d: the message does not name the slab: %s", variant, why);
    }
}

/* A root that names a block which is no longer live (freed, or an offset
 * inside a block) is reported by check; open does not refuse it. */
TEST(root_naming_no_live_block_is_reported)
{
    const char *path = ph_test_path("root.heap");
    heap_info hi;
    REQUIRE(make_heap(path, &hi) == 0);
    pheap *h;
    pheap_options o = {.flush = PHEAP_FLUSH_NONE};
    REQUIRE_OK(pheap_open(path, &o, &h));
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_free(h, hi.rooted)); /* the root now dangles */
    pheap_check_report r;
    CHECK_EQ(pheap_check(h, &r), PHEAP_ECORRUPT);
    CHECK(r.errors >= 1 && strstr(r.first_error, "obj") && strstr(r.first_error, "dangles"));
    REQUIRE_OK(pheap_root_set(h, "obj", 0));
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
    /* An interior offset written straight into the root's entry. */
    uint64_t interior = hi.small + 8;
    unsigned found = 0;
    for (unsigned i = 0; i < PH_ROOTS_MAX && !found; i++) {
        ph_root_entry e;
        REQUIRE(peek(path, hi.roots + i * sizeof(e), &e, sizeof(e)) == 0);
        if (e.xused == 0) {
            memset(e.name, 0, sizeof(e.name));
            memcpy(e.name, "inner", 6);
            e.name_crc = PH_ROOT_CHECK(ph_crc32c(0, e.name, sizeof(e.name))); /* a well-formed entry */
            e.xoff = interior;
            e.xused = 1;
            REQUIRE(patch(path, hi.roots + i * sizeof(e), &e, sizeof(e)) == 0);
            found = 1;
        }
    }
    REQUIRE(found);
    REQUIRE_OK(pheap_open(path, &o, &h));
    CHECK_EQ(pheap_check(h, &r), PHEAP_ECORRUPT);
    CHECK(strstr(r.first_error, "inner") != NULL);
    /* The heap stays usable, and setting the root right makes it consistent. */
    pheap_off more = pheap_alloc(h, 200);
    CHECK(more != 0);
    REQUIRE_OK(pheap_root_set(h, "inner", more));
    REQUIRE_OK(pheap_check(h, &r));
    pheap_close(h);
}
