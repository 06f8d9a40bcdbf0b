/*
 * bad_files.c -- pheap_open refuses every bad heap file and bad option with
 * its own error code and a readable message, and leaves the file exactly as
 * it was: corrupted header fields (with and without a matching checksum),
 * bad state words, truncation at many lengths, files that are not heaps,
 * directories, missing files, permissions and invalid options.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "format/header.h"
#include "format/layout.h"
#include "harness.h"
#include "util/util.h"

#define FAIL(...) ph_test_fail(__FILE__, __LINE__, __VA_ARGS__)

#define HEAP_SIZE (4ull << 20)  /* file size of the template heap (metadata and data) */
#define HEAP_MAX (8ull << 20)   /* its max_size: room for "xsize past the file" */
#define CHUNK ((uint64_t)PH_CHUNK_SIZE)
#define SKIP 1                  /* table: variant does not apply */

/* ---- the template heap and file helpers ------------------------------- */

static uint8_t *tmpl;       /* bytes of a freshly created, closed heap */
static size_t tmpl_len;
static uint64_t tmpl_data_off;

/* Writes `len` bytes of `buf` to a fresh file at `path`, sparse: pages of
 * zeros are left as holes. */
static int write_image(const char *path, const uint8_t *buf, size_t len)
{
    static const uint8_t zero[PH_PAGE_SIZE];
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    int rc = 0;
    for (size_t off = 0; off < len && rc == 0; off += PH_PAGE_SIZE) {
        size_t n = len - off < PH_PAGE_SIZE ? len - off : PH_PAGE_SIZE;
        if (memcmp(buf + off, zero, n) != 0 && pwrite(fd, buf + off, n, (off_t)off) != (ssize_t)n)
            rc = -1;
    }
    close(fd);
    return rc;
}

/* 1 if the file at `path` holds exactly `len` bytes equal to `buf`. */
static int same_contents(const char *path, const uint8_t *buf, size_t len)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != len)
        return 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return 0;
    static uint8_t chunk[1 << 16];
    size_t off = 0;
    int same = 1;
    while (same && off < len) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n <= 0 || memcmp(chunk, buf + off, (size_t)n) != 0)
            same = 0;
        else
            off += (size_t)n;
    }
    close(fd);
    return same;
}

static uint8_t *read_whole(const char *path, size_t *len)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return NULL;
    uint8_t *buf = malloc((size_t)st.st_size + 1);
    int fd = open(path, O_RDONLY);
    size_t off = 0;
    while (buf && fd >= 0 && off < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + off, (size_t)st.st_size - off);
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    if (fd >= 0)
        close(fd);
    if (!buf || off != (size_t)st.st_size) {
        free(buf);
        return NULL;
    }
    *len = off;
    return buf;
}

/* Creates the template once: a HEAP_SIZE heap growable to HEAP_MAX with
 * two roots set, closed cleanly. */
static int load_template(void)
{
    if (tmpl)
        return 0;
    const char *path = ph_test_path("template.heap");
    unlink(path);
    /* options.size is the data region: what leaves a HEAP_SIZE file. */
    pheap_options o = {.size = HEAP_SIZE - ph_header_data_offset(HEAP_MAX), .max_size = HEAP_MAX,
                       .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h;
    if (pheap_open(path, &o, &h) != 0) {
        FAIL("create template: %s", pheap_errmsg());
        return -1;
    }
    struct pheap_stats st;
    pheap_stats(h, &st);
    tmpl_data_off = st.data_offset;
    pheap_off first = pheap_alloc(h, 64), second = pheap_alloc(h, 64); /* roots name blocks */
    if (!first || !second || pheap_root_set(h, "first", first) ||
        pheap_root_set(h, "second", second)) {
        FAIL("template roots: %s", pheap_errmsg());
        pheap_close(h);
        return -1;
    }
    if (pheap_close(h) != 0) {
        FAIL("close template: %s", pheap_errmsg());
        return -1;
    }
    tmpl = read_whole(path, &tmpl_len);
    if (!tmpl || tmpl_len != HEAP_SIZE) {
        FAIL("template: cannot read %s back", path);
        return -1;
    }
    return 0;
}

/* ---- the core check ---------------------------------------------------- */

/* Errors about a file, whose message must name the path. */
static int names_path(int err)
{
    return err != PHEAP_EINVAL && err != PHEAP_ENOMEM && err != PHEAP_EIO;
}

/*
 * Opens `path` with options `o` and expects `want`.  On failure also checks
 * that the handle is NULL, pheap_errno() agrees, the message is non-empty
 * and names the file, and (if `img` is given) that the file still holds
 * exactly img[0, len).  A read-only open that succeeds must not change the
 * file either; a read-write open that succeeds must leave the header alone.
 * Returns 1 if everything held.
 */
static int expect_open_opts(const char *what, const char *path, const pheap_options *o, int want,
                            const uint8_t *img, size_t len)
{
    int before = ph_test_failed;
    unsigned flags = o ? o->flags : 0;
    const char *mode = "read-write";
    if (flags & PHEAP_RDONLY)
        mode = "read-only";
    else if ((flags & PHEAP_CREATE) && (flags & PHEAP_EXCL))
        mode = "create, exclusive";
    else if (flags & PHEAP_CREATE)
        mode = "read-write, create";
    pheap *h = (pheap *)&h; /* must be overwritten */
    int rc = pheap_open(path, o, &h);
    if (rc != want)
        FAIL("%s, %s: pheap_open -> %d %s [%s], expected %d %s", what, mode, rc,
             pheap_strerror(rc), rc ? pheap_errmsg() : "", want, pheap_strerror(want));
    if (rc == 0) {
        if (!h)
            FAIL("%s, %s: success but no handle", what, mode);
        else if (pheap_close(h) != 0)
            FAIL("%s, %s: pheap_close: %s", what, mode, pheap_errmsg());
        if (img && (flags & PHEAP_RDONLY) && !same_contents(path, img, len))
            FAIL("%s, %s: a read-only open changed the file", what, mode);
        if (img && !(flags & PHEAP_RDONLY) && len >= sizeof(ph_header)) {
            uint8_t now[sizeof(ph_header)];
            int fd = open(path, O_RDONLY);
            if (fd < 0 || pread(fd, now, sizeof(now), 0) != (ssize_t)sizeof(now) ||
                memcmp(now, img, sizeof(now)) != 0)
                FAIL("%s, %s: opening rewrote the header", what, mode);
            if (fd >= 0)
                close(fd);
        }
        return ph_test_failed == before;
    }
    if (h != NULL)
        FAIL("%s, %s: failed open left *out = %p, expected NULL", what, mode, (void *)h);
    if (pheap_errno() != rc)
        FAIL("%s, %s: pheap_errno() = %d, returned %d", what, mode, pheap_errno(), rc);
    const char *msg = pheap_errmsg();
    if (!msg || !*msg || !strcmp(msg, "no error"))
        FAIL("%s, %s: empty error message", what, mode);
    else if (rc == want && names_path(rc) && !strstr(msg, path))
        FAIL("%s, %s: message '%s' does not name the file", what, mode, msg);
    if (img && !same_contents(path, img, len))
        FAIL("%s, %s: the failed open changed the file", what, mode);
    return ph_test_failed == before;
}

static int expect_open(const char *what, const char *path, unsigned flags, int want,
                       const uint8_t *img, size_t len)
{
    pheap_options o = {.flags = flags};
    return expect_open_opts(what, path, &o, want, img, len);
}

/* ---- one corrupted field at a time ------------------------------------- */

enum { OP_SET, OP_ADD, OP_XOR, OP_SET_DATA /* value = data offset + arg */ };

typedef struct field_case {
    const char *name;
    size_t off;      /* byte offset in the file */
    unsigned width;  /* 1, 2, 4 or 8 bytes, little-endian */
    int op;
    uint64_t arg;
    int stale;       /* expected with the checksum left stale (SKIP: n/a) */
    int rw;          /* expected read-write with the checksum recomputed */
    int ro;          /* expected read-only with the checksum recomputed */
} field_case;

#define HDR(f) offsetof(ph_header, f)
#define ROW(i, f) (offsetof(ph_header, regions) + (i) * sizeof(ph_region) + offsetof(ph_region, f))
#define RES(i) (offsetof(ph_header, reserved) + (i))
#define STATE(f) (PH_STATE_OFFSET + offsetof(ph_state, f))
#define NEG(x) ((uint64_t)0 - (uint64_t)(x))

#define CS PHEAP_ECHECKSUM
#define LAYOUT PHEAP_ELAYOUT
#define VERSION PHEAP_EVERSION
#define NOTHEAP PHEAP_ENOTHEAP
#define NOTSUP PHEAP_ENOTSUP
#define TRUNC PHEAP_ETRUNCATED

/* Data row is regions[6]; regions[3] (slabs) is a middle row. */
static const field_case header_cases[] = {
    /* name                     offset          w  op      arg                  stale rw  ro */
    {"magic[0]",                HDR(magic),     1, OP_XOR, 0x01,                 NOTHEAP, NOTHEAP, NOTHEAP},
    {"magic[7]",                HDR(magic) + 7, 1, OP_XOR, 0x20,                 NOTHEAP, NOTHEAP, NOTHEAP},
    {"major newer",             HDR(major),     2, OP_SET, PH_FORMAT_MAJOR + 1,  VERSION, VERSION, VERSION},
    {"major 0xffff",            HDR(major),     2, OP_SET, 0xffff,               VERSION, VERSION, VERSION},
    {"major 0",                 HDR(major),     2, OP_SET, 0,                    VERSION, VERSION, VERSION},
    {"minor newer",             HDR(minor),     2, OP_ADD, 1,                    CS, 0, 0},
    {"minor 0xffff",            HDR(minor),     2, OP_SET, 0xffff,               CS, 0, 0},
    {"header_size +8",          HDR(header_size), 4, OP_ADD, 8,                  CS, LAYOUT, LAYOUT},
    {"header_size 512",         HDR(header_size), 4, OP_SET, 512,                CS, LAYOUT, LAYOUT},
    {"header_size 0",           HDR(header_size), 4, OP_SET, 0,                  CS, LAYOUT, LAYOUT},
    {"uuid[0]",                 HDR(uuid),      1, OP_XOR, 0xff,                 CS, 0, 0},
    {"uuid[15]",                HDR(uuid) + 15, 1, OP_XOR, 0x01,                 CS, 0, 0},
    {"create_time_ns +1",       HDR(create_time_ns), 8, OP_ADD, 1,               CS, 0, 0},
    {"create_time_ns 0",        HDR(create_time_ns), 8, OP_SET, 0,               CS, 0, 0},
    {"page_size 8192",          HDR(page_size), 4, OP_SET, 8192,                 CS, LAYOUT, LAYOUT},
    {"page_size 0",             HDR(page_size), 4, OP_SET, 0,                    CS, LAYOUT, LAYOUT},
    {"line_size 128",           HDR(line_size), 4, OP_SET, 128,                  CS, LAYOUT, LAYOUT},
    {"line_size 0",             HDR(line_size), 4, OP_SET, 0,                    CS, LAYOUT, LAYOUT},
    {"chunk_size 32K",          HDR(chunk_size), 4, OP_SET, 32768,               CS, LAYOUT, LAYOUT},
    {"chunk_size 2M",           HDR(chunk_size), 4, OP_SET, 2u << 20,            CS, LAYOUT, LAYOUT},
    {"consistency 7",           HDR(consistency), 4, OP_SET, 7,                  CS, LAYOUT, LAYOUT},
    {"consistency 0xffffffff",  HDR(consistency), 4, OP_SET, 0xffffffffu,        CS, LAYOUT, LAYOUT},
    {"max_size +chunk",         HDR(max_size),  8, OP_ADD, CHUNK,                CS, LAYOUT, LAYOUT},
    {"max_size -chunk",         HDR(max_size),  8, OP_ADD, NEG(CHUNK),           CS, LAYOUT, LAYOUT},
    {"max_size +1",             HDR(max_size),  8, OP_ADD, 1,                    CS, LAYOUT, LAYOUT},
    {"max_size = file size",    HDR(max_size),  8, OP_SET, HEAP_SIZE,            CS, LAYOUT, LAYOUT},
    {"max_size 0",              HDR(max_size),  8, OP_SET, 0,                    CS, LAYOUT, LAYOUT},
    {"max_size huge",           HDR(max_size),  8, OP_SET, ~(CHUNK - 1),         CS, LAYOUT, LAYOUT},
    {"feat_compat bit 0",       HDR(feat_compat), 4, OP_SET, 1,                  CS, 0, 0},
    {"feat_compat bit 31",      HDR(feat_compat), 4, OP_SET, 0x80000000u,        CS, 0, 0},
    /* a process table the features do not announce: one region too many */
    {"feat_incompat 0 (1.0 bits)", HDR(feat_incompat), 4, OP_SET, 0,             CS, LAYOUT, LAYOUT},
    {"feat_incompat 1 (1.1 bits)", HDR(feat_incompat), 4, OP_SET, 1,             CS, LAYOUT, LAYOUT},
    {"feat_incompat 0xf (1.5 bits)", HDR(feat_incompat), 4, OP_SET, 0xf,         CS, LAYOUT, LAYOUT},
    {"feat_incompat bit 7",     HDR(feat_incompat), 4, OP_SET, 0xff,             CS, VERSION, VERSION},
    {"feat_incompat bit 31",    HDR(feat_incompat), 4, OP_SET, 0x80000000u,      CS, VERSION, VERSION},
    {"feat_ro_compat bit 1",    HDR(feat_ro_compat), 4, OP_XOR, 2,               CS, VERSION, 0},
    {"feat_ro_compat bit 31",   HDR(feat_ro_compat), 4, OP_XOR, 0x80000000u,     CS, VERSION, 0},
    {"owner_uid other user",    HDR(owner_uid), 4, OP_XOR, 0x10,                 CS, 0, 0},
    {"nregions 0",              HDR(nregions),  4, OP_SET, 0,                    CS, LAYOUT, LAYOUT},
    {"nregions -1",             HDR(nregions),  4, OP_ADD, NEG(1),               CS, LAYOUT, LAYOUT},
    {"nregions +1",             HDR(nregions),  4, OP_ADD, 1,                    CS, LAYOUT, LAYOUT},
    {"nregions max",            HDR(nregions),  4, OP_SET, PH_REGIONS_MAX,       CS, LAYOUT, LAYOUT},
    {"nregions max+1",          HDR(nregions),  4, OP_SET, PH_REGIONS_MAX + 1,   CS, LAYOUT, LAYOUT},
    {"nregions 0xffffffff",     HDR(nregions),  4, OP_SET, 0xffffffffu,          CS, LAYOUT, LAYOUT},
    /* row 0: the header region */
    {"row0.kind roots",         ROW(0, kind),   4, OP_SET, PH_REGION_ROOTS,      CS, LAYOUT, LAYOUT},
    {"row0.kind 0",             ROW(0, kind),   4, OP_SET, 0,                    CS, LAYOUT, LAYOUT},
    {"row0.flags",              ROW(0, flags),  4, OP_SET, 1,                    CS, LAYOUT, LAYOUT},
    {"row0.offset page",        ROW(0, offset), 8, OP_SET, PH_PAGE_SIZE,         CS, LAYOUT, LAYOUT},
    {"row0.size 2 pages",       ROW(0, size),   8, OP_SET, 2 * PH_PAGE_SIZE,     CS, LAYOUT, LAYOUT},
    {"row0.size 0",             ROW(0, size),   8, OP_SET, 0,                    CS, LAYOUT, LAYOUT},
    /* row 1: roots */
    {"row1.offset 0",           ROW(1, offset), 8, OP_SET, 0,                    CS, LAYOUT, LAYOUT},
    {"row1.size -page",         ROW(1, size),   8, OP_ADD, NEG(PH_PAGE_SIZE),    CS, LAYOUT, LAYOUT},
    /* row 3: slabs, a middle row */
    {"row3.kind extlog",        ROW(3, kind),   4, OP_SET, PH_REGION_EXTLOG,     CS, LAYOUT, LAYOUT},
    {"row3.kind 0x7fffffff",    ROW(3, kind),   4, OP_SET, 0x7fffffffu,          CS, LAYOUT, LAYOUT},
    {"row3.flags",              ROW(3, flags),  4, OP_SET, 0x80000000u,          CS, LAYOUT, LAYOUT},
    {"row3.offset +page",       ROW(3, offset), 8, OP_ADD, PH_PAGE_SIZE,         CS, LAYOUT, LAYOUT},
    {"row3.offset -page",       ROW(3, offset), 8, OP_ADD, NEG(PH_PAGE_SIZE),    CS, LAYOUT, LAYOUT},
    {"row3.offset +1",          ROW(3, offset), 8, OP_ADD, 1,                    CS, LAYOUT, LAYOUT},
    {"row3.offset huge",        ROW(3, offset), 8, OP_SET, 1ull << 63,           CS, LAYOUT, LAYOUT},
    {"row3.size -page",         ROW(3, size),   8, OP_ADD, NEG(PH_PAGE_SIZE),    CS, LAYOUT, LAYOUT},
    {"row3.size +page",         ROW(3, size),   8, OP_ADD, PH_PAGE_SIZE,         CS, LAYOUT, LAYOUT},
    {"row3.size 0",             ROW(3, size),   8, OP_SET, 0,                    CS, LAYOUT, LAYOUT},
    {"row3.size max",           ROW(3, size),   8, OP_SET, ~0ull,                CS, LAYOUT, LAYOUT},
    /* row 6: the process table (1.6), numbered after the data region */
    {"procs.kind data",         ROW(6, kind),   4, OP_SET, PH_REGION_DATA,       CS, LAYOUT, LAYOUT},
    {"procs.kind names",        ROW(6, kind),   4, OP_SET, PH_REGION_NAMES,      CS, LAYOUT, LAYOUT},
    {"procs.size -page",        ROW(6, size),   8, OP_ADD, NEG(PH_PAGE_SIZE),    CS, LAYOUT, LAYOUT},
    {"procs.offset -page",      ROW(6, offset), 8, OP_ADD, NEG(PH_PAGE_SIZE),    CS, LAYOUT, LAYOUT},
    /* row 7: the data region */
    {"data.kind names",         ROW(7, kind),   4, OP_SET, PH_REGION_NAMES,      CS, LAYOUT, LAYOUT},
    {"data.kind past the end",  ROW(7, kind),   4, OP_SET, PH_REGION_KIND_END,   CS, LAYOUT, LAYOUT},
    {"data.flags",              ROW(7, flags),  4, OP_SET, 0x100,                CS, LAYOUT, LAYOUT},
    {"data.offset +chunk",      ROW(7, offset), 8, OP_ADD, CHUNK,                CS, LAYOUT, LAYOUT},
    {"data.offset -chunk",      ROW(7, offset), 8, OP_ADD, NEG(CHUNK),           CS, LAYOUT, LAYOUT},
    {"data.offset +page",       ROW(7, offset), 8, OP_ADD, PH_PAGE_SIZE,         CS, LAYOUT, LAYOUT},
    {"data.offset huge",        ROW(7, offset), 8, OP_SET, 1ull << 63,           CS, LAYOUT, LAYOUT},
    {"data.size +chunk",        ROW(7, size),   8, OP_ADD, CHUNK,                CS, LAYOUT, LAYOUT},
    {"data.size -chunk",        ROW(7, size),   8, OP_ADD, NEG(CHUNK),           CS, LAYOUT, LAYOUT},
    {"data.size 0",             ROW(7, size),   8, OP_SET, 0,                    CS, LAYOUT, LAYOUT},
    {"data.size max",           ROW(7, size),   8, OP_SET, ~0ull,                CS, LAYOUT, LAYOUT},
    /* rows past nregions and the reserved bytes are room for later minor
     * versions: covered by the checksum, otherwise ignored */
    {"row8.kind (unused row)",  ROW(8, kind),   4, OP_SET, PH_REGION_DATA,       CS, 0, 0},
    {"row15.size (unused row)", ROW(15, size),  8, OP_SET, 1,                    CS, 0, 0},
    {"reserved[0]",             RES(0),         1, OP_SET, 1,                    CS, 0, 0},
    {"reserved[272..279]",      RES(272),       8, OP_SET, ~0ull,                CS, 0, 0},
    {"reserved[543]",           RES(543),       1, OP_XOR, 0xff,                 CS, 0, 0},
    {"checksum bit 0",          HDR(checksum),  8, OP_XOR, 1,                    CS, SKIP, SKIP},
    {"checksum bit 31",         HDR(checksum),  8, OP_XOR, 1u << 31,             CS, SKIP, SKIP},
    {"checksum high word",      HDR(checksum),  8, OP_XOR, 1ull << 40,           CS, SKIP, SKIP},
    {"checksum 0",              HDR(checksum),  8, OP_SET, 0,                    CS, SKIP, SKIP},
};

/* The state line is not checksummed: only rw/ro apply. */
static const field_case state_cases[] = {
    {"xclean 0",                STATE(xclean),  8, OP_SET, 0,                    SKIP, LAYOUT, LAYOUT},
    {"xclean garbage",          STATE(xclean),  8, OP_SET, 0x0123456789abcdefull, SKIP, LAYOUT, LAYOUT},
    {"xclean clean, bit 63",    STATE(xclean),  8, OP_XOR, 1ull << 63,           SKIP, LAYOUT, LAYOUT},
    {"xclean open (crashed)",   STATE(xclean),  8, OP_SET, PH_STATE_OPEN,        SKIP, 0, 0},
    {"xsize +1",                STATE(xsize),   8, OP_ADD, 1,                    SKIP, LAYOUT, LAYOUT},
    {"xsize +page",             STATE(xsize),   8, OP_ADD, PH_PAGE_SIZE,         SKIP, LAYOUT, LAYOUT},
    {"xsize -page",             STATE(xsize),   8, OP_ADD, NEG(PH_PAGE_SIZE),    SKIP, LAYOUT, LAYOUT},
    {"xsize max_size + chunk",  STATE(xsize),   8, OP_SET, HEAP_MAX + CHUNK,     SKIP, LAYOUT, LAYOUT},
    {"xsize huge",              STATE(xsize),   8, OP_SET, ~(CHUNK - 1),         SKIP, LAYOUT, LAYOUT},
    {"xsize 0",                 STATE(xsize),   8, OP_SET, 0,                    SKIP, LAYOUT, LAYOUT},
    {"xsize one chunk",         STATE(xsize),   8, OP_SET, CHUNK,                SKIP, LAYOUT, LAYOUT},
    {"xsize = data offset",     STATE(xsize),   8, OP_SET_DATA, 0,               SKIP, LAYOUT, LAYOUT},
    {"xsize data - chunk",      STATE(xsize),   8, OP_SET_DATA, NEG(CHUNK),      SKIP, LAYOUT, LAYOUT},
    {"xsize data + chunk",      STATE(xsize),   8, OP_SET_DATA, CHUNK,           SKIP, 0, 0},
    {"xsize past the file",     STATE(xsize),   8, OP_ADD, CHUNK,                SKIP, TRUNC, TRUNC},
    {"xsize = max_size",        STATE(xsize),   8, OP_SET, HEAP_MAX,             SKIP, TRUNC, TRUNC},
    {"xopen_count garbage",     STATE(xopen_count), 8, OP_SET, ~0ull - 5,        SKIP, 0, 0},
    {"xunclean_count garbage",  STATE(xunclean_count), 8, OP_SET, 12345,         SKIP, 0, 0},
    {"state reserved[1]",       STATE(reserved) + 8, 8, OP_SET, ~0ull,           SKIP, 0, 0},
    {"xmode bit 0",             STATE(xmode),   8, OP_XOR, 1,                    SKIP, CS, CS},
    {"xmode bit 40",            STATE(xmode),   8, OP_XOR, 1ull << 40,           SKIP, CS, CS},
    {"xmode 0",                 STATE(xmode),   8, OP_SET, 0,                    SKIP, CS, CS},
    {"header page padding",     sizeof(ph_header) + 100, 1, OP_SET, 0x5a,        SKIP, 0, 0},
    {"header page tail",        PH_PAGE_SIZE - 1, 1, OP_SET, 0xa5,               SKIP, 0, 0},
};

static void apply(uint8_t *img, const field_case *c)
{
    uint64_t v = 0;
    memcpy(&v, img + c->off, c->width);
    switch (c->op) {
    case OP_SET: v = c->arg; break;
    case OP_ADD: v += c->arg; break;
    case OP_XOR: v ^= c->arg; break;
    case OP_SET_DATA: v = tmpl_data_off + c->arg; break;
    }
    memcpy(img + c->off, &v, c->width); /* little-endian host */
}

static void fix_checksum(uint8_t *img)
{
    ph_header hdr;
    memcpy(&hdr, img, sizeof(hdr));
    hdr.checksum = ph_header_checksum(&hdr);
    memcpy(img + offsetof(ph_header, checksum), &hdr.checksum, sizeof(hdr.checksum));
}

static void run_case(const field_case *c, const char *path, uint8_t *img)
{
    char what[160];
    memcpy(img, tmpl, tmpl_len);
    apply(img, c);
    if (memcmp(img, tmpl, PH_PAGE_SIZE) == 0) {
        FAIL("%s: the mutation changes nothing", c->name);
        return;
    }
    if (c->stale != SKIP) {
        snprintf(what, sizeof(what), "%s (stale checksum)", c->name);
        if (write_image(path, img, tmpl_len) != 0) {
            FAIL("%s: cannot write %s", what, path);
            return;
        }
        expect_open(what, path, PHEAP_RDONLY, c->stale, img, tmpl_len);
        if (write_image(path, img, tmpl_len) == 0)
            expect_open(what, path, 0, c->stale, img, tmpl_len);
    }
    if (c->rw != SKIP) {
        snprintf(what, sizeof(what), "%s%s", c->name, c->stale != SKIP ? " (checksum fixed)" : "");
        if (c->stale != SKIP)
            fix_checksum(img);
        if (write_image(path, img, tmpl_len) != 0) {
            FAIL("%s: cannot write %s", what, path);
            return;
        }
        expect_open(what, path, PHEAP_RDONLY, c->ro, img, tmpl_len);
        if (write_image(path, img, tmpl_len) == 0)
            expect_open(what, path, 0, c->rw, img, tmpl_len);
    }
}

TEST(template_opens)
{
    REQUIRE(load_template() == 0);
    const char *path = ph_test_path("pristine.heap");
    REQUIRE(write_image(path, tmpl, tmpl_len) == 0);
    CHECK(expect_open("pristine", path, PHEAP_RDONLY, 0, tmpl, tmpl_len));
    CHECK(expect_open("pristine", path, 0, 0, tmpl, tmpl_len));
    /* the layout this file's table assumes */
    ph_header hdr;
    memcpy(&hdr, tmpl, sizeof(hdr));
    CHECK_EQ(hdr.nregions, 8);
    CHECK_EQ(hdr.regions[3].kind, PH_REGION_SLABS);
    CHECK_EQ(hdr.regions[6].kind, PH_REGION_PROCS);
    CHECK_EQ(hdr.regions[7].kind, PH_REGION_DATA);
    CHECK_EQ(hdr.regions[7].offset, tmpl_data_off);
    CHECK_EQ(hdr.max_size, HEAP_MAX);
    CHECK_EQ(hdr.checksum, ph_header_checksum(&hdr));
}

TEST(header_fields)
{
    REQUIRE(load_template() == 0);
    const char *path = ph_test_path("field.heap");
    uint8_t *img = malloc(tmpl_len);
    REQUIRE(img);
    for (size_t i = 0; i < PH_ARRAY_LEN(header_cases); i++)
        run_case(&header_cases[i], path, img);
    free(img);
}

TEST(header_every_byte_stale_checksum)
{
    /* Any single changed byte of the checksummed range is refused, and the
     * code depends only on which field it hit. */
    REQUIRE(load_template() == 0);
    const char *path = ph_test_path("byte.heap");
    uint8_t *img = malloc(tmpl_len);
    REQUIRE(img);
    memcpy(img, tmpl, tmpl_len);
    for (size_t off = 0; off < sizeof(ph_header); off += off < 96 ? 1 : 37) {
        img[off] ^= 0x10;
        int want = off < PH_MAGIC_LEN ? PHEAP_ENOTHEAP
                   : off < offsetof(ph_header, minor) ? PHEAP_EVERSION
                                                      : PHEAP_ECHECKSUM;
        char what[64];
        snprintf(what, sizeof(what), "byte %zu flipped", off);
        if (write_image(path, img, tmpl_len) != 0 ||
            !expect_open(what, path, PHEAP_RDONLY, want, img, tmpl_len))
            break;
        img[off] ^= 0x10;
    }
    free(img);
}

TEST(state_words)
{
    REQUIRE(load_template() == 0);
    const char *path = ph_test_path("state.heap");
    uint8_t *img = malloc(tmpl_len);
    REQUIRE(img);
    for (size_t i = 0; i < PH_ARRAY_LEN(state_cases); i++)
        run_case(&state_cases[i], path, img);
    free(img);
}

TEST(header_fuzz)
{
    /* Random damage to the header, with and without a matching checksum:
     * never a crash, only the codes of a bad header, and the file is left
     * alone.  Seeded, so a failure repeats. */
    REQUIRE(load_template() == 0);
    const char *path = ph_test_path("fuzz.heap");
    uint8_t *img = malloc(tmpl_len);
    REQUIRE(img);
    uint64_t seed = 0x5eed;
    for (int iter = 0; iter < 400 && ph_test_failed == 0; iter++) {
        memcpy(img, tmpl, tmpl_len);
        int nbytes = 1 + (int)(ph_mix64(seed++) % 6);
        for (int k = 0; k < nbytes; k++) {
            uint64_t r = ph_mix64(seed++);
            size_t off = PH_MAGIC_LEN + (size_t)(r % (offsetof(ph_header, checksum) - PH_MAGIC_LEN));
            if (iter % 4 == 3)
                off = PH_STATE_OFFSET + (size_t)(r % sizeof(ph_state));
            img[off] = (uint8_t)(r >> 32);
        }
        int hdr_changed = memcmp(img, tmpl, offsetof(ph_header, checksum)) != 0;
        int fixed = iter % 2;
        if (fixed)
            fix_checksum(img);
        if (write_image(path, img, tmpl_len) != 0) {
            FAIL("fuzz %d: cannot write", iter);
            break;
        }
        for (int ro = 1; ro >= 0; ro--) {
            pheap_options o = {.flags = ro ? PHEAP_RDONLY : 0};
            pheap *h = NULL;
            int rc = pheap_open(path, &o, &h);
            int allowed = rc == PHEAP_EVERSION || rc == PHEAP_ECHECKSUM || rc == PHEAP_ELAYOUT ||
                          rc == PHEAP_ENOTSUP || rc == PHEAP_ETRUNCATED || rc == 0;
            if (!allowed)
                FAIL("fuzz %d (%s): unexpected %d %s: %s", iter, ro ? "ro" : "rw", rc,
                     pheap_strerror(rc), pheap_errmsg());
            if (!fixed && hdr_changed && rc != PHEAP_EVERSION && rc != PHEAP_ECHECKSUM)
                FAIL("fuzz %d: stale checksum not caught: %d", iter, rc);
            if (rc == 0) {
                pheap_close(h);
                if (ro && !same_contents(path, img, tmpl_len))
                    FAIL("fuzz %d: read-only open changed the file", iter);
                continue; /* a read-write open may legitimately write the state */
            }
            if (!*pheap_errmsg())
                FAIL("fuzz %d: empty message", iter);
            if (!same_contents(path, img, tmpl_len))
                FAIL("fuzz %d (%s): failed open changed the file", iter, ro ? "ro" : "rw");
        }
    }
    free(img);
}

/* ---- truncation --------------------------------------------------------- */

TEST(truncated)
{
    REQUIRE(load_template() == 0);
    const char *path = ph_test_path("short.heap");
    uint64_t d = tmpl_data_off;
    const uint64_t lens[] = {
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 15, 16, 17, 31, 63, 64, 65, 79, 80, 100, 255,
        511, 512, 1000, 1015, 1016, 1023, 1024, 1025, 1500, 2047, 2048, 2049, 2111, 2112, 2113,
        3000, 4000, 4094, 4095,
        4096, 4097, 8191, 8192, 65535, 65536, 65537, 1u << 20, d - 1, d, d + 1, d + CHUNK - 1,
        d + CHUNK, d + CHUNK + 1, HEAP_SIZE - CHUNK - 1, HEAP_SIZE - CHUNK, HEAP_SIZE - CHUNK + 1,
        HEAP_SIZE - PH_PAGE_SIZE, HEAP_SIZE - PH_LINE_SIZE, HEAP_SIZE - 2, HEAP_SIZE - 1,
    };
    for (size_t i = 0; i < PH_ARRAY_LEN(lens); i++) {
        uint64_t len = lens[i];
        REQUIRE(len < tmpl_len);
        int want = len == 0 ? PHEAP_EEMPTY : PHEAP_ETRUNCATED;
        char what[64];
        snprintf(what, sizeof(what), "truncated to %llu bytes", (unsigned long long)len);
        REQUIRE(write_image(path, tmpl, len) == 0);
        expect_open(what, path, PHEAP_RDONLY, want, tmpl, len);
        REQUIRE(write_image(path, tmpl, len) == 0);
        expect_open(what, path, 0, want, tmpl, len);
    }
    /* The full length opens: the boundary is exact. */
    REQUIRE(write_image(path, tmpl, tmpl_len) == 0);
    expect_open("full length", path, PHEAP_RDONLY, 0, tmpl, tmpl_len);
}

/* ---- files that are not heaps ------------------------------------------ */

static void expect_both(const char *what, const char *path, int want, const uint8_t *img, size_t len)
{
    expect_open(what, path, PHEAP_RDONLY, want, img, len);
    expect_open(what, path, 0, want, img, len);
}

TEST(not_a_heap)
{
    const char *path = ph_test_path("not.heap");
    static const char text[] = "This is a text file, not a heap.\nSecond line.\n";
    REQUIRE(write_image(path, (const uint8_t *)text, sizeof(text) - 1) == 0);
    expect_both("short text file", path, PHEAP_ENOTHEAP, (const uint8_t *)text, sizeof(text) - 1);

    size_t big = 3 * PH_PAGE_SIZE + 17;
    uint8_t *buf = malloc(HEAP_SIZE);
    REQUIRE(buf);
    for (size_t i = 0; i < big; i++)
        buf[i] = (uint8_t)text[i % (sizeof(text) - 1)];
    REQUIRE(write_image(path, buf, big) == 0);
    expect_both("long text file", path, PHEAP_ENOTHEAP, buf, big);

    const size_t rlens[] = {1, 5, 8, 100, PH_PAGE_SIZE, HEAP_SIZE};
    for (size_t k = 0; k < PH_ARRAY_LEN(rlens); k++) {
        for (size_t i = 0; i < rlens[k]; i++)
            buf[i] = (uint8_t)ph_mix64(k * 1000003 + i);
        if (buf[0] == 0x89)
            buf[0] = 0x88;
        char what[64];
        snprintf(what, sizeof(what), "%zu random bytes", rlens[k]);
        REQUIRE(write_image(path, buf, rlens[k]) == 0);
        expect_both(what, path, PHEAP_ENOTHEAP, buf, rlens[k]);
    }

    /* Look-alikes: a PNG signature shares the first byte and the CR LF. */
    static const uint8_t png[16] = {0x89, 'P', 'N',  'G', '\r', '\n', 0x1a, '\n',
                                    0,    0,   0,    13,  'I',  'H',  'D',  'R'};
    REQUIRE(write_image(path, png, sizeof(png)) == 0);
    expect_both("PNG file", path, PHEAP_ENOTHEAP, png, sizeof(png));
    /* The magic after line-ending conversion (CR LF -> LF). */
    memcpy(buf, "\x89PHEAP\n", 7);
    memset(buf + 7, 0, PH_PAGE_SIZE - 7);
    REQUIRE(write_image(path, buf, PH_PAGE_SIZE) == 0);
    expect_both("magic with CR LF converted", path, PHEAP_ENOTHEAP, buf, PH_PAGE_SIZE);
    /* 7-bit transfer: the high bit of the first byte stripped. */
    memcpy(buf, PH_MAGIC_BYTES, PH_MAGIC_LEN);
    buf[0] &= 0x7f;
    REQUIRE(write_image(path, buf, PH_PAGE_SIZE) == 0);
    expect_both("magic with the high bit stripped", path, PHEAP_ENOTHEAP, buf, PH_PAGE_SIZE);
    /* A page of zeros (e.g. a preallocated file). */
    memset(buf, 0, HEAP_SIZE);
    REQUIRE(write_image(path, buf, HEAP_SIZE) == 0);
    expect_both("all zeros", path, PHEAP_ENOTHEAP, buf, HEAP_SIZE);
    free(buf);
}

TEST(empty_file)
{
    const char *path = ph_test_path("empty.heap");
    REQUIRE(write_image(path, (const uint8_t *)"", 0) == 0);
    expect_both("empty file", path, PHEAP_EEMPTY, (const uint8_t *)"", 0);
}

static int dir_is_empty(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A '%s')\"", dir);
    return system(cmd) == 0;
}

TEST(directory)
{
    const char *dir = ph_test_path("a-directory");
    REQUIRE(mkdir(dir, 0755) == 0);
    expect_open("directory", dir, PHEAP_RDONLY, PHEAP_EISDIR, NULL, 0);
    expect_open("directory", dir, 0, PHEAP_EISDIR, NULL, 0);
    expect_open("directory", dir, PHEAP_CREATE, PHEAP_EISDIR, NULL, 0);
    expect_open("directory", dir, PHEAP_CREATE | PHEAP_EXCL, PHEAP_EISDIR, NULL, 0);
    struct stat st;
    CHECK(stat(dir, &st) == 0 && S_ISDIR(st.st_mode));
    CHECK(dir_is_empty(dir));
}

TEST(missing_file)
{
    const char *dir = ph_test_path("missing-dir");
    REQUIRE(mkdir(dir, 0755) == 0);
    char path[600], deep[600];
    snprintf(path, sizeof(path), "%s/none.heap", dir);
    snprintf(deep, sizeof(deep), "%s/no/such/dir/none.heap", dir);
    expect_open("missing file", path, PHEAP_RDONLY, PHEAP_ENOENT, NULL, 0);
    expect_open("missing file", path, 0, PHEAP_ENOENT, NULL, 0);
    expect_open("missing directory", deep, PHEAP_CREATE, PHEAP_ENOENT, NULL, 0);
    CHECK(access(path, F_OK) != 0 && errno == ENOENT);
    CHECK(dir_is_empty(dir)); /* no file, no temporary left behind */
}

TEST(exists_exclusive)
{
    REQUIRE(load_template() == 0);
    const char *path = ph_test_path("exists.heap");
    REQUIRE(write_image(path, tmpl, tmpl_len) == 0);
    expect_open("heap exists", path, PHEAP_CREATE | PHEAP_EXCL, PHEAP_EEXIST, tmpl, tmpl_len);
    REQUIRE(write_image(path, (const uint8_t *)"", 0) == 0);
    expect_open("empty file exists", path, PHEAP_CREATE | PHEAP_EXCL, PHEAP_EEXIST, (const uint8_t *)"", 0);
    static const char text[] = "text\n";
    REQUIRE(write_image(path, (const uint8_t *)text, 5) == 0);
    expect_open("text file exists", path, PHEAP_CREATE | PHEAP_EXCL, PHEAP_EEXIST, (const uint8_t *)text, 5);
    /* without EXCL a non-heap file is still refused, not overwritten */
    expect_open("text file", path, PHEAP_CREATE, PHEAP_ENOTHEAP, (const uint8_t *)text, 5);
}

/* FIFOs and device nodes are not heap files: refused without blocking, and
 * never replaced by a new heap, even with PHEAP_CREATE. */
/* Makes a FIFO (dev 0) or a null character device at `path` afresh. */
static int make_node(const char *path, int dev)
{
    unlink(path);
    return dev ? mknod(path, S_IFCHR | 0600, makedev(1, 3)) : mkfifo(path, 0600);
}

TEST(not_a_regular_file)
{
    const char *fifo = ph_test_path("a-fifo");
    const char *dev = ph_test_path("a-device");
    REQUIRE(make_node(fifo, 0) == 0);
    int have_dev = geteuid() == 0 && make_node(dev, 1) == 0;
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        alarm(3); /* an open that blocks is a failure, not a hung test */
        expect_open("FIFO", fifo, 0, PHEAP_ENOTHEAP, NULL, 0);
        make_node(fifo, 0);
        expect_open("FIFO", fifo, PHEAP_CREATE, PHEAP_ENOTHEAP, NULL, 0);
        for (int i = 0; have_dev && i < 3; i++) {
            static const unsigned flags[] = {0, PHEAP_RDONLY, PHEAP_CREATE};
            make_node(dev, 1);
            expect_open("character device", dev, flags[i], PHEAP_ENOTHEAP, NULL, 0);
        }
        make_node(fifo, 0);
        expect_open("FIFO", fifo, PHEAP_RDONLY, PHEAP_ENOTHEAP, NULL, 0); /* last: may block */
        _exit(ph_test_failed ? 1 : 0);
    }
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
        FAIL("a read-only pheap_open of a FIFO blocked for 3 s");
    else
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    struct stat st;
    CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
    if (have_dev)
        CHECK(lstat(dev, &st) == 0 && S_ISCHR(st.st_mode));
}

/* A dangling symbolic link: creating through it is refused with a clear
 * code at once, and the link is left alone. */
TEST(dangling_symlink)
{
    const char *dir = ph_test_path("links");
    REQUIRE(mkdir(dir, 0755) == 0);
    char link[600], target[600];
    snprintf(link, sizeof(link), "%s/link.heap", dir);
    snprintf(target, sizeof(target), "%s/target.heap", dir);
    REQUIRE(symlink(target, link) == 0);
    expect_open("dangling symlink", link, 0, PHEAP_ENOENT, NULL, 0);
    expect_open("dangling symlink", link, PHEAP_RDONLY, PHEAP_ENOENT, NULL, 0);
    expect_open("dangling symlink", link, PHEAP_CREATE | PHEAP_EXCL, PHEAP_EEXIST, NULL, 0);
    expect_open("dangling symlink", link, PHEAP_CREATE, PHEAP_EEXIST, NULL, 0);
    char buf[600];
    ssize_t n = readlink(link, buf, sizeof(buf) - 1);
    CHECK(n == (ssize_t)strlen(target) && memcmp(buf, target, (size_t)n) == 0);
    CHECK(access(target, F_OK) != 0);
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "test \"$(ls -A '%s')\" = link.heap", dir);
    CHECK(system(cmd) == 0); /* no temporaries left */
}

/* ---- permissions --------------------------------------------------------- */

TEST(no_permission)
{
    REQUIRE(load_template() == 0);
    const char *path = ph_test_path("private.heap");
    const char *other = ph_test_path("child-made.heap");
    const char *shared = ph_test_path("readable.heap");
    REQUIRE(write_image(path, tmpl, tmpl_len) == 0);
    REQUIRE(chmod(path, 0600) == 0);
    REQUIRE(write_image(shared, tmpl, tmpl_len) == 0);
    REQUIRE(chmod(shared, 0644) == 0);
    if (geteuid() != 0) {
        REQUIRE(chmod(path, 0) == 0);
        expect_open("mode 000", path, PHEAP_RDONLY, PHEAP_EACCES, NULL, 0);
        expect_open("mode 000", path, 0, PHEAP_EACCES, NULL, 0);
        REQUIRE(chmod(path, 0600) == 0);
        CHECK(same_contents(path, tmpl, tmpl_len));
        return;
    }
    REQUIRE(chmod(ph_test_dir(), 0755) == 0);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0)
            _exit(3);
        struct stat st;
        if (stat(path, &st) != 0)
            _exit(4); /* the test directory is not reachable for nobody */
        expect_open("root-owned 0600 heap as uid 65534", path, PHEAP_RDONLY, PHEAP_EACCES, NULL, 0);
        expect_open("root-owned 0600 heap as uid 65534", path, 0, PHEAP_EACCES, NULL, 0);
        expect_open("create in a root-owned 0755 directory", other, PHEAP_CREATE, PHEAP_EACCES,
                    NULL, 0);
        expect_open("root-owned 0644 heap as uid 65534", shared, 0, PHEAP_EACCES, tmpl, tmpl_len);
        expect_open("root-owned 0644 heap as uid 65534", shared, PHEAP_RDONLY, 0, tmpl, tmpl_len);
        _exit(ph_test_failed ? 1 : 0);
    }
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    if (WEXITSTATUS(status) == 4) {
        fprintf(stderr, "  skipped: %s is not reachable for uid 65534\n", ph_test_dir());
        return;
    }
    CHECK_EQ(WEXITSTATUS(status), 0);
    CHECK(same_contents(path, tmpl, tmpl_len));
    CHECK(same_contents(shared, tmpl, tmpl_len));
    CHECK(access(other, F_OK) != 0);
}

/* ---- bad options --------------------------------------------------------- */

TEST(bad_options)
{
    REQUIRE(load_template() == 0);
    const char *dir = ph_test_path("opts");
    REQUIRE(mkdir(dir, 0755) == 0);
    char path[600], fresh[600];
    snprintf(path, sizeof(path), "%s/heap", dir);
    snprintf(fresh, sizeof(fresh), "%s/fresh", dir);
    REQUIRE(write_image(path, tmpl, tmpl_len) == 0);

    const struct {
        const char *what;
        pheap_options o;
    } cases[] = {
        {"unknown flag bit 0x100", {.flags = 0x100}},
        {"unknown flag bit 31", {.flags = 0x80000000u}},
        {"RDONLY|CREATE", {.flags = PHEAP_RDONLY | PHEAP_CREATE}},
        {"RDONLY|SIMULATE", {.flags = PHEAP_RDONLY | PHEAP_SIMULATE}},
        {"EXCL without CREATE", {.flags = PHEAP_EXCL}},
        {"evict probability 1.5", {.sim_evict_probability = 1.5}},
        {"evict probability 1.5, simulating", {.flags = PHEAP_SIMULATE, .sim_evict_probability = 1.5}},
        {"evict probability -0.25", {.flags = PHEAP_SIMULATE, .sim_evict_probability = -0.25}},
        {"evict probability NaN", {.flags = PHEAP_SIMULATE, .sim_evict_probability = NAN}},
        {"evict probability inf", {.flags = PHEAP_SIMULATE, .sim_evict_probability = INFINITY}},
        {"crash fence without SIMULATE", {.sim_crash_fence = 1}},
        {"crash image without SIMULATE", {.sim_crash_image = "/nonexistent/image"}},
        {"flush kind 99", {.flush = 99}},
        {"flush kind SIM set directly", {.flush = PHEAP_FLUSH_SIM}},
        {"mode with bits above 07777", {.flags = PHEAP_CREATE, .mode = 010000}},
        {"consistency 2", {.consistency = 2}},
        {"size above 64 TiB", {.flags = PHEAP_CREATE, .size = (1ull << 46) + CHUNK}},
        {"max_size above 64 TiB", {.flags = PHEAP_CREATE, .max_size = 1ull << 47}},
        {"max_size below size", {.flags = PHEAP_CREATE, .size = 8u << 20, .max_size = 4u << 20}},
    };
    for (size_t i = 0; i < PH_ARRAY_LEN(cases); i++) {
        REQUIRE(write_image(path, tmpl, tmpl_len) == 0); /* a case that wrongly opened wrote it */
        expect_open_opts(cases[i].what, path, &cases[i].o, PHEAP_EINVAL, tmpl, tmpl_len);
        expect_open_opts(cases[i].what, fresh, &cases[i].o, PHEAP_EINVAL, NULL, 0);
        CHECK(access(fresh, F_OK) != 0);
    }

    /* A max_size that cannot hold its metadata and one chunk of data, or
     * the data asked for: refused, nothing left behind. */
    pheap_options tiny = {.flags = PHEAP_CREATE, .size = CHUNK, .max_size = CHUNK};
    expect_open_opts("max_size below the minimum", fresh, &tiny, PHEAP_EINVAL, NULL, 0);
    CHECK(strstr(pheap_errmsg(), "max_size must be at least") != NULL);
    CHECK(access(fresh, F_OK) != 0);
    pheap_options full = {.flags = PHEAP_CREATE, .size = HEAP_MAX, .max_size = HEAP_MAX};
    expect_open_opts("max_size = size (no room for metadata)", fresh, &full, PHEAP_EINVAL, NULL, 0);
    CHECK(access(fresh, F_OK) != 0);

    /* A bad PHEAP_FLUSH value in the environment. */
    REQUIRE(setenv("PHEAP_FLUSH", "fastest", 1) == 0);
    expect_open("PHEAP_FLUSH=fastest", path, 0, PHEAP_EINVAL, tmpl, tmpl_len);
    expect_open("PHEAP_FLUSH=fastest", path, PHEAP_RDONLY, PHEAP_EINVAL, tmpl, tmpl_len);
    expect_open("PHEAP_FLUSH=fastest", fresh, PHEAP_CREATE, PHEAP_EINVAL, NULL, 0);
    REQUIRE(setenv("PHEAP_FLUSH", "sim", 1) == 0); /* internal kind, not a user value */
    expect_open("PHEAP_FLUSH=sim", path, 0, PHEAP_EINVAL, tmpl, tmpl_len);
    unsetenv("PHEAP_FLUSH");
    CHECK(access(fresh, F_OK) != 0);

    /* Bad arguments. */
    pheap *h = (pheap *)&h;
    CHECK_EQ(pheap_open(path, NULL, NULL), PHEAP_EINVAL);
    CHECK(*pheap_errmsg());
    CHECK_EQ(pheap_open(NULL, NULL, &h), PHEAP_EINVAL);
    CHECK(h == NULL);
    CHECK(*pheap_errmsg());
    h = (pheap *)&h;
    CHECK_EQ(pheap_open("", NULL, &h), PHEAP_EINVAL);
    CHECK(h == NULL);
    CHECK_EQ(pheap_errno(), PHEAP_EINVAL);
    CHECK(*pheap_errmsg());

    CHECK(same_contents(path, tmpl, tmpl_len));
    /* Only the heap is in the directory: no temporaries. */
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "test \"$(ls -A '%s')\" = heap", dir);
    CHECK(system(cmd) == 0);
    /* The heap still opens after all of that. */
    expect_open("after the bad options", path, PHEAP_RDONLY, 0, tmpl, tmpl_len);
}
