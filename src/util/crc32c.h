/*
 * crc32c.h -- CRC-32C (Castagnoli): the checksum of the heap header, of
 * lane entries, and of the contents of initialised blocks.
 */
#ifndef PH_CRC32C_H
#define PH_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32C of [buf, buf+len), continuing from `crc` (start with 0). */
uint32_t ph_crc32c(uint32_t crc, const void *buf, size_t len);

#endif
