"""The bf16 copies (mirrors) of the activations the GEMMs read (llmc/cpu/matmul.h): on -p bf16 with oneDNN every
layer that writes such an activation, or activation gradient, writes its bf16 copy in the same pass, and no GEMM
rounds it again. LLMC_BF16_CHECK_MIRRORS=1 compares every mirrored GEMM operand with its fp32 buffer before the
GEMM reads it and stops at the first stale element, so a writer that forgets its copy fails here. Each CPU trainer
runs a few steps of -p bf16 (forced) so, with validation and sampling, under AdamW and Muon.

The activations that only GEMMs read (the norms' outputs, the MLP's activation and its fc layers' input gradients:
cpu_model_shadow_activation's bf16_alone) are written in bf16 alone, their fp32 memory never written; under
LLMC_BF16_CHECK_MIRRORS=1 their writers fill the fp32 memory with NaN instead, so a reader of it that was missed turns
the losses into NaN here. LLMC_BF16_ALONE=0 writes the fp32 values too, as before: the same checkpoint, bit for bit.
LLMC_BF16_CVT=0 rounds to bf16 in integer arithmetic instead of AVX512-BF16's conversion: the same checkpoint too.
LLMC_ALIGN=0 leaves the model's buffers at malloc's alignment instead of on a cache line: the same checkpoint too."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import HAS_AMX_BF16, HAS_AVX512_BF16, REPO, make, run, trainer_data
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
def test_bf16_copies_are_never_stale(built, request, tmp_path: Path, trainer: str, optimizer: str):
    data = trainer_data(request, tmp_path, trainer)
    proc = run([REPO / trainer, "-i", data[0], "-j", data[1], *STEPS, "-op", optimizer], cwd=tmp_path, env=ENV,
               check=False)
    assert proc.returncode == 0, f"{trainer} exited {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    assert "step 3/3" in proc.stdout
    # (a NaN gradient shows as the norm's nan and a skipped update, not in the loss)
    steps = re.findall(r"^step \d+/\d+ \|.*$", proc.stdout, re.M)
    assert len(steps) == 3 and not any("nan" in line or "skipped" in line for line in steps), \
        f"{trainer}: an fp32 buffer held in bf16 alone (NaN under the check) was read:\n" + "\n".join(steps)


@pytest.mark.parametrize("trainer", ["train_gpt2", "train_llama3"])
def test_bf16_alone_under_the_kernels_before(built, request, tmp_path: Path, trainer: str):
    """The element-wise passes and norms before 2026-11-29 (LLMC_ELEMENTWISE_FUSED=0, LLMC_NORM=rows) with the copies
    alone: GPT-2's fc bias gradient is then summed from the GELU backward's fp32 rows, so fch's gradient keeps them."""
    data = trainer_data(request, tmp_path, trainer)
    proc = run([REPO / trainer, "-i", data[0], "-j", data[1], *STEPS], cwd=tmp_path,
               env={**ENV, "LLMC_ELEMENTWISE_FUSED": "0", "LLMC_NORM": "rows"})
    steps = re.findall(r"^step \d+/\d+ \|.*$", proc.stdout, re.M)
    assert len(steps) == 3 and not any("nan" in line or "skipped" in line for line in steps), "\n".join(steps)


@pytest.mark.parametrize("trainer", TRAINERS)
def test_bf16_alone_changes_no_bit(built, request, tmp_path: Path, trainer: str):
    """LLMC_BF16_ALONE=0 (the fp32 values written beside the copies) and 1 (the copies alone): the same checkpoint
    after 3 steps, bit for bit; and the alone path does engage: the norms' phase (LLMC_PHASE_TIME=1) moves fewer
    bytes, 4 a value less for each norm output that is not written in fp32."""
    data = trainer_data(request, tmp_path, trainer)
    written, norm_bytes = [], []
    for alone in ("1", "0"):
        out = tmp_path / f"alone{alone}"
        proc = run([REPO / trainer, "-i", data[0], *STEPS, "-v", 0, "-s", 0, "-o", out, "-n", 3], cwd=tmp_path,
                   env={**ENV, "LLMC_BF16_CHECK_MIRRORS": "0", "LLMC_BF16_ALONE": alone, "LLMC_PHASE_TIME": "1",
                        "LLMC_BF16_GEMM": "onednn"})
        written.append((out / "model_00000003.bin").read_bytes())
        norm_bytes.append(int(re.search(r"^phase norm: [0-9.]+ ms, ([0-9]+) bytes", proc.stdout, re.M).group(1)))
    assert written[0] == written[1], f"{trainer}: LLMC_BF16_ALONE=0 and 1 wrote different checkpoints"
    assert norm_bytes[0] < norm_bytes[1], f"{trainer}: norm bytes {norm_bytes}: the bf16-alone path did not engage"


@pytest.mark.skipif(not HAS_AVX512_BF16, reason="no AVX512-BF16: the bf16 roundings are the integer ones alone")
@pytest.mark.parametrize("trainer", TRAINERS)
def test_bf16_conversion_changes_no_bit(built, request, tmp_path: Path, trainer: str):
    """The bf16 roundings on AVX512-BF16's conversion (llmc/cpu/matmul.h's mm_bf16_cvt_on, the default where the CPU
    has it) and on the integer rounding (LLMC_BF16_CVT=0): the same checkpoint after 3 steps, bit for bit."""
    data = trainer_data(request, tmp_path, trainer)
    written = []
    for cvt in ("1", "0"):
        out = tmp_path / f"cvt{cvt}"
        run([REPO / trainer, "-i", data[0], *STEPS, "-v", 0, "-s", 0, "-o", out, "-n", 3], cwd=tmp_path,
            env={**ENV, "LLMC_BF16_CHECK_MIRRORS": "0", "LLMC_BF16_CVT": cvt})
        written.append((out / "model_00000003.bin").read_bytes())
    assert written[0] == written[1], f"{trainer}: LLMC_BF16_CVT=0 and 1 wrote different checkpoints"


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
@pytest.mark.parametrize("trainer", TRAINERS)
def test_memory_switches_change_no_bit(built, request, tmp_path: Path, trainer: str, optimizer: str):
    """The model's buffers and the kernels' work buffers on a cache line (llmc/utils.h's callocAligned, the default) and
    at malloc's 16 bytes (LLMC_ALIGN=0), the optimizer state's pages committed before its first update (commit_pages,
    the default) or not (LLMC_COMMIT_PAGES=0), and in bf16 the attention's q, k, v rounded into their bf16 copy row
    after row or a block at a time (LLMC_ATTENTION_ROUND_ROWS=0), and P^T laid out for its product by the softmax or
    by a pass of its own (LLMC_ATTENTION_PAIRS_FUSED=0): the same checkpoint after 3 steps, bit for bit, in fp32 and
    in bf16 (the alignment and the commit themselves: dev/test/test_utils; the attention's kernels:
    dev/test/test_attention_cpu). Any other value is one error line."""
    data = trainer_data(request, tmp_path, trainer)
    for precision in ("fp32", "bf16"):
        written = []
        switches = ("default", "LLMC_ALIGN", "LLMC_COMMIT_PAGES")
        switches += ("LLMC_ATTENTION_ROUND_ROWS", "LLMC_ATTENTION_PAIRS_FUSED") if precision == "bf16" else ()
        for switch in switches:
            out = tmp_path / f"{precision}_{switch}"
            run([REPO / trainer, "-i", data[0], *STEPS, "-v", 0, "-s", 0, "-op", optimizer, "-o", out, "-n", 3,
                 "-p", precision], cwd=tmp_path, env={**ENV, "LLMC_BF16_CHECK_MIRRORS": "0", switch: "0"})
            written.append((out / "model_00000003.bin").read_bytes())
        assert written[0] == written[1], f"{trainer} {precision} {optimizer}: LLMC_ALIGN=0 and 1 wrote other checkpoints"
        for switch, other in zip(switches[2:], written[2:]):
            assert written[0] == other, f"{trainer} {precision} {optimizer}: {switch}=0 changed the checkpoint"
    bad = run([REPO / trainer, "-i", data[0], *STEPS, "-v", 0, "-s", 0, "-x", 1], cwd=tmp_path, check=False,
              env={**ENV, "LLMC_ALIGN": "2"})
    assert bad.returncode == 1 and "error: LLMC_ALIGN=2: use 0 or 1" in bad.stderr


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
    bad = run([REPO / "train_gpt2", "-e", "d2", "-x", 1, "-i", tinyshakespeare[0], "-p", "bf16"], check=False,
              env={**ENV, "LLMC_BF16_ALONE": "yes"})
    assert bad.returncode == 1 and "error: LLMC_BF16_ALONE=yes: use 0 or 1" in bad.stderr


def test_onednn_bias_changes_no_bit(built, tinyshakespeare, tmp_path: Path):
    """LLMC_ONEDNN_BIAS=0 copies GPT-2's biases into the rows and has oneDNN's bf16 GEMM add onto them, as before; the
    default hands each bias to the GEMM as its argument (no copy pass, no read of the rows): the same checkpoint after
    3 steps, bit for bit, in both activation layouts (dev/test/test_matmul_<blas> checks the call itself)."""
    for layout in ("1", "0"):
        written = []
        for bias in ("1", "0"):
            out = tmp_path / f"{layout}_{bias}"
            run([REPO / "train_gpt2", "-i", tinyshakespeare[0], *STEPS, "-v", 0, "-s", 0, "-o", out, "-n", 3],
                env={**ENV, "LLMC_BF16_GEMM": "onednn", "LLMC_ONEDNN_BIAS": bias, "LLMC_BF16_ACTIVATIONS": layout})
            written.append((out / "model_00000003.bin").read_bytes())
        assert written[0] == written[1], f"LLMC_BF16_ACTIVATIONS={layout}"
    bad = run([REPO / "train_gpt2", "-e", "d2", "-x", 1, "-i", tinyshakespeare[0], "-p", "bf16"], check=False,
              env={**ENV, "LLMC_ONEDNN_BIAS": "yes"})
    assert bad.returncode == 1 and "error: LLMC_ONEDNN_BIAS=yes: use 0 or 1" in bad.stderr
