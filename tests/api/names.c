/*
 * names.c -- named objects: every call and every misuse, many names across
 * directory rebuilds and a reopen, iteration while names come and go, GC
 * tracing through names, pheap_check of dangling and damaged names.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "format/layout.h"
#include "harness.h"

static void name_of(char *buf, size_t n, unsigned i)
{
    snprintf(buf, n, "object-%u", i);
}

static int fill_init(pheap *h, void *block, size_t usable, void *arg)
{
    (void)h;
    memset(block, *(const int *)arg, usable);
    return 0;
}

static int cancel_init(pheap *h, void *block, size_t usable, void *arg)
{
    (void)h, (void)block, (void)usable, (void)arg;
    return 1;
}

TEST(create_lookup_free)
{
    const char *path = ph_test_path("names.heap");
    pheap *h = ph_test_create(path, 8u << 20);
    REQUIRE(h);
    struct pheap_stats st0, st;
    REQUIRE_OK(pheap_stats(h, &st0));
    CHECK_EQ(st0.names, 0);
    CHECK_EQ(pheap_lookup(h, "config"), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENOENT);
    pheap_off a = pheap_alloc_named(h, "config", 100);
    REQUIRE(a);
    CHECK(pheap_usable_size(h, a) >= 100);
    CHECK_EQ(pheap_lookup(h, "config"), a);
    strcpy(pheap_direct(h, a), "hello");
    /* duplicate: refused, nothing changes */
    CHECK_EQ(pheap_alloc_named(h, "config", 10), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EEXIST);
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.names, 1);
    CHECK_EQ(st.name_segments, 1);
    CHECK_EQ(st.live_blocks, st0.live_blocks + 2); /* the block and the directory segment */
    /* a large named block, and one made by an initialiser */
    pheap_off big = pheap_alloc_named(h, "big", 100000);
    REQUIRE(big);
    CHECK(pheap_usable_size(h, big) >= 100000);
    int byte = 0x5a;
    pheap_off filled = pheap_alloc_named_init(h, "filled", 300, 0, fill_init, &byte);
    REQUIRE(filled);
    CHECK_EQ(((unsigned char *)pheap_direct(h, filled))[299], 0x5a);
    CHECK_EQ(pheap_alloc_named_init(h, "canceled", 300, 0, cancel_init, NULL), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ECANCELED);
    CHECK_EQ(pheap_lookup(h, "canceled"), 0);
    pheap_off zeroed = pheap_alloc_named_init(h, "zeroed", 64, PHEAP_ALLOC_ZERO, NULL, NULL);
    REQUIRE(zeroed);
    CHECK_EQ(*(uint64_t *)pheap_direct(h, zeroed), 0);
    CHECK_EQ(pheap_alloc_named_init(h, "flags", 64, 0x80, NULL, NULL), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EINVAL);
    pheap_check_report r;
    REQUIRE_OK(pheap_check(h, &r));
    CHECK_EQ(r.names, 4);
    REQUIRE_OK(pheap_close(h));

    REQUIRE_OK(pheap_open(path, NULL, &h));
    CHECK_EQ(pheap_lookup(h, "config"), a);
    CHECK(strcmp(pheap_direct(h, a), "hello") == 0);
    CHECK_EQ(pheap_lookup(h, "big"), big);
    REQUIRE_OK(pheap_free_named(h, "big"));
    CHECK_EQ(pheap_lookup(h, "big"), 0);
    CHECK_EQ(pheap_free_named(h, "big"), PHEAP_ENOENT); /* twice */
    CHECK_EQ(pheap_free(h, big), PHEAP_EDOUBLEFREE);    /* the block went with it */
    REQUIRE_OK(pheap_free_named(h, "config"));
    REQUIRE_OK(pheap_free_named(h, "filled"));
    REQUIRE_OK(pheap_free_named(h, "zeroed"));
    /* the name is free again */
    pheap_off again = pheap_alloc_named(h, "config", 8);
    REQUIRE(again);
    REQUIRE_OK(pheap_free_named(h, "config"));
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.names, 0);
    CHECK_EQ(st.live_blocks, st0.live_blocks + 1); /* the segment stays */
    REQUIRE_OK(pheap_check(h, &r));
    pheap_close(h);
}

TEST(misuse)
{
    const char *path = ph_test_path("names-misuse.heap");
    pheap *h = ph_test_create(path, 8u << 20);
    REQUIRE(h);
    char longest[PHEAP_NAME_MAX + 2];
    memset(longest, 'x', sizeof(longest));
    longest[PHEAP_NAME_MAX] = '\0';
    pheap_off a = pheap_alloc_named(h, longest, 16); /* 255 bytes: the limit */
    REQUIRE(a);
    CHECK_EQ(pheap_lookup(h, longest), a);
    longest[PHEAP_NAME_MAX] = 'x';
    longest[PHEAP_NAME_MAX + 1] = '\0';
    CHECK_EQ(pheap_alloc_named(h, longest, 16), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENAME);
    CHECK_EQ(pheap_lookup(h, longest), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENAME);
    CHECK_EQ(pheap_free_named(h, longest), PHEAP_ENAME);
    CHECK_EQ(pheap_alloc_named(h, "", 16), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENAME);
    CHECK_EQ(pheap_alloc_named(h, NULL, 16), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENAME);
    CHECK_EQ(pheap_lookup(h, ""), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENAME);
    CHECK_EQ(pheap_free_named(h, ""), PHEAP_ENAME);
    CHECK_EQ(pheap_alloc_named(h, "zero", 0), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EINVAL);
    CHECK_EQ(pheap_lookup(h, "zero"), 0);
    CHECK_EQ(pheap_alloc_named(NULL, "n", 8), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EINVAL);
    CHECK_EQ(pheap_lookup(NULL, "n"), 0);
    CHECK_EQ(pheap_free_named(NULL, "n"), PHEAP_EINVAL);
    CHECK_EQ(pheap_free_named(h, "missing"), PHEAP_ENOENT);
    /* heap full: refused, nothing named */
    CHECK_EQ(pheap_alloc_named(h, "huge", 1ull << 40), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENOMEM);
    CHECK_EQ(pheap_lookup(h, "huge"), 0);
    /* inside a transaction: part of it (tests/api/names_tx.c), undone by an abort */
    pheap_off x = pheap_alloc_named(h, "x", 32);
    REQUIRE(x);
    REQUIRE_OK(pheap_tx_begin(h));
    CHECK(pheap_alloc_named(h, "in-tx", 16) != 0);
    CHECK_EQ(pheap_free_named(h, "x"), 0);
    CHECK_EQ(pheap_lookup(h, "x"), 0);
    REQUIRE_OK(pheap_tx_abort(h));
    CHECK_EQ(pheap_lookup(h, "x"), x);
    CHECK_EQ(pheap_lookup(h, "in-tx"), 0);
    /* the block freed behind the name's back: the name dangles */
    REQUIRE_OK(pheap_free(h, x));
    pheap_check_report r;
    CHECK_EQ(pheap_check(h, &r), PHEAP_ECORRUPT);
    CHECK(strstr(r.first_error, "'x'") != NULL);
    CHECK_EQ(pheap_free_named(h, "x"), PHEAP_ENOTLIVE); /* the name alone goes */
    CHECK_EQ(pheap_lookup(h, "x"), 0);
    REQUIRE_OK(pheap_check(h, &r));
    REQUIRE_OK(pheap_close(h));
    /* read-only */
    pheap_options ro = {.flags = PHEAP_RDONLY};
    REQUIRE_OK(pheap_open(path, &ro, &h));
    longest[PHEAP_NAME_MAX] = '\0';
    CHECK_EQ(pheap_lookup(h, longest), a);
    CHECK_EQ(pheap_alloc_named(h, "ro", 8), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ERDONLY);
    CHECK_EQ(pheap_free_named(h, longest), PHEAP_ERDONLY);
    CHECK_EQ(pheap_lookup(h, longest), a);
    pheap_close(h);
}

/* The fence budget: a create one (LOG mode; two with an initialiser), a
 * lookup none, a remove three; a rebuild is not among these (the first
 * segment is made first). */
TEST(fences_per_call)
{
    pheap *h = ph_test_create(ph_test_path("names-fences.heap"), 16u << 20);
    REQUIRE(h);
    REQUIRE(pheap_alloc_named(h, "warm-up", 24)); /* the first segment, the lane, a slab */
    char name[64];
    struct pheap_stats a, b;
    REQUIRE_OK(pheap_stats(h, &a));
    for (unsigned i = 0; i < 100; i++) {
        name_of(name, sizeof(name), i);
        REQUIRE(pheap_alloc_named(h, name, 24));
    }
    REQUIRE_OK(pheap_stats(h, &b));
    CHECK_EQ(b.fences - a.fences, 100);
    CHECK_EQ(b.name_segments, 1);
    for (unsigned i = 100; i < 150; i++) {
        name_of(name, sizeof(name), i);
        REQUIRE(pheap_alloc_named_init(h, name, 24, PHEAP_ALLOC_ZERO, NULL, NULL));
    }
    REQUIRE_OK(pheap_stats(h, &a));
    CHECK_EQ(a.fences - b.fences, 100);
    CHECK_EQ(a.name_segments, 1);
    for (unsigned i = 100; i < 150; i++) {
        name_of(name, sizeof(name), i);
        REQUIRE_OK(pheap_free_named(h, name));
    }
    REQUIRE_OK(pheap_stats(h, &b));
    CHECK_EQ(b.fences - a.fences, 150);
    for (unsigned i = 0; i < 100; i++) {
        name_of(name, sizeof(name), i);
        REQUIRE(pheap_lookup(h, name));
    }
    REQUIRE_OK(pheap_stats(h, &a));
    CHECK_EQ(a.fences, b.fences);
    for (unsigned i = 0; i < 100; i++) {
        name_of(name, sizeof(name), i);
        REQUIRE_OK(pheap_free_named(h, name));
    }
    REQUIRE_OK(pheap_stats(h, &b));
    CHECK_EQ(b.fences - a.fences, 300);
    pheap_close(h);
}

/* pheap_check of a heap with no name, then with a directory whose last
 * name was removed: nothing to compare (run under UBSan: no sort of an
 * empty, unallocated list). */
TEST(check_without_names)
{
    pheap *h = ph_test_create(ph_test_path("names-none.heap"), 8u << 20);
    REQUIRE(h);
    pheap_check_report r;
    REQUIRE_OK(pheap_check(h, &r));
    CHECK_EQ(r.names, 0);
    REQUIRE(pheap_alloc_named(h, "only", 32));
    REQUIRE_OK(pheap_check(h, &r));
    CHECK_EQ(r.names, 1);
    REQUIRE_OK(pheap_free_named(h, "only"));
    REQUIRE_OK(pheap_check(h, &r));
    CHECK_EQ(r.names, 0);
    REQUIRE_OK(pheap_close(h));
}

/* Many names through several segment rebuilds (grow, split, directory
 * doubling), every one found, iteration complete and ordered, the check
 * clean; again after a reopen; then most removed. */
TEST(many_names_iterate_reopen)
{
    const char *path = ph_test_path("names-many.heap");
    pheap *h = ph_test_create(path, 256u << 20);
    REQUIRE(h);
    enum { N = 50000 };
    static pheap_off offs[N];
    char name[64];
    for (unsigned i = 0; i < N; i++) {
        name_of(name, sizeof(name), i);
        if (i % 7 == 0) /* some names past one line */
            snprintf(name, sizeof(name), "a-rather-long-name-that-takes-two-lines-%u", i);
        offs[i] = pheap_alloc_named(h, name, 8 + i % 200);
        REQUIRE(offs[i]);
        *(uint32_t *)pheap_direct(h, offs[i]) = i;
    }
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.names, N);
    CHECK(st.name_segments > 8);
    pheap_check_report r;
    REQUIRE_OK(pheap_check(h, &r));
    CHECK_EQ(r.names, N);
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(pheap_open(path, NULL, &h));
    for (unsigned i = 0; i < N; i++) {
        name_of(name, sizeof(name), i);
        if (i % 7 == 0)
            snprintf(name, sizeof(name), "a-rather-long-name-that-takes-two-lines-%u", i);
        pheap_off off = pheap_lookup(h, name);
        CHECK_EQ(off, offs[i]);
        CHECK_EQ(*(uint32_t *)pheap_direct(h, off), i);
    }
    /* iteration: each name once, in increasing order */
    static unsigned char seen[N];
    pheap_name_info info, prev;
    unsigned count = 0;
    const char *after = NULL;
    while (pheap_name_next(h, after, &info) == 0) {
        uint32_t i = *(uint32_t *)pheap_direct(h, info.off);
        REQUIRE(i < N);
        CHECK(!seen[i]);
        seen[i] = 1;
        CHECK_EQ(info.size, 8 + i % 200);
        CHECK_EQ(strlen(info.name), info.len);
        if (count)
            CHECK(info.hash > prev.hash || (info.hash == prev.hash && info.len >= prev.len));
        prev = info;
        after = prev.name;
        count++;
    }
    CHECK_EQ(count, N);
    CHECK_EQ(pheap_errno(), PHEAP_ENOENT);
    /* remove nine in ten, the rest stay findable */
    for (unsigned i = 0; i < N; i++) {
        if (i % 10 == 0)
            continue;
        name_of(name, sizeof(name), i);
        if (i % 7 == 0)
            snprintf(name, sizeof(name), "a-rather-long-name-that-takes-two-lines-%u", i);
        REQUIRE_OK(pheap_free_named(h, name));
    }
    for (unsigned i = 0; i < N; i += 10) {
        name_of(name, sizeof(name), i);
        if (i % 7 == 0)
            snprintf(name, sizeof(name), "a-rather-long-name-that-takes-two-lines-%u", i);
        CHECK_EQ(pheap_lookup(h, name), offs[i]);
    }
    REQUIRE_OK(pheap_check(h, &r));
    CHECK_EQ(r.names, N / 10);
    pheap_close(h);
}

/* Iteration keeps going while the iterating thread adds and removes names. */
TEST(iterate_while_changing)
{
    pheap *h = ph_test_create(ph_test_path("names-iter.heap"), 64u << 20);
    REQUIRE(h);
    char name[64];
    enum { N = 3000 };
    for (unsigned i = 0; i < N; i++) {
        name_of(name, sizeof(name), i);
        REQUIRE(pheap_alloc_named(h, name, 16));
    }
    pheap_name_info info;
    char after[PHEAP_NAME_MAX + 1];
    unsigned seen = 0, made = 0;
    /* the cursor may be the output's own buffer */
    unsigned all = 0;
    for (int r = pheap_name_next(h, NULL, &info); r == 0; r = pheap_name_next(h, info.name, &info))
        REQUIRE(++all <= N);
    CHECK_EQ(all, N);
    int rc = pheap_name_next(h, NULL, &info);
    while (rc == 0) {
        seen++;
        strcpy(after, info.name);
        REQUIRE_OK(pheap_free_named(h, after)); /* the current one goes */
        name_of(name, sizeof(name), N + made++);
        pheap_off made_off = pheap_alloc_named(h, name, 16); /* and a new one comes, anywhere */
        if (!made_off)
            ph_test_fail(__FILE__, __LINE__, "create %s: %s", name, pheap_errmsg());
        REQUIRE(made_off);
        rc = pheap_name_next(h, after, &info);
        REQUIRE(seen < 4 * N);
    }
    CHECK_EQ(rc, PHEAP_ENOENT);
    CHECK(seen >= N); /* every original name, plus new ones that sorted later */
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.names, N);
    pheap_check_report r;
    REQUIRE_OK(pheap_check(h, &r));
    pheap_close(h);
}

/* Tracing follows names: pheap_gc keeps named blocks and what they
 * reference, and the directory's own blocks. */
TEST(gc_keeps_named)
{
    pheap *h = ph_test_create(ph_test_path("names-gc.heap"), 16u << 20);
    REQUIRE(h);
    pheap_off a = pheap_alloc_named(h, "list", 64);
    REQUIRE(a);
    pheap_off child = pheap_alloc(h, 128), garbage = pheap_alloc(h, 128);
    REQUIRE(child && garbage);
    *(uint64_t *)pheap_direct(h, a) = child;
    pheap_gc_report rep;
    REQUIRE_OK(pheap_gc_ex(h, NULL, &rep));
    CHECK_EQ(rep.freed_blocks, 1);
    CHECK(pheap_usable_size(h, child) >= 128);
    CHECK_EQ(pheap_lookup(h, "list"), a);
    pheap_check_report r;
    REQUIRE_OK(pheap_check(h, &r));
    CHECK_EQ(r.names, 1);
    pheap_close(h);
}

/* GC mode: a crash, then recovery traces from the names: the named blocks
 * and what they reference survive, the rest is freed, lookups work before
 * recovery, creating waits for it. */
TEST(gc_mode_names)
{
    const char *path = ph_test_path("names-gcmode.heap");
    const char *image = ph_test_path("names-gcmode.img");
    static char img[512];
    snprintf(img, sizeof(img), "%s", image);
    pheap *h = ph_test_create_mode(path, 32u << 20, PHEAP_CONSISTENCY_GC, PHEAP_SIMULATE);
    REQUIRE(h);
    char name[64];
    enum { N = 2000 };
    for (unsigned i = 0; i < N; i++) {
        name_of(name, sizeof(name), i);
        pheap_off o = pheap_alloc_named(h, name, 24);
        REQUIRE(o);
        pheap_off child = pheap_alloc(h, 40);
        REQUIRE(child);
        *(uint64_t *)pheap_direct(h, o) = child; /* reachable through the name */
        pheap_persist(h, pheap_direct(h, o), 8);
        REQUIRE(pheap_alloc(h, 40)); /* garbage */
    }
    for (unsigned i = 0; i < N; i += 2) {
        name_of(name, sizeof(name), i);
        REQUIRE_OK(pheap_free_named(h, name));
    }
    REQUIRE_OK(pheap_sim_crash(h, img, 1, 0.0));
    REQUIRE_OK(pheap_open(img, NULL, &h));
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.needs_recovery, 1);
    name_of(name, sizeof(name), 1);
    CHECK(pheap_lookup(h, name) != 0);
    CHECK_EQ(pheap_alloc_named(h, "new", 8), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ERECOVER);
    REQUIRE_OK(pheap_recover(h));
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.names, N / 2);
    /* the named blocks, their children, the segments */
    CHECK_EQ(st.live_blocks, N / 2 * 2 + st.name_segments);
    for (unsigned i = 1; i < N; i += 2) {
        name_of(name, sizeof(name), i);
        pheap_off o = pheap_lookup(h, name);
        REQUIRE(o);
        CHECK(pheap_usable_size(h, *(uint64_t *)pheap_direct(h, o)) >= 40);
    }
    pheap_check_report r;
    REQUIRE_OK(pheap_check(h, &r));
    CHECK_EQ(r.names, N / 2);
    REQUIRE(pheap_alloc_named(h, "new", 8));
    REQUIRE_OK(pheap_close(h));
}

static uint64_t read_word(const char *path, uint64_t off)
{
    uint64_t v = 0;
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
        if (pread(fd, &v, 8, (off_t)off) != 8)
            v = 0;
        close(fd);
    }
    return v;
}

static void set_file_word(const char *path, uint64_t off, uint64_t v)
{
    int fd = open(path, O_RDWR);
    if (fd < 0 || pwrite(fd, &v, 8, (off_t)off) != 8)
        ph_test_fail(__FILE__, __LINE__, "cannot write %s", path);
    if (fd >= 0)
        close(fd);
}

/* The file offset of line i of the only segment of a heap with one. */
static uint64_t line_at(const char *path, unsigned i)
{
    uint64_t names = ph_test_region_offset(path, PH_REGION_NAMES);
    uint64_t seg = PH_NAMES_ENTRY_OFF(read_word(path, names + PH_NAMES_DIR0));
    return seg ? seg + sizeof(ph_names_seg) + (uint64_t)i * PH_LINE_SIZE : 0;
}

/* Damage in the directory is refused or stepped over, never followed. */
TEST(damaged_directory)
{
    const char *path = ph_test_path("names-damage.heap");
    static char copy[512];
    snprintf(copy, sizeof(copy), "%s", ph_test_path("names-damage-copy.heap"));
    pheap *h = ph_test_create(path, 8u << 20);
    REQUIRE(h);
    char name[64];
    for (unsigned i = 0; i < 40; i++) {
        name_of(name, sizeof(name), i);
        REQUIRE(pheap_alloc_named(h, name, 16));
    }
    REQUIRE_OK(pheap_close(h));
    /* a head whose line count runs far past its length (and the segment) */
    unsigned victim = 0;
    for (unsigned i = 0; i < 256 && !victim; i++)
        if ((read_word(path, line_at(path, i)) & 7) == PH_NAME_HEAD)
            victim = i + 1;
    REQUIRE(victim);
    REQUIRE_OK(ph_test_copy_file(path, copy));
    uint64_t meta_at = line_at(copy, victim - 1) + offsetof(ph_name_line, meta);
    set_file_word(copy, meta_at, read_word(copy, meta_at) | 0xff0000u);
    /* open reads every entry: refused, read-write or not, naming what */
    CHECK_EQ(pheap_open(copy, NULL, &h), PHEAP_ECORRUPT);
    CHECK(strstr(pheap_errmsg(), "line count") != NULL);
    pheap_options ro = {.flags = PHEAP_RDONLY};
    CHECK_EQ(pheap_open(copy, &ro, &h), PHEAP_ECORRUPT);
    pheap_check_report r;
    /* a directory entry that names no segment: refused at open */
    REQUIRE_OK(ph_test_copy_file(path, copy));
    uint64_t bad = 12345;
    set_file_word(copy, ph_test_region_offset(copy, PH_REGION_NAMES) + PH_NAMES_DIR0, bad);
    CHECK_EQ(pheap_open(copy, NULL, &h), PHEAP_ECORRUPT);
    CHECK(strstr(pheap_errmsg(), "name directory") != NULL);
    /* a segment whose magic is gone: refused at open */
    REQUIRE_OK(ph_test_copy_file(path, copy));
    uint64_t seg = PH_NAMES_ENTRY_OFF(
        read_word(copy, ph_test_region_offset(copy, PH_REGION_NAMES) + PH_NAMES_DIR0));
    set_file_word(copy, seg, 0);
    CHECK_EQ(pheap_open(copy, NULL, &h), PHEAP_ECORRUPT);
    /* a depth beyond the directory's arrays: refused at open */
    REQUIRE_OK(ph_test_copy_file(path, copy));
    set_file_word(copy, ph_test_region_offset(copy, PH_REGION_NAMES), 40ull << 1);
    CHECK_EQ(pheap_open(copy, NULL, &h), PHEAP_ECORRUPT);
    /* the untouched heap is fine */
    REQUIRE_OK(pheap_open(path, NULL, &h));
    REQUIRE_OK(pheap_check(h, &r));
    CHECK_EQ(r.names, 40);
    pheap_close(h);
}
/* ---- damaged directories: refused with an error, never a crash or a hang ---- */



/* Runs fn(path) in a child with a time limit: 0 when it returned, else a
 * description of how it ended (a signal or the time limit) in `how`. */
static int in_child(void (*fn)(const char *), const char *path, char *how, size_t n)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(10);
        fn(path);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return 0;
    if (WIFSIGNALED(st))
        snprintf(how, n, "%s", WTERMSIG(st) == SIGALRM ? "hung (killed after 10 s)"
                                                       : strsignal(WTERMSIG(st)));
    else
        snprintf(how, n, "exit %d", WEXITSTATUS(st));
    return -1;
}

static void iterate_all(const char *path)
{
    pheap *h;
    if (pheap_open(path, NULL, &h) != 0) {
        printf("  refused: %s\n", pheap_errmsg());
        fflush(stdout);
        return; /* refused: what a damaged directory should get */
    }
    pheap_name_info info;
    unsigned n = 0;
    const char *after = NULL;
    char cur[PHEAP_NAME_MAX + 1];
    while (pheap_name_next(h, after, &info) == 0 && n < 1000) {
        snprintf(cur, sizeof(cur), "%s", info.name);
        after = cur;
        n++;
    }
    printf("  opened; iteration gave %u names\n", n);
    fflush(stdout);
    if (n >= 1000)
        _exit(3); /* an iteration that never ends */
    pheap_close(h);
}

/* Depth 1 and both directory entries naming one segment, whose header
 * claims depth 1 (prefix 0): the open checks only the first of equal
 * consecutive entries, so it accepts the directory; the segment after
 * prefix 0 is then the same segment again, and pheap_name_next goes round
 * it for ever.  Open must refuse it. */
TEST(damaged_directory_duplicate_entry_is_refused)
{
    const char *path = ph_test_path("names-dup.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    REQUIRE(pheap_alloc_named(h, "a", 32));
    REQUIRE_OK(pheap_free_named(h, "a")); /* the segment stays, empty */
    REQUIRE_OK(pheap_close(h));
    uint64_t names = ph_test_region_offset(path, PH_REGION_NAMES);
    REQUIRE(names);
    uint64_t xdir = read_word(path, names);
    uint64_t dir = names + ((xdir & 1) ? PH_NAMES_DIR1 : PH_NAMES_DIR0);
    uint64_t entry = read_word(path, dir), seg = PH_NAMES_ENTRY_OFF(entry);
    REQUIRE_EQ(xdir >> 1, 0);
    REQUIRE(seg);
    uint64_t deeper = PH_NAMES_ENTRY(seg, 1, PH_NAMES_ENTRY_BITS(entry)); /* consistent, but twice */
    set_file_word(path, names, 1u << 1 | (xdir & 1));
    set_file_word(path, dir, deeper);
    set_file_word(path, dir + 8, deeper);
    set_file_word(path, seg + offsetof(ph_names_seg, depth), 1);
    char how[64];
    if (in_child(iterate_all, path, how, sizeof(how)) != 0)
        ph_test_fail(__FILE__, __LINE__, "pheap_name_next on the damaged directory: %s", how);
}

/* Exits nonzero unless the damaged name is refused by lookup and removal. */
static void use_damaged_name(const char *path)
{
    pheap *h;
    if (pheap_open(path, NULL, &h) != 0)
        return; /* refused at open: fine too */
    pheap_off off = pheap_lookup(h, "a");
    int lookup_rc = pheap_errno();
    int rc = pheap_free_named(h, "a");
    pheap_close(h);
    if (off != 0 || lookup_rc != PHEAP_ECORRUPT || rc != PHEAP_ECORRUPT) {
        printf("  lookup 'a': %llu (%d), pheap_free_named: %d\n", (unsigned long long)off,
               lookup_rc, rc);
        _exit(4);
    }
}

/* A head line whose xref names offset 64 (inside the file header): the
 * open does not look at entry lines; pheap_lookup returns 64 as the
 * object's offset, and pheap_free_named hands it to the allocator, which
 * indexes its chunk map with (64 - data_off) / chunk size.  Both must
 * refuse it with PHEAP_ECORRUPT. */
TEST(damaged_head_offset_is_refused)
{
    const char *path = ph_test_path("names-off.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    REQUIRE(pheap_alloc_named(h, "a", 32));
    REQUIRE_OK(pheap_close(h));
    uint64_t names = ph_test_region_offset(path, PH_REGION_NAMES);
    uint64_t xdir = read_word(path, names);
    uint64_t seg =
        PH_NAMES_ENTRY_OFF(read_word(path, names + ((xdir & 1) ? PH_NAMES_DIR1 : PH_NAMES_DIR0)));
    REQUIRE(seg);
    uint64_t line = 0;
    for (uint64_t i = 0; i < 288 && !line; i++) {
        uint64_t at = seg + 64 + i * 64;
        if ((read_word(path, at) & 7) == PH_NAME_HEAD)
            line = at;
    }
    REQUIRE(line);
    uint64_t x = read_word(path, line);
    set_file_word(path, line, (x & ~0x0000fffffffffff8ull) | 64);
    char how[64];
    if (in_child(use_damaged_name, path, how, sizeof(how)) != 0)
        ph_test_fail(__FILE__, __LINE__, "a name whose head names offset 64: %s", how);
}

static void open_and_lookup(const char *path)
{
    pheap *h;
    if (pheap_open(path, NULL, &h) != 0) {
        printf("  refused: %s\n", pheap_errmsg());
        fflush(stdout);
        return;
    }
    printf("  opened (recovery finished the rebuild)\n");
    fflush(stdout);
    pheap_off off = pheap_lookup(h, "a");
    printf("  lookup 'a': %llu\n", (unsigned long long)off);
    fflush(stdout);
    pheap_close(h);
}

/* A crashed heap whose names header says a rebuild committed (xold set)
 * with xnew[0] naming a block that is no segment of a sane shape (here a
 * block of 32 KiB holding a segment header with 2^20 home lines).  The open checks
 * the directory's segments, and of the rebuild words only that they lie in
 * the data region; recovery then installs xnew[0] in the directory
 * unchecked, and the first lookup reads a home line up to 64 MiB into it, past the end of the file.
 * Open must refuse it. */
TEST(damaged_rebuild_segment_is_refused)
{
    const char *path = ph_test_path("names-xnew.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    REQUIRE(pheap_alloc_named(h, "a", 32));
    pheap_off fake = pheap_alloc(h, 32768);
    REQUIRE(fake);
    REQUIRE_OK(pheap_root_set(h, "fake", fake));
    ph_names_seg *s = pheap_direct(h, fake);
    *s = (ph_names_seg){.magic = PH_NAMES_SEG_MAGIC, .depth = 0, .prefix = 0, .home_bits = 20};
    REQUIRE_OK(pheap_close(h));
    /* a crash: the heap left open */
    pheap_options o = {.flags = PHEAP_SIMULATE};
    REQUIRE_OK(pheap_open(path, &o, &h));
    const char *img = ph_test_path("names-xnew.image");
    REQUIRE_OK(pheap_sim_crash(h, img, 1, 0.0));
    uint64_t names = ph_test_region_offset(img, PH_REGION_NAMES);
    REQUIRE(names);
    set_file_word(img, names + offsetof(ph_names_header, xnew), fake);
    set_file_word(img, names + offsetof(ph_names_header, xold), 1);
    char how[64];
    if (in_child(open_and_lookup, img, how, sizeof(how)) != 0)
        ph_test_fail(__FILE__, __LINE__, "a committed rebuild whose new segment is damaged: %s",
                     how);
}

/* ---- pheap_alloc_named_init's initialiser and the directory ----------------
 * Outside a transaction the initialiser runs while the call holds the
 * directory's write lock: it may look names up (and list them, and take
 * figures) without letting the lock go, and may not create or remove
 * names (PHEAP_EBUSY), which would change the directory under the entry
 * being made -- a rebuild would free the segment the call then writes. */

typedef struct init_probe {
    pheap *h;
    pheap_off existing;
    int lookup_ok, listed, created, removed, refused;
    volatile int other_done;   /* the other thread's create returned */
    int other_early;           /* ... while the initialiser ran */
    pthread_t other;           /* that thread, joined before the checks */
    int started;
} init_probe;

static void *create_other(void *arg)
{
    init_probe *p = arg;
    pheap_off o = pheap_alloc_named(p->h, "other", 16);
    __atomic_store_n(&p->other_done, o ? 1 : -1, __ATOMIC_RELEASE);
    return NULL;
}

static int names_in_init(pheap *h, void *block, size_t usable, void *arg)
{
    (void)block, (void)usable;
    init_probe *p = arg;
    p->lookup_ok = pheap_lookup(h, "existing") == p->existing;
    pheap_name_info info;
    p->listed = pheap_name_next(h, NULL, &info) == 0;
    struct pheap_stats st;
    p->listed &= pheap_stats(h, &st) == 0 && st.names >= 1;
    char name[32];
    for (unsigned i = 0; i < 3000; i++) { /* enough for rebuilds, were they let in */
        snprintf(name, sizeof(name), "inner-%u", i);
        if (pheap_alloc_named(h, name, 8))
            p->created++;
        else if (pheap_errno() == PHEAP_EBUSY)
            p->refused++;
    }
    if (pheap_free_named(h, "existing") == 0)
        p->removed = 1;
    else if (pheap_errno() == PHEAP_EBUSY)
        p->refused++;
    /* Another thread's create waits for the call to end. */
    if (pthread_create(&p->other, NULL, create_other, p) != 0)
        return 1;
    p->started = 1;
    usleep(200 * 1000);
    p->other_early = __atomic_load_n(&p->other_done, __ATOMIC_ACQUIRE) != 0;
    return 0;
}

TEST(initialiser_reads_names_and_changes_none)
{
    const char *path = ph_test_path("names-init.heap");
    pheap *h = ph_test_create(path, 16u << 20);
    REQUIRE(h);
    init_probe p = {.h = h};
    p.existing = pheap_alloc_named(h, "existing", 32);
    REQUIRE(p.existing);
    pheap_off outer = pheap_alloc_named_init(h, "outer", 64, 0, names_in_init, &p);
    CHECK(outer != 0);
    CHECK(p.lookup_ok);
    CHECK(p.listed);
    CHECK_EQ(p.created, 0);
    CHECK_EQ(p.removed, 0);
    CHECK_EQ(p.refused, 3001);
    CHECK_EQ(p.other_early, 0);
    REQUIRE(p.started);
    pthread_join(p.other, NULL); /* its exit returns its cached blocks: before the check */
    CHECK_EQ(__atomic_load_n(&p.other_done, __ATOMIC_ACQUIRE), 1);
    CHECK_EQ(pheap_lookup(h, "outer"), outer);
    CHECK_EQ(pheap_lookup(h, "existing"), p.existing);
    CHECK(pheap_lookup(h, "other") != 0);
    CHECK_EQ(pheap_lookup(h, "inner-0"), 0);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    h = ph_test_open(path, NULL);
    REQUIRE(h);
    CHECK_EQ(pheap_lookup(h, "outer"), outer);
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.names, 3);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

/* A clean close after creates whose entries are still deferred (plain,
 * small) or lazily retired (an initialiser, a large block, a thread that
 * has exited): under the simulator, whose durable image holds only what
 * a fence made durable, the reopen finds no entry ACTIVE and the check
 * passes. */
static int fill_sevens(pheap *h, void *block, size_t usable, void *arg)
{
    (void)h, (void)arg;
    memset(block, 7, usable);
    return 0;
}

static void *create_and_exit(void *arg)
{
    return (void *)(uintptr_t)pheap_alloc_named_init(arg, "from-a-thread", 100000, 0, fill_sevens,
                                                     NULL);
}

TEST(clean_close_retires_every_entry)
{
    const char *path = ph_test_path("names-close.heap");
    for (int round = 0; round < 5; round++) {
        size_t size = round % 2 ? 48 : 100000;
        pheap *h = ph_test_create(path, 8u << 20);
        REQUIRE(h);
        REQUIRE(pheap_alloc_named(h, "warm-up", 32));
        REQUIRE_OK(pheap_close(h));
        pheap_options sim = {.flags = PHEAP_SIMULATE};
        REQUIRE_OK(pheap_open(path, &sim, &h));
        if (round == 4) {
            pthread_t t;
            void *off = NULL;
            REQUIRE(pthread_create(&t, NULL, create_and_exit, h) == 0);
            pthread_join(t, &off);
            CHECK(off != NULL);
        } else if (round < 2) {
            CHECK(pheap_alloc_named(h, "made", size));
        } else {
            CHECK(pheap_alloc_named_init(h, "made", size, 0, fill_sevens, NULL));
        }
        REQUIRE_OK(pheap_close(h));
        REQUIRE_OK(pheap_open(path, NULL, &h));
        pheap_check_report r;
        CHECK_EQ(pheap_check(h, &r), 0);
        CHECK(pheap_lookup(h, round == 4 ? "from-a-thread" : "made"));
        pheap_close(h);
    }
}
