#!/usr/bin/env bash
# GPT-2 1558M (d48) from scratch on FineWeb-Edu (100B-token sample), on one node of GPUs.
#
# Where the numbers come from: llm.c's scripts/run_gpt2_1558M.sh and its discussion #677
# ("Reproducing GPT-2 (1.5B) in llm.c in 24 hours for $672"). B=16 x T=1024 per GPU, 1,048,576
# tokens per step (8 GPUs accumulate 8 micro-batches), 32,000 steps = 33.6B tokens, cosine LR peak
# 6e-4, 700 warmup steps, decay to 10% (-q 0.1), weight decay 0.1, ZeRO-1, no recompute, GELU fused
# into the matmuls (llm.c -ge 1 fuses the forward only; our -ge 1 fuses forward and backward, a
# speed setting that leaves the math unchanged), shuffled train data, val loss every 250 steps,
# HellaSwag at every val, one 384-token sample at the end (-s 300000 > -x), a checkpoint every
# 2000 steps. Keeping only the last 5 checkpoints (-nk 5) is our choice to bound disk use (with
# the optimizer state each one is tens of GB); llm.c's script keeps them all.
# Published outcome (#677): 8x H100 80GB SXM at ~2.75 s/step (~47% bf16 MFU in the posted log),
# ~24 hours, $672; the model's HellaSwag matches that of OpenAI's GPT-2 1558M checkpoint around
# step 25,000 (checked through a summary of #677). The final val loss and HellaSwag numbers could
# not be verified from the sources available to us, so none is quoted here.
# Those times used cuDNN attention, which llmc does not have yet: expect llmc to be slower (and
# llmc's GPU trainer has not been run on a GPU by this project). Resumable (-y 1): rerun to continue.
#
#   python dev/data/fineweb.py -t edu -v 100B && python dev/data/hellaswag.py
#   ./scripts/run_gpt2_1558M.sh
# Every run also passes gpu_common.sh's RUN_COMMON_FLAGS (LR schedule shape, eval, ZeRO-1, resume).
source "$(dirname "$0")/gpu_common.sh"
require_shards "dev/data/edu_fineweb100B/edu_fineweb_train_*.bin" "python dev/data/fineweb.py -t edu -v 100B"
run_trainer -i "dev/data/edu_fineweb100B/edu_fineweb_train_*.bin" -j "dev/data/edu_fineweb100B/edu_fineweb_val_*.bin" \
    -o "${OUT_DIR:-log_gpt2_1558M}" -e d48 -b 16 -t 1024 -d 1048576 -x 32000 \
    -l 0.0006 -q 0.1 -ge 1 -s 300000 -g 384 -n 2000 -nk 5
