#!/usr/bin/env bash
# Where the ONNX node tests would run with providers cuda,cpu: for each test folder given (or
# listed in a file with -f), `kiln inspect --provider cuda,cpu` places the graph (from the kernel
# tables; no GPU needed) and this counts the tests whose every node is on CUDA, those with only
# host shape computations on the CPU, and those with a CPU fallback (listed with the reason).
#
#   scripts/cuda_placement.sh [-k KILN] [-o LEVEL] [-f LIST] DIR...
set -uo pipefail
kiln=build/kiln level=0 list=""
while getopts "k:o:f:" opt; do
  case $opt in k) kiln=$OPTARG ;; o) level=$OPTARG ;; f) list=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
dirs=("$@")
if [ -n "$list" ]; then mapfile -t more <"$list"; dirs+=("${more[@]}"); fi
all=0 device=0 shape=0 fallback=0 error=0
for d in "${dirs[@]}"; do
  [ -f "$d/model.onnx" ] || continue
  all=$((all + 1))
  out=$("$kiln" inspect "$d/model.onnx" --provider cuda,cpu --opt-level "$level" 2>&1)
  line=$(grep -E '^placement summary:' <<<"$out")
  if [ -z "$line" ]; then error=$((error + 1)); echo "NOPLACE $(basename "$d"): $(grep -E 'placement:|shape inference:|optimisation:' <<<"$out" | head -1)"; continue; fi
  fb=$(sed -E 's/.*fallback=([0-9]+).*/\1/' <<<"$line"); sh=$(sed -E 's/.*shape_on_cpu=([0-9]+).*/\1/' <<<"$line")
  sg=$(sed -E 's/.*subgraph=([0-9]+).*/\1/' <<<"$line")
  if [ "$fb" -gt 0 ] || [ "$sg" -gt 0 ]; then
    fallback=$((fallback + 1))
    echo "FALLBACK $(basename "$d"): $(grep -E 'falls back' <<<"$out" | head -1 | sed -E 's/ +/ /g')"
  elif [ "$sh" -gt 0 ]; then shape=$((shape + 1))
  else device=$((device + 1)); fi
done
echo "placement at opt level $level over $all tests: $device all on cuda, $shape cuda + host shape computations, $fallback with a CPU fallback, $error not placed"
if [ "$all" -gt 0 ]; then
  awk -v a="$all" -v d="$device" -v s="$shape" 'BEGIN { printf "no node on the CPU: %.1f%%; no CPU fallback: %.1f%%\n", 100*d/a, 100*(d+s)/a }'
fi
