"""
Exports an llmc model file to GGUF, the format llama.cpp loads: our GPT-2 checkpoints (gpt2_124M.bin,
magic 20240326, fp32 or bf16) as architecture `gpt2`, and our Llama 3 model files (llama3_*.bin, magic
20240803) as architecture `llama`, with the tensor names, hyperparameters and tokenizer (tokenizer.ggml.*)
that llama.cpp expects:

    python dev/eval/export_gguf.py -i gpt2_124M.bin -o gpt2_124M.gguf
    python dev/eval/export_gguf.py -i llama3_d2.bin -o llama3_d2.gguf --dtype bf16 --tokenizer dev/data/test_tokenizer
    python dev/eval/export_gguf.py -i llama3_d2.bin -o llama3_d2.gguf --verify "To be, or not to be"

Matmul weights are written in --dtype (f32, f16 or bf16); 1-D tensors (norm weights, biases) and RoPE
factors stay f32, as llama.cpp's own converter writes them. For llama the q and k projection rows are
permuted the way llama.cpp's Hugging Face converter does (our rotate-half pairs (i, i + HS/2) become
adjacent pairs (2i, 2i+1), the layout of llama.cpp's rope), Llama 3.1 frequency scaling is stored as the
`rope_freqs.weight` factors, and a tied head stores no `output.weight` (llama.cpp then uses token_embd).

--verify recomputes the logits of a prompt from the GGUF file alone (gguf's reader, numpy, float64,
undoing the q/k permutation) and compares them with our PyTorch model's (train_gpt2.py / train_llama3.py)
on the same weights: within 1e-4 for f32, relative to the logits' scale for f16/bf16. Exit 1 if not.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np

import pyllmc.families.gpt2 as gpt2_family
from export_hf import ExportError, gpt2_bpe
from pyllmc.families.gpt2 import GPT2, Gpt2Header, read_gpt2
from pyllmc.families.llama3 import HUB_TOKENIZER, LLAMA3, LlamaConfig, read_llama3
from pyllmc.model_file import ModelFileError, read_magic

GPT2_MAGIC, LLAMA3_MAGIC = GPT2.model_magic, LLAMA3.model_magic

GPT2_VOCAB, GPT2_EOT = gpt2_family.VOCAB_SIZE, gpt2_family.EOT
DTYPES = ("f32", "f16", "bf16")
TOKEN_NORMAL, TOKEN_CONTROL = 1, 3  # llama.cpp's token types


# ----------------------------------------------------------------------------- tensors


def gguf_dtype_tensor(a: np.ndarray, dtype: str):
    """(data, raw_dtype) for GGUFWriter.add_tensor: matmul weights in `dtype`, 1-D tensors always f32."""
    import gguf

    a = np.ascontiguousarray(a, dtype=np.float32)
    if a.ndim == 1 or dtype == "f32":
        return a, None
    if dtype == "f16":
        return a.astype(np.float16), None
    return gguf.quants.quantize(a, gguf.GGMLQuantizationType.BF16), gguf.GGMLQuantizationType.BF16


def permute_rotary(w: np.ndarray, n_head: int) -> np.ndarray:
    """Rows of a q or k projection (n_head * HS, C) from rotate-half order to llama.cpp's adjacent-pair order."""
    HS = w.shape[0] // n_head
    return w.reshape(n_head, 2, HS // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_rotary(w: np.ndarray, n_head: int) -> np.ndarray:
    """The inverse of permute_rotary."""
    HS = w.shape[0] // n_head
    return w.reshape(n_head, HS // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gpt2_tensors(h: Gpt2Header, t: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """llama.cpp's gpt2 tensor names; wte without its padding rows, repeated as output.weight (as llama.cpp's converter)."""
    out = {"token_embd.weight": t["wte"][: h.V], "position_embd.weight": t["wpe"]}
    names = {"ln1w": "attn_norm.weight", "ln1b": "attn_norm.bias", "qkvw": "attn_qkv.weight", "qkvb": "attn_qkv.bias",
             "attprojw": "attn_output.weight", "attprojb": "attn_output.bias", "ln2w": "ffn_norm.weight",
             "ln2b": "ffn_norm.bias", "fcw": "ffn_up.weight", "fcb": "ffn_up.bias", "fcprojw": "ffn_down.weight",
             "fcprojb": "ffn_down.bias"}
    for l in range(h.L):
        for ours, theirs in names.items():
            out[f"blk.{l}.{theirs}"] = t[ours][l]
    out["output_norm.weight"], out["output_norm.bias"] = t["lnfw"], t["lnfb"]
    out["output.weight"] = out["token_embd.weight"]
    return out


def llama_rope_factors(c: LlamaConfig) -> np.ndarray:
    """llama.cpp's rope_freqs: per frequency, the divisor Llama 3.1's scaling applies (1 short, factor long)."""
    HS = c.head_size
    factors = []
    low_wavelen, high_wavelen = c.original_max_position / c.low_freq_factor, c.original_max_position / c.high_freq_factor
    for i in range(0, HS, 2):
        wavelen = 2 * math.pi * c.rope_theta ** (i / HS)
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(c.rope_factor)
        else:
            smooth = (c.original_max_position / wavelen - c.low_freq_factor) / (c.high_freq_factor - c.low_freq_factor)
            factors.append(1.0 / ((1 - smooth) / c.rope_factor + smooth))
    return np.asarray(factors, dtype=np.float32)


def llama_tensors(c: LlamaConfig, t: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """llama.cpp's llama tensor names from our Llama 3 model file's tensors: q and k rows permuted."""
    HS = c.head_size
    out = {"token_embd.weight": t["wte"]}
    for l in range(c.n_layer):
        q, k, v = np.split(t["qkvw"][l], [c.n_head * HS, (c.n_head + c.n_kv_head) * HS])
        out.update({f"blk.{l}.attn_norm.weight": t["ln1w"][l], f"blk.{l}.attn_q.weight": permute_rotary(q, c.n_head),
                    f"blk.{l}.attn_k.weight": permute_rotary(k, c.n_kv_head), f"blk.{l}.attn_v.weight": v,
                    f"blk.{l}.attn_output.weight": t["attprojw"][l], f"blk.{l}.ffn_norm.weight": t["ln2w"][l],
                    f"blk.{l}.ffn_gate.weight": t["fcw"][l], f"blk.{l}.ffn_up.weight": t["fcw2"][l],
                    f"blk.{l}.ffn_down.weight": t["fcprojw"][l]})
    out["output_norm.weight"] = t["lnfw"]
    if not c.tied_embeddings:
        out["output.weight"] = t["lm_head"]
    if c.use_scaled_rope:
        out["rope_freqs.weight"] = llama_rope_factors(c)
    return out


# ----------------------------------------------------------------------------- tokenizers


@lru_cache(maxsize=1)
def gpt2_vocab() -> tuple[list[str], list[int], list[str]]:
    """tokens (byte-level strings), token types and merges of tiktoken's gpt2 encoding (the merges take seconds)."""
    _, ranks, pairs, show = gpt2_bpe()
    tokens = [""] * GPT2_VOCAB
    for tok, r in ranks.items():
        tokens[r] = show(tok)
    tokens[GPT2_EOT] = "<|endoftext|>"
    types = [TOKEN_NORMAL] * GPT2_VOCAB
    types[GPT2_EOT] = TOKEN_CONTROL
    merges = [f"{show(a)} {show(b)}" for a, b in pairs]
    return tokens, types, merges


def llama_vocab(tokenizer: str) -> tuple[list[str], list[int], list[str], int, int, str]:
    """tokens, token types, merges, BOS id, end-of-text id and llama.cpp's pre-tokenizer name of a Llama 3 tokenizer."""
    from pyllmc.llama3_tokenizer import load_llama3_tokenizer
    from pyllmc.token_shards import DataError

    try:
        tok = load_llama3_tokenizer(tokenizer)
    except DataError as e:
        raise ExportError(str(e)) from None
    spec = json.loads(tok.tok.to_str())
    special = {i for i, t in tok.tok.get_added_tokens_decoder().items() if t.special}
    tokens = [tok.tok.id_to_token(i) for i in range(tok.vocab_size)]
    types = [TOKEN_CONTROL if i in special else TOKEN_NORMAL for i in range(tok.vocab_size)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"].get("merges", [])]
    pre = spec.get("pre_tokenizer") or {}
    # Llama 3's tokenizer splits with its own regex (a Sequence of Split + ByteLevel); a plain ByteLevel is GPT-2's
    pre_name = "gpt-2" if pre.get("type") == "ByteLevel" else "llama-bpe"
    return tokens, types, merges, tok.bos, tok.eot, pre_name


# ----------------------------------------------------------------------------- writing


def write_gguf(path: Path, arch: str, metadata, tensors: dict[str, np.ndarray], dtype: str) -> None:
    """GGUF via gguf's writer, written beside `path` and renamed into place (a crash leaves no half file)."""
    import gguf

    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    try:
        w = gguf.GGUFWriter(str(tmp), arch)
        metadata(w)
        w.add_file_type({"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                         "bf16": gguf.LlamaFileType.MOSTLY_BF16}[dtype])
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
        for name, a in tensors.items():
            data, raw_dtype = gguf_dtype_tensor(a, dtype)
            w.add_tensor(name, data, raw_dtype=raw_dtype)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        with tmp.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        raise ExportError(f"{path}: cannot write ({e.strerror or e})") from None
    finally:
        tmp.unlink(missing_ok=True)


def export_gpt2(src: Path, out: Path, dtype: str) -> None:
    h, t = read_gpt2(src)
    if h.V != GPT2_VOCAB:
        raise ExportError(f"{src}: vocab size {h.V} is not GPT-2's {GPT2_VOCAB}: no tokenizer to store with it")
    tokens, types, merges = gpt2_vocab()

    def metadata(w) -> None:
        w.add_name(src.stem)
        w.add_context_length(h.maxT)
        w.add_embedding_length(h.C)
        w.add_feed_forward_length(4 * h.C)
        w.add_block_count(h.L)
        w.add_head_count(h.NH)
        w.add_layer_norm_eps(1e-5)
        w.add_vocab_size(h.V)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("gpt-2")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_bos_token_id(GPT2_EOT)
        w.add_eos_token_id(GPT2_EOT)

    write_gguf(out, "gpt2", metadata, gpt2_tensors(h, t), dtype)
    print(f"wrote {out} (gpt2, L={h.L} NH={h.NH} C={h.C} V={h.V}, {dtype})")


def export_llama(src: Path, out: Path, dtype: str, tokenizer: str) -> None:
    c, t = read_llama3(src)
    tokens, types, merges, bos, eot, pre = llama_vocab(tokenizer)
    if len(tokens) != c.vocab_size:
        raise ExportError(f"the tokenizer has {len(tokens)} tokens but {src} has a vocab of {c.vocab_size}")

    def metadata(w) -> None:
        w.add_name(src.stem)
        w.add_context_length(c.block_size)
        w.add_embedding_length(c.n_embd)
        w.add_feed_forward_length(c.ffn_hidden)
        w.add_block_count(c.n_layer)
        w.add_head_count(c.n_head)
        w.add_head_count_kv(c.n_kv_head)
        w.add_rope_freq_base(c.rope_theta)
        w.add_rope_dimension_count(c.head_size)
        w.add_layer_norm_rms_eps(c.norm_eps)
        w.add_vocab_size(c.vocab_size)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_bos_token_id(bos)
        w.add_eos_token_id(eot)
        w.add_add_bos_token(True)

    write_gguf(out, "llama", metadata, llama_tensors(c, t), dtype)
    print(f"wrote {out} (llama, L={c.n_layer} NH={c.n_head} NKV={c.n_kv_head} C={c.n_embd} FFN={c.ffn_hidden} "
          f"V={c.vocab_size}{', scaled RoPE' if c.use_scaled_rope else ''}{', tied' if c.tied_embeddings else ''}, {dtype})")


def export(src: Path, out: Path, dtype: str, tokenizer: str) -> str:
    """Export src to out; returns the architecture written."""
    magic = read_magic(src)
    if magic == GPT2_MAGIC:
        export_gpt2(src, out, dtype)
        return "gpt2"
    if magic == LLAMA3_MAGIC:
        export_llama(src, out, dtype, tokenizer)
        return "llama"
    raise ExportError(f"{src}: wrong magic {magic}, expected {GPT2_MAGIC} (GPT-2 model) or {LLAMA3_MAGIC} (Llama 3 model)")


# ----------------------------------------------------------------------------- reading back (the check)


def read_gguf(reader) -> tuple[dict[str, object], dict[str, np.ndarray]]:
    """(scalar and string metadata, tensors as float64 in numpy shape) from a gguf.GGUFReader of the file."""
    import gguf

    # scalars and strings only: decoding the tokenizer's arrays (50k strings) takes seconds and the forward pass needs none
    meta = {name: field.contents() for name, field in reader.fields.items() if len(field.types) == 1}
    tensors = {t.name: gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64) for t in reader.tensors}
    return meta, tensors


def softmax_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Causal attention per head: q, k, v (nh, T, hs) -> (nh, T, hs)."""
    T = q.shape[1]
    att = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
    att = np.where(np.tril(np.ones((T, T), dtype=bool)), att, -np.inf)
    att = np.exp(att - att.max(-1, keepdims=True))
    return (att / att.sum(-1, keepdims=True)) @ v


def gpt2_logits(meta: dict, t: dict[str, np.ndarray], tokens: list[int]) -> np.ndarray:
    """GPT-2 forward pass (T, V) from the GGUF tensors and metadata alone."""
    L, NH, eps = int(meta["gpt2.block_count"]), int(meta["gpt2.attention.head_count"]), float(meta["gpt2.attention.layer_norm_epsilon"])
    T = len(tokens)

    def ln(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
        mu = x.mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * w + b

    x = t["token_embd.weight"][tokens] + t["position_embd.weight"][:T]
    C = x.shape[1]
    for l in range(L):
        p = lambda n: t[f"blk.{l}.{n}"]  # noqa: E731
        qkv = ln(x, p("attn_norm.weight"), p("attn_norm.bias")) @ p("attn_qkv.weight").T + p("attn_qkv.bias")
        q, k, v = (a.reshape(T, NH, C // NH).transpose(1, 0, 2) for a in np.split(qkv, 3, axis=1))
        y = softmax_attention(q, k, v).transpose(1, 0, 2).reshape(T, C)
        x = x + y @ p("attn_output.weight").T + p("attn_output.bias")
        h = ln(x, p("ffn_norm.weight"), p("ffn_norm.bias")) @ p("ffn_up.weight").T + p("ffn_up.bias")
        h = 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))
        x = x + h @ p("ffn_down.weight").T + p("ffn_down.bias")
    x = ln(x, t["output_norm.weight"], t["output_norm.bias"])
    return x @ t.get("output.weight", t["token_embd.weight"]).T


def llama_logits(meta: dict, t: dict[str, np.ndarray], tokens: list[int]) -> np.ndarray:
    """Llama forward pass (T, V) from the GGUF tensors and metadata alone (q/k rows un-permuted to rotate-half)."""
    L, NH, NKV = (int(meta[f"llama.{k}"]) for k in ("block_count", "attention.head_count", "attention.head_count_kv"))
    eps, theta = float(meta["llama.attention.layer_norm_rms_epsilon"]), float(meta["llama.rope.freq_base"])
    HS = int(meta["llama.rope.dimension_count"])
    T = len(tokens)
    inv_freq = theta ** (-np.arange(0, HS, 2) / HS) / t.get("rope_freqs.weight", np.ones(HS // 2))
    angles = np.arange(T)[:, None] * inv_freq[None, :]
    cos, sin = np.cos(np.concatenate([angles, angles], 1)), np.sin(np.concatenate([angles, angles], 1))  # (T, HS)

    def rms(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * w

    def rope(x: np.ndarray) -> np.ndarray:  # (nh, T, HS), pairs (i, i + HS/2)
        return x * cos + np.concatenate([-x[..., HS // 2 :], x[..., : HS // 2]], -1) * sin

    x = t["token_embd.weight"][tokens]
    C = x.shape[1]
    for l in range(L):
        p = lambda n: t[f"blk.{l}.{n}"]  # noqa: E731
        h = rms(x, p("attn_norm.weight"))
        q = (h @ unpermute_rotary(p("attn_q.weight"), NH).T).reshape(T, NH, HS).transpose(1, 0, 2)
        k = (h @ unpermute_rotary(p("attn_k.weight"), NKV).T).reshape(T, NKV, HS).transpose(1, 0, 2)
        v = (h @ p("attn_v.weight").T).reshape(T, NKV, HS).transpose(1, 0, 2)
        k, v = np.repeat(rope(k), NH // NKV, axis=0), np.repeat(v, NH // NKV, axis=0)
        y = softmax_attention(rope(q), k, v).transpose(1, 0, 2).reshape(T, C)
        x = x + y @ p("attn_output.weight").T
        h = rms(x, p("ffn_norm.weight"))
        gate = h @ p("ffn_gate.weight").T
        x = x + (gate / (1 + np.exp(-gate)) * (h @ p("ffn_up.weight").T)) @ p("ffn_down.weight").T
    x = rms(x, t["output_norm.weight"])
    return x @ t.get("output.weight", t["token_embd.weight"]).T


def gguf_logits(reader, tokens: list[int]) -> np.ndarray:
    """The forward pass of the architecture the file names, from a gguf.GGUFReader of it."""
    meta, t = read_gguf(reader)
    arch = meta["general.architecture"]
    return {"gpt2": gpt2_logits, "llama": llama_logits}[arch](meta, t, tokens)


def reference_logits(src: Path, tokens: list[int]) -> np.ndarray:
    """Our PyTorch model's logits (T, V) on the model file's weights."""
    import torch
    import train_gpt2
    import train_llama3

    read_model = train_llama3.read_model if read_magic(src) == LLAMA3_MAGIC else train_gpt2.read_model
    try:
        model = read_model(src)
    except train_gpt2.UserError as e:
        raise ExportError(str(e)) from None
    idx = torch.tensor([tokens])
    model.eval()
    with torch.no_grad():
        logits, _ = model(idx, idx)
    return logits[0].double().numpy()


def prompt_tokens(src: Path, prompt: str, tokenizer: str) -> list[int]:
    if read_magic(src) == LLAMA3_MAGIC:
        from pyllmc.llama3_tokenizer import load_llama3_tokenizer

        tok = load_llama3_tokenizer(tokenizer)
        return [tok.bos, *tok.encode(prompt)]
    import tiktoken

    return [GPT2_EOT, *tiktoken.get_encoding("gpt2").encode_ordinary(prompt)]


def verify(src: Path, out: Path, dtype: str, prompt: str, tokenizer: str, reader=None) -> float:
    """Largest |GGUF logit - our logit| for the prompt; ExportError beyond the tolerance of `dtype`. `reader`: a
    gguf.GGUFReader of `out` already opened (opening one takes seconds for a 50k-token vocabulary)."""
    import gguf

    tokens = prompt_tokens(src, prompt, tokenizer)
    ours, theirs = reference_logits(src, tokens), gguf_logits(reader or gguf.GGUFReader(str(out)), tokens)
    diff = float(np.abs(ours - theirs).max())
    tol = 1e-4 if dtype == "f32" else 5e-2 * float(np.abs(ours).max())
    print(f"verify: {len(tokens)} prompt tokens, max |logit difference| {diff:.3e} (tolerance {tol:.1e})")
    if not diff <= tol:
        raise ExportError(f"{out}: the GGUF logits differ from the model's by {diff:.3e} > {tol:.1e}")
    return diff


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-i", "--input", type=Path, required=True, help="llmc model file: GPT-2 (gpt2_*.bin) or Llama 3 (llama3_*.bin)")
    ap.add_argument("-o", "--output", type=Path, required=True, help="the .gguf file to write")
    ap.add_argument("--dtype", choices=DTYPES, default="f32", help="type of the matmul weights (1-D tensors stay f32)")
    ap.add_argument("--tokenizer", default="", help="Llama 3 only: tokenizer.json or its directory (default: the hub's "
                    f"{HUB_TOKENIZER}); GPT-2 uses tiktoken's gpt2")
    ap.add_argument("--verify", default="", metavar="PROMPT",
                    help="after writing, recompute this prompt's logits from the GGUF file alone and compare")
    args = ap.parse_args(argv)
    try:
        export(args.input, args.output, args.dtype, args.tokenizer)
        if args.verify:
            verify(args.input, args.output, args.dtype, args.verify, args.tokenizer)
    except (ExportError, ModelFileError) as e:  # a bad model file: model_file.py's line
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
