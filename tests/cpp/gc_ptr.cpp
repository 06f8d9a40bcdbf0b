/*
 * gc_ptr.cpp -- heap::gc() and heap::recover() trace pheap::ptr words
 * conservatively (PHEAP_GC_SELF_RELATIVE: a word whose own offset plus its
 * value minus one is the start of a block): a LOG heap holding containers
 * of pheap::allocator keeps every node and frees only what nothing
 * reaches; a GC-mode heap whose list of ptr links has no filter is
 * recovered whole.
 */
#include "check.hpp"

#include <boost/container/map.hpp>
#include <boost/container/string.hpp>

#include <sys/wait.h>
#include <unistd.h>

namespace {

using pstring = boost::container::basic_string<char, std::char_traits<char>, pheap::allocator<char>>;
using table = boost::container::map<long, pstring, std::less<long>,
                                    pheap::allocator<std::pair<const long, pstring>>>;

std::uint64_t live_blocks(const pheap::heap &h)
{
    struct pheap_stats st;
    return pheap_stats(h.get(), &st) == 0 ? st.live_blocks : ~0ull;
}

struct lnode {
    pheap::ptr<lnode> next;
    long value;
};

} // namespace

TEST(collection_keeps_containers)
{
    pheap::heap h = pheap::heap::create(check::path("gc-log.heap"), 8 << 20);
    table &t = *h.make_named<table>("table", pheap::allocator<table>(h));
    for (long i = 0; i < 2000; i++)
        t.emplace(i, pstring(("a value long enough to be its own block " + std::to_string(i)).c_str(),
                             t.get_allocator()));
    std::uint64_t live = live_blocks(h);
    REQUIRE(pheap_alloc(h.get(), 64) != 0); /* reachable from nothing */
    pheap_gc_report rep;
    h.gc(&rep);
    CHECK_EQ(rep.freed_blocks, 1u);
    CHECK_EQ(live_blocks(h), live);
    REQUIRE(t.size() == 2000u);
    long i = 0;
    for (const auto &kv : t) {
        CHECK_EQ(kv.first, i);
        CHECK(std::string(kv.second.c_str()) ==
              "a value long enough to be its own block " + std::to_string(i));
        i++;
    }
    pheap_check_report cr;
    CHECK_EQ(pheap_check(h.get(), &cr), 0);
}

TEST(recovery_without_filters)
{
    std::string file = check::path("gc-mode.heap");
    pid_t pid = fork();
    if (pid == 0) {
        pheap_options o{};
        o.size = 4 << 20;
        o.flags = PHEAP_CREATE;
        o.consistency = PHEAP_CONSISTENCY_GC;
        pheap::heap h = pheap::heap::open(file, &o);
        lnode &head = *h.make<lnode>();
        pheap_root_set(h.get(), "list", h.offset(&head));
        for (long v = 1; v <= 300; v++) /* pushed at the front: links point anywhere */
            head.next = h.make<lnode>(lnode{head.next, v});
        _exit(0);
    }
    int st = 0;
    REQUIRE(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    pheap::heap h = pheap::heap::open(file);
    pheap_gc_report rep;
    h.recover(&rep);
    CHECK_EQ(rep.marked_blocks, 301u);
    long want = 300;
    for (lnode *n = h.direct<lnode>(pheap_root_get(h.get(), "list"))->next.get(); n; n = n->next.get())
        CHECK_EQ(n->value, want--);
    CHECK_EQ(want, 0);
}

TEST_MAIN
