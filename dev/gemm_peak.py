"""PyTorch's GEMM rate on this machine: the torch side of build/gemm_peak (dev/gemm_peak.c).

Times C = A @ B.T for (n, n) matrices, --reps times after one untimed call, in fp32 and in bf16 (both operands
bf16, what autocast gives a matmul), with torch.set_num_threads(--threads), and prints the median rate of each (to
three decimals, as build/gemm_peak does: a tiny shape's rate on a busy machine must not print as 0.0):

    gemm torch fp32 <GFLOP/s>
    gemm torch bf16 <GFLOP/s>

With -s BT,C,Vp,L (and -l OCxIC,...) it also times the GEMMs of one training step as build/gemm_peak -s does, with
the same shapes and layouts: per linear layer (out features OC, in features IC; without -l GPT-2's four) the forward
inp (BT,IC) @ W (OC,IC).T, the input gradient dout (BT,OC) @ W and the weight gradient dout.T @ inp, and the lm_head's
three (Vp x C), each the median of --reps calls after one untimed call, the layers' counted L times; the step's FLOPs
over their summed time:

    gemm-step torch fp32 <GFLOP/s>
    gemm-step torch bf16 <GFLOP/s>

dev/bench.py runs it before the trainers, beside build/gemm_peak. Example:
python dev/gemm_peak.py -n 2048 --reps 3 --threads 2 -s 4096,768,514,12 -l 1536x768,768x768,2048x768,2048x768,768x2048
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Callable

MAX_LAYER_GEMMS = 8  # as dev/gemm_peak.c


def median_seconds(call: Callable[[], object], reps: int) -> float:
    """The median wall time of `reps` calls after one untimed call."""
    call()
    secs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        call()
        secs.append(time.perf_counter() - t0)
    return statistics.median(secs)


def torch_dtype(dtype_name: str):  # -> torch.dtype
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]


def gemm_rate(n: int, reps: int, dtype_name: str) -> float:
    """Median GFLOP/s of `reps` timed (n, n) @ (n, n).T products in `dtype_name` after one untimed one."""
    import torch

    gen = torch.Generator().manual_seed(12345)
    a = (torch.rand(n, n, generator=gen) - 0.5).to(torch_dtype(dtype_name))
    b = (torch.rand(n, n, generator=gen) - 0.5).to(torch_dtype(dtype_name))
    return 2.0 * n**3 / median_seconds(lambda: torch.matmul(a, b.T), reps) / 1e9


def gpt2_layer(C: int) -> list[tuple[int, int]]:
    """GPT-2's linear layers, (out features, in features): qkv, attention projection, fc, fc projection."""
    return [(3 * C, C), (C, C), (4 * C, C), (C, 4 * C)]


def step_gemms(BT: int, C: int, Vp: int, L: int, layer: list[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
    """(tokens, out features, in features, times counted) of each linear layer of a step: the block's, L times each,
    then the lm_head (Vp x C) once."""
    return [(BT, out, inp, L) for out, inp in layer] + [(BT, Vp, C, 1)]


def step_rate(gemms: list[tuple[int, int, int, int]], reps: int, dtype_name: str) -> float:
    """GFLOP/s of a step's GEMMs: each linear layer's forward, input gradient and weight gradient timed alone (median
    of `reps`), the step's FLOPs over the sum of those times x their counts."""
    import torch

    gen = torch.Generator().manual_seed(12345)
    flops = seconds = 0.0
    for BT, OC, IC, times in gemms:
        inp = (torch.rand(BT, IC, generator=gen) - 0.5).to(torch_dtype(dtype_name))
        weight = (torch.rand(OC, IC, generator=gen) - 0.5).to(torch_dtype(dtype_name))
        dout = (torch.rand(BT, OC, generator=gen) - 0.5).to(torch_dtype(dtype_name))
        for call in (lambda: inp @ weight.T, lambda: dout @ weight, lambda: dout.T @ inp):
            seconds += median_seconds(call, reps) * times
        flops += 3 * 2.0 * BT * OC * IC * times
    return flops / seconds / 1e9


def parse_shape(value: str) -> tuple[int, int, int, int]:
    """-s BT,C,Vp,L: four positive whole numbers."""
    parts = value.split(",")
    if len(parts) != 4 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"-s wants BT,C,Vp,L (four positive whole numbers), got '{value}'")
    BT, C, Vp, L = (int(p) for p in parts)
    return BT, C, Vp, L


def parse_layer(value: str) -> list[tuple[int, int]]:
    """-l OCxIC,...: 1 to MAX_LAYER_GEMMS linear layers, out x in features."""
    layer = []
    for part in value.split(","):
        sizes = part.split("x")
        if len(sizes) != 2 or not all(s.isdigit() and int(s) > 0 for s in sizes):
            layer = []
            break
        layer.append((int(sizes[0]), int(sizes[1])))
    if not 1 <= len(layer) <= MAX_LAYER_GEMMS:
        raise argparse.ArgumentTypeError(f"-l wants 1 to {MAX_LAYER_GEMMS} linear layers OCxIC,... "
                                         f"(positive whole numbers), got '{value}'")
    return layer


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", type=int, default=2048, help="matrix size (default 2048)")
    p.add_argument("--reps", type=int, default=3, help="timed repeats, median taken (default 3)")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    p.add_argument("--precision", default="fp32,bf16", help="comma-separated: fp32 and/or bf16 (default both)")
    p.add_argument("-s", type=parse_shape, default=None, metavar="BT,C,Vp,L",
                   help="also time a training step's GEMMs: tokens, width, padded vocabulary, layers")
    p.add_argument("-l", type=parse_layer, default=None, metavar="OCxIC,...",
                   help="with -s: a block's linear layers, out x in features (default GPT-2's)")
    args = p.parse_args(argv)
    for name in ("n", "reps", "threads"):
        if getattr(args, name) < 1:
            p.error(f"{'-n' if name == 'n' else '--' + name} must be >= 1")
    bad = [x for x in args.precision.split(",") if x not in ("fp32", "bf16")]
    if bad:
        p.error(f"--precision {','.join(bad)}: use fp32 and/or bf16")
    if args.l is not None and args.s is None:
        p.error("-l needs -s")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    print(f"gemm_peak: torch {torch.__version__}, {args.threads} thread(s), n={args.n}, median of {args.reps}", flush=True)
    for prec in args.precision.split(","):
        print(f"gemm torch {prec} {gemm_rate(args.n, args.reps, prec):.3f}", flush=True)
    if args.s is not None:
        BT, C, Vp, L = args.s
        gemms = step_gemms(BT, C, Vp, L, args.l or gpt2_layer(C))
        for prec in args.precision.split(","):
            print(f"gemm-step torch {prec} {step_rate(gemms, args.reps, prec):.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
