"""The Llama 3 reference files the C, CUDA and GPU checks compare with, written by train_llama3.py's own writers.

    python dev/llama3_refs.py                        # build/llama3/ (what `make llama3-debug-states` runs)
    python dev/llama3_refs.py --out_dir DIR --muon   # also DIR/muon/: the same two models with Muon debug states

In the output directory:
  tok/tokenizer.json          the local test tokenizer (dev/data/make_test_tokenizer.py: 514 tokens, offline)
  ts/                         Tiny Shakespeare as llama-3 shards in that tokenizer's ids
  llama3_tokenizer.bin        the tokenizer file the C programs decode with
  llama3_d2{,_bf16}.bin       train_llama3.py --model d2 (GQA 2:1, untied lm_head) and its debug state,
  llama3_d2_debug_state.bin   10 AdamW steps on the first B=4, T=64 batch
  llama3_gqa.bin              a model that covers what d2 does not: 4 query heads per key/value head, a tied
  llama3_gqa_debug_state.bin  head, Llama 3.1 RoPE scaling reaching every band at T=64, an FFN multiplier
  muon/ (--muon)              llama3_d2 with train_llama3.py --optimizer muon's state (torch's Muon defaults),
                              llama3_gqa with a Muon state of other settings (GQA_MUON: no Nesterov, 4 steps
                              of Newton-Schulz, the AdamW-matching learning-rate rule)
Only the Python of the machine is needed (torch, numpy, tokenizers): no pytest, no network; the text is
dev/data/tinyshakespeare/tiny_shakespeare.txt, or ../shared's seed copy where the data script has not run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
TS_TEXT = REPO / "dev" / "data" / "tinyshakespeare" / "tiny_shakespeare.txt"
SEED_TEXT = REPO.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # tiny models: more threads only spin
GQA_MUON = {"muon_lr": 0.02, "muon_momentum": 0.9, "muon_nesterov": False, "muon_ns_steps": 4,
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


def write_gqa_reference(out: Path, dest: Path | None = None, muon: dict[str, object] | None = None) -> None:
    """llama3_gqa.bin and its debug state, written in this process by train_llama3.py's own writers: 4 query heads
    per key/value head, a tied head, Llama 3.1 RoPE scaling (original_max_position 32, so the T=64 batch reaches
    every band) and an FFN multiplier; the batch is the first of the train shard, as the script takes it. Read
    from `out` (tokenizer, shard), written into dest (default out); with muon (DebugOptimizer's muon_* settings)
    the state's steps are Muon on the blocks' matrices and AdamW on the rest."""
    import train_llama3 as ref
    from pyllmc.reference.data_loader import DistributedDataLoader
    from pyllmc.reference.debug_state import DebugOptimizer

    vocab = int(np.fromfile(out / "llama3_tokenizer.bin", dtype="<u4", count=3)[2])
    cfg = ref.LlamaConfig(block_size=128, vocab_size=vocab, n_layer=2, n_head=4, n_kv_head=1, n_embd=128,
                          ffn_dim_multiplier=1.3, multiple_of=64, norm_eps=1e-6, rope_theta=10000.0, use_scaled_rope=True,
                          rope_factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position=32.0,
                          tied_embeddings=True, version_minor=1)
    model = ref.Llama(cfg)
    model.init_weights(7)
    dest = dest or out
    ref.write_model(model, dest / "llama3_gqa.bin", "float32")
    x, y = DistributedDataLoader(str(out / "ts" / "tiny_shakespeare_train.bin"), 4, 64, 0, 1, vocab).next_batch()
    opt = DebugOptimizer(name="muon", **muon) if muon else DebugOptimizer()
    ref.write_debug_state(model, x, y, dest / "llama3_gqa_debug_state.bin", opt)


def write_references(out: Path) -> Path:
    """In `out`: the test tokenizer (tok/), tinyshakespeare llama-3 shards (ts/), and from train_llama3.py
    llama3_tokenizer.bin, llama3_d2{,_bf16,_debug_state}.bin and llama3_gqa{,_debug_state}.bin."""
    out.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    run([py, REPO / "dev" / "data" / "make_test_tokenizer.py", "--out_dir", out / "tok", "--corpus", tinyshakespeare_text()])
    (out / "ts").mkdir(exist_ok=True)
    shutil.copyfile(tinyshakespeare_text(), out / "ts" / "tiny_shakespeare.txt")
    run([py, REPO / "dev" / "data" / "tinyshakespeare.py", "--model_desc", "llama-3", "--tokenizer", out / "tok",
         "--data_dir", out / "ts"])
    run([py, REPO / "train_llama3.py", "--model", "d2", "--tokenizer", out / "tok", "--input_bin",
         out / "ts" / "tiny_shakespeare_train.bin", "--num_iterations", 0], cwd=out)
    write_gqa_reference(out)
    return out


def write_muon_references(ref: Path, out: Path) -> Path:
    """In `out`: llama3_d2.bin with the debug state of train_llama3.py --optimizer muon, and llama3_gqa.bin with a
    Muon debug state of GQA_MUON's settings; `ref` holds write_references' files."""
    out.mkdir(parents=True, exist_ok=True)
    run([sys.executable, REPO / "train_llama3.py", "--model", "d2", "--tokenizer", ref / "tok", "--input_bin",
         ref / "ts" / "tiny_shakespeare_train.bin", "--num_iterations", 0, "--optimizer", "muon"], cwd=out)
    write_gqa_reference(ref, out, GQA_MUON)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description="Writes the Llama 3 reference files (train_llama3.py's d2 and GQA debug "
                                "states, the local test tokenizer and llama-3 tinyshakespeare shards).")
    p.add_argument("--out_dir", type=Path, default=REPO / "build" / "llama3", help="where to write them")
    p.add_argument("--muon", action="store_true", help="also the Muon debug states, in OUT_DIR/muon/")
    args = p.parse_args()
    out = write_references(args.out_dir.resolve())
    if args.muon:
        write_muon_references(out, out / "muon")
    print(f"wrote the Llama 3 references in {out}" + (f" (Muon states in {out / 'muon'})" if args.muon else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
