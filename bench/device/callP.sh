#!/usr/bin/env bash
# Probe on the device's 16-core host: how small operators and ResNet-50 scale from 1 to 16 threads
# (op_sweep rows at 1/4/16 threads with and without worker processes; ResNet-50 per output shape at
# 16 threads beside ONNX Runtime and OpenVINO). Env: ONLY (sweep regex), THREADS (1,4,16), PROFILE_T (16)
SRC=/tmp/srcp; source .devrun/cpu_common.sh
lscpu > $R/lscpu.txt; grep -E "^(Model name|Thread|Core|Socket|NUMA node\(s\)|L2|L3)" $R/lscpu.txt >> $R/summary.txt
python3 -m pip install --no-index --no-deps --target /tmp/ovsite $REPO/build-ovslim/*.whl > $R/ov.log 2>&1 && export PYTHONPATH=/tmp/ovsite
log "openvino: $(python3 -c 'import openvino; print(openvino.__version__)' 2>&1 | tail -1)"
ONLY=${ONLY:-'^(BatchNormalization 1x64x56x56|Softmax (1|32)x1000 f32|QLinearConv 1x512x1x1|Pad 1x1x44100|TopK 1x1000 |Conv 3x3 (512->512|256->256) 4x4)'}
timeout 200 python3 bench/op_sweep.py --build b --threads ${THREADS:-1,4,16} --only "$ONLY" --rounds 2 --target-ms 10 --out $R/scale.md > $R/scale.log 2>&1
log "sweep rc=$?"; grep -E "^\| [A-Z]" $R/scale.md | grep -v "operator |" >> $R/summary.txt
timeout 60 python3 bench/op_sweep.py --build b --threads 16 --workers never --only '^(BatchNormalization 1x64x56x56|Softmax 32x1000 f32)' --rounds 2 --target-ms 10 --out $R/noworker.md > $R/noworker.log 2>&1
log "sweep in-process rc=$?"; grep -E "^\| [A-Z].*\| 16 \|" $R/noworker.md >> $R/summary.txt
timeout 150 python3 bench/cpu_models.py --build b --work /tmp/cm --threads 16 --rounds 1 --seconds 0.3 --only resnet50 --out $R/rn.md > $R/rn.log 2>&1
log "resnet export+time rc=$?"; grep -E "^\| resnet" $R/rn.md >> $R/summary.txt
for t in ${PROFILE_T:-16}; do
  timeout 120 python3 bench/cpu_node_profile.py /tmp/cm/resnet50.onnx $t b/kiln > $R/prof$t.md 2>&1
  log "profile $t rc=$?"; head -30 $R/prof$t.md >> $R/summary.txt
done
gzip -f $R/*.log
