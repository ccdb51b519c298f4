"""
Exports an llmc model file (fp32 version 3 or bf16 version 5) as a Hugging Face model directory that transformers'
from_pretrained loads, for every family whose registry row (pyllmc.families.REGISTRY) has an `hf_export`; the file's
magic tells the family:

    python dev/eval/export_hf.py -i gpt2_124M.bin -o hf_gpt2_124M
    python dev/eval/export_hf.py -i log124M/model_00010000.bin -o hf_out --dtype float16
    python dev/eval/export_hf.py -i MODEL.bin -o hf_out --no-tokenizer

The directory holds config.json and model.safetensors under transformers' names, as the family's module writes them
(pyllmc/families/<name>.py's hf_export: its architecture, how fused tensors split, whether lm_head is tied), and GPT-2's
tokenizer files (vocab.json, merges.txt, tokenizer.json, ..., derived from tiktoken's gpt2 encoding) when the family
says they fit the model's vocabulary. Each family's reference reads the directory back (`python train_<name>.py
--model <dir> --write_tensors 1 --num_iterations 0`).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from pyllmc.families import REGISTRY, by_magic
from pyllmc.model_file import ModelFileError
from pyllmc.reference.common import UserError
from pyllmc.reference.tokenizer_files import gpt2_bpe


class ExportError(Exception):
    """A problem with the input that is reported as one line."""


# ----------------------------------------------------------------------------- tokenizer files


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


def read_checkpoint(ckpt: Path) -> tuple[Any, Any, dict[str, np.ndarray]]:
    """(its registry row, config, tensors) of a model file of a family that has an export (told by its magic:
    pyllmc.families); anything else, or a damaged file, is one ExportError line."""
    try:
        row = by_magic(ckpt)
        if row.hf_export is None:
            exported = ", ".join(r.name for r in REGISTRY if r.hf_export)
            raise ExportError(f"{ckpt}: a {row.name} model file: no Hugging Face export for it (there are for {exported})")
        config, tensors = row.read_model(ckpt)
    except ModelFileError as e:
        raise ExportError(str(e)) from None
    return row, config, tensors


def read_model(ckpt: Path, dtype: str) -> tuple[dict[str, np.ndarray], dict, bool]:
    """The Hugging Face state dict and config.json of a model file of a family that has an export, and whether
    GPT-2's tokenizer files fit its vocabulary."""
    row, config, tensors = read_checkpoint(ckpt)
    sd, hf_config, line, tokenizer_fits = row.hf_export(config, tensors, dtype)
    print(f"{ckpt}: {line}")
    return sd, hf_config, tokenizer_fits


def export(ckpt: Path, out: Path, dtype: str, tokenizer: bool) -> None:
    from safetensors.numpy import save_file

    sd, config, tokenizer_fits = read_model(ckpt, dtype)
    if tokenizer and not tokenizer_fits:
        print(f"warning: GPT-2's tokenizer files do not fit this model (vocab size {config['vocab_size']}, "
              f"{config['architectures'][0]}): no tokenizer files written", file=sys.stderr)
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
    exported = [row.name for row in REGISTRY if row.hf_export]
    ap = argparse.ArgumentParser(description="Export an llmc model file as a Hugging Face model directory (the families "
                                 f"with an export: {', '.join(exported)}; told apart by the file's magic).")
    ap.add_argument("-i", "--input", type=Path, required=True,
                    help=f"llmc model file (e.g. {' or '.join(f'{name}_d2.bin' for name in exported)}, fp32 or bf16)")
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
    except (ExportError, UserError) as e:  # UserError: tiktoken's gpt2 encoding cannot be loaded
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
