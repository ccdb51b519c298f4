"""What driving the C engine from Python costs: one training step through pyllmc, split into time in C and
time in Python (argument checks, views, cffi calls), and the same step through the raw cffi calls.

    python -m pyllmc.bench -e d12 -b 4 -t 64 --steps 5

The Python share is measured directly (every call into the compiled extension is timed), so it stays
meaningful on a busy machine where whole-step times vary by more than the overhead itself.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

import pyllmc.model as model_module
from pyllmc._core import ffi, lib
from pyllmc.data import DataLoader
from pyllmc.model import GPT2


class Parser(argparse.ArgumentParser):
    """An unknown or malformed flag is one `error:` line (exit 2), not a usage dump."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


class TimedLib:
    """Forwards attribute access to the cffi lib, timing every function call."""

    def __init__(self, inner: Any):
        self._inner = inner
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def timed(*args: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return attr(*args)
            finally:
                self.seconds += time.perf_counter() - t0
        return timed


def python_step(model: GPT2, x: np.ndarray, y: np.ndarray) -> float:
    model.zero_grad()
    _, loss = model.forward(x, y, return_logits=False)
    model.backward()
    model.step(3e-4)
    return loss


def raw_step(model: GPT2, x: np.ndarray, y: np.ndarray, t: int) -> float:
    c = model._c
    lib.pyllmc_model_zero_grad(c)
    lib.pyllmc_model_forward(c, ffi.from_buffer("int[]", x), ffi.from_buffer("int[]", y), x.shape[0], x.shape[1])
    lib.pyllmc_model_backward(c, 1.0)
    lib.pyllmc_model_step(c, 3e-4, 0.9, 0.95, 1e-8, 0.0, 1.0, t)
    return float(c.cpu.mean_loss)


def main() -> None:
    p = Parser(prog="python -m pyllmc.bench", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-e", default="d12", help="model descriptor or checkpoint")
    p.add_argument("-i", default="dev/data/tinyshakespeare/tiny_shakespeare_train.bin", help="train shards")
    p.add_argument("-b", type=int, default=4, help="batch size B")
    p.add_argument("-t", type=int, default=64, help="sequence length T")
    p.add_argument("--steps", type=int, default=5, help="timed steps of each kind (after one warm-up)")
    args = p.parse_args()
    model = GPT2.from_scratch(args.e) if not args.e.endswith(".bin") else GPT2.from_checkpoint(args.e)
    loader = DataLoader(args.i, args.b, args.t)
    x, y = (a.copy() for a in loader.next_batch())
    python_step(model, x, y)  # warm-up: allocates activations and AdamW state
    timed = TimedLib(lib)
    model_module.lib = timed
    py_total, py_c, raw = [], [], []
    for i in range(args.steps):
        timed.seconds = 0.0
        t0 = time.perf_counter()
        python_step(model, x, y)
        py_total.append(time.perf_counter() - t0)
        py_c.append(timed.seconds)
        t0 = time.perf_counter()
        raw_step(model, x, y, model.t + 1)
        model.t += 1
        raw.append(time.perf_counter() - t0)
    model_module.lib = lib
    overhead = [a - b for a, b in zip(py_total, py_c)]
    print(f"{args.e} B={args.b} T={args.t}, {args.steps} steps each")
    print(f"pyllmc step:   median {1000 * statistics.median(py_total):9.1f} ms "
          f"(in C {1000 * statistics.median(py_c):.1f} ms, in Python {1000 * statistics.median(overhead):.3f} ms)")
    print(f"raw cffi step: median {1000 * statistics.median(raw):9.1f} ms")
    print(f"Python overhead per step: {1000 * statistics.median(overhead):.3f} ms "
          f"= {100 * statistics.median(overhead) / statistics.median(py_total):.4f} % of the step")


if __name__ == "__main__":
    main()
