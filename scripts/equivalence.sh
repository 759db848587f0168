#!/usr/bin/env bash
# Proof of equivalence of the optimisation levels: every ONNX node test and every zoo model runs
# at levels 0, 1, 2 and 3 on the same inputs (kiln test --compare-levels: all four sessions in one
# process, so one CUDA context per shard rather than four process starts per folder). Each level's
# outputs must equal level 0's at the test's tolerance, and match the reference outputs wherever
# level 0 does; level 0 is checked against the reference as kiln test checks it. Each (folder,
# data set, level) counts once; a folder that level 0 cannot load or run, that is listed in
# tests/conformance/expected_failures.txt, or whose model draws unseeded random numbers counts
# once as skipped. Ends with "N passed, N failed, N skipped".
#
#   bash scripts/equivalence.sh [--provider P] [KILN] [DIR...]
#     P     kiln's --provider for every run (e.g. cuda,cpu; also $KILN_EQ_PROVIDER; default: the CPU)
#     KILN  the kiln binary (default build/kiln)
#     DIR   test folders (default: build/nodetests and ../shared/models, or $KILN_ZOO)
# The folders are split into $KILN_EQ_JOBS shards run at once (default: one per core); a shard
# that dies (or runs past $KILN_EQ_SHARD_TIMEOUT seconds, default 3600) without its result line
# runs again with one process per folder.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
provider="${KILN_EQ_PROVIDER:-}"
if [ "${1:-}" = "--provider" ]; then provider="${2:-}"; shift 2; fi
provider_args=()
[ -n "$provider" ] && provider_args=(--provider "$provider")
kiln="${1:-$root/build/kiln}"
shift || true
dirs=("$@")
if [ ${#dirs[@]} -eq 0 ]; then
  for d in "$root/build/nodetests" "${KILN_ZOO:-$root/../shared/models}"; do
    [ -d "$d" ] && dirs+=("$d")
  done
fi
if [ ! -x "$kiln" ]; then echo "equivalence: $kiln is not built"; echo "0 passed, 1 failed, 0 skipped"; exit 1; fi

# every folder under the DIRs that holds a model.onnx, as kiln test finds them: hidden folders
# and folders inside a test folder are not tests
mapfile -t folders < <(
  for d in "${dirs[@]}"; do
    [ -d "$d" ] && find "$d" -mindepth 1 -name '.*' -prune -o -name model.onnx -printf '%h\n'
  done | LC_ALL=C sort -u |
    awk '{ # sorted, so a folder comes before the folders inside it
      n = split($0, p, "/"); a = p[1]; inside = 0
      for (i = 1; i < n; i++) { if (i > 1) a = a "/" p[i]; if (a in kept) inside = 1 }
      if (!inside) { kept[$0] = 1; print }
    }')
if [ ${#folders[@]} -eq 0 ]; then echo "equivalence: no test folders"; echo "0 passed, 0 failed, 1 skipped"; exit 0; fi

# shard lists, logs and a private compiled-model cache on tmpfs where there is one
tmp_parent=/dev/shm; [ -d "$tmp_parent" ] && [ -w "$tmp_parent" ] || tmp_parent="${TMPDIR:-/tmp}"
tmp="$(mktemp -d "$tmp_parent/kiln_eq.XXXXXX")"
export KILN_CACHE_DIR="$tmp/cache"
trap 'rm -rf "$tmp"' EXIT

jobs="${KILN_EQ_JOBS:-$(nproc 2>/dev/null || echo 2)}"
[ "$jobs" -ge 1 ] 2>/dev/null || jobs=1
[ "$jobs" -gt ${#folders[@]} ] && jobs=${#folders[@]}
# round robin, so that the zoo's large models spread over the shards
for ((i = 0; i < ${#folders[@]}; i++)); do echo "${folders[i]}" >>"$tmp/shard$((i % jobs)).list"; done

run_shard() { # I [--no-isolate]
  local list; mapfile -t list <"$tmp/shard$1.list"
  timeout "${KILN_EQ_SHARD_TIMEOUT:-3600}" "$kiln" test --compare-levels "${@:2}" --threads 1 "${provider_args[@]}" \
    --expected-failures "$root/tests/conformance/expected_failures.txt" "${list[@]}" >"$tmp/shard$1.log" 2>&1
}
result_line() { grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped' "$1" | tail -1; }

for ((i = 0; i < jobs; i++)); do run_shard "$i" --no-isolate & done
wait
passed=0 failed=0 skipped=0
for ((i = 0; i < jobs; i++)); do
  line=$(result_line "$tmp/shard$i.log")
  if [ -z "$line" ]; then
    echo "equivalence: shard $i died ($(tail -1 "$tmp/shard$i.log")): again, one process per folder"
    run_shard "$i"
    line=$(result_line "$tmp/shard$i.log")
    [ -n "$line" ] || line="0 passed, $(wc -l <"$tmp/shard$i.list") failed, 0 skipped"
  fi
  read -r p _ f _ s _ <<<"${line//,/}"
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
done
cat "$tmp"/shard*.log | grep -E '^FAIL' | sort
cat "$tmp"/shard*.log | grep -E '^SKIP' | sort
echo "(${#folders[@]} folders in $jobs shards${provider:+, provider $provider at every level})"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
