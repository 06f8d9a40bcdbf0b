/*
 * harness.h -- a small test framework: TEST(name) registers a test, CHECK*
 * record failures without stopping the test, REQUIRE* stop it.  main() runs
 * every test (or those whose names contain argv[1]) and ends with the line
 * "N passed, N failed".
 */
#ifndef PH_TEST_HARNESS_H
#define PH_TEST_HARNESS_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>

#include "pheap.h"

typedef void (*ph_test_fn)(void);
void ph_test_register(const char *name, ph_test_fn fn);
void ph_test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
extern int ph_test_failed; /* failures in the running test */

#define TEST(name)                                                             \
    static void test_##name(void);                                             \
    __attribute__((constructor)) static void register_##name(void)             \
    {                                                                          \
        ph_test_register(#name, test_##name);                                  \
    }                                                                          \
    static void test_##name(void)

#define CHECK(c)                                                               \
    do {                                                                       \
        if (!(c))                                                              \
            ph_test_fail(__FILE__, __LINE__, "CHECK(%s)", #c);                 \
    } while (0)
#define REQUIRE(c)                                                             \
    do {                                                                       \
        if (!(c)) {                                                            \
            ph_test_fail(__FILE__, __LINE__, "REQUIRE(%s)", #c);               \
            return;                                                            \
        }                                                                      \
    } while (0)
#define CHECK_EQ(a, b)                                                         \
    do {                                                                       \
        long long va_ = (long long)(a), vb_ = (long long)(b);                  \
        if (va_ != vb_)                                                        \
            ph_test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, \
                         va_, vb_);                                            \
    } while (0)
#define REQUIRE_EQ(a, b)                                                       \
    do {                                                                       \
        long long va_ = (long long)(a), vb_ = (long long)(b);                  \
        if (va_ != vb_) {                                                      \
            ph_test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, \
                         va_, vb_);                                            \
            return;                                                            \
        }                                                                      \
    } while (0)
/* Calls returning a PHEAP_E* code: on failure also prints pheap_errmsg(). */
#define REQUIRE_OK(call)                                                       \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_ != 0) {                                                        \
            ph_test_fail(__FILE__, __LINE__, "%s -> %d (%s)", #call, rc_,      \
                         pheap_errmsg());                                      \
            return;                                                            \
        }                                                                      \
    } while (0)

/* A fresh path in a per-process temporary directory, removed at exit. */
const char *ph_test_path(const char *name);
/* Directory holding ph_test_path files. */
const char *ph_test_dir(void);

/* Creates a heap of `size` bytes at `path` (removing an old file first). */
pheap *ph_test_create(const char *path, uint64_t size);

/* Byte-copies a file. */
int ph_test_copy_file(const char *from, const char *to);

#endif
