"""
The references' optimizers: AdamW on every parameter, or torch.optim.Muon on the blocks' matrices and AdamW on the
rest (make_optimizer), with ZeRO-1 under torch.distributed; MuonNS, Muon with its Newton-Schulz iteration in the
debug state's precision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn as nn

from pyllmc.reference.common import UserError
from pyllmc.reference.flags import MUON_ADJUST_LR, OPTIMIZERS


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


def is_block_matrix(name: str, p: torch.Tensor) -> bool:
    """The matrices Muon trains: the 2-D weights inside the blocks (every family's blocks are transformer.h.N: GPT-2's
    qkv, attention projection, fc and fc projection; Llama 3's and nanochat's q/k/v, projection and MLP matrices),
    never the embeddings or the head."""
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

    def __init__(self, params, ns_dtype: torch.dtype, row_blocks: dict[int, tuple[int, ...]] | None = None,
                 **kwargs) -> None:
        super().__init__(params, **kwargs)
        self.ns_dtype = ns_dtype
        # id(parameter) -> the rows of each of its blocks, each orthogonalised as a matrix of its own (its lr adjusted
        # by its own shape); momentum and weight decay are elementwise, the same on the whole. Absent: one matrix.
        self.row_blocks = row_blocks or {}

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
                p.mul_(1 - lr * wd)
                blocks = self.row_blocks.get(id(p))
                if blocks is None:
                    self.orthogonalized_step(p, update, group)
                    continue
                for rows, p_rows in zip(update.split(list(blocks)), p.split(list(blocks))):
                    self.orthogonalized_step(p_rows, rows, group)  # p_rows: a view, updated in place
        return None

    def orthogonalized_step(self, p: torch.Tensor, update: torch.Tensor, group: dict) -> None:
        """p -= adjusted lr * NS(update), the lr adjusted by p's shape (torch's _single_tensor_muon's last lines)."""
        ortho = newton_schulz(update, group["ns_steps"], group["eps"], self.ns_dtype).to(p.dtype)
        adjusted_lr = torch.optim._muon._adjust_lr(group["lr"], group["adjust_lr_fn"], p.shape)
        p.add_(ortho, alpha=-adjusted_lr)


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
    Newton-Schulz arithmetic (None: torch.optim.Muon as it is, bfloat16; else MuonNS). A matrix the model lists in
    muon_row_blocks (nanochat's qkvw) is orthogonalised block by block (MuonNS, bfloat16 when ns_dtype is None)."""
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
    # the matrices the model orthogonalises as blocks of rows (CausalLM.muon_row_blocks: nanochat's q, k, v), by id
    blocks_by_name = model.muon_row_blocks() if hasattr(model, "muon_row_blocks") else {}
    row_blocks = {id(p): blocks_by_name[n] for n, p in named if n in blocks_by_name and id(p) in muon_ids}
    if row_blocks and ns_dtype is None:
        # torch.optim.Muon cannot step a weight as blocks; MuonNS in bfloat16 is it bit for bit, with them
        ns_dtype = torch.bfloat16
    # a rank that owns no matrix still takes part in the broadcasts (an empty Muon is not allowed)
    optimizers: list[torch.optim.Optimizer] = [adamw]
    if mine:
        muon_opt = (torch.optim.Muon(mine, **kwargs) if ns_dtype is None
                    else MuonNS(mine, ns_dtype, row_blocks=row_blocks, **kwargs))
        for g in muon_opt.param_groups:
            g["initial_lr"] = s.muon_lr
        optimizers.append(muon_opt)
    return CombinedOptimizer(optimizers, broadcasts)


def adamw_parts(optimizer) -> list[torch.optim.AdamW]:
    """The torch AdamW optimizers inside one make_optimizer returns (ZeRO-1: this rank's local one)."""
    parts = optimizer.optimizers if isinstance(optimizer, CombinedOptimizer) else [optimizer]
    local = [getattr(opt, "optim", opt) for opt in parts]  # ZeroRedundancyOptimizer.optim: this rank's shard
    return [opt for opt in local if isinstance(opt, torch.optim.AdamW)]


def skip_step(optimizer) -> None:
    """An optimizer step that trains nothing (a chat step with no supervised position): AdamW's step count advances
    as if it had updated and nothing else changes, so the next update's bias correction is its step's, as in the C
    trainers (they give AdamW t = step + 1). Muon counts no steps. A state not made yet is made as torch.optim.Adam
    makes it lazily (zero moments, step 0), then counted."""
    for opt in adamw_parts(optimizer):
        for group in opt.param_groups:
            for p in group["params"]:
                state = opt.state[p]
                if not state:
                    on_device = group["fused"] or group["capturable"]
                    state["step"] = (torch.zeros((), dtype=torch.float32, device=p.device) if on_device
                                     else torch.tensor(0.0))
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    if group["amsgrad"]:
                        state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
