"""The CUDA code, executed: every check of the CPU execution target (dev/cuda_cpu/README.md).

`make cuda-cpu-build` builds the programs into build/cuda_cpu/ (`make test` does it before pytest);
these tests run them: the target's own semantics and the defects it must report, the emulated
cuBLAS and NCCL, every dev/cuda kernel version against its CPU reference, test_gpt2cu (FP32 and BF16,
with the variants test_gpt2cu has never run on a GPU), two processes with ZeRO-1 against one, resume,
and defects planted in copies of the production kernels.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import D2_REFERENCE as REFS, D2_SMALL_VOCAB_REFERENCE as SMALL_REFS, assert_one_error_line, debug_state_first_steps, make

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "build" / "cuda_cpu"
MPIRUN = REPO / ".venv" / "bin" / "mpirun"
DEV_KERNELS = sorted(p.stem for p in (REPO / "dev" / "cuda").glob("*.cu"))


def binary(name: str) -> Path:
    path = OUT / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make cuda-cpu-build` first")
    return path


# OpenBLAS's own threads would spin against the target's workers; mpirun runs as root in CI containers
BASE_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def run(cmd: list[str], timeout: int = 600, env: dict[str, str] | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ)
    full_env.update(BASE_ENV)
    full_env.update(env or {})
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env)


def mpirun(n: int) -> list[str]:
    # one worker thread per process: the processes share the machine's cores
    return [str(MPIRUN), "-np", str(n), "--oversubscribe", "-x", "CUDA_CPU_THREADS=1", "-x", "OMP_NUM_THREADS=1",
            "-x", "OPENBLAS_NUM_THREADS=1"]


# ----------------------------------------------------------------------------
# the decoder families' GPU test programs (tests/test_cuda_cpu_<name>.py): their run, the debug state's layout, a
# corrupted copy of a state and the rows that then fail


def check_test_program(program: str, refs: Path, tmp_path: Path, model: str, *flags: str, passes: bool = True,
                       processes: int = 1) -> str:
    """build/cuda_cpu/<program> on refs/<model>.bin and its debug state (as `processes` MPI processes); its output, after
    the exit status is checked: 0 with every check passed, or (passes False) 1 with some check failed."""
    r = run([*(mpirun(processes) if processes > 1 else []), binary(program), "-e", refs / f"{model}.bin", "-s",
             refs / f"{model}_debug_state.bin", "-o", tmp_path / "resume", *flags], env=BASE_ENV)
    if passes:
        assert r.returncode == 0 and re.search(r"^\d+ passed, 0 failed", r.stdout, re.M), r.stdout[-4000:] + r.stderr[-2000:]
    else:
        assert r.returncode == 1 and re.search(r"^\d+ passed, [1-9]\d* failed", r.stdout, re.M), r.stdout[-4000:] + r.stderr[-2000:]
    return r.stdout


def debug_state_layout(state: bytes, V: int, num_parameters: int) -> dict[str, int]:
    """Byte offsets in a debug state of the Llama 3 layout (llmc/debug_state.h) of a model of V logits a token and
    num_parameters gradients: the logits, the gradients, the step losses; and B, T, V, nsteps."""
    B, T, nsteps = struct.unpack_from("<3i", state, 8)
    logits = 1024 + 8 * B * T
    grads = logits + 4 * B * T * V + 4
    return {"B": B, "T": T, "V": V, "nsteps": nsteps, "logits": logits, "grads": grads, "losses": grads + 4 * num_parameters}


def write_corrupted_state(src: Path, dst: Path, model: str, start: int, count: int, shift: float = 0.0, scale: float = 1.0) -> None:
    """src's <model>.bin and a copy of its debug state into dst, the copy's count floats from byte start shifted by shift
    and scaled by scale."""
    state = bytearray((src / f"{model}_debug_state.bin").read_bytes())
    values = (np.frombuffer(state, dtype="<f4", count=count, offset=start) + np.float32(shift)) * np.float32(scale)
    state[start:start + 4 * count] = values.astype("<f4").tobytes()
    (dst / f"{model}_debug_state.bin").write_bytes(bytes(state))
    shutil.copy(src / f"{model}.bin", dst)


def state_span(layout: dict[str, int], what: str, grad_offsets: dict[str, tuple[int, int]]) -> tuple[int, int]:
    """(first byte, floats) in a debug state of what a corruption test changes: "logit" (one of the second row),
    "step loss" (the sixth), or "d<tensor>" (its gradient; grad_offsets: each tensor's (offset, count) in floats)."""
    if what == "logit":
        return layout["logits"] + 4 * (layout["T"] * layout["V"] + 7), 1
    if what == "step loss":
        return layout["losses"] + 4 * 5, 1
    offset, count = grad_offsets[what[1:]]
    return layout["grads"] + 4 * offset, count


def failing_rows(out: str) -> list[str]:
    """The rows of a test program's table that failed."""
    return [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("|") and "FAIL" in line]


# ----------------------------------------------------------------------------
# the target itself


def test_device_semantics() -> None:
    r = run([str(binary("test_device"))])
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"test_device: \d+ passed, 0 failed", r.stdout), r.stdout


DEFECTS = {
    "host_pointer": "is 0x[0-9a-f]+ \\(not device memory",
    "freed_pointer": "not device memory",
    "divergent_syncthreads": "wait at __syncthreads",
    "early_return": "__syncthreads reached by 63 threads of 64",
    "exited_lane_shuffle": "lane 3 exited while other lanes of its warp wait for it in __shfl_xor_sync",
    "mixed_barriers": "hangs: 16 threads wait at __syncthreads",
    "out_of_bounds": "past the end of a device allocation of 1024 bytes",
    # initcheck: shared memory is uninitialised at every block's start
    "unwritten_shared": r"kernel unwritten_shared_kernel .* block \(0,0,0\) thread \(31,0,0\): initcheck: reads 4 bytes at "
                        r"offset 128 of __shared__ row \(132 bytes, dev/cuda_cpu/tests/test_device.cu:\d+\) that no thread",
    "previous_block_shared": r"block \(1,0,0\) thread \(\d+,0,0\): initcheck: reads 4 bytes at offset 0 of __shared__ carry ",
    "unwritten_dynamic_shared": r"thread \(\d+,0,0\): initcheck: reads 4 bytes at offset 128 of the extern __shared__ arena \(256 bytes\)",
    "shared_out_of_bounds": r"thread \(8,0,0\): 4 bytes at offset 32 are outside __shared__ small \(32 bytes",
    # initcheck of device memory: per page, since cudaMalloc
    "fresh_device_read": r"kernel copy_kernel \(dev/cuda_cpu/tests/test_device.cu:\d+\) block \(0,0,0\) thread \(0,0,0\): initcheck: "
                         r"reads device memory at offset 0 of an allocation of 128 bytes that nothing has written since cudaMalloc",
    "fresh_device_copy": r"^cuda_cpu: cudaMemcpyDeviceToHost: initcheck: reads device memory at offset 0 of an allocation of 32 bytes "
                         r"that nothing has written since cudaMalloc \(checked per \d+-byte page\)$",
    # stream order: streams are queues that run only as CUDA guarantees
    "missing_event_wait": r"^cuda_cpu: stream order: cudaMemcpyAsync on a non-blocking stream would run before cudaMemset, issued "
                          r"earlier to a blocking stream, and nothing orders the two .* both use 256 bytes at offset 0 of a "
                          r"device allocation and the second writes them$",
    "host_read_before_sync": r"^cuda_cpu: cudaMemcpyDeviceToHost of 128 bytes reads device memory at offset 0 of an allocation of "
                             r"1024 bytes while kernel write_kernel \(dev/cuda_cpu/tests/test_device.cu:\d+\), issued to a "
                             r"non-blocking stream this copy does not wait for, may still write it",
    # racecheck: the same verdict in both fiber orders (the threads named depend on the order)
    "race_hidden_by_order": r"kernel race_hidden_by_order_kernel .* thread \(0,0,0\): racecheck: reads 4 bytes at offset 0 of "
                            r"__shared__ value \(4 bytes, dev/cuda_cpu/tests/test_device.cu:\d+\) at dev/cuda_cpu/tests/"
                            r"test_device.cu:\d+; thread \(32,0,0\) wrote them at dev/cuda_cpu/tests/test_device.cu:\d+",
    "warp_exchange_without_syncwarp": r"thread \(\d+,0,0\): racecheck: writes 4 bytes at offset \d+ of __shared__ lanes "
                                      r"\(128 bytes, .*\) at dev/cuda_cpu/tests/test_device.cu:\d+; thread \(\d+,0,0\) read "
                                      r"them at dev/cuda_cpu/tests/test_device.cu:\d+",
    "reuse_without_barrier": r"thread \(\d+,0,0\): racecheck: reads 4 bytes at offset \d+ of __shared__ buf \(256 bytes, "
                             r".*\) at dev/cuda_cpu/tests/test_device.cu:\d+; thread \(\d+,0,0\) wrote them at "
                             r"dev/cuda_cpu/tests/test_device.cu:\d+",
}
# one worker: block 1 runs where block 0 ran and finds its write, which it must not see
DEFECT_ENV = {"previous_block_shared": {"CUDA_CPU_THREADS": "1"}}


# initcheck's and racecheck's verdicts do not depend on the fiber order: those defects run in both
ORDER_FREE = ["unwritten_shared", "previous_block_shared", "unwritten_dynamic_shared", "race_hidden_by_order",
              "warp_exchange_without_syncwarp", "reuse_without_barrier"]
DEFECT_RUNS = [(d, "forward") for d in sorted(DEFECTS)] + [(d, "reverse") for d in ORDER_FREE]


@pytest.mark.parametrize("defect,order", DEFECT_RUNS)
def test_device_defect_is_reported(defect: str, order: str) -> None:
    r = run([str(binary("test_device")), defect], env={"CUDA_CPU_ORDER": order, **DEFECT_ENV.get(defect, {})})
    assert r.returncode == 1, f"defect {defect} not reported:\n{r.stdout}{r.stderr}"
    lines = [line for line in r.stderr.splitlines() if line.startswith("cuda_cpu:")]
    assert len(lines) == 1 and re.search(DEFECTS[defect], lines[0]), r.stderr


# each check switched off: its defect runs to the end unreported (with the 0xFF poison, or in the wrong order)
CHECK_OFF = [
    ("CUDA_CPU_INITCHECK", "unwritten_shared", "defect unwritten_shared was NOT reported"),
    ("CUDA_CPU_INITCHECK", "fresh_device_copy", "fresh device memory reads NaN with initcheck off"),
    ("CUDA_CPU_RACECHECK", "race_hidden_by_order", "defect race_hidden_by_order was NOT reported"),
    ("CUDA_CPU_STREAM_ORDER", "missing_event_wait", "defect missing_event_wait was NOT reported"),
]


@pytest.mark.parametrize("variable,defect,expected", CHECK_OFF)
def test_a_check_switched_off_lets_its_defect_pass(variable: str, defect: str, expected: str) -> None:
    r = run([str(binary("test_device")), defect], env={variable: "0"})
    assert r.returncode == 0 and expected in r.stdout, r.stdout + r.stderr


def translate(root: Path, out: Path, files: list[str]) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, str(REPO / "dev/cuda_cpu/translate.py"), "--root", str(root), "--out", str(out), *files])


def test_translate_keeps_lines(tmp_path: Path) -> None:
    src = tmp_path / "k.cu"
    src.write_text(
        "// not a launch: k<<<1, 2>>>(x)\n"
        "void f(float* x, int n) {\n"
        "    k<float, 4><<<dim3(n, 2),\n"
        "                 256, 0, s>>>(x,\n"
        "                             n);\n"
        '    g<<<1, 1>>>("<<<");\n'
        "}\n"
        "int line_after = __LINE__;\n"
        "__global__ void k2() { extern __shared__ __align__(16) float smem[]; }\n"
        "__global__ void k3() { __shared__ float acc[8]\n"
        "                                         [32]; __shared__ int n; }\n"
    )
    r = translate(tmp_path, tmp_path / "o", ["k.cu"])
    assert r.returncode == 0, r.stderr
    out = (tmp_path / "o" / "k.cu").read_text().splitlines()
    assert out[0] == '#line 1 "k.cu"'
    body = out[1:]
    assert body[0] == "// not a launch: k<<<1, 2>>>(x)"
    assert body[2].strip().startswith('cuda_cpu_launch(cuda_cpu_config(dim3(n, 2), 256, 0, s), "k<float, 4>"')
    assert body[2].endswith('[](const auto&... cuda_cpu_a) { k<float, 4>(cuda_cpu_a...); }, x,')
    assert body[5].strip() == ('cuda_cpu_launch(cuda_cpu_config(1, 1), "g", __FILE__, __LINE__, '
                               '[](const auto&... cuda_cpu_a) { g(cuda_cpu_a...); }, "<<<");')
    assert body[7] == "int line_after = __LINE__;"
    assert body[8] == "__global__ void k2() { CudaCpuSharedPtr<float> smem = cuda_cpu_dynamic_shared<float>(); }"
    assert body[9] == ('__global__ void k3() { static CudaCpuSharedSite cuda_cpu_site_acc = {"acc", __FILE__, __LINE__, -1}; '
                       "CudaCpuSharedRef<float[8][32]> acc = cuda_cpu_static_shared<float[8][32]>(&cuda_cpu_site_acc);")
    assert body[10].strip() == ('static CudaCpuSharedSite cuda_cpu_site_n = {"n", __FILE__, __LINE__, -1}; '
                                "CudaCpuSharedRef<int> n = cuda_cpu_static_shared<int>(&cuda_cpu_site_n); }")
    assert len(body) == 11


@pytest.mark.parametrize("code, error", [
    ("__shared__ float a[4], b[4];", "line 2: a __shared__ declaration translate.py cannot rewrite"),
    ("__shared__ float a[4]; int n = sizeof(a) / 4;", r"line 2: sizeof of a __shared__ variable \(a\)"),
    ("__shared__ float a[4]; auto x = a[0];", r"line 2: `auto` initialised from a __shared__ variable \(a\)"),
])
def test_translate_refuses_shared_it_cannot_rewrite(tmp_path: Path, code: str, error: str) -> None:
    (tmp_path / "k.cu").write_text(f"// {code}\n__global__ void k() {{ {code} }}\n")
    r = translate(tmp_path, tmp_path / "o", ["k.cu"])
    assert r.returncode == 1
    assert re.fullmatch(rf"translate.py: k.cu: {error}.*\n", r.stderr), r.stderr


# ----------------------------------------------------------------------------
# the emulated libraries


def test_cublas_cpu() -> None:
    r = run([str(binary("test_cublas_cpu"))])
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"\d+ passed, 0 failed", r.stdout), r.stdout


def test_nccl_cpu_two_processes() -> None:
    r = run(mpirun(2) + [str(binary("test_nccl_cpu"))])
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"\d+ passed, 0 failed", r.stdout), r.stdout


# ----------------------------------------------------------------------------
# the kernel playground: every version of every kernel against its CPU reference


@pytest.mark.parametrize("order", ["forward", "reverse"])
@pytest.mark.parametrize("kernel", [k for k in DEV_KERNELS if k != "nccl_all_reduce"])
def test_dev_cuda_kernel(kernel: str, order: str) -> None:
    r = run([str(binary(f"dev-cuda/{kernel}")), "--quick"], env={"CUDA_CPU_ORDER": order})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FAIL" not in r.stdout, r.stdout


def test_dev_cuda_nccl_all_reduce() -> None:
    r = run(mpirun(2) + [str(binary("dev-cuda/nccl_all_reduce")), "--quick"])
    assert r.returncode == 0, r.stdout + r.stderr


# ----------------------------------------------------------------------------
# it must be able to fail: defects planted in copies of the production kernels, each reported

# (file, original text, defective text, the dev/cuda program whose check must fail)
PLANTED = {
    "off_by_one_index": (
        "llmc/cuda/layernorm.cuh",
        "for (int c = lane; c < C; c += WARP_SIZE) { sum += to_float(row[c]); }",
        "for (int c = lane; c <= C; c += WARP_SIZE) { sum += to_float(row[c]); }",
        "layernorm_forward",
    ),
    "wrong_shuffle_offset": (
        "llmc/cuda/cuda_common.cuh",
        "for (int offset = 16; offset > 0; offset /= 2) { val += __shfl_xor_sync(0xffffffff, val, offset); }",
        "for (int offset = 16; offset > 0; offset /= 2) { val += __shfl_xor_sync(0xffffffff, val, offset / 2); }",
        "layernorm_forward",
    ),
    "truncating_bf16": (
        "llmc/cuda/encoder.cuh",
        "packed_out[k] = (floatX)(to_float(w[k]) + to_float(p[k]));",
        "packed_out[k] = __ushort_as_bfloat16((unsigned short)(__float_as_uint(to_float(w[k]) + to_float(p[k])) >> 16));",
        "encoder_forward",
    ),
    "wrong_epilogue": (
        "llmc/cuda/matmul.cuh",
        "case GEMM_EPI_GELU_AUX_BIAS: epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS; break;",
        "case GEMM_EPI_GELU_AUX_BIAS: epilogue = CUBLASLT_EPILOGUE_GELU_AUX; break;",
        "matmul_forward",
    ),
    # Llama 3: the 3.1 scaling divides every frequency above the low-frequency wavelength (not only the long ones)
    "wrong_rope_frequency": (
        "llmc/cuda/rope.cuh",
        "double scaled = wavelen > low_wavelen ? f / factor : f;",
        "double scaled = wavelen > high_wavelen ? f / factor : f;",
        "rope",
    ),
    "kv_head_in_wrong_query_group": (
        "llmc/cuda/repeat_kv.cuh",
        "int kv = h / (NH / NKV);",
        "int kv = h % NKV;",
        "repeat_kv",
    ),
    "swiglu_backward_without_gate_term": (
        "llmc/cuda/swiglu.cuh",
        "dg[k] = (floatX)(dk * to_float(u[k]) * sig * (1.0f + gk * (1.0f - sig)));",
        "dg[k] = (floatX)(dk * to_float(u[k]) * sig);",
        "swiglu",
    ),
}


def cuda_cpu_flags() -> tuple[list[str], list[str]]:
    r = run(["make", "-s", "cuda-cpu-flags"])
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(": ", 1) for line in r.stdout.splitlines() if ": " in line)
    return lines["cxx"].split(), lines["libs"].split()


def build_copy(tmp: Path, kernel: str, edit: tuple[str, str, str] | None) -> Path:
    """Copies llmc/ and dev/cuda/, applies the edit, translates and builds dev/cuda/<kernel> (BF16)."""
    src = tmp / "src"
    shutil.copytree(REPO / "llmc", src / "llmc")
    shutil.copytree(REPO / "dev" / "cuda", src / "dev" / "cuda", ignore=shutil.ignore_patterns("build", "*.o"))
    if edit is not None:
        path, original, defective = edit
        text = (src / path).read_text()
        assert text.count(original) == 1, f"{path} changed: the planted defect no longer applies"
        (src / path).write_text(text.replace(original, defective))
    files = [str(p.relative_to(src)) for p in sorted(src.rglob("*")) if p.suffix in (".h", ".cuh", ".cu")]
    r = translate(src, tmp / "out", files)
    assert r.returncode == 0, r.stderr
    cxx, libs = cuda_cpu_flags()
    exe = tmp / kernel
    r = run([*cxx, "-DENABLE_BF16", "-x", "c++", str(tmp / "out/dev/cuda" / f"{kernel}.cu"), "-x", "none", *libs, "-o", str(exe)])
    assert r.returncode == 0, r.stderr[-3000:]
    return exe


def test_planted_defects_harness_passes_unchanged(tmp_path: Path) -> None:
    binary("libcuda_cpu.a")
    exe = build_copy(tmp_path, "layernorm_forward", None)
    r = run([str(exe), "--quick"])
    assert r.returncode == 0, r.stdout + r.stderr


def test_planted_unguarded_shared_read_is_reported_by_initcheck(tmp_path: Path) -> None:
    """block_reduce_sum without its `lane < num_warps` guard: with 512 threads, lanes 16..31 read
    shared_val entries that no warp wrote (garbage on a GPU); initcheck names the first of them."""
    binary("libcuda_cpu.a")
    edit = ("llmc/cuda/cuda_common.cuh", "float v = (lane < num_warps) ? shared_val[lane] : 0.0f;", "float v = shared_val[lane];")
    exe = build_copy(tmp_path, "global_norm", edit)
    r = run([str(exe), "--quick"], env={"CUDA_CPU_ORDER": "forward"})
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    lines = [line for line in r.stderr.splitlines() if line.startswith("cuda_cpu:")]
    assert len(lines) == 1 and re.search(r"kernel global_norm\S* .* thread \(16,0,0\): initcheck: reads 4 bytes at offset 64 "
                                         r"of __shared__ shared_val \(128 bytes, llmc/cuda/cuda_common.cuh:\d+\)", lines[0]), r.stderr


def test_planted_dropped_syncthreads_is_reported_by_racecheck_in_both_orders(tmp_path: Path) -> None:
    """bias_grad_partial_kernel without the barrier between the rows' writes of acc and row 0's sums:
    each fiber order alone shows it only by chance; racecheck names it in both."""
    binary("libcuda_cpu.a")
    edit = ("llmc/cuda/matmul.cuh", "    acc[threadIdx.y][threadIdx.x] = sum;\n    __syncthreads();\n",
            "    acc[threadIdx.y][threadIdx.x] = sum;\n")
    exe = build_copy(tmp_path, "matmul_backward", edit)
    for order in ("forward", "reverse"):
        r = run([str(exe), "--quick"], env={"CUDA_CPU_ORDER": order})
        assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
        lines = [line for line in r.stderr.splitlines() if line.startswith("cuda_cpu:")]
        assert len(lines) == 1 and re.search(r"kernel bias_grad_partial_kernel .* racecheck: (reads|writes) 4 bytes at offset \d+ of "
                                             r"__shared__ acc \(1024 bytes, llmc/cuda/matmul.cuh:\d+\) at llmc/cuda/matmul.cuh:\d+; "
                                             r"thread \(\d+,\d+,0\) (wrote|read) them at llmc/cuda/matmul.cuh:\d+", lines[0]), r.stderr


@pytest.mark.parametrize("defect", sorted(PLANTED))
def test_planted_defect_is_caught(tmp_path: Path, defect: str) -> None:
    """Caught in at least one of the two fiber orders (a missing barrier shows only in the order
    where the reader runs before the writer; the kernel checks above run in both)."""
    binary("libcuda_cpu.a")
    path, original, defective, kernel = PLANTED[defect]
    exe = build_copy(tmp_path, kernel, (path, original, defective))
    caught = []
    for order in ("forward", "reverse"):
        r = run([str(exe), "--quick"], env={"CUDA_CPU_ORDER": order})
        if r.returncode != 0:
            assert "FAIL" in r.stdout or "cuda_cpu:" in r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
            caught.append(order)
    assert caught, f"planted defect {defect} was not caught in either order:\n{r.stdout[-3000:]}"


# ----------------------------------------------------------------------------
# train_gpt2cu itself: two processes with ZeRO-1 against one, and resume


def refs() -> tuple[Path, Path]:
    """GPT-2's d2 with GPT-2's vocabulary: the plain test_gpt2cu runs."""
    model, state = REFS / "gpt2_d2.bin", REFS / "gpt2_d2_debug_state.bin"
    if not model.exists() or not state.exists():
        pytest.fail(f"{model} is missing: `make cuda-cpu-refs` (python dev/cuda_cpu_refs.py) writes it")
    return model, state


def small_refs() -> tuple[Path, Path]:
    """The same d2 with a 509-token vocabulary (padded to 512), its debug state and shards of tokens modulo 509:
    every other run. GPT-2's 50,257-row classifier is over 90% of d2's parameters and most of a step on this target;
    the runs below check flags, processes, streams and resume, which no vocabulary size changes."""
    model, state = SMALL_REFS / "gpt2_d2.bin", SMALL_REFS / "gpt2_d2_debug_state.bin"
    if not model.exists() or not state.exists():
        pytest.fail(f"{model} is missing: `make cuda-cpu-refs` (python dev/cuda_cpu_refs.py --vocab_size 509) writes it")
    return model, state


def test_small_vocab_reference_is_gpt2s_d2_on_tokens_modulo_509() -> None:
    """The small set is the d2 of refs() but for the vocabulary (509, padded to 512), and its batch and shards are
    GPT-2's tinyshakespeare tokens modulo 509 in the GPT-2 shard format."""
    (model, state), (small_model, small_state) = refs(), small_refs()
    header, small = (struct.unpack_from("<8i", path.read_bytes()) for path in (model, small_model))
    assert small[3] == 509 and small[7] == 512, small  # V, Vp
    assert small[:3] + small[4:7] == header[:3] + header[4:7], (header, small)  # magic, version, maxT, L, NH, C
    B, T = struct.unpack_from("<256i", state.read_bytes())[2:4]
    tokens = [struct.unpack_from(f"<{2 * B * T}i", path.read_bytes(), 1024) for path in (state, small_state)]
    assert [t % 509 for t in tokens[0]] == list(tokens[1])
    for split in ("train", "val"):
        shard = (SMALL_REFS / f"tinyshakespeare_{split}.bin").read_bytes()
        magic, version, ntok = struct.unpack_from("<3i", shard)
        ids = struct.unpack_from(f"<{ntok}H", shard, 1024)
        full = (REPO / "dev/data/tinyshakespeare" / f"tiny_shakespeare_{split}.bin").read_bytes()
        assert (magic, version) == (20240520, 1) and ntok >= 4096 and max(ids) < 509
        assert list(ids) == [t % 509 for t in struct.unpack_from(f"<{ntok}H", full, 1024)], split


@pytest.mark.parametrize("value", ["1", "50258", "ten"])
def test_refs_script_refuses_a_bad_vocab_size(value: str) -> None:
    r = run([sys.executable, str(REPO / "dev/cuda_cpu_refs.py"), "--vocab_size", value, "--no_write"])
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert "error:" in last and "--vocab_size" in last and value in last, r.stderr


# The two-process, stream-order and variant (-ge, -r, -a) runs check the first FEW_STEPS of the state's 10 optimizer
# steps: every step runs the same kernels, collectives and stream waits, and the plain one-process test_gpt2cu runs
# (FP32, BF16) check all 10.
FEW_STEPS = 3


def refs_few_steps(tmp_path: Path) -> tuple[Path, Path]:
    model, state = small_refs()
    return model, debug_state_first_steps(state, tmp_path / f"gpt2_d2_debug_state_{FEW_STEPS}_steps.bin", FEW_STEPS)


def step_losses(stdout: str) -> list[float]:
    return [float(m.group(1)) for m in re.finditer(r"^step \d+/\d+ \| loss ([0-9.]+)", stdout, re.M)]


def train_args(model: Path, steps: int, batch: int) -> list[str]:
    """A short train_gpt2cu run of the small-vocabulary d2 `model` on the shards beside it."""
    return ["-e", str(model), "-i", str(model.parent / "tinyshakespeare_train.bin"), "-j",
            str(model.parent / "tinyshakespeare_val.bin"), "-b", str(batch), "-t", "64", "-x", str(steps), "-v", "0",
            "-s", "0", "-l", "1e-3"]


# start-up errors the CPU and GPU trainers share: one wording, so ./train_gpt2 and train_gpt2cu print the same line
SHARED_ERRORS = {"missing checkpoint": ["-e", "no_such_model.bin"], "bad descriptor": ["-e", "d0"], "T > maxT": ["-t", "2048"]}


@pytest.mark.parametrize("case", SHARED_ERRORS)
def test_train_gpt2cu_says_a_shared_start_up_error_in_the_cpu_trainers_words(case: str) -> None:
    make("train_gpt2")
    model, _ = small_refs()
    args = [*train_args(model, 1, 4), *SHARED_ERRORS[case]]
    cpu = assert_one_error_line(run([str(REPO / "train_gpt2"), *args]))
    assert assert_one_error_line(run([str(binary("train_gpt2cu_fp32")), *args])) == cpu


# the same 256-token batches: one process with B=4, or two with B=2 each (rank r reads the r-th half)
@pytest.mark.parametrize("precision,tol", [("fp32", 1e-5), ("bf16", 1e-3)])
def test_train_two_processes_zero1_equal_one(precision: str, tol: float) -> None:
    model, _ = small_refs()
    exe = str(binary(f"train_gpt2cu_{precision}"))
    one = run([exe, *train_args(model, 4, 4)])
    assert one.returncode == 0, one.stdout[-2000:] + one.stderr
    two = run(mpirun(2) + [exe, *train_args(model, 4, 2), "-z", "1"])
    assert two.returncode == 0, two.stdout[-2000:] + two.stderr
    a, b = step_losses(one.stdout), step_losses(two.stdout)
    assert len(a) == len(b) == 4, one.stdout[-1000:] + two.stdout[-1000:]
    worst = max(abs(x - y) for x, y in zip(a, b))
    assert worst <= tol * max(abs(x) for x in a), f"1 process {a} vs 2 processes ZeRO-1 {b}"


@pytest.mark.parametrize("processes", [1, 2])
def test_train_resume_is_bit_identical(tmp_path: Path, processes: int) -> None:
    """Checkpoints at steps 2 and 4; a second run resumes from the step-2 checkpoint alone and must
    write the same step-4 model and training states (every rank's, ZeRO-1 with two), byte for byte."""
    model, _ = small_refs()
    exe = str(binary("train_gpt2cu_bf16"))
    launch = mpirun(2) if processes == 2 else []
    args = [*train_args(model, 4, 4 // processes), "-n", "2"] + (["-z", "1"] if processes == 2 else [])
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    r = run(launch + [exe, *args, "-o", str(straight)])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    resumed.mkdir()
    for p in straight.glob("*00000002*"):
        shutil.copy(p, resumed / p.name)
    r = run(launch + [exe, *args, "-o", str(resumed), "-y", "1"])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    assert "resumed from" in r.stdout
    names = ["model_00000004.bin"] + [f"state_00000004_{rank:05d}.bin" for rank in range(processes)]
    for name in names:
        assert (straight / name).read_bytes() == (resumed / name).read_bytes(), f"{name} differs after resume"


def test_master_weights_start_from_the_fp32_checkpoint() -> None:
    model, _ = refs()
    r = run([str(binary("test_train_gpu")), str(model)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"\d+ passed, 0 failed", r.stdout), r.stdout


def test_nccl_id_over_fs_ignores_a_stale_file(tmp_path: Path) -> None:
    """-pi fs in a reused directory: stale id files from earlier runs (the old fixed name, an earlier
    launch's nonce) are not taken, the ranks agree on the new id (the emulated ncclCommInitRank compares it over MPI), and
    rank 0 removes the file once every rank has joined."""
    model, _ = small_refs()
    shared = tmp_path / "shared"
    shared.mkdir()
    stale = ["ncclUniqueId.sync", "ncclUniqueId.cuda-cpu-earlier-run.sync"]  # the old fixed name; an earlier launch's
    for name in stale:
        (shared / name).write_bytes(os.urandom(128))
    train = f"{binary('train_gpt2cu_bf16')} {' '.join(train_args(model, 1, 2))} -pi fs -pf {shared} -pn 2"
    cmd = mpirun(2) + ["-x", "LLMC_RUN_ID=cuda-cpu-test", "sh", "-c", f'exec {train} -pr "$OMPI_COMM_WORLD_RANK"']
    r = run(cmd)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    assert "2 processes" in r.stdout and len(step_losses(r.stdout)) == 1, r.stdout[-2000:]
    assert sorted(p.name for p in shared.iterdir()) == sorted(stale), list(shared.iterdir())


def test_launched_processes_without_their_numbering_are_refused(tmp_path: Path) -> None:
    """mpirun -np 2 with -pi fs but no -pn/-pr used to start two independent one-process runs that
    wrote the same checkpoints; now each refuses with one line."""
    model, _ = small_refs()
    cmd = mpirun(2) + ["-x", "LLMC_RUN_ID=cuda-cpu-test", str(binary("train_gpt2cu_bf16")), *train_args(model, 1, 2),
                       "-pi", "fs", "-pf", str(tmp_path)]
    r = run(cmd)
    assert r.returncode != 0
    assert "was launched as rank" in r.stderr and "-pn 1 -pr 0" in r.stderr, r.stderr[-2000:]


# ----------------------------------------------------------------------------
# test_gpt2cu against the reference, with the variants no GPU run had exercised:
# GELU fused into the cuBLASLt epilogues (GELU_AUX_BIAS forward, DGELU backward), recompute levels,
# gradient accumulation over micro-batches (loss scaling, bf16 accumulation), two processes with ZeRO-1

TEST_GPT2CU = [
    ("fp32", []),
    ("bf16", []),
    ("fp32", ["-ge", "1", "-r", "1", "-a", "2"]),
    ("bf16", ["-ge", "1", "-r", "2", "-a", "2"]),
]


@pytest.mark.parametrize("precision,flags", TEST_GPT2CU, ids=[f"{p}{''.join(f)}" for p, f in TEST_GPT2CU])
def test_gpt2cu(tmp_path: Path, precision: str, flags: list[str]) -> None:
    model, state = refs_few_steps(tmp_path) if flags else refs()
    r = run([str(binary(f"test_gpt2cu_{precision}")), "-e", str(model), "-s", str(state), "-o", str(tmp_path / "r"), *flags])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert re.search(r"^\d+ passed, 0 failed", r.stdout, re.M), r.stdout[-2000:]


# (ZeRO stage, CUDA_CPU_STREAM_ORDER): the default order runs a synchronized stream's work before the other streams';
# order 2 runs the other streams first (the communication stream before the compute stream's earlier work)
TWO_PROCESS_RUNS = [("0", "1"), ("1", "1"), ("1", "2")]


@pytest.mark.parametrize("zero,order", TWO_PROCESS_RUNS, ids=[f"z{z}-order{o}" for z, o in TWO_PROCESS_RUNS])
def test_gpt2cu_two_processes(tmp_path: Path, zero: str, order: str) -> None:
    model, state = refs_few_steps(tmp_path)
    r = run(mpirun(2) + ["-x", f"CUDA_CPU_STREAM_ORDER={order}", str(binary("test_gpt2cu_bf16")), "-e", str(model), "-s",
                         str(state), "-o", str(tmp_path / "r"), "-z", zero, "-a", "2"])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert re.search(r"^\d+ passed, 0 failed", r.stdout, re.M), r.stdout[-2000:]


def test_planted_missing_wait_for_the_compute_stream_is_reported(tmp_path: Path) -> None:
    """multi_gpu.cuh's gradient reduction without the communication stream's wait for the compute stream: the
    all-reduce may read gradients the backward has not written yet. In the default order the compute stream's
    earlier work happens to run first (the test passes: a defect the default order cannot see); with the other
    streams run first (CUDA_CPU_STREAM_ORDER=2) the all-reduce reaches a gradient range a pending GEMM still
    writes, and the run fails with the stream-order line."""
    binary("libcuda_cpu.a")
    src = tmp_path / "src"
    shutil.copytree(REPO / "llmc", src / "llmc")
    for name in ("train_gpt2.cu", "test_gpt2.cu"):
        shutil.copy(REPO / name, src / name)
    wait = "    stream_wait_stream(mg->nccl_stream, compute, mg->compute_ready);\n    ncclCheck(ncclGroupStart());\n    for (int r = 0;"
    text = (src / "llmc/cuda/multi_gpu.cuh").read_text()
    assert text.count(wait) == 1, "llmc/cuda/multi_gpu.cuh changed: the planted defect no longer applies"
    (src / "llmc/cuda/multi_gpu.cuh").write_text(text.replace(wait, "    ncclCheck(ncclGroupStart());\n    for (int r = 0;"))
    files = [str(p.relative_to(src)) for p in sorted(src.rglob("*")) if p.suffix in (".h", ".cuh", ".cu")]
    r = translate(src, tmp_path / "out", files)
    assert r.returncode == 0, r.stderr
    cxx, libs = cuda_cpu_flags()
    exe = tmp_path / "test_gpt2cu_bf16"
    r = run([*cxx, "-DENABLE_BF16", f"-I{tmp_path / 'out'}", "-x", "c++", str(tmp_path / "out" / "test_gpt2.cu"), "-x", "none",
             *libs, "-o", str(exe)], cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    model, state = refs_few_steps(tmp_path)
    results = {}
    for order in ("1", "2"):
        results[order] = run(mpirun(2) + ["-x", f"CUDA_CPU_STREAM_ORDER={order}", str(exe), "-e", str(model), "-s", str(state),
                                          "-o", str(tmp_path / f"r{order}"), "-z", "0"])
    assert results["1"].returncode == 0, results["1"].stdout[-2000:] + results["1"].stderr[-2000:]
    eager = results["2"]
    assert eager.returncode != 0, eager.stdout[-2000:]
    assert re.search(r"^cuda_cpu: stream order: ncclAllReduce on a non-blocking stream would run before \S+, issued earlier to "
                     r"a blocking stream, and nothing orders the two", eager.stderr, re.M), eager.stderr[-3000:]


@pytest.mark.parametrize("args", [["7"], ["foo"], ["1", "2"]])
def test_dev_cuda_bad_arguments_are_refused(args: list[str]) -> None:
    """A bad version or argument used to run no version and still report success."""
    r = run([str(binary("dev-cuda/layernorm_forward")), *args])
    assert r.returncode == 1, r.stdout + r.stderr
    assert "unexpected argument" in r.stderr.splitlines()[0], r.stderr
    assert "all versions match" not in r.stdout
