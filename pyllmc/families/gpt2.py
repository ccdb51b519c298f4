"""
GPT-2's description (pyllmc/family.py says what each field is): its model checkpoint, token shards, tokenizer file and
debug state, the reference's defaults, and the checkpoint's header, checks, tensor shapes and reader. llm.c's formats,
byte for byte; llmc/checkpoint.h and llmc/model_config.h hold the same numbers and rules for the C programs.

Checkpoint: 256 int32: [0]=20240326 [1]=3 (fp32) or 5 (bf16) [2]=maxT [3]=V [4]=L [5]=NH [6]=C [7]=Vp
  then 16 tensors: wte (Vp, C; rows V.. are zero), wpe (maxT, C), ln1w ln1b (L, C), qkvw (L, 3C, C), qkvb (L, 3C),
  attprojw (L, C, C), attprojb ln2w ln2b (L, C), fcw (L, 4C, C), fcb (L, 4C), fcprojw (L, C, 4C), fcprojb (L, C),
  lnfw lnfb (C,).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from pyllmc.family import Family, OutputChecks, ShardFormat, cuda_cpu_program, debug_state_files
from pyllmc.model_file import ITEMSIZE, VERSIONS, ModelFileError, cast_to, file_size, header_bytes, read_ints, read_tensors

VOCAB_SIZE = 50257  # tiktoken's gpt2 encoding
EOT = 50256  # <|endoftext|>: starts every document
# nanochat's chat tokens after GPT-2's vocabulary (ids 50257..50260, inside the padded Vp 50304); <|bos|> is EOT. The
# chat tokenizer file (CHAT_TOKENIZER_FILE) is gpt2_tokenizer.bin's entries followed by these strings.
CHAT_TOKENS = ("<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>")
CHAT_VOCAB_SIZE = VOCAB_SIZE + len(CHAT_TOKENS)  # 50261: a GPT-2 model's V once chat fine-tuning starts
CHAT_TOKENIZER_FILE = "gpt2_chat_tokenizer.bin"
VOCAB_PADDING = 128  # the checkpoint's wte has Vp rows: V rounded up to a multiple of this
# dN from scratch: the published GPT-2 shapes (C, NH) for these depths; any other N gets C = 64 N, NH = N (head size 64)
DEPTH_SHAPES = {6: (384, 6), 12: (768, 12), 24: (1024, 16), 36: (1280, 20), 48: (1600, 25)}

# the per-layer tensors in file order -> the parameter of a block each one stacks (our GPT's names are Hugging
# Face's: transformer.h.{l}.<name>); the 3-D ones (qkvw, attprojw, fcw, fcprojw) are (out, in) matrices
LAYER_PARAMETERS: dict[str, str] = {
    "ln1w": "ln_1.weight", "ln1b": "ln_1.bias", "qkvw": "attn.c_attn.weight", "qkvb": "attn.c_attn.bias",
    "attprojw": "attn.c_proj.weight", "attprojb": "attn.c_proj.bias", "ln2w": "ln_2.weight", "ln2b": "ln_2.bias",
    "fcw": "mlp.c_fc.weight", "fcb": "mlp.c_fc.bias", "fcprojw": "mlp.c_proj.weight", "fcprojb": "mlp.c_proj.bias",
}

GPT2 = Family(
    name="gpt2",
    model_magic=20240326,
    model_header_bytes=1024,  # 256 int32
    tensor_names=("wte", "wpe", *LAYER_PARAMETERS, "lnfw", "lnfb"),
    shards=ShardFormat("gpt-2", 20240520, 1, np.dtype("<u2"), VOCAB_SIZE, 2),
    tokenizer_version=2,  # version 2 carries the EOT id
    debug_state_magic=20240327,  # llm.c's, one past the model's
    debug_state_version=2,
    default_model="gpt2",
    model_help="gpt2|gpt2-medium|gpt2-large|gpt2-xl (pretrained), dN (from scratch), or a HF directory",
    default_input_bin="dev/data/tinyshakespeare/tiny_shakespeare_val.bin",
    input_bin_help="train token shards (glob)",
    chat_format="nanochat",
    learning_rate=3e-4,
    vocab_padding=VOCAB_PADDING,
)


# ----------------------------------------------------------------------------- the checkpoint


@dataclass(frozen=True)
class Gpt2Header:
    """A GPT-2 checkpoint's header: the version (3 fp32, 5 bf16) and the model's sizes."""
    version: int
    maxT: int
    V: int
    L: int
    NH: int
    C: int
    Vp: int


# field -> (header index, its name in error lines, largest value): llmc/checkpoint.h's table; the smallest is 1
GPT2_FIELDS: dict[str, tuple[int, str, int]] = {
    "maxT": (2, "maxT (header[2])", 1 << 20), "V": (3, "vocab size V (header[3])", 1 << 24),
    "L": (4, "layers L (header[4])", 4096), "NH": (5, "heads NH (header[5])", 1 << 16),
    "C": (6, "channels C (header[6])", 1 << 17), "Vp": (7, "padded vocab Vp (header[7])", 1 << 24),
}


def gpt2_padded_vocab(V: int) -> int:
    """Vp: V rounded up to a multiple of 128 (VOCAB_PADDING)."""
    return (V + VOCAB_PADDING - 1) // VOCAB_PADDING * VOCAB_PADDING


def gpt2_tensor_shapes(h: Gpt2Header) -> dict[str, tuple[int, ...]]:
    """The 16 checkpoint tensors in file order (GPT2.tensor_names)."""
    L, C = h.L, h.C
    return {
        "wte": (h.Vp, C), "wpe": (h.maxT, C), "ln1w": (L, C), "ln1b": (L, C), "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C),
        "attprojw": (L, C, C), "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C), "fcw": (L, 4 * C, C),
        "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C), "lnfw": (C,), "lnfb": (C,),
    }


def gpt2_header_bytes(h: Gpt2Header) -> bytes:
    return header_bytes([GPT2.model_magic, h.version, h.maxT, h.V, h.L, h.NH, h.C, h.Vp])


def gpt2_check_header(path: Path, ints: np.ndarray) -> Gpt2Header:
    """The header's magic, version and sizes, each in its range (llmc/checkpoint.h's rules and error lines)."""
    if ints[0] != GPT2.model_magic:
        raise ModelFileError(f"{path}: not a model checkpoint file (magic {ints[0]}, expected {GPT2.model_magic})")
    if int(ints[1]) not in ITEMSIZE:
        raise ModelFileError(f"{path}: unsupported model checkpoint version {ints[1]} (expected 3 = fp32 or 5 = bf16)")
    for index, name, hi in GPT2_FIELDS.values():
        if not 1 <= ints[index] <= hi:
            raise ModelFileError(f"{path}: bad model checkpoint header: {name} = {ints[index]} is outside [1, {hi}]")
    h = Gpt2Header(int(ints[1]), *(int(ints[index]) for index, _, _ in GPT2_FIELDS.values()))
    if h.Vp < h.V:
        raise ModelFileError(f"{path}: bad model checkpoint header: padded vocab Vp = {h.Vp} is smaller than V = {h.V}")
    if h.C % h.NH:
        raise ModelFileError(f"{path}: bad model checkpoint header: channels C = {h.C} is not a multiple of heads NH = {h.NH}")
    return h


def read_gpt2_header(path: str | Path) -> Gpt2Header:
    """A GPT-2 checkpoint's header, validated, and checked against the file's real size."""
    path = Path(path)
    size = file_size(path)
    if size < GPT2.model_header_bytes:
        raise ModelFileError(f"{path}: not a model checkpoint (file is {size} bytes, too short for the {GPT2.model_header_bytes}-byte header)")
    h = gpt2_check_header(path, read_ints(path, "<i4", 256))
    expected = GPT2.model_header_bytes + sum(math.prod(s) for s in gpt2_tensor_shapes(h).values()) * ITEMSIZE[h.version]
    if size != expected:
        raise ModelFileError(f"{path}: model checkpoint size mismatch: the header (L={h.L} C={h.C} Vp={h.Vp} "
                             f"maxT={h.maxT}, {'fp32' if h.version == 3 else 'bf16'}) needs {expected} bytes, the file "
                             f"size is {size}{' (truncated?)' if size < expected else ''}")
    return h


def read_gpt2(path: str | Path) -> tuple[Gpt2Header, dict[str, np.ndarray]]:
    """A GPT-2 checkpoint: its header and its 16 tensors (float32, file order)."""
    h = read_gpt2_header(path)
    return h, read_tensors(Path(path), GPT2.model_header_bytes, h.version, gpt2_tensor_shapes(h))


# ----------------------------------------------------------------------------- dN from scratch


def depth_shape(depth: int) -> tuple[int, int]:
    """(C, NH) of the dN model."""
    return DEPTH_SHAPES.get(depth, (64 * depth, depth))


def depth_parameters(depth: int, vocab_size: int = VOCAB_SIZE) -> int:
    """The parameters of the dN model as the checkpoint stores them (wte's padded rows and wpe's 1024 included)."""
    C, NH = depth_shape(depth)
    h = Gpt2Header(VERSIONS["float32"], 1024, vocab_size, depth, NH, C, gpt2_padded_vocab(vocab_size))
    return sum(math.prod(shape) for shape in gpt2_tensor_shapes(h).values())


def depth_linears(depth: int) -> tuple[int, int, list[tuple[int, int]]]:
    """(L, C, the linear layers of one block as (out, in) features) of the dN model: qkv, attention projection, fc, fc
    projection."""
    C = depth_shape(depth)[0]
    return depth, C, [(3 * C, C), (C, C), (4 * C, C), (C, 4 * C)]


# ----------------------------------------------------------------------------- Hugging Face export (dev/eval/export_hf.py)


def hf_state_dict(h: Gpt2Header, t: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """Hugging Face GPT-2 names (our per-layer names are theirs: LAYER_PARAMETERS). The per-layer matrices
    (3-D in the file) are Conv1D weights there, stored (in, out): transposed from llmc's (out, in)."""
    sd = {"transformer.wte.weight": cast_to(t["wte"][: h.V], dtype), "transformer.wpe.weight": cast_to(t["wpe"], dtype)}
    for l in range(h.L):
        for name, hf_name in LAYER_PARAMETERS.items():
            sd[f"transformer.h.{l}.{hf_name}"] = cast_to(t[name][l].T if t[name].ndim == 3 else t[name][l], dtype)
    sd["transformer.ln_f.weight"] = cast_to(t["lnfw"], dtype)
    sd["transformer.ln_f.bias"] = cast_to(t["lnfb"], dtype)
    return sd


def hf_config(h: Gpt2Header, dtype: str) -> dict:
    """config.json of a GPT2LMHeadModel."""
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
        "bos_token_id": EOT,
        "eos_token_id": EOT,
        "torch_dtype": dtype,
    }


def hf_export(h: Gpt2Header, t: dict[str, np.ndarray], dtype: str) -> tuple[dict[str, np.ndarray], dict, str, bool]:
    """The GPT2LMHeadModel state dict, its config.json, a line describing the checkpoint, and whether GPT-2's tokenizer
    files fit its vocabulary."""
    line = (f"version {h.version} ({'fp32' if h.version == 3 else 'bf16'}), L={h.L} NH={h.NH} C={h.C} maxT={h.maxT} "
            f"V={h.V} (padded {h.Vp})")
    return hf_state_dict(h, t, dtype), hf_config(h, dtype), line, h.V == VOCAB_SIZE


# ----------------------------------------------------------------------------- dev/check_outputs.py's commands

# the CPU-target runs use the 509-token vocabulary's d2 (dev/cuda_cpu_refs.py, in small/)
_SMALL = "-e gpt2_d2.bin -i tinyshakespeare_train.bin -j tinyshakespeare_val.bin -b 4 -t 64 -v 2 -m 1 -s 0"
_STEP2 = ("mkdir -p ../out/gpt2cu_resume && cp ../out/gpt2cu/model_00000002.bin ../out/gpt2cu/state_00000002_00000.bin "
          "../out/gpt2cu/DONE_00000002 ../out/gpt2cu_resume/ && ")  # the step-2 checkpoint alone, as a killed run left it
OUTPUT_CHECKS = OutputChecks(
    references=(
        ("gpt2-reference", '"$PY" "$R/train_gpt2.py" --model d2 --device cpu --seed 42 '
         "--input_bin ../data/tiny_shakespeare_train.bin --input_val_bin ../data/tiny_shakespeare_val.bin "
         "--batch_size 4 --sequence_length 64 --num_iterations 2 --val_loss_every 2 --val_max_steps 2 --sample_every 2 "
         "--gen_tokens 8 --write_tensors 1 --debug_steps 4 --output_dir log", "gpt2"),
        ("gpt2-bpe", '"$PY" "$R/dev/write_bpe.py" -o gpt2_bpe.bin', "gpt2"),
        ("gpt2-small-vocab-reference", '"$PY" "$R/dev/cuda_cpu_refs.py" --vocab_size 509 --muon -o small', "."),
    ),
    model="gpt2_d2.bin",
    data="../data",
    test_states=(*debug_state_files(("", "gpt2_d2")),
                 ("muon", "../small/gpt2_d2.bin", "../small/gpt2_d2_muon_debug_state.bin")),
    generate='-b gpt2_bpe.bin -p "To be, or not to be" -n 24 --seed 7 --top-k 40 --print-ids',
    cuda_cpu=(
        ("train_gpt2cu", f"{cuda_cpu_program('train_gpt2cu_fp32')} {_SMALL} -x 4 -n 2 -o ../out/gpt2cu", "small"),
        ("train_gpt2cu-resume", f"{_STEP2}{cuda_cpu_program('train_gpt2cu_fp32')} {_SMALL} -x 4 -n 2 "
         "-o ../out/gpt2cu_resume -y 1", "small"),
        ("train_gpt2cu-bf16-muon", f"{cuda_cpu_program('train_gpt2cu_bf16')} {_SMALL} -x 2 -n 2 -op muon "
         "-o ../out/gpt2cu_bf16", "small"),
        ("test_gpt2cu", f"{cuda_cpu_program('test_gpt2cu_fp32')} -e gpt2_d2.bin -s gpt2_d2_debug_state.bin", "small"),
    ),
    cuda_cpu_targets=tuple(f"build/cuda_cpu/{p}" for p in ("train_gpt2cu_fp32", "test_gpt2cu_fp32", "train_gpt2cu_bf16")),
)


# ----------------------------------------------------------------------------- dev/torch_minimal_step.py's model


def torch_minimal_model(depth: int, vocab: int | None) -> tuple[object, int]:
    """(train_gpt2.py's compact GPT-2 dN, returning the loss, its vocabulary): GPT-2's vocabulary padded to the C
    trainer's Vp (50304; the 47 padding rows take part in the softmax, the cost is the padded GEMM's, as ours), wte
    tied to the lm_head; `vocab` is not used."""
    from train_gpt2 import minimal_model

    V = gpt2_padded_vocab(VOCAB_SIZE)
    return minimal_model(depth, V), V


# ----------------------------------------------------------------------------- dev/eval/export_gguf.py's GGUF

GGUF_ARCH = "gpt2"  # llama.cpp's architecture


def gguf_tensors(h: Gpt2Header, t: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
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


@lru_cache(maxsize=1)
def gguf_vocab() -> tuple[list[str], list[int], list[str]]:
    """tokens (byte-level strings), token types and merges of tiktoken's gpt2 encoding (the merges take seconds)."""
    from pyllmc.gguf_common import TOKEN_CONTROL, TOKEN_NORMAL
    from pyllmc.reference.tokenizer_files import gpt2_bpe

    _, ranks, pairs, show = gpt2_bpe()
    tokens = [""] * VOCAB_SIZE
    for tok, r in ranks.items():
        tokens[r] = show(tok)
    tokens[EOT] = "<|endoftext|>"
    types = [TOKEN_NORMAL] * VOCAB_SIZE
    types[EOT] = TOKEN_CONTROL
    merges = [f"{show(a)} {show(b)}" for a, b in pairs]
    return tokens, types, merges


def gguf_model(src: Path, h: Gpt2Header, t: dict[str, np.ndarray], tokenizer: str):
    """The GGUF of a checkpoint (a pyllmc.gguf_common.GgufModel) with tiktoken's gpt2 tokenizer; `tokenizer` is not used."""
    from pyllmc.gguf_common import GgufError, GgufModel

    if h.V != VOCAB_SIZE:
        raise GgufError(f"{src}: vocab size {h.V} is not GPT-2's {VOCAB_SIZE}: no tokenizer to store with it")
    tokens, types, merges = gguf_vocab()

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
        w.add_bos_token_id(EOT)
        w.add_eos_token_id(EOT)

    return GgufModel(metadata, gguf_tensors(h, t), f"gpt2, L={h.L} NH={h.NH} C={h.C} V={h.V}")


def gguf_prompt_tokens(prompt: str, tokenizer: str) -> list[int]:
    """<|endoftext|>, then the prompt in tiktoken's gpt2 encoding; `tokenizer` is not used."""
    from pyllmc.reference.tokenizer_files import gpt2_encoding

    return [EOT, *gpt2_encoding().encode_ordinary(prompt)]


def gguf_logits(meta: dict, t: dict[str, np.ndarray], tokens: list[int]) -> np.ndarray:
    """GPT-2 forward pass (T, V) from the GGUF tensors and metadata alone."""
    from pyllmc.gguf_common import softmax_attention

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
