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

import gpt2_family
from model_file import Gpt2Header, ModelFileError, read_gpt2

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


def hf_state_dict(h: Gpt2Header, t: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """Hugging Face GPT-2 names (our per-layer names are theirs: gpt2_family.LAYER_PARAMETERS). The per-layer matrices
    (3-D in the file) are Conv1D weights there, stored (in, out): transposed from llmc's (out, in)."""
    def cast(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=np.float32).astype(np.float16 if dtype == "float16" else np.float32)

    sd = {"transformer.wte.weight": cast(t["wte"][: h.V]), "transformer.wpe.weight": cast(t["wpe"])}
    for l in tqdm(range(h.L), desc="layers", unit="layer", disable=h.L < 4):
        for name, hf_name in gpt2_family.LAYER_PARAMETERS.items():
            sd[f"transformer.h.{l}.{hf_name}"] = cast(t[name][l].T if t[name].ndim == 3 else t[name][l])
    sd["transformer.ln_f.weight"] = cast(t["lnfw"])
    sd["transformer.ln_f.bias"] = cast(t["lnfb"])
    return sd


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


def export(ckpt: Path, out: Path, dtype: str, tokenizer: bool) -> None:
    from safetensors.numpy import save_file

    h, tensors = read_checkpoint(ckpt)
    print(f"{ckpt}: version {h.version} ({'fp32' if h.version == 3 else 'bf16'}), "
          f"L={h.L} NH={h.NH} C={h.C} maxT={h.maxT} V={h.V} (padded {h.Vp})")
    if tokenizer and h.V != GPT2_VOCAB:
        print(f"warning: vocab size {h.V} is not GPT-2's {GPT2_VOCAB}: no tokenizer files written", file=sys.stderr)
        tokenizer = False
    out.mkdir(parents=True, exist_ok=True)
    # everything goes to a scratch directory beside `out`, then each file is renamed into place
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp.", dir=out.parent))
    try:
        sd = hf_state_dict(h, tensors, dtype)
        steps = ["model.safetensors", "config.json"] + (["tokenizer files"] if tokenizer else [])
        for step in tqdm(steps, desc="writing", unit="file"):
            if step == "model.safetensors":
                save_file(sd, str(tmp / "model.safetensors"), metadata={"format": "pt"})
            elif step == "config.json":
                (tmp / "config.json").write_text(json.dumps(hf_config(h, dtype), indent=2) + "\n")
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
    ap = argparse.ArgumentParser(description="Export an llmc checkpoint as a Hugging Face GPT-2 model directory.")
    ap.add_argument("-i", "--input", type=Path, required=True, help="llmc checkpoint (e.g. gpt2_124M.bin, fp32 or bf16)")
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
