#!/bin/sh
# run.sh -- the benchmark run: installs the peer allocators and gnuplot when
# missing, builds pheap_bench, pheap_kvbench, pheap_namebench and pheap_sharebench in
# BUILD_DIR-bench, runs every workload for every available allocator (one
# process each), and writes
#   bench/results/<run>.json      every result of the run
#   bench/results/<run>-names.json  the named-objects benchmark (JSON lines)
#   bench/results/<run>-cpp.json    the C++ layer's benchmark (JSON lines)
#   bench/results/<run>/report.md tables, and the PNG charts beside it
#   bench/results/SUMMARY.md      the tables of the latest full run
#   bench/results/charts/*.png    its charts (the README shows them)
#
# usage: sh bench/run.sh BUILD_DIR [--quick] [--alloc LIST] [pheap_bench options]
#   --quick        smaller parameters and a 512 MiB heap, under two minutes
#   --alloc LIST   allocators to run (default pheap,pheap-gc,pheap-noprot,pheap-keys,pmemobj,mimalloc,
#                  jemalloc,glibc; pheap-noprot is pheap with PHEAP_PROTECT=off: what
#                  protection costs; pheap-keys is pheap with PHEAP_PROTECT=keys,
#                  skipped where the machine has no protection keys)
#   --fs-dir DIR   where the back-end table runs (default BUILD_DIR-bench/heaps,
#                  on the file system of the build tree; --fs-dir none skips it)
#   other options go to pheap_bench (--heap-dir, --heap-size, --threads, --reps, ...)
#
# After the main run, pheap_kvbench runs the transactional key-value workload
# (pheap redo, undo, redo without flushes; libpmemobj) and times the recovery
# of interrupted transactions; pheap_namebench creates, looks up and removes
# 10^6 named objects with pheap (flush none and cache-line flushes) and with
# Boost.Interprocess managed_mapped_file (skipped when libboost-dev cannot be
# had); then the back-end table runs pheap with each
# flush back end (msync, none, cache-line flushes) and libpmemobj with and
# without PMEM_IS_PMEM_FORCE on an ordinary file system, with fewer calls, and
# pheap_durabench the durability levels (sync, checkpoint) there.
set -eu

usage() { echo "usage: sh bench/run.sh BUILD_DIR [--quick] [--alloc LIST] [pheap_bench options]" >&2; exit 2; }

[ $# -ge 1 ] || usage
BUILD=${1%/}; shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
QUICK=""
ALLOCS="pheap,pheap-gc,pheap-noprot,pheap-nomorph,pheap-keys,pheap-defrag,pmemobj,pmemobj-defrag,mimalloc,jemalloc,glibc"
FS_DIR=""
PASS=""
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=--quick ;;
    --alloc|-a) [ $# -ge 2 ] || usage; ALLOCS=$2; shift ;;
    --alloc=*) ALLOCS=${1#--alloc=} ;;
    --fs-dir) [ $# -ge 2 ] || usage; FS_DIR=$2; shift ;;
    --fs-dir=*) FS_DIR=${1#--fs-dir=} ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) PASS="$PASS $1" ;;    # options without spaces, passed through as words
    esac
    shift
done
START=$(date +%s)
# Quick runs use a smaller heap: creating libpmemobj's pool (it allocates the
# whole file) is most of their time.
if [ -n "$QUICK" ]; then
    case " $PASS " in
    *" --heap-size"*|*" -s "*) ;;
    *) PASS="$PASS --heap-size 512M" ;;
    esac
fi

# ---- packages: only the missing ones, only when we may install ----------
missing=""
for pkg in libpmemobj-dev libmimalloc-dev libjemalloc-dev libboost-dev; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
done
command -v gnuplot >/dev/null 2>&1 || missing="$missing gnuplot-nox"
command -v python3 >/dev/null 2>&1 || missing="$missing python3"
if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "run.sh: installing$missing"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
    else
        echo "run.sh: missing$missing (not root: those peers or the charts are skipped)"
    fi
fi

# ---- build: a separate tree, optimised, with the pheap adapter if we can --
BDIR="$BUILD-bench"
GEN=""
command -v ninja >/dev/null 2>&1 && GEN="-G Ninja"
cmake -S "$ROOT" -B "$BDIR" $GEN -DCMAKE_BUILD_TYPE=Release -DPHEAP_BUILD_BENCH=ON \
    -DPHEAP_BUILD_TESTS=OFF >/dev/null
cmake --build "$BDIR" --target pheap_bench pheap_kvbench pheap_durabench pheap_sharebench \
    -j "$(nproc)" >"$BDIR/bench-build.log" 2>&1 || {
    cat "$BDIR/bench-build.log" >&2
    echo "run.sh: pheap_bench, pheap_kvbench, pheap_durabench or pheap_sharebench does not build" >&2
    exit 1
}
BIN="$BDIR/bench/pheap_bench"
KV_BIN="$BDIR/bench/pheap_kvbench"
# pheap_namebench needs a C++ compiler and the Boost.Interprocess headers;
# CMake leaves the target out without them, and the names benchmark is skipped.
NAMES_BIN=""
NAMES_SKIP=""
if grep -Eq '^(PHEAP_BOOST_INTERPROCESS_DIR|CMAKE_CXX_COMPILER):[A-Z]*=(.*-)?NOTFOUND$' "$BDIR/CMakeCache.txt" \
    || ! grep -q '^PHEAP_BOOST_INTERPROCESS_DIR:' "$BDIR/CMakeCache.txt"; then
    NAMES_SKIP="no C++ compiler or no Boost.Interprocess headers (libboost-dev)"
elif cmake --build "$BDIR" --target pheap_namebench -j "$(nproc)" >>"$BDIR/bench-build.log" 2>&1; then
    NAMES_BIN="$BDIR/bench/pheap_namebench"
else
    cat "$BDIR/bench-build.log" >&2
    echo "run.sh: pheap_namebench does not build" >&2
    exit 1
fi
HEAP_DIR=$(echo "$PASS" | sed -n 's/.*--heap-dir[= ]\([^ ]*\).*/\1/p')
HEAP_DIR=${HEAP_DIR:-/dev/shm}

# ---- same conditions for every allocator --------------------------------
export PMEM_IS_PMEM_FORCE=1           # libpmemobj flushes cache lines on tmpfs
if grep -qw clwb /proc/cpuinfo; then CPU_FLUSH=clwb
elif grep -qw clflushopt /proc/cpuinfo; then CPU_FLUSH=clflushopt
else CPU_FLUSH=clflush; fi
export PHEAP_FLUSH="${PHEAP_FLUSH:-$CPU_FLUSH}"

RUN=$(date -u +%Y%m%dT%H%M%SZ)${QUICK:+-quick}
RES="$ROOT/bench/results"
mkdir -p "$RES"
LINES="$RES/$RUN.jsonl"
: >"$LINES"
failed=0
for alloc in $(echo "$ALLOCS" | tr ',' ' '); do
    rc=0
    t0=$(date +%s)
    # shellcheck disable=SC2086  # PASS holds separate words on purpose
    "$BIN" --alloc "$alloc" $QUICK --json "$LINES" $PASS || rc=$?
    case $rc in
    0|77) ;;                          # 77: allocator not available, skipped
    *) echo "run.sh: pheap_bench --alloc $alloc exited $rc"; failed=1 ;;
    esac
    echo "run.sh: $alloc took $(( $(date +%s) - t0 )) s"
done

# ---- fragbench's bound: an ideal best-fit allocator that never moves -----
# pheap_fragbound runs fragbench's phases with the same parameters and
# prints the least footprint a non-moving allocator can end with.
BOUND_TXT="$RES/$RUN-fragbound.txt"
: >"$BOUND_TXT"
if cmake --build "$BDIR" --target pheap_fragbound -j "$(nproc)" >>"$BDIR/bench-build.log" 2>&1; then
    live=64M; [ -n "$QUICK" ] && live=16M
    "$BDIR/bench/pheap_fragbound" --live "$live" | tee "$BOUND_TXT" || {
        echo "run.sh: pheap_fragbound exited $?"; failed=1; }
else
    echo "run.sh: the fragbench bound is skipped: no C++ compiler"
fi

# ---- transactions: the key-value workload and recovery ------------------
# pheap_kvbench, in the same heap location, with the same flush settings.
KV_LINES="$RES/$RUN-kv.jsonl"
: >"$KV_LINES"
case ",$ALLOCS," in *,pheap,*)
    variants=pheap-redo,pheap-undo,pheap-redo-none
    case ",$ALLOCS," in *,pheap-noprot,*) variants="$variants,pheap-redo-noprot" ;; esac
    case ",$ALLOCS," in *,pmemobj,*) variants="$variants,pmemobj" ;; esac
    t0=$(date +%s)
    # shellcheck disable=SC2086  # QUICK is empty or one word
    "$KV_BIN" $QUICK --variant "$variants" --heap-dir "$HEAP_DIR" --json "$KV_LINES" || {
        echo "run.sh: pheap_kvbench exited $?"; failed=1; }
    "$KV_BIN" --recovery --heap-dir "$HEAP_DIR" --json "$KV_LINES" || {
        echo "run.sh: pheap_kvbench --recovery exited $?"; failed=1; }
    echo "run.sh: transactions took $(( $(date +%s) - t0 )) s" ;;
esac

# ---- named objects: pheap against Boost.Interprocess ----------------------
# pheap_namebench runs pheap with flush none and with the CPU's cache-line
# flush (chosen per heap through pheap_options, whatever PHEAP_FLUSH says)
# and Boost's managed_mapped_file, in the same heap location.
NAMES_MD="$RES/$RUN-names.md"
NAMES_JSON="$RES/$RUN-names.json"
: >"$NAMES_MD"
case ",$ALLOCS," in *,pheap,*)
    if [ -n "$NAMES_BIN" ]; then
        t0=$(date +%s)
        # shellcheck disable=SC2086  # QUICK is empty or one word
        "$NAMES_BIN" $QUICK --name-kind short,long --heap-dir "$HEAP_DIR" --json "$NAMES_JSON" \
            --markdown "$NAMES_MD" || { echo "run.sh: pheap_namebench exited $?"; failed=1; }
        echo "run.sh: named objects took $(( $(date +%s) - t0 )) s"
    else
        echo "run.sh: the named-objects benchmark is skipped: $NAMES_SKIP"
    fi ;;
esac

# ---- sharing: processes on one heap against threads of one process -------
# pheap_sharebench, in the same heap location: threadtest with 4 threads of
# one exclusive open, then 4 processes opening the heap with PHEAP_SHARED;
# one process alone opened shared against exclusive; a takeover's time.
SHARE_MD="$RES/$RUN-share.md"
: >"$SHARE_MD"
case ",$ALLOCS," in *,pheap,*)
    rounds=2000
    [ -n "$QUICK" ] && rounds=300
    { echo '```'; "$BDIR/bench/pheap_sharebench" --heap-dir "$HEAP_DIR" --rounds "$rounds"; echo '```'; } \
        >"$SHARE_MD" || { echo "run.sh: pheap_sharebench exited $?"; failed=1; } ;;
esac

# ---- the C++ layer: ptr against raw pointers, vector in transactions -------
# pheap_cppbench needs a C++ compiler and Boost.Container; CMake leaves it
# out without them.
CPP_JSON="$RES/$RUN-cpp.json"
: >"$CPP_JSON"
case ",$ALLOCS," in *,pheap,*)
    if cmake --build "$BDIR" --target pheap_cppbench -j "$(nproc)" >>"$BDIR/bench-build.log" 2>&1; then
        t0=$(date +%s)
        # in the heap location of the other tables, then on the build tree's file system
        for dir in "$HEAP_DIR" "$BDIR/heaps"; do
            mkdir -p "$dir"
            # shellcheck disable=SC2086  # QUICK is empty or one word
            "$BDIR/bench/pheap_cppbench" $QUICK --heap-dir "$dir" --json "$CPP_JSON" || {
                echo "run.sh: pheap_cppbench exited $?"; failed=1; }
        done
        echo "run.sh: the C++ layer took $(( $(date +%s) - t0 )) s"
    else
        echo "run.sh: the C++ benchmark is skipped: no C++ compiler or no Boost.Container headers"
    fi ;;
esac

# ---- back ends on an ordinary file system ---------------------------------
# Each line of the table is one pheap_bench process with its own flush
# setting; the JSON lines get a "backend" field for the report.
FS_LINES="$RES/$RUN-fs.jsonl"
: >"$FS_LINES"
FS_DIR=${FS_DIR:-$BDIR/heaps}
if [ "$FS_DIR" != none ]; then
    mkdir -p "$FS_DIR"
    FS_OPS=20000; [ -n "$QUICK" ] && FS_OPS=4000
    fs_run() {  # fs_run LABEL ALLOC ENV...: one configuration
        label=$1 alloc=$2; shift 2
        tmp="$FS_LINES.one"
        : >"$tmp"
        # fixed-64 allocates --batch blocks then frees them; threadtest does --ops calls
        for wl in "fixed-64 --threads 1 --ops $FS_OPS --batch $((FS_OPS / 2))" "threadtest --threads 1,2 --ops $FS_OPS"; do
            # shellcheck disable=SC2086  # wl holds separate words on purpose
            env "$@" "$BIN" --alloc "$alloc" --workload $wl --reps 3 --heap-dir "$FS_DIR" \
                --heap-size 64M --json "$tmp" >/dev/null || {
                echo "run.sh: back end $label failed"; failed=1; }
        done
        sed "s/^{/{\"backend\":\"$label\",/" "$tmp" >>"$FS_LINES"
        rm -f "$tmp"
    }
    t0=$(date +%s)
    case ",$ALLOCS," in *,pheap,*)
        fs_run "pheap msync" pheap PHEAP_FLUSH=msync
        fs_run "pheap none" pheap PHEAP_FLUSH=none
        fs_run "pheap $CPU_FLUSH" pheap PHEAP_FLUSH=$CPU_FLUSH ;;
    esac
    case ",$ALLOCS," in *,pmemobj,*)
        fs_run "pmemobj msync" pmemobj PMEM_IS_PMEM_FORCE=0
        fs_run "pmemobj forced" pmemobj PMEM_IS_PMEM_FORCE=1 ;;
    esac
    echo "run.sh: back ends on $FS_DIR took $(( $(date +%s) - t0 )) s"
    # The durability levels (sync, checkpoint) on the same file system.
    DURA_MD="$RES/$RUN-durability.md"
    DURA_SECS=3; [ -n "$QUICK" ] && DURA_SECS=1
    case ",$ALLOCS," in *,pheap,*)
        "$BDIR/bench/pheap_durabench" "$FS_DIR" --seconds $DURA_SECS --threads 1,2,4,8 >"$DURA_MD" || {
            echo "run.sh: pheap_durabench failed"; failed=1; } ;;
    esac
fi

# ---- report ---------------------------------------------------------------
ver() { dpkg-query -W -f '${Version}' "$1" 2>/dev/null || echo none; }
MODE=full
SUMMARY="--summary $RES/SUMMARY.md"
[ -n "$QUICK" ] && MODE=quick && SUMMARY=""
OPTIONS=$(echo "$PASS" | sed 's/^ *//')
# shellcheck disable=SC2086
python3 "$ROOT/bench/report.py" --lines "$LINES" --json "$RES/$RUN.json" --out "$RES/$RUN" $SUMMARY \
    --backends "$FS_LINES" --kv "$KV_LINES" --cpp "$CPP_JSON" --meta "fs_dir=$FS_DIR ($(stat -f -c %T "$FS_DIR" 2>/dev/null || echo none))" \
    --meta "run=$RUN" --meta "mode=$MODE" \
    --meta "commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo none)" \
    --meta "cpu=$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1)" \
    --meta "cores=$(nproc)" --meta "kernel=$(uname -r)" \
    --meta "heap_dir=$HEAP_DIR ($(stat -f -c %T "$HEAP_DIR" 2>/dev/null || echo unknown))" \
    --meta "options=${OPTIONS:-(defaults)}" \
    --meta "PMEM_IS_PMEM_FORCE=$PMEM_IS_PMEM_FORCE" --meta "PHEAP_FLUSH=$PHEAP_FLUSH" \
    --meta "libpmemobj=$(ver libpmemobj1)" --meta "mimalloc=$(ver libmimalloc2.0)" \
    --meta "jemalloc=$(ver libjemalloc2)" --meta "glibc=$(ver libc6)"
rm -f "$LINES" "$FS_LINES" "$KV_LINES"
# The named-objects tables go at the end of the report (and of the summary).
if [ -s "$NAMES_MD" ]; then
    { echo; echo "## Named objects (pheap_namebench)"; cat "$NAMES_MD"; } >>"$RES/$RUN/report.md"
    [ "$MODE" = full ] && { echo; echo "## Named objects (pheap_namebench)"; cat "$NAMES_MD"; } >>"$RES/SUMMARY.md"
fi
rm -f "$NAMES_MD"
if [ -s "$SHARE_MD" ]; then
    { echo; echo "## Processes sharing a heap (pheap_sharebench)"; cat "$SHARE_MD"; } >>"$RES/$RUN/report.md"
    [ "$MODE" = full ] && { echo; echo "## Processes sharing a heap (pheap_sharebench)"; cat "$SHARE_MD"; } >>"$RES/SUMMARY.md"
fi
rm -f "$SHARE_MD"
if [ -s "${DURA_MD:-}" ]; then
    { echo; echo "## Durability levels on $FS_DIR (pheap_durabench)"; cat "$DURA_MD"; } >>"$RES/$RUN/report.md"
    [ "$MODE" = full ] && { echo; echo "## Durability levels (pheap_durabench)"; cat "$DURA_MD"; } >>"$RES/SUMMARY.md"
fi
rm -f "${DURA_MD:-/nonexistent}"
# A full run's charts are what the README shows: keep the latest beside SUMMARY.md.
if [ "$MODE" = full ]; then
    mkdir -p "$RES/charts" && rm -f "$RES/charts/"*.png && cp "$RES/$RUN/"*.png "$RES/charts/" 2>/dev/null
fi
echo "run.sh: results in $RES/$RUN.json and $RES/$RUN/ ($(( $(date +%s) - START )) s)"
exit $failed
