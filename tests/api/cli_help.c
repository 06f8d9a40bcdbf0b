/*
 * cli_help.c -- the pheap tool's help: every subcommand takes --help and -h
 * (usage on stdout, exit 0), `pheap help [COMMAND]`, `pheap --version`
 * from the library's version, and the man page names every command.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define run(...) ph_test_run_tool(PHEAP_TOOL, __VA_ARGS__)

static const char *const commands[] = {"create", "info", "check", "stats", "recover", "gc", "ls",
                                       "names", "dump", "mode", "map"};
/* What each command's usage names first. */
static const char *const operand[] = {"PATH", "PATH", "PATH", "PATH", "PATH",
                                      "PATH", "[DIR]", "PATH", "PATH", "PATH", "PATH"};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

TEST(every_command_takes_help)
{
    for (size_t i = 0; i < NCOMMANDS; i++) {
        char want[64];
        snprintf(want, sizeof(want), "usage: pheap %s %s", commands[i], operand[i]);
        ph_tool_result *r = run(commands[i], "--help", NULL);
        CHECK_TOOL(r->code == 0 && strstr(r->out, want) && !r->err[0], r);
        r = run(commands[i], "-h", NULL);
        CHECK_TOOL(r->code == 0 && strstr(r->out, want) && !r->err[0], r);
        /* With other arguments too: help wins, nothing is opened or made. */
        r = run(commands[i], ph_test_path("never.heap"), "--help", NULL);
        CHECK_TOOL(r->code == 0 && strstr(r->out, want), r);
        CHECK_TOOL(fopen(ph_test_path("never.heap"), "r") == NULL, r);
    }
    ph_tool_result *r = run("create", "--help", NULL);
    CHECK_TOOL(strstr(r->out, "--max-size") && strstr(r->out, "--mode"), r);
    r = run("check", "--help", NULL);
    CHECK_TOOL(strstr(r->out, "--json") && strstr(r->out, "read-write"), r);
}

TEST(help_command)
{
    ph_tool_result *r = run("help", NULL);
    CHECK_TOOL(r->code == 0 && !r->err[0], r);
    for (size_t i = 0; i < NCOMMANDS; i++) {
        char want[64];
        snprintf(want, sizeof(want), "pheap %s %s", commands[i], operand[i]);
        CHECK_TOOL(strstr(r->out, want), r);
    }
    CHECK_TOOL(strstr(r->out, "--version") && strstr(r->out, "--help"), r);
    char overview[sizeof(r->out)];
    snprintf(overview, sizeof(overview), "%s", r->out);
    r = run("--help", NULL);
    CHECK_TOOL(r->code == 0 && !strcmp(r->out, overview), r);

    for (size_t i = 0; i < NCOMMANDS; i++) {
        r = run(commands[i], "--help", NULL);
        char direct[sizeof(r->out)];
        snprintf(direct, sizeof(direct), "%s", r->out);
        r = run("help", commands[i], NULL);
        CHECK_TOOL(r->code == 0 && !strcmp(r->out, direct), r);
    }
    r = run("help", "frobnicate", NULL);
    CHECK_TOOL(r->code == 2 && strstr(r->err, "frobnicate") && !r->out[0], r);
}

TEST(version)
{
    char want[64];
    snprintf(want, sizeof(want), "pheap %d.%d.%d", PHEAP_VERSION_MAJOR, PHEAP_VERSION_MINOR,
             PHEAP_VERSION_PATCH);
    CHECK(strstr(want, pheap_version()) != NULL);
    ph_tool_result *r = run("--version", NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, want) && !r->err[0], r);
    snprintf(want, sizeof(want), "format %d.%d", PHEAP_FORMAT_MAJOR, PHEAP_FORMAT_MINOR);
    CHECK_TOOL(strstr(r->out, want), r);
}

/* docs/pheap.1, found from this file's path in the source tree. */
TEST(man_page_names_every_command)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s", __FILE__);
    char *cut = strstr(path, "/tests/api/");
    REQUIRE(cut);
    strcpy(cut, "/docs/pheap.1");
    FILE *f = fopen(path, "r");
    REQUIRE(f);
    static char text[65536];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    CHECK(strncmp(text, ".TH PHEAP 1 ", 12) == 0);
    for (size_t i = 0; i < NCOMMANDS; i++) {
        char want[64];
        snprintf(want, sizeof(want), ".B pheap %s", commands[i]);
        if (!strstr(text, want))
            ph_test_fail(__FILE__, __LINE__, "%s: no \"%s\" in the synopsis", path, want);
    }
    char version[64];
    snprintf(version, sizeof(version), "\"pheap %s\"", pheap_version());
    if (!strstr(text, version))
        ph_test_fail(__FILE__, __LINE__, "%s: the title line does not say %s", path, version);
    CHECK(strstr(text, ".SH EXIT STATUS") != NULL);
}
