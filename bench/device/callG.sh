#!/usr/bin/env bash
# the whole GPU suite at HEAD
source .devrun/common.sh
KILN_BUILD=build-gpu KILN_ZOO=/tmp/zoo KILN_GPU_LOGS=/tmp/gpulogs KILN_GPU_PARALLEL=4 KILN_GPU_SHARDS=8 KILN_EQ_JOBS=8 \
  timeout $(( $(left) - 10 )) bash scripts/gpu_test.sh > $R/gpu_suite.log 2>&1
log "suite rc=$?: $(tail -1 $R/gpu_suite.log)"
grep -E "passed|failed|FAIL" $R/gpu_suite.log | tail -40 >> $R/summary.txt
(cd /tmp/gpulogs 2>/dev/null && tar -czf $R/gpulogs.tgz . ) ; gzip -f $R/gpu_suite.log
