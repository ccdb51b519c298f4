"""
What every family's PyTorch model shares: causal self-attention on the heads, and CausalLM, the head's logits and
loss and sampling after a model's blocks (train_gpt2.py's GPT, train_llama3.py's Llama, train_nanochat.py's NanoChat).
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from pyllmc.family import Family


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, flash: bool) -> torch.Tensor:
    """softmax(q k^T / sqrt(HS), causal) v for q, k, v (B, NH, T, HS), the heads side by side again: (B, T, NH * HS).
    flash: scaled_dot_product_attention; else the explicit product (every family's attention)."""
    B, NH, T, HS = q.size()
    if flash:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))  # (B, NH, T, T)
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        att = att.masked_fill(~mask, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
    return y.transpose(1, 2).contiguous().view(B, T, NH * HS)


class CausalLM(nn.Module):
    """What every family's model shares after its blocks: the head's logits and loss, and sampling.
    Subclasses have .config.block_size, .transformer.wte, .lm_head and
    forward(idx, targets, return_logits, reduction) -> (logits, loss)."""

    family: Family | None = None  # the family's description, where the model reads data from it (muon_row_blocks)

    def muon_row_blocks(self) -> dict[str, tuple[int, ...]]:
        """The Muon matrices that are blocks of rows of one weight: parameter name -> the rows of each block in order
        (make_optimizer orthogonalises every other matrix whole). Where the family's description says so
        (Family.muon_splits_qkv), each block's fused projection attn.c_attn is its q, k and v rows: NH, NKV and NKV
        heads of HS rows (the attention module's n_head, n_kv_head, hs)."""
        if self.family is None or not self.family.muon_splits_qkv:
            return {}
        blocks = {}
        for i, block in enumerate(self.transformer.h):
            a = block.attn
            blocks[f"transformer.h.{i}.attn.c_attn.weight"] = (a.n_head * a.hs, a.n_kv_head * a.hs, a.n_kv_head * a.hs)
        return blocks

    def head_and_loss(self, x: torch.Tensor, targets: torch.Tensor | None, return_logits: bool,
                      reduction: str = "mean"):
        """x (B, T, C) after the final norm: (logits or None, cross-entropy over targets or None). Target -1 is not
        supervised (a chat shard's masked position); reduction "mean" averages over the supervised positions, "sum"
        adds them up (the masked loss of train_loop, divided by the whole step's count)."""
        if targets is not None:
            logits = self.lm_head(x)  # (B, T, V)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=-1,
                                   reduction=reduction)
        else:
            logits, loss = self.lm_head(x[:, [-1], :]), None  # only the last position is needed
        return (logits if return_logits else None), loss

    @torch.no_grad()
    def grow_vocab(self, V: int) -> None:
        """The vocabulary grown to V ids (chat tokens after a base vocabulary, as GPT-2's 50,257 -> 50,261): the new
        rows of wte, and of lm_head when it is not tied to wte, start as the mean of that matrix's existing rows (a
        token the model has not seen starts as an average one); config.vocab_size becomes V."""
        wte, head = self.transformer.wte, self.lm_head
        old_V = wte.weight.size(0)
        tied = head.weight is wte.weight

        def grown(w: torch.Tensor) -> nn.Parameter:  # (old_V, C) -> (V, C)
            return nn.Parameter(torch.cat([w, w.mean(dim=0, keepdim=True).expand(V - old_V, -1)]))

        wte.weight, wte.num_embeddings = grown(wte.weight), V
        head.weight, head.out_features = (wte.weight if tied else grown(head.weight)), V
        self.config = dataclasses.replace(self.config, vocab_size=V)

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= self.config.block_size else idx[:, -self.config.block_size :]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / max(temperature, 1e-6)
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("inf")
            idx_next = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1, generator=generator)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


class LossOnly(nn.Module):
    """A CausalLM as a module whose forward(idx, targets) returns the mean loss alone (dev/torch_minimal_step.py
    compiles this whole)."""

    def __init__(self, model: CausalLM):
        super().__init__()
        self.model = model

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.model(idx, targets, return_logits=False)[1]
