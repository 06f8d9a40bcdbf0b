/*
 * share_names.c -- names inside transactions of processes sharing a heap,
 * the cases an adversarial review found: a fork child's close of its copy
 * of the handle keeps the parent's holds; a dead process's holds hold
 * until its takeover has rolled its transaction back (its undo images
 * could otherwise land on a block another process took meanwhile); every
 * way a hold ends lets its slot of the process table go; a thread that
 * exits with names in its transaction never deadlocks against the
 * takeover of the directory's lock from a dead holder.
 */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "format/layout.h"
#include "harness.h"
#include "heap/heap.h"
#include "heap/names.h"
#include "heap/procs.h"
#include "share_common.h"

static int wait_status(int pid)
{
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Forks a child that opens the heap shared itself and tries to create
 * `name`: its exit status is 0 when the create was refused with
 * PHEAP_EBUSY, 1 when it succeeded, 2.. otherwise. */
static int other_process_creates(const char *path, const char *name)
{
    fflush(NULL);
    int pid = fork();
    if (pid == 0) {
        pheap_options o = {.flags = PHEAP_SHARED};
        pheap *c;
        if (pheap_open(path, &o, &c))
            _exit(2);
        pheap_off off = pheap_alloc_named(c, name, 8);
        int busy = off == 0 && pheap_errno() == PHEAP_EBUSY;
        if (pheap_close(c))
            _exit(3);
        _exit(busy ? 0 : off ? 1 : 4);
    }
    return wait_status(pid);
}

static unsigned count_named(pheap *h, const char *name)
{
    unsigned n = 0;
    pheap_name_info info;
    const char *after = NULL;
    char last[PHEAP_NAME_MAX + 1];
    while (pheap_name_next(h, after, &info) == 0) {
        n += strcmp(info.name, name) == 0;
        snprintf(last, sizeof(last), "%s", info.name);
        after = last;
    }
    return n;
}

/* A fork child that releases its copy of the parent's handle (pheap_close,
 * as pheap.h says it should) lets go of the parent's open transaction's
 * holds in the process table: another process then creates the held name,
 * and the parent's commit enters it a second time. */
TEST(a_fork_childs_close_keeps_the_parents_holds)
{
    const char *path = make_heap("share-names-fork.heap", 64 * MB);
    REQUIRE(path);
    pheap *h = open_shared(path);
    REQUIRE(h);
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE(pheap_alloc_named(h, "dup", 8));
    /* held: another process is refused */
    CHECK_EQ(other_process_creates(path, "dup"), 0);
    /* a fork child drops its copy of the handle */
    fflush(NULL);
    int pid = fork();
    if (pid == 0)
        _exit(pheap_close(h) ? 1 : 0);
    REQUIRE_EQ(wait_status(pid), 0);
    /* the parent's transaction is still open: the name is still held */
    CHECK_EQ(other_process_creates(path, "dup"), 0);
    REQUIRE_OK(pheap_tx_commit(h));
    CHECK_EQ(count_named(h, "dup"), 1);
    CHECK_EQ(pheap_close(h), 0);
    pheap *x;
    REQUIRE_OK(pheap_open(path, NULL, &x));
    pheap_check_report r;
    CHECK_EQ(pheap_check(x, &r), 0);
    pheap_close(x);
}

/* ---- a dead holder's hold lapses before its rollback ----------------- */

/* Changes the block named "x" in a transaction (its old bytes in the
 * log), removes the name in it, says so, waits to be killed. */
static void update_and_remove(const char *path, int in, int out)
{
    pheap_options o = {.flags = PHEAP_SHARED};
    pheap *h;
    if (pheap_open(path, &o, &h))
        _exit(2);
    pheap_off x = pheap_lookup(h, "x");
    if (!x || pheap_tx_begin(h) || pheap_tx_add(h, pheap_direct(h, x), 64))
        _exit(3);
    memset(pheap_direct(h, x), 'A', 64);
    if (pheap_free_named(h, "x"))
        _exit(4);
    send_u64(out, 1);
    recv_u64(in); /* killed meanwhile */
    _exit(5);
}

/* A killed process's transaction held "x" (it removed the name after
 * changing the block in place).  Its hold is ignored at once, before its
 * takeover: another process removes "x", gets the block back for a new
 * name and fills it -- and the takeover's rollback then writes the dead
 * transaction's old bytes over the new object. */
TEST(a_dead_holders_rollback_never_writes_over_what_its_hold_let_go)
{
    const char *path = make_heap("share-names-dead.heap", 64 * MB);
    REQUIRE(path);
    pheap *h = open_shared(path);
    REQUIRE(h);
    pheap_off x = pheap_alloc_named(h, "x", 64);
    REQUIRE(x);
    memset(pheap_direct(h, x), 'X', 64);
    child c = start(update_and_remove, path);
    REQUIRE(c.pid > 0);
    REQUIRE_EQ(recv_u64(c.from_child), 1);
    CHECK_EQ(pheap_free_named(h, "x"), PHEAP_EBUSY); /* held while it lives */
    PH_TEST_KILL(c.pid);
    close(c.to_child);
    close(c.from_child);
    /* the dead holder is taken over first: its transaction rolled back,
     * then its hold let go */
    REQUIRE_OK(pheap_free_named(h, "x"));
    /* the block handed out again (a few allocations of its class) */
    pheap_off y = 0;
    unsigned n = 0;
    while (n < 200 && (y = pheap_alloc(h, 64)) != x && y)
        n++;
    REQUIRE_EQ(y, x);
    memset(pheap_direct(h, y), 'Y', 64);
    REQUIRE_OK(pheap_root_set(h, "y", y));
    CHECK_EQ(pheap_close(h), 0); /* takes the dead process over: its transaction rolled back */
    pheap *r;
    REQUIRE_OK(pheap_open(path, NULL, &r));
    y = pheap_root_get(r, "y");
    REQUIRE(y);
    const unsigned char *p = pheap_direct(r, y);
    unsigned bad = 0;
    for (unsigned i = 0; i < 64; i++)
        bad += p[i] != 'Y';
    CHECK_EQ(bad, 0);
    pheap_close(r);
}

/* ---- the hold slots this process owns, after each way a hold ends ---- */
static unsigned mine(pheap *h)
{
    uint64_t me = ph_procs_identity(h);
    unsigned k = 0;
    for (unsigned i = 0; i < PH_PROCS_HOLDS; i++)
        k += __atomic_load_n(&h->names->pholds[i].xowner, __ATOMIC_RELAXED) == me;
    return k;
}

static int refuse(pheap *h, void *block, size_t usable, void *arg)
{
    (void)h, (void)block, (void)usable, (void)arg;
    return 1;
}

static void *open_tx_and_exit(void *arg)
{
    pheap *h = arg;
    if (pheap_tx_begin(h) || !pheap_alloc_named(h, "thread-made", 8))
        return (void *)1;
    return NULL; /* exits with its transaction open */
}

TEST(every_way_a_hold_ends_lets_its_slot_go)
{
    const char *path = make_heap("share-names-slots.heap", 64 * MB);
    REQUIRE(path);
    pheap *h = open_shared(path);
    REQUIRE(h);
    REQUIRE(pheap_alloc_named(h, "exists", 8));
    pheap_off gone = pheap_alloc_named(h, "freed", 8);
    REQUIRE(gone);
    REQUIRE_OK(pheap_free(h, gone)); /* the name alone stays */
    /* abort */
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE(pheap_alloc_named(h, "a", 8));
    CHECK_EQ(mine(h), 1);
    REQUIRE_OK(pheap_tx_abort(h));
    CHECK_EQ(mine(h), 0);
    /* initialiser refuses, EEXIST, ENOTLIVE, create then remove in one tx */
    REQUIRE_OK(pheap_tx_begin(h));
    CHECK_EQ(pheap_alloc_named_init(h, "b", 8, 0, refuse, NULL), 0);
    CHECK_EQ(pheap_alloc_named(h, "exists", 8), 0);
    CHECK_EQ(pheap_free_named(h, "freed"), PHEAP_ENOTLIVE);
    CHECK_EQ(pheap_free_named(h, "nope"), PHEAP_ENOENT);
    REQUIRE(pheap_alloc_named(h, "c", 8));
    REQUIRE_OK(pheap_free_named(h, "c"));
    CHECK_EQ(mine(h), 0);
    CHECK_EQ(pheap_tx_depth(h), 1);
    REQUIRE_OK(pheap_tx_commit(h));
    CHECK_EQ(mine(h), 0);
    /* escalation: more names than slots, committed, then aborted */
    for (int round = 0; round < 2; round++) {
        REQUIRE_OK(pheap_tx_begin(h));
        for (unsigned i = 0; i < 300; i++) {
            char name[32];
            snprintf(name, sizeof(name), "m%d-%u", round, i);
            REQUIRE(pheap_alloc_named(h, name, 8));
        }
        CHECK_EQ(mine(h), PH_PROCS_HOLDS);
        CHECK_EQ(h->names->pall, 300 - (PH_PROCS_HOLDS - 1));
        if (round)
            REQUIRE_OK(pheap_tx_abort(h));
        else
            REQUIRE_OK(pheap_tx_commit(h));
        CHECK_EQ(mine(h), 0);
        CHECK_EQ(h->names->pall, 0);
    }
    /* a thread that exits with its transaction open */
    pthread_t th;
    void *ret;
    REQUIRE_EQ(pthread_create(&th, NULL, open_tx_and_exit, h), 0);
    pthread_join(th, &ret);
    CHECK(ret == NULL);
    CHECK_EQ(mine(h), 0);
    /* pheap_close with a transaction open */
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE(pheap_alloc_named(h, "closed-with", 8));
    CHECK_EQ(pheap_close(h), 0);
    CHECK_EQ(other_process_creates(path, "closed-with"), 1);
    CHECK_EQ(other_process_creates(path, "thread-made"), 1);
}

/* ---- a thread's exit with names in its transaction, against a lock taken over ---- */
static int hold_lock_init(pheap *h, void *block, size_t usable, void *arg)
{
    (void)h, (void)block, (void)usable;
    send_u64(*(int *)arg, 1); /* the directory's lock between processes is held */
    for (;;)
        pause();
    return 0;
}

/* Opens the heap shared and creates a name whose initialiser never ends:
 * holds the directory's process lock until killed. */
static void lock_holder(const char *path, int in, int out)
{
    (void)in;
    pheap_options o = {.flags = PHEAP_SHARED};
    pheap *h;
    if (pheap_open(path, &o, &h))
        _exit(2);
    pheap_alloc_named_init(h, "never", 8, 0, hold_lock_init, &out);
    _exit(3);
}

static int t1_go[2], t1_ready[2];

static void *t1_fn(void *arg)
{
    pheap *h = arg;
    if (pheap_tx_begin(h) || !pheap_alloc_named(h, "t1-made", 8))
        return (void *)1;
    char b;
    send_u64(t1_ready[1], 1);
    if (read(t1_go[0], &b, 1) != 1) /* told to exit */
        return (void *)2;
    return NULL; /* exits with its transaction open: rolled back at exit */
}

static void *t2_fn(void *arg)
{
    pheap_lookup(arg, "anything"); /* a thread's first call on the heap */
    return NULL;
}

static void deadlock_scenario(const char *path, int in, int out)
{
    (void)in;
    (void)out;
    pheap_options o = {.flags = PHEAP_SHARED};
    pheap *h;
    if (pheap_open(path, &o, &h) || pipe(t1_go) || pipe(t1_ready))
        _exit(2);
    pthread_t t1, t2;
    if (pthread_create(&t1, NULL, t1_fn, h))
        _exit(3);
    if (recv_u64(t1_ready[0]) != 1) /* its transaction holds a name */
        _exit(4);
    int back[2];
    if (pipe(back))
        _exit(5);
    fflush(NULL);
    int holder = fork();
    if (holder == 0) {
        close(back[0]);
        lock_holder(path, -1, back[1]);
    }
    close(back[1]);
    if (recv_u64(back[0]) != 1)
        _exit(6);
    if (pthread_create(&t2, NULL, t2_fn, h)) /* waits for the process lock, read lock held */
        _exit(7);
    struct timespec ms50 = {0, 50 * 1000 * 1000};
    nanosleep(&ms50, NULL);
    if (write(t1_go[1], "x", 1) != 1) /* t1 exits: its rollback waits for the write lock */
        _exit(8);
    nanosleep(&ms50, NULL);
    kill(holder, SIGKILL); /* t2 takes the lock over, and repairs */
    waitpid(holder, NULL, 0);
    pthread_join(t2, NULL);
    pthread_join(t1, NULL);
    _exit(pheap_close(h) ? 9 : 0);
}

TEST(a_threads_exit_with_tx_names_never_deadlocks_a_lock_takeover)
{
    const char *path = make_heap("share-names-exit.heap", 64 * MB);
    REQUIRE(path);
    child c = start(deadlock_scenario, path);
    REQUIRE(c.pid > 0);
    int st = 0, done = 0;
    for (int i = 0; i < 100 && !done; i++) { /* 10 s */
        done = waitpid(c.pid, &st, WNOHANG) == c.pid;
        if (!done)
            usleep(100 * 1000);
    }
    if (!done) {
        ph_test_fail(__FILE__, __LINE__, "the process hangs (deadlock): killed");
        kill(c.pid, SIGKILL);
        waitpid(c.pid, &st, 0);
    } else {
        CHECK(WIFEXITED(st));
        CHECK_EQ(WEXITSTATUS(st), 0);
    }
    close(c.to_child);
    close(c.from_child);
}
