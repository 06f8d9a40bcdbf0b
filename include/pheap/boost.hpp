/*
 * pheap/boost.hpp -- optional: Boost.Intrusive's red-black tree nodes for
 * pheap::ptr, so that a boost::container::map, set, multimap or multiset of
 * pheap::allocator searches as fast as with raw pointers.  The links in the
 * nodes stay pheap::ptr words, byte for byte what Boost's generic nodes hold;
 * the tree code walks raw node addresses in registers and loads both
 * children of a node before its key is compared.  docs/CPP.md, "Boost trees".
 *
 * Include it in every file that uses such a container, before the first use
 * of the container's type (it includes pheap.hpp; the Boost headers may come
 * before or after it), or in none: two definitions of one Boost type in one
 * program break the one-definition rule, although both read the same bytes.
 */
#ifndef PHEAP_BOOST_HPP
#define PHEAP_BOOST_HPP

#include <pheap.hpp>

#include <boost/intrusive/set_hook.hpp> /* declares rbtree_node_traits */

#include <cstddef>
#include <cstdint>

namespace pheap {
namespace detail {

/* A node's links, as Boost's rbtree_node<ptr<void>> lays them out (pinned
 * below): three ptr words and the colour, 48 bytes. */
struct rbtree_node {
    enum color { red_t, black_t };
    ptr<rbtree_node> parent_, left_, right_; /* ptr words: target - &field + 1 */
    color color_;
};

/* The target of `link`, whose word is `word` (0: null): one add, and no
 * second test for null after it. */
inline rbtree_node *decode(const ptr<rbtree_node> &link, std::uintptr_t word) noexcept
{
    if (!word)
        return nullptr;
    auto *n = reinterpret_cast<rbtree_node *>(reinterpret_cast<std::uintptr_t>(&link) + word - 1);
#if defined(__GNUC__)
    if (!n) /* a non-null ptr never decodes to null */
        __builtin_unreachable();
#endif
    return n;
}

/* A step down the tree is `x = left(x)` in one arm of the key compare and
 * `x = right(x)` in the other.  Each arm reads both words, in the same
 * order, and hands them to an empty asm so that neither read is dropped:
 * the two arms then hold the same two loads, and g++ (code hoisting, -O2)
 * moves them above the compare.  A mispredicted compare then waits for one
 * add, not for a load and an add.  Raw pointers get this from g++'s
 * -fhoist-adjacent-loads; ptr's arms differ (each adds its own field's
 * address), so it needs saying.  clang 14 does not hoist them either way
 * (docs/CPP.md); the traits still spare it Boost's ptr locals. */
template <bool Right>
inline rbtree_node *child(const rbtree_node *n) noexcept
{
    std::uintptr_t left = n->left_.raw(), right = n->right_.raw();
#if defined(__GNUC__)
    __asm__("" : : "r"(left), "r"(right));
#endif
    return Right ? decode(n->right_, right) : decode(n->left_, left);
}

/* Boost.Intrusive's NodeTraits for a red-black tree: node_ptr is a raw
 * address, valid where the heap is mapped now, and lives only in registers
 * and in the tree's iterators (volatile); every link stored is a ptr. */
struct rbtree_node_traits {
    using node = rbtree_node;
    using node_ptr = node *;
    using const_node_ptr = const node *;
    using color = node::color;

    static node_ptr get_parent(const_node_ptr n) noexcept { return decode(n->parent_, n->parent_.raw()); }
    static void set_parent(node_ptr n, node_ptr p) noexcept { n->parent_ = p; }
    static node_ptr get_left(const_node_ptr n) noexcept { return child<false>(n); }
    static void set_left(node_ptr n, node_ptr l) noexcept { n->left_ = l; }
    static node_ptr get_right(const_node_ptr n) noexcept { return child<true>(n); }
    static void set_right(node_ptr n, node_ptr r) noexcept { n->right_ = r; }
    static color get_color(const_node_ptr n) noexcept { return n->color_; }
    static void set_color(node_ptr n, color c) noexcept { n->color_ = c; }
    static color black() noexcept { return node::black_t; }
    static color red() noexcept { return node::red_t; }
};

/* The same bytes as Boost's own node for ptr: a heap written with or
 * without this header reads the same under the other. */
using boost_rbtree_node = boost::intrusive::rbtree_node<ptr<void>>;
static_assert(sizeof(rbtree_node) == sizeof(boost_rbtree_node), "pheap: rbtree node size");
static_assert(offsetof(rbtree_node, parent_) == offsetof(boost_rbtree_node, parent_) &&
                  offsetof(rbtree_node, left_) == offsetof(boost_rbtree_node, left_) &&
                  offsetof(rbtree_node, right_) == offsetof(boost_rbtree_node, right_) &&
                  offsetof(rbtree_node, color_) == offsetof(boost_rbtree_node, color_),
              "pheap: rbtree node layout");
static_assert(int(rbtree_node::red_t) == int(boost_rbtree_node::red_t) &&
                  int(rbtree_node::black_t) == int(boost_rbtree_node::black_t),
              "pheap: rbtree colours");

} // namespace detail
} // namespace pheap

namespace boost {
namespace intrusive {

/* The hooks of set, multiset, map and multimap (red_black_tree, Boost.Container's
 * default) with void_pointer ptr<void>, which pheap::allocator gives.  Boost packs
 * the colour into the parent link only for raw pointers, so optimize_size
 * changes nothing for ptr: both take the same node. */
template <bool OptimizeSize>
struct rbtree_node_traits<pheap::ptr<void>, OptimizeSize> : pheap::detail::rbtree_node_traits {};

} // namespace intrusive
} // namespace boost

#endif
