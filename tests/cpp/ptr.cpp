/*
 * ptr.cpp -- pheap::ptr<T>: the encoding (8 bytes, 0 is null, the
 * distance from its own address), pointer_traits, random-access
 * arithmetic, comparisons, conversions, and a list of ptr links that
 * stays right when the heap is mapped at another address.
 */
#include "check.hpp"
#include "remap.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <memory>
#include <numeric>

namespace {

struct base {
    int b = 1;
};
struct derived : base {
    int d = 2;
};

struct node {
    pheap::ptr<node> next;
    int value;
    node(int v, node *n) : next(n), value(v) {}
};

struct list_head {
    pheap::ptr<node> first;
    pheap::ptr<list_head> self; /* points at its own block */
};

} // namespace

TEST(encoding)
{
    static_assert(sizeof(pheap::ptr<int>) == 8);
    static_assert(sizeof(pheap::ptr<void>) == 8);
    pheap::ptr<int> p;
    CHECK(!p);
    CHECK(p.get() == nullptr);
    CHECK_EQ(p.raw(), 0u);
    pheap::ptr<int> z = nullptr;
    CHECK(z == nullptr && nullptr == z && !(z != nullptr));
    unsigned char zeroed[8] = {};
    pheap::ptr<int> from_zero;
    std::memcpy(static_cast<void *>(&from_zero), zeroed, 8);
    CHECK(from_zero.get() == nullptr); /* a zeroed word is null */

    int x = 5;
    pheap::ptr<int> q = &x;
    CHECK(q.get() == &x);
    CHECK_EQ(*q, 5);
    CHECK_EQ(q.raw(), reinterpret_cast<std::uintptr_t>(&x) - reinterpret_cast<std::uintptr_t>(&q) + 1);
    *q = 6;
    CHECK_EQ(x, 6);

    /* A pointer at itself is not null. */
    pheap::ptr<void> self;
    self = &self;
    CHECK(self.get() == &self);
    CHECK(bool(self));
}

TEST(copies_follow_their_place)
{
    int a[4] = {1, 2, 3, 4};
    pheap::ptr<int> p = a + 2;
    pheap::ptr<int> copies[3] = {p, p, p};
    for (auto &c : copies) {
        CHECK(c.get() == a + 2);
        CHECK(c.raw() != p.raw()); /* other places, other distances */
    }
    pheap::ptr<int> assigned;
    assigned = p;
    CHECK(assigned == p);
    pheap::ptr<int> moved = std::move(assigned);
    CHECK(moved.get() == a + 2);
    swap(moved, copies[0]);
    CHECK(moved.get() == a + 2);

    /* A struct copied byte for byte keeps pointers into itself right. */
    struct inside {
        int v[2] = {7, 8};
        pheap::ptr<int> at;
    };
    inside s;
    s.at = &s.v[1];
    alignas(inside) unsigned char buf[sizeof(inside)];
    std::memcpy(buf, &s, sizeof s);
    auto *copy = reinterpret_cast<inside *>(buf);
    CHECK(copy->at.get() == &copy->v[1]);
}

/* Copies and assignments move the stored distance word to word (without
 * going through T*): null stays null, every other target is kept. */
struct opaque; /* never defined: a ptr to it is copied all the same */
struct holds_opaque {
    pheap::ptr<opaque> p;
};

TEST(copy_moves_the_distance)
{
    pheap::ptr<long> null_src;
    pheap::ptr<long> null_copy(null_src);
    CHECK(!null_copy && null_copy.raw() == 0u);
    pheap::ptr<long> null_assigned = nullptr;
    long x = 1;
    null_assigned = &x;
    null_assigned = null_src;
    CHECK(!null_assigned && null_assigned == nullptr);

    /* self-assignment and a copy of a pointer at itself */
    pheap::ptr<long> p = &x;
    pheap::ptr<long> &alias = p;
    p = alias;
    CHECK(p.get() == &x);
    pheap::ptr<void> at_self;
    at_self = &at_self;
    pheap::ptr<void> copy_of_self(at_self);
    CHECK(copy_of_self.get() == &at_self); /* the target, not the copy's place */

    /* Byte-granular targets (char, void) keep the documented corner: a copy
     * placed just after its target reads as null; never for aligned types. */
    struct alignas(8) pair_of_words {
        unsigned char before[8];
        pheap::ptr<unsigned char> q;
    } w{};
    pheap::ptr<unsigned char> far = &w.before[7];
    w.q = far;
    CHECK(!w.q); /* the byte just before w.q: not representable */
    pheap::ptr<unsigned char> back(w.q);
    CHECK(!back);
    w.q = &w.before[6];
    CHECK(w.q.get() == &w.before[6]);

    /* copies of copies, through memory at many places, stay equal */
    long a[16];
    std::iota(a, a + 16, 0);
    std::vector<pheap::ptr<long>> many;
    for (int i = 0; i < 16; i++)
        many.push_back(pheap::ptr<long>(a + i));
    std::vector<pheap::ptr<long>> moved_around(many.rbegin(), many.rend());
    std::reverse(moved_around.begin(), moved_around.end());
    for (int i = 0; i < 16; i++) {
        CHECK(moved_around[i] == many[i]);
        CHECK_EQ(*moved_around[i], long(i));
        CHECK(moved_around[i] - moved_around[0] == i);
        CHECK((i == 0) || moved_around[i - 1] < moved_around[i]);
    }
    pheap::ptr<long> walk = moved_around[0];
    for (int i = 0; i < 15; i++) {
        pheap::ptr<long> next = walk + 1;
        walk = next;
    }
    CHECK(walk == many[15] && walk.get() == a + 15);

    /* a ptr to an incomplete type is copied like any other */
    holds_opaque h1;
    h1.p = reinterpret_cast<opaque *>(&x);
    holds_opaque h2 = h1;
    CHECK(h2.p == h1.p && h2.p.raw() != h1.p.raw());
    holds_opaque h3;
    h3 = h2;
    CHECK(static_cast<void *>(h3.p.get()) == static_cast<void *>(&x));
}

TEST(arithmetic_and_comparisons)
{
    long a[10];
    std::iota(a, a + 10, 0);
    pheap::ptr<long> b = a, e = a + 10;
    CHECK_EQ(e - b, 10);
    CHECK_EQ(std::distance(b, e), 10);
    CHECK_EQ(b[3], 3);
    CHECK_EQ(*(b + 4), 4);
    CHECK_EQ(*(4 + b), 4);
    CHECK_EQ(*(e - 1), 9);
    pheap::ptr<long> i = b;
    CHECK_EQ(*++i, 1);
    CHECK_EQ(*i++, 1);
    CHECK_EQ(*i, 2);
    CHECK_EQ(*i--, 2);
    CHECK_EQ(*--i, 0);
    i += 7;
    CHECK_EQ(*i, 7);
    i -= 2;
    CHECK_EQ(*i, 5);
    CHECK(b < e && e > b && b <= b && b >= b && b != e && !(b == e));
    CHECK(b == a && a == b && e != a);
    std::reverse(b, e);
    CHECK_EQ(a[0], 9);
    std::sort(b, e);
    CHECK(std::is_sorted(a, a + 10));
    CHECK_EQ(std::accumulate(b, e, 0L), 45);
    using traits = std::iterator_traits<pheap::ptr<long>>;
    static_assert(std::is_same_v<traits::iterator_category, std::random_access_iterator_tag>);
    static_assert(std::is_same_v<traits::value_type, long>);
    static_assert(std::is_same_v<traits::reference, long &>);
}

TEST(pointer_traits)
{
    using pt = std::pointer_traits<pheap::ptr<int>>;
    static_assert(std::is_same_v<pt::element_type, int>);
    static_assert(std::is_same_v<pt::difference_type, std::ptrdiff_t>);
    static_assert(std::is_same_v<pt::rebind<double>, pheap::ptr<double>>);
    static_assert(std::is_same_v<std::pointer_traits<pheap::ptr<const void>>::rebind<char>,
                                 pheap::ptr<char>>);
    int x = 3;
    pheap::ptr<int> p = pt::pointer_to(x);
    CHECK(p.get() == &x);
    pheap::ptr<const int> c = pheap::ptr<const int>::pointer_to(x);
    CHECK(c == p);
}

TEST(conversions)
{
    derived d;
    pheap::ptr<derived> pd = &d;
    pheap::ptr<base> pb = pd; /* implicit, as derived* -> base* */
    CHECK(pb.get() == static_cast<base *>(&d));
    CHECK_EQ(pb->b, 1);
    pheap::ptr<derived> back = pheap::static_pointer_cast<derived>(pb);
    CHECK(back == pd);
    pheap::ptr<derived> back2(pb); /* explicit static_cast */
    CHECK(back2 == pd);
    pheap::ptr<const derived> cd = pd;
    pheap::ptr<derived> mut = pheap::const_pointer_cast<derived>(cd);
    CHECK(mut == pd);
    pheap::ptr<void> v = pd;
    pheap::ptr<derived> fromv(v);
    CHECK(fromv == pd);
    derived *raw = static_cast<derived *>(pd);
    CHECK(raw == &d);
    static_assert(!std::is_convertible_v<pheap::ptr<int>, int *>,
                  "no implicit conversion to T*: containers that would store raw pointers do "
                  "not compile");
    static_assert(std::is_convertible_v<int *, pheap::ptr<int>>);
    static_assert(!std::is_convertible_v<pheap::ptr<base>, pheap::ptr<derived>>);
    static_assert(!std::is_trivially_copyable_v<pheap::ptr<int>>,
                  "a ptr is never copied byte for byte into another place");
}

TEST(list_at_another_address)
{
    std::string file = check::path("list.heap");
    check::range before;
    {
        pheap::heap h = pheap::heap::create(file, 4 << 20);
        list_head &head = h.root<list_head>("list");
        head.self = &head;
        for (int i = 0; i < 100; i++)
            head.first = h.make<node>(i, head.first.get());
        before = check::mapped_range(h);
        h.close();
    }
    check::occupied hold(before);
    REQUIRE(hold.ok());
    pheap::heap h = pheap::heap::open(file);
    check::range after = check::mapped_range(h);
    CHECK(after.lo != before.lo);
    list_head *head = h.find<list_head>("list");
    CHECK(head == nullptr); /* a root, not a name */
    list_head &root = h.root<list_head>("list");
    CHECK(root.self.get() == &root);
    int expect = 99, n = 0;
    for (node *p = root.first.get(); p; p = p->next.get(), expect--, n++) {
        CHECK_EQ(p->value, expect);
        CHECK(h.offset(p) != 0); /* inside the new mapping */
    }
    CHECK_EQ(n, 100);
}

TEST_MAIN
