"""
The debug state a reference writes for the C and CUDA tests: one batch, its logits, loss and every gradient, then
the losses (and grad norms) of a few reference optimizer steps on it and each step loss's float32 noise. The header's
layout: debug_state_chunks; each family's magic and version: its description (pyllmc/families/).

A masked state (header[18] = 1) has targets -1 at the positions not supervised (a chat shard's loss mask, or
mask_half's fixed pattern: the references' --mask_half 1): its loss and step losses are the cross-entropy's mean over
the supervised positions alone (ignore_index=-1), and its gradients are theirs. Unmasked states are written exactly as
before the field existed (header[18] = 0).
"""

from __future__ import annotations

import copy
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from pyllmc.model_file import atomic_write, header_bytes
from pyllmc.reference.causal_lm import CausalLM
from pyllmc.reference.common import UserError, print0
from pyllmc.reference.optimizers import MUON_ADJUST_LR, OptimizerSettings, make_optimizer


def float_bits(x: float) -> int:
    return struct.unpack("<i", struct.pack("<f", x))[0]


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


def mask_half(y: torch.Tensor) -> torch.Tensor:
    """y (B, T) with about half of its positions set to -1 (not supervised), in a fixed pattern: in row b a stretch
    of T // 4 positions from (b % 4) * (T // 4) (whole stretches, as a chat's prompts are), and outside it the single
    positions t with (t + b) % 3 == 0; a row left with no supervised position keeps its last one."""
    B, T = y.shape
    t = torch.arange(T)
    masked = torch.zeros(B, T, dtype=torch.bool)
    stretch = T // 4
    for b in range(B):
        start = (b % 4) * stretch
        in_stretch = (t >= start) & (t < start + stretch)
        masked[b] = in_stretch | ((t + b) % 3 == 0)
        if bool(masked[b].all()):
            masked[b, T - 1] = False
    return torch.where(masked, torch.full_like(y, -1), y)


def is_masked(y: torch.Tensor) -> bool:
    """Whether targets y hold -1 (not supervised) anywhere: a masked debug state (header[18] = 1)."""
    return bool((y < 0).any())


def debug_state_name(stem: str, masked: bool, optimizer: str = "") -> str:
    """The debug state's file name: <stem>[_<optimizer>][_masked]_debug_state.bin (GPT-2 names a Muon state by its
    optimizer; the decoders write theirs in another directory under the plain name)."""
    return f"{stem}{'_' + optimizer if optimizer else ''}{'_masked' if masked else ''}_debug_state.bin"


def masked_mean_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The cross-entropy's mean over the supervised positions (y >= 0) of logits (B, T, V) in their own dtype."""
    if not bool((y >= 0).any()):
        raise UserError("the debug state's batch has no supervised position (every target is -1): a masked debug "
                        "state needs one (--write_tensors 0 writes none)")
    return F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1), ignore_index=-1)


def reference_steps(model: CausalLM, x: torch.Tensor, y: torch.Tensor, opt: DebugOptimizer, dtype: torch.dtype,
                    is_block_matrix: Callable[[str, torch.Tensor], bool],
                    file_tensors: Callable[[CausalLM, Callable], list[torch.Tensor]]):
    """CPU forward/backward on one batch in `dtype`, then `opt.steps` optimizer steps on it (AdamW, or Muon on the
    matrices is_block_matrix picks and AdamW on the rest): (logits, loss, grads in file_tensors' order, losses,
    grad norms before clipping). Each family's reference_steps passes its model's file_tensors. Targets -1 (a masked
    state): the loss is the mean over the supervised positions (masked_mean_loss)."""
    ref = copy.deepcopy(model).cpu().to(dtype)
    optimizer = make_optimizer(ref, opt.settings(), is_block_matrix, ns_dtype=dtype)
    logits, loss, grads, losses, norms = None, None, None, [], []
    masked = is_masked(y)
    for step in range(opt.steps):
        optimizer.zero_grad(set_to_none=True)
        if masked:  # the model's logits (its own loss, of targets clamped to ids, unused), then the masked mean
            step_logits, _ = ref(x, y.clamp(min=0))
            step_loss = masked_mean_loss(step_logits.float() if dtype == torch.float32 else step_logits, y)
        else:
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
                         losses: list[float], steps: Callable) -> list[float]:
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
    """A debug state's bytes (GPT-2's layout, version 2, and Llama 3's and nanochat's, version 3): the header (B, T,
    steps, the AdamW settings as float32 bits, the noise count, DebugOptimizer.header_fields, masked: 1 when y holds
    -1), the batch, its logits, loss and gradients, then each per-step series as float32, the loss noise last."""
    B, T = x.shape
    settings = [float_bits(v) for v in (opt.lr, opt.beta1, opt.beta2, opt.eps, opt.weight_decay, opt.grad_clip)]
    return [
        header_bytes([magic, version, B, T, opt.steps, *settings, len(per_step[-1]), *opt.header_fields(),
                      int(is_masked(y))]),
        x.to(torch.int32).numpy().tobytes(),
        y.to(torch.int32).numpy().tobytes(),
        logits.float().numpy().tobytes(),
        loss.float().numpy().tobytes(),
        *(g.float().numpy().tobytes() for g in grads),
        *(np.asarray(values, dtype=np.float32).tobytes() for values in per_step),
    ]


def write_debug_state_with_norms(model: CausalLM, x: torch.Tensor, y: torch.Tensor, filename: str | Path,
                                 opt: DebugOptimizer, steps: Callable, magic: int, version: int) -> None:
    """The debug state of Llama 3's and nanochat's layout (version 3): one batch, its logits, loss and every gradient
    (file order), the losses and grad norms of `opt.steps` reference steps (`steps`: the family's reference_steps), then
    each step loss's float32 noise (|fp32 loss - fp64 rerun loss|); header[12..17] name the optimizer."""
    x, y = x.cpu(), y.cpu()
    logits, loss, grads, losses, norms = steps(model, x, y, opt)
    noise = reference_loss_noise(model, x, y, opt, losses, steps)
    atomic_write(filename, debug_state_chunks(magic, version, opt, x, y, logits, loss, grads, [losses, norms, noise]))
    print0(f"wrote {filename} ({debug_state_summary(x, y, opt, losses, noise)})")


def debug_state_summary(x: torch.Tensor, y: torch.Tensor, opt: DebugOptimizer, losses: list[float],
                        noise: list[float]) -> str:
    """What the written line says of a debug state: B, T, the supervised positions of a masked one, the optimizer and
    the losses."""
    B, T = x.shape
    summary = f"{opt.name}, reference losses {losses[0]:.6f} .. {losses[-1]:.6f}, float32 noise up to {max(noise):.2e}" if losses else "no steps"
    if is_masked(y):
        summary = f"masked: {int((y >= 0).sum())} of {B * T} positions supervised, {summary}"
    return f"B={B}, T={T}, {summary}"
