/*
 * harness.c -- test registry, failure reporting, temporary files.
 */
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "format/header.h"
#include "format/layout.h"
#include "util/util.h"

#define MAX_TESTS 512

static struct {
    const char *name;
    ph_test_fn fn;
} tests[MAX_TESTS];
static int ntests;
int ph_test_failed;
static char tmpdir[256];

void ph_test_register(const char *name, ph_test_fn fn)
{
    if (ntests < MAX_TESTS)
        tests[ntests++] = (typeof(tests[0])){name, fn};
}

void ph_test_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "  %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    ph_test_failed++;
}

/* Removes the directories of test programs that died without their exit
 * handler (a crash, a timeout's SIGKILL): pheap-test-PID-* in `base` whose
 * process no longer exists.  Left alone, they fill tmpfs, which is memory. */
static void sweep_stale_dirs(const char *base)
{
    DIR *d = opendir(base);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        long pid;
        char cmd[600];
        if (sscanf(de->d_name, "pheap-test-%ld-", &pid) != 1 || pid <= 0 ||
            kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        snprintf(cmd, sizeof(cmd), "rm -rf '%s/%s'", base, de->d_name);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot remove %s/%s\n", base, de->d_name);
    }
    if (d)
        closedir(d);
}

const char *ph_test_dir(void)
{
    if (!tmpdir[0]) {
        /* tmpfs when there is one: crash tests write and sync thousands of
         * images, which a disk makes several times slower. */
        const char *base = getenv("PHEAP_TEST_DIR");
        if (!base)
            base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        sweep_stale_dirs(base);
        snprintf(tmpdir, sizeof(tmpdir), "%s/pheap-test-%ld-XXXXXX", base, (long)getpid());
        if (!mkdtemp(tmpdir)) {
            perror("mkdtemp");
            exit(2);
        }
        chmod(tmpdir, 0755);
        /* Working copies of heaps at the checkpoint level go with the
         * directory, not into the user's /dev/shm/pheap-UID. */
        char work[sizeof(tmpdir) + 8];
        snprintf(work, sizeof(work), "%s/work", tmpdir);
        if (!getenv("PHEAP_WORKDIR") && mkdir(work, 0700) == 0)
            setenv("PHEAP_WORKDIR", work, 1);
    }
    return tmpdir;
}

const char *ph_test_path(const char *name)
{
    static char buf[8][512];
    static int next;
    char *p = buf[next++ % 8];
    snprintf(p, sizeof(buf[0]), "%s/%s", ph_test_dir(), name);
    return p;
}

pheap *ph_test_open_at(const char *path, const pheap_options *opts, const char *file, int line)
{
    pheap *h = NULL;
    if (pheap_open(path, opts, &h) != 0) {
        ph_test_fail(file, line, "open %s: %s", path, pheap_errmsg());
        return NULL;
    }
    return h;
}

pheap *ph_test_create_mode(const char *path, uint64_t size, unsigned consistency, unsigned flags)
{
    unlink(path);
    pheap_options o = {.size = size, .flags = PHEAP_CREATE | PHEAP_EXCL | flags,
                       .consistency = consistency};
    pheap *h = NULL;
    if (pheap_open(path, &o, &h) != 0)
        ph_test_fail(__FILE__, __LINE__, "create %s: %s", path, pheap_errmsg());
    return h;
}

pheap *ph_test_create(const char *path, uint64_t size)
{
    return ph_test_create_mode(path, size, PHEAP_CONSISTENCY_LOG, 0);
}

int ph_test_make_names(pheap *h, const char *prefix, unsigned n, size_t size)
{
    char name[PHEAP_NAME_MAX + 1];
    for (unsigned i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "%s%u", prefix, i);
        if (!pheap_alloc_named(h, name, size)) {
            ph_test_fail(__FILE__, __LINE__, "name %s: %s", name, pheap_errmsg());
            return -1;
        }
    }
    return 0;
}

static uint64_t pattern_next(uint64_t x)
{
    return x * 6364136223846793005ull + 1442695040888963407ull;
}

uint64_t ph_test_rand(uint64_t *state)
{
    uint64_t r = ph_mix64(*state); /* mixes state + the golden step */
    *state += 0x9e3779b97f4a7c15ull;
    return r;
}

void ph_test_fill(void *dst, size_t n, uint64_t seed)
{
    unsigned char *p = dst;
    uint64_t x = seed;
    size_t i = 0;
    for (; i + 8 <= n; i += 8, x = pattern_next(x))
        memcpy(p + i, &x, 8);
    for (; i < n; i++)
        p[i] = (unsigned char)(x >> (8 * (i & 7)));
}

uint64_t ph_test_name_seed(const char *name)
{
    uint64_t s = 1469598103934665603ull;
    for (; *name; name++)
        s = (s ^ (unsigned char)*name) * 1099511628211ull;
    return s;
}

int ph_test_intact(const void *src, size_t n, uint64_t seed)
{
    const unsigned char *p = src;
    uint64_t x = seed, w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8, x = pattern_next(x)) {
        memcpy(&w, p + i, 8);
        if (w != x)
            return 0;
    }
    for (; i < n; i++)
        if (p[i] != (unsigned char)(x >> (8 * (i & 7))))
            return 0;
    return 1;
}

int ph_test_copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    char buf[1 << 16];
    ssize_t n;
    int rc = in < 0 || out < 0 ? -1 : 0;
    while (rc == 0 && (n = read(in, buf, sizeof(buf))) > 0)
        rc = write(out, buf, (size_t)n) == n ? 0 : -1;
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    return rc;
}

uint64_t ph_test_region_offset(const char *path, unsigned kind)
{
    ph_header hdr;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = pread(fd, &hdr, sizeof(hdr), 0);
    close(fd);
    if (n != (ssize_t)sizeof(hdr))
        return 0;
    for (unsigned i = 0; i < hdr.nregions && i < PH_REGIONS_MAX; i++)
        if (hdr.regions[i].kind == kind)
            return hdr.regions[i].offset;
    return 0;
}

/* Holders of ph_test_hold: the pid and the pipe that releases it. */
static struct {
    int pid;
    int release;
} holders[8];

int ph_test_hold(const char *path, unsigned flags)
{
    int ready[2], done[2];
    if (pipe(ready) != 0)
        return -1;
    if (pipe(done) != 0) {
        close(ready[0]);
        close(ready[1]);
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* only the parent may hold write ends of release pipes, or the
         * read below would never see the end of its pipe */
        close(ready[0]);
        close(done[1]);
        for (unsigned i = 0; i < PH_ARRAY_LEN(holders); i++)
            if (holders[i].pid)
                close(holders[i].release);
        pheap_options o = {.flags = flags};
        pheap *h;
        char c = pheap_open(path, &o, &h) == 0 ? 'y' : 'n';
        if (write(ready[1], &c, 1) != 1 || c != 'y')
            _exit(1);
        if (read(done[0], &c, 1) < 0)
            _exit(1);
        _exit(pheap_close(h) == 0 ? 0 : 1);
    }
    close(ready[1]);
    close(done[0]);
    char c = 'n';
    int ok = pid > 0 && read(ready[0], &c, 1) == 1 && c == 'y';
    close(ready[0]);
    for (unsigned i = 0; ok && i < PH_ARRAY_LEN(holders); i++)
        if (holders[i].pid == 0) {
            holders[i].pid = (int)pid;
            holders[i].release = done[1];
            return (int)pid;
        }
    close(done[1]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    return -1;
}

int ph_test_release(int pid)
{
    for (unsigned i = 0; i < PH_ARRAY_LEN(holders); i++)
        if (holders[i].pid == pid && pid > 0) {
            close(holders[i].release); /* the holder's read returns 0 */
            holders[i].pid = 0;
            int status;
            return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0
                       ? 0
                       : -1;
        }
    return -1;
}

void ph_test_kill(int pid, const char *file, int line)
{
    int status = 0;
    if (pid <= 0) /* never 0: kill(0) would hit the whole process group */
        return;
    kill(pid, SIGKILL);
    if (waitpid(pid, &status, 0) != pid)
        ph_test_fail(file, line, "process %d could not be reaped", pid);
    else if (!WIFSIGNALED(status))
        ph_test_fail(file, line, "process %d exited with %d before it was killed", pid,
                     WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

void ph_test_unchanged(pheap *h, const struct pheap_stats *before, const char *after,
                       const char *file, int line)
{
    pheap_check_report r;
    if (pheap_check(h, &r))
        ph_test_fail(file, line, "after %s: check: %s", after, r.first_error);
    struct pheap_stats st;
    pheap_stats(h, &st);
    if (st.live_blocks != before->live_blocks || st.live_bytes != before->live_bytes)
        ph_test_fail(file, line, "after %s: live %llu blocks / %llu bytes, was %llu / %llu", after,
                     (unsigned long long)st.live_blocks, (unsigned long long)st.live_bytes,
                     (unsigned long long)before->live_blocks, (unsigned long long)before->live_bytes);
}

static void cleanup(void)
{
    if (tmpdir[0] && !getenv("PHEAP_TEST_KEEP")) {
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot remove %s\n", tmpdir);
    }
}

int main(int argc, char **argv)
{
    int passed = 0, failed = 0;
    pid_t me = getpid();
    atexit(cleanup);
    if (getenv("PHEAP_TEST_NEEDS_KEYS")) { /* a run under PHEAP_PROTECT=keys */
        int k = pkey_alloc(0, 0);
        if (k < 0) {
            printf("skipped: no protection keys here\n");
            return 77;
        }
        pkey_free(k);
    }
    for (int i = 0; i < ntests; i++) {
        if (argc > 1 && !strstr(tests[i].name, argv[1]))
            continue;
        ph_test_failed = 0;
        fprintf(stderr, "[ RUN  ] %s\n", tests[i].name);
        tests[i].fn();
        if (getpid() != me)
            _exit(ph_test_failed ? 1 : 0); /* a forked child fell through */
        fprintf(stderr, "[ %s ] %s\n", ph_test_failed ? "FAIL" : " OK ", tests[i].name);
        if (ph_test_failed)
            failed++;
        else
            passed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed || passed == 0 ? 1 : 0;
}

static int cmp_block(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

unsigned ph_test_disjoint(uint64_t (*b)[2], unsigned n)
{
    unsigned bad = 0;
    qsort(b, n, sizeof(b[0]), cmp_block);
    for (unsigned i = 1; i < n; i++) {
        if (b[i - 1][1] > b[i][0]) {
            ph_test_fail(__FILE__, __LINE__, "blocks at %llu and %llu overlap",
                         (unsigned long long)b[i - 1][0], (unsigned long long)b[i][0]);
            bad++;
        }
    }
    return bad;
}

/* ---- a heap left by a crash inside a logged operation ---- */

/* The two logged operations of the workload: a warm-up (makes the slab and
 * takes the lane), then the one the crash interrupts. */
static void two_alloc_tos(pheap *h, uint64_t *before, uint64_t *after)
{
    pheap_off *slots = pheap_direct(h, pheap_root_get(h, "slots"));
    if (!slots || pheap_alloc_to(h, 64, &slots[0]) != 0)
        ph_test_fail(__FILE__, __LINE__, "warm-up alloc_to: %s", pheap_errmsg());
    *before = pheap_sim_fence_count(h);
    if (pheap_alloc_to(h, 64, &slots[1]) != 0)
        ph_test_fail(__FILE__, __LINE__, "alloc_to: %s", pheap_errmsg());
    *after = pheap_sim_fence_count(h);
}

/* A heap image whose last pheap_alloc_to (see harness.h) was cut after its lane entry
 * became durable (F1) and before its changes did (F2): recovery has one
 * operation to roll forward.  *slots_off gets the slot array's offset. */
int ph_test_interrupted_alloc_to(const char *image, pheap_off *slots_off)
{
    const char *base = ph_test_path("snap-base.heap");
    pheap *h = ph_test_create(base, 4u << 20);
    if (!h)
        return -1;
    *slots_off = pheap_alloc(h, 2 * sizeof(pheap_off));
    pheap_off *slots = pheap_direct(h, *slots_off);
    slots[0] = slots[1] = 0;
    pheap_persist(h, slots, 2 * sizeof(pheap_off));
    if (pheap_root_set(h, "slots", *slots_off) != 0 || pheap_close(h) != 0)
        return -1;
    /* Dry run: where the second alloc_to's fences are. */
    const char *work = ph_test_path("snap-work.heap");
    uint64_t before, after;
    pheap_options sim = {.flags = PHEAP_SIMULATE};
    if (ph_test_copy_file(base, work) != 0 || pheap_open(work, &sim, &h) != 0)
        return -1;
    two_alloc_tos(h, &before, &after);
    pheap_sim_crash(h, NULL, 0, 0);
    if (after - before != 3) {
        ph_test_fail(__FILE__, __LINE__, "alloc_to took %llu fences, expected 3", (unsigned long long)(after - before));
        return -1;
    }
    /* Crash just before its second fence: F1 durable, F2 not. */
    sim.sim_crash_fence = before + 2;
    sim.sim_crash_image = image;
    if (ph_test_copy_file(base, work) != 0 || pheap_open(work, &sim, &h) != 0)
        return -1;
    two_alloc_tos(h, &before, &after);
    pheap_sim_crash(h, NULL, 0, 0);
    return access(image, F_OK);
}

void ph_test_drop_procs(ph_header *hdr)
{
    /* 1.8: a heap never shared is 1.7; 1.7: a heap never morphed is 1.6 */
    hdr->feat_incompat &= ~(PH_FEAT_INCOMPAT_MORPH | PH_FEAT_INCOMPAT_SHARED);
    if (!(hdr->feat_incompat & PH_FEAT_INCOMPAT_PROCS) || hdr->nregions < 2)
        return;
    hdr->regions[hdr->nregions - 2] = hdr->regions[hdr->nregions - 1];
    memset(&hdr->regions[--hdr->nregions], 0, sizeof(ph_region));
    hdr->feat_incompat &= ~PH_FEAT_INCOMPAT_PROCS;
    hdr->minor = 5;
}

int ph_test_pin_cpu(int cpu)
{
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    return sched_setaffinity(0, sizeof(one), &one);
}

/* Reads the header of the heap at `path`, lets `edit` change it, writes it
 * back with its checksum: 0, or -1. */
static int rewrite_header(const char *path, void (*edit)(ph_header *hdr))
{
    int fd = open(path, O_RDWR);
    if (fd < 0)
        return -1;
    ph_header hdr;
    int ok = pread(fd, &hdr, sizeof(hdr), 0) == sizeof(hdr);
    edit(&hdr);
    hdr.checksum = ph_header_checksum(&hdr);
    ok = ok && pwrite(fd, &hdr, sizeof(hdr), 0) == sizeof(hdr);
    close(fd);
    return ok ? 0 : -1;
}

static void as_1_7(ph_header *hdr)
{
    hdr->feat_incompat &= ~PH_FEAT_INCOMPAT_SHARED;
    hdr->minor = 7;
}

static void as_1_6(ph_header *hdr)
{
    hdr->feat_incompat &= ~(PH_FEAT_INCOMPAT_MORPH | PH_FEAT_INCOMPAT_SHARED);
    hdr->minor = 6;
}

int ph_test_as_format_1_7(const char *path)
{
    return rewrite_header(path, as_1_7);
}

int ph_test_as_format_1_6(const char *path)
{
    return rewrite_header(path, as_1_6);
}

int ph_test_as_format_1_5(const char *path)
{
    return rewrite_header(path, ph_test_drop_procs);
}

int ph_test_as_format_1_4(const char *path)
{
    int fd = open(path, O_RDWR);
    if (fd < 0)
        return -1;
    ph_header hdr;
    uint64_t zero = 0;
    int ok = pread(fd, &hdr, sizeof(hdr), 0) == sizeof(hdr);
    ph_test_drop_procs(&hdr);
    hdr.minor = 4;
    hdr.feat_ro_compat = 0;
    hdr.owner_uid = 0;
    hdr.checksum = ph_header_checksum(&hdr);
    ok = ok && pwrite(fd, &hdr, sizeof(hdr), 0) == sizeof(hdr) &&
         pwrite(fd, &zero, 8, PH_STATE_OFFSET + offsetof(ph_state, xmode)) == 8;
    close(fd);
    return ok ? 0 : -1;
}
