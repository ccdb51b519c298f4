"""The CPU code paths chosen at run time, each one run on this machine wherever it can run.

- llmc/cpu/matmul.h's built-in fp32 GEMM picks its micro-kernel from what the CPU reports (AVX-512, else
  AVX2 + FMA, else generic code); LLMC_MATMUL_ISA forces one. dev/test/test_matmul_none (the
  kernels against a double-precision reference on odd shapes, 1 and 2 threads bit-identical) runs
  under every kernel this CPU supports, and names the kernel it ran. A kernel the CPU lacks, or an
  unknown name, is one error line.

- train_gpt2 -p bf16 where bf16 does not pay (no AVX512-BF16, or the start-up calibration says so)
  prints one line saying it trains in fp32 and why, then gives exactly the -p fp32 losses; where
  it pays, one line with the two rates, then exactly the LLMC_BF16=force losses. The calibration's
  rates are injected (LLMC_BF16_RATES) so both answers are proven on every CPU.

- llmc/cpu/layernorm_cpu.h's norm kernels: the grouped ones (LLMC_NORM=grouped; the default, fused, is them with the
  weight gradients summed in the same pass) against the row-at-a-time ones (LLMC_NORM=rows), bit for bit
  (dev/test/test_norm_cpu, and train_gpt2's losses); LayerNorm's backward with and without the next group's rows
  asked for ahead (LLMC_NORM_AHEAD=1, 0), the same losses, and a bad value one error line.

No timing is asserted here (make bench measures speed). Runtime: about 30 s on 2 cores.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import BF16_INJECTED_DECISIONS, REPO, TS_TRAIN, assert_one_error_line, bf16_decision, make, run

TEST_MATMUL = REPO / "dev" / "test" / "test_matmul_none"
# the program's exhaustive checks of the AVX-512 exp and bf16 roundings (8 s of its 9 here) do not depend on the
# blocked kernel's ISA: tests/test_cpu_variants.py runs them in this build, these runs leave them out
NO_VECMATH = {"LLMC_TEST_VECMATH": "0"}


def cpu_flags() -> set[str]:
    """The feature flags of the first CPU in /proc/cpuinfo (empty where there is none)."""
    info = Path("/proc/cpuinfo")
    if not info.exists():
        return set()
    m = re.search(r"^flags\s*:(.*)$", info.read_text(), re.M)
    return set(m.group(1).split()) if m else set()


FLAGS = cpu_flags()
HAS_AVX512 = "avx512f" in FLAGS and "fma" in FLAGS
HAS_AVX2 = "avx2" in FLAGS and "fma" in FLAGS
ISAS = [pytest.param("avx512", marks=pytest.mark.skipif(not HAS_AVX512, reason="this CPU has no AVX-512")),
        pytest.param("avx2", marks=pytest.mark.skipif(not HAS_AVX2, reason="this CPU has no AVX2/FMA")),
        "generic"]


@pytest.fixture(scope="module")
def test_matmul() -> Path:
    make("dev/test/test_matmul_none")
    return TEST_MATMUL


@pytest.mark.parametrize("isa", ISAS)
def test_blocked_kernel_of_each_supported_isa_matches_double_reference(test_matmul: Path, isa: str) -> None:
    proc = run([test_matmul], env={"OMP_NUM_THREADS": "2", "LLMC_MATMUL_ISA": isa, **NO_VECMATH})
    assert f"blocked fp32 kernel: {isa}," in proc.stdout, proc.stdout[:300]
    m = re.search(r"(\d+) passed, (\d+) failed", proc.stdout)
    assert m and int(m.group(2)) == 0 and int(m.group(1)) > 300, proc.stdout[-2000:]


def test_best_kernel_is_chosen_without_the_variable(test_matmul: Path) -> None:
    proc = run([test_matmul], env={"OMP_NUM_THREADS": "1", "LLMC_MATMUL_ISA": "", **NO_VECMATH})
    best = "avx512" if HAS_AVX512 else "avx2" if HAS_AVX2 else "generic"
    assert f"blocked fp32 kernel: {best}," in proc.stdout, proc.stdout[:300]


def test_the_exhaustive_checks_are_left_out_only_when_asked(test_matmul: Path) -> None:
    proc = run([test_matmul], env={"OMP_NUM_THREADS": "2", **NO_VECMATH})
    assert "on all 2^32 floats: not run (LLMC_TEST_VECMATH=0)" in proc.stdout, proc.stdout[-2000:]
    proc = run([test_matmul], env={"LLMC_TEST_VECMATH": "no"}, check=False)
    assert assert_one_error_line(proc) == "error: LLMC_TEST_VECMATH=no: use 0 or 1"


def test_unknown_kernel_name_is_one_error_line(test_matmul: Path) -> None:
    proc = run([test_matmul], env={"LLMC_MATMUL_ISA": "sse9"}, check=False)
    assert assert_one_error_line(proc) == "error: LLMC_MATMUL_ISA=sse9: use avx512, avx2 or generic"


@pytest.mark.skipif(HAS_AVX512, reason="this CPU runs AVX-512")
def test_kernel_the_cpu_lacks_is_one_error_line(test_matmul: Path) -> None:
    proc = run([test_matmul], env={"LLMC_MATMUL_ISA": "avx512"}, check=False)
    best = "avx2" if HAS_AVX2 else "generic"
    assert assert_one_error_line(proc) == f"error: LLMC_MATMUL_ISA=avx512: this CPU supports only {best}"


# ---------------------------------------------------------------------------- -p bf16 where it pays
# Where bf16 does not pay the trainer says so in one line naming the reason and trains in fp32: the
# same losses as -p fp32, bit for bit; where it pays it says so with the two rates and trains in
# bf16: the losses of LLMC_BF16=force. Both answers are steered on every CPU by injecting the
# calibration's rates (LLMC_BF16_RATES) or hiding AVX512-BF16 (LLMC_BF16_NATIVE=0); the real
# calibration is checked for agreeing with the rates it prints.


def d2_overfit(tmp_path: Path, name: str, precision: str, env: dict[str, str]) -> tuple[str, list[str]]:
    """stdout and the train-loss lines of main.log: 5 steps of d2 from scratch on one batch, 1 thread."""
    out = tmp_path / name
    proc = run([REPO / "train_gpt2", "-e", "d2", "-i", TS_TRAIN, "-j", "", "-b", 4, "-t", 64, "-x", 5, "-a", 1,
                "-v", 0, "-s", 0, "-o", out, "-p", precision], cwd=tmp_path,
               env={"OMP_NUM_THREADS": "1", "LLMC_BF16": "", "LLMC_BF16_RATES": "", **env})
    return proc.stdout, re.findall(r"^s:\d+ trl:\S+", (out / "main.log").read_text(), re.M)


@pytest.fixture(scope="module")
def fp32_and_bf16_losses(tinyshakespeare, tmp_path_factory) -> tuple[list[str], list[str]]:
    """The d2 losses of -p fp32 and of -p bf16 with LLMC_BF16=force (no -p bf16 line)."""
    make("train_gpt2")
    tmp = tmp_path_factory.mktemp("bf16")
    out32, fp32 = d2_overfit(tmp, "fp32", "fp32", {})
    out16, bf16 = d2_overfit(tmp, "bf16", "bf16", {"LLMC_BF16": "force"})
    assert "-p bf16:" not in out32 + out16 and len(fp32) == len(bf16) == 5
    assert bf16 != fp32
    return fp32, bf16


@pytest.mark.parametrize(("env", "kept"), BF16_INJECTED_DECISIONS, ids=lambda v: str(v).replace(" ", ""))
def test_bf16_decision_steered_both_ways(fp32_and_bf16_losses, tmp_path: Path, env: dict[str, str], kept: bool) -> None:
    out, losses = d2_overfit(tmp_path, "run", "bf16", env)
    assert bf16_decision(out, env) == kept
    assert losses == fp32_and_bf16_losses[1 if kept else 0]


def test_bf16_real_calibration_agrees_with_its_rates(fp32_and_bf16_losses, tmp_path: Path) -> None:
    out, losses = d2_overfit(tmp_path, "run", "bf16", {})
    kept = bf16_decision(out, {})
    assert losses == fp32_and_bf16_losses[1 if kept else 0]


@pytest.mark.parametrize("rates", ["fast", "184", "184,106,1", "0,100", "184,-1", "184,106x"])
def test_bad_injected_rates_are_one_error_line(tmp_path: Path, rates: str) -> None:
    make("train_gpt2")
    proc = run([REPO / "train_gpt2", "-e", "d2", "-i", TS_TRAIN, "-j", "", "-x", 1, "-p", "bf16", "-o", tmp_path],
               cwd=tmp_path, env={"LLMC_BF16": "", "LLMC_BF16_RATES": rates}, check=False)
    assert assert_one_error_line(proc) == (f"error: LLMC_BF16_RATES={rates}: use BF16,FP32 (two positive GFLOP/s "
                                           "rates, e.g. 180,100)")


def test_fp32_run_never_calibrates(tinyshakespeare, tmp_path: Path) -> None:
    """-p fp32 asks nothing about bf16: no line, and the injected rates are not even read."""
    make("train_gpt2")
    out, losses = d2_overfit(tmp_path, "fp32", "fp32", {"LLMC_BF16_RATES": "bad"})
    assert "-p bf16" not in out and len(losses) == 5


# ---------------------------------------------------------------------------- the norms' kernels
# llmc/cpu/layernorm_cpu.h's grouped kernels (LLMC_NORM=grouped: 16 rows' sums at once) give the bits of
# the row-at-a-time kernels (LLMC_NORM=rows): dev/test/test_norm_cpu checks every norm function, forward and backward,
# C = 16, 100, 768, accumulate 0 and 1, the weightless RMSNorm, 1 and 2 threads, any difference failing; here the
# trainers too, by their losses.


def test_norm_grouped_kernels_match_rows_kernels_bit_for_bit() -> None:
    make("dev/test/test_norm_cpu")
    proc = run([REPO / "dev" / "test" / "test_norm_cpu"], env={"OMP_NUM_THREADS": "2", "LLMC_NORM": ""})
    m = re.search(r"(\d+) passed, (\d+) failed", proc.stdout)
    assert m and int(m.group(2)) == 0 and int(m.group(1)) >= 270, proc.stdout[-2000:]


def test_train_gpt2_losses_are_the_same_with_either_norm_kernel(tinyshakespeare, tmp_path: Path) -> None:
    """d2 (C = 128), 3 steps, 2 threads: every train-loss line of LLMC_NORM=rows equals the default's."""
    make("train_gpt2")
    logs = []
    for kernel in ("rows", "grouped"):
        out = tmp_path / kernel
        run([REPO / "train_gpt2", "-e", "d2", "-i", TS_TRAIN, "-j", "", "-b", 4, "-t", 64, "-x", 3, "-v", 0,
             "-s", 0, "-o", out], cwd=tmp_path, env={"OMP_NUM_THREADS": "2", "LLMC_NORM": kernel})
        logs.append(re.findall(r"^s:\d+ trl:\S+", (out / "main.log").read_text(), re.M))
    assert len(logs[0]) == 3 and logs[0] == logs[1]


def test_train_gpt2_losses_are_the_same_with_the_layernorm_backward_asking_ahead_or_not(tinyshakespeare,
                                                                                       tmp_path: Path) -> None:
    """d2, 3 steps, 2 threads: LLMC_NORM_AHEAD=0 (no prefetch of the next group's rows) gives the default's losses."""
    make("train_gpt2")
    logs = []
    for ahead in ("1", "0"):
        out = tmp_path / f"ahead{ahead}"
        run([REPO / "train_gpt2", "-e", "d2", "-i", TS_TRAIN, "-j", "", "-b", 4, "-t", 64, "-x", 3, "-v", 0,
             "-s", 0, "-o", out], cwd=tmp_path, env={"OMP_NUM_THREADS": "2", "LLMC_NORM_AHEAD": ahead})
        logs.append(re.findall(r"^s:\d+ trl:\S+", (out / "main.log").read_text(), re.M))
    assert len(logs[0]) == 3 and logs[0] == logs[1]
    proc = run([REPO / "train_gpt2", "-e", "d2", "-i", TS_TRAIN, "-j", "", "-x", 1, "-o", tmp_path / "bad"],
               cwd=tmp_path, env={"LLMC_NORM_AHEAD": "yes"}, check=False)
    assert assert_one_error_line(proc) == "error: LLMC_NORM_AHEAD=yes: use 0 or 1"


def test_unknown_norm_kernel_is_one_error_line(tinyshakespeare, tmp_path: Path) -> None:
    make("train_gpt2")
    proc = run([REPO / "train_gpt2", "-e", "d2", "-i", TS_TRAIN, "-j", "", "-x", 1, "-o", tmp_path], cwd=tmp_path,
               env={"LLMC_NORM": "fast"}, check=False)
    assert assert_one_error_line(proc) == "error: LLMC_NORM=fast: use rows, grouped or fused"
