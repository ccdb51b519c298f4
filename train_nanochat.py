"""
llmc's PyTorch reference for the nanochat family: nanochat's GPT in one file (weightless RMSNorm, rotary positions
with NanoChat's rotate-half sign, QK-norm after RoPE, grouped-query attention, ReLU^2 MLP, untied head, logit
softcap), as transformers' NanoChatForCausalLM defines it, and the writers of the .bin files the C trainer reads:
the nanochat model file, its debug state and the tokenizer file. The training loop, data loader, AdamW and Muon,
schedule and debug-state steps are the ones every family shares (pyllmc/reference/).

Examples:
    python train_nanochat.py --model d2 --num_iterations 20                      # from scratch, GPT-2 token shards
    python train_nanochat.py --model d2 --optimizer muon --num_iterations 20     # Muon on the blocks' matrices
    python train_nanochat.py --model path/to/nanochat-hf --input_bin SHARD --write_tensors 1 --num_iterations 0 \\
        --batch_size 2 --sequence_length 64 --device cpu                          # import a Hugging Face NanoChat
    python train_nanochat.py --model karpathy/nanochat-d32 ...                   # a hub name (the cache, else a download)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from pyllmc.families.nanochat import NANOCHAT
from pyllmc.reference.flags import decoder_cli, tokenizer_flag, trainer_parser

NANOCHAT_CLI = decoder_cli(__doc__, NANOCHAT, tokenizer_flag("tokenizer.json or a directory holding one; default: the "
                                                             "Hugging Face model directory's, else GPT-2's encoding"))
if __name__ == "__main__":  # the flags first: --help and a bad flag answer before torch's import (seconds)
    trainer_parser(NANOCHAT_CLI).parse_args()

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from pyllmc.families.gpt2 import EOT as GPT2_EOT, VOCAB_SIZE as GPT2_VOCAB
from pyllmc.families.nanochat import (
    VOCAB_SIZE,
    NanoChatConfig,
    depth_config,
    nanochat_config_problem,
    nanochat_header_bytes,
    read_nanochat,
)
from pyllmc.llama3_tokenizer import load_checkpoint_tokenizer
from pyllmc.model_file import atomic_write, header_bytes
from pyllmc.reference.causal_lm import CausalLM, causal_attention
from pyllmc.reference.common import UserError, config_checker, huggingface_reachable, print0
from pyllmc.reference.data_loader import DistributedDataLoader
from pyllmc.reference.file_tensors import ModelFiles, hf_tensor_taker
from pyllmc.reference.optimizers import OptimizerSettings, is_block_matrix, make_optimizer
from pyllmc.reference.tokenizer_files import gpt2_encoding
from pyllmc.reference.training import ModelFamily, reference_main, seeded_sampler

# ----------------------------------------------------------------------------- the model


# check_config(config, where): the shapes the model can be built with; a UserError naming `where` otherwise.
check_config = config_checker(nanochat_config_problem, "nanochat")


def rmsnorm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """Weightless RMSNorm over the last dimension: x / sqrt(mean(x^2) + eps), in float32 for 16-bit inputs."""
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x)


def rope_tables(c: NanoChatConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, each (block_size, HS) float32: angle t * theta^(-2i/HS) in columns i and i + HS/2."""
    HS = c.head_size
    inv_freq = 1.0 / (c.rope_theta ** (torch.arange(0, HS, 2, dtype=torch.int64).float() / HS))  # (HS/2,)
    freqs = torch.arange(c.block_size, dtype=torch.int64).float()[:, None] * inv_freq[None, :]  # (maxT, HS/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (maxT, HS)
    return emb.cos(), emb.sin()


def rope_apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, nh, T, HS) rotated pairwise, dimension i with i + HS/2, with NanoChat's sign:
    rot(x) = cat(x2, -x1) (Llama's is cat(-x2, x1): the rotation runs the other way)."""
    half = x.size(-1) // 2
    rotated = torch.cat((x[..., half:], -x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class CausalSelfAttention(nn.Module):
    """Grouped-query attention with QK-norm after RoPE: query head h uses kv head h // (NH/NKV)."""

    def __init__(self, config: NanoChatConfig, flash: bool):
        super().__init__()
        self.n_head, self.n_kv_head, self.hs = config.n_head, config.n_kv_head, config.head_size
        self.eps, self.flash = config.norm_eps, flash
        # one weight: the q rows, then the k rows, then the v rows (the model file's qkvw)
        self.c_attn = nn.Linear(config.n_embd, (config.n_head + 2 * config.n_kv_head) * config.head_size, bias=False)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.size()
        NH, NKV, HS = self.n_head, self.n_kv_head, self.hs
        q, k, v = self.c_attn(x).split([NH * HS, NKV * HS, NKV * HS], dim=2)
        q = q.view(B, T, NH, HS).transpose(1, 2)  # (B, NH, T, HS)
        k = k.view(B, T, NKV, HS).transpose(1, 2)  # (B, NKV, T, HS)
        v = v.view(B, T, NKV, HS).transpose(1, 2)  # (B, NKV, T, HS)
        q, k = rope_apply(q, cos, sin), rope_apply(k, cos, sin)
        q, k = rmsnorm(q, self.eps), rmsnorm(k, self.eps)  # QK-norm, per head, after RoPE
        k, v = k.repeat_interleave(NH // NKV, dim=1), v.repeat_interleave(NH // NKV, dim=1)  # (B, NH, T, HS)
        return self.c_proj(causal_attention(q, k, v, self.flash))


class MLP(nn.Module):
    """c_proj(relu(c_fc(x))^2): transformers' fc1 and fc2."""

    def __init__(self, config: NanoChatConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, config.ffn_hidden, bias=False)
        self.c_proj = nn.Linear(config.ffn_hidden, config.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.relu(self.c_fc(x)).square())


class Block(nn.Module):
    def __init__(self, config: NanoChatConfig, flash: bool):
        super().__init__()
        self.eps = config.norm_eps
        self.attn = CausalSelfAttention(config, flash)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(rmsnorm(x, self.eps), cos, sin)
        return x + self.mlp(rmsnorm(x, self.eps))


class SoftcappedHead(nn.Linear):
    """lm_head, then softcap * tanh(logits / softcap) when softcap > 0: bounded logits, the head of CausalLM."""

    def __init__(self, n_embd: int, vocab_size: int, softcap: float):
        super().__init__(n_embd, vocab_size, bias=False)
        self.softcap = softcap

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = super().forward(x)
        return self.softcap * torch.tanh(logits / self.softcap) if self.softcap > 0 else logits


# The model file's per-layer tensors, each stacked over layers: (name, module path inside a Block).
LAYER_TENSORS = [("qkvw", "attn.c_attn"), ("attprojw", "attn.c_proj"), ("fcw", "mlp.c_fc"), ("fcprojw", "mlp.c_proj")]


class NanoChat(CausalLM):
    family = NANOCHAT  # its description: Muon splits qkvw into q, k and v (CausalLM.muon_row_blocks)

    def __init__(self, config: NanoChatConfig, flash: bool = False):
        super().__init__()
        check_config(config, "model")
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                h=nn.ModuleList([Block(config, flash) for _ in range(config.n_layer)]),
            )
        )
        self.lm_head = SoftcappedHead(config.n_embd, config.vocab_size, config.softcap)  # never tied to wte
        cos, sin = rope_tables(config)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def file_tensors(self) -> list[tuple[str, list[torch.Tensor]]]:
        """The model file's tensors in order, each as its list of per-layer parts (one part for wte and lm_head)."""
        out = [("wte", [self.transformer.wte.weight])]
        for name, path in LAYER_TENSORS:
            out.append((name, [block.get_submodule(path).weight for block in self.transformer.h]))
        out.append(("lm_head", [self.lm_head.weight]))
        return out

    def init_weights(self, seed: int) -> None:
        """From scratch (nanochat's init), one torch generator seeded with `seed`, in this order: wte ~ N(0, 1);
        per layer qkvw then fcw ~ U(-b, b), b = sqrt(3 / C) (computed in double, used as float32); lm_head ~
        N(0, 0.001); the output projections attprojw and fcprojw zero. llmc/nanochat.h draws the same numbers."""
        g = torch.Generator().manual_seed(seed)
        bound = float(np.float32(3.0 ** 0.5 * self.config.n_embd ** -0.5))
        with torch.no_grad():
            self.transformer.wte.weight.normal_(0.0, 1.0, generator=g)
            for block in self.transformer.h:
                block.attn.c_attn.weight.uniform_(-bound, bound, generator=g)
                block.mlp.c_fc.weight.uniform_(-bound, bound, generator=g)
                block.attn.c_proj.weight.zero_()
                block.mlp.c_proj.weight.zero_()
            self.lm_head.weight.normal_(0.0, 0.001, generator=g)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, return_logits: bool = True,
                reduction: str = "mean"):
        B, T = idx.size()
        if T > self.config.block_size:
            raise UserError(f"sequence length {T} exceeds the model's block size {self.config.block_size}")
        eps = self.config.norm_eps
        x = rmsnorm(self.transformer.wte(idx), eps)  # (B, T, C)
        cos, sin = self.rope_cos[:T].to(x.dtype), self.rope_sin[:T].to(x.dtype)  # (T, HS)
        for block in self.transformer.h:
            x = block(x, cos, sin)
        return self.head_and_loss(rmsnorm(x, eps), targets, return_logits, reduction)

    def configure_optimizers(self, s: OptimizerSettings, zero_stage: int = 0, ns_dtype: torch.dtype | None = None):
        """The references' make_optimizer: AdamW on everything, or Muon on the blocks' matrices (q, k and v, the rows
        of qkvw, as three matrices; attprojw, fcw, fcprojw of each layer) and AdamW on wte and lm_head (nanochat's
        split)."""
        return make_optimizer(self, s, is_block_matrix, zero_stage=zero_stage, ns_dtype=ns_dtype)


# ----------------------------------------------------------------------------- Hugging Face import


def config_from_hf(cfg: dict[str, Any], where: str) -> NanoChatConfig:
    """Our config from a NanoChat config.json (as a dict); a UserError naming the first field the family cannot
    run: another activation, biases, tied embeddings, a head_dim other than C/NH, scaled RoPE, a softcap of 0,
    NaN or below 0, heads that do not divide."""
    def bad(field: str, why: str) -> UserError:
        return UserError(f"{where}: config.json {field} = {cfg.get(field)!r}: {why}")

    def number(field: str, default: float, kind: type) -> Any:
        value = cfg.get(field, default)
        if isinstance(value, bool) or not isinstance(value, int if kind is int else (int, float)):
            raise bad(field, f"must be {'an integer' if kind is int else 'a number'}")
        return kind(value)

    if cfg.get("model_type", "nanochat") != "nanochat":
        raise bad("model_type", "not a NanoChat model")
    if cfg.get("hidden_act", "relu2") != "relu2":
        raise bad("hidden_act", "the nanochat family runs relu2 only")
    if cfg.get("attention_bias", False):
        raise bad("attention_bias", "the nanochat family has no biases")
    if cfg.get("tie_word_embeddings", False):
        raise bad("tie_word_embeddings", "the nanochat family's lm_head is never tied to the embeddings")
    C, NH = number("hidden_size", 768, int), number("num_attention_heads", 6, int)
    NKV = NH if cfg.get("num_key_value_heads") is None else number("num_key_value_heads", NH, int)
    if NH < 1 or C % NH:
        raise bad("num_attention_heads", f"does not divide hidden_size {C}")
    if (C // NH) % 2:
        raise bad("num_attention_heads", f"head size hidden_size / num_attention_heads = {C // NH} must be even for RoPE")
    if NKV < 1 or NKV > NH or NH % NKV:
        raise bad("num_key_value_heads", f"does not divide num_attention_heads {NH}")
    if cfg.get("head_dim") not in (None, C // NH):
        raise bad("head_dim", f"the nanochat family's head size is hidden_size / num_attention_heads = {C // NH}")
    rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        field = "rope_parameters" if cfg.get("rope_parameters") else "rope_scaling"
        raise UserError(f"{where}: config.json {field} has rope_type {rope_type!r}: the nanochat family runs default RoPE only")
    softcap = None if cfg.get("final_logit_softcapping", 15.0) is None else number("final_logit_softcapping", 15.0, float)
    if softcap is not None and not (math.isfinite(softcap) and softcap > 0):
        raise bad("final_logit_softcapping", "must be a finite number > 0, or null for none")
    theta = rope["rope_theta"] if "rope_theta" in rope else cfg.get("rope_theta", 10000.0)
    if isinstance(theta, bool) or not isinstance(theta, (int, float)):
        raise UserError(f"{where}: config.json rope_theta = {theta!r}: must be a number")
    c = NanoChatConfig(
        block_size=number("max_position_embeddings", 2048, int), vocab_size=number("vocab_size", VOCAB_SIZE, int),
        n_layer=number("num_hidden_layers", 12, int), n_head=NH, n_kv_head=NKV, n_embd=C,
        ffn_hidden=number("intermediate_size", 8192, int), norm_eps=number("rms_norm_eps", 1e-6, float),
        rope_theta=float(theta), softcap=0.0 if softcap is None else softcap,
    )
    check_config(c, where)
    return c


def from_hf_state_dict(config: NanoChatConfig, sd: dict[str, torch.Tensor], where: str, flash: bool = False) -> NanoChat:
    """Our NanoChat from NanoChatForCausalLM's tensors: q, k, v concatenated into c_attn, fc1 / fc2 as c_fc / c_proj."""
    model = NanoChat(config, flash)
    take = hf_tensor_taker(sd, where)
    with torch.no_grad():
        model.transformer.wte.weight.copy_(take("model.embed_tokens.weight"))
        for i, block in enumerate(model.transformer.h):
            p = f"model.layers.{i}."
            block.attn.c_attn.weight.copy_(torch.cat([take(p + f"self_attn.{n}_proj.weight") for n in "qkv"]))
            block.attn.c_proj.weight.copy_(take(p + "self_attn.o_proj.weight"))
            block.mlp.c_fc.weight.copy_(take(p + "mlp.fc1.weight"))
            block.mlp.c_proj.weight.copy_(take(p + "mlp.fc2.weight"))
        model.lm_head.weight.copy_(take("lm_head.weight"))
    return model


def from_hf_model(hf, where: str = "model", flash: bool = False) -> NanoChat:
    """Our NanoChat from a transformers NanoChatForCausalLM (its config checked as config_from_hf does)."""
    return from_hf_state_dict(config_from_hf(hf.config.to_dict(), where), hf.state_dict(), where, flash)


def hf_model_dir(name: str) -> Path:
    """The local directory of --model NAME: the directory itself, else the hub's snapshot (the cache first)."""
    if Path(name).is_dir():
        return Path(name)
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(name, local_files_only=True))
    except Exception:
        if not huggingface_reachable(timeout=3.0):
            raise UserError(f"--model {name}: not a directory, not in the Hugging Face cache, and huggingface.co cannot be "
                            "reached (offline? download it elsewhere and pass its directory)") from None
    try:
        return Path(snapshot_download(name, allow_patterns=["*.json", "*.safetensors", "*.bin", "*.model"]))
    except Exception as e:
        raise UserError(f"--model {name}: cannot download it from the hub ({' '.join(str(e).split())[:200]})") from None


def load_hf_nanochat(name: str, flash: bool) -> tuple[NanoChat, Path]:
    """A NanoChatForCausalLM from a local directory or a hub name, its config.json checked before any weight is
    read; returns our model and the directory."""
    where = f"--model {name}"
    directory = hf_model_dir(name)
    try:
        cfg = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{where}: not a Hugging Face model directory (config.json: {' '.join(str(e).split())[:200]})") from None
    config = config_from_hf(cfg, where)
    from transformers import NanoChatForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        hf = NanoChatForCausalLM.from_pretrained(str(directory), dtype=torch.float32)
    except (OSError, ValueError, RuntimeError) as e:
        raise UserError(f"{where}: cannot load its weights ({' '.join(str(e).split())[:200]})") from None
    return from_hf_state_dict(config, hf.state_dict(), where, flash), directory


def load_model(name: str, seed: int, flash: bool = False) -> tuple[NanoChat, str, Path | None]:
    """Model from a name: dN from scratch, one of our nanochat .bin files, or a Hugging Face NanoChat (directory or
    hub name). Returns it, the stem of the files written for it, and the Hugging Face directory (None otherwise)."""
    if name.startswith("d") and name[1:].isdigit():
        depth = int(name[1:])
        if not 1 <= depth <= 64:
            raise UserError(f"--model {name}: the depth must be in 1..64 (e.g. d2)")
        config = depth_config(depth)
        check_config(config, f"--model {name}")
        model = NanoChat(config, flash)
        model.init_weights(seed)
        return model, f"{NANOCHAT.name}_{name}", None
    if name.endswith(".bin"):
        return read_model(name, flash), Path(name).stem, None
    model, directory = load_hf_nanochat(name, flash)
    return model, f"{NANOCHAT.name}_{Path(name).name}", directory


# ----------------------------------------------------------------------------- llmc .bin files


# the model file and the debug state (pyllmc.reference.file_tensors.ModelFiles): the Llama 3 layout with grad norms
FILES = ModelFiles(NanoChat, NANOCHAT, nanochat_header_bytes, read_nanochat, global_names=("wte", "lm_head"))
stacked, write_model, read_model = FILES.stacked, FILES.write_model, FILES.read_model
reference_steps, write_debug_state = FILES.reference_steps, FILES.write_debug_state


# ----------------------------------------------------------------------------- tokenizer


def write_tokenizer(pieces: list[bytes], eot: int, filename: str | Path) -> None:
    """GPT-2's tokenizer file format (version 2): uint32 header (vocab, end-of-text id), then per id a length byte
    and its bytes; UserError when a token is empty or longer than 255 bytes."""
    for i, piece in enumerate(pieces):
        if not 1 <= len(piece) <= 255:
            raise UserError(f"token {i} is {len(piece)} bytes long: the tokenizer file holds 1 to 255 bytes per token")
    body = b"".join(bytes([len(p)]) + p for p in pieces)
    header = header_bytes([NANOCHAT.tokenizer_magic, NANOCHAT.tokenizer_version, len(pieces), eot], "<u4")
    atomic_write(filename, [header, body])
    print0(f"wrote {filename}")


class NanoChatText:
    """The model's tokenizer for the files and samples: a tokenizer.json (--tokenizer, or the Hugging Face
    directory's), else GPT-2's encoding when the vocabulary holds it, else none (ids only)."""

    def __init__(self, args: argparse.Namespace, model_dir: Path | None, vocab_size: int):
        self.json = None
        if args.tokenizer or (model_dir is not None and (model_dir / "tokenizer.json").is_file()):
            self.json = load_checkpoint_tokenizer(args.tokenizer or str(model_dir))
            if self.json.vocab_size > vocab_size:
                raise UserError(f"{self.json.source}: {self.json.vocab_size} tokens, more than the model's vocab {vocab_size}")
        self.gpt2 = self.json is None and vocab_size >= GPT2_VOCAB

    def write(self, filename: str) -> None:
        if self.json is not None:
            write_tokenizer(self.json.token_bytes(), self.json.eot, filename)
        elif self.gpt2:
            enc = gpt2_encoding()
            write_tokenizer([enc.decode_bytes([i]) for i in range(enc.max_token_value + 1)], enc.eot_token, filename)
        else:
            print0(f"no {filename}: the model has no tokenizer.json and its vocab is smaller than GPT-2's")

    def start_token(self) -> int:
        return self.json.bos if self.json is not None else (GPT2_EOT if self.gpt2 else 0)

    def decode(self, ids: list[int]) -> str:
        if self.json is not None:
            return self.json.decode(ids)
        return gpt2_encoding().decode(ids) if self.gpt2 else " ".join(map(str, ids))


# ----------------------------------------------------------------------------- training


def nanochat_family(args: argparse.Namespace) -> ModelFamily:
    model, stem, model_dir = load_model(args.model, args.seed, bool(args.flash))
    c = model.config
    text = NanoChatText(args, model_dir, c.vocab_size)
    write_files = FILES.file_writer(args, model, stem, lambda: text.write(NANOCHAT.tokenizer_file))
    return ModelFamily(model=model, description=f"L={c.n_layer} NH={c.n_head} NKV={c.n_kv_head} C={c.n_embd} "
                       f"FFN={c.ffn_hidden} V={c.vocab_size} softcap={c.softcap:g}", loader=DistributedDataLoader,
                       write_files=write_files, make_sampler=seeded_sampler(args, text.start_token(), text.decode),
                       write_model=write_model)


def main(argv: list[str] | None = None) -> int:
    return reference_main(NANOCHAT_CLI, nanochat_family, argv)


if __name__ == "__main__":
    sys.exit(main())
