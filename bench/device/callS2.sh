#!/usr/bin/env bash
# SqueezeExcite: GPU unit tests, then kiln.SqueezeExcite's work split (KILN_CUDA_SE_ITEMS x KILN_CUDA_SE_TEAM)
# against the unfused block, fp16, mobilenet_v3_small / efficientnet_b0 at batch 1 and 8; then rows.sh
BUILD_TARGETS="kiln_cli kiln kiln_unit_tests" source .devrun/common.sh
KILN_SOURCE_DIR=$PWD KILN_ZOO=/tmp/zoo timeout 120 build-gpu/kiln_unit_tests squeeze_excite > $R/se_unit.log 2>&1
log "SE unit: $(tail -1 $R/se_unit.log)"
se() { # model batch label [env...] -> p50
  local m=$1 b=$2 lab=$3; shift 3
  env "$@" build-gpu/kiln bench /tmp/zoo/$m/model.onnx --provider cuda:precision=fp16:activations=half,cpu --io device \
    --warmup 50 --duration 0.5 --dim batch=$b --json /tmp/se.json ${DIS:-} > /dev/null 2>&1
  python3 -c "import json;print('%.4f'%json.load(open('/tmp/se.json'))['latency_ms']['p50'])" 2>/dev/null || echo fail
}
for round in 1 2; do
  for m in mobilenet_v3_small efficientnet_b0; do
    for b in 1 8; do
      line="$m b$b r$round:"
      line="$line unfused $(DIS='--disable-pass fuse_squeeze_excite' se $m $b u)"
      for cfg in "4 32" "1 32" "2 32" "4 8" "1 8" "4 16" "1 16"; do
        set -- $cfg; line="$line i$1t$2 $(se $m $b x KILN_CUDA_SE_ITEMS=$1 KILN_CUDA_SE_TEAM=$2)"
      done
      echo "$line" | tee -a $R/se_split.txt >> $R/summary.txt
    done
  done
  [ $(left) -lt 300 ] && break
done
log "SE split done"
source $REPO/.devrun/rows.sh
