#!/usr/bin/env bash
# kiln's main job, end to end on a fresh machine: install what the build needs, build, then load
# a real network, run it on the CPU, and check its outputs against the reference outputs.
#
#   bash scripts/demo.sh [MODEL_DIR]
#
# MODEL_DIR defaults to the shared zoo's mobilenet_v3_small (../shared/models); a clone without
# that folder uses the project's own small CNN built by tests/models/make_models.py.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/setup_deps.sh
. scripts/python_env.sh
# the CUDA backend is built where a GPU can run it (or with KILN_CUDA=ON); progress is shown
bash scripts/cmake_build.sh build -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA="${KILN_CUDA:-AUTO}" || exit 1

model_dir="${1:-$root/../shared/models/mobilenet_v3_small}"
if [ ! -f "$model_dir/model.onnx" ]; then
  echo "($model_dir not found: building the project's own models)"
  [ -f build/models/.complete ] || { "$KILN_PYTHON" tests/models/make_models.py build/models && touch build/models/.complete; }
  model_dir=build/models/tiny_cnn
fi

echo "== kiln inspect $model_dir/model.onnx (summary)"
build/kiln inspect "$model_dir/model.onnx" | sed -n '1,/^values/p' | grep -v '^values'
echo "== kiln run on the first reference input, 20 repetitions"
build/kiln run "$model_dir/model.onnx" --input "$(build/kiln inspect "$model_dir/model.onnx" | \
  awk '/^inputs:/{getline; sub(":","",$1); print $1; exit}')=$model_dir/test_data_set_0/input_0.pb" \
  --repeat 20 --output-dir build/demo_outputs
echo "== kiln test: outputs against the reference outputs"
build/kiln test --threads 0 "$model_dir"
