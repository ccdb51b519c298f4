"""Hostile files fed to the real programs: every loader must refuse them with ONE clear line.

For each file kind (model checkpoint fp32/bf16, debug state, tokenizer, token shard, HellaSwag eval
file, training state) a valid file is written with llmc's own writers and then damaged: headers that
claim gigabytes or petabytes, negative and zero sizes, one byte too few or too many, zero-length and
header-only files, out-of-range token ids, a bad start marker, lengths that run past the end. The
real binaries (./train_gpt2, ./test_gpt2) must exit with status 1 (not a signal) and print exactly one
line starting with "error:" that names the file (and the field). Memory: every run gets an address
space of 512 MB (RLIMIT_AS; the tiny model trains in less), so a loader that allocated what a header
claims (up to petabytes) before checking it against the file size would die with "out of memory"
instead of the expected message, and fail here. (Peak RSS is not measured: a child forked from pytest
inherits pytest's high-water mark, and lazily committed allocations would not show in it anyway.)
The Python readers (dev/data/data_common.py, dev/eval/export_hf.py, train_gpt2.py) get the same files.
Runtime: about 30 s on 2 cores (tiny models; the trainer never gets past loading).
"""

from __future__ import annotations

import importlib.util
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from conftest import PYTHON, REPO, make

sys.path.insert(0, str(REPO / "dev" / "data"))
from data_common import read_evalfile, write_evalfile  # noqa: E402
from pyllmc.reference.tokenizer_files import write_gpt2_tokenizer  # noqa: E402
from pyllmc.token_shards import DataFormatError, read_datafile, write_datafile  # noqa: E402

AS_LIMIT = 512 << 20  # address-space limit of every C run (bytes): a tiny model trains in 400 MB
# the tiny model every C case loads: maxT 8, V 5 (Vp 128), L 1, NH 2, C 8
TINY = dict(block_size=8, vocab_size=5, n_layer=1, n_head=2, n_embd=8)
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


# ----------------------------------------------------------------------------- running a program


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str


def run_limited(cmd: list[object], cwd: Path, timeout: float = 120) -> Outcome:
    """Runs cmd with its address space limited to AS_LIMIT: allocating what a hostile header claims fails."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))

    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=ENV, capture_output=True, text=True, errors="replace",
                          preexec_fn=limit, timeout=timeout)
    return Outcome(proc.returncode, proc.stdout, proc.stderr)


def assert_refused(o: Outcome, path: Path, keyword: str) -> None:
    """Exit 1 (not a signal), exactly one `error:` line naming the file and containing keyword, no allocation failure."""
    assert o.returncode == 1, (f"exit status {o.returncode}" + (f" (signal {signal.Signals(-o.returncode).name})"
                               if o.returncode < 0 else "") + f"\n{o.stderr[-3000:]}")
    errors = [line for line in o.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, o.stderr[-3000:]
    assert str(path.name) in errors[0], errors[0]
    assert keyword.lower() in errors[0].lower(), f"expected {keyword!r} in: {errors[0]}"
    assert "out of memory" not in errors[0], errors[0]


# ----------------------------------------------------------------------------- valid files from llmc's writers


def load_module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """Valid files: tiny checkpoint (fp32, bf16) + debug state, tokenizer, shards, eval file, a training checkpoint."""
    make("train_gpt2", "test_gpt2", "encode")
    d = tmp_path_factory.mktemp("hostile_base")
    # a single-process build of the trainer: the MPI build's MPI_Init alone takes about a second per
    # run; the loaders are the same code (test_mpi_build_refuses_hostile_files checks that build too)
    subprocess.run(["gcc", "-O2", "-std=gnu11", "-fopenmp", "-Wno-psabi", REPO / "train_gpt2.c", "-lm", "-o",
                    d / "train_gpt2"], check=True, capture_output=True)
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(REPO.parent / "shared" / "tiktoken_cache"))
    import torch

    ref = load_module("train_gpt2_ref", REPO / "train_gpt2.py")
    model = ref.GPT(ref.GPTConfig(**TINY))
    model.init_weights(42)
    ref.write_model(model, d / "tiny.bin", "float32")
    ref.write_model(model, d / "tiny_bf16.bin", "bfloat16")
    # the GPT-2 vocabulary with a tiny body, for the shard and eval cases (ids up to 50256)
    model_v = ref.GPT(ref.GPTConfig(block_size=32, vocab_size=50257, n_layer=1, n_head=2, n_embd=8))
    model_v.init_weights(42)
    ref.write_model(model_v, d / "tiny_v.bin", "float32")
    x = torch.tensor([[1, 2, 3, 4], [0, 1, 2, 3]])
    y = torch.tensor([[2, 3, 4, 0], [1, 2, 3, 4]])
    ref.write_debug_state(model, x, y, d / "debug.bin", ref.DebugOptimizer(steps=2))
    write_gpt2_tokenizer(d / "gpt2_tokenizer.bin")
    rng = np.random.default_rng(0)
    write_datafile(d / "shard_gpt2.bin", rng.integers(0, 50257, 4096))
    write_datafile(d / "shard_tiny.bin", rng.integers(0, 5, 4096))
    examples = [{"label": i % 4, "ctx_tokens": rng.integers(0, 50257, 5 + i).tolist(),
                 "ending_tokens": [rng.integers(0, 50257, 2 + k).tolist() for k in range(4)]} for i in range(3)]
    write_evalfile(d / "eval.bin", examples)
    # a small BPE ranks file (tiktoken's first 300 ranks) with dev/write_bpe.py's writer
    import tiktoken

    write_bpe = load_module("write_bpe_hostile", REPO / "dev" / "write_bpe.py")
    ranks = {t: r for t, r in tiktoken.get_encoding("gpt2")._mergeable_ranks.items() if r < 300}
    (d / "bpe.bin").write_bytes(write_bpe.bpe_file_bytes(ranks, 300))
    # a training run's checkpoint dir (model_00000001.bin, state_00000001_00000.bin, DONE_00000001)
    o = run_limited([d / "train_gpt2", "-e", d / "tiny.bin", "-i", d / "shard_tiny.bin", "-j", "", "-b", 1,
                      "-t", 8, "-x", 1, "-n", 1, "-o", d / "run", "-s", 0, "-v", 0], cwd=d)
    assert o.returncode == 0, o.stderr
    assert (d / "run" / "DONE_00000001").exists()
    return d


def i32(data: bytes, index: int, value: int) -> bytes:
    """data with header int32 number `index` set to value."""
    return data[: 4 * index] + struct.pack("<i", value) + data[4 * index + 4:]


def u32(data: bytes, index: int, value: int) -> bytes:
    return data[: 4 * index] + struct.pack("<I", value) + data[4 * index + 4:]


def u16_at(data: bytes, offset: int, value: int) -> bytes:
    return data[:offset] + struct.pack("<H", value) + data[offset + 2:]


# Each case: (name, function from the valid file's bytes to the hostile bytes, keyword of the error line)
Case = tuple[str, Callable[[bytes], bytes], str]


def damaged_copy(src: Path, dst: Path, damage: Callable[[bytes], bytes]) -> Path:
    """Writes damage(src's bytes) to dst and returns dst."""
    dst.write_bytes(damage(src.read_bytes()))
    return dst


def length_cases(short: str, too_long: str, header_only: str, empty: str) -> list[Case]:
    """The damage to a file's length: one byte short, one byte too long, its 1024-byte header only, no bytes at all;
    each with the keyword of the line that refuses it ("" leaves that case out)."""
    cases: list[Case] = [("one byte short", lambda b: b[:-1], short), ("one byte too long", lambda b: b + b"\0", too_long),
                         ("header only", lambda b: b[:1024], header_only), ("zero length", lambda b: b"", empty)]
    return [case for case in cases if case[2]]


CHECKPOINT_CASES: list[Case] = [
    ("V = 2^30", lambda b: i32(b, 3, 1 << 30), "vocab size V"),
    ("L, C, V, Vp at their limits (3 PB)", lambda b: i32(i32(i32(i32(i32(b, 4, 4096), 6, 1 << 17), 3, 1 << 24), 7, 1 << 24), 5, 1),
     "size mismatch"),
    ("maxT = 2^20", lambda b: i32(b, 2, 1 << 20), "size mismatch"),
    ("C negative", lambda b: i32(b, 6, -8), "channels C"),
    ("NH zero", lambda b: i32(b, 5, 0), "heads NH"),
    ("C not a multiple of NH", lambda b: i32(b, 5, 3), "multiple"),
    ("Vp < V", lambda b: i32(b, 7, 4), "padded vocab"),
    ("version 4", lambda b: i32(b, 1, 4), "version 4"),
    ("bf16 version on an fp32 body", lambda b: i32(b, 1, 5), "size mismatch"),
    ("wrong magic (a token shard)", lambda b: i32(b, 0, 20240520), "magic"),
    *length_cases("size mismatch", "size mismatch", "size mismatch", "1024-byte header"),
]


@pytest.mark.parametrize("case", CHECKPOINT_CASES, ids=[c[0] for c in CHECKPOINT_CASES])
@pytest.mark.parametrize("program", ["train_gpt2", "test_gpt2"])
def test_checkpoint_hostile(base: Path, tmp_path: Path, case: Case, program: str) -> None:
    name, damage, keyword = case
    bad = damaged_copy(base / "tiny.bin", tmp_path / "bad_model.bin", damage)
    if program == "train_gpt2":
        cmd = [base / "train_gpt2", "-e", bad, "-i", base / "shard_tiny.bin", "-j", "", "-b", 1, "-t", 8, "-x", 1, "-s", 0]
    else:
        cmd = [REPO / "test_gpt2", "-e", bad, "-s", base / "debug.bin"]
    assert_refused(run_limited(cmd, tmp_path), bad, keyword)


def test_bf16_checkpoint_one_byte_short(base: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad_bf16.bin"
    bad.write_bytes((base / "tiny_bf16.bin").read_bytes()[:-1])
    cmd = [base / "train_gpt2", "-e", bad, "-i", base / "shard_tiny.bin", "-j", "", "-b", 1, "-t", 8, "-x", 1, "-s", 0]
    assert_refused(run_limited(cmd, tmp_path), bad, "bf16")


DEBUG_STATE_CASES: list[Case] = [
    ("B = 2^30", lambda b: i32(b, 2, 1 << 30), "B = 1073741824"),
    ("B = 65536 (in range, 20 MB claimed)", lambda b: i32(b, 2, 65536), "size mismatch"),
    ("T > maxT", lambda b: i32(b, 3, 9), "T = 9"),
    ("T negative", lambda b: i32(b, 3, -4), "T = -4"),
    ("nsteps negative", lambda b: i32(b, 4, -1), "nsteps"),
    ("learning rate NaN", lambda b: u32(b, 5, 0x7FC00000), "optimizer setting"),
    ("token id 65535 with vocab 5", lambda b: i32(b, 256, 65535), "token id"),
    ("negative token id", lambda b: i32(b, 256 + 8, -1), "token id"),
    ("masked flag 2", lambda b: i32(b, 18, 2), "masked header[18] = 2"),
    ("wrong magic (a checkpoint)", lambda b: i32(b, 0, 20240326), "magic"),
    *length_cases("size mismatch", "", "size mismatch", "debug state"),
]


@pytest.mark.parametrize("case", DEBUG_STATE_CASES, ids=[c[0] for c in DEBUG_STATE_CASES])
def test_debug_state_hostile(base: Path, tmp_path: Path, case: Case) -> None:
    name, damage, keyword = case
    bad = damaged_copy(base / "debug.bin", tmp_path / "bad_debug.bin", damage)
    o = run_limited([REPO / "test_gpt2", "-e", base / "tiny.bin", "-s", bad], tmp_path)
    assert_refused(o, bad, keyword)


def tokenizer_length_overrun(b: bytes) -> bytes:
    return b[:-2]  # the last token's length byte now claims 2 bytes more than the file has


TOKENIZER_CASES: list[Case] = [
    ("length byte overrunning the file", tokenizer_length_overrun, "truncated"),
    ("vocab 2^31", lambda b: u32(b, 2, 1 << 31), "vocab size"),
    ("vocab 2^32-1", lambda b: u32(b, 2, 0xFFFFFFFF), "vocab size"),
    ("vocab 0", lambda b: u32(b, 2, 0), "vocab size"),
    ("EOT >= vocab", lambda b: u32(b, 3, 50257), "EOT"),
    ("token of length 0", lambda b: b[:1024] + b"\0" + b[1025:], "length 0"),
    ("one byte of trailing data", lambda b: b + b"x", "trailing"),
    ("version 4", lambda b: u32(b, 1, 4), "version 4"),
    ("version 3 with BOS >= vocab", lambda b: u32(u32(b, 1, 3), 4, 50257), "BOS token 50257"),
    *length_cases("", "", "vocab size", "tokenizer"),
]


@pytest.mark.parametrize("case", TOKENIZER_CASES, ids=[c[0] for c in TOKENIZER_CASES])
def test_tokenizer_hostile(base: Path, tmp_path: Path, case: Case) -> None:
    name, damage, keyword = case
    # the trainer reads the tokenizer from its working directory
    bad = damaged_copy(base / "gpt2_tokenizer.bin", tmp_path / "gpt2_tokenizer.bin", damage)
    cmd = [base / "train_gpt2", "-e", base / "tiny.bin", "-i", base / "shard_tiny.bin", "-j", "", "-b", 1, "-t", 8,
           "-x", 1, "-s", 0, "-v", 0]
    assert_refused(run_limited(cmd, tmp_path), bad, keyword)


SHARD_CASES: list[Case] = [
    ("ntok = 2^31-1", lambda b: i32(b, 2, 2**31 - 1), "size mismatch"),
    ("ntok negative", lambda b: i32(b, 2, -5), "-5"),
    ("ntok zero, header only", lambda b: i32(b[:1024], 2, 0), "empty"),
    ("token id 65535 with vocab 50257", lambda b: u16_at(b, 1024 + 2 * 5, 65535), "65535"),
    # ./train_gpt2 reads gpt-2 shards only; the Python reader, which takes both, finds the size wrong
    ("llama-3 magic on uint16 tokens", lambda b: i32(i32(b, 0, 20240801), 1, 7), "a llama-3 token shard"),
    ("version 2", lambda b: i32(b, 1, 2), "version 2"),
    *length_cases("size mismatch", "size mismatch", "", "1024-byte header"),
]


@pytest.mark.parametrize("case", SHARD_CASES, ids=[c[0] for c in SHARD_CASES])
def test_shard_hostile_in_the_trainer(base: Path, tmp_path: Path, case: Case) -> None:
    name, damage, keyword = case
    bad = damaged_copy(base / "shard_gpt2.bin", tmp_path / "bad_shard.bin", damage)
    cmd = [base / "train_gpt2", "-e", base / "tiny_v.bin", "-i", bad, "-j", "", "-b", 1, "-t", 8, "-x", 1, "-s", 0]
    assert_refused(run_limited(cmd, tmp_path), bad, keyword)


# an empty shard is valid for the Python reader and writer (the C loader needs at least one batch)
PY_SHARD_CASES = [c for c in SHARD_CASES if c[0] != "ntok zero, header only"]


@pytest.mark.parametrize("case", PY_SHARD_CASES, ids=[c[0] for c in PY_SHARD_CASES])
def test_shard_hostile_in_the_python_reader(base: Path, tmp_path: Path, case: Case) -> None:
    name, damage, keyword = case
    bad = damaged_copy(base / "shard_gpt2.bin", tmp_path / "bad_shard.bin", damage)
    with pytest.raises(DataFormatError) as info:
        np.asarray(read_datafile(bad))
    message = str(info.value)
    assert "\n" not in message and str(bad) in message, message


@pytest.mark.parametrize("case", [c for c in SHARD_CASES if c[0] in ("ntok = 2^31-1", "token id 65535 with vocab 50257", "zero length")],
                         ids=lambda c: c[0])
def test_shard_hostile_in_train_gpt2_py(base: Path, tmp_path: Path, case: Case) -> None:
    name, damage, keyword = case
    bad = damaged_copy(base / "shard_gpt2.bin", tmp_path / "bad_shard.bin", damage)
    proc = subprocess.run([PYTHON, REPO / "train_gpt2.py", "--model", "d1", "--num_iterations", "1", "--write_tensors", "0",
                           "--batch_size", "1", "--sequence_length", "8", "--input_bin", bad], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and bad.name in errors[0], proc.stderr[-3000:]


def eval_example_offsets(b: bytes) -> list[int]:
    offsets, at = [], 1024
    while at < len(b):
        offsets.append(at)
        at += struct.unpack_from("<H", b, at + 2)[0]
    return offsets


def eval_last_example_overruns(b: bytes) -> bytes:
    """The last example's byte-length field grows by 4: it runs past the end of the file."""
    last = eval_example_offsets(b)[-1]
    size = struct.unpack_from("<H", b, last + 2)[0]
    b = i32(b, 3, max(struct.unpack_from("<i", b, 12)[0], size + 4))  # keep it within the header's longest
    return u16_at(b, last + 2, size + 4)


EVAL_CASES: list[Case] = [
    ("bad start marker", lambda b: u16_at(b, 1024, 1234), "delimiter"),
    ("example length overrunning the file", eval_last_example_overruns, "truncated"),
    ("examples = 2^31-1", lambda b: i32(b, 2, 2**31 - 1), "examples"),
    ("examples negative", lambda b: i32(b, 2, -3), "examples"),
    ("longest example 2^30 bytes", lambda b: i32(b, 3, 1 << 30), "longest example"),
    ("token id 50300", lambda b: u16_at(b, 1024 + 2 * 6, 50300), "token id"),
    ("label 7", lambda b: u16_at(b, 1024 + 2 * 3, 7), "label"),
    *length_cases("truncated", "trailing", "examples", "eval"),
]


@pytest.mark.parametrize("case", EVAL_CASES, ids=[c[0] for c in EVAL_CASES])
def test_eval_file_hostile_in_the_trainer(base: Path, tmp_path: Path, case: Case) -> None:
    name, damage, keyword = case
    bad = damaged_copy(base / "eval.bin", tmp_path / "bad_eval.bin", damage)
    cmd = [base / "train_gpt2", "-e", base / "tiny_v.bin", "-i", base / "shard_gpt2.bin", "-j", "", "-b", 4, "-t", 32, "-x", 1,
           "-s", 0, "-v", 1, "-h", 1, "-he", bad]
    assert_refused(run_limited(cmd, tmp_path), bad, keyword)


@pytest.mark.parametrize("case", EVAL_CASES, ids=[c[0] for c in EVAL_CASES])
def test_eval_file_hostile_in_the_python_reader(base: Path, tmp_path: Path, case: Case) -> None:
    name, damage, keyword = case
    bad = damaged_copy(base / "eval.bin", tmp_path / "bad_eval.bin", damage)
    with pytest.raises(DataFormatError) as info:
        read_evalfile(bad)
    message = str(info.value)
    assert "\n" not in message and str(bad) in message, message


def test_mpi_build_refuses_hostile_files(base: Path, tmp_path: Path) -> None:
    """The ./train_gpt2 of `make` (MPI build when mpicc is there) gives the same single error lines."""
    bad_model = tmp_path / "bad_model.bin"
    bad_model.write_bytes(i32((base / "tiny.bin").read_bytes(), 3, 1 << 30))
    bad_shard = tmp_path / "bad_shard.bin"
    bad_shard.write_bytes(u16_at((base / "shard_gpt2.bin").read_bytes(), 1024 + 10, 65535))
    bad_eval = tmp_path / "bad_eval.bin"
    bad_eval.write_bytes(i32((base / "eval.bin").read_bytes(), 2, 2**31 - 1))
    common = ["-j", "", "-b", 4, "-t", 8, "-x", 1, "-s", 0]
    for flags, bad, keyword in [
        (["-e", bad_model, "-i", base / "shard_tiny.bin"], bad_model, "vocab size V"),
        (["-e", base / "tiny_v.bin", "-i", bad_shard], bad_shard, "65535"),
        (["-e", base / "tiny_v.bin", "-i", base / "shard_gpt2.bin", "-v", 1, "-h", 1, "-he", bad_eval], bad_eval, "examples"),
    ]:
        assert_refused(run_limited([REPO / "train_gpt2", *common, *flags], tmp_path), bad, keyword)


STATE = "state_00000001_00000.bin"
MODEL = "model_00000001.bin"
# (name, file in the checkpoint dir, damage, keyword)
TRAIN_STATE_CASES = [
    ("state one byte short", STATE, lambda b: b[:-1], "size mismatch"),
    ("state one byte too long", STATE, lambda b: b + b"\0", "size mismatch"),
    ("state zero length", STATE, lambda b: b"", "training state"),
    ("state header only", STATE, lambda b: b[:1024], "size mismatch"),
    ("state optimizer size 2^40", STATE, lambda b: b[:44 * 4] + struct.pack("<Q", 1 << 40) + b[46 * 4:], "optimizer state"),
    ("state extra bytes 2^31-1", STATE, lambda b: i32(b, 46, 2**31 - 1), "extra state"),
    ("state step negative", STATE, lambda b: i32(b, 10, -1), "step"),
    # the data loader refuses the position; its message names the shard it cannot position in
    ("state sample index 2^62", STATE, lambda b: b[:32 * 4] + struct.pack("<Q", 1 << 62) + b[34 * 4:], "cannot resume"),
    ("state of 4 processes", STATE, lambda b: i32(b, 2, 4), "processes"),
    ("state wrong magic", STATE, lambda b: i32(b, 0, 20240520), "magic"),
    ("model one byte short", MODEL, lambda b: b[:-1], "size mismatch"),
    ("model V = 2^30", MODEL, lambda b: i32(b, 3, 1 << 30), "vocab size V"),
]


@pytest.mark.parametrize("case", TRAIN_STATE_CASES, ids=[c[0] for c in TRAIN_STATE_CASES])
def test_resume_from_hostile_checkpoint_dir(base: Path, tmp_path: Path, case) -> None:
    name, which, damage, keyword = case
    run_dir = tmp_path / "run"
    shutil.copytree(base / "run", run_dir)
    bad = damaged_copy(run_dir / which, run_dir / which, damage)
    cmd = [base / "train_gpt2", "-e", base / "tiny.bin", "-i", base / "shard_tiny.bin", "-j", "", "-b", 1, "-t", 8,
           "-x", 2, "-n", 1, "-o", run_dir, "-y", 1, "-s", 0, "-v", 0]
    named = base / "shard_tiny.bin" if keyword == "cannot resume" else bad
    assert_refused(run_limited(cmd, tmp_path), named, keyword)


@pytest.mark.parametrize("case", CHECKPOINT_CASES, ids=[c[0] for c in CHECKPOINT_CASES])
def test_checkpoint_hostile_in_the_python_exporter(base: Path, tmp_path: Path, case: Case) -> None:
    export_hf = load_module("export_hf_hostile", REPO / "dev" / "eval" / "export_hf.py")
    name, damage, keyword = case
    bad = damaged_copy(base / "tiny.bin", tmp_path / "bad_model.bin", damage)
    with pytest.raises(export_hf.ExportError) as info:
        export_hf.read_checkpoint(bad)
    message = str(info.value)
    assert "\n" not in message and str(bad) in message, message


# ----------------------------------------------------------------------------- Python command lines on bad input

TRAIN_PY_CASES = [
    ("depth 0", ["--model", "d0"], "--model d0"),
    ("directory without weights as --model", ["--model", "{tmp}"], "not a Hugging Face GPT-2 directory"),
    ("batch size 0", ["--model", "d1", "--batch_size", "0"], "--batch_size 0"),
    ("sequence length 0", ["--model", "d1", "--sequence_length", "0"], "--sequence_length 0"),
    ("output dir is a file", ["--model", "d1", "--output_dir", "{tmp}/afile"], "afile"),
    ("shard is a directory", ["--model", "d1", "--input_bin", "{tmp}"], "is a directory"),
]


@pytest.mark.parametrize("case", TRAIN_PY_CASES, ids=[c[0] for c in TRAIN_PY_CASES])
def test_train_gpt2_py_bad_input_is_one_error_line(base: Path, tmp_path: Path, capsys, case) -> None:
    ref = load_module("train_gpt2_ref", REPO / "train_gpt2.py")
    name, args, expected = case
    (tmp_path / "afile").write_text("not a directory")
    argv = ["--input_bin", str(base / "shard_gpt2.bin"), "--num_iterations", "1", "--write_tensors", "0",
            "--batch_size", "1", "--sequence_length", "8"] + [a.format(tmp=tmp_path) for a in args]
    status = ref.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 1, err
    assert len(err) == 1 and err[0].startswith("error:") and expected in err[0], err


DATA_SCRIPTS = ["tinyshakespeare", "tinystories", "fineweb", "hellaswag"]


@pytest.mark.parametrize("script", DATA_SCRIPTS + ["../write_bpe", "../eval/export_hf", "../vislog"])
def test_python_script_unknown_flag_is_one_error_line(tmp_path: Path, script: str) -> None:
    required = ["-i", "x.bin", "-o", "out"] if script.endswith("export_hf") else []
    proc = subprocess.run([PYTHON, REPO / "dev" / "data" / f"{script}.py", *required, "--no-such-flag", "1"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "--no-such-flag" in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("script", ["tinyshakespeare", "tinystories", "hellaswag"])
def test_data_script_unwritable_data_dir_is_one_error_line(tmp_path: Path, script: str) -> None:
    (tmp_path / "afile").write_text("a file where a directory should be")
    proc = subprocess.run([PYTHON, REPO / "dev" / "data" / f"{script}.py", "--data_dir", tmp_path / "afile" / "sub"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "afile" in err[0], proc.stderr[-2000:]


BPE_CASES: list[Case] = [
    ("n_tokens 2^24 with max_len 255 (overflowed int)", lambda b: i32(i32(i32(i32(b, 2, 1 << 24), 3, 1 << 24), 4, 1 << 24), 5, 255),
     "does not match"),
    ("n_tokens 2^30", lambda b: i32(b, 2, 1 << 30), "n_tokens"),
    ("n_tokens negative", lambda b: i32(b, 2, -1), "n_tokens"),
    ("eot below n_tokens", lambda b: i32(b, 3, 5), "eot_token"),
    ("max_len 0", lambda b: i32(b, 5, 0), "max_len"),
    ("total_bytes 2^31-1", lambda b: i32(b, 4, 2**31 - 1), "total_bytes"),
    ("token of length 0", lambda b: b[:1024] + b"\0" + b[1025:], "length 0"),
    ("two equal tokens", lambda b: b[:1024 + 2] + b[1024:1025] + b[1025:1026] + b[1024 + 4:], "equal"),
    *length_cases("does not match", "", "does not match", "BPE"),
]


@pytest.mark.parametrize("case", BPE_CASES, ids=[c[0] for c in BPE_CASES])
def test_bpe_ranks_hostile_in_encode(base: Path, tmp_path: Path, case: Case) -> None:
    name, damage, keyword = case
    bad = damaged_copy(base / "bpe.bin", tmp_path / "bad_bpe.bin", damage)
    proc = subprocess.run([REPO / "encode", "-b", bad], input=b"Hello world", cwd=tmp_path, capture_output=True,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT)), timeout=60)
    assert_refused(Outcome(proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")),
                   bad, keyword)


@pytest.mark.parametrize("case", TOKENIZER_CASES, ids=[c[0] for c in TOKENIZER_CASES])
def test_tokenizer_hostile_in_encode_decode(base: Path, tmp_path: Path, case: Case) -> None:
    name, damage, keyword = case
    bad = damaged_copy(base / "gpt2_tokenizer.bin", tmp_path / "bad_tokenizer.bin", damage)
    proc = subprocess.run([REPO / "encode", "-d", "-t", bad], input=b"15496 995", cwd=tmp_path, capture_output=True,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT)), timeout=60)
    assert_refused(Outcome(proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")),
                   bad, keyword)


# ----------------------------------------------------------------------------- Python readers on random damage

EXTREMES = [0, 1, -1, 2**31 - 1, -2**31, 1 << 30, 1 << 24, 65535, 65536, 50257]


def mutations(good: bytes, rng: np.random.Generator, count: int) -> list[bytes]:
    """Random damage: header ints set to extreme values, flipped bytes, truncation, appended bytes."""
    out = []
    for _ in range(count):
        b = bytearray(good)
        kind = rng.integers(0, 4)
        if kind == 0:
            i = int(rng.integers(0, 8))
            b[4 * i: 4 * i + 4] = struct.pack("<i", int(rng.choice(EXTREMES)))
        elif kind == 1:
            for _ in range(int(rng.integers(1, 5))):
                pos = int(rng.integers(0, len(b)))
                b[pos] = int(rng.integers(0, 256))
        elif kind == 2:
            b = b[: int(rng.integers(0, len(b)))]
        else:
            b += bytes(rng.integers(0, 256, int(rng.integers(1, 9))).astype(np.uint8))
        out.append(bytes(b))
    return out


def test_python_readers_never_crash_on_damaged_files(base: Path, tmp_path: Path) -> None:
    """Each damaged file is either read or refused with the reader's own one-line error, never another exception."""
    export_hf = load_module("export_hf_damage", REPO / "dev" / "eval" / "export_hf.py")
    rng = np.random.default_rng(8)
    readers = [
        ("shard_gpt2.bin", lambda p: np.asarray(read_datafile(p)), DataFormatError),
        ("eval.bin", read_evalfile, DataFormatError),
        ("tiny.bin", export_hf.read_checkpoint, export_hf.ExportError),
        ("tiny_bf16.bin", export_hf.read_checkpoint, export_hf.ExportError),
    ]
    path = tmp_path / "damaged.bin"
    refused = 0
    for name, read, error in readers:
        for data in mutations((base / name).read_bytes(), rng, 150):
            path.write_bytes(data)
            try:
                read(path)
            except error as e:
                refused += 1
                assert "\n" not in str(e) and str(path) in str(e), str(e)
    assert refused > 300  # most damage is detected (flipped body bytes can stay valid)
