"""./generate: KV-cached sampling from a checkpoint, deterministic for a seed."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_one_error_line, make, run

REPO = Path(__file__).resolve().parent.parent
if "TIKTOKEN_CACHE_DIR" not in os.environ and (REPO.parent / "shared" / "tiktoken_cache").is_dir():
    os.environ["TIKTOKEN_CACHE_DIR"] = str(REPO.parent / "shared" / "tiktoken_cache")

# a small random model with GPT-2's vocabulary and a short context (so the context limit is reachable)
L, C, NH, MAXT, V, VP = 2, 48, 4, 64, 50257, 50304


def write_checkpoint(path: Path, seed: int = 0) -> None:
    """A random fp32 llmc checkpoint written straight from numpy (large weights: peaked logits)."""
    rng = np.random.default_rng(seed)
    shapes = [(VP, C), (MAXT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C), (L, C), (L, C),
              (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]
    ts = [rng.normal(0.0, 0.3, s).astype(np.float32) for s in shapes]
    for i in (2, 8, 14):
        ts[i] += 1.0
    ts[0][V:] = 0.0
    header = np.zeros(256, dtype="<i4")
    header[:8] = [20240326, 3, MAXT, V, L, NH, C, VP]
    path.write_bytes(header.tobytes() + b"".join(t.tobytes() for t in ts))


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    make("generate")
    d = tmp_path_factory.mktemp("generate")
    subprocess.run([sys.executable, str(REPO / "dev" / "write_bpe.py"), "-o", str(d / "gpt2_bpe.bin")], check=True,
                   capture_output=True)
    write_checkpoint(d / "model.bin")
    return {"bin": REPO / "generate", "bpe": d / "gpt2_bpe.bin", "model": d / "model.bin", "dir": d}


def generate(env: dict[str, Path], *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [str(env["bin"]), "-e", str(env["model"]), "-b", str(env["bpe"]), *args]
    r = subprocess.run(cmd, input=stdin, capture_output=True, text=True, errors="replace", timeout=300)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def test_same_seed_gives_the_same_text(env: dict[str, Path]) -> None:
    args = ("-p", "The king said", "-n", "30", "--temperature", "0.8", "--top-k", "40", "--top-p", "0.95", "--no-stop")
    a = generate(env, *args, "--seed", "7").stdout
    b = generate(env, *args, "--seed", "7").stdout
    c = generate(env, *args, "--seed", "8").stdout
    assert a == b
    assert a != c
    assert a.startswith("The king said") and len(a) > len("The king said") + 30


def test_text_does_not_depend_on_the_thread_count(env: dict[str, Path]) -> None:
    cmd = [str(env["bin"]), "-e", str(env["model"]), "-b", str(env["bpe"]), "-p", "Thread count", "-n", "20", "--seed", "11",
           "--no-stop"]
    outs = [subprocess.run(cmd, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": str(n)}, timeout=300).stdout
            for n in (1, 2)]
    assert outs[0] == outs[1] and len(outs[0]) > 20


def test_kv_cache_matches_full_recompute(env: dict[str, Path]) -> None:
    r = generate(env, "-p", "First Citizen: Before we proceed", "-n", "25", "--seed", "3", "--no-stop", "--check-kv")
    m = re.search(r"check-kv: (\d+) steps, max \|cached - full\| logit difference (\S+)", r.stderr)
    assert m, r.stderr
    assert int(m.group(1)) == 25 and float(m.group(2)) < 1e-4


def test_generation_stops_at_the_context_length(env: dict[str, Path]) -> None:
    r = generate(env, "-p", "Hello world", "-n", "500", "--seed", "1", "--no-stop", "--check-kv")
    assert "stopping after 62 tokens at the model's context length 64" in r.stderr   # "Hello world" is 2 tokens
    assert "check-kv: 62 steps" in r.stderr


def test_greedy_is_seed_independent(env: dict[str, Path]) -> None:
    a = generate(env, "-p", "abc", "-n", "15", "--temperature", "0", "--seed", "1", "--no-stop").stdout
    b = generate(env, "-p", "abc", "-n", "15", "--temperature", "0", "--seed", "99", "--no-stop").stdout
    assert a == b


def test_interactive_prompts_one_per_line(env: dict[str, Path]) -> None:
    stdin = "To be or not\nNow is the winter\n"
    a = generate(env, "-i", "-n", "10", "--seed", "5", "--no-stop", stdin=stdin).stdout
    b = generate(env, "-i", "-n", "10", "--seed", "5", "--no-stop", stdin=stdin).stdout
    assert a == b
    assert a.count("\n") >= 2 and a.endswith("\n")
    assert "generated 20 tokens" in generate(env, "-i", "-n", "10", "--seed", "5", "--no-stop", stdin=stdin).stderr


def test_random_init_descriptor_runs(env: dict[str, Path]) -> None:
    r = subprocess.run([str(env["bin"]), "-e", "d1", "-b", str(env["bpe"]), "-n", "3", "--seed", "1"],
                       capture_output=True, text=True, errors="replace", timeout=300)
    assert r.returncode == 0, r.stderr
    assert "initialised from scratch" in r.stderr


def test_bad_input_fails_with_one_line(env: dict[str, Path], tmp_path: Path) -> None:
    def error_line(cmd: list[object]) -> str:
        return assert_one_error_line(run(cmd, check=False, timeout=300), alone=True)

    line = error_line([env["bin"], "-e", tmp_path / "none.bin", "-b", env["bpe"]])
    assert "none.bin" in line and "not found" in line
    line = error_line([env["bin"], "-e", env["model"], "-b", tmp_path / "nobpe.bin"])
    assert "nobpe.bin" in line and "python dev/write_bpe.py" in line
    base = [env["bin"], "-e", env["model"], "-b", env["bpe"]]
    assert "--top-p" in error_line([*base, "--top-p", "2"])
    assert "-n" in error_line([*base, "-n", "abc"])
    assert "unknown argument" in error_line([*base, "--bogus"])
    assert "context" in error_line([*base, "-p", "word " * 80])
