/*
 * main.c -- the pheap command-line tool: dispatch to one subcommand.
 */
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *usage;
} commands[] = {
    {"create", cmd_create, "create PATH --size SIZE [--max-size SIZE] [--mode OCTAL] [--consistency log|gc]"},
    {"info", cmd_info, "info PATH [--json]"},
    {"check", cmd_check, "check PATH [--repair] [--json]  (read-only; --repair runs recovery)"},
    {"stats", cmd_stats, "stats PATH [--json]     (read-only)"},
    {"recover", cmd_recover, "recover PATH [--threads N] [--json]  (a GC heap after a crash)"},
    {"gc", cmd_gc, "gc PATH [--dry-run] [--threads N] [--json]  (frees blocks no root reaches)"},
    {"ls", cmd_ls, "ls [DIR] [--json]       (the heaps of the heap directory, or of DIR)"},
    {"names", cmd_names, "names PATH [--prefix P] [--json]  (the named objects, sorted by name)"},
    {"dump", cmd_dump, "dump PATH NAME [--raw]  (a named object in hex, or its raw bytes)"},
    {"map", cmd_map, "map PATH [-o FILE.png|FILE.svg|FILE.txt] [--text]  (a picture of the heap)"},
    {"mode", cmd_mode, "mode PATH [readonly|writable] [--json]  (the access mode; owner sets it)"},
    {"help", NULL, "help [COMMAND]          (this text, or the options of COMMAND)"},
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
    fprintf(f, "usage: pheap COMMAND [ARGS]\n       pheap --version\n\ncommands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  pheap %s\n", commands[i].usage);
    fprintf(f, "\nSIZE takes a K, M, G or T suffix (binary multiples).  Every command takes --help.\n"
               "PATH is a file (it holds a '/') or a heap name: NAME is NAME.heap in the heap\n"
               "directory ($PHEAP_DIR, else $XDG_DATA_HOME/pheap, else ~/.local/share/pheap).\n"
               "Exit status: 0 success, 1 the operation failed, 2 bad usage.  See pheap(1).\n");
}

/* `pheap help [COMMAND]`: the overview, or COMMAND --help. */
static int help(int argc, char **argv)
{
    if (argc < 2) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < NCOMMANDS; i++) {
        if (commands[i].fn && !strcmp(argv[1], commands[i].name)) {
            char *args[] = {argv[1], "--help", NULL};
            return commands[i].fn(2, args);
        }
    }
    if (!strcmp(argv[1], "help"))
        return help(1, argv);
    fprintf(stderr, "pheap help: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}

int cli_help_asked(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return 1;
    return 0;
}

int cli_help(const char *usage)
{
    fputs(usage, stdout);
    return 0;
}

const char *cli_bytes(char buf[48], uint64_t v)
{
    static const char *unit[] = {"KiB", "MiB", "GiB", "TiB"};
    double d = (double)v;
    int u = -1;
    while (d >= 1024 && u < 3) {
        d /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(buf, 48, "%llu bytes", (unsigned long long)v);
    else
        snprintf(buf, 48, "%llu bytes (%.1f %s)", (unsigned long long)v, d, unit[u]);
    return buf;
}

const char *cli_consistency_name(unsigned consistency)
{
    return consistency == PHEAP_CONSISTENCY_GC ? "gc" : consistency == PHEAP_CONSISTENCY_LOG ? "log" : "?";
}

const char *cli_error_name(int rc)
{
    static const char *const names[] = {
        "PHEAP_OK", "PHEAP_EINVAL", "PHEAP_ENOMEM", "PHEAP_ENOENT", "PHEAP_EEXIST",
        "PHEAP_EACCES", "PHEAP_EBUSY", "PHEAP_EIO", "PHEAP_ENOTHEAP", "PHEAP_ETRUNCATED",
        "PHEAP_ECHECKSUM", "PHEAP_EVERSION", "PHEAP_ELAYOUT", "PHEAP_EEMPTY", "PHEAP_EISDIR",
        "PHEAP_ERDONLY", "PHEAP_ENOSPC", "PHEAP_ENAME", "PHEAP_ENOTSUP", "PHEAP_ECORRUPT",
        "PHEAP_ERANGE", "PHEAP_EDOUBLEFREE", "PHEAP_EINTERIOR", "PHEAP_ENOTALLOC", "PHEAP_EFORKED",
        "PHEAP_ECANCELED", "PHEAP_ENOTLIVE", "PHEAP_ENOTX", "PHEAP_EABORTED",
        "PHEAP_ERECOVER", "PHEAP_EPERM", "PHEAP_EROMODE",
    };
    return rc <= 0 && -rc < (int)(sizeof(names) / sizeof(names[0])) ? names[-rc] : "PHEAP_E?";
}

/* {"error": ..., "code": ..., "message": ...} on stdout. */
static void json_error(int rc, const char *msg)
{
    printf("{\"error\": \"%s\", \"code\": %d, \"message\": ", cli_error_name(rc), rc);
    cli_json_string(msg);
    printf("}\n");
}

int cli_usage_error(const char *msg, int json)
{
    fprintf(stderr, "%s\n", msg);
    if (json)
        json_error(PHEAP_EINVAL, msg);
    return 2;
}

int cli_fail_json(const char *what, int rc, int json)
{
    const char *msg = pheap_errno() == rc ? pheap_errmsg() : "";
    char full[1024];
    if (!*msg)
        msg = pheap_strerror(rc);
    if (strstr(msg, what))
        snprintf(full, sizeof(full), "%s", msg);
    else
        snprintf(full, sizeof(full), "%s: %s", what, msg);
    return cli_error(rc, full, json);
}

int cli_error(int rc, const char *msg, int json)
{
    if (json)
        json_error(rc, msg);
    fprintf(stderr, "pheap: %s\n", msg);
    return 1;
}

int cli_fail(const char *what, int rc)
{
    /* The library's message says what went wrong, usually with the path:
     * `what` only when it is missing, the code's description only when
     * there is no message. */
    const char *msg = pheap_errno() == rc ? pheap_errmsg() : "";
    if (!*msg)
        msg = pheap_strerror(rc);
    if (strstr(msg, what))
        fprintf(stderr, "pheap: %s\n", msg);
    else
        fprintf(stderr, "pheap: %s: %s\n", what, msg);
    return 1;
}

int cli_parse_size(const char *s, uint64_t *out)
{
    char *end;
    if (!s || !*s || *s == '-') {
        fprintf(stderr, "pheap: bad size '%s'\n", s ? s : "");
        return -1;
    }
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno == ERANGE) {
        fprintf(stderr, "pheap: bad size '%s' (use e.g. 4096, 64K, 16M, 2G)\n", s);
        return -1;
    }
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
    }
    if ((*end == 'i' || *end == 'I') && shift)
        end++;
    if ((*end == 'b' || *end == 'B') && end != s)
        end++;
    if (*end || end == s || (shift && v > (~0ull >> shift))) {
        fprintf(stderr, "pheap: bad size '%s' (use e.g. 4096, 64K, 16M, 2G)\n", s);
        return -1;
    }
    *out = (uint64_t)v << shift;
    return 0;
}

int cli_parse_path(int argc, char **argv, const char *cmd, const char *usage, const char *option,
                   const char **path, int *json, int *option_set)
{
    const char *bad = NULL;
    *path = NULL;
    *json = 0;
    if (option_set)
        *option_set = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            *json = 1;
        else if (option && option_set && !strcmp(argv[i], option))
            *option_set = 1;
        else if (argv[i][0] != '-' && !*path)
            *path = argv[i];
        else if (!bad)
            bad = argv[i];
    }
    if (!bad && *path)
        return 0;
    char msg[300];
    if (bad) {
        snprintf(msg, sizeof(msg), "pheap %s: unexpected argument '%s'", cmd, bad);
        fprintf(stderr, "%s\n", msg);
    } else {
        snprintf(msg, sizeof(msg), "pheap %s: no heap file given", cmd);
        fprintf(stderr, "%s", usage);
    }
    if (*json)
        json_error(PHEAP_EINVAL, msg);
    return 2;
}

int cli_open_path(int argc, char **argv, const char *cmd, const char *usage, unsigned flags,
                  const char **path, int *json, pheap **h)
{
    int rc = cli_parse_path(argc, argv, cmd, usage, NULL, path, json, NULL);
    return rc ? rc : cli_open(*path, flags, *json, h);
}

int cli_open(const char *path, unsigned flags, int json, pheap **h)
{
    pheap_options o = {.flags = flags};
    int rc = pheap_open(path, &o, h);
    /* A snapshot of a heap in use may read its extent log mid-change and
     * see it contradict itself: try again before calling it damaged. */
    for (int tries = 1; rc == PHEAP_ECORRUPT && (flags & PHEAP_SNAPSHOT) && tries < 3; tries++)
        rc = pheap_open(path, &o, h);
    return rc ? cli_fail_json(path, rc, json) : 0;
}

/* Length of the well-formed UTF-8 sequence at s (1 to 4), or 0. */
static int utf8_len(const unsigned char *s)
{
    int n = s[0] < 0x80 ? 1 : s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3
            : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if ((n == 3 && s[0] == 0xe0 && s[1] < 0xa0) || (n == 3 && s[0] == 0xed && s[1] >= 0xa0) ||
        (n == 4 && s[0] == 0xf0 && s[1] < 0x90) || (n == 4 && s[0] == 0xf4 && s[1] >= 0x90))
        return 0; /* overlong, surrogate or past U+10FFFF */
    return n;
}

void cli_json_string(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    putchar('"');
    while (*s) {
        int n = utf8_len(s);
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if (*s < 0x20 || *s == 0x7f)
            printf("\\u%04x", *s);
        else if (n == 0) /* a byte that is not UTF-8: its code point, so the output stays JSON */
            printf("\\u%04x", *s);
        else
            fwrite(s, 1, (size_t)n, stdout);
        s += n ? n : 1;
    }
    putchar('"');
}

const char *cli_text_name(char buf[CLI_TEXT_NAME_MAX], const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t at = 0;
    /* Stops before an escape that would not fit: a name longer than
     * PHEAP_NAME_MAX (from the command line) is shown cut. */
    while (*s && at + 4 < CLI_TEXT_NAME_MAX) {
        int n = utf8_len(s);
        int c1 = n == 2 && s[0] == 0xc2 && s[1] < 0xa0; /* U+0080..U+009F: terminal controls */
        if (*s == '\\') {
            at += (size_t)sprintf(buf + at, "\\\\");
        } else if (*s == '\t' || *s == '\n' || *s == '\r') {
            at += (size_t)sprintf(buf + at, "\\%c", *s == '\t' ? 't' : *s == '\n' ? 'n' : 'r');
        } else if (*s < 0x20 || *s == 0x7f || n == 0 || c1) {
            at += (size_t)sprintf(buf + at, "\\x%02x", *s);
            n = 1; /* the second byte of a C1 control is escaped in its turn */
        } else {
            if (at + (size_t)n >= CLI_TEXT_NAME_MAX)
                break;
            memcpy(buf + at, s, (size_t)n);
            at += (size_t)n;
        }
        s += n;
    }
    buf[at] = '\0';
    return buf;
}

const char *cli_time(char buf[32], uint64_t secs)
{
    time_t t = (time_t)secs;
    struct tm tm;
    if (!secs || !localtime_r(&t, &tm) || !strftime(buf, 32, "%Y-%m-%d %H:%M:%S", &tm))
        snprintf(buf, 32, "unknown");
    return buf;
}

void cli_json_time(uint64_t secs)
{
    if (secs)
        printf("%llu", (unsigned long long)secs);
    else
        printf("null");
}

int cli_user_name(uint32_t uid, char *buf, size_t len)
{
    struct passwd pw, *found = NULL;
    char scratch[1024];
    if (getpwuid_r((uid_t)uid, &pw, scratch, sizeof(scratch), &found) || !found)
        return -1;
    snprintf(buf, len, "%s", found->pw_name);
    return 0;
}

void cli_format_uuid(const uint8_t u[16], char *buf)
{
    sprintf(buf, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
            u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

const char *cli_durability(const struct pheap_stats *st)
{
    if (st->flush == PHEAP_FLUSH_SIM)
        return "simulated: the file gets what was flushed and fenced at close";
    if (st->flush == PHEAP_FLUSH_CHECKPOINT)
        return "checkpoints: a process crash loses nothing (the working copy keeps it); a power "
               "loss takes the heap back to its last checkpoint";
    if (st->in_memory)
        return "process crashes only: the file is on tmpfs, in memory";
    if (st->flush == PHEAP_FLUSH_NONE)
        return "process crashes only: a power loss may lose what the kernel has not written back";
    if (!st->power_safe)
        return "process crashes only: cache-line flushes reach the page cache of a file not on DAX, "
               "not its storage";
    if (st->flush == PHEAP_FLUSH_MSYNC)
        return "power loss: every fence is an msync of the dirty pages (slow on disks)";
    return "power loss: every fence makes the flushed lines durable";
}

const char *cli_protection(const struct pheap_stats *st)
{
    switch (st->protection) {
    case PHEAP_PROTECT_ALIAS:
        return "alias: metadata read-only in the program's mapping, written through a second one";
    case PHEAP_PROTECT_OFF:
        return "off: the program's stray stores can reach the allocator's metadata (PHEAP_PROTECT=off)";
    case PHEAP_PROTECT_READONLY:
        return "read-only: the whole mapping is read-only";
    default:
        return pheap_protect_name(st->protection);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("pheap %s (format %d.%d)\n", pheap_version(), PHEAP_FORMAT_MAJOR, PHEAP_FORMAT_MINOR);
        return 0;
    }
    if (!strcmp(argv[1], "help"))
        return help(argc - 1, argv + 1);
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (commands[i].fn && !strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "pheap: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
