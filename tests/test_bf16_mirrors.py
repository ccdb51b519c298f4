"""The bf16 copies (mirrors) of the activations the GEMMs read (llmc/cpu/matmul.h): on -p bf16 with oneDNN every
layer that writes such an activation, or activation gradient, writes its bf16 copy in the same pass, and no GEMM
rounds it again. LLMC_BF16_CHECK_MIRRORS=1 compares every mirrored GEMM operand with its fp32 buffer before the
GEMM reads it and stops at the first stale element, so a writer that forgets its copy fails here. Each CPU trainer
runs a few steps of -p bf16 (forced) so, with validation and sampling, under AdamW and Muon."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import HAS_AMX_BF16, HAS_AVX512_BF16, REPO, make, run
from pyllmc.families import REGISTRY

TRAINERS = [row.trainer for row in REGISTRY]

# the mirrors exist on oneDNN's bf16 path only, which needs a bf16 kernel
pytestmark = pytest.mark.skipif(not (HAS_AVX512_BF16 or HAS_AMX_BF16),
                                reason="no AVX512-BF16 or AMX-BF16: oneDNN has no bf16 kernel, so no bf16 copies")

STEPS = ["-e", "d2", "-b", 2, "-t", 32, "-x", 3, "-v", 3, "-s", 3, "-g", 8, "-p", "bf16"]
ENV = {"OMP_NUM_THREADS": "1", "LLMC_BF16": "force", "LLMC_BF16_CHECK_MIRRORS": "1"}


@pytest.fixture(scope="module")
def built() -> None:
    make(*TRAINERS)


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
@pytest.mark.parametrize("trainer", TRAINERS)
def test_bf16_copies_are_never_stale(built, tinyshakespeare, request, tmp_path: Path, trainer: str, optimizer: str):
    row = next(row for row in REGISTRY if row.trainer == trainer)
    if row.depth_vocab is None:  # its reference files' shards and tokenizer file (-e d2 takes V from it)
        ref: Path = request.getfixturevalue(f"{row.name}_references")
        shutil.copy(ref / f"{row.name}_tokenizer.bin", tmp_path)
        data = [ref / "ts" / "tiny_shakespeare_train.bin", ref / "ts" / "tiny_shakespeare_val.bin"]
    else:
        data = list(tinyshakespeare)
    proc = run([REPO / trainer, "-i", data[0], "-j", data[1], *STEPS, "-op", optimizer], cwd=tmp_path, env=ENV,
               check=False)
    assert proc.returncode == 0, f"{trainer} exited {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    assert "step 3/3" in proc.stdout


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_bf16_copies_change_no_bit(built, tinyshakespeare, tmp_path: Path, optimizer: str):
    """LLMC_BF16_COPIES=0 keeps the path without the layers' copies (each GEMM rounds its operands, the weights' copy
    is rounded in a pass of its own): the same checkpoint, bit for bit, as the copies in GPT-2's fp32 layout of the
    activations (LLMC_BF16_ACTIVATIONS=0; without copies there is no bf16 layout: tests/test_bf16_activations.py)."""
    written = []
    for copies in ("1", "0"):
        out = tmp_path / copies
        run([REPO / "train_gpt2", "-i", tinyshakespeare[0], *STEPS, "-v", 0, "-s", 0, "-op", optimizer, "-o", out,
             "-n", 3], env={**ENV, "LLMC_BF16_COPIES": copies, "LLMC_BF16_ACTIVATIONS": "0"})
        written.append((out / "model_00000003.bin").read_bytes())
    assert written[0] == written[1]
    bad = run([REPO / "train_gpt2", "-e", "d2", "-x", 1, "-i", tinyshakespeare[0], "-p", "bf16"], check=False,
              env={**ENV, "LLMC_BF16_COPIES": "yes"})
    assert bad.returncode == 1 and "error: LLMC_BF16_COPIES=yes: use 0 or 1" in bad.stderr
