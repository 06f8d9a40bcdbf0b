/*
 * heap.cpp -- pheap::heap and the typed calls: errors as exceptions and as
 * error codes, RAII and moves, make_named / find / destroy_named / root /
 * make / destroy, exception safety (a throwing constructor leaves no name
 * and no block), transactions as scopes (commit, rollback on an exception,
 * typed redo writes, containers changed inside one), and trace<T> filters
 * doing the recovery of a GC-mode heap.
 */
#include <sys/stat.h>
#include "check.hpp"

#include <boost/container/vector.hpp>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace {

struct point {
    long x, y;
    point(long a, long b) : x(a), y(b) {}
};

struct boom : std::runtime_error {
    boom() : std::runtime_error("constructor failed") {}
};

/* Throws from its constructor when asked; counts destructors. */
struct fragile {
    static inline int destroyed = 0;
    long v;
    explicit fragile(bool fail, long value = 1) : v(value)
    {
        if (fail)
            throw boom();
    }
    ~fragile() { destroyed++; }
};

std::uint64_t live_blocks(const pheap::heap &h)
{
    struct pheap_stats st;
    return pheap_stats(h.get(), &st) == 0 ? st.live_blocks : ~0ull;
}

pheap::heap fresh(const char *name) { return pheap::heap::create(check::path(name), 4 << 20); }

} // namespace

TEST(errors_throw_and_report)
{
    std::string missing = check::path("missing.heap");
    try {
        pheap::heap h = pheap::heap::open(missing);
        check::fail(__FILE__, __LINE__, "opening a missing heap did not throw");
    } catch (const std::system_error &e) {
        CHECK(e.code().category() == pheap::category());
        CHECK_EQ(e.code().value(), int(PHEAP_ENOENT));
        CHECK(std::string(e.what()).find("pheap_open") != std::string::npos);
        CHECK(std::string(e.what()).find("missing.heap") != std::string::npos);
        CHECK_EQ(e.code().message(), std::string(pheap_strerror(PHEAP_ENOENT)));
    }
    std::error_code ec;
    pheap::heap h = pheap::heap::open(missing, nullptr, ec);
    CHECK(!h);
    CHECK(ec == pheap::make_error_code(PHEAP_ENOENT));
    CHECK_EQ(std::string(ec.category().name()), std::string("pheap"));
}

TEST(raii_and_moves)
{
    static_assert(!std::is_copy_constructible_v<pheap::heap>);
    static_assert(std::is_nothrow_move_constructible_v<pheap::heap>);
    std::string file = check::path("raii.heap");
    {
        pheap::heap a = pheap::heap::create(file, 1 << 20);
        CHECK_THROWS_CODE(pheap::heap::open(file), PHEAP_EBUSY); /* locked while open */
        pheap::heap b = std::move(a);
        CHECK(!a && b);
        pheap::heap c;
        c = std::move(b);
        CHECK(!b && c);
    } /* closed here */
    pheap::heap again = pheap::heap::open(file);
    CHECK(bool(again));
    again.close();
    CHECK(!again);
    again.close(); /* closing an empty heap does nothing */
}

TEST(named_objects)
{
    pheap::heap h = fresh("named.heap");
    point *p = h.make_named<point>("origin", 3L, 4L);
    REQUIRE(p);
    CHECK_EQ(p->x, 3);
    CHECK(h.find<point>("origin") == p);
    CHECK(h.find<point>("nothing") == nullptr);
    CHECK_THROWS_CODE(h.make_named<point>("origin", 1L, 1L), PHEAP_EEXIST);
    CHECK_THROWS_CODE(h.make_named<point>("", 1L, 1L), PHEAP_ENAME);
    std::error_code ec;
    CHECK(h.make_named<point>("origin", ec, 1L, 1L) == nullptr);
    CHECK(ec == pheap::make_error_code(PHEAP_EEXIST));
    CHECK(h.find<point>("nothing", ec) == nullptr && ec.value() == PHEAP_ENOENT);
    fragile::destroyed = 0;
    h.make_named<fragile>("f", false, 9L);
    h.destroy_named<fragile>("f");
    CHECK_EQ(fragile::destroyed, 1);
    CHECK(h.find<fragile>("f") == nullptr);
    CHECK_THROWS_CODE(h.destroy_named<fragile>("f"), PHEAP_ENOENT);
    h.destroy_named<point>("origin");
    CHECK(h.find<point>("origin") == nullptr);
}

TEST(throwing_constructor_leaves_nothing)
{
    pheap::heap h = fresh("throw.heap");
    h.make_named<point>("warm", 0L, 0L); /* the directory exists from here on */
    std::uint64_t before = live_blocks(h);
    bool caught = false;
    try {
        h.make_named<fragile>("f", true);
    } catch (const boom &) { /* the constructor's own exception */
        caught = true;
    }
    CHECK(caught);
    CHECK(h.find<fragile>("f") == nullptr);
    CHECK_EQ(live_blocks(h), before);
    caught = false;
    try {
        h.make<fragile>(true);
    } catch (const boom &) {
        caught = true;
    }
    CHECK(caught);
    CHECK_EQ(live_blocks(h), before);
    /* The non-throwing form reports the cancellation. */
    std::error_code ec;
    CHECK(h.make_named<fragile>("f", ec, true) == nullptr);
    CHECK(ec.value() == PHEAP_ECANCELED);
    CHECK(h.find<fragile>("f") == nullptr);
    CHECK_EQ(live_blocks(h), before);
    /* Inside a transaction: the block is given back at once. */
    pheap::run(h, [&] {
        try {
            h.make<fragile>(true);
        } catch (const boom &) {
            caught = true;
        }
    });
    CHECK_EQ(live_blocks(h), before);
    pheap_check_report rep;
    CHECK_EQ(pheap_check(h.get(), &rep), 0);
}

TEST(roots_and_plain_objects)
{
    std::string file = check::path("root.heap");
    {
        pheap::heap h = pheap::heap::create(file, 1 << 20);
        point *p = h.make<point>(1L, 2L);
        h.destroy(p);
        CHECK_THROWS_CODE(h.destroy(p), PHEAP_EDOUBLEFREE);
        int &counter = h.root<int>("counter");
        CHECK_EQ(counter, 0); /* value-initialised */
        counter = 41;
        CHECK(&h.root<int>("counter") == &counter);
    }
    pheap::heap h = pheap::heap::open(file);
    CHECK_EQ(++h.root<int>("counter"), 42);
}

TEST(transaction_scopes)
{
    pheap::heap h = fresh("tx.heap");
    point &p = *h.make_named<point>("p", 1L, 1L);
    {
        pheap::transaction tx(h);
        tx.add(p);
        p.x = 100;
        tx.commit();
    }
    CHECK_EQ(p.x, 100);
    {
        pheap::transaction tx(h);
        tx.add(p);
        p.x = 7;
    } /* not committed: rolled back */
    CHECK_EQ(p.x, 100);
    std::uint64_t before = live_blocks(h);
    try {
        pheap::run(h, [&](pheap::transaction &tx) {
            tx.add(p);
            p.y = 5;
            h.make<point>(0L, 0L);
            throw boom();
        });
    } catch (const boom &) {
    }
    CHECK_EQ(p.y, 1);
    CHECK_EQ(live_blocks(h), before); /* the block of the transaction is gone */
    /* Redo writes: seen through read() before the commit, in place after. */
    pheap::run(h, [&] {
        pheap::transaction inner(h); /* nested: flattens into the outer one */
        inner.write(p.x, 55L);
        CHECK_EQ(p.x, 100);
        CHECK_EQ(inner.read(p.x), 55);
        inner.commit();
    });
    CHECK_EQ(p.x, 55);
    /* make and destroy as parts of one transaction. */
    point *q = nullptr;
    pheap::run(h, [&] { q = h.make<point>(8L, 9L); });
    CHECK_EQ(live_blocks(h), before + 1);
    fragile *f = h.make<fragile>(false, 3L);
    fragile::destroyed = 0;
    {
        pheap::transaction tx(h);
        h.destroy(f);
        CHECK_EQ(fragile::destroyed, 1);
    } /* rolled back: the block is still allocated */
    CHECK_EQ(live_blocks(h), before + 2);
    pheap::run(h, [&] { h.destroy(f); h.destroy(q); });
    CHECK_EQ(live_blocks(h), before);
    pheap::run(h, [&] {
        CHECK(h.find<point>("p") == &p);
        /* a root cannot name a block of the transaction before the commit */
        CHECK_THROWS_CODE(h.root<long>("unset"), PHEAP_ENOTLIVE);
    });
    CHECK_EQ(pheap_root_get(h.get(), "unset"), 0u);
    CHECK_EQ(live_blocks(h), before);
    /* commit after the whole transaction was aborted: EABORTED */
    pheap::transaction outer(h);
    {
        pheap::transaction inner(h);
        inner.abort();
    }
    CHECK_THROWS_CODE(outer.commit(), PHEAP_EABORTED);
}

TEST(named_objects_in_transactions)
{
    pheap::heap h = fresh("named-tx.heap");
    h.make_named<point>("warm", 0L, 0L);
    std::uint64_t before = live_blocks(h);
    /* made in a transaction: there after the commit */
    pheap::run(h, [&] {
        point *a = h.make_named<point>("a", 1L, 2L);
        CHECK(h.find<point>("a") == a); /* this thread finds it before the commit */
        CHECK_THROWS_CODE(h.make_named<point>("a", 1L, 2L), PHEAP_EEXIST);
    });
    CHECK(h.find<point>("a") != nullptr);
    CHECK_EQ(h.find<point>("a")->y, 2);
    CHECK_EQ(live_blocks(h), before + 1);
    /* an exception that aborts the transaction removes the name and the block */
    try {
        pheap::run(h, [&] {
            h.make_named<point>("b", 3L, 4L);
            throw boom();
        });
    } catch (const boom &) {
    }
    CHECK(h.find<point>("b") == nullptr);
    CHECK_EQ(live_blocks(h), before + 1);
    /* a throwing constructor: no name, no block, the transaction goes on */
    pheap::run(h, [&] {
        bool caught = false;
        try {
            h.make_named<fragile>("f", true);
        } catch (const boom &) {
            caught = true;
        }
        CHECK(caught);
        CHECK(h.find<fragile>("f") == nullptr);
        h.make_named<fragile>("g", false, 5L);
    });
    CHECK(h.find<fragile>("f") == nullptr);
    CHECK_EQ(h.find<fragile>("g")->v, 5);
    CHECK_EQ(live_blocks(h), before + 2);
    /* destroyed in a transaction that aborts: object and name come back */
    fragile::destroyed = 0;
    {
        pheap::transaction tx(h);
        h.destroy_named<fragile>("g");
        CHECK_EQ(fragile::destroyed, 1);
        CHECK(h.find<fragile>("g") == nullptr);
    }
    CHECK(h.find<fragile>("g") != nullptr);
    CHECK_EQ(h.find<fragile>("g")->v, 5);
    CHECK_EQ(live_blocks(h), before + 2);
    /* ... and committed: both go */
    pheap::run(h, [&] { h.destroy_named<fragile>("g"); });
    CHECK(h.find<fragile>("g") == nullptr);
    CHECK_EQ(live_blocks(h), before + 1);
    /* made and destroyed in one transaction, nested levels */
    pheap::run(h, [&] {
        pheap::transaction inner(h);
        h.make_named<point>("brief", 1L, 1L);
        h.destroy_named<point>("brief");
        CHECK_THROWS_CODE(h.destroy_named<point>("brief"), PHEAP_ENOENT);
        inner.commit();
    });
    CHECK(h.find<point>("brief") == nullptr);
    CHECK_EQ(live_blocks(h), before + 1);
    pheap_check_report rep;
    CHECK_EQ(pheap_check(h.get(), &rep), 0);
}

TEST(vector_in_a_transaction)
{
    using vec = boost::container::vector<long, pheap::allocator<long>>;
    pheap::heap h = fresh("txvec.heap");
    vec &v = *h.make_named<vec>("v", pheap::allocator<long>(h));
    pheap::run(h, [&](pheap::transaction &tx) {
        tx.add(v);
        for (long i = 0; i < 100; i++)
            v.push_back(i);
    });
    std::uint64_t before = live_blocks(h);
    try {
        pheap::run(h, [&](pheap::transaction &tx) {
            tx.add(v);
            for (long i = 0; i < 1000; i++) /* grows: new blocks, the old freed */
                v.push_back(-i);
            throw boom();
        });
    } catch (const boom &) {
    }
    REQUIRE(v.size() == 100);
    for (long i = 0; i < 100; i++)
        CHECK_EQ(v[size_t(i)], i);
    CHECK_EQ(live_blocks(h), before);
    pheap::run(h, [&](pheap::transaction &tx) {
        tx.add(v);
        v.resize(5000, 1);
    });
    CHECK_EQ(v.size(), 5000u);
    CHECK_EQ(live_blocks(h), before);
    pheap_check_report rep;
    CHECK_EQ(pheap_check(h.get(), &rep), 0);
}

TEST(allocator_finds_its_heap)
{
    std::string file = check::path("alloc.heap");
    pheap_options o{};
    o.size = 1 << 20;
    o.flags = PHEAP_CREATE;
    pheap_handle *raw = nullptr;
    REQUIRE(pheap_open(file.c_str(), &o, &raw) == 0);
    pheap::heap h(raw); /* adopted: the allocator knows it, the destructor closes it */
    pheap::allocator<long> a(h);
    pheap::allocator<char> b(a);
    CHECK(a == b && !(a != b));
    CHECK(a.heap_handle() == raw);
    pheap::ptr<long> p = a.allocate(10);
    CHECK(h.offset(p.get()) != 0);
    CHECK(pheap_usable_size(raw, h.offset(p.get())) >= 80);
    a.deallocate(p, 10);
    CHECK_EQ(pheap_usable_size(raw, h.offset(p.get())), 0u);
    CHECK_THROWS_CODE(a.allocate(std::size_t(1) << 40), PHEAP_ENOMEM);
    pheap::heap other = fresh("other.heap");
    CHECK(pheap::allocator<long>(other) != a);
    h.close();
    CHECK_THROWS_CODE(b.allocate(1), PHEAP_EINVAL); /* its heap is closed */
}

TEST(error_code_forms)
{
    std::error_code ec;
    pheap::heap bad = pheap::heap::create(check::dir() + "/no/such/dir/x.heap", 1 << 20, ec);
    CHECK(!bad && ec);
    pheap::heap h = pheap::heap::create(check::path("ec.heap"), 1 << 20, ec);
    REQUIRE(!ec);
    struct big {
        long v[8];
    };
    big *l = h.make<big>(ec);
    REQUIRE(l && !ec);
    h.destroy(&l->v[1], ec); /* inside a block: refused, nothing done */
    CHECK(ec.value() == PHEAP_EINTERIOR);
    h.destroy(l, ec);
    CHECK(!ec);
    h.destroy(l, ec);
    CHECK(ec.value() == PHEAP_EDOUBLEFREE);
    long &r = *h.root<long>("r", ec), &s = *h.root<long>("s", ec);
    REQUIRE(!ec);
    {
        pheap::transaction tx(h, ec);
        REQUIRE(!ec && tx.active());
        tx.add(r, ec);
        r = 9;
        tx.write(r, 10L, ec); /* into an added range: stored at once */
        CHECK(!ec && r == 10);
        tx.write(s, 3L, ec);
        CHECK(!ec && s == 0 && tx.read(s, ec) == 3);
        tx.add(s, ec); /* written, then added: refused */
        CHECK(ec.value() == PHEAP_EINVAL);
        tx.commit(ec);
        CHECK(!ec && !tx.active());
        tx.commit(ec);
        CHECK(ec.value() == PHEAP_ENOTX);
    }
    CHECK_EQ(r, 10);
    CHECK_EQ(s, 3);
    h.checkpoint(ec); /* the sync level: nothing to do */
    CHECK(!ec);
    h.close(ec);
    CHECK(!ec);
}

TEST(checkpoint_level)
{
    std::string work = check::dir() + "/work";
    mkdir(work.c_str(), 0700);
    setenv("PHEAP_WORKDIR", work.c_str(), 1);
    pheap_options o{};
    o.flags = PHEAP_CREATE;
    o.size = 1 << 20;
    o.durability = PHEAP_DURABILITY_CHECKPOINT;
    std::string path = check::path("ckpt.heap");
    {
        pheap::heap h = pheap::heap::open(path, &o);
        long &v = h.root<long>("v");
        v = 42;
        h.persist(v);
        h.checkpoint();
        struct pheap_stats st;
        REQUIRE(pheap_stats(h.get(), &st) == 0);
        CHECK_EQ(st.durability, PHEAP_DURABILITY_CHECKPOINT);
        CHECK(st.checkpoints >= 1);
    }
    pheap::heap h = pheap::heap::open(path);
    CHECK_EQ(h.root<long>("v"), 42L);
}

/* ---- GC mode: the filter of a list of ptr links ----------------------------- */

namespace {
struct gnode {
    pheap::ptr<gnode> next;
    long value;
};
struct gfree { /* a type without a filter: traced conservatively */
    long words[4];
};
} // namespace

template <>
struct pheap::trace<gnode> {
    static void children(const pheap::tracer &t, const gnode &n) { t(n.next); }
};

TEST(gc_recovery_with_trace_filters)
{
    std::string file = check::path("gc.heap");
    pid_t pid = fork();
    if (pid == 0) { /* builds the list, leaks one block, dies without closing */
        pheap_options o{};
        o.size = 4 << 20;
        o.flags = PHEAP_CREATE;
        o.consistency = PHEAP_CONSISTENCY_GC;
        pheap::heap h = pheap::heap::open(file, &o);
        gnode &head = *h.make<gnode>();
        pheap_root_set(h.get(), "list", h.offset(&head));
        gnode *tail = &head;
        for (long i = 1; i <= 50; i++) {
            gnode *n = h.make<gnode>();
            n->value = i;
            tail->next = n;
            tail = n;
        }
        h.make<gfree>(); /* reachable from nothing */
        _exit(0);
    }
    int st = 0;
    REQUIRE(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    pheap::heap h = pheap::heap::open(file);
    struct pheap_stats s;
    REQUIRE(pheap_stats(h.get(), &s) == 0 && s.needs_recovery);
    h.set_filter<gnode>("list");
    pheap_gc_report rep;
    REQUIRE(pheap_recover_ex(h.get(), nullptr, &rep) == 0); /* the filter alone sees the links */
    CHECK_EQ(rep.marked_blocks, 51u); /* the head and 50 nodes, through the filter */
    CHECK_EQ(rep.bad_refs, 0u);
    long n = 0;
    for (gnode *p = h.direct<gnode>(pheap_root_get(h.get(), "list"))->next.get(); p; p = p->next.get())
        CHECK_EQ(p->value, ++n);
    CHECK_EQ(n, 50);
    CHECK_EQ(live_blocks(h), 51u); /* the unreachable block was freed */
}

TEST(closing_the_heap_inside_a_transaction_scope)
{
    pheap::heap h = fresh("close-in-tx.heap");
    point *p = h.make<point>(1L, 2L);
    std::error_code ec;
    {
        pheap::transaction tx(h);
        tx.add(*p);
        p->x = 9;
        pheap::transaction inner(h);
        h.close(); /* rolls the transaction back and frees the handle */
        CHECK(!tx.active());
        CHECK(!inner.active());
        tx.commit(ec);
        CHECK_EQ(ec.value(), int(PHEAP_ENOTX));
    } /* the destructors leave the freed handle alone (ASan checks) */
    /* the same through a move into the heap */
    pheap::heap a = fresh("close-in-tx-a.heap"), b = fresh("close-in-tx-b.heap");
    {
        pheap::transaction tx(a);
        pheap::transaction other(b);
        a = std::move(b);
        CHECK(!tx.active());
        CHECK(other.active()); /* b's transaction goes on, now through a */
        other.commit();
    }
    CHECK_EQ(a.tx_depth(), 0);
}

TEST(destroy_checks_before_the_destructor)
{
    pheap::heap h = fresh("destroy-checks.heap");
    fragile::destroyed = 0;
    fragile *f = h.make_named<fragile>("f", false, 7L);
    fragile *g = h.make<fragile>(false, 8L);
    std::uint64_t before = live_blocks(h);
    /* read-only mode: refused before ~T() runs */
    CHECK_EQ(pheap_set_mode(h.get(), PHEAP_MODE_READONLY), 0);
    CHECK_THROWS_CODE(h.destroy_named<fragile>("f"), PHEAP_EROMODE);
    CHECK_THROWS_CODE(h.destroy(g), PHEAP_EROMODE);
    CHECK_EQ(fragile::destroyed, 0);
    CHECK_EQ(pheap_set_mode(h.get(), PHEAP_MODE_WRITABLE), 0);
    CHECK(h.find<fragile>("f") == f);
    /* not the start of a block, in a transaction and out of one */
    point *two = h.make<point>(1L, 2L);
    fragile *inside = reinterpret_cast<fragile *>(&two->y);
    CHECK_THROWS_CODE(h.destroy(inside), PHEAP_EINTERIOR);
    pheap::run(h, [&] { CHECK_THROWS_CODE(h.destroy(inside), PHEAP_EINTERIOR); });
    CHECK_EQ(fragile::destroyed, 0);
    h.destroy(two);
    /* another thread's transaction holds the name: EBUSY, nothing run */
    std::atomic<int> step{0};
    std::thread other([&] {
        pheap::transaction tx(h);
        h.destroy_named<fragile>("f"); /* holds the name, runs ~fragile */
        step = 1;
        while (step != 2)
            std::this_thread::yield();
    }); /* rolled back when the thread's transaction object goes */
    while (step != 1)
        std::this_thread::yield();
    int seen = fragile::destroyed;
    CHECK_THROWS_CODE(h.destroy_named<fragile>("f"), PHEAP_EBUSY);
    CHECK_EQ(fragile::destroyed, seen);
    step = 2;
    other.join();
    CHECK(h.find<fragile>("f") == f);
    CHECK_EQ(f->v, 7);
    CHECK_EQ(live_blocks(h), before);
    /* and then both go */
    h.destroy_named<fragile>("f");
    h.destroy(g);
    CHECK(h.find<fragile>("f") == nullptr);
    CHECK_EQ(live_blocks(h), before - 2);
    pheap_check_report rep;
    CHECK_EQ(pheap_check(h.get(), &rep), 0);
}

TEST(containers_keep_their_heap)
{
    using lvec = boost::container::vector<long, pheap::allocator<long>>;
    pheap::heap a = fresh("keep-a.heap"), b = fresh("keep-b.heap");
    lvec *va = a.make<lvec>(pheap::allocator<lvec>(a));
    lvec *vb = b.make<lvec>(pheap::allocator<lvec>(b));
    for (long i = 0; i < 100; i++)
        vb->push_back(i);
    *va = *vb; /* copies into a's heap */
    CHECK(va->get_allocator() == pheap::allocator<long>(a));
    CHECK(a.offset(va->data()) != 0);
    CHECK_EQ(va->size(), 100u);
    lvec *wa = a.make<lvec>(pheap::allocator<lvec>(a));
    *wa = std::move(*vb); /* moves the elements into a's heap */
    CHECK(wa->get_allocator() == pheap::allocator<long>(a));
    CHECK(a.offset(wa->data()) != 0);
    CHECK_EQ((*wa)[99], 99);
    CHECK(vb->get_allocator() == pheap::allocator<long>(b));
    a.destroy(va);
    a.destroy(wa);
    b.destroy(vb);
}

TEST(a_root_is_made_once)
{
    pheap::heap h = fresh("root-once.heap");
    for (int round = 0; round < 200; round++) {
        std::string name = "r" + std::to_string(round);
        std::uint64_t before = live_blocks(h);
        std::vector<long *> got(4, nullptr);
        std::vector<std::thread> ts;
        std::atomic<int> ready{0};
        for (int i = 0; i < 4; i++)
            ts.emplace_back([&, i] {
                ready++;
                while (ready < 4)
                    std::this_thread::yield();
                std::error_code ec;
                got[size_t(i)] = h.root<long>(name.c_str(), ec);
            });
        for (std::thread &t : ts)
            t.join();
        for (long *p : got)
            CHECK(p != nullptr && p == got[0]);
        CHECK_EQ(live_blocks(h), before + 1);
    }
}

TEST(run_after_commit_or_abort)
{
    pheap::heap h = fresh("run-ends.heap");
    point *p = h.make<point>(1L, 2L);
    pheap::run(h, [&](pheap::transaction &tx) {
        tx.add(*p);
        p->x = 5;
        tx.commit();
    });
    CHECK_EQ(p->x, 5);
    pheap::run(h, [&](pheap::transaction &tx) {
        tx.add(*p);
        p->x = 6;
        tx.abort();
    });
    CHECK_EQ(p->x, 5);
    CHECK_EQ(h.tx_depth(), 0);
}

TEST(a_hundred_open_heaps)
{
    using lvec = boost::container::vector<long, pheap::allocator<long>>;
    std::vector<pheap::heap> open;
    std::vector<lvec *> vs;
    for (int i = 0; i < 100; i++) {
        std::string p = check::path("many-" + std::to_string(i) + ".heap");
        open.push_back(pheap::heap::create(p, 1 << 20));
        unlink(p.c_str()); /* the open handle keeps it */
        vs.push_back(open.back().make<lvec>(pheap::allocator<lvec>(open.back())));
    }
    for (int i = 0; i < 100; i++) { /* every allocator finds its heap */
        vs[size_t(i)]->push_back(i);
        CHECK(open[size_t(i)].offset(vs[size_t(i)]->data()) != 0);
    }
    open.erase(open.begin() + 10, open.begin() + 60);
    CHECK(pheap::allocator<long>(open[20]).heap_handle() == open[20].get());
}

/* A destructor that runs a transaction of its own which rolls back. */
struct rolls_back {
    pheap::heap *h;
    long v = 3;
    explicit rolls_back(pheap::heap *heap) : h(heap) {}
    ~rolls_back()
    {
        fragile::destroyed++;
        try {
            pheap::run(*h, [&] { throw boom(); });
        } catch (const boom &) {
        }
    }
};

TEST(destroy_named_edge_cases)
{
    std::string path = check::path("destroy-edges.heap");
    {
        pheap::heap h = pheap::heap::create(path, 4 << 20);
        h.make_named<point>("warm", 0L, 0L); /* the directory's first segment */
        std::uint64_t before = live_blocks(h);
        /* ~T() rolls back a transaction of its own: the object goes anyway */
        fragile::destroyed = 0;
        h.make_named<rolls_back>("r", &h);
        h.destroy_named<rolls_back>("r");
        CHECK_EQ(fragile::destroyed, 1);
        CHECK(h.find<rolls_back>("r") == nullptr);
        CHECK_EQ(live_blocks(h), before);
        /* a name whose block was freed: removed, no destructor */
        fragile *f = h.make_named<fragile>("dangling", false, 1L);
        CHECK_EQ(pheap_free(h.get(), h.offset(f)), 0);
        fragile::destroyed = 0;
        CHECK_THROWS_CODE(h.destroy_named<fragile>("dangling"), PHEAP_ENOTLIVE);
        CHECK_EQ(fragile::destroyed, 0);
        CHECK(h.find<fragile>("dangling") == nullptr);
        h.make_named<fragile>("kept", false, 2L);
        h.make<fragile>(false, 3L);
    }
    /* a read-only handle: nothing runs */
    pheap_options o{};
    o.flags = PHEAP_RDONLY;
    pheap::heap ro = pheap::heap::open(path, &o);
    fragile::destroyed = 0;
    CHECK_THROWS_CODE(ro.destroy_named<fragile>("kept"), PHEAP_ERDONLY);
    CHECK_THROWS_CODE(ro.destroy(ro.find<fragile>("kept")), PHEAP_ERDONLY);
    CHECK_EQ(fragile::destroyed, 0);
    CHECK_EQ(ro.find<fragile>("kept")->v, 2);
}

/* A destructor that destroys another named object, whose destructor
 * rolls back a transaction of its own. */
struct destroys_aux {
    pheap::heap *h;
    explicit destroys_aux(pheap::heap *heap) : h(heap) {}
    ~destroys_aux() { h->destroy_named<rolls_back>("aux"); }
};

TEST(destroy_named_nested)
{
    {
        pheap::heap h = fresh("destroy-nested.heap");
        h.make_named<point>("warm", 0L, 0L);
        std::uint64_t before = live_blocks(h);
        h.make_named<rolls_back>("aux", &h);
        h.make_named<destroys_aux>("x", &h);
        fragile::destroyed = 0;
        h.destroy_named<destroys_aux>("x");
        CHECK_EQ(fragile::destroyed, 1); /* ~rolls_back, once */
        CHECK(h.find<rolls_back>("aux") == nullptr);
        CHECK(h.find<destroys_aux>("x") == nullptr);
        CHECK_EQ(live_blocks(h), before);
        /* inside a transaction a dangling name is refused and stays */
        fragile *f = h.make_named<fragile>("dangling", false, 1L);
        CHECK_EQ(pheap_free(h.get(), h.offset(f)), 0);
        fragile::destroyed = 0;
        pheap::run(h, [&] {
            CHECK_THROWS_CODE(h.destroy_named<fragile>("dangling"), PHEAP_ENOTLIVE);
        });
        CHECK_EQ(fragile::destroyed, 0);
        CHECK(h.find<fragile>("dangling") != nullptr);
    }
}

/* A root whose constructor waits for a thread that asks for a root. */
struct waits_for_a_root {
    long v = 0;
    waits_for_a_root()
    {
        std::thread t([] {
            std::error_code ec;
            waiting_heap->root<long>("other", ec);
        });
        t.join();
        v = 1;
    }
    static inline pheap::heap *waiting_heap = nullptr;
};

TEST(a_root_constructor_may_ask_for_roots)
{
    pheap::heap h = fresh("root-nested.heap");
    waits_for_a_root::waiting_heap = &h;
    CHECK_EQ(h.root<waits_for_a_root>("outer").v, 1);
    CHECK(h.find<long>("other") == nullptr); /* a root, not a name */
    CHECK_EQ(pheap_root_get(h.get(), "other") != 0, true);
}

TEST_MAIN
