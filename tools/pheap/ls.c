/*
 * ls.c -- `pheap ls [DIR] [--json]`: the heaps of the heap directory (or
 * of DIR), sorted by name: file size, consistency mode, clean, dirty or in
 * use, and the last read-write open.  Each is opened as a private snapshot
 * (PHEAP_SNAPSHOT): nothing is written.  A file named *.heap that does not
 * open is listed with the reason; other files are skipped, counted in a
 * note on stderr.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

#define SUFFIX ".heap"
#define SUFFIX_LEN (sizeof(SUFFIX) - 1)

typedef struct entry {
    char *name;               /* file name without ".heap" */
    char *file;               /* DIR/name.heap */
    uint64_t file_size;       /* from stat */
    int rc;                   /* 0, or why it did not open */
    char message[512];        /*   with the library's message */
    struct pheap_stats st;    /* when rc == 0 */
} entry;

static int by_name(const void *a, const void *b)
{
    return strcmp(((const entry *)a)->name, ((const entry *)b)->name);
}

/* "clean", "dirty" or "in use". */
static const char *state_of(const entry *e)
{
    return e->st.held_elsewhere ? "in use" : e->st.was_unclean ? "dirty" : "clean";
}

static void look_at(entry *e)
{
    struct stat sb;
    if (stat(e->file, &sb) == 0)
        e->file_size = (uint64_t)sb.st_size;
    pheap_options o = {.flags = PHEAP_SNAPSHOT};
    pheap *h = NULL;
    e->rc = pheap_open(e->file, &o, &h);
    /* A heap in use may be read mid-change: try again (as info does). */
    for (int tries = 1; e->rc == PHEAP_ECORRUPT && tries < 3; tries++)
        e->rc = pheap_open(e->file, &o, &h);
    if (e->rc) {
        snprintf(e->message, sizeof(e->message), "%s", pheap_errmsg());
        return;
    }
    pheap_stats(h, &e->st);
    pheap_close(h);
}

/* Reads DIR's *.heap entries into *out (sorted); counts the others. */
static int scan(const char *dir, entry **out, size_t *n, size_t *others)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    size_t cap = 0;
    struct dirent *de;
    *out = NULL;
    *n = *others = 0;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (de->d_name[0] == '.' && (len == 1 || (len == 2 && de->d_name[1] == '.')))
            continue;
        if (len <= SUFFIX_LEN || strcmp(de->d_name + len - SUFFIX_LEN, SUFFIX)) {
            ++*others;
            continue;
        }
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            entry *grown = realloc(*out, cap * sizeof(entry));
            if (!grown)
                break;
            *out = grown;
        }
        entry *e = &(*out)[*n];
        memset(e, 0, sizeof(*e));
        e->name = strndup(de->d_name, len - SUFFIX_LEN);
        e->file = malloc(strlen(dir) + len + 2);
        if (!e->name || !e->file) {
            free(e->name);
            free(e->file);
            break;
        }
        sprintf(e->file, "%s/%s", dir, de->d_name);
        ++*n;
    }
    closedir(d);
    if (*n)
        qsort(*out, *n, sizeof(entry), by_name);
    return 0;
}

static void print_json(const char *dir, const entry *es, size_t n)
{
    printf("{\"dir\": ");
    cli_json_string(dir);
    printf(", \"heaps\": [");
    for (size_t i = 0; i < n; i++) {
        const entry *e = &es[i];
        printf("%s{\"name\": ", i ? ", " : "");
        cli_json_string(e->name);
        printf(", \"path\": ");
        cli_json_string(e->file);
        printf(", \"file_size\": %llu, ", (unsigned long long)e->file_size);
        if (e->rc) {
            printf("\"heap\": false, \"error\": \"%s\", \"code\": %d, \"message\": ",
                   cli_error_name(e->rc), e->rc);
            cli_json_string(e->message);
            printf("}");
            continue;
        }
        printf("\"heap\": true, \"consistency\": \"%s\", \"state\": \"%s\", \"in_use\": %s, "
               "\"needs_recovery\": %s, \"open_count\": %llu, \"last_open\": ",
               cli_consistency_name(e->st.consistency), state_of(e),
               e->st.held_elsewhere ? "true" : "false", e->st.needs_recovery ? "true" : "false",
               (unsigned long long)e->st.open_count);
        cli_json_time(e->st.last_open);
        printf("}");
    }
    printf("]}\n");
}

static void print_text(const entry *es, size_t n)
{
    int width = 4;
    for (size_t i = 0; i < n; i++)
        if ((int)strlen(es[i].name) > width)
            width = (int)strlen(es[i].name);
    if (width > 40)
        width = 40;
    printf("%-*s  %10s  %-4s  %-6s  %s\n", width, "NAME", "SIZE", "MODE", "STATE", "LAST OPEN");
    for (size_t i = 0; i < n; i++) {
        const entry *e = &es[i];
        char size[32], when[32];
        double v = (double)e->file_size;
        const char *unit = "B";
        static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
        for (unsigned u = 0; u < 4 && v >= 1024.0; u++) {
            v /= 1024.0;
            unit = units[u];
        }
        snprintf(size, sizeof(size), unit[0] == 'B' ? "%.0f %s" : "%.1f %s", v, unit);
        if (e->rc)
            printf("%-*s  %10s  %-4s  %-6s  not a heap: %s\n", width, e->name, size, "-", "-",
                   e->message);
        else
            printf("%-*s  %10s  %-4s  %-6s  %s\n", width, e->name, size,
                   cli_consistency_name(e->st.consistency), state_of(e),
                   cli_time(when, e->st.last_open));
    }
}

int cmd_ls(int argc, char **argv)
{
    static const char usage[] =
        "usage: pheap ls [DIR] [--json]\n"
        "  Lists the heaps (files named NAME.heap) of the heap directory, or of DIR,\n"
        "  sorted by name: file size, consistency mode (log or gc), state (clean,\n"
        "  dirty: not closed cleanly, or in use: open read-write by another process)\n"
        "  and the last read-write open (local time; unknown for heaps older than\n"
        "  the record).  A *.heap file that does not open is listed with the reason.\n"
        "  Read-only: no file is written.  The heap directory is $PHEAP_DIR, else\n"
        "  $XDG_DATA_HOME/pheap, else ~/.local/share/pheap; a heap there is named\n"
        "  without its .heap in every command (pheap info NAME).\n"
        "  --json   one JSON object {\"dir\": ..., \"heaps\": [...]} instead of text\n";
    if (cli_help_asked(argc, argv))
        return cli_help(usage);
    const char *dir = NULL, *bad = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (argv[i][0] != '-' && !dir)
            dir = argv[i];
        else if (!bad)
            bad = argv[i];
    }
    if (bad) {
        char msg[300];
        snprintf(msg, sizeof(msg), "pheap ls: unexpected argument '%s'", bad);
        return cli_usage_error(msg, json);
    }
    char home[4096];
    if (!dir) {
        int rc = pheap_dir(home, sizeof(home));
        if (rc)
            return cli_fail_json("heap directory", rc, json);
        dir = home;
    }
    entry *es = NULL;
    size_t n = 0, others = 0;
    if (scan(dir, &es, &n, &others) != 0) {
        int e = errno;
        if (e != ENOENT) {
            char msg[4200];
            snprintf(msg, sizeof(msg), "cannot list %s: %s", dir, strerror(e));
            return cli_error(e == EACCES ? PHEAP_EACCES : e == ENOTDIR ? PHEAP_EINVAL : PHEAP_EIO,
                             msg, json);
        }
        fprintf(stderr, "pheap ls: %s does not exist: no heaps\n", dir);
    } else if (!n) {
        fprintf(stderr, "pheap ls: no heaps in %s\n", dir);
    }
    for (size_t i = 0; i < n; i++)
        look_at(&es[i]);
    if (json)
        print_json(dir, es, n);
    else if (n)
        print_text(es, n);
    if (others)
        fprintf(stderr, "pheap ls: %zu other entr%s of %s (not named *.heap) skipped\n", others,
                others == 1 ? "y" : "ies", dir);
    for (size_t i = 0; i < n; i++) {
        free(es[i].name);
        free(es[i].file);
    }
    free(es);
    return 0;
}
