/*
 * sizeclass.h -- the size classes of small blocks.  The table is part of
 * the file format (slab descriptors name their class by index): a new build
 * may append classes, never change existing ones.
 *
 * Classes: 8, then multiples of 16 up to 128, then four classes per
 * doubling up to 16 KiB.  Internal fragmentation (unused bytes of the
 * block over its size) is below 20% for every request above 64 bytes;
 * below that the 16-byte alignment of blocks of 16 bytes or more sets the
 * bound, as in other allocators.
 */
#ifndef PH_ALLOC_SIZECLASS_H
#define PH_ALLOC_SIZECLASS_H

#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

#define PH_CLASSES 37u
#define PH_SMALL_MAX 16384u

extern const uint32_t ph_class_size[PH_CLASSES];
extern const uint8_t ph_class_of8[PH_SMALL_MAX / 8 + 1];

/* Size class of a request of 1..PH_SMALL_MAX bytes. */
static inline unsigned ph_sizeclass(size_t size)
{
    return ph_class_of8[(size + 7) >> 3];
}

/* Blocks of class `cls` in one slab (one 64 KiB chunk). */
static inline uint32_t ph_class_blocks(unsigned cls)
{
    uint32_t n = 65536u / ph_class_size[cls];
    return n > 4096u ? 4096u : n;
}

#endif
