/*
 * cli.h -- shared pieces of the pheap command-line tool: one file per
 * subcommand, each exporting cmd_<name>(argc, argv).
 */
#ifndef PHEAP_CLI_H
#define PHEAP_CLI_H

#include <stdint.h>

#include "pheap.h"

int cmd_create(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_stats(int argc, char **argv);
int cmd_recover(int argc, char **argv);
int cmd_gc(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_names(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_mode(int argc, char **argv);
int cmd_map(int argc, char **argv);

/* 1 when an argument is --help or -h: the subcommand then prints its usage
 * on stdout and exits 0 (cli_help). */
int cli_help_asked(int argc, char **argv);
int cli_help(const char *usage);

/* Parses "123", "64K", "16M", "2G", "1T" (binary multiples).  0 on
 * success, -1 with a message on stderr otherwise. */
int cli_parse_size(const char *s, uint64_t *out);

/* Reports a failed library call: "pheap: what: message" on stderr, and
 * with `json` also {"error": "PHEAP_E...", "code": rc, "message": "..."}
 * on stdout.  Returns 1, the exit status of a failed operation. */
int cli_fail(const char *what, int rc);
int cli_fail_json(const char *what, int rc, int json);

/* Reports failure `rc` with message `msg` as cli_fail_json does. */
int cli_error(int rc, const char *msg, int json);

/* Reports bad usage: `msg` on stderr, and with `json` an error object
 * (PHEAP_EINVAL) on stdout.  Returns 2. */
int cli_usage_error(const char *msg, int json);

/* "log" or "gc": the name of a consistency mode. */
const char *cli_consistency_name(unsigned consistency);
/* "123456 bytes (120.6 KiB)" into buf[48]; returns buf. */
const char *cli_bytes(char buf[48], uint64_t v);

/* The name of an error code ("PHEAP_ENOENT"); "PHEAP_E?" if unknown. */
const char *cli_error_name(int rc);

/* Parses "PATH [--json] [OPTION]" for subcommand `cmd`; `option` (or NULL)
 * is the one extra flag the command takes, *option_set says whether it was
 * given.  Returns 0, or 2 after printing `usage` (and with --json an
 * error object). */
int cli_parse_path(int argc, char **argv, const char *cmd, const char *usage, const char *option,
                   const char **path, int *json, int *option_set);

/* Parses "PATH [--json]" and opens the heap with `flags`.  Returns 0, or
 * the exit status after printing why: 2 for wrong arguments (with
 * `usage`), 1 when the heap does not open (an error object with --json). */
int cli_open_path(int argc, char **argv, const char *cmd, const char *usage, unsigned flags,
                  const char **path, int *json, pheap **h);

/* Opens the heap `path` with `flags` (a snapshot of a heap in use is
 * tried again when it reads as corrupt).  Returns 0, or 1 after printing
 * why (an error object with `json`). */
int cli_open(const char *path, unsigned flags, int json, pheap **h);

/* The line the read-only commands print for a snapshot of a heap that
 * another process holds read-write (PHEAP_SNAPSHOT, held_elsewhere). */
#define CLI_HELD_NOTE "snapshot of a heap open elsewhere: read while its owner may change it; no recovery ran"


/* Prints s as a JSON string (quotes, backslashes and control bytes escaped). */
void cli_json_string(const char *s);

/* A name (any bytes but NUL) made safe to print as text: backslash,
 * control bytes (C0, DEL, the C1 range of UTF-8) and bytes that are not
 * UTF-8 escaped as \\, \t, \n, \r or \xNN; the rest, valid UTF-8, kept.
 * Into buf, which holds any name of PHEAP_NAME_MAX bytes (a longer string,
 * from the command line, may be cut); returns buf. */
#define CLI_TEXT_NAME_MAX (4 * PHEAP_NAME_MAX + 1)
const char *cli_text_name(char buf[CLI_TEXT_NAME_MAX], const char *s);

/* What survives a crash with the flush kind of `st`, as a phrase. */
const char *cli_durability(const struct pheap_stats *st);

/* How the metadata is protected, as a phrase for `pheap info`. */
const char *cli_protection(const struct pheap_stats *st);

/* A time in seconds since the epoch as "2024-05-01 12:00:00" (local
 * time) into buf[32]; "unknown" for 0.  Returns buf. */
const char *cli_time(char buf[32], uint64_t secs);

/* Prints `secs` as a JSON number, or null for 0 (not known). */
void cli_json_time(uint64_t secs);

/* "readonly" or "writable": the name of an access mode (mode.c). */
const char *cli_mode_name(unsigned mode);
/* The heap's owner as "UID (USER)", "UID", or "unknown (...)" for a heap
 * that records none, into buf[96]; returns buf (mode.c). */
const char *cli_owner(char buf[96], const struct pheap_stats *st);
/* The login name of `uid` into buf[len]: 0, or -1 when it has none. */
int cli_user_name(uint32_t uid, char *buf, size_t len);

/* Prints a uuid as 8-4-4-4-12 hex into buf[37]. */
void cli_format_uuid(const uint8_t uuid[16], char *buf);

#endif
