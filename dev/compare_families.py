"""GPT-2 with AdamW against nanochat's GPT with Muon + AdamW, on the CPU trainers, at equal steps and batch.

    python dev/compare_families.py                  # d6 both, B=4 T=64, 500 steps, val loss every 50 steps
    python dev/compare_families.py --model d2 --steps 100 --val_every 20

./train_gpt2 -e dN (learned positions, LayerNorm, GELU, tied head) trains with AdamW at --gpt2_lr;
./train_nanochat -e dN (RoPE, QK-norm, ReLU^2, untied head, softcap) with Muon at --muon_lr on the blocks'
matrices and AdamW at --nanochat_adamw_lr on the embedding and the head. Both read the same tinyshakespeare
batches, warm up for 5 % of the steps and decay (cosine) to 10 %; the two runs go side by side, --threads each,
so both see the same machine load. Everything lands in --out: per run its main.log and stdout, the PNG
(dev/vislog.py: loss against steps) and summary.md, the table of val losses and the median ms per step, with
the CPU it came from.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from bench import cpu_description
from compare_optimizers import RunResult, run_side_by_side

REPO = Path(__file__).resolve().parent.parent
TS = REPO / "dev" / "data" / "tinyshakespeare"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("--model", default="d6", help="dN of both families (d6: GPT-2 C=384 6 heads; nanochat C=384, 3 heads of 128)")
    a("--batch_size", type=int, default=4)
    a("--seq_len", type=int, default=64)
    a("--steps", type=int, default=500)
    a("--val_every", type=int, default=50)
    a("--val_batches", type=int, default=8, help="val batches per evaluation")
    a("--gpt2_lr", type=float, default=1e-3, help="GPT-2's AdamW lr (doc/muon.md's pick for d6)")
    a("--muon_lr", type=float, default=0.02, help="nanochat's Muon lr on the block matrices")
    a("--nanochat_adamw_lr", type=float, default=3e-3, help="nanochat's AdamW lr on the embedding and the head")
    a("--threads", type=int, default=1, help="OpenMP threads per run (the two runs go side by side)")
    a("--out", type=Path, default=REPO / "build" / "compare_families", help="output directory")
    args = p.parse_args(argv)
    for trainer in ("train_gpt2", "train_nanochat"):
        if not (REPO / trainer).exists():
            p.error(f"{REPO / trainer}: not found (make {trainer})")
    if not (TS / "tiny_shakespeare_train.bin").exists():
        p.error(f"{TS}/tiny_shakespeare_train.bin: not found (python dev/data/tinyshakespeare.py)")
    if args.steps < 1 or args.val_every < 1 or args.batch_size < 1 or args.seq_len < 1:
        p.error("--steps, --val_every, --batch_size and --seq_len must be positive")
    return args


def command(args: argparse.Namespace, trainer: str, out: Path, optimizer: list[str]) -> list[str]:
    """The trainer's command line: the shared data, shape, schedule and evaluation, then its optimizer flags."""
    return [str(REPO / trainer), "-e", args.model, "-i", str(TS / "tiny_shakespeare_train.bin"),
            "-j", str(TS / "tiny_shakespeare_val.bin"), "-b", str(args.batch_size), "-t", str(args.seq_len),
            "-x", str(args.steps), "-v", str(args.val_every), "-m", str(args.val_batches), "-s", "0", "-o", str(out),
            "-u", str(max(1, args.steps // 20)), "-q", "0.1", *optimizer]


def summary(args: argparse.Namespace, gpt2: RunResult, nanochat: RunResult, png: Path) -> list[str]:
    """The markdown table (val loss at every evaluation, median ms per step) and the lines around it."""
    steps = sorted({s for s, _ in gpt2.val} & {s for s, _ in nanochat.val})
    val = {r.name: dict(r.val) for r in (gpt2, nanochat)}
    lines = [f"CPU: {cpu_description()}",
             f"model {args.model}, B={args.batch_size}, T={args.seq_len}, tinyshakespeare (GPT-2 tokens), {args.steps} steps, "
             f"{args.threads} thread(s) per run, the two runs side by side", "",
             "| val loss at step | " + " | ".join(str(s) for s in steps) + " | ms/step (median) |",
             "| --- | " + " | ".join("---" for _ in steps) + " | --- |"]
    labels = {gpt2.name: f"GPT-2 {args.model}, AdamW lr {args.gpt2_lr:g}",
              nanochat.name: f"nanochat {args.model}, Muon lr {args.muon_lr:g} + AdamW lr {args.nanochat_adamw_lr:g}"}
    for r in (gpt2, nanochat):
        ms = 1000 * statistics.median(r.step_seconds)
        lines.append(f"| {labels[r.name]} | " + " | ".join(f"{val[r.name][s]:.3f}" for s in steps) + f" | {ms:.0f} |")
    lines += ["", f"plot: {png}"]
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    gpt2 = RunResult("gpt2", "adamw", args.gpt2_lr, args.out / "gpt2")
    nanochat = RunResult("nanochat", "muon", args.muon_lr, args.out / "nanochat")
    cmds = [command(args, "train_gpt2", gpt2.out, ["-op", "adamw", "-l", str(args.gpt2_lr)]),
            command(args, "train_nanochat", nanochat.out,
                    ["-op", "muon", "-ol", str(args.muon_lr), "-l", str(args.nanochat_adamw_lr)])]
    print(f"{args.model}: GPT-2 (AdamW) beside nanochat (Muon + AdamW), {args.steps} steps each", flush=True)
    run_side_by_side([gpt2, nanochat], cmds, [args.steps, args.steps], args.threads)
    png = args.out / "compare_families.png"
    subprocess.run([sys.executable, str(REPO / "dev" / "vislog.py"), str(gpt2.out / "main.log"),
                    str(nanochat.out / "main.log"), "-l", f"GPT-2 {args.model} AdamW",
                    "-l", f"nanochat {args.model} Muon + AdamW", "-o", str(png)], check=True)
    lines = summary(args, gpt2, nanochat, png)
    (args.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
