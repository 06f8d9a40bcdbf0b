/*
 * cli_alloc.c -- `pheap check` and `pheap stats`, run as a separate
 * program on heaps with live blocks: text and JSON output agree with the
 * library, check recovers a dirty heap and reports corruption (exit 1),
 * stats writes nothing, bad usage exits 2.
 */
#include <ctype.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "format/layout.h"
#include "harness.h"

typedef struct run_result {
    int code;        /* exit status; -1 if it did not exit normally */
    char out[32768]; /* stdout */
    char err[4096];  /* stderr */
} run_result;

static void slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
}

/* Runs the tool with the NULL-terminated arguments. */
static run_result *run(const char *arg, ...)
{
    static run_result r;
    const char *argv[16] = {PHEAP_TOOL};
    int argc = 1;
    va_list ap;
    va_start(ap, arg);
    for (const char *a = arg; a && argc < 15; a = va_arg(ap, const char *))
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    char out[512], err[512];
    snprintf(out, sizeof(out), "%s/tool.out", ph_test_dir());
    snprintf(err, sizeof(err), "%s/tool.err", ph_test_dir());
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(out, "w", stdout) || !freopen(err, "w", stderr))
            _exit(126);
        execv(PHEAP_TOOL, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    r.code = pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    slurp(out, r.out, sizeof(r.out));
    slurp(err, r.err, sizeof(r.err));
    return &r;
}

#define EXPECT(cond, r)                                                                          \
    do {                                                                                         \
        if (!(cond))                                                                             \
            ph_test_fail(__FILE__, __LINE__, "%s\n    exit %d\n    stdout: %s\n    stderr: %s",  \
                         #cond, (r)->code, (r)->out, (r)->err);                                  \
    } while (0)

/* ---- JSON: a syntax check and a number lookup ---------------------------- */

static const char *jvalue(const char *p, int depth);

static const char *jws(const char *p)
{
    while (*p && strchr(" \t\r\n", *p))
        p++;
    return p;
}

static const char *jstring(const char *p)
{
    if (*p++ != '"')
        return NULL;
    for (; *p != '"'; p++) {
        if ((unsigned char)*p < 0x20)
            return NULL;
        if (*p == '\\' && !*++p)
            return NULL;
    }
    return p + 1;
}

static const char *jlist(const char *p, char close, int depth, int object)
{
    p = jws(p + 1);
    if (*p == close)
        return p + 1;
    for (;;) {
        if (object && (!(p = jstring(jws(p))) || *(p = jws(p)) != ':'))
            return NULL;
        if (!(p = jvalue(p + object, depth + 1)))
            return NULL;
        p = jws(p);
        if (*p == close)
            return p + 1;
        if (*p++ != ',')
            return NULL;
    }
}

static const char *jvalue(const char *p, int depth)
{
    p = jws(p);
    if (depth > 16)
        return NULL;
    if (*p == '{' || *p == '[')
        return jlist(p, *p == '{' ? '}' : ']', depth, *p == '{');
    if (*p == '"')
        return jstring(p);
    for (const char *lit = "true\0false\0null\0"; *lit; lit += strlen(lit) + 1)
        if (!strncmp(p, lit, strlen(lit)))
            return p + strlen(lit);
    char *end;
    strtod(p, &end);
    return end > p && (isdigit((unsigned char)*p) || *p == '-') ? end : NULL;
}

static int json_ok(const char *s)
{
    const char *end = jvalue(s, 0);
    return *jws(s) == '{' && end && *jws(end) == '\0';
}

/* The number after the first "key": at or after `from`; -1 if absent. */
static long long jnum(const char *from, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\": ", key);
    const char *p = strstr(from, pat);
    return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

/* The number after `label` at the start of a line of text; -1 if absent. */
static long long text_num(const char *out, const char *label)
{
    for (const char *p = out; p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (!strncmp(p, label, strlen(label)))
            return strtoll(jws(p + strlen(label)), NULL, 10);
    return -1;
}

/* ---- heaps ----------------------------------------------------------------- */

enum { NSMALL = 10, NMID = 5, NLARGE = 2 };

/* A closed heap with NSMALL 64-byte, NMID 1000-byte and NLARGE 100 KB blocks. */
static const char *used_heap(const char *name)
{
    const char *path = ph_test_path(name);
    unlink(path);
    pheap_options o = {.size = 8u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL, .flush = PHEAP_FLUSH_NONE};
    pheap *h;
    if (pheap_open(path, &o, &h))
        return ph_test_fail(__FILE__, __LINE__, "create: %s", pheap_errmsg()), NULL;
    for (int i = 0; i < NSMALL + NMID + NLARGE; i++) {
        pheap_off off = pheap_alloc(h, i < NSMALL ? 64 : i < NSMALL + NMID ? 1000 : 100000);
        if (!off)
            ph_test_fail(__FILE__, __LINE__, "alloc: %s", pheap_errmsg());
        if (i == 0)
            pheap_root_set(h, "first", off);
    }
    pheap_close(h);
    return path;
}

TEST(check_reports_a_consistent_heap)
{
    const char *path = used_heap("check.heap");
    REQUIRE(path);
    run_result *r = run("check", path, NULL);
    EXPECT(r->code == 0, r);
    EXPECT(strstr(r->out, "consistent (0 errors)"), r);
    EXPECT(strstr(r->out, "not needed"), r);
    EXPECT(text_num(r->out, "live blocks:") == NSMALL + NMID + NLARGE, r);
    EXPECT(text_num(r->out, "large extents:") == NLARGE, r);
    EXPECT(text_num(r->out, "roots:") == 1, r);
    EXPECT(text_num(r->out, "slabs:") >= 2, r);
    r = run("check", "--json", path, NULL);
    EXPECT(r->code == 0 && json_ok(r->out), r);
    EXPECT(strstr(r->out, "\"consistent\": true"), r);
    EXPECT(jnum(r->out, "errors") == 0, r);
    EXPECT(jnum(r->out, "live_blocks") == NSMALL + NMID + NLARGE, r);
    EXPECT(jnum(r->out, "live_bytes") >= NSMALL * 64 + NMID * 1000 + NLARGE * 100000, r);
    EXPECT(jnum(r->out, "large_extents") == NLARGE, r);
    EXPECT(jnum(r->out, "free_bytes") > 0, r);
    EXPECT(strstr(r->out, "\"recovered\": false"), r);
}

TEST(stats_per_class_and_read_only)
{
    const char *path = used_heap("stats.heap");
    REQUIRE(path);
    char copy[600];
    snprintf(copy, sizeof(copy), "%s.copy", path);
    REQUIRE(ph_test_copy_file(path, copy) == 0);
    run_result *r = run("stats", path, NULL);
    EXPECT(r->code == 0, r);
    EXPECT(strstr(r->out, "size classes with slabs:"), r);
    EXPECT(strstr(r->out, "fragmentation:"), r);
    EXPECT(text_num(r->out, "live:") == NSMALL + NMID + NLARGE, r);
    EXPECT(text_num(r->out, "large extents:") == NLARGE, r);
    /* The 64-byte class row: class, block size 64, ..., live blocks NSMALL. */
    int found = 0;
    for (const char *p = r->out; p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        unsigned cls, bs, per, slabs, live;
        if (sscanf(p, " %u %u %u %u %u", &cls, &bs, &per, &slabs, &live) == 5 && bs == 64)
            found = live == NSMALL && slabs == 1 && per * bs <= 65536;
    }
    EXPECT(found, r);
    r = run("stats", "--json", path, NULL);
    EXPECT(r->code == 0 && json_ok(r->out), r);
    EXPECT(jnum(r->out, "live_blocks") == NSMALL + NMID + NLARGE, r);
    EXPECT(jnum(r->out, "large_extents") == NLARGE, r);
    EXPECT(strstr(r->out, "\"state\": \"clean\""), r);
    const char *c64 = strstr(r->out, "\"block_size\": 64,");
    EXPECT(c64 && jnum(c64, "live_blocks") == NSMALL, r);
    char cmd[1300];
    snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", path, copy);
    CHECK(system(cmd) == 0); /* read-only: not a byte changed */
}

TEST(check_recovers_a_dirty_heap)
{
    const char *path = used_heap("dirty.heap");
    REQUIRE(path);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) { /* allocate, then die without closing */
        pheap *h;
        pheap_options o = {.flush = PHEAP_FLUSH_NONE};
        if (pheap_open(path, &o, &h) || !pheap_alloc(h, 64) || !pheap_alloc(h, 50000))
            _exit(1);
        _exit(0);
    }
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    run_result *r = run("stats", "--json", path, NULL);
    EXPECT(r->code == 0 && strstr(r->out, "\"state\": \"dirty\""), r);
    r = run("stats", path, NULL);
    EXPECT(r->code == 0 && strstr(r->out, "not closed cleanly"), r);
    r = run("check", "--json", path, NULL);
    EXPECT(r->code == 0 && json_ok(r->out), r);
    EXPECT(strstr(r->out, "\"recovered\": true"), r);
    EXPECT(jnum(r->out, "live_blocks") == NSMALL + NMID + NLARGE + 2, r);
    r = run("stats", "--json", path, NULL);
    EXPECT(r->code == 0 && strstr(r->out, "\"state\": \"clean\""), r);
    r = run("check", path, NULL);
    EXPECT(r->code == 0 && strstr(r->out, "not needed"), r);
}

TEST(check_reports_corruption)
{
    const char *path = used_heap("corrupt.heap");
    REQUIRE(path);
    /* A root entry whose commit word is neither 0 nor 1. */
    int fd = open(path, O_RDWR);
    REQUIRE(fd >= 0);
    ph_header hdr;
    REQUIRE(pread(fd, &hdr, sizeof(hdr), 0) == (ssize_t)sizeof(hdr));
    uint64_t roots = 0;
    for (unsigned i = 0; i < hdr.nregions && i < PH_REGIONS_MAX; i++)
        if (hdr.regions[i].kind == PH_REGION_ROOTS)
            roots = hdr.regions[i].offset;
    REQUIRE(roots);
    uint64_t bad = 2;
    REQUIRE(pwrite(fd, &bad, 8, roots + 7 * sizeof(ph_root_entry)) == 8);
    close(fd);
    run_result *r = run("check", path, NULL);
    EXPECT(r->code == 1, r);
    EXPECT(strstr(r->out, "INCONSISTENT") || r->err[0], r);
    r = run("check", "--json", path, NULL);
    EXPECT(r->code == 1, r);
    if (r->out[0]) {
        EXPECT(json_ok(r->out) && strstr(r->out, "\"consistent\": false"), r);
        EXPECT(jnum(r->out, "errors") >= 1, r);
    }
}

TEST(usage_and_failures)
{
    run_result *r = run("check", NULL);
    EXPECT(r->code == 2 && strstr(r->err, "usage") && strstr(r->err, "read-write"), r);
    r = run("stats", NULL);
    EXPECT(r->code == 2 && strstr(r->err, "usage"), r);
    r = run("check", "--bogus", "x", NULL);
    EXPECT(r->code == 2, r);
    r = run("stats", "a", "b", NULL);
    EXPECT(r->code == 2, r);
    r = run("check", ph_test_path("missing.heap"), NULL);
    EXPECT(r->code == 1 && r->err[0], r);
    r = run("stats", "--json", ph_test_path("missing.heap"), NULL);
    EXPECT(r->code == 1 && r->err[0] && !r->out[0], r);
    r = run("--help", NULL);
    EXPECT(r->code == 0 && strstr(r->out, "pheap check") && strstr(r->out, "pheap stats"), r);
}
