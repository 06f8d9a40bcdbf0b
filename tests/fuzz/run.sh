#!/bin/sh
# run.sh BUILD SECONDS JOBS -- runs fuzz_heap (libFuzzer) for SECONDS on JOBS
# processes, corpus and findings under BUILD/fuzz, and prints what it did.
# FUZZ_BIN names the binary under BUILD/fuzz to run (default fuzz_heap).
set -u
build=$1 seconds=$2 jobs=$3
dir=$build/fuzz
mkdir -p "$dir/corpus" "$dir/findings"
# The starting corpus: every seed image untouched (seed index, flags 1, end
# of patches), with and without operations, and a read-only look first.
if [ -z "$(ls -A "$dir/corpus")" ]; then
  i=0
  while [ $i -lt 24 ]; do
    printf "$(printf '\\%03o\\001\\015' $i)" > "$dir/corpus/seed-$i"
    printf "$(printf '\\%03o\\003\\015\\000\\001\\007\\002\\004\\011' $i)" > "$dir/corpus/seed-$i-ops"
    i=$((i + 1))
  done
fi
before=$(ls "$dir/findings" | wc -l)
cd "$dir" || exit 1
echo "fuzzing for $seconds s on $jobs jobs; corpus $dir/corpus, findings $dir/findings"
./${FUZZ_BIN:-fuzz_heap} -fork="$jobs" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
  -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2560 -max_len=512 \
  -artifact_prefix="$dir/findings/" corpus > fuzz.log 2>&1
status=$?
last=$(grep -E '^#[0-9]+: ' fuzz.log | tail -1)
echo "libFuzzer status $status; last report: $last"
execs=$(echo "$last" | sed -n 's/^#\([0-9]*\):.*/\1/p')
echo "executions: ${execs:-unknown} in $seconds s"
after=$(ls findings | wc -l)
echo "findings: $((after - before)) new, $after in all under $dir/findings"
# What each new finding is: replayed one by one (the fuzz build's replay
# driver prints the broken contract or the sanitizer's report).
for f in $(ls -t findings | head -$((after - before))); do
  line=$(timeout 120 ../tests/fuzz_replay "findings/$f" 2>&1 |
         grep -m1 -E 'contract broken|SUMMARY|runtime error|ERROR: AddressSanitizer')
  echo "  $f: ${line:-passes now}"
done
