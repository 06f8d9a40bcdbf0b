/*
 * lanes.c -- recovery from lane states that a kill -9 can leave and that
 * the fence enumeration of one thread does not reach: a torn entry (state
 * written, checksum not), and a stale FREE_FROM entry whose pages another
 * thread allocated again before the kill.  The entries are written into the
 * file by hand, as the kill would have left them.
 */
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "format/header.h"
#include "harness.h"
#include "util/crc32c.h"

/* Maps the heap file and returns the lane entry (lane, idx). */
static ph_lane_entry *lane_entry(char *map, unsigned lane, unsigned idx)
{
    const ph_header *h = (const ph_header *)map;
    return (ph_lane_entry *)(map + ph_header_region(h, PH_REGION_LANES)->offset +
                             (uint64_t)lane * PH_LANE_SIZE) + idx;
}

static char *map_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDWR);
    *len = (size_t)lseek(fd, 0, SEEK_END);
    char *m = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return m == MAP_FAILED ? NULL : m;
}

static void mark_crashed(char *map)
{
    ((ph_state *)(map + PH_STATE_OFFSET))->xclean = PH_STATE_OPEN;
}

TEST(torn_entry_is_ignored_and_retired)
{
    const char *path = ph_test_path("torn.heap");
    pheap_close(ph_test_create(path, 4u << 20));
    size_t len;
    char *m = map_file(path, &len);
    REQUIRE(m);
    ph_lane_entry *e = lane_entry(m, 5, 0);
    e->xstate = 7u << 8 | PH_LOG_ACTIVE; /* the first store landed, the rest did not */
    mark_crashed(m);
    munmap(m, len);
    pheap *h;
    REQUIRE_OK(pheap_open(path, NULL, &h));
    pheap_check_report r;
    CHECK_EQ(pheap_check(h, &r), 0);
    pheap_close(h);
    REQUIRE_OK(pheap_open(path, NULL, &h));
    CHECK_EQ(pheap_check(h, &r), 0);
    pheap_close(h);
}

/* A free_from(&slots[1]) killed right after its F1: committed, with the
 * block still allocated and the destination still holding it.  `legacy`:
 * a heap of format 1.0, whose entries carry no tags. */
static void committed_free_from(int legacy)
{
    const char *path = ph_test_path("stale.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    pheap_off slots_off = pheap_alloc(h, 2 * sizeof(pheap_off));
    pheap_off *slots = pheap_direct(h, slots_off);
    slots[0] = slots[1] = 0;
    pheap_persist(h, slots, 2 * sizeof(pheap_off));
    REQUIRE_OK(pheap_alloc_to(h, 100000, &slots[0]));
    pheap_off b = slots[0];
    REQUIRE_OK(pheap_free_from(h, &slots[0]));
    REQUIRE_OK(pheap_alloc_to(h, 100000, &slots[1]));
    CHECK_EQ(slots[1], b); /* best fit hands the same pages out again */
    pheap_close(h);
    size_t len;
    char *m = map_file(path, &len);
    REQUIRE(m);
    ph_lane_entry *e = lane_entry(m, 900, 2);
    uint64_t tag = legacy ? 0 : (0x8000ull | 3 / PH_LANE_ENTRIES) << 48; /* sequence 3 */
    e->xstate = 3u << 8 | PH_LOG_ACTIVE;
    e->op = tag | PH_LOG_FREE_FROM;
    e->block = tag | b;
    e->size = tag | 102400;
    e->dest = tag | (slots_off + 8); /* slot 1, which holds b */
    e->old = tag | b;
    e->contents = tag;
    e->checksum = tag | ph_crc32c(0, e, offsetof(ph_lane_entry, checksum));
    if (legacy) {
        ph_header *hdr = (ph_header *)m;
        ph_test_drop_procs(hdr);
        hdr->minor = 0;
        hdr->feat_incompat = 0;
        hdr->checksum = ph_crc32c(0, hdr, offsetof(ph_header, checksum));
    }
    mark_crashed(m);
    munmap(m, len);
    /* Recovery redoes the committed free of slot 1: b is freed and slot 1
     * cleared together -- never a freed b still named by a slot. */
    REQUIRE_OK(pheap_open(path, NULL, &h));
    slots = pheap_direct(h, slots_off);
    CHECK_EQ(slots[1], 0);
    CHECK_EQ(pheap_usable_size(h, b), 0);
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(st.live_blocks, 1);
    REQUIRE_OK(pheap_check(h, NULL));
    /* The heap keeps working: a logged operation on a lane of the old kind. */
    REQUIRE_OK(pheap_alloc_to(h, 64, &slots[0]));
    REQUIRE_OK(pheap_free_from(h, &slots[0]));
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

TEST(committed_free_from_is_redone_with_its_destination)
{
    committed_free_from(0);
}

TEST(untagged_entry_of_a_format_1_0_heap_is_redone)
{
    committed_free_from(1);
}

/* The same entry without its tags -- what a 1.0 build wrote -- is not an
 * entry in a heap of format 1.1: its words could be a mix. */
TEST(untagged_entry_refused_in_a_tagged_heap)
{
    const char *path = ph_test_path("untagged.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    pheap_off slot_off = pheap_alloc(h, 8);
    pheap_off b = pheap_alloc(h, 64);
    pheap_close(h);
    size_t len;
    char *m = map_file(path, &len);
    REQUIRE(m);
    ph_lane_entry *e = lane_entry(m, 3, 0);
    e->xstate = 1u << 8 | PH_LOG_ACTIVE;
    e->op = PH_LOG_FREE_FROM;
    e->block = b;
    e->size = 64;
    e->dest = slot_off;
    e->old = b;
    e->contents = 0;
    e->checksum = ph_crc32c(0, e, offsetof(ph_lane_entry, checksum));
    mark_crashed(m);
    munmap(m, len);
    REQUIRE_OK(pheap_open(path, NULL, &h));
    CHECK_EQ(pheap_usable_size(h, b), 64); /* not freed */
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

/* A new holder of a lane numbers its entries from 1 again, so its first
 * entry's state word equals that of the previous holder's first entry,
 * whose retired line still holds the old words and a checksum over that
 * state.  The new holder zeroes the lane durably before it writes: at a
 * crash inside its first logged call, with each word of the line old or
 * new on its own, the old entry must never come back to life.  (Drop the
 * zeros' durability and about one image in 128 redoes the old call.) */
TEST(new_holder_never_revives_the_old_holders_entry)
{
    const char *path = ph_test_path("holder.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    pheap_off slots = pheap_alloc_init(h, 4 * sizeof(pheap_off), PHEAP_ALLOC_ZERO, NULL, NULL);
    REQUIRE(slots);
    REQUIRE_OK(pheap_root_set(h, "slots", slots));
    pheap_off *w = pheap_direct(h, slots);
    REQUIRE_OK(pheap_alloc_to(h, 64, &w[0]));    /* entry 1 of this holder */
    pheap_off old = w[0];
    REQUIRE_OK(pheap_free_from(h, &w[0]));       /* entry 2: old is free again */
    REQUIRE_OK(pheap_close(h));
    const char *img = ph_test_path("holder.image");
    unsigned revived = 0, images = 0;
    for (uint64_t seed = 1; seed <= 512; seed++) {
        /* a new process: the first logged call of the lane's new holder,
         * crashed at the fence of its entry, each 8-byte word drawn */
        pheap_options o = {.flags = PHEAP_SIMULATE, .sim_crash_site = "ph_lane_begin",
                           .sim_crash_fence = 1, .sim_crash_image = img,
                           .sim_mode = PHEAP_SIM_WORDS, .sim_evict_probability = 0.5,
                           .sim_seed = seed};
        REQUIRE_OK(pheap_open(path, &o, &h));
        w = pheap_direct(h, pheap_root_get(h, "slots"));
        REQUIRE(w);
        REQUIRE_OK(pheap_alloc_to(h, 1000, &w[1]));
        pheap_sim_crash(h, NULL, 0, 0.0);
        pheap *r;
        REQUIRE_OK(pheap_open(img, NULL, &r));
        images++;
        pheap_off *rw = pheap_direct(r, pheap_root_get(r, "slots"));
        REQUIRE(rw);
        if (rw[0] != 0 || pheap_usable_size(r, old) != 0) {
            if (revived++ == 0)
                printf("  seed %llu: the old alloc_to came back (slot %llu, block %llu live)\n",
                       (unsigned long long)seed, (unsigned long long)rw[0],
                       (unsigned long long)old);
        }
        REQUIRE_OK(pheap_check(r, NULL));
        pheap_close(r);
    }
    printf("  %u images, %u with the old entry redone\n", images, revived);
    CHECK_EQ(revived, 0);
}
