"""One family with AdamW against another with Muon + AdamW, on the CPU trainers, at equal steps and batch; by
default the registry's first family (GPT-2) against the next one that trains on its shards (nanochat's GPT).

    python dev/compare_families.py                  # d6 both, B=4 T=64, 500 steps, val loss every 50 steps
    python dev/compare_families.py --model d2 --steps 100 --val_every 20
    python dev/compare_families.py --adamw_family nanochat --muon_family nanochat   # one family, both optimizers

./train_<adamw_family> -e dN trains with AdamW at --adamw_lr; ./train_<muon_family> -e dN with Muon at --muon_lr on
the blocks' matrices and AdamW at --muon_adamw_lr on the embedding and the head. Both read the same tinyshakespeare
batches (the two families must share their shards: the reference's --input_bin default), warm up for 5 % of the
steps and decay (cosine) to 10 %; the two runs go side by side, --threads each, so both see the same machine load.
Everything lands in --out: per run its main.log and stdout, the PNG (dev/vislog.py: loss against steps) and
summary.md, the table of val losses and the median ms per step, with the CPU it came from.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from bench import cpu_description
from compare_optimizers import RunResult, run_side_by_side
from pyllmc.families import NAMES, REGISTRY, Registered, by_name

REPO = Path(__file__).resolve().parent.parent
# the default pair: the registry's first family, and the next one that reads the same shards
DEFAULT_ADAMW = REGISTRY[0]
DEFAULT_MUON = next((row for row in REGISTRY[1:] if row.family.default_input_bin == DEFAULT_ADAMW.family.default_input_bin),
                    DEFAULT_ADAMW)


def shards(row: Registered) -> tuple[Path, Path]:
    """(train, val) tinyshakespeare shards of the family: its reference's --input_bin default and the train file beside."""
    val = REPO / row.family.default_input_bin
    return val.with_name("tiny_shakespeare_train.bin"), val


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("--model", default="d6", help="dN of both families (d6: GPT-2 C=384 6 heads; nanochat C=384, 3 heads of 128)")
    a("--batch_size", type=int, default=4)
    a("--seq_len", type=int, default=64)
    a("--steps", type=int, default=500)
    a("--val_every", type=int, default=50)
    a("--val_batches", type=int, default=8, help="val batches per evaluation")
    a("--adamw_family", default=DEFAULT_ADAMW.name, choices=NAMES,
      help=f"the family trained with AdamW (default {DEFAULT_ADAMW.name})")
    a("--muon_family", default=DEFAULT_MUON.name, choices=NAMES,
      help=f"the family trained with Muon + AdamW (default {DEFAULT_MUON.name})")
    a("--adamw_lr", type=float, default=1e-3, help="the AdamW family's lr (doc/muon.md's pick for GPT-2 d6)")
    a("--muon_lr", type=float, default=0.02, help="the Muon family's Muon lr on the block matrices")
    a("--muon_adamw_lr", type=float, default=3e-3, help="the Muon family's AdamW lr on the embedding and the head")
    a("--threads", type=int, default=1, help="OpenMP threads per run (the two runs go side by side)")
    a("--out", type=Path, default=REPO / "build" / "compare_families", help="output directory")
    args = p.parse_args(argv)
    adamw, muon = by_name(args.adamw_family), by_name(args.muon_family)
    if shards(adamw) != shards(muon):
        p.error(f"--adamw_family {adamw.name} and --muon_family {muon.name} read different shards "
                f"({adamw.family.default_input_bin}, {muon.family.default_input_bin}): no equal batches to compare on")
    for row in (adamw, muon):
        if not (REPO / row.trainer).exists():
            p.error(f"{REPO / row.trainer}: not found (make {row.trainer})")
    train_bin = shards(adamw)[0]
    if not train_bin.exists():
        p.error(f"{train_bin}: not found (python dev/data/tinyshakespeare.py)")
    if args.steps < 1 or args.val_every < 1 or args.batch_size < 1 or args.seq_len < 1:
        p.error("--steps, --val_every, --batch_size and --seq_len must be positive")
    return args


def command(args: argparse.Namespace, row: Registered, out: Path, optimizer: list[str]) -> list[str]:
    """The family's trainer's command line: the shared data, shape, schedule and evaluation, then its optimizer flags."""
    train_bin, val_bin = shards(row)
    return [str(REPO / row.trainer), "-e", args.model, "-i", str(train_bin), "-j", str(val_bin), "-b", str(args.batch_size),
            "-t", str(args.seq_len), "-x", str(args.steps), "-v", str(args.val_every), "-m", str(args.val_batches), "-s", "0", "-o", str(out),
            "-u", str(max(1, args.steps // 20)), "-q", "0.1", *optimizer]


def run_names(adamw: Registered, muon: Registered) -> tuple[str, str]:
    """The two runs' names (their directories in --out): the families', with the optimizer where they are one."""
    if adamw.name != muon.name:
        return adamw.name, muon.name
    return f"{adamw.name}_adamw", f"{muon.name}_muon"


def summary(args: argparse.Namespace, runs: list[RunResult], labels: list[str], png: Path) -> list[str]:
    """The markdown table (val loss at every evaluation, median ms per step) and the lines around it."""
    steps = sorted(set.intersection(*({s for s, _ in r.val} for r in runs)))
    shard_format = by_name(args.adamw_family).family.shards.model_desc
    lines = [f"CPU: {cpu_description()}",
             f"model {args.model}, B={args.batch_size}, T={args.seq_len}, tinyshakespeare ({shard_format} tokens), "
             f"{args.steps} steps, {args.threads} thread(s) per run, the two runs side by side", "",
             "| val loss at step | " + " | ".join(str(s) for s in steps) + " | ms/step (median) |",
             "| --- | " + " | ".join("---" for _ in steps) + " | --- |"]
    for r, label in zip(runs, labels):
        val = dict(r.val)
        ms = 1000 * statistics.median(r.step_seconds)
        lines.append(f"| {label} | " + " | ".join(f"{val[s]:.3f}" for s in steps) + f" | {ms:.0f} |")
    lines += ["", f"plot: {png}"]
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    adamw, muon = by_name(args.adamw_family), by_name(args.muon_family)
    adamw_name, muon_name = run_names(adamw, muon)
    runs = [RunResult(adamw_name, "adamw", args.adamw_lr, args.out / adamw_name),
            RunResult(muon_name, "muon", args.muon_lr, args.out / muon_name)]
    cmds = [command(args, adamw, runs[0].out, ["-op", "adamw", "-l", str(args.adamw_lr)]),
            command(args, muon, runs[1].out, ["-op", "muon", "-ol", str(args.muon_lr), "-l", str(args.muon_adamw_lr)])]
    labels = [f"{adamw.name} {args.model}, AdamW lr {args.adamw_lr:g}",
              f"{muon.name} {args.model}, Muon lr {args.muon_lr:g} + AdamW lr {args.muon_adamw_lr:g}"]
    print(f"{args.model}: {adamw.name} (AdamW) beside {muon.name} (Muon + AdamW), {args.steps} steps each", flush=True)
    run_side_by_side(runs, cmds, [args.steps, args.steps], args.threads)
    png = args.out / "compare_families.png"
    subprocess.run([sys.executable, str(REPO / "dev" / "vislog.py"), str(runs[0].out / "main.log"),
                    str(runs[1].out / "main.log"), "-l", f"{adamw.name} {args.model} AdamW",
                    "-l", f"{muon.name} {args.model} Muon + AdamW", "-o", str(png)], check=True)
    lines = summary(args, runs, labels, png)
    (args.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
