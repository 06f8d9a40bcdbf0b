/*
 * map.h -- the heap map of `pheap map`: a grid of cells built from
 * pheap_walk_chunks, and its three renderings (PNG, SVG, text).
 *
 * Geometry.  Row 0 holds one cell per metadata region (header, roots,
 * ...), whatever its size.  The data region follows from row 1 on, in
 * offset order, `columns` cells a row; a cell is `cpc` chunks (1 unless
 * the heap has more chunks than the rendering's cell limit; then the
 * smallest power of two under it) and is drawn as 4 x 4 squares, square
 * j (row-major) being the j-th sixteenth of the cell: one 4 KiB page when
 * cpc is 1.  A square shows the run that covers most of it.
 */
#ifndef PHEAP_CLI_MAP_H
#define PHEAP_CLI_MAP_H

#include <stdint.h>
#include <stdio.h>

#include "pheap.h"

/* Palette indices (the PNG is palette-indexed with these, the SVG and the
 * text use the same colours).  Slab class c with occupancy level l is
 * MAP_SLAB_BASE + c * MAP_LEVELS + l. */
enum {
    MAP_BG = 0,        /* background and the lines between cells */
    MAP_INK = 1,       /* legend text */
    MAP_META = 2,      /* pheap's metadata */
    MAP_LARGE = 3,     /* allocated large blocks */
    MAP_FREE = 4,      /* free, stored */
    MAP_PUNCHED = 5,   /* free, no storage */
    MAP_RESERVED = 6,  /* chosen, not committed */
    MAP_SLAB_BASE = 8,
};
#define MAP_LEVELS 5u      /* occupancy: empty, up to 1/4, 1/2, 3/4, above 3/4 */
#define MAP_CLASSES_MAX 48u
#define MAP_COLOURS (MAP_SLAB_BASE + MAP_CLASSES_MAX * MAP_LEVELS)
#define MAP_SQUARES 16u    /* per cell, 4 x 4 */
#define MAP_META_MAX 16u

/* Cell limits: a PNG or SVG of 64 K cells is about 1300 pixels square
 * (64 columns of squares of 3 pixels up to 4 K cells, 128 of 2 pixels up
 * to 16 K, else 256 of 1); a text map stays under a hundred lines. */
#define MAP_CELLS_IMAGE 65536u
#define MAP_CELLS_TEXT 4096u

typedef struct map_region {
    const char *what;
    uint64_t bytes;
} map_region;

typedef struct map_grid {
    uint64_t data_off, data_bytes; /* the data region backed now */
    uint64_t chunks;               /* its 64 KiB chunks */
    uint64_t cpc;                  /* chunks per cell */
    uint64_t ncells;               /* data cells */
    unsigned columns;              /* cells per row */
    unsigned nmeta;                /* metadata regions: cells of row 0 */
    map_region meta[MAP_META_MAX];
    uint8_t *sq;                   /* [ncells * 16]: colour of each square */
    uint64_t *cover;               /* [ncells * 16]: bytes of the run shown there */
    uint16_t *slab_used;           /* [ncells], cpc 1: the slab's blocks used, */
    uint16_t *slab_total;          /*   and held (0: no slab) */
    uint8_t *slab_cls;
    uint64_t kind_bytes[PHEAP_CHUNK_RESERVED + 1]; /* per enum pheap_chunk_kind */
    uint64_t meta_blocks;          /* metadata blocks in the data region, bytes */
    uint64_t large_runs;
    uint64_t class_slabs[MAP_CLASSES_MAX], class_used[MAP_CLASSES_MAX],
        class_total[MAP_CLASSES_MAX];
    uint32_t class_size[MAP_CLASSES_MAX];
    unsigned nclasses;
    int progress;                  /* draw a progress bar on stderr */
    unsigned shown_percent;
} map_grid;

/* Walks heap h into g with at most `max_cells` data cells (columns and
 * cpc chosen here).  0, or a PHEAP_E* code (message from the library or
 * "out of memory"). */
int map_build(map_grid *g, pheap *h, uint64_t max_cells, int progress);
void map_free(map_grid *g);

/* The blocks of run r's class in use: allocated, or (in a morphed slab)
 * covered by blocks of the class it had, counted in blocks of its class
 * (class_size: bytes per class).  What the map shades a slab by. */
uint64_t map_slab_occupied(const pheap_chunk_run *r, const uint32_t *class_size);

/* The colour of palette index i as 0xRRGGBB. */
uint32_t map_rgb(unsigned i);
/* The colour index of a slab of class cls with `used` of `total` blocks. */
unsigned map_slab_colour(unsigned cls, uint64_t used, uint64_t total);

/* Pixel geometry of the images: each square `zoom` pixels wide, a line of
 * one pixel between cells, a margin around the grid, then the legend. */
typedef struct map_geometry {
    unsigned zoom, pitch, margin;  /* pitch = 4 * zoom + 1 */
    unsigned rows;                 /* grid rows, row 0 included */
    unsigned width, height;        /* the whole image */
    unsigned legend_y, line_h;     /* where the legend starts, its line height */
    unsigned legend_lines;
} map_geometry;
void map_layout(const map_grid *g, map_geometry *geo);

/* The legend's lines: its text for line i (0 <= i < legend_lines) into
 * buf, and the swatches drawn before it (count in *nsw, colours in sw[]).
 * Shared by PNG and SVG. */
#define MAP_SWATCHES_MAX MAP_LEVELS
void map_legend_line(const map_grid *g, const char *path, unsigned i, char *buf, size_t len,
                     unsigned *sw, unsigned *nsw);

/* Renderers: each writes the whole picture to f.  0, or -1 (errno set). */
int map_write_png(const map_grid *g, const char *path, FILE *f);
int map_write_svg(const map_grid *g, const char *path, FILE *f);
int map_write_text(const map_grid *g, const char *path, FILE *f, int colour);

/* A raster of palette indices for PNG: pixels and text (map_font.c). */
void map_font_draw(uint8_t *px, unsigned width, unsigned height, unsigned x, unsigned y,
                   const char *text, uint8_t colour);
#define MAP_FONT_ADVANCE 6u
#define MAP_FONT_HEIGHT 7u

/* PNG of palette indices (map_png.c): w x h bytes, palette of n colours. */
int map_png_encode(FILE *f, unsigned w, unsigned h, const uint8_t *px, const uint32_t *palette,
                   unsigned n, const char *text_key, const char *text);

#endif
