# sourced after common.sh: kiln beside PyTorch (eager, CUDA graph, torch.compile), ROWS x PRECS, then the zoo at ZOOPRECS
export PYTHONUNBUFFERED=1
for p in ${PRECS-fp16}; do
  for w in ${ROWS:-resnet50 bert_base vit_b16 yolov8s}; do
    l=$(left); [ $l -lt 40 ] && { log "skip $w $p: ${l}s left"; continue; }
    timeout $((l - 15)) python3 bench/gpu_peers.py --kiln build-gpu/kiln --work /tmp/peers --only $w --precisions $p \
      --compile --format channels_last --rounds 2 --seconds 0.3 --out $R/peers-$w-$p.md > $R/peers-$w-$p.log 2>&1
    log "$w $p rc=$?"; grep -E "^\| $w" $R/peers-$w-$p.md >> $R/summary.txt 2>/dev/null
  done
done
for p in ${ZOOPRECS-fp16}; do
  l=$(left); [ $l -lt 40 ] && { log "skip zoo $p"; continue; }
  timeout $((l - 10)) python3 bench/gpu_peers.py --kiln build-gpu/kiln --work /tmp/peers --zoo /tmp/zoo --only zoo --precisions $p \
    --compile --format channels_last --rounds 2 --seconds 0.3 --out $R/peers-zoo-$p.md > $R/peers-zoo-$p.log 2>&1
  log "zoo $p rc=$?"; grep -E "^\| [a-z]" $R/peers-zoo-$p.md | grep -v workload >> $R/summary.txt 2>/dev/null
done
cd $R && cat peers-*.md > peers_all.md 2>/dev/null; rm -f peers-*.md; tar -czf logs.tgz *.log 2>/dev/null; rm -f *.log
log done
