#!/usr/bin/env bash
# ASan + UBSan build on the device's AVX-512 host: ResNet-50 (torchvision export) at THREADS and the unit tests matching UNIT
SRC=/tmp/srcs BUILD_TYPE=RelWithDebInfo CMAKE_EXTRA=-DKILN_SANITIZE=ON CPU_TARGETS="kiln_cli kiln kiln_unit_tests"; source .devrun/cpu_common.sh
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
python3 - <<'PY' > $R/export.log 2>&1
import torch, torchvision
m = torchvision.models.resnet50().eval()
torch.onnx.export(m, (torch.randn(1, 3, 224, 224),), "/tmp/rn50.onnx", input_names=["x"], opset_version=17, dynamo=False)
PY
log "exported rc=$?"
for t in ${THREADS:-16 1}; do
  timeout 120 b/kiln bench /tmp/rn50.onnx --threads $t --iterations 3 --warmup 1 > $R/rn$t.log 2>&1; log "resnet t$t rc=$?"
  grep -A30 "ERROR: AddressSanitizer\|runtime error" $R/rn$t.log | head -40 >> $R/summary.txt
done
KILN_SOURCE_DIR=$PWD timeout ${UNIT_S:-150} b/kiln_unit_tests ${UNIT:-conv} > $R/unit.log 2>&1; log "unit rc=$?: $(tail -1 $R/unit.log)"
grep -B2 -A30 "ERROR: AddressSanitizer\|^FAIL" $R/unit.log | head -60 >> $R/summary.txt
