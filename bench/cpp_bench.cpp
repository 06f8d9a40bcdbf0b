/*
 * cpp_bench.cpp -- pheap_cppbench: what the C++ layer costs.
 *
 *   list walk    a linked list of N 16-byte nodes (one array, linked in a
 *                random order, or in array order), walked end to end:
 *                ns per node through pheap::ptr links in a heap, against
 *                the same code with raw pointers in DRAM (new[]);
 *   map lookup   boost::container::map<long, long> of N keys, M random
 *                lookups: ns per lookup with pheap::allocator (ptr links,
 *                nodes in the heap) against std::allocator in DRAM; the
 *                trees of ptr use pheap/boost.hpp's node traits, or in
 *                pheap_cppbench_generic (built with
 *                PHEAP_CPPBENCH_GENERIC_TREE) Boost's generic ones;
 *   vector push  boost::container::vector<int, pheap::allocator<int>>:
 *                N push_backs in one transaction, and one transaction per
 *                push_back (push_backs per second), with the heap's flush
 *                back end (PHEAP_FLUSH, as bench/run.sh sets it) and with
 *                flush none.
 * Each figure is the median of --reps repetitions; the map's lookups run
 * in chunks taken by every variant in turn, timed in the thread's CPU
 * time, and a ratio is the median of the chunks'.  Output: a table on
 * stdout; --json appends one JSON object per figure, --markdown the table.
 *
 * Usage: pheap_cppbench [--quick] [--heap-dir DIR] [--reps N] [--only list|map|vector]
 *                       [--json FILE] [--markdown FILE]
 */
#include <pheap.hpp>
#ifndef PHEAP_CPPBENCH_GENERIC_TREE
#include <pheap/boost.hpp>
#endif

#include <boost/container/map.hpp>
#include <boost/container/vector.hpp>

#include "vec_pmemobj.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <time.h>
#include <unistd.h>

namespace {

std::uint64_t now_ns()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return std::uint64_t(ts.tv_sec) * 1000000000ull + std::uint64_t(ts.tv_nsec);
}

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

struct config {
    std::size_t list_nodes = 4 << 20;
    std::size_t map_keys = 1 << 20, lookups = 1 << 20;
    std::size_t pushes = 1 << 22, tx_pushes = 20000;
    unsigned reps = 5;
    std::string dir = "/dev/shm";
    std::string only; /* list, map or vector; empty: all */
};

struct figure {
    std::string bench, variant, unit;
    double value, lo, hi; /* the median and the spread of the repetitions */
};
std::vector<figure> figures;

#ifdef PHEAP_CPPBENCH_GENERIC_TREE
const char *tree_code = "generic"; /* Boost.Intrusive's node traits for ptr */
#else
const char *tree_code = "pheap/boost.hpp";
#endif

void report(const std::string &bench, const std::string &variant, const std::string &unit, double v,
            double lo, double hi)
{
    figures.push_back({bench, variant, unit, v, lo, hi});
    std::printf("%-12s %-44s %12.3f %s [%.3f - %.3f]\n", bench.c_str(), variant.c_str(), v,
                unit.c_str(), lo, hi);
    std::fflush(stdout);
}

/* The median of the repetitions, with the slowest and fastest. */
void report(const std::string &bench, const std::string &variant, const std::string &unit,
            const std::vector<double> &reps)
{
    std::vector<double> v = reps;
    std::sort(v.begin(), v.end());
    report(bench, variant, unit, median(v), v.front(), v.back());
}

/* a[i] / b[i]: the ratio of each repetition, both measured in it. */
std::vector<double> ratios(const std::vector<double> &a, const std::vector<double> &b)
{
    std::vector<double> r;
    for (std::size_t i = 0; i < a.size() && i < b.size(); i++)
        r.push_back(a[i] / b[i]);
    return r;
}

pheap::heap make_heap(const config &c, const char *name, std::uint64_t size, unsigned flush)
{
    std::string path = c.dir + "/" + name + "-" + std::to_string(getpid()) + ".heap";
    unlink(path.c_str());
    pheap_options o{};
    o.size = size;
    o.flags = PHEAP_CREATE | PHEAP_EXCL;
    o.flush = flush;
    pheap::heap h = pheap::heap::open(path, &o);
    unlink(path.c_str()); /* the open handle keeps it */
    return h;
}

/* ---- list walk ------------------------------------------------------------- */

struct pnode {
    pheap::ptr<pnode> next;
    long value;
};
struct rnode {
    rnode *next;
    long value;
};

template <class Node, class Get>
__attribute__((noinline)) long walk(const Node *n, Get next)
{
    long s = 0;
    while (n) {
        s += n->value;
        n = next(n);
    }
    return s;
}

template <class Node, class Link>
void link_list(Node *nodes, const std::vector<std::size_t> &order, Link set)
{
    for (std::size_t i = 0; i + 1 < order.size(); i++)
        set(nodes[order[i]], &nodes[order[i + 1]]);
    set(nodes[order.back()], nullptr);
    for (std::size_t i = 0; i < order.size(); i++)
        nodes[i].value = long(i);
}

void bench_list(const config &c)
{
    std::size_t n = c.list_nodes;
    pheap::heap h = make_heap(c, "cppbench-list", 2 * n * sizeof(pnode) + (64 << 20), PHEAP_FLUSH_NONE);
    /* The same layout four ways: ptr or raw links, in the heap or in DRAM. */
    auto *ph = static_cast<pnode *>(h.direct(pheap_alloc(h.get(), n * sizeof(pnode))));
    auto *rh = static_cast<rnode *>(h.direct(pheap_alloc(h.get(), n * sizeof(rnode))));
    std::vector<pnode> pd(n);
    std::vector<rnode> rd(n);
    auto pnext = [](const pnode *x) { return x->next.get(); };
    auto rnext = [](const rnode *x) { return x->next; };
    for (int shuffled = 1; shuffled >= 0; shuffled--) {
        std::vector<std::size_t> order(n);
        std::iota(order.begin(), order.end(), 0);
        if (shuffled)
            std::shuffle(order.begin() + 1, order.end(), std::mt19937_64(42));
        link_list(ph, order, [](pnode &a, pnode *b) { a.next = b; });
        link_list(pd.data(), order, [](pnode &a, pnode *b) { a.next = b; });
        link_list(rh, order, [](rnode &a, rnode *b) { a.next = b; });
        link_list(rd.data(), order, [](rnode &a, rnode *b) { a.next = b; });
        std::vector<double> t[4];
        long sums[4] = {0, 0, 0, 0};
        for (unsigned r = 0; r < c.reps; r++) {
            /* interleaved, so that a busy moment of the machine hits all four */
            std::uint64_t t0 = now_ns();
            sums[0] += walk(ph, pnext);
            std::uint64_t t1 = now_ns();
            sums[1] += walk(pd.data(), pnext);
            std::uint64_t t2 = now_ns();
            sums[2] += walk(rh, rnext);
            std::uint64_t t3 = now_ns();
            sums[3] += walk(rd.data(), rnext);
            std::uint64_t t4 = now_ns();
            t[0].push_back(double(t1 - t0) / double(n));
            t[1].push_back(double(t2 - t1) / double(n));
            t[2].push_back(double(t3 - t2) / double(n));
            t[3].push_back(double(t4 - t3) / double(n));
        }
        if (sums[0] != sums[1] || sums[0] != sums[2] || sums[0] != sums[3])
            std::fprintf(stderr, "pheap_cppbench: the walks disagree\n");
        std::string kind = shuffled ? "random order" : "array order";
        report("list walk", "pheap::ptr, heap, " + kind, "ns/node", t[0]);
        report("list walk", "pheap::ptr, DRAM, " + kind, "ns/node", t[1]);
        report("list walk", "raw pointer, heap, " + kind, "ns/node", t[2]);
        report("list walk", "raw pointer, DRAM, " + kind, "ns/node", t[3]);
        report("list walk", "ptr heap / raw DRAM, " + kind, "ratio", ratios(t[0], t[3]));
        report("list walk", "ptr / raw, both in the heap, " + kind, "ratio", ratios(t[0], t[2]));
    }
}

/* ---- map lookup ------------------------------------------------------------ */

/* Blocks of the heap with raw pointers: where the nodes are, without ptr
 * (valid only in this mapping; for measuring, not for keeping). */
template <class T>
struct raw_heap_allocator {
    using value_type = T;
    ::pheap_handle *h;
    explicit raw_heap_allocator(::pheap_handle *heap) : h(heap) {}
    template <class U>
    raw_heap_allocator(const raw_heap_allocator<U> &o) : h(o.h) {}
    T *allocate(std::size_t n) { return static_cast<T *>(pheap_direct(h, pheap_alloc(h, n * sizeof(T)))); }
    void deallocate(T *p, std::size_t) { pheap_free(h, pheap_offset(h, p)); }
    template <class U>
    bool operator==(const raw_heap_allocator<U> &o) const { return h == o.h; }
    template <class U>
    bool operator!=(const raw_heap_allocator<U> &o) const { return h != o.h; }
};

/* operator new's blocks handed out as ptr: the ptr code on DRAM's nodes. */
template <class T>
struct ptr_dram_allocator {
    using value_type = T;
    using pointer = pheap::ptr<T>;
    using const_pointer = pheap::ptr<const T>;
    using void_pointer = pheap::ptr<void>;
    using const_void_pointer = pheap::ptr<const void>;
    ptr_dram_allocator() = default;
    template <class U>
    ptr_dram_allocator(const ptr_dram_allocator<U> &) {}
    pointer allocate(std::size_t n) { return pointer(static_cast<T *>(::operator new(n * sizeof(T)))); }
    void deallocate(pointer p, std::size_t) { ::operator delete(p.get()); }
    template <class U>
    bool operator==(const ptr_dram_allocator<U> &) const { return true; }
    template <class U>
    bool operator!=(const ptr_dram_allocator<U> &) const { return false; }
};

std::uint64_t cpu_ns()
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return std::uint64_t(ts.tv_sec) * 1000000000ull + std::uint64_t(ts.tv_nsec);
}

/* The keys [from, to) looked up in m: ns of the thread's CPU time. */
template <class Map>
__attribute__((noinline)) double lookups(const Map &m, const long *from, const long *to, long *sum)
{
    std::uint64_t t0 = cpu_ns();
    long s = 0;
    for (const long *k = from; k != to; k++) {
        auto it = m.find(*k);
        s += it == m.end() ? 0 : it->second;
    }
    *sum += s;
    return double(cpu_ns() - t0);
}

void bench_map(const config &c)
{
    namespace bc = boost::container;
    using kv = std::pair<const long, long>;
    /* Boost packs a node's colour into its parent pointer only for raw
     * pointers (40-byte nodes); with ptr it is a field (48 bytes).  The
     * "same node" baselines turn the packing off, so that they differ from
     * the ptr map in the pointers alone. */
    using wide = bc::tree_assoc_options<bc::optimize_size<false>>::type;
    using pmap = bc::map<long, long, std::less<long>, pheap::allocator<kv>>;
    using pdmap = bc::map<long, long, std::less<long>, ptr_dram_allocator<kv>>;
    using hmap = bc::map<long, long, std::less<long>, raw_heap_allocator<kv>, wide>;
    using rmap = bc::map<long, long>;
    using rwmap = bc::map<long, long, std::less<long>, bc::new_allocator<kv>, wide>;
    pheap::heap h = make_heap(c, "cppbench-map", std::uint64_t(c.map_keys) * 128 + (64 << 20),
                              PHEAP_FLUSH_NONE);
    pmap &pm = *h.make<pmap>(pheap::allocator<pmap>(h));
    pdmap pdm;
    hmap hm{raw_heap_allocator<kv>(h.get())};
    rmap rm;
    rwmap rwm;
    /* Filled in turns, so that the DRAM maps' nodes interleave in malloc's
     * memory alike, and the heap maps' in the heap's slabs alike. */
    std::mt19937_64 rng(7);
    std::vector<long> inserted;
    for (std::size_t i = 0; i < c.map_keys; i++) {
        long k = long(rng() >> 1);
        pm.emplace(k, long(i));
        pdm.emplace(k, long(i));
        hm.emplace(k, long(i));
        rm.emplace(k, long(i));
        rwm.emplace(k, long(i));
        inserted.push_back(k);
    }
    std::vector<long> keys(c.lookups);
    for (auto &k : keys) /* three of four hit */
        k = rng() % 4 ? inserted[rng() % inserted.size()] : long(rng() >> 1);
    enum { P, PD, H, R, RW, N };
    /* The lookups go in chunks, and every variant runs each chunk in turn
     * (starting with another one each time), so that a busy moment of the
     * machine falls on all of them alike; a ratio is the median of the
     * chunks' ratios (one per repetition), a time the repetition's sum. */
    const std::size_t chunk = std::min<std::size_t>(c.lookups, 16384);
    const std::size_t chunks = c.lookups / chunk;
    std::vector<double> t[N], q[5];
    long sums[N] = {0, 0, 0, 0, 0};
    for (unsigned r = 0; r < c.reps; r++) {
        double total[N] = {0, 0, 0, 0, 0};
        std::vector<double> chunk_ns[N];
        for (std::size_t ch = 0; ch < chunks; ch++) {
            const long *from = keys.data() + ch * chunk, *to = from + chunk;
            for (int j = 0; j < N; j++) {
                int v = int((j + r + ch) % N);
                double ns = v == P    ? lookups(pm, from, to, &sums[v])
                            : v == PD ? lookups(pdm, from, to, &sums[v])
                            : v == H  ? lookups(hm, from, to, &sums[v])
                            : v == R  ? lookups(rm, from, to, &sums[v])
                                      : lookups(rwm, from, to, &sums[v]);
                total[v] += ns;
                chunk_ns[v].push_back(ns);
            }
        }
        for (int v = 0; v < N; v++)
            t[v].push_back(total[v] / double(chunks * chunk));
        /* the per-chunk ratios of this repetition: P/R, P/RW, PD/RW, P/H, H/RW */
        const int pairs[5][2] = {{P, R}, {P, RW}, {PD, RW}, {P, H}, {H, RW}};
        for (int i = 0; i < 5; i++)
            q[i].push_back(median(ratios(chunk_ns[pairs[i][0]], chunk_ns[pairs[i][1]])));
    }
    for (int v = 1; v < N; v++)
        if (sums[v] != sums[P])
            std::fprintf(stderr, "pheap_cppbench: the maps disagree\n");
    report("map lookup", "ptr, heap (pheap::allocator)", "ns/lookup", t[P]);
    report("map lookup", "ptr, DRAM (operator new)", "ns/lookup", t[PD]);
    report("map lookup", "raw, heap blocks, same node", "ns/lookup", t[H]);
    report("map lookup", "raw, DRAM, same node", "ns/lookup", t[RW]);
    report("map lookup", "raw, DRAM, std::allocator", "ns/lookup", t[R]);
    report("map lookup", "ptr heap / raw DRAM std::allocator", "ratio", q[0]);
    report("map lookup", "ptr heap / raw DRAM same node", "ratio", q[1]);
    report("map lookup", "ptr DRAM / raw DRAM same node", "ratio", q[2]);
    report("map lookup", "ptr / raw, both in the heap", "ratio", q[3]);
    report("map lookup", "raw heap / raw DRAM, same node", "ratio", q[4]);
}

/* ---- vector push_back in transactions -------------------------------------- */

/* push/s of each repetition: in one transaction, and a transaction each */
std::pair<std::vector<double>, std::vector<double>> bench_vector(const config &c, unsigned flush,
                                                                 const std::string &flush_name)
{
    using vec = boost::container::vector<int, pheap::allocator<int>>;
    std::vector<double> one, each, fences, flushes, reflushes;
    for (unsigned r = 0; r < c.reps; r++) {
        pheap::heap h = make_heap(c, "cppbench-vec", std::uint64_t(c.pushes) * 16 + (64 << 20), flush);
        vec &v = *h.make<vec>(pheap::allocator<vec>(h));
        std::uint64_t t0 = now_ns();
        pheap::run(h, [&](pheap::transaction &tx) {
            tx.add(v);
            for (std::size_t i = 0; i < c.pushes; i++)
                v.push_back(int(i));
        });
        std::uint64_t t1 = now_ns();
        one.push_back(double(c.pushes) / (double(t1 - t0) / 1e9));
        vec &w = *h.make<vec>(pheap::allocator<vec>(h));
        struct pheap_stats s0, s1;
        pheap_stats(h.get(), &s0);
        t0 = now_ns();
        for (std::size_t i = 0; i < c.tx_pushes; i++)
            pheap::run(h, [&](pheap::transaction &tx) {
                tx.add(w); /* the element is built past the size the snapshot restores */
                w.push_back(int(i));
            });
        t1 = now_ns();
        pheap_stats(h.get(), &s1);
        each.push_back(double(c.tx_pushes) / (double(t1 - t0) / 1e9));
        double n = double(c.tx_pushes);
        fences.push_back(double(s1.fences - s0.fences) / n);
        flushes.push_back(double(s1.flushes - s0.flushes) / n);
        reflushes.push_back(double(s1.reflushes - s0.reflushes) / n);
    }
    report("vector push", "one transaction, flush " + flush_name, "push/s", one);
    report("vector push", "a transaction each, flush " + flush_name, "push/s", each);
    report("vector push", "a transaction each, flush " + flush_name, "fences/push", fences);
    report("vector push", "a transaction each, flush " + flush_name, "flushes/push", flushes);
    report("vector push", "a transaction each, flush " + flush_name, "reflushes/push", reflushes);
    return {one, each};
}

/* libpmemobj-cpp's pmem::obj::vector<int>, through the calls it makes
 * (vec_pmemobj.c), in a pool beside the heaps; then pheap's rows of the same
 * repetition over libpmemobj's. */
void bench_vector_pmemobj(const config &c, const std::vector<double> &one, const std::vector<double> &each)
{
    std::vector<double> pone, peach;
    for (unsigned r = 0; r < c.reps; r++) {
        std::string path = c.dir + "/cppbench-vec-pmemobj-" + std::to_string(getpid()) + ".pool";
        double o, e;
        const char *why;
        if (vec_pmemobj_run(path.c_str(), c.pushes, c.tx_pushes, &o, &e, &why) != 0) {
            std::printf("vector push  libpmemobj rows skipped: %s\n", why);
            return;
        }
        pone.push_back(o);
        peach.push_back(e);
    }
    report("vector push", "one transaction, libpmemobj", "push/s", pone);
    report("vector push", "a transaction each, libpmemobj", "push/s", peach);
    report("vector push", "one transaction, pheap / libpmemobj", "ratio", ratios(one, pone));
    report("vector push", "a transaction each, pheap / libpmemobj", "ratio", ratios(each, peach));
}

void json_out(const char *file, const config &c)
{
    FILE *f = std::fopen(file, "a");
    if (!f)
        return;
    for (const figure &x : figures)
        std::fprintf(f,
                     "{\"bench\":\"%s\",\"variant\":\"%s\",\"unit\":\"%s\",\"value\":%.4f,"
                     "\"min\":%.4f,\"max\":%.4f,\"reps\":%u,\"heap_dir\":\"%s\",\"tree\":\"%s\"}\n",
                     x.bench.c_str(), x.variant.c_str(), x.unit.c_str(), x.value, x.lo, x.hi,
                     c.reps, c.dir.c_str(), tree_code);
    std::fclose(f);
}

void markdown_out(const char *file, const config &c)
{
    FILE *f = std::fopen(file, "a");
    if (!f)
        return;
    std::fprintf(f, "\nList of %zu nodes, map of %zu keys (%zu lookups), %zu push_backs in one "
                    "transaction and %zu in one each; median of %u; heaps in %s; trees of ptr: %s.\n\n",
                 c.list_nodes, c.map_keys, c.lookups, c.pushes, c.tx_pushes, c.reps, c.dir.c_str(),
                 tree_code);
    std::fprintf(f, "| benchmark | variant | median | [min - max] | unit |\n"
                    "| --- | --- | ---: | --- | --- |\n");
    for (const figure &x : figures)
        std::fprintf(f, "| %s | %s | %.3g | [%.3g - %.3g] | %s |\n", x.bench.c_str(),
                     x.variant.c_str(), x.value, x.lo, x.hi, x.unit.c_str());
    std::fclose(f);
}

} // namespace

int main(int argc, char **argv)
{
    config c;
    const char *json = nullptr, *markdown = nullptr;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        bool more = i + 1 < argc;
        if (a == "--quick") {
            c.list_nodes = 1 << 20;
            c.map_keys = 1 << 18;
            c.lookups = 1 << 18;
            c.pushes = 1 << 20;
            c.tx_pushes = 5000;
            c.reps = 3;
        } else if (a == "--heap-dir" && more)
            c.dir = argv[++i];
        else if (a == "--only" && more && (std::strcmp(argv[i + 1], "list") == 0 ||
                                           std::strcmp(argv[i + 1], "map") == 0 ||
                                           std::strcmp(argv[i + 1], "vector") == 0))
            c.only = argv[++i];
        else if (a == "--reps" && more)
            c.reps = unsigned(std::max(1, std::atoi(argv[++i])));
        else if (a == "--json" && more)
            json = argv[++i];
        else if (a == "--markdown" && more)
            markdown = argv[++i];
        else {
            std::fprintf(stderr, "usage: pheap_cppbench [--quick] [--heap-dir DIR] [--reps N] "
                                 "[--only list|map|vector] [--json FILE] [--markdown FILE]\n");
            return 2;
        }
    }
    try {
        std::printf("trees of pheap::ptr: %s\n", tree_code);
        if (c.only.empty() || c.only == "list")
            bench_list(c);
        if (c.only.empty() || c.only == "map")
            bench_map(c);
        if (c.only.empty() || c.only == "vector") {
            const char *env = std::getenv("PHEAP_FLUSH");
            auto rates = bench_vector(c, PHEAP_FLUSH_AUTO, env && *env ? env : "auto");
            bench_vector(c, PHEAP_FLUSH_NONE, "none");
            bench_vector_pmemobj(c, rates.first, rates.second);
        }
    } catch (const std::exception &e) {
        std::fprintf(stderr, "pheap_cppbench: %s\n", e.what());
        return 1;
    }
    if (json)
        json_out(json, c);
    if (markdown)
        markdown_out(markdown, c);
    return 0;
}
