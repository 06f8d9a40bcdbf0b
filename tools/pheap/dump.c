/*
 * dump.c -- `pheap dump PATH NAME [--raw]`: the usable bytes of the object
 * named NAME (pheap_alloc_named) as a classic hex dump, or with --raw the
 * bytes themselves on stdout.  The heap is opened as a private snapshot
 * (PHEAP_SNAPSHOT): nothing is written.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: pheap dump PATH NAME [--raw]\n"
    "  Prints the object named NAME (pheap_alloc_named): its usable bytes (pheap\n"
    "  names shows how many) as a hex dump, 16 bytes a line: the offset within the\n"
    "  object, the bytes in hex, then the printable ASCII ones ('.' for the others).\n"
    "  Read-only: the file is never written.  A NAME that starts with '-' goes\n"
    "  after --.\n"
    "  --raw  the bytes themselves on stdout and nothing else (redirect to a file)\n"
    "  Exit 0 when dumped, 1 when the heap does not open or has no object NAME.\n";

/* One line: offset, 16 bytes in two groups of 8, ASCII between bars. */
static void hex_line(const unsigned char *p, size_t n, uint64_t at)
{
    printf("%08llx ", (unsigned long long)at);
    for (size_t i = 0; i < 16; i++) {
        if (i % 8 == 0)
            putchar(' ');
        if (i < n)
            printf("%02x ", p[i]);
        else
            printf("   ");
    }
    printf(" |");
    for (size_t i = 0; i < n; i++)
        putchar(p[i] < 0x80 && isprint(p[i]) ? p[i] : '.');
    printf("|\n");
}

static void hex_dump(const unsigned char *p, size_t len)
{
    for (size_t at = 0; at < len; at += 16)
        hex_line(p + at, len - at < 16 ? len - at : 16, at);
}

/* Parses PATH NAME [--raw] (-- ends the options).  0, or the exit status
 * 2 after saying why. */
static int parse(int argc, char **argv, const char **path, const char **name, int *raw)
{
    char msg[300];
    int options = 1;
    *path = *name = NULL;
    *raw = 0;
    for (int i = 1; i < argc; i++) {
        if (options && !strcmp(argv[i], "--")) {
            options = 0;
        } else if (options && !strcmp(argv[i], "--raw")) {
            *raw = 1;
        } else if ((!options || argv[i][0] != '-') && (!*path || !*name)) {
            *(*path ? name : path) = argv[i];
        } else {
            snprintf(msg, sizeof(msg), "pheap dump: unexpected argument '%s'", argv[i]);
            return cli_usage_error(msg, 0);
        }
    }
    if (*name)
        return 0;
    fprintf(stderr, "%s", usage);
    return 2;
}

/* The object's bytes: *p and *len, or the exit status 1 after saying why. */
static int find(pheap *h, const char *path, const char *name, const unsigned char **p, size_t *len)
{
    char msg[CLI_TEXT_NAME_MAX + 1200], shown[CLI_TEXT_NAME_MAX];
    pheap_off off = pheap_lookup(h, name);
    if (!off && pheap_errno() == PHEAP_ENOENT) {
        snprintf(msg, sizeof(msg), "%s: no object named '%s' (PHEAP_ENOENT)", path,
                 cli_text_name(shown, name));
        return cli_error(PHEAP_ENOENT, msg, 0);
    }
    if (!off) { /* a bad name: empty, too long */
        int rc = pheap_errno();
        snprintf(msg, sizeof(msg), "%s: %s (%s)", path, pheap_errmsg(), cli_error_name(rc));
        return cli_error(rc, msg, 0);
    }
    *len = pheap_usable_size(h, off);
    if (!*len && pheap_errno() == PHEAP_ERECOVER) {
        snprintf(msg, sizeof(msg), "%s: the heap (GC mode) was not closed cleanly: the sizes of "
                 "its blocks are known after pheap recover (PHEAP_ERECOVER)", path);
        return cli_error(PHEAP_ERECOVER, msg, 0);
    }
    if (!*len) { /* the block was freed with pheap_free */
        snprintf(msg, sizeof(msg), "%s: '%s' names no live block (its block at %llu was freed; "
                 "pheap check reports it) (PHEAP_ENOTLIVE)", path, cli_text_name(shown, name),
                 (unsigned long long)off);
        return cli_error(PHEAP_ENOTLIVE, msg, 0);
    }
    *p = pheap_direct(h, off);
    return 0;
}

int cmd_dump(int argc, char **argv)
{
    const char *path, *name;
    int raw;
    pheap *h;
    if (cli_help_asked(argc, argv))
        return cli_help(usage);
    int rc = parse(argc, argv, &path, &name, &raw);
    if (rc || (rc = cli_open(path, PHEAP_SNAPSHOT, 0, &h)))
        return rc;
    struct pheap_stats st;
    pheap_stats(h, &st);
    if (st.held_elsewhere)
        fprintf(stderr, "pheap dump: %s\n", CLI_HELD_NOTE);
    const unsigned char *p = NULL;
    size_t len = 0;
    rc = find(h, path, name, &p, &len);
    if (!rc) {
        if (raw)
            fwrite(p, 1, len, stdout);
        else
            hex_dump(p, len);
        /* A full disk or a closed pipe: the output is not all there. */
        if (fflush(stdout) || ferror(stdout)) {
            fprintf(stderr, "pheap dump: writing the output: %s\n", strerror(errno));
            rc = 1;
        }
    }
    pheap_close(h);
    return rc;
}
