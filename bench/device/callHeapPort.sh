#!/usr/bin/env bash
# No build on the device: a carried portable kiln (KILN_NATIVE=OFF, KILN_IMAGE_CODECS=OFF, CPU only, copied to
# .devrun/kiln-port) runs ResNet-50 (torchvision export) at 16 threads under glibc's heap checks, at the CPU level the
# host's features choose (AVX-512 there), then at KILN_CPU_ISA=avx2 for comparison. For a call with little device time.
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/summary.txt; }
K=.devrun/kiln-port; chmod +x $K
log "$($K info 2>&1 | grep -m1 'kernels:' | tr '\n' ' ')"
python3 -c "
import torch, torchvision
m = torchvision.models.resnet50().eval()
torch.onnx.export(m, (torch.randn(1, 3, 224, 224),), '/tmp/rn50.onnx', input_names=['x'], opset_version=17, dynamo=False)" > $R/export.log 2>&1
log "exported rc=$?"
for isa in auto auto auto avx2; do
  env MALLOC_CHECK_=3 MALLOC_PERTURB_=165 $([ $isa != auto ] && echo KILN_CPU_ISA=$isa) timeout 25 $K bench /tmp/rn50.onnx --threads ${THREADS:-16} --iterations 40 --warmup 2 > $R/b-$isa.log 2>&1
  log "$isa rc=$? $(grep -m1 -E 'p50|corrupt|free\(\)|malloc' $R/b-$isa.log)"
done
