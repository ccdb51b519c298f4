"""Muon (train_gpt2.py --optimizer muon, ./train_gpt2 -op muon) against torch.optim.Muon, the reference's
debug state, itself on resume and across processes, and on bad input.

Runtime: about two minutes on 2 busy cores; most of it is writing the d2 Muon debug state (the reference
steps in float32 and again in float64) and the two-process runs.
"""
from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import PYTHON, REPO, TS_TRAIN, TS_VAL, assert_one_error_line, killed_after, make, run

import train_gpt2 as ref
from pyllmc.reference.debug_state import DebugOptimizer
from pyllmc.reference.optimizers import MuonNS, OptimizerSettings, is_block_matrix, make_optimizer, newton_schulz, owners_by_size

MPIRUN = REPO / ".venv" / "bin" / "mpirun"
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMP_NUM_THREADS": "1"}
STATE = "gpt2_d2_muon_debug_state.bin"
NSTEPS = 6


@pytest.fixture(scope="session")
def binaries() -> tuple[Path, Path]:
    make("train_gpt2", "test_gpt2")
    return REPO / "train_gpt2", REPO / "test_gpt2"


@pytest.fixture(scope="session")
def muon_ref(tmp_path_factory, tinyshakespeare) -> Path:
    """gpt2_d2.bin and gpt2_d2_muon_debug_state.bin (B=4, T=32, 6 steps of Muon with torch's defaults)."""
    workdir = tmp_path_factory.mktemp("muon_d2")
    run([PYTHON, REPO / "train_gpt2.py", "--model", "d2", "--optimizer", "muon", "--input_bin", TS_TRAIN,
         "--batch_size", 4, "--sequence_length", 32, "--debug_steps", NSTEPS, "--num_iterations", 0, "--write_tensors", 1,
         "--device", "cpu"],
        cwd=workdir, env={"OMP_NUM_THREADS": "2"})
    return workdir


def train(binary: Path, cwd: Path, *flags: object, mpi_ranks: int = 0, check: bool = True):
    cmd = [binary, "-i", TS_TRAIN, "-j", TS_VAL, "-s", 0, *flags]
    env = {"OMP_NUM_THREADS": "1"}
    if mpi_ranks:
        cmd = [MPIRUN, "--oversubscribe", "-np", mpi_ranks, *cmd]
        env = {**MPI_ENV, **env}
    return run(cmd, cwd=cwd, env=env, check=check)


def train_losses(log: Path) -> list[float]:
    out = {}
    for line in log.read_text().splitlines():
        if " trl:" in line:
            step, rest = line.split(" trl:")
            out[int(step[2:])] = float(rest.split()[0])
    return [out[k] for k in sorted(out)]


def float_bits(x: float) -> int:
    return struct.unpack("<i", struct.pack("<f", x))[0]


# ---------------------------------------------------------------------------- the reference


@pytest.mark.parametrize("shape", [(48, 16), (16, 48), (32, 32)])
@pytest.mark.parametrize("nesterov", [True, False])
@pytest.mark.parametrize("adjust", ["original", "match_rms_adamw"])
def test_reference_muon_in_bfloat16_is_torch_muon_bit_for_bit(shape: tuple[int, int], nesterov: bool, adjust: str) -> None:
    torch.manual_seed(0)
    theirs = torch.randn(*shape, requires_grad=True)
    ours = theirs.detach().clone().requires_grad_(True)
    kwargs = dict(lr=0.02, weight_decay=0.1, momentum=0.9, nesterov=nesterov, adjust_lr_fn=adjust, ns_steps=4)
    opt_theirs = torch.optim.Muon([theirs], **kwargs)
    opt_ours = MuonNS([ours], torch.bfloat16, **kwargs)
    for _ in range(4):
        g = torch.randn(*shape)
        theirs.grad, ours.grad = g.clone(), g.clone()
        opt_theirs.step()
        opt_ours.step()
    assert torch.equal(theirs, ours)


def test_newton_schulz_leaves_its_input_alone_in_every_dtype() -> None:
    # without Nesterov the input is the momentum buffer itself: in float32 / float64 (the debug state's
    # steps) .to(dtype) does not copy, and an in-place normalisation would rescale the buffer
    for grad_dtype, dtype in ((torch.float32, torch.float32), (torch.float64, torch.float64), (torch.float32, torch.bfloat16)):
        for shape in ((48, 16), (16, 48)):
            g = torch.randn(*shape, generator=torch.Generator().manual_seed(2), dtype=grad_dtype)
            before = g.clone()
            newton_schulz(g, 3, dtype=dtype)
            assert torch.equal(g, before), (dtype, shape)


def test_newton_schulz_in_float64_orthogonalises_roughly() -> None:
    # the quintic iteration drives every singular value into roughly [0.7, 1.2] (torch's docstring)
    g = torch.randn(64, 160, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    s = torch.linalg.svdvals(newton_schulz(g, 5, dtype=torch.float64))
    assert 0.6 < s.min().item() and s.max().item() < 1.25


def test_make_optimizer_gives_muon_the_block_matrices_and_adamw_the_rest() -> None:
    model = ref.GPT(ref.depth_config(2))
    opt = make_optimizer(model, OptimizerSettings(name="muon", lr=1e-3, muon_lr=0.02, weight_decay=0.1),
                             is_block_matrix)
    adamw, muon = opt.optimizers
    assert isinstance(adamw, torch.optim.AdamW) and type(muon) is torch.optim.Muon
    muon_ids = {id(p) for g in muon.param_groups for p in g["params"]}
    blocks = [model.transformer.h[l] for l in range(2)]
    expected = {id(m.weight) for b in blocks for m in (b.attn.c_attn, b.attn.c_proj, b.mlp.c_fc, b.mlp.c_proj)}
    assert muon_ids == expected
    adamw_ids = {id(p) for g in adamw.param_groups for p in g["params"]}
    assert adamw_ids | muon_ids == {id(p) for p in model.parameters()} and not adamw_ids & muon_ids
    assert [g["initial_lr"] for g in opt.param_groups] == [1e-3, 1e-3, 0.02]
    assert muon.param_groups[0]["weight_decay"] == 0.1


def test_owners_by_size_balances_whole_matrices() -> None:
    sizes = [3, 1, 4, 1, 3, 1, 4, 1]  # qkvw, attprojw, fcw, fcprojw of two layers, in units of C*C
    owners = owners_by_size(sizes, 2)
    loads = [sum(s for s, o in zip(sizes, owners) if o == r) for r in range(2)]
    assert owners == [0, 0, 0, 1, 1, 0, 1, 1] and loads == [9, 9]


def test_reference_zero1_with_muon_equals_no_zero(tinyshakespeare, tmp_path: Path) -> None:
    def losses(zero: int) -> list[str]:
        proc = run([REPO / ".venv" / "bin" / "torchrun", "--nproc_per_node", 2, REPO / "train_gpt2.py", "--device", "cpu",
                    "--model", "d1", "--batch_size", 2, "--sequence_length", 16, "--num_iterations", 3, "--write_tensors", 0,
                    "--optimizer", "muon", "--muon_lr", 0.02, "--weight_decay", 0.1, "--zero_stage", zero,
                    "--input_bin", TS_TRAIN], cwd=tmp_path, env={"OMP_NUM_THREADS": "1"})
        return [line.split("|")[1:3] for line in proc.stdout.splitlines() if line.startswith("step ")]

    assert losses(1) == losses(0)


def test_debug_state_header_records_muon(muon_ref: Path) -> None:
    header = np.fromfile(muon_ref / STATE, dtype="<i4", count=256)
    assert list(header[12:18]) == [1, float_bits(1e-3), float_bits(0.95), 1, 5, 0]
    adamw = DebugOptimizer().header_fields()
    assert adamw == [0] * 6


def test_reference_rejects_bad_muon_flags(tmp_path: Path) -> None:
    for flags in (["--optimizer", "sgd"], ["--muon_adjust_lr", "spectral"], ["--muon_nesterov", "2"]):
        proc = run([PYTHON, REPO / "train_gpt2.py", *flags], cwd=tmp_path, check=False)
        assert_one_error_line(proc, status=2)
    proc = run([PYTHON, REPO / "train_gpt2.py", "--model", "d1", "--optimizer", "muon", "--muon_ns_steps", 100,
                "--input_bin", TS_TRAIN, "--write_tensors", 0, "--num_iterations", 1, "--device", "cpu"], cwd=tmp_path,
               check=False)
    assert "Newton-Schulz steps 100" in assert_one_error_line(proc)


# ---------------------------------------------------------------------------- test_gpt2 against the reference


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_test_gpt2_passes_on_the_muon_debug_state(binaries, muon_ref: Path, precision: str) -> None:
    proc = run([binaries[1], "-e", "gpt2_d2.bin", "-s", STATE, "-p", precision], cwd=muon_ref, env={"OMP_NUM_THREADS": "2"})
    assert "with Muon on the block matrices (lr 0.001, momentum 0.95, nesterov 1, 5 Newton-Schulz steps" in proc.stdout
    assert f"{18 + NSTEPS} passed, 0 failed" in proc.stdout


def corrupt(src: Path, dst: Path, offset: int, value: bytes) -> Path:
    data = bytearray(src.read_bytes())
    data[offset:offset + len(value)] = value
    dst.write_bytes(bytes(data))
    return dst


@pytest.mark.parametrize("what", ["loss", "momentum"])
def test_test_gpt2_fails_on_a_corrupted_muon_state(binaries, muon_ref: Path, tmp_path: Path, what: str) -> None:
    src = muon_ref / STATE
    loss_offset = src.stat().st_size - 2 * NSTEPS * 4  # the step losses, then their noises
    change = {"loss": (loss_offset + 3 * 4, struct.pack("<f", struct.unpack_from("<f", src.read_bytes(), loss_offset + 12)[0] + 0.01)),
              "momentum": (14 * 4, struct.pack("<f", 0.5))}[what]
    bad = corrupt(src, tmp_path / "bad.bin", *change)
    proc = run([binaries[1], "-e", muon_ref / "gpt2_d2.bin", "-s", bad], check=False, env={"OMP_NUM_THREADS": "2"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    failing = [line for line in proc.stdout.splitlines() if "FAIL" in line]
    assert failing and all("loss step" in line for line in failing)
    if what == "loss":
        assert len(failing) == 1 and "loss step 3" in failing[0]


@pytest.mark.parametrize("index,value,message", [(12, 2, "optimizer header[12] = 2"), (16, 0, "Newton-Schulz steps header[16] = 0"),
                                                 (17, 3, "lr adjustment header[17] = 3"), (15, 7, "Nesterov header[15] = 7")])
def test_test_gpt2_refuses_bad_muon_settings_in_one_line(binaries, muon_ref: Path, tmp_path: Path, index: int,
                                                          value: int, message: str) -> None:
    bad = corrupt(muon_ref / STATE, tmp_path / "bad.bin", index * 4, struct.pack("<i", value))
    proc = run([binaries[1], "-e", muon_ref / "gpt2_d2.bin", "-s", bad], check=False)
    assert message in assert_one_error_line(proc)


# ---------------------------------------------------------------------------- the C trainer

FLAGS = ["-e", "d1", "-b", 2, "-t", 16, "-v", 0, "-op", "muon", "-ol", 0.02, "-c", 0.1, "-u", 2, "-q", 0.1]


def test_muon_resume_continues_bit_identically(binaries, tmp_path: Path) -> None:
    train(binaries[0], tmp_path, *FLAGS, "-x", 8, "-n", 4, "-o", "straight")
    part = killed_after(tmp_path / "straight", tmp_path / "part", 4)
    train(binaries[0], tmp_path, *FLAGS, "-x", 8, "-n", 4, "-o", "part", "-y", 1)
    assert train_losses(tmp_path / "straight" / "main.log")[4:] == train_losses(part / "main.log")
    assert (tmp_path / "straight" / "model_00000008.bin").read_bytes() == (part / "model_00000008.bin").read_bytes()
    header = np.fromfile(part / "state_00000008_00000.bin", dtype="<i4", count=8)
    assert header[6] == 1  # the optimizer


def test_resume_with_another_optimizer_is_refused_in_one_line(binaries, tmp_path: Path) -> None:
    train(binaries[0], tmp_path, *FLAGS, "-x", 2, "-n", 2, "-o", "out")
    flags = [f if f != "muon" else "adamw" for f in FLAGS]
    proc = train(binaries[0], tmp_path, *flags, "-x", 4, "-n", 2, "-o", "out", "-y", 1, check=False)
    assert "written with optimizer muon, this run uses -op adamw" in assert_one_error_line(proc)


def test_mpi_zero1_muon_equals_one_process(binaries, tmp_path: Path) -> None:
    flags = ["-e", "d1", "-b", 1, *FLAGS[4:]]  # half the batch on each of two processes
    train(binaries[0], tmp_path, *flags, "-x", 6, "-o", "z1", "-z", 1, "-n", 6, mpi_ranks=2)
    train(binaries[0], tmp_path, *flags, "-x", 6, "-o", "z0", "-z", 0, mpi_ranks=2)
    train(binaries[0], tmp_path, *FLAGS, "-x", 6, "-o", "one")
    z1, z0, one = (train_losses(tmp_path / d / "main.log") for d in ("z1", "z0", "one"))
    assert z1 == z0  # whole matrices updated by their owner and broadcast: the same bits as every process updating all
    assert len(one) == 6 and all(math.isclose(a, b, rel_tol=1e-5) for a, b in zip(z1, one))
    # each rank's optimizer state: its shard of the AdamW parameters and the Muon matrices train_gpt2.py's
    # owners_by_size gives it (d1: C = 64, L = 1)
    C, Vp, maxT = 64, 50304, 1024
    muon_sizes = [3 * C * C, C * C, 4 * C * C, 4 * C * C]
    adamw = Vp * C + maxT * C + 13 * C + 2 * C
    owners = owners_by_size(muon_sizes, 2)
    for rank in range(2):
        header = np.fromfile(tmp_path / "z1" / f"state_00000006_{rank:05d}.bin", dtype="<u8", count=128)
        shard = min(-(-adamw // 2), adamw - rank * -(-adamw // 2))
        assert header[22] == shard + sum(n for n, o in zip(muon_sizes, owners) if o == rank)  # int32 [44..45]


@pytest.mark.parametrize("flags,message", [(["-op", "sgd"], 'flag -op: bad value "sgd"'),
                                           (["-op", "muon", "-oa", "spectral"], 'flag -oa: bad value "spectral"'),
                                           (["-op", "muon", "-os", "0"], "-os"), (["-op", "muon", "-om", "1.5"], "-om")])
def test_bad_muon_flags_give_one_error_line(binaries, tmp_path: Path, flags: list[str], message: str) -> None:
    proc = train(binaries[0], tmp_path, "-e", "d1", "-x", 1, *flags, check=False)
    assert message in assert_one_error_line(proc)


# ---------------------------------------------------------------------------- the comparison


def test_compare_optimizers_writes_plots_and_the_equal_step_and_equal_time_numbers(binaries, tinyshakespeare,
                                                                                     tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    proc = run([PYTHON, REPO / "dev" / "compare_optimizers.py", "--model", "d1", "--batch_size", 2, "--seq_len", 16,
                "--steps", 4, "--sweep_model", "", "--sweep_steps", 2, "--val_every", 2, "--val_batches", 1, "--adamw_lrs", 1e-3, 3e-3,
                "--muon_lrs", 0.02, "--out", out])
    summary = (out / "summary.txt").read_text()
    assert "picked: AdamW lr " in summary and "equal steps (4): val loss AdamW " in summary
    assert "equal time (" in summary and "Muon" in proc.stdout
    for png in ("compare_optimizers.png", "compare_optimizers_time.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    timed = [line for line in (out / "muon_timed.log").read_text().splitlines() if " tel:" in line]
    assert [line.split()[0] for line in timed] == ["s:0", "s:2", "s:4"] and timed[0].endswith("t:0.000")
    assert float(timed[2].split("t:")[1]) > float(timed[1].split("t:")[1]) > 0


def test_vislog_time_panel_needs_timed_logs(tmp_path: Path) -> None:
    log = tmp_path / "a" / "main.log"
    log.parent.mkdir()
    log.write_text("s:0 tel:10.5\ns:10 tel:9.0\n")
    proc = run([PYTHON, REPO / "dev" / "vislog.py", log, "--time", "-o", tmp_path / "x.png"], check=False)
    assert "no val line of the logs has a t:SECONDS field" in assert_one_error_line(proc)
    log.write_text("s:0 tel:10.5 t:0\ns:10 tel:9.0 t:12.5\n")
    run([PYTHON, REPO / "dev" / "vislog.py", log, "--time", "-o", tmp_path / "x.png"])
    assert (tmp_path / "x.png").read_bytes()[:4] == b"\x89PNG"
