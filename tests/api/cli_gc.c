/*
 * cli_gc.c -- the pheap tool and the GC consistency mode: create
 * --consistency, info and stats showing the mode and a pending recovery,
 * `pheap recover` on a GC heap left by a crash (made with the crash
 * simulator), on a clean heap and on LOG heaps, `pheap gc` and its dry run
 * on heaps with leaked blocks (counts checked against the library), gc
 * refused on a heap that needs recovery, bad usage, --json, and the
 * progress bar (on a terminal only).
 */
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define FAIL(...) ph_test_fail(__FILE__, __LINE__, __VA_ARGS__)
#define run(...) ph_test_run_tool(PHEAP_TOOL, __VA_ARGS__)
typedef ph_tool_result run_result;

typedef struct node {
    pheap_off next;
    uint64_t value;
    pheap_off extra; /* a large block hanging off every fourth node, or 0 */
    uint64_t pad;
} node;

#define NODES 40
#define GARBAGE 25

/* A list of NODES persisted nodes under the root "list", every fourth with a
 * large block, and GARBAGE blocks nothing links.  Returns the reachable
 * blocks (0 on failure). */
static uint64_t build(pheap *h)
{
    pheap_off head = 0;
    uint64_t blocks = 0;
    for (unsigned i = 0; i < NODES; i++) {
        pheap_off o = pheap_alloc(h, sizeof(node));
        if (!o)
            return 0;
        node *p = pheap_direct(h, o);
        p->next = head;
        p->value = i;
        p->pad = 0;
        p->extra = i % 4 == 0 ? pheap_alloc(h, 30000) : 0;
        blocks += 1 + (p->extra != 0);
        pheap_persist(h, p, sizeof(*p));
        head = o;
    }
    for (unsigned i = 0; i < GARBAGE; i++)
        if (!pheap_alloc(h, 24 + (i % 4) * 200))
            return 0;
    if (pheap_root_set(h, "list", head))
        return 0;
    return blocks;
}

/* Length of the list, or -1 when a link leads nowhere. */
static int walk(pheap *h)
{
    int n = 0;
    for (pheap_off o = pheap_root_get(h, "list"); o; n++) {
        node *p = pheap_direct(h, o);
        if (!p || n > NODES)
            return -1;
        o = p->next;
    }
    return n;
}

/* Writes to `image` a GC heap left by a crash (the crash simulator: only
 * what was persisted is in it); *reach gets its reachable blocks. */
static int crashed_gc_heap(const char *image, uint64_t *reach)
{
    const char *base = ph_test_path("gc-base.heap");
    unlink(base);
    unlink(image);
    pheap_options o = {.size = 8u << 20, .flags = PHEAP_CREATE | PHEAP_SIMULATE,
                       .consistency = PHEAP_CONSISTENCY_GC};
    pheap *h;
    if (pheap_open(base, &o, &h))
        return -1;
    *reach = build(h);
    if (!*reach) {
        pheap_close(h);
        return -1;
    }
    return pheap_sim_crash(h, image, 1, 0.0);
}

/* A heap closed cleanly holding the list and GARBAGE leaked blocks. */
static int leaky_heap(const char *path, unsigned consistency, uint64_t *reach)
{
    unlink(path);
    pheap_options o = {.size = 8u << 20, .flags = PHEAP_CREATE, .consistency = consistency};
    pheap *h;
    if (pheap_open(path, &o, &h))
        return -1;
    *reach = build(h);
    int rc = pheap_close(h);
    return *reach && !rc ? 0 : -1;
}

/* Opens path, checks it, and returns its live blocks and list length. */
static void reopen_and_check(const char *path, uint64_t want_live, int line)
{
    pheap *h;
    pheap_options o = {0};
    if (pheap_open(path, &o, &h)) {
        ph_test_fail(__FILE__, line, "open %s: %s", path, pheap_errmsg());
        return;
    }
    struct pheap_stats st;
    pheap_stats(h, &st);
    pheap_check_report r;
    if (pheap_check(h, &r))
        ph_test_fail(__FILE__, line, "pheap_check: %s", r.first_error);
    if (st.needs_recovery || st.was_unclean)
        ph_test_fail(__FILE__, line, "not closed cleanly by the tool");
    if (st.live_blocks != want_live)
        ph_test_fail(__FILE__, line, "live blocks %llu, want %llu",
                     (unsigned long long)st.live_blocks, (unsigned long long)want_live);
    if (walk(h) != NODES)
        ph_test_fail(__FILE__, line, "list of %d nodes, want %d", walk(h), NODES);
    pheap_close(h);
}

/* ---- create and the mode in info and stats ---------------------------------------------- */

TEST(create_gc_heap_and_show_the_mode)
{
    const char *gc = ph_test_path("mode-gc.heap"), *log = ph_test_path("mode-log.heap");
    run_result *r = run("create", gc, "--size", "4M", "--consistency", "gc", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "consistency:  gc"), r);
    r = run("create", log, "--size", "4M", "--consistency", "log", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "consistency:  log"), r);
    pheap *h;
    pheap_options o = {0};
    REQUIRE_OK(pheap_open(gc, &o, &h));
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(st.consistency, PHEAP_CONSISTENCY_GC);
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(pheap_open(log, &o, &h));
    pheap_stats(h, &st);
    CHECK_EQ(st.consistency, PHEAP_CONSISTENCY_LOG);
    REQUIRE_OK(pheap_close(h));

    r = run("info", gc, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "consistency: gc") && strstr(r->out, "state:       clean"), r);
    r = run("info", gc, "--json", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out), r);
    CHECK_TOOL(strstr(r->out, "\"consistency\": \"gc\"") && strstr(r->out, "\"needs_recovery\": false"), r);
    r = run("info", log, "--json", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "\"consistency\": \"log\""), r);
    r = run("stats", gc, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "consistency:    gc"), r);
    CHECK_TOOL(strstr(r->out, "a GC heap has no transactions"), r);
    r = run("stats", gc, "--json", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out), r);
    CHECK_TOOL(strstr(r->out, "\"consistency\": \"gc\"") && strstr(r->out, "\"needs_recovery\": false"), r);
    CHECK_TOOL(ph_test_json_num(r->out, "gc_runs") == 0 && ph_test_json_num(r->out, "gc_double_frees") == 0, r);
    r = run("stats", log, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "consistency:    log"), r);

    /* The default is LOG; a mode that does not exist is bad usage. */
    const char *def = ph_test_path("mode-default.heap");
    r = run("create", def, "--size", "4M", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "consistency:  log"), r);
    const char *bad = ph_test_path("mode-bad.heap");
    r = run("create", bad, "--size", "4M", "--consistency", "undo", NULL);
    CHECK_TOOL(r->code == 2 && strstr(r->err, "undo"), r);
    r = run("create", bad, "--size", "4M", "--consistency", NULL);
    CHECK_TOOL(r->code == 2, r);
    CHECK(access(bad, F_OK) != 0);
}

/* ---- recover ----------------------------------------------------------------------------- */

TEST(recover_a_crashed_gc_heap)
{
    const char *image = ph_test_path("crashed.heap"), *copy = ph_test_path("crashed.copy");
    uint64_t reach = 0;
    REQUIRE(crashed_gc_heap(image, &reach) == 0);
    REQUIRE(ph_test_copy_file(image, copy) == 0);

    /* info and stats say it needs recovery, and write nothing */
    run_result *r = run("info", image, "--json", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out), r);
    CHECK_TOOL(strstr(r->out, "\"needs_recovery\": true") && strstr(r->out, "\"state\": \"dirty\""), r);
    r = run("info", image, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "pheap recover"), r);
    r = run("stats", image, "--json", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "\"needs_recovery\": true"), r);
    r = run("stats", image, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "needs `pheap recover`"), r);

    /* gc refuses it and points at recover */
    r = run("gc", image, NULL);
    CHECK_TOOL(r->code == 1 && !r->out[0] && strstr(r->err, "pheap recover"), r);
    r = run("gc", image, "--dry-run", "--json", NULL);
    CHECK_TOOL(r->code == 1 && ph_test_json_error(r->out, "PHEAP_ERECOVER", PHEAP_ERECOVER), r);
    CHECK_TOOL(strstr(r->out, "pheap recover"), r);
    r = run("info", image, "--json", NULL);
    CHECK_TOOL(strstr(r->out, "\"needs_recovery\": true"), r); /* still */

    /* recover: the reachable blocks kept, the heap closed cleanly */
    r = run("recover", image, "--json", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out), r);
    CHECK_TOOL(strstr(r->out, "\"needed\": true") && strstr(r->out, "\"recovered\": true"), r);
    CHECK_TOOL(strstr(r->out, "\"consistency\": \"gc\"") && strstr(r->out, "\"tracing\": \"conservative\""), r);
    CHECK_TOOL(ph_test_json_num(r->out, "marked_blocks") == (long long)reach, r);
    CHECK_TOOL(ph_test_json_num(r->out, "live_blocks") == (long long)reach, r);
    CHECK_TOOL(ph_test_json_num(r->out, "marked_bytes") > 0, r);
    CHECK_TOOL(ph_test_json_num(r->out, "bad_refs") == 0, r);
    CHECK_TOOL(ph_test_json_num(r->out, "threads") >= 1 && ph_test_json_num(r->out, "elapsed_ns") > 0, r);
    CHECK_TOOL(ph_test_json_num(r->out, "freed_blocks") >= 0, r);
    CHECK_TOOL(!r->err[0], r); /* stderr is no terminal: no progress bar */
    reopen_and_check(image, reach, __LINE__);
    r = run("info", image, "--json", NULL);
    CHECK_TOOL(strstr(r->out, "\"needs_recovery\": false") && strstr(r->out, "\"state\": \"clean\""), r);

    /* again: nothing to do */
    r = run("recover", image, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "not needed: closed cleanly"), r);
    r = run("recover", image, "--json", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "\"needed\": false"), r);
    CHECK_TOOL(ph_test_json_num(r->out, "marked_blocks") == 0, r);

    /* in text, on the copy, with two marking threads */
    r = run("recover", copy, "--threads", "2", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "recovery:      ran"), r);
    CHECK_TOOL(ph_test_text_num(r->out, "reachable:") == (long long)reach, r);
    CHECK_TOOL(ph_test_text_num(r->out, "threads:") == 2 && ph_test_text_num(r->out, "live now:") == (long long)reach, r);
    CHECK_TOOL(strstr(r->out, "conservative"), r);
    reopen_and_check(copy, reach, __LINE__);
}

TEST(check_of_a_crashed_gc_heap)
{
    const char *image = ph_test_path("check.heap");
    uint64_t reach = 0;
    REQUIRE(crashed_gc_heap(image, &reach) == 0);
    /* read-only: it says the heap needs recovery, whatever the bitmaps show */
    run_result *r = run("check", image, "--json", NULL);
    CHECK_TOOL(ph_test_json_object(r->out) && strstr(r->out, "\"needs_recovery\": true"), r);
    CHECK_TOOL(strstr(r->out, "\"consistency\": \"gc\""), r);
    r = run("check", image, NULL);
    CHECK_TOOL(strstr(r->out, "needed (GC mode") && strstr(r->out, "pheap recover"), r);
    /* --repair recovers it as pheap recover does, then checks */
    r = run("check", image, "--repair", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "ran (GC mode") && strstr(r->out, "consistent (0 errors)"), r);
    CHECK_TOOL(ph_test_text_num(r->out, "live blocks:") == (long long)reach, r);
    reopen_and_check(image, reach, __LINE__);
    r = run("check", image, "--json", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "\"needs_recovery\": false"), r);
}

TEST(recover_on_log_heaps_needs_nothing)
{
    const char *path = ph_test_path("log-clean.heap");
    uint64_t reach = 0;
    REQUIRE(leaky_heap(path, PHEAP_CONSISTENCY_LOG, &reach) == 0);
    run_result *r = run("recover", path, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "consistency:   log") && strstr(r->out, "not needed"), r);
    r = run("recover", path, "--json", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out) && strstr(r->out, "\"needed\": false"), r);
    CHECK_TOOL(ph_test_json_num(r->out, "freed_blocks") == 0, r);
    /* recover collects nothing on a LOG heap: the leaks stay */
    CHECK_TOOL(ph_test_json_num(r->out, "live_blocks") == (long long)(reach + GARBAGE), r);

    /* a LOG heap left by a crash: its own recovery ran at the tool's open */
    const char *dirty = ph_test_path("log-dirty.heap");
    pheap_off slots;
    REQUIRE(ph_test_interrupted_alloc_to(dirty, &slots) == 0);
    r = run("recover", dirty, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "rolled 1 logged operation forward"), r);
    r = run("info", dirty, "--json", NULL);
    CHECK_TOOL(strstr(r->out, "\"state\": \"clean\""), r);
}

/* ---- gc ---------------------------------------------------------------------------------- */

static void collect(const char *path, const char *mode, uint64_t reach)
{
    const long long all = (long long)(reach + GARBAGE);
    run_result *r = run("gc", path, "--dry-run", "--json", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out), r);
    CHECK_TOOL(strstr(r->out, "\"dry_run\": true") && strstr(r->out, mode), r);
    CHECK_TOOL(ph_test_json_num(r->out, "marked_blocks") == (long long)reach, r);
    CHECK_TOOL(ph_test_json_num(r->out, "freed_blocks") == GARBAGE, r);
    CHECK_TOOL(ph_test_json_num(r->out, "freed_bytes") > 0, r);
    CHECK_TOOL(ph_test_json_num(r->out, "live_blocks") == all, r);
    CHECK_TOOL(!r->err[0], r);
    r = run("stats", path, "--json", NULL);
    CHECK_TOOL(ph_test_json_num(r->out, "live_blocks") == all, r); /* nothing freed */
    r = run("gc", path, "--dry-run", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "dry run: nothing freed"), r);
    CHECK_TOOL(ph_test_text_num(r->out, "would free:") == GARBAGE, r);

    r = run("gc", path, "--threads", "3", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "collection:    ran"), r);
    CHECK_TOOL(ph_test_text_num(r->out, "reachable:") == (long long)reach, r);
    CHECK_TOOL(ph_test_text_num(r->out, "freed:") == GARBAGE, r);
    CHECK_TOOL(ph_test_text_num(r->out, "threads:") == 3, r);
    CHECK_TOOL(ph_test_text_num(r->out, "live now:") == (long long)reach, r);
    reopen_and_check(path, reach, __LINE__);
    r = run("gc", path, "--json", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "\"dry_run\": false"), r);
    CHECK_TOOL(ph_test_json_num(r->out, "freed_blocks") == 0, r); /* nothing left */
    r = run("stats", path, "--json", NULL);
    CHECK_TOOL(ph_test_json_num(r->out, "live_blocks") == (long long)reach, r);
}

TEST(gc_collects_leaks_of_a_log_heap)
{
    const char *path = ph_test_path("leaky-log.heap");
    uint64_t reach = 0;
    REQUIRE(leaky_heap(path, PHEAP_CONSISTENCY_LOG, &reach) == 0);
    collect(path, "\"consistency\": \"log\"", reach);
}

TEST(gc_collects_leaks_of_a_gc_heap)
{
    const char *path = ph_test_path("leaky-gc.heap");
    uint64_t reach = 0;
    REQUIRE(leaky_heap(path, PHEAP_CONSISTENCY_GC, &reach) == 0);
    collect(path, "\"consistency\": \"gc\"", reach);
}

/* ---- usage and failures ------------------------------------------------------------------ */

TEST(bad_usage_and_failures)
{
    const char *path = ph_test_path("usage.heap");
    const char *missing = ph_test_path("missing.heap");
    uint64_t reach;
    REQUIRE(leaky_heap(path, PHEAP_CONSISTENCY_LOG, &reach) == 0);
    static const char *const cmds[] = {"recover", "gc"};
    for (unsigned i = 0; i < 2; i++) {
        run_result *r = run(cmds[i], NULL);
        CHECK_TOOL(r->code == 2 && strstr(r->err, "usage"), r);
        r = run(cmds[i], "--json", NULL);
        CHECK_TOOL(r->code == 2 && ph_test_json_error(r->out, "PHEAP_EINVAL", PHEAP_EINVAL), r);
        r = run(cmds[i], path, "--bogus", NULL);
        CHECK_TOOL(r->code == 2 && strstr(r->err, "--bogus"), r);
        r = run(cmds[i], path, "--bogus", "--json", NULL);
        CHECK_TOOL(r->code == 2 && ph_test_json_error(r->out, "PHEAP_EINVAL", PHEAP_EINVAL), r);
        r = run(cmds[i], path, path, NULL);
        CHECK_TOOL(r->code == 2, r);
        static const char *const bad_threads[] = {"0", "65", "-1", "two", "3x", ""};
        for (unsigned j = 0; j < sizeof(bad_threads) / sizeof(bad_threads[0]); j++) {
            r = run(cmds[i], path, "--threads", bad_threads[j], NULL);
            CHECK_TOOL(r->code == 2 && strstr(r->err, "thread"), r);
        }
        r = run(cmds[i], path, "--threads", NULL);
        CHECK_TOOL(r->code == 2, r);
        r = run(cmds[i], missing, NULL);
        CHECK_TOOL(r->code == 1 && !r->out[0] && strstr(r->err, missing), r);
        r = run(cmds[i], missing, "--json", NULL);
        CHECK_TOOL(r->code == 1 && ph_test_json_error(r->out, "PHEAP_ENOENT", PHEAP_ENOENT), r);
        r = run(cmds[i], ph_test_dir(), "--json", NULL);
        CHECK_TOOL(r->code == 1 && ph_test_json_error(r->out, "PHEAP_EISDIR", PHEAP_EISDIR), r);
        r = run(cmds[i], "--help", NULL);
        CHECK_TOOL(r->code == 0 && strstr(r->out, "conservative") && strstr(r->out, "--threads"), r);
        CHECK_TOOL(strstr(r->out, "filter") || strstr(r->out, "tagged"), r);
    }
    /* --dry-run is gc's alone: recover always writes */
    run_result *r = run("recover", path, "--dry-run", NULL);
    CHECK_TOOL(r->code == 2 && strstr(r->err, "--dry-run"), r);
    /* a heap held read-write elsewhere cannot be traced */
    int holder = ph_test_hold(path, 0);
    REQUIRE(holder > 0);
    r = run("gc", path, "--json", NULL);
    CHECK_TOOL(r->code == 1 && ph_test_json_error(r->out, "PHEAP_EBUSY", PHEAP_EBUSY), r);
    r = run("recover", path, NULL);
    CHECK_TOOL(r->code == 1 && strstr(r->err, path), r);
    CHECK(ph_test_release(holder) == 0);
    /* nothing was collected by the failures above */
    r = run("stats", path, "--json", NULL);
    CHECK_TOOL(ph_test_json_num(r->out, "live_blocks") == (long long)(reach + GARBAGE), r);
}

/* ---- the progress bar -------------------------------------------------------------------- */

/* Runs the tool with stderr on a pseudo-terminal (stdout to /dev/null) and
 * returns what it wrote there, in buf[cap]; the exit status, or -1. */
static int run_on_terminal(char *buf, size_t cap, const char *a1, const char *a2, const char *a3)
{
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) || unlockpt(master))
        return -1;
    const char *slave = ptsname(master);
    if (!slave)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int s = open(slave, O_RDWR | O_NOCTTY);
        int n = open("/dev/null", O_WRONLY);
        if (s < 0 || n < 0 || dup2(n, 1) < 0 || dup2(s, 2) < 0)
            _exit(126);
        unsetenv("PHEAP_FLUSH");
        execl(PHEAP_TOOL, PHEAP_TOOL, a1, a2, a3, (char *)NULL);
        _exit(127);
    }
    /* Read until the terminal hangs up (the child and its copy of the
     * slave are gone: read fails with EIO) or 60 s pass. */
    size_t len = 0;
    for (int waited = 0; len + 1 < cap && waited < 600;) {
        struct pollfd p = {master, POLLIN, 0};
        int n = poll(&p, 1, 100);
        if (n == 0) {
            waited++;
            continue;
        }
        ssize_t k = n > 0 ? read(master, buf + len, cap - 1 - len) : -1;
        if (k <= 0)
            break;
        len += (size_t)k;
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid)
        status = -1;
    close(master);
    buf[len] = '\0';
    return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(progress_bar_on_a_terminal_only)
{
    const char *image = ph_test_path("bar.heap");
    uint64_t reach;
    REQUIRE(crashed_gc_heap(image, &reach) == 0);
    static char tty[16384];
    int code = run_on_terminal(tty, sizeof(tty), "recover", image, NULL);
    if (code == -1 && !tty[0]) {
        printf("    (no pseudo-terminal here: progress bar not tested)\n");
        return;
    }
    if (code != 0 || !strstr(tty, "sweep") || !strstr(tty, "100%") || !strstr(tty, "\r"))
        FAIL("recover on a terminal: exit %d, stderr \"%s\"", code, tty);
    code = run_on_terminal(tty, sizeof(tty), "gc", image, "--dry-run");
    if (code != 0 || !strstr(tty, "sweep") || !strstr(tty, "100%"))
        FAIL("gc on a terminal: exit %d, stderr \"%s\"", code, tty);
    /* with --json too (the bar is on stderr, the object on stdout) */
    code = run_on_terminal(tty, sizeof(tty), "gc", image, "--json");
    if (code != 0 || !strstr(tty, "sweep"))
        FAIL("gc --json on a terminal: exit %d, stderr \"%s\"", code, tty);
    /* not a terminal: nothing on stderr */
    run_result *r = run("gc", image, "--dry-run", NULL);
    CHECK_TOOL(r->code == 0 && !r->err[0], r);
}
