/*
 * header.h -- building and validating the header page: the region plan for
 * a new heap, the checksum, and the checks a file must pass before pheap
 * maps it.
 */
#ifndef PH_FORMAT_HEADER_H
#define PH_FORMAT_HEADER_H

#include <stdint.h>

#include "format/layout.h"

/* Smallest heap: every metadata region plus one data chunk. */
uint64_t ph_header_min_size(uint64_t max_size);

/* First byte of the data region of a heap of `max_size` bytes: the
 * metadata regions before it are sized for max_size. */
uint64_t ph_header_data_offset(uint64_t max_size);

/* Smallest max_size whose data region holds `data` bytes (raised to one
 * chunk, rounded up to chunks). */
uint64_t ph_header_max_for_data(uint64_t data);

/* Fills a new header (uuid, time, region table, checksum) for a heap of
 * `max_size` bytes, owned by the calling process's effective user.
 * PHEAP_EINVAL if max_size is too small. */
int ph_header_init(ph_header *h, uint64_t max_size, uint32_t consistency);

/* The access mode word (ph_state.xmode) of `mode` (PH_MODE_*). */
uint64_t ph_mode_word(unsigned mode);

/* 0 and the mode when `w` is a valid mode word; -1 when its check bits,
 * tag or mode are wrong. */
int ph_mode_decode(uint64_t w, unsigned *mode);

/* CRC-32C of the header, as stored in h->checksum. */
uint64_t ph_header_checksum(const ph_header *h);

/* Validates the first `len` bytes of a heap file (len = min(file size,
 * PH_PAGE_SIZE)) whose total size is `file_size`, for opening read-only or
 * read-write.  On success copies the header and state out.  Errors, in the
 * order they are checked: PHEAP_EEMPTY, PHEAP_ENOTHEAP, PHEAP_ETRUNCATED,
 * PHEAP_EVERSION, PHEAP_ECHECKSUM, PHEAP_ELAYOUT, PHEAP_ETRUNCATED. */
int ph_header_validate(const void *page, uint64_t len, uint64_t file_size, int readonly,
                       const char *path, ph_header *hdr, ph_state *state);

/* Finds region `kind`; NULL if absent. */
const ph_region *ph_header_region(const ph_header *h, uint32_t kind);

#endif
