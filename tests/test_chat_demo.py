"""dev/chat_demo.py, doc/chat.md's end-to-end run, at a tiny size: every step runs (the base model, the task, its chat
shards, chat_eval.py before and after fine-tuning) and the summary prints. The real size is measured in doc/chat.md."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import PYTHON, REPO, run


def test_chat_demo_runs_every_step_and_prints_both_evaluations(tinyshakespeare, tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = run([PYTHON, REPO / "dev" / "chat_demo.py", "--out", out, "--model", "d2", "--base_steps", 2,
                "--base_batch", 1, "--sft_steps", 2, "--sft_batch", 2, "--n_train", 64, "--n_val", 8,
                "--precision", "fp32"], cwd=tmp_path, timeout=600, env={"OMP_NUM_THREADS": "1"})  # pytest runs 2 workers
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    for step in ("build", "tokenizer files", "base model", "task", "chat shards", "eval before", "fine-tuning",
                 "eval after", "total"):
        assert re.search(rf"^\| {step} \| \d+ \|$", proc.stdout, re.M), (step, proc.stdout[-2000:])
    for when in ("before", "after"):
        assert re.search(rf"^{when}: +accuracy: \d/8 \(\d+\.\d %\); ended with end token: \d/8 \(\d+\.\d %\)$",
                         proc.stdout, re.M), proc.stdout[-2000:]
    assert (out / "sft" / "model_00000002.bin").is_file() and (out / "data" / "reverse_train.bin").is_file()
    assert f"chat with it: ./generate -e {out / 'sft' / 'model_00000002.bin'} -t {out / 'gpt2_chat_tokenizer.bin'}" \
        in proc.stdout
