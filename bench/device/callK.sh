#!/usr/bin/env bash
# kiln's GEMM switches on ResNet-50 on the device's 16-core host, per output shape (bench/cpu_knobs.py), at KTHREADS
SRC=/tmp/srck; source .devrun/cpu_common.sh
timeout 120 python3 bench/cpu_models.py --build b --work /tmp/cm --threads 16 --rounds 1 --seconds 0.2 --only resnet50 --out $R/rn.md > $R/rn.log 2>&1
log "exported: $(ls /tmp/cm)"
V=${VARIANTS:-"--variant rf0=KILN_GEMM_ROWS_FIRST=0 --variant pk0=KILN_GEMM_PACKED_B=0 --variant sb0=KILN_GEMM_SHARED_B=0 --variant rfs0=KILN_GEMM_RF_SHARED=0 \
 --variant ain0=KILN_GEMM_A_IN_PLACE=0 --variant ain1=KILN_GEMM_A_IN_PLACE=1 --variant swap0=KILN_GEMM_SWAP=0 --variant swr0=KILN_GEMM_SWAP_ROWS=0 \
 --variant ks0=KILN_GEMM_SWAP_KSPLIT=0 --variant bs0=KILN_GEMM_BATCH_SPREAD=0 ${EXTRA_V:-}"}
for t in ${KTHREADS:-16 4}; do
  timeout ${KNOB_S:-120} python3 bench/cpu_knobs.py /tmp/cm/resnet50.onnx b/kiln --threads $t --rounds ${KROUNDS:-3} --duration 1 $V > $R/knobs$t.md 2> $R/knobs$t.err
  log "knobs $t rc=$?"; cat $R/knobs$t.md >> $R/summary.txt
done
