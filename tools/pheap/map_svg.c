/*
 * map_svg.c -- the heap map as SVG, in the PNG's geometry (one SVG unit
 * per PNG pixel): a rectangle per cell of one colour, per run of squares
 * of a row otherwise; each slab cell says its class and occupancy in a
 * tooltip (<title>); the legend as text.
 */
#include <string.h>

#include "map.h"

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default:
            /* control bytes are not allowed in XML 1.0 */
            fputc((unsigned char)*s < 0x20 ? '?' : *s, f);
        }
    }
}

static void rect(FILE *f, unsigned x, unsigned y, unsigned w, unsigned h, unsigned colour)
{
    fprintf(f, "<rect x=\"%u\" y=\"%u\" width=\"%u\" height=\"%u\" fill=\"#%06x\"/>\n", x, y, w, h,
            map_rgb(colour));
}

/* Cell i of the data grid at (x0, y0). */
static void cell(FILE *f, const map_grid *g, const map_geometry *geo, uint64_t i, unsigned x0,
                 unsigned y0)
{
    const uint8_t *sq = g->sq + i * MAP_SQUARES;
    unsigned z = geo->zoom, same = 1;
    for (unsigned j = 1; j < MAP_SQUARES; j++)
        same &= sq[j] == sq[0];
    if (same && g->cpc == 1 && g->slab_total[i]) {
        unsigned c = g->slab_cls[i];
        fprintf(f, "<rect x=\"%u\" y=\"%u\" width=\"%u\" height=\"%u\" fill=\"#%06x\"><title>"
                   "offset %llu: slab of class %u (%u B), %u of %u blocks in use</title></rect>\n",
                x0, y0, 4 * z, 4 * z, map_rgb(sq[0]),
                (unsigned long long)(g->data_off + i * 65536u), c, g->class_size[c],
                g->slab_used[i], g->slab_total[i]);
        return;
    }
    if (same) {
        rect(f, x0, y0, 4 * z, 4 * z, sq[0]);
        return;
    }
    for (unsigned r = 0; r < 4; r++) {
        for (unsigned a = 0, b; a < 4; a = b) {
            for (b = a + 1; b < 4 && sq[4 * r + b] == sq[4 * r + a]; b++)
                ;
            rect(f, x0 + a * z, y0 + r * z, (b - a) * z, z, sq[4 * r + a]);
        }
    }
}

int map_write_svg(const map_grid *g, const char *path, FILE *f)
{
    map_geometry geo;
    map_layout(g, &geo);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%u\" height=\"%u\" "
               "viewBox=\"0 0 %u %u\" shape-rendering=\"crispEdges\">\n",
            geo.width, geo.height, geo.width, geo.height);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"#%06x\"/>\n", map_rgb(MAP_BG));
    for (unsigned i = 0; i < g->nmeta; i++) {
        fprintf(f, "<rect x=\"%u\" y=\"%u\" width=\"%u\" height=\"%u\" fill=\"#%06x\"><title>",
                geo.margin + i * geo.pitch, geo.margin, 4 * geo.zoom, 4 * geo.zoom,
                map_rgb(MAP_META));
        xml_text(f, g->meta[i].what);
        fprintf(f, ": %llu bytes</title></rect>\n", (unsigned long long)g->meta[i].bytes);
    }
    for (uint64_t i = 0; i < g->ncells; i++)
        cell(f, g, &geo, i, geo.margin + (unsigned)(i % g->columns) * geo.pitch,
             geo.margin + (unsigned)(1 + i / g->columns) * geo.pitch);
    char text[512];
    unsigned sw[MAP_SWATCHES_MAX], nsw;
    fprintf(f, "<g font-family=\"monospace\" font-size=\"9\" fill=\"#%06x\">\n", map_rgb(MAP_INK));
    for (unsigned i = 0; i < geo.legend_lines; i++) {
        unsigned y = geo.legend_y + i * geo.line_h;
        map_legend_line(g, path, i, text, sizeof(text), sw, &nsw);
        for (unsigned k = 0; k < nsw; k++)
            rect(f, geo.margin + k * 9, y, 7, 7, sw[k]);
        fprintf(f, "<text x=\"%u\" y=\"%u\">", geo.margin + MAP_SWATCHES_MAX * 9 + 4, y + 7);
        xml_text(f, text);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</g>\n</svg>\n");
    return ferror(f) ? -1 : 0;
}
