/*
 * messages.c -- what users read: pheap_errmsg() after every failure of a
 * full heap, and the tool's messages say the path and the reason once.
 */
#include <string.h>
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
