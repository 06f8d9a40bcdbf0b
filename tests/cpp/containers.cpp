/*
 * containers.cpp -- containers whose whole structure lives in the heap
 * through pheap::allocator: each is filled, the heap closed, and reopened
 * at a different address (the old address range is occupied first), in
 * this process and then in another one (this program exec'd again); after
 * every step its contents are compared with a volatile copy that went
 * through the same operations.
 *
 * Every case runs in a child process, so a container that keeps raw
 * pointers (and crashes, or reads garbage, at another address) is reported
 * as broken, not as a crash of the test.  The expected result of each case
 * is the table of docs/CPP.md: the test fails when a case that should work
 * does not, and also when one documented as broken starts working (the
 * table would be wrong).  Containers that do not compile with pheap::ptr
 * are checked by refused.sh.
 *
 * Usage: cpp_containers [CASE]   (and, internally, --verify CASE HEAP PHASE)
 */
#include "check.hpp"
#include "remap.hpp"

#include <boost/container/deque.hpp>
#include <boost/container/flat_map.hpp>
#include <boost/container/flat_set.hpp>
#include <boost/container/list.hpp>
#include <boost/container/map.hpp>
#include <boost/container/set.hpp>
#include <boost/container/slist.hpp>
#include <boost/container/stable_vector.hpp>
#include <boost/container/string.hpp>
#include <boost/container/vector.hpp>
#include <boost/unordered_map.hpp>

#include <algorithm>
#include <deque>
#include <forward_list>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace bc = boost::container;
template <class T>
using A = pheap::allocator<T>;

namespace {

constexpr int PER_PHASE = 400;
constexpr int PHASES = 3; /* create, reopen here, reopen in another process */

int value(int phase, int i) { return (phase * 7919 + i * 104729) % 5000; }

/* ---- operations, the same on the heap's container and the volatile one -- */

struct seq_ops { /* push_back, erase from the front, change in place */
    template <class C>
    static void apply(C &c, int phase)
    {
        for (int i = 0; i < PER_PHASE; i++)
            c.push_back(value(phase, i));
        for (int i = 0; i < PER_PHASE / 4; i++)
            c.erase(c.begin());
        for (auto &x : c)
            x += phase;
    }
};
struct front_ops { /* singly linked lists */
    template <class C>
    static void apply(C &c, int phase)
    {
        for (int i = 0; i < PER_PHASE; i++)
            c.push_front(value(phase, i));
        for (int i = 0; i < PER_PHASE / 4; i++)
            c.pop_front();
        for (auto &x : c)
            x += phase;
    }
};
struct map_ops {
    template <class C>
    static void apply(C &c, int phase)
    {
        for (int i = 0; i < PER_PHASE; i++)
            c[value(phase, i)] += i + 1;
        for (int i = 0; i < PER_PHASE / 3; i++)
            c.erase(value(phase, 3 * i));
    }
};
struct set_ops {
    template <class C>
    static void apply(C &c, int phase)
    {
        for (int i = 0; i < PER_PHASE; i++)
            c.insert(value(phase, i));
        for (int i = 0; i < PER_PHASE / 3; i++)
            c.erase(value(phase, 3 * i));
    }
};
struct multimap_ops {
    template <class C>
    static void apply(C &c, int phase)
    {
        for (int i = 0; i < PER_PHASE; i++)
            c.insert(typename C::value_type(value(phase, i) % 300, i));
        for (int i = 0; i < PER_PHASE / 20; i++)
            c.erase(value(phase, 3 * i) % 300);
    }
};
struct string_ops {
    template <class C>
    static void apply(C &c, int phase)
    {
        for (int i = 0; i < PER_PHASE; i++)
            c.push_back(char('a' + value(phase, i) % 26));
        c.erase(0, PER_PHASE / 4);
        c.append("-phase-");
    }
};
/* A map of strings to vectors: nested containers, all with the heap's
 * allocator (the key and the value are made with it). */
struct nested_ops {
    template <class C>
    static void apply(C &c, int phase)
    {
        using key = typename C::key_type;
        using vec = typename C::mapped_type;
        for (int i = 0; i < PER_PHASE / 4; i++) {
            std::string k = "key-" + std::to_string(value(phase, i) % 97) + "-long-enough-to-leave-sso";
            auto it = c.find(key(k.c_str(), c.get_allocator()));
            if (it == c.end())
                it = c.emplace(key(k.c_str(), c.get_allocator()), vec(c.get_allocator())).first;
            it->second.push_back(i);
        }
    }
};

/* ---- contents as text ---------------------------------------------------- */

template <class T>
void put(std::ostringstream &o, const T &x);
template <class K, class V>
void put(std::ostringstream &o, const std::pair<K, V> &p);
template <class K, class V>
void put(std::ostringstream &o, const bc::dtl::pair<K, V> &p);
template <class T, class Al>
void put(std::ostringstream &o, const bc::vector<T, Al> &v);
template <class Al>
void put(std::ostringstream &o, const bc::basic_string<char, std::char_traits<char>, Al> &s);

template <class T>
void put(std::ostringstream &o, const T &x) { o << x; }
template <class K, class V>
void put(std::ostringstream &o, const std::pair<K, V> &p) { put(o, p.first); o << '='; put(o, p.second); }
template <class K, class V>
void put(std::ostringstream &o, const bc::dtl::pair<K, V> &p) { put(o, p.first); o << '='; put(o, p.second); }
template <class T, class Al>
void put(std::ostringstream &o, const bc::vector<T, Al> &v)
{
    o << '[';
    for (auto &x : v)
        o << x << ',';
    o << ']';
}
template <class Al>
void put(std::ostringstream &o, const bc::basic_string<char, std::char_traits<char>, Al> &s)
{
    o << std::string(s.data(), s.size());
}

template <class C>
std::string dump(const C &c)
{
    std::vector<std::string> items;
    for (const auto &x : c) {
        std::ostringstream o;
        put(o, x);
        items.push_back(o.str());
    }
    std::string out = std::to_string(items.size()) + ":";
    for (auto &s : items)
        out += s + ";";
    return out;
}
template <class Al>
std::string dump(const bc::basic_string<char, std::char_traits<char>, Al> &s)
{
    return std::to_string(s.size()) + ":" + std::string(s.data(), s.size());
}
template <class C>
std::string dump_sorted(const C &c) /* unordered containers */
{
    std::vector<std::string> items;
    for (const auto &x : c) {
        std::ostringstream o;
        put(o, x);
        items.push_back(o.str());
    }
    std::sort(items.begin(), items.end());
    std::string out = std::to_string(items.size()) + ":";
    for (auto &s : items)
        out += s + ";";
    return out;
}

/* ---- the cases ------------------------------------------------------------- */

struct case_t {
    const char *name;
    bool works; /* what docs/CPP.md says */
    std::function<std::string(pheap::heap &, int phase)> step; /* heap container after phase */
    std::function<std::string(int phase)> model;               /* volatile copy after phase */
    std::function<std::string(pheap::heap &)> peek;            /* heap container, unchanged */
    std::function<void(pheap::heap &)> destroy;
};

template <class P, class V, class Ops, bool Sorted = false>
case_t make_case(const char *name, bool works)
{
    auto show = [](const auto &c) { return Sorted ? dump_sorted(c) : dump(c); };
    case_t k;
    k.name = name;
    k.works = works;
    k.step = [show](pheap::heap &h, int phase) {
        P *c = phase == 0 ? h.make_named<P>("c", typename P::allocator_type(h)) : h.find<P>("c");
        if (!c)
            return std::string("(no container)");
        Ops::apply(*c, phase);
        return show(*c);
    };
    k.peek = [show](pheap::heap &h) {
        P *c = h.find<P>("c");
        return c ? show(*c) : std::string("(no container)");
    };
    k.destroy = [](pheap::heap &h) { h.destroy_named<P>("c"); };
    k.model = [show](int phase) {
        V v;
        for (int p = 0; p <= phase; p++)
            Ops::apply(v, p);
        return show(v);
    };
    return k;
}

using pi = std::pair<const int, int>;
using bstring = bc::basic_string<char, std::char_traits<char>, A<char>>;
using bvec = bc::vector<int, A<int>>;

std::vector<case_t> cases()
{
    return {
        make_case<bc::vector<int, A<int>>, bc::vector<int>, seq_ops>("boost::container::vector", true),
        make_case<bc::deque<int, A<int>>, bc::deque<int>, seq_ops>("boost::container::deque", true),
        make_case<bc::list<int, A<int>>, bc::list<int>, seq_ops>("boost::container::list", true),
        make_case<bc::slist<int, A<int>>, bc::slist<int>, front_ops>("boost::container::slist", true),
        make_case<bc::stable_vector<int, A<int>>, bc::stable_vector<int>, seq_ops>(
            "boost::container::stable_vector", true),
        make_case<bc::map<int, int, std::less<int>, A<pi>>, bc::map<int, int>, map_ops>(
            "boost::container::map", true),
        make_case<bc::multimap<int, int, std::less<int>, A<pi>>, bc::multimap<int, int>, multimap_ops>(
            "boost::container::multimap", true),
        make_case<bc::set<int, std::less<int>, A<int>>, bc::set<int>, set_ops>("boost::container::set", true),
        make_case<bc::flat_map<int, int, std::less<int>, A<std::pair<int, int>>>, bc::flat_map<int, int>,
                  map_ops>("boost::container::flat_map", true),
        make_case<bc::flat_set<int, std::less<int>, A<int>>, bc::flat_set<int>, set_ops>(
            "boost::container::flat_set", true),
        make_case<boost::unordered_map<int, int, boost::hash<int>, std::equal_to<int>, A<pi>>,
                  boost::unordered_map<int, int>, map_ops, true>("boost::unordered_map", true),
        make_case<bstring, bc::string, string_ops>("boost::container::string", true),
        make_case<bc::map<bstring, bvec, std::less<bstring>, A<std::pair<const bstring, bvec>>>,
                  bc::map<bc::string, bc::vector<int>>, nested_ops>(
            "boost::container::map<string, vector<int>>", true),
        make_case<std::vector<int, A<int>>, std::vector<int>, seq_ops>("std::vector", true),
        make_case<std::deque<int, A<int>>, std::deque<int>, seq_ops>("std::deque", true),
        make_case<std::forward_list<int, A<int>>, std::forward_list<int>, front_ops>("std::forward_list",
                                                                                    false),
        make_case<std::unordered_map<int, int, std::hash<int>, std::equal_to<int>, A<pi>>,
                  std::unordered_map<int, int>, map_ops, true>("std::unordered_map", false),
        make_case<std::unordered_set<int, std::hash<int>, std::equal_to<int>, A<int>>,
                  std::unordered_set<int>, set_ops, true>("std::unordered_set", false),
    };
}

std::string self_exe;

/* Phase 2 in this process, exec'd for it: reopens, checks, changes, closes. */
int verify(const std::string &name, const std::string &file, const std::string &expect_before)
{
    for (const case_t &k : cases()) {
        if (name != k.name)
            continue;
        (void)expect_before;
        pheap::heap h = pheap::heap::open(file);
        std::string got = k.step(h, 2);
        h.close();
        return got == k.model(2) ? 0 : 1;
    }
    return 2;
}

/* The whole life of one case; the exit code says whether it worked. */
int run_case(const case_t &k)
{
    std::string file = check::path(std::string("c-") + std::to_string(getpid()) + ".heap");
    check::range first;
    {
        pheap::heap h = pheap::heap::create(file, 32 << 20);
        if (k.step(h, 0) != k.model(0))
            return 10;
        first = check::mapped_range(h);
        h.close();
    }
    check::occupied hold(first);
    if (!hold.ok())
        return 11;
    {
        pheap::heap h = pheap::heap::open(file);
        if (check::mapped_range(h).lo == first.lo)
            return 12;
        if (k.step(h, 1) != k.model(1))
            return 13;
        h.close();
    }
    pid_t pid = fork();
    if (pid == 0) {
        execl(self_exe.c_str(), self_exe.c_str(), "--verify", k.name, file.c_str(), "", (char *)nullptr);
        _exit(14);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return 15;
    /* Back here, after the other process: the container it changed, once more
     * at an address of this process. */
    pheap::heap h = pheap::heap::open(file);
    if (k.peek(h) != k.model(2))
        return 16;
    /* Destroying it gives every block back: only the name directory stays. */
    k.destroy(h);
    struct pheap_stats st2;
    if (pheap_stats(h.get(), &st2) != 0 || st2.live_blocks != st2.name_segments)
        return 17;
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    self_exe = n > 0 ? std::string(buf, size_t(n)) : argv[0];
    if (argc == 5 && std::string(argv[1]) == "--verify")
        return verify(argv[2], argv[3], argv[4]);
    /* Made here, so that this process removes it at exit: each case runs in
     * a child that leaves by _exit, which runs no exit handler. */
    (void)check::dir();
    int failed = 0;
    std::printf("%-45s %-8s %s\n", "container", "expected", "result");
    for (const case_t &k : cases()) {
        if (argc > 1 && !std::strstr(k.name, argv[1]))
            continue;
        std::fflush(stdout);
        pid_t pid = fork();
        if (pid == 0)
            _exit(run_case(k));
        int st = 0;
        waitpid(pid, &st, 0);
        bool worked = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        std::string how = worked ? "works"
                          : WIFSIGNALED(st) ? "breaks (signal " + std::to_string(WTERMSIG(st)) + ")"
                                            : "breaks (step " + std::to_string(WEXITSTATUS(st)) + ")";
        bool ok = worked == k.works;
        std::printf("%-45s %-8s %s%s\n", k.name, k.works ? "works" : "breaks", how.c_str(),
                    ok ? "" : "   <-- differs from docs/CPP.md");
        failed += !ok;
    }
    std::printf("%d cases differ from the table\n", failed);
    return failed ? 1 : 0;
}
