"""The PyTorch references on chat shards (issue 47): the loader's targets (-1 where the loss mask does not supervise,
and at each row's last position), the masked loss (the step's supervised cross-entropies over their count N_step,
across micro-batches and DDP ranks; the val loss likewise), the step with no supervised position, fine-tuning from a
model file with GPT-2's vocabulary grown to the chat tokens, and the one-line errors. Every family of the registry,
each on a d2 model written by its own reference; the runs are in-process except DDP's (torchrun)."""

from __future__ import annotations

import importlib
import math
import os
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import PYTHON, REPO, losses_from_log, make, run
from pyllmc.families import NAMES, by_name
from pyllmc.llama3_tokenizer import load_llama3_tokenizer
from pyllmc.token_shards import write_chat_datafile, write_datafile

T = 16  # every conversation's length
SAMPLES = 6  # conversations per chat shard: 6 rows of T tokens
GPT2_V, GPT2_CHAT_V = 50257, 50261
LR = 1e-3


def reference(name: str) -> ModuleType:
    return importlib.import_module(by_name(name).module)


@contextmanager
def working_directory(path: Path):
    old = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def family_flags(name: str, tokenizer: Path) -> list[str]:
    """The flags a d2 of the family needs besides --model: the test tokenizer where dN takes its vocabulary from one."""
    return [] if by_name(name).depth_vocab is not None else ["--tokenizer", str(tokenizer)]


def chat_vocab(name: str, tokenizer: Path) -> int:
    """The ids a chat shard of the family may hold: GPT-2's with the four chat tokens, dN's vocabulary, or the tokenizer's."""
    if name == "gpt2":
        return GPT2_CHAT_V
    depth_vocab = by_name(name).depth_vocab
    return depth_vocab if depth_vocab is not None else load_llama3_tokenizer(str(tokenizer)).vocab_size


def random_mask(rng: np.random.Generator, rows: int, empty_rows: tuple[int, ...] = ()) -> np.ndarray:
    """(rows * T,) uint8: about a third of the positions supervised, a different count in every row, none at a
    conversation's first token, none at all in `empty_rows`."""
    mask = np.zeros((rows, T), dtype=np.uint8)
    for r in range(rows):
        if r not in empty_rows:
            mask[r, 1:] = rng.random(T - 1) < 0.2 + 0.1 * (r % 4)
            mask[r, 1 + r % (T - 1)] = 1
    return mask.reshape(-1)


def write_chat_shard(path: Path, name: str, tokenizer: Path, seed: int, rows: int = SAMPLES,
                     empty_rows: tuple[int, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    """A chat shard of random ids (GPT-2's: some of them the chat tokens 50257..50260) and a random_mask; returns
    (tokens, mask)."""
    rng = np.random.default_rng(seed)
    V = chat_vocab(name, tokenizer)
    tokens = rng.integers(0, V, size=rows * T)
    if name == "gpt2":
        tokens[::5] = GPT2_V + np.arange(len(tokens[::5])) % 4
    mask = random_mask(rng, rows, empty_rows)
    write_chat_datafile(path, tokens, mask, T, by_name(name).family.shards.model_desc, V)
    return tokens, mask


def train(name: str, tokenizer: Path, model: Path | str, shard: Path, out: Path, capsys, *extra: object,
          status: int = 0) -> tuple[str, str]:
    """The family's reference in this process on `shard` (no files but --output_dir's): (stdout, stderr)."""
    argv = ["--model", str(model), *family_flags(name, tokenizer), "--device", "cpu", "--input_bin", str(shard),
            "--sequence_length", str(T), "--write_tensors", "0", "--learning_rate", str(LR), "--output_dir", str(out),
            *map(str, extra)]
    capsys.readouterr()
    got = reference(name).main(argv)
    stdout, stderr = capsys.readouterr()
    assert got == status, stdout[-2000:] + stderr[-2000:]
    return stdout, stderr


@pytest.fixture(scope="module")
def base_models(tmp_path_factory, llama3_tokenizer) -> dict[str, Path]:
    """Each family's d2 from scratch as its reference writes it (--write_tensors on a plain shard of random ids)."""
    out = tmp_path_factory.mktemp("chat_base_models")
    models = {}
    for name in NAMES:
        row = by_name(name)
        V = GPT2_V if name == "gpt2" else chat_vocab(name, llama3_tokenizer)
        plain = out / f"{name}_plain.bin"
        write_datafile(plain, np.random.default_rng(1).integers(0, V, size=4 * T), row.family.shards.model_desc, V)
        with working_directory(out):
            status = reference(name).main(["--model", "d2", *family_flags(name, llama3_tokenizer), "--device", "cpu",
                                           "--input_bin", str(plain), "--batch_size", "1", "--sequence_length", str(T),
                                           "--num_iterations", "0", "--write_tensors", "1", "--debug_steps", "1"])
        assert status == 0
        models[name] = out / f"{name}_d2.bin"
        assert models[name].exists()
    return models


def read_model(name: str, path: Path) -> torch.nn.Module:
    """The model of a file, with GPT-2's vocabulary grown by hand when the file holds 50,257 ids: the four new rows of
    wte (tied lm_head) its rows' mean."""
    model = reference(name).read_model(path)
    if name == "gpt2" and model.config.vocab_size == GPT2_V:
        sd = model.state_dict()
        wte = sd["transformer.wte.weight"]
        grown = torch.cat([wte, wte.double().mean(dim=0).float().expand(GPT2_CHAT_V - GPT2_V, -1)])
        model = reference(name).GPT(replace(model.config, vocab_size=GPT2_CHAT_V))
        sd["transformer.wte.weight"] = sd["lm_head.weight"] = grown
        model.load_state_dict(sd)
    return model.eval()


def hand_loss(model: torch.nn.Module, tokens: np.ndarray, mask: np.ndarray, rows: list[int]) -> float:
    """The mean over the supervised positions of the conversations `rows` of -log p(next token), in float64 from the
    model's logits: position j of a row is supervised when mask[j + 1] is 1 (the row's last position never)."""
    x = torch.from_numpy(tokens.reshape(-1, T)[rows].astype(np.int64))
    supervised = torch.from_numpy(mask.reshape(-1, T)[rows][:, 1:] == 1)  # (rows, T-1)
    with torch.no_grad():
        logits, _ = model(x, torch.zeros_like(x))  # (rows, T, V)
    logp = F.log_softmax(logits.double(), dim=-1)[:, :-1]
    picked = logp.gather(-1, x[:, 1:, None])[..., 0]  # (rows, T-1): log p of each next token
    return float(-picked[supervised].mean())


def model_tensors(name: str, path: Path) -> dict[str, np.ndarray]:
    return by_name(name).read_model(path)[1]


# ---------------------------------------------------------------------------- the loader's rule


def test_the_loader_targets_supervised_next_tokens_and_splits_samples_over_ranks(tmp_path, llama3_tokenizer):
    from pyllmc.reference.data_loader import DistributedDataLoader

    tokens, mask = write_chat_shard(tmp_path / "chat.bin", "gpt2", llama3_tokenizer, seed=3, rows=8)
    rows = tokens.reshape(-1, T)
    # 2 ranks of B=2: a sample is 4 rows, rank 1 reads rows 2, 3 of it; 8 rows hold 2 samples, then it starts over
    loader = DistributedDataLoader(str(tmp_path / "chat.bin"), 2, T, rank=1, nproc=2, vocab_size=GPT2_CHAT_V)
    assert loader.masked
    for first_row in (2, 6, 2):
        x, y = loader.next_batch()
        assert x.tolist() == rows[first_row : first_row + 2].tolist()
        for b in range(2):
            r = first_row + b
            want = [int(rows[r, j + 1]) if mask[r * T + j + 1] else -1 for j in range(T - 1)] + [-1]
            assert y[b].tolist() == want


# ---------------------------------------------------------------------------- the masked loss, every family


@pytest.mark.parametrize("name", NAMES)
def test_first_step_and_val_losses_are_the_mean_over_supervised_positions(name, tmp_path, capsys, base_models,
                                                                          llama3_tokenizer):
    """Fine-tuning the family's d2 model file on a chat shard: the first step loss (B=2) is the hand-computed mean
    over the supervised positions of rows 0 and 1, the step-0 val loss (2 batches) that of rows 0..3."""
    tokens, mask = write_chat_shard(tmp_path / "chat.bin", name, llama3_tokenizer, seed=5)
    stdout, _ = train(name, llama3_tokenizer, base_models[name], tmp_path / "chat.bin", tmp_path / "run", capsys,
                      "--batch_size", 2, "--num_iterations", 1, "--input_val_bin", tmp_path / "chat.bin",
                      "--val_loss_every", 1, "--val_max_steps", 2)
    model = read_model(name, base_models[name])
    log = (tmp_path / "run" / "main.log").read_text()
    val = float(log.split("s:0 tel:")[1].split()[0])
    assert losses_from_log(tmp_path / "run" / "main.log")[0] == pytest.approx(hand_loss(model, tokens, mask, [0, 1]),
                                                                             rel=2e-6)
    assert val == pytest.approx(hand_loss(model, tokens, mask, [0, 1, 2, 3]), rel=2e-6)
    assert "chat shards: the loss is over the positions their loss mask supervises" in stdout


@pytest.mark.parametrize("name", NAMES)
def test_gradient_accumulation_gives_the_big_batchs_loss_and_update(name, tmp_path, capsys, base_models,
                                                                     llama3_tokenizer):
    """-b 1 with -d 4*T (4 micro-steps, a different supervised count each, one of them none) takes the same first step
    as -b 4: the loss of the step's N_step positions, not a mean of the micro-steps' means."""
    tokens, mask = write_chat_shard(tmp_path / "chat.bin", name, llama3_tokenizer, seed=7, empty_rows=(2,))
    big_out, accum_out = tmp_path / "big", tmp_path / "accum"
    train(name, llama3_tokenizer, base_models[name], tmp_path / "chat.bin", big_out, capsys, "--batch_size", 4,
          "--num_iterations", 1)
    train(name, llama3_tokenizer, base_models[name], tmp_path / "chat.bin", accum_out, capsys, "--batch_size", 1,
          "--total_batch_size", 4 * T, "--num_iterations", 1)
    big, accum = losses_from_log(big_out / "main.log"), losses_from_log(accum_out / "main.log")
    model = read_model(name, base_models[name])
    assert big[0] == pytest.approx(hand_loss(model, tokens, mask, [0, 1, 2, 3]), rel=2e-6)
    assert accum[0] == pytest.approx(big[0], abs=1e-5)
    a, b = model_tensors(name, big_out / "model_00000001.bin"), model_tensors(name, accum_out / "model_00000001.bin")
    before = model_tensors(name, base_models[name])
    for key in a:
        assert np.allclose(a[key], b[key], rtol=0, atol=2e-6), key
    moved = max(float(np.abs(a[k] - before[k]).max()) for k in a)
    assert moved > 0.5 * LR


def test_gpt2_vocab_grows_to_the_chat_tokens_with_the_mean_row(tmp_path, capsys, base_models, llama3_tokenizer):
    """GPT-2's 50,257-id model file on chat shards: one line says V becomes 50,261 and how the new rows start; with a
    zero learning rate the checkpoint holds V = 50,261 (Vp 50,304), rows 50,257..50,260 the mean of the others."""
    write_chat_shard(tmp_path / "chat.bin", "gpt2", llama3_tokenizer, seed=9)
    stdout, _ = train("gpt2", llama3_tokenizer, base_models["gpt2"], tmp_path / "chat.bin", tmp_path / "run", capsys,
                      "--batch_size", 2, "--num_iterations", 1, "--learning_rate", 0)
    lines = [line for line in stdout.splitlines() if "50257 -> 50261" in line]
    assert lines == ["chat shards: vocab size 50257 -> 50261 for <|user_start|>, <|user_end|>, <|assistant_start|>, "
                     "<|assistant_end|>; their rows of wte (the tied lm_head) start as the mean of its first 50257 rows"]
    header, tensors = by_name("gpt2").read_model(tmp_path / "run" / "model_00000001.bin")
    assert (header.V, header.Vp) == (GPT2_CHAT_V, 50304)
    wte, base = tensors["wte"], model_tensors("gpt2", base_models["gpt2"])["wte"]
    assert np.array_equal(wte[:GPT2_V], base[:GPT2_V])
    mean = base[:GPT2_V].astype(np.float64).mean(axis=0)
    assert np.allclose(wte[GPT2_V:GPT2_CHAT_V], mean[None, :], rtol=0, atol=1e-8)
    assert not wte[GPT2_CHAT_V:].any()
    # the grown file fine-tunes on: no second growth
    stdout, _ = train("gpt2", llama3_tokenizer, tmp_path / "run" / "model_00000001.bin", tmp_path / "chat.bin",
                      tmp_path / "again", capsys, "--batch_size", 2, "--num_iterations", 1)
    assert "50257 -> 50261" not in stdout


# ---------------------------------------------------------------------------- the step with nothing to learn


def test_a_step_without_supervised_positions_trains_nothing_and_says_so(tmp_path, capsys, base_models,
                                                                       llama3_tokenizer):
    """Rows 0 and 1 (step 1's batch) have no supervised position: one line says so, the parameters stay, step 2 trains
    on rows 2 and 3 from the same model with AdamW's bias correction of step 2 (as the C trainers' t = step + 1)."""
    name = "llama3"
    tokens, mask = write_chat_shard(tmp_path / "chat.bin", name, llama3_tokenizer, seed=11, empty_rows=(0, 1))
    stdout, _ = train(name, llama3_tokenizer, base_models[name], tmp_path / "chat.bin", tmp_path / "one", capsys,
                      "--batch_size", 2, "--num_iterations", 1)
    said = [line for line in stdout.splitlines() if "no supervised position" in line]
    assert said == ["step    1/1 | no supervised position in this step's batches: nothing trained"]
    before = model_tensors(name, base_models[name])
    after = model_tensors(name, tmp_path / "one" / "model_00000001.bin")
    assert all(np.array_equal(before[k], after[k]) for k in before)

    train(name, llama3_tokenizer, base_models[name], tmp_path / "chat.bin", tmp_path / "two", capsys,
          "--batch_size", 2, "--num_iterations", 2)
    log = (tmp_path / "two" / "main.log").read_text().splitlines()
    assert [line.split()[0] for line in log] == ["s:1"]
    assert losses_from_log(tmp_path / "two" / "main.log")[0] == pytest.approx(
        hand_loss(read_model(name, base_models[name]), tokens, mask, [2, 3]), rel=2e-6)
    # AdamW's first update at t = 2: |m_hat / sqrt(v_hat)| = sqrt(1 + beta2) / (1 + beta1) where the gradient is far
    # above eps (it would be 1 at t = 1); the largest step of a matrix is that times the learning rate
    delta = np.abs(model_tensors(name, tmp_path / "two" / "model_00000002.bin")["qkvw"] - before["qkvw"]).max()
    assert delta / LR == pytest.approx(math.sqrt(1.95) / 1.9, rel=1e-4)


# ---------------------------------------------------------------------------- DDP


def test_two_ddp_processes_take_the_one_process_steps(tmp_path, base_models, llama3_tokenizer):
    """torchrun with 2 ranks of B=1 reproduces one process of B=2: N_step is all-reduced before the first backward
    (rank 1's row of the first step has no supervised position, rank 0's rows differ in count)."""
    name = "llama3"
    write_chat_shard(tmp_path / "chat.bin", name, llama3_tokenizer, seed=13, empty_rows=(1,))

    def losses(nproc: int, batch: int) -> tuple[list[float], dict[str, np.ndarray]]:
        torchrun = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", nproc]
        out = tmp_path / f"{nproc}x{batch}"
        run([*(torchrun if nproc > 1 else [PYTHON]), REPO / by_name(name).reference, "--model", base_models[name],
             *family_flags(name, llama3_tokenizer), "--device", "cpu", "--input_bin", tmp_path / "chat.bin",
             "--sequence_length", T, "--batch_size", batch, "--num_iterations", 3, "--write_tensors", 0,
             "--learning_rate", LR, "--output_dir", out], cwd=tmp_path, env={"OMP_NUM_THREADS": "1"})
        return losses_from_log(out / "main.log"), model_tensors(name, out / "model_00000003.bin")

    (one, one_model), (two, two_model) = losses(1, 2), losses(2, 1)
    assert len(one) == len(two) == 3
    assert np.allclose(one, two, atol=1e-5, rtol=0), (one, two)
    for key in one_model:
        assert np.allclose(one_model[key], two_model[key], rtol=0, atol=1e-5), key


# ---------------------------------------------------------------------------- errors


def error_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


def test_a_sequence_length_other_than_the_shards_is_one_error_line(tmp_path, capsys, base_models, llama3_tokenizer):
    write_chat_shard(tmp_path / "chat.bin", "llama3", llama3_tokenizer, seed=15)
    argv = ["--model", str(base_models["llama3"]), "--tokenizer", str(llama3_tokenizer), "--device", "cpu",
            "--input_bin", str(tmp_path / "chat.bin"), "--sequence_length", "8", "--batch_size", "2",
            "--num_iterations", "1", "--write_tensors", "0"]
    capsys.readouterr()
    assert reference("llama3").main(argv) == 1
    assert error_lines(capsys.readouterr().err) == [
        f"error: {tmp_path / 'chat.bin'}: a chat shard of 16-token conversations, but --sequence_length is 8: "
        "they must be equal"]


def test_chat_and_plain_shards_in_one_pattern_are_one_error_line(tmp_path, capsys, base_models, llama3_tokenizer):
    write_chat_shard(tmp_path / "a_chat.bin", "nanochat", llama3_tokenizer, seed=17)
    write_datafile(tmp_path / "b_plain.bin", np.arange(4 * T), "gpt-2")
    _, stderr = train("nanochat", llama3_tokenizer, base_models["nanochat"], tmp_path / "*.bin", tmp_path / "run",
                      capsys, "--batch_size", 2, "--num_iterations", 1, status=1)
    assert error_lines(stderr) == [
        f"error: '{tmp_path / '*.bin'}' mixes chat shards with a loss mask ({tmp_path / 'a_chat.bin'}) and token shards "
        f"without one ({tmp_path / 'b_plain.bin'}): use one kind per pattern"]


# ---------------------------------------------------------------------------- the C trainers against their references


@pytest.mark.parametrize("name", NAMES)
def test_the_c_trainer_and_its_reference_take_the_same_chat_steps(name, tmp_path, capsys, base_models,
                                                                   llama3_tokenizer):
    """./train_<name> and train_<name>.py fine-tune the same d2 model file on the same chat shards (GPT-2's V grown
    by both): 2 micro-steps of B=2 per step, step 2's rows supervising nothing (both skip it, and AdamW's next update
    is step 3's in both), the val loss every 2 steps; the same step and val losses."""
    make(by_name(name).trainer)
    write_chat_shard(tmp_path / "train.bin", name, llama3_tokenizer, seed=19, rows=12, empty_rows=(4, 5, 6, 7))
    write_chat_shard(tmp_path / "val.bin", name, llama3_tokenizer, seed=21, rows=4)
    steps = 4
    run([REPO / by_name(name).trainer, "-e", base_models[name], "-i", tmp_path / "train.bin", "-j", tmp_path / "val.bin",
         "-b", 2, "-t", T, "-d", 4 * T, "-x", steps, "-l", LR, "-v", 2, "-m", 2, "-s", 0, "-o", tmp_path / "c"],
        cwd=tmp_path, env={"OMP_NUM_THREADS": "1"})
    stdout, _ = train(name, llama3_tokenizer, base_models[name], tmp_path / "train.bin", tmp_path / "ref", capsys,
                      "--batch_size", 2, "--total_batch_size", 4 * T, "--num_iterations", steps,
                      "--input_val_bin", tmp_path / "val.bin", "--val_loss_every", 2, "--val_max_steps", 2)
    assert stdout.count("no supervised position in this step's batches: nothing trained") == 1

    def logged(out: Path, kind: str) -> dict[int, float]:
        """main.log's `kind` values (trl, tel, norm) by step."""
        return {int(line.split()[0][2:]): float(line.split(f"{kind}:")[1].split()[0])
                for line in (out / "main.log").read_text().splitlines() if f" {kind}:" in line}

    # main.log holds six decimals of the losses, the reference's four of the grad norm; without AdamW's count moving on
    # at the skipped step, step 3's loss would differ by about 2e-2
    for kind, steps_logged, tol in [("trl", [0, 2, 3], 1e-5), ("tel", [0, 2, 4], 1e-5), ("norm", [0, 2, 3], 2e-4)]:
        c, ref = logged(tmp_path / "c", kind), logged(tmp_path / "ref", kind)
        assert sorted(c) == sorted(ref) == steps_logged, (kind, c, ref)  # step 1 (0-based) trained nothing
        for step in c:
            assert c[step] == pytest.approx(ref[step], abs=tol), (kind, step, c, ref)
