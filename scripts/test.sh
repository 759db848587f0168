#!/usr/bin/env bash
# Builds kiln and runs every test: unit tests, the ONNX node tests against the expected-failures
# list, the model zoo, a sanitizer build (AddressSanitizer + UndefinedBehaviorSanitizer) and the
# loader fuzzer. Ends with one line: N passed, N failed, N skipped (the sum over all parts).
#
#   bash scripts/test.sh            everything (what CI runs)
#   KILN_TEST_QUICK=1 bash ...      skip the sanitizer builds (ASan+UBSan, TSan) and the fuzzer
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
# install what the tests need (pinned Python packages, compilers, test data); quick when all is there
bash scripts/setup_deps.sh || { echo "setup_deps.sh failed"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }
. scripts/python_env.sh
jobs=$(nproc 2>/dev/null || echo 2)
zoo="${KILN_ZOO:-$root/../shared/models}"
fuzz_seconds="${KILN_FUZZ_SECONDS:-60}"
# the tests' compiled-model cache entries stay in the build tree, not the user's ~/.cache
export KILN_CACHE_DIR="$root/build/test-cache"

total_pass=0 total_fail=0 total_skip=0
failed_parts=()

# Runs a command, echoes its output, and adds its closing "N passed, N failed, N skipped".
part() {
  local name="$1"; shift
  echo "=== $name: $*"
  local log; log=$(mktemp)
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local line; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped' "$log" | tail -1)
  rm -f "$log"
  if [ -z "$line" ]; then
    echo "=== $name: no result line (exit status $rc): counted as 1 failure"
    total_fail=$((total_fail + 1)); failed_parts+=("$name"); return
  fi
  local p f s
  read -r p _ f _ s _ <<<"$(echo "$line" | tr ',' ' ')"
  total_pass=$((total_pass + p)); total_fail=$((total_fail + f)); total_skip=$((total_skip + s))
  if [ "$f" -gt 0 ] || [ "$rc" -ne 0 ]; then
    failed_parts+=("$name")
    [ "$f" -gt 0 ] || total_fail=$((total_fail + 1))
  fi
}

build() { # build DIR [cmake args]: progress, warnings and errors shown (scripts/cmake_build.sh)
  local dir="$1"; shift
  KILN_BUILD_JOBS="$jobs" bash "$root/scripts/cmake_build.sh" "$dir" -DCMAKE_BUILD_TYPE=Release "$@"
}

echo "=== build"
# KILN_CUDA=ON (CI's setting, .ci/run) builds the CUDA backend wherever the toolkit is, so the CUDA
# code keeps compiling on a machine without a GPU; AUTO builds it where a GPU can run it
if ! build build -DKILN_CUDA="${KILN_CUDA:-AUTO}"; then echo "build failed"; echo "0 passed, 1 failed, 0 skipped"; exit 1; fi

# the project's own test networks (reference outputs from onnxruntime): also the unit tests'
# fixture where the shared zoo is absent
if [ ! -f build/models/.complete ]; then
  "$KILN_PYTHON" tests/models/make_models.py build/models && touch build/models/.complete
fi
part "unit tests" env KILN_SOURCE_DIR="$root" build/kiln_unit_tests
# the kiln command: strict option parsing, help, man page and completion, file messages
part "command line" bash tests/cli/test_cli.sh build/kiln
part "kiln bench" bash tests/cli/test_bench.sh build/kiln

node_dir=build/nodetests
if [ ! -f "$node_dir/.complete" ]; then
  rm -rf "$node_dir"
  "$KILN_PYTHON" tests/conformance/write_node_tests.py "$node_dir" 2>/dev/null && touch "$node_dir/.complete"
fi
part "ONNX node tests (cpu), each data set run twice per session" build/kiln test --repeat 2 --expected-failures tests/conformance/expected_failures.txt "$node_dir"
# the older corpus of Debian's libonnx-testdata (onnx 1.12: older opset versions), installed by setup_deps.sh
deb_dir=/usr/share/libonnx-testdata/data
if [ -d "$deb_dir" ]; then
  part "ONNX test data, Debian libonnx-testdata (cpu)" build/kiln test \
    --expected-failures tests/conformance/expected_failures_debian.txt "$deb_dir"
else
  echo "=== $deb_dir not found (apt-get install libonnx-testdata)"; total_skip=$((total_skip + 1))
fi

if [ -d "$zoo" ]; then
  part "model zoo (cpu), each data set run twice per session" build/kiln test --repeat 2 --threads 0 "$zoo"
else
  echo "=== model zoo: $zoo not found (set KILN_ZOO): skipped; the project's own models run below"
  total_skip=$((total_skip + 1))
fi
part "project models (cpu), each data set run twice per session" build/kiln test --repeat 2 --threads 0 build/models
# com.microsoft operators against onnxruntime's outputs (regenerated when the script changes)
[ build/contrib_tests/.complete -nt tests/conformance/make_contrib_tests.py ] || { rm -rf build/contrib_tests && "$KILN_PYTHON" tests/conformance/make_contrib_tests.py build/contrib_tests >/dev/null 2>&1 && touch build/contrib_tests/.complete; }
part "com.microsoft operators vs onnxruntime (cpu)" build/kiln test build/contrib_tests
part "float16 elementwise operators vs onnxruntime (every float16 value, bit for bit)" "$KILN_PYTHON" tests/conformance/f16_elementwise_vs_ort.py --build build
part "QLinearMatMul against its exact definition (per-tensor, per-row and per-column scales; 1 and 2 threads)" "$KILN_PYTHON" tests/conformance/qlinearmatmul_exact.py --build build
part "operator sweep, fast (kiln outputs vs onnxruntime; timing recorded in build/op-sweep-fast.md, not asserted)" "$KILN_PYTHON" bench/op_sweep.py --fast --build build --no-openvino
part "optimisation equivalence" bash scripts/equivalence.sh build/kiln "$node_dir" build/models $([ -d "$zoo" ] && echo "$zoo")
part "published models corpus, small set (pinned PyPI wheels; levels 0 and 3 vs onnxruntime, levels 1-3 vs 0; no network: skipped)" bash tests/corpus/run_ci.sh build/kiln
# KILN_OPT_CHECK_FRESH: where the pass manager skips a refresh of the producer/consumer tables (no
# pass changed the graph since the last one), it refreshes anyway and fails if anything differed
part "optimiser differential fuzzing (1000 random graphs of the passes' patterns, subgraph reads; levels 1-3 vs 0 vs onnxruntime)" env KILN_OPT_CHECK_FRESH=1 bash tests/opt_fuzz/run.sh build/kiln
# level 3's channels-last regions, which no provider forms by itself yet: forced, on the CPU's
# reference NHWC convolution
part "optimisation equivalence, channels-last regions (KILN_LAYOUT=nhwc)" env KILN_LAYOUT=nhwc \
  bash scripts/equivalence.sh build/kiln "$node_dir" build/models $([ -d "$zoo" ] && echo "$zoo")
part "optimiser differential fuzzing, channels-last regions (KILN_LAYOUT=nhwc)" env KILN_LAYOUT=nhwc \
  bash tests/opt_fuzz/run.sh build/kiln

# the Python package (the extension the build above made, in build/python) and the C packaging
part "Python package and C packaging (pytest)" env PYTHONPATH="$root/build/python" KILN_BUILD_DIR="$root/build" "$KILN_PYTHON" -m pytest -q -p no:cacheprovider tests/python

if [ -z "${KILN_TEST_QUICK:-}" ]; then
  echo "=== sanitizer build"
  if build build-asan -DKILN_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo; then
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    part "unit tests (asan+ubsan)" env KILN_SOURCE_DIR="$root" build-asan/kiln_unit_tests
    part "ONNX node tests (asan+ubsan), each data set run twice per session" build-asan/kiln test --repeat 2 --expected-failures tests/conformance/expected_failures.txt "$node_dir"
    part "project models (asan+ubsan)" build-asan/kiln test build/models
    if [ -d "$zoo" ]; then
      part "model zoo (asan+ubsan)" build-asan/kiln test --threads 0 "$zoo/field_conv1d_gemm" "$zoo/lstm_gru" "$zoo/bert_mini"
    fi
  else
    echo "sanitizer build failed"; total_fail=$((total_fail + 1)); failed_parts+=("sanitizer build")
  fi
  if command -v clang >/dev/null; then
    echo "=== fuzz build"
    if CC=clang build build-fuzz -DKILN_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo; then
      part "fuzzers (${fuzz_seconds}s each)" bash scripts/fuzz.sh build-fuzz "$fuzz_seconds"
    else
      echo "fuzz build failed"; total_fail=$((total_fail + 1)); failed_parts+=("fuzz build")
    fi
  else
    echo "=== fuzz: clang not installed"; total_skip=$((total_skip + 1))
  fi
fi

# ThreadSanitizer on the tests that run threads: one session from 16 threads (mixed shapes, and the
# zoo's models where it is present), bounded concurrency, cancellation from another thread and by
# deadline, the memory limit, destroy during a run, the thread pool's kernels (GEMM, convolution,
# broadcasting), the buffer pool, concurrent cache starts. A part of the default run (skipped with
# KILN_TEST_QUICK=1, or KILN_TEST_TSAN=0); only the library and kiln_unit_tests are built with
# TSan: measured on this project's 2-core machine, 86 s to build from scratch and 19 s to run when
# it was quiet (166-236 s and 40-70 s while others built); the whole script took 800 s then.
# KILN_TEST_TSAN=1 runs it under KILN_TEST_QUICK=1 too (after changing src/exec or the thread pool).
tsan_tests=(16_threads bounds_concurrent run_options memory_limit destroyed_while _threads threaded buffer_pool
  cache_starts)
if [ "${KILN_TEST_TSAN:-}" != 0 ] && { [ -z "${KILN_TEST_QUICK:-}" ] || [ -n "${KILN_TEST_TSAN:-}" ]; }; then
  echo "=== thread sanitizer build (kiln_unit_tests only)"
  tsan_start=$(date +%s)
  mkdir -p build-tsan
  if cmake -S "$root" -B build-tsan -DKILN_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
       "-DCMAKE_C_FLAGS=-fsanitize=thread -O1" -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread \
       -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread >build-tsan/configure.log 2>&1 &&
     cmake --build build-tsan -j"$jobs" --target kiln_unit_tests 2>&1 | grep -E "warning|error"; [ "${PIPESTATUS[0]}" -eq 0 ]; then
    echo "=== thread sanitizer build: $(( $(date +%s) - tsan_start )) s"
    tsan_start=$(date +%s)
    part "concurrency tests (tsan)" env TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 KILN_SOURCE_DIR="$root" \
      build-tsan/kiln_unit_tests "${tsan_tests[@]}"
    echo "=== concurrency tests (tsan): $(( $(date +%s) - tsan_start )) s"
  else
    tail -20 build-tsan/configure.log 2>/dev/null
    echo "tsan build failed"; total_fail=$((total_fail + 1)); failed_parts+=("tsan build")
  fi
fi

if [ ${#failed_parts[@]} -gt 0 ]; then echo "failed parts: ${failed_parts[*]}"; fi
echo "$total_pass passed, $total_fail failed, $total_skip skipped"
[ "$total_fail" -eq 0 ]
