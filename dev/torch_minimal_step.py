"""PyTorch's minimal training step on the CPU: the fastest step torch offers for a model family, with nothing
around it, for dev/bench.py (its --torch minimal modes) to set our trainers beside.

The model is one nn.Module compiled whole with torch.compile, attention is F.scaled_dot_product_attention
(is_causal=True), the forward pass and the loss run under bf16 autocast with --dtype bf16 (fp32 otherwise), and
the optimizer is torch.optim.AdamW(fused=True). The timed step is forward, loss, backward, optimizer step and
zero_grad, on one batch of random tokens drawn before the first step: no data loader, no gradient clipping, no
learning-rate schedule, no logging beyond the step's line. The first --warmup steps are untimed by dev/bench.py
(torch.compile compiles in the first), then --steps more; each prints the line the trainers print:

    step    3/6 | loss 10.912345 | 123.4 ms | 2075 tok/s

The model is the family's (its registry row's torch_minimal, pyllmc/families/<name>.py's torch_minimal_model): a dN
from scratch in the reference trainer's shapes; GPT-2's is a compact GPT-2 (train_gpt2.py's MinimalGPT2) with its
vocabulary padded to the C trainer's Vp and wte tied to the lm_head, the other families' their reference's model.
A family whose dN takes its vocabulary from a tokenizer takes --vocab (dev/bench.py passes the test tokenizer's).

Example: python dev/torch_minimal_step.py --family gpt2 --model d12 -B 4 -T 64 --dtype bf16 --warmup 1 --steps 5
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from pyllmc.families import NAMES, REGISTRY, by_name

# the families whose dN takes its vocabulary from a tokenizer, so from --vocab
VOCAB_FAMILIES = [row.name for row in REGISTRY if row.depth_vocab is None]

if TYPE_CHECKING:  # torch is imported once the flags are parsed: --help and a bad flag answer at once
    import torch.nn as nn


# ----------------------------------------------------------------------------- the step


def train(model: nn.Module, V: int, B: int, T: int, dtype: str, warmup: int, steps: int) -> None:
    """warmup + steps minimal steps on one random batch, a step line each."""
    import torch

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
                   help=f"the vocabulary of {', '.join(VOCAB_FAMILIES)} (default: the family's); the others have "
                   "their own")
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
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(42)
    model, V = by_name(args.family).torch_minimal(int(args.model[1:]), args.vocab)
    step_model = torch.compile(model) if args.compile else model
    print(f"torch_minimal_step: {args.family} {args.model} (V={V}), B={args.B}, T={args.T}, {args.dtype}, "
          f"{'compiled' if args.compile else 'eager'}, {args.threads} thread(s), torch {torch.__version__}", flush=True)
    train(step_model, V, args.B, args.T, args.dtype, args.warmup, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
