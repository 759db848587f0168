#!/usr/bin/env bash
# The GPU test command. On a machine with a CUDA GPU it builds kiln with the CUDA backend and runs:
#   - the GPU unit tests (field regressions, steady-state allocation, strict mode, the zoo in
#     fp32/tf32/fp16/bf16 with provider cuda alone),
#   - the model zoo with provider cuda alone (no CPU fallback possible) at optimisation levels 0 and 3,
#   - the ONNX node tests with providers cuda,cpu at levels 0 and 3, against the CPU's own results
#     (tests that fail on the CPU are expected to fail here too), and those with If, Loop and Scan
#     with provider cuda alone at levels 0 and 3,
#   - the com.microsoft operator tests against onnxruntime (tests/conformance/make_contrib_tests.py):
#     those of the operators with CUDA kernels (MatMulNBits, the QLinear operators) with provider cuda
#     alone, all of them with cuda,cpu,
#   - the equivalence of the optimisation levels on CUDA (scripts/equivalence.sh --provider cuda,cpu:
#     every zoo model and node test at levels 1, 2, 3 against level 0, in $KILN_EQ_JOBS shards of
#     one process and one CUDA context each, default one per core),
#   - the zoo, the float16 zoo test and the node tests again with every product and convolution on
#     kiln's own stand-in kernels (KILN_CUDA_STAND_INS=always; a warm start's first runs use them),
#   - the zoo, the float16 zoo test and the node tests at level 3 with channels-last regions
#     (KILN_LAYOUT=nhwc: CUDA's NHWC convolution everywhere it applies; by default only at batch 4+ in
#     half precision, which the zoo's batch-1 tests do not reach),
# and ends with one line: N passed, N failed, N skipped. Without a GPU every part reports skipped.
#
#   bash scripts/gpu_test.sh
# Environment: KILN_BUILD (build folder, default build-gpu), KILN_ZOO (default ../shared/models),
# KILN_NODE_TESTS (default $KILN_BUILD/nodetests, written by tests/conformance/write_node_tests.py),
# KILN_CONTRIB_TESTS (default $KILN_BUILD/contrib_tests, written by tests/conformance/make_contrib_tests.py),
# KILN_CUDA_ARCH (CMAKE_CUDA_ARCHITECTURES, default: the toolkit's "native" when a GPU is there),
# KILN_GPU_LOGS (a folder for the full logs), KILN_GPU_SANITIZE=1 (also compute-sanitizer memcheck
# over the zoo), KILN_GPU_SHARDS (parallel node-test processes, default 8), KILN_GPU_ONLY (an
# extended regex: only the parts whose names match run, the others count as one skip each; the
# device machine's calls last 10 minutes, so the suite can be split, e.g. 'unit|zoo|cache' and
# 'node tests|equivalence|fuzz|Python|contrib|control'), KILN_GPU_PARALLEL (how many parts run at
# once, default 1: one after another; the parts are independent, and on a many-core GPU machine the
# whole suite fits one of the device's calls with 3-4; each part's output is then printed when all end).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
build="${KILN_BUILD:-build-gpu}"
zoo="${KILN_ZOO:-$root/../shared/models}"
nodes="${KILN_NODE_TESTS:-$build/nodetests}"
logs="${KILN_GPU_LOGS:-$build/gpu-logs}"
shards="${KILN_GPU_SHARDS:-8}"
parallel="${KILN_GPU_PARALLEL:-1}"
jobs=$(nproc 2>/dev/null || echo 2)
mkdir -p "$logs"

total_pass=0 total_fail=0 total_skip=0
summary=()

add_line() { # NAME LINE
  local p f s
  read -r p _ f _ s _ <<<"$(echo "$2" | tr ',' ' ')"
  total_pass=$((total_pass + p)); total_fail=$((total_fail + f)); total_skip=$((total_skip + s))
  summary+=("$1: $2")
}

# Each part's result goes to a file, in the order the parts were started: a part run in the
# background (KILN_GPU_PARALLEL) cannot add to this shell's totals, which are summed at the end.
results="$logs/results.tsv"
: >"$results"
part_index=0
record() { # NAME LINE
  printf '%s\t%s\t%s\n' "$part_index" "$1" "$2" >>"$results"
}

result_line() { grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped' "$1" | tail -1; }

# KILN_GPU_ONLY: whether part NAME runs (a part left out counts as one skip)
selected() {
  [ -z "${KILN_GPU_ONLY:-}" ] && return 0
  echo "$1" | grep -Eq -- "$KILN_GPU_ONLY" && return 0
  echo "=== $1: not selected (KILN_GPU_ONLY)"; record "$1 (not selected)" "0 passed, 0 failed, 1 skipped"; return 1
}

# launch COMMAND...: runs it now, or with KILN_GPU_PARALLEL > 1 in the background (at most that many
# at once), its output kept for the end
launch() {
  part_index=$((part_index + 1))
  if [ "$parallel" -le 1 ]; then "$@"; return 0; fi
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n; done
  "$@" >"$logs/part_$(printf %03d "$part_index").out" 2>&1 &
}

run_part() { # NAME LOGFILE COMMAND...
  local name="$1" log="$2" t0=$SECONDS; shift 2
  echo "=== $name: $*"
  "$@" >"$log" 2>&1
  local rc=$?
  grep -E '^(FAIL|SKIP)|relative L2' "$log" | head -60
  local line; line=$(result_line "$log")
  if [ -z "$line" ]; then line="0 passed, 1 failed, 0 skipped"; echo "=== $name: no result line (exit $rc)"; tail -5 "$log"; fi
  echo "=== $name: $line ($((SECONDS - t0)) s)"
  record "$name" "$line"
}

part() { # NAME LOGFILE COMMAND...
  selected "$1" || return 0
  launch run_part "$@"
}

echo "=== build ($build)"
arch_args=()
if [ -n "${KILN_CUDA_ARCH:-}" ]; then arch_args=(-DCMAKE_CUDA_ARCHITECTURES="$KILN_CUDA_ARCH")
elif command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then arch_args=(-DCMAKE_CUDA_ARCHITECTURES=native); fi
if ! { cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON "${arch_args[@]}" >"$logs/cmake.log" 2>&1 &&
       cmake --build "$build" -j"$jobs" >"$logs/build.log" 2>&1; }; then
  tail -30 "$logs/cmake.log" "$logs/build.log"
  echo "build failed"; echo "0 passed, 1 failed, 0 skipped"; exit 1
fi
"$build/kiln" info | tee "$logs/info.log"

# the node tests and the zoo, counted for the skipped report
if [ ! -d "$nodes" ] || [ -z "$(ls -A "$nodes" 2>/dev/null)" ]; then
  python3 tests/conformance/write_node_tests.py "$nodes" >"$logs/write_node_tests.log" 2>&1
fi
mapfile -t node_list < <(find "$nodes" -mindepth 1 -maxdepth 1 -type d -name 'test_*' | sort)
zoo_count=0
[ -d "$zoo" ] && zoo_count=$(find "$zoo" -mindepth 2 -maxdepth 2 -name model.onnx | wc -l)

if ! grep -q '^provider cuda: available' "$logs/info.log"; then
  reason=$(grep '^provider cuda:' "$logs/info.log" | sed 's/^provider cuda: //')
  echo "=== no usable CUDA device ($reason): every GPU test is skipped"
  n_unit=$("$build/kiln_unit_tests" cuda 2>/dev/null | result_line /dev/stdin | awk '{print $5}')
  # the equivalence part counts as one skip per folder
  skipped=$(( ${n_unit:-0} + 6 * zoo_count + 5 * ${#node_list[@]} + 4 + 2 + 2 ))
  echo "0 passed, 0 failed, $skipped skipped"
  exit 0
fi

export KILN_ZOO="$zoo"
# The longest parts first (the GPU unit tests and the com.microsoft operators with cuda,cpu: 184 and
# 222 s of the 282 the whole suite took with KILN_GPU_PARALLEL=4 on 12-06), so the rest overlaps them.
# The unit tests in KILN_GPU_UNIT_SHARDS processes (default 2; 1 with KILN_GPU_PARALLEL=1): alone they
# were the suite's critical path (the H200 run of 12-07 had 72 of 104 done after ~250 s beside the rest).
unit_shards="${KILN_GPU_UNIT_SHARDS:-$([ "$parallel" -gt 1 ] && echo 2 || echo 1)}"
for ((u = 0; u < unit_shards; u++)); do
  part "GPU unit tests ($((u + 1))/$unit_shards)" "$logs/unit$u.log" env KILN_SOURCE_DIR="$root" \
    "$build/kiln_unit_tests" cuda --shard "$u/$unit_shards"
done

# The com.microsoft operators (and the ONNX integer products the script also writes) against
# onnxruntime's CPU outputs: those with CUDA kernels (MatMulNBits and the QLinear operators of
# cuda_ops_qcontrib.c, MatMulInteger of cuda_ops_quant.c) with provider cuda alone, so a CPU fallback
# fails; every one with cuda,cpu. QLinearConv and ConvInteger have no CUDA kernel.
# KILN_CONTRIB_TESTS: a folder the script wrote elsewhere, used as it is (the GPU machine's
# onnxruntime build segfaulted in the script on 12-05).
contrib="${KILN_CONTRIB_TESTS:-$build/contrib_tests}"
if [ -z "${KILN_CONTRIB_TESTS:-}" ] && [ ! "$contrib/.complete" -nt tests/conformance/make_contrib_tests.py ]; then
  rm -rf "$contrib"
  python3 tests/conformance/make_contrib_tests.py "$contrib" >"$logs/make_contrib_tests.log" 2>&1 && touch "$contrib/.complete"
fi
mapfile -t contrib_cuda < <(find "$contrib" -mindepth 1 -maxdepth 1 -type d \( -name 'test_contrib_matmulnbits*' -o -name 'test_contrib_qlinear*' \
  -o -name 'test_contrib_matmulinteger*' \) ! -name 'test_contrib_qlinearconv*' ! -name 'test_contrib_matmulintegertofloat*' 2>/dev/null | sort)
if [ ${#contrib_cuda[@]} -gt 0 ]; then
  part "MatMulNBits, QLinear operators and MatMulInteger vs onnxruntime, provider cuda only" "$logs/contrib_cuda.log" \
    "$build/kiln" test --provider cuda "${contrib_cuda[@]}"
  part "com.microsoft operators vs onnxruntime, providers cuda,cpu" "$logs/contrib_cuda_cpu.log" \
    "$build/kiln" test --provider cuda,cpu "$contrib"
else
  echo "=== com.microsoft operator tests: none written ($logs/make_contrib_tests.log)"; record "com.microsoft operator tests: none written" "0 passed, 0 failed, 2 skipped"
fi

# The compiled-model cache tests with provider cuda (then cpu): hit, miss, rebuilt, corrupt, load
# paths, dump; the eight-process test in a process of its own (its children fork, and a process
# that has used CUDA cannot fork children that use it).
part "cache tests, provider cuda" "$logs/cache.log" env KILN_SOURCE_DIR="$root" KILN_TEST_CACHE_PROVIDERS=cuda \
  "$build/kiln_unit_tests" cache_ -cache_key -cache_hash -cache_format -cache_eight
part "cache test, 8 processes, provider cuda" "$logs/cache8.log" env KILN_SOURCE_DIR="$root" \
  KILN_TEST_CACHE_PROVIDERS=cuda "$build/kiln_unit_tests" cache_eight
if [ "$zoo_count" -gt 0 ]; then
  for level in 0 3; do
    part "zoo, provider cuda only, level $level" "$logs/zoo_l$level.log" \
      "$build/kiln" test --repeat 2 --provider cuda --opt-level "$level" "$zoo"
  done
  # kiln's own product and convolution kernels, which run a warm start's first runs while cuBLASLt
  # and cuDNN start (cuda_warmup.c): here for every product and convolution of every run
  part "zoo, provider cuda only, level 3, kiln's stand-in kernels" "$logs/zoo_standin.log" \
    env KILN_CUDA_STAND_INS=always "$build/kiln" test --provider cuda --opt-level 3 "$zoo"
  part "zoo in float16 (activations=half), kiln's stand-in kernels" "$logs/unit_half_standin.log" \
    env KILN_CUDA_STAND_INS=always KILN_SOURCE_DIR="$root" "$build/kiln_unit_tests" cuda_zoo_half_activations
  # level 3's channels-last regions on CUDA (cuDNN's NHWC formats, the pointwise product over all
  # positions, the channels-last stand-in), asked for: no provider forms them by itself yet
  part "zoo, provider cuda only, level 3, channels last" "$logs/zoo_nhwc.log" \
    env KILN_LAYOUT=nhwc "$build/kiln" test --provider cuda --opt-level 3 "$zoo"
  part "zoo, provider cuda only, level 3, channels last, kiln's stand-in kernels" "$logs/zoo_nhwc_standin.log" \
    env KILN_LAYOUT=nhwc KILN_CUDA_STAND_INS=always "$build/kiln" test --provider cuda --opt-level 3 "$zoo"
  part "zoo in float16 (activations=half), channels last" "$logs/unit_half_nhwc.log" \
    env KILN_LAYOUT=nhwc KILN_SOURCE_DIR="$root" "$build/kiln_unit_tests" cuda_zoo_half_activations
else
  echo "=== zoo: $zoo not found"; record "zoo: not found" "0 passed, 0 failed, 7 skipped"
fi

# Node tests in parallel shards, one process each (one CUDA context per shard, not per test); a
# shard that dies is run again with one process per test.
run_node_tests() { # NAME TAG COUNTED(0|1) EXTRA-ARGS...
  local name="$1" tag="$2" counted="$3"; shift 3
  # the CPU baseline runs whenever a counted node-test part does (it makes their expected failures)
  if [ "$counted" = 1 ]; then selected "$name" || return 0; fi
  local n=${#node_list[@]} per=$(( (${#node_list[@]} + shards - 1) / shards )) i
  echo "=== $name: ${n} tests in $shards shards"
  for ((i = 0; i < shards; i++)); do
    local part_list=("${node_list[@]:$((i * per)):$per}")
    [ ${#part_list[@]} -gt 0 ] || continue
    printf '%s\n' "${part_list[@]}" >"$logs/${tag}_shard$i.list"
    "$build/kiln" test "$@" --no-isolate "${part_list[@]}" >"$logs/${tag}_shard$i.log" 2>&1 &
  done
  wait
  local p=0 f=0 s=0
  for ((i = 0; i < shards; i++)); do
    [ -f "$logs/${tag}_shard$i.list" ] || continue
    local line; line=$(result_line "$logs/${tag}_shard$i.log")
    if [ -z "$line" ]; then
      echo "    shard $i died ($(tail -1 "$logs/${tag}_shard$i.log")): again, one process per test"
      mapfile -t part_list <"$logs/${tag}_shard$i.list"
      "$build/kiln" test "$@" "${part_list[@]}" >"$logs/${tag}_shard$i.log" 2>&1
      line=$(result_line "$logs/${tag}_shard$i.log")
      [ -n "$line" ] || line="0 passed, ${#part_list[@]} failed, 0 skipped"
    fi
    local a b c
    read -r a _ b _ c _ <<<"$(echo "$line" | tr ',' ' ')"
    p=$((p + a)); f=$((f + b)); s=$((s + c))
  done
  # a test that fails on the CPU but passes here is a pass, not the runner's "remove it from the list"
  local xpass; xpass=$(cat "$logs/${tag}"_shard*.log | grep -c 'passes but is in the expected-failures list')
  p=$((p + xpass)); f=$((f - xpass))
  cat "$logs/${tag}"_shard*.log | grep -E '^FAIL' | grep -v 'passes but is in the expected-failures list' | sort \
    >"$logs/${tag}_failures.txt"
  head -40 "$logs/${tag}_failures.txt"
  echo "=== $name: $p passed, $f failed, $s skipped"
  [ "$counted" = 1 ] && record "$name" "$p passed, $f failed, $s skipped"
  return 0
}

# The node tests with cuda,cpu, four counted runs. The CPU's own results first: what fails there is
# expected to fail with cuda,cpu too (at level 0: from level 1 the CPU runs float16 graphs in float32,
# which passes a float16 test or two that a provider computing in float16 fails as the CPU's level 0 does).
node_tests_cuda_cpu() {
  local level fails cpu_fail cpu_pass
  run_node_tests "node tests, cpu (baseline, not counted)" cpu 0 --provider cpu --opt-level 0
  sed -E 's/^FAIL ([^:]*):.*/\1/' "$logs/cpu_failures.txt" >"$logs/cpu_expected_failures.txt"
  cpu_fail=$(wc -l <"$logs/cpu_expected_failures.txt")
  cpu_pass=$(( ${#node_list[@]} - cpu_fail ))
  for level in 0 3; do
    run_node_tests "node tests, providers cuda,cpu, level $level" "cuda_l$level" 1 --provider cuda,cpu --opt-level "$level" \
      --expected-failures "$logs/cpu_expected_failures.txt"
    [ -f "$logs/cuda_l${level}_failures.txt" ] || continue # not selected
    fails=$(wc -l <"$logs/cuda_l${level}_failures.txt")
    awk -v c="$cpu_pass" -v f="$fails" -v l="$level" \
      'BEGIN { if (c > 0) printf "    level %s: %d of the %d node tests that pass on the CPU pass with cuda,cpu (%.1f%%)\n", l, c - f, c, 100 * (c - f) / c }' |
      tee -a "$logs/node_fraction.txt"
  done
  KILN_CUDA_STAND_INS=always run_node_tests "node tests, providers cuda,cpu, level 0, kiln's stand-in kernels" cuda_standin 1 \
    --provider cuda,cpu --opt-level 0 --expected-failures "$logs/cpu_expected_failures.txt"
  KILN_LAYOUT=nhwc run_node_tests "node tests, providers cuda,cpu, level 3, channels last" cuda_nhwc 1 \
    --provider cuda,cpu --opt-level 3 --expected-failures "$logs/cpu_expected_failures.txt"
}

if [ ${#node_list[@]} -gt 0 ]; then
 if [ -z "${KILN_GPU_ONLY:-}" ] || echo "node tests, providers cuda,cpu" | grep -Eq -- "$KILN_GPU_ONLY"; then
  launch node_tests_cuda_cpu
 else
  echo "=== node tests with cuda,cpu: not selected (KILN_GPU_ONLY)"; record "node tests with cuda,cpu (not selected)" "0 passed, 0 failed, 4 skipped"
 fi
  # If, Loop and Scan on CUDA (cuda_ops_control.c): the node tests whose models hold them, with
  # provider cuda alone, so a CPU fallback fails; left out are those carrying sequences or optionals
  # (test_if_seq, test_if_opt, test_loop13_seq, test_loop16_seq_none, the expanded sequence_map
  # tests), which only the CPU holds
  mapfile -t cf_cuda < <(find "$nodes" -mindepth 1 -maxdepth 1 -type d \( -name test_if -o -name test_loop11 -o \
    -name 'test_scan*' -o -name 'test_affine_grid_*_expanded' -o -name 'test_range_*_expanded' -o \
    -name 'test_linear_attention_*_expanded' \) | sort)
  for level in 0 3; do
    part "control-flow node tests, provider cuda only, level $level" "$logs/control_cuda_l$level.log" \
      "$build/kiln" test --provider cuda --opt-level "$level" "${cf_cuda[@]}"
  done
else
  echo "=== node tests: none found in $nodes"; record "node tests: none found" "0 passed, 0 failed, 6 skipped"
fi

# The optimisation levels on CUDA: fused nodes now form for the CUDA provider (src/opt/target.c),
# so each level's outputs are compared with level 0's, both with providers cuda,cpu (kiln test
# --compare-levels: the four levels' sessions of a folder in one process per shard).
eq_dirs=()
[ ${#node_list[@]} -gt 0 ] && eq_dirs+=("$nodes")
[ "$zoo_count" -gt 0 ] && eq_dirs+=("$zoo")
if [ ${#eq_dirs[@]} -gt 0 ]; then
  part "equivalence of levels 0..3, providers cuda,cpu" "$logs/equivalence_cuda.log" \
    env KILN_EQ_JOBS="${KILN_EQ_JOBS:-$jobs}" bash scripts/equivalence.sh --provider cuda,cpu "$build/kiln" "${eq_dirs[@]}"
else
  echo "=== equivalence on CUDA: no test folders"; record "equivalence on CUDA: no test folders" "0 passed, 0 failed, 1 skipped"
fi

# The optimiser's randomised differential test (tests/opt_fuzz) with CUDA: the fixed seed set's
# graphs at levels 1-3 against level 0 and level 0 against ONNX Runtime, providers cuda,cpu
part "optimiser differential fuzzing, providers cuda,cpu" "$logs/opt_fuzz.log" \
  bash tests/opt_fuzz/run.sh --provider cuda,cpu "$build/kiln"
# and with level 3's channels-last regions formed wherever the graph has them (the auto rule
# takes few of the fuzzer's small float32 graphs)
part "optimiser differential fuzzing, providers cuda,cpu, channels last" "$logs/opt_fuzz_nhwc.log" \
  env KILN_LAYOUT=nhwc bash tests/opt_fuzz/run.sh --provider cuda,cpu "$build/kiln"

# The Python package over this build, where its CUDA tests run: DLPack in from torch CUDA tensors,
# io binding to device memory, every model with provider cuda
case "$build" in /*) abs_build="$build" ;; *) abs_build="$root/$build" ;; esac
if [ -f "$abs_build/python/kiln/__init__.py" ] || ls "$abs_build"/python/kiln/_kiln*.so >/dev/null 2>&1; then
  part "Python package (pytest) on the CUDA build" "$logs/pytest.log" env PYTHONPATH="$abs_build/python" \
    KILN_BUILD_DIR="$abs_build" python3 -m pytest -q -p no:cacheprovider tests/python
else
  echo "=== Python package: not built in $build (Python.h missing?)"; record "Python package: not built" "0 passed, 0 failed, 1 skipped"
fi

if [ -n "${KILN_GPU_SANITIZE:-}" ] && command -v compute-sanitizer >/dev/null && [ "$zoo_count" -gt 0 ]; then
  echo "=== compute-sanitizer memcheck over the zoo (provider cuda, level 3)"
  timeout "${KILN_GPU_SANITIZE_TIMEOUT:-900}" compute-sanitizer --tool memcheck --target-processes all --error-exitcode 3 \
    "$build/kiln" test --no-isolate --provider cuda "$zoo" >"$logs/memcheck.log" 2>&1
  rc=$?
  grep -E 'ERROR SUMMARY|Invalid|passed,' "$logs/memcheck.log" | tail -5
  if [ $rc -eq 0 ]; then record "memcheck" "1 passed, 0 failed, 0 skipped"; else record "memcheck" "0 passed, 1 failed, 0 skipped"; fi
fi

if [ "$parallel" -gt 1 ]; then
  wait
  for f in "$logs"/part_*.out; do [ -f "$f" ] && cat "$f"; done
fi
while IFS=$'\t' read -r _ name line; do add_line "$name" "$line"; done < <(sort -t$'\t' -k1,1n -s "$results")

echo "=== summary"
printf '  %s\n' "${summary[@]}"
[ -f "$logs/node_fraction.txt" ] && cat "$logs/node_fraction.txt"
echo "$total_pass passed, $total_fail failed, $total_skip skipped"
[ "$total_fail" -eq 0 ]
