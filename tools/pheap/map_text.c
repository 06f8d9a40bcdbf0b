/*
 * map_text.c -- the heap map as text for a terminal: the grid of the
 * images with a character per cell (the colour most of its squares show),
 * each row led by the file offset where it starts; slabs show their size
 * class as a character and, in colour (a terminal), their occupancy.
 * The legend's lines are the images'.
 */
#include <string.h>

#include "map.h"

static const char class_chars[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKL";

static char symbol(unsigned colour)
{
    switch (colour) {
    case MAP_META: return 'M';
    case MAP_LARGE: return '#';
    case MAP_FREE: return '.';
    case MAP_PUNCHED: return '_';
    case MAP_RESERVED: return 'r';
    case MAP_BG: return ' ';
    default: return class_chars[(colour - MAP_SLAB_BASE) / MAP_LEVELS];
    }
}

/* xterm 256-colour foreground of a colour: slabs by occupancy (grey
 * when empty, then blue, green, orange, red), the rest by kind. */
static unsigned sgr(unsigned colour)
{
    static const unsigned level[MAP_LEVELS] = {245, 33, 34, 208, 196};
    switch (colour) {
    case MAP_META: return 61;
    case MAP_LARGE: return 255;
    case MAP_FREE: return 250;
    case MAP_PUNCHED: return 229;
    case MAP_RESERVED: return 214;
    default: return level[(colour - MAP_SLAB_BASE) % MAP_LEVELS];
    }
}

/* The colour most squares of data cell i show. */
static unsigned cell_colour(const map_grid *g, uint64_t i)
{
    const uint8_t *sq = g->sq + i * MAP_SQUARES;
    unsigned best = sq[0], best_n = 0;
    for (unsigned j = 0; j < MAP_SQUARES; j++) {
        unsigned n = 0;
        for (unsigned k = 0; k < MAP_SQUARES; k++)
            n += sq[k] == sq[j];
        if (n > best_n) {
            best_n = n;
            best = sq[j];
        }
    }
    return best;
}

static void put(FILE *f, unsigned colour, int use_colour)
{
    if (use_colour && colour != MAP_BG)
        fprintf(f, "\033[38;5;%um%c\033[0m", sgr(colour), symbol(colour));
    else
        fputc(symbol(colour), f);
}

int map_write_text(const map_grid *g, const char *path, FILE *f, int use_colour)
{
    map_geometry geo;
    map_layout(g, &geo);
    char text[512];
    unsigned sw[MAP_SWATCHES_MAX], nsw;
    for (unsigned i = 0; i < 3; i++) {
        map_legend_line(g, path, i, text, sizeof(text), sw, &nsw);
        fprintf(f, "%s\n", text);
    }
    fprintf(f, "%12s  ", "0");
    for (unsigned i = 0; i < g->nmeta; i++)
        put(f, MAP_META, use_colour);
    fputc('\n', f);
    uint64_t row_bytes = (uint64_t)g->columns * g->cpc * 65536u;
    for (uint64_t i = 0; i < g->ncells; i++) {
        if (i % g->columns == 0)
            fprintf(f, "%12llu  ", (unsigned long long)(g->data_off + i / g->columns * row_bytes));
        put(f, cell_colour(g, i), use_colour);
        if (i % g->columns == g->columns - 1 || i + 1 == g->ncells)
            fputc('\n', f);
    }
    for (unsigned i = 3; i < geo.legend_lines; i++) {
        map_legend_line(g, path, i, text, sizeof(text), sw, &nsw);
        fputs("  ", f);
        if (nsw == MAP_LEVELS && use_colour) { /* a class: its character in each occupancy */
            for (unsigned k = 0; k < nsw; k++)
                put(f, sw[k], use_colour);
        } else if (nsw) {
            put(f, sw[0], use_colour);
            fputs("    ", f);
        } else {
            fputs("     ", f);
        }
        fprintf(f, "  %s\n", text);
    }
    return ferror(f) ? -1 : 0;
}
