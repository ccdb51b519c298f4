"""PyTorch's minimal training step on the CPU: the fastest step torch offers for a model family, with nothing
around it, for dev/bench.py (its --torch minimal modes) to set our trainers beside.

The model is one nn.Module compiled whole with torch.compile, attention is F.scaled_dot_product_attention
(is_causal=True), the forward pass and the loss run under bf16 autocast with --dtype bf16 (fp32 otherwise), and
the optimizer is torch.optim.AdamW(fused=True). The timed step is forward, loss, backward, optimizer step and
zero_grad, on one batch of random tokens drawn before the first step: no data loader, no gradient clipping, no
learning-rate schedule, no logging beyond the step's line. The first --warmup steps are untimed by dev/bench.py
(torch.compile compiles in the first), then --steps more; each prints the line the trainers print:

    step    3/6 | loss 10.912345 | 123.4 ms | 2075 tok/s

Families (dN from scratch, the reference trainers' shapes):
  gpt2      a compact GPT-2 written here (train_gpt2.py's dN: d12 = 124M), its vocabulary padded to 50304 as the C
            trainer's Vp (the 47 padding rows take part in the softmax; the cost is the padded GEMM's, as ours),
            wte tied to the lm_head
  llama3    train_llama3.py's Llama (--vocab: the tokenizer's vocabulary; dev/bench.py passes the test tokenizer's)
  nanochat  train_nanochat.py's NanoChat

Example: python dev/torch_minimal_step.py --family gpt2 --model d12 -B 4 -T 64 --dtype bf16 --warmup 1 --steps 5
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from pyllmc.families import NAMES, gpt2, llama3

GPT2_PADDED_VOCAB = gpt2.gpt2_padded_vocab(gpt2.VOCAB_SIZE)  # 50304: the C trainer's Vp


# ----------------------------------------------------------------------------- a compact GPT-2


class GPT2Block(nn.Module):
    """LayerNorm, causal self-attention (SDPA), residual; LayerNorm, MLP with tanh-GELU, residual."""

    def __init__(self, C: int, NH: int):
        super().__init__()
        self.NH = NH
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fc_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.qkv(self.ln_1(x)).view(B, T, 3, self.NH, C // self.NH).permute(2, 0, 3, 1, 4)  # (B, NH, T, HS)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.attn_proj(y)
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    """GPT-2 dN: token and position embeddings, L blocks, final LayerNorm, the tied lm_head; returns the mean loss."""

    def __init__(self, L: int, C: int, NH: int, V: int, max_T: int = 1024):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(max_T, C)
        self.blocks = nn.ModuleList([GPT2Block(C, NH) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        for name, p in self.named_parameters():  # GPT-2's init: N(0, 0.02), the residual projections scaled
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # (B, T, V): the lm_head is wte
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))


def gpt2_model(depth: int) -> GPT2:
    C, NH = gpt2.depth_shape(depth)  # train_gpt2.py's dN
    return GPT2(depth, C, NH, GPT2_PADDED_VOCAB)


# ----------------------------------------------------------------------------- the references' models


class LossOf(nn.Module):
    """A reference model (train_llama3.py's Llama, train_nanochat.py's NanoChat) as a module returning the loss."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.model(idx, targets, return_logits=False)[1]


def build_model(family: str, depth: int, vocab: int | None) -> tuple[nn.Module, int]:
    """(the module returning the loss, its vocabulary) of a dN model of the family, with SDPA attention."""
    if family == "gpt2":
        return gpt2_model(depth), GPT2_PADDED_VOCAB
    if family == "llama3":
        from train_llama3 import Llama, depth_config as llama3_config

        V = vocab or llama3.VOCAB_SIZE
        model = Llama(llama3_config(depth, V), flash=True)
        model.init_weights(42)
        return LossOf(model), V
    from train_nanochat import NanoChat, depth_config as nanochat_config

    config = nanochat_config(depth)
    model = NanoChat(config, flash=True)
    model.init_weights(42)
    return LossOf(model), config.vocab_size


# ----------------------------------------------------------------------------- the step


def train(model: nn.Module, V: int, B: int, T: int, dtype: str, warmup: int, steps: int) -> None:
    """warmup + steps minimal steps on one random batch, a step line each."""
    gen = torch.Generator().manual_seed(42)
    tokens = torch.randint(0, V, (B, T + 1), generator=gen)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0, fused=True)
    total = warmup + steps
    for step in range(total):
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss = model(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        print(f"step {step + 1:4d}/{total} | loss {loss.item():.6f} | {dt * 1000:.1f} ms | {B * T / dt:.0f} tok/s",
              flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", default=NAMES[0], choices=NAMES, help=f"the model family (default {NAMES[0]})")
    p.add_argument("--model", default="d12", help="dN, from scratch (default d12)")
    p.add_argument("-B", type=int, default=4, help="batch size (default 4)")
    p.add_argument("-T", type=int, default=64, help="sequence length, at most 1024 (default 64)")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"], help="bf16 = autocast to bf16 (default fp32)")
    p.add_argument("--vocab", type=int, default=None,
                   help=f"llama3's vocabulary (default {llama3.VOCAB_SIZE}); gpt2 and nanochat have their own")
    p.add_argument("--warmup", type=int, default=1, help="steps before the timed ones; compilation falls in the first (default 1)")
    p.add_argument("--steps", type=int, default=5, help="timed steps (default 5)")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    p.add_argument("--compile", type=int, default=1, choices=[0, 1],
                   help="0 = eager, a quick check of this script (dev/bench.py always compiles) (default 1)")
    args = p.parse_args(argv)
    if not (args.model.startswith("d") and args.model[1:].isdigit() and int(args.model[1:]) >= 1):
        p.error(f"--model {args.model}: expected dN, e.g. d12")
    for name in ("B", "T", "steps", "threads"):
        if getattr(args, name) < 1:
            p.error(f"-{name if len(name) == 1 else '-' + name} must be >= 1")
    if args.T > 1024 or args.warmup < 0 or (args.vocab is not None and args.vocab < 2):
        p.error("-T must be <= 1024, --warmup >= 0 and --vocab >= 2")
    if args.compile and args.warmup < 1:
        p.error("torch.compile compiles in the first step: --warmup must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(42)
    model, V = build_model(args.family, int(args.model[1:]), args.vocab)
    step_model = torch.compile(model) if args.compile else model
    print(f"torch_minimal_step: {args.family} {args.model} (V={V}), B={args.B}, T={args.T}, {args.dtype}, "
          f"{'compiled' if args.compile else 'eager'}, {args.threads} thread(s), torch {torch.__version__}", flush=True)
    train(step_model, V, args.B, args.T, args.dtype, args.warmup, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
