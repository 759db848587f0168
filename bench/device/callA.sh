#!/usr/bin/env bash
# H200: the fp16 peers table (rows + zoo); otherwise: $ELSE (a script in .devrun)
G=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
mkdir -p $OUT/r; echo "gpu: $G" > $OUT/r/which.txt
case "$G" in
  *H200*) DEADLINE=585 PRECS=fp16 ZOOPRECS=fp16 bash .devrun/callR1.sh ;;
  *) bash .devrun/${ELSE:-callV.sh} ;;
esac
