/*
 * readme_tx.c -- the README's transaction example under kill -9, as
 * printed: its C block (under "Changing several things at once") is cut
 * out of README.md, compiled against the library and run again and again,
 * killed at random instants.  After every kill the stack's count must
 * equal its nodes, which read (count-1)^2 ... 1 0 from the top, pheap_check
 * must pass and the live blocks must be the nodes and the stack block
 * (plus one leaked stack block at most per killed first run: allocated,
 * not yet named by the root).  Also: examples/hello_tx.c is the same text.
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

#define SECTION "## Changing several things at once" /* the README section of the example */

typedef struct node { /* as in the README */
    pheap_off next;
    uint64_t value;
} node;

typedef struct stack {
    pheap_off top;
    uint64_t count;
} stack;

enum { ROUNDS = 60, CALIBRATE = 3 };

TEST(readme_block_is_examples_hello_tx)
{
    char *block = readme_block(SECTION);
    char *file = slurp_file(PHEAP_SOURCE_DIR "/examples/hello_tx.c");
    REQUIRE(block && file);
    if (strcmp(block, file) != 0)
        ph_test_fail(__FILE__, __LINE__, "README.md's transaction example and "
                     "examples/hello_tx.c differ");
    free(block);
    free(file);
}

/* Runs the example on `heap`, killed after `delay` seconds (never if
 * negative).  1 if killed; 0 if it finished and printed `count N, nodes N`
 * with N = *count + 1; -1 on a failure of the example. */
static int run_example(const char *prog, const char *heap, double delay, uint64_t count)
{
    const char *out = ph_test_path("readme_tx.out");
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
    char *text = slurp_file(out), want[64];
    snprintf(want, sizeof(want), "count %llu, nodes %llu\n", (unsigned long long)count + 1,
             (unsigned long long)count + 1);
    int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && text && !strcmp(text, want);
    if (!ok)
        ph_test_fail(__FILE__, __LINE__, "the example %s %d; it printed: %s (expected %s)",
                     WIFSIGNALED(status) ? "died of signal" : "exited with",
                     WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
                     text ? text : "", want);
    free(text);
    return ok ? 0 : -1;
}

#define KFAIL(...) (ph_test_fail(__FILE__, __LINE__, __VA_ARGS__), -1)

/* The heap after a run: the stack holds *count or (if the run may have
 * pushed) *count + 1 nodes, exactly `finished ? *count + 1`, whole and
 * counted; nothing leaked beyond `leaks` stack blocks. */
static int verify(const char *heap, unsigned round, int finished, uint64_t *count, uint64_t leaks,
                  int *has_root)
{
    pheap *h;
    pheap_options o = {.flush = PHEAP_FLUSH_NONE};
    if (pheap_open(heap, &o, &h))
        return KFAIL("round %u: reopen: %s", round, pheap_errmsg());
    int bad = 0;
    pheap_check_report rep;
    if (pheap_check(h, &rep))
        bad = KFAIL("round %u: pheap_check: %s", round, rep.first_error);
    pheap_off root = pheap_root_get(h, "stack");
    *has_root = root != 0;
    const stack *s = pheap_direct(h, root);
    uint64_t n = 0, c = s ? s->count : 0;
    for (pheap_off off = s && !bad ? s->top : 0; off && !bad; n++) {
        const node *nd = pheap_direct(h, off);
        uint64_t want = (c - 1 - n) * (c - 1 - n);
        if (n >= c)
            bad = KFAIL("round %u: more nodes than the count %llu", round, (unsigned long long)c);
        else if (pheap_usable_size(h, off) < sizeof(node))
            bad = KFAIL("round %u: node %llu at %llu is not a live block", round,
                        (unsigned long long)n, (unsigned long long)off);
        else if (nd->value != want)
            bad = KFAIL("round %u: node %llu holds %llu, want %llu", round, (unsigned long long)n,
                        (unsigned long long)nd->value, (unsigned long long)want);
        else
            off = nd->next;
    }
    if (!bad && n != c)
        bad = KFAIL("round %u: count %llu, but %llu nodes", round, (unsigned long long)c,
                    (unsigned long long)n);
    if (!bad && (c < *count || c > *count + 1 || (finished && c != *count + 1)))
        bad = KFAIL("round %u: %llu nodes after a run that %s with %llu", round,
                    (unsigned long long)c, finished ? "finished" : "was killed",
                    (unsigned long long)*count);
    struct pheap_stats st;
    pheap_stats(h, &st);
    uint64_t want = n + (root != 0);
    if (!bad && (st.live_blocks < want || st.live_blocks > want + leaks))
        bad = KFAIL("round %u: %llu live blocks for %llu nodes and %s stack block (at most %llu "
                    "leaked by killed first runs)", round, (unsigned long long)st.live_blocks,
                    (unsigned long long)n, root ? "a" : "no", (unsigned long long)leaks);
    *count = c;
    pheap_close(h);
    return bad;
}

TEST(kill_loop)
{
    const char *prog = build_readme_example(SECTION, "readme_tx");
    REQUIRE(prog);
    /* Not on tmpfs (the test directory may be): there msync is a real
     * write-back and a push spends long enough in its fences for random
     * kills to land inside it. */
    char dir[512], heap[600];
    snprintf(dir, sizeof(dir), "%s/pheap-readme-tx-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    REQUIRE(mkdtemp(dir));
    snprintf(heap, sizeof(heap), "%s/tx.heap", dir);
    const char *env = getenv("PHEAP_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    printf("seed %llu (PHEAP_TEST_SEED=%llu replays the kill instants)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    uint64_t count = 0, leaks = 0;
    int has_root = 0;
    double took = 0;
    for (unsigned r = 0; r < CALIBRATE; r++) { /* to the end, timed but the first */
        double t0 = now();
        int rc = run_example(prog, heap, -1, count);
        took += r ? (now() - t0) / (CALIBRATE - 1) : 0;
        if (rc || verify(heap, r, 1, &count, leaks, &has_root))
            goto out;
    }
    unsigned killed = 0;
    for (unsigned r = CALIBRATE; r < CALIBRATE + ROUNDS; r++) {
        double t0 = now(), delay = 1.5 * took * (double)(ph_test_rand(&seed) % 10000) / 10000.0;
        int rootless = !has_root;
        int rc = run_example(prog, heap, delay, count);
        if (rc < 0)
            goto out;
        if (rc == 0)
            took = 0.8 * took + 0.2 * (now() - t0);
        killed += rc;
        leaks += rc == 1 && rootless;
        if (verify(heap, r, rc == 0, &count, leaks, &has_root))
            goto out;
    }
    printf("%u runs, %u killed, %llu nodes, count right after every one\n", CALIBRATE + ROUNDS,
           killed, (unsigned long long)count);
    CHECK(killed >= ROUNDS / 10); /* the kills did land */
out:
    unlink(heap);
    rmdir(dir);
}
