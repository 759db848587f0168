#!/usr/bin/env bash
# One call for #19's close: the whole GPU suite at HEAD, then (time left) ViT-B/16 b64 fp32 beside PyTorch
# and kiln bench alternating KILN_CUDA_FLASH=1/0. On an H200 (12-07) build + zoo took 140 s and the suite more than
# 400 (its GPU unit tests part was cut at 72 of 104): the suite gets all the time it needs; ViT runs in a second call.
source .devrun/common.sh
KILN_BUILD=build-gpu KILN_ZOO=/tmp/zoo KILN_GPU_LOGS=/tmp/gpulogs KILN_GPU_PARALLEL=4 KILN_GPU_SHARDS=8 KILN_EQ_JOBS=8 \
  timeout $(( ${SUITE_S:-$(( $(left) - 15 ))} )) bash scripts/gpu_test.sh > $R/gpu_suite.log 2>&1
log "suite rc=$?: $(tail -1 $R/gpu_suite.log)"
grep -E "passed|failed|FAIL" $R/gpu_suite.log | tail -40 >> $R/summary.txt
(cd /tmp/gpulogs 2>/dev/null && tar -czf $R/gpulogs.tgz . ) ; gzip -f $R/gpu_suite.log
m=vit_b16; b=64
l=$(left); if [ $l -gt 60 ]; then
  timeout $(( l - 25 )) python3 bench/gpu_peers.py --kiln build-gpu/kiln --work /tmp/peers --only $m --batches $b \
    --precisions fp32 --compile --format channels_last --rounds 2 --seconds 0.3 --out $R/peers-$m-fp32.md > $R/peers-$m.log 2>&1
  log "$m rc=$?"; grep -E "^\| $m" $R/peers-$m-fp32.md >> $R/summary.txt 2>/dev/null
fi
for f in 1 0 1 0; do
  l=$(left); [ $l -lt 6 ] || [ ! -f /tmp/peers/$m.onnx ] && continue
  KILN_CUDA_FLASH=$f timeout 5 build-gpu/kiln bench /tmp/peers/$m.onnx --provider cuda --dim batch=$b --io device --duration 0.5 > $R/b.log 2>&1
  log "$m b$b KILN_CUDA_FLASH=$f: $(grep p50 $R/b.log)"
done
cd $R && tar -czf logs.tgz *.log 2>/dev/null; rm -f *.log; log done
