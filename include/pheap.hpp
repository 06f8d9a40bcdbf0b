/*
 * pheap.hpp -- pheap's C++17 layer: header-only, over the C calls of
 * pheap.h, adding no behaviour of its own.  docs/CPP.md is its manual (what
 * each piece guarantees, which containers work, what is refused).
 *
 *   pheap::heap          RAII handle: open/create/close, move-only; typed access
 *                        (root, make_named, find, destroy_named, make, destroy)
 *   pheap::error         exceptions: std::system_error with pheap's code and
 *                        pheap_errmsg(); every throwing call has a form taking
 *                        std::error_code & that does not throw
 *   pheap::ptr<T>        8-byte self-relative pointer (a fancy pointer)
 *   pheap::allocator<T>  pointer = ptr<T>: containers inside the heap
 *   pheap::transaction   a transaction as a scope; pheap::run(h, fn)
 *   pheap::trace<T>      GC filter of a type, registered with a root
 */
#ifndef PHEAP_HPP
#define PHEAP_HPP

/* In C++ the name pheap is this namespace, so the C handle type is called
 * pheap_handle here: pheap.h is included with the name changed (the calls
 * are extern "C", so nothing changes for the linker).  A file that uses the
 * C++ layer includes pheap.hpp, not pheap.h first. */
#ifdef PHEAP_H
#error "include pheap.hpp before pheap.h (pheap.hpp includes it, naming the handle pheap_handle)"
#endif
#define pheap pheap_handle
#include <pheap.h>
#undef pheap

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>

namespace pheap {

/* ===================================================================== */
/*  Errors                                                               */
/* ===================================================================== */

/* pheap's codes as std::error_code values: the negative PHEAP_E* code
 * itself, in this category; message() is pheap_strerror(). */
class error_category_t final : public std::error_category {
public:
    const char *name() const noexcept override { return "pheap"; }
    std::string message(int code) const override { return pheap_strerror(code); }
};

inline const std::error_category &category() noexcept
{
    static const error_category_t c;
    return c;
}

inline std::error_code make_error_code(int code) noexcept { return {code, category()}; }

/* The code and message of the calling thread's last failure. */
inline std::error_code last_error() noexcept { return make_error_code(pheap_errno()); }

/* Every failure of a throwing call: code() holds the PHEAP_E* code (in
 * pheap::category()), what() the call and pheap_errmsg() at the failure. */
class error : public std::system_error {
public:
    error(int code, const std::string &what) : std::system_error(code, category(), what) {}
    int pheap_code() const noexcept { return code().value(); }
};

namespace detail {

inline void set_error(std::error_code &ec, int code) noexcept
{
    ec = make_error_code(code ? code : PHEAP_EINVAL);
}

#if defined(__cpp_exceptions)
/* what(): "call: message", the message of pheap_errmsg(), which names the
 * C call that failed; once, when that is `call` itself. */
[[noreturn]] inline void raise(const std::error_code &ec, const char *call)
{
    std::string msg = pheap_errmsg(), prefix = std::string(call) + ": ";
    throw error(ec.value(), msg.compare(0, prefix.size(), prefix) == 0 ? msg : prefix + msg);
}

inline void check(const std::error_code &ec, const char *call)
{
    if (ec)
        raise(ec, call);
}
#endif

} // namespace detail

namespace detail {
/* Whether a T* is always even: T is a complete object type aligned to 2 or
 * more.  An incomplete T (a ptr<impl> copied where impl is only declared)
 * answers false, which only forgoes the fact ptr<T>::relocate gives the
 * compiler. */
template <class T, class = void>
struct even_address : std::false_type {};
template <class T>
struct even_address<T, std::enable_if_t<std::is_object_v<T> && (sizeof(T) > 0)>>
    : std::bool_constant<(alignof(T) >= 2)> {};

/* ptr<void>::reference: a type no one can use, as void& does not exist. */
struct no_reference {};
template <class T, class = void>
struct reference_of {
    using type = T &;
};
template <class T>
struct reference_of<T, std::enable_if_t<std::is_void_v<T>>> {
    using type = no_reference &;
};
} // namespace detail

/* ===================================================================== */
/*  ptr<T>: the self-relative pointer                                    */
/* ===================================================================== */
/*
 * One 8-byte word: the distance from the pointer's own address to its
 * target, plus 1, so that 0 is null (a zeroed block holds null pointers)
 * and a pointer may point at itself (list headers do).  The one target it
 * cannot hold is the byte just before itself, which reads as null.
 * Dereference is one add (folded into the load's address).  Copying a ptr
 * computes the distance from the new place, so it stays right wherever the
 * heap is mapped, inside the heap and in volatile memory alike; a ptr in the
 * heap must point into the same heap (or be null) -- see docs/CPP.md.
 */
template <class T>
class ptr {
    std::uintptr_t raw_ = 0; /* target - this + 1; 0: null */

    std::uintptr_t self() const noexcept { return reinterpret_cast<std::uintptr_t>(this); }
    static std::uintptr_t addr(const volatile void *p) noexcept
    {
        return reinterpret_cast<std::uintptr_t>(p);
    }
    void set(const volatile void *p) noexcept { raw_ = p ? addr(p) - self() + 1 : 0; }
    T *at() const noexcept { return reinterpret_cast<T *>(self() + raw_ - 1); }

    /* The word of o, moved to this place: the distance grows by how far o
     * is from here; null stays 0.  Done on the words, not through get() and
     * set(), so that a copy is one test and one add (containers copy
     * pointers in their inner loops).  When T* is even (see even_address) a
     * non-null result is odd -- an even target minus an 8-aligned place,
     * plus 1 -- so never 0, and the compiler is told so: a test of the copy
     * for null becomes the test of o. */
    void relocate(const ptr &o) noexcept
    {
        std::uintptr_t r = o.raw_ ? o.raw_ + (o.self() - self()) : 0;
#if defined(__GNUC__)
        if constexpr (detail::even_address<T>::value)
            if (o.raw_ && !r)
                __builtin_unreachable();
#endif
        raw_ = r;
    }

public:
    using element_type = T;
    using value_type = std::remove_cv_t<T>;
    using difference_type = std::ptrdiff_t;
    using pointer = ptr;
    using reference = typename detail::reference_of<T>::type;
    using iterator_category = std::random_access_iterator_tag;
    template <class U>
    using rebind = ptr<U>;

    ptr() noexcept = default;
    ptr(T *p) noexcept { set(p); } /* nullptr and 0 too */
    ptr(const ptr &o) noexcept { relocate(o); }
    template <class U, class = std::enable_if_t<std::is_convertible_v<U *, T *>>>
    ptr(const ptr<U> &o) noexcept { set(static_cast<T *>(o.get())); }
    /* static_cast, const_cast and the cast from ptr<void>, as for T*. */
    template <class U, class = std::enable_if_t<!std::is_convertible_v<U *, T *>>, class = void,
              class = decltype(static_cast<T *>(std::declval<U *>()))>
    explicit ptr(const ptr<U> &o) noexcept { set(static_cast<T *>(o.get())); }

    ptr &operator=(const ptr &o) noexcept { relocate(o); return *this; }
    ptr &operator=(T *p) noexcept { set(p); return *this; }

    T *get() const noexcept
    {
        if (!raw_)
            return nullptr;
        T *p = at();
#if defined(__GNUC__)
        if (!p) /* a non-null ptr never decodes to null: tells the compiler */
            __builtin_unreachable();
#endif
        return p;
    }
    explicit operator T *() const noexcept { return get(); }
    explicit operator bool() const noexcept { return raw_ != 0; }

    /* The target, unchecked: one add, no test for null. */
    template <class U = T, class = std::enable_if_t<!std::is_void_v<U>>>
    U &operator*() const noexcept { return *at(); }
    T *operator->() const noexcept { return get(); }
    template <class U = T, class = std::enable_if_t<!std::is_void_v<U>>>
    U &operator[](difference_type i) const noexcept { return at()[i]; }

    /* std::pointer_traits<ptr<T>>::pointer_to */
    template <class U = T, class = std::enable_if_t<!std::is_void_v<U>>>
    static ptr pointer_to(U &r) noexcept { return ptr(std::addressof(r)); }

    /* The distance stored (tests and tools; 0 is null). */
    std::uintptr_t raw() const noexcept { return raw_; }

    ptr &operator+=(difference_type n) noexcept { set(get() + n); return *this; }
    ptr &operator-=(difference_type n) noexcept { set(get() - n); return *this; }
    ptr &operator++() noexcept { return *this += 1; }
    ptr &operator--() noexcept { return *this -= 1; }
    ptr operator++(int) noexcept { ptr t(*this); ++*this; return t; }
    ptr operator--(int) noexcept { ptr t(*this); --*this; return t; }
    friend ptr operator+(const ptr &p, difference_type n) noexcept { return ptr(p.get() + n); }
    friend ptr operator+(difference_type n, const ptr &p) noexcept { return ptr(p.get() + n); }
    friend ptr operator-(const ptr &p, difference_type n) noexcept { return ptr(p.get() - n); }
    friend difference_type operator-(const ptr &a, const ptr &b) noexcept { return a.get() - b.get(); }

    friend void swap(ptr &a, ptr &b) noexcept
    {
        T *t = a.get();
        a = b.get();
        b = t;
    }
};

template <class T, class U>
bool operator==(const ptr<T> &a, const ptr<U> &b) noexcept { return a.get() == b.get(); }
template <class T, class U>
bool operator!=(const ptr<T> &a, const ptr<U> &b) noexcept { return a.get() != b.get(); }
template <class T, class U>
bool operator<(const ptr<T> &a, const ptr<U> &b) noexcept { return a.get() < b.get(); }
template <class T, class U>
bool operator<=(const ptr<T> &a, const ptr<U> &b) noexcept { return a.get() <= b.get(); }
template <class T, class U>
bool operator>(const ptr<T> &a, const ptr<U> &b) noexcept { return a.get() > b.get(); }
template <class T, class U>
bool operator>=(const ptr<T> &a, const ptr<U> &b) noexcept { return a.get() >= b.get(); }
template <class T>
bool operator==(const ptr<T> &a, std::nullptr_t) noexcept { return !a; }
template <class T>
bool operator==(std::nullptr_t, const ptr<T> &a) noexcept { return !a; }
template <class T>
bool operator!=(const ptr<T> &a, std::nullptr_t) noexcept { return bool(a); }
template <class T>
bool operator!=(std::nullptr_t, const ptr<T> &a) noexcept { return bool(a); }
template <class T, class U>
bool operator==(const ptr<T> &a, U *b) noexcept { return a.get() == b; }
template <class T, class U>
bool operator==(U *b, const ptr<T> &a) noexcept { return a.get() == b; }
template <class T, class U>
bool operator!=(const ptr<T> &a, U *b) noexcept { return a.get() != b; }
template <class T, class U>
bool operator!=(U *b, const ptr<T> &a) noexcept { return a.get() != b; }
template <class T, class U>
bool operator<(const ptr<T> &a, U *b) noexcept { return a.get() < b; }
template <class T, class U>
bool operator<(U *b, const ptr<T> &a) noexcept { return b < a.get(); }
template <class T, class U>
bool operator<=(const ptr<T> &a, U *b) noexcept { return a.get() <= b; }
template <class T, class U>
bool operator<=(U *b, const ptr<T> &a) noexcept { return b <= a.get(); }
template <class T, class U>
bool operator>(const ptr<T> &a, U *b) noexcept { return a.get() > b; }
template <class T, class U>
bool operator>(U *b, const ptr<T> &a) noexcept { return b > a.get(); }
template <class T, class U>
bool operator>=(const ptr<T> &a, U *b) noexcept { return a.get() >= b; }
template <class T, class U>
bool operator>=(U *b, const ptr<T> &a) noexcept { return b >= a.get(); }

template <class T, class U>
ptr<T> static_pointer_cast(const ptr<U> &p) noexcept { return ptr<T>(static_cast<T *>(p.get())); }
template <class T, class U>
ptr<T> const_pointer_cast(const ptr<U> &p) noexcept { return ptr<T>(const_cast<T *>(p.get())); }

static_assert(sizeof(ptr<int>) == 8, "ptr<T> is one 8-byte word");

/* ===================================================================== */
/*  Open heaps by address (what allocator<T> finds its heap with)        */
/* ===================================================================== */

namespace detail {

/* First byte of h's data region. */
inline void *data_start(::pheap_handle *h) noexcept
{
    struct pheap_stats st;
    return pheap_stats(h, &st) == 0 ? pheap_direct(h, st.data_offset) : nullptr;
}

/* heap::close: the pheap::transaction objects of this thread on handle h
 * let go of it (defined after class transaction). */
void forget_transactions(::pheap_handle *h) noexcept;

/* heap::root's check-then-set within this program (held for two calls,
 * never while a constructor runs). */
inline std::mutex root_lock;

/* Runs T's constructor inside pheap's allocation (pheap_init_fn): an
 * exception is caught here, kept, and cancels the allocation. */
template <class T, class Tuple>
struct constructor {
    Tuple args;
    std::exception_ptr thrown;

    template <std::size_t... I>
    void build(void *block, std::index_sequence<I...>)
    {
        ::new (block) T(std::forward<std::tuple_element_t<I, Tuple>>(std::get<I>(args))...);
    }

    static int run(::pheap_handle *, void *block, std::size_t, void *arg) noexcept
    {
        auto *self = static_cast<constructor *>(arg);
#if defined(__cpp_exceptions)
        try {
            self->build(block, std::make_index_sequence<std::tuple_size_v<Tuple>>());
        } catch (...) {
            self->thrown = std::current_exception();
            return 1;
        }
#else
        self->build(block, std::make_index_sequence<std::tuple_size_v<Tuple>>());
#endif
        return 0;
    }
};

template <class T>
constexpr void check_type()
{
    static_assert(!std::is_array_v<T> && !std::is_reference_v<T> && !std::is_void_v<T>,
                  "pheap: objects are complete object types");
    static_assert(alignof(T) <= 16, "pheap: blocks are 16-byte aligned at most");
}

} // namespace detail

/* ===================================================================== */
/*  trace<T>: GC filters                                                 */
/* ===================================================================== */

/* What a filter hands its children to. */
class tracer {
    pheap_tracer *tr_;

public:
    explicit tracer(pheap_tracer *tr) noexcept : tr_(tr) {}
    ::pheap_handle *heap() const noexcept { return pheap_tracer_heap(tr_); }

    /* The block `p` points to is reachable; its children are found by
     * trace<U> when U has a specialisation, else conservatively. */
    template <class U>
    void operator()(const ptr<U> &p) const noexcept { visit(p.get()); }
    template <class U>
    void visit(U *p) const noexcept;
    /* A child given by offset, traced conservatively. */
    void offset(pheap_off off) const noexcept { pheap_trace(tr_, off, nullptr); }
};

/* Specialise for each type whose blocks a root reaches in GC mode:
 *   template <> struct pheap::trace<node> {
 *       static void children(const pheap::tracer &t, const node &n) { t(n.next); }
 *   };
 * Registered with heap::set_filter<T>(root). */
template <class T>
struct trace {};

namespace detail {

template <class T, class = void>
struct has_trace : std::false_type {};
template <class T>
struct has_trace<T, std::void_t<decltype(trace<T>::children(std::declval<const tracer &>(),
                                                            std::declval<const T &>()))>>
    : std::true_type {};

template <class T>
void filter(pheap_tracer *tr, pheap_off, const void *block, std::size_t) noexcept
{
    trace<T>::children(tracer(tr), *static_cast<const T *>(block));
}

template <class T>
pheap_filter_fn filter_of() noexcept
{
    if constexpr (has_trace<std::remove_cv_t<T>>::value)
        return &filter<std::remove_cv_t<T>>;
    else
        return nullptr;
}

} // namespace detail

template <class U>
void tracer::visit(U *p) const noexcept
{
    if (!p)
        return;
    ::pheap_handle *h = heap();
    pheap_trace(tr_, pheap_offset(h, p), detail::filter_of<U>());
}

/* ===================================================================== */
/*  heap                                                                 */
/* ===================================================================== */

class heap {
    ::pheap_handle *h_ = nullptr;

public:
    heap() noexcept = default;
    /* Takes over a handle opened with pheap_open (closed by this object). */
    explicit heap(::pheap_handle *h) noexcept : h_(h) {}
    heap(const heap &) = delete;
    heap &operator=(const heap &) = delete;
    heap(heap &&o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
    heap &operator=(heap &&o) noexcept
    {
        if (this != &o) {
            std::error_code ec;
            close(ec);
            h_ = std::exchange(o.h_, nullptr);
        }
        return *this;
    }
    /* Closes the heap; an error of pheap_close is dropped (call close()). */
    ~heap()
    {
        std::error_code ec;
        close(ec);
    }

    /* pheap_open(path, opts), not throwing: an empty heap and ec set. */
    static heap open(const std::string &path, const pheap_options *opts, std::error_code &ec) noexcept
    {
        ::pheap_handle *h = nullptr;
        int rc = pheap_open(path.c_str(), opts, &h);
        ec.clear();
        if (rc)
            detail::set_error(ec, rc);
        return heap(rc ? nullptr : h);
    }
    /* Opens an existing heap read-write (flags: PHEAP_RDONLY ...). */
    static heap open(const std::string &path, unsigned flags, std::error_code &ec) noexcept
    {
        pheap_options o{};
        o.flags = flags;
        return open(path, &o, ec);
    }
    /* open(path, 0, ec): flags 0, not a null pheap_options pointer. */
    static heap open(const std::string &path, int flags, std::error_code &ec) noexcept
    {
        return open(path, unsigned(flags), ec);
    }
    /* Creates the heap file when missing (PHEAP_CREATE) with `size` bytes of
     * data region (0: 64 MiB), else opens it. */
    static heap create(const std::string &path, std::uint64_t size, std::error_code &ec,
                       unsigned flags = 0) noexcept
    {
        pheap_options o{};
        o.size = size;
        o.flags = PHEAP_CREATE | flags;
        return open(path, &o, ec);
    }
#if defined(__cpp_exceptions)
    static heap open(const std::string &path, const pheap_options *opts = nullptr)
    {
        std::error_code ec;
        heap h = open(path, opts, ec);
        detail::check(ec, "pheap_open");
        return h;
    }
    static heap open(const std::string &path, unsigned flags)
    {
        pheap_options o{};
        o.flags = flags;
        return open(path, &o);
    }
    static heap open(const std::string &path, int flags) { return open(path, unsigned(flags)); }
    static heap create(const std::string &path, std::uint64_t size = 0, unsigned flags = 0)
    {
        pheap_options o{};
        o.size = size;
        o.flags = PHEAP_CREATE | flags;
        return open(path, &o);
    }
#endif

    /* Clean shutdown (pheap_close); the object is empty afterwards, even on
     * error.  A transaction still open in this thread is rolled back. */
    void close(std::error_code &ec) noexcept
    {
        ec.clear();
        if (!h_)
            return;
        detail::forget_transactions(h_);
        int rc = pheap_close(std::exchange(h_, nullptr));
        if (rc)
            detail::set_error(ec, rc);
    }
#if defined(__cpp_exceptions)
    void close()
    {
        std::error_code ec;
        close(ec);
        detail::check(ec, "pheap_close");
    }
#endif

    ::pheap_handle *get() const noexcept { return h_; }
    explicit operator bool() const noexcept { return h_ != nullptr; }

    /* ---- addresses and offsets ---------------------------------------- */
    template <class T = void>
    T *direct(pheap_off off) const noexcept { return static_cast<T *>(pheap_direct(h_, off)); }
    pheap_off offset(const void *p) const noexcept { return pheap_offset(h_, p); }
    template <class T>
    void persist(const T &obj) const noexcept { pheap_persist(h_, std::addressof(obj), sizeof(T)); }
    void persist(const void *p, std::size_t len) const noexcept { pheap_persist(h_, p, len); }
    /* The depth of this thread's transaction on the heap (pheap_tx_depth). */
    int tx_depth() const noexcept { return pheap_tx_depth(h_); }

    /* ---- typed objects, non-throwing forms ------------------------------ */

    /* A T built with args in a new block: inside the allocation outside a
     * transaction (a constructor that throws leaves nothing allocated), in
     * a block of the transaction inside one (the block exists only if the
     * transaction commits; a throwing constructor frees it at once).  The
     * exception, if any, is rethrown by the throwing form; here it is
     * reported as PHEAP_ECANCELED. */
    template <class T, class... A>
    T *make(std::error_code &ec, A &&...args) noexcept
    {
        std::exception_ptr thrown;
        T *p = make_impl<T>(ec, thrown, std::forward<A>(args)...);
        return p;
    }

    /* Runs ~T() and frees the block of `p` (null: nothing).  Inside a
     * transaction the object's bytes are snapshotted first and the free
     * takes effect at the commit.  ~T() runs only once the free is sure: a
     * p that is not the start of a live block, a read-only handle or a heap
     * in read-only mode is refused with nothing run. */
    template <class T>
    void destroy(T *p, std::error_code &ec) noexcept
    {
        ec.clear();
        if (!p)
            return;
        pheap_off off = pheap_offset(h_, p);
        int rc = off ? 0 : PHEAP_ERANGE;
        if (!rc && in_tx()) {
            /* the block stays readable until the commit: ~T() after */
            if ((rc = pheap_tx_add(h_, p, sizeof(T))) == 0 && (rc = pheap_tx_free(h_, off)) == 0)
                p->~T();
        } else if (!rc && (rc = can_free(off)) == 0) {
            p->~T();
            rc = pheap_free(h_, off);
        }
        if (rc)
            detail::set_error(ec, rc);
    }
    template <class T>
    void destroy(const ptr<T> &p, std::error_code &ec) noexcept { destroy(p.get(), ec); }

    /* The object named `name` (pheap_lookup), or null with ec PHEAP_ENOENT.
     * The type is the caller's word: pheap keeps no type. */
    template <class T>
    T *find(const char *name, std::error_code &ec) const noexcept
    {
        ec.clear();
        pheap_off off = pheap_lookup(h_, name);
        if (!off) {
            detail::set_error(ec, pheap_errno());
            return nullptr;
        }
        return static_cast<T *>(pheap_direct(h_, off));
    }

    /* A T built with args and named `name`, in one failure-atomic step: after
     * a crash, the name exists with its finished object, or neither exists.
     * A constructor that throws leaves no name and no block (ECANCELED here,
     * the exception itself from the throwing form).  Inside a transaction
     * (pheap::transaction, pheap::run) the name and the object are part of
     * it: they exist after its commit, and its abort -- an exception that
     * leaves the transaction -- removes both; until the commit only this
     * thread finds the name, and another thread's make_named or
     * destroy_named of it fails with PHEAP_EBUSY. */
    template <class T, class... A>
    T *make_named(const char *name, std::error_code &ec, A &&...args) noexcept
    {
        std::exception_ptr thrown;
        return make_named_impl<T>(name, ec, thrown, std::forward<A>(args)...);
    }

    /* Runs ~T() on the object named `name`, then frees it and removes the
     * name in one failure-atomic step.  Whether that step can be done is
     * asked first: when it cannot (another thread's transaction holds the
     * name, read-only mode, a read-only handle) nothing runs and nothing
     * changes.  Inside a transaction the object is snapshotted and the name
     * taken before ~T() runs (an abort gives both back), and the name and
     * the block go at the commit.  Outside one a name whose block was freed
     * already (PHEAP_ENOTLIVE) is removed without ~T() -- in LOG mode, and
     * only until the block is handed out again: then the name names another
     * object, which nothing can tell (in GC mode a freed block looks live
     * from the start, until a thread cache gives it back).  The question is
     * a transaction rolled back (pheap_stats counts it in tx_aborts; no
     * fence).  ~T() must close the transactions it opens. */
    template <class T>
    void destroy_named(const char *name, std::error_code &ec) noexcept
    {
        T *p = find<T>(name, ec);
        if (!p)
            return;
        int rc;
        if (in_tx()) {
            if ((rc = pheap_tx_add(h_, p, sizeof(T))) == 0 && (rc = pheap_free_named(h_, name)) == 0)
                p->~T();
        } else if ((rc = can_free_named(name, pheap_offset(h_, p))) == 0) {
            p->~T();
            rc = pheap_free_named(h_, name);
        } else if (rc == PHEAP_ENOTLIVE) {
            pheap_free_named(h_, name); /* the dangling name alone */
        }
        if (rc)
            detail::set_error(ec, rc);
    }

    /* The object root `name` names; when the root is unset, a T() is made and
     * the root set to it.  A crash between the two leaves the new block
     * allocated and unnamed (make_named has no such window).  Threads of
     * this program that find the root unset at once may each make a T:
     * one is rooted and returned to all, the others are destroyed. */
    template <class T>
    T *root(const char *name, std::error_code &ec) noexcept
    {
        ec.clear();
        pheap_off off = pheap_root_get(h_, name);
        if (off)
            return static_cast<T *>(pheap_direct(h_, off));
        if (pheap_errno() != PHEAP_ENOENT) {
            detail::set_error(ec, pheap_errno());
            return nullptr;
        }
        T *p = make<T>(ec);
        if (!p)
            return nullptr;
        int rc;
        {
            std::lock_guard<std::mutex> g(detail::root_lock); /* check, then set */
            off = pheap_root_get(h_, name);
            rc = off ? 0 : pheap_root_set(h_, name, pheap_offset(h_, p));
        }
        if (off || rc) { /* another thread's T was rooted first, or no root */
            std::error_code ignored;
            destroy(p, ignored);
            if (rc) {
                detail::set_error(ec, rc);
                return nullptr;
            }
            return static_cast<T *>(pheap_direct(h_, off));
        }
        return p;
    }

    /* Registers trace<T> as the GC filter of the block root or name `root`
     * names (pheap_root_set_filter): after each open, before recover(). */
    template <class T>
    void set_filter(const char *root, std::error_code &ec) noexcept
    {
        static_assert(detail::has_trace<T>::value, "pheap::trace<T> has no children()");
        ec.clear();
        int rc = pheap_root_set_filter(h_, root, &detail::filter<T>);
        if (rc)
            detail::set_error(ec, rc);
    }

#if defined(__cpp_exceptions)
    /* ---- typed objects, throwing forms ---------------------------------- */
    template <class T, class... A>
    T *make(A &&...args)
    {
        std::error_code ec;
        std::exception_ptr thrown;
        T *p = make_impl<T>(ec, thrown, std::forward<A>(args)...);
        if (thrown)
            std::rethrow_exception(thrown);
        detail::check(ec, in_tx() ? "pheap_tx_alloc" : "pheap_alloc_init");
        return p;
    }
    template <class T>
    void destroy(T *p)
    {
        std::error_code ec;
        destroy(p, ec);
        detail::check(ec, "pheap::heap::destroy");
    }
    template <class T>
    void destroy(const ptr<T> &p) { destroy(p.get()); }
    template <class T>
    T *find(const char *name) const
    {
        std::error_code ec;
        T *p = find<T>(name, ec);
        if (ec && ec.value() != PHEAP_ENOENT)
            detail::raise(ec, "pheap_lookup");
        return p;
    }
    template <class T, class... A>
    T *make_named(const char *name, A &&...args)
    {
        std::error_code ec;
        std::exception_ptr thrown;
        T *p = make_named_impl<T>(name, ec, thrown, std::forward<A>(args)...);
        if (thrown)
            std::rethrow_exception(thrown);
        detail::check(ec, "pheap_alloc_named");
        return p;
    }
    template <class T>
    void destroy_named(const char *name)
    {
        std::error_code ec;
        destroy_named<T>(name, ec);
        detail::check(ec, "pheap_free_named");
    }
    template <class T>
    T &root(const char *name)
    {
        std::error_code ec;
        T *p = root<T>(name, ec);
        detail::check(ec, "pheap::heap::root");
        return *p;
    }
    template <class T>
    void set_filter(const char *root)
    {
        std::error_code ec;
        set_filter<T>(root, ec);
        detail::check(ec, "pheap_root_set_filter");
    }
    /* pheap_recover_ex (GC mode, after a crash; register filters first) and
     * pheap_gc_ex (offline leak collection), tracing ptr words too
     * (PHEAP_GC_SELF_RELATIVE); `report` may be null. */
    void recover(pheap_gc_report *report = nullptr)
    {
        std::error_code ec;
        recover(report, ec);
        detail::check(ec, "pheap_recover");
    }
    void gc(pheap_gc_report *report = nullptr)
    {
        std::error_code ec;
        gc(report, ec);
        detail::check(ec, "pheap_gc");
    }
    /* pheap_checkpoint: at the checkpoint durability level, the heap's
     * state now durable in its file (a no-op at the other levels). */
    void checkpoint()
    {
        std::error_code ec;
        checkpoint(ec);
        detail::check(ec, "pheap_checkpoint");
    }
#endif
    void checkpoint(std::error_code &ec) noexcept
    {
        ec.clear();
        int rc = pheap_checkpoint(h_);
        if (rc)
            detail::set_error(ec, rc);
    }
    void recover(pheap_gc_report *report, std::error_code &ec) noexcept
    {
        pheap_gc_options o{};
        o.flags = PHEAP_GC_SELF_RELATIVE;
        ec.clear();
        int rc = pheap_recover_ex(h_, &o, report);
        if (rc)
            detail::set_error(ec, rc);
    }
    void gc(pheap_gc_report *report, std::error_code &ec) noexcept
    {
        pheap_gc_options o{};
        o.flags = PHEAP_GC_SELF_RELATIVE;
        ec.clear();
        int rc = pheap_gc_ex(h_, &o, report);
        if (rc)
            detail::set_error(ec, rc);
    }

private:
    bool in_tx() const noexcept { return pheap_tx_depth(h_) != 0; }

    /* Whether pheap_free_named(name) of the block at `off` would go through
     * now, changing nothing: 0 or the error it would give.  LOG mode asks
     * the call itself inside a transaction it rolls back. */
    int can_free_named(const char *name, pheap_off off) noexcept
    {
        int rc = pheap_tx_begin(h_);
        if (rc == 0) {
            rc = pheap_free_named(h_, name);
            pheap_tx_abort(h_);
            return rc;
        }
        return rc == PHEAP_ENOTSUP ? can_free(off) : rc; /* GC mode: no transactions */
    }

    /* Whether pheap_free(off) would go through now, outside a transaction:
     * 0, or the error of the handle or the heap (a read-only handle or
     * mode: what pheap_free of 0 says), or of `off` (not the start of a
     * live block). */
    int can_free(pheap_off off) noexcept
    {
        int rc = pheap_free(h_, 0);
        return rc ? rc : pheap_usable_size(h_, off) ? 0 : pheap_errno();
    }

    template <class T, class... A>
    T *make_impl(std::error_code &ec, std::exception_ptr &thrown, A &&...args) noexcept
    {
        detail::check_type<T>();
        ec.clear();
        if (in_tx()) {
            pheap_off off = pheap_tx_alloc(h_, sizeof(T));
            if (!off) {
                detail::set_error(ec, pheap_errno());
                return nullptr;
            }
            void *block = pheap_direct(h_, off);
#if defined(__cpp_exceptions)
            try {
                return ::new (block) T(std::forward<A>(args)...);
            } catch (...) {
                pheap_tx_free(h_, off); /* a block of the transaction: neither happens */
                thrown = std::current_exception();
                detail::set_error(ec, PHEAP_ECANCELED);
                return nullptr;
            }
#else
            return ::new (block) T(std::forward<A>(args)...);
#endif
        }
        using C = detail::constructor<T, std::tuple<A &&...>>;
        C c{std::forward_as_tuple(std::forward<A>(args)...), nullptr};
        pheap_off off = pheap_alloc_init(h_, sizeof(T), 0, &C::run, &c);
        if (!off) {
            thrown = c.thrown;
            detail::set_error(ec, pheap_errno());
            return nullptr;
        }
        return static_cast<T *>(pheap_direct(h_, off));
    }

    template <class T, class... A>
    T *make_named_impl(const char *name, std::error_code &ec, std::exception_ptr &thrown,
                       A &&...args) noexcept
    {
        detail::check_type<T>();
        ec.clear();
        using C = detail::constructor<T, std::tuple<A &&...>>;
        C c{std::forward_as_tuple(std::forward<A>(args)...), nullptr};
        pheap_off off = pheap_alloc_named_init(h_, name, sizeof(T), 0, &C::run, &c);
        if (!off) {
            thrown = c.thrown;
            detail::set_error(ec, pheap_errno());
            return nullptr;
        }
        return static_cast<T *>(pheap_direct(h_, off));
    }
};

/* ===================================================================== */
/*  allocator<T>                                                         */
/* ===================================================================== */
/*
 * Hands out blocks of the heap it was made with, as ptr<T>: a container
 * using it keeps its whole structure in the heap when the container object
 * itself is there (make it with heap::make or make_named).  It holds one
 * ptr to the heap's data region and finds the open handle by that address,
 * so it stays valid when the heap is mapped elsewhere.  Inside a
 * transaction of the calling thread it allocates with pheap_tx_alloc and
 * frees with pheap_tx_free (both take effect only at the commit);
 * elsewhere with pheap_alloc / pheap_free.
 */
template <class T>
class allocator {
    template <class U>
    friend class allocator;
    ptr<char> anchor_; /* the first byte of the heap's data region */

    /* pheap_of: the library's one table of open heaps, for every module */
    ::pheap_handle *handle() const noexcept { return pheap_of(anchor_.get()); }

public:
    using value_type = T;
    using pointer = ptr<T>;
    using const_pointer = ptr<const T>;
    using void_pointer = ptr<void>;
    using const_void_pointer = ptr<const void>;
    using size_type = std::size_t;
    using difference_type = std::ptrdiff_t;
    /* A container keeps its heap: assigned from one of another heap, it
     * copies or moves the elements into its own. */
    using propagate_on_container_copy_assignment = std::false_type;
    using propagate_on_container_move_assignment = std::false_type;
    using propagate_on_container_swap = std::false_type;
    using is_always_equal = std::false_type;
    template <class U>
    struct rebind {
        using other = allocator<U>;
    };

    explicit allocator(const heap &h) noexcept
        : anchor_(static_cast<char *>(detail::data_start(h.get()))) {}
    allocator(const allocator &o) noexcept : anchor_(o.anchor_) {}
    template <class U>
    allocator(const allocator<U> &o) noexcept : anchor_(o.anchor_) {}
    allocator &operator=(const allocator &o) noexcept { anchor_ = o.anchor_; return *this; }

    pointer allocate(size_type n)
    {
        ::pheap_handle *h = handle();
        pheap_off off = 0;
        if (n <= std::numeric_limits<size_type>::max() / sizeof(T) && h) {
            std::size_t bytes = n ? n * sizeof(T) : 1;
            off = pheap_tx_depth(h) != 0 ? pheap_tx_alloc(h, bytes) : pheap_alloc(h, bytes);
        }
        if (!off) {
#if defined(__cpp_exceptions)
            if (!h)
                throw error(PHEAP_EINVAL, "pheap::allocator: its heap is not open");
            if (n > std::numeric_limits<size_type>::max() / sizeof(T))
                throw std::bad_array_new_length();
            detail::raise(last_error(), "pheap::allocator::allocate");
#else
            std::abort(); /* as the standard containers do without exceptions */
#endif
        }
        return pointer(static_cast<T *>(pheap_direct(h, off)));
    }

    /* Errors (a block of another heap, a double free) are left in
     * pheap_errno() and pheap_errmsg(): deallocate does not throw. */
    void deallocate(pointer p, size_type) noexcept
    {
        ::pheap_handle *h = handle();
        if (!h || !p)
            return;
        pheap_off off = pheap_offset(h, p.get());
        if (pheap_tx_depth(h) != 0)
            pheap_tx_free(h, off);
        else
            pheap_free(h, off);
    }

    /* The handle of the heap, or null when it is not open in this process. */
    ::pheap_handle *heap_handle() const noexcept { return handle(); }

    template <class U>
    bool operator==(const allocator<U> &o) const noexcept { return anchor_.get() == o.anchor_.get(); }
    template <class U>
    bool operator!=(const allocator<U> &o) const noexcept { return anchor_.get() != o.anchor_.get(); }
};

/* ===================================================================== */
/*  Transactions                                                         */
/* ===================================================================== */
/*
 * pheap::transaction tx(h);  ...  tx.commit();
 * Opens a transaction (or an inner level) of the calling thread; the
 * destructor rolls it back when commit() was not reached -- an exception
 * left the scope, or the code returned early.  Everything the C calls of
 * the thread do meanwhile is part of it: heap::make / destroy, the
 * allocator, add() snapshots (undo) and write() (redo).
 */
class transaction {
    ::pheap_handle *h_;
    bool open_ = false;
    transaction *outer_ = nullptr; /* the open one made before it in this thread */

    /* The open transaction objects of this thread, newest first: closing a
     * heap (heap::close) rolls its transaction back, and its objects must
     * then leave the freed handle alone. */
    static inline thread_local transaction *newest_ = nullptr;
    friend void detail::forget_transactions(::pheap_handle *h) noexcept;

    void opened() noexcept
    {
        open_ = true;
        outer_ = newest_;
        newest_ = this;
    }
    void closed() noexcept
    {
        if (!open_)
            return;
        open_ = false;
        for (transaction **t = &newest_; *t; t = &(*t)->outer_)
            if (*t == this) {
                *t = outer_;
                break;
            }
    }

public:
    explicit transaction(heap &h, std::error_code &ec) noexcept : h_(h.get())
    {
        int rc = pheap_tx_begin(h_);
        ec.clear();
        if (rc)
            detail::set_error(ec, rc);
        else
            opened();
    }
#if defined(__cpp_exceptions)
    explicit transaction(heap &h) : h_(h.get())
    {
        int rc = pheap_tx_begin(h_);
        if (rc)
            detail::raise(make_error_code(rc), "pheap_tx_begin");
        opened();
    }
#endif
    transaction(const transaction &) = delete;
    transaction &operator=(const transaction &) = delete;
    ~transaction()
    {
        if (open_)
            pheap_tx_abort(h_);
        closed();
    }

    bool active() const noexcept { return open_; }

    /* Commits this level (the outermost: everything durable on return). */
    void commit(std::error_code &ec) noexcept
    {
        ec.clear();
        int rc = open_ ? pheap_tx_commit(h_) : PHEAP_ENOTX;
        closed();
        if (rc)
            detail::set_error(ec, rc);
    }
    /* Rolls back the whole transaction now. */
    void abort() noexcept
    {
        if (open_)
            pheap_tx_abort(h_);
        closed();
    }

    /* Snapshot (undo): obj's bytes come back on abort or after a crash;
     * change them in place afterwards. */
    template <class T>
    void add(const T &obj, std::error_code &ec) noexcept { add(std::addressof(obj), sizeof(T), ec); }
    void add(const void *p, std::size_t len, std::error_code &ec) noexcept
    {
        ec.clear();
        int rc = pheap_tx_add(h_, p, len);
        if (rc)
            detail::set_error(ec, rc);
    }
    /* Redo write: dst takes `value` at the commit (read() sees it before). */
    template <class T>
    void write(T &dst, const T &value, std::error_code &ec) noexcept
    {
        static_assert(std::is_trivially_copyable_v<T>, "transaction::write copies bytes");
        ec.clear();
        int rc = pheap_tx_write(h_, std::addressof(dst), std::addressof(value), sizeof(T));
        if (rc)
            detail::set_error(ec, rc);
    }
    template <class T>
    T read(const T &src, std::error_code &ec) const noexcept
    {
        static_assert(std::is_trivially_copyable_v<T>, "transaction::read copies bytes");
        T out;
        ec.clear();
        int rc = pheap_tx_read(h_, &out, std::addressof(src), sizeof(T));
        if (rc)
            detail::set_error(ec, rc);
        return out;
    }

#if defined(__cpp_exceptions)
    void commit()
    {
        std::error_code ec;
        commit(ec);
        detail::check(ec, "pheap_tx_commit");
    }
    template <class T>
    void add(const T &obj) { add(std::addressof(obj), sizeof(T)); }
    void add(const void *p, std::size_t len)
    {
        std::error_code ec;
        add(p, len, ec);
        detail::check(ec, "pheap_tx_add");
    }
    template <class T>
    void write(T &dst, const T &value)
    {
        std::error_code ec;
        write(dst, value, ec);
        detail::check(ec, "pheap_tx_write");
    }
    template <class T>
    T read(const T &src) const
    {
        std::error_code ec;
        T out = read(src, ec);
        detail::check(ec, "pheap_tx_read");
        return out;
    }
#endif
};

inline void detail::forget_transactions(::pheap_handle *h) noexcept
{
    for (transaction *t = transaction::newest_; t;) {
        transaction *outer = t->outer_;
        if (t->h_ == h)
            t->closed();
        t = outer;
    }
}

#if defined(__cpp_exceptions)
/* Runs fn() -- or fn(tx), when it takes the transaction -- in a transaction
 * and commits it, unless fn did (tx.commit()) or rolled it back
 * (tx.abort()); an exception from fn rolls the transaction back and goes on
 * to the caller. */
template <class F>
void run(heap &h, F &&fn)
{
    transaction tx(h);
    if constexpr (std::is_invocable_v<F &&, transaction &>)
        std::forward<F>(fn)(tx);
    else
        std::forward<F>(fn)();
    if (tx.active())
        tx.commit();
}
#endif

} // namespace pheap

#endif /* PHEAP_HPP */
