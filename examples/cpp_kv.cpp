/*
 * cpp_kv.cpp -- a small persistent key-value store with transactions: keys
 * are strings, values signed 64-bit numbers (account balances), kept in a
 * boost::container::flat_map inside a pheap heap.  Every command is one
 * transaction; `transfer` changes two values and throws (rolling both
 * back) when the source would go below zero.
 *
 * flat_map keeps its elements in one sorted array: an insert or erase
 * moves the elements after it in place, so a transaction snapshots the
 * array (and the map object) before it changes them; growing the array
 * allocates a new one inside the transaction.
 *
 * Usage: cpp_kv HEAP put KEY VALUE | get KEY | del KEY | list
 *                    | transfer FROM TO AMOUNT
 */
#include <pheap.hpp>

#include <boost/container/flat_map.hpp>
#include <boost/container/string.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>

namespace {

template <class T>
using alloc = pheap::allocator<T>;
using pstring = boost::container::basic_string<char, std::char_traits<char>, alloc<char>>;
using store = boost::container::flat_map<pstring, std::int64_t, std::less<>,
                                         alloc<std::pair<pstring, std::int64_t>>>;

/* Snapshots what an insert or erase may move: the map object, and its
 * array up to its capacity. */
void snapshot(pheap::transaction &tx, store &s)
{
    tx.add(s);
    if (s.capacity())
        tx.add(&*s.begin(), s.capacity() * sizeof(store::value_type));
}

int usage()
{
    std::fprintf(stderr, "usage: cpp_kv HEAP put KEY VALUE | get KEY | del KEY | list | "
                         "transfer FROM TO AMOUNT\n");
    return 2;
}

} // namespace

int main(int argc, char **argv)
{
    if (argc < 3)
        return usage();
    std::string cmd = argv[2];
    try {
        pheap::heap h = pheap::heap::create(argv[1], 16 << 20);
        store *s = h.find<store>("kv");
        if (!s) /* first run: named and built in one failure-atomic step */
            s = h.make_named<store>("kv", alloc<store>(h));
        auto key = [&](const char *k) { return pstring(k, s->get_allocator()); };
        auto find = [&](const char *k) { return s->find(std::string_view(k)); };

        if (cmd == "put" && argc == 5) {
            pheap::run(h, [&](pheap::transaction &tx) {
                auto it = find(argv[3]);
                if (it != s->end()) {
                    tx.add(it->second);
                    it->second = std::strtoll(argv[4], nullptr, 10);
                } else {
                    snapshot(tx, *s);
                    s->emplace(key(argv[3]), std::strtoll(argv[4], nullptr, 10));
                }
            });
        } else if (cmd == "get" && argc == 4) {
            auto it = find(argv[3]);
            if (it == s->end()) {
                std::printf("%s: no such key\n", argv[3]);
                return 1;
            }
            std::printf("%lld\n", (long long)it->second);
        } else if (cmd == "del" && argc == 4) {
            pheap::run(h, [&](pheap::transaction &tx) {
                auto it = find(argv[3]);
                if (it == s->end())
                    return;
                snapshot(tx, *s);
                s->erase(it);
            });
        } else if (cmd == "list" && argc == 3) {
            for (const auto &kv : *s)
                std::printf("%.*s %lld\n", int(kv.first.size()), kv.first.data(), (long long)kv.second);
        } else if (cmd == "transfer" && argc == 6) {
            std::int64_t amount = std::strtoll(argv[5], nullptr, 10);
            try {
                pheap::run(h, [&](pheap::transaction &tx) {
                    auto from = find(argv[3]), to = find(argv[4]);
                    if (from == s->end() || to == s->end())
                        throw std::runtime_error("no such account");
                    tx.add(to->second);
                    to->second += amount; /* changed first, rolled back below */
                    tx.add(from->second);
                    if (from->second < amount)
                        throw std::runtime_error("insufficient funds");
                    from->second -= amount;
                });
            } catch (const std::runtime_error &e) {
                if (dynamic_cast<const pheap::error *>(&e))
                    throw;
                std::printf("transfer refused: %s (nothing changed)\n", e.what());
                return 1;
            }
        } else {
            return usage();
        }
        h.close();
    } catch (const pheap::error &e) {
        std::fprintf(stderr, "cpp_kv: %s\n", e.what());
        return 1;
    }
    return 0;
}
