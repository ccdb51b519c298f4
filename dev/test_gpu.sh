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
# The checks, in order, each with one line `test-gpu: <check> ... PASS|FAIL|SKIP` and its whole output in
# $TEST_GPU_LOGS/<check>.log (the tables; the last lines of a failed one are printed too), then a summary:
#   reference tensors       tinyshakespeare and `train_gpt2.py --write_tensors 1` (make data model)
#   test_gpt2cu FP32        against the reference with the FP32 tolerances, then bit-exact resume
#   test_gpt2cu FP32 -ge 1 -r 1 -a 2   GELU fused into the cuBLASLt epilogues, recompute, two micro-batches
#   test_gpt2cu BF16        the same with the BF16 tolerances
#   test_gpt2cu BF16 -ge 1 -r 2 -a 2
#   test_gpt2cu BF16 cuDNN  the same with cuDNN flash attention (USE_CUDNN=1)
#   Muon reference          a d2 model and its Muon debug state (make muon-refs: train_gpt2.py --optimizer muon)
#   test_gpt2cu FP32 Muon   -op muon's steps (Muon on the blocks' 2-D weights, AdamW on the rest) against it
#   test_gpt2cu BF16 Muon
#   test_gpt2cu BF16 2 processes ZeRO-1   mpirun -np 2 (needs 2 GPUs: skipped with the reason otherwise)
#   test_gpt2cu BF16 Muon 2 processes ZeRO-1   each process owns whole Muon matrices (2 GPUs, as above)
#   Llama 3 reference       train_llama3.py's d2 (GQA 2:1, untied head) and GQA 4:1 (tied head, Llama 3.1 RoPE
#                           scaling) states, AdamW and Muon, with the local test tokenizer (make llama3-debug-states)
#   test_llama3cu FP32 d2, FP32 GQA -r 2 -a 2, FP32 Muon d2, FP32 Muon GQA, BF16 d2, BF16 GQA -r 1, BF16 Muon GQA
#                           train_llama3.cu against them with the same tolerance rules, then bit-exact resume
#   test_llama3cu BF16 cuDNN d2, BF16 cuDNN GQA -r 1   the same with cuDNN's grouped-query flash attention
#                           (USE_CUDNN=1: q, k, v read in place from the projection, no repetition of k and v)
#   test_llama3cu BF16 2 processes ZeRO-1, BF16 Muon 2 processes ZeRO-1   (2 GPUs, as above)
#   dev/cuda build          every kernel playground binary
#   dev/cuda/<kernel>       each kernel, all its versions, against its CPU reference (nccl_all_reduce
#                           needs 2 GPUs and mpirun: skipped with the reason otherwise)
# Exit status 0 only when no check failed.
# The throughput half of a GPU visit is the other command, `make bench-gpu` (dev/bench_gpu.py): our GPU trainers
# beside the PyTorch references, one table of ms/step, tokens/s, MFU, peak memory and the ratio.
#
# No network: put the tinyshakespeare text and tiktoken's cache in $GPU_CACHE (default .gpu, inside the
# checkout): .gpu/data/tinyshakespeare/input.txt and .gpu/tiktoken_cache/ (copies of ../shared/data and
# ../shared/tiktoken_cache); they seed dev/data/tinyshakespeare/ and TIKTOKEN_CACHE_DIR.
set -u

MAKE=${MAKE:-make}
PY=${PY:-python3}
LOGS=${TEST_GPU_LOGS:-build/test-gpu}
GPU_CACHE=${GPU_CACHE:-.gpu}
DRY=${TEST_GPU_DRY_RUN:-0}
# `make -n test-gpu`: make passes -n in the first word of MAKEFLAGS (single-letter flags, no '=')
make_flags=${MAKEFLAGS:-}
make_flags=${make_flags#"${make_flags%%[![:space:]]*}"}
make_flags=${make_flags%% *}
if [[ -n $make_flags && $make_flags != -* && $make_flags != *=* && $make_flags == *n* ]]; then DRY=1; fi

passed=0
failed=0
skipped=0
summary=()

report() {  # report <check> <PASS|FAIL|SKIP> <detail>
    local line="test-gpu: $1 ... $2${3:+ ($3)}"
    echo "$line"
    summary+=("$line")
    case $2 in PASS) passed=$((passed + 1)) ;; FAIL) failed=$((failed + 1)) ;; *) skipped=$((skipped + 1)) ;; esac
}

mk() { "$MAKE" --no-print-directory "$@"; }

# check <name> <commands>: runs the shell commands (mk: make) with their output in the check's log
check() {
    local name=$1 commands=$2
    local log
    log="$LOGS/$(echo "$name" | tr -c 'A-Za-z0-9_.\n-' '_').log"
    if [[ $DRY == 1 ]]; then
        echo "test-gpu: $name ... would run: ${commands//mk /$MAKE }"
        summary+=("test-gpu: $name ... planned")
        return 0
    fi
    local t0=$SECONDS
    if (eval "$commands") >"$log" 2>&1; then
        report "$name" PASS "$((SECONDS - t0)) s, log $log"
        return 0
    fi
    report "$name" FAIL "$((SECONDS - t0)) s, log $log"
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
[[ $DRY == 1 ]] || mkdir -p "$LOGS"
# in a dry run the builds print what they would do (make -n); the programs are only named
if [[ $DRY == 1 ]]; then
    mk() { "$MAKE" --no-print-directory -n "$@"; }
    echo "test-gpu: dry run: the builds as make -n prints them"
    mk data model
    mk -B test_gpt2cu PRECISION=FP32
    mk -B test_gpt2cu PRECISION=BF16 USE_CUDNN=1
    mk llama3-debug-states
    mk -B test_llama3cu PRECISION=FP32
    mk -B test_llama3cu PRECISION=BF16 USE_CUDNN=1
    mk dev-cuda
fi

have_refs=1
check "reference tensors" "mk data model" || have_refs=0
have_muon_refs=1
check "Muon reference" "mk muon-refs" || have_muon_refs=0
MUON_FLAGS="-e build/muon_refs/gpt2_d2.bin -s build/muon_refs/gpt2_d2_muon_debug_state.bin"
# run_variants <program> <have refs> <have Muon refs> <variant>...: each variant "name:make variables:flags"
# (GELU in the cuBLASLt epilogues, recompute, micro-batches, another state); a build is redone only when the
# make variables change
run_variants() {
    local program=$1 refs=$2 muon_refs=$3 built="" variant name rest vars flags build
    shift 3
    for variant in "$@"; do
        name="$program ${variant%%:*}"
        rest=${variant#*:}
        vars=${rest%%:*}
        flags=${rest#*:}
        if [[ $refs == 0 ]]; then report "$name" SKIP "no reference tensors"; continue; fi
        if [[ $name == *Muon* && $muon_refs == 0 ]]; then report "$name" SKIP "no Muon reference"; continue; fi
        build="mk -B $program $vars && "
        [[ $vars == "$built" ]] && build=""
        check "$name" "${build}./$program $flags"
        built=$vars
    done
}
run_variants test_gpt2cu $have_refs $have_muon_refs \
    "FP32:PRECISION=FP32:" "FP32 -ge 1 -r 1 -a 2:PRECISION=FP32:-ge 1 -r 1 -a 2" "FP32 Muon:PRECISION=FP32:$MUON_FLAGS" \
    "BF16:PRECISION=BF16:" "BF16 -ge 1 -r 2 -a 2:PRECISION=BF16:-ge 1 -r 2 -a 2" "BF16 Muon:PRECISION=BF16:$MUON_FLAGS" \
    "BF16 cuDNN:PRECISION=BF16 USE_CUDNN=1:"
# two_processes <name> <have refs> <command>: a check that runs 2 processes (mpirun -np 2: each process half
# the batch, ZeRO-1, or one half of an all-reduce), after the program's last build; needs 2 GPUs and mpirun,
# SKIP with the reason otherwise
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
two_processes() {
    local name=$1 refs=$2 command=$3
    if [[ $refs == 0 ]]; then
        report "$name" SKIP "no reference tensors"
    elif [[ $DRY != 1 && ${gpus:-0} -lt 2 ]]; then
        report "$name" SKIP "needs 2 GPUs, this machine has ${gpus:-0}"
    elif [[ $DRY != 1 ]] && ! command -v mpirun >/dev/null; then
        report "$name" SKIP "needs mpirun"
    else
        check "$name" "$command"
    fi
}
two_processes "test_gpt2cu BF16 2 processes ZeRO-1" $have_refs "mpirun -np 2 ./test_gpt2cu -z 1 -a 2"
two_processes "test_gpt2cu BF16 Muon 2 processes ZeRO-1" $have_muon_refs "mpirun -np 2 ./test_gpt2cu -z 1 $MUON_FLAGS"
# Llama 3 (make llama3-debug-states, dev/llama3_refs.py): d2 (GQA 2:1, untied head) and GQA 4:1 (tied head,
# Llama 3.1 RoPE scaling, an FFN multiplier), AdamW and Muon states; then two processes with ZeRO-1
have_llama_refs=1
check "Llama 3 reference" "mk llama3-debug-states" || have_llama_refs=0
L3=build/llama3
L3_D2="-e $L3/llama3_d2.bin -s $L3/llama3_d2_debug_state.bin"
L3_GQA="-e $L3/llama3_gqa.bin -s $L3/llama3_gqa_debug_state.bin"
L3_MUON_D2="-e $L3/muon/llama3_d2.bin -s $L3/muon/llama3_d2_debug_state.bin"
L3_MUON_GQA="-e $L3/muon/llama3_gqa.bin -s $L3/muon/llama3_gqa_debug_state.bin"
run_variants test_llama3cu $have_llama_refs $have_llama_refs \
    "FP32 d2:PRECISION=FP32:$L3_D2" "FP32 GQA -r 2 -a 2:PRECISION=FP32:$L3_GQA -r 2 -a 2" \
    "FP32 Muon d2:PRECISION=FP32:$L3_MUON_D2" "FP32 Muon GQA:PRECISION=FP32:$L3_MUON_GQA" \
    "BF16 cuDNN d2:PRECISION=BF16 USE_CUDNN=1:$L3_D2" "BF16 cuDNN GQA -r 1:PRECISION=BF16 USE_CUDNN=1:$L3_GQA -r 1" \
    "BF16 d2:PRECISION=BF16:$L3_D2" "BF16 GQA -r 1:PRECISION=BF16:$L3_GQA -r 1" \
    "BF16 Muon GQA:PRECISION=BF16:$L3_MUON_GQA"
two_processes "test_llama3cu BF16 2 processes ZeRO-1" $have_llama_refs "mpirun -np 2 ./test_llama3cu $L3_GQA -z 1 -a 2"
two_processes "test_llama3cu BF16 Muon 2 processes ZeRO-1" $have_llama_refs "mpirun -np 2 ./test_llama3cu $L3_MUON_GQA -z 1"
check "dev/cuda build" "mk -k -j $(nproc 2>/dev/null || echo 4) dev-cuda"
for src in dev/cuda/*.cu; do
    kernel=$(basename "$src" .cu)
    if [[ $kernel == nccl_all_reduce ]]; then
        two_processes "dev/cuda/$kernel" 1 "mk dev-cuda DEV_CUDA_TARGETS=$kernel && mpirun -np 2 ./dev/cuda/$kernel"
        continue
    fi
    check "dev/cuda/$kernel" "mk dev-cuda DEV_CUDA_TARGETS=$kernel && ./dev/cuda/$kernel"
done

echo
echo "test-gpu: summary"
printf '%s\n' "${summary[@]}"
if [[ $DRY == 1 ]]; then
    echo "test-gpu: dry run, ${#summary[@]} checks planned, nothing run"
    exit 0
fi
echo "test-gpu: $passed passed, $failed failed, $skipped skipped (logs in $LOGS/)"
[[ $failed == 0 ]]
