#!/usr/bin/env bash
# GPT-2 774M (d36) from scratch on FineWeb (100B-token sample), on one node of GPUs.
#
# Where the numbers come from: llm.c's scripts/run_gpt2_774M.sh. B=32 x T=1024 per GPU, 524,288
# tokens per step (8 GPUs accumulate 2 micro-batches), 286,102 steps = 150B tokens (1.5 passes
# over the 100B sample), cosine LR peak 2.5e-4, 700 warmup steps, decay to 0, weight decay 0.1,
# ZeRO-1, no recompute, no GELU fusion, shuffled train data, val loss every 250 steps, HellaSwag at
# every val, a sample only at the end (-s 300000 > -x), a checkpoint every 4000 steps. Keeping
# only the last 5 checkpoints (-nk 5) is our choice to bound disk use; llm.c's script keeps them all.
# Published outcome: llm.c's script estimates ~1.7 s/step on 8x A100 80GB SXM, i.e. ~135 hours
# (~5.6 days, ~$2000). A final val loss or HellaSwag score for this run could not be verified from
# the sources available to us, so none is quoted here.
# Those times used cuDNN attention, which llmc does not have yet: expect llmc to be slower (and
# llmc's GPU trainer has not been run on a GPU by this project). Resumable (-y 1): rerun to continue.
#
#   python dev/data/fineweb.py -t classic -v 100B && python dev/data/hellaswag.py
#   ./scripts/run_gpt2_774M.sh
# Every run also passes gpu_common.sh's RUN_COMMON_FLAGS (LR schedule shape, eval, ZeRO-1, resume).
source "$(dirname "$0")/gpu_common.sh"
require_shards "dev/data/fineweb100B/fineweb_train_*.bin" "python dev/data/fineweb.py -t classic -v 100B"
run_trainer -i "dev/data/fineweb100B/fineweb_train_*.bin" -j "dev/data/fineweb100B/fineweb_val_*.bin" \
    -o "${OUT_DIR:-log_gpt2_774M}" -e d36 -b 32 -t 1024 -d 524288 -x 286102 \
    -l 0.00025 -q 0.0 -ge 0 -s 300000 -g 144 -n 4000 -nk 5
