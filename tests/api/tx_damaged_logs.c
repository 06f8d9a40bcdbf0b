/*
 * tx_damaged_logs.c -- damaged transaction-log anchors after an unclean
 * shutdown.  Recovery reads every lane's anchor; a damaged one must make
 * the open refuse the heap (PHEAP_ECORRUPT) or be ignored, never crash the
 * process, and never free a block that a program owns.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "format/layout.h"

/* An unclean heap at `image`: a transaction committed, then a crash; a
 * large block rooted as "big".  Returns the data region's offset. */
static uint64_t make_unclean(const char *image, pheap_off *big)
{
    const char *base = ph_test_path("tx-damage.heap");
    pheap *h = ph_test_create(base, 8u << 20);
    if (!h)
        return 0;
    *big = pheap_alloc(h, 100000);
    memset(pheap_direct(h, *big), 0x3c, 100000);
    pheap_persist(h, pheap_direct(h, *big), 100000);
    pheap_root_set(h, "big", *big);
    pheap_close(h);
    pheap_options sim = {.flags = PHEAP_SIMULATE};
    if (pheap_open(base, &sim, &h))
        return 0;
    pheap_tx_begin(h);
    pheap_off b = pheap_tx_alloc(h, 64);
    memset(pheap_direct(h, b), 1, 64);
    pheap_tx_commit(h);
    struct pheap_stats st;
    pheap_stats(h, &st);
    unlink(image);
    if (pheap_sim_crash(h, image, 0, 0.0))
        return 0;
    return st.data_offset;
}

static int poke(const char *path, uint64_t off, uint64_t v)
{
    int fd = open(path, O_WRONLY);
    int ok = fd >= 0 && pwrite(fd, &v, 8, (off_t)off) == 8;
    if (fd >= 0)
        close(fd);
    return ok ? 0 : -1;
}

/* Opens `path` in a child: its exit status is 0 (opened, check passed, the
 * big block still live), 1 (refused with PHEAP_ECORRUPT), 2 (another
 * error), 3 (opened, but check failed or the block was freed); or the
 * signal that killed it, + 128. */
static int open_in_child(const char *path, pheap_off big)
{
    pid_t pid = fork();
    if (pid == 0) {
        pheap *h;
        int rc = pheap_open(path, NULL, &h);
        if (rc)
            _exit(rc == PHEAP_ECORRUPT ? 1 : 2);
        int ok = pheap_check(h, NULL) == 0 && pheap_usable_size(h, big) > 0;
        pheap_close(h);
        _exit(ok ? 0 : 3);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static uint64_t anchor_word(const char *path, unsigned lane, unsigned word)
{
    return ph_test_region_offset(path, PH_REGION_LANES) + PH_TXLOG_ANCHORS +
           (uint64_t)lane * PH_LINE_SIZE + word * 8u;
}

TEST(an_anchor_link_into_the_metadata_is_refused_not_followed)
{
    const char *img = ph_test_path("adv-damage-1.image");
    pheap_off big;
    uint64_t data = make_unclean(img, &big);
    REQUIRE(data);
    /* Lane 7 never used; its link word (xnext) damaged to name a page of
     * the metadata, below the data region. */
    REQUIRE_OK(poke(img, anchor_word(img, 7, 2), 4096));
    int r = open_in_child(img, big);
    if (r >= 128)
        ph_test_fail(__FILE__, __LINE__, "open crashed with signal %d", r - 128);
    CHECK(r == 0 || r == 1);
}

TEST(an_anchor_link_just_below_the_data_region_is_refused_not_followed)
{
    const char *img = ph_test_path("adv-damage-2.image");
    pheap_off big;
    uint64_t data = make_unclean(img, &big);
    REQUIRE(data);
    REQUIRE_OK(poke(img, anchor_word(img, 0, 2), data - 4096));
    int r = open_in_child(img, big);
    if (r >= 128)
        ph_test_fail(__FILE__, __LINE__, "open crashed with signal %d", r - 128);
    CHECK(r == 0 || r == 1);
}

TEST(an_anchor_link_naming_a_program_block_does_not_free_it)
{
    const char *img = ph_test_path("adv-damage-3.image");
    pheap_off big;
    uint64_t data = make_unclean(img, &big);
    REQUIRE(data);
    /* An IDLE lane whose link names the program's large block: no
     * transaction of that lane ever allocated it. */
    REQUIRE_OK(poke(img, anchor_word(img, 9, 2), big));
    int r = open_in_child(img, big);
    if (r >= 128)
        ph_test_fail(__FILE__, __LINE__, "open crashed with signal %d", r - 128);
    if (r == 3)
        ph_test_fail(__FILE__, __LINE__, "recovery freed the program's block at %llu that a "
                     "damaged anchor named", (unsigned long long)big);
    CHECK(r == 0 || r == 1);
}

TEST(random_bytes_in_an_active_log_are_ignored)
{
    const char *img = ph_test_path("adv-damage-4.image");
    pheap_off big;
    uint64_t data = make_unclean(img, &big);
    REQUIRE(data);
    uint64_t seed = 99;
    uint64_t rec = ph_test_region_offset(img, PH_REGION_LANES) + PH_TXLOG_RECORDS +
                   3 * PH_TXLOG_SIZE;
    for (unsigned k = 0; k < PH_TXLOG_SIZE / 8; k++)
        REQUIRE_OK(poke(img, rec + 8 * k, ph_test_rand(&seed)));
    REQUIRE_OK(poke(img, anchor_word(img, 3, 0), 5ull << 8 | PH_TX_ACTIVE));
    REQUIRE_OK(poke(img, anchor_word(img, 3, 1), 1ull << 21));
    int r = open_in_child(img, big);
    if (r >= 128)
        ph_test_fail(__FILE__, __LINE__, "open crashed with signal %d", r - 128);
    CHECK(r == 0 || r == 1);
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    if (f && fseek(f, 0, SEEK_END) == 0) {
        *len = (size_t)ftell(f);
        rewind(f);
        buf = malloc(*len);
        if (buf && fread(buf, 1, *len, f) != *len) {
            free(buf);
            buf = NULL;
        }
    }
    if (f)
        fclose(f);
    return buf;
}

/* The committed transaction of make_unclean is in a lane below 5: a
 * recovery that rolled it forward before it met lane 5 would have written
 * the file before refusing it. */
TEST(an_anchor_state_of_no_known_kind_is_refused_with_nothing_written)
{
    const char *image = ph_test_path("tx-damage-state.image");
    pheap_off big;
    size_t n0 = 0, n1 = 0;
    REQUIRE(make_unclean(image, &big));
    REQUIRE(poke(image, anchor_word(image, 5, 0), 7ull << 8 | 3) == 0); /* state 3 */
    char *before = read_all(image, &n0);
    CHECK_EQ(open_in_child(image, big), 1);
    char *after = read_all(image, &n1);
    REQUIRE(before && after);
    CHECK(n0 == n1 && memcmp(before, after, n0) == 0);
    free(before);
    free(after);
}
