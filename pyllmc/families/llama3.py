"""
Llama 3's description (pyllmc/family.py says what each field is): its model file, token shards, tokenizer file and
debug state, the reference's defaults, and the model file's header, checks, tensor shapes and reader. llmc/llama3.h
reads the same file in C.

Model file: 256 int32: [0]=20240803 [1]=3 or 5 [2]=block size [3]=V [4]=L [5]=NH [6]=NKV [7]=C
  [8]=int(ffn_dim_multiplier) [9]=multiple_of [10]=int(norm_eps) [11]=int(rope_theta) [12]=use_scaled_rope [13]=4
  [14]=3 (major version) [15]=minor version [16]=tied embeddings [17]=FFN hidden size F;
  then 256 float32: [0]=ffn_dim_multiplier [1]=norm_eps [2]=rope_theta [3]=rope factor [4]=low_freq_factor
  [5]=high_freq_factor [6]=original max positions
  then wte (V, C), ln1w (L, C), qkvw (L, (NH + 2 NKV) HS, C), attprojw (L, C, C), ln2w (L, C), fcw (L, F, C),
  fcw2 (L, F, C), fcprojw (L, C, F), lnfw (C,), and lm_head (V, C) unless the embeddings are tied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pyllmc.family import Family, OutputChecks, ShardFormat, cuda_cpu_decoder_checks, debug_state_files
from pyllmc.families.decoder import DecoderSizes, round_to_float32, torch_minimal_decoder
from pyllmc.model_file import ModelFileError, check_body_size, header_bytes, read_tensors, read_two_part_header

VOCAB_SIZE = 128256  # Meta's Llama 3 tokenizer: the largest id a llama-3 shard may hold, plus one
HUB_TOKENIZER = "meta-llama/Meta-Llama-3-8B"  # the hub's Llama 3 tokenizer (gated), used when no --tokenizer is given
BOS, EOT = "<|begin_of_text|>", "<|end_of_text|>"  # BOS starts every document

LLAMA3 = Family(
    name="llama3",
    model_magic=20240803,  # the debug state's too; the tokenizer file is llama3_tokenizer.bin, version 3
    # lm_head is left out of the file when the embeddings are tied
    tensor_names=("wte", "ln1w", "qkvw", "attprojw", "ln2w", "fcw", "fcw2", "fcprojw", "lnfw", "lm_head"),
    shards=ShardFormat("llama-3", 20240801, 7, np.dtype("<u4"), VOCAB_SIZE, 8),
    default_model="meta-llama/Llama-3.2-1B",
    model_help="dN (from scratch), a Hugging Face Llama directory or hub name, or one of our llama3 .bin files",
    default_input_bin="dev/data/tinyshakespeare_llama3/tiny_shakespeare_val.bin",
    input_bin_help="train token shards (glob; llama-3 shards: dev/data/*.py --model_desc llama-3)",
    chat_format="llama3",
    learning_rate=1e-4,
)


# ----------------------------------------------------------------------------- the model file


def llama_ffn_hidden(n_embd: int, multiple_of: int, ffn_dim_multiplier: float) -> int:
    """Llama's SwiGLU hidden size: 2/3 of 4C, scaled by ffn_dim_multiplier (float32, 0 = none), rounded up
    to a multiple of multiple_of (the arithmetic in double precision, as the C reader does it)."""
    h = int(2 * (4 * n_embd) / 3)
    if ffn_dim_multiplier > 0:
        h = int(float(np.float32(ffn_dim_multiplier)) * h)
    return multiple_of * ((h + multiple_of - 1) // multiple_of)


@dataclass(kw_only=True)
class LlamaConfig(DecoderSizes):
    """A Llama 3 model's shape and hyperparameters: everything its model file's header holds. FFN follows from C,
    multiple_of and ffn_dim_multiplier (Llama's rule), not given."""
    ffn_hidden: int = field(init=False)
    ffn_dim_multiplier: float = 0.0  # 0 = none
    multiple_of: int = 256
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    use_scaled_rope: bool = False
    rope_factor: float = 0.0  # the four Llama 3.1 scaling parameters, 0 when use_scaled_rope is off
    low_freq_factor: float = 0.0
    high_freq_factor: float = 0.0
    original_max_position: float = 0.0
    tied_embeddings: bool = False
    version_minor: int = 0  # Llama 3.<minor>; 0 for dN models from scratch

    def __post_init__(self) -> None:
        round_to_float32(self, "ffn_dim_multiplier", "norm_eps", "rope_theta", "rope_factor", "low_freq_factor",
                         "high_freq_factor", "original_max_position")
        self.ffn_hidden = llama_ffn_hidden(self.n_embd, self.multiple_of, self.ffn_dim_multiplier)

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head


def llama_config_problem(c: LlamaConfig) -> str:
    """What keeps the model from being built with these shapes ("" when nothing does)."""
    if min(c.smallest_size(), c.multiple_of) < 1:
        return "every size must be at least 1"
    if c.n_embd % c.n_head or c.head_size % 2:
        return f"n_embd {c.n_embd} must be n_head {c.n_head} times an even head size"
    if c.n_head % c.n_kv_head:
        return f"n_head {c.n_head} is not a multiple of n_kv_head {c.n_kv_head}"
    if not c.norm_eps > 0 or not c.rope_theta > 0:
        return f"norm_eps {c.norm_eps} and rope_theta {c.rope_theta} must be positive"
    if c.use_scaled_rope and not (c.rope_factor > 0 and c.high_freq_factor > c.low_freq_factor > 0 and c.original_max_position > 0):
        return "scaled RoPE needs factor > 0, high_freq_factor > low_freq_factor > 0 and original_max_position > 0"
    return ""


def llama3_tensor_shapes(c: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every model-file tensor in file order (LLAMA3.tensor_names; lm_head only when the embeddings are untied)."""
    L, C, V, F, HS = c.n_layer, c.n_embd, c.vocab_size, c.ffn_hidden, c.head_size
    shapes = {"wte": (V, C), "ln1w": (L, C), "qkvw": (L, (c.n_head + 2 * c.n_kv_head) * HS, C), "attprojw": (L, C, C),
              "ln2w": (L, C), "fcw": (L, F, C), "fcw2": (L, F, C), "fcprojw": (L, C, F), "lnfw": (C,)}
    return shapes if c.tied_embeddings else {**shapes, "lm_head": (V, C)}


def llama3_header_bytes(c: LlamaConfig, version: int) -> bytes:
    ints = [LLAMA3.model_magic, version, c.block_size, c.vocab_size, c.n_layer, c.n_head, c.n_kv_head, c.n_embd,
            int(c.ffn_dim_multiplier), c.multiple_of, int(c.norm_eps), int(c.rope_theta), int(c.use_scaled_rope),
            4, 3, c.version_minor, int(c.tied_embeddings), c.ffn_hidden]
    floats = [c.ffn_dim_multiplier, c.norm_eps, c.rope_theta, c.rope_factor, c.low_freq_factor, c.high_freq_factor,
              c.original_max_position]
    return header_bytes(ints) + header_bytes(floats, "<f4")


def llama3_config_from_header(path: Path, hi: np.ndarray, hf: np.ndarray) -> LlamaConfig:
    """The config the header describes, checked: positive sizes, a buildable shape, FFN size by Llama's rule."""
    sizes = [int(v) for v in (*hi[2:8], hi[9])]
    if min(sizes) < 1:
        raise ModelFileError(f"{path}: bad header: block size, vocab, layers, heads, kv heads, channels and "
                             f"multiple_of {sizes} must be positive")
    c = LlamaConfig(
        block_size=int(hi[2]), vocab_size=int(hi[3]), n_layer=int(hi[4]), n_head=int(hi[5]), n_kv_head=int(hi[6]),
        n_embd=int(hi[7]), ffn_dim_multiplier=float(hf[0]), multiple_of=int(hi[9]), norm_eps=float(hf[1]),
        rope_theta=float(hf[2]), use_scaled_rope=bool(hi[12]), rope_factor=float(hf[3]), low_freq_factor=float(hf[4]),
        high_freq_factor=float(hf[5]), original_max_position=float(hf[6]), tied_embeddings=bool(hi[16]),
        version_minor=int(hi[15]),
    )
    problem = llama_config_problem(c)
    if problem:
        raise ModelFileError(f"{path}: bad Llama config: {problem}")
    if int(hi[17]) != c.ffn_hidden:
        raise ModelFileError(f"{path}: header FFN hidden size {int(hi[17])} is not Llama's rule for C={c.n_embd}, "
                             f"multiple_of={c.multiple_of}, ffn_dim_multiplier={c.ffn_dim_multiplier} ({c.ffn_hidden})")
    return c


def read_llama3_header(path: str | Path) -> tuple[LlamaConfig, int]:
    """A Llama 3 model file's config and version (3 fp32, 5 bf16): magic, version, header sizes and file length checked."""
    path = Path(path)
    size, hi, hf = read_two_part_header(path, LLAMA3.model_magic, LLAMA3.model_header_bytes, "Llama 3")
    c = llama3_config_from_header(path, hi, hf)
    check_body_size(path, size, LLAMA3.model_header_bytes, llama3_tensor_shapes(c), int(hi[1]))
    return c, int(hi[1])


def read_llama3(path: str | Path) -> tuple[LlamaConfig, dict[str, np.ndarray]]:
    """A Llama 3 model file: its config and its tensors (float32, file order)."""
    c, version = read_llama3_header(path)
    return c, read_tensors(Path(path), LLAMA3.model_header_bytes, version, llama3_tensor_shapes(c))


# ----------------------------------------------------------------------------- dN from scratch


def depth_config(depth: int, vocab_size: int) -> LlamaConfig:
    """dN from scratch: L=N, C=64N, NH=N, NKV=max(1, N/2), SwiGLU hidden rounded to 32, untied head."""
    return LlamaConfig(block_size=1024, vocab_size=vocab_size, n_layer=depth, n_head=depth, n_kv_head=max(1, depth // 2),
                       n_embd=64 * depth, ffn_dim_multiplier=0.0, multiple_of=32, norm_eps=1e-5, rope_theta=500000.0,
                       use_scaled_rope=False, tied_embeddings=False, version_minor=0)


def depth_parameters(depth: int, vocab_size: int) -> int:
    """The parameters of the dN model (its model file's tensors)."""
    return sum(math.prod(shape) for shape in llama3_tensor_shapes(depth_config(depth, vocab_size)).values())


def depth_linears(depth: int, vocab_size: int = 1) -> tuple[int, int, list[tuple[int, int]]]:
    """(L, C, the linear layers of one block as (out, in) features) of the dN model: qkv, attention projection, the two
    SwiGLU inputs, their output."""
    c = depth_config(depth, vocab_size)
    C, F, qkv = c.n_embd, c.ffn_hidden, (c.n_head + 2 * c.n_kv_head) * c.head_size
    return c.n_layer, C, [(qkv, C), (C, C), (F, C), (F, C), (C, F)]


# ----------------------------------------------------------------------------- dev/check_outputs.py's commands

# the trainer on llama3_d2.bin and on d2 from scratch, both on the shards in ts/
OUTPUT_CHECKS = OutputChecks(
    references=(("llama3-reference", '"$PY" "$R/dev/llama3_refs.py" --out_dir llama3 --muon', "."),),
    model="llama3_d2.bin",
    test_states=debug_state_files(("", "llama3_d2"), ("gqa", "llama3_gqa"), ("muon", "muon/llama3_d2"),
                                  ("muon-gqa", "muon/llama3_gqa")),
    generate='-t llama3_tokenizer.bin -p "ROMEO:" -n 24 --seed 7 --print-ids',
    **cuda_cpu_decoder_checks("llama3", "llama3_d2.bin", "-x 2 -n 2 -s 2 -g 8"),
)


# ----------------------------------------------------------------------------- dev/torch_minimal_step.py's model


def torch_minimal_model(depth: int, vocab: int | None) -> tuple[object, int]:
    """train_llama3.py's Llama dN of vocabulary `vocab`, else VOCAB_SIZE, as torch_minimal_decoder builds it."""
    from train_llama3 import Llama

    return torch_minimal_decoder(Llama, depth_config(depth, vocab or VOCAB_SIZE))


# ----------------------------------------------------------------------------- dev/eval/export_gguf.py's GGUF
# For llama the q and k projection rows are permuted the way llama.cpp's Hugging Face converter does (our rotate-half
# pairs (i, i + HS/2) become adjacent pairs (2i, 2i+1), the layout of llama.cpp's rope), Llama 3.1 frequency scaling
# is stored as the `rope_freqs.weight` factors, and a tied head stores no `output.weight` (llama.cpp then uses
# token_embd).

GGUF_ARCH = "llama"  # llama.cpp's architecture


def permute_rotary(w: np.ndarray, n_head: int) -> np.ndarray:
    """Rows of a q or k projection (n_head * HS, C) from rotate-half order to llama.cpp's adjacent-pair order."""
    HS = w.shape[0] // n_head
    return w.reshape(n_head, 2, HS // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_rotary(w: np.ndarray, n_head: int) -> np.ndarray:
    """The inverse of permute_rotary."""
    HS = w.shape[0] // n_head
    return w.reshape(n_head, HS // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_rope_factors(c: LlamaConfig) -> np.ndarray:
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


def gguf_tensors(c: LlamaConfig, t: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
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
        out["rope_freqs.weight"] = gguf_rope_factors(c)
    return out


def gguf_vocab(tokenizer: str) -> tuple[list[str], list[int], list[str], int, int, str]:
    """tokens, token types, merges, BOS id, end-of-text id and llama.cpp's pre-tokenizer name of a Llama 3 tokenizer."""
    import json

    from pyllmc.gguf_common import TOKEN_CONTROL, TOKEN_NORMAL, GgufError
    from pyllmc.llama3_tokenizer import load_llama3_tokenizer
    from pyllmc.token_shards import DataError

    try:
        tok = load_llama3_tokenizer(tokenizer)
    except DataError as e:
        raise GgufError(str(e)) from None
    spec = json.loads(tok.tok.to_str())
    special = {i for i, t in tok.tok.get_added_tokens_decoder().items() if t.special}
    tokens = [tok.tok.id_to_token(i) for i in range(tok.vocab_size)]
    types = [TOKEN_CONTROL if i in special else TOKEN_NORMAL for i in range(tok.vocab_size)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"].get("merges", [])]
    pre = spec.get("pre_tokenizer") or {}
    # Llama 3's tokenizer splits with its own regex (a Sequence of Split + ByteLevel); a plain ByteLevel is GPT-2's
    pre_name = "gpt-2" if pre.get("type") == "ByteLevel" else "llama-bpe"
    return tokens, types, merges, tok.bos, tok.eot, pre_name


def gguf_model(src: Path, c: LlamaConfig, t: dict[str, np.ndarray], tokenizer: str):
    """The GGUF of a model file (a pyllmc.gguf_common.GgufModel) with the Llama 3 tokenizer `tokenizer` (tokenizer.json
    or its directory; "": the hub's HUB_TOKENIZER)."""
    from pyllmc.gguf_common import GgufError, GgufModel

    tokens, types, merges, bos, eot, pre = gguf_vocab(tokenizer)
    if len(tokens) != c.vocab_size:
        raise GgufError(f"the tokenizer has {len(tokens)} tokens but {src} has a vocab of {c.vocab_size}")

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

    line = (f"llama, L={c.n_layer} NH={c.n_head} NKV={c.n_kv_head} C={c.n_embd} FFN={c.ffn_hidden} V={c.vocab_size}"
            f"{', scaled RoPE' if c.use_scaled_rope else ''}{', tied' if c.tied_embeddings else ''}")
    return GgufModel(metadata, gguf_tensors(c, t), line)


def gguf_prompt_tokens(prompt: str, tokenizer: str) -> list[int]:
    """The BOS, then the prompt in the Llama 3 tokenizer `tokenizer`."""
    from pyllmc.llama3_tokenizer import load_llama3_tokenizer

    tok = load_llama3_tokenizer(tokenizer)
    return [tok.bos, *tok.encode(prompt)]


def gguf_logits(meta: dict, t: dict[str, np.ndarray], tokens: list[int]) -> np.ndarray:
    """Llama forward pass (T, V) from the GGUF tensors and metadata alone (q/k rows un-permuted to rotate-half)."""
    from pyllmc.gguf_common import softmax_attention

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
