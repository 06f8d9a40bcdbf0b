/*
 * readme_list.c -- the README's five-minute example under kill -9, exactly
 * as printed: its C block is cut out of README.md, compiled against the
 * library and run again and again, killed at random instants.  After every
 * kill the list must read 0 1 4 9 ... with every node intact, pheap_check
 * must pass and the live blocks must be the nodes and the head (plus one
 * leaked head at most per killed first run: the window the example's
 * comment names).  Once on a fresh heap, once on a heap whose free blocks
 * hold old bytes.  Also: examples/hello_list.c is the same text.
 * PHEAP_README=path runs another README's block (an older one, say).
 */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "readme_common.h"

#define SECTION "## Five minutes with pheap" /* the README section of the example */

typedef struct node { /* as in the README */
    pheap_off next;
    uint64_t value;
} node;

enum { ROUNDS = 120, CALIBRATE = 4 };

TEST(readme_block_is_examples_hello_list)
{
    char *block = readme_block(SECTION);
    char *file = slurp_file(PHEAP_SOURCE_DIR "/examples/hello_list.c");
    REQUIRE(block && file);
    if (strcmp(block, file) != 0)
        ph_test_fail(__FILE__, __LINE__, "README.md's example and examples/hello_list.c differ");
    free(block);
    free(file);
}

/* The heap of a kill loop: in a fresh directory of TMPDIR (default /tmp,
 * where the README puts its heap), not on tmpfs: there msync is a real
 * write-back, as on the reader's machine, and an append spends long enough
 * between its steps for random kills to land inside it. */
static const char *disk_heap(const char *name)
{
    static char path[2][600];
    static int next;
    char dir[512];
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, sizeof(dir), "%s/pheap-readme-XXXXXX", base);
    if (!mkdtemp(dir))
        return ph_test_fail(__FILE__, __LINE__, "mkdtemp %s", dir), NULL;
    char *p = path[next++ % 2];
    snprintf(p, sizeof(path[0]), "%s/%s", dir, name);
    return p;
}

static void disk_heap_remove(const char *path)
{
    unlink(path);
    char dir[600];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        rmdir(dir);
    }
}

/* Runs the example on `heap`, killing it after `delay` seconds (never if
 * negative).  1 if killed, 0 if it finished and said "list: ...", -1 on a
 * failure of the example itself (a crash, an error exit). */
static int run_example(const char *prog, const char *heap, double delay, unsigned round)
{
    const char *out = ph_test_path("readme_list.out");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
            _exit(126);
        execl(prog, prog, heap, (char *)NULL);
        _exit(127);
    }
    if (pid < 0)
        return ph_test_fail(__FILE__, __LINE__, "fork"), -1;
    if (delay >= 0) {
        struct timespec ts = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && delay >= 0)
        return 1;
    char *text = slurp_file(out);
    int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && text && !strncmp(text, "list:", 5);
    if (!ok)
        ph_test_fail(__FILE__, __LINE__, "round %u: the example %s %d; it printed: %s", round,
                     WIFSIGNALED(status) ? "died of signal" : "exited with",
                     WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), text ? text : "");
    free(text);
    return ok ? 0 : -1;
}

typedef struct kill_state {
    const char *heap;
    uint64_t nodes;       /* nodes in the list after the last round */
    uint64_t extra;       /* live blocks the test itself keeps */
    uint64_t leak_budget; /* killed runs that began with no root */
    const uint64_t *old;  /* blocks that held old bytes (sorted), or NULL */
    uint64_t nold, reused;/* how many; nodes found in one of them */
} kill_state;

static int is_old(const kill_state *k, uint64_t off)
{
    size_t lo = 0, hi = k->nold;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (k->old[mid] < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < k->nold && k->old[lo] == off;
}

#define KFAIL(...) (ph_test_fail(__FILE__, __LINE__, __VA_ARGS__), -1)

/* The heap after round `round`: the list 0 1 4 9 ..., one node more than
 * before if the run got through its append (`finished`: it must have). */
static int verify(kill_state *k, unsigned round, int finished, int *has_root)
{
    pheap *h;
    pheap_options o = {.flush = PHEAP_FLUSH_NONE};
    if (pheap_open(k->heap, &o, &h))
        return KFAIL("round %u: reopen: %s", round, pheap_errmsg());
    int bad = 0;
    pheap_check_report rep;
    if (pheap_check(h, &rep))
        bad = KFAIL("round %u: pheap_check: %s", round, rep.first_error);
    pheap_off head = pheap_root_get(h, "list");
    *has_root = head != 0;
    uint64_t n = 0;
    k->reused = 0;
    if (head && !bad) {
        if (pheap_usable_size(h, head) < sizeof(pheap_off))
            bad = KFAIL("round %u: the root names %llu, not a live block", round,
                        (unsigned long long)head);
        for (pheap_off off = bad ? 0 : *(pheap_off *)pheap_direct(h, head); off && !bad; n++) {
            const node *nd = pheap_direct(h, off);
            if (n > k->nodes + 1)
                bad = KFAIL("round %u: more than %llu nodes (a cycle?)", round,
                            (unsigned long long)n);
            else if (pheap_usable_size(h, off) < sizeof(node))
                bad = KFAIL("round %u: node %llu at %llu is not a live block", round,
                            (unsigned long long)n, (unsigned long long)off);
            else if (nd->value != n * n)
                bad = KFAIL("round %u: node %llu at %llu holds value %#llx, next %#llx (want %llu)",
                            round, (unsigned long long)n, (unsigned long long)off,
                            (unsigned long long)nd->value, (unsigned long long)nd->next,
                            (unsigned long long)(n * n));
            else
                k->reused += k->old && is_old(k, off);
            if (!bad)
                off = nd->next;
        }
    }
    if (!bad && (n < k->nodes || n > k->nodes + 1 || (finished && n != k->nodes + 1)))
        bad = KFAIL("round %u: %llu nodes after a run that %s with %llu", round,
                    (unsigned long long)n, finished ? "finished" : "was killed",
                    (unsigned long long)k->nodes);
    struct pheap_stats st;
    pheap_stats(h, &st);
    uint64_t want = n + (head != 0) + k->extra;
    if (!bad && (st.live_blocks < want || st.live_blocks > want + k->leak_budget ||
                 rep.live_blocks != st.live_blocks))
        bad = KFAIL("round %u: %llu live blocks (check: %llu) for %llu nodes, %s head, %llu kept "
                    "by the test and at most %llu heads leaked by killed first runs", round,
                    (unsigned long long)st.live_blocks, (unsigned long long)rep.live_blocks,
                    (unsigned long long)n, head ? "a" : "no", (unsigned long long)k->extra,
                    (unsigned long long)k->leak_budget);
    k->nodes = n;
    pheap_close(h);
    return bad;
}

static uint64_t rnd(uint64_t *s)
{
    return ph_test_rand(s);
}

static void kill_loop(kill_state *k, const char *prog, const char *name)
{
    const char *env = getenv("PHEAP_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    printf("%s: seed %llu (PHEAP_TEST_SEED=%llu replays the kill instants)\n", name,
           (unsigned long long)seed, (unsigned long long)seed);
    int has_root = 0;
    double took = 0; /* a run's duration, averaged over runs that finished */
    for (unsigned r = 0; r < CALIBRATE; r++) { /* runs to the end, timed but the first */
        double t0 = now();
        int rc = run_example(prog, k->heap, -1, r);
        took += r ? (now() - t0) / (CALIBRATE - 1) : 0;
        if (rc || verify(k, r, 1, &has_root))
            return;
    }
    unsigned killed = 0;
    double widest = 0;
    for (unsigned r = CALIBRATE; r < CALIBRATE + ROUNDS; r++) {
        /* A kill at a random instant of the run: within 1.5 times its
         * usual duration, which follows the machine's load. */
        double span = 1.5 * took, t0 = now();
        double delay = span * (double)(rnd(&seed) % 10000) / 10000.0;
        widest = span > widest ? span : widest;
        int began_rootless = !has_root;
        int rc = run_example(prog, k->heap, delay, r);
        if (rc < 0)
            return;
        if (rc == 0)
            took = 0.8 * took + 0.2 * (now() - t0);
        killed += rc;
        if (rc == 1 && began_rootless)
            k->leak_budget++;
        if (verify(k, r, rc == 0, &has_root))
            return;
    }
    printf("%s: %u runs, %u killed (within at most %.2f ms of the start), %llu nodes intact, %llu "
           "of them in blocks that held old bytes\n", name, CALIBRATE + ROUNDS, killed,
           widest * 1e3, (unsigned long long)k->nodes, (unsigned long long)k->reused);
    CHECK(killed >= ROUNDS / 8); /* the kills did land */
}

TEST(kill_loop_on_a_fresh_heap)
{
    const char *prog = build_readme_example(SECTION, "readme_list");
    REQUIRE(prog);
    kill_state k = {.heap = disk_heap("fresh.heap")};
    REQUIRE(k.heap);
    kill_loop(&k, prog, "fresh heap");
    disk_heap_remove(k.heap);
}

static int by_value(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* A heap made as the example would make it, whose head- and node-sized free
 * blocks hold 0xab bytes: several slabs of each class (so that every arena
 * gets one at the next open), each keeping one live block so that it stays
 * a slab. */
TEST(kill_loop_on_a_heap_used_before)
{
    const char *prog = build_readme_example(SECTION, "readme_list");
    REQUIRE(prog);
    kill_state k = {.heap = disk_heap("used.heap")};
    REQUIRE(k.heap);
    pheap *h;
    pheap_options o = {.size = 16 << 20, .flags = PHEAP_CREATE, .flush = PHEAP_FLUSH_NONE};
    REQUIRE_OK(pheap_open(k.heap, &o, &h));
    struct pheap_stats st;
    pheap_stats(h, &st);
    long cpus = sysconf(_SC_NPROCESSORS_CONF);
    unsigned slabs = (unsigned)(cpus < 1 ? 1 : cpus > 64 ? 64 : cpus) + 1;
    static const size_t sizes[2] = {sizeof(pheap_off), sizeof(node)};
    size_t count[2], cap = 0;
    for (unsigned s = 0; s < 2; s++) {
        pheap_class_info ci = {0};
        for (unsigned c = 0; c < pheap_class_count() && ci.block_size < sizes[s]; c++)
            REQUIRE_OK(pheap_stats_class(h, c, &ci));
        count[s] = (size_t)slabs * ci.blocks_per_slab;
        cap += count[s];
    }
    uint64_t *blocks = malloc(cap * sizeof(uint64_t));
    REQUIRE(blocks);
    size_t n = 0, nold = 0;
    for (unsigned s = 0; s < 2; s++) {
        size_t first = n;
        for (; n < first + count[s]; n++) {
            blocks[n] = pheap_alloc(h, sizes[s]);
            REQUIRE(blocks[n]);
            memset(pheap_direct(h, blocks[n]), 0xab, pheap_usable_size(h, blocks[n]));
            pheap_persist(h, pheap_direct(h, blocks[n]), pheap_usable_size(h, blocks[n]));
        }
    }
    uint64_t last_chunk = UINT64_MAX;
    qsort(blocks, n, sizeof(uint64_t), by_value);
    for (size_t i = 0; i < n; i++) {
        uint64_t chunk = (blocks[i] - st.data_offset) / 65536;
        if (chunk == last_chunk) {
            REQUIRE_OK(pheap_free(h, blocks[i]));
            blocks[nold++] = blocks[i];
        } else {
            k.extra++; /* the first block of each slab stays live */
        }
        last_chunk = chunk;
    }
    REQUIRE_OK(pheap_close(h));
    k.old = blocks;
    k.nold = nold;
    /* The case is met when the example's thread draws its nodes from a slab
     * of old blocks.  Which slabs its arena holds depends on where the
     * kernel runs it, and an arena without a partial slab of the class
     * makes a fresh one rather than take another arena's (to come with
     * the fragmentation work): then every run of the loop misses the case.
     * The loop's checks hold either way; the miss is reported, not failed. */
    kill_loop(&k, prog, "heap used before");
    if (k.reused == 0)
        printf("  not met this time: no node landed in a block that held old bytes (the "
               "example's arena made a fresh slab)\n");
    free(blocks);
    disk_heap_remove(k.heap);
}
