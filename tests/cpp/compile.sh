#!/bin/sh
# compile.sh -- what the compilers say about pheap.hpp:
#   1. it compiles with -std=c++17 -Wall -Wextra -Wshadow -pedantic -Werror
#      under g++ and clang++ (every template of it instantiated), and with
#      -fno-exceptions (the error-code forms);
#   2. including pheap.h before it is refused with pheap.hpp's message;
#   3. ptr<T>::operator* compiles (-O2) to one add and the load: two
#      instructions before the ret, no call, no test, no branch;
#   4. the libstdc++ containers that keep raw pointers (std::list, map, set,
#      multimap, basic_string: see docs/CPP.md) do not compile with
#      pheap::allocator, while std::vector (the control) does;
#   5. pheap/boost.hpp compiles as strictly, included after the Boost
#      container headers and before them (when Boost is installed); under
#      g++ a map's find is inlined and loads both children of a node just
#      before the key compare (docs/CPP.md, "Boost trees").
# Exits 77 (skipped) when clang++ is missing, after checking g++.
# Usage: compile.sh SOURCE_DIR [CXX]
set -u
src=$1
cxx=${2:-g++}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pheap-compile.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
flags="-std=c++17 -Wall -Wextra -Wshadow -pedantic -Werror -I$src/include"
failed=0
fail() {
    echo "FAILED: $*"
    failed=1
}

cat >"$tmp/all.cpp" <<'CPP'
#include <pheap.hpp>
#include <vector>
namespace {
struct node {
    pheap::ptr<node> next;
    int v = 0;
};
}
template <>
struct pheap::trace<node> {
    static void children(const pheap::tracer &t, const node &n) { t(n.next); }
};
int use(pheap::heap &h)
{
    pheap::ptr<node> p = h.make<node>(), q = p + 0;
    q = p;
    q++;
    q -= 1;
    int d = int(q - p) + (p == q) + (p < q) + (p != nullptr);
    pheap::ptr<const void> cv = p;
    pheap::ptr<const node> back = pheap::static_pointer_cast<const node>(cv);
    d += back->v + (*p).v;
    std::vector<node, pheap::allocator<node>> v{pheap::allocator<node>(h)};
    v.emplace_back();
    pheap::run(h, [&](pheap::transaction &tx) {
        tx.add(v);
        tx.write(p->v, 3);
        d += tx.read(p->v);
        h.destroy(p);
    });
    pheap::run(h, [&] { h.make<int>(1); });
    h.make_named<node>("n");
    d += h.find<node>("n") != nullptr;
    h.destroy_named<node>("n");
    h.set_filter<node>("list");
    d += h.root<int>("r");
    return d;
}
CPP
cat >"$tmp/noexcept.cpp" <<'CPP'
#include <pheap.hpp>
int use(const char *path)
{
    std::error_code ec;
    pheap::heap h = pheap::heap::create(path, 1 << 20, ec);
    if (ec)
        return ec.value();
    int *i = h.make<int>(ec, 5);
    h.destroy(i, ec);
    h.make_named<int>("x", ec, 1);
    h.find<int>("x", ec);
    h.destroy_named<int>("x", ec);
    h.root<long>("r", ec);
    pheap::transaction tx(h, ec);
    tx.add(*h.root<long>("r", ec), ec);
    tx.commit(ec);
    h.close(ec);
    return ec.value();
}
CPP
cat >"$tmp/order.cpp" <<'CPP'
#include <pheap.h>
#include <pheap.hpp>
CPP
cat >"$tmp/trees.cpp" <<'CPP'
#ifdef BOOST_FIRST
#include <boost/container/map.hpp>
#include <boost/container/set.hpp>
#endif
#include <pheap/boost.hpp>
#include <boost/container/map.hpp>
#include <boost/container/set.hpp>
namespace bc = boost::container;
template <class T>
using A = pheap::allocator<T>;
using kv = std::pair<const long, long>;
long use(pheap::heap &h)
{
    auto &m = *h.make<bc::map<long, long, std::less<long>, A<kv>>>(A<kv>(h));
    auto &mm = *h.make<bc::multimap<long, long, std::less<long>, A<kv>>>(A<kv>(h));
    auto &s = *h.make<bc::set<long, std::less<long>, A<long>>>(A<long>(h));
    auto &ms = *h.make<bc::multiset<long, std::less<long>, A<long>>>(A<long>(h));
    m[1] = 2;
    mm.emplace(1, 2);
    s.insert(3);
    ms.insert(3);
    long n = long(m.count(1) + mm.count(1) + s.count(3) + ms.count(3)) + m.find(1)->second;
    m.erase(1);
    s.erase(s.begin());
    n += long(m.size() + mm.size() + s.size() + ms.size());
    h.destroy(&m);
    h.destroy(&mm);
    h.destroy(&s);
    h.destroy(&ms);
    return n;
}
CPP
printf '#include <boost/container/map.hpp>\n' >"$tmp/boost.cpp"
cat >"$tmp/find.cpp" <<'CPP'
#include <pheap/boost.hpp>
#include <boost/container/map.hpp>
using kv = std::pair<const long, long>;
using map = boost::container::map<long, long, std::less<long>, pheap::allocator<kv>>;
long find(const map &m, long k)
{
    auto it = m.find(k);
    return it == m.end() ? 0 : it->second;
}
CPP

# The build's compiler first (it also checks the containers: the library
# is libstdc++ for both), then g++ and clang++ unless one of them is it.
real() { readlink -f "$(command -v "$1")" 2>/dev/null; }
compilers=$cxx
for c in g++ clang++; do
    [ "$(real "$c")" = "$(real "$cxx")" ] || compilers="$compilers $c"
done
missing=""
first=1
for c in $compilers; do
    if ! command -v "$c" >/dev/null 2>&1; then
        missing="$missing $c"
        continue
    fi
    # shellcheck disable=SC2086
    $c $flags -c "$tmp/all.cpp" -o "$tmp/all.o" 2>"$tmp/err" || { cat "$tmp/err"; fail "$c: pheap.hpp with strict warnings"; }
    # shellcheck disable=SC2086
    $c $flags -fno-exceptions -c "$tmp/noexcept.cpp" -o "$tmp/n.o" 2>"$tmp/err" || { cat "$tmp/err"; fail "$c: -fno-exceptions"; }
    # shellcheck disable=SC2086
    if $c $flags -fsyntax-only "$tmp/boost.cpp" 2>/dev/null; then
        for first_def in "" -DBOOST_FIRST; do
            # shellcheck disable=SC2086
            $c $flags -O2 $first_def -c "$tmp/trees.cpp" -o "$tmp/trees.o" 2>"$tmp/err" ||
                { cat "$tmp/err"; fail "$c: pheap/boost.hpp with strict warnings ${first_def:-(Boost after it)}"; }
        done
        if command -v objdump >/dev/null 2>&1 && ! $c -dM -E -x c++ /dev/null | grep -q __clang__; then
            # shellcheck disable=SC2086
            $c $flags -O2 -c "$tmp/find.cpp" -o "$tmp/find.o" 2>"$tmp/err" || { cat "$tmp/err"; fail "$c: find.cpp"; }
            objdump -d --no-show-raw-insn -C "$tmp/find.o" |
                awk '/<find\(/ { on = 1; next } on && /^$/ { exit } on' |
                sed 's/^ *[0-9a-f]*:[[:space:]]*//' >"$tmp/find.s"
            # the two instructions before the compare with the key (offset 0x20)
            before=$(awk '/^cmp.*0x20\(%/ { print p2 " / " p1; exit } { p2 = p1; p1 = $0 }' "$tmp/find.s")
            if grep -q '^call' "$tmp/find.s" || ! echo "$before" | grep -q 'mov  *0x8(%' ||
                ! echo "$before" | grep -q 'mov  *0x10(%'; then
                cat "$tmp/find.s"
                fail "$c: a map's find through pheap/boost.hpp does not load both children before the compare: $before"
            else
                echo "$c: pheap/boost.hpp: before the key compare: $before"
            fi
        fi
    else
        echo "$c: pheap/boost.hpp not checked: the Boost headers are not installed"
    fi
    # shellcheck disable=SC2086
    if $c $flags -fsyntax-only "$tmp/order.cpp" 2>"$tmp/err"; then
        fail "$c: pheap.h before pheap.hpp was accepted"
    elif ! grep -q "include pheap.hpp before pheap.h" "$tmp/err"; then
        cat "$tmp/err"; fail "$c: pheap.h before pheap.hpp refused without pheap.hpp's message"
    fi
    # shellcheck disable=SC2086
    if command -v objdump >/dev/null 2>&1; then
        printf '#include <pheap.hpp>\nlong deref(const pheap::ptr<long> &p) { return *p; }\n' >"$tmp/deref.cpp"
        $c $flags -O2 -c "$tmp/deref.cpp" -o "$tmp/deref.o" 2>"$tmp/err" || { cat "$tmp/err"; fail "$c: deref.cpp"; }
        objdump -d --no-show-raw-insn "$tmp/deref.o" |
            awk '/<_Z5derefRKN5pheap3ptrIlEE>:/ { on = 1; next } on && /^$/ { exit } on' |
            sed 's/^ *[0-9a-f]*:[[:space:]]*//' | awk '{ print $1 }' | sed '/^ret/q' >"$tmp/insns"
        n=$(grep -vc '^ret' "$tmp/insns")
        if [ "$n" != 2 ] || ! grep -q '^ret' "$tmp/insns" || grep -Eq '^(call|test|cmp|j)' "$tmp/insns"; then
            objdump -d --no-show-raw-insn "$tmp/deref.o"
            fail "$c: ptr<T>::operator* is not one add and a load: $(tr '\n' ' ' <"$tmp/insns")"
        else
            echo "$c: operator* is $(tr '\n' ' ' <"$tmp/insns")"
        fi
    fi
    [ $first = 1 ] || { echo "$c: checked"; continue; }
    first=0
    for container in "std::vector<int, A<int>>:yes" "std::list<int, A<int>>:no" \
        "std::map<int, int, std::less<int>, A<std::pair<const int, int>>>:no" \
        "std::multimap<int, int, std::less<int>, A<std::pair<const int, int>>>:no" \
        "std::set<int, std::less<int>, A<int>>:no" \
        "std::basic_string<char, std::char_traits<char>, A<char>>:no"; do
        type=${container%:*}
        want=${container##*:}
        cat >"$tmp/c.cpp" <<CPP
#include <pheap.hpp>
#include <list>
#include <map>
#include <set>
#include <string>
#include <vector>
template <class T>
using A = pheap::allocator<T>;
using C = $type;
void use(pheap::heap &h)
{
    C *c = h.make<C>(A<int>(h));
    c->insert(c->end(), typename C::value_type());
    h.destroy(c);
}
CPP
        # shellcheck disable=SC2086
        if $c $flags -fsyntax-only "$tmp/c.cpp" 2>"$tmp/err"; then got=yes; else got=no; fi
        if [ "$got" != "$want" ]; then
            [ "$want" = yes ] && cat "$tmp/err"
            fail "$c: $type compiles: $got, expected $want (docs/CPP.md)"
        fi
    done
    echo "$c: checked"
done
[ $failed = 0 ] || exit 1
if [ -n "$missing" ]; then
    echo "skipped:$missing not installed (make test installs clang when it can)"
    exit 77
fi
echo "passed"
