"""
Plots llmc training logs (main.log) to a PNG: train loss, val loss, and, when the logs have
them, the learning rate and HellaSwag accuracy. Several runs are overlaid and labelled.

    python dev/vislog.py log124M/main.log                       # -> vislog.png
    python dev/vislog.py runA/main.log runB/main.log -o cmp.png --ema 0.9
    python dev/vislog.py a.log b.log -l baseline -l "lr 6e-4"
    python dev/vislog.py a.log b.log --time                     # also val loss against wall time

Log lines (written by the trainers, llm.c's format):
    s:STEP trl:LOSS lr:LR norm:NORM     train step (lr and norm optional)
    s:STEP tel:LOSS                     validation loss
    s:STEP eval:ACC                     HellaSwag accuracy
Any line may also carry t:SECONDS, the training wall time at that step (dev/compare_optimizers.py
writes such logs); --time then adds a panel of val loss against it.
Lines that do not parse are skipped with a warning that counts them; a log with no
parsable line at all is an error.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Run:
    label: str
    train: list[tuple[int, float]] = field(default_factory=list)   # (step, loss)
    lr: list[tuple[int, float]] = field(default_factory=list)
    val: list[tuple[int, float]] = field(default_factory=list)
    hella: list[tuple[int, float]] = field(default_factory=list)
    val_time: list[tuple[float, float]] = field(default_factory=list)  # (seconds, loss) where lines have t:
    skipped: int = 0


def parse_line(line: str) -> dict[str, float] | None:
    """'s:10 trl:3.2 lr:0.0003' -> {'s': 10, 'trl': 3.2, 'lr': 0.0003}; None if malformed."""
    fields: dict[str, float] = {}
    for tok in line.split():
        key, sep, value = tok.partition(":")
        if not sep or not key:
            return None
        try:
            v = float(value)
        except ValueError:
            return None
        if not math.isfinite(v) and key == "s":
            return None
        fields[key] = v
    if "s" not in fields or not ({"trl", "tel", "eval"} & fields.keys()):
        return None
    return fields


def read_log(path: Path, label: str) -> Run:
    run = Run(label=label)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise SystemExit(f"error: {path}: cannot read ({e.strerror or e})")
    for line in text.splitlines():
        if not line.strip():
            continue
        f = parse_line(line)
        if f is None:
            run.skipped += 1
            continue
        step = int(f["s"])
        if "trl" in f:
            run.train.append((step, f["trl"]))
            if "lr" in f:
                run.lr.append((step, f["lr"]))
        if "tel" in f:
            run.val.append((step, f["tel"]))
            if "t" in f:
                run.val_time.append((f["t"], f["tel"]))
        if "eval" in f:
            run.hella.append((step, f["eval"]))
    if not (run.train or run.val or run.hella):
        raise SystemExit(f"error: {path}: no log lines parsed (expected lines like 's:STEP trl:LOSS lr:LR norm:NORM')")
    if run.skipped:
        print(f"warning: {path}: skipped {run.skipped} malformed line(s)", file=sys.stderr)
    return run


def ema(values: list[float], alpha: float) -> list[float]:
    """Exponential moving average with bias correction (alpha = weight of the past)."""
    out, avg = [], 0.0
    for i, v in enumerate(values):
        avg = alpha * avg + (1 - alpha) * v
        out.append(avg / (1 - alpha ** (i + 1)))
    return out


def default_labels(paths: list[Path]) -> list[str]:
    """Parent directory names (the run's output dir); file names if those collide."""
    labels = [p.resolve().parent.name or p.name for p in paths]
    if len(set(labels)) < len(labels):
        labels = [str(p) for p in paths]
    return labels


def plot(runs: list[Run], out: Path, smoothing: float | None, time_panel: bool = False) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = ["train", "val"]
    if time_panel:
        panels.append("val_time")
    if any(r.lr for r in runs):
        panels.append("lr")
    if any(r.hella for r in runs):
        panels.append("hella")
    ncols = 2 if len(panels) == 4 else min(len(panels), 3)   # 2, 3 in a row; 4 as a 2x2 grid; 5 as 3 + 2
    nrows = (len(panels) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.0 * ncols, 4.5 * nrows), squeeze=False)
    titles = {"train": "train loss", "val": "val loss", "lr": "learning rate", "hella": "HellaSwag accuracy",
              "val_time": "val loss against training time"}
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    for ax, panel in zip(axes.flat, panels):
        for i, r in enumerate(runs):
            color = f"C{i % 10}"
            series = {"train": r.train, "val": r.val, "lr": r.lr, "hella": r.hella, "val_time": r.val_time}[panel]
            if not series:
                continue
            series = sorted(dict(series).items())  # a resumed run may repeat steps: keep the last
            xs = [s for s, _ in series]
            ys = [v for _, v in series]
            if panel == "train" and smoothing is not None:
                ax.plot(xs, ys, color=color, alpha=0.25, linewidth=0.8)
                ax.plot(xs, ema(ys, smoothing), color=color, label=f"{r.label} (ema {smoothing})")
            else:
                ax.plot(xs, ys, color=color, label=r.label, marker="o" if len(xs) <= 30 else None, markersize=3)
        ax.set_title(titles[panel])
        ax.set_xlabel("training time (s)" if panel == "val_time" else "step")
        ax.grid(alpha=0.3)
        if ax.has_data():
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="gray")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=out.name + ".tmp.", suffix=".png", dir=out.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=100)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Plot llmc main.log files (train/val loss, LR, HellaSwag) to a PNG.")
    ap.add_argument("logs", nargs="+", type=Path, help="main.log files, one per run")
    ap.add_argument("-o", "--output", type=Path, default=Path("vislog.png"), help="PNG to write (default: vislog.png)")
    ap.add_argument("-l", "--label", action="append", default=None,
                    help="label of a run, once per log in order (default: the log's parent directory)")
    ap.add_argument("--ema", type=float, default=None, metavar="ALPHA",
                    help="smooth the train loss with an EMA of this weight in [0, 1), e.g. 0.9")
    ap.add_argument("--time", action="store_true",
                    help="add a panel of val loss against training time (the logs' t:SECONDS fields)")
    args = ap.parse_args(argv)
    if args.label is not None and len(args.label) != len(args.logs):
        ap.error(f"-l/--label given {len(args.label)} time(s) for {len(args.logs)} log(s)")
    if args.ema is not None and not 0.0 <= args.ema < 1.0:
        ap.error(f"--ema {args.ema}: must be in [0, 1)")
    for p in args.logs:
        if not p.is_file():
            raise SystemExit(f"error: {p}: log file not found")
    labels = args.label or default_labels(args.logs)
    runs = [read_log(p, lab) for p, lab in zip(args.logs, labels)]
    if args.time and not any(r.val_time for r in runs):
        raise SystemExit("error: --time: no val line of the logs has a t:SECONDS field")
    plot(runs, args.output, args.ema, args.time)
    print(f"wrote {args.output} ({len(runs)} run(s))")


if __name__ == "__main__":
    main()
