"""
What the decoders with weighted RMSNorm, rotary positions, grouped-query attention and a SwiGLU MLP share
(train_llama3.py's Llama, train_qwen3.py's Qwen3): the layers, the pre-norm block, and StackedDecoder, a model whose
file stores each block tensor stacked over the layers (its tensor table, the from-scratch init, forward, optimizer).
A family brings its config, its inverse RoPE frequencies and its table (FileLayout).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from pyllmc.reference.causal_lm import CausalLM, causal_attention
from pyllmc.reference.common import UserError
from pyllmc.reference.optimizers import OptimizerSettings, is_block_matrix, make_optimizer


class RMSNorm(nn.Module):
    """x / rms(x) over the last dimension, times a learned weight; half-precision inputs are normalised in float32."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        xf = x.float() if dtype in (torch.float16, torch.bfloat16) else x
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(dtype)


def rope_cos_sin(inv_freq: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, each (block_size, HS) float32, of the angle t * inv_freq[i] in columns i and i + HS/2."""
    t = torch.arange(block_size, dtype=torch.int64).float()
    freqs = t[:, None] * inv_freq[None, :]  # (maxT, HS/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (maxT, HS)
    return emb.cos(), emb.sin()


def rope_apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, nh, T, HS) rotated pairwise: dimension i with i + HS/2 (transformers' rotate_half convention)."""
    half = x.size(-1) // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class GroupedQueryAttention(nn.Module):
    """NH query heads of HS share NKV key/value heads (query head h uses kv head h // (NH/NKV)); the attention width
    NH * HS may differ from C. With qk_norm_eps, q and k are RMS-normalised per head (learned weights q_norm and k_norm,
    Qwen3's QK-norm) before RoPE."""

    def __init__(self, n_embd: int, n_head: int, n_kv_head: int, head_size: int, flash: bool,
                 qk_norm_eps: float | None = None):
        super().__init__()
        self.n_head, self.n_kv_head, self.hs, self.flash = n_head, n_kv_head, head_size, flash
        # one weight: the q rows, then the k rows, then the v rows (the model file's qkvw)
        self.c_attn = nn.Linear(n_embd, (n_head + 2 * n_kv_head) * head_size, bias=False)
        self.qk_norm = qk_norm_eps is not None
        if self.qk_norm:
            self.q_norm = RMSNorm(head_size, qk_norm_eps)
            self.k_norm = RMSNorm(head_size, qk_norm_eps)
        self.c_proj = nn.Linear(n_head * head_size, n_embd, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.size()
        NH, NKV, HS = self.n_head, self.n_kv_head, self.hs
        q, k, v = self.c_attn(x).split([NH * HS, NKV * HS, NKV * HS], dim=2)
        q, k, v = q.view(B, T, NH, HS), k.view(B, T, NKV, HS), v.view(B, T, NKV, HS)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, NH or NKV, T, HS)
        q, k = rope_apply(q, cos, sin), rope_apply(k, cos, sin)
        k, v = k.repeat_interleave(NH // NKV, dim=1), v.repeat_interleave(NH // NKV, dim=1)  # (B, NH, T, HS)
        return self.c_proj(causal_attention(q, k, v, self.flash))  # (B, T, NH * HS) -> (B, T, C)


class SwiGLU(nn.Module):
    """c_proj(silu(c_fc(x)) * c_fc2(x)): c_fc is the gate (Llama's w1), c_fc2 the up (w3), c_proj the down (w2)."""

    def __init__(self, n_embd: int, hidden: int):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, hidden, bias=False)
        self.c_fc2 = nn.Linear(n_embd, hidden, bias=False)
        self.c_proj = nn.Linear(hidden, n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.silu(self.c_fc(x)) * self.c_fc2(x))


class PreNormBlock(nn.Module):
    """x + attn(ln_1(x)), then + mlp(ln_2(.)), with weighted RMSNorms."""

    def __init__(self, n_embd: int, eps: float, attn: Callable[[], nn.Module], mlp: Callable[[], nn.Module]):
        super().__init__()
        self.ln_1 = RMSNorm(n_embd, eps)
        self.attn = attn()
        self.ln_2 = RMSNorm(n_embd, eps)
        self.mlp = mlp()

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), cos, sin)
        return x + self.mlp(self.ln_2(x))


@dataclass(frozen=True)
class FileLayout:
    """A family's model-file tensors between wte and lnfw, each stacked over layers, and its from-scratch init rule."""

    block_tensors: dict[str, str]  # file tensor name -> the module inside a block whose .weight it stacks, file order
    norm_tensors: tuple[str, ...]  # RMSNorm weights (lnfw among them): 1 from scratch
    residual_tensors: tuple[str, ...]  # the projections into the residual stream: std 0.02 / sqrt(2L)


class StackedDecoder(CausalLM):
    """wte, the blocks (transformer.h), the final RMSNorm and lm_head (wte itself when config.tied_embeddings),
    with the RoPE tables of `inv_freq` as buffers. config has block_size, vocab_size, n_layer, n_embd, norm_eps and
    tied_embeddings; make_block() builds one block."""

    def __init__(self, config, make_block: Callable[[], nn.Module], inv_freq: torch.Tensor, layout: FileLayout):
        super().__init__()
        self.config, self.layout = config, layout
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            h=nn.ModuleList([make_block() for _ in range(config.n_layer)]),
            ln_f=RMSNorm(config.n_embd, config.norm_eps),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tied_embeddings:
            self.lm_head.weight = self.transformer.wte.weight
        cos, sin = rope_cos_sin(inv_freq, config.block_size)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def file_tensors(self) -> list[tuple[str, list[torch.Tensor]]]:
        """The model file's tensors in order, each as its list of per-layer parts (one part for the global ones):
        wte, the layout's block tensors, lnfw, and lm_head unless tied."""
        blocks = self.transformer.h
        out = [("wte", [self.transformer.wte.weight])]
        out += [(name, [b.get_submodule(path).weight for b in blocks]) for name, path in self.layout.block_tensors.items()]
        out.append(("lnfw", [self.transformer.ln_f.weight]))
        if not self.config.tied_embeddings:
            out.append(("lm_head", [self.lm_head.weight]))
        return out

    def init_weights(self, seed: int) -> None:
        """From scratch, one torch generator seeded with `seed` drawing normal_ once per model-file tensor that is not
        a norm weight, in file order, over the whole tensor stacked across layers. std 0.02, the layout's residual
        projections 0.02/sqrt(2L); RMSNorm weights 1."""
        g = torch.Generator().manual_seed(seed)
        std_residual = 0.02 / math.sqrt(2 * self.config.n_layer)
        with torch.no_grad():
            for name, parts in self.file_tensors():
                if name in self.layout.norm_tensors:
                    for p in parts:
                        p.fill_(1.0)
                    continue
                std = std_residual if name in self.layout.residual_tensors else 0.02
                block = torch.empty(len(parts), *parts[0].shape).normal_(0.0, std, generator=g)
                for p, drawn in zip(parts, block):
                    p.copy_(drawn)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, return_logits: bool = True,
                reduction: str = "mean"):
        B, T = idx.size()
        if T > self.config.block_size:
            raise UserError(f"sequence length {T} exceeds the model's block size {self.config.block_size}")
        x = self.transformer.wte(idx)  # (B, T, C)
        cos, sin = self.rope_cos[:T].to(x.dtype), self.rope_sin[:T].to(x.dtype)  # (T, HS)
        for block in self.transformer.h:
            x = block(x, cos, sin)
        return self.head_and_loss(self.transformer.ln_f(x), targets, return_logits, reduction)

    def configure_optimizers(self, s: OptimizerSettings, zero_stage: int = 0, ns_dtype: torch.dtype | None = None):
        """The references' make_optimizer: AdamW (weight decay on the 2-D weights, not on the RMSNorm weights), or
        Muon on the blocks' matrices (qkvw, attention projection, gate, up, down) and AdamW on the rest."""
        return make_optimizer(self, s, is_block_matrix, zero_stage=zero_stage, ns_dtype=ns_dtype)
