"""Chat shards (a loss mask) in the C trainers (llmc/dataloader.h, llmc/trainer.h) and pyllmc.train.

Tiny chat shards of random ids and a random mask (pyllmc.token_shards.write_chat_datafile, no tokenizer), T = 16:
  - every CPU trainer of the registry: the first step's loss and the step-0 val loss are the mean of the PyTorch
    reference's per-token cross-entropies over the supervised positions (read_model of the trainer's own step-0
    checkpoint, the mean taken here), and the loader's targets follow the reading rule;
  - the N_step rule: -b 1 with gradient accumulation and 2 MPI processes give the step losses and gradient norms of one
    process with the whole batch (the rows hold different numbers of supervised positions, one process's none, so a
    mean of means would not);
  - a step with no supervised position says so and leaves the parameters as they were;
  - GPT-2's V grows to 50261 (one line; the new rows are the mean of the first 50257), and a resumed run keeps it;
    resume (-y 1) continues bit-identically; pyllmc.train prints and writes what ./train_gpt2 does;
  - bad input (T mismatch, chat and plain shards in one pattern, missing mask bytes, mask byte 2, a mask 1 at a
    conversation's start, ntok not a multiple of T; chat shards given to the OpenCL trainer): one error line each.
"""
from __future__ import annotations

import importlib
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, assert_one_error_line, make, run
from pyllmc.families import NAMES, by_name
from pyllmc.token_shards import read_chat_datafile, write_chat_datafile, write_datafile

T = 16
B = 4
GPT2_CHAT_V = 50261
MPIRUN = REPO / ".venv" / "bin" / "mpirun"
ENV = {"OMP_NUM_THREADS": "1", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
TWO_PROCESSES = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "2"]
LOSS_TOL = 2e-5  # main.log and the progress line print six decimals


def chat_shard(path: Path, model_desc: str, vocab: int, conversations: int, seed: int = 0,
               empty_rows: range = range(0)) -> tuple[np.ndarray, np.ndarray]:
    """A chat shard of random ids below vocab and a random mask (about a third supervised, a different count in
    every row, none at a conversation's start; rows in empty_rows supervise nothing); returns (tokens, mask)."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, size=conversations * T)
    mask = (rng.random(conversations * T) < 0.35).astype(np.uint8)
    mask[::T] = 0
    for row in empty_rows:
        mask[row * T:(row + 1) * T] = 0
    write_chat_datafile(path, tokens, mask, T, model_desc, vocab)
    return tokens, mask


def chat_targets(tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The reading rule of chat_spec section 1: targets[j] = tokens[j+1] where mask[j+1] == 1, else -1, and -1 at
    every row's last position."""
    targets = np.full(len(tokens), -1, dtype=np.int64)
    nxt = np.arange(1, len(tokens))
    keep = (mask[nxt] == 1) & (nxt % T != 0)
    targets[:-1][keep] = tokens[nxt][keep]
    return targets


def log_losses(log: Path, kind: str = "trl") -> dict[int, float]:
    return {int(m.group(1)): float(m.group(2)) for m in re.finditer(rf"^s:(\d+) {kind}:(\S+)", log.read_text(), re.M)}


def log_norms(log: Path) -> dict[int, float]:
    """The gradient norms of main.log's training steps (the N_step scale shows there: AdamW alone would hide it)."""
    return {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"^s:(\d+) trl:\S+ lr:\S+ norm:(\S+)", log.read_text(), re.M)}


def progress_losses(stdout: str) -> list[float]:
    return [float(x) for x in re.findall(r"^step \d+/\d+ \| loss ([-0-9.]+)", stdout, re.M)]


def trainer(name: str, *args: object, cwd: Path, mpi: bool = False, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [REPO / f"train_{name}", "-s", 0, *args]
    return run([*TWO_PROCESSES, *cmd] if mpi else cmd, cwd=cwd, env=ENV, check=check, timeout=600)


@pytest.fixture(scope="module")
def built() -> None:
    make(*(f"train_{name}" for name in NAMES))


def family_model(name: str, request: pytest.FixtureRequest) -> tuple[str, str, int]:
    """(-e for a d2 model of the family, its shard format, the ids its chat shard may use): the dN descriptor where the
    family's vocabulary is fixed, else the reference's d2 model file (its V from the test tokenizer)."""
    reg = by_name(name)
    model_desc = reg.family.shards.model_desc
    if reg.depth_vocab is not None:
        return "d2", model_desc, min(reg.depth_vocab, GPT2_CHAT_V)
    model = request.getfixturevalue(f"{name}_references") / f"{name}_d2.bin"
    vocab = struct.unpack_from("<i", model.read_bytes(), 12)[0]  # header[3] = V
    return str(model), model_desc, vocab


def reference_per_token_losses(name: str, model_file: Path, inputs: np.ndarray) -> np.ndarray:
    """(B, T) cross-entropies of every next-token prediction of the PyTorch reference (train_<name>.py's read_model)
    on inputs, against inputs shifted by one (the last column's against token 0: never used)."""
    import torch
    import torch.nn.functional as F
    ref = importlib.import_module(f"train_{name}")
    model = ref.read_model(model_file)
    model.eval()
    x = torch.from_numpy(inputs.astype(np.int64))
    y = torch.roll(x, -1, dims=1)
    with torch.no_grad():
        logits, _ = model(x, y, return_logits=True)
    return F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none").view(x.shape).numpy()


# ---------------------------------------------------------------------------- the loader's reading rule

def test_loader_targets_follow_the_reading_rule_and_two_ranks_read_what_one_does(tmp_path: Path) -> None:
    make("pyllmc")
    from pyllmc.data import DataLoader
    shard = tmp_path / "chat_train.bin"
    chat_shard(shard, "gpt-2", 50257, conversations=16)
    read = read_chat_datafile(shard, 50257)  # what the Python side reads, the C loader must read too
    assert read.seq_len == T
    tokens, mask = np.asarray(read.tokens), np.asarray(read.mask)
    targets = chat_targets(tokens, mask)
    one = DataLoader(str(shard), B=4, T=T, vocab_size=50257)
    assert one.masked
    ranks = [DataLoader(str(shard), B=2, T=T, rank=r, nproc=2, vocab_size=50257) for r in range(2)]
    for sample in range(4):  # the shard's 4 samples of 64 tokens, in order, then it wraps around
        x, y = one.next_batch()
        window = slice(sample * 64, (sample + 1) * 64)
        np.testing.assert_array_equal(x.ravel(), tokens[window])
        np.testing.assert_array_equal(y.ravel(), targets[window])
        halves = [np.concatenate([a.ravel().copy() for a in r.next_batch()]) for r in ranks]
        np.testing.assert_array_equal(np.concatenate([h[:32] for h in halves]), tokens[window])
        np.testing.assert_array_equal(np.concatenate([h[32:] for h in halves]), targets[window])
    assert (y[:, -1] == -1).all() and (y == -1).any() and (y != -1).any()


# ---------------------------------------------------------------------------- the masked loss against PyTorch

@pytest.mark.parametrize("name", NAMES)
def test_first_loss_and_val_loss_are_the_mean_over_supervised_positions(built, name: str, tmp_path: Path,
                                                                        request: pytest.FixtureRequest) -> None:
    model, model_desc, vocab = family_model(name, request)
    shard = tmp_path / "chat_train.bin"
    tokens, mask = chat_shard(shard, model_desc, vocab, conversations=2 * B)
    flags = ["-e", model, "-i", shard, "-j", shard, "-b", B, "-t", T, "-v", 1, "-m", 1, "-l", 1e-3]
    trainer(name, *flags, "-x", 0, "-o", "out0", "-n", 1, cwd=tmp_path)  # the model of step 0, as the trainer holds it
    proc = trainer(name, *flags, "-x", 1, cwd=tmp_path)
    assert "train: chat shards: a step's loss is the mean over its supervised (mask 1) positions" in proc.stdout

    inputs = tokens[:B * T].reshape(B, T)
    targets = chat_targets(tokens, mask)[:B * T].reshape(B, T)
    losses = reference_per_token_losses(name, tmp_path / "out0" / "model_00000000.bin", inputs)
    want = float(losses[targets != -1].mean())
    assert abs(want - float(losses.mean())) > 1e-3  # the mask changes the loss: the check below can tell
    (train_loss,) = progress_losses(proc.stdout)
    val_loss = float(re.search(r"^step 0: val loss ([-0-9.]+)", proc.stdout, re.M).group(1))
    assert abs(train_loss - want) <= 3e-6, (train_loss, want)  # printed to six decimals
    assert abs(val_loss - want) <= 3e-6, (val_loss, want)


# ---------------------------------------------------------------------------- N_step over micro-steps and ranks

def test_accumulation_and_two_processes_give_the_one_process_losses(built, tmp_path: Path) -> None:
    shard = tmp_path / "chat_train.bin"
    # the first step's last two rows supervise nothing: the second process (and the last micro-batches) hold none
    _, mask = chat_shard(shard, "gpt-2", GPT2_CHAT_V, conversations=4 * B, empty_rows=range(B // 2, B))
    per_row = mask.reshape(-1, T)[:, 1:].sum(axis=1)
    assert len(set(per_row[B:2 * B].tolist())) > 1  # the rows differ: a mean of the micro-batches' means would not do
    common = ["-e", "d2", "-i", shard, "-j", "", "-t", T, "-x", 4, "-l", 1e-3, "-c", 0.1]
    runs = {
        "one": dict(args=["-b", B], mpi=False),
        "accumulated": dict(args=["-b", 1, "-d", B * T], mpi=False),
        "two": dict(args=["-b", B // 2], mpi=True),
        "two_accumulated": dict(args=["-b", 1, "-d", B * T], mpi=True),
        "two_zero1": dict(args=["-b", B // 2, "-z", 1], mpi=True),  # fine-tuning shards AdamW's state as training does
    }
    losses, norms = {}, {}
    for label, r in runs.items():
        trainer("gpt2", *common, *r["args"], "-o", label, cwd=tmp_path, mpi=r["mpi"])
        losses[label] = log_losses(tmp_path / label / "main.log")
        norms[label] = log_norms(tmp_path / label / "main.log")
        assert len(losses[label]) == 4 and len(norms[label]) == 4, label
    for label in runs:
        for step in range(4):
            assert abs(losses[label][step] - losses["one"][step]) <= LOSS_TOL, (label, losses[label], losses["one"])
            assert abs(norms[label][step] - norms["one"][step]) <= 1e-5 * norms["one"][step], (label, norms[label],
                                                                                           norms["one"])


def test_a_step_without_supervised_positions_trains_nothing(built, tmp_path: Path) -> None:
    shard = tmp_path / "chat_train.bin"
    chat_shard(shard, "gpt-2", GPT2_CHAT_V, conversations=3 * B, empty_rows=range(B, 2 * B))  # the 2nd batch
    proc = trainer("gpt2", "-e", "d2", "-i", shard, "-j", "", "-b", B, "-t", T, "-x", 3, "-l", 1e-3, "-o", "out", "-n", 1,
                   cwd=tmp_path)
    lines = proc.stdout.splitlines()
    assert "step 2/3 | no supervised position in this step's batches: nothing trained" in lines, proc.stdout
    assert len(progress_losses(proc.stdout)) == 2
    out = tmp_path / "out"
    assert (out / "model_00000001.bin").read_bytes() == (out / "model_00000002.bin").read_bytes()
    assert (out / "model_00000002.bin").read_bytes() != (out / "model_00000003.bin").read_bytes()
    assert sorted(log_losses(out / "main.log")) == [0, 2]


# ---------------------------------------------------------------------------- GPT-2's vocabulary, resume

def header_V(model_file: Path) -> int:
    return struct.unpack_from("<i", model_file.read_bytes(), 12)[0]


def test_gpt2_vocab_grows_for_the_chat_tokens_and_a_resumed_run_keeps_it(built, tmp_path: Path) -> None:
    shard = tmp_path / "chat_train.bin"
    chat_shard(shard, "gpt-2", GPT2_CHAT_V, conversations=4 * B)
    flags = ["-e", "d2", "-i", shard, "-j", "", "-b", B, "-t", T, "-l", 1e-3, "-o", "out"]
    grow = ("chat shards: vocab size V grows from 50257 to 50261 for nanochat's chat tokens (ids 50257..50260, inside "
            "Vp 50304); their rows of wte (the tied lm_head) start as the mean of the first 50257 rows")
    first = trainer("gpt2", *flags, "-x", 0, "-n", 1, cwd=tmp_path)
    assert grow in first.stdout.splitlines()
    assert "V=50261 Vp=50304" in first.stdout
    model0 = tmp_path / "out" / "model_00000000.bin"
    assert header_V(model0) == GPT2_CHAT_V
    C = 128
    wte = np.frombuffer(model0.read_bytes(), dtype="<f4", count=50304 * C, offset=1024).reshape(50304, C)
    np.testing.assert_allclose(wte[50257:50261], np.broadcast_to(wte[:50257].astype(np.float64).mean(0), (4, C)),
                               rtol=0, atol=1e-7)
    assert not wte[50261:].any()

    # resume: a run stopped at step 2 and resumed to 4 writes the straight run's files, and V stays 50261
    (tmp_path / "straight").mkdir()
    (tmp_path / "resumed").mkdir()
    trainer("gpt2", *flags, "-x", 4, "-n", 2, cwd=tmp_path / "straight")
    trainer("gpt2", *flags, "-x", 2, "-n", 2, cwd=tmp_path / "resumed")
    resumed = trainer("gpt2", *flags, "-x", 4, "-n", 2, "-y", 1, cwd=tmp_path / "resumed")
    assert "resumed from out/model_00000002.bin at step 2" in resumed.stdout
    assert "vocab size V grows" not in resumed.stdout and "V=50261 Vp=50304" in resumed.stdout
    for f in ("model_00000004.bin", "state_00000004_00000.bin"):
        assert (tmp_path / "resumed" / "out" / f).read_bytes() == (tmp_path / "straight" / "out" / f).read_bytes(), f
    assert header_V(tmp_path / "resumed" / "out" / "model_00000004.bin") == GPT2_CHAT_V
    straight = log_losses(tmp_path / "straight" / "out" / "main.log")
    assert log_losses(tmp_path / "resumed" / "out" / "main.log") == straight and len(straight) == 4


@pytest.mark.parametrize("nproc", [1, 2], ids=["one_process", "mpirun_2"])
def test_pyllmc_train_prints_and_writes_what_train_gpt2_does_on_chat_shards(built, tmp_path: Path, nproc: int) -> None:
    """pyllmc.train runs ./train_gpt2's main(): on chat shards too, alone and under mpirun (its collectives through
    mpi4py: N_step, the losses, the gradients), the same output and files byte for byte."""
    make("pyllmc")
    shard = tmp_path / "chat_train.bin"
    chat_shard(shard, "gpt-2", GPT2_CHAT_V, conversations=4 * B)
    args = ["-e", "d2", "-i", shard, "-j", shard, "-b", B // nproc, "-t", T, "-x", 3, "-v", 2, "-m", 2, "-s", 0,
            "-l", 1e-3, "-n", 3, "-o", "out"]
    timings = re.compile(r"[0-9.]+ ms \| [0-9]+ tok/s|ETA [0-9:?]+|average step time [0-9.]+ ms")
    launch = TWO_PROCESSES if nproc == 2 else []
    shown = {}
    for label, cmd in (("c", [REPO / "train_gpt2"]), ("py", [sys.executable, "-m", "pyllmc.train"])):
        (tmp_path / label).mkdir()
        proc = run([*launch, *cmd, *args], cwd=tmp_path / label, env={**ENV, "PYTHONPATH": str(REPO)}, timeout=600)
        shown[label] = (timings.sub("<time>", proc.stdout), proc.stderr)
    assert shown["py"] == shown["c"]
    assert len(progress_losses(shown["c"][0])) == 3 and "vocab size V grows" in shown["c"][0]
    for f in ("model_00000003.bin", "state_00000003_00000.bin", "main.log"):
        assert (tmp_path / "py" / "out" / f).read_bytes() == (tmp_path / "c" / "out" / f).read_bytes(), f


# ---------------------------------------------------------------------------- bad input

def damaged(src: Path, dst: Path, edit) -> Path:
    data = bytearray(src.read_bytes())
    dst.write_bytes(bytes(edit(data)))
    return dst


def mask_offset(ntok: int, position: int) -> int:
    return 1024 + 2 * ntok + position


BAD_INPUT = {
    "t_mismatch": "chat shard of T = 16 token conversations, but the trainer's -t is 8 (they must be equal)",
    "mixed": "one pattern holds chat shards (with a loss mask) or plain ones, not both",
    "truncated": "size mismatch (header says 128 tokens and as many mask bytes = 1408 bytes, file has 1400 bytes): truncated",
    "mask_byte_2": "mask byte 2 at position 37, expected 0 or 1",
    "mask_at_start": "mask 1 at position 32, the first token of a conversation (T = 16)",
    "not_whole_conversations": "chat shard of 128 tokens, not a whole number of T = 24 token conversations",
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_chat_input_gives_one_error_line(built, tmp_path: Path, case: str) -> None:
    good = tmp_path / "data" / "a_chat.bin"
    good.parent.mkdir()
    tokens, _ = chat_shard(good, "gpt-2", 50257, conversations=8)
    pattern, t = good, T
    if case == "t_mismatch":
        t = 8
    elif case == "mixed":
        write_datafile(tmp_path / "data" / "b_plain.bin", tokens, "gpt-2")
        pattern = tmp_path / "data" / "*.bin"
    elif case == "truncated":
        damaged(good, good, lambda d: d[:-8])
    elif case == "mask_byte_2":
        damaged(good, good, lambda d: d[:mask_offset(len(tokens), 37)] + b"\x02" + d[mask_offset(len(tokens), 38):])
    elif case == "not_whole_conversations":
        damaged(good, good, lambda d: d[:12] + struct.pack("<i", 24) + d[16:])  # header[3] = T
    elif case == "mask_at_start":
        damaged(good, good, lambda d: d[:mask_offset(len(tokens), 32)] + b"\x01" + d[mask_offset(len(tokens), 33):])
    proc = trainer("gpt2", "-e", "d2", "-i", pattern, "-j", "", "-b", 2, "-t", t, "-x", 1, cwd=tmp_path, check=False)
    line = assert_one_error_line(proc)
    assert BAD_INPUT[case] in line, line


def test_opencl_trainer_refuses_chat_shards_in_one_line(tmp_path: Path) -> None:
    from conftest import require_system_packages
    require_system_packages("opencl")
    make("train_gpt2cl")
    shard = tmp_path / "chat_train.bin"
    chat_shard(shard, "gpt-2", 50257, conversations=8)
    proc = run([REPO / "train_gpt2cl", "-e", "d2", "-i", shard, "-j", "", "-b", 2, "-t", T, "-x", 1, "-s", 0],
               cwd=tmp_path, env=ENV, check=False)
    line = assert_one_error_line(proc)
    assert line == (f"error: {shard}: chat shards (a loss mask) are not supported by the OpenCL trainer (flag -i); "
                    "./train_gpt2 and ./train_gpt2cu train on them"), line
