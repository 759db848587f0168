#!/usr/bin/env bash
# Mid-session check of CPU changes on the device's 16-core AVX-512 host: op_ab switch A/B at 1 thread (AB_ONLY, AB_VARIANTS
# as NAME=:VAR=V,...), the sweep's rows (ONLY) at THREADS, ResNet-50 per shape at 16 threads. Carry build-ovslim.
SRC=/tmp/srcm; source .devrun/cpu_common.sh
python3 -m pip install --no-index --no-deps --target /tmp/ovsite $REPO/build-ovslim/*.whl > $R/ov.log 2>&1 && export PYTHONPATH=/tmp/ovsite
if [ -n "${AB_ONLY:-}" ]; then
  VS=""; for v in ${AB_VARIANTS:-dflt=}; do n=${v%%=*}; e=${v#*=}; VS="$VS --variant $n=b${e:+$e}"; done
  timeout ${AB_S:-90} python3 bench/op_ab.py --suite ${AB_SUITE:-op_sweep} --only "$AB_ONLY" $VS --runs ${AB_RUNS:-40} > $R/ab.md 2> $R/ab.err
  log "op_ab rc=$?"; grep -E "^\|" $R/ab.md >> $R/summary.txt; tail -3 $R/ab.err >> $R/summary.txt
fi
timeout ${SWEEP_S:-150} python3 bench/op_sweep.py --build b --threads ${THREADS:-1,16} --only "$ONLY" --rounds 2 --target-ms 10 --out $R/sweep.md > $R/sweep.log 2>&1
log "sweep rc=$?"; grep -E "^\| [A-Z].*\| ok \|" $R/sweep.md | sort -t'|' -k2,3 >> $R/summary.txt
if [ "${PROFILE:-1}" = 1 ]; then
  timeout 100 python3 bench/cpu_models.py --build b --work /tmp/cm --threads 16 --rounds 2 --seconds 0.3 --only resnet50 --out $R/rn.md > $R/rn.log 2>&1
  log "resnet rc=$?"; grep -E "^\| resnet" $R/rn.md >> $R/summary.txt
  timeout 60 python3 bench/cpu_node_profile.py /tmp/cm/resnet50.onnx 16 b/kiln > $R/prof16.md 2>&1; log "profile rc=$?"; head -16 $R/prof16.md >> $R/summary.txt
fi
