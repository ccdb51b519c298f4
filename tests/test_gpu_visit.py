"""A visit to a lent GPU, rehearsed without one: dev/test_gpu.sh (make test-gpu) and dev/gpu_visit.sh
(make gpu-visit) in stand-in trees whose make only records its arguments and whose GPU programs are shell
scripts; the budget that keeps a visit inside its lease; make gpu-build's plan and make gpu-pack."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, make, repo_lock, run
from pyllmc.token_shards import is_chat_shard
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
# chat fine-tuning's checks, on what make gpu-pack wrote into .gpu/chat/ (dev/gpu_visit_chat.py)
CHAT_CHECKS = [f"{program} {precision} masked" for program in TEST_PROGRAMS for precision in ("FP32", "BF16")] + [
    "train_nanochatcu FP32 chat shard"]
GPU_CHECKS += CHAT_CHECKS
TWO_PROCESSES = ["test_gpt2cu BF16 2 processes ZeRO-1", "test_gpt2cu BF16 Muon 2 processes ZeRO-1",
                 "test_llama3cu BF16 2 processes ZeRO-1", "test_llama3cu BF16 Muon 2 processes ZeRO-1"]


def _script(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


# what ./train_nanochat prints on the packed chat shards, as the stand-in's .gpu/chat/ records it: step 2 skipped
CPU_CHAT_LOG = """train: chat shards: a step's loss is the mean over its supervised (mask 1) positions
step 0: val loss 5.543210
step 1/4 | loss 5.512345 | norm 1.2345 | lr 1.00e-03 | 2.00 ms
step 2/4 | no supervised position in this step's batches: nothing trained
step 2: val loss 5.501234
step 3/4 | loss 5.498765 | norm 1.1111 | lr 1.00e-03 | 2.00 ms
step 4/4 | loss 5.476543 | norm 1.0987 | lr 1.00e-03 | 2.00 ms
step 4: val loss 5.465432
"""


def stand_in(tmp_path: Path, programs: dict[str, str] | None = None,
             kernels: dict[str, int] | None = None, chat: bool = True) -> dict[str, str]:
    """A tree where dev/test_gpu.sh runs without a GPU: every built program a script that prints its table
    (`programs` replaces some bodies, by path under build/gpu/bin/), dev/cuda kernels exiting with the given
    status, a make that records its arguments in make_calls, and an nvidia-smi that lists one GPU; with `chat`,
    make gpu-pack's .gpu/chat/ (CPU_CHAT_LOG), the real dev/gpu_visit_chat.py and an FP32 train_nanochatcu that
    prints the CPU trainer's log again."""
    for config in CONFIGS:
        for program in TEST_PROGRAMS:
            _script(tmp_path / GPU_BIN / config / program, f"echo '{program} {config} table' \"$@\"")
    (tmp_path / "dev").mkdir(parents=True, exist_ok=True)
    (tmp_path / "dev" / "gpu_visit_chat.py").write_text((REPO / "dev" / "gpu_visit_chat.py").read_text())
    if chat:
        (tmp_path / ".gpu" / "chat").mkdir(parents=True)
        (tmp_path / ".gpu" / "chat" / "train_nanochat.txt").write_text(CPU_CHAT_LOG)
    _script(tmp_path / GPU_BIN / "fp32" / "train_nanochatcu", f"cat {tmp_path / '.gpu' / 'chat' / 'train_nanochat.txt'}")
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
    assert summary[""].startswith("test-gpu: 42 passed, 1 failed, 5 skipped"), summary[""]
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
    assert (logs / "test_qwen3cu_BF16_masked.log").read_text() == \
        "test_qwen3cu bf16 table -e .gpu/chat/qwen3.bin -s .gpu/chat/qwen3_masked_debug_state.bin\n"
    chat = (logs / "train_nanochatcu_FP32_chat_shard.log").read_text()
    assert "chat shard: train_nanochatcu PASS against ./train_nanochat" in chat, chat
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
    assert summary[""].startswith("test-gpu: 40 passed, 2 failed"), summary[""]


def test_a_failed_reference_skips_the_checks_that_need_it(tmp_path: Path) -> None:
    env = stand_in(tmp_path)
    _script(tmp_path / "fake_make", f"echo \"$@\" >> {tmp_path / 'make_calls'}\n"
                                    "case \"$*\" in *llama3-debug-states*) echo 'no tokenizer'; exit 2;; esac")
    proc = run_test_gpu(tmp_path, env)
    summary = summary_of(proc.stdout)
    assert summary["Llama 3 reference"].startswith("FAIL")
    llama = [name for name in GPU_CHECKS + TWO_PROCESSES if name.startswith("test_llama3cu") and name not in CHAT_CHECKS]
    assert all(summary[name] == "SKIP (no reference files)" for name in llama), summary
    # the masked state comes from make gpu-pack's .gpu/chat/, not from the references made there
    assert summary["test_llama3cu FP32 masked"].startswith("PASS")
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


def test_without_the_packed_chat_folder_the_chat_checks_are_skipped_and_say_why(tmp_path: Path) -> None:
    env = stand_in(tmp_path, chat=False)
    proc = run_test_gpu(tmp_path, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = summary_of(proc.stdout)
    why = "SKIP (no .gpu/chat/train_nanochat.txt: make gpu-pack writes .gpu/chat/ here)"
    assert all(summary[name] == why for name in CHAT_CHECKS), summary
    assert summary["test_qwen3cu FP32 Muon MQA"].startswith("PASS")


def test_the_chat_check_fails_when_the_trainer_is_not_built_and_the_rest_go_on(tmp_path: Path) -> None:
    env = stand_in(tmp_path)
    (tmp_path / GPU_BIN / "fp32" / "train_nanochatcu").unlink()
    proc = run_test_gpu(tmp_path, env)
    assert proc.returncode == 1
    summary = summary_of(proc.stdout)
    assert summary["train_nanochatcu FP32 chat shard"] == \
        f"FAIL ({GPU_BIN}/fp32/train_nanochatcu was not built: see the build log)"
    assert summary["test_qwen3cu BF16 masked"].startswith("PASS") and summary["dev/cuda/good_kernel"].startswith("PASS")


# the GPU trainer's output in place of the CPU's: the chat check's verdict on it (dev/gpu_visit_chat.py check)
GPU_RUNS = {
    "the same losses": (CPU_CHAT_LOG, 0),
    "float32 noise": (CPU_CHAT_LOG.replace("loss 5.498765", "loss 5.498790").replace("val loss 5.465432", "val loss 5.465401"), 0),
    "a step loss off by 1e-3": (CPU_CHAT_LOG.replace("loss 5.476543", "loss 5.477543"), 1),
    "a val loss off by 1e-3": (CPU_CHAT_LOG.replace("val loss 5.501234", "val loss 5.502234"), 1),
    "another step skipped": (CPU_CHAT_LOG.replace("step 3/4 | loss 5.498765 | norm 1.1111 | lr 1.00e-03 | 2.00 ms",
                                                   "step 3/4 | no supervised position in this step's batches: nothing trained"), 1),
    "no chat line": (CPU_CHAT_LOG.split("\n", 1)[1], 1),
}


@pytest.mark.parametrize("case", list(GPU_RUNS))
def test_the_chat_check_passes_the_cpu_losses_within_float32_noise_and_fails_the_rest(tmp_path: Path, case: str) -> None:
    """train_nanochatcu's step and val losses against ./train_nanochat's from make gpu-pack: within 5e-5 of the first
    CPU loss and the same skipped step, or FAIL with both side by side."""
    pack = tmp_path / "chat"
    pack.mkdir()
    (pack / "train_nanochat.txt").write_text(CPU_CHAT_LOG)
    gpu_log, status = GPU_RUNS[case]
    (tmp_path / "gpu.txt").write_text(gpu_log)
    _script(tmp_path / "train_nanochatcu", f"echo \"$@\" > {tmp_path / 'args'}\ncat {tmp_path / 'gpu.txt'}")
    proc = subprocess.run(["python3", str(REPO / "dev" / "gpu_visit_chat.py"), "check", "--pack", str(pack), "--trainer",
                           str(tmp_path / "train_nanochatcu")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == status, proc.stdout + proc.stderr
    assert (tmp_path / "args").read_text().split()[:2] == ["-e", str(pack / "nanochat.bin")]
    if case in ("the same losses", "float32 noise", "a step loss off by 1e-3"):
        rows = [line for line in proc.stdout.splitlines() if line.startswith("| step 4 ")]
        assert len(rows) == 1 and "5.476543" in rows[0] and rows[0].endswith("| ok   |" if status == 0 else "| FAIL |"), proc.stdout
    verdict = "PASS" if status == 0 else "FAIL"
    assert f"chat shard: train_nanochatcu {verdict} against ./train_nanochat" in proc.stdout or \
        (status == 1 and proc.stdout.splitlines()[-1].startswith("FAIL: ")), proc.stdout


def test_the_chat_check_fails_a_trainer_that_exits_non_zero_and_shows_why(tmp_path: Path) -> None:
    pack = tmp_path / "chat"
    pack.mkdir()
    (pack / "train_nanochat.txt").write_text(CPU_CHAT_LOG)
    _script(tmp_path / "train_nanochatcu", "echo 'error: no usable NVIDIA GPU on this machine'\nexit 1")
    proc = subprocess.run(["python3", str(REPO / "dev" / "gpu_visit_chat.py"), "check", "--pack", str(pack), "--trainer",
                           str(tmp_path / "train_nanochatcu")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-2:] == ["error: no usable NVIDIA GPU on this machine",
                                            f"FAIL: {tmp_path / 'train_nanochatcu'} exited 1: see its output above"]


def test_the_chat_check_without_the_pack_is_one_error_line(tmp_path: Path) -> None:
    proc = subprocess.run(["python3", str(REPO / "dev" / "gpu_visit_chat.py"), "check", "--pack", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr == ""
    assert proc.stdout == f"error: {tmp_path / 'none' / 'train_nanochat.txt'} is missing: run make gpu-pack where the " \
                          "CPU trainer is, and carry its folder\n"


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
    (tmp_path / ".gpu").mkdir(exist_ok=True)
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
    assert "test-gpu: 42 passed, 0 failed, 5 skipped" in proc.stdout


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
    not_skipped = {name: summary.get(name) for name in GPU_CHECKS
                   if summary.get(name) != "SKIP (out of time: TEST_GPU_BUDGET=1 s)"}
    assert not not_skipped, not_skipped
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
    # the chat check's trainer (dev/test_gpu.sh runs it on .gpu/chat/): FP32, from train_nanochat.cu
    words = next(line for line in lines if line.endswith(f"-o {GPU_BIN}/fp32/train_nanochatcu")).split()
    assert "train_nanochat.cu" in words and "-DENABLE_FP32" in words and "-DENABLE_BF16" not in words, words
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
    assert ("test-gpu: test_llama3cu BF16 masked ... would run: ./build/gpu/bin/bf16/test_llama3cu "
            "-e .gpu/chat/llama3.bin -s .gpu/chat/llama3_masked_debug_state.bin") in proc.stdout
    assert (f"test-gpu: train_nanochatcu FP32 chat shard ... would run: {sys.executable} dev/gpu_visit_chat.py check "
            "--pack .gpu/chat --trainer ./build/gpu/bin/fp32/train_nanochatcu") in proc.stdout
    # three runs a family with a GPU trainer (bench_gpu.py's default --ours is the registry's GPU column)
    runs = 3 * len(CUDA_FAMILIES)
    assert "bench-gpu: dry run, nothing built or run" in proc.stdout and f"bench-gpu: {runs} runs planned" in proc.stdout
    assert not out.exists()


def test_the_muon_reference_runs_the_python_py_names_on_the_path() -> None:
    """make gpu-visit PY=python3: the Muon reference is written from inside build/muon_refs/ by that python3, not by a
    python3 in the checkout (which there is not); a PY with a slash is made absolute for the cd."""
    for py, want in [("python3", "python3"), (".venv/bin/python", str(REPO / ".venv" / "bin" / "python"))]:
        proc = _make("-n", "-B", "build/muon_refs/gpt2_d2_muon_debug_state.bin", f"PY={py}")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        line = next(line for line in proc.stdout.splitlines() if line.startswith("cd build/muon_refs && "))
        assert line.split()[3] == want, line


def test_gpu_pack_fills_the_carry_folder(tmp_path: Path) -> None:
    """make gpu-pack GPU_CACHE=<dir>: the tinyshakespeare text, tiktoken's GPT-2 files, the cuDNN frontend
    headers and the commit, which is what make gpu-visit finds there; and chat/ (dev/gpu_visit_chat.py pack): every
    family's small model and masked debug state, the chat shards and ./train_nanochat's losses on them, which
    dev/test_gpu.sh's masked and chat checks read. The whole folder stays far inside the device call's 64 MiB carry."""
    cache = tmp_path / "carry"
    tiktoken = tmp_path / "tiktoken"
    tiktoken.mkdir()
    if os.environ.get("TIKTOKEN_CACHE_DIR"):  # the real files too: make may write a reference with GPT-2's tokenizer
        shutil.copytree(os.environ["TIKTOKEN_CACHE_DIR"], tiktoken, dirs_exist_ok=True)
    (tiktoken / "stand-in").write_text("stand-in")
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(tiktoken)}
    with repo_lock("make"):  # it builds the reference sets and the CPU trainer it reads, when they are missing
        proc = _make("gpu-pack", f"GPU_CACHE={cache}", env=env, timeout=600)
    text = REPO / "dev" / "data" / "tinyshakespeare" / "tiny_shakespeare.txt"
    if not text.exists():
        assert proc.returncode != 0 and "error: no tinyshakespeare text" in proc.stdout
        return
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (cache / "data" / "tinyshakespeare" / "input.txt").read_bytes() == text.read_bytes()
    assert (cache / "tiktoken_cache" / "stand-in").read_text() == "stand-in"
    assert (cache / "cudnn_frontend" / "include" / "cudnn_frontend.h").exists()
    assert len((cache / "commit.txt").read_text().split()[0]) >= 7
    assert "make gpu-visit PY=python3 GPU_VISIT_OUT=$OUT" in proc.stdout
    chat = cache / "chat"
    for family in CUDA_FAMILIES:  # the masked states test_gpu.sh's run_test lines name, passed by the CPU test program
        state = chat / f"{family}_masked_debug_state.bin"
        header = np.fromfile(state, dtype="<i4", count=256)
        assert header[18] == 1 and list(header[2:5]) == [4, 64, 4], (family, header[:20])
        y = np.fromfile(state, dtype="<i4", count=4 * 64, offset=1024 + 4 * 4 * 64)
        assert int((y == -1).sum()) == 4 * 64 // 2, family
        make(f"test_{family}")
        checked = run([REPO / f"test_{family}", "-e", chat / f"{family}.bin", "-s", state], env={"OMP_NUM_THREADS": "2"})
        assert "masked: 128 of 256 positions supervised" in checked.stdout, checked.stdout
    assert is_chat_shard(chat / "chat_train.bin") and is_chat_shard(chat / "chat_val.bin")
    cpu = (chat / "train_nanochat.txt").read_text()
    assert "train: chat shards: a step's loss is the mean over its supervised (mask 1) positions" in cpu
    assert "step 2/4 | no supervised position in this step's batches: nothing trained" in cpu
    assert len(re.findall(r"^step \d/4 \| loss ", cpu, re.M)) == 3 and len(re.findall(r"^step \d: val loss", cpu, re.M)) == 3
    size = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
    assert size < 32 << 20, f"{size} bytes to carry"
