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

import shutil
import sys
from pathlib import Path

from refs_common import (OTHER_MUON, REPO, refs_main, run, tokenizer_vocab, train_command, write_model_and_state,
                         write_tokenizer_and_shards)

MQA_MUON = OTHER_MUON
# the hand-made shapes: (name, n_head, n_kv_head, n_embd, head_dim, ffn_hidden, tied, rope_theta, seed)
TINY_MODELS = (("qwen3_mha", 4, 4, 64, 48, 160, True, 1000000.0, 7),
               ("qwen3_mqa", 4, 1, 96, 16, 192, False, 10000.0, 11))


def write_tiny_reference(out: Path, shape: tuple, dest: Path | None = None,
                         muon: dict[str, object] | None = None) -> None:
    """One of TINY_MODELS and its debug state, written in this process by train_qwen3.py's own writers (2 layers,
    block size 128; refs_common.write_model_and_state). Read from `out` (tokenizer, shard), written into dest
    (default out)."""
    import train_qwen3 as ref

    name, n_head, n_kv_head, n_embd, head_dim, ffn_hidden, tied, theta, seed = shape
    cfg = ref.Qwen3Config(block_size=128, vocab_size=tokenizer_vocab(out / "qwen3_tokenizer.bin"), n_layer=2,
                          n_head=n_head, n_kv_head=n_kv_head, n_embd=n_embd, head_dim=head_dim, ffn_hidden=ffn_hidden,
                          norm_eps=1e-6, rope_theta=theta, tied_embeddings=tied)
    model = ref.Qwen3(cfg)
    model.init_weights(seed)
    write_model_and_state(ref, model, out, dest or out, name, muon)


def write_references(out: Path) -> Path:
    """In `out`: the test tokenizer (tok/), tinyshakespeare llama-3 shards (ts/), and from train_qwen3.py
    qwen3_tokenizer.bin, qwen3_d2{,_bf16,_debug_state}.bin, qwen3_d1.bin and the TINY_MODELS with their states."""
    write_tokenizer_and_shards(out, ["--delimiter", "endoftext"])
    train = train_command("train_qwen3.py", out)
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
    run([*train_command("train_qwen3.py", ref), "--model", "d2", "--optimizer", "muon"], cwd=out)
    write_tiny_reference(ref, TINY_MODELS[1], out, MQA_MUON)
    return out


def main() -> int:
    description = ("Writes the Qwen3 reference files (train_qwen3.py's d2, MHA and MQA debug states, d1's init, the "
                   "local <|endoftext|> test tokenizer and llama-3 tinyshakespeare shards).")
    return refs_main(description, REPO / "build" / "qwen3", "Qwen3", write_references, write_muon_references)


if __name__ == "__main__":
    sys.exit(main())
