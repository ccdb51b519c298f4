"""
Qwen3's description (pyllmc/family.py says what each field is) and its model file: the header's fields, the tensors in
file order and their shapes, the writer's header and the validating reader. Qwen3 trains on Llama 3's uint32 token
shards. doc/qwen3.md documents the file; train_qwen3.py is the reference that writes it. numpy only.

Model file: 256 int32 + 256 float32, then the tensors (float32 for version 3, bfloat16 for version 5).
  int32 [0]=20250429 [1]=3 or 5 [2]=block size [3]=V [4]=L [5]=NH [6]=NKV [7]=C [8]=HS (head_dim) [9]=FFN hidden
        [10]=tied embeddings (0 or 1); the rest 0
  float32 [0]=norm_eps [1]=rope_theta; the rest 0
  tensors: wte (V, C), ln1w (L, C), qkvw (L, (NH + 2 NKV) HS, C), qnormw (L, HS), knormw (L, HS),
           attprojw (L, C, NH HS), ln2w (L, C), fcw (L, FFN, C), fcw2 (L, FFN, C), fcprojw (L, C, FFN), lnfw (C,),
           lm_head (V, C) unless the embeddings are tied
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pyllmc.family import Family, OutputChecks, cuda_cpu_decoder_checks, debug_state_files
from pyllmc.families.decoder import DecoderSizes, hf_size_fields, round_to_float32, torch_minimal_decoder
from pyllmc.families.llama3 import LLAMA3
from pyllmc.model_file import (ModelFileError, attention_problem, cast_to, header_bytes, read_config_header,
                               read_config_model)

HUB_MODEL = "Qwen/Qwen3-0.6B"  # the hub's smallest Qwen3: its tokenizer is the default when no --tokenizer is given
VOCAB_SIZE = 151936  # the published models' vocab_size (Qwen3-0.6B's config.json)
DELIMITER = "<|endoftext|>"  # starts every document; Qwen3's tokenizer has no BOS

QWEN3 = Family(
    name="qwen3",
    model_magic=20250429,  # Qwen3's release date, the debug state's magic too
    # lm_head is left out of the file when the embeddings are tied
    tensor_names=("wte", "ln1w", "qkvw", "qnormw", "knormw", "attprojw", "ln2w", "fcw", "fcw2", "fcprojw", "lnfw",
                  "lm_head"),
    shards=LLAMA3.shards,  # uint32 ids; the bound is the model's vocab size
    # the tokenizer file: Llama 3's layout (version 3), its end-of-text and BOS ids both <|endoftext|> here
    default_model=HUB_MODEL,
    model_help="dN (from scratch), a Hugging Face Qwen3 directory or hub name, or one of our qwen3 .bin files",
    default_input_bin="dev/data/tinyshakespeare_qwen3/tiny_shakespeare_val.bin",
    input_bin_help="train token shards (glob; llama-3 shards in the Qwen3 tokenizer's ids: dev/data/*.py --model_desc "
                   "llama-3 --tokenizer DIR --data_dir DIR)",
    chat_format="chatml",
    learning_rate=1e-4,
)

# (field, int32 header index): the sizes, each at least 1; the tied flag [10] is 0 or 1
SIZE_FIELDS = (("block_size", 2), ("vocab_size", 3), ("n_layer", 4), ("n_head", 5), ("n_kv_head", 6), ("n_embd", 7),
               ("head_dim", 8), ("ffn_hidden", 9))
TIED_INDEX = 10


@dataclass(kw_only=True)
class Qwen3Config(DecoderSizes):
    """A Qwen3 model's shape and hyperparameters: everything its model file's header holds."""
    head_dim: int = 128  # independent of n_embd / n_head: the attention width n_head * head_dim may differ from C
    norm_eps: float = 1e-6
    rope_theta: float = 1000000.0
    tied_embeddings: bool = False

    def __post_init__(self) -> None:
        round_to_float32(self, "norm_eps", "rope_theta")

    @property
    def attention_width(self) -> int:
        return self.n_head * self.head_dim


def qwen3_config_problem(c: Qwen3Config) -> str:
    """What keeps the model from being built with these settings ("" when nothing does)."""
    if min(getattr(c, name) for name, _ in SIZE_FIELDS) < 1:
        return "every size must be at least 1"
    if c.head_dim % 2:
        return f"head_dim {c.head_dim} must be even for RoPE"
    return attention_problem(c.n_head, c.n_kv_head, c.norm_eps, c.rope_theta)


def qwen3_tensor_shapes(c: Qwen3Config) -> dict[str, tuple[int, ...]]:
    """Every model-file tensor in file order (QWEN3.tensor_names; lm_head only when the embeddings are untied)."""
    L, C, V, F, HS = c.n_layer, c.n_embd, c.vocab_size, c.ffn_hidden, c.head_dim
    shapes = {"wte": (V, C), "ln1w": (L, C), "qkvw": (L, (c.n_head + 2 * c.n_kv_head) * HS, C), "qnormw": (L, HS),
              "knormw": (L, HS), "attprojw": (L, C, c.attention_width), "ln2w": (L, C), "fcw": (L, F, C),
              "fcw2": (L, F, C), "fcprojw": (L, C, F), "lnfw": (C,)}
    return shapes if c.tied_embeddings else {**shapes, "lm_head": (V, C)}


def qwen3_header_bytes(c: Qwen3Config, version: int) -> bytes:
    ints = [QWEN3.model_magic, version, *(getattr(c, name) for name, _ in SIZE_FIELDS), int(c.tied_embeddings)]
    return header_bytes(ints) + header_bytes([c.norm_eps, c.rope_theta], "<f4")


def read_qwen3_header(path: str | Path) -> tuple[Qwen3Config, int]:
    """A Qwen3 model file's config and version (3 fp32, 5 bf16): magic, version, header fields and file length checked,
    one ModelFileError line each."""
    return read_config_header(path, QWEN3, "Qwen3", qwen3_config_from_header, qwen3_config_problem, qwen3_tensor_shapes)


def qwen3_config_from_header(path: Path, hi: np.ndarray, hf: np.ndarray) -> Qwen3Config:
    """The config the header's fields describe; the tied flag and the unused fields checked."""
    if int(hi[TIED_INDEX]) not in (0, 1):
        raise ModelFileError(f"{path}: bad Qwen3 header: tied embeddings flag (header[{TIED_INDEX}]) = "
                             f"{int(hi[TIED_INDEX])}, expected 0 or 1")
    if hi[TIED_INDEX + 1:].any() or hf[2:].any():
        raise ModelFileError(f"{path}: bad Qwen3 header: the unused fields (int32 from [{TIED_INDEX + 1}], float32 "
                             "from [2]) must be 0")
    sizes = {name: int(hi[index]) for name, index in SIZE_FIELDS}
    return Qwen3Config(**sizes, norm_eps=float(hf[0]), rope_theta=float(hf[1]), tied_embeddings=bool(hi[TIED_INDEX]))


def read_qwen3(path: str | Path) -> tuple[Qwen3Config, dict[str, np.ndarray]]:
    """A Qwen3 model file: its config and its tensors (float32, file order)."""
    return read_config_model(path, QWEN3, read_qwen3_header, qwen3_tensor_shapes)


# ----------------------------------------------------------------------------- dN from scratch


def depth_config(depth: int, vocab_size: int) -> Qwen3Config:
    """dN from scratch: Llama 3's reference rule L=N, C=64N, NH=N, NKV=max(1, N/2), with Qwen3's head_dim 128 (so the
    attention width 128N is twice C) and its FFN hidden 3C; block size 1024, untied head, Qwen3's eps and theta."""
    C = 64 * depth
    return Qwen3Config(block_size=1024, vocab_size=vocab_size, n_layer=depth, n_head=depth,
                       n_kv_head=max(1, depth // 2), n_embd=C, head_dim=128, ffn_hidden=3 * C, norm_eps=1e-6,
                       rope_theta=1000000.0, tied_embeddings=False)


def depth_parameters(depth: int, vocab_size: int) -> int:
    """The parameters of the dN model (its model file's tensors)."""
    return sum(math.prod(shape) for shape in qwen3_tensor_shapes(depth_config(depth, vocab_size)).values())


def depth_linears(depth: int, vocab_size: int = 1) -> tuple[int, int, list[tuple[int, int]]]:
    """(L, C, the linear layers of one block as (out, in) features) of the dN model: qkv (attention width NH*HS for
    q), attention projection back to C, the two SwiGLU inputs, their output."""
    c = depth_config(depth, vocab_size)
    C, F, HS = c.n_embd, c.ffn_hidden, c.head_dim
    return c.n_layer, C, [((c.n_head + 2 * c.n_kv_head) * HS, C), (C, c.n_head * HS), (F, C), (F, C), (C, F)]


# ----------------------------------------------------------------------------- Hugging Face (dev/eval/export_hf.py)

# per layer: transformers' Qwen3ForCausalLM weight (model.layers.{l}.<key>.weight) -> the model file's tensor (row l);
# q_proj, k_proj and v_proj are the rows of qkvw, in that order. train_qwen3.py maps the same names onto its modules.
HF_BLOCK_TENSORS = {"input_layernorm": "ln1w", "self_attn.q_norm": "qnormw", "self_attn.k_norm": "knormw",
                    "self_attn.o_proj": "attprojw", "post_attention_layernorm": "ln2w", "mlp.gate_proj": "fcw",
                    "mlp.up_proj": "fcw2", "mlp.down_proj": "fcprojw"}


def shortest_float32(x: float) -> float:
    """The shortest decimal that reads back as the same float32 (1e-06, not 9.999999974752427e-07)."""
    return float(str(np.float32(x)))


def hf_config_fields(c: Qwen3Config) -> dict:
    """transformers' Qwen3Config fields of our config (full attention, default RoPE, no biases): the keyword arguments
    train_qwen3.py builds its Qwen3Config from, and the body of the exported config.json."""
    return {
        **hf_size_fields(c),
        "head_dim": c.head_dim,
        "max_position_embeddings": c.block_size,
        "rms_norm_eps": shortest_float32(c.norm_eps),
        "rope_parameters": {"rope_type": "default", "rope_theta": shortest_float32(c.rope_theta)},
        "tie_word_embeddings": c.tied_embeddings,
        "attention_bias": False,
        "use_sliding_window": False,
    }


def hf_config(c: Qwen3Config, dtype: str) -> dict:
    """config.json of a Qwen3ForCausalLM; the tokenizer's special ids are unknown to the model file, so left null."""
    return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", **hf_config_fields(c), "hidden_act": "silu",
            "attention_dropout": 0.0, "layer_types": ["full_attention"] * c.n_layer, "use_cache": True,
            "bos_token_id": None, "eos_token_id": None, "pad_token_id": None, "dtype": dtype}


def hf_state_dict(c: Qwen3Config, t: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """Qwen3ForCausalLM's names: qkvw split back into q_proj (NH*HS rows), k_proj and v_proj (NKV*HS rows each); every
    matrix is (out, in) on both sides. A tied model stores no lm_head.weight (transformers ties it to the embedding)."""
    q_rows, kv_rows = c.attention_width, c.n_kv_head * c.head_dim
    sd = {"model.embed_tokens.weight": cast_to(t["wte"], dtype), "model.norm.weight": cast_to(t["lnfw"], dtype)}
    for l in range(c.n_layer):
        prefix = f"model.layers.{l}."
        q, k, v = np.split(t["qkvw"][l], [q_rows, q_rows + kv_rows])
        parts = {"self_attn.q_proj": q, "self_attn.k_proj": k, "self_attn.v_proj": v,
                 **{hf_name: t[ours][l] for hf_name, ours in HF_BLOCK_TENSORS.items()}}
        sd.update({f"{prefix}{name}.weight": cast_to(a, dtype) for name, a in parts.items()})
    if not c.tied_embeddings:
        sd["lm_head.weight"] = cast_to(t["lm_head"], dtype)
    return sd


def hf_export(c: Qwen3Config, t: dict[str, np.ndarray], dtype: str) -> tuple[dict[str, np.ndarray], dict, str, bool]:
    """The Qwen3ForCausalLM state dict, its config.json, a line describing the model file, and False: GPT-2's tokenizer
    files never fit a Qwen3 model (its tokenizer is Qwen3's or a local one the model file does not name)."""
    line = (f"qwen3, L={c.n_layer} NH={c.n_head} NKV={c.n_kv_head} C={c.n_embd} head_dim={c.head_dim} "
            f"FFN={c.ffn_hidden} maxT={c.block_size} V={c.vocab_size} {'tied' if c.tied_embeddings else 'untied'}")
    return hf_state_dict(c, t, dtype), hf_config(c, dtype), line, False


# ----------------------------------------------------------------------------- dev/check_outputs.py's commands

OUTPUT_CHECKS = OutputChecks(
    references=(("qwen3-reference", '"$PY" "$R/dev/qwen3_refs.py" --out_dir qwen3 --muon', "."),),
    model="qwen3_d2.bin",  # and d2 from scratch, on the shards in ts/
    test_states=debug_state_files(("", "qwen3_d2"), ("mha", "qwen3_mha"), ("mqa", "qwen3_mqa"), ("muon", "muon/qwen3_d2"),
                                  ("muon-mqa", "muon/qwen3_mqa")),
    generate="-t qwen3_tokenizer.bin --ids 0,1,2 -n 24 --seed 7 --print-ids",
    **cuda_cpu_decoder_checks("qwen3", "qwen3_d2.bin", "-x 2 -n 2 -s 2 -g 8"),
)


# ----------------------------------------------------------------------------- dev/torch_minimal_step.py's model


def torch_minimal_model(depth: int, vocab: int | None) -> tuple[object, int]:
    """(train_qwen3.py's Qwen3 dN, the loss as its output, and its vocabulary: `vocab`, else VOCAB_SIZE), from
    torch_minimal_decoder."""
    from train_qwen3 import Qwen3

    return torch_minimal_decoder(Qwen3, depth_config(depth, vocab or VOCAB_SIZE))
