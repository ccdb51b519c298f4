"""dev/bench_gpu.py (make bench-gpu) without a GPU: its table on made-up step lines and timings (medians, ratio to
PyTorch, MFU against llmc/mfu.h's peaks), the FLOPs of its models, a missing program, the dry-run plan that
`make -n bench-gpu` prints, --help and bad flags. No timing is asserted anywhere."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from conftest import PYTHON, REPO, assert_one_error_line, run

sys.path.insert(0, str(REPO / "dev"))
import bench_gpu  # noqa: E402
from pyllmc.families import by_name  # noqa: E402

H100_SXM = "NVIDIA H100 80GB HBM3"
PEAKS = bench_gpu.gpu_peak_table(bench_gpu.MFU_HEADER.read_text())
D12_PARAMS = 124475904  # GPT-2 124M with the vocab padded to 50304, as train_gpt2cu counts it


def gpt2_run(program: str, B: int, times_ms: list[float], cudnn: bool | None = False, recompute: int | None = 0,
             peak_mib: float | None = 1000.0) -> bench_gpu.Run:
    return bench_gpu.Run(program, "gpt2", B, 1024, cudnn, recompute, times_ms=times_ms, peak_mib=peak_mib)


def d12_flops(run: bench_gpu.Run) -> float | None:
    return bench_gpu.run_flops(run, "d12", None)


def test_mfu_peaks_are_read_from_llmc_mfu_h_by_gpu_name():
    assert bench_gpu.gpu_peak_tflops(H100_SXM, PEAKS) == pytest.approx(989.4)
    assert bench_gpu.gpu_peak_tflops("NVIDIA H100 PCIe", PEAKS) == pytest.approx(756.0)
    assert bench_gpu.gpu_peak_tflops("NVIDIA H200", PEAKS) == pytest.approx(989.4)
    assert bench_gpu.gpu_peak_tflops("NVIDIA A100-SXM4-80GB", PEAKS) == pytest.approx(312.0)
    assert bench_gpu.gpu_peak_tflops("Some Future GPU", PEAKS) is None


def test_flops_per_step_is_llmc_mfu_h_formula_with_train_gpt2cu_parameter_count():
    assert by_name("gpt2").depth_parameters(12, by_name("gpt2").depth_vocab) == D12_PARAMS
    r = gpt2_run("train_gpt2cu", 8, [1.0])
    expected = (6.0 * D12_PARAMS + 12.0 * 12 * 768 * 1024) * 8 * 1024
    assert d12_flops(r) == pytest.approx(expected)
    llama = bench_gpu.Run("train_llama3cu", "llama3", 8, 1024, False, 0)
    assert bench_gpu.run_flops(llama, "d12", None) is None, "a Llama 3 model of unknown vocab has no FLOPs"


@pytest.mark.parametrize("depth", [2, 4, 12])
def test_llama3_parameter_count_matches_train_llama3_py_from_scratch_model(depth: int):
    import train_llama3
    model, _ = train_llama3.load_model(f"d{depth}", 42, 512)
    assert by_name("llama3").depth_parameters(depth, 512) == sum(p.numel() for p in model.parameters())


def test_table_has_medians_tokens_mfu_memory_and_the_ratio_to_pytorch_at_the_same_batch():
    runs = [gpt2_run("train_gpt2cu", 8, [100.0, 120.0, 80.0, 500.0, 90.0]),          # median 100
            gpt2_run("train_gpt2cu", 8, [50.0, 50.0], cudnn=True, recompute=1),       # median 50
            gpt2_run("train_gpt2.py", 8, [150.0, 140.0, 160.0], cudnn=None, recompute=None, peak_mib=None),
            gpt2_run("train_gpt2cu", 16, [200.0]),                                    # no reference at B=16
            bench_gpu.Run("train_llama3cu", "llama3", 8, 1024, False, None, status=bench_gpu.MISSING)]
    rows = bench_gpu.table_rows(runs, d12_flops, 989.4)
    assert [r.median_ms for r in rows] == [100.0, 50.0, 150.0, 200.0, None]
    assert rows[0].tokens_per_s == pytest.approx(8 * 1024 / 0.1)
    assert rows[0].vs_reference == pytest.approx(1.5) and rows[1].vs_reference == pytest.approx(3.0)
    assert rows[2].vs_reference == pytest.approx(1.0) and rows[3].vs_reference is None
    assert rows[0].mfu == pytest.approx(d12_flops(runs[0]) / 0.1 / 989.4e12)
    table = bench_gpu.format_table(rows)
    assert len({len(line) for line in table}) == 1, "columns are not aligned"
    assert [c.strip() for c in table[0].split("|")[1:-1]] == ["program", "B", "T", "cuDNN", "recompute", "ms/step",
                                                          "tokens/s", "MFU", "peak GPU MiB", "vs PyTorch"]
    cells = [[c.strip() for c in line.split("|")[1:-1]] for line in table[2:]]
    assert cells[0] == ["train_gpt2cu", "8", "1024", "off", "0", "100.0", "81920",
                        f"{100 * rows[0].mfu:.1f} %", "1000", "1.50x"]
    assert cells[1][3:6] == ["on", "1", "50.0"] and cells[1][-1] == "3.00x"
    assert cells[2][:5] == ["train_gpt2.py", "8", "1024", "-", "-"] and cells[2][8:] == ["-", "1.00x"]
    assert cells[3][-1] == "-"
    assert cells[4] == ["train_llama3cu", "8", "1024", "off", "-", "not built", "-", "-", "-", "-"]


def test_an_unknown_gpu_gives_no_mfu():
    rows = bench_gpu.table_rows([gpt2_run("train_gpt2cu", 8, [100.0])], d12_flops,
                                bench_gpu.gpu_peak_tflops("Some Future GPU", PEAKS))
    assert rows[0].mfu is None
    assert [c.strip() for c in bench_gpu.format_table(rows)[2].split("|")[1:-1]][7] == "-"


def fake_program(lines: list[str], exit_code: int = 0) -> list[str]:
    script = "import sys\n" + "".join(f"print({line!r})\n" for line in lines) + f"sys.exit({exit_code})\n"
    return [PYTHON, "-c", script]


def measure(tmp_path: Path, run: bench_gpu.Run, readings: list[float], warmup: int = 2) -> None:
    values = iter(readings)
    bench_gpu.run_and_measure(run, warmup, 60, tmp_path / "run.log", lambda: next(values, readings[-1]), 0.01, {})


def test_step_lines_of_train_gpt2cu_are_parsed_after_the_warmup_with_the_peak_memory(tmp_path: Path):
    lines = ["+----+", "| train_gpt2cu: NVIDIA H100 80GB HBM3, precision BF16, 1 process(es), ZeRO-0"]
    lines += [f"step {i}/6 | loss 10.9 | lr 3.00e-04 | norm 1.2 | {ms} ms | 81920 tok/s | MFU 40.1% | ETA 0:00:01"
              for i, ms in enumerate([900.0, 300.0, 100.5, 101.5, 99.0, 102.0], 1)]
    r = bench_gpu.Run("train_gpt2cu", "gpt2", 8, 1024, False, 0, fake_program(lines))
    measure(tmp_path, r, [500.0, 2500.0, 4500.0, 3000.0])
    assert r.status == "" and r.times_ms == [100.5, 101.5, 99.0, 102.0]
    assert bench_gpu.median_ms(r) == pytest.approx(101.0)
    assert r.peak_mib == pytest.approx(4000.0)
    assert "step 6/6" in (tmp_path / "run.log").read_text()


def test_step_lines_of_train_gpt2_py_are_parsed(tmp_path: Path):
    lines = [f"step {i:4d}/4 | loss 10.9 | lr 3.00e-04 | norm 1.2 | {ms} ms | 81920 tok/s | ETA 0:00:01"
             for i, ms in enumerate([40000.0, 120.0, 110.0, 130.0], 1)]
    r = bench_gpu.Run("train_gpt2.py", "gpt2", 8, 1024, None, None, fake_program(lines))
    measure(tmp_path, r, [0.0], warmup=1)
    assert r.times_ms == [120.0, 110.0, 130.0] and bench_gpu.median_ms(r) == 120.0


def test_a_failed_run_or_a_wrong_build_is_a_status_not_a_number(tmp_path: Path):
    r = bench_gpu.Run("train_gpt2cu", "gpt2", 64, 1024, False, 0,
                      fake_program(["loading", "error: cudaMalloc: out of memory"], exit_code=1))
    measure(tmp_path, r, [0.0])
    assert r.status == "exit 1: error: cudaMalloc: out of memory" and r.times_ms == []
    steps = [f"step {i}/4 | loss 1.0 | lr 1e-4 | norm 1.0 | 10.0 ms | 1 tok/s | ETA 0:00:00" for i in range(1, 5)]
    r = bench_gpu.Run("train_gpt2cu", "gpt2", 8, 1024, True, 0, fake_program(steps))
    measure(tmp_path, r, [0.0])
    assert r.status == "wrong build: without cuDNN attention" and r.times_ms == []
    r = bench_gpu.Run("train_gpt2cu", "gpt2", 8, 1024, False, 0, fake_program(steps[:2]))
    measure(tmp_path, r, [0.0])
    assert r.status == "2 step lines, expected more than 2"
    rows = bench_gpu.table_rows([r], d12_flops, 989.4)
    assert "2 step lines, expected more than 2" in bench_gpu.format_table(rows)[2]


def test_the_budget_shortens_the_last_run_and_skips_the_runs_after_it(monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture, tmp_path: Path):
    """--budget 50 with runs of 30 s each: the first may take 50 s, the second the 20 s left, and the third
    (the reference) is a row 'not run: out of time'; no budget: every run gets --timeout."""
    now = [100.0]
    budget = bench_gpu.Budget(50, lambda: now[0])
    assert budget.timeout(900) == 50
    now[0] = 130.0
    assert budget.timeout(900) == 20 and budget.timeout(10) == 10
    now[0] = 150.0
    assert budget.timeout(900) is None and bench_gpu.Budget(0, lambda: now[0]).timeout(900) == 900

    timeouts: list[float] = []

    def thirty_seconds(run: bench_gpu.Run, warmup: int, timeout: float, *rest: object) -> None:
        timeouts.append(timeout)
        now[0] += 30
        run.times_ms = [100.0]

    monkeypatch.setattr(bench_gpu.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(bench_gpu, "run_and_measure", thirty_seconds)
    monkeypatch.setattr(bench_gpu, "has_make_rule", lambda program: True)
    monkeypatch.setattr(bench_gpu, "gpu_name", lambda: H100_SXM)
    assert bench_gpu.main(["--build", "0", "--ours", "train_gpt2cu", "-B", "8", "--cudnn", "1,0", "--recompute", "0",
                           "--budget", "50", "--logs", str(tmp_path), "--gpu-cache", str(tmp_path)]) == 0
    assert timeouts == [50, 20]
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| train_gpt2")]
    assert len(table) == 3 and "not run: out of time (--budget 50 s)" in table[2] and table[2].startswith("| train_gpt2.py")


def test_the_default_programs_are_every_family_s_gpu_trainer():
    """--ours by default: the GPU trainer of each registered family that has one (train_<name>.cu), registry order."""
    from pyllmc.families import REGISTRY

    want = [f"{row.trainer}cu" for row in REGISTRY if (REPO / f"{row.trainer}.cu").is_file()]
    assert bench_gpu.parse_args([]).ours == want and "train_gpt2cu" in want and "train_llama3cu" in want


def test_a_missing_program_is_one_line_and_one_row(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture):
    monkeypatch.setattr(bench_gpu, "has_make_rule", lambda program: program != "train_llama3cu")
    assert bench_gpu.main(["--dry-run", "-B", "4", "--recompute", "0", "--cudnn", "0"]) == 0
    out = capsys.readouterr().out.splitlines()
    missing = [line for line in out if "train_llama3cu" in line]
    assert missing == ["bench-gpu: train_llama3cu: not built (no make rule and no binary yet); skipped"]
    args = bench_gpu.parse_args(["-B", "4"])
    runs = bench_gpu.plan_runs(args, {program: program != "train_llama3cu" for program in args.ours})
    assert [(r.program, r.status) for r in runs if not r.cmd] == [("train_llama3cu", "not built")]
    assert not any(r.family == "llama3" and r.cmd for r in runs), "no reference run for a program not built"


def test_llama3_runs_go_beside_the_llama3_tokenizer_with_cudnn_off_and_on():
    """train_llama3cu -e d12 takes V from ./llama3_tokenizer.bin: its runs go in build/llama3/ (the binaries by their
    full path); --cudnn 0,1 gives it the plain build's runs and train_llama3cu_cudnn's, and make builds both."""
    args = bench_gpu.parse_args(["-B", "4", "--cudnn", "0,1", "--recompute", "0,1"])
    available = {program: True for program in args.ours}
    runs = [r for r in bench_gpu.plan_runs(args, available) if r.family == "llama3"]
    ours = [r for r in runs if not r.is_reference]
    assert [(r.cudnn, r.recompute) for r in ours] == [(False, 0), (False, 1), (True, 0), (True, 1)]
    assert all(r.cwd == bench_gpu.family_files(by_name("llama3")).cwd for r in ours)
    assert [r.cmd[0] for r in ours] == [str(REPO / "train_llama3cu")] * 2 + [str(REPO / "train_llama3cu_cudnn")] * 2
    assert (bench_gpu.family_files(by_name("llama3")).cwd / "tok") in [Path(c) for c in runs[-1].cmd], "the reference reads the same tokenizer"
    goals = bench_gpu.build_goals(args, available)
    assert ["train_llama3cu", "PRECISION=BF16", "USE_CUDNN=0"] in goals and ["train_llama3cu_cudnn"] in goals
    assert ["train_gpt2cu_cudnn"] in goals


def test_make_rules_are_found_for_both_programs_and_their_cudnn_builds():
    for program in ["train_gpt2cu", "train_gpt2cu_cudnn", "train_llama3cu", "train_llama3cu_cudnn"]:
        assert bench_gpu.has_make_rule(program), program
    assert not bench_gpu.has_make_rule("train_nosuchcu")


def test_make_n_bench_gpu_prints_the_plan_without_a_gpu():
    proc = run(["make", "--no-print-directory", "-n", "bench-gpu",
                "BENCH_GPU_ARGS=--ours train_gpt2cu -B 4,8 --recompute 0 --steps 3 --warmup 1"], env={"MAKEFLAGS": ""})
    plan = [line.removeprefix("bench-gpu: ") for line in proc.stdout.splitlines() if line.startswith("bench-gpu: ")]
    make = "would build: make --no-print-directory PY=.venv/bin/python "
    assert [line.removeprefix(make) for line in plan if line.startswith("would build:")] == [
        "data", "train_gpt2cu PRECISION=BF16 USE_CUDNN=0", "train_gpt2cu_cudnn"]
    runs = [line.removeprefix("would run: ") for line in plan if line.startswith("would run: ")]
    data = str(bench_gpu.DEFAULT_DATA)
    ours = "-e d12 -i {} -j '' -b {} -t 1024 -x 4 -v 0 -s 0 -r 0"
    assert runs[:3] == [f"./train_gpt2cu {ours.format(data, 4)}", f"./train_gpt2cu_cudnn {ours.format(data, 4)}",
                        f"{REPO / '.venv' / 'bin' / 'python'} train_gpt2.py --model d12 --input_bin {data} --batch_size 4 "
                        "--sequence_length 1024 --num_iterations 4 --val_loss_every 0 --sample_every 0 --write_tensors 0 "
                        "--device cuda --dtype bfloat16 --compile 1 --flash 1 --fused_adamw 1 --tensorcores 1"]
    assert len(runs) == 6 and "-b 8 " in runs[3] and plan[-1] == "6 runs planned"
    assert "dry run, nothing built or run" in plan


def test_the_programs_take_the_flags_the_plan_gives_them():
    help_text = run([PYTHON, REPO / "train_gpt2.py", "--help"]).stdout
    args = bench_gpu.parse_args(["-B", "4"])
    for flag in [f for f in bench_gpu.reference_command("gpt2", args, 4) if f.startswith("--")]:
        assert flag in help_text, f"train_gpt2.py has no {flag}"
    help_text = run([PYTHON, REPO / "train_llama3.py", "--help"]).stdout
    for flag in [f for f in bench_gpu.reference_command("llama3", args, 4) if f.startswith("--")]:
        assert flag in help_text, f"train_llama3.py has no {flag}"
    table = (REPO / "llmc" / "args.h").read_text()
    for flag in [f for f in bench_gpu.our_command("train_gpt2cu", False, 1, args, 4) if f.startswith("-")]:
        assert re.search(rf'[A-Z]+\("{re.escape(flag)}",', table), f"train_gpt2cu has no {flag}"


@pytest.mark.parametrize("makeflags, dry", [("n", True), ("nk -- PY=python3", True), ("k", False), ("", False),
                                             (" -j4 --jobserver-auth=3,4", False), ("PY=python3", False)])
def test_make_n_is_recognised_in_makeflags(makeflags: str, dry: bool):
    assert bench_gpu.make_dry_run(makeflags) == dry


def test_help_lists_the_flags():
    proc = run([PYTHON, REPO / "dev" / "bench_gpu.py", "--help"])
    for flag in ("--ours", "-B", "-T", "--cudnn", "--recompute", "--steps", "--warmup", "--torch-flags", "--gpu-name",
                 "--dry-run", "train_llama3cu", "make bench-gpu"):
        assert flag in proc.stdout, flag


@pytest.mark.parametrize("flags", [["-B", "0"], ["-B", "8,x"], ["--ours", "train_gpt2"], ["--cudnn", "2"],
                                   ["--recompute", "3"], ["-T", "2048"], ["--model", "x12"], ["--warmup", "0"],
                                   ["--budget", "-1"], ["--timeout", "0"], ["--no-such-flag"]])
def test_bad_flags_give_one_error_line(flags: list[str]):
    proc = run([PYTHON, REPO / "dev" / "bench_gpu.py", "--dry-run", *flags], check=False)
    assert_one_error_line(proc, status=2, alone=True)
