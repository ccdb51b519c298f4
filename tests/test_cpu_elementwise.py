"""The element-wise kernels of the CPU step (llmc/cpu/matmul.h's bias gradient, llmc/cpu/gelu_cpu.h's GELU backward
with the fc layer's bias gradient in the same pass) against the passes they replaced, and LLMC_ELEMENTWISE_FUSED=0,
which runs the old passes, giving the same training bits.

- dev/test/test_elementwise: the new kernels against the old, bit for bit, on odd sizes, beta 0 and 1, with and
  without dinp's bf16 copy, 1 to 3 threads (it runs under OMP_WAIT_POLICY=PASSIVE: its 3-thread cases on 2 cores
  would otherwise spin in every barrier);
- dev/test/test_bf16_alone: every writer of an activation held in bf16 alone (-p bf16: the norms' outputs, the MLP's
  activations and its fc layers' input gradients) writes the same bf16 copy as beside fp32 and leaves the fp32
  memory unwritten (NaN under LLMC_BF16_CHECK_MIRRORS=1), and GPT-2's one-pass GELU backward (the GELU's output
  recomputed in the same pass) gives the two passes' bits;
- train_gpt2 fp32 and -p bf16 (forced, so no calibration decides): the same checkpoint with LLMC_ELEMENTWISE_FUSED=0
  and with the fused pass's bias gradient in the old order (LLMC_GELU_BIAS=columns; -p bf16 also the qkv bias
  gradient summed from an fp32 dqkv, LLMC_ATTENTION_BIAS=0); the default order (chunks of rows) other bits, the same
  losses to 1e-6, and the same checkpoint on 1 thread as on 2; an unknown value of either switch is one error line
  (LLMC_BF16_CVT's too);
- train_gpt2 -p bf16: the qkv bias gradient summed by the attention's backward (the default) against from an fp32
  dqkv (LLMC_ATTENTION_BIAS=0): other bits, the same losses to 1e-5, the same checkpoint on 1 thread as on 2; an
  unknown value is one error line;
- train_gpt2 fp32, and -p bf16 with the fp32 activations (the GELU's output and gradient with bf16 copies): the same
  checkpoint with the GELU's output recomputed in its backward's pass (the default) and in a pass of its own
  (LLMC_GELU_RECOMPUTE_FUSED=0); an unknown value is one error line;
- train_gpt2 fp32 and -p bf16: GPT-2's GELU in its sigmoid form x / (1 + e^-2u) (the default) against its tanh form
  0.5 x (1 + tanh u) (LLMC_GELU_SIGMOID=0): other bits, the same losses to 1e-6 (fp32) and 1e-5 (bf16), the same
  checkpoint on 1 thread as on 2; an unknown value is one error line (dev/test/test_elementwise runs every GELU
  kernel's bit-for-bit checks in both forms, dev/test/test_matmul their accuracy against libm in double).

Runtime: about 10 s on 2 cores.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import REPO, TS_TRAIN, assert_one_error_line, make, run


@pytest.fixture(scope="module")
def test_elementwise() -> Path:
    make("dev/test/test_elementwise")
    return REPO / "dev" / "test" / "test_elementwise"


@pytest.fixture(scope="module")
def trainer(tinyshakespeare) -> Path:
    make("train_gpt2")
    return REPO / "train_gpt2"


def test_elementwise_kernels_give_the_bits_of_the_passes_they_replace(test_elementwise: Path) -> None:
    proc = run([test_elementwise], env={"OMP_WAIT_POLICY": "PASSIVE"})
    m = re.search(r"(\d+) passed, (\d+) failed", proc.stdout)
    assert m and int(m.group(2)) == 0 and int(m.group(1)) >= 3000, proc.stdout[-2000:]


@pytest.mark.parametrize("check", ["0", "1"])
def test_bf16_alone_writers_and_the_one_pass_gelu_backward(check: str) -> None:
    make("dev/test/test_bf16_alone")
    proc = run([REPO / "dev" / "test" / "test_bf16_alone"],
               env={"OMP_WAIT_POLICY": "PASSIVE", "LLMC_BF16_CHECK_MIRRORS": check})
    m = re.search(r"(\d+) passed, (\d+) failed", proc.stdout)
    assert m and int(m.group(2)) == 0 and int(m.group(1)) >= 1300, proc.stdout[-2000:]


def losses(stdout: str) -> list[float]:
    return [float(x) for x in re.findall(r"^step \d+/\d+ \| loss (\S+)", stdout, re.M)]


def train_d2(trainer: Path, out: Path, precision: str, env: dict[str, str]) -> tuple[str, bytes]:
    """3 steps of d2 (4 x 64 tokens: four 64-row chunks of the GELU's bias gradient): stdout and the checkpoint"""
    proc = run([trainer, "-e", "d2", "-i", TS_TRAIN, "-j", "", "-b", 4, "-t", 64, "-x", 3, "-v", 0, "-s", 0,
                "-p", precision, "-o", out, "-n", 3], env={"OMP_NUM_THREADS": "2", "LLMC_BF16": "force", **env})
    return proc.stdout, (out / "model_00000003.bin").read_bytes()


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_old_elementwise_passes_train_the_same_bits(trainer: Path, tmp_path: Path, precision: str) -> None:
    """LLMC_ELEMENTWISE_FUSED=0 (the passes) and the fused pass with the bias gradient in the old order
    (LLMC_GELU_BIAS=columns): the same checkpoint, bit for bit."""
    fused = train_d2(trainer, tmp_path / "fused", precision, {"LLMC_GELU_BIAS": "columns", "LLMC_ATTENTION_BIAS": "0"})
    passes = train_d2(trainer, tmp_path / "passes", precision, {"LLMC_ELEMENTWISE_FUSED": "0"})
    assert len(losses(fused[0])) == 3 and losses(fused[0]) == losses(passes[0]), \
        f"{fused[0][-600:]}\n{passes[0][-600:]}"
    assert fused[1] == passes[1], "LLMC_ELEMENTWISE_FUSED=0 and the fused pass wrote different checkpoints"


def other_bits_same_losses(trainer: Path, tmp_path: Path, precision: str, switch: str, old: str, rel: float) -> None:
    """A switch whose default changes a summation or rounding: the default and `switch`=`old` write other checkpoints
    (so the switch engages), the same losses to `rel`, and the default the same checkpoint on 1 thread as on 2 (the
    fp32 GEMMs on the built-in kernel: OpenBLAS's sgemm splits its sums by thread count on some CPUs, the Zen 3's
    Haswell kernels among them)."""
    builtin = {"LLMC_FP32_GEMM": "builtin"}
    default = train_d2(trainer, tmp_path / "default", precision, builtin)
    before = train_d2(trainer, tmp_path / "old", precision, {**builtin, switch: old})
    one_thread = train_d2(trainer, tmp_path / "one", precision, {**builtin, "OMP_NUM_THREADS": "1"})
    assert default[1] != before[1], f"{switch}'s default and {old} wrote the same checkpoint: no switch"
    assert len(losses(default[0])) == 3
    assert losses(default[0]) == pytest.approx(losses(before[0]), rel=rel, abs=0)
    assert default[1] == one_thread[1], f"{switch}'s default: 1 and 2 threads wrote different checkpoints"


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_bias_gradient_by_chunks_of_rows(trainer: Path, tmp_path: Path, precision: str) -> None:
    """LLMC_GELU_BIAS=chunks (the default: the fc bias gradient summed by chunks of rows) against columns (one
    running sum a column): other bits (so the switch engages), the same losses to 1e-6; and chunks gives the same
    checkpoint on 1 thread as on 2."""
    other_bits_same_losses(trainer, tmp_path, precision, "LLMC_GELU_BIAS", "columns", 1e-6)


def test_the_qkv_bias_gradient_summed_by_the_attention(trainer: Path, tmp_path: Path) -> None:
    """-p bf16: qkvb's gradient summed as the attention's backward writes dqkv (in bf16 alone; the default) against
    from the fp32 dqkv afterwards (LLMC_ATTENTION_BIAS=0): other bits (so the switch engages), the same losses to
    1e-5 (the step's bf16 weights turn a last-place change of a bias into a bf16 one: 1.6e-6 apart at step 3 on a
    Zen 5); the default gives the same checkpoint on 1 thread as on 2."""
    other_bits_same_losses(trainer, tmp_path, "bf16", "LLMC_ATTENTION_BIAS", "0", 1e-5)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_gelu_recomputed_in_its_backward_pass_trains_the_same_bits(trainer: Path, tmp_path: Path,
                                                                      precision: str) -> None:
    """GPT-2's fp32 backward: the GELU's output again in the backward's pass (the default) or in a pass of its own
    (LLMC_GELU_RECOMPUTE_FUSED=0, as before): the same checkpoint. -p bf16 with the fp32 activations
    (LLMC_BF16_ACTIVATIONS=0) takes the same branch of the trainer with bf16 copies, where the two passes run."""
    env = {"LLMC_BF16_ACTIVATIONS": "0"} if precision == "bf16" else {}
    fused = train_d2(trainer, tmp_path / "fused", precision, env)
    apart = train_d2(trainer, tmp_path / "apart", precision, {**env, "LLMC_GELU_RECOMPUTE_FUSED": "0"})
    assert len(losses(fused[0])) == 3 and losses(fused[0]) == losses(apart[0]), f"{fused[0][-600:]}\n{apart[0][-600:]}"
    assert fused[1] == apart[1], "LLMC_GELU_RECOMPUTE_FUSED=1 and 0 wrote different checkpoints"


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_gelu_in_its_sigmoid_form(trainer: Path, tmp_path: Path, precision: str) -> None:
    """LLMC_GELU_SIGMOID=1 (the default: x s, s = 1 / (1 + e^-2u)) against 0 (0.5 x (1 + tanh u), as before
    2026-12-06): the same function in other roundings, so other bits (the switch engages) and the same losses to 1e-6
    in fp32 (1e-5 in bf16, where a last-place change can move a bf16 rounding); 1 and 2 threads the same checkpoint."""
    rel = 1e-6 if precision == "fp32" else 1e-5
    other_bits_same_losses(trainer, tmp_path, precision, "LLMC_GELU_SIGMOID", "0", rel)


@pytest.mark.parametrize("switch, value, precision, message", [
    ("LLMC_ATTENTION_BIAS", "on", "bf16", "use 0 or 1"),
    ("LLMC_GELU_RECOMPUTE_FUSED", "on", "fp32", "use 0 or 1"),
    ("LLMC_GELU_SIGMOID", "tanh", "fp32", "use 0 or 1"),
    ("LLMC_GELU_BIAS", "rows", "fp32", "use columns or chunks"),
    ("LLMC_ELEMENTWISE_FUSED", "yes", "fp32", "use 0 or 1"),
    ("LLMC_BF16_CVT", "yes", "bf16", "use 0 or 1"),
    ("LLMC_CLASSIFIER_PREFETCH", "on", "bf16", "use 0 or 1"),
])
def test_a_bad_switch_is_one_error_line(trainer: Path, switch: str, value: str, precision: str, message: str) -> None:
    env = {switch: value, **({"LLMC_BF16": "force"} if precision == "bf16" else {})}
    proc = run([trainer, "-e", "d1", "-i", TS_TRAIN, "-j", "", "-b", 1, "-t", 16, "-x", 1, "-v", 0, "-s", 0,
                "-p", precision], env=env, check=False)
    assert assert_one_error_line(proc) == f"error: {switch}={value}: {message}"
