/*
 * cli_alloc.c -- `pheap check` and `pheap stats`, run as a separate
 * program on heaps with live blocks: text and JSON output agree with the
 * library, check reports a dirty heap without writing it and --repair
 * recovers it, check reports corruption (exit 1),
 * stats writes nothing, bad usage exits 2; both count the transactions a
 * crash left in flight, rolled back and rolled forward.
 */
#include <ctype.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "format/layout.h"
#include "harness.h"

#define run(...) ph_test_run_tool(PHEAP_TOOL, __VA_ARGS__)
typedef ph_tool_result run_result;


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
    CHECK_TOOL(r->code == 0, r);
    CHECK_TOOL(strstr(r->out, "consistent (0 errors)"), r);
    CHECK_TOOL(strstr(r->out, "not needed"), r);
    CHECK_TOOL(ph_test_text_num(r->out, "live blocks:") == NSMALL + NMID + NLARGE, r);
    CHECK_TOOL(ph_test_text_num(r->out, "large extents:") == NLARGE, r);
    CHECK_TOOL(ph_test_text_num(r->out, "roots:") == 1, r);
    CHECK_TOOL(ph_test_text_num(r->out, "slabs:") >= 2, r);
    r = run("check", "--json", path, NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out), r);
    CHECK_TOOL(strstr(r->out, "\"consistent\": true"), r);
    CHECK_TOOL(ph_test_json_num(r->out, "errors") == 0, r);
    CHECK_TOOL(ph_test_json_num(r->out, "live_blocks") == NSMALL + NMID + NLARGE, r);
    CHECK_TOOL(ph_test_json_num(r->out, "live_bytes") >= NSMALL * 64 + NMID * 1000 + NLARGE * 100000, r);
    CHECK_TOOL(ph_test_json_num(r->out, "large_extents") == NLARGE, r);
    CHECK_TOOL(ph_test_json_num(r->out, "free_bytes") > 0, r);
    CHECK_TOOL(strstr(r->out, "\"recovered\": false"), r);
}

TEST(stats_per_class_and_read_only)
{
    const char *path = used_heap("stats.heap");
    REQUIRE(path);
    char copy[600];
    snprintf(copy, sizeof(copy), "%s.copy", path);
    REQUIRE(ph_test_copy_file(path, copy) == 0);
    run_result *r = run("stats", path, NULL);
    CHECK_TOOL(r->code == 0, r);
    CHECK_TOOL(strstr(r->out, "size classes with slabs:"), r);
    CHECK_TOOL(strstr(r->out, "fragmentation:"), r);
    CHECK_TOOL(ph_test_text_num(r->out, "live:") == NSMALL + NMID + NLARGE, r);
    CHECK_TOOL(ph_test_text_num(r->out, "large extents:") == NLARGE, r);
    /* The 64-byte class row: class, block size 64, ..., live blocks NSMALL. */
    int found = 0;
    for (const char *p = r->out; p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        unsigned cls, bs, per, slabs, live, avail, unused;
        double used;
        if (sscanf(p, " %u %u %u %u %u %u %lf%% %u", &cls, &bs, &per, &slabs, &live, &avail,
                   &used, &unused) == 8 && bs == 64)
            found = live == NSMALL && slabs == 1 && per * bs <= 65536 && avail == per &&
                    unused == (per - NSMALL) * 64 && used > 100.0 * NSMALL / per - 0.1 &&
                    used < 100.0 * NSMALL / per + 0.1;
    }
    CHECK_TOOL(found, r);
    r = run("stats", "--json", path, NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out), r);
    CHECK_TOOL(ph_test_json_num(r->out, "live_blocks") == NSMALL + NMID + NLARGE, r);
    CHECK_TOOL(ph_test_json_num(r->out, "large_extents") == NLARGE, r);
    CHECK_TOOL(strstr(r->out, "\"state\": \"clean\""), r);
    const char *c64 = strstr(r->out, "\"block_size\": 64,");
    CHECK_TOOL(c64 && ph_test_json_num(c64, "live_blocks") == NSMALL, r);
    long long avail = c64 ? ph_test_json_num(c64, "available_blocks") : -1;
    const char *frag = c64 ? strstr(c64, "\"fragmentation\": ") : NULL;
    CHECK_TOOL(avail > NSMALL && frag, r);
    if (frag && avail > 0) { /* the share of the class's blocks unused */
        double d = strtod(frag + 17, NULL) - (1.0 - (double)NSMALL / (double)avail);
        CHECK(d < 1e-4 && d > -1e-4);
    }
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
    CHECK_TOOL(r->code == 0 && strstr(r->out, "\"state\": \"dirty\""), r);
    r = run("stats", path, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "not closed cleanly"), r);
    char copy[600], cmd[1300];
    snprintf(copy, sizeof(copy), "%s.copy", path);
    REQUIRE(ph_test_copy_file(path, copy) == 0);
    snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", path, copy);
    r = run("check", "--json", path, NULL); /* read-only: says what recovery would do */
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out), r);
    CHECK_TOOL(strstr(r->out, "\"recovery_needed\": true") && strstr(r->out, "\"recovered\": false"), r);
    CHECK_TOOL(ph_test_json_num(r->out, "live_blocks") == NSMALL + NMID + NLARGE + 2, r);
    CHECK(system(cmd) == 0);
    r = run("check", path, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "recovery:      needed"), r);
    CHECK(system(cmd) == 0);
    r = run("check", "--repair", "--json", path, NULL); /* recovery runs */
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out), r);
    CHECK_TOOL(strstr(r->out, "\"recovered\": true") && strstr(r->out, "\"mode\": \"repair\""), r);
    CHECK_TOOL(ph_test_json_num(r->out, "live_blocks") == NSMALL + NMID + NLARGE + 2, r);
    r = run("stats", "--json", path, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "\"state\": \"clean\""), r);
    r = run("check", path, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "not needed"), r);
}

/* ---- transactions left in flight ------------------------------------------ */

/* A closed heap whose root "rec" names a zeroed 64-byte block. */
static const char *tx_heap(const char *name, pheap_off *rec)
{
    const char *path = ph_test_path(name);
    pheap *h = ph_test_create(path, 4u << 20);
    if (!h)
        return NULL;
    *rec = pheap_alloc_init(h, 64, PHEAP_ALLOC_ZERO, NULL, NULL);
    if (!*rec || pheap_root_set(h, "rec", *rec) || pheap_close(h))
        return ph_test_fail(__FILE__, __LINE__, "tx heap: %s", pheap_errmsg()), NULL;
    return path;
}

/* The "transactions:" line of `pheap stats` text, or "". */
static const char *tx_line(const char *out)
{
    static char line[512];
    const char *p = strstr(out, "\ntransactions:");
    line[0] = '\0';
    if (p)
        sscanf(p + 1, "%511[^\n]", line);
    return line;
}

/* The stats and check outputs of a heap a crash left with `back`
 * transactions to roll back and `fwd` to roll forward, file unchanged. */
static void check_in_flight(const char *path, int back, int fwd)
{
    char copy[600], want[200];
    snprintf(copy, sizeof(copy), "%s.copy", path);
    REQUIRE(ph_test_copy_file(path, copy) == 0);
    run_result *r = run("stats", "--json", path, NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out), r);
    CHECK_TOOL(strstr(r->out, "\"state\": \"dirty\""), r);
    CHECK_TOOL(ph_test_json_num(r->out, "tx_rolled_back") == back, r);
    CHECK_TOOL(ph_test_json_num(r->out, "tx_rolled_forward") == fwd, r);
    CHECK_TOOL(ph_test_json_num(r->out, "tx_commits") == 0, r); /* the tool's own handle */
    CHECK_TOOL(ph_test_json_num(r->out, "tx_aborts") == 0, r);
    CHECK_TOOL(ph_test_json_num(r->out, "tx_fences") == 0, r);
    r = run("stats", path, NULL);
    snprintf(want, sizeof(want), "transactions:   %d in flight at the crash: recovery rolls %d back",
             back + fwd, back);
    CHECK_TOOL(r->code == 0 && !strncmp(tx_line(r->out), want, strlen(want)), r);
    snprintf(want, sizeof(want), "and %d forward", fwd);
    CHECK_TOOL(strstr(tx_line(r->out), want), r);
    r = run("check", "--json", path, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "\"recovery_needed\": true"), r);
    CHECK_TOOL(ph_test_json_num(r->out, "tx_rolled_back") == back, r);
    CHECK_TOOL(ph_test_json_num(r->out, "tx_rolled_forward") == fwd, r);
    r = run("check", path, NULL);
    snprintf(want, sizeof(want), "%d transaction%s to roll back and %d forward", back,
             back == 1 ? "" : "s", fwd);
    CHECK_TOOL(r->code == 0 && strstr(r->out, want), r);
    char cmd[1300];
    snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", path, copy);
    CHECK(system(cmd) == 0); /* all of it read-only */
}

/* After a read-write open recovered the heap, its counters there and a
 * clean heap for the tool. */
static void check_recovered(const char *path, int back, int fwd)
{
    pheap *h;
    REQUIRE_OK(pheap_open(path, NULL, &h));
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.tx_rolled_back, back);
    CHECK_EQ(st.tx_rolled_forward, fwd);
    REQUIRE_OK(pheap_close(h));
    run_result *r = run("stats", "--json", path, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "\"state\": \"clean\""), r);
    CHECK_TOOL(ph_test_json_num(r->out, "tx_rolled_back") == 0, r);
    CHECK_TOOL(ph_test_json_num(r->out, "tx_rolled_forward") == 0, r);
    r = run("stats", path, NULL);
    CHECK_TOOL(!strcmp(tx_line(r->out), "transactions:   none in flight (closed cleanly)"), r);
}

/* A child snapshots the block with pheap_tx_add, changes it in place and
 * dies of SIGKILL inside the transaction: recovery rolls it back. */
TEST(stats_counts_a_transaction_rolled_back)
{
    pheap_off rec;
    const char *path = tx_heap("tx-back.heap", &rec);
    REQUIRE(path);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        pheap *h;
        pheap_options o = {.flush = PHEAP_FLUSH_NONE}; /* a kill -9 loses nothing */
        if (pheap_open(path, &o, &h) || pheap_tx_begin(h))
            _exit(1);
        uint64_t *w = pheap_direct(h, rec);
        if (pheap_tx_add(h, w, 64))
            _exit(1);
        memset(w, 0xee, 64);
        raise(SIGKILL);
        _exit(1);
    }
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    check_in_flight(path, 1, 0);
    check_recovered(path, 1, 0);
    pheap *h;
    REQUIRE_OK(pheap_open(path, NULL, &h));
    const uint8_t *b = pheap_direct(h, rec);
    for (int i = 0; i < 64; i++)
        CHECK_EQ(b[i], 0); /* the snapshot came back */
    REQUIRE_OK(pheap_close(h));
}

/* A transaction that links a block it allocated, run on the crash
 * simulator; returns the fences it took before its commit and the
 * commit's own, through *before and *after. */
static int tx_link(pheap *h, pheap_off rec, uint64_t *before, uint64_t *after)
{
    pheap_off *w = pheap_direct(h, rec);
    if (pheap_tx_begin(h))
        return -1;
    pheap_off off = pheap_tx_alloc(h, 100);
    if (!off || pheap_tx_write(h, w, &off, sizeof(off)))
        return -1;
    *before = pheap_sim_fence_count(h);
    int rc = pheap_tx_commit(h);
    *after = pheap_sim_fence_count(h);
    return rc;
}

/* A crash just before the commit's second fence: the commit record is
 * durable, its changes are not: recovery rolls the transaction forward. */
TEST(stats_counts_a_transaction_rolled_forward)
{
    pheap_off rec;
    const char *base = tx_heap("tx-fwd-base.heap", &rec);
    REQUIRE(base);
    const char *work = ph_test_path("tx-fwd-work.heap"), *image = ph_test_path("tx-fwd.heap");
    pheap_options sim = {.flags = PHEAP_SIMULATE};
    pheap *h;
    uint64_t before, after;
    REQUIRE(ph_test_copy_file(base, work) == 0); /* dry run: where the commit's fences are */
    REQUIRE_OK(pheap_open(work, &sim, &h));
    REQUIRE(tx_link(h, rec, &before, &after) == 0);
    pheap_sim_crash(h, NULL, 0, 0);
    REQUIRE_EQ(after - before, 3);
    sim.sim_crash_fence = before + 2;
    sim.sim_crash_image = image;
    REQUIRE(ph_test_copy_file(base, work) == 0);
    REQUIRE_OK(pheap_open(work, &sim, &h));
    tx_link(h, rec, &before, &after);
    pheap_sim_crash(h, NULL, 0, 0);
    REQUIRE(access(image, F_OK) == 0);
    check_in_flight(image, 0, 1);
    check_recovered(image, 0, 1);
    REQUIRE_OK(pheap_open(image, NULL, &h));
    pheap_off linked = *(pheap_off *)pheap_direct(h, rec);
    CHECK(linked && pheap_usable_size(h, linked) >= 100); /* the commit completed */
    REQUIRE_OK(pheap_close(h));
}

TEST(check_reports_corruption)
{
    const char *path = used_heap("corrupt.heap");
    REQUIRE(path);
    /* A root entry whose commit word is neither 0 nor 1: refused at open
     * (INCONSISTENT, or the JSON error), as damage no crash leaves. */
    uint64_t roots = ph_test_region_offset(path, PH_REGION_ROOTS);
    REQUIRE(roots);
    int fd = open(path, O_RDWR);
    REQUIRE(fd >= 0);
    uint64_t bad = 2;
    REQUIRE(pwrite(fd, &bad, 8, roots + 7 * sizeof(ph_root_entry)) == 8);
    close(fd);
    run_result *r = run("check", path, NULL);
    CHECK_TOOL(r->code == 1, r);
    CHECK_TOOL(strstr(r->out, "INCONSISTENT") || r->err[0], r);
    r = run("check", "--json", path, NULL);
    CHECK_TOOL(r->code == 1, r);
    CHECK_TOOL(ph_test_json_error(r->out, "PHEAP_ECORRUPT", PHEAP_ECORRUPT) &&
               strstr(r->out, "root entry 7"), r);
}

TEST(usage_and_failures)
{
    run_result *r = run("check", NULL);
    CHECK_TOOL(r->code == 2 && strstr(r->err, "usage") && strstr(r->err, "read-write"), r);
    r = run("stats", NULL);
    CHECK_TOOL(r->code == 2 && strstr(r->err, "usage"), r);
    r = run("check", "--bogus", "x", NULL);
    CHECK_TOOL(r->code == 2, r);
    r = run("stats", "a", "b", NULL);
    CHECK_TOOL(r->code == 2, r);
    r = run("check", ph_test_path("missing.heap"), NULL);
    CHECK_TOOL(r->code == 1 && r->err[0], r);
    r = run("stats", "--json", ph_test_path("missing.heap"), NULL);
    CHECK_TOOL(r->code == 1 && r->err[0] && ph_test_json_object(r->out), r);
    CHECK_TOOL(strstr(r->out, "\"error\": \"PHEAP_ENOENT\""), r);
    r = run("--help", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "pheap check") && strstr(r->out, "pheap stats"), r);
}
