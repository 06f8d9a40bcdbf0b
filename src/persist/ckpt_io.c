/*
 * ckpt_io.c -- the file operations of a checkpoint and its replay
 * (ckpt_io.h), and the page-cache crash model of tests (ckpt.h).
 */
#include "persist/ckpt_io.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/layout.h"
#include "os/os.h"
#include "persist/ckpt.h"
#include "persist/sim.h"
#include "util/util.h"

#define PAGE PH_PAGE_SIZE

/* ---- the file operations, and the page-cache crash model of tests ----
 * Every write, sync, length change, reservation and punch of a checkpoint
 * or a replay goes through here.  Two files take part: the heap file
 * (PH_CKPT_F_HEAP) and the journal (PH_CKPT_F_JOURNAL). */
typedef struct model_file {
    char *synced;             /* contents as of the last sync */
    uint64_t synced_size;
    uint64_t *written;        /* bit per page: written, resized or punched since */
    uint64_t written_pages;   /* capacity of written[] in pages */
} model_file;

static struct {
    pthread_mutex_t lock;
    uint64_t op;              /* crash just before this operation; 0: off */
    uint64_t count;           /* operations so far */
    uint64_t seed;
    double evict;
    char *image;
    int armed;                /* the model follows the files of the run in progress */
    int fd[PH_CKPT_F_COUNT];
    model_file f[PH_CKPT_F_COUNT];
} model = {.lock = PTHREAD_MUTEX_INITIALIZER, .fd = {-1, -1}};

static void model_forget(void)
{
    for (unsigned i = 0; i < PH_CKPT_F_COUNT; i++) {
        free(model.f[i].synced);
        free(model.f[i].written);
        model.f[i] = (model_file){0};
        model.fd[i] = -1;
    }
    model.armed = 0;
}

void ph_ckpt_test_crash(uint64_t op, uint64_t seed, double evict, const char *image)
{
    pthread_mutex_lock(&model.lock);
    model_forget();
    free(model.image);
    model.image = image ? strdup(image) : NULL;
    model.op = image ? op : 0;
    model.count = 0;
    model.seed = seed;
    model.evict = evict;
    pthread_mutex_unlock(&model.lock);
}

uint64_t ph_ckpt_test_ops(void)
{
    pthread_mutex_lock(&model.lock);
    uint64_t n = model.count;
    pthread_mutex_unlock(&model.lock);
    return n;
}

static int read_all(int fd, char **buf, uint64_t *size)
{
    *buf = NULL;
    *size = 0;
    if (fd < 0)
        return 0;
    uint64_t n;
    if (ph_os_file_size(fd, "checkpoint model", &n) != 0)
        return -1;
    if (!(*buf = calloc(1, n ? n : 1)))
        return -1;
    if (n && ph_os_pread(fd, *buf, n, 0) != (ssize_t)n)
        return -1;
    *size = n;
    return 0;
}

static void model_note(unsigned f, uint64_t off, uint64_t len)
{
    model_file *m = &model.f[f];
    if (!len)
        return;
    uint64_t last = (off + len - 1) / PAGE;
    if (last >= m->written_pages) {
        uint64_t cap = PH_MAX(last + 1, m->written_pages * 2);
        uint64_t *w = realloc(m->written, (cap + 63) / 64 * 8);
        if (!w)
            return;
        memset(w + (m->written_pages + 63) / 64, 0,
               ((cap + 63) / 64 - (m->written_pages + 63) / 64) * 8);
        m->written = w;
        m->written_pages = cap;
    }
    for (uint64_t pg = off / PAGE; pg <= last; pg++)
        m->written[pg / 64] |= 1ull << (pg % 64);
}

/* One file of the image: its synced contents, plus each page written
 * since with probability evict, at the old or the new length. */
static int model_image_file(unsigned f, const char *path, uint64_t salt)
{
    model_file *m = &model.f[f];
    uint64_t cur = 0;
    if (model.fd[f] >= 0 && ph_os_file_size(model.fd[f], path, &cur) != 0)
        return -1;
    uint64_t size = cur;
    if (cur != m->synced_size && !ph_sim_evicts(model.seed ^ salt, ~0ull, model.evict))
        size = m->synced_size;
    char *img = calloc(1, size ? size : 1);
    if (!img)
        return -1;
    memcpy(img, m->synced, PH_MIN(size, m->synced_size));
    for (uint64_t pg = 0; pg < m->written_pages && pg * PAGE < size; pg++) {
        if (!(m->written[pg / 64] >> (pg % 64) & 1))
            continue;
        if (!ph_sim_evicts(model.seed ^ salt, pg, model.evict))
            continue;
        uint64_t len = PH_MIN((uint64_t)PAGE, size - pg * PAGE);
        memset(img + pg * PAGE, 0, len);
        if (pg * PAGE < cur)
            (void)ph_os_pread(model.fd[f], img + pg * PAGE, PH_MIN(len, cur - pg * PAGE), pg * PAGE);
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int rc = fd < 0 || ph_os_pwrite(fd, img, size, 0) != 0 ? -1 : 0;
    if (fd >= 0)
        close(fd);
    free(img);
    return rc;
}

static void model_crash(void)
{
    size_t n = strlen(model.image);
    char *jimage = malloc(n + 6);
    if (!jimage)
        return;
    memcpy(jimage, model.image, n);
    memcpy(jimage + n, ".ckpt", 6);
    (void)model_image_file(PH_CKPT_F_HEAP, model.image, 0x48454150u);
    (void)model_image_file(PH_CKPT_F_JOURNAL, jimage, 0x4a524e4cu);
    free(jimage);
}

/* The start of a checkpoint or replay: what the files hold now is taken
 * as durable (the last run synced it). */
void ph_ckpt_io_begin(int dfd, int jfd)
{
    pthread_mutex_lock(&model.lock);
    if (model.op && model.count < model.op) {
        model_forget();
        model.fd[PH_CKPT_F_HEAP] = dfd;
        model.fd[PH_CKPT_F_JOURNAL] = jfd;
        model.armed = read_all(dfd, &model.f[PH_CKPT_F_HEAP].synced, &model.f[PH_CKPT_F_HEAP].synced_size) == 0 &&
                      read_all(jfd, &model.f[PH_CKPT_F_JOURNAL].synced,
                               &model.f[PH_CKPT_F_JOURNAL].synced_size) == 0;
    }
    pthread_mutex_unlock(&model.lock);
}

/* Counts an operation on file f (at [off, off+len)); crashes before it
 * when it is the one. */
static void io_op(unsigned f, int fd, uint64_t off, uint64_t len, int sync)
{
    if (!ph_load_relaxed(&model.op))
        return;
    pthread_mutex_lock(&model.lock);
    model.count++;
    if (model.armed && model.fd[f] < 0)
        model.fd[f] = fd; /* the journal, created by this run */
    if (model.armed && model.count == model.op) {
        model_crash();
        model_forget();
    }
    if (model.armed) {
        if (sync) {
            free(model.f[f].synced);
            if (read_all(fd, &model.f[f].synced, &model.f[f].synced_size) != 0)
                model.armed = 0;
            memset(model.f[f].written, 0, (model.f[f].written_pages + 63) / 64 * 8);
        } else {
            model_note(f, off, len);
        }
    }
    pthread_mutex_unlock(&model.lock);
}

int ph_ckpt_io_write(unsigned f, int fd, const void *buf, uint64_t len, uint64_t off)
{
    io_op(f, fd, off, len, 0);
    return ph_os_pwrite(fd, buf, len, off);
}

int ph_ckpt_io_sync(unsigned f, int fd)
{
    io_op(f, fd, 0, 0, 1);
    return ph_os_datasync(fd);
}

/* The heap file's length up to `size` (never shorter) and its pages of
 * [off, off+len) reserved. */
int ph_ckpt_io_resize(int fd, const char *path, uint64_t size)
{
    uint64_t cur;
    int rc = ph_os_file_size(fd, path, &cur);
    if (rc || cur >= size)
        return rc;
    io_op(PH_CKPT_F_HEAP, fd, cur, size - cur, 0);
    return ph_os_resize(fd, path, size);
}

int ph_ckpt_io_allocate(int fd, const char *path, uint64_t off, uint64_t len)
{
    io_op(PH_CKPT_F_HEAP, fd, off, 0, 0); /* reserves, changes no contents */
    return ph_os_allocate(fd, path, off, len);
}

int ph_ckpt_io_punch(int fd, uint64_t off, uint64_t len)
{
    io_op(PH_CKPT_F_HEAP, fd, off, len, 0);
    return ph_os_punch_hole(fd, off, len);
}
