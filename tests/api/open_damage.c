/*
 * open_damage.c -- damage the fuzz target found (docs/FUZZING.md), one
 * case each: what no crash leaves in the root table, the lanes, the
 * transaction logs and the name directory's rebuild words is refused at
 * open with PHEAP_ECORRUPT, a message naming it and the file unchanged;
 * the descriptors of chunks that are no slab are refused when such a chunk
 * is to become one; what a recovery or a growth can put right (a GC
 * heap's descriptors, those of chunks the heap grows over) is put right,
 * and pheap_check then passes.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/layout.h"
#include "harness.h"

static uint64_t word_at(const char *path, uint64_t off)
{
    uint64_t v = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0 || pread(fd, &v, 8, (off_t)off) != 8)
        ph_test_fail(__FILE__, __LINE__, "cannot read %s at %llu", path, (unsigned long long)off);
    if (fd >= 0)
        close(fd);
    return v;
}

static void set_word(const char *path, uint64_t off, uint64_t v)
{
    int fd = open(path, O_WRONLY);
    if (fd < 0 || pwrite(fd, &v, 8, (off_t)off) != 8)
        ph_test_fail(__FILE__, __LINE__, "cannot write %s at %llu", path, (unsigned long long)off);
    if (fd >= 0)
        close(fd);
}

static void set_bytes(const char *path, uint64_t off, const void *buf, size_t n)
{
    int fd = open(path, O_WRONLY);
    if (fd < 0 || pwrite(fd, buf, n, (off_t)off) != (ssize_t)n)
        ph_test_fail(__FILE__, __LINE__, "cannot write %s at %llu", path, (unsigned long long)off);
    if (fd >= 0)
        close(fd);
}

/* 1 when the files at a and b hold the same bytes. */
static int same_file(const char *a, const char *b)
{
    int fa = open(a, O_RDONLY), fb = open(b, O_RDONLY), same = fa >= 0 && fb >= 0;
    static char ba[1 << 16], bb[1 << 16];
    while (same) {
        ssize_t na = read(fa, ba, sizeof(ba)), nb = read(fb, bb, sizeof(bb));
        same = na == nb && na >= 0 && memcmp(ba, bb, (size_t)(na > 0 ? na : 0)) == 0;
        if (na <= 0)
            break;
    }
    if (fa >= 0)
        close(fa);
    if (fb >= 0)
        close(fb);
    return same;
}

static char base_path[512];
static uint64_t base_backed_chunks;

/* A closed LOG heap with roots, names and a committed transaction. */
static int make_base(void)
{
    if (base_path[0])
        return 0;
    static char path[512];
    snprintf(path, sizeof(path), "%s", ph_test_path("damage-base.heap"));
    pheap *h = ph_test_create(path, 1u << 20);
    if (!h)
        return -1;
    pheap_off a = pheap_alloc(h, 64), b = pheap_alloc(h, 40000);
    if (!a || !b || pheap_root_set(h, "a", a) || pheap_root_set(h, "b", b) ||
        !pheap_alloc_named(h, "named", 100) || pheap_tx_begin(h))
        return -1;
    pheap_tx_add(h, pheap_direct(h, a), 8);
    *(uint64_t *)pheap_direct(h, a) = 7;
    if (pheap_tx_commit(h))
        return -1;
    struct pheap_stats st;
    pheap_stats(h, &st);
    base_backed_chunks = st.data_size / PH_CHUNK_SIZE;
    if (pheap_close(h))
        return -1;
    snprintf(base_path, sizeof(base_path), "%s", path);
    return 0;
}

/* Opens a copy of heap `base` with one word changed: PHEAP_ECORRUPT with
 * `msg` in the message, the file byte for byte as it was. */
static void expect_refused_in(const char *base, const char *what, uint64_t off, uint64_t v,
                              const char *msg)
{
    char copy[512], before[512];
    snprintf(copy, sizeof(copy), "%s", ph_test_path("damage-copy.heap"));
    snprintf(before, sizeof(before), "%s", ph_test_path("damage-before.heap"));
    if (ph_test_copy_file(base, copy) != 0) {
        ph_test_fail(__FILE__, __LINE__, "%s: cannot copy the base", what);
        return;
    }
    set_word(copy, off, v);
    ph_test_copy_file(copy, before);
    pheap *h = NULL;
    int rc = pheap_open(copy, NULL, &h);
    if (rc != PHEAP_ECORRUPT || !strstr(pheap_errmsg(), msg))
        ph_test_fail(__FILE__, __LINE__, "%s: open gave %d (%s), expected PHEAP_ECORRUPT naming '%s'",
                     what, rc, pheap_errmsg(), msg);
    if (!rc)
        pheap_close(h);
    pheap_options ro = {.flags = PHEAP_RDONLY};
    if (pheap_open(copy, &ro, &h) != PHEAP_ECORRUPT) {
        ph_test_fail(__FILE__, __LINE__, "%s: a read-only open is not refused", what);
        pheap_close(h);
    }
    if (!same_file(copy, before))
        ph_test_fail(__FILE__, __LINE__, "%s: the refused open changed the file", what);
}

#define expect_refused(...) expect_refused_in(base_path, __VA_ARGS__)

TEST(root_table)
{
    REQUIRE_OK(make_base());
    uint64_t roots = ph_test_region_offset(base_path, PH_REGION_ROOTS);
    expect_refused("root commit word 2", roots + offsetof(ph_root_entry, xused), 2,
                   "neither 0 nor 1");
    expect_refused("root offset in the metadata", roots + offsetof(ph_root_entry, xoff), 4096,
                   "outside the data region");
    /* the second root named like the first: "a" */
    expect_refused("root name twice", roots + sizeof(ph_root_entry) + offsetof(ph_root_entry, name),
                   'a', "used twice");
    char full[PH_ROOT_NAME_MAX + 1];
    memset(full, 'x', sizeof(full));
    const char *copy = ph_test_path("damage-copy.heap");
    REQUIRE_OK(ph_test_copy_file(base_path, copy));
    set_bytes(copy, roots + offsetof(ph_root_entry, name), full, sizeof(full));
    pheap *h = NULL;
    CHECK_EQ(pheap_open(copy, NULL, &h), PHEAP_ECORRUPT);
    CHECK(strstr(pheap_errmsg(), "not terminated") != NULL);
}

TEST(lanes_and_transaction_logs)
{
    REQUIRE_OK(make_base());
    uint64_t lanes = ph_test_region_offset(base_path, PH_REGION_LANES);
    expect_refused("an active lane entry after a clean close", lanes + 5 * PH_LANE_SIZE,
                   1u << 8 | PH_LOG_ACTIVE, "lane entries are active");
    uint64_t anchor = lanes + PH_TXLOG_ANCHORS; /* lane 0's: the base's transaction */
    uint64_t st = word_at(base_path, anchor + offsetof(ph_txlog_anchor, xstate));
    CHECK(st >> 8 != 0);
    expect_refused("a transaction in flight after a clean close",
                   anchor + offsetof(ph_txlog_anchor, xstate), st | PH_TX_ACTIVE,
                   "a transaction in flight");
    expect_refused("a ceiling below the sequence", anchor + offsetof(ph_txlog_anchor, xceiling),
                   st >> 8, "at or above its ceiling");
    expect_refused("a ceiling past 2^56", anchor + offsetof(ph_txlog_anchor, xceiling),
                   (1ull << 56) - 1, "past 2^56");
}

/* A clean open does not read the descriptors of chunks that are no slab:
 * it costs what is live, not the heap's size.  Allocated bits in one are
 * met when its chunk first becomes a slab: that allocation fails with
 * PHEAP_ECORRUPT naming it, the chunk is set aside with its descriptor as
 * it was, the allocations after it use the rest of the heap, and
 * pheap_check names it all along. */
TEST(descriptor_of_a_chunk_that_is_no_slab)
{
    REQUIRE_OK(make_base());
    char copy[512];
    snprintf(copy, sizeof(copy), "%s", ph_test_path("damage-orphan.heap"));
    REQUIRE_OK(ph_test_copy_file(base_path, copy));
    uint64_t last = base_backed_chunks - 1; /* free space in the base */
    uint64_t bits = ph_test_region_offset(copy, PH_REGION_SLABS) + last * PH_SLAB_DESC_SIZE +
                    offsetof(ph_slab_desc, xbits);
    set_word(copy, bits, 3);
    pheap *h = NULL;
    REQUIRE_OK(pheap_open(copy, NULL, &h));
    pheap_check_report r;
    CHECK_EQ(pheap_check(h, &r), PHEAP_ECORRUPT);
    CHECK_EQ(r.errors, 1u);
    CHECK(strstr(r.first_error, "no slab in the extent log") != NULL);
    unsigned got = 0, damaged = 0;
    for (;;) {
        if (pheap_alloc(h, 2048)) {
            got++;
            continue;
        }
        if (pheap_errno() != PHEAP_ECORRUPT)
            break;
        CHECK(strstr(pheap_errmsg(), "no slab in the extent log") != NULL);
        CHECK(strstr(pheap_errmsg(), "set aside") != NULL);
        damaged++;
    }
    CHECK_EQ(pheap_errno(), PHEAP_ENOMEM);
    CHECK_EQ(damaged, 1u);
    CHECK(got >= 32u); /* other chunks served */
    CHECK_EQ(pheap_check(h, &r), PHEAP_ECORRUPT);
    CHECK_EQ(r.errors, 1u);
    REQUIRE_OK(pheap_close(h));
    CHECK_EQ(word_at(copy, bits), 3);
    REQUIRE_OK(pheap_open(copy, NULL, &h)); /* the damage is still there */
    CHECK_EQ(pheap_check(h, &r), PHEAP_ECORRUPT);
    pheap_close(h);
}

/* The same chunk met by large blocks, which never read a descriptor
 * either: the bytes of the slab the log lost stay as they are, and the
 * chunk is set aside.  Then a crash: the recovery opens the heap too. */
TEST(descriptor_of_a_chunk_that_is_no_slab_large_blocks)
{
    REQUIRE_OK(make_base());
    char copy[512];
    snprintf(copy, sizeof(copy), "%s", ph_test_path("damage-orphan-large.heap"));
    REQUIRE_OK(ph_test_copy_file(base_path, copy));
    uint64_t last = base_backed_chunks - 1;
    uint64_t chunk = ph_test_region_offset(copy, PH_REGION_DATA) + last * PH_CHUNK_SIZE;
    set_word(copy, ph_test_region_offset(copy, PH_REGION_SLABS) + last * PH_SLAB_DESC_SIZE +
                       offsetof(ph_slab_desc, xbits), 3);
    set_bytes(copy, chunk, "PRECIOUS", 8); /* its one block, which a program may still use */
    pheap *h = NULL;
    REQUIRE_OK(pheap_open(copy, NULL, &h));
    unsigned got = 0, damaged = 0;
    pheap_off blocks[64];
    for (;;) {
        pheap_off b = pheap_alloc(h, 40000);
        if (b && got < 64) {
            memset(pheap_direct(h, b), 'x', 40000);
            blocks[got++] = b;
            continue;
        }
        if (pheap_errno() != PHEAP_ECORRUPT)
            break;
        CHECK(strstr(pheap_errmsg(), "no slab in the extent log") != NULL);
        damaged++;
    }
    CHECK_EQ(pheap_errno(), PHEAP_ENOMEM);
    CHECK_EQ(damaged, 1u);
    CHECK(got >= 2u);
    CHECK(memcmp(pheap_direct(h, chunk), "PRECIOUS", 8) == 0);
    CHECK_EQ(pheap_free(h, chunk), PHEAP_ENOTALLOC); /* set aside, not live */
    for (unsigned i = 0; i < got; i++)
        REQUIRE_OK(pheap_free(h, blocks[i]));
    pheap_check_report r;
    CHECK_EQ(pheap_check(h, &r), PHEAP_ECORRUPT);
    CHECK_EQ(r.errors, 1u);
    CHECK_EQ(r.damaged_chunks, 1u);
    REQUIRE_OK(pheap_close(h));
    /* A crash with the damage there: the recovery does not refuse it either. */
    pheap_options sim = {.flags = PHEAP_SIMULATE};
    REQUIRE_OK(pheap_open(copy, &sim, &h));
    const char *image = ph_test_path("damage-orphan-crash.heap");
    REQUIRE_OK(pheap_sim_crash(h, image, 0, 0));
    REQUIRE_OK(pheap_open(image, NULL, &h));
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.was_unclean, 1);
    CHECK_EQ(pheap_check(h, &r), PHEAP_ECORRUPT);
    CHECK_EQ(r.errors, r.damaged_chunks);
    CHECK(pheap_alloc(h, 64) != 0);
    pheap_close(h);
    /* Shared between processes, the chunk is set aside as a logged
     * reservation, which the next exclusive open drops. */
    pheap_options sh = {.flags = PHEAP_SHARED};
    REQUIRE_OK(pheap_open(image, &sh, &h));
    got = damaged = 0;
    for (pheap_off b; got < 64;) {
        if ((b = pheap_alloc(h, 40000)) != 0)
            blocks[got++] = b;
        else if (pheap_errno() == PHEAP_ECORRUPT)
            damaged++;
        else
            break;
    }
    CHECK_EQ(pheap_errno(), PHEAP_ENOMEM);
    CHECK_EQ(damaged, 1u);
    for (unsigned i = 0; i < got; i++)
        REQUIRE_OK(pheap_free(h, blocks[i]));
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(pheap_open(image, NULL, &h));
    CHECK_EQ(pheap_check(h, &r), PHEAP_ECORRUPT);
    CHECK_EQ(r.errors, 1u);
    CHECK_EQ(r.damaged_chunks, 1u);
    CHECK(memcmp(pheap_direct(h, chunk), "PRECIOUS", 8) == 0);
    pheap_close(h);
}

/* No purge punches such a chunk either: a free elsewhere, then the close's
 * purge of the free space around it, keep its bytes. */
TEST(descriptor_of_a_chunk_that_is_no_slab_purge)
{
    char path[512];
    snprintf(path, sizeof(path), "%s", ph_test_path("damage-orphan-purge.heap"));
    pheap *h = ph_test_create(path, 8u << 20);
    REQUIRE(h);
    REQUIRE_OK(pheap_root_set(h, "x", pheap_alloc(h, 64)));
    REQUIRE_OK(pheap_close(h));
    uint64_t ch = 100, chunk = ph_test_region_offset(path, PH_REGION_DATA) + ch * PH_CHUNK_SIZE;
    set_word(path, ph_test_region_offset(path, PH_REGION_SLABS) + ch * PH_SLAB_DESC_SIZE +
                       offsetof(ph_slab_desc, xbits), 3);
    set_bytes(path, chunk, "PRECIOUS", 8);
    for (int round = 0; round < 2; round++) {
        REQUIRE_OK(pheap_open(path, NULL, &h));
        pheap_off b = pheap_alloc(h, 300000); /* the first fit, far below chunk 100 */
        REQUIRE(b);
        CHECK(b + 300000 <= chunk);
        REQUIRE_OK(pheap_free(h, b));
        REQUIRE_OK(pheap_close(h)); /* purges the free space, chunk 100's extent too */
    }
    REQUIRE_OK(pheap_open(path, NULL, &h));
    CHECK(memcmp(pheap_direct(h, chunk), "PRECIOUS", 8) == 0);
    pheap_check_report r;
    CHECK_EQ(pheap_check(h, &r), PHEAP_ECORRUPT);
    CHECK_EQ(r.damaged_chunks, 1u);
    pheap_close(h);
}

TEST(name_rebuild_words)
{
    REQUIRE_OK(make_base());
    uint64_t names = ph_test_region_offset(base_path, PH_REGION_NAMES);
    expect_refused("a rebuild committed in a clean heap", names + offsetof(ph_names_header, xold), 1,
                   "rebuild is unfinished in a heap closed cleanly");
    expect_refused("a rebuild word in the metadata", names + offsetof(ph_names_header, xnew), 8192,
                   "outside the data region");
}

/* A GC heap's descriptors are those of its last clean close until
 * pheap_recover: recovery zeroes what a chunk that is no slab holds. */
TEST(gc_recovery_zeroes_descriptors_of_no_slab)
{
    char path[512];
    snprintf(path, sizeof(path), "%s", ph_test_path("damage-gc.heap"));
    pheap *h = ph_test_create_mode(path, 1u << 20, PHEAP_CONSISTENCY_GC, 0);
    REQUIRE(h);
    pheap_off a = pheap_alloc(h, 64);
    REQUIRE(a);
    REQUIRE_OK(pheap_root_set(h, "a", a));
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    uint64_t last = st.data_size / PH_CHUNK_SIZE - 1;
    REQUIRE_OK(pheap_close(h));
    pheap_options sim = {.flags = PHEAP_SIMULATE};
    REQUIRE_OK(pheap_open(path, &sim, &h));
    const char *image = ph_test_path("damage-gc-image.heap");
    REQUIRE_OK(pheap_sim_crash(h, image, 0, 0));
    uint64_t bits = ph_test_region_offset(image, PH_REGION_SLABS) + last * PH_SLAB_DESC_SIZE +
                    offsetof(ph_slab_desc, xbits);
    set_word(image, bits, 3);
    REQUIRE_OK(pheap_open(image, NULL, &h));
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.needs_recovery, 1);
    pheap_check_report r;
    CHECK_EQ(pheap_check(h, &r), 0); /* not judged before the tracing */
    REQUIRE_OK(pheap_recover(h));
    CHECK_EQ(pheap_check(h, &r), 0);
    CHECK_EQ(pheap_root_get(h, "a"), a);
    REQUIRE_OK(pheap_close(h));
    CHECK_EQ(word_at(image, bits), 0);
    REQUIRE_OK(pheap_open(image, NULL, &h));
    CHECK_EQ(pheap_check(h, &r), 0);
    pheap_close(h);
}

/* Open reads the descriptors of backed chunks only: a growth zeroes the
 * allocated bits it finds in those of the chunks it adds. */
TEST(growth_zeroes_descriptors_of_new_chunks)
{
    char path[512];
    snprintf(path, sizeof(path), "%s", ph_test_path("damage-grow.heap"));
    unlink(path);
    pheap_options o = {.size = 1u << 20, .max_size = 8u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h = NULL;
    REQUIRE_OK(pheap_open(path, &o, &h));
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    uint64_t backed = st.data_size / PH_CHUNK_SIZE, max = (st.max_size - st.data_offset) / PH_CHUNK_SIZE;
    REQUIRE_OK(pheap_close(h));
    REQUIRE(max > backed + 2);
    uint64_t bits = ph_test_region_offset(path, PH_REGION_SLABS) + (backed + 1) * PH_SLAB_DESC_SIZE +
                    offsetof(ph_slab_desc, xbits);
    set_word(path, bits, ~0ull);
    REQUIRE_OK(pheap_open(path, NULL, &h)); /* not backed: not read */
    pheap_off big = pheap_alloc(h, (backed + 2) * PH_CHUNK_SIZE);
    REQUIRE(big);
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK(st.data_size / PH_CHUNK_SIZE > backed + 1);
    pheap_check_report r;
    CHECK_EQ(pheap_check(h, &r), 0);
    REQUIRE_OK(pheap_close(h));
    CHECK_EQ(word_at(path, bits), 0);
}

/* ---- morphed slabs (format 1.7) ---- */

static char morph_path[512];
static pheap_off morph_old[4]; /* the four 2048-byte blocks left in the morphed slab */
static uint64_t morph_desc;    /* file offset of its descriptor */

/* Two slabs of 2048-byte blocks, all but four freed in the first and six
 * in the second, in a thread whose exit returns its cache: the first may
 * morph.  On CPU 0, as the caller: one arena. */
static void *fill_and_thin(void *arg)
{
    pheap *h = arg;
    pheap_off v[64];
    (void)ph_test_pin_cpu(0);
    for (unsigned i = 0; i < 64; i++)
        if (!(v[i] = pheap_alloc(h, 2048)))
            return NULL;
    for (unsigned i = 0, k = 0; i < 64; i++) {
        if (i < 32 && i % 8 == 3)
            morph_old[k++] = v[i];
        else if (!(i >= 32 && i % 5 == 0) && pheap_free(h, v[i]))
            return NULL;
    }
    return h;
}

/* The data offset of the heap at `path`. */
static uint64_t base_data_off(const char *path)
{
    return ph_test_region_offset(path, PH_REGION_DATA);
}

/* A closed heap whose one slab morphed from 2048 to 512-byte blocks. */
static int make_morph_base(void)
{
    if (morph_path[0])
        return 0;
    static char path[512];
    snprintf(path, sizeof(path), "%s", ph_test_path("damage-morph.heap"));
    pheap *h = ph_test_create(path, 1u << 20);
    pthread_t t;
    void *ok = NULL;
    (void)ph_test_pin_cpu(0);
    if (!h || pthread_create(&t, NULL, fill_and_thin, h) || pthread_join(t, &ok) || !ok)
        return -1;
    for (unsigned i = 0; i < 8; i++)
        if (!pheap_alloc(h, 512))
            return -1;
    struct pheap_stats st;
    pheap_stats(h, &st);
    if (st.slab_morphs != 1 || pheap_close(h))
        return -1;
    uint64_t chunk = (morph_old[0] - st.data_offset) / PH_CHUNK_SIZE;
    morph_desc = ph_test_region_offset(path, PH_REGION_SLABS) + chunk * PH_SLAB_DESC_SIZE;
    snprintf(morph_path, sizeof(morph_path), "%s", path);
    return 0;
}

TEST(morph_words_no_crash_leaves)
{
    REQUIRE_OK(make_morph_base());
    uint64_t mw = morph_desc + offsetof(ph_slab_desc, morph), m = word_at(morph_path, mw);
    CHECK_EQ(m, PH_MORPH_WORD(PH_MORPH_MORPHED, 24, 24, 16));
    expect_refused_in(morph_path, "a morph word without its tag", mw, m & 0xffffffffull,
                      "morph word");
    expect_refused_in(morph_path, "a morph word naming another extent-log class", mw,
                      PH_MORPH_WORD(PH_MORPH_MORPHED, 20, 24, 16), "morph word");
    expect_refused_in(morph_path, "a morph from a class that never morphs", mw,
                      PH_MORPH_WORD(PH_MORPH_MORPHED, 24, 0, 16), "morph word");
    expect_refused_in(morph_path, "an unknown morph state", mw,
                      PH_MORPH_WORD(9, 24, 24, 16), "morph word");
    expect_refused_in(morph_path, "class words that are not the morph word's",
                      morph_desc + offsetof(ph_slab_desc, cls), 24, "does not match its morph word");
    /* Line 1, word 6: old blocks 1, 17, ...; 32 blocks of 2048 bytes end at bit 1. */
    uint64_t old_word = morph_desc + offsetof(ph_slab_desc, xbits) + 14 * 8;
    expect_refused_in(morph_path, "an old bit past the old class's blocks", old_word, 1ull << 5,
                      "old-block word");
    /* An old bit where no old block lives (its space not pinned), and A
     * and E on a block inside a live old block (handed out over it). */
    uint64_t slab = morph_old[0] - (morph_old[0] - base_data_off(morph_path)) % PH_CHUNK_SIZE;
    uint32_t ghost = 0;
    for (int clash = 1; clash; ghost++) {
        clash = 0;
        for (unsigned k = 0; k < 4; k++)
            clash |= morph_old[k] == slab + ghost * 2048u;
    }
    ghost--;
    uint64_t gw = morph_desc + offsetof(ph_slab_desc, xbits) +
                  ((ghost % 16) * 8 + PH_MORPH_OLD_WORD + ghost / 16 / 64) * 8;
    expect_refused_in(morph_path, "an old bit over space no pin holds", gw,
                      word_at(morph_path, gw) | 1ull << (ghost / 16 % 64), "is not pinned");
    uint32_t in = (uint32_t)((morph_old[0] - slab) / 512) + 1;
    uint64_t pw = morph_desc + offsetof(ph_slab_desc, xbits) + ((in % 16) * 8 + in / 16 / 32) * 8;
    uint64_t pv = word_at(morph_path, pw);
    CHECK_EQ((pv >> (2 * (in / 16 % 32))) & 3, 1); /* pinned */
    expect_refused_in(morph_path, "a block allocated inside a live old block", pw,
                      pv | 2ull << (2 * (in / 16 % 32)), "is not pinned");
    expect_refused_in(morph_path, "a settled slab with pins and old bits", mw,
                      PH_MORPH_WORD(PH_MORPH_SETTLED, 24, 0, 16), "is invalid");
}

/* A morph cut short after its commit (MORPHING) is finished at the next
 * open from the old blocks' bits; old bits a morph cut short before its
 * commit left in a slab are cleared.  Both pass pheap_check after. */
TEST(morphs_cut_short_are_finished)
{
    REQUIRE_OK(make_morph_base());
    const char *copy = ph_test_path("damage-copy.heap");
    REQUIRE_OK(ph_test_copy_file(morph_path, copy));
    set_word(copy, morph_desc + offsetof(ph_slab_desc, morph),
             PH_MORPH_WORD(PH_MORPH_MORPHING, 24, 24, 16));
    for (unsigned w = 0; w < 4; w++) /* line 0 as the old class had it: nothing pinned */
        set_word(copy, morph_desc + offsetof(ph_slab_desc, xbits) + w * 8, 0);
    set_word(copy, morph_desc + offsetof(ph_slab_desc, cls), 24);
    pheap *h = NULL;
    REQUIRE_OK(pheap_open(copy, NULL, &h));
    REQUIRE_OK(pheap_check(h, NULL));
    for (unsigned k = 0; k < 4; k++)
        CHECK_EQ(pheap_usable_size(h, morph_old[k]), 2048);
    CHECK_EQ(pheap_free(h, morph_old[0] + 512), PHEAP_EINTERIOR); /* pinned again */
    REQUIRE_OK(pheap_close(h));
    CHECK_EQ(word_at(copy, morph_desc + offsetof(ph_slab_desc, morph)),
             PH_MORPH_WORD(PH_MORPH_MORPHED, 24, 24, 16));

    /* A slab never morphed, with the old bit of its allocated block "a" in
     * words 6 and 7 (a morph cut short before its commit), then of a free
     * block (which no morph leaves). */
    REQUIRE_OK(make_base());
    REQUIRE_OK(ph_test_copy_file(base_path, copy));
    pheap_options ro = {.flags = PHEAP_RDONLY};
    REQUIRE_OK(pheap_open(copy, &ro, &h));
    pheap_off a = pheap_root_get(h, "a");
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    REQUIRE_OK(pheap_close(h));
    uint64_t chunk = (a - st.data_offset) / PH_CHUNK_SIZE, j = (a - st.data_offset) % PH_CHUNK_SIZE / 64;
    uint64_t word = ph_test_region_offset(copy, PH_REGION_SLABS) + chunk * PH_SLAB_DESC_SIZE +
                    offsetof(ph_slab_desc, xbits) +
                    ((j % 16) * 8 + PH_MORPH_OLD_WORD + j / 16 / 64) * 8;
    set_word(copy, word, 1ull << (j / 16 % 64));
    REQUIRE_OK(pheap_open(copy, NULL, &h));
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    CHECK_EQ(word_at(copy, word), 0);
    uint64_t free_j = j + 16; /* the next block in the same line: never allocated */
    const char *stray = ph_test_path("damage-stray.heap");
    REQUIRE_OK(ph_test_copy_file(copy, stray));
    expect_refused_in(stray, "an old bit of a free block in a slab never morphed",
                      word + (free_j / 16 / 64 - j / 16 / 64) * 8, 1ull << (free_j / 16 % 64),
                      "no morph explains");
}
