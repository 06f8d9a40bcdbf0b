/*
 * cli_map.c -- `pheap map PATH [-o FILE] [--text]`: the PNG decoded here
 * (signature, chunk CRCs, IHDR, palette, the stored deflate blocks and
 * their Adler-32) with the size the heap's chunks give and, square by
 * square, the colours pheap_walk_chunks, pheap_stats and pheap_stats_class
 * predict; the SVG and the text form; a grown heap, a GC heap, one held
 * by another process, one large enough for two chunks a cell; the heap
 * file untouched; and the refusals (no heap, a truncated heap, an
 * unwritable or unknown output, bad usage), each leaving no file behind.
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define run(...) ph_test_run_tool(PHEAP_TOOL, __VA_ARGS__)

/* The picture's documented geometry (docs/HEAPMAP.md). */
#define MARGIN 8u
#define LINE_H 11u
#define LEGEND_FIXED 9u
#define SLAB_BASE 8u
#define LEVELS 5u
#define PAGE 4096u
#define CHUNK 65536u

enum { BG = 0, META = 2, LARGE = 3, FREE = 4, PUNCHED = 5, RESERVED = 6 };

/* ---- a decoder for the PNGs pheap writes: palette, stored blocks ---- */

typedef struct png {
    unsigned w, h, npal;
    uint8_t *px;              /* w * h palette indices */
    char text[512];           /* the tEXt chunk's value */
} png;

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* CRC-32 (ISO 3309), bit by bit. */
static uint32_t crc32_bits(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
    }
    return ~c;
}

static uint8_t *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    uint8_t *b = malloc(*n + 1);
    if (b && fread(b, 1, *n, f) != *n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

/* Inflates a zlib stream of stored blocks, checking LEN/NLEN and the
 * Adler-32; 0 or -1. */
static int inflate_stored(const uint8_t *z, size_t n, uint8_t *out, size_t want)
{
    if (n < 6 || (z[0] & 0x0f) != 8 || ((unsigned)z[0] << 8 | z[1]) % 31 || (z[1] & 0x20))
        return -1;
    size_t at = 2, got = 0;
    for (int last = 0; !last;) {
        if (at + 5 > n || (z[at] >> 1 & 3) != 0) /* BTYPE 00 only */
            return -1;
        last = z[at] & 1;
        unsigned len = z[at + 1] | (unsigned)z[at + 2] << 8, nlen = z[at + 3] | (unsigned)z[at + 4] << 8;
        if ((len ^ 0xffffu) != nlen || at + 5 + len > n || got + len > want)
            return -1;
        memcpy(out + got, z + at + 5, len);
        got += len;
        at += 5 + len;
    }
    uint32_t a = 1, b = 0;
    for (size_t i = 0; i < got; i++) {
        a = (a + out[i]) % 65521;
        b = (b + a) % 65521;
    }
    return got == want && at + 4 == n && be32(z + at) == (b << 16 | a) ? 0 : -1;
}

/* 0 with *p filled, or -1 with the test failed naming what is wrong. */
static int png_decode(const char *path, png *p)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    memset(p, 0, sizeof(*p));
    size_t n, at = 8, zn = 0;
    uint8_t *b = read_all(path, &n), *z = NULL;
    const char *bad = NULL;
    int seen_end = 0, seen_hdr = 0;
    if (!b || n < 8 || memcmp(b, sig, 8))
        bad = "signature";
    while (!bad && !seen_end && at + 12 <= n) {
        uint32_t len = be32(b + at);
        const uint8_t *type = b + at + 4, *data = b + at + 8;
        if (at + 12 + len > n || crc32_bits(type, 4 + len) != be32(data + len)) {
            bad = "chunk CRC";
            break;
        }
        if (!memcmp(type, "IHDR", 4)) {
            p->w = be32(data);
            p->h = be32(data + 4);
            seen_hdr = len == 13 && at == 8;
            if (!seen_hdr || data[8] != 8 || data[9] != 3 || data[10] || data[11] || data[12])
                bad = "IHDR (8-bit palette, deflate, no interlace)";
        } else if (!memcmp(type, "PLTE", 4)) {
            p->npal = len / 3;
        } else if (!memcmp(type, "tEXt", 4)) {
            size_t k = strlen((const char *)data) + 1;
            snprintf(p->text, sizeof(p->text), "%.*s", (int)(len - k), (const char *)data + k);
        } else if (!memcmp(type, "IDAT", 4)) {
            uint8_t *grown = realloc(z, zn + len + 1);
            if (!grown)
                break;
            z = grown;
            memcpy(z + zn, data, len);
            zn += len;
        } else if (!memcmp(type, "IEND", 4)) {
            seen_end = 1;
        }
        at += 12 + len;
    }
    size_t raw_len = ((size_t)p->w + 1) * p->h;
    uint8_t *raw = bad || !seen_end ? NULL : malloc(raw_len + 1);
    if (!bad && (!seen_end || !seen_hdr || !p->npal))
        bad = "chunks (IHDR, PLTE, IDAT, IEND)";
    else if (!bad && (!raw || inflate_stored(z, zn, raw, raw_len)))
        bad = "image data (stored deflate blocks, Adler-32)";
    if (!bad && (p->px = malloc((size_t)p->w * p->h))) {
        for (unsigned y = 0; y < p->h && !bad; y++) {
            if (raw[y * (p->w + 1)] != 0)
                bad = "filter type";
            memcpy(p->px + (size_t)y * p->w, raw + y * (p->w + 1) + 1, p->w);
        }
    }
    free(b);
    free(z);
    free(raw);
    if (bad) {
        ph_test_fail(__FILE__, __LINE__, "%s: bad PNG: %s", path, bad);
        free(p->px);
        p->px = NULL;
        return -1;
    }
    return 0;
}

/* ---- what the library says the picture must show ---- */

typedef struct expect {
    struct pheap_stats st;
    unsigned nmeta;            /* metadata regions (row 0) */
    uint64_t chunks, cpc, cells;
    unsigned columns, classes;
    uint64_t pages[8];         /* data pages per colour of the fixed kinds */
    uint64_t slab_pages[64][LEVELS];
    uint64_t slabs[64];        /* per class, from pheap_stats_class */
    uint32_t size[64];         /* ... and its block size */
} expect;

static int visit(void *arg, const pheap_chunk_run *r)
{
    expect *e = arg;
    if (r->off < e->st.data_offset) {
        e->nmeta += strcmp(r->what, "padding") != 0;
    } else if (r->kind == PHEAP_CHUNK_SLAB) {
        unsigned u = r->blocks_used, t = r->blocks_total;
        if (r->old_used) { /* a morphed slab: its old blocks in blocks of its class */
            u += (unsigned)((r->old_used * (uint64_t)e->size[r->old_cls] + e->size[r->cls] - 1) /
                            e->size[r->cls]);
            u = u < t ? u : t;
        }
        unsigned level = u == 0 ? 0 : 1 + (4 * u - 1) / t;
        e->slab_pages[r->cls][level > 4 ? 4 : level] += r->bytes / PAGE;
    } else {
        static const unsigned colour[] = {0, META, 0, LARGE, FREE, PUNCHED, RESERVED};
        e->pages[colour[r->kind]] += r->bytes / PAGE;
    }
    return 0;
}

static void expected(const char *path, uint64_t max_cells, expect *e)
{
    memset(e, 0, sizeof(*e));
    pheap_options o = {.flags = PHEAP_RDONLY};
    pheap *h = ph_test_open(path, &o);
    REQUIRE(h);
    REQUIRE_OK(pheap_stats(h, &e->st));
    for (unsigned c = 0; c < pheap_class_count(); c++) {
        pheap_class_info ci;
        REQUIRE_OK(pheap_stats_class(h, c, &ci));
        e->slabs[c] = ci.slabs;
        e->size[c] = ci.block_size;
        e->classes += ci.slabs != 0;
    }
    REQUIRE_OK(pheap_walk_chunks(h, visit, e));
    pheap_close(h);
    e->chunks = e->st.data_size / CHUNK;
    for (e->cpc = 1; (e->chunks + e->cpc - 1) / e->cpc > max_cells; e->cpc *= 2)
        ;
    e->cells = (e->chunks + e->cpc - 1) / e->cpc;
    e->columns = e->cells <= 4096 ? 64 : e->cells <= 16384 ? 128 : 256;
}

/* The PNG's size and, square by square, its colours against `e`. */
static void check_png(const char *file, const expect *e)
{
    png p;
    REQUIRE(png_decode(file, &p) == 0);
    unsigned zoom = e->columns == 64 ? 3 : e->columns == 128 ? 2 : 1, pitch = 4 * zoom + 1;
    unsigned rows = 1 + (unsigned)((e->cells + e->columns - 1) / e->columns);
    unsigned legend_y = MARGIN + rows * pitch - 1 + 10;
    CHECK_EQ(p.w, 2 * MARGIN + e->columns * pitch - 1);
    CHECK_EQ(p.h, legend_y + (LEGEND_FIXED + e->classes) * LINE_H + MARGIN);
    CHECK(p.npal >= SLAB_BASE + 37 * LEVELS && p.npal <= 256);
    char geometry[128];
    snprintf(geometry, sizeof(geometry), "columns=%u rows=%u", e->columns, rows);
    CHECK(strstr(p.text, geometry) != NULL);
    uint64_t count[256] = {0};
    for (unsigned y = 0; y < MARGIN + rows * pitch && y < p.h; y++)
        for (unsigned x = 0; x < p.w; x++)
            count[p.px[(size_t)y * p.w + x]]++;
    /* A square is a page (zoom x zoom pixels) when a cell is one chunk. */
    uint64_t px_page = (uint64_t)zoom * zoom / e->cpc;
    if (e->cpc == 1) {
        CHECK_EQ(count[META], (e->nmeta * 16 + e->pages[META]) * px_page);
        CHECK_EQ(count[LARGE], e->pages[LARGE] * px_page);
        CHECK_EQ(count[LARGE] + count[META] - e->nmeta * 16 * px_page,
                 e->st.large_bytes / PAGE * px_page);
        CHECK_EQ(count[FREE], e->pages[FREE] * px_page);
        CHECK_EQ(count[PUNCHED], e->pages[PUNCHED] * px_page);
        CHECK_EQ(count[FREE] + count[PUNCHED], e->st.free_bytes / PAGE * px_page);
        CHECK_EQ(count[RESERVED], 0);
    }
    uint64_t slab_px = 0, drawn = 0;
    for (unsigned c = 0; c < 37; c++) {
        uint64_t cls_px = 0;
        for (unsigned l = 0; l < LEVELS; l++) {
            uint64_t n = count[SLAB_BASE + c * LEVELS + l];
            cls_px += n;
            if (e->cpc == 1)
                CHECK_EQ(n, e->slab_pages[c][l] * px_page);
        }
        if (e->cpc == 1)
            CHECK_EQ(cls_px, e->slabs[c] * 16 * px_page); /* cells of class c == its slabs */
        slab_px += cls_px;
    }
    for (unsigned i = 1; i < 256; i++)
        drawn += count[i];
    CHECK_EQ(drawn, (e->nmeta + e->chunks / e->cpc) * 16 * zoom * zoom +
                        e->chunks % e->cpc * 16 * zoom * zoom / e->cpc);
    CHECK(slab_px > 0 || e->st.slabs == 0);
    free(p.px);
}

/* ---- the SVG and the text ---- */

static size_t occurrences(const char *s, const char *what)
{
    size_t n = 0;
    for (const char *p = s; (p = strstr(p, what)); p += strlen(what))
        n++;
    return n;
}

static void check_svg(const char *file, const expect *e)
{
    size_t n;
    char *s = (char *)read_all(file, &n);
    REQUIRE(s);
    s[n] = '\0';
    unsigned zoom = e->columns == 64 ? 3 : e->columns == 128 ? 2 : 1;
    char width[64];
    snprintf(width, sizeof(width), "width=\"%u\"", 2 * MARGIN + e->columns * (4 * zoom + 1) - 1);
    CHECK(!strncmp(s, "<?xml", 5) && strstr(s, "<svg") && strstr(s, width));
    CHECK(strstr(s, "</svg>\n") && s[n - 1] == '\n');
    CHECK_EQ(occurrences(s, ": slab of class "), e->st.slabs);
    CHECK_EQ(occurrences(s, "<title>header: "), 1);
    free(s);
}

/* Cells of the text grid (rows after the 14-character offsets) holding c. */
static unsigned text_cells(const char *out, char c)
{
    unsigned n = 0;
    for (const char *line = out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len < 15 || line[12] != ' ' || line[13] != ' ' || line[11] < '0' || line[11] > '9')
            continue;
        for (size_t i = 14; i < len; i++)
            n += line[i] == c;
    }
    return n;
}

static void check_text(const char *out, const expect *e)
{
    static const char class_chars[] = "0123456789abcdefghijklmnopqrstuvwxyzA";
    CHECK(!strncmp(out, "pheap map of ", 13));
    char row0[64];
    snprintf(row0, sizeof(row0), "\n%12s  ", "0");
    const char *r0 = strstr(out, row0);
    REQUIRE(r0);
    CHECK_EQ(strspn(r0 + strlen(row0), "M"), e->nmeta);
    CHECK_EQ(r0[strlen(row0) + e->nmeta], '\n');
    unsigned total = 0;
    for (unsigned c = 0; c < 37; c++) {
        if (e->cpc == 1)
            CHECK_EQ(text_cells(out, class_chars[c]), e->slabs[c]);
        total += text_cells(out, class_chars[c]);
    }
    const char *kinds = "M#._r";
    for (const char *k = kinds; *k; k++)
        total += text_cells(out, *k);
    CHECK_EQ(total, e->nmeta + e->cells);
    CHECK(strstr(out, "\033[") == NULL); /* no colour into a file or pipe */
}

/* ---- the tests ---- */

/* A fresh empty directory for outputs: what a failed run leaves shows. */
static const char *out_dir(const char *name)
{
    const char *d = ph_test_path(name);
    mkdir(d, 0700);
    return d;
}

static unsigned dir_entries(const char *dir)
{
    unsigned n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d)
        closedir(d);
    return n;
}

static void check_all_forms(const char *heap, const char *dir)
{
    char png_file[512], svg_file[512], txt_file[512];
    snprintf(png_file, sizeof(png_file), "%s/map.png", dir);
    snprintf(svg_file, sizeof(svg_file), "%s/map.SVG", dir);
    snprintf(txt_file, sizeof(txt_file), "%s/map.txt", dir);
    expect e, et;
    expected(heap, 65536, &e);
    expected(heap, 4096, &et);
    ph_tool_result *r = run("map", heap, "-o", png_file, NULL);
    CHECK_TOOL(r->code == 0 && r->out_len == 0, r);
    check_png(png_file, &e);
    r = run("map", heap, "-o", svg_file, NULL);
    CHECK_TOOL(r->code == 0, r);
    check_svg(svg_file, &e);
    r = run("map", heap, NULL);
    CHECK_TOOL(r->code == 0, r);
    check_text(r->out, &et);
    char *printed = strdup(r->out);
    r = run("map", heap, "-o", txt_file, "--text", NULL);
    CHECK_TOOL(r->code == 0 && printed && !strcmp(r->out, printed), r);
    size_t n;
    char *written = (char *)read_all(txt_file, &n);
    CHECK(written && printed && n == strlen(printed) && !memcmp(written, printed, n));
    free(written);
    free(printed);
    struct stat st;
    mode_t mask = umask(0);
    umask(mask);
    CHECK(stat(png_file, &st) == 0 && (st.st_mode & 0777) == (0666 & ~mask));
}

/* The known shape (grown, punched, slabs of several classes), in both
 * consistency modes; the heap file is not written. */
TEST(shapes)
{
    for (unsigned mode = 0; mode < 2; mode++) {
        const char *heap = ph_test_path(mode ? "map-gc.heap" : "map-log.heap");
        REQUIRE(ph_test_map_shape_file(heap, mode ? PHEAP_CONSISTENCY_GC : PHEAP_CONSISTENCY_LOG) == 0);
        char copy[512];
        snprintf(copy, sizeof(copy), "%s.before", heap);
        REQUIRE(ph_test_copy_file(heap, copy) == 0);
        check_all_forms(heap, out_dir(mode ? "out-gc" : "out-log"));
        size_t a, b;
        uint8_t *x = read_all(heap, &a), *y = read_all(copy, &b);
        CHECK(x && y && a == b && !memcmp(x, y, a)); /* untouched */
        free(x);
        free(y);
        pheap *h = ph_test_open(heap, NULL); /* and usable: the map agrees with a read-write open */
        REQUIRE(h);
        ph_test_map_check(h);
        CHECK(pheap_alloc(h, 100) != 0);
        pheap_check_report rep;
        CHECK_EQ(pheap_check(h, &rep), 0);
        REQUIRE_OK(pheap_close(h));
    }
}

/* More chunks than the text form's cells: two chunks a character; the
 * images get 128 columns of squares of two pixels; the progress bar. */
TEST(large_heap)
{
    const char *heap = ph_test_path("map-large.heap");
    pheap *h = ph_test_create(heap, 300u << 20);
    REQUIRE(h);
    pheap_off big = pheap_alloc(h, 100u << 20);
    REQUIRE(big);
    for (unsigned i = 0; i < 5000; i++)
        REQUIRE(pheap_alloc(h, 1000));
    REQUIRE_OK(pheap_close(h));
    const char *dir = out_dir("out-large");
    expect e, et;
    expected(heap, 65536, &e);
    expected(heap, 4096, &et);
    CHECK_EQ(e.columns, 128);
    CHECK_EQ(et.cpc, 2);
    char file[512];
    snprintf(file, sizeof(file), "%s/large.png", dir);
    ph_tool_result *r = run("map", heap, "-o", file, "--progress", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->err, "100%"), r);
    check_png(file, &e);
    r = run("map", heap, "--text", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "a cell: 2 chunks"), r);
    check_text(r->out, &et);
}

/* A heap another process holds read-write: pictured from a snapshot. */
TEST(held_elsewhere)
{
    const char *heap = ph_test_path("map-held.heap");
    REQUIRE(ph_test_map_shape_file(heap, PHEAP_CONSISTENCY_LOG) == 0);
    int pid = ph_test_hold(heap, 0);
    REQUIRE(pid > 0);
    char file[512];
    snprintf(file, sizeof(file), "%s/held.png", out_dir("out-held"));
    ph_tool_result *r = run("map", heap, "-o", file, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->err, "snapshot"), r);
    png p;
    if (png_decode(file, &p) == 0)
        free(p.px);
    CHECK_EQ(ph_test_release(pid), 0);
}

/* Refusals: a clear message, a nonzero exit, no file left behind. */
TEST(refused)
{
    const char *dir = out_dir("out-refused");
    const char *heap = ph_test_path("map-ok.heap");
    pheap *h = ph_test_create(heap, 1u << 20);
    REQUIRE(h);
    REQUIRE_OK(pheap_close(h));
    char out[512], bad[512];
    snprintf(out, sizeof(out), "%s/x.png", dir);

    const char *text = ph_test_path("not-a-heap.txt");
    FILE *f = fopen(text, "w");
    REQUIRE(f);
    for (int i = 0; i < 2000; i++)
        fputs("not a heap\n", f);
    fclose(f);
    ph_tool_result *r = run("map", text, "-o", out, NULL);
    CHECK_TOOL(r->code == 1 && strstr(r->err, "not-a-heap.txt"), r);

    const char *cut = ph_test_path("truncated.heap");
    REQUIRE(ph_test_copy_file(heap, cut) == 0);
    REQUIRE(truncate(cut, 3u << 20) == 0);
    r = run("map", cut, "-o", out, NULL);
    CHECK_TOOL(r->code == 1 && strstr(r->err, "truncated.heap"), r);

    r = run("map", ph_test_path("missing.heap"), "-o", out, NULL);
    CHECK_TOOL(r->code == 1 && strstr(r->err, "missing.heap"), r);

    snprintf(bad, sizeof(bad), "%s/no/such/dir/x.png", dir);
    r = run("map", heap, "-o", bad, NULL);
    CHECK_TOOL(r->code == 1 && strstr(r->err, "cannot write") && strstr(r->err, "x.png"), r);

    snprintf(bad, sizeof(bad), "%s/adir.svg", dir);
    REQUIRE(mkdir(bad, 0700) == 0);
    r = run("map", heap, "-o", bad, NULL);
    CHECK_TOOL(r->code == 1 && strstr(r->err, "directory"), r);
    rmdir(bad);

    snprintf(bad, sizeof(bad), "%s/x.jpg", dir);
    r = run("map", heap, "-o", bad, NULL);
    CHECK_TOOL(r->code == 2 && strstr(r->err, ".png, .svg or .txt"), r);
    snprintf(bad, sizeof(bad), "%s/png", dir);
    r = run("map", heap, "-o", bad, NULL);
    CHECK_TOOL(r->code == 2 && strstr(r->err, "format"), r);

    r = run("map", heap, "-o", NULL);
    CHECK_TOOL(r->code == 2 && strstr(r->err, "-o needs"), r);
    r = run("map", heap, "--bogus", NULL);
    CHECK_TOOL(r->code == 2 && strstr(r->err, "--bogus"), r);
    r = run("map", NULL);
    CHECK_TOOL(r->code == 2 && strstr(r->err, "usage: pheap map"), r);
    r = run("map", "--help", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "usage: pheap map") && strstr(r->out, "-o FILE"), r);

    CHECK_EQ(dir_entries(dir), 0); /* no picture, no temporary file */
}
