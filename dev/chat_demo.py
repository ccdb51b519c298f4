"""
From a base model to one you can talk to, on the CPU: doc/chat.md's end-to-end run as one command.

    python dev/chat_demo.py                      # nanochat d4: base on Tiny Shakespeare, then fine-tuned on `reverse`
    python dev/chat_demo.py --base_steps 100 --sft_steps 100 --out out/chat_demo_quick

The steps, each printed with its command and timed:
    1. the programs (make), GPT-2's tokenizer files into --out (gpt2_chat_tokenizer.bin: what ./generate --chat
       encodes and decodes nanochat's turns with) and the Tiny Shakespeare shards (dev/data/tinyshakespeare.py)
    2. the base model: ./train_nanochat from scratch on them (-e d4)
    3. the task: dev/data/chat_tasks.py writes train and held-out conversations, dev/data/chat.py their chat shards
    4. dev/eval/chat_eval.py on the held-out conversations with the base model (before)
    5. fine-tuning: ./train_nanochat from the base model's file on the chat shards (the loss on the answers only)
    6. dev/eval/chat_eval.py again (after)
and at the end a table of the times and both evaluations. Everything goes under --out (the models, logs, the task's
files); the trainers' own output is in <out>/*.log.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
SHAKESPEARE = REPO / "dev/data/tinyshakespeare"


@dataclass
class Demo:
    args: argparse.Namespace
    out: Path
    timings: list[tuple[str, float]] = field(default_factory=list)

    def run(self, name: str, command: list[str], log: Path | None = None) -> str:
        """Run one step (its output to the terminal, and to log when given), timed; dies with its name on failure."""
        print(f"\n== {name}: {shlex.join(command)}", flush=True)
        start = time.monotonic()
        proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = []
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if self.args.verbose or not line.startswith(("step ", "-", "+", "|")):  # not the steps nor the flags table
                print(line, end="", flush=True)
            elif len(lines) % 50 == 0:
                print(line, end="", flush=True)  # every 50th step line: progress without the flood
        if proc.wait() != 0:
            sys.exit(f"error: {name} failed (exit {proc.returncode}): {shlex.join(command)}")
        elapsed = time.monotonic() - start
        self.timings.append((name, elapsed))
        text = "".join(lines)
        if log is not None:
            log.write_text(text)
        return text


def latest_model(directory: Path) -> Path:
    """The checkpoint of the highest step a trainer wrote into directory (model_<step>.bin)."""
    models = sorted(directory.glob("model_*.bin"))
    if not models:
        sys.exit(f"error: {directory}: no model_*.bin written")
    return models[-1]


def evaluation(text: str) -> str:
    """chat_eval.py's two result lines, joined."""
    lines = [line for line in text.splitlines() if line.startswith(("accuracy:", "ended with end token:"))]
    return "; ".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[1].strip() if __doc__ else None,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", default="out/chat_demo", help="directory for everything the run writes")
    p.add_argument("--model", default="d4", help="the base model's size (nanochat dN)")
    p.add_argument("--task", default="reverse", choices=("reverse", "lookup"), help="dev/data/chat_tasks.py's task")
    p.add_argument("--base_steps", type=int, default=600, help="base training steps on Tiny Shakespeare")
    p.add_argument("--base_batch", type=int, default=8, help="base training micro-batch B (T = 128)")
    p.add_argument("--sft_steps", type=int, default=600, help="fine-tuning steps")
    p.add_argument("--sft_batch", type=int, default=32, help="fine-tuning micro-batch B (T = --sft_seq_len)")
    p.add_argument("--sft_seq_len", type=int, default=32, help="T of the chat shards and the fine-tuning")
    p.add_argument("--n_train", type=int, default=20000, help="training conversations")
    p.add_argument("--n_val", type=int, default=200, help="held-out conversations chat_eval.py answers")
    p.add_argument("--precision", default="bf16", choices=("fp32", "bf16"), help="the trainers' -p")
    p.add_argument("--verbose", action="store_true", help="print every step line of the trainers")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = (REPO / args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    demo = Demo(args, out)
    total_start = time.monotonic()
    data = out / "data"
    precision = ["-p", args.precision]

    demo.run("build", ["make", "-s", "train_nanochat", "generate"])
    tokenizer = out / "gpt2_chat_tokenizer.bin"  # what ./generate --chat decodes and encodes nanochat's turns with
    if not tokenizer.exists():
        demo.run("tokenizer files", [PY, "-c", "import sys; from pyllmc.reference.tokenizer_files import "
                                               "write_gpt2_tokenizer; write_gpt2_tokenizer(sys.argv[1])",
                                     str(out / "gpt2_tokenizer.bin")])
    if not (SHAKESPEARE / "tiny_shakespeare_train.bin").exists():
        demo.run("data", [PY, "dev/data/tinyshakespeare.py"])
    demo.run("base model", ["./train_nanochat", "-e", args.model, "-t", "128", "-b", str(args.base_batch),
                            "-x", str(args.base_steps), "-op", "muon", "-ol", "0.02", "-l", "3e-3", "-u", "20",
                            "-q", "0.1", "-v", "100", "-m", "4", "-s", "0", "-n", str(args.base_steps),
                            "-o", str(out / "base"), *precision], out / "base.log")
    base = latest_model(out / "base")
    demo.run("task", [PY, "dev/data/chat_tasks.py", "--task", args.task, "--n_train", str(args.n_train),
                      "--n_val", str(args.n_val), "--seed", "1", "--data_dir", str(data)])
    demo.run("chat shards", [PY, "dev/data/chat.py", "--input", str(data / f"{args.task}_train.jsonl"),
                             "--val", str(data / f"{args.task}_val.jsonl"), "--data_dir", str(data),
                             "-t", str(args.sft_seq_len), "--name", args.task])
    val = str(data / f"{args.task}_val.jsonl")
    evaluate = [PY, "dev/eval/chat_eval.py", "-t", str(tokenizer), "--input", val, "-e"]
    before = evaluation(demo.run("eval before", [*evaluate, str(base)], out / "eval_before.log"))
    demo.run("fine-tuning", ["./train_nanochat", "-e", str(base), "-i", str(data / f"{args.task}_train.bin"),
                             "-j", str(data / f"{args.task}_val.bin"), "-t", str(args.sft_seq_len),
                             "-b", str(args.sft_batch), "-x", str(args.sft_steps), "-op", "muon", "-ol", "0.02",
                             "-l", "3e-3", "-u", "20", "-q", "0.1", "-v", "100", "-m", "4", "-s", "0",
                             "-n", str(args.sft_steps), "-o", str(out / "sft"), *precision], out / "sft.log")
    sft = latest_model(out / "sft")
    after = evaluation(demo.run("eval after", [*evaluate, str(sft)], out / "eval_after.log"))

    print("\n| step | seconds |\n| --- | --- |")
    for name, seconds in demo.timings:
        print(f"| {name} | {seconds:.0f} |")
    print(f"| total | {time.monotonic() - total_start:.0f} |")
    training = sum(s for n, s in demo.timings if n in ("base model", "fine-tuning"))
    print(f"\nbase model + fine-tuning: {training / 60:.1f} min")
    print(f"before: {before}\nafter:  {after}")
    print(f"chat with it: ./generate -e {sft} -t {tokenizer} --chat")
    return 0


if __name__ == "__main__":
    sys.exit(main())
