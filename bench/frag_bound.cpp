// frag_bound.cpp -- the least memory any allocator that never moves a
// block can end fragbench with: the same phases as wl_frag.c (one size per
// phase, allocate until `live` bytes are live, free `free_pct` % at random,
// next size), served by an ideal best-fit allocator -- no header, no size
// class, no alignment beyond 16 bytes, free neighbours always coalesced --
// whose footprint is the highest address it ever used.  What it reports is
// a bound for the workload, not a competitor: a persistent heap cannot
// move a block (its offset is its identity), so no policy can do better
// than the space this one leaves between the blocks that stay.
//
// usage: pheap_fragbound [--live SIZE] [--rounds N] [--free-pct N] [--size MIN:MAX] [--seed N]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace {

// Where each phase's size falls between the smallest and the largest: the
// table of wl_frag.c.
const double phase_at[] = {0.0, 1.0, 0.2, 0.7, 0.05, 0.45, 0.9, 0.35};

struct best_fit {
    std::map<uint64_t, uint64_t> by_off;           // free run: offset -> length
    std::set<std::pair<uint64_t, uint64_t>> by_len; // (length, offset)
    uint64_t top = 0;                               // end of the space ever used

    uint64_t alloc(uint64_t n)
    {
        auto it = by_len.lower_bound({n, 0});
        if (it == by_len.end()) {
            uint64_t off = top;
            top += n;
            return off;
        }
        uint64_t len = it->first, off = it->second;
        by_len.erase(it);
        by_off.erase(off);
        if (len > n) {
            by_off[off + n] = len - n;
            by_len.insert({len - n, off + n});
        }
        return off;
    }

    void free(uint64_t off, uint64_t len)
    {
        auto next = by_off.lower_bound(off);
        if (next != by_off.end() && off + len == next->first) {
            len += next->second;
            by_len.erase({next->second, next->first});
            next = by_off.erase(next);
        }
        if (next != by_off.begin()) {
            auto prev = std::prev(next);
            if (prev->first + prev->second == off) {
                off = prev->first;
                len += prev->second;
                by_len.erase({prev->second, prev->first});
                by_off.erase(prev);
            }
        }
        by_off[off] = len;
        by_len.insert({len, off});
    }
};

uint64_t parse_size(const char *s)
{
    char *end;
    uint64_t v = strtoull(s, &end, 10);
    if (*end == 'K' || *end == 'k')
        v <<= 10;
    else if (*end == 'M' || *end == 'm')
        v <<= 20;
    else if (*end == 'G' || *end == 'g')
        v <<= 30;
    return v;
}

} // namespace

int main(int argc, char **argv)
{
    uint64_t live_target = 64ull << 20, rounds = 6, free_pct = 90, smin = 100, smax = 2000, seed = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--live"))
            live_target = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = strtoull(argv[i + 1], nullptr, 10);
        else if (!strcmp(argv[i], "--free-pct"))
            free_pct = strtoull(argv[i + 1], nullptr, 10);
        else if (!strcmp(argv[i], "--seed"))
            seed = strtoull(argv[i + 1], nullptr, 10);
        else if (!strcmp(argv[i], "--size") && sscanf(argv[i + 1], "%lu:%lu", &smin, &smax) == 2)
            continue;
        else {
            fprintf(stderr, "usage: %s [--live SIZE] [--rounds N] [--free-pct N] [--size MIN:MAX] "
                    "[--seed N]\n", argv[0]);
            return 2;
        }
    }
    best_fit a;
    std::mt19937_64 rng(seed);
    struct obj { uint64_t off, len, size; };
    std::vector<obj> live;
    uint64_t live_bytes = 0;
    printf("fragbound: ideal best-fit, no moving: live=%llu free_pct=%llu size=%llu..%llu\n",
           (unsigned long long)live_target, (unsigned long long)free_pct,
           (unsigned long long)smin, (unsigned long long)smax);
    for (uint64_t ph = 0; ph < rounds; ph++) {
        uint64_t size = smin + (uint64_t)(phase_at[ph % 8] * (double)(smax - smin));
        uint64_t len = (size + 15) / 16 * 16;
        while (live_bytes < live_target) {
            live.push_back({a.alloc(len), len, size});
            live_bytes += size;
        }
        printf("  phase %llu size %5llu: live %6.1f MiB, footprint %6.1f MiB, %.2f x live\n",
               (unsigned long long)ph, (unsigned long long)size, live_bytes / 1048576.0,
               a.top / 1048576.0, (double)a.top / (double)live_bytes);
        if (ph + 1 == rounds)
            break;
        std::vector<obj> kept;
        for (const obj &o : live) {
            if (rng() % 100 < free_pct) {
                a.free(o.off, o.len);
                live_bytes -= o.size;
            } else {
                kept.push_back(o);
            }
        }
        live.swap(kept);
    }
    return 0;
}
