"""
nanochat's GPT (pyllmc/family.py says what each field is): its model file, the token shards it trains on (GPT-2's),
its tokenizer file and debug state, the reference's defaults, and the model file's header, checks, tensor shapes and
reader. llmc/nanochat.h reads the same file in C.

Model file: 256 int32: [0]=20251013 [1]=3 or 5 [2]=block size [3]=V [4]=L [5]=NH [6]=NKV [7]=C [8]=FFN (MLP hidden);
  then 256 float32: [0]=norm_eps [1]=rope_theta [2]=softcap (0 = none)
  then wte (V, C), qkvw (L, (NH + 2 NKV) HS, C), attprojw (L, C, C), fcw (L, FFN, C), fcprojw (L, C, FFN),
  lm_head (V, C).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pyllmc.family import Family, OutputChecks, cuda_cpu_decoder_checks, debug_state_files
from pyllmc.families.decoder import DecoderSizes, hf_size_fields, round_to_float32, torch_minimal_decoder
from pyllmc.families.gpt2 import GPT2
from pyllmc.model_file import attention_problem, cast_to, header_bytes, read_config_header, read_config_model

VOCAB_SIZE = 50304  # dN's vocabulary: GPT-2's 50257 padded to a multiple of 64 (trains on GPT-2 token shards)
BOS_NAMES = ("<|bos|>", "<|endoftext|>")  # a checkpoint tokenizer's document delimiter, the first one it knows

NANOCHAT = Family(
    name="nanochat",
    model_magic=20251013,  # and its debug state's (the Llama 3 layout, grad norms per step)
    # no norm weights (RMSNorm is weightless), lm_head always stored (never tied to wte)
    tensor_names=("wte", "qkvw", "attprojw", "fcw", "fcprojw", "lm_head"),
    shards=GPT2.shards,
    tokenizer_version=GPT2.tokenizer_version,  # GPT-2's tokenizer file: version 2 carries the end-of-text id
    default_model="d2",
    model_help="dN (from scratch), a Hugging Face NanoChat directory or hub name, or one of our nanochat .bin files",
    default_input_bin=GPT2.default_input_bin,
    input_bin_help="train token shards (glob; GPT-2's format, ids below the model's vocab size)",
    chat_format="nanochat",
    learning_rate=3e-4,
    muon_splits_qkv=True,  # nanochat's Muon steps q, k and v as three matrices
)


# ----------------------------------------------------------------------------- the model file


@dataclass(kw_only=True)
class NanoChatConfig(DecoderSizes):
    """A nanochat GPT's shape and hyperparameters: everything its model file's header holds (FFN: the ReLU^2 MLP's)."""
    norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    softcap: float = 15.0  # logits = softcap * tanh(logits / softcap); 0 = none

    def __post_init__(self) -> None:
        round_to_float32(self, "norm_eps", "rope_theta", "softcap")  # as the model file stores them

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head


def nanochat_config_problem(c: NanoChatConfig) -> str:
    """What keeps the model from being built with these shapes ("" when nothing does): llmc/nanochat.h's checks."""
    if c.smallest_size() < 1:
        return "every size must be at least 1"
    if c.n_embd % c.n_head:
        return f"channels C {c.n_embd} is not a multiple of heads NH {c.n_head}"
    if c.head_size % 2:
        return f"head size {c.head_size} (C / NH) must be even for RoPE"
    problem = attention_problem(c.n_head, c.n_kv_head, c.norm_eps, c.rope_theta)
    if problem:
        return problem
    if not (math.isfinite(c.softcap) and c.softcap >= 0):
        return f"softcap {c.softcap} must be finite and >= 0 (0 = none)"
    return ""


def nanochat_tensor_shapes(c: NanoChatConfig) -> dict[str, tuple[int, ...]]:
    """Every model-file tensor in file order (NANOCHAT.tensor_names)."""
    L, C, V, F, HS = c.n_layer, c.n_embd, c.vocab_size, c.ffn_hidden, c.head_size
    return {"wte": (V, C), "qkvw": (L, (c.n_head + 2 * c.n_kv_head) * HS, C), "attprojw": (L, C, C),
            "fcw": (L, F, C), "fcprojw": (L, C, F), "lm_head": (V, C)}


def nanochat_header_bytes(c: NanoChatConfig, version: int) -> bytes:
    ints = [NANOCHAT.model_magic, version, c.block_size, c.vocab_size, c.n_layer, c.n_head, c.n_kv_head, c.n_embd, c.ffn_hidden]
    return header_bytes(ints) + header_bytes([c.norm_eps, c.rope_theta, c.softcap], "<f4")


def nanochat_config_from_header(path: Path, hi: np.ndarray, hf: np.ndarray) -> NanoChatConfig:
    return NanoChatConfig(block_size=int(hi[2]), vocab_size=int(hi[3]), n_layer=int(hi[4]), n_head=int(hi[5]),
                          n_kv_head=int(hi[6]), n_embd=int(hi[7]), ffn_hidden=int(hi[8]), norm_eps=float(hf[0]),
                          rope_theta=float(hf[1]), softcap=float(hf[2]))


def read_nanochat_header(path: str | Path) -> tuple[NanoChatConfig, int]:
    """A nanochat model file's config and version (3 fp32, 5 bf16): magic, version, header fields and file length
    checked, one ModelFileError line each."""
    return read_config_header(path, NANOCHAT, "nanochat", nanochat_config_from_header, nanochat_config_problem,
                              nanochat_tensor_shapes)


def read_nanochat(path: str | Path) -> tuple[NanoChatConfig, dict[str, np.ndarray]]:
    """A nanochat model file: its config and its tensors (float32, file order)."""
    return read_config_model(path, NANOCHAT, read_nanochat_header, nanochat_tensor_shapes)


# ----------------------------------------------------------------------------- dN from scratch


def depth_config(depth: int) -> NanoChatConfig:
    """dN from scratch (nanochat's depth rule): L=N, C=64N, heads of 128 (one head of C when C < 128), MHA,
    FFN=4C, GPT-2's vocabulary padded to 50304, softcap 15."""
    C = 64 * depth
    NH = max(1, math.ceil(C / 128))
    return NanoChatConfig(block_size=1024, vocab_size=VOCAB_SIZE, n_layer=depth, n_head=NH, n_kv_head=NH, n_embd=C,
                          ffn_hidden=4 * C, norm_eps=1e-6, rope_theta=10000.0, softcap=15.0)


def depth_parameters(depth: int, vocab_size: int = VOCAB_SIZE) -> int:
    """The parameters of the dN model (its model file's tensors) at a vocabulary of vocab_size."""
    c = depth_config(depth)
    c.vocab_size = vocab_size
    return sum(math.prod(shape) for shape in nanochat_tensor_shapes(c).values())


def depth_linears(depth: int) -> tuple[int, int, list[tuple[int, int]]]:
    """(L, C, the linear layers of one block as (out, in) features) of the dN model: qkv, attention projection, the MLP's
    input and output."""
    c = depth_config(depth)
    C, F, qkv = c.n_embd, c.ffn_hidden, (c.n_head + 2 * c.n_kv_head) * c.head_size
    return c.n_layer, C, [(qkv, C), (C, C), (F, C), (C, F)]


# ----------------------------------------------------------------------------- Hugging Face export (dev/eval/export_hf.py)


def hf_state_dict(c: NanoChatConfig, t: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
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


def hf_config(c: NanoChatConfig, dtype: str) -> dict:
    """NanoChatConfig's fields; with GPT-2's vocabulary its end-of-text id is the BOS, EOS and padding id."""
    special = GPT2.shards.vocab_size - 1 if c.vocab_size >= GPT2.shards.vocab_size else None
    return {
        "architectures": ["NanoChatForCausalLM"],
        "model_type": "nanochat",
        **hf_size_fields(c),
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


def hf_export(c: NanoChatConfig, t: dict[str, np.ndarray], dtype: str) -> tuple[dict[str, np.ndarray], dict, str, bool]:
    """The NanoChatForCausalLM state dict, its config.json, a line describing the model file, and whether GPT-2's
    tokenizer files fit its vocabulary (it holds GPT-2's ids)."""
    line = (f"nanochat, L={c.n_layer} NH={c.n_head} NKV={c.n_kv_head} C={c.n_embd} FFN={c.ffn_hidden} "
            f"maxT={c.block_size} V={c.vocab_size} softcap={c.softcap:g}")
    return hf_state_dict(c, t, dtype), hf_config(c, dtype), line, c.vocab_size >= GPT2.shards.vocab_size


# ----------------------------------------------------------------------------- dev/check_outputs.py's commands

OUTPUT_CHECKS = OutputChecks(
    references=(("nanochat-reference", '"$PY" "$R/dev/nanochat_refs.py" --out_dir nanochat --no_d2', "."),),
    # d2 from scratch on GPT-2's shards (its tokens: the sample is decoded), the imported GQA model for Muon and bf16
    model="d2", data="../data", scratch_model=None, side_model="nanochat_gqa.bin",
    test_states=debug_state_files(("", "nanochat_gqa"), ("mqa", "nanochat_mqa"), ("muon", "muon/nanochat_gqa"),
                                  ("muon-mqa", "muon/nanochat_mqa")),
    generate='-t nanochat_tokenizer.bin -p "ROMEO:" -n 24 --seed 7 --top-p 0.9',
    **cuda_cpu_decoder_checks("nanochat", "nanochat_gqa.bin", "-x 2 -n 2 -s 0"),
)


# ----------------------------------------------------------------------------- dev/torch_minimal_step.py's model


def torch_minimal_model(depth: int, vocab: int | None) -> tuple[object, int]:
    """(train_nanochat.py's NanoChat dN with SDPA attention as a module returning the loss, its vocabulary: its own
    VOCAB_SIZE; `vocab` is not used)."""
    from train_nanochat import NanoChat

    return torch_minimal_decoder(NanoChat, depth_config(depth))
