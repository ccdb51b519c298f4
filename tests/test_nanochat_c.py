"""The C side of nanochat: test_nanochat against every debug state of dev/nanochat_refs.py (MHA, GQA and MQA shapes,
softcap on and off, AdamW and Muon, the d2 from scratch) and its failure on a corrupted copy of each, train_nanochat's
init from scratch (bit for bit the reference's), training with AdamW and Muon, resume, MPI + ZeRO-1, -p bf16, bad
input in one line, and ./generate on a nanochat model.

The reference files are dev/nanochat_refs.py's, from `make nanochat-debug-states` (build/nanochat), copied once per
test run (the fixture below).
"""

from __future__ import annotations

import argparse
import re
import shutil
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import (REPO, assert_one_error_line, debug_state_first_steps, killed_after, make, run,  # noqa: E402
                      shared_dir)

MPIRUN = REPO / ".venv" / "bin" / "mpirun"
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMP_NUM_THREADS": "1"}
ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # tiny models: spinning OpenMP threads only hurt on a busy machine
MUON = ["-op", "muon", "-ol", 0.02]  # Muon on the blocks' matrices, AdamW (-l) on wte and lm_head
TENSORS = ["wte", "qkvw", "attprojw", "fcw", "fcprojw", "lm_head"]  # the model file's order (llmc/nanochat.h)


# ---------------------------------------------------------------------------- reference files


@pytest.fixture(scope="module")
def binaries() -> Path:
    make("train_nanochat", "test_nanochat", "train_gpt2", "train_llama3", "generate")
    return REPO


@pytest.fixture(scope="module")
def ref(tmp_path_factory, tinyshakespeare) -> Path:
    """dev/nanochat_refs.py's files (`make nanochat-debug-states`, written once in build/nanochat), copied once per run."""
    def copy(out: Path) -> None:
        make("nanochat-debug-states")
        shutil.copytree(REPO / "build" / "nanochat", out, dirs_exist_ok=True)

    return shared_dir(tmp_path_factory, "nanochat_references", copy)


@dataclass
class State:
    """A reference debug state and its model file, with what the test needs from their headers."""
    model: Path
    state: Path
    NH: int
    NKV: int
    softcap: float
    muon: bool

    @property
    def name(self) -> str:
        return str(self.state.relative_to(self.state.parents[1]))

    def sizes(self) -> dict[str, tuple[int, int]]:
        """(offset, count) in floats of each gradient tensor, from the model header."""
        h = np.fromfile(self.model, dtype="<i4", count=256)
        V, L, NH, NKV, C, FFN = (int(h[i]) for i in (3, 4, 5, 6, 7, 8))
        QKV = (NH + 2 * NKV) * (C // NH)
        counts = [V * C, L * QKV * C, L * C * C, L * FFN * C, L * C * FFN, V * C]
        offsets = np.concatenate([[0], np.cumsum(counts)])
        return {name: (int(offsets[k]), counts[k]) for k, name in enumerate(TENSORS)}


def states(ref: Path) -> list[State]:
    """Every debug state under ref with the model file beside it (X_debug_state.bin and X.bin)."""
    found = []
    for state in sorted(ref.rglob("*_debug_state.bin")):
        model = state.with_name(state.name.replace("_debug_state.bin", ".bin"))
        h = np.fromfile(model, dtype="<i4", count=256)
        f = np.fromfile(model, dtype="<f4", count=3, offset=1024)
        muon = struct.unpack_from("<i", state.read_bytes()[:64], 12 * 4)[0] == 1
        found.append(State(model, state, int(h[5]), int(h[6]), float(f[2]), muon))
    return found


def test_nanochat(model: Path, state: Path, *flags: object, check: bool = True):
    return run([REPO / "test_nanochat", "-e", model, "-s", state, *flags], env=ONE_THREAD, check=check)


test_nanochat.__test__ = False  # a helper, not a test


def train(data: tuple[Path, Path], cwd: Path, *flags: object, mpi_ranks: int = 0, check: bool = True,
          env: dict[str, str] | None = None):
    """./train_nanochat on the GPT-2 tinyshakespeare shards, in cwd."""
    cwd.mkdir(parents=True, exist_ok=True)
    cmd = [REPO / "train_nanochat", "-i", data[0], "-j", data[1], "-s", 0, *flags]
    base = ONE_THREAD
    if mpi_ranks:
        cmd, base = [MPIRUN, "--oversubscribe", "-np", mpi_ranks, *cmd], MPI_ENV
    return run(cmd, cwd=cwd, env={**base, **(env or {})}, check=check)


def small(ref: Path) -> tuple[list[object], tuple[Path, Path]]:
    """-e of the imported GQA model (V=512, about 100k parameters) and its shards (tinyshakespeare's GPT-2 ids modulo
    512): the checks of the training machinery, at a fraction of d2's cost (its 13M parameters' checkpoints)."""
    return ["-e", ref / "nanochat_gqa.bin"], (ref / "ts" / "tiny_shakespeare_train.bin", ref / "ts" / "tiny_shakespeare_val.bin")


def train_losses(log: Path) -> list[float]:
    """The s:N trl:LOSS values of a main.log, in step order."""
    found = {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"^s:(\d+) trl:(\S+)", log.read_text(), re.M)}
    return [found[k] for k in sorted(found)]


# ---------------------------------------------------------------------------- test_nanochat vs PyTorch


def test_test_nanochat_passes_on_every_reference_state(binaries, ref: Path) -> None:
    found = states(ref)
    shapes = {("MHA" if s.NKV == s.NH else "MQA" if s.NKV == 1 else "GQA") for s in found}
    assert shapes == {"MHA", "GQA", "MQA"}, [s.name for s in found]
    assert {s.softcap > 0 for s in found} == {True, False} and {s.muon for s in found} == {True, False}
    assert any(s.model.name == "nanochat_d2.bin" for s in found), [s.name for s in found]
    for s in found:
        out = test_nanochat(s.model, s.state).stdout
        assert re.search(r"^\d+ passed, 0 failed$", out, re.M), (s.name, out)
        for name in ["logits", "loss", *(f"d{t}" for t in TENSORS), "loss step 0", "norm step 0"]:
            assert re.search(rf"^\| {re.escape(name)} .*\| ok +\|$", out, re.M), (s.name, name, out)
        if s.muon:
            assert "with Muon on the block matrices" in out, out


def corrupt(s: State, out: Path, what: str) -> str:
    """A copy of s's state in out (with its model) with one value changed and only the steps the check needs (its
    first step, or two for a step loss: the failure does not need the rest); returns the table row that must fail.
    logit: one logit 1e-2 off; grad: the largest element of a gradient tensor off by 1 % of it (which tensor rotates
    with the state's name among its nonzero ones, so the tensors are hit across the states); step: the second step
    loss 1e-3 off."""
    out.mkdir(parents=True)
    short = debug_state_first_steps(s.state, out / s.state.name, 2 if what == "step" else 1, grad_norms=True)
    data = bytearray(short.read_bytes())
    B, T = struct.unpack_from("<2i", data, 8)
    V = int(np.fromfile(s.model, dtype="<i4", count=4)[3])
    logits = 1024 + 8 * B * T
    grads = logits + 4 * B * T * V + 4
    sizes = s.sizes()
    if what == "logit":
        at, delta, row = logits + 4 * (B * T * V // 2), 1e-2, "logits"
    elif what == "grad":
        largest = {name: float(np.abs(np.frombuffer(bytes(data), dtype="<f4", count=n, offset=grads + 4 * off)).max())
                   for name, (off, n) in sizes.items()}
        nonzero = [name for name in TENSORS if largest[name] > 0]
        name = nonzero[sum(map(ord, s.name)) % len(nonzero)]
        off, n = sizes[name]
        i = int(np.argmax(np.abs(np.frombuffer(bytes(data), dtype="<f4", count=n, offset=grads + 4 * off))))
        at, delta, row = grads + 4 * (off + i), 0.01 * largest[name], f"d{name}"
    else:
        at, delta, row = grads + 4 * (sum(n for _, n in sizes.values()) + 1), 1e-3, "loss step 1"
    struct.pack_into("<f", data, at, struct.unpack_from("<f", data, at)[0] + delta)
    short.write_bytes(bytes(data))
    shutil.copy(s.model, out)
    return row


@pytest.mark.parametrize("what", ["logit", "grad", "step"])
def test_test_nanochat_fails_on_a_corrupted_copy_of_each_state(binaries, ref: Path, tmp_path: Path, what: str) -> None:
    for k, s in enumerate(states(ref)):
        row = corrupt(s, tmp_path / str(k), what)
        proc = test_nanochat(tmp_path / str(k) / s.model.name, tmp_path / str(k) / s.state.name, check=False)
        assert proc.returncode == 1, (s.name, proc.stdout)
        failing = [line for line in proc.stdout.splitlines() if "FAIL" in line]
        assert len(failing) == 1 and failing[0].startswith(f"| {row} "), (s.name, row, failing)
        assert re.search(r"^\d+ passed, 1 failed$", proc.stdout, re.M)


def test_test_nanochat_passes_with_bf16_matmuls_and_reads_bf16_model_files(binaries, ref: Path, tmp_path: Path) -> None:
    for s in states(ref):
        if s.model.name in ("nanochat_gqa.bin", "nanochat_mqa.bin"):
            out = test_nanochat(s.model, s.state, "-p", "bf16").stdout
            assert "bf16 (GEMM inputs rounded to bf16)" in out and re.search(r"^\d+ passed, 0 failed$", out, re.M), out
    # the bf16 d2 file is the fp32 one rounded: widened on load, the bf16 table holds (its first 3 steps)
    state = debug_state_first_steps(ref / "nanochat_d2_debug_state.bin", tmp_path / "d2_debug_state.bin", 3, grad_norms=True)
    out = test_nanochat(ref / "nanochat_d2_bf16.bin", state, "-p", "bf16").stdout
    assert re.search(r"^\d+ passed, 0 failed$", out, re.M), out


# ---------------------------------------------------------------------------- train_nanochat


def test_init_from_scratch_equals_train_nanochat_py_bit_for_bit(binaries, ref: Path, tinyshakespeare, tmp_path: Path) -> None:
    train(tinyshakespeare, tmp_path, "-e", "d2", "-x", 0, "-o", "out", "-n", 1)
    d2 = next(s.model for s in states(ref) if s.model.name == "nanochat_d2.bin")
    assert (tmp_path / "out" / "model_00000000.bin").read_bytes() == d2.read_bytes()


@pytest.mark.parametrize("optimizer,flags", [("adamw", ["-b", 4, "-t", 64, "-x", 30, "-v", 15]),
                                             ("muon", ["-b", 2, "-t", 32, "-x", 20, "-v", 10, *MUON])])
def test_training_prints_every_step_and_lowers_the_loss(binaries, tinyshakespeare, tmp_path: Path, optimizer: str,
                                                        flags: list[object]) -> None:
    proc = train(tinyshakespeare, tmp_path, "-e", "d2", "-l", 3e-3, "-m", 2, "-o", "out", *flags)
    steps = flags[flags.index("-x") + 1]
    printed = [float(v) for v in re.findall(rf"^step \d+/{steps} \| loss (\S+)", proc.stdout, re.M)]
    assert printed == pytest.approx(train_losses(tmp_path / "out" / "main.log"), abs=1e-6) and len(printed) == steps
    assert sum(printed[-5:]) / 5 < sum(printed[:5]) / 5 - 1.5, printed
    vals = [float(v) for v in re.findall(r"val loss (\S+)", proc.stdout)]
    assert len(vals) == 3 and vals[2] < vals[0] - 2.0, proc.stdout
    if optimizer == "muon":
        assert "optimizer: Muon (lr 0.02, momentum 0.95, nesterov 1, 5 Newton-Schulz steps" in proc.stdout, proc.stdout


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_resume_continues_bit_identically(binaries, ref: Path, tmp_path: Path, optimizer: str) -> None:
    model, data = small(ref)
    flags = [*model, "-b", 2, "-t", 32, "-x", 4, "-v", 0, "-n", 2, "-c", 0.1, *(MUON if optimizer == "muon" else [])]
    train(data, tmp_path, *flags, "-o", "straight")
    part = killed_after(tmp_path / "straight", tmp_path / "part", 2)
    resumed = train(data, tmp_path, *flags, "-o", "part", "-y", 1)
    assert "resumed from" in resumed.stdout
    assert train_losses(tmp_path / "straight" / "main.log")[2:] == train_losses(part / "main.log")
    assert (tmp_path / "straight" / "model_00000004.bin").read_bytes() == (part / "model_00000004.bin").read_bytes()
    # the training state records the optimizer (its momentum / moments continue the run)
    assert np.fromfile(part / "state_00000004_00000.bin", dtype="<i4", count=8)[6] == int(optimizer == "muon")


def test_two_processes_with_zero1_muon_equal_one_process(binaries, ref: Path, tmp_path: Path) -> None:
    model, data = small(ref)
    common = [*model, "-t", 32, "-x", 4, "-v", 0, "-c", 0.1, *MUON]
    train(data, tmp_path, *common, "-b", 4, "-o", "one")
    proc = train(data, tmp_path, *common, "-b", 2, "-z", 1, "-o", "two", mpi_ranks=2)
    assert "2 processes" in proc.stdout and "(Muon matrices whole)" in proc.stdout, proc.stdout
    one, two = train_losses(tmp_path / "one" / "main.log"), train_losses(tmp_path / "two" / "main.log")
    assert len(one) == len(two) == 4 and max(abs(a - b) for a, b in zip(one, two)) <= 1e-5, (one, two)


def test_bf16_trains_close_to_fp32(binaries, tinyshakespeare, tmp_path: Path) -> None:
    flags = ["-e", "d2", "-b", 2, "-t", 32, "-x", 4, "-v", 0]
    train(tinyshakespeare, tmp_path, *flags, "-p", "fp32", "-o", "fp32", env={"LLMC_BF16": ""})
    proc = train(tinyshakespeare, tmp_path, *flags, "-p", "bf16", "-o", "bf16", env={"LLMC_BF16": "force"})
    fp32, bf16 = train_losses(tmp_path / "fp32" / "main.log"), train_losses(tmp_path / "bf16" / "main.log")
    assert len(fp32) == len(bf16) == 4 and fp32 != bf16, proc.stdout
    assert max(abs(a - b) for a, b in zip(fp32, bf16)) < 2e-2, (fp32, bf16)


# ---------------------------------------------------------------------------- bad input


def damaged(ref: Path, tmp_path: Path, damage: str) -> Path:
    """The d2 model file with one header field changed (int32 header[i], float32 header[i] at 1024 + 4 i)."""
    data = bytearray(next(s.model for s in states(ref) if s.model.name == "nanochat_d2.bin").read_bytes())
    fmt, offset, value = {"softcap nan": ("<f", 1024 + 8, float("nan")), "softcap negative": ("<f", 1024 + 8, -1.0),
                          "heads": ("<i", 5 * 4, 3), "kv heads": ("<i", 6 * 4, 0), "truncated": ("", 0, 0)}[damage]
    if fmt:
        struct.pack_into(fmt, data, offset, value)
    else:
        data = data[:-4]
    path = tmp_path / "bad.bin"
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("damage,message", [("softcap nan", "softcap nan"), ("softcap negative", "softcap -1"),
                                            ("heads", "C = 128 must be NH = 3 times an even head size"),
                                            ("kv heads", "kv heads NKV (header[6]) = 0"), ("truncated", "truncated")])
def test_a_bad_nanochat_header_gets_one_error_line(binaries, ref: Path, tinyshakespeare, tmp_path: Path, damage: str,
                                                   message: str) -> None:
    path = damaged(ref, tmp_path, damage)
    for proc in [train(tinyshakespeare, tmp_path, "-e", path, "-x", 1, check=False),
                 test_nanochat(path, ref / "nanochat_d2_debug_state.bin", check=False)]:
        line = assert_one_error_line(proc)
        assert str(path) in line and message in line, line


def test_other_families_files_get_one_error_line(binaries, ref: Path, tinyshakespeare, tmp_path: Path) -> None:
    """A GPT-2 model file (train_gpt2 -e d2 writes one) to train_nanochat and test_nanochat, a nanochat one to
    train_gpt2 and train_llama3: each names the file and both magics."""
    gpt2_dir = tmp_path / "gpt2"
    gpt2_dir.mkdir()
    run([REPO / "train_gpt2", "-e", "d2", "-i", tinyshakespeare[0], "-j", "", "-x", 0, "-o", "out", "-n", 1],
        cwd=gpt2_dir, env=ONE_THREAD)
    gpt2 = gpt2_dir / "out" / "model_00000000.bin"
    d2 = ref / "nanochat_d2.bin"
    for proc in [train(tinyshakespeare, tmp_path, "-e", gpt2, "-x", 1, check=False),
                 test_nanochat(gpt2, ref / "nanochat_d2_debug_state.bin", check=False)]:
        line = assert_one_error_line(proc)
        assert f"{gpt2}: not a nanochat model file (magic 20240326, expected 20251013)" in line, line
    for program, what in [("train_gpt2", "model checkpoint"), ("train_llama3", "Llama 3 model")]:
        proc = run([REPO / program, "-e", d2, "-i", tinyshakespeare[0], "-j", "", "-x", 1], cwd=tmp_path, env=ONE_THREAD,
                   check=False)
        line = assert_one_error_line(proc)
        assert f"{d2}: not a {what} file (magic 20251013, expected" in line, line


def test_gpt2_s_tokenizer_beside_a_small_vocab_model_samples_ids_and_says_why(binaries, ref: Path, tmp_path: Path) -> None:
    """nanochat_tokenizer.bin of GPT-2's 50257 tokens in the working directory of a V=512 model: not this model's
    tokenizer (its start token 50256 is outside the model's vocabulary), so training samples token ids, as without a
    tokenizer, and a line at start-up says why; the run finishes."""
    shutil.copy(ref / "nanochat_tokenizer.bin", tmp_path)
    assert int(np.fromfile(tmp_path / "nanochat_tokenizer.bin", dtype="<u4", count=3)[2]) == 50257
    model, data = small(ref)
    proc = train(data, tmp_path, *model, "-b", 2, "-t", 32, "-x", 2, "-v", 0, "-s", 1, "-g", 6)
    assert ("samples will be printed as token ids (nanochat_tokenizer.bin holds 50257 tokens, more than the model's "
            "vocab size 512: not this model's tokenizer)") in proc.stdout, proc.stdout
    samples = re.findall(r"^generating:\n---\n(.*)\n---$", proc.stdout, re.M)
    assert len(samples) == 2, proc.stdout
    for sample in samples:
        assert all(0 <= int(t) < 512 for t in sample.split()) and len(sample.split()) == 6, sample


def test_a_missing_model_names_the_reference(binaries, tinyshakespeare, tmp_path: Path) -> None:
    line = assert_one_error_line(train(tinyshakespeare, tmp_path, "-e", "nope.bin", "-x", 1, check=False))
    assert "nope.bin: no such nanochat model file" in line and "train_nanochat.py" in line, line



@pytest.mark.parametrize("depth", ["d5", "d9"])
def test_a_depth_whose_heads_do_not_divide_gets_the_references_error_line(binaries, tinyshakespeare, tmp_path: Path,
                                                                          depth: str) -> None:
    line = assert_one_error_line(train(tinyshakespeare, tmp_path, "-e", depth, "-x", 1, check=False))
    assert f"-e {depth}: bad nanochat config: channels C {64 * int(depth[1:])} is not a multiple of heads NH" in line, line


# ---------------------------------------------------------------------------- generate


def test_generate_runs_a_nanochat_model_and_its_cache_matches(binaries, ref: Path, tmp_path: Path) -> None:
    for s in states(ref):
        if s.muon:
            continue
        proc = run([REPO / "generate", "-e", s.model, "--ids", "1 2 3", "-n", 8, "--seed", 5, "--no-stop", "--check-kv",
                    "-t", tmp_path / "none.bin"], env=ONE_THREAD)
        assert "check-kv: 8 steps" in proc.stderr, proc.stderr
        assert re.fullmatch(r"( <\d+>){11}\n", proc.stdout), proc.stdout  # no tokenizer: the ids
        # the cached forward is the model's: greedy after the state's first row of inputs picks the reference's argmax
        B, T = struct.unpack_from("<2i", s.state.read_bytes()[:16], 8)
        V = int(np.fromfile(s.model, dtype="<i4", count=4)[3])
        x = np.fromfile(s.state, dtype="<i4", count=T, offset=1024)
        logits = np.fromfile(s.state, dtype="<f4", count=V, offset=1024 + 8 * B * T + 4 * (T - 1) * V)
        proc = run([REPO / "generate", "-e", s.model, "--ids", " ".join(map(str, x)), "-n", 1, "--temperature", 0,
                    "--no-stop", "-t", tmp_path / "none.bin"], env=ONE_THREAD)
        assert proc.stdout.split()[-1] == f"<{int(np.argmax(logits))}>", (s.name, proc.stdout[-100:])
    # with GPT-2's vocabulary in nanochat_tokenizer.bin: text prompts, decoded text, the same text for the same seed
    flags = ["-e", ref / "nanochat_d2.bin", "-t", ref / "nanochat_tokenizer.bin", "-n", 8, "--seed", 5, "--no-stop"]
    a = run([REPO / "generate", *flags, "-p", "ROMEO:", "--print-ids"], env=ONE_THREAD)
    assert re.search(r"^prompt ids: 33676 4720 25$", a.stderr, re.M), a.stderr  # tiktoken's gpt2 ids
    assert a.stdout.startswith("ROMEO:") and a.stdout == run([REPO / "generate", *flags, "-p", "ROMEO:"], env=ONE_THREAD).stdout
    # a tokenizer file of another vocabulary decodes but takes no text prompt; without one, a prompt must be --ids
    tok = tmp_path / "small_tokenizer.bin"
    header = np.zeros(256, dtype="<u4")
    header[:4] = [20240328, 2, 512, 511]
    tok.write_bytes(header.tobytes() + b"".join(bytes([1, i % 256]) if i < 256 else b"\x02" + i.to_bytes(2, "big")
                                                 for i in range(512)))
    gqa = ["-e", ref / "nanochat_gqa.bin", "-n", 4]
    line = assert_one_error_line(run([REPO / "generate", *gqa, "-t", tok, "-p", "Hi"], check=False))
    assert "text prompts need GPT-2's vocabulary (<|endoftext|> = 50256); give the prompt as --ids" in line, line
    assert "dev/eval/generate_text.py" in line, line
    assert run([REPO / "generate", *gqa, "-t", tok, "--ids", "7 8"], env=ONE_THREAD).returncode == 0
    line = assert_one_error_line(run([REPO / "generate", *gqa, "-t", tmp_path / "none.bin"], check=False))
    assert "none.bin: no such nanochat tokenizer file" in line and "--ids" in line, line



def test_generate_text_encodes_a_text_prompt_with_the_checkpoints_tokenizer_json(binaries, ref: Path,
                                                                                tmp_path: Path) -> None:
    import train_nanochat
    from test_nanochat_reference import tiny_bpe_tokenizer

    tok = tiny_bpe_tokenizer(tmp_path / "hf")  # <|bos|> = 0, 280 tokens; the GQA model has V = 512
    train_nanochat.NanoChatText(argparse.Namespace(tokenizer=""), tmp_path / "hf", 512).write(str(tmp_path / "tok.bin"))
    flags = ["-e", ref / "nanochat_gqa.bin", "-t", tmp_path / "tok.bin", "-n", 6, "--seed", 3, "--print-ids"]
    text = run([sys.executable, REPO / "dev" / "eval" / "generate_text.py", "--tokenizer", tmp_path / "hf",
                "-p", "hear me speak", *flags], env=ONE_THREAD)
    ids = [0, *tok.encode("hear me speak").ids]
    assert f"prompt ids: {' '.join(map(str, ids))}" in text.stderr, text.stderr
    by_ids = run([REPO / "generate", *flags, "--ids", " ".join(map(str, ids))], env=ONE_THREAD)
    assert text.stdout == by_ids.stdout and text.stdout.startswith("hear me speak"), text.stdout
    line = assert_one_error_line(run([sys.executable, REPO / "dev" / "eval" / "generate_text.py", "--tokenizer",
                                      tmp_path / "none", "-p", "x", *flags], check=False))
    assert "no such tokenizer.json" in line, line


# ---------------------------------------------------------------------------- the side-by-side of doc/nanochat.md


def test_compare_families_writes_the_table_and_the_plot(binaries, tinyshakespeare, tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    proc = run([sys.executable, REPO / "dev" / "compare_families.py", "--model", "d1", "--batch_size", 2, "--seq_len", 16,
                "--steps", 4, "--val_every", 2, "--val_batches", 1, "--out", out])
    summary = (out / "summary.md").read_text()
    assert summary.startswith("CPU: ") and summary.strip() in proc.stdout, proc.stdout
    rows = [line for line in summary.splitlines() if line.startswith("| ")]
    assert rows[0] == "| val loss at step | 0 | 2 | 4 | ms/step (median) |", summary
    assert rows[2].startswith("| gpt2 d1, AdamW lr 0.001 |"), summary
    assert rows[3].startswith("| nanochat d1, Muon lr 0.02 + AdamW lr 0.003 |"), summary
    for row in rows[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")][1:]
        assert len(cells) == 4 and all(float(c) > 0 for c in cells), row
    assert (out / "compare_families.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    gpt2, nanochat = ((out / name / "stdout.txt").read_text() for name in ("gpt2", "nanochat"))
    # each run's model line names its family (GPT-2's has no family word); a tokenizer warning may or may not appear
    assert re.search(r"^model: d1 L=", gpt2, re.M) and re.search(r"^model: d1 nanochat ", nanochat, re.M), gpt2[:2000]
    assert "optimizer: muon" in nanochat.lower(), nanochat[:2000]
