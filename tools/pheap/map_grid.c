/*
 * map_grid.c -- the heap map's grid (map.h): built from pheap_walk_chunks
 * run by run, with the totals its legend prints, the colours, the pixel
 * geometry and the legend's lines that the PNG and SVG renderings share.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "map.h"

#define CHUNK (64u * 1024u)
#define PAGE 4096u

static void progress(map_grid *g, uint64_t done, uint64_t total)
{
    unsigned pct = total ? (unsigned)(done * 100 / total) : 100;
    if (!g->progress || pct == g->shown_percent)
        return;
    g->shown_percent = pct;
    char bar[41];
    memset(bar, '#', pct * 40 / 100);
    memset(bar + pct * 40 / 100, '.', 40 - pct * 40 / 100);
    bar[40] = '\0';
    fprintf(stderr, "\rpheap map: [%s] %3u%%", bar, pct);
    fflush(stderr);
}

/* Square s shows the run that covers most of it. */
static void paint(map_grid *g, uint64_t from, uint64_t to, unsigned colour)
{
    uint64_t sqb = g->cpc * CHUNK / MAP_SQUARES;
    for (uint64_t s = from / sqb; s * sqb < to && s < g->ncells * MAP_SQUARES; s++) {
        uint64_t lo = s * sqb > from ? s * sqb : from, hi = (s + 1) * sqb < to ? (s + 1) * sqb : to;
        if (hi - lo > g->cover[s]) {
            g->cover[s] = hi - lo;
            g->sq[s] = (uint8_t)colour;
        }
    }
}

uint64_t map_slab_occupied(const pheap_chunk_run *r, const uint32_t *class_size)
{
    uint64_t used = r->blocks_used, size = class_size[r->cls];
    if (r->old_used && size) /* a morphed slab's old blocks, in blocks of its class */
        used += ((uint64_t)r->old_used * class_size[r->old_cls] + size - 1) / size;
    return used < r->blocks_total ? used : r->blocks_total;
}

static void add_slab(map_grid *g, const pheap_chunk_run *r, uint64_t rel)
{
    unsigned c = r->cls < MAP_CLASSES_MAX ? r->cls : MAP_CLASSES_MAX - 1;
    uint64_t occupied = r->old_cls < MAP_CLASSES_MAX ? map_slab_occupied(r, g->class_size)
                                                     : r->blocks_used;
    g->class_slabs[c]++;
    g->class_used[c] += r->blocks_used;
    g->class_total[c] += r->blocks_total;
    if (g->cpc == 1 && rel / CHUNK < g->ncells) {
        g->slab_used[rel / CHUNK] = (uint16_t)occupied;
        g->slab_total[rel / CHUNK] = (uint16_t)r->blocks_total;
        g->slab_cls[rel / CHUNK] = (uint8_t)c;
    }
    paint(g, rel, rel + r->bytes, map_slab_colour(c, occupied, r->blocks_total));
}

static int visit(void *arg, const pheap_chunk_run *r)
{
    map_grid *g = arg;
    progress(g, r->off + r->bytes, g->data_off + g->data_bytes);
    if (r->off < g->data_off) { /* a metadata region, or padding between two */
        if (strcmp(r->what, "padding") && g->nmeta < MAP_META_MAX)
            g->meta[g->nmeta++] = (map_region){r->what, r->bytes};
        return 0;
    }
    uint64_t rel = r->off - g->data_off;
    g->kind_bytes[r->kind] += r->bytes;
    switch (r->kind) {
    case PHEAP_CHUNK_SLAB:
        add_slab(g, r, rel);
        return 0;
    case PHEAP_CHUNK_META:
        g->meta_blocks += r->bytes;
        paint(g, rel, rel + r->bytes, MAP_META);
        return 0;
    case PHEAP_CHUNK_LARGE:
        g->large_runs++;
        paint(g, rel, rel + r->bytes, MAP_LARGE);
        return 0;
    case PHEAP_CHUNK_FREE:
        paint(g, rel, rel + r->bytes, MAP_FREE);
        return 0;
    case PHEAP_CHUNK_PUNCHED:
        paint(g, rel, rel + r->bytes, MAP_PUNCHED);
        return 0;
    default:
        paint(g, rel, rel + r->bytes, MAP_RESERVED);
        return 0;
    }
}

int map_build(map_grid *g, pheap *h, uint64_t max_cells, int show_progress)
{
    memset(g, 0, sizeof(*g));
    struct pheap_stats st;
    int rc = pheap_stats(h, &st);
    if (rc)
        return rc;
    g->data_off = st.data_offset;
    g->data_bytes = st.data_size;
    g->chunks = st.data_size / CHUNK;
    g->cpc = 1;
    while ((g->chunks + g->cpc - 1) / g->cpc > max_cells)
        g->cpc *= 2;
    g->ncells = (g->chunks + g->cpc - 1) / g->cpc;
    g->columns = g->ncells <= 4096 ? 64 : g->ncells <= 16384 ? 128 : 256;
    g->nclasses = pheap_class_count() < MAP_CLASSES_MAX ? pheap_class_count() : MAP_CLASSES_MAX;
    for (unsigned c = 0; c < g->nclasses; c++) {
        pheap_class_info ci;
        g->class_size[c] = pheap_stats_class(h, c, &ci) == 0 ? ci.block_size : 0;
    }
    g->sq = calloc(g->ncells * MAP_SQUARES + 1, 1);
    g->cover = calloc(g->ncells * MAP_SQUARES + 1, sizeof(*g->cover));
    g->slab_used = calloc(g->ncells + 1, sizeof(*g->slab_used));
    g->slab_total = calloc(g->ncells + 1, sizeof(*g->slab_total));
    g->slab_cls = calloc(g->ncells + 1, 1);
    if (!g->sq || !g->cover || !g->slab_used || !g->slab_total || !g->slab_cls)
        return PHEAP_ENOMEM;
    g->progress = show_progress;
    g->shown_percent = ~0u;
    rc = pheap_walk_chunks(h, visit, g);
    if (g->progress)
        fprintf(stderr, "\r%60s\r", "");
    return rc;
}

void map_free(map_grid *g)
{
    free(g->sq);
    free(g->cover);
    free(g->slab_used);
    free(g->slab_total);
    free(g->slab_cls);
    memset(g, 0, sizeof(*g));
}

unsigned map_slab_colour(unsigned cls, uint64_t used, uint64_t total)
{
    unsigned level = used == 0 || total == 0 ? 0 : 1 + (unsigned)((4 * used - 1) / total);
    if (level >= MAP_LEVELS)
        level = MAP_LEVELS - 1;
    return MAP_SLAB_BASE + cls * MAP_LEVELS + level;
}

/* Hue from the golden angle, so that neighbouring classes differ; the
 * fuller the slab, the darker. */
static uint32_t slab_rgb(unsigned cls, unsigned level)
{
    static const double light[MAP_LEVELS] = {0.90, 0.76, 0.62, 0.48, 0.34};
    double hue = (double)(cls * 137508u / 1000u % 360u) / 60.0, l = light[level], s = 0.72;
    int sector = (int)hue;
    double d = (double)(sector % 2) + (hue - sector) - 1; /* in [-1, 1) */
    double c = (1 - (2 * l - 1 < 0 ? 1 - 2 * l : 2 * l - 1)) * s;
    double x = c * (1 - (d < 0 ? -d : d)), m = l - c / 2;
    double rgb[6][3] = {{c, x, 0}, {x, c, 0}, {0, c, x}, {0, x, c}, {x, 0, c}, {c, 0, x}};
    const double *v = rgb[sector % 6];
    uint32_t out = 0;
    for (int i = 0; i < 3; i++)
        out = out << 8 | (uint32_t)((v[i] + m) * 255 + 0.5);
    return out;
}

uint32_t map_rgb(unsigned i)
{
    static const uint32_t fixed[MAP_SLAB_BASE] = {
        0xffffff, /* background */
        0x000000, /* ink */
        0x5a5a78, /* metadata: slate */
        0x282828, /* large blocks: near black */
        0xd2d2d2, /* free, stored: light grey */
        0xfff0c0, /* free, no storage: cream */
        0xff8c00, /* reserved: orange */
        0xf0f0f0,
    };
    if (i < MAP_SLAB_BASE)
        return fixed[i];
    i -= MAP_SLAB_BASE;
    return slab_rgb(i / MAP_LEVELS, i % MAP_LEVELS);
}

/* ---- geometry and legend ------------------------------------------------- */

#define LEGEND_FIXED 9u /* lines before the classes */

void map_layout(const map_grid *g, map_geometry *geo)
{
    unsigned classes = 0;
    for (unsigned c = 0; c < g->nclasses; c++)
        classes += g->class_slabs[c] != 0;
    geo->zoom = g->columns == 64 ? 3 : g->columns == 128 ? 2 : 1;
    geo->pitch = 4 * geo->zoom + 1;
    geo->margin = 8;
    geo->rows = 1 + (unsigned)((g->ncells + g->columns - 1) / g->columns);
    geo->width = 2 * geo->margin + g->columns * geo->pitch - 1;
    geo->line_h = 11;
    geo->legend_y = geo->margin + geo->rows * geo->pitch - 1 + 10;
    geo->legend_lines = LEGEND_FIXED + classes;
    geo->height = geo->legend_y + geo->legend_lines * geo->line_h + geo->margin;
}

static const char *mib(char *buf, uint64_t v)
{
    if (v >= (1ull << 30))
        sprintf(buf, "%.1f GiB", (double)v / (1ull << 30));
    else if (v >= (1u << 20))
        sprintf(buf, "%.1f MiB", (double)v / (1u << 20));
    else
        sprintf(buf, "%.1f KiB", (double)v / 1024);
    return buf;
}

/* The class shown on legend line i (LEGEND_FIXED + k: the k-th class with
 * slabs), or -1. */
static int class_of_line(const map_grid *g, unsigned i)
{
    unsigned k = i - LEGEND_FIXED;
    for (unsigned c = 0; c < g->nclasses; c++)
        if (g->class_slabs[c] && k-- == 0)
            return (int)c;
    return -1;
}

void map_legend_line(const map_grid *g, const char *path, unsigned i, char *buf, size_t len,
                     unsigned *sw, unsigned *nsw)
{
    char a[32], b[32];
    uint64_t meta = 0;
    for (unsigned k = 0; k < g->nmeta; k++)
        meta += g->meta[k].bytes;
    *nsw = 0;
    switch (i) {
    case 0:
        snprintf(buf, len, "pheap map of %s", path);
        return;
    case 1:
        snprintf(buf, len, "%s of data, %llu chunks of 64 KiB. a cell: %llu chunk%s, a square: %s",
                 mib(a, g->data_bytes), (unsigned long long)g->chunks, (unsigned long long)g->cpc,
                 g->cpc == 1 ? "" : "s", mib(b, g->cpc * CHUNK / MAP_SQUARES));
        return;
    case 2:
        snprintf(buf, len, "row 1: the %u metadata regions (%s), one cell each. data from row 2",
                 g->nmeta, mib(a, meta));
        return;
    case 3:
        snprintf(buf, len, "metadata blocks in the data region: %s", mib(a, g->meta_blocks));
        sw[(*nsw)++] = MAP_META;
        return;
    case 4:
        snprintf(buf, len, "large blocks: %llu, %s", (unsigned long long)g->large_runs,
                 mib(a, g->kind_bytes[PHEAP_CHUNK_LARGE]));
        sw[(*nsw)++] = MAP_LARGE;
        return;
    case 5:
        snprintf(buf, len, "free, stored: %s", mib(a, g->kind_bytes[PHEAP_CHUNK_FREE]));
        sw[(*nsw)++] = MAP_FREE;
        return;
    case 6:
        snprintf(buf, len, "free, no storage (punched, or never written): %s",
                 mib(a, g->kind_bytes[PHEAP_CHUNK_PUNCHED]));
        sw[(*nsw)++] = MAP_PUNCHED;
        return;
    case 7:
        snprintf(buf, len, "reserved, not yet committed: %s",
                 mib(a, g->kind_bytes[PHEAP_CHUNK_RESERVED]));
        sw[(*nsw)++] = MAP_RESERVED;
        return;
    case 8:
        snprintf(buf, len, "slabs: a colour (text: a character) per size class, darker when fuller");
        return;
    default: {
        int c = class_of_line(g, i);
        if (c < 0) {
            buf[0] = '\0';
            return;
        }
        for (unsigned l = 0; l < MAP_LEVELS; l++)
            sw[(*nsw)++] = MAP_SLAB_BASE + (unsigned)c * MAP_LEVELS + l;
        uint64_t used = g->class_used[c], total = g->class_total[c];
        snprintf(buf, len, "class %d, %u B: %llu slab%s, %llu of %llu blocks used (%.1f%%)", c,
                 g->class_size[c], (unsigned long long)g->class_slabs[c],
                 g->class_slabs[c] == 1 ? "" : "s", (unsigned long long)used,
                 (unsigned long long)total, total ? 100.0 * (double)used / (double)total : 0.0);
    }
    }
}
