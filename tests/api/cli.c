/*
 * cli.c -- the pheap command-line tool, run as a separate program: create,
 * size parsing, info in text and JSON, clean and dirty heaps, failures and
 * their exit codes (0 success, 1 the operation failed, 2 bad usage).
 */
#include <ctype.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define FAIL(...) ph_test_fail(__FILE__, __LINE__, __VA_ARGS__)
#define run(...) ph_test_run_tool(PHEAP_TOOL, __VA_ARGS__)
typedef ph_tool_result run_result;

/* ---- helpers ---------------------------------------------------------------- */

static int same_file(const char *path, const char *copy)
{
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", path, copy);
    return system(cmd) == 0;
}

static void uuid_text(const uint8_t u[16], char out[37])
{
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
             u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
             u[15]);
}

/* ---- create ---------------------------------------------------------------- */

TEST(create_and_refuse_again)
{
    const char *path = ph_test_path("created.heap");
    run_result *r = run("create", path, "--size", "16M", NULL);
    CHECK_TOOL(r->code == 0, r);
    CHECK_TOOL(strstr(r->out, "created") && strstr(r->out, path), r);
    CHECK_TOOL(strstr(r->out, "16777216"), r);

    pheap *h;
    pheap_options ro = {.flags = PHEAP_RDONLY};
    REQUIRE_OK(pheap_open(path, &ro, &h));
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.data_size, 16u << 20); /* --size is the data region */
    CHECK_EQ(st.max_size, st.size);    /* no --max-size: no growth */
    CHECK_EQ(st.was_unclean, 0);
    pheap_close(h);

    const char *copy = ph_test_path("created.copy");
    REQUIRE(ph_test_copy_file(path, copy) == 0);
    r = run("create", path, "--size", "32M", NULL);
    CHECK_TOOL(r->code != 0 && r->code != 2, r); /* the operation failed, not the usage */
    CHECK_TOOL(strstr(r->err, path), r);
    CHECK(same_file(path, copy));
}

TEST(create_mode)
{
    const char *path = ph_test_path("mode.heap");
    run_result *r = run("create", path, "--size", "4M", "--mode", "0640", NULL);
    CHECK_TOOL(r->code == 0, r);
    struct stat st;
    REQUIRE(stat(path, &st) == 0);
    CHECK_EQ(st.st_mode & 07777, 0640);
    r = run("create", ph_test_path("mode2.heap"), "--size", "4M", "--mode", "rw", NULL);
    CHECK_TOOL(r->code == 2, r);
}

/* `pheap create --size S [--max-size M]`, then the sizes info reports:
 * want_size bytes of data region, a file that may grow to want_max (0:
 * not at all, max_size is the file's size). */
static void check_sizes(const char *size, const char *max_size, unsigned long long want_size,
                        unsigned long long want_max)
{
    const char *path = ph_test_path("sized.heap");
    unlink(path);
    run_result *r = max_size ? run("create", path, "--size", size, "--max-size", max_size, NULL)
                             : run("create", path, "--size", size, NULL);
    if (r->code != 0) {
        FAIL("create --size %s --max-size %s: exit %d: %s", size, max_size ? max_size : "-",
             r->code, r->err);
        return;
    }
    r = run("info", path, "--json", NULL);
    if (r->code != 0) {
        FAIL("info --json after --size %s: exit %d: %s", size, r->code, r->err);
        return;
    }
    int found;
    unsigned long long got = ph_test_json_u64(r->out, "data_size", &found);
    if (!found || got != want_size)
        FAIL("--size %s: info says \"data_size\": %llu, expected %llu\n    %s", size, got,
             want_size, r->out);
    if (!want_max)
        want_max = ph_test_json_u64(r->out, "size", &found);
    got = ph_test_json_u64(r->out, "max_size", &found);
    if (!found || got != want_max)
        FAIL("--size %s --max-size %s: info says \"max_size\": %llu, expected %llu", size,
             max_size ? max_size : "-", got, want_max);
    unlink(path);
}

TEST(size_suffixes)
{
    check_sizes("4194304", NULL, 4ull << 20, 0);
    check_sizes("4096K", NULL, 4ull << 20, 0);
    check_sizes("5120k", NULL, 5ull << 20, 0);
    check_sizes("6M", NULL, 6ull << 20, 0);
    check_sizes("7m", NULL, 7ull << 20, 0);
    check_sizes("8MiB", NULL, 8ull << 20, 0);
    check_sizes("9MB", NULL, 9ull << 20, 0);
    check_sizes("1G", NULL, 1ull << 30, 0);
    check_sizes("32M", "1G", 32ull << 20, 1ull << 30);
    check_sizes("64M", "2g", 64ull << 20, 2ull << 30);
#if defined(__SANITIZE_THREAD__) /* no room for a 1 TiB mapping under ThreadSanitizer */
    check_sizes("64M", "64G", 64ull << 20, 64ull << 30);
#else
    check_sizes("64M", "1T", 64ull << 20, 1ull << 40);
#endif
    /* Not a chunk multiple: rounded up to 64 KiB. */
    check_sizes("3000K", NULL, 3080192, 0);
}

TEST(bad_sizes)
{
    static const char *const bad[] = {
        "", "abc", "16X", "-5M", "16MM", "1.5G", "16 M", "0x100000", "M", "KiB", "16MiBs",
        "16777216T", "99999999999999999999", "184467440737095516160",
    };
    const char *path = ph_test_path("badsize.heap");
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        unlink(path);
        run_result *r = run("create", path, "--size", bad[i], NULL);
        if (r->code != 2 || !r->err[0])
            FAIL("--size '%s': exit %d (expected 2 with a message), stderr: %s", bad[i], r->code,
                 r->err);
        CHECK(access(path, F_OK) != 0);
        r = run("create", path, "--size", "4M", "--max-size", bad[i], NULL);
        if (r->code != 2 || !r->err[0])
            FAIL("--max-size '%s': exit %d (expected 2 with a message), stderr: %s", bad[i],
                 r->code, r->err);
        CHECK(access(path, F_OK) != 0);
    }
    run_result *r = run("create", path, "--size", NULL);
    CHECK_TOOL(r->code == 2, r);
    r = run("create", path, NULL);
    CHECK_TOOL(r->code == 2, r);
    r = run("create", "--size", "4M", NULL);
    CHECK_TOOL(r->code == 2, r);
    CHECK(access(path, F_OK) != 0);
}

/* ---- info ---------------------------------------------------------------------- */

/* Creates a heap with the library and sets the given roots (offsets
 * relative to the data region). */
static int make_heap_with_roots(const char *path, const char *const *names, unsigned n,
                                pheap_off *offs, uint8_t uuid[16])
{
    pheap *h = ph_test_create(path, 4u << 20);
    if (!h)
        return -1;
    struct pheap_stats st;
    pheap_stats(h, &st);
    for (unsigned i = 0; i < n; i++) {
        offs[i] = pheap_alloc(h, 64 * (i + 1) * (i + 3)); /* roots name live blocks */
        if (!offs[i] || pheap_root_set(h, names[i], offs[i]) != 0) {
            FAIL("root_set %s: %s", names[i], pheap_errmsg());
            pheap_close(h);
            return -1;
        }
    }
    memcpy(uuid, st.uuid, 16);
    return pheap_close(h);
}

TEST(info_text)
{
    const char *path = ph_test_path("info.heap");
    static const char *const names[] = {"alpha", "beta.index", "gamma-root"};
    pheap_off offs[3];
    uint8_t uuid[16];
    REQUIRE(make_heap_with_roots(path, names, 3, offs, uuid) == 0);
    char u[37];
    uuid_text(uuid, u);

    const char *copy = ph_test_path("info.copy");
    REQUIRE(ph_test_copy_file(path, copy) == 0);
    run_result *r = run("info", path, NULL);
    CHECK_TOOL(r->code == 0, r);
    const char *v;
    CHECK_TOOL((v = ph_test_text_field(r->out, "state:")) && strncmp(v, "clean", 5) == 0, r);
    CHECK_TOOL(!strstr(r->out, "dirty"), r);
    CHECK_TOOL((v = ph_test_text_field(r->out, "uuid:")) && strncmp(v, u, 36) == 0, r);
    CHECK_TOOL((v = ph_test_text_field(r->out, "heap:")) && strncmp(v, path, strlen(path)) == 0, r);
    CHECK_TOOL((v = ph_test_text_field(r->out, "format:")) && strncmp(v, "1.8", 3) == 0, r);
    CHECK_TOOL((v = ph_test_text_field(r->out, "roots:")) && strncmp(v, "3\n", 2) == 0, r);
    CHECK_TOOL((v = ph_test_text_field(r->out, "protection:")) && strncmp(v, "alias:", 6) == 0, r);
    for (int i = 0; i < 3; i++) {
        const char *line = strstr(r->out, names[i]);
        CHECK_TOOL(line, r);
        char num[32];
        snprintf(num, sizeof(num), "%llu", (unsigned long long)offs[i]);
        if (line) {
            const char *eol = strchr(line, '\n');
            const char *at = strstr(line, num);
            if (!at || (eol && at > eol))
                FAIL("root %s: its offset %s is not on its line\n%s", names[i], num, r->out);
        }
    }
    CHECK(same_file(path, copy)); /* info writes nothing */
}

TEST(info_json)
{
    const char *path = ph_test_path("json.heap");
    /* Names that need escaping in JSON. */
    static const char *const names[] = {"plain", "quote\"back\\slash", "tab\there", "ctl\x01"};
    pheap_off offs[4];
    uint8_t uuid[16];
    REQUIRE(make_heap_with_roots(path, names, 4, offs, uuid) == 0);
    char u[37], want[96];
    uuid_text(uuid, u);

    run_result *r = run("info", path, "--json", NULL);
    CHECK_TOOL(r->code == 0, r);
    CHECK_TOOL(ph_test_json_object(r->out), r);
    CHECK_TOOL(strstr(r->out, "\"state\": \"clean\""), r);
    CHECK_TOOL(strstr(r->out, "\"format\": \"1.8\""), r);
    snprintf(want, sizeof(want), "\"uuid\": \"%s\"", u);
    CHECK_TOOL(strstr(r->out, want), r);
    CHECK_TOOL(strstr(r->out, "\"roots\": ["), r);
    CHECK_TOOL(strstr(r->out, "\"protection\": \"alias\""), r);
    static const char *const escaped[] = {"\"plain\"", "\"quote\\\"back\\\\slash\"",
                                          "\"tab\\u0009here\"", "\"ctl\\u0001\""};
    for (int i = 0; i < 4; i++) {
        char entry[160];
        snprintf(entry, sizeof(entry), "{\"name\": %s, \"offset\": %llu}", escaped[i],
                 (unsigned long long)offs[i]);
        if (!strstr(r->out, entry))
            FAIL("no root entry %s in\n%s", entry, r->out);
    }
    int found;
    CHECK_EQ(ph_test_json_u64(r->out, "data_size", &found), 4u << 20);
    CHECK(found);
    CHECK_EQ(ph_test_json_u64(r->out, "unclean_count", &found), 0);
    CHECK(found);

    /* A heap without roots: an empty array, still valid. */
    const char *bare = ph_test_path("bare.heap");
    pheap *h = ph_test_create(bare, 4u << 20);
    REQUIRE(h);
    REQUIRE_OK(pheap_close(h));
    r = run("info", "--json", bare, NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out), r);
    CHECK_TOOL(strstr(r->out, "\"roots\": []"), r);
}

TEST(info_dirty)
{
    const char *path = ph_test_path("dirty.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    REQUIRE_OK(pheap_close(h));
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        pheap *c;
        _exit(pheap_open(path, NULL, &c) == 0 ? 0 : 1); /* no pheap_close */
    }
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    const char *copy = ph_test_path("dirty.copy");
    REQUIRE(ph_test_copy_file(path, copy) == 0);
    run_result *r = run("info", path, NULL);
    const char *v = ph_test_text_field(r->out, "state:");
    CHECK_TOOL(r->code == 0 && v && strncmp(v, "dirty", 5) == 0, r);
    r = run("info", path, "--json", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out), r);
    CHECK_TOOL(strstr(r->out, "\"state\": \"dirty\""), r);
    CHECK(same_file(path, copy)); /* info is read-only: no recovery ran */

    /* A read-write open recovers; then it is clean again. */
    REQUIRE_OK(pheap_open(path, NULL, &h));
    REQUIRE_OK(pheap_close(h));
    r = run("info", path, "--json", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "\"state\": \"clean\""), r);
    int found;
    CHECK_EQ(ph_test_json_u64(r->out, "unclean_count", &found), 1);
    CHECK_EQ(ph_test_json_u64(r->out, "open_count", &found), 3); /* create, child, recovery */
}

TEST(info_failures)
{
    const char *text = ph_test_path("notes.txt");
    FILE *f = fopen(text, "w");
    REQUIRE(f);
    fputs("just some text, not a heap\n", f);
    fclose(f);
    run_result *r = run("info", text, NULL);
    CHECK_TOOL(r->code == 1, r);
    CHECK_TOOL(strstr(r->err, text), r);
    CHECK_TOOL(r->out[0] == '\0', r);
    r = run("info", text, "--json", NULL);
    CHECK_TOOL(r->code == 1 && strstr(r->err, text), r);

    const char *missing = ph_test_path("missing.heap");
    r = run("info", missing, NULL);
    CHECK_TOOL(r->code == 1 && strstr(r->err, missing), r);

    r = run("info", ph_test_dir(), NULL);
    CHECK_TOOL(r->code == 1 && strstr(r->err, ph_test_dir()), r);

    r = run("info", NULL);
    CHECK_TOOL(r->code == 2, r);
    r = run("info", text, "--yaml", NULL);
    CHECK_TOOL(r->code == 2, r);
}

/* ---- dispatch ------------------------------------------------------------------ */

TEST(commands)
{
    run_result *r = run("frobnicate", NULL);
    CHECK_TOOL(r->code == 2, r);
    CHECK_TOOL(strstr(r->err, "frobnicate"), r);
    r = run(NULL);
    CHECK_TOOL(r->code == 2 && strstr(r->err, "usage"), r);
    r = run("--help", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "create") && strstr(r->out, "info"), r);
    r = run("--version", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, pheap_version()) && strstr(r->out, "1.0"), r);
}
