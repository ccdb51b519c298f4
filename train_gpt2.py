"""
llmc's PyTorch reference: a GPT-2 in one file, its training loop, and the writers of every .bin
file the C and CUDA trainers read (model checkpoint, tokenizer, debug state).

Examples:
    python train_gpt2.py                                   # pretrained GPT-2 124M (d12 from scratch offline)
    python train_gpt2.py --model d12 --num_iterations 0    # just write gpt2_124M*.bin and the tokenizer
    torchrun --nproc_per_node 2 train_gpt2.py --device cpu --model d2 --batch_size 2
"""

from __future__ import annotations

import argparse
import copy
import gc
import glob
import math
import os
import socket
import struct
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from family import Family
from gpt2_family import EOT as GPT2_EOT, GPT2, LAYER_PARAMETERS, VOCAB_SIZE as GPT2_VOCAB
from model_file import (
    VERSIONS,
    Gpt2Header,
    ModelFileError,
    atomic_write,
    gpt2_header_bytes,
    gpt2_padded_vocab,
    header_bytes,
    read_gpt2,
    write_model_file,
)
from token_shards import DataFormatError, read_datafile

PRETRAINED = {"gpt2": "124M", "gpt2-medium": "355M", "gpt2-large": "774M", "gpt2-xl": "1558M"}
DEPTH_SIZES = {12: "124M", 24: "355M", 36: "774M", 48: "1558M"}
# dN models with published GPT-2 shapes; any other N gets C = 64*N, NH = N (head size 64)
DEPTH_SHAPES = {6: (384, 6), 12: (768, 12), 24: (1024, 16), 36: (1280, 20), 48: (1600, 25)}

STATE_MAGIC, TOKENIZER_MAGIC = GPT2.debug_state_magic, GPT2.tokenizer_magic


class UserError(Exception):
    """A problem with the user's input: printed as one `error:` line, exit 1."""


# ----------------------------------------------------------------------------- the model


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = GPT2_VOCAB
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, flash: bool) -> torch.Tensor:
    """softmax(q k^T / sqrt(HS), causal) v for q, k, v (B, NH, T, HS), the heads side by side again: (B, T, NH * HS).
    flash: scaled_dot_product_attention; else the explicit product (train_llama3.py's attention too)."""
    B, NH, T, HS = q.size()
    if flash:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))  # (B, NH, T, T)
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        att = att.masked_fill(~mask, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
    return y.transpose(1, 2).contiguous().view(B, T, NH * HS)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig, flash: bool):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.n_head, self.n_embd, self.flash = config.n_head, config.n_embd, flash

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, NH, T, HS)
        return self.c_proj(causal_attention(q, k, v, self.flash))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config: GPTConfig, flash: bool):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config, flash)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class CausalLM(nn.Module):
    """What GPT and train_llama3.py's Llama share after their blocks: the head's logits and loss, and sampling.
    Subclasses have .config.block_size, .lm_head and forward(idx) -> (logits, loss)."""

    def head_and_loss(self, x: torch.Tensor, targets: torch.Tensor | None, return_logits: bool):
        """x (B, T, C) after the final norm: (logits or None, mean cross-entropy over targets or None)."""
        if targets is not None:
            logits = self.lm_head(x)  # (B, T, V)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))
        else:
            logits, loss = self.lm_head(x[:, [-1], :]), None  # only the last position is needed
        return (logits if return_logits else None), loss

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


class GPT(CausalLM):
    def __init__(self, config: GPTConfig, flash: bool = False):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                h=nn.ModuleList([Block(config, flash) for _ in range(config.n_layer)]),
                ln_f=nn.LayerNorm(config.n_embd),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as in GPT-2

    def init_weights(self, seed: int) -> None:
        """GPT-2's init, drawn from one generator in checkpoint order so the C trainer can reproduce it bit for bit."""
        g = torch.Generator().manual_seed(seed)
        std_residual = 0.02 / math.sqrt(2 * self.config.n_layer)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                    p.fill_(1.0)
                else:
                    p.zero_()
            self.transformer.wte.weight.normal_(0.0, 0.02, generator=g)
            self.transformer.wpe.weight.normal_(0.0, 0.02, generator=g)
            for block in self.transformer.h:
                block.attn.c_attn.weight.normal_(0.0, 0.02, generator=g)
                block.attn.c_proj.weight.normal_(0.0, std_residual, generator=g)
                block.mlp.c_fc.weight.normal_(0.0, 0.02, generator=g)
                block.mlp.c_proj.weight.normal_(0.0, std_residual, generator=g)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, return_logits: bool = True):
        B, T = idx.size()
        if T > self.config.block_size:
            raise UserError(f"sequence length {T} exceeds the model's block size {self.config.block_size}")
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)  # (B, T, C)
        for block in self.transformer.h:
            x = block(x)
        return self.head_and_loss(self.transformer.ln_f(x), targets, return_logits)

    def configure_optimizers(self, weight_decay: float, lr: float, betas: tuple[float, float], eps: float,
                             zero_stage: int = 0, fused: bool = False) -> torch.optim.Optimizer:
        """AdamW on every parameter (make_optimizer with --optimizer adamw)."""
        settings = OptimizerSettings(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps, fused=fused)
        return make_optimizer(self, settings, gpt2_is_block_matrix, zero_stage=zero_stage)


# ----------------------------------------------------------------------------- optimizers

MUON_ADJUST_LR = ("original", "match_rms_adamw")
OPTIMIZERS = ("adamw", "muon")


@dataclass
class OptimizerSettings:
    """AdamW (lr, betas, eps, fused) for everything, or with name = "muon" torch.optim.Muon on the block
    matrices (muon_*) and AdamW on the rest. Weight decay is decoupled in both; AdamW decays 2-D tensors only."""
    name: str = "adamw"
    lr: float = 3e-4
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    fused: bool = False
    muon_lr: float = 1e-3
    muon_momentum: float = 0.95
    muon_nesterov: bool = True
    muon_ns_steps: int = 5
    muon_adjust_lr: str = "original"


def gpt2_is_block_matrix(name: str, p: torch.Tensor) -> bool:
    """The matrices Muon trains: the 2-D weights inside the blocks (qkv, attention projection, fc, fc projection)."""
    return name.startswith("transformer.h.") and p.dim() == 2


def newton_schulz(grad: torch.Tensor, steps: int, eps: float = 1e-7, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """torch.optim.Muon's orthogonalisation (torch/optim/_muon.py) with its arithmetic in `dtype` (torch: bfloat16):
    X = G (transposed when it has more rows than columns) / max(||G||_F, eps), then `steps` times
    X = a X + (b A + c A A) X with A = X X^T, (a, b, c) = (3.4445, -4.7750, 2.0315)."""
    a, b, c = torch.optim._muon.DEFAULT_A, torch.optim._muon.DEFAULT_B, torch.optim._muon.DEFAULT_C
    x = grad.to(dtype)  # grad itself when it already is `dtype`: never written to (it may be the momentum buffer)
    tall = grad.size(0) > grad.size(1)
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.T
        gram_update = torch.addmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.addmm(x, gram_update, x, beta=a)
    return x.T if tall else x


class MuonNS(torch.optim.Muon):
    """torch.optim.Muon with its Newton-Schulz iteration in `ns_dtype` instead of bfloat16: the reference of the
    debug state, which the C trainer's float32 iteration is checked against. Momentum, Nesterov, weight decay
    and lr adjustment are torch's own lines (_single_tensor_muon); with ns_dtype = bfloat16 it is torch.optim.Muon
    bit for bit (tests/test_muon.py)."""

    def __init__(self, params, ns_dtype: torch.dtype, **kwargs) -> None:
        super().__init__(params, **kwargs)
        self.ns_dtype = ns_dtype

    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None:
            raise ValueError("MuonNS.step takes no closure")
        for group in self.param_groups:
            lr, wd, momentum = group["lr"], group["weight_decay"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - momentum)
                update = p.grad.lerp(buf, momentum) if group["nesterov"] else buf
                update = newton_schulz(update, group["ns_steps"], group["eps"], self.ns_dtype).to(p.dtype)
                adjusted_lr = torch.optim._muon._adjust_lr(lr, group["adjust_lr_fn"], p.shape)
                p.mul_(1 - lr * wd)
                p.add_(update, alpha=-adjusted_lr)
        return None


def owners_by_size(sizes: list[int], nproc: int) -> list[int]:
    """Whole matrices to ranks, balanced by size: largest first (ties: lower index), each to the least
    loaded rank (ties: lower rank). llmc/zero.h (zero_assign_whole) computes the same assignment."""
    load = [0] * nproc
    owner = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        r = min(range(nproc), key=lambda r: (load[r], r))
        owner[i] = r
        load[r] += sizes[i]
    return owner


class CombinedOptimizer:
    """Several torch optimizers stepped as one (Muon on the block matrices, AdamW on the rest). With ZeRO-1,
    `broadcasts` lists (parameter, owner rank): after the step every owner sends its matrices to the others."""

    def __init__(self, optimizers: list[torch.optim.Optimizer],
                 broadcasts: list[tuple[torch.Tensor, int]] | None = None) -> None:
        self.optimizers = optimizers
        self.broadcasts = broadcasts or []

    @property
    def param_groups(self) -> list[dict]:
        return [g for opt in self.optimizers for g in opt.param_groups]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=set_to_none)
        for p, _ in self.broadcasts:  # the matrices other ranks own are in none of this rank's optimizers
            p.grad = None

    def step(self) -> None:
        for opt in self.optimizers:
            opt.step()
        for p, owner in self.broadcasts:
            dist.broadcast(p.data, src=owner)


def make_adamw(groups: list[dict], s: OptimizerSettings, zero_stage: int) -> torch.optim.Optimizer:
    """AdamW on parameter groups (each with its weight_decay); ZeRO-1 shards its state with ZeroRedundancyOptimizer."""
    extra = {"fused": True} if s.fused else {}
    groups = [g for g in groups if g["params"]]
    if zero_stage == 1:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        opt = ZeroRedundancyOptimizer(**groups[0], optimizer_class=torch.optim.AdamW, lr=s.lr, betas=s.betas,
                                      eps=s.eps, **extra)
        for g in groups[1:]:
            opt.add_param_group(g)
        return opt
    return torch.optim.AdamW(groups, lr=s.lr, betas=s.betas, eps=s.eps, **extra)


def make_optimizer(model: nn.Module, s: OptimizerSettings, is_block_matrix: Callable[[str, torch.Tensor], bool],
                   zero_stage: int = 0, ns_dtype: torch.dtype | None = None):
    """The optimizer of `s` for `model`. AdamW: weight decay on the 2-D tensors only. Muon: torch.optim.Muon on
    the parameters is_block_matrix(name, p) picks (decoupled weight decay), AdamW on the others; each group
    keeps its peak lr in group["initial_lr"] for the schedule. ZeRO-1 (under torch.distributed): AdamW's state
    is sharded by ZeroRedundancyOptimizer, and Muon's matrices are owned whole (the iteration needs the whole
    matrix), balanced by size (owners_by_size), each updated by its owner and broadcast. ns_dtype: the
    Newton-Schulz arithmetic (None: torch.optim.Muon as it is, bfloat16; else MuonNS)."""
    if s.name not in OPTIMIZERS:
        raise UserError(f"unknown optimizer {s.name!r} (use adamw or muon)")
    if s.muon_adjust_lr not in MUON_ADJUST_LR:
        raise UserError(f"unknown Muon lr adjustment {s.muon_adjust_lr!r} (use original or match_rms_adamw)")
    if not 1 <= s.muon_ns_steps < 100:
        raise UserError(f"Muon Newton-Schulz steps {s.muon_ns_steps} must be in 1..99")
    if not (s.muon_lr >= 0 and 0 <= s.muon_momentum <= 1):
        raise UserError(f"Muon lr {s.muon_lr} must be >= 0 and momentum {s.muon_momentum} in [0, 1]")
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    muon = [p for n, p in named if s.name == "muon" and is_block_matrix(n, p)]
    muon_ids = {id(p) for p in muon}
    rest = [p for n, p in named if id(p) not in muon_ids]
    adamw = make_adamw([{"params": [p for p in rest if p.dim() >= 2], "weight_decay": s.weight_decay},
                        {"params": [p for p in rest if p.dim() < 2], "weight_decay": 0.0}], s, zero_stage)
    for g in adamw.param_groups:
        g["initial_lr"] = s.lr
    if not muon:
        return adamw
    broadcasts: list[tuple[torch.Tensor, int]] = []
    mine = muon
    if zero_stage == 1 and dist.is_initialized() and dist.get_world_size() > 1:
        owners = owners_by_size([p.numel() for p in muon], dist.get_world_size())
        broadcasts = list(zip(muon, owners))
        mine = [p for p, r in broadcasts if r == dist.get_rank()]
    kwargs = dict(lr=s.muon_lr, weight_decay=s.weight_decay, momentum=s.muon_momentum, nesterov=s.muon_nesterov,
                  ns_steps=s.muon_ns_steps, adjust_lr_fn=s.muon_adjust_lr)
    # a rank that owns no matrix still takes part in the broadcasts (an empty Muon is not allowed)
    optimizers: list[torch.optim.Optimizer] = [adamw]
    if mine:
        muon_opt = torch.optim.Muon(mine, **kwargs) if ns_dtype is None else MuonNS(mine, ns_dtype, **kwargs)
        for g in muon_opt.param_groups:
            g["initial_lr"] = s.muon_lr
        optimizers.append(muon_opt)
    return CombinedOptimizer(optimizers, broadcasts)



def depth_config(depth: int) -> GPTConfig:
    C, NH = DEPTH_SHAPES.get(depth, (64 * depth, depth))
    return GPTConfig(n_layer=depth, n_head=NH, n_embd=C)


def from_hf_model(hf, flash: bool) -> GPT:
    """Our GPT from a transformers GPT2LMHeadModel (Conv1D weights are transposed)."""
    c = hf.config
    if getattr(c, "activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
        raise UserError(f"unsupported activation {c.activation_function!r}: llmc's GPT-2 uses tanh GELU")
    config = GPTConfig(block_size=c.n_positions, vocab_size=c.vocab_size, n_layer=c.n_layer, n_head=c.n_head, n_embd=c.n_embd)
    model = GPT(config, flash)
    sd_hf = {k: v for k, v in hf.state_dict().items() if not k.endswith((".attn.bias", ".attn.masked_bias"))}
    transposed = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    sd = model.state_dict()
    for k, v in sd_hf.items():
        if k not in sd:
            raise UserError(f"unexpected tensor {k!r} in the Hugging Face model")
        with torch.no_grad():
            sd[k].copy_(v.t() if k.endswith(transposed) else v)
    return model


def huggingface_reachable(timeout: float = 3.0) -> bool:
    """Whether huggingface.co answers on port 443; False without asking when HF_HUB_OFFLINE is set, as the hub's own
    library reads it, so an offline run says so instead of trying a download."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def load_model(name: str, seed: int, flash: bool) -> tuple[GPT, str]:
    """Model from a name (gpt2*, dN, or a local Hugging Face directory); returns it and its file-name stem."""
    if name.startswith("d") and name[1:].isdigit():
        depth = int(name[1:])
        if depth < 1:
            raise UserError(f"--model {name}: the depth must be at least 1 (e.g. d12)")
        model = GPT(depth_config(depth), flash)
        model.init_weights(seed)
        return model, f"{GPT2.name}_{DEPTH_SIZES.get(depth, name)}"
    if Path(name).is_dir():
        from transformers import GPT2LMHeadModel

        try:
            hf = GPT2LMHeadModel.from_pretrained(name)
        except (OSError, ValueError) as e:
            raise UserError(f"--model {name}: not a Hugging Face GPT-2 directory ({' '.join(str(e).split())[:200]})") from None
        model = from_hf_model(hf, flash)
        return model, f"{GPT2.name}_{Path(name).name}"
    if name not in PRETRAINED:
        raise UserError(f"unknown model {name!r}: use gpt2, gpt2-medium, gpt2-large, gpt2-xl, dN (e.g. d12) or a directory")
    depth = {"gpt2": 12, "gpt2-medium": 24, "gpt2-large": 36, "gpt2-xl": 48}[name]
    try:
        from transformers import GPT2LMHeadModel
    except ImportError:
        print0(f"warning: pretrained '{name}' weights need the transformers package, which is not installed: "
               f"initialising d{depth} from scratch instead")
        return load_model(f"d{depth}", seed, flash)
    try:
        hf = GPT2LMHeadModel.from_pretrained(name, local_files_only=True)
    except OSError:
        hf = GPT2LMHeadModel.from_pretrained(name) if huggingface_reachable() else None
    if hf is None:
        print0(f"warning: pretrained '{name}' weights cannot be downloaded (no connection to huggingface.co): "
               f"initialising d{depth} from scratch instead")
        return load_model(f"d{depth}", seed, flash)
    return from_hf_model(hf, flash), f"{GPT2.name}_{PRETRAINED[name]}"


# ----------------------------------------------------------------------------- llmc .bin files


def llmc_tensors(model: GPT, get: Callable[[torch.Tensor], torch.Tensor]) -> list[torch.Tensor]:
    """The 16 tensors of the checkpoint, in order, stacked over layers; wte padded with zero rows to Vp."""
    tr, h = model.transformer, model.transformer.h
    wte = get(tr.wte.weight)
    wte = torch.cat([wte, torch.zeros(gpt2_padded_vocab(wte.size(0)) - wte.size(0), wte.size(1), dtype=wte.dtype)])
    stacked = [torch.stack([get(b.get_parameter(path)) for b in h]) for path in LAYER_PARAMETERS.values()]
    return [wte, get(tr.wpe.weight), *stacked, get(tr.ln_f.weight), get(tr.ln_f.bias)]


def float_bits(x: float) -> int:
    return struct.unpack("<i", struct.pack("<f", x))[0]


def write_model(model: GPT, filename: str | Path, dtype: str) -> None:
    """Checkpoint: header (version 3 fp32, 5 bf16) then the 16 tensors."""
    c = model.config
    header = Gpt2Header(VERSIONS[dtype], c.block_size, c.vocab_size, c.n_layer, c.n_head, c.n_embd,
                        gpt2_padded_vocab(c.vocab_size))
    write_model_file(filename, gpt2_header_bytes(header), llmc_tensors(model, lambda p: p.detach().cpu().float()), dtype)
    print0(f"wrote {filename}")


def read_model_file(read: Callable[[str | Path], tuple], filename: str | Path) -> tuple:
    """One of model_file.py's readers on `filename`, a bad file raised as a UserError (one `error:` line)."""
    try:
        return read(filename)
    except ModelFileError as e:
        raise UserError(str(e)) from None


def read_model(filename: str | Path, flash: bool = False) -> GPT:
    """A GPT from one of our checkpoints (fp32 or bf16), validated like the C loader: UserError otherwise."""
    h, t = read_model_file(read_gpt2, filename)
    model = GPT(GPTConfig(block_size=h.maxT, vocab_size=h.V, n_layer=h.L, n_head=h.NH, n_embd=h.C), flash)
    tr = model.transformer
    with torch.no_grad():
        tr.wte.weight.copy_(torch.from_numpy(t["wte"][: h.V]))
        tr.wpe.weight.copy_(torch.from_numpy(t["wpe"]))
        for name, path in LAYER_PARAMETERS.items():
            for l, block in enumerate(tr.h):
                block.get_parameter(path).copy_(torch.from_numpy(t[name][l]))
        tr.ln_f.weight.copy_(torch.from_numpy(t["lnfw"]))
        tr.ln_f.bias.copy_(torch.from_numpy(t["lnfb"]))
    return model


def gpt2_encoding():
    """tiktoken's GPT-2 BPE; its two files are downloaded once into tiktoken's cache."""
    import tiktoken

    try:
        return tiktoken.get_encoding("gpt2")
    except Exception as e:  # tiktoken raises requests' errors when offline
        raise UserError(f"cannot load tiktoken's gpt2 encoding (offline? set TIKTOKEN_CACHE_DIR to a cache holding it): "
                        f"{type(e).__name__}") from None


def write_tokenizer(filename: str | Path) -> None:
    """Tokenizer: header (version 2 carries the EOT id) then, per token, a length byte and the raw bytes."""
    enc = gpt2_encoding()
    pieces = [enc.decode_bytes([i]) for i in range(enc.max_token_value + 1)]
    body = b"".join(struct.pack("<B", len(b)) + b for b in pieces)
    atomic_write(filename, [header_bytes([TOKENIZER_MAGIC, GPT2.tokenizer_version, len(pieces), enc.eot_token], "<u4"), body])
    print0(f"wrote {filename}")


@dataclass
class DebugOptimizer:
    """The optimizer of the debug state's reference steps; its settings are stored in the header. With
    name = "muon": Muon (muon_*) on the block matrices, AdamW (lr, betas, eps) on the rest, both with
    weight_decay; the Newton-Schulz iteration runs in the steps' precision (MuonNS: float32, and float64
    for the noise rerun) where torch.optim.Muon uses bfloat16. Float settings are float32 values, as the
    C side reads them."""
    steps: int = 10
    lr: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    name: str = "adamw"
    muon_lr: float = 1e-3
    muon_momentum: float = 0.95
    muon_nesterov: bool = True
    muon_ns_steps: int = 5
    muon_adjust_lr: str = "original"

    def settings(self) -> OptimizerSettings:
        f32 = lambda v: struct.unpack("<f", struct.pack("<f", v))[0]  # noqa: E731
        return OptimizerSettings(name=self.name, lr=self.lr, weight_decay=self.weight_decay, betas=(self.beta1, self.beta2),
                                 eps=self.eps, muon_lr=f32(self.muon_lr), muon_momentum=f32(self.muon_momentum),
                                 muon_nesterov=self.muon_nesterov, muon_ns_steps=self.muon_ns_steps,
                                 muon_adjust_lr=self.muon_adjust_lr)

    def header_fields(self) -> list[int]:
        """header[12..17]: optimizer (0 AdamW, 1 Muon), Muon lr and momentum (float32 bits), Nesterov, Newton-Schulz
        steps, lr adjustment (0 original, 1 match_rms_adamw); all zero for AdamW."""
        if self.name == "adamw":
            return [0] * 6
        return [1, float_bits(self.muon_lr), float_bits(self.muon_momentum), int(self.muon_nesterov), self.muon_ns_steps,
                MUON_ADJUST_LR.index(self.muon_adjust_lr)]


def reference_steps(model: CausalLM, x: torch.Tensor, y: torch.Tensor, opt: DebugOptimizer,
                    dtype: torch.dtype = torch.float32,
                    is_block_matrix: Callable[[str, torch.Tensor], bool] = gpt2_is_block_matrix,
                    file_tensors: Callable[[CausalLM, Callable], list[torch.Tensor]] = llmc_tensors):
    """CPU forward/backward on one batch in `dtype`, then `opt.steps` optimizer steps on it (AdamW, or Muon on the
    matrices is_block_matrix picks and AdamW on the rest): (logits, loss, grads in file_tensors' order, losses,
    grad norms before clipping). GPT-2's by default; train_llama3.py passes the Llama's two."""
    ref = copy.deepcopy(model).cpu().to(dtype)
    optimizer = make_optimizer(ref, opt.settings(), is_block_matrix, ns_dtype=dtype)
    logits, loss, grads, losses, norms = None, None, None, [], []
    for step in range(opt.steps):
        optimizer.zero_grad(set_to_none=True)
        step_logits, step_loss = ref(x, y)
        if dtype != torch.float32:  # the model's loss is float32 for autocast; a float64 rerun needs float64
            step_loss = F.cross_entropy(step_logits.view(-1, step_logits.size(-1)), y.reshape(-1))
        step_loss.backward()
        if step == 0:
            logits, loss = step_logits.detach(), step_loss.detach()
            grads = file_tensors(ref, lambda p: p.grad.detach().clone())
        losses.append(step_loss.item())
        # the recorded norm is summed in float64, as the C trainers sum it: torch's float32 norm of a 6.4M-element
        # lm_head gradient is 2e-5 relative off, past the tests' 1e-4 after a few steps (nanochat d2)
        norms.append(math.sqrt(sum(p.grad.double().square().sum().item() for p in ref.parameters() if p.grad is not None)))
        max_norm = opt.grad_clip if opt.grad_clip > 0 else float("inf")
        torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm)
        optimizer.step()
    return logits, loss, grads, losses, norms


def reference_loss_noise(model: CausalLM, x: torch.Tensor, y: torch.Tensor, opt: DebugOptimizer,
                         losses: list[float], steps: Callable = reference_steps) -> list[float]:
    """Float32 rounding noise of each reference step loss: |loss_fp32 - loss_fp64| of the same steps.

    AdamW turns gradients at the float32 noise floor into updates of size lr, so a correct float32
    implementation that merely sums in another order (another BLAS, CPU or GPU) drifts from
    `losses` by an amount that depends on the batch. Rerunning the same steps from the same
    weights in float64 gives the distance of one correct float32 run from exact arithmetic; the
    tests allow a multiple of it (llmc/tensor_check.h, step_loss_tolerance). float64 rather than
    a perturbed float32 rerun: it needs no choice of perturbation, it is the error itself, and
    perturbing the weights by 1 ulp does not reach it (d12, B=4, T=64 on the val shard, step 3:
    two 1-ulp reruns moved the loss by 3e-6 and 4e-6, the float64 rerun by 1.9e-4, and the C
    trainer differs from this reference by 1.9e-4). Costs one float64 run of the steps (~2x the
    float32 ones on a CPU).
    """
    exact = steps(model, x, y, opt, torch.float64)[3]
    return [abs(a - b) for a, b in zip(losses, exact)]


def debug_state_chunks(magic: int, version: int, opt: DebugOptimizer, x: torch.Tensor, y: torch.Tensor,
                       logits: torch.Tensor, loss: torch.Tensor, grads: list[torch.Tensor],
                       per_step: list[list[float]]) -> list[bytes]:
    """A debug state's bytes (GPT-2's and train_llama3.py's layout): the header (B, T, steps, the AdamW settings as
    float32 bits, the noise count, DebugOptimizer.header_fields), the batch, its logits, loss and gradients, then
    each per-step series as float32, the loss noise last."""
    B, T = x.shape
    settings = [float_bits(v) for v in (opt.lr, opt.beta1, opt.beta2, opt.eps, opt.weight_decay, opt.grad_clip)]
    return [
        header_bytes([magic, version, B, T, opt.steps, *settings, len(per_step[-1]), *opt.header_fields()]),
        x.to(torch.int32).numpy().tobytes(),
        y.to(torch.int32).numpy().tobytes(),
        logits.float().numpy().tobytes(),
        loss.float().numpy().tobytes(),
        *(g.float().numpy().tobytes() for g in grads),
        *(np.asarray(values, dtype=np.float32).tobytes() for values in per_step),
    ]


def stacked_file_tensors(model: CausalLM, get: Callable[[torch.Tensor], torch.Tensor],
                         global_names: tuple[str, ...]) -> list[torch.Tensor]:
    """For a model whose file_tensors() lists (name, per-layer parts) in file order (train_llama3.py's Llama,
    train_nanochat.py's NanoChat): each tensor stacked over layers, element = get(parameter); the ones named in
    global_names have one part, taken as it is."""
    return [parts[0] if name in global_names else torch.stack(parts)
            for name, parts in ((n, [get(p) for p in ps]) for n, ps in model.file_tensors())]


def load_file_tensors(model: CausalLM, tensors: dict[str, np.ndarray]) -> None:
    """The inverse of stacked_file_tensors: a model file's tensors (float32, by name) copied into the model."""
    with torch.no_grad():
        for name, parts in model.file_tensors():
            t = torch.from_numpy(tensors[name])
            for i, p in enumerate(parts):
                p.copy_(t if len(parts) == 1 else t[i])


def write_debug_state_with_norms(model: CausalLM, x: torch.Tensor, y: torch.Tensor, filename: str | Path,
                                 opt: DebugOptimizer, steps: Callable, magic: int, version: int) -> None:
    """The debug state of train_llama3.py's layout (version 3): one batch, its logits, loss and every gradient (file
    order), the losses and grad norms of `opt.steps` reference steps (`steps`: the family's reference_steps), then
    each step loss's float32 noise (|fp32 loss - fp64 rerun loss|); header[12..17] name the optimizer."""
    x, y = x.cpu(), y.cpu()
    logits, loss, grads, losses, norms = steps(model, x, y, opt)
    noise = reference_loss_noise(model, x, y, opt, losses, steps)
    atomic_write(filename, debug_state_chunks(magic, version, opt, x, y, logits, loss, grads, [losses, norms, noise]))
    B, T = x.shape
    summary = f"{opt.name}, reference losses {losses[0]:.6f} .. {losses[-1]:.6f}, float32 noise up to {max(noise):.2e}" if losses else "no steps"
    print0(f"wrote {filename} (B={B}, T={T}, {summary})")


def write_debug_state(model: GPT, x: torch.Tensor, y: torch.Tensor, filename: str | Path,
                      opt: DebugOptimizer = DebugOptimizer()) -> None:
    """Debug state: one batch, its logits, loss and every gradient, the losses of `opt.steps` reference
    steps, then each step loss's float32 noise (header[11] = their count; after everything llm.c reads).
    header[12..17] name the optimizer of the steps (DebugOptimizer.header_fields)."""
    x, y = x.cpu(), y.cpu()
    logits, loss, grads, losses, _ = reference_steps(model, x, y, opt)
    noise = reference_loss_noise(model, x, y, opt, losses)
    atomic_write(filename, debug_state_chunks(STATE_MAGIC, GPT2.debug_state_version, opt, x, y, logits, loss, grads, [losses, noise]))
    B, T = x.shape
    summary = f"{opt.name}, reference losses {losses[0]:.6f} .. {losses[-1]:.6f}, float32 noise up to {max(noise):.2e}" if losses else "no steps"
    print0(f"wrote {filename} (B={B}, T={T}, {summary})")


# ----------------------------------------------------------------------------- data


class DistributedDataLoader:
    """Token shards read in order; rank r of n takes the r-th B*T slice of every n*B*T window (as the C loader)."""

    def __init__(self, pattern: str, B: int, T: int, rank: int, nproc: int, vocab_size: int = GPT2_VOCAB):
        self.files = sorted(glob.glob(pattern))
        if not self.files:
            raise UserError(f"no token shards match {pattern!r} (run python dev/data/tinyshakespeare.py to make some)")
        self.B, self.T, self.rank, self.nproc, self.vocab_size = B, T, rank, nproc, vocab_size
        self.reset()

    def _load(self, shard: int) -> None:
        self.shard = shard
        self.tokens = read_datafile(self.files[shard], self.vocab_size)
        if len(self.tokens) < self.nproc * self.B * self.T + 1:
            raise UserError(f"{self.files[shard]}: {len(self.tokens)} tokens, too few for one batch of "
                            f"{self.nproc} x {self.B} x {self.T} + 1")
        self.base = 0

    def reset(self) -> None:
        self._load(0)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        B, T = self.B, self.T
        start = self.base + self.rank * B * T
        buf = torch.from_numpy(np.asarray(self.tokens[start : start + B * T + 1], dtype=np.int64))
        self.base += self.nproc * B * T
        if self.base + self.nproc * B * T + 1 > len(self.tokens):
            self._load((self.shard + 1) % len(self.files))
        return buf[:-1].view(B, T), buf[1:].view(B, T)


# ----------------------------------------------------------------------------- training


def print0(*args, **kwargs) -> None:
    if int(os.environ.get("RANK", 0)) == 0:
        print(*args, **kwargs, flush=True)


def get_lr(step: int, lr: float, warmup: int, total: int, final_frac: float) -> float:
    """Linear warmup, then cosine decay from lr to lr * final_frac (the rule of llmc/schedulers.h)."""
    if step < warmup:
        return lr * (step + 1) / warmup
    ratio = min(max((step - warmup) / (total - warmup), 0.0), 1.0) if total > warmup else 1.0
    lr_min = lr * final_frac
    return lr_min + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - lr_min)


def format_eta(seconds: float) -> str:
    s = int(max(seconds, 0))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class OneLineErrorParser(argparse.ArgumentParser):
    """Bad flags give one `error:` line (and a pointer to --help) instead of a usage dump."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def add_optimizer_args(p: argparse.ArgumentParser) -> None:
    """--optimizer and the --muon_* flags (train_gpt2.py and train_llama3.py): torch.optim.Muon's defaults."""
    a = p.add_argument
    a("--optimizer", default="adamw", choices=list(OPTIMIZERS),
      help="adamw, or muon: torch.optim.Muon on the blocks' 2-D weights, AdamW (--learning_rate) on the rest")
    a("--muon_lr", type=float, default=1e-3, help="Muon peak learning rate (the schedule scales it like --learning_rate)")
    a("--muon_momentum", type=float, default=0.95, help="Muon momentum")
    a("--muon_nesterov", type=int, default=1, choices=[0, 1], help="1 = Nesterov momentum for Muon")
    a("--muon_ns_steps", type=int, default=5, help="Newton-Schulz iterations per Muon update (1..99)")
    a("--muon_adjust_lr", default="original", choices=list(MUON_ADJUST_LR),
      help="Muon lr adjustment: original = sqrt(max(1, rows/cols)), match_rms_adamw = 0.2 sqrt(max(rows, cols))")


def add_run_args(p: argparse.ArgumentParser, learning_rate: float) -> None:
    """The flags from --seed to --flash (train_gpt2.py and train_llama3.py): batch, schedule, evaluation, device."""
    a = p.add_argument
    a("--seed", type=int, default=42, help="seed of the from-scratch init and of sampling")
    a("--batch_size", type=int, default=4, help="micro-batch size B")
    a("--sequence_length", type=int, default=64, help="sequence length T")
    a("--total_batch_size", type=int, default=-1, help="tokens per optimizer step (-1 = B*T*processes, no accumulation)")
    a("--num_iterations", type=int, default=10, help="optimizer steps")
    a("--inference_only", type=int, default=0, help="forward only, no training")
    a("--learning_rate", type=float, default=learning_rate)
    a("--warmup_iters", type=int, default=0)
    a("--learning_rate_decay_frac", type=float, default=1.0, help="final LR as a fraction of --learning_rate")
    a("--weight_decay", type=float, default=0.0)
    a("--grad_clip", type=float, default=1.0, help="clip gradients to this global norm (0 = off)")
    a("--val_loss_every", type=int, default=0, help="every how many steps to evaluate val loss (0 = never)")
    a("--val_max_steps", type=int, default=20, help="batches per validation")
    a("--sample_every", type=int, default=0, help="every how many steps to print a sample (0 = never)")
    a("--gen_tokens", type=int, default=64, help="tokens per sample")
    a("--overfit_single_batch", type=int, default=0, help="train on the first batch only")
    a("--tensorcores", type=int, default=0, help="allow TF32 matmuls on CUDA")
    a("--device", default="", help="cpu|cuda|cuda:N|mps; default: the best available")
    a("--compile", type=int, default=0, help="torch.compile the model")
    a("--flash", type=int, default=0, help="scaled_dot_product_attention (flash) instead of explicit attention")


@dataclass(frozen=True)
class TrainerCli:
    """The trainers' command line (trainer_parser): the family's defaults (--input_bin, --model, --learning_rate)
    from its description, GPT-2's wording of the rest; train_llama3.py overrides what it changes."""

    description: str | None  # the script's docstring, shown by --help
    family: Family
    fused_adamw_help: str = "1 = torch's fused AdamW kernel (AdamW(fused=True)), CPU or CUDA"
    write_tensors_help: str = "write the checkpoints, tokenizer and debug state"
    add_family_args: Callable[[argparse.ArgumentParser], None] | None = None  # the family's own flags, after --model
    dtype_before_optimizer: bool = False  # --dtype listed before the --optimizer flags instead of after them


def add_dtype_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"], help="autocast dtype")


def trainer_parser(cli: TrainerCli) -> OneLineErrorParser:
    """The command line of train_gpt2.py and train_llama3.py: every flag once, the family's parts from `cli`."""
    p = OneLineErrorParser(description=cli.description, formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("--input_bin", default=cli.family.default_input_bin, help=cli.family.input_bin_help)
    a("--input_val_bin", default="", help="validation token shards (glob); empty = no validation")
    a("--output_dir", default="", help="directory for main.log and the final checkpoint")
    a("--model", default=cli.family.default_model, help=cli.family.model_help)
    if cli.add_family_args is not None:
        cli.add_family_args(p)
    add_run_args(p, learning_rate=cli.family.learning_rate)
    a("--fused_adamw", type=int, default=0, help=cli.fused_adamw_help)
    if cli.dtype_before_optimizer:
        add_dtype_arg(p)
    add_optimizer_args(p)
    if not cli.dtype_before_optimizer:
        add_dtype_arg(p)
    a("--zero_stage", type=int, default=0, choices=[0, 1], help="1 = shard the optimizer state across ranks (DDP)")
    a("--write_tensors", type=int, default=1, help=cli.write_tensors_help)
    a("--debug_steps", type=int, default=10, help="reference optimizer steps recorded in the debug state")
    return p


GPT2_CLI = TrainerCli(description=__doc__, family=GPT2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return trainer_parser(GPT2_CLI).parse_args(argv)


def optimizer_settings(args: argparse.Namespace) -> OptimizerSettings:
    return OptimizerSettings(name=args.optimizer, lr=args.learning_rate, weight_decay=args.weight_decay, betas=(0.9, 0.95),
                             eps=1e-8, fused=bool(args.fused_adamw), muon_lr=args.muon_lr, muon_momentum=args.muon_momentum,
                             muon_nesterov=bool(args.muon_nesterov), muon_ns_steps=args.muon_ns_steps,
                             muon_adjust_lr=args.muon_adjust_lr)


def debug_optimizer(args: argparse.Namespace) -> DebugOptimizer:
    """The debug state's optimizer: the fixed AdamW settings, and with --optimizer muon the Muon flags."""
    return DebugOptimizer(steps=args.debug_steps, name=args.optimizer, muon_lr=args.muon_lr, muon_momentum=args.muon_momentum,
                          muon_nesterov=bool(args.muon_nesterov), muon_ns_steps=args.muon_ns_steps,
                          muon_adjust_lr=args.muon_adjust_lr)


def setup_distributed(device_arg: str) -> tuple[int, int, int, str]:
    """(rank, local_rank, world_size, device), initialising torch.distributed under torchrun."""
    if "RANK" not in os.environ:
        if device_arg:
            return 0, 0, 1, device_arg
        if torch.cuda.is_available():
            return 0, 0, 1, "cuda"
        return 0, 0, 1, "mps" if torch.backends.mps.is_available() else "cpu"
    rank, local_rank, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    use_cuda = device_arg.startswith("cuda") or (not device_arg and torch.cuda.is_available())
    dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    device = f"cuda:{local_rank}" if use_cuda else (device_arg or "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    return rank, local_rank, world, device


@dataclass
class ModelFamily:
    """What train_loop needs from a model family (GPT-2 here, Llama 3 in train_llama3.py); the rest is shared."""

    model: nn.Module  # .config.block_size and .config.vocab_size; forward(idx, targets, return_logits) -> (logits, loss)
    description: str  # the shape, printed after "model NAME:"
    loader: type[DistributedDataLoader]  # the family's token shards
    write_files: Callable[[torch.Tensor, torch.Tensor], None]  # model files, tokenizer and debug state from one batch
    make_optimizer: Callable[[nn.Module, OptimizerSettings, int], object]  # (model, settings, zero stage)
    make_sampler: Callable[[str], Callable[[nn.Module], str]]  # device -> (model -> sample text)
    write_model: Callable[[nn.Module, str | Path, str], None]  # (model, file, dtype): the final checkpoint


def seeded_sampler(args: argparse.Namespace, start_id: int,
                   decode: Callable[[list[int]], str]) -> Callable[[str], Callable[[nn.Module], str]]:
    """A ModelFamily.make_sampler whose samples (--gen_tokens after start_id, top-k 40) draw from one generator
    seeded with --seed (train_llama3.py's and train_nanochat.py's)."""
    def make_sampler(device: str) -> Callable[[nn.Module], str]:
        sample_rng = torch.Generator(device=device).manual_seed(args.seed)

        def sample(raw_model: nn.Module) -> str:
            start = torch.tensor([[start_id]], dtype=torch.long, device=device)
            out = raw_model.generate(start, args.gen_tokens, temperature=1.0, top_k=40, generator=sample_rng)
            return decode(out[0, 1:].tolist())
        return sample
    return make_sampler


def gpt2_family(args: argparse.Namespace) -> ModelFamily:
    model, stem = load_model(args.model, args.seed, bool(args.flash))

    def write_files(x: torch.Tensor, y: torch.Tensor) -> None:
        write_model(model, f"{stem}.bin", "float32")
        write_model(model, f"{stem}_bf16.bin", "bfloat16")
        write_tokenizer(GPT2.tokenizer_file)
        debug_opt = debug_optimizer(args)
        name = f"{stem}_debug_state.bin" if debug_opt.name == "adamw" else f"{stem}_{debug_opt.name}_debug_state.bin"
        write_debug_state(model, x, y, name, debug_opt)

    def make_sampler(device: str) -> Callable[[nn.Module], str]:
        def sample(raw_model: nn.Module) -> str:
            enc = gpt2_encoding()
            start = torch.tensor([[GPT2_EOT]], dtype=torch.long, device=device)
            out = raw_model.generate(start, args.gen_tokens, temperature=1.0, top_k=40)
            return enc.decode(out[0, 1:].tolist())
        return sample

    c = model.config
    return ModelFamily(model=model, description=f"L={c.n_layer} NH={c.n_head} C={c.n_embd}", loader=DistributedDataLoader,
                       write_files=write_files,
                       make_optimizer=lambda m, s, zero: make_optimizer(m, s, gpt2_is_block_matrix, zero_stage=zero),
                       make_sampler=make_sampler, write_model=write_model)


def train_loop(args: argparse.Namespace, build: Callable[[argparse.Namespace], ModelFamily]) -> None:
    """The reference's training: DDP/ZeRO-1, accumulation, clipping, one schedule, val loss, samples, main.log."""
    rank, _, world, device = setup_distributed(args.device)
    master = rank == 0
    device_type = "cuda" if device.startswith("cuda") else device.split(":")[0]
    print0(f"device {device}, {world} process(es)")
    torch.manual_seed(args.seed + rank)
    if args.tensorcores:
        torch.backends.cuda.matmul.allow_tf32 = True

    B, T = args.batch_size, args.sequence_length
    if B < 1 or T < 1:
        raise UserError(f"--batch_size {B} and --sequence_length {T} must both be at least 1")
    tokens_per_step = B * T * world
    total_batch = args.total_batch_size if args.total_batch_size > 0 else tokens_per_step
    if total_batch % tokens_per_step:
        raise UserError(f"--total_batch_size {total_batch} is not a multiple of B*T*processes = {tokens_per_step}")
    grad_accum = total_batch // tokens_per_step
    print0(f"total batch {total_batch} tokens, {grad_accum} micro-step(s) of {B} x {T} per process")

    family = build(args)
    model = family.model
    if T > model.config.block_size:
        raise UserError(f"--sequence_length {T} exceeds the model's block size {model.config.block_size}")
    n_params = sum(p.numel() for p in model.parameters())
    print0(f"model {args.model}: {family.description}, {n_params:,} parameters")

    vocab_size = model.config.vocab_size
    train_loader = family.loader(args.input_bin, B, T, rank, world, vocab_size)
    val_loader = family.loader(args.input_val_bin, B, T, rank, world, vocab_size) if args.input_val_bin else None

    if args.write_tensors and master and not args.inference_only:
        x, y = train_loader.next_batch()
        train_loader.reset()
        family.write_files(x, y)

    model.to(device)
    model.train()
    raw_model = model
    if args.compile:
        model = torch.compile(model)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device] if device_type == "cuda" else None)
    autocast_dtype = {"float32": None, "float16": torch.float16, "bfloat16": torch.bfloat16}[args.dtype]
    ctx = torch.amp.autocast(device_type=device_type, dtype=autocast_dtype) if autocast_dtype else nullcontext()
    optimizer = family.make_optimizer(raw_model, optimizer_settings(args), args.zero_stage)

    logfile = None
    if args.output_dir and master:
        os.makedirs(args.output_dir, exist_ok=True)
        logfile = open(os.path.join(args.output_dir, "main.log"), "w")

    def log(line: str) -> None:
        if logfile:
            logfile.write(line + "\n")
            logfile.flush()

    sample = family.make_sampler(device)
    first_batch = train_loader.next_batch() if args.overfit_single_batch else None
    step_times: list[float] = []
    for step in range(args.num_iterations + 1):
        last_step = step == args.num_iterations

        if val_loader and args.val_loss_every > 0 and (step % args.val_loss_every == 0 or last_step):
            model.eval()
            val_loader.reset()
            with torch.no_grad():
                val_loss = torch.zeros((), device=device)
                for _ in range(args.val_max_steps):
                    x, y = val_loader.next_batch()
                    with ctx:
                        _, loss = model(x.to(device), y.to(device), return_logits=False)
                    val_loss += loss.float() / args.val_max_steps
            if world > 1:
                dist.all_reduce(val_loss, op=dist.ReduceOp.AVG)
            print0(f"step {step}: val loss {val_loss.item():.6f}")
            log(f"s:{step} tel:{val_loss.item():.6f}")
            model.train()

        if master and args.sample_every > 0 and (step % args.sample_every == 0 or last_step):
            print0("---\n" + sample(raw_model) + "\n---")

        if last_step or args.inference_only:
            break

        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_acc = torch.zeros((), device=device)
        for micro in range(grad_accum):
            x, y = first_batch if first_batch is not None else train_loader.next_batch()
            if world > 1:
                model.require_backward_grad_sync = micro == grad_accum - 1
            with ctx:
                _, loss = model(x.to(device), y.to(device), return_logits=False)
            loss = loss / grad_accum
            loss_acc += loss.detach()
            loss.backward()
        if world > 1:
            dist.all_reduce(loss_acc, op=dist.ReduceOp.AVG)
        max_norm = args.grad_clip if args.grad_clip > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        lr = get_lr(step, args.learning_rate, args.warmup_iters, args.num_iterations, args.learning_rate_decay_frac)
        for group in optimizer.param_groups:  # AdamW's and Muon's peak lr, one schedule
            group["lr"] = get_lr(step, group["initial_lr"], args.warmup_iters, args.num_iterations,
                                 args.learning_rate_decay_frac)
        optimizer.step()
        if device_type == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        step_times.append(dt)
        recent = sorted(step_times[-10:])[len(step_times[-10:]) // 2]
        eta = recent * (args.num_iterations - step - 1)
        print0(f"step {step + 1:4d}/{args.num_iterations} | loss {loss_acc.item():.6f} | lr {lr:.2e} | norm {norm.item():.4f} "
               f"| {dt * 1000:.1f} ms | {total_batch / dt:.0f} tok/s | ETA {format_eta(eta)}")
        log(f"s:{step} trl:{loss_acc.item():.6f} lr:{lr:.6e} norm:{norm.item():.4f}")

    if args.output_dir and master and args.num_iterations > 0 and not args.inference_only:
        family.write_model(raw_model, os.path.join(args.output_dir, f"model_{args.num_iterations:08d}.bin"), "float32")
    if logfile:
        logfile.close()
    if world > 1:
        # Every rank waits for the master's checkpoint write before tearing the group down:
        # gloo aborts a rank whose peer closes its connections while it is still leaving.
        dist.barrier()
        # DDP's reducer and ZeroRedundancyOptimizer hold the group: released first, its gloo threads end here
        # rather than at interpreter exit (a rank once aborted there: "terminate called without an active exception")
        del model, optimizer
        gc.collect()
        dist.destroy_process_group()


def train(args: argparse.Namespace) -> None:
    train_loop(args, gpt2_family)


def run_main(train: Callable[[argparse.Namespace], None], args: argparse.Namespace,
             errors: tuple[type[Exception], ...], message: Callable[[Exception], str] = str) -> int:
    """train(args) as a command: one of `errors` prints one `error: message(e)` line and exits 1, Ctrl-C 130."""
    try:
        train(args)
    except errors as e:
        print(f"error: {message(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


def main(argv: list[str] | None = None) -> int:
    # OSError: e.g. --output_dir is a file
    return run_main(train, parse_args(argv), (UserError, DataFormatError, OSError))


if __name__ == "__main__":
    sys.exit(main())
