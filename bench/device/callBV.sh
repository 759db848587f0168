#!/usr/bin/env bash
# callB (heap check at 16 threads), then on the same build: qgemm8 VNNI panels, the CPU unit tests, node tests; callPin
REPO=$PWD
bash .devrun/callB.sh
R=$OUT/r; cd /tmp/srcb || exit 1
log() { echo "[v] $*" | tee -a $R/summary.txt; }
KILN_SOURCE_DIR=$PWD KILN_QGEMM8_VNNI=1 timeout 60 b/kiln_unit_tests qgemm > $R/vnni.log 2>&1; log "qgemm VNNI=1 rc=$?: $(tail -1 $R/vnni.log)"
grep -B4 '^FAIL' $R/vnni.log | tail -30 >> $R/summary.txt
KILN_SOURCE_DIR=$PWD timeout 120 b/kiln_unit_tests cpu_ qconv qgemm sgemm conv threadpool > $R/unit-cpu.log 2>&1; log "unit cpu rc=$?: $(tail -1 $R/unit-cpu.log)"
grep -B4 '^FAIL' $R/unit-cpu.log | tail -40 >> $R/summary.txt
python3 tests/conformance/write_node_tests.py /tmp/nt > /dev/null 2>&1
timeout 60 b/kiln test --repeat 2 --expected-failures tests/conformance/expected_failures.txt /tmp/nt > $R/node.log 2>&1; log "node rc=$?: $(tail -1 $R/node.log)"
grep '^FAIL' $R/node.log | cut -c1-300 | head >> $R/summary.txt
cd $REPO && SRC=/tmp/srcb BUILD=b bash .devrun/callPin.sh
gzip -f $R/*.log 2>/dev/null
