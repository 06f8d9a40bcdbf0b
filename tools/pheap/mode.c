/*
 * mode.c -- `pheap mode PATH [readonly|writable] [--json]`: prints the
 * heap's access mode, or sets it (the heap's owner or root only).  Printing
 * reads a private snapshot (PHEAP_SNAPSHOT) and never writes the file;
 * setting opens the heap read-write (recovery runs after a crash, as at
 * any read-write open).
 * Exit 0 on success, 1 when the heap does not open or the mode cannot be
 * set (not the owner: PHEAP_EPERM), 2 on bad usage.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: pheap mode PATH [readonly|writable] [--json]\n"
    "  Without a mode: prints the heap's access mode and its owner.  Read-only: the\n"
    "  file is never written.\n"
    "  readonly   every call that changes the heap fails (PHEAP_EROMODE) until the\n"
    "             mode is writable again; reading works\n"
    "  writable   the default of a new heap\n"
    "  Only the heap's owner (the user who created it) or root may set the mode.\n"
    "  Heaps of format 1.4 and earlier have no owner and are always writable.\n"
    "  --json     one JSON object instead of text (an error object on failure)\n"
    "  Exit 0 on success, 1 when the heap does not open or the mode cannot be set,\n"
    "  2 on bad usage.\n";

const char *cli_mode_name(unsigned mode)
{
    return mode == PHEAP_MODE_READONLY ? "readonly" : "writable";
}

const char *cli_owner(char buf[96], const struct pheap_stats *st)
{
    char user[64];
    if (!st->owner_known)
        snprintf(buf, 96, "unknown (format %u.%u records none)", st->format_major, st->format_minor);
    else if (cli_user_name((uint32_t)st->owner_uid, user, sizeof(user)) == 0)
        snprintf(buf, 96, "%llu (%s)", (unsigned long long)st->owner_uid, user);
    else
        snprintf(buf, 96, "%llu", (unsigned long long)st->owner_uid);
    return buf;
}

static void print_mode(const char *path, const struct pheap_stats *st, int json, int changed)
{
    char owner[96], user[64];
    if (!json) {
        printf("mode:        %s\nowner:       %s\n", cli_mode_name(st->mode), cli_owner(owner, st));
        return;
    }
    printf("{\"path\": ");
    cli_json_string(path);
    printf(", \"mode\": \"%s\", \"owner_uid\": ", cli_mode_name(st->mode));
    if (st->owner_known)
        printf("%llu", (unsigned long long)st->owner_uid);
    else
        printf("null");
    printf(", \"owner\": ");
    if (st->owner_known && cli_user_name((uint32_t)st->owner_uid, user, sizeof(user)) == 0)
        cli_json_string(user);
    else
        printf("null");
    if (changed >= 0)
        printf(", \"changed\": %s", changed ? "true" : "false");
    printf("}\n");
}

int cmd_mode(int argc, char **argv)
{
    const char *path = NULL, *want = NULL, *bad = NULL;
    int json = 0;
    if (cli_help_asked(argc, argv))
        return cli_help(usage);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (argv[i][0] == '-' || (path && want))
            bad = bad ? bad : argv[i];
        else if (!path)
            path = argv[i];
        else
            want = argv[i];
    }
    char msg[300];
    if (bad || !path) {
        if (bad)
            snprintf(msg, sizeof(msg), "pheap mode: unexpected argument '%s'", bad);
        else
            snprintf(msg, sizeof(msg), "pheap mode: no heap file given");
        if (!bad)
            fputs(usage, stderr);
        return cli_usage_error(msg, json);
    }
    unsigned mode = 0;
    if (want && !strcmp(want, "readonly"))
        mode = PHEAP_MODE_READONLY;
    else if (want && !strcmp(want, "writable"))
        mode = PHEAP_MODE_WRITABLE;
    else if (want) {
        snprintf(msg, sizeof(msg), "pheap mode: unknown mode '%s' (readonly or writable)", want);
        return cli_usage_error(msg, json);
    }
    pheap *h;
    int rc = cli_open(path, want ? 0u : PHEAP_SNAPSHOT, json, &h);
    if (rc)
        return rc;
    struct pheap_stats st;
    int changed = -1;
    if (want) {
        int before = pheap_get_mode(h);
        rc = pheap_set_mode(h, mode);
        if (rc) {
            rc = cli_fail_json(path, rc, json);
            pheap_close(h);
            return rc;
        }
        changed = before != (int)mode;
    }
    pheap_stats(h, &st);
    rc = pheap_close(h);
    if (rc)
        return cli_fail_json(path, rc, json);
    print_mode(path, &st, json, changed);
    return 0;
}
