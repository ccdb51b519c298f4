#!/usr/bin/env bash
# GPT-2 774M (d36) on FineWeb 100B tokens, llm.c's published reproduction settings: 1M-token
# batches (-d 1048576), 286102 steps (300B tokens), peak LR 2.5e-4 with 700 warmup steps decaying
# to 0, weight decay 0.1, ZeRO-1. Several days on 8x H100. Resumable (-y 1).
#
#   python dev/data/fineweb.py -t classic -v 100B && python dev/data/hellaswag.py
#   ./scripts/run_gpt2_774M.sh
source "$(dirname "$0")/gpu_common.sh"
require_shards "dev/data/fineweb100B/fineweb_train_*.bin" "python dev/data/fineweb.py -t classic -v 100B"
require_shards "dev/data/hellaswag/hellaswag_val.bin" "python dev/data/hellaswag.py"
run_trainer \
    -i "dev/data/fineweb100B/fineweb_train_*.bin" \
    -j "dev/data/fineweb100B/fineweb_val_*.bin" \
    -o "${OUT_DIR:-log_gpt2_774M}" \
    -e d36 \
    -b 32 -t 1024 -d 1048576 \
    -x 286102 \
    -k cosine -l 0.00025 -u 700 -q 0.0 \
    -c 0.1 -sh 1 \
    -z 1 -r 0 \
    -v 250 -m 20 -s 20000 -g 144 -h 1 \
    -n 4000 -nk 5 -y 1
