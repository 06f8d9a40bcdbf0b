/*
 * names_owned.c -- the name directory's segments are blocks of the data
 * region that pheap owns: a free of the program that names one (a stale
 * offset of a block freed before, whose space a segment took since: what
 * the fuzz target found) is refused with PHEAP_EINVAL and changes nothing,
 * by pheap_free, pheap_free_from and pheap_tx_free alike.
 */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "format/layout.h"
#include "harness.h"

TEST(segment_is_not_the_programs)
{
    char path[512];
    snprintf(path, sizeof(path), "%s", ph_test_path("names-owned.heap"));
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    pheap_off stale = pheap_alloc(h, 40000);
    REQUIRE(stale);
    REQUIRE_OK(pheap_free(h, stale)); /* the program keeps the offset */
    REQUIRE(pheap_alloc_named(h, "first", 64));
    pheap_off holder = pheap_alloc(h, 64);
    REQUIRE(holder);
    REQUIRE_OK(pheap_close(h));
    /* the segment the directory's first entry names */
    uint64_t dir = ph_test_region_offset(path, PH_REGION_NAMES) + PH_NAMES_DIR0, e = 0;
    int fd = open(path, O_RDONLY);
    REQUIRE(fd >= 0 && pread(fd, &e, 8, (off_t)dir) == 8);
    close(fd);
    pheap_off seg = PH_NAMES_ENTRY_OFF(e);
    REQUIRE(seg);
    REQUIRE_OK(pheap_open(path, NULL, &h));
    struct pheap_stats before;
    REQUIRE_OK(pheap_stats(h, &before));
    CHECK_EQ(pheap_free(h, seg), PHEAP_EINVAL);
    CHECK(strstr(pheap_errmsg(), "name directory") != NULL);
    pheap_off *word = pheap_direct(h, holder);
    *word = seg;
    CHECK_EQ(pheap_free_from(h, word), PHEAP_EINVAL);
    CHECK_EQ(*word, seg);
    *word = 0;
    REQUIRE_OK(pheap_tx_begin(h));
    CHECK_EQ(pheap_tx_free(h, seg), PHEAP_EINVAL);
    REQUIRE_OK(pheap_tx_commit(h));
    ph_test_unchanged(h, &before, "after the refused frees", __FILE__, __LINE__);
    CHECK(pheap_lookup(h, "first") != 0);
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(pheap_open(path, NULL, &h));
    pheap_check_report r;
    CHECK_EQ(pheap_check(h, &r), 0);
    CHECK(pheap_lookup(h, "first") != 0);
    pheap_close(h);
}
