#!/usr/bin/env bash
# GPT-2 350M (d24) on FineWeb, llm.c's published reproduction settings: 0.5M-token batches,
# 60000 steps (~31B tokens), peak LR 3e-4 with 700 warmup steps decaying to 0, weight decay 0.1,
# ZeRO-1. Roughly 14 hours on 8x H100. Resumable (-y 1).
#
#   python dev/data/fineweb.py -t classic -v 100B && python dev/data/hellaswag.py
#   ./scripts/run_gpt2_350M.sh
source "$(dirname "$0")/gpu_common.sh"
require_shards "dev/data/fineweb100B/fineweb_train_*.bin" "python dev/data/fineweb.py -t classic -v 100B"
require_shards "dev/data/hellaswag/hellaswag_val.bin" "python dev/data/hellaswag.py"
run_trainer \
    -i "dev/data/fineweb100B/fineweb_train_*.bin" \
    -j "dev/data/fineweb100B/fineweb_val_*.bin" \
    -o "${OUT_DIR:-log_gpt2_350M}" \
    -e d24 \
    -b 64 -t 1024 -d 524288 \
    -x 60000 \
    -k cosine -l 0.0003 -u 700 -q 0.0 \
    -c 0.1 -sh 1 \
    -z 1 -r 0 \
    -v 250 -m 20 -s 100000 -g 144 -h 1 \
    -n 2000 -nk 5 -y 1
