#!/usr/bin/env bash
# Which path corrupts the heap: ResNet-50 (torchvision export) under glibc's malloc checks at THREADS, for each setting in SETTINGS
SRC=/tmp/srcb CPU_TARGETS="kiln_cli kiln kiln_unit_tests"; source .devrun/cpu_common.sh
python3 - <<'PY' > $R/export.log 2>&1
import torch, torchvision
m = torchvision.models.resnet50().eval()
torch.onnx.export(m, (torch.randn(1, 3, 224, 224),), "/tmp/rn50.onnx", input_names=["x"], opset_version=17, dynamo=False)
PY
log "exported rc=$?"
for s in ${SETTINGS:-none}; do
  for t in ${THREADS:-16}; do
    for k in 1 2 3; do
      env MALLOC_CHECK_=3 MALLOC_PERTURB_=165 $( [ $s != none ] && echo $s ) timeout 60 b/kiln bench /tmp/rn50.onnx --threads $t --iterations 40 --warmup 2 > $R/b-$s-$t-$k.log 2>&1
      rc=$?; log "$s t$t try$k rc=$rc $(grep -m1 -E 'p50|corrupt|free|malloc' $R/b-$s-$t-$k.log)"
    done
  done
done
[ -n "${UNIT:-}" ] && { KILN_SOURCE_DIR=$PWD MALLOC_CHECK_=3 timeout 120 b/kiln_unit_tests $UNIT > $R/unit.log 2>&1; log "unit rc=$?: $(tail -1 $R/unit.log)"; grep -B3 "^FAIL" $R/unit.log | head -30 >> $R/summary.txt; }
