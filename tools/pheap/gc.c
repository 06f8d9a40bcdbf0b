/*
 * gc.c -- `pheap recover PATH [--threads N] [--json]` and
 * `pheap gc PATH [--dry-run] [--threads N] [--json]`: tracing from the
 * roots, conservatively (a program's filters live in the program, not in
 * the file).
 *   recover  a GC heap left by a crash: keeps the blocks the roots reach,
 *            frees the rest, and closes the heap cleanly.  Nothing to do on
 *            a LOG heap (its recovery runs at every open) or a clean heap.
 *   gc       leak collection in either mode: frees the allocated blocks no
 *            root reaches (--dry-run: only counts them).  A GC heap that
 *            needs recovery is refused: recover collects as it recovers.
 * Both open the heap read-write, show a progress bar on stderr when it is
 * a terminal, and print what they found.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define THREADS_MAX 64u /* the library's limit on marking threads */

static const char recover_usage[] =
    "usage: pheap recover PATH [--threads N] [--json]\n"
    "  Recovers a GC-mode heap left by a crash: traces the blocks reachable from\n"
    "  the roots, keeps exactly those and frees every other block, then closes the\n"
    "  heap cleanly so that programs may allocate again.  Nothing to do on a heap\n"
    "  closed cleanly, nor on a LOG heap (its recovery runs whenever it opens).\n"
    "  Opens the heap read-write: no program may hold it.\n"
    "  Tracing is conservative: every aligned 8-byte word of a reachable block that\n"
    "  holds the offset of a block's start keeps that block.  The tool cannot know\n"
    "  a program's filters (pheap_root_set_filter): links stored as tagged words or\n"
    "  indices are not followed, and what they alone reach is freed.  A program\n"
    "  that uses filters must call pheap_recover itself, with them registered.\n"
    "  --threads N  marking threads, 1 to 64 (default: one per CPU, at most 64)\n"
    "  --json       one JSON object instead of text (an error object on failure)\n"
    "  A progress bar goes to stderr when it is a terminal.\n"
    "  Exit 0 when the heap is recovered or needed nothing, 1 when it failed.\n";

static const char gc_usage[] =
    "usage: pheap gc PATH [--dry-run] [--threads N] [--json]\n"
    "  Collects leaks, in either consistency mode: frees every allocated block that\n"
    "  no root reaches (a block a program allocated and crashed before linking, a\n"
    "  structure cut off by a bug).  Each free is durable; a crash during the\n"
    "  collection leaves some garbage freed and the rest allocated, never a\n"
    "  reachable block freed.  Opens the heap read-write: no program may hold it.\n"
    "  Tracing is conservative, as for pheap recover: links a program stores as\n"
    "  tagged words or indices are not followed, and what only they reach counts as\n"
    "  garbage -- use --dry-run first on such a heap, or pheap_gc in the program.\n"
    "  A GC heap left by a crash is refused (exit 1): run pheap recover, which\n"
    "  collects as it recovers.\n"
    "  --dry-run    count what would be freed, free nothing\n"
    "  --threads N  marking threads, 1 to 64 (default: one per CPU, at most 64)\n"
    "  --json       one JSON object instead of text (an error object on failure)\n"
    "  A progress bar goes to stderr when it is a terminal.\n"
    "  Exit 0 when the collection ran, 1 when it failed.\n";

typedef struct args {
    const char *path;
    int json, dry_run;
    unsigned threads;
} args;

/* Parses PATH [--dry-run] [--threads N] [--json]; --dry-run only when
 * `dry_ok`.  0, or the exit status 2 after saying why. */
static int parse(int argc, char **argv, const char *cmd, const char *usage, int dry_ok, args *a)
{
    memset(a, 0, sizeof(*a));
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--json"))
            a->json = 1;
    char msg[300];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            continue;
        } else if (dry_ok && !strcmp(argv[i], "--dry-run")) {
            a->dry_run = 1;
        } else if (!strcmp(argv[i], "--threads")) {
            const char *v = i + 1 < argc ? argv[++i] : "";
            char *end;
            errno = 0;
            unsigned long n = strtoul(v, &end, 10);
            if (!*v || *v == '-' || *end || errno || n < 1 || n > THREADS_MAX) {
                snprintf(msg, sizeof(msg), "pheap %s: bad thread count '%s' (1 to %u)", cmd, v,
                         THREADS_MAX);
                return cli_usage_error(msg, a->json);
            }
            a->threads = (unsigned)n;
        } else if (argv[i][0] != '-' && !a->path) {
            a->path = argv[i];
        } else {
            snprintf(msg, sizeof(msg), "pheap %s: unexpected argument '%s'", cmd, argv[i]);
            return cli_usage_error(msg, a->json);
        }
    }
    if (!a->path) {
        fprintf(stderr, "%s", usage);
        snprintf(msg, sizeof(msg), "pheap %s: no heap file given", cmd);
        if (a->json)
            return cli_usage_error(msg, 1);
        return 2;
    }
    return 0;
}

/* ---- progress bar ------------------------------------------------------------------ */

#define BAR_WIDTH 30

typedef struct bar {
    int shown; /* a line is on the terminal */
} bar;

static void on_progress(void *arg, const char *phase, uint64_t done, uint64_t total)
{
    bar *b = arg;
    char line[128];
    if (total) {
        unsigned fill = (unsigned)(done >= total ? BAR_WIDTH : done * BAR_WIDTH / total);
        char cells[BAR_WIDTH + 1];
        memset(cells, '#', fill);
        memset(cells + fill, '.', BAR_WIDTH - fill);
        cells[BAR_WIDTH] = '\0';
        snprintf(line, sizeof(line), "%-5s [%s] %3u%%", phase, cells,
                 (unsigned)(done >= total ? 100 : done * 100 / total));
    } else {
        snprintf(line, sizeof(line), "%-5s %llu blocks", phase, (unsigned long long)done);
    }
    /* \r, the line, then clear what a longer line left to its right */
    fprintf(stderr, "\r%s\033[K", line);
    fflush(stderr);
    b->shown = 1;
}

static void bar_end(bar *b)
{
    if (b->shown)
        fprintf(stderr, "\r\033[K");
    b->shown = 0;
}

/* ---- reports ----------------------------------------------------------------------- */


static void json_report(const pheap_gc_report *r)
{
    printf("\"marked_blocks\": %llu, \"marked_bytes\": %llu, \"freed_blocks\": %llu, "
           "\"freed_bytes\": %llu, \"bad_refs\": %llu, \"threads\": %u, \"elapsed_ns\": %llu",
           (unsigned long long)r->marked_blocks, (unsigned long long)r->marked_bytes,
           (unsigned long long)r->freed_blocks, (unsigned long long)r->freed_bytes,
           (unsigned long long)r->bad_refs, r->threads, (unsigned long long)r->elapsed_ns);
}

/* The figures of a trace, as text: `freed` says what happened to garbage. */
static void text_report(const pheap_gc_report *r, const char *freed)
{
    char b[48];
    printf("reachable:     %llu blocks, %s\n", (unsigned long long)r->marked_blocks,
           cli_bytes(b, r->marked_bytes));
    printf("%-14s %llu blocks, %s\n", freed, (unsigned long long)r->freed_blocks,
           cli_bytes(b, r->freed_bytes));
    printf("bad refs:      %llu%s\n", (unsigned long long)r->bad_refs,
           r->bad_refs ? " (roots naming no block's start: ignored)" : "");
    printf("threads:       %u\n", r->threads);
    printf("time:          %.3f ms\n", (double)r->elapsed_ns / 1e6);
    printf("tracing:       conservative (links stored as tagged words or indices are not "
           "followed)\n");
}

static int open_rw(const args *a, pheap **h)
{
    pheap_options o = {0};
    int rc = pheap_open(a->path, &o, h);
    return rc ? cli_fail_json(a->path, rc, a->json) : 0;
}

/* Closes h cleanly before anything is printed, so that the output is
 * either the report or the error: 0, or 1 after reporting the failure. */
static int close_heap(pheap *h, const args *a)
{
    int rc = pheap_close(h);
    return rc ? cli_fail_json(a->path, rc, a->json) : 0;
}

/* Runs a recovery or a collection with a progress bar on a terminal: 0,
 * or the library's code. */
static int run_trace(pheap *h, const args *a, int recover, pheap_gc_report *r)
{
    bar b = {0};
    pheap_gc_options go = {.flags = a->dry_run ? PHEAP_GC_DRY_RUN : 0, .threads = a->threads};
    if (isatty(STDERR_FILENO)) {
        go.progress = on_progress;
        go.progress_arg = &b;
    }
    memset(r, 0, sizeof(*r));
    int rc = recover ? pheap_recover_ex(h, &go, r) : pheap_gc_ex(h, &go, r);
    bar_end(&b);
    return rc;
}

/* Help, arguments and the read-write open of `recover` and `gc`: 0 with
 * *h open, -1 after printing the help, or the exit status of a failure. */
static int start(int argc, char **argv, const char *cmd, const char *usage, int dry_run_ok,
                 args *a, pheap **h)
{
    if (cli_help_asked(argc, argv)) {
        cli_help(usage);
        return -1;
    }
    int rc = parse(argc, argv, cmd, usage, dry_run_ok, a);
    return rc ? rc : open_rw(a, h);
}

/* ---- recover ----------------------------------------------------------------------- */

int cmd_recover(int argc, char **argv)
{
    args a;
    pheap *h;
    int rc = start(argc, argv, "recover", recover_usage, 0, &a, &h);
    if (rc)
        return rc < 0 ? 0 : rc;
    struct pheap_stats st;
    pheap_stats(h, &st);
    int needed = st.needs_recovery != 0;
    pheap_gc_report r;
    memset(&r, 0, sizeof(r));
    if (needed) {
        if ((rc = run_trace(h, &a, 1, &r)) != 0) {
            rc = cli_fail_json(a.path, rc, a.json);
            pheap_close(h);
            return rc;
        }
        pheap_stats(h, &st);
    }
    if ((rc = close_heap(h, &a)) != 0)
        return rc;
    const char *mode = cli_consistency_name(st.consistency);
    if (a.json) {
        printf("{\"path\": ");
        cli_json_string(a.path);
        printf(", \"consistency\": \"%s\", \"needed\": %s, \"recovered\": %s, ", mode,
               needed ? "true" : "false", needed ? "true" : "false");
        json_report(&r);
        printf(", \"tracing\": \"conservative\", \"live_blocks\": %llu, \"live_bytes\": %llu, "
               "\"was_unclean\": %s, \"recovered_ops\": %llu, \"tx_rolled_back\": %llu, "
               "\"tx_rolled_forward\": %llu}\n",
               (unsigned long long)st.live_blocks, (unsigned long long)st.live_bytes,
               st.was_unclean ? "true" : "false", (unsigned long long)st.recovered_ops,
               (unsigned long long)st.tx_rolled_back, (unsigned long long)st.tx_rolled_forward);
    } else {
        printf("heap:          %s\nconsistency:   %s\n", a.path, mode);
        if (needed) {
            printf("recovery:      ran (the heap was not closed cleanly): the blocks the roots "
                   "reach are kept, every other block is free\n");
            text_report(&r, "freed:");
            printf("live now:      %llu blocks\n", (unsigned long long)st.live_blocks);
        } else if (st.consistency != PHEAP_CONSISTENCY_GC && st.was_unclean) {
            unsigned long long n = (unsigned long long)st.recovered_ops;
            printf("recovery:      not needed: a LOG heap recovers whenever it opens; this open "
                   "found it not closed cleanly and rolled %llu logged operation%s forward, "
                   "%llu transaction%s back and %llu forward\n",
                   n, n == 1 ? "" : "s", (unsigned long long)st.tx_rolled_back,
                   st.tx_rolled_back == 1 ? "" : "s", (unsigned long long)st.tx_rolled_forward);
        } else if (st.consistency != PHEAP_CONSISTENCY_GC) {
            printf("recovery:      not needed: closed cleanly (a LOG heap recovers whenever it "
                   "opens)\n");
        } else {
            printf("recovery:      not needed: closed cleanly\n");
        }
    }
    return 0;
}

/* ---- gc ---------------------------------------------------------------------------- */

int cmd_gc(int argc, char **argv)
{
    args a;
    pheap *h;
    int rc = start(argc, argv, "gc", gc_usage, 1, &a, &h);
    if (rc)
        return rc < 0 ? 0 : rc;
    pheap_gc_report r;
    if ((rc = run_trace(h, &a, 0, &r)) != 0) {
        if (rc == PHEAP_ERECOVER) {
            char msg[1200];
            snprintf(msg, sizeof(msg), "%s: a GC heap that was not closed cleanly: run `pheap "
                     "recover %s` (it collects as it recovers)", a.path, a.path);
            rc = cli_error(rc, msg, a.json);
        } else {
            rc = cli_fail_json(a.path, rc, a.json);
        }
        pheap_close(h); /* leaves it as it was */
        return rc;
    }
    struct pheap_stats st;
    pheap_stats(h, &st);
    if ((rc = close_heap(h, &a)) != 0)
        return rc;
    const char *mode = cli_consistency_name(st.consistency);
    if (a.json) {
        printf("{\"path\": ");
        cli_json_string(a.path);
        printf(", \"consistency\": \"%s\", \"dry_run\": %s, ", mode, a.dry_run ? "true" : "false");
        json_report(&r);
        printf(", \"tracing\": \"conservative\", \"live_blocks\": %llu, \"live_bytes\": %llu}\n",
               (unsigned long long)st.live_blocks, (unsigned long long)st.live_bytes);
    } else {
        printf("heap:          %s\nconsistency:   %s\n", a.path, mode);
        printf("collection:    %s\n", a.dry_run ? "dry run: nothing freed"
                                                : "ran: every block no root reaches is freed");
        text_report(&r, a.dry_run ? "would free:" : "freed:");
        printf("live now:      %llu blocks\n", (unsigned long long)st.live_blocks);
    }
    return 0;
}
