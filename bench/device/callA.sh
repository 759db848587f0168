#!/usr/bin/env bash
# H200: the peers table (rows + zoo) at H200_PRECS (fp16); otherwise: $ELSE (a script in .devrun)
G=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
mkdir -p $OUT/r; echo "gpu: $G" > $OUT/r/which.txt
case "$G" in
  *H200*) DEADLINE=585 PRECS=${H200_PRECS:-fp16} ZOOPRECS=${H200_PRECS:-fp16} bash .devrun/callR1.sh ;;
  *) bash .devrun/${ELSE:-callV.sh} ;;
esac
