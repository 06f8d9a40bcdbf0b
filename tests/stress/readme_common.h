/*
 * readme_common.h -- what the tests of README.md's examples share: the C
 * block under a heading of README.md, compiled against the library as a
 * reader would, and a monotonic clock for their kill loops.
 */
#ifndef PH_TEST_README_COMMON_H
#define PH_TEST_README_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"

static char *slurp_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = '\0';
    fclose(f);
    return s;
}

/* The first C block after `heading` in README.md ($PHEAP_README if set),
 * without its fences; NULL if there is none. */
static char *readme_block(const char *heading)
{
    const char *path = getenv("PHEAP_README") ? getenv("PHEAP_README") : PHEAP_SOURCE_DIR "/README.md";
    char *md = slurp_file(path);
    char *sec = md ? strstr(md, heading) : NULL;
    char *start = sec ? strstr(sec, "\n```c\n") : NULL;
    char *end = start ? strstr(start + 6, "\n```\n") : NULL;
    char *block = NULL;
    if (end) {
        start += 6;
        size_t n = (size_t)(end - start) + 1; /* keep the last line's newline */
        if ((block = malloc(n + 1)) != NULL) {
            memcpy(block, start, n);
            block[n] = '\0';
        }
    }
    free(md);
    return block;
}

/* Compiles the block under `heading` as ph_test_path(name); returns the
 * program's path or NULL (the test failed). */
static const char *build_readme_example(const char *heading, const char *name)
{
    static char prog[512];
    char src[512];
    char *block = readme_block(heading);
    if (!block)
        return ph_test_fail(__FILE__, __LINE__, "no C block under '%s' in README.md", heading),
               NULL;
    snprintf(src, sizeof(src), "%s.c", ph_test_path(name));
    FILE *f = fopen(src, "w");
    if (!f || fputs(block, f) < 0 || fclose(f))
        return ph_test_fail(__FILE__, __LINE__, "cannot write %s", src), NULL;
    free(block);
    snprintf(prog, sizeof(prog), "%s", ph_test_path(name));
    const char *san = PHEAP_SANITIZE[0] == 'a'   ? "-fsanitize=address,undefined"
                      : PHEAP_SANITIZE[0] == 't' ? "-fsanitize=thread"
                                                 : "-O1";
    ph_tool_result *r = ph_test_run_tool(PHEAP_CC, "-std=gnu11", san, "-I" PHEAP_SOURCE_DIR "/include",
                                         src, PHEAP_STATIC_LIB, "-lpthread", "-o", prog, NULL);
    CHECK_TOOL(r->code == 0, r);
    return r->code == 0 ? prog : NULL;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

#endif
