/*
 * modes.c -- owner and access modes, as a matrix: the heap's owner, root
 * and another user (forked children that drop to unprivileged ids), each
 * in writable and in read-only mode; in read-only mode every call that
 * writes is refused with PHEAP_EROMODE and changes nothing (check, live
 * blocks, roots, names, before and after a reopen), reads work; only the
 * owner or root switches the mode.  Also: the mode across reopen, snapshot
 * and read-only handles, recovery of a crashed read-only-mode heap at a
 * read-write open, 1.4 heaps (no owner, always writable), bad arguments.
 * The tests run as root: without root (no setuid) the program is skipped
 * (exit 77, ctest's SKIP_RETURN_CODE).
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

#define OWNER_UID 65533 /* an unprivileged owner */
#define OTHER_UID 65534 /* another user: nobody */
#define USER_GID 65534

#define FAIL(...) ph_test_fail(__FILE__, __LINE__, __VA_ARGS__)

/* ---- running as another user ---- */

typedef void (*as_fn)(const char *path);

/* Runs fn(path) in a child with user id `uid` (group USER_GID, no
 * supplementary groups); the child's failures are printed by it and make
 * this return nonzero. */
static int run_as(uid_t uid, as_fn fn, const char *path)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (setgroups(0, NULL) || setgid(USER_GID) || setuid(uid)) {
            fprintf(stderr, "cannot become user %u\n", (unsigned)uid);
            _exit(99);
        }
        ph_test_failed = 0;
        fn(path);
        fflush(stdout);
        fflush(stderr);
        _exit(ph_test_failed ? 1 : 0);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- the heap every case starts from ---- */

/* A heap with small and large blocks, a slot block holding the offset of
 * one of them, two roots and a named object; the file and its directory
 * open to every user (file permissions are not what is tested). */
static void build(pheap *h)
{
    pheap_off small = pheap_alloc(h, 48), big = pheap_alloc(h, 40000);
    pheap_off slots = pheap_alloc(h, 4 * sizeof(pheap_off));
    if (!small || !big || !slots) {
        FAIL("build: %s", pheap_errmsg());
        return;
    }
    pheap_off *s = pheap_direct(h, slots);
    s[0] = big;
    s[1] = s[2] = s[3] = 0;
    pheap_persist(h, s, 4 * sizeof(pheap_off));
    ph_test_fill(pheap_direct(h, small), 48, 7);
    pheap_persist(h, pheap_direct(h, small), 48);
    if (pheap_root_set(h, "small", small) || pheap_root_set(h, "slots", slots) ||
        !pheap_alloc_named(h, "named-object", 100))
        FAIL("build: %s", pheap_errmsg());
}

static const char *make_heap(const char *name)
{
    chmod(ph_test_dir(), 0777);
    const char *path = ph_test_path(name);
    pheap *h = ph_test_create(path, 4u << 20);
    if (!h)
        return NULL;
    build(h);
    pheap_close(h);
    chmod(path, 0666);
    return path;
}

/* What must not change while the heap is in read-only mode. */
typedef struct snap {
    uint64_t live_blocks, live_bytes, names;
    unsigned roots;
    pheap_off small, slots, named, slot0;
    int intact;
} snap;

static void take(pheap *h, snap *s)
{
    struct pheap_stats st;
    memset(s, 0, sizeof(*s));
    if (pheap_stats(h, &st)) {
        FAIL("pheap_stats: %s", pheap_errmsg());
        return;
    }
    s->live_blocks = st.live_blocks;
    s->live_bytes = st.live_bytes;
    s->names = st.names;
    s->roots = pheap_root_count(h);
    s->small = pheap_root_get(h, "small");
    s->slots = pheap_root_get(h, "slots");
    s->named = pheap_lookup(h, "named-object");
    const pheap_off *sl = s->slots ? pheap_direct(h, s->slots) : NULL;
    s->slot0 = sl ? sl[0] : 0;
    s->intact = s->small && ph_test_intact(pheap_direct(h, s->small), 48, 7);
    pheap_check_report r;
    if (pheap_check(h, &r))
        FAIL("pheap_check: %s", r.first_error);
}

static void same(const snap *a, const snap *b, const char *when)
{
    if (memcmp(a, b, sizeof(*a)) != 0)
        FAIL("%s: the heap changed (live %llu -> %llu blocks, roots %u -> %u, names %llu -> %llu)",
             when, (unsigned long long)a->live_blocks, (unsigned long long)b->live_blocks, a->roots,
             b->roots, (unsigned long long)a->names, (unsigned long long)b->names);
    if (!b->small || !b->slots || !b->named || !b->slot0 || !b->intact)
        FAIL("%s: the heap lost what build made", when);
}

static int init_fn(pheap *h, void *block, size_t usable, void *arg)
{
    (void)h;
    (void)arg;
    memset(block, 1, usable);
    return 0;
}

#define ROMODE(call)                                                                         \
    do {                                                                                     \
        long long r_ = (long long)(call);                                                    \
        if (r_ != PHEAP_EROMODE && !(r_ == 0 && pheap_errno() == PHEAP_EROMODE))             \
            FAIL("%s: %lld (errno %d, %s), not PHEAP_EROMODE", #call, r_, pheap_errno(),      \
                 pheap_errmsg());                                                            \
        else if (!strstr(pheap_errmsg(), "read-only mode"))                                  \
            FAIL("%s: message '%s'", #call, pheap_errmsg());                                 \
    } while (0)

/* Every call that writes, on a read-write handle of a heap in read-only
 * mode: each refused, nothing changed; then the reads. */
static void every_write_refused(pheap *h)
{
    snap before, after;
    take(h, &before);
    pheap_off *slots = pheap_direct(h, before.slots);
    if (!slots) {
        FAIL("no slots");
        return;
    }
    ROMODE(pheap_alloc(h, 64));
    ROMODE(pheap_alloc(h, 100000));
    ROMODE(pheap_alloc_init(h, 64, PHEAP_ALLOC_ZERO, init_fn, NULL));
    ROMODE(pheap_free(h, before.small));
    ROMODE(pheap_free(h, before.named));
    ROMODE(pheap_free(h, 0)); /* what a free would say, with no block */
    ROMODE(pheap_alloc_to(h, 64, &slots[1]));
    ROMODE(pheap_alloc_to_init(h, 64, &slots[2], PHEAP_ALLOC_ZERO, init_fn, NULL));
    ROMODE(pheap_free_from(h, &slots[0]));
    ROMODE(pheap_root_set(h, "small", before.slots)); /* change */
    ROMODE(pheap_root_set(h, "small", 0));            /* remove */
    ROMODE(pheap_root_set(h, "new-root", before.small)); /* insert */
    ROMODE(pheap_tx_begin(h));
    CHECK_EQ(pheap_tx_depth(h), 0);
    ROMODE(pheap_tx_alloc(h, 64));
    ROMODE(pheap_tx_free(h, before.small));
    ROMODE(pheap_alloc_named(h, "another-name", 64));
    ROMODE(pheap_alloc_named_init(h, "another-name", 64, PHEAP_ALLOC_ZERO, init_fn, NULL));
    ROMODE(pheap_free_named(h, "named-object"));
    ROMODE(pheap_gc(h));
    pheap_gc_options dry = {.flags = PHEAP_GC_DRY_RUN};
    ROMODE(pheap_gc_ex(h, &dry, NULL));
    ROMODE(pheap_recover(h));
    pheap_off small = before.small, *moving[1] = {&small};
    ROMODE(pheap_defrag(h, moving, 1, NULL));
    CHECK_EQ(small, before.small);
    ROMODE(pheap_thread_collect(h));
    /* Reads work. */
    CHECK(pheap_direct(h, before.small) != NULL);
    CHECK_EQ(pheap_usable_size(h, before.small), 48);
    CHECK_EQ(pheap_lookup(h, "named-object"), before.named);
    pheap_name_info ni;
    CHECK_EQ(pheap_name_next(h, NULL, &ni), 0);
    CHECK(strcmp(ni.name, "named-object") == 0);
    char name[PHEAP_ROOT_NAME_MAX + 1];
    pheap_off off;
    CHECK_EQ(pheap_root_at(h, 0, name, &off), 0);
    CHECK_EQ(pheap_get_mode(h), PHEAP_MODE_READONLY);
    CHECK_EQ(slots[1], 0);
    CHECK_EQ(slots[2], 0);
    take(h, &after);
    same(&before, &after, "after the refused calls");
}

/* Writing calls on a writable heap succeed (and are undone). */
static void writes_work(pheap *h)
{
    snap before, after;
    take(h, &before);
    pheap_off o = pheap_alloc(h, 64);
    CHECK(o != 0);
    CHECK_EQ(pheap_root_set(h, "tmp", o), 0);
    CHECK_EQ(pheap_root_set(h, "tmp", 0), 0);
    CHECK(pheap_alloc_named(h, "tmp-name", 10) != 0);
    CHECK_EQ(pheap_free_named(h, "tmp-name"), 0);
    CHECK_EQ(pheap_tx_begin(h), 0);
    pheap_off t = pheap_tx_alloc(h, 32);
    CHECK(t != 0);
    CHECK_EQ(pheap_tx_free(h, t), 0);
    CHECK_EQ(pheap_tx_commit(h), 0);
    CHECK_EQ(pheap_free(h, o), 0);
    CHECK_EQ(pheap_recover(h), 0); /* LOG heap: nothing to do */
    take(h, &after);
    same(&before, &after, "after writes that cancel out");
}

static pheap *open_rw(const char *path)
{
    pheap *h = NULL;
    int rc = pheap_open(path, NULL, &h);
    if (rc)
        FAIL("open %s as user %u: %s", path, (unsigned)geteuid(), pheap_errmsg());
    return h;
}

/* ---- the cases each user runs ---- */

static void set_readonly_as_owner(const char *path)
{
    pheap *h = open_rw(path);
    if (!h)
        return;
    struct pheap_stats st;
    CHECK_EQ(pheap_stats(h, &st), 0);
    CHECK_EQ(st.owner_known, 1);
    CHECK_EQ(st.owner_uid, geteuid());
    writes_work(h);
    CHECK_EQ(pheap_set_mode(h, PHEAP_MODE_READONLY), 0);
    CHECK_EQ(pheap_get_mode(h), PHEAP_MODE_READONLY);
    every_write_refused(h);
    CHECK_EQ(pheap_set_mode(h, PHEAP_MODE_READONLY), 0); /* no change: fine */
    CHECK_EQ(pheap_close(h), 0);
}

static void refused_as_other(const char *path)
{
    pheap *h = open_rw(path);
    if (!h)
        return;
    CHECK_EQ(pheap_get_mode(h), PHEAP_MODE_READONLY);
    every_write_refused(h);
    CHECK_EQ(pheap_set_mode(h, PHEAP_MODE_WRITABLE), PHEAP_EPERM);
    CHECK(strstr(pheap_errmsg(), "not the owner") != NULL);
    CHECK_EQ(pheap_set_mode(h, PHEAP_MODE_READONLY), PHEAP_EPERM); /* even no change */
    CHECK_EQ(pheap_get_mode(h), PHEAP_MODE_READONLY);
    every_write_refused(h);
    CHECK_EQ(pheap_close(h), 0);
}

static void writable_as_other(const char *path)
{
    pheap *h = open_rw(path);
    if (!h)
        return;
    CHECK_EQ(pheap_get_mode(h), PHEAP_MODE_WRITABLE);
    writes_work(h); /* the mode applies to everyone; permissions allow this user */
    struct pheap_stats st;
    CHECK_EQ(pheap_stats(h, &st), 0);
    /* not the owner; a heap without an owner has no mode to set at all */
    CHECK_EQ(pheap_set_mode(h, PHEAP_MODE_READONLY), st.owner_known ? PHEAP_EPERM : PHEAP_ENOTSUP);
    CHECK_EQ(pheap_get_mode(h), PHEAP_MODE_WRITABLE);
    CHECK_EQ(pheap_close(h), 0);
    REQUIRE_OK(pheap_open(path, NULL, &h));
    CHECK_EQ(pheap_get_mode(h), PHEAP_MODE_WRITABLE);
    pheap_close(h);
}

static void set_writable_as_owner(const char *path)
{
    pheap *h = open_rw(path);
    if (!h)
        return;
    every_write_refused(h);
    CHECK_EQ(pheap_set_mode(h, PHEAP_MODE_WRITABLE), 0);
    CHECK_EQ(pheap_get_mode(h), PHEAP_MODE_WRITABLE);
    writes_work(h);
    CHECK_EQ(pheap_close(h), 0);
}

static void create_as_owner(const char *path)
{
    pheap_options o = {.size = 4u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL, .mode = 0666};
    pheap *h = NULL;
    if (pheap_open(path, &o, &h)) {
        FAIL("create as %u: %s", (unsigned)geteuid(), pheap_errmsg());
        return;
    }
    build(h);
    CHECK_EQ(pheap_close(h), 0);
    chmod(path, 0666);
}

static int skip_unless_root(void)
{
    if (geteuid() == 0)
        return 0;
    printf("SKIP: the access-mode matrix needs root (to run children as other users)\n");
    fflush(stdout);
    exit(77);
}

/* ---- the matrix ---- */

TEST(root_owned_heap)
{
    skip_unless_root();
    const char *path = make_heap("root-owned.heap");
    REQUIRE(path);
    /* Writable: another user writes, but cannot change the mode. */
    REQUIRE_EQ(run_as(OTHER_UID, writable_as_other, path), 0);
    /* The owner (root) switches to read-only: the owner's writes are refused too. */
    set_readonly_as_owner(path);
    /* Another user: every write refused, the mode is not theirs to change. */
    REQUIRE_EQ(run_as(OTHER_UID, refused_as_other, path), 0);
    /* The owner switches back; writing works again, for everyone. */
    set_writable_as_owner(path);
    REQUIRE_EQ(run_as(OTHER_UID, writable_as_other, path), 0);
}

TEST(unprivileged_owner)
{
    skip_unless_root();
    chmod(ph_test_dir(), 0777);
    const char *path = ph_test_path("user-owned.heap");
    unlink(path);
    REQUIRE_EQ(run_as(OWNER_UID, create_as_owner, path), 0);
    pheap *h;
    pheap_options ro = {.flags = PHEAP_RDONLY};
    REQUIRE_OK(pheap_open(path, &ro, &h));
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.owner_known, 1);
    CHECK_EQ(st.owner_uid, OWNER_UID);
    CHECK_EQ(st.mode, PHEAP_MODE_WRITABLE);
    pheap_close(h);
    REQUIRE_EQ(run_as(OWNER_UID, set_readonly_as_owner, path), 0);
    REQUIRE_EQ(run_as(OTHER_UID, refused_as_other, path), 0);
    /* Root is not the owner, and may switch the mode anyway. */
    REQUIRE_OK(pheap_open(path, NULL, &h));
    every_write_refused(h);
    REQUIRE_OK(pheap_set_mode(h, PHEAP_MODE_WRITABLE));
    writes_work(h);
    REQUIRE_OK(pheap_set_mode(h, PHEAP_MODE_READONLY));
    pheap_close(h);
    REQUIRE_EQ(run_as(OWNER_UID, set_writable_as_owner, path), 0);
    REQUIRE_EQ(run_as(OTHER_UID, writable_as_other, path), 0);
}

TEST(mode_is_durable_and_seen_by_every_handle)
{
    skip_unless_root();
    const char *path = make_heap("durable.heap");
    REQUIRE(path);
    pheap *h;
    REQUIRE_OK(pheap_open(path, NULL, &h));
    REQUIRE_OK(pheap_set_mode(h, PHEAP_MODE_READONLY));
    pheap_close(h);
    pheap_options ro = {.flags = PHEAP_RDONLY}, snap_o = {.flags = PHEAP_SNAPSHOT};
    REQUIRE_OK(pheap_open(path, &ro, &h));
    CHECK_EQ(pheap_get_mode(h), PHEAP_MODE_READONLY);
    /* A read-only handle: PHEAP_ERDONLY comes first, for writes and for the mode. */
    CHECK(pheap_alloc(h, 8) == 0 && pheap_errno() == PHEAP_ERDONLY);
    CHECK_EQ(pheap_free(h, 0), PHEAP_ERDONLY);
    CHECK_EQ(pheap_set_mode(h, PHEAP_MODE_WRITABLE), PHEAP_ERDONLY);
    pheap_close(h);
    REQUIRE_OK(pheap_open(path, &snap_o, &h));
    CHECK_EQ(pheap_get_mode(h), PHEAP_MODE_READONLY);
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.mode, PHEAP_MODE_READONLY);
    CHECK_EQ(st.owner_uid, 0);
    pheap_close(h);
    REQUIRE_OK(pheap_open(path, NULL, &h));
    CHECK_EQ(pheap_get_mode(h), PHEAP_MODE_READONLY);
    CHECK_EQ(pheap_set_mode(h, 2), PHEAP_EINVAL);
    CHECK_EQ(pheap_set_mode(h, ~0u), PHEAP_EINVAL);
    CHECK_EQ(pheap_get_mode(h), PHEAP_MODE_READONLY);
    REQUIRE_OK(pheap_set_mode(h, PHEAP_MODE_WRITABLE));
    pheap_close(h);
    REQUIRE_OK(pheap_open(path, &ro, &h));
    CHECK_EQ(pheap_get_mode(h), PHEAP_MODE_WRITABLE);
    pheap_close(h);
    CHECK_EQ(pheap_set_mode(NULL, 0), PHEAP_EINVAL);
    CHECK_EQ(pheap_get_mode(NULL), PHEAP_EINVAL);
}

/* A crash left a logged operation for recovery; the heap is in read-only
 * mode: a read-write open recovers it all the same, and writes stay
 * refused. */
TEST(crashed_readonly_heap_recovers)
{
    skip_unless_root();
    const char *image = ph_test_path("crashed-ro.heap");
    pheap_off slots_off = 0;
    REQUIRE_EQ(ph_test_interrupted_alloc_to(image, &slots_off), 0);
    int fd = open(image, O_RDWR);
    REQUIRE(fd >= 0);
    uint64_t w = ph_mode_word(PH_MODE_READONLY);
    REQUIRE(pwrite(fd, &w, 8, PH_STATE_OFFSET + offsetof(ph_state, xmode)) == 8);
    close(fd);
    pheap *h;
    REQUIRE_OK(pheap_open(image, NULL, &h));
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.was_unclean, 1);
    CHECK_EQ(st.recovered_ops, 1);
    CHECK_EQ(st.mode, PHEAP_MODE_READONLY);
    const pheap_off *slots = pheap_direct(h, slots_off);
    REQUIRE(slots);
    CHECK(slots[1] != 0);
    REQUIRE_OK(pheap_check(h, NULL));
    CHECK(pheap_alloc(h, 8) == 0 && pheap_errno() == PHEAP_EROMODE);
    pheap_close(h);
}

/* A heap made before format 1.5 (the 1.5 fields taken out, as a 1.4 build
 * writes them): no owner, always writable, the mode cannot be set. */
TEST(format_1_4_heap)
{
    skip_unless_root();
    const char *path = make_heap("old.heap");
    REQUIRE(path);
    REQUIRE(ph_test_as_format_1_4(path) == 0);
    pheap *h;
    REQUIRE_OK(pheap_open(path, NULL, &h));
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.format_minor, 4);
    CHECK_EQ(st.owner_known, 0);
    CHECK_EQ(st.mode, PHEAP_MODE_WRITABLE);
    CHECK_EQ(pheap_set_mode(h, PHEAP_MODE_READONLY), PHEAP_ENOTSUP);
    CHECK(strstr(pheap_errmsg(), "1.4") != NULL);
    CHECK_EQ(pheap_get_mode(h), PHEAP_MODE_WRITABLE);
    writes_work(h);
    pheap_close(h);
    /* Anyone who may write the file writes it, as before 1.5. */
    REQUIRE_EQ(run_as(OTHER_UID, writable_as_other, path), 0);
}

/* A transaction the thread began before the switch runs to its end; no
 * new one starts. */
TEST(transaction_begun_before_the_switch)
{
    skip_unless_root();
    const char *path = make_heap("tx-switch.heap");
    REQUIRE(path);
    pheap *h;
    REQUIRE_OK(pheap_open(path, NULL, &h));
    pheap_off keep = pheap_root_get(h, "small");
    REQUIRE(keep);
    uint64_t *w = pheap_direct(h, keep);
    uint64_t nv = 42;
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE_OK(pheap_tx_write(h, w, &nv, sizeof(nv)));
    REQUIRE_OK(pheap_set_mode(h, PHEAP_MODE_READONLY));
    pheap_off x = pheap_tx_alloc(h, 64);
    CHECK(x != 0);
    CHECK_EQ(pheap_tx_begin(h), PHEAP_EROMODE); /* not even a nested level */
    CHECK_EQ(pheap_tx_depth(h), 1);
    CHECK_EQ(pheap_tx_commit(h), 0);
    CHECK_EQ(*w, 42);
    CHECK_EQ(pheap_usable_size(h, x) >= 64, 1);
    CHECK_EQ(pheap_tx_commit(h), PHEAP_EROMODE); /* no transaction left */
    CHECK_EQ(pheap_tx_begin(h), PHEAP_EROMODE);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_set_mode(h, PHEAP_MODE_WRITABLE));
    CHECK_EQ(pheap_free(h, x), 0);
    pheap_close(h);
}
