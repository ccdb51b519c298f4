"""What the decoder families' reference writers (dev/llama3_refs.py, dev/qwen3_refs.py) share: running a step of the
writing, the Tiny Shakespeare text, the local test tokenizer with llama-3 shards in its ids, a hand-made model's debug
state on the first train batch, and the command line (--out_dir, --muon).

Only the Python of the machine is needed (torch, numpy, tokenizers): no pytest, no network.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable

import numpy as np

REPO = Path(__file__).resolve().parent.parent
TS_TEXT = REPO / "dev" / "data" / "tinyshakespeare" / "tiny_shakespeare.txt"
SEED_TEXT = REPO.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # tiny models: more threads only spin
# a Muon debug state of settings other than torch's defaults: no Nesterov, 4 Newton-Schulz steps, the AdamW-matching
# learning-rate rule
OTHER_MUON = {"muon_lr": 0.02, "muon_momentum": 0.9, "muon_nesterov": False, "muon_ns_steps": 4,
              "muon_adjust_lr": "match_rms_adamw"}


def run(cmd: list[object], cwd: Path | None = None) -> None:
    """Runs a step of the writing; its output only when it fails (then the error names the command)."""
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env={**os.environ, **ONE_THREAD}, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"error: {' '.join(str(c) for c in cmd)} exited with {proc.returncode}")


def tinyshakespeare_text() -> Path:
    """The Tiny Shakespeare text: the data script's cache, else the machine's seed copy."""
    for text in (TS_TEXT, SEED_TEXT):
        if text.exists():
            return text
    raise SystemExit(f"error: {TS_TEXT} not found: run `python dev/data/tinyshakespeare.py` (make data) first")


def write_tokenizer_and_shards(out: Path, tokenizer_args: list[object]) -> None:
    """In `out`: tok/, the test tokenizer (dev/data/make_test_tokenizer.py on Tiny Shakespeare with tokenizer_args),
    and ts/, Tiny Shakespeare as llama-3 shards in its ids."""
    out.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    run([py, REPO / "dev" / "data" / "make_test_tokenizer.py", "--out_dir", out / "tok", "--corpus",
         tinyshakespeare_text(), *tokenizer_args])
    (out / "ts").mkdir(exist_ok=True)
    shutil.copyfile(tinyshakespeare_text(), out / "ts" / "tiny_shakespeare.txt")
    run([py, REPO / "dev" / "data" / "tinyshakespeare.py", "--model_desc", "llama-3", "--tokenizer", out / "tok",
         "--data_dir", out / "ts"])


def train_command(script: str, ref: Path) -> list[object]:
    """`python <script> --tokenizer ref/tok --input_bin <ref's train shard> --num_iterations 0`: a reference's files
    from one batch of the shards write_tokenizer_and_shards made in `ref`."""
    return [sys.executable, REPO / script, "--tokenizer", ref / "tok", "--input_bin",
            ref / "ts" / "tiny_shakespeare_train.bin", "--num_iterations", 0]


def write_model_and_state(ref: ModuleType, model, out: Path, dest: Path, name: str,
                          muon: dict[str, object] | None) -> None:
    """dest/<name>.bin and dest/<name>_debug_state.bin of a hand-made model, by the reference module `ref`'s own
    writers; the batch is the first B=4, T=64 of out's train shard, as the script takes it (the vocab from out's
    <family>_tokenizer.bin). With muon (DebugOptimizer's muon_* settings) the state's steps are Muon on the blocks'
    matrices and AdamW on the rest."""
    from pyllmc.reference.data_loader import DistributedDataLoader
    from pyllmc.reference.debug_state import DebugOptimizer

    vocab = model.config.vocab_size
    ref.write_model(model, dest / f"{name}.bin", "float32")
    x, y = DistributedDataLoader(str(out / "ts" / "tiny_shakespeare_train.bin"), 4, 64, 0, 1, vocab).next_batch()
    opt = DebugOptimizer(name="muon", **muon) if muon else DebugOptimizer()
    ref.write_debug_state(model, x, y, dest / f"{name}_debug_state.bin", opt)


def tokenizer_vocab(tokenizer_file: Path) -> int:
    """The vocab size in a Llama 3 layout tokenizer file's header."""
    return int(np.fromfile(tokenizer_file, dtype="<u4", count=3)[2])


def refs_main(description: str, default_out: Path, family_title: str, write_references: Callable[[Path], Path],
              write_muon_references: Callable[[Path, Path], Path]) -> int:
    """A reference writer's command line: --out_dir (default default_out), --muon (also OUT_DIR/muon/)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out_dir", type=Path, default=default_out, help="where to write them")
    p.add_argument("--muon", action="store_true", help="also the Muon debug states, in OUT_DIR/muon/")
    args = p.parse_args()
    out = write_references(args.out_dir.resolve())
    if args.muon:
        write_muon_references(out, out / "muon")
    print(f"wrote the {family_title} references in {out}" + (f" (Muon states in {out / 'muon'})" if args.muon else ""))
    return 0
