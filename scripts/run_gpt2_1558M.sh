#!/usr/bin/env bash
# GPT-2 1558M (d48) on FineWeb-Edu 100B, llm.c's published reproduction settings: 1M-token batches,
# 32000 steps (~33.6B tokens), peak LR 6e-4 with 700 warmup steps, cosine decay to 10% (-q 0.1),
# weight decay 0.1, ZeRO-1, B=16 per GPU. About 24 hours on 8x H100 80GB. Resumable (-y 1).
#
#   python dev/data/fineweb.py -t edu -v 100B && python dev/data/hellaswag.py
#   ./scripts/run_gpt2_1558M.sh
source "$(dirname "$0")/gpu_common.sh"
require_shards "dev/data/edu_fineweb100B/edu_fineweb_train_*.bin" "python dev/data/fineweb.py -t edu -v 100B"
require_shards "dev/data/hellaswag/hellaswag_val.bin" "python dev/data/hellaswag.py"
run_trainer \
    -i "dev/data/edu_fineweb100B/edu_fineweb_train_*.bin" \
    -j "dev/data/edu_fineweb100B/edu_fineweb_val_*.bin" \
    -o "${OUT_DIR:-log_gpt2_1558M}" \
    -e d48 \
    -b 16 -t 1024 -d 1048576 \
    -x 32000 \
    -k cosine -l 0.0006 -u 700 -q 0.1 \
    -c 0.1 -sh 1 \
    -z 1 -r 0 \
    -v 250 -m 20 -s 10000 -g 144 -h 1 \
    -n 2000 -nk 5 -y 1
