/*
 * check.c -- `pheap check PATH [--repair] [--json]`: the deep consistency
 * check of all metadata.  By default read-only: the heap is opened as a
 * private snapshot (PHEAP_SNAPSHOT), so the file is never written, a heap
 * the user may only read is checked, and a heap that was not closed
 * cleanly is checked as recovery would leave it, with what recovery would
 * do.  --repair opens it read-write: recovery runs, then the check.  A
 * GC-mode heap left by a crash needs pheap_recover, which the open does
 * not run: --repair runs it (tracing conservatively, as `pheap recover`);
 * read-only, the check sees the bitmaps of the last clean close, and says
 * so.
 * Exit 0 when consistent, 1 when a problem was found or the heap cannot
 * be opened or checked, 2 on bad usage.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: pheap check PATH [--repair] [--json]\n"
    "  Deep consistency check of the heap's metadata.  Read-only by default: the\n"
    "  file is never written.  If the heap was not closed cleanly, check says what\n"
    "  recovery would do (logged operations and transactions it rolls back or\n"
    "  forward) and checks the heap as recovery would leave it.\n"
    "  --repair  open it read-write instead: recovery runs (and is written), then\n"
    "            the check; a GC heap left by a crash is recovered by tracing its\n"
    "            roots conservatively, as pheap recover does\n"
    "  --json    one JSON object instead of text (an error object on failure)\n"
    "  Exit 0 when consistent, 1 when a problem was found or the heap does not open.\n";

/* "N transaction(s) to roll back and M to roll forward" into buf[128]:
 * the transactions a crash left in flight. */
static const char *tx_words(char *buf, const struct pheap_stats *st, const char *verb)
{
    unsigned long long back = (unsigned long long)st->tx_rolled_back,
                       fwd = (unsigned long long)st->tx_rolled_forward;
    snprintf(buf, 128, "%llu transaction%s %s back and %llu forward", back, back == 1 ? "" : "s",
             verb, fwd);
    return buf;
}

/* What recovery did or would do, in words; `gc` is the report of the
 * recovery of a GC heap that --repair ran. */
static void print_recovery(const struct pheap_stats *st, int repair, const pheap_gc_report *gc)
{
    unsigned long long n = (unsigned long long)st->recovered_ops;
    char tx[128];
    if (!st->was_unclean)
        printf("recovery:      not needed (closed cleanly)\n");
    else if (st->needs_recovery && repair)
        printf("recovery:      ran (GC mode, not closed cleanly): the roots traced conservatively, "
               "%llu reachable block%s kept, %llu freed\n", (unsigned long long)gc->marked_blocks,
               gc->marked_blocks == 1 ? "" : "s", (unsigned long long)gc->freed_blocks);
    else if (st->needs_recovery)
        printf("recovery:      needed (GC mode, not closed cleanly): pheap recover (or --repair) "
               "traces the roots; until then the slab bitmaps are those of the last clean close, "
               "and blocks allocated since look free to the check (a root naming one is reported "
               "as dangling)\n");
    else if (repair)
        printf("recovery:      ran (the heap was not closed cleanly): %llu logged operation%s "
               "rolled forward, %s\n", n, n == 1 ? "" : "s", tx_words(tx, st, "rolled"));
    else
        printf("recovery:      needed (the heap was not closed cleanly): %llu logged operation%s "
               "to roll forward, %s; checked as recovery will leave it, the file unchanged "
               "(--repair recovers it)\n", n, n == 1 ? "" : "s", tx_words(tx, st, "to roll"));
}

static void print_report(const char *path, const struct pheap_stats *st, const pheap_check_report *r,
                         int repair, const pheap_gc_report *gc, int json)
{
    if (json) {
        printf("{\"path\": ");
        cli_json_string(path);
        printf(", \"mode\": \"%s\", \"consistent\": %s, \"errors\": %u, \"first_error\": ",
               repair ? "repair" : "read-only", r->errors ? "false" : "true", r->errors);
        cli_json_string(r->first_error);
        printf(", \"consistency\": \"%s\", \"needs_recovery\": %s",
               cli_consistency_name(st->consistency),
               st->needs_recovery && !repair ? "true" : "false");
        printf(", \"recovery_needed\": %s, \"recovered\": %s, \"rolled_forward\": %llu, "
               "\"tx_rolled_back\": %llu, \"tx_rolled_forward\": %llu, "
               "\"roots\": %u, \"live_blocks\": %llu, \"live_bytes\": %llu, \"slabs\": %llu, "
               "\"large_extents\": %llu, \"free_bytes\": %llu, \"damaged_chunks\": %llu}\n",
               st->was_unclean && !repair ? "true" : "false",
               st->was_unclean && repair ? "true" : "false", (unsigned long long)st->recovered_ops,
               (unsigned long long)st->tx_rolled_back, (unsigned long long)st->tx_rolled_forward,
               r->roots, (unsigned long long)r->live_blocks, (unsigned long long)r->live_bytes,
               (unsigned long long)r->slabs, (unsigned long long)r->large_extents,
               (unsigned long long)r->free_bytes, (unsigned long long)r->damaged_chunks);
        return;
    }
    printf("heap:          %s\n", path);
    printf("mode:          %s\n", repair ? "repair (opened read-write)"
                                          : "read-only (the file is not written)");
    print_recovery(st, repair, gc);
    if (r->errors)
        printf("result:        INCONSISTENT: %u problem(s); first: %s\n", r->errors, r->first_error);
    else
        printf("result:        consistent (0 errors)\n");
    printf("roots:         %u\n", r->roots);
    printf("live blocks:   %llu (%llu bytes)\n", (unsigned long long)r->live_blocks,
           (unsigned long long)r->live_bytes);
    printf("slabs:         %llu\n", (unsigned long long)r->slabs);
    printf("large extents: %llu\n", (unsigned long long)r->large_extents);
    printf("free bytes:    %llu\n", (unsigned long long)r->free_bytes);
    if (r->damaged_chunks) /* a clean open does not read these */
        printf("damaged chunks: %llu (no slab, but their descriptors record allocated blocks: a "
               "slab the extent log lost; allocations set them aside)\n",
               (unsigned long long)r->damaged_chunks);
}

int cmd_check(int argc, char **argv)
{
    const char *path;
    int json, repair;
    if (cli_help_asked(argc, argv))
        return cli_help(usage);
    int rc = cli_parse_path(argc, argv, "check", usage, "--repair", &path, &json, &repair);
    if (rc)
        return rc;
    pheap *h;
    pheap_options o = {.flags = repair ? 0 : PHEAP_SNAPSHOT};
    rc = pheap_open(path, &o, &h);
    if (rc) {
        if (rc == PHEAP_ECORRUPT && !json)
            printf("heap:          %s\nresult:        INCONSISTENT: the heap does not open\n", path);
        return cli_fail_json(path, rc, json);
    }
    struct pheap_stats st;
    pheap_stats(h, &st);
    if (st.held_elsewhere) {
        /* Its owner may change it under the check: findings would not be
         * the heap's. */
        pheap_close(h);
        char msg[1024];
        snprintf(msg, sizeof(msg), "%s is open read-write in another process; check needs it "
                 "closed (pheap info and pheap stats show a snapshot)", path);
        return cli_error(PHEAP_EBUSY, msg, json);
    }
    pheap_gc_report gc;
    memset(&gc, 0, sizeof(gc));
    if (st.needs_recovery && repair && (rc = pheap_recover_ex(h, NULL, &gc)) != 0) {
        rc = cli_fail_json(path, rc, json);
        pheap_close(h);
        return rc;
    }
    pheap_check_report r;
    memset(&r, 0, sizeof(r));
    rc = pheap_check(h, &r);
    if (rc && !r.errors) { /* the check itself could not run */
        rc = cli_fail_json(path, rc, json);
        pheap_close(h);
        return rc;
    }
    print_report(path, &st, &r, repair, &gc, json);
    rc = pheap_close(h);
    if (rc)
        return cli_fail(path, rc);
    return r.errors ? 1 : 0;
}
