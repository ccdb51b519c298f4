"""--help of every script and program: exit 0, a usage text on stdout listing the main flags, nothing on stderr.
Stricter checks stay with their programs: the trainers' help lists every flag of the argument table
(test_c_trainer.py, test_cuda_build.py, test_pyllmc_mpi.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import PYTHON, REPO, make, run

# program (a script under the repo, or a make target) -> flags (and default files) its help must list
HELP_FLAGS: dict[str, list[str]] = {
    "dev/data/fineweb.py": ["--type", "--version", "--shard_size", "--data_files", "--model_desc"],
    "dev/data/hellaswag.py": ["--data_dir", "--split"],
    "dev/data/tinyshakespeare.py": ["--data_dir", "--model_desc", "--tokenizer"],
    "dev/data/tinystories.py": ["--data_dir", "--num_proc"],
    "dev/data/make_test_tokenizer.py": ["--corpus", "--out_dir", "--vocab_size"],
    "dev/eval/export_gguf.py": ["--input", "--output", "--dtype", "--tokenizer", "--verify"],
    "dev/eval/export_hf.py": ["--input", "--output"],
    "dev/vislog.py": ["--ema", "-o"],
    "dev/write_bpe.py": ["-o", "--unicode-tables"],
    "encode": ["-d", "-b", "gpt2_bpe.bin"],
    "generate": ["--top-k", "-i"],
    "train_llama3.py": ["--model", "--tokenizer", "--optimizer", "--zero_stage", "--write_tensors"],
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
