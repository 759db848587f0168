#!/usr/bin/env bash
# kiln bench: its results (every field of --json present and consistent: run counts, ordered
# percentiles, throughput = items / time), its streams, and its refusals. Timing values are never
# asserted, only their relations. Ends with N passed, N failed, N skipped.
#
#   bash tests/cli/test_bench.sh BUILD/kiln
set -uo pipefail
kiln="${1:?usage: test_bench.sh PATH/TO/kiln}"
py="${KILN_PYTHON:-python3}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export KILN_CACHE_DIR="$work/cache"
pass=0 fail=0 skip=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }

"$py" - "$work/m.onnx" <<'PY' || { echo "onnx missing: every case skipped"; echo "0 passed, 0 failed, 9 skipped"; exit 0; }
import sys, onnx
from onnx import helper, TensorProto
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])
ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 3])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])
z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 3, 2])
table = helper.make_tensor("table", TensorProto.FLOAT, [2, 2], [1.0, 2.0, 3.0, 4.0])
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Gather", ["table", "ids"], ["z"])],
                      "g", [x, ids], [y, z], [table])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), sys.argv[1])
PY

# a model whose input dimension is declared -1 (unknown, no name): --dim cannot reach it
"$py" - "$work/neg.onnx" <<'PY'
import sys, onnx
from onnx import helper, TensorProto
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])
m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                      opset_imports=[helper.make_opsetid("", 17)])
m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -1
onnx.save(m, sys.argv[1])
PY

# check JSON RUNS ITEMS: the fields and their relations
check() {
  "$py" - "$@" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); runs, items = int(sys.argv[2]), int(sys.argv[3])
l = j["latency_ms"]
assert j["runs"] == runs, f"runs {j['runs']} != {runs}"
assert j["items_per_run"] == items, f"items_per_run {j['items_per_run']}"
assert 0 < l["min"] <= l["p50"] <= l["p90"] <= l["p95"] <= l["p99"] <= l["max"], l
assert l["min"] <= l["mean"] <= l["max"], l
assert j["session_create_ms"] > 0 and j["first_run_ms"] > 0
want = runs * items / j["duration_s"]
assert abs(j["throughput_per_s"] - want) <= 1e-3 * want + 1e-6, (j["throughput_per_s"], want)
g = j["cuda_graphs"]
assert g["recorded"] >= 0 and g["replays"] >= 0 and (g["enabled"] or g["recorded"] == g["replays"] == 0), g
PY
}

# graphs JSON RUNS: the timed runs replayed a recorded CUDA graph
graphs() {
  "$py" - "$@" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))["cuda_graphs"]
assert g["enabled"] and g["recorded"] == 1 and g["replays"] >= int(sys.argv[2]), g
PY
}

if "$kiln" bench "$work/m.onnx" --dim batch=4 --iterations 25 --warmup 2 --json "$work/a.json" >"$work/out" 2>&1 &&
   grep -q "latency ms *p50" "$work/out" && check "$work/a.json" 25 4; then ok; else bad "one stream: $(tail -3 "$work/out")"; fi
if "$kiln" bench "$work/m.onnx" --dim batch=2 --iterations 7 --warmup 1 --streams 3 --json "$work/b.json" >"$work/out" 2>&1 &&
   grep -q "3 streams on one session" "$work/out" && check "$work/b.json" 21 2; then ok
else bad "three streams on one session: $(tail -3 "$work/out")"; fi
if "$kiln" bench "$work/m.onnx" --dim batch=2 --iterations 6 --warmup 1 --streams 2 --session-per-stream \
     --json "$work/e.json" >"$work/out" 2>&1 && grep -q "a session each" "$work/out" && check "$work/e.json" 12 2; then ok
else bad "a session per stream: $(tail -3 "$work/out")"; fi
# --disable-pass: the same runs without a pass (A/B of a pass in one process); an unknown name is named back
if "$kiln" bench "$work/m.onnx" --dim batch=2 --iterations 5 --warmup 1 --disable-pass fuse_elementwise \
     --disable-pass cse --json "$work/d.json" >"$work/out" 2>&1 && check "$work/d.json" 5 2; then ok
else bad "--disable-pass: $(tail -3 "$work/out")"; fi
out=$("$kiln" bench "$work/m.onnx" --dim batch=2 --iterations 5 --disable-pass no_such_pass 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -q "unknown optimisation pass 'no_such_pass'" <<<"$out"; then ok
else bad "--disable-pass of an unknown pass: $rc $out"; fi
out=$("$kiln" bench "$work/m.onnx" --iterations 5 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -q "give its size with --dim batch=VALUE" <<<"$out"; then ok; else bad "symbolic dim not given: $rc $out"; fi
out=$("$kiln" bench "$work/neg.onnx" --iterations 5 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -q "dimension 0 has no size and no name, so --dim cannot set it" <<<"$out"; then ok
else bad "an unnamed unknown dim: $rc $out"; fi
out=$("$kiln" run "$work/neg.onnx" 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -q "input 'x': dimension 0 has no size and no name.*--input x=FILE" <<<"$out"; then ok
else bad "kiln run, an unnamed unknown dim: $rc $out"; fi
out=$("$kiln" bench "$work/m.onnx" --dim batch=1 --iterations 5 --duration 1 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q "not both" <<<"$out"; then ok; else bad "iterations and duration: $rc $out"; fi
out=$("$kiln" bench "$work/m.onnx" --dim batch=1 --io device 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q "needs a provider list that starts with cuda" <<<"$out"; then ok; else bad "--io device on the CPU: $rc $out"; fi
# on a GPU: device buffers bound once, and host I/O split into its three parts
if "$kiln" info 2>/dev/null | grep -q '^provider cuda: available'; then
  if "$kiln" bench "$work/m.onnx" --provider cuda --dim batch=8 --iterations 10 --io host --json "$work/c.json" >"$work/out" 2>&1 &&
     grep -q "host I/O split" "$work/out" && check "$work/c.json" 10 8 &&
     "$kiln" bench "$work/m.onnx" --provider cuda --dim batch=8 --iterations 10 --json "$work/d.json" >"$work/out" 2>&1 &&
     check "$work/d.json" 10 8 && graphs "$work/d.json" 10 && grep -q "cuda graphs *on" "$work/out"; then ok
  else bad "cuda: $(tail -3 "$work/out")"; fi
else
  skip=$((skip + 1))
fi
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
