/*
 * create.c -- `pheap create PATH --size SIZE [--max-size SIZE] [--mode OCTAL]`:
 * makes a new heap file (fails if PATH exists).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: pheap create PATH --size SIZE [--max-size SIZE] [--mode OCTAL]\n"
    "  Creates a heap file at PATH; fails if PATH exists.\n"
    "  --size SIZE       initial size, raised to what the metadata for --max-size\n"
    "                    needs plus one 64 KiB data chunk\n"
    "  --max-size SIZE   growth limit, fixed for the heap's life (default: --size)\n"
    "  --mode OCTAL      permission bits of the new file (default 0600)\n"
    "  SIZE takes a K, M, G or T suffix (binary multiples).\n";

int cmd_create(int argc, char **argv)
{
    if (cli_help_asked(argc, argv))
        return cli_help(usage);
    pheap_options o = {.flags = PHEAP_CREATE | PHEAP_EXCL};
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--size") && i + 1 < argc) {
            if (cli_parse_size(argv[++i], &o.size))
                return 2;
        } else if (!strcmp(argv[i], "--max-size") && i + 1 < argc) {
            if (cli_parse_size(argv[++i], &o.max_size))
                return 2;
        } else if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
            char *end;
            o.mode = (unsigned)strtoul(argv[++i], &end, 8);
            if (*end || !o.mode) {
                fprintf(stderr, "pheap: bad mode '%s' (octal, e.g. 0640)\n", argv[i]);
                return 2;
            }
        } else if (argv[i][0] != '-' && !path) {
            path = argv[i];
        } else {
            fprintf(stderr, "pheap create: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!path || !o.size) {
        fprintf(stderr, "%s", usage);
        return 2;
    }
    pheap *h;
    int rc = pheap_open(path, &o, &h);
    if (rc)
        return cli_fail(path, rc);
    struct pheap_stats st;
    pheap_stats(h, &st);
    rc = pheap_close(h);
    if (rc)
        return cli_fail(path, rc);
    printf("created %s: %llu bytes (growable to %llu), data region %llu bytes at offset %llu\n", path,
           (unsigned long long)st.size, (unsigned long long)st.max_size,
           (unsigned long long)st.data_size, (unsigned long long)st.data_offset);
    return 0;
}
