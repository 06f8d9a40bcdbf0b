#!/bin/sh
# examples.sh -- runs one C++ example the way its comment says it behaves
# and checks what it prints.  Usage: examples.sh NAME PROGRAM
set -u
name=$1
prog=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/pheap-example.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
heap=$dir/example.heap

fail() {
    echo "example $name FAILED: $*" >&2
    exit 1
}

case $name in
cpp_list)
    "$prog" "$heap" >/dev/null && "$prog" "$heap" >/dev/null || fail "a run failed"
    out=$("$prog" "$heap") || fail "the third run failed"
    [ "$out" = "list: 0 1 4" ] || fail "third run printed '$out', expected 'list: 0 1 4'"
    ;;
cpp_wordcount)
    out=$(printf 'the cat saw the dog\nthe dog ran\n' | "$prog" "$heap" 2>>"$dir/err") || fail "first run"
    [ "$(echo "$out" | tail -n 1)" = "committed 2" ] || fail "first run printed '$out'"
    echo "a cat" | "$prog" "$heap" 2>>"$dir/err" >/dev/null || fail "second run"
    dump=$("$prog" "$heap" --dump 2>>"$dir/err" | tr '\n' ' ') || fail "--dump"
    [ "$dump" = "lines 3 words 10 a 1 cat 2 dog 2 ran 1 saw 1 the 3 " ] || fail "--dump printed '$dump'"
    "$prog" "$heap" --check 2>>"$dir/err" | grep -q 'sum of counts 10, heap check ok' || fail "--check"
    # "heap mapped at X (last run: Y)": every run at another address than the last
    [ "$(grep -c 'heap mapped at' "$dir/err")" = 4 ] || fail "runs did not report their address"
    sed -n 's/.*mapped at \([^ ]*\) (last run: \([^)]*\)).*/\1 \2/p' "$dir/err" |
        while read -r now last; do [ "$now" != "$last" ] || exit 1; done ||
        fail "a run mapped the heap where the last one had it: $(cat "$dir/err")"
    ;;
cpp_kv)
    kv() { "$prog" "$heap" "$@"; }
    kv put alice 100 && kv put bob 20 && kv put carol 5 && kv del carol || fail "put/del"
    kv transfer alice bob 30 || fail "a transfer that fits"
    out=$(kv transfer bob alice 500) && fail "an overdraft was accepted"
    echo "$out" | grep -q "insufficient funds" || fail "the overdraft printed '$out'"
    [ "$(kv list | tr '\n' ' ')" = "alice 70 bob 50 " ] || fail "list: $(kv list)"
    kv get carol >/dev/null && fail "a deleted key is still there"
    [ "$(kv get bob)" = 50 ] || fail "get bob"
    ;;
*)
    fail "unknown example"
    ;;
esac
echo "example $name passed"
