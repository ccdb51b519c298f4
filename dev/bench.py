"""Benchmark: llmc's CPU trainer (train_gpt2) against the PyTorch reference (train_gpt2.py), side by side.

Both train the same model (initialised from scratch with seed 42 in both: `-e dN` / `--model dN`),
on the same tinyshakespeare tokens, with the same B, T, AdamW settings and thread count. Runs
alternate (ours, PyTorch, ours, ...) for --rounds rounds; each run does --warmup untimed steps and
--steps timed ones, and the per-step times of all rounds are pooled into a median. Peak resident
memory is the child process's ru_maxrss (os.wait4), for both programs.

FLOPs per step (fwd + bwd) = 6 * N * tokens + 12 * L * C * T * tokens, N = the matmul parameters
(12 * L * C^2 + V * C, lm_head included), the second term the attention scores and weighted sums.

It is a benchmark, not a test: nothing here asserts a time. Example:

    python dev/bench.py --model d12 -B 4 -T 64 --threads 2 --steps 5
    python dev/bench.py --ours train_gpt2_mkl,train_gpt2_openblas,train_gpt2_none --torch fp32
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO / "dev" / "data" / "tinyshakespeare" / "tiny_shakespeare_train.bin"
STEP_RE = re.compile(r"^step\s+(\d+)/(\d+) \| loss ([0-9.naif+-]+) .*\| ([0-9.]+) ms \|")
DEPTH_SHAPES = {6: (384, 6), 12: (768, 12), 24: (1024, 16), 36: (1280, 20), 48: (1600, 25)}
VOCAB = 50257


@dataclass
class Run:
    """One configuration of the table: how to start it and what it measured."""

    name: str
    cmd: list[str]
    env: dict[str, str]
    times_ms: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    peak_rss_mb: float = 0.0


def model_shape(model: str) -> tuple[int, int]:
    """(L, C) of a dN model name."""
    if not (model.startswith("d") and model[1:].isdigit()):
        raise SystemExit(f"error: --model {model}: expected dN, e.g. d12")
    depth = int(model[1:])
    return depth, DEPTH_SHAPES.get(depth, (64 * depth, depth))[0]


def step_flops(model: str, B: int, T: int) -> float:
    """FLOPs of one forward + backward pass over B x T tokens."""
    L, C = model_shape(model)
    n_matmul = 12 * L * C * C + VOCAB * C
    tokens = B * T
    return 6.0 * n_matmul * tokens + 12.0 * L * C * T * tokens


def spawn_and_measure(run: Run, warmup: int, timeout: float) -> None:
    """Run the child once; keep the timed steps' ms, the losses and the peak RSS (os.wait4 reaps it with its rusage)."""
    with open(os.devnull, "rb") as devnull:
        proc = subprocess.Popen(run.cmd, cwd=REPO, env={**os.environ, **run.env}, stdin=devnull,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = proc.stdout.read().splitlines()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = "\n".join(lines[-30:])
        raise SystemExit(f"error: {' '.join(run.cmd)} exited {proc.returncode}:\n{tail}")
    steps = [m for m in (STEP_RE.match(line.strip()) for line in lines) if m]
    if len(steps) <= warmup:
        tail = "\n".join(lines[-30:])
        raise SystemExit(f"error: {run.name}: expected more than {warmup} step lines, got {len(steps)}:\n{tail}")
    run.times_ms += [float(m.group(4)) for m in steps[warmup:]]
    run.losses = [float(m.group(3)) for m in steps]
    run.peak_rss_mb = max(run.peak_rss_mb, usage.ru_maxrss / 1024.0)


def build_runs(args: argparse.Namespace) -> list[Run]:
    """Our binaries x precisions, then PyTorch's modes, in the order they alternate."""
    threads = str(args.threads)
    env = {"OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
           "OMP_WAIT_POLICY": "PASSIVE" if args.passive else os.environ.get("OMP_WAIT_POLICY", "")}
    env = {k: v for k, v in env.items() if v != ""}
    nsteps = args.warmup + args.steps
    runs: list[Run] = []
    for binary in [b for b in args.ours.split(",") if b]:
        path = Path(binary) if Path(binary).is_absolute() else REPO / binary
        if not path.exists():
            raise SystemExit(f"error: --ours {binary}: no such program (make {path.name})")
        for prec in [p for p in args.precision.split(",") if p]:
            cmd = [str(path), "-e", args.model, "-i", str(args.data), "-j", "", "-b", str(args.B), "-t", str(args.T),
                   "-x", str(nsteps), "-v", "0", "-s", "0"]
            if prec != "fp32":
                cmd += ["-p", prec]
            runs.append(Run(f"llmc {path.name} {prec}", cmd, env))
    for mode in [m for m in args.torch.split(",") if m]:
        dtype = {"fp32": "float32", "bf16": "bfloat16"}.get(mode)
        if dtype is None:
            raise SystemExit(f"error: --torch {mode}: use fp32 and/or bf16")
        cmd = [sys.executable, str(REPO / "train_gpt2.py"), "--model", args.model, "--input_bin", str(args.data),
               "--batch_size", str(args.B), "--sequence_length", str(args.T), "--num_iterations", str(nsteps),
               "--val_loss_every", "0", "--sample_every", "0", "--write_tensors", "0", "--dtype", dtype, "--device", "cpu"]
        runs.append(Run(f"pytorch {'eager fp32' if mode == 'fp32' else 'bf16 autocast'}", cmd, env))
    return runs


def print_table(runs: list[Run], args: argparse.Namespace) -> None:
    flops = step_flops(args.model, args.B, args.T)
    tokens = args.B * args.T
    torch_fp32 = next((r for r in runs if r.name == "pytorch eager fp32"), None)
    torch_bf16 = next((r for r in runs if r.name == "pytorch bf16 autocast"), None)
    ref_fp32 = statistics.median(torch_fp32.times_ms) if torch_fp32 else None
    ref_bf16 = statistics.median(torch_bf16.times_ms) if torch_bf16 else None
    print(f"\nmodel {args.model}, B={args.B}, T={args.T}, {args.threads} thread(s); {args.rounds} round(s) x {args.steps} timed "
          f"steps after {args.warmup} warm-up step(s) per run; {flops / 1e9:.1f} GFLOP per step (fwd+bwd)")
    header = f"| {'run':<30} | {'median ms/step':>14} | {'tokens/s':>8} | {'GFLOP/s':>7} | {'peak RSS MB':>11} | {'vs torch fp32':>13} | {'vs torch bf16':>13} |"
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    for r in runs:
        med = statistics.median(r.times_ms)
        v32 = f"{ref_fp32 / med:.2f}x" if ref_fp32 else "-"
        v16 = f"{ref_bf16 / med:.2f}x" if ref_bf16 else "-"
        print(f"| {r.name:<30} | {med:>14.1f} | {tokens / (med / 1000):>8.0f} | {flops / (med / 1000) / 1e9:>7.1f} | "
              f"{r.peak_rss_mb:>11.0f} | {v32:>13} | {v16:>13} |")
    print("(vs = PyTorch median ms / this run's median ms: > 1 means faster than PyTorch)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="d12", help="dN model, initialised from scratch in both trainers (default d12)")
    p.add_argument("-B", type=int, default=4, help="batch size (default 4)")
    p.add_argument("-T", type=int, default=64, help="sequence length (default 64)")
    p.add_argument("--threads", type=int, default=2, help="OpenMP / BLAS / torch threads (default 2)")
    p.add_argument("--steps", type=int, default=5, help="timed steps per run (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps at the start of each run (default 1)")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds over all runs (default 2)")
    p.add_argument("--ours", default="train_gpt2", help="comma-separated llmc binaries (default train_gpt2)")
    p.add_argument("--precision", default="fp32,bf16", help="our precisions, comma-separated (default fp32,bf16)")
    p.add_argument("--torch", default="fp32,bf16", help="PyTorch modes: fp32 (eager) and/or bf16 (autocast); '' = none")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="train token shard for both (default tinyshakespeare)")
    p.add_argument("--passive", type=int, default=0, help="1 = OMP_WAIT_POLICY=PASSIVE for every run")
    p.add_argument("--timeout", type=float, default=3600, help="seconds allowed per run")
    args = p.parse_args(argv)
    for name in ("B", "T", "threads", "steps", "rounds"):
        if getattr(args, name) < 1:
            p.error(f"-{name if len(name) == 1 else '-' + name} must be >= 1")
    if args.warmup < 0:
        p.error("--warmup must be >= 0")
    model_shape(args.model)
    if not args.data.exists():
        p.error(f"--data {args.data}: no such file (python dev/data/tinyshakespeare.py writes it)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs = build_runs(args)
    if not runs:
        raise SystemExit("error: nothing to run (--ours and --torch are both empty)")
    for rnd in range(args.rounds):
        for r in runs:
            print(f"round {rnd + 1}/{args.rounds}: {r.name} ...", flush=True)
            spawn_and_measure(r, args.warmup, args.timeout)
            print(f"  steps ms: {', '.join(f'{t:.0f}' for t in r.times_ms[-args.steps:])}; peak RSS {r.peak_rss_mb:.0f} MB", flush=True)
    print_table(runs, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
