/*
 * extlog.c -- the extent log's slots, read directly: after a compaction
 * every slot of the active half past the live entries, up to its
 * high-water mark, is zero, so that an
 * append always fills a slot that is durably zero and a torn append (one
 * of its two words on media) never decodes.  Before compactions rewrote
 * whole halves, slots past the end kept entries of older epochs, and a
 * torn pair -- a new second word over the old first word -- passed the
 * 16-bit check about once in 70,000 tries.
 */
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "format/header.h"
#include "harness.h"
#include "util/crc32c.h"
#include "heap/heap.h"

/* Non-zero slots of the active half at or past the append position and
 * below its mark (where appends go). */
static unsigned stale_slots(ph_extents *x)
{
    unsigned n = 0;
    uint64_t lines = x->half_entries / 4;
    for (uint64_t j = x->tail; j < x->high; j++) {
        const ph_extlog_entry *e = &x->half[x->active][(j % lines) * 4 + j / lines];
        n += e->w0 != 0 || e->w1 != 0;
    }
    return n;
}

TEST(slots_past_the_end_are_zero_after_compaction)
{
    const char *path = ph_test_path("extlog.heap");
    pheap *h = ph_test_create(path, 16u << 20);
    REQUIRE(h);
    ph_extents *x = h->engine->ext;
    enum { MANY = 200 };
    pheap_off keep[MANY];
    unsigned compactions = 0;
    uint64_t epoch = x->epoch;
    /* Many live extents, then few, so that each compaction writes fewer
     * entries than the one before it into the same half. */
    for (unsigned round = 0; round < 6; round++) {
        unsigned live = round % 2 ? 10 : MANY;
        for (unsigned i = 0; i < live; i++)
            REQUIRE((keep[i] = pheap_alloc(h, 20000)) != 0);
        while (x->epoch < epoch + 1) { /* fill the half: it compacts */
            pheap_off a = pheap_alloc(h, 20000);
            REQUIRE(a);
            REQUIRE_OK(pheap_free(h, a));
        }
        epoch = x->epoch;
        compactions++;
        CHECK_EQ(stale_slots(x), 0);
        for (unsigned i = 0; i < live; i++)
            REQUIRE_OK(pheap_free(h, keep[i]));
    }
    CHECK_EQ(compactions, 6);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

/* A torn append over a zero slot: either word alone never decodes, and
 * recovery ignores it. */
TEST(torn_append_over_a_zero_slot_is_ignored)
{
    const char *path = ph_test_path("torn-extlog.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    ph_extents *x = h->engine->ext;
    pheap_off a = pheap_alloc(h, 40000);
    REQUIRE(a);
    uint64_t lines = x->half_entries / 4, j = x->tail - 1;
    ph_extlog_entry *e = &x->half[x->active][(j % lines) * 4 + j / lines];
    ph_extlog_entry full = *e;
    pheap_close(h);
    for (unsigned w = 0; w < 2; w++) {
        pheap_options o = {.flags = PHEAP_SIMULATE};
        REQUIRE_OK(pheap_open(path, &o, &h));
        x = h->engine->ext;
        e = &x->half[x->active][(j % lines) * 4 + j / lines];
        REQUIRE(e->w0 == full.w0 && e->w1 == full.w1);
        /* The state a crash leaves when one word of the append landed. */
        if (w == 0)
            e->w1 = 0;
        else
            e->w0 = 0;
        pheap_persist(h, e, sizeof(*e));
        const char *img = ph_test_path("torn-extlog.image");
        REQUIRE_OK(pheap_sim_crash(h, img, 0, 0.0));
        /* Recovery zeroes the torn slot durably, so that the next append
         * there fills a durably zero slot again: crash right after the
         * recovery and look at what reached media. */
        pheap *r;
        pheap_options so = {.flags = PHEAP_SIMULATE};
        REQUIRE_OK(pheap_open(img, &so, &r));
        const char *img2 = ph_test_path("torn-extlog-recovered.image");
        REQUIRE_OK(pheap_sim_crash(r, img2, 0, 0.0));
        pheap_options ro = {.flags = PHEAP_RDONLY}; /* the durable state as it is */
        REQUIRE_OK(pheap_open(img2, &ro, &r));
        ph_extents *rx = r->engine->ext;
        const ph_extlog_entry *re = &rx->half[rx->active][(j % lines) * 4 + j / lines];
        CHECK(re->w0 == 0 && re->w1 == 0);
        pheap_close(r);
        REQUIRE_OK(pheap_open(img, NULL, &r));
        CHECK_EQ(pheap_usable_size(r, a), 0); /* the allocation is not there */
        REQUIRE_OK(pheap_check(r, NULL));
        CHECK(pheap_alloc(r, 40000) != 0);
        pheap_close(r);
    }
}

/* A heap whose log uses part of each half (256 KiB of data growable to
 * 8 MiB): when growth lets the mark rise over slots that hold stale
 * entries of an older epoch, the rise zeroes them before any append can
 * land there. */
TEST(slots_below_a_raised_mark_are_zero)
{
    const char *path = ph_test_path("extlog-mark.heap");
    unlink(path);
    pheap_options o = {.size = 256 * 1024, .max_size = 8u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h;
    REQUIRE_OK(pheap_open(path, &o, &h));
    ph_extents *x = h->engine->ext;
    REQUIRE(x->bounded);
    uint64_t high = x->high, lines = x->half_entries / 4;
    REQUIRE(high < x->half_entries && 3 * high <= lines);
    for (uint64_t j = high; j < 3 * high; j++) { /* whole and torn entries of epoch 0 */
        ph_extlog_entry *e = &x->half[x->active][(j % lines) * 4 + j / lines];
        e->w0 = j % 3 == 2 ? 0 : (j * 16) | (uint64_t)PH_EXT_LARGE << 36;
        e->w1 = j % 3 == 1 ? 0 : 16 | (j & 0xffff) << 48;
    }
    pheap_persist(h, x->half[x->active], x->half_entries * sizeof(ph_extlog_entry));
    while (x->tail + 2 < high) { /* appends up to the mark */
        pheap_off a = pheap_alloc(h, 20000);
        REQUIRE(a);
        REQUIRE_OK(pheap_free(h, a));
    }
    CHECK_EQ(stale_slots(x), 0);
    pheap_off big = pheap_alloc(h, 600 * 1024); /* grows: the cap, then the mark, rise */
    REQUIRE(big);
    REQUIRE_OK(pheap_free(h, big));
    CHECK(x->high > high);
    CHECK_EQ(stale_slots(x), 0);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(pheap_open(path, NULL, &h));
    REQUIRE_OK(pheap_check(h, NULL));
    CHECK_EQ(stale_slots(h->engine->ext), 0);
    pheap_close(h);
}

/* The other half's new mark is durable before the compaction's commit
 * (C1): a crash just before the commit's fence, with the header line's
 * words reaching media each on its own, never shows the new half with its
 * old mark -- which would lose every live extent.  Seeded images of that
 * instant, the mark word and the commit word drawn independently. */
TEST(compaction_commit_never_outruns_the_new_mark)
{
    const char *path = ph_test_path("extlog-commit.heap");
    const char *image = ph_test_path("extlog-commit.image");
    unlink(path);
    pheap_options o = {.size = 256 * 1024, .max_size = 8u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h;
    REQUIRE_OK(pheap_open(path, &o, &h));
    REQUIRE(h->engine->ext->bounded);
    enum { KEEP = 6 };
    pheap_off keep[KEEP];
    for (unsigned i = 0; i < KEEP; i++)
        REQUIRE((keep[i] = pheap_alloc(h, 20000 + 4096 * i)) != 0);
    REQUIRE_OK(pheap_close(h));
    unsigned shown = 0;
    for (uint64_t seed = 1; seed <= 48; seed++) {
        pheap_options so = {.flags = PHEAP_SIMULATE, .sim_crash_site = "compact",
                            .sim_crash_fence = 3, .sim_crash_image = image,
                            .sim_mode = PHEAP_SIM_WORDS, .sim_evict_probability = 0.5,
                            .sim_seed = seed};
        REQUIRE_OK(pheap_open(path, &so, &h));
        uint64_t epoch = h->engine->ext->epoch;
        while (h->engine->ext->epoch == epoch) { /* until the compaction's commit */
            pheap_off a = pheap_alloc(h, 20000);
            REQUIRE(a);
            REQUIRE_OK(pheap_free(h, a));
        }
        pheap_sim_crash(h, NULL, 0, 0.0);
        pheap_options wo = {.flags = PHEAP_SIMULATE};
        REQUIRE_OK(pheap_open(image, &wo, &h));
        shown += h->engine->ext->epoch > epoch;
        pheap_check_report rep;
        CHECK_EQ(pheap_check(h, &rep), 0);
        CHECK_EQ(rep.live_blocks, KEEP);
        for (unsigned i = 0; i < KEEP; i++)
            CHECK(pheap_usable_size(h, keep[i]) >= 20000 + 4096 * i);
        pheap_sim_crash(h, NULL, 0, 0.0);
    }
    CHECK(shown > 0); /* some images show the commit */
}

/* A heap of format 1.1 -- no high-water marks, zeros in its extent-log
 * header past xlast_epoch -- opens and keeps its log whole: replay and
 * appends over the whole half, compactions rewriting every slot, the marks
 * never written (a 1.1 build must be able to open it again). */
TEST(format_1_1_heap_keeps_its_whole_log)
{
    const char *path = ph_test_path("extlog-1.1.heap");
    pheap_close(ph_test_create(path, 4u << 20));
    int fd = open(path, O_RDWR);
    REQUIRE(fd >= 0);
    size_t len = (size_t)lseek(fd, 0, SEEK_END);
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    REQUIRE(m != MAP_FAILED);
    ph_header *hdr = (ph_header *)m;
    ph_extlog_header *xh = (ph_extlog_header *)(m + ph_header_region(hdr, PH_REGION_EXTLOG)->offset);
    ph_test_drop_procs(hdr);
    hdr->minor = 1;
    hdr->feat_incompat = PH_FEAT_INCOMPAT_TAGGED_LOGS;
    hdr->checksum = ph_crc32c(0, hdr, offsetof(ph_header, checksum));
    xh->xhigh[0] = xh->xhigh[1] = 0;
    munmap(m, len);

    pheap *h;
    REQUIRE_OK(pheap_open(path, NULL, &h));
    ph_extents *x = h->engine->ext;
    CHECK_EQ(x->bounded, 0);
    CHECK_EQ(x->high, x->half_entries);
    pheap_off keep = pheap_alloc(h, 50000);
    REQUIRE(keep);
    uint64_t epoch = x->epoch;
    while (x->epoch < epoch + 2) { /* two compactions */
        pheap_off a = pheap_alloc(h, 20000);
        REQUIRE(a);
        REQUIRE_OK(pheap_free(h, a));
        CHECK_EQ(x->high, x->half_entries);
    }
    CHECK_EQ(stale_slots(x), 0);
    CHECK_EQ(x->hdr->xhigh[0], 0);
    CHECK_EQ(x->hdr->xhigh[1], 0);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(pheap_open(path, NULL, &h));
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.format_minor, 1);
    CHECK(pheap_usable_size(h, keep) >= 50000);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

/* A mark past the half is refused at open: the log is corrupt. */
TEST(mark_past_the_half_is_refused)
{
    const char *path = ph_test_path("extlog-badmark.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    uint64_t half = h->engine->ext->half_entries;
    pheap_close(h);
    int fd = open(path, O_RDWR);
    REQUIRE(fd >= 0);
    size_t len = (size_t)lseek(fd, 0, SEEK_END);
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    REQUIRE(m != MAP_FAILED);
    ph_header *hdr = (ph_header *)m;
    ph_extlog_header *xh = (ph_extlog_header *)(m + ph_header_region(hdr, PH_REGION_EXTLOG)->offset);
    uint64_t was = xh->xhigh[0];
    xh->xhigh[0] = half + 1;
    CHECK_EQ(pheap_open(path, NULL, &h), PHEAP_ECORRUPT);
    CHECK(strstr(pheap_errmsg(), "high-water mark") != NULL);
    pheap_options ro = {.flags = PHEAP_RDONLY};
    CHECK_EQ(pheap_open(path, &ro, &h), PHEAP_ECORRUPT);
    CHECK_EQ(xh->xhigh[0], half + 1); /* nothing changed */
    xh->xhigh[0] = was;
    munmap(m, len);
    REQUIRE_OK(pheap_open(path, NULL, &h));
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

/* A chunk made a slab again keeps the bitmap of its past life in its
 * descriptor (E bits, and bits past the new class's last block, which open
 * refuses).  Formatting zeroes those lines durably: at a crash just after
 * the format's fence, only zeros are on media. */
TEST(reformatted_slab_bitmap_is_zero_on_media)
{
    const char *path = ph_test_path("reformat.heap");
    pheap_close(ph_test_create(path, 4u << 20));
    pheap_options o = {.flags = PHEAP_SIMULATE};
    pheap *h;
    REQUIRE_OK(pheap_open(path, &o, &h));
    pheap_off b = pheap_alloc(h, 16000);
    REQUIRE(b);
    uint64_t ch = (b - h->sp.data_off) / PH_CHUNK_SIZE;
    ph_slab *s = h->engine->chunks[ch];
    REQUIRE(s);
    unsigned cls = (unsigned)s->desc->cls;
    for (unsigned w = 0; w < PH_SLAB_WORDS; w++) /* a past life, durable */
        s->desc->xbits[w] = 0xaaaaaaaaaaaaaaaaull;
    pheap_persist(h, s->desc->xbits, sizeof(s->desc->xbits));
    s->bits_known = 0; /* as for a chunk last a slab before this open */
    ph_slab_format(&h->sp, ph_heap_pctx(h), s, cls);
    pheap_drain(h);
    uint64_t desc_off = (uint64_t)((char *)s->desc - (char *)h->sp.base);
    const char *img = ph_test_path("reformat.image");
    REQUIRE_OK(pheap_sim_crash(h, img, 0, 0.0)); /* what is durable, nothing more */
    FILE *f = fopen(img, "rb");
    REQUIRE(f);
    ph_slab_desc d;
    REQUIRE(fseek(f, (long)desc_off, SEEK_SET) == 0 && fread(&d, sizeof(d), 1, f) == 1);
    fclose(f);
    unsigned stale = 0;
    for (unsigned w = 0; w < PH_SLAB_WORDS; w++)
        stale += d.xbits[w] != 0;
    CHECK_EQ(stale, 0);
    CHECK_EQ(d.cls, cls);
}
