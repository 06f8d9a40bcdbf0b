/*
 * cli_check.c -- the pheap tool a user can trust: `pheap check` is
 * read-only by default (a heap left by a crash is checked as recovery
 * would leave it and reported, the file unchanged, also when the user may
 * only read it) and `--repair` recovers; `info` and `stats` show a heap
 * that another process holds read-write as a snapshot and say so, while
 * `check` refuses it; with --json every failure is one JSON error object
 * on stdout and a nonzero exit.
 */
#include <fcntl.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "format/layout.h"
#include "harness.h"

#define FAIL(...) ph_test_fail(__FILE__, __LINE__, __VA_ARGS__)
#define run(...) ph_test_run_tool(PHEAP_TOOL, __VA_ARGS__)
typedef ph_tool_result run_result;


static int same_file(const char *a, const char *b)
{
    char cmd[1300];
    snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}

/* ---- read-only check and --repair ----------------------------------------- */

TEST(check_is_read_only_and_says_what_recovery_would_do)
{
    const char *path = ph_test_path("interrupted.heap");
    const char *copy = ph_test_path("interrupted.copy");
    pheap_off slots;
    REQUIRE(ph_test_interrupted_alloc_to(path, &slots) == 0);
    REQUIRE(ph_test_copy_file(path, copy) == 0);
    run_result *r = run("check", path, "--json", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out), r);
    CHECK_TOOL(strstr(r->out, "\"mode\": \"read-only\""), r);
    CHECK_TOOL(strstr(r->out, "\"consistent\": true"), r);
    CHECK_TOOL(strstr(r->out, "\"recovery_needed\": true") && strstr(r->out, "\"recovered\": false"), r);
    CHECK_TOOL(ph_test_json_num(r->out, "rolled_forward") == 1, r);
    long long live = ph_test_json_num(r->out, "live_blocks");
    CHECK(same_file(path, copy));
    r = run("check", path, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "1 logged operation to roll forward"), r);
    CHECK_TOOL(strstr(r->out, "the file unchanged") && strstr(r->out, "--repair"), r);
    CHECK(same_file(path, copy));
    /* info and stats do not write either. */
    r = run("info", path, "--json", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "\"state\": \"dirty\""), r);
    r = run("stats", path, "--json", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_num(r->out, "live_blocks") == live, r);
    CHECK(same_file(path, copy));

    r = run("check", "--repair", path, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "ran (the heap was not closed cleanly): 1 logged "
                                               "operation rolled forward"), r);
    CHECK_TOOL(strstr(r->out, "consistent (0 errors)"), r);
    CHECK(!same_file(path, copy));
    r = run("check", path, "--json", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "\"recovery_needed\": false"), r);
    CHECK_TOOL(ph_test_json_num(r->out, "rolled_forward") == 0 && ph_test_json_num(r->out, "live_blocks") == live, r);
    /* What the check showed is what recovery did: the block is in its slot. */
    pheap *h;
    pheap_options ro = {.flags = PHEAP_RDONLY};
    REQUIRE_OK(pheap_open(path, &ro, &h));
    pheap_off *s = pheap_direct(h, slots);
    CHECK(s && s[1] && pheap_usable_size(h, s[1]) >= 64);
    pheap_close(h);
}

/* Runs the tool as uid/gid 65534 (nobody); exit status in *code, stdout
 * into out.  0 if it could run, 4 when `path` is not reachable for nobody. */
static int run_as_nobody(const char *path, const char *const *args, int *code, char *out, size_t cap)
{
    int p[2];
    if (pipe(p) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0)
            _exit(125);
        if (access(path, R_OK) != 0)
            _exit(124);
        int null = open("/dev/null", O_WRONLY);
        dup2(p[1], 1);
        if (null >= 0)
            dup2(null, 2);
        execv(PHEAP_TOOL, (char *const *)args);
        _exit(127);
    }
    close(p[1]);
    size_t n = 0;
    ssize_t k;
    while (n + 1 < cap && (k = read(p[0], out + n, cap - 1 - n)) > 0)
        n += (size_t)k;
    out[n] = '\0';
    close(p[0]);
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    *code = WEXITSTATUS(status);
    return *code == 124 ? 4 : *code == 125 ? -1 : 0;
}

TEST(check_a_heap_the_user_may_only_read)
{
    if (geteuid() != 0) {
        fprintf(stderr, "  skipped: needs root to switch to uid 65534\n");
        return;
    }
    const char *path = ph_test_path("only-readable.heap");
    const char *copy = ph_test_path("only-readable.copy");
    pheap_off slots;
    REQUIRE(ph_test_interrupted_alloc_to(path, &slots) == 0); /* dirty, one entry to redo */
    REQUIRE(chown(path, 65534, 65534) == 0 && chmod(path, 0400) == 0);
    REQUIRE(chmod(ph_test_dir(), 0755) == 0);
    REQUIRE(ph_test_copy_file(path, copy) == 0);
    const char *check[] = {PHEAP_TOOL, "check", path, "--json", NULL};
    const char *repair[] = {PHEAP_TOOL, "check", "--repair", path, "--json", NULL};
    const char *info[] = {PHEAP_TOOL, "info", path, NULL};
    char out[8192];
    int code, rc = run_as_nobody(path, check, &code, out, sizeof(out));
    if (rc == 4) {
        fprintf(stderr, "  skipped: %s is not reachable for uid 65534\n", path);
        return;
    }
    REQUIRE_EQ(rc, 0);
    if (code != 0 || !strstr(out, "\"consistent\": true") || ph_test_json_num(out, "rolled_forward") != 1)
        FAIL("check as nobody of a 0400 heap: exit %d: %s", code, out);
    REQUIRE_EQ(run_as_nobody(path, info, &code, out, sizeof(out)), 0);
    if (code != 0 || !strstr(out, "dirty"))
        FAIL("info as nobody of a 0400 heap: exit %d: %s", code, out);
    /* --repair must write: refused, as an error object. */
    REQUIRE_EQ(run_as_nobody(path, repair, &code, out, sizeof(out)), 0);
    if (code != 1 || !strstr(out, "\"error\": \"PHEAP_EACCES\""))
        FAIL("check --repair as nobody of a 0400 heap: exit %d: %s", code, out);
    CHECK(same_file(path, copy));
}

/* ---- a heap held read-write by another process ------------------------------ */

TEST(info_and_stats_show_a_snapshot_check_refuses)
{
    const char *path = ph_test_path("held.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    for (int i = 0; i < 6; i++)
        REQUIRE(pheap_alloc(h, i % 2 ? 64 : 40000));
    REQUIRE_OK(pheap_close(h));
    int pid = ph_test_hold(path, 0);
    REQUIRE(pid > 0);
    run_result *r = run("info", path, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "state:       open elsewhere: a snapshot"), r);
    r = run("info", path, "--json", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out), r);
    CHECK_TOOL(strstr(r->out, "\"state\": \"open elsewhere\"") && strstr(r->out, "\"held_elsewhere\": true"), r);
    r = run("stats", path, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "snapshot of a heap open elsewhere"), r);
    r = run("stats", path, "--json", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "\"held_elsewhere\": true") && ph_test_json_num(r->out, "live_blocks") == 6, r);
    r = run("check", path, NULL);
    CHECK_TOOL(r->code == 1 && strstr(r->err, "open read-write in another process"), r);
    r = run("check", path, "--json", NULL);
    CHECK_TOOL(r->code == 1 && ph_test_json_error(r->out, "PHEAP_EBUSY", PHEAP_EBUSY), r);
    r = run("check", "--repair", path, "--json", NULL);
    CHECK_TOOL(r->code == 1 && ph_test_json_error(r->out, "PHEAP_EBUSY", PHEAP_EBUSY), r);
    CHECK_EQ(ph_test_release(pid), 0);
    r = run("info", path, "--json", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "\"state\": \"clean\"") && strstr(r->out, "\"held_elsewhere\": false"), r);
}

/* ---- --json on failure ---------------------------------------------------------- */

TEST(json_error_objects)
{
    const char *missing = ph_test_path("missing.heap");
    const char *text = ph_test_path("text.txt");
    FILE *f = fopen(text, "w");
    REQUIRE(f);
    fputs("not a heap\n", f);
    fclose(f);
    static const char *const cmds[] = {"info", "stats", "check"};
    for (unsigned i = 0; i < 3; i++) {
        run_result *r = run(cmds[i], missing, "--json", NULL);
        CHECK_TOOL(r->code == 1 && ph_test_json_error(r->out, "PHEAP_ENOENT", PHEAP_ENOENT) && strstr(r->out, missing), r);
        CHECK_TOOL(strstr(r->err, missing), r); /* and the message on stderr */
        r = run(cmds[i], "--json", text, NULL);
        CHECK_TOOL(r->code == 1 && ph_test_json_error(r->out, "PHEAP_ENOTHEAP", PHEAP_ENOTHEAP), r);
        r = run(cmds[i], ph_test_dir(), "--json", NULL);
        CHECK_TOOL(r->code == 1 && ph_test_json_error(r->out, "PHEAP_EISDIR", PHEAP_EISDIR), r);
        /* Bad usage: exit 2, an error object too. */
        r = run(cmds[i], missing, "--bogus", "--json", NULL);
        CHECK_TOOL(r->code == 2 && ph_test_json_error(r->out, "PHEAP_EINVAL", PHEAP_EINVAL) && strstr(r->out, "--bogus"), r);
        r = run(cmds[i], "--json", NULL);
        CHECK_TOOL(r->code == 2 && ph_test_json_error(r->out, "PHEAP_EINVAL", PHEAP_EINVAL), r);
        /* Without --json: nothing on stdout. */
        r = run(cmds[i], missing, NULL);
        CHECK_TOOL(r->code == 1 && !r->out[0] && strstr(r->err, missing), r);
    }
    run_result *r = run("info", missing, "--repair", NULL); /* only check takes it */
    CHECK_TOOL(r->code == 2, r);
}

TEST(damaged_heap_refused_by_every_command)
{
    const char *path = ph_test_path("damaged.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    REQUIRE(pheap_alloc(h, 100000));
    REQUIRE_OK(pheap_close(h));
    uint64_t extlog = ph_test_region_offset(path, PH_REGION_EXTLOG);
    REQUIRE(extlog);
    int fd = open(path, O_RDWR);
    REQUIRE(fd >= 0);
    uint64_t junk = 0x5a5a5a5a5a5a5a5aull; /* over the active epoch */
    REQUIRE(pwrite(fd, &junk, 8, (off_t)extlog) == 8);
    close(fd);
    const char *copy = ph_test_path("damaged.copy");
    REQUIRE(ph_test_copy_file(path, copy) == 0);
    run_result *r = run("check", path, NULL);
    CHECK_TOOL(r->code == 1 && strstr(r->out, "INCONSISTENT") && strstr(r->err, "extent log"), r);
    r = run("check", path, "--json", NULL);
    CHECK_TOOL(r->code == 1 && ph_test_json_error(r->out, "PHEAP_ECORRUPT", PHEAP_ECORRUPT), r);
    r = run("check", "--repair", path, "--json", NULL);
    CHECK_TOOL(r->code == 1 && ph_test_json_error(r->out, "PHEAP_ECORRUPT", PHEAP_ECORRUPT), r);
    r = run("info", path, "--json", NULL);
    CHECK_TOOL(r->code == 1 && ph_test_json_error(r->out, "PHEAP_ECORRUPT", PHEAP_ECORRUPT), r);
    r = run("stats", path, NULL);
    CHECK_TOOL(r->code == 1 && strstr(r->err, "damaged metadata"), r);
    CHECK(same_file(path, copy));
}
