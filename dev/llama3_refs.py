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

import sys
from pathlib import Path

from refs_common import (OTHER_MUON, REPO, refs_main, run, tokenizer_vocab, train_command, write_model_and_state,
                         write_tokenizer_and_shards)

GQA_MUON = OTHER_MUON


def write_gqa_reference(out: Path, dest: Path | None = None, muon: dict[str, object] | None = None) -> None:
    """llama3_gqa.bin and its debug state, written in this process by train_llama3.py's own writers
    (refs_common.write_model_and_state): 4 query heads per key/value head, a tied head, Llama 3.1 RoPE scaling
    (original_max_position 32, so the T=64 batch reaches every band) and an FFN multiplier. Read from `out`
    (tokenizer, shard), written into dest (default out)."""
    import train_llama3 as ref

    cfg = ref.LlamaConfig(block_size=128, vocab_size=tokenizer_vocab(out / "llama3_tokenizer.bin"), n_layer=2,
                          n_head=4, n_kv_head=1, n_embd=128, ffn_dim_multiplier=1.3, multiple_of=64, norm_eps=1e-6,
                          rope_theta=10000.0, use_scaled_rope=True, rope_factor=8.0, low_freq_factor=1.0,
                          high_freq_factor=4.0, original_max_position=32.0, tied_embeddings=True, version_minor=1)
    model = ref.Llama(cfg)
    model.init_weights(7)
    write_model_and_state(ref, model, out, dest or out, "llama3_gqa", muon)


def write_references(out: Path) -> Path:
    """In `out`: the test tokenizer (tok/), tinyshakespeare llama-3 shards (ts/), and from train_llama3.py
    llama3_tokenizer.bin, llama3_d2{,_bf16,_debug_state}.bin and llama3_gqa{,_debug_state}.bin."""
    write_tokenizer_and_shards(out, [])
    run([*train_command("train_llama3.py", out), "--model", "d2"], cwd=out)
    write_gqa_reference(out)
    return out


def write_muon_references(ref: Path, out: Path) -> Path:
    """In `out`: llama3_d2.bin with the debug state of train_llama3.py --optimizer muon, and llama3_gqa.bin with a
    Muon debug state of GQA_MUON's settings; `ref` holds write_references' files."""
    out.mkdir(parents=True, exist_ok=True)
    run([*train_command("train_llama3.py", ref), "--model", "d2", "--optimizer", "muon"], cwd=out)
    write_gqa_reference(ref, out, GQA_MUON)
    return out


def main() -> int:
    return refs_main("Writes the Llama 3 reference files (train_llama3.py's d2 and GQA debug states, the local test "
                     "tokenizer and llama-3 tinyshakespeare shards).", REPO / "build" / "llama3", "Llama 3",
                     write_references, write_muon_references)


if __name__ == "__main__":
    sys.exit(main())
