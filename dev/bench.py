"""Benchmark: llmc's CPU trainer (train_gpt2) against the PyTorch reference (train_gpt2.py), side by side;
with --family llama3, train_llama3 against train_llama3.py; with --family nanochat, train_nanochat against
train_nanochat.py.

Both train the same model (initialised from scratch with seed 42 in both: `-e dN` / `--model dN`),
on the same tinyshakespeare tokens (Llama 3: the local test tokenizer's llama-3 shards and its 514-token
vocabulary, from `make llama3-debug-states`, in build/llama3, where both run), with the same B, T, AdamW settings and thread count. Runs
alternate (ours, PyTorch, ours, ...) for --rounds rounds; each run does --warmup untimed steps and
--steps timed ones, and the per-step times of all rounds are pooled into a median. Peak resident
memory is the child process's ru_maxrss (os.wait4), for both programs.

PyTorch runs in the modes --torch lists: fp32 (eager, explicit attention) or bf16 (autocast), each
optionally with -flash (F.scaled_dot_product_attention), -compile (torch.compile; its compilation
falls in the untimed warm-up step) and -fused (AdamW(fused=True)), e.g. fp32-flash-compile-fused.
Every run's ratio is taken against the fastest PyTorch mode of the run, which the table names. The
default (--torch auto) runs the bf16 modes only on CPUs with bf16 instructions (AVX512-BF16, AMX):
elsewhere torch emulates bf16 GEMMs and a step takes minutes.

The --ours programs named without a path (train_gpt2, train_gpt2_none, ...) are built first with make,
with their GEMM-peak programs, so a run times the sources as they are (--build 0 skips that).

Before the trainers it measures this machine's GEMM peak: a square GEMM (--peak-size, 2 threads by
default, median of --peak-reps) with llmc/cpu/matmul.h (build/gemm_peak[_<blas>] for each --ours binary:
its BLAS, oneDNN's bf16 kernel where the build has oneDNN, the built-in fp32 and bf16 kernels) and with
torch (dev/gemm_peak.py, fp32 and bf16). Each run's GFLOP/s is reported as a fraction of the fastest fp32
GEMM measured (a bf16 run: of the fastest GEMM of either precision, since fp32 is always an option). For
GPT-2 the same programs also time the GEMMs of one training step at the run's shapes (gemm_peak -s: every
layer's forward, input-gradient and weight-gradient GEMMs and the lm_head's), and each run is held against
the best such rate of its precision too ("% of step-GEMM peak"). The CPU heads the table.
A -p bf16 run that the trainer ran in fp32 (its one start-up line: bf16 does not pay on this CPU) is
named so in the table and held against the fp32 peak. The precision bf16-force runs -p bf16 with
LLMC_BF16=force: the bf16 path timed even where the calibration would refuse it (the default adds it on CPUs
with bf16 instructions).

Our trainers run with LLMC_GEMM_TIME=1 (llmc/cpu/matmul.h): each prints the time its GEMMs took, and the
table gives the time per step outside them ("outside GEMMs", roundings to bf16 and the refresh of the bf16
weights included): the overhead of a path, comparable on any CPU.

FLOPs per step (fwd + bwd) = 6 * N * tokens + 12 * L * C * T * tokens, N = the matmul parameters
(GPT-2: 12 * L * C^2 + V * C, lm_head included; Llama 3: the q, k, v, o projections with NKV key/value
heads, the three SwiGLU matrices and the lm_head), the second term the attention scores and weighted sums.

It is a benchmark, not a test: nothing here asserts a time. Example:

    python dev/bench.py --model d12 -B 4 -T 64 --threads 2 --steps 5
    python dev/bench.py --ours train_gpt2_mkl,train_gpt2_openblas,train_gpt2_none --torch fp32,fp32-flash-compile
    python dev/bench.py --ours train_gpt2_onednn --precision fp32,bf16-force -T 1024 --torch ""
    python dev/bench.py --family llama3 --model d6 --steps 10 --rounds 3
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

from model_file import llama_ffn_hidden  # the Llama rule the reference and the C reader use

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO / "dev" / "data" / "tinyshakespeare" / "tiny_shakespeare_train.bin"
BF16_REFUSED = "-p bf16: training in fp32 instead"  # train_gpt2's line where bf16 does not pay
STEP_RE = re.compile(r"^step\s+(\d+)/(\d+) \| loss ([0-9.naif+-]+) .*\| ([0-9.]+) ms \|")
PEAK_RE = re.compile(r"^gemm (\S+) (fp32|bf16) ([0-9.]+)$", re.M)
STEP_PEAK_RE = re.compile(r"^gemm-step (\S+) (fp32|bf16) ([0-9.]+)$", re.M)
GEMM_TIME_RE = re.compile(r"^gemm time: ([0-9.]+) ms in (\d+) calls over (\d+) steps", re.M)
# our precisions: -p fp32, -p bf16 (bf16 where the calibration says it pays), bf16 with LLMC_BF16=force
OUR_PRECISIONS = {"fp32": ([], {}), "bf16": (["-p", "bf16"], {}), "bf16-force": (["-p", "bf16"], {"LLMC_BF16": "force"})}
# the default --ours for GPT-2: the OpenBLAS and oneDNN builds (fp32 on each, bf16 on oneDNN's kernels) and the
# built-in kernels
DEFAULT_OURS_GPT2 = "train_gpt2_openblas,train_gpt2_onednn,train_gpt2_none"
DEPTH_SHAPES = {6: (384, 6), 12: (768, 12), 24: (1024, 16), 36: (1280, 20), 48: (1600, 25)}
VOCAB = 50257
LLAMA3_DIR = REPO / "build" / "llama3"  # `make llama3-debug-states`: the test tokenizer, its shards, llama3_tokenizer.bin
LLAMA3_DATA = LLAMA3_DIR / "ts" / "tiny_shakespeare_train.bin"
LLAMA3_TOKENIZER = LLAMA3_DIR / "llama3_tokenizer.bin"
# per model family: our trainer, its reference, the data it trains on, the directory both run in
FAMILIES = {"gpt2": ("train_gpt2", "train_gpt2.py", DEFAULT_DATA, REPO),
            "llama3": ("train_llama3", "train_llama3.py", LLAMA3_DATA, LLAMA3_DIR),
            "nanochat": ("train_nanochat", "train_nanochat.py", DEFAULT_DATA, REPO)}
NANOCHAT_VOCAB = 50304  # nanochat's dN: GPT-2's vocabulary padded to a multiple of 64 (llmc/nanochat.h)
# PyTorch modes: a precision, then any of these suffixes -> train_gpt2.py's flags
TORCH_PRECISIONS = {"fp32": "float32", "bf16": "bfloat16"}
TORCH_FEATURES = {"flash": ["--flash", "1"], "compile": ["--compile", "1"], "fused": ["--fused_adamw", "1"]}
# --torch auto: eager fp32 (the reference's own mode), then the fast fp32 modes; the bf16 ones only where the
# CPU has bf16 instructions (elsewhere torch emulates bf16: 112 s per d12 step on a 2-core Zen 3, 47x its fp32)
AUTO_TORCH_FP32 = ["fp32", "fp32-flash-fused", "fp32-flash-compile-fused"]
AUTO_TORCH_BF16 = ["bf16", "bf16-flash-compile-fused"]
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
# CPU flags worth naming in the table: what the GEMMs can use
ISA_FLAGS = ["avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16"]


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


def model_shape(model: str) -> tuple[int, int]:
    """(L, C) of a dN model name."""
    if not (model.startswith("d") and model[1:].isdigit()):
        raise SystemExit(f"error: --model {model}: expected dN, e.g. d12")
    depth = int(model[1:])
    return depth, DEPTH_SHAPES.get(depth, (64 * depth, depth))[0]


def llama3_vocab(tokenizer: Path = LLAMA3_TOKENIZER) -> int:
    """V of a Llama 3 dN model: train_llama3 takes it from llama3_tokenizer.bin (header int 2)."""
    return int.from_bytes(tokenizer.read_bytes()[8:12], "little")


def step_flops(model: str, B: int, T: int, family: str = "gpt2", vocab: int = VOCAB) -> float:
    """FLOPs of one forward + backward pass over B x T tokens."""
    L, C = model_shape(model)
    if family == "nanochat":
        C = 64 * L  # nanochat's depth rule: C = 64 N whatever N
    if family == "llama3":  # dN: NH = N heads of 64, NKV = max(1, N/2), SwiGLU hidden by Llama's rule (multiple of 32)
        nh, nkv = L, max(1, L // 2)
        per_layer = C * C + 2 * C * (C // nh) * nkv + C * C + 3 * C * llama_ffn_hidden(C, 32, 0.0)
        n_matmul = L * per_layer + vocab * C
    else:  # GPT-2; nanochat's dN alike (NKV = NH, MLP 4C, the untied head is the only V x C GEMM)
        n_matmul = 12 * L * C * C + vocab * C
    tokens = B * T
    return 6.0 * n_matmul * tokens + 12.0 * L * C * T * tokens


def parse_torch_mode(mode: str) -> tuple[str, list[str]]:
    """('fp32' | 'bf16', [features]) of a --torch mode such as bf16-flash-compile; SystemExit on anything else."""
    precision, *features = mode.split("-")
    bad = [f for f in features if f not in TORCH_FEATURES] + ([] if precision in TORCH_PRECISIONS else [precision])
    if bad or len(set(features)) != len(features):
        raise SystemExit(f"error: --torch {mode}: expected fp32 or bf16, then any of "
                         f"{', '.join('-' + f for f in TORCH_FEATURES)} once each (e.g. fp32-flash-compile)")
    return precision, features


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
    """The PyTorch modes of --torch auto on a CPU with these /proc/cpuinfo flags."""
    flags = set(cpuinfo_fields(cpuinfo).get("flags", "").split())
    return AUTO_TORCH_FP32 + (AUTO_TORCH_BF16 if flags & set(BF16_CPU_FLAGS) else [])


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
    """build/gemm_peak for train_gpt2 and train_llama3 (the same GEMMs), build/gemm_peak_<blas> for
    train_gpt2_<blas> (same BLAS, same flags)."""
    out: list[Path] = []
    for binary in ours:
        stem = Path(binary).name
        suffix = stem[len("train_gpt2"):] if stem.startswith("train_gpt2") else ""
        prog = REPO / "build" / f"gemm_peak{suffix}"
        if prog not in out:
            out.append(prog)
    return out


def make_targets(ours: list[str]) -> list[str]:
    """The make targets of the --ours programs given by name (train_gpt2, train_gpt2_<blas>, ...) and of their
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
    """gemm_peak's -s BT,C,Vp,L for a GPT-2 run of these flags."""
    L, C = model_shape(args.model)
    return f"{args.B * args.T},{C},{(VOCAB + 127) // 128 * 128},{L}"


def measure_peaks(args: argparse.Namespace, env: dict[str, str]) -> dict[str, float]:
    """The GEMM rates of llmc/cpu/matmul.h (one program per --ours BLAS; for GPT-2 also at a step's shapes) and of
    torch, at --peak-size."""
    peaks: dict[str, float] = {}
    n, reps = str(args.peak_size), str(args.peak_reps)
    shape = ["-s", step_shape(args)] if args.family == "gpt2" else []
    cmds: list[list[str]] = []
    for prog in peak_programs([b for b in args.ours.split(",") if b]):
        if prog.exists():
            cmds.append([str(prog), "-n", n, "-r", reps, *shape])
        else:
            print(f"(no {prog.relative_to(REPO)}: make {prog.relative_to(REPO)} to measure its GEMMs)", flush=True)
    cmds.append([sys.executable, str(REPO / "dev" / "gemm_peak.py"), "-n", n, "--reps", reps, "--threads", str(args.threads)])
    for cmd in cmds:
        print(f"GEMM peak: {' '.join(Path(cmd[0]).name if i == 0 else c for i, c in enumerate(cmd))} ...", flush=True)
        found = parse_peaks(run_capture(cmd, env, args.timeout))
        print("  " + ", ".join(f"{k} {v:.1f} GFLOP/s" for k, v in found.items()), flush=True)
        for k, v in found.items():
            peaks[k] = max(v, peaks.get(k, 0.0))
    return peaks


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
    run.peak_rss_mb = max(run.peak_rss_mb, usage.ru_maxrss / 1024.0)
    refusal = [line for line in lines if line.startswith(BF16_REFUSED)]
    if refusal:
        run.ran_fp32 = True
        print(f"  {refusal[0]}", flush=True)


def thread_env(args: argparse.Namespace) -> dict[str, str]:
    threads = str(args.threads)
    env = {"OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
           "OMP_WAIT_POLICY": "PASSIVE" if args.passive else os.environ.get("OMP_WAIT_POLICY", "")}
    return {k: v for k, v in env.items() if v != ""}


def build_runs(args: argparse.Namespace) -> list[Run]:
    """Our binaries x precisions, then PyTorch's modes, in the order they alternate."""
    env = thread_env(args)
    nsteps = args.warmup + args.steps
    _, reference, _, cwd = FAMILIES[args.family]
    tokenizer = ["--tokenizer", str(LLAMA3_DIR / "tok" / "tokenizer.json")] if args.family == "llama3" else []
    runs: list[Run] = []
    for binary in [b for b in args.ours.split(",") if b]:
        path = Path(binary) if Path(binary).is_absolute() else REPO / binary
        if not path.exists():
            raise SystemExit(f"error: --ours {binary}: no such program (make {path.name})")
        for prec in [p for p in args.precision.split(",") if p]:
            flags, extra_env = OUR_PRECISIONS[prec]
            cmd = [str(path), "-e", args.model, "-i", str(args.data), "-j", "", "-b", str(args.B), "-t", str(args.T),
                   "-x", str(nsteps), "-v", "0", "-s", "0", *flags]
            runs.append(Run(f"llmc {path.name} {prec}", cmd, {**env, "LLMC_GEMM_TIME": "1", **extra_env}, "llmc",
                            prec.removesuffix("-force"), cwd=cwd))
    for mode in [m for m in args.torch.split(",") if m]:
        precision, _ = parse_torch_mode(mode)
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


def print_report(runs: list[Run], peaks: dict[str, float], args: argparse.Namespace) -> None:
    vocab = {"llama3": llama3_vocab, "nanochat": lambda: NANOCHAT_VOCAB}.get(args.family, lambda: VOCAB)()
    flops = step_flops(args.model, args.B, args.T, args.family, vocab)
    rows, fastest = table_rows(runs, flops, args.B * args.T, peaks)
    print(f"\nCPU: {cpu_description()}")
    print(f"{args.family} model {args.model} (V={vocab}), B={args.B}, T={args.T}, {args.threads} thread(s); {args.rounds} round(s) x {args.steps} timed "
          f"steps after {args.warmup} warm-up step(s) per run; {flops / 1e9:.1f} GFLOP per step (fwd+bwd)")
    if peaks:
        print(f"GEMM peak at start ({args.peak_size}^3, {args.threads} thread(s), median of {args.peak_reps}), GFLOP/s: "
              + ", ".join(f"{k} {v:.1f}" for k, v in sorted(peaks.items(), key=lambda kv: -kv[1])))
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
          "bf16 = autocast, flash = scaled_dot_product_attention, compile = torch.compile, fused = AdamW(fused=True))")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", default="gpt2", choices=sorted(FAMILIES),
                   help="gpt2: train_gpt2 against train_gpt2.py; llama3: train_llama3 against train_llama3.py; nanochat: "
                   "train_nanochat against train_nanochat.py (default gpt2)")
    p.add_argument("--model", default="d12", help="dN model, initialised from scratch in both trainers (default d12)")
    p.add_argument("-B", type=int, default=4, help="batch size (default 4)")
    p.add_argument("-T", type=int, default=64, help="sequence length (default 64)")
    p.add_argument("--threads", type=int, default=2, help="OpenMP / BLAS / torch threads, GEMM peak included (default 2)")
    p.add_argument("--steps", type=int, default=5, help="timed steps per run (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps at the start of each run; a -compile mode "
                   "compiles in the first (default 1)")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds over all runs (default 2)")
    p.add_argument("--ours", default=None, help=f"comma-separated llmc binaries (default {DEFAULT_OURS_GPT2}, or "
                   "train_llama3, train_nanochat); given by name they are built first with make, with their GEMM-peak programs")
    p.add_argument("--build", type=int, default=1, help="0 = time the --ours programs as they are, without make")
    p.add_argument("--precision", default=None, help="our precisions, comma-separated: fp32, bf16 (where it pays), "
                   "bf16-force (LLMC_BF16=force) (default fp32,bf16, plus bf16-force on CPUs with bf16 instructions; "
                   "Llama 3: fp32, train_llama3 trains in fp32 only)")
    p.add_argument("--torch", default="auto",
                   help="PyTorch modes, comma-separated: fp32 (eager) or bf16 (autocast), each with any of -flash, "
                        "-compile, -fused (e.g. fp32-flash-compile-fused); '' = none; auto (default) = "
                        f"{','.join(AUTO_TORCH_FP32)}, plus {','.join(AUTO_TORCH_BF16)} where the CPU has "
                        f"{' or '.join(BF16_CPU_FLAGS)}")
    p.add_argument("--peak-size", type=int, default=2048, help="n of the n^3 GEMM peak measured at start; 0 = skip (default 2048)")
    p.add_argument("--peak-reps", type=int, default=3, help="timed GEMMs per peak measurement, median taken (default 3)")
    p.add_argument("--data", type=Path, default=None, help="train token shard for both (default tinyshakespeare; Llama 3: "
                   "its llama-3 shard in build/llama3, written by make llama3-debug-states)")
    p.add_argument("--passive", type=int, default=0, help="1 = OMP_WAIT_POLICY=PASSIVE for every run")
    p.add_argument("--timeout", type=float, default=3600, help="seconds allowed per run")
    args = p.parse_args(argv)
    trainer, _, data, _ = FAMILIES[args.family]
    args.ours = (DEFAULT_OURS_GPT2 if args.family == "gpt2" else trainer) if args.ours is None else args.ours
    if args.precision is None:
        has_bf16 = set(cpuinfo_fields(read_cpuinfo()).get("flags", "").split()) & set(BF16_CPU_FLAGS)
        args.precision = ("fp32,bf16" + (",bf16-force" if has_bf16 else "")) if args.family == "gpt2" else "fp32"
    bad = [p for p in args.precision.split(",") if p and p not in OUR_PRECISIONS]
    if bad:
        p.error(f"--precision {args.precision}: use {', '.join(OUR_PRECISIONS)}")
    if args.family == "llama3" and args.precision != "fp32":
        p.error(f"--precision {args.precision}: train_llama3 trains in fp32 only")
    args.data = data if args.data is None else args.data
    if args.torch == "auto":
        args.torch = ",".join(auto_torch_modes(read_cpuinfo()))
    for name in ("B", "T", "threads", "steps", "rounds", "peak_reps"):
        if getattr(args, name) < 1:
            p.error(f"-{name if len(name) == 1 else '-' + name.replace('_', '-')} must be >= 1")
    if args.warmup < 0 or args.peak_size < 0:
        p.error("--warmup and --peak-size must be >= 0")
    for mode in [m for m in args.torch.split(",") if m]:
        if "compile" in parse_torch_mode(mode)[1] and args.warmup < 1:
            p.error(f"--torch {mode}: torch.compile compiles in the first step; it needs --warmup >= 1")
    model_shape(args.model)
    if not args.data.exists() and not (args.build and args.data == LLAMA3_DATA):  # make llama3-debug-states writes that one
        p.error(f"--data {args.data}: no such file (python dev/data/tinyshakespeare.py writes it)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.build:
        llama3_files = ["llama3-debug-states"] if args.family == "llama3" else []
        build_programs(make_targets([b for b in args.ours.split(",") if b]) + llama3_files)
    runs = build_runs(args)
    if not runs:
        raise SystemExit("error: nothing to run (--ours and --torch are both empty)")
    print(f"CPU: {cpu_description()}", flush=True)
    print(f"PyTorch modes: {args.torch or 'none'}", flush=True)
    peaks = measure_peaks(args, thread_env(args)) if args.peak_size > 0 else {}
    for rnd in range(args.rounds):
        for r in runs:
            print(f"round {rnd + 1}/{args.rounds}: {r.name} ...", flush=True)
            spawn_and_measure(r, args.warmup, args.timeout)
            print(f"  steps ms: {', '.join(f'{t:.0f}' for t in r.times_ms[-args.steps:])}; peak RSS {r.peak_rss_mb:.0f} MB", flush=True)
    print_report(runs, peaks, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
