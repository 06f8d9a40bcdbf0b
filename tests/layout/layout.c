/*
 * layout.c -- pins the file format: literal sizes and offsets of every
 * on-media structure and of the region plan.  A failure here means the
 * format changed: bump PH_FORMAT_MINOR or MAJOR and update this file.
 */
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "format/header.h"
#include "alloc/sizeclass.h"
#include "format/layout.h"
#include "heap/names.h"
#include "harness.h"

TEST(struct_sizes)
{
    CHECK_EQ(sizeof(ph_header), 1024);
    CHECK_EQ(sizeof(ph_state), 64);
    CHECK_EQ(sizeof(ph_region), 24);
    CHECK_EQ(sizeof(ph_root_entry), 128);
    CHECK_EQ(sizeof(ph_lane_entry), 64);
    CHECK_EQ(sizeof(ph_slab_desc), 1088);
    CHECK_EQ(sizeof(ph_extlog_header), 64);
    CHECK_EQ(sizeof(ph_extlog_entry), 16);
    CHECK_EQ(PH_LANE_SIZE, 1024);
    CHECK_EQ(PH_SLAB_MAX_BLOCKS, 4096);
    CHECK_EQ(PH_STATE_OFFSET, 2048);
    CHECK_EQ(PH_FORMAT_MAJOR, 1);
    CHECK_EQ(PH_FORMAT_MINOR, 8); /* 1.8: sharing between processes */
    CHECK_EQ(PH_MORPH_MAX_BLOCKS, 2048);
    CHECK_EQ(PH_MORPH_OLD_WORD, 6);
    CHECK_EQ(PH_MORPH_WORD(PH_MORPH_MORPHED, 7, 24, 16), 0x4d4f525010180703ull);
    CHECK_EQ(sizeof(ph_procs_header), 64);
    CHECK_EQ(offsetof(ph_procs_header, xext_lock), 24);
    CHECK_EQ(offsetof(ph_procs_header, xroot_lock), 32);
    CHECK_EQ(offsetof(ph_procs_header, xtakeovers), 40);
    CHECK_EQ(offsetof(ph_procs_header, xnames_lock), 48);
    CHECK_EQ(offsetof(ph_procs_header, xnames_seq), 56);
    CHECK_EQ(sizeof(ph_procs_hold), 16);
    CHECK_EQ(offsetof(ph_procs_hold, xhash), 8);
    CHECK_EQ(PH_PROCS_HOLDS_AT(0), 2048);
    CHECK_EQ(PH_PROCS_HOLDS, 128);
    CHECK_EQ(sizeof(ph_lease), 64);
    CHECK_EQ(PH_PROCS_SLOTS, 64);
    CHECK_EQ(PH_PROCS_CHUNK_BYTES, 16);
    CHECK_EQ(PH_PROCS_LOCK_BYTE(1 << 20, 3), (1 << 20) + 4096 + 3 * 64);
    CHECK_EQ(offsetof(ph_lease, xpid), 0);
    CHECK_EQ(offsetof(ph_lease, xstart), 8);
    CHECK_EQ(offsetof(ph_lease, xgen), 40);
    CHECK_EQ(offsetof(ph_lease, comm), 48);
    CHECK_EQ(sizeof(ph_txlog_anchor), 64);
    CHECK_EQ(sizeof(ph_txseg_header), 64);
    CHECK_EQ(sizeof(ph_txrec), 32);
    CHECK_EQ(PH_TXLOG_SIZE, 2048);
    CHECK_EQ(PH_TXLOG_ANCHORS, 1048576);
    CHECK_EQ(PH_TXLOG_RECORDS, 1048576 + 65536);
    CHECK_EQ(PH_TX_SEQ_BLOCK, 1u << 20);
    CHECK_EQ(sizeof(ph_names_header), 64);
    CHECK_EQ(sizeof(ph_names_seg), 64);
    CHECK_EQ(sizeof(ph_name_line), 64);
    CHECK_EQ(PH_NAMES_DIR0, 4096);
    CHECK_EQ(PH_NAMES_DIR1, 4096 + 65536);
    CHECK_EQ(PH_NAMES_DIR_MAX, 8192);
    CHECK_EQ(PH_NAME_MAX, 255);
    CHECK_EQ(PHEAP_NAME_MAX, PH_NAME_MAX);
    CHECK_EQ(PH_LOG_BIND, 3);
    CHECK_EQ(PH_LOG_UNBIND, 4);
    CHECK_EQ(PH_LOG_VERSIONED(PH_LOG_BIND, 0x0005000000000002ull, 0x0006000000000001ull),
             3 | 5ull << 8 | 6ull << 24 | 1ull << 40);
    CHECK_EQ(PHEAP_FORMAT_MAJOR, PH_FORMAT_MAJOR);
    CHECK_EQ(PHEAP_FORMAT_MINOR, PH_FORMAT_MINOR);
}

/* The name hash lays out the directory: a change is a format change. */
TEST(name_hash_is_stable)
{
    CHECK_EQ(ph_names_hash(0, "a", 1), 0xadb23828f5c455cfull);
    CHECK_EQ(ph_names_hash(0x123456789abcdefull, "object-12345", 12), 0x49cce27b96784fc6ull);
    CHECK(ph_names_hash(1, "a", 1) != ph_names_hash(2, "a", 1)); /* seeded */
    /* every tail length, whole words, bytes above 0x7f (the values of the
     * byte-at-a-time hash that made the first heaps with names) */
    static const char s[] = "pheap-name-hash-\xc3\xa9t\xc3\xa9-0123456789";
    static const uint64_t want[] = {
        0xe6ac310cbfc3303dull, 0x710093a916cd68a3ull, 0xd9a6b93475c6ec09ull, 0x68067cc0877f2df7ull,
        0x72f6defb9e41873bull, 0x12d55aac4ff7f5f1ull, 0x51b2b8f9c65872fcull, 0x6294d444fdde661cull,
        0x7c526052c0749978ull, 0x7a3b3be4414b4ed8ull, 0x8c1c6b941eafe3ebull, 0x789126f99a10e180ull,
        0x094c8db0024255d2ull, 0xe1433b5d6fc64b8eull, 0x5ef27f414ca80f71ull, 0x2265b0a177531530ull,
        0x8f0d401da449dedbull, 0x9ecfdca267637011ull, 0xff3482ac34c8dbadull, 0x70760090d828a293ull,
        0x7e564b4aa01ce9abull, 0xc1cdb1411c197e5aull, 0x03234fcd37e58f2dull};
    for (size_t n = 1; n <= PH_ARRAY_N(want); n++)
        CHECK_EQ(ph_names_hash(7, s, n), want[n - 1]);
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
    CHECK_EQ(offsetof(ph_state, xopen_count), 16);
    CHECK_EQ(offsetof(ph_state, xunclean_count), 24);
    CHECK_EQ(offsetof(ph_state, xlast_open), 32); /* was reserved[0]: compatible, 0 = unknown */
    CHECK_EQ(offsetof(ph_state, xmode), 40); /* was reserved[0]: 1.5 */
    CHECK_EQ(offsetof(ph_state, reserved), 48);
    CHECK_EQ(offsetof(ph_header, owner_uid), 464); /* was reserved[0..3]: 1.5 */
    CHECK_EQ(offsetof(ph_header, reserved0), 468);
    CHECK_EQ(offsetof(ph_header, reserved), 472);
    CHECK_EQ(offsetof(ph_root_entry, name_crc), 16); /* was reserved[0]: 1.5 */
    CHECK_EQ(offsetof(ph_root_entry, xused), 0);
    CHECK_EQ(offsetof(ph_root_entry, xoff), 8);
    CHECK_EQ(offsetof(ph_root_entry, name), 64);
    CHECK(memcmp(PH_MAGIC_BYTES, "\x89PHEAP\r\n", 8) == 0);
    CHECK_EQ(offsetof(ph_lane_entry, xstate), 0);
    CHECK_EQ(offsetof(ph_lane_entry, contents), 48);
    CHECK_EQ(offsetof(ph_lane_entry, checksum), 56);
    CHECK_EQ(PH_LOG_CONTENTS, 1ull << 32);
    CHECK_EQ(offsetof(ph_slab_desc, morph), 24); /* was reserved[0]: 1.7 */
    CHECK_EQ(offsetof(ph_slab_desc, xbits), 64);
    CHECK_EQ(offsetof(ph_extlog_header, xactive), 0);
    CHECK_EQ(offsetof(ph_extlog_header, xlast_epoch), 8);
    CHECK_EQ(offsetof(ph_extlog_header, xhigh), 16);
    CHECK_EQ(offsetof(ph_txlog_anchor, xstate), 0);
    CHECK_EQ(offsetof(ph_txlog_anchor, xceiling), 8);
    CHECK_EQ(offsetof(ph_txlog_anchor, xnext), 16);
    CHECK_EQ(offsetof(ph_txrec, head), 0);
    CHECK_EQ(offsetof(ph_txrec, seq), 8);
    CHECK_EQ(offsetof(ph_txrec, off), 16);
    CHECK_EQ(offsetof(ph_txrec, aux), 24);
    CHECK_EQ(PH_TXREC_UNDO, 1);
    CHECK_EQ(PH_TXREC_REDO, 2);
    CHECK_EQ(PH_TXREC_ALLOC, 3);
    CHECK_EQ(PH_TXREC_FREE, 4);
    CHECK_EQ(PH_TXREC_COMMIT, 5);
    CHECK_EQ(PH_TXREC_NEXT, 6);
}

TEST(feature_bits)
{
    CHECK_EQ(PH_FEAT_INCOMPAT_TAGGED_LOGS, 0x1);    /* 1.1 */
    CHECK_EQ(PH_FEAT_INCOMPAT_EXTLOG_HIGH, 0x2);    /* 1.2 */
    CHECK_EQ(PH_FEAT_INCOMPAT_TX, 0x4);             /* 1.3 */
    CHECK_EQ(PH_FEAT_INCOMPAT_NAMES, 0x8);          /* 1.4 */
    CHECK_EQ(PH_FEAT_INCOMPAT_PROCS, 0x10);         /* 1.6 */
    CHECK_EQ(PH_FEAT_INCOMPAT_MORPH, 0x20);         /* 1.7 */
    CHECK_EQ(PH_FEAT_INCOMPAT_SHARED, 0x40);        /* 1.8 */
    CHECK_EQ(PH_FEAT_INCOMPAT_KNOWN, 0x7f);
    CHECK_EQ(PH_FEAT_RO_COMPAT_OWNER, 0x1);         /* 1.5 */
    CHECK_EQ(PH_FEAT_RO_COMPAT_KNOWN, 0x1);
    ph_header h;
    REQUIRE_OK(ph_header_init(&h, 16u << 20, PH_CONSISTENCY_LOG));
    CHECK_EQ(h.feat_incompat, 0x7f);
    CHECK_EQ(h.minor, 8);
    REQUIRE_OK(ph_header_init(&h, 16u << 20, PH_CONSISTENCY_GC));
    CHECK_EQ(h.feat_incompat, 0x3f); /* never shared */
    CHECK_EQ(h.feat_ro_compat, 0x1);
    CHECK_EQ(h.owner_uid, geteuid());
}

TEST(region_plan_16m)
{
    ph_header h;
    REQUIRE_OK(ph_header_init(&h, 16u << 20, PH_CONSISTENCY_LOG));
    REQUIRE_EQ(h.nregions, 8);
    static const uint64_t want[8][3] = {
        {PH_REGION_HEADER, 0, 4096},
        {PH_REGION_ROOTS, 4096, 32768},
        {PH_REGION_LANES, 36864, 3211264},       /* lanes, then transaction logs */
        {PH_REGION_SLABS, 3248128, 278528},
        {PH_REGION_EXTLOG, 3526656, 45056},
        {PH_REGION_NAMES, 3571712, 262144},
        {PH_REGION_PROCS, 3833856, 12288},       /* header, leases, 16 B per chunk */
        {PH_REGION_DATA, 3866624, 12910592},
    };
    for (int i = 0; i < 8; i++) {
        CHECK_EQ(h.regions[i].kind, want[i][0]);
        CHECK_EQ(h.regions[i].offset, want[i][1]);
        CHECK_EQ(h.regions[i].size, want[i][2]);
    }
    CHECK_EQ(h.checksum, ph_header_checksum(&h));
    CHECK_EQ(ph_header_min_size(16u << 20), 3866624 + 65536);
    /* The least max_size for 16 MiB of data: the data region of that plan
     * is exactly 16 MiB. */
    uint64_t max = ph_header_max_for_data(16u << 20);
    CHECK_EQ(max, (16u << 20) + 3932160); /* this plan's slab region crosses one more chunk */
    CHECK_EQ(max - ph_header_data_offset(max), 16u << 20);
    CHECK_EQ(ph_header_data_offset(max - 65536) + (16u << 20) > max - 65536, 1);
}

TEST(size_classes)
{
    /* The class table is part of the format: pinned here. */
    static const uint32_t want[] = {8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256,
                                    320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 1792,
                                    2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 10240,
                                    12288, 14336, 16384};
    REQUIRE_EQ(PH_CLASSES, sizeof(want) / sizeof(want[0]));
    for (unsigned i = 0; i < PH_CLASSES; i++)
        CHECK_EQ(ph_class_size[i], want[i]);
    for (size_t size = 1; size <= PH_SMALL_MAX; size++) {
        unsigned c = ph_sizeclass(size);
        REQUIRE(ph_class_size[c] >= size);
        REQUIRE(c == 0 || ph_class_size[c - 1] < size);
        if (size > 64)
            REQUIRE((ph_class_size[c] - size) * 5 < ph_class_size[c]); /* < 20% */
        if (size >= 16)
            REQUIRE(ph_class_size[c] % 16 == 0);
    }
    CHECK_EQ(ph_class_blocks(0), 4096);
    CHECK_EQ(ph_class_blocks(PH_CLASSES - 1), 4);
}

TEST(mode_word)
{
    /* The encoding is the format: literal values pinned. */
    CHECK_EQ(PH_MODE_WRITABLE, 0);
    CHECK_EQ(PH_MODE_READONLY, 1);
    CHECK_EQ(PH_MODE_TAG, 0x444f4d);
    CHECK_EQ(ph_mode_word(PH_MODE_WRITABLE) & 0xffffffffu, 0x444f4d00);
    CHECK_EQ(ph_mode_word(PH_MODE_READONLY) & 0xffffffffu, 0x444f4d01);
    unsigned m = 9;
    CHECK_EQ(ph_mode_decode(ph_mode_word(PH_MODE_READONLY), &m), 0);
    CHECK_EQ(m, PH_MODE_READONLY);
    CHECK_EQ(ph_mode_decode(ph_mode_word(PH_MODE_WRITABLE), &m), 0);
    CHECK_EQ(m, PH_MODE_WRITABLE);
    CHECK(ph_mode_decode(0, &m) != 0);
    CHECK(ph_mode_decode(ph_mode_word(2), &m) != 0); /* a well-formed word of no mode */
    for (unsigned b = 0; b < 64; b++) /* every single flip of either word is refused */
        for (unsigned k = 0; k < 2; k++)
            CHECK(ph_mode_decode(ph_mode_word(k) ^ 1ull << b, &m) != 0);
}
