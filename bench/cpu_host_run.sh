#!/usr/bin/env bash
# The CPU tables of issue 22 on a many-core host without internet (the GPU machine's host: 16
# cores, torch + torchvision + transformers + onnx + onnxruntime installed), in one command that
# finishes within 8 minutes:
#
#   bash bench/cpu_host_run.sh WHEEL_DIR [OUT_DIR]
#
# WHEEL_DIR holds OpenVINO's wheels for the host's Python, downloaded on a machine with internet:
#
#   pip download openvino==2026.4.1 openvino-telemetry --no-deps --only-binary=:all: \
#       --python-version 3.12 --platform manylinux_2_28_x86_64 -d WHEEL_DIR
#
# (--python-version: the host's, which this script prints when the wheel does not fit; the two
# wheels are about 60 MB). Without a usable wheel the tables are made with ONNX Runtime alone.
# On the device machine: download into an ignored folder of the repository (build-ovwheels/
# matches /build*/) and carry it: run(command="bash bench/cpu_host_run.sh build-ovwheels",
# carry=["build-ovwheels"]) (carry allows 64 MiB: the two wheels fit).
#
# What it does, each part under a time limit so the whole stays under 8 minutes:
#   1. builds kiln for this CPU (Release, CPU only, -march=native) in build-cpuhost/  (~1-2 min)
#   2. installs OpenVINO from WHEEL_DIR into WORK/ovsite (no network, no other packages)
#   3. exports ResNet-50 and BERT-base (s128, b1) with torch into WORK/models          (~1 min)
#   4. bench/cpu_models.py at 1, 4 and 16 threads: kiln, ORT, OpenVINO f32 (and OpenVINO's default
#      precision for reference), alternating rounds -> OUT_DIR/cpu-models-host.md           (~2 min)
#   5. with the time left, the operator sweep at 1 and 16 threads -> OUT_DIR/op-sweep-host.md
# Tables and logs go to OUT_DIR (default $OUT when set, else /tmp/kiln-cpu-host); models and the
# OpenVINO install to WORK (KILN_HOST_WORK, default /tmp/kiln-cpu-host-work); the build to
# build-cpuhost/. Environment: PYTHON (default python3), KILN_HOST_BUDGET_S (default 470),
# KILN_BUILD (a kiln build folder with libkiln.so to use instead of building one),
# KILN_HOST_SWEEP_ONLY (a regular expression: the sweep times only those classes, at 3 rounds,
# e.g. to re-time the rows a change was for in the same call as the models).
set -u
WHEELS=${1:?usage: bash bench/cpu_host_run.sh WHEEL_DIR [OUT_DIR]}
OUT_DIR=${2:-${OUT:-/tmp/kiln-cpu-host}}
# models (500 MB) and the OpenVINO install stay out of OUT_DIR, which gets only tables and logs
WORK=${KILN_HOST_WORK:-/tmp/kiln-cpu-host-work}
PY=${PYTHON:-python3}
BUDGET=${KILN_HOST_BUDGET_S:-470}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
START=$(date +%s)
mkdir -p "$OUT_DIR" "$WORK/models"
LOG="$OUT_DIR/cpu_host_run.log"
exec > >(tee -a "$LOG") 2>&1

left() { echo $((BUDGET - ($(date +%s) - START))); }
step() { echo "== $(date -u +%H:%M:%S) [$(($(date +%s) - START)) s] $*"; }

step "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
grep -o -w -E 'avx512f|avx512_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
"$PY" - <<'EOF'
import sys, importlib
print("python", sys.version.split()[0])
for m in ("numpy", "onnx", "onnxruntime", "torch", "torchvision", "transformers"):
    try:
        print(f"  {m} {importlib.import_module(m).__version__}")
    except Exception as e:
        print(f"  {m}: missing ({type(e).__name__})")
EOF

# 1. kiln, CPU only (KILN_BUILD=DIR: use that build instead)
BUILD=${KILN_BUILD:-$ROOT/build-cpuhost}
if [ -z "${KILN_BUILD:-}" ]; then
  step "building kiln (CPU only) in build-cpuhost"
  timeout 240 cmake -S "$ROOT" -B "$BUILD" -DKILN_CUDA=OFF -DCMAKE_BUILD_TYPE=Release > "$OUT_DIR/build.log" 2>&1 &&
    timeout 200 cmake --build "$BUILD" -j"$(nproc)" --target kiln >> "$OUT_DIR/build.log" 2>&1
fi
if [ ! -f "$BUILD/libkiln.so" ]; then
  echo "kiln did not build: see $OUT_DIR/build.log"; tail -20 "$OUT_DIR/build.log"; exit 1
fi

# 2. OpenVINO from the wheel folder, into a folder of its own on PYTHONPATH
step "installing OpenVINO from $WHEELS"
OVSITE="$WORK/ovsite"
if "$PY" -m pip install --no-index --no-deps --find-links "$WHEELS" --target "$OVSITE" --upgrade \
     openvino openvino-telemetry > "$OUT_DIR/ov-install.log" 2>&1; then
  export PYTHONPATH="$OVSITE${PYTHONPATH:+:$PYTHONPATH}"
else
  echo "OpenVINO not installed (see $OUT_DIR/ov-install.log); the wheel must match: $("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")') manylinux x86_64"
fi
"$PY" -c "import openvino; print('openvino', openvino.__version__)" 2>/dev/null || echo "OpenVINO: not usable, ORT is the only peer"

# 3-4. whole models
ONLY=resnet50
"$PY" -c "import transformers" 2>/dev/null && ONLY=resnet50,bert_base
step "whole models ($ONLY) at 1, 4, 16 threads ($(left) s left)"
timeout $(( $(left) - 150 > 120 ? $(left) - 150 : 120 )) \
  "$PY" "$ROOT/bench/cpu_models.py" --build "$BUILD" --work "$WORK/models" --threads 1,4,16 --rounds 3 \
    --seconds 0.5 --only "$ONLY" --ov-default --out "$OUT_DIR/cpu-models-host.md"
[ -f "$OUT_DIR/cpu-models-host.md" ] && cat "$OUT_DIR/cpu-models-host.md"

# 5. the operator sweep with what is left (it writes its table only at the end: give it all)
T=$(( $(left) - 10 ))
if [ "$T" -gt 60 ]; then
  step "operator sweep at 1 and $(nproc) threads (${T} s at most)"
  if [ -n "${KILN_HOST_SWEEP_ONLY:-}" ]; then
    set -- --only "$KILN_HOST_SWEEP_ONLY" --rounds 3
  else
    set -- --rounds 2
  fi
  timeout "$T" "$PY" "$ROOT/bench/op_sweep.py" --build "$BUILD" --threads "1,$(nproc)" "$@" \
    --target-ms 10 --out "$OUT_DIR/op-sweep-host.md" | tail -3
  [ -f "$OUT_DIR/op-sweep-host.md" ] && sed -n '1,40p' "$OUT_DIR/op-sweep-host.md"
else
  step "no time left for the operator sweep"
fi
step "done: $OUT_DIR (cpu-models-host.md, op-sweep-host.md, cpu_host_run.log)"
