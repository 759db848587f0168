#!/usr/bin/env bash
# fp32 ViT-B/16 b64 with the fp32 flash kernel (default at this grid) beside PyTorch, then kiln bench alternating
# KILN_CUDA_FLASH=1/0, then the kiln.Attention CUDA unit tests. Pair with callG.sh on the same warm machine.
NOZOO=1 BUILD_TARGETS="kiln_cli kiln kiln_unit_tests" source .devrun/common.sh
m=vit_b16; b=64
timeout $(( $(left) - 60 )) python3 bench/gpu_peers.py --kiln build-gpu/kiln --work /tmp/peers --only $m --batches $b \
  --precisions fp32 --compile --format channels_last --rounds 2 --seconds 0.3 --out $R/peers-$m-fp32.md > $R/peers-$m.log 2>&1
log "$m rc=$?"; grep -E "^\| $m" $R/peers-$m-fp32.md >> $R/summary.txt 2>/dev/null
for f in 1 0 1 0; do
  l=$(left); [ $l -lt 25 ] && continue
  KILN_CUDA_FLASH=$f timeout 20 build-gpu/kiln bench /tmp/peers/$m.onnx --provider cuda --dim batch=$b --io device --duration 1 > $R/b.log 2>&1
  log "$m b$b KILN_CUDA_FLASH=$f: $(grep p50 $R/b.log)"
done
KILN_SOURCE_DIR=$SRC timeout 60 build-gpu/kiln_unit_tests cuda_kiln_attention > $R/unit_attn.log 2>&1
log "unit attention rc=$?: $(tail -1 $R/unit_attn.log)"
cd $R && tar -czf logs.tgz *.log 2>/dev/null; rm -f *.log; log done
