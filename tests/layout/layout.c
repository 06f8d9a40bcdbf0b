/*
 * layout.c -- pins the file format: literal sizes and offsets of every
 * on-media structure and of the region plan.  A failure here means the
 * format changed: bump PH_FORMAT_MINOR or MAJOR and update this file.
 */
#include <stddef.h>
#include <string.h>

#include "format/header.h"
#include "format/layout.h"
#include "harness.h"

TEST(struct_sizes)
{
    CHECK_EQ(sizeof(ph_header), 1024);
    CHECK_EQ(sizeof(ph_state), 64);
    CHECK_EQ(sizeof(ph_region), 24);
    CHECK_EQ(sizeof(ph_root_entry), 128);
    CHECK_EQ(PH_STATE_OFFSET, 2048);
    CHECK_EQ(PH_FORMAT_MAJOR, 1);
    CHECK_EQ(PH_FORMAT_MINOR, 0);
    CHECK_EQ(PHEAP_FORMAT_MAJOR, PH_FORMAT_MAJOR);
    CHECK_EQ(PHEAP_FORMAT_MINOR, PH_FORMAT_MINOR);
}

TEST(header_offsets)
{
    CHECK_EQ(offsetof(ph_header, magic), 0);
    CHECK_EQ(offsetof(ph_header, major), 8);
    CHECK_EQ(offsetof(ph_header, minor), 10);
    CHECK_EQ(offsetof(ph_header, header_size), 12);
    CHECK_EQ(offsetof(ph_header, uuid), 16);
    CHECK_EQ(offsetof(ph_header, create_time_ns), 32);
    CHECK_EQ(offsetof(ph_header, page_size), 40);
    CHECK_EQ(offsetof(ph_header, chunk_size), 48);
    CHECK_EQ(offsetof(ph_header, consistency), 52);
    CHECK_EQ(offsetof(ph_header, max_size), 56);
    CHECK_EQ(offsetof(ph_header, feat_compat), 64);
    CHECK_EQ(offsetof(ph_header, nregions), 76);
    CHECK_EQ(offsetof(ph_header, regions), 80);
    CHECK_EQ(offsetof(ph_header, checksum), 1016);
    CHECK_EQ(offsetof(ph_state, xclean), 0);
    CHECK_EQ(offsetof(ph_state, xsize), 8);
    CHECK_EQ(offsetof(ph_root_entry, xused), 0);
    CHECK_EQ(offsetof(ph_root_entry, xoff), 8);
    CHECK_EQ(offsetof(ph_root_entry, name), 64);
    CHECK(memcmp(PH_MAGIC_BYTES, "\x89PHEAP\r\n", 8) == 0);
}

TEST(region_plan_16m)
{
    ph_header h;
    REQUIRE_OK(ph_header_init(&h, 16u << 20, PH_CONSISTENCY_LOG));
    REQUIRE_EQ(h.nregions, 7);
    static const uint64_t want[7][3] = {
        {PH_REGION_HEADER, 0, 4096},
        {PH_REGION_ROOTS, 4096, 32768},
        {PH_REGION_LANES, 36864, 1048576},
        {PH_REGION_SLABS, 1085440, 327680},
        {PH_REGION_EXTLOG, 1413120, 1048576},
        {PH_REGION_NAMES, 2461696, 262144},
        {PH_REGION_DATA, 2752512, 14024704},
    };
    for (int i = 0; i < 7; i++) {
        CHECK_EQ(h.regions[i].kind, want[i][0]);
        CHECK_EQ(h.regions[i].offset, want[i][1]);
        CHECK_EQ(h.regions[i].size, want[i][2]);
    }
    CHECK_EQ(h.checksum, ph_header_checksum(&h));
    CHECK_EQ(ph_header_min_size(16u << 20), 2752512 + 65536);
}
