"""dev/bench_attention.py: its reading of test_attention_cpu --time's lines and its table with made-up timings (no
timing is asserted), its command line, and one real run at T=64; test_attention_cpu --time's sequence lengths."""

from __future__ import annotations

import sys

import pytest

from conftest import PYTHON, REPO, assert_one_error_line, make, run

sys.path.insert(0, str(REPO / "dev"))
import bench_attention  # noqa: E402

OURS_TEXT = """one tile's S = Q K^T and O += P V (64 x 64, HS 64), one thread: micro-kernel (AMX) 2.33 us (449 GFLOP/s), x
fp32 GEMMs: openblas; 2 threads; medians of forward + backward (forward alone in brackets)
B=4 T=64 NH=12 HS=64: tiled fp32 1.74 ms [0.55] (44 GFLOP/s)
B=4 T=64 NH=12 HS=64: blocked bf16, out and lse kept 1.23 ms [0.48] (62 GFLOP/s, 1.42x tiled)
B=4 T=64 NH=12 HS=64: blocked bf16, recomputed 1.05 ms [0.38] (73 GFLOP/s, 1.65x tiled)
"""


def test_our_lines_are_read_per_length_and_precision_and_the_recomputing_variant_is_left_out() -> None:
    found = bench_attention.parse_ours(OURS_TEXT)
    assert found == {(64, "fp32"): bench_attention.Timing(1.74, 0.55), (64, "bf16"): bench_attention.Timing(1.23, 0.48)}


def test_a_line_of_another_shape_is_refused() -> None:
    with pytest.raises(ValueError, match="another shape"):
        bench_attention.parse_ours(OURS_TEXT.replace("NH=12", "NH=16"))


def test_the_table_gives_medians_of_rounds_and_torch_over_ours() -> None:
    T = bench_attention.Timing
    ours = {(1024, "bf16"): [T(50.0, 20.0), T(60.0, 30.0), T(55.0, 10.0)]}
    torch_runs = {(1024, "bf16"): [T(110.0, 19.0), T(100.0, 21.0), T(200.0, 20.0)]}
    (row,) = bench_attention.report_rows(ours, torch_runs)
    assert row == ["1024", "bf16", "blocked bf16, out and lse kept", "55.00 [20.00]", "110.00 [20.00]", "2.00x"]


@pytest.mark.parametrize("flags", [["--rounds", "0"], ["--threads", "0"], ["-T", "0"], ["-T", "9000"], ["--build", "2"],
                                   ["-T", "x"]])
def test_bad_flags_are_refused_by_argparse(flags: list[str]) -> None:
    proc = run([PYTHON, "dev/bench_attention.py", *flags], cwd=REPO, check=False)
    assert proc.returncode == 2 and "error:" in proc.stderr, proc.stderr


def test_a_run_at_t64_prints_the_cpu_and_both_precisions_beside_torch() -> None:
    proc = run([PYTHON, "dev/bench_attention.py", "-T", "64", "--rounds", "1"], cwd=REPO)
    assert "CPU: " in proc.stdout and "torch SDPA ms" in proc.stdout, proc.stdout
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| 64 ")]
    assert len(rows) == 2 and {r.split("|")[2].strip() for r in rows} == {"fp32", "bf16"}, proc.stdout
    assert all(r.rstrip(" |").endswith("x") for r in rows), rows


@pytest.mark.parametrize("arg", ["0", "x", "8193", "64x"])
def test_attention_time_refuses_a_bad_length_with_one_line(arg: str) -> None:
    make("dev/test/test_attention_cpu")
    proc = run([REPO / "dev" / "test" / "test_attention_cpu", "--time", arg], check=False)
    line = assert_one_error_line(proc, alone=True)
    assert line.startswith("error: --time takes at most 8 sequence lengths T") and f"(got {arg})" in line, line


def test_attention_time_switch_alternates_a_switch_and_refuses_bad_arguments_with_one_line() -> None:
    make("dev/test/test_attention_cpu")
    binary = REPO / "dev" / "test" / "test_attention_cpu"
    proc = run([binary, "--time-switch", "LLMC_ATTENTION_PAIRS_FUSED", "64"])
    head, forward, backward = proc.stdout.splitlines()
    assert head.startswith("LLMC_ATTENTION_PAIRS_FUSED=1 / LLMC_ATTENTION_PAIRS_FUSED=0, B=4 T=64 ") and "medians of 40" in head
    for line, part in ((forward, "forward"), (backward, "backward")):
        assert line.split()[0] == part and " ms (" in line and "x)" in line, line
    for args in (["--time-switch"], ["--time-switch", "ATTENTION"], ["--time-switch", "LLMC_VEC16", "0"],
                 ["--time-switch", "LLMC_VEC16", "64x"], ["--time-switch", "LLMC_VEC16", "64", "1"]):
        line = assert_one_error_line(run([binary, *args], check=False), alone=True)
        assert line.startswith("error: usage: ") and "--time-switch LLMC_NAME [T]" in line, (args, line)
