#!/usr/bin/env bash
# the CPU's correctness on the device's AVX-512 host at HEAD: unit tests, node tests, opt fuzz (no CUDA build)
set -u
REPO=$PWD; R=$OUT/r; mkdir -p $R; T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/summary.txt; }
log "head $(cat .devrun/head.rev), $(nproc) cores, $(grep -o 'avx512f\|avx512_vnni\|amx_int8\|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
SRC=/tmp/srcv; rm -rf $SRC; mkdir -p $SRC; tar -xf .devrun/head.tar -C $SRC; cd $SRC
cmake -S . -B b -DCMAKE_BUILD_TYPE=Release > $R/build.log 2>&1 && cmake --build b -j16 --target kiln_cli kiln_unit_tests >> $R/build.log 2>&1 || { log "BUILD FAILED"; tail -30 $R/build.log >> $R/summary.txt; exit 1; }
log built
KILN_SOURCE_DIR=$PWD timeout ${UNIT_S:-110} b/kiln_unit_tests > $R/unit.log 2>&1; log "unit rc=$?: $(tail -1 $R/unit.log)"
grep -B4 '^FAIL' $R/unit.log | tail -40 >> $R/summary.txt
python3 tests/conformance/write_node_tests.py /tmp/nt > /dev/null 2>&1
timeout 60 b/kiln test --repeat 2 --expected-failures tests/conformance/expected_failures.txt /tmp/nt > $R/node.log 2>&1; log "node rc=$?: $(tail -1 $R/node.log)"
grep '^FAIL' $R/node.log | cut -c1-300 | head >> $R/summary.txt
timeout ${FUZZ_S:-50} bash tests/opt_fuzz/run.sh --seeds 0-${FUZZ_SEEDS:-999} b/kiln > $R/fuzz.log 2>&1; log "fuzz rc=$?: $(tail -1 $R/fuzz.log)"
grep -E '^FAIL' $R/fuzz.log | head >> $R/summary.txt
gzip -f $R/*.log
