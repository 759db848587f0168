#!/usr/bin/env bash
# Randomised differential testing of the optimiser: writes the random graphs of a seed range (and
# the regression models) with ONNX Runtime's outputs, then runs each at levels 0-3 in one
# `kiln test --compare-levels` process per core (levels 1-3 against level 0, level 0 against ONNX
# Runtime). Ends with "N passed, N failed, N skipped"; a failing graph's folder is kept.
#
#   bash tests/opt_fuzz/run.sh [--seeds A-B] [--provider P] [KILN]
#     --seeds A-B   the seed range (default 0-999: the fixed set CI runs); a long run:
#                   bash tests/opt_fuzz/run.sh --seeds 1000-50999
#     --provider P  kiln's --provider (default: the CPU; e.g. cuda,cpu on the GPU machine)
#     KILN          the kiln binary (default build/kiln)
# $KILN_OPT_FUZZ_DIR: where the graphs go (default a temporary folder, removed unless one fails).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
seeds="0-999" provider=""
while [ $# -gt 0 ]; do
  case "$1" in
    --seeds) seeds="$2"; shift 2 ;;
    --provider) provider="$2"; shift 2 ;;
    *) break ;;
  esac
done
kiln="${1:-$root/build/kiln}"
if [ ! -x "$kiln" ]; then echo "opt_fuzz: $kiln is not built"; echo "0 passed, 1 failed, 0 skipped"; exit 1; fi
[ -n "${KILN_PYTHON:-}" ] || . "$root/scripts/python_env.sh"
out="${KILN_OPT_FUZZ_DIR:-}"
keep=1
if [ -z "$out" ]; then out="$(mktemp -d "${TMPDIR:-/tmp}/kiln_opt_fuzz.XXXXXX")"; keep=0; fi
mkdir -p "$out"
export KILN_CACHE_DIR="$out/.cache"

# generation: one process per core over slices of the seed range
a="${seeds%-*}" b="${seeds#*-}"
jobs="$(nproc 2>/dev/null || echo 2)"
n=$((b - a + 1)); per=$(((n + jobs - 1) / jobs))
pids=()
for ((j = 0; j < jobs; j++)); do
  lo=$((a + j * per)); hi=$((lo + per - 1)); [ "$hi" -gt "$b" ] && hi=$b
  [ "$lo" -gt "$b" ] && break
  extra=(); [ "$j" -gt 0 ] && extra=(--no-regressions)
  "$KILN_PYTHON" "$root/tests/opt_fuzz/opt_fuzz.py" "$out/part$j" --seeds "$lo-$hi" "${extra[@]}" >"$out/gen$j.log" 2>&1 &
  pids+=($!)
done
gen_failed=0
for ((j = 0; j < ${#pids[@]}; j++)); do
  if ! wait "${pids[j]}"; then gen_failed=1; cat "$out/gen$j.log"; fi
done
if [ "$gen_failed" -ne 0 ]; then
  echo "opt_fuzz: the generator failed (graphs kept in $out)"
  echo "0 passed, 1 failed, 0 skipped"; exit 1
fi

provider_args=(); [ -n "$provider" ] && provider_args=(--provider "$provider")
for ((j = 0; j < ${#pids[@]}; j++)); do
  "$kiln" test --compare-levels --no-isolate --threads 1 "${provider_args[@]}" "$out/part$j" >"$out/run$j.log" 2>&1 &
  pids[j]=$!
done
passed=0 failed=0 skipped=0
for ((j = 0; j < ${#pids[@]}; j++)); do
  wait "${pids[j]}"
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped' "$out/run$j.log" | tail -1)
  if [ -z "$line" ]; then
    echo "opt_fuzz: part $j died: $(tail -1 "$out/run$j.log")"
    line="0 passed, 1 failed, 0 skipped"
  fi
  read -r p _ f _ s _ <<<"${line//,/}"
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
done
# seeds ONNX Runtime could not run (no reference) count as skipped
for ((j = 0; j < ${#pids[@]}; j++)); do
  grep -E '^SKIP' "$out/gen$j.log"
  skipped=$((skipped + $(wc -l <"$out/part$j/skipped.txt")))
done
cat "$out"/run*.log | grep -E '^(FAIL|SKIP)' | sort
if [ "$failed" -gt 0 ] || [ "$keep" -eq 1 ]; then
  echo "opt_fuzz: graphs in $out (regenerate one: $KILN_PYTHON tests/opt_fuzz/opt_fuzz.py DIR --seeds S-S)"
else
  rm -rf "$out"
fi
echo "$passed passed, $failed failed, $skipped skipped"
