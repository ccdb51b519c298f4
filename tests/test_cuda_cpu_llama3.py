"""The Llama 3 GPU trainer, executed on the CPU execution target (dev/cuda_cpu): test_llama3cu (FP32 and BF16)
against train_llama3.py's debug states, with recompute, gradient accumulation, two processes with ZeRO-1 and
Muon; train_llama3cu with two processes and ZeRO-1 against one, resume bit for bit, and checkpoints passed both
ways between it and the CPU trainer ./train_llama3.

The references are dev/llama3_refs.py's (`make llama3-debug-states`, the files test_llama3 checks against): the d2
state (GQA 2:1, untied lm_head) and the GQA 4:1 state (tied head, Llama 3.1 RoPE scaling, an FFN multiplier),
B=4, T=64, 10 AdamW steps; and in muon/ the d2 state of train_llama3.py --optimizer muon (Muon on the blocks'
matrices, AdamW on the rest).
`make cuda-cpu-build` builds the programs (`make test` does it before pytest).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import REPO, make, run
from test_cuda_cpu import BASE_ENV, binary, mpirun, step_losses


@pytest.fixture(scope="session")
def llama3_cuda_refs(llama3_references: Path) -> Path:
    """llama3_d2{,_debug_state}.bin, llama3_gqa{,_debug_state}.bin and llama3_tokenizer.bin in one directory, with
    the llama-3 tinyshakespeare shards in its ts/ and the d2 model and Muon debug state in its muon/
    (dev/llama3_refs.py's, the files test_llama3 checks against)."""
    return llama3_references


def test_llama3cu(refs: Path, tmp_path: Path, precision: str, model: str, *flags: str, launch: list[str] | None = None) -> str:
    r = run([*(launch or []), binary(f"test_llama3cu_{precision}"), "-e", refs / f"{model}.bin", "-s",
             refs / f"{model}_debug_state.bin", "-o", tmp_path / "resume", *flags], env=BASE_ENV, check=False)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert re.search(r"^\d+ passed, 0 failed", r.stdout, re.M), r.stdout[-2000:]
    return r.stdout


test_llama3cu.__test__ = False  # a helper, not a test

# precision, reference, flags: FP32 with the tight tolerances on both references (the GQA 4:1 one with
# recompute of SwiGLU and the RMSNorms and two micro-batches), BF16 with the BF16 rules
TEST_LLAMA3CU = [
    ("fp32", "llama3_d2", []),
    ("fp32", "llama3_gqa", ["-r", "2", "-a", "2"]),
    ("bf16", "llama3_d2", ["-r", "1"]),
]


@pytest.mark.parametrize("precision,model,flags", TEST_LLAMA3CU, ids=[f"{p}-{m}{''.join(f)}" for p, m, f in TEST_LLAMA3CU])
def test_test_llama3cu_passes_on_the_reference_states(llama3_cuda_refs: Path, tmp_path: Path, precision: str, model: str,
                                                       flags: list[str]) -> None:
    out = test_llama3cu(llama3_cuda_refs, tmp_path, precision, model, *flags)
    for row in ("logits", "dwte", "dqkvw", "dfcw2", "dlnfw", "loss step 9", "resume params"):
        assert re.search(rf"^\| {row} +\|.*ok", out, re.M), f"no passing row {row}:\n{out[-3000:]}"
    assert ("dlm_head" in out) == (model == "llama3_d2"), out[-3000:]  # untied d2, tied GQA 4:1


def test_test_llama3cu_two_processes_with_zero1(llama3_cuda_refs: Path, tmp_path: Path) -> None:
    test_llama3cu(llama3_cuda_refs, tmp_path, "bf16", "llama3_gqa", "-z", "1", launch=mpirun(2))


@pytest.mark.parametrize("precision,processes", [("fp32", 1), ("bf16", 2)])
def test_test_llama3cu_passes_on_the_muon_state(llama3_cuda_refs: Path, tmp_path: Path, precision: str, processes: int) -> None:
    """Muon's steps against the reference's; with two processes ZeRO-1, each rank updating whole matrices."""
    flags = ["-z", "1"] if processes == 2 else []
    out = test_llama3cu(llama3_cuda_refs / "muon", tmp_path, precision, "llama3_d2", *flags,
                        launch=mpirun(2) if processes == 2 else None)
    assert "optimizer: Muon" in out and re.search(r"^\| loss step 9 +\|.*ok", out, re.M), out[-3000:]


def train_args(refs: Path, steps: int, batch: int) -> list[object]:
    return ["-e", refs / "llama3_d2.bin", "-i", refs / "ts" / "tiny_shakespeare_train.bin", "-j",
            refs / "ts" / "tiny_shakespeare_val.bin", "-b", batch, "-t", 64, "-x", steps, "-v", 0, "-s", 0, "-l", "1e-3"]


def train_llama3cu(refs: Path, launch: list[str], *args: object, precision: str = "bf16") -> str:
    r = run([*launch, binary(f"train_llama3cu_{precision}"), *args], cwd=refs, env=BASE_ENV, check=False)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r.stdout


def test_train_llama3cu_two_processes_zero1_equal_one(llama3_cuda_refs: Path) -> None:
    """The same 256-token batches: one process with B=4, two with B=2 each and ZeRO-1."""
    one = step_losses(train_llama3cu(llama3_cuda_refs, [], *train_args(llama3_cuda_refs, 3, 4)))
    two = step_losses(train_llama3cu(llama3_cuda_refs, mpirun(2), *train_args(llama3_cuda_refs, 3, 2), "-z", 1))
    assert len(one) == len(two) == 3, (one, two)
    assert max(abs(a - b) for a, b in zip(one, two)) <= 1e-3 * max(one), f"1 process {one} vs 2 processes ZeRO-1 {two}"


def test_train_llama3cu_resume_is_bit_identical(llama3_cuda_refs: Path, tmp_path: Path) -> None:
    """Checkpoints at steps 2 and 4; a second run resumes from the step-2 checkpoint alone and writes the same
    step-4 model and training state, byte for byte; the model file is a Llama 3 model file ./train_llama3 reads."""
    args = [*train_args(llama3_cuda_refs, 4, 4), "-n", 2]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train_llama3cu(llama3_cuda_refs, [], *args, "-o", straight)
    resumed.mkdir()
    for p in straight.glob("*00000002*"):
        shutil.copy(p, resumed / p.name)
    assert "resumed from" in train_llama3cu(llama3_cuda_refs, [], *args, "-o", resumed, "-y", 1)
    for name in ("model_00000004.bin", "state_00000004_00000.bin"):
        assert (straight / name).read_bytes() == (resumed / name).read_bytes(), f"{name} differs after resume"
    assert (straight / "model_00000004.bin").read_bytes()[:4] == (20240803).to_bytes(4, "little")


def train_llama3(refs: Path, *args: object) -> str:
    make("train_llama3")
    return run([REPO / "train_llama3", *args], cwd=refs, env={"OMP_NUM_THREADS": "1"}).stdout


def continued_losses(tmp_path: Path, first: Callable[[Path], str], second: Callable[[Path], str]) -> tuple[list[float], list[float]]:
    """first(out) trains 4 steps with checkpoints at steps 2 and 4 in out; second(out) resumes (-y 1) from the step-2
    checkpoint alone (model and training state), copied into its own out: the step losses of each (4, then 2)."""
    one, two = tmp_path / "first", tmp_path / "second"
    first_losses = step_losses(first(one))
    two.mkdir()
    for p in one.glob("*00000002*"):
        shutil.copy(p, two / p.name)
    out = second(two)
    assert "resumed from" in out, out[-2000:]
    second_losses = step_losses(out)
    assert len(first_losses) == 4 and len(second_losses) == 2, (first_losses, out[-2000:])
    return first_losses, second_losses


def test_a_checkpoint_of_train_llama3cu_continues_in_train_llama3(llama3_cuda_refs: Path, tmp_path: Path) -> None:
    """train_llama3cu (FP32) writes the step-2 checkpoint, the CPU trainer resumes from it: its steps 3 and 4 are
    the GPU run's within float32 noise."""
    args = [*train_args(llama3_cuda_refs, 4, 4), "-n", 2]
    gpu, cpu = continued_losses(tmp_path, lambda out: train_llama3cu(llama3_cuda_refs, [], *args, "-o", out, precision="fp32"),
                                lambda out: train_llama3(llama3_cuda_refs, *args, "-o", out, "-y", 1))
    assert max(abs(a - b) for a, b in zip(gpu[2:], cpu)) <= 1e-5 * gpu[2], (gpu, cpu)


def test_a_checkpoint_of_train_llama3_continues_in_train_llama3cu(llama3_cuda_refs: Path, tmp_path: Path) -> None:
    """The other way: ./train_llama3 writes the step-2 checkpoint, train_llama3cu (FP32) resumes from it: its steps 3
    and 4 are the CPU run's within the same bound."""
    args = [*train_args(llama3_cuda_refs, 4, 4), "-n", 2]
    cpu, gpu = continued_losses(tmp_path, lambda out: train_llama3(llama3_cuda_refs, *args, "-o", out),
                                lambda out: train_llama3cu(llama3_cuda_refs, [], *args, "-o", out, "-y", 1, precision="fp32"))
    assert max(abs(a - b) for a, b in zip(cpu[2:], gpu)) <= 1e-5 * cpu[2], (cpu, gpu)
