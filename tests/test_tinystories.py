"""dev/data/tinystories.py on a tiny tar.gz of three JSON shards made here: splits, EOTs, safety, errors."""

from __future__ import annotations

import io
import json
import random
import subprocess
import tarfile
from collections import Counter
from pathlib import Path

import numpy as np
import tiktoken

from conftest import PYTHON, assert_one_error_line, run
from pyllmc.token_shards import read_datafile

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "dev" / "data" / "tinystories.py"

SHARDS = {
    "data00.json": ["Once upon a time there was a cat.", "  Tom had a red ball.\n", "The sun was hot."],
    "data01.json": ["Lily liked to sing.", "A big dog ran fast. The end."],
    "data02.json": ["Ben found a shiny stone!", "Mia said, \"Hi!\"", "They played all day.", "It rained."],
}


def add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def make_archive(data_dir: Path, members: dict[str, bytes]) -> Path:
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "TinyStories_all_data.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            add_member(tar, name, data)
    return path


def shard_bytes(stories: list[str]) -> bytes:
    return json.dumps([{"story": s, "instruction": {"words": []}} for s in stories]).encode()


def tinystories(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """dev/data/tinystories.py with a download URL that cannot answer (the archive must be there)."""
    return run([PYTHON, SCRIPT, *args, "--url", "http://127.0.0.1:9/no-download"], cwd=cwd, check=False, timeout=300)


def decoded_stories(tokens: np.ndarray) -> list[str]:
    """The documents of a shard: the text after each EOT (the shard must start with one)."""
    enc = tiktoken.get_encoding("gpt2")
    tokens = tokens.tolist()
    assert tokens[0] == 50256
    starts = [i for i, t in enumerate(tokens) if t == 50256] + [len(tokens)]
    return [enc.decode(tokens[a + 1 : b]) for a, b in zip(starts, starts[1:])]


def shuffled(items: list[str], seed: int) -> list[str]:
    items = list(items)
    random.Random(seed).shuffle(items)
    return items


def test_tinystories_shard0_is_val_and_the_rest_train(tmp_path: Path) -> None:
    data_dir = tmp_path / "ts"
    make_archive(data_dir, {name: shard_bytes(stories) for name, stories in SHARDS.items()})
    proc = tinystories("--data_dir", str(data_dir), "--num_proc", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr

    val_tokens = read_datafile(data_dir / "TinyStories_val.bin")
    train_tokens = read_datafile(data_dir / "TinyStories_train.bin")
    assert f"{len(val_tokens):,} val tokens, {len(train_tokens):,} train tokens" in proc.stdout
    val, train = decoded_stories(val_tokens), decoded_stories(train_tokens)
    stripped = {name: [s.strip() for s in stories] for name, stories in SHARDS.items()}
    assert Counter(val) == Counter(stripped["data00.json"])
    assert Counter(train[:2]) == Counter(stripped["data01.json"])  # shards in sorted order
    assert Counter(train[2:]) == Counter(stripped["data02.json"])
    # llm.c's order: the i-th shard of each split is shuffled by random.Random(1337 + i)
    assert val == shuffled(stripped["data00.json"], 1337)
    assert train == shuffled(stripped["data01.json"], 1337) + shuffled(stripped["data02.json"], 1338)


def test_tinystories_is_reproducible_and_reuses_the_extracted_archive(tmp_path: Path) -> None:
    data_dir = tmp_path / "ts"
    make_archive(data_dir, {name: shard_bytes(stories) for name, stories in SHARDS.items()})
    assert tinystories("--data_dir", str(data_dir), "--num_proc", "1", cwd=tmp_path).returncode == 0
    first = (data_dir / "TinyStories_train.bin").read_bytes()
    (data_dir / "TinyStories_all_data.tar.gz").write_bytes(b"not needed any more")
    proc = tinystories("--data_dir", str(data_dir), "--num_proc", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "using extracted" in proc.stdout
    assert (data_dir / "TinyStories_train.bin").read_bytes() == first


def test_tinystories_corrupt_archive_fails_with_one_line(tmp_path: Path) -> None:
    data_dir = tmp_path / "ts"
    archive = make_archive(data_dir, {name: shard_bytes(stories) for name, stories in SHARDS.items()})
    archive.write_bytes(archive.read_bytes()[:-40])  # cut off the end of the gzip stream
    line = assert_one_error_line(tinystories("--data_dir", str(data_dir), cwd=tmp_path))
    assert f"{archive}: corrupt archive" in line
    assert [p.name for p in data_dir.iterdir()] == [archive.name]  # no half-extracted directory


def test_tinystories_refuses_members_escaping_the_directory(tmp_path: Path) -> None:
    data_dir = tmp_path / "ts"
    for i, evil in enumerate(["../evil.json", "/tmp/llmc_evil.json", "sub/../../evil.json"]):
        members = {"data00.json": shard_bytes(["a"]), evil: b"[]", "data01.json": shard_bytes(["b"])}
        archive = make_archive(data_dir, members)
        line = assert_one_error_line(tinystories("--data_dir", str(data_dir), cwd=tmp_path))
        assert f"{archive}: unsafe member path {evil!r}" in line, i
        assert not (tmp_path / "evil.json").exists() and not Path("/tmp/llmc_evil.json").exists()
        assert [p.name for p in data_dir.iterdir()] == [archive.name]


def test_tinystories_refuses_symlink_members(tmp_path: Path) -> None:
    data_dir = tmp_path / "ts"
    data_dir.mkdir()
    archive = data_dir / "TinyStories_all_data.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        add_member(tar, "data00.json", shard_bytes(["a"]))
        add_member(tar, "data01.json", shard_bytes(["b"]))
        link = tarfile.TarInfo("data02.json")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    line = assert_one_error_line(tinystories("--data_dir", str(data_dir), cwd=tmp_path))
    assert "member 'data02.json' is a link or device" in line


def test_tinystories_bad_json_shard_names_the_file(tmp_path: Path) -> None:
    data_dir = tmp_path / "ts"
    make_archive(data_dir, {"data00.json": shard_bytes(["a"]), "data01.json": b'[{"story": "b"},'})
    line = assert_one_error_line(tinystories("--data_dir", str(data_dir), "--num_proc", "2", cwd=tmp_path))
    assert "TinyStories_all_data/data01.json: bad JSON" in line
    assert not list(data_dir.glob("*.bin"))


def test_tinystories_story_field_is_required(tmp_path: Path) -> None:
    data_dir = tmp_path / "ts"
    make_archive(data_dir, {"data00.json": shard_bytes(["a"]), "data01.json": b'[{"story": "b"}, {"text": "c"}]'})
    line = assert_one_error_line(tinystories("--data_dir", str(data_dir), cwd=tmp_path))
    assert "data01.json: item 1 has no 'story' string" in line


def test_tinystories_needs_two_shards(tmp_path: Path) -> None:
    data_dir = tmp_path / "ts"
    make_archive(data_dir, {"data00.json": shard_bytes(["a"])})
    line = assert_one_error_line(tinystories("--data_dir", str(data_dir), cwd=tmp_path))
    assert "found 1 data*.json shard(s), need at least 2" in line
