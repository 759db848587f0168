#!/usr/bin/env bash
# fp32 attention in one kernel: its unit tests, then BERT b32 / ViT b64 fp32 with KILN_CUDA_FLASH=1 beside PyTorch, and =0
NOZOO=1 BUILD_TARGETS="kiln_cli kiln kiln_unit_tests" source .devrun/common.sh
KILN_SOURCE_DIR=$SRC timeout 120 build-gpu/kiln_unit_tests cuda_kiln_attention > $R/unit_attn.log 2>&1
log "unit attention rc=$?: $(tail -1 $R/unit_attn.log)"; grep -iE "fail" $R/unit_attn.log | head -8 >> $R/summary.txt
for w in bert_base:32 vit_b16:64; do
  m=${w%%:*}; b=${w##*:}; d="--dim batch=$b"; [ $m = bert_base ] && d="$d --dim seq=128"
  l=$(left); [ $l -lt 50 ] && { log "skip $m"; continue; }
  KILN_CUDA_FLASH=1 timeout $((l - 15)) python3 bench/gpu_peers.py --kiln build-gpu/kiln --work /tmp/peers --only $m --batches $b \
    --precisions fp32 --compile --format channels_last --rounds 2 --seconds 0.3 --out $R/peers-$m-fp32.md > $R/peers-$m.log 2>&1
  log "$m (KILN_CUDA_FLASH=1) rc=$?"; grep -E "^\| $m" $R/peers-$m-fp32.md >> $R/summary.txt 2>/dev/null
  for f in 1 0 1 0; do
    l=$(left); [ $l -lt 8 ] && continue
    KILN_CUDA_FLASH=$f timeout 20 build-gpu/kiln bench /tmp/peers/$m.onnx --provider cuda $d --io device --duration 1 > $R/b.log 2>&1
    log "$m b$b KILN_CUDA_FLASH=$f: $(grep p50 $R/b.log)"
  done
done
cd $R && tar -czf logs.tgz *.log 2>/dev/null; rm -f *.log; log done
