/*
 * tier.c -- the checkpoint durability level at the heap's level: which
 * copy an open starts from, the working copy's life, pheap_checkpoint and
 * the automatic checkpoints.  The checkpoint itself is persist/ckpt.c.
 *
 * Two copies of a heap at this level:
 *   the heap file      durable; the last completed checkpoint (after
 *                      open's replay of a committed journal);
 *   the working copy   <workdir>/<dev>-<inode>.work, a file in memory
 *                      (tmpfs), the heap pheap maps and runs; it outlives
 *                      the process, not the machine.
 * Which one an open starts from:
 *   working copy present, of this heap   a process crash left it: it holds
 *                                        every call that returned; resume
 *                                        from it (its pages are compared
 *                                        with the file at the next
 *                                        checkpoint: the dirty map is gone);
 *   absent (a reboot, or a clean close   copy the file into a new one.
 *   removed it)
 * An open at another level that finds a working copy of the heap copies it
 * into the file first (a checkpoint) and removes it, so that no level ever
 * reads a file older than what the calls returned.  Every open, read-only
 * ones included, first replays a committed journal (ph_ckpt_replay).
 */
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "heap/heap.h"
#include "heap/options.h"
#include "os/os.h"
#include "persist/ckpt.h"
#include "util/error.h"
#include "util/gate.h"

struct ph_tier {
    ph_ckpt *ckpt;               /* NULL until the working copy is mapped */
    int dfd;                     /* the heap file: holds the open's lock */
    char *wpath;                 /* the working copy */
    unsigned from_working_copy;  /* resumed from one a crash left */
    unsigned created;            /* this open made the working copy */
    unsigned ms;                 /* automatic checkpoints */
    pthread_t thread;
    unsigned thread_running;
    pthread_mutex_t lock;        /* guards stopping, wakes the thread */
    pthread_cond_t cv;
    unsigned stopping;
    uint64_t xerrors;            /* automatic checkpoints that failed */
};

/* The directory of working copies: PHEAP_WORKDIR, else /dev/shm/pheap-UID;
 * made when missing if `make`, and refused unless it is the user's own and
 * closed to others (a working copy holds the heap's contents).  Without
 * `make`, a directory that is missing: PHEAP_ENOENT. */
static int workdir(char *buf, size_t len, int make)
{
    const char *env = getenv("PHEAP_WORKDIR");
    if (env && *env)
        snprintf(buf, len, "%s", env);
    else
        snprintf(buf, len, "/dev/shm/pheap-%lu", (unsigned long)geteuid());
    int rc = make ? ph_os_make_dirs(buf, 0700) : 0;
    if (rc)
        return ph_err(rc, "the working-copy directory %s: %s", buf, pheap_errmsg());
    struct stat st;
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
        return make ? ph_err(PHEAP_EIO, "the working-copy directory %s cannot be read", buf)
                    : PHEAP_ENOENT;
    if (st.st_uid != geteuid() || (st.st_mode & 077))
        return ph_err(PHEAP_EPERM, "the working-copy directory %s is not private to this user "
                      "(owner %lu, mode %03o): set PHEAP_WORKDIR to a directory of mode 0700",
                      buf, (unsigned long)st.st_uid, (unsigned)(st.st_mode & 0777));
    return 0;
}

/* <workdir>/<dev>-<inode>.work for the heap file open as dfd, malloc'd;
 * NULL with the error set (workdir's, when `make` or *rc is not wanted). */
static char *working_copy_path(int dfd, int make, int *rc)
{
    char dir[4096];
    struct stat st;
    if ((*rc = workdir(dir, sizeof(dir), make)) != 0)
        return NULL;
    if (fstat(dfd, &st) != 0) {
        *rc = ph_err(PHEAP_EIO, "cannot stat the heap file");
        return NULL;
    }
    char *p = malloc(strlen(dir) + 64);
    if (!p) {
        *rc = ph_err(PHEAP_ENOMEM, "out of memory");
        return NULL;
    }
    sprintf(p, "%s/%llx-%llx.work", dir, (unsigned long long)st.st_dev,
            (unsigned long long)st.st_ino);
    return p;
}

static int same_heap(int a, int b)
{
    uint8_t ua[16], ub[16];
    return ph_os_pread(a, ua, 16, offsetof(ph_header, uuid)) == 16 &&
           ph_os_pread(b, ub, 16, offsetof(ph_header, uuid)) == 16 && memcmp(ua, ub, 16) == 0;
}

/* The working copy reserves what the heap file does: the space of every
 * page the heap may store to without reserving it first (PHEAP_ENOSPC,
 * never a SIGBUS, when the memory file system is full), and of every page
 * the copy writes. */
static int reserve_like(int dfd, int wfd, uint64_t size, const char *wpath)
{
    uint64_t a0, a1;
    int rc = 0, got;
    for (uint64_t off = 0; !rc && (got = ph_os_next_allocated(dfd, off, size, &a0, &a1)) == 1;
         off = a1)
        rc = ph_os_allocate(wfd, wpath, a0, a1 - a0);
    if (!rc && got < 0) /* the heap file's file system cannot say: all of it */
        rc = ph_os_allocate(wfd, wpath, 0, size);
    return rc;
}

/* A working copy at `wpath` made from the heap file `dfd`. */
static int make_working_copy(int dfd, const char *dpath, const char *wpath, int *wfd)
{
    char tmp[4096 + 16];
    uint64_t size;
    int rc = ph_os_file_size(dfd, dpath, &size);
    if (!rc)
        rc = ph_os_create_temp(wpath, 0600, wfd, tmp);
    if (rc)
        return ph_err(rc, "cannot make the working copy %s: %s", wpath, pheap_errmsg());
    rc = ph_os_resize(*wfd, wpath, size);
    if (!rc)
        rc = reserve_like(dfd, *wfd, size, wpath);
    char *map = !rc && size ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, *wfd, 0) : NULL;
    if (map == MAP_FAILED)
        rc = ph_err(PHEAP_EIO, "cannot map the working copy %s", wpath);
    else if (map) { /* the pages that hold something; the others read as zeros */
        rc = ph_os_copy_file(dfd, size, map);
        munmap(map, size);
    }
    if (!rc)
        rc = ph_os_publish(*wfd, tmp, wpath, 1);
    if (rc) {
        if (tmp[0])
            unlink(tmp);
        close(*wfd);
        *wfd = -1;
        return ph_err(rc, "cannot make the working copy %s: %s", wpath, pheap_errmsg());
    }
    return 0;
}

/* Copies a working copy a crash left into the heap file (a checkpoint of
 * every page that differs) and removes it: an open at another level. */
static int absorb(int dfd, const char *dpath, const char *wpath, int wfd)
{
    uint64_t size;
    int rc = ph_os_file_size(wfd, wpath, &size);
    if (rc)
        return rc;
    char *map = size ? mmap(NULL, size, PROT_READ, MAP_SHARED, wfd, 0) : NULL;
    if (size && map == MAP_FAILED)
        return ph_err(PHEAP_EIO, "cannot map the working copy %s", wpath);
    ph_ckpt *k = NULL;
    uint8_t uuid[16];
    memcpy(uuid, map + offsetof(ph_header, uuid), 16);
    rc = ph_ckpt_create(&k, dfd, dpath, uuid, map, map, size, size, &size);
    if (!rc) {
        k->wfd = wfd;
        rc = ph_ckpt_take(k, 1);
    }
    ph_ckpt_destroy(k);
    if (size)
        munmap(map, size);
    if (rc)
        return ph_err(rc, "%s: the working copy %s a crash left could not be copied into it "
                      "(%s); it stays", dpath, wpath, pheap_errmsg());
    unlink(wpath);
    return 0;
}

int ph_tier_open(pheap *h, const struct ph_config *cfg)
{
    if (h->flags & PHEAP_SIMULATE)
        return 0;
    int rc = ph_ckpt_replay(h->sp.fd, h->path, !h->readonly);
    if (rc || h->readonly)
        return rc; /* a read-only open or a snapshot reads the file: the last checkpoint */
    int checkpoint = cfg->durability == PHEAP_DURABILITY_CHECKPOINT;
    uint32_t consistency = 0;
    if (ph_os_pread(h->sp.fd, &consistency, sizeof(consistency),
                    offsetof(ph_header, consistency)) != (ssize_t)sizeof(consistency))
        consistency = 0; /* not a heap: read_header says so */
    const char *why = !checkpoint ? NULL
                      : ph_os_file_on_dax(h->sp.fd)
                          ? "is for files not on DAX (this one takes cache-line flushes)"
                      : consistency == PH_CONSISTENCY_GC
                          ? "is for LOG heaps (a GC heap's fast path marks no page it changes)"
                          : NULL;
    if (why && cfg->durability_env)
        checkpoint = 0; /* the environment's default gives way */
    else if (why)
        return ph_err(PHEAP_EINVAL, "%s: the checkpoint durability level %s", h->path, why);
    char *wpath = working_copy_path(h->sp.fd, checkpoint, &rc);
    if (!wpath) /* at another level: no working-copy directory, or none of ours */
        return checkpoint ? rc : 0;
    int wfd = open(wpath, O_RDWR | O_CLOEXEC);
    if (wfd >= 0 && !same_heap(wfd, h->sp.fd)) { /* another heap's, on a reused inode */
        close(wfd);
        wfd = -1;
    }
    if (!checkpoint) {
        rc = wfd >= 0 ? absorb(h->sp.fd, h->path, wpath, wfd) : 0;
        if (wfd >= 0)
            close(wfd);
        free(wpath);
        return rc;
    }
    struct ph_tier *t = calloc(1, sizeof(*t));
    if (!t) {
        if (wfd >= 0)
            close(wfd);
        free(wpath);
        return ph_err(PHEAP_ENOMEM, "out of memory");
    }
    t->from_working_copy = wfd >= 0;
    if (wfd < 0) {
        rc = make_working_copy(h->sp.fd, h->path, wpath, &wfd);
        t->created = rc == 0;
    }
    t->dfd = h->sp.fd;
    t->wpath = wpath;
    t->ms = cfg->checkpoint_ms;
    t->ckpt = NULL;
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->cv, NULL);
    h->tier = t;
    if (rc)
        return rc;
    h->sp.fd = wfd; /* the heap maps, grows and punches the working copy */
    ph_gate_use();
    return 0;
}

int ph_tier_attach(pheap *h)
{
    struct ph_tier *t = h->tier;
    int rc = ph_ckpt_create(&t->ckpt, t->dfd, h->path, h->hdr.uuid, h->sp.base, h->sp.view,
                            h->sp.reserve, h->sp.data_off, &h->sp.xsize);
    if (rc)
        return rc;
    t->ckpt->compare_all = t->from_working_copy;
    t->ckpt->wfd = h->sp.fd;
    h->sp.persist.ckpt = t->ckpt;
    return 0;
}

static void *auto_thread(void *arg)
{
    pheap *h = arg;
    struct ph_tier *t = h->tier;
    pthread_mutex_lock(&t->lock);
    while (!t->stopping) {
        struct timespec at;
        clock_gettime(CLOCK_MONOTONIC, &at);
        uint64_t ns = (uint64_t)at.tv_nsec + (uint64_t)t->ms * 1000000u;
        at.tv_sec += (time_t)(ns / 1000000000u);
        at.tv_nsec = (long)(ns % 1000000000u);
        while (!t->stopping && pthread_cond_timedwait(&t->cv, &t->lock, &at) == 0)
            ;
        if (t->stopping)
            break;
        pthread_mutex_unlock(&t->lock);
        if (ph_ckpt_take(t->ckpt, 0) != 0)
            ph_store_relaxed(&t->xerrors, t->xerrors + 1);
        pthread_mutex_lock(&t->lock);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

int ph_tier_start(pheap *h)
{
    struct ph_tier *t = h->tier;
    if (!t || !t->ms)
        return 0;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_destroy(&t->cv);
    pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&t->thread, NULL, auto_thread, h) != 0)
        return ph_err(PHEAP_ENOMEM, "%s: cannot start the thread of automatic checkpoints",
                      h->path);
    t->thread_running = 1;
    return 0;
}

static void stop_thread(struct ph_tier *t)
{
    if (!t->thread_running)
        return;
    pthread_mutex_lock(&t->lock);
    t->stopping = 1;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->lock);
    int suspended = ph_gate_suspend(); /* its checkpoint may be waiting for this call */
    pthread_join(t->thread, NULL);
    ph_gate_resume(suspended);
    t->thread_running = 0;
}

int ph_tier_close(pheap *h)
{
    struct ph_tier *t = h->tier;
    if (!t || !t->ckpt)
        return 0;
    stop_thread(t);
    int rc = ph_ckpt_take(t->ckpt, 1); /* and what the program stored without a flush */
    if (rc)
        return ph_err(rc, "%s: the last checkpoint failed (%s); the working copy %s keeps "
                      "everything, and the next open resumes from it", h->path, pheap_errmsg(),
                      t->wpath);
    unlink(t->wpath); /* the file holds it all now: the memory goes back */
    return 0;
}

void ph_tier_release(pheap *h, int inherited, int failed_open)
{
    struct ph_tier *t = h->tier;
    if (!t)
        return;
    if (!inherited)
        stop_thread(t); /* a fork child has no such thread */
    else
        t->thread_running = 0;
    if (failed_open && t->created && !inherited)
        unlink(t->wpath); /* a copy of the file, nothing more */
    if (t->dfd != h->sp.fd && t->dfd >= 0)
        close(t->dfd);
    h->sp.persist.ckpt = NULL;
    ph_ckpt_destroy(t->ckpt);
    if (!inherited) {
        pthread_mutex_destroy(&t->lock);
        pthread_cond_destroy(&t->cv);
    }
    free(t->wpath);
    free(t);
    h->tier = NULL;
}

int ph_tier_file(const pheap *h)
{
    return h->tier ? h->tier->dfd : h->sp.fd;
}

void ph_tier_stats(pheap *h, struct pheap_stats *out)
{
    struct ph_tier *t = h->tier;
    out->durability = t ? PHEAP_DURABILITY_CHECKPOINT : PHEAP_DURABILITY_SYNC;
    if (!t || !t->ckpt)
        return;
    out->from_working_copy = t->from_working_copy;
    out->checkpoints = ph_load_relaxed(&t->ckpt->xcheckpoints);
    out->checkpoint_bytes = ph_load_relaxed(&t->ckpt->xbytes);
    out->checkpoint_last_pages = ph_load_relaxed(&t->ckpt->xlast_pages);
    out->checkpoint_last_pause_ns = ph_load_relaxed(&t->ckpt->xlast_pause_ns);
    out->checkpoint_last_ns = ph_load_relaxed(&t->ckpt->xlast_ns);
    out->checkpoint_errors = ph_load_relaxed(&t->xerrors);
}

ph_export int pheap_checkpoint(pheap *h)
{
    PH_WINDOW();
    if (!h)
        return ph_err(PHEAP_EINVAL, "pheap_checkpoint: heap is NULL");
    if (ph_heap_inherited(h))
        return ph_heap_forked("pheap_checkpoint");
    if (!h->tier || !h->tier->ckpt)
        return 0;
    if (ph_gate_depth() > 1)
        return ph_err(PHEAP_EBUSY, "pheap_checkpoint: called inside a call of pheap's (an "
                      "initialiser or a filter), which the checkpoint would wait for");
    return ph_ckpt_take(h->tier->ckpt, 0);
}

ph_export int pheap_checkpoint_info_get(const char *path, pheap_checkpoint_info *out)
{
    if (!path || !out)
        return ph_err(PHEAP_EINVAL, "pheap_checkpoint_info_get: NULL argument");
    memset(out, 0, sizeof(*out));
    char file[4096];
    int rc = pheap_path(path, file, sizeof(file)), dfd = -1;
    if (!rc)
        rc = ph_os_open(file, 1, &dfd);
    if (rc)
        return rc;
    char *wpath = working_copy_path(dfd, 0, &rc);
    if (!wpath && rc != PHEAP_ENOENT) {
        close(dfd);
        return rc;
    }
    if (wpath)
        snprintf(out->working_copy_path, sizeof(out->working_copy_path), "%s", wpath);
    int wfd = wpath ? open(wpath, O_RDONLY | O_CLOEXEC) : -1;
    out->working_copy = wfd >= 0 && same_heap(wfd, dfd);
    if (wfd >= 0)
        close(wfd);
    unsigned state = ph_ckpt_journal_state(dfd, file, &out->checkpoints);
    out->journal = state == PH_CKPT_COMMITTED ? PHEAP_JOURNAL_COMMITTED
                   : state == PH_CKPT_APPLIED ? PHEAP_JOURNAL_APPLIED
                                              : PHEAP_JOURNAL_NONE;
    free(wpath);
    close(dfd);
    return 0;
}
