/*
 * names.c -- `pheap names PATH [--prefix P] [--json]`: the named objects of
 * a heap (pheap_alloc_named), sorted by name (byte order), each with the
 * size asked at its creation, its usable size and its offset.  The heap is
 * opened as a private snapshot (PHEAP_SNAPSHOT): nothing is written.  A
 * heap older than the name directory (format 1.4) has no names.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define NAMES_FORMAT_MINOR 4 /* the first format of major 1 with a name directory */

static const char usage[] =
    "usage: pheap names PATH [--prefix P] [--json]\n"
    "  Lists the named objects of the heap (pheap_alloc_named), sorted by name in\n"
    "  byte order: the size asked at creation, the usable size, the offset.  In\n"
    "  text, control bytes, backslashes and bytes that are not UTF-8 in a name are\n"
    "  shown escaped (\\t, \\\\, \\x01).  Read-only: the file is never written.\n"
    "  --prefix P  only the names that start with P\n"
    "  --json      one JSON object {\"path\": ..., \"names\": [...], \"count\": N}\n"
    "              instead of text (an error object on failure)\n";

typedef struct entry {
    char *name;
    uint64_t size;            /* asked at creation */
    uint64_t usable;          /* 0: unknown (the block is not live, or the
                                 GC heap needs recovery) */
    pheap_off off;
} entry;

typedef struct list {
    entry *es;
    size_t n, cap;
} list;

static int by_name(const void *a, const void *b)
{
    return strcmp(((const entry *)a)->name, ((const entry *)b)->name);
}

static void list_free(list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->es[i].name);
    free(l->es);
}

static int add(pheap *h, list *l, const pheap_name_info *ni)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        entry *grown = realloc(l->es, cap * sizeof(entry));
        if (!grown)
            return -1;
        l->es = grown;
        l->cap = cap;
    }
    entry *e = &l->es[l->n];
    if (!(e->name = strdup(ni->name)))
        return -1;
    e->size = ni->size;
    e->off = ni->off;
    e->usable = pheap_usable_size(h, ni->off);
    l->n++;
    return 0;
}

/* The names of the heap that start with `prefix`, sorted.  0, a PHEAP_E*
 * code, or 1 when the process is out of memory. */
static int collect(pheap *h, const char *prefix, list *l)
{
    size_t plen = strlen(prefix);
    pheap_name_info ni;
    int rc;
    /* The directory's order is its hash's: the cursor is the last name. */
    for (const char *after = NULL; (rc = pheap_name_next(h, after, &ni)) == 0; after = ni.name)
        if (!strncmp(ni.name, prefix, plen) && add(h, l, &ni))
            return 1;
    if (rc != PHEAP_ENOENT)
        return rc;
    if (l->n)
        qsort(l->es, l->n, sizeof(entry), by_name);
    return 0;
}

static void print_json(const char *path, const list *l)
{
    printf("{\"path\": ");
    cli_json_string(path);
    printf(", \"names\": [");
    for (size_t i = 0; i < l->n; i++) {
        const entry *e = &l->es[i];
        printf("%s{\"name\": ", i ? ", " : "");
        cli_json_string(e->name);
        printf(", \"size\": %llu, \"usable\": ", (unsigned long long)e->size);
        if (e->usable)
            printf("%llu", (unsigned long long)e->usable);
        else
            printf("null");
        printf(", \"offset\": %llu}", (unsigned long long)e->off);
    }
    printf("], \"count\": %zu}\n", l->n);
}

static int digits(uint64_t v)
{
    int n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

/* The numbers first, right-aligned, and the name last: a long name does
 * not push the columns of the other rows. */
static void print_text(const list *l, const char *prefix)
{
    char shown[CLI_TEXT_NAME_MAX];
    int ws = 4, wu = 6, wo = 6; /* the headers' widths */
    for (size_t i = 0; i < l->n; i++) {
        const entry *e = &l->es[i];
        ws = digits(e->size) > ws ? digits(e->size) : ws;
        wu = digits(e->usable) > wu ? digits(e->usable) : wu;
        wo = digits(e->off) > wo ? digits(e->off) : wo;
    }
    if (l->n)
        printf("%*s  %*s  %*s  %s\n", ws, "SIZE", wu, "USABLE", wo, "OFFSET", "NAME");
    for (size_t i = 0; i < l->n; i++) {
        const entry *e = &l->es[i];
        char usable[24] = "-";
        if (e->usable)
            snprintf(usable, sizeof(usable), "%llu", (unsigned long long)e->usable);
        printf("%*llu  %*s  %*llu  %s\n", ws, (unsigned long long)e->size, wu, usable, wo,
               (unsigned long long)e->off, cli_text_name(shown, e->name));
    }
    printf("%zu name%s", l->n, l->n == 1 ? "" : "s");
    if (*prefix)
        printf(" starting with '%s'", cli_text_name(shown, prefix));
    printf("\n");
}

/* Notes on stderr, so that stdout stays the list: why there are no
 * names, or no usable sizes. */
static void notes(const struct pheap_stats *st, const list *l)
{
    size_t unknown = 0;
    for (size_t i = 0; i < l->n; i++)
        unknown += !l->es[i].usable;
    if (st->format_major == 1 && st->format_minor < NAMES_FORMAT_MINOR)
        fprintf(stderr, "pheap names: a heap of format %u.%u has no name directory: no names\n",
                st->format_major, st->format_minor);
    if (st->held_elsewhere)
        fprintf(stderr, "pheap names: %s\n", CLI_HELD_NOTE);
    if (unknown && st->needs_recovery)
        fprintf(stderr, "pheap names: usable sizes unknown until the heap is recovered "
                "(GC mode, not closed cleanly: pheap recover)\n");
    else if (unknown)
        fprintf(stderr, "pheap names: %zu name%s a block that is not live (freed with "
                "pheap_free?): pheap check reports %s\n", unknown,
                unknown == 1 ? " names" : "s name", unknown == 1 ? "it" : "them");
}

/* Parses PATH [--prefix P] [--json].  0, or the exit status 2 after
 * saying why. */
static int parse(int argc, char **argv, const char **path, const char **prefix, int *json)
{
    char msg[300];
    *path = NULL;
    *prefix = "";
    *json = 0;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--json"))
            *json = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            continue;
        } else if (!strcmp(argv[i], "--prefix")) {
            if (i + 1 == argc)
                return cli_usage_error("pheap names: --prefix needs a value", *json);
            *prefix = argv[++i]; /* taken as it is: a name may start with '-' */
        } else if (argv[i][0] != '-' && !*path) {
            *path = argv[i];
        } else {
            snprintf(msg, sizeof(msg), "pheap names: unexpected argument '%s'", argv[i]);
            return cli_usage_error(msg, *json);
        }
    }
    if (*path)
        return 0;
    fprintf(stderr, "%s", usage);
    return *json ? cli_usage_error("pheap names: no heap file given", 1) : 2;
}

int cmd_names(int argc, char **argv)
{
    const char *path, *prefix;
    int json;
    pheap *h;
    if (cli_help_asked(argc, argv))
        return cli_help(usage);
    int rc = parse(argc, argv, &path, &prefix, &json);
    if (rc || (rc = cli_open(path, PHEAP_SNAPSHOT, json, &h)))
        return rc;
    struct pheap_stats st;
    pheap_stats(h, &st);
    list l = {0};
    rc = collect(h, prefix, &l);
    if (rc > 0) {
        rc = cli_error(PHEAP_ENOMEM, "pheap names: out of memory", json);
    } else if (rc) {
        rc = cli_fail_json(path, rc, json);
    } else {
        if (json)
            print_json(path, &l);
        else
            print_text(&l, prefix);
        notes(&st, &l);
    }
    list_free(&l);
    pheap_close(h);
    return rc;
}
