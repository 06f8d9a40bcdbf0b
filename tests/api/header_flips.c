/*
 * header_flips.c -- every single-bit flip of the 1024-byte header (8192
 * flips, each opened read-write and read-only from a copy of a valid heap
 * restored after each open) is refused with a distinct error whose message
 * names the record: the magic (PHEAP_ENOTHEAP), the major version
 * (PHEAP_EVERSION), anything else (PHEAP_ECHECKSUM, "header").
 */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "format/layout.h"
#include "harness.h"

TEST(every_header_bit)
{
    const char *path = ph_test_path("flips.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    pheap_off b = pheap_alloc(h, 100);
    REQUIRE(b);
    REQUIRE_OK(pheap_root_set(h, "b", b));
    REQUIRE_OK(pheap_close(h));
    int fd = open(path, O_RDWR);
    REQUIRE(fd >= 0);
    uint8_t hdr[sizeof(ph_header)];
    REQUIRE(pread(fd, hdr, sizeof(hdr), 0) == sizeof(hdr));
    unsigned counts[3] = {0, 0, 0};
    for (unsigned bit = 0; bit < 8 * sizeof(hdr); bit++) {
        unsigned at = bit / 8;
        uint8_t v = (uint8_t)(hdr[at] ^ (1u << (bit % 8)));
        REQUIRE(pwrite(fd, &v, 1, at) == 1);
        int want = at < PH_MAGIC_LEN ? PHEAP_ENOTHEAP
                   : at < offsetof(ph_header, minor) ? PHEAP_EVERSION
                                                     : PHEAP_ECHECKSUM;
        const char *names = want == PHEAP_ENOTHEAP ? "bad magic in the header"
                            : want == PHEAP_EVERSION ? "format"
                                                     : "header (bytes 0..1023";
        for (unsigned ro = 0; ro < 2; ro++) {
            pheap_options o = {.flags = ro ? PHEAP_RDONLY : 0};
            int rc = pheap_open(path, &o, &h);
            if (rc != want || !strstr(pheap_errmsg(), names))
                ph_test_fail(__FILE__, __LINE__, "bit %u (byte %u)%s: open gave %d (%s), not %d", bit,
                             at, ro ? " read-only" : "", rc, pheap_errmsg(), want);
            if (rc == 0)
                pheap_close(h);
        }
        counts[want == PHEAP_ENOTHEAP ? 0 : want == PHEAP_EVERSION ? 1 : 2]++;
        REQUIRE(pwrite(fd, &hdr[at], 1, at) == 1);
    }
    close(fd);
    printf("header flips: %u bad magic, %u bad version, %u checksum mismatches\n", counts[0],
           counts[1], counts[2]);
    CHECK_EQ(counts[0] + counts[1] + counts[2], 8192);
    /* Restored: the heap opens and holds what it held. */
    REQUIRE_OK(pheap_open(path, NULL, &h));
    CHECK_EQ(pheap_root_get(h, "b"), b);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}
