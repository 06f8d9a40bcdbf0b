/*
 * procs.c -- the process table: a read-write open holds a lease that
 * pheap_procs lists; read-only opens hold none; a holder killed with
 * SIGKILL is no longer listed and its stale slot is cleared by the next
 * read-write open; a pid in a slot whose lock nobody holds is never
 * believed; a fork child that outlives its parent does not keep the
 * parent listed; heaps before format 1.6 and bad calls get their errors.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "format/layout.h"
#include "harness.h"
#include "heap/procs.h"

static const char *make_heap(const char *name)
{
    const char *path = ph_test_path(name);
    pheap *h = ph_test_create(path, 8u << 20);
    if (!h)
        return NULL;
    pheap_close(h);
    return path;
}

/* The raw lease of `slot` and the table header, read from the file. */
static int read_lease(const char *path, unsigned slot, ph_lease *l, ph_procs_header *ph)
{
    uint64_t r = ph_test_region_offset(path, PH_REGION_PROCS);
    int fd = open(path, O_RDONLY);
    int ok = r && fd >= 0 && pread(fd, ph, sizeof(*ph), (off_t)r) == sizeof(*ph) &&
             pread(fd, l, sizeof(*l), (off_t)(r + PH_PAGE_SIZE + slot * sizeof(*l))) == sizeof(*l);
    if (fd >= 0)
        close(fd);
    return ok ? 0 : -1;
}

static uint64_t own_start_ticks(void)
{
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    for (int field = 2; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

TEST(a_read_write_open_holds_a_lease)
{
    const char *path = make_heap("procs-rw.heap");
    REQUIRE(path);
    pheap_proc p[4];
    CHECK_EQ(pheap_procs(path, p, 4), 0);
    pheap *h;
    REQUIRE_OK(pheap_open(path, NULL, &h));
    time_t now = time(NULL);
    REQUIRE_EQ(pheap_procs(path, p, 4), 1);
    CHECK_EQ(p[0].pid, getpid());
    CHECK_EQ(p[0].uid, geteuid());
    CHECK_EQ(p[0].flags, PHEAP_PROC_EXCLUSIVE);
    CHECK_EQ(p[0].start_ticks, own_start_ticks());
    CHECK(p[0].since <= now && p[0].since >= now - 60);
    char comm[32] = "";
    FILE *f = fopen("/proc/self/comm", "r");
    if (f) {
        if (fgets(comm, sizeof(comm), f))
            comm[strcspn(comm, "\n")] = 0;
        fclose(f);
    }
    CHECK(strcmp(p[0].comm, comm) == 0);
    CHECK_EQ(pheap_procs(path, NULL, 0), 1); /* counting only */
    REQUIRE_OK(pheap_close(h));
    CHECK_EQ(pheap_procs(path, p, 4), 0);
    /* The close gave the slot back: nothing of it is left. */
    ph_lease l;
    ph_procs_header ph;
    REQUIRE_OK(read_lease(path, p[0].slot, &l, &ph));
    CHECK_EQ(l.xpid, 0);
    CHECK_EQ(ph.magic, PH_PROCS_MAGIC);
    CHECK_EQ(ph.xattaches, 2); /* the creating open, then this one */
}

TEST(read_only_opens_and_snapshots_hold_none)
{
    const char *path = make_heap("procs-ro.heap");
    REQUIRE(path);
    pheap *a, *b;
    pheap_options ro = {.flags = PHEAP_RDONLY}, snap = {.flags = PHEAP_SNAPSHOT};
    REQUIRE_OK(pheap_open(path, &ro, &a));
    REQUIRE_OK(pheap_open(path, &snap, &b));
    CHECK_EQ(pheap_procs(path, NULL, 0), 0);
    pheap_close(b);
    pheap_close(a);
    ph_lease l;
    ph_procs_header ph;
    REQUIRE_OK(read_lease(path, 0, &l, &ph));
    CHECK_EQ(ph.xattaches, 1); /* the creating open's: these two wrote nothing */
}

TEST(a_killed_holder_is_not_listed_and_its_slot_is_cleared)
{
    const char *path = make_heap("procs-kill.heap");
    REQUIRE(path);
    int pid = ph_test_hold(path, 0);
    REQUIRE(pid > 0);
    pheap_proc p[2];
    REQUIRE_EQ(pheap_procs(path, p, 2), 1);
    CHECK_EQ(p[0].pid, pid);
    unsigned slot = p[0].slot;
    REQUIRE_OK(kill(pid, SIGKILL));
    waitpid(pid, NULL, 0);
    /* The slot still names the dead process; its lock went with it. */
    ph_lease l;
    ph_procs_header ph;
    REQUIRE_OK(read_lease(path, slot, &l, &ph));
    CHECK_EQ(l.xpid, (uint64_t)pid);
    CHECK_EQ(pheap_procs(path, p, 2), 0);
    /* The next read-write open clears it and takes a slot of its own. */
    pheap *h;
    REQUIRE_OK(pheap_open(path, NULL, &h));
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK(st.was_unclean);
    REQUIRE_EQ(pheap_procs(path, p, 2), 1);
    CHECK_EQ(p[0].pid, getpid());
    REQUIRE_OK(read_lease(path, slot, &l, &ph));
    CHECK_EQ(ph.xstale, 1);
    CHECK_EQ(ph.xattaches, 3);
    CHECK_EQ(l.xpid, (uint64_t)getpid()); /* the first free slot again */
    CHECK_EQ(pheap_check(h, NULL), 0);
    pheap_close(h);
}

/* The identity of a lease, as locks between processes hold it: dead once
 * its process is killed (whoever takes its slot next has another one),
 * alive while a live process holds its slot's lock. */
TEST(a_lease_identity_dies_with_its_process)
{
    const char *path = make_heap("procs-identity.heap");
    REQUIRE(path);
    int up[2], hold[2];
    REQUIRE(pipe(up) == 0 && pipe(hold) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        pheap *h;
        uint64_t id = pheap_open(path, NULL, &h) == 0 ? ph_procs_identity(h) : 0;
        char c;
        close(up[0]);
        close(hold[1]);
        if (write(up[1], &id, sizeof(id)) != sizeof(id) || read(hold[0], &c, 1) < 0)
            _exit(2);
        _exit(0);
    }
    close(up[1]);
    close(hold[0]);
    uint64_t id = 0;
    REQUIRE(read(up[0], &id, sizeof(id)) == sizeof(id));
    REQUIRE(id != 0);
    REQUIRE_OK(kill(pid, SIGKILL));
    waitpid(pid, NULL, 0);
    pheap *h;
    REQUIRE_OK(pheap_open(path, NULL, &h)); /* takes the dead one's slot */
    uint64_t mine = ph_procs_identity(h);
    CHECK(mine != 0 && mine != id);
    CHECK_EQ(mine & 0xff, id & 0xff);
    CHECK_EQ(ph_procs_dead(h, mine), 0);
    CHECK_EQ(ph_procs_dead(h, id), 1);
    CHECK_EQ(ph_procs_dead(h, id & ~0xffull), 0);        /* no slot: not an identity */
    CHECK_EQ(ph_procs_dead(h, (id & ~0xffull) | 65), 0);
    /* Slot 5 held by a live process (this one, through another open file
     * of the heap, with a lease naming it): alive while the lock is held. */
    uint64_t r = ph_test_region_offset(path, PH_REGION_PROCS);
    ph_lease l = {.xpid = (uint64_t)getpid(), .xstart = own_start_ticks(), .xgen = 77,
                  .xflags = PH_LEASE_SHARED, .comm = "other"};
    int fd = open(path, O_RDWR);
    REQUIRE(fd >= 0);
    REQUIRE(pwrite(fd, &l, sizeof(l), (off_t)(r + PH_PAGE_SIZE + 5 * sizeof(l))) == sizeof(l));
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET,
                       .l_start = (off_t)PH_PROCS_LOCK_BYTE(r, 5), .l_len = 1};
    REQUIRE(fcntl(fd, F_OFD_SETLK, &fl) == 0);
    uint64_t other = 77u << 8 | 6;
    CHECK_EQ(ph_procs_dead(h, other), 0);
    CHECK_EQ(ph_procs_dead(h, other + (1u << 8)), 1);  /* an older attach of the slot */
    fl.l_type = F_UNLCK;
    REQUIRE(fcntl(fd, F_OFD_SETLK, &fl) == 0);
    CHECK_EQ(ph_procs_dead(h, other), 1);              /* its lock is gone */
    close(fd);
    pheap_close(h);
    close(up[0]);
    close(hold[1]);
}

/* A slot filled by hand with this very process's pid and start time, its
 * lock held by no one: a pid alone is never believed. */
TEST(a_slot_without_its_lock_is_never_listed)
{
    const char *path = make_heap("procs-forged.heap");
    REQUIRE(path);
    ph_lease l = {.xpid = (uint64_t)getpid(), .xstart = own_start_ticks(), .xflags = PH_LEASE_EXCLUSIVE,
                  .comm = "forged"};
    uint64_t r = ph_test_region_offset(path, PH_REGION_PROCS);
    int fd = open(path, O_RDWR);
    REQUIRE(fd >= 0);
    REQUIRE(pwrite(fd, &l, sizeof(l), (off_t)(r + PH_PAGE_SIZE + 5 * sizeof(l))) == sizeof(l));
    close(fd);
    CHECK_EQ(pheap_procs(path, NULL, 0), 0);
    pheap *h;
    REQUIRE_OK(pheap_open(path, NULL, &h));
    pheap_proc p[2];
    REQUIRE_EQ(pheap_procs(path, p, 2), 1);
    CHECK_EQ(p[0].slot, 0);
    pheap_close(h);
    ph_procs_header ph;
    REQUIRE_OK(read_lease(path, 5, &l, &ph));
    CHECK_EQ(l.xpid, 0); /* cleared as stale */
    CHECK_EQ(ph.xstale, 1);
}

/* A holder that forks a child which keeps the inherited handle, then dies:
 * the child's copy of the open file keeps the lock (and the heap's file
 * lock), but the slot names a process that is gone, so it is not listed. */
TEST(a_fork_child_outliving_its_parent_does_not_keep_it_listed)
{
    const char *path = make_heap("procs-orphan.heap");
    REQUIRE(path);
    int up[2], hold[2];
    REQUIRE(pipe(up) == 0 && pipe(hold) == 0);
    pid_t parent = fork();
    REQUIRE(parent >= 0);
    if (parent == 0) {
        pheap *h;
        if (pheap_open(path, NULL, &h) != 0)
            _exit(1);
        pid_t child = fork();
        if (child == 0) { /* keeps the copy until told (or for 60 s at most) */
            char c;
            alarm(60);
            close(up[0]);
            close(hold[1]);
            if (write(up[1], "r", 1) != 1 || read(hold[0], &c, 1) < 0)
                _exit(2);
            _exit(0);
        }
        _exit(child > 0 ? 0 : 3); /* dies holding the heap */
    }
    int status = 0;
    waitpid(parent, &status, 0);
    REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char c;
    close(up[1]);
    REQUIRE(read(up[0], &c, 1) == 1);
    CHECK_EQ(pheap_procs(path, NULL, 0), 0);
    pheap *h;
    CHECK_EQ(pheap_open(path, NULL, &h), PHEAP_EBUSY); /* the child's copy holds the file */
    close(hold[1]); /* the child exits */
    close(hold[0]);
    close(up[0]);
    for (int i = 0; i < 500 && pheap_open(path, NULL, &h) == PHEAP_EBUSY; i++)
        usleep(10000);
    REQUIRE(h);
    CHECK_EQ(pheap_procs(path, NULL, 0), 1);
    pheap_close(h);
}

TEST(heaps_before_the_table_and_bad_calls)
{
    const char *path = make_heap("procs-old.heap");
    REQUIRE(path);
    REQUIRE_OK(ph_test_as_format_1_5(path));
    pheap_proc p[2];
    CHECK_EQ(pheap_procs(path, p, 2), PHEAP_ENOTSUP);
    CHECK(strstr(pheap_errmsg(), "1.6"));
    pheap *h;
    REQUIRE_OK(pheap_open(path, NULL, &h)); /* opens; holds no lease */
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(st.format_minor, 5);
    CHECK_EQ(pheap_check(h, NULL), 0);
    pheap_close(h);

    CHECK_EQ(pheap_procs(NULL, p, 2), PHEAP_EINVAL);
    CHECK_EQ(pheap_procs(path, NULL, 2), PHEAP_EINVAL);
    CHECK_EQ(pheap_procs(ph_test_path("procs-missing.heap"), p, 2), PHEAP_ENOENT);
    const char *junk = ph_test_path("procs-junk.heap");
    int fd = open(junk, O_RDWR | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, "not a heap, just text\n", 22) == 22);
    close(fd);
    CHECK_EQ(pheap_procs(junk, p, 2), PHEAP_ENOTHEAP);
}

/* Any reader of the file can lock its bytes: read locks on the gate and on
 * every liveness byte.  A read-write open still succeeds (without a lease:
 * not listed), and its clean close leaves the heap clean. */
TEST(a_reader_holding_the_table_locks_refuses_no_open)
{
    const char *path = make_heap("procs-reader.heap");
    REQUIRE(path);
    uint64_t r = ph_test_region_offset(path, PH_REGION_PROCS);
    int fd = open(path, O_RDONLY);
    REQUIRE(fd >= 0);
    struct flock l = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = (off_t)r, .l_len = 1};
    REQUIRE(fcntl(fd, F_OFD_SETLK, &l) == 0);
    for (unsigned i = 0; i < PH_PROCS_SLOTS; i++) {
        l.l_start = (off_t)PH_PROCS_LOCK_BYTE(r, i);
        REQUIRE(fcntl(fd, F_OFD_SETLK, &l) == 0);
    }
    pheap *h;
    REQUIRE_OK(pheap_open(path, NULL, &h));
    REQUIRE(pheap_alloc(h, 64));
    CHECK_EQ(pheap_procs(path, NULL, 0), 0);
    REQUIRE_OK(pheap_close(h));
    close(fd);
    REQUIRE_OK(pheap_open(path, NULL, &h));
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(st.was_unclean, 0);
    CHECK_EQ(pheap_procs(path, NULL, 0), 1);
    pheap_close(h);
}
