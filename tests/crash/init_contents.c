/*
 * init_contents.c -- recovery of a pheap_alloc_to_init whose lane entry
 * reached media before the block's contents did (an eviction before the
 * entry's fence): written into the file by hand, as a crash can leave it.
 * With the contents whole, the allocation is redone; with one word of them
 * missing, it is not -- the block stays free and the destination keeps
 * its value, so no state between "not allocated" and "allocated and
 * filled" is ever reachable.
 */
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "format/header.h"
#include "harness.h"
#include "util/crc32c.h"

static char *map_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDWR);
    *len = (size_t)lseek(fd, 0, SEEK_END);
    char *m = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return m == MAP_FAILED ? NULL : m;
}

/* A heap with a slot word and a free 64-byte block b; then, in the file, b
 * holds the initialiser's pattern (one word lost when `torn`) and lane 7
 * holds the committed entry of alloc_to_init(64, &slot) with the CRC of
 * the whole pattern. */
static void crashed_alloc_to_init(int torn)
{
    const char *path = ph_test_path(torn ? "torn-init.heap" : "whole-init.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    pheap_off slot_off = pheap_alloc_init(h, sizeof(pheap_off), PHEAP_ALLOC_ZERO, NULL, NULL);
    pheap_off b = pheap_alloc(h, 64);
    REQUIRE(slot_off && b);
    REQUIRE_OK(pheap_free(h, b));
    pheap_close(h);
    size_t len;
    char *m = map_file(path, &len);
    REQUIRE(m);
    unsigned char pattern[64];
    ph_test_fill(pattern, sizeof(pattern), 77);
    memcpy(m + b, pattern, sizeof(pattern));
    if (torn)
        memset(m + b + 40, 0xab, 8); /* that word's line never reached media */
    const ph_header *hdr = (const ph_header *)m;
    ph_lane_entry *e = (ph_lane_entry *)(m + ph_header_region(hdr, PH_REGION_LANES)->offset +
                                         7ull * PH_LANE_SIZE);
    uint64_t tag = (0x8000ull | 1 / PH_LANE_ENTRIES) << 48; /* sequence 1 */
    e->xstate = 1u << 8 | PH_LOG_ACTIVE;
    e->op = tag | PH_LOG_ALLOC_TO;
    e->block = tag | b;
    e->size = tag | 64;
    e->dest = tag | slot_off;
    e->old = tag;
    e->contents = tag | PH_LOG_CONTENTS | ph_crc32c(0, pattern, sizeof(pattern));
    e->checksum = tag | ph_crc32c(0, e, offsetof(ph_lane_entry, checksum));
    ((ph_state *)(m + PH_STATE_OFFSET))->xclean = PH_STATE_OPEN;
    munmap(m, len);

    REQUIRE_OK(pheap_open(path, NULL, &h)); /* recovery */
    pheap_off *slot = pheap_direct(h, slot_off);
    struct pheap_stats st;
    pheap_stats(h, &st);
    if (torn) {
        CHECK_EQ(*slot, 0);
        CHECK_EQ(pheap_usable_size(h, b), 0);
        CHECK_EQ(st.live_blocks, 1);
    } else {
        CHECK_EQ(*slot, b);
        CHECK_EQ(pheap_usable_size(h, b), 64);
        CHECK(ph_test_intact(pheap_direct(h, b), 64, 77));
        CHECK_EQ(st.live_blocks, 2);
    }
    REQUIRE_OK(pheap_check(h, NULL));
    /* The heap keeps working, in b's class, logged and plain. */
    REQUIRE_OK(pheap_free_from(h, slot));
    REQUIRE_OK(pheap_alloc_to_init(h, 64, slot, PHEAP_ALLOC_ZERO, NULL, NULL));
    pheap_off spare = pheap_alloc(h, 64);
    REQUIRE(spare);
    REQUIRE_OK(pheap_free(h, spare));
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(pheap_open(path, NULL, &h)); /* the entry was retired: nothing redone */
    pheap_stats(h, &st);
    CHECK_EQ(st.live_blocks, 2);
    CHECK(pheap_usable_size(h, *(pheap_off *)pheap_direct(h, slot_off)) >= 64);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

TEST(entry_durable_before_the_contents_is_not_redone)
{
    crashed_alloc_to_init(1);
}

TEST(entry_and_contents_durable_is_redone)
{
    crashed_alloc_to_init(0);
}
