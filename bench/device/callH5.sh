#!/usr/bin/env bash
# Issue 22's closing tables on the device's 16-core host, one call (DEADLINE seconds, default 580): ResNet-50,
# BERT-base and the zoo at 1/4/16 threads beside ONNX Runtime and OpenVINO f32 (OpenVINO's default precision too),
# cpu:precision=bf16 beside OpenVINO bf16 at 1 and 16 threads, then the sweep's classes ONLY (a regex; default the
# classes that were behind on this host) at 1 and 16 threads with the time left. Carry .devrun and build-ovslim.
# ZOO=0 leaves the zoo out; RESERVE (default 200) is what the models leave to bf16 and the sweep.
SRC=/tmp/srccpu BUILD=build-cpuhost; source .devrun/cpu_common.sh
DEADLINE=${DEADLINE:-580}
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
python3 -m pip install --no-index --no-deps --target /tmp/ovsite $REPO/build-ovslim/*.whl > $R/ov.log 2>&1 && export PYTHONPATH=/tmp/ovsite
log "openvino: $(python3 -c 'import openvino; print(openvino.__version__)' 2>&1 | tail -1)"
zoo=()
if [ "${ZOO:-1}" = 1 ]; then
  python3 $REPO/.devrun/make_zoo.py /tmp/zoo > $R/zoo.log 2>&1; log "zoo made"
  for d in /tmp/zoo/*/; do [ -f $d/model.onnx ] && zoo+=(--model "$(basename $d)=$d/model.onnx"); done
fi
# the models get all but RESERVE seconds (bf16 and the sweep share those)
timeout $(( $(left) - ${RESERVE:-200} )) python3 bench/cpu_models.py --build $BUILD --work /tmp/models --threads 1,4,16 --rounds 3 \
  --seconds 0.4 --only resnet50,bert_base "${zoo[@]}" --ov-default --out $R/cpu-models-host.md > $R/models.log 2>&1
log "models rc=$?"; grep -E "^\|" $R/cpu-models-host.md >> $R/summary.txt 2>/dev/null
[ $(left) -gt 60 ] && timeout $(( $(left) - 90 > 40 ? $(left) - 90 : 40 )) python3 bench/cpu_bf16_models.py --build $BUILD --work /tmp/bf16m \
  --threads 1,16 --rounds 2 --seconds 0.3 --only resnet50,bert_base --out $R/cpu-bf16-host.md > $R/bf16.log 2>&1
log "bf16 rc=$?"; grep -E "^\|" $R/cpu-bf16-host.md >> $R/summary.txt 2>/dev/null
ONLY=${ONLY:-'^(Conv 3x3 (512->512|256->256) 4x4|QLinearConv|Softmax|Transpose 1x64x56x56|Conv 1d|Gemm 32x2048|TopK|Pad 1x1x44100|MatMul 12x128)'}
l=$(( $(left) - 10 )); if [ $l -gt 40 ]; then
  timeout $l python3 bench/op_sweep.py --build $BUILD --threads 1,16 --only "$ONLY" --rounds 2 --target-ms 10 \
    --out $R/op-sweep-host.md > $R/sweep.log 2>&1
  log "sweep rc=$?"; grep -E "^\|" $R/op-sweep-host.md | head -40 >> $R/summary.txt 2>/dev/null
fi
cd $R && tar -czf logs.tgz *.log 2>/dev/null; rm -f *.log; log done
