/*
 * boost_tree.cpp -- pheap/boost.hpp: Boost.Container's trees of
 * pheap::allocator through pheap's node traits give the results of a
 * std::map on random keys (find, lower_bound, upper_bound, count, in-order
 * and reverse walks), stay whole at another address, and read the same
 * heap as Boost's generic tree code: the same source built without the
 * header (cpp_boost_tree_generic) and this program take turns on one map.
 *
 * Usage: cpp_boost_tree [TEST]   (and, internally, --step HEAP PHASE)
 */
#include "check.hpp"
#include "remap.hpp"

#ifndef PHEAP_TEST_GENERIC_TREE
#include <pheap/boost.hpp>
#endif

#include <boost/container/map.hpp>
#include <boost/container/set.hpp>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>
#include <type_traits>

#include <sys/wait.h>
#include <unistd.h>

namespace bc = boost::container;
using kv = std::pair<const long, long>;
using pmap = bc::map<long, long, std::less<long>, pheap::allocator<kv>>;
using pmultiset = bc::multiset<long, std::less<long>, pheap::allocator<long>>;
using model_map = std::map<long, long>;

#ifndef PHEAP_TEST_GENERIC_TREE
/* The tree code is pheap's: node addresses are raw in the algorithms. */
static_assert(std::is_same_v<boost::intrusive::rbtree_node_traits<pheap::ptr<void>, false>::node_ptr,
                             pheap::detail::rbtree_node *>,
              "pheap/boost.hpp's node traits are used");
#endif

namespace {

/* Phase `phase` of the shared workload, on the heap's map and the model
 * alike: inserts and overwrites of random keys, then erasures of some of
 * them (with rebalancing). */
template <class M>
void change(M &m, int phase)
{
    std::mt19937_64 rng(std::uint64_t(1000 + phase));
    for (int i = 0; i < 3000; i++)
        m[long(rng() % 20000)] = long(rng() % 1000000);
    for (int i = 0; i < 1500; i++)
        m.erase(long(rng() % 20000));
}

model_map model_after(int phase)
{
    model_map m;
    for (int p = 0; p <= phase; p++)
        change(m, p);
    return m;
}

/* Whether m holds exactly what the model holds, walked both ways, and
 * answers the model's lookups of every key around the range. */
bool same(const pmap &m, const model_map &want)
{
    if (m.size() != want.size())
        return false;
    auto w = want.begin();
    for (auto it = m.begin(); it != m.end(); ++it, ++w)
        if (it->first != w->first || it->second != w->second)
            return false;
    auto rw = want.rbegin();
    for (auto it = m.rbegin(); it != m.rend(); ++it, ++rw)
        if (it->first != rw->first || it->second != rw->second)
            return false;
    for (long k = -2; k < 20002; k++) {
        auto f = m.find(k);
        auto wf = want.find(k);
        if ((f == m.end()) != (wf == want.end()) || (f != m.end() && f->second != wf->second))
            return false;
        auto lb = m.lower_bound(k);
        auto wlb = want.lower_bound(k);
        if ((lb == m.end()) != (wlb == want.end()) || (lb != m.end() && lb->first != wlb->first))
            return false;
        auto ub = m.upper_bound(k);
        auto wub = want.upper_bound(k);
        if ((ub == m.end()) != (wub == want.end()) || (ub != m.end() && ub->first != wub->first))
            return false;
        if (m.count(k) != want.count(k))
            return false;
    }
    return true;
}

/* One phase on the map named "m" of the heap: checks what the earlier
 * phases left, changes it, checks again.  0: made it. */
int step(const std::string &file, int phase)
{
    pheap::heap h = pheap::heap::open(file);
    pmap *m = h.find<pmap>("m");
    if (!m)
        m = h.make_named<pmap>("m", pheap::allocator<pmap>(h));
    if (!same(*m, phase ? model_after(phase - 1) : model_map()))
        return 20;
    change(*m, phase);
    if (!same(*m, model_after(phase)))
        return 21;
    h.close();
    return 0;
}

} // namespace

#ifndef PHEAP_TEST_GENERIC_TREE

TEST(map_matches_std_map)
{
    pheap::heap h = pheap::heap::create(check::path("tree.heap"), 64 << 20);
    pmap &m = *h.make<pmap>(pheap::allocator<pmap>(h));
    model_map want;
    for (int phase = 0; phase < 4; phase++) {
        change(m, phase);
        change(want, phase);
        CHECK(same(m, want));
    }
    /* copies, swaps and moves relink every node */
    pmap &copy = *h.make<pmap>(m);
    CHECK(same(copy, want));
    copy.clear();
    CHECK(copy.empty() && copy.find(5) == copy.end());
    copy.swap(m);
    CHECK(m.empty() && same(copy, want));
    h.destroy(&m);
    h.destroy(&copy);
    struct pheap_stats st;
    REQUIRE(pheap_stats(h.get(), &st) == 0);
    CHECK_EQ(st.live_blocks, st.name_segments); /* every node given back */
}

TEST(multiset_matches_std_multiset)
{
    pheap::heap h = pheap::heap::create(check::path("multiset.heap"), 64 << 20);
    pmultiset &s = *h.make<pmultiset>(pheap::allocator<pmultiset>(h));
    std::multiset<long> want;
    std::mt19937_64 rng(99);
    for (int i = 0; i < 20000; i++) {
        long k = long(rng() % 500);
        if (rng() % 3) {
            s.insert(k);
            want.insert(k);
        } else {
            CHECK_EQ(s.erase(k), want.erase(k));
        }
    }
    REQUIRE(s.size() == want.size());
    CHECK(std::equal(s.begin(), s.end(), want.begin()));
    for (long k = -1; k < 501; k++) {
        CHECK_EQ(s.count(k), want.count(k));
        auto r = s.equal_range(k);
        CHECK_EQ(std::size_t(std::distance(r.first, r.second)), want.count(k));
    }
}

/* The links are ptr words: reopened with the old address range taken, the
 * map is whole at its new address. */
TEST(map_stays_whole_at_another_address)
{
    std::string file = check::path("moved.heap");
    { pheap::heap h = pheap::heap::create(file, 64 << 20); }
    REQUIRE(step(file, 0) == 0);
    check::range first;
    {
        pheap::heap h = pheap::heap::open(file);
        first = check::mapped_range(h);
    }
    check::occupied hold(first);
    REQUIRE(hold.ok());
    pheap::heap h = pheap::heap::open(file);
    CHECK(check::mapped_range(h).lo != first.lo);
    pmap *m = h.find<pmap>("m");
    REQUIRE(m);
    CHECK(same(*m, model_after(0)));
}

/* Boost's generic tree code and pheap's take turns on one map: the nodes
 * are the same bytes under both. */
TEST(generic_and_pheap_trees_read_each_other)
{
    std::string file = check::path("turns.heap");
    { pheap::heap h = pheap::heap::create(file, 64 << 20); }
    for (int phase = 0; phase < 4; phase++) {
        if (phase % 2 == 0) {
            pid_t pid = fork();
            REQUIRE(pid >= 0);
            if (pid == 0) {
                std::string ph = std::to_string(phase);
                execl(PHEAP_TEST_GENERIC_EXE, PHEAP_TEST_GENERIC_EXE, "--step", file.c_str(), ph.c_str(),
                      (char *)nullptr);
                _exit(127);
            }
            int st = 0;
            REQUIRE(waitpid(pid, &st, 0) == pid);
            CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        } else {
            CHECK_EQ(step(file, phase), 0);
        }
    }
}

#endif

int main(int argc, char **argv)
{
    if (argc == 4 && std::string(argv[1]) == "--step")
        return step(argv[2], std::atoi(argv[3]));
#ifdef PHEAP_TEST_GENERIC_TREE
    return 2;
#else
    return check::main(argc, argv);
#endif
}
