"""Benchmark: a model family's CPU trainer (train_<family>, --family, a row of pyllmc.families: the first by default)
against its PyTorch reference (train_<family>.py), side by side; and a roofline account of our step: each phase
against its limit on this machine.

Both train the same model (initialised from scratch with seed 42 in both: `-e dN` / `--model dN`, the family's dN
rule), on the same tinyshakespeare tokens (a family whose dN vocabulary is its tokenizer's: the local test tokenizer's
shards and vocabulary, from `make <family>-debug-states`, in its reference directory, where both run), with the same
B, T, AdamW settings and thread count. Runs
alternate (ours, PyTorch, ours, ...) for --rounds rounds; each run does --warmup untimed steps and
--steps timed ones, and the per-step times of all rounds are pooled into a median. Peak resident
memory is the child process's ru_maxrss (os.wait4), for every program.

PyTorch runs in the modes --torch lists: fp32 (eager, explicit attention) or bf16 (autocast), each
optionally with -flash (F.scaled_dot_product_attention), -compile (torch.compile; its compilation
falls in the untimed warm-up step) and -fused (AdamW(fused=True)), e.g. fp32-flash-compile-fused; and
minimal-fp32 / minimal-bf16: dev/torch_minimal_step.py, the family's model as one module compiled whole, SDPA,
bf16 autocast (minimal-bf16), AdamW(fused=True), random tokens and nothing else in the step. "minimal" is
minimal-bf16 on CPUs with bf16 instructions (AVX512-BF16, AMX) and minimal-fp32 elsewhere, the rule of the bf16
modes of --torch auto. PyTorch's fastest, which every run's ratio is taken against and the table names, is the
fastest of all the PyTorch runs: the faster of the minimal step and the reference's modes. The default
(--torch auto) runs the reference's fp32 modes, its bf16 ones only on CPUs with bf16 instructions (elsewhere torch
emulates bf16 GEMMs and a step takes minutes), and minimal.

The --ours programs named without a path (train_gpt2, train_gpt2_none, ...) are built first with make,
with their GEMM-peak programs and build/triad, so a run times the sources as they are (--build 0 skips that).
Our precisions (--precision) are the same for every family: fp32, bf16 (where the trainer's calibration says it
pays) and bf16-force.

Before the trainers it measures this machine's limits:
  - memory bandwidth and SIMD rate: build/triad (dev/triad.c) on the run's threads, three arrays of --triad-mb MB:
    `triad: X GB/s (N threads)` (STREAM's triad, best pass) and `simd: X GFLOP/s (N threads)` (a register-resident
    fp32 FMA loop, AVX-512 or AVX2), both printed;
  - the GEMM peak: a square GEMM (--peak-size, median of --peak-reps; the best of --peak-rounds alternating rounds)
    with llmc/cpu/matmul.h (build/gemm_peak[_<blas>] for each --ours binary: its BLAS, oneDNN's bf16 kernel where
    the build has oneDNN, the built-in fp32 and bf16 kernels) and with torch (dev/gemm_peak.py, fp32 and bf16). Each run's GFLOP/s is reported
    as a fraction of the fastest fp32 GEMM measured (a bf16 run: of the fastest GEMM of either precision, since fp32
    is always an option). The same programs, torch's too, also time the GEMMs of one training step of the family at
    the run's shapes (gemm_peak -s BT,C,Vp,L -l <the block's linear layers>: every layer's forward, input-gradient
    and weight-gradient GEMMs and the lm_head's; `step torch bf16`: torch.mm on bf16 tensors), and each run is held
    against the best such rate of its precision too ("% of step-GEMM peak"), torch's where it is the best: what
    this machine's GEMMs can do at these shapes. The CPU heads the table.
After the runs the GEMM peaks are measured again (--peak-at-end 0: not) and printed each as a fraction of its start
value: how far the machine's speed moved while the runs were timed (the limits and fractions stay the start's).
A -p bf16 run that the trainer ran in fp32 (its one start-up line: bf16 does not pay on this CPU) is
named so in the table and held against the fp32 peak. The precision bf16-force runs -p bf16 with
LLMC_BF16=force: the bf16 path timed even where the calibration would refuse it (the default adds it on CPUs
with bf16 instructions); bf16-onednn runs -p bf16 with LLMC_BF16_GEMM=onednn: on a CPU with AMX, oneDNN's bf16 GEMM
beside llmc's AMX kernel that bf16 runs there.

Our trainers run with LLMC_GEMM_TIME=1 (llmc/cpu/matmul.h): each prints the time its GEMMs took, and the
table gives the time per step outside them ("outside GEMMs", roundings to bf16 and the refresh of the bf16
weights included): the overhead of a path, comparable on any CPU. They also run with LLMC_PHASE_TIME=1
(llmc/cpu/phase_time.h) and print at exit one line per phase of the step,
`phase NAME: MS ms, BYTES bytes, FLOPS flop over N steps`; for each of our runs that printed them a phase table
follows the main one: per phase ms/step, GB/step, GFLOP/step, its limit max(bytes / memory bandwidth, FLOPs /
peak), peak being the best step-GEMM rate of the run's precision for the GEMM-shaped phases (gemm, attention) and the
SIMD rate for the rest, and its time as a multiple of that limit; then "other" (the counted steps' mean time less
the phases') and the whole step (median ms/step against the sum of the phases' limits). A run without phase lines
gets no phase table.

FLOPs per step (fwd + bwd) = 6 * N * tokens + 12 * L * C * T * tokens, N = the matmul parameters
(GPT-2: 12 * L * C^2 + V * C, lm_head included; Llama 3, C = 64 L: the q, k, v, o projections with NKV
key/value heads, the three SwiGLU matrices and the lm_head; nanochat: GPT-2's count with C = 64 L and its untied
head), the second term the attention scores and weighted sums.

It is a benchmark, not a test: nothing here asserts a time. Example:

    python dev/bench.py --model d12 -B 4 -T 64 --threads 2 --steps 5
    python dev/bench.py --ours train_gpt2_mkl,train_gpt2_openblas,train_gpt2_none --torch fp32,fp32-flash-compile
    python dev/bench.py --ours train_gpt2_onednn --precision fp32,bf16-force -T 1024 --torch minimal
    python dev/bench.py --family llama3 --model d6 --steps 10 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pyllmc.families import NAMES, REGISTRY, Registered, by_name

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO / "dev" / "data" / "tinyshakespeare" / "tiny_shakespeare_train.bin"
BF16_REFUSED = "-p bf16: training in fp32 instead"  # train_gpt2's line where bf16 does not pay
STEP_RE = re.compile(r"^step\s+(\d+)/(\d+) \| loss ([0-9.naif+-]+) .*\| ([0-9.]+) ms \|")
PEAK_RE = re.compile(r"^gemm (\S+) (fp32|bf16) ([0-9.]+)$", re.M)
STEP_PEAK_RE = re.compile(r"^gemm-step (\S+) (fp32|bf16) ([0-9.]+)$", re.M)
GEMM_TIME_RE = re.compile(r"^gemm time: ([0-9.]+) ms in (\d+) calls over (\d+) steps", re.M)
# LLMC_PHASE_TIME=1 (llmc/cpu/phase_time.h): a trainer's totals per phase of the step, printed at exit
PHASE_RE = re.compile(r"^phase (\w+): ([0-9.]+) ms, ([0-9.]+) bytes, ([0-9.]+) flop over (\d+) steps$")
PHASE_NAMES = ("gemm", "attention", "norm", "elementwise", "embedding", "classifier", "optimizer", "grad_norm", "bf16", "zero")
GEMM_PHASES = ("gemm", "attention")  # held against the step-GEMM peak; the others against the SIMD rate
# build/triad (dev/triad.c): memory bandwidth and the SIMD FMA rate on the run's threads
TRIAD_RE = re.compile(r"^triad: ([0-9.]+) GB/s \((\d+) threads?\)$", re.M)
SIMD_RE = re.compile(r"^simd: ([0-9.]+) GFLOP/s \((\d+) threads?\)$", re.M)
# our precisions: -p fp32, -p bf16 (bf16 where the calibration says it pays), bf16 with LLMC_BF16=force
OUR_PRECISIONS = {"fp32": ([], {}), "bf16": (["-p", "bf16"], {}), "bf16-force": (["-p", "bf16"], {"LLMC_BF16": "force"}),
                  "bf16-onednn": (["-p", "bf16"], {"LLMC_BF16_GEMM": "onednn"})}
# the first family's trainer is also built with each BLAS (the Makefile's <trainer>_<blas>): its default --ours are the
# OpenBLAS and oneDNN builds (fp32 on each, bf16 on oneDNN's kernels) and the built-in kernels
BLAS_VARIANTS = ("openblas", "onednn", "none")
DEFAULT_FAMILY = REGISTRY[0]
DEFAULT_OURS_BLAS = ",".join(f"{DEFAULT_FAMILY.trainer}_{blas}" for blas in BLAS_VARIANTS)


class FamilyFiles:
    """What a family's runs read: the train shard both train on (data) and the directory both run in (cwd); for a family
    whose dN vocabulary is its tokenizer's, the test tokenizer make <family>-debug-states (make_target) writes into its
    reference directory: tok/tokenizer.json for the reference, the tokenizer file whose header gives V."""

    def __init__(self, row: Registered):
        own_tokenizer = row.depth_vocab is None
        self.cwd = REPO / row.refs_dir if own_tokenizer else REPO
        self.data = self.cwd / "ts" / "tiny_shakespeare_train.bin" if own_tokenizer else DEFAULT_DATA
        self.tokenizer_json = self.cwd / "tok" / "tokenizer.json" if own_tokenizer else None
        self.tokenizer_file = self.cwd / row.family.tokenizer_file if own_tokenizer else None
        self.make_target = f"{row.name}-debug-states" if own_tokenizer else None


def family_files(row: Registered) -> FamilyFiles:
    return FamilyFiles(row)


# PyTorch modes: a precision, then any of these suffixes -> train_gpt2.py's flags; or minimal-<precision>, the
# minimal compiled step of dev/torch_minimal_step.py ("minimal": bf16 where the CPU has bf16 instructions, else fp32)
MINIMAL = "minimal"
TORCH_PRECISIONS = {"fp32": "float32", "bf16": "bfloat16"}
TORCH_FEATURES = {"flash": ["--flash", "1"], "compile": ["--compile", "1"], "fused": ["--fused_adamw", "1"]}
# --torch auto: eager fp32 (the reference's own mode), then the fast fp32 modes; the bf16 ones only where the
# CPU has bf16 instructions (elsewhere torch emulates bf16: 112 s per d12 step on a 2-core Zen 3, 47x its fp32)
AUTO_TORCH_FP32 = ["fp32", "fp32-flash-fused", "fp32-flash-compile-fused"]
AUTO_TORCH_BF16 = ["bf16", "bf16-flash-compile-fused"]
AUTO_TORCH_MINIMAL = [MINIMAL]
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
# CPU flags worth naming in the table: what the GEMMs can use
ISA_FLAGS = ["avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16"]


@dataclass
class PhaseTotal:
    """One phase of the step (llmc/cpu/phase_time.h): wall time, compulsory bytes and FLOPs over `steps` steps."""

    ms: float = 0.0
    bytes: float = 0.0
    flops: float = 0.0
    steps: int = 0


@dataclass
class PhaseRow:
    """One line of a run's phase table, per step: time, traffic, FLOPs and the limit on this machine."""

    name: str
    ms: float
    gbytes: float | None
    gflop: float | None
    limit_ms: float | None  # max(bytes / bandwidth, FLOPs / peak); the step's: the sum of the phases' limits

    @property
    def multiple(self) -> float | None:
        """The time as a multiple of the limit."""
        return self.ms / self.limit_ms if self.limit_ms else None


@dataclass
class Run:
    """One configuration of the table: how to start it and what it measured."""

    name: str
    cmd: list[str]
    env: dict[str, str]
    kind: str = "llmc"          # "llmc" or "pytorch"
    precision: str = "fp32"     # "fp32" or "bf16": which GEMM peak it is held against
    cwd: Path = REPO
    times_ms: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    peak_rss_mb: float = 0.0
    ran_fp32: bool = False      # a -p bf16 run that the trainer ran in fp32 (bf16 does not pay on this CPU)
    outside_gemm_ms: list[float] = field(default_factory=list)  # per run: ms per step outside the GEMMs
    phases: dict[str, PhaseTotal] = field(default_factory=dict)  # LLMC_PHASE_TIME's totals, summed over the runs
    phase_covered_ms: float = 0.0  # the step lines' ms of the steps the phase account covered, summed over the runs
    phase_covered_steps: int = 0


@dataclass
class Row:
    """One line of the table, computed from a Run's times and the GEMM peaks."""

    name: str
    median_ms: float
    tokens_per_s: float
    gflops: float
    peak_fraction: float | None    # GFLOP/s over the GEMM peak its precision is held against
    step_peak_fraction: float | None  # GFLOP/s over the best GEMM rate of its precision at the step's shapes
    outside_gemm_ms: float | None  # mean ms per step outside the GEMMs (llmc runs)
    peak_rss_mb: float
    vs_fastest_torch: float | None  # fastest PyTorch median ms / this median ms
    vs_torch_fp32: float | None     # PyTorch eager fp32 median ms / this median ms


def model_depth(model: str) -> int:
    """N of a dN model name."""
    if not (model.startswith("d") and model[1:].isdigit()):
        raise SystemExit(f"error: --model {model}: expected dN, e.g. d12")
    return int(model[1:])


def block_shapes(model: str, family: str = DEFAULT_FAMILY.name) -> tuple[int, int, list[tuple[int, int]]]:
    """(L, C, the linear layers of one block as (out, in) features) of a dN model of the family, as its C trainer
    runs them: the family's dN rule (pyllmc.families)."""
    return by_name(family).depth_linears(model_depth(model))


def model_shape(model: str, family: str = DEFAULT_FAMILY.name) -> tuple[int, int]:
    """(L, C) of a dN model name."""
    return block_shapes(model, family)[:2]


def family_vocab(family: str) -> int:
    """V of the family's dN models as bench runs them (a family without a fixed one: its test tokenizer's, header int
    2 of its tokenizer file, which needs its build)."""
    row = by_name(family)
    if row.depth_vocab is not None:
        return row.depth_vocab
    tokenizer = family_files(row).tokenizer_file
    if not tokenizer.exists():
        raise SystemExit(f"error: no {tokenizer}: make {family_files(row).make_target} writes it")
    return int.from_bytes(tokenizer.read_bytes()[8:12], "little")


def step_flops(model: str, B: int, T: int, family: str = DEFAULT_FAMILY.name,
               vocab: int = DEFAULT_FAMILY.depth_vocab) -> float:
    """FLOPs of one forward + backward pass over B x T tokens."""
    L, C, layer = block_shapes(model, family)
    n_matmul = L * sum(out * inp for out, inp in layer) + vocab * C  # the untied heads: the only V x C GEMM
    tokens = B * T
    return 6.0 * n_matmul * tokens + 12.0 * L * C * T * tokens


def minimal_precision(mode: str) -> str | None:
    """'fp32' | 'bf16' of a minimal mode (minimal-fp32, minimal-bf16); None for any other mode."""
    name, _, precision = mode.partition("-")
    return precision if name == MINIMAL and precision in TORCH_PRECISIONS else None


def parse_torch_mode(mode: str) -> tuple[str, list[str]]:
    """('fp32' | 'bf16', [features]) of a --torch mode such as bf16-flash-compile (a train_gpt2.py mode) or
    minimal-bf16 (features ['minimal']); SystemExit on anything else."""
    minimal = minimal_precision(mode)
    if minimal is not None:
        return minimal, [MINIMAL]
    precision, *features = mode.split("-")
    bad = [f for f in features if f not in TORCH_FEATURES] + ([] if precision in TORCH_PRECISIONS else [precision])
    if bad or len(set(features)) != len(features):
        raise SystemExit(f"error: --torch {mode}: expected fp32 or bf16, then any of "
                         f"{', '.join('-' + f for f in TORCH_FEATURES)} once each (e.g. fp32-flash-compile), "
                         f"or {MINIMAL}, {MINIMAL}-fp32, {MINIMAL}-bf16")
    return precision, features


def resolve_minimal(mode: str, cpuinfo: str) -> str:
    """'minimal' as minimal-bf16 on a CPU with bf16 instructions (where bf16 pays), else minimal-fp32; other modes
    as they are (the rule of --torch auto's bf16 modes)."""
    if mode != MINIMAL:
        return mode
    flags = set(cpuinfo_fields(cpuinfo).get("flags", "").split())
    return f"{MINIMAL}-{'bf16' if flags & set(BF16_CPU_FLAGS) else 'fp32'}"


def minimal_command(args: argparse.Namespace, precision: str) -> list[str]:
    """dev/torch_minimal_step.py's command line for a minimal mode of this run's family, model and shapes."""
    vocab = [] if by_name(args.family).depth_vocab is not None else ["--vocab", str(family_vocab(args.family))]
    return [sys.executable, str(REPO / "dev" / "torch_minimal_step.py"), "--family", args.family, "--model", args.model,
            "-B", str(args.B), "-T", str(args.T), "--dtype", precision, *vocab, "--warmup", str(args.warmup),
            "--steps", str(args.steps), "--threads", str(args.threads)]


def torch_mode_flags(mode: str) -> list[str]:
    """train_gpt2.py's flags for a --torch mode."""
    precision, features = parse_torch_mode(mode)
    flags = ["--dtype", TORCH_PRECISIONS[precision]]
    for f in features:
        flags += TORCH_FEATURES[f]
    return flags


def read_cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def cpuinfo_fields(cpuinfo: str) -> dict[str, str]:
    """The first processor's 'key: value' lines of /proc/cpuinfo."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    return fields


def auto_torch_modes(cpuinfo: str) -> list[str]:
    """The PyTorch modes of --torch auto on a CPU with these /proc/cpuinfo flags (minimal resolved)."""
    flags = set(cpuinfo_fields(cpuinfo).get("flags", "").split())
    modes = AUTO_TORCH_FP32 + (AUTO_TORCH_BF16 if flags & set(BF16_CPU_FLAGS) else []) + AUTO_TORCH_MINIMAL
    return [resolve_minimal(m, cpuinfo) for m in modes]


def openblas_coretype_note(environ: Mapping[str, str]) -> str:
    """A line saying that OPENBLAS_CORETYPE overrides OpenBLAS's own kernel choice, or '' when it is not set."""
    core = environ.get("OPENBLAS_CORETYPE")
    if not core:
        return ""
    return (f"note: OPENBLAS_CORETYPE={core} is set: OpenBLAS runs those kernels, not the ones it picks for this CPU "
            f"(env -u OPENBLAS_CORETYPE to measure its own choice)")


def cpu_description(cpuinfo: str | None = None, ncpu: int | None = None) -> str:
    """'model name (family F, model M; the GEMM-relevant ISA flags), N logical CPUs' from /proc/cpuinfo."""
    fields = cpuinfo_fields(read_cpuinfo() if cpuinfo is None else cpuinfo)
    name = fields.get("model name") or fields.get("Model") or "unknown CPU"
    flags = set(fields.get("flags", "").split())
    isa = [f.upper() for f in ISA_FLAGS if f in flags]
    if "avx512f" not in flags and flags:
        isa.append("no AVX-512")
    ident = f"family {fields['cpu family']}, model {fields['model']}" if "cpu family" in fields and "model" in fields else ""
    details = "; ".join(x for x in (ident, ", ".join(isa)) if x)
    ncpu = ncpu if ncpu is not None else os.cpu_count()
    return f"{name}{f' ({details})' if details else ''}, {ncpu} logical CPU(s)"


def parse_steps(lines: list[str]) -> list[tuple[float, float]]:
    """(loss, ms) of each progress line `step N/M | loss L | ... | X ms | ...` (llmc's trainers and the
    PyTorch references print the same line), in order."""
    steps = [m for m in (STEP_RE.match(line.strip()) for line in lines) if m]
    return [(float(m.group(3)), float(m.group(4))) for m in steps]


def parse_phases(lines: list[str]) -> dict[str, PhaseTotal]:
    """name -> totals of each `phase NAME: MS ms, BYTES bytes, FLOPS flop over N steps` line a trainer prints at exit
    under LLMC_PHASE_TIME=1; {} for a run without them."""
    found = [m for m in (PHASE_RE.match(line.strip()) for line in lines) if m]
    return {m[1]: PhaseTotal(float(m[2]), float(m[3]), float(m[4]), int(m[5])) for m in found}


def parse_machine(text: str) -> tuple[float | None, float | None]:
    """(memory bandwidth GB/s, SIMD GFLOP/s) of build/triad's `triad: ...` and `simd: ...` lines; None for a
    missing line."""
    triad, simd = TRIAD_RE.search(text), SIMD_RE.search(text)
    return (float(triad[1]) if triad else None), (float(simd[1]) if simd else None)


def phase_limit_ms(nbytes: float, flops: float, bandwidth_gbs: float | None, gflops: float | None) -> float | None:
    """A pass's limit on this machine in ms: max(bytes / bandwidth, FLOPs / peak), the roofline's bound; a rate that
    was not measured drops its term (None when neither was)."""
    terms = [1000.0 * nbytes / (bandwidth_gbs * 1e9) if bandwidth_gbs else None,
             1000.0 * flops / (gflops * 1e9) if gflops else None]
    known = [t for t in terms if t is not None]
    return max(known) if known else None


def phase_rows(run: Run, median_ms: float, bandwidth_gbs: float | None, simd_gflops: float | None,
               gemm_gflops: float | None) -> list[PhaseRow]:
    """A run's phase table, per step: each phase against its limit (GEMM-shaped phases against gemm_gflops, the rest
    against simd_gflops, all against the bandwidth), "other" (the covered steps' mean time less the phases'), and the
    whole step: median ms/step against the sum of the phases' limits. [] for a run without phase lines."""
    if not run.phases:
        return []
    rows: list[PhaseRow] = []
    for name in sorted(run.phases, key=lambda n: PHASE_NAMES.index(n) if n in PHASE_NAMES else len(PHASE_NAMES)):
        t = run.phases[name]
        steps = max(t.steps, 1)
        peak = gemm_gflops if name in GEMM_PHASES else simd_gflops
        rows.append(PhaseRow(name, t.ms / steps, t.bytes / steps / 1e9, t.flops / steps / 1e9,
                             phase_limit_ms(t.bytes / steps, t.flops / steps, bandwidth_gbs, peak)))
    phases_ms = sum(r.ms for r in rows)
    if run.phase_covered_steps:
        rows.append(PhaseRow("other", run.phase_covered_ms / run.phase_covered_steps - phases_ms, None, None, None))
    limits = [r.limit_ms for r in rows if r.gbytes is not None]
    step_limit = sum(x for x in limits if x is not None) if all(x is not None for x in limits) else None
    rows.append(PhaseRow("step", median_ms, sum(r.gbytes or 0.0 for r in rows), sum(r.gflop or 0.0 for r in rows),
                         step_limit))
    return rows


def format_phase_table(rows: list[PhaseRow]) -> list[str]:
    """A markdown table of a run's phase rows."""
    num = lambda x, fmt: format(x, fmt) if x is not None else "-"
    body = [[r.name, f"{r.ms:.1f}", num(r.gbytes, ".3f"), num(r.gflop, ".2f"), num(r.limit_ms, ".1f"),
             num(r.multiple, ".2f") + ("x" if r.multiple is not None else "")] for r in rows]
    return markdown_table(["phase", "ms/step", "GB/step", "GFLOP/step", "limit ms/step", "x limit"], body)


def markdown_table(cols: list[str], body: list[list[str]]) -> list[str]:
    """A markdown table with aligned columns: the first left-aligned, the rest right-aligned."""
    widths = [max(len(c), *(len(b[i]) for b in body)) for i, c in enumerate(cols)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))) + " |"
    return [line(cols), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *(line(b) for b in body)]


def parse_peaks(text: str) -> dict[str, float]:
    """'<kernel> <precision>' -> GFLOP/s from the 'gemm <kernel> <precision> <GFLOP/s>' lines of the peak programs,
    and 'step <kernel> <precision>' from their 'gemm-step ...' lines (the GEMMs of a training step)."""
    peaks = {f"{m.group(1)} {m.group(2)}": float(m.group(3)) for m in PEAK_RE.finditer(text)}
    peaks.update({f"step {m.group(1)} {m.group(2)}": float(m.group(3)) for m in STEP_PEAK_RE.finditer(text)})
    return peaks


def best_step_peak(peaks: dict[str, float], precision: str) -> tuple[str, float] | None:
    """(name, GFLOP/s) of the fastest GEMM of `precision` at a training step's shapes."""
    pool = {k: v for k, v in peaks.items() if k.startswith("step ") and k.endswith(" " + precision)}
    if not pool:
        return None
    name = max(pool, key=lambda k: pool[k])
    return name, pool[name]


def best_peak(peaks: dict[str, float], precision: str) -> tuple[str, float] | None:
    """(name, GFLOP/s) of the peak a run of `precision` is held against: the fastest fp32 GEMM for fp32, the
    fastest GEMM of either precision for bf16 (a bf16 run could always have run its GEMMs in fp32)."""
    pool = {k: v for k, v in peaks.items() if not k.startswith("step ") and (precision == "bf16" or k.endswith(" fp32"))}
    if not pool:
        return None
    name = max(pool, key=lambda k: pool[k])
    return name, pool[name]


def peak_programs(ours: list[str]) -> list[Path]:
    """build/gemm_peak for every family's trainer (the same GEMMs), build/gemm_peak_<blas> for a BLAS variant
    <trainer>_<blas> (same BLAS, same flags)."""
    out: list[Path] = []
    for binary in ours:
        stem = Path(binary).name
        suffix = stem[len(DEFAULT_FAMILY.trainer):] if stem.startswith(DEFAULT_FAMILY.trainer) else ""
        prog = REPO / "build" / f"gemm_peak{suffix}"
        if prog not in out:
            out.append(prog)
    return out


def make_targets(ours: list[str]) -> list[str]:
    """The make targets of the --ours programs given by name (a family's trainer, a BLAS variant, ...) and of their
    GEMM-peak programs; a program given by absolute path is taken as it is."""
    targets: list[str] = []
    for binary in ours:
        if Path(binary).is_absolute():
            continue
        targets += [binary, str(peak_programs([binary])[0].relative_to(REPO))]
    return list(dict.fromkeys(targets))


def build_programs(targets: list[str]) -> None:
    """make what is benchmarked (make bench and a direct run alike): stale or missing programs are rebuilt."""
    if not targets:
        return
    cmd = [os.environ.get("MAKE", "make"), "--no-print-directory", *targets]
    print(f"building: {' '.join(cmd)}", flush=True)
    proc = subprocess.run(cmd, cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = (proc.stdout + proc.stderr).strip().splitlines() or [""]
        why = next((line for line in lines if "error" in line.lower() and not line.startswith("make")), lines[-1])
        raise SystemExit(f"error: --ours: make {' '.join(targets)} failed: {why.strip()}")


def run_capture(cmd: list[str], env: dict[str, str], timeout: float) -> str:
    """stdout + stderr of a command; SystemExit with its tail when it fails."""
    try:
        proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, **env}, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"error: {' '.join(cmd)} ran past --timeout {timeout:.0f} s") from None
    if proc.returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd)} exited {proc.returncode}:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return proc.stdout + proc.stderr


def step_shape(args: argparse.Namespace) -> str:
    """gemm_peak's -s BT,C,Vp,L for a run of these flags (Vp: the lm_head's rows as the C trainer stores them;
    V padded as the family's model file stores it)."""
    L, C, _ = block_shapes(args.model, args.family)
    padding = by_name(args.family).family.vocab_padding
    Vp = (family_vocab(args.family) + padding - 1) // padding * padding
    return f"{args.B * args.T},{C},{Vp},{L}"


def step_layers(args: argparse.Namespace) -> str:
    """gemm_peak's -l OCxIC,...: the linear layers of one block of the family."""
    return ",".join(f"{out}x{inp}" for out, inp in block_shapes(args.model, args.family)[2])


def torch_peak_precisions(args: argparse.Namespace) -> str:
    """dev/gemm_peak.py's --precision: bf16 as well only when a run of this bench is bf16 (ours or PyTorch's): on a
    CPU without bf16 instructions torch's bf16 GEMM runs at a few GFLOP/s, over 20 minutes at a d12 step's shapes."""
    ours = {p.split("-")[0] for p in args.precision.split(",") if p}
    theirs = {parse_torch_mode(m)[0] for m in args.torch.split(",") if m}
    return "fp32,bf16" if "bf16" in ours | theirs else "fp32"


def measure_peaks(args: argparse.Namespace, env: dict[str, str], when: str = "start") -> dict[str, float]:
    """The GEMM rates of llmc/cpu/matmul.h (one program per --ours BLAS) and of torch, at --peak-size and at one step's
    shapes of the family; the programs alternate for --peak-rounds rounds and each rate is the best of its rounds."""
    peaks: dict[str, float] = {}
    n, reps = str(args.peak_size), str(args.peak_reps)
    shape = ["-s", step_shape(args), "-l", step_layers(args)]
    cmds: list[list[str]] = []
    for prog in peak_programs([b for b in args.ours.split(",") if b]):
        if prog.exists():
            cmds.append([str(prog), "-n", n, "-r", reps, *shape])
        else:
            print(f"(no {prog.relative_to(REPO)}: make {prog.relative_to(REPO)} to measure its GEMMs)", flush=True)
    cmds.append([sys.executable, str(REPO / "dev" / "gemm_peak.py"), "-n", n, "--reps", reps, "--threads", str(args.threads),
                 "--precision", torch_peak_precisions(args), *shape])
    for rnd, cmd in ((r, c) for r in range(args.peak_rounds) for c in cmds):
        label = f"{when}{f', round {rnd + 1}/{args.peak_rounds}' if args.peak_rounds > 1 else ''}"
        print(f"GEMM peak ({label}): {' '.join(Path(cmd[0]).name if i == 0 else c for i, c in enumerate(cmd))} ...", flush=True)
        text = run_capture(cmd, env, args.timeout)
        found = parse_peaks(text)
        backend = next((line for line in text.splitlines() if line.startswith("gemm_peak: ")), "")
        if backend:
            print(f"  {backend[len('gemm_peak: '):]}", flush=True)
        print("  " + ", ".join(f"{k} {v:.1f} GFLOP/s" for k, v in found.items()), flush=True)
        for k, v in found.items():
            peaks[k] = max(v, peaks.get(k, 0.0))
    return peaks


def peak_drift_line(start: dict[str, float], end: dict[str, float], args: argparse.Namespace) -> str:
    """The GEMM peaks measured again after the runs, each as a fraction of its start value: how far this machine's
    speed moved while the runs were timed (the limits stay the start's)."""
    parts = [f"{k} {v:.1f} ({100.0 * v / start[k]:.0f} % of start)" if start.get(k) else f"{k} {v:.1f}"
             for k, v in sorted(end.items(), key=lambda kv: -kv[1])]
    return f"GEMM peak at end ({args.peak_size}^3, {args.threads} thread(s), median of {args.peak_reps}), GFLOP/s: " + ", ".join(parts)


def measure_machine(args: argparse.Namespace, env: dict[str, str]) -> tuple[float | None, float | None]:
    """(memory bandwidth GB/s, SIMD GFLOP/s) from build/triad on the run's threads; (None, None) without it."""
    prog = REPO / "build" / "triad"
    if not prog.exists():
        print("(no build/triad: make build/triad to measure the memory bandwidth and the SIMD rate)", flush=True)
        return None, None
    # the best of three runs: this project's virtual machines gave 46 or 70-80 GB/s from one minute to the next, and
    # a limit from the low reading would flatter every memory-bound phase
    runs = [parse_machine(run_capture([str(prog), "-m", str(args.triad_mb)], env, args.timeout)) for _ in range(3)]
    best = best_machine(runs)
    if best[0] is not None:
        print(f"triad: {best[0]:.2f} GB/s ({args.threads} threads), the best of "
              f"{', '.join(f'{r[0]:.2f}' for r in runs if r[0] is not None)}", flush=True)
    if best[1] is not None:
        print(f"simd: {best[1]:.2f} GFLOP/s ({args.threads} threads)", flush=True)
    return best


def best_machine(runs: list[tuple[float | None, float | None]]) -> tuple[float | None, float | None]:
    """The highest bandwidth and the highest SIMD rate of several triad runs (None where no run measured it)."""
    bandwidths = [r[0] for r in runs if r[0] is not None]
    simds = [r[1] for r in runs if r[1] is not None]
    return (max(bandwidths) if bandwidths else None), (max(simds) if simds else None)


def spawn_and_measure(run: Run, warmup: int, timeout: float) -> None:
    """Run the child once; keep the timed steps' ms, the losses and the peak RSS (os.wait4 reaps it with its rusage)."""
    with open(os.devnull, "rb") as devnull:
        proc = subprocess.Popen(run.cmd, cwd=run.cwd, env={**os.environ, **run.env}, stdin=devnull,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = proc.stdout.read().splitlines()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = "\n".join(lines[-30:])
        raise SystemExit(f"error: {' '.join(run.cmd)} exited {proc.returncode}:\n{tail}")
    steps = parse_steps(lines)
    if len(steps) <= warmup:
        tail = "\n".join(lines[-30:])
        raise SystemExit(f"error: {run.name}: expected more than {warmup} step lines, got {len(steps)}:\n{tail}")
    run.times_ms += [ms for _, ms in steps[warmup:]]
    run.losses = [loss for loss, _ in steps]
    gemm = [m for m in (GEMM_TIME_RE.match(line) for line in lines) if m]
    counted = int(gemm[-1].group(3)) if gemm else 0
    if counted > 0:  # the GEMM clock leaves the first step out: so does the mean it is taken from
        run.outside_gemm_ms.append((sum(ms for _, ms in steps[-counted:]) - float(gemm[-1].group(1))) / counted)
    add_phases(run, parse_phases(lines), [ms for _, ms in steps])
    run.peak_rss_mb = max(run.peak_rss_mb, usage.ru_maxrss / 1024.0)
    refusal = [line for line in lines if line.startswith(BF16_REFUSED)]
    if refusal:
        run.ran_fp32 = True
        print(f"  {refusal[0]}", flush=True)


def add_phases(run: Run, phases: dict[str, PhaseTotal], step_ms: list[float]) -> None:
    """Adds one child's phase totals to the run's, and the time of the steps they cover (the last N step lines:
    the account leaves the first step out, as the GEMM clock does)."""
    for name, t in phases.items():
        total = run.phases.setdefault(name, PhaseTotal())
        total.ms, total.bytes, total.flops, total.steps = (total.ms + t.ms, total.bytes + t.bytes,
                                                           total.flops + t.flops, total.steps + t.steps)
    covered = max((t.steps for t in phases.values()), default=0)
    if 0 < covered <= len(step_ms):
        run.phase_covered_ms += sum(step_ms[-covered:])
        run.phase_covered_steps += covered


def thread_env(args: argparse.Namespace) -> dict[str, str]:
    threads = str(args.threads)
    env = {"OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
           "OMP_WAIT_POLICY": "PASSIVE" if args.passive else os.environ.get("OMP_WAIT_POLICY", "")}
    return {k: v for k, v in env.items() if v != ""}


def build_runs(args: argparse.Namespace) -> list[Run]:
    """Our binaries x precisions, then PyTorch's modes, in the order they alternate."""
    env = thread_env(args)
    nsteps = args.warmup + args.steps
    row = by_name(args.family)
    reference, files = row.reference, family_files(row)
    cwd = files.cwd
    tokenizer = ["--tokenizer", str(files.tokenizer_json)] if files.tokenizer_json else []
    runs: list[Run] = []
    ours = [b for b in args.ours.split(",") if b]
    names = [Path(b).name for b in ours]
    for binary in ours:
        path = Path(binary) if Path(binary).is_absolute() else REPO / binary
        if not path.exists():
            raise SystemExit(f"error: --ours {binary}: no such program (make {path.name})")
        # two programs of one file name (a build of other sources, say) are named by the paths given
        name = binary if names.count(path.name) > 1 else path.name
        for prec in [p for p in args.precision.split(",") if p]:
            flags, extra_env = OUR_PRECISIONS[prec]
            cmd = [str(path), "-e", args.model, "-i", str(args.data), "-j", "", "-b", str(args.B), "-t", str(args.T),
                   "-x", str(nsteps), "-v", "0", "-s", "0", *flags]
            runs.append(Run(f"llmc {name} {prec}", cmd,
                            {**env, "LLMC_GEMM_TIME": "1", "LLMC_PHASE_TIME": "1", **extra_env}, "llmc",
                            prec.split("-")[0], cwd=cwd))
    for mode in [m for m in args.torch.split(",") if m]:
        precision, features = parse_torch_mode(mode)
        if features == [MINIMAL]:
            runs.append(Run(f"pytorch {mode}", minimal_command(args, precision), env, "pytorch", precision, cwd=cwd))
            continue
        cmd = [sys.executable, str(REPO / reference), "--model", args.model, *tokenizer, "--input_bin", str(args.data),
               "--batch_size", str(args.B), "--sequence_length", str(args.T), "--num_iterations", str(nsteps),
               "--val_loss_every", "0", "--sample_every", "0", "--write_tensors", "0", "--device", "cpu",
               *torch_mode_flags(mode)]
        runs.append(Run(f"pytorch {mode}", cmd, env, "pytorch", precision, cwd=cwd))
    return runs


def table_rows(runs: list[Run], flops: float, tokens: int, peaks: dict[str, float]) -> tuple[list[Row], Run | None]:
    """The table's rows, and the fastest PyTorch run (by median) that every ratio is taken against."""
    medians = {id(r): statistics.median(r.times_ms) for r in runs}
    torch_runs = [r for r in runs if r.kind == "pytorch"]
    fastest = min(torch_runs, key=lambda r: medians[id(r)]) if torch_runs else None
    eager = next((r for r in torch_runs if r.name == "pytorch fp32"), None)
    rows = []
    for r in runs:
        med = medians[id(r)]
        gflops = flops / (med / 1000) / 1e9
        ran = "fp32" if r.ran_fp32 else r.precision
        peak, step_peak = best_peak(peaks, ran), best_step_peak(peaks, ran)
        name = r.name + (" (ran fp32: bf16 does not pay here)" if r.ran_fp32 else "")
        outside = statistics.mean(r.outside_gemm_ms) if r.outside_gemm_ms else None
        rows.append(Row(name, med, tokens / (med / 1000), gflops, gflops / peak[1] if peak else None,
                        gflops / step_peak[1] if step_peak else None, outside, r.peak_rss_mb,
                        medians[id(fastest)] / med if fastest else None, medians[id(eager)] / med if eager else None))
    return rows, fastest


def format_table(rows: list[Row], fastest: Run | None) -> list[str]:
    """A markdown table of the rows; the ratio column names the fastest PyTorch mode."""
    fastest_name = fastest.name.removeprefix("pytorch ") if fastest else "none run"
    cols = ["run", "median ms/step", "tokens/s", "GFLOP/s", "% of GEMM peak", "% of step-GEMM peak",
            "outside GEMMs ms/step", "peak RSS MB", f"vs fastest PyTorch ({fastest_name})", "vs PyTorch fp32 eager"]
    pct = lambda x: f"{100 * x:.0f} %" if x is not None else "-"
    body = [[r.name, f"{r.median_ms:.1f}", f"{r.tokens_per_s:.0f}", f"{r.gflops:.1f}", pct(r.peak_fraction),
             pct(r.step_peak_fraction), f"{r.outside_gemm_ms:.1f}" if r.outside_gemm_ms is not None else "-",
             f"{r.peak_rss_mb:.0f}",
             f"{r.vs_fastest_torch:.2f}x" if r.vs_fastest_torch is not None else "-",
             f"{r.vs_torch_fp32:.2f}x" if r.vs_torch_fp32 is not None else "-"] for r in rows]
    return markdown_table(cols, body)


def phase_gemm_peak(peaks: dict[str, float], precision: str) -> tuple[str, float] | None:
    """The rate the GEMM-shaped phases of a run of `precision` are held against: the best step-GEMM rate of that
    precision (gemm_peak -s), else the best square GEMM's."""
    return best_step_peak(peaks, precision) or best_peak(peaks, precision)


def print_phase_tables(runs: list[Run], rows: list[Row], peaks: dict[str, float],
                       machine: tuple[float | None, float | None]) -> None:
    """For each of our runs that printed phase lines (LLMC_PHASE_TIME=1): its phases against this machine's limits."""
    bandwidth, simd = machine
    for run, row in zip(runs, rows):
        ran = "fp32" if run.ran_fp32 else run.precision
        gemm = phase_gemm_peak(peaks, ran)
        table = phase_rows(run, row.median_ms, bandwidth, simd, gemm[1] if gemm else None)
        if not table:
            continue
        steps = max(t.steps for t in run.phases.values())
        rates = [f"memory {bandwidth:.1f} GB/s" if bandwidth else "no memory bandwidth measured",
                 f"SIMD {simd:.1f} GFLOP/s" if simd else "no SIMD rate measured",
                 f"gemm and attention {gemm[1]:.1f} GFLOP/s ({gemm[0]})" if gemm else "no GEMM peak measured"]
        print(f"\nphases of {row.name}, per step ({steps} steps counted); limits: {', '.join(rates)}")
        print("\n".join(format_phase_table(table)))
    if any(r.phases for r in runs):
        print("(limit = max(bytes / memory bandwidth, FLOPs / peak); other = the counted steps' mean time less the "
              "phases'; step = the median ms/step against the sum of the phases' limits)")


def print_report(runs: list[Run], peaks: dict[str, float], machine: tuple[float | None, float | None],
                 args: argparse.Namespace, peaks_end: dict[str, float] | None = None) -> None:
    vocab = family_vocab(args.family)
    flops = step_flops(args.model, args.B, args.T, args.family, vocab)
    rows, fastest = table_rows(runs, flops, args.B * args.T, peaks)
    print(f"\nCPU: {cpu_description()}")
    note = openblas_coretype_note(os.environ)
    if note:
        print(note)
    print(f"{args.family} model {args.model} (V={vocab}), B={args.B}, T={args.T}, {args.threads} thread(s); {args.rounds} round(s) x {args.steps} timed "
          f"steps after {args.warmup} warm-up step(s) per run; {flops / 1e9:.1f} GFLOP per step (fwd+bwd)")
    if machine[0] or machine[1]:
        print(f"memory bandwidth (triad): {machine[0] or 0:.1f} GB/s, SIMD fp32 FMA: {machine[1] or 0:.1f} GFLOP/s, "
              f"{args.threads} thread(s)")
    if peaks:
        print(f"GEMM peak at start ({args.peak_size}^3, {args.threads} thread(s), median of {args.peak_reps}), GFLOP/s: "
              + ", ".join(f"{k} {v:.1f}" for k, v in sorted(peaks.items(), key=lambda kv: -kv[1])))
        if peaks_end:
            print(peak_drift_line(peaks, peaks_end, args))
        fp32, anyp = best_peak(peaks, "fp32"), best_peak(peaks, "bf16")
        print(f"  % of GEMM peak: fp32 runs against {fp32[0]} ({fp32[1]:.1f})" if fp32 else "  no fp32 peak measured", end="")
        print(f", bf16 runs against {anyp[0]} ({anyp[1]:.1f})" if anyp else "")
        s32, s16 = best_step_peak(peaks, "fp32"), best_step_peak(peaks, "bf16")
        if s32 or s16:
            print("  % of step-GEMM peak (the GEMMs of one step at these shapes): "
                  + ", ".join(f"{p} runs against {s[0].removeprefix('step ')} ({s[1]:.1f})" for p, s in (("fp32", s32), ("bf16", s16)) if s))
    if fastest:
        print(f"fastest PyTorch mode: {fastest.name} ({statistics.median(fastest.times_ms):.1f} ms/step)")
    print("\n".join(format_table(rows, fastest)))
    print("(vs = PyTorch median ms / this run's median ms: > 1 means faster than that PyTorch mode; PyTorch modes: "
          "bf16 = autocast, flash = scaled_dot_product_attention, compile = torch.compile, fused = AdamW(fused=True), "
          "minimal = dev/torch_minimal_step.py's compiled step)")
    print_phase_tables(runs, rows, peaks, machine)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", default=DEFAULT_FAMILY.name, choices=NAMES,
                   help="the model family: its trainer train_<family> against its reference train_<family>.py "
                   f"(default {DEFAULT_FAMILY.name})")
    p.add_argument("--model", default="d12", help="dN model, initialised from scratch in both trainers (default d12)")
    p.add_argument("-B", type=int, default=4, help="batch size (default 4)")
    p.add_argument("-T", type=int, default=64, help="sequence length (default 64)")
    p.add_argument("--threads", type=int, default=2, help="OpenMP / BLAS / torch threads, GEMM peak included (default 2)")
    p.add_argument("--steps", type=int, default=5, help="timed steps per run (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps at the start of each run; a -compile mode "
                   "compiles in the first (default 1)")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds over all runs (default 2)")
    p.add_argument("--ours", default=None, help=f"comma-separated llmc binaries (default {DEFAULT_OURS_BLAS}, or the "
                   "family's trainer train_<family>); given by name they are built first with make, with their GEMM-peak "
                   "programs")
    p.add_argument("--build", type=int, default=1, help="0 = time the --ours programs as they are, without make")
    p.add_argument("--precision", default=None, help="our precisions, comma-separated: fp32, bf16 (where it pays), "
                   "bf16-force (LLMC_BF16=force), bf16-onednn (LLMC_BF16_GEMM=onednn) (default fp32,bf16, plus bf16-force on "
                   "CPUs with bf16 instructions)")
    p.add_argument("--torch", default="auto",
                   help="PyTorch modes, comma-separated: fp32 (eager) or bf16 (autocast), each with any of -flash, "
                        "-compile, -fused (e.g. fp32-flash-compile-fused); minimal-fp32, minimal-bf16: the minimal "
                        "compiled step (dev/torch_minimal_step.py), minimal = minimal-bf16 where the CPU has bf16 "
                        "instructions, else minimal-fp32; '' = none; auto (default) = "
                        f"{','.join(AUTO_TORCH_FP32)}, plus {','.join(AUTO_TORCH_BF16)} where the CPU has "
                        f"{' or '.join(BF16_CPU_FLAGS)}, plus {MINIMAL}")
    p.add_argument("--peak-size", type=int, default=2048, help="n of the n^3 GEMM peak measured at start; 0 = skip (default 2048)")
    p.add_argument("--peak-at-end", type=int, default=1, choices=(0, 1),
                   help="1 = measure the GEMM peaks again after the runs and print each beside its start value (how far "
                   "the machine's speed moved during the runs; the limits stay the start's); 0 = skip (default 1)")
    p.add_argument("--peak-reps", type=int, default=3, help="timed GEMMs per peak measurement, median taken (default 3)")
    p.add_argument("--peak-rounds", type=int, default=1, help="the peak programs (ours, then torch's) run this many "
                   "times alternating, each rate the best of its rounds: on a machine whose speed moves, a fairer "
                   "ranking of the kernels (default 1)")
    p.add_argument("--triad-mb", type=int, default=256, help="MB per array of build/triad's memory bandwidth "
                   "(three arrays, far larger than the last-level cache); 0 = skip it and the SIMD rate (default 256)")
    p.add_argument("--data", type=Path, default=None, help="train token shard for both (default tinyshakespeare; a "
                   "family whose dN vocabulary is its tokenizer's: its test tokenizer's shard, written by make "
                   "<family>-debug-states)")
    p.add_argument("--passive", type=int, default=0, help="1 = OMP_WAIT_POLICY=PASSIVE for every run")
    p.add_argument("--timeout", type=float, default=3600, help="seconds allowed per run")
    args = p.parse_args(argv)
    row = by_name(args.family)
    files = family_files(row)
    if args.ours is None:
        args.ours = DEFAULT_OURS_BLAS if row is DEFAULT_FAMILY else row.trainer
    if args.precision is None:
        has_bf16 = set(cpuinfo_fields(read_cpuinfo()).get("flags", "").split()) & set(BF16_CPU_FLAGS)
        args.precision = "fp32,bf16" + (",bf16-force" if has_bf16 else "")
    bad = [p for p in args.precision.split(",") if p and p not in OUR_PRECISIONS]
    if bad:
        p.error(f"--precision {args.precision}: use {', '.join(OUR_PRECISIONS)}")
    args.data = files.data if args.data is None else args.data
    if args.torch == "auto":
        args.torch = ",".join(auto_torch_modes(read_cpuinfo()))
    args.torch = ",".join(resolve_minimal(m, read_cpuinfo()) for m in args.torch.split(",") if m)
    for name in ("B", "T", "threads", "steps", "rounds", "peak_reps", "peak_rounds"):
        if getattr(args, name) < 1:
            p.error(f"-{name if len(name) == 1 else '-' + name.replace('_', '-')} must be >= 1")
    if args.warmup < 0 or args.peak_size < 0 or args.triad_mb < 0:
        p.error("--warmup, --peak-size and --triad-mb must be >= 0")
    for mode in [m for m in args.torch.split(",") if m]:
        if {"compile", MINIMAL} & set(parse_torch_mode(mode)[1]) and args.warmup < 1:
            p.error(f"--torch {mode}: torch.compile compiles in the first step; it needs --warmup >= 1")
    model_depth(args.model)
    if not args.data.exists() and not (args.build and files.make_target and args.data == files.data):  # make writes it
        p.error(f"--data {args.data}: no such file (python dev/data/tinyshakespeare.py writes it)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.build:
        references = [family_files(by_name(args.family)).make_target or ""]
        triad = ["build/triad"] if args.triad_mb > 0 else []
        build_programs(make_targets([b for b in args.ours.split(",") if b]) + triad + [t for t in references if t])
    runs = build_runs(args)
    if not runs:
        raise SystemExit("error: nothing to run (--ours and --torch are both empty)")
    print(f"CPU: {cpu_description()}", flush=True)
    note = openblas_coretype_note(os.environ)
    if note:
        print(note, flush=True)
    print(f"PyTorch modes: {args.torch or 'none'}", flush=True)
    machine = measure_machine(args, thread_env(args)) if args.triad_mb > 0 else (None, None)
    peaks = measure_peaks(args, thread_env(args)) if args.peak_size > 0 else {}
    for rnd in range(args.rounds):
        for r in runs:
            print(f"round {rnd + 1}/{args.rounds}: {r.name} ...", flush=True)
            spawn_and_measure(r, args.warmup, args.timeout)
            print(f"  steps ms: {', '.join(f'{t:.0f}' for t in r.times_ms[-args.steps:])}; peak RSS {r.peak_rss_mb:.0f} MB", flush=True)
    peaks_end = measure_peaks(args, thread_env(args), "end") if args.peak_size > 0 and args.peak_at_end else {}
    print_report(runs, peaks, machine, args, peaks_end)
    return 0


if __name__ == "__main__":
    sys.exit(main())
