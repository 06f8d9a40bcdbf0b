/*
 * roots.c -- named roots: limits, errors, durability across reopen.
 */
#include <string.h>

#include "harness.h"

TEST(many_roots_and_long_names)
{
    const char *path = ph_test_path("roots.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    char name[80];
    static pheap_off offs[PHEAP_ROOTS_MAX]; /* roots name live blocks */
    for (unsigned i = 0; i < PHEAP_ROOTS_MAX; i++)
        REQUIRE((offs[i] = pheap_alloc(h, 16)) != 0);
    for (unsigned i = 0; i < PHEAP_ROOTS_MAX; i++) {
        snprintf(name, sizeof(name), "%u-%0*u", i, 59, i); /* up to 63 bytes */
        name[PHEAP_ROOT_NAME_MAX] = '\0';
        REQUIRE_OK(pheap_root_set(h, name, offs[i]));
    }
    CHECK_EQ(pheap_root_count(h), PHEAP_ROOTS_MAX);
    CHECK_EQ(pheap_root_set(h, "one-too-many", offs[0]), PHEAP_ENOSPC);
    pheap_close(h);
    REQUIRE_OK(pheap_open(path, NULL, &h));
    for (unsigned i = 0; i < PHEAP_ROOTS_MAX; i++) {
        snprintf(name, sizeof(name), "%u-%0*u", i, 59, i);
        name[PHEAP_ROOT_NAME_MAX] = '\0';
        CHECK_EQ(pheap_root_get(h, name), offs[i]);
    }
    char got[PHEAP_ROOT_NAME_MAX + 1];
    pheap_off off;
    REQUIRE_OK(pheap_root_at(h, 200, got, &off)); /* table order = insertion order here */
    snprintf(name, sizeof(name), "%u-%0*u", 200, 59, 200);
    name[PHEAP_ROOT_NAME_MAX] = '\0';
    CHECK_EQ(strlen(got), 63);
    CHECK(strcmp(got, name) == 0);
    CHECK_EQ(off, offs[200]);
    CHECK_EQ(pheap_root_at(h, PHEAP_ROOTS_MAX, got, &off), PHEAP_ENOENT);
    pheap_check_report r;
    REQUIRE_OK(pheap_check(h, &r));
    CHECK_EQ(r.roots, PHEAP_ROOTS_MAX);
    pheap_close(h);
}

TEST(update_remove_errors)
{
    pheap *h = ph_test_create(ph_test_path("roots2.heap"), 4u << 20);
    REQUIRE(h);
    struct pheap_stats st;
    pheap_stats(h, &st);
    uint64_t d = pheap_alloc(h, 64), d2 = pheap_alloc(h, 64); /* roots name live blocks */
    REQUIRE(d && d2);
    REQUIRE_OK(pheap_root_set(h, "a", d));
    REQUIRE_OK(pheap_root_set(h, "a", d2));
    CHECK_EQ(pheap_root_get(h, "a"), d2);
    CHECK_EQ(pheap_root_count(h), 1);
    REQUIRE_OK(pheap_root_set(h, "a", 0));
    CHECK_EQ(pheap_root_get(h, "a"), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENOENT);
    CHECK_EQ(pheap_root_count(h), 0);
    REQUIRE_OK(pheap_root_set(h, "absent", 0)); /* removing nothing is fine */
    char long_name[100];
    memset(long_name, 'x', 64);
    long_name[64] = '\0';
    CHECK_EQ(pheap_root_set(h, long_name, d), PHEAP_ENAME);
    CHECK_EQ(pheap_root_set(h, "", d), PHEAP_ENAME);
    CHECK_EQ(pheap_root_set(h, NULL, d), PHEAP_ENAME);
    CHECK_EQ(pheap_root_get(h, long_name), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENAME);
    CHECK_EQ(pheap_root_set(h, "a", 8), PHEAP_ERANGE); /* header */
    CHECK_EQ(pheap_root_set(h, "a", st.size), PHEAP_ERANGE);
    CHECK_EQ(pheap_root_count(h), 0);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}
