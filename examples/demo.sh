#!/bin/sh
# make demo: run the example programs on a heap file under /tmp and show
# what `pheap info` reports about it.
set -e
build=${1:-build}
heap=${PHEAP_DEMO_HEAP:-/tmp/pheap-demo.heap}
echo "== relocate: create a heap, set a root, reopen it at another address"
"$build/examples/relocate" "$heap"
echo
echo "== pheap info $heap"
"$build/bin/pheap" info "$heap"
echo
echo "== pheap info --json $heap"
"$build/bin/pheap" info --json "$heap"
