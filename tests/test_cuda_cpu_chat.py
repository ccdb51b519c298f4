"""Chat fine-tuning's masked loss in the GPU trainers, executed on the CPU execution target (dev/cuda_cpu): for every
family with a GPU trainer (llmc/families.h's GPU column), test_<name>cu in FP32 and BF16 passes a masked debug state
(llmc/debug_state.h header[18] = 1: about half of the targets -1, the loss, gradients and step losses those of the
mean over the supervised positions) and fails on a copy whose one masked target is its token again; train_<name>cu
trains on a chat shard (tokens, then a loss-mask byte per token: pyllmc.token_shards.write_chat_datafile) with the
step and val losses of the CPU trainer ./train_<name> (and skips the step with nothing supervised as it does), two
processes as one, and a GPT-2 model of V = 50257 grows to nanochat's chat tokens on the GPU as it does on the CPU.

The masked states are written here, by each family's reference (train_<name>.py's read_model and write_debug_state,
pyllmc.reference.debug_state.mask_half), from one small model of the family's reference set and the batch of its
debug state: GPT-2's d2 at a 509-token vocabulary, Llama 3's GQA 4:1 model (tied head), nanochat's GQA model (softcap
5) and Qwen3's MQA model (width 2C/3), 4 AdamW steps each. `make cuda-cpu-build` builds the programs (`make test` does
it before pytest).
"""

from __future__ import annotations

import importlib
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, make, shared_dir
from test_cuda_cpu import BASE_ENV, binary, check_test_program, failing_rows, mpirun, run, step_losses
from test_cuda_cpu_nanochat import nanochat_refs  # noqa: F401 (a fixture: nanochat's reference set)
from test_families import CUDA_FAMILIES
from pyllmc.families import by_name

# family -> (the fixture of its reference set, the model whose debug state's batch the masked state takes)
MASKED_SOURCES = {
    "gpt2": ("d2_small_vocab_reference", "gpt2_d2"),
    "llama3": ("llama3_references", "llama3_gqa"),
    "nanochat": ("nanochat_refs", "nanochat_gqa"),
    "qwen3": ("qwen3_references", "qwen3_mqa"),
}
MASKED_STEPS = 4
T = 64  # the debug states' and the chat shards' sequence length


def test_every_family_with_a_gpu_trainer_has_a_masked_state_here() -> None:
    assert sorted(MASKED_SOURCES) == sorted(CUDA_FAMILIES), (MASKED_SOURCES, CUDA_FAMILIES)


def read_batch(state: Path) -> tuple[np.ndarray, np.ndarray]:
    """x, y (B, T) int64 of a debug state (llmc/debug_state.h: after the 256-int header, x then y as int32)."""
    data = state.read_bytes()
    B, T_ = np.frombuffer(data, "<i4", 2, 8)
    xy = np.frombuffer(data, "<i4", 2 * B * T_, 1024).astype(np.int64).reshape(2, B, T_)
    return xy[0], xy[1]


def write_masked_state(family: str, source: Path, model: str, out: Path) -> None:
    """out/<model>.bin (a copy) and out/<model>_debug_state.bin: the family's reference's debug state of that model on
    the batch of its debug state in source, with mask_half's targets -1 (a masked state)."""
    import torch

    from pyllmc.reference.debug_state import DebugOptimizer, mask_half

    reference = importlib.import_module(f"train_{family}")
    shutil.copy(source / f"{model}.bin", out / f"{model}.bin")
    x, y = read_batch(source / f"{model}_debug_state.bin")
    reference.write_debug_state(reference.read_model(out / f"{model}.bin"), torch.from_numpy(x.copy()),
                                mask_half(torch.from_numpy(y.copy())), out / f"{model}_debug_state.bin",
                                DebugOptimizer(steps=MASKED_STEPS))


@pytest.fixture(scope="session")
def masked_states(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One directory with every family's masked state (MASKED_SOURCES) and its model, written once per test run."""
    def write(out: Path) -> None:
        for family, (fixture, model) in MASKED_SOURCES.items():
            write_masked_state(family, request.getfixturevalue(fixture), model, out)

    return shared_dir(tmp_path_factory, "chat_masked_states", write)


def masked_model(family: str) -> str:
    return MASKED_SOURCES[family][1]


# ----------------------------------------------------------------------------
# test_<name>cu on the masked states

# family, precision, flags, processes: every family in FP32 and BF16, and between them gradient accumulation,
# recompute and two processes with ZeRO-1 (loss_scale = processes x B x T / N: the processes' gradients are averaged)
TEST_MASKED = [(family, precision, [], 1) for family in MASKED_SOURCES for precision in ("fp32", "bf16")] + [
    ("llama3", "fp32", ["-a", "2", "-r", "2"], 1),
    ("gpt2", "bf16", ["-z", "1", "-a", "2"], 2),
    ("qwen3", "fp32", [], 2),
]


@pytest.mark.parametrize("family,precision,flags,processes", TEST_MASKED,
                         ids=[f"{f}-{p}{''.join(fl)}{'-2procs' if n > 1 else ''}" for f, p, fl, n in TEST_MASKED])
def test_test_cu_passes_on_a_masked_state(masked_states: Path, tmp_path: Path, family: str, precision: str,
                                          flags: list[str], processes: int) -> None:
    out = check_test_program(f"test_{family}cu_{precision}", masked_states, tmp_path, masked_model(family), *flags,
                             processes=processes)
    assert re.search(rf"^masked debug state: \d+ of the 4 x {T} positions supervised", out, re.M), out[-3000:]
    for row in ("logits", "loss", "dwte", "grad norm", f"loss step {MASKED_STEPS - 1}", "resume params"):
        assert re.search(rf"^\| {row} +\|.*ok", out, re.M), f"no passing row {row}:\n{out[-3000:]}"


def unmask_one_target(masked: Path, unmasked_y: np.ndarray, dst: Path) -> int:
    """A copy of the masked state with its sixth masked target (-1) set back to the batch's token there; returns it."""
    data = bytearray(masked.read_bytes())
    B, T_ = np.frombuffer(data, "<i4", 2, 8)
    at = 1024 + 4 * B * T_  # y
    y = np.frombuffer(data, "<i4", B * T_, at).copy()
    i = int(np.flatnonzero(y == -1)[5])
    y[i] = unmasked_y.reshape(-1)[i]
    data[at:at + 4 * B * T_] = y.astype("<i4").tobytes()
    dst.write_bytes(bytes(data))
    return int(y[i])


# every family in FP32, nanochat (the softcap's gradient through the masked rows) in BF16 too
CORRUPTED = [(family, "fp32") for family in MASKED_SOURCES] + [("nanochat", "bf16")]


@pytest.mark.parametrize("family,precision", CORRUPTED, ids=[f"{f}-{p}" for f, p in CORRUPTED])
def test_test_cu_fails_on_a_masked_state_with_one_target_unmasked(request: pytest.FixtureRequest, masked_states: Path,
                                                                  tmp_path: Path, family: str, precision: str) -> None:
    """One of the 128 masked positions supervised again: its cross-entropy enters the loss (FP32) and its gradient
    every gradient tensor, so the program fails the rows of the loss's gradients."""
    fixture, model = MASKED_SOURCES[family]
    _, y = read_batch(request.getfixturevalue(fixture) / f"{model}_debug_state.bin")
    corrupted = tmp_path / "corrupted"
    corrupted.mkdir()
    shutil.copy(masked_states / f"{model}.bin", corrupted)
    token = unmask_one_target(masked_states / f"{model}_debug_state.bin", y, corrupted / f"{model}_debug_state.bin")
    assert token >= 0
    out = check_test_program(f"test_{family}cu_{precision}", corrupted, tmp_path, model, passes=False)
    failed = failing_rows(out)
    assert "dwte" in failed and "logits" not in failed, failed
    if precision == "fp32":
        assert "loss" in failed, failed


# ----------------------------------------------------------------------------
# train_<name>cu on chat shards


def write_chat_shard(path: Path, family: str, vocab_size: int, seed: int, conversations: int = 16,
                     special: list[int] | None = None, unsupervised: int = 0) -> None:
    """A chat shard of the family's format: conversations of T random ids below vocab_size, each a prompt (mask 0), a
    reply (mask 1) of random lengths and padding (mask 0); `special` ids are written at the start of every reply (the
    chat tokens a model may lack); the conversations at indices 4..4+unsupervised have no reply (mask 0 throughout)."""
    from pyllmc.token_shards import write_chat_datafile

    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab_size, size=conversations * T)
    mask = np.zeros(conversations * T, dtype=np.uint8)
    for c in range(conversations):
        prompt = int(rng.integers(4, T // 2))
        reply = int(rng.integers(len(special or []) + 1, T - prompt))
        if not 4 <= c < 4 + unsupervised:
            mask[c * T + prompt:c * T + prompt + reply] = 1
        for k, token in enumerate(special or []):
            tokens[c * T + prompt + k] = token
    write_chat_datafile(path, tokens, mask, T, by_name(family).family.shards.model_desc, vocab_size)


def model_vocab(model: Path) -> int:
    """V: header[3] of every family's model file."""
    return int(np.fromfile(model, dtype="<i4", count=4)[3])


def chat_args(model: Path, shards: Path, steps: int, batch: int = 4, val_every: int = 2) -> list[object]:
    """steps of the chat shards in `shards` (chat_shards), the val loss (2 batches) every val_every steps."""
    return ["-e", model, "-i", shards / "chat_train.bin", "-j", shards / "chat_val.bin", "-b", batch, "-t", T, "-x", steps,
            "-v", val_every, "-m", 2, "-s", 0, "-l", "1e-3"]


def chat_shards(family: str, model: Path, out: Path, special: list[int] | None = None, unsupervised: int = 0) -> Path:
    """out/chat_train.bin (16 conversations: 4 batches of B=4) and out/chat_val.bin (8) for the model's vocabulary
    (or up to the special ids); `unsupervised` train conversations from the fifth have nothing supervised."""
    out.mkdir(exist_ok=True)
    V = max(model_vocab(model), max(special or [0]) + 1)
    write_chat_shard(out / "chat_train.bin", family, V, 1, special=special, unsupervised=unsupervised)
    write_chat_shard(out / "chat_val.bin", family, V, 2, conversations=8, special=special)
    return out


def train(program: Path, args: list[object], cwd: Path, launch: list[str] | None = None) -> str:
    r = run([*(launch or []), *(str(a) for a in (program, *args))], cwd=cwd, env={**BASE_ENV, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "train: chat shards: a step's loss is the mean over its supervised (mask 1) positions" in r.stdout, r.stdout[-3000:]
    return r.stdout


def val_losses(stdout: str) -> list[float]:
    return [float(m.group(1)) for m in re.finditer(r"^step \d+: val loss ([0-9.]+)", stdout, re.M)]


def assert_close(gpu: list[float], cpu: list[float], count: int, rel: float) -> None:
    assert len(gpu) == len(cpu) == count, (gpu, cpu)
    assert max(abs(a - b) for a, b in zip(gpu, cpu)) <= rel * cpu[0], (gpu, cpu)


SKIPPED_STEP = re.compile(r"^step (\d+)/\d+ \| no supervised position in this step's batches: nothing trained$", re.M)


@pytest.mark.parametrize("family", list(MASKED_SOURCES))
def test_train_cu_trains_on_a_chat_shard_as_the_cpu_trainer(masked_states: Path, tmp_path: Path, family: str) -> None:
    """One epoch of 4 steps (FP32, B=4) on a chat shard whose second batch has nothing supervised, val loss before and
    after steps 2 and 4: both trainers skip the same step in the same line, and the other steps' losses and the val
    losses are the CPU trainer's within the bound the checkpoints passed between the two trainers meet (5e-5 of the
    loss: the GPU trainer's GEMMs are TF32, its updates add to float32 noise)."""
    make(f"train_{family}")
    model = masked_states / f"{masked_model(family)}.bin"
    args = chat_args(model, chat_shards(family, model, tmp_path / "shards", unsupervised=4), 4)
    gpu = train(binary(f"train_{family}cu_fp32"), args, tmp_path)
    cpu = train(REPO / f"train_{family}", args, tmp_path)
    skipped = [SKIPPED_STEP.findall(out) for out in (gpu, cpu)]
    assert len(skipped[0]) == 1 and skipped[0] == skipped[1], skipped
    assert_close(step_losses(gpu), step_losses(cpu), 3, 5e-5)
    assert_close(val_losses(gpu), val_losses(cpu), 3, 5e-5)


def test_train_gpt2cu_two_processes_on_a_chat_shard_equal_one(masked_states: Path, tmp_path: Path) -> None:
    """The same 256-token batches, one process with B=4 or two with B=2 and ZeRO-1: each process's supervised count
    differs, the step's N is their sum, and the losses are one process's (FP32, float32 noise)."""
    model = masked_states / f"{masked_model('gpt2')}.bin"
    shards = chat_shards("gpt2", model, tmp_path / "shards")
    exe = binary("train_gpt2cu_fp32")
    one = train(exe, chat_args(model, shards, 3), tmp_path)
    two = train(exe, [*chat_args(model, shards, 3, batch=2), "-z", 1], tmp_path, launch=mpirun(2))
    assert "2 process(es)" in two, two[-3000:]
    assert_close(step_losses(two), step_losses(one), 3, 1e-5)
    assert_close(val_losses(two), val_losses(one), 3, 1e-5)


def test_train_gpt2cu_grows_gpt2s_vocabulary_for_the_chat_tokens_as_train_gpt2(d2_reference: Path, tmp_path: Path) -> None:
    """GPT-2's d2 (V = 50257) on a chat shard whose replies start with nanochat's four chat tokens (50257..50260):
    both trainers say V grows to 50261 in the same line, train with the same losses, and write checkpoints of
    V = 50261."""
    make("train_gpt2")
    model = d2_reference / "gpt2_d2.bin"
    assert model_vocab(model) == 50257
    shards = chat_shards("gpt2", model, tmp_path / "shards", special=[50257, 50258, 50259, 50260])
    args = [*chat_args(model, shards, 2, val_every=0), "-n", 2]
    gpu = train(binary("train_gpt2cu_fp32"), [*args, "-o", tmp_path / "gpu"], tmp_path)
    cpu = train(REPO / "train_gpt2", [*args, "-o", tmp_path / "cpu"], tmp_path)
    grows = [[line for line in out.splitlines() if "grows from 50257 to 50261" in line] for out in (gpu, cpu)]
    assert len(grows[0]) == 1 and grows[0] == grows[1], grows
    assert_close(step_losses(gpu), step_losses(cpu), 2, 5e-5)
    for side in ("gpu", "cpu"):
        assert model_vocab(tmp_path / side / "model_00000002.bin") == 50261, side
