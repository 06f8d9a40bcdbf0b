/*
 * target.c -- the fuzz target for hostile heap files (docs/FUZZING.md).
 *
 * Input: byte 0 picks a seed image (seeds.c), byte 1 holds flags, then
 * patch records until an end record or the end of the input, then
 * operation bytes.  The patched image is written to a file and opened; the
 * contract: the open fails with a defined error and a message, or it
 * succeeds, recovery (GC mode) succeeds, pheap_check passes (but for
 * descriptors of chunks that are no slab, which a clean open does not
 * read: an allocation meeting one fails instead), names and
 * roots lead to live blocks, operations fail only with defined errors,
 * the heap checks clean after them, closes, reopens and checks clean
 * again.  A breach aborts with a message (a crash for libFuzzer, a failure
 * for the replay driver).
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "format/layout.h"
#include "pheap.h"
#include "util/crc32c.h"

/* ---- input reading ------------------------------------------------------ */

typedef struct input {
    const uint8_t *p;
    size_t n;
} input;

static unsigned take(input *in)
{
    if (!in->n)
        return 0;
    in->n--;
    return *in->p++;
}

static uint64_t take_n(input *in, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; i++)
        v |= (uint64_t)take(in) << (8 * i);
    return v;
}

static __attribute__((noreturn, format(printf, 1, 2))) void breach(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz: contract broken: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

static int defined_error(int rc)
{
    return rc <= PHEAP_EINVAL && rc >= PHEAP_ERECOVER;
}

static void expect(int rc, const char *what)
{
    if (rc != 0 && !defined_error(rc))
        breach("%s: undefined result %d", what, rc);
}

/* ---- the file ----------------------------------------------------------- */

typedef struct target {
    int fd;
    uint64_t len;
    ph_header hdr;          /* as in the seed (patches to it may follow) */
    uint64_t region_off[PH_REGION_KIND_END];
    uint64_t region_size[PH_REGION_KIND_END];
    uint64_t xsize;
} target;

static uint64_t rd64(const target *t, uint64_t off)
{
    uint64_t v = 0;
    if (off + 8 <= t->len && pread(t->fd, &v, 8, (off_t)off) != 8)
        v = 0;
    return v;
}

static void wr(const target *t, uint64_t off, const void *buf, size_t n)
{
    if (off >= t->len)
        return;
    if (n > t->len - off)
        n = (size_t)(t->len - off);
    if (pwrite(t->fd, buf, n, (off_t)off) != (ssize_t)n)
        breach("cannot write the heap file");
}

static int write_image(target *t, const ph_fuzz_image *img, const char *path)
{
    unlink(path);
    t->fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (t->fd < 0 || ftruncate(t->fd, (off_t)img->len) != 0)
        breach("cannot create %s", path);
    t->len = img->len;
    for (uint64_t i = 0; i < img->npages; i++)
        wr(t, img->page_no[i] * PH_PAGE_SIZE, img->pages + i * PH_PAGE_SIZE, PH_PAGE_SIZE);
    if (pread(t->fd, &t->hdr, sizeof(t->hdr), 0) != (ssize_t)sizeof(t->hdr))
        memset(&t->hdr, 0, sizeof(t->hdr));
    for (unsigned i = 0; i < t->hdr.nregions && i < PH_REGIONS_MAX; i++) {
        unsigned k = t->hdr.regions[i].kind;
        if (k < PH_REGION_KIND_END) {
            t->region_off[k] = t->hdr.regions[i].offset;
            t->region_size[k] = t->hdr.regions[i].size;
        }
    }
    t->xsize = rd64(t, PH_STATE_OFFSET + offsetof(ph_state, xsize));
    return 0;
}

/* ---- patch targets: ranges of the metadata that matter most ------------- */

enum {
    T_HEADER, T_STATE, T_ROOTS, T_LANES, T_TXANCHORS, T_TXRECORDS, T_SLABS, T_EXTLOG,
    T_NAMES, T_NAMESEG, T_TXSEG, T_ROOTBLOCK, T_LENGTH, T_END, T_META, T_FILE
};

/* Offset of a name segment (choice among those of the current array), or 0. */
static uint64_t name_segment(const target *t, unsigned choice)
{
    uint64_t names = t->region_off[PH_REGION_NAMES];
    if (!names)
        return 0;
    uint64_t xdir = rd64(t, names);
    unsigned depth = (unsigned)(xdir >> 1) & 15;
    if (depth > PH_NAMES_DEPTH_MAX)
        depth = PH_NAMES_DEPTH_MAX;
    uint64_t arr = names + ((xdir & 1) ? PH_NAMES_DIR1 : PH_NAMES_DIR0);
    uint64_t e = rd64(t, arr + 8 * (choice % (1u << depth)));
    return PH_NAMES_ENTRY_OFF(e);
}

/* Maps (target, raw offset) to a file offset and the span it may cover. */
static uint64_t place(const target *t, unsigned kind, uint64_t raw, unsigned choice)
{
    uint64_t lanes = t->region_off[PH_REGION_LANES], base = 0, span = 0;
    switch (kind) {
    case T_HEADER: base = 0; span = sizeof(ph_header); break;
    case T_STATE: base = PH_STATE_OFFSET; span = sizeof(ph_state); break;
    case T_ROOTS: base = t->region_off[PH_REGION_ROOTS]; span = 8 * sizeof(ph_root_entry); break;
    case T_LANES: base = lanes; span = 4 * PH_LANE_SIZE; break;
    case T_TXANCHORS: base = lanes + PH_TXLOG_ANCHORS; span = 4 * PH_LINE_SIZE; break;
    case T_TXRECORDS: base = lanes + PH_TXLOG_RECORDS; span = 4 * PH_TXLOG_SIZE; break;
    case T_SLABS: {
        uint64_t data = t->region_off[PH_REGION_DATA];
        uint64_t chunks = t->xsize > data ? (t->xsize - data) / PH_CHUNK_SIZE : 1;
        base = t->region_off[PH_REGION_SLABS];
        span = (chunks ? chunks : 1) * PH_SLAB_DESC_SIZE;
        break;
    }
    case T_EXTLOG: {
        uint64_t half = (t->region_size[PH_REGION_EXTLOG] - PH_PAGE_SIZE) / 2;
        base = t->region_off[PH_REGION_EXTLOG];
        raw %= 3 * 4096;
        if (raw < 4096)
            return base + raw % PH_LINE_SIZE;
        return base + PH_PAGE_SIZE + (raw >= 8192 ? half : 0) + raw % 4096;
    }
    case T_NAMES: {
        base = t->region_off[PH_REGION_NAMES];
        raw %= 3 * 512;
        if (raw < 512)
            return base + raw % PH_LINE_SIZE;
        return base + (raw >= 1024 ? PH_NAMES_DIR1 : PH_NAMES_DIR0) + raw % 512;
    }
    case T_NAMESEG:
        base = name_segment(t, choice);
        span = (1u << PH_NAMES_HOME_MIN_BITS) * PH_LINE_SIZE + (PH_NAMES_SPILL + 1) * PH_LINE_SIZE;
        break;
    case T_TXSEG:
        base = rd64(t, lanes + PH_TXLOG_ANCHORS + (choice % 4) * PH_LINE_SIZE +
                           offsetof(ph_txlog_anchor, xnext));
        span = PH_PAGE_SIZE;
        break;
    case T_ROOTBLOCK:
        base = rd64(t, t->region_off[PH_REGION_ROOTS] + (choice % 4) * sizeof(ph_root_entry) +
                           offsetof(ph_root_entry, xoff));
        span = 512;
        break;
    case T_META: base = PH_PAGE_SIZE; span = t->region_off[PH_REGION_DATA]; break;
    default: base = 0; span = t->len; break;
    }
    if (!base && kind != T_HEADER && kind != T_FILE)
        base = t->region_off[PH_REGION_DATA];
    return base + (span ? raw % span : 0);
}

static uint64_t dictionary(const target *t, unsigned i, uint64_t cur)
{
    uint64_t data = t->region_off[PH_REGION_DATA];
    switch (i % 24) {
    case 0: return 0;
    case 1: return 1;
    case 2: return 2;
    case 3: return ~0ull;
    case 4: return 1ull << 63;
    case 5: return PH_STATE_CLEAN;
    case 6: return PH_STATE_OPEN;
    case 7: return data;
    case 8: return data + PH_CHUNK_SIZE + 16 * (i >> 5);
    case 9: return t->xsize;
    case 10: return t->xsize + PH_PAGE_SIZE;
    case 11: return t->hdr.max_size;
    case 12: return t->region_off[1 + (i >> 5) % (PH_REGION_KIND_END - 1)];
    case 13: return 1ull << 40;
    case 14: return PH_NAMES_SEG_MAGIC;
    case 15: return PH_TXSEG_MAGIC;
    case 16: return cur + 1;
    case 17: return cur - 1;
    case 18: return cur << 1;
    case 19: return cur >> 1;
    case 20: return cur ^ (1ull << (i >> 2 & 63));
    case 21: return cur + PH_CHUNK_SIZE;
    case 22: return cur + 8;
    default: return cur & 0xffffffffull;
    }
}

/* Applies the patch records; returns 1 when the header changed. */
static int apply_patches(target *t, input *in)
{
    int header = 0;
    for (unsigned count = 0; in->n && count < 64; count++) {
        unsigned tag = take(in), kind = tag & 15, mode = tag >> 4;
        if (kind == T_END)
            break;
        if (kind == T_LENGTH) { /* truncation or extension */
            uint64_t v = take_n(in, 3);
            uint64_t len = mode < 8 ? t->len - (v * 64) % t->len
                                    : t->len + (v % 4096) * PH_PAGE_SIZE;
            if (mode == 0)
                len = t->xsize - v % 65536; /* around the recorded size */
            if (ftruncate(t->fd, (off_t)len) != 0)
                breach("cannot resize the heap file");
            t->len = len;
            continue;
        }
        unsigned choice = take(in);
        uint64_t off = place(t, kind, take_n(in, 3), choice);
        header |= off < sizeof(ph_header);
        uint8_t buf[64];
        if (mode < 8) { /* raw bytes */
            size_t n = mode + 1;
            for (size_t i = 0; i < n; i++)
                buf[i] = (uint8_t)take(in);
            wr(t, off, buf, n);
        } else if (mode < 12) { /* a chosen word */
            off &= ~7ull;
            uint64_t v = dictionary(t, take(in), rd64(t, off));
            wr(t, off, &v, 8);
        } else if (mode < 14) { /* one bit */
            unsigned bit = take(in);
            uint8_t b = 0;
            if (off < t->len && pread(t->fd, &b, 1, (off_t)(off + bit / 8 % 8)) == 1) {
                b ^= (uint8_t)(1u << (bit % 8));
                wr(t, off + bit / 8 % 8, &b, 1);
            }
        } else if (mode == 14) { /* a zeroed line */
            memset(buf, 0, sizeof(buf));
            wr(t, off & ~63ull, buf, sizeof(buf));
        } else { /* a line copied from elsewhere in the same target */
            uint64_t from = place(t, kind, take_n(in, 3), take(in)) & ~63ull;
            memset(buf, 0, sizeof(buf));
            if (from < t->len && pread(t->fd, buf, sizeof(buf), (off_t)from) < 0)
                breach("cannot read the heap file");
            wr(t, off & ~63ull, buf, sizeof(buf));
        }
    }
    return header;
}

static void fix_checksum(target *t)
{
    ph_header hdr;
    if (pread(t->fd, &hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr))
        return;
    hdr.checksum = ph_crc32c(0, &hdr, offsetof(ph_header, checksum));
    wr(t, 0, &hdr, sizeof(hdr));
}

/* ---- the contract on an open heap --------------------------------------- */

static void touch(pheap *h, pheap_off off, size_t len)
{
    volatile const uint8_t *p = pheap_direct(h, off);
    if (!p)
        breach("live block %#llx has no address", (unsigned long long)off);
    (void)p[0];
    (void)p[len - 1];
}

static void check_clean(pheap *h, const char *when, const char *seed)
{
    pheap_check_report rep;
    int rc = pheap_check(h, &rep);
    if (rc != 0 && rep.errors != rep.damaged_chunks) /* those, a clean open does not read */
        breach("pheap_check %s (%s): %d, %u errors, first: %s", when, seed, rc, rep.errors,
               rep.first_error);
}

/* What a program can do to its heap through the API, and pheap_check
 * reports: a root or a name left naming a block it freed.  Repaired the
 * program's way (the root set to 0, the name removed); returns how many. */
static unsigned repair_dangling(pheap *h)
{
    unsigned fixed = 0;
    for (unsigned i = 0; i < pheap_root_count(h); i++) {
        char name[PHEAP_ROOT_NAME_MAX + 1];
        pheap_off off = 0;
        if (pheap_root_at(h, i, name, &off) == 0 && off && !pheap_usable_size(h, off)) {
            expect(pheap_root_set(h, name, 0), "pheap_root_set(0)");
            fixed++;
            i--; /* the table order is kept; the next root is now number i */
        }
    }
    static pheap_name_info info[64];
    unsigned n = 0;
    const char *after = NULL;
    while (n < 64 && pheap_name_next(h, after, &info[n]) == 0) {
        after = info[n].name;
        if (!pheap_usable_size(h, info[n].off))
            n++;
    }
    for (unsigned i = 0; i < n; i++) {
        int rc = pheap_free_named(h, info[i].name);
        if (rc != PHEAP_ENOTLIVE)
            breach("pheap_free_named of a dangling name %s: %d (%s)", info[i].name, rc,
                   pheap_errmsg());
        fixed++;
    }
    return fixed;
}

static void check_settled(pheap *h, const char *when, const char *seed)
{
    pheap_check_report rep;
    if (pheap_check(h, &rep) != 0)
        repair_dangling(h);
    check_clean(h, when, seed);
}

static void walk(pheap *h, int writable)
{
    unsigned roots = pheap_root_count(h);
    for (unsigned i = 0; i < roots; i++) {
        char name[PHEAP_ROOT_NAME_MAX + 1];
        pheap_off off = 0;
        if (pheap_root_at(h, i, name, &off) != 0)
            breach("root %u of %u unreadable: %s", i, roots, pheap_errmsg());
        if (pheap_root_get(h, name) != off)
            breach("root %s: root_get and root_at disagree", name);
        size_t usable = off && writable ? pheap_usable_size(h, off) : 0;
        if (off && writable && !usable && !defined_error(pheap_errno()))
            breach("root %s: pheap_usable_size: undefined error %d", name, pheap_errno());
        if (usable)
            touch(h, off, usable);
    }
    pheap_name_info info;
    const char *after = NULL;
    for (unsigned i = 0; i < 100000; i++) {
        int rc = pheap_name_next(h, after, &info);
        if (rc == PHEAP_ENOENT)
            return;
        if (rc != 0)
            breach("pheap_name_next: %d (%s)", rc, pheap_errmsg());
        if (pheap_lookup(h, info.name) != info.off)
            breach("name %s: lookup and iteration disagree", info.name);
        size_t usable = writable ? pheap_usable_size(h, info.off) : 0;
        if (writable && usable && usable < info.size)
            breach("name %s: block %#llx holds %zu bytes, made with %llu", info.name,
                   (unsigned long long)info.off, usable, (unsigned long long)info.size);
        if (usable)
            touch(h, info.off, usable);
        after = info.name;
    }
    breach("name iteration does not end");
}

#define KEEP 16


static pheap_off pick(input *in, const pheap_off *keep, pheap *h)
{
    unsigned c = take(in);
    if (c < 160)
        return keep[c % KEEP];
    if (c < 200) {
        char name[PHEAP_ROOT_NAME_MAX + 1];
        pheap_off off = 0;
        pheap_root_at(h, c % 4, name, &off);
        return off;
    }
    if (c < 240) { /* somewhere in the data region: inside blocks, free space, past the end */
        struct pheap_stats st;
        if (pheap_stats(h, &st) != 0)
            return 0;
        uint64_t at = take_n(in, 3) * (c & 1 ? 16 : 8);
        return st.data_offset + at % (st.data_size + PH_CHUNK_SIZE);
    }
    return (pheap_off)take_n(in, 3) << (c & 7); /* anything, mostly not a block */
}

static void remember(pheap *h, pheap_off *keep, unsigned *next, pheap_off off, size_t size)
{
    if (!off)
        return;
    size_t usable = pheap_usable_size(h, off);
    if (usable < size)
        breach("new block %#llx: %zu usable bytes for %zu asked", (unsigned long long)off,
               usable, size);
    memset(pheap_direct(h, off), 0x5c, size);
    keep[*next % KEEP] = off;
    (*next)++;
}

/* Allocations, frees (of bad offsets too), names, roots, a transaction:
 * driven by the operation bytes, or a fixed sequence when there are none. */
static void operate(pheap *h, input *in, int log_mode)
{
    static const uint8_t fixed[] = {0, 3, 0, 200, 1, 2, 2, 0, 3, 1, 4, 5, 6, 9, 7, 2, 1};
    input dflt = {fixed, sizeof(fixed)};
    if (!in->n)
        in = &dflt;
    pheap_off keep[KEEP] = {0};
    unsigned next = 0;
    char name[32];
    for (unsigned step = 0; in->n && step < 48; step++) {
        unsigned op = take(in) % 11, a = take(in);
        switch (op) {
        case 0: { size_t s = 8 + a * 9; remember(h, keep, &next, pheap_alloc(h, s), s); break; }
        case 1: { size_t s = 16385 + a * 3000; remember(h, keep, &next, pheap_alloc(h, s), s); break; }
        case 2: {
            pheap_off off = pick(in, keep, h);
            expect(pheap_free(h, off), "pheap_free");
            for (unsigned i = 0; i < KEEP; i++)
                if (keep[i] == off)
                    keep[i] = 0;
            break;
        }
        case 3:
            snprintf(name, sizeof(name), "r%u", a % 6);
            expect(pheap_root_set(h, name, keep[a % KEEP]), "pheap_root_set");
            break;
        case 4: {
            snprintf(name, sizeof(name), "fuzz-%u", a % 8);
            pheap_off off = pheap_alloc_named(h, name, 40 + a);
            if (off && pheap_lookup(h, name) != off)
                breach("name %s made but not found", name);
            break;
        }
        case 5:
            snprintf(name, sizeof(name), a & 1 ? "fuzz-%u" : "object-%u", a / 2 % 12);
            expect(pheap_free_named(h, name), "pheap_free_named");
            break;
        case 6: {
            pheap_off dest = keep[a % KEEP];
            if (dest) {
                pheap_off *w = pheap_direct(h, dest);
                *w = 0;
                expect(pheap_alloc_to(h, 24 + a * 100, w), "pheap_alloc_to");
                expect(pheap_free_from(h, w), "pheap_free_from");
            }
            break;
        }
        case 7: {
            if (!log_mode)
                break;
            int rc = pheap_tx_begin(h);
            expect(rc, "pheap_tx_begin");
            if (rc)
                break;
            pheap_off t = pheap_tx_alloc(h, 32 + a * 70);
            pheap_off dst = keep[a % KEEP];
            if (dst) {
                char *p = pheap_direct(h, dst);
                uint64_t v = t;
                expect(pheap_tx_add(h, p, 8), "pheap_tx_add");
                expect(pheap_tx_write(h, p + 8, &v, 8), "pheap_tx_write");
            }
            expect(pheap_tx_free(h, pick(in, keep, h)), "pheap_tx_free");
            rc = (a & 3) == 3 ? pheap_tx_abort(h) : pheap_tx_commit(h);
            expect(rc, "pheap_tx_commit/abort");
            if (pheap_tx_depth(h) != 0)
                breach("transaction still open after its commit or abort");
            break;
        }
        case 8: {
            pheap_off off = pick(in, keep, h);
            size_t u = pheap_usable_size(h, off);
            if (!u && !defined_error(pheap_errno()))
                breach("pheap_usable_size: undefined error %d", pheap_errno());
            break;
        }
        case 10: /* offline collection: traces every root's words, damaged ones too */
            if (a % 4 == 0) {
                pheap_gc_report rep;
                pheap_gc_options go = {.flags = a & 4 ? PHEAP_GC_DRY_RUN : 0, .threads = 1};
                expect(pheap_gc_ex(h, &go, &rep), "pheap_gc");
            }
            break;
        default: {
            struct pheap_stats st;
            expect(pheap_stats(h, &st), "pheap_stats");
            break;
        }
        }
    }
}

/* ---- the target --------------------------------------------------------- */

static const int open_errors[] = {PHEAP_ENOMEM, PHEAP_EIO, PHEAP_ENOTHEAP, PHEAP_ETRUNCATED,
                                  PHEAP_ECHECKSUM, PHEAP_EVERSION, PHEAP_ELAYOUT, PHEAP_EEMPTY,
                                  PHEAP_ECORRUPT, PHEAP_ENOTSUP};

static int open_checked(const char *path, unsigned flags, pheap **h, const char *seed)
{
    pheap_options o = {.flags = flags, .flush = PHEAP_FLUSH_NONE};
    int rc = pheap_open(path, &o, h);
    if (getenv("PHEAP_FUZZ_VERBOSE"))
        fprintf(stderr, "open (%s, flags %#x): %d %s\n", seed, flags, rc, rc ? pheap_errmsg() : "");
    if (rc == 0) {
        if (!*h)
            breach("pheap_open returned 0 and no handle");
        return 0;
    }
    for (unsigned i = 0; i < sizeof(open_errors) / sizeof(open_errors[0]); i++)
        if (rc == open_errors[i]) {
            if (!pheap_errmsg()[0])
                breach("pheap_open failed with %d and no message", rc);
            return rc;
        }
    breach("pheap_open (%s): unexpected result %d (%s)", seed, rc, pheap_errmsg());
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const ph_fuzz_image *seeds;
    unsigned nseeds = ph_fuzz_seeds(&seeds);
    if (!nseeds)
        abort();
    input in = {data, size};
    const ph_fuzz_image *img = &seeds[take(&in) % nseeds];
    unsigned flags = take(&in);
    char path[300];
    snprintf(path, sizeof(path), "%s/target.heap", ph_fuzz_dir());
    target t = {.fd = -1};
    write_image(&t, img, path);
    if (apply_patches(&t, &in) && (flags & 1))
        fix_checksum(&t);
    close(t.fd);

    pheap *h = NULL;
    if (flags & 6) { /* a read-only look first: it must not change the file */
        unsigned ro = flags & 2 ? PHEAP_RDONLY : PHEAP_SNAPSHOT;
        if (open_checked(path, ro, &h, img->what) == 0) {
            walk(h, 0);
            pheap_check_report rep;
            if (ro == PHEAP_SNAPSHOT && pheap_check(h, &rep) != 0 && rep.errors != rep.damaged_chunks &&
                !strstr(rep.first_error, "dangles") && !strstr(rep.first_error, "not a live block"))
                breach("pheap_check after a snapshot open (%s): %u errors, first: %s", img->what,
                       rep.errors, rep.first_error);
            pheap_close(h);
        }
    }
    if (open_checked(path, 0, &h, img->what) != 0) {
        unlink(path);
        return 0;
    }
    struct pheap_stats st;
    if (pheap_stats(h, &st) != 0)
        breach("pheap_stats: %s", pheap_errmsg());
    if (st.needs_recovery) {
        int rc = pheap_recover(h);
        if (rc == PHEAP_ECORRUPT) { /* damage the tracing met: refused, heap left as it was */
            if (!pheap_errmsg()[0])
                breach("pheap_recover failed with %d and no message", rc);
            pheap_close(h);
            unlink(path);
            return 0;
        }
        if (rc != 0)
            breach("pheap_recover (%s): %d (%s)", img->what, rc, pheap_errmsg());
    }
    check_settled(h, "after open", img->what);
    walk(h, 1);
    operate(h, &in, st.consistency == PHEAP_CONSISTENCY_LOG);
    check_settled(h, "after the operations", img->what);
    int rc = pheap_close(h);
    if (rc != 0)
        breach("pheap_close: %d (%s)", rc, pheap_errmsg());
    if (open_checked(path, 0, &h, img->what) != 0)
        breach("reopen after a clean close (%s): %s", img->what, pheap_errmsg());
    check_settled(h, "after the reopen", img->what);
    walk(h, 1);
    pheap_close(h);
    unlink(path);
    return 0;
}
