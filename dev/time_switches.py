"""Time a trainer with an environment switch set one way and the other, runs alternating, on this CPU.

The CPU trainers keep an old path selectable beside a new one (LLMC_BF16_CVT, LLMC_BF16_GEMM, LLMC_VEC16,
LLMC_ATTENTION_PREFETCH, LLMC_GRAD_NORM_WIDE, ...: doc/cpu-speed.md) until the new one is timed on each CPU kind.
This runs the trainer with each value of a switch in turn, --rounds times (A, B, A, B, ...: a machine whose speed
drifts shares the drift), each run --warmup untimed steps then --steps timed ones with LLMC_PHASE_TIME=1, and prints
per value the median step time and the median of each phase (ms a step), then the ratio of each value's to the
first value's; the first line names the CPU as make bench does (model name, family, model, ISA flags).

    python dev/time_switches.py LLMC_VEC16=1,0 LLMC_ATTENTION_PREFETCH=1,0 -- -e d12 -b 4 -t 1024 -p bf16

Everything after -- goes to the trainer (-i, -j, -x, -v and -s are set here). --json writes every step time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO / "dev" / "data" / "tinyshakespeare" / "tiny_shakespeare_train.bin"
sys.path[:0] = [str(REPO / "dev"), str(REPO)]

import bench  # noqa: E402  (dev/bench.py: the CPU line and the step and phase lines, parsed as make bench does)


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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    trainer_args = argv[argv.index("--") + 1:] if "--" in argv else []
    ours = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("switches", nargs="+", type=parse_switch, help="NAME=VALUE,VALUE: each timed on its own")
    p.add_argument("--trainer", default="train_gpt2", help="the trainer binary at the repo's root (default train_gpt2)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="train token shard (default tinyshakespeare)")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps a run (default 1)")
    p.add_argument("--steps", type=int, default=3, help="timed steps a run (default 3)")
    p.add_argument("--json", type=Path, help="write every step time here")
    args = p.parse_args(ours)
    if args.rounds < 1 or args.steps < 1 or args.warmup < 0:
        p.error("--rounds and --steps must be >= 1, --warmup >= 0")
    trainer = REPO / args.trainer
    if not trainer.exists():
        p.error(f"{trainer} not found (make {args.trainer})")
    if not args.data.exists():
        p.error(f"{args.data} not found (python dev/data/tinyshakespeare.py)")
    cmd = [str(trainer), *trainer_args, "-i", str(args.data), "-j", "", "-x", str(args.warmup + args.steps),
           "-v", "0", "-s", "0"]
    cpu = bench.cpu_description()
    print(f"cpu: {cpu}\ntrainer: {' '.join(cmd[:1] + trainer_args)}", flush=True)
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
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu, "trainer": cmd, "switches": record}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
