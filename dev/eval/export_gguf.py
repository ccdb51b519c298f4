"""
Exports an llmc model file to GGUF, the format llama.cpp loads, for every family whose registry row
(pyllmc.families.REGISTRY) has a `gguf_export` (GPT-2 as architecture `gpt2`, Llama 3 as `llama`); the file's magic
tells the family. The family's module (pyllmc/families/<name>.py's gguf_model) gives the tensor names,
hyperparameters and tokenizer (tokenizer.ggml.*) that llama.cpp expects, and how its tensors are rearranged (e.g.
Llama 3's q and k rows permuted to llama.cpp's rope layout, its scaled RoPE as `rope_freqs.weight`):

    python dev/eval/export_gguf.py -i gpt2_124M.bin -o gpt2_124M.gguf
    python dev/eval/export_gguf.py -i llama3_d2.bin -o llama3_d2.gguf --dtype bf16 --tokenizer dev/data/test_tokenizer
    python dev/eval/export_gguf.py -i llama3_d2.bin -o llama3_d2.gguf --verify "To be, or not to be"

Matmul weights are written in --dtype (f32, f16 or bf16); 1-D tensors (norm weights, biases) and RoPE
factors stay f32, as llama.cpp's own converter writes them.

--verify recomputes the logits of a prompt from the GGUF file alone (gguf's reader, numpy, float64: the family's
gguf_logits) and compares them with the family's PyTorch reference (train_<name>.py) on the same weights: within
1e-4 for f32, relative to the logits' scale for f16/bf16. Exit 1 if not.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

import numpy as np

from export_hf import ExportError
from pyllmc.families import REGISTRY, Registered
from pyllmc.gguf_common import GgufError
from pyllmc.model_file import ModelFileError, read_magic
from pyllmc.reference.common import UserError

DTYPES = ("f32", "f16", "bf16")
EXPORTED = tuple(row for row in REGISTRY if row.gguf_export is not None)  # the families with a GGUF export


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


def exported_family(src: Path) -> Registered:
    """The registry row of the model file's family, told by its magic; ExportError where it has no GGUF export."""
    magic = read_magic(src)
    exported = {row.family.model_magic: row for row in EXPORTED}
    if magic not in exported:
        expected = " or ".join(f"{row.family.model_magic} ({row.gguf_export.model_name})" for row in EXPORTED)
        raise ExportError(f"{src}: wrong magic {magic}, expected {expected}")
    return exported[magic]


def export(src: Path, out: Path, dtype: str, tokenizer: str) -> str:
    """Export src to out; returns the architecture written."""
    row = exported_family(src)
    config, tensors = row.read_model(src)
    try:
        model = row.gguf_export.model(src, config, tensors, tokenizer)
    except GgufError as e:
        raise ExportError(str(e)) from None
    write_gguf(out, row.gguf_export.arch, model.metadata, model.tensors, dtype)
    print(f"wrote {out} ({model.line}, {dtype})")
    return row.gguf_export.arch


# ----------------------------------------------------------------------------- reading back (the check)


def read_gguf(reader) -> tuple[dict[str, object], dict[str, np.ndarray]]:
    """(scalar and string metadata, tensors as float64 in numpy shape) from a gguf.GGUFReader of the file."""
    import gguf

    # scalars and strings only: decoding the tokenizer's arrays (50k strings) takes seconds and the forward pass needs none
    meta = {name: field.contents() for name, field in reader.fields.items() if len(field.types) == 1}
    tensors = {t.name: gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64) for t in reader.tensors}
    return meta, tensors


def gguf_logits(reader, tokens: list[int]) -> np.ndarray:
    """The forward pass of the architecture the file names, from a gguf.GGUFReader of it."""
    meta, t = read_gguf(reader)
    arch = meta["general.architecture"]
    row = next(row for row in EXPORTED if row.gguf_export.arch == arch)
    return row.gguf_export.logits(meta, t, tokens)


def reference_logits(src: Path, tokens: list[int]) -> np.ndarray:
    """The family's PyTorch reference's logits (T, V) on the model file's weights."""
    import torch

    reference = importlib.import_module(exported_family(src).module)
    try:
        model = reference.read_model(src)
    except UserError as e:
        raise ExportError(str(e)) from None
    idx = torch.tensor([tokens])
    model.eval()
    with torch.no_grad():
        logits, _ = model(idx, idx)
    return logits[0].double().numpy()


def prompt_tokens(src: Path, prompt: str, tokenizer: str) -> list[int]:
    """The prompt's ids as the model file's family tokenizes it, after its document delimiter."""
    return exported_family(src).gguf_export.prompt_tokens(prompt, tokenizer)


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
    ap.add_argument("-i", "--input", type=Path, required=True,
                    help=f"llmc model file of a family with a GGUF export: {', '.join(row.name for row in EXPORTED)}")
    ap.add_argument("-o", "--output", type=Path, required=True, help="the .gguf file to write")
    ap.add_argument("--dtype", choices=DTYPES, default="f32", help="type of the matmul weights (1-D tensors stay f32)")
    ap.add_argument("--tokenizer", default="", help="the tokenizer of a family that takes one (e.g. Llama 3): "
                    "tokenizer.json or its directory (default: the family's, from the hub); GPT-2 uses tiktoken's gpt2")
    ap.add_argument("--verify", default="", metavar="PROMPT",
                    help="after writing, recompute this prompt's logits from the GGUF file alone and compare")
    args = ap.parse_args(argv)
    try:
        export(args.input, args.output, args.dtype, args.tokenizer)
        if args.verify:
            verify(args.input, args.output, args.dtype, args.verify, args.tokenizer)
    except (ExportError, ModelFileError, UserError) as e:  # a bad model file: model_file.py's line
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
