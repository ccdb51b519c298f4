"""AdamW against Muon on the same model and data with the CPU trainer (./train_gpt2), each at its tuned lr.

    python dev/compare_optimizers.py                            # the measured comparison (make compare-optimizers)
    python dev/compare_optimizers.py --model d6 --steps 300 --sweep_steps 60 --adamw_lrs 1e-3 3e-3 6e-3

1. lr sweep: --sweep_steps steps per candidate on --sweep_model (--adamw_lrs; --muon_lrs with AdamW at
   --muon_adamw_lr on the embeddings, head, norms and biases); the lowest final val loss wins for each
   optimizer. The sweep model is smaller than the compared one by default (d2 against d6) because on a
   2-core CPU a d6 Muon step costs ~2.5 AdamW steps (the Newton-Schulz GEMMs do not shrink with the batch).
2. the comparison: --steps steps of each optimizer at its winning lr, val loss every --val_every steps.
Runs go in pairs, one AdamW beside one Muon, one thread each, so both see the same machine load (a shared
machine's load moves the wall-clock numbers, never the per-step ones). Both start from the same init
(-e dN, seed 42) and read the same batches. Training time is the sum of the trainer's step times
(evaluation excluded). Everything lands in --out: per run its main.log and stdout, per optimizer a log
with t:SECONDS on every line (val loss against time), the PNG (dev/vislog.py --time) and summary.txt
with the val loss of both at equal steps and at equal training time.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TS = REPO / "dev" / "data" / "tinyshakespeare"


@dataclass
class RunResult:
    name: str
    optimizer: str
    lr: float
    out: Path
    step_seconds: list[float] = field(default_factory=list)   # per optimizer step, in order
    val: list[tuple[int, float]] = field(default_factory=list)  # (step, val loss)

    def time_at(self, step: int) -> float:
        """Training seconds after `step` optimizer steps."""
        return sum(self.step_seconds[:step])

    def final_val(self) -> float:
        return self.val[-1][1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("--trainer", type=Path, default=REPO / "train_gpt2", help="the CPU trainer (make train_gpt2)")
    a("--model", default="d6", help="dN model from scratch (d6: C=384, 6 layers, 6 heads)")
    a("--batch_size", type=int, default=4)
    a("--seq_len", type=int, default=64)
    a("--steps", type=int, default=60, help="steps of the comparison runs")
    a("--sweep_model", default="d2", help="model of the lr sweep (a smaller one keeps the sweep cheap; '' = --model)")
    a("--sweep_steps", type=int, default=100, help="steps of each lr-sweep run (0 = no sweep: the first lr of each list)")
    a("--val_every", type=int, default=10)
    a("--val_batches", type=int, default=4, help="val batches per evaluation")
    a("--adamw_lrs", type=float, nargs="+", default=[1e-3, 3e-3, 1e-2], help="AdamW lr candidates")
    a("--muon_lrs", type=float, nargs="+", default=[0.01, 0.02, 0.05], help="Muon lr candidates (torch's 'original' adjustment)")
    a("--muon_adamw_lr", type=float, default=3e-3, help="AdamW lr of the non-matrix parameters in the Muon runs")
    a("--warmup_frac", type=float, default=0.05, help="warmup as a fraction of the steps; then cosine to 10%%")
    a("--threads", type=int, default=1, help="OpenMP threads per run (two runs go side by side)")
    a("--out", type=Path, default=REPO / "build" / "compare_optimizers", help="output directory")
    args = p.parse_args(argv)
    if not args.trainer.exists():
        p.error(f"{args.trainer}: not found (make train_gpt2)")
    if not (TS / "tiny_shakespeare_train.bin").exists():
        p.error(f"{TS}/tiny_shakespeare_train.bin: not found (python dev/data/tinyshakespeare.py)")
    if args.steps < 1 or args.val_every < 1 or args.sweep_steps < 0:
        p.error("--steps and --val_every must be positive, --sweep_steps non-negative")
    return args


def trainer_command(args: argparse.Namespace, model: str, optimizer: str, lr: float, steps: int, out: Path) -> list[str]:
    adamw_lr = lr if optimizer == "adamw" else args.muon_adamw_lr
    cmd = [str(args.trainer), "-e", model, "-i", str(TS / "tiny_shakespeare_train.bin"),
           "-j", str(TS / "tiny_shakespeare_val.bin"), "-b", str(args.batch_size), "-t", str(args.seq_len),
           "-x", str(steps), "-v", str(args.val_every), "-m", str(args.val_batches), "-s", "0", "-o", str(out),
           "-l", str(adamw_lr), "-u", str(max(1, int(args.warmup_frac * steps))), "-q", "0.1", "-op", optimizer]
    if optimizer == "muon":
        cmd += ["-ol", str(lr)]
    return cmd


def parse_run(run: RunResult, stdout: str) -> None:
    for m in re.finditer(r"^step (\d+)/\d+ \|.*?\| ([\d.]+) ms \|", stdout, re.M):
        run.step_seconds.append(float(m.group(2)) / 1000.0)
    for line in (run.out / "main.log").read_text().splitlines():
        m = re.match(r"s:(\d+) tel:(\S+)", line)
        if m:
            run.val.append((int(m.group(1)), float(m.group(2))))


def run_pair(args: argparse.Namespace, model: str, jobs: list[tuple[str, str, float, int]]) -> list[RunResult]:
    """Runs the jobs (name, optimizer, lr, steps) on `model` side by side, printing progress as their steps finish."""
    runs = [RunResult(name, optimizer, lr, args.out / name) for name, optimizer, lr, _ in jobs]
    cmds = [trainer_command(args, model, optimizer, lr, steps, r.out) for r, (_, optimizer, lr, steps) in zip(runs, jobs)]
    run_side_by_side(runs, cmds, [steps for *_, steps in jobs], args.threads)
    return runs


def run_side_by_side(runs: list[RunResult], cmds: list[list[str]], steps: list[int], threads: int) -> None:
    """Starts one trainer per run (its command, writing into run.out) at once, `threads` OpenMP threads each, prints
    their progress every 30 s, and fills each run's step times and val losses; exits on a failed run."""
    procs, logs = [], []
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    for r, cmd in zip(runs, cmds):
        r.out.mkdir(parents=True, exist_ok=True)
        (r.out / "main.log").unlink(missing_ok=True)
        log = open(r.out / "stdout.txt", "w")
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env))
        logs.append(log)
    t0 = last = time.time()
    while any(p.poll() is None for p in procs):
        time.sleep(2)
        if time.time() - last < 30 and any(p.poll() is None for p in procs):
            continue
        last = time.time()
        done = [len(re.findall(r"^step \d+/", (r.out / "stdout.txt").read_text(), re.M)) for r in runs]
        status = ", ".join(f"{r.name} {d}/{n}" for r, d, n in zip(runs, done, steps))
        print(f"  [{time.time() - t0:6.0f} s] {status}", flush=True)
    for p, log, r in zip(procs, logs, runs):
        log.close()
        text = (r.out / "stdout.txt").read_text()
        if p.returncode != 0:
            sys.exit(f"error: {r.name} exited {p.returncode}: {text.strip().splitlines()[-1] if text.strip() else ''}")
        parse_run(r, text)


def sweep(args: argparse.Namespace) -> tuple[float, float, list[str]]:
    """(AdamW lr, Muon lr, report lines): the candidates with the lowest final val loss."""
    if args.sweep_steps == 0:
        return args.adamw_lrs[0], args.muon_lrs[0], ["no sweep: the first lr of each list"]
    results: list[RunResult] = []
    n = max(len(args.adamw_lrs), len(args.muon_lrs))
    for i in range(n):
        jobs = []
        if i < len(args.adamw_lrs):
            jobs.append((f"sweep_adamw_{args.adamw_lrs[i]:g}", "adamw", args.adamw_lrs[i], args.sweep_steps))
        if i < len(args.muon_lrs):
            jobs.append((f"sweep_muon_{args.muon_lrs[i]:g}", "muon", args.muon_lrs[i], args.sweep_steps))
        print(f"sweep {i + 1}/{n}: " + ", ".join(j[0] for j in jobs), flush=True)
        results += run_pair(args, args.sweep_model or args.model, jobs)
    lines = [f"lr sweep ({args.sweep_model or args.model}, {args.sweep_steps} steps each), final val loss:"]
    lines += [f"  {r.optimizer:5s} lr {r.lr:<8g} val {r.final_val():.4f}" for r in results]
    best = {opt: min((r for r in results if r.optimizer == opt), key=RunResult.final_val) for opt in ("adamw", "muon")}
    lines.append(f"picked: AdamW lr {best['adamw'].lr:g}, Muon lr {best['muon'].lr:g} (lowest final val loss)")
    return best["adamw"].lr, best["muon"].lr, lines


def val_at_time(run: RunResult, seconds: float) -> tuple[int, float]:
    """The last val point reached within `seconds` of training: (step, loss)."""
    points = [(s, v) for s, v in run.val if run.time_at(s) <= seconds + 1e-9]
    return points[-1]


def write_timed_log(run: RunResult, path: Path) -> None:
    """The run's main.log with t:SECONDS (training time after that many steps) on every line."""
    lines = []
    for line in (run.out / "main.log").read_text().splitlines():
        m = re.match(r"s:(\d+) ", line)
        if m:
            lines.append(f"{line} t:{run.time_at(int(m.group(1))):.3f}\n")
    path.write_text("".join(lines))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    adamw_lr, muon_lr, report = sweep(args)
    print("\n".join(report), flush=True)
    print(f"comparison: {args.steps} steps each", flush=True)
    adamw, muon = run_pair(args, args.model, [("adamw", "adamw", adamw_lr, args.steps), ("muon", "muon", muon_lr, args.steps)])
    for r in (adamw, muon):
        write_timed_log(r, args.out / f"{r.name}_timed.log")
    png = args.out / "compare_optimizers.png"
    subprocess.run([sys.executable, str(REPO / "dev" / "vislog.py"), str(adamw.out / "main.log"), str(muon.out / "main.log"),
                    "-l", f"AdamW lr {adamw_lr:g}", "-l", f"Muon lr {muon_lr:g}", "-o", str(png)], check=True)
    png_time = args.out / "compare_optimizers_time.png"
    subprocess.run([sys.executable, str(REPO / "dev" / "vislog.py"), str(args.out / "adamw_timed.log"),
                    str(args.out / "muon_timed.log"), "-l", f"AdamW lr {adamw_lr:g}", "-l", f"Muon lr {muon_lr:g}",
                    "--time", "-o", str(png_time)], check=True)
    equal_time = min(adamw.time_at(args.steps), muon.time_at(args.steps))
    (sa, va), (sm, vm) = val_at_time(adamw, equal_time), val_at_time(muon, equal_time)
    report += [
        f"model {args.model}, B={args.batch_size} T={args.seq_len}, tinyshakespeare, {args.steps} steps, "
        f"{args.threads} thread(s) per run, runs side by side",
        f"equal steps ({args.steps}): val loss AdamW {adamw.final_val():.4f}, Muon {muon.final_val():.4f}",
        f"training time: AdamW {adamw.time_at(args.steps):.0f} s ({1000 * adamw.time_at(args.steps) / args.steps:.0f} ms/step), "
        f"Muon {muon.time_at(args.steps):.0f} s ({1000 * muon.time_at(args.steps) / args.steps:.0f} ms/step)",
        f"equal time ({equal_time:.0f} s): val loss AdamW {va:.4f} (step {sa}), Muon {vm:.4f} (step {sm})",
        f"plots: {png}, {png_time}; wall time of the whole comparison {time.time() - t0:.0f} s",
    ]
    (args.out / "summary.txt").write_text("\n".join(report) + "\n")
    print("\n".join(report[-5:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
