"""The CPU trainer (train_gpt2.c, test_gpt2.c) against the PyTorch reference and itself.

Runtime: the d12 test_gpt2 run is the expensive one (124M parameters, 4 steps); everything
else uses d1/d2 models with small B and T.
"""
from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import PYTHON, REPO, TS_TRAIN, TS_VAL, assert_one_error_line, killed_after, make, run
from pyllmc.families import NAMES
from test_families import CUDA_FAMILIES

V, VP = 50257, 50304
MPIRUN = REPO / ".venv" / "bin" / "mpirun"
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="session")
def binaries() -> tuple[Path, Path]:
    make("train_gpt2", "test_gpt2")
    return REPO / "train_gpt2", REPO / "test_gpt2"


@pytest.fixture(scope="session")
def d2_ref(d2_reference: Path) -> Path:
    """gpt2_d2.bin, gpt2_d2_bf16.bin, gpt2_d2_debug_state.bin (B=4, T=64), gpt2_tokenizer.bin (conftest)."""
    return d2_reference


def train(binary: Path, cwd: Path, *flags: object, env: dict | None = None, mpi_ranks: int = 0,
          check: bool = True):
    """Runs ./train_gpt2 on tinyshakespeare (no sampling unless asked) in cwd."""
    cmd = [binary, "-i", TS_TRAIN, "-j", TS_VAL, "-s", 0, *flags]
    if mpi_ranks:
        cmd = [MPIRUN, "--oversubscribe", "-np", mpi_ranks, *cmd]
        env = {**MPI_ENV, **(env or {})}
    # one thread: these models are tiny, and spinning OpenMP threads only hurt on a busy machine
    return run(cmd, cwd=cwd, env={"OMP_NUM_THREADS": "1", **(env or {})}, check=check)


def train_losses(log: Path) -> list[float]:
    """The s:N trl:LOSS values of a main.log, in step order."""
    out = {}
    for line in log.read_text().splitlines():
        m = re.match(r"s:(\d+) trl:(\S+)", line)
        if m:
            out[int(m.group(1))] = float(m.group(2))
    return [out[k] for k in sorted(out)]


# ---------------------------------------------------------------------------- test_gpt2 vs PyTorch

def test_test_gpt2_passes_on_d12(binaries, d12_reference: Path) -> None:
    proc = run([binaries[1]], cwd=d12_reference, env={"OMP_NUM_THREADS": "2"})
    print(proc.stdout)
    assert "22 passed, 0 failed" in proc.stdout  # logits, loss, 16 gradients, 4 step losses
    assert "FAIL" not in proc.stdout


def test_test_gpt2_passes_on_d2(binaries, d2_ref: Path) -> None:
    proc = run([binaries[1], "-e", "gpt2_d2.bin", "-s", "gpt2_d2_debug_state.bin"], cwd=d2_ref)
    assert "28 passed, 0 failed" in proc.stdout
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| d")]
    assert len(rows) == 16 and all(row.rstrip().endswith("ok   |") for row in rows)


def corrupted_copy(src: Path, dst: Path, offset: int, delta: float) -> None:
    data = bytearray(src.read_bytes())
    (value,) = struct.unpack_from("<f", data, offset)
    struct.pack_into("<f", data, offset, value + delta)
    dst.write_bytes(bytes(data))


def debug_state_offsets(path: Path, num_params: int) -> tuple[int, int]:
    """(byte offset of the first gradient, byte offset of the first step loss) of a debug state."""
    header = np.fromfile(path, dtype="<i4", count=256)
    B, T = int(header[2]), int(header[3])
    grads = 1024 + 2 * B * T * 4 + B * T * V * 4 + 4
    return grads, grads + num_params * 4


def d2_num_params() -> int:
    L, C, maxT = 2, 128, 1024
    return VP * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C


@pytest.mark.parametrize("what", ["gradient", "loss"])
def test_test_gpt2_fails_on_corrupted_debug_state(binaries, d2_ref: Path, tmp_path: Path, what: str) -> None:
    src = d2_ref / "gpt2_d2_debug_state.bin"
    grads, losses = debug_state_offsets(src, d2_num_params())
    # a gradient of the first layer's qkvw (well inside the tensor), or the 4th recorded step loss
    offset = grads + (VP * 128 + 1024 * 128 + 2 * 2 * 128 + 1000) * 4 if what == "gradient" else losses + 3 * 4
    bad = tmp_path / "bad_state.bin"
    corrupted_copy(src, bad, offset, 0.01 if what == "loss" else 1.0)
    proc = run([binaries[1], "-e", d2_ref / "gpt2_d2.bin", "-s", bad], check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 failed" in proc.stdout
    failing = [line for line in proc.stdout.splitlines() if "FAIL" in line]
    assert len(failing) == 1
    assert ("dqkvw" in failing[0]) if what == "gradient" else "loss step 3" in failing[0]


def test_test_gpt2_rejects_truncated_debug_state(binaries, d2_ref: Path, tmp_path: Path) -> None:
    bad = tmp_path / "short_state.bin"
    bad.write_bytes((d2_ref / "gpt2_d2_debug_state.bin").read_bytes()[:5000])
    proc = run([binaries[1], "-e", d2_ref / "gpt2_d2.bin", "-s", bad], check=False)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "size mismatch" in errors[0]


# ---------------------------------------------------------------------------- training

@pytest.mark.parametrize("capability", ["default", "native"])
def test_init_from_scratch_matches_pytorch_bit_for_bit(binaries, tinyshakespeare, tmp_path: Path,
                                                       capability: str) -> None:
    # torch picks its normal_ kernel by CPU capability and llmc/rand.h mirrors the choice, so
    # both programs run in the same environment: the scalar kernel, then this CPU's own
    env = {"ATEN_CPU_CAPABILITY": "default"} if capability == "default" else {}
    run([PYTHON, REPO / "train_gpt2.py", "--model", "d1", "--input_bin", TS_TRAIN, "--batch_size", 1,
         "--sequence_length", 8, "--num_iterations", 0, "--write_tensors", 1, "--seed", 42], cwd=tmp_path, env=env)
    train(binaries[0], tmp_path, "-e", "d1", "-x", 0, "-v", 0, "-n", 1, "-o", "out", env=env)
    ours = (tmp_path / "out" / "model_00000000.bin").read_bytes()
    theirs = (tmp_path / "gpt2_d1.bin").read_bytes()
    C = 64
    assert len(ours) == len(theirs) == 1024 + 4 * (VP * C + 1024 * C + 12 * C * C + 13 * C + 2 * C)
    assert ours[:1024] == theirs[:1024], "headers differ"
    assert ours == theirs, "parameters differ"


def test_resume_continues_bit_identically(binaries, tmp_path: Path) -> None:
    flags = ["-e", "d1", "-b", 2, "-t", 16, "-x", 20, "-v", 5, "-m", 2, "-n", 10, "-q", 0.1, "-c", 0.1, "-u", 3]
    straight = train(binaries[0], tmp_path, *flags, "-s", 10, "-g", 8, "-o", "straight")
    # the same run killed after step 10: keep only its first checkpoint, then resume
    part = killed_after(tmp_path / "straight", tmp_path / "part", 10)
    resumed = train(binaries[0], tmp_path, *flags, "-s", 10, "-g", 8, "-o", "part", "-y", 1)
    assert "resumed from" in resumed.stdout
    a = train_losses(tmp_path / "straight" / "main.log")
    b = train_losses(tmp_path / "part" / "main.log")
    assert len(a) == 20 and len(b) == 10
    assert a[10:] == b
    assert (tmp_path / "straight" / "model_00000020.bin").read_bytes() == (part / "model_00000020.bin").read_bytes()
    # the text sample at step 20 comes from the restored sampler RNG
    sample = lambda out: out.split("generating:")[-1].split("---")[1]
    assert sample(straight.stdout) == sample(resumed.stdout)


def test_mpi_zero1_resume_continues_bit_identically(binaries, tmp_path: Path) -> None:
    flags = ["-e", "d1", "-b", 2, "-t", 16, "-x", 8, "-v", 0, "-n", 4, "-z", 1, "-c", 0.1]
    train(binaries[0], tmp_path, *flags, "-o", "straight", mpi_ranks=2)
    part = killed_after(tmp_path / "straight", tmp_path / "part", 4, ranks=2)
    train(binaries[0], tmp_path, *flags, "-o", "part", "-y", 1, mpi_ranks=2)
    assert train_losses(tmp_path / "straight" / "main.log")[4:] == train_losses(part / "main.log")
    assert (tmp_path / "straight" / "model_00000008.bin").read_bytes() == (part / "model_00000008.bin").read_bytes()


def test_loads_bf16_checkpoint_widened_to_fp32(binaries, d2_ref: Path, tmp_path: Path) -> None:
    bf16 = d2_ref / "gpt2_d2_bf16.bin"
    train(binaries[0], tmp_path, "-e", bf16, "-x", 0, "-v", 0, "-n", 1, "-o", "out")
    out = tmp_path / "out" / "model_00000000.bin"
    h_ours, h_bf16 = np.fromfile(out, dtype="<i4", count=256), np.fromfile(bf16, dtype="<i4", count=256)
    assert h_bf16[1] == 5 and h_ours[1] == 3
    assert list(h_ours[2:8]) == list(h_bf16[2:8])
    ours = np.fromfile(out, dtype="<u4", offset=1024)
    theirs = np.fromfile(bf16, dtype="<u2", offset=1024)
    assert ours.size == theirs.size == d2_num_params()
    assert np.array_equal(ours, theirs.astype("<u4") << 16)


def test_same_seed_same_data_same_losses(binaries, tmp_path: Path) -> None:
    flags = ["-e", "d1", "-b", 2, "-t", 16, "-x", 5, "-v", 0]
    train(binaries[0], tmp_path, *flags, "-o", "a")
    train(binaries[0], tmp_path, *flags, "-o", "b")
    assert (tmp_path / "a" / "main.log").read_text() == (tmp_path / "b" / "main.log").read_text()


def test_shuffle_is_seeded_and_changes_the_order(binaries, tmp_path: Path) -> None:
    flags = ["-e", "d1", "-b", 2, "-t", 16, "-x", 5, "-v", 0]
    train(binaries[0], tmp_path, *flags, "-sh", 1, "-o", "a")
    train(binaries[0], tmp_path, *flags, "-sh", 1, "-o", "b")
    train(binaries[0], tmp_path, *flags, "-sh", 0, "-o", "plain")
    shuffled = train_losses(tmp_path / "a" / "main.log")
    assert shuffled == train_losses(tmp_path / "b" / "main.log")
    assert shuffled != train_losses(tmp_path / "plain" / "main.log")


def test_gradient_accumulation_matches_larger_batch(binaries, tmp_path: Path) -> None:
    common = ["-e", "d2", "-t", 32, "-x", 6, "-v", 0]
    train(binaries[0], tmp_path, *common, "-b", 4, "-o", "big")
    train(binaries[0], tmp_path, *common, "-b", 2, "-d", 2 * 2 * 32, "-o", "accum")
    a, b = train_losses(tmp_path / "big" / "main.log"), train_losses(tmp_path / "accum" / "main.log")
    assert len(a) == len(b) == 6
    assert max(abs(x - y) for x, y in zip(a, b)) <= 1e-5


def test_mpi_two_ranks_half_batch_match_one_rank(binaries, tmp_path: Path) -> None:
    common = ["-e", "d2", "-t", 32, "-x", 10, "-v", 0]
    train(binaries[0], tmp_path, *common, "-b", 4, "-o", "one")
    proc = train(binaries[0], tmp_path, *common, "-b", 2, "-o", "two", mpi_ranks=2)
    assert "2 processes" in proc.stdout, "train_gpt2 was not built with MPI"
    a, b = train_losses(tmp_path / "one" / "main.log"), train_losses(tmp_path / "two" / "main.log")
    assert len(a) == len(b) == 10
    assert max(abs(x - y) for x, y in zip(a, b)) <= 1e-5


def test_mpi_processes_share_the_cores_when_omp_num_threads_is_unset(binaries, tmp_path: Path) -> None:
    # two processes with a thread per core each fight over the cores (several times slower)
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env.update({k: v for k, v in MPI_ENV.items() if k != "OMP_NUM_THREADS"})
    cmd = [MPIRUN, "--oversubscribe", "-np", 2, binaries[0], "-i", TS_TRAIN, "-j", "", "-e", "d1", "-b", 2, "-t", 16,
           "-x", 1, "-v", 0, "-s", 0]
    proc = subprocess.run([str(c) for c in cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    share = max(1, (os.cpu_count() or 1) // 2)
    assert f"threads: {share} OpenMP threads x 2 processes ({os.cpu_count()} cores / 2 processes on this node" in proc.stdout
    proc = train(binaries[0], tmp_path, "-e", "d1", "-b", 2, "-t", 16, "-x", 1, "-v", 0, mpi_ranks=2,
                 env={"OMP_NUM_THREADS": "1"})
    assert "threads: 1 OpenMP threads x 2 processes (OMP_NUM_THREADS)" in proc.stdout


def test_mpi_zero1_matches_zero0(binaries, tmp_path: Path) -> None:
    common = ["-e", "d2", "-b", 2, "-t", 32, "-x", 10, "-v", 0, "-c", 0.1, "-n", 10]
    train(binaries[0], tmp_path, *common, "-z", 0, "-o", "z0", mpi_ranks=2)
    proc = train(binaries[0], tmp_path, *common, "-z", 1, "-o", "z1", mpi_ranks=2)
    assert "ZeRO-1" in proc.stdout
    assert train_losses(tmp_path / "z0" / "main.log") == train_losses(tmp_path / "z1" / "main.log")
    assert (tmp_path / "z0" / "model_00000010.bin").read_bytes() == (tmp_path / "z1" / "model_00000010.bin").read_bytes()
    # each rank saved only its own half of the AdamW state
    n = d2_num_params()
    full = (tmp_path / "z0" / "state_00000010_00000.bin").stat().st_size
    extra = full - 1024 - 8 * n  # the state's trailing blob (outlier-detector windows)
    shard0 = (n + 1) // 2
    for rank, shard in enumerate([shard0, n - shard0]):
        size = (tmp_path / "z1" / f"state_00000010_0000{rank}.bin").stat().st_size
        assert size == 1024 + 8 * shard + extra


def test_overfit_single_batch_drives_the_loss_down(binaries, tmp_path: Path) -> None:
    train(binaries[0], tmp_path, "-e", "d1", "-b", 2, "-t", 16, "-a", 1, "-l", 1e-3, "-x", 30, "-v", 0, "-o", "out")
    losses = train_losses(tmp_path / "out" / "main.log")
    assert len(losses) == 30 and losses[-1] < losses[0] - 3.0


def test_outlier_skip_starts_when_the_window_is_full(binaries, tmp_path: Path) -> None:
    # lr 0: the losses are pure data noise, so about half of them score above a tiny z threshold
    proc = train(binaries[0], tmp_path, "-e", "d1", "-b", 1, "-t", 8, "-l", 0, "-x", 140, "-v", 0, "-sl", 1e-6)
    skipped = [int(m.group(1)) for m in re.finditer(r"^step (\d+)/140 .*update skipped \(loss z", proc.stdout, re.M)]
    assert skipped and min(skipped) > 128  # the detector needs 128 values first


def test_keeps_only_the_newest_checkpoints(binaries, tmp_path: Path) -> None:
    train(binaries[0], tmp_path, "-e", "d1", "-b", 1, "-t", 8, "-x", 6, "-v", 0, "-n", 2, "-nk", 2, "-o", "out")
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["DONE_00000004", "DONE_00000006", "main.log", "model_00000004.bin", "model_00000006.bin",
                     "state_00000004_00000.bin", "state_00000006_00000.bin"]


def test_keeps_major_checkpoints_that_pruning_would_delete(binaries, tmp_path: Path) -> None:
    # checkpoints at 2, 4, 6, 8, 10; -nk 1 keeps the newest (10), -nm 4 also keeps 4 and 8
    train(binaries[0], tmp_path, "-e", "d1", "-b", 1, "-t", 8, "-x", 10, "-v", 0, "-n", 2, "-nk", 1, "-nm", 4,
          "-o", "out")
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["DONE_00000004", "DONE_00000008", "DONE_00000010", "main.log",
                     "model_00000004.bin", "model_00000008.bin", "model_00000010.bin",
                     "state_00000004_00000.bin", "state_00000008_00000.bin", "state_00000010_00000.bin"]


def test_hellaswag_eval_is_logged(binaries, tmp_path: Path) -> None:
    import sys
    sys.path.insert(0, str(REPO / "dev" / "data"))
    from data_common import write_evalfile

    rng = np.random.default_rng(0)
    examples = [{"label": int(rng.integers(4)), "ctx_tokens": rng.integers(0, V, 5).tolist(),
                 "ending_tokens": [rng.integers(0, V, 1 + k).tolist() for k in range(4)]} for _ in range(6)]
    write_evalfile(tmp_path / "hs.bin", examples)
    proc = train(binaries[0], tmp_path, "-e", "d1", "-b", 4, "-t", 16, "-x", 2, "-v", 2, "-m", 1, "-h", 1,
                 "-he", tmp_path / "hs.bin", "-o", "out")
    assert "HellaSwag" in proc.stdout
    evals = re.findall(r"^s:(\d+) eval:(\S+)$", (tmp_path / "out" / "main.log").read_text(), re.M)
    assert [int(step) for step, _ in evals] == [0, 2]
    for _, acc in evals:
        assert round(float(acc) * 6, 4) in {0, 1, 2, 3, 4, 5, 6}  # k of the 6 examples right


def test_sample_without_tokenizer_prints_token_ids(binaries, tmp_path: Path) -> None:
    proc = train(binaries[0], tmp_path, "-e", "d1", "-b", 1, "-t", 8, "-x", 1, "-v", 0, "-s", 1, "-g", 5)
    sample = proc.stdout.split("generating:\n---\n")[1].split("\n---")[0]
    assert len(sample.split()) == 5 and all(0 <= int(tok) < V for tok in sample.split())
    warnings = [line for line in proc.stderr.splitlines() if "gpt2_tokenizer.bin" in line]
    assert len(warnings) == 1 and "python train_gpt2.py" in warnings[0]
    assert "error:" not in proc.stderr


def test_sample_is_decoded_with_the_tokenizer(binaries, d2_ref: Path, tmp_path: Path) -> None:
    shutil.copy(d2_ref / "gpt2_tokenizer.bin", tmp_path / "gpt2_tokenizer.bin")
    proc = train(binaries[0], tmp_path, "-e", "d1", "-b", 1, "-t", 8, "-x", 1, "-v", 0, "-s", 1, "-g", 5)
    sample = proc.stdout.split("generating:\n---\n")[1].split("\n---")[0]
    assert sample and not re.fullmatch(r"[\d ]+", sample)
    assert "gpt2_tokenizer.bin" not in proc.stderr


def test_help_lists_the_cpu_trainers_flags(binaries) -> None:
    """The CPU trainers' rows of the table (test_help.py checks every trainer's list exactly)."""
    proc = run([binaries[0], "--help"])
    for flag in ["-i", "-j", "-e", "-o", "-b", "-t", "-d", "-x", "-k", "-l", "-u", "-q", "-c", "-v", "-m", "-s",
                 "-g", "-n", "-nk", "-nm", "-y", "-a", "-h", "-z", "-p", "-sl", "-sg", "-op", "-ol"]:
        assert re.search(rf"^  {re.escape(flag)}\s", proc.stdout, re.M), flag
    for flag in ["-r", "-ge", "-w", "-pn", "-pr", "-pg", "-pi", "-ps", "-pf", "-cp", "-cd", "-cl"]:
        assert not re.search(rf"^  {re.escape(flag)}\s", proc.stdout, re.M), flag


def test_gpu_trainers_flag_is_refused_in_one_line(binaries) -> None:
    proc = run(["./train_gpt2", "-r", 1], check=False)
    gpu_trainers = ", ".join(f"./train_{name}cu" for name in NAMES if name in CUDA_FAMILIES)  # the registry's
    assert assert_one_error_line(proc, alone=True) == (
        f"error: flag -r: a flag of the GPU trainers ({gpu_trainers}), not of ./train_gpt2")


# ---------------------------------------------------------------------------- bad input

def write_bad_inputs(d2: Path, tmp: Path) -> dict[str, Path]:
    good = (d2 / "gpt2_d2.bin").read_bytes()
    (tmp / "truncated.bin").write_bytes(good[: len(good) // 2])
    (tmp / "magic.bin").write_bytes(struct.pack("<i", 12345) + good[4:])
    header = np.zeros(256, dtype="<i4")
    header[:3] = [20240520, 1, 4096]
    tokens = np.full(4096, 100, dtype="<u2")
    tokens[300] = 50300
    (tmp / "badtok.bin").write_bytes(header.tobytes() + tokens.tobytes())
    return {"truncated": tmp / "truncated.bin", "magic": tmp / "magic.bin", "badtok": tmp / "badtok.bin"}


BAD_CASES = {
    "truncated checkpoint": (["-e", "{truncated}"], "size mismatch"),
    "wrong-magic checkpoint": (["-e", "{magic}"], "magic 12345"),
    "token id >= vocab": (["-e", "d1", "-i", "{badtok}", "-j", "{badtok}", "-b", 1, "-t", 64], "token id 50300"),
    "T > maxT": (["-e", "d1", "-t", 2048], "max sequence length 1024"),
    "unknown flag": (["-e", "d1", "-w2", 1], "unknown flag"),
    "missing checkpoint": (["-e", "no_such_model.bin"], "python train_gpt2.py"),
    "missing data": (["-e", "d1", "-i", "dev/data/tinyshakespeare/nothing_*.bin"], "tinyshakespeare.py"),
    "bad value": (["-e", "d1", "-b", "four"], "expected an integer"),
}


@pytest.mark.parametrize("case", list(BAD_CASES))
def test_bad_input_gives_one_error_line(binaries, d2_ref: Path, tmp_path: Path, case: str) -> None:
    paths = write_bad_inputs(d2_ref, tmp_path)
    flags, expected = BAD_CASES[case]
    flags = [str(f).format(**paths) for f in flags]
    # -i / -j defaults first so a bad -i given later wins
    proc = run([binaries[0], "-i", TS_TRAIN, "-j", TS_VAL, "-s", 0, "-x", 2, *flags], cwd=REPO, check=False,
               env={"OMP_NUM_THREADS": "2"})
    assert proc.returncode == 1, f"exit {proc.returncode} (negative = killed by a signal)\n{proc.stderr}"
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert expected in errors[0], errors[0]


def test_a_trainer_started_alone_leaves_out_open_mpis_fabric_transport(tmp_path: Path) -> None:
    """llmc/utils.h's mpi_singleton_without_fabric: a trainer started without mpirun has Open MPI leave out its libfabric
    transport (btl ofi), whose probe sleeps a second in every MPI_Init; transports the user names (OMPI_MCA_btl) are
    kept. Open MPI's verbose selection lines say which transports were initialised."""
    make("train_gpt2")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    env["OMPI_MCA_btl_base_verbose"] = "100"

    def initialised(extra: dict[str, str]) -> set[str]:
        proc = subprocess.run([str(REPO / "train_gpt2"), "--help"], env={**env, **extra}, capture_output=True,
                              text=True, cwd=tmp_path, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return set(re.findall(r"initializing btl component (\w+)", proc.stdout + proc.stderr))

    alone = initialised({})
    assert "self" in alone and "ofi" not in alone, alone
    assert initialised({"OMPI_MCA_btl": "self,tcp"}) == {"self", "tcp"}
