/*
 * cpp_wordcount.cpp -- a word counter whose table is a
 * boost::container::map<string, size_t> inside a pheap heap.  Each line of
 * input is counted in one transaction: after a kill -9 at any instant the
 * table holds exactly the lines whose commit was reported ("committed N").
 *
 * A line whose words are all known changes counts in place (each snapshotted
 * first).  A line with a new word changes the tree's shape, which the map
 * does in place across many nodes: so the transaction builds a new copy of
 * the map (its blocks exist only if the transaction commits), changes it,
 * and makes it current; the old copy is destroyed by a second transaction
 * (the root remembers it until then, so a kill between the two only
 * postpones that).  Copies cost time in the table's size: a program with a
 * large, growing vocabulary would batch more lines per transaction.
 *
 * Each run maps the heap at another address than the run before (it
 * occupies the old range when the kernel hands it out again), to show that
 * nothing in the table depends on where it is mapped.
 *
 * Usage: cpp_wordcount HEAP            count the words of stdin, a line per transaction
 *        cpp_wordcount HEAP --dump     print "lines N", "words N" and every "word count"
 *        cpp_wordcount HEAP --check    verify the table (sum of counts) and the heap
 */
#include <pheap.hpp>

#include <boost/container/map.hpp>
#include <boost/container/string.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <sys/mman.h>

namespace {

template <class T>
using alloc = pheap::allocator<T>;
using pstring = boost::container::basic_string<char, std::char_traits<char>, alloc<char>>;
/* std::less<>: looked up with a std::string_view, no string made in the heap */
using table = boost::container::map<pstring, std::uint64_t, std::less<>,
                                    alloc<std::pair<const pstring, std::uint64_t>>>;

struct counter {              /* the object root "wordcount" names */
    pheap::ptr<table> current; /* the table */
    pheap::ptr<table> old;     /* a replaced table not yet destroyed */
    std::uint64_t lines;       /* lines counted */
    std::uint64_t words;       /* words counted: the sum of the counts */
    std::uint64_t last_base;   /* where the heap was mapped by the last run */
};

std::uint64_t base_of(const pheap::heap &h)
{
    struct pheap_stats st;
    pheap_stats(h.get(), &st);
    return reinterpret_cast<std::uintptr_t>(h.direct(st.data_offset)) - st.data_offset;
}

/* Opens the heap, at another address than the last run's. */
pheap::heap open_elsewhere(const std::string &path, void **hold, std::size_t *hold_len)
{
    pheap::heap h = pheap::heap::create(path, 64 << 20);
    counter &c = h.root<counter>("wordcount");
    std::uint64_t base = base_of(h);
    if (base == c.last_base) {
        struct pheap_stats st;
        pheap_stats(h.get(), &st);
        h.close();
        *hold_len = st.max_size > st.size ? st.max_size : st.size;
        *hold = mmap(reinterpret_cast<void *>(base), *hold_len, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
        h = pheap::heap::open(path);
    }
    return h;
}

void destroy_old(pheap::heap &h, counter &c)
{
    if (!c.old)
        return;
    pheap::run(h, [&](pheap::transaction &tx) {
        tx.add(c.old);
        h.destroy(c.old);
        c.old = nullptr;
    });
}

void count_line(pheap::heap &h, counter &c, const std::vector<std::string> &words)
{
    bool grows = false;
    for (const std::string &w : words)
        grows = grows || c.current->find(std::string_view(w)) == c.current->end();
    pheap::run(h, [&](pheap::transaction &tx) {
        tx.add(c);
        table *t = c.current.get();
        if (grows) { /* a new copy: all of its blocks belong to the transaction */
            t = h.make<table>(*c.current);
            c.old = c.current;
            c.current = t;
        }
        for (const std::string &w : words) {
            auto it = t->find(std::string_view(w));
            if (it == t->end())
                t->emplace(pstring(w.c_str(), t->get_allocator()), 1);
            else {
                tx.add(it->second); /* free for a block of the transaction */
                it->second++;
            }
        }
        c.lines++;
        c.words += words.size();
    });
    destroy_old(h, c);
}

int dump(const counter &c)
{
    std::printf("lines %llu\nwords %llu\n", (unsigned long long)c.lines, (unsigned long long)c.words);
    for (const auto &kv : *c.current)
        std::printf("%.*s %llu\n", int(kv.first.size()), kv.first.data(),
                    (unsigned long long)kv.second);
    return 0;
}

int check(pheap::heap &h, const counter &c)
{
    std::uint64_t sum = 0;
    for (const auto &kv : *c.current)
        sum += kv.second;
    pheap_check_report rep;
    int rc = pheap_check(h.get(), &rep);
    std::printf("lines %llu, words %llu, distinct %zu, sum of counts %llu, heap check %s\n",
                (unsigned long long)c.lines, (unsigned long long)c.words, c.current->size(),
                (unsigned long long)sum, rc ? rep.first_error : "ok");
    return sum == c.words && rc == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char **argv)
{
    if (argc < 2) {
        std::fprintf(stderr, "usage: cpp_wordcount HEAP [--dump | --check]\n");
        return 2;
    }
    void *hold = MAP_FAILED;
    std::size_t hold_len = 0;
    try {
        pheap::heap h = open_elsewhere(argv[1], &hold, &hold_len);
        counter &c = h.root<counter>("wordcount");
        std::uint64_t base = base_of(h);
        std::fprintf(stderr, "cpp_wordcount: heap mapped at %#llx (last run: %#llx)\n",
                     (unsigned long long)base, (unsigned long long)c.last_base);
        c.last_base = base; /* one aligned word: no transaction needed */
        h.persist(c.last_base);
        if (!c.current) /* first run: an empty table */
            pheap::run(h, [&](pheap::transaction &tx) {
                tx.add(c.current);
                c.current = h.make<table>(alloc<table>(h));
            });
        destroy_old(h, c); /* left by a kill between the two transactions */

        if (argc > 2 && std::strcmp(argv[2], "--dump") == 0)
            return dump(c);
        if (argc > 2 && std::strcmp(argv[2], "--check") == 0)
            return check(h, c);
        std::string line;
        while (std::getline(std::cin, line)) {
            std::istringstream in(line);
            std::vector<std::string> words;
            for (std::string w; in >> w;)
                words.push_back(w);
            count_line(h, c, words);
            std::printf("committed %llu\n", (unsigned long long)c.lines);
            std::fflush(stdout);
        }
        h.close();
    } catch (const std::exception &e) {
        std::fprintf(stderr, "cpp_wordcount: %s\n", e.what());
        return 1;
    }
    if (hold != MAP_FAILED)
        munmap(hold, hold_len);
    return 0;
}
