/*
 * consumer.c -- a program built against an installed pheap through
 * pkg-config only: creates a heap, sets a root, closes, reopens, reads the
 * root back and prints "ok".  Usage: consumer HEAP_PATH
 */
#define _POSIX_C_SOURCE 200809L
#include <pheap.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int fail(const char *what, int rc)
{
    fprintf(stderr, "consumer: %s: %d %s: %s\n", what, rc, pheap_strerror(rc), pheap_errmsg());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: consumer HEAP_PATH\n");
        return 2;
    }
    const char *path = argv[1];
    unlink(path);
    pheap_options o = {.size = 4u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h;
    int rc = pheap_open(path, &o, &h);
    if (rc)
        return fail("create", rc);
    struct pheap_stats st;
    if ((rc = pheap_stats(h, &st)) != 0)
        return fail("stats", rc);
    pheap_off want = pheap_alloc(h, 128);
    if (!want)
        return fail("alloc", pheap_errno());
    if ((rc = pheap_root_set(h, "consumer", want)) != 0)
        return fail("root_set", rc);
    if ((rc = pheap_close(h)) != 0)
        return fail("close", rc);

    if ((rc = pheap_open(path, NULL, &h)) != 0)
        return fail("reopen", rc);
    pheap_off got = pheap_root_get(h, "consumer");
    if (got != want) {
        fprintf(stderr, "consumer: root is %llu after reopening, expected %llu\n",
                (unsigned long long)got, (unsigned long long)want);
        pheap_close(h);
        return 1;
    }
    if ((rc = pheap_close(h)) != 0)
        return fail("close after reopen", rc);

    char header_version[32];
    snprintf(header_version, sizeof(header_version), "%d.%d.%d", PHEAP_VERSION_MAJOR,
             PHEAP_VERSION_MINOR, PHEAP_VERSION_PATCH);
    if (strcmp(header_version, pheap_version()) != 0) {
        fprintf(stderr, "consumer: header says %s, library says %s\n", header_version,
                pheap_version());
        return 1;
    }
    printf("version %s\nok\n", pheap_version());
    return 0;
}
