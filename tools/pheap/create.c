/*
 * create.c -- `pheap create PATH --size SIZE [--max-size SIZE] [--mode OCTAL]`:
 * makes a new heap file (fails if PATH exists) and says what it made: the
 * data region, the file's apparent size and what it takes on disk.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static const char usage[] =
    "usage: pheap create PATH --size SIZE [--max-size SIZE] [--mode OCTAL]\n"
    "                    [--consistency log|gc]\n"
    "  Creates a heap file at PATH; fails if PATH exists.  A PATH without '/' is a\n"
    "  heap name: NAME.heap in the heap directory (see `pheap ls`), which is\n"
    "  created (0700) if missing.\n"
    "  --size SIZE       bytes of data region (what blocks can use) to start with;\n"
    "                    the file is larger by its metadata\n"
    "  --max-size SIZE   most bytes the file may grow to, metadata included, fixed\n"
    "                    for the heap's life (default: just enough for --size);\n"
    "                    the metadata laid out for it stays sparse until used\n"
    "  --mode OCTAL      permission bits of the new file (default 0600)\n"
    "  --consistency log|gc\n"
    "                    fixed for the heap's life (default log).  log: every\n"
    "                    allocation and free is durable on return, recovery runs\n"
    "                    at open.  gc: small allocations and frees flush nothing;\n"
    "                    after a crash, `pheap recover` (or pheap_recover) keeps\n"
    "                    the blocks reachable from the roots and frees the rest;\n"
    "                    no transactions\n"
    "  SIZE takes a K, M, G or T suffix (binary multiples).\n";

/* "64.0 MiB": a size for people, in buf[32]. */
static const char *human(uint64_t n, char *buf)
{
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)n;
    unsigned u = 0;
    while (v >= 1024.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, 32, "%llu bytes", (unsigned long long)n);
    else
        snprintf(buf, 32, "%.1f %s", v, units[u]);
    return buf;
}

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
        } else if (!strcmp(argv[i], "--consistency") && i + 1 < argc) {
            const char *m = argv[++i];
            if (!strcmp(m, "log") || !strcmp(m, "LOG")) {
                o.consistency = PHEAP_CONSISTENCY_LOG;
            } else if (!strcmp(m, "gc") || !strcmp(m, "GC")) {
                o.consistency = PHEAP_CONSISTENCY_GC;
            } else {
                fprintf(stderr, "pheap: bad consistency mode '%s' (log or gc)\n", m);
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
    struct stat sb;
    char where[4096]; /* a heap name's file */
    if (pheap_path(path, where, sizeof(where)))
        snprintf(where, sizeof(where), "%s", path);
    uint64_t on_disk = stat(where, &sb) == 0 ? (uint64_t)sb.st_blocks * 512 : 0;
    char data[32], file[32], disk[32], max[32];
    printf("created %s\n"
           "  data region:  %llu bytes (%s) at offset %llu\n"
           "  file:         %llu bytes (%s), %s of it allocated on disk\n"
           "  growth limit: %llu bytes (%s), metadata included\n"
           "  consistency:  %s\n",
           where, (unsigned long long)st.data_size, human(st.data_size, data),
           (unsigned long long)st.data_offset, (unsigned long long)st.size, human(st.size, file),
           human(on_disk, disk), (unsigned long long)st.max_size, human(st.max_size, max),
           st.consistency == PHEAP_CONSISTENCY_GC
               ? "gc (after a crash, run `pheap recover` before allocating)"
               : "log (every allocation and free durable on return)");
    return 0;
}
