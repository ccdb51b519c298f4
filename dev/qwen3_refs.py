"""The Qwen3 reference files the C checks compare with, written by train_qwen3.py's own writers.

    python dev/qwen3_refs.py                        # build/qwen3/ (what `make qwen3-debug-states` runs)
    python dev/qwen3_refs.py --out_dir DIR --muon   # also DIR/muon/: Muon debug states of two of the models

In the output directory:
  tok/tokenizer.json          the local test tokenizer with <|endoftext|> and no BOS (dev/data/make_test_tokenizer.py
                              --delimiter endoftext: 513 tokens, offline)
  ts/                         Tiny Shakespeare as llama-3 shards in that tokenizer's ids
  qwen3_tokenizer.bin         the tokenizer file the C programs decode with
  qwen3_d2{,_bf16}.bin        train_qwen3.py --model d2 from scratch (GQA 2:1, head_dim 128: attention width 256,
  qwen3_d2_debug_state.bin    twice C = 128; untied) and its debug state, 10 AdamW steps on the first B=4, T=64 batch
  qwen3_d1.bin                train_qwen3.py --model d1 from scratch at seed 42 (-e d1's init is compared with it)
  qwen3_mha.bin (+ state)     4 query heads with 4 key/value heads (MHA) of head_dim 48 at C = 64 (width 192), tied
  qwen3_mqa.bin (+ state)     4 query heads sharing 1 key/value head (MQA) of head_dim 16 at C = 96 (width 64 < C),
                              untied, rope_theta 10000
  muon/ (--muon)              qwen3_d2 with train_qwen3.py --optimizer muon's state (torch's Muon defaults), qwen3_mqa
                              with a Muon state of other settings (MQA_MUON: no Nesterov, 4 Newton-Schulz steps, the
                              AdamW-matching learning-rate rule)
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
MQA_MUON = {"muon_lr": 0.02, "muon_momentum": 0.9, "muon_nesterov": False, "muon_ns_steps": 4,
            "muon_adjust_lr": "match_rms_adamw"}
# the hand-made shapes: (name, n_head, n_kv_head, n_embd, head_dim, ffn_hidden, tied, rope_theta, seed)
TINY_MODELS = (("qwen3_mha", 4, 4, 64, 48, 160, True, 1000000.0, 7),
               ("qwen3_mqa", 4, 1, 96, 16, 192, False, 10000.0, 11))


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


def write_tiny_reference(out: Path, shape: tuple, dest: Path | None = None,
                         muon: dict[str, object] | None = None) -> None:
    """One of TINY_MODELS and its debug state, written in this process by train_qwen3.py's own writers (2 layers,
    block size 128); the batch is the first B=4, T=64 of the train shard, as the script takes it. Read from `out`
    (tokenizer, shard), written into dest (default out); with muon (DebugOptimizer's muon_* settings) the state's
    steps are Muon on the blocks' matrices and AdamW on the rest."""
    import train_qwen3 as ref
    from pyllmc.reference.data_loader import DistributedDataLoader
    from pyllmc.reference.debug_state import DebugOptimizer

    name, n_head, n_kv_head, n_embd, head_dim, ffn_hidden, tied, theta, seed = shape
    vocab = int(np.fromfile(out / "qwen3_tokenizer.bin", dtype="<u4", count=3)[2])
    cfg = ref.Qwen3Config(block_size=128, vocab_size=vocab, n_layer=2, n_head=n_head, n_kv_head=n_kv_head,
                          n_embd=n_embd, head_dim=head_dim, ffn_hidden=ffn_hidden, norm_eps=1e-6, rope_theta=theta,
                          tied_embeddings=tied)
    model = ref.Qwen3(cfg)
    model.init_weights(seed)
    dest = dest or out
    ref.write_model(model, dest / f"{name}.bin", "float32")
    x, y = DistributedDataLoader(str(out / "ts" / "tiny_shakespeare_train.bin"), 4, 64, 0, 1, vocab).next_batch()
    opt = DebugOptimizer(name="muon", **muon) if muon else DebugOptimizer()
    ref.write_debug_state(model, x, y, dest / f"{name}_debug_state.bin", opt)


def write_references(out: Path) -> Path:
    """In `out`: the test tokenizer (tok/), tinyshakespeare llama-3 shards (ts/), and from train_qwen3.py
    qwen3_tokenizer.bin, qwen3_d2{,_bf16,_debug_state}.bin, qwen3_d1.bin and the TINY_MODELS with their states."""
    out.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    run([py, REPO / "dev" / "data" / "make_test_tokenizer.py", "--out_dir", out / "tok", "--corpus",
         tinyshakespeare_text(), "--delimiter", "endoftext"])
    (out / "ts").mkdir(exist_ok=True)
    shutil.copyfile(tinyshakespeare_text(), out / "ts" / "tiny_shakespeare.txt")
    run([py, REPO / "dev" / "data" / "tinyshakespeare.py", "--model_desc", "llama-3", "--tokenizer", out / "tok",
         "--data_dir", out / "ts"])
    train = [py, REPO / "train_qwen3.py", "--tokenizer", out / "tok", "--input_bin",
             out / "ts" / "tiny_shakespeare_train.bin", "--num_iterations", 0]
    run([*train, "--model", "d2"], cwd=out)
    d1 = out / "d1"
    d1.mkdir(exist_ok=True)
    run([*train, "--model", "d1", "--batch_size", 1, "--sequence_length", 8], cwd=d1)
    shutil.copyfile(d1 / "qwen3_d1.bin", out / "qwen3_d1.bin")
    shutil.rmtree(d1)
    for shape in TINY_MODELS:
        write_tiny_reference(out, shape)
    return out


def write_muon_references(ref: Path, out: Path) -> Path:
    """In `out`: qwen3_d2.bin with the debug state of train_qwen3.py --optimizer muon, and qwen3_mqa.bin with a Muon
    debug state of MQA_MUON's settings; `ref` holds write_references' files."""
    out.mkdir(parents=True, exist_ok=True)
    run([sys.executable, REPO / "train_qwen3.py", "--model", "d2", "--tokenizer", ref / "tok", "--input_bin",
         ref / "ts" / "tiny_shakespeare_train.bin", "--num_iterations", 0, "--optimizer", "muon"], cwd=out)
    write_tiny_reference(ref, TINY_MODELS[1], out, MQA_MUON)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description="Writes the Qwen3 reference files (train_qwen3.py's d2, MHA and MQA debug "
                                "states, d1's init, the local <|endoftext|> test tokenizer and llama-3 tinyshakespeare "
                                "shards).")
    p.add_argument("--out_dir", type=Path, default=REPO / "build" / "qwen3", help="where to write them")
    p.add_argument("--muon", action="store_true", help="also the Muon debug states, in OUT_DIR/muon/")
    args = p.parse_args()
    out = write_references(args.out_dir.resolve())
    if args.muon:
        write_muon_references(out, out / "muon")
    print(f"wrote the Qwen3 references in {out}" + (f" (Muon states in {out / 'muon'})" if args.muon else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
