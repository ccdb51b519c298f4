"""dev/data/tinyshakespeare.py on the real corpus: exact llm.c token counts, shard headers, errors."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import numpy as np
import tiktoken

from conftest import PYTHON, assert_one_error_line, run
from pyllmc.token_shards import read_datafile

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "dev" / "data" / "tinyshakespeare.py"

CORPUS_SEEDS = [
    REPO / "dev" / "data" / "tinyshakespeare" / "tiny_shakespeare.txt",
    REPO.parent / "shared" / "data" / "tinyshakespeare" / "input.txt",
]


def tinyshakespeare(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run([PYTHON, SCRIPT, *args], cwd=cwd, env=env, check=False, timeout=300)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def seed_corpus(data_dir: Path) -> None:
    """Copy the corpus into the script's cache so it skips the download (it downloads when no seed exists)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    for seed in CORPUS_SEEDS:
        if seed.is_file():
            shutil.copyfile(seed, data_dir / "tiny_shakespeare.txt")
            return


def test_tinyshakespeare_gives_llmc_counts_and_shards(tmp_path: Path) -> None:
    data_dir = tmp_path / "ts"
    seed_corpus(data_dir)
    proc = tinyshakespeare("--data_dir", str(data_dir), cwd=tmp_path)  # any cwd works
    assert proc.returncode == 0, proc.stderr
    assert "32,768 val tokens, 305,260 train tokens" in proc.stdout

    val_path, train_path = data_dir / "tiny_shakespeare_val.bin", data_dir / "tiny_shakespeare_train.bin"
    for path, count in ((val_path, 32768), (train_path, 305260)):
        header = np.frombuffer(path.read_bytes()[:1024], dtype="<i4")
        assert list(header[:3]) == [20240520, 1, count]
        assert path.stat().st_size == 1024 + 2 * count
    val, train = read_datafile(val_path), read_datafile(train_path)
    assert (len(val), len(train)) == (32768, 305260)

    # The EOT token opens the text and follows every blank line; without it the text comes back.
    enc = tiktoken.get_encoding("gpt2")
    tokens = np.concatenate([val, train]).tolist()
    text = (data_dir / "tiny_shakespeare.txt").read_text(encoding="utf-8")
    assert tokens[0] == 50256
    assert tokens.count(50256) == len(text.split("\n\n"))
    assert enc.decode(tokens) == "<|endoftext|>" + text.replace("\n\n", "\n\n<|endoftext|>")


def test_tinyshakespeare_offline_without_cache_fails_with_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/input.txt"
    proc = tinyshakespeare("--data_dir", str(tmp_path / "ts"), "--url", url, cwd=tmp_path)
    line = assert_one_error_line(proc)
    assert f"cannot download {url}" in line and "tiny_shakespeare.txt to skip the download" in line
    assert list((tmp_path / "ts").iterdir()) == []


def test_tinyshakespeare_rejects_a_corrupt_cached_corpus(tmp_path: Path) -> None:
    data_dir = tmp_path / "ts"
    data_dir.mkdir()
    (data_dir / "tiny_shakespeare.txt").write_bytes(b"To be or not\xff\xfe to be")
    line = assert_one_error_line(tinyshakespeare("--data_dir", str(data_dir), cwd=tmp_path))
    assert "tiny_shakespeare.txt: not UTF-8 text" in line
    assert not list(data_dir.glob("*.bin"))


def test_tinyshakespeare_rejects_a_too_short_corpus(tmp_path: Path) -> None:
    data_dir = tmp_path / "ts"
    data_dir.mkdir()
    (data_dir / "tiny_shakespeare.txt").write_text("First Citizen:\nSpeak.\n\nAll:\nSpeak, speak.\n")
    line = assert_one_error_line(tinyshakespeare("--data_dir", str(data_dir), cwd=tmp_path))
    assert "tokens, need more than 32,768 for val and train" in line


def test_tinyshakespeare_llama3_offline_fails_with_one_line(tmp_path: Path) -> None:
    data_dir = tmp_path / "ts"
    data_dir.mkdir()
    (data_dir / "tiny_shakespeare.txt").write_text("First Citizen:\nSpeak.\n")
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}  # an empty Hugging Face cache
    line = assert_one_error_line(tinyshakespeare("--data_dir", str(data_dir), "--model_desc", "llama-3", cwd=tmp_path, env=env))
    assert "cannot load the llama-3 tokenizer" in line
    assert not list(data_dir.glob("*.bin"))
