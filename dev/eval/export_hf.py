"""
Exports an llmc model checkpoint (gpt2_124M.bin: fp32 version 3 or bf16 version 5) as a
Hugging Face GPT-2 model directory that `transformers.GPT2LMHeadModel.from_pretrained` loads:

    python dev/eval/export_hf.py -i gpt2_124M.bin -o hf_gpt2_124M
    python dev/eval/export_hf.py -i log124M/model_00010000.bin -o hf_out --dtype bfloat16

The directory holds config.json (GPT2LMHeadModel, tanh GELU), model.safetensors (Hugging Face
tensor names; the four Conv1D weights transposed to (in, out); wte without llmc's padding rows;
lm_head tied to wte, so it is not stored) and the GPT-2 tokenizer files (vocab.json,
merges.txt, tokenizer.json, ...) derived from tiktoken's gpt2 encoding.
The reverse direction is `python train_gpt2.py --model <dir> --write_tensors 1 --num_iterations 0`,
which writes the checkpoint back byte for byte (fp32).

A nanochat model file (nanochat_d2.bin, told apart by its magic) becomes a NanoChatForCausalLM directory:
config.json (relu2, no biases, untied head, default RoPE, final_logit_softcapping null for a softcap of 0) and
model.safetensors (qkvw split into q_proj, k_proj, v_proj; fc1, fc2, o_proj; lm_head stored); the GPT-2
tokenizer files when its vocabulary holds GPT-2's. `python train_nanochat.py --model <dir> ...` reads it back.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np
from tqdm import tqdm

import pyllmc.families.gpt2 as gpt2_family
from pyllmc.model_file import NANOCHAT_MAGIC, Gpt2Header, ModelFileError, NanoChatConfig, read_gpt2, read_magic, read_nanochat

GPT2_VOCAB = gpt2_family.VOCAB_SIZE


class ExportError(Exception):
    """A problem with the input that is reported as one line."""


# ----------------------------------------------------------------------------- reading the checkpoint


def read_checkpoint(path: Path) -> tuple[Gpt2Header, dict[str, np.ndarray]]:
    """Header and the 16 tensors (float32) of an llmc checkpoint, validated like the C loader (model_file.py)."""
    try:
        return read_gpt2(path)
    except ModelFileError as e:
        raise ExportError(str(e)) from None


# ----------------------------------------------------------------------------- Hugging Face layout


def cast_to(a: np.ndarray, dtype: str) -> np.ndarray:
    """A contiguous copy in the saved dtype (float32, or float16)."""
    return np.ascontiguousarray(a, dtype=np.float32).astype(np.float16 if dtype == "float16" else np.float32)


def hf_state_dict(h: Gpt2Header, t: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """Hugging Face GPT-2 names (our per-layer names are theirs: gpt2_family.LAYER_PARAMETERS). The per-layer matrices
    (3-D in the file) are Conv1D weights there, stored (in, out): transposed from llmc's (out, in)."""
    sd = {"transformer.wte.weight": cast_to(t["wte"][: h.V], dtype), "transformer.wpe.weight": cast_to(t["wpe"], dtype)}
    for l in tqdm(range(h.L), desc="layers", unit="layer", disable=h.L < 4):
        for name, hf_name in gpt2_family.LAYER_PARAMETERS.items():
            sd[f"transformer.h.{l}.{hf_name}"] = cast_to(t[name][l].T if t[name].ndim == 3 else t[name][l], dtype)
    sd["transformer.ln_f.weight"] = cast_to(t["lnfw"], dtype)
    sd["transformer.ln_f.bias"] = cast_to(t["lnfb"], dtype)
    return sd


def nanochat_state_dict(c: NanoChatConfig, t: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """NanoChatForCausalLM's names: the fused qkvw split back into q, k and v (rows in that order); every matrix is
    (out, in) on both sides."""
    HS = c.head_size
    sd = {"model.embed_tokens.weight": cast_to(t["wte"], dtype)}
    for l in range(c.n_layer):
        p = f"model.layers.{l}."
        q, k, v = np.split(t["qkvw"][l], [c.n_head * HS, (c.n_head + c.n_kv_head) * HS])
        parts = {"self_attn.q_proj": q, "self_attn.k_proj": k, "self_attn.v_proj": v, "self_attn.o_proj": t["attprojw"][l],
                 "mlp.fc1": t["fcw"][l], "mlp.fc2": t["fcprojw"][l]}
        sd.update({f"{p}{name}.weight": cast_to(a, dtype) for name, a in parts.items()})
    sd["lm_head.weight"] = cast_to(t["lm_head"], dtype)
    return sd


def nanochat_hf_config(c: NanoChatConfig, dtype: str) -> dict:
    """NanoChatConfig's fields; with GPT-2's vocabulary its end-of-text id is the BOS, EOS and padding id."""
    special = GPT2_VOCAB - 1 if c.vocab_size >= GPT2_VOCAB else None
    return {
        "architectures": ["NanoChatForCausalLM"],
        "model_type": "nanochat",
        "vocab_size": c.vocab_size,
        "hidden_size": c.n_embd,
        "intermediate_size": c.ffn_hidden,
        "num_hidden_layers": c.n_layer,
        "num_attention_heads": c.n_head,
        "num_key_value_heads": c.n_kv_head,
        "max_position_embeddings": c.block_size,
        "hidden_act": "relu2",
        "rms_norm_eps": c.norm_eps,
        "rope_parameters": {"rope_type": "default", "rope_theta": c.rope_theta},
        "final_logit_softcapping": c.softcap if c.softcap > 0 else None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "use_cache": True,
        "bos_token_id": special,
        "eos_token_id": special,
        "pad_token_id": special,
        "dtype": dtype,
    }


def hf_config(h: Gpt2Header, dtype: str) -> dict:
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": h.V,
        "n_positions": h.maxT,
        "n_ctx": h.maxT,
        "n_embd": h.C,
        "n_layer": h.L,
        "n_head": h.NH,
        "n_inner": None,
        "activation_function": "gelu_new",
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "layer_norm_epsilon": 1e-5,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "use_cache": True,
        "tie_word_embeddings": True,
        "bos_token_id": GPT2_VOCAB - 1,
        "eos_token_id": GPT2_VOCAB - 1,
        "torch_dtype": dtype,
    }


# ----------------------------------------------------------------------------- tokenizer files


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (used in vocab.json and merges.txt)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def merge_of(ranks: dict[bytes, int], token: bytes) -> tuple[bytes, bytes]:
    """The pair that forms `token`: BPE of its bytes using only merges ranked below it leaves two parts."""
    limit = ranks[token]
    parts = [bytes([b]) for b in token]
    while len(parts) > 2:
        best, best_i = None, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < limit and (best is None or r < best):
                best, best_i = r, i
        if best is None:
            break
        parts[best_i:best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    if len(parts) != 2:
        raise ExportError(f"token {token!r} (rank {limit}) is not a merge of two lower-ranked tokens")
    return parts[0], parts[1]


def gpt2_bpe() -> tuple[int, dict[bytes, int], list[tuple[bytes, bytes]], Callable[[bytes], str]]:
    """tiktoken's gpt2 encoding as BPE: its end-of-text id, its ranks, its merges in rank order (the merges take
    seconds) and the byte-level printer of a token (bytes_to_unicode) that vocab.json, merges.txt and GGUF use."""
    import tiktoken

    try:
        enc = tiktoken.get_encoding("gpt2")
    except Exception as e:  # tiktoken raises requests' errors when offline
        raise ExportError(f"cannot load tiktoken's gpt2 encoding (offline? set TIKTOKEN_CACHE_DIR): {type(e).__name__}") from None
    b2u = bytes_to_unicode()
    ranks = enc._mergeable_ranks
    merges = [merge_of(ranks, tok) for tok, _ in sorted(ranks.items(), key=lambda kv: kv[1]) if len(tok) > 1]
    return enc.eot_token, ranks, merges, lambda b: "".join(b2u[x] for x in b)


def write_tokenizer_files(out: Path) -> None:
    """vocab.json + merges.txt from tiktoken's gpt2 ranks, then transformers' fast tokenizer files from them."""
    from transformers import GPT2TokenizerFast

    eot, ranks, merges, show = gpt2_bpe()
    vocab = {show(tok): r for tok, r in ranks.items()}
    vocab["<|endoftext|>"] = eot
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (out / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{show(a)} {show(b)}\n" for a, b in merges), encoding="utf-8")
    tok = GPT2TokenizerFast(vocab=vocab, merges=[(show(a), show(b)) for a, b in merges],
                            unk_token="<|endoftext|>", bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    tok.model_max_length = 1024
    tok.save_pretrained(str(out))


# ----------------------------------------------------------------------------- writing the directory


def read_model(ckpt: Path, dtype: str) -> tuple[dict[str, np.ndarray], dict, int]:
    """The Hugging Face state dict and config.json of a GPT-2 checkpoint or a nanochat model file (by its magic),
    and its vocabulary size."""
    try:
        nanochat = read_magic(ckpt) == NANOCHAT_MAGIC
        if nanochat:
            c, tensors = read_nanochat(ckpt)
    except ModelFileError as e:
        raise ExportError(str(e)) from None
    if nanochat:
        print(f"{ckpt}: nanochat, L={c.n_layer} NH={c.n_head} NKV={c.n_kv_head} C={c.n_embd} FFN={c.ffn_hidden} "
              f"maxT={c.block_size} V={c.vocab_size} softcap={c.softcap:g}")
        return nanochat_state_dict(c, tensors, dtype), nanochat_hf_config(c, dtype), c.vocab_size
    h, tensors = read_checkpoint(ckpt)
    print(f"{ckpt}: version {h.version} ({'fp32' if h.version == 3 else 'bf16'}), "
          f"L={h.L} NH={h.NH} C={h.C} maxT={h.maxT} V={h.V} (padded {h.Vp})")
    return hf_state_dict(h, tensors, dtype), hf_config(h, dtype), h.V


def export(ckpt: Path, out: Path, dtype: str, tokenizer: bool) -> None:
    from safetensors.numpy import save_file

    sd, config, vocab_size = read_model(ckpt, dtype)
    if tokenizer and not (vocab_size == GPT2_VOCAB or (config["model_type"] == "nanochat" and vocab_size >= GPT2_VOCAB)):
        print(f"warning: vocab size {vocab_size} is not GPT-2's {GPT2_VOCAB}: no tokenizer files written", file=sys.stderr)
        tokenizer = False
    out.mkdir(parents=True, exist_ok=True)
    # everything goes to a scratch directory beside `out`, then each file is renamed into place
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp.", dir=out.parent))
    try:
        steps = ["model.safetensors", "config.json"] + (["tokenizer files"] if tokenizer else [])
        for step in tqdm(steps, desc="writing", unit="file"):
            if step == "model.safetensors":
                save_file(sd, str(tmp / "model.safetensors"), metadata={"format": "pt"})
            elif step == "config.json":
                (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
            else:
                write_tokenizer_files(tmp)
        for f in sorted(tmp.iterdir()):
            with f.open("rb") as fh:
                os.fsync(fh.fileno())
            os.chmod(f, 0o644)
            os.replace(f, out / f.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    n = sum(a.size for a in sd.values())
    print(f"wrote {out}/ ({n:,} parameters, {dtype}{', tokenizer' if tokenizer else ''})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Export an llmc checkpoint as a Hugging Face GPT-2 model directory (a "
                                 "nanochat model file as a NanoChat one).")
    ap.add_argument("-i", "--input", type=Path, required=True, help="llmc checkpoint (e.g. gpt2_124M.bin or nanochat_d2.bin, fp32 or bf16)")
    ap.add_argument("-o", "--output", type=Path, required=True, help="output directory (created; files in it are replaced)")
    ap.add_argument("--dtype", choices=["float32", "float16"], default="float32",
                    help="dtype of the saved weights (default float32; bf16 checkpoints are exported exactly in float32)")
    ap.add_argument("--no-tokenizer", action="store_true", help="do not write the tokenizer files")
    args = ap.parse_args(argv)
    if not args.input.is_file():
        print(f"error: {args.input}: checkpoint not found", file=sys.stderr)
        return 1
    if args.output.exists() and not args.output.is_dir():
        print(f"error: {args.output}: exists and is not a directory", file=sys.stderr)
        return 1
    try:
        export(args.input, args.output, args.dtype, not args.no_tokenizer)
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
