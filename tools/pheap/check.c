/*
 * check.c -- `pheap check PATH [--json]`: opens the heap read-write, so
 * that a heap left by a crash is recovered first, then runs the deep
 * consistency check of all metadata and prints its report.  Exit 0 when
 * consistent, 1 when a problem was found or the heap cannot be opened.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cmd_check(int argc, char **argv)
{
    const char *path;
    int json;
    static const char usage[] =
        "usage: pheap check PATH [--json]\n"
        "  Deep consistency check of the heap's metadata.  Opens the heap read-write\n"
        "  (recovery runs if it was not closed cleanly).\n"
        "  --json   one JSON object instead of text\n"
        "  Exit 0 when consistent, 1 when a problem was found or the heap does not open.\n";
    if (cli_help_asked(argc, argv))
        return cli_help(usage);
    pheap *h;
    int rc = cli_open_path(argc, argv, "check", usage, 0, &path, &json, &h);
    if (rc)
        return rc;
    struct pheap_stats st;
    pheap_stats(h, &st);
    pheap_check_report r;
    memset(&r, 0, sizeof(r));
    rc = pheap_check(h, &r);
    if (rc && !r.errors) { /* the check itself could not run */
        r.errors = 1;
        snprintf(r.first_error, sizeof(r.first_error), "%s", pheap_errmsg());
    }
    if (json) {
        printf("{\"path\": ");
        cli_json_string(path);
        printf(", \"consistent\": %s, \"errors\": %u, \"first_error\": ", r.errors ? "false" : "true",
               r.errors);
        cli_json_string(r.first_error);
        printf(", \"recovered\": %s, \"roots\": %u, \"live_blocks\": %llu, \"live_bytes\": %llu, "
               "\"slabs\": %llu, \"large_extents\": %llu, \"free_bytes\": %llu}\n",
               st.was_unclean ? "true" : "false", r.roots, (unsigned long long)r.live_blocks,
               (unsigned long long)r.live_bytes, (unsigned long long)r.slabs,
               (unsigned long long)r.large_extents, (unsigned long long)r.free_bytes);
    } else {
        printf("heap:          %s\n", path);
        printf("recovery:      %s\n", st.was_unclean ? "ran (the heap was not closed cleanly)"
                                                     : "not needed (closed cleanly)");
        if (r.errors)
            printf("result:        INCONSISTENT: %u problem(s); first: %s\n", r.errors,
                   r.first_error);
        else
            printf("result:        consistent (0 errors)\n");
        printf("roots:         %u\n", r.roots);
        printf("live blocks:   %llu (%llu bytes)\n", (unsigned long long)r.live_blocks,
               (unsigned long long)r.live_bytes);
        printf("slabs:         %llu\n", (unsigned long long)r.slabs);
        printf("large extents: %llu\n", (unsigned long long)r.large_extents);
        printf("free bytes:    %llu\n", (unsigned long long)r.free_bytes);
    }
    rc = pheap_close(h);
    if (rc)
        return cli_fail(path, rc);
    return r.errors ? 1 : 0;
}
