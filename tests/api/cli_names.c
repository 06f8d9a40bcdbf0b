/*
 * cli_names.c -- `pheap names PATH [--prefix P] [--json]` and `pheap dump
 * PATH NAME [--raw]`: the names of a heap sorted, with the sizes and
 * offsets the library gives (a 200-byte name, one with a quote and a tab,
 * an object over 16 KiB), in text and JSON, filtered by prefix; an object
 * in hex and its exact bytes raw; nothing written; a dangling name, a GC
 * heap left by a crash, a heap older than the name directory, a heap held
 * elsewhere, a heap name; missing names and files, files that are not
 * heaps, bad usage.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/header.h"
#include "format/layout.h"
#include "harness.h"

#define run(...) ph_test_run_tool(PHEAP_TOOL, __VA_ARGS__)
#define SIZE (4u << 20)
#define HELLO "Hello, world!"

/* The objects of the test heap: name, size asked, fill seed. */
static char long_name[201];
static const struct {
    const char *name;
    size_t size;
} objects[] = {
    {"beta", 100},
    {"alpha", 16},
    {"alpine", 7},
    {"quote\"and\ttab", 33},
    {"big", 20000},
    {long_name, 64},
};
#define NOBJ PH_ARRAY_N(objects)

/* The object i's bytes: `alpha` starts with HELLO and a NUL, the others
 * are ph_test_fill patterns of seed i + 1. */
static void fill(void *p, size_t len, size_t i)
{
    ph_test_fill(p, len, i + 1);
    if (i == 1)
        memcpy(p, HELLO, sizeof(HELLO));
}

/* Makes the heap of `objects` at path, every usable byte filled. */
static void make_heap(const char *path)
{
    for (size_t i = 0; i < 200; i++)
        long_name[i] = (char)('a' + i % 26);
    long_name[0] = 'l';
    pheap *h = ph_test_create(path, SIZE);
    REQUIRE(h);
    for (size_t i = 0; i < NOBJ; i++) {
        pheap_off off = pheap_alloc_named(h, objects[i].name, objects[i].size);
        REQUIRE(off);
        size_t usable = pheap_usable_size(h, off);
        fill(pheap_direct(h, off), usable, i);
        pheap_persist(h, pheap_direct(h, off), usable);
    }
    REQUIRE_OK(pheap_close(h));
}

/* What the library says of name i: its offset and usable size. */
typedef struct expect {
    pheap_off off;
    size_t usable;
} expect;

static void expected(const char *path, expect *e)
{
    pheap_options o = {.flags = PHEAP_RDONLY};
    pheap *h = ph_test_open(path, &o);
    REQUIRE(h);
    for (size_t i = 0; i < NOBJ; i++) {
        e[i].off = pheap_lookup(h, objects[i].name);
        e[i].usable = pheap_usable_size(h, e[i].off);
        CHECK(e[i].off && e[i].usable >= objects[i].size);
    }
    pheap_close(h);
}

/* The line of `out` that ends with `name`; NULL if none. */
static const char *row_of(const char *out, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        const char *end = strchr(p, '\n');
        if (end && (size_t)(end - p) > n && !strncmp(end - n, name, n) && end[-(long)n - 1] == ' ')
            return p;
    }
    return NULL;
}

/* 1 if the text row `row` is "SIZE USABLE OFFSET NAME" for object i. */
static int row_is(const char *row, size_t i, const expect *e)
{
    unsigned long long size, usable, off;
    int at = 0;
    return row && sscanf(row, " %llu %llu %llu %n", &size, &usable, &off, &at) == 3 && at &&
           size == objects[i].size && usable == e[i].usable && off == e[i].off;
}

/* The whole file, to show that the tool wrote nothing; free it. */
static char *file_bytes(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = f ? malloc(SIZE * 2) : NULL;
    *len = buf ? fread(buf, 1, SIZE * 2, f) : 0;
    if (f)
        fclose(f);
    return buf;
}

TEST(names_as_text_sorted_with_sizes_and_offsets)
{
    const char *path = ph_test_path("text.heap");
    make_heap(path);
    expect e[NOBJ];
    expected(path, e);
    size_t before_len, after_len;
    char *before = file_bytes(path, &before_len);

    ph_tool_result *r = run("names", path, NULL);
    CHECK_TOOL(r->code == 0 && !r->err[0], r);
    char header[4][8];
    CHECK_TOOL(sscanf(r->out, "%7s %7s %7s %7s", header[0], header[1], header[2], header[3]) == 4 &&
                   !strcmp(header[0], "SIZE") && !strcmp(header[1], "USABLE") &&
                   !strcmp(header[2], "OFFSET") && !strcmp(header[3], "NAME") &&
                   strchr(r->out, '\n') == strstr(r->out, "NAME") + 4,
               r);
    const char *shown[NOBJ] = {"beta", "alpha", "alpine", "quote\"and\\ttab", "big", long_name};
    const char *rows[NOBJ];
    for (size_t i = 0; i < NOBJ; i++) {
        rows[i] = row_of(r->out, shown[i]);
        if (!row_is(rows[i], i, e))
            ph_test_fail(__FILE__, __LINE__, "no row for %s with %zu %zu %llu in:\n%s", shown[i],
                         objects[i].size, e[i].usable, (unsigned long long)e[i].off, r->out);
    }
    /* Byte order: alpha, alpine, beta, big, l..., quote. */
    CHECK_TOOL(rows[1] < rows[2] && rows[2] < rows[0] && rows[0] < rows[4] && rows[4] < rows[5] &&
                   rows[5] < rows[3],
               r);
    /* Aligned: every row's name starts in the header's column. */
    size_t col = (size_t)(strstr(r->out, "NAME") - r->out);
    for (size_t i = 0; i < NOBJ; i++)
        CHECK_TOOL(rows[i] && !strncmp(rows[i] + col, shown[i], strlen(shown[i])), r);
    CHECK_TOOL(strstr(r->out, "\n6 names\n") && !strchr(r->out, '\t'), r);

    r = run("names", path, "--prefix", "al", NULL);
    CHECK_TOOL(r->code == 0 && row_is(row_of(r->out, "alpha"), 1, e) &&
                   row_is(row_of(r->out, "alpine"), 2, e) && !row_of(r->out, "beta") &&
                   strstr(r->out, "\n2 names starting with 'al'\n"),
               r);
    r = run("names", path, "--prefix", "zz", NULL);
    CHECK_TOOL(r->code == 0 && !strcmp(r->out, "0 names starting with 'zz'\n"), r);

    char *after = file_bytes(path, &after_len);
    CHECK(before && after && before_len == after_len && !memcmp(before, after, before_len));
    free(before);
    free(after);
}

/* The JSON object of name i ("name": <json>), checked against e[i]. */
static void check_json_entry(const ph_tool_result *r, const char *json_name, size_t i,
                             const expect *e)
{
    char want[300];
    snprintf(want, sizeof(want), "{\"name\": %s, ", json_name);
    const char *at = strstr(r->out, want);
    const char *end = at ? strchr(at, '}') : NULL;
    int found;
    if (!at || !end || ph_test_json_u64(at, "size", &found) != objects[i].size ||
        ph_test_json_u64(at, "usable", &found) != e[i].usable ||
        ph_test_json_u64(at, "offset", &found) != e[i].off || strstr(at, "\"offset\":") > end)
        ph_test_fail(__FILE__, __LINE__, "no entry %s with size %zu, usable %zu, offset %llu in %s",
                     json_name, objects[i].size, e[i].usable, (unsigned long long)e[i].off, r->out);
}

TEST(names_as_json)
{
    const char *path = ph_test_path("json.heap");
    make_heap(path);
    expect e[NOBJ];
    expected(path, e);
    ph_tool_result *r = run("names", path, "--json", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out) && ph_test_json_num(r->out, "count") == 6,
               r);
    char quoted[210];
    snprintf(quoted, sizeof(quoted), "\"%s\"", long_name);
    const char *json[NOBJ] = {"\"beta\"", "\"alpha\"", "\"alpine\"", "\"quote\\\"and\\u0009tab\"",
                              "\"big\"", quoted};
    for (size_t i = 0; i < NOBJ; i++)
        check_json_entry(r, json[i], i, e);
    const char *a = strstr(r->out, "\"alpha\""), *q = strstr(r->out, "\"quote");
    CHECK_TOOL(a && q && a < q, r); /* sorted */
    char want[600];
    snprintf(want, sizeof(want), "{\"path\": \"%s\", \"names\": [{\"name\": \"alpha\"", path);
    CHECK_TOOL(!strncmp(r->out, want, strlen(want)), r);

    r = run("names", path, "--json", "--prefix", "b", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out) && ph_test_json_num(r->out, "count") == 2,
               r);
    check_json_entry(r, "\"beta\"", 0, e);
    check_json_entry(r, "\"big\"", 4, e);
    CHECK_TOOL(!strstr(r->out, "alpha"), r);
    r = run("names", path, "--prefix", "nothing", "--json", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out) && strstr(r->out, "\"names\": []") &&
                   ph_test_json_num(r->out, "count") == 0,
               r);
}

/* The hex line of bytes [at, at + n) of p, as dump prints it. */
static void hex_line(char *buf, const unsigned char *p, size_t at, size_t n)
{
    int k = sprintf(buf, "%08zx ", at);
    for (size_t i = 0; i < 16; i++) {
        if (i % 8 == 0)
            buf[k++] = ' ';
        k += i < n ? sprintf(buf + k, "%02x ", p[at + i]) : sprintf(buf + k, "   ");
    }
    k += sprintf(buf + k, " |");
    for (size_t i = 0; i < n; i++)
        buf[k++] = p[at + i] >= 0x20 && p[at + i] < 0x7f ? (char)p[at + i] : '.';
    sprintf(buf + k, "|\n");
}

TEST(dump_hex_and_raw)
{
    const char *path = ph_test_path("dump.heap");
    make_heap(path);
    expect e[NOBJ];
    expected(path, e);
    size_t before_len, after_len;
    char *before = file_bytes(path, &before_len);

    ph_tool_result *r = run("dump", path, "alpha", NULL);
    CHECK_TOOL(r->code == 0 && !r->err[0], r);
    static const char first[] = "00000000  48 65 6c 6c 6f 2c 20 77  6f 72 6c 64 21 00 ";
    CHECK_TOOL(!strncmp(r->out, first, strlen(first)) && strchr(r->out, '\n') &&
                   !strncmp(strchr(r->out, '\n') - 20, "  |Hello, world!.", 17),
               r);
    static unsigned char bytes[32768];
    char line[128];
    for (size_t i = 0; i < NOBJ; i++) {
        if (i == 4)
            continue; /* its hex is longer than the output the harness keeps */
        size_t len = e[i].usable;
        fill(bytes, len, i);
        r = run("dump", path, objects[i].name, NULL);
        CHECK_TOOL(r->code == 0, r);
        size_t lines = 0;
        for (const char *p = r->out; (p = strchr(p, '\n')); p++)
            lines++;
        CHECK_TOOL(lines == (len + 15) / 16, r);
        hex_line(line, bytes, (len - 1) / 16 * 16, len - (len - 1) / 16 * 16);
        CHECK_TOOL(strlen(r->out) >= strlen(line) &&
                       !strcmp(r->out + strlen(r->out) - strlen(line), line),
                   r);
    }
    /* The large object: its first lines. */
    fill(bytes, e[4].usable, 4);
    r = run("dump", path, "big", NULL);
    hex_line(line, bytes, 16, 16);
    CHECK_TOOL(r->code == 0 && strstr(r->out, line) == r->out + strlen(line), r);

    /* Raw: exactly the usable bytes. */
    for (size_t i = 0; i < NOBJ; i++) {
        fill(bytes, e[i].usable, i);
        r = run("dump", path, objects[i].name, "--raw", NULL);
        CHECK_TOOL(r->code == 0 && !r->err[0], r);
        if (r->out_len != e[i].usable || memcmp(r->out, bytes, e[i].usable))
            ph_test_fail(__FILE__, __LINE__, "dump --raw %s: %zu bytes, want %zu, %s", objects[i].name,
                         r->out_len, e[i].usable, r->out_len == e[i].usable ? "different" : "");
    }
    r = run("dump", "--raw", path, "--", "alpha", NULL); /* options anywhere, -- before NAME */
    CHECK_TOOL(r->code == 0 && r->out_len == e[1].usable && !strcmp(r->out, HELLO), r);
    /* Output that cannot be written is a failure, not a short dump. */
    char cmd[PATH_MAX + 128];
    snprintf(cmd, sizeof(cmd), "exec '%s' dump '%s' alpha --raw > /dev/full", PHEAP_TOOL, path);
    r = ph_test_run_tool("/bin/sh", "-c", cmd, NULL);
    CHECK_TOOL(r->code == 1 && strstr(r->err, "writing the output"), r);

    char *after = file_bytes(path, &after_len);
    CHECK(before && after && before_len == after_len && !memcmp(before, after, before_len));
    free(before);
    free(after);
}

TEST(missing_names_files_and_bad_usage)
{
    const char *path = ph_test_path("errors.heap");
    make_heap(path);
    ph_tool_result *r = run("dump", path, "nobody", NULL);
    CHECK_TOOL(r->code == 1 && !r->out[0] && strstr(r->err, "PHEAP_ENOENT") &&
                   strstr(r->err, "'nobody'"),
               r);
    r = run("dump", path, "tab\there", "--raw", NULL); /* shown escaped */
    CHECK_TOOL(r->code == 1 && !r->out[0] && strstr(r->err, "'tab\\there'"), r);
    r = run("dump", path, "--", "-x", NULL);
    CHECK_TOOL(r->code == 1 && strstr(r->err, "'-x'") && strstr(r->err, "PHEAP_ENOENT"), r);

    const char *missing = ph_test_path("missing.heap");
    r = run("names", missing, NULL);
    CHECK_TOOL(r->code == 1 && !r->out[0] && strstr(r->err, missing), r);
    r = run("names", missing, "--json", NULL);
    CHECK_TOOL(r->code == 1 && ph_test_json_error(r->out, "PHEAP_ENOENT", PHEAP_ENOENT), r);
    r = run("dump", missing, "alpha", NULL);
    CHECK_TOOL(r->code == 1 && !r->out[0] && strstr(r->err, missing), r);
    CHECK(access(missing, F_OK) != 0);

    const char *text = ph_test_path("text.txt");
    FILE *f = fopen(text, "w");
    REQUIRE(f);
    fputs("not a heap at all\n", f);
    fclose(f);
    r = run("names", text, "--json", NULL);
    CHECK_TOOL(r->code == 1 && ph_test_json_error(r->out, "PHEAP_ENOTHEAP", PHEAP_ENOTHEAP), r);
    r = run("dump", text, "alpha", NULL);
    CHECK_TOOL(r->code == 1 && strstr(r->err, "not a pheap heap"), r);

    r = run("names", NULL);
    CHECK_TOOL(r->code == 2 && strstr(r->err, "usage: pheap names"), r);
    r = run("names", "--json", NULL);
    CHECK_TOOL(r->code == 2 && ph_test_json_error(r->out, "PHEAP_EINVAL", PHEAP_EINVAL), r);
    r = run("names", path, "--bogus", NULL);
    CHECK_TOOL(r->code == 2 && strstr(r->err, "--bogus") && !r->out[0], r);
    r = run("names", path, "--bogus", "--json", NULL);
    CHECK_TOOL(r->code == 2 && ph_test_json_error(r->out, "PHEAP_EINVAL", PHEAP_EINVAL), r);
    r = run("names", path, "--prefix", NULL);
    CHECK_TOOL(r->code == 2 && strstr(r->err, "--prefix"), r);
    r = run("names", path, "other", NULL);
    CHECK_TOOL(r->code == 2 && strstr(r->err, "'other'"), r);
    r = run("dump", path, NULL);
    CHECK_TOOL(r->code == 2 && strstr(r->err, "usage: pheap dump"), r);
    r = run("dump", path, "alpha", "beta", NULL);
    CHECK_TOOL(r->code == 2 && strstr(r->err, "'beta'") && !r->out[0], r);
    r = run("dump", path, "alpha", "--json", NULL);
    CHECK_TOOL(r->code == 2 && strstr(r->err, "--json") && !r->out[0], r);
}

/* A name whose block was freed with pheap_free: listed without a usable
 * size, and not dumped. */
TEST(dangling_name)
{
    const char *path = ph_test_path("dangling.heap");
    pheap *h = ph_test_create(path, SIZE);
    REQUIRE(h);
    pheap_off off = pheap_alloc_named(h, "ghost", 40);
    REQUIRE(off);
    REQUIRE_OK(pheap_free(h, off));
    REQUIRE(pheap_alloc_named(h, "alive", 40));
    REQUIRE_OK(pheap_close(h));
    ph_tool_result *r = run("names", path, NULL);
    const char *row = row_of(r->out, "ghost");
    CHECK_TOOL(r->code == 0 && row && strstr(row, " 40  ") && strstr(r->err, "not live"), r);
    CHECK_TOOL(row && strchr(row, '-') && strchr(row, '-') < strstr(row, "ghost"), r);
    r = run("names", path, "--json", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out) && strstr(r->out, "\"usable\": null") &&
                   ph_test_json_num(r->out, "count") == 2,
               r);
    r = run("dump", path, "ghost", NULL);
    CHECK_TOOL(r->code == 1 && !r->out[0] && strstr(r->err, "PHEAP_ENOTLIVE"), r);
}

/* A GC heap left by a crash (the simulator): names listed (lookups need
 * no recovery), usable sizes unknown until pheap recover. */
TEST(gc_heap_left_by_a_crash)
{
    const char *base = ph_test_path("gc-base.heap"), *image = ph_test_path("gc-crashed.heap");
    unlink(base);
    pheap_options o = {.size = SIZE, .flags = PHEAP_CREATE | PHEAP_SIMULATE,
                       .consistency = PHEAP_CONSISTENCY_GC};
    pheap *h;
    REQUIRE_OK(pheap_open(base, &o, &h));
    pheap_off off = pheap_alloc_named(h, "kept", 24);
    REQUIRE(off);
    REQUIRE_OK(pheap_sim_crash(h, image, 1, 0.0)); /* closes h */

    ph_tool_result *r = run("names", image, "--json", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_num(r->out, "offset") == (long long)off &&
                   strstr(r->out, "\"usable\": null") && strstr(r->err, "pheap recover"),
               r);
    r = run("dump", image, "kept", NULL);
    CHECK_TOOL(r->code == 1 && strstr(r->err, "PHEAP_ERECOVER") && strstr(r->err, "pheap recover"),
               r);
    r = run("recover", image, NULL);
    CHECK_TOOL(r->code == 0, r);
    r = run("dump", image, "kept", "--raw", NULL);
    CHECK_TOOL(r->code == 0 && r->out_len >= 24, r);
}

/* A heap made before the name directory (format 1.3: the NAMES feature
 * cleared in the header): no names, and a note that says why. */
TEST(heap_without_name_directory)
{
    const char *path = ph_test_path("old.heap");
    pheap *h = ph_test_create(path, SIZE);
    REQUIRE(h);
    REQUIRE_OK(pheap_close(h));
    FILE *f = fopen(path, "r+b");
    REQUIRE(f);
    ph_header hdr;
    REQUIRE(fread(&hdr, sizeof(hdr), 1, f) == 1);
    hdr.feat_incompat &= ~(uint32_t)PH_FEAT_INCOMPAT_NAMES;
    hdr.minor = 3;
    hdr.checksum = ph_header_checksum(&hdr);
    REQUIRE(fseek(f, 0, SEEK_SET) == 0 && fwrite(&hdr, sizeof(hdr), 1, f) == 1);
    fclose(f);

    ph_tool_result *r = run("names", path, NULL);
    CHECK_TOOL(r->code == 0 && !strcmp(r->out, "0 names\n") && strstr(r->err, "no name directory"),
               r);
    r = run("names", path, "--json", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out) && ph_test_json_num(r->out, "count") == 0,
               r);
    r = run("dump", path, "anything", NULL);
    CHECK_TOOL(r->code == 1 && strstr(r->err, "PHEAP_ENOENT"), r);
}

/* A heap another process holds read-write: a snapshot, said so on stderr;
 * a heap name resolved in the heap directory. */
TEST(held_elsewhere_and_heap_names)
{
    const char *path = ph_test_path("held.heap");
    make_heap(path);
    int holder = ph_test_hold(path, 0);
    REQUIRE(holder > 0);
    ph_tool_result *r = run("names", path, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "\n6 names\n") && strstr(r->err, "snapshot"), r);
    r = run("dump", path, "alpha", "--raw", NULL);
    CHECK_TOOL(r->code == 0 && !strcmp(r->out, HELLO) && strstr(r->err, "snapshot"), r);
    CHECK_EQ(ph_test_release(holder), 0);

    const char *old = getenv("PHEAP_DIR");
    char *saved = old ? strdup(old) : NULL;
    setenv("PHEAP_DIR", ph_test_dir(), 1);
    r = run("names", "held", "--prefix", "alp", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "\n2 names starting with 'alp'\n"), r);
    r = run("dump", "held", "alpha", "--raw", NULL);
    CHECK_TOOL(r->code == 0 && !strcmp(r->out, HELLO), r);
    if (saved)
        setenv("PHEAP_DIR", saved, 1);
    else
        unsetenv("PHEAP_DIR");
    free(saved);
}
