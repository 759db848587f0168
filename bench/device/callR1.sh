#!/usr/bin/env bash
# env: DEADLINE (s), PRECS (fp16), ROWS (resnet50 bert_base vit_b16 yolov8s), ZOOPRECS (fp16; empty: no zoo)
source .devrun/common.sh
source $REPO/.devrun/rows.sh
