"""The nanochat reference files the C, CUDA and GPU checks compare with: random tiny Hugging Face NanoChat models
imported by train_nanochat.py (its command line, run in this process), and its d2 from scratch.

    python dev/nanochat_refs.py                      # build/nanochat/
    python dev/nanochat_refs.py --out_dir DIR --no_d2

In the output directory (the list is printed at the end, each file with what it is):
  hf/{mha,gqa,mqa}/             the NanoChatForCausalLM directories (save_pretrained; random weights, no tokenizer)
  ts/tiny_shakespeare_{train,val}.bin   GPT-2-format shards of tinyshakespeare's GPT-2 ids modulo 512 (SMALL_VOCAB)
  nanochat_<shape>{,_bf16}.bin  each model imported: `train_nanochat.py --model hf/<shape> --write_tensors 1
  nanochat_<shape>_debug_state.bin    --num_iterations 0 ...`: the model files and 10 AdamW steps' debug state
  muon/nanochat_gqa*            the GQA model with train_nanochat.py --optimizer muon's state (torch's Muon defaults)
  muon/nanochat_mqa*            the MQA model with a Muon state of other settings (OTHER_MUON)
  nanochat_d2{,_bf16}.bin, nanochat_d2_debug_state.bin   train_nanochat.py --model d2 (from scratch, seed 42)
  nanochat_tokenizer.bin        GPT-2's tokenizer in the family's tokenizer file (for the V=50304 models)
Only the Python of the machine is needed (torch, numpy, transformers), no network; the shards are
dev/data/tinyshakespeare/tiny_shakespeare_{train,val}.bin (`make data`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
TS_DIR = REPO / "dev" / "data" / "tinyshakespeare"
SMALL_VOCAB = 512  # the small models' vocabulary: their shards hold GPT-2 ids modulo this
OTHER_MUON = ["--muon_lr", "0.02", "--muon_momentum", "0.9", "--muon_nesterov", "0", "--muon_ns_steps", "4",
              "--muon_adjust_lr", "match_rms_adamw"]


@dataclass(frozen=True)
class TinyModel:
    """A random NanoChatForCausalLM the refs import: its shape, softcap (None = transformers' null) and batch."""
    name: str
    about: str
    vocab_size: int
    n_embd: int
    n_head: int
    n_kv_head: int
    ffn_hidden: int
    softcap: float | None
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6
    batch: tuple[int, int] = (4, 64)  # B, T of the debug state


TINY_MODELS = [
    TinyModel("mha", "MHA (NH=NKV=4, HS=16), softcap 15, GPT-2's padded vocab 50304: the issue's import, B=2 T=64",
              50304, 64, 4, 4, 256, 15.0, batch=(2, 64)),
    TinyModel("gqa", "GQA (NH=4, NKV=2, HS=16), softcap 5 (tanh well away from linear), FFN 192 (not 4C), V=512",
              SMALL_VOCAB, 64, 4, 2, 192, 5.0),
    TinyModel("mqa", "MQA (NH=4, NKV=1, HS=16), no softcap (null), rope_theta 500, eps 1e-5, FFN 128, V=512, B=2 T=32",
              SMALL_VOCAB, 64, 4, 1, 128, None, rope_theta=500.0, norm_eps=1e-5, batch=(2, 32)),
]


def save_tiny_model(m: TinyModel, directory: Path, seed: int) -> None:
    """A NanoChatForCausalLM of m's shape (2 layers, block size 128) with weights drawn wider than transformers' init
    (embeddings N(0, 1), matrices N(0, 0.1), lm_head N(0, 0.3): the softcap bites), saved with save_pretrained."""
    import torch
    from transformers import NanoChatConfig, NanoChatForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    cfg = NanoChatConfig(vocab_size=m.vocab_size, hidden_size=m.n_embd, intermediate_size=m.ffn_hidden,
                         num_hidden_layers=2, num_attention_heads=m.n_head, num_key_value_heads=m.n_kv_head,
                         max_position_embeddings=128, rms_norm_eps=m.norm_eps, final_logit_softcapping=m.softcap,
                         rope_parameters={"rope_type": "default", "rope_theta": m.rope_theta})
    torch.manual_seed(seed)
    hf = NanoChatForCausalLM(cfg)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.normal_(0.0, 1.0 if "embed" in name else 0.3 if "lm_head" in name else 0.1)
    hf.save_pretrained(str(directory))


def write_small_vocab_shards(out: Path) -> None:
    """ts/tiny_shakespeare_{train,val}.bin: tinyshakespeare's GPT-2 ids modulo SMALL_VOCAB, in the GPT-2 format."""
    from pyllmc.token_shards import read_datafile, write_datafile

    (out / "ts").mkdir(exist_ok=True)
    for split in ("train", "val"):
        tokens = read_datafile(TS_DIR / f"tiny_shakespeare_{split}.bin").astype(np.int64) % SMALL_VOCAB
        write_datafile(out / "ts" / f"tiny_shakespeare_{split}.bin", tokens)


def train_nanochat(cwd: Path, args: list[object]) -> None:
    """train_nanochat.py's command line in this process (imports once), run in `cwd`; its output only on failure."""
    import io

    import train_nanochat

    cwd.mkdir(parents=True, exist_ok=True)
    argv = [str(a) for a in args]
    captured = io.StringIO()
    here = Path.cwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            status = train_nanochat.main(argv)
    finally:
        os.chdir(here)
    if status != 0:
        sys.stderr.write(captured.getvalue()[-3000:])
        raise SystemExit(f"error: train_nanochat.py {' '.join(argv)} exited with {status}")


def import_args(m: TinyModel, out: Path, extra: list[str] = ()) -> list[object]:
    shard = TS_DIR / "tiny_shakespeare_val.bin" if m.vocab_size >= 50257 else out / "ts" / "tiny_shakespeare_val.bin"
    B, T = m.batch
    return ["--model", out / "hf" / m.name, "--input_bin", shard, "--write_tensors", 1, "--num_iterations", 0,
            "--batch_size", B, "--sequence_length", T, "--device", "cpu", *extra]


def write_references(out: Path, d2: bool = True) -> dict[str, str]:
    """Every reference file in `out`; returns file -> what it is."""
    for split in ("train", "val"):
        if not (TS_DIR / f"tiny_shakespeare_{split}.bin").exists():
            raise SystemExit(f"error: {TS_DIR}/tiny_shakespeare_{split}.bin not found: run `make data` first")
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    write_small_vocab_shards(out)
    for split in ("train", "val"):
        written[f"ts/tiny_shakespeare_{split}.bin"] = f"GPT-2-format shard, tinyshakespeare {split} ids modulo {SMALL_VOCAB}"
    for seed, m in enumerate(TINY_MODELS):
        save_tiny_model(m, out / "hf" / m.name, seed)
        written[f"hf/{m.name}/"] = f"NanoChatForCausalLM directory: {m.about}"
        train_nanochat(out, import_args(m, out))
        B, T = m.batch
        written[f"nanochat_{m.name}.bin"] = f"hf/{m.name} imported by train_nanochat.py (fp32)"
        written[f"nanochat_{m.name}_bf16.bin"] = "the same in bf16"
        written[f"nanochat_{m.name}_debug_state.bin"] = f"its debug state: B={B} T={T}, 10 AdamW steps"
    train_nanochat(out / "muon", import_args(TINY_MODELS[1], out, ["--optimizer", "muon"]))
    written["muon/nanochat_gqa{,_bf16}.bin"] = "hf/gqa imported again"
    written["muon/nanochat_gqa_debug_state.bin"] = "its debug state with --optimizer muon (torch's Muon defaults)"
    train_nanochat(out / "muon", import_args(TINY_MODELS[2], out, ["--optimizer", "muon", *OTHER_MUON]))
    written["muon/nanochat_mqa{,_bf16}.bin"] = "hf/mqa imported again"
    written["muon/nanochat_mqa_debug_state.bin"] = f"its debug state with Muon {' '.join(OTHER_MUON)}"
    if d2:
        train_nanochat(out, ["--model", "d2", "--input_bin", TS_DIR / "tiny_shakespeare_val.bin", "--num_iterations", 0,
                             "--device", "cpu"])
        written["nanochat_d2{,_bf16}.bin"] = "train_nanochat.py --model d2: from scratch, seed 42 (L=2 C=128 NH=1 V=50304)"
        written["nanochat_d2_debug_state.bin"] = "its debug state: B=4 T=64, 10 AdamW steps on the val shard's first batch"
    written["nanochat_tokenizer.bin"] = "GPT-2's tokenizer, the family's tokenizer file (the V=50304 models)"
    return written


def main() -> int:
    p = argparse.ArgumentParser(description="Writes the nanochat reference files (tiny Hugging Face NanoChat models "
                                "imported by train_nanochat.py, their debug states, and its d2 from scratch).")
    p.add_argument("--out_dir", type=Path, default=REPO / "build" / "nanochat", help="where to write them")
    p.add_argument("--no_d2", action="store_true", help="skip the d2 from scratch (its V=50304 state is the slow one)")
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)  # tiny models: more threads only spin
    t0 = time.perf_counter()
    out = args.out_dir.resolve()
    written = write_references(out, not args.no_d2)
    width = max(map(len, written))
    for name, about in written.items():
        print(f"  {name:<{width}}  {about}")
    print(f"wrote the nanochat references in {out} ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
