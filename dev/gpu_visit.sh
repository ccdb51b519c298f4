#!/usr/bin/env bash
# dev/gpu_visit.sh: what `make gpu-visit` runs on a lent NVIDIA GPU machine, inside GPU_VISIT_BUDGET seconds.
#
#   make gpu-pack                                          here: .gpu/ with what the offline machine lacks
#   make gpu-visit PY=python3 GPU_VISIT_OUT=$OUT [GPU_VISIT_BUDGET=420]   there (carry .gpu)
#   make -n gpu-visit PY=python3                           the plan, nothing built or run
#
# In order, each part inside what is left of the budget:
#   1. the machine: date, the commit (make gpu-pack records it), nvidia-smi, nvcc, torch, the CPU
#   2. make test-gpu (dev/test_gpu.sh) with TEST_GPU_BUDGET = GPU_VISIT_TEST_SHARE % of the budget and
#      TEST_GPU_QUICK=1: every build and reference file at once, then the correctness checks of both
#      families, the most telling first, then each dev/cuda kernel on its --quick shape
#   3. make bench-gpu's table (dev/bench_gpu.py --build 0: test-gpu built the trainers), short: d12, T=1024,
#      B=$GPU_VISIT_BENCH_B, cuDNN attention on then off, no recompute, each family then its PyTorch
#      reference (bf16, torch.compile), for the rest of the budget
# Into GPU_VISIT_OUT (the device call's $OUT, which brings back at most 8 files), four files: facts.txt,
# test-gpu.txt and bench-gpu.txt (each part's whole output, written as it goes) and logs.tar.gz (every
# check's and run's log, under build/gpu-visit/). The last lines printed are the summary and the table.
# Exit status: test-gpu's (0 when no check failed).
set -u

MAKE=${MAKE:-make}
PY=${PY:-python3}
BUDGET=${GPU_VISIT_BUDGET:-420}
OUT=${GPU_VISIT_OUT:-build/gpu-visit/out}
GPU_CACHE=${GPU_CACHE:-.gpu}
TEST_SHARE=${GPU_VISIT_TEST_SHARE:-55}
BENCH_B=${GPU_VISIT_BENCH_B:-16}
WORK=build/gpu-visit
DRY=0
# shellcheck source=dev/make_dry_run.sh
source "$(dirname "${BASH_SOURCE[0]}")/make_dry_run.sh"
if make_dry_run; then DRY=1; fi
if ! [[ $BUDGET =~ ^[0-9]+$ && $BUDGET -ge 1 && $TEST_SHARE =~ ^[0-9]+$ && $TEST_SHARE -ge 1 && $TEST_SHARE -le 100 ]]; then
    echo "error: GPU_VISIT_BUDGET=$BUDGET must be a whole number of seconds >= 1 and GPU_VISIT_TEST_SHARE=$TEST_SHARE a percentage, 1 to 100"
    exit 2
fi

# the carried cuDNN frontend headers (make gpu-pack), unless make was given others
if [[ -z ${CUDNN_FRONTEND_PATH:-} && -f $GPU_CACHE/cudnn_frontend/include/cudnn_frontend.h ]]; then
    export CUDNN_FRONTEND_PATH
    CUDNN_FRONTEND_PATH=$(cd "$GPU_CACHE/cudnn_frontend" && pwd)
fi

test_budget=$((BUDGET * TEST_SHARE / 100))
if ((test_budget < 1)); then test_budget=1; fi  # TEST_GPU_BUDGET=0 would mean no limit
bench_args=(--build 0 --model d12 -T 1024 -B "$BENCH_B" --cudnn 1,0 --recompute 0 --steps 20 --warmup 5
            --gpu-cache "$GPU_CACHE" --logs "$WORK/bench-gpu")
if [[ $DRY == 1 ]]; then
    echo "gpu-visit: dry run: budget $BUDGET s, test-gpu $test_budget s of it, the rest for bench-gpu"
    TEST_GPU_DRY_RUN=1 TEST_GPU_BUDGET=$test_budget TEST_GPU_QUICK=1 TEST_GPU_LOGS=$WORK/test-gpu GPU_CACHE=$GPU_CACHE \
        PY=$PY MAKE=$MAKE bash dev/test_gpu.sh
    "$PY" dev/bench_gpu.py "${bench_args[@]}" --budget "$((BUDGET - test_budget))" --dry-run
    exit 0
fi

mkdir -p "$OUT" "$WORK"
rm -rf "$WORK/test-gpu" "$WORK/bench-gpu"

# 1. the machine
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    if [[ -f $GPU_CACHE/commit.txt ]]; then echo "commit: $(cat "$GPU_CACHE/commit.txt")"; fi
    echo "budget: $BUDGET s (test-gpu $test_budget s)"
    echo "--- nvidia-smi"; nvidia-smi 2>&1 | head -n 20
    echo "--- nvcc"; nvcc --version 2>&1 | tail -n 2
    echo "--- $PY"; "$PY" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tail -n 1
    echo "--- CPU"; lscpu 2>/dev/null | grep -E '^(Model name|CPU\(s\)):'
    echo "--- cuDNN frontend: ${CUDNN_FRONTEND_PATH:-the site-packages of $PY}"
    echo "--- what make finds"; "$MAKE" --no-print-directory cuda-info 2>&1 | grep '^CUDA: '
} >"$OUT/facts.txt" 2>&1
cat "$OUT/facts.txt"

pack_logs() { tar -czf "$OUT/logs.tar.gz" -C build gpu-visit/test-gpu gpu-visit/bench-gpu 2>/dev/null || true; }

# 2. the correctness checks
set -o pipefail
TEST_GPU_BUDGET=$test_budget TEST_GPU_QUICK=1 TEST_GPU_LOGS=$WORK/test-gpu GPU_CACHE=$GPU_CACHE PY=$PY MAKE=$MAKE \
    bash dev/test_gpu.sh 2>&1 | tee "$OUT/test-gpu.txt"
test_status=$?
mkdir -p "$WORK/bench-gpu"
pack_logs

# 3. the throughput table, in what is left (a few seconds kept for packing the logs)
left=$((BUDGET - SECONDS - 10))
if ((left > 30)); then
    PYTHONUNBUFFERED=1 MAKE=$MAKE PY=$PY "$PY" dev/bench_gpu.py "${bench_args[@]}" --budget "$left" 2>&1 | tee "$OUT/bench-gpu.txt"
else
    echo "bench-gpu: not run: $left s left of GPU_VISIT_BUDGET=$BUDGET s" | tee "$OUT/bench-gpu.txt"
fi
pack_logs

echo
echo "gpu-visit: $SECONDS s of $BUDGET; in $OUT: $(cd "$OUT" && echo *)"
sed -n '/^test-gpu: summary$/,$p' "$OUT/test-gpu.txt"
sed -n '/^GPU: /,$p' "$OUT/bench-gpu.txt"
exit "$test_status"
