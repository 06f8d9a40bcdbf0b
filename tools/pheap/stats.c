/*
 * stats.c -- `pheap stats PATH [--json]`: how a heap's space is used, per
 * size class (classes holding slabs), in large extents and free, with the
 * fragmentation, the consistency mode, and the transactions a crash left
 * in flight.  Opened as a private snapshot (PHEAP_SNAPSHOT): nothing is
 * written; a heap left by a crash is shown as recovery will leave it, and
 * one another process holds read-write as it is at that moment, said so.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"


static double percent(uint64_t part, uint64_t whole)
{
    return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

/* Per class with slabs: its blocks used of those its slabs hold, and
 * the fragmentation inside them (the share of those blocks unused). */
static void print_classes(pheap *h, int json)
{
    int first = 1;
    for (unsigned c = 0; c < pheap_class_count(); c++) {
        pheap_class_info ci;
        if (pheap_stats_class(h, c, &ci) || ci.slabs == 0)
            continue;
        uint64_t available = ci.slabs * ci.blocks_per_slab;
        double frag = available ? 1.0 - (double)ci.live_blocks / (double)available : 0.0;
        if (json) {
            printf("%s{\"class\": %u, \"block_size\": %u, \"blocks_per_slab\": %u, \"slabs\": %llu, "
                   "\"live_blocks\": %llu, \"available_blocks\": %llu, \"fragmentation\": %.4f}",
                   first ? "" : ", ", c, ci.block_size, ci.blocks_per_slab,
                   (unsigned long long)ci.slabs, (unsigned long long)ci.live_blocks,
                   (unsigned long long)available, frag);
        } else {
            if (first)
                printf("  class  block size  blocks/slab  slabs  live blocks  of blocks   used  "
                       "unused bytes\n");
            printf("  %5u  %10u  %11u  %5llu  %11llu  %9llu  %5.1f%%  %12llu\n", c, ci.block_size,
                   ci.blocks_per_slab, (unsigned long long)ci.slabs,
                   (unsigned long long)ci.live_blocks, (unsigned long long)available,
                   percent(ci.live_blocks, available),
                   (unsigned long long)((available - ci.live_blocks) * ci.block_size));
        }
        first = 0;
    }
    if (first && !json)
        printf("  (no slabs)\n");
}

/* The transactions a crash left in flight, as recovery treats them: in
 * the private view of this open, as the next read-write open will. */
static void print_transactions(const struct pheap_stats *st)
{
    unsigned long long back = (unsigned long long)st->tx_rolled_back,
                       fwd = (unsigned long long)st->tx_rolled_forward;
    if (st->consistency == PHEAP_CONSISTENCY_GC)
        printf("transactions:   none (a GC heap has no transactions)\n");
    else if (st->held_elsewhere)
        printf("transactions:   not known (no recovery ran on this snapshot)\n");
    else if (!st->was_unclean)
        printf("transactions:   none in flight (closed cleanly)\n");
    else if (back + fwd == 0)
        printf("transactions:   none in flight at the crash\n");
    else
        printf("transactions:   %llu in flight at the crash: recovery rolls %llu back (uncommitted) "
               "and %llu forward (committed)\n", back + fwd, back, fwd);
}

/* Below this many bytes in slabs and extents, the share of them without
 * live data says more about the slab size than about fragmentation. */
#define FRAG_MIN_HELD (4ull << 20)

int cmd_stats(int argc, char **argv)
{
    const char *path;
    int json;
    pheap *h;
    static const char usage[] =
        "usage: pheap stats PATH [--json]\n"
        "  How the heap's space is used: per size class (blocks used of those its\n"
        "  slabs hold: the fragmentation inside them), in large extents and free,\n"
        "  with the fragmentation; after a crash, how many transactions recovery rolls\n"
        "  back and forward; the consistency mode, and for a GC heap left by a crash\n"
        "  that it needs `pheap recover`.  Read-only: the file is never written.  A heap another\n"
        "  process holds open read-write is shown as a snapshot taken while it may\n"
        "  change.\n"
        "  --json   one JSON object instead of text (an error object on failure)\n";
    if (cli_help_asked(argc, argv))
        return cli_help(usage);
    int rc = cli_open_path(argc, argv, "stats", usage, PHEAP_SNAPSHOT, &path, &json, &h);
    if (rc)
        return rc;
    struct pheap_stats st;
    rc = pheap_stats(h, &st);
    if (rc) {
        cli_fail_json(path, rc, json);
        pheap_close(h);
        return 1;
    }
    double frag = isfinite(st.fragmentation) ? st.fragmentation : 0.0;
    char b1[48], b2[48];
    if (json) {
        printf("{\"path\": ");
        cli_json_string(path);
        printf(", \"state\": \"%s\", \"held_elsewhere\": %s, \"consistency\": \"%s\", "
               "\"needs_recovery\": %s, \"size\": %llu, \"max_size\": %llu, \"data_size\": %llu, "
               "\"live_blocks\": %llu, \"live_bytes\": %llu, \"classes\": [",
               st.held_elsewhere ? "open elsewhere" : st.was_unclean ? "dirty" : "clean",
               st.held_elsewhere ? "true" : "false", cli_consistency_name(st.consistency),
               st.needs_recovery ? "true" : "false", (unsigned long long)st.size,
               (unsigned long long)st.max_size, (unsigned long long)st.data_size,
               (unsigned long long)st.live_blocks, (unsigned long long)st.live_bytes);
        print_classes(h, 1);
        printf("], \"slabs\": %llu, \"slab_bytes\": %llu, \"large_extents\": %llu, "
               "\"large_bytes\": %llu, \"free_bytes\": %llu, \"largest_free\": %llu, "
               "\"largest_alloc\": %llu, \"file_bytes\": %llu, \"morphing\": %s, "
               "\"morphed_slabs\": %llu, \"old_blocks\": %llu, \"fragmentation\": ",
               (unsigned long long)st.slabs, (unsigned long long)st.slab_bytes,
               (unsigned long long)st.large_extents, (unsigned long long)st.large_bytes,
               (unsigned long long)st.free_bytes, (unsigned long long)st.largest_free,
               (unsigned long long)st.largest_alloc, (unsigned long long)st.file_bytes,
               st.morphing ? "true" : "false", (unsigned long long)st.morphed_slabs,
               (unsigned long long)st.old_blocks);
        if (st.slab_bytes + st.large_bytes < FRAG_MIN_HELD)
            printf("null"); /* not measured, as in the text */
        else
            printf("%.4f", frag);
        /* Every transaction counter of pheap_stats: those of this handle
         * are 0 (the tool runs no transaction), the recovery's are what the
         * open found left in flight by a crash. */
        printf(", \"tx_commits\": %llu, \"tx_aborts\": %llu, \"tx_fences\": %llu, "
               "\"tx_rolled_back\": %llu, \"tx_rolled_forward\": %llu",
               (unsigned long long)st.tx_commits, (unsigned long long)st.tx_aborts,
               (unsigned long long)st.tx_fences, (unsigned long long)st.tx_rolled_back,
               (unsigned long long)st.tx_rolled_forward);
        /* The collection counters of pheap_stats, of this handle too: 0
         * (the tool traces nothing here; pheap recover and pheap gc report
         * their own runs). */
        printf(", \"gc_runs\": %llu, \"gc_marked_blocks\": %llu, \"gc_freed_blocks\": %llu, "
               "\"gc_freed_bytes\": %llu, \"gc_elapsed_ns\": %llu, \"gc_time\": %llu, "
               "\"gc_double_frees\": %llu, \"takeovers\": %llu}\n",
               (unsigned long long)st.gc_runs, (unsigned long long)st.gc_marked_blocks,
               (unsigned long long)st.gc_freed_blocks, (unsigned long long)st.gc_freed_bytes,
               (unsigned long long)st.gc_elapsed_ns, (unsigned long long)st.gc_time,
               (unsigned long long)st.gc_double_frees, (unsigned long long)st.heap_takeovers);
        pheap_close(h);
        return 0;
    }
    printf("heap:           %s%s\n", path,
           st.held_elsewhere ? " (" CLI_HELD_NOTE ")"
           : st.needs_recovery
               ? " (GC mode, not closed cleanly: needs `pheap recover`, which keeps the blocks the "
                 "roots reach and frees the rest; until then small blocks are counted as at the "
                 "last clean close)"
           : st.was_unclean  ? " (not closed cleanly: figures as recovery will leave them; the "
                               "file is unchanged, recovery runs at the next read-write open)"
                             : "");
    printf("consistency:    %s\n", st.consistency == PHEAP_CONSISTENCY_GC
                                        ? "gc (small allocations and frees flush nothing)"
                                        : "log (every allocation and free durable on return)");
    print_transactions(&st);
    if (st.heap_takeovers)
        printf("takeovers:      %llu dead processes taken over by the processes sharing the heap\n",
               (unsigned long long)st.heap_takeovers);
    printf("size:           %s of at most %s\n", cli_bytes(b1, st.size), cli_bytes(b2, st.max_size));
    printf("data region:    %s\n", cli_bytes(b1, st.data_size));
    printf("live:           %llu blocks, %s\n", (unsigned long long)st.live_blocks,
           cli_bytes(b1, st.live_bytes));
    printf("size classes with slabs:\n");
    print_classes(h, 0);
    printf("slabs:          %llu, %s (%.1f%% of the data region)\n", (unsigned long long)st.slabs,
           cli_bytes(b1, st.slab_bytes), percent(st.slab_bytes, st.data_size));
    if (st.morphed_slabs)
        printf("morphed slabs:  %llu hold %llu blocks of the class they had before they changed "
               "size class\n", (unsigned long long)st.morphed_slabs,
               (unsigned long long)st.old_blocks);
    printf("morphing:       %s\n", st.morphing ? "on (slabs at most a quarter full change size class "
                                                  "when another class needs one)"
                                               : st.consistency == PHEAP_CONSISTENCY_GC
                                                     ? "off (GC mode)"
                                                     : "off (a heap of format 1.6 or before, or "
                                                       "PHEAP_MORPH=0)");
    printf("large extents:  %llu, %s (%.1f%%)\n", (unsigned long long)st.large_extents,
           cli_bytes(b1, st.large_bytes), percent(st.large_bytes, st.data_size));
    printf("free:           %s (%.1f%%), largest free extent %s\n", cli_bytes(b1, st.free_bytes),
           percent(st.free_bytes, st.data_size), cli_bytes(b2, st.largest_free));
    printf("largest block:  %s can be allocated now (free space, or growth up to the maximum)\n",
           cli_bytes(b1, st.largest_alloc));
    printf("file:           %s on storage for a length of %s (sparse metadata, punched holes)\n",
           cli_bytes(b1, st.file_bytes), cli_bytes(b2, st.size));
    if (st.slab_bytes + st.large_bytes < FRAG_MIN_HELD)
        printf("fragmentation:  not measured: less than %llu MiB in slabs and extents (every "
               "size class in use holds at least one 64 KiB slab)\n", FRAG_MIN_HELD >> 20);
    else
        printf("fragmentation:  %.1f%% of slab and extent bytes hold no live data\n", 100.0 * frag);
    pheap_close(h);
    return 0;
}
