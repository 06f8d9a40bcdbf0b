#!/bin/sh
# make demo: run the example programs on heap files under /tmp -- relocate,
# the persistent list, the hash map whose writer is killed with kill -9, the
# transactional map whose writer is killed too, the list of a GC-mode heap
# left without closing -- and show what
# `pheap stats`, `pheap check` and `pheap info` report.
set -e
build=${1:-build}
heap=${PHEAP_DEMO_HEAP:-/tmp/pheap-demo.heap}
data=${PHEAP_DEMO_DATA:-/tmp/pheap-demo-data.heap}
txheap=${PHEAP_DEMO_TX:-/tmp/pheap-demo-tx.heap}
gcheap=${PHEAP_DEMO_GC:-/tmp/pheap-demo-gc.heap}
rm -f "$data" "$txheap" "$gcheap"
echo "== relocate: create a heap, set a root, reopen it at another address"
"$build/examples/relocate" "$heap"
echo
echo "== pheap info $heap"
"$build/bin/pheap" info "$heap"
echo
echo "== pheap info --json $heap"
"$build/bin/pheap" info --json "$heap"
echo
echo "== list: a persistent linked list, built with pheap_alloc_to into the next fields"
"$build/examples/list" "$data" 5
echo "-- run it again: the list is found through its root and grows"
"$build/examples/list" "$data" 5
echo
echo "== hashmap: a writer process inserts keys, and is killed with SIGKILL mid-way"
"$build/examples/hashmap" "$data" 500
echo
echo "== txmap: a hash map whose inserts, updates and deletes are transactions; its writer is killed with SIGKILL mid-way"
"$build/examples/txmap" "$txheap" 800
echo "-- run it again: the map is found through its root, and a new writer changes it until killed"
"$build/examples/txmap" "$txheap" 800
echo
echo "== pheap check $txheap"
"$build/bin/pheap" check "$txheap"
echo
echo "== pheap stats $data"
"$build/bin/pheap" stats "$data"
echo
echo "== pheap check $data"
"$build/bin/pheap" check "$data"
echo
echo "== pheap info $data"
"$build/bin/pheap" info "$data"
echo
echo "== gc_list: a list in a GC-mode heap; the second run leaves without closing"
"$build/examples/gc_list" "$gcheap" 3
"$build/examples/gc_list" "$gcheap" 2 --kill
echo "-- pheap info: the heap needs recovery"
"$build/bin/pheap" info "$gcheap" | grep '^state'
echo "-- run it again: pheap_recover keeps what the list reaches"
"$build/examples/gc_list" "$gcheap" 1
