"""Every CPU build variant gives the reference's numbers: BLAS=mkl, BLAS=openblas, BLAS=none (the
blocked kernel of llmc/matmul.h), and the bf16 mixed-precision path (-p bf16).

- dev/test/test_matmul_<blas>: the GEMMs against a double-precision reference (odd shapes)
- test_gpt2_<blas> on the d2 reference: logits, loss, all 16 gradients and 10 AdamW losses
  within test_gpt2's tolerances
- train_gpt2 -p bf16 vs -p fp32: 10 AdamW steps (lr 1e-3) on one batch (d2, B=4, T=64); every
  loss within BF16_LOSS_TOL = 5e-3 (absolute) of the fp32 one. bf16 rounds the GEMM inputs
  (8-bit mantissa, relative error <= 2^-9 per operand, sums in fp32); measured differences
  are <= 3e-4 here (losses 10.8 .. 8.2) and <= 1e-3 at d12. The two runs must also differ
  (the flag reaches the GEMMs).

No timing is asserted here (make bench measures speed). Runtime: about a minute on 2 cores,
mostly compiling the variants.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import REPO, TS_TRAIN, make, run

VARIANTS = ["mkl", "openblas", "none"]
BF16_LOSS_TOL = 5e-3
ONE_THREAD = {"OMP_NUM_THREADS": "1"}
TWO_THREADS = {"OMP_NUM_THREADS": "2"}


def summary_counts(output: str) -> tuple[int, int]:
    """(passed, failed) from a C test's closing line "N passed, M failed"."""
    m = re.search(r"(\d+) passed, (\d+) failed", output)
    assert m, f"no summary line in:\n{output[-2000:]}"
    return int(m.group(1)), int(m.group(2))


@pytest.mark.parametrize("blas", VARIANTS)
def test_matmul_variant_matches_double_reference(blas: str) -> None:
    make(f"dev/test/test_matmul_{blas}")
    proc = run([REPO / "dev" / "test" / f"test_matmul_{blas}"], env=TWO_THREADS)
    backend = "blocked" if blas == "none" else blas
    assert f"matmul backend: {backend}" in proc.stdout
    passed, failed = summary_counts(proc.stdout)
    assert failed == 0 and passed > 300


@pytest.mark.parametrize("blas", VARIANTS)
def test_gpt2_variant_matches_reference(blas: str, d2_reference: Path) -> None:
    make(f"test_gpt2_{blas}")
    proc = run([REPO / f"test_gpt2_{blas}", "-e", "gpt2_d2.bin", "-s", "gpt2_d2_debug_state.bin"],
               cwd=d2_reference, env=TWO_THREADS)
    passed, failed = summary_counts(proc.stdout)
    assert failed == 0 and passed >= 28


def overfit_losses(binary: Path, cwd: Path, precision: str) -> list[float]:
    """Losses (main.log, 6 decimals) of 10 steps on the first batch (d2 from scratch, B=4, T=64, constant LR)."""
    out = cwd / precision
    run([binary, "-e", "d2", "-i", TS_TRAIN, "-j", "", "-b", 4, "-t", 64, "-x", 10, "-a", 1, "-k", "constant",
         "-l", "1e-3", "-v", 0, "-s", 0, "-o", out, "-p", precision], cwd=cwd, env=ONE_THREAD)
    steps = {int(m.group(1)): float(m.group(2))
             for m in re.finditer(r"^s:(\d+) trl:(\S+)", (out / "main.log").read_text(), re.M)}
    assert sorted(steps) == list(range(10)), steps
    return [steps[k] for k in range(10)]


def test_bf16_losses_follow_fp32_within_tolerance(tinyshakespeare, tmp_path: Path) -> None:
    make("train_gpt2")
    fp32 = overfit_losses(REPO / "train_gpt2", tmp_path, "fp32")
    bf16 = overfit_losses(REPO / "train_gpt2", tmp_path, "bf16")
    diffs = [abs(a - b) for a, b in zip(fp32, bf16)]
    assert max(diffs) <= BF16_LOSS_TOL, f"fp32 {fp32}\nbf16 {bf16}"
    assert max(diffs) > 0.0, "-p bf16 gave exactly the fp32 losses: the flag does not reach the GEMMs"
    assert bf16[-1] < bf16[0] - 1.0, f"bf16 training does not learn the batch: {bf16}"


def test_bad_precision_flag_is_one_error_line(tinyshakespeare, tmp_path: Path) -> None:
    make("train_gpt2")
    proc = run([REPO / "train_gpt2", "-e", "d2", "-i", TS_TRAIN, "-p", "fp16"], cwd=tmp_path, check=False)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "flag -p" in lines[0] and "fp16" in lines[0], proc.stderr
