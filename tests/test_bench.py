"""dev/bench.py's table logic with made-up timings (no timing is asserted anywhere), its GEMM-peak helpers
(build/gemm_peak, dev/gemm_peak.py) and dev/gemm_pairs.py at a tiny size, its --torch modes and its command line."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import PYTHON, REPO, TS_TRAIN, assert_one_error_line, make, run

sys.path.insert(0, str(REPO / "dev"))
import bench  # noqa: E402
from pyllmc.families import NAMES, REGISTRY, by_name  # noqa: E402

# Llama 3's dN takes its vocabulary from the test tokenizer: both run in build/llama3 (make llama3-debug-states)
LLAMA3_FILES = bench.family_files(by_name("llama3"))

FLOPS = 100e9  # per step: 1000 ms/step is 100 GFLOP/s
TOKENS = 256


def fake_run(name: str, kind: str, precision: str, times_ms: list[float]) -> bench.Run:
    return bench.Run(name, [], {}, kind, precision, times_ms=times_ms, peak_rss_mb=1000.0)


def fake_runs() -> list[bench.Run]:
    return [fake_run("llmc train_gpt2 fp32", "llmc", "fp32", [1000.0, 1100.0, 900.0]),
            fake_run("llmc train_gpt2 bf16", "llmc", "bf16", [500.0, 500.0]),
            fake_run("pytorch fp32", "pytorch", "fp32", [2000.0, 2000.0, 2500.0]),
            fake_run("pytorch fp32-flash-compile", "pytorch", "fp32", [1250.0, 1250.0]),
            fake_run("pytorch bf16", "pytorch", "bf16", [4000.0])]


def test_every_ratio_is_against_the_fastest_pytorch_mode_which_the_table_names():
    rows, fastest = bench.table_rows(fake_runs(), FLOPS, TOKENS, {})
    assert fastest is not None and fastest.name == "pytorch fp32-flash-compile"
    by_name = {r.name: r for r in rows}
    assert by_name["llmc train_gpt2 fp32"].median_ms == 1000.0
    assert by_name["llmc train_gpt2 fp32"].vs_fastest_torch == pytest.approx(1.25)
    assert by_name["llmc train_gpt2 bf16"].vs_fastest_torch == pytest.approx(2.5)
    assert by_name["pytorch fp32-flash-compile"].vs_fastest_torch == pytest.approx(1.0)
    assert by_name["pytorch bf16"].vs_fastest_torch == pytest.approx(1250 / 4000)
    assert by_name["llmc train_gpt2 fp32"].vs_torch_fp32 == pytest.approx(2.0)
    assert by_name["llmc train_gpt2 fp32"].tokens_per_s == pytest.approx(256.0)
    table = bench.format_table(rows, fastest)
    assert "vs fastest PyTorch (fp32-flash-compile)" in table[0]
    assert len({len(line) for line in table}) == 1, "columns are not aligned"
    llmc_fp32 = next(line for line in table if "llmc train_gpt2 fp32" in line)
    assert "1.25x" in llmc_fp32 and "2.00x" in llmc_fp32


def test_without_pytorch_runs_the_ratios_are_dashes():
    rows, fastest = bench.table_rows(fake_runs()[:2], FLOPS, TOKENS, {})
    assert fastest is None and all(r.vs_fastest_torch is None and r.vs_torch_fp32 is None for r in rows)
    assert "vs fastest PyTorch (none run)" in bench.format_table(rows, fastest)[0]


def test_peak_fraction_is_against_the_fastest_fp32_gemm_and_for_bf16_the_fastest_of_either():
    peaks = {"openblas fp32": 200.0, "blocked fp32": 150.0, "blocked bf16": 400.0, "torch fp32": 180.0}
    assert bench.best_peak(peaks, "fp32") == ("openblas fp32", 200.0)
    assert bench.best_peak(peaks, "bf16") == ("blocked bf16", 400.0)
    assert bench.best_peak({"blocked bf16": 50.0, "torch fp32": 180.0}, "bf16") == ("torch fp32", 180.0)
    assert bench.best_peak({}, "fp32") is None
    rows, _ = bench.table_rows(fake_runs(), FLOPS, TOKENS, peaks)
    by_name = {r.name: r for r in rows}
    assert by_name["llmc train_gpt2 fp32"].gflops == pytest.approx(100.0)
    assert by_name["llmc train_gpt2 fp32"].peak_fraction == pytest.approx(0.5)   # 100 of 200
    assert by_name["llmc train_gpt2 bf16"].peak_fraction == pytest.approx(0.5)   # 200 of 400
    assert by_name["pytorch bf16"].peak_fraction == pytest.approx(25 / 400)
    line = next(x for x in bench.format_table(rows, None) if "llmc train_gpt2 fp32" in x)
    assert "50 %" in line


def test_step_gemm_peaks_time_a_training_steps_shapes_and_hold_each_run_against_its_precision(tinyshakespeare):
    make("build/gemm_peak_onednn")
    out = run([REPO / "build" / "gemm_peak_onednn", "-n", 64, "-r", 1, "-s", "32,64,128,2"],
              env={"OMP_NUM_THREADS": "2"}).stdout
    peaks = bench.parse_peaks(out)
    steps = {k for k in peaks if k.startswith("step ")}
    assert {"step onednn fp32", "step blocked fp32", "step blocked bf16"} <= steps, out
    assert all(v > 0 for v in peaks.values()), out
    assert bench.best_step_peak({"step onednn fp32": 150.0, "step blocked fp32": 120.0, "onednn fp32": 900.0}, "fp32") \
        == ("step onednn fp32", 150.0)
    assert bench.best_peak({"step onednn fp32": 999.0, "onednn fp32": 150.0}, "fp32") == ("onednn fp32", 150.0)
    args = bench.parse_args(["--model", "d2", "-B", "2", "-T", "16", "--torch", ""])
    assert bench.step_shape(args) == "32,128,50304,2"
    rows, _ = bench.table_rows([fake_run("llmc train_gpt2 fp32", "llmc", "fp32", [1000.0])], FLOPS, TOKENS,
                               {"step onednn fp32": 200.0, "onednn fp32": 400.0})
    assert rows[0].step_peak_fraction == pytest.approx(0.5) and rows[0].peak_fraction == pytest.approx(0.25)
    for bad in ("32,64,128", "0,64,128,2", "32,64,128,2,1", "a,b,c,d"):
        assert_one_error_line(run([REPO / "build" / "gemm_peak_onednn", "-s", bad], check=False), alone=True)


def test_torchs_bf16_peak_is_measured_only_when_a_run_is_bf16():
    def precisions(*flags: str) -> str:
        return bench.torch_peak_precisions(bench.parse_args(["--model", "d2", *flags]))
    assert precisions("--precision", "fp32", "--torch", "minimal-fp32") == "fp32"
    assert precisions("--precision", "fp32", "--torch", "") == "fp32"
    assert precisions("--precision", "fp32,bf16", "--torch", "minimal-fp32") == "fp32,bf16"
    assert precisions("--precision", "bf16-force", "--torch", "") == "fp32,bf16"
    assert precisions("--precision", "fp32", "--torch", "minimal-bf16") == "fp32,bf16"
    assert precisions("--precision", "fp32", "--torch", "fp32-flash,bf16-compile") == "fp32,bf16"


def test_time_outside_the_gemms_comes_from_the_trainers_gemm_clock(tinyshakespeare):
    script = ("print('step 1/3 | loss 5.0 | lr 1e-4 | norm 1.0 | 5000.0 ms | 512 tok/s')\n"
              "for i in range(2, 4): print(f'step {i}/3 | loss 5.0 | lr 1e-4 | norm 1.0 | 500.0 ms | 512 tok/s')\n"
              "print('gemm time: 800.0 ms in 42 calls over 2 steps (LLMC_GEMM_TIME=1, the first step left out)')")
    r = bench.Run("llmc train_gpt2 fp32", [PYTHON, "-c", script], {}, "llmc", "fp32")
    bench.spawn_and_measure(r, 1, 60)
    assert r.outside_gemm_ms == [pytest.approx(100.0)]  # (2 x 500 - 800) / 2: the warm-up step left out
    rows, _ = bench.table_rows([r], FLOPS, TOKENS, {})
    assert rows[0].outside_gemm_ms == pytest.approx(100.0)
    assert "100.0" in next(x for x in bench.format_table(rows, None) if "llmc train_gpt2 fp32" in x)
    # the trainer's clock itself: the steps after the first, and less GEMM time than those steps took
    make("train_gpt2")
    out = run([REPO / "train_gpt2", "-e", "d2", "-i", TS_TRAIN, "-j", "", "-x", 4, "-v", 0, "-s", 0],
              env={"LLMC_GEMM_TIME": "1", "OMP_NUM_THREADS": "1"}).stdout
    clock = bench.GEMM_TIME_RE.search(out)
    steps = bench.parse_steps(out.splitlines())
    assert clock and int(clock[3]) == 3 and int(clock[2]) > 0, out
    assert 0.0 < float(clock[1]) < sum(ms for _, ms in steps[1:]), out


def test_our_precisions_and_default_programs():
    args = bench.parse_args(["--precision", "fp32,bf16,bf16-force", "--torch", ""])
    assert args.ours == "train_gpt2_openblas,train_gpt2_onednn,train_gpt2_none"
    runs = {r.name: r for r in bench.build_runs(bench.parse_args(["--ours", "train_gpt2", "--precision",
                                                                   "fp32,bf16,bf16-force,bf16-onednn", "--torch", ""]))}
    forced, decided, fp32 = runs["llmc train_gpt2 bf16-force"], runs["llmc train_gpt2 bf16"], runs["llmc train_gpt2 fp32"]
    assert forced.precision == "bf16" and forced.env["LLMC_BF16"] == "force" and forced.cmd[-2:] == ["-p", "bf16"]
    onednn = runs["llmc train_gpt2 bf16-onednn"]
    assert onednn.precision == "bf16" and onednn.env["LLMC_BF16_GEMM"] == "onednn" and onednn.cmd[-2:] == ["-p", "bf16"]
    assert "LLMC_BF16" not in decided.env and decided.cmd[-2:] == ["-p", "bf16"] and "-p" not in fp32.cmd
    assert all(r.env["LLMC_GEMM_TIME"] == "1" for r in runs.values())
    with pytest.raises(SystemExit):
        bench.parse_args(["--precision", "fp16"])


def test_two_programs_of_one_file_name_are_named_by_their_paths(tmp_path):
    other = tmp_path / "train_gpt2"
    other.write_text("")
    names = [r.name for r in bench.build_runs(bench.parse_args(["--ours", f"train_gpt2,{other}", "--precision", "bf16",
                                                                 "--torch", ""]))]
    assert names == ["llmc train_gpt2 bf16", f"llmc {other} bf16"]
    names = [r.name for r in bench.build_runs(bench.parse_args(["--ours", "train_gpt2", "--precision", "fp32",
                                                                 "--torch", ""]))]
    assert names == ["llmc train_gpt2 fp32"]


def test_peak_lines_are_parsed_and_each_blas_build_has_its_peak_program():
    text = ("gemm_peak: backend openblas, bf16 emulated in fp32, 2 thread(s), n=2048, median of 3\n"
            "gemm openblas fp32 171.5\ngemm blocked fp32 120.0\ngemm blocked bf16 90.25\ngemm torch bf16 20.0\n")
    assert bench.parse_peaks(text) == {"openblas fp32": 171.5, "blocked fp32": 120.0, "blocked bf16": 90.25,
                                       "torch bf16": 20.0}
    progs = bench.peak_programs(["train_gpt2", "train_gpt2_mkl", "/abs/train_gpt2_openblas-system", "train_gpt2"])
    assert [p.relative_to(REPO).as_posix() for p in progs] == [
        "build/gemm_peak", "build/gemm_peak_mkl", "build/gemm_peak_openblas-system"]


def test_an_openblas_coretype_in_the_environment_is_named():
    # the kernels OpenBLAS runs change the fp32 rows (Haswell's AVX2 sgemm runs at about half the AVX-512 one on a
    # Zen 5), so a run under the variable says so
    note = bench.openblas_coretype_note({"OPENBLAS_CORETYPE": "Haswell"})
    assert note.startswith("note: OPENBLAS_CORETYPE=Haswell is set") and "env -u OPENBLAS_CORETYPE" in note
    assert bench.openblas_coretype_note({}) == "" and bench.openblas_coretype_note({"OPENBLAS_CORETYPE": ""}) == ""


def test_gemm_peak_names_the_openblas_kernels_it_runs():
    make("build/gemm_peak_openblas")  # make setup installs the wheel, so make test always has it
    prog = REPO / "build" / "gemm_peak_openblas"
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    forced = subprocess.run([prog, "-n", "16", "-r", "1"], capture_output=True, text=True,
                            env={**env, "OPENBLAS_CORETYPE": "Haswell"}, check=True).stdout
    assert forced.startswith("gemm_peak: backend openblas (core Haswell), "), forced
    own = subprocess.run([prog, "-n", "16", "-r", "1"], capture_output=True, text=True, env=env, check=True).stdout
    assert own.startswith("gemm_peak: backend openblas (core ") and "(core )" not in own, own


@pytest.mark.parametrize("mode, flags", [
    ("fp32", ["--dtype", "float32"]),
    ("bf16", ["--dtype", "bfloat16"]),
    ("fp32-flash", ["--dtype", "float32", "--flash", "1"]),
    ("bf16-compile-fused", ["--dtype", "bfloat16", "--compile", "1", "--fused_adamw", "1"]),
    ("fp32-fused-flash-compile", ["--dtype", "float32", "--fused_adamw", "1", "--flash", "1", "--compile", "1"]),
])
def test_torch_modes_become_train_gpt2_py_flags(mode: str, flags: list[str]):
    assert bench.torch_mode_flags(mode) == flags
    help_text = run([PYTHON, REPO / "train_gpt2.py", "--help"]).stdout
    assert all(f in help_text for f in flags if f.startswith("--")), "train_gpt2.py lacks a flag bench.py passes"


@pytest.mark.parametrize("mode", ["fp16", "fp32-flash-flash", "fp32-jit", "flash", ""])
def test_unknown_torch_modes_are_refused(mode: str):
    with pytest.raises(SystemExit, match="--torch"):
        bench.parse_torch_mode(mode)


def test_cpu_description_names_the_model_and_the_gemm_isa():
    zen3 = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\n" \
           "flags\t\t: fpu sse avx avx2 fma bmi2\n\nprocessor\t: 1\nmodel name\t: AMD EPYC\n"
    assert bench.cpu_description(zen3, 2) == "AMD EPYC (family 25, model 1; AVX2, FMA, no AVX-512), 2 logical CPU(s)"
    xeon = "cpu family\t: 6\nmodel\t\t: 143\nmodel name\t: Intel(R) Xeon(R) Platinum 8481C\n" \
           "flags\t\t: avx2 fma avx512f avx512_bf16 avx512_fp16 amx_bf16\n"
    assert bench.cpu_description(xeon, 4) == ("Intel(R) Xeon(R) Platinum 8481C (family 6, model 143; AVX2, FMA, AVX512F, "
                                              "AVX512_BF16, AVX512_FP16, AMX_BF16), 4 logical CPU(s)")
    assert bench.cpu_description("", 1) == "unknown CPU, 1 logical CPU(s)"


def test_auto_torch_modes_add_bf16_only_on_cpus_with_bf16_instructions_and_always_the_minimal_step():
    fast_fp32 = ["fp32", "fp32-flash-fused", "fp32-flash-compile-fused"]
    assert bench.auto_torch_modes("flags\t: avx2 fma\n") == fast_fp32 + ["minimal-fp32"]
    assert bench.auto_torch_modes("flags\t: avx2 avx512f avx512_bf16\n") == fast_fp32 + [
        "bf16", "bf16-flash-compile-fused", "minimal-bf16"]
    assert bench.auto_torch_modes("flags\t: avx512f amx_tile amx_bf16\n")[-2:] == ["bf16-flash-compile-fused", "minimal-bf16"]
    assert all(bench.torch_mode_flags(m) for m in bench.AUTO_TORCH_FP32 + bench.AUTO_TORCH_BF16)


def test_gemm_peak_programs_print_a_rate_per_gemm():
    make("build/gemm_peak")
    out = run([REPO / "build" / "gemm_peak", "-n", 96, "-r", 1], env={"OMP_NUM_THREADS": "2"}).stdout
    peaks = bench.parse_peaks(out)
    assert {"blocked fp32", "blocked bf16"} <= set(peaks) and all(v > 0 for v in peaks.values()), out
    # plus the BLAS's fp32 line and oneDNN's bf16 one when the build has them
    assert len(peaks) in (2, 3, 4), out
    out = run([PYTHON, REPO / "dev" / "gemm_peak.py", "-n", 64, "--reps", 1, "--threads", 1]).stdout
    peaks = bench.parse_peaks(out)
    assert set(peaks) == {"torch fp32", "torch bf16"} and all(v > 0 for v in peaks.values()), out
    proc = run([REPO / "build" / "gemm_peak", "-n", "0"], check=False)
    assert_one_error_line(proc, alone=True)


# | GEMM | M x N x K | op | ours GFLOP/s | torch GFLOP/s | torch time / ours | max error (relative) |
PAIR_ROW = re.compile(r"^\| (.+) \| (\d+) x (\d+) x (\d+) \| (A|A\^T) (B|B\^T) \| (\d+) \| (\d+) \| "
                      r"([\d.]+)x \[([\d.]+)\.\.([\d.]+)\] \| ([\d.e+-]+) \|$")


@pytest.mark.parametrize("precision,tolerance", [("bf16", 1e-5), ("fp32", 1e-5)])
def test_gemm_pairs_times_each_step_gemm_of_ours_and_torchs_alternately(precision: str, tolerance: float):
    """dev/gemm_pairs.py: per linear layer its forward, input gradient and weight gradient, then the lm_head's, each
    row ours against torch's (the ratio's median within its range), ours within `tolerance` of an fp32 product of
    the same operands (bf16: the same bf16 numbers, fp32 sums), and the step's sum."""
    out = run([PYTHON, REPO / "dev" / "gemm_pairs.py", "-s", "64,64,96,2", "-l", "160x64,64x160", "--rounds", 3,
               "--threads", 1, "--precision", precision]).stdout
    rows = [m for m in (PAIR_ROW.match(line) for line in out.splitlines()) if m]
    names = [f"{w} {k}" for w in ("160x64", "64x160", "lm_head") for k in ("forward", "input gradient", "weight gradient")]
    assert [m.group(1) for m in rows] == names, out
    BT, shapes = 64, {"160x64": (160, 64), "64x160": (64, 160), "lm_head": (96, 64)}
    for m in rows:
        OC, IC = shapes[m.group(1).split()[0]]
        kind = m.group(1).split(" ", 1)[1]
        want = {"forward": (BT, OC, IC, "A", "B^T"), "input gradient": (BT, IC, OC, "A", "B"),
                "weight gradient": (OC, IC, BT, "A^T", "B")}[kind]
        assert (int(m.group(2)), int(m.group(3)), int(m.group(4)), m.group(5), m.group(6)) == want, m.group(0)
        assert int(m.group(7)) > 0 and int(m.group(8)) > 0, m.group(0)
        assert float(m.group(10)) <= float(m.group(9)) <= float(m.group(11)), m.group(0)
        assert float(m.group(12)) <= tolerance, m.group(0)
    assert re.search(r"^step GEMMs \(each median x its count\): ours [\d.]+ ms, torch [\d.]+ ms, torch / ours [\d.]+x$",
                     out, re.M), out
    assert f"; {precision}, 1 thread(s), 3 alternating rounds per shape; step BT=64 C=64 Vp=96 L=2" in out, out


def test_gemm_pairs_takes_make_benchs_shapes_and_refuses_bad_flags():
    assert "--family" in run([PYTHON, REPO / "dev" / "gemm_pairs.py", "--help"]).stdout
    for bad in (["-l", "64x64"], ["--rounds", "0"], ["-s", "1,2,3"], ["--precision", "fp16"], ["--family", "nosuch"]):
        proc = run([PYTHON, REPO / "dev" / "gemm_pairs.py", *bad], check=False)
        assert proc.returncode == 2 and "error: " in proc.stderr and "Traceback" not in proc.stderr, (bad, proc.stderr)


def test_bench_help_lists_its_flags_and_compile_without_warmup_is_refused(tinyshakespeare):
    proc = run([PYTHON, REPO / "dev" / "bench.py", "--help"])
    for flag in ("--torch", "--peak-size", "--peak-reps", "--ours", "--precision", "--warmup", "--rounds", "-flash",
                 "-compile", "-fused"):
        assert flag in proc.stdout, flag
    proc = run([PYTHON, REPO / "dev" / "bench.py", "--torch", "fp32-compile", "--warmup", "0"], check=False)
    assert proc.returncode == 2 and "needs --warmup >= 1" in proc.stderr, proc.stderr


def test_a_bf16_run_the_trainer_ran_in_fp32_is_named_so_and_held_against_the_fp32_peak():
    script = ("print('-p bf16: training in fp32 instead: this CPU has no AVX512-BF16 (LLMC_BF16=force runs bf16)')\n"
              "for i in range(1, 4): print(f'step {i}/3 | loss 5.0 | lr 1e-4 | norm 1.0 | 500.0 ms | 512 tok/s')")
    r = bench.Run("llmc train_gpt2 bf16", [PYTHON, "-c", script], {}, "llmc", "bf16")
    bench.spawn_and_measure(r, 1, 60)
    assert r.ran_fp32 and r.times_ms == [500.0, 500.0]
    rows, _ = bench.table_rows([r], FLOPS, TOKENS, {"blocked bf16": 400.0, "openblas fp32": 250.0})
    assert rows[0].name == "llmc train_gpt2 bf16 (ran fp32: bf16 does not pay here)"
    assert rows[0].peak_fraction == pytest.approx(200 / 250)


def test_programs_named_by_ours_are_built_with_their_peak_programs():
    assert bench.make_targets(["train_gpt2", "train_gpt2_none", "/opt/x/train_gpt2", "train_gpt2"]) == [
        "train_gpt2", "build/gemm_peak", "train_gpt2_none", "build/gemm_peak_none"]
    for path in [REPO / "train_gpt2_none", REPO / "build" / "gemm_peak_none"]:
        path.unlink(missing_ok=True)
    bench.build_programs(bench.make_targets(["train_gpt2_none"]))
    assert (REPO / "train_gpt2_none").exists() and (REPO / "build" / "gemm_peak_none").exists()
    assert run(["make", "-q", "train_gpt2_none", "build/gemm_peak_none"], check=False).returncode == 0


def test_a_program_make_cannot_build_is_one_error_line(tinyshakespeare):
    proc = run([PYTHON, REPO / "dev" / "bench.py", "--ours", "train_gpt2_nosuch", "--torch", "", "--peak-size", 0],
               check=False)
    line = assert_one_error_line(proc)
    assert line.startswith("error: --ours: make train_gpt2_nosuch build/gemm_peak_nosuch build/triad failed: "), line


def test_llama3_flops_count_gqa_and_swiglu_by_hand():
    # d6: L=6, C=384, 6 query heads of 64, 3 key/value heads, SwiGLU hidden 1024 (2/3 of 4C), V=514
    per_layer = 384 * 384 + 2 * 384 * 64 * 3 + 384 * 384 + 3 * 384 * 1024
    n_matmul = 6 * per_layer + 514 * 384
    want = 6.0 * n_matmul * 256 + 12.0 * 6 * 384 * 64 * 256
    assert bench.step_flops("d6", 4, 64, "llama3", 514) == want == 15_704_653_824
    assert bench.step_flops("d6", 4, 64) == 6.0 * (12 * 6 * 384 * 384 + 50257 * 384) * 256 + 12.0 * 6 * 384 * 64 * 256


def test_llama3_family_runs_train_llama3_and_its_reference_in_the_llama3_directory():
    args = bench.parse_args(["--family", "llama3", "--model", "d6", "--precision", "fp32", "--torch", "fp32,fp32-flash"])
    assert args.ours == "train_llama3" and args.data == LLAMA3_FILES.data
    assert LLAMA3_FILES.data == REPO / "build" / "llama3" / "ts" / "tiny_shakespeare_train.bin"
    assert LLAMA3_FILES.make_target == "llama3-debug-states"
    runs = bench.build_runs(args)
    assert [r.name for r in runs] == ["llmc train_llama3 fp32", "pytorch fp32", "pytorch fp32-flash"]
    assert all(r.cwd == LLAMA3_FILES.cwd for r in runs)
    ours, reference = runs[0].cmd, runs[1].cmd
    assert ours[0] == str(REPO / "train_llama3") and ours[1:3] == ["-e", "d6"] and "-p" not in ours
    assert ours[ours.index("-i") + 1] == str(LLAMA3_FILES.data)
    assert reference[1] == str(REPO / "train_llama3.py")
    assert reference[reference.index("--tokenizer") + 1] == str(LLAMA3_FILES.cwd / "tok" / "tokenizer.json")
    assert reference[reference.index("--input_bin") + 1] == str(LLAMA3_FILES.data)
    assert bench.peak_programs(["train_llama3"]) == [REPO / "build" / "gemm_peak"]


def test_llama3_flops_need_no_path_set_up_by_the_caller():
    """dev/bench.py run as a script has dev/ on sys.path, not the repository root (where model_file.py is)."""
    code = ("import sys; sys.path.insert(0, 'dev'); import bench; "
            "print(bench.step_flops('d6', 4, 64, 'llama3', 514))")
    assert run([PYTHON, "-c", code], cwd=REPO, env={"PYTHONSAFEPATH": "1"}).stdout.strip() == "15704653824.0"


@pytest.mark.parametrize("family", ["llama3", "nanochat"])
def test_llama3_and_nanochat_get_the_same_precisions_as_gpt2(tinyshakespeare, family: str):
    runs = {r.name: r for r in bench.build_runs(bench.parse_args(["--family", family, "--model", "d2", "--precision",
                                                                   "fp32,bf16,bf16-force", "--torch", ""]))}
    trainer = f"llmc train_{family}"
    assert list(runs) == [f"{trainer} fp32", f"{trainer} bf16", f"{trainer} bf16-force"]
    assert runs[f"{trainer} bf16"].cmd[-2:] == ["-p", "bf16"] and runs[f"{trainer} bf16"].precision == "bf16"
    assert runs[f"{trainer} bf16-force"].env["LLMC_BF16"] == "force" and "-p" not in runs[f"{trainer} fp32"].cmd
    assert all(r.env["LLMC_PHASE_TIME"] == "1" and r.env["LLMC_GEMM_TIME"] == "1" for r in runs.values())
    assert bench.parse_args(["--family", family, "--torch", ""]).precision.startswith("fp32,bf16")


def test_nanochat_flops_count_its_depth_rule_and_untied_head_by_hand():
    # d6: L=6, C=64*6=384, 3 heads of 128 (NKV=NH), MLP 4C, V=50304; the untied head is the only V x C GEMM
    n_matmul = 6 * (384 * 3 * 384 + 384 * 384 + 2 * 384 * 4 * 384) + 50304 * 384
    want = 6.0 * n_matmul * 256 + 12.0 * 6 * 384 * 64 * 256
    assert bench.step_flops("d6", 4, 64, "nanochat", by_name("nanochat").depth_vocab) == want
    # d12 is C=768 in both rules; d24 is C=1536 for nanochat (GPT-2's d24 is C=1024)
    assert bench.step_flops("d24", 1, 1, "nanochat", 0) == 6.0 * 12 * 24 * 1536 * 1536 + 12.0 * 24 * 1536


def test_nanochat_family_runs_train_nanochat_and_its_reference_on_the_gpt2_shards():
    args = bench.parse_args(["--family", "nanochat", "--model", "d2", "--precision", "fp32", "--torch", "fp32"])
    assert args.ours == "train_nanochat" and args.data == bench.DEFAULT_DATA
    runs = bench.build_runs(args)
    assert [r.name for r in runs] == ["llmc train_nanochat fp32", "pytorch fp32"]
    ours, reference = runs[0].cmd, runs[1].cmd
    assert ours[0] == str(REPO / "train_nanochat") and ours[1:3] == ["-e", "d2"]
    assert reference[1] == str(REPO / "train_nanochat.py") and "--tokenizer" not in reference
    assert reference[reference.index("--model") + 1] == "d2"


# ----------------------------------------------------------------------------- the roofline account


PHASE_LINES = ("print('phase gemm: 800.0 ms, 4000000000 bytes, 200000000000 flop over 2 steps')\n"
               "print('phase norm: 40.0 ms, 2000000000 bytes, 1000000000 flop over 2 steps')\n"
               "print('phase optimizer: 60.0 ms, 6000000000 bytes, 3000000000 flop over 2 steps')\n")
STEP_LINES = ("print('step 1/3 | loss 5.0 | lr 1e-4 | norm 1.0 | 5000.0 ms | 512 tok/s')\n"
              "for i in range(2, 4): print(f'step {i}/3 | loss 5.0 | lr 1e-4 | norm 1.0 | 500.0 ms | 512 tok/s')\n")


def test_a_phase_limit_is_the_larger_of_its_memory_time_and_its_compute_time():
    # 2 GB at 20 GB/s = 100 ms; 1 GFLOP at 100 GFLOP/s = 10 ms: memory-bound
    assert bench.phase_limit_ms(2e9, 1e9, 20.0, 100.0) == pytest.approx(100.0)
    # 1 MB at 20 GB/s = 0.05 ms; 50 GFLOP at 100 GFLOP/s = 500 ms: compute-bound
    assert bench.phase_limit_ms(1e6, 50e9, 20.0, 100.0) == pytest.approx(500.0)
    assert bench.phase_limit_ms(2e9, 50e9, None, 100.0) == pytest.approx(500.0)  # a rate not measured drops its term
    assert bench.phase_limit_ms(2e9, 50e9, 20.0, None) == pytest.approx(100.0)
    assert bench.phase_limit_ms(2e9, 50e9, None, None) is None


def test_phase_lines_become_a_table_of_each_phase_against_its_limit(tinyshakespeare):
    r = bench.Run("llmc train_gpt2 fp32", [PYTHON, "-c", STEP_LINES + PHASE_LINES], {}, "llmc", "fp32")
    bench.spawn_and_measure(r, 1, 60)
    bench.spawn_and_measure(r, 1, 60)  # two rounds: the totals add up, per step stays the same
    assert set(r.phases) == {"gemm", "norm", "optimizer"} and r.phases["gemm"].steps == 4
    assert r.phase_covered_steps == 4 and r.phase_covered_ms == pytest.approx(2000.0)
    # 20 GB/s memory, 50 GFLOP/s SIMD, 200 GFLOP/s step-GEMM
    rows = {x.name: x for x in bench.phase_rows(r, 500.0, 20.0, 50.0, 200.0)}
    assert list(rows) == ["gemm", "norm", "optimizer", "other", "step"]
    gemm, norm, opt = rows["gemm"], rows["norm"], rows["optimizer"]
    assert gemm.ms == pytest.approx(400.0) and gemm.gbytes == pytest.approx(2.0) and gemm.gflop == pytest.approx(100.0)
    assert gemm.limit_ms == pytest.approx(500.0) and gemm.multiple == pytest.approx(0.8)  # 100 GFLOP at 200 GFLOP/s
    assert norm.limit_ms == pytest.approx(50.0) and norm.multiple == pytest.approx(0.4)   # 1 GB at 20 GB/s
    assert opt.limit_ms == pytest.approx(150.0)                                           # 3 GB at 20 GB/s
    assert rows["other"].ms == pytest.approx(500.0 - 400.0 - 20.0 - 30.0) and rows["other"].limit_ms is None
    step = rows["step"]
    assert step.ms == 500.0 and step.limit_ms == pytest.approx(700.0) and step.multiple == pytest.approx(500 / 700)
    assert step.gbytes == pytest.approx(6.0) and step.gflop == pytest.approx(102.0)
    table = bench.format_phase_table(list(rows.values()))
    assert len({len(line) for line in table}) == 1, "columns are not aligned"
    assert "0.80x" in next(x for x in table if x.startswith("| gemm"))


def test_the_gemm_phases_are_held_against_the_step_gemm_rate_of_the_runs_precision():
    r = fake_run("llmc train_gpt2 bf16", "llmc", "bf16", [500.0])
    r.phases = {"attention": bench.PhaseTotal(100.0, 0.0, 40e9, 1), "norm": bench.PhaseTotal(10.0, 0.0, 40e9, 1)}
    peaks = {"step onednn bf16": 400.0, "step blocked fp32": 100.0, "onednn bf16": 800.0}
    gemm = bench.phase_gemm_peak(peaks, "bf16")
    assert gemm == ("step onednn bf16", 400.0) and bench.phase_gemm_peak({"onednn fp32": 90.0}, "fp32") == ("onednn fp32", 90.0)
    rows = {x.name: x for x in bench.phase_rows(r, 500.0, None, 20.0, gemm[1])}
    assert rows["attention"].limit_ms == pytest.approx(100.0) and rows["norm"].limit_ms == pytest.approx(2000.0)
    assert "other" not in rows  # no step lines behind it: no covered time to take the phases from


def test_a_run_without_phase_lines_gets_no_phase_table(tinyshakespeare, capsys):
    r = bench.Run("llmc train_gpt2 fp32", [PYTHON, "-c", STEP_LINES], {}, "llmc", "fp32")
    bench.spawn_and_measure(r, 1, 60)
    assert r.phases == {} and bench.parse_phases(["phase gemm: 1 ms"]) == {}
    assert bench.phase_rows(r, 500.0, 20.0, 50.0, 200.0) == []
    rows, _ = bench.table_rows([r], FLOPS, TOKENS, {})
    bench.print_phase_tables([r], rows, {}, (20.0, 50.0))
    assert "phases of" not in capsys.readouterr().out


def test_the_best_of_the_triad_runs_sets_the_limits():
    # a virtual machine's bandwidth moved between 46 and 80 GB/s from run to run: the highest is the machine's
    runs = [(46.1, 548.9), (73.9, 541.5), (None, None), (70.2, 550.0)]
    assert bench.best_machine(runs) == (73.9, 550.0)
    assert bench.best_machine([(None, None)]) == (None, None)


def test_triad_prints_the_memory_bandwidth_and_the_simd_rate():
    text = "triad.c: 3 arrays of 256 MB\ntriad: 25.35 GB/s (2 threads)\nsimd: 260.78 GFLOP/s (2 threads)\n"
    assert bench.parse_machine(text) == (25.35, 260.78)
    assert bench.parse_machine("triad: 9.5 GB/s (1 threads)\n") == (9.5, None)
    make("build/triad")
    out = run([REPO / "build" / "triad", "-m", 8, "-r", 1], env={"OMP_NUM_THREADS": "2"}).stdout
    bandwidth, simd = bench.parse_machine(out)
    assert bandwidth and simd and bandwidth > 0 and simd > 0, out
    assert "(2 threads)" in out, out
    for bad in (["-m", "0"], ["-r", "x"], ["--nosuch"]):
        assert_one_error_line(run([REPO / "build" / "triad", *bad], check=False), alone=True)


def test_gemm_peak_times_only_the_gemms_named_by_k():
    make("build/gemm_peak")
    out = run([REPO / "build" / "gemm_peak", "-n", 32, "-r", 1, "-s", "16,16,64,1", "-k", "blocked:bf16,blocked:fp32"],
              env={"OMP_NUM_THREADS": "1"}).stdout
    assert set(bench.parse_peaks(out)) == {"blocked fp32", "blocked bf16", "step blocked fp32", "step blocked bf16"}, out
    out = run([REPO / "build" / "gemm_peak", "-n", 32, "-r", 1, "-k", "blocked:bf16"], env={"OMP_NUM_THREADS": "1"}).stdout
    assert set(bench.parse_peaks(out)) == {"blocked bf16"}, out
    for bad in ("", "blocked", "blocked:fp16", "blocked:bf16,", ",blocked:bf16", "nosuch:fp32"):
        proc = run([REPO / "build" / "gemm_peak", "-n", 32, "-k", bad], check=False)
        assert "is not a GEMM of this build" in assert_one_error_line(proc, alone=True), bad
    proc = run([REPO / "build" / "gemm_peak", "-n", 32, "-k"], check=False)
    assert_one_error_line(proc, alone=True)


def test_gemm_peak_times_another_familys_layer_given_as_its_linear_layers():
    make("build/gemm_peak")
    layer = "24x16,16x16,32x16,32x16,16x32"
    out = run([REPO / "build" / "gemm_peak", "-n", 32, "-r", 1, "-s", "16,16,64,1", "-l", layer],
              env={"OMP_NUM_THREADS": "1"}).stdout
    assert {"step blocked fp32", "step blocked bf16"} <= set(bench.parse_peaks(out)), out
    for bad in ("", "16x", "16x16,", "0x16", "16x16,16", "1x1,1x1,1x1,1x1,1x1,1x1,1x1,1x1,1x1"):
        assert_one_error_line(run([REPO / "build" / "gemm_peak", "-s", "16,16,64,1", "-l", bad], check=False), alone=True)


def test_step_gemm_shapes_follow_each_familys_block(tinyshakespeare, tmp_path, monkeypatch):
    tokenizer = tmp_path / "llama3_tokenizer.bin"
    tokenizer.write_bytes((20240801).to_bytes(4, "little") + (1).to_bytes(4, "little") + (514).to_bytes(4, "little"))
    files = bench.family_files(by_name("llama3"))
    files.tokenizer_file = tokenizer
    monkeypatch.setattr(bench, "family_files", lambda row: files if row.name == "llama3" else bench.FamilyFiles(row))
    llama = bench.parse_args(["--family", "llama3", "--model", "d6", "-B", "2", "-T", "16", "--torch", "", "--build", "0",
                              "--data", str(TS_TRAIN)])
    # d6: C=384, 6 query heads and 3 kv heads of 64, SwiGLU hidden 1024, V=514 (untied, unpadded)
    assert bench.step_shape(llama) == "32,384,514,6"
    assert bench.step_layers(llama) == "768x384,384x384,1024x384,1024x384,384x1024"
    nanochat = bench.parse_args(["--family", "nanochat", "--model", "d24", "--torch", ""])
    assert bench.step_shape(nanochat) == "256,1536,50304,24"  # C = 64 N, the vocabulary padded to 50304
    assert bench.step_layers(nanochat) == "4608x1536,1536x1536,6144x1536,1536x6144"
    gpt2 = bench.parse_args(["--model", "d24", "--torch", ""])
    assert bench.step_layers(gpt2) == "3072x1024,1024x1024,4096x1024,1024x4096"


def test_the_minimal_mode_runs_dev_torch_minimal_step_at_the_runs_shapes(tinyshakespeare, tmp_path, monkeypatch):
    assert bench.resolve_minimal("minimal", "flags\t: avx2 fma\n") == "minimal-fp32"
    assert bench.resolve_minimal("minimal", "flags\t: avx512f avx512_bf16\n") == "minimal-bf16"
    assert bench.resolve_minimal("fp32-flash", "") == "fp32-flash"
    assert bench.parse_torch_mode("minimal-bf16") == ("bf16", ["minimal"])
    for bad in ("minimal-fp16", "minimal-bf16-compile"):
        with pytest.raises(SystemExit, match="minimal"):
            bench.parse_torch_mode(bad)
    args = bench.parse_args(["--model", "d2", "-B", "2", "-T", "16", "--steps", "3", "--warmup", "2", "--threads", "1",
                             "--ours", "", "--torch", "minimal,minimal-fp32"])
    assert args.torch.split(",")[1] == "minimal-fp32" and args.torch.split(",")[0] in ("minimal-fp32", "minimal-bf16")
    run_ = bench.build_runs(args)[1]
    assert run_.name == "pytorch minimal-fp32" and run_.kind == "pytorch" and run_.precision == "fp32"
    assert run_.cmd == [PYTHON, str(REPO / "dev" / "torch_minimal_step.py"), "--family", "gpt2", "--model", "d2",
                        "-B", "2", "-T", "16", "--dtype", "fp32", "--warmup", "2", "--steps", "3", "--threads", "1"]
    tokenizer = tmp_path / "llama3_tokenizer.bin"
    tokenizer.write_bytes(bytes(8) + (514).to_bytes(4, "little"))
    files = bench.family_files(by_name("llama3"))
    files.tokenizer_file = tokenizer
    monkeypatch.setattr(bench, "family_files", lambda row: files if row.name == "llama3" else bench.FamilyFiles(row))
    llama = bench.build_runs(bench.parse_args(["--family", "llama3", "--ours", "", "--torch", "minimal-bf16",
                                               "--build", "0", "--data", str(TS_TRAIN)]))[0]
    assert llama.cmd[llama.cmd.index("--vocab") + 1] == "514" and llama.cmd[llama.cmd.index("--dtype") + 1] == "bf16"
    with pytest.raises(SystemExit):
        bench.parse_args(["--torch", "minimal-fp32", "--warmup", "0"])  # it compiles in the first step


def test_the_minimal_step_prints_the_step_lines_bench_reads():
    help_text = run([PYTHON, REPO / "dev" / "torch_minimal_step.py", "--help"]).stdout
    for flag in ("--family", "--model", "-B", "-T", "--dtype", "--warmup", "--steps", "--threads", "--vocab"):
        assert flag in help_text, flag
    r = bench.Run("pytorch minimal-fp32", [PYTHON, REPO / "dev" / "torch_minimal_step.py", "--model", "d1", "-B", "1",
                                           "-T", "8", "--warmup", "1", "--steps", "2", "--threads", "1", "--compile", "0"],
                  {}, "pytorch", "fp32")
    r.cmd = [str(c) for c in r.cmd]
    bench.spawn_and_measure(r, 1, 600)
    assert len(r.times_ms) == 2 and len(r.losses) == 3 and r.peak_rss_mb > 0
    assert all(10.0 < loss < 11.5 for loss in r.losses), r.losses  # ln(50304) = 10.83 at the start


@pytest.mark.parametrize("row", REGISTRY, ids=NAMES)
def test_the_minimal_step_builds_each_familys_own_model(row):
    """Each family's registry row builds its own model (train_<name>.py's), with --vocab where its dN takes one."""
    import math

    import torch

    torch.manual_seed(0)
    model, V = row.torch_minimal(1, 300)
    inner = getattr(model, "model", model)  # the references' models come wrapped as a module returning the loss
    assert type(inner).__module__ == row.module, (row.name, type(inner))
    assert (V == 300) == (row.depth_vocab is None), (row.name, V)
    idx = torch.randint(0, V, (1, 8))
    loss = model(idx, idx)
    assert loss.dim() == 0 and abs(loss.item() - math.log(V)) < 1.5, (row.name, loss.item(), math.log(V))


def test_the_peaks_measured_after_the_runs_are_printed_as_fractions_of_the_start_ones():
    args = bench.parse_args(["--torch", "", "--peak-size", "512", "--peak-reps", "5", "--threads", "2"])
    line = bench.peak_drift_line({"amx bf16": 1400.0, "openblas fp32": 200.0},
                                 {"amx bf16": 700.0, "openblas fp32": 210.0, "torch bf16": 900.0}, args)
    assert line.startswith("GEMM peak at end (512^3, 2 thread(s), median of 5), GFLOP/s: ")
    assert "amx bf16 700.0 (50 % of start)" in line and "openblas fp32 210.0 (105 % of start)" in line
    assert "torch bf16 900.0," in line and "torch bf16 900.0 (" not in line  # (no start value: no fraction)
    assert line.index("torch bf16") < line.index("amx bf16") < line.index("openblas fp32")  # fastest first
    assert bench.parse_args(["--torch", "", "--peak-at-end", "0"]).peak_at_end == 0


@pytest.mark.parametrize("bad", ["2", "-1", "yes", ""])
def test_a_bad_peak_at_end_is_refused_by_name(bad: str, capsys):
    with pytest.raises(SystemExit) as refused:
        bench.parse_args(["--torch", "", "--peak-at-end", bad])
    assert refused.value.code == 2
    assert "error: argument --peak-at-end" in capsys.readouterr().err


def test_torch_times_the_same_step_gemms_as_gemm_peak_and_bench_asks_it_to(monkeypatch):
    sys.path.insert(0, str(REPO / "dev"))
    import gemm_peak  # noqa: E402

    # GPT-2's block without -l, then the lm_head once: (tokens, out features, in features, times counted)
    assert gemm_peak.step_gemms(32, 64, 128, 2, gemm_peak.gpt2_layer(64)) == \
        [(32, 192, 64, 2), (32, 64, 64, 2), (32, 256, 64, 2), (32, 64, 256, 2), (32, 128, 64, 1)]
    out = run([PYTHON, REPO / "dev" / "gemm_peak.py", "-n", 32, "--reps", 1, "--threads", 1, "-s", "16,32,64,1",
               "-l", "48x32,32x32"]).stdout
    peaks = bench.parse_peaks(out)
    assert set(peaks) == {"torch fp32", "torch bf16", "step torch fp32", "step torch bf16"}, out
    assert all(v > 0 for v in peaks.values()), out
    for bad in (["-s", "16,32,64"], ["-s", "0,32,64,1"], ["-s", "16,32,64,1", "-l", "48x"], ["-l", "48x32"],
                ["-s", "16,32,64,1", "-l", ",".join(["8x8"] * 9)]):
        proc = run([PYTHON, REPO / "dev" / "gemm_peak.py", "-n", 32, *bad], check=False)
        assert proc.returncode == 2 and "error:" in proc.stderr, (bad, proc.stderr)
    # make bench gives torch's program the run's step shapes, as it gives build/gemm_peak
    asked: list[list[str]] = []
    monkeypatch.setattr(bench, "run_capture", lambda cmd, env, timeout: asked.append(cmd) or "")
    args = bench.parse_args(["--model", "d2", "-B", "2", "-T", "16", "--torch", "", "--ours", "", "--build", "0"])
    bench.measure_peaks(args, {})
    torch_cmd = next(cmd for cmd in asked if cmd[1].endswith("gemm_peak.py"))
    assert torch_cmd[torch_cmd.index("-s") + 1] == bench.step_shape(args)
    assert torch_cmd[torch_cmd.index("-l") + 1] == bench.step_layers(args)
    # and the best step rate of a precision, torch's included, is what a run and its GEMM phases are held against
    assert bench.phase_gemm_peak({"step amx bf16": 800.0, "step torch bf16": 1200.0}, "bf16") == ("step torch bf16", 1200.0)


def test_the_peak_programs_alternate_for_peak_rounds_and_each_rate_is_the_best_of_its_rounds(monkeypatch, capsys):
    rates = iter(["gemm torch bf16 700.0\ngemm-step torch bf16 600.0", "gemm torch bf16 1500.0\ngemm-step torch bf16 500.0"])
    asked: list[list[str]] = []
    monkeypatch.setattr(bench, "run_capture", lambda cmd, env, timeout: asked.append(cmd) or next(rates))
    args = bench.parse_args(["--model", "d2", "-B", "2", "-T", "16", "--torch", "", "--ours", "", "--build", "0",
                             "--peak-rounds", "2"])
    assert bench.measure_peaks(args, {}) == {"torch bf16": 1500.0, "step torch bf16": 600.0}
    assert len(asked) == 2 and "round 2/2" in capsys.readouterr().out
    for bad in ("0", "-1"):
        with pytest.raises(SystemExit):
            bench.parse_args(["--torch", "", "--peak-rounds", bad])
