"""Token shards are validated whole when the data loader opens them (llmc/dataloader.h), not when a batch reaches them.

A shard of 20,000 tokens with id 60000 at position 15,000 used to train (exit 0) until the loader read
that far; now ./train_gpt2 and pyllmc.DataLoader refuse it at start-up, before the first step, with one
line naming the shard and the position. The same holds for val shards (-j).

A trainer reads the shard format of its model family only: ./train_gpt2 and pyllmc refuse a llama-3 shard
(uint32) even when every id in it is a valid GPT-2 id, with one line naming both formats (train_llama3's
side of it is in tests/test_llama3_c.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, make, run

NTOK, BAD_POS, BAD_ID, V = 20_000, 15_000, 60_000, 50_257
# d1 from scratch (V = 50257): no checkpoint file needed; tiny batches, no sampling
TRAIN_FLAGS = ["-e", "d1", "-b", 1, "-t", 32, "-x", 1, "-s", 0]


# magic, version and token type of the two shard formats (llmc/dataloader.h)
SHARD_FORMATS = {"gpt-2": (20240520, 1, np.uint16), "llama-3": (20240801, 7, np.uint32)}


def write_shard(path: Path, bad_pos: int | None = None, model_desc: str = "gpt-2") -> Path:
    """A token shard (header magic, version, ntok; then the ids) of NTOK ids below V, with BAD_ID at bad_pos if
    given: GPT-2's format (20240520, 1, uint16) by default, else llama-3's (20240801, 7, uint32)."""
    magic, version, dtype = SHARD_FORMATS[model_desc]
    tokens = (np.arange(NTOK, dtype=np.int64) * 7919 % V).astype(dtype)
    if bad_pos is not None:
        tokens[bad_pos] = BAD_ID
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [magic, version, NTOK]
    path.write_bytes(header.tobytes() + tokens.tobytes())
    return path


@pytest.fixture(scope="module")
def train_gpt2() -> Path:
    make("train_gpt2")
    return REPO / "train_gpt2"


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def step_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("step ")]


def assert_refused_before_training(proc, bad: Path) -> None:
    """Exit 1, exactly one error line naming the shard and the bad id's position, no training step printed."""
    assert proc.returncode == 1, f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    errors = error_lines(proc.stderr)
    assert errors == [f"error: {bad}: token id {BAD_ID} at position {BAD_POS} >= vocab size {V}"], proc.stderr[-2000:]
    assert step_lines(proc.stdout) == [], proc.stdout[-2000:]


def test_train_gpt2_trains_a_step_on_the_correct_shard(train_gpt2: Path, tmp_path: Path) -> None:
    good = write_shard(tmp_path / "good.bin")
    proc = run([train_gpt2, "-i", good, "-j", "", *TRAIN_FLAGS], cwd=tmp_path, env={"OMP_NUM_THREADS": "1"})
    assert error_lines(proc.stderr) == [] and len(step_lines(proc.stdout)) == 1, proc.stdout[-2000:]


def test_train_gpt2_refuses_a_bad_id_deep_in_the_train_shard_before_the_first_step(train_gpt2: Path,
                                                                                    tmp_path: Path) -> None:
    bad = write_shard(tmp_path / "bad_train.bin", BAD_POS)
    proc = run([train_gpt2, "-i", bad, "-j", "", *TRAIN_FLAGS], cwd=tmp_path, env={"OMP_NUM_THREADS": "1"},
               check=False)
    assert_refused_before_training(proc, bad)


def test_train_gpt2_refuses_a_bad_id_in_the_second_train_shard(train_gpt2: Path, tmp_path: Path) -> None:
    write_shard(tmp_path / "shard_000.bin")
    bad = write_shard(tmp_path / "shard_001.bin", BAD_POS)
    proc = run([train_gpt2, "-i", tmp_path / "shard_*.bin", "-j", "", *TRAIN_FLAGS], cwd=tmp_path,
               env={"OMP_NUM_THREADS": "1"}, check=False)
    assert_refused_before_training(proc, bad)


def test_train_gpt2_refuses_a_bad_id_in_the_val_shard_before_the_first_step(train_gpt2: Path, tmp_path: Path) -> None:
    good = write_shard(tmp_path / "train.bin")
    bad = write_shard(tmp_path / "bad_val.bin", BAD_POS)
    proc = run([train_gpt2, "-i", good, "-j", bad, "-v", 1, "-m", 1, *TRAIN_FLAGS], cwd=tmp_path,
               env={"OMP_NUM_THREADS": "1"}, check=False)
    assert_refused_before_training(proc, bad)


def test_pyllmc_dataloader_refuses_a_bad_id_when_constructed(tmp_path: Path) -> None:
    make("pyllmc")
    from pyllmc import LlmcError
    from pyllmc.data import DataLoader

    bad = write_shard(tmp_path / "bad_train.bin", BAD_POS)
    with pytest.raises(LlmcError) as info:
        DataLoader(str(bad), B=1, T=32)
    assert str(info.value) == f"{bad}: token id {BAD_ID} at position {BAD_POS} >= vocab size {V}"


LLAMA3_SHARD_REFUSED = ("a llama-3 token shard (magic 20240801, uint32 tokens), but this model reads gpt-2 shards "
                        "(magic 20240520, uint16 tokens); one of the dev/data/*.py scripts writes them")


@pytest.mark.parametrize("flag", ["-i", "-j"])
def test_train_gpt2_refuses_a_llama3_shard_of_valid_gpt2_ids_with_one_line(train_gpt2: Path, tmp_path: Path,
                                                                           flag: str) -> None:
    """The same ids as the shard test_train_gpt2_trains_a_step_on_the_correct_shard trains on, as uint32."""
    llama3 = write_shard(tmp_path / "llama3.bin", model_desc="llama-3")
    if flag == "-i":
        data = ["-i", llama3, "-j", ""]
    else:
        data = ["-i", write_shard(tmp_path / "train.bin"), "-j", llama3, "-v", 1, "-m", 1]
    proc = run([train_gpt2, *data, *TRAIN_FLAGS], cwd=tmp_path, env={"OMP_NUM_THREADS": "1"}, check=False)
    assert proc.returncode == 1, f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    assert error_lines(proc.stderr) == [f"error: {llama3}: {LLAMA3_SHARD_REFUSED}"], proc.stderr[-2000:]
    assert step_lines(proc.stdout) == [], proc.stdout[-2000:]


def test_pyllmc_dataloader_refuses_a_llama3_shard(tmp_path: Path) -> None:
    make("pyllmc")
    from pyllmc import LlmcError
    from pyllmc.data import DataLoader

    llama3 = write_shard(tmp_path / "llama3.bin", model_desc="llama-3")
    with pytest.raises(LlmcError) as info:
        DataLoader(str(llama3), B=1, T=32)
    assert str(info.value) == f"{llama3}: {LLAMA3_SHARD_REFUSED}"
