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
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "build" / "cuda_cpu"
REFS = REPO / "build" / "cuda_cpu_refs"
MPIRUN = REPO / ".venv" / "bin" / "mpirun"
DEV_KERNELS = sorted(p.stem for p in (REPO / "dev" / "cuda").glob("*.cu"))


def binary(name: str) -> Path:
    path = OUT / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make cuda-cpu-build` first")
    return path


def run(cmd: list[str], timeout: int = 600, env: dict[str, str] | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env)


def mpirun(n: int) -> list[str]:
    # one worker thread per process: the processes share the machine's cores
    return [str(MPIRUN), "-np", str(n), "--oversubscribe", "-x", "CUDA_CPU_THREADS=1", "-x", "OMP_NUM_THREADS=1"]


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
}


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_device_defect_is_reported(defect: str) -> None:
    r = run([str(binary("test_device")), defect])
    assert r.returncode == 1, f"defect {defect} not reported:\n{r.stdout}{r.stderr}"
    lines = [line for line in r.stderr.splitlines() if line.startswith("cuda_cpu:")]
    assert len(lines) == 1 and re.search(DEFECTS[defect], lines[0]), r.stderr


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
    )
    r = run([sys.executable, str(REPO / "dev/cuda_cpu/translate.py"), "--root", str(tmp_path), "--out", str(tmp_path / "o"), "k.cu"])
    assert r.returncode == 0, r.stderr
    out = (tmp_path / "o" / "k.cu").read_text().splitlines()
    assert out[0] == '#line 1 "k.cu"'
    body = out[1:]
    assert body[0] == "// not a launch: k<<<1, 2>>>(x)"
    assert body[2].strip().startswith('cuda_cpu_launch(cuda_cpu_config(dim3(n, 2), 256, 0, s), "k<float, 4>"')
    assert "[&]() { k<float, 4>(x," in body[2]
    assert 'g("<<<")' in body[5]
    assert body[7] == "int line_after = __LINE__;"
    assert len(body) == 8


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


@pytest.mark.parametrize("kernel", [k for k in DEV_KERNELS if k != "nccl_all_reduce"])
def test_dev_cuda_kernel(kernel: str) -> None:
    r = run([str(binary(f"dev-cuda/{kernel}")), "--quick"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FAIL" not in r.stdout, r.stdout


def test_dev_cuda_nccl_all_reduce() -> None:
    r = run(mpirun(2) + [str(binary("dev-cuda/nccl_all_reduce")), "--quick"])
    assert r.returncode == 0, r.stdout + r.stderr
