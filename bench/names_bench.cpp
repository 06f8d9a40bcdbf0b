/*
 * names_bench.cpp -- pheap_namebench: create, look up and remove named
 * objects, pheap against Boost.Interprocess managed_mapped_file.
 *
 * The workload, the same for every system: N names ("object-<i>", or
 * 41-byte names with --name-kind long), each naming a 64-byte object.
 *   create   all N names, in order (names/s);
 *   lookup   --lookups random lookups of existing names (default 2 N; each
 *            result is compared with the offset or pointer the create got);
 *   miss     --misses lookups of names that do not exist (default N);
 *   remove   all N names, in another random order (names/s).
 * The names and the orders are made before the clock starts.
 *
 * Systems: pheap-none (pheap_options.flush = none: durable against process
 * crashes only), pheap-<flush> (the CPU's best cache-line flush, forced
 * through pheap_options.flush, what persistent memory would pay),
 * pheap-tx-<flush> and pheap-tx8-<flush> (the same, each create and each
 * remove inside a transaction -- one name per transaction, or eight: the
 * names join the transaction and are made at its commit), and boost
 * (managed_mapped_file: construct<T>(name)(...), find<T>(name),
 * destroy<T>(name)).  All in one heap directory, each repetition in a fresh
 * process with a fresh heap file, the systems interleaved within each
 * repetition.  pheap's fences, flushes and reflushes per create and remove
 * come from pheap_stats.  Memory per name: the growth of the
 * allocator's own account over the create phase (pheap: slab + large
 * bytes, which hold the objects and the directory's segments; Boost: size -
 * free memory), divided by N; and the file's allocated size after it
 * (st_blocks: pheap allocates its data region when it creates the file,
 * Boost's file is sparse).
 *
 * Output: a table per name kind on stdout, with the ratios to Boost and
 * the targets; --json appends one JSON object per system and name kind;
 * --markdown appends the tables in Markdown.
 */
#include <pheap.h>

#include <boost/interprocess/managed_mapped_file.hpp>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cpuid.h>
#include <getopt.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

namespace {

namespace bip = boost::interprocess;

constexpr unsigned MAX_REPS = 64;

/* The named object: 64 bytes, its index in the first word. */
struct object {
    uint64_t id;
    uint64_t pad[7];
    explicit object(uint64_t i) : id(i), pad{} {}
};
static_assert(sizeof(object) == 64, "the objects are 64 bytes");

/* ---- what one run measures ------------------------------------------------ */

enum metric_id {
    M_CREATE, M_LOOKUP, M_MISS, M_REMOVE,
    M_CREATE_FENCES, M_CREATE_FLUSHES, M_CREATE_REFLUSHES,
    M_REMOVE_FENCES, M_REMOVE_FLUSHES, M_LOOKUP_FENCES,
    M_FILE_MIB, M_HEAP_PER_NAME, M_SEGMENTS,
    /* the same four rates per second of the thread's CPU time
       (CLOCK_THREAD_CPUTIME_ID, kernel time included): what other
       processes on the machine take away from the wall clock is not in it */
    M_CREATE_CPU, M_LOOKUP_CPU, M_MISS_CPU, M_REMOVE_CPU,
    M_COUNT
};

const char *const metric_key[M_COUNT] = {
    "create_per_s", "lookup_per_s", "miss_per_s", "remove_per_s",
    "fences_per_create", "flushes_per_create", "reflushes_per_create",
    "fences_per_remove", "flushes_per_remove", "fences_per_lookup",
    "file_mib", "heap_bytes_per_name", "name_segments",
    "create_per_cpu_s", "lookup_per_cpu_s", "miss_per_cpu_s", "remove_per_cpu_s",
};

/* Sent from the child to the parent through a pipe: plain data. */
struct run_result {
    int ok;
    int has_counters;            /* pheap: the durability columns are known */
    double m[M_COUNT];
    char flush[16];              /* pheap's flush back end in use */
    char error[256];
};

struct workload {
    uint64_t n = 1000000;        /* names */
    uint64_t lookups = 0;        /* 0: 2 n */
    uint64_t misses = 0;         /* 0: n */
    bool long_names = false;
    bool random_create = false;  /* create in random order, not 0, 1, 2, ... */
    uint64_t seed = 1;
    std::string dir = "/dev/shm";
    uint64_t heap_size = 0;      /* 0: from n */
    uint64_t boost_size = 0;     /* 0: from n */
};

/* The names of one workload, in one buffer, and the orders of the phases. */
struct name_set {
    std::vector<char> text;
    std::vector<uint32_t> at;    /* start of name i in text; n + misses names */
    std::vector<uint32_t> create_order, lookup_order, remove_order;
    std::vector<char> lookup_text; /* the names of the lookups, in lookup order */
    size_t longest = 0;
    const char *name(uint64_t i) const { return &text[at[i]]; }
};

/* The lookups read their names one after another from lookup_text and
 * compare with want[] in the same order, so that the loop streams through
 * its inputs: what is timed is the lookup, not the bench's own cache misses
 * on a random name and a random expected value. */
template <typename T> std::vector<T> in_lookup_order(const name_set &s, const std::vector<T> &v)
{
    std::vector<T> out(s.lookup_order.size());
    for (size_t k = 0; k < out.size(); k++)
        out[k] = v[s.lookup_order[k]];
    return out;
}

void fail(run_result *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->error, sizeof r->error, fmt, ap);
    va_end(ap);
    r->ok = 0;
}

uint64_t now_ns()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t cpu_ns()
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double rate(uint64_t ops, uint64_t ns)
{
    return (double)ops * 1e9 / (double)(ns ? ns : 1);
}

/* Times one phase by the wall clock and by the thread's CPU time. */
struct stopwatch {
    uint64_t wall = now_ns(), cpu = cpu_ns();
    /* Records phase m's rates: ops per wall second and per CPU second. */
    void stop(run_result *r, int m, uint64_t ops) const
    {
        uint64_t w1 = now_ns(), c1 = cpu_ns();
        r->m[m] = rate(ops, w1 - wall);
        r->m[M_CREATE_CPU + (m - M_CREATE)] = rate(ops, c1 - cpu);
    }
};

uint64_t next_rand(uint64_t *s)      /* splitmix64 */
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void shuffle(std::vector<uint32_t> &v, uint64_t *state)
{
    for (size_t i = v.size(); i > 1; i--)
        std::swap(v[i - 1], v[next_rand(state) % i]);
}

/* Names 0 to n-1 exist.  Missing name k is the name of a random existing
 * one with its last digit made a letter ("object-1234" gives "object-123e"):
 * the same lengths and prefixes as the names that exist, so that an
 * ordered index (Boost's) walks as deep for a miss as for a hit. */
void make_names(const workload &w, name_set *s)
{
    uint64_t total = w.n + w.misses, state = w.seed;
    char buf[64];
    s->at.resize(total);
    s->text.reserve(total * (w.long_names ? 42 : 16));
    for (uint64_t i = 0; i < total; i++) {
        uint64_t id = i < w.n ? i : next_rand(&state) % w.n;
        int len = w.long_names ? snprintf(buf, sizeof buf, "names-benchmark/long-object-name-%08" PRIu64, id)
                               : snprintf(buf, sizeof buf, "object-%" PRIu64, id);
        if (i >= w.n)
            buf[len - 1] = (char)('a' + (buf[len - 1] - '0'));
        s->at[i] = (uint32_t)s->text.size();
        s->text.insert(s->text.end(), buf, buf + len + 1);
        s->longest = std::max(s->longest, (size_t)len);
    }
    s->create_order.resize(w.n);
    for (uint64_t i = 0; i < w.n; i++)
        s->create_order[i] = (uint32_t)i;
    if (w.random_create)
        shuffle(s->create_order, &state);
    s->lookup_order.resize(w.lookups);
    for (uint64_t i = 0; i < w.lookups; i++)
        s->lookup_order[i] = (uint32_t)(i % w.n);
    shuffle(s->lookup_order, &state);
    for (uint32_t i : s->lookup_order) {
        const char *nm = s->name(i);
        s->lookup_text.insert(s->lookup_text.end(), nm, nm + strlen(nm) + 1);
    }
    s->remove_order.resize(w.n);
    for (uint64_t i = 0; i < w.n; i++)
        s->remove_order[i] = (uint32_t)i;
    shuffle(s->remove_order, &state);
}

uint64_t file_bytes(const std::string &path)
{
    struct stat st;
    return stat(path.c_str(), &st) == 0 ? (uint64_t)st.st_blocks * 512u : 0;
}

const char *cpu_flush()
{
    unsigned a, b, c, d;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        if (b & (1u << 24))
            return "clwb";
        if (b & (1u << 23))
            return "clflushopt";
    }
    return "clflush";
}

unsigned cpu_flush_kind()
{
    const char *f = cpu_flush();
    return !strcmp(f, "clwb") ? PHEAP_FLUSH_CLWB
         : !strcmp(f, "clflushopt") ? PHEAP_FLUSH_CLFLUSHOPT : PHEAP_FLUSH_CLFLUSH;
}

/* ---- pheap ------------------------------------------------------------------------ */

struct pheap_counters {
    uint64_t flushes, fences, reflushes, heap_bytes;
};

pheap_counters counters(pheap *h)
{
    struct pheap_stats st;
    pheap_stats(h, &st);
    return { st.flushes, st.fences, st.reflushes, st.slab_bytes + st.large_bytes };
}

/* With `tx` names per transaction: begins one before the k-th change of a
 * phase, commits after it; 0 or the failing call's code. */
int tx_begin_at(pheap *h, unsigned tx, uint64_t k)
{
    return tx && k % tx == 0 ? pheap_tx_begin(h) : 0;
}
int tx_commit_at(pheap *h, unsigned tx, uint64_t k, uint64_t n)
{
    return tx && ((k + 1) % tx == 0 || k + 1 == n) ? pheap_tx_commit(h) : 0;
}

void run_pheap(const workload &w, const name_set &s, unsigned flush, unsigned tx, run_result *r)
{
    std::string path = w.dir + "/pheap-namebench-" + std::to_string(getpid()) + ".heap";
    unlink(path.c_str());
    pheap_options o = {};
    o.size = w.heap_size;
    o.flags = PHEAP_CREATE | PHEAP_EXCL;
    o.flush = flush;
    pheap *h = nullptr;
    int rc = pheap_open(path.c_str(), &o, &h);
    if (rc) {
        fail(r, "pheap_open %s: %s: %s", path.c_str(), pheap_strerror(rc), pheap_errmsg());
        return;
    }
    struct pheap_stats st;
    pheap_stats(h, &st);
    snprintf(r->flush, sizeof r->flush, "%s", pheap_flush_name(st.flush));
    std::vector<pheap_off> offs(w.n);
    uint64_t bad = 0;

    /* create */
    pheap_counters c0 = counters(h);
    stopwatch sw;
    for (uint64_t k = 0; k < w.n; k++) {
        uint32_t i = s.create_order[k];
        pheap_off off = tx_begin_at(h, tx, k) ? 0 : pheap_alloc_named(h, s.name(i), sizeof(object));
        if (!off) {
            fail(r, "pheap_alloc_named(%s) after %" PRIu64 " names: %s", s.name(i), k,
                 pheap_errmsg());
            goto out;
        }
        new (pheap_direct(h, off)) object(i); /* in a transaction: a block of it, in place */
        offs[i] = off;
        if (tx_commit_at(h, tx, k, w.n)) {
            fail(r, "pheap_tx_commit after %" PRIu64 " names: %s", k, pheap_errmsg());
            goto out;
        }
    }
    {
        sw.stop(r, M_CREATE, w.n);
        pheap_counters c1 = counters(h);
        double n = (double)w.n;
        r->m[M_CREATE_FENCES] = (double)(c1.fences - c0.fences) / n;
        r->m[M_CREATE_FLUSHES] = (double)(c1.flushes - c0.flushes) / n;
        r->m[M_CREATE_REFLUSHES] = (double)(c1.reflushes - c0.reflushes) / n;
        r->m[M_FILE_MIB] = (double)file_bytes(path) / 1048576.0;
        r->m[M_HEAP_PER_NAME] = ((double)c1.heap_bytes - (double)c0.heap_bytes) / n;
        pheap_stats(h, &st);
        r->m[M_SEGMENTS] = (double)st.name_segments;
        if (st.names != w.n) {
            fail(r, "pheap_stats: %" PRIu64 " names after %" PRIu64 " creates", st.names, w.n);
            goto out;
        }
    }

    /* lookups of existing names */
    {
        pheap_counters c0l = counters(h);
        std::vector<pheap_off> want = in_lookup_order(s, offs);
        const char *nm = s.lookup_text.data();
        stopwatch swl;
        for (uint64_t k = 0; k < w.lookups; k++) {
            bad += pheap_lookup(h, nm) != want[k];
            nm += strlen(nm) + 1;
        }
        swl.stop(r, M_LOOKUP, w.lookups);
        r->m[M_LOOKUP_FENCES] = (double)(counters(h).fences - c0l.fences) / (double)(w.lookups ? w.lookups : 1);
        if (bad) {
            fail(r, "pheap_lookup: %" PRIu64 " of %" PRIu64 " lookups wrong", bad, w.lookups);
            goto out;
        }
    }

    /* lookups of missing names */
    {
        stopwatch swm;
        for (uint64_t k = 0; k < w.misses; k++)
            bad += pheap_lookup(h, s.name(w.n + k)) != 0;
        swm.stop(r, M_MISS, w.misses);
        if (bad) {
            fail(r, "pheap_lookup: %" PRIu64 " missing names found", bad);
            goto out;
        }
    }

    /* every object still holds its index */
    for (uint64_t i = 0; i < w.n; i++)
        bad += static_cast<object *>(pheap_direct(h, offs[i]))->id != i;
    if (bad) {
        fail(r, "%" PRIu64 " objects lost their contents", bad);
        goto out;
    }

    /* remove */
    {
        pheap_counters c0r = counters(h);
        stopwatch swr;
        for (uint64_t k = 0; k < w.n; k++) {
            const char *name = s.name(s.remove_order[k]);
            if ((rc = tx_begin_at(h, tx, k)) != 0 || (rc = pheap_free_named(h, name)) != 0 ||
                (rc = tx_commit_at(h, tx, k, w.n)) != 0) {
                fail(r, "pheap_free_named(%s): %s", name, pheap_errmsg());
                goto out;
            }
        }
        swr.stop(r, M_REMOVE, w.n);
        pheap_counters c1r = counters(h);
        r->m[M_REMOVE_FENCES] = (double)(c1r.fences - c0r.fences) / (double)w.n;
        r->m[M_REMOVE_FLUSHES] = (double)(c1r.flushes - c0r.flushes) / (double)w.n;
        pheap_stats(h, &st);
        if (st.names != 0) {
            fail(r, "pheap_stats: %" PRIu64 " names left after removing all", st.names);
            goto out;
        }
    }
    r->has_counters = 1;
    r->ok = 1;
out:
    pheap_close(h);
    unlink(path.c_str());
}

/* ---- Boost.Interprocess ------------------------------------------------------------ */

void run_boost(const workload &w, const name_set &s, run_result *r)
{
    std::string path = w.dir + "/boost-namebench-" + std::to_string(getpid()) + ".bin";
    unlink(path.c_str());
    snprintf(r->flush, sizeof r->flush, "-");
    try {
        bip::managed_mapped_file seg(bip::create_only, path.c_str(), w.boost_size);
        std::vector<object *> ptrs(w.n);
        uint64_t bad = 0;

        uint64_t free0 = seg.get_free_memory();
        stopwatch sw;
        for (uint64_t k = 0; k < w.n; k++) {
            uint32_t i = s.create_order[k];
            ptrs[i] = seg.construct<object>(s.name(i))(i);
        }
        sw.stop(r, M_CREATE, w.n);
        double n = (double)w.n;
        r->m[M_FILE_MIB] = (double)file_bytes(path) / 1048576.0;
        r->m[M_HEAP_PER_NAME] = ((double)free0 - (double)seg.get_free_memory()) / n;
        if (seg.get_num_named_objects() != w.n) {
            fail(r, "boost: %zu named objects after %" PRIu64 " constructs",
                 (size_t)seg.get_num_named_objects(), w.n);
            return;
        }

        std::vector<object *> want = in_lookup_order(s, ptrs);
        const char *nm = s.lookup_text.data();
        sw = stopwatch();
        for (uint64_t k = 0; k < w.lookups; k++) {
            bad += seg.find<object>(nm).first != want[k];
            nm += strlen(nm) + 1;
        }
        sw.stop(r, M_LOOKUP, w.lookups);
        if (bad) {
            fail(r, "boost find: %" PRIu64 " of %" PRIu64 " lookups wrong", bad, w.lookups);
            return;
        }

        sw = stopwatch();
        for (uint64_t k = 0; k < w.misses; k++)
            bad += seg.find<object>(s.name(w.n + k)).first != nullptr;
        sw.stop(r, M_MISS, w.misses);
        if (bad) {
            fail(r, "boost find: %" PRIu64 " missing names found", bad);
            return;
        }

        for (uint64_t i = 0; i < w.n; i++)
            bad += ptrs[i]->id != i;
        if (bad) {
            fail(r, "boost: %" PRIu64 " objects lost their contents", bad);
            return;
        }

        sw = stopwatch();
        for (uint64_t k = 0; k < w.n; k++) {
            const char *name = s.name(s.remove_order[k]);
            if (!seg.destroy<object>(name)) {
                fail(r, "boost destroy(%s): not found", name);
                return;
            }
        }
        sw.stop(r, M_REMOVE, w.n);
        if (seg.get_num_named_objects() != 0) {
            fail(r, "boost: named objects left after removing all");
            return;
        }
        r->ok = 1;
    } catch (const std::exception &e) {
        fail(r, "boost: %s", e.what());
    }
    unlink(path.c_str());
}

/* ---- systems, repetitions ---------------------------------------------------------- */

struct system_desc {
    std::string name;            /* as --system takes it and the table shows it */
    int kind;                    /* 0 pheap, 1 boost */
    unsigned flush;
    unsigned tx;                 /* pheap: names per transaction, 0 none */
};

std::vector<system_desc> all_systems()
{
    return {
        { "pheap-none", 0, PHEAP_FLUSH_NONE, 0 },
        { std::string("pheap-") + cpu_flush(), 0, cpu_flush_kind(), 0 },
        { std::string("pheap-tx-") + cpu_flush(), 0, cpu_flush_kind(), 1 },
        { std::string("pheap-tx8-") + cpu_flush(), 0, cpu_flush_kind(), 8 },
        { "boost", 1, 0, 0 },
    };
}

/* One repetition in a child process: a fresh address space and heap file. */
run_result run_isolated(const workload &w, const name_set &s, const system_desc &sys)
{
    run_result r = {};
    int fd[2];
    if (pipe(fd) != 0) {
        fail(&r, "pipe: %s", strerror(errno));
        return r;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        fail(&r, "fork: %s", strerror(errno));
        close(fd[0]);
        close(fd[1]);
        return r;
    }
    if (pid == 0) {
        close(fd[0]);
        if (sys.kind == 0)
            run_pheap(w, s, sys.flush, sys.tx, &r);
        else
            run_boost(w, s, &r);
        ssize_t n = write(fd[1], &r, sizeof r);
        _exit(n == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fd[1]);
    size_t got = 0;
    while (got < sizeof r) {
        ssize_t n = read(fd[0], (char *)&r + got, sizeof r - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (got != sizeof r) {
        r = {};
        if (WIFSIGNALED(status))
            fail(&r, "the run died of signal %d", WTERMSIG(status));
        else
            fail(&r, "the run exited %d without a result", WEXITSTATUS(status));
    }
    return r;
}

struct summary {
    double median, min, max;
};

summary summarize(std::vector<double> v)
{
    if (v.empty())
        return { 0, 0, 0 };
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    return { med, v.front(), v.back() };
}

struct row {
    system_desc sys;
    std::vector<run_result> runs;  /* the successful ones */
    std::string error;
    std::string flush;
    bool has_counters = false;
    std::vector<double> values(int m) const
    {
        std::vector<double> v;
        for (const run_result &r : runs)
            v.push_back(r.m[m]);
        return v;
    }
    summary get(int m) const { return summarize(values(m)); }
};

/* ---- output ---------------------------------------------------------------------- */

std::string mrate(double v)
{
    char b[32];
    snprintf(b, sizeof b, "%.2f", v / 1e6);
    return b;
}

std::string fixed(double v, int prec)
{
    char b[32];
    snprintf(b, sizeof b, "%.*f", prec, v);
    return b;
}

std::string fs_type(const std::string &dir)
{
    struct statfs sf;
    if (statfs(dir.c_str(), &sf) != 0)
        return "unknown";
    switch ((unsigned long)sf.f_type) {
    case 0x01021994ul: return "tmpfs";
    case 0xef53ul: return "ext4";
    case 0x58465342ul: return "xfs";
    case 0x9123683eul: return "btrfs";
    case 0x794c7630ul: return "overlayfs";
    default: {
        char b[32];
        snprintf(b, sizeof b, "0x%lx", (unsigned long)sf.f_type);
        return b;
    }
    }
}

std::string describe(const workload &w, const name_set &s, unsigned reps)
{
    char b[512];
    snprintf(b, sizeof b,
             "%" PRIu64 " names (%s, up to %zu bytes) created in %s order, 64-byte objects; %" PRIu64
             " lookups of existing names in random order, %" PRIu64
             " of missing names; removal in random order; median of %u runs, %s (%s)",
             w.n, w.long_names ? "\"names-benchmark/long-object-name-<i>\"" : "\"object-<i>\"",
             s.longest, w.random_create ? "random" : "index", w.lookups, w.misses, reps,
             w.dir.c_str(), fs_type(w.dir).c_str());
    return b;
}

const row *find_row(const std::vector<row> &rows, int kind, bool flushing)
{
    for (const row &r : rows) {
        if (r.runs.empty() || r.sys.kind != kind || r.sys.tx)
            continue;
        if (kind == 1 || (r.sys.flush != PHEAP_FLUSH_NONE) == flushing)
            return &r;
    }
    return nullptr;
}

double ratio(const row &a, const row &b, int m)
{
    double d = b.get(m).median;
    return d > 0 ? a.get(m).median / d : 0;
}

void print_text(FILE *f, const workload &w, const name_set &s, unsigned reps,
                const std::vector<row> &rows)
{
    fprintf(f, "\nnames: %s\n", describe(w, s, reps).c_str());
    fprintf(f, "%-20s %-22s %-22s %-22s %-22s %8s %8s %8s %8s %8s %8s\n", "system",
            "create M/s [min-max]", "lookup M/s", "miss M/s", "remove M/s", "fence/cr",
            "flush/cr", "fence/rm", "flush/rm", "B/name", "file MiB");
    for (const row &r : rows) {
        if (r.runs.empty()) {
            fprintf(f, "%-20s failed: %s\n", r.sys.name.c_str(), r.error.c_str());
            continue;
        }
        fprintf(f, "%-20s", r.sys.name.c_str());
        for (int m : { M_CREATE, M_LOOKUP, M_MISS, M_REMOVE }) {
            summary x = r.get(m);
            std::string cell = mrate(x.median) + " [" + mrate(x.min) + "-" + mrate(x.max) + "]";
            fprintf(f, " %-22s", cell.c_str());
        }
        for (int m : { M_CREATE_FENCES, M_CREATE_FLUSHES, M_REMOVE_FENCES, M_REMOVE_FLUSHES }) {
            if (r.has_counters)
                fprintf(f, " %8.2f", r.get(m).median);
            else
                fprintf(f, " %8s", "-");
        }
        fprintf(f, " %8.0f %8.0f\n", r.get(M_HEAP_PER_NAME).median, r.get(M_FILE_MIB).median);
        if ((int)r.runs.size() < (int)reps)
            fprintf(f, "%-20s %u of %u runs failed: %s\n", "", reps - (unsigned)r.runs.size(), reps,
                    r.error.c_str());
    }
    fprintf(f, "%-20s %-22s %-22s %-22s %-22s\n", "per CPU s", "create M/s", "lookup M/s",
            "miss M/s", "remove M/s");
    for (const row &r : rows) {
        if (r.runs.empty())
            continue;
        fprintf(f, "%-20s", r.sys.name.c_str());
        for (int m : { M_CREATE_CPU, M_LOOKUP_CPU, M_MISS_CPU, M_REMOVE_CPU }) {
            summary x = r.get(m);
            std::string cell = mrate(x.median) + " [" + mrate(x.min) + "-" + mrate(x.max) + "]";
            fprintf(f, " %-22s", cell.c_str());
        }
        fprintf(f, "\n");
    }
    const row *boost = find_row(rows, 1, false);
    if (boost) {
        for (const row &r : rows) {
            if (r.runs.empty() || r.sys.kind != 0)
                continue;
            fprintf(f, "%-20s / boost: create %.2f, lookup %.2f, miss %.2f, remove %.2f "
                       "(per CPU s: %.2f, %.2f, %.2f, %.2f)\n",
                    r.sys.name.c_str(), ratio(r, *boost, M_CREATE), ratio(r, *boost, M_LOOKUP),
                    ratio(r, *boost, M_MISS), ratio(r, *boost, M_REMOVE),
                    ratio(r, *boost, M_CREATE_CPU), ratio(r, *boost, M_LOOKUP_CPU),
                    ratio(r, *boost, M_MISS_CPU), ratio(r, *boost, M_REMOVE_CPU));
        }
    }
    const row *none = find_row(rows, 0, false), *fl = find_row(rows, 0, true);
    auto verdict = [](double v, double goal, bool at_least) {
        return (at_least ? v >= goal : v <= goal) ? "met" : "NOT met";
    };
    if (none)
        fprintf(f, "target: create >= 1 M/s (flush none): %s M/s, %s (per CPU s: %s, %s)\n",
                mrate(none->get(M_CREATE).median).c_str(),
                verdict(none->get(M_CREATE).median, 1e6, true),
                mrate(none->get(M_CREATE_CPU).median).c_str(),
                verdict(none->get(M_CREATE_CPU).median, 1e6, true));
    if (fl)
        fprintf(f, "target: <= 2 fences per create (%s): %.3f, %s\n", fl->flush.c_str(),
                fl->get(M_CREATE_FENCES).median, verdict(fl->get(M_CREATE_FENCES).median, 2.0, false));
    for (const row *r : { none, fl }) {
        if (r)
            fprintf(f, "target: >= 5 M lookups/s (%s): %s M/s, %s (per CPU s: %s, %s)\n",
                    r->sys.name.c_str(), mrate(r->get(M_LOOKUP).median).c_str(),
                    verdict(r->get(M_LOOKUP).median, 5e6, true),
                    mrate(r->get(M_LOOKUP_CPU).median).c_str(),
                    verdict(r->get(M_LOOKUP_CPU).median, 5e6, true));
    }
    fflush(f);
}

void print_markdown(FILE *f, const workload &w, const name_set &s, unsigned reps,
                    const std::vector<row> &rows)
{
    fprintf(f, "\n### Named objects: %s names\n\n%s.\n\n",
            w.long_names ? "long" : "short", describe(w, s, reps).c_str());
    fprintf(f, "| system | create M/s | lookup M/s | miss M/s | remove M/s | fences/create | "
               "flushes/create | fences/remove | flushes/remove | bytes/name | file MiB |\n");
    fprintf(f, "|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const row &r : rows) {
        if (r.runs.empty()) {
            fprintf(f, "| %s | failed: %s |||||||||\n", r.sys.name.c_str(), r.error.c_str());
            continue;
        }
        fprintf(f, "| %s", r.sys.name.c_str());
        for (int m : { M_CREATE, M_LOOKUP, M_MISS, M_REMOVE }) {
            summary x = r.get(m);
            fprintf(f, " | %s [%s-%s]", mrate(x.median).c_str(), mrate(x.min).c_str(),
                    mrate(x.max).c_str());
        }
        for (int m : { M_CREATE_FENCES, M_CREATE_FLUSHES, M_REMOVE_FENCES, M_REMOVE_FLUSHES })
            fprintf(f, " | %s", r.has_counters ? fixed(r.get(m).median, 2).c_str() : "-");
        fprintf(f, " | %.0f | %.0f |\n", r.get(M_HEAP_PER_NAME).median,
                r.get(M_FILE_MIB).median);
    }
    fprintf(f, "\nPer second of CPU time (the process's own, kernel included; what other load "
               "took away from the wall clock is not in it):\n\n"
               "| system | create M/s | lookup M/s | miss M/s | remove M/s |\n|---|---|---|---|---|\n");
    for (const row &r : rows) {
        if (r.runs.empty())
            continue;
        fprintf(f, "| %s", r.sys.name.c_str());
        for (int m : { M_CREATE_CPU, M_LOOKUP_CPU, M_MISS_CPU, M_REMOVE_CPU }) {
            summary x = r.get(m);
            fprintf(f, " | %s [%s-%s]", mrate(x.median).c_str(), mrate(x.min).c_str(),
                    mrate(x.max).c_str());
        }
        fprintf(f, " |\n");
    }
    const row *boost = find_row(rows, 1, false);
    if (boost) {
        fprintf(f, "\n| ratio to boost (wall; CPU) | create | lookup | miss | remove |\n"
                   "|---|---|---|---|---|\n");
        for (const row &r : rows) {
            if (r.runs.empty() || r.sys.kind != 0)
                continue;
            fprintf(f, "| %s", r.sys.name.c_str());
            for (int m : { M_CREATE, M_LOOKUP, M_MISS, M_REMOVE })
                fprintf(f, " | %.2f; %.2f", ratio(r, *boost, m),
                        ratio(r, *boost, M_CREATE_CPU + (m - M_CREATE)));
            fprintf(f, " |\n");
        }
    }
    fflush(f);
}

void json_string(FILE *f, const std::string &s)
{
    fputc('"', f);
    for (unsigned char c : s) {
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

void print_json(FILE *f, const workload &w, const name_set &s, unsigned reps,
                const std::vector<row> &rows)
{
    for (const row &r : rows) {
        fprintf(f, "{\"bench\":\"names\",\"system\":");
        json_string(f, r.sys.name);
        fprintf(f, ",\"flush\":");
        json_string(f, r.flush.empty() ? "-" : r.flush);
        fprintf(f, ",\"params\":{\"names\":%" PRIu64 ",\"name_kind\":\"%s\",\"longest_name\":%zu,"
                   "\"object_size\":64,\"create_order\":\"%s\",\"lookups\":%" PRIu64 ",\"misses\":%" PRIu64
                   ",\"reps\":%u,\"seed\":%" PRIu64 ",\"dir\":",
                w.n, w.long_names ? "long" : "short", s.longest,
                w.random_create ? "random" : "index", w.lookups, w.misses, reps, w.seed);
        json_string(f, w.dir);
        fprintf(f, "}");
        if (!r.error.empty()) {
            fprintf(f, ",\"error\":");
            json_string(f, r.error);
        }
        fprintf(f, ",\"runs\":%zu,\"metrics\":{", r.runs.size());
        bool first = true;
        for (int m = 0; m < M_COUNT && !r.runs.empty(); m++) {
            bool durability = (m >= M_CREATE_FENCES && m <= M_LOOKUP_FENCES) || m == M_SEGMENTS;
            if (durability && !r.has_counters)
                continue;
            summary x = r.get(m);
            fprintf(f, "%s\"%s\":{\"median\":%.6g,\"min\":%.6g,\"max\":%.6g,\"values\":[",
                    first ? "" : ",", metric_key[m], x.median, x.min, x.max);
            std::vector<double> v = r.values(m);
            for (size_t i = 0; i < v.size(); i++)
                fprintf(f, "%s%.6g", i ? "," : "", v[i]);
            fprintf(f, "]}");
            first = false;
        }
        fprintf(f, "}}\n");
    }
    fflush(f);
}

/* ---- options ------------------------------------------------------------------------ */

void usage(FILE *f)
{
    fprintf(f,
        "usage: pheap_namebench [options]\n"
        "  -n, --names N          names created (default 1000000)\n"
        "      --lookups N        lookups of existing names (default 2 * names)\n"
        "      --misses N         lookups of missing names (default names)\n"
        "  -k, --name-kind LIST   short (\"object-<i>\"), long (41 bytes), or short,long\n"
        "                         (default short)\n"
        "  -S, --system LIST      pheap-none, pheap-%s, pheap-tx-%s, pheap-tx8-%s, boost\n"
        "                         (default all)\n"
        "  -r, --reps N           repetitions, a fresh process and heap each (default 5)\n"
        "  -d, --heap-dir DIR     where the heap files live (default /dev/shm)\n"
        "  -s, --heap-size SIZE   pheap data region, K/M/G (default 512 bytes per name, >= 256M)\n"
        "      --boost-size SIZE  Boost's file (default 512 bytes per name, >= 256M)\n"
        "      --random-create    create the names in random order (default: 0, 1, 2, ...)\n"
        "      --seed N           random seed of the orders (default 1)\n"
        "  -q, --quick            200000 names, 3 repetitions\n"
        "  -j, --json FILE        append one JSON object per system and name kind\n"
        "  -m, --markdown FILE    append the tables in Markdown\n"
        "Exit status: 0 all ran, 1 a run failed, 2 bad usage.\n",
        cpu_flush(), cpu_flush(), cpu_flush());
}

bool parse_u64(const char *s, uint64_t *out, bool sized)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s)
        return false;
    if (sized && *end) {
        unsigned shift = 0;
        switch (*end) {
        case 'k': case 'K': shift = 10; break;
        case 'm': case 'M': shift = 20; break;
        case 'g': case 'G': shift = 30; break;
        default: return false;
        }
        v <<= shift;
        end++;
        if (*end == 'i')
            end++;
        if (*end == 'B')
            end++;
    }
    if (*end)
        return false;
    *out = v;
    return true;
}

std::vector<std::string> split(const char *s)
{
    std::vector<std::string> v;
    std::string cur;
    for (; *s; s++) {
        if (*s == ',') {
            if (!cur.empty())
                v.push_back(cur);
            cur.clear();
        } else {
            cur += *s;
        }
    }
    if (!cur.empty())
        v.push_back(cur);
    return v;
}

} // namespace

int main(int argc, char **argv)
{
    workload w;
    unsigned reps = 5;
    bool reps_set = false, names_set = false, quick = false;
    const char *json = nullptr, *markdown = nullptr;
    std::vector<std::string> kinds = { "short" };
    std::vector<system_desc> systems = all_systems();
    enum { O_LOOKUPS = 256, O_MISSES, O_BOOST_SIZE, O_SEED, O_RANDOM_CREATE };
    static const struct option longopts[] = {
        { "names", required_argument, nullptr, 'n' },
        { "lookups", required_argument, nullptr, O_LOOKUPS },
        { "misses", required_argument, nullptr, O_MISSES },
        { "name-kind", required_argument, nullptr, 'k' },
        { "system", required_argument, nullptr, 'S' },
        { "reps", required_argument, nullptr, 'r' },
        { "heap-dir", required_argument, nullptr, 'd' },
        { "heap-size", required_argument, nullptr, 's' },
        { "boost-size", required_argument, nullptr, O_BOOST_SIZE },
        { "seed", required_argument, nullptr, O_SEED },
        { "random-create", no_argument, nullptr, O_RANDOM_CREATE },
        { "quick", no_argument, nullptr, 'q' },
        { "json", required_argument, nullptr, 'j' },
        { "markdown", required_argument, nullptr, 'm' },
        { "help", no_argument, nullptr, 'h' },
        { nullptr, 0, nullptr, 0 },
    };
    int c;
    uint64_t v;
    while ((c = getopt_long(argc, argv, "n:k:S:r:d:s:qj:m:h", longopts, nullptr)) != -1) {
        switch (c) {
        case 'n':
            if (!parse_u64(optarg, &w.n, false) || w.n == 0 || w.n > 100000000) {
                fprintf(stderr, "pheap_namebench: --names: 1 to 10^8\n");
                return 2;
            }
            names_set = true;
            break;
        case O_LOOKUPS:
            if (!parse_u64(optarg, &w.lookups, false) || w.lookups > 1000000000) {
                fprintf(stderr, "pheap_namebench: bad --lookups\n");
                return 2;
            }
            break;
        case O_MISSES:
            if (!parse_u64(optarg, &w.misses, false) || w.misses > 100000000) {
                fprintf(stderr, "pheap_namebench: bad --misses\n");
                return 2;
            }
            break;
        case 'k':
            kinds = split(optarg);
            for (const std::string &k : kinds) {
                if (k != "short" && k != "long") {
                    fprintf(stderr, "pheap_namebench: --name-kind: short or long, not %s\n", k.c_str());
                    return 2;
                }
            }
            break;
        case 'S': {
            std::vector<system_desc> all = all_systems(), chosen;
            for (const std::string &name : split(optarg)) {
                auto it = std::find_if(all.begin(), all.end(),
                                       [&](const system_desc &d) { return d.name == name; });
                if (it == all.end()) {
                    fprintf(stderr, "pheap_namebench: unknown system %s\n", name.c_str());
                    return 2;
                }
                chosen.push_back(*it);
            }
            systems = chosen;
            break;
        }
        case 'r':
            if (!parse_u64(optarg, &v, false) || v == 0 || v > MAX_REPS) {
                fprintf(stderr, "pheap_namebench: --reps: 1 to %u\n", MAX_REPS);
                return 2;
            }
            reps = (unsigned)v;
            reps_set = true;
            break;
        case 'd': w.dir = optarg; break;
        case 's':
            if (!parse_u64(optarg, &w.heap_size, true)) {
                fprintf(stderr, "pheap_namebench: bad --heap-size\n");
                return 2;
            }
            break;
        case O_BOOST_SIZE:
            if (!parse_u64(optarg, &w.boost_size, true)) {
                fprintf(stderr, "pheap_namebench: bad --boost-size\n");
                return 2;
            }
            break;
        case O_SEED:
            if (!parse_u64(optarg, &w.seed, false)) {
                fprintf(stderr, "pheap_namebench: bad --seed\n");
                return 2;
            }
            break;
        case O_RANDOM_CREATE: w.random_create = true; break;
        case 'q': quick = true; break;
        case 'j': json = optarg; break;
        case 'm': markdown = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    if (quick) {
        if (!names_set)
            w.n = 200000;
        if (!reps_set)
            reps = 3;
    }
    if (!w.lookups)
        w.lookups = 2 * w.n;
    if (!w.misses)
        w.misses = w.n;
    uint64_t auto_size = std::max<uint64_t>(256ull << 20, w.n * 512);
    if (!w.heap_size)
        w.heap_size = auto_size;
    if (!w.boost_size)
        w.boost_size = auto_size;

    FILE *jf = nullptr, *mf = nullptr;
    if (json && !(jf = fopen(json, "a"))) {
        fprintf(stderr, "pheap_namebench: %s: %s\n", json, strerror(errno));
        return 2;
    }
    if (markdown && !(mf = fopen(markdown, "a"))) {
        fprintf(stderr, "pheap_namebench: %s: %s\n", markdown, strerror(errno));
        return 2;
    }

    int failed = 0;
    for (const std::string &kind : kinds) {
        w.long_names = kind == "long";
        name_set s;
        make_names(w, &s);
        std::vector<row> rows;
        for (const system_desc &sys : systems) {
            row r;
            r.sys = sys;
            rows.push_back(r);
        }
        for (unsigned rep = 0; rep < reps; rep++) {
            for (row &r : rows) {
                run_result res = run_isolated(w, s, r.sys);
                if (!res.ok) {
                    r.error = res.error;
                    failed = 1;
                    fprintf(stderr, "pheap_namebench: %s, %s names, run %u: %s\n",
                            r.sys.name.c_str(), kind.c_str(), rep + 1, res.error);
                    continue;
                }
                r.flush = res.flush;
                r.has_counters = res.has_counters;
                r.runs.push_back(res);
            }
        }
        print_text(stdout, w, s, reps, rows);
        if (jf)
            print_json(jf, w, s, reps, rows);
        if (mf)
            print_markdown(mf, w, s, reps, rows);
    }
    if (jf)
        fclose(jf);
    if (mf)
        fclose(mf);
    return failed;
}
