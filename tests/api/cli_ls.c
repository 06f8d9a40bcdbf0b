/*
 * cli_ls.c -- `pheap ls [DIR] [--json]`: the heaps of a directory sorted
 * by name, with mode, state (clean, dirty, in use) and last open; a file
 * that is not a heap is listed as such; nothing is written; an empty or
 * missing directory is an empty list.  Heap names in the other commands.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define SIZE (1u << 20)

static const char *subdir(const char *name)
{
    static char buf[1024];
    snprintf(buf, sizeof(buf), "%s/%s", ph_test_dir(), name);
    mkdir(buf, 0700);
    return buf;
}

static void make_heap(const char *dir, const char *file, unsigned consistency)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    pheap *h = ph_test_create_mode(path, SIZE, consistency, 0);
    if (h)
        pheap_close(h);
}

/* A heap left open by a process that died: opened read-write by a child
 * that exits without closing. */
static void make_dirty(const char *dir, const char *file)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    pid_t pid = fork();
    if (pid == 0) {
        pheap *h;
        _exit(pheap_open(path, NULL, &h) == 0 ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* The line of `out` that starts with `name` and a space. */
static const char *line_of(const char *out, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (!strncmp(p, name, n) && p[n] == ' ')
            return p;
    return NULL;
}

/* 1 if the line starting at `line` contains `what` before its end. */
static int line_has(const char *line, const char *what)
{
    const char *end = strchr(line, '\n');
    const char *at = strstr(line, what);
    return at && (!end || at < end);
}

static void file_bytes(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, len, f) : 0;
    if (f)
        fclose(f);
    memset(buf + n, 0, len - n);
}

TEST(lists_heaps_sorted_with_state)
{
    const char *d = subdir("ls-many");
    make_heap(d, "zeta.heap", PHEAP_CONSISTENCY_LOG);
    make_heap(d, "alpha.heap", PHEAP_CONSISTENCY_GC);
    make_heap(d, "mid.heap", PHEAP_CONSISTENCY_LOG);
    make_dirty(d, "mid.heap");
    char junk[PATH_MAX];
    snprintf(junk, sizeof(junk), "%s/junk.heap", d);
    FILE *f = fopen(junk, "w");
    REQUIRE(f);
    fputs("this is not a heap\n", f);
    fclose(f);
    snprintf(junk, sizeof(junk), "%s/readme.txt", d);
    f = fopen(junk, "w");
    REQUIRE(f);
    fclose(f);
    char mid[PATH_MAX], before[4096], after[4096];
    snprintf(mid, sizeof(mid), "%s/mid.heap", d);
    file_bytes(mid, before, sizeof(before));

    ph_tool_result *r = ph_test_run_tool(PHEAP_TOOL, "ls", d, NULL);
    CHECK_TOOL(r->code == 0, r);
    const char *a = line_of(r->out, "alpha"), *j = line_of(r->out, "junk"),
               *m = line_of(r->out, "mid"), *z = line_of(r->out, "zeta");
    CHECK_TOOL(a && j && m && z && a < j && j < m && m < z, r); /* sorted by name */
    CHECK_TOOL(!line_of(r->out, "readme"), r);
    CHECK_TOOL(strstr(r->err, "1 other entry"), r);
    if (a && j && m && z) {
        CHECK_TOOL(line_has(a, " gc ") && line_has(a, "clean"), r);
        CHECK_TOOL(line_has(m, " log ") && line_has(m, "dirty"), r);
        CHECK_TOOL(line_has(z, " log ") && line_has(z, "clean"), r);
        CHECK_TOOL(line_has(j, "not a heap"), r);
        CHECK_TOOL(!line_has(z, "unknown"), r); /* a time */
    }
    file_bytes(mid, after, sizeof(after));
    CHECK(!memcmp(before, after, sizeof(before))); /* still dirty: nothing written */

    r = ph_test_run_tool(PHEAP_TOOL, "ls", d, "--json", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out), r);
    const char *ja = strstr(r->out, "\"name\": \"alpha\""), *jj = strstr(r->out, "\"name\": \"junk\""),
               *jm = strstr(r->out, "\"name\": \"mid\""), *jz = strstr(r->out, "\"name\": \"zeta\"");
    CHECK_TOOL(ja && jj && jm && jz && ja < jj && jj < jm && jm < jz, r);
    if (jj && jm && jz) {
        CHECK_TOOL(strstr(jj, "\"error\": \"PHEAP_ENOTHEAP\"") < jm, r);
        CHECK_TOOL(strstr(jm, "\"state\": \"dirty\"") < jz, r);
        CHECK_TOOL(ph_test_json_num(jz, "last_open") > 0, r);
    }

    /* A heap another process holds read-write: in use. */
    snprintf(mid, sizeof(mid), "%s/zeta.heap", d);
    int holder = ph_test_hold(mid, 0);
    REQUIRE(holder > 0);
    r = ph_test_run_tool(PHEAP_TOOL, "ls", d, NULL);
    z = line_of(r->out, "zeta");
    CHECK_TOOL(r->code == 0 && z && line_has(z, "in use"), r);
    CHECK_EQ(ph_test_release(holder), 0);
}

TEST(empty_and_missing_directories)
{
    const char *dir = subdir("ls-empty");
    ph_tool_result *r = ph_test_run_tool(PHEAP_TOOL, "ls", dir, NULL);
    CHECK_TOOL(r->code == 0 && r->out[0] == 0 && strstr(r->err, "no heaps"), r);
    r = ph_test_run_tool(PHEAP_TOOL, "ls", dir, "--json", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out) && strstr(r->out, "\"heaps\": []"), r);
    char missing[PATH_MAX];
    snprintf(missing, sizeof(missing), "%s/ls-nowhere", ph_test_dir());
    r = ph_test_run_tool(PHEAP_TOOL, "ls", missing, "--json", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out) && strstr(r->err, "does not exist"), r);
    CHECK_EQ(access(missing, F_OK), -1); /* not created */
    r = ph_test_run_tool(PHEAP_TOOL, "ls", dir, "--bogus", NULL);
    CHECK_TOOL(r->code == 2, r);
}

/* Without DIR: the heap directory; heap names in create and info. */
TEST(heap_directory_and_names)
{
    const char *old = getenv("PHEAP_DIR");
    char *saved = old ? strdup(old) : NULL;
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/ls-home/heaps", ph_test_dir());
    setenv("PHEAP_DIR", dir, 1);
    ph_tool_result *r = ph_test_run_tool(PHEAP_TOOL, "ls", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->err, "does not exist"), r);
    r = ph_test_run_tool(PHEAP_TOOL, "create", "named", "--size", "1M", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "/ls-home/heaps/named.heap"), r);
    r = ph_test_run_tool(PHEAP_TOOL, "info", "named", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "named.heap"), r);
    const char *last = ph_test_text_field(r->out, "last open:");
    CHECK_TOOL(last && strncmp(last, "unknown", 7), r);
    r = ph_test_run_tool(PHEAP_TOOL, "info", "named", "--json", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out) && ph_test_json_num(r->out, "last_open") > 0, r);
    r = ph_test_run_tool(PHEAP_TOOL, "ls", NULL);
    CHECK_TOOL(r->code == 0 && line_of(r->out, "named"), r);
    r = ph_test_run_tool(PHEAP_TOOL, "info", "..", NULL);
    CHECK_TOOL(r->code == 1 && strstr(r->err, "not a heap name"), r);
    if (saved)
        setenv("PHEAP_DIR", saved, 1);
    else
        unsetenv("PHEAP_DIR");
    free(saved);
}
