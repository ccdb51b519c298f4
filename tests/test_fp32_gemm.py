"""LLMC_FP32_GEMM=blas|builtin (llmc/cpu/matmul.h): which code runs the fp32 GEMMs of a build with a BLAS. The
built-in kernel, chosen in the default build, computes what a BLAS=none build computes, bit for bit; blas (the
default) what the build always ran; anything else is one error line."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO, assert_one_error_line, make, run


def checkpoint_after_steps(program: str, out: Path, train_bin: Path, env: dict[str, str]) -> bytes:
    run([REPO / program, "-e", "d2", "-b", 2, "-t", 32, "-x", 3, "-v", 0, "-s", 0, "-o", out, "-n", 3, "-i", train_bin],
        env={"OMP_NUM_THREADS": "2", **env})
    return (out / "model_00000003.bin").read_bytes()


@pytest.fixture(scope="module")
def built(tinyshakespeare) -> Path:
    make("train_gpt2", "train_gpt2_none")
    return tinyshakespeare[0]


def test_builtin_fp32_gemm_computes_what_the_blas_free_build_computes(built, tmp_path: Path) -> None:
    builtin = checkpoint_after_steps("train_gpt2", tmp_path / "builtin", built, {"LLMC_FP32_GEMM": "builtin"})
    none = checkpoint_after_steps("train_gpt2_none", tmp_path / "none", built, {})
    assert builtin == none


def test_blas_fp32_gemm_is_the_default(built, tmp_path: Path) -> None:
    blas = checkpoint_after_steps("train_gpt2", tmp_path / "blas", built, {"LLMC_FP32_GEMM": "blas"})
    default = checkpoint_after_steps("train_gpt2", tmp_path / "default", built, {"LLMC_FP32_GEMM": ""})
    builtin = checkpoint_after_steps("train_gpt2", tmp_path / "builtin", built, {"LLMC_FP32_GEMM": "builtin"})
    assert blas == default
    assert blas != builtin  # two kernels, two summation orders: the variable really switched


def test_a_bad_fp32_gemm_choice_is_one_error_line(built) -> None:
    proc = run([REPO / "train_gpt2", "-e", "d2", "-x", 1, "-i", built], check=False,
               env={"LLMC_FP32_GEMM": "fast", "OMP_NUM_THREADS": "1"})
    assert assert_one_error_line(proc) == "error: LLMC_FP32_GEMM=fast: use blas or builtin"
