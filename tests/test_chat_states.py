"""Masked debug states (issue 47; llmc/debug_state.h's header[18]): every family's reference writes, with
--mask_half 1, a state of its d2 whose batch has about half of its targets -1 (not supervised) and whose loss and step
losses are the means over the supervised positions; the family's CPU test program passes it in fp32 and bf16 (its
gradients those of that mean: loss_scale = B*T / N), and fails on a corrupted one: a masked target made a token, or a
changed loss. A bad masked flag, a target -1 in an unmasked state and a masked state without a supervised position are
one error line each."""

from __future__ import annotations

import re
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch

from conftest import (PYTHON, REPO, TS_TRAIN, assert_one_error_line, debug_state_first_steps, llama3_shards, make, run,
                      set_int, shared_dir, trained_tokenizer)
from pyllmc.reference.debug_state import mask_half
from test_families import FAMILIES

B, T, STEPS = 4, 64, 4  # the d2 states' batch and reference steps (the checked-in states' B and T)
MASKED_FLAG = 18  # header[18]: 1 in a masked state


def family_input_flags(family: str, tmp_path_factory: pytest.TempPathFactory) -> list[object]:
    """The flags of train_<family>.py that give its d2 and a batch of its data: GPT-2's and nanochat's tinyshakespeare
    shard in GPT-2 ids, Llama 3's and Qwen3's test tokenizers with llama-3 shards in their ids (the fixtures the
    reference tests share)."""
    if family == "gpt2":
        return ["--input_bin", TS_TRAIN]
    if family == "nanochat":
        return ["--input_bin", TS_TRAIN, "--device", "cpu"]
    if family == "llama3":
        tok = trained_tokenizer(tmp_path_factory, "llama3_tokenizer")
        return ["--tokenizer", tok, "--input_bin", llama3_shards(tmp_path_factory, "llama3_tinyshakespeare", tok)[0]]
    if family == "qwen3":
        tok = trained_tokenizer(tmp_path_factory, "qwen3_eot_tokenizer", "--delimiter", "endoftext")
        return ["--tokenizer", tok, "--input_bin", llama3_shards(tmp_path_factory, "qwen3_eot_tinyshakespeare", tok)[0]]
    raise AssertionError(f"the family {family} (llmc/families.h) has no data here: add its flags to family_input_flags")


@dataclass(frozen=True)
class MaskedState:
    family: str
    model: Path  # its d2's model file
    state: Path  # the masked debug state of that d2
    fp32_stdout: str  # what test_<family> printed on it in fp32 (it passed)
    V: int  # the model's vocabulary (the logits' row length in the state)
    P: int  # its parameter count (the gradients' length in the state)

    def check(self, state: Path, *flags: object, expect_pass: bool = True) -> subprocess.CompletedProcess:
        """test_<family> -e model -s state [flags]"""
        return run([REPO / f"test_{self.family}", "-e", self.model, "-s", state, *flags], check=expect_pass,
                   env={"OMP_NUM_THREADS": "2"})

    def damaged(self, out: Path, edit: Callable[[bytearray], None], steps: int | None = None) -> Path:
        """A copy of the state at `out` edited in place by edit(data); with `steps`, only its first step losses kept
        (conftest.debug_state_first_steps: the program runs fewer steps)."""
        if steps is not None:
            version = int(np.fromfile(self.state, dtype="<i4", count=2)[1])
            src = debug_state_first_steps(self.state, out.with_suffix(".steps"), steps, grad_norms=version == 3)
        else:
            src = self.state
        data = bytearray(src.read_bytes())
        edit(data)
        out.write_bytes(bytes(data))
        return out


@pytest.fixture(scope="module", params=FAMILIES)
def masked(request, tmp_path_factory, tinyshakespeare) -> MaskedState:
    """A family's d2 and its masked debug state (train_<family>.py --model d2 --mask_half 1, once per test run), its test
    program built and run on it in fp32."""
    family = request.param
    flags = family_input_flags(family, tmp_path_factory)

    def write(out: Path) -> None:
        run([PYTHON, REPO / f"train_{family}.py", "--model", "d2", *flags, "--batch_size", B, "--sequence_length", T,
             "--num_iterations", 0, "--write_tensors", 1, "--seed", 42, "--debug_steps", STEPS, "--mask_half", 1],
            cwd=out, env={"OMP_NUM_THREADS": "1"})

    out = shared_dir(tmp_path_factory, f"masked_{family}", write)
    make(f"test_{family}")
    model, state = out / f"{family}_d2.bin", out / f"{family}_d2_masked_debug_state.bin"
    proc = run([REPO / f"test_{family}", "-e", model, "-s", state], check=False, env={"OMP_NUM_THREADS": "2"})
    vocab, params = re.search(r"\bV=(\d+)", proc.stdout), re.search(r"(\d+) parameters", proc.stdout)
    assert proc.returncode == 0 and vocab and params, proc.stdout + proc.stderr
    return MaskedState(family, model, state, proc.stdout, int(vocab.group(1)), int(params.group(1)))


def state_targets(state: Path) -> np.ndarray:
    """The (B*T) targets y of a debug state."""
    header = np.fromfile(state, dtype="<i4", count=256)
    n = int(header[2]) * int(header[3])
    return np.fromfile(state, dtype="<i4", count=n, offset=1024 + 4 * n)


def test_mask_half_masks_half_in_stretches_and_single_positions_and_keeps_every_row_supervised() -> None:
    y = torch.arange(B * T).view(B, T) % 1000
    masked = mask_half(y) < 0
    assert int(masked.sum()) == B * T // 2
    assert torch.equal(mask_half(y)[~masked], y[~masked])
    for row in masked:
        assert not bool(row.all())
        runs = [len(m.group()) for m in re.finditer("1+", "".join("1" if v else "0" for v in row.tolist()))]
        assert max(runs) >= T // 4 and 1 in runs, runs  # a whole stretch, and single positions
    assert torch.equal(mask_half(y), mask_half(y))
    one = mask_half(torch.zeros(3, 1, dtype=torch.long))  # rows of one position: each keeps it
    assert bool((one >= 0).all())


def test_the_reference_writes_a_masked_state_with_the_flag_and_half_of_the_targets_minus_one(masked: MaskedState) -> None:
    state = masked.state
    header = np.fromfile(state, dtype="<i4", count=256)
    assert list(header[2:5]) == [B, T, STEPS] and header[MASKED_FLAG] == 1 and not header[MASKED_FLAG + 1:].any()
    y = state_targets(state).reshape(B, T)
    assert int((y == -1).sum()) == B * T // 2 and bool((y >= -1).all())
    assert bool((y >= 0).any(axis=1).all())  # a supervised position in every row
    # the stored loss and first step loss: the mean cross-entropy of the stored logits over the supervised positions
    n = B * T
    floats = np.fromfile(state, dtype="<f4", count=n * masked.V + 1, offset=1024 + 8 * n)
    logits, loss = floats[:-1].reshape(n, masked.V).astype(np.float64), float(floats[-1])
    top = logits.max(axis=1)
    log_z = top + np.log(np.exp(logits - top[:, None]).sum(axis=1))
    kept = y.reshape(-1) >= 0
    ce = log_z[kept] - logits[kept, y.reshape(-1)[kept]]
    assert loss == pytest.approx(ce.mean(), abs=1e-5), (loss, ce.mean())
    assert loss != pytest.approx(ce.sum() / n, abs=1e-2)  # not the mean over all B*T with a masked position 0
    (first_step_loss,) = np.fromfile(state, dtype="<f4", count=1, offset=1024 + 8 * n + 4 * (n * masked.V + 1 + masked.P))
    assert first_step_loss == loss


def passed(stdout: str) -> bool:
    return re.search(r"\d+ passed, 0 failed", stdout) is not None and "FAIL" not in stdout


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_test_program_passes_the_masked_state(masked: MaskedState, precision: str) -> None:
    stdout = masked.fp32_stdout if precision == "fp32" else masked.check(masked.state, "-p", precision).stdout
    assert f"masked: {B * T // 2} of {B * T} positions supervised" in stdout, stdout
    assert passed(stdout), stdout
    rows = [line.split("|")[1].strip() for line in stdout.splitlines() if line.startswith("| ")][1:]  # after the header
    assert {"logits", "loss", "dwte", f"loss step {STEPS - 1}"} <= set(rows), rows
    assert f"{len(rows)} passed, 0 failed" in stdout, stdout  # every row: the logits, loss, each gradient, each step


def failing_rows(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stdout.splitlines() if "FAIL" in line]


def test_the_test_program_fails_when_a_masked_target_is_made_a_token(masked: MaskedState, tmp_path: Path) -> None:
    def flip(data: bytearray) -> None:  # the second masked target becomes the token that follows it
        i = int(np.flatnonzero(state_targets(masked.state) == -1)[1])
        (x_next,) = struct.unpack_from("<i", data, 1024 + 4 * (i + 1))
        struct.pack_into("<i", data, 1024 + 4 * (B * T + i), x_next)

    proc = masked.check(masked.damaged(tmp_path / "flipped.bin", flip, steps=0), expect_pass=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "error:" not in proc.stderr and failing_rows(proc), proc.stdout  # read, checked and found wrong
    assert f"masked: {B * T // 2 + 1} of {B * T}" in proc.stdout


def test_the_test_program_fails_on_a_changed_masked_loss(masked: MaskedState, tmp_path: Path) -> None:
    def change_loss(data: bytearray) -> None:  # the stored loss (after x, y and the logits), 1e-3 more
        offset = 1024 + 8 * B * T + 4 * B * T * masked.V
        (loss,) = struct.unpack_from("<f", data, offset)
        struct.pack_into("<f", data, offset, loss + 1e-3)

    proc = masked.check(masked.damaged(tmp_path / "loss.bin", change_loss, steps=0), expect_pass=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = failing_rows(proc)
    assert len(rows) == 1 and "| loss " in rows[0], proc.stdout


@pytest.mark.parametrize("case", ["flag 2", "flag -1", "target -1 unmasked", "no supervised position"])
def test_a_bad_masked_state_is_one_error_line(masked: MaskedState, tmp_path: Path, case: str) -> None:
    def damage(data: bytearray) -> None:
        if case.startswith("flag"):
            set_int(data, MASKED_FLAG, int(case.split()[1]))
        elif case == "target -1 unmasked":
            set_int(data, MASKED_FLAG, 0)
        else:
            struct.pack_into(f"<{B * T}i", data, 1024 + 4 * B * T, *([-1] * (B * T)))

    want = {"flag 2": "masked header[18] = 2", "flag -1": "masked header[18] = -1",
            "target -1 unmasked": "is outside [0,", "no supervised position": "without a supervised position"}[case]
    bad = masked.damaged(tmp_path / "bad.bin", damage)
    line = assert_one_error_line(masked.check(bad, expect_pass=False))
    assert want in line and str(bad) in line, line
