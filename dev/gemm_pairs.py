"""Our GEMMs against torch's, shape by shape, one call after the other in one process.

build/gemm_peak and dev/gemm_peak.py (what make bench runs first) time ours and torch's GEMMs in two programs, one
after the other; on a machine whose speed moves 2x from one minute to the next (the AMX Xeon of doc/cpu-speed.md) two
such numbers cannot rank the kernels. Here both run in this process (ours from build/gemm_pairs.so, dev/gemm_pairs.c:
llmc/cpu/matmul.h's matmul_gemm, the trainer's dispatch), alternating call by call (the order swapped every round),
and each shape's ratio is the median over rounds of torch's time over ours in the same round.

The shapes are one training step's, as make bench takes them (--family, --model, -B, -T; or -s BT,C,Vp,L and
-l OCxIC,... as dev/gemm_peak.py): per linear layer of the block the forward inp (BT,IC) . W (OC,IC)^T, the input
gradient dout (BT,OC) . W and the weight gradient dout^T . inp, and the lm_head's three (Vp x C; the C trainer runs
its rows 1024 at a time, these take all BT at once). In bf16 (--precision bf16) both take bf16 operands (ours through
their registered bf16 copies, as the trainer's weights and bf16 activations; torch bf16 tensors); ours sums into an
fp32 C, torch's returns bf16. In fp32 both are fp32. The table: GFLOP/s of each (medians), torch's time over ours
(> 1: ours faster; median and range over the rounds), the largest difference from an fp32 product of the same
operands relative to its largest value; then the step's GEMMs summed, each median time times its count. Both OpenMP
runtimes (ours and torch's) wait passively (OMP_WAIT_POLICY=PASSIVE unless set), so neither spins through the other's
calls.

    python dev/gemm_pairs.py                                 # GPT-2 d12, B=4, T=1024, bf16, 2 threads
    python dev/gemm_pairs.py --family llama3 --rounds 20
    python dev/gemm_pairs.py -s 256,768,50304,12 --precision fp32
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LIBRARY = REPO / "build" / "gemm_pairs.so"
sys.path[:0] = [str(REPO / "dev"), str(REPO)]

import bench  # noqa: E402  (dev/bench.py: the step's shapes and the CPU line, as make bench has them)
import gemm_peak  # noqa: E402  (dev/gemm_peak.py: -s and -l)
from pyllmc.families import NAMES  # noqa: E402


@dataclass
class Gemm:
    """One GEMM of the step: C (M,N) = op(A) . op(B), counted `times` per step."""

    what: str
    M: int
    N: int
    K: int
    transA: int
    transB: int
    times: int


@dataclass
class Pair:
    """A GEMM's timings: ours and torch's seconds per round, and the error of ours."""

    gemm: Gemm
    ours: list[float]
    torch: list[float]
    error: float


def step_gemms(BT: int, C: int, Vp: int, L: int, layer: list[tuple[int, int]]) -> list[Gemm]:
    """Each linear layer's forward, input gradient and weight gradient (L times each), then the lm_head's: the
    layers of dev/gemm_peak.py's step."""
    gemms = []
    linears = gemm_peak.step_gemms(BT, C, Vp, L, layer)
    for i, (_, OC, IC, times) in enumerate(linears):
        name = "lm_head" if i == len(linears) - 1 else f"{OC}x{IC}"
        gemms += [Gemm(f"{name} forward", BT, OC, IC, 0, 1, times),
                  Gemm(f"{name} input gradient", BT, IC, OC, 0, 0, times),
                  Gemm(f"{name} weight gradient", OC, IC, BT, 1, 0, times)]
    return gemms


def load_library(threads: int) -> ctypes.CDLL:
    """build/gemm_pairs.so, built first (make), its OpenMP team of `threads`."""
    proc = subprocess.run(["make", "--no-print-directory", "-C", str(REPO), "build/gemm_pairs.so"], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise SystemExit(f"error: make build/gemm_pairs.so failed:\n{(proc.stdout + proc.stderr)[-2000:]}")
    # (read when an OpenMP runtime starts: ours and torch's, two in this process, so neither spins while the other runs)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    lib = ctypes.CDLL(str(LIBRARY))
    lib.llmc_pairs_gemm.restype = None
    lib.llmc_pairs_gemm.argtypes = [ctypes.c_int] * 6 + [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                                         ctypes.c_void_p]
    lib.llmc_pairs_mirror.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    lib.llmc_pairs_unmirror.argtypes = [ctypes.c_void_p]
    lib.llmc_pairs_describe.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return lib


def describe(lib: ctypes.CDLL) -> str:
    buf = ctypes.create_string_buffer(256)
    lib.llmc_pairs_describe(buf, 256)
    return buf.value.decode()


def time_pair(lib: ctypes.CDLL, g: Gemm, bf16: bool, rounds: int) -> Pair:
    """Ours and torch's GEMM of `g` alternating for `rounds` rounds after one untimed call each."""
    import torch

    gen = torch.Generator().manual_seed(1234)
    a = torch.rand(*((g.K, g.M) if g.transA else (g.M, g.K)), generator=gen) - 0.5
    b = torch.rand(*((g.N, g.K) if g.transB else (g.K, g.N)), generator=gen) - 0.5
    c = torch.empty(g.M, g.N)
    a16, b16 = a.bfloat16(), b.bfloat16()
    mirrors = [(a, a16), (b, b16)] if bf16 else []
    for x, x16 in mirrors:
        lib.llmc_pairs_mirror(x.data_ptr(), x.numel(), x16.data_ptr())
    lda, ldb = a.shape[1], b.shape[1]
    ta, tb = (a16, b16) if bf16 else (a, b)
    op_a, op_b = (ta.t() if g.transA else ta), (tb.t() if g.transB else tb)

    def ours() -> None:
        lib.llmc_pairs_gemm(int(bf16), g.transA, g.transB, g.M, g.N, g.K, a.data_ptr(), lda, b.data_ptr(), ldb,
                            c.data_ptr())

    def theirs() -> None:
        torch.mm(op_a, op_b)

    try:
        ours()
        theirs()
        exact = torch.mm(op_a.float(), op_b.float())
        error = ((c - exact).abs().max() / exact.abs().max().clamp_min(1e-30)).item()
        t_ours, t_torch = [], []
        for r in range(rounds):
            for call, times in ((ours, t_ours), (theirs, t_torch))[:: 1 if r % 2 == 0 else -1]:
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
    finally:
        for x, _ in mirrors:
            lib.llmc_pairs_unmirror(x.data_ptr())
    return Pair(g, t_ours, t_torch, error)


def ratio_text(p: Pair) -> str:
    ratios = [t / o for o, t in zip(p.ours, p.torch)]
    return f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}..{max(ratios):.2f}]"


def row(p: Pair) -> str:
    g, flops = p.gemm, 2.0 * p.gemm.M * p.gemm.N * p.gemm.K
    op = f"{'A^T' if g.transA else 'A'} {'B^T' if g.transB else 'B'}"
    return (f"| {g.what} | {g.M} x {g.N} x {g.K} | {op} | {flops / statistics.median(p.ours) / 1e9:.0f} | "
            f"{flops / statistics.median(p.torch) / 1e9:.0f} | {ratio_text(p)} | {p.error:.1e} |")


def summary(pairs: list[Pair]) -> str:
    """The step's GEMMs summed: each median time times its count."""
    ours = sum(statistics.median(p.ours) * p.gemm.times for p in pairs)
    theirs = sum(statistics.median(p.torch) * p.gemm.times for p in pairs)
    return (f"step GEMMs (each median x its count): ours {1e3 * ours:.1f} ms, torch {1e3 * theirs:.1f} ms, "
            f"torch / ours {theirs / ours:.2f}x")


def shapes_from_family(args: argparse.Namespace) -> tuple[tuple[int, int, int, int], list[tuple[int, int]]]:
    """-s and -l as make bench gives them to dev/gemm_peak.py for these flags."""
    ns = argparse.Namespace(family=args.family, model=args.model, B=args.B, T=args.T)
    return gemm_peak.parse_shape(bench.step_shape(ns)), gemm_peak.parse_layer(bench.step_layers(ns))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", default="gpt2", choices=NAMES,
                   help="the model family whose step's shapes to take (default gpt2)")
    p.add_argument("--model", default="d12", help="dN model of the family (default d12)")
    p.add_argument("-B", type=int, default=4, help="batch size (default 4)")
    p.add_argument("-T", type=int, default=1024, help="sequence length (default 1024)")
    p.add_argument("-s", type=gemm_peak.parse_shape, default=None, metavar="BT,C,Vp,L",
                   help="the step's shapes given instead: tokens, width, padded vocabulary, layers")
    p.add_argument("-l", type=gemm_peak.parse_layer, default=None, metavar="OCxIC,...",
                   help="with -s: a block's linear layers, out x in features (default GPT-2's)")
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp32"], help="both sides' (default bf16)")
    p.add_argument("--rounds", type=int, default=12, help="alternating rounds per shape (default 12)")
    p.add_argument("--threads", type=int, default=2, help="threads of both (default 2)")
    args = p.parse_args(argv)
    for name in ("B", "T", "rounds", "threads"):
        if getattr(args, name) < 1:
            p.error(f"{'-' if len(name) == 1 else '--'}{name} must be >= 1")
    if args.l is not None and args.s is None:
        p.error("-l needs -s")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.s is not None:
        (BT, C, Vp, L), layer = args.s, args.l or gemm_peak.gpt2_layer(args.s[1])
    else:
        (BT, C, Vp, L), layer = shapes_from_family(args)
    lib = load_library(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    print(f"CPU: {bench.cpu_description()}", flush=True)
    print(f"ours: {describe(lib)}; torch {torch.__version__}; {args.precision}, {args.threads} thread(s), "
          f"{args.rounds} alternating rounds per shape; step BT={BT} C={C} Vp={Vp} L={L}", flush=True)
    print("| GEMM | M x N x K | op | ours GFLOP/s | torch GFLOP/s | torch time / ours | max error (relative) |")
    print("| --- | --- | --- | --- | --- | --- | --- |", flush=True)
    pairs = []
    for g in step_gemms(BT, C, Vp, L, layer):
        pairs.append(time_pair(lib, g, args.precision == "bf16", args.rounds))
        print(row(pairs[-1]), flush=True)
    print(summary(pairs), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
