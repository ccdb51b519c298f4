"""Checkpoints survive crashes: SIGKILL mid-write, SIGINT/SIGTERM, a full disk, a read-only directory.

./train_gpt2 writes every checkpoint file through a temporary "<file>.tmp.<pid>" that is flushed,
fsync'ed and renamed, and marks a step complete with DONE_<step> only after all its files are in
place; -y 1 resumes from the newest complete step. These tests kill or starve the trainer while it
writes and check that the previous checkpoint is untouched, still loads, and resumes.
Runtime: about 40 s on 2 cores (d1 and tiny models, B=1, T=8).
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, assert_one_error_line, make

from pyllmc.token_shards import write_datafile

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
TINY = dict(block_size=8, vocab_size=5, n_layer=1, n_head=2, n_embd=8)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """shard_gpt2.bin (ids < 50257), shard_tiny.bin (ids < 5) and tiny.bin, a tiny model written by train_gpt2.py."""
    make("train_gpt2")
    d = tmp_path_factory.mktemp("crash_inputs")
    rng = np.random.default_rng(0)
    write_datafile(d / "shard_gpt2.bin", rng.integers(0, 50257, 1 << 16))
    write_datafile(d / "shard_tiny.bin", rng.integers(0, 5, 1 << 14))
    import train_gpt2 as ref

    model = ref.GPT(ref.GPTConfig(**TINY))
    model.init_weights(42)
    ref.write_model(model, d / "tiny.bin", "float32")
    return d


def trainer(*flags: object) -> list[str]:
    return [str(REPO / "train_gpt2"), "-j", "", "-b", "1", "-t", "8", "-s", "0", "-v", "0", *map(str, flags)]


def done_steps(out: Path) -> list[int]:
    """Steps with a DONE marker (the trainer's own rule for a complete checkpoint)."""
    return sorted(int(m.group(1)) for p in out.glob("DONE_*") if (m := re.fullmatch(r"DONE_(\d{8})", p.name)))


def tmp_files(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if ".tmp." in p.name)


def snapshot(out: Path, step: int) -> dict[str, bytes]:
    names = [f"model_{step:08d}.bin", f"state_{step:08d}_00000.bin", f"DONE_{step:08d}"]
    return {n: (out / n).read_bytes() for n in names}


def run_trainer(cmd: list[str], cwd: Path, preexec=None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, preexec_fn=preexec, timeout=timeout)


def checkpoint_parameters(path: Path) -> int:
    """The parameter count an fp32 checkpoint's header implies."""
    maxT, V, L, NH, C, Vp = np.fromfile(path, dtype="<i4", count=8)[2:8].tolist()
    return Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C


def kill_while_writing(cmd: list[str], cwd: Path, out: Path, newer_than: int, timeout: float = 120) -> None:
    """Starts the trainer; once it completed a checkpoint newer than step `newer_than`, SIGKILLs it as soon as
    a temporary checkpoint file appears (it is writing the next one)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    try:
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"trainer exited ({proc.returncode}) before it could be killed: {proc.stderr.read()}")
            if time.monotonic() > deadline:
                raise AssertionError("no checkpoint write observed")
            names = os.listdir(out) if out.is_dir() else []
            if any(".tmp." in n for n in names) and any(s > newer_than for s in done_steps(out)):
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.0005)
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL


def test_sigkill_while_writing_a_checkpoint_keeps_the_previous_one(inputs: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    base = ["-e", "d1", "-i", inputs / "shard_gpt2.bin", "-n", 2, "-o", out]
    # round 0: a fresh run killed while writing its second checkpoint; rounds 1-2: resumed runs killed likewise
    for round_ in range(3):
        previous = done_steps(out)[-1] if round_ > 0 else 0
        cmd = trainer(*base, "-x", 1000, *(["-y", 1] if round_ > 0 else []))
        kill_while_writing(cmd, tmp_path, out, newer_than=previous)
        latest = done_steps(out)[-1]
        assert latest > previous
        # the newest complete checkpoint is whole: its size is what its header says
        model = out / f"model_{latest:08d}.bin"
        n = checkpoint_parameters(model)
        assert model.stat().st_size == 1024 + 4 * n
        assert (out / f"state_{latest:08d}_00000.bin").stat().st_size > 1024 + 2 * 4 * n
        # -y 1 resumes from exactly that step (a stale .tmp. file of the killed writer is ignored)
        resumed = run_trainer(trainer(*base, "-x", latest + 1, "-y", 1), tmp_path)
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert f"resumed from {model}" in resumed.stdout and f"at step {latest}" in resumed.stdout, resumed.stdout[-2000:]
        assert done_steps(out)[-1] == latest + 1


def fill_disk(path: Path) -> None:
    """Writes a filler file until the file system holding path is full."""
    chunk = b"\0" * 4096
    try:
        with open(path, "wb") as f:
            while True:
                f.write(chunk)
                f.flush()
    except OSError:
        pass


def mount_tmpfs(where: Path, size: str) -> bool:
    """Mounts a small tmpfs (needs root with CAP_SYS_ADMIN); False when that is not possible here."""
    where.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True).returncode == 0


def test_full_disk_gives_one_error_and_keeps_the_previous_checkpoint(inputs: Path, tmp_path: Path) -> None:
    out = tmp_path / "disk" / "run"
    mounted = mount_tmpfs(tmp_path / "disk", "4m")
    try:
        base = ["-e", inputs / "tiny.bin", "-i", inputs / "shard_tiny.bin", "-n", 2, "-o", out]
        first = run_trainer(trainer(*base, "-x", 2), tmp_path)
        assert first.returncode == 0, first.stderr[-2000:]
        before = snapshot(out, 2)
        if mounted:  # a real full disk: ENOSPC
            fill_disk(tmp_path / "disk" / "filler")
            preexec = None
        else:  # no mount privilege: files may not grow past 4 KB (EFBIG), like a disk with 4 KB left
            def preexec() -> None:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        failed = run_trainer(trainer(*base, "-x", 4, "-y", 1), tmp_path, preexec=preexec)
        error = assert_one_error_line(failed)
        assert str(out) in error, error
        assert "model_00000004.bin" in error or "main.log" in error, error
        assert snapshot(out, 2) == before and done_steps(out) == [2]
        assert tmp_files(out) == [], "a failed write must remove its temporary file"
        # space again: the run resumes from the intact checkpoint
        (tmp_path / "disk" / "filler").unlink(missing_ok=True)
        again = run_trainer(trainer(*base, "-x", 4, "-y", 1), tmp_path)
        assert again.returncode == 0 and "at step 2" in again.stdout, again.stderr[-2000:]
        assert done_steps(out) == [2, 4]
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(tmp_path / "disk")], capture_output=True)


def test_read_only_output_dir_gives_one_error_and_keeps_the_checkpoint(inputs: Path, tmp_path: Path) -> None:
    where = tmp_path / "ro"
    mounted = os.geteuid() == 0 and mount_tmpfs(where, "4m")
    out = where / "run"
    try:
        base = ["-e", inputs / "tiny.bin", "-i", inputs / "shard_tiny.bin", "-n", 2, "-o", out]
        first = run_trainer(trainer(*base, "-x", 2), tmp_path)
        assert first.returncode == 0, first.stderr[-2000:]
        before = snapshot(out, 2)
        if mounted:  # root ignores file permissions: make the file system itself read-only
            assert subprocess.run(["mount", "-o", "remount,ro", str(where)], capture_output=True).returncode == 0
        else:
            assert os.geteuid() != 0, "root without mount privilege cannot make a directory read-only"
            out.chmod(0o555)
        failed = run_trainer(trainer(*base, "-x", 4, "-y", 1), tmp_path)
        assert str(out) in assert_one_error_line(failed)
        assert snapshot(out, 2) == before and done_steps(out) == [2]
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)
        elif out.exists():
            out.chmod(0o755)


def test_failed_rename_gives_one_error_and_keeps_the_previous_checkpoint(inputs: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    base = ["-e", inputs / "tiny.bin", "-i", inputs / "shard_tiny.bin", "-n", 2, "-o", out]
    first = run_trainer(trainer(*base, "-x", 2), tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    before = snapshot(out, 2)
    (out / "model_00000004.bin").mkdir()  # a directory where the next checkpoint goes: rename() fails
    (out / "model_00000004.bin" / "keep").write_text("x")
    failed = run_trainer(trainer(*base, "-x", 4, "-y", 1), tmp_path)
    error = assert_one_error_line(failed)
    assert "model_00000004.bin" in error, error
    assert "rename" in error, error
    assert snapshot(out, 2) == before and done_steps(out) == [2]
    assert tmp_files(out) == []


def train_losses(log: Path) -> dict[int, str]:
    """step -> the exact loss text of the `s:N trl:LOSS` lines of a main.log."""
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^s:(\d+) trl:(\S+)", log.read_text(), re.M)}


def start_and_signal(cmd: list[str], cwd: Path, sig: int, after_steps: int, timeout: float = 120) -> tuple[int, str]:
    """Starts the trainer, sends sig once it printed `after_steps` steps; returns (exit status, stdout)."""
    out_path = cwd / f"stdout_{sig}.txt"
    with open(out_path, "w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=ENV, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while f"step {after_steps}/" not in out_path.read_text():
            assert proc.poll() is None, out_path.read_text()[-2000:]
            assert time.monotonic() < deadline, "the trainer made no progress"
            time.sleep(0.005)
        proc.send_signal(sig)
        try:
            status = proc.wait(timeout=timeout)
        finally:
            proc.kill()
    return status, out_path.read_text()


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_signal_writes_a_checkpoint_and_resume_continues_bit_identically(inputs: Path, tmp_path: Path, sig: int,
                                                                         status: int) -> None:
    base = ["-e", inputs / "tiny.bin", "-i", inputs / "shard_tiny.bin", "-c", 0.1]  # constant LR (-q 1)
    out = tmp_path / "run"
    code, text = start_and_signal(trainer(*base, "-x", 1000000, "-o", out), tmp_path, sig, after_steps=3)
    assert code == status, f"exit {code}\n{text[-2000:]}"
    assert "error:" not in text, text[-2000:]
    steps = done_steps(out)
    assert len(steps) == 1 and steps[0] >= 3, (steps, text[-2000:])
    stopped = steps[0]
    assert f"wrote checkpoint for step {stopped}" in text, text[-2000:]
    resumed = run_trainer(trainer(*base, "-x", stopped + 5, "-o", out, "-y", 1), tmp_path)
    assert resumed.returncode == 0 and f"at step {stopped}" in resumed.stdout, resumed.stderr[-2000:]
    # interrupted + resumed trains exactly like one straight run
    straight = run_trainer(trainer(*base, "-x", stopped + 5, "-o", tmp_path / "straight"), tmp_path)
    assert straight.returncode == 0, straight.stderr[-2000:]
    a, b = train_losses(tmp_path / "straight" / "main.log"), train_losses(out / "main.log")
    assert sorted(b) == list(range(stopped + 5)), sorted(b)
    assert all(a[k] == b[k] for k in range(stopped + 5)), [(k, a[k], b[k]) for k in range(stopped + 5) if a[k] != b[k]]


def test_signal_without_output_dir_exits_cleanly(inputs: Path, tmp_path: Path) -> None:
    cmd = trainer("-e", inputs / "tiny.bin", "-i", inputs / "shard_tiny.bin", "-x", 100000)
    code, text = start_and_signal(cmd, tmp_path, signal.SIGINT, after_steps=2)
    assert code == 130, text[-2000:]
    assert "no checkpoint" in text and "error:" not in text, text[-2000:]
