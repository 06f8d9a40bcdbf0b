#!/bin/sh
# faults.sh SOURCE BUILD -- the tests of the tests (make torture).
#
# Builds pheap with PHEAP_FAULTS=ON in BUILD, then prints two tables:
#   planted bugs  each deliberate defect (PHEAP_PLANT=name) switched on in
#                 turn: the crash tests must catch every one;
#   flush sites   each flush, fence and non-temporal store of the library
#                 dropped in turn (PHEAP_DROP_SITE=file:line): the first
#                 crash test that fails.  A site no test needs is either a flush
#                 to remove or a hole in the tests; the few that are
#                 needed by no crash test for a stated reason are listed in
#                 tests/torture/sites-explained.txt.
# Exits 1 when a planted bug is not caught or a site is neither needed nor
# explained.  The crash tests run at PHEAP_CRASH=quick: fewer variants,
# stopping at the first violation.
set -u
src=$1
b=$2
cmake -S "$src" -B "$b" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPHEAP_FAULTS=ON >/dev/null &&
  cmake --build "$b" -j "$(nproc)" >/dev/null || { echo "faults: build failed"; exit 1; }

# cheapest first: each table row names the first test program that fails
tests="crash_lanes unit_sim crash_roots crash_extlog crash_init_contents crash_threads crash_alloc_init crash_alloc crash_compaction crash_tx crash_names crash_names_fillers api_names"
plants="lane-no-zero lane-no-check lane-replay-retired lane-retire-first alloc-to-no-log
        compact-reuse-epoch extent-wrong-epoch slab-no-desc-fence slab-commit-before-desc
        state-split-store grow-no-sync extlog-raise-no-zero extlog-mark-unfenced
        extlog-mark-after-commit tx-no-contents-check tx-retire-before-apply
        bind-retire-early"
explained="$src/tests/torture/sites-explained.txt"

# Prints the first test program that fails under the given environment
# setting, or nothing.
failing() {
  for t in $tests; do
    # a test that hangs without the site fails too
    if ! timeout 600 env "$1" PHEAP_CRASH=quick "$b/tests/$t" >/dev/null 2>&1; then
      echo "$t"
      return
    fi
  done
}

status=0
printf '%-28s %s\n' "planted bug" "caught by"
caught=0 total=0
for p in $plants; do
  total=$((total + 1))
  f=$(failing "PHEAP_PLANT=$p")
  if [ -n "$f" ]; then caught=$((caught + 1)); else f="NOT CAUGHT"; status=1; fi
  printf '%-28s %s\n' "$p" "$f"
done
echo "$caught of $total planted bugs caught"
echo

printf '%-44s %-12s %s\n' "flush site" "kind" "first test that fails without it"
needed=0 nsites=0
"$b/tests/fault_sites" > "$b/sites.txt"
while read -r site func kind; do
  nsites=$((nsites + 1))
  f=$(failing "PHEAP_DROP_SITE=$site")
  if [ -n "$f" ]; then
    needed=$((needed + 1))
  else
    why=$(grep "^$site " "$explained" 2>/dev/null | cut -d' ' -f2-)
    if [ -n "$why" ]; then f="(none: $why)"; else f="NONE -- unexplained"; status=1; fi
  fi
  printf '%-44s %-12s %s\n' "$site $func" "$kind" "$f"
done < "$b/sites.txt"
echo "$needed of $nsites flush sites needed by a crash test"
exit $status
