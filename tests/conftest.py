"""Shared pytest fixtures: the repo, the tinyshakespeare shards, and reference files written by train_gpt2.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
TS_DIR = REPO / "dev" / "data" / "tinyshakespeare"
TS_TRAIN = TS_DIR / "tiny_shakespeare_train.bin"
TS_VAL = TS_DIR / "tiny_shakespeare_val.bin"


# The one line train_gpt2 / train_llama3 -p bf16 print when bf16 does not pay on this CPU (then they
# train in fp32): no AVX512-BF16 at all, or the start-up calibration measured too small a gain.
BF16_DECLINED = re.compile(
    r"-p bf16: training in fp32 instead: this CPU (has no AVX512-BF16, so bf16 GEMMs would be emulated in fp32 "
    r"and run slower|'s bf16 GEMM \(AVX512-BF16\) ran at \d+ GFLOP/s, its fp32 GEMM \([a-z-]+\) at \d+: less "
    r"than \d\.\d+x) \(LLMC_BF16=force runs bf16\)")


def run(cmd: list[object], cwd: Path | str = REPO, check: bool = True, env: dict[str, str] | None = None,
        timeout: float = 1800, input: str | bytes | None = None) -> subprocess.CompletedProcess:
    """Run a command, capturing its output (text, or bytes when `input` is bytes); on an unexpected failure
    show what it printed. `env` adds to (or overrides) the current environment."""
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=full_env, capture_output=True,
                          text=not isinstance(input, bytes), errors=None if isinstance(input, bytes) else "replace",
                          input=input, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]!s}\n"
                             f"--- stderr\n{proc.stderr[-4000:]!s}")
    return proc


def assert_one_error_line(proc: subprocess.CompletedProcess, status: int = 1, alone: bool = False) -> str:
    """The one line of stderr starting with "error: " of a process that exited with `status` and printed no
    Python traceback; with `alone`, stderr holds that line and nothing else."""
    stderr = proc.stderr if isinstance(proc.stderr, str) else proc.stderr.decode(errors="replace")
    assert proc.returncode == status, f"exit {proc.returncode}, want {status}\n{stderr[-2000:]}"
    assert "Traceback" not in stderr, stderr[-2000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, stderr[-2000:]
    if alone:
        assert stderr.strip() == errors[0], stderr[-2000:]
    return errors[0]


def make(*targets: str) -> None:
    run(["make", "--no-print-directory", *targets])


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def tinyshakespeare() -> tuple[Path, Path]:
    """(train, val) shards, made by dev/data/tinyshakespeare.py if they are not there yet."""
    if not (TS_TRAIN.exists() and TS_VAL.exists()):
        seed = REPO.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
        cache = TS_DIR / "tiny_shakespeare.txt"
        if seed.exists() and not cache.exists():
            TS_DIR.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(seed, cache)
        run([PYTHON, REPO / "dev" / "data" / "tinyshakespeare.py"])
    return TS_TRAIN, TS_VAL


def write_reference(workdir: Path, model: str, B: int = 4, T: int = 64) -> Path:
    """Run train_gpt2.py in `workdir` to write the checkpoint, tokenizer and debug state for `model`."""
    workdir.mkdir(parents=True, exist_ok=True)
    run([PYTHON, REPO / "train_gpt2.py", "--model", model, "--input_bin", TS_TRAIN, "--batch_size", B,
         "--sequence_length", T, "--num_iterations", 0, "--write_tensors", 1, "--seed", 42], cwd=workdir)
    return workdir


@pytest.fixture(scope="session")
def d12_reference(tmp_path_factory, tinyshakespeare) -> Path:
    """Directory holding gpt2_124M.bin, gpt2_124M_bf16.bin, gpt2_124M_debug_state.bin, gpt2_tokenizer.bin (d12)."""
    return write_reference(tmp_path_factory.mktemp("d12"), "d12")


@pytest.fixture(scope="session")
def d2_reference(tmp_path_factory, tinyshakespeare) -> Path:
    """Directory holding gpt2_d2.bin, gpt2_d2_bf16.bin, gpt2_d2_debug_state.bin, gpt2_tokenizer.bin."""
    return write_reference(tmp_path_factory.mktemp("d2"), "d2")


def tinyshakespeare_text() -> Path:
    """The Tiny Shakespeare text: the data script's cache, else the machine's seed copy."""
    cache = TS_DIR / "tiny_shakespeare.txt"
    seed = REPO.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
    return cache if cache.exists() or not seed.exists() else seed


@pytest.fixture(scope="session")
def llama3_tokenizer(tmp_path_factory, tinyshakespeare) -> Path:
    """Directory holding tokenizer.json: a 514-token byte-level BPE in the Llama 3 style (dev/data/make_test_tokenizer.py;
    <|begin_of_text|> = 512, <|end_of_text|> = 513), trained on Tiny Shakespeare in about a second."""
    out = tmp_path_factory.mktemp("llama3_tokenizer")
    run([PYTHON, REPO / "dev" / "data" / "make_test_tokenizer.py", "--out_dir", out, "--corpus", tinyshakespeare_text()])
    return out


@pytest.fixture(scope="session")
def llama3_tinyshakespeare(tmp_path_factory, llama3_tokenizer) -> tuple[Path, Path]:
    """(train, val) llama-3 shards (uint32, magic 20240801 v7) of Tiny Shakespeare in the test tokenizer's ids."""
    data_dir = tmp_path_factory.mktemp("llama3_tinyshakespeare")
    shutil.copyfile(tinyshakespeare_text(), data_dir / "tiny_shakespeare.txt")
    run([PYTHON, REPO / "dev" / "data" / "tinyshakespeare.py", "--model_desc", "llama-3", "--tokenizer", llama3_tokenizer,
         "--data_dir", data_dir])
    return data_dir / "tiny_shakespeare_train.bin", data_dir / "tiny_shakespeare_val.bin"
