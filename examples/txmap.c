/*
 * txmap.c -- a transactional hash map: u64 keys, values of any size, and
 * every change one transaction.  A writer process inserts, updates and
 * deletes keys, reporting each finished operation on a pipe; this process
 * kills it with SIGKILL mid-way, reopens the heap and checks that the map
 * is exactly what the reported operations made of it (plus, perhaps, the
 * one in flight), with every chain and every value intact.
 *
 * Why transactions: an update here allocates a new value block, links it
 * and frees the old one; a delete unlinks an entry and frees two blocks.
 * Each is several changes that must happen together.  Inside
 * pheap_tx_begin / pheap_tx_commit they do: after a crash at any instant,
 * all of them happened or none did -- no lost block, no dangling link.
 *
 * The two ways to change existing bytes in a transaction are both used:
 *   insert  links the new entry with pheap_tx_write (redo: the new bytes
 *           reach the heap at commit);
 *   update, delete
 *           snapshot the word they change with pheap_tx_add (undo), then
 *           store into it in place.
 * One update in eight is canceled on purpose with pheap_tx_abort, and the
 * program shows one cancellation in detail at the end.
 *
 * usage: txmap [HEAP_PATH] [KILL_AFTER_MS]   (default /tmp/pheap-demo-tx.heap, 800)
 * Run it again on the same heap: it finds the map and goes on changing it.
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <pheap.h>

#define ROOT "txmap"
#define NBUCKETS 8      /* few buckets, so that chains are a few entries long */
#define NKEYS 32        /* the writer draws keys from key numbers 0..NKEYS-1 */

/* One version of a key's value, in a block of its own.  `sum` covers
 * everything else, so that a block holding anything but a whole version
 * written by this program shows. */
typedef struct value {
    uint64_t key;
    uint64_t version;   /* 1 at insert, +1 at each update */
    uint64_t len;       /* bytes in data[] */
    uint64_t sum;
    uint8_t data[];
} value;

typedef struct entry {
    pheap_off next;     /* the next entry of the bucket's chain, 0 at the end */
    uint64_t key;
    pheap_off value;    /* the current version's block */
} entry;

/* The map: the block the root names. */
typedef struct map {
    uint64_t nbuckets;
    pheap_off buckets[]; /* the first entry of each chain */
} map;

static int fail(const char *what)
{
    fprintf(stderr, "txmap: %s: %s\n", what, pheap_errmsg());
    return 1;
}

/* ---- keys and values ---------------------------------------------------------- */

static uint64_t mix(uint64_t x) /* a 64-bit finaliser: spreads bits */
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static uint64_t key_of(unsigned k) { return mix(k + 1); }

static pheap_off *bucket(map *m, uint64_t key) { return &m->buckets[mix(key) % m->nbuckets]; }

/* Most versions are small (a size class); one in sixteen is 16-40 KiB,
 * larger than PHEAP_SMALL_MAX, so it takes a large extent. */
static uint64_t value_len(uint64_t key, uint64_t version)
{
    uint64_t r = mix(key ^ version << 40);
    return r % 16 == 0 ? 16384 + r % 24576 : 1 + r % 3000;
}

static uint64_t checksum(const value *v) /* FNV-1a over the fields and data */
{
    uint64_t s = 0xcbf29ce484222325ull;
    const uint8_t *p = (const uint8_t *)v;
    for (size_t i = 0; i < offsetof(value, sum); i++)
        s = (s ^ p[i]) * 0x100000001b3ull;
    for (uint64_t i = 0; i < v->len; i++)
        s = (s ^ v->data[i]) * 0x100000001b3ull;
    return s;
}

/* Allocates and fills a value block inside the caller's transaction.  The
 * block exists only if the transaction commits, so a crash or an abort
 * before that leaves nothing behind.  It needs no pheap_tx_add and no
 * pheap_persist: a block the transaction allocated is written in place and
 * made durable by the commit. */
static pheap_off new_value(pheap *h, uint64_t key, uint64_t version)
{
    uint64_t len = value_len(key, version);
    pheap_off off = pheap_tx_alloc(h, sizeof(value) + len);
    if (!off)
        return 0;
    value *v = pheap_direct(h, off);
    v->key = key;
    v->version = version;
    v->len = len;
    for (uint64_t i = 0; i < len; i++)
        v->data[i] = (uint8_t)mix(key + version + i / 8);
    v->sum = checksum(v);
    return off;
}

/* ---- the map ------------------------------------------------------------------- */

/* The word that names key's entry (a bucket, or the `next` of the entry
 * before it in the chain), or the chain's final 0 when the key is absent. */
static pheap_off *find_link(pheap *h, map *m, uint64_t key)
{
    pheap_off *link = bucket(m, key);
    while (*link && ((entry *)pheap_direct(h, *link))->key != key)
        link = &((entry *)pheap_direct(h, *link))->next;
    return link;
}

static entry *lookup(pheap *h, map *m, uint64_t key)
{
    return pheap_direct(h, *find_link(h, m, key)); /* NULL for offset 0 */
}

static uint64_t version_of(pheap *h, const entry *e)
{
    return e ? ((const value *)pheap_direct(h, e->value))->version : 0;
}

/* After a transactional call failed: pheap_tx_abort rolls back what the
 * transaction did (or, when the failure aborted it already, only closes
 * it), so that the thread can start the next one.  Returns the failure. */
static int give_up(pheap *h, int rc)
{
    pheap_tx_abort(h);
    return rc;
}

/* Inserts key (absent) with version 1 of its value. */
static int map_insert(pheap *h, map *m, uint64_t key)
{
    pheap_off *head = bucket(m, key);
    int rc = pheap_tx_begin(h);
    if (rc)
        return rc;
    pheap_off eoff = pheap_tx_alloc(h, sizeof(entry));
    pheap_off voff = eoff ? new_value(h, key, 1) : 0;
    if (!voff)
        return give_up(h, pheap_errno());
    entry *e = pheap_direct(h, eoff);
    *e = (entry){*head, key, voff}; /* a block of this transaction: plain stores */
    /* Redo: the bucket takes the new entry's offset at commit.  Until then
     * the heap still holds the old head, so the chain stays as it was for
     * anyone walking it -- and for this transaction too: a second insert
     * into the same bucket before the commit would have to read the head
     * with pheap_tx_read, or it would link past the first. */
    if ((rc = pheap_tx_write(h, head, &eoff, sizeof(eoff))) != 0)
        return give_up(h, rc);
    return pheap_tx_commit(h);
}

/* Inside the caller's transaction: links version `version` of e's value
 * in place of the current one, whose offset goes to *old. */
static int link_new_version(pheap *h, entry *e, uint64_t version, pheap_off *old)
{
    pheap_off voff = new_value(h, e->key, version);
    if (!voff)
        return pheap_errno();
    /* Undo: snapshot the link (durable when the call returns), then store
     * in place.  An abort or a crash before the commit puts the snapshot
     * back.  Lookups see the new version at once -- other threads' too:
     * isolation is the program's job, pheap takes no lock for it. */
    int rc = pheap_tx_add(h, &e->value, sizeof(e->value));
    if (rc)
        return rc;
    *old = e->value;
    e->value = voff;
    return 0;
}

/* Replaces e's value with its next version and frees the old one. */
static int map_update(pheap *h, entry *e)
{
    pheap_off old = 0;
    int rc = pheap_tx_begin(h);
    if (rc)
        return rc;
    if ((rc = link_new_version(h, e, version_of(h, e) + 1, &old)) != 0)
        return give_up(h, rc);
    /* Freed at commit: until then (and forever, if the transaction does
     * not commit) the old version stays allocated. */
    if ((rc = pheap_tx_free(h, old)) != 0)
        return give_up(h, rc);
    return pheap_tx_commit(h);
}

/* Starts an update as map_update does, then changes its mind: a real
 * program would give up here on a failed check of its own.  After
 * pheap_tx_abort the entry names its old value again and the new block
 * was never allocated. */
static int map_update_canceled(pheap *h, entry *e)
{
    pheap_off old = 0;
    int rc = pheap_tx_begin(h);
    if (rc)
        return rc;
    if ((rc = link_new_version(h, e, version_of(h, e) + 1, &old)) != 0)
        return give_up(h, rc);
    return pheap_tx_abort(h);
}

/* Deletes the entry that *link names, and its value. */
static int map_delete(pheap *h, pheap_off *link)
{
    pheap_off eoff = *link;
    entry *e = pheap_direct(h, eoff);
    int rc = pheap_tx_begin(h);
    if (rc)
        return rc;
    /* Undo: snapshot the word naming the entry (the bucket or the `next`
     * of the entry before), then unlink in place. */
    if ((rc = pheap_tx_add(h, link, sizeof(*link))) != 0)
        return give_up(h, rc);
    *link = e->next;
    /* Both blocks are freed at commit, in the same step as the unlink. */
    if ((rc = pheap_tx_free(h, e->value)) != 0 || (rc = pheap_tx_free(h, eoff)) != 0)
        return give_up(h, rc);
    return pheap_tx_commit(h);
}

/* The map the root names; with `create`, made first if there is none. */
static map *map_open(pheap *h, int create)
{
    map *m = pheap_direct(h, pheap_root_get(h, ROOT));
    if (m || !create)
        return m;
    /* A root can only name a live block, and a block of a transaction is
     * live only after the commit: allocate (zeroed, durable), then name.
     * A crash between the two leaks this one block; it runs once. */
    size_t bytes = sizeof(map) + NBUCKETS * sizeof(pheap_off);
    pheap_off off = pheap_alloc_init(h, bytes, PHEAP_ALLOC_ZERO, NULL, NULL);
    if (!off)
        return NULL;
    m = pheap_direct(h, off);
    m->nbuckets = NBUCKETS;
    pheap_persist(h, &m->nbuckets, sizeof(m->nbuckets));
    return pheap_root_set(h, ROOT, off) ? NULL : m;
}

/* ---- the writer's operations ------------------------------------------------- */

enum op_kind { OP_INSERT, OP_UPDATE, OP_DELETE, OP_CANCEL };
static const char *const op_name[] = {"inserts", "updates", "deletes", "canceled updates"};

/* What a draw of `dice` does to a key whose current version is `version`
 * (0: absent).  The writer asks with what the heap holds, the checker
 * with its model: the same draws give the same operations. */
static enum op_kind op_kind(uint64_t dice, uint64_t version)
{
    if (!version)
        return OP_INSERT;
    return dice % 8 == 0 ? OP_CANCEL : dice % 8 < 3 ? OP_DELETE : OP_UPDATE;
}

static void draw(uint64_t *rng, unsigned *k, uint64_t *dice)
{
    *rng = mix(*rng + 0x9e3779b97f4a7c15ull);
    *k = (unsigned)(*rng % NKEYS);
    *dice = *rng >> 32;
}

static int run_op(pheap *h, map *m, unsigned k, uint64_t dice)
{
    uint64_t key = key_of(k);
    pheap_off *link = find_link(h, m, key);
    entry *e = pheap_direct(h, *link);
    switch (op_kind(dice, version_of(h, e))) {
    case OP_INSERT: return map_insert(h, m, key);
    case OP_UPDATE: return map_update(h, e);
    case OP_DELETE: return map_delete(h, link);
    default:        return map_update_canceled(h, e);
    }
}

/* The writer: runs operations from `seed` on and writes the number of
 * each to `fd` once it has returned (committed, or canceled).  Runs until
 * killed. */
static void writer(const char *path, int fd, uint64_t seed)
{
    pheap *h;
    map *m;
    if (pheap_open(path, NULL, &h) || !(m = map_open(h, 0)))
        _exit(fail("writer: open"));
    for (uint64_t i = 0;; i++) {
        unsigned k;
        uint64_t dice;
        draw(&seed, &k, &dice);
        if (run_op(h, m, k, dice))
            _exit(fail("writer"));
        if (write(fd, &i, sizeof(i)) != sizeof(i))
            _exit(1);
    }
}

/* ---- checking ------------------------------------------------------------------ */

/* What the map should hold: the version of each key number (0: absent). */
typedef struct model {
    uint64_t version[NKEYS];
    uint64_t count[4]; /* operations of each kind replayed */
} model;

static void model_apply(model *md, unsigned k, uint64_t dice)
{
    enum op_kind kind = op_kind(dice, md->version[k]);
    md->count[kind]++;
    md->version[k] = kind == OP_INSERT ? 1 : kind == OP_UPDATE ? md->version[k] + 1
                     : kind == OP_DELETE ? 0 : md->version[k];
}

/* 1 when the block at `off` is live, holds a whole value (its checksum
 * right) and belongs to `key`. */
static int value_ok(pheap *h, pheap_off off, uint64_t key)
{
    size_t usable = pheap_usable_size(h, off);
    const value *v = pheap_direct(h, off);
    return usable >= sizeof(value) && v->len <= usable - sizeof(value) && v->key == key &&
           v->sum == checksum(v);
}

/* Walks every chain and reads the map into *found (versions by key
 * number); *entries counts the entries.  Prints the first problem and
 * returns -1 when the map is damaged: an entry not in a live block, in the
 * wrong bucket, a key twice or not of ours, a value not intact, a cycle. */
static int walk(pheap *h, map *m, model *found, uint64_t *entries)
{
    memset(found, 0, sizeof(*found));
    *entries = 0;
    for (uint64_t b = 0; b < m->nbuckets; b++) {
        for (pheap_off off = m->buckets[b]; off;) {
            const entry *e = pheap_direct(h, off);
            unsigned k = 0;
            while (k < NKEYS && key_of(k) != (e ? e->key : 0))
                k++;
            const char *bad = pheap_usable_size(h, off) < sizeof(entry) ? "not a live block"
                              : bucket(m, e->key) != &m->buckets[b]       ? "in the wrong bucket"
                              : k == NKEYS                                ? "a key the writer never uses"
                              : found->version[k]                         ? "a key found twice (a cycle?)"
                              : !value_ok(h, e->value, e->key)            ? "a value that is not intact"
                                                                          : NULL;
            if (bad) {
                printf("damaged map: the entry at %llu in bucket %llu is %s\n",
                       (unsigned long long)off, (unsigned long long)b, bad);
                return -1;
            }
            found->version[k] = version_of(h, e);
            ++*entries;
            off = e->next;
        }
    }
    return 0;
}

static int same_versions(const model *a, const model *b)
{
    return memcmp(a->version, b->version, sizeof(a->version)) == 0;
}

/* ---- the demonstration ----------------------------------------------------------- */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Forks the writer, kills it after `ms`, and returns how many operations
 * it reported (-1 if it failed on its own). */
static long long run_writer(const char *path, uint64_t seed, double ms)
{
    int fds[2];
    if (pipe(fds))
        return perror("pipe"), -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        writer(path, fds[1], seed);
    }
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    long long reported = 0;
    uint64_t got;
    double t0 = now_ms();
    int killed = 0;
    for (;;) { /* read reports; kill the writer when the time is up */
        double left = t0 + ms - now_ms();
        if (left <= 0 && !killed) {
            kill(pid, SIGKILL);
            killed = 1;
        }
        struct pollfd p = {fds[0], POLLIN, 0};
        poll(&p, 1, killed ? -1 : (int)left + 1);
        ssize_t n = read(fds[0], &got, sizeof(got));
        if (n == sizeof(got))
            reported = (long long)got + 1;
        else if (n == 0)
            break;
    }
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    if (!WIFSIGNALED(status))
        return fprintf(stderr, "txmap: the writer failed before the kill\n"), -1;
    return reported;
}

/* Shows a canceled update of `key`: the new version is visible inside the
 * transaction, gone after pheap_tx_abort. */
static int show_abort(pheap *h, map *m, uint64_t key)
{
    entry *e = lookup(h, m, key);
    if (!e)
        return 0;
    struct pheap_stats before, after;
    pheap_stats(h, &before);
    uint64_t v0 = version_of(h, e);
    pheap_off old = 0;
    if (pheap_tx_begin(h))
        return fail("pheap_tx_begin");
    if (link_new_version(h, e, v0 + 1, &old))
        return give_up(h, fail("canceled update"));
    uint64_t inside = version_of(h, e);
    if (pheap_tx_abort(h))
        return fail("pheap_tx_abort");
    pheap_stats(h, &after);
    int ok = version_of(h, e) == v0 && value_ok(h, e->value, e->key) &&
             after.live_blocks == before.live_blocks;
    printf("canceled update of key %#llx: inside the transaction it read version %llu, after "
           "pheap_tx_abort version %llu again (intact: %s); live blocks %llu before, %llu after "
           "(this handle: tx_aborts %llu, tx_fences %llu)\n",
           (unsigned long long)e->key, (unsigned long long)inside,
           (unsigned long long)version_of(h, e), ok ? "yes" : "NO",
           (unsigned long long)before.live_blocks, (unsigned long long)after.live_blocks,
           (unsigned long long)after.tx_aborts, (unsigned long long)after.tx_fences);
    return !ok;
}

/* Reopens the heap after the kill and checks everything against `want`,
 * the map after the reported operations; `rng` draws the operation that
 * was in flight.  0 when all holds. */
static int verify(const char *path, model want, uint64_t rng, uint64_t other_blocks)
{
    pheap *h;
    double t0 = now_ms();
    if (pheap_open(path, NULL, &h))
        return fail("reopen");
    double t1 = now_ms();
    struct pheap_stats st;
    pheap_stats(h, &st);
    printf("reopened in %.1f ms: the heap %s; recovery rolled %llu interrupted transaction%s back "
           "and %llu forward (pheap_stats: tx_rolled_back %llu, tx_rolled_forward %llu)\n",
           t1 - t0, st.was_unclean ? "was not closed cleanly" : "was closed cleanly",
           (unsigned long long)st.tx_rolled_back, st.tx_rolled_back == 1 ? "" : "s",
           (unsigned long long)st.tx_rolled_forward, (unsigned long long)st.tx_rolled_back,
           (unsigned long long)st.tx_rolled_forward);

    model found;
    unsigned k;
    uint64_t dice, entries = 0;
    map *m = map_open(h, 0);
    int bad = !m || walk(h, m, &found, &entries);
    const char *plus = "";
    if (!bad && !same_versions(&want, &found)) { /* the one in flight may have committed */
        draw(&rng, &k, &dice);
        model_apply(&want, k, dice);
        plus = ", plus the one in flight (it committed before the kill)";
        bad = !same_versions(&want, &found);
        if (bad)
            printf("the map is not what the writer's operations made (key number %u or another "
                   "differs)\n", k);
    }
    if (!bad)
        printf("verified: every chain walked, every value intact; the map holds %llu keys, as the "
               "reported operations left it%s\n", (unsigned long long)entries, plus);

    pheap_check_report r;
    int rc = pheap_check(h, &r);
    pheap_stats(h, &st);
    uint64_t want_blocks = 1 + 2 * entries + other_blocks;
    printf("pheap_check: %s; live blocks %llu = the map's bucket block + %llu entries + %llu "
           "values%s%s\n", rc ? r.first_error : "consistent", (unsigned long long)st.live_blocks,
           (unsigned long long)entries, (unsigned long long)entries,
           other_blocks ? " + the heap's other blocks" : "",
           st.live_blocks == want_blocks ? "" : " -- MISMATCH");
    bad |= rc || st.live_blocks != want_blocks;
    for (k = 0; !bad && k < NKEYS; k++) /* on the first key present */
        if (found.version[k]) {
            bad = show_abort(h, m, key_of(k));
            break;
        }
    pheap_close(h);
    return bad;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "/tmp/pheap-demo-tx.heap";
    double kill_after = argc > 2 ? atof(argv[2]) : 800;

    pheap_options o = {.size = 16u << 20, .max_size = 256u << 20, .flags = PHEAP_CREATE};
    pheap *h;
    map *m;
    model want;
    uint64_t entries;
    if (pheap_open(path, &o, &h) || !(m = map_open(h, 1)))
        return fail("open");
    if (walk(h, m, &want, &entries)) /* the map as this run finds it */
        return pheap_close(h), 1;
    struct pheap_stats st;
    pheap_stats(h, &st);
    uint64_t other_blocks = st.live_blocks - 1 - 2 * entries; /* not the map's */
    pheap_close(h);
    printf("txmap in %s holds %llu keys; a writer process inserts, updates and deletes them, one "
           "transaction each\n", path, (unsigned long long)entries);

    uint64_t seed = mix((uint64_t)time(NULL) ^ (uint64_t)getpid() << 32), rng = seed;
    long long reported = run_writer(path, seed, kill_after);
    if (reported < 0)
        return 1;
    for (long long i = 0; i < reported; i++) { /* replay them on the model */
        unsigned k;
        uint64_t dice;
        draw(&rng, &k, &dice);
        model_apply(&want, k, dice);
    }
    printf("killed the writer (SIGKILL) after %.0f ms: it had reported %lld operations:", kill_after,
           reported);
    for (int i = 0; i < 4; i++)
        printf("%s %s %llu", i ? "," : "", op_name[i], (unsigned long long)want.count[i]);
    printf("\n");
    return verify(path, want, rng, other_blocks);
}
