"""Benchmark: our CPU attention against PyTorch's scaled_dot_product_attention, side by side, forward + backward.

Ours: dev/test/test_attention_cpu --time (llmc/cpu/attention_cpu.h at GPT-2 d12's head shapes, B=4, NH=12, HS=64,
causal): the tiled kernel in fp32 (the fp32 path's) and the blocked kernel in bf16 with the forward's out and lse kept
(the -p bf16 path's, as Llama 3 and nanochat call it). PyTorch: F.scaled_dot_product_attention(is_causal=True) on
(B, NH, T, HS) tensors of the same precision, forward then backward of a fixed gradient, on the same thread count.
Each round runs ours once and then PyTorch, for --rounds rounds; a round's time is the median of its repetitions, and
the table gives the median of the rounds, forward + backward with the forward alone in brackets, and PyTorch's time
over ours (> 1: ours is faster). It is a benchmark, not a test: nothing here asserts a time. The CPU heads the table.

    python dev/bench_attention.py                 T=64 and 1024, 3 rounds, 2 threads
    python dev/bench_attention.py -T 1024 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "dev"))
from bench import cpu_description, markdown_table  # noqa: E402

BINARY = REPO / "dev" / "test" / "test_attention_cpu"
B, NH, HS = 4, 12, 64  # the shapes test_attention_cpu --time runs (its lines name them; parse_ours checks)
OURS_KERNELS = {"fp32": "tiled fp32", "bf16": "blocked bf16, out and lse kept"}
OURS_LINE = re.compile(r"^B=(\d+) T=(\d+) NH=(\d+) HS=(\d+): (.+?) ([\d.]+) ms \[([\d.]+)\]")


@dataclass
class Timing:
    total_ms: float  # forward + backward
    forward_ms: float


def parse_ours(text: str) -> dict[tuple[int, str], Timing]:
    """{(T, precision): Timing} from test_attention_cpu --time's lines, for the kernels of OURS_KERNELS."""
    found: dict[tuple[int, str], Timing] = {}
    by_name = {name: precision for precision, name in OURS_KERNELS.items()}
    for line in text.splitlines():
        m = OURS_LINE.match(line)
        if not m or m[5] not in by_name:
            continue
        if (int(m[1]), int(m[3]), int(m[4])) != (B, NH, HS):
            raise ValueError(f"test_attention_cpu timed another shape than this script's B={B} NH={NH} HS={HS}: {line}")
        found[(int(m[2]), by_name[m[5]])] = Timing(float(m[6]), float(m[7]))
    return found


def run_ours(T_list: list[int], threads: int) -> dict[tuple[int, str], Timing]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.run([str(BINARY), "--time", *map(str, T_list)], capture_output=True, text=True, env=env,
                          timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"error: {BINARY.relative_to(REPO)} --time failed: {(proc.stderr or proc.stdout).strip()}")
    found = parse_ours(proc.stdout)
    missing = [(T, p) for T in T_list for p in OURS_KERNELS if (T, p) not in found]
    if missing:
        raise SystemExit(f"error: test_attention_cpu --time printed no time for {missing}:\n{proc.stdout}")
    return found


def torch_reps(T: int) -> int:
    return 7 if T >= 1024 else 31  # as test_attention_cpu --time


def run_torch(T: int, precision: str) -> Timing:
    """Median forward + backward (and forward) of F.scaled_dot_product_attention, causal, after one warm-up."""
    import torch
    import torch.nn.functional as F

    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, NH, T, HS, generator=gen).to(dtype).requires_grad_() for _ in range(3))
    dout = torch.randn(B, NH, T, HS, generator=gen).to(dtype)
    totals, forwards = [], []
    for rep in range(-1, torch_reps(T)):
        t0 = time.perf_counter()
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        t1 = time.perf_counter()
        out.backward(dout)
        t2 = time.perf_counter()
        q.grad = k.grad = v.grad = None
        if rep >= 0:
            totals.append(1e3 * (t2 - t0))
            forwards.append(1e3 * (t1 - t0))
    return Timing(statistics.median(totals), statistics.median(forwards))


def median_timing(timings: list[Timing]) -> Timing:
    return Timing(statistics.median(t.total_ms for t in timings), statistics.median(t.forward_ms for t in timings))


def report_rows(ours: dict[tuple[int, str], list[Timing]],
                torch_runs: dict[tuple[int, str], list[Timing]]) -> list[list[str]]:
    rows = []
    for (T, precision), runs in sorted(ours.items()):
        mine, theirs = median_timing(runs), median_timing(torch_runs[(T, precision)])
        rows.append([f"{T}", precision, OURS_KERNELS[precision], f"{mine.total_ms:.2f} [{mine.forward_ms:.2f}]",
                     f"{theirs.total_ms:.2f} [{theirs.forward_ms:.2f}]", f"{theirs.total_ms / mine.total_ms:.2f}x"])
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-T", type=int, nargs="+", default=[64, 1024], help="sequence lengths (default: 64 1024)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of ours then PyTorch (default 3)")
    ap.add_argument("--threads", type=int, default=2, help="threads for both (default 2)")
    ap.add_argument("--build", type=int, choices=[0, 1], default=1,
                    help="1: make dev/test/test_attention_cpu first (default), 0: time it as it is")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.threads < 1 or len(args.T) > 8 or any(not 1 <= T <= 8192 for T in args.T):
        ap.error("--rounds and --threads must be >= 1, -T at most 8 lengths, each 1..8192")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.build:
        subprocess.run(["make", "--no-print-directory", "-s", str(BINARY.relative_to(REPO))], cwd=REPO, check=True)
    import torch

    torch.set_num_threads(args.threads)
    ours: dict[tuple[int, str], list[Timing]] = {}
    theirs: dict[tuple[int, str], list[Timing]] = {}
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}: ours (test_attention_cpu --time), then torch SDPA ...", flush=True)
        for key, timing in run_ours(args.T, args.threads).items():
            ours.setdefault(key, []).append(timing)
        for T in args.T:
            for precision in OURS_KERNELS:
                theirs.setdefault((T, precision), []).append(run_torch(T, precision))
    print(f"\nCPU: {cpu_description()}")
    print(f"causal attention, B={B} NH={NH} HS={HS}, {args.threads} thread(s), torch {torch.__version__}; "
          f"median of {args.rounds} round(s), ms: forward + backward [forward]")
    cols = ["T", "precision", "ours", "ours ms", "torch SDPA ms", "torch / ours"]
    print("\n".join(markdown_table(cols, report_rows(ours, theirs))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
