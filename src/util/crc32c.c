/*
 * crc32c.c -- CRC-32C (reflected polynomial 0x82F63B78): the SSE4.2 crc32
 * instruction where the CPU has it (the contents check of initialised
 * blocks runs on the allocation path), one table otherwise.
 */
#include "util/crc32c.h"

#include <pthread.h>
#include <string.h>

static uint32_t crc_table[256];
static int crc_hw;
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
#if defined(__x86_64__)
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t crc, const uint8_t *p,
                                                             size_t len)
{
    uint64_t c = crc;
    for (; len && ((uintptr_t)p & 7); len--)
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    for (; len >= 8; len -= 8, p += 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
    }
    for (; len; len--)
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    return (uint32_t)c;
}
#endif

uint32_t ph_crc32c(uint32_t crc, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    pthread_once(&crc_once, crc_init);
    crc = ~crc;
#if defined(__x86_64__)
    if (crc_hw)
        return ~crc_sse42(crc, p, len);
#endif
    while (len--)
        crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}
