/*
 * messages.c -- what users read: pheap_errmsg() after every failure of a
 * full heap, and the tool's messages say the path and the reason once.
 */
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define run(...) ph_test_run_tool(PHEAP_TOOL, __VA_ARGS__)

static unsigned occurrences(const char *s, const char *what)
{
    unsigned n = 0;
    for (const char *p = s; (p = strstr(p, what)) != NULL; p += strlen(what))
        n++;
    return n;
}

static void fill_until_full(size_t size)
{
    const char *path = ph_test_path("full.heap");
    unlink(path);
    /* No flushes: filling takes tens of thousands of operations. */
    pheap_options o = {.size = 4u << 20, .flags = PHEAP_CREATE, .flush = PHEAP_FLUSH_NONE};
    pheap *h;
    REQUIRE_OK(pheap_open(path, &o, &h));
    unsigned n = 0;
    while (pheap_alloc(h, size) != 0)
        n++;
    CHECK(n > 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENOMEM);
    const char *msg = pheap_errmsg();
    if (!msg[0] || !strcmp(msg, "no error"))
        ph_test_fail(__FILE__, __LINE__, "%zu-byte blocks: heap full after %u, message \"%s\"", size,
                     n, msg);
    pheap_close(h);
}

TEST(errmsg_after_a_full_heap)
{
    fill_until_full(64);
    fill_until_full(3000);
    fill_until_full(100000);
}

TEST(tool_says_path_and_reason_once)
{
    const char *path = ph_test_path("once.heap");
    ph_tool_result *r = run("create", path, "--size", "4M", NULL);
    CHECK_TOOL(r->code == 0, r);
    r = run("create", path, "--size", "4M", NULL);
    CHECK_TOOL(r->code == 1, r);
    CHECK_TOOL(occurrences(r->err, path) == 1 && occurrences(r->err, "exist") == 1, r);
    const char *missing = ph_test_path("missing.heap");
    r = run("info", missing, NULL);
    CHECK_TOOL(r->code == 1 && occurrences(r->err, missing) == 1, r);
}

TEST(info_counts_opens_in_words)
{
    const char *path = ph_test_path("count.heap");
    ph_tool_result *r = run("create", path, "--size", "4M", NULL); /* one read-write open */
    CHECK_TOOL(r->code == 0, r);
    r = run("info", path, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "opened 1 time,") && !strstr(r->out, "1 times"), r);
    r = run("check", path, NULL); /* read-only: not an open that counts */
    CHECK_TOOL(r->code == 0, r);
    r = run("info", path, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "opened 1 time,"), r);
    r = run("check", "--repair", path, NULL); /* read-write */
    CHECK_TOOL(r->code == 0, r);
    r = run("info", path, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "opened 2 times,"), r);
}

TEST(usable_size_of_a_freed_block_is_not_a_double_free)
{
    pheap *h = ph_test_create(ph_test_path("usable.heap"), 4u << 20);
    REQUIRE(h);
    pheap_off off = pheap_alloc(h, 100);
    REQUIRE(off);
    REQUIRE_OK(pheap_free(h, off));
    CHECK_EQ(pheap_usable_size(h, off), 0);
    CHECK(strstr(pheap_errmsg(), "double") == NULL);
    CHECK(strstr(pheap_errmsg(), "is free") != NULL);
    pheap_close(h);
}

TEST(not_found_says_not_found)
{
    CHECK(strcmp(pheap_strerror(PHEAP_ENOENT), "not found") == 0);
    pheap *h;
    CHECK_EQ(pheap_open(ph_test_path("absent.heap"), NULL, &h), PHEAP_ENOENT);
    CHECK(strstr(pheap_errmsg(), "absent.heap") != NULL);
}

/* A second open of a heap held elsewhere names the holder and its mode. */
TEST(busy_says_by_whom_and_how)
{
    const char *path = ph_test_path("busy.heap");
    pheap_close(ph_test_create(path, 4u << 20));
    for (int rw = 0; rw < 2; rw++) {
        int pid = ph_test_hold(path, rw ? 0 : PHEAP_RDONLY);
        REQUIRE(pid > 0);
        pheap *h;
        char want[64];
        snprintf(want, sizeof(want), "by process %d", pid);
        CHECK_EQ(pheap_open(path, NULL, &h), PHEAP_EBUSY);
        CHECK(strstr(pheap_errmsg(), want) != NULL);
        CHECK(strstr(pheap_errmsg(), rw ? "read-write" : "read-only") != NULL);
        if (!strstr(pheap_errmsg(), want))
            printf("  message: %s\n", pheap_errmsg());
        CHECK_EQ(ph_test_release(pid), 0);
    }
}

TEST(stats_do_not_call_an_empty_heap_fragmented)
{
    const char *path = ph_test_path("frag.heap");
    pheap *h = ph_test_create(path, 8u << 20);
    REQUIRE(h);
    REQUIRE(pheap_alloc(h, 24));
    pheap_close(h);
    ph_tool_result *r = run("stats", path, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "fragmentation:") && !strstr(r->out, "100.0%"), r);
}

/* Creation goes through a temporary file; its name never reaches the user. */
TEST(no_temporary_names)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/no-such-dir/t.heap", ph_test_dir());
    pheap_options o = {.size = 4u << 20, .flags = PHEAP_CREATE};
    pheap *h;
    CHECK_EQ(pheap_open(path, &o, &h), PHEAP_ENOENT);
    CHECK(strstr(pheap_errmsg(), path) != NULL);
    CHECK(strstr(pheap_errmsg(), ".tmp") == NULL);
    ph_tool_result *r = run("create", path, "--size", "4M", NULL);
    CHECK_TOOL(r->code == 1 && !strstr(r->err, ".tmp") && occurrences(r->err, path) == 1, r);
}

/* Root names are bytes: --json output stays valid JSON (and UTF-8) whatever they hold. */
TEST(json_of_names_that_are_not_utf8)
{
    const char *path = ph_test_path("names.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    pheap_off b = pheap_alloc(h, 16);
    REQUIRE(b);
    REQUIRE_OK(pheap_root_set(h, "bad\xff\xfe", b));
    REQUIRE_OK(pheap_root_set(h, "ctl\x01\x7f", b));
    REQUIRE_OK(pheap_root_set(h, "caf\xc3\xa9", b)); /* valid UTF-8 stays as it is */
    pheap_close(h);
    ph_tool_result *r = run("info", path, "--json", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out), r);
    CHECK_TOOL(strstr(r->out, "bad\\u00ff\\u00fe") && strstr(r->out, "ctl\\u0001\\u007f"), r);
    CHECK_TOOL(strstr(r->out, "caf\xc3\xa9"), r);
    for (const unsigned char *p = (const unsigned char *)r->out; *p; p++)
        if (*p == 0xff || *p == 0xfe)
            ph_test_fail(__FILE__, __LINE__, "a raw byte %#x in the JSON output", *p);
}

TEST(null_handles_record_an_error)
{
    pheap *h;
    pheap_open(ph_test_path("absent2.heap"), NULL, &h); /* leaves ENOENT behind */
    CHECK(pheap_direct(NULL, 4096) == NULL);
    CHECK_EQ(pheap_errno(), PHEAP_EINVAL);
    pheap_open(ph_test_path("absent2.heap"), NULL, &h);
    CHECK_EQ(pheap_offset(NULL, &h), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EINVAL);
    pheap_open(ph_test_path("absent2.heap"), NULL, &h);
    CHECK_EQ(pheap_root_count(NULL), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EINVAL);
}

/* A root whose block the program freed is reported as dangling, not as a double free. */
TEST(dangling_root_is_called_so)
{
    const char *path = ph_test_path("dangle.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    pheap_off b = pheap_alloc(h, 64);
    REQUIRE(b);
    REQUIRE_OK(pheap_root_set(h, "cfg", b));
    REQUIRE_OK(pheap_free(h, b));
    pheap_check_report rep;
    CHECK_EQ(pheap_check(h, &rep), PHEAP_ECORRUPT);
    CHECK(strstr(rep.first_error, "dangles") && strstr(rep.first_error, "was freed"));
    CHECK(strstr(rep.first_error, "double") == NULL);
    pheap_close(h);
}
