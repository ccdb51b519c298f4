"""Benchmark on one NVIDIA GPU: llmc's GPU trainers against their PyTorch references, side by side, in one sitting.

For every batch size of -B (T fixed by -T), each --ours program trains a dN model from scratch (`-e d12`, the
model the reference initialises with `--model d12`) with cuDNN attention off and on (the program built with
USE_CUDNN=0, and <program>_cudnn built with cuDNN attention) and activation recompute at each level of
--recompute (-r 0, -r 1); then its reference (train_<name>cu: train_<name>.py, pyllmc.families' registry)
trains the same model at the same B and T with --torch-flags (bf16 autocast, torch.compile, flash attention,
fused AdamW by default). Each run does --warmup untimed steps (cuDNN graphs, cuBLASLt heuristics, torch.compile's
compilation) and --steps timed ones; the table holds the median of the timed steps' ms (the progress line every
trainer prints: `step N/M | loss ... | ... ms | ...`).

One table: program, B, T, cuDNN, recompute, ms/step, tokens/s, MFU, peak GPU memory and the speed against the
reference at the same B and T (its ms / this ms: > 1 is faster). MFU = FLOPs per step / time / the GPU's dense
bf16 peak, with llmc/mfu.h's FLOPs (6 N + 12 L C T per token, N the model's parameters) and its table of peaks
(the GPU's name from nvidia-smi, or --gpu-name); a GPU missing from the table shows "-". Peak memory is the
GPU's memory.used during the run above what it was before it, polled with nvidia-smi (the CUDA context included,
the same for both programs).

A program of --ours that make has no rule for and that is not on disk is one line, `bench-gpu: <program>: not
built ...`, and one row; a build or run that fails becomes a row saying so, with its log in --logs, and the other
runs go on. The runs of a family whose dN takes its vocabulary from its tokenizer go in its reference folder
(make <name>-debug-states: the test tokenizer, whose tokenizer file gives `-e d12` its vocab, and tinyshakespeare
shards in its format); <program>_cudnn is the program with cuDNN's (grouped-query) flash attention.

    make bench-gpu PY=python3 [BENCH_GPU_ARGS="-B 16,32 --steps 30"]    builds what it times, then runs
    make -n bench-gpu                                                   the plan only (also --dry-run)
    python3 dev/bench_gpu.py --dry-run --ours train_gpt2cu -B 8

Offline (../shared/GPU.md): tiktoken's cache and the tinyshakespeare text are taken from --gpu-cache (.gpu) when
they are there, as `make test-gpu` does. It is a benchmark, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from bench import DEFAULT_DATA, REPO, family_files, markdown_table, model_shape, parse_steps
from pyllmc.families import REGISTRY, Registered, by_name

MFU_HEADER = REPO / "llmc" / "mfu.h"
# a row of llmc/mfu.h's GPU_PEAK_TABLE: {"name part", bf16 TFLOP/s, tf32 TFLOP/s}
PEAK_ROW_RE = re.compile(r'\{"([^"]+)",\s*([0-9.]+),\s*([0-9.]+)\}')
MAX_T = 1024               # block size of the dN models (wpe rows)
# each GPU program's family (pyllmc.families: its reference, data, dN rule)
FAMILIES = {f"{row.trainer}cu": row.name for row in REGISTRY}
# every family's GPU trainer, where it has one (train_<name>.cu: make's CUDA_FAMILIES, llmc/families.h's GPU column)
DEFAULT_OURS = ",".join(program for program, name in FAMILIES.items() if (REPO / f"{by_name(name).trainer}.cu").is_file())
DEFAULT_TORCH_FLAGS = "--dtype bfloat16 --compile 1 --flash 1 --fused_adamw 1 --tensorcores 1"
CUDNN_SUFFIX = "_cudnn"
CUDNN_BANNER = "attention: cuDNN"  # the line each program prints when built with cuDNN attention
MISSING = "not built"


class OneLineErrorParser(argparse.ArgumentParser):
    """Bad flags give one `error:` line instead of a usage dump."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


@dataclass
class Run:
    """One row of the table: what to start, and what it measured (or why it has no number)."""

    program: str                 # the --ours program or its reference (train_gpt2cu, train_gpt2.py)
    family: str                  # a pyllmc.families name: which FLOPs and which reference
    B: int
    T: int
    cudnn: bool | None           # None: a reference (its attention is torch's)
    recompute: int | None
    cmd: list[str] = field(default_factory=list)
    cwd: Path = REPO             # where it runs: beside the tokenizer file a family's -e dN reads its V from
    status: str = ""             # "" when measured, else why there is no number ("not built ...", "exit 1 ...")
    times_ms: list[float] = field(default_factory=list)
    peak_mib: float | None = None

    @property
    def is_reference(self) -> bool:
        return self.cudnn is None

    @property
    def label(self) -> str:
        """A name for the run's log file and progress lines."""
        if self.is_reference:
            return f"{self.program} B={self.B} T={self.T}"
        return f"{self.program} B={self.B} T={self.T} cudnn={int(bool(self.cudnn))} r={self.recompute}"


@dataclass
class Row:
    """A run's numbers, or its status."""

    run: Run
    median_ms: float | None
    tokens_per_s: float | None
    mfu: float | None            # a fraction of the GPU's bf16 peak
    vs_reference: float | None   # the reference's median ms at the same B and T / this median ms


# ---------------------------------------------------------------------------- peaks and FLOPs (llmc/mfu.h)


def gpu_peak_table(header_text: str) -> list[tuple[str, float]]:
    """(name part, dense bf16 TFLOP/s) of each row of llmc/mfu.h's GPU_PEAK_TABLE, in its order."""
    return [(m.group(1), float(m.group(2))) for m in PEAK_ROW_RE.finditer(header_text)]


def gpu_peak_tflops(gpu_name: str, table: list[tuple[str, float]]) -> float | None:
    """The bf16 peak of a GPU (the first row whose name part is in its name, as gpu_peak_flops does), or None."""
    return next((tflops for part, tflops in table if part in gpu_name), None)


def flops_per_step(num_params: int, L: int, C: int, T: int, tokens: int) -> float:
    """llmc/mfu.h's transformer_flops_per_step: 6 N per token for the weights' matmuls, 12 L C T for attention."""
    return (6.0 * num_params + 12.0 * L * C * T) * tokens


def tokenizer_vocab(row: Registered) -> int | None:
    """V of a family whose dN takes its tokenizer's: its tokenizer file's header (uint32: magic, version, vocab size),
    None when it is not written yet (make <family>-debug-states)."""
    tokenizer_file = family_files(row).tokenizer_file
    data = tokenizer_file.read_bytes()[:12] if tokenizer_file is not None and tokenizer_file.exists() else b""
    return int.from_bytes(data[8:12], "little") if len(data) == 12 else None


def run_flops(run: Run, model: str, tokenizer_vocabs: dict[str, int | None] | None) -> float | None:
    """FLOPs of one of the run's steps (the family's dN rule and parameter count: pyllmc.families), or None when the
    model's size is unknown (a family whose vocabulary is its tokenizer's, without the tokenizer file)."""
    row = by_name(run.family)
    vocab = row.depth_vocab if row.depth_vocab is not None else (tokenizer_vocabs or {}).get(run.family)
    if vocab is None:
        return None
    L, C = model_shape(model, run.family)
    return flops_per_step(row.depth_parameters(L, vocab), L, C, run.T, run.B * run.T)


# ---------------------------------------------------------------------------- the table


def median_ms(run: Run) -> float | None:
    return statistics.median(run.times_ms) if run.times_ms else None


def table_rows(runs: list[Run], flops: Callable[[Run], float | None], peak_tflops: float | None) -> list[Row]:
    """Each run's median, tokens/s, MFU and speed against its family's reference at the same B and T."""
    references = {(r.family, r.B, r.T): median_ms(r) for r in runs if r.is_reference}
    rows = []
    for r in runs:
        med = median_ms(r)
        if med is None:
            rows.append(Row(r, None, None, None, None))
            continue
        f = flops(r)
        mfu = f / (med / 1000.0) / (peak_tflops * 1e12) if f is not None and peak_tflops else None
        ref = references.get((r.family, r.B, r.T))
        rows.append(Row(r, med, r.B * r.T / (med / 1000.0), mfu, ref / med if ref else None))
    return rows


def format_table(rows: list[Row]) -> list[str]:
    """The markdown table; a run without numbers says why in the ms/step column."""
    cols = ["program", "B", "T", "cuDNN", "recompute", "ms/step", "tokens/s", "MFU", "peak GPU MiB", "vs PyTorch"]
    body = []
    for row in rows:
        r = row.run
        cudnn = "-" if r.is_reference else ("on" if r.cudnn else "off")
        recompute = "-" if r.recompute is None else str(r.recompute)
        if row.median_ms is None:
            body.append([r.program, str(r.B), str(r.T), cudnn, recompute, r.status or "no steps", "-", "-", "-", "-"])
            continue
        body.append([r.program, str(r.B), str(r.T), cudnn, recompute, f"{row.median_ms:.1f}", f"{row.tokens_per_s:.0f}",
                     f"{100 * row.mfu:.1f} %" if row.mfu is not None else "-",
                     f"{r.peak_mib:.0f}" if r.peak_mib is not None else "-",
                     f"{row.vs_reference:.2f}x" if row.vs_reference is not None else "-"])
    return markdown_table(cols, body)


# ---------------------------------------------------------------------------- the plan


def parse_list(text: str, flag: str, minimum: int) -> list[int]:
    """A comma-separated list of integers >= minimum; SystemExit with one line otherwise."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or any(v < minimum for v in values):
        raise SystemExit(f"error: {flag} {text}: expected comma-separated integers >= {minimum}")
    return values


def binary_name(program: str, cudnn: bool) -> str:
    return program + CUDNN_SUFFIX if cudnn else program


def make_args(program: str, cudnn: bool) -> list[str]:
    """make's goal and variables for one binary: the plain build pins USE_CUDNN=0, the cuDNN one has its own name."""
    return [binary_name(program, cudnn)] if cudnn else [program, "PRECISION=BF16", "USE_CUDNN=0"]


def our_command(program: str, cudnn: bool, recompute: int, args: argparse.Namespace, B: int) -> list[str]:
    files = family_files(by_name(FAMILIES[program]))
    own_tokenizer = files.make_target is not None  # it runs in its reference directory, on its test tokenizer's shard
    data = files.data if own_tokenizer else args.data
    binary = str(REPO / binary_name(program, cudnn)) if own_tokenizer else f"./{binary_name(program, cudnn)}"
    return [binary, "-e", args.model, "-i", str(data), "-j", "", "-b", str(B), "-t", str(args.T),
            "-x", str(args.warmup + args.steps), "-v", "0", "-s", "0", "-r", str(recompute)]


def reference_command(family: str, args: argparse.Namespace, B: int) -> list[str]:
    row = by_name(family)
    files = family_files(row)
    script = row.reference
    data = files.data if files.make_target else args.data
    cmd = [args.python, script, "--model", args.model, "--input_bin", str(data), "--batch_size", str(B),
           "--sequence_length", str(args.T), "--num_iterations", str(args.warmup + args.steps), "--val_loss_every", "0",
           "--sample_every", "0", "--write_tensors", "0", "--device", "cuda", *args.torch_flags.split()]
    if files.tokenizer_json is not None:
        cmd += ["--tokenizer", str(files.tokenizer_json.parent)]
    return cmd


def plan_runs(args: argparse.Namespace, available: dict[str, bool]) -> list[Run]:
    """Every run, in the order they go: per program and batch size its variants, then its reference. A program
    that is not available is one row."""
    runs: list[Run] = []
    for program in args.ours:
        family = FAMILIES[program]
        if not available[program]:
            runs.append(Run(program, family, args.B[0], args.T, False, None, status=MISSING))
            continue
        cwd = family_files(by_name(family)).cwd
        for B in args.B:
            for cudnn in args.cudnn:
                for r in args.recompute:
                    runs.append(Run(program, family, B, args.T, bool(cudnn), r, our_command(program, bool(cudnn), r, args, B),
                                    cwd))
            if args.torch:
                runs.append(Run(by_name(family).reference, family, B, args.T, None, None, reference_command(family, args, B)))
    return runs


def build_goals(args: argparse.Namespace, available: dict[str, bool]) -> list[list[str]]:
    """The make invocations before the runs: the data, then each available program's binaries."""
    goals: list[list[str]] = [["data"]]
    for program in args.ours:
        if not available[program]:
            continue
        references = family_files(by_name(FAMILIES[program])).make_target
        if references:
            goals.append([references])
        goals += [make_args(program, bool(c)) for c in args.cudnn]
    return goals


# ---------------------------------------------------------------------------- make and the GPU


def make_base() -> list[str]:
    """make as `make bench-gpu` called us (MAKE, and PY when it set one: its command-line variables reach the
    sub-make through MAKEFLAGS too)."""
    base = [os.environ.get("MAKE", "make"), "--no-print-directory"]
    return base + ([f"PY={os.environ['PY']}"] if os.environ.get("PY") else [])


def make_dry_run(makeflags: str) -> bool:
    """Whether make runs with -n: it passes single-letter flags in the first word of MAKEFLAGS (no '-', no '=')."""
    words = makeflags.split()
    first = words[0] if words else ""
    return bool(first) and not first.startswith("-") and "=" not in first and "n" in first


def has_make_rule(program: str) -> bool:
    """The program is on disk, or make knows how to build it (make -n exits 2 on "No rule to make target")."""
    if (REPO / program).exists():
        return True
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    proc = subprocess.run([*make_base(), "-n", program], cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True)
    return proc.returncode == 0


def run_make(goal: list[str]) -> str:
    """make one goal; "" on success, else the line that says why."""
    cmd = [*make_base(), *goal]
    print(f"bench-gpu: {' '.join(cmd)}", flush=True)
    proc = subprocess.run(cmd, cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if proc.returncode == 0:
        return ""
    lines = (proc.stdout + proc.stderr).strip().splitlines() or [f"exit {proc.returncode}"]
    return next((line for line in lines if "error" in line.lower() and not line.startswith("make")), lines[-1]).strip()


def gpu_name() -> str:
    """The first GPU's name from nvidia-smi, or "unknown GPU"."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown GPU"
    return out.strip().splitlines()[0].strip() if out.strip() else "unknown GPU"


def gpu_memory_used_mib() -> float | None:
    """memory.used of the first GPU in MiB (nvidia-smi), or None."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=10).stdout
        return float(out.strip().splitlines()[0])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None


class MemoryPoller:
    """Polls a memory reading in a thread while a run goes; peak_above_start is the highest reading less the
    reading before the run, or None when nothing could be read."""

    def __init__(self, query: Callable[[], float | None], interval_s: float):
        self.query, self.interval_s = query, interval_s
        self.start = query()
        self.peak: float | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while True:
            value = self.query()
            if value is not None:
                self.peak = value if self.peak is None else max(self.peak, value)
            if self.stop.wait(self.interval_s):
                return

    def __enter__(self) -> MemoryPoller:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    @property
    def peak_above_start(self) -> float | None:
        if self.peak is None or self.start is None:
            return None
        return max(self.peak - self.start, 0.0)


def run_and_measure(run: Run, warmup: int, timeout: float, log: Path, query: Callable[[], float | None],
                    interval_s: float, env: dict[str, str]) -> None:
    """Run one configuration (its output into `log`), keep the timed steps' ms and the peak memory; a failure or
    a wrong build becomes the run's status."""
    with MemoryPoller(query, interval_s) as poller:
        try:
            proc = subprocess.run(run.cmd, cwd=run.cwd, env={**os.environ, **env}, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
            output, code = proc.stdout, proc.returncode
        except subprocess.TimeoutExpired as e:
            partial = e.stdout or ""
            output, code = partial.decode(errors="replace") if isinstance(partial, bytes) else partial, None
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"$ {' '.join(run.cmd)}\n{output}")
    run.peak_mib = poller.peak_above_start
    lines = output.splitlines()
    if code is None:
        run.status = f"timed out after {timeout:.0f} s"
    elif code != 0:
        why = next((line for line in reversed(lines) if "error" in line.lower()), lines[-1] if lines else "")
        run.status = f"exit {code}: {why.strip()}"[:120]
    elif not run.is_reference and (CUDNN_BANNER in output) != bool(run.cudnn):
        run.status = f"wrong build: {'with' if run.cudnn is False else 'without'} cuDNN attention"
    steps = parse_steps(lines)
    if not run.status and len(steps) <= warmup:
        run.status = f"{len(steps)} step lines, expected more than {warmup}"
    if not run.status:
        run.times_ms = [ms for _, ms in steps[warmup:]]


class Budget:
    """Seconds for all the runs from now (0: no limit)."""

    def __init__(self, seconds: float, clock: Callable[[], float] | None = None):
        self.seconds, self.clock = seconds, clock or time.monotonic
        self.start = self.clock()

    def timeout(self, per_run: float) -> float | None:
        """The next run's time limit: per_run, or less when the budget ends sooner; None when it has ended."""
        if not self.seconds:
            return per_run
        left = self.seconds - (self.clock() - self.start)
        return min(per_run, left) if left > 0 else None


def offline_caches(gpu_cache: Path) -> dict[str, str]:
    """tiktoken's cache and the tinyshakespeare text from the offline cache folder, as dev/test_gpu.sh takes them."""
    env: dict[str, str] = {}
    if not os.environ.get("TIKTOKEN_CACHE_DIR") and (gpu_cache / "tiktoken_cache").is_dir():
        env["TIKTOKEN_CACHE_DIR"] = str((gpu_cache / "tiktoken_cache").resolve())
    text = REPO / "dev" / "data" / "tinyshakespeare" / "tiny_shakespeare.txt"
    cached = gpu_cache / "data" / "tinyshakespeare" / "input.txt"
    if not text.exists() and cached.exists():
        text.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(cached, text)
    return env


# ---------------------------------------------------------------------------- the command


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = OneLineErrorParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ours", default=DEFAULT_OURS,
                   help=f"comma-separated GPU programs, of {', '.join(FAMILIES)} (default {DEFAULT_OURS}); one not built is one line")
    p.add_argument("--model", default="d12", help="dN model, from scratch in every program (default d12)")
    p.add_argument("-B", default="8,16,32", help="comma-separated batch sizes (default 8,16,32)")
    p.add_argument("-T", type=int, default=1024, help="sequence length (default 1024)")
    p.add_argument("--cudnn", default="0,1", help="cuDNN attention off/on: 0, 1 or 0,1 (default 0,1)")
    p.add_argument("--recompute", default="0,1", help="comma-separated -r levels, 0..2 (default 0,1)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per run (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps at the start of each run (default 5)")
    p.add_argument("--torch", type=int, default=1, choices=[0, 1], help="0 = no PyTorch reference runs")
    p.add_argument("--torch-flags", default=DEFAULT_TORCH_FLAGS, help=f"the references' flags (default {DEFAULT_TORCH_FLAGS})")
    p.add_argument("--python", default=sys.executable, help="the Python of the references (default this one)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="GPT-2 train shard (default tinyshakespeare)")
    p.add_argument("--gpu-name", default="", help="the GPU's name for the peak table (default: nvidia-smi's)")
    p.add_argument("--gpu-cache", type=Path, default=REPO / ".gpu", help="offline caches: tiktoken_cache/, data/ (default .gpu)")
    p.add_argument("--logs", type=Path, default=REPO / "build" / "bench-gpu", help="one log per run (default build/bench-gpu)")
    p.add_argument("--poll", type=float, default=0.5, help="seconds between GPU memory readings (default 0.5)")
    p.add_argument("--timeout", type=float, default=900, help="seconds allowed per run (default 900)")
    p.add_argument("--budget", type=float, default=0,
                   help="seconds for all the runs (default 0: no limit); a run that would start later is a row "
                        "'not run: out of time', and a running one is stopped when the budget ends")
    p.add_argument("--build", type=int, default=1, choices=[0, 1], help="0 = take the binaries as they are, no make")
    p.add_argument("--dry-run", action="store_true", help="print the plan (builds and runs), run nothing; also under make -n")
    args = p.parse_args(argv)
    args.ours = [x for x in args.ours.split(",") if x]
    unknown = [x for x in args.ours if x not in FAMILIES]
    if unknown or not args.ours:
        p.error(f"--ours {','.join(args.ours)}: expected some of {', '.join(FAMILIES)}")
    try:
        args.B = parse_list(args.B, "-B", 1)
        args.cudnn = parse_list(args.cudnn, "--cudnn", 0)
        args.recompute = parse_list(args.recompute, "--recompute", 0)
        model_shape(args.model)
    except SystemExit as e:
        p.error(str(e).removeprefix("error: "))
    if any(c > 1 for c in args.cudnn) or any(r > 2 for r in args.recompute):
        p.error("--cudnn takes 0 and 1, --recompute 0, 1 and 2")
    if args.T < 1 or args.T > MAX_T or args.steps < 1 or args.warmup < 0 or args.budget < 0 or args.timeout <= 0:
        p.error(f"-T must be 1..{MAX_T}, --steps >= 1, --warmup >= 0, --budget >= 0, --timeout > 0")
    if "--compile 1" in args.torch_flags and args.warmup < 1:
        p.error("--torch-flags has --compile 1: torch.compile compiles in the first step; it needs --warmup >= 1")
    args.dry_run = args.dry_run or make_dry_run(os.environ.get("MAKEFLAGS", ""))
    return args


def print_plan(goals: list[list[str]], runs: list[Run], build: bool) -> None:
    print("bench-gpu: dry run, nothing built or run")
    if build:
        for goal in goals:
            print(f"bench-gpu: would build: {' '.join([*make_base(), *goal])}")
    for r in runs:
        if r.cmd:
            where = "" if r.cwd == REPO else f" (in {r.cwd.relative_to(REPO)})"
            print(f"bench-gpu: would run: {' '.join(c if c else repr(c) for c in r.cmd)}{where}")
    print(f"bench-gpu: {sum(1 for r in runs if r.cmd)} runs planned")


def build_all(goals: list[list[str]], runs: list[Run]) -> None:
    """make each goal; a failed binary marks its runs "build failed", a failed data goal its family's runs."""
    for goal in goals:
        why = run_make(goal)
        if not why:
            continue
        print(f"bench-gpu: make {goal[0]} failed: {why}", flush=True)
        for r in runs:
            ours = r.cmd and r.cmd[0] == f"./{goal[0]}"
            data = goal[0] == (family_files(by_name(r.family)).make_target or "data")  # the goal its data comes from
            if (ours or data) and not r.status:
                r.status = f"build failed: make {goal[0]}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    available = {program: has_make_rule(program) for program in args.ours}
    for program in args.ours:
        if not available[program]:
            print(f"bench-gpu: {program}: {MISSING} (no make rule and no binary yet); skipped", flush=True)
    runs = plan_runs(args, available)
    goals = build_goals(args, available)
    if args.dry_run:
        print_plan(goals, runs, bool(args.build))
        return 0
    env = offline_caches(args.gpu_cache)
    if args.build:
        build_all(goals, runs)
    name = args.gpu_name or gpu_name()
    peak = gpu_peak_tflops(name, gpu_peak_table(MFU_HEADER.read_text()))
    print(f"bench-gpu: GPU {name}, dense bf16 peak {f'{peak:g} TFLOP/s' if peak else 'unknown (not in llmc/mfu.h)'}", flush=True)
    clock = Budget(args.budget)
    for i, r in enumerate(runs):
        if r.status:
            continue
        timeout = clock.timeout(args.timeout)
        if timeout is None:
            r.status = f"not run: out of time (--budget {args.budget:g} s)"
            continue
        print(f"bench-gpu: [{i + 1}/{len(runs)}] {r.label} ...", flush=True)
        log = args.logs / (re.sub(r"[^A-Za-z0-9_.=-]+", "_", r.label) + ".log")
        run_and_measure(r, args.warmup, timeout, log, gpu_memory_used_mib, args.poll, env)
        med = median_ms(r)
        print(f"  {f'{med:.1f} ms/step (median of {len(r.times_ms)})' if med is not None else r.status}; log {log}", flush=True)
    vocabs = {row.name: tokenizer_vocab(row) for row in REGISTRY if row.depth_vocab is None}
    rows = table_rows(runs, lambda r: run_flops(r, args.model, vocabs), peak)
    print(f"\nGPU: {name}; model {args.model} from scratch, T={args.T}; median of {args.steps} timed steps after "
          f"{args.warmup} warm-up step(s); MFU against {f'{peak:g}' if peak else 'an unknown'} TFLOP/s dense bf16")
    print(f"PyTorch: {args.torch_flags}")
    print("\n".join(format_table(rows)))
    print("(vs PyTorch = the reference's median ms at the same B and T / this run's: > 1 is faster; peak GPU MiB = "
          "nvidia-smi memory.used above its value before the run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
