#!/usr/bin/env bash
# CPU tables of issue 22 on the device's 16-core host, from HEAD: whole models 1/4/16 threads, then the op sweep
# (ONLY: a regex of sweep classes to re-time instead of the whole sweep)
set -u
REPO=$PWD; mkdir -p $OUT/r
SRC=/tmp/src; rm -rf $SRC; mkdir -p $SRC; tar -xf .devrun/head.tar -C $SRC; cd $SRC
echo "head $(cat $REPO/.devrun/head.rev)" > $OUT/r/summary.txt
KILN_HOST_SWEEP_ONLY="${ONLY:-}" KILN_HOST_BUDGET_S=${BUDGET:-540} bash bench/cpu_host_run.sh $REPO/build-ovslim $OUT/r > /dev/null 2>&1
grep -E "^\|" $OUT/r/cpu-models-host.md >> $OUT/r/summary.txt 2>/dev/null
grep -E "^\|" $OUT/r/op-sweep-host.md 2>/dev/null | head -30 >> $OUT/r/summary.txt
tail -5 $OUT/r/cpu_host_run.log >> $OUT/r/summary.txt
