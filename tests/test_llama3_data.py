"""The dataset scripts with --model_desc llama-3 on the local test tokenizer (dev/data/make_test_tokenizer.py):
uint32 shards (magic 20240801, version 7), <|begin_of_text|> before every document, text decoding back, errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import PYTHON, REPO, assert_one_error_line, run, tinyshakespeare_text

from pyllmc.llama3_tokenizer import load_llama3_tokenizer
from test_tinystories import SHARDS, make_archive, shard_bytes
from pyllmc.token_shards import read_datafile

DATA = REPO / "dev" / "data"
BOS, EOT = 512, 513


def documents(tokens: np.ndarray, tokenizer: Path) -> list[str]:
    """The text after each BOS (the shard must start with one)."""
    tok = load_llama3_tokenizer(str(tokenizer))
    ids = tokens.tolist()
    assert ids[0] == BOS
    starts = [i for i, t in enumerate(ids) if t == BOS] + [len(ids)]
    return [tok.decode(ids[a + 1 : b]) for a, b in zip(starts, starts[1:])]


def shard_header(path: Path) -> list[int]:
    return np.fromfile(path, dtype="<i4", count=3).tolist()


def test_test_tokenizer_is_deterministic_with_the_special_ids_last(tmp_path, llama3_tokenizer):
    run([PYTHON, DATA / "make_test_tokenizer.py", "--out_dir", tmp_path, "--corpus", tinyshakespeare_text()])
    assert (tmp_path / "tokenizer.json").read_bytes() == (llama3_tokenizer / "tokenizer.json").read_bytes()
    tok = load_llama3_tokenizer(str(llama3_tokenizer))
    assert (tok.vocab_size, tok.bos, tok.eot) == (514, BOS, EOT)
    assert tok.encode("<|end_of_text|>") != [EOT], "special-token text in a document is ordinary text"


def test_tinyshakespeare_llama3_shards_hold_the_text_with_bos_before_every_section(llama3_tinyshakespeare, llama3_tokenizer):
    train, val = llama3_tinyshakespeare
    assert shard_header(val) == [20240801, 7, 32768]
    assert val.stat().st_size == 1024 + 4 * 32768
    tokens = np.concatenate([read_datafile(val, 514), read_datafile(train, 514)])
    assert tokens.dtype == np.uint32 and tokens.max() < 514
    text = tinyshakespeare_text().read_text(encoding="utf-8")
    assert "".join(documents(tokens, llama3_tokenizer)) == text
    assert int((tokens == BOS).sum()) == len(text.split("\n\n"))


def test_tinystories_llama3_shards_hold_every_story_after_a_bos(tmp_path, llama3_tokenizer):
    make_archive(tmp_path, {name: shard_bytes(stories) for name, stories in SHARDS.items()})
    run([PYTHON, DATA / "tinystories.py", "--data_dir", tmp_path, "--model_desc", "llama-3", "--tokenizer", llama3_tokenizer,
         "--num_proc", 2, "--url", "http://127.0.0.1:9/no-download"])
    val, train = tmp_path / "TinyStories_val.bin", tmp_path / "TinyStories_train.bin"
    assert shard_header(val)[:2] == shard_header(train)[:2] == [20240801, 7]
    assert sorted(documents(read_datafile(val, 514), llama3_tokenizer)) == sorted(s.strip() for s in SHARDS["data00.json"])
    rest = SHARDS["data01.json"] + SHARDS["data02.json"]
    assert sorted(documents(read_datafile(train, 514), llama3_tokenizer)) == sorted(s.strip() for s in rest)


def test_fineweb_llama3_shards_hold_every_document_after_a_bos(tmp_path, llama3_tokenizer):
    texts = [f"Document {i}: the quick brown fox " * (i % 3 + 1) for i in range(12)] + ["Ünïcödé 🙂", "<|end_of_text|> is text."]
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    run([PYTHON, DATA / "fineweb.py", "--data_files", jsonl, "--model_desc", "llama-3", "--tokenizer",
         llama3_tokenizer / "tokenizer.json", "-s", 100, "-n", 2, "--data_dir", tmp_path / "out"],
        env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})
    shards = sorted((tmp_path / "out").glob("fineweb_*.bin"), key=lambda p: p.stem[-6:])
    assert shards[0].name == "fineweb_val_000000.bin" and len(shards) > 2
    assert all(shard_header(s)[:2] == [20240801, 7] for s in shards)
    tokens = np.concatenate([read_datafile(s, 514) for s in shards])
    assert documents(tokens, llama3_tokenizer) == texts
    assert EOT not in tokens


@pytest.mark.parametrize("args, message", [
    (["--model_desc", "gpt-2", "--tokenizer", "TOKENIZER"], "has none of <|bos|>, <|endoftext|>"),
    (["--model_desc", "llama-3", "--tokenizer", "/nonexistent/tok"], "no such tokenizer.json"),
    (["--model_desc", "llama-3", "--tokenizer", "NO_BOS"], "has no <|begin_of_text|> token"),
    (["--model_desc", "llama-3", "--tokenizer", "NOT_JSON"], "not a tokenizers tokenizer.json"),
    (["--model_desc", "llama-3"], "pass --tokenizer"),
])
def test_tinyshakespeare_tokenizer_problems_give_one_error_line(tmp_path, llama3_tokenizer, args, message):
    data = json.loads((llama3_tokenizer / "tokenizer.json").read_text())
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] != "<|begin_of_text|>"]
    (tmp_path / "no_bos.json").write_text(json.dumps(data))
    (tmp_path / "not.json").write_text("{")
    paths = {"TOKENIZER": str(llama3_tokenizer), "NO_BOS": str(tmp_path / "no_bos.json"), "NOT_JSON": str(tmp_path / "not.json")}
    (tmp_path / "ts").mkdir()
    (tmp_path / "ts" / "tiny_shakespeare.txt").write_text("To be.\n\nOr not.\n")
    proc = run([PYTHON, DATA / "tinyshakespeare.py", "--data_dir", tmp_path / "ts", *[paths.get(a, a) for a in args]],
               cwd=tmp_path, check=False, env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})
    assert message in assert_one_error_line(proc)
    assert not list((tmp_path / "ts").glob("*.bin"))


def test_make_test_tokenizer_without_a_corpus_gives_one_error_line(tmp_path):
    proc = run([PYTHON, DATA / "make_test_tokenizer.py", "--corpus", tmp_path / "missing.txt", "--out_dir", tmp_path],
               check=False)
    assert "missing.txt" in assert_one_error_line(proc)
