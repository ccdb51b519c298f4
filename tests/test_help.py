"""--help of every script and program: exit 0, a usage text on stdout listing the main flags, nothing on stderr.
The trainers (./train_gpt2, ./train_llama3, ./train_nanochat, the GPU trainers through dev/cuda_cpu, ./train_gpt2cl, pyllmc.train)
share one argument table (llmc/args.h): each one's help lists exactly its backend's flags, the parser takes
each of them, and another backend's flag is refused in one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import PYTHON, REPO, make, require_system_packages, run
from pyllmc.families import NAMES
from test_families import CUDA_FAMILIES

# program (a script under the repo, or a make target) -> flags (and default files) its help must list
HELP_FLAGS: dict[str, list[str]] = {
    "dev/data/chat.py": ["--input", "--render", "--data_dir", "--seq_len", "--model_desc", "--family", "--val",
                         "--val_fraction"],
    "dev/data/chat_tasks.py": ["--task", "--n_train", "--n_val", "--seed", "--data_dir", "--corpus"],
    "dev/data/fineweb.py": ["--type", "--version", "--shard_size", "--data_files", "--model_desc"],
    "dev/data/hellaswag.py": ["--data_dir", "--split"],
    "dev/data/tinyshakespeare.py": ["--data_dir", "--model_desc", "--tokenizer"],
    "dev/data/tinystories.py": ["--data_dir", "--num_proc"],
    "dev/data/make_test_tokenizer.py": ["--corpus", "--out_dir", "--vocab_size", "--chat"],
    "dev/eval/export_gguf.py": ["--input", "--output", "--dtype", "--tokenizer", "--verify"],
    "dev/eval/export_hf.py": ["--input", "--output"],
    "dev/eval/generate_text.py": ["--tokenizer", "--prompt", "--generate"],
    "dev/eval/chat_eval.py": ["--model", "--input", "--tokenizer", "--max_tokens", "--limit", "--generate"],
    "dev/bench_attention.py": ["-T", "--rounds", "--threads", "--build"],
    "dev/chat_demo.py": ["--out", "--model", "--task", "--base_steps", "--sft_steps", "--n_val", "--precision"],
    "dev/gpu_visit_chat.py": ["pack", "check"],
    "dev/compare_families.py": ["--model", "--steps", "--val_every", "--muon_lr", "--out"],
    "dev/nanochat_refs.py": ["--out_dir", "--no_d2"],
    "dev/torch_minimal_step.py": ["--family", "--model", "--dtype", "--warmup", "--steps", "--threads"],
    "dev/time_switches.py": ["--trainer", "--kernel", "--data", "--rounds", "--warmup", "--steps", "--json"],
    "dev/vislog.py": ["--ema", "-o"],
    "dev/write_bpe.py": ["-o", "--unicode-tables"],
    "encode": ["-d", "-b", "gpt2_bpe.bin"],
    "generate": ["--top-k", "-i", "--chat", "--system", "--jsonl"],
    "test_nanochat": ["-e", "-s", "-p", "nanochat_d2.bin"],
    "train_llama3.py": ["--model", "--tokenizer", "--optimizer", "--zero_stage", "--write_tensors"],
    "train_nanochat.py": ["--model", "--tokenizer", "--optimizer", "--muon_lr", "--write_tensors", "--debug_steps"],
}


@pytest.mark.parametrize("program", sorted(HELP_FLAGS))
def test_help_exits_zero_and_lists_the_main_flags(program: str, tmp_path: Path) -> None:
    if program.endswith(".py"):
        cmd: list[object] = [PYTHON, REPO / program, "--help"]
    else:
        make(program)
        cmd = [REPO / program, "--help"]
    proc = run(cmd, cwd=tmp_path, timeout=300)
    assert proc.stdout.startswith("usage: ") and proc.stderr == "", proc.stdout + proc.stderr
    missing = [f for f in HELP_FLAGS[program] if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", proc.stdout)]
    assert not missing, f"{program} --help does not list {missing}:\n{proc.stdout}"


# ---------------------------------------------------------------------------- the trainers' flags, per backend
# Every trainer parses llmc/args.h's one table; each row says which backends take its flag. Written out here, so
# that a row moving to another backend is a visible change: each program's --help lists exactly its backend's
# flags, and every other backend's flag is refused in one line that names the programs taking it.

COMMON_FLAGS = ["-i", "-j", "-e", "-o", "-b", "-t", "-d", "-x", "-k", "-l", "-u", "-q", "-c", "-v", "-m", "-s", "-g",
                "-n", "-a", "-sh", "-sl", "-sg"]
STATE_FLAGS = ["-nk", "-nm", "-y", "-h", "-he"]  # the trainers in C keep a training state (and HellaSwag)
MUON_FLAGS = ["-op", "-ol", "-om", "-on", "-os", "-oa"]
BACKEND_FLAGS: dict[str, set[str]] = {
    "cpu": {*COMMON_FLAGS, *STATE_FLAGS, *MUON_FLAGS, "-z", "-p"},
    "gpu": {*COMMON_FLAGS, *STATE_FLAGS, *MUON_FLAGS, "-z", "-r", "-ge", "-w", "-pn", "-pr", "-pg", "-pi", "-ps", "-pf"},
    "opencl": {*COMMON_FLAGS, *STATE_FLAGS, "-p", "-op", "-cp", "-cd", "-cl"},
}
# the trainers llmc/args.h names, in the registry's order (llmc/families.h)
BACKEND_NAMES = {"cpu": f"the CPU trainers ({', '.join(f'./train_{name}' for name in NAMES)})",
                 "gpu": f"the GPU trainers ({', '.join(f'./train_{name}cu' for name in NAMES if name in CUDA_FAMILIES)})",
                 "opencl": "the OpenCL trainer (./train_gpt2cl)"}
ALL_FLAGS = set().union(*BACKEND_FLAGS.values())
# program -> (its backend, make targets, command as run from the repository: argv[0] is the name it reports)
TRAINERS: dict[str, tuple[str, list[str], list[str]]] = {
    "train_gpt2": ("cpu", ["train_gpt2"], ["./train_gpt2"]),
    "train_llama3": ("cpu", ["train_llama3"], ["./train_llama3"]),
    "train_nanochat": ("cpu", ["train_nanochat"], ["./train_nanochat"]),
    # the GPU trainers through the CPU execution target (dev/cuda_cpu): the same host code and flag table
    "train_gpt2cu": ("gpu", ["build/cuda_cpu/train_gpt2cu_fp32"], ["./build/cuda_cpu/train_gpt2cu_fp32"]),
    "train_llama3cu": ("gpu", ["build/cuda_cpu/train_llama3cu_fp32"], ["./build/cuda_cpu/train_llama3cu_fp32"]),
    "train_gpt2cl": ("opencl", ["train_gpt2cl"], ["./train_gpt2cl"]),
    # pyllmc runs ./train_gpt2's main(): the CPU trainers' flags, the program named as it is run
    "pyllmc.train": ("cpu", ["pyllmc"], [PYTHON, "-m", "pyllmc.train"]),
}


def trainer_command(program: str) -> tuple[str, list[str]]:
    """The program's backend and command, built (the OpenCL trainer only where its system packages are)."""
    backend, targets, cmd = TRAINERS[program]
    if backend == "opencl":
        require_system_packages("opencl")
    make(*targets)
    return backend, cmd


def refusal(flag: str, prog: str) -> str:
    """The one line a program refuses another backend's flag with."""
    takers = [BACKEND_NAMES[b] for b, flags in BACKEND_FLAGS.items() if flag in flags]
    names = takers[0] if len(takers) == 1 else ", ".join(takers[:-1]) + " and " + takers[-1]
    return f"error: flag {flag}: a flag of {names}, not of {prog}"


def help_flags(cmd: list[str]) -> dict[str, str]:
    """flag -> default, as the program's --help lists them."""
    proc = run([*cmd, "--help"], timeout=120)
    assert proc.stdout.startswith("usage: ") and proc.stderr == "", proc.stdout + proc.stderr
    assert "trainer only" not in proc.stdout and "GPU trainer" not in proc.stdout, proc.stdout
    return dict(re.findall(r'^  (-[a-z]+) +(?:int|float|str) .* \(default: "(.*)"\)$', proc.stdout, re.M))


@pytest.mark.parametrize("program", list(TRAINERS))
def test_trainer_help_lists_exactly_its_backends_flags(program: str) -> None:
    backend, cmd = trainer_command(program)
    assert set(help_flags(cmd)) == BACKEND_FLAGS[backend]


@pytest.mark.parametrize("program", list(TRAINERS))
def test_trainer_refuses_another_backends_flag_in_one_line(program: str) -> None:
    backend, cmd = trainer_command(program)
    prog = cmd[0] if program != "pyllmc.train" else "python -m pyllmc.train"
    for flag in sorted(ALL_FLAGS - BACKEND_FLAGS[backend]):
        proc = run([*cmd, "-x", "1", flag, "1"], check=False, timeout=120)
        assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", refusal(flag, prog) + "\n"), (flag, proc.stderr)


@pytest.mark.parametrize("program", list(TRAINERS))
def test_trainer_accepts_every_flag_of_its_backend(program: str) -> None:
    """Every listed flag with its default, then --help: the parser reads the pairs in order, so reaching --help
    (exit 0) means each flag before it was taken; the flags every backend shares are among them."""
    backend, cmd = trainer_command(program)
    defaults = help_flags(cmd)
    assert set(COMMON_FLAGS) <= set(defaults)
    proc = run([*cmd, *[x for flag, value in defaults.items() for x in (flag, value)], "--help"], timeout=120)
    assert proc.stdout.startswith("usage: ") and proc.stderr == "", proc.stderr


REFERENCES = ["train_gpt2.py", "train_llama3.py", "train_nanochat.py", "train_qwen3.py"]
# a reference run as a script: --help or a bad flag, then whether torch had been imported
_RUN_AS_SCRIPT = """import runpy, sys
sys.argv = [sys.argv[1], *sys.argv[2:]]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as e:
    print(f"exit {e.code}; torch imported: {'torch' in sys.modules}")
"""


@pytest.mark.parametrize("script", REFERENCES)
def test_reference_answers_help_and_a_bad_flag_before_importing_torch(script: str) -> None:
    """The references parse their flags before torch's import (seconds): --help and a bad flag exit without it; a
    good command line goes on to import it (and here stops at its missing --input_bin)."""
    proc = run([PYTHON, "-c", _RUN_AS_SCRIPT, REPO / script, "--help"])
    assert proc.stdout.strip().endswith("exit 0; torch imported: False"), proc.stdout[-500:]
    proc = run([PYTHON, "-c", _RUN_AS_SCRIPT, REPO / script, "--optimizer", "sgd"], check=False)
    assert "exit 2; torch imported: False" in proc.stdout and "invalid choice: 'sgd'" in proc.stderr, proc.stderr
    proc = run([PYTHON, "-c", _RUN_AS_SCRIPT, REPO / script, "--input_bin", "missing_*.bin", "--write_tensors", "0",
                "--device", "cpu"], check=False)
    assert "exit 1; torch imported: True" in proc.stdout, proc.stdout[-500:] + proc.stderr[-500:]


# dev scripts that run torch: their flags too are parsed before its import (a bad flag, exit 2)
DEV_TORCH_SCRIPTS = {"dev/cuda_cpu_refs.py": ["--model", "x"], "dev/torch_minimal_step.py": ["-B", "0"],
                     "dev/gemm_peak.py": ["-s", "1,2"]}


@pytest.mark.parametrize("script", sorted(DEV_TORCH_SCRIPTS))
def test_dev_script_answers_help_and_a_bad_flag_before_importing_torch(script: str) -> None:
    proc = run([PYTHON, "-c", _RUN_AS_SCRIPT, REPO / script, "--help"])
    assert proc.stdout.strip().endswith("exit 0; torch imported: False"), proc.stdout[-500:]
    proc = run([PYTHON, "-c", _RUN_AS_SCRIPT, REPO / script, *DEV_TORCH_SCRIPTS[script]], check=False)
    assert "exit 2; torch imported: False" in proc.stdout and "error:" in proc.stderr, proc.stdout + proc.stderr
