/*
 * record_flips.c -- single-bit flips in every metadata record that open,
 * recovery or a lookup trusts (docs/FORMAT.md, "What checks each record"):
 * the state line, a root entry, a slab descriptor's header, the extent log
 * header and entries, the names header and a name entry, a transaction log
 * anchor, a lane entry.  Each flip, opened read-only (every bit) and
 * read-write (a sample), must end one of three ways: open refuses the heap
 * with the record's error and a message naming the record; or the heap
 * opens and pheap_check reports the record; or nothing the program can see
 * changed (roots, names, blocks and their bytes, live-block count) and the
 * check passes.  Never a heap that opens, checks clean and has lost or
 * changed something.
 */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "format/layout.h"
#include "harness.h"

typedef struct model {
    pheap_off roots[3], names[2];
    uint64_t live, live_bytes;
    int intact;
} model;

static const char *root_names[3] = {"alpha", "beta", "gamma"};
static const char *obj_names[2] = {"first-name", "second-name"};

static void take(pheap *h, model *m)
{
    memset(m, 0, sizeof(*m));
    for (int i = 0; i < 3; i++)
        m->roots[i] = pheap_root_get(h, root_names[i]);
    for (int i = 0; i < 2; i++)
        m->names[i] = pheap_lookup(h, obj_names[i]);
    struct pheap_stats st;
    pheap_stats(h, &st);
    m->live = st.live_blocks;
    m->live_bytes = st.live_bytes;
    const void *a = m->roots[0] ? pheap_direct(h, m->roots[0]) : NULL;
    const void *c = m->roots[2] ? pheap_direct(h, m->roots[2]) : NULL;
    m->intact = a && c && ph_test_intact(a, 64, 1) && ph_test_intact(c, 50000, 3);
}

/* One record: where, how many bytes, and what a refusal must look like. */
typedef struct record {
    const char *name;
    uint64_t off;
    unsigned len;
    int errors[3];         /* codes open may refuse with (0 ends the list) */
    const char *says[3];   /* one of these is in the message of a refusal or a report */
} record;

typedef struct tally {
    unsigned refused, reported, safe;
} tally;

static model want;
static char pristine[512];

/* Judges the flip just made in `path`; 0 when it ended one of the allowed
 * ways.  *kind: 0 refused, 1 reported, 2 safe. */
static int judge(const record *r, const char *path, unsigned flags, int *kind, char *why, size_t len)
{
    pheap_options o = {.flags = flags};
    pheap *h;
    int rc = pheap_open(path, &o, &h);
    const char *msg = pheap_errmsg();
    int named = 0;
    if (rc) {
        *kind = 0;
        for (int i = 0; i < 3 && r->says[i]; i++)
            named |= strstr(msg, r->says[i]) != NULL;
        int known = 0;
        for (int i = 0; i < 3 && r->errors[i]; i++)
            known |= rc == r->errors[i];
        snprintf(why, len, "open refused with %d: %s", rc, msg);
        return known && named ? 0 : -1;
    }
    pheap_check_report rep;
    int c = pheap_check(h, &rep);
    model m;
    take(h, &m);
    pheap_close(h);
    if (c) {
        *kind = 1;
        for (int i = 0; i < 3 && r->says[i]; i++)
            named |= strstr(rep.first_error, r->says[i]) != NULL;
        snprintf(why, len, "pheap_check: %s", rep.first_error);
        return named ? 0 : -1;
    }
    *kind = 2;
    snprintf(why, len, "opened and checked clean, but changed: live %llu (was %llu), alpha %llu "
             "(was %llu), first-name %llu (was %llu), bytes intact %d",
             (unsigned long long)m.live, (unsigned long long)want.live,
             (unsigned long long)m.roots[0], (unsigned long long)want.roots[0],
             (unsigned long long)m.names[0], (unsigned long long)want.names[0], m.intact);
    return memcmp(&m, &want, sizeof(m)) == 0 ? 0 : -1;
}

static void flip_record(const record *r, const char *path, tally *t)
{
    int fd = open(path, O_RDWR);
    if (fd < 0) {
        ph_test_fail(__FILE__, __LINE__, "open %s", path);
        return;
    }
    for (unsigned bit = 0; bit < r->len * 8; bit++) {
        uint64_t at = r->off + bit / 8;
        uint8_t orig, v;
        if (pread(fd, &orig, 1, (off_t)at) != 1)
            break;
        v = (uint8_t)(orig ^ (1u << (bit % 8)));
        char why[400];
        int kind;
        /* read-only: every bit; the byte restored after */
        if (pwrite(fd, &v, 1, (off_t)at) != 1 || judge(r, path, PHEAP_RDONLY, &kind, why, sizeof(why)))
            ph_test_fail(__FILE__, __LINE__, "%s, bit %u (read-only): %s", r->name, bit, why);
        else
            kind == 0 ? t->refused++ : kind == 1 ? t->reported++ : t->safe++;
        if (bit % 5 == 0) { /* read-write: a sample, on the flipped file */
            if (judge(r, path, 0, &kind, why, sizeof(why)))
                ph_test_fail(__FILE__, __LINE__, "%s, bit %u (read-write): %s", r->name, bit, why);
            close(fd);
            if (ph_test_copy_file(pristine, path) != 0) {
                ph_test_fail(__FILE__, __LINE__, "restore %s", path);
                return;
            }
            fd = open(path, O_RDWR);
            if (fd < 0)
                return;
        } else if (pwrite(fd, &orig, 1, (off_t)at) != 1) {
            break;
        }
    }
    close(fd);
}

/* The slot of extent-log entry j of half 0 (layout.h: j mod L lines of
 * four, j / L within the line). */
static uint64_t extlog_slot(uint64_t extlog_off, uint64_t region_size, uint64_t j)
{
    uint64_t half = (region_size - PH_PAGE_SIZE) / 2 / sizeof(ph_extlog_entry);
    uint64_t lines = half / 4;
    return extlog_off + PH_PAGE_SIZE + ((j % lines) * 4 + j / lines) * sizeof(ph_extlog_entry);
}

TEST(every_record)
{
    char path[512];
    snprintf(pristine, sizeof(pristine), "%s", ph_test_path("flips-base.heap"));
    snprintf(path, sizeof(path), "%s", ph_test_path("flips-work.heap"));
    pheap *h = ph_test_create(pristine, 4u << 20);
    REQUIRE(h);
    pheap_off a = pheap_alloc(h, 64), b = pheap_alloc(h, 200), c = pheap_alloc(h, 50000);
    REQUIRE(a && b && c);
    ph_test_fill(pheap_direct(h, a), 64, 1);
    ph_test_fill(pheap_direct(h, c), 50000, 3);
    pheap_persist(h, pheap_direct(h, a), 64);
    pheap_persist(h, pheap_direct(h, c), 50000);
    REQUIRE_OK(pheap_root_set(h, "alpha", a));
    REQUIRE_OK(pheap_root_set(h, "beta", b));
    REQUIRE_OK(pheap_root_set(h, "gamma", c));
    REQUIRE(pheap_alloc_named(h, "first-name", 100));
    REQUIRE(pheap_alloc_named(h, "second-name", 3000));
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE(pheap_tx_alloc(h, 80));
    REQUIRE_OK(pheap_tx_commit(h));
    take(h, &want);
    REQUIRE(want.intact);
    REQUIRE_OK(pheap_close(h));

    uint64_t roots = ph_test_region_offset(pristine, PH_REGION_ROOTS);
    uint64_t lanes = ph_test_region_offset(pristine, PH_REGION_LANES);
    uint64_t slabs = ph_test_region_offset(pristine, PH_REGION_SLABS);
    uint64_t extlog = ph_test_region_offset(pristine, PH_REGION_EXTLOG);
    uint64_t names = ph_test_region_offset(pristine, PH_REGION_NAMES);
    uint64_t data = ph_test_region_offset(pristine, PH_REGION_DATA);
    REQUIRE(roots && lanes && slabs && extlog && names && data);
    uint64_t extlog_size = ph_test_region_offset(pristine, PH_REGION_NAMES) - extlog;
    /* The name entry of "first-name": its segment is the first directory
     * entry; its head line is found by its name bytes. */
    int fd = open(pristine, O_RDONLY);
    REQUIRE(fd >= 0);
    uint64_t dir0;
    REQUIRE(pread(fd, &dir0, 8, (off_t)(names + PH_NAMES_DIR0)) == 8);
    uint64_t seg = PH_NAMES_ENTRY_OFF(dir0), name_line = 0;
    REQUIRE(seg);
    for (uint64_t l = 1; l < 4096 + 64 && !name_line; l++) {
        ph_name_line nl;
        if (pread(fd, &nl, sizeof(nl), (off_t)(seg + l * PH_LINE_SIZE)) != sizeof(nl))
            break;
        if ((nl.xref & 7) == PH_NAME_HEAD && memcmp(nl.name, "first-name", 10) == 0)
            name_line = seg + l * PH_LINE_SIZE;
    }
    close(fd);
    REQUIRE(name_line);

    const record recs[] = {
        {"state line", PH_STATE_OFFSET, 48, {PHEAP_ELAYOUT, PHEAP_ETRUNCATED, PHEAP_ECHECKSUM},
         {"state line word", "truncated", NULL}},
        {"root entry 0", roots, sizeof(ph_root_entry), {PHEAP_ECORRUPT}, {"root entry 0", NULL, NULL}},
        {"slab descriptor", slabs + (a - data) / PH_CHUNK_SIZE * PH_SLAB_DESC_SIZE, 24,
         {PHEAP_ECORRUPT}, {"slab at", NULL, NULL}},
        {"extent log header", extlog, 32, {PHEAP_ECORRUPT}, {"extent log", NULL, NULL}},
        {"extent log entry 0", extlog_slot(extlog, extlog_size, 0), 16, {PHEAP_ECORRUPT},
         {"extent log", NULL, NULL}},
        {"extent log entry 2", extlog_slot(extlog, extlog_size, 2), 16, {PHEAP_ECORRUPT},
         {"extent log", NULL, NULL}},
        {"names header", names, 32, {PHEAP_ECORRUPT}, {"name directory", "names", NULL}},
        {"name entry", name_line, PH_LINE_SIZE, {PHEAP_ECORRUPT}, {"name", NULL, NULL}},
        {"transaction log anchor 0", lanes + PH_TXLOG_ANCHORS, 24, {PHEAP_ECORRUPT},
         {"transaction log of lane 0", NULL, NULL}},
        {"lane entry 0.0", lanes, PH_LINE_SIZE, {PHEAP_ECORRUPT}, {"lane", NULL, NULL}},
    };
    for (size_t i = 0; i < sizeof(recs) / sizeof(recs[0]); i++) {
        tally t = {0, 0, 0};
        REQUIRE(ph_test_copy_file(pristine, path) == 0);
        flip_record(&recs[i], path, &t);
        printf("%-26s %4u bits: %4u refused at open, %4u reported by pheap_check, %4u harmless\n",
               recs[i].name, recs[i].len * 8, t.refused, t.reported, t.safe);
    }
}

/* A damaged root entry (its commit word or its name against its check
 * word) is refused at open, naming the entry, instead of answering for
 * another root or none; restored, the heap opens and answers. */
TEST(open_refuses_damaged_root_entry)
{
    const char *path = ph_test_path("root-damage.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    pheap_off a = pheap_alloc(h, 64), b = pheap_alloc(h, 64);
    REQUIRE(a && b);
    REQUIRE_OK(pheap_root_set(h, "first", a));
    REQUIRE_OK(pheap_root_set(h, "second", b));
    REQUIRE_OK(pheap_root_set(h, "first", 0)); /* removed, then used again */
    REQUIRE_OK(pheap_root_set(h, "third", a));
    REQUIRE_OK(pheap_close(h));
    uint64_t roots = ph_test_region_offset(path, PH_REGION_ROOTS);
    REQUIRE(roots);
    /* "third" took entry 0, "second" is entry 1. */
    static const struct {
        uint64_t at;
        uint8_t mask;
        const char *what;
    } flips[] = {
        {offsetof(ph_root_entry, xused), 0x01, "commit word 1 -> 0"},
        {offsetof(ph_root_entry, xused), 0x02, "commit word 1 -> 3"},
        {offsetof(ph_root_entry, name_crc) + 2, 0x10, "check word"},
        {offsetof(ph_root_entry, name_crc) + 4, 0x01, "check word's marker bit"},
    };
    for (size_t i = 0; i < sizeof(flips) / sizeof(flips[0]); i++) {
        int fd = open(path, O_RDWR);
        REQUIRE(fd >= 0);
        uint8_t v;
        REQUIRE(pread(fd, &v, 1, (off_t)(roots + flips[i].at)) == 1);
        v ^= flips[i].mask;
        REQUIRE(pwrite(fd, &v, 1, (off_t)(roots + flips[i].at)) == 1);
        pheap_options ro = {.flags = PHEAP_RDONLY};
        CHECK_EQ(pheap_open(path, &ro, &h), PHEAP_ECORRUPT);
        if (!strstr(pheap_errmsg(), "root entry 0"))
            ph_test_fail(__FILE__, __LINE__, "%s: %s", flips[i].what, pheap_errmsg());
        CHECK_EQ(pheap_open(path, NULL, &h), PHEAP_ECORRUPT); /* nor read-write */
        v ^= flips[i].mask;
        REQUIRE(pwrite(fd, &v, 1, (off_t)(roots + flips[i].at)) == 1);
        close(fd);
    }
    REQUIRE_OK(pheap_open(path, NULL, &h));
    CHECK_EQ(pheap_root_get(h, "third"), a);
    CHECK_EQ(pheap_root_get(h, "first"), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENOENT);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}
