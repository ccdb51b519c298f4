"""train_gpt2cu -op muon on the CPU execution target (dev/cuda_cpu): Muon on the blocks' 2-D weights, AdamW on the rest.

The reference is the small-vocabulary d2 of `make cuda-cpu-refs` (build/cuda_cpu_refs/vocab509/: a 509-token
vocabulary, so that the Muon matrices are most of the model; its Muon debug state is written by train_gpt2.py's
writer with `--optimizer muon`'s defaults, the steps torch.optim.Muon with the Newton-Schulz iteration in float32).
test_gpt2cu checks the Muon steps' losses against it in FP32 and BF16 (llmc/tensor_check.h's rules) and
resumes bit for bit; a debug state whose Nesterov flag was flipped must fail; two processes with ZeRO-1
(each owns whole Muon matrices) train as one process does and resume byte for byte.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import assert_one_error_line, debug_state_first_steps
from test_cuda_cpu import SMALL_REFS, binary, mpirun, run, step_losses, train_args


def muon_refs() -> tuple[Path, Path]:
    model, state = SMALL_REFS / "gpt2_d2.bin", SMALL_REFS / "gpt2_d2_muon_debug_state.bin"
    if not model.exists() or not state.exists():
        pytest.fail(f"{state} is missing: `make cuda-cpu-refs` writes it")
    return model, state


def run_test_gpt2cu(model: Path, state: Path, out: Path, precision: str = "fp32") -> subprocess.CompletedProcess[str]:
    return run([str(binary(f"test_gpt2cu_{precision}")), "-e", str(model), "-s", str(state), "-o", str(out)])


# FP32 checks all 10 Muon steps of the state at its tight tolerances, BF16 the first 4 (the same kernels each step;
# momentum reaches the update from the second step, the Nesterov term from the third)
MUON_STEPS = {"fp32": 10, "bf16": 4}


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_gpt2cu_checks_the_muon_steps_against_the_reference(tmp_path: Path, precision: str) -> None:
    model, state = muon_refs()
    steps = MUON_STEPS[precision]
    if steps < 10:
        state = debug_state_first_steps(state, tmp_path / f"muon_{steps}_steps.bin", steps)
    r = run_test_gpt2cu(model, state, tmp_path / "r", precision)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "optimizer: Muon" in r.stdout, r.stdout[:2000]
    assert re.search(rf"^\| loss step {steps - 1} .*\| ok", r.stdout, re.M), r.stdout[-2000:]
    assert re.search(r"^\| resume params \| bitwise: ok", r.stdout, re.M), r.stdout[-2000:]
    assert re.search(r"^\d+ passed, 0 failed", r.stdout, re.M), r.stdout[-2000:]


def test_gpt2cu_fails_on_a_muon_debug_state_with_the_other_nesterov_setting(tmp_path: Path) -> None:
    model, state = muon_refs()
    bad = debug_state_first_steps(state, tmp_path / "bad_debug_state.bin", 4, flip_nesterov=True)
    r = run_test_gpt2cu(model, bad, tmp_path / "r")
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    # the first step has no momentum yet; the Nesterov term shows from the third on (measured: step 3 is
    # 2.3x over its tolerance with the d2 reference's Muon lr 1e-3)
    assert re.search(r"^\| loss step 0 .*\| ok", r.stdout, re.M), r.stdout[-3000:]
    assert re.search(r"^\| loss step 3 .*\| FAIL", r.stdout, re.M), r.stdout[-3000:]


@pytest.mark.parametrize("flags,message", [(["-op", "sgd"], 'flag -op: bad value "sgd": use adamw or muon'),
                                           (["-op", "muon", "-oa", "spectral"], 'flag -oa: bad value "spectral"')])
def test_train_rejects_a_bad_optimizer_flag_in_one_line_in_the_cpu_trainers_words(flags: list[str], message: str) -> None:
    """The words of ./train_gpt2 (tests/test_muon.py checks the same lines there)."""
    model, _ = muon_refs()
    r = run([str(binary("train_gpt2cu_fp32")), *train_args(model, 1, 4), *flags])
    assert message in assert_one_error_line(r)


def test_train_muon_two_processes_zero1_equal_one_and_resume_byte_for_byte(tmp_path: Path) -> None:
    """bf16: one process with B=4 against two with B=2 each and ZeRO-1 (each rank owns whole Muon matrices and
    broadcasts them); then the two-process run resumed from its step-2 checkpoint writes the same step-4 model
    and training states (every rank's, with its Muon momentum and master weights), and a resume with -op adamw
    is refused in one line."""
    model, _ = muon_refs()
    exe = str(binary("train_gpt2cu_bf16"))
    muon = ["-op", "muon", "-ol", "0.02"]
    one = run([exe, *train_args(model, 4, 4), *muon])
    assert one.returncode == 0, one.stdout[-2000:] + one.stderr
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    two_args = [*train_args(model, 4, 2), *muon, "-z", "1", "-n", "2"]
    two = run(mpirun(2) + [exe, *two_args, "-o", str(straight)])
    assert two.returncode == 0, two.stdout[-2000:] + two.stderr
    a, b = step_losses(one.stdout), step_losses(two.stdout)
    assert len(a) == len(b) == 4, one.stdout[-1000:] + two.stdout[-1000:]
    assert max(abs(x - y) for x, y in zip(a, b)) <= 1e-3 * max(a), f"1 process {a} vs 2 processes ZeRO-1 {b}"
    assert a[-1] < a[0] - 0.1, f"Muon did not train: {a}"

    resumed.mkdir()
    for p in straight.glob("*00000002*"):
        shutil.copy(p, resumed / p.name)
    r = run(mpirun(2) + [exe, *two_args, "-o", str(resumed), "-y", "1"])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    assert "resumed from" in r.stdout
    for name in ["model_00000004.bin", "state_00000004_00000.bin", "state_00000004_00001.bin"]:
        assert (straight / name).read_bytes() == (resumed / name).read_bytes(), f"{name} differs after resume"

    adamw = run(mpirun(2) + [exe, *train_args(model, 4, 2), "-z", "1", "-n", "2", "-o", str(resumed), "-y", "1"])
    assert adamw.returncode != 0, adamw.stdout[-2000:] + adamw.stderr
    assert "written with optimizer muon, this run uses -op adamw" in adamw.stderr, adamw.stderr[-2000:]
