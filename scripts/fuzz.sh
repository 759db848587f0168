#!/usr/bin/env bash
# Runs each libFuzzer target of a fuzz build for N seconds over its seed corpus.
# Usage: fuzz.sh BUILD_DIR SECONDS. Ends with N passed, N failed, N skipped (one per target).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$1"; secs="${2:-60}"
pass=0 fail=0
for fz in "$dir"/fuzz_*; do
  [ -x "$fz" ] || continue
  name=$(basename "$fz")
  corpus_seed="$root/tests/fuzz/corpus_${name#fuzz_}"
  work=$(mktemp -d)
  [ -d "$corpus_seed" ] && cp -r "$corpus_seed"/. "$work"/ 2>/dev/null
  if "$fz" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
       -artifact_prefix="$dir/$name-" "$work" >"$dir/$name.log" 2>&1; then
    echo "ok   $name ($(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$dir/$name.log" | grep -o '[0-9]*$') inputs)"
    pass=$((pass + 1))
  else
    echo "FAIL $name: a finding; see $dir/$name.log"; tail -40 "$dir/$name.log"
    fail=$((fail + 1))
  fi
  rm -rf "$work"
done
echo "$pass passed, $fail failed, 0 skipped"
[ "$fail" -eq 0 ]
