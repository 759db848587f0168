#!/usr/bin/env bash
# Issue 22's CPU tables on the device's 16-core host from HEAD: ResNet-50 and BERT-base at 1/4/16 threads beside
# ONNX Runtime and OpenVINO f32, the sweep (ONLY: a regex of classes; unset: the whole sweep with what time is left
# after the bf16 models), then cpu:precision=bf16 beside OpenVINO bf16 at BF16_THREADS (1,16). Carry build-ovslim.
SRC=/tmp/src BUILD=build-cpuhost; source .devrun/cpu_common.sh
python3 -m pip install --no-index --no-deps --target /tmp/ovsite $REPO/build-ovslim/*.whl > $R/ov.log 2>&1 && export PYTHONPATH=/tmp/ovsite
# the bf16 models first (they take a fixed time), then the f32 tables with the rest of the budget
timeout ${BF16_S:-150} python3 bench/cpu_bf16_models.py --build build-cpuhost --work /tmp/bf16m --threads ${BF16_THREADS:-1,16} \
  --rounds 2 --seconds 0.3 --only resnet50,bert_base --out $R/cpu-bf16-host.md > $R/bf16.log 2>&1
log "bf16 rc=$?"; grep -E "^\|" $R/cpu-bf16-host.md >> $R/summary.txt 2>/dev/null
KILN_BUILD=$SRC/build-cpuhost KILN_HOST_SWEEP_ONLY="${ONLY:-}" KILN_HOST_BUDGET_S=$(( ${DEADLINE:-580} - ($(date +%s) - T0) )) \
  bash bench/cpu_host_run.sh $REPO/build-ovslim $R > /dev/null 2>&1
log "host tables done"
grep -E "^\|" $R/cpu-models-host.md >> $R/summary.txt 2>/dev/null
grep -E "^\|" $R/op-sweep-host.md 2>/dev/null | head -40 >> $R/summary.txt
