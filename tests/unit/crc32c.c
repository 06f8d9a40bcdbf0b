/*
 * crc32c.c -- CRC-32C against published check values.
 */
#include <string.h>

#include "harness.h"
#include "util/crc32c.h"

TEST(check_values)
{
    CHECK_EQ(ph_crc32c(0, "123456789", 9), 0xE3069283u);
    CHECK_EQ(ph_crc32c(0, "", 0), 0);
    unsigned char zeros[32] = {0};
    CHECK_EQ(ph_crc32c(0, zeros, 32), 0x8A9136AAu);
}

TEST(incremental)
{
    const char *s = "persistent memory heap";
    size_t n = strlen(s);
    CHECK_EQ(ph_crc32c(ph_crc32c(0, s, 7), s + 7, n - 7), ph_crc32c(0, s, n));
}
