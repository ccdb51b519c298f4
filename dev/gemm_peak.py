"""PyTorch's GEMM rate on this machine at a large square size: the torch side of build/gemm_peak (dev/gemm_peak.c).

Times C = A @ B.T for (n, n) matrices, --reps times after one untimed call, in fp32 and in bf16 (both operands
bf16, what autocast gives a matmul), with torch.set_num_threads(--threads), and prints the median rate of each:

    gemm torch fp32 <GFLOP/s>
    gemm torch bf16 <GFLOP/s>

dev/bench.py runs it before the trainers. Example: python dev/gemm_peak.py -n 2048 --reps 3 --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def gemm_rate(n: int, reps: int, dtype_name: str) -> float:
    """Median GFLOP/s of `reps` timed (n, n) @ (n, n).T products in `dtype_name` after one untimed one."""
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    gen = torch.Generator().manual_seed(12345)
    a = (torch.rand(n, n, generator=gen) - 0.5).to(dtype)
    b = (torch.rand(n, n, generator=gen) - 0.5).to(dtype)
    torch.matmul(a, b.T)
    secs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.matmul(a, b.T)
        secs.append(time.perf_counter() - t0)
    return 2.0 * n**3 / statistics.median(secs) / 1e9


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", type=int, default=2048, help="matrix size (default 2048)")
    p.add_argument("--reps", type=int, default=3, help="timed repeats, median taken (default 3)")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    p.add_argument("--precision", default="fp32,bf16", help="comma-separated: fp32 and/or bf16 (default both)")
    args = p.parse_args(argv)
    for name in ("n", "reps", "threads"):
        if getattr(args, name) < 1:
            p.error(f"{'-n' if name == 'n' else '--' + name} must be >= 1")
    bad = [x for x in args.precision.split(",") if x not in ("fp32", "bf16")]
    if bad:
        p.error(f"--precision {','.join(bad)}: use fp32 and/or bf16")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    print(f"gemm_peak: torch {torch.__version__}, {args.threads} thread(s), n={args.n}, median of {args.reps}", flush=True)
    for prec in args.precision.split(","):
        print(f"gemm torch {prec} {gemm_rate(args.n, args.reps, prec):.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
