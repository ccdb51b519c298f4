#!/usr/bin/env bash
# GPT-3 125M (gpt3:c768: 12 layers, 768 channels, T=2048) on FineWeb, llm.c's published settings:
# 589824-token batches (0.5M-ish at T=2048), 565950 steps (~300B tokens), peak LR 6e-4 with 700
# warmup steps decaying to 10%, weight decay 0.1, ZeRO-1, outlier skipping at z > 7 (-sl/-sg).
# Resumable (-y 1).
#
#   python dev/data/fineweb.py -t classic -v 100B && python dev/data/hellaswag.py
#   ./scripts/run_gpt3_125M.sh
source "$(dirname "$0")/gpu_common.sh"
require_shards "dev/data/fineweb100B/fineweb_train_*.bin" "python dev/data/fineweb.py -t classic -v 100B"
require_shards "dev/data/hellaswag/hellaswag_val.bin" "python dev/data/hellaswag.py"
run_trainer \
    -i "dev/data/fineweb100B/fineweb_train_*.bin" \
    -j "dev/data/fineweb100B/fineweb_val_*.bin" \
    -o "${OUT_DIR:-log_gpt3_125M}" \
    -e gpt3:c768 \
    -b 32 -t 2048 -d 589824 \
    -x 565950 \
    -k cosine -l 0.0006 -u 700 -q 0.1 \
    -c 0.1 -sh 1 \
    -z 1 -r 0 \
    -sl 7.0 -sg 7.0 \
    -v 250 -m 20 -s 20000 -g 144 -h 1 \
    -n 10000 -nk 5 -y 1
