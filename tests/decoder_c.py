"""What the C tests of the Llama-layout families (tests/test_llama3_c.py, tests/test_qwen3_c.py) share: the module's
fixtures, running the family's trainer on its reference shards and its test program on a debug state, the losses of
a main.log, the gradients' offsets in a debug state, and the checks both make the same way (a corrupted state fails, a
damaged one is refused with one line, training lowers the loss, resume is bit-identical, two processes with ZeRO-1 equal one, a mutated model header loads
or gets one error line). A helper module, not a test file.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, assert_one_error_line, killed_after, make, run

MPIRUN = REPO / ".venv" / "bin" / "mpirun"
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMP_NUM_THREADS": "1"}
ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # tiny models: spinning OpenMP threads only hurt on a busy machine
MUON = ["-op", "muon", "-ol", 0.02]  # Muon on the blocks' matrices, AdamW (-l) on the rest


def family_fixtures(family: str):
    """A test module's `binaries` (make train_<family>, test_<family> and generate once) and `ref` (the session's
    <family>_references) fixtures: `binaries, ref = family_fixtures("qwen3")` at module level."""
    @pytest.fixture(scope="module")
    def binaries() -> Path:
        make(f"train_{family}", f"test_{family}", "generate")
        return REPO

    @pytest.fixture(scope="module")
    def ref(request: pytest.FixtureRequest) -> Path:
        return request.getfixturevalue(f"{family}_references")

    return binaries, ref


def run_trainer(family: str, ref: Path, cwd: Path, *flags: object, mpi_ranks: int = 0, check: bool = True,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """./train_<family> on the tinyshakespeare llama-3 shards of `ref`, with its <family>_tokenizer.bin, in cwd (under
    mpirun with mpi_ranks processes)."""
    cwd.mkdir(parents=True, exist_ok=True)
    if not (cwd / f"{family}_tokenizer.bin").exists():
        shutil.copy(ref / f"{family}_tokenizer.bin", cwd)
    cmd = [REPO / f"train_{family}", "-i", ref / "ts" / "tiny_shakespeare_train.bin", "-j",
           ref / "ts" / "tiny_shakespeare_val.bin", "-s", 0, *flags]
    base = ONE_THREAD
    if mpi_ranks:
        cmd, base = [MPIRUN, "--oversubscribe", "-np", mpi_ranks, *cmd], MPI_ENV
    return run(cmd, cwd=cwd, env={**base, **(env or {})}, check=check)


def train_losses(log: Path) -> list[float]:
    """The s:N trl:LOSS values of a main.log, in step order."""
    found = {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"^s:(\d+) trl:(\S+)", log.read_text(), re.M)}
    return [found[k] for k in sorted(found)]


def run_test_program(family: str, ref: Path, model: str, *flags: object,
                     check: bool = True) -> subprocess.CompletedProcess:
    """./test_<family> -e ref/<model>.bin -s ref/<model>_debug_state.bin, one thread."""
    return run([REPO / f"test_{family}", "-e", ref / f"{model}.bin", "-s", ref / f"{model}_debug_state.bin", *flags],
               env=ONE_THREAD, check=check)


def running_offsets(sizes: list[tuple[str, int]]) -> dict[str, tuple[int, int]]:
    """name -> (offset, count) of tensors laid end to end in the order of `sizes`."""
    out, pos = {}, 0
    for name, n in sizes:
        out[name] = (pos, n)
        pos += n
    return out


def assert_corrupted_state_fails(family: str, ref: Path, tmp_path: Path, model: str, what: str,
                                 offsets: dict[str, tuple[int, int]], k_rows: tuple[int, int]) -> None:
    """test_<family> on ref/<model>'s debug state with `what` damaged fails on that row and exits 1: "logits" (0.1 %
    off), "step loss" (step 5's loss + 1e-3), "dqkvw k rows" (layer 0's key rows, at float offset k_rows[0] into
    qkvw and k_rows[1] floats long, 25 % off, as if one of the query heads' gradients were lost) or a gradient "dX"
    (0.1 % off the whole tensor)."""
    state = bytearray((ref / f"{model}_debug_state.bin").read_bytes())
    h = struct.unpack_from("<256i", state)
    B, T, nsteps = h[2], h[3], h[4]
    V = int(np.fromfile(ref / f"{model}.bin", dtype="<i4", count=4)[3])
    grads = 1024 + 8 * B * T + 4 * B * T * V + 4
    if what == "logits":
        start, count, row = 1024 + 8 * B * T, B * T * V, "logits"
    elif what == "step loss":
        start, count, row = grads + 4 * (sum(n for _, n in offsets.values()) + 5), 1, "loss step 5"
    elif what == "dqkvw k rows":
        start, count, row = grads + 4 * (offsets["qkvw"][0] + k_rows[0]), k_rows[1], "dqkvw"
    else:
        off, n = offsets[what[1:]]
        start, count, row = grads + 4 * off, n, what
    values = np.frombuffer(state, dtype="<f4", count=count, offset=start).copy()
    if what == "step loss":
        values += 1e-3
    else:
        values *= 1.25 if what == "dqkvw k rows" else 1.001
    state[start: start + 4 * count] = values.tobytes()
    (tmp_path / f"{model}_debug_state.bin").write_bytes(bytes(state))
    shutil.copy(ref / f"{model}.bin", tmp_path)
    proc = run_test_program(family, tmp_path, model, check=False)
    assert proc.returncode == 1, proc.stdout
    assert re.search(rf"^\| {re.escape(row)} .*FAIL", proc.stdout, re.M), proc.stdout
    assert re.search(r"^\d+ passed, [1-9]\d* failed$", proc.stdout, re.M)
    assert nsteps == 10


def bad_state_test(family: str, foreign_magic: int, other_model: str):
    """A test module's test that test_<family> refuses a damaged debug state with one line, for each damage
    (assert_bad_state_refused): `test_test_qwen3_refuses_a_bad_state_with_one_line = bad_state_test("qwen3", ...)`."""
    @pytest.mark.parametrize("damage", ["truncated", "magic", "version", "model"])
    def test(binaries, ref: Path, tmp_path: Path, damage: str) -> None:
        assert_bad_state_refused(family, ref, tmp_path, damage, foreign_magic, other_model)

    return test


def assert_bad_state_refused(family: str, ref: Path, tmp_path: Path, damage: str, foreign_magic: int,
                             other_model: str) -> None:
    """test_<family> on ref/<family>_d2 with its debug state damaged exits with one error line naming the damage:
    "truncated" (7 bytes short), "magic" (foreign_magic, another family's), "version" (2) or "model" (ref/<other_model>'s
    state, which does not fit d2)."""
    model = f"{family}_d2"
    state = bytearray((ref / f"{model}_debug_state.bin").read_bytes())
    if damage == "truncated":
        state = state[:-7]
    elif damage == "magic":
        struct.pack_into("<i", state, 0, foreign_magic)
    elif damage == "version":
        struct.pack_into("<i", state, 4, 2)
    elif damage == "model":
        state = bytearray((ref / f"{other_model}_debug_state.bin").read_bytes())
    shutil.copy(ref / f"{model}.bin", tmp_path)
    (tmp_path / f"{model}_debug_state.bin").write_bytes(bytes(state))
    line = assert_one_error_line(run_test_program(family, tmp_path, model, check=False))
    assert {"truncated": "size mismatch", "magic": f"magic {foreign_magic}", "version": "version 2",
            "model": "size mismatch"}[damage] in line


def assert_training_lowered_the_loss(proc: subprocess.CompletedProcess, log: Path, steps: int) -> None:
    """A run of `steps` steps with three val losses and a sample: the mean of the last 5 losses and the last val loss
    at least 0.8 below the first, and the sample decoded words rather than token ids."""
    losses = train_losses(log)
    assert len(losses) == steps
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.8, losses
    vals = [float(v) for v in re.findall(r"val loss (\S+)", proc.stdout)]
    assert len(vals) == 3 and vals[2] < vals[0] - 0.8, proc.stdout
    sample = proc.stdout.split("generating:\n---\n")[1].split("\n---")[0]
    assert re.search(r"[a-z]{2,} [a-z]", sample), sample


def assert_resume_is_bit_identical(family: str, ref: Path, tmp_path: Path, flags: list[object], optimizer: str) -> None:
    """8 steps straight, and 4 then resumed (-y 1) from the step-4 checkpoint: the same losses, final model and
    sample; the training state records the optimizer (its momentum / moments continue the run). `flags` hold -x 8
    -n 4 and a sample at step 8."""
    straight = run_trainer(family, ref, tmp_path, *flags, "-o", "straight")
    part = killed_after(tmp_path / "straight", tmp_path / "part", 4)
    resumed = run_trainer(family, ref, tmp_path, *flags, "-o", "part", "-y", 1)
    assert "resumed from" in resumed.stdout
    assert train_losses(tmp_path / "straight" / "main.log")[4:] == train_losses(part / "main.log")
    assert (tmp_path / "straight" / "model_00000008.bin").read_bytes() == (part / "model_00000008.bin").read_bytes()

    def sample(out: str) -> str:
        return out.split("generating:")[-1].split("---")[1]
    assert sample(straight.stdout) == sample(resumed.stdout)
    assert np.fromfile(part / "state_00000008_00000.bin", dtype="<i4", count=8)[6] == int(optimizer == "muon")


def assert_two_processes_equal_one(family: str, ref: Path, tmp_path: Path, common: list[object], steps: int) -> None:
    """`common` with -b 4 in one process and with -b 2 -z 1 in two (ZeRO-1): the same losses within 1e-5."""
    run_trainer(family, ref, tmp_path, *common, "-b", 4, "-o", "one")
    proc = run_trainer(family, ref, tmp_path, *common, "-b", 2, "-z", 1, "-o", "two", mpi_ranks=2)
    assert "2 processes" in proc.stdout and "ZeRO-1" in proc.stdout, proc.stdout
    a, b = train_losses(tmp_path / "one" / "main.log"), train_losses(tmp_path / "two" / "main.log")
    assert len(a) == len(b) == steps
    assert max(abs(x - y) for x, y in zip(a, b)) <= 1e-5, (a, b)


def assert_mutated_headers_load_or_fail_in_one_line(family: str, good: bytes, tmp_path: Path, ref: Path, ints: int,
                                                    floats: int, generate_flags: list[object]) -> None:
    """Each int32 header field 1..ints and float32 field 0..floats-1 (after the 1024 int bytes) of the model file
    `good` set to hostile values: ./generate (the trainer's loader, without MPI's start-up) either takes the file or
    stops with one error line; it never crashes or reads past the file. Both outcomes occur."""
    shutil.copy(ref / f"{family}_tokenizer.bin", tmp_path)
    cases = [("<i", 4 * i, v) for i in range(1, ints + 1) for v in (0, -1, 1 << 20, 2**31 - 1)]
    cases += [("<f", 1024 + 4 * i, v) for i in range(floats) for v in (0.0, -1.0, float("nan"), float("inf"), 1e30)]
    outcomes = set()
    for fmt, offset, value in cases:
        data = bytearray(good)
        struct.pack_into(fmt, data, offset, value)
        (tmp_path / "m.bin").write_bytes(bytes(data))
        proc = run([REPO / "generate", "-e", "m.bin", "-n", 1, *generate_flags], cwd=tmp_path, env=ONE_THREAD,
                   check=False)
        if proc.returncode != 0:
            assert_one_error_line(proc)
        outcomes.add(proc.returncode)
    assert outcomes == {0, 1}
