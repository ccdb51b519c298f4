"""dev/data/fineweb.py on tiny local datasets: fixed-size shards across documents, names, EOTs, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tiktoken

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "dev" / "data" / "fineweb.py"
sys.path.insert(0, str(REPO / "dev" / "data"))  # the script's module (dev/data is not installed)

from conftest import PYTHON, assert_one_error_line, run  # noqa: E402
from fineweb import write_shards  # noqa: E402
from pyllmc.token_shards import DataFormatError, read_datafile  # noqa: E402

TEXTS = [f"Document {i}: " + " ".join(["the quick brown fox", "jumps over", "the lazy dog."][: i % 3 + 1]) * (i % 4 + 1)
         for i in range(30)] + ["", "Ünïcödé and emoji 🙂 survive.", "<|endoftext|> is ordinary text here."]


def fineweb(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """dev/data/fineweb.py run in tmp_path, offline, with an empty Hugging Face cache there."""
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home"), "HF_DATASETS_CACHE": str(tmp_path / "hf_datasets")}
    return run([PYTHON, SCRIPT, *args], cwd=tmp_path, env=env, check=False, timeout=300)


def expected_tokens(texts: list[str]) -> list[int]:
    enc = tiktoken.get_encoding("gpt2")
    tokens: list[int] = []
    for text in texts:
        tokens.append(50256)
        tokens.extend(enc.encode_ordinary(text))
    return tokens


def check_shards(out_dir: Path, prefix: str, shard_size: int, texts: list[str]) -> None:
    """Shard names and sizes, EOT before each document, and the documents decode back."""
    expected = expected_tokens(texts)
    n_shards = -(-len(expected) // shard_size)
    names = [f"{prefix}_{'val' if i == 0 else 'train'}_{i:06d}.bin" for i in range(n_shards)]
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(names)
    shards = [read_datafile(out_dir / name) for name in names]
    assert [len(s) for s in shards[:-1]] == [shard_size] * (n_shards - 1)
    assert 0 < len(shards[-1]) <= shard_size
    tokens = np.concatenate(shards).tolist()
    assert tokens == expected
    eots = [i for i, t in enumerate(tokens) if t == 50256]
    assert len(eots) == len(texts)
    enc = tiktoken.get_encoding("gpt2")
    assert [enc.decode(tokens[a + 1 : b]) for a, b in zip(eots, eots[1:] + [len(tokens)])] == texts


def test_fineweb_local_jsonl_with_a_pool(tmp_path: Path) -> None:
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(TEXTS)), encoding="utf-8")
    out_dir = tmp_path / "out"
    proc = fineweb("--data_files", str(jsonl), "-s", "97", "-n", "2", "--data_dir", str(out_dir), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    check_shards(out_dir, "fineweb", 97, TEXTS)


def test_fineweb_local_parquet_edu_names(tmp_path: Path) -> None:
    parquet = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"text": TEXTS, "score": [float(i) for i in range(len(TEXTS))]}), parquet)
    out_dir = tmp_path / "out"
    proc = fineweb("-t", "edu", "--local_files", str(parquet), "-s", "250", "-n", "1", "--data_dir", str(out_dir),
               tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    check_shards(out_dir, "edu_fineweb", 250, TEXTS)


@pytest.mark.parametrize("shard_size", [1, 7, 10**6])
def test_write_shards_takes_any_iterable_of_rows(tmp_path: Path, shard_size: int) -> None:
    texts = TEXTS[:5]
    rows = ({"text": t} for t in texts)  # a generator: no len(), read once
    written = write_shards(rows, tmp_path, "fineweb", shard_size, "gpt-2", 1, "test rows")
    assert [p.parent for p in written] == [tmp_path] * len(written)
    check_shards(tmp_path, "fineweb", shard_size, texts)


def test_write_shards_exact_multiple_leaves_no_empty_shard(tmp_path: Path) -> None:
    total = len(expected_tokens(TEXTS[:4]))
    written = write_shards([{"text": t} for t in TEXTS[:4]], tmp_path, "fineweb", total, "gpt-2", 1, "rows")
    assert [p.name for p in written] == ["fineweb_val_000000.bin"]
    assert len(read_datafile(written[0])) == total


def test_write_shards_rejects_rows_without_text(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match="my rows: row 1 has no 'text' string"):
        write_shards([{"text": "ok"}, {"body": "no"}], tmp_path, "fineweb", 100, "gpt-2", 1, "my rows")


def test_fineweb_missing_local_file_fails_with_one_line(tmp_path: Path) -> None:
    line = assert_one_error_line(fineweb("--data_files", str(tmp_path / "nope.parquet"), tmp_path=tmp_path))
    assert f"--data_files: {tmp_path / 'nope.parquet'}: no such file" in line


def test_fineweb_corrupt_local_file_fails_with_one_line(tmp_path: Path) -> None:
    parquet = tmp_path / "docs.parquet"
    parquet.write_bytes(b"PAR1 this is not parquet")
    line = assert_one_error_line(fineweb("--data_files", str(parquet), "--data_dir", str(tmp_path / "out"),
                                     tmp_path=tmp_path))
    assert f"{parquet}: cannot load" in line
    assert not (tmp_path / "out").exists()


def test_fineweb_rows_without_text_column_fail_with_one_line(tmp_path: Path) -> None:
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text('{"body": "a"}\n{"body": "b"}\n')
    line = assert_one_error_line(fineweb("--data_files", str(jsonl), "--data_dir", str(tmp_path / "out"),
                                     tmp_path=tmp_path))
    assert f"{jsonl}: no 'text' column (columns: body)" in line


def test_fineweb_hub_offline_fails_with_one_line(tmp_path: Path) -> None:
    line = assert_one_error_line(fineweb("-t", "edu", "-v", "100B", "--data_dir", str(tmp_path / "out"), tmp_path=tmp_path))
    assert "cannot load HuggingFaceFW/fineweb-edu sample-100BT" in line and "--data_files" in line
    assert not (tmp_path / "out").exists()
