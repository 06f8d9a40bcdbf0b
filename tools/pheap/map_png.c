/*
 * map_png.c -- the heap map as a PNG: the grid and legend drawn into a
 * raster of palette indices, written as an 8-bit palette PNG whose image
 * data is a zlib stream of stored (uncompressed) deflate blocks -- no
 * compression library needed -- with its own CRC-32 and Adler-32.
 */
#include <stdlib.h>
#include <string.h>

#include "map.h"

static uint32_t crc_table[256];

static void crc_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

static uint32_t crc_update(uint32_t crc, const uint8_t *p, size_t n)
{
    while (n--)
        crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* One chunk: length, type, data, CRC-32 of type and data. */
static int chunk(FILE *f, const char *type, const uint8_t *data, size_t len)
{
    uint8_t head[8], tail[4];
    put32(head, (uint32_t)len);
    memcpy(head + 4, type, 4);
    uint32_t crc = crc_update(0xffffffffu, head + 4, 4);
    crc = crc_update(crc, data, len) ^ 0xffffffffu;
    put32(tail, crc);
    return fwrite(head, 1, 8, f) == 8 && (len == 0 || fwrite(data, 1, len, f) == len) &&
                   fwrite(tail, 1, 4, f) == 4 ? 0 : -1;
}

/* The zlib stream of `raw` in stored blocks of at most 65535 bytes. */
static uint8_t *zlib_stored(const uint8_t *raw, size_t n, size_t *out_len)
{
    size_t blocks = n / 65535 + 1;
    uint8_t *z = malloc(2 + n + 5 * blocks + 4), *p = z;
    if (!z)
        return NULL;
    *p++ = 0x78; /* deflate, 32 KiB window */
    *p++ = 0x01; /* no preset dictionary, fastest; (0x78 << 8 | 0x01) % 31 == 0 */
    uint32_t a = 1, b = 0;
    size_t at = 0;
    do {
        size_t len = n - at < 65535 ? n - at : 65535;
        *p++ = at + len == n; /* BFINAL on the last, BTYPE 00: stored */
        p[0] = (uint8_t)len;
        p[1] = (uint8_t)(len >> 8);
        p[2] = (uint8_t)~len;
        p[3] = (uint8_t)(~len >> 8);
        memcpy(p + 4, raw + at, len);
        p += 4 + len;
        for (size_t i = at; i < at + len; i++) {
            a = (a + raw[i]) % 65521;
            b = (b + a) % 65521;
        }
        at += len;
    } while (at < n);
    put32(p, b << 16 | a);
    *out_len = (size_t)(p + 4 - z);
    return z;
}

int map_png_encode(FILE *f, unsigned w, unsigned h, const uint8_t *px, const uint32_t *palette,
                   unsigned n, const char *text_key, const char *text)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    crc_init();
    uint8_t ihdr[13], plte[256 * 3];
    put32(ihdr, w);
    put32(ihdr + 4, h);
    ihdr[8] = 8;  /* bits per index */
    ihdr[9] = 3;  /* palette colour */
    ihdr[10] = ihdr[11] = ihdr[12] = 0; /* deflate, filter method 0, no interlace */
    for (unsigned i = 0; i < n; i++) {
        plte[3 * i] = (uint8_t)(palette[i] >> 16);
        plte[3 * i + 1] = (uint8_t)(palette[i] >> 8);
        plte[3 * i + 2] = (uint8_t)palette[i];
    }
    /* Scanlines: filter type 0 (none), then the row's indices. */
    size_t row = (size_t)w + 1, raw_len = row * h, z_len = 0;
    uint8_t *raw = malloc(raw_len), *z = NULL;
    size_t klen = strlen(text_key), tlen = strlen(text);
    uint8_t *t = malloc(klen + 1 + tlen);
    int rc = -1;
    if (raw && t) {
        for (unsigned y = 0; y < h; y++) {
            raw[y * row] = 0;
            memcpy(raw + y * row + 1, px + (size_t)y * w, w);
        }
        z = zlib_stored(raw, raw_len, &z_len);
        memcpy(t, text_key, klen + 1);
        memcpy(t + klen + 1, text, tlen);
    }
    if (z && fwrite(sig, 1, 8, f) == 8 && !chunk(f, "IHDR", ihdr, 13) &&
        !chunk(f, "PLTE", plte, 3 * n) && !chunk(f, "tEXt", t, klen + 1 + tlen) &&
        !chunk(f, "IDAT", z, z_len) && !chunk(f, "IEND", NULL, 0))
        rc = 0;
    free(raw);
    free(z);
    free(t);
    return rc;
}

static void fill(uint8_t *px, unsigned width, unsigned x, unsigned y, unsigned w, unsigned h,
                 uint8_t colour)
{
    for (unsigned r = 0; r < h; r++)
        memset(px + (size_t)(y + r) * width + x, colour, w);
}

static void draw_grid(const map_grid *g, const map_geometry *geo, uint8_t *px)
{
    unsigned z = geo->zoom, cell = 4 * z;
    for (unsigned i = 0; i < g->nmeta; i++)
        fill(px, geo->width, geo->margin + i * geo->pitch, geo->margin, cell, cell, MAP_META);
    for (uint64_t i = 0; i < g->ncells; i++) {
        unsigned x0 = geo->margin + (unsigned)(i % g->columns) * geo->pitch;
        unsigned y0 = geo->margin + (unsigned)(1 + i / g->columns) * geo->pitch;
        for (unsigned j = 0; j < MAP_SQUARES; j++)
            fill(px, geo->width, x0 + (j % 4) * z, y0 + (j / 4) * z, z, z,
                 g->sq[i * MAP_SQUARES + j]);
    }
}

static void draw_legend(const map_grid *g, const map_geometry *geo, const char *path, uint8_t *px)
{
    char text[512];
    unsigned sw[MAP_SWATCHES_MAX], nsw;
    for (unsigned i = 0; i < geo->legend_lines; i++) {
        unsigned y = geo->legend_y + i * geo->line_h;
        map_legend_line(g, path, i, text, sizeof(text), sw, &nsw);
        for (unsigned k = 0; k < nsw; k++)
            fill(px, geo->width, geo->margin + k * 9, y, 7, 7, (uint8_t)sw[k]);
        map_font_draw(px, geo->width, geo->height, geo->margin + MAP_SWATCHES_MAX * 9 + 4, y, text,
                      MAP_INK);
    }
}

int map_write_png(const map_grid *g, const char *path, FILE *f)
{
    map_geometry geo;
    map_layout(g, &geo);
    uint8_t *px = calloc((size_t)geo.width * geo.height, 1);
    if (!px)
        return -1;
    draw_grid(g, &geo, px);
    draw_legend(g, &geo, path, px);
    uint32_t palette[MAP_COLOURS];
    for (unsigned i = 0; i < MAP_COLOURS; i++)
        palette[i] = map_rgb(i);
    /* The geometry, for programs that read the picture back. */
    char text[256];
    snprintf(text, sizeof(text),
             "columns=%u rows=%u cell=%u pitch=%u margin=%u chunks_per_cell=%llu data_cells=%llu "
             "meta_cells=%u",
             g->columns, geo.rows, 4 * geo.zoom, geo.pitch, geo.margin,
             (unsigned long long)g->cpc, (unsigned long long)g->ncells, g->nmeta);
    int rc = map_png_encode(f, geo.width, geo.height, px, palette, MAP_COLOURS, "pheap-map", text);
    free(px);
    return rc;
}
