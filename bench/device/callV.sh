#!/usr/bin/env bash
# the CPU's correctness on the device's AVX-512 host at HEAD: unit tests, node tests, opt fuzz (no CUDA build)
SRC=/tmp/srcv CPU_TARGETS="kiln_cli kiln_unit_tests"; source .devrun/cpu_common.sh
KILN_SOURCE_DIR=$PWD timeout ${UNIT_S:-110} b/kiln_unit_tests > $R/unit.log 2>&1; log "unit rc=$?: $(tail -1 $R/unit.log)"
grep -B4 '^FAIL' $R/unit.log | tail -40 >> $R/summary.txt
python3 tests/conformance/write_node_tests.py /tmp/nt > /dev/null 2>&1
timeout 60 b/kiln test --repeat 2 --expected-failures tests/conformance/expected_failures.txt /tmp/nt > $R/node.log 2>&1; log "node rc=$?: $(tail -1 $R/node.log)"
grep '^FAIL' $R/node.log | cut -c1-300 | head >> $R/summary.txt
timeout ${FUZZ_S:-50} bash tests/opt_fuzz/run.sh --seeds 0-${FUZZ_SEEDS:-999} b/kiln > $R/fuzz.log 2>&1; log "fuzz rc=$?: $(tail -1 $R/fuzz.log)"
grep -E '^FAIL' $R/fuzz.log | head >> $R/summary.txt
gzip -f $R/*.log
