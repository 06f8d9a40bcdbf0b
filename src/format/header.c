/*
 * header.c -- region planning and header validation.  Validation reads
 * only a private copy of the header page, never the mapping, so a bad file
 * is refused before anything is mapped or written.
 */
#include "format/header.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "os/os.h"
#include "pheap.h"
#include "util/crc32c.h"
#include "util/error.h"
#include "util/util.h"

/* Features of the heaps this build creates. */
#define NEW_FEATURES                                                                      \
    (PH_FEAT_INCOMPAT_TAGGED_LOGS | PH_FEAT_INCOMPAT_EXTLOG_HIGH | PH_FEAT_INCOMPAT_TX |     \
     PH_FEAT_INCOMPAT_NAMES | PH_FEAT_INCOMPAT_PROCS | PH_FEAT_INCOMPAT_MORPH)

/* The metadata regions in file order: the process table (1.6) came after
 * the data region's number but lies before it. */
static const uint32_t region_order[] = {PH_REGION_HEADER, PH_REGION_ROOTS,  PH_REGION_LANES,
                                        PH_REGION_SLABS,  PH_REGION_EXTLOG, PH_REGION_NAMES,
                                        PH_REGION_PROCS};
#define NMETA (sizeof(region_order) / sizeof(region_order[0]))

/* Size of each metadata region for a heap that may grow to max_size, with
 * incompat `features` (the lane region holds the transaction logs too when
 * PH_FEAT_INCOMPAT_TX is set). */
static uint64_t region_size(uint32_t kind, uint64_t max_size, uint32_t features)
{
    switch (kind) {
    case PH_REGION_HEADER: return PH_PAGE_SIZE;
    case PH_REGION_ROOTS: return PH_ALIGN_UP((uint64_t)PH_ROOTS_MAX * sizeof(ph_root_entry), PH_PAGE_SIZE);
    case PH_REGION_LANES:
        return (uint64_t)PH_LANES_MAX *
               (PH_LANE_SIZE + (features & PH_FEAT_INCOMPAT_TX ? PH_LINE_SIZE + PH_TXLOG_SIZE : 0));
    case PH_REGION_SLABS: return PH_ALIGN_UP(max_size / PH_CHUNK_SIZE * PH_SLAB_DESC_SIZE, PH_PAGE_SIZE);
    case PH_REGION_EXTLOG: {
        uint64_t entries = max_size / PH_EXTLOG_BYTES_PER_ENTRY_SPAN + 64;
        return PH_PAGE_SIZE + 2 * PH_ALIGN_UP(entries * sizeof(ph_extlog_entry), PH_PAGE_SIZE);
    }
    case PH_REGION_NAMES: return PH_NAMES_SIZE;
    case PH_REGION_PROCS: return features & PH_FEAT_INCOMPAT_PROCS ? PH_PROCS_SIZE(max_size) : 0;
    default: return 0;
    }
}

static uint64_t data_offset(uint64_t max_size, uint32_t features)
{
    uint64_t off = 0;
    for (size_t i = 0; i < NMETA; i++)
        off += region_size(region_order[i], max_size, features);
    return PH_ALIGN_UP(off, PH_CHUNK_SIZE);
}

uint64_t ph_header_min_size(uint64_t max_size)
{
    return data_offset(max_size, NEW_FEATURES) + PH_CHUNK_SIZE;
}

uint64_t ph_header_data_offset(uint64_t max_size)
{
    return data_offset(max_size, NEW_FEATURES);
}

/* The metadata grows with max_size (about 1.9%), so the smallest max_size
 * for `data` bytes of data is a fixed point: F = data + data_offset(F).
 * The sequence below only rises (data_offset never falls as F grows) and is
 * bounded, in chunk steps: it reaches it in a few rounds. */
uint64_t ph_header_max_for_data(uint64_t data)
{
    data = PH_ALIGN_UP(PH_MAX(data, (uint64_t)PH_CHUNK_SIZE), PH_CHUNK_SIZE);
    uint64_t f = data + data_offset(data, NEW_FEATURES);
    for (uint64_t next; (next = data + data_offset(f, NEW_FEATURES)) != f;)
        f = next;
    return f;
}

uint64_t ph_mode_word(unsigned mode)
{
    uint32_t low = (uint32_t)(mode & 0xffu) | PH_MODE_TAG << 8;
    uint8_t b[4] = {(uint8_t)low, (uint8_t)(low >> 8), (uint8_t)(low >> 16), (uint8_t)(low >> 24)};
    return (uint64_t)ph_crc32c(0, b, sizeof(b)) << 32 | low;
}

int ph_mode_decode(uint64_t w, unsigned *mode)
{
    unsigned m = (unsigned)(w & 0xffu);
    if (m > PH_MODE_READONLY || ph_mode_word(m) != w)
        return -1;
    *mode = m;
    return 0;
}

uint64_t ph_header_checksum(const ph_header *h)
{
    return ph_crc32c(0, h, offsetof(ph_header, checksum));
}

int ph_header_init(ph_header *h, uint64_t max_size, uint32_t consistency)
{
    if (max_size % PH_CHUNK_SIZE || max_size < ph_header_min_size(max_size))
        return ph_err(PHEAP_EINVAL, "heap size %llu is below the minimum of %llu bytes",
                      (unsigned long long)max_size, (unsigned long long)ph_header_min_size(max_size));
    memset(h, 0, sizeof(*h));
    memcpy(h->magic, PH_MAGIC_BYTES, PH_MAGIC_LEN);
    h->major = PH_FORMAT_MAJOR;
    h->minor = PH_FORMAT_MINOR;
    h->header_size = sizeof(ph_header);
    int rc = ph_os_random(h->uuid, sizeof(h->uuid));
    if (rc)
        return rc;
    h->uuid[6] = (uint8_t)((h->uuid[6] & 0x0f) | 0x40); /* version 4 */
    h->uuid[8] = (uint8_t)((h->uuid[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    h->create_time_ns = ph_os_time_ns();
    h->page_size = PH_PAGE_SIZE;
    h->line_size = PH_LINE_SIZE;
    h->chunk_size = PH_CHUNK_SIZE;
    h->consistency = consistency;
    h->max_size = max_size;
    /* GC heaps are never shared (their fast path writes nothing a survivor
     * could take over) */
    h->feat_incompat = NEW_FEATURES | (consistency == PH_CONSISTENCY_LOG ? PH_FEAT_INCOMPAT_SHARED : 0);
    h->feat_ro_compat = PH_FEAT_RO_COMPAT_OWNER;
    h->owner_uid = ph_os_euid();
    uint64_t off = 0;
    for (size_t i = 0; i < NMETA; i++) {
        uint64_t size = region_size(region_order[i], max_size, NEW_FEATURES);
        h->regions[h->nregions++] = (ph_region){region_order[i], 0, off, size};
        off += size;
    }
    off = data_offset(max_size, NEW_FEATURES);
    h->regions[h->nregions++] = (ph_region){PH_REGION_DATA, 0, off, max_size - off};
    h->checksum = ph_header_checksum(h);
    return 0;
}

const ph_region *ph_header_region(const ph_header *h, uint32_t kind)
{
    for (uint32_t i = 0; i < h->nregions && i < PH_REGIONS_MAX; i++)
        if (h->regions[i].kind == kind)
            return &h->regions[i];
    return NULL;
}

static int bad_layout(const char *path, const char *what, unsigned long long v)
{
    return ph_err(PHEAP_ELAYOUT, "%s: inconsistent header: %s (%llu)", path, what, v);
}

/* The region table: sorted, aligned, non-overlapping, every kind once and
 * big enough, header first, data last and reaching max_size; the process
 * table exactly when its feature is set. */
static int validate_regions(const ph_header *h, const char *path)
{
    uint32_t nmeta = h->feat_incompat & PH_FEAT_INCOMPAT_PROCS ? NMETA : NMETA - 1;
    if (h->nregions != nmeta + 1)
        return bad_layout(path, "number of regions", h->nregions);
    uint64_t end = 0;
    for (uint32_t i = 0; i < h->nregions; i++) {
        const ph_region *r = &h->regions[i];
        if (r->kind != (i < nmeta ? region_order[i] : PH_REGION_DATA))
            return bad_layout(path, "region out of order or of unknown kind", r->kind);
        if (r->flags)
            return bad_layout(path, "region flags", r->flags);
        if (r->offset % PH_PAGE_SIZE || r->size % PH_PAGE_SIZE)
            return bad_layout(path, "region not page-aligned", r->offset);
        if (r->offset < end)
            return bad_layout(path, "regions overlap at offset", r->offset);
        if (r->size > h->max_size || r->offset > h->max_size - r->size)
            return bad_layout(path, "region past the maximum size", r->offset + r->size);
        if (r->kind != PH_REGION_DATA &&
            r->size < region_size(r->kind, h->max_size, h->feat_incompat))
            return bad_layout(path, "metadata region too small", r->size);
        end = r->offset + r->size;
    }
    const ph_region *hdr = &h->regions[0], *data = &h->regions[h->nregions - 1];
    if (hdr->offset != 0 || hdr->size != PH_PAGE_SIZE)
        return bad_layout(path, "header region", hdr->offset);
    if (data->offset % PH_CHUNK_SIZE || data->size < PH_CHUNK_SIZE ||
        data->offset + data->size != h->max_size)
        return bad_layout(path, "data region", data->offset);
    return 0;
}

static int validate_state(const ph_header *h, const ph_state *s, uint64_t file_size,
                          const char *path)
{
    uint64_t data_off = h->regions[h->nregions - 1].offset;
    unsigned mode;
    if (s->xclean != PH_STATE_CLEAN && s->xclean != PH_STATE_OPEN)
        return bad_layout(path, "state line word 0 (shutdown state)", s->xclean);
    if (s->xsize % PH_CHUNK_SIZE || s->xsize < data_off + PH_CHUNK_SIZE || s->xsize > h->max_size)
        return bad_layout(path, "state line word 1 (current size)", s->xsize);
    if ((h->feat_ro_compat & PH_FEAT_RO_COMPAT_OWNER) && ph_mode_decode(s->xmode, &mode))
        return ph_err(PHEAP_ECHECKSUM, "%s: state line word 5 (access mode, %#llx at byte %u): "
                      "check bits mismatch", path, (unsigned long long)s->xmode,
                      (unsigned)(PH_STATE_OFFSET + offsetof(ph_state, xmode)));
    if (file_size < s->xsize)
        return ph_err(PHEAP_ETRUNCATED, "%s: truncated: the file has %llu bytes, the heap %llu",
                      path, (unsigned long long)file_size, (unsigned long long)s->xsize);
    return 0;
}

int ph_header_validate(const void *page, uint64_t len, uint64_t file_size, int readonly,
                       const char *path, ph_header *hdr, ph_state *state)
{
    if (file_size == 0)
        return ph_err(PHEAP_EEMPTY, "%s: empty file (not a heap; open with PHEAP_CREATE to make one)",
                      path);
    if (memcmp(page, PH_MAGIC_BYTES, PH_MIN(len, (uint64_t)PH_MAGIC_LEN)) != 0)
        return ph_err(PHEAP_ENOTHEAP, "%s: not a pheap heap file (bad magic in the header)", path);
    if (len < PH_PAGE_SIZE || file_size < PH_PAGE_SIZE)
        return ph_err(PHEAP_ETRUNCATED, "%s: truncated: %llu bytes, shorter than the header page",
                      path, (unsigned long long)file_size);
    memcpy(hdr, page, sizeof(*hdr));
    memcpy(state, (const char *)page + PH_STATE_OFFSET, sizeof(*state));
    if (hdr->major != PH_FORMAT_MAJOR)
        return ph_err(PHEAP_EVERSION, "%s: format %u.%u %s; this build reads format %u.x", path,
                      hdr->major, hdr->minor,
                      hdr->major > PH_FORMAT_MAJOR ? "is newer than this build" : "is not supported",
                      PH_FORMAT_MAJOR);
    if (hdr->checksum != ph_header_checksum(hdr))
        return ph_err(PHEAP_ECHECKSUM, "%s: header (bytes 0..1023, region table included): "
                      "checksum mismatch (stored %08llx, computed %08llx)",
                      path, (unsigned long long)hdr->checksum,
                      (unsigned long long)ph_header_checksum(hdr));
    if (hdr->feat_incompat & ~PH_FEAT_INCOMPAT_KNOWN)
        return ph_err(PHEAP_EVERSION, "%s: needs format features %#x that this build lacks", path,
                      hdr->feat_incompat & ~PH_FEAT_INCOMPAT_KNOWN);
    if (!readonly && (hdr->feat_ro_compat & ~PH_FEAT_RO_COMPAT_KNOWN))
        return ph_err(PHEAP_EVERSION, "%s: has format features %#x that this build can only read; "
                      "open it with PHEAP_RDONLY", path, hdr->feat_ro_compat & ~PH_FEAT_RO_COMPAT_KNOWN);
    if (hdr->header_size != sizeof(ph_header))
        return bad_layout(path, "header size", hdr->header_size);
    if (hdr->page_size != PH_PAGE_SIZE || hdr->line_size != PH_LINE_SIZE ||
        hdr->chunk_size != PH_CHUNK_SIZE)
        return bad_layout(path, "page, line or chunk size", hdr->page_size);
    if (hdr->consistency != PH_CONSISTENCY_LOG && hdr->consistency != PH_CONSISTENCY_GC)
        return bad_layout(path, "consistency mode", hdr->consistency);
    if (hdr->max_size % PH_CHUNK_SIZE ||
        hdr->max_size < data_offset(hdr->max_size, hdr->feat_incompat) + PH_CHUNK_SIZE)
        return bad_layout(path, "maximum size", hdr->max_size);
    int rc = validate_regions(hdr, path);
    return rc ? rc : validate_state(hdr, state, file_size, path);
}
