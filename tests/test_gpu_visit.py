"""A visit to a lent GPU, rehearsed without one: dev/test_gpu.sh (make test-gpu) and dev/gpu_visit.sh
(make gpu-visit) in stand-in trees whose make only records its arguments and whose GPU programs are shell
scripts; the budget that keeps a visit inside its lease; make gpu-build's plan and make gpu-pack."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from conftest import REPO
from test_families import CUDA_FAMILIES

GPU_BIN = Path("build") / "gpu" / "bin"
CONFIGS = ["fp32", "bf16", "bf16-cudnn"]
TEST_PROGRAMS = ["test_gpt2cu", "test_llama3cu", "test_nanochatcu", "test_qwen3cu"]

# test-gpu's checks that need no GPU, then its GPU checks in the order they run (the kernels follow)
PREPARATION = ["build", "data", "reference tensors", "Muon reference", "Llama 3 reference", "nanochat reference",
               "Qwen3 reference"]
GPU_CHECKS = ["test_gpt2cu FP32", "test_gpt2cu BF16", "test_gpt2cu BF16 cuDNN", "test_llama3cu BF16 cuDNN GQA -r 1",
              "test_llama3cu FP32 d2", "test_llama3cu BF16 d2", "test_llama3cu BF16 cuDNN d2",
              "test_llama3cu FP32 GQA -r 2 -a 2", "test_llama3cu BF16 GQA -r 1", "test_gpt2cu FP32 Muon",
              "test_gpt2cu BF16 Muon", "test_llama3cu FP32 Muon d2", "test_llama3cu FP32 Muon GQA",
              "test_llama3cu BF16 Muon GQA", "test_gpt2cu FP32 -ge 1 -r 1 -a 2", "test_gpt2cu BF16 -ge 1 -r 2 -a 2",
              "test_nanochatcu FP32 GQA", "test_nanochatcu BF16 MHA -r 1", "test_nanochatcu BF16 cuDNN GQA",
              "test_nanochatcu FP32 Muon MQA", "test_nanochatcu BF16 Muon GQA", "test_qwen3cu FP32 d2",
              "test_qwen3cu BF16 cuDNN MHA", "test_qwen3cu BF16 cuDNN MQA", "test_qwen3cu FP32 Muon MQA"]
TWO_PROCESSES = ["test_gpt2cu BF16 2 processes ZeRO-1", "test_gpt2cu BF16 Muon 2 processes ZeRO-1",
                 "test_llama3cu BF16 2 processes ZeRO-1", "test_llama3cu BF16 Muon 2 processes ZeRO-1"]


def _script(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def stand_in(tmp_path: Path, programs: dict[str, str] | None = None,
             kernels: dict[str, int] | None = None) -> dict[str, str]:
    """A tree where dev/test_gpu.sh runs without a GPU: every built program a script that prints its table
    (`programs` replaces some bodies, by path under build/gpu/bin/), dev/cuda kernels exiting with the given
    status, a make that records its arguments in make_calls, and an nvidia-smi that lists one GPU."""
    for config in CONFIGS:
        for program in TEST_PROGRAMS:
            _script(tmp_path / GPU_BIN / config / program, f"echo '{program} {config} table' \"$@\"")
    for path, body in (programs or {}).items():
        _script(tmp_path / GPU_BIN / path, body)
    for kernel, status in (kernels or {"good_kernel": 0, "nccl_all_reduce": 0}).items():
        (tmp_path / "dev" / "cuda").mkdir(parents=True, exist_ok=True)
        (tmp_path / "dev" / "cuda" / f"{kernel}.cu").write_text("")
        _script(tmp_path / "dev" / "cuda" / kernel, f"echo '{kernel} table' \"$@\"\nexit {status}")
    _script(tmp_path / "fake_make", f"echo \"$@\" >> {tmp_path / 'make_calls'}")
    _script(tmp_path / "nvidia-smi", "echo 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'")
    env = {**os.environ, "MAKE": str(tmp_path / "fake_make"), "PY": "python3", "TEST_GPU_LOGS": "logs",
           "MAKEFLAGS": "", "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    env.pop("TIKTOKEN_CACHE_DIR", None)
    return env


def run_test_gpu(tmp_path: Path, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "dev" / "test_gpu.sh")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=timeout)


def summary_of(stdout: str) -> dict[str, str]:
    """{check: 'PASS (detail)' ...} from the summary; its last line (the counts) under the key ''."""
    lines = stdout.splitlines()
    summary = lines[lines.index("test-gpu: summary") + 1:]
    checks = {line.split("test-gpu: ", 1)[1].split(" ... ")[0]: line.split(" ... ", 1)[1] for line in summary[:-1]}
    return {**checks, "": summary[-1]}


def test_test_gpu_reports_one_line_per_check_and_a_summary(tmp_path: Path) -> None:
    """Every check gets one PASS/FAIL/SKIP line with its log; the failing kernel's output is shown, the
    summary counts them, and the exit status is 1. What needs no GPU is asked of make once each: the parallel
    build, the data, then the five reference sets; the GPU checks run the build/gpu/bin/ programs."""
    env = stand_in(tmp_path, kernels={"good_kernel": 0, "bad_kernel": 1, "nccl_all_reduce": 0})
    proc = run_test_gpu(tmp_path, env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = summary_of(proc.stdout)
    status = {name: line.split(" ")[0] for name, line in summary.items() if name}
    assert status == {**{name: "PASS" for name in PREPARATION + GPU_CHECKS}, **{name: "SKIP" for name in TWO_PROCESSES},
                      "dev/cuda/bad_kernel": "FAIL", "dev/cuda/good_kernel": "PASS", "dev/cuda/nccl_all_reduce": "SKIP"}
    assert summary[""].startswith("test-gpu: 33 passed, 1 failed, 5 skipped"), summary[""]
    assert summary["test_gpt2cu BF16 2 processes ZeRO-1"] == "SKIP (needs 2 GPUs, this machine has 1)"
    assert "    bad_kernel table" in proc.stdout.splitlines(), "the failing check's output is not shown"
    before_summary = proc.stdout.split("test-gpu: summary")[0].splitlines()
    ran = [line.split("test-gpu: ", 1)[1].split(" ... ")[0] for line in before_summary if line.startswith("test-gpu: ") and " ... " in line]
    assert [name for name in ran if name in GPU_CHECKS] == GPU_CHECKS, "the GPU checks ran out of their order"
    logs = tmp_path / "logs"
    assert (logs / "test_gpt2cu_FP32.log").read_text() == "test_gpt2cu fp32 table\n"
    assert (logs / "test_llama3cu_BF16_cuDNN_GQA_-r_1.log").read_text() == \
        "test_llama3cu bf16-cudnn table -e build/llama3/llama3_gqa.bin -s build/llama3/llama3_gqa_debug_state.bin -r 1\n"
    assert (logs / "test_gpt2cu_BF16_Muon.log").read_text().startswith("test_gpt2cu bf16 table -e build/muon_refs/gpt2_d2.bin")
    calls = sorted((tmp_path / "make_calls").read_text().splitlines())
    jobs = len(os.sched_getaffinity(0))  # every core, whatever OMP_NUM_THREADS says (nproc honours it)
    assert calls == sorted([f"--no-print-directory -k -j {jobs} gpu-build", "--no-print-directory data",
                            "--no-print-directory model", "--no-print-directory muon-refs",
                            "--no-print-directory llama3-debug-states",
                            "--no-print-directory nanochat-debug-states",
                            "--no-print-directory qwen3-debug-states"]), calls


def test_test_gpu_quick_runs_each_kernel_on_its_small_shape(tmp_path: Path) -> None:
    env = stand_in(tmp_path)
    proc = run_test_gpu(tmp_path, {**env, "TEST_GPU_QUICK": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "logs" / "dev_cuda_good_kernel.log").read_text() == "good_kernel table --quick\n"


def test_a_program_that_was_not_built_fails_its_checks_and_the_rest_go_on(tmp_path: Path) -> None:
    env = stand_in(tmp_path)
    (tmp_path / GPU_BIN / "bf16-cudnn" / "test_llama3cu").unlink()
    proc = run_test_gpu(tmp_path, env)
    assert proc.returncode == 1
    summary = summary_of(proc.stdout)
    for name in ["test_llama3cu BF16 cuDNN GQA -r 1", "test_llama3cu BF16 cuDNN d2"]:
        assert summary[name] == f"FAIL ({GPU_BIN}/bf16-cudnn/test_llama3cu was not built: see the build log)", summary[name]
    assert summary["test_llama3cu BF16 d2"].startswith("PASS") and summary["test_gpt2cu BF16 cuDNN"].startswith("PASS")
    assert summary[""].startswith("test-gpu: 31 passed, 2 failed"), summary[""]


def test_a_failed_reference_skips_the_checks_that_need_it(tmp_path: Path) -> None:
    env = stand_in(tmp_path)
    _script(tmp_path / "fake_make", f"echo \"$@\" >> {tmp_path / 'make_calls'}\n"
                                    "case \"$*\" in *llama3-debug-states*) echo 'no tokenizer'; exit 2;; esac")
    proc = run_test_gpu(tmp_path, env)
    summary = summary_of(proc.stdout)
    assert summary["Llama 3 reference"].startswith("FAIL")
    llama = [name for name in GPU_CHECKS + TWO_PROCESSES if name.startswith("test_llama3cu")]
    assert all(summary[name] == "SKIP (no reference files)" for name in llama), summary
    assert summary["test_gpt2cu BF16 cuDNN"].startswith("PASS")


def test_the_budget_stops_a_running_check_and_skips_the_later_ones(tmp_path: Path) -> None:
    """TEST_GPU_BUDGET: the check running when it ends is stopped (a FAIL that says so), and no check starts
    after it (SKIP: out of time); the summary still comes."""
    env = stand_in(tmp_path, programs={"bf16/test_gpt2cu": "echo started\nsleep 60\necho never"})
    proc = run_test_gpu(tmp_path, {**env, "TEST_GPU_BUDGET": "3"}, timeout=40)
    summary = summary_of(proc.stdout)
    assert proc.returncode == 1
    assert summary["test_gpt2cu FP32"].startswith("PASS")
    assert summary["test_gpt2cu BF16"].startswith("FAIL (stopped at the end of TEST_GPU_BUDGET=3 s"), summary["test_gpt2cu BF16"]
    assert (tmp_path / "logs" / "test_gpt2cu_BF16.log").read_text() == "started\n"
    later = GPU_CHECKS[GPU_CHECKS.index("test_gpt2cu BF16 cuDNN"):] + ["dev/cuda/good_kernel"]
    assert all(summary[name] == "SKIP (out of time: TEST_GPU_BUDGET=3 s)" for name in later), summary


@pytest.mark.parametrize("budget", ["ten", "-5", "1.5"])
def test_test_gpu_refuses_a_bad_budget_in_one_line(tmp_path: Path, budget: str) -> None:
    env = stand_in(tmp_path)
    proc = run_test_gpu(tmp_path, {**env, "TEST_GPU_BUDGET": budget})
    assert proc.returncode == 2 and proc.stderr == ""
    assert proc.stdout == f"error: TEST_GPU_BUDGET={budget} must be a whole number of seconds (0: no limit)\n"
    assert not (tmp_path / "make_calls").exists()


# ---------------------------------------------------------------------------- make gpu-visit


def visit_stand_in(tmp_path: Path, bench_body: str = "") -> dict[str, str]:
    """The stand-in tree of test_gpu.sh plus the real dev/test_gpu.sh and a dev/bench_gpu.py that records its
    arguments and prints a table."""
    env = stand_in(tmp_path)
    for script in ["test_gpu.sh", "make_dry_run.sh"]:
        (tmp_path / "dev" / script).write_text((REPO / "dev" / script).read_text())
    (tmp_path / "dev" / "bench_gpu.py").write_text(
        "import sys\n"
        f"open({str(tmp_path / 'bench_args')!r}, 'w').write(' '.join(sys.argv[1:]))\n"
        f"{bench_body}\n"
        "print('bench-gpu: [1/1] train_gpt2cu ...')\nprint()\nprint('GPU: stand-in; model d12')\n"
        "print('| program | ms/step |')\n")
    (tmp_path / ".gpu").mkdir()
    (tmp_path / ".gpu" / "commit.txt").write_text("abc1234\n")
    return {**env, "PY": "python3", "GPU_VISIT_OUT": str(tmp_path / "out")}


def run_visit(tmp_path: Path, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "dev" / "gpu_visit.sh")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_gpu_visit_brings_back_four_files_and_ends_with_the_summary_and_the_table(tmp_path: Path) -> None:
    """What the device call's $OUT brings back (at most 8 files, 2 folders deep): facts.txt (the machine and the
    commit), test-gpu.txt, bench-gpu.txt and logs.tar.gz with every check's log; the output ends with the
    test summary and the bench table, and bench-gpu gets what is left of the budget, with no build of its own."""
    env = visit_stand_in(tmp_path)
    proc = run_visit(tmp_path, {**env, "GPU_VISIT_BUDGET": "300"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["bench-gpu.txt", "facts.txt", "logs.tar.gz", "test-gpu.txt"]
    facts = (out / "facts.txt").read_text()
    assert "commit: abc1234" in facts and "budget: 300 s (test-gpu 165 s)" in facts, facts
    assert "--- what make finds" in facts and "--no-print-directory cuda-info" in (tmp_path / "make_calls").read_text()
    assert "test-gpu: budget 165 s" in (out / "test-gpu.txt").read_text()
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = tar.getnames()
    assert "gpu-visit/test-gpu/test_gpt2cu_FP32.log" in names and "gpu-visit/test-gpu/dev_cuda_good_kernel.log" in names
    bench_args = (tmp_path / "bench_args").read_text().split()
    assert bench_args[:2] == ["--build", "0"] and bench_args[bench_args.index("--cudnn") + 1] == "1,0"
    budget = int(bench_args[bench_args.index("--budget") + 1])
    assert 200 < budget <= 300 - 10, bench_args
    tail = proc.stdout.splitlines()
    assert tail[-1] == "| program | ms/step |" and tail[-2] == "GPU: stand-in; model d12"
    last_summary = len(tail) - 1 - tail[::-1].index("test-gpu: summary")
    assert tail[last_summary - 1].startswith("gpu-visit: ") and "in " + str(tmp_path / "out") in tail[last_summary - 1]
    assert "test-gpu: 33 passed, 0 failed, 5 skipped" in proc.stdout


def test_gpu_visit_exit_status_is_test_gpus_and_no_time_left_means_no_bench(tmp_path: Path) -> None:
    env = visit_stand_in(tmp_path)
    _script(tmp_path / GPU_BIN / "fp32" / "test_gpt2cu", "echo slow\nsleep 70")
    proc = run_visit(tmp_path, {**env, "GPU_VISIT_BUDGET": "4", "GPU_VISIT_TEST_SHARE": "100"}, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert not (tmp_path / "bench_args").exists(), "bench-gpu ran with no time left"
    assert (tmp_path / "out" / "bench-gpu.txt").read_text().startswith("bench-gpu: not run: ")
    assert "test_gpt2cu FP32 ... FAIL (stopped at the end of TEST_GPU_BUDGET=4 s" in proc.stdout


def test_a_budget_too_small_for_any_check_skips_them_all(tmp_path: Path) -> None:
    """GPU_VISIT_BUDGET=1: test-gpu gets 1 s (not 0, which would mean no limit), so the slow build uses it up
    and every later check is SKIP; bench-gpu does not run."""
    env = visit_stand_in(tmp_path)
    _script(tmp_path / "fake_make", f"echo \"$@\" >> {tmp_path / 'make_calls'}\n"
                                    "case \"$*\" in *gpu-build*) sleep 3;; esac")
    proc = run_visit(tmp_path, {**env, "GPU_VISIT_BUDGET": "1"}, timeout=60)
    assert "test-gpu: budget 1 s" in proc.stdout
    summary = summary_of((tmp_path / "out" / "test-gpu.txt").read_text())
    assert all(summary[name] == "SKIP (out of time: TEST_GPU_BUDGET=1 s)" for name in GPU_CHECKS), summary
    assert not (tmp_path / "bench_args").exists()


@pytest.mark.parametrize("variables", [{"GPU_VISIT_BUDGET": "ten"}, {"GPU_VISIT_BUDGET": "0"},
                                       {"GPU_VISIT_TEST_SHARE": "150"}, {"GPU_VISIT_TEST_SHARE": "0"}])
def test_gpu_visit_refuses_a_bad_budget_in_one_line(tmp_path: Path, variables: dict[str, str]) -> None:
    env = visit_stand_in(tmp_path)
    proc = run_visit(tmp_path, {**env, **variables})
    assert proc.returncode == 2
    assert proc.stdout.count("\n") == 1 and proc.stdout.startswith("error: GPU_VISIT_BUDGET="), proc.stdout
    assert not (tmp_path / "make_calls").exists()


# ---------------------------------------------------------------------------- the make side


def _make(*args: str, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_gpu_build_builds_each_configuration_under_its_own_name() -> None:
    """make -n gpu-build: every family's test_<name>cu once per configuration, each into build/gpu/bin/<config>/
    with that configuration's defines (FP32; BF16; BF16 with cuDNN attention, linked with its object and
    libcudnn), beside the four trainers make bench-gpu times and the dev/cuda kernels, so that make -j runs
    them side by side instead of rebuilding one name again and again."""
    proc = _make("-n", "-B", "gpu-build", "GPU_COMPUTE_CAPABILITY=90")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if "nvcc" in line and " -o " in line]
    for config, defines in [("fp32", ["-DENABLE_FP32"]), ("bf16", ["-DENABLE_BF16"]),
                            ("bf16-cudnn", ["-DENABLE_BF16", "-DENABLE_CUDNN"])]:
        for program, source in [("test_gpt2cu", "test_gpt2.cu"), ("test_llama3cu", "test_llama3.cu"),
                                ("test_nanochatcu", "test_nanochat.cu"), ("test_qwen3cu", "test_qwen3.cu")]:
            line = next(line for line in lines if line.endswith(f"-o {GPU_BIN}/{config}/{program}"))
            words = line.split()
            assert source in words and all(d in words for d in defines), line
            assert ("-DENABLE_CUDNN" in words) == (config == "bf16-cudnn"), line
            assert ("build/cudnn_att.o" in words and "-l:libcudnn.so.9" in words) == (config == "bf16-cudnn"), line
            assert "arch=compute_90,code=sm_90" in words, line
    for trainer in ["train_gpt2cu", "train_gpt2cu_cudnn", "train_llama3cu", "train_llama3cu_cudnn"]:
        assert any(line.endswith(f"-o {trainer}") for line in lines), trainer
    assert any("-C dev/cuda" in line for line in proc.stdout.splitlines())


def test_make_n_gpu_visit_prints_the_plan_and_runs_nothing(tmp_path: Path) -> None:
    """make -n gpu-visit: the budget split, test-gpu's plan (every check named, kernels on --quick) and
    bench-gpu's (its runs with the rest of the budget); nothing is built, run or written to GPU_VISIT_OUT."""
    import sys
    out = tmp_path / "out"
    proc = _make("-n", "gpu-visit", f"PY={sys.executable}", f"GPU_VISIT_OUT={out}", "GPU_VISIT_BUDGET=400",
                 f"VENV={tmp_path / 'novenv'}", "GPU_COMPUTE_CAPABILITY=")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert "gpu-visit: dry run: budget 400 s, test-gpu 220 s of it, the rest for bench-gpu" in proc.stdout
    planned = [line.split("test-gpu: ", 1)[1].split(" ... ", 1)[0] for line in proc.stdout.splitlines()
               if line.startswith("test-gpu: ") and " ... would run: " in line]
    assert planned[:len(PREPARATION) + len(GPU_CHECKS)] == PREPARATION + GPU_CHECKS, planned
    assert "test-gpu: dev/cuda/rope ... would run: ./dev/cuda/rope --quick" in proc.stdout
    # three runs a family with a GPU trainer (bench_gpu.py's default --ours is the registry's GPU column)
    runs = 3 * len(CUDA_FAMILIES)
    assert "bench-gpu: dry run, nothing built or run" in proc.stdout and f"bench-gpu: {runs} runs planned" in proc.stdout
    assert not out.exists()


def test_gpu_pack_fills_the_carry_folder(tmp_path: Path) -> None:
    """make gpu-pack GPU_CACHE=<dir>: the tinyshakespeare text, tiktoken's GPT-2 files, the cuDNN frontend
    headers and the commit, which is what make gpu-visit finds there."""
    cache = tmp_path / "carry"
    tiktoken = tmp_path / "tiktoken"
    tiktoken.mkdir()
    (tiktoken / "6d1cbeee0f20b3d9449abfede4726ed8212e3aee").write_text("stand-in")
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(tiktoken)}
    proc = _make("gpu-pack", f"GPU_CACHE={cache}", env=env, timeout=120)
    text = REPO / "dev" / "data" / "tinyshakespeare" / "tiny_shakespeare.txt"
    if not text.exists():
        assert proc.returncode != 0 and "error: no tinyshakespeare text" in proc.stdout
        return
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (cache / "data" / "tinyshakespeare" / "input.txt").read_bytes() == text.read_bytes()
    assert (cache / "tiktoken_cache" / "6d1cbeee0f20b3d9449abfede4726ed8212e3aee").read_text() == "stand-in"
    assert (cache / "cudnn_frontend" / "include" / "cudnn_frontend.h").exists()
    assert len((cache / "commit.txt").read_text().split()[0]) >= 7
    assert "make gpu-visit PY=python3 GPU_VISIT_OUT=$OUT" in proc.stdout
