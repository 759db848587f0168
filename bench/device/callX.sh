#!/usr/bin/env bash
# the last call: SE GPU tests with the new splits, the CPU unit tests of the K-split GEMM on the AVX-512 host,
# the GPU unit tests, then helper-90's many-thread rows new vs old plans at 1/16 threads
BUILD_TARGETS="kiln_cli kiln kiln_unit_tests" source .devrun/common.sh
grep -o -w -E 'avx512f|avx512_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ' >> $R/summary.txt; echo >> $R/summary.txt
export KILN_SOURCE_DIR=$PWD KILN_ZOO=/tmp/zoo
timeout 60 build-gpu/kiln_unit_tests squeeze_excite gemm_split conv1x1 cpu_conv > $R/unit_a.log 2>&1
log "unit (SE GPU, gemm_split/conv CPU): $(tail -1 $R/unit_a.log)"; grep -E "^FAIL|fail" $R/unit_a.log | head -5 >> $R/summary.txt
l=$(left); timeout $(( l > 150 ? 90 : l / 2 )) build-gpu/kiln_unit_tests cuda -squeeze_excite > $R/unit_cuda.log 2>&1
log "unit cuda: rc=$? $(tail -1 $R/unit_cuda.log)"; grep -E "^FAIL" $R/unit_cuda.log | head -5 >> $R/summary.txt
Q='Conv 3x3 512->512 4x4|Conv 3x3 256->256 4x4|1x1 2048->512 7x7|Einsum bhq'
l=$(left)
if [ $l -gt 50 ]; then
  timeout $(( l / 2 - 5 )) python3 bench/op_sweep.py --build build-gpu --threads 1,16 --rounds 3 --target-ms 10 --no-openvino --only "$Q" --out $R/mt-after.md > $R/mt.log 2>&1
  l=$(left); KILN_GEMM_SWAP_KSPLIT=0 KILN_GEMM_BATCH_SPREAD=0 timeout $(( l - 5 )) python3 bench/op_sweep.py --build build-gpu --threads 1,16 --rounds 3 --target-ms 10 --no-openvino --only "$Q" --out $R/mt-before.md >> $R/mt.log 2>&1
  for f in after before; do echo "== $f" >> $R/summary.txt; grep -E "^\|" $R/mt-$f.md >> $R/summary.txt 2>/dev/null; done
fi
cd $R && tar -czf logs.tgz *.log; rm -f *.log
log done
