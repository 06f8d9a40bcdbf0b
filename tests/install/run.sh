#!/bin/sh
# run.sh -- installs a built pheap into a temporary prefix and builds
# consumer.c against the installed copy with nothing but pkg-config: once
# with the shared library, once with the static one.  Any problem prints
# "install test FAILED: ..." and exits non-zero.
#
# Usage: run.sh SOURCE_DIR BUILD_DIR
set -u

src=${1:-}
build=${2:-}
if [ -z "$src" ] || [ -z "$build" ]; then
    echo "usage: run.sh SOURCE_DIR BUILD_DIR" >&2
    exit 2
fi

fail() {
    echo "install test FAILED: $*" >&2
    exit 1
}

# Prints a log file under a heading, for the failure that follows.
show() {
    echo "---- $1" >&2
    cat "$2" >&2
    echo "----" >&2
}

[ -f "$build/CMakeCache.txt" ] || fail "$build is not a CMake build directory"
consumer_c=$src/tests/install/consumer.c
[ -f "$consumer_c" ] || fail "missing $consumer_c"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pheap-install.XXXXXX") || fail "cannot create a temporary directory"
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM
prefix=$tmp/prefix

# ---- install ---------------------------------------------------------------
if ! cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1; then
    show "cmake --install output" "$tmp/install.log"
    fail "cmake --install $build --prefix $prefix"
fi

pc=$(find "$prefix" -type f -name pheap.pc -path '*/pkgconfig/*' | head -n 1)
[ -n "$pc" ] || fail "no pkgconfig/pheap.pc under the install prefix"
pcdir=$(dirname "$pc")

# Only the installed copy is visible: PKG_CONFIG_LIBDIR replaces pkg-config's
# default search path, so a pheap.pc elsewhere on the system cannot answer.
PKG_CONFIG_PATH=$pcdir
PKG_CONFIG_LIBDIR=$pcdir
export PKG_CONFIG_PATH PKG_CONFIG_LIBDIR
unset PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_ALLOW_SYSTEM_CFLAGS PKG_CONFIG_ALLOW_SYSTEM_LIBS

command -v pkg-config >/dev/null 2>&1 || fail "pkg-config is not installed"
cflags=$(pkg-config --cflags pheap) || fail "pkg-config --cflags pheap (with $pc)"
libs=$(pkg-config --libs pheap) || fail "pkg-config --libs pheap"
static_libs=$(pkg-config --static --libs pheap) || fail "pkg-config --static --libs pheap"
modversion=$(pkg-config --modversion pheap) || fail "pkg-config --modversion pheap"
libdir=$(pkg-config --variable=libdir pheap)
includedir=$(pkg-config --variable=includedir pheap)

# The directories pheap.pc names must be the installed ones.
real_prefix=$(cd "$prefix" && pwd -P)
inside() {
    [ -d "$1" ] || return 1
    case $(cd "$1" && pwd -P) in
    "$real_prefix" | "$real_prefix"/*) return 0 ;;
    esac
    return 1
}
inside "$includedir" || fail "pheap.pc includedir '$includedir' is not a directory under the prefix"
inside "$libdir" || fail "pheap.pc libdir '$libdir' is not a directory under the prefix (pheap.pc at ${pc#"$prefix"/})"
[ -f "$includedir/pheap.h" ] || fail "pheap.h is not in the includedir $includedir"
[ -e "$libdir/libpheap.so" ] || fail "libpheap.so is not in the libdir $libdir"
[ -f "$libdir/libpheap.a" ] || fail "libpheap.a is not in the libdir $libdir"
[ -x "$prefix/bin/pheap" ] || fail "the pheap tool is not installed in bin/"
[ -f "$prefix/share/man/man1/pheap.1" ] || fail "the pheap(1) man page is not installed in share/man/man1/"
[ -f "$prefix/share/man/man3/pheap.3" ] || fail "the pheap(3) man page is not installed in share/man/man3/"
# pheap(3) names every function and error code of the installed header
for name in $(grep -o 'pheap_[a-z_]*(' "$prefix/include/pheap.h" | tr -d '(' | sort -u) \
            $(grep -o 'PHEAP_E[A-Z]*' "$prefix/include/pheap.h" | sort -u); do
    grep -q "$name" "$prefix/share/man/man3/pheap.3" || fail "pheap(3) does not mention $name"
done
if command -v groff >/dev/null 2>&1; then
    warn=$(groff -man -Tutf8 -ww -z "$prefix/share/man/man3/pheap.3" 2>&1)
    [ -z "$warn" ] || fail "pheap(3) does not format cleanly: $warn"
fi

# ---- compiler: the build's, with its sanitizers ----------------------------
cache_value() {
    sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt" | head -n 1
}
cc=${CC:-$(cache_value CMAKE_C_COMPILER)}
[ -n "$cc" ] || cc=cc
san=
case $(cache_value PHEAP_SANITIZE) in
address) san="-fsanitize=address,undefined" ;;
thread) san="-fsanitize=thread" ;;
esac

# Checks the program's output: the "ok" line and the pkg-config version.
check_output() {
    grep -qx "ok" "$1" || return 1
    grep -qx "version $modversion" "$1"
}

needed() {
    if command -v readelf >/dev/null 2>&1; then
        readelf -d "$1" | grep NEEDED
    else
        objdump -p "$1" | grep NEEDED
    fi
}

# ---- shared ---------------------------------------------------------------
# shellcheck disable=SC2086 # the pkg-config flags are word lists
if ! $cc -std=c11 -Wall -Wextra -Werror $san -o "$tmp/consumer_shared" "$consumer_c" \
    $cflags $libs >"$tmp/cc_shared.log" 2>&1; then
    show "compiler output" "$tmp/cc_shared.log"
    fail "cannot build consumer.c with: $cc $cflags $libs"
fi
needed "$tmp/consumer_shared" >"$tmp/needed_shared" 2>&1
grep -q 'libpheap\.so' "$tmp/needed_shared" || {
    show "NEEDED" "$tmp/needed_shared"
    fail "the shared consumer does not link libpheap.so"
}
LD_TRACE_LOADED_OBJECTS=1 LD_LIBRARY_PATH=$libdir "$tmp/consumer_shared" >"$tmp/ldd_shared" 2>&1
loaded=$(sed -n 's/^[[:space:]]*libpheap\.so[^ ]* => \([^ ]*\).*/\1/p' "$tmp/ldd_shared")
[ -n "$loaded" ] && inside "$(dirname "$loaded")" || {
    show "loaded objects" "$tmp/ldd_shared"
    fail "the shared consumer does not load the installed libpheap.so"
}
if ! LD_LIBRARY_PATH=$libdir "$tmp/consumer_shared" "$tmp/shared.heap" >"$tmp/out_shared" 2>&1 ||
    ! check_output "$tmp/out_shared"; then
    show "consumer output" "$tmp/out_shared"
    fail "the shared consumer did not print 'ok' and 'version $modversion'"
fi

# ---- static ---------------------------------------------------------------
# -Bstatic makes -lpheap pick libpheap.a; the C library stays shared.
# shellcheck disable=SC2086
if ! $cc -std=c11 -Wall -Wextra -Werror $san -o "$tmp/consumer_static" "$consumer_c" \
    $cflags -Wl,-Bstatic $static_libs -Wl,-Bdynamic >"$tmp/cc_static.log" 2>&1; then
    show "compiler output" "$tmp/cc_static.log"
    fail "cannot build consumer.c with: $cc $cflags -Wl,-Bstatic $static_libs -Wl,-Bdynamic"
fi
needed "$tmp/consumer_static" >"$tmp/needed_static" 2>&1
if grep -q 'libpheap' "$tmp/needed_static"; then
    show "NEEDED" "$tmp/needed_static"
    fail "the static consumer still needs a shared libpheap"
fi
if ! (unset LD_LIBRARY_PATH && exec "$tmp/consumer_static" "$tmp/static.heap") >"$tmp/out_static" 2>&1 ||
    ! check_output "$tmp/out_static"; then
    show "consumer output" "$tmp/out_static"
    fail "the static consumer did not print 'ok' and 'version $modversion'"
fi

# ---- C++: pheap.hpp through pkg-config, with the strict warnings ----------
consumer_cpp=$src/tests/install/consumer.cpp
[ -f "$prefix/include/pheap.hpp" ] || fail "pheap.hpp is not in the includedir"
[ -f "$prefix/include/pheap/boost.hpp" ] || fail "pheap/boost.hpp is not in the includedir"
cxx=${CXX:-$(cache_value CMAKE_CXX_COMPILER)}
if [ -z "$cxx" ] || ! command -v "$cxx" >/dev/null 2>&1; then
    echo "install test: no C++ compiler: the C++ consumer is not built"
else
    # shellcheck disable=SC2086
    if ! "$cxx" -std=c++17 -Wall -Wextra -Wshadow -pedantic -Werror $san -o "$tmp/consumer_cpp" \
        "$consumer_cpp" $cflags $libs >"$tmp/cxx.log" 2>&1; then
        show "compiler output" "$tmp/cxx.log"
        fail "cannot build consumer.cpp with: $cxx -std=c++17 $cflags $libs"
    fi
    if ! LD_LIBRARY_PATH=$libdir "$tmp/consumer_cpp" "$tmp/cpp.heap" >"$tmp/out_cpp" 2>&1 ||
        ! check_output "$tmp/out_cpp"; then
        show "consumer output" "$tmp/out_cpp"
        fail "the C++ consumer did not print 'ok' and 'version $modversion'"
    fi

    # ---- the CMake package: find_package(pheap), C and C++ consumers -------
    mkdir -p "$tmp/pkg"
    cat >"$tmp/pkg/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.16)
project(pheap_consumer C CXX)
find_package(pheap $modversion REQUIRED CONFIG)
add_executable(consumer_c $consumer_c)
target_link_libraries(consumer_c PRIVATE pheap::pheap)
add_executable(consumer_cpp $consumer_cpp)
target_compile_features(consumer_cpp PRIVATE cxx_std_17)
target_compile_options(consumer_cpp PRIVATE -Wall -Wextra -Wshadow -pedantic -Werror $san)
target_link_options(consumer_cpp PRIVATE $san)
target_link_libraries(consumer_cpp PRIVATE pheap::pheap_static)
CMAKE
    if ! cmake -S "$tmp/pkg" -B "$tmp/pkg/build" -DCMAKE_PREFIX_PATH="$prefix" \
        -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_FLAGS="$san" \
        -DCMAKE_EXE_LINKER_FLAGS="$san" >"$tmp/pkg.log" 2>&1 ||
        ! cmake --build "$tmp/pkg/build" >>"$tmp/pkg.log" 2>&1; then
        show "CMake output" "$tmp/pkg.log"
        fail "a project using find_package(pheap) does not build"
    fi
    if ! LD_LIBRARY_PATH=$libdir "$tmp/pkg/build/consumer_c" "$tmp/pkg_c.heap" >"$tmp/out_pkg" 2>&1 ||
        ! check_output "$tmp/out_pkg" ||
        ! "$tmp/pkg/build/consumer_cpp" "$tmp/pkg_cpp.heap" >"$tmp/out_pkg" 2>&1 ||
        ! check_output "$tmp/out_pkg"; then
        show "consumer output" "$tmp/out_pkg"
        fail "the consumers built with the CMake package did not print 'ok'"
    fi
fi

# ---- the installed tool reads what the consumers wrote --------------------
if ! "$prefix/bin/pheap" info "$tmp/static.heap" >"$tmp/info" 2>&1 ||
    ! grep -q consumer "$tmp/info" || ! grep -q clean "$tmp/info"; then
    show "pheap info output" "$tmp/info"
    fail "the installed pheap tool cannot read the consumer's heap"
fi

echo "install test passed: $(pkg-config --modversion pheap) from ${pc#"$prefix"/}, shared and static, C and C++, pkg-config and the CMake package"
exit 0
