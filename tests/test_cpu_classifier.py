"""The classifier's row kernels (llmc/cpu/classifier_cpu.h): the fused kernel (LLMC_CLASSIFIER=fused, the default:
three passes a row, and on -p bf16 with oneDNN dlogits written in bf16 alone) against the passes it replaced
(LLMC_CLASSIFIER=passes), bit for bit.

- dev/test/test_classifier: one row of each kernel on odd V, softcap on and off, target -1, every buffer layout the
  chunks use; the chunks against the whole-buffer classifier under both kernels; the chunks on -p bf16 with both
  kernels (chunk sizes that do and do not divide the rows, masked rows, kept logits); LLMC_CLASSIFIER's choice and
  error line. On a CPU with AVX512-BF16 (or AMX) it must have run the bf16 dlogits (its "bf16 dlogits:" line).
- GPT-2 (no softcap) and nanochat (softcap): 3 steps of fp32 and of -p bf16 (forced, LLMC_BF16_CHECK_MIRRORS=1) with
  each kernel write the same checkpoint and optimizer state, byte for byte; GPT-2 -p bf16 too over two chunks of rows
  (1024 and 6); an unknown LLMC_CLASSIFIER is one error line.

Runtime: about 20 s on 2 cores (most of it the trainers starting: d2 at GPT-2's vocabulary).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import HAS_AMX_BF16, HAS_AVX512_BF16, REPO, TS_TRAIN, assert_one_error_line, make, run


@pytest.fixture(scope="module")
def test_classifier() -> Path:
    make("dev/test/test_classifier")
    return REPO / "dev" / "test" / "test_classifier"


@pytest.fixture(scope="module")
def trainers(tinyshakespeare) -> dict[str, Path]:
    make("train_gpt2", "train_nanochat")
    return {name: REPO / f"train_{name}" for name in ("gpt2", "nanochat")}


def test_fused_classifier_rows_give_the_bits_of_the_passes(test_classifier: Path) -> None:
    proc = run([test_classifier], env={"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"})
    m = re.search(r"(\d+) passed, (\d+) failed", proc.stdout)
    assert m and int(m.group(2)) == 0 and int(m.group(1)) >= 1200, proc.stdout[-2000:]
    if HAS_AVX512_BF16 or HAS_AMX_BF16:  # oneDNN has a bf16 kernel: the bf16 dlogits were the ones checked
        assert "bf16 dlogits: written by the fused row pass in bf16 alone" in proc.stdout, proc.stdout[-2000:]


def checkpoint(trainer: Path, out: Path, precision: str, kernel: str, B: int, T: int, steps: int) -> bytes:
    """Model and optimizer state after `steps` steps of B x T with the row kernel given."""
    cmd = [trainer, "-e", "d2", "-i", TS_TRAIN, "-j", "", "-b", B, "-t", T, "-x", steps, "-v", 0, "-s", 0,
           "-p", precision, "-o", out, "-n", steps]
    run(cmd, env={"OMP_NUM_THREADS": "2", "LLMC_BF16": "force", "LLMC_BF16_CHECK_MIRRORS": "1",
                  "LLMC_CLASSIFIER": kernel})
    return (out / f"model_{steps:08d}.bin").read_bytes() + (out / f"state_{steps:08d}_00000.bin").read_bytes()


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("family", ["gpt2", "nanochat"])
def test_the_classifier_passes_train_the_same_bits(trainers: dict[str, Path], tmp_path: Path, family: str,
                                                   precision: str) -> None:
    """3 steps of B=4, T=64 (one chunk of 256 rows)."""
    fused = checkpoint(trainers[family], tmp_path / "fused", precision, "fused", 4, 64, 3)
    passes = checkpoint(trainers[family], tmp_path / "passes", precision, "passes", 4, 64, 3)
    assert fused == passes


def test_the_classifier_passes_train_the_same_bits_over_two_chunks(trainers: dict[str, Path], tmp_path: Path) -> None:
    """GPT-2 -p bf16, 2 steps of B=2, T=515: a chunk of 1024 rows and one of 6."""
    fused = checkpoint(trainers["gpt2"], tmp_path / "fused", "bf16", "fused", 2, 515, 2)
    passes = checkpoint(trainers["gpt2"], tmp_path / "passes", "bf16", "passes", 2, 515, 2)
    assert fused == passes


def test_a_bad_classifier_kernel_is_one_error_line(trainers: dict[str, Path]) -> None:
    proc = run([trainers["gpt2"], "-e", "d1", "-i", TS_TRAIN, "-j", "", "-b", 1, "-t", 16, "-x", 1, "-v", 0, "-s", 0],
               env={"LLMC_CLASSIFIER": "rows"}, check=False)
    assert "LLMC_CLASSIFIER=rows: use fused or passes" in assert_one_error_line(proc)
