/*
 * util.h -- small helpers shared by every layer: branch hints, alignment,
 * little-endian access and the internal debug-check macro.
 */
#ifndef PH_UTIL_H
#define PH_UTIL_H

#include <stddef.h>
#include <stdint.h>

#define ph_likely(x) __builtin_expect(!!(x), 1)
#define ph_unlikely(x) __builtin_expect(!!(x), 0)
#define ph_noinline __attribute__((noinline))
#define ph_export __attribute__((visibility("default")))

#define PH_ALIGN_UP(x, a) (((x) + ((a) - 1)) & ~((uint64_t)(a) - 1))
#define PH_ALIGN_DOWN(x, a) ((x) & ~((uint64_t)(a) - 1))
#define PH_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define PH_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PH_MAX(a, b) ((a) > (b) ? (a) : (b))

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "pheap's file format is little-endian; big-endian hosts are not supported yet"
#endif

/* Atomic access to plain fields (fields named x*). */
#define ph_load(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define ph_load_relaxed(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define ph_store(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define ph_store_relaxed(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)

/* Sequence locks (a slab's xgen): the reader's loads before ph_seq_read
 * happen before its loads after it; the writer's store before
 * ph_seq_write (the odd count) happens before its stores after it.  Under
 * ThreadSanitizer, which has no fences, compiler barriers: x86 keeps loads
 * in order among themselves, and stores too. */
#if defined(__SANITIZE_THREAD__)
#define ph_seq_read() __atomic_signal_fence(__ATOMIC_ACQUIRE)
#define ph_seq_write() __atomic_signal_fence(__ATOMIC_RELEASE)
#else
#define ph_seq_read() __atomic_thread_fence(__ATOMIC_ACQUIRE)
#define ph_seq_write() __atomic_thread_fence(__ATOMIC_RELEASE)
#endif

/* Internal invariant checks, graded by PH_DEBUG (0 off, 1 cheap, 2 all).
 * Never used for conditions a user can cause. */
#ifndef PH_DEBUG
#define PH_DEBUG 0
#endif
void ph_debug_fail(const char *expr, const char *file, int line);
#define ph_debug_check(level, expr)                                        \
    do {                                                                   \
        if (PH_DEBUG >= (level) && !(expr))                                \
            ph_debug_fail(#expr, __FILE__, __LINE__);                      \
    } while (0)

/* 1 if the n bytes at p are all zero (n may be 0). */
static inline int ph_all_zero(const void *p, size_t n)
{
    const unsigned char *c = p;
    return n == 0 || (c[0] == 0 && __builtin_memcmp(c, c + 1, n - 1) == 0);
}

/* SplitMix64: a stateless mixer for seeded, order-independent draws. */
static inline uint64_t ph_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Uniform double in [0, 1) from a 64-bit value. */
static inline double ph_unit_double(uint64_t x)
{
    return (double)(x >> 11) * (1.0 / 9007199254740992.0);
}

#endif /* PH_UTIL_H */
