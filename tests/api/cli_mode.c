/*
 * cli_mode.c -- `pheap mode PATH [readonly|writable] [--json]` and the
 * owner and mode lines of `pheap info`: the mode printed (nothing
 * written), set and set back, the library seeing each switch; JSON
 * objects; another user refused (exit 1, PHEAP_EPERM) and the mode kept;
 * a heap of format 1.4 (owner unknown, no mode to set: PHEAP_ENOTSUP);
 * missing files, bad modes and arguments (exit 2).
 */
#include <fcntl.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "format/header.h"
#include "format/layout.h"
#include "harness.h"

#define run(...) ph_test_run_tool(PHEAP_TOOL, __VA_ARGS__)
typedef ph_tool_result run_result;

static int lib_mode(const char *path)
{
    pheap_options ro = {.flags = PHEAP_RDONLY};
    pheap *h;
    if (pheap_open(path, &ro, &h))
        return -100;
    int m = pheap_get_mode(h);
    pheap_close(h);
    return m;
}

static int file_bytes_equal(const char *a, const char *b)
{
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}

TEST(print_set_and_back)
{
    const char *path = ph_test_path("mode.heap"), *copy = ph_test_path("mode-copy.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    REQUIRE_OK(pheap_close(h));
    REQUIRE(ph_test_copy_file(path, copy) == 0);
    run_result *r = run("mode", path, NULL);
    CHECK_TOOL(r->code == 0, r);
    const char *v;
    CHECK_TOOL((v = ph_test_text_field(r->out, "mode:")) && strncmp(v, "writable\n", 9) == 0, r);
    char uid[32];
    snprintf(uid, sizeof(uid), "%u", (unsigned)geteuid());
    CHECK_TOOL((v = ph_test_text_field(r->out, "owner:")) && strncmp(v, uid, strlen(uid)) == 0, r);
    CHECK(file_bytes_equal(path, copy)); /* printing writes nothing */

    r = run("mode", path, "readonly", NULL);
    CHECK_TOOL(r->code == 0, r);
    CHECK_TOOL((v = ph_test_text_field(r->out, "mode:")) && strncmp(v, "readonly", 8) == 0, r);
    CHECK_EQ(lib_mode(path), PHEAP_MODE_READONLY);
    REQUIRE_OK(pheap_open(path, NULL, &h));
    CHECK(pheap_alloc(h, 10) == 0 && pheap_errno() == PHEAP_EROMODE);
    pheap_close(h);
    r = run("info", path, NULL);
    CHECK_TOOL(r->code == 0, r);
    CHECK_TOOL((v = ph_test_text_field(r->out, "mode:")) && strncmp(v, "readonly", 8) == 0, r);
    CHECK_TOOL((v = ph_test_text_field(r->out, "owner:")) && strncmp(v, uid, strlen(uid)) == 0, r);

    r = run("mode", path, "readonly", "--json", NULL); /* already: no change */
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out), r);
    CHECK_TOOL(strstr(r->out, "\"mode\": \"readonly\"") && strstr(r->out, "\"changed\": false"), r);
    CHECK_TOOL(ph_test_json_num(r->out, "owner_uid") == (long long)geteuid(), r);

    r = run("mode", "--json", path, "writable", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out), r);
    CHECK_TOOL(strstr(r->out, "\"mode\": \"writable\"") && strstr(r->out, "\"changed\": true"), r);
    CHECK_EQ(lib_mode(path), PHEAP_MODE_WRITABLE);
    r = run("info", path, "--json", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out), r);
    CHECK_TOOL(strstr(r->out, "\"mode\": \"writable\""), r);
    CHECK_TOOL(ph_test_json_num(r->out, "owner_uid") == (long long)geteuid(), r);
    r = run("mode", path, "--json", NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out) && !strstr(r->out, "changed"), r);
}

TEST(failures)
{
    const char *path = ph_test_path("mode-fail.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    REQUIRE_OK(pheap_close(h));
    run_result *r = run("mode", path, "sideways", NULL);
    CHECK_TOOL(r->code == 2 && strstr(r->err, "unknown mode 'sideways'"), r);
    r = run("mode", path, "sideways", "--json", NULL);
    CHECK_TOOL(r->code == 2 && ph_test_json_error(r->out, "PHEAP_EINVAL", PHEAP_EINVAL), r);
    r = run("mode", NULL);
    CHECK_TOOL(r->code == 2 && strstr(r->err, "usage:"), r);
    r = run("mode", path, "readonly", "extra", NULL);
    CHECK_TOOL(r->code == 2 && strstr(r->err, "unexpected argument 'extra'"), r);
    r = run("mode", path, "--force", NULL);
    CHECK_TOOL(r->code == 2, r);
    r = run("mode", ph_test_path("missing.heap"), "readonly", "--json", NULL);
    CHECK_TOOL(r->code == 1 && ph_test_json_error(r->out, "PHEAP_ENOENT", PHEAP_ENOENT), r);
    CHECK_EQ(lib_mode(path), PHEAP_MODE_WRITABLE);
    /* Held read-write elsewhere: setting fails (the lock), printing works. */
    int pid = ph_test_hold(path, 0);
    REQUIRE(pid > 0);
    r = run("mode", path, "readonly", NULL);
    CHECK_TOOL(r->code == 1 && strstr(r->err, "pheap:"), r);
    r = run("mode", path, NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "writable"), r);
    CHECK_EQ(ph_test_release(pid), 0);
    CHECK_EQ(lib_mode(path), PHEAP_MODE_WRITABLE);
}

/* Another user may write the file but not set its mode. */
TEST(not_the_owner)
{
    if (geteuid() != 0) {
        printf("not root: no other user to run as; skipped\n");
        return;
    }
    chmod(ph_test_dir(), 0777);
    const char *path = ph_test_path("mode-other.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    REQUIRE_OK(pheap_close(h));
    chmod(path, 0666);
    /* The tool runner's output files, made by root so far: the child makes its own. */
    unlink(ph_test_path("tool.stdout"));
    unlink(ph_test_path("tool.stderr"));
    fflush(stdout);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
            _exit(99);
        run_result *r = run("mode", path, "readonly", "--json", NULL);
        int ok = r->code == 1 && ph_test_json_error(r->out, "PHEAP_EPERM", PHEAP_EPERM) &&
                 strstr(r->err, "not the owner");
        if (!ok)
            fprintf(stderr, "as user 65534: exit %d\n%s\n%s\n", r->code, r->out, r->err);
        r = run("mode", path, NULL);
        ok = ok && r->code == 0 && strstr(r->out, "writable");
        _exit(ok ? 0 : 1);
    }
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_EQ(lib_mode(path), PHEAP_MODE_WRITABLE);
}

TEST(format_1_4)
{
    const char *path = ph_test_path("mode-old.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    REQUIRE_OK(pheap_close(h));
    REQUIRE(ph_test_as_format_1_4(path) == 0);
    run_result *r = run("info", path, NULL);
    const char *v;
    CHECK_TOOL(r->code == 0 && (v = ph_test_text_field(r->out, "owner:")) &&
                   strncmp(v, "unknown", 7) == 0, r);
    r = run("info", path, "--json", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "\"owner_uid\": null"), r);
    r = run("mode", path, "readonly", "--json", NULL);
    CHECK_TOOL(r->code == 1 && ph_test_json_error(r->out, "PHEAP_ENOTSUP", PHEAP_ENOTSUP), r);
    CHECK_EQ(lib_mode(path), PHEAP_MODE_WRITABLE);
}
