#!/usr/bin/env bash
# dev/test_gpu.sh: the checks of `make test-gpu`, on a machine with an NVIDIA GPU (../shared/GPU.md).
# make runs it and hands it MAKE, PY and its command-line variables (MAKEFLAGS), so every build below
# uses the Python and the CUDA libraries that make found:
#
#   make test-gpu                     with the project's venv (made by `make setup setup-cuda`)
#   make test-gpu PY=python3          with a Python that already has torch, numpy, tiktoken and the nvidia
#                                     wheels (an offline GPU machine): no pip, no venv; the cuBLAS, NCCL and
#                                     cuDNN headers and libraries are found in that Python's site-packages
#   make -n test-gpu [PY=...]         the plan only (or TEST_GPU_DRY_RUN=1): each build as `make -n` prints
#                                     it, each program is named, nothing is built or run
#
# Lent GPU time is short (make gpu-visit runs this inside a budget), so everything that needs no GPU runs at
# once: `make -k -j gpu-build` (every configuration of each family's test_<name>cu under build/gpu/bin/,
# the trainers, the dev/cuda kernels) beside the reference files (the data first, then the five reference
# sets side by side). Then the checks that need the GPU, the most telling first:
#   test_gpt2cu FP32, BF16, BF16 cuDNN       against the reference (`train_gpt2.py --write_tensors 1`) with
#                                            the FP32 / BF16 tolerances, then bit-exact resume
#   test_llama3cu BF16 cuDNN GQA -r 1, FP32 d2, BF16 d2, BF16 cuDNN d2, FP32 GQA -r 2 -a 2, BF16 GQA -r 1
#                                            against train_llama3.py's d2 (GQA 2:1, untied head) and GQA 4:1
#                                            (tied head, Llama 3.1 RoPE scaling) states; cuDNN: grouped-query
#                                            flash attention reading q, k, v in place
#   Muon: test_gpt2cu FP32, BF16; test_llama3cu FP32 d2, FP32 GQA, BF16 GQA   -op muon against the reference's
#                                            Muon states (make muon-refs, make llama3-debug-states)
#   test_gpt2cu FP32 -ge 1 -r 1 -a 2, BF16 -ge 1 -r 2 -a 2   GELU in the cuBLASLt epilogues, recompute,
#                                            two micro-batches
#   test_nanochatcu FP32 GQA, BF16 MHA -r 1, BF16 cuDNN GQA, FP32 Muon MQA, BF16 Muon GQA   against
#                                            train_nanochat.py's imports of tiny NanoChat models (make
#                                            nanochat-debug-states: softcap 5, 15 and none)
#   test_qwen3cu FP32 d2, BF16 cuDNN MHA, BF16 cuDNN MQA, FP32 Muon MQA   against train_qwen3.py's states (make
#                                            qwen3-debug-states): QK-norm with weights, attention widths 2C, 3C
#                                            and 2C/3 (cuDNN at a head_dim that is not C/NH)
#   test_<name>cu FP32, BF16 masked          every family's on a masked debug state (chat fine-tuning's loss: half
#                                            of the targets -1), which make gpu-pack wrote here into $GPU_CACHE/chat/
#   train_nanochatcu FP32 chat shard         a few steps on a tiny chat shard packed there, its step and val losses
#                                            against those ./train_nanochat printed at pack time (dev/gpu_visit_chat.py)
#   2 processes (ZeRO-1, AdamW and Muon, both families)   mpirun -np 2: needs 2 GPUs and mpirun, else SKIP
#   dev/cuda/<kernel>                        each kernel, all its versions, against its CPU reference
#                                            (TEST_GPU_QUICK=1: --quick, a small shape and one timed call)
# One line per check, `test-gpu: <check> ... PASS|FAIL|SKIP (detail)`, its whole output in
# $TEST_GPU_LOGS/<check>.log (the tables; the last lines of a failed one are printed too), then a summary.
# TEST_GPU_BUDGET=<seconds> (0: none): a check that would start later is SKIP (out of time), and a running
# one is stopped when the budget ends. Exit status 0 only when no check failed.
# The throughput half of a GPU visit is the other command, `make bench-gpu` (dev/bench_gpu.py).
#
# No network: put the tinyshakespeare text and tiktoken's cache in $GPU_CACHE (default .gpu, inside the
# checkout; make gpu-pack fills it): .gpu/data/tinyshakespeare/input.txt and .gpu/tiktoken_cache/; they
# seed dev/data/tinyshakespeare/ and TIKTOKEN_CACHE_DIR. The masked and chat checks read .gpu/chat/ (make gpu-pack
# writes it with the references and the CPU trainer here); without it they are SKIP.
set -u

MAKE=${MAKE:-make}
PY=${PY:-python3}
LOGS=${TEST_GPU_LOGS:-build/test-gpu}
GPU_CACHE=${GPU_CACHE:-.gpu}
DRY=${TEST_GPU_DRY_RUN:-0}
BUDGET=${TEST_GPU_BUDGET:-0}
QUICK=${TEST_GPU_QUICK:-0}
BIN=build/gpu/bin
JOBS=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || echo 4)  # nproc honours those
export MAKE
# `make -n test-gpu`: the plan only
# shellcheck source=dev/make_dry_run.sh
source "$(dirname "${BASH_SOURCE[0]}")/make_dry_run.sh"
if make_dry_run; then DRY=1; fi
if ! [[ $BUDGET =~ ^[0-9]+$ ]]; then
    echo "error: TEST_GPU_BUDGET=$BUDGET must be a whole number of seconds (0: no limit)"
    exit 2
fi

# every check's line goes to one file, so checks run in the background report too
results=$(mktemp)
trap 'rm -f "$results"' EXIT

report() {  # report <check> <PASS|FAIL|SKIP> <detail>
    local line="test-gpu: $1 ... $2${3:+ ($3)}"
    echo "$line"
    echo "$line" >>"$results"
}

mk() { "$MAKE" --no-print-directory "$@"; }
export -f mk

seconds_left() { echo $((BUDGET - SECONDS)); }

# out_of_time <name>: reports the check SKIP and succeeds when the budget is spent (not in a dry run). A check that
# depends on an earlier one asks first: when time ran out, that is its reason, whether or not the earlier check got to
# run (on a loaded machine the reference builds could start after the budget's end and leave "no reference files")
out_of_time() {
    if [[ $DRY != 1 ]] && ((BUDGET > 0 && $(seconds_left) <= 0)); then
        report "$1" SKIP "out of time: TEST_GPU_BUDGET=$BUDGET s"
        return 0
    fi
    return 1
}

# check <name> <commands>: runs the shell commands (mk: make) with their output in the check's log; inside
# the budget, or SKIP when it is spent
check() {
    local name=$1 commands=$2
    local log
    log="$LOGS/$(echo "$name" | tr -c 'A-Za-z0-9_.\n-' '_').log"
    if [[ $DRY == 1 ]]; then
        echo "test-gpu: $name ... would run: ${commands//mk /$MAKE }"
        echo "test-gpu: $name ... planned" >>"$results"
        return 0
    fi
    if out_of_time "$name"; then return 1; fi
    local limit=()
    if ((BUDGET > 0)); then limit=(timeout -k 5 "$(seconds_left)"); fi
    local t0=$SECONDS code=0
    "${limit[@]}" bash -c "$commands" >"$log" 2>&1 || code=$?
    if ((code == 0)); then
        report "$name" PASS "$((SECONDS - t0)) s, log $log"
        return 0
    fi
    local why="$((SECONDS - t0)) s, log $log"
    if ((${#limit[@]} > 0 && (code == 124 || code == 137))); then why="stopped at the end of TEST_GPU_BUDGET=$BUDGET s, $why"; fi
    report "$name" FAIL "$why"
    tail -n 25 "$log" | sed 's/^/    /'
    return 1
}

# the offline caches, when brought along
if [[ -z ${TIKTOKEN_CACHE_DIR:-} && -d $GPU_CACHE/tiktoken_cache ]]; then
    export TIKTOKEN_CACHE_DIR
    TIKTOKEN_CACHE_DIR=$(cd "$GPU_CACHE/tiktoken_cache" && pwd)
    echo "test-gpu: TIKTOKEN_CACHE_DIR=$TIKTOKEN_CACHE_DIR"
fi
ts_text=dev/data/tinyshakespeare/tiny_shakespeare.txt
if [[ ! -f $ts_text && -f $GPU_CACHE/data/tinyshakespeare/input.txt && $DRY != 1 ]]; then
    mkdir -p "$(dirname "$ts_text")" && cp "$GPU_CACHE/data/tinyshakespeare/input.txt" "$ts_text"
    echo "test-gpu: $ts_text from $GPU_CACHE/data/tinyshakespeare/input.txt"
fi

echo "test-gpu: Python $PY ($(command -v "$PY" || echo "$PY": not found)), logs in $LOGS/"
if ((BUDGET > 0)); then echo "test-gpu: budget $BUDGET s"; fi
[[ $DRY == 1 ]] || mkdir -p "$LOGS"
# in a dry run the builds print what they would do (make -n); the programs are only named
if [[ $DRY == 1 ]]; then
    echo "test-gpu: dry run: the builds as make -n prints them"
    "$MAKE" --no-print-directory -n -B gpu-build
    "$MAKE" --no-print-directory -n gpu-refs
fi

# ---------------------------------------------------------------------------- what needs no GPU, at once
# beside() <check arguments>: a check in the background (in a dry run, in order)
beside() { if [[ $DRY == 1 ]]; then check "$@"; else check "$@" & fi; }
beside "build" "mk -k -j $JOBS gpu-build"
check "data" "mk data"
beside "reference tensors" "mk model"
beside "Muon reference" "mk muon-refs"
beside "Llama 3 reference" "mk llama3-debug-states"
beside "nanochat reference" "mk nanochat-debug-states"
beside "Qwen3 reference" "mk qwen3-debug-states"
wait
passed() { grep -qF "test-gpu: $1 ... PASS" "$results"; }
have_refs=0; passed "reference tensors" && have_refs=1
have_muon_refs=0; passed "Muon reference" && have_muon_refs=1
have_llama_refs=0; passed "Llama 3 reference" && have_llama_refs=1
have_nanochat_refs=0; passed "nanochat reference" && have_nanochat_refs=1
have_qwen3_refs=0; passed "Qwen3 reference" && have_qwen3_refs=1
# the masked states and chat shard make gpu-pack wrote here (no GPU machine can write them in the visit's minutes)
CHAT=$GPU_CACHE/chat
have_chat=0; [[ -f $CHAT/train_nanochat.txt ]] && have_chat=1
if [[ $DRY == 1 ]]; then have_refs=1; have_muon_refs=1; have_llama_refs=1; have_nanochat_refs=1; have_qwen3_refs=1; have_chat=1; fi

# ---------------------------------------------------------------------------- the checks on the GPU
# run_test <name> <references ok> <binary under build/gpu/bin/> <flags> [<why the references are missing>]
run_test() {
    local name=$1 refs=$2 binary=$BIN/$3 flags=$4 missing=${5:-no reference files}
    if out_of_time "$name"; then return; fi
    if [[ $refs == 0 ]]; then report "$name" SKIP "$missing"; return; fi
    if [[ $DRY != 1 && ! -x $binary ]]; then report "$name" FAIL "$binary was not built: see the build log"; return; fi
    check "$name" "./$binary $flags"
}
MUON="-e build/muon_refs/gpt2_d2.bin -s build/muon_refs/gpt2_d2_muon_debug_state.bin"
# refs <family> <model> [<subdir>]: the flags of build/<family>[/<subdir>]/<family>_<model>.bin and its debug state
refs() { local dir=build/$1${3:+/$3}; echo "-e $dir/$1_$2.bin -s $dir/$1_$2_debug_state.bin"; }
run_test "test_gpt2cu FP32" $have_refs fp32/test_gpt2cu ""
run_test "test_gpt2cu BF16" $have_refs bf16/test_gpt2cu ""
run_test "test_gpt2cu BF16 cuDNN" $have_refs bf16-cudnn/test_gpt2cu ""
run_test "test_llama3cu BF16 cuDNN GQA -r 1" $have_llama_refs bf16-cudnn/test_llama3cu "$(refs llama3 gqa) -r 1"
run_test "test_llama3cu FP32 d2" $have_llama_refs fp32/test_llama3cu "$(refs llama3 d2)"
run_test "test_llama3cu BF16 d2" $have_llama_refs bf16/test_llama3cu "$(refs llama3 d2)"
run_test "test_llama3cu BF16 cuDNN d2" $have_llama_refs bf16-cudnn/test_llama3cu "$(refs llama3 d2)"
run_test "test_llama3cu FP32 GQA -r 2 -a 2" $have_llama_refs fp32/test_llama3cu "$(refs llama3 gqa) -r 2 -a 2"
run_test "test_llama3cu BF16 GQA -r 1" $have_llama_refs bf16/test_llama3cu "$(refs llama3 gqa) -r 1"
run_test "test_gpt2cu FP32 Muon" $have_muon_refs fp32/test_gpt2cu "$MUON"
run_test "test_gpt2cu BF16 Muon" $have_muon_refs bf16/test_gpt2cu "$MUON"
run_test "test_llama3cu FP32 Muon d2" $have_llama_refs fp32/test_llama3cu "$(refs llama3 d2 muon)"
run_test "test_llama3cu FP32 Muon GQA" $have_llama_refs fp32/test_llama3cu "$(refs llama3 gqa muon)"
run_test "test_llama3cu BF16 Muon GQA" $have_llama_refs bf16/test_llama3cu "$(refs llama3 gqa muon)"
run_test "test_gpt2cu FP32 -ge 1 -r 1 -a 2" $have_refs fp32/test_gpt2cu "-ge 1 -r 1 -a 2"
run_test "test_gpt2cu BF16 -ge 1 -r 2 -a 2" $have_refs bf16/test_gpt2cu "-ge 1 -r 2 -a 2"
run_test "test_nanochatcu FP32 GQA" $have_nanochat_refs fp32/test_nanochatcu "$(refs nanochat gqa)"
run_test "test_nanochatcu BF16 MHA -r 1" $have_nanochat_refs bf16/test_nanochatcu "$(refs nanochat mha) -r 1"
run_test "test_nanochatcu BF16 cuDNN GQA" $have_nanochat_refs bf16-cudnn/test_nanochatcu "$(refs nanochat gqa)"
run_test "test_nanochatcu FP32 Muon MQA" $have_nanochat_refs fp32/test_nanochatcu "$(refs nanochat mqa muon)"
run_test "test_nanochatcu BF16 Muon GQA" $have_nanochat_refs bf16/test_nanochatcu "$(refs nanochat gqa muon)"
run_test "test_qwen3cu FP32 d2" $have_qwen3_refs fp32/test_qwen3cu "$(refs qwen3 d2)"
run_test "test_qwen3cu BF16 cuDNN MHA" $have_qwen3_refs bf16-cudnn/test_qwen3cu "$(refs qwen3 mha)"
run_test "test_qwen3cu BF16 cuDNN MQA" $have_qwen3_refs bf16-cudnn/test_qwen3cu "$(refs qwen3 mqa)"
run_test "test_qwen3cu FP32 Muon MQA" $have_qwen3_refs fp32/test_qwen3cu "$(refs qwen3 mqa muon)"
# chat fine-tuning's masked loss, on what make gpu-pack wrote here into $GPU_CACHE/chat/ (dev/gpu_visit_chat.py): each
# family's small model and its reference's masked debug state (half of the targets -1), then train_nanochatcu FP32 on a
# tiny chat shard against the step and val losses ./train_nanochat printed on it at pack time
masked() { echo "-e $CHAT/$1.bin -s $CHAT/$1_masked_debug_state.bin"; }
no_chat="no $CHAT/train_nanochat.txt: make gpu-pack writes $CHAT/ here"
run_test "test_gpt2cu FP32 masked" $have_chat fp32/test_gpt2cu "$(masked gpt2)" "$no_chat"
run_test "test_gpt2cu BF16 masked" $have_chat bf16/test_gpt2cu "$(masked gpt2)" "$no_chat"
run_test "test_llama3cu FP32 masked" $have_chat fp32/test_llama3cu "$(masked llama3)" "$no_chat"
run_test "test_llama3cu BF16 masked" $have_chat bf16/test_llama3cu "$(masked llama3)" "$no_chat"
run_test "test_nanochatcu FP32 masked" $have_chat fp32/test_nanochatcu "$(masked nanochat)" "$no_chat"
run_test "test_nanochatcu BF16 masked" $have_chat bf16/test_nanochatcu "$(masked nanochat)" "$no_chat"
run_test "test_qwen3cu FP32 masked" $have_chat fp32/test_qwen3cu "$(masked qwen3)" "$no_chat"
run_test "test_qwen3cu BF16 masked" $have_chat bf16/test_qwen3cu "$(masked qwen3)" "$no_chat"
chat_trainer=$BIN/fp32/train_nanochatcu
if out_of_time "train_nanochatcu FP32 chat shard"; then
    :
elif [[ $have_chat == 0 ]]; then
    report "train_nanochatcu FP32 chat shard" SKIP "$no_chat"
elif [[ $DRY != 1 && ! -x $chat_trainer ]]; then
    report "train_nanochatcu FP32 chat shard" FAIL "$chat_trainer was not built: see the build log"
else
    check "train_nanochatcu FP32 chat shard" "$PY dev/gpu_visit_chat.py check --pack $CHAT --trainer ./$chat_trainer"
fi

# two_processes <name> <references ok> <command>: 2 processes (mpirun -np 2: each process half the batch,
# ZeRO-1, or one half of an all-reduce); needs 2 GPUs and mpirun, SKIP with the reason otherwise
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
two_processes() {
    local name=$1 refs=$2 command=$3
    if out_of_time "$name"; then
        return
    elif [[ $refs == 0 ]]; then
        report "$name" SKIP "no reference files"
    elif [[ $DRY != 1 && ${gpus:-0} -lt 2 ]]; then
        report "$name" SKIP "needs 2 GPUs, this machine has ${gpus:-0}"
    elif [[ $DRY != 1 ]] && ! command -v mpirun >/dev/null; then
        report "$name" SKIP "needs mpirun"
    else
        check "$name" "$command"
    fi
}
two_processes "test_gpt2cu BF16 2 processes ZeRO-1" $have_refs "mpirun -np 2 ./$BIN/bf16/test_gpt2cu -z 1 -a 2"
two_processes "test_gpt2cu BF16 Muon 2 processes ZeRO-1" $have_muon_refs "mpirun -np 2 ./$BIN/bf16/test_gpt2cu -z 1 $MUON"
two_processes "test_llama3cu BF16 2 processes ZeRO-1" $have_llama_refs "mpirun -np 2 ./$BIN/bf16/test_llama3cu $(refs llama3 gqa) -z 1 -a 2"
two_processes "test_llama3cu BF16 Muon 2 processes ZeRO-1" $have_llama_refs "mpirun -np 2 ./$BIN/bf16/test_llama3cu $(refs llama3 gqa muon) -z 1"

quick=""
[[ $QUICK == 1 ]] && quick=" --quick"
for src in dev/cuda/*.cu; do
    kernel=$(basename "$src" .cu)
    if [[ $kernel == nccl_all_reduce ]]; then
        two_processes "dev/cuda/$kernel" 1 "mpirun -np 2 ./dev/cuda/$kernel$quick"
    elif out_of_time "dev/cuda/$kernel"; then
        :
    elif [[ $DRY != 1 && ! -x dev/cuda/$kernel ]]; then
        report "dev/cuda/$kernel" FAIL "dev/cuda/$kernel was not built: see the build log"
    else
        check "dev/cuda/$kernel" "./dev/cuda/$kernel$quick"
    fi
done

echo
echo "test-gpu: summary"
cat "$results"
if [[ $DRY == 1 ]]; then
    echo "test-gpu: dry run, $(wc -l <"$results") checks planned, nothing run"
    exit 0
fi
count() { grep -c " \.\.\. $1\( (\|$\)" "$results"; }
failed=$(count FAIL)
echo "test-gpu: $(count PASS) passed, $failed failed, $(count SKIP) skipped (logs in $LOGS/)"
[[ $failed == 0 ]]
