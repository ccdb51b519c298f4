"""LLMC_PHASE_TIME=1 (llmc/cpu/phase_time.h): the CPU trainers' roofline account, one line per phase at exit.

The GEMM phase's FLOPs are checked exactly against the model's shapes (every linear layer's forward, input- and
weight-gradient GEMMs, the lm_head's), so a GEMM that is left out or counted twice fails here; the phases that
every step runs must all be there; and without the variable nothing is printed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import PYTHON, REPO, make, run

PHASE_RE = re.compile(r"^phase (\w+): ([0-9.]+) ms, ([0-9]+) bytes, ([0-9]+) flop over (\d+) steps$", re.M)
MODEL_RE = re.compile(r"^model: .* L=(\d+) NH=\d+ C=(\d+) .* Vp=(\d+)", re.M)
# the phases every training step of every family runs
EVERY_STEP = {"gemm", "attention", "norm", "elementwise", "embedding", "classifier", "optimizer", "grad_norm"}
B, T, STEPS = 2, 32, 4


def phases(stdout: str) -> dict[str, tuple[float, float, float, int]]:
    """{name: (ms, bytes, flops, steps)} from a trainer's phase lines."""
    return {m[1]: (float(m[2]), float(m[3]), float(m[4]), int(m[5])) for m in PHASE_RE.finditer(stdout)}


def train(program: str, args: list[object], phase_time: bool = True) -> str:
    env = {"OMP_NUM_THREADS": "1", **({"LLMC_PHASE_TIME": "1"} if phase_time else {})}
    cmd = [REPO / program, "-b", B, "-t", T, "-x", STEPS, "-v", 0, "-s", 0, *args]
    return run(cmd, env=env).stdout


@pytest.fixture(scope="module")
def built(tinyshakespeare) -> tuple[Path, Path]:
    make("train_gpt2", "train_nanochat")
    return tinyshakespeare


def test_gpt2_phases_cover_the_step_and_count_every_gemm(built):
    train_bin, _ = built
    out = train("train_gpt2", ["-e", "d2", "-i", train_bin])
    got = phases(out)
    assert EVERY_STEP <= set(got), sorted(got)
    assert {p[3] for p in got.values()} == {STEPS - 1}, got  # the warm-up step left out
    L, C, Vp = (int(x) for x in MODEL_RE.search(out).groups())
    per_step = 6 * B * T * (12 * L * C * C + C * Vp)  # 3 GEMMs x 2 flop per multiply-add, every linear layer
    assert got["gemm"][2] == per_step * (STEPS - 1)
    for name, (ms, nbytes, flops, _) in got.items():
        assert ms >= 0 and nbytes >= 0 and flops >= 0, name
        assert nbytes > 0 or name == "zero", name


def test_no_phase_lines_without_the_variable(built):
    train_bin, _ = built
    out = train("train_gpt2", ["-e", "d2", "-i", train_bin], phase_time=False)
    assert "phase " not in out


def test_muon_counts_its_newton_schulz_gemms_as_gemms(built):
    train_bin, _ = built
    adamw = phases(train("train_gpt2", ["-e", "d2", "-i", train_bin]))
    muon = phases(train("train_gpt2", ["-e", "d2", "-i", train_bin, "-op", "muon"]))
    assert muon["gemm"][2] > adamw["gemm"][2]
    assert muon["optimizer"][1] > 0


def test_nanochat_phases_cover_the_step(built):
    train_bin, _ = built
    got = phases(train("train_nanochat", ["-e", "d2", "-i", train_bin]))
    assert EVERY_STEP <= set(got), sorted(got)


def test_time_switches_times_each_value_of_a_switch(built, tmp_path: Path):
    """dev/time_switches.py: each value's runs, alternating, its median step and phases, and the record of every step;
    a switch without two values and a failing trainer are one error line."""
    tool = [PYTHON, REPO / "dev" / "time_switches.py"]
    out = run([*tool, "--rounds", "2", "--steps", "2", "--warmup", "0", "--json", tmp_path / "t.json", "LLMC_VEC16=1,0",
               "--", "-e", "d2", "-b", B, "-t", T], env={"OMP_NUM_THREADS": "1"}).stdout
    assert re.search(r"^cpu: .*\(family \d+, model \d+[;)].*logical CPU", out, re.M), out
    assert re.findall(r"^  round (\d)/2 LLMC_VEC16=(\d):", out, re.M) == [("1", "1"), ("1", "0"), ("2", "1"), ("2", "0")]
    assert re.search(r"^  LLMC_VEC16=1: [0-9.]+ ms \(1\.000x\) \| gemm [0-9.]+, attention", out, re.M), out
    assert re.search(r"^  LLMC_VEC16=0: [0-9.]+ ms \([0-9.]+x\) \| gemm", out, re.M), out
    record = json.loads((tmp_path / "t.json").read_text())
    assert [len(record["switches"]["LLMC_VEC16"]["steps"][v]) for v in ("1", "0")] == [4, 4]
    bad = run([*tool, "LLMC_VEC16=1"], check=False)
    assert bad.returncode == 2 and "expected NAME=VALUE,VALUE" in bad.stderr, bad.stderr
    failing = run([*tool, "--rounds", "1", "LLMC_VEC16=1,0", "--", "-e", "missing.bin"], check=False)
    assert failing.returncode == 1 and failing.stderr.count("\n") == 1 and failing.stderr.startswith("error: "), \
        failing.stderr


def test_time_switches_compares_a_kernel_timers_lines(tmp_path: Path):
    """dev/time_switches.py --kernel: a dev/test program's timer run with each value alternating, each of its lines
    that holds times compared by medians; a missing program and trainer arguments beside --kernel are refused."""
    tool = [PYTHON, REPO / "dev" / "time_switches.py"]
    make("dev/test/test_norm_cpu")
    out = run([*tool, "--rounds", "2", "LLMC_BF16_CVT=1,0", "--kernel", "dev/test/test_norm_cpu --time",
               "--json", tmp_path / "k.json"], env={"OMP_NUM_THREADS": "1"}).stdout
    assert re.search(r"^cpu: .*\(family \d+, model \d+", out, re.M), out
    assert "LLMC_BF16_CVT (1, 0), dev/test/test_norm_cpu --time: the medians of 2 runs" in out, out
    for kernel in ("layernorm_forward", "layernorm_backward", "rmsnorm_forward", "rmsnorm_backward"):
        assert re.search(rf"^  {kernel} .*\n      [0-9.]+ / [0-9.]+ \([0-9.]+x\); [0-9.]+ / [0-9.]+ \([0-9.]+x\); ",
                         out, re.M), out
    table = json.loads((tmp_path / "k.json").read_text())["switches"]["LLMC_BF16_CVT"]["dev/test/test_norm_cpu --time"]
    assert len(table) == 5 and all(len(t["1"]) == len(t["0"]) == 3 for t in table.values()), table
    missing = run([*tool, "LLMC_VEC16=1,0", "--kernel", "dev/test/no_such_timer --time"], check=False)
    assert missing.returncode == 2 and "names no program" in missing.stderr, missing.stderr
    assert "(make dev/test/no_such_timer)" in missing.stderr, missing.stderr
    both = run([*tool, "LLMC_VEC16=1,0", "--kernel", "dev/test/test_norm_cpu --time", "--", "-b", "4"], check=False)
    assert both.returncode == 2 and "not for --kernel" in both.stderr, both.stderr


def test_time_switches_pairs_a_timer_line_whatever_the_width_of_its_numbers():
    """A line keeps its key when its times change width ('  7.181 ms' under one value, ' 11.518 ms' under the other:
    the timers pad to a width), and a second line of the same text is a key of its own."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("time_switches", REPO / "dev" / "time_switches.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    one = tool.ms_lines("  GELU backward      7.181 ms    125.8 MB   17.5 GB/s\nno time here\n  GELU backward   2.0 ms")
    other = tool.ms_lines("  GELU backward     11.518 ms    125.8 MB    9.1 GB/s\n  GELU backward   3.5 ms")
    assert list(one) == list(other) and len(one) == 2, (one, other)
    assert [t for _, t in one.values()] == [[7.181], [2.0]] and [t for _, t in other.values()] == [[11.518], [3.5]]
    medians = {"1": [7.181], "0": [float("nan")]}
    assert tool.compare(medians, ["1", "0"], 0) == "7.181 / - (-)"
    assert tool.compare({"1": [2.0], "0": [3.0]}, ["1", "0"], 0) == "2.000 / 3.000 (1.50x)"
