#!/usr/bin/env bash
# kiln's worker pinning (KILN_POOL_PIN=1) against none on the device's 16-core host: ResNet-50 (torchvision export) and
# BERT-base, one `kiln bench` process a round and variant, alternating, at PIN_THREADS (4,16); each process's p50.
# Expects the build of cpu_common.sh (or sources it) and /tmp/rn50.onnx from callB.sh when run after it.
if [ ! -x "${SRC:-/tmp/srccpu}/${BUILD:-b}/kiln" ]; then source .devrun/cpu_common.sh; else R=$OUT/r; cd ${SRC:-/tmp/srccpu}; fi
log() { echo "[pin] $*" | tee -a $R/summary.txt; }
[ -f /tmp/rn50.onnx ] || python3 -c "
import torch, torchvision
m = torchvision.models.resnet50().eval()
torch.onnx.export(m, (torch.randn(1, 3, 224, 224),), '/tmp/rn50.onnx', input_names=['x'], opset_version=17, dynamo=False)" > $R/export-rn.log 2>&1
for t in ${PIN_THREADS:-4 16}; do
  for m in /tmp/rn50.onnx; do
    declare -A p50=()
    for k in $(seq ${PIN_ROUNDS:-6}); do
      for v in none pin; do
        e=$([ $v = pin ] && echo KILN_POOL_PIN=1 || echo KILN_POOL_PIN=0)
        x=$(env $e timeout 30 ${BUILD:-b}/kiln bench $m --threads $t --duration 1.5 --warmup 20 2>&1 | grep -o 'p50 *[0-9.]*' | head -1 | awk '{print $2}')
        p50[$v]="${p50[$v]:-} $x"
      done
    done
    log "$(basename $m) t$t none:${p50[none]} | pin:${p50[pin]}"
    unset p50
  done
done
