/*
 * map.c -- `pheap map PATH [-o FILE] [--text]`: a picture of the heap,
 * chunk by chunk (map.h): slabs coloured by size class and shaded by
 * occupancy, large blocks, free space with and without storage, metadata,
 * with a legend; as PNG, SVG or text.  The heap is opened as a private
 * snapshot (nothing is written to it); a picture file is written whole
 * under a temporary name and renamed into place, so that a failure leaves
 * none behind.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "map.h"

static const char usage[] =
    "usage: pheap map PATH [-o FILE] [--text] [--color|--no-color] [--progress]\n"
    "  A picture of the heap, chunk by chunk: slabs coloured by size class and\n"
    "  shaded by how full they are, large blocks, free space (stored, or given back\n"
    "  to the file system), pheap's metadata, with a legend.  Read-only: the heap\n"
    "  file is never written; a heap another process holds is pictured from a\n"
    "  snapshot.\n"
    "  -o FILE      write the picture to FILE: PNG (FILE.png), SVG (FILE.svg) or\n"
    "               text (FILE.txt); written whole or not at all\n"
    "  --text       the text form on stdout (the default without -o)\n"
    "  --color      colour the text form (the default when stdout is a terminal)\n"
    "  --no-color   do not\n"
    "  --progress   a progress bar on stderr even when it is not a terminal (it is\n"
    "               shown on a terminal for heaps of 256 MiB and more)\n";

enum { FMT_PNG, FMT_SVG, FMT_TEXT };

#define PROGRESS_MIN (256ull << 20)

typedef struct map_args {
    const char *path, *out;
    int format, text, colour, progress;
} map_args;

static int format_of(const char *out)
{
    const char *dot = strrchr(out, '.');
    if (dot && strchr(dot, '/'))
        dot = NULL;
    if (dot && !strcasecmp(dot, ".png"))
        return FMT_PNG;
    if (dot && !strcasecmp(dot, ".svg"))
        return FMT_SVG;
    if (dot && !strcasecmp(dot, ".txt"))
        return FMT_TEXT;
    return -1;
}

static int parse(int argc, char **argv, map_args *a)
{
    char msg[512];
    memset(a, 0, sizeof(*a));
    a->colour = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) {
            if (i + 1 == argc || a->out)
                return cli_usage_error(a->out ? "pheap map: -o given twice"
                                              : "pheap map: -o needs a file name", 0);
            a->out = argv[++i];
        } else if (!strcmp(argv[i], "--text")) {
            a->text = 1;
        } else if (!strcmp(argv[i], "--color") || !strcmp(argv[i], "--no-color")) {
            a->colour = argv[i][2] == 'c';
        } else if (!strcmp(argv[i], "--progress")) {
            a->progress = 1;
        } else if (argv[i][0] != '-' && !a->path) {
            a->path = argv[i];
        } else {
            snprintf(msg, sizeof(msg), "pheap map: unexpected argument '%s'", argv[i]);
            return cli_usage_error(msg, 0);
        }
    }
    if (!a->path) {
        fprintf(stderr, "%s", usage);
        return 2;
    }
    if (a->out && (a->format = format_of(a->out)) < 0) {
        snprintf(msg, sizeof(msg), "pheap map: cannot tell the format of '%s' from its name: "
                 "use .png, .svg or .txt", a->out);
        return cli_usage_error(msg, 0);
    }
    return 0;
}

static int render(const map_grid *g, const char *path, int format, FILE *f, int colour)
{
    if (format == FMT_PNG)
        return map_write_png(g, path, f);
    if (format == FMT_SVG)
        return map_write_svg(g, path, f);
    return map_write_text(g, path, f, colour);
}

/* Writes the picture to `out` through a temporary file in the same
 * directory, renamed into place once complete.  0, or 1 after saying why
 * (nothing left behind). */
static int write_file(const map_grid *g, const map_args *a)
{
    struct stat st;
    char msg[1024];
    if (stat(a->out, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(msg, sizeof(msg), "pheap map: cannot write the picture to %s: a directory",
                 a->out);
        return cli_error(PHEAP_EISDIR, msg, 0);
    }
    const char *slash = strrchr(a->out, '/');
    size_t dir_len = slash ? (size_t)(slash - a->out + 1) : 0;
    char *tmp = malloc(strlen(a->out) + 16);
    if (!tmp)
        return cli_error(PHEAP_ENOMEM, "pheap map: out of memory", 0);
    sprintf(tmp, "%.*s.%s.XXXXXX", (int)dir_len, a->out, a->out + dir_len);
    int fd = mkstemp(tmp);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
    int rc = 0, err = 0;
    if (!f) {
        err = errno;
    } else {
        mode_t mask = umask(0);
        umask(mask);
        errno = 0;
        if (fchmod(fd, 0666 & ~mask) || render(g, a->path, a->format, f, 0) ||
            fflush(f) || fsync(fd))
            err = errno ? errno : EIO;
        if (fclose(f) && !err)
            err = errno;
        if (!err && rename(tmp, a->out))
            err = errno;
    }
    if (err) {
        snprintf(msg, sizeof(msg), "pheap map: cannot write %s: %s", a->out, strerror(err));
        if (fd >= 0)
            unlink(tmp);
        rc = cli_error(err == ENOSPC ? PHEAP_ENOSPC : err == EACCES ? PHEAP_EACCES : PHEAP_EIO,
                       msg, 0);
    }
    free(tmp);
    return rc;
}

int cmd_map(int argc, char **argv)
{
    map_args a;
    pheap *h;
    if (cli_help_asked(argc, argv))
        return cli_help(usage);
    int rc = parse(argc, argv, &a);
    if (rc || (rc = cli_open(a.path, PHEAP_SNAPSHOT, 0, &h)))
        return rc;
    struct pheap_stats st;
    if ((rc = pheap_stats(h, &st)) != 0) {
        pheap_close(h);
        return cli_fail(a.path, rc);
    }
    int tty_err = isatty(STDERR_FILENO);
    int show = a.progress || (tty_err && st.data_size >= PROGRESS_MIN);
    int text_out = a.text || !a.out;
    if (a.colour < 0)
        a.colour = isatty(STDOUT_FILENO) && !getenv("NO_COLOR");
    map_grid g;
    /* The text form has its own, smaller cell limit: a second grid. */
    if (a.out && a.format != FMT_TEXT) {
        rc = map_build(&g, h, MAP_CELLS_IMAGE, show);
        if (rc)
            rc = cli_fail(a.path, rc);
        else
            rc = write_file(&g, &a);
        map_free(&g);
        show = 0;
    }
    if (!rc && (text_out || a.format == FMT_TEXT)) {
        rc = map_build(&g, h, MAP_CELLS_TEXT, show);
        if (rc)
            rc = cli_fail(a.path, rc);
        else if (a.out && a.format == FMT_TEXT)
            rc = write_file(&g, &a);
        if (!rc && text_out && map_write_text(&g, a.path, stdout, a.colour))
            rc = cli_error(PHEAP_EIO, "pheap map: cannot write to stdout", 0);
        map_free(&g);
    }
    if (st.held_elsewhere)
        fprintf(stderr, "pheap map: %s\n", CLI_HELD_NOTE);
    pheap_close(h);
    return rc;
}
