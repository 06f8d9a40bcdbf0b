/*
 * info.c -- `pheap info PATH [--json]`: version, sizes, uuid, consistency
 * mode, owner and access mode, clean or dirty, the processes holding it
 * read-write, and roots of a heap, opened as a private snapshot
 * (PHEAP_SNAPSHOT): nothing is written, and a heap that another process
 * holds read-write is shown as it is at that moment, said so.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* The processes holding the heap read-write (pheap_procs): a text line
 * each, or a JSON array (null when the heap records none: before 1.6). */
/* What the checkpoint level left: a working copy (which copy the next
 * read-write open starts from) and the journal. */
static void print_checkpoint(const char *path, int json)
{
    pheap_checkpoint_info ci;
    if (pheap_checkpoint_info_get(path, &ci) != 0)
        return;
    static const char *const journal[] = {"none", "applied", "committed"};
    if (json) {
        printf(", \"working_copy\": ");
        if (ci.working_copy)
            cli_json_string(ci.working_copy_path);
        else
            printf("null");
        printf(", \"journal\": \"%s\", \"checkpoints\": %llu", journal[ci.journal],
               (unsigned long long)ci.checkpoints);
        return;
    }
    if (!ci.working_copy && ci.journal == PHEAP_JOURNAL_NONE)
        return; /* never at the checkpoint level */
    printf("checkpoints: %llu through the journal%s\n", (unsigned long long)ci.checkpoints,
           ci.journal == PHEAP_JOURNAL_COMMITTED
               ? "; the last one was cut short before it was all in the file: the next "
                 "read-write open completes it"
               : "");
    if (ci.working_copy)
        printf("working copy: %s (held by a process at the checkpoint level, or left by one "
               "that crashed: the next read-write open resumes from it; this file is the last "
               "checkpoint)\n", ci.working_copy_path);
}

static void print_procs(const char *path, int json)
{
    pheap_proc p[64];
    int n = pheap_procs(path, p, 64);
    if (n > 64)
        n = 64;
    if (json) {
        printf(", \"processes\": ");
        if (n < 0) {
            printf("null");
            return;
        }
        printf("[");
        for (int i = 0; i < n; i++) {
            printf("%s{\"pid\": %lld, \"name\": ", i ? ", " : "", (long long)p[i].pid);
            cli_json_string(p[i].comm);
            printf(", \"uid\": %u, \"exclusive\": %s, \"shared\": %s, \"since\": ", p[i].uid,
                   p[i].flags & PHEAP_PROC_EXCLUSIVE ? "true" : "false",
                   p[i].flags & PHEAP_PROC_SHARED ? "true" : "false");
            cli_json_time((uint64_t)p[i].since);
            printf("}");
        }
        printf("]");
        return;
    }
    if (n < 0) {
        printf("processes:   not recorded (%s)\n",
               n == PHEAP_ENOTSUP ? "the heap's format predates the process table" : pheap_errmsg());
        return;
    }
    if (n == 0)
        printf("processes:   none holds it read-write\n");
    for (int i = 0; i < n; i++) {
        char when[32];
        printf("%s%lld (%s), read-write%s since %s\n", i ? "             " : "processes:   ",
               (long long)p[i].pid, p[i].comm[0] ? p[i].comm : "?",
               p[i].flags & PHEAP_PROC_EXCLUSIVE ? " exclusive"
               : p[i].flags & PHEAP_PROC_SHARED  ? " shared"
                                                 : "",
               cli_time(when, (uint64_t)p[i].since));
    }
}

int cmd_info(int argc, char **argv)
{
    const char *path;
    int json;
    pheap *h;
    static const char usage[] =
        "usage: pheap info PATH [--json]\n"
        "  Format, uuid, sizes, consistency mode, owner, access mode, state, the number\n"
        "  of named objects, the processes holding it read-write, what the checkpoint\n"
        "  level left (a working copy, the journal) and the roots of the heap.\n"
        "  Read-only: the file is never\n"
        "  written.  A heap another process holds open read-write is shown as a\n"
        "  snapshot taken while it may change.\n"
        "  --json   one JSON object instead of text (an error object on failure)\n";
    if (cli_help_asked(argc, argv))
        return cli_help(usage);
    int rc = cli_open_path(argc, argv, "info", usage, PHEAP_SNAPSHOT, &path, &json, &h);
    if (rc)
        return rc;
    struct pheap_stats st;
    pheap_stats(h, &st);
    char uuid[37];
    cli_format_uuid(st.uuid, uuid);
    const char *state = st.held_elsewhere ? "open elsewhere" : st.was_unclean ? "dirty" : "clean";
    unsigned n = pheap_root_count(h);
    char when[32], file[4096], owner[96];
    if (pheap_path(path, file, sizeof(file)))
        snprintf(file, sizeof(file), "%s", path);
    if (json) {
        printf("{\"path\": ");
        cli_json_string(path);
        printf(", \"format\": \"%u.%u\", \"library\": \"%s\", \"uuid\": \"%s\", "
               "\"size\": %llu, \"max_size\": %llu, \"data_offset\": %llu, \"data_size\": %llu, "
               "\"state\": \"%s\", \"open_count\": %llu, \"unclean_count\": %llu, "
               "\"flush\": \"%s\", \"flush_source\": \"%s\", \"power_safe\": %s, \"dax\": %s, "
               "\"held_elsewhere\": %s, \"consistency\": \"%s\", \"needs_recovery\": %s, "
               "\"protection\": \"%s\", ",
               st.format_major, st.format_minor, pheap_version(), uuid, (unsigned long long)st.size,
               (unsigned long long)st.max_size, (unsigned long long)st.data_offset,
               (unsigned long long)st.data_size, state, (unsigned long long)st.open_count,
               (unsigned long long)st.unclean_count, pheap_flush_name(st.flush),
               pheap_flush_source_name(st.flush_source), st.power_safe ? "true" : "false",
               st.dax ? "true" : "false", st.held_elsewhere ? "true" : "false",
               cli_consistency_name(st.consistency), st.needs_recovery ? "true" : "false",
               pheap_protect_name(st.protection));
        printf("\"mode\": \"%s\", \"owner_uid\": ", cli_mode_name(st.mode));
        if (st.owner_known)
            printf("%llu", (unsigned long long)st.owner_uid);
        else
            printf("null");
        char user[64];
        printf(", \"owner\": ");
        if (st.owner_known && cli_user_name((uint32_t)st.owner_uid, user, sizeof(user)) == 0)
            cli_json_string(user);
        else
            printf("null");
        printf(", \"file\": ");
        cli_json_string(file);
        printf(", \"last_open\": ");
        cli_json_time(st.last_open);
        print_procs(path, 1);
        print_checkpoint(path, 1);
        printf(", \"names\": %llu, \"roots\": [", (unsigned long long)st.names);
    } else {
        printf("heap:        %s\nformat:      %u.%u (library %s)\nuuid:        %s\n"
               "%s%s%s"
               "size:        %llu bytes (max %llu)\ndata:        %llu bytes at offset %llu\n"
               "consistency: %s\nowner:       %s\nmode:        %s\n"
               "state:       %s (opened %llu time%s, %llu unclean)\nlast open:   %s\n"
               "flush:       %s%s (%s)\n"
               "durability:  %s\nprotection:  %s\n",
               path, st.format_major, st.format_minor, pheap_version(), uuid,
               strcmp(file, path) ? "file:        " : "", strcmp(file, path) ? file : "",
               strcmp(file, path) ? "\n" : "", (unsigned long long)st.size, (unsigned long long)st.max_size,
               (unsigned long long)st.data_size, (unsigned long long)st.data_offset,
               st.consistency == PHEAP_CONSISTENCY_GC
                   ? "gc (small allocations and frees flush nothing; recovery traces the roots)"
                   : "log (every allocation and free durable on return)",
               cli_owner(owner, &st),
               st.mode == PHEAP_MODE_READONLY
                   ? "readonly (calls that change the heap fail; the owner can make it writable)"
                   : "writable",
               st.held_elsewhere ? "open elsewhere: a snapshot, read while its owner may change it; no recovery ran"
               : st.needs_recovery ? "dirty: not closed cleanly; needs recovery (GC mode): allocation is "
                                     "refused until `pheap recover` or pheap_recover traces the roots"
               : st.was_unclean  ? "dirty: not closed cleanly, recovery runs at the next read-write open"
                                 : "clean",
               (unsigned long long)st.open_count, st.open_count == 1 ? "" : "s",
               (unsigned long long)st.unclean_count, cli_time(when, st.last_open),
               pheap_flush_name(st.flush), st.dax ? ", DAX" : "", pheap_flush_source_name(st.flush_source),
               cli_durability(&st), cli_protection(&st));
        print_procs(path, 0);
        print_checkpoint(path, 0);
        printf("names:       %llu\nroots:       %u\n", (unsigned long long)st.names, n);
    }
    for (unsigned i = 0; i < n; i++) {
        char name[PHEAP_ROOT_NAME_MAX + 1];
        pheap_off off;
        if (pheap_root_at(h, i, name, &off))
            break;
        if (json) {
            printf("%s{\"name\": ", i ? ", " : "");
            cli_json_string(name);
            printf(", \"offset\": %llu}", (unsigned long long)off);
        } else {
            printf("  %-40s %llu\n", name, (unsigned long long)off);
        }
    }
    if (json)
        printf("]}\n");
    pheap_close(h);
    return 0;
}
