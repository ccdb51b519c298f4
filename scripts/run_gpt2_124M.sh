#!/usr/bin/env bash
# GPT-2 124M (d12) on FineWeb 10B tokens, llm.c's published reproduction settings: 0.5M-token
# batches (-d 524288), 18865 steps (~10B tokens), peak LR 6e-4 with 700 warmup steps decaying to 0,
# weight decay 0.1, ZeRO-1. About 90 minutes on 8x A100 80GB. Resumable (-y 1): rerun to continue.
#
#   python dev/data/fineweb.py -t classic -v 10B && python dev/data/hellaswag.py
#   ./scripts/run_gpt2_124M.sh                     (NGPU=1 ./scripts/run_gpt2_124M.sh on one GPU)
source "$(dirname "$0")/gpu_common.sh"
require_shards "dev/data/fineweb10B/fineweb_train_*.bin" "python dev/data/fineweb.py -t classic -v 10B"
require_shards "dev/data/hellaswag/hellaswag_val.bin" "python dev/data/hellaswag.py"
run_trainer \
    -i "dev/data/fineweb10B/fineweb_train_*.bin" \
    -j "dev/data/fineweb10B/fineweb_val_*.bin" \
    -o "${OUT_DIR:-log_gpt2_124M}" \
    -e d12 \
    -b 64 -t 1024 -d 524288 \
    -x 18865 \
    -k cosine -l 0.0006 -u 700 -q 0.0 \
    -c 0.1 -sh 1 \
    -z 1 -r 0 \
    -v 250 -m 20 -s 20000 -g 144 -h 1 \
    -n 5000 -y 1
