"""Time a trainer with an environment switch set one way and the other, runs alternating, on this CPU.

The CPU trainers keep an old path selectable beside a new one (LLMC_BF16_CVT, LLMC_BF16_GEMM, LLMC_VEC16,
LLMC_ATTENTION_PREFETCH, LLMC_GRAD_NORM_WIDE, ...: doc/cpu-speed.md) until the new one is timed on each CPU kind.
This runs the trainer with each value of a switch in turn, --rounds times (A, B, A, B, ...: a machine whose speed
drifts shares the drift), each run --warmup untimed steps then --steps timed ones with LLMC_PHASE_TIME=1, and prints
per value the median step time and the median of each phase (ms a step), then the ratio of each value's to the
first value's; the first line names the CPU as make bench does (model name, family, model, ISA flags).

    python dev/time_switches.py LLMC_VEC16=1,0 LLMC_ATTENTION_PREFETCH=1,0 -- -e d12 -b 4 -t 1024 -p bf16

Everything after -- goes to the trainer (-i, -j, -x, -v and -s are set here). --json writes every step time.

A step's phases move by up to a fifth between runs on a shared or drifting machine; a kernel's own timer does not
(each of its times is already the best or the median of many calls). --kernel runs such programs instead of the
trainer, each value of each switch in turn, and compares every line of their output that holds times ('... 12.3 ms'):

    python dev/time_switches.py --rounds 6 LLMC_VEC16=1,0 --kernel 'dev/test/test_attention_cpu --time 1024' \
        --kernel 'dev/test/test_classifier --time'
    python dev/time_switches.py --rounds 6 LLMC_BF16_CVT=1,0 --kernel 'dev/test/test_elementwise --time 1024' \
        --kernel 'dev/test/test_norm_cpu --time' --kernel 'dev/test/test_attention_cpu --time 1024'
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO / "dev" / "data" / "tinyshakespeare" / "tiny_shakespeare_train.bin"
sys.path[:0] = [str(REPO / "dev"), str(REPO)]

import bench  # noqa: E402  (dev/bench.py: the CPU line and the step and phase lines, parsed as make bench does)

MS_RE = re.compile(r"(\d+(?:\.\d+)?) ms\b")
NUMBER_RE = re.compile(r"\d+(?:\.\d+)?")


def parse_switch(text: str) -> tuple[str, list[str]]:
    name, sep, values = text.partition("=")
    if not sep or not re.fullmatch(r"[A-Z_][A-Z0-9_]*", name) or len(values.split(",")) < 2:
        raise argparse.ArgumentTypeError(f"'{text}': expected NAME=VALUE,VALUE[,...] (e.g. LLMC_VEC16=1,0)")
    return name, values.split(",")


def run_once(cmd: list[str], env: dict[str, str], warmup: int) -> tuple[list[float], dict[str, float]]:
    """One trainer run: the timed steps' ms and each phase's ms a step (LLMC_PHASE_TIME=1)."""
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
    lines = proc.stdout.splitlines()
    steps = [ms for _, ms in bench.parse_steps(lines)][warmup:]
    phases = {name: total.ms / total.steps for name, total in bench.parse_phases(lines).items() if total.steps}
    return steps, phases


def ms_lines(text: str) -> dict[tuple[str, int], tuple[str, list[float]]]:
    """Each output line holding times ('12.3 ms'), keyed by the line with its numbers blanked and its spaces
    collapsed, and its occurrence: the line itself and its times in order."""
    found: dict[tuple[str, int], tuple[str, list[float]]] = {}
    for line in text.splitlines():
        times = [float(t) for t in MS_RE.findall(line)]
        if times:
            template = " ".join(NUMBER_RE.sub("#", line).split())  # (a number's width moves the spaces)
            k = sum(1 for key in found if key[0] == template)
            found[(template, k)] = (line.strip(), times)
    return found


def time_trainer(args: argparse.Namespace, trainer_args: list[str]) -> dict:
    """The trainer run with each value of each switch, alternating, --rounds times: step and phase medians."""
    cmd = [str(REPO / args.trainer), *trainer_args, "-i", str(args.data), "-j", "", "-x", str(args.warmup + args.steps),
           "-v", "0", "-s", "0"]
    print(f"trainer: {' '.join(cmd[:1] + trainer_args)}", flush=True)
    record = {}
    for name, values in args.switches:
        steps: dict[str, list[float]] = {v: [] for v in values}
        phases: dict[str, dict[str, list[float]]] = {v: {} for v in values}
        for r in range(args.rounds):
            for value in values:
                env = {**os.environ, name: value, "LLMC_PHASE_TIME": "1"}
                got, phase_ms = run_once(cmd, env, args.warmup)
                steps[value] += got
                for phase, ms in phase_ms.items():
                    phases[value].setdefault(phase, []).append(ms)
                print(f"  round {r + 1}/{args.rounds} {name}={value}: {', '.join(f'{ms:.1f}' for ms in got)} ms",
                      flush=True)
        base = statistics.median(steps[values[0]])
        print(f"{name}: median ms a step (phases: median ms a step), ratio to {name}={values[0]}")
        for value in values:
            step = statistics.median(steps[value])
            parts = ", ".join(f"{ph} {statistics.median(ms):.1f}" for ph, ms in phases[value].items())
            print(f"  {name}={value}: {step:.1f} ms ({step / base:.3f}x) | {parts}")
        record[name] = {"steps": steps, "phases": phases}
    return {"trainer": cmd, "switches": record}


def run_kernel(cmd: list[str], env: dict[str, str]) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
    return proc.stdout


def median_times(runs: list[dict], key: tuple[str, int], count: int) -> list[float]:
    """The median of each of a line's `count` times over the runs that printed that line (nan where none did)."""
    found = [[r[key][1][i] for r in runs if key in r and len(r[key][1]) > i] for i in range(count)]
    return [statistics.median(times) if times else math.nan for times in found]


def compare(medians: dict[str, list[float]], values: list[str], i: int) -> str:
    """'a / b (b/a x)' for the i-th time of a line under each value, '-' where a value has none."""
    times = [medians[v][i] for v in values]
    shown = " / ".join("-" if math.isnan(t) else f"{t:.3f}" for t in times)
    ratios = " ".join("-" if math.isnan(t) or not times[0] > 0 else f"{t / times[0]:.2f}x" for t in times[1:])
    return f"{shown} ({ratios})"


def time_kernels(args: argparse.Namespace) -> dict:
    """Each --kernel program run with each value of each switch, alternating, --rounds times; per line of its
    output that holds times, the median of each time under each value and its ratio to the first value's."""
    record: dict = {}
    for name, values in args.switches:
        for kernel in args.kernel:
            cmd = shlex.split(kernel)
            cmd[0] = str(REPO / cmd[0])
            runs: dict[str, list[dict]] = {v: [] for v in values}
            for _ in range(args.rounds):
                for value in values:
                    runs[value].append(ms_lines(run_kernel(cmd, {**os.environ, name: value})))
            print(f"{name} ({', '.join(values)}), {kernel}: the medians of {args.rounds} runs, ms; in parentheses "
                  f"the ratio to {name}={values[0]}", flush=True)
            table = {}
            # the lines of the first value's first run, then those only another value's runs print (a switch can
            # change which passes a timer runs): '-' where a value printed no such line
            lines = {}
            for v in values:
                for key, (line, times) in runs[v][0].items():
                    lines.setdefault(key, (line, len(times)))
            for key, (line, count) in lines.items():
                medians = {v: median_times(runs[v], key, count) for v in values}
                table[line] = medians
                print(f"  {line[:80]}\n      {'; '.join(compare(medians, values, i) for i in range(count))}")
            record.setdefault(name, {})[kernel] = table
    return {"kernels": args.kernel, "switches": record}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    trainer_args = argv[argv.index("--") + 1:] if "--" in argv else []
    ours = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("switches", nargs="+", type=parse_switch, help="NAME=VALUE,VALUE: each timed on its own")
    p.add_argument("--trainer", default="train_gpt2", help="the trainer binary at the repo's root (default train_gpt2)")
    p.add_argument("--kernel", action="append", default=[],
                   help="time this program instead of the trainer, e.g. 'dev/test/test_attention_cpu --time 1024' "
                        "(repeatable): every line of its output that holds times is compared")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="train token shard (default tinyshakespeare)")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps a run (default 1)")
    p.add_argument("--steps", type=int, default=3, help="timed steps a run (default 3)")
    p.add_argument("--json", type=Path, help="write every step time (the kernels' medians) here")
    args = p.parse_args(ours)
    if args.rounds < 1 or args.steps < 1 or args.warmup < 0:
        p.error("--rounds and --steps must be >= 1, --warmup >= 0")
    if args.kernel and trainer_args:
        p.error("trainer arguments after -- are for the trainer, not for --kernel")
    for kernel in args.kernel:
        words = shlex.split(kernel)
        if not words or not (REPO / words[0]).is_file():
            target = words[0] if words else "dev/test/<name>"
            p.error(f"--kernel: '{kernel}' names no program at {REPO} (make {target})")
    if not args.kernel and not (REPO / args.trainer).exists():
        p.error(f"{REPO / args.trainer} not found (make {args.trainer})")
    if not args.kernel and not args.data.exists():
        p.error(f"{args.data} not found (python dev/data/tinyshakespeare.py)")
    cpu = bench.cpu_description()
    print(f"cpu: {cpu}", flush=True)
    record = time_kernels(args) if args.kernel else time_trainer(args, trainer_args)
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu, **record}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
