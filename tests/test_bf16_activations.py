"""The -p bf16 activation layouts (train_gpt2.c's GPT2_BF16_ACTIVATION_TENSORS, llmc/cpu/decoder_cpu.h's
DECODER_CPU_BF16_ACTIVATION_TENSORS): on oneDNN's bf16 path every CPU trainer keeps qkv, the attention's output and
the MLP's hidden layer (GPT-2's fch + bias; the decoders' projections, fch and SwiGLU's fch2) per layer in bf16 alone,
as their readers read them; LLMC_BF16_ACTIVATIONS=0 keeps the fp32 layout. The bf16 layout changes two kernels' inputs:
the MLP's activation reads its input rounded (forward and backward), and the attention's backward takes
D = rowsum(dO o O) from the rounded output; everything else is the same bits (dev/test/test_attention_cpu checks the
attention on bf16 storage against fp32 storage, dev/test/test_bf16_alone the activations' bf16 kernels against the
fp32 ones on rounded inputs).

For each trainer (GPT-2, Llama 3, nanochat, Qwen3):
- the two layouts' losses over 4 steps of d2 (B=4, T=64) agree within LAYOUT_LOSS_TOL and are not all equal (measured
  on a Zen 5, at most: GPT-2 8.4e-5 apart, losses 10.83 .. 10.64; Llama 3 9.7e-5, 6.26 .. 6.20; nanochat 1e-6,
  10.83 .. 10.80; Qwen3 1.3e-4, 6.28 .. 6.16);
- the bf16 layout gives the same checkpoint on 1 thread and on 2, and a resumed run continues it bit for bit;
- its peak memory is below the fp32 layout's by what the layout saves (d6, B=4, T=512; GPT-2 and Llama 3);
- LLMC_BF16_ACTIVATIONS other than 0 or 1 is one error line.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import (HAS_AMX_BF16, HAS_AVX512_BF16, REPO, TS_TRAIN, assert_one_error_line, killed_after, make, run,
                      trainer_data)
from pyllmc.families import REGISTRY

# the bf16 layout exists on oneDNN's bf16 path only, which needs a bf16 kernel
pytestmark = pytest.mark.skipif(not (HAS_AVX512_BF16 or HAS_AMX_BF16),
                                reason="no AVX512-BF16 or AMX-BF16: oneDNN has no bf16 kernel, so no bf16 layout")

ENV = {"OMP_NUM_THREADS": "1", "LLMC_BF16": "force"}
LAYOUT_LOSS_TOL = 2e-3
TRAINERS = [row.trainer for row in REGISTRY]


@pytest.fixture(scope="module")
def built() -> None:
    make(*TRAINERS)


def train(trainer: str, data: list[Path], out: Path, *flags: object,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run([REPO / trainer, "-i", data[0], "-j", "", "-v", 0, "-s", 0, "-p", "bf16", "-o", out, *flags],
               cwd=out.parent, env={**ENV, **(env or {})})


def losses(stdout: str) -> list[float]:
    return [float(x) for x in re.findall(r"^step \d+/\d+ \| loss (\S+)", stdout, re.M)]


@pytest.mark.parametrize("trainer", TRAINERS)
def test_the_bf16_layout_moves_the_losses_by_little(built, request, tmp_path: Path, trainer: str) -> None:
    data = trainer_data(request, tmp_path, trainer)
    flags = ["-e", "d2", "-b", 4, "-t", 64, "-x", 4]
    new = losses(train(trainer, data, tmp_path / "bf16", *flags).stdout)
    old = losses(train(trainer, data, tmp_path / "fp32", *flags, env={"LLMC_BF16_ACTIVATIONS": "0"}).stdout)
    assert len(new) == len(old) == 4
    diffs = [abs(a - b) for a, b in zip(new, old)]
    assert max(diffs) <= LAYOUT_LOSS_TOL, f"bf16 layout {new}\nfp32 layout {old}"
    assert max(diffs) > 0.0, "the layouts gave the same losses: LLMC_BF16_ACTIVATIONS does not reach the trainer"


@pytest.mark.parametrize("trainer", TRAINERS)
def test_the_bf16_layout_does_not_depend_on_the_thread_count(built, request, tmp_path: Path, trainer: str) -> None:
    data = trainer_data(request, tmp_path, trainer)
    flags = ["-e", "d2", "-b", 4, "-t", 96, "-x", 3, "-n", 3]
    for threads in ("1", "2"):
        train(trainer, data, tmp_path / threads, *flags, env={"OMP_NUM_THREADS": threads})
    assert (tmp_path / "1" / "model_00000003.bin").read_bytes() == (tmp_path / "2" / "model_00000003.bin").read_bytes()


@pytest.mark.parametrize("trainer", TRAINERS)
def test_the_bf16_layout_resumes_bit_identically(built, request, tmp_path: Path, trainer: str) -> None:
    data = trainer_data(request, tmp_path, trainer)
    flags = ["-e", "d1", "-b", 2, "-t", 80, "-x", 8, "-n", 4, "-c", 0.1]
    straight = train(trainer, data, tmp_path / "straight", *flags)
    part = killed_after(tmp_path / "straight", tmp_path / "part", 4)
    resumed = train(trainer, data, tmp_path / "part", *flags, "-y", 1)
    assert "resumed from" in resumed.stdout
    assert losses(straight.stdout)[4:] == losses(resumed.stdout)
    assert (tmp_path / "straight" / "model_00000008.bin").read_bytes() == (part / "model_00000008.bin").read_bytes()


# A child's ru_maxrss counts the resident memory of the process it was forked from until its exec, so a child of this
# pytest worker (which may hold gigabytes) reports at least the worker's size; a fresh interpreter launches the trainer
# and reports its children's peak alone.
PEAK_RSS_LAUNCHER = ("import resource, subprocess, sys\n"
                     "code = subprocess.run(sys.argv[1:], stderr=subprocess.STDOUT).returncode\n"
                     "print('peak', code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def peak_rss_mb(cmd: list[object], env: dict[str, str], cwd: Path) -> float:
    """The trainer's peak resident memory (ru_maxrss), MB."""
    proc = run([sys.executable, "-c", PEAK_RSS_LAUNCHER, *cmd], env=env, cwd=cwd)
    _, code, kb = proc.stdout.splitlines()[-1].split()
    assert code == "0", f"{cmd} exited with {code}:\n{proc.stdout[-2000:]}"
    return int(kb) * 1024 / 1e6


def layout_peaks_mb(trainer: str, data: list[Path], cwd: Path) -> tuple[float, float, str]:
    """The peak RSS of one step of d6 (B=4, T=512) in the bf16 layout and in the fp32 one, and the model's line."""
    cmd = [REPO / trainer, "-e", "d6", "-i", data[0], "-j", "", "-b", 4, "-t", 512, "-x", 1, "-v", 0, "-s", 0,
           "-p", "bf16"]
    onednn = {**ENV, "LLMC_BF16_GEMM": "onednn"}  # the layout is oneDNN's: a loaded machine may pick the built-in GEMM
    model = re.search(r"^model: .*$", run(cmd, env=onednn, cwd=cwd).stdout, re.M)
    assert model is not None
    new = peak_rss_mb(cmd, onednn, cwd)
    old = peak_rss_mb(cmd, {**onednn, "LLMC_BF16_ACTIVATIONS": "0"}, cwd)
    return new, old, model.group(0)


def test_the_gpt2_bf16_layout_takes_less_memory(built, request, tmp_path: Path) -> None:
    # d6: C = 384, L = 6. Per token the fp32 layout holds qkv, atty, fch per layer (8 C L floats), atty's and
    # fch_gelu's bf16 copies (C L / 2 + 2 C) and fch_gelu's fp32 slice (4 C); the bf16 layout holds the three per
    # layer in bf16 (4 C L), fch_gelu's bf16 slice (2 C) and the fp32 slices of qkv and fch that their GEMMs write
    # (7 C; atty's and fch_gelu's are never written, so never resident): (4 L + L / 2 - 3) C floats less, 24 C here
    C, L, tokens = 384, 6, 4 * 512
    saved_mb = (4 * L + L / 2 - 3) * C * 4 * tokens / 1e6
    new, old, _ = layout_peaks_mb("train_gpt2", trainer_data(request, tmp_path, "train_gpt2"), tmp_path)
    assert old - new >= 0.8 * saved_mb, f"peak RSS {new:.0f} MB (bf16 layout) against {old:.0f} MB, {saved_mb:.0f} expected"


def test_the_llama3_bf16_layout_takes_less_memory(built, request, tmp_path: Path) -> None:
    # Per token the fp32 layout holds qkv, atty, fch and fch2 per layer in fp32 (QKV + AW + 2 FFN floats a layer) and
    # atty's bf16 copy (AW / 2 a layer); the bf16 layout holds the four per layer in bf16 (half as many floats) and the
    # fp32 slices of qkv, fch and fch2 that their GEMMs write (QKV + 2 FFN; atty's is never written, so never
    # resident): L (QKV / 2 + AW + FFN) - QKV - 2 FFN floats less
    new, old, model = layout_peaks_mb("train_llama3", trainer_data(request, tmp_path, "train_llama3"), tmp_path)
    dims = {k: int(v) for k, v in re.findall(r"\b(L|NH|NKV|C|FFN)=(\d+)", model)}
    L, NH, NKV, FFN = dims["L"], dims["NH"], dims["NKV"], dims["FFN"]
    HS = dims["C"] // NH
    AW, QKV = NH * HS, (NH + 2 * NKV) * HS
    saved_mb = (L * (QKV / 2 + AW + FFN) - QKV - 2 * FFN) * 4 * 4 * 512 / 1e6
    assert old - new >= 0.8 * saved_mb, f"{model}: peak RSS {new:.0f} MB (bf16 layout) against {old:.0f} MB, " \
                                        f"{saved_mb:.0f} expected"


def test_a_bad_layout_value_is_one_error_line(built, tmp_path: Path) -> None:
    proc = run([REPO / "train_gpt2", "-e", "d1", "-i", TS_TRAIN, "-j", "", "-x", 1, "-p", "bf16"], cwd=tmp_path,
               check=False, env={**ENV, "LLMC_BF16_ACTIVATIONS": "yes"})
    assert assert_one_error_line(proc) == "error: LLMC_BF16_ACTIVATIONS=yes: use 0 or 1"
