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

import numpy as np
from tqdm import tqdm

MODEL_MAGIC = 20240326
GPT2_VOCAB = 50257


class ExportError(Exception):
    """A problem with the input that is reported as one line."""


# ----------------------------------------------------------------------------- reading the checkpoint


def read_checkpoint(path: Path) -> tuple[dict[str, int], dict[str, np.ndarray]]:
    """Header fields and the 16 tensors (float32) of an llmc checkpoint, validated like the C loader."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            raw_header = f.read(1024)
            if len(raw_header) < 1024:
                raise ExportError(f"{path}: not a model checkpoint file (file too short for the 1024-byte header)")
            h = np.frombuffer(raw_header, dtype="<i4")
            if h[0] != MODEL_MAGIC:
                raise ExportError(f"{path}: not a model checkpoint file (magic {h[0]}, expected {MODEL_MAGIC})")
            if h[1] not in (3, 5):
                raise ExportError(f"{path}: unsupported model checkpoint version {h[1]} (expected 3 = fp32 or 5 = bf16)")
            cfg = {k: int(h[i]) for i, k in enumerate(["magic", "version", "maxT", "V", "L", "NH", "C", "Vp"])}
            for k in ("maxT", "V", "L", "NH", "C", "Vp"):
                if not 0 < cfg[k] < 1 << 24:
                    raise ExportError(f"{path}: header field {k} = {cfg[k]} out of range")
            if cfg["C"] % cfg["NH"]:
                raise ExportError(f"{path}: header field C = {cfg['C']} is not divisible by NH = {cfg['NH']}")
            if cfg["Vp"] < cfg["V"]:
                raise ExportError(f"{path}: header field Vp = {cfg['Vp']} is smaller than V = {cfg['V']}")
            shapes = param_shapes(cfg)
            n = sum(int(np.prod(s)) for s in shapes.values())
            itemsize = 4 if cfg["version"] == 3 else 2
            expected = 1024 + n * itemsize
            if size != expected:
                raise ExportError(f"{path}: file size {size} bytes does not match the header "
                                  f"(expected {expected} for {n} parameters of {itemsize} bytes)")
            flat = np.fromfile(f, dtype="<f4" if itemsize == 4 else "<u2", count=n)
    except OSError as e:
        raise ExportError(f"{path}: cannot read ({e.strerror or e})") from None
    if itemsize == 2:  # bf16 -> fp32: the bf16 bits are the high half of the fp32 bits
        flat = (flat.astype(np.uint32) << 16).view(np.float32)
    tensors, at = {}, 0
    for name, shape in shapes.items():
        k = int(np.prod(shape))
        tensors[name] = flat[at:at + k].reshape(shape)
        at += k
    return cfg, tensors


def param_shapes(cfg: dict[str, int]) -> dict[str, tuple[int, ...]]:
    """The 16 checkpoint tensors in file order (llm.c-compatible layout)."""
    L, C, maxT, Vp = cfg["L"], cfg["C"], cfg["maxT"], cfg["Vp"]
    return {
        "wte": (Vp, C), "wpe": (maxT, C), "ln1w": (L, C), "ln1b": (L, C), "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C),
        "attprojw": (L, C, C), "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C), "fcw": (L, 4 * C, C),
        "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C), "lnfw": (C,), "lnfb": (C,),
    }


# ----------------------------------------------------------------------------- Hugging Face layout


# llmc's per-layer tensors -> their Hugging Face names under transformer.h.{l}., in the order they are written;
# True marks a Conv1D weight, stored (in, out) by Hugging Face, i.e. transposed from llmc's (out, in)
HF_LAYER_TENSORS: dict[str, tuple[str, bool]] = {
    "ln1w": ("ln_1.weight", False), "ln1b": ("ln_1.bias", False),
    "qkvw": ("attn.c_attn.weight", True), "qkvb": ("attn.c_attn.bias", False),
    "attprojw": ("attn.c_proj.weight", True), "attprojb": ("attn.c_proj.bias", False),
    "ln2w": ("ln_2.weight", False), "ln2b": ("ln_2.bias", False),
    "fcw": ("mlp.c_fc.weight", True), "fcb": ("mlp.c_fc.bias", False),
    "fcprojw": ("mlp.c_proj.weight", True), "fcprojb": ("mlp.c_proj.bias", False),
}


def hf_state_dict(cfg: dict[str, int], t: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """Hugging Face GPT-2 names (HF_LAYER_TENSORS for the per-layer ones), Conv1D weights transposed."""
    def cast(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=np.float32).astype(np.float16 if dtype == "float16" else np.float32)

    sd = {"transformer.wte.weight": cast(t["wte"][: cfg["V"]]), "transformer.wpe.weight": cast(t["wpe"])}
    for l in tqdm(range(cfg["L"]), desc="layers", unit="layer", disable=cfg["L"] < 4):
        for name, (hf_name, conv1d) in HF_LAYER_TENSORS.items():
            sd[f"transformer.h.{l}.{hf_name}"] = cast(t[name][l].T if conv1d else t[name][l])
    sd["transformer.ln_f.weight"] = cast(t["lnfw"])
    sd["transformer.ln_f.bias"] = cast(t["lnfb"])
    return sd


def hf_config(cfg: dict[str, int], dtype: str) -> dict:
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": cfg["V"],
        "n_positions": cfg["maxT"],
        "n_ctx": cfg["maxT"],
        "n_embd": cfg["C"],
        "n_layer": cfg["L"],
        "n_head": cfg["NH"],
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


def write_tokenizer_files(out: Path) -> None:
    """vocab.json + merges.txt from tiktoken's gpt2 ranks, then transformers' fast tokenizer files from them."""
    import tiktoken
    from transformers import GPT2TokenizerFast

    try:
        enc = tiktoken.get_encoding("gpt2")
    except Exception as e:  # tiktoken raises requests' errors when offline
        raise ExportError(f"cannot load tiktoken's gpt2 encoding (offline? set TIKTOKEN_CACHE_DIR): {type(e).__name__}") from None
    b2u = bytes_to_unicode()
    show = lambda b: "".join(b2u[x] for x in b)  # noqa: E731
    ranks = enc._mergeable_ranks
    vocab = {show(tok): r for tok, r in ranks.items()}
    vocab["<|endoftext|>"] = enc.eot_token
    merges = [merge_of(ranks, tok) for tok, _ in sorted(ranks.items(), key=lambda kv: kv[1]) if len(tok) > 1]
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (out / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{show(a)} {show(b)}\n" for a, b in merges), encoding="utf-8")
    tok = GPT2TokenizerFast(vocab=vocab, merges=[(show(a), show(b)) for a, b in merges],
                            unk_token="<|endoftext|>", bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    tok.model_max_length = 1024
    tok.save_pretrained(str(out))


# ----------------------------------------------------------------------------- writing the directory


def export(ckpt: Path, out: Path, dtype: str, tokenizer: bool) -> None:
    from safetensors.numpy import save_file

    cfg, tensors = read_checkpoint(ckpt)
    print(f"{ckpt}: version {cfg['version']} ({'fp32' if cfg['version'] == 3 else 'bf16'}), "
          f"L={cfg['L']} NH={cfg['NH']} C={cfg['C']} maxT={cfg['maxT']} V={cfg['V']} (padded {cfg['Vp']})")
    if tokenizer and cfg["V"] != GPT2_VOCAB:
        print(f"warning: vocab size {cfg['V']} is not GPT-2's {GPT2_VOCAB}: no tokenizer files written", file=sys.stderr)
        tokenizer = False
    out.mkdir(parents=True, exist_ok=True)
    # everything goes to a scratch directory beside `out`, then each file is renamed into place
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp.", dir=out.parent))
    try:
        sd = hf_state_dict(cfg, tensors, dtype)
        steps = ["model.safetensors", "config.json"] + (["tokenizer files"] if tokenizer else [])
        for step in tqdm(steps, desc="writing", unit="file"):
            if step == "model.safetensors":
                save_file(sd, str(tmp / "model.safetensors"), metadata={"format": "pt"})
            elif step == "config.json":
                (tmp / "config.json").write_text(json.dumps(hf_config(cfg, dtype), indent=2) + "\n")
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
