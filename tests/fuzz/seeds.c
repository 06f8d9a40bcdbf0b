/*
 * seeds.c -- the seed heap images of the fuzz target: valid heaps of both
 * consistency modes holding slabs, large blocks, roots, names and
 * transactions, closed cleanly, crashed with a transaction in flight, and
 * crash-simulator images taken at fences of the workload and of a recovery.
 * Every image is made through the crash simulator from a base whose uuid
 * and times are fixed, so the same bytes come out in every run.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"
#include "format/layout.h"
#include "pheap.h"
#include "util/crc32c.h"

#define SEED_SIZE (1u << 20)        /* data bytes at creation */
#define SEED_MAX_SIZE (8u << 20)    /* room to grow */
#define SEEDS_MAX 24

static ph_fuzz_image seeds[SEEDS_MAX];
static unsigned nseeds;

/* Removes the directory `path` and the files in it. */
static void remove_dir(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    char file[512];
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
            unlink(file);
        }
    if (d)
        closedir(d);
    rmdir(path);
}

static char fuzz_dir[256];

static void remove_fuzz_dir(void)
{
    remove_dir(fuzz_dir);
}

/* Directories of processes that died without removing theirs (a crash the
 * fuzzer found): removed, so that runs never fill the file system. */
static void remove_stale_dirs(const char *base)
{
    DIR *d = opendir(base);
    struct dirent *e;
    char path[512];
    while (d && (e = readdir(d))) {
        int pid;
        if (sscanf(e->d_name, "pheap-fuzz-%d", &pid) != 1 || pid <= 0 || pid == (int)getpid())
            continue;
        if (kill(pid, 0) != 0 && errno == ESRCH) {
            snprintf(path, sizeof(path), "%s/%s", base, e->d_name);
            remove_dir(path);
        }
    }
    if (d)
        closedir(d);
}

const char *ph_fuzz_dir(void)
{
    if (!fuzz_dir[0]) {
        struct stat st;
        const char *base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
        remove_stale_dirs(base);
        snprintf(fuzz_dir, sizeof(fuzz_dir), "%s/pheap-fuzz-%d", base, (int)getpid());
        mkdir(fuzz_dir, 0700);
        atexit(remove_fuzz_dir);
    }
    return fuzz_dir;
}

static void seed_path(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", ph_fuzz_dir(), name);
}

/* Reads the file at `path` into *img, keeping its pages that are not zero. */
static int capture(const char *path, const char *what, ph_fuzz_image *img)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return -1;
    }
    uint64_t n = ((uint64_t)st.st_size + PH_PAGE_SIZE - 1) / PH_PAGE_SIZE;
    img->what = what;
    img->len = (uint64_t)st.st_size;
    img->page_no = malloc((n ? n : 1) * sizeof(uint64_t));
    img->pages = malloc((n ? n : 1) * PH_PAGE_SIZE);
    img->npages = 0;
    static const uint8_t zero[PH_PAGE_SIZE];
    for (uint64_t i = 0; i < n && img->pages; i++) {
        uint8_t *p = img->pages + img->npages * PH_PAGE_SIZE;
        memset(p, 0, PH_PAGE_SIZE);
        if (pread(fd, p, PH_PAGE_SIZE, (off_t)(i * PH_PAGE_SIZE)) < 0)
            break;
        if (memcmp(p, zero, PH_PAGE_SIZE) != 0)
            img->page_no[img->npages++] = i;
    }
    close(fd);
    return img->pages && img->page_no ? 0 : -1;
}

/* Fixes what creation leaves to chance (uuid, times) in the file at `path`. */
static int make_deterministic(const char *path)
{
    int fd = open(path, O_RDWR);
    if (fd < 0)
        return -1;
    uint8_t page[PH_PAGE_SIZE];
    int rc = -1;
    if (pread(fd, page, sizeof(page), 0) == (ssize_t)sizeof(page)) {
        ph_header *hdr = (ph_header *)page;
        for (unsigned i = 0; i < sizeof(hdr->uuid); i++)
            hdr->uuid[i] = (uint8_t)(0x5a + 17 * i);
        hdr->create_time_ns = 1700000000ull * 1000000000ull;
        hdr->checksum = ph_crc32c(0, hdr, offsetof(ph_header, checksum));
        ph_state *s = (ph_state *)(page + PH_STATE_OFFSET);
        s->xlast_open = 0;
        if (pwrite(fd, page, sizeof(page), 0) == (ssize_t)sizeof(page))
            rc = 0;
    }
    close(fd);
    return rc;
}

static int copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int rc = in >= 0 && out >= 0 ? 0 : -1;
    struct stat st;
    if (!rc && fstat(in, &st) == 0 && ftruncate(out, st.st_size) == 0) {
        static uint8_t buf[1 << 16];
        static const uint8_t zero[1 << 16];
        for (off_t o = 0; o < st.st_size && !rc; o += (off_t)sizeof(buf)) {
            ssize_t n = pread(in, buf, sizeof(buf), o);
            if (n < 0)
                rc = -1;
            else if (memcmp(buf, zero, (size_t)n) != 0 && pwrite(out, buf, (size_t)n, o) != n)
                rc = -1;
        }
    } else {
        rc = -1;
    }
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    return rc;
}

/* The workload every seed is a point of: slabs of several classes, large
 * blocks, links between blocks (GC tracing follows them), roots, names,
 * alloc_to / free_from, frees; in LOG mode transactions, one of them
 * overflowing its lane's log; `open_tx` leaves one more open at the end. */
static void workload(pheap *h, int gc, int open_tx)
{
    static const size_t sizes[] = {8, 24, 100, 500, 3000, 16000, 20000, 70000, 200000};
    pheap_off list = pheap_alloc(h, 512);
    if (!list)
        return;
    pheap_off *slot = pheap_direct(h, list);
    memset(slot, 0, 512);
    pheap_persist(h, slot, 512);
    pheap_root_set(h, "list", list);
    for (unsigned i = 0; i < 36; i++) {
        pheap_off b = pheap_alloc(h, sizes[i % 9]);
        if (!b)
            continue;
        memset(pheap_direct(h, b), (int)i, sizes[i % 9] < 64 ? sizes[i % 9] : 64);
        slot[i] = b;
        pheap_persist(h, &slot[i], 8);
    }
    pheap_root_set(h, "second", slot[3]);
    for (unsigned i = 0; i < 36; i += 5) { /* holes in slabs and between extents */
        pheap_free(h, slot[i]);
        slot[i] = 0;
        pheap_persist(h, &slot[i], 8);
    }
    pheap_alloc_to(h, 48, &slot[40]);
    pheap_alloc_to(h, 30000, &slot[41]);
    pheap_persist(h, &slot[40], 16);
    pheap_free_from(h, &slot[6]);
    pheap_persist(h, &slot[6], 8);
    char name[32];
    for (unsigned i = 0; i < 12; i++) {
        snprintf(name, sizeof(name), "object-%u", i);
        pheap_alloc_named(h, name, 16 + 40 * i);
    }
    pheap_free_named(h, "object-3");
    pheap_free_named(h, "object-8");
    if (!gc) {
        pheap_tx_begin(h);
        pheap_off t = pheap_tx_alloc(h, 256);
        pheap_tx_add(h, &slot[1], 16);
        slot[1] = t;
        pheap_tx_write(h, &slot[50], &t, 8);
        pheap_tx_free(h, slot[2]);
        pheap_tx_commit(h);
        pheap_tx_begin(h); /* a log past its lane's 2 KiB: an overflow segment */
        for (unsigned i = 0; i < 40; i++) {
            uint64_t v[8] = {i, i + 1, i + 2, i + 3, i + 4, i + 5, i + 6, i + 7};
            pheap_tx_write(h, (char *)slot + (i % 8) * 64, v, sizeof(v));
        }
        pheap_tx_commit(h);
        if (open_tx) {
            pheap_tx_begin(h);
            pheap_tx_add(h, &slot[4], 64);
            memset(&slot[4], 0xab, 64);
            pheap_off u = pheap_tx_alloc(h, 5000);
            pheap_tx_write(h, &slot[60], &u, 8);
            pheap_tx_free(h, slot[7]);
        }
    } else {
        pheap_persist(h, slot, 512);
    }
}

static int add_seed(const char *path, const char *what)
{
    if (nseeds >= SEEDS_MAX || capture(path, what, &seeds[nseeds]) != 0)
        return -1;
    nseeds++;
    return 0;
}

/* Runs the workload on a simulated copy of `base`: crash image at `fence`
 * (0: the end; then closed cleanly unless `crash`), into a seed. */
static int run_seed(const char *base, int gc, const char *what, uint64_t fence, int crash,
                    unsigned sim_mode, double evict, uint64_t seed, uint64_t *fences)
{
    char work[300], image[300];
    seed_path(work, sizeof(work), "seed-work.heap");
    seed_path(image, sizeof(image), "seed-image.heap");
    unlink(image);
    if (copy_file(base, work) != 0)
        return -1;
    pheap_options o = {.flags = PHEAP_SIMULATE, .sim_mode = sim_mode, .sim_seed = seed,
                       .sim_evict_probability = evict};
    if (fence) {
        o.sim_crash_fence = fence;
        o.sim_crash_image = image;
    }
    pheap *h = NULL;
    if (pheap_open(work, &o, &h) != 0)
        return -1;
    workload(h, gc, 1);
    if (fences)
        *fences = pheap_sim_fence_count(h);
    if (fence)
        pheap_sim_crash(h, NULL, 0, 0);
    else if (crash)
        pheap_sim_crash(h, image, seed, evict);
    else if (pheap_close(h) != 0 || rename(work, image) != 0)
        return -1;
    return what ? add_seed(image, what) : 0;
}

/* A crash inside the recovery of the image at `from`, at its fence `fence`. */
static int recovery_seed(const char *from, const char *what, uint64_t fence)
{
    char work[300], image[300];
    seed_path(work, sizeof(work), "seed-rwork.heap");
    seed_path(image, sizeof(image), "seed-rimage.heap");
    unlink(image);
    if (copy_file(from, work) != 0)
        return -1;
    pheap_options o = {.flags = PHEAP_SIMULATE, .sim_crash_fence = fence,
                       .sim_crash_image = image, .sim_mode = PHEAP_SIM_WORDS,
                       .sim_evict_probability = 0.5, .sim_seed = fence};
    pheap *h = NULL;
    if (pheap_open(work, &o, &h) != 0)
        return -1;
    pheap_recover(h);
    pheap_sim_crash(h, NULL, 0, 0);
    return access(image, F_OK) == 0 ? add_seed(image, what) : 0;
}

static int make_base(const char *path, unsigned consistency)
{
    unlink(path);
    pheap_options o = {.size = SEED_SIZE, .max_size = SEED_MAX_SIZE,
                       .flags = PHEAP_CREATE | PHEAP_EXCL, .flush = PHEAP_FLUSH_NONE,
                       .consistency = consistency};
    pheap *h = NULL;
    if (pheap_open(path, &o, &h) != 0 || pheap_close(h) != 0)
        return -1;
    return make_deterministic(path);
}

static int make_seeds(void)
{
    char base[2][300], crashed[300];
    seed_path(base[0], sizeof(base[0]), "seed-base-log.heap");
    seed_path(base[1], sizeof(base[1]), "seed-base-gc.heap");
    if (make_base(base[0], PHEAP_CONSISTENCY_LOG) || make_base(base[1], PHEAP_CONSISTENCY_GC))
        return -1;
    if (add_seed(base[0], "LOG, empty"))
        return -1;
    static const char *clean_what[2] = {"LOG, workload, closed cleanly", "GC, workload, closed cleanly"};
    static const char *crash_what[2] = {"LOG, workload, crashed with a transaction open",
                                        "GC, workload, crashed (needs recovery)"};
    static const char *fence_what[2][6] = {
        {"LOG, crash at fence 1/7", "LOG, crash at fence 2/7 (words)", "LOG, crash at fence 3/7",
         "LOG, crash at fence 4/7 (words, NT lag)", "LOG, crash at fence 5/7", "LOG, crash at fence 6/7 (words)"},
        {"GC, crash at fence 1/7", "GC, crash at fence 2/7 (words)", "GC, crash at fence 3/7",
         "GC, crash at fence 4/7 (words, NT lag)", "GC, crash at fence 5/7", "GC, crash at fence 6/7 (words)"}};
    for (int gc = 0; gc < 2; gc++) {
        uint64_t fences = 0;
        if (run_seed(base[gc], gc, clean_what[gc], 0, 0, 0, 0, 0, &fences) ||
            run_seed(base[gc], gc, crash_what[gc], 0, 1, PHEAP_SIM_WORDS, 0.5, 7 + gc, NULL))
            return -1;
        for (unsigned i = 0; i < 6 && fences > 7; i++) {
            unsigned mode = i % 2 ? PHEAP_SIM_WORDS : 0;
            if (i == 3)
                mode |= PHEAP_SIM_NT_LAG;
            if (run_seed(base[gc], gc, fence_what[gc][i], fences * (i + 1) / 7, 1, mode, 0.3,
                         100 + i, NULL))
                return -1;
        }
    }
    /* Crashes inside the recovery of the LOG image with a transaction open. */
    seed_path(crashed, sizeof(crashed), "seed-crashed.heap");
    if (run_seed(base[0], 0, NULL, 0, 1, PHEAP_SIM_WORDS, 0.5, 7, NULL))
        return -1;
    char image[300];
    seed_path(image, sizeof(image), "seed-image.heap");
    if (rename(image, crashed) != 0 || recovery_seed(crashed, "LOG, crash inside recovery, fence 2", 2) ||
        recovery_seed(crashed, "LOG, crash inside recovery, fence 5", 5))
        return -1;
    return 0;
}

unsigned ph_fuzz_seeds(const ph_fuzz_image **out)
{
    static int made;
    if (!made) {
        made = 1;
        if (make_seeds() != 0) {
            fprintf(stderr, "fuzz: cannot make the seed images: %s\n", pheap_errmsg());
            nseeds = 0;
        }
        remove_dir(ph_fuzz_dir()); /* the seeds are in memory now */
        mkdir(ph_fuzz_dir(), 0700);
    }
    *out = seeds;
    return nseeds;
}
