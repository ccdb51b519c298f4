"""dev/data/hellaswag.py: a three-example jsonl rendered into an eval file that decodes back."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import tiktoken

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "dev" / "data" / "hellaswag.py"
sys.path.insert(0, str(REPO / "dev" / "data"))

from conftest import PYTHON, assert_one_error_line, run  # noqa: E402
from data_common import read_evalfile  # noqa: E402

EXAMPLES = [
    {"ind": 4, "ctx": "A man is sitting on a roof. He", "label": 3,
     "endings": ["is using wrap to wrap a pair of skis.", "is ripping level tiles off.",
                 "is holding a rubik's cube.", "starts pulling up roofing on a roof."]},
    {"ind": 8, "ctx": "A woman is outside with a bucket and a dog. The dog is running around trying to avoid a bath. She",
     "label": 0,
     "endings": ["rinses the bucket off with soap and blow dry the dog's head.",
                 "uses a hose to keep it from getting soapy.", "gets the dog wet, then it runs away again.",
                 "gets into a bath tub with the dog."]},
    {"ind": 12, "ctx": "Caribbean café: the <|endoftext|> sign says", "label": 1,
     "endings": ["\"open\".", "closed — come back tomorrow.", "nothing at all", "ünïcödé"]},
]


def hellaswag(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return run([PYTHON, SCRIPT, *args], cwd=cwd, check=False, timeout=300)


def write_jsonl(data_dir: Path, lines: list[str]) -> Path:
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "hellaswag_val.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_hellaswag_eval_file_decodes_back_to_the_examples(tmp_path: Path) -> None:
    data_dir = tmp_path / "hs"
    write_jsonl(data_dir, [json.dumps(ex) for ex in EXAMPLES])
    proc = hellaswag("--data_dir", str(data_dir), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "wrote 3 examples" in proc.stdout

    enc = tiktoken.get_encoding("gpt2")
    examples = read_evalfile(data_dir / "hellaswag_val.bin")
    assert [ex["index"] for ex in examples] == [0, 1, 2]
    for original, rendered in zip(EXAMPLES, examples):
        assert rendered["label"] == original["label"]
        assert rendered["ctx_tokens"] == enc.encode_ordinary(original["ctx"])
        assert enc.decode(rendered["ctx_tokens"]) == original["ctx"]
        assert [enc.decode(t) for t in rendered["ending_tokens"]] == [" " + e for e in original["endings"]]
    assert 50256 not in examples[2]["ctx_tokens"]  # special-token text stays ordinary text


def test_hellaswag_bad_json_line_names_file_and_line(tmp_path: Path) -> None:
    data_dir = tmp_path / "hs"
    path = write_jsonl(data_dir, [json.dumps(EXAMPLES[0]), '{"ctx": "broken", "label": 1,', json.dumps(EXAMPLES[1])])
    line = assert_one_error_line(hellaswag("--data_dir", str(data_dir), cwd=tmp_path))
    assert f"{path}:2: bad JSON" in line
    assert not (data_dir / "hellaswag_val.bin").exists()


def test_hellaswag_example_without_four_endings_is_rejected(tmp_path: Path) -> None:
    data_dir = tmp_path / "hs"
    bad = dict(EXAMPLES[1], endings=["only", "three", "endings"])
    path = write_jsonl(data_dir, [json.dumps(EXAMPLES[0]), "", json.dumps(bad)])
    line = assert_one_error_line(hellaswag("--data_dir", str(data_dir), cwd=tmp_path))
    assert f"{path}:3: 'endings' must be a list of 4 strings" in line


def test_hellaswag_offline_without_cache_fails_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/hellaswag_val.jsonl"
    line = assert_one_error_line(hellaswag("--data_dir", str(tmp_path / "hs"), "--url", url, cwd=tmp_path))
    assert f"cannot download {url}" in line and "hellaswag_val.jsonl to skip the download" in line
    assert list((tmp_path / "hs").iterdir()) == []
